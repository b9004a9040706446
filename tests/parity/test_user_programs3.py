"""Realistic training programs where features meet, run under real TensorFlow 2.21 and under
tapejax with its execution modes on and off (``modes=True``).  Every number a user would
look at is compared: losses, gradients (``None`` included), Variables after training,
optimizer counters and metric values.
"""
import os
import tempfile

import numpy as np

from .harness import parity

TOL = dict(rtol=2e-5, atol=2e-6)


def _data(n=8, d=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randn(n, 1).astype(np.float32)


def _init(shape, seed, scale=0.5):
    return (np.random.RandomState(seed).randn(*shape) * scale).astype(np.float32)


@parity(modes=True, **TOL)
def test_gradient_accumulation_in_a_compiled_loop(tf):
    """Micro-batch gradients summed into Variable accumulators by ``assign_add`` inside
    ``for i in tf.range(k)``; clipped by global norm and applied once per step."""
    x, y = _data(n=12)
    w = tf.Variable(_init((3, 1), 1))
    b = tf.Variable([0.1])
    acc = [tf.Variable(tf.zeros_like(w)), tf.Variable(tf.zeros_like(b))]
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    xs, ys = tf.constant(x.reshape(3, 4, 3)), tf.constant(y.reshape(3, 4, 1))

    @tf.function
    def step():
        for a in acc:
            a.assign(tf.zeros_like(a))
        total = tf.constant(0.0)
        for i in tf.range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xs[i], w) + b - ys[i]) ** 2)
            for a, g in zip(acc, tape.gradient(loss, [w, b])):
                a.assign_add(g / 3.0)
            total += loss
        grads, norm = tf.clip_by_global_norm([a.read_value() for a in acc], 0.5)
        opt.apply_gradients(zip(grads, [w, b]))
        return total / 3.0, norm

    out = [step() for _ in range(4)]
    return out, w, b, acc, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_gan_alternating_compiled_and_eager_steps(tf):
    """Discriminator steps compiled, generator steps eager, alternating; two optimizers."""
    z, real = _data(n=6, d=2)[0], _data(n=6, d=3, seed=5)[0]
    gw = tf.Variable(_init((2, 3), 2))
    dw = tf.Variable(_init((3, 1), 3))
    g_opt, d_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.RMSprop(0.02)

    def losses():
        fake = tf.tanh(tf.matmul(z, gw))
        d_real, d_fake = tf.matmul(real, dw), tf.matmul(fake, dw)
        d_loss = tf.reduce_mean(tf.nn.softplus(-d_real) + tf.nn.softplus(d_fake))
        g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
        return d_loss, g_loss

    @tf.function
    def d_step():
        with tf.GradientTape() as t:
            d_loss, _ = losses()
        g = t.gradient(d_loss, [dw, gw])
        d_opt.apply_gradients([(g[0], dw)])
        return d_loss, g[1]

    hist = []
    for _ in range(3):
        d_loss, g_of_gen = d_step()
        with tf.GradientTape() as t:
            _, g_loss = losses()
        grads = t.gradient(g_loss, [gw, dw])
        g_opt.apply_gradients([(grads[0], gw)])
        hist.append((d_loss, g_loss, g_of_gen, grads[1]))
    return hist, gw, dw, int(g_opt.iterations.numpy()), int(d_opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_schedule_clipping_and_none_gradients(tf):
    """An ExponentialDecay schedule read through ``optimizer.iterations``; a frozen head
    gives a None gradient that ``apply_gradients`` skips; global-norm clipping with None."""
    x, y = _data()
    w = tf.Variable(_init((3, 4), 4))
    unused = tf.Variable(_init((4, 1), 5))
    head = tf.Variable(_init((4, 1), 6))
    sched = tf.keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.5)
    opt = tf.keras.optimizers.Adam(sched)
    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(tf.nn.relu(tf.matmul(x, w)), head) - y) ** 2)
        grads = tape.gradient(loss, [w, unused, head])
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients([(g, v) for g, v in zip(clipped, [w, unused, head]) if g is not None])
        out.append((loss, norm, clipped[1], sched(opt.iterations)))
    return out, w, unused, head, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_checkpoint_mid_training_restores_into_a_fresh_model(tf):
    """Save a Module and its Adam state after 3 steps, restore into fresh objects, train on:
    the same numbers as the run that was never interrupted."""
    x, y = _data()

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(_init((3, 2), 7), name="w")
            self.v = tf.Variable(_init((2, 1), 8), name="v")

        def __call__(self, x):
            return tf.matmul(tf.tanh(tf.matmul(x, self.w)), self.v)

    def train(net, opt, n):
        out = []
        for _ in range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((net(x) - y) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
            out.append(loss)
        return out

    net, opt = Net(), tf.keras.optimizers.Adam(0.05)
    first = train(net, opt, 3)
    path = tf.train.Checkpoint(net=net, opt=opt).save(os.path.join(tempfile.mkdtemp(), "ck"))
    straight = train(net, opt, 3)
    fresh, fresh_opt = Net(), tf.keras.optimizers.Adam(0.05)
    fresh.w.assign(tf.zeros_like(fresh.w))
    tf.train.Checkpoint(net=fresh, opt=fresh_opt).restore(path)
    resumed = train(fresh, fresh_opt, 3)
    return first, straight, resumed, net.trainable_variables, fresh.trainable_variables, int(fresh_opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_early_stopping_inside_a_compiled_step(tf):
    """``if loss < best:`` in a converted function keeps the best weights and counts patience."""
    x, y = _data()
    w = tf.Variable(_init((3, 1), 9))
    best = tf.Variable(1e9)
    best_w = tf.Variable(tf.zeros_like(w))
    patience = tf.Variable(0)
    lr = tf.Variable(0.3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        w.assign_sub(lr * tape.gradient(loss, w))
        if loss < best:
            best.assign(loss)
            best_w.assign(w)
            patience.assign(0)
        else:
            patience.assign_add(1)
            lr.assign(lr * 0.5)
        return loss

    losses = []
    for _ in range(8):
        losses.append(step())
        if patience.numpy() >= 2:
            break
    return losses, best, best_w, patience, lr, w


@parity(modes=True, **TOL)
def test_tensor_array_rnn_trained_by_a_compiled_step(tf):
    """An Elman RNN unrolled by ``tf.while_loop`` into a ``TensorArray``; the loss reads the
    stacked states; the step is compiled, the evaluation eager."""
    seq = tf.constant(np.random.RandomState(3).randn(5, 4, 2).astype(np.float32))  # time, batch, feat
    target = tf.constant(np.random.RandomState(4).randn(4, 1).astype(np.float32))
    wx = tf.Variable(_init((2, 3), 10))
    wh = tf.Variable(_init((3, 3), 11))
    wo = tf.Variable(_init((3, 1), 12))
    opt = tf.keras.optimizers.Adam(0.05)

    def run(seq):
        ta = tf.TensorArray(tf.float32, size=5)

        def body(t, h, ta):
            h = tf.tanh(tf.matmul(seq[t], wx) + tf.matmul(h, wh))
            return t + 1, h, ta.write(t, h)

        _, h, ta = tf.while_loop(lambda t, h, ta: t < 5, body, (0, tf.zeros((4, 3)), ta), maximum_iterations=5)
        states = ta.stack()
        return tf.matmul(h, wo), tf.reduce_mean(states ** 2)

    @tf.function
    def step(seq):
        with tf.GradientTape() as tape:
            pred, act = run(seq)
            loss = tf.reduce_mean((pred - target) ** 2) + 0.1 * act
        grads = tape.gradient(loss, [wx, wh, wo])
        opt.apply_gradients(zip(grads, [wx, wh, wo]))
        return loss, grads

    out = []
    for _ in range(3):
        loss, grads = step(seq)
        with tf.GradientTape() as tape:
            pred, act = run(seq)
        out.append((loss, grads, tape.gradient(act, [wx, wo])))
    return out, wx, wh, wo


@parity(modes=True, **TOL)
def test_physics_informed_loss_with_jacobians(tf):
    """u(x, t) by a small MLP; the residual u_t + u * u_x - nu * u_xx needs first and second
    derivatives (a persistent inner tape and ``batch_jacobian``); trained by SGD."""
    pts = tf.constant(np.random.RandomState(5).uniform(-1, 1, (6, 2)).astype(np.float32))
    w1 = tf.Variable(_init((2, 5), 13))
    w2 = tf.Variable(_init((5, 1), 14))
    opt = tf.keras.optimizers.SGD(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            with tf.GradientTape(persistent=True) as t2:
                t2.watch(pts)
                with tf.GradientTape() as t1:
                    t1.watch(pts)
                    u = tf.matmul(tf.tanh(tf.matmul(pts, w1)), w2)
                du = t1.batch_jacobian(u, pts)[:, 0, :]     # (6, 2): u_x, u_t
                u_x = du[:, 0:1]
            u_xx = t2.gradient(u_x, pts)[:, 0:1]
            jac = t2.jacobian(u_x, pts)
            del t2
            resid = du[:, 1:2] + u * u_x - 0.1 * u_xx
            loss = tf.reduce_mean(resid ** 2) + tf.reduce_mean(u[:2] ** 2)
        grads = outer.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        out.append((loss, grads, tf.reduce_sum(jac)))
    return out, w1, w2


@parity(modes=True, **TOL)
def test_keras_mean_metric_updated_inside_the_tape(tf):
    """``tf.keras.metrics.Mean`` and ``MeanAbsoluteError`` updated inside the tape every step,
    read and reset between epochs, with a compiled step in the second epoch."""
    x, y = _data()
    w = tf.Variable(_init((3, 1), 15))
    opt = tf.keras.optimizers.SGD(0.1)
    loss_m, mae = tf.keras.metrics.Mean(), tf.keras.metrics.MeanAbsoluteError()

    def step():
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w)
            loss = tf.reduce_mean((pred - y) ** 2)
            loss_m.update_state(loss)
            mae.update_state(y, pred)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    compiled = tf.function(step)
    epochs = []
    for epoch in range(2):
        losses = [(compiled if epoch else step)() for _ in range(3)]
        epochs.append((losses, loss_m.result(), mae.result(), loss_m.count))
        loss_m.reset_state()
        mae.reset_state()
    return epochs, w, loss_m.result()


@parity(modes=True, **TOL)
def test_module_with_variables_created_on_first_call(tf):
    """A ``tf.Module`` whose Dense-like layers build their Variables lazily on the first call,
    which happens inside the ``tf.function`` step; ``trainable_variables`` then lists them."""
    x, y = _data()

    class Dense(tf.Module):
        def __init__(self, units, seed, name=None):
            super().__init__(name=name)
            self.units, self.seed, self.w = units, seed, None

        def __call__(self, x):
            if self.w is None:
                self.w = tf.Variable(_init((x.shape[-1], self.units), self.seed), name="w")
                self.b = tf.Variable(tf.zeros([self.units]), name="b")
            return tf.matmul(x, self.w) + self.b

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = Dense(4, 16), Dense(1, 17)

        def __call__(self, x):
            return self.l2(tf.nn.relu(self.l1(x)))

    net = Net()
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - y) ** 2)
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    losses = [step(x, y) for _ in range(4)]
    names = [v.name for v in net.trainable_variables]
    return losses, names, net.trainable_variables, len(net.variables)


@parity(modes=True, **TOL)
def test_ensemble_with_hand_made_loss_scaling(tf):
    """Three members trained together on one tape in float16 compute with float32 master
    weights; the loss is scaled by hand, the gradients unscaled and checked for finiteness."""
    x, y = _data()
    members = [(tf.Variable(_init((3, 4), 20 + i)), tf.Variable(_init((4, 1), 30 + i))) for i in range(3)]
    params = [v for m in members for v in m]
    opt = tf.keras.optimizers.SGD(0.05)
    scale = tf.Variable(1024.0, trainable=False)
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            xh = tf.cast(x, tf.float16)
            preds = [tf.matmul(tf.nn.relu(tf.matmul(xh, tf.cast(a, tf.float16))), tf.cast(b, tf.float16))
                     for a, b in members]
            mean = tf.cast(tf.add_n(preds), tf.float32) / 3.0
            loss = tf.reduce_mean((mean - y) ** 2)
            scaled = loss * scale
        grads = [g / scale for g in tape.gradient(scaled, params)]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        if bool(finite):
            opt.apply_gradients(zip(grads, params))
            if step == 1:
                scale.assign(scale * 2.0)
        else:
            scale.assign(scale / 2.0)
        out.append((loss, finite, [g.dtype.name for g in grads]))
    return out, params, scale
