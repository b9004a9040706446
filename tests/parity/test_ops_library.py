"""The op library under TensorFlow and tapejax: each op's value and gradient, with broadcasting,
at ordinary points and at TF's kinks/ties (TF_SEMANTICS.md items 3, 11, 12, 19, 20, 21).

Cases are rows of tables (``vg`` records ``f`` on a tape that watches every input and returns
``(value, gradients)``); ``tests/test_ops_coverage.py`` reads this file to check that every public
op is called by some case here.
"""
import numpy as np

from .harness import parity, raises

LIN = np.array([[-1.5, -0.25, 0.4], [0.7, 1.3, 2.2]], np.float32)   # generic points, shape (2, 3)
POS = np.array([[0.3, 0.9, 1.7], [2.5, 0.05, 3.1]], np.float32)     # positive points
UNIT = np.array([[-0.9, -0.3, 0.1], [0.45, 0.6, 0.85]], np.float32)  # inside (-1, 1)
ROW = np.array([0.5, -1.0, 2.0], np.float32)                         # broadcasts against (2, 3)
COL = np.array([[1.5], [-0.5]], np.float32)                          # (2, 1)
SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], np.float32)
MAT = np.array([[2.0, -1.0, 0.5], [0.3, 1.5, -0.7], [1.0, 0.4, 2.5]], np.float32)


def vg(tf, f, *xs, dtype="float32"):
    """(f(*xs), d sum(f) / d xs) with every input watched; tuples are returned as lists."""
    xs = [tf.constant(np.asarray(x, dtype)) for x in xs]
    with tf.GradientTape() as t:
        t.watch(xs)
        y = f(*xs)
    g = t.gradient(y, xs)
    if isinstance(y, tuple):
        y = list(y)
    return y, g


def vg_many(tf, items, dtype="float32"):
    """Many ``vg`` at once with one gradient call (one compiled program): ``items`` are
    ``(f, *inputs)``; each op gets its own watched inputs, so the summed target's gradient with
    respect to op i's inputs is op i's own.  Returns ``[(value, gradients), ...]``."""
    xss = [[tf.constant(np.asarray(x, dtype)) for x in item[1:]] for item in items]
    with tf.GradientTape() as t:
        t.watch(xss)
        ys = [item[0](*xs) for item, xs in zip(items, xss)]
    gs = t.gradient(ys, xss)
    return [(list(y) if isinstance(y, tuple) else y, g) for y, g in zip(ys, gs)]


def vg2(tf, f, *xs):
    """Value, first and second derivatives (nested tapes) of a scalar-input function."""
    x = tf.constant(np.asarray(xs[0], "float32"))
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = f(x)
        g = t1.gradient(y, x)
    return y, g, t2.gradient(g, x)


def _make(name, fn, **opts):
    fn.__name__ = fn.__qualname__ = f"test_{name}"
    globals()[f"test_{name}"] = parity(**opts)(fn)


# --------------------------------------------------------------------------
# elementwise unary ops: value, gradient, second derivative
# --------------------------------------------------------------------------

UNARY = {
    "negative": (lambda tf: tf.math.negative, LIN), "square": (lambda tf: tf.math.square, LIN),
    "sqrt": (lambda tf: tf.math.sqrt, POS), "rsqrt": (lambda tf: tf.math.rsqrt, POS),
    "reciprocal": (lambda tf: tf.math.reciprocal, POS), "exp": (lambda tf: tf.math.exp, LIN),
    "expm1": (lambda tf: tf.math.expm1, LIN), "log": (lambda tf: tf.math.log, POS),
    "log1p": (lambda tf: tf.math.log1p, POS), "log_sigmoid": (lambda tf: tf.math.log_sigmoid, LIN),
    "sin": (lambda tf: tf.math.sin, LIN), "cos": (lambda tf: tf.math.cos, LIN),
    "tan": (lambda tf: tf.math.tan, UNIT), "asin": (lambda tf: tf.math.asin, UNIT),
    "acos": (lambda tf: tf.math.acos, UNIT), "atan": (lambda tf: tf.math.atan, LIN),
    "sinh": (lambda tf: tf.math.sinh, LIN), "cosh": (lambda tf: tf.math.cosh, LIN),
    "tanh": (lambda tf: tf.math.tanh, LIN), "asinh": (lambda tf: tf.math.asinh, LIN),
    "acosh": (lambda tf: tf.math.acosh, POS + 1), "atanh": (lambda tf: tf.math.atanh, UNIT),
    "sigmoid": (lambda tf: tf.math.sigmoid, LIN), "softplus": (lambda tf: tf.math.softplus, LIN),
    "softsign": (lambda tf: tf.math.softsign, LIN), "erf": (lambda tf: tf.math.erf, LIN),
    "erfc": (lambda tf: tf.math.erfc, LIN), "lgamma": (lambda tf: tf.math.lgamma, POS),
    "digamma": (lambda tf: tf.math.digamma, POS), "abs": (lambda tf: tf.math.abs, LIN),
    "sign": (lambda tf: tf.math.sign, LIN), "relu": (lambda tf: tf.nn.relu, LIN),
    "relu6": (lambda tf: tf.nn.relu6, LIN * 4), "elu": (lambda tf: tf.nn.elu, LIN),
    "selu": (lambda tf: tf.nn.selu, LIN), "leaky_relu": (lambda tf: tf.nn.leaky_relu, LIN),
    "gelu": (lambda tf: tf.nn.gelu, LIN), "silu": (lambda tf: tf.nn.silu, LIN),
    "swish": (lambda tf: tf.nn.swish, LIN), "nn_softplus": (lambda tf: tf.nn.softplus, LIN),
    "nn_softsign": (lambda tf: tf.nn.softsign, LIN), "nn_sigmoid": (lambda tf: tf.nn.sigmoid, LIN),
    "nn_tanh": (lambda tf: tf.nn.tanh, LIN),
}

# Second order (nested tapes) where TF's registered gradient-of-gradient is special or non-trivial;
# every op's second derivative is also checked numerically in tests/test_ops_gradcheck.py.
SECOND_ORDER = {"sqrt", "rsqrt", "reciprocal", "log", "tanh", "sigmoid", "selu", "elu", "softplus", "erf",
                "asin", "atan", "lgamma", "log_sigmoid", "gelu"}


def _group_case(rows):
    def case(tf):
        return vg_many(tf, [(op(tf), *pts) for op, *pts in rows])
    return case


def _groups(table, size):
    items = list(table.items())
    return [dict(items[i:i + size]) for i in range(0, len(items), size)]


def _unary_case2(op, pts):
    def case(tf):
        return vg2(tf, op(tf), pts)
    return case


# Piecewise-linear ops: TF's second derivative is None (the first is a constant); tapejax's
# nested-tape result there is the core's business (tests/parity/test_tape.py).
_LINEAR = {"negative", "abs", "sign", "relu", "relu6", "leaky_relu"}
_NO_TF_2ND = {"softsign", "nn_softsign"}  # TF registers no gradient for SoftsignGrad

for _g in _groups(UNARY, 12):
    _make("unary_" + "_".join(_g), _group_case(list(_g.values())), rtol=2e-5, atol=2e-6)
for _n, (_op, _pts) in UNARY.items():
    if _n in SECOND_ORDER - _LINEAR - _NO_TF_2ND:
        _make(f"unary2_{_n}", _unary_case2(_op, _pts[0]), rtol=1e-4, atol=1e-5)


TOP_LEVEL = ("sqrt exp sin cos tan asin acos atan sinh cosh square negative abs sign tanh sigmoid "
             "add subtract multiply divide pow maximum minimum equal not_equal less less_equal greater "
             "greater_equal logical_and logical_or logical_not reduce_sum reduce_mean reduce_max reduce_min "
             "reduce_prod reduce_logsumexp reduce_any reduce_all argmax argmin cumsum round atan2 add_n "
             "truediv ").split()


@parity
def test_top_level_aliases(tf):
    """The top-level names are tf.math's functions (the same objects), so one case covers both."""
    return [getattr(tf, n) is getattr(tf.math, n) for n in TOP_LEVEL]


# -- TF's conventions at kinks, ties and NaN (each case says why) --------------

@parity
def test_kink_abs_at_zero(tf):
    """abs'(0) = 0 in TF (JAX: 1)."""
    return vg(tf, tf.abs, [0.0, -1.0, 2.0])


@parity
def test_kink_relu_family_at_zero(tf):
    """relu'(0) = 0, relu6 passes nothing at 0 and 6, leaky_relu'(0) = alpha, elu'(0) = 1,
    selu'(0) = scale (JAX: scale * alpha)."""
    pts = [0.0, 6.0, -1.0]
    return [vg(tf, f, pts) for f in (tf.nn.relu, tf.nn.relu6, lambda x: tf.nn.leaky_relu(x, 0.3),
                                      tf.nn.elu, tf.nn.selu)]


