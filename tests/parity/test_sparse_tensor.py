"""tf.SparseTensor and tf.sparse against real TF: construction and its errors, every op of
tf.sparse tapejax has (values, entry order, shapes), gradients with respect to values and dense
operands (None for indices), TF's eager validation errors, SparseTensors through tf.function, and
tf.io.VarLenFeature through a TFRecord pipeline (parse, batch, densify) feeding an embedding-sum
model trained with Adam.  Indices and dense shapes are compared as int32 (tapejax holds int64 as
int32 without JAX's 64-bit mode)."""
import os

import numpy as np

from .data_helpers import tmp
from .harness import A, parity, raises


def parts(tf, sp):
    """A SparseTensor as comparable values (int64 parts as int32)."""
    return (tf.cast(sp.indices, tf.int32), sp.values, tf.cast(sp.dense_shape, tf.int32), sp.shape.as_list())


def _sp(tf, dtype="float32"):
    """Unordered entries of a 3x4 tensor."""
    return tf.SparseTensor([[1, 0], [0, 2], [2, 3], [0, 0]], tf.constant([1.0, 2.0, -3.0, 4.0], dtype), [3, 4])


def _ordered(tf):
    return tf.sparse.reorder(_sp(tf))


@parity
def test_construction_and_attributes(tf):
    """indices / values / dense_shape / dtype / shape / spec / from_value / tf.sparse.SparseTensor."""
    sp = tf.sparse.SparseTensor([[0, 1], [2, 0]], [1.5, 2.5], [3, 2])
    spec = tf.type_spec_from_value(sp)
    return (parts(tf, sp), sp.dtype.name, sp.get_shape().as_list(), spec.shape.as_list(), spec.dtype.name,
            spec == tf.SparseTensorSpec([3, 2], tf.float32), parts(tf, tf.SparseTensor.from_value(sp)),
            isinstance(sp, tf.SparseTensor), raises(lambda: sp.op))


@parity
def test_construction_errors(tf):
    """Rank and length mismatches are ValueError at construction; float indices TypeError."""
    return (raises(tf.SparseTensor, [0, 1], [1.0, 2.0], [3, 4]),
            raises(tf.SparseTensor, [[0, 0], [1, 2]], [1.0, 2.0, 3.0], [3, 4]),
            raises(tf.SparseTensor, [[0, 0], [1, 2]], [1.0, 2.0], [3, 4, 5]),
            raises(tf.SparseTensor, [[0, 0], [1, 2]], [[1.0], [2.0]], [3, 4]),
            raises(tf.SparseTensor, [[0.5, 0], [1, 2]], [1.0, 2.0], [3, 4]))


@parity
def test_not_a_dense_tensor(tf):
    """is_tensor is True, convert_to_tensor refuses (ValueError), tf.shape is the dense shape."""
    sp = _sp(tf)
    return tf.is_tensor(sp), raises(tf.convert_to_tensor, sp), tf.shape(sp)


@parity
def test_to_dense_and_from_dense(tf):
    """to_dense (default value), from_dense's row-major entries, eye."""
    sp = _ordered(tf)
    d = tf.constant([[0, 1, 0], [2, 0, 3]])
    return (tf.sparse.to_dense(sp), tf.sparse.to_dense(sp, default_value=7.0), parts(tf, tf.sparse.from_dense(d)),
            parts(tf, tf.sparse.eye(3, 4)), tf.sparse.to_dense(tf.sparse.eye(2, dtype=tf.int32)))


@parity
def test_to_dense_validation(tf):
    """to_dense validates indices eagerly: out of order, out of bounds, repeated (unless told not to)."""
    return (raises(tf.sparse.to_dense, _sp(tf)),
            raises(tf.sparse.to_dense, tf.SparseTensor([[5, 0]], [1.0], [3, 4])),
            raises(tf.sparse.to_dense, tf.SparseTensor([[0, 0], [0, 0]], [1.0, 2.0], [3, 4])),
            tf.sparse.to_dense(_sp(tf), validate_indices=False))


@parity
def test_reorder_reshape_transpose_expand(tf):
    """reorder, reshape (with -1), transpose (reordered), expand_dims (axis 0 and -1)."""
    sp = _sp(tf)
    return (parts(tf, tf.sparse.reorder(sp)), parts(tf, tf.sparse.reshape(sp, [2, -1])),
            parts(tf, tf.sparse.reshape(sp, [12])), parts(tf, tf.sparse.transpose(sp)),
            parts(tf, tf.sparse.expand_dims(sp, 0)), parts(tf, tf.sparse.expand_dims(sp, -1)),
            raises(tf.sparse.reshape, sp, [5, 3]))


