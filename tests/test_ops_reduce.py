"""tapejax/ops/reduce.py: the gradient conventions of its clipping ops where TF's formula has a
tie (checked against TF 2.21's numbers)."""
import numpy as np
import pytest

import tapejax as tf


def _clip_global_grads(clip, use=None):
    """Value and gradients of ``sum(clipped * cotangents) + 0.5 * norm`` for
    ``clip_by_global_norm([[3, 0], [4]], clip, use_norm=use)`` (global norm 5)."""
    a, b = tf.constant([3.0, 0.0]), tf.constant([4.0])
    srcs = [a, b] if use is None else [a, b, tf.constant(use)]
    with tf.GradientTape() as t:
        t.watch(srcs)
        (ca, cb), n = tf.clip_by_global_norm([a, b], clip, use_norm=None if use is None else srcs[2])
        y = tf.reduce_sum(ca * [1.0, 2.0]) + tf.reduce_sum(cb * 3.0) + 0.5 * n
    return [y.numpy()] + [g.numpy() for g in t.gradient(y, srcs)]


@pytest.mark.parametrize("clip,use,want", [
    # norm == clip_norm: TF's ``minimum(1 / norm, 1 / clip_norm)`` gives the tie to the norm, so
    # the gradient is the projection's (a - a * (a . v) / |a|^2 with v the cotangents); JAX's
    # minimum would split it 0.5 / 0.5 ([0.4, 2.0], [2.2]).
    (5.0, None, [17.5, [-0.5, 2.0], [1.0]]),
    (5.0, 5.0, [17.5, [1.0, 2.0], [3.0], -2.5]),          # d/d use_norm: 0.5 - 15 / 5
    (2.0, 2.0, [16.0, [1.0, 2.0], [3.0], -7.0]),          # d/d use_norm: 0.5 - 15 / 2
    # away from the tie (unchanged): clipped, and passed through
    (4.0, None, [14.5, [-0.34, 1.6], [0.88]]),
    (6.0, None, [17.5, [1.3, 2.0], [3.4]]),
])
def test_clip_by_global_norm_at_the_tie_differentiates_through_the_norm_as_tf(clip, use, want):
    got = _clip_global_grads(clip, use)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def _max_min_grads(x, **kw):
    x = tf.constant(x)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        hi, lo = tf.reduce_max(x, **kw), tf.reduce_min(x, **kw)
    return hi.numpy(), t.gradient(hi, x).numpy(), lo.numpy(), t.gradient(lo, x).numpy()


@pytest.mark.parametrize("deferred", [True, False])
def test_reduce_max_min_of_empty_give_tfs_identities(deferred):
    """TF's Max / Min of nothing is -inf / inf (the integer extremes for ints), where jnp.max
    raised "zero-size array to reduction operation max which has no identity"."""
    prev = tf.set_deferred_execution(deferred)
    try:
        hi, ghi, lo, glo = _max_min_grads(np.zeros((0, 3), np.float32), axis=0)
        np.testing.assert_array_equal(hi, [-np.inf] * 3)
        np.testing.assert_array_equal(lo, [np.inf] * 3)
        assert ghi.shape == glo.shape == (0, 3)
        e = tf.zeros([0, 2], tf.int32)
        assert tf.reduce_max(e).numpy() == np.iinfo(np.int32).min
        np.testing.assert_array_equal(tf.reduce_min(e, axis=0).numpy(), [np.iinfo(np.int32).max] * 2)
        assert tf.reduce_logsumexp(tf.zeros([0])).numpy() == -np.inf
    finally:
        tf.set_deferred_execution(prev)


