"""``tf.ragged``: making RaggedTensors from Python lists and ranges, combining and masking them.

``constant`` follows TF's nesting rules (every scalar at one depth; ``ragged_rank`` defaults to
the depth less one less the ``inner_shape`` rank; ``ragged_rank`` 0 gives a dense Tensor).
``range`` computes its rows on the host (TF's op has no gradient).  ``stack`` / ``concat`` along
axis 0 concatenate partitions (static); along axis 1 they interleave rows (a host-computed
gather).  ``boolean_mask`` keeps the values where a dense or ragged mask is True (host-computed
positions, a recorded gather).  ``map_flat_values`` applies an op to ``flat_values`` after TF's
check that every ragged argument has the same partitions.  ``tf.concat`` of RaggedTensors
dispatches here (``ops._registry.OP_DISPATCH``).
"""
from typing import Any, List, NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, nest as _nest
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import ragged_partition as _rp
from ._registry import OP_DISPATCH
from .array import concat as _dense_concat
from .ragged_dense import from_tensor, gather_rows, host_tensor, take_values
from .ragged_math import same_partitions
from .ragged_tensor import RaggedTensor, dim
from .sparse_tensor import is_traced

_SEG_TO_SPLITS = define("RaggedSegmentIdsToSplits",
                        lambda ids, *, n: _rp._lengths_to_splits(jnp.bincount(ids, length=n).astype(ids.dtype)),
                        differentiable=False)


# -- constant -------------------------------------------------------------------------------------
def _is_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) or (isinstance(x, np.ndarray) and x.ndim > 0)


def _depths(x: Any, d: int, scalars: set, lists: List[int]) -> None:
    if _is_list(x):
        lists.append(d + 1)
        for e in x:
            _depths(e, d + 1, scalars, lists)
    else:
        scalars.add(d)


def _flatten_levels(x: Any, levels: int, lengths: List[List[int]]) -> list:
    if not _is_list(x):
        raise ValueError("all scalar values must have the same nesting depth")
    items = list(x)
    for level in range(levels):
        nxt: list = []
        for it in items:
            if not _is_list(it):
                raise ValueError("all scalar values must have the same nesting depth")
            lengths[level].append(len(it))
            nxt.extend(list(it))
        items = nxt
    return items


def constant(pylist: Any, dtype: Any = None, ragged_rank: Optional[int] = None, inner_shape: Any = None,
             name: Any = None, row_splits_dtype: Any = _dtypes.int64) -> Any:
    """``tf.ragged.constant``: a RaggedTensor from nested Python lists (a dense Tensor where
    ``ragged_rank`` is 0)."""
    sd = _rp.splits_dtype_arg(row_splits_dtype)
    if isinstance(pylist, (RaggedTensor, Tensor)):
        raise TypeError(f"pylist may not be a RaggedTensor or Tensor; got {type(pylist).__name__} (argument `pylist`)")
    scalars: set = set()
    lists: List[int] = []
    _depths(pylist, 0, scalars, lists)
    if len(scalars) > 1:
        raise ValueError("all scalar values must have the same nesting depth")
    has_scalars = bool(scalars)
    depth = scalars.pop() if has_scalars else max(lists or [0])
    inner = None if inner_shape is None else tuple(int(d) for d in inner_shape)
    if ragged_rank is not None and (not isinstance(ragged_rank, int) or ragged_rank < 0):
        raise ValueError(f"Invalid ragged_rank {ragged_rank!r}: must be an int >= 0 (argument `ragged_rank`)")
    if ragged_rank is None:
        ragged_rank = max(0, depth - 1 - (0 if inner is None else len(inner)))
    elif has_scalars and ragged_rank >= depth or (not has_scalars and ragged_rank > depth):
        raise ValueError(f"pylist has scalar values depth {depth}, but ragged_rank={ragged_rank} requires scalar "
                         f"value depth greater than {ragged_rank}")
    if inner is not None and has_scalars and depth != ragged_rank + 1 + len(inner):
        raise ValueError(f"pylist has scalar values depth {depth}, but ragged_rank={ragged_rank} and "
                         f"inner_shape={list(inner)} require depth {ragged_rank + 1 + len(inner)} (argument "
                         "`inner_shape`)")
    if ragged_rank == 0:
        out = convert_to_tensor(pylist, dtype=dtype) if has_scalars or dtype is not None else convert_to_tensor(
            np.asarray(pylist, np.float32))
        return out if inner is None else convert_to_tensor(np.reshape(np.asarray(out.numpy()), inner), dtype=out.dtype)
    lengths: List[List[int]] = [[] for _ in range(ragged_rank)]
    items = _flatten_levels(pylist, ragged_rank, lengths)
    if inner is None:
        shapes = {np.shape(it) for it in items}
        if len(shapes) > 1:
            raise ValueError(f"inner values have inconsistent shapes {sorted(shapes)}: each value below ragged_rank="
                             f"{ragged_rank} must have the same shape")
        inner = shapes.pop() if shapes else (() if has_scalars else (0,) * (depth - ragged_rank - 1))
    if items and (dtype is not None or has_scalars):
        flat = convert_to_tensor(items, dtype=dtype)
    else:
        flat = convert_to_tensor(np.zeros((len(items),) + tuple(inner), np.float32),
                                 dtype=dtype if dtype is not None else _dtypes.float32)
    if tuple(flat.shape[1:]) != tuple(inner):
        flat = convert_to_tensor(np.reshape(np.asarray(flat.numpy()), (len(items),) + tuple(inner)), dtype=flat.dtype)
    out: Any = flat
    for level in range(ragged_rank - 1, -1, -1):
        out = RaggedTensor._of(out, host_tensor(np.concatenate([[0], np.cumsum(lengths[level], dtype=np.int64)]),
                                                sd), sd)
    return out


