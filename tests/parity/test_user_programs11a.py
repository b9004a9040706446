"""Round eleven (a) of realistic user programs: ``model.compile(optimizer=tf.keras.optimizers.<X>(...))``
then ``fit`` / ``evaluate`` / ``predict``, as TensorFlow's Keras tutorials and guides write them, each
run under real TensorFlow 2.21 (whose ``tf.keras`` is tf_keras, Keras 2, here) and under tapejax
(Keras 3 on JAX, trained by tapejax's tf_keras-style optimizers through TF's default train step:
``tapejax/keras/trainer.py``).  Every optimizer of ``tf.keras.optimizers`` and of ``.legacy``
with its own arguments (momentum, Nesterov, AMSGrad, weight decay, centered, Ftrl's strengths),
gradient clipping (``clipnorm`` / ``clipvalue`` / ``global_clipnorm``), learning-rate schedules
(built in and a ``LearningRateSchedule`` subclass) and what a callback reads of them, a two-output
functional model with dict losses, ``loss_weights`` and dict metrics, ``class_weight``,
``sample_weight`` and weighted metrics, ``validation_split`` / ``validation_data`` /
``validation_freq``, ``steps_per_execution``, ``initial_epoch``, the learning-rate callbacks,
``EarlyStopping`` and ``ModelCheckpoint`` (best weights to a ``.weights.h5`` file), a learning rate
assigned between two fits, a model compiled again with another optimizer, ``tf.train.Checkpoint``
with a ``CheckpointManager`` around ``fit``, ``BackupAndRestore`` resuming an interrupted ``fit``,
``model.summary()``, and a subclassed model with TF's ``train_step(self, data)`` using
``self.optimizer`` and ``self.compiled_loss`` / ``self.compute_loss``.  Data are tiny NumPy arrays (no shuffling, no random layers); weights are
set from NumPy on both sides (``keras_init``).  Keras 3 names some history keys differently
(``learning_rate`` for tf_keras' ``lr``): the values are compared.
"""
import os
import tempfile

import numpy as np

from .harness import keras_init, parity

KTOL = dict(rtol=1e-4, atol=1e-5)


