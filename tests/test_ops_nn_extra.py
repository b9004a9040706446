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
