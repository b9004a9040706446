"""Round twenty-three (a), second file: iterative solvers, AutoGraph's rules and tracing, in
``tf.function`` as TF's guides and research code write them, each run under real TensorFlow 2.21 and
under tapejax. Solvers: Newton's method and bisection with a tolerance (``while tf.abs(f) > tol``,
bounded by ``set_loop_options(maximum_iterations=...)`` so that the tape can go through them),
conjugate gradient on a small SPD system beside ``tf.linalg.solve``, power iteration with a
convergence ``break``, a fixed-point iteration returning early from inside its loop, an inner
gradient-descent loop of fixed trip count differentiated (MAML's second order), ``tf.while_loop`` with
``maximum_iterations``, a DQN loss whose TD target is read under ``tf.stop_gradient`` (``None`` for the
target network). Rules: a variable defined in one branch of a tensor ``if`` (TF's error class),
loop variables changing dtype or shape in a ``while``, ``for row in tensor``, ``and`` / ``or`` /
``not`` and conditional expressions on tensors, Python loops unrolled, converted methods and nested
helpers, ``do_not_convert`` and ``autograph=False``, ``assert`` statements, comprehensions over a
tensor, ``try`` / ``except``, converted ``tf.scan`` / ``tf.map_fn`` bodies. Tracing: ``input_signature`` with a ``None``
batch, Python arguments that retrace, ``reduce_retracing``, Variables created on the first call only,
``run_functions_eagerly(True)`` giving the same numbers, ``tf.print`` order across calls, Variables
passed as arguments (TF: one trace per VariableSpec). Data is drawn with NumPy and fed in.
"""

import numpy as np

from .harness import init_array, parity, raises, xfail_on_tapejax
from .test_user_programs12b import TOL
from .test_user_programs13a import _printed

# ---------------------------------------------------------------------------
# Iterative solvers
# ---------------------------------------------------------------------------


@parity(**TOL)
def test_newton_and_bisection_with_a_tolerance_and_gradients_through_newton(tf):
    """Newton's method for a cube root, ``while tf.abs(f) > tol`` under ``maximum_iterations=30``,
    the iterations counted, and the gradient of the root w.r.t. ``a`` through the loop (about
    1 / (3 a^(2/3))); a vectorised Newton step while ``tf.reduce_any`` of the residuals is large;
    bisection for ``cos(x) = x`` until the bracket is below ``tol``; ``tol`` a Python float (a trace
    per value) and a tensor (one trace)."""
    @tf.function
    def cube_root(a, tol):
        x = tf.maximum(a, 1.0)
        f = x ** 3 - a
        it = tf.constant(0)
        while tf.abs(f) > tol:
            tf.autograph.experimental.set_loop_options(maximum_iterations=30)
            x = x - f / (3.0 * x * x)
            f = x ** 3 - a
            it += 1
        return x, it

    @tf.function
    def sqrt_all(a):
        x = tf.ones_like(a)
        while tf.reduce_any(tf.abs(x * x - a) > 1e-5):
            tf.autograph.experimental.set_loop_options(maximum_iterations=40)
            x = 0.5 * (x + a / x)
        return x

    @tf.function
    def fixed_cos(tol):
        lo, hi = tf.constant(0.0), tf.constant(1.0)
        n = 0
        while hi - lo > tol:
            mid = 0.5 * (lo + hi)
            if tf.cos(mid) - mid > 0.0:
                lo = mid
            else:
                hi = mid
            n += 1
        return 0.5 * (lo + hi), n

    a = tf.constant(5.0)
    with tf.GradientTape() as tape:
        tape.watch(a)
        root, its = cube_root(a, 1e-5)
    g = tape.gradient(root, a)
    out = (root, its, g, cube_root(tf.constant(27.0), 1e-5), cube_root(tf.constant(27.0), 1e-2),
           cube_root.experimental_get_tracing_count(), sqrt_all(tf.constant([2.0, 9.0, 0.25])))
    return out, fixed_cos(tf.constant(1e-3)), fixed_cos(tf.constant(1e-5)), fixed_cos.experimental_get_tracing_count()


