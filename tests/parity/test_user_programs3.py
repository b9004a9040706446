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