def _data(n=16, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _regression(n=16, d=5, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = (x @ rs.randn(d, 1) * 0.5 + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


def _hist(h, keys=None):
    keys = sorted(h.history) if keys is None else keys
    return {k: [float(v) for v in h.history[k]] for k in keys}


def _lr_values(h):
    """The learning rates the LR callbacks logged: tf_keras calls the key ``lr``, Keras 3
    ``learning_rate``."""
    (key,) = [k for k in h.history if k in ("lr", "learning_rate")]
    return [float(v) for v in h.history[key]]


def _weights(model):
    return [v.numpy() for v in model.weights]


def _scce(tf):
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _tf_nadam_eagerly(tf):
    """``run_eagerly=`` for a model compiled with the new ``Nadam``: True on TF's side, whose
    tf_keras Nadam counts its ``u_product`` updates in a Python int that ``fit``'s traced step
    freezes (each traced Variable update multiplies it again: a wrong rule, right eagerly);
    tapejax's compiled step is the eager rule."""
    return tf.__name__.startswith("tensorflow")


def _mlp(tf, seed=1, hidden=4, out=3, activation="relu"):
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(hidden, activation=activation),
                                 tf.keras.layers.Dense(out)])
    keras_init(model, seed)
    return model


# ---------------------------------------------------------------------------
# The optimizers and their arguments
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_sgd_nesterov_with_clipnorm_on_a_batched_dataset(tf):
    """The "Training & evaluation with the built-in methods" guide's shape: SGD with Nesterov
    momentum and ``clipnorm``, a metrics list (string and object), ``fit`` on a batched
    ``tf.data.Dataset`` validated on another, ``evaluate(return_dict=True)`` and ``predict`` on a
    dataset of features; ``model.summary()`` after ``compile``."""
    x, y = _data(n=24, seed=1)
    xv, yv = _data(n=8, seed=2)
    model = _mlp(tf, seed=2, hidden=6)
    opt = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9, nesterov=True, clipnorm=1.0)
    model.compile(optimizer=opt, loss=_scce(tf),
                  metrics=["accuracy", tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")])
    model.summary(print_fn=lambda *args, **kwargs: None)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    val = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(4)
    h = model.fit(train, validation_data=val, epochs=3, verbose=0)
    ev = sorted(model.evaluate(val, verbose=0, return_dict=True).items())
    pred = model.predict(tf.data.Dataset.from_tensor_slices(xv).batch(4), verbose=0)
    return _hist(h), ev, pred, int(opt.iterations.numpy()), _weights(model)


@parity(**KTOL)
def test_adam_amsgrad_with_clipvalue_and_validation_freq(tf):
    """Adam with ``amsgrad=True`` and ``clipvalue``, validated every second epoch
    (``validation_freq=2``: the ``val_`` lists are half as long); the optimizer's variable count
    (iterations and three slots a weight) and step count."""
    x, y = _data(n=16, seed=3)
    xv, yv = _data(n=8, seed=4)
    model = _mlp(tf, seed=3)
    opt = tf.keras.optimizers.Adam(learning_rate=0.03, amsgrad=True, clipvalue=0.2)
    model.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=4, shuffle=False, validation_data=(xv, yv), validation_freq=2,
                  verbose=0)
    return _hist(h), int(opt.iterations.numpy()), len(opt.variables), _weights(model)


@parity(**KTOL)
def test_adamw_and_adam_weight_decay_on_a_regression(tf):
    """A regression MLP trained with ``AdamW(weight_decay=)`` and with ``Adam(weight_decay=)`` whose
    biases are excluded (``exclude_from_weight_decay(var_names=["bias"])``), ``"mse"`` with the
    ``"mae"`` and ``RootMeanSquaredError`` metrics, ``validation_split``, then
    ``evaluate(return_dict=True)``."""
    x, y = _regression(n=20, seed=5)
    out = []
    for make in (lambda: tf.keras.optimizers.AdamW(learning_rate=0.02, weight_decay=0.1),
                 lambda: tf.keras.optimizers.Adam(learning_rate=0.02, weight_decay=0.2)):
        model = _mlp(tf, seed=6, hidden=8, out=1, activation="tanh")
        opt = make()
        if type(opt).__name__ == "Adam":
            opt.exclude_from_weight_decay(var_names=["bias"])
        model.compile(optimizer=opt, loss="mse", metrics=["mae", tf.keras.metrics.RootMeanSquaredError(name="rmse")])
        h = model.fit(x, y, batch_size=5, epochs=3, shuffle=False, validation_split=0.2, verbose=0)
        ev = sorted(model.evaluate(x, y, batch_size=10, verbose=0, return_dict=True).items())
        out.append((_hist(h), ev, _weights(model)))
    return out


@parity(**KTOL)
def test_rmsprop_centered_with_global_clipnorm_and_a_piecewise_schedule(tf):
    """Centered RMSprop with momentum, ``global_clipnorm`` and a ``PiecewiseConstantDecay`` whose
    boundaries fall inside the second and third epochs; ``predict`` after."""
    x, y = _data(n=16, seed=7)
    model = _mlp(tf, seed=8, hidden=6)
    sched = tf.keras.optimizers.schedules.PiecewiseConstantDecay([5, 9], [0.02, 0.01, 0.002])
    opt = tf.keras.optimizers.RMSprop(learning_rate=sched, rho=0.8, momentum=0.5, centered=True, global_clipnorm=0.5)
    model.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    return _hist(h), model.predict(x[:5], verbose=0), int(opt.iterations.numpy()), _weights(model)


@parity(**KTOL)
def test_adagrad_binary_classifier_with_class_weight(tf):
    """The imbalanced-data tutorial's shape: a sigmoid binary classifier, Adagrad with an initial
    accumulator, ``class_weight`` for the rare class, binary accuracy, precision and recall."""
    rs = np.random.RandomState(9)
    x = rs.randn(24, 5).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0.8).astype(np.float32)[:, None]
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(6, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    keras_init(model, 10)
    opt = tf.keras.optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.2)
    model.compile(optimizer=opt, loss=tf.keras.losses.BinaryCrossentropy(),
                  metrics=[tf.keras.metrics.BinaryAccuracy(name="accuracy"), tf.keras.metrics.Precision(name="precision"),
                           tf.keras.metrics.Recall(name="recall")])
    neg, pos = np.bincount(y[:, 0].astype(np.int64))
    class_weight = {0: (1 / neg) * (len(y) / 2.0), 1: (1 / pos) * (len(y) / 2.0)}
    h = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, class_weight=class_weight, verbose=0)
    ev = sorted(model.evaluate(x, y, verbose=0, return_dict=True).items())
    return _hist(h), ev, model.predict(x[:6], verbose=0), _weights(model)


