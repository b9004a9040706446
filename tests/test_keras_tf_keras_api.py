"""tf_keras API that TF's Keras 2 guides use around ``compile(optimizer=tf.keras.optimizers.X(...))``
(round eleven (a) of the user programs, ``tests/parity/test_user_programs11a.py``):
``model.compiled_loss`` / ``model.compiled_metrics`` in a TF-style ``train_step``
(``tapejax/keras/trainer.py``), ``model.summary()`` and Keras 3's ``optimizer.built`` with a
tapejax optimizer, ``tf.keras.backend.get_value`` / ``set_value`` (``tapejax/keras/namespace.py``),
and a new optimizer's ``learning_rate`` under a schedule (``tapejax/optimizers/_ema.py``)."""
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras

RS = np.random.RandomState(0)
X = RS.randn(16, 5).astype(np.float32)
Y = RS.randn(16, 1).astype(np.float32)


def _regularised(seed=1, l2=0.5):
    inp = keras.Input((5,))
    out = keras.layers.Dense(1, kernel_regularizer=keras.regularizers.L2(l2))(inp)
    model = keras.Model(inp, out)
    rs = np.random.RandomState(seed)
    model.set_weights([(rs.randn(*w.shape) * 0.3).astype(np.float32) for w in model.get_weights()])
    return model


def test_compiled_loss_adds_the_regularization_losses_it_is_given_and_tracks_the_loss():
    """tf_keras' ``compiled_loss``: the compiled loss plus the ``regularization_losses`` passed (none
    when not passed), and the ``loss`` tracker updated with that total."""
    model = _regularised()
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    with tf.GradientTape() as tape:
        y_pred = model(X)
        with_reg = model.compiled_loss(Y, y_pred, regularization_losses=model.losses)
    plain = model.compiled_loss(Y, y_pred)
    mse = float(np.mean((y_pred.numpy() - Y) ** 2))
    reg = 0.5 * float(np.sum(np.square(model.layers[1].kernel.numpy())))
    np.testing.assert_allclose(plain.numpy(), mse, rtol=1e-5)
    np.testing.assert_allclose(with_reg.numpy(), mse + reg, rtol=1e-5)
    assert tape.gradient(with_reg, model.layers[1].kernel) is not None
    tracker = [m for m in model.metrics if m.name == "loss"][0]
    np.testing.assert_allclose(float(tracker.result()), (mse + reg + mse) / 2, rtol=1e-5)
    model.compiled_metrics.update_state(Y, y_pred)
    assert [m.name for m in model.compiled_metrics.metrics] == ["mae"]
    np.testing.assert_allclose(float(model.compiled_metrics.result()["mae"]), np.mean(np.abs(y_pred.numpy() - Y)),
                               rtol=1e-5)
    model.compiled_metrics.reset_state()
    assert float(model.compiled_metrics.result()["mae"]) == 0.0


class GuideModel(keras.Model):
    """The Keras 2 "customizing what happens in fit" guide's ``train_step``."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def test_the_guides_train_step_with_compiled_loss_trains_as_the_default_step():
    ref = _regularised(seed=2)
    inp = keras.Input((5,))
    model = GuideModel(inp, keras.layers.Dense(1, kernel_regularizer=keras.regularizers.L2(0.5))(inp))
    model.set_weights(ref.get_weights())
    for m in (ref, model):
        m.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), loss="mse", metrics=["mae"])
    h_ref = ref.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h = model.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    assert sorted(h.history) == ["loss", "mae"]
    for k in ("loss", "mae"):
        np.testing.assert_allclose(h.history[k], h_ref.history[k], rtol=1e-5)
    for v, w in zip(model.weights, ref.weights):
        np.testing.assert_allclose(v.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: tf.keras.optimizers.Adam(0.01), lambda: tf.keras.optimizers.legacy.Adam(0.01)])
def test_summary_after_compile_and_fit_with_a_tapejax_optimizer(make):
    """``model.summary()`` (Keras 3 reads ``optimizer.built``, then counts a built optimizer's
    variables) prints tf_keras' lines, no optimizer parameters; ``built`` follows the slots."""
    model = _regularised()
    opt = make()
    assert opt.built is False
    model.compile(optimizer=opt, loss="mse")
    lines = []
    model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line))
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    assert opt.built is True
    model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line))
    text = "\n".join(lines)
    assert "Total params: 6" in text and "Optimizer params" not in text
    scaled = tf.keras.mixed_precision.LossScaleOptimizer(make())
    assert scaled.built is False


