"""tapejax.ops.sparse_sets against Python's sets (the oracle), on random dense and sparse
operands, and ``size`` compiled once inside a function."""
import numpy as np

import tapejax as tf


def _rows(sp, n):
    """A set result as one sorted list per row."""
    out = [[] for _ in range(n)]
    for (r, _), v in zip(sp.indices.numpy(), sp.values.numpy()):
        out[r].append(int(v))
    return out


def test_set_operations_match_python_sets():
    rs = np.random.RandomState(0)
    a = rs.randint(0, 6, (12, 5)).astype(np.int32)
    b = rs.randint(0, 6, (12, 4)).astype(np.int32)
    sb = tf.sparse.from_dense(tf.constant(b))   # zeros are absent from the sparse operand
    for name, op in (("intersection", set.__and__), ("union", set.__or__), ("difference", set.__sub__)):
        dense = getattr(tf.sets, name)(tf.constant(a), tf.constant(b))
        mixed = getattr(tf.sets, name)(tf.constant(a), sb)
        want_dense = [sorted(op(set(x), set(y))) for x, y in zip(a.tolist(), b.tolist())]
        want_mixed = [sorted(op(set(x), set(y) - {0})) for x, y in zip(a.tolist(), b.tolist())]
        assert _rows(dense, 12) == want_dense
        assert _rows(mixed, 12) == want_mixed
        assert dense.dense_shape.numpy().tolist() == [12, max(len(r) for r in want_dense)]
    sizes = tf.sets.size(tf.sparse.from_dense(tf.constant(a))).numpy()
    assert sizes.tolist() == [len(set(x) - {0}) for x in a.tolist()]


def test_size_in_a_function_compiles_once_and_reads_each_call():
    idx = tf.constant([[0, 0], [0, 1], [1, 0], [1, 2]], tf.int64)
    f = tf.function(lambda v: tf.sets.size(tf.SparseTensor(idx, v, [2, 3])))
    assert f(tf.constant([1, 1, 2, 3])).numpy().tolist() == [1, 2]
    assert f(tf.constant([1, 2, 2, 2])).numpy().tolist() == [2, 1]
    assert f.experimental_get_tracing_count() == 1
