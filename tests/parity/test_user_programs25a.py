"""Round twenty-five (a): training and evaluation loops as users write them, combining the
pieces of a loop in ways the earlier rounds do not, each run under real TensorFlow 2.21 and under
tapejax.

A Python data loader refilling one NumPy buffer in place between steps (the tensors of earlier
steps read only at the end) with a compiled evaluation called between eager steps; gradient
accumulation over micro-batches into ``trainable=False`` Variables passed to ``apply_gradients``
as they are and then zeroed, alternating compiled and eager micro-steps; a custom Keras layer with
``add_loss`` under a custom ``train_step`` / ``test_step`` with its own metric trackers under
``fit``; an optimizer whose slots a compiled step creates, then used by eager steps; global-norm
clipping over a list with ``None`` gradients and two optimizers on two halves of a model with
their own schedules; ``UnconnectedGradients.ZERO`` on a two-head functional model; freezing and
unfreezing a base with BatchNormalization (frozen BN runs in inference mode); running statistics
in ``trainable=False`` Variables assigned inside a tape; Polyak target updates; weights snapshots
(``tf.identity``, ``read_value``, ``numpy``) taken before later updates for early stopping;
``save_weights`` / ``load_weights`` mid-training; ``tf.train.Checkpoint`` restored into fresh
objects (slots restored on creation) giving the same losses; metrics updated inside and outside
tapes; a persistent tape giving two gradients around an optimizer update (GAN style); pruning
masks and rates in NumPy arrays changed in place; ``opt.learning_rate`` changed mid-loop;
accumulation applied inside a converted ``if``; ``tf.train.ExponentialMovingAverage`` swapped in
for evaluation; ``fit`` mixed with a custom loop on ``model.optimizer``; the TF 2.x
``compiled_loss`` / ``compiled_metrics`` train step; Variable and layer constraints; ``save`` /
``load_model`` and ``CheckpointManager`` resumes; a whole epoch over a dataset in one function;
gradients kept across updates; ``trainable`` flipped between fits with and without ``compile``;
a replay buffer in Variables of unknown length; learning-rate argument kinds and retracing; a
frozen discriminator in a Keras GAN; Keras models built by the first trace of a compiled step.
Data is NumPy's, fed in.

The programs at the end are the tapejax differences this round found, all passing now (no xfail
is left): ``tf.function(keras_model)`` (a TypeError), a ``tf.train.Checkpoint`` or
``load_weights(prefix)`` restored into an unbuilt Keras layer or model (its build's weights were
left at their initial values), a custom layer whose ``build`` makes its own weight while a sublayer
builds in ``call`` and a subclassed model built by ``model.build(shape)`` (a RuntimeError at the
first call), a subclassed model of two sublayers first built inside a ``tf.function`` trace (a
RecursionError).
"""
import numpy as np

from .harness import init_array, keras_init, mlp, mlp_vars, parity, raises

TOL = dict(rtol=2e-4, atol=2e-5)


def _data(n, d, seed, k=1):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randn(n, k).astype(np.float32)


# ---------------------------------------------------------------------------
# Data loaders, evaluation between steps, accumulation
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_numpy_buffer_refilled_in_place_with_compiled_eval_between_eager_steps(tf):
    """A loader that copies each batch into one preallocated NumPy buffer (``buf[:] = ...``), an
    eager SGD step on the buffer, and every other step a compiled evaluation fed the same buffer
    refilled with the held-out batch.  The losses, predictions and evaluations are kept as
    tensors and read only at the end, after the buffer has been overwritten many times: each must
    be the value of its own step's batch."""
    dx, dy = _data(24, 3, 2501)
    bx, by = np.empty((4, 3), np.float32), np.empty((4, 1), np.float32)
    vs = mlp_vars(tf, seed=2502)
    train_loss = tf.keras.metrics.Mean()

    @tf.function
    def evaluate(x, y):
        return tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))

    losses, preds, evals = [], [], []
    for step in range(5):
        bx[:] = dx[step * 4:(step + 1) * 4]
        by[:] = dy[step * 4:(step + 1) * 4]
        with tf.GradientTape() as tape:
            pred = mlp(tf, vs, bx)
            loss = tf.reduce_mean(tf.square(pred - by))
        grads = tape.gradient(loss, vs)
        for v, g in zip(vs, grads):
            v.assign_sub(0.1 * g)
        train_loss.update_state(loss)
        losses.append(loss)
        preds.append(pred)
        if step % 2 == 1:
            bx[:] = dx[20:]
            by[:] = dy[20:]
            evals.append(evaluate(bx, by))
            evals.append(tf.reduce_mean(tf.square(mlp(tf, vs, bx) - by)))
    bx[:] = 0.0
    by[:] = 0.0
    return losses, preds, evals, train_loss.result(), vs


@parity(modes=True, **TOL)
def test_gradient_accumulation_into_variables_passed_as_gradients_then_zeroed(tf):
    """Gradient accumulation over 3 micro-batches: each micro-step (compiled on even micro-steps,
    eager on odd ones) adds ``g / 3`` to ``trainable=False`` accumulator Variables with
    ``assign_add``; every third micro-step the accumulators themselves are passed to
    SGD-with-momentum's ``apply_gradients`` and then zeroed by ``assign(zeros_like)``.  The
    optimizer must use the accumulated values, not the zeros assigned right after."""
    dx, dy = _data(18, 3, 2510)
    vs = mlp_vars(tf, seed=2511)
    acc = [tf.Variable(tf.zeros_like(v), trainable=False) for v in vs]
    opt = tf.keras.optimizers.SGD(0.2, momentum=0.9)

    def micro(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        for a, g in zip(acc, tape.gradient(loss, vs)):
            a.assign_add(g / 3.0)
        return loss

    micro_c = tf.function(micro)
    losses, applied = [], []
    for i in range(6):
        xb, yb = dx[i * 3:(i + 1) * 3], dy[i * 3:(i + 1) * 3]
        losses.append((micro_c if i % 2 == 0 else micro)(tf.constant(xb), tf.constant(yb)))
        if i % 3 == 2:
            applied.append([tf.identity(a) for a in acc])
            opt.apply_gradients(zip(acc, vs))
            for a in acc:
                a.assign(tf.zeros_like(a))
    return losses, applied, vs, acc, int(opt.iterations)


# ---------------------------------------------------------------------------
# Keras: add_loss with a custom train_step, compiled-then-eager optimizer
# ---------------------------------------------------------------------------

def _activity_model(tf):
    class ActivityDense(tf.keras.layers.Layer):
        """A Dense layer adding an L2 penalty on its outputs with ``add_loss``."""

        def __init__(self, units, rate, **kw):
            super().__init__(**kw)
            self.units, self.rate = units, rate

        def build(self, input_shape):
            self.w = self.add_weight(name="w", shape=(input_shape[-1], self.units), initializer="zeros")
            self.b = self.add_weight(name="b", shape=(self.units,), initializer="zeros")

        def call(self, x):
            out = tf.nn.tanh(tf.matmul(x, self.w) + self.b)
            self.add_loss(self.rate * tf.reduce_mean(tf.square(out)))
            return out

    class Regressor(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = ActivityDense(4, 0.1)
            self.out = tf.keras.layers.Dense(1)
            self.loss_tracker = tf.keras.metrics.Mean(name="loss")
            self.reg_tracker = tf.keras.metrics.Mean(name="reg")
            self.mae = tf.keras.metrics.MeanAbsoluteError(name="mae")

        def call(self, x, training=False):
            return self.out(self.hidden(x))

        @property
        def metrics(self):
            return [self.loss_tracker, self.reg_tracker, self.mae]

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                reg = tf.add_n(self.losses)
                loss = tf.reduce_mean(tf.square(y_pred - y)) + reg
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            self.loss_tracker.update_state(loss)
            self.reg_tracker.update_state(reg)
            self.mae.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

        def test_step(self, data):
            x, y = data
            y_pred = self(x, training=False)
            self.loss_tracker.update_state(tf.reduce_mean(tf.square(y_pred - y)))
            self.reg_tracker.update_state(tf.add_n(self.losses))
            self.mae.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    return Regressor()


@parity(**TOL)
def test_custom_layer_add_loss_under_a_custom_train_step_and_test_step(tf):
    """keras.io's pattern: a subclassed model whose ``train_step`` adds ``self.losses`` (a custom
    layer's ``add_loss`` activity penalty) to its loss and updates its own ``Mean`` trackers and
    an MAE listed by the ``metrics`` property (so ``fit`` resets them each epoch), and a
    ``test_step`` for ``evaluate``; ``fit`` for 2 epochs of 3 batches with a validation set, then
    ``evaluate``: the history, the evaluation and the weights."""
    x, y = _data(12, 3, 2520)
    vx, vy = _data(4, 3, 2521)
    model = _activity_model(tf)
    model(tf.constant(x[:1]))
    keras_init(model, seed=2522)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1))
    hist = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, validation_data=(vx, vy))
    ev = model.evaluate(vx, vy, batch_size=4, verbose=0, return_dict=True)
    h = {k: [float(v) for v in hist.history[k]] for k in sorted(hist.history)}
    return h, {k: float(ev[k]) for k in sorted(ev)}, [w.numpy() for w in model.trainable_weights]


