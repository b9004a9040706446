"""Numerics: float64 end to end under JAX's x64 mode, a clear error for float64 without it, and
half precision (float16 / bfloat16) through the whole op registry.

Oracles: the dtype rules are TF's (checked against TF 2.21 by tests/parity/test_numerics.py);
half-precision values and gradients are compared with the *same* tapejax program run in float32 on
the same (half-rounded) inputs and cotangents, within half-precision tolerance; float64 values are
compared with NumPy / float32 runs.

The op rows are the numeric-gradient tables of ``tests/test_ops_gradcheck.py`` (one row per public
op, with valid inputs) plus ``EXTRA_ROWS`` for the ops those tables do not differentiate; a spy
tape records which op types each row binds, and ``test_half_table_covers_the_registry`` checks
that every registered op type is run in half precision or listed in ``HALF_UNSUPPORTED`` /
``NO_FLOAT_INPUT`` with its reason.

``TAPEJAX_NUMERICS_FULL=1`` also runs the float64 dtype table over every row (CI runs one row
per op family; the float64 *values* of every row are checked by test_ops_gradcheck.py).
"""
import os

import jax
import ml_dtypes
import numpy as np
import pytest

import tapejax as tf
import test_ops_gradcheck as G
from tapejax.ops import _registry

FULL = os.environ.get("TAPEJAX_NUMERICS_FULL", "") not in ("", "0")

X64_HINT = "jax_enable_x64"


def x64():
    return jax.enable_x64(True)


def flat(y):
    if isinstance(y, (list, tuple)):
        out = []
        for v in y:
            out.extend(flat(v))
        return out
    return [y]


# ---------------------------------------------------------------------------------------------
# The op rows
# ---------------------------------------------------------------------------------------------

R = np.random.default_rng(7)
PTS = R.uniform(-2.0, 2.0, (2, 3))

#: Ops the gradient tables do not differentiate (TF registers no gradient, or they make values):
#: forward dtype and values are checked; gradients of their float outputs where they have one.
EXTRA_ROWS = [
    ("floor", tf.floor, PTS), ("ceil", tf.math.ceil, PTS), ("round", tf.round, PTS),
    ("is_nan", tf.math.is_nan, PTS), ("is_inf", tf.math.is_inf, PTS), ("is_finite", tf.math.is_finite, PTS),
    ("floordiv", lambda x: tf.math.floordiv(x, tf.constant(0.7, x.dtype)), PTS),
    ("compare", lambda x, y: [tf.less(x, y), tf.less_equal(x, y), tf.greater(x, y), tf.greater_equal(x, y),
                              tf.equal(x, y), tf.not_equal(x, y)], PTS, G.pts(3)),
    ("argmax", lambda x: [tf.argmax(x, 1), tf.argmin(x, 0)], PTS),
    ("argsort", lambda x: tf.argsort(x, axis=1), PTS),
    ("unique", lambda x: tf.unique(x)[0], np.array([1.5, -0.5, 1.5, 2.0])),
    ("count_nonzero", lambda x: tf.math.count_nonzero(x, axis=1), np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])),
    ("where_cond", lambda x: tf.where(x > 0), PTS),
    ("one_hot", lambda on, off: tf.one_hot([1, 0, 2], 3, on_value=on, off_value=off), np.array(0.75),
     np.array(-0.25)),
    ("cast", lambda x: tf.cast(tf.cast(x, tf.float32) * 2.0, x.dtype), PTS),
    ("dropout", lambda x: tf.nn.dropout(x, 0.5, seed=3) * 0.0 + x, PTS),
    ("bincount", lambda w: tf.math.bincount([0, 2, 2], weights=w, minlength=3), np.array([0.5, 1.25, 2.0])),
    ("reduce_any_all", lambda x: [tf.reduce_any(x > 1.0), tf.reduce_all(x > -3.0)], PTS),
]

RS = np.random.default_rng(11)


def _pts(*shape, lo=-2.0, hi=2.0):
    return RS.uniform(lo, hi, shape)


POS = np.array([[0.6, 1.3, 2.1], [0.9, 1.7, 3.2]])
SQ = np.array([[2.0, 0.5], [0.25, 3.0]])
TOP = np.array([[0.1, 0.9, -0.5], [1.3, -0.2, 0.4]])

