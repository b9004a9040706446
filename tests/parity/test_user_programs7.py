"""Round seven of realistic user programs, each run under real TensorFlow 2.21 and under tapejax
(the eager loops also with deferred execution and predicted updates off, ``modes=True``), chosen
where a wrong number could hide: host data that changes under the library (one NumPy buffer
refilled in place between steps, a generator that yields the same array each time, NumPy
snapshots of weights edited in place), target networks synced by ``assign`` every N steps, two
tapes in one ``with`` for a GAN, accumulation in Python lists with ``None``s, metrics and counters
updated inside the tape and read after the next update, learning rates that read Python state at
each step, an optimizer that meets a new Variable mid-training, weight tying (one Variable read
dense and sparse), custom gradients that read Python state when the gradient runs, forward-mode
penalties inside a training tape, per-example gradients by ``vectorized_map``, ``jit_compile``
steps, Variables passed to a ``tf.function`` as arguments, segment-softmax graph attention,
``tf.while_loop`` RNNs, ``ctc_loss``, ``slogdet`` flows and the Keras losses' ``reduction``
modes.  Random draws are made with NumPy and fed in (tapejax's random values differ from TF's by
design); a program with a seeded generator compares what does not depend on its values.
"""
import numpy as np

from .harness import init_array, mlp, mlp_vars, parity, regression_data, xfail_on_tapejax

TOL = dict(rtol=2e-5, atol=2e-6)
KTOL = dict(rtol=1e-4, atol=1e-5)


def _unaligned(n):
    """A float32 buffer of ``n`` zeros that is not 64-byte aligned.  TF's py_func (behind
    ``from_generator`` and ``numpy_function`` in a graph) hands a returned NumPy array to the
    runtime without a copy when its data is 64-byte aligned (``NdarrayToTensor`` in
    ``tensorflow/python/lib/core/ndarray_tensor.cc``), so whether a refilled buffer corrupts
    the elements already yielded depends on where the allocator put it (checked: an aligned
    buffer gives ``[[3, 3, 3, 3]]`` for yields 0..3, an unaligned one ``[[0, 1, 2, 3]]``).
    The programs here use an unaligned buffer, where TF copies, as tapejax always does."""
    raw = np.zeros(n + 32, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + 1
    return raw[start:start + n]


# ---------------------------------------------------------------------------
# Host data that changes under the library
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_one_numpy_buffer_refilled_in_place_feeds_eager_steps(tf):
    """A loader that refills one preallocated NumPy batch in place (``x_buf[:] = ...``) before each
    step; the step reads it directly (``tf.matmul(x_buf, w)``) and through ``tf.constant`` /
    ``convert_to_tensor`` tensors kept in a list and read only after the loop."""
    x, y = regression_data(n=16, seed=1)
    x_buf, y_buf = np.empty((4, 3), np.float32), np.empty((4, 1), np.float32)
    vs = mlp_vars(tf, seed=2)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    kept, out = [], []
    for step in range(6):
        rows = [(step * 3 + k) % 16 for k in range(4)]
        x_buf[:] = x[rows]
        y_buf[:] = y[rows]
        xb = tf.constant(x_buf)
        kept.append((xb, tf.convert_to_tensor(y_buf), tf.reduce_sum(x_buf)))
        with tf.GradientTape() as tape:
            direct = tf.matmul(x_buf, vs[0])
            loss = tf.reduce_mean((mlp(tf, vs, xb) - y_buf) ** 2) + 0.01 * tf.reduce_mean(direct ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append(loss)
    x_buf[:] = 0.0
    return out, kept, vs


@parity(modes=True, **TOL)
def test_numpy_buffer_refilled_in_place_feeds_a_compiled_step(tf):
    """The same refilled buffer passed to a ``tf.function`` step as an argument every step (a NumPy
    array argument is a tensor: one trace), and to an eager evaluation after each step."""
    x, y = regression_data(n=12, seed=3)
    x_buf, y_buf = np.empty((4, 3), np.float32), np.empty((4, 1), np.float32)
    w = tf.Variable(init_array((3, 1), 4))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    traces = []

    @tf.function
    def step(xb, yb):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss

    out = []
    for i in range(5):
        x_buf[:] = x[(i * 4) % 12:(i * 4) % 12 + 4]
        y_buf[:] = y[(i * 4) % 12:(i * 4) % 12 + 4]
        loss = step(x_buf, y_buf)
        x_buf[:] = 100.0          # the step has been called: its loss must not see this
        ev = tf.reduce_mean(tf.matmul(x[:4], w) + b)
        out.append((loss, ev))
    return out, w, b, len(traces)


@parity(**TOL)
def test_generator_yielding_one_reused_buffer_batched_and_prefetched(tf):
    """A ``from_generator`` loader that fills and yields the same NumPy arrays each time (each
    element is copied when it is yielded; see ``_unaligned`` for TF's exception), batched and
    prefetched, feeding an eager training loop."""
    x, y = regression_data(n=8, seed=5)

    def gen():
        xb, yb = _unaligned(3), _unaligned(1)
        for i in range(8):
            xb[:] = x[i]
            yb[:] = y[i]
            yield xb, yb

    ds = (tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec([3], tf.float32), tf.TensorSpec([1], tf.float32)))
        .batch(4).prefetch(2))
    w = tf.Variable(init_array((3, 1), 6))
    out = []
    for epoch in range(2):
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            out.append((loss, xb))
    it = iter(tf.data.Dataset.from_generator(gen, output_signature=(tf.TensorSpec([3], tf.float32),
                                                                    tf.TensorSpec([1], tf.float32))))
    first, second = next(it), next(it)
    return out, w, first, second


@parity(modes=True, **TOL)
def test_numpy_snapshots_of_weights_edited_in_place_and_assigned_back(tf):
    """``snap = v.numpy()`` edited in place (a pruning mask, a rescale) and assigned back; the
    Tensor whose ``numpy()`` was edited keeps its value; ``np.array(t)`` is a fresh copy."""
    x, y = regression_data(n=8, seed=7)
    w = tf.Variable(init_array((3, 2), 8))
    v = tf.Variable(init_array((2, 1), 9))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            h = tf.matmul(x, w)
            loss = tf.reduce_mean((tf.matmul(tf.nn.relu(h), v) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, v]), [w, v]))
        snap = w.numpy()
        snap[np.abs(snap) < 0.2] = 0.0     # magnitude pruning
        snap *= 1.05
        w.assign(snap)
        hn = h.numpy()
        hn[:] = 0.0                         # the user's copy, not the tensor
        arr = np.array(loss)
        arr += 1.0
        out.append((loss, h, float(arr)))
    return out, w, v


@parity(modes=True, **TOL)
def test_buffer_refilled_between_the_forward_and_the_gradient(tf):
    """Double buffering done wrong-but-legal: the loader refills the batch buffer for the next
    step right after the forward pass, before ``tape.gradient``; TF's ops took the values at call
    time, so the gradient is the old batch's.  A Variable assigned from the buffer inside the tape
    keeps the old values too."""
    x, y = regression_data(n=16, seed=91)
    x_buf, y_buf = x[:4].copy(), y[:4].copy()
    vs = mlp_vars(tf, seed=92)
    seen = tf.Variable(np.zeros((4, 3), np.float32), trainable=False)
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            seen.assign(x_buf)
            loss = tf.reduce_mean((mlp(tf, vs, x_buf) - y_buf) ** 2)
        nxt = ((step + 1) * 4) % 16
        x_buf[:] = x[nxt:nxt + 4]          # the next batch, into the same arrays
        y_buf[:] = y[nxt:nxt + 4]
        grads = tape.gradient(loss, vs)
        for v, g in zip(vs, grads):
            v.assign_sub(0.1 * g)
        out.append((loss, grads, seen.numpy()))
    return out, vs


