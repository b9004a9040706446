"""Training code that reads a Variable through slices (``w[i]``, ``w[:, :k]``, ``w[1, 2:]``), each
program run under real TensorFlow 2.21 and under tapejax with deferred execution and predicted
updates on and off (``modes=True``): under deferral a slice read by a recording tape is a pending
slice (``ops.indexing.PendingSlice``) that stays in the step's program, and it must behave as
TF's slice in every way a user can see: values, gradients, None where TF gives None, sliced
assigns between steps, slices kept and read later, compiled steps between eager ones."""
import numpy as np

from .harness import parity

TOL = dict(rtol=2e-5, atol=2e-6)


def _data(seed, n=8, d=5, k=3):
    rng = np.random.RandomState(seed)
    return (rng.randn(n, d).astype(np.float32), rng.randint(0, k, n).astype(np.int32),
            (rng.randn(2, d, d) * 0.4).astype(np.float32))


def _stacked_loss(tf, x, y, w, k=3):
    h = tf.nn.relu(tf.matmul(x, w[0]))
    logits = tf.matmul(h, w[1][:, :k])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


@parity(modes=True, **TOL)
def test_stacked_layers_read_by_slices_trained_by_sgd_and_adam(tf):
    """Two layers stored in one ``(2, 5, 5)`` Variable, read as ``w[0]`` and ``w[1][:, :3]``:
    losses each step and the final weights, under SGD and under Adam (one Variable each)."""
    xs, ys, w0 = _data(0)
    x, y = tf.constant(xs), tf.constant(ys)
    out = []
    for opt in (tf.keras.optimizers.SGD(0.3), tf.keras.optimizers.Adam(0.05)):
        w = tf.Variable(w0)
        losses = []
        for _ in range(6):
            with tf.GradientTape() as tape:
                loss = _stacked_loss(tf, x, y, w)
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
            losses.append(loss)
        out.append((losses, w))
    return out


@parity(modes=True, **TOL)
def test_sliced_assigns_between_steps_and_slices_kept_for_later(tf):
    """A manual-update loop that halves ``w[0]`` by a sliced assign every third step and adds to
    ``w[1, 2:]`` (TF's slices have ``assign`` only); the slice ``w[0]`` of every step is kept and read after the loop (each its own
    step's value)."""
    xs, ys, w0 = _data(1)
    x, y = tf.constant(xs), tf.constant(ys)
    w = tf.Variable(w0)
    kept, losses = [], []
    for step in range(7):
        with tf.GradientTape() as tape:
            first = w[0]
            kept.append(first)
            loss = _stacked_loss(tf, x, y, w)
        g = tape.gradient(loss, w)
        w.assign_sub(0.2 * g)
        if step % 3 == 2:
            w[0].assign(w[0] * 0.5)
            w[1, 2:].assign(w[1, 2:] + 0.01)
        losses.append(loss)
    return losses, w, [k for k in kept]


@parity(modes=True, **TOL)
def test_gradient_with_respect_to_a_slice_and_a_watched_slice(tf):
    """``tape.gradient(loss, w[0])`` with a fresh slice is None (it is another tensor than the one
    the loss used); the slice the loss used, watched or not, gets its gradient; a persistent tape
    gives two gradients through slices; an integer tensor index reads a row."""
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 4.0)
    with tf.GradientTape(persistent=True) as tape:
        s = w[1]
        tape.watch(s)
        loss = tf.reduce_sum(s * s) + tf.reduce_sum(w[tf.constant(2)] * 3.0)
        other = tf.reduce_sum(tf.exp(w[:, 1:3]))
    fresh = tape.gradient(loss, w[1])
    used = tape.gradient(loss, s)
    gw = tape.gradient(loss, w)
    go = tape.gradient(other, w)
    del tape
    return fresh, used, gw, go


@parity(modes=True, **TOL)
def test_a_compiled_evaluation_reading_slices_between_eager_steps(tf):
    """An eager training loop on slices with a ``tf.function`` evaluation (reading the same
    slices) after every second step, and a compiled step replacing the eager one at the end."""
    xs, ys, w0 = _data(2)
    x, y = tf.constant(xs), tf.constant(ys)
    w = tf.Variable(w0)
    opt = tf.keras.optimizers.SGD(0.25)

    @tf.function
    def evaluate(x):
        return tf.reduce_sum(tf.matmul(tf.nn.relu(tf.matmul(x, w[0])), w[1][:, :3]))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = _stacked_loss(tf, x, y, w)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    out = []
    for i in range(6):
        with tf.GradientTape() as tape:
            loss = _stacked_loss(tf, x, y, w)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        out.append(loss)
        if i % 2:
            out.append(evaluate(x))
    out += [step(x, y) for _ in range(3)]
    return out, w


@parity(modes=True, **TOL)
def test_slices_as_operands_of_concat_stack_and_einsum_in_a_loss(tf):
    """Slices of one Variable as operands of ops of several inputs (``concat``, ``stack``,
    ``einsum``) and next to Python numbers, in a loss trained for a few steps."""
    w = tf.Variable(np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(4, 6))
    x = tf.constant(np.linspace(0.5, 1.5, 6, dtype=np.float32))
    losses = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            rows = tf.concat([w[0] * 2.0, 1.0 - w[1], w[2:4, ::2][0]], 0)
            stacked = tf.stack([w[0], w[3]], 0)
            loss = tf.reduce_sum(rows ** 2) * 0.1 + tf.einsum("i,ki->", x, stacked) * 0.5
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        losses.append(loss)
    return losses, w
