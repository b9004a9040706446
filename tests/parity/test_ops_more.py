"""The ops the API-coverage sweep added (tests/test_api_coverage.py), under TensorFlow and tapejax:
values and gradients (``vg``: every input watched), errors, and for the random ops TF's rules
(determinism, shapes, dtypes, ranges: the generators differ).  ``tools/gen_ops_table.py`` reads
this file as it reads test_ops_library.py."""
import numpy as np

from .harness import A, parity, raises
from .test_ops_library import LIN, MAT, POS, SPD, UNIT, vg, vg_many

X4 = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3) / 10.0
RNG = np.random.default_rng(0)
X3D = RNG.normal(size=(1, 5, 6, 7, 2)).astype(np.float32)
W3D = RNG.normal(size=(2, 3, 2, 2, 4)).astype(np.float32)
X2D = RNG.normal(size=(2, 6, 7, 3)).astype(np.float32)
W2D = RNG.normal(size=(3, 3, 3, 4)).astype(np.float32)
X1D = RNG.normal(size=(2, 9, 3)).astype(np.float32)


# -- elementwise and special functions ----------------------------------------------------

@parity(rtol=2e-5, atol=1e-5)
def test_special_unary(tf):
    """Bessel, erfinv/erfcinv/ndtri, reciprocal_no_nan, rint, angle/real/imag/conj on reals,
    tf.math.special's dawsn/expint/spence/fresnel_cos/fresnel_sin: values and gradients (None where TF
    gives none)."""
    return tuple(vg_many(tf, [
        (tf.math.bessel_i0, LIN), (tf.math.bessel_i0e, LIN), (tf.math.bessel_i1, LIN), (tf.math.bessel_i1e, LIN),
        (tf.math.erfinv, UNIT), (tf.math.erfcinv, UNIT + 1.0), (tf.math.ndtri, (UNIT + 1.0) / 2.0),
        (tf.math.reciprocal_no_nan, np.array([2.0, 0.0, -4.0], np.float32)),
        (tf.math.rint, np.array([0.5, 1.5, -2.5, 2.7], np.float32)),
        (tf.math.angle, LIN), (tf.math.real, LIN), (tf.math.imag, LIN), (tf.math.conj, LIN),
        (tf.math.special.dawsn, LIN), (tf.math.special.expint, POS), (tf.math.special.spence, POS),
        (tf.math.special.fresnel_cos, LIN), (tf.math.special.fresnel_sin, LIN), (tf.math.special.bessel_i1e, LIN)]))


@parity(rtol=5e-5, atol=1e-5)
def test_special_binary(tf):
    """igamma/igammac (both gradients), polygamma (none for the order), zeta (none for x), betainc
    (none for a, b), nextafter (1 and 0), xlog1py at x = 0, lbeta over the last axis."""
    return tuple(vg_many(tf, [
        (tf.math.igamma, POS + 0.5, POS), (tf.math.igammac, POS + 0.5, POS),
        (tf.math.polygamma, np.array([0.0, 1.0, 2.0], np.float32), np.array([0.5, 1.5, 3.0], np.float32)),
        (tf.math.zeta, np.array([2.0, 3.0, 4.5], np.float32), np.array([1.5, 2.0, 0.7], np.float32)),
        (tf.math.betainc, np.array([2.0, 0.5], np.float32), np.array([3.0, 1.5], np.float32),
         np.array([0.4, 0.9], np.float32)),
        (tf.math.nextafter, np.array([1.0, 2.0], np.float32), np.array([2.0, 0.0], np.float32)),
        (tf.math.xlog1py, np.array([0.0, 2.0, -1.0], np.float32), np.array([0.5, 0.4, 3.0], np.float32)),
        (tf.math.lbeta, POS)]))


@parity
def test_complex_truncate_saturate_scalar_mul(tf):
    """tf.complex, truncatediv/truncatemod (no gradient), saturate_cast's clamping, scalar_mul (also
    of IndexedSlices)."""
    c = tf.complex(tf.constant([1.0, -2.0]), tf.constant([3.0, 0.5]))
    s = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([1]), tf.constant([3, 2]))
    return (tf.math.real(c), tf.math.imag(c), c.dtype.name, tf.math.angle(c), tf.math.conj(c),
            tf.truncatediv(tf.constant([7, -7, 7]), tf.constant([2, 2, -2])),
            tf.truncatemod(tf.constant([7, -7, 7]), tf.constant([2, 2, -2])),
            tf.truncatediv(tf.constant([2.0, -2.5]), tf.constant([0.4, 1.0])),
            tf.saturate_cast(tf.constant([1e10, -1e10, 3.0, 300.0, -5.0]), tf.int32),
            tf.saturate_cast(tf.constant([300, -5, 7]), tf.uint8),
            tf.math.scalar_mul(2.0, tf.constant([1.0, 3.0])),
            tf.convert_to_tensor(tf.math.scalar_mul(3.0, s)), type(tf.math.scalar_mul(3.0, s)).__name__)


@parity
def test_cast_out_of_range_as_tfs_cpu_kernel(tf):
    """Floats out of an integer dtype's range (and NaN) convert as TF's CPU kernel: the minimum for
    32 bits, through int32 (low bits kept) for narrower types, 2**31 for uint32."""
    x = tf.constant([1e10, -1e10, float("nan"), float("inf"), -float("inf"), 2.7, -2.7, 3e9, 2147483520.0,
                     -2147483648.0])
    return tuple(tf.cast(x, d) for d in (tf.int32, tf.int16, tf.int8, tf.uint8, tf.uint16, tf.uint32, tf.bool)) + (
        tf.cast(tf.constant([6e4, -6e4, float("nan")], tf.float16), tf.int8),)