@parity(modes=True, **TOL)
def test_optimizer_slots_made_by_a_compiled_step_then_used_by_eager_steps(tf):
    """Adam's slots and iteration counter created inside a ``tf.function`` step on its first
    call (TF lifts them out), two compiled steps, then two eager steps with the same optimizer
    and the same Variables, then one compiled step again: one Adam trajectory; the slot values
    read through ``get_slot``-free means (``opt.variables``) at the end, and the iterations."""
    dx, dy = _data(8, 3, 2530)
    vs = mlp_vars(tf, seed=2531)
    opt = tf.keras.optimizers.Adam(0.05)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    cstep = tf.function(step)
    x, y = tf.constant(dx), tf.constant(dy)
    losses = [cstep(x, y), cstep(x, y), step(x, y), step(x, y), cstep(x, y)]
    slots = sorted(float(tf.reduce_sum(tf.abs(v)).numpy()) for v in opt.variables)
    return losses, vs, int(opt.iterations), np.float32(slots)


# ---------------------------------------------------------------------------
# Clipping with None gradients, per-group optimizers and schedules
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_global_norm_clipping_with_none_gradients_and_two_scheduled_optimizers(tf):
    """A body and a head trained by two optimizers (Adam on an ``ExponentialDecay`` schedule for
    the body, SGD on a ``PiecewiseConstantDecay`` for the head) after one
    ``clip_by_global_norm`` over all gradients, one of which is ``None`` (an unused Variable);
    the ``None`` stays ``None``, the norm ignores it, and each optimizer gets its own slice. The
    loss, global norm and each schedule's value at its optimizer's ``iterations`` per step."""
    dx, dy = _data(8, 3, 2540)
    w1 = tf.Variable(init_array((3, 5), 2541), name="w1")
    b1 = tf.Variable(np.zeros(5, np.float32), name="b1")
    unused = tf.Variable(init_array((5,), 2542), name="unused")
    w2 = tf.Variable(init_array((5, 1), 2543), name="w2")
    body, head = [w1, b1, unused], [w2]
    s_body = tf.keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=2, decay_rate=0.5)
    s_head = tf.keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.3, 0.1, 0.01])
    o_body = tf.keras.optimizers.Adam(s_body)
    o_head = tf.keras.optimizers.SGD(s_head)
    out = []
    for step in range(5):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(dx, w1) + b1)
            loss = tf.reduce_mean(tf.square(tf.matmul(h, w2) - dy))
        grads = tape.gradient(loss, body + head)
        clipped, norm = tf.clip_by_global_norm(grads, 0.5)
        o_body.apply_gradients([(g, v) for g, v in zip(clipped[:3], body) if g is not None])
        o_head.apply_gradients(zip(clipped[3:], head))
        out.append((loss, norm, clipped[2] is None, grads[2] is None,
                    s_body(o_body.iterations), s_head(o_head.iterations)))
    return out, [w1, b1, unused, w2], int(o_body.iterations), int(o_head.iterations)


@parity(modes=True, **TOL)
def test_unconnected_zero_on_a_two_head_functional_model(tf):
    """A functional model with a shared trunk and two heads; the loss uses head A only.  With
    the default ``UnconnectedGradients.NONE`` head B's kernel and bias get ``None``, with
    ``ZERO`` zeros of their shapes; an intermediate Tensor computed outside the tape gives
    ``None`` / zeros too, and SGD applied to the ZERO gradients leaves head B unchanged."""
    inp = tf.keras.Input((3,))
    trunk = tf.keras.layers.Dense(4, activation="tanh", name="trunk")(inp)
    a = tf.keras.layers.Dense(1, name="head_a")(trunk)
    b = tf.keras.layers.Dense(2, name="head_b")(trunk)
    model = tf.keras.Model(inp, [a, b])
    keras_init(model, seed=2550)
    x, y = _data(6, 3, 2551)
    outside = tf.constant(x) * 2.0
    with tf.GradientTape(persistent=True) as tape:
        pa, pb = model(x)
        loss = tf.reduce_mean(tf.square(pa - y))
    g_none = tape.gradient(loss, model.trainable_variables)
    g_zero = tape.gradient(loss, model.trainable_variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    o_none = tape.gradient(loss, outside)
    o_zero = tape.gradient(loss, outside, unconnected_gradients="zero")
    del tape
    before = [tf.identity(v) for v in model.trainable_variables]
    tf.keras.optimizers.SGD(0.1).apply_gradients(zip(g_zero, model.trainable_variables))
    moved = [bool(np.any(v.numpy() != w.numpy())) for v, w in zip(model.trainable_variables, before)]
    return [v.name.split("/")[-1].split(":")[0] for v in model.trainable_variables], g_none, g_zero, o_none, o_zero, moved


# ---------------------------------------------------------------------------
# Fine-tuning: frozen base with BatchNormalization, then unfrozen
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_freeze_then_unfreeze_a_base_with_batch_norm(tf):
    """Transfer learning as the guide writes it: a base (Dense + BatchNormalization) frozen by
    ``base.trainable = False`` while a head trains with Adam for 3 steps (the frozen BN runs in
    inference mode even under ``training=True``, so its moving statistics stay put), then
    ``base.trainable = True`` with a new, slower Adam for 3 steps (BN in training mode now moves
    its statistics).  Applying the first optimizer to the enlarged variable list raises
    (tf_keras' optimizer has no slots for Variables it was not built with).  The counts of
    trainable weights, the losses, and the final weights including BN's statistics."""
    base = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, use_bias=False),
                                tf.keras.layers.BatchNormalization(), tf.keras.layers.Activation("relu")])
    head = tf.keras.layers.Dense(1)
    inp = tf.keras.Input((3,))
    model = tf.keras.Model(inp, head(base(inp)))
    keras_init(model, seed=2560)
    x, y = _data(8, 3, 2561)
    counts = []

    def step(opt):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        tv = model.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, tv), tv))
        return loss

    base.trainable = False
    counts.append((len(model.trainable_weights), len(model.non_trainable_weights)))
    opt1 = tf.keras.optimizers.Adam(0.05)
    l1 = [step(opt1) for _ in range(3)]
    stats_frozen = [w.numpy() for w in base.layers[1].non_trainable_weights]
    base.trainable = True
    counts.append((len(model.trainable_weights), len(model.non_trainable_weights)))
    err = raises(step, opt1, ok=("ValueError",))
    opt2 = tf.keras.optimizers.Adam(0.01)
    l2 = [step(opt2) for _ in range(3)]
    return counts, l1, stats_frozen, err, l2, [w.numpy() for w in model.weights]


