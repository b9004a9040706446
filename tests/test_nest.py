"""tapejax/core/nest.py: ``tf.nest.map_structure`` over several structures (TF's
``map_structure(func, *structure)``; tapejax took one structure: TypeError), and its checks."""
import numpy as np
import pytest

import tapejax as tf


def test_map_structure_over_several_structures_pairs_their_leaves():
    """FedAvg's ``map_structure(lambda a, b: (a + b) / 2, w1, w2)`` over ``get_weights()`` lists."""
    a = [np.ones(2, np.float32), {"k": 3.0, "b": (1.0, 2.0)}]
    b = [np.full(2, 3.0, np.float32), {"k": 5.0, "b": (3.0, 4.0)}]
    out = tf.nest.map_structure(lambda p, q: (p + q) / 2, a, b)
    np.testing.assert_array_equal(out[0], [2.0, 2.0])
    assert out[1] == {"k": 4.0, "b": (2.0, 3.0)}
    assert tf.nest.map_structure(lambda p, q, r: p + q + r, (1, 2), (3, 4), (5, 6)) == (9, 12)
    assert tf.nest.map_structure(lambda v: v * 2, [1, (2,)]) == [2, (4,)]


def test_map_structure_checks_the_structures_as_tf():
    with pytest.raises(ValueError):
        tf.nest.map_structure(lambda p, q: p, [1, 2], [1, 2, 3])
    with pytest.raises(TypeError):
        tf.nest.map_structure(lambda p, q: p, [1, 2], (1, 2))
    assert tf.nest.map_structure(lambda p, q: p + q, [1, 2], (1, 2), check_types=False) == [2, 4]
    with pytest.raises(ValueError):
        tf.nest.map_structure(lambda: 0)