#: The op types of the API sweep (tests/test_api_coverage.py), one row each (a few rows bind a
#: family: the Bessel functions, histogram counts and bins, the TensorScatter ops).
API_SWEEP_ROWS = [
    ("linspace", lambda a, b: tf.linspace(a, b, 5), np.array(-1.0), np.array(2.0)),
    ("global_norm", lambda x, y: tf.linalg.global_norm([x, y]), _pts(2, 3), _pts(3)),
    ("dropout_rate", lambda x: tf.nn.dropout(x, tf.constant(0.5, x.dtype), seed=3) * 0.0 + x, _pts(2, 3)),
    ("conv3d", lambda x, w: tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "SAME"), _pts(1, 3, 3, 2, 2), _pts(2, 2, 1, 2, 2)),
    ("convolution", lambda x, w: tf.nn.convolution(x, w, padding="VALID"), _pts(1, 4, 4, 2), _pts(2, 2, 2, 3)),
    ("conv", lambda x, w: tf.conv(x, w, [1, 1, 1, 1], "VALID"), _pts(1, 4, 4, 2), _pts(2, 2, 2, 3)),
    ("conv_transpose", lambda x, w: tf.nn.conv_transpose(x, w, [1, 5, 5, 2], 1, "VALID"), _pts(1, 4, 4, 3),
     _pts(2, 2, 2, 3)),
    ("conv2d_backprop_filter", lambda x, dy: tf.conv2d_backprop_filter_v2(
        x, tf.zeros([2, 2, 2, 3], x.dtype), dy, [1, 1, 1, 1], "VALID"), _pts(1, 4, 4, 2), _pts(1, 3, 3, 3)),
    ("depthwise_backprop_filter", lambda x, dy: tf.nn.depthwise_conv2d_backprop_filter(
        x, [2, 2, 2, 1], dy, [1, 1, 1, 1], "VALID"), _pts(1, 4, 4, 2), _pts(1, 3, 3, 2)),
    ("depthwise_backprop_input", lambda w, dy: tf.nn.depthwise_conv2d_backprop_input(
        [1, 4, 4, 2], w, dy, [1, 1, 1, 1], "VALID"), _pts(2, 2, 2, 1), _pts(1, 3, 3, 2)),
    ("max_pool1d", lambda x: tf.nn.max_pool1d(x, 2, 1, "VALID"), _pts(1, 5, 2)),
    ("max_pool3d", lambda x: tf.nn.max_pool3d(x, 2, 1, "VALID"), _pts(1, 3, 3, 3, 1)),
    ("avg_pool1d", lambda x: tf.nn.avg_pool1d(x, 2, 1, "VALID"), _pts(1, 5, 2)),
    ("avg_pool3d", lambda x: tf.nn.avg_pool3d(x, 2, 1, "VALID"), _pts(1, 3, 3, 3, 1)),
    ("pool", lambda x: tf.nn.pool(x, [2, 2], "AVG", padding="VALID"), _pts(1, 4, 4, 2)),
    ("dilation2d", lambda x, w: tf.nn.dilation2d(x, w, [1, 1, 1, 1], "VALID", "NHWC", [1, 1, 1, 1]),
     _pts(1, 4, 4, 2), _pts(2, 2, 2)),
    ("space_to_batch_nd", lambda x: tf.space_to_batch_nd(x, [2, 2], [[0, 0], [0, 0]]), _pts(1, 4, 4, 1)),
    ("batch_to_space", lambda x: tf.batch_to_space(x, [2, 2], [[0, 0], [0, 0]]), _pts(4, 2, 2, 1)),
    ("depth_to_space", lambda x: tf.nn.depth_to_space(x, 2), _pts(1, 2, 2, 4)),
    ("reverse_sequence", lambda x: tf.reverse_sequence(x, [2, 3], seq_axis=1, batch_axis=0), _pts(2, 3)),
    ("sequence_mask", lambda x: tf.sequence_mask([1, 3], 3, dtype=x.dtype) * x, _pts(2, 3)),
    ("searchsorted", lambda s, v: tf.searchsorted(s, v), np.array([[-1.5, 0.25, 1.0, 1.75]]),
     np.array([[0.1, 1.2, -3.0]])),
    ("histogram_fixed_width", lambda x: [tf.histogram_fixed_width(x, [-2.0, 2.0], nbins=4),
                                         tf.histogram_fixed_width_bins(x, [-2.0, 2.0], nbins=4)],
     np.array([-1.7, -0.6, 0.3, 0.9, 1.4, 1.9])),
    ("unique_with_counts", lambda x: tf.unique_with_counts(x)[0], np.array([1.5, -0.5, 1.5, 2.0])),
    ("dynamic_partition", lambda x: tf.dynamic_partition(x, [0, 1, 0], 2), _pts(3, 2)),
    ("dynamic_stitch", lambda a, b: tf.dynamic_stitch([[0, 2], [1]], [a, b]), _pts(2, 2), _pts(1, 2)),
    ("bitcast", lambda x: tf.bitcast(tf.bitcast(x, tf.int16), x.dtype), _pts(2, 3)),
    ("adjoint", lambda x: tf.linalg.adjoint(x), _pts(2, 3)),
    ("set_diag", lambda x, d: tf.linalg.set_diag(x, d), _pts(3, 3), _pts(3)),
    ("tensor_diag", lambda d: tf.linalg.tensor_diag(d), _pts(3)),
    ("tensor_diag_part", lambda x: tf.linalg.tensor_diag_part(x), _pts(3, 3)),
    ("lu_reconstruct", lambda lu: tf.linalg.lu_reconstruct(lu, tf.constant([1, 0])), SQ),
    ("lu_solve", lambda lu, r: tf.linalg.lu_solve(lu, tf.constant([1, 0]), r), SQ, _pts(2, 2)),
    ("tridiagonal_matmul", lambda d, r: tf.linalg.tridiagonal_matmul(d, r), _pts(3, 3), _pts(3, 2)),
    ("lrn", lambda x: tf.nn.local_response_normalization(x, depth_radius=1), _pts(1, 2, 2, 3)),
    ("tensor_scatter_sub_max_min", lambda t, u: [tf.tensor_scatter_nd_sub(t, [[1]], u),
                                                 tf.tensor_scatter_nd_max(t, [[0]], u),
                                                 tf.tensor_scatter_nd_min(t, [[2]], u)], _pts(3, 2), _pts(1, 2)),
    # (no empty segment: an empty one holds the dtype's lowest / highest value, which differs from float32's)
    ("unsorted_segment_max", lambda x: tf.math.unsorted_segment_max(x, [0, 1, 0], 2), _pts(3, 2)),
    ("unsorted_segment_min", lambda x: tf.math.unsorted_segment_min(x, [0, 1, 0], 2), _pts(3, 2)),
    ("unsorted_segment_prod", lambda x: tf.math.unsorted_segment_prod(x, [0, 2, 0], 3), _pts(3, 2)),
    ("unsorted_segment_mean", lambda x: tf.math.unsorted_segment_mean(x, [0, 2, 0], 3), _pts(3, 2)),
    ("unsorted_segment_sqrt_n", lambda x: tf.math.unsorted_segment_sqrt_n(x, [0, 2, 0], 3), _pts(3, 2)),
    ("in_top_k", lambda p: tf.math.in_top_k([1, 0], p, 2), TOP),
    ("is_monotonic", lambda x: [tf.math.is_non_decreasing(x), tf.math.is_strictly_increasing(x)],
     np.array([-1.0, 0.5, 0.5, 2.0])),
    # (TF's zero_fraction is float32 whatever the input: cast back to compare in the table's dtype)
    ("zero_fraction", lambda x: tf.cast(tf.math.zero_fraction(x), x.dtype), np.array([0.0, 1.5, 0.0, -2.0])),
    ("confusion_matrix", lambda w: tf.math.confusion_matrix([0, 1, 2], [0, 2, 2], num_classes=3, weights=w,
                                                            dtype=w.dtype), np.array([0.5, 1.25, 2.0])),
    ("approx_max_min_k", lambda x: [tf.math.approx_max_k(x, 2)[0], tf.math.approx_min_k(x, 2)[0]], TOP),
    ("bessel", lambda x: [tf.math.bessel_i0(x), tf.math.bessel_i0e(x), tf.math.bessel_i1(x),
                          tf.math.bessel_i1e(x)], _pts(2, 3)),
    ("dawsn", lambda x: tf.math.special.dawsn(x), _pts(2, 3)),
    ("expint", lambda x: tf.math.special.expint(x), POS),
    ("erfinv", lambda x: tf.math.erfinv(x), _pts(2, 3, lo=-0.8, hi=0.8)),
    ("rint", lambda x: tf.math.rint(x), _pts(2, 3)),
    ("reciprocal_no_nan", lambda x: tf.math.reciprocal_no_nan(x), np.array([[0.0, 0.6, -1.3], [1.7, -2.1, 0.9]])),
    ("real_imag_conj_angle", lambda x: [tf.math.real(x), tf.math.imag(x), tf.math.conj(x), tf.math.angle(x)],
     _pts(2, 3)),
    ("nextafter", lambda x, y: tf.math.nextafter(x, y) - x, _pts(2, 3), _pts(2, 3)),
    ("xlog1py", lambda x, y: tf.math.xlog1py(x, y), _pts(2, 3), POS),
    ("igamma", lambda a, x: [tf.math.igamma(a, x), tf.math.igammac(a, x)], POS, POS[::-1]),
    ("polygamma", lambda x: tf.math.polygamma(tf.constant([[1.0, 2.0, 1.0]] * 2, x.dtype), x), POS),
    ("zeta", lambda x: tf.math.zeta(x + 1.5, x), POS),
    ("truncatediv", lambda x, y: tf.truncatediv(x, y), _pts(2, 3), POS),
    ("truncatemod", lambda x, y: tf.truncatemod(x, y), _pts(2, 3), POS),
    ("betainc", lambda a, b, x: tf.math.betainc(a, b, x), POS, POS[::-1], _pts(2, 3, lo=0.1, hi=0.9)),
    ("lbeta", lambda x: tf.math.lbeta(x), POS),
    ("ctc_loss", lambda x: tf.nn.ctc_loss([[1, 2]], x, [2], [4]), _pts(4, 1, 3)),
    ("ctc_greedy_decoder", lambda x: tf.nn.ctc_greedy_decoder(x, [4])[1], _pts(4, 1, 3)),
    ("sampled_softmax_loss", lambda w, x: tf.nn.sampled_softmax_loss(
        w, tf.zeros([5], w.dtype), [[1], [3]], x, 3, 5, sampled_values=(
            tf.constant([0, 2, 4]), tf.constant([[0.5], [0.5]], w.dtype), tf.constant([0.4, 0.6, 0.8], w.dtype))),
     _pts(5, 3), _pts(2, 3)),
    ("nce_loss", lambda w, x: tf.nn.nce_loss(
        w, tf.zeros([5], w.dtype), [[1], [3]], x, 3, 5, sampled_values=(
            tf.constant([0, 3, 4]), tf.constant([[0.5], [0.5]], w.dtype), tf.constant([0.4, 0.6, 0.8], w.dtype))),
     _pts(5, 3), _pts(2, 3)),
    ("max_pool_with_argmax", lambda x: tf.nn.max_pool_with_argmax(x, 2, 1, "SAME")[0], _pts(1, 3, 3, 2)),
    # (an evenly dividing ratio: the pooling regions do not depend on the draws)
    ("fractional_pools", lambda x: [tf.nn.fractional_max_pool(x, [1.0, 2.0, 2.0, 1.0], seed=2)[0],
                                    tf.nn.fractional_avg_pool(x, [1.0, 2.0, 2.0, 1.0], seed=2)[0]], _pts(1, 6, 4, 2)),
    ("extract_volume_patches", lambda x: tf.extract_volume_patches(x, [1, 2, 2, 2, 1], [1, 1, 2, 1, 1], "SAME"),
     _pts(1, 3, 3, 2, 2)),
]

#: Ops whose inputs are never floating (bool or int only): nothing to run in half precision.
NO_FLOAT_INPUT = {
    "LogicalNot": "bool input only", "LogicalAnd": "bool inputs only", "LogicalOr": "bool inputs only",
    "LogicalXor": "bool inputs only", "RandomUniformInt": "int output only (dtype=int32/int64)",
    "BitwiseAnd": "int inputs only", "BitwiseOr": "int inputs only", "BitwiseXor": "int inputs only",
    "LeftShift": "int inputs only", "RightShift": "int inputs only", "Invert": "int input only",
    "UnravelIndex": "int inputs only", "InvertPermutation": "int input only",
    "MatrixLogarithm": "complex inputs only (TF: complex64/complex128)",
    "StatelessUniformInt": "int seed in, int output only (dtype=int32/int64)",
    "StatelessFullInt": "int seed in, int output only (dtype=int32/int64/uint32/uint64)",
    "RandomUniformIntKeyed": "key in, int output only (dtype=int32/int64)",
    "RandomFullIntKeyed": "key in, int output only (dtype=int32/int64/uint32/uint64)",
    "StatelessFoldIn": "int seed and data in, int seed out", "StatelessSplit": "int seed in, int seeds out",
    **{t: "complex input only (TF and JAX have no half complex dtype)" for t in (
        "FFT", "IFFT", "FFT2D", "IFFT2D", "FFT3D", "IFFT3D", "IRFFT", "IRFFT2D", "IRFFT3D")},
    "FFTND": "complex input only (TF and JAX have no half complex dtype)",
    "IFFTND": "complex input only (TF and JAX have no half complex dtype)",
    "IRFFTND": "complex input only (TF and JAX have no half complex dtype)",
    "CTCUniqueLabels": "int labels in, int outputs only",
    "ComputeAccidentalHits": "int classes in, a bool mask out",
    "RandomIndexShuffle": "int index, seed and max_index in, int out",
    "UniformCandidateSampler": "int classes in; float32 expected counts whatever the dtypes (TF's attr-free output)",
    "LogUniformCandidateSampler": "int classes in; float32 expected counts (TF's fixed output dtype)",
    "FixedUnigramCandidateSampler": "int classes in; float32 expected counts (TF's fixed output dtype)",
    "LearnedUnigramCandidateSampler": "int classes in; float32 expected counts (TF's fixed output dtype)",
}

