"""File readers: ``TextLineDataset``, ``FixedLengthRecordDataset``, ``experimental.CsvDataset``,
``experimental.make_csv_dataset``, and ``experimental.from_list``.

Lines, records and CSV text columns are *string components* (``strings``: host bytes, never
device arrays), as ``list_files`` gives file names; CSV's numeric columns are numeric components
(int32 / int64 / float32 / float64, becoming Tensors).  Each reader is a Python loop over its
file names (a Dataset of string scalars, or names given as strings), each file read in turn
(TF's ``flat_map``) or ``num_parallel_reads`` at a time (TF's ``interleave``, deterministic
order).  Errors come where TF raises them: argument checks when the dataset is made, file and
parse errors (NotFoundError, InvalidArgumentError with TF's messages) when the element is read.
``compression_type`` is ``""`` / None, ``"GZIP"`` or ``"ZLIB"``.
"""
import csv
import gzip
import io
import os
import re
import zlib
from typing import Any, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError, NotFoundError
from ..core.tensor import Tensor
from . import args as A, structure as S
from .build import Build
from .dataset import Dataset, kind
from .gfile import match_paths
from .pystreams import UNK, Element, Elements, PyStream, read
from .strings import STRING, _patterns, is_string, string_spec

_COMPRESSIONS = ("", "GZIP", "ZLIB")


def _compression(value: Any) -> str:
    value = "" if value is None else value
    if isinstance(value, bytes):
        value = value.decode()
    if not isinstance(value, str) or value not in _COMPRESSIONS:
        raise InvalidArgumentError(None, None, f"Unsupported compression_type: {value!r} (expected '', 'GZIP' or "
                                   "'ZLIB').")
    return value


def _names(filenames: Any, what: str) -> Dataset:
    """The file names as a Dataset of string scalars."""
    if isinstance(filenames, Dataset):
        spec = filenames.element_spec
        if not (is_string(spec) and spec.shape == ()):
            raise TypeError(f"The `filenames` argument must contain `tf.string` elements. Got a dataset of {spec!r}.")
        return filenames
    if isinstance(filenames, Tensor):
        raise TypeError(f"The `filenames` argument must contain `tf.string` elements. Got `tf.{filenames.dtype.name}` "
                        "elements.")
    values = list(np.asarray(filenames, dtype=object).reshape(-1)) if isinstance(
        filenames, (list, tuple, np.ndarray)) else [filenames]
    names = []
    for v in values:
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if isinstance(v, str):
            v = v.encode()
        if not isinstance(v, bytes):
            got = "int32" if isinstance(v, (int, np.integer)) else "float32" if isinstance(v, float) else type(v).__name__
            raise TypeError(f"The `filenames` argument must contain `tf.string` elements. Got `tf.{got}` elements.")
        names.append((bytes(v),))
    return Elements(names, string_spec(()), _dtypes.x64_enabled())


def _open(name: bytes, compression: str) -> Any:
    path = os.fsdecode(name)
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise NotFoundError(None, None, f"{path}; No such file or directory") from None
    if compression == "GZIP":
        return gzip.GzipFile(fileobj=raw)
    if compression == "ZLIB":
        with raw:
            return io.BytesIO(zlib.decompress(raw.read()))
    return raw


def _lines(name: bytes, compression: str) -> Iterator[bytes]:
    with _open(name, compression) as f:
        for line in f:
            yield line.rstrip(b"\n").rstrip(b"\r")


