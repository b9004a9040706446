"""Round 14a of the Keras 3 programs (``test_keras3.py`` runs them as it runs ``keras3_programs.py``):
TF 2.16+'s ``import tensorflow as tf`` beside ``import keras``, written as Keras 3's guides and API
docs write them: multi-input/output functional models, Model subclasses and their configs, a
registered custom layer in a ``.keras`` file, regularization losses and layer state, small CNN /
RNN models, the callbacks, ``fit``'s arguments and a ``PyDataset``, ``evaluate`` / ``predict`` /
``*_on_batch``, the optimizers and their schedules, gradient accumulation and EMA, mixed precision
and loss scaling, and ``keras.ops`` beside ``tf.*`` ops in custom layers and on tensors under a
tape.

Weights are set from NumPy, so both sides start equal; nothing draws random numbers (no Dropout in
training mode, no random initializer left in place, no ``keras.random``).  ``TOLERANCES`` loosens
the comparison for the named programs (float16 compute).
"""
import numpy as np

TOLERANCES = {"program_mixed_float16_policy_trains_then_float32_again": (2e-2, 2e-3),
              "program_loss_scale_optimizer_in_a_tape_loop": (2e-2, 2e-3)}


def _data(n=32, d=3, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = (x @ rs.randn(d, 1) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


def _init(model, seed=1, scale=0.5):
    rs = np.random.RandomState(seed)
    model.set_weights([np.asarray(rs.randn(*w.shape) * scale, np.float32) for w in model.weights])


def _mlp(keras, d=3, hidden=4, out=1, seed=1, **dense):
    model = keras.Sequential([keras.Input((d,)), keras.layers.Dense(hidden, activation="tanh", **dense),
                              keras.layers.Dense(out)])
    _init(model, seed)
    return model


def _tape_steps(tf, keras, model, opt, x, y, steps=3, extra_losses=False):
    """A guide's eager loop: MSE (plus ``sum(model.losses)``) by a tape, ``apply_gradients``."""
    losses = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
            if extra_losses:
                loss = loss + sum(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    return losses


# --- functional models, subclasses, configs and files ---------------------------------------------

def program_two_inputs_two_outputs_loss_weights_and_metrics_per_output(tf, keras):
    """A functional model on a dict of two inputs with two outputs, compiled with a loss list,
    ``loss_weights`` and a metric list per output, trained by ``fit`` on dict inputs; ``evaluate``
    with ``return_dict=True``."""
    a = keras.Input((3,), name="a")
    b = keras.Input((2,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(4, activation="relu")(a), b])
    score = keras.layers.Dense(1, name="score")(h)
    cls = keras.layers.Dense(3, name="cls")(h)
    model = keras.Model({"a": a, "b": b}, [score, cls])
    _init(model)
    model.compile(optimizer=keras.optimizers.Adam(0.02),
                  loss=["mse", keras.losses.SparseCategoricalCrossentropy(from_logits=True)],
                  loss_weights=[1.0, 0.3], metrics=[["mae"], ["sparse_categorical_accuracy"]])
    rs = np.random.RandomState(4)
    xa, xb = rs.randn(24, 3).astype(np.float32), rs.randn(24, 2).astype(np.float32)
    y = (xa[:, :1] - xb[:, 1:]).astype(np.float32)
    labels = (xa[:, 0] > 0).astype(np.int32) + (xb[:, 0] > 0).astype(np.int32)
    hist = model.fit({"a": xa, "b": xb}, [y, labels], epochs=2, batch_size=8, shuffle=False, verbose=0)
    ev = model.evaluate({"a": xa, "b": xb}, [y, labels], batch_size=12, return_dict=True, verbose=0)
    return {"history": hist.history, "evaluate": ev, "weights": model.get_weights()}


def program_model_subclass_with_build_and_config_round_trip(tf, keras):
    """A ``keras.Model`` subclass that makes a weight in ``build()`` and returns its ``__init__``
    arguments in ``get_config``; ``from_config`` rebuilds it, and the copy, given the weights,
    predicts the same after the original trained by ``fit``."""

    class ResidualMLP(keras.Model):
        def __init__(self, units=4, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.hidden = keras.layers.Dense(units, activation="tanh")
            self.head = keras.layers.Dense(1)

        def build(self, input_shape):
            self.skip = self.add_weight(shape=(input_shape[-1], 1), initializer="zeros", name="skip")
            self.hidden.build(input_shape)
            self.head.build((input_shape[0], self.units))

        def call(self, x):
            return self.head(self.hidden(x)) + keras.ops.matmul(x, self.skip)

        def get_config(self):
            return {**super().get_config(), "units": self.units}

    model = ResidualMLP(units=5, name="res")
    model.build((None, 3))
    _init(model)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x, y = _data(16)
    hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    config = model.get_config()
    clone = ResidualMLP.from_config(config)
    clone.build((None, 3))
    clone.set_weights(model.get_weights())
    return {"loss": hist.history["loss"], "units": config["units"], "name": config["name"],
            "n_weights": len(clone.weights), "model": model.predict(x[:4], verbose=0), "clone": clone(x[:4])}


def program_registered_custom_layer_in_a_keras_file(tf, keras):
    """A custom layer registered with ``keras.saving.register_keras_serializable`` (config with its
    own argument) saved in a ``.keras`` file with its model and optimizer, reloaded by
    ``load_model`` and trained on."""
    import os
    import tempfile

    @keras.saving.register_keras_serializable(package="round14a")
    class ScaledDense(keras.layers.Layer):
        def __init__(self, units, scale=1.0, **kwargs):
            super().__init__(**kwargs)
            self.units, self.scale = units, scale

        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="ones", name="kernel")
            self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

        def call(self, x):
            return self.scale * (keras.ops.matmul(x, self.kernel) + self.bias)

        def get_config(self):
            return {**super().get_config(), "units": self.units, "scale": self.scale}

    model = keras.Sequential([keras.Input((3,)), ScaledDense(4, scale=0.5), keras.layers.Activation("tanh"),
                              keras.layers.Dense(1)])
    _init(model)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    x, y = _data(16)
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "scaled.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    layer = loaded.layers[0]
    before = loaded.predict(x[:4], verbose=0)
    hist = loaded.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    return {"class": type(layer).__name__, "scale": layer.scale, "units": layer.units, "before": before,
            "saved": model.predict(x[:4], verbose=0), "loss": hist.history["loss"],
            "iterations": int(loaded.optimizer.iterations), "weights": loaded.get_weights()}


# --- regularization losses --------------------------------------------------------------------------

def program_activity_regularization_by_add_loss_in_fit(tf, keras):
    """A layer's ``add_loss`` activity penalty and a Dense ``activity_regularizer`` in the loss that
    ``fit`` reports; ``model.losses`` after a call."""

    class ActivityPenalty(keras.layers.Layer):
        def __init__(self, rate, **kwargs):
            super().__init__(**kwargs)
            self.rate = rate

        def call(self, inputs):
            self.add_loss(self.rate * keras.ops.mean(keras.ops.square(inputs)))
            return inputs

    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(4, activation="tanh", activity_regularizer=keras.regularizers.L1(0.01)),
                              ActivityPenalty(0.1), keras.layers.Dense(1)])
    _init(model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, y = _data(16)
    hist = model.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0)
    model(x[:8])
    return {"loss": hist.history["loss"], "losses": [float(v) for v in model.losses],
            "evaluate": model.evaluate(x, y, verbose=0), "weights": model.get_weights()}


def program_kernel_regularizer_in_fit_and_in_a_tape_loop(tf, keras):
    """``kernel_regularizer`` / ``bias_regularizer`` on Dense layers: in ``fit``'s loss, and in a
    custom loop that adds ``sum(model.losses)`` to its loss, from the same start."""
    regs = {"kernel_regularizer": keras.regularizers.L2(0.05), "bias_regularizer": keras.regularizers.L1L2(0.01, 0.02)}
    x, y = _data(16)
    fitted = _mlp(keras, **regs)
    fitted.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    hist = fitted.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
    looped = _mlp(keras, **regs)
    penalties = [float(v) for v in looped.losses]
    losses = _tape_steps(tf, keras, looped, keras.optimizers.SGD(0.1), x, y, extra_losses=True)
    return {"fit": hist.history["loss"], "loop": losses, "penalties": penalties,
            "fit_weights": fitted.get_weights(), "loop_weights": looped.get_weights()}


def program_layer_with_a_non_trainable_counter_updated_in_call(tf, keras):
    """A layer with a non-trainable ``add_weight(trainable=False)`` counter that its ``call``
    increments in training: updated by a tape loop's calls and by ``fit``, read by the output."""

    class Counting(keras.layers.Layer):
        def build(self, input_shape):
            self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")
            self.w = self.add_weight(shape=(input_shape[-1], 1), initializer="ones", name="w")

        def call(self, x, training=None):
            if training:
                self.count.assign_add(1.0)
            return keras.ops.matmul(x, self.w) * (1.0 + 0.1 * self.count)

    layer = Counting()
    model = keras.Sequential([keras.Input((3,)), layer])
    x, y = _data(16)
    _tape_steps(tf, keras, model, keras.optimizers.SGD(0.01), x, y, steps=2)
    after_loop = float(layer.count)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    return {"after_loop": after_loop, "after_fit": float(layer.count), "loss": hist.history["loss"],
            "w": layer.w, "inference": model(x[:2]), "n_trainable": len(model.trainable_weights),
            "n_non_trainable": len(model.non_trainable_weights)}


# --- CNNs and RNNs ------------------------------------------------------------------------------------

def program_small_cnn_on_a_tiny_image_batch(tf, keras):
    """``Reshape`` of flat pixels to 6x6 images, ``Conv2D`` + ``MaxPooling2D`` then a
    ``GlobalAveragePooling2D`` branch and a ``Flatten`` + Dense branch, trained by ``fit``; a tape's
    gradient for the conv kernel and the input."""
    inp = keras.Input((36,))
    img = keras.layers.Reshape((6, 6, 1))(inp)
    c = keras.layers.Conv2D(2, 3, padding="same", activation="relu")(img)
    p = keras.layers.MaxPooling2D(2)(c)
    c2 = keras.layers.Conv2D(3, 2, strides=1, padding="valid")(p)
    gap = keras.layers.GlobalAveragePooling2D()(c2)
    flat = keras.layers.Dense(2)(keras.layers.Flatten()(p))
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([gap, flat]))
    model = keras.Model(inp, out)
    _init(model, 2)
    rs = np.random.RandomState(5)
    x = rs.randn(12, 36).astype(np.float32)
    y = x.reshape(12, 6, 6)[:, :3, :3].mean(axis=(1, 2))[:, None].astype(np.float32)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    hist = model.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
    xt = tf.constant(x[:4])
    with tf.GradientTape() as tape:
        tape.watch(xt)
        loss = keras.ops.sum(model(xt))
    g_kernel, g_x = tape.gradient(loss, [model.layers[2].kernel, xt])
    return {"loss": hist.history["loss"], "g_kernel": g_kernel, "g_x": g_x,
            "shapes": [list(layer.output.shape[1:]) for layer in model.layers[1:]]}


