"""TFRecord files: ``tf.io.TFRecordWriter``, ``tf.io.TFRecordOptions``, ``tf.data.TFRecordDataset``
and ``tf.data.experimental.TFRecordWriter``.

A TFRecord file is a sequence of records, each framed as

    length (uint64, little endian) | masked crc32c of the length (uint32) | data | masked crc32c of the data

where ``masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`` (mod 2**32), the whole file optionally
compressed (``"GZIP"``: a gzip stream; ``"ZLIB"``: a zlib stream).  The CRC is CRC-32C
(Castagnoli), computed by ``google-crc32c`` (Google's C implementation, with its own pure-Python
fallback; the ``data`` extra).  tensorboardX's ``record_writer`` frames records the same way but
writes uncompressed files only and reads none, and its ``crc32c`` is pure Python unless another
package is installed (7 MB/s here, against GB/s), so only the framing is written here.

Compression uses ``zlib`` with TF's settings (``memLevel=9``, window bits 15, and 31 for gzip's
header), so a file written here has the same bytes as TF's for the same records and options.

Reading follows TF's ``RecordReader``: a header cut short at the end of the file ends it (TF
reads that as the end); a data part cut short is ``DataLossError("truncated record at <offset>")``;
a checksum that does not match is ``DataLossError("corrupted record at <offset>")`` (the offset of
the length for the header's, of the data for the data's; at offset 0 TF adds "Is this even a
TFRecord file?"); a stream that does not decompress is ``DataLossError``.  Errors come when the
record is read.  ``TFRecordDataset`` is a ``readers._FileReader`` as ``TextLineDataset`` is:
records are scalar string components (host ``bytes``), files read in turn or
``num_parallel_reads`` at a time (TF's interleave order).
"""
import os
import struct
import zlib
from typing import Any, BinaryIO, Iterator, Optional

from ..core.errors import DataLossError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from . import args as A
from .dataset import Dataset, kind
from .pystreams import Element
from .readers import _compression, _FileReader
from .strings import is_string, string_spec

_EXTRA = "the `data` extra: pip install 'tapejax[data]'"
_HEADER = 12   # length (8) + its crc (4)
_FOOTER = 4