@parity(modes=True, **TOL)
def test_custom_gradient_reads_a_numpy_mask_when_the_gradient_runs(tf):
    """A straight-through gate whose ``grad_fn`` multiplies by a NumPy mask the loop edits in
    place between the forward and ``tape.gradient`` (TF converts it when ``grad_fn`` runs)."""
    x, y = regression_data(n=6, seed=93)
    w = tf.Variable(init_array((3, 1), 94))
    mask = np.ones((6, 1), np.float32)

    @tf.custom_gradient
    def gate(h):
        def grad_fn(dy):
            return dy * mask
        return tf.round(tf.sigmoid(h)) + 0.0 * h, grad_fn

    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((gate(tf.matmul(x, w)) - y) ** 2)
        mask[:] = 1.0
        mask[step] = 0.0                    # read by grad_fn now, not at the forward
        g = tape.gradient(loss, w)
        w.assign_sub(0.5 * g)
        out.append((loss, g))
    return out, w


@parity(x64=True, **TOL)
def test_float64_numpy_statistics_standardise_a_float32_batch_in_x64_mode(tf):
    """Raw data in float64 (as pandas gives it), cast to a float32 batch, standardised with NumPy
    float64 mean / std and projected by NumPy float64 initial weights: TF converts a NumPy
    operand to the tensor's dtype, so everything stays float32 and trains with float32
    Variables (tapejax in JAX's x64 mode, where promotion would make it float64)."""
    rs = np.random.RandomState(100)
    raw = rs.randn(8, 3) * [1.0, 10.0, 0.1] + [0.0, 5.0, -1.0]          # float64
    target = rs.randn(8, 1)
    mean, std = raw.mean(0), raw.std(0)
    proj = rs.randn(3, 3) * 0.5                                          # float64
    x = tf.constant(raw, tf.float32)
    w = tf.Variable(np.zeros((3, 1), np.float32))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            xn = (x - mean) / std
            h = tf.matmul(xn, proj) * np.float64(0.5) + np.array([0.1, 0.0, -0.1])
            loss = tf.reduce_mean((tf.matmul(h, w) - tf.cast(target, tf.float32)) ** 2)
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        out.append((xn, h, loss, g))
    return out, w


@parity(modes=True, **TOL)
def test_variables_made_and_assigned_from_buffers_and_views(tf):
    """Variables created from, assigned from and ``assign_add``-ed with a NumPy buffer that the
    program then overwrites; non-contiguous views (``buf.T``, ``buf[:, ::2]``, ``buf[::-1]``) as
    operands; the Variables train on afterwards."""
    buf = np.arange(12, dtype=np.float32).reshape(3, 4) / 10.0
    w = tf.Variable(buf[:, :2])
    u = tf.Variable(np.zeros((4, 3), np.float32))
    u.assign(buf.T)
    s = tf.Variable(np.ones((3, 2), np.float32))
    s.assign_add(buf[:, ::2])
    r = tf.Variable(np.zeros((3, 4), np.float32))
    r.assign(buf[::-1])
    first = (tf.identity(w), tf.identity(u), tf.identity(s), tf.identity(r))
    buf[:] = -5.0
    x = np.linspace(-1, 1, 12).astype(np.float32).reshape(4, 3)
    out = [first]
    for _ in range(3):
        buf[:] = np.random.RandomState(0).rand(3, 4)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(tf.matmul(x, w + s), tf.transpose(w))) + tf.reduce_sum(u * r.numpy().T)
            loss = loss + tf.reduce_sum(tf.matmul(buf.T, w))
        gw, gu, gs = tape.gradient(loss, [w, u, s])
        for v_, g in ((w, gw), (u, gu), (s, gs)):
            v_.assign_sub(0.01 * g)
        out.append((loss, gw, gu, gs))
    return out, w, u, s, r


# ---------------------------------------------------------------------------
# Target networks, GANs
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_double_dqn_with_a_hard_target_sync_every_three_steps(tf):
    """Double DQN: the online net picks the next action (``argmax``), the target net values it
    (``gather(..., batch_dims=1)``); Huber with ``reduction='none'`` weighted by importance
    weights; the TD errors go to NumPy priorities; the target is copied by ``assign`` every
    third step."""
    rs = np.random.RandomState(10)
    s = rs.randn(12, 3).astype(np.float32)
    s2 = rs.randn(12, 3).astype(np.float32)
    acts = rs.randint(0, 2, 12).astype(np.int32)
    rew = rs.randn(12).astype(np.float32)
    done = (rs.rand(12) < 0.25).astype(np.float32)
    online = [tf.Variable(init_array((3, 8), 11)), tf.Variable(np.zeros(8, np.float32)),
              tf.Variable(init_array((8, 2), 12)), tf.Variable(np.zeros(2, np.float32))]
    target = [tf.Variable(v) for v in online]
    huber = tf.keras.losses.Huber(delta=1.0, reduction="none")
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    prio = np.ones(12, np.float32)

    def q(vs, obs):
        return tf.matmul(tf.nn.relu(tf.matmul(obs, vs[0]) + vs[1]), vs[2]) + vs[3]

    out = []
    for step in range(5):
        idx = np.argsort(-prio, kind="stable")[:4]
        isw = (1.0 / prio[idx]) / np.max(1.0 / prio[idx])
        a_star = tf.argmax(q(online, s2[idx]), axis=1, output_type=tf.int32)
        q_next = tf.gather(q(target, s2[idx]), a_star[:, None], batch_dims=1)[:, 0]
        y = rew[idx] + 0.9 * (1.0 - done[idx]) * q_next
        with tf.GradientTape() as tape:
            qsa = tf.gather(q(online, s[idx]), acts[idx][:, None], batch_dims=1)[:, 0]
            per = huber(y[:, None], qsa[:, None])
            loss = tf.reduce_mean(per * isw)
        opt.apply_gradients(zip(tape.gradient(loss, online), online))
        prio[idx] = np.abs((y - qsa).numpy()) + 1e-3
        if step % 3 == 2:
            for t, o in zip(target, online):
                t.assign(o)
        out.append((loss, per, a_star))
    return out, prio, online, target