def program_conv1d_sequence_model_in_a_tape_loop(tf, keras):
    """``Conv1D`` with causal padding and dilation, a strided valid ``Conv1D`` and
    ``GlobalMaxPooling1D`` over a sequence batch, trained by a tape with RMSprop."""
    model = keras.Sequential([keras.Input((8, 2)),
                              keras.layers.Conv1D(3, 2, padding="causal", dilation_rate=2, activation="tanh"),
                              keras.layers.Conv1D(2, 3, strides=2), keras.layers.GlobalMaxPooling1D(),
                              keras.layers.Dense(1)])
    _init(model, 3)
    rs = np.random.RandomState(6)
    x = rs.randn(6, 8, 2).astype(np.float32)
    y = x[:, -3:, 0].sum(axis=1, keepdims=True).astype(np.float32)
    losses = _tape_steps(tf, keras, model, keras.optimizers.RMSprop(0.01), x, y)
    return {"losses": losses, "out": model(x[:2]), "weights": model.get_weights()}


def program_embedding_with_mask_zero_feeds_an_lstm_and_a_gru(tf, keras):
    """``Embedding(mask_zero=True)`` feeding an ``LSTM`` and a ``GRU(return_sequences=True)`` +
    masked average: padded steps are skipped, the mask is the embedding's ``compute_mask``, and SGD
    trains the table through the mask (the padding row gets no gradient)."""
    ids = np.array([[3, 5, 2, 0, 0], [7, 1, 4, 6, 9], [8, 2, 0, 0, 0]], np.int32)
    inp = keras.Input((5,), dtype="int32")
    emb = keras.layers.Embedding(10, 3, mask_zero=True)
    e = emb(inp)
    last = keras.layers.LSTM(4)(e)
    seq = keras.layers.GRU(3, return_sequences=True)(e)
    avg = keras.layers.GlobalAveragePooling1D()(seq)
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([last, avg]))
    model = keras.Model(inp, out)
    _init(model, 7)
    full = model(ids)
    y = np.array([[0.5], [-1.0], [1.0]], np.float32)
    losses = _tape_steps(tf, keras, model, keras.optimizers.SGD(0.1), ids, y, steps=2)
    return {"full": full, "mask": emb.compute_mask(ids), "losses": losses,
            "table": emb.embeddings, "after": model(ids)}


