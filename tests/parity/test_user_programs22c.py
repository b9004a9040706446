"""Round twenty-two (c) of realistic user programs, first half: functional Keras models with several
inputs and outputs trained by ``compile`` / ``fit`` with callbacks, as TF's guides ("The Functional
API", "Training and evaluation with the built-in methods", "Writing your own callbacks") and the
keras.io examples write them, run under real TensorFlow 2.21 (tf_keras) and under tapejax (Keras 3
on JAX behind ``tf.keras``, trained by tapejax's tf_keras-style optimizers through TF's default
train step).

Every number a user reads is compared: the History's per-epoch logs (the total loss, each output's
loss and metrics, their ``val_`` values), ``evaluate``'s list and dict, ``predict``'s arrays, the
weights after ``fit``, what callbacks saw and left behind (the epoch EarlyStopping stopped at, the
learning rate ReduceLROnPlateau left on the optimizer, ModelCheckpoint's files reloaded, CSVLogger's
rows).  Keras 3 orders a dict of logs otherwise than tf_keras (all metrics before the weighted
ones), so dicts are compared by sorted items; ``evaluate``'s list keeps tf_keras' order.  Data are tiny NumPy arrays fed without shuffling; weights are set from
NumPy on both sides (``keras_init``).  The metrics and preprocessing programs are in
``test_user_programs22c2.py``.  Keras programs run in the default mode only.
"""
import csv
import os
import tempfile

import numpy as np

from .harness import keras_init, parity

KTOL = dict(rtol=1e-4, atol=1e-5)


def _hist(h, keys=None):
    keys = sorted(h.history) if keys is None else keys
    return {k: [float(v) for v in h.history[k]] for k in keys}


def _weights(model):
    return [np.asarray(v.numpy()) for v in model.weights]


def _ev(model, *args, **kwargs):
    return sorted(model.evaluate(*args, verbose=0, return_dict=True, **kwargs).items())


