"""Realistic training programs, run under real TensorFlow and under tapejax with its
execution modes on and off (``modes=True``): the programs that found issue #20's wrong
answers (a DQN target network, a gradient-reversal schedule, a data loader refilling one
buffer, a metric kept inside the tape, an evaluation function between eager steps, a GAN,
a running sum of losses).  Every value a user would look at is compared, losses included.
"""
import copy

import numpy as np

from .harness import parity

TOL = dict(rtol=2e-5, atol=2e-6)


def _data(n=8, d=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randn(n, 1).astype(np.float32)


def _mlp(tf, d=3, h=4, seed=1):
    rs = np.random.RandomState(seed)

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tf.Variable(rs.randn(d, h).astype(np.float32) * 0.5, name="w1")
            self.b1 = tf.Variable(np.zeros(h, np.float32), name="b1")
            self.w2 = tf.Variable(rs.randn(h, 1).astype(np.float32) * 0.5, name="w2")

        def __call__(self, x):
            return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1) + self.b1), self.w2)

    return MLP()


@parity(modes=True, **TOL)
def test_dqn_with_target_network(tf):
    """Q-learning against a deep-copied target network, synced every 3 steps with assign."""
    x, r = _data()
    q = _mlp(tf)
    target = copy.deepcopy(q)
    opt = tf.keras.optimizers.Adam(0.05)
    losses = []
    for step in range(7):
        with tf.GradientTape() as tape:
            y = r + 0.9 * target(x)
            loss = tf.reduce_mean((q(x) - y) ** 2)
        grads = tape.gradient(loss, q.trainable_variables)
        opt.apply_gradients(zip(grads, q.trainable_variables))
        losses.append(loss)
        if step % 3 == 2:
            for a, b in zip(target.trainable_variables, q.trainable_variables):
                a.assign(b)
    return losses, q.trainable_variables, target.trainable_variables


@parity(modes=True, **TOL)
def test_gradient_reversal_schedule(tf):
    """Domain-adversarial training: the reversal's strength changes every step and grad_fn
    reads it from Python when the gradient is computed."""
    x, _ = _data()
    dom = (np.arange(8) % 2).astype(np.float32).reshape(8, 1)
    sched = {"lam": 0.0}

    @tf.custom_gradient
    def reverse(h):
        return tf.identity(h), lambda dy: -sched["lam"] * dy

    feat = tf.Variable(np.full((3, 4), 0.3, np.float32))
    head = tf.Variable(np.full((4, 1), -0.2, np.float32))
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for step in range(4):
        sched["lam"] = 2.0 / (1.0 + np.exp(-10.0 * step / 4)) - 1.0
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.matmul(x, feat))
            logits = tf.matmul(reverse(h), head)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=dom, logits=logits))
        g_feat, g_head = tape.gradient(loss, [feat, head])
        opt.apply_gradients([(g_feat, feat), (g_head, head)])
        out.append((loss, g_feat))
    return out, feat, head


@parity(modes=True, **TOL)
def test_loader_refilling_one_buffer(tf):
    """A loader that reuses one NumPy buffer: each op reads the batch when it is called."""
    x_all, y_all = _data(n=16)
    xb = np.empty((4, 3), np.float32)
    yb = np.empty((4, 1), np.float32)
    w = tf.Variable(np.full((3, 1), 0.1, np.float32))
    losses, grads = [], []
    for i in range(4):
        xb[:] = x_all[4 * i:4 * i + 4]
        yb[:] = y_all[4 * i:4 * i + 4]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
        xb[:] = 100.0      # the loader starts filling the next batch before the gradient
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        losses.append(loss)
        grads.append(g)
    return losses, grads, w


@parity(modes=True, **TOL)
def test_metric_kept_inside_the_tape(tf):
    """Logits and a metric computed in the tape, kept in lists, read after later updates."""
    x, r = _data()
    m = _mlp(tf)
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    kept_logits, maes = [], []
    for _ in range(5):
        with tf.GradientTape() as tape:
            logits = m(x)
            loss = tf.reduce_mean((logits - r) ** 2)
            maes.append(tf.reduce_mean(tf.abs(logits - r)))
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
        kept_logits.append(logits)
    return [tf.reduce_sum(k) for k in kept_logits], maes, m.trainable_variables


@parity(modes=True, **TOL)
def test_evaluation_function_between_eager_steps(tf):
    """A compiled evaluation (and a compiled assign) between eager optimizer steps."""
    x, r = _data()
    w = tf.Variable(np.full((3, 1), 0.2, np.float32))
    opt = tf.keras.optimizers.Adam(0.1)
    evaluate = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)))

    @tf.function
    def shrink():
        w.assign(w * 0.5)

    out = []
    for step in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - r) ** 2)
            read = w.read_value()
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, evaluate(x), read))
        if step == 2:
            shrink()
            out.append(read)
    half = g * 0.5
    out.append(tf.function(lambda: tf.reduce_sum(half + w))())
    return out, w


@parity(modes=True, **TOL)
def test_gan_two_tapes_two_optimizers(tf):
    z, real = _data(n=6, d=2)[0], _data(n=6, d=3, seed=5)[0]
    gw = tf.Variable(np.full((2, 3), 0.1, np.float32))
    dw = tf.Variable(np.full((3, 1), -0.1, np.float32))
    g_opt, d_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.Adam(0.02)
    hist = []
    for _ in range(4):
        with tf.GradientTape() as gt, tf.GradientTape() as dt:
            fake = tf.tanh(tf.matmul(z, gw))
            d_real, d_fake = tf.matmul(real, dw), tf.matmul(fake, dw)
            d_loss = tf.reduce_mean(tf.nn.softplus(-d_real) + tf.nn.softplus(d_fake))
            g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
        g_opt.apply_gradients([(gt.gradient(g_loss, gw), gw)])
        d_opt.apply_gradients([(dt.gradient(d_loss, dw), dw)])
        hist.append((d_loss, g_loss))
    return hist, gw, dw


@parity(modes=True, **TOL)
def test_running_sum_of_losses(tf):
    x, r = _data()
    w = tf.Variable(np.full((3, 1), 0.2, np.float32))
    tot = tf.constant(0.0)
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - r) ** 2)
        w.assign_sub(0.05 * tape.gradient(loss, w))
        tot = tot + loss
    return tot, w