@parity(rtol=1e-4, atol=1e-5)
def test_conjugate_gradient_on_a_small_spd_system_and_its_gradient(tf):
    """Conjugate gradient as the textbooks write it: ``while tf.sqrt(rs) > tol`` with
    ``maximum_iterations=10``, ``x += alpha * p`` and ``r -= alpha * Ap`` augmented assignments, the
    iterations counted (at most n = 4 in exact arithmetic); against ``tf.linalg.solve``; the gradient
    of ``c . x`` w.r.t. ``b`` through the loop (``A^-1 c``, A symmetric) and w.r.t. a Variable scaling A."""
    m = init_array((4, 4), 30, 1.0)
    spd = tf.constant(m @ m.T + 4.0 * np.eye(4, dtype=np.float32))
    scale = tf.Variable(1.0)

    @tf.function
    def cg(b, tol):
        a = scale * spd
        x = tf.zeros_like(b)
        r = b - tf.linalg.matvec(a, x)
        p = r
        rs = tf.tensordot(r, r, 1)
        k = tf.constant(0)
        while tf.sqrt(rs) > tol:
            tf.autograph.experimental.set_loop_options(maximum_iterations=10)
            ap = tf.linalg.matvec(a, p)
            alpha = rs / tf.tensordot(p, ap, 1)
            x += alpha * p
            r -= alpha * ap
            rs_new = tf.tensordot(r, r, 1)
            p = r + (rs_new / rs) * p
            rs = rs_new
            k += 1
        return x, k

    b = tf.constant([1.0, -2.0, 0.5, 3.0])
    c = tf.constant([0.3, 0.1, -0.2, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(b)
        x, k = cg(b, tf.constant(1e-5))
        obj = tf.reduce_sum(c * x)
    gb, gs = tape.gradient(obj, [b, scale])
    direct = tf.linalg.solve(spd, b[:, None])[:, 0]
    return x, k, direct, gb, tf.linalg.solve(spd, c[:, None])[:, 0], gs


@parity(**TOL)
def test_power_iteration_with_a_convergence_break_and_a_fixed_point_early_return(tf):
    """Power iteration for the top eigenpair of a symmetric matrix: ``for i in tf.range(100)`` that
    ``break``s once the Rayleigh quotient moves less than 1e-4 (the steps counted), against
    ``tf.linalg.eigh``; a fixed-point iteration ``x = cos(k x)`` that ``return``s from inside its
    ``tf.range`` loop when converged (TF: NotImplementedError, a return cannot be placed inside a TF
    loop), and the same written with ``break`` and a flag: ``(x, i)`` when converged, ``(x, -1)``
    after a cap too small."""
    q = np.linalg.qr(init_array((3, 3), 31, 1.0))[0]
    sym = tf.constant((q @ np.diag([4.0, 1.0, -0.5]) @ q.T).astype(np.float32))   # a gap: few steps

    @tf.function
    def power(a):
        v = tf.linalg.l2_normalize(tf.ones([3]))
        lam = tf.constant(0.0)
        steps = tf.constant(0)
        for i in tf.range(100):
            w = tf.linalg.matvec(a, v)
            v = tf.linalg.l2_normalize(w)
            new = tf.tensordot(v, tf.linalg.matvec(a, v), 1)
            steps = i + 1
            if tf.abs(new - lam) < 1e-4:   # (well above float32's rounding of a quotient near 4)
                lam = new
                break
            lam = new
        return lam, tf.abs(v), steps

    @tf.function
    def fixed_point(k, cap):
        x = tf.constant(0.5)
        for i in tf.range(cap):
            nx = tf.cos(k * x)
            if tf.abs(nx - x) < 1e-6:
                return nx, i
            x = nx
        return x, tf.constant(-1)

    @tf.function
    def fixed_point_break(k, cap):
        x = tf.constant(0.5)
        at = tf.constant(-1)
        for i in tf.range(cap):
            nx = tf.cos(k * x)
            converged = tf.abs(nx - x) < 1e-6
            x = nx
            if converged:
                at = i
                break
        return x, at

    lam, v, steps = power(sym)
    w = tf.linalg.eigh(sym)[0]
    top = tf.gather(w, tf.argmax(tf.abs(w)))
    return (lam, v, steps, top, raises(fixed_point, tf.constant(0.7), tf.constant(200)),
            fixed_point_break(tf.constant(0.7), tf.constant(200)), fixed_point_break(tf.constant(0.7), tf.constant(5)))


@parity(rtol=1e-4, atol=1e-5)
def test_gradients_through_a_fixed_trip_inner_loop_and_a_bounded_while_loop(tf):
    """MAML's inner loop: five SGD steps on a linear model's weights in ``for i in tf.range(5)`` with a
    tape inside, the query loss after them, and its gradient w.r.t. the meta-Variable through the
    loop (second order: the inner tape's gradient is differentiated); an RNN unrolled by
    ``tf.while_loop(..., maximum_iterations=6)`` on a tensor step count, its gradient w.r.t. the
    recurrent Variable (None for an unused one)."""
    w = tf.Variable(init_array((3, 1), 32, 0.5))
    u = tf.Variable(init_array((2, 2), 33, 0.5))
    unused = tf.Variable(1.0)
    xs = tf.constant(init_array((4, 3), 34, 1.0))
    ys = tf.constant(init_array((4, 1), 35, 1.0))
    xq = tf.constant(init_array((3, 3), 36, 1.0))
    yq = tf.constant(init_array((3, 1), 37, 1.0))

    @tf.function
    def adapted_loss(lr):
        fast = tf.identity(w)
        for _ in tf.range(5):
            with tf.GradientTape() as inner:
                inner.watch(fast)
                loss = tf.reduce_mean(tf.square(tf.matmul(xs, fast) - ys))
            fast = fast - lr * inner.gradient(loss, fast)
        return tf.reduce_mean(tf.square(tf.matmul(xq, fast) - yq))

    @tf.function
    def rnn(h0, n):
        _, h = tf.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tf.tanh(tf.linalg.matvec(u, h) + 0.1)),
                             (tf.constant(0), h0), maximum_iterations=6)
        return h

    with tf.GradientTape(persistent=True) as tape:
        q = adapted_loss(tf.constant(0.1))
        h = rnn(tf.constant([0.5, -0.3]), tf.constant(4))
        s = tf.reduce_sum(h)
    return q, tape.gradient(q, w), h, tape.gradient(s, [u, unused]), rnn(tf.constant([0.5, -0.3]), tf.constant(50))


