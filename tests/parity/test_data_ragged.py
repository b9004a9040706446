"""RaggedTensors in tf.data against real TF: from_tensor_slices of a RaggedTensor (its rows, the
ragged_rank-0 spec), RaggedTensor elements through map, batch / unbatch of ragged components,
ragged_batch of variable-length dense elements (and batch's error for them), drop_remainder,
as_numpy_iterator's rows, and a bag-of-ids model fed by ragged_batch, trained a few steps."""
import numpy as np

from .harness import parity, raises


def rspec(s):
    """A (Ragged)TensorSpec as plain data: shape list, dtype, ragged_rank (None for a TensorSpec)."""
    if isinstance(s, dict):
        return {k: rspec(v) for k, v in s.items()}
    if isinstance(s, tuple):
        return tuple(rspec(v) for v in s)
    shape = None if s.shape is None else list(s.shape)
    return (shape, s.dtype.name, getattr(s, "ragged_rank", None), type(s).__name__)


def rows(tf, x):
    """An element (Tensor or RaggedTensor) as (kind, rows)."""
    if isinstance(x, tf.RaggedTensor):
        return ("ragged", x.to_list(), x.ragged_rank)
    return ("dense", x.numpy().tolist())


def _lists(n):
    return [list(range(i, i + (i % 3))) for i in range(n)]


@parity
def test_from_tensor_slices_of_ragged(tf):
    """Slicing a ragged_rank-1 RaggedTensor gives dense rows (spec RaggedTensorSpec ragged_rank 0);
    ragged_rank 2 gives RaggedTensors; in a dict next to a dense component."""
    rt = tf.ragged.constant([[1, 2], [3], [4, 5, 6]])
    r2 = tf.ragged.constant([[[1], [2, 3]], [[4]]])
    ds, ds2 = tf.data.Dataset.from_tensor_slices(rt), tf.data.Dataset.from_tensor_slices(r2)
    dd = tf.data.Dataset.from_tensor_slices({"ids": rt, "y": [1.0, 2.0, 3.0]})
    return (rspec(ds.element_spec), [rows(tf, x) for x in ds], rspec(ds2.element_spec), [rows(tf, x) for x in ds2],
            rspec(dd.element_spec), [(rows(tf, e["ids"]), e["y"]) for e in dd],
            [a.tolist() for a in ds.as_numpy_iterator()], int(ds.cardinality()))


@parity
def test_batch_and_unbatch_ragged(tf):
    """batch of ragged components adds a ragged dimension (remainder kept / dropped); unbatch gives
    the rows back; map over RaggedTensor batches (reduce over rows, elementwise math)."""
    ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1, 2], [3], [4, 5, 6], []]))
    b = ds.batch(3)
    bd = ds.batch(3, drop_remainder=True)
    m = ds.batch(2).map(lambda r: (tf.reduce_sum(r, axis=1), r * 2))
    return (rspec(b.element_spec), [rows(tf, x) for x in b], rspec(bd.element_spec), [rows(tf, x) for x in bd],
            [rows(tf, x) for x in b.unbatch()], [(s.numpy().tolist(), rows(tf, r)) for s, r in m],
            rspec(m.element_spec[0]))


@parity
def test_ragged_batch(tf):
    """ragged_batch: variable-length dense elements become RaggedTensors (unknown dimension first
    or inner), fully known ones stay dense, RaggedTensor elements gain a dimension; batch of the
    variable-length elements raises TF's InvalidArgumentError; a bad batch_size raises."""
    var = tf.data.Dataset.range(5).map(lambda x: tf.range(tf.cast(x, tf.int32)))
    inner = tf.data.Dataset.from_generator(lambda: (np.ones([n, 2], np.float32) * n for n in (1, 2, 3)),
                                           output_signature=tf.TensorSpec([None, 2], tf.float32))
    fixed = tf.data.Dataset.from_tensor_slices(([[1, 2], [3, 4], [5, 6]], [7, 8, 9]))
    rag = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[[1], [2, 3]], [[4]], [[5, 6]]]))

    def first_error(ds):
        try:
            list(ds)
            return None
        except Exception as e:  # noqa: BLE001
            return type(e).__name__
    return (rspec(var.ragged_batch(2).element_spec), [rows(tf, x) for x in var.ragged_batch(2)],
            [rows(tf, x) for x in var.ragged_batch(2, drop_remainder=True)],
            rspec(var.ragged_batch(2, drop_remainder=True).element_spec),
            rspec(inner.ragged_batch(2).element_spec), [rows(tf, x) for x in inner.ragged_batch(2)],
            rspec(fixed.ragged_batch(2).element_spec), [(rows(tf, a), rows(tf, b)) for a, b in fixed.ragged_batch(2)],
            rspec(rag.ragged_batch(2).element_spec), [rows(tf, x) for x in rag.ragged_batch(2)],
            first_error(var.batch(2)), raises(var.ragged_batch, 0),
            [a.tolist() if a.dtype != object else [r.tolist() for r in a] for a in var.ragged_batch(2).as_numpy_iterator()])


@parity
def test_padded_batch_of_ragged_is_refused(tf):
    """padded_batch of a RaggedTensor component: TF's TypeError."""
    ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[[1], [2, 3]], [[4]]]))
    return raises(ds.padded_batch, 2)