@parity
def test_kink_maximum_minimum_ties(tf):
    """maximum/minimum give the whole gradient to x on ties (JAX splits 0.5/0.5); broadcasting."""
    x = [[1.0, 2.0], [0.0, 3.0]]
    y = [1.0, 3.0]
    _R = vg_many(tf, [
        (tf.maximum, x, y),
        (tf.minimum, x, y),
        (tf.math.maximum, x, x)])
    return _R[0], _R[1], _R[2]


@parity
def test_kink_reduce_max_min_split_ties(tf):
    """reduce_max/reduce_min split the gradient evenly among tied elements."""
    _R = vg_many(tf, [
        (tf.reduce_max, [1.0, 3.0, 3.0]),
        (tf.math.reduce_min, [1.0, 1.0, 3.0]),
        (lambda x: tf.reduce_max(x, axis=1), [[2.0, 2.0], [1.0, 4.0]])])
    return tuple(_R)


@parity
def test_kink_clip_by_value_bounds(tf):
    """clip_by_value passes the gradient at its bounds (inclusive); outside, the bound gets it."""
    return vg(tf, tf.clip_by_value, [0.0, 1.0, 2.0, -1.0, 3.0], 0.0, 2.0)


@parity
def test_kink_clip_by_value_broadcast(tf):
    """clip_by_value with tensor bounds broadcasting against t."""
    return vg(tf, tf.clip_by_value, LIN, [[-0.3], [1.0]], [0.2, 1.0, 2.0])


@parity
def test_nan_sqrt_where(tf):
    """sqrt's gradient is 0 where the incoming gradient is 0: where(x > 0, sqrt(x), 0) is finite."""
    return vg(tf, lambda x: tf.where(x > 0, tf.sqrt(x), 0.0), [0.0, -1.0, 4.0])


@parity
def test_nan_rsqrt_reciprocal_where(tf):
    """rsqrt and reciprocal follow the same rule as sqrt."""
    _R = vg_many(tf, [
        (lambda x: tf.where(x > 0, tf.math.rsqrt(x), 0.0), [0.0, -1.0, 4.0]),
        (lambda x: tf.where(x > 0, tf.math.reciprocal(x), 0.0), [0.0, -1.0, 4.0])])
    return tuple(_R)


@parity
def test_nan_sqrt_at_zero_is_inf(tf):
    """sqrt'(0) is inf, rsqrt'(0) -inf (the rule above applies only to a zero incoming gradient)."""
    _R = vg_many(tf, [
        (tf.sqrt, [0.0]),
        (tf.math.rsqrt, [0.0])])
    return _R[0], _R[1]


@parity
def test_nan_pow_conventions(tf):
    """pow: d/dy = 0 at x = 0 and at a negative base; d/dx(0 ** 0) is NaN; broadcasting."""
    _R = vg_many(tf, [
        (tf.pow, [0.0, -2.0, 2.0, 0.0], [2.0, 2.0, 0.5, 0.0]),
        (tf.math.pow, POS, ROW)])
    return tuple(_R)


@parity
def test_nan_divide_no_nan(tf):
    """divide_no_nan: 0 where y == 0, with zero gradients there."""
    _R = vg_many(tf, [
        (tf.math.divide_no_nan, [1.0, 0.0, 3.0], [0.0, 0.0, 2.0]),
        (tf.math.divide_no_nan, LIN, COL)])
    return _R[0], _R[1]


@parity
def test_nan_multiply_no_nan(tf):
    """multiply_no_nan: 0 where y == 0 even for x = inf; d/dy there is x (inf)."""
    return vg(tf, tf.math.multiply_no_nan, [np.inf, 1.0, 2.0], [0.0, 0.0, 3.0])


@parity
def test_nan_xlogy_xdivy(tf):
    """xlogy(0, 0) = 0 with zero gradients; xdivy likewise; broadcasting."""
    _R = vg_many(tf, [
        (tf.math.xlogy, [0.0, 0.0, 2.0], [0.0, 1.0, 3.0]),
        (tf.math.xdivy, [0.0, 1.0], [0.0, 2.0]),
        (tf.math.xlogy, POS, ROW * ROW)])
    return tuple(_R)


@parity
def test_nondiff_ops_give_none(tf):
    """floor, ceil, round, floordiv and integer paths give None (TF registers no gradient); sign gives 0."""
    x = tf.constant([0.4, 1.5, -2.5, 2.5])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        ys = [tf.floor(x), tf.math.ceil(x), tf.round(x), tf.math.floordiv(x, 2.0),
              tf.cast(tf.cast(x, tf.int32), tf.float32), tf.cast(tf.argmax(x), tf.float32),
              tf.cast(tf.equal(x, 1.5), tf.float32), tf.zeros_like(x) + 1.0, tf.ones_like(x) * 2.0,
              tf.sign(x), tf.cast(tf.math.is_nan(x), tf.float32)]
    return ys, [t.gradient(y, x) for y in ys]


@parity
def test_round_half_to_even(tf):
    """round is half-to-even."""
    return tf.round(tf.constant([0.5, 1.5, 2.5, -0.5, -1.5]))


@parity
def test_top_k_and_argmax_prefer_lower_index(tf):
    """top_k and argmax prefer the lower index on ties; top_k's gradient routes to those."""
    r = vg(tf, lambda x: tf.math.top_k(x, 2).values, [1.0, 3.0, 3.0])
    tk = tf.math.top_k(tf.constant([[1.0, 3.0, 3.0], [5.0, 5.0, 0.0]]), k=2)
    return r, tk.values, tk.indices, tf.argmax(tf.constant([3.0, 3.0, 1.0]), output_type=tf.int32)


@parity
def test_max_pool_first_maximum(tf):
    """max_pool2d routes the gradient to the first maximum of each window."""
    return vg(tf, lambda x: tf.nn.max_pool2d(tf.reshape(x, [1, 2, 2, 1]), 2, 2, "VALID"), [1.0, 1.0, 1.0, 1.0])


@parity
def test_sort_ties_stable(tf):
    """sort is stable: tied values keep their order, and their gradients follow them."""
    return vg(tf, lambda x: tf.sort(x) * tf.constant([1.0, 2.0, 3.0]), [1.0, 1.0, 0.0])


@parity
def test_norm_at_zero_is_nan(tf):
    """tf.norm and reduce_euclidean_norm at 0: NaN gradient (as TF); l2_normalize at 0 is finite."""
    _R = vg_many(tf, [
        (tf.norm, [0.0, 0.0]),
        (tf.math.reduce_euclidean_norm, [0.0, 0.0]),
        (tf.math.l2_normalize, [0.0, 0.0])])
    return tuple(_R)


@parity
def test_clip_by_norm_at_zero(tf):
    """clip_by_norm is finite at 0 (TF's formula) and scales above the norm."""
    _R = vg_many(tf, [
        (lambda x: tf.clip_by_norm(x, 1.0), [0.0, 0.0]),
        (lambda x: tf.clip_by_norm(x, 1.0), [3.0, 4.0])])
    return _R[0], _R[1]


@parity
def test_reduce_logsumexp_all_neg_inf(tf):
    """reduce_logsumexp of all -inf is -inf with a NaN gradient (TF's formula)."""
    return vg(tf, tf.reduce_logsumexp, [-np.inf, -np.inf])


@parity
def test_reduce_std_constant_input(tf):
    """reduce_std of a constant vector: value 0, gradient NaN (sqrt'(0) * 0)."""
    return vg(tf, tf.math.reduce_std, [1.0, 1.0])


@parity
def test_sigmoid_cross_entropy_at_zero(tf):
    """sigmoid_cross_entropy_with_logits at logits 0: gradient sigmoid(0) - labels exactly."""
    return vg(tf, lambda l, z: tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=z), [0.0, 1.0, 0.3],
              [0.0, 0.0, 0.0])


# --------------------------------------------------------------------------
# binary elementwise ops with broadcasting
# --------------------------------------------------------------------------

