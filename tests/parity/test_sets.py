"""``tf.sets`` under TF 2.21 and tapejax: intersection, union and difference of dense and sparse
operands in each order (a dense row's zeros are members, a SparseTensor's absent entries are not),
both ``aminusb``, rank 3, empty results, int8-int64 / uint8 / uint16 and string values, ``size``
(eagerly and inside ``tf.function``), TF's index validation and errors; and a retrieval metric
(recall@k by ``top_k`` ids intersected with the relevant ids) between eager training steps."""
import numpy as np

from .harness import parity, raises


def _parts(tf, sp):
    """A SparseTensor as comparable values (int64 parts as int32, as tapejax holds them without
    JAX's 64-bit mode)."""
    return tf.cast(sp.indices, tf.int32), sp.values, tf.cast(sp.dense_shape, tf.int32)


@parity
def test_dense_and_sparse_operands(tf):
    """Dense-dense, sparse-dense, dense-sparse and sparse-sparse: intersection, union and both
    differences, with the dense rows' zeros as members."""
    a = tf.constant([[1, 2, 2, 3], [4, 5, 6, 0]])
    b = tf.constant([[2, 3, 7], [0, 0, 9]])
    sa, sb = tf.sparse.from_dense(a), tf.sparse.from_dense(b)
    out = []
    for x, y in ((a, b), (sa, b), (a, sb), (sa, sb)):
        out.append([_parts(tf, r) for r in (tf.sets.intersection(x, y), tf.sets.union(x, y),
                                            tf.sets.difference(x, y), tf.sets.difference(x, y, aminusb=False))])
    return out


@parity
def test_rank_three_empty_results_and_dtypes(tf):
    """Rank 3 groups, an empty intersection (last dense size 0), negative values sorted, a Python
    list operand."""
    r3 = tf.sets.union(tf.constant([[[1, 2], [3, 3]]]), tf.constant([[[2, 5], [1, 1]]]))
    empty = tf.sets.intersection(tf.constant([[1, 2]]), tf.constant([[3, 4]]))
    neg = tf.sets.union(tf.constant([[-1, 3]]), tf.constant([[-5, 3]]))
    lst = tf.sets.union(tf.constant([[1, 3]]), [[2]])
    return [_parts(tf, r) for r in (r3, empty, neg, lst)]


@parity(x64=True)
def test_value_dtypes_and_mixed_dtypes(tf):
    """int8 / int16 / int64 / uint8 / uint16 values keep their dtype; int64 with int32 is
    TypeError (64-bit mode on the tapejax side, where int64 is itself)."""
    typed = [tf.sets.union(tf.constant([[1, 4]], dt), tf.constant([[2, 1]], dt)) for dt in
             (tf.int8, tf.int16, tf.int64, tf.uint8, tf.uint16)]
    return ([(r.values, r.values.dtype.name) for r in typed],
            raises(tf.sets.union, tf.constant([[1]], tf.int64), tf.constant([[2]], tf.int32)))


@parity
def test_string_sets_of_sparse_tensors(tf):
    """String SparseTensors: the values sorted as bytes."""
    a = tf.SparseTensor([[0, 0], [0, 1], [1, 0]], ["cat", "ant", "bee"], [2, 2])
    b = tf.SparseTensor([[0, 0], [1, 0], [1, 1]], ["ant", "bee", "cow"], [2, 2])
    return ([tf.cast(r.indices, tf.int32) for r in (tf.sets.intersection(a, b), tf.sets.union(a, b), tf.sets.difference(a, b))],
            [r.values.numpy().tolist() if hasattr(r.values, "numpy") else [bytes(v) for v in r.values]
             for r in (tf.sets.intersection(a, b), tf.sets.union(a, b), tf.sets.difference(a, b))],
            tf.sets.size(a))


@parity
def test_size_eagerly_and_in_a_function(tf):
    """``size`` counts distinct present values per group (an empty group 0); inside a compiled
    function it reads each call's values."""
    sp = tf.SparseTensor([[0, 0], [2, 1]], tf.constant([5, 6]), [3, 2])
    s3 = tf.sparse.from_dense(tf.constant([[[1, 2, 2], [0, 0, 0]]]))
    f = tf.function(lambda v: tf.sets.size(tf.SparseTensor([[0, 0], [0, 1], [1, 0]], v, [2, 2])))
    return tf.sets.size(sp), tf.sets.size(s3), f(tf.constant([3, 3, 1])), f(tf.constant([3, 4, 1]))


@parity
def test_validation_and_errors(tf):
    """Out-of-order, repeated and out-of-bounds indices (InvalidArgumentError, unless
    ``validate_indices=False``), rank 1, float values (TypeError), a dense
    ``size`` (TypeError), mismatched group shapes."""
    unordered = tf.SparseTensor([[0, 1], [0, 0]], tf.constant([5, 6]), [1, 2])
    repeated = tf.SparseTensor([[0, 1], [0, 1]], tf.constant([5, 6]), [1, 2])
    return (raises(tf.sets.size, unordered), tf.sets.size(unordered, validate_indices=False),
            raises(tf.sets.size, repeated),
            raises(tf.sets.union, repeated, tf.constant([[1]])),
            tf.sets.union(unordered, tf.constant([[1]]), validate_indices=False).values,
            raises(tf.sets.size, tf.SparseTensor([[0, 3]], tf.constant([5]), [1, 2])),
            raises(tf.sets.size, tf.SparseTensor([[0]], tf.constant([5]), [1])),
            raises(tf.sets.union, tf.constant([1, 2]), tf.constant([1, 5])),
            raises(tf.sets.union, tf.constant([[1.0]]), tf.constant([[2.0]])),
            raises(tf.sets.size, tf.constant([[1, 2]])),
            raises(tf.sets.union, tf.constant([[1, 2]]), tf.constant([[1], [2]])),
            raises(tf.sets.union, tf.SparseTensor([[0, 0]], tf.constant([5]), [3, 2]),
                   tf.SparseTensor([[1, 0]], tf.constant([7]), [2, 1])))


@parity(modes=True, rtol=1e-5, atol=1e-6)
def test_recall_at_k_of_a_retrieval_model_between_steps(tf):
    """A linear scorer over 6 items trained 3 eager SGD steps (learning rate 3) on a softmax loss; after each, the
    recall@2 of its ``top_k`` ids against each query's relevant ids (padded with -1, removed by
    ``from_dense`` of ``ids + 1``): ``sets.size(sets.intersection(top, relevant)) / sets.size(relevant)``."""
    rs = np.random.RandomState(3)
    q = rs.randn(4, 3).astype(np.float32)
    rel = np.array([[0, 2], [5, -1], [1, 3], [4, -1]], np.int32)
    target = np.zeros((4, 6), np.float32)
    for i, row in enumerate(rel):
        target[i, row[row >= 0]] = 1.0 / (row >= 0).sum()
    w = tf.Variable(rs.randn(3, 6).astype(np.float32) * 0.3)
    relevant = tf.sparse.from_dense(tf.constant(rel + 1))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = tf.matmul(q, w)
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(target, logits))
        w.assign_sub(3.0 * tape.gradient(loss, w))
        top = tf.math.top_k(logits, k=2).indices + 1
        hits = tf.sets.size(tf.sets.intersection(top, relevant))
        out.append((loss, hits, tf.cast(hits, tf.float32) / tf.cast(tf.sets.size(relevant), tf.float32)))
    return out