@parity(**KTOL)
def test_adadelta_with_sample_weight_and_weighted_metrics(tf):
    """Adadelta (``learning_rate=1.0`` as the paper) with per-example ``sample_weight`` in ``fit``
    and ``evaluate``, ``metrics`` and ``weighted_metrics`` side by side."""
    x, y = _data(n=16, seed=11)
    w = np.linspace(0.25, 2.0, 16).astype(np.float32)
    model = _mlp(tf, seed=12)
    opt = tf.keras.optimizers.Adadelta(learning_rate=1.0, rho=0.9)
    model.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"],
                  weighted_metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="wacc")])
    h = model.fit(x, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
    ev = sorted(model.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0, return_dict=True).items())
    return _hist(h), ev, int(opt.iterations.numpy()), _weights(model)


@parity(**KTOL)
def test_ftrl_and_adamax_and_nadam_fit_the_same_model(tf):
    """One small classifier trained by Ftrl (L1, L2 and shrinkage strengths), Adamax and Nadam in
    turn, each freshly initialised: the loss curves, ``evaluate`` and weights (TF's Nadam model runs
    eagerly: ``_tf_nadam_eagerly``)."""
    x, y = _data(n=16, seed=13)
    out = []
    for make in (lambda: tf.keras.optimizers.Ftrl(learning_rate=0.2, l1_regularization_strength=0.01,
                                                  l2_regularization_strength=0.02,
                                                  l2_shrinkage_regularization_strength=0.01),
                 lambda: tf.keras.optimizers.Adamax(learning_rate=0.05, beta_1=0.8),
                 lambda: tf.keras.optimizers.Nadam(learning_rate=0.02)):
        model = _mlp(tf, seed=14)
        opt = make()
        model.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"],
                      run_eagerly=type(opt).__name__ == "Nadam" and _tf_nadam_eagerly(tf))
        h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        out.append((type(opt).__name__, _hist(h), model.evaluate(x, y, verbose=0), _weights(model)))
    return out


@parity(**KTOL)
def test_the_legacy_optimizers_compile_and_fit(tf):
    """``tf.keras.optimizers.legacy.*`` (what TF 2.11+ users on Apple silicon were told to use),
    with their ``decay`` argument and Nesterov / AMSGrad: each compiled and fit on one dataset, then
    ``model.summary()``."""
    x, y = _data(n=16, seed=15)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    leg = tf.keras.optimizers.legacy
    makers = [lambda: leg.SGD(learning_rate=0.1, momentum=0.8, nesterov=True, decay=0.01),
              lambda: leg.Adam(learning_rate=0.02, amsgrad=True),
              lambda: leg.Adagrad(learning_rate=0.1),
              lambda: leg.Adadelta(learning_rate=1.0),
              lambda: leg.Adamax(learning_rate=0.03),
              lambda: leg.Nadam(learning_rate=0.02),
              lambda: leg.Ftrl(learning_rate=0.1, l2_regularization_strength=0.01)]
    out = []
    for make in makers:
        model = _mlp(tf, seed=16)
        opt = make()
        model.compile(optimizer=opt, loss=_scce(tf))
        h = model.fit(ds, epochs=2, verbose=0)
        model.summary(print_fn=lambda *args, **kwargs: None)
        out.append((type(opt).__name__, _hist(h), int(opt.iterations.numpy()), _weights(model)))
    return out