@parity(modes=True, **TOL)
def test_gan_two_tapes_opened_in_one_with_statement(tf):
    """The DCGAN tutorial's step, eagerly: ``with GradientTape() as gen_tape, GradientTape() as
    disc_tape:`` around one forward, two losses (``BinaryCrossentropy(from_logits=True)``), two
    legacy Adams."""
    rs = np.random.RandomState(14)
    real = (rs.randn(16, 2) * 0.3 + [1.0, -1.0]).astype(np.float32)
    noise = rs.randn(6, 16, 2).astype(np.float32)
    gen = [tf.Variable(init_array((2, 4), 15)), tf.Variable(np.zeros(4, np.float32)),
           tf.Variable(init_array((4, 2), 16)), tf.Variable(np.zeros(2, np.float32))]
    disc = [tf.Variable(init_array((2, 4), 17)), tf.Variable(np.zeros(4, np.float32)),
            tf.Variable(init_array((4, 1), 18)), tf.Variable(np.zeros(1, np.float32))]
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    g_opt, d_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.5), tf.keras.optimizers.legacy.Adam(0.02, beta_1=0.5)

    def net(vs, z, act):
        return tf.matmul(act(tf.matmul(z, vs[0]) + vs[1]), vs[2]) + vs[3]

    out = []
    for step in range(4):
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            fake = net(gen, noise[step], tf.nn.leaky_relu)
            real_out = net(disc, real, tf.tanh)
            fake_out = net(disc, fake, tf.tanh)
            gen_loss = bce(tf.ones_like(fake_out), fake_out)
            disc_loss = bce(tf.ones_like(real_out), real_out) + bce(tf.zeros_like(fake_out), fake_out)
        g_grads = gen_tape.gradient(gen_loss, gen)
        d_grads = disc_tape.gradient(disc_loss, disc)
        g_opt.apply_gradients(zip(g_grads, gen))
        d_opt.apply_gradients(zip(d_grads, disc))
        out.append((gen_loss, disc_loss))
    return out, gen, disc


@parity(**TOL)
def test_gan_one_persistent_tape_and_two_tapes_give_the_same_training(tf):
    """The same GAN trained twice from the same start, once with one persistent tape (both
    gradients from it, the disc gradient also w.r.t. the generator: not None, it flows through
    ``fake``) and once with two tapes; the trajectories agree."""
    rs = np.random.RandomState(19)
    real = (rs.randn(8, 2) * 0.5).astype(np.float32)
    noise = rs.randn(4, 8, 2).astype(np.float32)

    def run(persistent):
        gen = [tf.Variable(init_array((2, 2), 20)), tf.Variable(np.zeros(2, np.float32))]
        disc = [tf.Variable(init_array((2, 1), 21)), tf.Variable(np.zeros(1, np.float32))]
        g_opt, d_opt = tf.keras.optimizers.legacy.SGD(0.1), tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
        hist = []
        for step in range(4):
            if persistent:
                with tf.GradientTape(persistent=True) as tape:
                    fake = tf.tanh(tf.matmul(noise[step], gen[0]) + gen[1])
                    d_fake = tf.matmul(fake, disc[0]) + disc[1]
                    d_real = tf.matmul(real, disc[0]) + disc[1]
                    g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
                    d_loss = tf.reduce_mean(tf.nn.softplus(-d_real)) + tf.reduce_mean(tf.nn.softplus(d_fake))
                g_grads, d_grads = tape.gradient(g_loss, gen), tape.gradient(d_loss, disc)
                cross = tape.gradient(d_loss, gen)
                del tape
            else:
                with tf.GradientTape() as gt:
                    fake = tf.tanh(tf.matmul(noise[step], gen[0]) + gen[1])
                    g_loss = tf.reduce_mean(tf.nn.softplus(-(tf.matmul(fake, disc[0]) + disc[1])))
                g_grads = gt.gradient(g_loss, gen)
                with tf.GradientTape() as dt:
                    d_fake = tf.matmul(fake, disc[0]) + disc[1]
                    d_real = tf.matmul(real, disc[0]) + disc[1]
                    d_loss = tf.reduce_mean(tf.nn.softplus(-d_real)) + tf.reduce_mean(tf.nn.softplus(d_fake))
                d_grads = dt.gradient(d_loss, disc)
                cross = None
            g_opt.apply_gradients(zip(g_grads, gen))
            d_opt.apply_gradients(zip(d_grads, disc))
            hist.append((g_loss, d_loss, None if cross is None else [c is None for c in cross]))
        return hist, [v.numpy() for v in gen + disc]

    (h1, w1), (h2, w2) = run(True), run(False)
    same = all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(w1, w2))
    return h1, h2, w1, same


# ---------------------------------------------------------------------------
# Accumulation, clipping, metrics and counters inside the step
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_python_list_accumulation_with_nones_then_global_norm_clip(tf):
    """Gradients summed in a Python list over three micro-batches (``acc = g if acc is None else
    acc + g``); one Variable is used only by some micro-batches (None there); the sums are
    clipped by ``clip_by_global_norm`` (Nones pass through) and applied by the new-style SGD."""
    x, y = regression_data(n=12, seed=22)
    vs = mlp_vars(tf, seed=23)
    aux = tf.Variable(init_array((3, 1), 24))
    allv = vs + [aux]
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for step in range(3):
        acc = [None] * len(allv)
        for mb in range(3):
            xb, yb = x[mb * 4:mb * 4 + 4], y[mb * 4:mb * 4 + 4]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((mlp(tf, vs, xb) - yb) ** 2)
                if (mb + step) % 2 == 1:
                    loss = loss + tf.reduce_mean(tf.matmul(xb, aux) ** 2)
            grads = tape.gradient(loss, allv)
            acc = [a if g is None else (g if a is None else a + g) for a, g in zip(acc, grads)]
            out.append(loss)
        clipped, norm = tf.clip_by_global_norm(acc, 0.5)
        out.append((norm, [c is None for c in clipped]))
        opt.apply_gradients([(g, v) for g, v in zip(clipped, allv) if g is not None])
    return out, allv


@parity(modes=True, **TOL)
def test_running_statistics_updated_inside_the_tape_read_after_the_next_update(tf):
    """An EMA of the loss (``ema.assign(0.9 * ema + 0.1 * loss)``), an int step counter
    (``assign_add``) and a Keras ``Mean`` all updated inside the tape; read after the following
    ``apply_gradients``; a ``reset_state`` halfway."""
    x, y = regression_data(n=8, seed=25)
    vs = mlp_vars(tf, seed=26)
    ema = tf.Variable(0.0, trainable=False)
    seen = tf.Variable(0, trainable=False)
    mean = tf.keras.metrics.Mean()
    opt = tf.keras.optimizers.legacy.RMSprop(0.05)
    out = []
    for step in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
            ema.assign(0.9 * ema + 0.1 * loss)
            seen.assign_add(1)
            mean.update_state(loss)
            watched = len(tape.watched_variables())
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append((loss, ema.numpy(), int(seen.numpy()), mean.result(), watched))
        if step == 2:
            mean.reset_state()
    return out, vs


@parity(modes=True, **TOL)
def test_compiled_probe_reads_adam_slots_and_iterations_between_eager_steps(tf):
    """Eager Adam steps; between them a ``tf.function`` probe reads the optimizer's ``m`` / ``v``
    slots, its ``iterations`` and the weights it is updating; the probe's trace is reused."""
    x, y = regression_data(n=8, seed=27)
    w = tf.Variable(init_array((3, 1), 28))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    opt.apply_gradients([(tf.zeros_like(w), w)])       # makes the slots
    traces = []

    @tf.function
    def probe():
        traces.append(1)
        m, v = opt.get_slot(w, "m"), opt.get_slot(w, "v")
        return tf.reduce_sum(m), tf.reduce_sum(v), tf.cast(opt.iterations, tf.int32), tf.reduce_sum(w * w)

    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        out.append((loss, probe()))
    return out, w, len(traces)


