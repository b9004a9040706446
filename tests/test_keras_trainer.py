"""tapejax/keras/trainer.py: compile / fit / evaluate / predict as Keras 3 on JAX; a TF-style
``train_step(self, data)`` trains under fit (compiled, or eagerly with run_eagerly=True);
``compute_loss`` on the tape."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras
import keras as K3  # noqa: E402

RS = np.random.RandomState(0)
X = RS.randn(48, 5).astype(np.float32)
Y = RS.randint(0, 3, size=48).astype(np.int32)


def functional(cls=K3.Model):
    inp = keras.Input((5,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    h = keras.layers.BatchNormalization()(h)
    out = keras.layers.Dense(3)(h)
    model = cls(inp, out)
    rs = np.random.RandomState(1)
    model.set_weights([np.abs(w) + 0.5 if "variance" in v.path else (rs.randn(*w.shape) * 0.3).astype(np.float32)
                       for v, w in zip(model.weights, model.get_weights())])
    return model


class TFStyle(K3.Model):
    """The TF guide's "customizing what happens in fit" train_step / test_step."""

    steps = 0

    def train_step(self, data):
        TFStyle.steps += 1   # (counts Python runs: traces when compiled)
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        for m in self.metrics:
            if m.name == "loss":
                m.update_state(loss)
            else:
                m.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for m in self.metrics:
            if m.name == "loss":
                m.update_state(loss)
            else:
                m.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def compiled(model, run_eagerly=False):
    model.compile(optimizer=K3.optimizers.Adam(0.01), run_eagerly=run_eagerly,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def test_fit_evaluate_predict_are_keras_own():
    model = compiled(functional())
    hist = model.fit(X, Y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    assert len(hist.history["loss"]) == 2 and hist.history["loss"][1] < hist.history["loss"][0]
    loss, acc = model.evaluate(X, Y, verbose=0)
    pred = model.predict(X, verbose=0)
    assert isinstance(pred, np.ndarray) and pred.shape == (48, 3)
    np.testing.assert_allclose(pred, model(X, training=False).numpy(), rtol=1e-5, atol=1e-5)
    want = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, pred)
    np.testing.assert_allclose(loss, np.asarray(want), rtol=1e-4)


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_tf_style_train_step_trains_as_keras_own_fit(run_eagerly):
    ref = compiled(functional())
    model = compiled(functional(TFStyle), run_eagerly=run_eagerly)
    TFStyle.steps = 0
    h_ref = ref.fit(X, Y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    h = model.fit(X, Y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    for k in ("loss", "accuracy"):
        np.testing.assert_allclose(h.history[k], h_ref.history[k], rtol=1e-4, atol=1e-5)
    for v, w in zip(model.variables, ref.variables):
        np.testing.assert_allclose(v.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
    assert TFStyle.steps == (6 if run_eagerly else 1)   # compiled: one trace (Keras built the optimizer)
    e_ref = ref.evaluate(X, Y, batch_size=16, verbose=0, return_dict=True)   # (equal batches: the guide's
    e = model.evaluate(X, Y, batch_size=16, verbose=0, return_dict=True)   # loss mean is unweighted)
    for k in e_ref:
        np.testing.assert_allclose(e[k], e_ref[k], rtol=1e-4)


def test_compute_loss_is_one_op_on_the_tape():
    model = compiled(functional())
    model(X)
    ntv = [v.value for v in model.non_trainable_variables]
    with tf.GradientTape() as tape:
        y_pred = model(X, training=False)
        loss = model.compute_loss(x=X, y=Y, y_pred=y_pred)
        names = [n.prim.name for n in tape._nodes]
    assert names.count("KerasCallN") + names.count("KerasCall") == 2   # the model call, the loss
    grads = tape.gradient(loss, model.trainable_variables)

    def ref(tv):
        logits, _ = model.stateless_call(tv, ntv, jnp.asarray(X), training=False)
        return K3.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, logits)

    want = jax.grad(ref)([v.value for v in model.trainable_variables])
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def test_compute_loss_includes_model_losses():
    inp = keras.Input((5,))
    out = keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(0.5))(inp)
    model = compiled(K3.Model(inp, out))
    with tf.GradientTape() as tape:
        y_pred = model(X)
        loss = model.compute_loss(y=Y, y_pred=y_pred)
    data = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, y_pred)
    reg = 0.5 * np.sum(np.square(model.layers[1].kernel.numpy()))
    np.testing.assert_allclose(loss.numpy(), data.numpy() + reg, rtol=1e-5)
    g = tape.gradient(loss, model.layers[1].kernel)
    assert g is not None


def test_compile_with_a_tapejax_optimizer_keeps_the_users_object_and_its_slots(monkeypatch):
    """``compile(optimizer=tf.keras.optimizers.Adam(...))``: the model keeps that object, Keras's
    build makes its slots (so the compiled step creates none: one trace), fit trains with TF's
    default step, and the slots hold real values afterwards (Keras's state round-trip never
    emptied them)."""
    model = functional()
    opt = tf.keras.optimizers.Adam(0.01)
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    assert model.optimizer is opt
    from tapejax.keras import trainer
    runs = []
    step = trainer._tf_train_step
    monkeypatch.setattr(trainer, "_tf_train_step", lambda m, d: runs.append(1) or step(m, d))
    h = model.fit(X, Y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    assert len(runs) == 1   # one trace for six steps
    assert set(h.history) == {"loss", "accuracy"} and h.history["loss"][1] < h.history["loss"][0]
    assert int(opt.iterations.numpy()) == 6
    assert len(opt.variables) == 1 + 2 * len(model.trainable_variables)
    assert all(np.isfinite(v.numpy()).all() for v in opt.variables)
    m = opt.get_slot(model.trainable_variables[0], "m")
    assert np.abs(m.numpy()).sum() > 0
    assert model.train_function is not None
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    assert int(opt.iterations.numpy()) == 9
    model.compile(optimizer=K3.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)   # (Keras's own path again)
    assert int(opt.iterations.numpy()) == 9 and int(model.optimizer.iterations.numpy()) == 3


class StatelessStep(K3.Model):
    def train_step(self, state, data):   # Keras 3's JAX form
        return super().train_step(state, data)


def test_a_keras_3_stateless_train_step_with_a_tapejax_optimizer_is_a_clear_error():
    model = functional(StatelessStep)
    before = [v.numpy() for v in model.weights]
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(TypeError, match=r"StatelessStep.train_step\(self, state, data\) is Keras 3's stateless form"):
        model.fit(X, Y, batch_size=16, epochs=1, verbose=0)
    for v, w in zip(model.weights, before):
        np.testing.assert_array_equal(v.numpy(), w)


def test_save_and_load_keep_a_tapejax_optimizers_config_and_state(tmp_path):
    """``model.save`` after a fit with tapejax's Adam: ``load_model`` compiles a new Adam of the
    saved config (its learning rate then) and loads its step count and slots (Keras's weights
    file holds them under ``optimizer``, ``keras/optimizer_state.py``), as tf_keras restores them;
    the loaded model trains on from there.  ``save_weights`` / ``load_weights`` into a fresh
    model do the same (BackupAndRestore's way)."""
    model = functional()
    opt = tf.keras.optimizers.Adam(0.01, beta_1=0.8)
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    opt.learning_rate.assign(0.005)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is type(opt) and loaded.optimizer is not opt
    assert loaded.optimizer.get_config()["learning_rate"] == np.float32(0.005)
    assert loaded.optimizer.get_config()["beta_1"] == np.float32(0.8)
    assert int(loaded.optimizer.iterations.numpy()) == 3
    for a, b in zip(loaded.optimizer.variables, opt.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(loaded.predict(X[:4], verbose=0), model.predict(X[:4], verbose=0), rtol=1e-6)
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    loaded.optimizer.learning_rate.assign(0.005)
    loaded.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    assert int(loaded.optimizer.iterations.numpy()) == 6
    for a, b in zip(loaded.weights, model.weights):   # (the same continuation)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)

    weights = str(tmp_path / "w.weights.h5")
    model.save_weights(weights)
    fresh = functional()
    fresh.compile(optimizer=tf.keras.optimizers.Adam(0.005, beta_1=0.8),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fresh.load_weights(weights)
    assert int(fresh.optimizer.iterations.numpy()) == 6
    for a, b in zip(fresh.optimizer.variables, opt.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_fit_runs_tf_style_steps_of_a_model_with_no_call():
    """A GAN wrapper (no ``call``; ``train_step(self, data)`` drives two sub-models): TF's trainer
    builds nothing before the step runs; Keras's JAX trainer raised "Unable to automatically build
    the model" from its symbolic build."""

    class Wrapper(K3.Model):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.tracker = K3.metrics.Mean(name="loss")

        @property
        def metrics(self):
            return [self.tracker]

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.inner(x) - y))
            self.optimizer.apply(tape.gradient(loss, self.inner.trainable_weights), self.inner.trainable_weights)
            self.tracker.update_state(loss)
            return {"loss": self.tracker.result()}

    inner = K3.Sequential([K3.Input((2,)), K3.layers.Dense(1, kernel_initializer="ones")])
    model = Wrapper(inner)
    model.compile(optimizer=K3.optimizers.SGD(0.1))
    x, y = np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32)
    hist = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    # loss (1 + 1 + 0 - 0)^2 = 4, gradient 2 * 2 = 4 for each weight and the bias: 0.6 + 0.6 - 0.4 -> 0.8^2
    np.testing.assert_allclose(hist.history["loss"], [4.0, 0.64], rtol=1e-5)


# -- tf_keras' RespectCompiledTrainableState (oracle: tf_keras 2.21, checked in
# tests/parity/test_user_programs20c.py): fit / train_on_batch train what was trainable at compile

def _frozen_base_model():
    base = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, name="b")], name="base")
    base.trainable = False
    inp = keras.Input((5,))
    model = keras.Model(inp, keras.layers.Dense(1, name="h")(base(inp)))
    model.set_weights([np.full(w.shape, 0.3, np.float32) for w in model.get_weights()])
    return base, model


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_fit_after_unfreezing_without_compile_keeps_the_compiled_trainable_state(run_eagerly):
    base, model = _frozen_base_model()
    y = np.ones((48, 1), np.float32)
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.1), loss="mse", run_eagerly=run_eagerly)
    model.fit(X, y, batch_size=16, verbose=0)
    base.trainable = True
    kernel = base.get_layer("b").kernel.numpy()
    model.fit(X, y, batch_size=16, verbose=0)
    model.train_on_batch(X[:8], y[:8])
    assert np.array_equal(kernel, base.get_layer("b").kernel.numpy())   # frozen as at compile
    assert base.trainable and base.get_layer("b").trainable and len(model.trainable_variables) == 4   # put back
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.1), loss="mse", run_eagerly=run_eagerly)
    model.fit(X, y, batch_size=16, verbose=0)
    assert not np.array_equal(kernel, base.get_layer("b").kernel.numpy())   # a new compile: it trains


