"""Round twelve (b) of realistic user programs, each run under real TensorFlow 2.21 and under tapejax:
what ``tf.function`` and the tape do together in training code. Steps under an ``input_signature``
or ``reduce_retracing`` called with several batch sizes, their concrete functions, Python arguments
that retrace (trace counts kept in Python counters, TF's counts being the spec); ``tf.recompute_grad``
blocks and ``tf.custom_gradient`` ops that take variables (``grad_fn(dy, variables=None)``), a
gradient-reversal layer and a per-row gradient clip; per-example gradients for DP-SGD by
``tf.map_fn`` with a tape inside and by ``tape.jacobian``, clipped, noised from a seeded NumPy draw
and averaged; loops in compiled steps (an unrolled RNN over ``tf.range``, Newton iterations with
nested tapes under ``maximum_iterations``, a fixed-point solve differentiated through its last step).
The strategies running a train step, Variables in a tape at their edges and the tape's options are
in ``test_user_programs12b_state.py``. Data is drawn with NumPy and fed in.
"""
import numpy as np

from .harness import init_array, mlp, mlp_vars, parity, raises

TOL = dict(rtol=2e-5, atol=2e-6)


def _reg(n, d=3, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = (x @ rs.randn(d, 1) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


# ---------------------------------------------------------------------------
# Tracing: signatures, reduce_retracing, Python arguments, concrete functions
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_signature_train_step_over_three_batch_sizes_then_its_concrete_function(tf):
    """A linear-regression step under ``input_signature=[TensorSpec([None, 3]), TensorSpec([None, 1])]``
    trains on batches of 5, 3 and 8 rows (one trace), then ``get_concrete_function()`` (no new trace)
    is called on a batch of 2 and trains once more; the concrete function's output is the loss."""
    traces = []
    w = tf.Variable(init_array((3, 1), 1))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)])
    def step(x, y):
        traces.append(x.shape.as_list())
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss

    x, y = _reg(18, seed=2)
    losses = [step(x[:5], y[:5]), step(x[5:8], y[5:8]), step(x[8:16], y[8:16])]
    cf = step.get_concrete_function()
    losses.append(cf(tf.constant(x[16:]), tf.constant(y[16:])))
    return losses, traces, w.numpy(), b.numpy(), int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_reduce_retracing_step_with_a_python_training_flag(tf):
    """A dropout-free MLP step with ``reduce_retracing=True`` and a Python ``training`` flag that adds
    an L2 term: batches of 4, 6, 2 with training=True, then 4 and 6 with training=False; the trace
    count and the shapes seen at each trace are TF's (one relaxed to ``None`` after the second size)."""
    traces = []
    vs = mlp_vars(tf, seed=3)

    @tf.function(reduce_retracing=True)
    def loss_fn(x, y, training):
        traces.append((x.shape.as_list(), training))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
            if training:
                loss += 0.01 * tf.add_n([tf.nn.l2_loss(v) for v in vs])
        return loss, tape.gradient(loss, vs)

    x, y = _reg(6, seed=4)
    out = []
    for n, training in [(4, True), (6, True), (2, True), (4, False), (6, False)]:
        loss, grads = loss_fn(x[:n], y[:n], training)
        out.append((loss, grads[0]))
    return out, traces


@parity(modes=True, **TOL)
def test_python_float_learning_rate_retraces_per_value_but_a_tensor_rate_does_not(tf):
    """A hand-written SGD step taking the learning rate as an argument: a Python float retraces for
    every new value (0.1, 0.05, 0.1 again reuses), a ``tf.constant`` rate traces once for all values."""
    py_traces, t_traces = [], []
    w = tf.Variable(init_array((3, 1), 5))
    x, y = _reg(8, seed=6)

    def body(lr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        w.assign_sub(lr * tape.gradient(loss, w))
        return loss

    @tf.function
    def py_step(lr):
        py_traces.append(lr)
        return body(lr)

    @tf.function
    def t_step(lr):
        t_traces.append(1)
        return body(lr)

    a = [py_step(lr) for lr in (0.1, 0.05, 0.1, 0.02)]
    w1 = w.numpy()
    b = [t_step(tf.constant(lr)) for lr in (0.1, 0.05, 0.1, 0.02)]
    return a, b, w1, w.numpy(), py_traces, len(t_traces)


@parity(**TOL)
def test_concrete_function_rejects_a_batch_of_the_wrong_width(tf):
    """``get_concrete_function(TensorSpec([None, 3]))`` of a loss-and-gradient function accepts any
    batch size of width 3; a width-4 batch is refused with TF's error class, and the Python function
    still retraces for it."""
    traces = []
    w = tf.Variable(init_array((3, 1), 7))

    @tf.function
    def grad_fn(x):
        traces.append(x.shape.as_list())
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.tanh(tf.matmul(x, w)))
        return loss, tape.gradient(loss, w)

    cf = grad_fn.get_concrete_function(tf.TensorSpec([None, 3], tf.float32))
    x = init_array((5, 3), 8)
    good = cf(tf.constant(x[:2]))
    bad = raises(cf, tf.constant(init_array((2, 4), 9)))
    again = grad_fn(tf.constant(x))
    return good, bad, again, traces


