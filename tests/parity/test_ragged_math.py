"""The ops TF dispatches on RaggedTensor, against real TF: elementwise unary and binary math
(ragged + ragged, ragged + scalar / broadcastable dense, TF's errors), reductions over each axis
with TF's empty-row identities, tf.gather of rows and with ragged indices, tf.cast, tf.shape's
first entry, and gradients through flat_values: an embedding-bag model (reduce_mean of a
RaggedTensor of gathered embeddings) trained a few steps, deferral on and off."""
from .harness import parity, raises


def parts(tf, rt):
    """A RaggedTensor as comparable values (rows, dtype, shape, flat values)."""
    return rt.to_list(), rt.dtype.name, rt.shape.as_list(), rt.flat_values


def _rt(tf):
    return tf.RaggedTensor.from_row_splits([1.0, -2.0, 3.0, 4.0, 5.0], [0, 2, 2, 5])


@parity
def test_unary(tf):
    """Unary math maps flat_values: abs, sqrt of abs, exp, negation, tanh, logical_not; cast and
    identity keep the partition."""
    rt = _rt(tf)
    b = tf.ragged.constant([[True], [False, True]])
    return (parts(tf, tf.abs(rt)), parts(tf, tf.sqrt(tf.abs(rt))), parts(tf, tf.exp(rt)), parts(tf, -rt),
            parts(tf, abs(rt)), parts(tf, tf.math.tanh(rt)), parts(tf, tf.logical_not(b)), parts(tf, ~b),
            parts(tf, tf.cast(rt, tf.int32)), parts(tf, tf.identity(rt)), parts(tf, tf.nn.relu(rt)))


@parity
def test_binary(tf):
    """ragged op ragged (same partition), ragged op scalar, scalar op ragged, ragged op a dense
    [nrows, 1] / [1, 1] column, comparisons, and the tf.math functions."""
    rt = _rt(tf)
    same = tf.RaggedTensor.from_row_splits([10.0, 20.0, 30.0, 40.0, 50.0], [0, 2, 2, 5])
    col = tf.constant([[1.0], [2.0], [3.0]])
    return (parts(tf, rt + same), parts(tf, rt * same), parts(tf, same / rt), parts(tf, rt - 1.0),
            parts(tf, 2.0 * rt), parts(tf, 1.0 / rt), parts(tf, rt ** 2), parts(tf, rt + col),
            parts(tf, col - rt), parts(tf, rt * tf.constant([[2.0]])), parts(tf, rt > 2.0),
            parts(tf, rt == same / 10.0), parts(tf, tf.add(rt, same)), parts(tf, tf.maximum(rt, 0.0)),
            parts(tf, tf.math.divide(rt, 2.0)), parts(tf, tf.math.multiply(col, rt)),
            parts(tf, tf.math.squared_difference(rt, same)), parts(tf, rt // 2.0), parts(tf, rt % 3.0))


@parity
def test_binary_inner_dims(tf):
    """A dense operand over the uniform inner dimensions broadcasts (a [2] bias on [n, None, 2])."""
    rt = tf.RaggedTensor.from_row_lengths(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), [1, 2])
    return (parts(tf, rt + tf.constant([10.0, 20.0])), parts(tf, rt * tf.constant([[[2.0, 3.0]]])),
            parts(tf, rt + tf.constant([[[1.0, 1.0]], [[2.0, 2.0]]])))


@parity
def test_binary_errors(tf):
    """Different partitions: InvalidArgumentError; a dense operand that does not broadcast:
    InvalidArgumentError; dtype mismatch: TF's error."""
    rt = _rt(tf)
    other = tf.RaggedTensor.from_row_splits([1.0, 2.0, 3.0, 4.0, 5.0], [0, 1, 2, 5])
    return (raises(lambda: rt + other), raises(lambda: rt + tf.constant([1.0, 2.0])),
            raises(lambda: rt + tf.constant([[1.0], [2.0]])), raises(tf.add, rt, tf.ragged.constant([[1], [], [2, 3, 4]])))


@parity
def test_reductions(tf):
    """reduce_sum / mean / max / min / prod over the ragged axis (TF's identities for the empty
    row: 0, NaN, lowest, highest, 1), axis 0, axis None, keepdims, negative axes, int inputs."""
    rt = _rt(tf)
    ri = tf.ragged.constant([[1, 5], [], [3, 4, 2]])
    ops = (tf.reduce_sum, tf.reduce_mean, tf.reduce_max, tf.reduce_min, tf.reduce_prod)
    return ([op(rt, axis=1) for op in ops], [op(rt, axis=0) for op in ops], [op(rt) for op in ops],
            tf.reduce_sum(rt, axis=1, keepdims=True), tf.reduce_sum(rt, axis=-1), tf.reduce_sum(rt, axis=[0, 1]),
            tf.reduce_max(ri, axis=1), tf.reduce_min(ri, axis=1), tf.reduce_sum(ri, axis=1), tf.reduce_prod(ri, axis=0),
            tf.math.reduce_sum(rt, 1), raises(tf.reduce_sum, rt, axis=2))


@parity
def test_reductions_bool_and_inner(tf):
    """reduce_any / reduce_all over rows (empty row: False / True); reductions of a RaggedTensor with
    uniform inner dimensions over the ragged axis and over an inner axis (a RaggedTensor); the
    innermost axis of ragged_rank 2."""
    b = tf.ragged.constant([[True, False], [], [False, False]])
    rt = tf.RaggedTensor.from_row_lengths(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), [1, 0, 2])
    n = tf.ragged.constant([[[1.0, 2.0], [3.0]], [[4.0], []]])
    return (tf.reduce_any(b, axis=1), tf.reduce_all(b, axis=1), tf.reduce_sum(rt, axis=1), tf.reduce_mean(rt, axis=1),
            tf.reduce_max(rt, axis=1), parts(tf, tf.reduce_sum(rt, axis=2)), tf.reduce_sum(rt),
            parts(tf, tf.reduce_sum(n, axis=2)), parts(tf, tf.reduce_max(n, axis=-1)), tf.reduce_sum(n))


