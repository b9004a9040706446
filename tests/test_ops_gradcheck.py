"""Numeric gradient checks (float64, first and second order) of every differentiable op, at random
points and at TF's kinks, through the shared checker ``tests/gradcheck.py``.

Each test checks a group of ops with one tape program (``check_many``), so a failure message names
the op (its label) and the argument.  ``GRADCHECKED`` (the labels) is read by the coverage test.
"""
import numpy as np
import pytest

import tapejax as tf
from gradcheck import check_grads, check_many, check_none

R = np.random.default_rng(1234)


def pts(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape)


def away(*shape, lo=0.3, hi=2.0):
    """Points at least ``lo`` away from 0 (either sign)."""
    return R.uniform(lo, hi, shape) * R.choice([-1.0, 1.0], shape)


POS = dict(lo=0.2, hi=2.0)
UNIT = dict(lo=-0.8, hi=0.8)

UNARY = [
    ("negative", tf.math.negative, pts(2, 3)), ("square", tf.math.square, pts(2, 3)),
    ("sqrt", tf.math.sqrt, pts(2, 3, **POS)), ("rsqrt", tf.math.rsqrt, pts(2, 3, **POS)),
    ("reciprocal", tf.math.reciprocal, away(2, 3)), ("exp", tf.math.exp, pts(2, 3)),
    ("expm1", tf.math.expm1, pts(2, 3)), ("log", tf.math.log, pts(2, 3, **POS)),
    ("log1p", tf.math.log1p, pts(2, 3, **POS)), ("log_sigmoid", tf.math.log_sigmoid, pts(2, 3)),
    ("sin", tf.math.sin, pts(2, 3)), ("cos", tf.math.cos, pts(2, 3)), ("tan", tf.math.tan, pts(2, 3, **UNIT)),
    ("asin", tf.math.asin, pts(2, 3, **UNIT)), ("acos", tf.math.acos, pts(2, 3, **UNIT)),
    ("atan", tf.math.atan, pts(2, 3)), ("sinh", tf.math.sinh, pts(2, 3)), ("cosh", tf.math.cosh, pts(2, 3)),
    ("tanh", tf.math.tanh, pts(2, 3)), ("asinh", tf.math.asinh, pts(2, 3)),
    ("acosh", tf.math.acosh, pts(2, 3, lo=1.2, hi=3.0)), ("atanh", tf.math.atanh, pts(2, 3, **UNIT)),
    ("sigmoid", tf.math.sigmoid, pts(2, 3)), ("softplus", tf.math.softplus, pts(2, 3)),
    ("softsign", tf.math.softsign, away(2, 3)), ("erf", tf.math.erf, pts(2, 3)), ("erfc", tf.math.erfc, pts(2, 3)),
    ("lgamma", tf.math.lgamma, pts(2, 3, lo=0.3, hi=4.0)), ("digamma", tf.math.digamma, pts(2, 3, lo=0.3, hi=4.0)),
    ("abs", tf.math.abs, away(2, 3)), ("sign", tf.math.sign, away(2, 3)), ("relu", tf.nn.relu, away(2, 3)),
    ("relu6", tf.nn.relu6, away(2, 3, lo=0.5, hi=8.0)), ("elu", tf.nn.elu, away(2, 3)),
    ("selu", tf.nn.selu, away(2, 3)), ("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.3), away(2, 3)),
    ("gelu", tf.nn.gelu, pts(2, 3)), ("gelu_tanh", lambda x: tf.nn.gelu(x, approximate=True), pts(2, 3)),
    ("silu", lambda x: tf.nn.silu(x, beta=1.5), pts(2, 3)), ("identity", tf.identity, pts(2, 3)),
]

BINARY = [
    ("add", tf.math.add, pts(2, 3), pts(3)), ("subtract", tf.math.subtract, pts(2, 3), pts(2, 1)),
    ("multiply", tf.math.multiply, pts(2, 3), pts(3)), ("divide", tf.math.divide, pts(2, 3), away(2, 1)),
    ("floormod", tf.math.floormod, pts(2, 3, lo=0.1, hi=0.9) + 2.0, pts(3, lo=1.3, hi=1.9)),
    ("pow", tf.math.pow, pts(2, 3, **POS), pts(3)), ("maximum", tf.math.maximum, pts(2, 3), pts(3)),
    ("minimum", tf.math.minimum, pts(2, 3), pts(2, 1)),
    ("squared_difference", tf.math.squared_difference, pts(2, 3), pts(3)),
    ("atan2", tf.math.atan2, pts(2, 3), away(3)), ("divide_no_nan", tf.math.divide_no_nan, pts(2, 3), away(3)),
    ("multiply_no_nan", tf.math.multiply_no_nan, pts(2, 3), away(3)),
    ("xlogy", tf.math.xlogy, away(2, 3), pts(3, **POS)), ("xdivy", tf.math.xdivy, away(2, 3), away(3)),
    ("clip_by_value", tf.clip_by_value, pts(2, 3), pts(2, 1, lo=-1.5, hi=-0.5), pts(3, lo=0.5, hi=1.5)),
    ("where", lambda x, y: tf.where(tf.constant([[True, False, True], [False, True, True]]), x, y),
     pts(2, 3), pts(3)),
    ("add_n", lambda a, b: tf.add_n([a, b, a]), pts(2, 3), pts(2, 3)),
    ("polyval", lambda c, x: tf.math.polyval([c, 2.0, -1.0], x), pts(1), pts(2, 3)),
]

def _with(f, **kw):
    return lambda x: f(x, **kw)


REDUCE = [(f.__name__ + suffix, _with(f, **kw), pts(2, 3, **POS))
          for f in (tf.math.reduce_sum, tf.math.reduce_mean, tf.math.reduce_max, tf.math.reduce_min,
                    tf.math.reduce_prod, tf.math.reduce_logsumexp, tf.math.reduce_std, tf.math.reduce_variance,
                    tf.math.reduce_euclidean_norm)
          for suffix, kw in (("", {}), ("_axis1", {"axis": 1, "keepdims": True}))]

SCANS = [(f.__name__ + suffix, _with(f, **kw), pts(2, 3, **POS))
         for f in (tf.math.cumsum, tf.math.cumprod, tf.math.cumulative_logsumexp)
         for suffix, kw in (("", {}), ("_rev", {"axis": 1, "reverse": True}))
         ] + [(f.__name__ + "_excl", _with(f, axis=1, exclusive=True), pts(2, 3, **POS))
              for f in (tf.math.cumsum, tf.math.cumprod)]  # exclusive logsumexp starts at -inf

MISC_MATH = [
    ("clip_by_norm", lambda x: tf.clip_by_norm(x, 1.0), pts(2, 3)),
    ("clip_by_norm_axes", lambda x: tf.clip_by_norm(x, 1.0, axes=[1]), pts(2, 3)),
    ("clip_by_global_norm", lambda a, b: tf.clip_by_global_norm([a, b], 1.5)[0], pts(2, 3), pts(3)),
    ("l2_normalize", lambda x: tf.math.l2_normalize(x, axis=1), pts(2, 3)),
    ("top_k", lambda x: tf.math.top_k(x, 2).values, np.array([[0.1, 0.9, -0.5], [1.3, -0.2, 0.4]])),
    ("unsorted_segment_sum", lambda x: tf.math.unsorted_segment_sum(x, [0, 2], 3), pts(2, 3)),
    ("segment_sum", lambda x: tf.math.segment_sum(x, [0, 0, 1]), pts(3, 2)),
    ("matmul", lambda a, b: tf.matmul(a, b, transpose_b=True), pts(2, 3), pts(4, 3)),
]

ARRAY = [
    ("reshape", lambda x: tf.reshape(x, [3, -1]), pts(2, 3)), ("transpose", lambda x: tf.transpose(x, [1, 0]), pts(2, 3)),
    ("concat", lambda a, b: tf.concat([a, b], 1), pts(2, 3), pts(2, 1)),
    ("stack", lambda a, b: tf.stack([a, b], 1), pts(2, 3), pts(2, 3)),
    ("unstack", lambda x: tf.unstack(x, axis=1), pts(2, 3)), ("split", lambda x: tf.split(x, [1, 2], 1), pts(2, 3)),
    ("squeeze", lambda x: tf.squeeze(x, 0), pts(1, 3)), ("expand_dims", lambda x: tf.expand_dims(x, 1), pts(2, 3)),
    ("tile", lambda x: tf.tile(x, [2, 1]), pts(2, 3)), ("pad", lambda x: tf.pad(x, [[1, 0], [0, 2]]), pts(2, 3)),
    ("pad_reflect", lambda x: tf.pad(x, [[0, 0], [2, 1]], "REFLECT"), pts(2, 3)),
    ("gather", lambda x: tf.gather(x, [1, 1, 0], axis=1), pts(2, 3)),
    ("gather_nd", lambda x: tf.gather_nd(x, [[0, 1], [1, 2], [0, 1]]), pts(2, 3)),
    ("slice", lambda x: tf.slice(x, [0, 1], [-1, 2]), pts(2, 3)),
    ("getitem", lambda x: x[1, ::-1] * x[0], pts(2, 3)),
    ("boolean_mask", lambda x: tf.boolean_mask(x, [[True, False, True], [False, True, True]]), pts(2, 3)),
    ("reverse", lambda x: tf.reverse(x, [1]), pts(2, 3)), ("roll", lambda x: tf.roll(x, 1, 1), pts(2, 3)),
    ("sort", lambda x: tf.sort(x, direction="DESCENDING"), np.array([[0.3, -1.2, 0.8], [2.0, 0.1, -0.4]])),
    ("scatter_nd", lambda u: tf.scatter_nd([[0], [2], [0]], u, [4]), pts(3)),
    ("tensor_scatter_nd_update", lambda t, u: tf.tensor_scatter_nd_update(t, [[1]], u), pts(3, 2), pts(1, 2)),
    ("tensor_scatter_nd_add", lambda t, u: tf.tensor_scatter_nd_add(t, [[1]], u), pts(3, 2), pts(1, 2)),
    ("broadcast_to", lambda x: tf.broadcast_to(x, [2, 2, 3]), pts(3)), ("fill", lambda v: tf.fill([2, 2], v), pts()),
    ("meshgrid", lambda a, b: tf.meshgrid(a, b), pts(2), pts(3)), ("repeat", lambda x: tf.repeat(x, [2, 1], 0), pts(2, 3)),
    ("einsum", lambda a, b: tf.einsum("ij,kj->ik", a, b), pts(2, 3), pts(4, 3)),
    ("tensordot", lambda a, b: tf.tensordot(a, b, [[1], [0]]), pts(2, 3), pts(3, 2)),
]

NN = [
    ("softmax", lambda x: tf.nn.softmax(x, axis=0), pts(2, 3)), ("log_softmax", tf.nn.log_softmax, pts(2, 3)),
    # (labels summing to 1: TF's logits gradient, softmax - labels, is the derivative only there)
    ("softmax_cross_entropy_with_logits", lambda l, z: tf.nn.softmax_cross_entropy_with_logits(
        l / tf.reduce_sum(l, -1, keepdims=True), z), pts(2, 3, **POS), pts(2, 3)),
    ("sparse_softmax_cross_entropy_with_logits", lambda z: tf.nn.sparse_softmax_cross_entropy_with_logits([2, 0], z), pts(2, 3)),
    ("sigmoid_cross_entropy_with_logits", lambda l, z: tf.nn.sigmoid_cross_entropy_with_logits(labels=l, logits=z),
     pts(2, 3, lo=0.0, hi=1.0), away(2, 3)),
    ("weighted_cross_entropy_with_logits", lambda l, z: tf.nn.weighted_cross_entropy_with_logits(l, z, 2.0),
     pts(2, 3, lo=0.0, hi=1.0), away(2, 3)),
    ("l2_loss", tf.nn.l2_loss, pts(2, 3)), ("log_poisson_loss", lambda t, l: tf.nn.log_poisson_loss(t, l, True),
                                            pts(2, 3, lo=1.2, hi=3.0), pts(2, 3)),
    ("batch_normalization", lambda x, m, v, o, s: tf.nn.batch_normalization(x, m, v, o, s, 1e-3),
     pts(2, 3), pts(3), pts(3, **POS), pts(3), pts(3)),
    ("bias_add", tf.nn.bias_add, pts(2, 3), pts(3)), ("embedding_lookup", lambda p: tf.nn.embedding_lookup(p, [1, 1]),
                                                     pts(3, 2)),
    ("conv2d", lambda x, k: tf.nn.conv2d(x, k, 1, "SAME"), pts(1, 3, 3, 2), pts(2, 2, 2, 2)),
    ("conv2d_strided", lambda x, k: tf.nn.conv2d(x, k, 2, "VALID", dilations=1), pts(1, 4, 4, 1), pts(2, 2, 1, 2)),
    ("conv1d", lambda x, k: tf.nn.conv1d(x, k, 1, "SAME"), pts(1, 4, 2), pts(2, 2, 2)),
    ("depthwise_conv2d", lambda x, k: tf.nn.depthwise_conv2d(x, k, [1, 1, 1, 1], "VALID"), pts(1, 3, 3, 2),
     pts(2, 2, 2, 1)),
    ("conv2d_transpose", lambda x, k: tf.nn.conv2d_transpose(x, k, [1, 4, 4, 1], 2, "SAME"), pts(1, 2, 2, 2),
     pts(2, 2, 1, 2)),
    ("max_pool2d", lambda x: tf.nn.max_pool2d(x, 2, 1, "VALID"), pts(1, 3, 3, 1)),
    ("avg_pool2d", lambda x: tf.nn.avg_pool2d(x, 2, 1, "SAME"), pts(1, 3, 3, 1)),
]

SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
MAT = np.array([[2.0, -1.0, 0.5], [0.3, 1.5, -0.7], [1.0, 0.4, 2.5]])


def _sym(f):
    """f of a symmetric input built from a free matrix (eigh/cholesky read only a triangle)."""
    return lambda a: f(a + tf.transpose(a))


LINALG = [
    ("matvec", tf.linalg.matvec, pts(2, 3), pts(3)), ("inv", tf.linalg.inv, MAT), ("det", tf.linalg.det, MAT),
    ("slogdet", lambda a: tf.linalg.slogdet(a)[1], MAT), ("logdet", _sym(tf.linalg.logdet), SPD / 2),
    ("cholesky", _sym(tf.linalg.cholesky), SPD / 2), ("cholesky_solve",
                                                     lambda a, b: tf.linalg.cholesky_solve(tf.linalg.cholesky(a + tf.transpose(a)), b),
                                                     SPD / 2, pts(3, 2)),
    ("solve", tf.linalg.solve, MAT, pts(3, 2)),
    ("triangular_solve", lambda a, b: tf.linalg.triangular_solve(a, b, lower=False), MAT, pts(3, 2)),
    ("lstsq", tf.linalg.lstsq, pts(4, 2), pts(4, 1)),
    ("eigvalsh", _sym(tf.linalg.eigvalsh), SPD), ("eigh_values", _sym(lambda a: tf.linalg.eigh(a)[0]), SPD),
    ("svd_values", lambda a: tf.linalg.svd(a, compute_uv=False), MAT), ("qr_r", lambda a: tf.linalg.qr(a)[1], MAT),
    ("trace", tf.linalg.trace, pts(2, 3, 3)), ("diag", lambda d: tf.linalg.diag(d, k=1), pts(3)),
    ("diag_part", tf.linalg.diag_part, pts(3, 3)), ("band_part", lambda a: tf.linalg.band_part(a, 1, 0), pts(3, 3)),
    ("norm", tf.norm, away(2, 3)), ("norm_1", lambda x: tf.norm(x, ord=1, axis=1), away(2, 3)),
    ("norm_inf", lambda x: tf.linalg.norm(x, ord=np.inf, axis=0), np.array([[0.3, -1.2, 0.8], [2.0, 0.1, -0.4]])),
    ("norm_3", lambda x: tf.norm(x, ord=3, axis=0), away(2, 3)), ("cross", tf.linalg.cross, pts(2, 3), pts(2, 3)),
    ("pinv", tf.linalg.pinv, pts(3, 2)), ("expm", tf.linalg.expm, MAT * 0.3),
]

# First order only: TF's moments treat the mean as a constant inside the variance
# (stop_gradient), which is exact for the first derivative but not the second; tapejax keeps TF's
# formula, so its second derivative is TF's, not the numeric one.
FIRST_ORDER_ONLY = [("moments", lambda x: tf.nn.moments(x, [0]), pts(3, 2))]

GROUPS = {"unary": UNARY, "binary": BINARY, "reduce": REDUCE, "scan": SCANS, "misc_math": MISC_MATH,
          "array": ARRAY, "nn": NN, "linalg": LINALG}

#: Every label checked here (read by tests/test_ops_coverage.py).
GRADCHECKED = {row[0] for rows in [*GROUPS.values(), FIRST_ORDER_ONLY] for row in rows}


def _items(rows):
    return [(label, f, list(args)) for label, f, *args in rows]


#: Checked to first order only, to keep the suite fast: their second derivatives are JAX's own
#: rules (no TF convention involved) and each nested program costs seconds of XLA compile.
HEAVY = {"conv2d", "conv2d_strided", "conv1d", "depthwise_conv2d", "conv2d_transpose", "max_pool2d", "avg_pool2d",
         "log_poisson_loss", "weighted_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits",
         "sparse_softmax_cross_entropy_with_logits", "embedding_lookup",
         "logdet", "cholesky", "cholesky_solve", "triangular_solve", "lstsq", "eigvalsh", "eigh_values",
         "svd_values", "qr_r", "pinv", "expm", "slogdet", "norm_inf", "norm_3", "cross", "band_part", "diag",
         "diag_part", "boolean_mask", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add",
         "meshgrid", "repeat", "pad_reflect", "gather_nd", "sort", "unstack", "split"}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_gradcheck(group):
    """First order against central differences at random points; second order too (except HEAVY)."""
    items = _items(GROUPS[group])
    light = [it for it in items if it[0] not in HEAVY]
    heavy = [it for it in items if it[0] in HEAVY]
    if light:
        check_many(light, order=2)
    if heavy:
        check_many(heavy, order=1)


def test_gradcheck_first_order_only():
    """Ops whose TF second derivative is deliberately not the true one (see FIRST_ORDER_ONLY)."""
    check_many(_items(FIRST_ORDER_ONLY), order=1)


KINKS = [
    ("abs_at_0", tf.abs, np.array([0.0, -1.0, 2.0])),
    ("relu_at_0", tf.nn.relu, np.array([0.0, 1.0])),
    ("relu6_at_0_6", tf.nn.relu6, np.array([0.0, 6.0, 3.0])),
    ("leaky_relu_at_0", lambda x: tf.nn.leaky_relu(x, 0.3), np.array([0.0])),
    ("selu_at_0", tf.nn.selu, np.array([0.0])), ("elu_at_0", tf.nn.elu, np.array([0.0])),
    ("maximum_tie", tf.maximum, np.array([1.0, 2.0]), np.array([1.0, 2.0])),
    ("minimum_tie", tf.minimum, np.array([1.0, 2.0]), np.array([1.0, 3.0])),
    ("clip_at_bounds", tf.clip_by_value, np.array([0.0, 1.0, 2.0]), np.array(0.0), np.array(2.0)),
    ("reduce_max_ties", tf.reduce_max, np.array([1.0, 3.0, 3.0])),
    ("reduce_min_ties", tf.reduce_min, np.array([1.0, 1.0, 3.0])),
    ("max_pool_ties", lambda x: tf.nn.max_pool2d(tf.reshape(x, [1, 2, 2, 1]), 2, 2, "VALID"), np.ones(4)),
    ("sort_ties", lambda x: tf.sort(x) * tf.constant([1.0, 2.0, 3.0], tf.float64), np.array([1.0, 1.0, 0.0])),
    ("top_k_ties", lambda x: tf.math.top_k(x, 2).values, np.array([1.0, 3.0, 3.0])),
    ("norm_1_at_0", lambda x: tf.norm(x, ord=1), np.array([0.0, 1.0])),
]


def test_gradcheck_kinks():
    """At kinks the tape's gradient is one of the one-sided derivatives (or their mean), elementwise."""
    check_many(_items(KINKS), kinks=True)


def test_checker_catches_a_wrong_gradient():
    """The checker is not vacuous: a deliberately wrong gradient fails it."""
    @tf.op(type_name="GradcheckWrongSin")
    def wrong_sin(x):
        import jax
        import jax.numpy as jnp

        @jax.custom_jvp
        def f(v):
            return jnp.sin(v)

        f.defjvp(lambda p, t: (jnp.sin(p[0]), t[0] * jnp.sin(p[0])))  # should be cos
        return f(x)

    with pytest.raises(AssertionError, match="GradcheckWrongSin|wrong_sin|1st-order"):
        check_grads(wrong_sin, [np.array([0.3, 1.0])], order=1)


@pytest.mark.parametrize("label,f", [
    ("floor", tf.floor), ("ceil", tf.math.ceil), ("round", tf.round),
    ("floordiv", lambda x: tf.math.floordiv(x, 2.0)), ("argmax", lambda x: tf.cast(tf.argmax(x), tf.float64)),
    ("is_finite", lambda x: tf.cast(tf.math.is_finite(x), tf.float64)),
    ("one_hot", lambda x: tf.one_hot([1, 0], 2, on_value=x[0], off_value=x[1])),
    ("cast_int", lambda x: tf.cast(tf.cast(x, tf.int32), tf.float64)),
    ("argsort", lambda x: tf.cast(tf.argsort(x), tf.float64)),
])
def test_non_differentiable_ops_give_none(label, f):
    """TF registers no gradient for these: the tape gives None, never zeros."""
    check_none(f, [np.array([0.4, 1.6, -2.5])])
