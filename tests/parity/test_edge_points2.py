"""TF's conventions at edge points, second half (``test_edge_points.py`` explains the tables):
non-finite values (softmax over -inf, cross-entropies at extreme logits, the ``tf.where`` NaN
trap, inf - inf), empty tensors (zero-size batches through matmul, reductions, concat, gather and
the segment ops, with their gradients), and dtypes (the gradient's dtype for float16 / bfloat16 /
float64 sources, integer and bool sources and intermediates, complex sources, mixed-dtype errors).
"""
import numpy as np

from .harness import parity, raises, xfail_on_tapejax
from .test_edge_points import INF, NAN, raised_rows, vg_rows

# -- non-finite values ----------------------------------------------------------------------------

NEG = np.array([[0.0, -INF, 1.0], [-INF, -INF, -INF], [-INF, 2.0, -INF], [1e30, -1e30, 0.0]], np.float32)


@parity(modes=True)
def test_softmax_with_infinities(tf):
    """softmax / log_softmax with -inf entries, an all -inf row (NaN), one finite entry and huge
    logits; along both axes."""
    return vg_rows(tf, [
        ("softmax@neg_inf_rows", tf.nn.softmax, NEG),
        ("softmax@neg_inf_axis0", lambda u: tf.nn.softmax(u, axis=0), NEG),
        ("log_softmax@neg_inf_rows", tf.nn.log_softmax, NEG),
        ("math.log_softmax@neg_inf_axis0", lambda u: tf.math.log_softmax(u, axis=0), NEG),
        ("softmax@finite_rows_only", tf.nn.softmax, NEG[[0, 2, 3]]),
        ("log_softmax@finite_rows_only", tf.nn.log_softmax, NEG[[0, 2, 3]]),
        ("reduce_logsumexp@neg_inf_rows", lambda u: tf.reduce_logsumexp(u, axis=1), NEG),
        ("reduce_logsumexp@pos_inf", lambda u: tf.reduce_logsumexp(u, axis=1),
         np.array([[INF, 1.0], [INF, INF], [INF, -INF]], np.float32)),
    ])


@parity(modes=True, rtol=2e-5, atol=1e-5)
def test_cross_entropies_at_extreme_logits(tf):
    """sigmoid / softmax / sparse softmax / weighted cross-entropies with logits of ±100, ±1e4
    and soft labels: finite losses, TF's gradients (labels watched too)."""
    lg = np.array([[100.0, -100.0, 0.0], [-1e4, 1e4, 0.0], [1e4, 1e4, -1e4]], np.float32)
    lb = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], np.float32)
    flip = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], np.float32)
    return vg_rows(tf, [
        ("sigmoid_cross_entropy_with_logits@extreme",
         lambda a, b: tf.nn.sigmoid_cross_entropy_with_logits(labels=a, logits=b), lb, lg),
        ("sigmoid_cross_entropy_with_logits@extreme_wrong",
         lambda a, b: tf.nn.sigmoid_cross_entropy_with_logits(labels=a, logits=b), flip, lg),
        ("softmax_cross_entropy_with_logits@extreme",
         lambda a, b: tf.nn.softmax_cross_entropy_with_logits(labels=a, logits=b), lb, lg),
        ("softmax_cross_entropy_with_logits@extreme_wrong",
         lambda a, b: tf.nn.softmax_cross_entropy_with_logits(labels=a, logits=b), flip / 2.0, lg),
        ("sparse_softmax_cross_entropy_with_logits@extreme",
         lambda b: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant([0, 1, 2]), logits=b), lg),
        ("weighted_cross_entropy_with_logits@extreme",
         lambda a, b: tf.nn.weighted_cross_entropy_with_logits(labels=a, logits=b, pos_weight=3.0), flip, lg),
        ("log_sigmoid@extreme", tf.math.log_sigmoid, lg),
        ("softplus@extreme", tf.math.softplus, lg),
    ])


@parity(modes=True)
def test_where_nan_gradient_trap(tf):
    """The ``tf.where`` trap: the gradient of the branch not taken is multiplied by zero, so sqrt
    and rsqrt (TF's zero-cotangent rule) stay finite while log, 1/x and pow give NaN where their
    derivative is infinite; the safe double-where pattern is finite everywhere."""
    x = np.array([-1.0, 0.0, 4.0], np.float32)
    return vg_rows(tf, [
        ("where_sqrt@nonpositive", lambda u: tf.where(u > 0, tf.sqrt(u), 0.0), x),
        ("where_rsqrt@nonpositive", lambda u: tf.where(u > 0, tf.math.rsqrt(u), 0.0), x),
        ("where_reciprocal@nonpositive", lambda u: tf.where(u > 0, tf.math.reciprocal(u), 0.0), x),
        ("where_log@nonpositive", lambda u: tf.where(u > 0, tf.math.log(u), 0.0), x),
        ("where_div@nonpositive", lambda u: tf.where(u > 0, 1.0 / u, 0.0), x),
        ("where_pow@nonpositive", lambda u: tf.where(u > 0, tf.pow(u, 0.5), 0.0), x),
        ("where_double@nonpositive", lambda u: tf.where(u > 0, tf.math.log(tf.where(u > 0, u, 1.0)), 0.0), x),
        ("norm_via_sqrt@0", lambda u: tf.sqrt(tf.reduce_sum(u * u)), np.zeros(3, np.float32)),
    ])


