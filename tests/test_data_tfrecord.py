"""TFRecord files and Example parsing where TF is not the oracle (TF's values and errors:
tests/parity/test_data_tfrecord.py): the CRC against tensorboardX's independent implementation,
the framing by hand, VarLenFeature as a SparseTensor, int64 features without JAX's 64-bit
mode, the spec a map's sample runs give, traced and Tensor inputs refused, the ImportErrors naming
the extra, and the message classes living apart from TF's."""
import builtins
import importlib
import os
import struct
import sys
import tempfile

import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import DataLossError, InvalidArgumentError, UnimplementedError
from tapejax.data import example_proto, tfrecord


def _path(name="x.tfrecord"):
    return os.path.join(tempfile.mkdtemp(prefix="tapejax-tfrecord-"), name)


def _example(**features):
    t = tf.train
    out = {}
    for k, v in features.items():
        if isinstance(v[0], bytes):
            out[k] = t.Feature(bytes_list=t.BytesList(value=v))
        elif isinstance(v[0], float):
            out[k] = t.Feature(float_list=t.FloatList(value=v))
        else:
            out[k] = t.Feature(int64_list=t.Int64List(value=v))
    return t.Example(features=t.Features(feature=out)).SerializeToString()


@pytest.mark.parametrize("data", [b"", b"a", b"hello world" * 50, bytes(range(256))])
def test_masked_crc_matches_tensorboardx(data):
    """google-crc32c's CRC-32C, masked, against tensorboardX's pure-Python table implementation."""
    record_writer = pytest.importorskip("tensorboardX.record_writer")
    assert tfrecord.masked_crc32c(data) == record_writer.masked_crc32c(data)


def test_frame_layout_by_hand():
    framed = tfrecord.frame(b"abc")
    (n,) = struct.unpack("<Q", framed[:8])
    assert n == 3 and framed[12:15] == b"abc" and len(framed) == 8 + 4 + 3 + 4
    assert struct.unpack("<I", framed[8:12])[0] == tfrecord.masked_crc32c(framed[:8])
    assert struct.unpack("<I", framed[15:])[0] == tfrecord.masked_crc32c(b"abc")


def test_tensorboardx_record_writer_reads_back():
    """Records framed by tensorboardX's RecordWriter (an independent writer) read here."""
    record_writer = pytest.importorskip("tensorboardX.record_writer")
    p = _path()
    w = record_writer.RecordWriter(p)
    for r in (b"one", b"", b"three"):
        w.write(r)
    w.close()
    assert list(tf.data.TFRecordDataset(p).as_numpy_iterator()) == [b"one", b"", b"three"]


def test_corruption_messages_name_the_offset():
    p = _path()
    with tf.io.TFRecordWriter(p) as w:
        w.write(b"abcdef")
        w.write(b"ghi")
    data = bytearray(open(p, "rb").read())
    data[12 + 6 + 4 + 12] ^= 1   # (the second record's data)
    with open(p, "wb") as f:
        f.write(bytes(data))
    it = iter(tf.data.TFRecordDataset(p))
    assert next(it) == b"abcdef"
    with pytest.raises(DataLossError, match="corrupted record at 34"):
        next(it)
    data[0] ^= 1
    with open(p, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(DataLossError, match=r"corrupted record at 0 \(Is this even a TFRecord file\?\)"):
        list(tf.data.TFRecordDataset(p))


def test_flush_mode_flushes_the_compressed_stream():
    p = _path()
    w = tf.io.TFRecordWriter(p, tf.io.TFRecordOptions("ZLIB", flush_mode=2))   # Z_SYNC_FLUSH
    w.write(b"abc")
    w.flush()
    partial = open(p, "rb").read()
    w.close()
    import zlib
    assert len(zlib.decompressobj().decompress(partial)) == 12 + 3 + 4   # (the whole record is readable)
    assert list(tf.data.TFRecordDataset(p, "ZLIB").as_numpy_iterator()) == [b"abc"]


def test_unsupported_compression_is_refused_when_made():
    """TF reads an unknown compression_type as none (after an error in its log); tapejax refuses it."""
    with pytest.raises(InvalidArgumentError, match="compression_type"):
        tf.data.TFRecordDataset(_path(), compression_type="BZ2")


def test_var_len_feature_parses_into_a_sparse_tensor():
    """VarLenFeature gives a SparseTensor (more in tests/test_sparse_data.py); a string one, whose
    values would be a string tensor, names the gap."""
    data = _example(v=[1.0, 2.0])
    sp = tf.io.parse_single_example(data, {"v": tf.io.VarLenFeature(tf.float32)})["v"]
    assert isinstance(sp, tf.SparseTensor) and sp.shape.as_list() == [2]
    np.testing.assert_array_equal(sp.values.numpy(), [1.0, 2.0])
    with pytest.raises(UnimplementedError, match="string tensors.*FixedLenSequenceFeature"):
        tf.io.parse_single_example(data, {"v": tf.io.VarLenFeature(tf.string)})
    assert tf.io.VarLenFeature(tf.float32).dtype == tf.float32


def test_int64_features_without_x64():
    """int64 features are int32 without JAX's 64-bit mode (tapejax's rule); a value outside int32
    is an error naming the mode, never a wrap."""
    ok = tf.io.parse_single_example(_example(i=[3, -4]), {"i": tf.io.FixedLenFeature([2], tf.int64)})
    assert ok["i"].dtype == tf.int32 and ok["i"].numpy().tolist() == [3, -4]
    with pytest.raises(InvalidArgumentError, match="64-bit mode"):
        tf.io.parse_single_example(_example(i=[2 ** 40]), {"i": tf.io.FixedLenFeature([1], tf.int64)})


def test_map_spec_of_sequence_features_is_unknown_in_rows():
    p = _path()
    with tf.io.TFRecordWriter(p) as w:
        for n in (2, 2, 4):   # (the first two samples agree: the perturbed run makes rows unknown)
            w.write(_example(s=[1.0] * n, b=[b"x" * n]))
    F = {"s": tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True),
         "b": tf.io.FixedLenFeature([], "string")}
    ds = tf.data.TFRecordDataset(p).map(lambda r: tf.io.parse_single_example(r, F))
    assert ds.element_spec["s"].shape == (None, 2)
    assert ds.element_spec["b"].shape == () and ds.element_spec["b"].dtype.name == "string"
    rows = [e["s"].shape[0] for e in ds]
    assert rows == [1, 1, 2]