def test_one_layer_frozen_after_compile_still_trains_and_keeps_its_flag():
    base, model = _frozen_base_model()
    base.trainable = True
    y = np.ones((48, 1), np.float32)
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.1), loss="mse", run_eagerly=True)
    base.get_layer("b").trainable = False
    kernel = base.get_layer("b").kernel.numpy()
    model.fit(X, y, batch_size=16, verbose=0)
    assert not np.array_equal(kernel, base.get_layer("b").kernel.numpy())
    assert base.trainable and not base.get_layer("b").trainable


def test_recompiled_with_the_same_new_optimizer_after_unfreezing_fit_raises_key_error():
    """tf_keras' first fit builds its new optimizer for the head; after unfreezing, a recompile with
    the same optimizer makes no slots for the base and fit raises tf_keras' KeyError."""
    base, model = _frozen_base_model()
    y = np.ones((48, 1), np.float32)
    opt = tf.keras.optimizers.Adam(0.01)
    model.compile(optimizer=opt, loss="mse")
    model.fit(X, y, batch_size=48, verbose=0)
    base.trainable = True
    model.compile(optimizer=opt, loss="mse")
    with pytest.raises(KeyError, match="cannot recognize variable"):
        model.fit(X, y, batch_size=48, verbose=0)
    assert (int(opt.iterations), len(opt.variables)) == (1, 1 + 2 * 2)