class _FileReader(PyStream):
    """A reader over its file-name dataset: each file's records in turn, or ``num_parallel_reads``
    files at a time (their records interleaved one by one, TF's order)."""

    def __init__(self, filenames: Any, spec: Any, num_parallel_reads: Any):
        names = _names(filenames, type(self).__name__)
        self._parallel = None if num_parallel_reads is None else A.integer(num_parallel_reads, "num_parallel_reads")
        if self._parallel is not None and self._parallel <= 0 and self._parallel != A.AUTOTUNE:
            raise InvalidArgumentError(None, None, "`num_parallel_reads` must be greater than zero or "
                                       f"tf.data.AUTOTUNE (-1); got {self._parallel}.")
        super().__init__((names,), spec, UNK)

    def _records(self, name: bytes) -> Iterator[Element]:
        raise NotImplementedError(type(self).__name__)   # every subclass defines it

    def _elements(self, ctx: Build) -> Iterator[Element]:
        names = (bytes(el[0]) for el in read(self._inputs[0], ctx))
        if self._parallel is None or self._parallel == 1:
            for name in names:
                yield from self._records(name)
            return
        cycle = (os.cpu_count() or 1) if self._parallel == A.AUTOTUNE else self._parallel
        slots: List[Optional[Iterator[Element]]] = [None] * cycle
        names_left, pos = True, 0
        while True:   # TF's interleave: a slot whose file ends takes the next file in its place
            if slots[pos] is None and names_left:
                name = next(names, None)
                names_left = name is not None
                if name is not None:
                    slots[pos] = self._records(name)
            it = slots[pos]
            if it is not None:
                try:
                    el = next(it)
                except StopIteration:
                    slots[pos] = None
                    continue
                yield el
            if not names_left and all(x is None for x in slots):
                return
            pos = (pos + 1) % cycle


@kind
class TextLineDataset(_FileReader):
    """``tf.data.TextLineDataset(filenames, compression_type, buffer_size, num_parallel_reads)``: the
    lines of the files (without ``\\n`` / ``\\r\\n``) as scalar string elements."""

    def __init__(self, filenames: Any, compression_type: Optional[str] = None, buffer_size: Any = None,
                 num_parallel_reads: Any = None, name: Optional[str] = None):
        self._compression = _compression(compression_type)
        super().__init__(filenames, string_spec(()), num_parallel_reads)

    def _records(self, name: bytes) -> Iterator[Element]:
        for line in _lines(name, self._compression):
            yield (line,)


@kind
class FixedLengthRecordDataset(_FileReader):
    """``tf.data.FixedLengthRecordDataset``: records of ``record_bytes`` bytes after ``header_bytes``
    and before ``footer_bytes`` of each file, as scalar string elements."""

    def __init__(self, filenames: Any, record_bytes: Any, header_bytes: Any = None, footer_bytes: Any = None,
                 buffer_size: Any = None, compression_type: Optional[str] = None, num_parallel_reads: Any = None,
                 name: Optional[str] = None):
        self._record = A.positive(record_bytes, "record_bytes", "FixedLengthRecordDataset")
        self._header = 0 if header_bytes is None else A.integer(header_bytes, "header_bytes")
        self._footer = 0 if footer_bytes is None else A.integer(footer_bytes, "footer_bytes")
        if self._header < 0 or self._footer < 0:
            raise InvalidArgumentError(None, None, "`header_bytes` and `footer_bytes` must be >= 0; got "
                                       f"{self._header} and {self._footer}.")
        self._compression = _compression(compression_type)
        super().__init__(filenames, string_spec(()), num_parallel_reads)

    def _records(self, name: bytes) -> Iterator[Element]:
        with _open(name, self._compression) as f:
            data = f.read()
        body = len(data) - self._header - self._footer
        if body < 0 or body % self._record:
            raise InvalidArgumentError(None, None, f"Excluding the header ({self._header} bytes) and footer "
                                       f"({self._footer} bytes), input file \"{os.fsdecode(name)}\" has body length "
                                       f"{max(body, 0)} bytes, which is not an exact multiple of the record length "
                                       f"({self._record} bytes).")
        for start in range(self._header, self._header + body, self._record):
            yield (bytes(data[start:start + self._record]),)


# -- CSV ----------------------------------------------------------------------------------

_CSV_TYPES = {"float32": "float", "float64": "double", "int32": "int32", "int64": "int64", "string": "string"}
_INT = re.compile(rb"\s*[+-]?\d+\s*")