BINARY = {
    "add": (lambda tf: tf.add, LIN, ROW), "subtract": (lambda tf: tf.subtract, LIN, COL),
    "multiply": (lambda tf: tf.multiply, LIN, ROW), "divide": (lambda tf: tf.divide, LIN, POS),
    "truediv": (lambda tf: tf.math.truediv, COL, POS), "floormod": (lambda tf: tf.math.floormod, POS * 3, POS),
    "mod": (lambda tf: tf.math.mod, POS * 3, COL + 2), "pow": (lambda tf: tf.pow, POS, ROW),
    "maximum": (lambda tf: tf.maximum, LIN, ROW), "minimum": (lambda tf: tf.minimum, LIN, COL),
    "squared_difference": (lambda tf: tf.math.squared_difference, LIN, ROW),
    "atan2": (lambda tf: tf.math.atan2, LIN, POS), "top_atan2": (lambda tf: tf.atan2, LIN, ROW),
    "divide_no_nan": (lambda tf: tf.math.divide_no_nan, LIN, ROW),
    "multiply_no_nan": (lambda tf: tf.math.multiply_no_nan, LIN, ROW),
    "xlogy": (lambda tf: tf.math.xlogy, LIN, POS), "xdivy": (lambda tf: tf.math.xdivy, LIN, POS),
    "floormod_b": (lambda tf: tf.math.floormod, POS * 3, ROW * ROW + 0.5),
    "math_add": (lambda tf: tf.math.add, LIN, COL), "math_subtract": (lambda tf: tf.math.subtract, LIN, ROW),
    "math_multiply": (lambda tf: tf.math.multiply, LIN, COL), "math_divide": (lambda tf: tf.math.divide, LIN, POS),
    "math_minimum": (lambda tf: tf.math.minimum, LIN, COL),
}


for _g in _groups(BINARY, 8):
    _make("binary_" + "_".join(_g), _group_case(list(_g.values())), rtol=2e-5, atol=2e-6)


@parity
def test_comparisons_and_logic(tf):
    """Comparisons and logical ops: bool results with broadcasting; no gradient (None)."""
    a, b = tf.constant(LIN), tf.constant(ROW)
    t, f = tf.constant([[True, False]]), tf.constant([[True], [False]])
    with tf.GradientTape() as g:
        g.watch(a)
        outs = [tf.equal(a, b), tf.not_equal(a, b), tf.less(a, b), tf.less_equal(a, b), tf.greater(a, b),
                tf.greater_equal(a, b), tf.math.equal(a, 0.4), tf.math.less(a, 1.0),
                tf.math.greater(a, 0.0), tf.math.not_equal(a, b), tf.math.less_equal(a, b),
                tf.math.greater_equal(a, b)]
    logic = [tf.logical_and(t, f), tf.logical_or(t, f), tf.logical_not(t), tf.math.logical_xor(t, f),
             tf.math.logical_and(t, f), tf.math.logical_or(t, f), tf.math.logical_not(f)]
    return outs, logic, g.gradient(tf.cast(outs[2], tf.float32), a)


@parity
def test_is_nan_inf_finite(tf):
    """is_nan / is_inf / is_finite."""
    x = tf.constant([0.0, np.nan, np.inf, -np.inf])
    return tf.math.is_nan(x), tf.math.is_inf(x), tf.math.is_finite(x)


@parity
def test_floordiv_ints_and_floats(tf):
    """floordiv rounds toward -inf for ints and floats; no gradient."""
    return (tf.math.floordiv(tf.constant([7, -7]), tf.constant([2, 2])), tf.math.floordiv(tf.constant([7.5, -7.5]), 2.0),
            vg(tf, tf.math.floordiv, [7.0], [2.0]))


@parity
def test_add_n(tf):
    """add_n sums equally shaped tensors; every input gets the gradient."""
    _R = vg_many(tf, [
        (lambda a, b: tf.add_n([a, b, a]), LIN, LIN * 2),
        (lambda a: tf.math.add_n([a]), ROW)])
    return _R[0], _R[1]


@parity
def test_add_n_errors(tf):
    """add_n: an empty list is ValueError, unequal shapes InvalidArgumentError."""
    return (raises(tf.add_n, []), raises(tf.math.add_n, [tf.ones([2]), tf.ones([3])]))


@parity
def test_dtype_errors(tf):
    """Float-only kernels reject ints with InvalidArgumentError; mixed dtypes too."""
    return (raises(tf.sqrt, tf.constant(4)), raises(tf.math.sin, tf.constant(4)), raises(tf.math.log, 4),
            raises(tf.math.floor, tf.constant(4)), raises(tf.nn.softmax, tf.constant([1, 2])),
            raises(tf.maximum, tf.ones([2]), tf.ones([2], tf.int32)), raises(tf.add, tf.ones([2]), tf.ones([3])),
            raises(tf.math.is_nan, tf.constant(2)), raises(tf.math.reduce_std, tf.constant([2, 3])))


@parity
def test_int_ops_keep_dtype(tf):
    """abs, sign, round, relu, squared_difference, clip_by_value keep integer dtypes."""
    i = tf.constant([-3, 0, 4])
    return (tf.abs(i), tf.sign(i), tf.round(i), tf.nn.relu(i), tf.math.squared_difference(i, 1),
            tf.clip_by_value(i, 0, 3), tf.maximum(i, 1), tf.math.reduce_mean(i), tf.pow(i, 2))


# --------------------------------------------------------------------------
# reductions, scans, selection
# --------------------------------------------------------------------------

REDUCE = {"reduce_sum": lambda tf: tf.math.reduce_sum, "reduce_mean": lambda tf: tf.math.reduce_mean,
          "reduce_max": lambda tf: tf.math.reduce_max, "reduce_min": lambda tf: tf.math.reduce_min,
          "reduce_prod": lambda tf: tf.math.reduce_prod, "reduce_logsumexp": lambda tf: tf.math.reduce_logsumexp,
          "reduce_std": lambda tf: tf.math.reduce_std, "reduce_variance": lambda tf: tf.math.reduce_variance,
          "reduce_euclidean_norm": lambda tf: tf.math.reduce_euclidean_norm}


def _reduce_case(op):
    def case(tf):
        f = op(tf)
        return vg_many(tf, [(f, LIN), (lambda x: f(x, axis=1), LIN), (lambda x: f(x, axis=0, keepdims=True), LIN),
                            (lambda x: f(x, axis=[0, 1]), POS), (lambda x: f(x, -1), POS)])
    return case


for _n, _op in REDUCE.items():
    _make(f"reduce_{_n}", _reduce_case(_op), rtol=2e-5, atol=2e-6)


@parity
def test_reduce_top_level_names(tf):
    """The top-level reduce_* names are tf.math's."""
    _R = vg_many(tf, [
        (tf.reduce_sum, LIN),
        (tf.reduce_mean, LIN),
        (tf.reduce_max, LIN),
        (tf.reduce_min, LIN),
        (tf.reduce_prod, LIN),
        (tf.reduce_logsumexp, LIN)])
    return tuple(_R)


@parity
def test_reduce_any_all(tf):
    """reduce_any / reduce_all over axes."""
    b = tf.constant([[True, False], [True, True]])
    return (tf.reduce_any(b), tf.reduce_all(b, axis=1), tf.math.reduce_any(b, axis=0, keepdims=True),
            tf.math.reduce_all(b), raises(tf.reduce_sum, tf.ones([3]), axis=2))


@parity(x64=True)
def test_argmax_argmin_int64(tf):
    """argmax / argmin: int64 by default; axis=None means 0."""
    x = tf.constant(LIN)
    return (tf.argmax(x), tf.math.argmax(x, axis=1), tf.argmin(x, 1), tf.math.argmin(x),
            tf.math.argmax(x, output_type=tf.int32))


@parity(x64=True)
def test_count_nonzero(tf):
    """count_nonzero: int64 by default."""
    x = tf.constant([[0.0, 1.0], [2.0, 0.0]])
    return tf.math.count_nonzero(x), tf.math.count_nonzero(x, axis=1, dtype=tf.int32)


SCANS = {"cumsum": lambda tf: tf.math.cumsum, "cumprod": lambda tf: tf.math.cumprod,
         "cumulative_logsumexp": lambda tf: tf.math.cumulative_logsumexp}


def _scan_case(op):
    def case(tf):
        f = op(tf)
        return vg_many(tf, [(f, POS), (lambda x: f(x, axis=1, exclusive=True), POS),
                            (lambda x: f(x, axis=1, reverse=True), POS),
                            (lambda x: f(x, axis=-1, exclusive=True, reverse=True), POS)])
    return case


for _n, _op in SCANS.items():
    _make(f"scan_{_n}", _scan_case(_op), rtol=2e-5, atol=2e-6)


@parity
def test_scan_axis_must_be_a_scalar(tf):
    """A scan's axis is one int: a list, a tuple or a rank-1 tensor is an InvalidArgumentError, None a
    ValueError (TF converts it to a Tensor)."""
    x = tf.constant([1.0, 2.0, 3.0])
    return (raises(tf.cumsum, x, axis=[0]), raises(tf.math.cumprod, x, axis=(0,)),
            raises(tf.math.cumulative_logsumexp, x, axis=tf.constant([0])), raises(tf.cumsum, x, axis=None))