def program_bidirectional_and_time_distributed_layers(tf, keras):
    """``TimeDistributed(Dense)`` then ``Bidirectional(GRU, return_sequences=True)`` (concat) and
    ``Bidirectional(LSTM, merge_mode="sum")``, trained by ``fit``; the layers' output shapes."""
    model = keras.Sequential([keras.Input((4, 3)), keras.layers.TimeDistributed(keras.layers.Dense(2)),
                              keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True)),
                              keras.layers.Bidirectional(keras.layers.LSTM(2), merge_mode="sum"),
                              keras.layers.Dense(1)])
    _init(model, 8)
    rs = np.random.RandomState(9)
    x = rs.randn(8, 4, 3).astype(np.float32)
    y = x[:, 0, :1] - x[:, -1, 1:2]
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    hist = model.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
    return {"loss": hist.history["loss"], "weights": model.get_weights(),
            "shapes": [list(layer.output.shape[1:]) for layer in model.layers]}


# --- callbacks and fit's arguments ----------------------------------------------------------------

def program_reduce_lr_on_plateau_lowers_the_rate(tf, keras):
    """``ReduceLROnPlateau`` on a loss that improves by less than ``min_delta``: the rate halves
    (down to ``min_lr``), and the history records ``learning_rate``."""
    x, y = _data(16)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse")
    plateau = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1, min_delta=10.0,
                                                min_lr=0.004)
    hist = model.fit(x, y, epochs=5, batch_size=8, shuffle=False, callbacks=[plateau], verbose=0)
    return {"history": hist.history, "lr": float(model.optimizer.learning_rate), "weights": model.get_weights()}


