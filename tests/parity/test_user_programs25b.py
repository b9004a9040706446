"""Round twenty-five (b): realistic TF2 programs leaning on ``tf.function`` + AutoGraph + ``tf.data``
together, each run under real TensorFlow 2.21 and under tapejax.

Eager ``for x, y in dataset`` training loops calling a compiled step with tensor ``if`` / ``while``
inside, early stopping by ``break`` in a converted ``for i in tf.range(n)`` filling a TensorArray, a
greedy decoder under ``set_loop_options(maximum_iterations=...)``, ``input_signature`` with a None
batch size called with several sizes (tracing counts), pipelines of ``map`` (Python control flow on
Python values beside tensor ops), ``filter``, ``batch(drop_remainder=True)``, ``padded_batch``,
``repeat`` / ``take``, ``zip``, ``enumerate``, ``unbatch``, ``cache`` and seeded ``shuffle`` (only
order-free sums compared), gradients through bounded ``while`` loops, nested tapes over a Python list
of layers, ``tf.cond`` / ``tf.case`` / ``tf.switch_case`` with gradients, dicts and namedtuples
returned, Python scalars against tensors (retracing), recursive conversion of helpers, and the errors
AutoGraph raises.
"""

import collections

import numpy as np

from .harness import parity, raises

TOL = {"rtol": 2e-5, "atol": 1e-6}


def _data(n, d, seed):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = (x @ rs.randn(d, 1).astype(np.float32) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


# ---------------------------------------------------------------------------
# Training loops over datasets
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_eager_dataset_loop_with_a_compiled_step_branching_on_the_loss(tf):
    """A linear model trained by ``for x, y in ds`` (batches of 4 from 10 rows, so a last batch of 2:
    a retrace) calling a ``tf.function`` step; inside, ``if tf.reduce_mean(loss) > thr`` halves the
    step size, and a ``while`` on a tensor takes extra small steps while the loss stays high (at most
    3).  Losses per step, the number of inner steps, the Variables and the tracing count."""
    x, y = _data(10, 3, 501)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    w = tf.Variable(np.full((3, 1), 0.1, np.float32))
    b = tf.Variable(0.0)

    @tf.function
    def step(xb, yb, thr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(xb, w) + b - yb))
        gw, gb = tape.gradient(loss, [w, b])
        lr = tf.constant(0.1)
        if tf.reduce_mean(loss) > thr:
            lr = lr * 0.5
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        k = tf.constant(0)
        cur = tf.reduce_mean(tf.square(tf.matmul(xb, w) + b - yb))
        while cur > thr and k < 3:
            w.assign_sub(0.05 * tf.matmul(xb, tf.matmul(xb, w) + b - yb, transpose_a=True))
            cur = tf.reduce_mean(tf.square(tf.matmul(xb, w) + b - yb))
            k += 1
        return loss, cur, k

    hist = []
    for epoch in range(2):
        for xb, yb in ds:
            hist.append(step(xb, yb, tf.constant(1.0)))
    return hist, w, b, step.experimental_get_tracing_count()


@parity(modes=True, **TOL)
def test_early_stopping_break_in_a_range_loop_filling_a_tensor_array(tf):
    """Gradient descent on a quadratic in ``for i in tf.range(max_steps)``: each step's loss written
    to a TensorArray, ``break`` once the improvement is below a tolerance; the stacked history, the
    step count and the final point, for two tolerances (one that never stops early); the step
    budget a Python int (a retrace per value)."""
    a = tf.constant([[3.0, 0.5], [0.5, 1.0]])
    c = tf.constant([1.0, -2.0])

    @tf.function
    def descend(x0, tol, max_steps):
        x = x0
        hist = tf.TensorArray(tf.float32, size=max_steps)
        prev = tf.constant(np.inf, tf.float32)
        n = tf.constant(0)
        for i in tf.range(max_steps):
            loss = 0.5 * tf.tensordot(x, tf.linalg.matvec(a, x), 1) - tf.tensordot(c, x, 1)
            hist = hist.write(i, loss)
            n = i + 1
            if prev - loss < tol:
                break
            prev = loss
            x = x - 0.2 * (tf.linalg.matvec(a, x) - c)
        return hist.stack(), n, x

    x0 = tf.constant([2.0, 2.0])
    return (descend(x0, tf.constant(1e-3), 40), descend(x0, tf.constant(-1.0), 6),
            descend.experimental_get_tracing_count())