# ---------------------------------------------------------------------------
# Learning rates: schedules, callbacks, assignment
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_custom_learning_rate_schedule_subclass_with_nadam(tf):
    """The Transformer tutorial's ``CustomSchedule(LearningRateSchedule)`` (linear warmup then
    ``rsqrt`` decay, ``get_config``) driving Nadam (eagerly on TF's side: ``_tf_nadam_eagerly``);
    the schedule read back at a few steps."""

    class CustomSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, d_model, warmup_steps=4):
            super().__init__()
            self.d_model = tf.cast(d_model, tf.float32)
            self.warmup_steps = warmup_steps

        def __call__(self, step):
            step = tf.cast(step, dtype=tf.float32)
            arg1 = tf.math.rsqrt(step + 1.0)
            arg2 = (step + 1.0) * (self.warmup_steps ** -1.5)
            return tf.math.rsqrt(self.d_model) * tf.math.minimum(arg1, arg2) * 0.1

        def get_config(self):
            return {"d_model": 16, "warmup_steps": self.warmup_steps}

    x, y = _data(n=16, seed=17)
    sched = CustomSchedule(16)
    model = _mlp(tf, seed=18)
    opt = tf.keras.optimizers.Nadam(sched, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    model.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"], run_eagerly=_tf_nadam_eagerly(tf))
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    return ([float(sched(s)) for s in (0, 3, 4, 10)], _hist(h), int(opt.iterations.numpy()), _weights(model))


@parity(**KTOL)
def test_a_callback_reads_the_scheduled_learning_rate_each_epoch(tf):
    """A callback logging ``self.model.optimizer.learning_rate`` and ``iterations`` at each epoch's
    end while Adamax follows a ``CosineDecay`` (tf_keras' new optimizers: the rate of the last
    step, a Variable) and SGD an ``ExponentialDecay``."""
    x, y = _data(n=16, seed=19)
    out = []
    for make in (lambda s: tf.keras.optimizers.Adamax(s.CosineDecay(0.05, decay_steps=12, alpha=0.1)),
                 lambda s: tf.keras.optimizers.SGD(s.ExponentialDecay(0.1, decay_steps=4, decay_rate=0.5,
                                                                      staircase=True))):
        model = _mlp(tf, seed=20)
        opt = make(tf.keras.optimizers.schedules)
        model.compile(optimizer=opt, loss=_scce(tf))
        seen = []

        class LogLR(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                seen.append((epoch, float(self.model.optimizer.learning_rate),
                             int(self.model.optimizer.iterations.numpy()), float(logs["loss"])))

        model.fit(x, y, batch_size=4, epochs=3, shuffle=False, callbacks=[LogLR()], verbose=0)
        out.append((seen, _weights(model)))
    return out


@parity(**KTOL)
def test_the_callbacks_guide_custom_learning_rate_scheduler(tf):
    """The "Writing your own callbacks" guide's ``CustomLearningRateScheduler``: at each epoch's
    start it reads the rate with ``tf.keras.backend.get_value(self.model.optimizer.learning_rate)``
    and sets the scheduled one with ``tf.keras.backend.set_value(self.model.optimizer.lr, ...)``."""
    lr_schedule_table = [(1, 0.05), (2, 0.02), (4, 0.005)]

    def lr_schedule(epoch, lr):
        if epoch < lr_schedule_table[0][0] or epoch > lr_schedule_table[-1][0]:
            return lr
        for at, rate in lr_schedule_table:
            if epoch == at:
                return rate
        return lr

    class CustomLearningRateScheduler(tf.keras.callbacks.Callback):
        def __init__(self, schedule):
            super().__init__()
            self.schedule = schedule
            self.seen = []

        def on_epoch_begin(self, epoch, logs=None):
            if not hasattr(self.model.optimizer, "lr"):
                raise ValueError('Optimizer must have a "lr" attribute.')
            lr = float(tf.keras.backend.get_value(self.model.optimizer.learning_rate))
            scheduled_lr = self.schedule(epoch, lr)
            tf.keras.backend.set_value(self.model.optimizer.lr, scheduled_lr)
            self.seen.append((epoch, lr, scheduled_lr))

    x, y = _regression(n=16, seed=21)
    model = _mlp(tf, seed=22, hidden=6, out=1)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mean_squared_error",
                  metrics=["mean_absolute_error"])
    cb = CustomLearningRateScheduler(lr_schedule)
    h = model.fit(x, y, batch_size=8, epochs=5, shuffle=False, callbacks=[cb], verbose=0)
    return cb.seen, _hist(h), _weights(model)


@parity(**KTOL)
def test_learning_rate_scheduler_and_reduce_on_plateau_logged_in_history(tf):
    """``LearningRateScheduler`` (the docs' "constant for 2 epochs, then exponential decay") on
    SGD with momentum, then ``ReduceLROnPlateau`` on ``val_loss`` with ``min_lr`` on Adam: the
    rates each logs into the history (its key ``lr`` in tf_keras, ``learning_rate`` in Keras 3)
    and the optimizer's rate at the end."""
    x, y = _data(n=20, seed=23)

    def scheduler(epoch, lr):
        return lr if epoch < 2 else lr * float(np.exp(-0.1))

    model = _mlp(tf, seed=24)
    opt = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.5)
    model.compile(optimizer=opt, loss=_scce(tf))
    h1 = model.fit(x, y, batch_size=5, epochs=4, shuffle=False, verbose=0,
                   callbacks=[tf.keras.callbacks.LearningRateScheduler(scheduler)])
    model2 = _mlp(tf, seed=25)
    opt2 = tf.keras.optimizers.Adam(learning_rate=0.5)
    model2.compile(optimizer=opt2, loss=_scce(tf))
    plateau = tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.2, patience=1, min_lr=0.01)
    h2 = model2.fit(x, y, batch_size=5, epochs=5, shuffle=False, validation_split=0.2, callbacks=[plateau], verbose=0)
    return (_lr_values(h1), _hist(h1, ["loss"]), float(opt.learning_rate.numpy()),
            _lr_values(h2), _hist(h2, ["loss", "val_loss"]), float(opt2.learning_rate.numpy()))