# ---------------------------------------------------------------------------
# Learning rates that read state at every step; an optimizer meeting a new Variable
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_callable_learning_rate_reads_python_state_at_each_step(tf):
    """A legacy optimizer with ``learning_rate=lambda: base[0] * scale`` (a Python list the loop
    edits, a Variable it assigns): the callable is evaluated at each ``apply_gradients``."""
    x, y = regression_data(n=8, seed=29)
    w = tf.Variable(init_array((3, 1), 30))
    base = [0.1]
    scale = tf.Variable(1.0, trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(learning_rate=lambda: base[0] * scale, momentum=0.5)
    out = []
    for step in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        base[0] *= 0.5 if step % 2 else 1.0
        scale.assign(1.0 + 0.25 * step)
        out.append((loss, w.numpy()))
    return out, w


@parity(modes=True, **TOL)
def test_warmup_schedule_subclass_reading_a_python_attribute_and_a_variable(tf):
    """A ``LearningRateSchedule`` subclass (linear warmup to a peak held in a Variable, then a
    floor held as a Python float attribute the loop lowers): eagerly the optimizer calls it with
    ``iterations`` at each step and sees both edits."""

    class Warmup(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self):
            self.peak = tf.Variable(0.2, trainable=False)
            self.floor = 0.05
            self.warm = 3.0

        def __call__(self, step):
            s = tf.cast(step, tf.float32)
            return tf.maximum(self.floor, self.peak * tf.minimum(1.0, (s + 1.0) / self.warm) / (1.0 + 0.1 * s))

        def get_config(self):
            return {}

    x, y = regression_data(n=8, seed=31)
    vs = mlp_vars(tf, seed=32)
    sched = Warmup()
    opt = tf.keras.optimizers.legacy.Adam(sched)
    out = []
    for step in range(7):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        if step == 2:
            sched.peak.assign(0.4)
        if step == 4:
            sched.floor = 0.3
        out.append((loss, sched(opt.iterations)))
    return out, vs


@parity(modes=True, **TOL)
def test_new_adam_with_weight_decay_and_a_user_schedule_gated_by_a_variable(tf):
    """The new-style ``tf.keras.optimizers.Adam(weight_decay=, clipnorm=)`` driven by a user
    schedule that multiplies a cosine of the step (it gets ``iterations`` itself) by a gate
    Variable the loop closes for two steps (a "pause" in training)."""

    class Gated(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self):
            self.gate = tf.Variable(1.0, trainable=False)

        def __call__(self, step):
            return self.gate * 0.05 * (1.0 + tf.cos(tf.cast(step, tf.float32) * 0.3)) / 2.0

        def get_config(self):
            return {}

    x, y = regression_data(n=8, seed=98)
    vs = mlp_vars(tf, seed=99)
    sched = Gated()
    opt = tf.keras.optimizers.Adam(sched, weight_decay=0.1, clipnorm=1.0)
    out = []
    for step in range(6):
        sched.gate.assign(0.0 if step in (2, 3) else 1.0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append((loss, [v.numpy() for v in vs[:1]]))
    return out, vs


@parity(modes=True, **TOL)
def test_second_phase_sets_a_new_schedule_on_the_same_optimizer(tf):
    """Two-phase training with one Adam: phase one under ``ExponentialDecay``, phase two after
    ``opt.learning_rate = PiecewiseConstantDecay(...)`` (keyed on the same ``iterations``), phase
    three at a constant rate; the slots carry over."""
    x, y = regression_data(n=8, seed=95)
    vs = mlp_vars(tf, seed=96)
    S = tf.keras.optimizers.schedules
    opt = tf.keras.optimizers.legacy.Adam(S.ExponentialDecay(0.05, decay_steps=2, decay_rate=0.5))
    out = []
    for step in range(8):
        if step == 3:
            opt.learning_rate = S.PiecewiseConstantDecay([5], [0.02, 0.005])
        if step == 6:
            opt.learning_rate = 0.001
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append(loss)
    return out, vs


@parity(modes=True, **TOL)
def test_a_new_variable_joins_the_optimizer_mid_training(tf):
    """Progressive growing: a second head Variable is created at step 3 and from then on trained
    by the same legacy Adam, whose bias correction uses the optimizer's global ``iterations``
    (already 3), not the new slot's age."""
    x, y = regression_data(n=8, seed=33)
    w = tf.Variable(init_array((3, 1), 34))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    extra = None
    out = []
    for step in range(6):
        if step == 3:
            extra = tf.Variable(np.zeros((3, 1), np.float32) + 0.1)
        vs = [w] if extra is None else [w, extra]
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w)
            if extra is not None:
                pred = pred + tf.tanh(tf.matmul(x, extra))
            loss = tf.reduce_mean((pred - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append((loss, int(opt.iterations.numpy())))
    return out, w, extra, opt.get_slot(extra, "m"), opt.get_slot(extra, "v")


@parity(modes=True, **TOL)
def test_optimizer_iterations_read_inside_the_loss_as_a_curriculum(tf):
    """A curriculum weight ``min(1, iterations / 4)`` read from the optimizer's ``iterations``
    inside the tape: each step's loss uses the count the previous update left."""
    x, y = regression_data(n=8, seed=35)
    vs = mlp_vars(tf, seed=36)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(6):
        with tf.GradientTape() as tape:
            lam = tf.minimum(1.0, tf.cast(opt.iterations, tf.float32) / 4.0)
            pred = mlp(tf, vs, x)
            loss = tf.reduce_mean((pred - y) ** 2) + lam * tf.reduce_mean(tf.abs(pred))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append((lam, loss))
    return out, vs


# ---------------------------------------------------------------------------
# Weight tying: one Variable read twice, dense and sparse
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_tied_input_and_output_embedding_gives_one_dense_gradient(tf):
    """A language-model head tied to its input embedding: ``gather`` (a sparse read) and
    ``matmul(h, emb, transpose_b=True)`` (a dense read) of one Variable; TF sums the two into one
    dense gradient, and the legacy Adam takes its dense rule."""
    rs = np.random.RandomState(37)
    ids = rs.randint(0, 7, size=(5, 3)).astype(np.int32)
    nxt = rs.randint(0, 7, size=(5,)).astype(np.int32)
    emb = tf.Variable(init_array((7, 4), 38))
    mix = tf.Variable(init_array((4, 4), 39))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.matmul(tf.reduce_mean(tf.gather(emb, ids), axis=1), mix))
            logits = tf.matmul(h, emb, transpose_b=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(nxt, logits))
        g_emb, g_mix = tape.gradient(loss, [emb, mix])
        out.append((loss, g_emb, isinstance(g_emb, tf.IndexedSlices)))
        opt.apply_gradients([(g_emb, emb), (g_mix, mix)])
    return out, emb, mix


@parity(**TOL)
def test_tied_autoencoder_uses_w_and_its_transpose(tf):
    """A tied-weight autoencoder: the encoder reads ``W``, the decoder ``tf.transpose(W)``; both
    reads add into ``W``'s gradient; SGD with Nesterov momentum."""
    rs = np.random.RandomState(40)
    x = rs.randn(10, 5).astype(np.float32)
    w = tf.Variable(init_array((5, 2), 41))
    b_enc, b_dec = tf.Variable(np.zeros(2, np.float32)), tf.Variable(np.zeros(5, np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9, nesterov=True)
    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            code = tf.nn.sigmoid(tf.matmul(x, w) + b_enc)
            rec = tf.matmul(code, tf.transpose(w)) + b_dec
            loss = tf.reduce_mean(tf.reduce_sum((rec - x) ** 2, axis=1))
        grads = tape.gradient(loss, [w, b_enc, b_dec])
        opt.apply_gradients(zip(grads, [w, b_enc, b_dec]))
        out.append((loss, grads[0]))
    return out, w, b_enc, b_dec


@parity(**TOL)
def test_embedding_looked_up_twice_gives_indexed_slices_with_repeated_rows(tf):
    """A two-tower retrieval model sharing one embedding table: two ``gather``s of it (overlapping
    ids) give one ``IndexedSlices`` holding both lookups' rows; the legacy Adagrad and Adam
    apply them sparsely (duplicate rows summed first)."""
    rs = np.random.RandomState(42)
    q_ids = rs.randint(0, 6, size=(4, 2)).astype(np.int32)
    d_ids = rs.randint(0, 6, size=(4, 2)).astype(np.int32)
    table = tf.Variable(init_array((6, 3), 43))
    table2 = tf.Variable(init_array((6, 3), 43))
    o1, o2 = tf.keras.optimizers.legacy.Adagrad(0.2), tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for _ in range(3):
        for t, o in ((table, o1), (table2, o2)):
            with tf.GradientTape() as tape:
                q = tf.reduce_sum(tf.gather(t, q_ids), axis=1)
                d = tf.reduce_sum(tf.gather(t, d_ids), axis=1)
                scores = tf.matmul(q, d, transpose_b=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(np.arange(4), scores))
            g = tape.gradient(loss, t)
            out.append((loss, isinstance(g, tf.IndexedSlices), tf.shape(g.indices), g))
            o.apply_gradients([(g, t)])
    return out, table, table2


# ---------------------------------------------------------------------------
# Custom gradients, forward mode and per-example gradients inside training
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_custom_gradient_layer_with_variables_called_twice_per_step(tf):
    """A ``tf.custom_gradient`` dense layer closing over its kernel (``grad_fn(dy, variables=)``
    returns the kernel's gradient, scaled by 0.5 as a gradient-damping trick), applied twice
    in a step (a weight-shared block): the kernel's gradient is the sum of both calls'."""
    x, y = regression_data(n=6, seed=44)
    k = tf.Variable(init_array((3, 3), 45))
    head = tf.Variable(init_array((3, 1), 46))

    @tf.custom_gradient
    def dense(h):
        out = tf.tanh(tf.matmul(h, k))

        def grad_fn(dy, variables=None):
            dz = dy * (1.0 - out ** 2)
            return tf.matmul(dz, k, transpose_b=True), [0.5 * tf.matmul(h, dz, transpose_a=True)]
        return out, grad_fn

    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(dense(dense(x)), head) - y) ** 2)
        gk, gh = tape.gradient(loss, [k, head])
        opt.apply_gradients([(gk, k), (gh, head)])
        out.append((loss, gk, gh))
    return out, k, head


@parity(modes=True, **TOL)
def test_custom_gradient_reads_python_state_when_the_gradient_runs(tf):
    """A gradient-reversal layer whose strength is a Python attribute the loop changes between
    the forward pass and ``tape.gradient``: TF runs ``grad_fn`` at gradient time, so the new
    strength applies (the forward saw the old one)."""
    x, y = regression_data(n=6, seed=47)
    feat = tf.Variable(init_array((3, 2), 48))
    dom = tf.Variable(init_array((2, 1), 49))
    task = tf.Variable(init_array((2, 1), 50))

    class Reverse:
        strength = 0.1

    @tf.custom_gradient
    def reverse(h):
        scale = Reverse.strength * 1.0
        return tf.identity(h), lambda dy: -Reverse.strength * dy + 0.0 * scale

    out = []
    for step in range(4):
        Reverse.strength = 0.1 * (step + 1)
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.matmul(x, feat))
            task_loss = tf.reduce_mean((tf.matmul(h, task) - y) ** 2)
            dom_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                tf.cast(tf.range(6) % 2, tf.float32)[:, None], tf.matmul(reverse(h), dom)))
            loss = task_loss + dom_loss
        Reverse.strength = 2.0 * Reverse.strength       # read by grad_fn, not by the forward
        grads = tape.gradient(loss, [feat, dom, task])
        for v, g in zip([feat, dom, task], grads):
            v.assign_sub(0.2 * g)
        out.append((loss, grads))
    return out, feat, dom, task