@parity
def test_slice_retain_fill_empty_rows(tf):
    """slice (clipped to the shape), retain, fill_empty_rows (sorted by row, the indicator)."""
    sp = _sp(tf)
    filled, empty = tf.sparse.fill_empty_rows(tf.SparseTensor([[3, 1], [1, 0]], [5.0, 6.0], [5, 2]), -1.0)
    return (parts(tf, tf.sparse.slice(sp, [0, 1], [5, 5])), parts(tf, tf.sparse.slice(sp, [1, 0], [1, 1])),
            parts(tf, tf.sparse.retain(sp, [True, False, True, False])), parts(tf, filled), empty,
            raises(tf.sparse.retain, sp, [True]))


@parity
def test_concat(tf):
    """concat along each axis, expand_nonconcat_dims, and TF's errors."""
    a, b = _ordered(tf), tf.SparseTensor([[0, 1], [1, 0]], [9.0, 8.0], [2, 4])
    c = tf.SparseTensor([[0, 0]], [5.0], [2, 2])
    return (parts(tf, tf.sparse.concat(0, [a, b])), parts(tf, tf.sparse.concat(-1, [a, a])),
            parts(tf, tf.sparse.concat(1, [a, c], expand_nonconcat_dims=True)),
            raises(tf.sparse.concat, 1, [a, c]),
            raises(tf.sparse.concat, 0, [a, tf.SparseTensor([[0, 0]], [1], [1, 4])]))


@parity
def test_add(tf):
    """sparse + sparse (merged, row-major; threshold), sparse + dense, and shape errors."""
    a = _ordered(tf)
    b = tf.SparseTensor([[0, 0], [1, 1], [2, 3]], [1.0, 1.0, 3.0], [3, 4])
    return (parts(tf, tf.sparse.add(a, b)), parts(tf, tf.sparse.add(a, b, threshold=0.5)),
            tf.sparse.add(a, tf.ones([3, 4])), tf.sparse.add(tf.ones([3, 4]), a),
            raises(tf.sparse.add, a, tf.SparseTensor([[0, 0]], [1.0], [3, 5])))


@parity
def test_reductions(tf):
    """reduce_sum / reduce_max: all, per axis, keepdims, output_is_sparse (max over present entries)."""
    a = _ordered(tf)
    return (tf.sparse.reduce_sum(a), tf.sparse.reduce_sum(a, axis=1), tf.sparse.reduce_sum(a, axis=0, keepdims=True),
            tf.sparse.reduce_sum(a, axis=[0, 1]), parts(tf, tf.sparse.reduce_sum(a, axis=1, output_is_sparse=True)),
            tf.sparse.reduce_max(a), tf.sparse.reduce_max(a, axis=1), tf.sparse.reduce_max(a, axis=0),
            parts(tf, tf.sparse.reduce_max(a, axis=0, output_is_sparse=True)))


@parity
def test_sparse_dense_matmul(tf):
    """sp @ b with each adjoint, unordered entries, and the inner-dimension error."""
    sp = _sp(tf)
    b = tf.reshape(tf.range(8.0), [4, 2])
    return (tf.sparse.sparse_dense_matmul(sp, b), tf.sparse.sparse_dense_matmul(sp, tf.transpose(b), adjoint_b=True),
            tf.sparse.sparse_dense_matmul(sp, tf.ones([3, 2]), adjoint_a=True),
            raises(tf.sparse.sparse_dense_matmul, sp, tf.ones([3, 2])))


@parity
def test_elementwise(tf):
    """map_values, sp * dense (broadcast), sp / dense, sp * scalar, minimum / maximum, softmax,
    to_indicator."""
    a = _ordered(tf)
    b = tf.SparseTensor([[0, 0], [1, 1], [2, 3]], [1.0, 1.0, 3.0], [3, 4])
    ids = tf.SparseTensor([[0, 0], [0, 1], [1, 0]], [3, 1, 2], [2, 2])
    return (parts(tf, tf.sparse.map_values(tf.square, a)), parts(tf, tf.sparse.map_values(tf.add, a, a)),
            parts(tf, a * tf.constant([1.0, 2.0, 3.0, 4.0])), parts(tf, a / tf.fill([3, 4], 2.0)), parts(tf, a * 3.0),
            parts(tf, tf.sparse.maximum(a, b)), parts(tf, tf.sparse.minimum(a, b)), parts(tf, tf.sparse.softmax(a)),
            tf.sparse.to_indicator(ids, 4))


