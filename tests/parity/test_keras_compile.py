"""``model.compile(optimizer=tf.keras.optimizers.Adam(...))``, TF's most common Keras spelling, then
``fit`` / ``evaluate``: the TF side is tf_keras (Keras 2) with its own optimizers; tapejax runs
Keras 3 with tapejax's (tf_keras') optimizers through TF's default train step
(``tapejax/keras/trainer.py``).  Values, the optimizer object the user holds (its step count, its
slots), mixed precision's loss scaling, the legacy optimizers, frozen layers, checkpoints
of the fitted model and optimizer, ``run_eagerly``, learning-rate callbacks, ``model.save`` and
``load_model``.  ``tests/test_keras_trainer.py`` has the
errors (a Keras 3 stateless ``train_step`` with such an optimizer)."""
import os
import tempfile

import numpy as np

from .harness import keras_init, parity

KTOL = dict(rtol=1e-4, atol=1e-5)


def _data(n=16, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _hist(h):
    return {k: [float(v) for v in vals] for k, vals in sorted(h.history.items())}


def _mlp(tf, seed=1, hidden=4):
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(hidden, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    keras_init(model, seed)
    return model


@parity(**KTOL)
def test_sgd_momentum_with_validation_data_and_metrics(tf):
    """SGD with momentum, a metric, ``validation_data``: the history (loss, accuracy and their
    ``val_`` values), ``evaluate``, the weights and the optimizer's step count."""
    x, y = _data()
    xv, yv = _data(n=8, seed=5)
    model = _mlp(tf)
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, validation_data=(xv, yv), verbose=0)
    ev = model.evaluate(xv, yv, verbose=0)
    return (_hist(h), [float(e) for e in ev], int(opt.iterations.numpy()), model.optimizer is opt,
            [v.numpy() for v in model.weights])


@parity(**KTOL)
def test_fit_twice_continues_the_same_optimizer(tf):
    """A second ``fit`` continues: Adam's step count and moments carry on (not a fresh optimizer),
    and the slots the user reads are the ones the steps update."""
    x, y = _data()
    model = _mlp(tf, seed=2)
    opt = tf.keras.optimizers.Adam(0.05)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    first = _hist(model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0))
    second = _hist(model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0))
    kernel = model.trainable_variables[0]
    m = [v for v in opt.variables if v.shape == kernel.shape and "/m" in v.name.replace("_", "/")]
    return first, second, int(opt.iterations.numpy()), m[0].numpy(), [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_legacy_optimizer_and_a_learning_rate_schedule(tf):
    """A legacy optimizer (``tf.keras.optimizers.legacy.RMSprop``) and a new one on a schedule, each
    compiled and fit; the schedule reads the optimizer's own step count."""
    x, y = _data(seed=3)
    out = []
    for make in (lambda: tf.keras.optimizers.legacy.RMSprop(0.01, momentum=0.5),
                 lambda: tf.keras.optimizers.Adam(tf.keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5))):
        model = _mlp(tf, seed=4)
        opt = make()
        model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        out.append((_hist(h), int(opt.iterations.numpy()), [v.numpy() for v in model.weights]))
    return out


@parity(**KTOL)
def test_a_frozen_layer_and_dropout_under_fit_then_predict(tf):
    """A layer frozen before ``compile`` keeps its weights while the rest trains (the optimizer
    gets slots for the trainable ones alone), Dropout at rate 0 sits in the step, then ``predict``."""
    x, y = _data(seed=6)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dropout(0.0), tf.keras.layers.Dense(3)])
    keras_init(model, 7)
    model.layers[0].trainable = False
    opt = tf.keras.optimizers.Adam(0.02)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return (_hist(h), model.predict(x[:4], verbose=0), [v.numpy() for v in model.weights],
            len(opt.variables))


@parity(**KTOL)
def test_run_eagerly_gives_the_compiled_values(tf):
    """``run_eagerly=True`` runs the same step as plain Python: the compiled run's values."""
    x, y = _data(seed=8)
    out = []
    for eager in (False, True):
        model = _mlp(tf, seed=9)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.03), run_eagerly=eager,
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        out.append((_hist(model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)),
                    [v.numpy() for v in model.weights]))
    return out