@parity(**TOL)
def test_jvp_penalty_by_forward_accumulator_inside_the_training_tape(tf):
    """A smoothness penalty ``|J v|^2`` (the network's directional derivative along a fixed
    input direction ``v``) by ``tf.autodiff.ForwardAccumulator`` inside the training tape; the
    tape differentiates through the forward-mode product; Adam updates."""
    x, y = regression_data(n=6, seed=51)
    direction = tf.constant(np.tile([[1.0, -0.5, 0.25]], (6, 1)).astype(np.float32))
    vs = mlp_vars(tf, seed=52)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            with tf.autodiff.ForwardAccumulator(xt, direction) as acc:
                pred = mlp(tf, vs, xt)
            jv = acc.jvp(pred)
            loss = tf.reduce_mean((pred - y) ** 2) + 0.1 * tf.reduce_mean(jv ** 2)
        grads = tape.gradient(loss, vs)
        opt.apply_gradients(zip(grads, vs))
        out.append((loss, jv, grads))
    return out, vs


@parity(**TOL)
def test_per_example_gradient_norms_by_vectorized_map_in_a_compiled_step(tf):
    """Per-example gradient norms by ``tf.vectorized_map`` over an inner tape inside a
    ``tf.function`` step; examples whose norm is above the median get half weight in the batch
    loss (a robust-training heuristic); SGD updates inside the step."""
    x, y = regression_data(n=6, seed=53)
    y[2] += 6.0
    w = tf.Variable(init_array((3, 1), 54))
    b = tf.Variable([0.0])

    def example_norm(e):
        xi, yi = e
        with tf.GradientTape() as t:
            li = tf.reduce_sum((tf.matmul(xi[None], w) + b - yi) ** 2)
        gw, gb = t.gradient(li, [w, b])
        return tf.sqrt(tf.reduce_sum(gw ** 2) + tf.reduce_sum(gb ** 2))

    @tf.function
    def step(xb, yb):
        norms = tf.vectorized_map(example_norm, (xb, yb))
        med = tf.sort(norms)[2]
        weights = tf.where(norms > med, 0.5, 1.0)
        with tf.GradientTape() as tape:
            per = tf.reduce_sum((tf.matmul(xb, w) + b - yb) ** 2, axis=1)
            loss = tf.reduce_sum(weights * per) / tf.reduce_sum(weights)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss, norms, weights

    out = [step(x, y) for _ in range(3)]
    return out, w, b


@parity(**TOL)
def test_jit_compiled_step_reads_a_variable_lr_and_freezes_a_python_global(tf):
    """A ``tf.function(jit_compile=True)`` step: a learning rate held in a Variable changes the
    next call; a Python global read in the body is frozen at trace time (TF's rule) until an
    argument's new shape retraces."""
    x, y = regression_data(n=8, seed=55)
    w = tf.Variable(init_array((3, 1), 56))
    lr = tf.Variable(0.1, trainable=False)
    cfg = {"l2": 0.0}

    @tf.function(jit_compile=True)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2) + cfg["l2"] * tf.reduce_sum(w ** 2)
        w.assign_sub(lr * tape.gradient(loss, w))
        return loss

    out = []
    for i in range(6):
        if i == 2:
            lr.assign(0.02)
            cfg["l2"] = 1.0         # not seen: the trace is reused
        n = 8 if i < 4 else 6       # a new batch size: a new trace, which reads l2 = 1.0
        out.append(step(x[:n], y[:n]))
    return out, w, step.experimental_get_tracing_count()


