"""``tf.lookup.experimental.DenseHashTable``: TF's open-addressing hash table, on the host.

TF's table (``MutableDenseHashTable``) keeps its keys and values in two bucket arrays whose
layout ``export()`` hands out, so this one keeps the same layout by the same rules, and
``export()`` equals TF's bucket for bucket:

* a key's hash is the integer itself (as an unsigned 64-bit number), a string's TF's ``Hash64``
  (``farmhash.tf_hash64``), a vector key's the ``Hash64Combine`` of its elements' hashes;
  its first bucket is ``hash & (num_buckets - 1)``, then quadratic probing (``+1, +2, ...``);
* ``insert`` updates the first bucket holding the key, or fills the first empty or deleted
  bucket met before it (so a key erased and inserted again may stand twice, as in TF: the
  first one wins lookups); before inserting ``n`` keys the bucket count doubles until
  ``size + n <= 0.8 * num_buckets``, and the old buckets are inserted again in order;
* ``erase`` writes ``deleted_key`` over the key's bucket (its value stays); ``lookup`` stops at
  an empty bucket (the default value) and steps over deleted ones;
* ``export()`` is ``(keys [num_buckets, key_size], values [num_buckets, value_size])``, empty
  buckets holding ``empty_key`` and zeros.

Keys are ``int32`` / ``int64`` (a scalar or a vector each, the shape of ``empty_key``) or strings
(host bytes); values ``int32`` / ``int64`` / ``float32`` / ``float64`` / ``bool`` (scalars or
vectors: ``default_value``'s shape), the pairs TF has kernels for (others: TF's NotFoundError).
TF's errors: ``empty_key`` equal to ``deleted_key``, either used as a key, shapes that do not
fit, a bucket count that is not a power of 2 of at least 4: InvalidArgumentError; a key Tensor
of another dtype: ValueError (``erase``: TypeError).  Unlike TF, an insert that fails changes
nothing (TF has inserted the keys before the bad one).  The table runs eagerly: inside
``tapejax.function`` its methods raise TypeError (TF stages them as resource ops, which tapejax
does not have); a dataset function that uses one runs eagerly per element (tapejax first runs
such a function once on zeros to learn its output: a table whose ``empty_key`` or
``deleted_key`` is 0 raises there, as a lookup of its empty key does; TF traces the function
instead).
"""
from typing import Any, Optional, Tuple

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, NotFoundError
from ..core.tensor import Tensor
from ..ops.farmhash import tf_hash64
from ..ops.sparse_tensor import is_traced
from . import hostops
from .hostvalues import numeric_result

_M64 = (1 << 64) - 1
_MAX_LOAD = 0.8
_DEFAULT_BUCKETS = 2 ** 17
_KEYS = ("int32", "int64", "string")
_VALUES = ("int32", "int64", "float32", "float64", "bool")


def _combine(a: int, b: int) -> int:
    """TF's ``Hash64Combine``."""
    return (a ^ ((b + 0x9E3779B97F4A7800 + ((a << 10) & _M64) + (a >> 4)) & _M64)) & _M64


