"""``tf.io``'s byte codecs on host strings (``hostops``' conventions): ``encode_base64`` /
``decode_base64`` (TF's web-safe alphabet, ``-`` and ``_``; padding optional on input, added on
output only with ``pad=True``) and ``decode_compressed`` (ZLIB, GZIP, ZSTD, or NONE).

Each works elementwise on a string value (``bytes``, or a NumPy object array of them) and gives
the same shape; errors are TF's (``InvalidArgumentError`` for a bad base64 string or an unknown
compression, ``DataLossError`` for a corrupt stream).  ZSTD needs the ``zstandard`` module.
"""
import base64
import binascii
import importlib
import zlib
from typing import Any, Callable, Optional

import numpy as np

from ..core.errors import DataLossError, InvalidArgumentError, UnimplementedError
from .hostops import host_result, host_strings


def _each(fn: Callable[[bytes], bytes], a: np.ndarray) -> Any:
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        out[i] = fn(v)
    return host_result(out)


_WEB_SAFE = bytes.maketrans(b"+/", b"-_")
_FROM_WEB_SAFE = bytes.maketrans(b"-_", b"+/")
_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def encode_base64(input: Any, pad: bool = False, name: Optional[str] = None) -> Any:
    """``tf.io.encode_base64``: web-safe base64 of each string, ``=`` padding only with ``pad``."""
    def one(b: bytes) -> bytes:
        out = base64.b64encode(b).translate(_WEB_SAFE)
        return out if pad else out.rstrip(b"=")
    return _each(one, host_strings(input, "tf.io.encode_base64", "input"))


def _decode64(b: bytes) -> bytes:
    body = b.rstrip(b"=")
    if len(b) - len(body) > 2 or not set(body) <= _ALPHABET:
        raise InvalidArgumentError(None, None, "Invalid character found in base64.")
    if len(body) % 4 == 1:
        raise InvalidArgumentError(None, None, "Base64 string length cannot be 1 modulo 4.")
    try:
        return base64.b64decode(body.translate(_FROM_WEB_SAFE) + b"=" * (-len(body) % 4), validate=True)
    except binascii.Error:
        raise InvalidArgumentError(None, None, "Invalid character found in base64.") from None


def decode_base64(input: Any, name: Optional[str] = None) -> Any:
    """``tf.io.decode_base64``: each web-safe base64 string decoded (padding optional)."""
    return _each(_decode64, host_strings(input, "tf.io.decode_base64", "input"))


def _zstd(b: bytes) -> bytes:
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise UnimplementedError(None, None, "tf.io.decode_compressed: ZSTD needs the `zstandard` module "
                                 "(pip install zstandard)") from None
    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(b)
    except zstandard.ZstdError as e:
        raise DataLossError(None, None, f"ZSTD decompression failed: {e}") from None


def _inflate(b: bytes, wbits: int) -> bytes:
    """A ZLIB (``wbits`` 15) or GZIP (31: member after member) stream inflated as TF's reader
    does: a truncated stream gives what it holds, a corrupt one ``DataLossError``, bytes after a
    ZLIB stream are ignored and bytes after a GZIP member must be another member."""
    out = []
    while b:
        d = zlib.decompressobj(wbits)
        try:
            out.append(d.decompress(b))
        except zlib.error as e:
            raise DataLossError(None, None, f"inflate() failed: {e}") from None
        if not d.eof or wbits == 15:
            break
        b = d.unused_data
    return b"".join(out)


def decode_compressed(bytes: Any, compression_type: str = "", name: Optional[str] = None) -> Any:
    """``tf.io.decode_compressed``: each string decompressed (``compression_type`` "", "ZLIB",
    "GZIP" or "ZSTD"; "" returns the strings as they are)."""
    kind = compression_type or ""
    if kind not in ("", "ZLIB", "GZIP", "ZSTD"):
        raise InvalidArgumentError(None, None, f"Only ZLIB, ZSTD, GZIP or NONE are supported compressions; got "
                                   f"compression_type={compression_type!r}")
    a = host_strings(bytes, "tf.io.decode_compressed", "bytes")

    def one(b):
        if kind == "":
            return b
        if kind == "ZSTD":
            return _zstd(b)
        return _inflate(b, 15 if kind == "ZLIB" else 31)
    return _each(one, a)


IO_OPS = {"encode_base64": encode_base64, "decode_base64": decode_base64, "decode_compressed": decode_compressed}

__all__ = ["encode_base64", "decode_base64", "decode_compressed", "IO_OPS"]