@parity(modes=True, **TOL)
def test_compiled_sgd_step_takes_the_variables_as_arguments(tf):
    """A generic ``tf.function`` SGD step that takes the model's Variables as arguments, called
    alternately for two models of the same shapes: each call updates the Variables it was
    given."""
    x, y = regression_data(n=8, seed=57)
    m1 = [tf.Variable(init_array((3, 1), 58)), tf.Variable([0.0])]
    m2 = [tf.Variable(init_array((3, 1), 59)), tf.Variable([0.5])]

    @tf.function
    def sgd_step(w, b, xb, yb, lr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        return loss

    out = []
    for i in range(3):
        out.append(sgd_step(m1[0], m1[1], x, y, tf.constant(0.1)))
        out.append(sgd_step(m2[0], m2[1], x[::-1].copy(), y, tf.constant(0.2)))
    return out, m1, m2


# ---------------------------------------------------------------------------
# Graphs and recurrences
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_graph_attention_with_segment_softmax_and_an_isolated_node(tf):
    """A graph-attention layer: edge scores, a softmax over each node's incoming edges by
    ``unsorted_segment_max`` (stabiliser, gathered back), ``exp`` and ``unsorted_segment_sum``;
    messages summed by ``unsorted_segment_sum``; node 5 has no incoming edge (its max is the
    dtype's lowest, its sum 0); two edges tie.  Trained by Adam on a node regression."""
    senders = np.array([0, 1, 2, 3, 4, 0, 2, 1, 3], np.int32)
    receivers = np.array([1, 0, 1, 2, 2, 3, 3, 4, 4], np.int32)
    rs = np.random.RandomState(60)
    feats = rs.randn(6, 3).astype(np.float32)
    feats[4] = feats[3]                       # edges 3->4 and 4->... tie in score
    target = rs.randn(6, 1).astype(np.float32)
    w = tf.Variable(init_array((3, 4), 61))
    a_src, a_dst = tf.Variable(init_array((4, 1), 62)), tf.Variable(init_array((4, 1), 63))
    out_w = tf.Variable(init_array((4, 1), 64))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.matmul(feats, w)
            e = tf.nn.leaky_relu(tf.gather(tf.matmul(h, a_src), senders) + tf.gather(tf.matmul(h, a_dst), receivers),
                                 alpha=0.2)[:, 0]
            emax = tf.math.unsorted_segment_max(e, receivers, 6)
            ex = tf.exp(e - tf.gather(emax, receivers))
            den = tf.math.unsorted_segment_sum(ex, receivers, 6)
            alpha = ex / tf.gather(den, receivers)
            msg = tf.math.unsorted_segment_sum(alpha[:, None] * tf.gather(h, senders), receivers, 6)
            pred = tf.matmul(tf.nn.elu(msg + h), out_w)
            loss = tf.reduce_mean((pred - target) ** 2)
        vs = [w, a_src, a_dst, out_w]
        grads = tape.gradient(loss, vs)
        opt.apply_gradients(zip(grads, vs))
        out.append((loss, alpha, den, grads))
    return out, vs


@parity(**TOL)
def test_while_loop_rnn_eagerly_with_a_tensor_array_and_the_initial_state_watched(tf):
    """An Elman RNN written with ``tf.while_loop`` and a ``TensorArray`` of outputs, run eagerly
    under a tape that also watches the initial state ``h0``: gradients for the weights and for
    ``h0``; SGD on the weights, ``h0`` learned too."""
    rs = np.random.RandomState(65)
    xs = rs.randn(5, 2, 3).astype(np.float32)            # time, batch, features
    ys = rs.randn(2, 1).astype(np.float32)
    wx, wh = tf.Variable(init_array((3, 4), 66)), tf.Variable(init_array((4, 4), 67, scale=0.3))
    wo = tf.Variable(init_array((4, 1), 68))
    h0 = tf.constant(np.zeros((2, 4), np.float32))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch(h0)
            ta = tf.TensorArray(tf.float32, size=5)

            def body(t, h, ta):
                h = tf.tanh(tf.matmul(xs[t], wx) + tf.matmul(h, wh))
                return t + 1, h, ta.write(t, h)

            _, h_last, ta = tf.while_loop(lambda t, h, ta: t < 5, body, (tf.constant(0), h0, ta))
            seq = ta.stack()
            loss = tf.reduce_mean((tf.matmul(h_last, wo) - ys) ** 2) + 0.01 * tf.reduce_mean(seq ** 2)
        g = tape.gradient(loss, [wx, wh, wo, h0])
        for v, gi in zip([wx, wh, wo], g[:3]):
            v.assign_sub(0.2 * gi)
        h0 = h0 - 0.2 * g[3]
        out.append((loss, g))
    return out, wx, wh, wo, h0


# ---------------------------------------------------------------------------
# Host functions in pipelines and steps; seeded generators
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_dataset_map_with_a_numpy_function_augmentation_feeds_training(tf):
    """A ``map`` whose augmentation is NumPy code through ``tf.numpy_function`` (a flip and a
    shift chosen from the example's index), with ``ensure_shape`` restoring the static shape,
    batched into an eager training loop."""
    x, y = regression_data(n=8, seed=69)

    def augment(i, xi):
        out = xi[::-1].copy() if i % 2 else xi + 0.1 * i
        return out.astype(np.float32)

    def prep(i, xi, yi):
        xa = tf.numpy_function(augment, [i, xi], tf.float32)
        return tf.ensure_shape(xa, [3]), yi

    ds = (tf.data.Dataset.from_tensor_slices((np.arange(8, dtype=np.int64), x, y))
          .map(prep).batch(4))
    w = tf.Variable(init_array((3, 1), 70))
    out = []
    for epoch in range(2):
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            out.append((loss, xb))
    return out, w


@xfail_on_tapejax("tapejax calls a numpy_function's func once more at trace time, on zeros, to learn "
                  "its result shapes (documented in compile/host.py); TF calls it only when the "
                  "step runs, so a func with side effects (a counter, a NumPy RNG) sees one "
                  "extra call per trace")
@parity(**TOL)
def test_numpy_function_in_a_compiled_step_runs_once_per_step(tf):
    """A compiled step that draws its noise from a NumPy RNG through ``tf.numpy_function`` (a
    common way to keep NumPy's generator): TF calls the function once per step, so the noise
    sequence is the RNG's first draws."""
    x, y = regression_data(n=6, seed=71)
    rng = np.random.RandomState(72)
    calls = []

    def noise(shape):
        calls.append(1)
        return rng.randn(*shape).astype(np.float32) * 0.1

    w = tf.Variable(init_array((3, 1), 73))

    @tf.function
    def step(xb, yb):
        eps = tf.numpy_function(noise, [tf.shape(xb)], tf.float32)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb + tf.reshape(eps, [6, 3]), w) - yb) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    out = [step(x, y) for _ in range(3)]
    return out, w, len(calls)