# -- range ----------------------------------------------------------------------------------------
def ragged_range(starts: Any, limits: Any = None, deltas: Any = 1, dtype: Any = None, name: Any = None,
          row_splits_dtype: Any = _dtypes.int64) -> RaggedTensor:
    """``tf.ragged.range``: row ``i`` is ``range(starts[i], limits[i], deltas[i])`` (scalars
    broadcast), computed on the host."""
    sd = _rp.splits_dtype_arg(row_splits_dtype)
    if limits is None:
        starts, limits = 0, starts
    ts = [x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=dtype) for x in (starts, limits, deltas)]
    dt = dtype if dtype is not None else next((t.dtype for t in ts if not t.dtype.is_integer), ts[0].dtype)
    for t, arg in zip(ts, ("starts", "limits", "deltas")):
        if t.ndim > 1:
            raise ValueError(f"Shape {tuple(t.shape)} must have rank at most 1 (argument `{arg}` of tf.ragged.range)")
    s, lim, d = (np.asarray(_rp.host_splits(t, "tf.ragged.range") if t.dtype.is_integer else t.numpy()) for t in ts)
    try:
        s, lim, d = np.broadcast_arrays(np.atleast_1d(s), np.atleast_1d(lim), np.atleast_1d(d))
    except ValueError:
        raise InvalidArgumentError(None, None, "starts, limits, and deltas must have the same shape (arguments of "
                                   "tf.ragged.range)") from None
    if (d == 0).any():
        raise InvalidArgumentError(None, None, "Requires delta != 0 (argument `deltas` of tf.ragged.range)")
    rows = [np.arange(a, b, c) for a, b, c in zip(s, lim, d)]
    flat = np.concatenate(rows) if rows else np.zeros(0)
    values = convert_to_tensor(flat.astype(_dtypes.as_dtype(dt)._np), dtype=dt)
    return RaggedTensor._of(values, host_tensor(np.concatenate([[0], np.cumsum([len(r) for r in rows])]), sd), sd)


# -- stack / concat -------------------------------------------------------------------------------
def _as_ragged(values: Any, what: str) -> List[RaggedTensor]:
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{what}: `values` must be a non-empty list of Tensors or RaggedTensors")
    rank = max(v.ragged_rank for v in values if isinstance(v, RaggedTensor)) if any(
        isinstance(v, RaggedTensor) for v in values) else 1
    out = []
    for v in values:
        r = v if isinstance(v, RaggedTensor) else from_tensor(convert_to_tensor(v), ragged_rank=rank)
        if r.ragged_rank != rank:
            raise ValueError(f"{what}: the inputs have different ragged ranks ({r.ragged_rank} and {rank})")
        out.append(r)
    dts = {r.dtype.name for r in out}
    if len(dts) > 1:
        raise TypeError(f"{what}: the inputs have different dtypes ({sorted(dts)}) (argument `values`)")
    if len({r.ndim for r in out}) > 1:
        raise ValueError(f"{what}: the inputs have different ranks ({sorted({r.ndim for r in out})}) (argument "
                         "`values`)")
    sds = {r.row_splits_dtype for r in out}
    return [r.with_row_splits_dtype(_dtypes.int64) for r in out] if len(sds) > 1 else out