def test_parse_refuses_tensors_and_traced_values():
    F = {"f": tf.io.FixedLenFeature([1], tf.float32)}
    with pytest.raises(TypeError, match="no string tensors"):
        tf.io.parse_single_example(tf.constant([1, 2]), F)

    @tf.function
    def f(x):
        return tf.io.parse_example(x, F)

    with pytest.raises(TypeError, match="traced value"):
        f(tf.constant([1]))


def test_messages_live_in_their_own_pool():
    """Our classes do not clash with TF's generated ones in one process; bytes pass between them."""
    tf_real = pytest.importorskip("tensorflow")
    ours = tf.train.Example.FromString(_example(f=[1.0]))
    theirs = tf_real.train.Example.FromString(ours.SerializeToString())
    assert type(ours) is not type(theirs) and ours.DESCRIPTOR.full_name == theirs.DESCRIPTOR.full_name
    assert theirs.SerializeToString() == ours.SerializeToString()
    assert set(example_proto.NAMES) == {"BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList",
                                        "FeatureLists", "Example", "SequenceExample"}


def test_missing_dependencies_name_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_deps(name, *args, **kwargs):
        if name.startswith("google.protobuf") or name == "google_crc32c":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_deps)
    monkeypatch.setitem(sys.modules, "google_crc32c", None)
    with pytest.raises(ImportError, match=r"tapejax\[data\]"):
        tfrecord.masked_crc32c(b"a")
    example_proto.messages.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"tapejax\[data\]"):
            example_proto.messages()
    finally:
        monkeypatch.undo()
        example_proto.messages.cache_clear()
    importlib.import_module("google_crc32c")
    assert tf.train.Example.DESCRIPTOR.full_name == "tensorflow.Example"


def test_parse_example_of_an_empty_batch():
    out = tf.io.parse_example(np.array([], dtype=object), {"f": tf.io.FixedLenFeature([3], tf.float32),
                                                         "s": tf.io.FixedLenSequenceFeature([2], tf.float32,
                                                                                            allow_missing=True)})
    assert out["f"].shape == (0, 3) and out["s"].shape == (0, 0, 2)


def test_serialize_tensor_of_a_traced_value_names_where_to_call_it():
    @tf.function
    def f(x):
        return tf.io.serialize_tensor(x)

    with pytest.raises(TypeError, match="traced value"):
        f(tf.constant([1.0]))


def test_parse_tensor_float64_needs_x64():
    """A float64 TensorProto (written by TF) needs JAX's 64-bit mode: tapejax's float64 rule."""
    from tapejax.data.tensor_proto import DATA_TYPES, classes
    proto = classes().TensorProto(dtype=DATA_TYPES["float64"], tensor_content=np.array([0.5]).tobytes())
    proto.tensor_shape.dim.add(size=1)
    with pytest.raises(TypeError, match="64-bit mode"):
        tf.io.parse_tensor(proto.SerializeToString(), tf.float64)