@parity
def test_bitwise_and_operators(tf):
    """tf.bitwise on integers; &, |, ^, ~ are logical on bools and bitwise on integers."""
    a, b = tf.constant([12, -3, 5]), tf.constant([10, 7, 1])
    t, f = tf.constant([True, True, False]), tf.constant([True, False, False])
    u = tf.constant([200, 7], tf.uint8)
    return (tf.bitwise.bitwise_and(a, b), tf.bitwise.bitwise_or(a, b), tf.bitwise.bitwise_xor(a, b),
            tf.bitwise.invert(a), tf.bitwise.left_shift(a, tf.constant([1, 2, 3])),
            tf.bitwise.right_shift(a, tf.constant([1, 1, 0])), tf.bitwise.right_shift(u, tf.constant([2, 1], tf.uint8)),
            a & b, a | b, a ^ b, ~a, t & f, t | f, t ^ f, ~t, a ^ 3,
            raises(tf.bitwise.bitwise_and, tf.constant([1.0]), tf.constant([2.0])))


# -- segments, selection, ordering -----------------------------------------------------------

SEG = np.array([[1.0, 5.0], [3.0, 5.0], [3.0, 2.0], [0.0, 1.0], [-1.0, 4.0]], np.float32)


@parity(rtol=1e-5, atol=1e-6)
def test_unsorted_segment_reductions(tf):
    """max/min (ties split the gradient; empty segments the dtype's extremes), prod (zeros),
    mean, sqrt_n (empty: 0)."""
    ids = tf.constant([0, 0, 3, 0, 3])
    zeros = np.array([[1.0, 5.0], [3.0, 0.0], [3.0, 2.0], [0.0, 0.0], [2.0, 4.0]], np.float32)
    return tuple(vg_many(tf, [
        (lambda x: tf.math.unsorted_segment_max(x, ids, 4), SEG), (lambda x: tf.math.unsorted_segment_min(x, ids, 4), SEG),
        (lambda x: tf.math.unsorted_segment_prod(x, ids, 4), zeros),
        (lambda x: tf.math.unsorted_segment_mean(x, ids, 4), SEG), (lambda x: tf.math.unsorted_segment_sqrt_n(x, ids, 4), SEG)]))


@parity(rtol=1e-5, atol=1e-6)
def test_sorted_segment_reductions(tf):
    """segment_max/min/prod/mean with sorted ids and a gap (empty segment: 0, prod 1)."""
    ids = tf.constant([0, 0, 2, 2, 3])
    return tuple(vg_many(tf, [(lambda x: tf.math.segment_max(x, ids), SEG), (lambda x: tf.math.segment_min(x, ids), SEG),
                              (lambda x: tf.math.segment_prod(x, ids), SEG), (lambda x: tf.math.segment_mean(x, ids), SEG)]))


@parity
def test_selection_and_ordering(tf):
    """in_top_k (ties count), invert_permutation, is_non_decreasing / is_strictly_increasing,
    zero_fraction, confusion_matrix (weights, num_classes), approx_max_k / approx_top_k (exact on
    the CPU; TF has no CPU kernel for the min forms: tests/test_ops_sweep.py checks them against JAX)."""
    pred = tf.constant([[0.1, 0.9, 0.8], [0.5, 0.5, 0.2], [0.3, 0.2, 0.1]])
    return (tf.math.in_top_k(tf.constant([1, 0, 2]), pred, 1), tf.nn.in_top_k(tf.constant([2, 1, 0]), pred, 2),
            tf.math.invert_permutation([3, 4, 0, 2, 1]), tf.math.is_non_decreasing([1, 1, 2]),
            tf.math.is_strictly_increasing([1, 1, 2]), tf.math.is_strictly_increasing([1.0, 2.5]),
            tf.math.zero_fraction(tf.constant([0.0, 1.0, 0.0, 3.0])), tf.nn.zero_fraction(tf.constant([[0, 1]])),
            tf.math.confusion_matrix([1, 2, 4], [2, 2, 4]),
            tf.math.confusion_matrix([0, 1], [1, 1], num_classes=3, weights=[2.0, 0.5], dtype=tf.float32),
            tuple(tf.math.approx_max_k(tf.constant([[1.0, 5.0, 3.0]]), 2)),
            tf.nn.approx_max_k(tf.constant([[4.0, 5.0, 3.0]]), 1).values, tf.approx_top_k(tf.constant([[1.0, 5.0, 3.0]]), 1).indices,
            type(tf.math.approx_max_k([[1.0]], 1)).__name__, tf.math.approx_max_k([[1.0]], 1)._fields)


# -- layout ------------------------------------------------------------------------------------

@parity
def test_space_batch_depth(tf):
    """space_to_batch_nd (padding), batch_to_space (crops), depth_to_space / space_to_depth and their
    gradients, required_space_to_batch_paddings."""
    img = tf.constant(np.arange(12.0, dtype=np.float32).reshape(1, 3, 4, 1))
    return (vg(tf, lambda x: tf.space_to_batch_nd(x, [2, 2], [[1, 0], [0, 0]]) * 2.0, img),
            vg(tf, lambda x: tf.space_to_batch(x, [2, 2], [[0, 0], [0, 0]]), X4),
            vg(tf, lambda x: tf.batch_to_space(x, [2, 2], [[0, 0], [1, 1]]) ** 2,
               np.arange(16.0, dtype=np.float32).reshape(4, 2, 2, 1)),
            vg(tf, lambda x: tf.nn.depth_to_space(x, 2) * 3.0, np.arange(32.0, dtype=np.float32).reshape(1, 2, 2, 8)),
            vg(tf, lambda x: tf.nn.space_to_depth(x, 2), X4),
            tf.required_space_to_batch_paddings([5, 7], [2, 3]),
            raises(tf.space_to_batch_nd, img, [2, 2], [[0, 0], [0, 0]]))


