"""``tf.lookup`` (tables from keys to values) and TF's string hashing (``tf.fingerprint``,
``tf.strings.to_hash_bucket_fast``), for input pipelines that turn tokens into ids.

* **Integer keys** (``KeyValueTensorInitializer`` of an integer Tensor) are looked up with
  tapejax ops (``searchsorted`` over the sorted keys, ``gather``, ``where``): eagerly, in dataset
  functions and inside ``tapejax.function``, on the device.
* **String keys** are host strings (``bytes``, NumPy object arrays, as every tapejax string;
  ``hostops``): looked up on the host in eager code and in dataset functions (which then run
  eagerly per element).  The result is a numeric Tensor, or a string value for string values.
* ``tf.strings.to_hash_bucket_fast`` is in ``hostops``, with the other string ops.
* ``StaticVocabularyTable`` gives an out-of-vocabulary key ``size + Fingerprint64(key) %
  num_oov_buckets`` (FarmHash's fingerprint of the key's bytes, of its decimal form for integer
  keys; ``farmhash.py``), as TF: ids agree with TF's for every key.  Inside ``tapejax.function``
  the integer keys' buckets are computed by a host callback (``numpy_function``).
* ``experimental.DenseHashTable`` is TF's open-addressing table on the host, bucket for bucket
  (``lookup_dense``).
* ``experimental.MutableHashTable`` is a host dictionary: ``insert`` / ``remove`` / ``lookup``
  / ``export`` run eagerly (inside ``tapejax.function`` they raise TypeError: TF stages them
  as resource ops, which tapejax does not have).
* TF's checks: a lookup key of another dtype than the table's is TypeError; duplicate keys
  with different values are FailedPreconditionError; a missing vocabulary file NotFoundError;
  ``vocab_size`` larger than the file InvalidArgumentError.  Integer values of 64 bits are held
  as tapejax holds int64 (32 bits without JAX's 64-bit mode), so ``StaticVocabularyTable`` takes
  any integer values where TF insists on int64 (a Python ``[1, 2]`` is int32 in both).
"""
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..compile.host import numpy_function
from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from ..core.modules import new_module
from ..core.tensor import Tensor
from ..ops.array import reshape, shape
from ..ops.farmhash import fingerprint64
from ..ops.indexing import gather
from ..ops.layout import searchsorted
from ..ops.math import cast, equal, minimum, not_equal
from ..ops.reduce import where
from . import hostops
from .hostvalues import numeric_result
from .lookup_dense import DenseHashTable

STRING = _dtypes.string