def csv_column(default: Any, i: int) -> "tuple[Any, Any]":
    """``(dtype, default value or None)`` of one ``record_defaults`` entry (a dtype: required)."""
    if isinstance(default, (_dtypes.DType, type)) or (isinstance(default, str) and default in _CSV_TYPES):
        dtype = STRING if default in ("string", STRING) else _dtypes.as_dtype(default)
        value = None
    else:
        v = default.numpy() if isinstance(default, Tensor) else default
        a = np.asarray(v)
        if a.ndim > 1:
            raise InvalidArgumentError(None, None, "Each record default should be at most rank 1")
        if a.size > 1:
            raise InvalidArgumentError(None, None, f"record_defaults[{i}]: a default holds one value or none; got "
                                       f"{a.size}.")
        if a.dtype.kind in "SUO":
            dtype = STRING
        else:
            a = np.asarray(S.to_component(v))   # (TF's conversion: Python floats float32, ints int32)
            dtype = _dtypes.as_dtype(a.dtype)
        value = None if a.size == 0 else a.reshape(-1)[0]
        if dtype is STRING and value is not None:   # (from ``v`` itself: ``S`` values lose trailing NULs)
            value = np.asarray(S.string_value(v), dtype=object).reshape(-1)[0]
    name = dtype.name
    if name not in _CSV_TYPES:
        raise InvalidArgumentError(None, None, f"Value for attr 'output_types' of {name} is not in the list of "
                                   "allowed values: float, double, int32, int64, string")
    if name != "string":
        store = _dtypes.storage_dtype(np.dtype(name), "record_defaults")
        dtype = _dtypes.as_dtype(store)
        value = None if value is None else store.type(value)
    else:
        value = None if value is None else S.string_value(value)
    return dtype, value


@kind
class CsvDataset(_FileReader):
    """``tf.data.experimental.CsvDataset``: each CSV record as a tuple of scalars, one per column
    of ``record_defaults`` (a default value, or a dtype for a required column)."""

    def __init__(self, filenames: Any, record_defaults: Sequence[Any], compression_type: Optional[str] = None,
                 buffer_size: Any = None, header: bool = False, field_delim: str = ",", use_quote_delim: bool = True,
                 na_value: str = "", select_cols: Optional[Sequence[int]] = None,
                 exclude_cols: Optional[Sequence[int]] = None, name: Optional[str] = None):
        if not record_defaults:
            raise InvalidArgumentError(None, None, "Length for attr 'output_types' of 0 must be at least minimum 1 "
                                       "(`record_defaults` is empty).")
        self._columns = [csv_column(d, i) for i, d in enumerate(record_defaults)]
        if select_cols is not None and exclude_cols is not None:
            raise ValueError("Either select_cols or exclude_cols should be empty")
        if len(field_delim) != 1:
            raise InvalidArgumentError(None, None, "field_delim should be only 1 char")
        for cols in (select_cols, exclude_cols):
            if cols is not None and any(b <= a for a, b in zip(cols, list(cols)[1:])):
                raise InvalidArgumentError(None, None, f"{'select' if cols is select_cols else 'exclude'}_cols "
                                           "should be strictly increasing indices")
        if select_cols is not None and len(select_cols) != len(self._columns):
            raise InvalidArgumentError(None, None, "select_cols should match output size")
        self._select = None if select_cols is None else [int(c) for c in select_cols]
        self._exclude = None if exclude_cols is None else {int(c) for c in exclude_cols}
        self._compression = _compression(compression_type)
        self._header, self._delim, self._quote = bool(header), field_delim, bool(use_quote_delim)
        self._na = na_value.encode() if isinstance(na_value, str) else bytes(na_value)
        spec = tuple(TensorSpec((), dtype) for dtype, _ in self._columns)
        super().__init__(filenames, spec, None)

    def _rows(self, name: bytes) -> Iterator[List[bytes]]:
        for i, row in enumerate(split_fields(_lines(name, self._compression), self._delim, self._quote)):
            if i == 0 and self._header:
                continue
            yield row

    def _records(self, name: bytes) -> Iterator[Element]:
        n = len(self._columns)
        for row in self._rows(name):
            if self._select is not None:
                if self._select[-1] >= len(row):
                    raise InvalidArgumentError(None, None, f"Expect {n} fields but have {len(row)} in record")
                fields = [row[c] for c in self._select]
            else:
                fields = [f for c, f in enumerate(row) if not self._exclude or c not in self._exclude]
                if len(fields) > n:
                    raise InvalidArgumentError(None, None, f"Expect {n} fields but have more in record")
                if len(fields) < n:
                    raise InvalidArgumentError(None, None, f"Expect {n} fields but have {len(fields)} in record")
            yield tuple(self._parse(c, f) for c, f in enumerate(fields))

    def _parse(self, c: int, field: bytes) -> Any:
        return parse_field(self._columns[c], c, field, self._na)