@parity(modes=True)
def test_inf_arithmetic(tf):
    """inf - inf, inf * 0, inf / inf, NaN * 0, sums over NaN and inf, exp overflow, and their gradients."""
    a = np.array([INF, INF, -INF, 1.0], np.float32)
    b = np.array([INF, -INF, -INF, INF], np.float32)
    return vg_rows(tf, [
        ("subtract@inf_inf", tf.subtract, a, b),
        ("add@inf_neg_inf", tf.add, a, b),
        ("multiply@inf_zero", tf.multiply, a, np.zeros(4, np.float32)),
        ("divide@inf_inf", tf.divide, a, b),
        ("multiply@nan_zero", tf.multiply, np.array([NAN, 0.0], np.float32), np.array([0.0, NAN], np.float32)),
        ("reduce_sum@nan_inf", tf.reduce_sum, np.array([NAN, INF, 1.0], np.float32)),
        ("exp@overflow", tf.exp, np.array([100.0, 89.0, -200.0, 0.0], np.float32)),
        ("square@large", tf.square, np.array([1e20, -1e20, 3e38, 0.0], np.float32)),
    ])


# -- empty tensors --------------------------------------------------------------------------------

E03 = np.zeros((0, 3), np.float32)


@parity(modes=True)
def test_empty_tensors(tf):
    """A zero-size batch through matmul, reductions (sum 0, mean NaN, max -inf, min inf, prod 1,
    each over all axes and over the empty one), concat, gather, segment sums and softmax, with
    their gradients (zeros of the input's shape)."""
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    return vg_rows(tf, [
        ("matmul@empty_batch", tf.matmul, E03, w),
        ("matmul@empty_inner", tf.matmul, np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)),
        ("reduce_sum@empty", tf.reduce_sum, E03),
        ("reduce_sum@empty_axis0", lambda u: tf.reduce_sum(u, axis=0), E03),
        ("reduce_mean@empty", tf.reduce_mean, E03),
        ("reduce_mean@empty_axis0", lambda u: tf.reduce_mean(u, axis=0), E03),
        ("reduce_mean@empty_axis1", lambda u: tf.reduce_mean(u, axis=1), E03),
        ("reduce_max@empty", tf.reduce_max, E03),
        ("reduce_max@empty_axis0", lambda u: tf.reduce_max(u, axis=0), E03),
        ("reduce_min@empty_axis0", lambda u: tf.reduce_min(u, axis=0), E03),
        ("reduce_prod@empty_axis0", lambda u: tf.reduce_prod(u, axis=0), E03),
        ("reduce_logsumexp@empty_axis0", lambda u: tf.reduce_logsumexp(u, axis=0), E03),
        ("reduce_variance@empty_axis0", lambda u: tf.math.reduce_variance(u, axis=0), E03),
        ("concat@empty", lambda u, v: tf.concat([u, v], axis=0), E03, w.T),
        ("stack@empty", lambda u: tf.stack([u, u]), E03),
        ("gather@empty_indices", lambda u: tf.gather(u, tf.constant([], tf.int32)), w),
        ("gather@empty_params", lambda u: tf.gather(u, tf.constant([], tf.int32)), E03),
        ("unsorted_segment_sum@empty", lambda u: tf.math.unsorted_segment_sum(u, tf.zeros([0], tf.int32), 2), E03),
        ("unsorted_segment_max@empty", lambda u: tf.math.unsorted_segment_max(u, tf.zeros([0], tf.int32), 2), E03),
        ("segment_sum@empty", lambda u: tf.math.segment_sum(u, tf.zeros([0], tf.int32)), E03),
        ("softmax@empty_batch", tf.nn.softmax, E03),
        ("relu@empty", tf.nn.relu, E03),
        ("l2_loss@empty", tf.nn.l2_loss, E03),
        ("norm@empty", tf.norm, E03),
    ])


@parity(modes=True)
def test_empty_integer_reductions(tf):
    """Reductions of empty integer tensors: TF's identities (the int32 extremes for max / min,
    0 for mean, 1 for prod) and their dtypes; reduce_any / reduce_all of nothing."""
    e = tf.zeros([0, 2], tf.int32)
    return {
        "reduce_sum@int_empty": tf.reduce_sum(e), "reduce_mean@int_empty": tf.reduce_mean(e),
        "reduce_max@int_empty": tf.reduce_max(e), "reduce_min@int_empty": tf.reduce_min(e, axis=0),
        "reduce_prod@int_empty": tf.reduce_prod(e), "reduce_any@empty": tf.reduce_any(tf.zeros([0], tf.bool)),
        "reduce_all@empty": tf.reduce_all(tf.zeros([0], tf.bool)),
        "reduce_mean@int_axis1_empty": tf.reduce_mean(tf.zeros([2, 0], tf.int32), axis=1),
    }


# -- dtypes -------------------------------------------------------------------------------------------

