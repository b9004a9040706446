"""TFRecord files and tf.train.Example against real TF: files written by ``tf.io.TFRecordWriter``
(plain, GZIP, ZLIB, options objects and the string shorthand) have the same bytes on both sides
and each side reads the other's; ``tf.data.TFRecordDataset`` (several files, parallel reads,
batches); ``tf.train.Example`` / ``SequenceExample`` serialize to the same bytes and parse back;
``tf.io.parse_single_example`` / ``parse_example`` (fixed and sequence features, defaults, string
features, example names) eagerly and inside ``Dataset.map``; a program (an image-classification
dataset written as Examples, read, parsed, batched and fed to a softmax classifier); and every bad
input: corrupted and truncated records, the wrong compression, a closed writer, missing, mistyped
and misshapen features, bad configurations."""
import os

import numpy as np

from .data_helpers import L, card, fit_and_evaluate, spec, tmp
from .harness import parity, raises

RECORDS = [b"hello", b"", b"x\x00" * 40, bytes(range(256)) * 3, b"\x00\x00"]


def _np(x):
    """Parse results as the user reads them: TF's string tensors' ``.numpy()`` (bytes, object
    arrays) are tapejax's host strings; numeric results stay tensors (dtype compared)."""
    if isinstance(x, dict):
        return {k: _np(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_np(v) for v in x)
    if getattr(getattr(x, "dtype", None), "name", None) == "string":
        return x.numpy()
    return x


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _write(tf, path, records, options=None):
    with tf.io.TFRecordWriter(path, options) as w:
        for r in records:
            w.write(r)
    return path


def _written_by(module_name, d):
    """Files written by ``module_name`` (tensorflow or tapejax) in ``d``: plain, GZIP, ZLIB."""
    import importlib
    mod = importlib.import_module(module_name)
    return [_write(mod, os.path.join(d, f"{module_name}-{c or 'plain'}.tfrecord"), RECORDS, c)
            for c in ("", "GZIP", "ZLIB")]


@parity
def test_tfrecord_files_same_bytes(tf):
    """The same records and options give the same file bytes under TF and tapejax."""
    d = tmp()
    plain = _write(tf, os.path.join(d, "a.tfrecord"), RECORDS)
    gz = _write(tf, os.path.join(d, "b.tfrecord.gz"), RECORDS, "GZIP")
    zl = _write(tf, os.path.join(d, "c.tfrecord.z"), RECORDS, tf.io.TFRecordOptions(compression_type="ZLIB"))
    level = _write(tf, os.path.join(d, "d.tfrecord.gz"), RECORDS * 3,
                   tf.io.TFRecordOptions("GZIP", compression_level=9))
    w = tf.io.TFRecordWriter(os.path.join(d, "e.tfrecord"))
    w.write("text")   # (a str is written as UTF-8)
    w.flush()
    w.write(b"more")
    w.close()
    w.close()   # (again: nothing)
    return (_read(plain), _read(gz), _read(zl), _read(level), _read(os.path.join(d, "e.tfrecord")),
            tf.io.TFRecordOptions.get_compression_type_string("GZIP"),
            tf.io.TFRecordOptions.get_compression_type_string(None),
            tf.io.TFRecordOptions.get_compression_type_string(tf.io.TFRecordOptions("ZLIB")))


@parity
def test_tfrecord_dataset_reads_both_writers(tf):
    """Files written by TF and by tapejax, read by each side's TFRecordDataset."""
    d = tmp()
    tf_files = _written_by("tensorflow", d)
    tj_files = _written_by("tapejax", d)
    T = tf.data.TFRecordDataset
    out = []
    for files in (tf_files, tj_files):
        out.append((L(T(files[0])), L(T(files[1], compression_type="GZIP")), L(T(files[2], "ZLIB"))))
    ds = T([tf_files[0], tj_files[0]])
    return (out, spec(ds.element_spec), card(ds), L(T([tf_files[0], tj_files[0]], num_parallel_reads=2)),
            L(T(tf.data.Dataset.list_files(os.path.join(d, "*-plain.tfrecord"), shuffle=False), buffer_size=100)),
            L(ds.batch(3)), spec(ds.batch(3).element_spec), L(ds.batch(4).unbatch().take(3)))


@parity
def test_data_experimental_tfrecord_writer(tf):
    d = tmp()
    p = os.path.join(d, "w.tfrecord")
    tf.data.experimental.TFRecordWriter(p).write(tf.data.experimental.from_list([b"a", b"\x00b", b""]))
    q = os.path.join(d, "w.tfrecord.gz")
    tf.data.experimental.TFRecordWriter(q, "GZIP").write(tf.data.TFRecordDataset(p))
    return _read(p), _read(q), L(tf.data.TFRecordDataset(q, "GZIP"))


def _corrupt(data, how):
    d = bytearray(data)
    if how == "length crc":
        d[8] ^= 1
    elif how == "data crc":
        d[13] ^= 1
    elif how == "later data":
        d[21 + 16 + 12 + 3] ^= 1   # (the third record's data)
    elif how == "truncated data":
        del d[-3:]
    elif how == "partial header":
        del d[-(12 + 2 + 4 + 5):]   # (leaves 5 bytes of the last header)
    elif how == "extra byte":
        d.extend(b"\x01")
    return bytes(d)


@parity
def test_tfrecord_bad_files(tf):
    """Corruptions give DataLossError when read (a header cut short ends the file, as TF)."""
    d = tmp()
    good = _read(_write(tf, os.path.join(d, "good.tfrecord"), RECORDS))
    out = []
    for how in ("length crc", "data crc", "later data", "truncated data", "partial header", "extra byte"):
        p = os.path.join(d, how.replace(" ", "_"))
        with open(p, "wb") as f:
            f.write(_corrupt(good, how))
        out.append(raises(lambda: L(tf.data.TFRecordDataset(p))))
        out.append(raises(lambda: L(tf.data.TFRecordDataset(p).take(1))))
    gz = _write(tf, os.path.join(d, "g.tfrecord.gz"), RECORDS, "GZIP")
    out.append(raises(lambda: L(tf.data.TFRecordDataset(gz))))               # (read as uncompressed)
    out.append(raises(lambda: L(tf.data.TFRecordDataset(gz, "ZLIB"))))       # (the wrong header)
    out.append(raises(lambda: L(tf.data.TFRecordDataset(os.path.join(d, "missing.tfrecord")))))
    out.append(raises(tf.data.TFRecordDataset, 5))
    out.append(raises(lambda: L(tf.data.TFRecordDataset(os.path.join(d, "good.tfrecord"), num_parallel_reads=0))))
    out.append(raises(lambda: L(tf.data.TFRecordDataset(os.path.join(d, "good.tfrecord"), buffer_size=-5))))
    out.append(L(tf.data.TFRecordDataset(os.path.join(d, "good.tfrecord"), buffer_size=1)))
    out.append(L(tf.data.TFRecordDataset(os.path.join(d, "good.tfrecord"), buffer_size=0)))
    return out


@parity
def test_tfrecord_writer_bad_input(tf):
    d = tmp()
    w = tf.io.TFRecordWriter(os.path.join(d, "w.tfrecord"))
    w.close()
    return (raises(w.write, b"a"), raises(w.flush), raises(tf.io.TFRecordWriter, os.path.join(d, "x"), "BZ2"),
            raises(tf.io.TFRecordOptions, compression_type="gzip"),
            raises(tf.io.TFRecordWriter, os.path.join(d, "no", "such", "dir", "x.tfrecord")),
            raises(lambda: tf.io.TFRecordWriter(os.path.join(d, "y")).write(5), ok=("TypeError",)))


# -- tf.train.Example -----------------------------------------------------------------------

def _example(tf, i=0):
    t = tf.train
    return t.Example(features=t.Features(feature={
        "f": t.Feature(float_list=t.FloatList(value=[1.5 + i, -2.0])),
        "i": t.Feature(int64_list=t.Int64List(value=[3 * i, -4, 2 ** 40])),
        "s": t.Feature(bytes_list=t.BytesList(value=[b"ab", b"\x00c"])),
        "seq": t.Feature(float_list=t.FloatList(value=list(np.arange(2 * (i + 1), dtype=np.float32)))),
        "empty": t.Feature(),
    }))


@parity
def test_example_messages_same_bytes(tf):
    t = tf.train
    ex = _example(tf)
    data = ex.SerializeToString()
    back = t.Example.FromString(data)
    again = t.Example()
    again.ParseFromString(data)
    seq = t.SequenceExample(
        context=t.Features(feature={"id": t.Feature(int64_list=t.Int64List(value=[7]))}),
        feature_lists=t.FeatureLists(feature_list={"tokens": t.FeatureList(feature=[
            t.Feature(int64_list=t.Int64List(value=[1, 2])), t.Feature(bytes_list=t.BytesList(value=[b"w"]))])}))
    sdata = seq.SerializeToString()
    return (data, back == ex, again.SerializeToString(), list(back.features.feature["f"].float_list.value),
            list(back.features.feature["i"].int64_list.value), back.features.feature["empty"].WhichOneof("kind"),
            sorted(back.features.feature.keys()), sdata, t.SequenceExample.FromString(sdata) == seq,
            t.Feature(int64_list=t.Int64List(value=[1])).SerializeToString(), t.Example().SerializeToString())


def _features(tf, string="string"):
    return {"f": tf.io.FixedLenFeature([2], tf.float32), "i": tf.io.FixedLenFeature([3], tf.int64),
            "s": tf.io.FixedLenFeature([2], string), "d": tf.io.FixedLenFeature([], tf.float32, default_value=7.0),
            "dd": tf.io.FixedLenFeature([2, 1], tf.int64, default_value=[[5], [6]]),
            "seq": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True),
            "none": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True),
            "sd": tf.io.FixedLenFeature([], string, default_value="dflt")}


