"""tapejax.ops.sparse_edit: the edit distance against a recursive definition, and the traced
path (a host callback inside a compiled step) against the eager one."""
import functools

import numpy as np

import tapejax as tf
from tapejax.ops.sparse_edit import distances


def _reference(a, b):
    """Levenshtein's recursive definition (the oracle)."""
    @functools.lru_cache(maxsize=None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
    return d(len(a), len(b))


def _sparse(rows):
    idx = [[r, k] for r, row in enumerate(rows) for k in range(len(row))]
    vals = [v for row in rows for v in row]
    return np.array(idx, np.int64).reshape(-1, 2), vals


def test_distances_match_the_recursive_definition():
    rs = np.random.RandomState(0)
    hyp = [list(rs.randint(0, 3, rs.randint(1, 7))) for _ in range(40)]
    truth = [list(rs.randint(0, 3, rs.randint(1, 7))) for _ in range(40)]
    (hi, hv), (ti, tv) = _sparse(hyp), _sparse(truth)
    raw = distances(hi, hv, ti, tv, (40,), False)
    norm = distances(hi, hv, ti, tv, (40,), True)
    want = np.array([_reference(tuple(t), tuple(h)) for h, t in zip(hyp, truth)], np.float32)
    np.testing.assert_array_equal(raw, want)
    np.testing.assert_allclose(norm, want / np.array([len(t) for t in truth], np.float32))


def test_traced_call_matches_the_eager_call_and_compiles_once():
    rs = np.random.RandomState(1)
    idx = tf.constant([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]], tf.int64)
    truth = tf.SparseTensor(idx, tf.constant([1, 2, 3, 4, 5]), [2, 3])

    @tf.function
    def cer(values):
        return tf.edit_distance(tf.SparseTensor(idx, values, [2, 3]), truth)

    for _ in range(3):
        v = tf.constant(rs.randint(0, 6, 5).astype(np.int32))
        eager = tf.edit_distance(tf.SparseTensor(idx, v, [2, 3]), truth)
        np.testing.assert_array_equal(cer(v).numpy(), eager.numpy())
    assert cer.experimental_get_tracing_count() == 1
