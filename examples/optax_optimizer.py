"""Any optax optimizer behind the Keras-2 API: ``tapejax.optimizers.from_optax``.

Trains a small regression MLP (a ``tapejax.Module``) with
``optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule))`` inside
``tapejax.function``: the optax state lives in Variables, so it is threaded
through the compiled step and can be checkpointed.  The script then checks
the result against the same training written in pure JAX + optax, and shows
that a Keras optimizer also accepts an optax schedule as its learning rate.

Run: python examples/optax_optimizer.py
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import tapejax as tf

rng = np.random.RandomState(0)
X = rng.uniform(-2, 2, size=(256, 1)).astype("float32")
Y = (np.sin(2 * X) + 0.05 * rng.randn(256, 1)).astype("float32")
SIZES = [1, 32, 32, 1]
STEPS = 200


def init_params():
    r = np.random.RandomState(1)
    return [((r.randn(a, b) * np.sqrt(1.0 / a)).astype("float32"), np.zeros(b, "float32"))
            for a, b in zip(SIZES[:-1], SIZES[1:])]


def make_tx():
    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.02, warmup_steps=20, decay_steps=STEPS)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-4))


class MLP(tf.Module):
    def __init__(self):
        super().__init__()
        self.params = [(tf.Variable(w, name=f"w{i}"), tf.Variable(b, name=f"b{i}"))
                       for i, (w, b) in enumerate(init_params())]

    def __call__(self, x):
        for i, (w, b) in enumerate(self.params):
            x = tf.matmul(x, w) + b
            if i < len(self.params) - 1:
                x = tf.tanh(x)
        return x


def train_tapejax():
    model = MLP()
    opt = tf.optimizers.from_optax(make_tx())
    variables = [v for pair in model.params for v in pair]   # same order as the pure-JAX pytree

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    x, y = tf.constant(X), tf.constant(Y)
    for i in range(STEPS):
        loss = step(x, y)
        if i % 100 == 0 or i == STEPS - 1:
            print(f"  step {i:3d}  loss {float(loss.numpy()):.5f}")
    return float(loss.numpy()), [v.numpy() for v in variables], opt


def train_pure_jax():
    params = [jnp.asarray(a) for pair in init_params() for a in pair]
    tx = make_tx()
    state = tx.init(params)

    def loss_fn(p, x, y):
        h = x
        for i in range(0, len(p), 2):
            h = h @ p[i] + p[i + 1]
            if i < len(p) - 2:
                h = jnp.tanh(h)
        return jnp.mean(jnp.square(h - y))

    @jax.jit
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    for _ in range(STEPS):
        params, state, loss = step(params, state, X, Y)
    return float(loss), [np.asarray(p) for p in params]


if __name__ == "__main__":
    print("tapejax.function + from_optax(clip_by_global_norm + adamw with a warmup-cosine schedule):")
    loss, params, opt = train_tapejax()
    ref_loss, ref_params = train_pure_jax()
    print(f"final loss: tapejax {loss:.6f}   pure JAX + optax {ref_loss:.6f}")
    for a, b in zip(params, ref_params):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    print(f"parameters agree with pure JAX + optax; optimizer iterations = {int(opt.iterations.numpy())}, "
          f"{len(opt.variables())} optimizer variables")
    keras_adam = tf.keras.optimizers.Adam(learning_rate=optax.exponential_decay(0.1, 10, 0.5))
    v = tf.Variable(1.0)
    for _ in range(3):
        keras_adam.minimize(lambda: v * v, [v])
    print(f"Keras Adam with an optax schedule as learning_rate: v = {float(v.numpy()):.4f} after 3 steps")
