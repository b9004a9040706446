"""TF's conventions at edge points, swept table by table: ties, zeros, non-finite values, empty
tensors and dtypes, under TensorFlow and tapejax (with deferred execution and predicted updates
on and off: ``modes=True``).

A silent wrong number at a kink is the worst bug an autodiff library can have, so each table
lists many ``op@point`` rows and one parity case computes all of them: the values, their dtypes
and shapes, and the gradients (None-ness included) with one tape (``vg_rows``: each row gets its
own watched inputs, so the gradient the tape gives them is that row's own).  A case returns a
dict keyed by row, so a failing comparison names the row: ``tapejax vs TF['relu6@kinks'][1][0]``
is the gradient of the first input of ``relu6`` over the kink points.  TF runs in the test process (the harness
caches its result per case), which is why the points are batched per case rather than one case
each.  Errors are values (``raises``): each row that raises gets its own call, outside a tape.
Here: ties, zeros, activations at kinks, NaN through max/min, norms, every elementwise tf.math
function over special points and pairs of them, reductions over special rows, second derivatives.
``test_edge_points2.py`` has non-finite values, empty tensors, dtypes, more ops training code uses,
and the known differences (strict xfails, each with its reason).
"""
import numpy as np

from .harness import parity, raises
from .test_ops_library import vg2

INF, NAN = float("inf"), float("nan")


def vg_rows(tf, rows, dtype="float32"):
    """``{name: (f(*xs), d sum(f) / d xs)}`` for rows ``(name, f, *xs)``, one tape for all.

    Each input is a float constant of ``dtype`` (or the array's own dtype when given as a NumPy
    array of another kind), watched; an integer or bool input gets its (None) gradient too."""
    xss = [[tf.constant(x if isinstance(x, np.ndarray) else np.asarray(x, dtype)) for x in r[2:]] for r in rows]
    with tf.GradientTape() as t:
        t.watch([x for xs in xss for x in xs if x.dtype.is_floating or x.dtype.is_complex])
        ys = [r[1](*xs) for r, xs in zip(rows, xss)]
    gs = t.gradient(ys, xss)
    return {r[0]: (list(y) if isinstance(y, tuple) else y, g) for r, y, g in zip(rows, ys, gs)}


def raised_rows(rows):
    """``{name: raises(f)}`` for rows ``(name, f)``: the value, or the exception's class."""
    return {name: raises(f) for name, f in rows}


# -- ties ---------------------------------------------------------------------------------------

TIE2 = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0], [5.0, 5.0, 5.0]], np.float32)
PROD = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0], [-1.0, 0.0, -2.0]], np.float32)


@parity(modes=True)
def test_reductions_at_ties(tf):
    """reduce_max / reduce_min split a tie evenly (every axis and keepdims); reduce_prod with one,
    two and no zeros in a row; reduce_logsumexp of equal entries."""
    return vg_rows(tf, [
        ("reduce_max@ties_all", lambda x: tf.reduce_max(x), TIE2),
        ("reduce_max@ties_axis1", lambda x: tf.reduce_max(x, axis=1), TIE2),
        ("reduce_max@ties_axis0_keepdims", lambda x: tf.reduce_max(x, axis=0, keepdims=True), TIE2),
        ("reduce_min@ties_axis1", lambda x: tf.reduce_min(x, axis=1), TIE2),
        ("reduce_min@ties_all", lambda x: tf.reduce_min(x), -TIE2),
        ("math.reduce_max@ties_neg_axis", lambda x: tf.math.reduce_max(x, axis=-1), TIE2),
        ("reduce_prod@zeros_axis1", lambda x: tf.reduce_prod(x, axis=1), PROD),
        ("reduce_prod@zeros_axis0", lambda x: tf.reduce_prod(x, axis=0), PROD),
        ("reduce_prod@zeros_all", lambda x: tf.reduce_prod(x), PROD[2:]),
        ("reduce_logsumexp@equal", lambda x: tf.reduce_logsumexp(x, axis=1), TIE2),
        ("reduce_logsumexp@equal_all", lambda x: tf.math.reduce_logsumexp(x), np.full((4,), 2.0, np.float32)),
        ("reduce_logsumexp@large_equal", lambda x: tf.reduce_logsumexp(x), np.full((3,), 1e30, np.float32)),
    ])