@parity
def test_cumsum_top_level(tf):
    """tf.cumsum is tf.math.cumsum."""
    return vg(tf, lambda x: tf.cumsum(x, axis=1), LIN)


@parity
def test_where_select_broadcast(tf):
    """where(c, x, y) broadcasts; each branch gets the gradient where it is chosen."""
    c = tf.constant([[True], [False]])
    _R = vg_many(tf, [
        (lambda x, y: tf.where(c, x, y), LIN, ROW),
        (lambda x: tf.where(x > 0.5, x, 0.0), LIN)])
    return _R[0], _R[1]


@parity(x64=True)
def test_where_coordinates(tf):
    """where(c): int64 coordinates of the true entries."""
    return tf.where(tf.constant([[True, False], [False, True]])), tf.where(tf.constant([0.0, 2.0]))


@parity
def test_clip_by_global_norm(tf):
    """clip_by_global_norm: (clipped list, norm); None entries stay None; gradients through both."""
    def f(a, b):
        out, n = tf.clip_by_global_norm([a, None, b], 1.0)
        return [out[0], out[2], n]
    return vg(tf, f, [3.0, 0.0], [[4.0]]), tf.clip_by_global_norm([tf.constant([3.0, 4.0])], 10.0)[0]


@parity
def test_global_norm(tf):
    """linalg.global_norm: the norm of every entry of a list (None skipped); its gradient."""
    return vg(tf, lambda a, b: tf.linalg.global_norm([a, None, b]), [3.0, 0.0], [[4.0], [-1.0]])


@parity
def test_l2_normalize(tf):
    """l2_normalize over an axis (also tf.nn.l2_normalize, tf.linalg.l2_normalize)."""
    _R = vg_many(tf, [
        (lambda x: tf.math.l2_normalize(x, axis=1), LIN),
        (tf.nn.l2_normalize, ROW),
        (lambda x: tf.linalg.l2_normalize(x, 0), LIN),
        (lambda x: tf.math.l2_normalize(x, epsilon=4.0), [2.0])])   # (a tie of TF's maximum: through the sum)
    return tuple(_R)


@parity
def test_polyval(tf):
    """polyval: gradients to x and to the tensor coefficients."""
    return vg(tf, lambda c, x: tf.math.polyval([c, 2.0, -1.0], x), [1.5], LIN)


@parity
def test_top_k(tf):
    """top_k values and int32 indices; gradient through the values."""
    r = tf.math.top_k(tf.constant(LIN), k=2)
    return r.values, r.indices, vg(tf, lambda x: tf.math.top_k(x, 2).values, LIN)


@parity
def test_segment_sums(tf):
    """segment_sum / unsorted_segment_sum scatter-add rows; the gradient gathers back."""
    ids = tf.constant([0, 0, 2])
    _R = vg_many(tf, [
        (lambda x: tf.math.unsorted_segment_sum(x, ids, 4), [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
        (lambda x: tf.math.segment_sum(x, tf.constant([0, 0, 1])), [1.0, 2.0, 3.0])])
    return tuple(_R)


@parity
def test_bincount(tf):
    """bincount: int32 counts, weights, minlength/maxlength."""
    a = tf.constant([1, 1, 3, 0])
    return (tf.math.bincount(a), tf.math.bincount(a, minlength=6), tf.math.bincount(a, maxlength=2),
            tf.math.bincount(a, weights=tf.constant([0.5, 1.0, 2.0, 3.0])))


@parity
def test_bincount_axis_and_binary_output(tf):
    """bincount axis=-1 (a histogram per row of a rank-2 input; rank 1 is flattened), axis=0 (as
    None), binary_output, weights per row, maxlength dropping values; errors: other axes,
    binary_output with weights, rank 3 with axis=-1, negative values."""
    a = tf.constant([[1, 2, 2], [0, 0, 4]])
    w = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    return (tf.math.bincount(a, axis=-1), tf.math.bincount(a, axis=0),
            tf.math.bincount(a, axis=-1, binary_output=True),
            tf.math.bincount(a, binary_output=True, dtype=tf.float32),
            tf.math.bincount(a, weights=w, axis=-1), tf.math.bincount(a, axis=-1, minlength=7),
            tf.math.bincount(a, axis=-1, maxlength=2), tf.math.bincount(tf.constant([3, 1]), axis=-1),
            raises(tf.math.bincount, a, axis=1),
            raises(tf.math.bincount, a, weights=w, binary_output=True),
            raises(tf.math.bincount, tf.constant([[[1, 2]]]), axis=-1),
            raises(tf.math.bincount, tf.constant([[1, -2]])),
            raises(tf.math.bincount, tf.constant([[1, -2]]), axis=-1))


@parity
def test_cast_identity(tf):
    """cast float -> int truncates toward zero; identity passes the gradient."""
    _R = vg_many(tf, [
        (lambda x: tf.cast(x, tf.float16), ROW),
        (tf.identity, ROW)])
    return (tf.cast(tf.constant([1.7, -1.7]), tf.int32), _R[0],
            _R[1])


# --------------------------------------------------------------------------
# array ops
# --------------------------------------------------------------------------

ARR = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10.0


@parity
def test_reshape_transpose(tf):
    """reshape (with -1) and transpose (default reverses axes; perm)."""
    _R = vg_many(tf, [
        (lambda x: tf.reshape(x, [4, -1]) * tf.range(6.0), ARR),
        (tf.transpose, LIN),
        (lambda x: tf.transpose(x, [1, 2, 0]) * tf.range(2.0), ARR)])
    return (_R[0], _R[1],
            _R[2],
            raises(tf.reshape, tf.ones([6]), [4]), raises(tf.transpose, tf.ones([2, 3]), [0]))


@parity
def test_concat_stack_unstack_split(tf):
    """concat / stack / unstack / split with gradients into each piece."""
    w = tf.range(1.0, 7.0)
    _R = vg_many(tf, [
        (lambda a, b: tf.concat([a, b], axis=0) * tf.reshape(w, [3, 2])[:, :1], [[1.0], [2.0]], [[3.0]]),
        (lambda a, b: tf.stack([a, b], axis=1) * tf.constant([1.0, 2.0]), ROW, ROW * 2),
        (lambda x: tf.unstack(x, axis=1)[2] * 3.0, LIN),
        (lambda x: tf.split(x, 3, axis=1)[1] * 2.0, LIN),
        (lambda x: tf.split(x, [1, -1], axis=1)[1] * 2.0, LIN)])
    return (_R[0],
            _R[1],
            _R[2],
            _R[3],
            _R[4],
            raises(tf.concat, [tf.ones([2, 3]), tf.ones([2, 2])], 0), raises(tf.split, tf.ones([5]), 2))


@parity
def test_squeeze_expand_tile_pad(tf):
    """squeeze / expand_dims / tile / pad (CONSTANT with a value, REFLECT, SYMMETRIC)."""
    _R = vg_many(tf, [
        (lambda x: tf.squeeze(x, axis=1) * 2.0, [[1.0], [2.0]]),
        (tf.squeeze, [[[1.0, 2.0]]]),
        (lambda x: tf.expand_dims(x, -1) * tf.constant([[1.0], [2.0], [3.0]]), ROW),
        (lambda x: tf.tile(x, [2, 2]) * tf.reshape(tf.range(24.0), [4, 6]), LIN),
        (lambda x: tf.pad(x, [[1, 0], [0, 2]], constant_values=3.0), LIN),
        (lambda x: tf.pad(x, [[0, 0], [2, 1]], mode="REFLECT") * tf.range(6.0), LIN),
        (lambda x: tf.pad(x, [[1, 1], [0, 0]], mode="symmetric") * tf.range(3.0), LIN)])
    return (_R[0], _R[1],
            _R[2],
            _R[3],
            _R[4],
            _R[5],
            _R[6],
            raises(tf.squeeze, tf.ones([3]), axis=0), raises(tf.tile, tf.ones([2]), [2, 2]),
            raises(tf.pad, tf.ones([2]), [[1, 1]], mode="foo"))


@parity
def test_gather_family(tf):
    """gather (axis, batch_dims), gather_nd, embedding_lookup: repeated indices sum their gradients."""
    _R = vg_many(tf, [
        (lambda x: tf.gather(x, [0, 0, 1]) * 2.0, LIN),
        (lambda x: tf.gather(x, [[2, 0], [1, 1]], axis=1), LIN),
        (lambda x: tf.gather(x, [[1], [2]], axis=1, batch_dims=1), LIN),
        (lambda x: tf.gather_nd(x, [[0, 1], [1, 2], [0, 1]]), LIN),
        (lambda x: tf.gather_nd(x, [[1]]), LIN),
        (lambda x: tf.nn.embedding_lookup(x, [1, 1, 0]), LIN)])
    return (_R[0],
            _R[1],
            _R[2],
            _R[3],
            _R[4],
            _R[5],
            raises(tf.gather, tf.ones([3, 2]), [0], axis=2))


@parity
def test_embedding_lookup_sharded_div_strategy(tf):
    """embedding_lookup over a list of shards: TF2's "div" layout (first N % P shards one row
    longer); shards not in that layout still map ids by it; ids past the rows, or rows a shard
    lacks, are InvalidArgumentError, no shards a ValueError; gradients reach each shard Variable
    (densified)."""
    p0 = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    p1 = tf.constant(np.arange(100, 104, dtype=np.float32).reshape(2, 2))
    p2 = tf.constant(np.arange(200, 204, dtype=np.float32).reshape(2, 2))
    v0, v1 = tf.Variable(p0), tf.Variable(p1)
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.nn.embedding_lookup([v0, v1], tf.constant([[0, 4], [3, 3]])) * 2.0)
    g0, g1 = t.gradient(y, [v0, v1])
    return (tf.nn.embedding_lookup([p0, p1, p2], tf.constant([6, 0, 3, 5, 2, 1, 4])),
            tf.nn.embedding_lookup([p1, p0], tf.constant([3, 4, 0, 1])),
            tf.nn.embedding_lookup([p0, p1, p2], tf.constant([[1, 5]]), max_norm=1.0),
            tf.convert_to_tensor(g0), tf.convert_to_tensor(g1),
            raises(tf.nn.embedding_lookup, [p0, p1, p2], tf.constant([7])),
            raises(tf.nn.embedding_lookup, [p1, p0], tf.constant([2])),
            raises(tf.nn.embedding_lookup, [], tf.constant([0])))


@parity
def test_gather_from_variable_sparse_gradient(tf):
    """Gather from a Variable: the gradient is IndexedSlices (tests/parity/test_indexed_slices.py);
    densified, the repeated row is summed."""
    v = tf.Variable(LIN)
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.gather(v, [1, 1]) * 2.0)
    g = t.gradient(y, v)
    return type(g).__name__, tf.convert_to_tensor(g)


