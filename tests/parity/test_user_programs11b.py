"""Round eleven (b) of realistic user programs, each run under real TensorFlow 2.21 and under tapejax
(the TF side's Keras is tf_keras, Keras 2; tapejax's is Keras 3 on JAX). The programs of TF's guide
"Writing a training loop from scratch" and what users build around them: compiled ``train_step`` /
``test_step`` pairs updating ``tf.keras.metrics`` objects that the loop reads and resets between
epochs, ``tf.data`` pipelines split by ``take`` / ``skip``, mapped, cached and prefetched, a short
last batch (a second trace) beside ``drop_remainder``, ``repeat`` with a ``steps_per_epoch`` loop
over one iterator, epochs iterated inside a ``tf.function``; gradient manipulation (accumulation
over micro-batches into Variables with ``clip_by_global_norm``, two optimizers on disjoint variable
lists, a learning rate decayed by hand through a Variable or a callable, which tf_keras' new
optimizers copy when made and the legacy ones follow, adversarial training from input gradients in
a compiled step, one persistent tape for two losses with a watched tensor and zero unconnected
gradients, ``tf.custom_gradient`` clipping in the backward pass, a target network under
``stop_gradient``); models of ``tf.Module`` and ``tf.keras.layers.Layer`` subclasses whose
variables are made in ``build`` (an output layer tied to the embedding layer), non-trainable
counters incremented in compiled steps, ``ExponentialMovingAverage`` after each step, early
stopping by hand, ``CheckpointManager`` saving every N steps and resuming from the latest; numerics
(a ``mixed_float16`` model under a dynamic ``LossScaleOptimizer`` with an overflowing batch,
``check_numerics``, ``reduce_logsumexp`` losses, label smoothing by hand). Most programs also run
with deferred execution and predicted updates off (``modes=True``). Data is drawn with NumPy and
fed in; Keras weights are set from NumPy on both sides.
"""
import os
import tempfile

import numpy as np

from .harness import Raised, init_array, keras_init, mlp, mlp_vars, parity, raises

TOL = dict(rtol=2e-5, atol=2e-6)
KTOL = dict(rtol=1e-4, atol=1e-5)