#: Random ops: run with ``dtype=<half>`` (values are random: dtype, shape and range are checked).
RANDOM_ROWS = [
    ("normal", lambda d: tf.random.normal([64], dtype=d, seed=1), (-6.0, 6.0)),
    ("truncated_normal", lambda d: tf.random.truncated_normal([64], dtype=d, seed=1), (-2.01, 2.01)),
    ("uniform", lambda d: tf.random.uniform([64], minval=-1.0, maxval=1.0, dtype=d, seed=1), (-1.0, 1.0)),
    ("shuffle", lambda d: tf.random.shuffle(tf.cast(tf.range(64), d), seed=1), (0.0, 63.0)),
    ("categorical", lambda d: tf.random.categorical(tf.cast(tf.math.log([[0.5, 0.5]]), d), 8, seed=1),
     (0.0, 1.0)),
    ("stateless_normal", lambda d: tf.random.stateless_normal([64], [1, 2], dtype=d), (-6.0, 6.0)),
    ("stateless_truncated_normal", lambda d: tf.random.stateless_truncated_normal([64], [1, 2], dtype=d),
     (-2.01, 2.01)),
    ("stateless_uniform", lambda d: tf.random.stateless_uniform([64], [1, 2], -1.0, 1.0, dtype=d), (-1.0, 1.0)),
    ("stateless_gamma", lambda d: tf.random.stateless_gamma([64], [1, 2], tf.constant(2.0, d), dtype=d),
     (0.0, 30.0)),
    ("stateless_poisson", lambda d: tf.random.stateless_poisson([64], [1, 2], tf.constant(2.0, d), dtype=d),
     (0.0, 30.0)),
    ("stateless_binomial", lambda d: tf.random.stateless_binomial(
        [64], [1, 2], tf.constant(5.0, d), tf.constant(0.5, d), output_dtype=d), (0.0, 5.0)),
    ("stateless_categorical", lambda d: tf.random.stateless_categorical(
        tf.cast(tf.math.log([[0.5, 0.5]]), d), 8, [1, 2]), (0.0, 1.0)),
    ("gamma", lambda d: tf.random.gamma([64], tf.constant(2.0, d), dtype=d, seed=1), (0.0, 30.0)),
    ("poisson", lambda d: tf.random.poisson([64], tf.constant(2.0, d), dtype=d, seed=1), (0.0, 30.0)),
    ("generator_normal", lambda d: tf.random.Generator.from_seed(1).normal([64], dtype=d), (-6.0, 6.0)),
    ("generator_truncated_normal", lambda d: tf.random.Generator.from_seed(1).truncated_normal([64], dtype=d),
     (-2.01, 2.01)),
    ("generator_uniform", lambda d: tf.random.Generator.from_seed(1).uniform([64], -1.0, 1.0, dtype=d),
     (-1.0, 1.0)),
    ("generator_binomial", lambda d: tf.random.Generator.from_seed(1).binomial(
        [64], tf.constant(5.0, d), tf.constant(0.5, d), dtype=d), (0.0, 5.0)),
]

def _img(*shape):
    return RS.uniform(0.05, 0.95, shape)


#: tf.signal's ops that run in half precision (the FFTs and DCTs take complex or float32/float64 only).
SIGNAL_ROWS = [
    ("frame", lambda x: tf.signal.frame(x, 3, 2, pad_end=True), _pts(2, 7)),
    ("overlap_and_add", lambda x: tf.signal.overlap_and_add(x, 2), _pts(2, 3, 4)),
    ("kaiser_window", lambda b: tf.signal.kaiser_window(5, b, dtype=b.dtype), np.array(3.0)),
    ("kaiser_bessel_derived_window", lambda b: tf.signal.kaiser_bessel_derived_window(6, b, dtype=b.dtype),
     np.array(3.0)),
    ("linear_to_mel_weight_matrix", lambda lo: tf.signal.linear_to_mel_weight_matrix(3, 9, 8000, lo, 3000.0,
                                                                                      dtype=lo.dtype), np.array(500.0)),
    ("inverse_stft_window_fn", lambda w: tf.signal.inverse_stft_window_fn(3, lambda n, dtype: w)(8, w.dtype),
     _img(8)),
]


def _no_f64(x):
    """``x`` in float32 where it is float64 (an op TF defines for half and float only; the row casts
    its float outputs back)."""
    return tf.cast(x, tf.float32) if x.dtype == tf.float64 else x