@parity
def test_sequences_and_searching(tf):
    """reverse_sequence (and its gradient), sequence_mask, searchsorted, unravel_index, histograms,
    unique_with_counts."""
    return (vg(tf, lambda x: tf.reverse_sequence(x, [2, 3, 0], seq_axis=1, batch_axis=0) * tf.constant([1.0, 2.0, 3.0]),
               np.arange(9.0, dtype=np.float32).reshape(3, 3)),
            tf.reverse_sequence(tf.reshape(tf.range(12), [4, 3]), [2, 3, 1], seq_axis=0, batch_axis=1),
            tf.sequence_mask([1, 3, 2]), tf.sequence_mask([1, 3, 2], 5, dtype=tf.float32),
            tf.searchsorted([[0.0, 1.0, 2.0], [1.0, 3.0, 5.0]], [[1.0, 1.5], [5.0, 0.0]]),
            tf.searchsorted([[0.0, 1.0, 2.0]], [[1.0, 1.5]], side="right"),
            tf.unravel_index([22, 41, 37], [7, 6]),
            tf.histogram_fixed_width([-1.0, 0.0, 1.5, 2.0, 5.0, 15.0], [0.0, 5.0], nbins=5),
            tf.histogram_fixed_width_bins([-1.0, 0.0, 1.5, 2.0, 5.0, 15.0], [0.0, 5.0], nbins=5),
            tuple(tf.unique_with_counts([1, 1, 2, 4, 4, 4, 7, 8, 8])))


@parity
def test_partition_stitch_bitcast_shapes(tf):
    """dynamic_partition / dynamic_stitch (values and gradients), bitcast, shape_n,
    broadcast_*_shape, ensure_shape (and its error), strided_slice with masks."""
    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    return (vg(tf, lambda d: tf.dynamic_partition(d * 2.0, [0, 0, 1, 1, 0], 2), [10.0, 20.0, 30.0, 40.0, 50.0]),
            vg(tf, lambda a, b: tf.dynamic_stitch([[1, 0], [2, 0]], [a, b]) ** 2, [[1.0, 2.0], [3.0, 4.0]],
               [[5.0, 6.0], [7.0, 8.0]]),
            tf.bitcast(tf.constant([1.0, 2.0]), tf.int32), tf.bitcast(tf.constant([1, 2], tf.int32), tf.uint8),
            tf.shape_n([tf.ones([2, 3]), tf.ones([4])]), tf.broadcast_dynamic_shape([1, 3], [4, 1]),
            tf.broadcast_static_shape(tf.TensorShape([1, 3]), tf.TensorShape([4, 1])).as_list(),
            tf.ensure_shape(tf.ones([2, 3]), [None, 3]), raises(tf.ensure_shape, tf.ones([2, 3]), [None, 4]),
            vg(tf, lambda v: tf.strided_slice(v, [0, 1, 1], [2, 3, 3], [1, 1, 2], begin_mask=1), x),
            tf.strided_slice(x, [1], [2], shrink_axis_mask=1), tf.strided_slice(x, [0, 0], [1, 2], [1, 1], ellipsis_mask=1),
            tf.strided_slice(x, [0, 0, 0], [1, 2, 3], new_axis_mask=2),
            tf.strided_slice(x, [-1, 0, 0], [0, 3, 4], [1, -1, 1], shrink_axis_mask=1, end_mask=2),
            tf.strided_slice(x, [1, 0], [2, 0], [1, 1], ellipsis_mask=2, shrink_axis_mask=1))


@parity(tf_skip="TF's FFTND has GPU kernels only", expected=(
    A(np.real(np.fft.fftn(np.arange(6.0).reshape(2, 3))).astype(np.float32)),
    A(np.imag(np.fft.rfftn(np.arange(6.0).reshape(2, 3))).astype(np.float32)),
    A(np.real(np.fft.ifftn(np.fft.fftn(np.arange(6.0).reshape(2, 3)), axes=(1,))).astype(np.float32)),
    A(np.fft.irfftn(np.fft.rfftn(np.arange(6.0).reshape(2, 3)), s=(2, 3)).astype(np.float32))))
def test_fftnd(tf):
    """fftnd / rfftnd / ifftnd / irfftnd (NumPy's FFTs as the oracle: TF runs them on GPUs only)."""
    x = tf.reshape(tf.range(6.0), [2, 3])
    f = tf.fftnd(tf.cast(x, tf.complex64))
    return (tf.math.real(f), tf.math.imag(tf.rfftnd(x)), tf.math.real(tf.ifftnd(f, axes=[1])),
            tf.irfftnd(tf.rfftnd(x), fft_length=[2, 3]))


@parity
def test_tensor_scatter_variants(tf):
    """tensor_scatter_nd_sub / _max / _min (values and gradients)."""
    t0 = np.array([1.0, 5.0, 3.0, 2.0], np.float32)
    idx = tf.constant([[1], [3], [1]])
    return tuple(vg_many(tf, [
        (lambda t, u: tf.tensor_scatter_nd_sub(t, idx, u), t0, [1.0, 2.0, 4.0]),
        (lambda t, u: tf.tensor_scatter_nd_max(t, idx, u), t0, [1.0, 9.0, 4.0]),
        (lambda t, u: tf.tensor_scatter_nd_min(t, idx, u), t0, [1.0, 9.0, 4.0])]))


# -- linear algebra ----------------------------------------------------------------------------