def _is_strings(value: Any) -> bool:
    if isinstance(value, (bytes, str)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "OSU"
    if isinstance(value, (list, tuple)):
        flat = list(np.asarray(value, dtype=object).reshape(-1))
        return bool(flat) and all(isinstance(v, (bytes, str)) for v in flat)
    return False


def _host_key_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _decimal(v: Any) -> bytes:
    return str(int(v)).encode()


# -- hashing -----------------------------------------------------------------------------------

def fingerprint(data: Any, method: str = "farmhash64", name: Optional[str] = None) -> Tensor:
    """``tf.fingerprint``: an ``[n, 8]`` uint8 Tensor, row ``i`` the FarmHash ``Fingerprint64`` of
    ``data[i]`` (little-endian): of its bytes for numbers and booleans; for strings of the string
    itself (rank 1) or of its strings' fingerprints in order (higher ranks)."""
    if method != "farmhash64":
        raise InvalidArgumentError(None, None, f"Unsupported fingerprint method: {method} (argument `method`)")
    if _is_strings(data):
        a = hostops.host_strings(data, "tf.fingerprint", "data")
        if a.ndim == 0:
            raise InvalidArgumentError(None, None, f"`data` should have at least one dimension: {list(a.shape)}")
        rows = a.reshape(a.shape[0], -1)
        if a.ndim == 1:
            digests = [fingerprint64(r[0]) for r in rows]
        else:
            digests = [fingerprint64(b"".join(fingerprint64(s).to_bytes(8, "little") for s in r)) for r in rows]
    else:
        arr = np.asarray(convert_to_tensor(data))
        if arr.ndim == 0:
            raise InvalidArgumentError(None, None, f"`data` should have at least one dimension: {list(arr.shape)}")
        arr = np.ascontiguousarray(arr)
        digests = [fingerprint64(arr[i].tobytes()) for i in range(arr.shape[0])]
    out = np.array([list(d.to_bytes(8, "little")) for d in digests], np.uint8).reshape(len(digests), 8)
    return numeric_result(out)


# -- initializers ------------------------------------------------------------------------------

class TextFileIndex:
    """``tf.lookup.TextFileIndex``: the key or value of a line is the whole line or its number."""
    WHOLE_LINE = -2
    LINE_NUMBER = -1


class KeyValueTensorInitializer:
    """``tf.lookup.KeyValueTensorInitializer(keys, values, key_dtype=None, value_dtype=None)``."""

    def __init__(self, keys: Any, values: Any, key_dtype: Any = None, value_dtype: Any = None,
                 name: Optional[str] = None):
        self._keys, self.key_dtype = _column(keys, key_dtype, "keys")
        self._values, self.value_dtype = _column(values, value_dtype, "values")

    def _pairs(self) -> Tuple[np.ndarray, np.ndarray]:
        k, v = self._keys.reshape(-1), self._values.reshape(-1)
        if len(k) != len(v):
            raise InvalidArgumentError(None, None, f"Expected shape {list(self._keys.shape)} for values, got "
                                       f"{list(self._values.shape)} (arguments `keys` and `values`)")
        return k, v


def _column(value: Any, dtype: Any, arg: str) -> Tuple[np.ndarray, Any]:
    """A column of keys or values: host strings (``STRING``) or a NumPy array of the Tensor's."""
    want = None if dtype is None else _dtypes.as_dtype(dtype)
    if want == STRING or (want is None and _is_strings(value)):
        return hostops.host_strings(value, "KeyValueTensorInitializer", arg), STRING
    t = convert_to_tensor(value, dtype=want)
    return np.asarray(t), t.dtype


class TextFileInitializer:
    """``tf.lookup.TextFileInitializer``: keys and values from the lines of a text file
    (``key_index`` / ``value_index``: a column split by ``delimiter``, ``TextFileIndex.WHOLE_LINE``
    or ``LINE_NUMBER``)."""

    def __init__(self, filename: Any, key_dtype: Any, key_index: int, value_dtype: Any, value_index: int,
                 vocab_size: Optional[int] = None, delimiter: str = "\t", name: Optional[str] = None,
                 value_index_offset: int = 0):
        self._filename = os.fsdecode(filename if not isinstance(filename, np.ndarray) else filename.item())
        self.key_dtype, self.value_dtype = _dtypes.as_dtype(key_dtype), _dtypes.as_dtype(value_dtype)
        for idx, dt, arg in ((key_index, self.key_dtype, "key_index"), (value_index, self.value_dtype, "value_index")):
            if idx < -2:
                raise ValueError(f"`{arg}` must be >= -2, got {idx}")
            if idx == TextFileIndex.LINE_NUMBER and not dt.is_integer:
                raise ValueError(f"`{arg}` is LINE_NUMBER: its dtype must be an integer type, got {dt}")
            if idx == TextFileIndex.WHOLE_LINE and dt != STRING and not dt.is_integer:
                raise ValueError(f"`{arg}` is WHOLE_LINE: its dtype must be string or an integer type, got {dt}")
        if vocab_size is not None and vocab_size <= 0:
            raise ValueError(f"Invalid vocab_size {vocab_size}.")
        self._key_index, self._value_index = key_index, value_index
        self._vocab_size, self._delimiter = vocab_size, delimiter
        self._offset = value_index_offset

    def _field(self, line: bytes, number: int, index: int, dtype: Any) -> Any:
        if index == TextFileIndex.LINE_NUMBER:
            return number + (self._offset if index is self._value_index else 0)
        text = line if index == TextFileIndex.WHOLE_LINE else _split(line, self._delimiter, index, self._filename)
        if dtype == STRING:
            return text
        try:
            return float(text) if dtype.is_floating else int(text)
        except ValueError:
            raise InvalidArgumentError(None, None, f"Field {text!r} in line {number} of {self._filename} is not a "
                                       f"valid {dtype.name}") from None

    def _pairs(self) -> Tuple[np.ndarray, np.ndarray]:
        try:
            with open(self._filename, "rb") as f:
                lines = f.read().split(b"\n")
        except FileNotFoundError:
            raise NotFoundError(None, None, f"{self._filename}; No such file or directory") from None
        if lines and lines[-1] == b"":
            lines.pop()
        if self._vocab_size is not None:
            if len(lines) < self._vocab_size:
                raise InvalidArgumentError(None, None, f"Invalid vocab_size in {self._filename}: expected "
                                           f"{self._vocab_size} but got {len(lines)}")
            lines = lines[:self._vocab_size]
        keys = [self._field(line, i, self._key_index, self.key_dtype) for i, line in enumerate(lines)]
        values = [self._field(line, i, self._value_index, self.value_dtype) for i, line in enumerate(lines)]
        return _array(keys, self.key_dtype), _array(values, self.value_dtype)


def _split(line: bytes, delimiter: str, index: int, filename: str) -> bytes:
    parts = line.split(delimiter.encode())
    if index >= len(parts):
        raise InvalidArgumentError(None, None, f"Invalid number of columns in {filename} line {line!r} "
                                   f"(expected at least {index + 1})")
    return parts[index]


def _array(items: List[Any], dtype: Any) -> np.ndarray:
    if dtype == STRING:
        out = np.empty(len(items), object)
        out[:] = items
        return out
    return np.asarray(items, _dtypes.storage_dtype(dtype.as_numpy_dtype))


# -- tables -----------------------------------------------------------------------------------

class StaticHashTable:
    """``tf.lookup.StaticHashTable(initializer, default_value)``: ``lookup`` (``table[keys]``),
    ``size``, ``export``, ``key_dtype``, ``value_dtype``, ``default_value``."""

    def __init__(self, initializer: Any, default_value: Any, name: Optional[str] = None,
                 experimental_is_anonymous: bool = False):
        self.key_dtype, self.value_dtype = initializer.key_dtype, initializer.value_dtype
        keys, values = initializer._pairs()
        if keys.size == 0:
            raise InvalidArgumentError(None, None, "keys and values cannot be empty tensors.")
        self._default = _default(default_value, self.value_dtype)
        table: Dict[Any, Any] = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            if k in table and table[k] != v:
                raise FailedPreconditionError(None, None, "HashTable has different value for same key. Key "
                                              f"{k!r} has {table[k]!r} and trying to add value {v!r}")
            table[k] = v
        self._table = table
        order = sorted(table)
        self._keys = _array(order, self.key_dtype)
        self._values = _array([table[k] for k in order], self.value_dtype)
        self.name = name

    @property
    def default_value(self) -> Any:
        return self._default

    def size(self, name: Optional[str] = None) -> Tensor:
        return convert_to_tensor(len(self._table), _dtypes.int64)

    def export(self, name: Optional[str] = None) -> Tuple[Any, Any]:
        """The keys and values (in key order; TF's order is its hash table's)."""
        return _as_value(self._keys, self.key_dtype), _as_value(self._values, self.value_dtype)

    def lookup(self, keys: Any, name: Optional[str] = None) -> Any:
        """The values of ``keys`` (same shape), ``default_value`` where a key is missing."""
        return self._lookup(keys, self._default)

    __getitem__ = lookup

    def _lookup(self, keys: Any, default: Any) -> Any:
        if self.key_dtype == STRING:
            a = _string_keys(keys, self.key_dtype)
            out = np.empty(a.shape, object if self.value_dtype == STRING else self._values.dtype)
            table, d = self._table, (default if not isinstance(default, Tensor) else default.numpy())
            for i, k in np.ndenumerate(a):
                out[i] = table.get(k, d)
            return hostops.host_result(out) if self.value_dtype == STRING else numeric_result(out)
        k = _integer_keys(keys, self.key_dtype)
        if self.value_dtype == STRING:
            raise TypeError("tapejax: a table from integer keys to strings is looked up on the host: pass the keys "
                            "as a NumPy array or an eager Tensor")
        sorted_keys = convert_to_tensor(self._keys)
        flat = reshape(k, [-1])
        pos = minimum(searchsorted(sorted_keys, flat), len(self._keys) - 1)
        hit = equal(gather(sorted_keys, pos), flat)
        found = gather(convert_to_tensor(self._values), pos)
        out = where(hit, found, cast(convert_to_tensor(default, self.value_dtype), found.dtype))
        return reshape(out, shape(k))


def _default(value: Any, dtype: Any) -> Any:
    if dtype == STRING:
        if not isinstance(value, (bytes, str)):
            raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype string (argument `default_value`)")
        return _host_key_bytes(value)
    if isinstance(value, (bytes, str)):
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name} (argument `default_value`)")
    if dtype.is_integer and isinstance(value, float) and not float(value).is_integer():
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name} (argument `default_value`)")
    return convert_to_tensor(value, dtype)


