"""tapejax/ops/nn_extra.py: ``tf.nn.weighted_moments`` where the weights sum to 0 (TF 2.21's numbers)."""
import numpy as np

import tapejax as tf


def test_weighted_moments_with_zero_weights_are_zero_as_tfs_div_no_nan():
    """TF divides by the weights' sum with div_no_nan: a row whose weights are all 0 has mean and
    variance 0 and zero gradients (1 / sum gave NaN); the other rows are unchanged."""
    x = tf.constant([[1.0, 2.0], [3.0, 5.0]])
    w = tf.constant([[0.0, 0.0], [1.0, 0.0]])
    with tf.GradientTape() as t:
        t.watch([x, w])
        mean, var = tf.nn.weighted_moments(x, axes=[1], frequency_weights=w)
        y = tf.reduce_sum(mean) + tf.reduce_sum(var)
    np.testing.assert_array_equal(mean.numpy(), [0.0, 3.0])
    np.testing.assert_array_equal(var.numpy(), [0.0, 0.0])
    gx, gw = t.gradient(y, [x, w])
    np.testing.assert_array_equal(gx.numpy(), [[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(gw.numpy(), [[0.0, 0.0], [0.0, 6.0]])


class _FourReplicas:
    """A stand-in strategy with 4 replicas (this process has one device)."""

    num_replicas_in_sync = 4


def _average_loss_in_replica_context(losses, **kw):
    from tapejax.core import distribution

    mode = distribution.Mode(_FourReplicas(), object())
    distribution.push(mode)
    try:
        return tf.nn.compute_average_loss(tf.constant(losses), **kw).numpy()
    finally:
        distribution.pop(mode)


def test_compute_average_loss_of_a_partial_batch_split_unevenly_over_four_replicas():
    """TF 2.21 splits a last global batch of 6 over 4 replicas as 2, 2, 2, 0 (per-replica
    ``ceil(6 / 4)``) and each replica divides its sum by its batch size times 4: (1+2)/8 +
    (3+4)/8 + (5+6)/8 (a whole-batch division by 6 gave 3.5).  13 examples: 4, 4, 4, 1."""
    np.testing.assert_allclose(_average_loss_in_replica_context([1.0, 2, 3, 4, 5, 6]), 21 / 8, rtol=1e-6)
    x = np.arange(1.0, 14.0, dtype=np.float32)
    want = x[:12].sum() / 16 + x[12] / 4
    np.testing.assert_allclose(_average_loss_in_replica_context(x), want, rtol=1e-6)
    # an even split, a given global batch size and per-example rows of rank 2 are unchanged
    np.testing.assert_allclose(_average_loss_in_replica_context([1.0, 2, 3, 4, 5, 6, 7, 8]), 36 / 8, rtol=1e-6)
    np.testing.assert_allclose(_average_loss_in_replica_context([1.0, 2, 3, 4, 5, 6], global_batch_size=16),
                               21 / 16, rtol=1e-6)
    np.testing.assert_allclose(_average_loss_in_replica_context([[1.0, 1.0]] * 6), 12 / 8, rtol=1e-6)