def _cls_data(n, d=4, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _reg_data(n, d=3, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = (x @ rs.randn(d, 1) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


def _classifier(tf, d=4, h=8, classes=3, seed=1):
    model = tf.keras.Sequential([tf.keras.Input((d,)), tf.keras.layers.Dense(h, activation="relu"),
                                 tf.keras.layers.Dense(classes)])
    keras_init(model, seed)
    return model


# ---------------------------------------------------------------------------
# The guide's training loop from scratch
# ---------------------------------------------------------------------------

@parity(modes=True, **KTOL)
def test_guide_loop_with_take_skip_split_cached_prefetched_and_a_short_last_batch(tf):
    """The guide's loop: one dataset split by ``take(8)`` / ``skip(8)``, mapped, cached, batched by 8
    (a short last batch of 6, so the compiled ``train_step`` traces twice) and prefetched; the step
    updates a ``Mean`` and a ``SparseCategoricalAccuracy`` and returns the accuracy's ``result()``
    read after the update; the loss is logged as a Python float every second step; the validation
    metrics come from a compiled ``test_step``; all metrics are read and ``reset_state()`` at each
    epoch's end."""
    x, y = _cls_data(38, seed=0)
    model = _classifier(tf, seed=1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(learning_rate=0.05)
    train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
    val_acc = tf.keras.metrics.SparseCategoricalAccuracy()
    train_loss = tf.keras.metrics.Mean()

    def scale(a, b):
        return a * 0.5 + 0.25, b

    full = tf.data.Dataset.from_tensor_slices((x, y))
    val_ds = full.take(8).map(scale).batch(8)
    train_ds = full.skip(8).map(scale).cache().batch(8).prefetch(tf.data.AUTOTUNE)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
        grads = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights))
        train_acc.update_state(yb, logits)
        train_loss.update_state(loss)
        return loss, train_acc.result()

    @tf.function
    def test_step(xb, yb):
        val_acc.update_state(yb, model(xb, training=False))

    log, epochs = [], []
    for epoch in range(3):
        for step, (xb, yb) in enumerate(train_ds):
            loss, running = train_step(xb, yb)
            if step % 2 == 0:
                log.append((epoch, step, float(loss), float(running)))
        for xb, yb in val_ds:
            test_step(xb, yb)
        epochs.append((float(train_loss.result()), float(train_acc.result()), float(val_acc.result())))
        for m in (train_acc, val_acc, train_loss):
            m.reset_state()
    sizes = [int(b[0].shape[0]) for b in train_ds]
    return (log, epochs, sizes, train_step.experimental_get_tracing_count(), float(val_acc.result()),
            [v.numpy() for v in model.weights])


@parity(modes=True, **KTOL)
def test_repeated_dataset_with_drop_remainder_and_a_steps_per_epoch_loop(tf):
    """``repeat().batch(6, drop_remainder=True)`` read by ``next`` on one iterator for
    ``steps_per_epoch = 20 // 6`` steps an epoch (batches straddle the epochs), so the batch shape
    is static and the step traces once; a ``tf.Module`` MLP; ``MeanSquaredError``,
    ``RootMeanSquaredError`` and ``MeanAbsoluteError`` metrics read and reset per epoch."""
    x, y = _reg_data(20, seed=2)

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tf.Variable(init_array((3, 5), 3), name="w1")
            self.b1 = tf.Variable(np.zeros(5, np.float32), name="b1")
            self.w2 = tf.Variable(init_array((5, 1), 4), name="w2")

        def __call__(self, a):
            return tf.matmul(tf.nn.relu(tf.matmul(a, self.w1) + self.b1), self.w2)

    net = MLP()
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.5)
    metrics = [tf.keras.metrics.MeanSquaredError(), tf.keras.metrics.RootMeanSquaredError(),
               tf.keras.metrics.MeanAbsoluteError()]
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(6, drop_remainder=True)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            pred = net(xb)
            loss = tf.reduce_mean(tf.square(pred - yb))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        for m in metrics:
            m.update_state(yb, pred)
        return loss

    steps_per_epoch = 20 // 6
    it = iter(ds)
    out = []
    for _ in range(3):
        losses = [float(train_step(*next(it))) for _ in range(steps_per_epoch)]
        out.append((losses, [float(m.result()) for m in metrics]))
        for m in metrics:
            m.reset_state()
    xb, _ = next(it)
    return (out, xb, ds.element_spec[0].shape.as_list(), train_step.experimental_get_tracing_count(),
            [v.numpy() for v in net.trainable_variables])


@parity(modes=True, **KTOL)
def test_whole_epochs_iterated_inside_a_tf_function_with_binary_metrics(tf):
    """``train_epoch(ds)`` and ``evaluate(ds)`` are ``tf.function``s that iterate a dataset (24 rows
    in batches of 8, 12 in batches of 4), summing the loss and counting batches in tensors;
    ``BinaryAccuracy``, ``Precision``, ``Recall`` and ``AUC`` update on sigmoid probabilities
    inside the loop; the Python loop reads and resets them per epoch.  (A short last batch inside
    a compiled loop is the next case.)"""
    rs = np.random.RandomState(5)
    x = rs.randn(24, 4).astype(np.float32)
    y = (x[:, :1] + 0.5 * x[:, 1:2] + 0.3 * rs.randn(24, 1) > 0).astype(np.float32)
    xv = rs.randn(12, 4).astype(np.float32)
    yv = (xv[:, :1] + 0.5 * xv[:, 1:2] > 0).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(6, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, 6)
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.RMSprop(0.01)
    metrics = [tf.keras.metrics.BinaryAccuracy(), tf.keras.metrics.Precision(), tf.keras.metrics.Recall(),
               tf.keras.metrics.AUC(num_thresholds=20)]
    train_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    val_ds = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(4)

    @tf.function
    def train_epoch(ds):
        total, n = tf.constant(0.0), tf.constant(0)
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = bce(yb, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            for m in metrics:
                m.update_state(yb, tf.sigmoid(logits))
            total += loss
            n += 1
        return total / tf.cast(n, tf.float32), n

    @tf.function
    def evaluate(ds):
        total = tf.constant(0.0)
        for xb, yb in ds:
            logits = model(xb, training=False)
            total += bce(yb, logits) * tf.cast(tf.shape(xb)[0], tf.float32)
            for m in metrics:
                m.update_state(yb, tf.sigmoid(logits))
        return total / 12.0

    out = []
    for _ in range(3):
        loss, n = train_epoch(train_ds)
        train_m = [float(m.result()) for m in metrics]
        for m in metrics:
            m.reset_state()
        val_loss = evaluate(val_ds)
        out.append((float(loss), int(n), train_m, float(val_loss), [float(m.result()) for m in metrics]))
        for m in metrics:
            m.reset_state()
    return out, [v.numpy() for v in model.weights]


@parity(tapejax_expected=Raised("InvalidArgumentError"),
        deliberate="a dataset iterated inside a compiled function gives its components the first "
                   "element's shapes (XLA's static shapes): a short last batch there is "
                   "InvalidArgumentError naming drop_remainder=True (tapejax/data/README.md)")
def test_short_last_batch_inside_a_compiled_epoch_loop(tf):
    """The guide's epoch loop inside a ``tf.function`` over ``batch(4)`` of 10 rows (a last batch
    of 2): TF runs it (its loop body has an unknown batch size); tapejax raises
    ``InvalidArgumentError`` when the short batch arrives rather than computing with a wrong
    shape."""
    x, y = _reg_data(10, seed=38)
    w = tf.Variable(init_array((3, 1), 39))
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train_epoch(ds):
        total = tf.constant(0.0)
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(xb, w) - yb))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            total += loss
        return total

    return raises(train_epoch, tf.data.Dataset.from_tensor_slices((x, y)).batch(4))