def _as_value(a: np.ndarray, dtype: Any) -> Any:
    return hostops.host_result(a) if dtype == STRING else convert_to_tensor(a, dtype)


def _string_keys(keys: Any, dtype: Any) -> np.ndarray:
    if isinstance(keys, Tensor):
        raise TypeError(f"Dtype of argument `keys` must be {dtype}, received: {keys.dtype}")
    return hostops.host_strings(keys, "lookup", "keys")


def _integer_keys(keys: Any, dtype: Any) -> Tensor:
    if _is_strings(keys):
        raise TypeError(f"Dtype of argument `keys` must be {dtype}, received: <dtype: 'string'>")
    t = keys if isinstance(keys, Tensor) else convert_to_tensor(keys)
    if t.dtype != dtype:
        raise TypeError(f"Dtype of argument `keys` must be {dtype}, received: {t.dtype}")
    return t


class StaticVocabularyTable:
    """``tf.lookup.StaticVocabularyTable(initializer, num_oov_buckets)``: the initializer's ids
    (int64 values), an unknown key ``size + Fingerprint64(key) % num_oov_buckets``."""

    def __init__(self, initializer: Any, num_oov_buckets: int, lookup_key_dtype: Any = None, name: Optional[str] = None,
                 experimental_is_anonymous: bool = False):
        if num_oov_buckets <= 0:
            raise ValueError("`num_oov_buckets` must be > 0; use StaticHashTable.")
        self._oov = int(num_oov_buckets)
        self._table: Optional[StaticHashTable] = None
        if initializer is not None:
            if initializer.key_dtype != STRING and not initializer.key_dtype.is_integer:
                raise TypeError(f"Invalid `key_dtype`, expected one of (tf.int64, tf.string), but got "
                                f"{initializer.key_dtype}.")
            if not initializer.value_dtype.is_integer:   # (int32 too: int64 is held as int32 without x64)
                raise TypeError(f"Invalid `value_dtype`, expected <dtype: 'int64'> but got {initializer.value_dtype}.")
            self._table = StaticHashTable(initializer, -1)
            self.key_dtype = initializer.key_dtype if lookup_key_dtype is None else _dtypes.as_dtype(lookup_key_dtype)
        else:
            self.key_dtype = STRING if lookup_key_dtype is None else _dtypes.as_dtype(lookup_key_dtype)
        self.value_dtype = _dtypes.int64
        self.name = name

    def size(self, name: Optional[str] = None) -> Tensor:
        n = 0 if self._table is None else len(self._table._table)
        return convert_to_tensor(n + self._oov, _dtypes.int64)

    def _buckets(self, keys: np.ndarray) -> np.ndarray:
        base = 0 if self._table is None else len(self._table._table)
        out = np.empty(keys.shape, np.int64)
        for i, k in np.ndenumerate(keys):
            out[i] = base + fingerprint64(k if isinstance(k, bytes) else _decimal(k)) % self._oov
        return out.astype(_dtypes.storage_dtype(np.int64))

    def lookup(self, keys: Any, name: Optional[str] = None) -> Any:
        """The ids of ``keys``: the table's, else an out-of-vocabulary bucket."""
        if self.key_dtype == STRING:
            a = _string_keys(keys, self.key_dtype)
            buckets = self._buckets(a)
            if self._table is not None:
                table = self._table._table
                for i, k in np.ndenumerate(a):
                    if k in table:
                        buckets[i] = table[k]
            return numeric_result(buckets)
        k = _integer_keys(keys, self.key_dtype)
        buckets = numpy_function(lambda a: self._buckets(np.asarray(a)), [k], _dtypes.int64, stateful=False)
        buckets = reshape(buckets, shape(k))
        if self._table is None:
            return buckets
        ids = self._table._lookup(k, -1)
        return where(not_equal(ids, -1), ids, cast(buckets, ids.dtype))

    __getitem__ = lookup