@parity(modes=True, **TOL)
def test_td_targets_under_stop_gradient_in_a_compiled_loss_give_none_for_the_target_net(tf):
    """A DQN loss compiled with ``tf.function`` and differentiated by a tape outside it: the TD target
    ``r + gamma * max_a Q_target(s')`` read under ``tf.stop_gradient`` (the target network's
    Variables are read only there), a Huber loss picked by a tensor ``if``, an unused debug read of a
    counter Variable; the gradient is ``None`` for the target network and the counter (TF's rule for a
    function call: no output reaches them) and a value for both branches' Variables of the online
    network (zeros where the branch was not taken); ``unconnected_gradients='zero'``; two SGD steps."""
    online = [tf.Variable(init_array((3, 2), 50, 0.5)), tf.Variable([0.1, -0.1])]
    target = [tf.Variable(init_array((3, 2), 51, 0.5)), tf.Variable([0.0, 0.0])]
    scale = tf.Variable(1.0)
    counter = tf.Variable(0.0)
    s = tf.constant(init_array((4, 3), 52, 1.0))
    s2 = tf.constant(init_array((4, 3), 53, 1.0))
    a = tf.constant([0, 1, 1, 0])
    r = tf.constant([1.0, 0.0, -1.0, 0.5])

    @tf.function
    def td_loss(huber):
        _ = counter * 2.0
        q = tf.gather(tf.matmul(s, online[0]) + online[1], a, batch_dims=1)
        q_next = tf.reduce_max(tf.matmul(s2, target[0]) + target[1], axis=1)
        err = q - tf.stop_gradient(r + 0.9 * q_next)
        if huber:
            loss = tf.reduce_mean(tf.where(tf.abs(err) < 1.0, 0.5 * err * err, tf.abs(err) - 0.5))
        else:
            loss = tf.reduce_mean(err * err) * scale
        return loss

    out = []
    for huber in (tf.constant(True), tf.constant(True), tf.constant(False)):
        with tf.GradientTape() as tape:
            loss = td_loss(huber)
        grads = tape.gradient(loss, online + target + [scale, counter])
        for v, g in zip(online, grads[:2]):
            v.assign_sub(0.1 * g)
        out.append((loss, grads))
    with tf.GradientTape() as tape:
        loss = td_loss(tf.constant(True))
    return out, tape.gradient(loss, target, unconnected_gradients="zero"), online


# ---------------------------------------------------------------------------
# AutoGraph's rules
# ---------------------------------------------------------------------------