@parity(modes=True, rtol=1e-2, atol=1e-2)
def test_gradient_dtypes_half(tf):
    """float16 and bfloat16 sources: the gradient has the source's dtype, through a cast to float32
    too; ties and kinks in the half types."""
    x16 = tf.constant([0.0, 1.5, -2.0, 1.5], tf.float16)
    xb = tf.constant([0.0, 1.5, -2.0, 1.5], tf.bfloat16)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x16, xb])
        y16 = tf.reduce_max(x16) + tf.reduce_sum(tf.nn.relu(x16) * x16)
        yb = tf.reduce_max(xb) + tf.reduce_sum(tf.abs(xb))
        c16 = tf.reduce_sum(tf.cast(x16, tf.float32) ** 2)
        cb = tf.reduce_sum(tf.sqrt(tf.cast(xb, tf.float32)))
    return {"float16@max_relu": (y16, t.gradient(y16, x16)), "bfloat16@max_abs": (yb, t.gradient(yb, xb)),
            "float16@cast_float32": (c16, t.gradient(c16, x16)), "bfloat16@cast_sqrt0": (cb, t.gradient(cb, xb))}


@parity(modes=True, x64=True)
def test_gradient_dtypes_float64_and_int64(tf):
    """float64 sources (also through a cast to float32: a float64 gradient), int64 argmax and
    truediv of ints (float64 with inf and NaN at 0), with JAX's 64-bit mode on the tapejax side."""
    x = tf.constant([0.0, 2.0, 2.0, -1.0], tf.float64)
    f = tf.constant([1.0, 4.0], tf.float32)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, f])
        y = tf.reduce_max(x) + tf.reduce_sum(tf.sqrt(tf.abs(x)))
        c = tf.reduce_sum(tf.cast(x, tf.float32) * 3.0)
        g = tf.reduce_sum(tf.cast(f, tf.float64) ** 2)
    ai = tf.constant([1, 0, -3])
    return {"float64@max_sqrt": (y, t.gradient(y, x)), "float64@cast_float32": (c, t.gradient(c, x)),
            "float32@cast_float64": (g, t.gradient(g, f)),
            "argmax@ties_int64": tf.argmax(x), "argmin@int64": tf.math.argmin(x),
            "truediv@int_zero": tf.math.truediv(ai, tf.constant([0, 0, 0])),
            "operator_div@int_zero": ai / tf.constant([0, 0, 2])}


@parity(modes=True)
def test_integer_and_bool_paths(tf):
    """Integer and bool sources and intermediates: None (TF's rule), also with 'zero' (integer
    zeros); a path through cast(argmax), cast(equal), float -> int -> float, floor and round."""
    i = tf.constant([1, 2, 3])
    b = tf.constant([True, False, True])
    x = tf.constant([0.5, -1.5, 2.5])
    with tf.GradientTape(persistent=True) as t:
        t.watch([i, x])
        yi = tf.reduce_sum(i * i)
        yc = tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float32))
        ya = tf.cast(tf.argmax(x), tf.float32)
        ye = tf.reduce_sum(tf.cast(tf.equal(x, 0.5), tf.float32))
        yb = tf.reduce_sum(tf.cast(x > 0, tf.float32) * x)
        yf = tf.reduce_sum(tf.floor(x) + tf.round(x))
        ys = tf.reduce_sum(tf.sign(x))
        ym = tf.reduce_sum(tf.cast(tf.cast(x, tf.bool), tf.float32))
    return {"int@source": t.gradient(yi, i), "int@source_zero": t.gradient(yi, i, unconnected_gradients="zero"),
            "cast_int@path": t.gradient(yc, x), "cast_int@path_zero": t.gradient(yc, x, unconnected_gradients="zero"),
            "cast_argmax@path": t.gradient(ya, x), "cast_equal@path": t.gradient(ye, x),
            "bool_mask@path": t.gradient(yb, x), "floor_round@path": t.gradient(yf, x),
            "sign@path": t.gradient(ys, x), "cast_bool@path": t.gradient(ym, x),
            "bool@watch": raises(lambda: t.gradient(tf.reduce_sum(tf.cast(b, tf.float32)), b))}


@parity(modes=True)
def test_complex_gradients(tf):
    """Complex sources: TF returns the conjugate of the derivative convention (d|z|^2/dz = 2z);
    abs / real / imag / angle at 0 and off it, a complex matmul, exp."""
    z = tf.constant([1.0 + 2.0j, 0.0 + 0.0j, -3.0 + 0.5j], tf.complex64)
    m = tf.constant([[1.0 + 1.0j, 2.0 - 1.0j], [0.5j, -1.0 + 0.0j]], tf.complex64)
    with tf.GradientTape(persistent=True) as t:
        t.watch([z, m])
        s2 = tf.reduce_sum(tf.math.real(z * tf.math.conj(z)))
        ab = tf.reduce_sum(tf.abs(z))
        re = tf.reduce_sum(tf.math.real(z) + 2.0 * tf.math.imag(z))
        an = tf.reduce_sum(tf.math.angle(z))
        mm = tf.reduce_sum(tf.math.real(tf.matmul(m, m)))
        ex = tf.math.real(tf.reduce_sum(tf.exp(z)))
        hol = tf.reduce_sum(z * z)
        cr = tf.reduce_sum(tf.cast(z, tf.float32) * [1.0, 2.0, 3.0])
        sq = tf.reduce_sum(tf.abs(tf.sqrt(z)))
    return {"abs_squared@complex": (s2, t.gradient(s2, z)), "abs@complex_with_0": (ab, t.gradient(ab, z)),
            "real_imag@complex": t.gradient(re, z), "angle@complex_with_0": (an, t.gradient(an, z)),
            "matmul@complex": t.gradient(mm, m), "exp@complex": t.gradient(ex, z),
            "holomorphic_target@complex": (hol, t.gradient(hol, z)), "cast_to_real@complex": (cr, t.gradient(cr, z)),
            "sqrt@complex_with_0": (sq, t.gradient(sq, z))}


