"""RaggedTensor to and from dense Tensors, and indexing: ``from_tensor``, ``to_tensor``,
``rt[...]`` and the row gather that ``tf.gather`` / ``tf.ragged.boolean_mask`` build on.

``to_tensor`` is one recorded scatter per ragged level (``ragged_tensor.TO_DENSE``), innermost
first, into a static shape: a full ``shape`` argument needs no host read (it traces); otherwise the
bounding shape is read from the partitions on the host.  Its gradient with respect to the values
is JAX's (a gather of the dense gradient), TF's.  ``from_tensor`` without ``lengths`` / ``padding``
is a reshape and uniform partitions (static); with them, and every row selection (``rt[i]``,
``rt[a:b]``, ``rt[:, :k]``, ``gather_rows``), NumPy computes which values stay from concrete
partitions and a recorded gather takes them (ValueError inside a trace).
"""
from typing import Any, Optional, Sequence, cast

import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import ragged_partition as _rp
from .ragged_tensor import FLATTEN, GATHER, OPERATORS, TO_DENSE, RaggedTensor, dim, flatten_dense
from .sparse_tensor import SparseTensor, host_indices, is_traced


def host_tensor(a: np.ndarray, dtype: _dtypes.DType = _dtypes.int64) -> Tensor:
    return convert_to_tensor(np.asarray(a), dtype=dtype)


def _splits_of(lengths: np.ndarray, dtype: _dtypes.DType) -> Tensor:
    return host_tensor(np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64), dtype)


def take_values(values: Any, idx: np.ndarray) -> Any:
    """Rows ``idx`` of ``values`` (a Tensor: one recorded gather; a RaggedTensor: its rows)."""
    if isinstance(values, RaggedTensor):
        return gather_rows(values, idx)
    return bind(GATHER, values, host_tensor(np.asarray(idx, np.int64)))


def gather_rows(rt: RaggedTensor, idx: np.ndarray) -> RaggedTensor:
    """The RaggedTensor of rows ``idx`` (in-bounds, non-negative host ints) of ``rt``."""
    s = _rp.host_splits(rt._row_splits, "gather of RaggedTensor rows")
    idx = np.asarray(idx, np.int64).reshape(-1)
    starts, lens = s[:-1][idx], np.diff(s)[idx]
    value_idx = (np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
                 if idx.size else np.zeros(0, np.int64))
    return RaggedTensor._of(take_values(rt._values, value_idx), _splits_of(lens, rt._splits_dtype), rt._splits_dtype)


def _row_positions(rt: RaggedTensor, key: slice) -> "tuple[np.ndarray, np.ndarray]":
    """Python slice ``key`` applied to each row: the kept value indices and new row lengths."""
    s = _rp.host_splits(rt._row_splits, "RaggedTensor.__getitem__")
    keep, lens = [], []
    for i in range(len(s) - 1):
        r = np.arange(s[i], s[i + 1])[key]
        keep.append(r)
        lens.append(len(r))
    return (np.concatenate(keep).astype(np.int64) if keep else np.zeros(0, np.int64)), np.asarray(lens, np.int64)


def _index_int(k: Any) -> Optional[int]:
    if isinstance(k, (bool, np.bool_)):
        return None
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, Tensor) and k.ndim == 0 and k.dtype.is_integer:
        return int(_rp.host_splits(k, "RaggedTensor.__getitem__"))
    return None


