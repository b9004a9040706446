"""``tf.sparse.bincount``, ``tf.sparse.cross_hashed`` and ``tf.sparse.mask``: sparse results whose
entries depend on the input values, so they are computed on the host from concrete inputs
(eagerly, in dataset functions) as ``sparse_ops``' value-dependent ops are; inside a
``tapejax.function`` trace they raise ``TracedSparseError`` (a ValueError).

* ``bincount``: counts (or summed ``weights``, or 1 with ``binary_output``) of each value, over
  all values (``axis=0``, a vector) or per row (``axis=-1``, a ``[rows, size]`` matrix), of a
  dense integer Tensor or a SparseTensor; ``size = max(max value + 1, minlength)`` capped by
  ``maxlength`` (larger values dropped), as TF's ``DenseCountSparseOutput``.
* ``cross_hashed``: the crosses of each row's features, one per combination in TF's order (the
  first input's features varying slowest), each ``FingerprintCat64`` of ``hash_key`` and the
  features' hashes (a string's ``Fingerprint64``, an integer as it is), modulo ``num_buckets``
  (``farmhash``; equal to TF's).  Inputs: SparseTensors and dense Tensors of integers, and dense
  host string arrays (``[rows, n]`` NumPy bytes: tapejax has no string Tensors, so a string
  SparseTensor and ``tf.sparse.cross``, whose result is strings, are not available).  Hashes
  span 63 bits: ``num_buckets=0`` needs JAX's 64-bit mode.
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


def _features(t: Any, n_rows: Optional[int]) -> "tuple[List[List[Any]], int]":
    """Each row's features (strings as bytes, integers as ints) and the number of rows."""
    if isinstance(t, SparseTensor):
        idx = host_indices(t, "cross_hashed")
        vals = _host(t.values, "cross_hashed", "inputs")
        rows = int(t.shape.as_list()[0] or 0)
        out: List[List[Any]] = [[] for _ in range(rows)]
        for (r, *_), v in zip(idx.tolist(), vals.tolist()):
            out[r].append(v)
        return out, rows
    if isinstance(t, np.ndarray) and t.dtype.kind in "OSU":
        arr = t
    else:
        arr = _host(t if isinstance(t, Tensor) else convert_to_tensor(t), "cross_hashed", "inputs")
    if arr.ndim != 2:
        raise ValueError(f"Expected a rank-2 dense input to tf.sparse.cross_hashed; got shape {list(arr.shape)}")
    return [[v.encode() if isinstance(v, str) else v for v in row] for row in arr.tolist()], arr.shape[0]


def _feature_hash(v: Any) -> int:
    if isinstance(v, (bytes, np.bytes_)):
        return fingerprint64(bytes(v))
    return int(v) & (2**64 - 1)


def cross_hashed(inputs: Sequence[Any], num_buckets: int = 0, hash_key: Optional[int] = None,
                 name: Optional[str] = None) -> SparseTensor:
    """``tf.sparse.cross_hashed`` (see the module docstring)."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("Inputs must be a list")
    if num_buckets < 0:
        raise InvalidArgumentError(None, None, f"num_buckets must be >= 0, got {num_buckets} (argument `num_buckets`)")
    if (num_buckets == 0 or num_buckets > 2**31) and not _dtypes.x64_enabled():
        raise ValueError("tf.sparse.cross_hashed: hashes of up to 63 bits (num_buckets=0 or above 2**31) need JAX's "
                         "64-bit mode (jax.config.update('jax_enable_x64', True)); or give num_buckets below 2**31")
    columns = [_features(t, None) for t in inputs]
    n_rows = {rows for _, rows in columns}
    if len(n_rows) > 1:
        raise InvalidArgumentError(None, None, f"Expected batch size {columns[0][1]} for every input, got "
                                   f"{sorted(n_rows)} (argument `inputs`)")
    rows = columns[0][1] if columns else 0
    key = _DEFAULT_HASH_KEY if hash_key is None else int(hash_key)
    indices: List[List[int]] = []
    values: List[int] = []
    width = 0
    for r in range(rows):
        combos = itertools.product(*[[_feature_hash(f) for f in col[r]] for col, _ in columns])
        k = 0
        for combo in combos:
            h = key
            for fh in combo:
                h = fingerprint_cat64(h, fh)
            values.append(h % num_buckets if num_buckets > 0 else h % _INT64_MAX)
            indices.append([r, k])
            k += 1
        width = max(width, k)
    data = np.asarray(values, np.int64)
    return SparseTensor(np.asarray(indices, np.int64).reshape(-1, 2),
                        convert_to_tensor(data.astype(_dtypes.storage_dtype(np.int64))), [rows, width])


def mask(a: IndexedSlices, mask_indices: Any, name: Optional[str] = None) -> IndexedSlices:
    """``tf.sparse.mask``: ``a`` without the slices at ``mask_indices``."""
    if not isinstance(a, IndexedSlices):
        raise TypeError(f"tf.sparse.mask: `a` must be an IndexedSlices; got {type(a).__name__}")
    idx = _host(convert_to_tensor(a.indices), "mask", "a.indices")
    drop = set(_host(convert_to_tensor(mask_indices), "mask", "mask_indices").reshape(-1).tolist())
    keep = np.asarray([k for k, i in enumerate(idx.tolist()) if i not in drop], np.int32)
    values = gather(convert_to_tensor(a.values), keep)   # (recorded: a tape follows the kept values)
    return IndexedSlices(values, convert_to_tensor(idx[keep]), a.dense_shape)


__all__ = ["bincount", "cross_hashed", "mask"]