@parity(modes=True)
def test_mixed_dtype_errors(tf):
    """Mixed dtypes: int32 + float32 raises InvalidArgumentError; a float64 NumPy array next to a
    float32 Tensor, a Python float next to an int Tensor (TypeError or ValueError by position),
    float16 + float32."""
    i, f = tf.constant([1, 2]), tf.constant([1.0, 2.0])
    d = np.array([0.5, 1.5])
    return raised_rows([
        ("add@int32_float32", lambda: tf.add(i, f)),
        ("operator_add@int32_float32", lambda: i + f),
        ("multiply@float32_int32", lambda: tf.multiply(f, i)),
        ("add@np_float64_second", lambda: tf.add(f, d)),
        ("operator_add@np_float64", lambda: f + d),
        ("operator_radd@np_float64", lambda: d + f),
        ("add@python_float_int_tensor", lambda: tf.add(i, 0.5)),
        ("operator_add@python_float_int_tensor", lambda: i + 0.5),
        ("operator_mul@python_float_int_tensor", lambda: i * 2.0),
        ("operator_add@python_int_float_tensor", lambda: f + 1),
        ("maximum@int32_float32", lambda: tf.maximum(i, f)),
        ("add@float16_float32", lambda: tf.add(tf.cast(f, tf.float16), f)),
        ("matmul@int32_float32", lambda: tf.matmul(tf.reshape(i, (1, 2)), tf.reshape(f, (2, 1)))),
        ("pow@int_negative_exponent", lambda: tf.pow(i, -1)),
        ("operator_add@uint8_python_int_overflow", lambda: tf.constant([1], tf.uint8) + 300),
        ("operator_add@float16_python_float_overflow", lambda: tf.constant([1.0], tf.float16) + 1e6),
        ("operator_sub@bool", lambda: tf.constant([True]) - tf.constant([False])),
        ("operator_add@bool", lambda: tf.constant([True]) + tf.constant([True])),
        ("operator_neg@bool", lambda: -tf.constant([True])),
        ("operator_mul@bool", lambda: tf.constant([True, False]) * tf.constant([True, True])),
        ("add@bool", lambda: tf.add(tf.constant([True]), tf.constant([True]))),
        ("maximum@bool", lambda: tf.maximum(tf.constant([True]), tf.constant([False]))),
        ("abs@bool", lambda: tf.abs(tf.constant([True]))), ("square@bool", lambda: tf.square(tf.constant([True]))),
        ("add_n@bool", lambda: tf.math.add_n([tf.constant([True]), tf.constant([True])])),
        ("truediv@bool", lambda: tf.math.truediv(tf.constant([True]), tf.constant([True]))),
        ("operator_add@int_python_bool", lambda: i + True),
        ("maximum@float_python_bool", lambda: tf.maximum(f, True)),
        ("operator_truediv@float32_python_int", lambda: f / 2),
        ("operator_floordiv@float32_python_float", lambda: f // 0.5),
        ("operator_pow@int32_python_float", lambda: i ** 0.5),
    ])


# -- more ops training code uses -------------------------------------------------------------------

@parity(modes=True)
def test_rounding_and_integer_means(tf):
    """round (half to even), rint, floor, ceil, sign at halves and signed zeros (their gradients:
    None for floor / ceil / round, zeros for sign); integer reduce_mean truncates toward 0;
    clip_by_value with lo > hi; reductions over an empty axis list (no reduction)."""
    h = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -0.0, 0.49999997], np.float32)
    out = vg_rows(tf, [
        ("round@halves", tf.round, h), ("rint@halves", tf.math.rint, h), ("floor@halves", tf.floor, h),
        ("ceil@halves", tf.math.ceil, h), ("sign@halves", tf.sign, h),
        ("clip_by_value@lo_above_hi", lambda u: tf.clip_by_value(u, 1.0, 0.0), h),
        ("reduce_sum@axis_empty_list", lambda u: tf.reduce_sum(u, axis=[]), h),
        ("reduce_max@axis_empty_list", lambda u: tf.reduce_max(u, axis=[]), h),
        ("reduce_mean@axis_empty_list", lambda u: tf.reduce_mean(u, axis=[]), h),
    ])
    i = tf.constant([[-1, -2, 4], [3, 4, -8]])
    out["reduce_mean@int_truncates"] = tf.reduce_mean(i, axis=1)
    out["reduce_mean@int_all"] = tf.reduce_mean(i)
    out["reduce_max@int_axis0"] = tf.reduce_max(i, axis=0)
    out["reduce_prod@int_overflow"] = tf.reduce_prod(tf.constant([65536, 65536, 3]))
    out["cumsum@int"] = tf.cumsum(i, axis=1, exclusive=True)
    return out