@parity(modes=True, **TOL)
def test_greedy_decoder_under_set_loop_options_maximum_iterations(tf):
    """A tiny RNN decoder: ``while not finished`` with a tensor condition, capped by
    ``tf.autograph.experimental.set_loop_options(maximum_iterations=...)``; tokens by ``argmax``
    written into a TensorArray; one start token that emits EOS early and one that hits the cap."""
    rs = np.random.RandomState(502)
    emb = tf.constant(rs.randn(5, 4).astype(np.float32))
    wh = tf.constant(rs.randn(4, 4).astype(np.float32) * 0.5)
    wo = tf.constant(rs.randn(4, 5).astype(np.float32))

    @tf.function
    def decode(start, eos):
        tok = start
        h = tf.zeros([4])
        out = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        n = tf.constant(0)
        done = tf.constant(False)
        while not done:
            tf.autograph.experimental.set_loop_options(maximum_iterations=7)
            h = tf.tanh(tf.gather(emb, tok) + tf.linalg.matvec(wh, h, transpose_a=True))
            tok = tf.argmax(tf.linalg.matvec(wo, h, transpose_a=True), output_type=tf.int32)
            out = out.write(n, tok)
            n += 1
            done = tf.equal(tok, eos)
        return out.stack(), n, h

    return [decode(tf.constant(s), tf.constant(e)) for s, e in ((0, 3), (1, 4), (2, 99))]


@parity(modes=True, x64=True)
def test_input_signature_with_a_none_batch_traces_once_for_every_size(tf):
    """``input_signature=[tf.TensorSpec([None, 3])]``: called with batches of 1, 4, 7 rows (one
    trace), then with a wrong inner size and a float64 batch (TF raises; no new trace)."""
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def norm_rows(x):
        n = tf.shape(x)[0]
        s = tf.reduce_sum(x * x, axis=1, keepdims=True)
        return x / tf.sqrt(s + 1e-6), n

    outs = [norm_rows(tf.constant(np.arange(k * 3, dtype=np.float32).reshape(k, 3))) for k in (1, 4, 7)]
    bad = (raises(norm_rows, tf.ones([2, 4])), raises(norm_rows, tf.ones([2, 3], tf.float64)))
    return outs, norm_rows.experimental_get_tracing_count(), bad, norm_rows.experimental_get_tracing_count()


# ---------------------------------------------------------------------------
# Pipelines
# ---------------------------------------------------------------------------


def _elems(ds):
    return [tuple(t for t in e) if isinstance(e, tuple) else e for e in ds]


@parity(modes=True, x64=True)
def test_map_with_python_control_flow_filter_and_batch_drop_remainder(tf):
    """A ``map`` function whose Python ``if`` on a closed-over Python flag and ``for`` over a Python
    list choose tensor ops, and whose tensor ``if`` is converted; ``filter`` on a tensor predicate;
    ``batch(4, drop_remainder=True)``; the batches and their static shapes."""
    scales = [1.0, 2.0]
    use_square = True

    def prep(x):
        y = tf.cast(x, tf.float32)
        for s in scales:
            y = y * s
        if use_square:
            y = y * y
        if y > 50.0:
            y = y - 50.0
        else:
            y = -y
        return {"v": y, "odd": x % 2}

    ds = (tf.data.Dataset.range(15).map(prep).filter(lambda d: d["odd"] == 1)
          .batch(3, drop_remainder=True))
    out = [(d["v"], d["odd"]) for d in ds]
    spec = ds.element_spec
    return out, spec["v"].shape.as_list(), spec["odd"].dtype.name


@parity(modes=True, x64=True)
def test_padded_batch_enumerate_zip_unbatch_and_cache(tf):
    """Variable-length rows by ``range`` in a ``map``, ``padded_batch(2, padding_values=-1)``,
    ``enumerate`` and ``zip`` with a second dataset; ``unbatch`` back; ``cache`` read twice;
    ``repeat(2).take(5)`` and ``take(3).repeat(2)``."""
    lens = tf.data.Dataset.from_tensor_slices(tf.constant([3, 1, 4, 2, 1]))
    rows = lens.map(lambda n: tf.range(n) * 10)
    pb = rows.padded_batch(2, padding_values=-1)
    en = pb.enumerate(start=5)
    z = tf.data.Dataset.zip((en, tf.data.Dataset.range(100, 103)))
    zipped = [(i, b, k) for (i, b), k in z]
    ub = [e for e in pb.unbatch()]
    cached = lens.map(lambda n: n * n).cache()
    twice = ([e for e in cached], [e for e in cached])
    rt = [e for e in lens.repeat(2).take(7)]
    tr = [e for e in lens.take(3).repeat(2)]
    return [[e for e in pb]], zipped, ub, twice, rt, tr, pb.element_spec.shape.as_list()