# ---------------------------------------------------------------------------
# State in Variables: running statistics, target networks, snapshots
# ---------------------------------------------------------------------------

def _manual_bn(tf, n):
    class ManualBN(tf.Module):
        """Batch norm by hand: running statistics in ``trainable=False`` Variables assigned in
        the training call (inside the caller's tape)."""

        def __init__(self):
            super().__init__()
            self.gamma = tf.Variable(tf.ones([n]), name="gamma")
            self.beta = tf.Variable(tf.zeros([n]), name="beta")
            self.mean = tf.Variable(tf.zeros([n]), trainable=False, name="mean")
            self.var = tf.Variable(tf.ones([n]), trainable=False, name="var")

        def __call__(self, x, training):
            if training:
                m, v = tf.nn.moments(x, [0])
                self.mean.assign(0.8 * self.mean + 0.2 * m)
                self.var.assign(0.8 * self.var + 0.2 * v)
            else:
                m, v = self.mean, self.var
            return tf.nn.batch_normalization(x, m, v, self.beta, self.gamma, 1e-3)

    return ManualBN()


@parity(modes=True, **TOL)
def test_running_statistics_assigned_inside_the_tape_with_compiled_eval(tf):
    """A linear layer, a hand-written batch norm whose running mean and variance are
    ``trainable=False`` Variables assigned inside the tape, and a linear head; eager training
    steps, a compiled evaluation (``training=False``, reading the running statistics) after each;
    the gradient with respect to the running statistics is ``None`` in training (the batch
    moments are used) and, once they are watched explicitly, not ``None`` in evaluation.  The
    watched variables' names per mode, the losses and the final statistics."""
    dx, dy = _data(16, 3, 2570)
    w = tf.Variable(init_array((3, 4), 2571), name="w")
    head = tf.Variable(init_array((4, 1), 2572), name="head")
    bn = _manual_bn(tf, 4)
    trainable = [w, head, bn.gamma, bn.beta]

    @tf.function
    def evaluate(x, y):
        return tf.reduce_mean(tf.square(tf.matmul(bn(tf.matmul(x, w), False), head) - y))

    out = []
    for step in range(4):
        xb, yb = dx[step * 4:(step + 1) * 4], dy[step * 4:(step + 1) * 4]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(bn(tf.matmul(xb, w), True), head) - yb))
        names = sorted(v.name.split(":")[0] for v in tape.watched_variables())
        grads = tape.gradient(loss, trainable + [bn.mean, bn.var])
        for v, g in zip(trainable, grads):
            v.assign_sub(0.1 * g)
        out.append((loss, grads[4:], evaluate(dx, dy), names))
    with tf.GradientTape() as tape:
        tape.watch([bn.mean, bn.var])
        ev = tf.reduce_mean(tf.square(tf.matmul(bn(tf.matmul(dx, w), False), head) - dy))
    names = sorted(v.name.split(":")[0] for v in tape.watched_variables())
    return out, ev, names, tape.gradient(ev, [bn.mean, bn.var, w]), bn.mean, bn.var


@parity(modes=True, **TOL)
def test_dqn_step_with_polyak_and_hard_target_updates(tf):
    """A DQN regression step: targets from a target network copied by ``tf.Variable(v)``, the
    chosen Q-values by ``gather(..., batch_dims=1)``, a Huber loss, Adam on the online network;
    the target network's gradient is ``None`` (it is only read outside the tape); Polyak updates
    ``t.assign(0.9 t + 0.1 v)`` after each step and a hard copy ``t.assign(v)`` every third step;
    compiled and eager steps alternate."""
    rs = np.random.RandomState(2580)
    s, s2 = rs.randn(6, 3).astype(np.float32), rs.randn(6, 3).astype(np.float32)
    a = np.array([0, 1, 1, 0, 1, 0], np.int32)
    r = rs.rand(6).astype(np.float32)
    done = np.array([0, 0, 1, 0, 0, 1], np.float32)
    q = [tf.Variable(init_array((3, 8), 2581)), tf.Variable(np.zeros(8, np.float32)),
         tf.Variable(init_array((8, 2), 2582)), tf.Variable(np.zeros(2, np.float32))]
    target = [tf.Variable(v) for v in q]
    opt = tf.keras.optimizers.Adam(0.02)
    huber = tf.keras.losses.Huber(delta=0.5)

    def net(vs, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, vs[0]) + vs[1]), vs[2]) + vs[3]

    def step(hard):
        y = r + 0.9 * (1.0 - done) * tf.reduce_max(net(target, s2), axis=1)
        with tf.GradientTape() as tape:
            qsa = tf.gather(net(q, s), a, batch_dims=1)
            loss = huber(y, qsa)
        grads = tape.gradient(loss, q + target)
        opt.apply_gradients(zip(grads[:4], q))
        for t, v in zip(target, q):
            if hard:
                t.assign(v)
            else:
                t.assign(0.9 * t + 0.1 * v)
        return loss, [g is None for g in grads[4:]]

    cstep = tf.function(step)
    out = [(cstep if i % 2 else step)(i % 3 == 2) for i in range(6)]
    return out, q, target


@parity(modes=True, **TOL)
def test_early_stopping_restores_snapshots_taken_before_later_updates(tf):
    """Early stopping by hand: an SGD loop with a learning rate large enough that the
    validation loss turns up; at each new best the weights are snapshotted three ways
    (``tf.identity(v)``, ``v.read_value()``, ``v.numpy()``) and the training continues, updating
    the Variables in place; at the end the best snapshot is restored by ``assign``.  Each
    snapshot must hold the values of its own epoch."""
    dx, dy = _data(8, 3, 2590)
    vx, vy = _data(8, 3, 2591)
    vs = mlp_vars(tf, seed=2592)
    best, best_val, hist = None, np.inf, []
    for epoch in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, dx) - dy))
        for v, g in zip(vs, tape.gradient(loss, vs)):
            v.assign_sub(0.6 * g)
        val = tf.reduce_mean(tf.square(mlp(tf, vs, vx) - vy))
        hist.append((loss, val))
        if float(val) < best_val:
            best_val = float(val)
            best = (epoch, [tf.identity(v) for v in vs], [v.read_value() for v in vs], [v.numpy() for v in vs])
    last = [tf.identity(v) for v in vs]
    for v, b in zip(vs, best[1]):
        v.assign(b)
    restored_val = tf.reduce_mean(tf.square(mlp(tf, vs, vx) - vy))
    return hist, best, last, restored_val, vs


