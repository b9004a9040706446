"""Seed 000: a GAN step that computes the discriminator's loss once and trains the
generator with ``output_gradients=-1.0`` (the generator *ascends* the same loss).

    d_loss = BCE(D(real), 1) + BCE(D(G(z)), 0)        # computed once, on one tape
    discriminator: minimise d_loss          -> tape.gradient(d_loss, D.vars)
    generator:     maximise d_loss          -> tape.gradient(d_loss, G.vars, output_gradients=-1.0)

The seed's remark stands: real GANs usually give the generator its own
(non-saturating) loss; this shows what ``output_gradients`` does.  The same
generator update is also written with the Keras-2 API,
``optimizer.minimize(d_loss, G.vars, grad_loss=-1.0, tape=tape)``, and both
are checked to give the same parameters.  Data: 1-D, real samples ~ N(4, 0.5).

Run: python examples/gan_step.py
"""
import numpy as np

import tapejax as tf

REAL_MEAN, REAL_STD = 4.0, 0.5


class Generator(tf.Module):
    def __init__(self):
        super().__init__()
        self.scale = tf.Variable(1.0, name="scale")
        self.shift = tf.Variable(0.0, name="shift")

    def __call__(self, z):
        return self.scale * z + self.shift


class Discriminator(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.array([[0.1], [0.0]], "float32"), name="w")
        self.b = tf.Variable([0.0], name="b")

    def __call__(self, x):
        feats = tf.stack([x, x * x / 10.0], axis=1)
        return tf.matmul(feats, self.w)[:, 0] + self.b[0]


def bce_from_logits(logits, label):
    p = tf.sigmoid(logits)
    eps = 1e-6
    return -tf.reduce_mean(tf.log(p + eps)) if label == 1 else -tf.reduce_mean(tf.log(1.0 - p + eps))


def make_step(G, D, g_opt, d_opt, use_minimize):
    def step(real, z):
        with tf.GradientTape(persistent=True) as tape:
            fake = G(z)
            d_loss = bce_from_logits(D(real), 1) + bce_from_logits(D(fake), 0)
        d_grads = tape.gradient(d_loss, D.trainable_variables)
        if use_minimize:
            # Keras-2 form from the seed: grad_loss is the output gradient of the loss.
            g_opt.minimize(d_loss, G.trainable_variables, grad_loss=tf.constant(-1.0), tape=tape)
        else:
            g_grads = tape.gradient(d_loss, G.trainable_variables, output_gradients=-1.0)
            g_opt.apply_gradients(zip(g_grads, G.trainable_variables))
        d_opt.apply_gradients(zip(d_grads, D.trainable_variables))
        return d_loss
    return step


def train(steps=250, compiled=True, use_minimize=False, seed=0):
    G, D = Generator(), Discriminator()
    g_opt, d_opt = tf.keras.optimizers.SGD(0.08), tf.keras.optimizers.SGD(0.08)
    step = make_step(G, D, g_opt, d_opt, use_minimize)
    if compiled:
        step = tf.function(step)
    rng = np.random.RandomState(seed)
    for i in range(steps):
        real = tf.constant(rng.normal(REAL_MEAN, REAL_STD, 64).astype("float32"))
        z = tf.constant(rng.normal(0.0, 1.0, 64).astype("float32"))
        d_loss = step(real, z)
        if i % 100 == 0 or i == steps - 1:
            print(f"  step {i:3d}  d_loss {float(d_loss.numpy()):.4f}  generator shift {float(G.shift.numpy()):.3f} "
                  f"scale {float(G.scale.numpy()):.3f}")
    return G, D


def check_sign():
    """output_gradients=-1.0 is exactly the negated gradient."""
    G, D = Generator(), Discriminator()
    real = tf.constant(np.full(8, REAL_MEAN, "float32"))
    z = tf.constant(np.linspace(-1, 1, 8).astype("float32"))
    with tf.GradientTape(persistent=True) as tape:
        d_loss = bce_from_logits(D(real), 1) + bce_from_logits(D(G(z)), 0)
    plus = tape.gradient(d_loss, G.trainable_variables)
    minus = tape.gradient(d_loss, G.trainable_variables, output_gradients=-1.0)
    for p, m in zip(plus, minus):
        np.testing.assert_allclose(m.numpy(), -p.numpy())
    return [float(m.numpy()) for m in minus]


if __name__ == "__main__":
    print("output_gradients=-1.0 negates the generator gradient:", check_sign())
    print(f"real data ~ N({REAL_MEAN}, {REAL_STD}); generator starts at N(0, 1)")
    print("tapejax.function, tape.gradient(..., output_gradients=-1.0):")
    G1, _ = train(compiled=True, use_minimize=False)
    print("eager, optimizer.minimize(d_loss, ..., grad_loss=-1.0, tape=tape):")
    G2, _ = train(compiled=False, use_minimize=True)
    for a, b in zip(G1.variables, G2.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    print(f"both forms agree; generated mean {float(G1.shift.numpy()):.3f} (real {REAL_MEAN})")