@parity(modes=True)
def test_one_hot_in_top_k_and_lookups_at_edges(tf):
    """one_hot with negative and out-of-range indices (zero rows); in_top_k with ties and non-finite
    predictions (False); embedding_lookup with max_norm over a zero row; weighted_moments with zero
    weights; tf.linalg.normalize at 0."""
    pred = tf.constant([[1.0, 3.0, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0], [NAN, 1.0, 2.0, 0.0], [INF, 1.0, 0.0, 0.0]])
    out = {
        "one_hot@out_of_range": tf.one_hot(tf.constant([0, -1, 3, 5]), 4),
        "one_hot@on_off": tf.one_hot(tf.constant([1, -1]), 3, on_value=2.0, off_value=-1.0),
        "in_top_k@ties_k1": tf.math.in_top_k(tf.constant([1, 2, 0, 0]), pred, 1),
        "in_top_k@ties_k2": tf.math.in_top_k(tf.constant([3, 1, 2, 1]), pred, 2),
    }
    out.update(vg_rows(tf, [
        ("embedding_lookup@max_norm_zero_row",
         lambda p: tf.nn.embedding_lookup(p, tf.constant([0, 1, 1]), max_norm=1.0),
         np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)),
        ("weighted_moments@zero_weights",
         lambda x, w: list(tf.nn.weighted_moments(x, axes=[1], frequency_weights=w)),
         np.array([[1.0, 2.0], [3.0, 5.0]], np.float32), np.array([[0.0, 0.0], [1.0, 0.0]], np.float32)),
        ("linalg.normalize@0", lambda u: list(tf.linalg.normalize(u, axis=1)),
         np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)),
        ("log_poisson_loss@full_targets_0_1", lambda x: tf.nn.log_poisson_loss(
            tf.constant([0.0, 1.0, 2.0, 0.5]), x, compute_full_loss=True), np.array([0.0, -1.0, 1.0, 2.0], np.float32)),
    ]))
    return out


@parity(modes=True, rtol=2e-5)
def test_pools_3d_and_argmax_pool_at_ties(tf):
    """max_pool3d / avg_pool3d with ties and SAME padding; max_pool_with_argmax's indices at ties."""
    x = np.zeros((1, 3, 3, 3, 1), np.float32)
    x[0, 0, 0, 0, 0] = x[0, 1, 1, 1, 0] = 1.0
    out = vg_rows(tf, [
        ("max_pool3d@ties_same", lambda u: tf.nn.max_pool3d(u, 2, 2, "SAME"), x),
        ("avg_pool3d@same", lambda u: tf.nn.avg_pool3d(u, 2, 2, "SAME"), x),
    ])
    v, i = tf.nn.max_pool_with_argmax(tf.constant(np.ones((1, 4, 4, 1), np.float32)), 2, 2, "VALID")
    out["max_pool_with_argmax@ties"] = (v, tf.cast(i, tf.int32))
    return out


@parity(modes=True)
def test_dtype_errors_of_reductions_and_activations(tf):
    """Bool and int inputs where TF's kernels take floats only (or numbers only): the error classes."""
    b, i = tf.constant([True, False]), tf.constant([1, -2])
    return raised_rows([
        ("reduce_sum@bool", lambda: tf.reduce_sum(b)), ("reduce_max@bool", lambda: tf.reduce_max(b)),
        ("reduce_mean@bool", lambda: tf.reduce_mean(b)), ("reduce_prod@bool", lambda: tf.reduce_prod(b, axis=0)),
        ("reduce_min@bool", lambda: tf.reduce_min(b)), ("cumsum@bool", lambda: tf.cumsum(b)),
        ("cumprod@bool", lambda: tf.math.cumprod(b)), ("reduce_logsumexp@int", lambda: tf.reduce_logsumexp(i)),
        ("softmax@int", lambda: tf.nn.softmax(i)), ("sqrt@int", lambda: tf.sqrt(i)), ("relu@int", lambda: tf.nn.relu(i)),
        ("elu@int", lambda: tf.nn.elu(i)), ("sigmoid@int", lambda: tf.sigmoid(i)), ("abs@int", lambda: tf.abs(i)),
        ("l2_loss@int", lambda: tf.nn.l2_loss(i)), ("norm@int", lambda: tf.norm(i)),
        ("dropout@rate_1", lambda: tf.nn.dropout(tf.constant([1.0, 2.0]), rate=1.0)),
        ("dropout@rate_0", lambda: tf.nn.dropout(tf.constant([1.0, 2.0]), rate=0.0)),
        ("top_k@k_too_large", lambda: tf.math.top_k(tf.constant([1.0, 2.0]), k=3)),
        ("one_hot@float_indices", lambda: tf.one_hot(tf.constant([1.0]), 3)),
    ])