#: ``tf.image``: each op type on an image in [0, 1] (stateless seeds, so the float32 run draws alike).
IMAGE_ROWS = [
    ("flip_left_right", lambda x: tf.image.flip_left_right(x), _img(3, 4, 3)),
    ("stateless_random_flip", lambda x: tf.image.stateless_random_flip_left_right(x, seed=[1, 2]), _img(2, 3, 4, 3)),
    ("stateless_random_crop", lambda x: tf.image.stateless_random_crop(x, [2, 3, 3], seed=[3, 4]), _img(4, 5, 3)),
    ("extract_patches", lambda x: tf.image.extract_patches(x, [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID"),
     _img(1, 3, 3, 2)),
    ("convert_image_dtype", lambda x: tf.image.convert_image_dtype(x, tf.float32) * 1.0, _img(3, 3, 3)),
    ("rgb_to_hsv", lambda x: tf.image.rgb_to_hsv(x), _img(3, 3, 3)),
    ("hsv_to_rgb", lambda x: tf.image.hsv_to_rgb(x), _img(3, 3, 3)),
    ("rgb_to_yiq", lambda x: tf.image.rgb_to_yiq(x), _img(3, 3, 3)),
    ("rgb_to_grayscale", lambda x: tf.image.rgb_to_grayscale(x), _img(3, 3, 3)),
    ("grayscale_to_rgb", lambda x: tf.image.grayscale_to_rgb(x), _img(3, 3, 1)),
    ("adjust_brightness", lambda x: tf.image.adjust_brightness(x, 0.125), _img(3, 3, 3)),
    ("adjust_contrast", lambda x: tf.image.adjust_contrast(x, 1.5), _img(3, 3, 3)),
    ("adjust_gamma", lambda x: tf.image.adjust_gamma(x, 1.5, 0.75), _img(3, 3, 3)),
    ("adjust_hue", lambda x: tf.image.adjust_hue(x, 0.125), _img(3, 3, 3)),
    ("adjust_saturation", lambda x: tf.image.adjust_saturation(x, 1.5), _img(3, 3, 3)),
    ("per_image_standardization", lambda x: tf.image.per_image_standardization(x), _img(3, 3, 3)),
    ("total_variation", lambda x: tf.image.total_variation(x), _img(3, 3, 3)),
    ("image_gradients", lambda x: tf.image.image_gradients(x), _img(1, 3, 3, 2)),
    ("sobel_edges", lambda x: tf.image.sobel_edges(x), _img(1, 3, 3, 1)),
    ("psnr", lambda x, y: tf.image.psnr(x, y, 1.0), _img(4, 4, 3), _img(4, 4, 3)),
    ("ssim", lambda x, y: tf.image.ssim(x, y, 1.0, filter_size=3), _img(6, 6, 1), _img(6, 6, 1)),
    ("ssim_multiscale", lambda x, y: tf.image.ssim_multiscale(x, y, 1.0, power_factors=(0.5, 0.5), filter_size=3),
     _img(12, 12, 1), _img(12, 12, 1)),
    ("resize_bilinear", lambda x: tf.image.resize(x, [5, 4]), _img(3, 3, 2)),
    ("resize_bicubic", lambda x: tf.image.resize(x, [5, 4], "bicubic"), _img(3, 3, 2)),
    ("resize_area", lambda x: tf.image.resize(x, [2, 2], "area"), _img(4, 4, 2)),
    ("resize_lanczos3", lambda x: tf.image.resize(x, [5, 4], "lanczos3"), _img(3, 3, 2)),
    ("resize_nearest", lambda x: tf.image.resize(x, [5, 4], "nearest"), _img(3, 3, 2)),
    ("crop_and_resize", lambda x: tf.image.crop_and_resize(x, [[0.1, 0.2, 0.8, 0.7], [0.0, 0.3, 0.5, 1.0]], [0, 1],
                                                           [3, 2]), _img(2, 4, 4, 2)),
    # (TF's draw and non-max suppression take half or float only, and register no gradient for
    # their float outputs: float64 runs in float32, the float outputs' gradients are cut.)
    ("draw_bounding_boxes", lambda x: tf.cast(tf.stop_gradient(tf.image.draw_bounding_boxes(
        _no_f64(x), [[[0.1, 0.2, 0.7, 0.9]]], [[1.0, 0.0, 0.5]])), x.dtype), _img(1, 4, 5, 3)),
    ("non_max_suppression", lambda b, s: tf.image.non_max_suppression(_no_f64(b), _no_f64(s), 3, 0.5),
     _img(6, 4), _img(6)),
    ("non_max_suppression_with_scores", lambda b, s: [tf.cast(tf.stop_gradient(v), b.dtype) if v.dtype.is_floating
                                                      else v for v in tf.image.non_max_suppression_with_scores(
        _no_f64(b), _no_f64(s), 3, tf.constant(0.5, _no_f64(b).dtype), tf.constant(0.1, _no_f64(b).dtype),
        tf.constant(0.5, _no_f64(b).dtype))], _img(6, 4), _img(6)),
]
#: Rows whose float output is float32 whatever the input's float dtype, as TF 2.21 gives it (its
#: Python layer converts to float32 first; resize keeps the dtype for ``nearest`` only).
FLOAT32_OUTPUT = {"crop_and_resize", "convert_image_dtype", "per_image_standardization", "psnr", "ssim", "ssim_multiscale",
                  "resize_bilinear", "resize_bicubic", "resize_area", "resize_lanczos3"}


#: Op types neither JAX (XLA:CPU has no half-precision LAPACK kernels) nor, mostly, TF runs in
#: half precision: tapejax raises TF's InvalidArgumentError naming the dtype (see
#: ``test_half_unsupported_ops_raise_a_clear_error``).  TF 2.21 CPU runs float16 ``inv``, which
#: tapejax runs too (in float32 inside the op); everything here is rejected by TF as well.
HALF_UNSUPPORTED = {
    "LogMatrixDeterminant": "JAX: no half LU/slogdet kernel; TF: no half kernel either",
    "LogDet": "JAX: no half Cholesky; TF: no half Cholesky",
    "Cholesky": "JAX: no half Cholesky; TF: no half Cholesky",
    "CholeskySolve": "its input comes from Cholesky (the triangular solves run in half)",
    "MatrixSolve": "JAX: no half LU solve; TF: no half MatrixSolve",
    "MatrixSolveLs": "JAX: no half solve; TF: no half Cholesky",
    "SelfAdjointEigV2": "JAX: no half eigh; TF: no half SelfAdjointEigV2",
    "SelfAdjointEigV2Values": "JAX: no half eigh; TF: no half SelfAdjointEigV2",
    "Svd": "JAX: no half SVD; TF: no half Svd",
    "Pinv": "JAX: no half SVD; TF: no half Svd",
    "MatrixExponential": "JAX: no half expm (solve); TF: no half MatrixSolve",
    "Lu": "JAX: no half LU; TF: no half Lu (bfloat16 not allowed)",
    "Eig": "JAX: no half eig; TF: eig's Python layer has no output dtype for half (UnboundLocalError)",
    "EigVals": "JAX: no half eig; TF: eigvals' Python layer has no output dtype for half (UnboundLocalError)",
    "MatrixRank": "JAX: no half SVD; TF: no half Svd",
    "MatrixSquareRoot": "JAX: no half matrix inverse (its Denman-Beavers steps invert); TF: no half MatrixSquareRoot",
    "TridiagonalSolve": "JAX: no half tridiagonal solve; TF: TridiagonalSolve allows float/double/complex only",
    "EighTridiagonal": "JAX: no half eigh_tridiagonal; TF runs float16 (in Python ops), not bfloat16",
    "Complex": "TF and JAX: no half complex dtype (TF: real and imag must be float32/float64)",
    "RFFTND": "TF and JAX: RFFT takes float32/float64 input only",
    "Spence": "JAX's spence takes float32/float64 only; TF: no half Spence kernel",
    "FresnelCos": "TF: no half FresnelCos kernel (float32/float64 only, NotFoundError for both halves)",
    "FresnelSin": "TF: no half FresnelSin kernel (float32/float64 only, NotFoundError for both halves)",
    "Erfcinv": "JAX's ndtri takes float32/float64 only; TF: no half Ndtri kernel",
    "Ndtri": "JAX's ndtri takes float32/float64 only; TF: no half Ndtri kernel",
    "BandedTriangularSolve": "TF: no half BandedTriangularSolve kernel on CPU (bfloat16 not allowed): tapejax "
                             "raises TF's error (JAX would solve in half)",
}
#: Rows run in bfloat16 only (the row label -> why).  (Expint ran in bfloat16 only while JAX's
#: float16 expi was NaN on (0, 2.5): tapejax now computes float16 in float32.)
F16_SKIP_ROWS: "dict[str, str]" = {}
#: Rows run in float16 only: TF rejects a bfloat16 inverse / QR (JAX has no bfloat16 kernel either), crop,
#: draw and non-max suppression
#: (tapejax raises TF's InvalidArgumentError); float16 ones run, in float32 inside the op, as TF runs them.
BF16_SKIP_ROWS = {"inv": "MatrixInverse", "qr_r": "Qr", "crop_and_resize": "CropAndResize",
                  "draw_bounding_boxes": "DrawBoundingBoxesV2", "non_max_suppression": "NonMaxSuppressionV3",
                  "non_max_suppression_with_scores": "NonMaxSuppressionV5"}
#: Op types TF defines for float32 (or float32/float64) inputs only: a half input is TF's dtype error
#: (InvalidArgumentError, TypeError or ValueError, compared with TF in tests/parity/test_image_boxes.py and
#: tests/parity/test_signal*.py).
FLOAT32_ONLY = {"NonMaxSuppressionWithOverlaps": "TF: overlaps and scores are float32 only",
                "NonMaxSuppressionPadded": "TF: its Python layer compares the scores with a float32 threshold",
                "CombinedNonMaxSuppression": "TF: boxes and scores are float32 only",
                "SampleDistortedBoundingBoxV2": "TF: bounding_boxes are float32 only (int image_size, int outputs)",
                "ExtractGlimpseV2": "TF: input and offsets are float32 only",
                **{t: "TF: the fake quantisers take float32 only" for t in (
                    "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsGradient")},
                **{t: "TF: CPU kernels for float and double only (half: NotFoundError, tests/test_ops_quantization.py)"
                   for t in ("QuantizeAndDequantizeV4", "QuantizeAndDequantizeV2")},
                **{t: "TF: RFFT (and the DCT / MDCT built on it) takes float32/float64 only: a half input is "
                      "TF's ValueError (compared with TF in tests/parity/test_signal*.py)"
                   for t in ("RFFT", "RFFT2D", "RFFT3D", "DCT", "MDCTFold", "InverseMDCTUnfold")}}


def _all_rows():
    rows = []
    for group, table in [*G.GROUPS.items(), ("first_order_only", G.FIRST_ORDER_ONLY), ("extra", EXTRA_ROWS),
                         ("api_sweep", API_SWEEP_ROWS), ("image", IMAGE_ROWS), ("signal", SIGNAL_ROWS)]:
        for label, f, *args in table:
            rows.append((group, label, f, [np.asarray(a, np.float64) for a in args]))
    return rows


ROWS = _all_rows()
GROUP_NAMES = sorted({r[0] for r in ROWS})


class SpyTape(tf.GradientTape):
    """A tape that also notes the op type of every op bound while it is active."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.seen = {}
        self.label = None

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        self.seen.setdefault(self.label, set()).add(prim.name)
        return super()._record_op(prim, static, grad_type, ids, vals, result)

    def _record_sparse_read(self, var, indices, rows):
        # (an eager gather of a Variable is recorded here, not as an op: TF's ResourceGather)
        self.seen.setdefault(self.label, set()).add("ResourceGather")
        return super()._record_sparse_read(var, indices, rows)


def _rows_of(group, skip):
    return [r for r in ROWS if r[0] == group and r[1] not in skip]


# ---------------------------------------------------------------------------------------------
# Half precision: the table over the registry
# ---------------------------------------------------------------------------------------------

HALF = {"float16": (tf.float16, np.float16, 2e-2), "bfloat16": (tf.bfloat16, ml_dtypes.bfloat16, 8e-2)}

#: Rows whose half run is skipped: they bind an op of HALF_UNSUPPORTED (each label -> op type).
HALF_SKIP_ROWS = {"slogdet": "LogMatrixDeterminant", "logdet": "LogDet",
                  "cholesky": "Cholesky", "cholesky_solve": "Cholesky", "solve": "MatrixSolve",
                  "lstsq": "MatrixSolveLs", "eigvalsh": "SelfAdjointEigV2Values",
                  "eigh_values": "SelfAdjointEigV2", "svd_values": "Svd", "pinv": "Pinv",
                  "expm": "MatrixExponential"}
#: Half inputs far from exact in half precision (the op amplifies the rounding of its inputs):
#: values compared with a looser tolerance (x4).
ILL_CONDITIONED = {"det", "triangular_solve", "tan", "lgamma", "digamma", "pow", "reduce_prod",
                   "reduce_prod_axis1", "cumprod", "cumprod_rev", "cumprod_excl", "reduce_variance",
                   "reduce_variance_axis1", "reduce_std", "reduce_std_axis1", "moments", "batch_normalization",
                   "acosh", "atanh", "xdivy", "floormod", "log_poisson_loss", "norm_3", "l2_normalize",
                   "clip_by_norm_axes", "clip_by_norm", "softsign", "reciprocal", "divide", "rsqrt"}
#: Rows whose inputs sit on a discontinuity after half rounding (values are integers/ties).
DISCONTINUOUS = {"floor", "ceil", "round", "floordiv", "floormod"}

_SEEN = {}  # group -> {(dtype, label): op types}, filled by test_half_table
_SEEN_RANDOM = {}  # dtype -> op types, filled by test_half_random_ops


def _run(items, cts=None):
    """Run each item ``(key, f, args, np_dtype)`` under one spy tape, then one gradient call for all.

    Returns ({key: (outputs, gradients)}, {key: cotangents}, {key: op types bound})."""
    srcs, outs_all, cts_all, per_item = [], [], [], {}
    make_cts = cts is None
    if make_cts:
        cts = {}
    with SpyTape(persistent=True) as tape:
        for key, f, args, np_dtype in items:
            tape.label = key
            xs = [tf.constant(a.astype(np_dtype)) for a in args]
            for x in xs:
                tape.watch(x)
            outs = flat(f(*xs))
            fl = [o for o in outs if o.dtype.is_floating]
            if make_cts:
                cts[key] = [R.standard_normal(tuple(o.shape)) for o in fl]
            per_item[key] = (outs, len(xs))
            outs_all += fl
            cts_all += [tf.constant(c.astype(np.dtype(o.dtype.as_numpy_dtype))) for c, o in zip(cts[key], fl)]
            srcs += xs
    grads = tape.gradient(outs_all, srcs, output_gradients=cts_all) if outs_all else []
    res, k = {}, 0
    for key, _, _, _ in items:
        outs, n = per_item[key]
        res[key] = (outs, grads[k:k + n])
        k += n
    return res, cts, tape.seen


def _as32(x):
    return None if x is None else np.asarray(tf.convert_to_tensor(x).numpy()).astype(np.float32)   # (IndexedSlices: dense)


def _close(a, b, tol):
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
    return a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True)


def check_half(rows, dtypes_of):
    """Run ``rows`` (group, label, f, args) in the half dtypes ``dtypes_of(index)`` and in float32 on
    the same half-rounded inputs and cotangents; return (problems, op types seen per key)."""
    items = [((d, label), f, args, HALF[d][1]) for i, (_, label, f, args) in enumerate(rows)
             for d in dtypes_of(i)]
    half, cts, seen = _run(items)
    # The float32 reference: the inputs are the half-rounded values (exact in float32).
    ref, _, _ = _run([(key, f, [a.astype(npdt).astype(np.float64) for a in args], np.float32)
                      for key, f, args, npdt in items],
                     {key: [c.astype(HALF[key[0]][1]).astype(np.float64) for c in cs] for key, cs in cts.items()})
    problems = []
    for key, _, _, _ in items:
        dtype, label = key
        tdt, tol = HALF[dtype][0], HALF[dtype][2] * (4 if label in ILL_CONDITIONED else 1)
        (outs, grads), (routs, rgrads) = half[key], ref[key]
        want = tf.float32 if label in FLOAT32_OUTPUT else tdt
        for i, (o, r) in enumerate(zip(outs, routs)):
            if o.dtype.is_floating and o.dtype != want:
                problems.append(f"{dtype} {label}: output {i} is {o.dtype.name}, expected {want.name}")
            elif not o.dtype.is_floating and o.dtype != r.dtype:
                problems.append(f"{dtype} {label}: output {i} is {o.dtype.name}; float32 run gives {r.dtype.name}")
            elif label not in DISCONTINUOUS and not _close(_as32(o), _as32(r), tol):
                problems.append(f"{dtype} {label}: output {i} {_as32(o).tolist()} vs float32 {_as32(r).tolist()}")
        for i, (g, r) in enumerate(zip(grads, rgrads)):
            if (g is None) != (r is None):
                problems.append(f"{dtype} {label}: gradient {i} is {g!r}, float32 run gives {r!r}")
            elif g is None:
                continue
            elif g.dtype != tdt:
                problems.append(f"{dtype} {label}: gradient {i} is {g.dtype.name}, expected {dtype} (the source's)")
            elif label not in DISCONTINUOUS and not _close(_as32(g), _as32(r), tol):
                problems.append(f"{dtype} {label}: gradient {i} {_as32(g).tolist()} vs float32 {_as32(r).tolist()}")
    return problems, seen


def _half_dtypes(label):
    """float16 and bfloat16 for every row with TAPEJAX_NUMERICS_FULL=1; in CI the rows alternate
    between them (every op type still runs in half precision, each dtype in every group)."""
    both = [d for d in sorted(HALF) if not (d == "bfloat16" and label in BF16_SKIP_ROWS)
            and not (d == "float16" and label in F16_SKIP_ROWS) and label not in HALF_SKIP_ROWS]
    if FULL or len(both) < 2:
        return lambda i: both
    return lambda i: [both[i % 2]]


#: The half-precision table's tests share one worker (``--dist loadgroup``), so that the coverage
#: check reads what the table's rows saw (``_SEEN``) instead of running every row again.
HALF_GROUP = pytest.mark.xdist_group(name="half_precision_table")


@HALF_GROUP
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_half_table(group):
    """Every op in float16 / bfloat16: float outputs and gradients come out in the input's dtype
    (TF: the gradient has the source's dtype); values and gradients agree with the float32 run of
    the same program on the same half-rounded inputs, within half-precision tolerance."""
    rows = [r for r in ROWS if r[0] == group]
    per_row = [_half_dtypes(r[1])(i) for i, r in enumerate(rows)]
    keep = [(r, ds) for r, ds in zip(rows, per_row) if ds]
    if not keep:
        pytest.skip(f"every {group} row binds an op JAX cannot run in half precision (HALF_UNSUPPORTED)")
    problems, seen = check_half([r for r, _ in keep], lambda i: keep[i][1])
    _SEEN[group] = seen
    assert not problems, f"{group}:\n  " + "\n  ".join(problems)


def test_half_checker_is_not_vacuous():
    """The table's checker reports a silently promoted output, and a value or gradient that is
    wrong only in half precision (the float32 run is its oracle)."""
    import jax.numpy as jnp

    @tf.op(type_name="NumericsPromotes")
    def promotes(x):
        return jnp.sin(x).astype(jnp.float32)

    @tf.op(type_name="NumericsWrongHalfGrad")
    def wrong_grad(x):
        @jax.custom_jvp
        def f(v):
            return jnp.sin(v)
        bad = 1.5 if x.dtype == jnp.float16 else 1.0
        f.defjvp(lambda p, t: (jnp.sin(p[0]), t[0] * bad * jnp.cos(p[0])))
        return f(x)

    @tf.op(type_name="NumericsWrongHalfValue")
    def wrong_value(x):
        return jnp.sin(x) * (1.1 if x.dtype == jnp.float16 else 1.0)

    rows = [("t", "promotes", promotes, [PTS]), ("t", "wrong_grad", wrong_grad, [PTS]),
            ("t", "wrong_value", wrong_value, [PTS])]
    problems, _ = check_half(rows, lambda i: ["float16"])
    text = "\n".join(problems)
    assert "promotes: output 0 is float32, expected float16" in text
    assert "wrong_grad: gradient 0" in text and "wrong_grad: output" not in text, text
    assert "wrong_value: output 0" in text, text


@HALF_GROUP
@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_random_ops(dtype):
    """tf.random.* with a half dtype give that dtype (categorical gives int64/int32 samples)."""
    with SpyTape() as spy:   # (the op types, for test_half_table_covers_the_registry)
        _half_random_checks(dtype)
    _SEEN_RANDOM[dtype] = set().union(*spy.seen.values())


def _half_random_checks(dtype):
    tdt = HALF[dtype][0]
    for label, f, (lo, hi) in RANDOM_ROWS:
        v = f(tdt)
        a = _as32(v) if v.dtype.is_floating else v.numpy()
        if label.endswith("categorical"):
            assert v.dtype.is_integer, label
        else:
            assert v.dtype == tdt, (label, v.dtype)
        assert a.shape and np.all(a >= lo) and np.all(a <= hi), (label, a)
        if label == "shuffle":
            assert sorted(a.tolist()) == list(range(64))
    # Parameterized truncated normal: the parameters' dtype, half (as TF), or TF's error for bfloat16
    params = [tf.constant(v, tdt) for v in (0.0, 1.0, -1.0, 1.0)]
    if dtype == "bfloat16":
        with pytest.raises(tf.errors.InvalidArgumentError, match="attr 'dtype' of bfloat16 is not in the list"):
            tf.random.stateless_parameterized_truncated_normal([64], [1, 2], *params)
        return
    v = tf.random.stateless_parameterized_truncated_normal([64], [1, 2], *params)
    a = _as32(v)
    assert v.dtype == tdt and np.all(np.abs(a) <= 1.0) and np.std(a) > 0.3, a


GATHER_ROWS = _pts(3, 2)


def _half_resource_gather(dtype):
    """ResourceGather (an eager ``tf.gather`` of a Variable under a plain tape; the spy tape of the
    table turns it into GatherV2): the rows and the IndexedSlices gradient of a half Variable
    against the float32 run on the same half-rounded values and cotangent.  Returns (problems, op
    types the tape recorded)."""
    tdt, npdt, tol = HALF[dtype]
    x = GATHER_ROWS.astype(npdt).astype(np.float32)
    ct = R.standard_normal((3, 2)).astype(npdt).astype(np.float32)
    res, types = {}, set()
    for dt in (tdt, tf.float32):
        v = tf.Variable(x, dtype=dt)
        with tf.GradientTape() as t:
            y = tf.gather(v, [2, 0, 2])
        types |= {n[0].name for n in t._nodes}
        g = t.gradient(y, v, output_gradients=tf.constant(ct, dt))
        res[dt] = (y, g)
    (y, g), (ry, rg) = res[tdt], res[tf.float32]
    problems = [f"{dtype} resource_gather: {what} is {a.dtype.name}" for what, a in (("output", y), ("gradient", g))
                if a.dtype != tdt]
    problems += [f"{dtype} resource_gather: {what} {_as32(a).tolist()} vs float32 {_as32(b).tolist()}"
                 for what, a, b in (("output", y, ry), ("gradient", g, rg)) if not _close(_as32(a), _as32(b), tol)]
    return problems, types


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_resource_gather(dtype):
    """A half Variable's eager gather is TF's ResourceGather: values and its IndexedSlices gradient
    in the Variable's dtype, equal to the float32 run."""
    problems, types = _half_resource_gather(dtype)
    assert "ResourceGather" in types and not problems, (types, problems)


def _half_types(group):
    """The op types ``group``'s rows bind in half precision: the half pass of ``check_half`` alone
    (a group ``test_half_table`` ran on another test worker; its checks are that test's)."""
    rows = [r for r in ROWS if r[0] == group]
    per_row = [_half_dtypes(r[1])(i) for i, r in enumerate(rows)]
    items = [((d, label), f, args, HALF[d][1]) for (_, label, f, args), ds in zip(rows, per_row) for d in ds]
    return _run(items)[2] if items else {}


@HALF_GROUP
def test_half_table_covers_the_registry():
    """Every registered op type runs in half precision above, or is listed with its reason."""
    seen = set()
    for group in GROUP_NAMES:
        for types in (_SEEN[group] if group in _SEEN else _half_types(group)).values():
            seen |= types
    for dtype in HALF:
        if dtype not in _SEEN_RANDOM:
            test_half_random_ops(dtype)
        seen |= _SEEN_RANDOM[dtype]
    for dtype in HALF:
        problems, types = _half_resource_gather(dtype)
        if not problems:
            seen |= types
    listed = set(HALF_UNSUPPORTED) | set(NO_FLOAT_INPUT) | set(FLOAT32_ONLY)
    missing = [t for t in _registry.DEFINED if t not in seen and t not in listed]
    assert not missing, f"op types run in no half-precision row and not listed: {missing}"
    # The lists are not stale: every listed type is registered, and unsupported ones are not run.
    assert listed <= set(_registry.DEFINED)
    assert not (set(HALF_UNSUPPORTED) - {"CholeskySolve"}) & seen


def test_half_expint_computed_in_float32():
    """float16 expint (TF: no half kernel; JAX's float16 expi is NaN on (0, 2.5)) is the float32
    value rounded: 0.770, 2.721, 5.332."""
    v = tf.math.special.expint(tf.constant([0.6, 1.3, 2.1], tf.float16))
    assert v.dtype == tf.float16
    np.testing.assert_allclose(_as32(v), [0.7702, 2.7208, 5.3317], rtol=2e-3)


UNSUPPORTED_CALLS = {
    "LogMatrixDeterminant": lambda x: tf.linalg.slogdet(x), "LogDet": lambda x: tf.linalg.logdet(x),
    "Cholesky": lambda x: tf.linalg.cholesky(x), "CholeskySolve": lambda x: tf.linalg.cholesky_solve(x, x),
    "MatrixSolve": lambda x: tf.linalg.solve(x, x), "MatrixSolveLs": lambda x: tf.linalg.lstsq(x, x),
    "SelfAdjointEigV2": lambda x: tf.linalg.eigh(x), "SelfAdjointEigV2Values": lambda x: tf.linalg.eigvalsh(x),
    "Svd": lambda x: tf.linalg.svd(x), "Pinv": lambda x: tf.linalg.pinv(x, rcond=0.1),
    "MatrixExponential": lambda x: tf.linalg.expm(x),
    "Lu": lambda x: tf.linalg.lu(x), "Eig": lambda x: tf.linalg.eig(x), "EigVals": lambda x: tf.linalg.eigvals(x),
    "MatrixRank": lambda x: tf.linalg.matrix_rank(x), "MatrixSquareRoot": lambda x: tf.linalg.sqrtm(x),
    "TridiagonalSolve": lambda x: tf.linalg.tridiagonal_solve(tf.concat([x, x[:1]], 0), x),
    "EighTridiagonal": lambda x: tf.linalg.eigh_tridiagonal(x[0], x[1, :1]),
    "Complex": lambda x: tf.complex(x, x), "RFFTND": lambda x: tf.rfftnd(x, fft_length=[2, 2], axes=[0, 1]),
    "Spence": lambda x: tf.math.special.spence(x), "Erfcinv": lambda x: tf.math.erfcinv(x * 0.25),
    "FresnelCos": lambda x: tf.math.special.fresnel_cos(x), "FresnelSin": lambda x: tf.math.special.fresnel_sin(x),
    "Ndtri": lambda x: tf.math.ndtri(x * 0.25),
    "BandedTriangularSolve": lambda x: tf.linalg.banded_triangular_solve(x, x),
}


#: TF 2.21's exception class for a bfloat16 input (float16 inputs: NotFoundError, "no kernel").
BF16_CLASS = {"MatrixExponential": ValueError, "CholeskySolve": tf.errors.NotFoundError,
              "EighTridiagonal": ValueError,
              "Complex": TypeError, "RFFTND": ValueError, "Spence": tf.errors.NotFoundError,
              "FresnelCos": tf.errors.NotFoundError, "FresnelSin": tf.errors.NotFoundError,
              "Erfcinv": tf.errors.NotFoundError, "Ndtri": tf.errors.NotFoundError}
#: TF 2.21's exception class for a float16 input where it is not NotFoundError.  Not copied: TF's
#: UnboundLocalError for a half eig / eigvals (an accident of its Python layer): tapejax is to raise
#: the missing-kernel error; EighTridiagonal: TF runs float16, tapejax cannot (no half kernel in JAX).
F16_CLASS = {"TridiagonalSolve": tf.errors.InvalidArgumentError, "Complex": TypeError, "RFFTND": ValueError}


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("op_type", sorted(UNSUPPORTED_CALLS))
def test_half_unsupported_ops_raise_a_clear_error(op_type, dtype):
    """An op with no half kernel raises TF's exception class (float16: NotFoundError, bfloat16:
    InvalidArgumentError, or ValueError where TF's Python layer rejects it) naming the op, the
    argument and the dtype, before running anything."""
    assert set(UNSUPPORTED_CALLS) == set(HALF_UNSUPPORTED)
    x = tf.constant(np.eye(2, dtype=np.float32) * 2.0 + 0.5, dtype=HALF[dtype][0])
    name = "half" if dtype == "float16" else "bfloat16"
    cls = (F16_CLASS.get(op_type, tf.errors.NotFoundError) if dtype == "float16"
           else BF16_CLASS.get(op_type, tf.errors.InvalidArgumentError))
    with pytest.raises(cls, match=rf"{op_type} has no {name} kernel \(argument `\w+` has dtype {name}") as e:
        UNSUPPORTED_CALLS[op_type](x)
    assert "float32" in str(e.value)


def test_pinv_of_bfloat16_with_the_default_rcond_fails_where_tf_does():
    """TF's pinv computes the default ``rcond`` from NumPy's ``finfo`` before its Svd runs: with an
    ml_dtypes older than 0.7 NumPy refuses bfloat16 (ValueError), with 0.7 the Svd kernel's
    InvalidArgumentError comes (both seen under TF 2.21; tests/parity/test_numerics.py)."""
    x = tf.constant(np.eye(2, dtype=np.float32), dtype=tf.bfloat16)
    try:
        np.finfo(tf.bfloat16.as_numpy_dtype)
        cls = tf.errors.InvalidArgumentError
    except ValueError:
        cls = ValueError
    with pytest.raises(cls):
        tf.linalg.pinv(x)


def test_bfloat16_inverse_is_a_clear_error_and_float16_inverse_works():
    """TF 2.21 CPU inverts and QR-factors float16 (tapejax: in float32 inside the op), not bfloat16."""
    m = np.array([[2.0, 1.0], [0.5, 3.0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="MatrixInverse has no bfloat16 kernel"):
        tf.linalg.inv(tf.constant(m, tf.bfloat16))
    x = tf.constant(m, tf.float16)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.linalg.inv(x)
    g = t.gradient(y, x)
    assert y.dtype == tf.float16 and g.dtype == tf.float16
    np.testing.assert_allclose(_as32(y), np.linalg.inv(m), rtol=2e-3)
    inv = np.linalg.inv(m)
    np.testing.assert_allclose(_as32(g), -(inv.T @ np.ones((2, 2)) @ inv.T), rtol=5e-3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Qr has no bfloat16 kernel"):
        tf.linalg.qr(tf.constant(m, tf.bfloat16))
    q, r = tf.linalg.qr(x)
    assert q.dtype == r.dtype == tf.float16
    np.testing.assert_allclose(_as32(q) @ _as32(r), m, atol=5e-3)


# ---------------------------------------------------------------------------------------------
# Mixed precision patterns
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", sorted(HALF))
def test_mixed_precision_float32_variable_cast_to_half(dtype):
    """A float32 Variable cast to half in the forward: the gradient comes back float32 (TF: the
    source's dtype), equal to the float32 gradient within half tolerance."""
    tdt, npdt, tol = HALF[dtype]
    w = tf.Variable(np.array([[0.5, -1.0], [1.5, 0.25]], np.float32))
    x = tf.constant(np.array([[1.0, 2.0], [-0.5, 0.75]]), tdt)
    with tf.GradientTape() as t:
        h = tf.matmul(x, tf.cast(w, tdt))
        loss = tf.reduce_sum(tf.nn.relu(h) * h)
    assert h.dtype == tdt and loss.dtype == tdt
    g = t.gradient(loss, w)
    assert g.dtype == tf.float32
    xf = np.array([[1.0, 2.0], [-0.5, 0.75]], np.float32)
    hf = xf @ w.numpy()
    want = xf.T @ (2 * hf * (hf > 0))
    np.testing.assert_allclose(g.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_loss_scaling_with_output_gradients(dtype):
    """Loss scaling: output_gradients=scale in half, gradients divided back: same as unscaled;
    a float32 cotangent for a half target is TF's InvalidArgumentError."""
    tdt, npdt, tol = HALF[dtype]
    w = tf.Variable(np.array([0.5, -1.0, 2.0], np.float32))
    with tf.GradientTape(persistent=True) as t:
        loss = tf.reduce_sum(tf.square(tf.cast(w, tdt))) * tf.constant(1e-3, tdt)
    scale = tf.constant(1024.0, tdt)
    scaled = t.gradient(loss, w, output_gradients=scale)
    plain = t.gradient(loss, w)
    assert scaled.dtype == tf.float32 and plain.dtype == tf.float32
    np.testing.assert_allclose(scaled.numpy() / 1024.0, plain.numpy(), rtol=tol)
    np.testing.assert_allclose(plain.numpy(), 2e-3 * w.numpy(), rtol=tol)
    with pytest.raises(tf.errors.InvalidArgumentError, match="output_gradients"):
        t.gradient(loss, w, output_gradients=tf.constant(1024.0))


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_reductions_accumulate_in_float32(dtype):
    """Sums of half values accumulate in float32 and round once (XLA's rule): 10000 ones sum to
    10000 (TF agrees, see the parity file); cumsum does not saturate at 2048 as TF's half cumsum
    does (a TF accident tapejax does not copy); mean of 0.1s is the rounded float32 mean."""
    tdt, npdt, _ = HALF[dtype]
    ones = tf.ones([10000], tdt)
    tenth = tf.constant(np.full([10000], 0.1, np.float32), tdt)
    want = lambda v: float(npdt(v))  # noqa: E731
    s = tf.reduce_sum(ones)
    assert s.dtype == tdt and float(s.numpy()) == want(10000.0)
    assert float(tf.math.cumsum(ones)[-1].numpy()) == want(10000.0)
    m = tf.reduce_mean(tenth)
    assert m.dtype == tdt and float(m.numpy()) == want(np.float32(npdt(0.1)) * 10000 / 10000)
    assert float(tf.math.reduce_variance(tenth).numpy()) == 0.0


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_variables_optimizer_and_checkpoint(dtype, tmp_path):
    """Half Variables: auto-watched, gradient in their dtype, SGD/Adam keep the dtype (slots too),
    a Checkpoint round-trip restores the exact half values with their dtype.  Adam computes its
    step size in the Variable's dtype, as TF's: in bfloat16 ``beta_2 = 0.999`` rounds to 1, so
    ``sqrt(1 - beta_2 ** t)`` is 0 and the step changes nothing (TF 2.21 with tf_keras, new and
    legacy Adam: [1, -2, 0.5] stays; float16 moves to [0.99, -1.99, 0.49])."""
    tdt, npdt, tol = HALF[dtype]
    v = tf.Variable(np.array([1.0, -2.0, 0.5], np.float32), dtype=tdt)
    for opt in (tf.keras.optimizers.SGD(0.1, momentum=0.9), tf.keras.optimizers.Adam(0.01)):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * v)
        g = t.gradient(loss, v)
        assert g.dtype == tdt
        before = _as32(v)
        opt.apply_gradients([(g, v)])
        assert v.dtype == tdt
        assert all(s.dtype == tdt for s in opt.variables() if s.shape == v.shape)
        stays = dtype == "bfloat16" and isinstance(opt, tf.keras.optimizers.Adam)
        assert np.allclose(_as32(v), before) is stays
    ckpt = tf.train.Checkpoint(v=v)
    path = ckpt.save(os.path.join(tmp_path, "c"))
    saved = v.numpy().copy()
    v.assign(tf.zeros([3], tdt))
    ckpt.restore(path)
    assert v.dtype == tdt and v.numpy().tobytes() == saved.tobytes()


# ---------------------------------------------------------------------------------------------
# float64 without x64: a clear error at every entry point
# ---------------------------------------------------------------------------------------------

X = np.array([1.0, 2.0], np.float32)

F64_ENTRY_POINTS = [
    ("constant(dtype=tf.float64)", lambda: tf.constant(1.0, dtype=tf.float64), "value"),
    ("constant(dtype='float64')", lambda: tf.constant([1.0], dtype="float64"), "value"),
    ("constant(dtype='double')", lambda: tf.constant([1.0], dtype="double"), "value"),
    ("constant(dtype=np.float64)", lambda: tf.constant([1.0], dtype=np.float64), "value"),
    ("constant(dtype=tf.complex128)", lambda: tf.constant([1.0], dtype=tf.complex128), "value"),
    ("constant(numpy float64 array)", lambda: tf.constant(np.array([1.0, 2.0])), "value"),
    ("constant(np.float64 scalar)", lambda: tf.constant(np.float64(1.5)), "value"),
    ("constant(Python complex)", lambda: tf.constant(1 + 2j), "value"),
    ("convert_to_tensor(numpy float64)", lambda: tf.convert_to_tensor(np.array([1.0])), "value"),
    ("convert_to_tensor(dtype=float64)", lambda: tf.convert_to_tensor(1.0, dtype=tf.float64), "value"),
    ("convert_to_tensor(dtype_hint=float64)", lambda: tf.convert_to_tensor(1.0, dtype_hint=tf.float64),
     "dtype_hint"),
    ("Variable(numpy float64)", lambda: tf.Variable(np.array([1.0, 2.0])), "initial_value"),
    ("Variable(dtype=float64)", lambda: tf.Variable(1.0, dtype=tf.float64), "initial_value"),
    ("Variable(Tensor, dtype=float64)", lambda: tf.Variable(tf.constant(X), dtype=tf.float64), "initial_value"),
    ("Variable(callable -> float64)", lambda: tf.Variable(lambda: np.zeros(2)), "initial_value"),
    ("cast(x, tf.float64)", lambda: tf.cast(tf.constant(X), tf.float64), "cast"),
    ("cast(x, 'float64')", lambda: tf.cast(tf.constant(X), "float64"), "cast"),
    ("dtypes.cast(x, float64)", lambda: tf.dtypes.cast(tf.constant(X), tf.float64), "cast"),
    ("cast(x, complex128)", lambda: tf.cast(tf.constant(X), tf.complex128), "cast"),
    ("zeros(dtype=float64)", lambda: tf.zeros([2], tf.float64), "dtype"),
    ("ones(dtype=float64)", lambda: tf.ones([2], dtype=tf.float64), "dtype"),
    ("zeros_like(dtype=float64)", lambda: tf.zeros_like(tf.constant(X), dtype=tf.float64), "dtype"),
    ("ones_like(dtype=float64)", lambda: tf.ones_like(tf.constant(X), dtype=tf.float64), "dtype"),
    ("fill(value=np.float64)", lambda: tf.fill([2], np.float64(1.0)), "value"),
    ("eye(dtype=float64)", lambda: tf.eye(2, dtype=tf.float64), "dtype"),
    ("range(dtype=float64)", lambda: tf.range(3, dtype=tf.float64), "dtype"),
    ("linspace(np.float64)", lambda: tf.linspace(np.float64(0.0), np.float64(1.0), 3), "value"),
    ("linspace(int, int)", lambda: tf.linspace(-2, 2, 5), "integer start"),   # TF: float64
    ("one_hot(dtype=float64)", lambda: tf.one_hot([0, 1], 2, dtype=tf.float64), "dtype"),
    ("random.normal(dtype=float64)", lambda: tf.random.normal([2], dtype=tf.float64), "dtype"),
    ("random.uniform(dtype=float64)", lambda: tf.random.uniform([2], dtype=tf.float64), "dtype"),
    ("random.truncated_normal(dtype=float64)", lambda: tf.random.truncated_normal([2], dtype=tf.float64),
     "dtype"),
    ("math.bincount(dtype=float64)", lambda: tf.math.bincount([1, 2], dtype=tf.float64), "dtype"),
]


@pytest.mark.parametrize("what, call, arg", F64_ENTRY_POINTS, ids=[e[0] for e in F64_ENTRY_POINTS])
def test_float64_without_x64_is_a_clear_error(what, call, arg):
    """Without x64 every way of asking for float64/complex128 raises TypeError naming the argument,
    the dtype asked for, and how to enable x64; never a silent float32."""
    assert not jax.config.jax_enable_x64
    with pytest.raises(TypeError) as e:
        call()
    msg = str(e.value)
    assert X64_HINT in msg and ("float64" in msg or "complex128" in msg), msg
    assert arg in msg, msg


def test_float64_error_leaves_state_unchanged():
    """A failed float64 request changes nothing: the Variable keeps its value, the tape records
    nothing, and the same calls work under x64."""
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        y = v * 2.0
        with pytest.raises(TypeError, match=X64_HINT):
            tf.cast(v, tf.float64)
        n = len(t._nodes)
    assert n == len(t._nodes) and v.numpy().tolist() == [1.0, 2.0]
    np.testing.assert_allclose(t.gradient(y, v).numpy(), [2.0, 2.0])
    with x64():
        for what, call, arg in F64_ENTRY_POINTS:
            if what == "Variable(Tensor, dtype=float64)":   # TF casts no float32 Tensor there (ValueError)
                with pytest.raises(ValueError, match="conversion requested dtype float64"):
                    call()
                continue
            r = call()
            assert r.dtype in (tf.float64, tf.complex128), what


def test_float64_numpy_into_a_float32_tensor_is_cast_as_tf():
    """Not an x64 request: TF casts NumPy float64 operands and assigns into float32 (no error)."""
    x = tf.constant(X)
    assert (x + np.array([1.0, 1.0])).dtype == tf.float32
    assert (x * np.float64(2.0)).dtype == tf.float32
    v = tf.Variable(X)
    v.assign(np.array([3.0, 4.0]))
    assert v.dtype == tf.float32 and v.numpy().tolist() == [3.0, 4.0]


# ---------------------------------------------------------------------------------------------
# float64 end to end under x64
# ---------------------------------------------------------------------------------------------

#: One row per family in CI; all rows with TAPEJAX_NUMERICS_FULL=1.
F64_CI_ROWS = {"unary": {"tanh", "lgamma"}, "binary": {"pow", "atan2"}, "reduce": {"reduce_logsumexp_axis1"},
               "scan": {"cumprod"}, "misc_math": {"matmul", "top_k"}, "array": {"gather", "einsum"},
               "nn": {"softmax_cross_entropy_with_logits", "conv2d"},
               "linalg": {"inv", "cholesky"},
               "first_order_only": {"moments"}, "extra": {"one_hot", "floor", "argmax"},
               "api_sweep": {"conv3d", "xlog1py"}, "image": {"adjust_hue", "resize_bicubic"},
               "signal": {"frame", "kaiser_window"}}


@pytest.mark.parametrize("group", GROUP_NAMES)
def test_float64_table(group):
    """Under x64 every op keeps float64: outputs and gradients (float64 sources) are float64, never
    float32; integer outputs are TF's 64-bit-mode dtypes; values agree with the float32 run."""
    rows = [r for r in ROWS if r[0] == group and (FULL or r[1] in F64_CI_ROWS[group])]
    with x64():
        res, cts, _ = _run([(label, f, args, np.float64) for _, label, f, args in rows])
        ref, _, _ = _run([(label, f, args, np.float32) for _, label, f, args in rows], cts)
    problems = []
    for _, label, f, args in rows:
        (outs, grads), (routs, rgrads) = res[label], ref[label]
        for i, (o, r) in enumerate(zip(outs, routs)):
            if o.dtype.is_floating and o.dtype != (tf.float32 if label in FLOAT32_OUTPUT else tf.float64):
                problems.append(f"{label}: output {i} is {o.dtype.name}")
            elif o.dtype.is_floating:
                np.testing.assert_allclose(o.numpy(), r.numpy(), rtol=2e-3, atol=2e-3, err_msg=label)
            if o.dtype.is_integer and label == "argmax" and o.dtype != tf.int64:
                problems.append(f"{label}: output {i} is {o.dtype.name}, TF gives int64")
        for i, (g, r) in enumerate(zip(grads, rgrads)):
            if (g is None) != (r is None) or (g is not None and g.dtype != tf.float64):
                problems.append(f"{label}: gradient {i} is {g!r}")
            elif g is not None and label not in DISCONTINUOUS:
                np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-3, atol=2e-3, err_msg=label)
    assert not problems, "\n".join(problems)
    if not FULL:
        assert len(rows) == len(F64_CI_ROWS[group]), "F64_CI_ROWS names a row that does not exist"


def _f64(x):
    return np.asarray(x, np.float64)


def test_float64_tape_features_end_to_end():
    """Variables, watched constants, nested 2nd order, jacobian, batch_jacobian, ForwardAccumulator,
    unconnected zeros and hessians all stay float64, with float64-accurate values."""
    with x64():
        xv = _f64([0.3, -1.1, 0.7])
        w = tf.Variable(xv)
        c = tf.constant(_f64(2.0))
        assert w.dtype == tf.float64 and tf.constant(1.5, tf.float64).dtype == tf.float64
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = tf.reduce_sum(tf.sin(w) * c)
            g = inner.gradient(y, w)
        h = outer.gradient(g, w)
        assert y.dtype == g.dtype == h.dtype == tf.float64
        np.testing.assert_allclose(g.numpy(), 2 * np.cos(xv), rtol=1e-14)
        np.testing.assert_allclose(h.numpy(), -2 * np.sin(xv), rtol=1e-14)
        xb = tf.constant(_f64([[0.2], [-0.4], [1.0]]))
        with tf.GradientTape(persistent=True) as t:
            t.watch(xb)
            z = tf.exp(w) * w
            zb = tf.exp(xb) * tf.constant(_f64([[1.0, 2.0]]))
        j = t.jacobian(z, w)
        jb = t.batch_jacobian(zb, xb)
        zero = t.gradient(z, c, unconnected_gradients="zero")
        assert j.dtype == jb.dtype == zero.dtype == tf.float64
        np.testing.assert_allclose(jb.numpy()[:, :, 0], np.exp(xb.numpy()) * [[1.0, 2.0]], rtol=1e-14)
        np.testing.assert_allclose(j.numpy(), np.diag(np.exp(xv) * (1 + xv)), rtol=1e-14)
        with tf.autodiff.ForwardAccumulator(w, tf.constant(_f64([1.0, 0.0, 0.0]))) as acc:
            u = tf.tanh(w) * 3.0
        jv = acc.jvp(u)
        assert jv.dtype == tf.float64
        np.testing.assert_allclose(jv.numpy(), [3 / np.cosh(xv[0]) ** 2, 0, 0], rtol=1e-14)
        # float64 precision is really used: 1 + 1e-12 survives (float32 would round it to 1).
        tiny = tf.Variable(_f64(1.0))
        with tf.GradientTape() as t2:
            q = (tiny + 1e-12) * (tiny + 1e-12)
        assert q.numpy() != 1.0 and t2.gradient(q, tiny).numpy() == pytest.approx(2 + 2e-12, abs=1e-15)


def test_float64_function_optimizer_checkpoint(tmp_path):
    """tapejax.function with a float64 model, an optimizer step (Variables and slots float64) and a
    Checkpoint round-trip keep float64 exactly."""
    with x64():
        w = tf.Variable(_f64([[0.5, -0.25], [1.0, 0.125]]))
        b = tf.Variable(_f64([0.1, -0.2]))
        x = tf.constant(_f64([[1.0, 2.0], [3.0, -1.0]]))
        opt = tf.keras.optimizers.Adam(0.01)

        @tf.function
        def step(x):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b))
            gw, gb = t.gradient(loss, [w, b])
            opt.apply_gradients([(gw, w), (gb, b)])
            return loss, gw

        loss, gw = step(x)
        assert loss.dtype == gw.dtype == w.dtype == b.dtype == tf.float64
        # Oracle: the same gradient by hand in float64.
        w0 = np.array([[0.5, -0.25], [1.0, 0.125]])
        r = x.numpy() @ w0 + np.array([0.1, -0.2])
        np.testing.assert_allclose(gw.numpy(), x.numpy().T @ (2 * r / r.size), rtol=1e-13)
        for _ in range(3):
            step(x)
        slots = [s for s in opt.variables() if s.shape in (w.shape, b.shape)]
        assert slots and all(s.dtype == tf.float64 for s in slots)
        ckpt = tf.train.Checkpoint(w=w, b=b, opt=opt)
        path = ckpt.save(os.path.join(tmp_path, "c"))
        saved = w.numpy().copy()
        w.assign(w + 1e-13)
        assert w.numpy().tobytes() != saved.tobytes()
        ckpt.restore(path)
        assert w.dtype == tf.float64 and w.numpy().tobytes() == saved.tobytes()


def test_float32_source_through_float64_path_gives_float32_gradient():
    """TF: the gradient's dtype is the source's dtype whatever the path computes in."""
    with x64():
        w = tf.Variable(np.array([1.5, -0.5], np.float32))
        with tf.GradientTape() as t:
            y = tf.reduce_sum(tf.cast(w, tf.float64) ** 3)
        g = t.gradient(y, w)
        assert y.dtype == tf.float64 and g.dtype == tf.float32
        np.testing.assert_allclose(g.numpy(), 3 * np.array([1.5, -0.5]) ** 2, rtol=1e-6)


def test_linspace_of_integers_is_float64_as_tf():
    """TF's ``tf.linspace(-2, 2, 5)`` (the basic-training guide's x) is float64; floats stay float32."""
    with x64():
        x = tf.linspace(-2, 2, 5)
        assert x.dtype == tf.float64 and x.numpy().tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]
        assert tf.linspace(tf.constant(0, tf.int64), 1, 3).dtype == tf.float64
        assert tf.linspace(-2.0, 2.0, 3).dtype == tf.float32