# ---------------------------------------------------------------------------
# Gradient manipulation
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_accumulation_over_k_micro_batches_into_variables_then_clipped_update_and_zeroing(tf):
    """Gradient accumulation as users write it for large effective batches: a compiled
    ``accumulate`` adds each micro-batch's gradient (loss divided by k) into non-trainable
    ``tf.Variable`` accumulators; every k=3 micro-batches a compiled ``apply`` clips the accumulated
    values by ``tf.clip_by_global_norm`` (the norm logged as a float, some above the clip and some
    below), applies them with momentum SGD and zeroes the accumulators in the same function."""
    x, y = _reg_data(24, seed=7)
    y = 4.0 * y
    vs = mlp_vars(tf, seed=8)
    accum = [tf.Variable(tf.zeros_like(v), trainable=False) for v in vs]
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    k = 3

    @tf.function
    def accumulate(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb)) / k
        for a, g in zip(accum, tape.gradient(loss, vs)):
            a.assign_add(g)
        return loss * k

    @tf.function
    def apply():
        clipped, norm = tf.clip_by_global_norm([a.value() for a in accum], 2.0)
        opt.apply_gradients(zip(clipped, vs))
        for a in accum:
            a.assign(tf.zeros_like(a))
        return norm

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    log = []
    for epoch in range(3):
        for i, (xb, yb) in enumerate(ds):
            loss = accumulate(xb, yb)
            if (i + 1) % k == 0:
                log.append((epoch, i, float(loss), float(apply())))
    return log, vs, accum, int(opt.iterations.numpy())


@parity(modes=True, **KTOL)
def test_per_layer_learning_rates_by_two_optimizers_on_disjoint_variable_lists(tf):
    """Discriminative learning rates: the body's variables go to ``Adam(1e-2)``, the head's to
    ``SGD(0.1)``, from one tape's gradient over both lists in a compiled step; after four steps the
    body is frozen and only the head's optimizer runs (a second function); each optimizer's
    ``iterations`` counts its own updates."""
    x, y = _reg_data(12, d=4, seed=9)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(6, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, 10)
    body, head = model.layers[0].trainable_variables, model.layers[1].trainable_variables
    opt_body, opt_head = tf.keras.optimizers.Adam(1e-2), tf.keras.optimizers.SGD(0.1)
    mse = tf.keras.losses.MeanSquaredError()

    @tf.function
    def step_both(xb, yb):
        with tf.GradientTape() as tape:
            loss = mse(yb, model(xb, training=True))
        grads = tape.gradient(loss, body + head)
        opt_body.apply_gradients(zip(grads[:len(body)], body))
        opt_head.apply_gradients(zip(grads[len(body):], head))
        return loss, grads

    @tf.function
    def step_head(xb, yb):
        with tf.GradientTape() as tape:
            loss = mse(yb, model(xb, training=True))
        grads = tape.gradient(loss, head)
        opt_head.apply_gradients(zip(grads, head))
        return loss

    out = [step_both(x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4]) for i in (0, 1, 2, 0)]
    out += [step_head(x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4]) for i in (1, 2, 0)]
    return (out, int(opt_body.iterations.numpy()), int(opt_head.iterations.numpy()),
            [v.numpy() for v in model.weights])


@parity(modes=True, **TOL)
def test_learning_rate_variable_and_callable_decayed_by_the_loop_new_and_legacy_optimizers(tf):
    """A loop that decays its learning rate by hand each epoch, ``lr.assign(lr * 0.5)`` on a
    ``tf.Variable`` and a Python value read by a ``lambda``, given to ``tf.keras.optimizers.SGD``
    and ``Adam`` and to their legacy classes: tf_keras' new optimizers copy the Variable's value and
    call the callable once when made (``tf.Variable(learning_rate)``), so only the legacy ones
    follow the decay; the new ones' own ``learning_rate`` is set by assignment in the third
    epoch, and read back."""
    x, y = _reg_data(8, seed=40)
    lr = tf.Variable(0.1, trainable=False)
    py = {"lr": 0.1}
    opts = [tf.keras.optimizers.SGD(learning_rate=lr, momentum=0.5),
            tf.keras.optimizers.Adam(learning_rate=lambda: py["lr"]),
            tf.keras.optimizers.legacy.SGD(learning_rate=lr, momentum=0.5),
            tf.keras.optimizers.legacy.Adam(learning_rate=lambda: py["lr"])]
    ws = [tf.Variable(init_array((3, 1), 41)) for _ in opts]
    out = []
    for epoch in range(3):
        if epoch == 2:
            for opt in opts[:2]:
                opt.learning_rate = 0.05
        for _ in range(2):
            for opt, w in zip(opts, ws):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
                opt.apply_gradients([(tape.gradient(loss, w), w)])
        lr.assign(lr * 0.5)
        py["lr"] *= 0.5
        out.append(([w.numpy() for w in ws], [float(opt.learning_rate.numpy()) for opt in opts[:3]],
                    opts[0].learning_rate is lr, opts[2].learning_rate is lr))
    return out