@parity
def test_split_reset_shape_and_segment_reductions(tf):
    """split (uneven sizes), reset_shape (tightest, larger, smaller refused), segment_sum / mean /
    sqrt_n (with and without num_segments, their errors) and segment_mean's gradient."""
    s = tf.SparseTensor([[0, 0], [0, 3], [1, 1], [2, 4]], [1.0, 2.0, 3.0, 4.0], [3, 5])
    c = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.sparse.segment_mean(c, [0, 2, 0], [0, 0, 1]) ** 2)
    return ([parts(tf, x) for x in tf.sparse.split(sp_input=s, num_split=2, axis=1)],
            [parts(tf, x) for x in tf.sparse.split(sp_input=s, num_split=2, axis=0)],
            parts(tf, tf.sparse.reset_shape(s)), parts(tf, tf.sparse.reset_shape(s, [4, 6])),
            raises(tf.sparse.reset_shape, s, [2, 6]),
            tf.sparse.segment_sum(c, [0, 2, 1], [0, 0, 1]), tf.sparse.segment_sum(c, [0, 2, 1], [0, 0, 2], num_segments=4),
            tf.sparse.segment_mean(c, [0, 2, 1], [0, 0, 2]), tf.sparse.segment_sqrt_n(c, [0, 2, 1], [0, 0, 2]),
            raises(tf.sparse.segment_sum, c, [0, 2, 1], [1, 0, 0]), raises(tf.sparse.segment_sum, c, [0, 5, 1], [0, 0, 1]),
            t.gradient(y, c))


@parity
def test_unary_ops_dispatch_on_values(tf):
    """The zero-preserving unary ops TF dispatches (abs, negative, square, sqrt, sin, sign, tanh,
    erf, atan, asin, tan, asinh, atanh), cast and identity map the values; exp (f(0) != 0) and
    relu refuse a SparseTensor (ValueError); the values' gradient flows through."""
    a = _ordered(tf)
    ops = [tf.abs, tf.negative, tf.math.square, tf.math.sin, tf.math.sign, tf.math.tanh, tf.math.erf, tf.math.atan,
           tf.math.tan, tf.math.asinh]
    small = tf.sparse.map_values(lambda v: v / 10.0, a)
    v = tf.Variable([1.0, -2.0])
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.abs(tf.SparseTensor([[0, 0], [1, 1]], v * 3.0, [2, 2])).values)
    return ([parts(tf, f(a)) for f in ops], parts(tf, tf.math.sqrt(tf.abs(a))), parts(tf, tf.math.asin(small)),
            parts(tf, tf.math.atanh(small)), parts(tf, tf.cast(a, tf.int32)), parts(tf, tf.identity(a)),
            raises(tf.exp, a), raises(tf.nn.relu, a), t.gradient(y, v))


@parity
def test_gradients_wrt_values_and_dense(tf):
    """Gradients through to_dense, sparse_dense_matmul (values and b), reductions, add, map_values,
    reorder, slice, softmax, fill_empty_rows (values and default); None for indices."""
    v = tf.Variable([1.0, 2.0, -3.0, 4.0])
    b = tf.Variable(tf.reshape(tf.range(8.0), [4, 2]))
    dflt = tf.Variable(0.5)
    ind = tf.constant([[1, 0], [0, 2], [2, 3], [0, 0]], tf.int64)
    with tf.GradientTape(persistent=True) as t:
        sp = tf.SparseTensor(ind, v * 1.0, [3, 4])
        o = tf.sparse.reorder(sp)
        losses = {
            "to_dense": tf.reduce_sum(tf.sparse.to_dense(o) ** 2),
            "matmul": tf.reduce_sum(tf.sparse.sparse_dense_matmul(sp, b) ** 2),
            "reduce_sum": tf.reduce_sum(tf.sparse.reduce_sum(sp, axis=0) ** 2),
            "add": tf.reduce_sum(tf.sparse.add(o, o).values ** 2) + tf.reduce_sum(tf.sparse.add(o, b[:3, :1] * tf.ones([3, 4])) ** 2),
            "map": tf.reduce_sum(tf.sparse.map_values(tf.sin, sp).values * tf.constant([1.0, 2.0, 3.0, 4.0])),
            "slice": tf.reduce_sum(tf.sparse.slice(sp, [0, 0], [2, 4]).values * tf.constant([3.0, 5.0, 7.0])),
            "softmax": tf.reduce_sum(tf.sparse.softmax(o).values * tf.range(4.0)),
            "fill": tf.reduce_sum(tf.sparse.fill_empty_rows(
                tf.SparseTensor([[2, 0]], v[:1], [4, 2]), dflt)[0].values * tf.range(4.0)),
        }
    return {k: t.gradient(loss, [v, b, dflt, sp.indices]) for k, loss in losses.items()}