def test_backend_get_value_and_set_value():
    """``tf.keras.backend.get_value`` / ``set_value`` (and the batch forms) on tapejax Variables and
    Tensors, Keras Variables, and plain values."""
    opt = tf.keras.optimizers.SGD(0.1)
    K = tf.keras.backend
    assert isinstance(K.get_value(opt.learning_rate), np.float32)   # (as TF's Variable.numpy())
    np.testing.assert_allclose(K.get_value(opt.learning_rate), 0.1)
    K.set_value(opt.lr, 0.05)
    np.testing.assert_allclose(opt.learning_rate.numpy(), 0.05)
    assert K.get_value(0.5) == 0.5
    np.testing.assert_array_equal(K.get_value(tf.constant([1, 2])), [1, 2])
    dense = keras.layers.Dense(2)
    dense.build((None, 3))
    K.set_value(dense.bias, [1, 2])   # (ints cast to the Variable's float32)
    np.testing.assert_array_equal(K.get_value(dense.bias), np.float32([1, 2]))
    K.batch_set_value([(dense.bias, [3.0, 4.0]), (opt.learning_rate, 0.2)])
    got = K.batch_get_value([dense.bias, opt.learning_rate])
    np.testing.assert_allclose(got[0], [3.0, 4.0])
    np.testing.assert_allclose(got[1], 0.2)
    assert K.floatx() == "float32"   # (Keras's own names still there)
    assert K.batch_flatten(tf.zeros((2, 3, 4))).shape == (2, 12)   # (Keras 2's, on tapejax: legacy_backend)
    with pytest.raises(AttributeError):
        K.placeholder   # noqa: B018  (TF1's, which Keras 3's legacy backend has not either)


def test_a_new_optimizers_learning_rate_under_a_schedule_is_the_last_steps_rate():
    """tf_keras' new optimizers give the rate the last update used (``current_learning_rate``): the
    schedule at ``iterations - 1`` (step 0 before any update); the legacy ones give the schedule;
    the schedule stays in the config, and a float rate is the Variable as before."""
    S = tf.keras.optimizers.schedules
    sched = S.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    opt = tf.keras.optimizers.SGD(sched)
    w = tf.Variable([1.0])
    np.testing.assert_allclose(float(opt.learning_rate), 0.1)
    for step in range(3):
        opt.apply_gradients([(tf.constant([1.0]), w)])
        np.testing.assert_allclose(float(opt.learning_rate), 0.1 * 0.5 ** step, rtol=1e-6)
        np.testing.assert_allclose(float(opt.lr), 0.1 * 0.5 ** step, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), [1.0 - 0.1 - 0.05 - 0.025], rtol=1e-6)
    assert opt.get_config()["learning_rate"] is sched
    assert tf.keras.optimizers.legacy.SGD(sched).learning_rate is sched
    assert isinstance(tf.keras.optimizers.SGD(0.1).learning_rate, tf.Variable)
    scaled = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(sched))
    np.testing.assert_allclose(float(scaled.learning_rate), 0.1)

    @tf.function
    def read():
        return opt.learning_rate * 1.0
    np.testing.assert_allclose(float(read()), 0.025, rtol=1e-6)
    opt.learning_rate = S.PiecewiseConstantDecay([1], [1.0, 2.0])   # (a new schedule, at step 3: 2.0)
    np.testing.assert_allclose(float(opt.learning_rate), 2.0)


def test_metric_reset_states_and_backend_eval_int_shape_count_params():
    """tf_keras names a TF 2 custom loop uses that Keras 3 dropped: ``metric.reset_states()`` (the
    older name of ``reset_state``, on every metric class, a subclass made later too),
    ``backend.eval`` (a value as NumPy), ``int_shape`` and ``count_params``; they raised
    AttributeError.  Oracle: TF 2.21 with tf_keras."""
    acc = tf.keras.metrics.SparseCategoricalAccuracy()
    acc.update_state(np.array([0, 1]), np.array([[0.9, 0.1], [0.8, 0.2]], np.float32))
    assert float(acc.result()) == 0.5
    acc.reset_states()
    assert float(acc.result()) == 0.0 and float(acc.count) == 0.0

    class Total(tf.keras.metrics.Sum):
        pass

    tot = Total()
    tot.update_state(3.0)
    tot.reset_states()
    assert float(tot.result()) == 0.0
    w = tf.Variable(np.ones((4, 3), np.float32))
    assert tf.keras.backend.int_shape(w) == (4, 3) and tf.keras.backend.int_shape(tf.zeros([2])) == (2,)
    assert tf.keras.backend.count_params(w) == 12
    v = tf.keras.backend.eval(tf.reduce_sum(w))
    assert isinstance(v, np.float32) and v == 12.0


