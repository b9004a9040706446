"""tapejax/ops/segment.py: unsorted_segment_max / min of infinite entries (TF 2.21's numbers)."""
import numpy as np

import tapejax as tf


def test_unsorted_segment_max_min_never_return_an_infinity_as_tf():
    """TF's kernel starts each segment from the lowest (highest) finite value, so a segment of -inf
    entries has max -3.4e38, not -inf (``x - max`` stays finite: a segment softmax over masked
    entries), and those entries get no gradient; the sorted segment_max gives -inf, as TF."""
    low, high = np.finfo(np.float32).min, np.finfo(np.float32).max
    x = tf.constant([-np.inf, -np.inf, 2.0, np.inf])
    ids = tf.constant([0, 1, 1, 2])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        hi, lo = tf.math.unsorted_segment_max(x, ids, 4), tf.math.unsorted_segment_min(-x, ids, 4)
    np.testing.assert_array_equal(hi.numpy(), [low, 2.0, np.inf, low])
    np.testing.assert_array_equal(lo.numpy(), [high, -2.0, -np.inf, high])
    np.testing.assert_array_equal(t.gradient(hi, x).numpy(), [0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(tf.math.segment_max(x, ids).numpy(), [-np.inf, 2.0, np.inf])