@parity
def test_slice_getitem(tf):
    """tf.slice (size -1) and strided slicing through __getitem__."""
    i = tf.constant(1)
    _R = vg_many(tf, [
        (lambda x: tf.slice(x, [0, 1, 1], [-1, 2, 2]) * 2.0, ARR),
        (lambda x: x[1, ::2, tf.newaxis, -1] * 3.0, ARR),
        (lambda x: x[..., 1:3] * 2.0 + x[i][:, 1:3], ARR)])
    return tuple(_R)


@parity
def test_boolean_mask(tf):
    """boolean_mask (the gradient scatters back into the masked positions)."""
    _R = vg_many(tf, [
        (lambda x: tf.boolean_mask(x, [True, False]) * 2.0, LIN),
        (lambda x: tf.boolean_mask(x, [[True, False, True], [False, False, True]]) * tf.range(3.0), LIN),
        (lambda x: tf.boolean_mask(x, [False, True, True], axis=1), LIN)])
    return tuple(_R)


@parity
def test_bool_tensors_and_value_conventions(tf):
    """What TF does with bool tensors and a few argument forms: ``*`` of bool tensors is their
    logical and (``tf.multiply`` has no bool kernel, nor have ``+``, ``<``, ``tf.maximum``, the
    reductions, ``cumsum``, ``abs``, ``matmul``); the logical ops take bool only; a numeric
    ``boolean_mask`` keeps the nonzero entries; ``tf.random.shuffle`` of a scalar gives it back;
    ``tf.range`` casts a tensor bound to an integer ``dtype`` but refuses a Python float."""
    b = tf.constant([True, False, True])
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return (b * b, b * True, b == b, b & b, tf.logical_and(b, b), tf.logical_not(b),
            raises(lambda: b + b), raises(lambda: b < b), raises(tf.maximum, b, b), raises(tf.reduce_sum, b),
            raises(tf.reduce_mean, b), raises(tf.reduce_max, b), raises(tf.cumsum, b), raises(tf.abs, b),
            raises(tf.math.reduce_std, b), raises(tf.math.reduce_variance, b),
            raises(tf.square, b), raises(tf.matmul, tf.constant([[True]]), tf.constant([[True]])),
            raises(tf.logical_and, tf.ones(2), tf.ones(2)), raises(tf.logical_not, tf.ones(2)),
            tf.boolean_mask(tf.range(3.0), tf.constant([1, 0, 2])), tf.boolean_mask(tf.range(3.0), [1.0, 0.0, 0.5]),
            tf.random.shuffle(tf.constant(1.5)), tf.range(tf.constant(1.0), 3, dtype=tf.int32),
            raises(tf.range, 0.5, 3, dtype=tf.int32), raises(tf.nn.moments, x, axes=[2]),
            raises(tf.norm, x, axis=2), raises(tf.norm, x, ord="fro"), raises(tf.norm, x, ord="fro", axis=0),
            tf.norm(x, ord="fro", axis=[0, 1]), raises(tf.identity, None),
            raises(tf.histogram_fixed_width, tf.ones(3), [1.0, 0.0]),
            raises(tf.histogram_fixed_width, tf.ones(3), [0.0, 1.0], nbins=0),
            tf.histogram_fixed_width(tf.constant([0.1, 1.5, 1.9]), [0.0, 2.0], nbins=4))


@parity
def test_empty_reductions_casts_and_argument_checks(tf):
    """Reductions over no elements give the identity (max: -inf or the integer minimum); softmax
    cross-entropy casts integer labels to the logits' dtype and computes half logits in float32;
    and TF's errors for a float ``depth``, bool or unsigned inputs TF has no kernel for, a range
    running the wrong way, a constant of another dtype in ``pad``, zero pooling windows, an axis
    out of range or given twice, float ``in_top_k`` targets, a ``noise_shape`` that does not fit."""
    x = tf.constant([[1.0, 2.0, 3.0]])
    return (tf.reduce_max(tf.zeros((2, 0)), axis=1), tf.reduce_min(tf.zeros((0,))),
            tf.reduce_max(tf.zeros((0,), tf.int32)), tf.reduce_logsumexp(tf.zeros((2, 0)), axis=1),
            tf.reduce_prod(tf.zeros((0,), tf.int32)), tf.reduce_max(tf.zeros((0, 2)), axis=1),
            tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant([[0, 0, 1]]), logits=x),
            tf.nn.softmax_cross_entropy_with_logits(labels=[[0.0, 0.0, 1.0]], logits=tf.cast(x, tf.float16)),
            vg(tf, lambda z: tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant([[0, 1, 0]]), logits=z), x),
            raises(tf.one_hot, [0, 1], 2.5), raises(tf.sort, tf.constant([True, False])),
            raises(tf.argsort, tf.constant([True, False])), raises(tf.range, 5, 0), raises(tf.range, 0, 5, -1),
            tf.range(5, 0, -2), raises(tf.abs, tf.constant([1], tf.uint8)),
            raises(tf.negative, tf.constant([1], tf.uint8)), tf.square(tf.constant([3], tf.uint8)),
            raises(tf.pad, x, [[1, 0], [0, 0]], constant_values=tf.constant(1)),
            tf.pad(x, [[1, 0], [0, 0]], constant_values=2),
            raises(tf.nn.max_pool2d, tf.ones((1, 4, 4, 2)), 0, 1, "VALID"),
            raises(tf.nn.avg_pool2d, tf.ones((1, 4, 4, 2)), 2, 0, "VALID"),
            raises(tf.math.l2_normalize, x, axis=2), raises(tf.linalg.band_part, tf.ones(3), 0, 0),
            raises(tf.reverse, x, [0, 0]), raises(tf.math.in_top_k, tf.constant([0.0]), x, 1),
            raises(tf.nn.dropout, tf.ones((2, 3)), 0.5, noise_shape=[3, 3], seed=1))


@parity
def test_one_hot(tf):
    """one_hot: float32 default, on/off values (with gradients), axis."""
    return (tf.one_hot([0, 2, -1], 3), tf.one_hot([[1], [0]], 2, axis=0),
            vg(tf, lambda on, off: tf.one_hot([0, 2], 3, on_value=on, off_value=off), 2.0, -1.0),
            tf.one_hot(tf.constant([1]), 2, dtype=tf.int32), raises(tf.one_hot, tf.constant([1.0]), 3))