class MutableHashTable:
    """``tf.lookup.experimental.MutableHashTable(key_dtype, value_dtype, default_value)``: a host
    dictionary (see the module docstring)."""

    def __init__(self, key_dtype: Any, value_dtype: Any, default_value: Any, name: Optional[str] = None,
                 checkpoint: bool = True, experimental_is_anonymous: bool = False):
        self.key_dtype, self.value_dtype = _dtypes.as_dtype(key_dtype), _dtypes.as_dtype(value_dtype)
        self._default = _default(default_value, self.value_dtype)
        self._table: Dict[Any, Any] = {}
        self.name = name

    def _keys(self, keys: Any) -> np.ndarray:
        if self.key_dtype == STRING:
            return _string_keys(keys, self.key_dtype)
        return np.asarray(_integer_keys(keys, self.key_dtype))

    def _values(self, values: Any) -> np.ndarray:
        if self.value_dtype == STRING:
            return hostops.host_strings(values, "MutableHashTable.insert", "values")
        t = values if isinstance(values, Tensor) else convert_to_tensor(values)
        if t.dtype != self.value_dtype and not (t.dtype.is_integer and self.value_dtype.is_integer
                                                and np.dtype(t.dtype.as_numpy_dtype) == np.dtype(
                                                    _dtypes.storage_dtype(self.value_dtype.as_numpy_dtype))):
            raise ValueError(f"values: Tensor conversion requested dtype {self.value_dtype.name} for Tensor with "
                             f"dtype {t.dtype.name}")
        return np.asarray(t)

    def insert(self, keys: Any, values: Any, name: Optional[str] = None) -> None:
        k, v = self._keys(keys), self._values(values)
        if k.shape != v.shape:
            raise InvalidArgumentError(None, None, f"Expected shape {list(k.shape)} for values, got {list(v.shape)} "
                                       "(arguments `keys` and `values`)")
        for a, b in zip(k.reshape(-1).tolist(), v.reshape(-1).tolist()):
            self._table[a] = b

    def remove(self, keys: Any, name: Optional[str] = None) -> None:
        for a in self._keys(keys).reshape(-1).tolist():
            self._table.pop(a, None)

    def lookup(self, keys: Any, dynamic_default_values: Any = None, name: Optional[str] = None) -> Any:
        k = self._keys(keys)
        d = self._default if not isinstance(self._default, Tensor) else self._default.numpy()
        out = np.empty(k.shape, object if self.value_dtype == STRING else _dtypes.storage_dtype(self.value_dtype.as_numpy_dtype))
        for i, key in np.ndenumerate(k):
            out[i] = self._table.get(key.item() if isinstance(key, np.generic) else key, d)
        return hostops.host_result(out) if self.value_dtype == STRING else numeric_result(out)

    __getitem__ = lookup

    def size(self, name: Optional[str] = None) -> Tensor:
        return convert_to_tensor(len(self._table), _dtypes.int64)

    def export(self, name: Optional[str] = None) -> Tuple[Any, Any]:
        keys = list(self._table)
        return (_as_value(_array(keys, self.key_dtype), self.key_dtype),
                _as_value(_array([self._table[k] for k in keys], self.value_dtype), self.value_dtype))


lookup = new_module(
    "tapejax.lookup", "``tf.lookup``: tables from keys to values (tapejax.data.lookup).",
    {"KeyValueTensorInitializer": KeyValueTensorInitializer, "StaticHashTable": StaticHashTable,
     "StaticVocabularyTable": StaticVocabularyTable, "TextFileIndex": TextFileIndex,
     "TextFileInitializer": TextFileInitializer,
     "experimental": new_module("tapejax.lookup.experimental", "``tf.lookup.experimental``",
                                {"DenseHashTable": DenseHashTable, "MutableHashTable": MutableHashTable})})

__all__ = ["DenseHashTable", "KeyValueTensorInitializer", "MutableHashTable", "StaticHashTable", "StaticVocabularyTable", "TextFileIndex",
           "TextFileInitializer", "fingerprint", "lookup"]