# ---------------------------------------------------------------------------
# recompute_grad and custom gradients with variables
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_recompute_grad_residual_blocks_with_closure_variables_eagerly(tf):
    """Two residual blocks ``x + tanh(x @ W + b)`` wrapped in ``tf.recompute_grad`` (their Variables
    are closed over, so the gradient reaches them through ``variables``); an eager tape takes the
    gradient for the input and all four Variables and SGD applies it twice; the numbers equal the
    blocks run without recompute."""
    def make(seed):
        w = tf.Variable(init_array((4, 4), seed, 0.3))
        b = tf.Variable(np.full(4, 0.1, np.float32))

        def block(x):
            return x + tf.tanh(tf.matmul(x, w) + b)
        return block, [w, b]

    blocks = [make(11), make(12)]
    variables = [v for _, vs in blocks for v in vs]
    rblocks = [tf.recompute_grad(f) for f, _ in blocks]
    x = tf.constant(init_array((3, 4), 13))
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(x)
            h = x
            for f in rblocks:
                h = f(h)
            loss = tf.reduce_sum(h ** 2)
        gx, *gv = tape.gradient(loss, [x] + variables)
        with tf.GradientTape() as plain:
            h2 = x
            for f, _ in blocks:
                h2 = f(h2)
            loss2 = tf.reduce_sum(h2 ** 2)
        gv2 = plain.gradient(loss2, variables)
        for v, g in zip(variables, gv):
            v.assign_sub(0.01 * g)
        out.append((loss, gx, gv, [a - c for a, c in zip(gv, gv2)]))
    return out


@parity(modes=True, **TOL)
def test_custom_gradient_dense_with_variables_scales_their_gradient_in_a_compiled_step(tf):
    """A dense op written with ``tf.custom_gradient`` over the Variables it reads: ``grad_fn(dy,
    variables=None)`` returns the input gradient and the variables' gradients halved (a per-layer
    learning-rate multiplier); a compiled step trains three times with Momentum."""
    w = tf.Variable(init_array((3, 2), 14))
    b = tf.Variable(np.zeros(2, np.float32))
    head = tf.Variable(init_array((2, 1), 15))
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)

    @tf.custom_gradient
    def slow_dense(x):
        y = tf.matmul(x, w) + b

        def grad_fn(dy, variables=None):
            dx = tf.matmul(dy, w, transpose_b=True)
            grads = {id(w): 0.5 * tf.matmul(x, dy, transpose_a=True), id(b): 0.5 * tf.reduce_sum(dy, 0)}
            return dx, [grads[id(v)] for v in variables]
        return y, grad_fn

    x, y = _reg(6, seed=16)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            tape.watch(xb)
            pred = tf.matmul(tf.nn.relu(slow_dense(xb)), head)
            loss = tf.reduce_mean(tf.square(pred - yb))
        gx, *grads = tape.gradient(loss, [xb, w, b, head])
        opt.apply_gradients(zip(grads, [w, b, head]))
        return loss, gx, grads

    outs = [step(tf.constant(x), tf.constant(y)) for _ in range(3)]
    return outs, w.numpy(), b.numpy(), head.numpy()