@parity
def test_branch_and_loop_variable_errors_of_a_tracking_script(tf):
    """What a tracking script trips over: ``best`` assigned only in the ``if`` of a tensor condition
    and read after (TF: ValueError, it must be defined in both branches), a ``return`` in one branch
    of a tensor ``if`` with no return in the other (ValueError), a ``while`` whose counter turns from
    int32 into float32 (TypeError), a ``while`` growing a buffer by ``tf.concat`` without an invariant
    (ValueError), and a loop variable that changes from a tuple to a list of the same structure (TF
    runs it); the same programs written right give the values."""
    @tf.function
    def only_if(score):
        if score > 0.5:
            best = score
        return best * 2.0

    @tf.function
    def half_return(x):
        if tf.reduce_sum(x) > 0:
            return x * 2.0

    @tf.function
    def dtype_drift(n):
        i = tf.constant(0)
        while i < n:
            i = tf.cast(i, tf.float32) + 1.0
        return i

    @tf.function
    def grows(n):
        buf = tf.zeros([0])
        i = tf.constant(0)
        while i < n:
            buf = tf.concat([buf, [tf.cast(i, tf.float32)]], 0)
            i += 1
        return buf

    @tf.function
    def fixed(score, x, n):
        best = tf.constant(0.0)
        if score > 0.5:
            best = score
        y = x * 2.0 if tf.reduce_sum(x) > 0 else tf.zeros_like(x)
        i = tf.constant(0.0)
        while i < tf.cast(n, tf.float32):
            i += 1.0
        return best * 2.0, y, i

    x = tf.constant([1.0, -0.5])
    return (raises(only_if, tf.constant(0.7)), raises(half_return, x), raises(dtype_drift, tf.constant(3)),
            raises(grows, tf.constant(3)), fixed(tf.constant(0.7), x, tf.constant(3)),
            fixed(tf.constant(0.2), -x, tf.constant(0)))


@parity(**TOL)
def test_streaming_statistics_over_rows_with_boolean_logic_and_conditional_expressions(tf):
    """Welford's running mean and variance by ``for row in x`` over a tensor's leading axis (a
    staged loop); rows skipped when ``not tf.reduce_all(tf.math.is_finite(row))`` or when they are
    outliers ``and`` past a warm-up ``or`` flagged; a clip written as a conditional expression on a
    tensor; a Python ``for`` over a list of quantile names inside (unrolled); the gradient of the
    final variance w.r.t. the input (zeros for the skipped rows)."""
    flags = tf.constant([False, False, True, False, False, False])

    @tf.function
    def stats(x, limit):
        n = tf.constant(0.0)
        mean = tf.zeros([2])
        m2 = tf.zeros([2])
        k = tf.constant(0)
        for row in x:
            outlier = tf.reduce_max(tf.abs(row)) > limit
            if not tf.reduce_all(tf.math.is_finite(row)) or (outlier and k > 1) or flags[k]:
                k += 1
                continue
            n += 1.0
            delta = row - mean
            mean += delta / n
            m2 += delta * (row - mean)
            k += 1
        var = m2 / n if n > 1.0 else tf.zeros_like(m2)
        out = {}
        for name, q in [("lo", 0.1), ("hi", 0.9)]:
            out[name] = mean + (q - 0.5) * tf.sqrt(var)
        return mean, var, n, out

    x = init_array((6, 2), 40, 1.0)
    x[3, 0] = 9.0
    x[4, 1] = np.inf
    xt = tf.constant(x)
    finite = tf.constant(np.where(np.isfinite(x), x, 0.0).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(finite)
        var = stats(finite, tf.constant(5.0))[1]
    return stats(xt, tf.constant(5.0)), tape.gradient(var, finite)


class _Normalizer:
    """A plain class whose methods a ``tf.function`` calls: converted recursively."""

    def __init__(self, tf, eps):
        self.tf, self.eps = tf, eps

    def scale(self, x):
        tf = self.tf
        s = tf.math.reduce_std(x)
        if s < self.eps:
            return x - tf.reduce_mean(x)
        return (x - tf.reduce_mean(x)) / s


@parity(**TOL)
def test_nested_helpers_methods_do_not_convert_and_autograph_false(tf):
    """A ``tf.function`` calling a method with a tensor ``if`` and a nested helper with a ``while``
    (both converted), a ``do_not_convert`` helper written with ``tf.cond`` (fine) and one with a
    Python ``if`` on a tensor (TF: OperatorNotAllowedInGraphError), and ``tf.function(autograph=False)``:
    a Python ``if`` on a tensor refused, ``tf.cond`` / ``tf.while_loop`` written by hand working."""
    norm = _Normalizer(tf, 1e-3)

    @tf.autograph.experimental.do_not_convert
    def relu_cond(x):
        return tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.nn.relu(x), lambda: -x)

    @tf.autograph.experimental.do_not_convert
    def relu_if(x):
        if tf.reduce_sum(x) > 0.0:
            return tf.nn.relu(x)
        return -x

    @tf.function
    def pipeline(x):
        def shrink(v):
            while tf.reduce_max(tf.abs(v)) > 1.0:
                v = v * 0.5
            return v
        return relu_cond(shrink(norm.scale(x)))

    @tf.function
    def unconverted_call(x):
        return relu_if(x)

    @tf.function(autograph=False)
    def manual(x):
        y = tf.cond(tf.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: x)
        _, z = tf.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 0.5), (tf.constant(0), y))
        return z

    @tf.function(autograph=False)
    def manual_if(x):
        if tf.reduce_sum(x) > 0.0:
            return x * 2.0
        return x

    x = tf.constant([3.0, -1.0, 0.5, 2.0])
    return (pipeline(x), pipeline(tf.constant([1.0, 1.0, 1.0, 1.0])), raises(unconverted_call, x), manual(x),
            raises(manual_if, x))