@parity(modes=True, rtol=1e-2, atol=1e-3)
def test_half_precision_overflow(tf):
    """float16 / bfloat16 near their limits: exp overflow, softmax and log_softmax of large logits,
    squares past the range (the sums: known differences below); within one bfloat16 ulp."""
    big = np.array([60000.0, 60000.0, -60000.0, 1.0], np.float16)
    out = {}
    for name, dt in (("float16", tf.float16), ("bfloat16", tf.bfloat16)):
        x = tf.cast(tf.constant(big.astype(np.float32)), dt)
        lg = tf.cast(tf.constant([[60000.0, 0.0, -60000.0], [12.0, 11.0, -3.0]]), dt)
        with tf.GradientTape() as t:
            t.watch([x, lg])
            ys = [tf.reduce_sum(x[2:]), tf.exp(x / 5000.0), tf.square(x),
                  tf.nn.softmax(lg), tf.nn.log_softmax(lg), tf.reduce_logsumexp(lg, axis=1)]
        out[f"{name}@overflow"] = (ys, t.gradient(ys, [x, lg]))
    return out


@parity(modes=True)
def test_sort_and_top_k_with_nan_and_inf(tf):
    """top_k / sort / argsort with ±inf, and top_k's gradient through them."""
    v = np.array([[1.0, INF, -INF, 3.0, -INF], [2.0, 2.0, INF, INF, 0.0]], np.float32)
    out = vg_rows(tf, [
        ("top_k@inf_values", lambda u: tf.math.top_k(u, k=3).values, v),
        ("sort@inf", lambda u: tf.sort(u, axis=1), v),
    ])
    out["top_k@inf_indices"] = tf.math.top_k(tf.constant(v), k=4).indices
    out["argsort@inf"] = tf.argsort(tf.constant(v), stable=True)
    return out


@parity(modes=True, rtol=2e-5, atol=1e-6)
def test_softplus_thresholds_and_clipping_of_nonfinite_norms(tf):
    """softplus / softsign / log_sigmoid around TF's softplus thresholds (about ±13.94 in float32);
    clip_by_global_norm and clip_by_norm with an inf entry (TF: NaN values)."""
    s = np.array([-15.0, -13.95, -13.9, 13.9, 13.95, 15.0, 30.0], np.float32)
    return vg_rows(tf, [
        ("softplus@thresholds", tf.nn.softplus, s),
        ("log_sigmoid@thresholds", tf.math.log_sigmoid, s),
        ("sigmoid_cross_entropy@thresholds",
         lambda u: tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.ones_like(u), logits=u), s),
        ("clip_by_global_norm@inf", lambda u, v: list(tf.clip_by_global_norm([u, v], 1.0)),
         np.array([INF, 1.0], np.float32), np.array([2.0], np.float32)),
        ("clip_by_norm@inf", lambda u: tf.clip_by_norm(u, 1.0), np.array([INF, 1.0], np.float32)),
        ("global_norm@inf", lambda u: tf.linalg.global_norm([u]), np.array([INF, 1.0], np.float32)),
    ])


@parity(modes=True)
def test_scatter_with_duplicate_indices(tf):
    """tensor_scatter_nd_update / add / max / min with duplicate indices: the values (add sums, max
    and min reduce) and the gradients to the tensor (0 where written) and to each update."""
    t0 = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    u = np.array([5.0, 7.0, 5.0], np.float32)
    idx = tf.constant([[1], [1], [3]])
    return vg_rows(tf, [
        ("tensor_scatter_nd_add@dup", lambda a, b: tf.tensor_scatter_nd_add(a, idx, b), t0, u),
        ("tensor_scatter_nd_max@dup", lambda a, b: tf.tensor_scatter_nd_max(a, idx, b), t0, u),
        ("tensor_scatter_nd_min@dup", lambda a, b: tf.tensor_scatter_nd_min(a, idx, b), t0, u),
        ("tensor_scatter_nd_update@distinct", lambda a, b: tf.tensor_scatter_nd_update(a, tf.constant([[0], [2]]), b),
         t0, u[:2]),
        ("scatter_nd@dup", lambda b: tf.scatter_nd(idx, b, [4]), u),
    ])


@parity(modes=True)
def test_more_empty_batches_and_infinite_rows(tf):
    """conv2d / bias_add of a zero-size batch (filter and bias gradients 0); softmax with +inf
    entries; reduce_max of an all -inf row (the tie split between the -infs); unsorted_segment_max /
    min of -inf / inf entries (TF's lowest / highest finite value), the sorted segment_max's -inf."""
    x = np.zeros((0, 4, 4, 2), np.float32)
    w = np.ones((3, 3, 2, 3), np.float32)
    out = vg_rows(tf, [
        ("conv2d@empty_batch", lambda a, b: tf.nn.conv2d(a, b, 1, "SAME"), x, w),
        ("bias_add@empty_batch", tf.nn.bias_add, np.zeros((0, 3), np.float32), np.ones(3, np.float32)),
        ("max_pool2d@window_past_input_same", lambda a: tf.nn.max_pool2d(a, 4, 3, "SAME"),
         np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)),
        ("avg_pool2d@window_past_input_same", lambda a: tf.nn.avg_pool2d(a, 4, 3, "SAME"),
         np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)),
        ("softmax@pos_inf", tf.nn.softmax, np.array([[INF, 1.0], [INF, INF], [-INF, INF]], np.float32)),
        ("reduce_max@all_neg_inf", lambda a: tf.reduce_max(a, axis=1), np.array([[-INF, -INF], [1.0, -INF]], np.float32)),
        ("unsorted_segment_max@neg_inf", lambda a: tf.math.unsorted_segment_max(a, tf.constant([0, 1, 1, 2]), 3),
         np.array([-INF, -INF, 2.0, INF], np.float32)),
        ("unsorted_segment_min@pos_inf", lambda a: tf.math.unsorted_segment_min(a, tf.constant([0, 1, 1, 2]), 3),
         np.array([INF, INF, -2.0, -INF], np.float32)),
        ("segment_max@neg_inf", lambda a: tf.math.segment_max(a, tf.constant([0, 1, 1, 2])),
         np.array([-INF, -INF, 2.0, INF], np.float32)),
    ])
    # (forward only: TF 2.21's gradient of an empty max_pool output is uninitialised memory)
    out["max_pool2d@window_past_input_valid"] = tf.nn.max_pool2d(tf.ones([1, 3, 3, 1]), 4, 1, "VALID")
    return out