@parity(modes=True, x64=True, **TOL)
def test_seeded_shuffle_epoch_sums_are_order_free(tf):
    """``shuffle(8, seed=3)`` then ``batch(3)`` over two epochs with reshuffling: per-epoch sums of
    the elements and of their squares, counts of batches, and a ``reduce`` with a tuple state under a
    ``tf.function``; all independent of the order."""
    ds = tf.data.Dataset.from_tensor_slices(np.arange(12, dtype=np.float32)).shuffle(8, seed=3).batch(3, drop_remainder=True)
    epochs = []
    for _ in range(2):
        s = tf.constant(0.0)
        q = tf.constant(0.0)
        nb = 0
        for b in ds:
            s += tf.reduce_sum(b)
            q += tf.reduce_sum(b * b)
            nb += 1
        epochs.append((s, q, nb))

    @tf.function
    def total(d):
        return d.reduce((tf.constant(0.0), tf.constant(0)), lambda st, b: (st[0] + tf.reduce_sum(b), st[1] + 1))

    return epochs, total(ds), ds.cardinality()


@parity(modes=True, **TOL)
def test_dataset_iterated_inside_a_function_with_break_and_continue(tf):
    """``for b in ds`` inside a ``tf.function``: batches with a negative sum skipped by ``continue``,
    the loop left by ``break`` once the running total passes a bound; the total, the number of
    batches used and the stacked maxima of the batches read (a Python int counter that AutoGraph
    turns into a loop variable), called twice (the dataset read afresh each call)."""
    x = np.array([1.0, -4.0, 2.0, 3.0, -1.0, -2.0, 5.0, 6.0, 1.0, 1.0, 7.0, 2.0], np.float32)
    ds = tf.data.Dataset.from_tensor_slices(x).batch(2)

    @tf.function
    def run(bound):
        total = tf.constant(0.0)
        used = tf.constant(0)
        maxima = tf.TensorArray(tf.float32, size=6)
        k = 0
        for b in ds:
            maxima = maxima.write(k, tf.reduce_max(b))
            k += 1
            if tf.reduce_sum(b) < 0:
                continue
            total += tf.reduce_sum(b)
            used += 1
            if total > bound:
                break
        return total, used, maxima.stack()

    return run(tf.constant(10.0)), run(tf.constant(1000.0)), run.experimental_get_tracing_count()


# ---------------------------------------------------------------------------
# Gradients through control flow
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_gradients_through_bounded_while_loops_converted_and_explicit(tf):
    """A fixed-point iteration ``x <- cos(a x) + b`` to a tolerance in a converted ``while`` capped
    by ``set_loop_options(maximum_iterations=20)``, and the same by ``tf.while_loop(...,
    maximum_iterations=20)``; the tape's gradients with respect to the Variables ``a`` and ``b``
    through each (one loop stops early, one hits the cap), and the trip counts."""
    a = tf.Variable(0.8)
    b = tf.Variable(0.3)

    @tf.function
    def fixed_point(x0, tol):
        x = x0
        i = tf.constant(0)
        delta = tf.constant(1.0)
        while delta > tol:
            tf.autograph.experimental.set_loop_options(maximum_iterations=20)
            nx = tf.cos(a * x) + b
            delta = tf.abs(nx - x)
            x = nx
            i += 1
        return x, i

    @tf.function
    def explicit(x0):
        return tf.while_loop(lambda i, x: tf.reduce_sum(x) < 50.0,
                             lambda i, x: (i + 1, x * (1.0 + a) + b),
                             (tf.constant(0), x0), maximum_iterations=20)

    out = []
    for tol in (1e-4, -1.0):
        with tf.GradientTape() as tape:
            x, n = fixed_point(tf.constant(0.5), tf.constant(tol))
        out.append((x, n, tape.gradient(x, [a, b])))
    with tf.GradientTape(persistent=True) as tape:
        x0 = tf.constant([0.5, 1.0])
        tape.watch(x0)
        n, x = explicit(x0)
        s = tf.reduce_sum(x)
    out.append((n, x, tape.gradient(s, [a, b, x0])))
    return out