@parity(**KTOL)
def test_learning_rate_assigned_between_fits_then_compiled_again(tf):
    """Fine-tuning's shape: fit, ``model.optimizer.learning_rate.assign(...)`` lower, fit again
    (the same optimizer continues), then ``compile`` again with another optimizer (RMSprop) and
    fit: each optimizer's step count, rate and the weights."""
    x, y = _data(n=16, seed=26)
    model = _mlp(tf, seed=27)
    first = tf.keras.optimizers.Adam(learning_rate=0.05)
    model.compile(optimizer=first, loss=_scce(tf), metrics=["accuracy"])
    h1 = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    model.optimizer.learning_rate.assign(0.005)
    h2 = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    second = tf.keras.optimizers.RMSprop(learning_rate=0.01)
    model.compile(optimizer=second, loss=_scce(tf), metrics=["accuracy"])
    h3 = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return (_hist(h1), _hist(h2), _hist(h3), int(first.iterations.numpy()), float(first.learning_rate.numpy()),
            int(second.iterations.numpy()), model.optimizer is second, _weights(model))


# ---------------------------------------------------------------------------
# Models, losses and the fit loop's arguments
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_two_output_functional_model_with_dict_losses_weights_and_metrics(tf):
    """A functional model with a classification head and a regression head named ``cls`` and
    ``reg``: ``loss`` and ``metrics`` dicts keyed by output name, ``loss_weights``, targets given
    as a dict, ``validation_split``; the history (the total and per-output losses, the metrics and
    their ``val_`` values), ``evaluate`` as a dict and as a list, and both heads' predictions."""
    x, y = _data(n=16, seed=28)
    t = _regression(n=16, seed=29)[1]
    inp = tf.keras.Input((5,), name="features")
    hidden = tf.keras.layers.Dense(6, activation="relu")(inp)
    cls = tf.keras.layers.Dense(3, name="cls")(hidden)
    reg = tf.keras.layers.Dense(1, name="reg")(hidden)
    model = tf.keras.Model(inputs=inp, outputs=[cls, reg])
    keras_init(model, 30)
    opt = tf.keras.optimizers.Adam(learning_rate=0.02)
    model.compile(optimizer=opt, loss={"cls": _scce(tf), "reg": "mse"}, loss_weights={"cls": 1.0, "reg": 0.5},
                  metrics={"cls": ["accuracy"], "reg": [tf.keras.metrics.MeanAbsoluteError(name="mae")]})
    h = model.fit(x, {"cls": y, "reg": t}, batch_size=4, epochs=3, shuffle=False, validation_split=0.25, verbose=0)
    # (Keras 3 orders the dict by name: the sorted items compared)
    ev = sorted(model.evaluate(x, {"cls": y, "reg": t}, verbose=0, return_dict=True).items())
    pred_cls, pred_reg = model.predict(x[:4], verbose=0)
    return (_hist(h), ev, model.evaluate(x, {"cls": y, "reg": t}, verbose=0), pred_cls, pred_reg, _weights(model))