@parity(modes=True)
def test_maximum_minimum_clip_at_ties(tf):
    """maximum / minimum give a tie to x (also broadcast and with a Python number); clip_by_value
    passes the gradient at both (inclusive) bounds, to x and not to the bounds."""
    a = np.array([1.0, 2.0, 3.0, -0.0, 0.0], np.float32)
    b = np.array([1.0, 0.0, 3.0, 0.0, -0.0], np.float32)
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0], np.float32)
    return vg_rows(tf, [
        ("maximum@equal", tf.maximum, a, b),
        ("minimum@equal", tf.minimum, a, b),
        ("math.maximum@equal_swapped", tf.math.maximum, b, a),
        ("maximum@broadcast_tie", tf.maximum, x, np.float32(0.0)),
        ("minimum@broadcast_tie", tf.minimum, np.float32(1.0), x),
        ("maximum@python_number", lambda u: tf.maximum(u, 0.0), x),
        ("clip_by_value@bounds", lambda u: tf.clip_by_value(u, 0.0, 1.0), x),
        ("clip_by_value@tensor_bounds", tf.clip_by_value, x, np.float32(0.0), np.float32(1.0)),
        ("clip_by_value@vector_bounds", tf.clip_by_value, x, np.zeros(5, np.float32), np.ones(5, np.float32)),
        ("clip_by_value@lo_eq_hi", lambda u: tf.clip_by_value(u, 0.5, 0.5), x),
        ("relu@0", tf.nn.relu, x),
    ])