# ---------------------------------------------------------------------------
# Saving and restoring mid-training
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_save_weights_and_load_weights_mid_training(tf):
    """A Sequential model trained by an eager Adam loop; ``save_weights`` to a checkpoint prefix
    and to a ``.weights.h5`` file after 3 steps, 2 more steps, ``load_weights`` of the prefix
    (weights back, Adam's slots and step count not: ``save_weights`` holds the model only) and 2
    steps again; then a fresh model with a fresh Adam loads the ``.h5`` file and takes the same 2
    steps as the first continuation."""
    import os
    import tempfile

    d = tempfile.mkdtemp()
    x, y = _data(8, 3, 2600)

    def make():
        m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
        keras_init(m, seed=2601)
        return m

    def steps(m, opt, n):
        out = []
        for _ in range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(m(x) - y))
            opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
            out.append(float(loss))
        return out

    model, opt = make(), tf.keras.optimizers.Adam(0.05)
    first = steps(model, opt, 3)
    saved = [w.numpy() for w in model.weights]
    model.save_weights(os.path.join(d, "ckpt"))
    model.save_weights(os.path.join(d, "model.weights.h5"))
    cont_a = steps(model, opt, 2)
    model.load_weights(os.path.join(d, "ckpt"))
    back = [w.numpy() for w in model.weights]
    cont_b = steps(model, opt, 2)
    fresh = make()
    fresh.load_weights(os.path.join(d, "model.weights.h5"))
    cont_c = steps(fresh, tf.keras.optimizers.Adam(0.05), 2)
    return first, saved, back, cont_a, cont_b, cont_c, int(opt.iterations)


def _ckpt_module(tf, seed):
    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tf.Variable(init_array((3, 4), seed), name="w1")
            self.b1 = tf.Variable(np.zeros(4, np.float32), name="b1")
            self.w2 = tf.Variable(init_array((4, 1), seed + 1), name="w2")

        def __call__(self, x):
            return tf.matmul(tf.nn.tanh(tf.matmul(x, self.w1) + self.b1), self.w2)

    return Net()


@parity(modes=True, **TOL)
def test_checkpoint_restore_into_fresh_objects_continues_identically(tf):
    """``tf.train.Checkpoint(model=, optimizer=, step=)``: 3 compiled Adam steps, ``save``, 3
    more steps; then a fresh module (other initial values), a fresh Adam with no slots yet and a
    fresh step counter restore the checkpoint (``assert_existing_objects_matched`` passes,
    ``assert_consumed`` fails before the slots exist, since their saved values wait) and the same
    3 steps give the same losses and weights; ``save_counter`` and the step counters."""
    import os
    import tempfile

    d = tempfile.mkdtemp()
    x, y = _data(8, 3, 2610)

    def setup(seed):
        net, opt, step = _ckpt_module(tf, seed), tf.keras.optimizers.Adam(0.05), tf.Variable(0)
        vs = [net.w1, net.b1, net.w2]

        @tf.function
        def train():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(net(x) - y))
            opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
            step.assign_add(1)
            return loss

        return net, opt, step, train, tf.train.Checkpoint(model=net, optimizer=opt, step=step)

    net, opt, step, train, ckpt = setup(2611)
    first = [train() for _ in range(3)]
    path = ckpt.save(os.path.join(d, "ckpt"))
    cont_a = [train() for _ in range(3)]
    net2, opt2, step2, train2, ckpt2 = setup(2620)
    status = ckpt2.restore(path)
    matched = raises(status.assert_existing_objects_matched)
    consumed = raises(status.assert_consumed)
    restored = [net2.w1.numpy(), int(step2)]
    cont_b = [train2() for _ in range(3)]
    return (first, cont_a, cont_b, restored, [net.w1, net.b1, net.w2], [net2.w1, net2.b1, net2.w2],
            int(step), int(step2), int(ckpt.save_counter), type(matched).__name__, consumed)


# ---------------------------------------------------------------------------
# Tapes around updates, metrics, Keras evaluation between custom steps
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_gan_step_two_gradients_of_one_persistent_tape_around_an_update(tf):
    """A GAN step as many write it: one persistent tape records the generator and both
    discriminator calls; the discriminator's gradient is taken and applied first, then the
    generator's gradient from the same tape, which must use the discriminator's weights as they
    were read during recording, not the updated ones.  Eager and compiled steps alternate."""
    rs = np.random.RandomState(2630)
    real = (rs.randn(6, 2) * 0.5 + 1.0).astype(np.float32)
    z = rs.randn(6, 3).astype(np.float32)
    g_vs = [tf.Variable(init_array((3, 4), 2631)), tf.Variable(init_array((4, 2), 2632))]
    d_vs = [tf.Variable(init_array((2, 4), 2633)), tf.Variable(init_array((4, 1), 2634))]
    g_opt, d_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.SGD(0.1)
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)

    def gen(zz):
        return tf.matmul(tf.nn.leaky_relu(tf.matmul(zz, g_vs[0]), 0.2), g_vs[1])

    def disc(xx):
        return tf.matmul(tf.nn.tanh(tf.matmul(xx, d_vs[0])), d_vs[1])

    def step():
        with tf.GradientTape(persistent=True) as tape:
            fake = gen(z)
            d_real, d_fake = disc(real), disc(fake)
            d_loss = bce(tf.ones_like(d_real), d_real) + bce(tf.zeros_like(d_fake), d_fake)
            g_loss = bce(tf.ones_like(d_fake), d_fake)
        d_grads = tape.gradient(d_loss, d_vs)
        d_opt.apply_gradients(zip(d_grads, d_vs))
        g_grads = tape.gradient(g_loss, g_vs)
        g_opt.apply_gradients(zip(g_grads, g_vs))
        cross = tape.gradient(d_loss, g_vs[0])
        del tape
        return d_loss, g_loss, g_grads, cross

    cstep = tf.function(step)
    out = [(cstep if i % 2 else step)() for i in range(5)]
    return out, g_vs, d_vs


@parity(modes=True, **TOL)
def test_minimize_with_callable_var_list_and_a_model_built_in_the_loss(tf):
    """``opt.minimize(loss_fn, var_list=lambda: model.trainable_variables)`` where the Sequential
    model has no input shape and is built by the first call inside ``loss_fn`` (so its Variables
    are created inside ``minimize``'s tape); then its weights are set and ``minimize`` runs 4
    more steps with plain SGD (no state carried from the first step, whose weights are random).
    The losses after ``set_weights`` and the final weights."""
    x, y = _data(8, 3, 2640)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="tanh"), tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.1)
    losses = []

    def loss_fn():
        loss = tf.reduce_mean(tf.square(model(x) - y))
        losses.append(loss)
        return loss

    opt.minimize(loss_fn, var_list=lambda: model.trainable_variables)
    n_vars = len(model.trainable_variables)
    keras_init(model, seed=2641)
    del losses[:]
    for _ in range(4):
        opt.minimize(loss_fn, var_list=lambda: model.trainable_variables)
    return n_vars, losses, [w.numpy() for w in model.weights], int(opt.iterations)


@parity(**TOL)
def test_compiled_evaluate_and_predict_between_custom_loop_steps(tf):
    """A custom training loop on a model compiled only for evaluation
    (``compile(loss="mse", metrics=["mae"])``, no optimizer used by ``fit``): after each epoch of
    two eager Adam steps, ``model.evaluate`` and ``model.predict`` on held-out data (Keras'
    compiled test and predict functions, which must see the Variables the eager steps updated),
    and ``test_on_batch``."""
    x, y = _data(8, 3, 2650)
    vx, vy = _data(6, 3, 2651)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, seed=2652)
    model.compile(loss="mse", metrics=["mae"])
    opt = tf.keras.optimizers.Adam(0.05)
    out = []
    for epoch in range(3):
        for i in range(2):
            xb, yb = x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        ev = model.evaluate(vx, vy, batch_size=3, verbose=0)
        pr = model.predict(vx, batch_size=4, verbose=0)
        tb = model.test_on_batch(vx, vy)
        out.append((float(loss), [float(e) for e in ev], pr, [float(t) for t in tb]))
    return out


