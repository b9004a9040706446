"""``tapejax.ops.nn_embedding_sparse`` inside ``tapejax.function`` (TF's values are checked in
tests/parity/test_embedding_sparse.py): the traced lookup has ``dense_shape[0]`` rows, equal to
the eager result with the trailing empty rows as zeros, and its gradient equals the eager one;
the safe variant, whose kept entries depend on the ids, raises ValueError in a trace."""
import numpy as np
import pytest

import tapejax as tf


def _sp():
    return tf.sparse.SparseTensor([[0, 0], [0, 1], [2, 0], [3, 2]], tf.constant([1, 3, 5, 2]), [6, 4])


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_traced_lookup_pads_to_the_dense_rows_and_differentiates_alike(combiner):
    params = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    sp = _sp()

    def loss_of(y):
        return tf.reduce_sum(y * tf.reshape(tf.range(tf.size(y), dtype=tf.float32), tf.shape(y)))

    with tf.GradientTape() as t:
        eager = tf.nn.embedding_lookup_sparse(params, sp, None, combiner=combiner)
        le = loss_of(eager)
    ge = tf.convert_to_tensor(t.gradient(le, params))

    @tf.function
    def step(s):
        with tf.GradientTape() as tape:
            y = tf.nn.embedding_lookup_sparse(params, s, None, combiner=combiner)
            loss = loss_of(y[:4])
        return y, tf.convert_to_tensor(tape.gradient(loss, params))

    y, g = step(sp)
    assert eager.shape == (4, 2) and y.shape == (6, 2)
    np.testing.assert_allclose(y.numpy()[:4], eager.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(y.numpy()[4:], 0)
    np.testing.assert_allclose(g.numpy(), ge.numpy(), rtol=1e-6)


def test_safe_lookup_needs_concrete_ids():
    params = tf.constant(np.ones((6, 2), np.float32))
    with pytest.raises(ValueError):
        tf.function(lambda s: tf.nn.safe_embedding_lookup_sparse(params, s))(_sp())


def _indices_and_dense(g):
    assert isinstance(g, tf.IndexedSlices)
    return g.indices.numpy().tolist(), tf.convert_to_tensor(g).numpy().tolist()


@pytest.mark.parametrize("weighted", [False, True])
def test_lookup_gradient_has_each_id_once_in_order_of_first_appearance(weighted):
    """TF looks the table up at ``tf.unique(ids)``: the gradient's indices are the distinct ids in
    order of first appearance (TF 2.21: [1, 4, 0, 2, 3] for ids [1, 1, 4, 0, 2, 4, 3]), each row
    summed over its entries (tapejax gave every entry's id, repeated)."""
    table = tf.Variable(np.arange(15, dtype=np.float32).reshape(5, 3))
    idx = [[0, 0], [0, 1], [0, 2], [1, 0], [2, 0], [2, 1], [3, 0]]
    ids = tf.sparse.SparseTensor(idx, tf.constant([1, 1, 4, 0, 2, 4, 3]), [4, 3])
    w = tf.sparse.SparseTensor(idx, tf.constant([1.0, 0.5, 2.0, 1.0, 0.3, 0.7, 3.0]), [4, 3]) if weighted else None
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(tf.nn.embedding_lookup_sparse(table, ids, w, combiner="sum") * tf.constant([[1.0, 2, 3]]))
    indices, dense = _indices_and_dense(t.gradient(loss, table))
    assert indices == [1, 4, 0, 2, 3]
    wv = [1.0, 0.5, 2.0, 1.0, 0.3, 0.7, 3.0] if weighted else [1.0] * 7
    per_id = {0: wv[3], 1: wv[0] + wv[1], 2: wv[4], 3: wv[6], 4: wv[2] + wv[5]}
    np.testing.assert_allclose(dense, [[per_id[i] * c for c in (1, 2, 3)] for i in range(5)], rtol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
def test_safe_lookup_gradient_orders_filled_rows_as_tf(weighted):
    """The safe lookup's filled empty rows take their place in row order, as TF's
    ``sparse_fill_empty_rows``: TF 2.21's indices [4, 3, 2, 5] unweighted and [4, 2, 5, 3] weighted
    (default_id 2; a negative id and a zero weight dropped)."""
    table = tf.Variable(np.arange(18, dtype=np.float32).reshape(6, 3))
    idx = [[0, 0], [0, 1], [2, 0], [3, 2], [3, 3]]
    sp = tf.sparse.SparseTensor(idx, tf.constant([4, 3, 5, -1, 3]), [5, 4])
    w = tf.sparse.SparseTensor(idx, tf.constant([1.0, 0.0, 2.0, 1.0, 1.0]), [5, 4]) if weighted else None
    with tf.GradientTape() as t:
        y = tf.nn.safe_embedding_lookup_sparse(table, sp, w, default_id=2)
        loss = tf.reduce_sum(y * tf.constant([[1.0, 2, 3]]))
    indices, dense = _indices_and_dense(t.gradient(loss, table))
    assert indices == ([4, 2, 5, 3] if weighted else [4, 3, 2, 5])
    want = [[0, 0, 0], [0, 0, 0], [2, 4, 6], [1, 2, 3], [1, 2, 3], [1, 2, 3]] if weighted else \
        [[0, 0, 0], [0, 0, 0], [2, 4, 6], [1.5, 3, 4.5], [0.5, 1, 1.5], [1, 2, 3]]
    np.testing.assert_allclose(dense, want, rtol=1e-6)