@parity(modes=True)
def test_sort_topk_at_ties(tf):
    """top_k / sort / argsort / argmax / argmin with ties: the lower index first (top_k, argmax),
    the gradient routed through the chosen indices; sort both ways."""
    v = np.array([[3.0, 1.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    out = vg_rows(tf, [
        ("top_k@ties_values", lambda u: tf.math.top_k(u, k=2).values, v),
        ("top_k@ties_k5", lambda u: tf.nn.top_k(u, k=5).values, v),
        ("sort@ties", lambda u: tf.sort(u), v),
        ("sort@ties_descending", lambda u: tf.sort(u, direction="DESCENDING"), v),
        ("sort@weighted_ties", lambda u: tf.sort(u) * tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]), v),
        ("top_k@weighted_ties", lambda u: tf.math.top_k(u, k=3).values * tf.constant([1.0, 2.0, 3.0]), v),
    ])
    c = tf.constant(v)
    out["top_k@ties_indices"] = tf.math.top_k(c, k=3).indices
    out["argsort@ties_stable"] = tf.argsort(c, stable=True)
    out["argsort@ties_descending_stable"] = tf.argsort(c, direction="DESCENDING", stable=True)
    out["argmax@ties"] = tf.cast(tf.argmax(c, axis=1), tf.int32)
    out["argmin@ties"] = tf.cast(tf.argmin(c, axis=1), tf.int32)
    out["argmax@ties_int32"] = tf.argmax(c, axis=1, output_type=tf.int32)
    return out


@parity(modes=True)
def test_segments_at_ties_and_empty_segments(tf):
    """segment_max / segment_min and unsorted_segment_max / min with tied maxima (the gradient
    split evenly) and empty segments (TF's lowest / highest value, no gradient); the sums and
    means of empty segments."""
    d = np.array([1.0, 3.0, 3.0, 2.0, 5.0, 5.0], np.float32)
    ids = tf.constant([0, 0, 0, 2, 2, 2])
    uid = tf.constant([3, 0, 3, 0, 3, 3])
    return vg_rows(tf, [
        ("segment_max@ties_empty", lambda x: tf.math.segment_max(x, ids), d),
        ("segment_min@ties_empty", lambda x: tf.math.segment_min(x, ids), d),
        ("segment_sum@empty", lambda x: tf.math.segment_sum(x, ids), d),
        ("segment_mean@empty", lambda x: tf.math.segment_mean(x, ids), d),
        ("segment_prod@empty", lambda x: tf.math.segment_prod(x, ids), d),
        ("unsorted_segment_max@ties_empty", lambda x: tf.math.unsorted_segment_max(x, uid, 5), d),
        ("unsorted_segment_min@ties_empty", lambda x: tf.math.unsorted_segment_min(x, uid, 5), d),
        ("unsorted_segment_sum@empty", lambda x: tf.math.unsorted_segment_sum(x, uid, 5), d),
        ("unsorted_segment_mean@empty", lambda x: tf.math.unsorted_segment_mean(x, uid, 5), d),
        ("unsorted_segment_prod@empty", lambda x: tf.math.unsorted_segment_prod(x, uid, 5), d),
        ("unsorted_segment_sqrt_n@empty", lambda x: tf.math.unsorted_segment_sqrt_n(x, uid, 5), d),
        ("unsorted_segment_max@negative_id_dropped",
         lambda x: tf.math.unsorted_segment_max(x, tf.constant([0, -1, 0, 1, 1, -1]), 2), d),
    ])


@parity(modes=True)
def test_pools_at_ties_and_same_padding(tf):
    """max_pool routes a tied window's gradient to its first maximum (overlapping windows too);
    avg_pool with SAME padding divides by the window's valid elements only."""
    x = np.array([[1.0, 1.0, 2.0, 2.0, 0.0], [1.0, 1.0, 2.0, 0.0, 0.0], [3.0, 3.0, 3.0, 3.0, 3.0],
                  [0.0, 0.0, 0.0, 0.0, 0.0], [-1.0, -1.0, -1.0, -1.0, -1.0]], np.float32).reshape(1, 5, 5, 1)
    neg = -np.ones((1, 3, 3, 1), np.float32)
    return vg_rows(tf, [
        ("max_pool2d@ties_same", lambda u: tf.nn.max_pool2d(u, 2, 2, "SAME"), x),
        ("max_pool2d@ties_valid", lambda u: tf.nn.max_pool2d(u, 2, 2, "VALID"), x),
        ("max_pool2d@ties_overlap", lambda u: tf.nn.max_pool2d(u, 3, 1, "SAME"), x),
        ("max_pool@negative_same_pad", lambda u: tf.nn.max_pool(u, 2, 2, "SAME"), neg),
        ("avg_pool2d@same", lambda u: tf.nn.avg_pool2d(u, 2, 2, "SAME"), x),
        ("avg_pool2d@same_overlap", lambda u: tf.nn.avg_pool2d(u, 3, 1, "SAME"), x),
        ("max_pool1d@ties_same", lambda u: tf.nn.max_pool1d(u, 2, 2, "SAME"), x[0]),
        ("avg_pool1d@same", lambda u: tf.nn.avg_pool1d(u, 2, 2, "SAME"), x[0]),
    ])


KINK = np.array([-1e4, -100.0, -20.0, -1.0, -1e-7, -0.0, 0.0, 1e-7, 1.0, 6.0, 20.0, 100.0, 1e4], np.float32)


@parity(modes=True, rtol=2e-5)
def test_activations_at_kinks_and_large_values(tf):
    """relu / relu6 / leaky_relu / elu / selu / gelu / softplus / softsign / swish / sigmoid /
    tanh / log_sigmoid at 0, at 6, at the signed zeros and far out on both sides."""
    return vg_rows(tf, [
        ("relu@kinks", tf.nn.relu, KINK),
        ("relu6@kinks", tf.nn.relu6, KINK),
        ("leaky_relu@kinks", tf.nn.leaky_relu, KINK),
        ("leaky_relu@alpha_2", lambda u: tf.nn.leaky_relu(u, alpha=2.0), KINK),
        ("elu@kinks", tf.nn.elu, KINK),
        ("selu@kinks", tf.nn.selu, KINK),
        ("gelu@kinks", tf.nn.gelu, KINK),
        ("gelu_approximate@kinks", lambda u: tf.nn.gelu(u, approximate=True), KINK),
        ("softplus@kinks", tf.nn.softplus, KINK),
        ("softsign@kinks", tf.nn.softsign, KINK),
        ("swish@kinks", tf.nn.swish, KINK),
        ("silu_beta@kinks", lambda u: tf.nn.silu(u, beta=2.0), KINK),
        ("sigmoid@kinks", tf.sigmoid, KINK),
        ("tanh@kinks", tf.tanh, KINK),
        ("log_sigmoid@kinks", tf.math.log_sigmoid, KINK),
    ])


@parity(modes=True)
def test_activations_at_infinities_and_nan(tf):
    """The same activations at ±inf and NaN: NaN in, NaN out (TF's kernels), and their
    gradients there."""
    x = np.array([-INF, INF, NAN, 0.0], np.float32)
    return vg_rows(tf, [
        ("relu@nonfinite", tf.nn.relu, x),
        ("relu6@nonfinite", tf.nn.relu6, x),
        ("leaky_relu@nonfinite", tf.nn.leaky_relu, x),
        ("elu@nonfinite", tf.nn.elu, x),
        ("selu@nonfinite", tf.nn.selu, x),
        ("softplus@nonfinite", tf.nn.softplus, x),
        ("sigmoid@nonfinite", tf.sigmoid, x),
        ("tanh@nonfinite", tf.tanh, x),
        ("swish@nonfinite", tf.nn.swish, x),
        ("gelu@nonfinite", tf.nn.gelu, x),
    ])


@parity(modes=True)
def test_nan_through_max_min_clip(tf):
    """NaN through maximum / minimum (either side), relu, clip_by_value, reduce_max / reduce_min
    / argmax and abs / sign: TF's kernels' values and gradients."""
    n = np.array([NAN, 1.0, NAN, -2.0], np.float32)
    m = np.array([1.0, NAN, NAN, 0.0], np.float32)
    out = vg_rows(tf, [
        ("maximum@nan", tf.maximum, n, m),
        ("minimum@nan", tf.minimum, n, m),
        ("clip_by_value@nan", lambda u: tf.clip_by_value(u, -1.0, 1.0), n),
        ("reduce_max@nan", tf.reduce_max, n),
        ("reduce_min@nan", tf.reduce_min, n),
        ("reduce_max@nan_axis", lambda u: tf.reduce_max(tf.reshape(u, (2, 2)), axis=1), n),
        ("abs@nan", tf.abs, n),
        ("sign@nan", tf.sign, n),
        ("square@nan", tf.square, n),
    ])
    g = tf.constant([[NAN, 1.0, NAN, -2.0], [NAN, NAN, NAN, NAN], [-INF, NAN, -INF, -INF], [NAN, -INF, NAN, 5.0],
                     [3.0, NAN, 3.0, NAN]])
    for ax in (0, 1):
        out[f"argmax@nan_axis{ax}"] = tf.argmax(g, axis=ax, output_type=tf.int32)
        out[f"argmin@nan_axis{ax}"] = tf.math.argmin(g, axis=ax, output_type=tf.int32)
    out["argmax@nan_float16"] = tf.argmax(tf.cast(g, tf.float16), axis=1, output_type=tf.int32)
    return out


# -- zeros --------------------------------------------------------------------------------------

Z = np.array([0.0, -0.0, 1e-30, 4.0], np.float32)


@parity(modes=True)
def test_unary_at_zero(tf):
    """sqrt / rsqrt / reciprocal / log / log1p(-1) / abs / sign / square / exp / l2_loss at 0 and
    -0 (inf values, inf or NaN gradients as TF's rules give), log of negatives."""
    m1 = np.array([-1.0, -2.0, 0.0, -0.5], np.float32)
    return vg_rows(tf, [
        ("sqrt@0", tf.sqrt, Z),
        ("rsqrt@0", tf.math.rsqrt, Z),
        ("reciprocal@0", tf.math.reciprocal, Z),
        ("reciprocal_no_nan@0", tf.math.reciprocal_no_nan, Z),
        ("log@0", tf.math.log, Z),
        ("log@negative", tf.math.log, m1),
        ("log1p@-1", tf.math.log1p, m1),
        ("abs@0", tf.abs, Z),
        ("sign@0", tf.sign, Z),
        ("square@0", tf.square, Z),
        ("l2_loss@0", tf.nn.l2_loss, np.zeros(3, np.float32)),
        ("l2_loss@mixed", tf.nn.l2_loss, Z),
        ("sqrt@negative", tf.sqrt, m1),
        ("pow_half@0", lambda u: u ** 0.5, Z),
    ])


@parity(modes=True)
def test_pow_at_zero_and_negative_base(tf):
    """pow: 0**0, 0**negative, 0**positive, negative**fractional and **integer, with both
    inputs watched (d/dy is 0 at x = 0 and where x < 0, as TF's _PowGrad masks)."""
    x = np.array([0.0, 0.0, 0.0, -8.0, -2.0, 2.0, 0.0, -0.0], np.float32)
    y = np.array([0.0, -1.0, 2.0, 1.0 / 3.0, 2.0, 0.0, 0.5, 3.0], np.float32)
    return vg_rows(tf, [
        ("pow@grid", tf.pow, x, y),
        ("math.pow@grid", tf.math.pow, x, y),
        ("operator_pow@grid", lambda a, b: a ** b, x, y),
        ("pow@scalar_exponent_0", lambda a: tf.pow(a, 0.0), x),
        ("pow@scalar_exponent_neg", lambda a: tf.pow(a, -2.0), x),
        ("pow@scalar_base_0", lambda b: tf.pow(0.0, b), y),
        ("square_via_pow@0", lambda a: tf.pow(a, 2.0), x),
    ])


@parity(modes=True)
def test_binary_no_nan_ops_at_zero(tf):
    """xlogy / xlog1py / xdivy / divide_no_nan / multiply_no_nan / div_no_nan at 0 and at 0/0,
    both inputs watched; atan2(0, 0); truediv / divide / floordiv / floormod of floats by 0."""
    x = np.array([0.0, 0.0, 1.0, -1.0, 0.0, 2.0], np.float32)
    y = np.array([0.0, -1.0, 0.0, 0.0, 3.0, -0.0], np.float32)
    return vg_rows(tf, [
        ("xlogy@zeros", tf.math.xlogy, x, y),
        ("xlog1py@zeros", tf.math.xlog1py, x, y - 1.0),
        ("xdivy@zeros", tf.math.xdivy, x, y),
        ("divide_no_nan@zeros", tf.math.divide_no_nan, x, y),
        ("multiply_no_nan@zeros", tf.math.multiply_no_nan, np.array([INF, NAN, 1.0, 0.0, 2.0, 1.0], np.float32), y),
        ("atan2@zeros", tf.math.atan2, y, x),
        ("truediv@zeros", tf.math.truediv, x, y),
        ("divide@zeros", tf.math.divide, x, y),
        ("operator_div@zeros", lambda a, b: a / b, x, y),
        ("floordiv@float_zeros", tf.math.floordiv, x, y),
        ("floormod@float_zeros", tf.math.floormod, x, y),
        ("squared_difference@equal", tf.math.squared_difference, x, x),
    ])


@parity(modes=True)
def test_integer_division_signs(tf):
    """Integer floordiv / floormod round toward -inf (the remainder takes the divisor's sign), also
    as the // and % operators (by zero: test_edge_points2's known differences)."""
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    return {"floordiv@int_signs": tf.math.floordiv(tf.constant(a), tf.constant(b)),
            "floormod@int_signs": tf.math.floormod(tf.constant(a), tf.constant(b)),
            "operator_floordiv@int_signs": tf.constant(a) // tf.constant(b),
            "operator_mod@int_signs": tf.constant(a) % 3, "truncatediv@int_signs": tf.truncatediv(a, b)}


@parity(modes=True, rtol=2e-5)
def test_norms_at_zero(tf):
    """tf.norm (ord 1, 2, inf, 'euclidean', 'fro'; axis None, int, pair; keepdims) and
    l2_normalize at the zero vector and matrix: 0, with TF's gradients (NaN for the 2-norm)."""
    z = np.zeros((2, 3), np.float32)
    mix = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, -4.0]], np.float32)
    return vg_rows(tf, [
        ("norm@0", tf.norm, z),
        ("norm_euclidean@0", lambda u: tf.norm(u, ord="euclidean"), z),
        ("norm_fro_pair@0", lambda u: tf.norm(u, ord="fro", axis=[0, 1]), z),
        ("norm_1@0_axis1", lambda u: tf.norm(u, ord=1, axis=1), mix),
        ("norm_2@0_axis1", lambda u: tf.norm(u, ord=2, axis=1), mix),
        ("norm_inf@0_axis1", lambda u: tf.norm(u, ord=np.inf, axis=1), mix),
        ("norm_euclidean@0_axis-1_keepdims", lambda u: tf.norm(u, axis=-1, keepdims=True), mix),
        ("norm_1@0_pair", lambda u: tf.norm(u, ord=1, axis=[-2, -1]), z),
        ("norm_inf@0_pair", lambda u: tf.norm(u, ord=np.inf, axis=(0, 1)), z),
        ("norm_1@pair_ties", lambda u: tf.norm(u, ord=1, axis=[0, 1]), np.array([[1.0, -2.0, 0.0], [-2.0, 1.0, 3.0]], np.float32)),
        ("norm_inf@pair_ties", lambda u: tf.norm(u, ord=np.inf, axis=[1, 0]), np.array([[1.0, -2.0, 0.0], [-2.0, 1.0, 0.0]], np.float32)),
        ("norm_1@pair_batched_keepdims", lambda u: tf.norm(u, ord=1, axis=[-2, -1], keepdims=True), np.stack([mix, z])),
        ("norm_3@0_axis1", lambda u: tf.norm(u, ord=3, axis=1), mix),
        ("linalg.norm@0", lambda u: tf.linalg.norm(u, axis=0), mix),
        ("l2_normalize@0_axis1", lambda u: tf.math.l2_normalize(u, axis=1), mix),
        ("l2_normalize@0_all", lambda u: tf.math.l2_normalize(u), z),
        ("nn.l2_normalize@0", lambda u: tf.nn.l2_normalize(u, axis=-1), mix),
        ("global_norm@0", lambda u: tf.linalg.global_norm([u, u]), z),
    ])