@parity(modes=True)
def test_bag_of_ids_model_fed_by_ragged_batch(tf):
    """Variable-length id lists, ragged_batch(4), an embedding-bag model (reduce_mean of gathered
    rows over the ragged axis) and a dense head, trained 2 epochs with SGD: same losses."""
    rng = np.random.RandomState(1)
    ids = [rng.randint(0, 8, size=rng.randint(1, 5)).astype(np.int32) for _ in range(10)]
    labels = rng.randn(10, 1).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((tf.ragged.constant([i.tolist() for i in ids]), labels)).ragged_batch(4)
    emb = tf.Variable(rng.randn(8, 3).astype(np.float32) * 0.5)
    w = tf.Variable(rng.randn(3, 1).astype(np.float32))
    losses = []
    for _ in range(2):
        for bag, y in ds:
            with tf.GradientTape() as tape:
                vecs = tf.ragged.map_flat_values(tf.gather, emb, bag)
                pred = tf.matmul(tf.reduce_mean(vecs, axis=1), w)
                loss = tf.reduce_mean((pred - y) ** 2)
            ge, gw = tape.gradient(loss, [emb, w])
            emb.assign_sub(0.2 * tf.convert_to_tensor(ge))
            w.assign_sub(0.2 * gw)
            losses.append(loss)
    return losses, emb, w


def _example(tf, **features):
    f = {}
    for k, v in features.items():
        if v and isinstance(v[0], float):
            f[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v))
        else:
            f[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=v))
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


def _ragged_records(tf):
    return [_example(tf, v=[1.0, 2.0, 3.0], lens=[2, 1], splits=[0, 2, 3], label=[1]),
            _example(tf, v=[4.0, 5.0], lens=[0, 2], splits=[0, 0, 2], label=[0]),
            _example(tf, lens=[], splits=[0], label=[1])]


def _out(tf, d):
    return {k: rows(tf, v) if isinstance(v, (tf.RaggedTensor, tf.Tensor)) else v for k, v in d.items()}


@parity
def test_ragged_feature_parse(tf):
    """RaggedFeature in parse_single_example / parse_example: no partitions (a Tensor for one
    Example), RowLengths / RowSplits / RowStarts / RowLimits / UniformRowLength partitions, a
    missing feature, row_splits_dtype, key order after the other features, validate=True's error."""
    F = tf.io.RaggedFeature
    e1, e2, e3 = _ragged_records(tf)
    lens = F(tf.float32, value_key="v", partitions=[F.RowLengths("lens")])
    one = tf.io.parse_single_example(e1, {"r": F(tf.float32, value_key="v"), "p": lens})
    batch = tf.io.parse_example([e1, e2, e3], {
        "r": F(tf.float32, value_key="v"), "s": F(tf.float32, value_key="v", partitions=[F.RowSplits("splits")]),
        "l": F(tf.float32, value_key="v", partitions=[F.RowLengths("lens")]),
        "label": tf.io.FixedLenFeature([], tf.int64)})
    other = tf.io.parse_example([e1, e2], {
        "u": F(tf.float32, value_key="v", partitions=[F.UniformRowLength(1)], row_splits_dtype=tf.int64),
        "st": F(tf.float32, value_key="v", partitions=[F.RowStarts("splits")], row_splits_dtype=tf.int64)})
    bad = _example(tf, v=[1.0, 2.0], lens=[1, 2])
    return (_out(tf, one), list(one), _out(tf, batch), list(batch), _out(tf, other),
            batch["l"].shape.as_list(), other["u"].shape.as_list(),
            raises(tf.io.parse_single_example, bad, {"r": F(tf.float32, value_key="v", partitions=[F.RowLengths("lens")],
                                                           validate=True)}),
            raises(tf.io.parse_example, [e1], {"r": F(tf.float32, value_key="v", partitions=[F.RowLengths("v")])}),
            raises(tf.io.parse_example, [e1], {"r": F(tf.int64, value_key="v")}),
            raises(tf.io.parse_example, [e1], {"label": tf.io.FixedLenFeature([], tf.int64),
                                               "w": F(tf.int64, value_key="label")}),
            raises(tf.io.parse_example, [e1], {"a": lens, "b": F(tf.float32, value_key="v", partitions=[
                F.RowLengths("lens")], row_splits_dtype=tf.int64)}))


@parity
def test_ragged_feature_in_a_pipeline(tf):
    """A TFRecord-like pipeline: serialized Examples, map(parse_single_example with a RaggedFeature),
    ragged_batch, and the rows' sums; and batch-then-parse with parse_example."""
    F = tf.io.RaggedFeature
    feats = {"r": F(tf.float32, value_key="v", partitions=[F.RowLengths("lens")]), "label": tf.io.FixedLenFeature([], tf.int64)}
    ds = tf.data.Dataset.from_tensor_slices(_ragged_records(tf))
    parsed = ds.map(lambda s: tf.io.parse_single_example(s, feats))
    batched = parsed.ragged_batch(2)
    out = [(rows(tf, b["r"]), tf.reduce_sum(b["r"].flat_values).numpy().tolist()) for b in batched]
    two = [_out(tf, b) for b in ds.batch(2).map(lambda s: tf.io.parse_example(s, feats))]
    return rspec(parsed.element_spec["r"]), out, rspec(batched.element_spec["r"]), two