def program_custom_callback_reads_logs_lr_and_iterations(tf, keras):
    """A custom ``Callback`` recording ``logs`` at batch and epoch ends, ``self.model.optimizer
    .learning_rate`` and ``iterations``, beside a ``LearningRateScheduler``; ``History``'s
    ``history``, ``epoch`` and ``params``."""

    class Recorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.events = []

        def on_train_begin(self, logs=None):
            self.events.append(["train_begin", float(self.model.optimizer.learning_rate)])

        def on_train_batch_end(self, batch, logs=None):
            self.events.append(["batch", batch, sorted(logs), float(logs["loss"]),
                                int(self.model.optimizer.iterations)])

        def on_epoch_end(self, epoch, logs=None):
            self.events.append(["epoch", epoch, {k: float(v) for k, v in logs.items()},
                                float(self.model.optimizer.learning_rate)])

    x, y = _data(16)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    rec = Recorder()
    sched = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 / (1 + epoch))
    hist = model.fit(x, y, epochs=3, batch_size=8, shuffle=False, callbacks=[sched, rec], verbose=0)
    return {"events": rec.events, "history": hist.history, "epoch": hist.epoch,
            "params": {k: v for k, v in hist.params.items() if k in ("epochs", "steps", "verbose")}}


def program_callback_stops_training_beside_lambda_callback_and_csv_logger(tf, keras):
    """A custom callback setting ``self.model.stop_training`` once the loss is low enough, a
    ``LambdaCallback`` recording epoch starts and batch losses, and a ``CSVLogger`` file."""
    import os
    import tempfile
    x, y = _data(16)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    seen = []

    class StopBelow(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if logs["loss"] < 2.0:
                self.model.stop_training = True

    lam = keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: seen.append(["begin", e]),
                                         on_batch_end=lambda b, logs: seen.append(["batch", b, float(logs["loss"])]))
    path = os.path.join(tempfile.mkdtemp(), "log.csv")
    hist = model.fit(x, y, epochs=10, batch_size=8, shuffle=False, verbose=0,
                     callbacks=[lam, StopBelow(), keras.callbacks.CSVLogger(path)])
    with open(path) as f:
        rows = [line.strip().split(",") for line in f]
    return {"history": hist.history, "seen": seen, "csv_header": rows[0], "csv_rows": len(rows),
            "csv_last": [v if v == "NA" else float(v) for v in rows[-1]]}


def program_validation_split_and_class_weight(tf, keras):
    """``fit(validation_split=0.25, class_weight=...)`` of a binary classifier: the last quarter
    validates (unweighted), class 1's samples count thrice in the training loss."""
    rs = np.random.RandomState(10)
    x = rs.randn(32, 3).astype(np.float32)
    labels = (x[:, 0] + 0.5 * x[:, 1] > 0.5).astype(np.float32)[:, None]
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1, activation="sigmoid")])
    _init(model)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy",
                  metrics=["accuracy", keras.metrics.AUC(name="auc")])
    hist = model.fit(x, labels, validation_split=0.25, class_weight={0: 1.0, 1: 3.0}, epochs=3, batch_size=8,
                     shuffle=False, verbose=0)
    return {"history": hist.history, "weights": model.get_weights()}


def program_sample_weight_and_initial_epoch_in_fit(tf, keras):
    """``sample_weight`` in ``fit`` and ``evaluate`` with ``weighted_metrics``; a second ``fit``
    resuming at ``initial_epoch=2`` runs epochs 2 and 3 only."""
    x, y = _data(24)
    sw = np.linspace(0.0, 2.0, 24).astype(np.float32)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"], weighted_metrics=["mse"])
    first = model.fit(x, y, sample_weight=sw, epochs=2, batch_size=8, shuffle=False, verbose=0)
    second = model.fit(x, y, sample_weight=sw, epochs=4, initial_epoch=2, batch_size=8, shuffle=False, verbose=0)
    ev = model.evaluate(x, y, sample_weight=sw, batch_size=8, return_dict=True, verbose=0)
    return {"first": first.history, "second": second.history, "epochs": second.epoch, "evaluate": ev,
            "iterations": int(model.optimizer.iterations)}


# --- evaluate, predict and the *_on_batch methods ---------------------------------------------------

def program_evaluate_return_dict_and_predict_with_a_remainder(tf, keras):
    """``evaluate(return_dict=True)`` and a list ``evaluate`` over batches that leave a remainder,
    ``predict`` with ``batch_size=4`` on 10 rows, and ``predict`` of a two-output model."""
    x, y = _data(10)
    model = _mlp(keras)
    model.compile(loss="mse", metrics=["mae", keras.metrics.RootMeanSquaredError(name="rmse")])
    as_dict = model.evaluate(x, y, batch_size=3, return_dict=True, verbose=0)
    as_list = model.evaluate(x, y, batch_size=4, verbose=0)
    inp = keras.Input((3,))
    h = keras.layers.Dense(2)(inp)
    two = keras.Model(inp, [h, keras.layers.Dense(1)(h)])
    _init(two, 2)
    return {"dict": as_dict, "list": as_list, "predict": model.predict(x, batch_size=4, verbose=0),
            "two": two.predict(x, batch_size=4, verbose=0)}


