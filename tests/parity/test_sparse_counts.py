"""``tf.sparse.bincount``, ``cross_hashed`` and ``mask`` under TF and tapejax (a dense string
feature is a string Tensor for TF and a NumPy bytes array for tapejax, which keeps strings on the
host: ``_s``)."""
import numpy as np

from .harness import parity, raises


def _s(tf, rows):
    if tf.__name__.startswith("tensorflow"):
        return tf.constant(rows)
    return np.array(rows, object)


def _sp(sp):
    return (sp.indices, sp.values, sp.dense_shape)


@parity(x64=True)
def test_bincount(tf):
    """Over all values and per row, weights, binary output, minlength / maxlength, SparseTensor
    input, TF's errors."""
    v = tf.constant([[1, 2, 2], [0, 3, 3]])
    w = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    spv = tf.sparse.SparseTensor([[0, 0], [0, 2], [1, 1]], tf.constant([1, 4, 1]), [2, 3])
    b = tf.sparse.bincount
    return [_sp(x) for x in (b(v), b(v, axis=-1), b(v, weights=w, axis=-1), b(v, axis=-1, binary_output=True),
                             b(v, minlength=6), b(v, maxlength=2), b(spv, axis=-1), b(spv))] + [
        raises(b, tf.constant([-1, 2])), raises(b, v, axis=1), raises(b, v, weights=w, binary_output=True)]


@parity(x64=True)
def test_cross_hashed(tf):
    """Integer SparseTensors (several features per row: every combination, first input slowest),
    dense integer and string inputs, buckets, a hash key, full 63-bit hashes, rows with a missing
    feature giving no cross."""
    ints = tf.sparse.SparseTensor([[0, 0], [1, 0]], tf.constant([3, 4], tf.int64), [2, 1])
    strs = _s(tf, [[b"f"], [b"g"]])
    m = tf.sparse.SparseTensor([[0, 0], [0, 1], [1, 0]], tf.constant([1, 2, 3], tf.int64), [2, 2])
    n = tf.sparse.SparseTensor([[0, 0], [0, 1], [1, 0]], tf.constant([7, 8, 9], tf.int64), [2, 2])
    gap = tf.sparse.SparseTensor([[1, 0]], tf.constant([5], tf.int64), [2, 1])
    dense = tf.constant([[10, 11], [12, 13]], tf.int64)
    c = tf.sparse.cross_hashed
    return [_sp(x) for x in (c([ints, strs], num_buckets=1000), c([m, n]), c([m, n], num_buckets=17, hash_key=99),
                             c([m, gap, dense], num_buckets=50), c([strs, dense]))]


@parity
def test_mask_drops_the_masked_slices(tf):
    s = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([0, 3, 5]), tf.constant([6, 2]))
    m = tf.sparse.mask(s, tf.constant([3, 7]))
    return m.values, m.indices, m.dense_shape