@parity(**TOL)
def test_asserts_comprehensions_try_and_converted_scan_bodies(tf):
    """Converted code a research script mixes in: ``assert`` on a tensor (TF: OperatorNotAllowedInGraphError,
    AutoGraph leaves ``assert`` alone by default) and on a static shape (AssertionError at trace),
    ``tf.debugging.assert_less`` (InvalidArgumentError when it runs), a list comprehension over a
    tensor's rows (not converted: OperatorNotAllowedInGraphError) beside ``tf.unstack`` and a Python
    ``range(len(x))``, ``try`` / ``except`` and an ``is not None and`` guard around an optional mask,
    and ``tf.scan`` / ``tf.map_fn`` whose bodies hold a tensor ``if`` (converted too), differentiated."""
    @tf.function
    def checked_log(x):
        assert tf.reduce_all(x > 0), "x must be positive"
        return tf.math.log(x)

    @tf.function
    def pairs_only(x):
        assert x.shape[0] == 2, "pairs only"
        return x

    @tf.function
    def bounded(x):
        tf.debugging.assert_less(x, 10.0, message="too big")
        return x + 1.0

    @tf.function
    def rows(x):
        return tf.stack([tf.reduce_sum(r) for r in x])

    @tf.function
    def rows_ok(x, mask=None):
        if mask is not None and tf.reduce_any(mask):
            x = tf.where(mask[:, None], 0.0, x)
        try:
            scale = x["scale"]
        except (TypeError, IndexError, ValueError):
            scale = 2.0
        out = [x[i] * float(i) for i in range(len(x))]
        return tf.stack(out) * scale, tf.add_n([r * 2.0 for r in tf.unstack(x)])

    @tf.function
    def scanned(v):
        def step(acc, e):
            if e > 0:
                return acc + e
            return acc * 0.5
        return tf.scan(step, v, initializer=tf.constant(1.0)), tf.map_fn(lambda e: e * e if e > 0 else -e, v)

    x = tf.constant(init_array((3, 2), 48, 1.0))
    v = tf.constant([1.0, -2.0, 3.0, -0.5])
    with tf.GradientTape() as tape:
        tape.watch(v)
        cum, sq = scanned(v)
        loss = tf.reduce_sum(cum) + tf.reduce_sum(sq)
    return (raises(checked_log, tf.constant([1.0, 2.0])), pairs_only(tf.constant([1.0, 2.0])),
            raises(pairs_only, tf.constant([1.0])), bounded(tf.constant(1.0)), raises(bounded, tf.constant(11.0)),
            raises(rows, x), rows_ok(x), rows_ok(x, tf.constant([True, False, False])), cum, sq,
            tape.gradient(loss, v))


# ---------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_tracing_counts_of_a_compiled_train_step(tf):
    """A train step under ``input_signature=[TensorSpec([None, 3]), TensorSpec([None, 1])]`` called with
    batches of 4, 2 and 5 (one trace); an evaluation with a Python-int ``top`` argument (a trace per
    value, the Python side effect once per trace); ``reduce_retracing=True`` called with three lengths
    (TF: a second trace that generalises, then none); Variables and losses after the steps."""
    w = tf.Variable(init_array((3, 1), 41, 0.5))
    b = tf.Variable([0.0])
    traced = []

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)])
    def train(x, y):
        traced.append("train")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss

    @tf.function
    def evaluate(x, top):
        traced.append(("eval", top))
        scores = tf.squeeze(tf.matmul(x, w), 1)
        return tf.math.top_k(scores, top).values

    @tf.function(reduce_retracing=True)
    def norm_of(v):
        traced.append("norm")
        return tf.norm(v)

    losses = []
    for n, seed in ((4, 42), (2, 43), (5, 44)):
        losses.append(train(tf.constant(init_array((n, 3), seed, 1.0)), tf.constant(init_array((n, 1), seed + 10))))
    xe = tf.constant(init_array((5, 3), 45, 1.0))
    tops = [evaluate(xe, k) for k in (1, 2, 1)]
    norms = [norm_of(tf.ones([k])) for k in (2, 3, 4)]
    counts = (train.experimental_get_tracing_count(), evaluate.experimental_get_tracing_count(),
              norm_of.experimental_get_tracing_count())
    return losses, w, b, tops, norms, counts, traced