@parity(modes=True, **KTOL)
def test_adversarial_training_with_pgd_input_gradients_inside_a_compiled_step(tf):
    """Adversarial training: inside one ``tf.function`` step, two PGD steps on a watched input
    tensor (``tape.watch(x_adv)``, the sign of its gradient, projection to the eps-ball by
    ``clip_by_value`` and to [0, 1]), the adversarial batch under ``stop_gradient``, then a tape
    over the clean plus adversarial loss and an Adam update; the first input gradient is
    returned."""
    rs = np.random.RandomState(11)
    x = rs.rand(10, 4).astype(np.float32)
    y = rs.randint(0, 3, 10).astype(np.int32)
    model = _classifier(tf, seed=12)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def train_step(xb, yb, eps):
        x_adv = tf.identity(xb)
        first = None
        for _ in range(2):
            with tf.GradientTape() as in_tape:
                in_tape.watch(x_adv)
                adv_loss = loss_fn(yb, model(x_adv, training=False))
            g_x = in_tape.gradient(adv_loss, x_adv)
            first = g_x if first is None else first
            x_adv = x_adv + 0.5 * eps * tf.sign(g_x)
            x_adv = tf.clip_by_value(tf.clip_by_value(x_adv, xb - eps, xb + eps), 0.0, 1.0)
        x_adv = tf.stop_gradient(x_adv)
        with tf.GradientTape() as tape:
            clean = loss_fn(yb, model(xb, training=True))
            adv = loss_fn(yb, model(x_adv, training=True))
            loss = 0.5 * clean + 0.5 * adv
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return clean, adv, first, x_adv

    out = [train_step(x, y, tf.constant(0.1)) for _ in range(3)]
    return out, train_step.experimental_get_tracing_count(), [v.numpy() for v in model.weights]