def parse_field(column: "tuple[Any, Any]", c: int, field: bytes, na: bytes, where: str = "") -> Any:
    """One CSV field of column ``c`` (``column``: ``_column``'s dtype and default) as its value;
    TF's errors for a missing required field or one that does not parse (``where``: " 0" for
    ``decode_csv``'s record 0)."""
    dtype, default = column
    if field == b"" or field == na:
        if default is None:
            raise InvalidArgumentError(None, None, f"Field {c} is required but missing in record{where}!")
        return default
    if dtype is STRING:
        return bytes(field)
    np_dtype = np.dtype(dtype._np)
    try:
        if np_dtype.kind == "i":
            if not _INT.fullmatch(field):
                raise ValueError(field)
            value = int(field)
            info = np.iinfo(np_dtype)
            if not info.min <= value <= info.max:
                raise ValueError(field)
            return np_dtype.type(value)
        if b"_" in field:
            raise ValueError(field)
        return np_dtype.type(float(field))
    except ValueError:
        raise InvalidArgumentError(None, None, f"Field {c} in record{where} is not a valid "
                                   f"{_CSV_TYPES[dtype.name]}: {field.decode('latin-1')}") from None


def split_fields(lines: Iterable[bytes], delim: str, quote: bool) -> Iterator[List[bytes]]:
    """CSV lines as lists of fields (Python's ``csv``; TF's quoting: ``""`` in a quoted field)."""
    text = (line.decode("latin-1") for line in lines)
    quoting = csv.QUOTE_MINIMAL if quote else csv.QUOTE_NONE
    for row in csv.reader(text, delimiter=delim, quoting=quoting):
        yield [f.encode("latin-1") for f in (row or [""])]


def from_list(elements: Any) -> Dataset:
    """``tf.data.experimental.from_list``: one element per item (string values as string components)."""
    if not isinstance(elements, list):
        raise ValueError("Invalid `elements`. `elements` must be a list.")
    if not elements:
        raise ValueError("Invalid `elements`. `elements` should not be empty. If you want an empty dataset, use "
                         "`tf.data.Dataset.range(0)`.")
    first = elements[0]
    rows: List[Element] = []
    specs: Optional[List[Any]] = None
    for item in elements:
        if not S.same_structure(item, first) or (S.is_structure(first) != S.is_structure(item)):
            raise ValueError("The two structures don't have the same nested structure.\n\nFirst structure: "
                             f"{first!r}\n\nSecond structure: {item!r}")
        comps = [_list_component(v) for v in S.flatten(item)]
        these = [string_spec(S.string_shape(c)) if S.is_bytes(c) else S.spec_of(c) for c in comps]
        if specs is None:
            specs = these
        else:
            merged = [S.combine(a, b) for a, b in zip(specs, these)]
            if any(m is None for m in merged):
                raise TypeError(f"from_list: the elements' components must have the same dtypes; {item!r} differs "
                                f"from {first!r}.")
            specs = merged
        rows.append(tuple(comps))
    assert specs is not None
    return Elements(rows, S.pack(first, specs), _dtypes.x64_enabled())


