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


def test_unsorted_segment_ops_take_segment_ids_of_any_prefix_of_the_data_shape():
    """TF's ``segment_ids`` may be any prefix of ``data``'s shape (one sentence id per token of a
    ``[batch, time]`` tensor); JAX's segment ops take 1-D ids, so both are flattened (the 2-D ids
    raised a broadcasting ValueError).  TF 2.21's numbers, the gradient a gather of the weights."""
    d = tf.Variable(np.arange(24, dtype=np.float32).reshape(3, 4, 2))
    ids = tf.constant([[0, 0, 1, 2], [1, 1, 1, 0], [2, 2, 2, 2]])
    with tf.GradientTape() as t:
        s = tf.math.unsorted_segment_sum(d, ids, 3)
        y = tf.reduce_sum(s * tf.constant([[1.0], [2.0], [3.0]]))
    np.testing.assert_array_equal(s.numpy(), [[16.0, 19.0], [34.0, 38.0], [82.0, 87.0]])
    np.testing.assert_array_equal(t.gradient(y, d).numpy()[..., 0], [[1, 1, 2, 3], [2, 2, 2, 1], [3, 3, 3, 3]])
    np.testing.assert_array_equal(tf.math.unsorted_segment_max(d, ids, 3).numpy(), [[14, 15], [12, 13], [22, 23]])
    np.testing.assert_allclose(tf.math.unsorted_segment_mean(d[..., 0], ids, 4).numpy(),
                               [16 / 3, 8.5, 16.4, 0.0], rtol=1e-6)
    f = tf.function(lambda x: tf.math.unsorted_segment_sum(x, ids, 3))
    np.testing.assert_array_equal(f(d).numpy(), s.numpy())