@parity(modes=True, **TOL)
def test_classification_metrics_updated_inside_and_outside_the_tape(tf):
    """A logistic regression trained by eager steps whose tape also updates ``AUC``,
    ``Precision``, ``Recall``, ``BinaryAccuracy`` and a loss ``Mean`` (with sample weights)
    inside the ``with`` block; a compiled evaluation updates another set of metrics (AUC with
    ``from_logits=True``); results are read per epoch and the metrics reset.  The metric updates
    inside the tape add nothing to the gradients."""
    rs = np.random.RandomState(2660)
    x = rs.randn(16, 3).astype(np.float32)
    y = (x[:, :1] + 0.5 * rs.randn(16, 1) > 0).astype(np.float32)
    sw = rs.rand(16).astype(np.float32)
    w = tf.Variable(init_array((3, 1), 2661))
    b = tf.Variable([0.0])
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    train_m = [tf.keras.metrics.AUC(), tf.keras.metrics.Precision(), tf.keras.metrics.Recall(),
               tf.keras.metrics.BinaryAccuracy()]
    loss_m = tf.keras.metrics.Mean()
    eval_auc = tf.keras.metrics.AUC(from_logits=True, num_thresholds=50)
    eval_acc = tf.keras.metrics.BinaryAccuracy(threshold=0.0)

    @tf.function
    def evaluate(xx, yy):
        logits = tf.matmul(xx, w) + b
        eval_auc.update_state(yy, logits)
        eval_acc.update_state(yy, logits)

    out = []
    for epoch in range(3):
        for i in range(2):
            xb, yb, sb = x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8], sw[i * 8:(i + 1) * 8]
            with tf.GradientTape() as tape:
                logits = tf.matmul(xb, w) + b
                loss = bce(yb, logits, sample_weight=sb)
                probs = tf.sigmoid(logits)
                for m in train_m:
                    m.update_state(yb, probs, sample_weight=sb)
                loss_m.update_state(loss)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.5 * gw)
            b.assign_sub(0.5 * gb)
        evaluate(x, y)
        out.append(([m.result() for m in train_m], loss_m.result(), eval_auc.result(), eval_acc.result()))
        for m in train_m + [loss_m, eval_auc, eval_acc]:
            m.reset_state()
    return out, w, b


@parity(modes=True, **TOL)
def test_weights_projected_inside_the_tape_between_two_reads(tf):
    """A user projects the weights onto the unit ball *inside* the tape, between the loss and a
    penalty that reads them again: TF's gradient sums the two reads, each at the value it read
    (the first before the projection, the second after).  Four steps; also the same program
    with ``tape.gradient`` and the update written inside the ``with`` block of a non-persistent
    tape (the recording stops at ``gradient``, so the update is not recorded)."""
    x, y = _data(8, 3, 2670)
    w = tf.Variable(init_array((3, 1), 2671, 2.0))
    w2 = tf.Variable(init_array((3, 1), 2671, 2.0))
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            w.assign(tf.clip_by_norm(w, 1.0))
            total = loss + 0.1 * tf.reduce_sum(tf.square(w))
        g = tape.gradient(total, w)
        w.assign_sub(0.1 * g)
        with tf.GradientTape() as tape2:
            loss2 = tf.reduce_mean(tf.square(tf.matmul(x, w2) - y))
            g2 = tape2.gradient(loss2, w2)
            w2.assign_sub(0.1 * g2)
            after = tf.reduce_sum(w2)
        out.append((loss, total, g, loss2, g2, after, tape2.watched_variables()[0] is w2))
    return out, w, w2


# ---------------------------------------------------------------------------
# Loops whose updates change from step to step
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_pruning_mask_and_learning_rate_held_in_numpy_arrays_changed_in_place(tf):
    """Magnitude pruning in a hand-written SGD loop: the update is ``v.assign_sub(lr * g * mask)``
    with ``lr`` a 0-d NumPy array and ``mask`` a NumPy array, both changed in place between steps
    (``lr[...] = ...`` halves it at step 4; ``mask[:] = ...`` prunes the smallest weights every
    third step); one step in between is skipped (no update) because its loss was above a bound.
    Each update must use the mask and rate of its own step."""
    x, y = _data(8, 4, 2680)
    w = tf.Variable(init_array((4, 1), 2681))
    b = tf.Variable([0.0])
    lr = np.array(0.2, np.float32)
    mask = np.ones((4, 1), np.float32)
    out = []
    for step in range(9):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w * mask) + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        if step == 5:
            out.append(("skipped", loss))
            continue
        w.assign_sub(lr * gw * mask)
        b.assign_sub(lr * gb)
        out.append((loss, w.read_value()))
        if step == 3:
            lr[...] = 0.05
        if step % 3 == 2:
            k = step // 3 + 1
            mask[:] = 1.0
            mask[np.argsort(np.abs(w.numpy()[:, 0]))[:k]] = 0.0
    return out, w, b, mask


@parity(modes=True, **TOL)
def test_optimizer_learning_rate_changed_between_steps_and_a_step_skipped(tf):
    """An SGD-momentum loop whose learning rate is changed by ``opt.learning_rate = ...`` after
    step 3 (Keras' ReduceLROnPlateau does this) and then by ``opt.learning_rate.assign(...)``
    after step 6; step 4 skips ``apply_gradients`` (a non-finite check on the loss written in
    Python); the gradient norm is read every third step for logging."""
    x, y = _data(8, 3, 2690)
    vs = mlp_vars(tf, seed=2691)
    opt = tf.keras.optimizers.SGD(0.2, momentum=0.8)
    out = []
    for step in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        grads = tape.gradient(loss, vs)
        if step % 3 == 0:
            out.append(tf.linalg.global_norm(grads))
        if step != 4:
            opt.apply_gradients(zip(grads, vs))
        out.append(loss)
        if step == 3:
            opt.learning_rate = 0.05
        if step == 6:
            opt.learning_rate.assign(0.01)
    return out, vs, int(opt.iterations), float(opt.learning_rate)


# ---------------------------------------------------------------------------
# Compiled accumulation, EMA of weights, fit mixed with a custom loop
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_compiled_accumulation_applying_inside_a_converted_if(tf):
    """Gradient accumulation inside one ``tf.function``: the step adds the gradients to
    accumulators and ``if step % 3 == 0:`` (a Variable counter, so AutoGraph stages a ``cond``)
    applies them with Adam and zeroes them; Adam's slots are made on the first trace inside the
    branch.  Seven calls: the losses, the iterations after each call and the final weights."""
    dx, dy = _data(14, 3, 2700)
    vs = mlp_vars(tf, seed=2701)
    acc = [tf.Variable(tf.zeros_like(v), trainable=False) for v in vs]
    counter = tf.Variable(0, trainable=False)
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        for a, g in zip(acc, tape.gradient(loss, vs)):
            a.assign_add(g)
        counter.assign_add(1)
        if counter % 3 == 0:
            opt.apply_gradients(zip([a / 3.0 for a in acc], vs))
            for a in acc:
                a.assign(tf.zeros_like(a))
        return loss

    out = []
    for i in range(7):
        loss = step(tf.constant(dx[i * 2:(i + 1) * 2]), tf.constant(dy[i * 2:(i + 1) * 2]))
        out.append((loss, int(opt.iterations)))
    return out, vs, acc