@parity(x64=True)
def test_parse_single_example_and_batch(tf):
    data = [_example(tf, i).SerializeToString() for i in range(3)]
    F = _features(tf)
    one = tf.io.parse_single_example(data[0], F)
    batch = tf.io.parse_example(data, F)
    seq_default = tf.io.parse_example([data[2], b""], {
        "seq": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True, default_value=-1.0),
        "s": tf.io.FixedLenSequenceFeature([], "string", allow_missing=True)})
    return _np((one, batch, tf.io.parse_example(data[1], F), seq_default,
            tf.io.parse_single_example(b"", {"d": F["d"], "none": F["none"], "sd": F["sd"]}),
            tf.io.parse_example(data[:1], {"seq": tf.io.FixedLenFeature([2, 1], tf.float32)}, example_names=["a"]),
            raises(tf.io.parse_example, data[:2], {"seq": tf.io.FixedLenFeature([2, 1], tf.float32)},
                   example_names=["a", "b"]),
            tf.io.parse_single_example(data[0], {"seq": tf.io.FixedLenFeature([1, 2], tf.float32)})))


@parity(x64=True)
def test_parse_example_in_dataset_map(tf):
    """Parsing in ``map`` over TFRecord records: per record, per batch, before and after batch."""
    d = tmp()
    p = _write(tf, os.path.join(d, "ex.tfrecord"), [_example(tf, i).SerializeToString() for i in range(5)])
    F = _features(tf)
    records = tf.data.TFRecordDataset(p)
    single = records.map(lambda r: tf.io.parse_single_example(r, F))
    batched = records.batch(2).map(lambda r: tf.io.parse_example(r, F))
    applied = records.batch(3).apply(tf.data.experimental.parse_example_dataset(F))
    seq_only = records.map(lambda r: tf.io.parse_single_example(r, {"seq": F["seq"]})["seq"])
    return (spec(single.element_spec), spec(batched.element_spec), spec(applied.element_spec),
            L(single.map(lambda e: (e["f"], e["i"], e["d"]))), L(batched.map(lambda e: (e["seq"], e["dd"]))),
            L(applied.map(lambda e: (e["none"], e["f"]))), L(single.map(lambda e: e["s"])),
            L(seq_only.padded_batch(2)), spec(seq_only.padded_batch(2).element_spec))


