"""tapejax/ops/sorting.py (and ``unique_with_counts`` in ops/layout.py): ``tf.unique``'s grouping
of NaN and signed zeros (TF 2.21's numbers)."""
import numpy as np

import tapejax as tf


def test_unique_keeps_every_nan_apart_and_a_groups_first_value_as_tf():
    """TF's Unique compares with ``==``: each NaN is a value of its own (NumPy's ``unique`` merged
    them, so ``y`` had 4 entries, not 5) and ``-0.0`` groups with ``0.0`` under the first one's
    sign; ``unique_with_counts`` the same, each NaN counted once."""
    x = tf.constant([-0.0, 0.0, 1.0, np.nan, 2.0, np.nan, 1.0])
    y, idx = tf.unique(x)
    np.testing.assert_array_equal(y.numpy(), [0.0, 1.0, np.nan, 2.0, np.nan])
    assert np.signbit(y.numpy()[0])
    np.testing.assert_array_equal(idx.numpy(), [0, 0, 1, 2, 3, 4, 1])
    y, idx, count = tf.unique_with_counts(x)
    np.testing.assert_array_equal(y.numpy(), [0.0, 1.0, np.nan, 2.0, np.nan])
    np.testing.assert_array_equal(idx.numpy(), [0, 0, 1, 2, 3, 4, 1])
    np.testing.assert_array_equal(count.numpy(), [2, 2, 1, 1, 1])
    y, idx = tf.unique(tf.constant([3, 1, 3, 2, 1]))
    np.testing.assert_array_equal(y.numpy(), [3, 1, 2])
    np.testing.assert_array_equal(idx.numpy(), [0, 1, 0, 2, 1])