def _shape(dims: Tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


class DenseHashTable:
    """``tf.lookup.experimental.DenseHashTable(key_dtype, value_dtype, default_value, empty_key,
    deleted_key, initial_num_buckets=None)`` (see the module docstring)."""

    def __init__(self, key_dtype: Any, value_dtype: Any, default_value: Any, empty_key: Any, deleted_key: Any,
                 initial_num_buckets: Optional[int] = None, name: str = "MutableDenseHashTable",
                 checkpoint: bool = True, experimental_is_anonymous: bool = False):
        self._key_dtype, self._value_dtype = _dtypes.as_dtype(key_dtype), _dtypes.as_dtype(value_dtype)
        self._strings = self._key_dtype.name == "string"
        default = self._host(default_value, self._value_dtype, "default_value", TypeError)
        empty = self._host(empty_key, self._key_dtype, "empty_key", TypeError)
        deleted = self._host(deleted_key, self._key_dtype, "deleted_key", TypeError)
        if self._key_dtype.name not in _KEYS or self._value_dtype.name not in _VALUES or (
                self._key_dtype.name == "int32" and self._value_dtype.name in ("int64", "bool")):
            raise NotFoundError(None, None, f"Could not find device for node: MutableDenseHashTableV2 with key_dtype="
                                f"{self._key_dtype.name}, value_dtype={self._value_dtype.name} (no TF kernel: keys "
                                f"{_KEYS}, values {_VALUES}; arguments `key_dtype`, `value_dtype`)")
        if default.ndim > 1:
            raise InvalidArgumentError(None, None, f"Empty value must be a scalar or a vector, got shape "
                                       f"{_shape(default.shape)} (argument `default_value`)")
        if empty.ndim > 1:
            raise InvalidArgumentError(None, None, f"Empty key must be a scalar or a vector, got shape "
                                       f"{_shape(empty.shape)} (argument `empty_key`)")
        if deleted.shape != empty.shape:
            raise InvalidArgumentError(None, None, f"Empty and deleted keys must have same shape, got shapes: "
                                       f"{_shape(empty.shape)} and {_shape(deleted.shape)} (argument `deleted_key`)")
        if np.array_equal(empty, deleted):
            raise InvalidArgumentError(None, None, "Empty and deleted keys cannot be equal (arguments `empty_key`, "
                                       "`deleted_key`)")
        n = _DEFAULT_BUCKETS if initial_num_buckets is None else int(initial_num_buckets)
        self._check_buckets(n)
        self._key_shape, self._value_shape = empty.shape, default.shape
        self._key_size, self._value_size = max(empty.size, 1), max(default.size, 1)
        self._empty, self._deleted = tuple(empty.reshape(-1).tolist()), tuple(deleted.reshape(-1).tolist())
        self._default = default.reshape(-1)
        self._name = None   # (TF's eager table reports None)
        self._allocate(n)

    # -- TF's attributes ------------------------------------------------------------------------
    @property
    def key_dtype(self) -> Any:
        return self._key_dtype

    @property
    def value_dtype(self) -> Any:
        return self._value_dtype

    @property
    def name(self) -> Optional[str]:
        return self._name

    def size(self, name: Optional[str] = None) -> Tensor:
        """The number of entries (int64)."""
        return convert_to_tensor(self._count, _dtypes.int64)

    # -- the buckets ----------------------------------------------------------------------------
    @staticmethod
    def _check_buckets(n: int) -> None:
        if n < 4 or n & (n - 1):
            raise InvalidArgumentError(None, None, f"Number of buckets must be at least 4 and a power of 2, got: {n} "
                                       "(argument `initial_num_buckets`)")

    def _allocate(self, n: int) -> None:
        self._n, self._count = n, 0
        self._keys = [self._empty] * n
        zero = self._default.dtype.type(0)
        self._values = [(zero,) * self._value_size for _ in range(n)]

    def _hash(self, key: tuple) -> int:
        hashes = [tf_hash64(k) if self._strings else int(k) & _M64 for k in key]
        if len(hashes) == 1:
            return hashes[0]
        h = 0
        for x in hashes:
            h = _combine(h, x)
        return h

    def _probe(self, key: tuple):
        mask = self._n - 1
        b, probes = self._hash(key) & mask, 0
        while True:
            yield b
            probes += 1
            b = (b + probes) & mask
            if probes >= self._n:   # (never: the load factor keeps an empty bucket)
                raise InvalidArgumentError(None, None, "Internal error in MutableDenseHashTable probing")

    def _put(self, key: tuple, value: tuple) -> None:
        for b in self._probe(key):
            k = self._keys[b]
            if k == key:
                self._values[b] = value
                return
            if k == self._empty or k == self._deleted:
                self._keys[b], self._values[b] = key, value
                self._count += 1
                return

    def _find(self, key: tuple) -> Optional[int]:
        for b in self._probe(key):
            k = self._keys[b]
            if k == key:
                return b
            if k == self._empty:
                return None
        return None

    # -- arguments ------------------------------------------------------------------------------
    def _host(self, value: Any, dtype: Any, arg: str, error: type) -> np.ndarray:
        """``value`` as a NumPy array of ``dtype`` (bytes objects for strings)."""
        if is_traced(value):
            # (a dataset function catches this TypeError and runs eagerly per element)
            raise hostops.TracedStringError(f"DenseHashTable: `{arg}` is traced (inside tapejax.function); TF stages "
                                            "table ops as resource ops, which tapejax does not have: use the table "
                                            "eagerly or in a dataset map")
        if dtype.name == "string":
            if isinstance(value, Tensor):
                raise error(f"{arg}: Tensor conversion requested dtype string for Tensor with dtype {value.dtype.name}")
            return hostops.host_strings(value, "DenseHashTable", arg)
        if isinstance(value, Tensor):
            same = value.dtype == dtype or (value.dtype.is_integer and dtype.is_integer and np.dtype(
                value.dtype.as_numpy_dtype) == np.dtype(_dtypes.storage_dtype(dtype.as_numpy_dtype)))
            if not same:
                raise error(f"{arg}: Tensor conversion requested dtype {dtype.name} for Tensor with dtype "
                            f"{value.dtype.name}")
            return np.asarray(value.numpy()).astype(dtype.as_numpy_dtype)
        a = np.asarray(value)
        ok = {"b": dtype.is_bool, "i": dtype.is_integer or dtype.is_floating, "u": dtype.is_integer or dtype.is_floating,
              "f": dtype.is_floating and a.dtype.kind == "f" or (dtype.is_integer and bool(np.all(np.mod(a, 1) == 0)))}
        if a.dtype.kind not in ok or not ok[a.dtype.kind]:
            raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name} (argument `{arg}`)")
        return a.astype(dtype.as_numpy_dtype)

    def _rows(self, keys: np.ndarray, op: str) -> Tuple[int, np.ndarray]:
        """``keys`` as rows of ``key_size`` elements, after TF's shape check."""
        n = 1 if keys.ndim == 0 else keys.shape[0]
        if keys.size != n * self._key_size:
            raise InvalidArgumentError(None, None, f"Expected key shape {_shape((n,) + self._key_shape)} got "
                                       f"{_shape(keys.shape)} (argument `keys` of {op})")
        rows = keys.reshape(n, self._key_size)
        for r in rows:
            key = tuple(r.tolist())
            if key == self._empty:
                raise InvalidArgumentError(None, None, f"Using the empty_key as a table key is not allowed (argument "
                                           f"`keys` of {op})")
            if key == self._deleted:
                raise InvalidArgumentError(None, None, f"Using the deleted_key as a table key is not allowed "
                                           f"(argument `keys` of {op})")
        return n, rows

    def _lead(self, keys: np.ndarray) -> Tuple[int, ...]:
        """The key Tensor's shape less the key's own dimensions."""
        return keys.shape[:keys.ndim - len(self._key_shape)] if self._key_shape else keys.shape

    # -- the ops --------------------------------------------------------------------------------
    def insert(self, keys: Any, values: Any, name: Optional[str] = None) -> None:
        """Set ``values`` for ``keys`` (see the module docstring for where they go)."""
        k = self._host(keys, self._key_dtype, "keys", ValueError)
        v = self._host(values, self._value_dtype, "values", ValueError)
        want = self._lead(k) + self._value_shape
        if v.shape != want:
            raise InvalidArgumentError(None, None, f"Expected shape {_shape(want)} for value, got {_shape(v.shape)} "
                                       "(argument `values`)")
        n, rows = self._rows(k, "insert")
        vals = v.reshape(n, self._value_size)
        pending = self._count + n
        if pending > self._n * _MAX_LOAD:
            grow = self._n
            while pending > grow * _MAX_LOAD:
                grow <<= 1
            old = [(key, val) for key, val in zip(self._keys, self._values)
                   if key != self._empty and key != self._deleted]
            self._allocate(grow)
            for key, val in old:
                self._put(key, val)
        for r, val in zip(rows, vals):
            self._put(tuple(r.tolist()), tuple(val.tolist()))

    insert_or_assign = insert

    def erase(self, keys: Any, name: Optional[str] = None) -> None:
        """Remove ``keys`` (absent keys are ignored)."""
        k = self._host(keys, self._key_dtype, "keys", TypeError)
        if k.ndim == 0:
            raise InvalidArgumentError(None, None, f"Expected key shape {_shape((1,) + self._key_shape)} got [] "
                                       "(argument `keys` of erase: at least a vector)")
        _, rows = self._rows(k, "erase")
        for r in rows:
            b = self._find(tuple(r.tolist()))
            if b is not None:
                self._keys[b] = self._deleted
                self._count -= 1

    remove = erase

    def lookup(self, keys: Any, name: Optional[str] = None) -> Tensor:
        """The values of ``keys`` (``default_value`` for absent keys): ``keys``' shape (less the
        key's dimensions) + the value's shape."""
        k = self._host(keys, self._key_dtype, "keys", ValueError)
        n, rows = self._rows(k, "lookup")
        out = np.empty((n, self._value_size), self._default.dtype)
        for i, r in enumerate(rows):
            b = self._find(tuple(r.tolist()))
            out[i] = self._default if b is None else self._values[b]
        return self._result(out.reshape(self._lead(k) + self._value_shape), self._value_dtype)

    def export(self, name: Optional[str] = None) -> Tuple[Any, Tensor]:
        """``(keys, values)``: the buckets, ``[num_buckets, key_size]`` and
        ``[num_buckets, value_size]``."""
        keys = np.empty((self._n, self._key_size), object if self._strings else self._key_dtype.as_numpy_dtype)
        keys[:] = self._keys
        values = np.asarray(self._values, self._default.dtype).reshape(self._n, self._value_size)
        key_out = hostops.host_result(keys) if self._strings else self._result(keys, self._key_dtype)
        return key_out, self._result(values, self._value_dtype)

    @staticmethod
    def _result(a: np.ndarray, dtype: Any) -> Tensor:
        return numeric_result(a.astype(_dtypes.storage_dtype(dtype.as_numpy_dtype)))


__all__ = ["DenseHashTable"]