def _cls(n, d=4, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _two_head(tf, seed, d=4, classes=3, names=("cls", "reg")):
    """``features`` -> Dense(6, relu) -> a ``classes``-way logits head and a one-unit regression head."""
    inp = tf.keras.Input((d,), name="features")
    hidden = tf.keras.layers.Dense(6, activation="relu", name="hidden")(inp)
    cls = tf.keras.layers.Dense(classes, name=names[0])(hidden)
    reg = tf.keras.layers.Dense(1, name=names[1])(hidden)
    model = tf.keras.Model(inp, [cls, reg])
    keras_init(model, seed)
    return model


def _scce(tf):
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


# ---------------------------------------------------------------------------
# Multi-input / multi-output functional models
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_functional_guide_ticket_model_with_three_named_inputs_and_two_named_outputs(tf):
    """The functional API guide's issue-ticket model: ``title`` and ``body`` token ids through one
    shared ``Embedding`` (averaged), a ``tags`` multi-hot vector, concatenated; a ``priority``
    score and a ``department`` classifier.  Inputs and targets as dicts keyed by the Input and
    output layer names, ``loss`` and ``loss_weights`` as dicts; the history (total and per-output
    losses), ``evaluate`` as list and dict, ``predict`` on a dict (a list of the two outputs)."""
    rs = np.random.RandomState(2201)
    n = 12
    title = rs.randint(0, 20, size=(n, 5)).astype(np.int32)
    body = rs.randint(0, 20, size=(n, 7)).astype(np.int32)
    tags = rs.randint(0, 2, size=(n, 6)).astype(np.float32)
    priority = rs.rand(n, 1).astype(np.float32)
    department = np.eye(4, dtype=np.float32)[rs.randint(0, 4, size=n)]
    L = tf.keras.layers
    title_in = tf.keras.Input((5,), name="title", dtype="int32")
    body_in = tf.keras.Input((7,), name="body", dtype="int32")
    tags_in = tf.keras.Input((6,), name="tags")
    emb = L.Embedding(20, 4, name="shared_embedding")
    t = L.GlobalAveragePooling1D()(emb(title_in))
    b = L.GlobalAveragePooling1D()(emb(body_in))
    x = L.concatenate([t, b, tags_in])
    priority_out = L.Dense(1, name="priority")(x)
    department_out = L.Dense(4, name="department")(x)
    model = tf.keras.Model(inputs=[title_in, body_in, tags_in], outputs=[priority_out, department_out])
    keras_init(model, 2202)
    model.compile(optimizer=tf.keras.optimizers.RMSprop(0.01),
                  loss={"priority": tf.keras.losses.BinaryCrossentropy(from_logits=True),
                        "department": tf.keras.losses.CategoricalCrossentropy(from_logits=True)},
                  loss_weights={"priority": 1.0, "department": 0.2})
    inputs = {"title": title, "body": body, "tags": tags}
    targets = {"priority": priority, "department": department}
    h = model.fit(inputs, targets, epochs=3, batch_size=4, shuffle=False, verbose=0)
    ev_list = model.evaluate(inputs, targets, batch_size=6, verbose=0)
    p, dep = model.predict({"title": title[:3], "body": body[:3], "tags": tags[:3]}, verbose=0)
    return _hist(h), ev_list, _ev(model, inputs, targets, batch_size=6), p, dep, _weights(model)


@parity(**KTOL)
def test_losses_and_metrics_as_lists_with_loss_weights_as_a_list(tf):
    """Two outputs compiled with ``loss`` as a list (a string and an object), ``loss_weights`` as a
    list and ``metrics`` as a list of lists (strings and objects, per output); targets as a list;
    ``validation_data`` as a tuple of lists.  History keys carry the output layers' names."""
    x, y = _cls(16, seed=2211)
    t = np.random.RandomState(2212).randn(16, 1).astype(np.float32)
    xv, yv = _cls(8, seed=2213)
    tv = np.random.RandomState(2214).randn(8, 1).astype(np.float32)
    model = _two_head(tf, 2215)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.02),
                  loss=[_scce(tf), "mse"], loss_weights=[0.5, 2.0],
                  metrics=[["sparse_categorical_accuracy"], [tf.keras.metrics.MeanAbsoluteError(name="mae"), "mse"]])
    h = model.fit(x, [y, t], batch_size=4, epochs=3, shuffle=False, validation_data=(xv, [yv, tv]), verbose=0)
    pc, pr = model.predict(xv, batch_size=8, verbose=0)
    return _hist(h), _ev(model, xv, [yv, tv]), pc, pr, _weights(model)


@parity(**KTOL)
def test_a_none_loss_for_one_output_trains_only_through_the_other(tf):
    """``loss={"cls": ..., "reg": None}``: the second head gets no loss, so its weights stay put
    under ``fit`` and the history has no ``reg_loss``; ``predict`` still returns both outputs."""
    x, y = _cls(12, seed=2221)
    model = _two_head(tf, 2222)
    reg_before = [w.numpy() for w in model.get_layer("reg").weights]
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.5), loss={"cls": _scce(tf), "reg": None},
                  metrics={"cls": "accuracy"})
    h = model.fit(x, {"cls": y}, batch_size=4, epochs=2, shuffle=False, verbose=0)
    pc, pr = model.predict(x[:4], verbose=0)
    kept = [bool(np.array_equal(a, w.numpy())) for a, w in zip(reg_before, model.get_layer("reg").weights)]
    return _hist(h), kept, pc, pr, _weights(model)