@parity(modes=True, rtol=2e-5, atol=1e-6)
def test_statistics_and_clipping_at_zero_spread(tf):
    """reduce_std / reduce_variance / moments / batch_normalization of a constant input (zero
    variance), clip_by_norm and clip_by_global_norm at a zero norm, reduce_euclidean_norm at 0,
    cumprod (through zeros: test_edge_points2's known differences), cumsum exclusive and reversed."""
    c = np.full((2, 3), 2.0, np.float32)
    return vg_rows(tf, [
        ("reduce_std@constant", lambda u: tf.math.reduce_std(u, axis=1), c),
        ("reduce_variance@constant", lambda u: tf.math.reduce_variance(u, axis=1), c),
        ("moments@constant", lambda u: list(tf.nn.moments(u, axes=[1])), c),
        ("batch_normalization@zero_variance",
         lambda u: tf.nn.batch_normalization(u, tf.reduce_mean(u, 0), tf.math.reduce_variance(u, 0), None, None, 1e-3), c),
        ("clip_by_norm@0", lambda u: tf.clip_by_norm(u, 1.0), np.zeros((2, 3), np.float32)),
        ("clip_by_norm@0_axis1", lambda u: tf.clip_by_norm(u, 1.0, axes=[1]), np.zeros((2, 3), np.float32)),
        ("clip_by_norm@at_norm", lambda u: tf.clip_by_norm(u, 5.0), np.array([3.0, 4.0], np.float32)),
        ("clip_by_global_norm@0", lambda u, v: tf.clip_by_global_norm([u, v], 1.0)[0],
         np.zeros(3, np.float32), np.zeros(2, np.float32)),
        ("reduce_euclidean_norm@0", lambda u: tf.math.reduce_euclidean_norm(u, axis=1), np.zeros((2, 3), np.float32)),
        ("cumprod@no_zeros", lambda u: tf.math.cumprod(u, axis=1), np.array([[2.0, -1.0, 3.0]], np.float32)),
        ("cumsum@exclusive_reverse", lambda u: tf.cumsum(u, exclusive=True, reverse=True) * [1.0, 2.0, 3.0],
         np.array([1.0, -INF, 2.0], np.float32)),
    ])