@parity(modes=True, **TOL)
def test_exponential_moving_average_of_weights_swapped_in_for_evaluation(tf):
    """``tf.train.ExponentialMovingAverage(0.9)``: ``ema.apply(vs)`` after each compiled SGD step
    (its shadow Variables made on the first call), an evaluation with the averages swapped in
    (``v.assign(ema.average(v))`` after saving the raw weights, then swapped back), per epoch;
    the averages and the raw weights at the end."""
    dx, dy = _data(8, 3, 2710)
    vs = mlp_vars(tf, seed=2711)
    ema = tf.train.ExponentialMovingAverage(decay=0.9)
    opt = tf.keras.optimizers.SGD(0.2)

    @tf.function
    def train(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        ema.apply(vs)
        return loss

    def evaluate():
        return tf.reduce_mean(tf.square(mlp(tf, vs, dx) - dy))

    out = []
    for epoch in range(4):
        losses = [train(dx[:4], dy[:4]), train(dx[4:], dy[4:])]
        raw = [tf.identity(v) for v in vs]
        for v in vs:
            v.assign(ema.average(v))
        ev_ema = evaluate()
        for v, r in zip(vs, raw):
            v.assign(r)
        out.append((losses, ev_ema, evaluate()))
    return out, [ema.average(v) for v in vs], vs


@parity(**TOL)
def test_fit_then_custom_loop_with_the_compiled_optimizer_then_fit_again(tf):
    """One ``fit`` epoch with ``compile(optimizer=Adam)``, then three custom tape steps applying
    ``model.optimizer`` (the same Adam: its slots and iteration count carry on), then ``fit``
    again with ``initial_epoch=1``: the histories, the custom losses, the optimizer's iteration
    count and the weights."""
    x, y = _data(12, 3, 2720)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, seed=2721)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse")
    h1 = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0).history["loss"]
    it1 = int(model.optimizer.iterations)
    custom = []
    for i in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x[i * 4:(i + 1) * 4], training=True) - y[i * 4:(i + 1) * 4]))
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        custom.append(float(loss))
    h2 = model.fit(x, y, batch_size=4, epochs=2, initial_epoch=1, shuffle=False, verbose=0).history["loss"]
    return ([float(v) for v in h1], it1, custom, [float(v) for v in h2], int(model.optimizer.iterations),
            [w.numpy() for w in model.weights])


@parity(**TOL)
def test_tf2_style_train_step_with_compiled_loss_and_compiled_metrics(tf):
    """The TF 2.x guide's custom ``train_step``: ``self.compiled_loss(y, y_pred,
    regularization_losses=self.losses)`` with a kernel regulariser, ``self.compiled_metrics``
    and ``{m.name: m.result() for m in self.metrics}``, under ``fit`` with ``sample_weight``
    unpacked by ``tf.keras.utils.unpack_x_y_sample_weight``; then ``evaluate`` (the default
    ``test_step``)."""
    rs = np.random.RandomState(2730)
    x, y = _data(12, 3, 2731)
    sw = rs.rand(12).astype(np.float32)

    class Custom(tf.keras.Model):
        def train_step(self, data):
            xb, yb, swb = tf.keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self(xb, training=True)
                loss = self.compiled_loss(yb, y_pred, sample_weight=swb, regularization_losses=self.losses)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            self.compiled_metrics.update_state(yb, y_pred, sample_weight=swb)
            return {m.name: m.result() for m in self.metrics}

    inp = tf.keras.Input((3,))
    h = tf.keras.layers.Dense(4, activation="tanh", kernel_regularizer=tf.keras.regularizers.l2(0.01))(inp)
    model = Custom(inp, tf.keras.layers.Dense(1)(h))
    keras_init(model, seed=2732)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    hist = model.fit(x, y, sample_weight=sw, batch_size=4, epochs=2, shuffle=False, verbose=0)
    ev = model.evaluate(x, y, batch_size=4, verbose=0)
    return ({k: [float(v) for v in hist.history[k]] for k in sorted(hist.history)}, [float(e) for e in ev],
            [w.numpy() for w in model.weights])


# ---------------------------------------------------------------------------
# Constraints, whole-model saving, checkpoint managers, epochs in one function
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_variable_and_layer_constraints_applied_by_the_optimizers(tf):
    """``tf.Variable(..., constraint=clip to [0, 1])`` and ``constraint=NonNeg()`` trained by
    Adam, and a Dense layer with ``MaxNorm`` / ``NonNeg`` constraints trained by SGD in the same
    eager loop (the optimizers project each Variable after its update), then three compiled
    Adam steps on the raw Variables."""
    x, y = _data(12, 3, 2740)
    w = tf.Variable(np.full((3, 1), 0.5, np.float32), constraint=lambda v: tf.clip_by_value(v, 0.0, 1.0))
    b = tf.Variable([0.0], constraint=tf.keras.constraints.NonNeg())
    layer = tf.keras.layers.Dense(1, kernel_constraint=tf.keras.constraints.MaxNorm(0.3),
                                  bias_constraint=tf.keras.constraints.NonNeg())
    layer(x)
    layer.set_weights([np.full((3, 1), 0.1, np.float32), np.zeros(1, np.float32)])
    opt, opt2 = tf.keras.optimizers.Adam(0.2), tf.keras.optimizers.SGD(0.3)
    out = []
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)) + tf.reduce_mean(tf.square(layer(x) + y))
        g = tape.gradient(loss, [w, b] + layer.trainable_variables)
        opt.apply_gradients(zip(g[:2], [w, b]))
        opt2.apply_gradients(zip(g[2:], layer.trainable_variables))
        out.append(loss)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss

    out += [step() for _ in range(3)]
    return out, w, b, [v.numpy() for v in layer.weights]


@parity(**TOL)
def test_model_save_and_load_model_mid_fit_continue_identically(tf):
    """``fit`` 2 epochs with Adam, ``model.save("m.keras")``, 2 more epochs; ``load_model`` gives
    a compiled model whose Adam state and step count are the saved ones, and its 2 epochs repeat
    the original continuation's history; then ``evaluate``."""
    import os
    import tempfile

    d = tempfile.mkdtemp()
    x, y = _data(12, 3, 2750)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, seed=2751)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse", metrics=["mae"])
    h1 = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    model.save(os.path.join(d, "m.keras"))
    h2 = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    loaded = tf.keras.models.load_model(os.path.join(d, "m.keras"))
    it = int(loaded.optimizer.iterations)
    h3 = loaded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history
    ev = loaded.evaluate(x, y, verbose=0)

    def hist(h):
        return {k: [float(v) for v in h[k]] for k in sorted(h)}

    return hist(h1), hist(h2), it, hist(h3), [float(e) for e in ev]


@parity(**TOL)
def test_checkpoint_manager_keeps_two_and_a_built_keras_model_resumes(tf):
    """A subclassed Keras model with Adam and a step Variable under a ``CheckpointManager``
    (``max_to_keep=2``, ``checkpoint_number=step``) saving every second step of five; a fresh
    model (built by one call before the restore), Adam and step counter restore the latest
    checkpoint and continue: the first resumed loss equals the last original one."""
    import os
    import tempfile

    d = tempfile.mkdtemp()
    x, y = _data(8, 3, 2760)

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d1 = tf.keras.layers.Dense(4, activation="tanh")
            self.d2 = tf.keras.layers.Dense(1)

        def call(self, inputs):
            return self.d2(self.d1(inputs))

    def train(model, opt, step):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        step.assign_add(1)
        return float(loss)

    model, opt, step = Net(), tf.keras.optimizers.Adam(0.05), tf.Variable(0)
    model(x[:1])
    keras_init(model, seed=2761)
    mgr = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=opt, step=step), d, max_to_keep=2)
    first = []
    for i in range(5):
        first.append(train(model, opt, step))
        if i % 2 == 1:
            mgr.save(checkpoint_number=int(step))
    names = [os.path.basename(p) for p in mgr.checkpoints]
    model2, opt2, step2 = Net(), tf.keras.optimizers.Adam(0.05), tf.Variable(0)
    model2(x[:1])
    tf.train.Checkpoint(model=model2, optimizer=opt2, step=step2).restore(tf.train.latest_checkpoint(d))
    resumed = [train(model2, opt2, step2) for _ in range(3)]
    return (first, names, os.path.basename(tf.train.latest_checkpoint(d)), resumed, int(step2),
            [w.numpy() for w in model2.weights], int(opt2.iterations))