@parity(rtol=1e-4, atol=1e-5)
def test_linalg_more(tf):
    """adjoint, matrix_transpose, set_diag (k = 0, 1), tensor_diag(_part), normalize, matrix_rank,
    lu_solve / lu_reconstruct / lu_matrix_inverse of lu's factors, eigvals, tridiagonal solve and
    matmul, eye, sqrtm, eigh_tridiagonal: values and gradients."""
    return (vg(tf, tf.linalg.adjoint, MAT), vg(tf, tf.linalg.matrix_transpose, MAT),
            vg(tf, lambda x, d: tf.linalg.set_diag(x, d), MAT, [7.0, 8.0, 9.0]),
            vg(tf, lambda x, d: tf.linalg.set_diag(x, d, k=1), MAT, [7.0, 8.0]),
            vg(tf, tf.linalg.tensor_diag, [[1.0, 2.0], [3.0, 4.0]]),
            vg(tf, tf.linalg.tensor_diag_part, np.arange(16.0, dtype=np.float32).reshape(2, 2, 2, 2)),
            vg(tf, lambda x: tf.linalg.normalize(x, axis=1), MAT),
            tf.linalg.matrix_rank(tf.constant([[1.0, 2.0], [2.0, 4.0]])), tf.linalg.matrix_rank(tf.constant(MAT)),
            tuple(tf.linalg.lu(tf.constant(MAT))), type(tf.linalg.lu(tf.constant(MAT))).__name__,
            tf.linalg.lu(tf.constant(MAT))._fields,
            tf.linalg.lu_solve(*tf.linalg.lu(tf.constant(MAT)), tf.constant([[1.0], [2.0], [3.0]])),
            tf.linalg.lu_reconstruct(*tf.linalg.lu(tf.constant(MAT))),
            tf.linalg.lu_matrix_inverse(*tf.linalg.lu(tf.constant(MAT))),
            tf.sort(tf.math.real(tf.linalg.eigvals(tf.constant(SPD)))),
            tf.sort(tf.math.real(tf.linalg.eig(tf.constant(SPD))[0])),
            vg(tf, lambda d, b: tf.linalg.tridiagonal_solve(d, b), [[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 7.0, 8.0]],
               [[1.0], [2.0], [3.0]]),
            vg(tf, lambda d, b: tf.linalg.tridiagonal_matmul(d, b), [[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 7.0, 8.0]],
               [[1.0], [2.0], [3.0]]),
            tf.linalg.eye(2, 3), tf.linalg.eye(2, batch_shape=[2]),
            vg(tf, tf.linalg.sqrtm, SPD),
            tf.linalg.eigh_tridiagonal(tf.constant([1.0, 2.0, 3.0]), tf.constant([0.5, 0.25])))


# -- convolution and pooling of any rank --------------------------------------------------------

@parity(rtol=1e-4, atol=1e-3)
def test_conv_nd(tf):
    """conv3d, convolution (dilated, 1-D), atrous_conv2d, conv_transpose and its 1-D / 3-D / atrous
    forms, depthwise backprops, separable_conv2d, tf.conv (TF's Conv op: strides, dilations, explicit
    padding, batch_dims): values and gradients (the V2 conv backprops, which
    TF has no CPU kernel for: test_ops_without_tf_cpu_kernels)."""
    return (vg(tf, lambda x, w: tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "SAME"), X3D, W3D),
            vg(tf, lambda x, w: tf.nn.conv3d(x, w, [1, 2, 1, 2, 1], "VALID"), X3D, W3D),
            vg(tf, lambda x, w: tf.nn.convolution(x, w, padding="SAME", dilations=2), X2D, W2D),
            vg(tf, lambda x: tf.nn.convolution(x, tf.ones([2, 3, 2]), strides=2, padding="VALID"), X1D),
            vg(tf, lambda x, w: tf.nn.atrous_conv2d(x, w, 2, "SAME"), X2D, W2D),
            vg(tf, lambda y: tf.nn.conv_transpose(y, tf.ones([3, 3, 3, 4]), [2, 6, 7, 3], 1, "SAME"),
               np.ones((2, 6, 7, 4), np.float32)),
            vg(tf, lambda y: tf.nn.conv1d_transpose(y, tf.ones([3, 2, 3]), [2, 18, 2], 2, "SAME"), X1D),
            vg(tf, lambda y: tf.nn.conv3d_transpose(y, tf.ones([2, 2, 2, 3, 2]), [1, 10, 12, 14, 3], 2, "SAME"), X3D),
            vg(tf, lambda y: tf.nn.atrous_conv2d_transpose(y, tf.ones([3, 3, 2, 3]), [2, 6, 7, 2], 2, "SAME"), X2D),
            vg(tf, lambda x, dy: tf.nn.depthwise_conv2d_backprop_filter(x, [3, 3, 3, 2], dy, [1, 1, 1, 1], "SAME"),
               X2D, np.ones((2, 6, 7, 6), np.float32)),
            vg(tf, lambda dy: tf.nn.depthwise_conv2d_backprop_input([2, 6, 7, 3], tf.ones([3, 3, 3, 2]), dy,
                                                                      [1, 1, 1, 1], "SAME"), np.ones((2, 6, 7, 6), np.float32)),
            vg(tf, lambda x: tf.nn.separable_conv2d(x, tf.ones([3, 3, 3, 2]), tf.ones([1, 1, 6, 5]), [1, 1, 1, 1], "SAME"),
               X2D),
            # (tf.conv: values only; TF registers no gradient for its Conv op)
            tf.conv(X2D, tf.ones([3, 3, 3, 2]), [1, 1, 1, 1], "VALID"),
            tf.conv(X2D, W2D, [1, 2, 1, 1], "SAME", dilations=[1, 1, 2, 1]),
            tf.conv(X2D, W2D, [1, 1, 1, 1], "EXPLICIT", explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0]),
            tf.conv(tf.reshape(X2D, [1, 2, 6, 7, 3]), tf.ones([2, 2, 3, 1]), [1, 1, 1, 1], "VALID", batch_dims=2),
            raises(tf.conv, X2D, W2D, [1, 1, 1], "SAME"))


def _conv_oracle():
    """JAX's values for test_ops_without_tf_cpu_kernels: the V2 conv backprops as the VJPs of
    ``lax.conv_general_dilated`` (NHWC, HWIO, SAME, stride 1), with d sum / d inputs."""
    import jax
    import jax.numpy as jnp

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def filt(x, dy):
        return jax.vjp(lambda w: conv(x, w), jnp.zeros((3, 3, 3, 4), jnp.float32))[1](dy)[0]

    def inp(dy):
        return jax.vjp(lambda x: conv(x, jnp.ones((3, 3, 3, 4), jnp.float32)), jnp.zeros((2, 6, 7, 3), jnp.float32))[1](dy)[0]

    dy = np.ones((2, 6, 7, 4), np.float32)
    gf = jax.grad(lambda x, d: jnp.sum(filt(x, d)), argnums=(0, 1))(X2D, dy)
    gi = jax.grad(lambda d: jnp.sum(inp(d)))(dy)
    return ((A(np.asarray(filt(X2D, dy))), [A(np.asarray(gf[0])), A(np.asarray(gf[1]))]),
            (A(np.asarray(inp(dy))), [A(np.asarray(gi))]))