@parity(modes=True, **TOL)
def test_nested_tapes_inside_a_function_over_a_python_list_of_layers(tf):
    """A gradient penalty in a ``tf.function`` train step: the critic is a Python list of
    ``(w, b)`` Variable pairs applied by a Python ``for`` (unrolled) with a tensor ``if`` choosing
    the activation per layer index; an inner tape's input gradient norm enters the outer loss;
    three steps of plain SGD: losses, penalties and the Variables."""
    rs = np.random.RandomState(503)
    layers = [(tf.Variable(rs.randn(3, 5).astype(np.float32) * 0.5), tf.Variable(np.zeros(5, np.float32))),
              (tf.Variable(rs.randn(5, 4).astype(np.float32) * 0.5), tf.Variable(np.zeros(4, np.float32))),
              (tf.Variable(rs.randn(4, 1).astype(np.float32) * 0.5), tf.Variable([0.1]))]
    params = [v for pair in layers for v in pair]
    x = tf.constant(rs.randn(6, 3).astype(np.float32))

    def critic(h, soft):
        for k, (w, b) in enumerate(layers):
            h = tf.matmul(h, w) + b
            if k < len(layers) - 1:
                if soft:
                    h = tf.nn.softplus(h)
                else:
                    h = tf.tanh(h)
        return h

    @tf.function
    def step(x, soft):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(x)
                out = critic(x, soft)
            gx = inner.gradient(out, x)
            gnorm = tf.sqrt(tf.reduce_sum(gx * gx, axis=1) + 1e-12)
            penalty = tf.reduce_mean(tf.square(gnorm - 1.0))
            loss = -tf.reduce_mean(out) + 10.0 * penalty
        grads = outer.gradient(loss, params)
        for v, g in zip(params, grads):
            v.assign_sub(0.01 * g)
        return loss, penalty

    hist = [step(x, tf.constant(i % 2 == 0)) for i in range(3)]
    return hist, params, step.experimental_get_tracing_count()


@parity(modes=True, **TOL)
def test_cond_case_and_switch_case_with_gradients_in_and_out_of_a_function(tf):
    """A piecewise loss picked by ``tf.switch_case`` on a tensor index, ``tf.case`` on predicate
    pairs with a default (``exclusive=True``), and ``tf.cond`` with lambdas closing over a Variable;
    values and tape gradients eagerly and inside a ``tf.function``, for every branch."""
    w = tf.Variable([1.5, -0.5])

    def run(idx, x):
        br = [lambda: tf.reduce_sum(w * x), lambda: tf.reduce_sum(tf.square(w) * x),
              lambda: tf.reduce_sum(tf.sin(w)) * tf.reduce_sum(x)]
        s = tf.switch_case(idx, br)
        c = tf.case([(tf.reduce_sum(x) > 2.0, lambda: tf.reduce_max(w * x)),
                     (tf.reduce_sum(x) < -2.0, lambda: tf.reduce_min(w * x))],
                    default=lambda: tf.reduce_mean(w), exclusive=True)
        d = tf.cond(idx > 0, lambda: tf.exp(w[0]), lambda: tf.constant(0.0))
        return s, c, d

    def grads(fn, idx, x):
        with tf.GradientTape(persistent=True) as tape:
            s, c, d = fn(idx, x)
        return (s, c, d), [tape.gradient(t, w) for t in (s, c, d)]

    compiled = tf.function(run)
    out = []
    for idx, x in ((0, [1.0, 2.0]), (1, [-3.0, -1.0]), (2, [0.5, 0.5]), (7, [1.0, 1.0])):
        i, xt = tf.constant(idx), tf.constant(x)
        out.append((grads(run, i, xt), grads(compiled, i, xt)))
    return out, compiled.experimental_get_tracing_count()


# ---------------------------------------------------------------------------
# Structures, tracing and conversion
# ---------------------------------------------------------------------------

Stats = collections.namedtuple("Stats", ["mean", "var", "count"])