@parity(**KTOL)
def test_steps_per_execution_and_initial_epoch(tf):
    """``compile(steps_per_execution=2)`` (one call runs two batches; the last call of an epoch
    runs the one left), then a second ``fit(epochs=5, initial_epoch=3)`` resuming the epoch count:
    the epochs it reports, the histories and the step count."""
    x, y = _data(n=20, seed=31)
    model = _mlp(tf, seed=32)
    opt = tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.5)
    model.compile(optimizer=opt, loss=_scce(tf), metrics=["accuracy"], steps_per_execution=2)
    h1 = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    seen = []
    cb = tf.keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: seen.append(epoch))
    h2 = model.fit(x, y, batch_size=4, epochs=5, initial_epoch=3, shuffle=False, callbacks=[cb], verbose=0)
    return _hist(h1), _hist(h2), list(h2.epoch), seen, int(opt.iterations.numpy()), _weights(model)


@parity(**KTOL)
def test_early_stopping_restores_the_best_and_model_checkpoint_keeps_it(tf):
    """``EarlyStopping(restore_best_weights=True)`` with ``ModelCheckpoint(save_best_only=True,
    save_weights_only=True)`` on a ``.weights.h5`` path, both watching ``val_loss`` of an SGD run
    whose rate is too high: the epoch it stopped at, the history, the restored weights, and a fresh
    model loading the checkpoint evaluates as the restored one."""
    x, y = _data(n=16, seed=33)
    xv, yv = _data(n=8, seed=34)
    model = _mlp(tf, seed=35, hidden=6)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.8, momentum=0.9), loss=_scce(tf),
                  metrics=["accuracy"])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "best.weights.h5")
        stop = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, restore_best_weights=True)
        ckpt = tf.keras.callbacks.ModelCheckpoint(path, monitor="val_loss", save_best_only=True,
                                                  save_weights_only=True)
        h = model.fit(x, y, batch_size=4, epochs=12, shuffle=False, validation_data=(xv, yv),
                      callbacks=[ckpt, stop], verbose=0)
        fresh = _mlp(tf, seed=36, hidden=6)
        fresh.load_weights(path)
    fresh.compile(loss=_scce(tf), metrics=["accuracy"])
    return (stop.stopped_epoch, _hist(h, ["loss", "val_loss", "accuracy", "val_accuracy"]), _weights(model),
            _weights(fresh), fresh.evaluate(xv, yv, verbose=0), model.evaluate(xv, yv, verbose=0))