@parity(rtol=1e-4, atol=1e-3, tf_skip="TF 2.21 registers no CPU kernel for Conv2DBackprop*V2 and ApproxMinK",
        expected=(*_conv_oracle(), A(np.array([[1.0, 3.0]], np.float32)), A(np.array([[0, 2]], np.int32), "int32"),
                  A(np.array([[1.0]], np.float32)), A(np.array([[1.0, 2.0]], np.float32))))
def test_ops_without_tf_cpu_kernels(tf):
    """conv2d_backprop_filter_v2 / conv2d_backprop_input_v2 (values and gradients) against JAX's
    VJPs; approx_min_k / approx_top_k(is_max_k=False) against the exact answer (XLA's CPU one)."""
    dy = np.ones((2, 6, 7, 4), np.float32)
    x = tf.constant([[1.0, 5.0, 3.0]])
    return (vg(tf, lambda x, dy: tf.conv2d_backprop_filter_v2(x, tf.zeros([3, 3, 3, 4]), dy, [1, 1, 1, 1], "SAME"),
               X2D, dy),
            vg(tf, lambda dy: tf.conv2d_backprop_input_v2(tf.zeros([2, 6, 7, 3]), tf.ones([3, 3, 3, 4]), dy,
                                                           [1, 1, 1, 1], "SAME"), dy),
            *tf.math.approx_min_k(x, 2), tf.approx_top_k(x, 1, is_max_k=False).values,
            tf.nn.approx_min_k(tf.constant([[4.0, 2.0], [1.0, 3.0]]), 1, reduction_dimension=0).values)


@parity(rtol=1e-5, atol=1e-5)
def test_pool_nd(tf):
    """max_pool / avg_pool of rank 3, 4, 5 (SAME counts valid entries), 1-D and 3-D forms, and pool
    (MAX with strides; AVG with dilation and VALID)."""
    return (vg(tf, lambda x: tf.nn.max_pool(x, 2, 2, "SAME", data_format="NDHWC"), X3D),
            vg(tf, lambda x: tf.nn.avg_pool(x, 3, 2, "SAME", data_format="NDHWC"), X3D),
            vg(tf, lambda x: tf.nn.max_pool(x, 2, 2, "SAME"), X2D),
            vg(tf, lambda x: tf.nn.max_pool1d(x, 2, 2, "VALID"), X1D),
            vg(tf, lambda x: tf.nn.avg_pool1d(x, 3, 2, "SAME"), X1D),
            vg(tf, lambda x: tf.nn.max_pool3d(x, [1, 2, 2, 2, 1], [1, 1, 2, 2, 1], "VALID"), X3D),
            vg(tf, lambda x: tf.nn.avg_pool3d(x, 2, 1, "SAME"), X3D),
            vg(tf, lambda x: tf.nn.pool(x, [3], "MAX", strides=[2], padding="VALID"), X1D),
            vg(tf, lambda x: tf.nn.pool(x, [2, 2], "AVG", padding="VALID", dilations=[2, 2]), X2D))


# -- nn statistics and helpers ---------------------------------------------------------------------

XN = np.array([[[[1.0, -2.0, 3.0, 0.5], [0.2, 0.4, -1.0, 2.0]]]], np.float32)


@parity(rtol=1e-5, atol=1e-5)
def test_nn_statistics(tf):
    """sufficient_statistics (with a shift), normalize_moments, weighted_moments,
    compute_average_loss, scale_regularization_loss, crelu, local_response_normalization,
    batch_norm_with_global_normalization: values and gradients."""
    return (vg(tf, lambda x: tf.nn.sufficient_statistics(x, [1, 2])[:3], XN),
            vg(tf, lambda x: tf.nn.sufficient_statistics(x, [3], shift=0.5, keepdims=True), XN),
            vg(tf, lambda c, m, v: tf.nn.normalize_moments(c, m, v, None), 4.0, [2.0, 1.0], [10.0, 5.0]),
            vg(tf, lambda c, m, v: tf.nn.normalize_moments(c, m, v, 1.0), 4.0, [2.0, 1.0], [10.0, 5.0]),
            vg(tf, lambda x, w: tf.nn.weighted_moments(x, [3], w), XN, [[[[1.0, 2.0, 0.0, 1.0]]]]),
            vg(tf, tf.nn.compute_average_loss, [1.0, 2.0, 3.0]),
            vg(tf, lambda l: tf.nn.compute_average_loss(l, sample_weight=[1.0, 0.0, 2.0], global_batch_size=6),
               [1.0, 2.0, 3.0]),
            vg(tf, tf.nn.scale_regularization_loss, [1.0, 2.0]), vg(tf, tf.nn.crelu, [[1.0, -2.0]]),
            vg(tf, lambda x: tf.nn.local_response_normalization(x, 1, 1.0, 0.5, 0.75), XN), vg(tf, tf.nn.lrn, XN),
            vg(tf, lambda x: tf.nn.batch_norm_with_global_normalization(
                x, np.full(4, 0.5, np.float32), np.full(4, 2.0, np.float32), np.full(4, 0.1, np.float32),
                np.full(4, 3.0, np.float32), 0.001, True), XN))


@parity
def test_issue_named_aliases(tf):
    """asinh/acosh/atanh at the top level, nn.top_k, math.softmax / log_softmax, linalg.eye,
    math.accumulate_n, realdiv, parallel_stack (in a function; eagerly TF's RuntimeError), identity_n, tuple, guarantee_const."""
    x = tf.constant([0.5, -0.25])
    return (tf.asinh(x), tf.atanh(x), tf.acosh(x + 2.0), tf.nn.top_k(tf.constant([1.0, 3.0, 2.0]), 2).indices,
            tf.math.softmax(x), tf.math.log_softmax(x), tf.linalg.eye(2), tf.math.accumulate_n([x, x]),
            tf.realdiv(x, 2.0), tf.function(tf.parallel_stack)([x, x]), raises(tf.parallel_stack, [x, x]),
            tf.identity_n([x, x]), tf.tuple([x, None]), tf.guarantee_const(x))