def getitem(rt: RaggedTensor, key: Any) -> Any:
    """``rt[key]``: TF's rules for the keys tapejax supports (a row, a row slice, then a slice of
    the ragged dimension and keys of the uniform inner dimensions; an int into a ragged dimension is
    TF's ValueError)."""
    keys = key if isinstance(key, tuple) else (key,)
    if not keys:
        return rt
    first, rest = keys[0], keys[1:]
    i = _index_int(first)
    if i is not None:
        n = rt.nrows_static
        if not -n <= i < n:
            raise IndexError(f"Row key {i} out of bounds (RaggedTensor with {n} rows)")
        i %= n
        s = _rp.host_splits(rt._row_splits, "RaggedTensor.__getitem__")
        row = take_values(rt._values, np.arange(s[i], s[i + 1]))
        return row[rest] if rest else row
    if first is Ellipsis and not rest:
        return rt
    if not isinstance(first, slice):
        raise TypeError(f"RaggedTensor indices must be ints or slices (then ints, slices of the inner dimensions); "
                        f"got {first!r}")
    sel = rt if first == slice(None) else gather_rows(rt, np.arange(rt.nrows_static)[first])
    if not rest or rest == (Ellipsis,):
        return sel
    inner, more = rest[0], rest[1:]
    if _index_int(inner) is not None:
        raise ValueError("Cannot index into an inner ragged dimension.")
    if not isinstance(inner, slice):
        raise TypeError(f"RaggedTensor indices must be ints or slices; got {inner!r}")
    if inner != slice(None):
        keep, lens = _row_positions(sel, inner)
        sel = RaggedTensor._of(take_values(sel._values, keep), _splits_of(lens, sel._splits_dtype), sel._splits_dtype)
    if not more:
        return sel
    values = sel._values
    new = getitem(values, (slice(None),) + more) if isinstance(values, RaggedTensor) else values[(slice(None),) + more]
    return sel.with_values(new)


def _shape_arg(rt: RaggedTensor, shape: Any) -> Sequence[Optional[int]]:
    if shape is None:
        return [None] * rt.ndim
    if isinstance(shape, Tensor):
        shape = _rp.host_splits(shape, "RaggedTensor.to_tensor's `shape`").tolist()
    dims = [None if d is None or int(d) < 0 else int(d) for d in (shape.as_list() if hasattr(shape, "as_list") else list(shape))]
    if len(dims) != rt.ndim:
        raise InvalidArgumentError(None, None, f"Shapes {tuple(dims)} and {tuple(rt.shape)} must have the same rank (argument `shape` of "
                         "RaggedTensor.to_tensor)")
    return dims


def to_tensor(rt: RaggedTensor, default_value: Any = None, shape: Any = None) -> Tensor:
    """``RaggedTensor.to_tensor``: the rows padded with ``default_value`` (0) to ``shape`` (the
    bounding shape where None), cropped where ``shape`` is smaller."""
    dims = list(_shape_arg(rt, shape))
    if any(d is None for d in dims):
        bound = rt.host_bounding_shape("RaggedTensor.to_tensor")
        dims = [b if d is None else d for d, b in zip(dims, bound)]
    default = convert_to_tensor(0 if default_value is None else default_value, dtype=rt.dtype)
    if default.ndim > len(dims) - 1 - rt.ragged_rank and default.ndim:
        raise ValueError(f"Shape {tuple(default.shape)} must have rank at most {len(dims) - 1 - rt.ragged_rank} "
                         "(argument `default_value` of RaggedTensor.to_tensor: a scalar or the inner dimensions)")
    return _dense(rt, default, [int(cast(int, d)) for d in dims])


def _dense(rt: RaggedTensor, default: Tensor, dims: Sequence[int]) -> Tensor:
    values = rt._values
    if isinstance(values, RaggedTensor):
        values = _dense(values, default, [values.nrows_static] + list(dims[2:]))
    out = bind(TO_DENSE, values, rt._row_splits, default, shape=tuple(dims))
    assert isinstance(out, Tensor)
    return out


def _host_lengths(x: Any, arg: str) -> np.ndarray:
    if isinstance(x, Tensor):
        return _rp.host_splits(x, f"RaggedTensor.from_tensor's `{arg}`")
    return np.asarray(x, np.int64)