@parity(tapejax_expected=[A(np.float32([2.0, 8.0])), A(np.float32([1.0, 0.0, 1.0, 0.0]))],
        deliberate="TF registers no gradient for SparseConcat (None); tapejax's concat is a recorded "
                   "concatenation and reorder of the values, so the tape differentiates it")
def test_concat_gradient_is_given(tf):
    """The values' gradient through tf.sparse.concat."""
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        a = tf.SparseTensor([[0, 0], [1, 1]], v * 1.0, [2, 2])
        c = tf.sparse.concat(1, [a, a])
        loss = tf.reduce_sum(c.values * tf.constant([1.0, 1.0, 4.0, 4.0]))
    return [t.gradient(loss, v), tf.sparse.to_dense(c)[0]]


@parity
def test_sparse_tensor_through_function(tf):
    """A SparseTensor argument and result of tf.function; its values' gradient inside the function."""
    w = tf.Variable(tf.ones([4, 2]))

    @tf.function
    def step(sp):
        with tf.GradientTape() as t:
            y = tf.reduce_sum(tf.sparse.sparse_dense_matmul(sp, w) ** 2)
        return y, t.gradient(y, w), tf.sparse.transpose(sp), tf.sparse.to_dense(sp)

    y, g, tr, d = step(_ordered(tf))
    y2 = step(tf.SparseTensor([[0, 1]], [2.0], [3, 4]))[0]
    return y, g, parts(tf, tr), d, y2


def _example(tf, ids, label):
    f = {"ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
         "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label]))}
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


ROWS = [([3, 1, 4], 1.0), ([], 0.0), ([7], 2.0), ([2, 2, 5, 9], -1.0), ([8, 1], 0.5)]


def _records(tf):
    path = os.path.join(tmp(), "ids.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for ids, label in ROWS:
            w.write(_example(tf, ids, label))
    return path


FEATURES = ("ids", "label")


def _features(tf):
    return {"ids": tf.io.VarLenFeature(tf.int64), "label": tf.io.FixedLenFeature([], tf.float32)}


@parity
def test_var_len_feature_parse(tf):
    """VarLenFeature in parse_single_example / parse_example / parse_sequence_example's context."""
    recs = [_example(tf, ids, label) for ids, label in ROWS]
    one = tf.io.parse_single_example(recs[0], _features(tf))
    empty = tf.io.parse_single_example(recs[1], _features(tf))
    batch = tf.io.parse_example(recs, _features(tf))
    seq = tf.train.SequenceExample(context=tf.train.Features(feature={
        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[5, 6]))})).SerializeToString()
    ctx = tf.io.parse_sequence_example([seq, seq], context_features={"ids": tf.io.VarLenFeature(tf.int64)})[0]
    return (parts(tf, tf.sparse.map_values(tf.cast, one["ids"], tf.int32)), parts(tf, empty["ids"])[2:],
            parts(tf, tf.sparse.map_values(tf.cast, batch["ids"], tf.int32)), batch["label"],
            parts(tf, tf.sparse.map_values(tf.cast, ctx["ids"], tf.int32)),
            raises(tf.io.parse_single_example, _example(tf, [1], 0.0), {"label": tf.io.VarLenFeature(tf.int64)}))


def _mixed(tf):
    f = {"a": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
         "b": tf.train.Feature(int64_list=tf.train.Int64List(value=[2, 0])),
         "c": tf.train.Feature(int64_list=tf.train.Int64List(value=[4])),
         "e": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5, 1.5]))}
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