@parity(modes=True)
def test_linspace_gradient_and_dropout_rate_tensor(tf):
    """linspace is differentiable in start and stop (num = 1 too); dropout takes a Tensor rate (its
    gradient w.r.t. the rate is sum(kept) / (1 - rate)^2: checked as an identity)."""
    a, b = tf.constant(0.0), tf.constant(1.0)
    a2, b2 = tf.constant([0.0, 1.0]), tf.constant([1.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([a, b, a2, b2])
        y1 = tf.reduce_sum(tf.linspace(a, b, 5) * tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]))
        y2 = tf.reduce_sum(tf.linspace(a2, b2, 4, axis=1) ** 2)
        y3 = tf.reduce_sum(tf.linspace(a, b, 1))
    r = tf.Variable(0.5)
    with tf.GradientTape() as t2:
        d = tf.nn.dropout(tf.ones([64]), rate=r, seed=1)
        s = tf.reduce_sum(d)
    g = t2.gradient(s, r)
    kept = float(tf.reduce_sum(tf.cast(d > 0, tf.float32)))
    return (t.gradient(y1, [a, b]), t.gradient(y2, [a2, b2]), t.gradient(y3, [a, b]),
            abs(float(g) - kept / 0.25) < 1e-3, d.dtype.name)


# -- random: explicit streams and stateless ops (TF's rules; the values differ) -----------------

@parity
def test_stateless_random_rules(tf):
    """The same seed gives the same values, another seed other values; shapes, dtypes, ranges; the
    integer full range; fold_in / split give seeds of shape [2] / [n, 2]."""
    def same(a, b):
        return bool(tf.reduce_all(tf.equal(a, b)))
    s, s2 = [1, 2], [1, 3]
    n1, n2, n3 = (tf.random.stateless_normal([50], s), tf.random.stateless_normal([50], s),
                  tf.random.stateless_normal([50], s2))
    u = tf.random.stateless_uniform([200], s, minval=-1.0, maxval=2.0)
    ui = tf.random.stateless_uniform([200], s, minval=0, maxval=5, dtype=tf.int32)
    tn = tf.random.stateless_truncated_normal([200], s)
    c = tf.random.stateless_categorical(tf.math.log([[0.5, 0.5, 0.0]]), 40, s, dtype=tf.int32)
    gm = tf.random.stateless_gamma([100], s, alpha=2.0)
    po = tf.random.stateless_poisson([100], s, lam=3.0)
    bi = tf.random.stateless_binomial([100], s, counts=10.0, probs=0.5)
    ptn = tf.random.stateless_parameterized_truncated_normal([100], s, means=0.0, stddevs=1.0, minvals=-0.5, maxvals=0.5)
    return (same(n1, n2), same(n1, n3), n1.dtype.name, float(tf.reduce_min(u)) >= -1.0, float(tf.reduce_max(u)) < 2.0,
            ui.dtype.name, int(tf.reduce_max(ui)) <= 4, float(tf.reduce_max(tf.abs(tn))) <= 2.0, c.shape.as_list(),
            int(tf.reduce_max(c)) <= 1, float(tf.reduce_min(gm)) > 0.0, po.dtype.name, int(tf.reduce_min(po)) >= 0,
            bi.dtype.name, int(tf.reduce_max(bi)) <= 10, float(tf.reduce_max(tf.abs(ptn))) <= 0.5,
            tf.random.fold_in(s, 7).shape.as_list(), tf.random.split(s, 3).shape.as_list(),
            tf.random.stateless_uniform([3], s, minval=None, maxval=None, dtype=tf.int32).dtype.name)


@parity
def test_parameterized_truncated_normal_takes_the_parameters_dtype(tf):
    """The draws have ``means``'s dtype (float16 included); a parameter of another dtype, or a
    bfloat16 one, is TF's InvalidArgumentError."""
    h = [tf.constant(v, tf.float16) for v in (0.0, 1.0, -1.0, 1.0)]
    v = tf.random.stateless_parameterized_truncated_normal([50], [1, 2], *h)
    b = [tf.constant(v, tf.bfloat16) for v in (0.0, 1.0, -1.0, 1.0)]
    return (v.dtype.name, bool(tf.reduce_all(tf.abs(v) <= 1.0)),
            raises(tf.random.stateless_parameterized_truncated_normal, [3], [1, 2], h[0], 1.0),
            raises(tf.random.stateless_parameterized_truncated_normal, [3], [1, 2], h[0], h[1], h[2], 1.0),
            raises(tf.random.stateless_parameterized_truncated_normal, [3], [1, 2], *b))


@parity
def test_generator_rules(tf):
    """Generator.from_seed: reproducible streams that advance; split gives independent generators;
    make_seeds gives [2, n] seeds; gamma / poisson shapes; global generator draws."""
    def same(a, b):
        return bool(tf.reduce_all(tf.equal(a, b)))
    g1, g2 = tf.random.Generator.from_seed(3), tf.random.Generator.from_seed(3)
    a, b = g1.normal([4]), g2.normal([4])
    c = g1.normal([4])
    kids = g1.split(2)
    u = g2.uniform([100], minval=2.0, maxval=3.0)
    ui = g2.uniform([100], minval=0, maxval=3, dtype=tf.int32)
    tn = g2.truncated_normal([100])
    tf.random.set_seed(5)
    gm = tf.random.gamma([3], [1.0, 2.0])
    po = tf.random.poisson([4], 3.0)
    return (same(a, b), same(a, c), len(kids), same(kids[0].normal([3]), kids[1].normal([3])),
            float(tf.reduce_min(u)) >= 2.0, float(tf.reduce_max(u)) < 3.0, ui.dtype.name, int(tf.reduce_max(ui)) <= 2,
            float(tf.reduce_max(tf.abs(tn))) <= 2.0, g1.make_seeds(3).shape.as_list(), gm.shape.as_list(),
            po.shape.as_list(), po.dtype.name, g1.state.dtype.is_integer, raises(g2.uniform, [2], dtype=tf.int32),
            tf.random.get_global_generator().normal([2]).shape.as_list())