@parity(modes=True, **TOL)
def test_functions_taking_and_returning_dicts_and_namedtuples(tf):
    """A ``tf.function`` taking a dict batch and returning a namedtuple of statistics computed in a
    converted loop over rows with a tensor ``if`` masking rows; a second returning a dict whose
    values are a tensor, a nested tuple and a Python int; the structure and values come back
    unchanged, and a dict with the keys in another order is the same trace."""
    @tf.function
    def masked_stats(batch):
        x, m = batch["x"], batch["mask"]
        s = tf.zeros([2])
        q = tf.zeros([2])
        n = tf.constant(0.0)
        for i in tf.range(tf.shape(x)[0]):
            if m[i]:
                s += x[i]
                q += x[i] * x[i]
                n += 1.0
        mean = s / tf.maximum(n, 1.0)
        return Stats(mean, q / tf.maximum(n, 1.0) - mean * mean, tf.cast(n, tf.int32))

    @tf.function
    def summary(st):
        return {"z": st.mean / tf.sqrt(st.var + 1e-3), "pair": (st.count, st.count * 2), "k": 3}

    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [4.0, 4.0]])
    m = tf.constant([True, False, True, True])
    st = masked_stats({"x": x, "mask": m})
    st2 = masked_stats({"mask": tf.logical_not(m), "x": x})
    out = summary(st)
    return (st, st2, out, type(st).__name__, sorted(out), masked_stats.experimental_get_tracing_count(),
            summary.experimental_get_tracing_count())


@parity(modes=True)
def test_python_scalars_against_tensors_retrace_counts(tf):
    """One function called with Python ints (a trace per value), Python floats, tensors of one
    dtype and shape (one trace), a new dtype, a new shape, a bool flag (a trace per value), and a
    keyword argument; the values and the tracing count after each group; ``reduce_retracing=True``
    relaxes the shapes of a second function."""
    @tf.function
    def scaled(x, k, flag=False):
        y = x * tf.cast(k, x.dtype)
        if flag:
            y = -y
        return y

    counts = []
    vals = []
    for k in (1, 2, 2, 3):
        vals.append(scaled(tf.constant([1.0, 2.0]), k))
    counts.append(scaled.experimental_get_tracing_count())
    for k in (1.5, 2.5):
        vals.append(scaled(tf.constant([1.0, 2.0]), k))
    counts.append(scaled.experimental_get_tracing_count())
    for k in (1, 2, 3):
        vals.append(scaled(tf.constant([1.0, 2.0]), tf.constant(k)))
    counts.append(scaled.experimental_get_tracing_count())
    vals.append(scaled(tf.constant([1.0, 2.0, 3.0]), tf.constant(2)))
    vals.append(scaled(tf.constant([1, 2]), tf.constant(2)))
    counts.append(scaled.experimental_get_tracing_count())
    vals.append(scaled(tf.constant([1.0, 2.0]), tf.constant(2), flag=True))
    vals.append(scaled(tf.constant([1.0, 2.0]), tf.constant(2), True))
    counts.append(scaled.experimental_get_tracing_count())

    @tf.function(reduce_retracing=True)
    def total(x):
        return tf.reduce_sum(x * x)

    tot = [total(tf.ones([n])) for n in (2, 3, 4, 5)]
    return vals, counts, tot, total.experimental_get_tracing_count()


def _clip_step(tf, g, lim):
    if tf.reduce_max(tf.abs(g)) > lim:
        g = g * (lim / tf.reduce_max(tf.abs(g)))
    return g


def _smooth_abs(tf, x, eps):
    if eps > 0.0:  # a Python float: plain Python
        return tf.sqrt(x * x + eps)
    return tf.abs(x)


def _tree_sum(tf, xs, depth):
    """Python recursion on a Python int, each level with a tensor ``if``."""
    if depth == 0:
        s = tf.reduce_sum(xs)
        if s < 0:
            s = -s
        return s
    half = xs.shape[0] // 2
    left = _tree_sum(tf, xs[:half], depth - 1)
    right = _tree_sum(tf, xs[half:], depth - 1)
    if left > right:
        return left - right
    return left + right


@parity(modes=True, **TOL)
def test_recursive_conversion_of_module_level_helpers_with_tensor_ifs(tf):
    """Compiled functions calling module-level helpers that AutoGraph converts recursively: a
    gradient clip with a tensor ``if``, a smoothing helper branching on a Python float, and a
    Python-recursive tree reduction (depth a Python int) whose every level has a tensor ``if``
    with a ``return`` in it; the loss differentiated by a tape around the compiled call, the
    gradient clipped by a second compiled function; inputs taking each branch."""
    w = tf.Variable([0.5, -2.0, 3.0, 0.1])

    @tf.function
    def loss_fn(x):
        return tf.reduce_sum(_smooth_abs(tf, w * x - 1.0, 0.01)) + _tree_sum(tf, w * x, 2)

    @tf.function
    def clip(g, lim):
        return _clip_step(tf, g, lim)

    @tf.function
    def parts(x):
        return _tree_sum(tf, x, 1), _smooth_abs(tf, x, 0.0)

    out = []
    for x, lim in (([1.0, 2.0, -1.0, 0.5], 0.5), ([-1.0, 0.5, 2.0, 3.0], 100.0), ([2.0, -3.0, -1.0, 4.0], 1.0)):
        with tf.GradientTape() as tape:
            loss = loss_fn(tf.constant(x))
        g = tape.gradient(loss, w)
        out.append((loss, g, clip(g, tf.constant(lim)), parts(tf.constant(x))))
    return out