@parity(**KTOL)
def test_checkpoint_manager_around_fit_and_a_resumed_run(tf):
    """``tf.train.Checkpoint(model=, optimizer=)`` with a ``CheckpointManager(max_to_keep=2)``
    saved after each one-epoch ``fit``; a new model and optimizer restored from
    ``manager.latest_checkpoint`` continue as the uninterrupted model does, and an older kept
    checkpoint restores its own step count."""
    x, y = _data(n=16, seed=37)

    def make():
        model = _mlp(tf, seed=38)
        model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.03), loss=_scce(tf))
        return model

    model = make()
    with tempfile.TemporaryDirectory() as d:
        ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        manager = tf.train.CheckpointManager(ckpt, d, max_to_keep=2)
        losses = []
        for _ in range(3):
            losses += _hist(model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0))["loss"]
            manager.save()
        kept = [os.path.basename(p) for p in manager.checkpoints]
        resumed = make()
        resumed.optimizer.build(resumed.trainable_variables)
        ckpt2 = tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer)
        ckpt2.restore(manager.latest_checkpoint).assert_consumed()
        restored_step = int(resumed.optimizer.iterations.numpy())
        cont = _hist(resumed.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0))
        whole = _hist(model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0))
        older = make()
        older.optimizer.build(older.trainable_variables)
        tf.train.Checkpoint(model=older, optimizer=older.optimizer).restore(manager.checkpoints[0])
        older_step = int(older.optimizer.iterations.numpy())
    return (losses, kept, restored_step, cont, whole, _weights(resumed), _weights(model), older_step,
            _weights(older))