@parity(modes=True, **TOL)
def test_persistent_tape_for_two_losses_with_a_watched_temperature_and_zero_unconnected(tf):
    """One ``persistent=True`` tape for a classification loss (logits divided by a watched constant
    temperature, a non-Variable tensor) and a regression loss on a shared encoder; the regression
    loss's gradient asks ``unconnected_gradients=ZERO`` for the classification head and the
    temperature (zeros, not None), the classification loss's gradient gives None for the
    regression head; eagerly for two steps, then in a ``tf.function``."""
    rs = np.random.RandomState(13)
    x = rs.randn(8, 3).astype(np.float32)
    labels = rs.randint(0, 2, 8).astype(np.int32)
    target = rs.randn(8, 1).astype(np.float32)
    enc = tf.Variable(init_array((3, 4), 14))
    head_a = tf.Variable(init_array((4, 2), 15))
    head_b = tf.Variable(init_array((4, 1), 16))
    temp = tf.constant(2.0)
    opt = tf.keras.optimizers.SGD(0.1)
    allv = [enc, head_a, head_b]

    def step():
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(temp)
            h = tf.tanh(tf.matmul(x, enc))
            logits = tf.matmul(h, head_a) / temp
            loss_a = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
            loss_b = tf.reduce_mean(tf.square(tf.matmul(h, head_b) - target))
        ga = tape.gradient(loss_a, allv + [temp])
        gb = tape.gradient(loss_b, allv + [temp], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        g_temp = tape.gradient(loss_a, temp)
        del tape
        total = [gb[0] + ga[0], gb[1], gb[2]]
        opt.apply_gradients(zip(total, allv))
        return loss_a, loss_b, ga, gb, g_temp

    out = [step() for _ in range(2)]
    out += [tf.function(step)() for _ in range(2)]
    return out, allv


@parity(modes=True, **TOL)
def test_custom_gradient_clips_the_backward_pass_and_a_stable_log1pexp(tf):
    """The ``tf.custom_gradient`` examples of TF's docs in training: ``clip_gradient_by_norm(x,
    norm)`` is the identity forward and clips the incoming gradient (None for ``norm``), placed on a
    hidden layer; ``log1pexp`` with the hand-written stable gradient is the output nonlinearity;
    trained with Adam eagerly and in a compiled step; the gradients at 0, 10 and 100 of
    ``log1pexp`` (the value at 100 is inf, its gradient 1)."""

    @tf.custom_gradient
    def clip_gradient_by_norm(x, norm):
        y = tf.identity(x)

        def grad_fn(dy):
            return [tf.clip_by_norm(dy, norm), None]
        return y, grad_fn

    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(upstream):
            return upstream * (1 - 1 / (1 + e))
        return tf.math.log(1 + e), grad

    x, y = _reg_data(10, seed=17)
    y = tf.math.softplus(tf.constant(y))
    vs = mlp_vars(tf, seed=18)
    opt = tf.keras.optimizers.Adam(0.05)
    norm = tf.constant(0.05)

    def loss_fn():
        w1, b1, w2, b2 = vs
        h = clip_gradient_by_norm(tf.tanh(tf.matmul(x, w1) + b1), norm)
        return tf.reduce_mean(tf.square(log1pexp(tf.matmul(h, w2) + b2) - y))

    def step():
        with tf.GradientTape() as tape:
            tape.watch(norm)
            loss = loss_fn()
        grads = tape.gradient(loss, vs + [norm])
        opt.apply_gradients(zip(grads[:4], vs))
        return loss, grads

    out = [step() for _ in range(2)]
    compiled = tf.function(step)
    out += [compiled() for _ in range(2)]
    z = tf.constant([0.0, 10.0, 100.0])
    with tf.GradientTape() as tape:
        tape.watch(z)
        v = log1pexp(z)
    return out, v, tape.gradient(v, z), vs


@parity(modes=True, **KTOL)
def test_byol_target_network_under_stop_gradient_gets_none_and_follows_by_polyak(tf):
    """A BYOL-style step: the online encoder and predictor see view one, a target encoder (trainable
    Variables, a copy of the online one at the start) sees view two under ``tf.stop_gradient``;
    the loss ``2 - 2 cos`` of ``l2_normalize``d vectors; the tape's gradient for the target is None;
    after the Adam update the target moves by ``assign(tau * t + (1 - tau) * w)``, all in a compiled
    step."""
    rs = np.random.RandomState(19)
    v1 = rs.randn(8, 4).astype(np.float32)
    v2 = (v1 + 0.3 * rs.randn(8, 4)).astype(np.float32)
    w = tf.Variable(init_array((4, 3), 20), name="online")
    p = tf.Variable(init_array((3, 3), 21), name="predictor")
    t = tf.Variable(w.numpy(), name="target")
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def train_step(a, b, tau):
        with tf.GradientTape() as tape:
            online = tf.math.l2_normalize(tf.matmul(tf.tanh(tf.matmul(a, w)), p), axis=-1)
            target = tf.stop_gradient(tf.math.l2_normalize(tf.tanh(tf.matmul(b, t)), axis=-1))
            loss = 2.0 - 2.0 * tf.reduce_mean(tf.reduce_sum(online * target, axis=-1))
        grads = tape.gradient(loss, [w, p, t])
        opt.apply_gradients(zip(grads[:2], [w, p]))
        t.assign(tau * t + (1.0 - tau) * w)
        return loss, grads

    out = []
    for i in range(4):
        a, b = (v1, v2) if i % 2 == 0 else (v2, v1)
        out.append(train_step(a, b, tf.constant(0.5)))
    return out, w, p, t


# ---------------------------------------------------------------------------
# Models of Modules and Layers; counters, EMA, early stopping, checkpoints
# ---------------------------------------------------------------------------

@parity(modes=True, **KTOL)
def test_layer_subclasses_building_weights_in_build_with_running_stats_and_a_step_counter(tf):
    """A subclassed ``tf.keras.Model`` of custom ``Layer``s whose weights are made in ``build`` by
    ``add_weight``: a ``Linear``, and a hand-written batch normalisation keeping non-trainable
    running mean and variance updated by ``assign`` in ``call`` when ``training``; a
    ``tf.Variable(0, trainable=False)`` step counter incremented by ``assign_add`` in the compiled
    step drives a warm-up learning rate (a callable of the legacy SGD, which calls it in the
    trace: the counter is read at each step); inference uses the running statistics.  (The
    weights' values come from ``Constant`` initializers: Keras 3 builds a subclassed model's
    layers in a symbolic call whose ``assign``s in ``build`` are discarded.)"""

    class Linear(tf.keras.layers.Layer):
        def __init__(self, units, seed, **kw):
            super().__init__(**kw)
            self.units, self.seed = units, seed

        def build(self, input_shape):
            init = tf.keras.initializers.Constant(init_array((int(input_shape[-1]), self.units), self.seed))
            self.w = self.add_weight(name="w", shape=(int(input_shape[-1]), self.units), initializer=init,
                                     trainable=True)
            self.b = self.add_weight(name="b", shape=(self.units,), initializer="zeros", trainable=True)

        def call(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    class HandBatchNorm(tf.keras.layers.Layer):
        def build(self, input_shape):
            d = int(input_shape[-1])
            self.gamma = self.add_weight(name="gamma", shape=(d,), initializer="ones")
            self.beta = self.add_weight(name="beta", shape=(d,), initializer="zeros")
            self.mean = self.add_weight(name="mean", shape=(d,), initializer="zeros", trainable=False)
            self.var = self.add_weight(name="var", shape=(d,), initializer="ones", trainable=False)

        def call(self, inputs, training=False):
            if training:
                m, v = tf.nn.moments(inputs, axes=[0])
                self.mean.assign(0.8 * self.mean + 0.2 * m)
                self.var.assign(0.8 * self.var + 0.2 * v)
            else:
                m, v = self.mean, self.var
            return self.gamma * (inputs - m) / tf.sqrt(v + 1e-3) + self.beta

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.l1 = Linear(5, 22)
            self.bn = HandBatchNorm()
            self.l2 = Linear(1, 23)

        def call(self, inputs, training=False):
            return self.l2(tf.nn.relu(self.bn(self.l1(inputs), training=training)))

    x, y = _reg_data(16, seed=24)
    net = Net()
    net(x[:2])
    step = tf.Variable(0, trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(
        learning_rate=lambda: 0.1 * tf.minimum(1.0, tf.cast(step, tf.float32) / 3.0), momentum=0.5)

    @tf.function
    def train_step(xb, yb):
        step.assign_add(1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(xb, training=True) - yb))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    out = []
    for i in range(6):
        b = (i % 2) * 8
        out.append((float(train_step(x[b:b + 8], y[b:b + 8])), int(step.numpy())))
    eval_loss = tf.reduce_mean(tf.square(net(x, training=False) - y))
    return (out, eval_loss, len(net.trainable_weights), len(net.non_trainable_weights),
            [v.numpy() for v in net.trainable_weights], [v.numpy() for v in net.non_trainable_weights])


@parity(modes=True, **TOL)
def test_module_trainer_with_a_compiled_method_ema_and_an_int_step_counter(tf):
    """A ``tf.Module`` trainer owning its Variables, an optimizer, an int step counter and an
    ``ExponentialMovingAverage(0.9, num_updates=step)`` applied inside its ``tf.function``
    ``train_step`` after each update; an AutoGraph ``if`` on the counter halves the optimizer's
    learning-rate Variable every third step; evaluation by a compiled method that reads the
    averages."""

    class Trainer(tf.Module):
        def __init__(self):
            super().__init__()
            self.vs = mlp_vars(tf, seed=25)
            self.step = tf.Variable(0, trainable=False)
            self.opt = tf.keras.optimizers.SGD(learning_rate=0.2)
            self.ema = tf.train.ExponentialMovingAverage(0.9, num_updates=self.step)

        @tf.function
        def train_step(self, xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(mlp(tf, self.vs, xb) - yb))
            self.opt.apply_gradients(zip(tape.gradient(loss, self.vs), self.vs))
            self.step.assign_add(1)
            self.ema.apply(self.vs)
            if self.step % 3 == 0:
                self.opt.learning_rate.assign(self.opt.learning_rate * 0.5)
            return loss

        @tf.function
        def eval_loss(self, xb, yb, averaged):
            vs = [self.ema.average(v) for v in self.vs] if averaged else self.vs
            return tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))

    x, y = _reg_data(12, seed=26)
    tr = Trainer()
    out = []
    for i in range(7):
        b = (i % 3) * 4
        loss = tr.train_step(x[b:b + 4], y[b:b + 4])
        out.append((float(loss), float(tr.opt.learning_rate.numpy()), tr.eval_loss(x, y, True), tr.eval_loss(x, y, False)))
    return (out, int(tr.step.numpy()), len(tr.trainable_variables), [v.numpy() for v in tr.vs],
            [tr.ema.average(v).numpy() for v in tr.vs])


