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