class _ReturnsItsLoss(K3.Model):
    """A TF-style step returning ``{"loss": loss}`` without updating the loss tracker (the PINN and
    GAN tutorials' form)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.dense(data) - 1.0))
        grads = tape.gradient(loss, self.dense.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.dense.trainable_variables))
        return {"loss": loss}

    def test_step(self, data):
        return {"loss": tf.reduce_mean(tf.square(self.dense(data) - 1.0))}


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_logs_of_a_step_returning_loss_are_tf_keras_with_a_tapejax_optimizer(run_eagerly):
    """tf_keras logs what the last step returned (TF 2.21 with tf_keras: history ``[0.028192,
    0.040686]``, evaluate ``0.032034``); Keras 3 puts the untouched loss tracker's 0 in its place,
    which a Keras 3 optimizer keeps."""
    x = np.linspace(0, 1, 8, dtype=np.float32)[:, None]
    results = {}
    for name, opt in (("tapejax", tf.keras.optimizers.SGD(0.1)), ("keras3", K3.optimizers.SGD(0.1))):
        model = _ReturnsItsLoss()
        model(x[:1])
        model.set_weights([np.ones((1, 1), np.float32), np.zeros(1, np.float32)])
        model.compile(optimizer=opt, run_eagerly=run_eagerly)
        hist = model.fit(x, epochs=2, batch_size=4, shuffle=False, verbose=0)
        results[name] = hist.history["loss"], model.evaluate(x, batch_size=4, verbose=0)
    np.testing.assert_allclose(results["tapejax"][0], [0.028192, 0.040686], rtol=1e-4)
    np.testing.assert_allclose(results["tapejax"][1], 0.032034, rtol=1e-4)
    assert results["keras3"] == ([0.0, 0.0], 0.0)



class _Noise(keras.layers.Layer):
    """TF-era code: a layer drawing from TF's global stream (``tf.random.normal``, no seed) in
    ``call``, as keras.io's VAE ``Sampling`` layer does."""

    def call(self, x):
        return x + tf.random.normal(tf.shape(x))