@parity(**KTOL)
def test_subclassed_model_with_tf_style_train_step_and_compiled_loss(tf):
    """The "Customizing what happens in fit" guide (Keras 2 edition): ``train_step(self, data)``
    with a tape, ``self.compiled_loss(y, y_pred, regularization_losses=self.losses)``,
    ``self.optimizer.apply_gradients`` (an SGD with momentum given to ``compile``) and
    ``self.compiled_metrics.update_state``, ``{m.name: m.result() for m in self.metrics}``, as the
    guide writes them; the model has an L2-regularised layer."""

    class CustomModel(tf.keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
            trainable_vars = self.trainable_variables
            gradients = tape.gradient(loss, trainable_vars)
            self.optimizer.apply_gradients(zip(gradients, trainable_vars))
            self.compiled_metrics.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    x, y = _regression(n=16, seed=39)
    inputs = tf.keras.Input(shape=(5,))
    hidden = tf.keras.layers.Dense(6, activation="tanh", kernel_regularizer=tf.keras.regularizers.l2(0.01))(inputs)
    outputs = tf.keras.layers.Dense(1)(hidden)
    model = CustomModel(inputs, outputs)
    keras_init(model, 40)
    opt = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
    model.compile(optimizer=opt, loss="mse", metrics=["mae"])
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    return _hist(h, ["loss", "mae"]), int(opt.iterations.numpy()), _weights(model)


@parity(**KTOL)
def test_subclassed_model_with_compute_loss_and_its_own_metric_trackers(tf):
    """The guide's later form: ``self.compute_loss(y=y, y_pred=y_pred)`` in ``train_step`` and
    ``test_step``, ``self.optimizer`` an Adam given to ``compile``, ``Mean`` / ``MeanAbsoluteError``
    trackers listed in ``metrics`` (so ``reset_states`` runs each epoch); ``fit`` with
    ``validation_data``, then ``evaluate``."""

    class CustomModel(tf.keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = tf.keras.metrics.Mean(name="loss")
            self.mae_metric = tf.keras.metrics.MeanAbsoluteError(name="mae")

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            self.loss_tracker.update_state(loss)
            self.mae_metric.update_state(y, y_pred)
            return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

        def test_step(self, data):
            x, y = data
            y_pred = self(x, training=False)
            self.loss_tracker.update_state(self.compute_loss(y=y, y_pred=y_pred))
            self.mae_metric.update_state(y, y_pred)
            return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

        @property
        def metrics(self):
            return [self.loss_tracker, self.mae_metric]

    x, y = _regression(n=16, seed=41)
    xv, yv = _regression(n=8, seed=42)
    inputs = tf.keras.Input(shape=(5,))
    outputs = tf.keras.layers.Dense(1)(tf.keras.layers.Dense(6, activation="relu")(inputs))
    model = CustomModel(inputs, outputs)
    keras_init(model, 43)
    opt = tf.keras.optimizers.Adam(learning_rate=0.02)
    model.compile(optimizer=opt, loss="mse")
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, validation_data=(xv, yv), verbose=0)
    ev = model.evaluate(xv, yv, verbose=0)
    # (tf_keras lists the metrics' variables among a subclassed model's weights: the trainable ones compared)
    return _hist(h, ["loss", "mae", "val_loss", "val_mae"]), [float(e) for e in ev], int(opt.iterations.numpy()), \
        [v.numpy() for v in model.trainable_weights]


# ---------------------------------------------------------------------------
# BackupAndRestore: an interrupted fit resumed
# ---------------------------------------------------------------------------

def _backup_run(tf, fresh_model):
    """The ``BackupAndRestore`` docs' program: a callback interrupts ``fit`` at the start of epoch
    2; ``fit`` again with the same ``backup_dir`` resumes at epoch 2 (on the same model, or on a
    ``fresh_model`` as a restarted job builds), then finishes.  The epochs it ran, the losses,
    the optimizer's step count and weights, and an uninterrupted run's."""
    x, y = _data(n=16, seed=44)

    def make():
        model = _mlp(tf, seed=45)
        model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.02), loss=_scce(tf))
        return model

    class InterruptingCallback(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                raise RuntimeError("Interrupting!")

    model = make()
    with tempfile.TemporaryDirectory() as d:
        callback = tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(d, "backup"))
        try:
            model.fit(x, y, batch_size=4, epochs=4, shuffle=False, verbose=0,
                      callbacks=[callback, InterruptingCallback()])
        except RuntimeError:
            pass
        if fresh_model:
            model = make()
        history = model.fit(x, y, batch_size=4, epochs=4, shuffle=False, verbose=0, callbacks=[callback])
    whole = make()
    whole_losses = _hist(whole.fit(x, y, batch_size=4, epochs=4, shuffle=False, verbose=0))["loss"]
    return (list(history.epoch), _hist(history)["loss"], int(model.optimizer.iterations.numpy()), _weights(model),
            whole_losses[2:], _weights(whole))


@parity(**KTOL)
def test_backup_and_restore_resumes_an_interrupted_fit(tf):
    """``BackupAndRestore`` as its docs use it: the same model fit again after the interruption
    runs epochs 2 and 3 alone, as the uninterrupted run (Keras 3's callback reads the
    optimizer's ``built``)."""
    return _backup_run(tf, fresh_model=False)


@parity(**KTOL)
def test_backup_and_restore_resumes_on_a_fresh_model(tf):
    """A restarted job: a new model and optimizer fit with the same ``backup_dir`` resume from the
    backup (weights, epoch and the optimizer's step count and slots) and end as the
    uninterrupted run."""
    return _backup_run(tf, fresh_model=True)