def test_reduce_max_min_gradient_is_nan_where_the_extreme_is_nan_and_split_at_ties():
    """TF's ``indicators / num_selected``: a NaN extreme equals no element, so every element of
    its row gets 0/0 = NaN (JAX's rule, once XLA made it a select, gave 0: a NaN loss with zero
    gradients); tied extremes share the gradient evenly (unchanged)."""
    hi, ghi, lo, glo = _max_min_grads(np.array([[np.nan, 1.0, 2.0], [3.0, 3.0, 1.0]], np.float32), axis=1)
    np.testing.assert_array_equal(hi, [np.nan, 3.0])
    np.testing.assert_array_equal(ghi, [[np.nan] * 3, [0.5, 0.5, 0.0]])
    np.testing.assert_array_equal(glo, [[np.nan] * 3, [0.0, 0.0, 1.0]])
    _, g, _, _ = _max_min_grads(np.array([2.0, 2.0, 2.0, 1.0], np.float32))
    np.testing.assert_allclose(g, [1 / 3, 1 / 3, 1 / 3, 0.0])


def test_argmax_argmin_pass_over_nan_as_tfs_kernel():
    """TF's CPU ArgMax / ArgMin compare with ``>`` / ``<``, so NaN never wins (an all-NaN row gives
    index 0); JAX's argmax picks the first NaN."""
    n, i = np.nan, np.inf
    m = tf.constant([[n, 1, n, -2], [n, n, n, n], [-i, n, -i, -i], [n, -i, n, 5], [3, n, 3, n]])
    np.testing.assert_array_equal(tf.argmax(m, axis=1).numpy(), [1, 0, 0, 3, 0])
    np.testing.assert_array_equal(tf.argmin(m, axis=1).numpy(), [3, 0, 0, 1, 0])
    np.testing.assert_array_equal(tf.argmax(m, axis=0).numpy(), [4, 0, 4, 3])


@pytest.mark.parametrize("fn", [tf.reduce_sum, tf.reduce_mean, tf.reduce_max, tf.reduce_min, tf.reduce_prod,
                                tf.math.cumsum, tf.math.cumprod])
def test_numeric_reductions_and_scans_of_bool_raise_tfs_error(fn):
    """TF registers Sum / Mean / Max / Min / Prod / Cumsum / Cumprod for the number types only: a bool
    tensor is an InvalidArgumentError (tapejax summed it as int32), on the fast path (no axis) and
    with an axis."""
    b = tf.constant([[True, False]])
    scan = fn in (tf.math.cumsum, tf.math.cumprod)
    for kw in ({}, {"axis": 1}) if scan else ({}, {"axis": 1}, {"axis": [0, 1], "keepdims": True}):
        with pytest.raises(tf.errors.InvalidArgumentError, match="bool"):
            fn(b, **kw)
    assert tf.reduce_any(b).numpy() and not tf.reduce_all(b).numpy()


def test_bincount_with_minlength_at_least_maxlength_in_a_function():
    """``tf.math.bincount(labels, minlength=C, maxlength=C)`` has length C whatever the values, so a
    compiled step counts classes (it read the values on the host: OperatorNotAllowedInGraphError);
    weights and ``binary_output`` too, values >= C dropped; a negative value is TF's
    InvalidArgumentError at run time.  Oracle: TF 2.21."""
    @tf.function
    def f(labels, w):
        return (tf.math.bincount(labels, minlength=4, maxlength=4),
                tf.math.bincount(labels, weights=w, minlength=5, maxlength=3),
                tf.math.bincount(labels, minlength=3, maxlength=3, binary_output=True))

    w = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])
    got = [t.numpy().tolist() for t in f(tf.constant([0, 2, 2, 1, 6]), w)]
    assert got == [[1, 1, 2, 0], [1.0, 4.0, 5.0], [1, 1, 1]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="non-negative"):
        f(tf.constant([0, -1, 2, 1, 6]), w)
    assert tf.math.bincount(tf.constant([0, 2, 2]), minlength=4, maxlength=4).numpy().tolist() == [1, 0, 2, 0]