def from_tensor(tensor: Any, lengths: Any = None, padding: Any = None, ragged_rank: int = 1,
                row_splits_dtype: Any = _dtypes.int64) -> RaggedTensor:
    """``RaggedTensor.from_tensor``: each row of ``tensor`` (all of it, its first ``lengths``
    entries, or up to its trailing ``padding``)."""
    sd = _rp.splits_dtype_arg(row_splits_dtype)
    t = tensor if isinstance(tensor, Tensor) else convert_to_tensor(tensor)
    if lengths is not None and padding is not None:
        raise ValueError("Specify argument `lengths` or `padding`, but not both.")
    if not isinstance(ragged_rank, int) or ragged_rank < 1:
        raise ValueError(f"ragged_rank must be greater than 0; got {ragged_rank} (argument `ragged_rank`)")
    if t.ndim <= ragged_rank:
        raise ValueError(f"ragged_rank must be smaller than the rank of `tensor`; got ragged_rank={ragged_rank} and "
                         f"rank={t.ndim}")
    if lengths is None and padding is None:
        flat = flatten_dense(t, ragged_rank + 1)
        out: Any = flat
        for level in range(ragged_rank - 1, -1, -1):
            nrows = int(np.prod(t.shape[:level + 1], dtype=np.int64))
            width = dim(t, level + 1)
            out = RaggedTensor._of(out, host_tensor(np.arange(nrows + 1, dtype=np.int64) * width, sd), sd, width)
        return out
    if ragged_rank != 1:
        raise ValueError("tapejax's RaggedTensor.from_tensor takes `lengths` / `padding` with ragged_rank=1 only "
                         f"(got ragged_rank={ragged_rank}); build more ragged dimensions with from_nested_row_lengths")
    nrows, width = dim(t, 0), dim(t, 1)
    if padding is not None:
        if is_traced(t):
            _rp.host_splits(t, "RaggedTensor.from_tensor with `padding`")
        pad = convert_to_tensor(padding, dtype=t.dtype)
        if tuple(pad.shape) != tuple(t.shape[2:]):
            raise ValueError(f"Shapes {tuple(pad.shape)} and {tuple(t.shape[2:])} are incompatible (argument `padding` "
                             "of RaggedTensor.from_tensor must have the inner dimensions' shape)")
        eq = np.asarray(t.numpy()) == np.asarray(pad.numpy())
        eq = eq.reshape(nrows, width, -1).all(axis=2)
        keep = ~eq[:, ::-1]
        lens = np.where(keep.any(axis=1), width - np.argmax(keep, axis=1), 0).astype(np.int64)
    else:
        lens = _host_lengths(lengths, "lengths").reshape(-1)
        if lens.shape[0] != nrows:
            raise ValueError(f"Dimensions {lens.shape[0]} and {nrows} are not compatible (argument `lengths` of "
                             "RaggedTensor.from_tensor must have one entry per row)")
        lens = np.clip(lens, 0, width)
    idx = (np.repeat(np.arange(nrows, dtype=np.int64) * width, lens)
           + np.arange(int(lens.sum())) - np.repeat(np.concatenate([[0], np.cumsum(lens)[:-1]]), lens))
    values = bind(GATHER, flatten_dense(t, 2), host_tensor(idx.astype(np.int64)))
    return RaggedTensor._of(values, _splits_of(lens, sd), sd)


def merge_dims(rt: RaggedTensor, outer_axis: int, inner_axis: int) -> Any:
    """``RaggedTensor.merge_dims``: axes ``outer_axis .. inner_axis`` as one (static: splits composed
    and scaled, the flat values reshaped)."""
    n, k = rt.ndim, rt.ragged_rank
    outer, inner = (outer_axis % n if -n <= outer_axis < n else None), (inner_axis % n if -n <= inner_axis < n else None)
    if outer is None or inner is None:
        raise ValueError(f"axis out of bounds: expected {-n} <= outer_axis, inner_axis < {n}; got {outer_axis}, "
                         f"{inner_axis} (arguments of merge_dims)")
    if outer > inner:
        raise ValueError(f"Expected outer_axis ({outer_axis}) to be less than or equal to inner_axis ({inner_axis})")
    if outer == inner:
        return rt
    if inner > k:   # uniform inner dimensions absorbed first
        flat = rt.flat_values
        lo = max(outer, k) - k + 1   # (the flat values' first merged axis)
        j = inner - k
        if outer > k:
            shape = (flat.shape[0],) + tuple(flat.shape[1:lo]) + (int(np.prod(flat.shape[lo:j + 1], dtype=np.int64)),) \
                + tuple(flat.shape[j + 1:])
            return rt.with_flat_values(bind(FLATTEN, flat, shape=shape))
        m = int(np.prod(flat.shape[1:j + 1], dtype=np.int64))
        flat = bind(FLATTEN, flat, shape=(flat.shape[0] * m,) + tuple(flat.shape[j + 1:]))
        rt = _scale_innermost(rt, m, flat)
        inner = k
        if outer == inner:
            return rt
    if outer == 0:
        out: Any = rt
        for _ in range(inner):
            out = out._values
        return out
    values = rt._values
    assert isinstance(values, RaggedTensor)
    merged = merge_dims(values, outer - 1, inner - 1)
    if outer > 1:
        return rt.with_values(merged)
    splits, level = rt._row_splits, values
    for _ in range(inner - 1):
        splits = bind(_rp.COMPOSE_SPLITS, level._row_splits, splits)
        level = level._values
    return RaggedTensor._of(merged, splits, rt._splits_dtype)