def _concat_rows(rts: List[RaggedTensor]) -> RaggedTensor:
    """Axis 0: the rows of each in turn (their values concatenated, their splits offset)."""
    vals = [r._values for r in rts]
    values = (_concat_rows(vals) if isinstance(vals[0], RaggedTensor) else _dense_concat(vals, 0))  # type: ignore
    pieces, offset = [], 0
    for i, r in enumerate(rts):
        s = r._row_splits
        pieces.append(bind(_OFFSET, s, shift=offset, skip=i > 0))
        offset += int(r._values.shape[0]) if isinstance(r._values, Tensor) else r._values.nrows_static
    return RaggedTensor._of(values, _dense_concat(pieces, 0), rts[0].row_splits_dtype)


_OFFSET = define("RaggedOffsetSplits", lambda s, *, shift, skip: (s[1:] if skip else s) + shift, differentiable=False)


def _interleave(rts: List[RaggedTensor], what: str) -> RaggedTensor:
    """``[[rts[0][i], rts[1][i], ...] for i]``: rows interleaved, one more ragged dimension."""
    n = rts[0].nrows_static
    if any(r.nrows_static != n for r in rts):
        raise InvalidArgumentError(None, None, f"{what}: Input tensors at index 0 (=x) and 1 (=y) have incompatible "
                                   f"shapes: the inputs must have the same number of rows (got "
                                   f"{[r.nrows_static for r in rts]})")
    both = _concat_rows(rts)
    order = (np.arange(len(rts))[None, :] * n + np.arange(n)[:, None]).reshape(-1)
    inner = gather_rows(both, order)
    sd = rts[0].row_splits_dtype
    return RaggedTensor._of(inner, host_tensor(np.arange(n + 1, dtype=np.int64) * len(rts), sd), sd)


def stack(values: Any, axis: int = 0, name: Any = None) -> RaggedTensor:
    """``tf.ragged.stack`` along axis 0 or 1."""
    rts = _as_ragged(values, "tf.ragged.stack")
    ax = axis + rts[0].ndim + 1 if axis < 0 else axis
    if ax == 0:
        sd = rts[0].row_splits_dtype
        outer = np.concatenate([[0], np.cumsum([r.nrows_static for r in rts])])
        return RaggedTensor._of(_concat_rows(rts), host_tensor(outer, sd), sd)
    if ax == 1:
        return _interleave(rts, "tf.ragged.stack")
    raise NotImplementedError(f"tf.ragged.stack along axis {axis}: tapejax stacks along axis 0 or 1")


def concat(values: Any, axis: int, name: Any = None) -> RaggedTensor:
    """``tf.concat`` of RaggedTensors along axis 0 (rows) or 1 (each row's entries)."""
    rts = _as_ragged(values, "tf.concat")
    ndim = rts[0].ndim
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis} out of bounds: expected {-ndim}<=axis<{ndim} (argument `axis` of tf.concat)")
    ax = axis % ndim
    if ax == 0:
        return _concat_rows(rts)
    if ax == 1:
        st = _interleave(rts, "tf.concat")   # [n, k, None, ...], then rows k merged into one
        inner = st._values
        assert isinstance(inner, RaggedTensor)
        merged = bind(_rp.COMPOSE_SPLITS, inner._row_splits, st._row_splits)
        return RaggedTensor._of(inner._values, merged, inner.row_splits_dtype)
    raise NotImplementedError(f"tf.concat of RaggedTensors along axis {axis}: tapejax concatenates along axis 0 "
                              "or 1")