@parity(modes=True, **KTOL)
def test_keras_language_model_with_an_output_layer_tied_to_its_embedding_layer(tf):
    """Weight tying between Keras layers: a subclassed model whose output ``Layer`` holds the model's
    ``Embedding`` layer and projects by ``matmul(h, embedding.embeddings, transpose_b=True)`` plus
    its own bias made in ``build``; ``trainable_variables`` lists the shared table once; one
    compiled step with Adam; the table's gradient (a dense sum of the lookup's and the
    projection's parts) and the weights after three steps."""
    rs = np.random.RandomState(42)
    ids = rs.randint(1, 9, size=(6, 4)).astype(np.int32)
    nxt = rs.randint(1, 9, size=(6,)).astype(np.int32)

    class TiedOutput(tf.keras.layers.Layer):
        def __init__(self, embedding, **kw):
            super().__init__(**kw)
            self.embedding = embedding

        def build(self, input_shape):
            self.bias = self.add_weight(name="bias", shape=(self.embedding.input_dim,), initializer="zeros")

        def call(self, h):
            return tf.matmul(h, self.embedding.embeddings, transpose_b=True) + self.bias

    class TinyLM(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.embed = tf.keras.layers.Embedding(9, 5)
            self.mix = tf.keras.layers.Dense(5, activation="tanh")
            self.out = TiedOutput(self.embed)

        def call(self, ids):
            return self.out(self.mix(tf.reduce_mean(self.embed(ids), axis=1)))

    model = TinyLM()
    model(ids[:1])
    model.embed.set_weights([init_array((9, 5), 43)])
    model.mix.set_weights([init_array((5, 5), 44), np.zeros(5, np.float32)])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def train_step(ids, nxt):
        with tf.GradientTape() as tape:
            loss = loss_fn(nxt, model(ids, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, grads

    def by_shape(vs, values):   # (the two Kerases may list the variables in another order)
        pairs = sorted(zip([tuple(v.shape) for v in vs], values), key=lambda p: p[0])
        return [(shape, tf.convert_to_tensor(value)) for shape, value in pairs]

    out = []
    for _ in range(3):
        loss, grads = train_step(ids, nxt)
        out.append((loss, by_shape(model.trainable_variables, grads)))
    return out, len(model.trainable_variables), by_shape(model.trainable_variables, model.trainable_variables)


@parity(modes=True, **KTOL)
def test_checkpoint_manager_with_interval_saves_every_third_step_and_resumes_from_the_latest(tf):
    """``CheckpointManager(max_to_keep=2, step_counter=step, checkpoint_interval=3)`` around a Keras
    model, its Adam and a step Variable incremented in the compiled step; ``manager.save()`` is
    called after every step and writes only at steps 1, 4, 7; after a "crash" a fresh model,
    optimizer and manager on the same directory restore ``manager.latest_checkpoint`` (also
    ``tf.train.latest_checkpoint``) and train on: the resumed losses and final weights equal an
    uninterrupted run's."""
    x, y = _reg_data(16, d=4, seed=27)

    def make():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(4, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        keras_init(model, 28)
        opt = tf.keras.optimizers.Adam(0.02)
        step = tf.Variable(0, trainable=False)

        @tf.function
        def train_step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            step.assign_add(1)
            return loss
        return model, opt, step, train_step

    def batch(i):
        b = (i % 4) * 4
        return x[b:b + 4], y[b:b + 4]

    d = tempfile.mkdtemp()
    model, opt, step, train_step = make()
    ckpt = tf.train.Checkpoint(step=step, model=model, optimizer=opt)
    manager = tf.train.CheckpointManager(ckpt, d, max_to_keep=2, step_counter=step, checkpoint_interval=3)
    losses, saved = [], []
    for i in range(12):
        losses.append(float(train_step(*batch(i))))
        path = manager.save()
        saved.append(None if path is None else os.path.basename(path))
        if i == 7:
            break  # the "crash" after the eighth step
    kept = [os.path.basename(p) for p in manager.checkpoints]

    model2, opt2, step2, train_step2 = make()
    ckpt2 = tf.train.Checkpoint(step=step2, model=model2, optimizer=opt2)
    manager2 = tf.train.CheckpointManager(ckpt2, d, max_to_keep=2, step_counter=step2, checkpoint_interval=3)
    latest = manager2.latest_checkpoint
    same = latest == tf.train.latest_checkpoint(d)
    ckpt2.restore(latest)
    start = int(step2.numpy())
    resumed = [float(train_step2(*batch(i))) for i in range(start, 12)]

    model3, _, _, train_step3 = make()
    whole = [float(train_step3(*batch(i))) for i in range(12)]
    return (saved, kept, os.path.basename(latest), same, start, losses, resumed, whole[start:],
            int(opt2.iterations.numpy()), [v.numpy() for v in model2.weights], [v.numpy() for v in model3.weights])


@parity(modes=True, **KTOL)
def test_early_stopping_by_hand_saves_the_best_epoch_and_restores_it(tf):
    """Early stopping written by hand: after each epoch a compiled evaluation gives the validation
    loss; an improvement (by more than ``min_delta``) saves a checkpoint numbered by the epoch and
    resets the wait, else the wait grows and the loop breaks at ``patience``; then the latest (best)
    checkpoint is restored into the model, whose validation loss is the best one."""
    rs = np.random.RandomState(29)
    x = rs.randn(12, 3).astype(np.float32)
    y = (x[:, :1] + rs.randn(12, 1)).astype(np.float32)
    xv = rs.randn(12, 3).astype(np.float32)
    yv = xv[:, :1].astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(16, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, 30)
    opt = tf.keras.optimizers.Adam(0.05)
    ckpt = tf.train.Checkpoint(model=model)
    manager = tf.train.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=1)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def val_loss():
        return tf.reduce_mean(tf.square(model(xv, training=False) - yv))

    best, wait, patience, history, stopped = float("inf"), 0, 3, [], None
    for epoch in range(40):
        for xb, yb in ds:
            train_step(xb, yb)
        v = float(val_loss())
        history.append(v)
        if v < best - 1e-3:
            best, wait = v, 0
            manager.save(checkpoint_number=epoch)
        else:
            wait += 1
            if wait >= patience:
                stopped = epoch
                break
    last = float(val_loss())
    ckpt.restore(manager.latest_checkpoint)
    return (history, stopped, os.path.basename(manager.latest_checkpoint), best, last, float(val_loss()),
            [v.numpy() for v in model.weights])


# ---------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------

@parity(modes=True, rtol=3e-3, atol=3e-3)
def test_mixed_float16_model_under_a_dynamic_loss_scale_optimizer_skips_an_overflowing_batch(tf):
    """The mixed-precision guide's custom loop: a model built under the ``mixed_float16`` policy
    (float16 compute, float32 variables, a float32 output ``Activation``), a
    ``LossScaleOptimizer(SGD, initial_scale=2**8, dynamic_growth_steps=2)``, ``get_scaled_loss`` in
    the tape and ``get_unscaled_gradients`` after it, in a compiled step; one batch of large inputs
    overflows float16 in the backward pass, so that step is skipped and the scale halves; two good
    steps in a row double it."""
    rs = np.random.RandomState(31)
    x = rs.randn(8, 4).astype(np.float32)
    y = rs.randn(8, 1).astype(np.float32)
    big = (x * 400.0).astype(np.float32)
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(6, activation="relu"),
                                     tf.keras.layers.Dense(1), tf.keras.layers.Activation("linear", dtype="float32")])
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    keras_init(model, 32)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.05), initial_scale=2.0 ** 8,
                                                      dynamic_growth_steps=2)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            loss = tf.reduce_mean(tf.square(pred - yb))
            scaled = opt.get_scaled_loss(loss)
        grads = opt.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, pred.dtype == tf.float32, tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

    out = []
    for i in range(6):
        xb = big if i == 2 else x
        loss, is32, finite = train_step(xb, y)
        out.append((float(loss), bool(is32), bool(finite), float(opt.loss_scale), [v.numpy() for v in model.weights]))
    return out, [tf.as_dtype(v.dtype).name for v in model.weights], model.layers[0].compute_dtype