@parity(modes=True)
def test_numerics_checks_and_loss_averaging_at_edges(tf):
    """check_numerics / assert_all_finite on NaN and inf (TF's InvalidArgumentError) and on finite
    values; is_nan / is_inf / is_finite (no gradient); compute_average_loss of an empty batch and
    with a zero global batch size."""
    x = tf.constant([1.0, NAN, INF])
    out = raised_rows([
        ("check_numerics@nan", lambda: tf.debugging.check_numerics(x, "x")),
        ("check_numerics@inf", lambda: tf.debugging.check_numerics(x[2:], "x")),
        ("check_numerics@finite", lambda: tf.debugging.check_numerics(x[:1], "x")),
        ("assert_all_finite@nan", lambda: tf.debugging.assert_all_finite(x, "x")),
        ("compute_average_loss@empty", lambda: tf.nn.compute_average_loss(tf.zeros([0]))),
        ("compute_average_loss@global_0", lambda: tf.nn.compute_average_loss(tf.ones([2]), global_batch_size=0)),
        ("compute_average_loss@weights_0", lambda: tf.nn.compute_average_loss(
            tf.ones([2]), sample_weight=tf.zeros([2]))),
    ])
    out.update(vg_rows(tf, [
        ("is_nan@grad", lambda u: tf.cast(tf.math.is_nan(u), tf.float32) + tf.cast(tf.math.is_inf(u), tf.float32)
         + tf.cast(tf.math.is_finite(u), tf.float32), np.array([1.0, NAN, INF], np.float32)),
        ("where_is_finite@safe", lambda u: tf.where(tf.math.is_finite(u), u, tf.zeros_like(u)),
         np.array([1.0, NAN, -INF], np.float32)),
    ]))
    return out


# -- known differences --------------------------------------------------------------------------------

# Each program below differs from TF on purpose or by a design limit (the reasons are the xfails'); its
# [tf] item still runs, so the TF side stays checked.

@xfail_on_tapejax("TF's CPU kernels raise InvalidArgumentError for an integer division by 0 (a check of the "
                  "values, a host read per op); tapejax gives XLA's values unless the value-check mode is on "
                  "(tapejax.debugging.enable_value_checks), as for the other CPU-kernel value checks that "
                  "ops/checks.py leaves off by default")
@parity(modes=True)
def test_integer_division_by_zero(tf):
    """Integer floordiv / floormod / truncatediv by 0: TF raises (truncatediv as InternalError)."""
    a, z = np.array([1, 0, -3], np.int32), np.array([0, 0, 0], np.int32)
    return raised_rows([
        ("floordiv@int_zero", lambda: tf.math.floordiv(tf.constant(a), tf.constant(z))),
        ("floormod@int_zero", lambda: tf.math.floormod(tf.constant(a), tf.constant(z))),
        ("truncatediv@int_zero", lambda: tf.truncatediv(tf.constant(a), tf.constant(z))),
        ("operator_floordiv@int_zero", lambda: tf.constant(a) // tf.constant(z)),
        ("operator_mod@int_zero", lambda: tf.constant(a) % 0),
    ])


@xfail_on_tapejax("a documented deliberate difference (tf.math.cumprod's docstring): TF's cumprod gradient is "
                  "div_no_nan(cumsum(prod * g, reverse), x), 0 wherever x is 0, which is wrong (d/dx1 of "
                  "cumprod([2, x1, 3]) is 8, not 0); tapejax gives the exact derivative")
@parity(modes=True)
def test_cumprod_gradient_at_zeros(tf):
    """cumprod through an exact zero: TF's gradient there is 0."""
    return vg_rows(tf, [
        ("cumprod@zeros", lambda u: tf.math.cumprod(u, axis=1), np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0]], np.float32)),
        ("cumprod@zeros_exclusive_reverse", lambda u: tf.math.cumprod(u, exclusive=True, reverse=True),
         np.array([2.0, 0.0, 3.0, 0.5], np.float32)),
    ])


@xfail_on_tapejax("tapejax converts a NumPy operand of a binary op to the other operand's dtype in either "
                  "position (README: 'takes the tensor's dtype, as TF converts it'); TF does that only for the "
                  "second operand and converts a first NumPy float64 operand as float64, then raises")