@parity(modes=True, **TOL)
def test_domain_adversarial_training_with_a_gradient_reversal_layer(tf):
    """DANN: a shared feature extractor, a label head trained on the source batch and a domain head
    behind a gradient-reversal ``tf.custom_gradient`` (identity forward, ``-lambda * dy`` backward,
    lambda a closure constant); one compiled step, one tape, one Adam over all Variables."""
    feat = [tf.Variable(init_array((3, 4), 17)), tf.Variable(np.zeros(4, np.float32))]
    label_head = tf.Variable(init_array((4, 1), 18))
    dom_head = tf.Variable(init_array((4, 1), 19))
    variables = feat + [label_head, dom_head]
    opt = tf.keras.optimizers.Adam(0.02)
    lam = 0.3

    @tf.custom_gradient
    def reverse(x):
        return tf.identity(x), lambda dy: -lam * dy

    xs, ys = _reg(6, seed=20)
    xt = np.random.RandomState(21).randn(6, 3).astype(np.float32) + 1.0
    dom = np.array([[0.0]] * 6 + [[1.0]] * 6, np.float32)

    @tf.function
    def step(xs, ys, xt):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(tf.concat([xs, xt], 0), feat[0]) + feat[1])
            task = tf.reduce_mean(tf.square(tf.matmul(h[:6], label_head) - ys))
            d_logits = tf.matmul(reverse(h), dom_head)
            d_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=dom, logits=d_logits))
            loss = task + d_loss
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return task, d_loss, grads[0]

    outs = [step(xs, ys, xt) for _ in range(3)]
    return outs, [v.numpy() for v in variables]


@parity(modes=True, **TOL)
def test_per_row_gradient_norm_clip_op_in_front_of_the_loss(tf):
    """A ``clip_rows`` op made by a factory: identity forward, backward clips each row of ``dy`` to
    L2 norm ``max_norm`` (a Python float bound at construction); a compiled step uses it on the
    logits of a softmax classifier whose large targets make some rows' gradients exceed the bound."""
    def clip_rows_op(max_norm):
        @tf.custom_gradient
        def clip_rows(x):
            def grad(dy):
                norms = tf.norm(dy, axis=1, keepdims=True)
                return dy * tf.minimum(1.0, max_norm / tf.maximum(norms, 1e-12))
            return tf.identity(x), grad
        return clip_rows

    clip = clip_rows_op(0.05)
    w = tf.Variable(init_array((3, 4), 22))
    rs = np.random.RandomState(23)
    x = (rs.randn(8, 3) * np.array([[0.1], [3.0]] * 4)).astype(np.float32)
    labels = rs.randint(0, 4, 8).astype(np.int32)

    @tf.function
    def step(x, labels):
        with tf.GradientTape() as tape:
            logits = clip(tf.matmul(x, w))
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        g = tape.gradient(loss, w)
        w.assign_sub(0.5 * g)
        return loss, g

    return [step(x, labels) for _ in range(3)], w.numpy()


# ---------------------------------------------------------------------------
# Per-example gradients for DP-SGD
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_dp_sgd_by_map_fn_with_a_tape_per_example_in_a_compiled_step(tf):
    """DP-SGD with ``tf.map_fn``: inside a compiled step each example's loss gradient for the MLP's
    Variables is taken by its own tape within the mapped function (``fn_output_signature`` lists
    the four gradient specs), each is clipped to global norm 1, summed, noised with a seeded NumPy
    draw passed in, averaged and applied by SGD; three steps."""
    vs = mlp_vars(tf, seed=24)
    opt = tf.keras.optimizers.SGD(0.2)
    x, y = _reg(6, seed=25)
    rs = np.random.RandomState(26)
    noises = [[(rs.randn(*v.shape) * 0.05).astype(np.float32) for v in vs] for _ in range(3)]
    spec = [tf.TensorSpec(v.shape, tf.float32) for v in vs]

    def example_grads(ex):
        xi, yi = ex
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(mlp(tf, vs, xi[None]) - yi))
        g = tape.gradient(loss, vs)
        g, _ = tf.clip_by_global_norm(g, 1.0)
        return g

    @tf.function
    def step(x, y, noise):
        per_ex = tf.map_fn(example_grads, (x, y), fn_output_signature=spec)
        grads = [(tf.reduce_sum(g, 0) + n) / 6.0 for g, n in zip(per_ex, noise)]
        opt.apply_gradients(zip(grads, vs))
        return tf.linalg.global_norm([g[0] for g in per_ex]), grads[2]

    outs = [step(x, y, n) for n in noises]
    return outs, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_dp_sgd_by_tape_jacobian_of_per_example_losses(tf):
    """Per-example gradients of a logistic regression as ``tape.jacobian(per_example_loss, [w, b])``
    (rows: examples), each example's gradient clipped to L2 norm 0.5 over (w, b) together, a seeded
    NumPy noise added to the sum and the average applied by hand; two eager steps."""
    rs = np.random.RandomState(27)
    x = rs.randn(5, 3).astype(np.float32)
    labels = (rs.rand(5, 1) > 0.5).astype(np.float32)
    w = tf.Variable(init_array((3, 1), 28))
    b = tf.Variable([0.2])
    out = []
    for step in range(2):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w) + b
            per_ex = tf.reshape(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits), [-1])
        jw, jb = tape.jacobian(per_ex, [w, b])
        flat = tf.concat([tf.reshape(jw, [5, -1]), tf.reshape(jb, [5, -1])], axis=1)
        norms = tf.norm(flat, axis=1, keepdims=True)
        clipped = flat * tf.minimum(1.0, 0.5 / norms)
        noise = (np.random.RandomState(100 + step).randn(4) * 0.1).astype(np.float32)
        g = (tf.reduce_sum(clipped, 0) + noise) / 5.0
        w.assign_sub(0.5 * tf.reshape(g[:3], [3, 1]))
        b.assign_sub(0.5 * g[3:])
        out.append((per_ex, jw.shape.as_list(), norms, g))
    return out, w.numpy(), b.numpy()