@parity(**KTOL)
def test_guide_none_in_a_loss_list_with_one_target_array_and_a_dict_naming_one_output(tf):
    """The built-in-methods guide's "if you don't want a loss for an output, pass None":
    ``loss=[None, CategoricalCrossentropy()]`` on the ``score_output`` / ``class_output`` model
    with the one target array of the output with a loss, then ``loss={"class_output": ...}``
    naming only it, with a metric on that output; histories (``class_output_loss`` logged) and
    ``evaluate`` lists."""
    rs = np.random.RandomState(2225)
    img = rs.randn(12, 4).astype(np.float32)
    ts = rs.randn(12, 3).astype(np.float32)
    y_class = np.eye(3, dtype=np.float32)[rs.randint(0, 3, size=12)]

    def make():
        image_input = tf.keras.Input((4,), name="img_input")
        timeseries_input = tf.keras.Input((3,), name="ts_input")
        x = tf.keras.layers.concatenate([tf.keras.layers.Dense(4, activation="relu")(image_input),
                                         tf.keras.layers.Dense(3, activation="relu")(timeseries_input)])
        score_output = tf.keras.layers.Dense(1, name="score_output")(x)
        class_output = tf.keras.layers.Dense(3, name="class_output")(x)
        model = tf.keras.Model(inputs=[image_input, timeseries_input], outputs=[score_output, class_output])
        keras_init(model, 2226)
        return model

    cce = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
    first = make()
    first.compile(optimizer=tf.keras.optimizers.RMSprop(1e-2), loss=[None, cce])
    h1 = first.fit([img, ts], y_class, batch_size=4, epochs=2, shuffle=False, verbose=0)
    second = make()
    second.compile(optimizer=tf.keras.optimizers.RMSprop(1e-2), loss={"class_output": cce},
                   metrics={"class_output": [tf.keras.metrics.CategoricalAccuracy(name="acc")]})
    h2 = second.fit({"img_input": img, "ts_input": ts}, {"class_output": y_class}, batch_size=4, epochs=2,
                    shuffle=False, verbose=0)
    return (_hist(h1), first.evaluate([img, ts], y_class, verbose=0), _hist(h2),
            second.evaluate([img, ts], {"class_output": y_class}, verbose=0), _weights(first), _weights(second))


@parity(**KTOL)
def test_add_loss_of_an_activity_layer_under_fit_evaluate_and_predict(tf):
    """The built-in-methods guide's ``ActivityRegularizationLayer``: ``self.add_loss(rate *
    reduce_mean(inputs))`` in ``call``, so ``fit``'s loss is the compiled loss plus the added one
    (in training and in ``evaluate``); ``model.losses`` after a call on a batch."""
    class ActivityRegularizationLayer(tf.keras.layers.Layer):
        def call(self, inputs):
            self.add_loss(0.1 * tf.reduce_mean(tf.square(inputs)))
            return inputs

    x, y = _cls(12, seed=2231)
    inputs = tf.keras.Input((4,), name="digits")
    h1 = tf.keras.layers.Dense(6, activation="relu", name="dense_1")(inputs)
    h1 = ActivityRegularizationLayer()(h1)
    outputs = tf.keras.layers.Dense(3, name="predictions")(h1)
    model = tf.keras.Model(inputs, outputs)
    keras_init(model, 2232)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss=_scce(tf), metrics=["accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    model(x[:4])
    added = [float(v) for v in model.losses]
    return _hist(h), _ev(model, x, y), added, model.predict(x[:3], verbose=0), _weights(model)


@parity(**KTOL)
def test_sample_weight_per_output_as_a_dict_and_validation_data_with_weights(tf):
    """``sample_weight`` as a dict keyed by output name (one head's rows down-weighted, the other's
    all ones), ``weighted_metrics`` per output, ``validation_data=(x, y, sample_weight)`` with dict
    targets and dict weights; the weighted ``val_`` losses and metrics."""
    x, y = _cls(16, seed=2241)
    rs = np.random.RandomState(2242)
    t = rs.randn(16, 1).astype(np.float32)
    w_cls = np.linspace(0.2, 1.8, 16).astype(np.float32)
    w_reg = np.ones(16, np.float32)
    w_reg[::3] = 0.0
    xv, yv = _cls(8, seed=2243)
    tv = rs.randn(8, 1).astype(np.float32)
    wv = {"cls": np.linspace(1.0, 0.3, 8).astype(np.float32), "reg": np.full(8, 0.5, np.float32)}
    model = _two_head(tf, 2244)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.03), loss={"cls": _scce(tf), "reg": "mse"},
                  weighted_metrics={"cls": ["accuracy"], "reg": ["mae"]})
    h = model.fit(x, {"cls": y, "reg": t}, sample_weight={"cls": w_cls, "reg": w_reg}, batch_size=8, epochs=3,
                  shuffle=False, validation_data=(xv, {"cls": yv, "reg": tv}, wv), verbose=0)
    return _hist(h), _ev(model, xv, {"cls": yv, "reg": tv}, sample_weight=wv), _weights(model)