@parity(**TOL)
def test_generator_from_seed_dropout_masks_reproduce_after_reset(tf):
    """Dropout masks drawn from ``tf.random.Generator.from_seed`` inside the step; after
    ``reset_from_seed`` a second training from the same start repeats the first exactly (the
    draws themselves are the generator's: compared only with each other)."""
    x, y = regression_data(n=8, seed=74)
    gen = tf.random.Generator.from_seed(1234)

    def train():
        vs = mlp_vars(tf, seed=75)
        losses = []
        for _ in range(4):
            keep = tf.cast(gen.uniform([8, 4]) > 0.3, tf.float32) / 0.7
            with tf.GradientTape() as tape:
                h = tf.tanh(tf.matmul(x, vs[0]) + vs[1]) * keep
                loss = tf.reduce_mean((tf.matmul(h, vs[2]) + vs[3] - y) ** 2)
            for v, g in zip(vs, tape.gradient(loss, vs)):
                v.assign_sub(0.1 * g)
            losses.append(loss.numpy())
        return losses, [v.numpy() for v in vs]

    l1, w1 = train()
    gen.reset_from_seed(1234)
    l2, w2 = train()
    l3, _ = train()                     # the stream moved on: other masks
    same = l1 == l2 and all(np.array_equal(a, b) for a, b in zip(w1, w2))
    # (the state's layout differs by design: TF's Philox [3] int64, tapejax's JAX key uint32[2])
    return same, l1 != l3, gen.state.shape.rank


# ---------------------------------------------------------------------------
# Losses: CTC, log-determinants, soft labels, Keras reductions
# ---------------------------------------------------------------------------

@parity(rtol=1e-4, atol=1e-5)
def test_ctc_loss_trains_a_tiny_frame_classifier(tf):
    """``tf.nn.ctc_loss`` with dense labels, ``label_length`` / ``logit_length`` (one sequence
    shorter), batch-major logits and ``blank_index=-1``, over a per-frame linear classifier;
    SGD steps, then a greedy decode of the trained logits."""
    rs = np.random.RandomState(76)
    frames = rs.randn(2, 6, 3).astype(np.float32)
    labels = np.array([[1, 2, 1], [2, 0, 0]], np.int32)
    label_len = np.array([3, 1], np.int32)
    logit_len = np.array([6, 4], np.int32)
    w = tf.Variable(init_array((3, 4), 77))
    b = tf.Variable(np.zeros(4, np.float32))
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            logits = tf.einsum("btf,fc->btc", frames, w) + b
            per = tf.nn.ctc_loss(labels, logits, label_len, logit_len, logits_time_major=False, blank_index=-1)
            loss = tf.reduce_mean(per)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        out.append((per, gw, gb))
    logits = tf.einsum("btf,fc->btc", frames, w) + b
    decoded, neg = tf.nn.ctc_greedy_decoder(tf.transpose(logits, [1, 0, 2]), logit_len, blank_index=-1)
    return out, tf.cast(tf.sparse.to_dense(decoded[0]), tf.int32), neg   # (int64 in TF: int32 without x64)


@parity(rtol=1e-4, atol=1e-5)
def test_affine_flow_trained_by_maximum_likelihood_with_slogdet(tf):
    """A normalising flow ``z = x W + b`` with a full matrix: the log-likelihood is the standard
    normal's of ``z`` plus ``log|det W|`` from ``tf.linalg.slogdet``; Adam maximises it.  Also
    ``tf.linalg.logdet`` of ``W Wᵀ + I`` (Cholesky-based) as a logged quantity with its
    gradient."""
    rs = np.random.RandomState(78)
    data = (rs.randn(32, 2) @ np.array([[1.5, 0.3], [0.0, 0.5]]) + [1.0, -2.0]).astype(np.float32)
    w = tf.Variable(np.array([[1.0, 0.2], [-0.1, 0.8]], np.float32))
    b = tf.Variable(np.zeros(2, np.float32))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            z = tf.matmul(data, w) + b
            sign, logabs = tf.linalg.slogdet(w)
            nll = -tf.reduce_mean(-0.5 * tf.reduce_sum(z ** 2, axis=1) - np.log(2 * np.pi)) - logabs
            spd = tf.linalg.logdet(tf.matmul(w, w, transpose_b=True) + tf.eye(2))
        grads = tape.gradient(nll, [w, b])
        g_spd = tape.gradient(spd, w)
        del tape
        opt.apply_gradients(zip(grads, [w, b]))
        out.append((nll, sign, logabs, spd, grads, g_spd))
    return out, w, b


@parity(**TOL)
def test_soft_label_cross_entropy_passes_gradient_to_trainable_labels(tf):
    """Co-distillation where the *labels* are trainable too: ``softmax_cross_entropy_with_logits``
    and ``sigmoid_cross_entropy_with_logits`` both differentiate w.r.t. ``labels`` (TF's
    kernels give that gradient); a teacher's logits Variable moves toward the student's."""
    x, _ = regression_data(n=6, seed=79)
    student = tf.Variable(init_array((3, 4), 80))
    teacher = tf.Variable(init_array((6, 4), 81))
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, student)
            soft = tf.nn.softmax(teacher)
            ce = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=soft, logits=logits))
            bce = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.sigmoid(teacher), logits=logits))
            loss = ce + 0.5 * bce
        gs, gt = tape.gradient(loss, [student, teacher])
        student.assign_sub(0.3 * gs)
        teacher.assign_sub(0.3 * gt)
        out.append((loss, gs, gt))
    return out, student, teacher


@parity(**KTOL)
def test_keras_losses_reduction_modes_and_sample_weights(tf):
    """Keras loss objects with ``reduction='none'`` / ``'sum'`` / ``'sum_over_batch_size'`` and
    per-example ``sample_weight`` (some zero), for MSE, Huber, sparse categorical (from logits)
    and binary cross-entropy (from logits, with ``label_smoothing``); the values and the
    gradients w.r.t. the predictions."""
    rs = np.random.RandomState(82)
    pred = rs.randn(5, 3).astype(np.float32)
    y_reg = rs.randn(5, 3).astype(np.float32)
    y_cls = rs.randint(0, 3, 5).astype(np.int32)
    y_bin = (rs.rand(5, 3) > 0.5).astype(np.float32)
    sw = np.array([1.0, 0.0, 2.0, 0.5, 0.0], np.float32)
    p = tf.Variable(pred)
    out = {}
    for red in ("none", "sum", "sum_over_batch_size"):
        losses = {
            "mse": (tf.keras.losses.MeanSquaredError(reduction=red), y_reg),
            "huber": (tf.keras.losses.Huber(delta=0.5, reduction=red), y_reg),
            "scce": (tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=red), y_cls),
            "bce": (tf.keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.2, reduction=red), y_bin),
        }
        for name, (fn, target) in losses.items():
            with tf.GradientTape() as tape:
                val = fn(target, p, sample_weight=sw)
                total = tf.reduce_sum(val)
            out[f"{name}/{red}"] = (val, tape.gradient(total, p))
    return out