def _crc32c() -> Any:
    try:
        import google_crc32c
    except ImportError as e:   # pragma: no cover - the test install has it
        raise ImportError(f"TFRecord files need google-crc32c ({_EXTRA}).") from e
    return google_crc32c.value


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    c = _crc32c()(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record as it is written: length, its masked crc, the data, its masked crc."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data, struct.pack("<I", masked_crc32c(data))))


# -- options --------------------------------------------------------------------------------

class TFRecordOptions:
    """``tf.io.TFRecordOptions``: the compression of a TFRecord file (``""``, ``"GZIP"`` or
    ``"ZLIB"``) and zlib's settings (None: TF's defaults)."""

    compression_type_map = {"ZLIB": "ZLIB", "GZIP": "GZIP", "": ""}

    def __init__(self, compression_type: Any = None, flush_mode: Optional[int] = None,
                 input_buffer_size: Optional[int] = None, output_buffer_size: Optional[int] = None,
                 window_bits: Optional[int] = None, compression_level: Optional[int] = None,
                 compression_method: Optional[int] = None, mem_level: Optional[int] = None,
                 compression_strategy: Optional[int] = None):
        compression_type = _valid_type(compression_type)
        self.compression_type = compression_type
        self.flush_mode = flush_mode
        self.input_buffer_size = input_buffer_size
        self.output_buffer_size = output_buffer_size
        self.window_bits = window_bits
        self.compression_level = compression_level
        self.compression_method = compression_method
        self.mem_level = mem_level
        self.compression_strategy = compression_strategy

    @classmethod
    def get_compression_type_string(cls, options: Any) -> str:
        """The compression type of ``options`` (a TFRecordOptions, a string, or None: ``""``)."""
        if options is None:
            return ""
        if isinstance(options, TFRecordOptions):
            return options.compression_type or ""
        return _valid_type(options) or ""

    def __repr__(self) -> str:
        return f"TFRecordOptions(compression_type={self.compression_type!r})"


def _valid_type(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        value = value.decode()
    if value is not None and value not in TFRecordOptions.compression_type_map:
        raise ValueError(f'Not a valid compression_type: "{value}" (expected "", "GZIP" or "ZLIB").')
    return value


def _options(options: Any) -> TFRecordOptions:
    if options is None or isinstance(options, (str, bytes)):
        return TFRecordOptions(options)   # (None and strings: TF's shorthand)
    if not isinstance(options, TFRecordOptions):
        raise TypeError(f"TFRecordWriter: `options` must be a tf.io.TFRecordOptions, a compression type string or "
                        f"None; got {type(options).__name__}.")
    return options


# -- writing --------------------------------------------------------------------------------

class TFRecordWriter:
    """``tf.io.TFRecordWriter(path, options=None)``: writes records to a TFRecord file (created or
    truncated now).  ``write(record)`` (bytes; a str is written as UTF-8), ``flush()``,
    ``close()``; a context manager.  After ``close()``, ``write`` and ``flush`` raise
    ``FailedPreconditionError`` (as TF)."""

    def __init__(self, path: Any, options: Any = None):
        opts = _options(options)
        kind_ = opts.compression_type or ""
        name = os.fspath(path.decode() if isinstance(path, bytes) else path)
        try:
            self._file: Optional[BinaryIO] = open(name, "wb")
        except FileNotFoundError:
            raise NotFoundError(None, None, f"{name}; No such file or directory") from None
        self._flush_mode = opts.flush_mode
        self._zip: Any = None
        if kind_:
            bits = 15 if opts.window_bits is None else opts.window_bits
            self._zip = zlib.compressobj(
                -1 if opts.compression_level is None else opts.compression_level,
                zlib.DEFLATED if opts.compression_method is None else opts.compression_method,
                bits + 16 if kind_ == "GZIP" else bits, 9 if opts.mem_level is None else opts.mem_level,
                zlib.Z_DEFAULT_STRATEGY if opts.compression_strategy is None else opts.compression_strategy)

    def _open(self) -> BinaryIO:
        if self._file is None:
            raise FailedPreconditionError(None, None, "Writer is closed.")
        return self._file

    def write(self, record: Any) -> None:
        """Append one record (``bytes``; a ``str`` is encoded as UTF-8)."""
        if isinstance(record, str):
            record = record.encode()
        if not isinstance(record, (bytes, bytearray, memoryview)):
            raise TypeError(f"TFRecordWriter.write: `record` must be bytes (or str); got {type(record).__name__}.")
        f = self._open()
        data = frame(bytes(record))
        f.write(self._zip.compress(data) if self._zip is not None else data)

    def flush(self) -> None:
        """Flush what was written to the file (a compressed file with ``flush_mode`` set also
        flushes zlib's stream in that mode, as TF)."""
        f = self._open()
        if self._zip is not None and self._flush_mode:
            f.write(self._zip.flush(self._flush_mode))
        f.flush()

    def close(self) -> None:
        """Finish the file (a compressed stream's end) and close it; again: nothing."""
        if self._file is None:
            return
        f, self._file = self._file, None
        with f:
            if self._zip is not None:
                f.write(self._zip.flush(zlib.Z_FINISH))

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_file", None) is not None:
            self.close()


class DatasetWriter:
    """``tf.data.experimental.TFRecordWriter(filename, compression_type=None)``: ``write(dataset)``
    writes a dataset of scalar strings to one TFRecord file (deprecated in TF, kept for its users)."""

    def __init__(self, filename: Any, compression_type: Optional[str] = None):
        self._filename = filename
        self._options = TFRecordOptions(compression_type)

    def write(self, dataset: Dataset) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"`dataset` must be a `tf.data.Dataset` object; got {type(dataset).__name__}.")
        spec = dataset.element_spec
        if not (is_string(spec) and spec.shape == ()):
            raise TypeError(f"Invalid `dataset.` Expected a dataset that produces scalar `tf.string` elements, but "
                            f"got a dataset which produces elements with shapes {getattr(spec, 'shape', spec)} and "
                            f"types {getattr(spec, 'dtype', spec)}.")
        with TFRecordWriter(self._filename, self._options) as w:
            for record in dataset:
                w.write(record)


# -- reading --------------------------------------------------------------------------------

def _suffix(offset: int) -> str:
    return " (Is this even a TFRecord file?)" if offset == 0 else ""


def _checked(f: BinaryIO, n: int, offset: int, crc: Any) -> bytes:
    """``n`` bytes and their masked crc from ``f`` (TF's ReadChecksummed, errors as TF's)."""
    data = f.read(n + 4)
    if len(data) != n + 4:
        raise DataLossError(None, None, f"truncated record at {offset}{_suffix(offset)}")
    (masked,) = struct.unpack("<I", data[n:])
    c = crc(data[:n])
    if masked != (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF:
        raise DataLossError(None, None, f"corrupted record at {offset}{_suffix(offset)}")
    return data[:n]


def read_records(f: BinaryIO, name: str = "") -> Iterator[bytes]:
    """The records of the (decompressed) stream ``f``, checked as TF's reader does."""
    crc = _crc32c()
    offset = 0
    while True:
        head = f.read(_HEADER)
        if len(head) < _HEADER:   # (TF: a header cut short reads as the end of the file)
            return
        (masked,) = struct.unpack("<I", head[8:])
        c = crc(head[:8])
        if masked != (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF:
            raise DataLossError(None, None, f"corrupted record at {offset}{_suffix(offset)}")
        (length,) = struct.unpack("<Q", head[:8])
        try:
            data = _checked(f, length, offset + _HEADER, crc)
        except DataLossError as e:
            if not e.message.startswith("truncated"):
                raise
            raise DataLossError(None, None, f"truncated record at {offset}' failed with Read less bytes than "
                                f"requested (file {name!r})") from None
        yield data
        offset += _HEADER + length + _FOOTER


class _Inflated:
    """A whole zlib stream read in pieces (``read(n)``), errors as DataLossError."""

    def __init__(self, raw: BinaryIO, wbits: int):
        self._raw, self._z, self._buf = raw, zlib.decompressobj(wbits), b""

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and not self._z.eof:
            chunk = self._raw.read(1 << 16)
            try:
                self._buf += self._z.decompress(chunk) if chunk else self._z.flush()
            except zlib.error as e:
                raise DataLossError(None, None, f"inflate() failed: {e}") from None
            if not chunk:
                break
        out, self._buf = self._buf[:n], self._buf[n:]
        return out


def _records_of(name: bytes, compression: str, buffer: int) -> Iterator[bytes]:
    path = os.fsdecode(name)
    try:
        raw = open(path, "rb", buffering=buffer if buffer > 1 else -1)   # (1 would be line buffering)
    except FileNotFoundError:
        raise NotFoundError(None, None, f"{path}; No such file or directory") from None
    with raw:
        stream: Any = raw if not compression else _Inflated(raw, 31 if compression == "GZIP" else 15)
        yield from read_records(stream, path)


@kind
class TFRecordDataset(_FileReader):
    """``tf.data.TFRecordDataset(filenames, compression_type=None, buffer_size=None,
    num_parallel_reads=None)``: the records of TFRecord files as scalar string elements
    (``bytes``); files in turn, or ``num_parallel_reads`` at a time (TF's interleave order)."""

    def __init__(self, filenames: Any, compression_type: Optional[str] = None, buffer_size: Any = None,
                 num_parallel_reads: Any = None, name: Optional[str] = None):
        self._compression = _compression(compression_type)
        self._buffer = -1 if buffer_size is None else A.integer(buffer_size, "buffer_size")
        if self._buffer < -1:   # (TF raises it when read; -1 is its default)
            raise InvalidArgumentError(None, None, f"`buffer_size` must be >= 0 (0 == no buffering); got "
                                       f"{self._buffer}.")
        super().__init__(filenames, string_spec(()), num_parallel_reads)

    def _records(self, name: bytes) -> Iterator[Element]:
        for record in _records_of(name, self._compression, self._buffer):
            yield (record,)


__all__ = ["DatasetWriter", "TFRecordDataset", "TFRecordOptions", "TFRecordWriter", "frame", "masked_crc32c",
           "read_records"]