@parity(modes=True, **TOL)
def test_check_numerics_on_good_values_passes_through_and_raises_on_a_nan(tf):
    """``tf.debugging.check_numerics`` wrapped around the loss and every gradient of a compiled
    training step (good values pass through unchanged, training goes on), and around a compiled
    evaluation fed a batch with a NaN (``InvalidArgumentError``); eagerly on an inf too; training
    continues after the errors."""
    x, y = _reg_data(8, seed=33)
    bad = x.copy()
    bad[2, 1] = np.nan
    vs = mlp_vars(tf, seed=34)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.debugging.check_numerics(tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb)), "loss")
        grads = [tf.debugging.check_numerics(g, "gradient") for g in tape.gradient(loss, vs)]
        opt.apply_gradients(zip(grads, vs))
        return loss, grads

    @tf.function
    def evaluate(xb, yb):
        return tf.debugging.check_numerics(tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb)), "eval loss")

    out = [train_step(x, y)]
    out.append(raises(evaluate, bad, y))
    out.append(raises(tf.debugging.check_numerics, tf.constant([1.0, np.inf]), "eager"))
    out.append(tf.debugging.check_numerics(tf.constant([1.0, -2.0]), "fine"))
    out.append(train_step(x, y))
    out.append(evaluate(x, y))
    return out, vs