@parity
def test_constructors(tf):
    """zeros/ones/fill/zeros_like/ones_like/range/linspace/eye/shape/rank/size dtypes and values."""
    x = tf.constant(LIN)
    return (tf.zeros([2, 1]), tf.ones(3, tf.int32), tf.fill([2], 3), tf.fill([2, 2], 1.5), tf.zeros_like(x),
            tf.ones_like(x, dtype=tf.int32), tf.range(5), tf.range(1, 6, 2), tf.range(1.0, 2.0, 0.25),
            tf.range(4, dtype=tf.float32), tf.linspace(0.0, 1.0, 5), tf.eye(2), tf.eye(2, 3),
            tf.eye(2, batch_shape=[2]), tf.shape(x), tf.rank(x), tf.size(x), tf.range(3), vg(tf, lambda v: tf.fill([3], v), 2.0))


@parity
def test_reverse_roll_repeat_broadcast_to(tf):
    """reverse / roll / repeat / broadcast_to with gradients."""
    w = tf.reshape(tf.range(6.0), [2, 3])
    _R = vg_many(tf, [
        (lambda x: tf.reverse(x, [1]) * w, LIN),
        (lambda x: tf.roll(x, 1, axis=1) * w, LIN),
        (lambda x: tf.roll(x, [1, -1], axis=[0, 1]) * w, LIN),
        (lambda x: tf.repeat(x, [1, 3], axis=0) * tf.range(3.0), LIN),
        (lambda x: tf.repeat(x, 2) * tf.range(12.0), LIN),
        (lambda x: tf.broadcast_to(x, [2, 2, 3]) * w, ROW)])
    return tuple(_R)


@parity
def test_roll_by_a_shift_known_only_when_the_compiled_step_runs(tf):
    """``tf.roll`` inside ``tf.function`` with the shift a traced argument (a vector for two axes, a
    scalar for one, negative and past the size), and a shift drawn inside the step: values and the
    gradient (the cotangent rolled back)."""
    w = tf.reshape(tf.range(12.0), [3, 4])

    @tf.function
    def step(x, shift, s0):
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.roll(x, shift=shift, axis=[0, 1]) * w + tf.roll(x, s0, axis=1) * w ** 2
        return y, t.gradient(y, x)

    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0)
    out = [step(x, tf.constant(s), tf.constant(s0)) for s, s0 in (([1, -1], 2), ([-4, 6], -1), ([0, 0], 0))]
    drawn = tf.function(lambda v: tf.roll(v, tf.reduce_sum(tf.cast(v > 0.5, tf.int32)), axis=0))
    return out, drawn(tf.constant([0.1, 0.9, 0.7, 0.2, 0.3]))


@parity
def test_sort_argsort_unique(tf):
    """sort (both directions) with gradients, argsort int32, unique (y, idx)."""
    x = tf.constant([3.0, 1.0, 2.0, 1.0])
    u = tf.unique(tf.constant([4, 1, 4, 2, 1]))
    _R = vg_many(tf, [
        (lambda v: tf.sort(v, direction="DESCENDING") * tf.range(4.0), x),
        (lambda v: tf.sort(v, axis=0) * tf.reshape(tf.range(6.0), [2, 3]), LIN)])
    return (_R[0],
            _R[1],
            tf.argsort(x), tf.argsort(x, direction="DESCENDING", stable=True), u.y, u.idx)


@parity
def test_scatters(tf):
    """scatter_nd (duplicates add), tensor_scatter_nd_update / _add, with gradients."""
    idx = tf.constant([[0], [2], [0]])
    _R = vg_many(tf, [
        (lambda u: tf.scatter_nd(idx, u, [4]), [1.0, 2.0, 3.0]),
        (lambda t, u: tf.tensor_scatter_nd_update(t, [[1], [3]], u) * tf.range(4.0), [1.0, 2.0, 3.0, 4.0],
               [9.0, 8.0]),
        (lambda t, u: tf.tensor_scatter_nd_add(t, [[1, 0]], u) * 2.0, LIN, [5.0])])
    return tuple(_R)


@parity
def test_meshgrid_einsum_tensordot(tf):
    """meshgrid (xy, ij), einsum, tensordot (int axes and axis lists)."""
    _R = vg_many(tf, [
        (lambda a, b: tf.meshgrid(a, b), [1.0, 2.0], [3.0, 4.0, 5.0]),
        (lambda a, b: tf.meshgrid(a, b, indexing="ij")[1], [1.0, 2.0], [3.0, 4.0, 5.0]),
        (lambda a, b: tf.einsum("ij,jk->ik", a, b), LIN, MAT),
        (lambda a, b: tf.linalg.einsum("bij,j->bi", a, b), ARR, [1.0, 2.0, 3.0, 4.0]),
        (lambda a, b: tf.tensordot(a, b, 1), LIN, MAT),
        (lambda a, b: tf.linalg.tensordot(a, b, [[1], [0]]), LIN, MAT)])
    return tuple(_R)


# --------------------------------------------------------------------------
# nn
# --------------------------------------------------------------------------

@parity
def test_softmax_log_softmax(tf):
    """softmax / log_softmax over the last axis or a given one."""
    w = tf.reshape(tf.range(6.0), [2, 3])
    _R = vg_many(tf, [
        (lambda x: tf.nn.softmax(x) * w, LIN),
        (lambda x: tf.nn.log_softmax(x, axis=0) * w, LIN),
        (lambda x: tf.nn.softmax(x, axis=-1)[:, 0], LIN)])
    return tuple(_R)


@parity
def test_cross_entropies(tf):
    """softmax (labels get -log_softmax), sparse softmax, sigmoid and weighted cross entropies."""
    lab = [[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]
    _R = vg_many(tf, [
        (lambda l, z: tf.nn.softmax_cross_entropy_with_logits(l, z), lab, LIN),
        (lambda z: tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant([2, 0]), z), LIN),
        (lambda l, z: tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=z), lab, LIN),
        (lambda l, z: tf.nn.weighted_cross_entropy_with_logits(l, z, 2.5), lab, LIN)])
    return (_R[0],
            _R[1],
            _R[2],
            _R[3],
            raises(tf.nn.sigmoid_cross_entropy_with_logits, tf.ones([2, 3]), tf.ones([2, 4])))


@parity
def test_losses(tf):
    """l2_loss and log_poisson_loss (with the Stirling term)."""
    _R = vg_many(tf, [
        (tf.nn.l2_loss, LIN),
        (lambda t, l: tf.nn.log_poisson_loss(t, l), POS, LIN),
        (lambda t, l: tf.nn.log_poisson_loss(t, l, compute_full_loss=True), POS * 2, LIN)])
    return tuple(_R)


@parity
def test_moments_batch_normalization(tf):
    """moments (axes, keepdims) and batch_normalization with broadcasting parameters."""
    _R = vg_many(tf, [
        (lambda x: tf.nn.moments(x, axes=[0]), LIN),
        (lambda x: tf.nn.moments(x, axes=[0, 1], keepdims=True), LIN),
        (lambda x: tf.nn.moments(x, axes=None), LIN),
        (lambda x, m, v, o, s: tf.nn.batch_normalization(x, m, v, o, s, 1e-3), LIN, ROW, POS[0], [0.1],
               [2.0, 1.0, 0.5]),
        (lambda x: tf.nn.batch_normalization(x, 0.5, 2.0, None, None, 1e-3), LIN)])
    return tuple(_R)