@parity(modes=True)
def test_autograph_errors_users_hit(tf):
    """A value defined in only one branch of a tensor ``if`` inside a loop and read after; a loop
    variable whose shape grows in a ``for i in tf.range(n)``; a loop variable turning from int32 to
    float32 in a ``for``; branches returning different dtypes; a variable that is None before a
    tensor ``while`` and a tensor after (TF runs it); a Python list appended in a tensor loop and
    stacked after (InaccessibleTensorError)."""
    @tf.function
    def one_branch(x):
        for i in tf.range(3):
            if x[i] > 0:
                last = x[i]
        return last

    @tf.function
    def grows(n):
        v = tf.zeros([1])
        for i in tf.range(n):
            v = tf.concat([v, [1.0]], 0)
        return v

    @tf.function
    def drift(n):
        acc = tf.constant(0)
        for i in tf.range(n):
            acc = acc + 0.5
        return acc

    @tf.function
    def dtypes(x):
        if x > 0:
            y = tf.constant(1)
        else:
            y = tf.constant(1.0)
        return y

    @tf.function
    def none_first(n):
        y = None
        i = tf.constant(0)
        while i < n:
            y = tf.cast(i, tf.float32)
            i += 1
        return y

    @tf.function
    def appends(n):
        out = []
        for i in tf.range(n):
            out.append(i)
        return tf.stack(out)

    x = tf.constant([1.0, -1.0, 2.0])
    n = tf.constant(3)
    return (raises(one_branch, x), raises(grows, n), raises(drift, n), raises(dtypes, tf.constant(1.0)),
            raises(none_first, n), raises(appends, n))


@parity(modes=True, **TOL)
def test_keras_model_custom_step_with_metrics_over_a_prefetched_pipeline(tf):
    """A Keras ``Sequential`` trained by a ``tf.function`` step over ``from_tensor_slices((x, y))
    .map(normalise).batch(4, drop_remainder=True).prefetch(2)`` for two epochs: ``keras.metrics.Mean``
    and ``MeanSquaredError`` updated inside the step and reset per epoch (``reset_state``), a
    converted ``if`` on the optimizer's ``iterations`` scaling the first steps' gradients; the
    per-epoch metric results, the weights and the tracing count."""
    x, y = _data(12, 3, 504)
    mu, sd = x.mean(0), x.std(0)

    def normalise(a, b):
        return (a - mu) / sd, b

    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(normalise).batch(4, drop_remainder=True).prefetch(2)
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="tanh"), tf.keras.layers.Dense(1)])
    model.build((None, 3))
    rs = np.random.RandomState(505)
    model.set_weights([rs.randn(*w.shape).astype(np.float32) * 0.5 for w in model.get_weights()])
    opt = tf.keras.optimizers.SGD(0.1)
    loss_m = tf.keras.metrics.Mean()
    mse_m = tf.keras.metrics.MeanSquaredError()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            loss = tf.reduce_mean(tf.square(pred - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        if opt.iterations < 2:
            grads = [g * 0.1 for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))
        loss_m.update_state(loss)
        mse_m.update_state(yb, pred)
        return loss

    hist = []
    for epoch in range(2):
        loss_m.reset_state()
        mse_m.reset_state()
        losses = [step(xb, yb) for xb, yb in ds]
        hist.append((losses, loss_m.result(), mse_m.result()))
    return hist, model.get_weights(), int(opt.iterations.numpy()), step.experimental_get_tracing_count()


@parity(modes=True, x64=True, **TOL)
def test_iterator_read_inside_a_function_until_get_next_as_optional_is_empty(tf):
    """An iterator made outside a ``tf.function`` and read inside: ``next(it)`` once per call for
    two calls, then a converted ``while more:`` reading ``get_next_as_optional()`` in its body and
    draining the rest with a running sum and count; a second ``iter`` over the same dataset
    restarts it.  (The Optional itself as the loop variable: a program below.)"""
    ds = tf.data.Dataset.range(1, 8).map(lambda v: tf.cast(v, tf.float32) * 0.5)

    @tf.function
    def one(it):
        return next(it) * 10.0

    @tf.function
    def drain(it):
        total = tf.constant(0.0)
        n = tf.constant(0)
        more = tf.constant(True)
        while more:
            opt = it.get_next_as_optional()
            more = opt.has_value()
            if more:
                total += opt.get_value()
                n += 1
        return total, n

    it = iter(ds)
    firsts = [one(it), one(it)]
    rest = drain(it)
    again = drain(iter(ds))
    return firsts, rest, again


@parity(modes=True, x64=True, **TOL)
def test_dataset_scan_window_flat_map_and_from_generator(tf):
    """A running mean by ``Dataset.scan`` with a tuple state, sliding windows by ``window(3, shift=2,
    drop_remainder=True).flat_map(lambda w: w.batch(3))``, a ``from_generator`` source with an
    ``output_signature`` of a variable-length vector through a ``map`` whose tensor ``if`` picks a
    branch per element, then ``padded_batch``."""
    base = tf.data.Dataset.from_tensor_slices(tf.constant([2.0, 4.0, -1.0, 3.0, 5.0, 0.0, 1.0]))

    def running(state, v):
        s, n = state
        s, n = s + v, n + 1.0
        return (s, n), s / n

    means = [e for e in base.scan((tf.constant(0.0), tf.constant(0.0)), running)]
    windows = [e for e in base.window(3, shift=2, drop_remainder=True).flat_map(lambda w: w.batch(3))]

    def gen():
        for k in (2, 0, 3, 1):
            yield np.arange(k, dtype=np.int32) + k

    g = tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec([None], tf.int32))

    def clip_or_flip(v):
        if tf.size(v) > 1:
            v = tf.minimum(v, 4)
        else:
            v = -v
        return v

    padded = [e for e in g.map(clip_or_flip).padded_batch(2)]
    return means, windows, padded


