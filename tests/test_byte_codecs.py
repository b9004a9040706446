"""tapejax/data/byte_codecs.py beyond the parity tests: ZSTD needs the `zstandard` module (a clear
error without it), and the codecs' argument checks."""
import sys
import zlib

import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import UnimplementedError


def test_zstd_without_the_module_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)   # (import fails)
    with pytest.raises(UnimplementedError, match="zstandard"):
        tf.io.decode_compressed(b"\x28\xb5\x2f\xfd", "ZSTD")


def test_zstd_with_the_module():
    zstandard = pytest.importorskip("zstandard")
    data = b"abc" * 100
    assert tf.io.decode_compressed(zstandard.ZstdCompressor().compress(data), "ZSTD") == data


def test_a_batch_keeps_its_shape_and_a_tensor_is_refused():
    a = np.array([[zlib.compress(b"x"), zlib.compress(b"yy")]], object)
    out = tf.io.decode_compressed(a, "ZLIB")
    assert out.shape == (1, 2) and out.tolist() == [[b"x", b"yy"]]
    with pytest.raises(TypeError, match="must be strings"):
        tf.io.encode_base64(tf.constant([1, 2]))