@parity
def test_bias_add(tf):
    """bias_add along the last axis (NHWC) or axis 1 (NCHW)."""
    _R = vg_many(tf, [
        (tf.nn.bias_add, ARR, [1.0, 2.0, 3.0, 4.0]),
        (lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW") * tf.range(4.0), ARR, [1.0, 2.0, 3.0])])
    return (_R[0],
            _R[1],
            raises(tf.nn.bias_add, tf.ones([2, 3]), tf.ones([4])))


IMG = (np.arange(2 * 5 * 5 * 3, dtype=np.float32).reshape(2, 5, 5, 3) % 7) / 7.0 - 0.4
KER = (np.arange(3 * 3 * 3 * 4, dtype=np.float32).reshape(3, 3, 3, 4) % 5) / 5.0 - 0.3


@parity(rtol=1e-4, atol=1e-5)
def test_conv2d(tf):
    """conv2d NHWC: SAME/VALID, strides, dilations; gradients to input and filters."""
    w = tf.constant(np.linspace(-1, 1, 2 * 5 * 5 * 4).reshape(2, 5, 5, 4), tf.float32)
    _R = vg_many(tf, [
        (lambda x, k: tf.nn.conv2d(x, k, 1, "SAME") * w, IMG, KER),
        (lambda x, k: tf.nn.conv2d(x, k, [1, 2, 2, 1], "VALID"), IMG, KER),
        (lambda x, k: tf.nn.conv2d(x, k, 2, "SAME"), IMG, KER)])
    return (_R[0],
            _R[1],
            tf.nn.conv2d(tf.constant(IMG), tf.constant(KER), 1, "SAME", dilations=2),  # TF: no CPU gradient
            _R[2],
            raises(tf.nn.conv2d, tf.ones([1, 4, 4, 3]), tf.ones([2, 2, 2, 1]), 1, "SAME"),
            raises(tf.nn.conv2d, tf.ones([1, 4, 4, 3]), tf.ones([2, 2, 3, 1]), 1, "same"))


@parity(rtol=1e-4, atol=1e-5)
def test_conv1d_depthwise_transpose(tf):
    """conv1d (NWC), depthwise_conv2d, conv2d_transpose."""
    seq = IMG[:, 0]            # (2, 5, 3)
    k1 = KER[0]                # (3, 3, 4)
    kd = KER[:, :, :, :2]      # (3, 3, 3, 2): channel multiplier 2
    kt = KER[:, :, :2, :3]     # (3, 3, 2, 3) for transpose: out 2 channels, in 3
    _R = vg_many(tf, [
        (lambda x, k: tf.nn.conv1d(x, k, 1, "SAME"), seq, k1),
        (lambda x, k: tf.nn.conv1d(x, k, 2, "VALID"), seq, k1),
        (lambda x, k: tf.nn.depthwise_conv2d(x, k, [1, 1, 1, 1], "SAME"), IMG, kd),
        (lambda x, k: tf.nn.depthwise_conv2d(x, k, [1, 2, 2, 1], "VALID"), IMG, kd),
        (lambda x, k: tf.nn.conv2d_transpose(x, k, [2, 10, 10, 2], 2, "SAME"), IMG, kt),
        (lambda x, k: tf.nn.conv2d_transpose(x, k, [2, 7, 7, 2], 1, "VALID"), IMG, kt)])
    return tuple(_R)


@parity(rtol=1e-4, atol=1e-5)
def test_pooling(tf):
    """max_pool2d / avg_pool2d: SAME (average over valid entries) and VALID, strides."""
    w = tf.constant(np.linspace(-1, 1, 2 * 3 * 3 * 3).reshape(2, 3, 3, 3), tf.float32)
    _R = vg_many(tf, [
        (lambda x: tf.nn.max_pool2d(x, 2, 2, "SAME") * w, IMG),
        (lambda x: tf.nn.max_pool2d(x, 3, 1, "VALID"), IMG),
        (lambda x: tf.nn.avg_pool2d(x, 2, 2, "SAME") * w, IMG),
        (lambda x: tf.nn.avg_pool2d(x, [2, 3], [1, 2], "VALID"), IMG)])
    return tuple(_R)


@parity
def test_dropout_rules(tf):
    """dropout: kept entries scaled by 1/(1-rate), zeros elsewhere (same mask in the gradient);
    rate outside [0, 1) is a ValueError.  Values differ from TF's generator, so only the rules are compared."""
    x = tf.ones([1000])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.nn.dropout(x, 0.25, seed=3)
    g = t.gradient(y, x)
    kept = tf.cast(tf.not_equal(y, 0.0), tf.float32)
    frac = float(tf.reduce_mean(kept))
    return (abs(frac - 0.75) < 0.06, tf.reduce_max(y), tf.reduce_sum(g * (1.0 - kept)),
            bool(tf.reduce_all(tf.equal(g, y))), raises(tf.nn.dropout, x, 1.5))


@parity
def test_dropout_rate_zero_is_the_input_and_advances_the_seed(tf):
    """A Python rate of 0 returns the input tensor itself (a Variable's value), the gradient
    passes through, an integer input is still a ValueError, and the random state advances as a
    real dropout's does: the draw after it equals the draw after ``dropout(x, 0.5)``."""
    x = tf.constant([1.0, 2.0, 3.0])
    v = tf.Variable([1.0, -2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.nn.dropout(x, 0.0)
        z = tf.reduce_sum(tf.nn.dropout(v, 0.0) * 3.0)
    g, gv = t.gradient([y, z], [x, v])
    tf.random.set_seed(5)
    tf.nn.dropout(x, 0.0)
    a = tf.random.uniform([3])
    tf.random.set_seed(5)
    tf.nn.dropout(x, 0.5)
    b = tf.random.uniform([3])
    tf.random.set_seed(5)
    c = tf.random.uniform([3])
    return (y is x, g, gv, bool(tf.reduce_all(tf.equal(a, b))), bool(tf.reduce_all(tf.equal(a, c))),
            raises(tf.nn.dropout, tf.constant([1, 2]), 0.0))


# --------------------------------------------------------------------------
# linalg
# --------------------------------------------------------------------------

@parity(rtol=1e-4, atol=1e-5)
def test_linalg_solvers(tf):
    """matmul/matvec, inv, det, slogdet, logdet, solve, triangular_solve, cholesky(_solve), lstsq."""
    rhs = [[1.0, 0.5], [2.0, -1.0], [0.0, 3.0]]
    _R = vg_many(tf, [
        (lambda a, b: tf.linalg.matmul(a, b, transpose_b=True), LIN, LIN),
        (lambda a, b: tf.matmul(a, b, transpose_a=True), MAT, MAT),
        (tf.linalg.matvec, MAT, ROW),
        (tf.linalg.inv, MAT),
        (lambda a: tf.linalg.inv(a, adjoint=True), MAT),
        (tf.linalg.det, MAT),
        (lambda a: tf.linalg.slogdet(a), MAT),
        (tf.linalg.logdet, SPD),
        (tf.linalg.solve, MAT, rhs),
        (lambda a, b: tf.linalg.solve(a, b, adjoint=True), MAT, rhs),
        (tf.linalg.triangular_solve, MAT, rhs),
        (lambda a, b: tf.linalg.triangular_solve(a, b, lower=False, adjoint=True), MAT, rhs),
        (tf.linalg.cholesky, SPD),
        (lambda a, b: tf.linalg.cholesky_solve(tf.linalg.cholesky(a), b), SPD, rhs),
        (tf.linalg.lstsq, LIN.T, rhs),
        (lambda a, b: tf.linalg.lstsq(a, b, l2_regularizer=0.5),
                                                   LIN.T, rhs)])
    return (_R[0],
            _R[1],
            _R[2], _R[3],
            _R[4],
            _R[5], _R[6],
            _R[7], _R[8],
            _R[9],
            _R[10],
            _R[11],
            _R[12],
            _R[13],
            _R[14], _R[15],
            raises(tf.matmul, tf.ones([2]), tf.ones([2, 2])), raises(tf.matmul, tf.ones([2, 3]), tf.ones([2, 2])))


@parity(rtol=1e-4, atol=1e-5)
def test_linalg_eigh_lower_triangle(tf):
    """eigh/eigvalsh read only the lower triangle; the gradient is lower-triangular (TF)."""
    a = SPD + np.triu(np.ones((3, 3), np.float32), 1) * 5.0   # garbage above the diagonal
    _R = vg_many(tf, [
        (tf.linalg.eigvalsh, a),
        (lambda m: tf.linalg.eigh(m)[0], a)])
    return _R[0], _R[1]


@parity(rtol=1e-4, atol=1e-4)
def test_linalg_decompositions(tf):
    """svd (singular values; u/v up to sign via |u|), qr, pinv, expm, trace."""
    _R = vg_many(tf, [
        (lambda m: tf.linalg.svd(m, compute_uv=False), MAT),
        (lambda m: tf.abs(tf.linalg.svd(m)[1]), MAT),
        (lambda m: tf.linalg.svd(m)[0], LIN),
        (lambda m: tf.linalg.qr(m)[1], MAT),
        (lambda m: tf.linalg.qr(m)[0], MAT),
        (tf.linalg.pinv, LIN),
        (tf.linalg.expm, MAT * 0.3),
        (tf.linalg.trace, ARR)])
    return tuple(_R)


@parity
def test_linalg_structure(tf):
    """diag (k), diag_part, band_part, cross, norm (vector / matrix orders)."""
    _R = vg_many(tf, [
        (lambda d: tf.linalg.diag(d), ROW),
        (lambda d: tf.linalg.diag(d, k=1), ROW),
        (lambda d: tf.linalg.diag(d, k=-1, num_rows=4, num_cols=3), ROW),
        (tf.linalg.diag_part, MAT),
        (lambda m: tf.linalg.diag_part(m, k=1), MAT),
        (lambda m: tf.linalg.band_part(m, 1, 0), MAT),
        (lambda m: tf.linalg.band_part(m, -1, 0) * MAT, MAT),
        (tf.linalg.cross, LIN, LIN[::-1]),
        (tf.norm, LIN),
        (lambda x: tf.norm(x, axis=1), LIN),
        (lambda x: tf.norm(x, ord=1, axis=1, keepdims=True), LIN),
        (lambda x: tf.linalg.norm(x, ord=np.inf, axis=0), LIN),
        (lambda x: tf.linalg.norm(x, ord=3, axis=0), LIN),
        (lambda x: tf.norm(x, ord="fro", axis=[0, 1]), LIN)])
    return tuple(_R)


BAND = np.arange(1.0, 13.0, dtype=np.float32).reshape(3, 4) / 4.0   # generic 3x4 values
RAGGED = np.arange(1.0, 25.0, dtype=np.float32).reshape(2, 3, 4) / 8.0  # batch of 2 bands


@parity
def test_linalg_diag_bands_and_alignment(tf):
    """diag / diag_part with a band k=(lo, hi): every alignment, padding, batch dims, inferred and
    given num_rows/num_cols, a longer diagonal than fits (alignment picks its end), k as a pair
    equal ends (one diagonal); values and gradients (padding_value gets none)."""
    _R = vg_many(tf, [
        (lambda m: tf.linalg.diag_part(m, k=(-1, 2)), BAND),
        (lambda m: tf.linalg.diag_part(m, k=(-1, 2), align="LEFT_RIGHT", padding_value=9.0), BAND),
        (lambda m: tf.linalg.diag_part(m, k=(-2, 1), align="LEFT_LEFT"), BAND),
        (lambda m: tf.linalg.diag_part(m, k=(0, 3), align="RIGHT_RIGHT"), BAND),
        (lambda m: tf.linalg.diag_part(m, k=(1, 1)), BAND),
        (lambda m: tf.linalg.diag_part(m, k=[-2]) * 3.0, BAND),
        (lambda m: tf.linalg.diag_part(m, k=(-1, 1)), RAGGED),
        (lambda d: tf.linalg.diag(d, k=(-1, 2)), np.arange(1.0, 17.0, dtype=np.float32).reshape(4, 4)),
        (lambda d: tf.linalg.diag(d, k=(-1, 1), align="LEFT_LEFT", padding_value=-1.0), RAGGED[0]),
        (lambda d: tf.linalg.diag(d, k=(0, 2), align="RIGHT_RIGHT", num_rows=4, num_cols=6), RAGGED[0]),
        (lambda d: tf.linalg.diag(d, k=(-2, 0), align="LEFT_RIGHT", num_cols=5), RAGGED[0]),
        (lambda d: tf.linalg.diag(d, k=(-1, 1)), RAGGED),
        (lambda d: tf.linalg.diag(d, k=1, num_rows=3, num_cols=4), ROW),
        (lambda d: tf.linalg.diag(d, k=-1, num_rows=5), ROW),
        (lambda d: tf.linalg.diag(d, k=(2, 2), num_cols=5), ROW)])
    p = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(p)
        y = tf.linalg.diag(tf.constant([1.0, 2.0]), k=1, padding_value=p)
    m = tf.constant(BAND)
    d = tf.constant(RAGGED[0])
    return (tuple(_R), y, t.gradient(y, p),
            raises(tf.linalg.diag_part, m, k=(2, 1)), raises(tf.linalg.diag_part, m, k=(-3, 0)),
            raises(tf.linalg.diag_part, m, k=(0, 4)), raises(tf.linalg.diag_part, m, k=0, align="foo"),
            raises(tf.linalg.diag, d, k=(0, 1)), raises(tf.linalg.diag, d, k=(0, 2), num_rows=2),
            raises(tf.linalg.diag, tf.constant([1.0, 2.0, 3.0]), num_rows=5, num_cols=5),
            raises(tf.linalg.diag, tf.constant([1.0, 2.0, 3.0]), k=1, num_rows=3, num_cols=3))


# --------------------------------------------------------------------------
# random: TF's seed rules (the generator differs, so values are not compared)
# --------------------------------------------------------------------------

@parity
def test_random_seed_rules(tf):
    """set_seed makes sequences reproducible; repeated op-seeded calls differ; set_seed restarts them."""
    def same(a, b):
        return bool(tf.reduce_all(tf.equal(a, b)))
    tf.random.set_seed(7)
    a1, a2 = tf.random.normal([3]), tf.random.uniform([3])
    tf.random.set_seed(7)
    b1, b2 = tf.random.normal([3]), tf.random.uniform([3])
    s1, s2 = tf.random.uniform([3], seed=5), tf.random.uniform([3], seed=5)
    tf.random.set_seed(7)
    tf.random.normal([3])
    s3 = tf.random.uniform([3], seed=5)
    return same(a1, b1), same(a2, b2), same(s1, s2), same(s1, s3)


@parity
def test_random_shapes_dtypes_ranges(tf):
    """normal/uniform/truncated_normal/categorical/shuffle: shapes, dtypes, ranges."""
    tf.random.set_seed(3)
    n = tf.random.normal([200, 2], mean=1.0, stddev=0.5)
    u = tf.random.uniform([500], minval=-2.0, maxval=3.0)
    ui = tf.random.uniform([500], 0, 5, dtype=tf.int32)
    tn = tf.random.truncated_normal([500], stddev=2.0)
    c = tf.random.categorical(tf.math.log([[0.5, 0.5, 0.0]]), 50, dtype=tf.int32)
    sh = tf.random.shuffle(tf.range(10))
    return (n.shape.as_list(), n.dtype.name, abs(float(tf.reduce_mean(n)) - 1.0) < 0.15,
            float(tf.reduce_min(u)) >= -2.0, float(tf.reduce_max(u)) < 3.0, ui.dtype.name,
            int(tf.reduce_min(ui)) >= 0, int(tf.reduce_max(ui)) <= 4, float(tf.reduce_max(tf.abs(tn))) <= 4.0,
            c.shape.as_list(), int(tf.reduce_max(c)) <= 1, tf.sort(sh), raises(tf.random.uniform, [2], dtype=tf.int32))


@parity
def test_random_gradients_to_parameters(tf):
    """normal/uniform/truncated_normal are differentiable in mean/stddev (minval/maxval)."""
    m, s = tf.constant(1.0), tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([m, s])
        n = tf.random.normal([4], mean=m, stddev=s, seed=1)
        u = tf.random.uniform([4], minval=m, maxval=s, seed=1)
        tn = tf.random.truncated_normal([4], mean=m, stddev=s, seed=1)
    gn = t.gradient(n, [m, s])
    gu = t.gradient(u, [m, s])
    gt = t.gradient(tn, [m, s])
    return (gn[0], bool(tf.abs(gn[1] - tf.reduce_sum((n - m) / s)) < 1e-4), bool(tf.abs(gu[0] + gu[1] - 4.0) < 1e-4),
            gt[0], bool(tf.abs(gt[1] - tf.reduce_sum((tn - m) / s)) < 1e-4))


@parity
def test_matrix_spectral_norm(tf):
    """tf.norm(ord=2) over two axes is the largest singular value; its gradient is u v^T."""
    x = tf.constant([[3.0, 0.0], [4.0, 5.0]])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.norm(x, ord=2, axis=[-2, -1])
    return y, t.gradient(y, x)


@parity
def test_named_tuple_results(tf):
    """qr, slogdet, top_k and unique return TF's namedtuples (type name and fields); eigh, svd
    and moments plain tuples."""
    m = tf.constant(SPD)
    rs = (tf.linalg.qr(m), tf.linalg.slogdet(m), tf.math.top_k(tf.constant([1.0, 3.0, 2.0]), k=2),
          tf.unique(tf.constant([1, 1, 2])), tf.linalg.eigh(m), tf.linalg.svd(m), tf.nn.moments(m, [0]))
    named = tuple((type(r).__name__, tuple(getattr(r, "_fields", ()))) for r in rs)
    return named, rs[0].r, rs[1].log_abs_determinant, rs[2].indices, rs[3].idx


@parity
def test_roll_by_a_traced_shift_of_the_wrong_kind_is_refused(tf):
    """A traced ``shift`` that is not ints, or whose length differs from ``axis``'s: the error
    is raised when the step is traced, before it runs."""
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    too_long = tf.function(lambda s: tf.roll(x, shift=s, axis=[0, 1]))
    floats = tf.function(lambda s: tf.roll(x, shift=s, axis=0))
    return (raises(too_long, tf.constant([1, 2, 3])), raises(floats, tf.constant(1.5)))
