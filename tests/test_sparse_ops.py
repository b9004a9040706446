"""``tapejax.ops.sparse_ops`` against TF 2.21's answers written out (TF's values for the rest:
tests/parity/test_sparse_tensor.py; the shape rule and traces: tests/test_sparse_tensor.py).

``tf.sparse.add`` of two SparseTensors is TF's ``SparseAdd`` merge: an entry of ``a`` meets at
most one entry of ``b`` at its index, so an index duplicated in one input (an edge list
symmetrised by concatenation) stays duplicated; tapejax summed all entries at an index into one.
"""
import numpy as np

import tapejax as tf


def _sp(indices, values):
    return tf.SparseTensor(np.array(indices, np.int64), np.array(values, np.float32), [3, 3])


def test_add_keeps_an_index_duplicated_in_one_input_as_tf():
    a = _sp([[0, 1], [0, 1], [1, 0], [2, 2]], [1.0, 2.0, 3.0, 4.0])
    b = _sp([[0, 1], [1, 1]], [10.0, 20.0])
    for x, y in ((a, b), (b, a)):
        c = tf.sparse.add(x, y)
        assert c.indices.numpy().tolist() == [[0, 1], [0, 1], [1, 0], [1, 1], [2, 2]]
        assert c.values.numpy().tolist() == [11.0, 2.0, 3.0, 20.0, 4.0]
    c = tf.sparse.add(a, tf.sparse.eye(3))
    assert c.indices.numpy().tolist() == [[0, 0], [0, 1], [0, 1], [1, 0], [1, 1], [2, 2]]
    assert c.values.numpy().tolist() == [1.0, 1.0, 2.0, 3.0, 1.0, 5.0]


def test_add_threshold_drops_only_sums():
    """TF's threshold applies to entries present in both inputs: an entry of one side below it
    stays (tapejax dropped every small value)."""
    a = _sp([[0, 1], [1, 0], [2, 2]], [1.0, 3.0, 4.0])
    b = _sp([[0, 1], [1, 1]], [-0.5, 20.0])
    c = tf.sparse.add(a, b, threshold=3.5)
    assert c.indices.numpy().tolist() == [[1, 0], [1, 1], [2, 2]]
    assert c.values.numpy().tolist() == [3.0, 20.0, 4.0]


def test_add_gradient_follows_each_entry_to_its_output():
    av, bv = tf.constant([1.0, 2.0, 3.0, 4.0]), tf.constant([-1.5, 20.0])
    with tf.GradientTape() as t:
        t.watch([av, bv])
        c = tf.sparse.add(tf.SparseTensor([[0, 1], [0, 1], [1, 0], [2, 2]], av, [3, 3]),
                          tf.SparseTensor([[0, 1], [1, 1]], bv, [3, 3]))
        loss = tf.reduce_sum(c.values * tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]))
    ga, gb = t.gradient(loss, [av, bv])
    assert ga.numpy().tolist() == [1.0, 2.0, 3.0, 5.0]   # (TF 2.21's)
    assert gb.numpy().tolist() == [1.0, 4.0]