@parity(modes=True, **TOL)
def test_enumerate_zip_conditional_expressions_and_lazy_boolean_ops_over_tensors(tf):
    """Inside a ``tf.function``: ``for i in tf.range(tf.shape(x)[0])`` with ``x[i]``, and ``for ab
    in tf.stack([x, y], 1)`` (a converted loop over a tensor), a conditional expression on
    a tensor, ``and`` / ``or`` / ``not`` on tensor predicates, ``assert_all_finite`` (passing), and
    ``len(x)`` of a tensor; the gradient of the result by a tape around the call.
    ``enumerate(x)``, ``zip(x, y)`` over tensors, a tuple target ``for a, b in xy`` and a Python
    ``assert`` on a tensor are not converted by TF 2.21 (OperatorNotAllowedInGraphError)."""
    w = tf.Variable([1.0, -1.0, 0.5])

    @tf.function
    def f(x, y):
        acc = tf.zeros([3])
        for i in tf.range(tf.shape(x)[0]):
            row = x[i]
            acc += row * tf.cast(i + 1, tf.float32) if tf.reduce_sum(row) > 0 else -row
        dots = tf.constant(0.0)
        for ab in tf.stack([x, y], 1):
            d = tf.reduce_sum(ab[0] * ab[1] * w)
            if d > 0 and 1.0 / d < 2.0 or not d < 10.0:
                dots += d
        tf.debugging.assert_all_finite(acc, "nan")
        return acc * w, dots, len(x)

    x = tf.constant([[1.0, 2.0, 0.5], [-1.0, -2.0, 0.0], [0.0, 3.0, 1.0], [4.0, -0.5, 2.0]])
    y = tf.constant([[1.0, 0.0, 2.0], [0.5, 0.5, 0.5], [0.0, 1.0, 0.0], [-2.0, 0.0, 1.0]])
    with tf.GradientTape() as tape:
        acc, dots, n = f(x, y)
        s = tf.reduce_sum(acc) + dots

    @tf.function
    def by_enumerate(x):
        acc = tf.zeros([3])
        for i, row in enumerate(x):
            acc += row
        return acc

    @tf.function
    def by_zip(x, y):
        acc = tf.zeros([3])
        for a, b in zip(x, y):
            acc += a * b
        return acc

    @tf.function
    def unpacked(xy):
        acc = tf.zeros([3])
        for a, b in xy:
            acc += a * b
        return acc

    @tf.function
    def asserted(x):
        assert tf.reduce_all(x > 0), "negative"
        return x * 2.0

    return (acc, dots, n, tape.gradient(s, w), raises(by_enumerate, x), raises(by_zip, x, y),
            raises(unpacked, tf.stack([x, y], 1)), raises(asserted, tf.constant([1.0])))