def _list_component(v: Any) -> Any:
    if isinstance(v, (str, bytes)) or (isinstance(v, np.ndarray) and v.dtype.kind in "SU") or (
            isinstance(v, (list, np.ndarray)) and np.size(v) > 0 and all(
                isinstance(x, (str, bytes)) for x in np.asarray(v, dtype=object).reshape(-1))):
        return S.string_value(v)   # (host bytes, every byte kept)
    return S.to_component(v)


@kind
class Restructure(Dataset):
    """The input's components in another structure (a permutation of the flat components): no
    function runs, so string components pass (``make_csv_dataset``'s dict of columns)."""

    def __init__(self, input: Dataset, element_spec: Any, order: List[int]):
        self._order = order
        super().__init__((input,), element_spec, input._cardinality)

    def _build(self, ctx: Build) -> Any:
        order = self._order
        return self._inputs[0]._build_stream(ctx).map(lambda el: tuple(el[i] for i in order))


def _infer_type(value: bytes, na: bytes, prev: Optional[str]) -> Optional[str]:
    """TF's column type inference: the least permissive of int32, int64, float32, float64, string
    that also holds the column's earlier values."""
    if value in (b"", na):
        return prev
    order = ["int32", "int64", "float32", "float64", "string"]
    for i, t in enumerate(order):
        if (prev is None or prev in order[:i + 1]) and _valid(value, t):
            return t
    return "string"


def _valid(value: bytes, t: str) -> bool:
    if t == "string":
        return True
    try:
        if t.startswith("int"):
            info = np.iinfo(np.dtype(t))
            return bool(_INT.fullmatch(value)) and info.min <= int(value) <= info.max
        return b"_" not in value and float(np.dtype(t).type(float(value))) < np.inf
    except (ValueError, OverflowError):
        return False