@parity(modes=True, **TOL)
def test_label_smoothing_by_hand_equals_keras_and_a_logsumexp_z_loss(tf):
    """Label smoothing written by hand (``one_hot * (1 - eps) + eps / K``) into
    ``tf.nn.softmax_cross_entropy_with_logits``, the same loss as ``reduce_logsumexp(logits) -
    sum(labels * logits)`` and as Keras' ``CategoricalCrossentropy(label_smoothing=eps)``, on
    logits up to 1e3 (no overflow); the smoothed labels' gradient (``-log_softmax``); a model trained
    in a compiled step on the smoothed loss plus a ``1e-3 * logsumexp**2`` z-loss."""
    x, lab = _cls_data(10, d=4, classes=4, seed=35)
    eps, k = 0.1, 4
    onehot = tf.one_hot(lab, k)
    smooth = onehot * (1.0 - eps) + eps / k
    huge = tf.constant(init_array((3, 4), 36, scale=500.0))
    hot3 = tf.one_hot([0, 3, 1], k)
    sm3 = hot3 * (1.0 - eps) + eps / k
    with tf.GradientTape() as tape:
        tape.watch(sm3)
        a = tf.nn.softmax_cross_entropy_with_logits(labels=sm3, logits=huge)
    b = tf.reduce_logsumexp(huge, axis=-1) - tf.reduce_sum(sm3 * huge, axis=-1)
    c = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps)(hot3, huge)
    checks = (a, b, c, tape.gradient(a, sm3))

    w = tf.Variable(init_array((4, 4), 37))
    bias = tf.Variable(np.zeros(4, np.float32))
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w) + bias
            ce = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=smooth, logits=logits))
            z = tf.reduce_mean(tf.square(tf.reduce_logsumexp(logits, axis=-1)))
            loss = ce + 1e-3 * z
        grads = tape.gradient(loss, [w, bias])
        opt.apply_gradients(zip(grads, [w, bias]))
        return ce, z, grads

    out = [train_step() for _ in range(3)]
    return checks, out, w, bias
