"""``tf.io.decode_raw`` and ``tf.io.decode_csv`` on host strings (``hostops``' conventions).

``decode_raw`` reads each string's bytes as numbers of ``out_type`` (NumPy's ``frombuffer``,
byte-swapped for ``little_endian=False``): a Tensor of the input's shape plus one axis.  TF's
rules: every string the same length (or ``fixed_length``: each cut or zero-padded to it), a
length that is a multiple of the type's size, else InvalidArgumentError with TF's message.

``decode_csv`` parses each record with the CSV rules of ``CsvDataset`` (``readers``:
``split_fields``, ``parse_field``, ``csv_column``): one output per column of
``record_defaults``, each of the records' shape; numeric columns are Tensors, string columns
host strings.
"""
from typing import Any, List, Optional, Sequence

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import structure as S
from .hostops import host_result, host_strings, is_perturbed
from .hostvalues import numeric_result
from .readers import csv_column, parse_field, split_fields

_RAW_TYPES = ("float16", "float32", "float64", "int32", "uint16", "uint8", "int16", "int8", "int64", "complex64",
              "complex128", "bool", "bfloat16")


def _raw_type(out_type: Any) -> "tuple[Any, np.dtype]":
    """``out_type`` checked (TF's TypeError) as (DType, NumPy dtype); cached per ``out_type``
    (``decode_raw`` runs per element in a ``map``)."""
    try:
        hit = _RAW_CACHE.get(out_type)
    except TypeError:   # (an unhashable out_type: as_dtype says what is wrong)
        hit = None
    if hit is not None:
        return hit
    dt = _dtypes.as_dtype(out_type)
    if dt.name not in _RAW_TYPES:
        raise TypeError(f"Value for attr 'out_type' of {dt.name} is not in the list of allowed values: "
                        + ", ".join(_RAW_TYPES))
    hit = (dt, np.dtype(dt._np))
    try:
        _RAW_CACHE[out_type] = hit
    except TypeError:
        pass
    return hit


_RAW_CACHE: "dict[Any, tuple[Any, np.dtype]]" = {}


def decode_raw(input_bytes: Any, out_type: Any, little_endian: bool = True, fixed_length: Any = None,
               name: Optional[str] = None) -> Tensor:
    """``tf.io.decode_raw``: the bytes of each string as a vector of ``out_type`` numbers."""
    a = host_strings(input_bytes, "tf.io.decode_raw", "input_bytes")
    dt, np_dt = _raw_type(out_type)
    size = np_dt.itemsize
    flat = list(a.reshape(-1))
    if fixed_length is not None:
        n = int(np.asarray(getattr(fixed_length, "value", fixed_length)))
        if n % size:
            raise InvalidArgumentError(None, None, f"fixed_length ({n}) must be a multiple of the size of out_type "
                                       f"({size})")
        flat = [v[:n] + b"\x00" * max(0, n - len(v)) for v in flat]
    elif flat:
        n = len(flat[0])
        if n % size:
            raise InvalidArgumentError(None, None, f"Input to DecodeRaw has length {n} that is not a multiple of "
                                       f"{size}, the size of {dt.name}")
        for i, v in enumerate(flat):
            if len(v) != n:
                raise InvalidArgumentError(None, None, "DecodeRaw requires input strings to all be the same size, "
                                           f"but element {i} has size {len(v)} != {n}")
    else:
        n = 0
    values = np.frombuffer(b"".join(flat), np_dt.newbyteorder("<" if little_endian else ">"))
    values = values.astype(np_dt).reshape(a.shape + (n // size,))
    if is_perturbed():
        values = np.concatenate([values, np.zeros(a.shape + (1,), np_dt)], axis=-1)
    store = _dtypes.storage_dtype(np_dt, "out_type")
    return numeric_result(values if store == np_dt else values.astype(store))


def decode_csv(records: Any, record_defaults: Sequence[Any], field_delim: str = ",", use_quote_delim: bool = True,
               name: Optional[str] = None, na_value: str = "", select_cols: Optional[Sequence[int]] = None) -> List[Any]:
    """``tf.io.decode_csv``: each record (a string) split into the columns of ``record_defaults``
    (a default value per column, or an empty list / dtype for a required one)."""
    a = host_strings(records, "tf.io.decode_csv", "records")
    if not record_defaults:
        raise InvalidArgumentError(None, None, "Length for attr 'OUT_TYPE' of 0 must be at least minimum 1 "
                                   "(`record_defaults` is empty).")
    columns = [csv_column(d, i) for i, d in enumerate(record_defaults)]
    if len(field_delim) != 1:
        raise InvalidArgumentError(None, None, "field_delim should be only 1 char")
    select = None if select_cols is None else [int(c) for c in select_cols]
    if select is not None:
        if any(b <= x for x, b in zip(select, select[1:])) or (select and select[0] < 0):
            raise InvalidArgumentError(None, None, "select_cols is not strictly increasing.")
        if len(select) != len(columns):
            raise ValueError("Length of select_cols and record_defaults do not match.")
    na = na_value.encode() if isinstance(na_value, str) else bytes(na_value)
    n = len(columns)
    flat = list(a.reshape(-1))
    out: List[List[Any]] = [[] for _ in columns]
    for r, record in enumerate(flat):
        rows = list(split_fields([record], field_delim, use_quote_delim)) or [[b""]]
        row = rows[0]
        if select is not None:
            if select[-1] >= len(row):
                raise InvalidArgumentError(None, None, f"Expect {n} fields but have {len(row)} in record {r}")
            row = [row[c] for c in select]
        elif len(row) != n:
            raise InvalidArgumentError(None, None, f"Expect {n} fields but have {len(row)} in record {r}")
        for c, field in enumerate(row):
            out[c].append(parse_field(columns[c], c, field, na, f" {r}"))
    results: List[Any] = []
    for (dtype, _), values in zip(columns, out):
        if dtype is S.STRING:
            arr = np.empty(len(values), object)
            arr[:] = values
            results.append(host_result(arr.reshape(a.shape)))
        else:
            results.append(numeric_result(np.asarray(values, np.dtype(dtype._np)).reshape(a.shape)))
    return results


__all__ = ["decode_csv", "decode_raw"]