# ---------------------------------------------------------------------------
# Loops inside compiled steps
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_unrolled_rnn_over_tf_range_with_a_tensor_array_in_a_compiled_step(tf):
    """An Elman RNN unrolled by a Python ``for`` over ``tf.range(T)`` inside a compiled step
    (AutoGraph makes it a loop), its hidden states written to a ``tf.TensorArray`` and a linear
    readout trained on every step's output; the tape is inside the function; three Adam steps."""
    wx = tf.Variable(init_array((2, 5), 29))
    wh = tf.Variable(init_array((5, 5), 30, 0.3))
    wo = tf.Variable(init_array((5, 1), 31))
    variables = [wx, wh, wo]
    opt = tf.keras.optimizers.Adam(0.03)
    rs = np.random.RandomState(32)
    seq = rs.randn(6, 4, 2).astype(np.float32)       # time-major: T=6, batch 4
    target = np.cumsum(seq[..., :1], axis=0).astype(np.float32)

    @tf.function
    def step(seq, target):
        with tf.GradientTape() as tape:
            h = tf.zeros([4, 5])
            outs = tf.TensorArray(tf.float32, size=6)
            for t in tf.range(6):
                h = tf.tanh(tf.matmul(seq[t], wx) + tf.matmul(h, wh))
                outs = outs.write(t, tf.matmul(h, wo))
            loss = tf.reduce_mean(tf.square(outs.stack() - target))
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss, grads[1]

    outs = [step(seq, target) for _ in range(3)]
    return outs, [v.numpy() for v in variables]


@parity(modes=True, **TOL)
def test_newton_iterations_with_nested_tapes_in_a_bounded_while_loop(tf):
    """Per-coordinate Newton steps minimising ``sum(cosh(a * x) - b * x)`` inside a compiled function:
    a ``tf.while_loop`` with ``maximum_iterations=6`` whose body takes the gradient and the diagonal
    second derivative by two nested tapes; the iterates' objective values are kept in a
    TensorArray; run for two parameter settings (one trace)."""
    traces = []

    @tf.function
    def newton(a, b, x0):
        traces.append(1)

        def f(x):
            return tf.reduce_sum(tf.cosh(a * x) - b * x)

        def body(i, x, fs):
            with tf.GradientTape() as outer:
                outer.watch(x)
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    fx = f(x)
                g = inner.gradient(fx, x)
            h = outer.gradient(g, x)          # diagonal Hessian (f is separable)
            return i + 1, x - g / h, fs.write(i, fx)

        i, x, fs = tf.while_loop(lambda i, x, fs: tf.constant(True), body,
                                 (tf.constant(0), x0, tf.TensorArray(tf.float32, size=6)),
                                 maximum_iterations=6)
        return i, x, fs.stack()

    x0 = tf.constant([0.5, -1.0, 2.0])
    r1 = newton(tf.constant(1.5), tf.constant([0.3, -2.0, 1.0]), x0)
    r2 = newton(tf.constant(0.7), tf.constant([1.0, 0.5, -0.2]), x0)
    return r1, r2, len(traces)