@parity(x64=True)
def test_parse_example_bad_input(tf):
    data = _example(tf).SerializeToString()
    F32, I64 = tf.float32, tf.int64
    one = tf.io.parse_single_example
    return (raises(one, data, {"zz": tf.io.FixedLenFeature([], F32)}),                     # missing
            raises(tf.io.parse_example, [data, data], {"zz": tf.io.FixedLenFeature([], F32)}),
            raises(one, data, {"f": tf.io.FixedLenFeature([2], I64)}),                      # wrong kind
            raises(tf.io.parse_example, [data], {"s": tf.io.FixedLenFeature([2], F32)}),
            raises(one, data, {"f": tf.io.FixedLenFeature([3], F32)}),                      # wrong count
            raises(tf.io.parse_example, [data, data], {"i": tf.io.FixedLenFeature([2], I64)}),
            raises(one, data, {"seq": tf.io.FixedLenSequenceFeature([3], F32, allow_missing=True)}),
            raises(tf.io.parse_example, [data], {"seq": tf.io.FixedLenSequenceFeature([3], F32, allow_missing=True)}),
            raises(one, data, {"f": tf.io.FixedLenSequenceFeature([2], F32)}),              # allow_missing=False
            raises(one, b"\xff\xff garbage", {"f": tf.io.FixedLenFeature([2], F32)}, ok=("InvalidArgumentError",)),
            raises(one, data, {"f": tf.io.FixedLenFeature([2], tf.int32)}),                 # dtype not allowed
            raises(one, data, {"f": tf.io.FixedLenFeature([2], tf.float64)}),
            raises(one, data, {"d": tf.io.FixedLenFeature([2], F32, default_value=[1.0, 2.0, 3.0])}),
            raises(one, data, {"d": tf.io.FixedLenFeature(None, F32)}),
            raises(one, data, {"d": tf.io.FixedLenFeature([None], F32)}),
            raises(one, data, {}), raises(one, data, {"f": 3}),
            raises(one, [data], {"f": tf.io.FixedLenFeature([2], F32)}),                    # not a scalar
            raises(tf.io.parse_example, [[data]], {"f": tf.io.FixedLenFeature([2], F32)}),  # rank 2
            raises(one, tf.train.Example(features=tf.train.Features(feature={"e": tf.train.Feature(
                float_list=tf.train.FloatList())})).SerializeToString(),
                {"e": tf.io.FixedLenFeature([], F32, default_value=3.0)}))               # present but empty