def _noisy_model():
    inp = keras.Input((2,))
    out = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")(_Noise()(inp))
    return keras.Model(inp, out)


@pytest.mark.parametrize("optimizer", ["sgd", "keras3"])
def test_a_layer_drawing_from_tfs_global_stream_trains_under_keras_3_optimizers(optimizer):
    """``compile(optimizer="sgd")`` (a Keras 3 optimizer: Keras's stateless JAX steps) with a layer
    calling ``tf.random.normal``: fit, evaluate and predict run (they raised DrawInTrace), each
    step draws new values (the generator's key is threaded through the compiled step, not baked
    into it), and ``tf.random.set_seed`` makes the draws repeat."""
    x = np.zeros((4, 2), np.float32)
    y = np.zeros((4, 1), np.float32)
    outs = []
    for _ in range(2):
        tf.random.set_seed(5)
        model = _noisy_model()
        model.compile(optimizer="sgd" if optimizer == "sgd" else K3.optimizers.SGD(0.1), loss="mse")
        kernels = []
        def record(batch, logs):
            model.jax_state_sync()   # (Keras's JAX trainer holds the values while it runs)
            kernels.append(np.asarray(model.layers[-1].kernel.numpy()).copy())
        cb = K3.callbacks.LambdaCallback(on_train_batch_end=record)
        model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=[cb])
        p1, p2 = model.predict(x, verbose=0), model.predict(x, verbose=0)
        assert not np.allclose(p1, p2)                                   # new draws at each call
        steps = np.diff(np.stack([k.ravel() for k in kernels]), axis=0)
        assert not np.allclose(steps[0], steps[1])                      # each step's own noise
        outs.append((np.stack(kernels), p1, model.evaluate(x, y, verbose=0)))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])               # set_seed repeats them
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert outs[0][2] == outs[1][2]
