"""Programs written as TF 2.16+'s guides write them, ``import tensorflow as tf`` beside ``import
keras`` (Keras 3), run by ``test_keras3.py`` in two fresh processes: under TF with Keras 3 on its
TF backend, and under tapejax (``import tapejax as tf``; Keras 3 on JAX, on the tape).

Each ``program_*(tf, keras)`` returns a nest of lists, dicts, numbers, strings, None and tensors.
Weights are set from NumPy, so both sides start equal; nothing draws random numbers.
"""
import numpy as np


def _data(n=32, d=3, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = (x @ rs.randn(d, 1) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


def _init(model, seed=1):
    rs = np.random.RandomState(seed)
    model.set_weights([np.asarray(rs.randn(*w.shape) * 0.5, np.float32) for w in model.weights])


def _mlp(keras, d=3, hidden=4, out=1):
    model = keras.Sequential([keras.Input((d,)), keras.layers.Dense(hidden, activation="relu"),
                              keras.layers.Dense(out)])
    _init(model)
    return model


def _update_metrics(model, loss, y, y_pred):
    """The "customizing fit()" guide's metric loop: the compiled loss tracker gets the loss, every
    other metric ``(y, y_pred)``; their results."""
    for metric in model.metrics:
        if metric.name == "loss":
            metric.update_state(loss)
        else:
            metric.update_state(y, y_pred)
    return {m.name: m.result() for m in model.metrics}


def program_custom_loop_eager_then_compiled(tf, keras):
    """The guide's loop: Keras 3's Adam, loss object and metric around a tape, eager steps then a
    ``tf.function`` step."""
    x, y = _data(16)
    model = _mlp(keras)
    opt = keras.optimizers.Adam(0.05)
    loss_fn = keras.losses.MeanSquaredError()
    metric = keras.metrics.MeanAbsoluteError()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            loss = loss_fn(yb, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        metric.update_state(yb, pred)
        return loss

    losses = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            pred = model(x[:8], training=True)
            loss = loss_fn(y[:8], pred)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    for _ in range(3):
        losses.append(float(step(x[8:], y[8:])))
    return {"losses": losses, "mae": metric.result(), "iterations": int(opt.iterations.numpy()),
            "weights": model.get_weights()}


def program_keras_functions_on_the_tape(tf, keras):
    """Keras 3's own ``keras.ops`` (and its submodules), activation, loss and metric functions on a
    watched tensor: values and gradients (None for a stopped one); ``keras.ops`` on NumPy gives a
    tensor."""
    xs = tf.constant(np.random.RandomState(2).randn(5).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(xs)
        outs = [keras.ops.sum(keras.ops.square(xs)), keras.ops.mean(keras.activations.relu(xs) * 2.0),
                keras.losses.mean_squared_error(xs, keras.ops.zeros_like(xs)), keras.ops.logsumexp(xs),
                keras.ops.sum(keras.ops.stop_gradient(xs) * xs), keras.ops.sum(keras.ops.nn.softmax(xs) * xs),
                keras.metrics.mean_absolute_error(xs, keras.ops.ones_like(xs)),
                keras.ops.sum(keras.ops.numpy.tanh(xs)), keras.ops.stop_gradient(xs) * 2.0]
    grads = [tape.gradient(o, xs) for o in outs]
    host = keras.ops.sum(np.ones(3, np.float32))
    return {"outs": outs, "grads": grads, "host": [tf.is_tensor(host), host]}


def program_custom_train_step_with_compute_loss_and_compiled_metrics(tf, keras):
    """The "customizing fit()" guide's first ``train_step``: ``self.compute_loss``,
    ``self.optimizer.apply`` and every metric in ``self.metrics`` updated, under ``fit``."""

    class CustomModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            trainable_vars = self.trainable_variables
            gradients = tape.gradient(loss, trainable_vars)
            self.optimizer.apply(gradients, trainable_vars)
            return _update_metrics(self, loss, y, y_pred)

    inputs = keras.Input(shape=(3,))
    outputs = keras.layers.Dense(1)(inputs)
    model = CustomModel(inputs, outputs)
    _init(model)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    x, y = _data()
    hist = model.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0)
    return {"history": hist.history, "weights": model.get_weights()}


def program_custom_train_step_with_its_own_trackers(tf, keras):
    """The guide's lower-level ``train_step``: compiled without a loss, its own ``Mean`` and
    ``MeanAbsoluteError`` trackers listed in ``metrics`` (reset by ``fit`` each epoch)."""

    class CustomModel(keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = keras.metrics.Mean(name="loss")
            self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
            self.loss_fn = keras.losses.MeanSquaredError()

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.loss_fn(y, y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(gradients, self.trainable_variables)
            self.loss_tracker.update_state(loss)
            self.mae_metric.update_state(y, y_pred)
            return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

        @property
        def metrics(self):
            return [self.loss_tracker, self.mae_metric]

    inputs = keras.Input(shape=(3,))
    outputs = keras.layers.Dense(1)(inputs)
    model = CustomModel(inputs, outputs)
    _init(model)
    model.compile(optimizer=keras.optimizers.Adam(0.02))
    x, y = _data()
    hist = model.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
    return {"history": hist.history, "weights": model.get_weights()}


def program_custom_test_step_under_evaluate(tf, keras):
    """The guide's ``test_step``: ``evaluate`` runs it per batch; the returned metrics are the
    compiled loss tracker's and ``mae``'s."""

    class CustomModel(keras.Model):
        def test_step(self, data):
            x, y = data
            y_pred = self(x, training=False)
            loss = self.compute_loss(y=y, y_pred=y_pred)
            return _update_metrics(self, loss, y, y_pred)

    inputs = keras.Input(shape=(3,))
    outputs = keras.layers.Dense(1)(inputs)
    model = CustomModel(inputs, outputs)
    _init(model)
    model.compile(loss="mse", metrics=["mae"])
    x, y = _data()
    return model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)


def program_layer_subclass_with_add_weight_and_keras_ops(tf, keras):
    """A ``keras.layers.Layer`` with ``add_weight`` in ``build`` and ``keras.ops`` in ``call``, an
    ``add_loss`` activity penalty, trained by a tape with ``model.losses`` added."""

    class Linear(keras.layers.Layer):
        def __init__(self, units):
            super().__init__()
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="ones", name="w")
            self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")

        def call(self, inputs):
            out = keras.ops.matmul(inputs, self.w) + self.b
            self.add_loss(0.01 * keras.ops.sum(keras.ops.square(out)))
            return keras.ops.tanh(out)

    layer = Linear(2)
    x, y = _data(8)
    opt = keras.optimizers.SGD(0.1)
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            out = layer(x)
            loss = keras.ops.mean(keras.ops.square(out - y)) + sum(layer.losses)
        grads = tape.gradient(loss, layer.trainable_weights)
        opt.apply_gradients(zip(grads, layer.trainable_weights))
        losses.append(loss)
    return {"losses": losses, "w": layer.w, "b": layer.b, "n_losses": len(layer.losses)}


def program_schedule_and_global_clipnorm_in_fit(tf, keras):
    """``ExponentialDecay`` as Adam's learning rate with ``global_clipnorm``, trained by ``fit`` on
    a ``tf.data`` pipeline; the learning rate read after."""
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    model = _mlp(keras)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=4, decay_rate=0.5)
    model.compile(optimizer=keras.optimizers.Adam(schedule, global_clipnorm=0.5), loss="mse")
    hist = model.fit(ds, epochs=2, verbose=0)
    return {"loss": hist.history["loss"], "lr": float(model.optimizer.learning_rate),
            "iterations": int(model.optimizer.iterations), "weights": model.get_weights()}


def program_two_optimizers_in_one_train_step(tf, keras):
    """A two-part model (encoder, head) trained by one tape with a persistent gradient and two Keras
    3 optimizers, one per part, in a ``tf.function``."""
    enc = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh")])
    head = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    _init(enc, 3)
    _init(head, 4)
    opt_e, opt_h = keras.optimizers.SGD(0.1), keras.optimizers.RMSprop(0.01)
    x, y = _data(16)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape(persistent=True) as tape:
            loss = keras.losses.mean_squared_error(tf.reshape(yb, [-1]), tf.reshape(head(enc(xb)), [-1]))
        opt_e.apply_gradients(zip(tape.gradient(loss, enc.trainable_variables), enc.trainable_variables))
        opt_h.apply_gradients(zip(tape.gradient(loss, head.trainable_variables), head.trainable_variables))
        return loss

    losses = [step(x[i:i + 4], y[i:i + 4]) for i in range(0, 16, 4)]
    return {"losses": losses, "enc": enc.get_weights(), "head": head.get_weights()}


def program_saved_keras_file_reloaded_keeps_training(tf, keras):
    """``model.save("m.keras")``, ``keras.models.load_model``, then the loaded model trains on by
    ``fit`` with its restored optimizer state."""
    import os
    import tempfile
    x, y = _data()
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    before = loaded.predict(x[:4], verbose=0)
    hist = loaded.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    return {"before": before, "loss": hist.history["loss"], "iterations": int(loaded.optimizer.iterations),
            "weights": loaded.get_weights()}


def program_gan_train_step_with_two_optimizers_and_fed_noise(tf, keras):
    """The "customizing fit()" guide's GAN: ``compile(d_optimizer, g_optimizer, loss_fn)`` and a
    ``train_step`` with two tapes, the latent noise fed in the data instead of drawn."""

    class GAN(keras.Model):
        def __init__(self, discriminator, generator):
            super().__init__()
            self.discriminator = discriminator
            self.generator = generator
            self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
            self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

        @property
        def metrics(self):
            return [self.d_loss_tracker, self.g_loss_tracker]

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer = d_optimizer
            self.g_optimizer = g_optimizer
            self.loss_fn = loss_fn

        def train_step(self, data):
            real, noise = data
            batch = tf.shape(real)[0]
            fake = self.generator(noise)
            combined = tf.concat([fake, real], axis=0)
            labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], axis=0)
            with tf.GradientTape() as tape:
                d_loss = self.loss_fn(labels, self.discriminator(combined))
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply(grads, self.discriminator.trainable_weights)
            misleading = tf.zeros((batch, 1))
            with tf.GradientTape() as tape:
                g_loss = self.loss_fn(misleading, self.discriminator(self.generator(noise)))
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply(grads, self.generator.trainable_weights)
            self.d_loss_tracker.update_state(d_loss)
            self.g_loss_tracker.update_state(g_loss)
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    disc = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.LeakyReLU(0.2),
                             keras.layers.Dense(1)])
    gen = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="tanh")])
    _init(disc, 5)
    _init(gen, 6)
    gan = GAN(disc, gen)
    gan.compile(keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01),
                keras.losses.BinaryCrossentropy(from_logits=True))
    rs = np.random.RandomState(7)
    real, noise = rs.randn(16, 3).astype(np.float32), rs.randn(16, 2).astype(np.float32)
    hist = gan.fit(tf.data.Dataset.from_tensor_slices((real, noise)).batch(4), epochs=2, verbose=0)
    return {"history": hist.history, "disc": disc.get_weights(), "gen": gen.get_weights()}