@parity(modes=True, **TOL)
def test_a_whole_epoch_over_a_dataset_inside_one_function(tf):
    """A compiled ``train_epoch(ds)`` looping ``for xb, yb in ds`` over a batched dataset
    (``drop_remainder=True``) with Adam updates per batch and a sample-weighted running loss
    accumulated in tensors; three epochs; then a compiled evaluation over the unbatched rows'
    dataset summing squared errors with ``ds.reduce``."""
    x, y = _data(10, 3, 2770)
    vs = mlp_vars(tf, seed=2771)
    opt = tf.keras.optimizers.Adam(0.05)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True)

    @tf.function
    def train_epoch(dataset):
        total, n = tf.constant(0.0), tf.constant(0)
        for xb, yb in dataset:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))
            opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
            total += loss * 4.0
            n += 4
        return total / tf.cast(n, tf.float32), n

    @tf.function
    def sse(dataset):
        return dataset.reduce(tf.constant(0.0), lambda acc, e: acc + tf.reduce_sum(tf.square(mlp(tf, vs, e[0][None]) - e[1])))

    out = [train_epoch(ds) for _ in range(3)]
    return out, sse(tf.data.Dataset.from_tensor_slices((x, y))), vs, int(opt.iterations)



# ---------------------------------------------------------------------------
# Values kept across steps, freezing under fit, growing buffers, argument kinds
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_gradients_and_predictions_kept_and_read_after_later_updates(tf):
    """Two 8-step loops (hand-written SGD, then Adam) that keep every step's gradients,
    predictions and loss in a list and read some of them right after the update of their own
    step (steps 4 and 6, by then a loop whose updates repeat) and all of them at the end: each
    holds the value computed from its own step's weights."""
    x, y = _data(8, 3, 2780)
    out = []
    for kind in ("sgd", "adam"):
        w = tf.Variable(np.full((3, 1), 0.5, np.float32))
        b = tf.Variable([0.1])
        opt = tf.keras.optimizers.Adam(0.1)
        kept, late = [], []
        for i in range(8):
            with tf.GradientTape() as tape:
                pred = tf.matmul(x, w) + b
                loss = tf.reduce_mean(tf.square(pred - y))
            gw, gb = tape.gradient(loss, [w, b])
            if kind == "adam":
                opt.apply_gradients(zip([gw, gb], [w, b]))
            else:
                w.assign_sub(0.1 * gw)
                b.assign_sub(0.1 * gb)
            kept.append((gw, gb, pred, loss))
            if i in (4, 6):
                late.append((gw.numpy(), gb.numpy(), pred.numpy()))
        out.append((late, kept, w, b))
    return out


@parity(**TOL)
def test_trainable_flipped_between_fits_with_and_without_recompiling(tf):
    """The transfer-learning guide's warning: freezing a layer after ``fit`` has run without
    calling ``compile`` again leaves the old training function, which still updates it; after
    ``compile`` the frozen layer stays put; unfrozen and compiled again it trains."""
    x, y = _data(8, 3, 2790)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, name="a"),
                                 tf.keras.layers.Dense(1, name="b")])
    keras_init(model, seed=2791)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    out = [model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history["loss"]]
    for trainable, recompile in ((False, False), (False, True), (True, True)):
        model.layers[0].trainable = trainable
        if recompile:
            model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        before = model.layers[0].kernel.numpy().copy()
        h = model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False).history["loss"]
        out.append((h, bool(np.any(model.layers[0].kernel.numpy() != before))))
    return out, [w.numpy() for w in model.weights]


@parity(modes=True, **TOL)
def test_replay_buffer_in_variables_of_unknown_length_growing_by_concat(tf):
    """A buffer held in ``tf.Variable(..., shape=TensorShape([None, 3]))`` Variables grown by
    ``assign(concat([buf, new]))`` each step, eagerly and in a compiled ``add``; a regression
    trained on the whole buffer each step; the static shape stays ``(None, 3)``."""
    x, y = _data(12, 3, 2800)
    buf_x = tf.Variable(np.zeros((0, 3), np.float32), shape=tf.TensorShape([None, 3]), trainable=False)
    buf_y = tf.Variable(np.zeros((0, 1), np.float32), shape=tf.TensorShape([None, 1]), trainable=False)
    w = tf.Variable(np.full((3, 1), 0.5, np.float32))
    out = []
    for i in range(4):
        buf_x.assign(tf.concat([buf_x, x[3 * i:3 * i + 3]], 0))
        buf_y.assign(tf.concat([buf_y, y[3 * i:3 * i + 3]], 0))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(buf_x, w) - buf_y))
        w.assign_sub(0.1 * tape.gradient(loss, w))
        out.append((loss, tuple(buf_x.shape), tf.shape(buf_x)))

    @tf.function
    def add(xb, yb):
        buf_x.assign(tf.concat([buf_x, xb], 0))
        buf_y.assign(tf.concat([buf_y, yb], 0))
        return tf.shape(buf_x)[0]

    return out, [add(x[:2], y[:2]) for _ in range(2)], tuple(buf_x.shape), buf_x, w


@parity(**TOL)
def test_learning_rate_argument_kinds_and_retracing_of_a_compiled_step(tf):
    """A compiled step taking its learning rate as an argument, called with a decaying rate
    given as a Python float (one trace per value), a NumPy float32 scalar, a 0-d NumPy array and
    a Tensor (one trace each): the same losses and weights each time, and the trace counts."""
    x, y = _data(8, 3, 2810)
    out = []
    for kind in ("py", "np32", "np0d", "tensor"):
        w = tf.Variable(np.full((3, 1), 0.5, np.float32))
        traces = []

        @tf.function
        def step(xx, yy, lr):
            traces.append(1)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(xx, w) - yy))
            w.assign_sub(tf.cast(lr, tf.float32) * tape.gradient(loss, w))
            return loss

        losses = []
        for i in range(4):
            lr = 0.1 / (i + 1)
            arg = {"py": lr, "np32": np.float32(lr), "np0d": np.array(lr, np.float32), "tensor": tf.constant(lr)}[kind]
            losses.append(step(x, y, arg))
        out.append((kind, losses, w, len(traces), step.experimental_get_tracing_count()))
    return out