def test_global_norms_of_mixed_float_dtypes_are_tfs_pack_error():
    """TF stacks the per-tensor norms, so ``global_norm`` / ``clip_by_global_norm`` of a float16 and
    a float32 gradient raise InvalidArgumentError (``Pack``: input #1 is not a half tensor) where
    tapejax summed them into a float32 norm; each dtype alone, and a given ``use_norm`` (TF casts
    the scale to each tensor's dtype), still work."""
    g16, g32 = tf.constant([3.0, 4.0], tf.float16), tf.constant([1.0, 2.0])
    for fn in (lambda: tf.linalg.global_norm([g16, g32]), lambda: tf.clip_by_global_norm([g16, None, g32], 5.0),
               lambda: tf.clip_by_global_norm([g32, g16], 1.0)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Pack as input #1\(zero-based\)"):
            fn()
    (c16,), n16 = tf.clip_by_global_norm([g16], 2.5)
    assert c16.dtype == tf.float16 and n16.dtype == tf.float16
    np.testing.assert_allclose(c16.numpy(), [1.5, 2.0], rtol=1e-3)
    (c16, c32), n = tf.clip_by_global_norm([g16, g32], 5.0, use_norm=tf.constant(10.0))
    assert (c16.dtype, c32.dtype, n.dtype) == (tf.float16, tf.float32, tf.float32)
    np.testing.assert_allclose(c32.numpy(), [0.5, 1.0])


def test_integer_sums_and_products_keep_their_dtype_under_x64():
    """TF's Sum and Prod of int8 / int32 / uint8 keep the input's dtype (an int8 sum wraps:
    100 + 100 is -56); ``jnp.sum`` gives the default integer, int64 under x64 (TF 2.21's values)."""
    import jax
    with jax.enable_x64(True):
        x = tf.constant([1, 2, 3])
        assert tf.reduce_sum(x).dtype == tf.int32 and tf.reduce_prod(x).dtype == tf.int32
        assert tf.reduce_sum(x, axis=0, keepdims=True).dtype == tf.int32
        s8 = tf.reduce_sum(tf.constant([100, 100], tf.int8))
        assert s8.dtype == tf.int8 and int(s8.numpy()) == -56
        assert tf.reduce_sum(tf.constant([1, 2], tf.uint8)).dtype == tf.uint8
        assert tf.function(lambda v: tf.reduce_sum(tf.cast(v > 1.0, tf.int32)))(tf.constant([1.0, 2.0, 3.0])).dtype == tf.int32
        assert tf.reduce_sum(tf.constant([1.0, 2.0], tf.float64)).dtype == tf.float64
def test_segment_sum_rejects_decreasing_ids_as_tfs_kernel():
    """``tf.math.segment_sum`` takes sorted ids: TF's kernel raises InvalidArgumentError ("segment
    ids are not increasing") where tapejax summed ``[1, 0, 1]`` as if unsorted; the other
    ``segment_*`` ops already checked.  Sorted ids with a gap give an empty (zero) segment."""
    with pytest.raises(tf.errors.InvalidArgumentError, match="not increasing"):
        tf.math.segment_sum(tf.constant([1.0, 2.0, 3.0]), tf.constant([1, 0, 1]))
    np.testing.assert_array_equal(tf.math.segment_sum(tf.constant([1.0, 2.0, 3.0]), tf.constant([0, 0, 2])).numpy(),
                                  [3.0, 0.0, 3.0])


def test_where_converts_a_python_value_with_the_other_tensors_dtype():
    """``tf.where(c, h, [5., 6.])`` of a float16 ``h`` is float16 as TF's (tapejax promoted to float32),
    either side; x64 keeps a float64 tensor's exact values."""
    import jax

    h = tf.constant([1.0, 2.0], tf.float16)
    c = tf.constant([True, False])
    r = tf.where(c, h, [5.0, 6.0])
    assert r.dtype == tf.float16
    np.testing.assert_array_equal(r.numpy(), np.float16([1.0, 6.0]))
    assert tf.where(c, 0.5, h).dtype == tf.float16
    with jax.enable_x64(True):
        r = tf.where(c, tf.constant([1.0, 2.0], tf.float64), [0.1, 0.1])
        np.testing.assert_array_equal(r.numpy(), [1.0, 0.1])