@parity(modes=True, rtol=2e-5, atol=1e-5)
def test_special_functions_at_domain_edges(tf):
    """asin / acos / atanh / erfinv at ±1, acosh at 1, lgamma / digamma at 0 and negative integers,
    log1p / expm1 far out, tan near its pole: TF's inf and NaN values and gradients."""
    e = np.array([-1.0, 1.0, 0.0], np.float32)
    return vg_rows(tf, [
        ("asin@pm1", tf.math.asin, e), ("acos@pm1", tf.math.acos, e), ("atanh@pm1", tf.math.atanh, e),
        ("erfinv@pm1", tf.math.erfinv, e), ("acosh@1", tf.math.acosh, np.array([1.0, 0.5, 2.0], np.float32)),
        ("lgamma@poles", tf.math.lgamma, np.array([0.0, -1.0, -2.5, 1.0], np.float32)),
        ("digamma@poles", tf.math.digamma, np.array([0.0, -1.0, -2.5, 1.0], np.float32)),
        ("log1p@far", tf.math.log1p, np.array([-1.0, -2.0, 1e30, -0.0], np.float32)),
        ("expm1@far", tf.math.expm1, np.array([-100.0, 100.0, -0.0], np.float32)),
        ("exp@far", tf.math.exp, np.array([-INF, 88.0, 89.0], np.float32)),
    ])