# -- masks, maps, segment ids ---------------------------------------------------------------------
def boolean_mask(data: Any, mask: Any, name: Any = None) -> Any:
    """``tf.ragged.boolean_mask``: the entries of ``data`` where ``mask`` (rank 1 or 2, dense or
    ragged) is True; a rank-2 mask gives ragged rows."""
    m: Any = mask if isinstance(mask, RaggedTensor) else convert_to_tensor(mask)
    if m.dtype.name != "bool":
        raise TypeError(f"Expected bool for argument 'mask' not {m.dtype.name}.")
    if m.ndim == 1:
        keep = np.nonzero(np.asarray(_host_bools(m)))[0]
        if isinstance(data, RaggedTensor):
            if data.nrows_static != m.shape[0]:
                raise ValueError(f"Shapes ({data.nrows_static},) and {tuple(m.shape)} are incompatible (the rows of "
                                 "`data` and `mask` of tf.ragged.boolean_mask)")
            return gather_rows(data, keep)
        d = data if isinstance(data, Tensor) else convert_to_tensor(data)
        if d.shape[0] != m.shape[0]:
            raise ValueError(f"Shapes {tuple(d.shape[:1])} and {tuple(m.shape)} are incompatible (`data` and `mask` "
                             "of tf.ragged.boolean_mask)")
        return take_values(d, keep)
    if m.ndim != 2:
        raise NotImplementedError("tf.ragged.boolean_mask: tapejax takes a mask of rank 1 or 2")
    d = data if isinstance(data, RaggedTensor) else from_tensor(convert_to_tensor(data))
    mr = m if isinstance(m, RaggedTensor) else from_tensor(m)
    if d.ndim < 2 or mr.ragged_rank != 1:
        raise ValueError("tf.ragged.boolean_mask: `mask` must have rank <= the rank of `data`")
    same_partitions(d if d.ragged_rank == 1 else RaggedTensor._of(
        d._values.flat_values, d._row_splits, d.row_splits_dtype), mr, "tf.ragged.boolean_mask")
    flags = _host_bools(mr._values)
    keep = np.nonzero(flags)[0]
    s = _rp.host_splits(mr._row_splits, "tf.ragged.boolean_mask")
    lens = np.add.reduceat(flags.astype(np.int64), s[:-1]) if flags.size else np.zeros(len(s) - 1, np.int64)
    lens = np.where(np.diff(s) > 0, lens, 0)
    splits = host_tensor(np.concatenate([[0], np.cumsum(lens)]), d.row_splits_dtype)
    return RaggedTensor._of(take_values(d._values, keep), splits, d.row_splits_dtype)


def _host_bools(t: Tensor) -> np.ndarray:
    if is_traced(t):
        _rp.host_splits(t, "tf.ragged.boolean_mask")
    return np.asarray(t.numpy(), bool)


def map_flat_values(op: Any, *args: Any, **kwargs: Any) -> Any:
    """``tf.ragged.map_flat_values``: ``op`` applied to the ``flat_values`` of the RaggedTensors in
    ``args`` / ``kwargs`` (all with the same partitions), the result with their partitions."""
    leaves = [x for x in _nest.flatten([list(args), kwargs]) if isinstance(x, RaggedTensor)]
    if not leaves:
        return op(*args, **kwargs)
    for other in leaves[1:]:
        same_partitions(leaves[0], other, "tf.ragged.map_flat_values")
    swap = (lambda x: x.flat_values if isinstance(x, RaggedTensor) else x)  # noqa: E731
    out = op(*[_nest.map_structure(swap, a) for a in args], **{k: _nest.map_structure(swap, v)
                                                             for k, v in kwargs.items()})
    n = dim(leaves[0].flat_values, 0)
    if not isinstance(out, Tensor) or out.ndim == 0 or out.shape[0] != n:
        raise ValueError(f"tf.ragged.map_flat_values: `op` must return a Tensor with as many rows as flat_values "
                         f"({n}); got {getattr(out, 'shape', type(out).__name__)}")
    return leaves[0].with_flat_values(out)