def program_train_test_and_predict_on_batch(tf, keras):
    """``train_on_batch`` (list and ``return_dict``), ``test_on_batch`` and ``predict_on_batch``:
    the metrics of one batch each, the optimizer's step count after."""
    x, y = _data(16)
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse", metrics=["mae"])
    first = model.train_on_batch(x[:8], y[:8])
    second = model.train_on_batch(x[8:], y[8:], return_dict=True)
    weighted = model.train_on_batch(x[:8], y[:8], sample_weight=np.arange(8, dtype=np.float32))
    test = model.test_on_batch(x[8:], y[8:], return_dict=True)
    return {"first": first, "second": second, "weighted": weighted, "test": test,
            "pred": model.predict_on_batch(x[:3]), "iterations": int(model.optimizer.iterations)}


def program_py_dataset_feeds_fit_predict_and_evaluate(tf, keras):
    """A ``keras.utils.PyDataset`` subclass (the guides' replacement for ``Sequence``) whose last
    batch is short, feeding ``fit`` (unshuffled), ``predict`` and ``evaluate``."""
    x, y = _data(20)

    class Batches(keras.utils.PyDataset):
        def __init__(self, x, y=None, batch_size=6, **kwargs):
            super().__init__(**kwargs)
            self.x, self.y, self.batch_size = x, y, batch_size

        def __len__(self):
            return int(np.ceil(len(self.x) / self.batch_size))

        def __getitem__(self, i):
            sl = slice(i * self.batch_size, (i + 1) * self.batch_size)
            return (self.x[sl], self.y[sl]) if self.y is not None else self.x[sl]

    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    hist = model.fit(Batches(x, y), epochs=2, shuffle=False, verbose=0)
    return {"history": hist.history, "predict": model.predict(Batches(x[:8], batch_size=3), verbose=0),
            "evaluate": model.evaluate(Batches(x, y, batch_size=7), verbose=0, return_dict=True)}


# --- optimizers -------------------------------------------------------------------------------------

def program_momentum_nesterov_rmsprop_and_adagrad_in_tape_loops(tf, keras):
    """One model per optimizer, from the same weights, three tape steps each: SGD with momentum,
    with Nesterov momentum, centered RMSprop with momentum, Adagrad; their weights and slots."""
    x, y = _data(8)
    out = {}
    for name, opt in (("momentum", keras.optimizers.SGD(0.05, momentum=0.9)),
                      ("nesterov", keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)),
                      ("rmsprop", keras.optimizers.RMSprop(0.01, rho=0.8, momentum=0.5, centered=True)),
                      ("adagrad", keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.2))):
        model = _mlp(keras)
        losses = _tape_steps(tf, keras, model, opt, x, y)
        out[name] = {"losses": losses, "weights": model.get_weights(), "iterations": int(opt.iterations),
                     "n_variables": len(opt.variables)}
    return out


def program_adam_family_in_tape_loops(tf, keras):
    """The rest of Keras 3's optimizers on one model each, three tape steps: Adam(amsgrad), Adamax,
    Nadam, Adadelta, Ftrl, Lion."""
    x, y = _data(8)
    out = {}
    for name, opt in (("amsgrad", keras.optimizers.Adam(0.05, amsgrad=True)),
                      ("adamax", keras.optimizers.Adamax(0.05)), ("nadam", keras.optimizers.Nadam(0.05)),
                      ("adadelta", keras.optimizers.Adadelta(1.0)), ("ftrl", keras.optimizers.Ftrl(0.1)),
                      ("lion", keras.optimizers.Lion(0.01))):
        model = _mlp(keras)
        out[name] = {"losses": _tape_steps(tf, keras, model, opt, x, y), "weights": model.get_weights()}
    return out


def program_adamw_weight_decay_with_excluded_biases(tf, keras):
    """``AdamW`` weight decay with ``exclude_from_weight_decay(var_names=["bias"])`` in ``fit``,
    beside SGD with ``weight_decay`` in a tape loop: decayed kernels, undecayed biases."""
    x, y = _data(16)
    model = _mlp(keras)
    adamw = keras.optimizers.AdamW(0.02, weight_decay=0.5)
    adamw.exclude_from_weight_decay(var_names=["bias"])
    model.compile(optimizer=adamw, loss="mse")
    hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    looped = _mlp(keras)
    losses = _tape_steps(tf, keras, looped, keras.optimizers.SGD(0.05, weight_decay=0.2), x, y)
    return {"loss": hist.history["loss"], "adamw": model.get_weights(), "sgd_losses": losses,
            "sgd": looped.get_weights()}