SPECIAL = np.array([-INF, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, INF, NAN], np.float32)
#: tf.math's elementwise float functions, each run over every point of ``SPECIAL``.
UNARY = ("negative square sqrt rsqrt reciprocal exp expm1 log log1p log_sigmoid sin cos tan asin acos atan sinh "
         "cosh tanh asinh acosh atanh sigmoid softplus softsign erf erfc lgamma digamma abs sign floor ceil round "
         "rint reciprocal_no_nan erfinv ndtri bessel_i0e bessel_i1e").split()


@parity(modes=True, rtol=2e-5, atol=1e-5)
def test_unary_math_at_special_points(tf):
    """Every elementwise tf.math function above at ±inf, ±1, ±0, ±0.5, ±2 and NaN: values and
    gradients (None for floor / ceil / round / rint), one row per function."""
    return vg_rows(tf, [(f"{n}@special_points", getattr(tf.math, n), SPECIAL) for n in UNARY])


_P = np.array([-INF, -1.0, -0.0, 0.0, 0.5, 1.0, INF, NAN], np.float32)
GRID_X, GRID_Y = np.repeat(_P, len(_P)), np.tile(_P, len(_P))
BINARY = ("add subtract multiply divide truediv pow maximum minimum atan2 squared_difference xlogy xdivy "
          "divide_no_nan multiply_no_nan floordiv floormod xlog1py").split()