def row_splits_to_segment_ids(splits: Any, name: Any = None, out_type: Any = None) -> Tensor:
    """``tf.ragged.row_splits_to_segment_ids``: the row of each value (int64 by default)."""
    s, sd = _rp.partition_arg(splits, "splits", None)
    _rp.validate_splits(s, int(_rp.host_splits(s, "tf.ragged.row_splits_to_segment_ids")[-1]) if s.shape[0] else 0,
                        "row_splits_to_segment_ids", "splits")
    n = int(_rp.host_splits(s, "tf.ragged.row_splits_to_segment_ids")[-1])
    out = _rp.segment_ids(s, n)
    return out if out_type is None else bind(_rp.SPLITS_CAST, out, dtype=np.dtype(
        _rp.storage(_rp.splits_dtype_arg(out_type, "out_type"))).name)


def segment_ids_to_row_splits(segment_ids: Any, num_segments: Any = None, out_type: Any = None,
                              name: Any = None) -> Tensor:
    """``tf.ragged.segment_ids_to_row_splits``: splits of rows ``0 .. num_segments - 1`` (default
    ``max(segment_ids) + 1``, read on the host)."""
    ids, sd = _rp.partition_arg(segment_ids, "segment_ids", None)
    if num_segments is None:
        h = _rp.host_splits(ids, "tf.ragged.segment_ids_to_row_splits without `num_segments`")
        n = int(h.max()) + 1 if h.size else 0
    else:
        n = int(_rp.host_splits(num_segments, "num_segments") if isinstance(num_segments, Tensor) else num_segments)
    out = bind(_SEG_TO_SPLITS, ids, n=n)
    return out if out_type is None else bind(_rp.SPLITS_CAST, out, dtype=np.dtype(
        _rp.storage(_rp.splits_dtype_arg(out_type, "out_type"))).name)


def stack_dynamic_partitions(data: Any, partitions: Any, num_partitions: Any, name: Any = None) -> RaggedTensor:
    """``tf.ragged.stack_dynamic_partitions``: row ``i`` holds the rows of ``data`` (a Tensor or a
    RaggedTensor) whose partition is ``i``, in order (``dynamic_partition``'s outputs stacked).
    The partitions are read on the host; the row splits take their dtype."""
    d = data if isinstance(data, (Tensor, RaggedTensor)) else convert_to_tensor(data)
    p_t = partitions if isinstance(partitions, Tensor) else convert_to_tensor(partitions, dtype=_dtypes.int32)
    n = int(_rp.host_splits(num_partitions, "num_partitions") if isinstance(num_partitions, Tensor)
            else num_partitions)
    rows = d.nrows() if isinstance(d, RaggedTensor) else (dim(d, 0) if d.ndim else None)
    rows = int(rows.numpy()) if isinstance(rows, Tensor) else rows
    if p_t.ndim != 1 or rows is None or p_t.shape[0] != rows:
        raise ValueError(f"Shapes {tuple(p_t.shape)} and ({rows},) are incompatible")
    p = _rp.host_splits(p_t, "tf.ragged.stack_dynamic_partitions").astype(np.int64)
    if p.size and (p.min() < 0 or p.max() >= n):
        raise InvalidArgumentError(None, None, "partitions must be less than num_partitions" if p.max() >= n
                                   else "partitions must be non-negative")
    order = np.argsort(p, kind="stable")
    lens = np.bincount(p, minlength=n)[:n] if n else np.zeros(0, np.int64)
    splits = host_tensor(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), p_t.dtype)
    return RaggedTensor._of(take_values(d, order), splits, p_t.dtype)


# -- TF's raw fill-empty-rows pair (tf.ragged_fill_empty_rows and its gradient op) ----------

_FILL_VALUES = define("RaggedFillEmptyRowsValues",
                      lambda values, default, rev, *, n: jnp.full((n,), default, values.dtype).at[rev].set(values))


def _vector(t: Tensor, what: str, op: str) -> None:
    if t.ndim != 1:
        raise InvalidArgumentError(None, None, f"{what} must be a vector, saw: [{','.join(str(d) for d in t.shape)}] "
                                   f"[Op:{op}]")


class RaggedFillEmptyRows(NamedTuple):
    """``tf.ragged_fill_empty_rows``' results (TF's namedtuple)."""
    output_value_rowids: Tensor
    output_values: Tensor
    empty_row_indicator: Tensor
    reverse_index_map: Tensor


class RaggedFillEmptyRowsGrad(NamedTuple):
    """``tf.ragged_fill_empty_rows_grad``'s results (TF's namedtuple)."""
    d_values: Tensor
    d_default_value: Tensor


