"""tapejax/ops/nn.py: TF's activation kernels at edge points (TF 2.21's numbers;
tests/parity/test_edge_points.py compares the whole sweep with TF)."""
import numpy as np

import tapejax as tf


def test_elu_selects_on_x_below_zero_as_tfs_kernel():
    """TF's Elu / EluGrad select on ``x < 0`` (``activations < 0``): at NaN the value is NaN and the
    gradient 1 (selecting on ``x > 0`` gave expm1'(NaN) = NaN), -0.0 stays -0.0, elu'(0) = 1 and
    elu'(-inf) = 0."""
    x = tf.constant([np.nan, -0.0, 0.0, -np.inf, -1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.nn.elu(x)
    np.testing.assert_array_equal(y.numpy(), [np.nan, -0.0, 0.0, -1.0, np.expm1(np.float32(-1.0)), 2.0])
    assert np.signbit(y.numpy()[1])
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [1.0, 1.0, 1.0, 0.0, np.exp(-1.0), 1.0], rtol=1e-6)


def test_sharded_embedding_lookup_gives_each_variable_shard_its_indexed_slices():
    """TF's sharded lookup (div strategy) gathers each shard at its own rows and stitches the
    results, so each Variable shard's gradient is an ``IndexedSlices`` of its rows in the ids'
    order (TF 2.21: rows [0, 1, 0] of the 3-row shard and [1, 0] of the 2-row one for ids
    [4, 0, 3, 1, 0]); tapejax gathered from the concatenated shards, a dense gradient."""
    a = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))
    b = tf.Variable(10 + np.arange(4, dtype=np.float32).reshape(2, 2))
    ids = tf.constant([[4, 0, 3], [1, 0, 0]])
    with tf.GradientTape() as t:
        e = tf.nn.embedding_lookup([a, b], ids)
        y = tf.reduce_sum(e * tf.reshape(tf.range(12.0), [2, 3, 2]))
    np.testing.assert_array_equal(e.numpy()[0], [[12, 13], [0, 1], [10, 11]])
    ga, gb = t.gradient(y, [a, b])
    assert isinstance(ga, tf.IndexedSlices) and isinstance(gb, tf.IndexedSlices)
    assert ga.indices.numpy().tolist() == [0, 1, 0, 0] and gb.indices.numpy().tolist() == [1, 0]
    np.testing.assert_array_equal(tf.convert_to_tensor(ga).numpy(), [[2 + 8 + 10, 3 + 9 + 11], [6, 7], [0, 0]])
    np.testing.assert_array_equal(tf.convert_to_tensor(gb).numpy(), [[4, 5], [0, 1]])