@parity(**KTOL)
def test_class_weight_on_a_single_output_functional_model_with_validation_split(tf):
    """The imbalanced-classification example's ``class_weight`` (inverse frequencies) on a functional
    softmax classifier, ``validation_split=0.25`` (the last quarter held out, unweighted), and
    ``evaluate`` of the held-out rows equal to the last ``val_loss``."""
    rs = np.random.RandomState(2251)
    x = rs.randn(16, 4).astype(np.float32)
    y = np.array([0] * 10 + [1] * 4 + [2] * 2, np.int32)[rs.permutation(16)]
    inp = tf.keras.Input((4,))
    out = tf.keras.layers.Dense(3, activation="softmax")(tf.keras.layers.Dense(5, activation="tanh")(inp))
    model = tf.keras.Model(inp, out)
    keras_init(model, 2252)
    counts = np.bincount(y[:12], minlength=3)
    class_weight = {i: float(12 / (3 * max(c, 1))) for i, c in enumerate(counts)}
    model.compile(optimizer=tf.keras.optimizers.Adagrad(0.2), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, validation_split=0.25, class_weight=class_weight,
                  verbose=0)
    return _hist(h), _ev(model, x[12:], y[12:]), _weights(model)


@parity(**KTOL)
def test_steps_per_epoch_on_a_repeated_dataset_with_validation_steps(tf):
    """``fit(ds.repeat(), steps_per_epoch=3, validation_data=val.repeat(), validation_steps=2)``:
    batches straddle the epochs of the underlying data (5 batches of 4 per pass), validation reads
    two batches each time from a fresh iterator; ``initial_epoch`` in a second ``fit`` continues
    the epoch numbers and the step count."""
    x, y = _cls(20, seed=2261)
    xv, yv = _cls(12, seed=2262)
    model = _two_head(tf, 2263)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    single.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"])
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
    val = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(4).repeat()
    h1 = single.fit(ds, steps_per_epoch=3, epochs=2, validation_data=val, validation_steps=2, verbose=0)
    h2 = single.fit(ds, steps_per_epoch=3, epochs=4, initial_epoch=2, validation_data=val, validation_steps=2,
                    verbose=0)
    return _hist(h1), _hist(h2), list(h2.epoch), int(opt.iterations.numpy()), _weights(single)


# ---------------------------------------------------------------------------
# Callbacks
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_early_stopping_with_min_delta_patience_and_start_from_epoch(tf):
    """``EarlyStopping(monitor="val_loss", min_delta=0.05, patience=1, start_from_epoch=2,
    restore_best_weights=True)`` on a slowly improving run: improvements smaller than
    ``min_delta`` count as none, the first two epochs are not watched; the epoch it stopped at,
    its ``best`` and ``wait``, the history and the restored weights."""
    x, y = _cls(16, seed=2271)
    xv, yv = _cls(8, seed=2272)
    model = _two_head(tf, 2273)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    single.compile(optimizer=tf.keras.optimizers.SGD(0.02), loss=_scce(tf))
    stop = tf.keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0.05, patience=1, start_from_epoch=2,
                                            restore_best_weights=True)
    h = single.fit(x, y, batch_size=8, epochs=10, shuffle=False, validation_data=(xv, yv), callbacks=[stop],
                   verbose=0)
    return (stop.stopped_epoch, float(stop.best), stop.wait, list(h.epoch), _hist(h), _weights(single),
            single.stop_training)


@parity(**KTOL)
def test_early_stopping_on_a_max_mode_metric_with_a_baseline(tf):
    """``EarlyStopping(monitor="val_accuracy", mode="max", baseline=0.9, patience=2)``: training
    stops when no epoch reaches the baseline within ``patience`` epochs; without
    ``restore_best_weights`` the last weights stay."""
    x, y = _cls(16, seed=2281)
    model = _two_head(tf, 2282)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    single.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss=_scce(tf), metrics=["accuracy"])
    stop = tf.keras.callbacks.EarlyStopping(monitor="val_accuracy", mode="max", baseline=0.9, patience=2)
    h = single.fit(x, y, batch_size=4, epochs=8, shuffle=False, validation_split=0.25, callbacks=[stop], verbose=0)
    return stop.stopped_epoch, list(h.epoch), _hist(h), _weights(single)