@parity(**TOL)
def test_variables_created_on_the_first_call_only_and_run_functions_eagerly(tf):
    """The guide's lazily built layer: a ``tf.Module`` whose ``tf.function`` ``__call__`` creates its
    kernel when ``self.w is None`` (TF traces twice on the first call, then never); the same numbers
    with ``tf.config.run_functions_eagerly(True)`` (its Python side effects then run at every call),
    switched back off afterwards; a function that creates a Variable at every trace is ValueError."""
    def build():
        calls = []

        class Lazy(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = None

            @tf.function
            def __call__(self, x):
                calls.append(1)
                if self.w is None:
                    self.w = tf.Variable(init_array((2, 2), 46, 1.0))
                if tf.reduce_sum(x) > 0:
                    y = tf.matmul(x, self.w)
                else:
                    y = -x
                return y

        return Lazy(), calls

    x1, x2 = tf.constant(init_array((1, 2), 47, 1.0) + 2.0), tf.constant(-np.ones((1, 2), np.float32))
    graph, g_calls = build()
    g = [graph(x1), graph(x2), graph(x1)]
    g_count = graph.__call__.experimental_get_tracing_count()
    tf.config.run_functions_eagerly(True)
    try:
        eager, e_calls = build()
        e = [eager(x1), eager(x2), eager(x1)]
        flag = tf.config.functions_run_eagerly()
    finally:
        tf.config.run_functions_eagerly(False)

    @tf.function
    def makes_variables(x):
        v = tf.Variable(1.0)
        return x * v

    return (g, len(g_calls), g_count, e, len(e_calls), flag, tf.config.functions_run_eagerly(),
            raises(makes_variables, tf.constant(2.0)))


@parity
def test_tf_print_order_across_calls_and_retraces(tf):
    """``tf.print`` at run time against Python ``print``-like records at trace time, over calls that
    hit and miss the trace cache (a new dtype, a new Python argument), with prints inside a converted
    loop and a branch; the printed text in order, and the trace records."""
    def program(path):
        traced = []

        @tf.function
        def step(x, tag):
            traced.append((tag, x.dtype.name))
            tf.print("start", tag, output_stream=path)
            for i in tf.range(2):
                if tf.reduce_sum(x) > 0:
                    tf.print(tag, "pos", i, output_stream=path)
                else:
                    tf.print(tag, "neg", i, output_stream=path)
            tf.print("end", tag, tf.reduce_sum(x), output_stream=path)
            return x * 2

        step(tf.constant([1.0]), "a")
        step(tf.constant([-1.0]), "a")
        step(tf.constant([3]), "a")
        step(tf.constant([2.0]), "b")
        return traced, step.experimental_get_tracing_count()

    return _printed(tf, program)


@xfail_on_tapejax("tapejax keys a Variable argument by identity (compile/signature.py: 'Variables and every other "
                  "object by identity'), so each Variable passed is a new trace; TF 2.21 keys it by its "
                  "VariableSpec (shape, dtype): Variables of one spec share a trace")
@parity
def test_a_step_taking_variables_as_arguments_traces_once_per_spec(tf):
    """An EMA helper ``ema(target, source, decay)`` compiled once and called for three pairs of
    Variables of one shape: TF traces once per (shape, dtype) of its arguments; the values."""
    @tf.function
    def ema(target, source, decay):
        target.assign(decay * target + (1.0 - decay) * source)
        return target.read_value()

    pairs = [(tf.Variable(np.full(2, k, np.float32)), tf.Variable(np.full(2, 10.0 * k, np.float32))) for k in (1, 2, 3)]
    out = [ema(t, s, tf.constant(0.9)) for t, s in pairs]
    return out, ema.experimental_get_tracing_count()