# -- TF's Python conventions ---------------------------------------------------------------------

@parity
def test_numpy_scalars_and_protocol_errors(tf):
    """numpy() of a 0-d tensor is a NumPy scalar (of the tensor's dtype), of others an array; a float
    tensor as a list index or in range(), round() of a tensor, and a string next to a tensor raise
    TF's classes; an integer tensor is an index."""
    import operator
    f, i, v = tf.constant(1.5), tf.constant(1), tf.Variable(2.5)
    return (type(f.numpy()).__name__, type(tf.constant([1.0]).numpy()).__name__, type(i.numpy()).__name__,
            type(tf.constant(True).numpy()).__name__, type(v.numpy()).__name__, f.numpy(),
            [1, 2, 3][i], operator.index(i),
            raises(lambda: [1, 2, 3][f]), raises(lambda: range(f)), raises(round, f), raises(round, v),
            raises(lambda: f == "str"), raises(lambda: f != "s"), raises(lambda: f + "a"),
            raises(operator.index, v))


@parity(rtol=1e-4, atol=1e-5)
def test_top_level_linalg_aliases(tf):
    """tf.eig / tf.eigvals / tf.matrix_square_root / tf.scalar_mul / tf.dtypes.complex: TF's top-level
    and tf.dtypes names for the tf.linalg / tf.math ops."""
    m = tf.constant(SPD)
    return (tf.sort(tf.math.real(tf.eigvals(m))), tf.sort(tf.math.real(tf.eig(m)[0])), tf.matrix_square_root(m),
            vg(tf, lambda x: tf.scalar_mul(3.0, x), [1.0, 2.0]), tf.dtypes.complex(tf.constant([1.0]), tf.constant([2.0])))