@parity(**KTOL)
def test_reduce_lr_on_plateau_with_cooldown_in_max_mode_and_the_rate_read_back(tf):
    """``ReduceLROnPlateau(monitor="val_accuracy", mode="max", factor=0.5, patience=1, cooldown=1,
    min_delta=0.01)`` on an Adam run: the rate logged each epoch and the optimizer's
    ``learning_rate`` read back after ``fit``, and the losses the reduced rates gave."""
    x, y = _cls(16, seed=2291)
    xv, yv = _cls(8, seed=2292)
    model = _two_head(tf, 2293)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    opt = tf.keras.optimizers.Adam(0.2)
    single.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"])
    plateau = tf.keras.callbacks.ReduceLROnPlateau(monitor="val_accuracy", mode="max", factor=0.5, patience=1,
                                                   cooldown=1, min_delta=0.01)
    h = single.fit(x, y, batch_size=8, epochs=6, shuffle=False, validation_data=(xv, yv), callbacks=[plateau],
                   verbose=0)
    (key,) = [k for k in h.history if k in ("lr", "learning_rate")]
    return ([float(v) for v in h.history[key]], _hist(h, ["loss", "val_loss", "val_accuracy"]),
            float(opt.learning_rate.numpy()), _weights(single))


@parity(**KTOL)
def test_learning_rate_scheduler_with_a_python_schedule_and_initial_epoch(tf):
    """``LearningRateScheduler(schedule)`` with a step-decay Python function of the epoch only
    (``verbose=0``), run again with ``initial_epoch=2``: the schedule sees the absolute epoch, so
    the second run starts at the decayed rate."""
    def step_decay(epoch):
        return 0.1 * (0.5 ** (epoch // 2))

    x, y = _cls(12, seed=2301)
    model = _two_head(tf, 2302)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    opt = tf.keras.optimizers.SGD(1.0)
    single.compile(optimizer=opt, loss=_scce(tf))
    cb = tf.keras.callbacks.LearningRateScheduler(step_decay)
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, callbacks=[cb], verbose=0)
    lr1 = float(opt.learning_rate.numpy())
    h2 = single.fit(x, y, batch_size=4, epochs=5, initial_epoch=2, shuffle=False, callbacks=[cb], verbose=0)
    key = [k for k in h2.history if k in ("lr", "learning_rate")][0]
    return (_hist(h1, ["loss"]), lr1, [float(v) for v in h2.history[key]], _hist(h2, ["loss"]),
            float(opt.learning_rate.numpy()), _weights(single))


@parity(**KTOL)
def test_model_checkpoint_every_epoch_to_formatted_weights_paths_then_reloaded(tf):
    """``ModelCheckpoint("ckpt-{epoch:02d}-{val_loss:.3f}.weights.h5", save_weights_only=True)``
    saves each epoch under a name formatted from the epoch and the logs; the files' names (the
    formatted losses) and a fresh model loading the second file predicts as the model did then."""
    x, y = _cls(12, seed=2311)
    xv, yv = _cls(8, seed=2312)

    def make():
        model = _two_head(tf, 2313)
        single = tf.keras.Model(model.input, model.get_layer("cls").output)
        single.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss=_scce(tf))
        return single

    single = make()
    seen = []
    grab = tf.keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append(single.predict(xv, verbose=0)))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt-{epoch:02d}-{val_loss:.3f}.weights.h5")
        ck = tf.keras.callbacks.ModelCheckpoint(path, save_weights_only=True, monitor="val_loss")
        h = single.fit(x, y, batch_size=4, epochs=3, shuffle=False, validation_data=(xv, yv), callbacks=[ck, grab],
                       verbose=0)
        names = sorted(os.listdir(d))
        fresh = make()
        fresh.load_weights(os.path.join(d, names[1]))
    return names, _hist(h), seen[1], fresh.predict(xv, verbose=0), _weights(fresh)