@parity(x64=True)
def test_parse_example_errors_in_map(tf):
    """A bad record's error comes out of the pipeline (TF: when read; tapejax: at ``map()`` when
    every sample fails, or when read)."""
    d = tmp()
    good = _example(tf).SerializeToString()
    p = _write(tf, os.path.join(d, "mixed.tfrecord"), [good, good, b"\x0a\x02\x0a\x00"])   # (the last: no "f")
    req = {"f": tf.io.FixedLenFeature([2], tf.float32)}
    return (raises(lambda: L(tf.data.TFRecordDataset(p).map(lambda r: tf.io.parse_single_example(r, req)))),
            raises(lambda: L(tf.data.TFRecordDataset(p).map(
                lambda r: tf.io.parse_single_example(r, {"f": tf.io.FixedLenFeature([5], tf.float32)})))),
            L(tf.data.TFRecordDataset(p).map(lambda r: tf.io.parse_single_example(r, req)).take(2)),
            L(tf.data.TFRecordDataset(p).map(lambda r: tf.io.parse_single_example(r, req)).ignore_errors()))


# -- a program: an image-classification dataset as Examples -----------------------------------

H = W = 4
C = 3


def _image_examples(tf, path, n, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, H, W, C), dtype=np.uint8)
    labels = (images.reshape(n, -1).mean(axis=1) > 127).astype(np.int64) + 2 * (images[:, 0, 0, 0] > 127)
    with tf.io.TFRecordWriter(path, "GZIP") as w:
        for img, y in zip(images, labels):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)])),
                "shape": tf.train.Feature(int64_list=tf.train.Int64List(value=[H, W, C]))}))
            w.write(ex.SerializeToString())
    return path