def test_backend_random_functions():
    """``tf.keras.backend.random_normal`` / ``random_uniform`` / ``truncated_normal`` /
    ``random_bernoulli`` (the legacy backend's): floatx by default, a dtype given, TF's global
    stream (``set_seed`` repeats it, calls differ), bernoulli's extremes, shapes holding Tensors."""
    K = keras.backend
    tf.random.set_seed(3)
    a = [K.random_normal((2, 3)), K.random_uniform((4,), 2.0, 3.0), K.truncated_normal((5,), stddev=0.1)]
    tf.random.set_seed(3)
    b = [K.random_normal((2, 3)), K.random_uniform((4,), 2.0, 3.0), K.truncated_normal((5,), stddev=0.1)]
    for x, y in zip(a, b):
        assert x.dtype == tf.float32
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert not np.array_equal(K.random_normal((2, 3)).numpy(), a[0].numpy())
    u = a[1].numpy()
    assert ((u >= 2.0) & (u < 3.0)).all() and (np.abs(a[2].numpy()) <= 0.2).all()
    assert K.random_normal((2,), dtype="float16").dtype == tf.float16
    z = tf.zeros((3, 2))
    assert K.random_normal(shape=(tf.shape(z)[0], tf.shape(z)[1])).shape == (3, 2)
    np.testing.assert_array_equal(K.random_bernoulli((4,), p=0.0).numpy(), np.zeros(4, np.float32))
    np.testing.assert_array_equal(K.random_bernoulli((4,), p=1.0).numpy(), np.ones(4, np.float32))


def test_the_tf_era_vae_sampling_layer_trains_under_fit():
    """keras.io's TF-era VAE: a ``Sampling`` layer drawing ``backend.random_normal(shape=(batch,
    dim))``, in an encoder built functionally, trained by a TF-style ``train_step`` under
    ``compile(optimizer="adam")``; the encoder's samples differ between two predictions."""
    class Sampling(keras.layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            eps = keras.backend.random_normal(shape=(tf.shape(z_mean)[0], tf.shape(z_mean)[1]))
            return z_mean + tf.exp(0.5 * z_log_var) * eps

    inp = keras.Input((5,))
    h = keras.layers.Dense(4, activation="relu")(inp)
    zm, zl = keras.layers.Dense(2)(h), keras.layers.Dense(2)(h)
    encoder = keras.Model(inp, [zm, zl, Sampling()([zm, zl])])
    decoder = keras.Sequential([keras.Input((2,)), keras.layers.Dense(5)])

    class VAE(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = encoder, decoder

        def train_step(self, data):
            with tf.GradientTape() as tape:
                z_mean, z_log_var, z = self.encoder(data)
                rec = tf.reduce_mean(tf.reduce_sum(tf.square(data - self.decoder(z)), axis=1))
                kl = tf.reduce_mean(tf.reduce_sum(-0.5 * (1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var)), 1))
                loss = rec + kl
            grads = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            return {"loss": loss}

    vae = VAE()
    vae.compile(optimizer="adam")
    hist = vae.fit(X, epochs=2, batch_size=8, verbose=0).history["loss"]
    assert len(hist) == 2 and np.isfinite(hist).all()
    assert not np.allclose(encoder.predict(X, verbose=0)[2], encoder.predict(X, verbose=0)[2])


def test_keras_io_ocr_ctc_layer_trains_under_fit():
    """keras.io's TF-era OCR model: a ``CTCLayer`` adding ``keras.backend.ctc_batch_cost`` as its
    loss inside the model's (traced) call, lengths from ``tf.shape``; ``fit`` with "adam" trains it
    (the loss falls) and ``ctc_decode`` reads the predictions (Keras's own ``ctc_batch_cost`` masks
    the labels by value, which a traced call cannot)."""
    class CTCLayer(keras.layers.Layer):
        def call(self, y_true, y_pred):
            batch = tf.cast(tf.shape(y_true)[0], "int64")
            input_length = tf.cast(tf.shape(y_pred)[1], "int64") * tf.ones((batch, 1), "int64")
            label_length = tf.cast(tf.shape(y_true)[1], "int64") * tf.ones((batch, 1), "int64")
            self.add_loss(keras.backend.ctc_batch_cost(y_true, y_pred, input_length, label_length))
            return y_pred

    rs = np.random.RandomState(0)
    images = rs.randn(8, 6, 4).astype(np.float32)
    labels = rs.randint(0, 3, (8, 2)).astype(np.float32)
    img, lab = keras.Input((6, 4), name="image"), keras.Input((2,), name="label")
    probs = keras.layers.Dense(4, activation="softmax")(keras.layers.Dense(8, activation="relu")(img))
    model = keras.Model([img, lab], CTCLayer()(lab, probs))
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    hist = model.fit({"image": images, "label": labels}, epochs=4, batch_size=4, verbose=0).history["loss"]
    assert np.isfinite(hist).all() and hist[-1] < hist[0]
    pred = keras.Model(img, probs).predict(images, verbose=0)
    decoded = keras.backend.ctc_decode(pred, input_length=np.full(8, 6), greedy=True)[0][0]
    assert decoded.shape == (8, 6) and int(tf.reduce_max(decoded)) < 3