@parity(**KTOL)
def test_model_checkpoint_save_best_only_in_max_mode_on_a_training_metric(tf):
    """``ModelCheckpoint(path, monitor="accuracy", mode="max", save_best_only=True,
    save_weights_only=True)``: only epochs that improve the training accuracy write the file (its
    modification count is read through a custom callback), and the best value it kept."""
    x, y = _cls(16, seed=2321)
    model = _two_head(tf, 2322)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    single.compile(optimizer=tf.keras.optimizers.SGD(0.3), loss=_scce(tf), metrics=["accuracy"])

    class Watch(tf.keras.callbacks.Callback):
        def __init__(self, path):
            super().__init__()
            self.path, self.saved, self.last = path, [], None

        def on_epoch_end(self, epoch, logs=None):
            stamp = os.stat(self.path).st_mtime_ns if os.path.exists(self.path) else None
            self.saved.append(stamp is not None and stamp != self.last)
            self.last = stamp

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "best.weights.h5")
        ck = tf.keras.callbacks.ModelCheckpoint(path, monitor="accuracy", mode="max", save_best_only=True,
                                                save_weights_only=True)
        watch = Watch(path)
        h = single.fit(x, y, batch_size=4, epochs=5, shuffle=False, callbacks=[ck, watch], verbose=0)
        best = float(ck.best)
        fresh = tf.keras.Model(single.input, single.output)
        keras_init(fresh, 9)
        fresh.load_weights(path)
        fresh_w = _weights(fresh)
    return _hist(h), best, watch.saved, fresh_w


@parity(**KTOL)
def test_csv_logger_rows_with_validation_and_append(tf):
    """``CSVLogger(path)`` then a second ``fit`` with ``CSVLogger(path, append=True)``: the header
    (``epoch`` then the sorted log keys) and each row's values read back with ``csv``."""
    x, y = _cls(16, seed=2331)
    model = _two_head(tf, 2332)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    single.compile(optimizer=tf.keras.optimizers.Adam(0.02), loss=_scce(tf), metrics=["accuracy"])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "training.log")
        single.fit(x, y, batch_size=4, epochs=2, shuffle=False, validation_split=0.25, verbose=0,
                   callbacks=[tf.keras.callbacks.CSVLogger(path)])
        single.fit(x, y, batch_size=4, epochs=3, initial_epoch=2, shuffle=False, validation_split=0.25, verbose=0,
                   callbacks=[tf.keras.callbacks.CSVLogger(path, append=True)])
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    header = rows[0]
    body = [[int(r[0])] + [float(v) for v in r[1:]] for r in rows[1:]]
    return header, body


@parity(**KTOL)
def test_terminate_on_nan_stops_a_diverging_run_in_its_first_nan_batch(tf):
    """``TerminateOnNaN`` on a regression whose SGD rate makes the loss overflow: training stops
    at the batch whose loss is NaN or inf; how many batches ran (a batch counter callback), the
    epochs recorded in the history and whether the last logged loss is finite."""
    rs = np.random.RandomState(2341)
    x = (rs.randn(24, 3) * 10).astype(np.float32)
    y = (rs.randn(24, 1) * 10).astype(np.float32)
    inp = tf.keras.Input((3,))
    out = tf.keras.layers.Dense(1)(tf.keras.layers.Dense(4)(inp))
    model = tf.keras.Model(inp, out)
    keras_init(model, 2342)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss="mse")
    batches = []
    count = tf.keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: batches.append((batch, bool(np.isfinite(logs["loss"])))))
    h = model.fit(x, y, batch_size=4, epochs=5, shuffle=False, callbacks=[tf.keras.callbacks.TerminateOnNaN(), count],
                  verbose=0)
    return batches, list(h.epoch), [bool(np.isfinite(v)) for v in h.history["loss"]], model.stop_training


@parity(**KTOL)
def test_early_stopping_restores_the_best_weights_when_training_ends_without_stopping(tf):
    """``EarlyStopping(restore_best_weights=True, patience=5)`` on a run shorter than its patience
    whose best ``val_loss`` is not the last epoch's: whether the weights after ``fit`` are the last
    epoch's or the best one's, and ``stopped_epoch`` (0: it never stopped)."""
    x, y = _cls(16, seed=2351)
    xv, yv = _cls(8, seed=2352)
    model = _two_head(tf, 2353)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    single.compile(optimizer=tf.keras.optimizers.SGD(0.5, momentum=0.9), loss=_scce(tf))
    snaps = []
    grab = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: snaps.append(_weights(single)))
    stop = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, restore_best_weights=True)
    h = single.fit(x, y, batch_size=4, epochs=4, shuffle=False, validation_data=(xv, yv), callbacks=[grab, stop],
                   verbose=0)
    best = int(np.argmin(h.history["val_loss"]))
    now = _weights(single)
    return (stop.stopped_epoch, _hist(h), best, [bool(np.array_equal(a, b)) for a, b in zip(now, snaps[best])],
            [bool(np.array_equal(a, b)) for a, b in zip(now, snaps[-1])])


