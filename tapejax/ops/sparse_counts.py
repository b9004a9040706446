"""``tf.sparse.bincount``, ``tf.sparse.cross`` / ``cross_hashed`` and ``tf.sparse.mask``: sparse
results whose entries depend on the input values, so they are computed on the host from concrete inputs
(eagerly, in dataset functions) as ``sparse_ops``' value-dependent ops are; inside a
``tapejax.function`` trace they raise ``TracedSparseError`` (a ValueError).

* ``bincount``: counts (or summed ``weights``, or 1 with ``binary_output``) of each value, over
  all values (``axis=0``, a vector) or per row (``axis=-1``, a ``[rows, size]`` matrix), of a
  dense integer Tensor or a SparseTensor; ``size = max(max value + 1, minlength)`` capped by
  ``maxlength`` (larger values dropped), as TF's ``DenseCountSparseOutput``.
* ``cross`` / ``cross_hashed``: the crosses of each row's features, one per combination in
  TF's order (the SparseTensors first, then the dense inputs, as TF's ``SparseCrossV2`` takes
  them; the first varying slowest): ``cross`` joins the features' text (an integer in decimal)
  with ``separator`` into a string SparseTensor (its values a NumPy object array of bytes, on the
  host: ``sparse_tensor``); ``cross_hashed`` gives each cross the ``FingerprintCat64`` of
  ``hash_key`` and the features' hashes (a string's ``Fingerprint64``, an integer as it is),
  modulo ``num_buckets`` (``farmhash``; equal to TF's).  Inputs: SparseTensors of strings or
  numbers, dense numeric Tensors and dense host string arrays (``[rows, n]`` NumPy bytes);
  numbers are cast to int64 as TF's wrapper does.  Hashes span 63 bits: ``num_buckets=0`` needs
  JAX's 64-bit mode.  A SparseTensor's entries go to the row their index names; TF's kernel
  assumes row-ordered indices (``tf.sparse.reorder`` first) and mixes rows up otherwise.
  ``tf.ragged.cross_hashed`` (``ragged_cross_hashed``) is the same over RaggedTensors of rank 2
  too, crossing the inputs in their order (TF's ``RaggedCross``), a RaggedTensor of int64;
  ``tf.ragged.cross`` (strings in a RaggedTensor) is not here: tapejax has no string tensors.
* ``mask``: the slices of an ``IndexedSlices`` whose index is not in ``mask_indices``.
"""
import itertools
from typing import Any, List, Optional, Sequence

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.indexed_slices import IndexedSlices
from ..core.tensor import Tensor
from .farmhash import fingerprint64, fingerprint_cat64
from .indexing import gather
from .ragged_tensor import RaggedTensor
from .sparse_tensor import SparseTensor, TracedSparseError, host_indices, is_traced

_DEFAULT_HASH_KEY = 0xDECAFCAFFE
_INT64_MAX = 2**63 - 1


def _host(t: Any, op: str, arg: str) -> np.ndarray:
    if is_traced(t):
        raise TracedSparseError(f"tf.sparse.{op}: `{arg}` is traced (inside tapejax.function); its result's size "
                                "depends on the values, which JAX needs to know: call it eagerly or in a dataset map")
    return np.asarray(t if not isinstance(t, Tensor) else t.numpy())