@parity(**KTOL)
def test_mixed_float16_wraps_the_optimizer_in_loss_scaling(tf):
    """Under a ``mixed_float16`` policy ``compile`` wraps the optimizer in tf_keras'
    ``LossScaleOptimizer`` (dynamic scale 2**15): it counts the steps, the float32 weights train."""
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, y = _data(seed=10)
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="relu"),
                                     tf.keras.layers.Dense(3, dtype="float32")])
        keras_init(model, 11)
        opt = tf.keras.optimizers.SGD(0.1)
        model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        wrapped = isinstance(model.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
        h = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return (wrapped, model.optimizer.inner_optimizer is opt, float(model.optimizer.loss_scale.numpy()),
                int(opt.iterations.numpy()), _hist(h), [v.numpy() for v in model.weights])
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


@parity(**KTOL)
def test_checkpoint_of_a_fitted_model_and_its_optimizer_resumes_the_run(tf):
    """``tf.train.Checkpoint(model=, optimizer=model.optimizer)`` after a fit, restored into a new
    model and optimizer (``optimizer.build`` makes the slots first), continues as the
    uninterrupted run does."""
    x, y = _data(seed=12)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def make():
        model = _mlp(tf, seed=13)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss=loss)
        return model
    whole = make()
    whole.fit(x, y, batch_size=8, epochs=4, shuffle=False, verbose=0)
    with tempfile.TemporaryDirectory() as d:
        first = make()
        first.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).save(os.path.join(d, "ckpt"))
        again = make()
        again.optimizer.build(again.trainable_variables)
        tf.train.Checkpoint(model=again, optimizer=again.optimizer).restore(path).assert_consumed()
        again.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return (int(again.optimizer.iterations.numpy()), [v.numpy() for v in again.weights],
            [v.numpy() for v in whole.weights])


@parity(**KTOL)
def test_learning_rate_callbacks_then_save_and_load(tf):
    """``ReduceLROnPlateau`` and ``LearningRateScheduler`` change the compiled optimizer's
    learning rate between epochs, ``EarlyStopping`` restores the best weights; ``model.save``
    then ``load_model`` gives the same predictions and an optimizer of the same kind and
    learning rate, its step count and its slots."""
    x, y = _data(n=32, seed=14)
    model = _mlp(tf, seed=15, hidden=8)
    opt = tf.keras.optimizers.Adam(0.05)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    cbs = [tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0),
           tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.9),
           tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)]
    h = model.fit(x, y, batch_size=8, epochs=4, validation_split=0.25, shuffle=False, callbacks=cbs, verbose=0)
    hist = {k: [float(v) for v in h.history[k]] for k in ("loss", "val_loss", "accuracy")}
    with tempfile.TemporaryDirectory() as d:
        model.save(os.path.join(d, "m.keras"))
        loaded = tf.keras.models.load_model(os.path.join(d, "m.keras"))
        kind = type(loaded.optimizer).__name__
        lr = float(np.asarray(loaded.optimizer.learning_rate))
        steps = int(loaded.optimizer.iterations.numpy())
        kernel = loaded.trainable_variables[0]
        moments = sorted(float(np.abs(v.numpy()).sum()) for v in loaded.optimizer.variables
                         if v.shape == kernel.shape)
        pred = loaded.predict(x[:4], verbose=0)
    return (hist, float(np.asarray(opt.learning_rate)), int(opt.iterations.numpy()), kind, lr, steps, moments, pred,
            model.predict(x[:4], verbose=0))


@parity(**KTOL)
def test_a_layer_drawing_from_the_global_stream_under_compile_with_a_string_optimizer(tf):
    """keras.io's TF-era VAE ``Sampling`` layer pattern (``tf.random.normal(tf.shape(x))`` in
    ``call``) in a functional model compiled with ``optimizer="adam"`` (Keras 3's own optimizer on
    tapejax's side, whose stateless steps raised DrawInTrace): fit, evaluate and predict.  The noise
    is scaled by 0 so that both sides' numbers agree; the shapes and the history are compared."""
    class Sampling(tf.keras.layers.Layer):
        def call(self, inputs):
            return inputs + 0.0 * tf.random.normal(tf.shape(inputs))

    x, y = _data()
    inp = tf.keras.Input((5,))
    h = Sampling()(tf.keras.layers.Dense(4, activation="tanh")(inp))
    model = tf.keras.Model(inp, tf.keras.layers.Dense(3)(h))
    keras_init(model, 3)
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    return _hist(hist), model.evaluate(x, y, verbose=0), model.predict(x, verbose=0), model.get_weights()