@parity(**KTOL)
def test_a_callback_sets_stop_training_in_a_batch_hook_and_history_params(tf):
    """A custom callback sets ``self.model.stop_training = True`` in ``on_train_batch_end`` once the
    batch loss falls below a threshold: how many batches and epochs ran, ``History.params``
    (``epochs``, ``steps``, ``verbose``), ``model.history`` being the returned History, and the
    ``History.epoch`` list."""
    x, y = _cls(16, seed=2361)
    model = _two_head(tf, 2362)
    single = tf.keras.Model(model.input, model.get_layer("cls").output)
    single.compile(optimizer=tf.keras.optimizers.Adam(0.1), loss=_scce(tf), metrics=["accuracy"])

    class StopBelow(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_train_batch_end(self, batch, logs=None):
            self.seen.append((batch, float(logs["loss"])))
            if logs["loss"] < 0.9:
                self.model.stop_training = True

    cb = StopBelow()
    h = single.fit(x, y, batch_size=4, epochs=6, shuffle=False, callbacks=[cb], verbose=0)
    params = {k: h.params[k] for k in ("epochs", "steps", "verbose")}
    return cb.seen, list(h.epoch), _hist(h), params, single.history is h, _weights(single)


@parity(**KTOL)
def test_tutorial_model_checkpoint_to_a_tf_checkpoint_prefix_and_load_weights(tf):
    """TF's "Save and load models" tutorial: ``ModelCheckpoint(filepath="training_1/cp.ckpt",
    save_weights_only=True)`` during ``fit``, a fresh model's ``load_weights(checkpoint_path)``
    evaluating as the trained one, and ``tf.train.latest_checkpoint`` of the directory."""
    x, y = _cls(12, seed=2371)

    def make():
        model = _two_head(tf, 2372)
        single = tf.keras.Model(model.input, model.get_layer("cls").output)
        single.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss=_scce(tf), metrics=["accuracy"])
        return single

    trained = make()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "training_1", "cp.ckpt")
        cb = tf.keras.callbacks.ModelCheckpoint(filepath=path, save_weights_only=True, verbose=0)
        trained.fit(x, y, batch_size=4, epochs=2, shuffle=False, callbacks=[cb], verbose=0)
        fresh = make()
        fresh.load_weights(path)
        latest = os.path.basename(tf.train.latest_checkpoint(os.path.dirname(path)))
    return latest, _ev(fresh, x, y), _ev(trained, x, y), _weights(fresh)


@parity(**KTOL)
def test_class_weight_with_one_hot_targets_and_categorical_crossentropy(tf):
    """``class_weight`` with one-hot targets (each row's class is its ``argmax``) on a softmax
    functional model under ``categorical_crossentropy``, with ``CategoricalAccuracy`` and
    ``TopKCategoricalAccuracy(k=2)`` metrics; the weighted losses and ``evaluate`` (unweighted)."""
    x, yi = _cls(16, seed=2381)
    y = np.eye(3, dtype=np.float32)[yi]
    model = _two_head(tf, 2382)
    probs = tf.keras.layers.Softmax()(model.get_layer("cls").output)
    single = tf.keras.Model(model.input, probs)
    single.compile(optimizer=tf.keras.optimizers.SGD(0.2), loss="categorical_crossentropy",
                   metrics=[tf.keras.metrics.CategoricalAccuracy(name="acc"),
                            tf.keras.metrics.TopKCategoricalAccuracy(k=2, name="top2")])
    h = single.fit(x, y, batch_size=4, epochs=3, shuffle=False, class_weight={0: 0.5, 1: 2.0, 2: 1.0}, verbose=0)
    return _hist(h), _ev(single, x, y), single.predict(x[:3], verbose=0), _weights(single)