def ragged_fill_empty_rows(value_rowids: Any, values: Any, nrows: Any, default_value: Any,
                           name: Any = None) -> RaggedFillEmptyRows:
    """``tf.ragged_fill_empty_rows``: ``default_value`` inserted as the one value of each row of
    ``0 .. nrows - 1`` that ``value_rowids`` does not name, entries ordered by row (stably):
    ``(output_value_rowids, output_values, empty_row_indicator, reverse_index_map)``, the last the
    output position of each input value.  The row ids are read on the host (the output's size
    depends on them); the values' gradient flows to ``values`` and ``default_value``."""
    vals = values if isinstance(values, Tensor) else convert_to_tensor(values)
    _vector(vals, "values", "RaggedFillEmptyRows")
    default = convert_to_tensor(default_value)
    if default.dtype != vals.dtype:
        raise InvalidArgumentError(None, None, "cannot compute RaggedFillEmptyRows as input #3(zero-based) was "
                                   f"expected to be a {vals.dtype.name} tensor but is a {default.dtype.name} tensor")
    ids_t = value_rowids if isinstance(value_rowids, Tensor) else convert_to_tensor(value_rowids, dtype=_dtypes.int64)
    ids = _rp.host_splits(ids_t, "tf.ragged_fill_empty_rows").astype(np.int64).reshape(-1)
    n = int(_rp.host_splits(nrows, "nrows") if isinstance(nrows, Tensor) else nrows)
    for i, r in enumerate(ids):
        if not 0 <= r < n:
            raise InvalidArgumentError(None, None, f"indices({i}, 0) is invalid: {int(r)} >= {n}")
    empty = np.bincount(ids, minlength=n)[:n] == 0 if n else np.zeros(0, bool)
    rows = np.concatenate([ids, np.nonzero(empty)[0]])
    order = np.argsort(rows, kind="stable")
    rev = np.empty(len(ids), np.int64)
    rev[order[order < len(ids)]] = np.nonzero(order < len(ids))[0]
    out = bind(_FILL_VALUES, vals, default, rev.astype(np.int32), n=len(rows))
    return RaggedFillEmptyRows(host_tensor(rows[order]), out, convert_to_tensor(empty), host_tensor(rev))


def ragged_fill_empty_rows_grad(reverse_index_map: Any, grad_values: Any,
                                name: Any = None) -> RaggedFillEmptyRowsGrad:
    """``tf.ragged_fill_empty_rows_grad``: ``(grad_values[reverse_index_map], the sum of the rest)``,
    the gradients of ``ragged_fill_empty_rows``' ``values`` and ``default_value``."""
    g = grad_values if isinstance(grad_values, Tensor) else convert_to_tensor(grad_values)
    _vector(g, "grad_values", "RaggedFillEmptyRowsGrad")
    rev = reverse_index_map if isinstance(reverse_index_map, Tensor) else convert_to_tensor(
        reverse_index_map, dtype=_dtypes.int64)
    d_values = bind(_TAKE, g, rev)
    return RaggedFillEmptyRowsGrad(d_values, bind(_REST_SUM, g, d_values))


_TAKE = define("RaggedFillEmptyRowsTake", lambda g, rev: g[rev])
_REST_SUM = define("RaggedFillEmptyRowsRest", lambda g, taken: jnp.sum(g) - jnp.sum(taken))


OP_DISPATCH[("ConcatV2", RaggedTensor)] = concat

#: the names of ``tf.ragged`` (``ops.namespaces`` builds the module from them)
PUBLIC = {"constant": constant, "range": ragged_range, "stack": stack, "boolean_mask": boolean_mask,
          "map_flat_values": map_flat_values, "row_splits_to_segment_ids": row_splits_to_segment_ids,
          "segment_ids_to_row_splits": segment_ids_to_row_splits,
          "stack_dynamic_partitions": stack_dynamic_partitions}

__all__ = ["PUBLIC", "boolean_mask", "concat", "constant", "map_flat_values", "ragged_fill_empty_rows",
           "ragged_fill_empty_rows_grad", "ragged_range", "row_splits_to_segment_ids", "segment_ids_to_row_splits",
           "stack", "stack_dynamic_partitions"]