@parity(modes=True)
def test_variable_scatter_methods(tf):
    """Variable.scatter_add / sub / mul / div / max / min / update (IndexedSlices), scatter_nd_add /
    sub / update / max / min, batch_scatter_update and sparse_read: the Variable after each, eagerly
    and inside a tf.function; duplicate indices accumulate for add."""
    def slices(vals, idx):
        return tf.IndexedSlices(tf.constant(vals), tf.constant(idx))
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = []
    for method, arg in (("scatter_add", slices([[1.0, 1.0], [2.0, 2.0]], [0, 0])),
                        ("scatter_sub", slices([[1.0, 0.5]], [2])), ("scatter_mul", slices([[2.0, 3.0]], [1])),
                        ("scatter_div", slices([[2.0, 4.0]], [1])), ("scatter_max", slices([[0.0, 9.0]], [2])),
                        ("scatter_min", slices([[-1.0, 9.0]], [0])), ("scatter_update", slices([[7.0, 8.0]], [1]))):
        getattr(v, method)(arg)
        out.append(v.numpy().copy())
    w = tf.Variable([1.0, 2.0, 3.0, 4.0])
    for method, upd in (("scatter_nd_add", [10.0, 20.0]), ("scatter_nd_sub", [1.0, 1.0]),
                        ("scatter_nd_update", [0.5, 0.25]), ("scatter_nd_max", [3.0, 0.0]), ("scatter_nd_min", [1.0, -2.0])):
        getattr(w, method)(tf.constant([[1], [3]]), tf.constant(upd))
        out.append(w.numpy().copy())
    b = tf.Variable([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b.batch_scatter_update(tf.IndexedSlices(tf.constant([[9.0], [8.0]]), tf.constant([[2], [0]])))
    out.append(b.numpy())
    out.append(v.sparse_read([2, 0]))

    u = tf.Variable([1.0, 2.0, 3.0])

    @tf.function
    def step(i, x):
        u.scatter_nd_add(tf.reshape(i, [1, 1]), tf.reshape(x, [1]))
        u.scatter_update(tf.IndexedSlices(tf.reshape(x * 2.0, [1]), tf.reshape(i + 1, [1])))
        return u.sparse_read([0, 1])
    out.append(step(tf.constant(0), tf.constant(5.0)))
    out.append(step(tf.constant(1), tf.constant(1.0)))
    out.append(u.numpy())
    return tuple(out)


@parity
def test_utilities(tf):
    """control_dependencies / group / no_op (eager: nothing), executing_eagerly and inside_function
    outside and inside a tf.function, is_symbolic_tensor, get_static_value, get_current_name_scope,
    the enums, TF's initializers (config round trip; random ones: shape, dtype, range, seed rule),
    tf.nest.assert_same_structure."""
    x = tf.constant([1.0, 2.0])
    seen = []

    @tf.function
    def f(t):
        seen.append((tf.executing_eagerly(), tf.inside_function(), tf.is_symbolic_tensor(t),
                     tf.get_static_value(t) is None))
        with tf.control_dependencies([t]):
            return t * 2.0
    y = f(x)
    with tf.control_dependencies([x]):
        z = x + 1.0
    with tf.name_scope("outer"):
        with tf.name_scope("inner"):
            scope = tf.get_current_name_scope()
    ru = tf.random_uniform_initializer(-0.5, 0.5, seed=3)([200])
    rn = tf.random_normal_initializer(1.0, 0.1, seed=3)([100], tf.float32)
    c = tf.constant_initializer([1.0, 2.0])
    return (y, z, tf.executing_eagerly(), tf.inside_function(), seen[0], tf.is_symbolic_tensor(x),
            tf.get_static_value(x), tf.get_static_value(tf.Variable([3])), tf.no_op(), tf.group(x, z),
            scope, tf.get_current_name_scope(), tf.VariableAggregation.SUM.name,
            tf.VariableSynchronization.ON_READ.name, tf.AggregationMethod.ADD_N,
            c([2]), c.get_config(), tf.zeros_initializer()([2, 1], tf.int32), tf.ones_initializer()([3]),
            ru.shape.as_list(), float(tf.reduce_min(ru)) >= -0.5, float(tf.reduce_max(ru)) < 0.5, rn.dtype.name,
            abs(float(tf.reduce_mean(rn)) - 1.0) < 0.05,
            bool(tf.reduce_all(tf.random_uniform_initializer(seed=4)([5]) == tf.random_uniform_initializer(seed=4)([5]))),
            tf.nest.assert_same_structure([1, (2, 3)], [4, (5, 6)]), raises(tf.nest.assert_same_structure, [1], [1, 2]),
            raises(tf.nest.assert_same_structure, [1, 2], (1, 2)), raises(tf.control_dependencies, 3),
            type(tf.get_logger()).__name__)


@parity
def test_collapse_repeated(tf):
    """nn.collapse_repeated: runs merged within each row's valid length, zero-padded to the longest
    result; a run crossing the length boundary; float labels; a length of 0."""
    return (tf.nn.collapse_repeated([[1, 1, 2, 2, 3], [4, 4, 4, 0, 0]], [5, 3]),
            tf.nn.collapse_repeated(tf.constant([[7, 7, 7, 1], [2, 3, 3, 3]]), tf.constant([2, 4])),
            tf.nn.collapse_repeated(tf.constant([[0.5, 0.5, 1.0]]), [3]),
            tf.nn.collapse_repeated([[1, 2], [3, 3]], [0, 2]))


XM = RNG.normal(size=(2, 5, 6, 2)).astype(np.float32)
WM = RNG.normal(size=(2, 3, 2)).astype(np.float32)


@parity(rtol=1e-5, atol=1e-5)
def test_dilation_erosion(tf):
    """nn.dilation2d / nn.erosion2d: SAME and VALID, strides, dilations; values and gradients (to
    the input and the filters); TF's errors."""
    return (vg(tf, lambda x, w: tf.nn.dilation2d(x, w, [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]), XM, WM),
            vg(tf, lambda x, w: tf.nn.dilation2d(x, w, [1, 2, 1, 1], "VALID", "NHWC", [1, 1, 2, 1]), XM, WM),
            vg(tf, lambda x, w: tf.nn.dilation2d(x, w, [1, 2, 2, 1], "SAME", "NHWC", [1, 2, 1, 1]), XM, WM),
            vg(tf, lambda x, w: tf.nn.erosion2d(x, w, [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]), XM, WM),
            vg(tf, lambda x, w: tf.nn.erosion2d(x, w, [1, 1, 2, 1], "VALID", "NHWC", [1, 2, 1, 1]), XM, WM),
            raises(tf.nn.dilation2d, XM, WM[..., :1], [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]))



BANDS = np.array([[1.5, 2.0, 3.0, -1.0], [4.0, 0.5, 6.0, 2.0], [0.3, -0.7, 1.1, 0.2]], np.float32)
BRHS = RNG.normal(size=(2, 4, 2)).astype(np.float32)
LOGM_IN = (np.array([[2.0, 1.0], [0.5, 3.0]], np.complex64), np.array([[0.0, 1.0], [-1.0, 0.0]], np.complex64),
           np.array([[1.0, 1.0], [0.0, 1.0]], np.complex64), np.array([[-1.0, 0.0], [0.0, 2.0]], np.complex64),
           (RNG.normal(size=(2, 3, 3)) + 1j * RNG.normal(size=(2, 3, 3)) + 3 * np.eye(3)).astype(np.complex64))


@parity(rtol=1e-4, atol=1e-5)
def test_banded_triangular_solve_and_logm(tf):
    """linalg.banded_triangular_solve (lower / upper, adjoint, rhs batch broadcast, the padding
    entries get zero gradient): values and gradients; linalg.logm of complex matrices (a rotation,
    a Jordan block, a negative eigenvalue, a batch), a singular one (NaN), no gradient (LookupError);
    the errors of both."""
    x = tf.constant(LOGM_IN[0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.math.real(tf.linalg.logm(x))
    return (vg(tf, lambda b, r: tf.linalg.banded_triangular_solve(b, r), BANDS, BRHS),
            vg(tf, lambda b, r: tf.linalg.banded_triangular_solve(b, r, lower=False), BANDS, BRHS),
            vg(tf, lambda b, r: tf.linalg.banded_triangular_solve(b, r, adjoint=True), BANDS[:2], BRHS[0]),
            vg(tf, lambda b, r: tf.linalg.banded_triangular_solve(b, r, lower=False, adjoint=True), BANDS, BRHS),
            [tf.linalg.logm(a) for a in LOGM_IN],
            tf.math.is_nan(tf.math.real(tf.linalg.logm(np.array([[0.0, 0.0], [0.0, 2.0]], np.complex64)))),
            raises(t.gradient, y, x),
            raises(tf.linalg.logm, np.eye(2, dtype=np.float32)), raises(tf.linalg.logm, np.ones((2, 3), np.complex64)),
            raises(tf.linalg.banded_triangular_solve, BANDS[0], BRHS), raises(tf.linalg.banded_triangular_solve,
                                                                            BANDS, BRHS[:, :3]),
            raises(tf.linalg.banded_triangular_solve, np.ones((2, 3), np.int32), np.ones((3, 1), np.int32)))


@parity(modes=True)
def test_variable_gather_nd_count_up_to_initial_value(tf):
    """``Variable.gather_nd`` (and its gradient through the read), ``count_up_to`` (the value before
    the increment; OutOfRangeError at the limit) and ``initial_value`` (RuntimeError eagerly)."""
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v.gather_nd([[0, 1], [1, 0]]) * tf.constant([2.0, 3.0]))
    c = tf.Variable(1)
    counts = [c.count_up_to(3), c.count_up_to(3)]
    return (y, tape.gradient(y, v), counts, c, raises(c.count_up_to, 3),
            raises(lambda: v.initial_value))
