"""Row partitions of ``tf.RaggedTensor``: ``row_splits`` made from the other encodings, read back
as them, and TF's ``validate=True`` checks.

A ragged dimension is one integer vector, ``row_splits`` (``[nrows + 1]``, starting at 0,
non-decreasing, ending at the number of values), as TF's ``RowPartition`` stores it.  Every other
encoding (row lengths, value row ids, row starts / limits) is converted to splits by a recorded,
non-differentiable op whose output shape is static (the number of rows is always static: it is a
length of a Tensor, or, for ``from_value_rowids`` without ``nrows``, read on the host), so the
conversions run inside ``tapejax.function`` too.

The checks TF's ``validate=True`` makes (splits start at zero, are monotonic, end at the number of
values; lengths and row ids are non-negative, row ids sorted) read the partition on the host when
it is concrete and raise ``InvalidArgumentError`` naming the factory and the argument; inside a
trace they are skipped (TF's checks are runtime asserts there, which XLA cannot raise).
Value-dependent results (``to_tensor``'s bounding shape, indexing rows) read splits on the host
with ``host_splits``, which raises ``TracedRaggedError`` (a ValueError) inside a trace.
"""
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from .sparse_tensor import is_traced


class TracedRaggedError(ValueError):
    """A ragged op whose result's shape depends on the row partition's values, called inside a
    JAX trace (where they are unknown)."""


def _lengths_to_splits(lengths):
    return jnp.concatenate([jnp.zeros(1, lengths.dtype), jnp.cumsum(lengths)])


def _rowids_to_splits(ids, *, nrows):
    return jnp.searchsorted(ids, jnp.arange(nrows + 1, dtype=ids.dtype), side="left").astype(ids.dtype)


def _splits_to_rowids(splits, *, n):
    return (jnp.searchsorted(splits, jnp.arange(n, dtype=splits.dtype), side="right") - 1).astype(splits.dtype)


LENGTHS_TO_SPLITS = define("RaggedLengthsToSplits", _lengths_to_splits, differentiable=False)
ROWIDS_TO_SPLITS = define("RaggedRowIdsToSplits", _rowids_to_splits, differentiable=False)
STARTS_TO_SPLITS = define("RaggedStartsToSplits",
                          lambda s, *, n: jnp.concatenate([s, jnp.full(1, n, s.dtype)]), differentiable=False)
LIMITS_TO_SPLITS = define("RaggedLimitsToSplits",
                          lambda lim: jnp.concatenate([jnp.zeros(1, lim.dtype), lim]), differentiable=False)
SPLITS_TO_LENGTHS = define("RaggedSplitsToLengths", lambda s: s[1:] - s[:-1], differentiable=False)
SPLITS_TO_ROWIDS = define("RaggedSplitsToRowIds", _splits_to_rowids, differentiable=False)
SPLITS_HEAD = define("RaggedSplitsStarts", lambda s: s[:-1], differentiable=False)
SPLITS_TAIL = define("RaggedSplitsLimits", lambda s: s[1:], differentiable=False)
SPLITS_CAST = define("RaggedSplitsCast", lambda s, *, dtype: s.astype(dtype), differentiable=False)
COMPOSE_SPLITS = define("RaggedComposeSplits", lambda inner, outer: inner[outer], differentiable=False)
SCALE_SPLITS = define("RaggedScaleSplits", lambda s, *, m: s * m, differentiable=False)


def storage(splits_dtype: _dtypes.DType) -> Any:
    """The dtype a partition of ``splits_dtype`` (int64 or int32) is held in (int64 as int32
    without JAX's 64-bit mode)."""
    return _dtypes.storage_dtype(splits_dtype._np, "RaggedTensor row partition")


def splits_dtype_arg(dtype: Any, arg: str = "row_splits_dtype") -> _dtypes.DType:
    d = _dtypes.as_dtype(dtype)
    if d.name not in ("int32", "int64"):
        raise ValueError(f"{arg} must be int32 or int64; got {d.name}")
    return d


def partition_arg(x: Any, arg: str, dtype: Optional[_dtypes.DType]) -> "tuple[Tensor, _dtypes.DType]":
    """A partition argument (``row_splits``, ``row_lengths`` ...) as a rank-1 integer Tensor held in
    its storage dtype, and its declared dtype: ``dtype`` when the values already fix it, else the
    Tensor's (int64 for Python ints, as TF's; without JAX's 64-bit mode int32 and int64 Tensors are
    one dtype, read as int64)."""
    if isinstance(x, Tensor):
        t = x
    else:
        a = np.asarray(x)
        if a.size and a.dtype.kind not in "iu":
            raise ValueError(f"{arg} must have dtype int32 or int64; got {a.dtype.name}")
        t = convert_to_tensor(x, dtype=dtype or (_dtypes.int32 if a.dtype == np.int32 else _dtypes.int64))
    if t.dtype.name not in ("int32", "int64"):
        raise ValueError(f"{arg} must have dtype int32 or int64; got {t.dtype.name}")
    own = _dtypes.as_dtype(t.dtype) if _dtypes.x64_enabled() else _dtypes.int64
    if dtype is not None and _dtypes.x64_enabled() and own != dtype:
        raise ValueError(f"dtype mismatch: `{arg}` has dtype {own.name} and the inner RaggedTensor's row partition "
                         f"{dtype.name} (use RaggedTensor.with_row_splits_dtype)")
    declared = dtype or own
    if t.ndim != 1:
        raise ValueError(f"Shape {tuple(t.shape)} must have rank 1 (argument `{arg}`)")
    store = storage(declared)
    if t.dtype.name != np.dtype(store).name:
        t = bind(SPLITS_CAST, t, dtype=np.dtype(store).name)
    return t, declared