def program_clipvalue_and_clipnorm_on_large_gradients(tf, keras):
    """``clipvalue`` on SGD and ``clipnorm`` on Adam against gradients far above the clip, in a tape
    loop and in ``fit``."""
    x, y = _data(8)
    y = y * 50.0
    looped = _mlp(keras)
    losses = _tape_steps(tf, keras, looped, keras.optimizers.SGD(0.1, clipvalue=0.05), x, y)
    fitted = _mlp(keras)
    fitted.compile(optimizer=keras.optimizers.Adam(0.1, clipnorm=0.01), loss="mse")
    hist = fitted.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
    return {"losses": losses, "clipvalue": looped.get_weights(), "fit": hist.history["loss"],
            "clipnorm": fitted.get_weights()}


def program_learning_rate_schedules_follow_iterations(tf, keras):
    """``PiecewiseConstantDecay`` on SGD read each step through ``optimizer.learning_rate`` and
    ``optimizer.iterations``; ``CosineDecay`` with warmup and ``ExponentialDecay(staircase=True)``
    evaluated at steps 0..7 and the cosine one trained by ``fit``."""
    x, y = _data(16)
    model = _mlp(keras)
    opt = keras.optimizers.SGD(keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]))
    seen = []
    for _ in range(6):
        seen.append([int(opt.iterations), float(opt.learning_rate)])
        _tape_steps(tf, keras, model, opt, x, y, steps=1)
    cosine = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=5, alpha=0.1, warmup_target=0.1,
                                                    warmup_steps=2)
    stair = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5, staircase=True)
    fitted = _mlp(keras)
    fitted.compile(optimizer=keras.optimizers.SGD(cosine), loss="mse")
    hist = fitted.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
    return {"seen": seen, "weights": model.get_weights(), "cosine": [float(cosine(s)) for s in range(8)],
            "stair": [float(stair(s)) for s in range(8)], "fit": hist.history["loss"],
            "fit_lr": float(fitted.optimizer.learning_rate), "fit_weights": fitted.get_weights()}


def program_learning_rate_assigned_and_a_custom_schedule(tf, keras):
    """``optimizer.learning_rate = 0.01`` and ``optimizer.learning_rate.assign(0.02)`` between tape
    steps; a ``LearningRateSchedule`` subclass written with ``keras.ops`` driving Adam, with its
    ``get_config`` in the optimizer's; ``PolynomialDecay`` and ``InverseTimeDecay`` values."""

    class Halving(keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, initial):
            self.initial = initial

        def __call__(self, step):
            return self.initial * keras.ops.power(0.5, keras.ops.cast(step, "float32") // 2)

        def get_config(self):
            return {"initial": self.initial}

    x, y = _data(8)
    model = _mlp(keras)
    opt = keras.optimizers.SGD(0.1)
    _tape_steps(tf, keras, model, opt, x, y, steps=1)
    opt.learning_rate = 0.01
    set_lr = float(opt.learning_rate)
    opt.learning_rate.assign(0.02)
    assigned_lr = float(opt.learning_rate)
    _tape_steps(tf, keras, model, opt, x, y, steps=1)
    scheduled = _mlp(keras)
    adam = keras.optimizers.Adam(Halving(0.1))
    seen = []
    for _ in range(3):
        _tape_steps(tf, keras, scheduled, adam, x, y, steps=1)
        seen.append(float(adam.learning_rate))
    poly = keras.optimizers.schedules.PolynomialDecay(0.1, 4, end_learning_rate=0.01, power=2.0)
    inv = keras.optimizers.schedules.InverseTimeDecay(0.1, 2, 0.5)
    return {"set": set_lr, "assigned": assigned_lr, "weights": model.get_weights(), "seen": seen,
            "scheduled": scheduled.get_weights(), "poly": [float(poly(s)) for s in range(6)],
            "inv": [float(inv(s)) for s in range(4)], "config": adam.get_config()["learning_rate"]["config"]}


def program_gradient_accumulation_and_ema_in_fit_and_tape_loops(tf, keras):
    """``gradient_accumulation_steps=2``: ``fit`` and a tape loop move the weights every second
    step only, with the mean of the two gradients, and ``iterations`` counts the updates; ``use_ema``
    with ``ema_overwrite_frequency`` in a tape loop (eager and in a ``tf.function``, alone and with
    accumulation) and in ``fit``, then ``finalize_variable_values``."""
    x, y = _data(16)
    fitted = _mlp(keras)
    fitted.compile(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), loss="mse")
    hist = fitted.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
    out = {"fit": hist.history["loss"], "fit_weights": fitted.get_weights(),
           "fit_iterations": int(fitted.optimizer.iterations)}
    both = {"use_ema": True, "ema_momentum": 0.5, "ema_overwrite_frequency": 3, "gradient_accumulation_steps": 2}
    for name, kwargs, compiled in (("accumulate", {"gradient_accumulation_steps": 2}, False),
                                   ("ema", {"use_ema": True, "ema_momentum": 0.5, "ema_overwrite_frequency": 2}, True),
                                   ("both", both, False), ("both", both, True)):
        model = _mlp(keras)
        opt = keras.optimizers.Adam(0.05, **kwargs)

        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean(keras.ops.square(model(xb) - yb))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        step = tf.function(step) if compiled else step
        snapshots = []
        for i in range(6):
            step(x[2 * i:2 * i + 2], y[2 * i:2 * i + 2])
            snapshots.append([int(opt.iterations), model.get_weights()[-1]])
        opt.finalize_variable_values(model.trainable_variables)
        out[f"{name}_{'compiled' if compiled else 'eager'}"] = [snapshots, model.get_weights()]
    ema_fit = _mlp(keras)
    ema_fit.compile(optimizer=keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3),
                    loss="mse")
    out["ema_fit"] = [ema_fit.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0).history["loss"],
                      ema_fit.get_weights()]
    return out