@parity(modes=True, **TOL)
def test_fixed_point_layer_solved_without_the_tape_and_differentiated_through_one_step(tf):
    """A deep-equilibrium layer ``z = tanh(W z + U x)``: 25 iterations of a ``tf.while_loop`` run
    under ``tape.stop_recording()`` inside a compiled step, then one more iteration recorded (the
    one-step "phantom" gradient) feeds a regression loss; SGD trains W, U and the head twice."""
    W = tf.Variable(init_array((4, 4), 33, 0.2))
    U = tf.Variable(init_array((3, 4), 34))
    head = tf.Variable(init_array((4, 1), 35))
    variables = [W, U, head]
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(5, seed=36)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            ux = tf.matmul(x, U)
            with tape.stop_recording():
                _, z = tf.while_loop(lambda i, z: i < 25,
                                     lambda i, z: (i + 1, tf.tanh(tf.matmul(z, W) + ux)),
                                     (tf.constant(0), tf.zeros([5, 4])))
            z = tf.tanh(tf.matmul(z, W) + ux)
            loss = tf.reduce_mean(tf.square(tf.matmul(z, head) - y))
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss, grads

    outs = [step(x, y) for _ in range(2)]
    return outs, [v.numpy() for v in variables]



@parity(modes=True, **TOL)
def test_recompute_grad_block_runs_its_forward_again_for_the_gradient(tf):
    """Gradient checkpointing observed from Python: a ``tf.recompute_grad`` block counts its
    forward runs in a list; eagerly the forward runs once for the value and once more when the
    tape's gradient is taken (TF's counts); its input and Variable gradients equal the plain
    block's."""
    runs = []
    w = tf.Variable(init_array((3, 3), 57))

    def block(x):
        runs.append(1)
        return tf.nn.softplus(tf.matmul(x, w))

    ckpt = tf.recompute_grad(block)
    x = tf.constant(init_array((2, 3), 58))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(ckpt(x) ** 2)
    after_forward = len(runs)
    gx, gw = tape.gradient(y, [x, w])
    after_gradient = len(runs)
    with tf.GradientTape() as plain:
        plain.watch(x)
        y2 = tf.reduce_sum(block(x) ** 2)
    px, pw = plain.gradient(y2, [x, w])
    return y, gx, gw, gx - px, gw - pw, after_forward, after_gradient


@parity(modes=True, **TOL)
def test_custom_gradient_freezing_one_of_its_variables_by_returning_none(tf):
    """A gated layer written with ``tf.custom_gradient`` reading two Variables; ``grad_fn`` returns
    the kernel's gradient and None for the gate (frozen by its gradient), so the tape gives None
    for the gate and the optimizer is given only the pairs that have a gradient."""
    kernel = tf.Variable(init_array((3, 2), 59))
    gate = tf.Variable(np.array([0.5, 2.0], np.float32))
    opt = tf.keras.optimizers.Adam(0.1)

    @tf.custom_gradient
    def gated(x):
        pre = tf.matmul(x, kernel)
        y = pre * tf.sigmoid(gate)

        def grad_fn(dy, variables=None):
            dpre = dy * tf.sigmoid(gate)
            dx = tf.matmul(dpre, kernel, transpose_b=True)
            by_var = {id(kernel): tf.matmul(x, dpre, transpose_a=True), id(gate): None}
            return dx, [by_var[id(v)] for v in variables]
        return y, grad_fn

    x, y = _reg(5, seed=60)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.reduce_sum(gated(tf.constant(x)), 1, keepdims=True) - y))
        gk, gg = tape.gradient(loss, [kernel, gate])
        opt.apply_gradients([(g, v) for g, v in ((gk, kernel), (gg, gate)) if g is not None])
        out.append((loss, gk, gg is None))
    return out, kernel.numpy(), gate.numpy()


@parity(modes=True, **TOL)
def test_vectorized_map_forward_under_an_outer_tape_matches_the_batched_gradient(tf):
    """A per-example attention score computed by ``tf.vectorized_map`` (each example a (4, 2)
    sequence scored against a query Variable and pooled) under an outer tape: the gradient for the
    query and the projection equals the batched computation's, in a compiled step and eagerly."""
    q = tf.Variable(init_array((2,), 61))
    proj = tf.Variable(init_array((2, 2), 62))
    seqs = init_array((3, 4, 2), 63, 1.0)

    def pool(seq):
        keys = tf.matmul(seq, proj)
        att = tf.nn.softmax(tf.linalg.matvec(keys, q))
        return tf.reduce_sum(att[:, None] * seq, 0)

    def grads(seqs):
        with tf.GradientTape() as tape:
            mapped = tf.reduce_sum(tf.vectorized_map(pool, seqs) ** 2)
        gm = tape.gradient(mapped, [q, proj])
        with tf.GradientTape() as tape:
            keys = tf.einsum("btd,de->bte", seqs, proj)
            att = tf.nn.softmax(tf.einsum("bte,e->bt", keys, q))
            batched = tf.reduce_sum(tf.reduce_sum(att[..., None] * seqs, 1) ** 2)
        gb = tape.gradient(batched, [q, proj])
        return mapped, gm, [a - b for a, b in zip(gm, gb)]

    return grads(tf.constant(seqs)), tf.function(grads)(tf.constant(seqs))