@parity(**KTOL)
def test_label_smoothed_crossentropy_on_probabilities_clips_at_epsilon(tf):
    """``CategoricalCrossentropy(label_smoothing=0.1)`` on *probabilities* (``from_logits=False``):
    Keras clips them to ``[eps, 1 - eps]``, so a saturated softmax (an exact 0 and 1) gives a
    finite loss and no gradient through the clipped entries; trained a few steps."""
    x = np.array([[30.0, -30.0, 0.0], [0.5, 0.2, -0.1], [0.0, 0.0, 40.0]], np.float32)
    y = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]], np.float32)
    w = tf.Variable(np.eye(3, dtype=np.float32))
    cce = tf.keras.losses.CategoricalCrossentropy(label_smoothing=0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            probs = tf.nn.softmax(tf.matmul(x, w))
            loss = cce(y, probs)
        g = tape.gradient(loss, w)
        w.assign_sub(0.5 * g)
        out.append((loss, g))
    return out, w


# ---------------------------------------------------------------------------
# Keras models in custom loops; loss scaling
# ---------------------------------------------------------------------------

def _q_model(tf, seed):
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(6, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    rs = np.random.RandomState(seed)
    model.set_weights([np.asarray(rs.randn(*w.shape) * 0.5, np.float32) for w in model.weights])
    return model


@parity(**KTOL)
def test_keras_q_network_with_a_target_copied_by_set_weights_every_n_steps(tf):
    """DQN with Keras models: the target network is a second model whose weights are copied by
    ``target.set_weights(online.get_weights())`` every third step; TD targets from
    ``target(s2)`` with ``tf.stop_gradient``; Huber loss; legacy Adam."""
    rs = np.random.RandomState(83)
    s, s2 = rs.randn(12, 3).astype(np.float32), rs.randn(12, 3).astype(np.float32)
    a = rs.randint(0, 2, 12).astype(np.int32)
    r = rs.randn(12).astype(np.float32)
    online, target = _q_model(tf, 84), _q_model(tf, 85)
    huber = tf.keras.losses.Huber()
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    out = []
    for step in range(5):
        idx = [(step * 5 + k) % 12 for k in range(4)]
        with tf.GradientTape() as tape:
            y = tf.stop_gradient(r[idx] + 0.9 * tf.reduce_max(target(s2[idx]), axis=1))
            q = tf.reduce_sum(online(s[idx]) * tf.one_hot(a[idx], 2), axis=1)
            loss = huber(y, q)
        grads = tape.gradient(loss, online.trainable_variables)
        opt.apply_gradients(zip(grads, online.trainable_variables))
        if step % 3 == 2:
            target.set_weights(online.get_weights())
        out.append((loss, len(grads)))
    return out, online.get_weights(), target.get_weights()


@parity(**KTOL)
def test_siamese_keras_encoder_called_twice_in_one_tape(tf):
    """A Siamese network: one Keras encoder called on both inputs of a pair inside one tape; a
    contrastive loss on the distance; the encoder's gradient sums both calls'; SGD."""
    rs = np.random.RandomState(86)
    xa, xb = rs.randn(6, 4).astype(np.float32), rs.randn(6, 4).astype(np.float32)
    same = np.array([1, 0, 1, 0, 0, 1], np.float32)
    enc = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(5, activation="tanh"),
                               tf.keras.layers.Dense(2)])
    enc.set_weights([np.asarray(rs.randn(*w.shape) * 0.5, np.float32) for w in enc.weights])
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            za, zb = enc(xa), enc(xb)
            d = tf.sqrt(tf.reduce_sum((za - zb) ** 2, axis=1) + 1e-6)
            loss = tf.reduce_mean(same * d ** 2 + (1.0 - same) * tf.nn.relu(1.0 - d) ** 2)
        grads = tape.gradient(loss, enc.trainable_variables)
        opt.apply_gradients(zip(grads, enc.trainable_variables))
        out.append((loss, grads))
    return out, enc.get_weights()


@parity(modes=True, **TOL)
def test_loss_scale_optimizer_skips_an_overflowing_step_and_halves_the_scale(tf):
    """The mixed-precision custom loop: ``LossScaleOptimizer`` around a legacy SGD,
    ``get_scaled_loss`` inside the tape, ``get_unscaled_gradients`` after it; a step whose loss
    overflows is skipped and the dynamic scale halves."""
    x, y = regression_data(n=6, seed=87)
    w = tf.Variable(init_array((3, 1), 88))
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.1))
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2) * (1e36 if step == 1 else 1.0)
            scaled = opt.get_scaled_loss(loss)
        grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w]))
        opt.apply_gradients(zip(grads, [w]))
        out.append((loss, w.numpy(), float(opt.loss_scale)))
    return out, w


@parity(modes=True, **TOL)
def test_manual_warmup_mixing_python_floats_and_a_decay_variable(tf):
    """A hand-written update ``v -= lr * decay * g``: ``lr`` a Python float recomputed each step
    (linear warmup), ``decay`` a Variable the loop halves every other step; momentum kept in
    Variables by hand."""
    x, y = regression_data(n=8, seed=89)
    vs = mlp_vars(tf, seed=90)
    mom = [tf.Variable(tf.zeros_like(v)) for v in vs]
    decay = tf.Variable(1.0, trainable=False)
    out = []
    for step in range(6):
        lr = 0.2 * min(1.0, (step + 1) / 3.0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        for v, m, g in zip(vs, mom, tape.gradient(loss, vs)):
            m.assign(0.8 * m + g)
            v.assign_sub(lr * decay * m)
        if step % 2 == 1:
            decay.assign(decay * 0.5)
        out.append((loss, lr))
    return out, vs, mom


@parity(**TOL)
def test_growing_buffer_variable_of_unknown_length_collects_inputs_in_a_compiled_step(tf):
    """A Variable declared with ``shape=tf.TensorShape([None, 2])`` collects every batch a
    compiled step sees (``buf.assign(tf.concat([buf, x], 0))``); the step trains.  (TF traces the
    step once, its graph having an unknown dimension; tapejax traces it again at each new buffer
    shape, XLA's shapes being static: ``tests/test_function.py`` counts that.)"""
    buf = tf.Variable(tf.zeros([0, 2]), shape=tf.TensorShape([None, 2]), trainable=False)
    w = tf.Variable([[1.0], [2.0]])

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
        w.assign_sub(0.1 * t.gradient(loss, w))
        buf.assign(tf.concat([buf, x], 0))
        return loss, tf.shape(buf)

    out = [step(tf.constant([[1.0 * i, 1.0]])) for i in range(3)]
    return out, buf, buf.shape.as_list()


@xfail_on_tapejax("a dataset function over strings runs eagerly per element in tapejax (no string "
                  "tensors to trace; tapejax/data/hostfn.py), so it reads Python state when each "
                  "element is made; TF traces it once at map() and keeps the values read then")
@parity(**TOL)
def test_csv_line_parser_reads_a_python_setting_once_at_map(tf):
    """A text pipeline: CSV lines parsed by ``tf.strings.split`` / ``to_number`` in a ``map``
    that scales by a Python setting; the loop changes the setting for the second epoch, which TF
    does not see (the function was traced when ``map`` was called)."""
    lines = [b"1.0,2.0,0.5", b"-1.0,0.5,1.5", b"0.25,-2.0,0.0", b"2.0,1.0,-1.0"]
    config = {"scale": 1.0}

    def parse(line):
        vals = tf.strings.to_number(tf.strings.split(line, ","))
        return vals[:2] * config["scale"], vals[2:]

    ds = tf.data.Dataset.from_tensor_slices(lines).map(parse).batch(2)
    w = tf.Variable(init_array((2, 1), 97))
    out = []
    for epoch in range(2):
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            out.append((loss, xb))
        config["scale"] = 10.0
    return out, w