def program_fit_with_early_stopping_lr_scheduler_and_validation(tf, keras):
    """``fit`` with ``validation_data``, a ``LearningRateScheduler`` halving the rate each epoch and
    ``EarlyStopping(restore_best_weights=True)`` on a validation loss that rises."""
    x, y = _data(40)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.3), loss="mse", metrics=["mae"])
    sched = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5)
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    hist = model.fit(x[:32], y[:32], validation_data=(x[32:], y[32:] + 3.0), epochs=6, batch_size=8,
                     shuffle=False, callbacks=[sched, stop], verbose=0)
    return {"history": hist.history, "epochs": len(hist.history["loss"]), "weights": model.get_weights(),
            "lr": float(model.optimizer.learning_rate)}


def program_batch_norm_moving_statistics_in_a_tape_loop(tf, keras):
    """``BatchNormalization`` called with ``training=True`` in a tape loop updates its moving mean
    and variance each step; ``training=False`` reads them."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(momentum=0.5),
                              keras.layers.Dense(1)])
    _init(model)
    bn = model.layers[1]
    bn.moving_variance.assign(np.ones(4, np.float32))
    bn.moving_mean.assign(np.zeros(4, np.float32))
    x, y = _data(16)
    opt = keras.optimizers.SGD(0.05)
    losses = []
    for i in range(3):
        with tf.GradientTape() as tape:
            loss = keras.losses.mean_squared_error(tf.reshape(y[i * 4:i * 4 + 8], [-1]),
                                                   tf.reshape(model(x[i * 4:i * 4 + 8], training=True), [-1]))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        losses.append(loss)
    return {"losses": losses, "moving_mean": bn.moving_mean, "moving_variance": bn.moving_variance,
            "inference": model(x[:4], training=False), "n_trainable": len(model.trainable_variables)}


def program_classifier_loop_with_accuracy_reset_each_epoch(tf, keras):
    """A softmax classifier trained by a tape over a batched ``tf.data`` pipeline, with
    ``SparseCategoricalCrossentropy(from_logits=True)`` and a ``SparseCategoricalAccuracy`` read
    and reset each epoch (the "training loop from scratch" guide)."""
    rs = np.random.RandomState(3)
    x = rs.randn(24, 4).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, labels)).batch(8)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    _init(model)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.SGD(0.1)
    acc = keras.metrics.SparseCategoricalAccuracy()
    epochs = []

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights))
        acc.update_state(yb, logits)
        return loss

    for _ in range(3):
        losses = [float(train_step(xb, yb)) for xb, yb in ds]
        epochs.append({"losses": losses, "accuracy": float(acc.result())})
        acc.reset_state()
    return {"epochs": epochs, "after_reset": acc.result()}


def program_functional_model_with_two_named_outputs_and_dict_losses(tf, keras):
    """A functional model with two named outputs compiled with dict losses, loss weights and a
    metric per output, trained by ``fit`` on dict targets."""
    inp = keras.Input((3,), name="x")
    h = keras.layers.Dense(4, activation="tanh")(inp)
    reg = keras.layers.Dense(1, name="reg")(h)
    cls = keras.layers.Dense(1, activation="sigmoid", name="cls")(h)
    model = keras.Model(inp, {"reg": reg, "cls": cls})
    _init(model)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss={"reg": "mse", "cls": "binary_crossentropy"},
                  loss_weights={"reg": 1.0, "cls": 0.5}, metrics={"reg": ["mae"], "cls": ["accuracy"]})
    x, y = _data(24)
    targets = {"reg": y, "cls": (y > 0).astype(np.float32)}
    hist = model.fit(x, targets, epochs=2, batch_size=8, shuffle=False, verbose=0)
    return {"history": hist.history, "weights": model.get_weights()}


def program_keras_ops_control_flow_eager_and_compiled(tf, keras):
    """``keras.ops.where``, ``cond``, ``fori_loop``, ``switch``, ``while_loop``, ``map`` and
    ``vectorized_map`` on tensors, eagerly and in a ``tf.function``, with gradients through them."""
    x = tf.constant(np.array([-1.0, 0.5, 2.0], np.float32))

    def f(v):
        w = keras.ops.where(v > 0, v * v, -v)
        c = keras.ops.cond(keras.ops.sum(v) > 0, lambda: keras.ops.sum(w) * 2.0, lambda: keras.ops.sum(w))
        loop = keras.ops.fori_loop(0, 3, lambda i, acc: acc * 1.5 + c, c)
        s = keras.ops.switch(1, [lambda a: keras.ops.sum(a * 2.0), lambda a: keras.ops.sum(a * a)], v)
        _, wl = keras.ops.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t * 1.1 + s), (0, keras.ops.sum(v)),
                                     maximum_iterations=3)
        rows = keras.ops.reshape(v, (3, 1))
        m = keras.ops.sum(keras.ops.map(lambda r: r * r, rows))
        vm = keras.ops.sum(keras.ops.vectorized_map(lambda r: keras.ops.sum(r * r * r), rows))
        return loop + s + wl + m + vm

    out = {}
    for name, fn in (("eager", f), ("compiled", tf.function(f))):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        out[name] = [y, tape.gradient(y, x)]
    return out


def program_embedding_model_gradient_and_adam_update(tf, keras):
    """An ``Embedding`` + pooling + ``Dense`` model: the embedding table's gradient (its class name:
    TF gives sparse rows) and Keras 3's Adam updating the table over two steps on other rows (Keras
    3's Adam densifies the gradient: rows a step did not see move by their momentum).  No batch
    repeats an id: there TF's Keras 3 squares the slices before summing them (tapejax/keras/README.md,
    Known limits)."""
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(8, 2),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    _init(model)
    y = np.array([[1.0], [-1.0]], np.float32)
    opt = keras.optimizers.Adam(0.1)
    kinds, dense = [], []
    for ids in (np.array([[0, 1, 2], [3, 4, 5]], np.int32), np.array([[6, 7, 0], [1, 2, 3]], np.int32)):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(ids) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))   # (the second step's rows 4, 5: no gradient)
        kinds.append(type(grads[0]).__name__)
        dense.append(tf.convert_to_tensor(grads[0]))
    return {"grad_kinds": kinds, "dense_grads": dense, "table": model.layers[0].embeddings}


def program_weights_file_round_trip_into_a_fresh_model(tf, keras):
    """``save_weights("w.weights.h5")`` after training, ``load_weights`` into a fresh model: equal
    predictions."""
    import os
    import tempfile
    x, y = _data()
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.RMSprop(0.01), loss="mse")
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "w.weights.h5")
    model.save_weights(path)
    fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    fresh.load_weights(path)
    return {"saved": model.predict(x[:4], verbose=0), "loaded": fresh.predict(x[:4], verbose=0)}


def program_custom_metric_and_loss_subclasses_in_fit(tf, keras):
    """A ``keras.metrics.Metric`` subclass with ``add_variable`` state and a ``keras.losses.Loss``
    subclass, compiled and trained by ``fit`` with ``sample_weight``, then ``evaluate``."""

    class WeightedAbs(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return keras.ops.mean(keras.ops.abs(y_true - y_pred) * 1.5, axis=-1)

    class MaxError(keras.metrics.Metric):
        def __init__(self, name="max_error", **kwargs):
            super().__init__(name=name, **kwargs)
            self.worst = self.add_variable(shape=(), initializer="zeros", name="worst")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.worst.assign(keras.ops.maximum(self.worst, keras.ops.max(keras.ops.abs(y_true - y_pred))))

        def result(self):
            return self.worst

        def reset_state(self):
            self.worst.assign(0.0)

    x, y = _data(24)
    sw = np.linspace(0.5, 1.5, 24).astype(np.float32)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss=WeightedAbs(), metrics=[MaxError()])
    hist = model.fit(x, y, sample_weight=sw, epochs=2, batch_size=8, shuffle=False, verbose=0)
    return {"history": hist.history, "evaluate": model.evaluate(x, y, batch_size=12, verbose=0)}


def program_lstm_and_multi_head_attention_in_a_tape_loop(tf, keras):
    """An ``LSTM`` encoder and a ``MultiHeadAttention`` block (dropout 0) trained for two steps by a
    tape with Keras 3's SGD; losses and the attention scores returned."""
    rs = np.random.RandomState(11)
    x = rs.randn(2, 4, 3).astype(np.float32)
    y = rs.randn(2, 1).astype(np.float32)
    inp = keras.Input((4, 3))
    h = keras.layers.LSTM(5, return_sequences=True)(inp)
    att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=2)
    a, scores = att(h, h, return_attention_scores=True)
    out = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(a))
    model = keras.Model(inp, [out, scores])
    _init(model, 12)
    opt = keras.optimizers.SGD(0.05)
    losses = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            pred, s = model(x, training=True)
            loss = keras.ops.mean(keras.ops.square(pred - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        losses.append(loss)
    return {"losses": losses, "scores": s}


def program_keras_custom_gradient_clips_the_backward_pass(tf, keras):
    """``keras.ops.custom_gradient`` (TF's backend: ``tf.custom_gradient``) clipping the incoming
    gradient, differentiated by a tape, eagerly and compiled."""

    @keras.ops.custom_gradient
    def clip_grad(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return keras.ops.clip(upstream, -0.5, 0.5)
        return x, grad

    x = tf.constant(np.array([1.0, -2.0, 3.0], np.float32))

    def f(v):
        return keras.ops.sum(clip_grad(v * v) * 2.0)

    out = []
    for fn in (f, tf.function(f)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        out.append([y, tape.gradient(y, x)])
    return out


def program_normalization_adapt_then_fit_and_predict_on_a_dataset(tf, keras):
    """A ``Normalization`` layer adapted on the training data, in front of a Dense model trained by
    ``fit`` on a batched ``tf.data`` pipeline; ``predict`` on a dataset."""
    x, y = _data(32)
    x = x * np.array([1.0, 10.0, 100.0], np.float32) + 5.0
    norm = keras.layers.Normalization()
    norm.adapt(x)
    model = keras.Sequential([keras.Input((3,)), norm, keras.layers.Dense(1)])
    model.layers[-1].set_weights([np.full((3, 1), 0.5, np.float32), np.zeros(1, np.float32)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    hist = model.fit(ds, epochs=2, verbose=0)
    pred = model.predict(tf.data.Dataset.from_tensor_slices(x[:5]).batch(2), verbose=0)
    return {"mean": norm.mean, "variance": norm.variance, "loss": hist.history["loss"], "pred": pred}


def program_model_checkpoint_callback_keeps_the_best_keras_file(tf, keras):
    """``ModelCheckpoint(save_best_only=True)`` on ``val_loss`` writing a ``.keras`` file during
    ``fit``; the reloaded best model's evaluation."""
    import os
    import tempfile
    x, y = _data(40)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    path = os.path.join(tempfile.mkdtemp(), "best.keras")
    ckpt = keras.callbacks.ModelCheckpoint(path, monitor="val_loss", save_best_only=True)
    hist = model.fit(x[:32], y[:32], validation_data=(x[32:], y[32:]), epochs=3, batch_size=8, shuffle=False,
                     callbacks=[ckpt], verbose=0)
    best = keras.models.load_model(path)
    return {"val_loss": hist.history["val_loss"], "best": best.evaluate(x[32:], y[32:], verbose=0)}