@parity(modes=True, **TOL)
def test_signature_step_fed_float64_numpy_batches_and_int64_labels(tf):
    """Data straight from a float64 / int64 NumPy source (as pandas gives it) fed to a compiled
    classifier step whose ``input_signature`` says float32 features and int32 labels: TF casts each
    NumPy batch to the spec's dtype (one trace for all batch sizes); a float16 Tensor is refused."""
    traces = []
    w = tf.Variable(init_array((4, 3), 64))
    opt = tf.keras.optimizers.SGD(0.3)
    rs = np.random.RandomState(65)
    x = rs.randn(10, 4)                       # float64
    labels = rs.randint(0, 3, 10)             # int64

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32)])
    def step(xb, yb):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=yb, logits=tf.matmul(xb, w)))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss, xb.dtype == tf.float32

    out = [step(x[i:i + n], labels[i:i + n]) for i, n in ((0, 4), (4, 4), (8, 2))]
    bad = raises(step, tf.constant(x[:2], tf.float16), tf.constant(labels[:2], tf.int32))
    return out, w.numpy(), len(traces), bad


@parity(**TOL)
def test_trained_module_exposes_a_serving_concrete_function_of_its_method(tf):
    """After a few compiled training steps, a ``tf.Module``'s ``@tf.function(input_signature=...)``
    ``serve`` method gives its concrete function through the instance: its
    ``structured_input_signature`` lists only the feature spec (the instance left out), its
    ``structured_outputs`` the ``(None, 1)`` prediction spec, and calling it on a batch of 3 gives
    the trained model's predictions without a new trace."""
    class Regressor(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(init_array((3, 1), 66))
            self.b = tf.Variable([0.0])
            self.traces = 0

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
        def serve(self, x):
            self.traces += 1
            return tf.matmul(x, self.w) + self.b

    model = Regressor()
    x, y = _reg(8, seed=67)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model.serve(x) - y))
        gw, gb = tape.gradient(loss, [model.w, model.b])
        model.w.assign_sub(0.1 * gw)
        model.b.assign_sub(0.1 * gb)
    cf = model.serve.get_concrete_function()
    args, kwargs = cf.structured_input_signature
    specs = [(s.shape.as_list(), s.dtype.name, s.name) for s in args]
    out_spec = (cf.structured_outputs.shape.as_list(), cf.structured_outputs.dtype.name)
    return loss, cf(tf.constant(x[:3])), specs, kwargs, out_spec, model.traces



@parity(modes=True, **TOL)
def test_window_cropped_around_the_argmax_of_a_score_in_a_compiled_step(tf):
    """Hard attention over a 1-D signal: a compiled step finds the peak of a detector's response by
    ``tf.argmax``, clips it into range and crops ``x[c:c + 4]`` at that data-dependent start (a
    window of known size), then regresses the crop's weighted sum onto a target; the gradient
    reaches the readout weights only (argmax has none); two steps on two signals."""
    det = tf.Variable(init_array((3,), 79))
    read = tf.Variable(init_array((4,), 80))
    sig = init_array((2, 12), 81, 1.0)

    @tf.function
    def step(x, target):
        resp = tf.nn.conv1d(x[None, :, None], det[:, None, None], 1, "SAME")[0, :, 0]
        c = tf.clip_by_value(tf.argmax(resp, output_type=tf.int32) - 1, 0, 8)
        with tf.GradientTape() as tape:
            loss = tf.square(tf.reduce_sum(x[c:c + 4] * read) - target)
        g_det, g_read = tape.gradient(loss, [det, read])
        read.assign_sub(0.1 * g_read)
        return c, loss, g_det is None, g_read

    return [step(tf.constant(s), tf.constant(t)) for s, t in zip(sig, (1.0, -0.5))], read.numpy()