def program_mixed_float16_policy_trains_then_float32_again(tf, keras):
    """``set_global_policy("mixed_float16")``: layers compute in float16 with float32 variables,
    ``compile`` wraps the optimizer in a ``LossScaleOptimizer``, ``fit`` trains; a float32 output
    layer as the guide writes it; the policy is float32 again after."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inp = keras.Input((3,))
        h = keras.layers.Dense(4, activation="tanh")(inp)
        out = keras.layers.Activation("linear", dtype="float32")(keras.layers.Dense(1)(h))
        model = keras.Model(inp, out)
        _init(model)
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        x, y = _data(16)
        hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
        info = {"compute": model.layers[1].compute_dtype, "variable": model.layers[1].variable_dtype,
                "hidden": str(model.layers[1](x[:2]).dtype), "output": str(model(x[:2]).dtype),
                "optimizer": type(model.optimizer).__name__}
        pred = model.predict(x[:4], verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return {"info": info, "loss": hist.history["loss"], "pred": pred, "weights": model.get_weights(),
            "policy": keras.mixed_precision.global_policy().name}


def program_loss_scale_optimizer_in_a_tape_loop(tf, keras):
    """The mixed precision guide's custom loop: ``LossScaleOptimizer.scale_loss`` under the tape,
    ``apply_gradients`` unscaling (eagerly and in a ``tf.function``); a scale so large that the
    float16 gradients overflow skips the step and halves the scale."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, y = _data(8)
        out = {}
        for name, scale, compiled in (("eager", 1024.0, False), ("compiled", 1024.0, True),
                                      ("overflow", 2.0 ** 40, False)):
            model = _mlp(keras)
            opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05), initial_scale=scale)

            def step(xb, yb):
                with tf.GradientTape() as tape:
                    pred = model(xb, training=True)
                    loss = keras.ops.mean(keras.ops.square(keras.ops.cast(pred, "float32") - yb))
                    scaled = opt.scale_loss(loss)
                grads = tape.gradient(scaled, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss, scaled
            step = tf.function(step) if compiled else step
            losses = []
            for _ in range(3):
                loss, scaled = step(x, y)
                losses.append(float(loss))
            out[name] = {"losses": losses, "scale": float(opt.dynamic_scale), "iterations": int(opt.iterations),
                         "scaled": [float(scaled), str(scaled.dtype)], "weights": model.get_weights()}
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return out


# --- keras.ops and tf.* ops in custom layers --------------------------------------------------------

def program_einsum_and_logsumexp_layer_under_a_tape(tf, keras):
    """A layer computing a bilinear form with ``keras.ops.einsum`` and a soft maximum with
    ``keras.ops.logsumexp``: its output, gradients for its weights and its input, two SGD steps."""

    class Bilinear(keras.layers.Layer):
        def build(self, input_shape):
            d = input_shape[-1]
            self.w = self.add_weight(shape=(d, d), initializer="zeros", name="w")
            self.proj = self.add_weight(shape=(d, 4), initializer="zeros", name="proj")

        def call(self, x):
            quad = keras.ops.einsum("bi,ij,bj->b", x, self.w, x)
            soft = keras.ops.logsumexp(keras.ops.einsum("bi,ik->bk", x, self.proj), axis=-1)
            return quad + soft

    layer = Bilinear()
    x, y = _data(6)
    xt = tf.constant(x)
    layer(xt)
    rs = np.random.RandomState(12)
    layer.set_weights([rs.randn(3, 3).astype(np.float32) * 0.3, rs.randn(3, 4).astype(np.float32) * 0.5])
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = layer(xt)
        loss = keras.ops.mean(keras.ops.square(out - y[:, 0]))
    g_w, g_proj, g_x = tape.gradient(loss, [layer.w, layer.proj, xt])
    opt = keras.optimizers.SGD(0.05)
    losses = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(layer(xt) - y[:, 0]))
        opt.apply_gradients(zip(tape.gradient(loss, layer.trainable_weights), layer.trainable_weights))
        losses.append(loss)
    return {"out": out, "g_w": g_w, "g_proj": g_proj, "g_x": g_x, "losses": losses, "w": layer.w}