def host_splits(splits: Tensor, op: str) -> np.ndarray:
    """A partition's values on the host (int64), or ``TracedRaggedError`` inside a trace."""
    if is_traced(splits):
        raise TracedRaggedError(f"{op}: its result's shape depends on the RaggedTensor's row partition, whose values "
                                "are unknown inside a tapejax.function trace (JAX needs static shapes); call it "
                                "eagerly (or in a tf.data map), or pass a static `shape` where it takes one.")
    return np.asarray(splits.numpy(), np.int64)


def _bad(factory: str, what: str, msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(None, None, f"Arguments to {factory} do not form a valid RaggedTensor: {what}: {msg}")


def validate_splits(splits: Tensor, nvals: int, factory: str, arg: str = "row_splits") -> None:
    """TF's checks of ``row_splits`` (skipped inside a trace)."""
    if is_traced(splits):
        return
    s = host_splits(splits, factory)
    if s.size == 0:
        raise _bad(factory, "zero", f"`{arg}` must not be empty (it holds nrows + 1 entries)")
    if s[0] != 0:
        raise _bad(factory, "zero", f"`{arg}`[0] must be 0; got {int(s[0])}")
    step = np.diff(s)
    if (step < 0).any():
        i = int(np.nonzero(step < 0)[0][0]) + 1
        raise _bad(factory, "monotonic", f"`{arg}` must be non-decreasing; got {arg}[{i}] = {int(s[i])} < "
                   f"{arg}[{i - 1}] = {int(s[i - 1])}")
    if s[-1] != nvals:
        raise _bad(factory, "nvals", f"`{arg}`[-1] must equal the number of values ({nvals}); got {int(s[-1])}")


def validate_nonnegative(t: Tensor, factory: str, arg: str) -> Optional[np.ndarray]:
    """``t``'s values on the host after checking they are >= 0 (None inside a trace)."""
    if is_traced(t):
        return None
    a = host_splits(t, factory)
    if (a < 0).any():
        i = int(np.nonzero(a < 0)[0][0])
        raise _bad(factory, "non-negative", f"`{arg}` must be non-negative; got {arg}[{i}] = {int(a[i])}")
    return a


def from_lengths(lengths: Tensor, nvals: int, factory: str, validate: bool) -> Tensor:
    if validate:
        a = validate_nonnegative(lengths, factory, "row_lengths")
        if a is not None and int(a.sum()) != nvals:
            raise _bad(factory, "nvals", f"the sum of `row_lengths` ({int(a.sum())}) must equal the number of "
                       f"values ({nvals})")
    return bind(LENGTHS_TO_SPLITS, lengths)


def from_rowids(rowids: Tensor, nrows: Any, nvals: int, factory: str, validate: bool) -> Tensor:
    """Splits from sorted ``value_rowids`` (``nrows``: None, an int or a scalar Tensor, needed on the
    host: the number of rows is a static shape)."""
    if rowids.shape[0] != nvals:
        raise ValueError(f"Dimensions {rowids.shape[0]} and {nvals} are not compatible (`value_rowids` of "
                         f"{factory} must have one entry per value)")
    ids = None if is_traced(rowids) else host_splits(rowids, factory)
    if nrows is None:
        if ids is None:
            host_splits(rowids, f"{factory} without `nrows`")
        nrows = int(ids[-1]) + 1 if ids is not None and ids.size else 0
    else:
        if isinstance(nrows, Tensor):
            nrows = int(host_splits(nrows, f"{factory}'s `nrows`").reshape(()))
        nrows = int(nrows)
        if nrows < 0:
            raise ValueError(f"Expected nrows >= 0; got nrows={nrows} (argument `nrows` of {factory})")
        if ids is not None and ids.size and nrows < int(ids[-1]) + 1:
            raise ValueError(f"Expected nrows >= value_rowids[-1] + 1; got nrows={nrows}, "
                             f"value_rowids[-1]={int(ids[-1])} (argument `nrows` of {factory})")
    if validate and ids is not None:
        validate_nonnegative(rowids, factory, "value_rowids")
        step = np.diff(ids)
        if (step < 0).any():
            i = int(np.nonzero(step < 0)[0][0]) + 1
            raise _bad(factory, "sorted", f"`value_rowids` must be sorted; got value_rowids[{i}] = {int(ids[i])} < "
                       f"value_rowids[{i - 1}] = {int(ids[i - 1])}")
    return bind(ROWIDS_TO_SPLITS, rowids, nrows=nrows)


def segment_ids(splits: Tensor, nvals: int) -> Tensor:
    """The row of each value (``value_rowids``) from ``splits``."""
    return bind(SPLITS_TO_ROWIDS, splits, n=nvals)


__all__ = ["COMPOSE_SPLITS", "SCALE_SPLITS", "LENGTHS_TO_SPLITS", "LIMITS_TO_SPLITS", "ROWIDS_TO_SPLITS", "SPLITS_CAST", "SPLITS_HEAD",
           "SPLITS_TAIL", "SPLITS_TO_LENGTHS", "SPLITS_TO_ROWIDS", "STARTS_TO_SPLITS", "TracedRaggedError",
           "from_lengths", "from_rowids", "host_splits", "partition_arg", "segment_ids", "splits_dtype_arg",
           "storage", "validate_nonnegative", "validate_splits"]