@parity(modes=True, **TOL)
def test_keras_gan_with_the_discriminator_frozen_around_the_generator_step(tf):
    """The Keras-2 GAN idiom in a custom loop: ``disc.trainable = False`` around the generator's
    step (``disc.trainable_variables`` is empty, but a frozen layer's Variables are still
    trainable Variables, so the tape watches them and the gradient with respect to the
    discriminator's kernel is not ``None``), the flag flipped after a call was recorded, and the
    discriminator's own step with it unfrozen; three rounds with Adam and SGD."""
    rs = np.random.RandomState(2820)
    real = rs.randn(6, 2).astype(np.float32) + 1.0
    z = rs.randn(6, 3).astype(np.float32)
    gen = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="relu"),
                               tf.keras.layers.Dense(2)])
    disc = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(4, activation="tanh"),
                                tf.keras.layers.Dense(1)])
    keras_init(gen, seed=2821)
    keras_init(disc, seed=2822)
    g_opt, d_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.SGD(0.05)
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            d_loss = bce(tf.ones([6, 1]), disc(real)) + bce(tf.zeros([6, 1]), disc(gen(z)))
        d_opt.apply_gradients(zip(tape.gradient(d_loss, disc.trainable_variables), disc.trainable_variables))
        disc.trainable = False
        with tf.GradientTape(persistent=True) as tape:
            g_loss = bce(tf.ones([6, 1]), disc(gen(z)))
        g_grads = tape.gradient(g_loss, gen.trainable_variables)
        g_opt.apply_gradients(zip(g_grads, gen.trainable_variables))
        frozen = (len(disc.trainable_variables), tape.gradient(g_loss, disc.layers[0].kernel))
        disc.trainable = True
        del tape
        out.append((d_loss, g_loss, frozen))
    return out, [w.numpy() for w in gen.weights], [w.numpy() for w in disc.weights]


@parity(modes=True, **TOL)
def test_keras_models_built_by_the_first_trace_of_a_compiled_adam_step(tf):
    """Models never called before whose first call happens inside a compiled Adam step (their
    weights and Adam's slots made during the first trace): a Sequential of two Dense layers with
    no input shape, an Embedding + pooling + Dense classifier (the table's gradient rows only)
    and a subclassed model holding one custom layer that holds one Dense; three steps each."""
    x = np.array([[1.0, 2.0], [3.0, 5.0]], np.float32)
    ids = np.array([[1, 2], [3, 1]], np.int32)

    class Inner(tf.keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.d = tf.keras.layers.Dense(2, kernel_initializer="ones")

        def call(self, inputs):
            return tf.nn.relu(self.d(inputs))

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def call(self, inputs):
            return tf.reduce_sum(self.inner(inputs), -1)

    models = [
        (tf.keras.Sequential([tf.keras.layers.Dense(2, kernel_initializer="ones"),
                              tf.keras.layers.Dense(1, kernel_initializer="ones")]), x),
        (tf.keras.Sequential([tf.keras.layers.Embedding(5, 2, embeddings_initializer="ones"),
                              tf.keras.layers.GlobalAveragePooling1D(),
                              tf.keras.layers.Dense(1, kernel_initializer="ones")]), ids),
        (Net(), x),
    ]
    out = []
    for model, inp in models:
        opt = tf.keras.optimizers.Adam(0.1)

        @tf.function
        def step(v):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(v) - 1.0))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss

        out.append(([step(inp) for _ in range(3)], [w.numpy() for w in model.weights], int(opt.iterations)))
    return out

# ---------------------------------------------------------------------------
# Open tapejax differences (minimal programs)
# ---------------------------------------------------------------------------

def _saved_dense(tf, d):
    """A built Dense(1) with kernel [[2], [3]] and bias [1], saved by ``tf.train.Checkpoint``."""
    import os

    layer = tf.keras.layers.Dense(1)
    layer(np.ones((1, 2), np.float32))
    layer.set_weights([np.array([[2.0], [3.0]], np.float32), np.array([1.0], np.float32)])
    return tf.train.Checkpoint(model=layer).save(os.path.join(d, "ckpt"))


@parity(modes=True)
def test_checkpoint_restored_into_an_unbuilt_keras_layer(tf):
    """Deferred restoration into a Keras layer built after the restore (the usual resume of a
    subclassed model, built by its first call): TF restores the kernel and bias when ``build``
    creates them, so the first call already gives 2 + 3 + 1 = 6."""
    import tempfile

    path = _saved_dense(tf, tempfile.mkdtemp())
    fresh = tf.keras.layers.Dense(1)
    tf.train.Checkpoint(model=fresh).restore(path)
    return fresh(np.ones((1, 2), np.float32)), fresh.kernel, fresh.bias


@parity(modes=True)
def test_load_weights_prefix_into_an_unbuilt_subclassed_model(tf):
    """tf_keras' TF-format ``save_weights(prefix)`` / ``load_weights(prefix)`` into a subclassed
    model not yet built: the weights are restored when the first call builds it."""
    import os
    import tempfile

    d = tempfile.mkdtemp()

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d = tf.keras.layers.Dense(1)

        def call(self, inputs):
            return self.d(inputs)

    x = np.ones((1, 2), np.float32)
    model = Net()
    model(x)
    model.set_weights([np.array([[2.0], [3.0]], np.float32), np.array([1.0], np.float32)])
    model.save_weights(os.path.join(d, "w"))
    fresh = Net()
    fresh.load_weights(os.path.join(d, "w"))
    return fresh(x), [w.numpy() for w in fresh.weights]


@parity(modes=True)
def test_custom_layer_whose_build_leaves_its_sublayer_to_the_first_call(tf):
    """A custom layer holding a Dense made in ``__init__`` and defining ``build`` only for its
    own ``scale`` weight (the sublayer builds on its first call inside ``call``, a common keras.io
    layout): the first call under a tape gives the output, three trainable weights and their
    gradients."""
    class Block(tf.keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.inner = tf.keras.layers.Dense(3, kernel_initializer="ones")

        def build(self, input_shape):
            self.scale = self.add_weight(name="scale", shape=(3,), initializer="ones")

        def call(self, x):
            return self.inner(x) * self.scale

    block = Block()
    x = np.array([[1.0, 2.0]], np.float32)
    with tf.GradientTape() as tape:
        out = block(x)
        loss = tf.reduce_sum(out * tf.constant([1.0, 2.0, 3.0]))
    return out, len(block.trainable_weights), tape.gradient(loss, block.trainable_weights)


@parity(modes=True)
def test_subclassed_model_built_by_build_then_called(tf):
    """``model.build((None, 2))`` on a subclassed model before its first call (to print a summary
    or load weights), then a forward pass: ``[[1 + 2]]``."""
    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d = tf.keras.layers.Dense(1, kernel_initializer="ones")

        def call(self, inputs):
            return self.d(inputs)

    model = Net()
    model.build((None, 2))
    return model(np.array([[1.0, 2.0]], np.float32))


@parity(modes=True)
def test_subclassed_two_layer_model_first_called_inside_a_function(tf):
    """A subclassed model of two Dense layers, never called before, whose first call (building
    both layers) happens while a ``tf.function`` traces: ``[[1, 2], [3, 5]]`` through two all-ones
    kernels gives ``2 * (x1 + x2)``."""
    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d1 = tf.keras.layers.Dense(2, kernel_initializer="ones")
            self.d2 = tf.keras.layers.Dense(1, kernel_initializer="ones")

        def call(self, inputs):
            return self.d2(self.d1(inputs))

    model = Net()

    @tf.function
    def f(x):
        return model(x)

    x = np.array([[1.0, 2.0], [3.0, 5.0]], np.float32)
    return f(x), f(x), len(model.weights)


@parity(modes=True)
def test_function_wrapping_a_keras_model_object(tf):
    """``fast = tf.function(model)``, the TF guide's way of compiling a Keras model's forward pass:
    the compiled call gives the model's output."""
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1, kernel_initializer="ones")])
    fast = tf.function(model)
    return fast(np.array([[1.0, 2.0], [3.0, 5.0]], np.float32))