@parity(modes=True, rtol=2e-5, atol=1e-5)
def test_binary_math_on_a_grid_of_special_points(tf):
    """Every pair of ±inf, ±1 (and 0.5), ±0 and NaN through tf.math's elementwise binary functions:
    values and both gradients (None for floordiv), one row per function; float floordiv / floormod
    where x / y rounds up to an integer (TF's floor(x / y): 1 // 0.1 is 10)."""
    r = np.array([1.0, 0.3, -1.0, 7.0], np.float32), np.array([0.1, 0.1, 0.1, -0.7], np.float32)
    return vg_rows(tf, [(f"{n}@special_grid", getattr(tf.math, n), GRID_X, GRID_Y) for n in BINARY]
                   + [("floordiv@rounding", tf.math.floordiv, *r), ("floormod@rounding", tf.math.floormod, *r),
                      ("operator_floordiv@rounding", lambda a, b: a // b, *r)])


REDUCE = ("reduce_sum reduce_mean reduce_max reduce_min reduce_prod reduce_logsumexp reduce_variance reduce_std "
          "reduce_euclidean_norm").split()
ROWS = np.array([[1.0, INF, 2.0], [-INF, INF, 0.0], [NAN, 1.0, 1.0], [0.0, 0.0, 0.0], [-0.0, -2.0, -2.0]], np.float32)


@parity(modes=True, rtol=2e-5, atol=1e-5)
def test_reductions_over_rows_of_special_points(tf):
    """tf.math's reductions along rows holding inf, inf and -inf, NaN, all zeros and a tie: values
    and gradients, one row per reduction, cumsum, and cumulative_logsumexp of finite rows (cumprod's
    gradient through infinities, cumulative_logsumexp's of them: test_edge_points2's known differences)."""
    rows = [(f"{n}@special_rows", lambda u, n=n: getattr(tf.math, n)(u, axis=1), ROWS) for n in REDUCE]
    return vg_rows(tf, rows + [
        ("cumsum@special_rows", lambda u: tf.math.cumsum(u, axis=1), ROWS),
        ("cumulative_logsumexp@finite_rows", lambda u: tf.math.cumulative_logsumexp(u, axis=1),
         np.array([[-100.0, 100.0, 0.0], [1.0, 50.0, 2.0], [-80.0, -90.0, 85.0], [0.0, 0.0, 0.0]], np.float32)),
    ])


@parity(modes=True, rtol=2e-5)
def test_second_derivatives_at_edges(tf):
    """Second derivatives where the first is finite at an edge: sqrt'' at 4 and 0, softplus'' far
    out, sigmoid'' at 0, pow'' w.r.t. x and y at 0 and 1, xlogy'' at 0, log_softmax'' with -inf."""
    def d2(f, x):
        return vg2(tf, f, x)
    return {
        "sqrt@second_0": d2(tf.sqrt, [0.0, 4.0]),
        "softplus@second_far": d2(tf.nn.softplus, [-100.0, 0.0, 100.0]),
        "sigmoid@second_0": d2(tf.sigmoid, [0.0, 50.0]),
        "pow_x@second": d2(lambda u: tf.pow(u, 3.0), [0.0, 1.0]),
        "pow_y@second": d2(lambda u: tf.pow(tf.constant([0.0, 2.0]), u), [0.0, 1.0]),
        "xlogy@second_0": d2(lambda u: tf.math.xlogy(u, u), [0.0, 1.0]),
        "log_softmax@second_neg_inf": d2(lambda u: tf.nn.log_softmax(u)[0], [0.0, -INF, 1.0]),
        "elu@second_0": d2(tf.nn.elu, [0.0, -1.0]),
        "gelu@second_0": d2(tf.nn.gelu, [0.0, 3.0]),
    }