@parity(modes=True)
def test_numpy_float64_first_operand(tf):
    """tf.add(np.float64 array, float32 Tensor): TF's InvalidArgumentError."""
    return raised_rows([("add@np_float64_first", lambda: tf.add(np.array([0.5, 1.5]), tf.constant([1.0, 2.0])))])


@xfail_on_tapejax("TF's Stirling term is where(0 <= t <= 1, 0, t * log(t) - t + ...): the tf.where trap makes its "
                  "gradient w.r.t. the targets NaN at t = 0 (0 * log'(0)); tapejax's term is NaN-free (a double "
                  "where); targets are data, and no program relies on their NaN gradient")
@parity(modes=True)
def test_log_poisson_loss_target_gradient_at_zero(tf):
    """d log_poisson_loss(t, x, compute_full_loss=True) / dt at t = 0: TF's NaN."""
    return vg_rows(tf, [("log_poisson_loss@full_target_0", lambda t: tf.nn.log_poisson_loss(
        t, tf.constant([0.0, 1.0]), compute_full_loss=True), np.array([0.0, 2.0], np.float32))])


@xfail_on_tapejax("XLA reduces float16 in float32 and rounds once (60000 + 60000 - 60000 + 1 is 60000); TF's CPU "
                  "kernel accumulates in float16, so its partial sum overflows to inf: tapejax's sum is the "
                  "exactly rounded one, and XLA's accumulation type is not the op's to choose")
@parity(modes=True)
def test_float16_sum_whose_partial_sum_overflows(tf):
    """reduce_sum / reduce_mean of float16 values whose running sum passes 65504."""
    x = tf.constant(np.array([60000.0, 60000.0, -60000.0, 1.0], np.float16))
    return {"reduce_sum@float16_partial_overflow": tf.reduce_sum(x),
            "reduce_mean@float16_partial_overflow": tf.reduce_mean(x[:2])}


@xfail_on_tapejax("TF's CPU segment max / min kernels combine with std::max / std::min, so whether a NaN entry "
                  "propagates depends on its position ([NaN, 1] gives 1, [1, NaN] NaN); tapejax propagates "
                  "every NaN, as tf.reduce_max does; no program relies on the order-dependent result")
@parity(modes=True)
def test_segment_max_with_nan(tf):
    """segment_max / unsorted_segment_max / segment_min of segments holding NaN."""
    d = tf.constant([NAN, 1.0, 1.0, NAN, 2.0])
    ids = tf.constant([0, 0, 1, 1, 2])
    return {"segment_max@nan_first": tf.math.segment_max(d, ids), "segment_min@nan_first": tf.math.segment_min(d, ids),
            "unsorted_segment_max@nan_first": tf.math.unsorted_segment_max(d, ids, 3)}


@xfail_on_tapejax("TF converts a Python int past int32's range into an int32 operand by wrapping it (2 ** 40 "
                  "becomes 0: a silent wrong number); tapejax raises OverflowError instead; TF's tf.multiply "
                  "of bool tensors is an InvalidArgumentError, tapejax's the logical and, since the * operator "
                  "(TF: logical and for bools) is tf.multiply's own function on the hot path")
@parity(modes=True)
def test_int_operand_out_of_range_and_multiply_of_bools(tf):
    """int32 tensor * 2 ** 40 (TF: [0, 0]); tf.multiply of two bool tensors (TF: an error)."""
    return raised_rows([("operator_mul@int32_python_int_too_big", lambda: tf.constant([1, 2]) * 2 ** 40),
                        ("multiply@bool", lambda: tf.multiply(tf.constant([True]), tf.constant([True])))])


@xfail_on_tapejax("TF's CPU CumulativeLogsumexp passes over a NaN entry (it reads as -inf: [NaN, 1, 1] gives "
                  "[-inf, 1, 1.69]), silently dropping it; tapejax propagates the NaN, as every other reduction of "
                  "both does; no program relies on a NaN vanishing")
@parity(modes=True)
def test_cumulative_logsumexp_with_nan(tf):
    """cumulative_logsumexp of a row starting with NaN."""
    return {"cumulative_logsumexp@nan": tf.math.cumulative_logsumexp(tf.constant([[NAN, 1.0, 1.0]]), axis=1)}


@xfail_on_tapejax("NOT FIXED (a tapejax bug, reported): the gradient of cumulative_logsumexp is JAX's, from "
                  "logaddexp's rule, which reads an infinite entry as 0: [1, inf, 2] gives [6.44, 2, 7.39] where "
                  "TF's gives [1, NaN, 0]; at a -inf entry TF's is NaN (exp(-inf + inf)), JAX's the limit 1")
@parity(modes=True)
def test_cumulative_logsumexp_gradient_at_infinite_entries(tf):
    """d cumulative_logsumexp / dx over rows holding +inf and -inf."""
    return vg_rows(tf, [("cumulative_logsumexp@infinite_entries", lambda u: tf.math.cumulative_logsumexp(u, axis=1),
                         np.array([[1.0, INF, 2.0], [-INF, INF, 0.0], [-INF, 1.0, 2.0]], np.float32))])