def _scale_innermost(rt: RaggedTensor, m: int, flat: Tensor) -> RaggedTensor:
    if isinstance(rt._values, RaggedTensor):
        return RaggedTensor._of(_scale_innermost(rt._values, m, flat), rt._row_splits, rt._splits_dtype, rt._uniform)
    return RaggedTensor._of(flat, bind(_rp.SCALE_SPLITS, rt._row_splits, m=m), rt._splits_dtype,
                            None if rt._uniform is None else rt._uniform * m)


def to_sparse(rt: RaggedTensor) -> SparseTensor:
    """``RaggedTensor.to_sparse``: every value's coordinates (row-major), the bounding shape."""
    levels = [_rp.host_splits(s, "RaggedTensor.to_sparse") for s in rt.nested_row_splits]
    flat = rt.flat_values
    n = dim(flat, 0)
    pos, cols = np.arange(n, dtype=np.int64), []
    for s in reversed(levels):
        row = np.searchsorted(s, pos, side="right") - 1
        cols.insert(0, pos - s[row])
        pos = row
    coords = np.stack([pos] + cols, axis=1) if n else np.zeros((0, len(levels) + 1), np.int64)
    inner = tuple(int(d) for d in flat.shape[1:])
    if inner:
        grid = np.indices(inner).reshape(len(inner), -1).T
        reps = int(np.prod(inner, dtype=np.int64))
        coords = np.concatenate([np.repeat(coords, reps, axis=0), np.tile(grid, (n, 1))], axis=1)
    values = bind(FLATTEN, flat, shape=(n * int(np.prod(inner, dtype=np.int64)),))
    return SparseTensor._of(coords, values, tuple(rt.host_bounding_shape("RaggedTensor.to_sparse")))


def from_sparse(st: Any, row_splits_dtype: Any = _dtypes.int64) -> RaggedTensor:
    """``RaggedTensor.from_sparse``: a rank-2, right-ragged (each row's columns 0, 1, ...) SparseTensor."""
    if not isinstance(st, SparseTensor):
        raise TypeError(f"st_input must be a SparseTensor; got {type(st).__name__} (argument `st_input`)")
    if st.rank != 2:
        raise ValueError("rank(st_input) must be 2.")
    sd = _rp.splits_dtype_arg(row_splits_dtype)
    ind = host_indices(st, "RaggedTensor.from_sparse")
    nrows = st.static_shape("RaggedTensor.from_sparse")[0]
    rows = ind[:, 0]
    lens = np.bincount(rows, minlength=nrows)[:nrows] if rows.size else np.zeros(nrows, np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]) if nrows else np.zeros(0, np.int64)
    if rows.size and ((np.diff(rows) < 0).any() or (ind[:, 1] != np.arange(len(rows)) - starts[rows]).any()):
        raise InvalidArgumentError(None, None, "SparseTensor is not right-ragged (argument `st_input` of "
                                   "RaggedTensor.from_sparse: each row's columns must be 0, 1, ... in order)")
    return RaggedTensor._of(st.values, _splits_of(lens, sd), sd)


OPERATORS.update({"from_tensor": from_tensor, "to_tensor": to_tensor, "__getitem__": getitem, "merge_dims": merge_dims,
                  "to_sparse": to_sparse, "from_sparse": from_sparse})

__all__ = ["from_sparse", "merge_dims", "to_sparse", "from_tensor", "gather_rows", "getitem", "host_tensor", "take_values", "to_tensor"]
