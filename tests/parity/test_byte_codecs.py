"""``tf.io``'s byte codecs (tapejax/data/byte_codecs.py) against real TensorFlow 2.21:
web-safe base64 both ways (padding, batches, every length modulo 3), ``decode_compressed``
(ZLIB, GZIP, none), each bad input's error class, and the codecs inside a dataset ``map``."""
import gzip
import zlib

from .data_helpers import L
from .harness import parity, raises

TEXTS = [b"", b"a", b"ab", b"abc", b"hello world??>>", bytes(range(256))]


def _s(v):
    """A string result as Python data (TF: an EagerTensor of bytes; tapejax: bytes or an array)."""
    v = v.numpy() if hasattr(v, "numpy") else v
    return v.tolist() if hasattr(v, "tolist") else v


@parity
def test_base64_round_trips(tf):
    out = []
    for t in TEXTS:
        e, p = tf.io.encode_base64(t), tf.io.encode_base64(t, pad=True)
        out += [_s(e), _s(p), _s(tf.io.decode_base64(e)), _s(tf.io.decode_base64(p))]
    out.append(_s(tf.io.encode_base64([TEXTS[1:4], TEXTS[1:4]])))
    out.append(_s(tf.io.decode_base64([b"YQ", b"YWI=", b"YWJj", b"_-8"])))
    return out


@parity
def test_base64_bad_input(tf):
    return [raises(tf.io.decode_base64, b) for b in (b"a", b"Y@==", b"aGVsbG8+", b"aGVs/G8", b"YQ===")]


@parity
def test_decode_compressed(tf):
    """ZLIB, GZIP (two members too) and none; a truncated stream gives what it holds, a corrupt
    check or trailing bytes after a GZIP member are DataLossError (bytes after ZLIB: ignored)."""
    d = bytes(range(256)) * 20
    out = [_s(tf.io.decode_compressed(d)), _s(tf.io.decode_compressed([zlib.compress(b"a"), zlib.compress(b"bb")], "ZLIB")),
           raises(tf.io.decode_compressed, b"xx", "LZ4")]
    for kind, c in (("ZLIB", zlib.compress(d)), ("GZIP", gzip.compress(d))):
        bad = bytearray(c)
        bad[-3] ^= 0xFF
        out += [_s(tf.io.decode_compressed(c, kind)), _s(tf.io.decode_compressed(c + c, kind))]
        out += [_s(tf.io.decode_compressed(c[:-cut], kind)) for cut in (1, 4, 9, 30, len(c) // 2)]
        out += [raises(lambda *a: _s(tf.io.decode_compressed(*a)), data, kind) for data in (bytes(bad), c + b"junk", b"xx")]
    return out


@parity
def test_codecs_in_a_dataset_map(tf):
    """Records stored as compressed base64 text, decoded in a ``map`` then parsed as bytes."""
    records = [tf.io.encode_base64(zlib.compress(bytes([i, i + 1, i + 2]) * 4)) for i in range(5)]
    records = [_s(r) for r in records]
    ds = (tf.data.Dataset.from_tensor_slices(records)
          .map(lambda r: tf.io.decode_raw(tf.io.decode_compressed(tf.io.decode_base64(r), "ZLIB"), tf.uint8))
          .batch(2))
    return L(ds)