def make_csv_dataset(file_pattern: Any, batch_size: Any, column_names: Optional[Sequence[str]] = None,
                     column_defaults: Optional[Sequence[Any]] = None, label_name: Optional[str] = None,
                     select_columns: Optional[Sequence[Any]] = None, field_delim: str = ",",
                     use_quote_delim: bool = True, na_value: str = "", header: bool = True,
                     num_epochs: Optional[int] = None, shuffle: bool = True, shuffle_buffer_size: int = 10000,
                     shuffle_seed: Optional[int] = None, prefetch_buffer_size: Optional[int] = None,
                     num_parallel_reads: Optional[int] = None, sloppy: bool = False,
                     num_rows_for_inference: Optional[int] = 100, compression_type: Optional[str] = None,
                     ignore_errors: bool = False, encoding: str = "utf-8") -> Dataset:
    """``tf.data.experimental.make_csv_dataset``: batches of CSV rows as a dict of columns (and the
    ``label_name`` column apart: ``(features, label)``), TF's recipe: files (shuffled), read
    ``num_parallel_reads`` at a time, rows shuffled and repeated ``num_epochs`` times (None:
    forever, batches then all full), batched, prefetched.  Column names come from the header, types
    from the first ``num_rows_for_inference`` rows when not given."""
    names = sorted(n for p in _patterns(file_pattern) for n in match_paths(p))
    if not names:
        raise InvalidArgumentError(None, None, f"No files match `file_pattern` {file_pattern}.")
    compression = _compression(compression_type)
    files = _names(names, "make_csv_dataset")
    if shuffle:
        files = files.shuffle(len(names), shuffle_seed)
    quoting = csv.QUOTE_MINIMAL if use_quote_delim else csv.QUOTE_NONE
    if column_names is None:
        if not header:
            raise ValueError("Expected `column_names` or `header` arguments. Neither is provided.")
        with _open(os.fsencode(names[0]), compression) as f:
            first = f.readline().decode(encoding).rstrip("\r\n")
        column_names = next(csv.reader([first], delimiter=field_delim, quoting=quoting), None)
        if not column_names:
            raise ValueError(f"Failed when reading the header line of {names[0]}. Is it an empty file?")
    column_names = list(column_names)
    if len(set(column_names)) != len(column_names):
        dup = {n for n in column_names if column_names.count(n) > 1}
        raise ValueError("Either `column_names` argument or CSV header row contains duplicate column names: "
                         f"{dup}.")
    select = None
    if select_columns is not None:
        select = []
        for v in select_columns:
            if isinstance(v, int):
                if not 0 <= v < len(column_names):
                    raise ValueError(f"Column index {v} specified in `select_columns` should be > 0  and <= "
                                     f"{len(column_names)}, which is the number of columns.")
                select.append(v)
            elif v not in column_names:
                raise ValueError(f"Column {v} specified in `select_columns` must be of one of the columns: "
                                 f"{column_names}.")
            else:
                select.append(column_names.index(v))
        select = sorted(set(select))
        if len(select) != len(select_columns):
            raise ValueError("`select_columns` contains duplicate columns")
    if column_defaults is None:
        probe = CsvDataset(names, [""] * len(column_names), compression, header=header, field_delim=field_delim,
                           use_quote_delim=use_quote_delim, na_value=na_value)
        types: List[Optional[str]] = [None] * len(select if select is not None else column_names)
        na = na_value.encode()
        seen = 0
        for name in names:   # the first rows over the files in order (TF's)
            for row in probe._records(os.fsencode(name)):
                if num_rows_for_inference is not None and seen >= num_rows_for_inference:
                    break
                seen += 1
                for j, c in enumerate(select if select is not None else range(len(column_names))):
                    types[j] = _infer_type(bytes(row[c]), na, types[j])
        column_defaults = [[""] if (t or "string") == "string" else np.zeros([1], t) for t in types]
    if select is not None and len(column_defaults) != len(select):
        raise ValueError("If specified, `column_defaults` and `select_columns` must have the same length: "
                         f"`column_defaults` has length {len(column_defaults)}, `select_columns` has length "
                         f"{len(select)}.")
    if select is not None and len(column_names) > len(select):
        column_names = [column_names[i] for i in select]
    if label_name is not None and label_name not in column_names:
        raise ValueError(f"`label_name` provided must be one of the columns: {column_names}. Received: {label_name}.")

    def read_file(name: Any) -> Dataset:
        ds: Dataset = CsvDataset(bytes(name), column_defaults, compression, header=header, field_delim=field_delim,
                                 use_quote_delim=use_quote_delim, na_value=na_value, select_cols=select)
        return ds.ignore_errors() if ignore_errors else ds
    reads = 1 if num_parallel_reads is None else num_parallel_reads
    ds = files.interleave(read_file, cycle_length=reads, block_length=1,
                          num_parallel_calls=None if reads == 1 else reads, deterministic=not sloppy)
    if num_epochs != 1 and shuffle:
        ds = ds.shuffle(shuffle_buffer_size, shuffle_seed).repeat(num_epochs)
    elif shuffle:
        ds = ds.shuffle(shuffle_buffer_size, shuffle_seed)
    elif num_epochs != 1:
        ds = ds.repeat(num_epochs)
    ds = ds.batch(batch_size, drop_remainder=num_epochs is None)
    cols = list(ds.element_spec)
    features = {n: s for n, s in zip(column_names, cols) if n != label_name}
    spec: Any = features if label_name is None else (features, cols[column_names.index(label_name)])
    index = {n: i for i, n in enumerate(column_names)}
    order = [index[k] for k in sorted(features)] + ([] if label_name is None else [index[label_name]])
    ds = Restructure(ds, spec, order)
    return ds.prefetch(A.AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)


__all__ = ["CsvDataset", "FixedLengthRecordDataset", "TextLineDataset", "from_list", "make_csv_dataset"]