@parity
def test_gather_and_shape(tf):
    """tf.gather of rows (vector and scalar index, repeats, TF's out-of-range error), tf.gather of a
    dense table with ragged indices, tf.shape(rt)[0]."""
    rt = _rt(tf)
    table = tf.constant([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    ids = tf.ragged.constant([[0, 2], [], [1, 1, 0]])
    return (parts(tf, tf.gather(rt, [2, 0, 2])), tf.gather(rt, 2), parts(tf, tf.gather(table, ids)),
            raises(tf.gather, rt, [3]), tf.shape(rt)[0], parts(tf, tf.gather(rt, tf.constant([1]))))


@parity(modes=True)
def test_embedding_bag_training(tf):
    """reduce_mean(RaggedTensor.from_row_lengths(tf.gather(emb, ids), lens), axis=1) feeding a dense
    layer, trained 4 steps with SGD; the gradient of the embedding is TF's (IndexedSlices
    densified), and of a dense Tensor feeding flat_values through ragged + dense math."""
    import numpy as np
    rng = np.random.RandomState(0)
    emb = tf.Variable(rng.randn(6, 3).astype("float32"))
    w = tf.Variable(rng.randn(3, 1).astype("float32"))
    ids = tf.constant([0, 2, 5, 1, 1, 3, 4, 0])
    lens = tf.constant([3, 1, 4])
    y = tf.constant([[1.0], [0.0], [-1.0]])
    opt = tf.keras.optimizers.SGD(0.1) if hasattr(tf, "keras") else None
    losses = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            bag = tf.RaggedTensor.from_row_lengths(tf.gather(emb, ids), lens)
            pooled = tf.reduce_mean(bag, axis=1)
            loss = tf.reduce_mean((tf.matmul(pooled, w) - y) ** 2)
        ge, gw = tape.gradient(loss, [emb, w])
        ge = tf.convert_to_tensor(ge)
        emb.assign_sub(0.1 * ge)
        w.assign_sub(0.1 * gw)
        losses.append(loss)
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        r = tf.RaggedTensor.from_row_splits(x, [0, 1, 4])
        z = tf.reduce_sum(tf.reduce_max(r * tf.constant([[2.0], [3.0]]) + r, axis=1))
    del opt
    return losses, emb, w, tape.gradient(z, x)


@parity
def test_where(tf):
    """tf.where(c, x, y) with ragged condition and values (same partitions), a scalar and a dense
    [nrows, 1] column broadcast; different partitions raise InvalidArgumentError."""
    rt = _rt(tf)
    col = tf.constant([[10.0], [20.0], [30.0]])
    other = tf.RaggedTensor.from_row_splits([1.0, 2.0, 3.0, 4.0, 5.0], [0, 1, 2, 5])
    return (parts(tf, tf.where(rt > 2.0, rt, 0.0)), parts(tf, tf.where(rt > 2.0, rt, -rt)),
            parts(tf, tf.where(rt > 2.0, col, rt)), parts(tf, tf.where(rt < 0.0, 1.0, rt)),
            raises(tf.where, rt > 0.0, rt, other))


@parity
def test_variance_and_std(tf):
    """reduce_variance / reduce_std of a RaggedTensor over the ragged axis (NaN for an empty row),
    all axes, keepdims."""
    rt = tf.ragged.constant([[1.0, -2.0], [], [3.0, 5.0, 7.0]])
    return (tf.math.reduce_variance(rt, axis=1), tf.math.reduce_std(rt, axis=1), tf.math.reduce_variance(rt),
            tf.math.reduce_std(rt), tf.math.reduce_variance(rt, axis=1, keepdims=True))