@parity
def test_sparse_feature_and_key_order(tf):
    """SparseFeature (sorted entries, already_sorted, two index keys, a batch, no bounds check,
    the length mismatch error) and TF's key order: VarLen keys, then fixed, then SparseFeatures."""
    s = _mixed(tf)
    feats = {"d": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0]), "c": tf.io.VarLenFeature(tf.int64),
             "a": tf.io.FixedLenFeature([1], tf.float32), "sp": tf.io.SparseFeature("b", "e", tf.float32, 3)}
    one, batch = tf.io.parse_single_example(s, feats), tf.io.parse_example([s, s], feats)
    two = tf.io.parse_single_example(s, {"sp": tf.io.SparseFeature(["b", "b"], "e", tf.float32, [3, 3])})["sp"]
    kept = tf.io.parse_single_example(s, {"sp": tf.io.SparseFeature("b", "e", tf.float32, 1, already_sorted=True)})
    seq = tf.train.SequenceExample(context=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
        "w": tf.train.Feature(int64_list=tf.train.Int64List(value=[5]))})).SerializeToString()
    ctx = tf.io.parse_single_sequence_example(seq, context_features={
        "x": tf.io.FixedLenFeature([1], tf.float32), "w": tf.io.VarLenFeature(tf.int64)})[0]
    return (list(one), list(batch), list(ctx), parts(tf, one["sp"]), parts(tf, batch["sp"]), parts(tf, two),
            parts(tf, kept["sp"]),
            raises(tf.io.parse_single_example, s, {"sp": tf.io.SparseFeature("c", "e", tf.float32, 3)}))


@parity
def test_var_len_dataset_batches(tf):
    """TFRecordDataset -> parse (VarLenFeature) -> batch -> to_dense, and unbatch: specs and values."""
    ds = tf.data.TFRecordDataset(_records(tf)).map(lambda s: tf.io.parse_single_example(s, _features(tf)))
    spec1 = ds.element_spec["ids"]
    batched = ds.batch(2)
    spec2 = batched.element_spec["ids"]
    dense = batched.map(lambda d: tf.cast(tf.sparse.to_dense(d["ids"]), tf.int32))
    rows = batched.unbatch()
    return ((spec1.shape.as_list(), spec2.shape.as_list(), dense.element_spec.shape.as_list(),
             rows.element_spec["ids"].shape.as_list()),
            [parts(tf, tf.sparse.map_values(tf.cast, d["ids"], tf.int32)) for d in batched], list(dense),
            [parts(tf, tf.sparse.map_values(tf.cast, d["ids"], tf.int32)) for d in rows])


@parity
def test_from_tensor_slices_and_batch(tf):
    """from_tensor_slices of a SparseTensor gives its rows; batching them back (TF's dense shape rule)."""
    sp = tf.SparseTensor([[0, 1], [2, 0], [2, 2], [3, 1]], [1.0, 2.0, 3.0, 4.0], [4, 3])
    ds = tf.data.Dataset.from_tensor_slices(sp)
    return (ds.element_spec.shape.as_list(), [parts(tf, r) for r in ds], [parts(tf, b) for b in ds.batch(3)],
            ds.batch(3).element_spec.shape.as_list())


@parity(modes=True, rtol=1e-5, atol=1e-6)
def test_embedding_sum_model_trained_on_var_len_features(tf):
    """The common program: variable-length id lists from TFRecords, batched, densified, an
    embedding-sum (masked) regression trained 3 steps with Adam: losses and weights as TF's."""
    ds = (tf.data.TFRecordDataset(_records(tf))
          .map(lambda s: tf.io.parse_single_example(s, _features(tf)))
          .batch(2)
          .map(lambda d: (tf.sparse.to_dense(d["ids"]), tf.sparse.to_dense(
              tf.sparse.map_values(tf.ones_like, d["ids"])), d["label"])))
    emb = tf.Variable(tf.reshape(tf.range(40.0), [10, 4]) / 40.0)
    w = tf.Variable([[0.5], [-0.25], [0.1], [0.3]])
    opt = tf.keras.optimizers.Adam(0.1)
    losses = []
    for ids, mask, label in ds.take(3):
        with tf.GradientTape() as t:
            e = tf.nn.embedding_lookup(emb, tf.cast(ids, tf.int32))
            pooled = tf.reduce_sum(e * tf.cast(mask, tf.float32)[..., None], axis=1)
            pred = tf.squeeze(tf.matmul(pooled, w), -1)
            loss = tf.reduce_mean((pred - label) ** 2)
        grads = t.gradient(loss, [emb, w])
        opt.apply_gradients(zip(grads, [emb, w]))
        losses.append(loss)
    return losses, emb, w