def program_top_k_one_hot_segment_sum_and_where_in_a_layer(tf, keras):
    """A layer scoring rows, keeping the ``keras.ops.top_k`` two, summing them per group with
    ``segment_sum``, building ``one_hot`` targets from the indices and choosing with ``where``:
    values and the tape's gradients (the discarded scores get zeros)."""

    class TopKPool(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 5), initializer="zeros", name="w")

        def call(self, x, segments):
            scores = keras.ops.matmul(x, self.w)
            vals, idx = keras.ops.top_k(scores, k=2)
            hot = keras.ops.one_hot(idx[:, 0], 5)
            picked = keras.ops.sum(scores * hot, axis=-1)
            summed = keras.ops.segment_sum(keras.ops.sum(vals, axis=-1), segments, num_segments=3)
            gated = keras.ops.where(summed > 0, summed, 0.1 * summed)
            return picked, gated, idx

    layer = TopKPool()
    rs = np.random.RandomState(13)
    x = tf.constant(rs.randn(6, 3).astype(np.float32))
    segments = tf.constant(np.array([0, 0, 1, 1, 2, 2], np.int32))
    layer(x, segments)
    layer.set_weights([rs.randn(3, 5).astype(np.float32)])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        picked, gated, idx = layer(x, segments)
        loss = keras.ops.sum(picked) + keras.ops.sum(gated * gated)
    return {"picked": picked, "gated": gated, "idx": idx, "g_w": tape.gradient(loss, layer.w),
            "g_x": tape.gradient(loss, x), "g_picked_x": tape.gradient(picked, x)}


def program_tf_ops_mixed_with_keras_ops_on_the_same_tensors(tf, keras):
    """``tf.*`` ops and ``keras.ops`` on the same tensors: a layer whose call uses ``tf.matmul`` and
    ``tf.nn.relu`` beside ``keras.ops.softmax``, and a loss mixing ``tf.reduce_sum`` with
    ``keras.ops``; eager and in a ``tf.function``, with gradients."""

    class MixedLayer(keras.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 4), initializer="zeros", name="kernel")

        def call(self, x):
            h = tf.nn.relu(tf.matmul(x, self.kernel))
            attn = keras.ops.softmax(h, axis=-1)
            return keras.ops.concatenate([attn * h, tf.reduce_max(h, axis=-1, keepdims=True)], axis=-1)

    layer = MixedLayer()
    x, _ = _data(5)
    xt = tf.constant(x)
    layer(xt)
    layer.set_weights([np.random.RandomState(14).randn(3, 4).astype(np.float32)])

    def loss_of(v):
        out = layer(v)
        return tf.reduce_sum(keras.ops.square(out)) + keras.ops.mean(tf.math.log1p(tf.abs(out)))

    results = {}
    for name, fn in (("eager", loss_of), ("compiled", tf.function(loss_of))):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            loss = fn(xt)
        g_kernel, g_x = tape.gradient(loss, [layer.kernel, xt])
        results[name] = [loss, g_kernel, g_x]
    mixed = keras.ops.add(tf.constant([1.0, 2.0]), tf.ones(2)) * tf.constant(3.0)
    results["mixed"] = [mixed, tf.is_tensor(mixed), str(keras.ops.convert_to_tensor(tf.ones(2)).dtype)]
    return results


def program_lambda_layer_of_tf_ops_in_a_functional_fit(tf, keras):
    """A ``keras.layers.Lambda`` wrapping ``tf.math.l2_normalize`` inside a functional model trained
    by ``fit``: ``tf.*`` ops on the layer's symbolic and concrete inputs."""
    inp = keras.Input((3,))
    h = keras.layers.Dense(4)(inp)
    n = keras.layers.Lambda(lambda t: tf.math.l2_normalize(t, axis=-1) * 2.0)(h)
    model = keras.Model(inp, keras.layers.Dense(1)(n))
    _init(model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, y = _data(16)
    hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    return {"loss": hist.history["loss"], "pred": model(x[:3]), "weights": model.get_weights()}


def program_keras_ops_on_tensors_outside_layers_eager_and_compiled(tf, keras):
    """``keras.ops.top_k``, ``segment_sum`` / ``segment_max``, ``einsum``, ``one_hot`` of an
    ``argmax``, ``logsumexp`` and ``where`` on watched tensors, mixed with ``tf.reduce_sum`` and
    ``tf.linalg.trace``: values, indices and gradients, eagerly and in a ``tf.function``."""
    x = tf.constant(np.random.RandomState(16).randn(4, 5).astype(np.float32))
    seg = tf.constant(np.array([0, 0, 1, 2], np.int32))

    def f(v):
        vals, idx = keras.ops.top_k(v, k=2)
        s = keras.ops.segment_sum(v, seg, num_segments=3)
        m = keras.ops.segment_max(v, seg, num_segments=3)
        e = keras.ops.einsum("ij,kj->ik", v, v)
        hot = keras.ops.one_hot(keras.ops.argmax(v, axis=-1), 5)
        lse = keras.ops.logsumexp(v, axis=0)
        w = keras.ops.where(v > 0, v, tf.zeros_like(v))
        total = (keras.ops.sum(vals) + tf.reduce_sum(s * s) + keras.ops.sum(m) + tf.linalg.trace(e)
                 + keras.ops.sum(hot * v) + tf.reduce_sum(lse) + keras.ops.sum(w))
        return total, idx

    out = {}
    for name, fn in (("eager", f), ("compiled", tf.function(f))):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total, idx = fn(x)
        out[name] = [total, idx, tape.gradient(total, x)]
    return out