@parity(modes=True)
def test_gradient_through_the_unchanged_branch_of_a_tensor_if_under_an_inner_tape(tf):
    """A compiled step whose tape records ``if loss > thr: loss = loss + reg``; with the condition
    False the loss is ``w * x`` unchanged, its gradient ``x``."""
    w = tf.Variable(2.0)

    @tf.function
    def step(x, thr):
        with tf.GradientTape() as tape:
            loss = w * x
            if loss > thr:
                loss = loss + 1.0
        return tape.gradient(loss, w)

    return step(tf.constant(3.0), tf.constant(100.0)), step(tf.constant(3.0), tf.constant(-100.0))


@parity(modes=True)
def test_gradient_through_an_identity_cond_branch_under_an_inner_tape(tf):
    """``tf.cond(x < 0, lambda: -x, lambda: x)`` recorded by a tape inside a ``tf.function``."""
    @tf.function
    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            s = tf.cond(x < 0, lambda: -x, lambda: x)
        return tape.gradient(s, x)

    return f(tf.constant(3.0)), f(tf.constant(-3.0))


@parity(modes=True)
def test_gradient_through_a_loop_body_returning_a_captured_tensor_under_an_inner_tape(tf):
    """A bounded ``while_loop`` whose body returns a tensor computed before the loop as it is
    (``lambda i, a: (i + 1, cc)``), recorded by a tape inside a ``tf.function``: the result is
    ``cc``, its gradient with respect to the Variable 1."""
    c = tf.Variable(3.0)

    @tf.function
    def g(a0):
        with tf.GradientTape() as tape:
            cc = c * 1.0
            _, a = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, cc), (0, a0), maximum_iterations=5)
        return a, tape.gradient(a, c)

    return g(tf.constant(1.0))


@parity(modes=True)
def test_optional_as_the_loop_variable_of_a_converted_while(tf):
    """The drain loop of TF's ``get_next_as_optional`` docs: ``opt`` re-read at the end of the body
    of ``while opt.has_value():``."""
    ds = tf.data.Dataset.from_tensor_slices([1.0, 2.0, 3.0])

    @tf.function
    def drain(it):
        total = tf.constant(0.0)
        opt = it.get_next_as_optional()
        while opt.has_value():
            total += opt.get_value()
            opt = it.get_next_as_optional()
        return total

    @tf.function
    def doubling(x):
        opt = tf.experimental.Optional.from_value(x)
        while opt.get_value() < 8.0:
            opt = tf.experimental.Optional.from_value(opt.get_value() * 2.0)
        return opt.get_value(), opt.has_value()

    return drain(iter(ds)), doubling(tf.constant(1.0)), doubling(tf.constant(9.0))


@parity(x64=True)
def test_shape_is_none_under_a_none_signature(tf):
    """``x.shape[0]`` of a ``[None, 3]`` signature argument is None in TF's trace (the program
    takes the ``is None`` branch for every call)."""
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        if x.shape[0] is None:
            return tf.reduce_sum(x, 0)
        return tf.reduce_mean(x, 0)

    return f(tf.ones([5, 3]))


@parity
def test_tensor_array_written_only_in_one_branch_of_a_tensor_if(tf):
    """A TensorArray of size 2 never written before a tensor ``if`` that writes it in one branch
    (the ``if`` branch; the ``else`` branch, a row of two); TF's ``stack`` gives zeros for the
    unwritten elements.  The same inside a ``for`` over ``tf.range`` whose ``continue`` skips the
    write, differentiated by a tape around the call."""
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=2)
        if x[0] >= 0:
            ta = ta.write(0, x[0])
        return ta.stack()

    @tf.function
    def g(x):
        ta = tf.TensorArray(tf.float32, size=2)
        if x[0] >= 0:
            pass
        else:
            ta = ta.write(1, x[:2])
        return ta.stack()

    @tf.function
    def skipping(x):
        ta = tf.TensorArray(tf.float32, size=4)
        for i in tf.range(4):
            if x[i] < 0:
                continue
            ta = ta.write(i, x[i] * 2.0)
        return ta.stack()

    x = tf.constant([1.0, -2.0, 3.0, -4.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(skipping(x) * tf.constant([1.0, 2.0, 3.0, 4.0]))
    return f(tf.constant([1.0, -2.0])), g(x), g(-x), y, tape.gradient(y, x)