def _parse_image(tf):
    features = {"image_raw": tf.io.FixedLenFeature([], "string"), "label": tf.io.FixedLenFeature([], tf.int64),
                "shape": tf.io.FixedLenFeature([3], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, features)
        image = tf.reshape(tf.io.decode_raw(ex["image_raw"], tf.uint8), [H, W, C])
        return tf.cast(image, tf.float32) / 255.0, tf.cast(ex["label"], tf.int32)
    return parse


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_examples_pipeline_trains(tf):
    """Examples (raw image bytes, an int64 label) in GZIP TFRecord files, read with
    TFRecordDataset -> map(parse, parallel) -> batch -> prefetch, a softmax classifier trained for two epochs
    by a compiled step and evaluated after each on a second file."""
    d = tmp()
    train_file = _image_examples(tf, os.path.join(d, "train.tfrecord.gz"), 40, 0)
    eval_file = _image_examples(tf, os.path.join(d, "eval.tfrecord.gz"), 16, 1)
    parse = _parse_image(tf)
    train = tf.data.TFRecordDataset(train_file, "GZIP").map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(
        8).prefetch(tf.data.AUTOTUNE)
    evaluation = tf.data.TFRecordDataset([eval_file], compression_type="GZIP").map(parse).cache().batch(16)
    losses, accs, w, b = fit_and_evaluate(tf, train, evaluation, H * W * C, n_classes=4)
    return losses, accs, spec(train.element_spec), w, b


# -- tf.train.SequenceExample ------------------------------------------------------------------

def _sequence_example(tf, n):
    t = tf.train
    return t.SequenceExample(
        context=t.Features(feature={"id": t.Feature(int64_list=t.Int64List(value=[n])),
                                    "score": t.Feature(float_list=t.FloatList(value=[n / 2, -1.0]))}),
        feature_lists=t.FeatureLists(feature_list={
            "tok": t.FeatureList(feature=[t.Feature(int64_list=t.Int64List(value=[i, i + 1])) for i in range(n)]),
            "word": t.FeatureList(feature=[t.Feature(bytes_list=t.BytesList(value=[b"w%d" % i])) for i in range(n)])})
    ).SerializeToString()


def _sequence_features(tf):
    context = {"id": tf.io.FixedLenFeature([], tf.int64), "score": tf.io.FixedLenFeature([2], tf.float32),
               "missing": tf.io.FixedLenFeature([], tf.float32, default_value=1.5)}
    lists = {"tok": tf.io.FixedLenSequenceFeature([2], tf.int64), "word": tf.io.FixedLenSequenceFeature([], "string"),
             "absent": tf.io.FixedLenSequenceFeature([], tf.float32, allow_missing=True)}
    return context, lists


@parity(x64=True)
def test_parse_sequence_examples(tf):
    data = [_sequence_example(tf, n) for n in (3, 1, 0)]
    context, lists = _sequence_features(tf)
    single = tf.io.parse_single_sequence_example(data[0], context, lists)
    batch = tf.io.parse_sequence_example(data, context, lists)
    return _np((single, batch, tf.io.parse_sequence_example(data[1], context, lists),
                tf.io.parse_single_sequence_example(data[0], context), tf.io.parse_single_sequence_example(
                    data[0], sequence_features={"tok": lists["tok"]})))


@parity(x64=True)
def test_parse_sequence_examples_in_map(tf):
    d = tmp()
    p = _write(tf, os.path.join(d, "seq.tfrecord"), [_sequence_example(tf, n) for n in (2, 3, 1, 4)])
    context, lists = _sequence_features(tf)

    def parse(r):
        c, s = tf.io.parse_single_sequence_example(r, context, {"tok": lists["tok"]})
        return c["id"], s["tok"]
    ds = tf.data.TFRecordDataset(p).map(parse)
    batched = tf.data.TFRecordDataset(p).batch(2).map(lambda r: tf.io.parse_sequence_example(
        r, context, {"tok": lists["tok"]})[1:])
    return spec(ds.element_spec), L(ds), L(ds.padded_batch(2)), spec(batched.element_spec), L(batched)


@parity(x64=True)
def test_parse_sequence_example_bad_input(tf):
    data = _sequence_example(tf, 3)
    context, lists = _sequence_features(tf)
    one = tf.io.parse_single_sequence_example
    F = tf.io.FixedLenSequenceFeature
    return (raises(one, data, context, {"m2": F([], tf.float32)}),                           # absent list
            raises(one, data, context, {"tok": F([3], tf.int64)}),                           # values per step
            raises(one, data, context, {"tok": F([2], tf.float32)}),                         # kind
            raises(one, data, context, {"tok": tf.io.FixedLenFeature([2], tf.int64)}),       # not a sequence
            raises(one, data, {"zz": tf.io.FixedLenFeature([], tf.int64)}, lists),           # required context
            raises(one, data, None, None),
            raises(one, data, {"id": F([], tf.int64, allow_missing=True)}),
            raises(one, data, None, {"tok": F([2], tf.int64, default_value=[0, 0])}),
            raises(one, b"\xff\xff", context, lists))


# -- serialize_tensor / parse_tensor -----------------------------------------------------------

@parity(x64=True)
def test_serialize_and_parse_tensor(tf):
    values = [tf.constant(3), tf.constant([[1.5, 2.0]]), tf.constant(np.array([1, -2], np.int64)),
              tf.constant([True, False]), tf.constant(np.zeros((0, 2), np.float32)), tf.constant(np.array([7], np.uint8)),
              tf.constant(np.array([1.5, -2.25], np.float16)), tf.constant(np.array([0.1], np.float64)),
              tf.constant(np.array([1 + 2j], np.complex64)), tf.constant(np.arange(6, dtype=np.int16).reshape(2, 3, 1))]
    data = [tf.io.serialize_tensor(v) for v in values]
    back = [tf.io.parse_tensor(d, v.dtype) for d, v in zip(data, values)]
    strings = tf.io.serialize_tensor(np.array([b"a", b"bc\x00"], dtype=object))
    as_bytes = [_np(d) for d in data + [strings]]
    return (as_bytes, back, _np(tf.io.parse_tensor(strings, "string")), tf.io.parse_tensor(as_bytes[1], tf.float32),
            tf.io.parse_tensor(b"\x08\x01\x12\x04\x12\x02\x08\x03*\x04\x00\x00\xa0@", tf.float32),   # (float_val 5.)
            raises(tf.io.parse_tensor, as_bytes[1], tf.int32), raises(tf.io.parse_tensor, b"\xff\xff", tf.float32),
            raises(tf.io.parse_tensor, [as_bytes[1]], tf.float32))


@parity
def test_serialized_tensors_through_tfrecord(tf):
    """Tensors serialized into a TFRecord file and parsed back in a ``map``."""
    d = tmp()
    p = os.path.join(d, "t.tfrecord")
    with tf.io.TFRecordWriter(p) as w:
        for i in range(4):
            w.write(_np(tf.io.serialize_tensor(tf.constant(np.arange(i + 1, dtype=np.float32) * 0.5))))
    ds = tf.data.TFRecordDataset(p).map(lambda r: tf.io.parse_tensor(r, tf.float32))
    # (the spec: TF's shape inference knows no rank here; tapejax's sample runs find [None])
    return _read(p), L(ds), L(ds.padded_batch(2, padded_shapes=[None]))


@parity(x64=True)
def test_make_batched_features_dataset(tf):
    """TF's recipe over two files: in order (``shuffle=False``), with a label, repeated forever
    (full batches), and shuffled (the multiset: tapejax's order is grain's)."""
    d = tmp()
    for k in range(2):
        _write(tf, os.path.join(d, f"part-{k}.tfrecord"), [_example(tf, i + 3 * k).SerializeToString()
                                                          for i in range(3)])
    F = {"f": tf.io.FixedLenFeature([2], tf.float32), "i": tf.io.FixedLenFeature([3], tf.int64),
         "label": tf.io.FixedLenFeature([], tf.float32, default_value=-1.0)}
    pattern = os.path.join(d, "part-*.tfrecord")
    make = tf.data.experimental.make_batched_features_dataset
    ordered = make(pattern, 4, F, label_key="label", num_epochs=1, shuffle=False)
    forever = make(pattern, 4, F, shuffle=False)
    shuffled = make(pattern, 2, {"f": F["f"]}, num_epochs=2, shuffle=True, shuffle_seed=3)
    firsts = sorted(v for batch in shuffled.as_numpy_iterator() for v in batch["f"][:, 0].tolist())
    return (spec(ordered.element_spec), L(ordered.map(lambda x, y: (x["f"], x["i"], y))),
            spec(forever.element_spec), L(forever.take(3).map(lambda x: x["f"])), firsts,
            raises(make, pattern, 2, F, label_key="nope"))