def bincount(values: Any, weights: Any = None, axis: int = 0, minlength: Optional[int] = None,
             maxlength: Optional[int] = None, binary_output: bool = False, name: Optional[str] = None) -> SparseTensor:
    """``tf.sparse.bincount`` (see the module docstring)."""
    if axis not in (0, -1):
        raise ValueError(f"Unsupported axis value {axis}. Only 0 and -1 are currently supported (argument `axis`)")
    if binary_output and weights is not None:
        raise ValueError("Arguments `binary_output` and `weights` are mutually exclusive.")
    if isinstance(values, SparseTensor):
        idx = host_indices(values, "bincount")
        vals = _host(values.values, "bincount", "values")
        w = None if weights is None else _host(weights.values if isinstance(weights, SparseTensor) else weights,
                                              "bincount", "weights").reshape(-1)
        batched = axis == -1 and idx.shape[1] > 1
        n_rows = int(values.shape.as_list()[0] or 0) if batched else 1
        rows = idx[:, 0] if batched else np.zeros(len(idx), np.int64)
    else:
        arr = _host(values if isinstance(values, Tensor) else convert_to_tensor(values), "bincount", "values")
        batched = axis == -1 and arr.ndim > 1
        n_rows = arr.shape[0] if batched else 1
        rows = np.repeat(np.arange(n_rows), arr.size // max(n_rows, 1)) if batched else np.zeros(arr.size, np.int64)
        vals = arr.reshape(-1)
        w = None if weights is None else _host(convert_to_tensor(weights), "bincount", "weights").reshape(-1)
        if w is not None and w.shape != vals.shape:
            raise InvalidArgumentError(None, None, f"Weights and values must have the same shape. Weight shape: "
                                       f"{list(w.shape)}; values shape: {list(arr.shape)}")
    if not np.issubdtype(vals.dtype, np.integer):
        raise InvalidArgumentError(None, None, f"`values` must be integers; got {vals.dtype} (argument `values`)")
    if (vals < 0).any():
        raise InvalidArgumentError(None, None, "Input values must all be non-negative")
    size = int(vals.max()) + 1 if vals.size else 0
    if minlength is not None:
        size = max(size, int(minlength))
    if maxlength is not None:
        size = min(size, int(maxlength))
    keep = vals < size
    rows, vals = rows[keep], vals[keep]
    w = None if w is None else w[keep]
    counts: dict = {}
    for k, (r, v) in enumerate(zip(rows.tolist(), vals.tolist())):
        add = 1 if w is None else w[k]
        counts[(r, v)] = 1 if binary_output else counts.get((r, v), 0) + add
    keys = sorted(counts)
    out_dtype = vals.dtype if w is None else w.dtype   # (TF's: the values' dtype, or the weights')
    data = np.asarray([counts[k] for k in keys], out_dtype)
    if batched:
        indices = np.asarray(keys, np.int64).reshape(-1, 2)
        shape = [n_rows, size]
    else:
        indices = np.asarray([[v] for _, v in keys], np.int64).reshape(-1, 1)
        shape = [size]
    return SparseTensor(indices, convert_to_tensor(data.astype(_dtypes.storage_dtype(out_dtype))), shape)


def _ints(a: np.ndarray) -> np.ndarray:
    """Numeric features as int64, as TF's Python wrapper casts them (floats toward zero)."""
    return np.trunc(a).astype(np.int64) if a.dtype.kind == "f" else a.astype(np.int64)


def _ragged_column(t: RaggedTensor, op: str) -> List[List[Any]]:
    if t.ragged_rank != 1 or len(t.shape) != 2:
        raise ValueError(f"tf.ragged.cross only supports inputs with rank=2 (argument `inputs` of tf.ragged.{op})")
    splits = _host(t.row_splits, op, "inputs").astype(np.int64)
    vals = _ints(_host(t.values, op, "inputs")).tolist()
    return [vals[splits[r]:splits[r + 1]] for r in range(len(splits) - 1)]


def _columns(inputs: Any, op: str, ragged: bool = False) -> "tuple[List[List[List[Any]]], int]":
    """Each input's features per row (strings as bytes, numbers as int64), and the batch size;
    TF's checks and errors.  ``tf.sparse``'s op crosses the SparseTensors first and then the dense
    inputs (TF's ``SparseCrossV2``), ``tf.ragged``'s (``ragged``) keeps the inputs' order."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("Inputs must be a list")
    kinds = (SparseTensor, Tensor, np.ndarray) + ((RaggedTensor,) if ragged else ())
    for t in inputs:
        if not isinstance(t, kinds):
            raise TypeError(f"All inputs must be Tensor or SparseTensor (tapejax: or a NumPy array of strings); got "
                            f"{type(t).__name__} (argument `inputs` of tf.{'ragged' if ragged else 'sparse'}.{op})")
    if ragged:
        batch_sizes = set()
        columns = []
        for t in inputs:
            col = _ragged_column(t, op) if isinstance(t, RaggedTensor) else _columns([t], op)[0][0]
            batch_sizes.add(len(col))
            columns.append(col)
        if len(batch_sizes) > 1:
            raise InvalidArgumentError(None, None, f"inputs must all have the same batch dimension size; got "
                                       f"{sorted(batch_sizes)} (argument `inputs` of tf.ragged.{op})")
        return columns, batch_sizes.pop() if batch_sizes else 0
    sparse = [t for t in inputs if isinstance(t, SparseTensor)]
    dense = [t for t in inputs if not isinstance(t, SparseTensor)]
    batch: Optional[int] = None
    columns = []
    for pos, t in enumerate(sparse):
        idx = host_indices(t, f"tf.sparse.{op}")
        if t.rank != 2:
            raise InvalidArgumentError(None, None, f"Expected D2 of index to be 2 got {t.rank} at position {pos} "
                                       f"(argument `inputs` of tf.sparse.{op})")
        rows = int(t.static_shape(f"tf.sparse.{op}")[0])
        if batch is None:
            batch = rows
        elif rows != batch:
            raise InvalidArgumentError(None, None, f"Expected batch size {batch} got {rows} at position {pos} "
                                       f"(argument `inputs` of tf.sparse.{op})")
        vals = t.values if isinstance(t.values, np.ndarray) else _ints(_host(t.values, op, "inputs"))
        out: List[List[Any]] = [[] for _ in range(rows)]
        for (r, _), v in zip(idx.tolist(), vals.tolist()):
            if 0 <= r < rows:
                out[r].append(v)
        columns.append(out)
    for pos, t in enumerate(dense):
        if isinstance(t, np.ndarray) and t.dtype.kind in "OSU":
            arr = t.astype(object)
        else:
            arr = _host(t if isinstance(t, (Tensor, np.ndarray)) else convert_to_tensor(t), op, "inputs")
            arr = _ints(arr)
        if arr.ndim != 2:
            raise InvalidArgumentError(None, None, f"Dense inputs should be a matrix but received shape "
                                       f"[{','.join(str(d) for d in arr.shape)}] at position {pos} (argument `inputs` "
                                       f"of tf.sparse.{op})")
        if batch is None:
            batch = arr.shape[0]
        elif arr.shape[0] != batch:
            raise InvalidArgumentError(None, None, f"Expected batch size {batch} got {arr.shape[0]} at dense tensor "
                                       f"{pos} (argument `inputs` of tf.sparse.{op})")
        columns.append([[v.encode() if isinstance(v, str) else v for v in row] for row in arr.tolist()])
    return columns, batch or 0


def _crossed(columns: List[List[List[Any]]], rows: int, feature: Any, combine: Any) -> "tuple[np.ndarray, list, int]":
    """Every combination of each row's features (the first column varying slowest), combined:
    (indices, values, the widest row)."""
    indices: List[List[int]] = []
    values: List[Any] = []
    width = 0
    for r in range(rows):
        k = 0
        for combo in itertools.product(*[[feature(f) for f in col[r]] for col in columns]):
            values.append(combine(combo))
            indices.append([r, k])
            k += 1
        width = max(width, k)
    return np.asarray(indices, np.int64).reshape(-1, 2), values, width


def _feature_hash(v: Any) -> int:
    if isinstance(v, (bytes, np.bytes_)):
        return fingerprint64(bytes(v))
    return int(v) & (2**64 - 1)


def _feature_text(v: Any) -> bytes:
    return bytes(v) if isinstance(v, (bytes, np.bytes_)) else str(int(v)).encode()


def cross(inputs: Sequence[Any], name: Optional[str] = None, separator: Any = None) -> SparseTensor:
    """``tf.sparse.cross``: a string SparseTensor of each row's feature crosses, one per
    combination (see the module docstring), the features joined by ``separator`` (``"_X_"``)."""
    sep = "_X_" if separator is None else separator
    if not isinstance(sep, (bytes, str)):
        raise TypeError(f"Cannot convert {separator!r} to EagerTensor of dtype string (argument `separator` of "
                        "tf.sparse.cross)")
    sep_b = sep.encode() if isinstance(sep, str) else sep
    columns, rows = _columns(inputs, "cross")
    indices, values, width = _crossed(columns, rows, _feature_text, sep_b.join)
    data = np.empty(len(values), object)
    data[:] = values
    return SparseTensor._of(indices, data, (rows if columns else 0, width))


def _check_buckets(num_buckets: int) -> None:
    if num_buckets < 0:
        raise InvalidArgumentError(None, None, f"num_buckets must be >= 0, got {num_buckets} (argument `num_buckets`)")
    if (num_buckets == 0 or num_buckets > 2**31) and not _dtypes.x64_enabled():
        raise ValueError("cross_hashed: hashes of up to 63 bits (num_buckets=0 or above 2**31) need JAX's 64-bit "
                         "mode (jax.config.update('jax_enable_x64', True)); or give num_buckets below 2**31")


def _hasher(num_buckets: int, hash_key: Optional[int]) -> Any:
    key = _DEFAULT_HASH_KEY if hash_key is None else int(hash_key)

    def combine(hashes: "tuple[int, ...]") -> int:
        h = key
        for fh in hashes:
            h = fingerprint_cat64(h, fh)
        return h % num_buckets if num_buckets > 0 else h % _INT64_MAX
    return combine


def cross_hashed(inputs: Sequence[Any], num_buckets: int = 0, hash_key: Optional[int] = None,
                 name: Optional[str] = None) -> SparseTensor:
    """``tf.sparse.cross_hashed`` (see the module docstring)."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("Inputs must be a list")
    _check_buckets(num_buckets)
    columns, rows = _columns(inputs, "cross_hashed")
    indices, values, width = _crossed(columns, rows, _feature_hash, _hasher(num_buckets, hash_key))
    data = np.asarray(values, np.int64)
    return SparseTensor(indices, convert_to_tensor(data.astype(_dtypes.storage_dtype(np.int64))),
                        [rows if columns else 0, width])


def ragged_cross_hashed(inputs: Sequence[Any], num_buckets: int = 0, hash_key: Optional[int] = None,
                        name: Optional[str] = None) -> RaggedTensor:
    """``tf.ragged.cross_hashed``: ``cross_hashed``'s crosses as a RaggedTensor (a row per batch
    row), the inputs (RaggedTensors of rank 2, SparseTensors, dense Tensors) crossed in their
    order, as TF's ``RaggedCross``."""
    _check_buckets(num_buckets)
    columns, rows = _columns(inputs, "cross_hashed", ragged=True)
    indices, values, _ = _crossed(columns, rows, _feature_hash, _hasher(num_buckets, hash_key))
    counts = np.bincount(indices[:, 0], minlength=rows) if len(indices) else np.zeros(rows, np.int64)
    store = _dtypes.storage_dtype(np.int64)
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(store)
    return RaggedTensor.from_row_splits(convert_to_tensor(np.asarray(values, np.int64).astype(store), _dtypes.int64),
                                        convert_to_tensor(splits, _dtypes.int64), validate=False)


def mask(a: IndexedSlices, mask_indices: Any, name: Optional[str] = None) -> IndexedSlices:
    """``tf.sparse.mask``: ``a`` without the slices at ``mask_indices``."""
    if not isinstance(a, IndexedSlices):
        raise TypeError(f"tf.sparse.mask: `a` must be an IndexedSlices; got {type(a).__name__}")
    idx = _host(convert_to_tensor(a.indices), "mask", "a.indices")
    drop = set(_host(convert_to_tensor(mask_indices), "mask", "mask_indices").reshape(-1).tolist())
    keep = np.asarray([k for k, i in enumerate(idx.tolist()) if i not in drop], np.int32)
    values = gather(convert_to_tensor(a.values), keep)   # (recorded: a tape follows the kept values)
    return IndexedSlices(values, convert_to_tensor(idx[keep]), a.dense_shape)


__all__ = ["bincount", "cross", "cross_hashed", "mask"]
