"""``tf.sparse``: TF's sparse ops on ``SparseTensor`` (``ops.sparse_tensor``: the type, the shape rule).

Two kinds of op, as the module docstring of ``sparse_tensor`` explains:

* ops whose result has as many entries as their input (or a number known from static shapes):
  ``to_dense``, ``reorder``, ``reshape``, ``concat``, ``transpose``, ``expand_dims``,
  ``map_values``, ``softmax``, ``sparse_dense_matmul``, the dense reductions, sparse + dense
  ``add``, ``to_indicator``.  Each is a recorded op on ``indices`` / ``values`` (pure JAX, traceable),
  so it runs inside ``tapejax.function`` and a tape differentiates it with respect to the values;
* ops whose number of entries depends on the indices' or values' values (``from_dense``,
  ``retain``, ``slice``, ``fill_empty_rows``, sparse + sparse ``add``, ``minimum`` / ``maximum``,
  ``output_is_sparse`` reductions, ``eye``): NumPy computes the new indices from concrete ones
  (ValueError inside a trace) and a recorded gather (``GATHER``) / segment sum (``SEGMENT``) makes
  the values, whose JAX gradients are TF's (a scatter of the output's gradient back to the input's
  entries).

Orders follow TF: ``reorder``, ``concat``, ``transpose``, sparse + sparse ``add`` and the sparse
reductions give row-major order; ``retain``, ``slice``, ``reshape``, ``map_values`` keep the
input's; ``fill_empty_rows`` sorts by row, stably.
"""
import math
from typing import Any, Callable, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.nest import flatten, pack_sequence_as
from ..core.tensor import Tensor
from .sparse_tensor import (
    SparseTensor,
    SparseTensorSpec,
    TracedSparseError,
    check_indices,
    host_indices,
    host_string_values,
    index_dtype,
    is_traced,
    to_dense,
)

_FLAT = define("SparseFlattenDense", lambda x: x.reshape(-1))
GATHER = define("SparseGatherValues", lambda values, sel: values[sel])
GATHER_OR = define("SparseGatherValuesOr",
                   lambda values, fill, sel: jnp.where(sel >= 0, jnp.concatenate([values, fill[None]])[sel],
                                                       jnp.zeros((), values.dtype)))
SEGMENT = define("SparseSegmentSumValues",
                 lambda values, seg, *, n: jax.ops.segment_sum(values, seg, num_segments=n))


def _lexsort(indices):
    if indices.shape[0] == 0 or indices.shape[1] == 0:
        return jnp.arange(indices.shape[0])
    return jnp.lexsort(tuple(indices[:, k] for k in range(indices.shape[1] - 1, -1, -1)))


ORDER = define("SparseReorderPermutation", _lexsort, differentiable=False)
DENSE_ADD = define("SparseTensorDenseAdd",
                   lambda indices, values, dense: dense.at[tuple(indices.T)].add(values.astype(dense.dtype),
                                                                                 mode="drop"))


def _matmul(indices, values, b, *, rows, adjoint_a, adjoint_b):
    if adjoint_b:
        b = jnp.conj(b.T)
    r, c = (indices[:, 1], indices[:, 0]) if adjoint_a else (indices[:, 0], indices[:, 1])
    v = jnp.conj(values) if adjoint_a else values
    return jax.ops.segment_sum(v[:, None] * b[c], r, num_segments=rows)


MATMUL = define("SparseTensorDenseMatMul", _matmul)


def _reduce(indices, values, *, keep, shape, kind):
    flat = jnp.zeros(indices.shape[0], indices.dtype)
    for k, d in zip(keep, shape):
        flat = flat * d + indices[:, k]
    n = math.prod(shape)
    if kind == "sum":
        out = jax.ops.segment_sum(values, flat, num_segments=n)
    else:
        out = jax.ops.segment_max(values, flat, num_segments=n)
        count = jax.ops.segment_sum(jnp.ones_like(flat), flat, num_segments=n)
        out = jnp.where(count > 0, out, jnp.zeros((), values.dtype))
    return out.reshape(shape)


REDUCE = define("SparseReduce", _reduce)
RESHAPE = define("SparseReshapeIndices",
                 lambda indices, *, old, new: jnp.stack(jnp.unravel_index(
                     jnp.ravel_multi_index(tuple(indices.T), old, mode="wrap"), new), axis=1).astype(indices.dtype)
                 if indices.shape[0] else jnp.zeros((0, len(new)), indices.dtype), differentiable=False)
INDICATOR = define("SparseToIndicator",
                   lambda indices, ids, *, shape: jnp.zeros(shape, bool).at[
                       tuple(indices[:, :-1].T) + (ids,)].set(True, mode="drop"), differentiable=False)


def _softmax(indices, values, *, shape):
    seg = jnp.zeros(indices.shape[0], indices.dtype)
    for k, d in enumerate(shape[:-1]):
        seg = seg * d + indices[:, k]
    n = math.prod(shape[:-1])
    top = jax.ops.segment_max(values, seg, num_segments=n)
    e = jnp.exp(values - top[seg])
    return e / jax.ops.segment_sum(e, seg, num_segments=n)[seg]


SOFTMAX = define("SparseSoftmax", _softmax)


def _check(sp: Any, op: str, arg: str = "sp_input") -> SparseTensor:
    if not isinstance(sp, SparseTensor):
        raise TypeError(f"Input must be a SparseTensor (argument `{arg}` of tf.sparse.{op}); got {type(sp).__name__}.")
    return sp


def _axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise InvalidArgumentError(None, None, f"tf.sparse.{op}: axis {axis} is out of range for a SparseTensor of "
                                   f"rank {rank} (expected -{rank} <= axis < {rank}).")
    return axis % rank


def _gather(values: Tensor, sel: np.ndarray) -> Tensor:
    return bind(GATHER, values, sel.astype(np.int32))


def _sorted(indices: Any, values: Any, shape: Tuple[int, ...]) -> SparseTensor:
    perm = bind(ORDER, indices)
    return SparseTensor._of(bind(GATHER, indices, perm), bind(GATHER, values, perm), shape)


# -- conversions --------------------------------------------------------------------------

def from_dense(tensor: Any, name: Any = None) -> SparseTensor:
    """``tf.sparse.from_dense``: the non-zero entries of ``tensor``, in row-major order (of host
    strings: the non-empty ones, a string SparseTensor)."""
    strings = None if isinstance(tensor, Tensor) else host_string_values(
        np.asarray(tensor, object) if isinstance(tensor, (bytes, str)) else tensor)
    if strings is not None:
        ind = np.argwhere(strings != b"").astype(np.int64)
        return SparseTensor._of(ind, strings[tuple(ind.T)] if strings.ndim else strings.reshape(-1)[:len(ind)],
                                tuple(strings.shape))
    t = convert_to_tensor(tensor)
    if is_traced(t):
        raise TracedSparseError("tf.sparse.from_dense: the number of entries depends on the tensor's values, which are "
                         "unknown inside a tapejax.function trace (JAX needs static shapes).")
    host = np.asarray(t.numpy())
    ind = np.argwhere(host != np.zeros((), host.dtype)).astype(np.int64)
    flat = np.ravel_multi_index(tuple(ind.T), host.shape) if host.ndim else np.zeros(len(ind), np.int64)
    values = _gather(bind(_FLAT, t), np.asarray(flat, np.int64))
    return SparseTensor._of(ind, values, tuple(host.shape))


def reorder(sp_input: Any, name: Any = None) -> SparseTensor:
    """``tf.sparse.reorder``: the same tensor with its entries in row-major order."""
    sp = _check(sp_input, "reorder")
    return _sorted(sp._indices, sp._values, sp.static_shape("tf.sparse.reorder"))


def reshape(sp_input: Any, shape: Any, name: Any = None) -> SparseTensor:
    """``tf.sparse.reshape``: the same entries in a dense shape of the same size (one ``-1``)."""
    sp = _check(sp_input, "reshape")
    old = sp.static_shape("tf.sparse.reshape")
    want = [int(d) for d in np.asarray(shape.numpy() if isinstance(shape, Tensor) else shape).reshape(-1)]
    size = math.prod(old)
    if want.count(-1) > 1:
        raise InvalidArgumentError(None, None, f"only one output dimension may be -1, not both {want.index(-1)} and "
                                   f"{len(want) - 1 - want[::-1].index(-1)} (argument `shape` of tf.sparse.reshape)")
    if -1 in want:
        known = math.prod(d for d in want if d != -1)
        if known == 0 or size % known:
            raise InvalidArgumentError(None, None, f"Input to reshape is a SparseTensor with {size} dense values, but "
                                       f"the requested shape requires a multiple of {known}. input_shape="
                                       f"[{','.join(map(str, old))}] output_shape=[{','.join(map(str, want))}]")
        want[want.index(-1)] = size // known
    if math.prod(want) != size:
        raise InvalidArgumentError(None, None, f"Input to reshape is a tensor with {size} dense values, but the "
                                   f"requested shape has {math.prod(want)}. input_shape=[{','.join(map(str, old))}] "
                                   f"output_shape=[{','.join(map(str, want))}]")
    new = tuple(want)
    if size >= 2 ** 31 and np.dtype(index_dtype()).itemsize < 8:
        raise InvalidArgumentError(None, None, f"tf.sparse.reshape: a dense size of {size} overflows the int32 "
                                   "indices tapejax holds without JAX's 64-bit mode (jax.config.update("
                                   "'jax_enable_x64', True)).")
    return SparseTensor._of(bind(RESHAPE, sp._indices, old=old, new=new), sp._values, new)


def to_indicator(sp_input: Any, vocab_size: int, name: Any = None) -> Tensor:
    """``tf.sparse.to_indicator``: a dense bool ``shape[:-1] + [vocab_size]``, True at each
    entry's id (its value) in its row."""
    sp = _check(sp_input, "to_indicator")
    if not sp.dtype.is_integer:
        raise TypeError(f"tf.sparse.to_indicator: `sp_input` values must be integer ids; got {sp.dtype.name}.")
    shape = sp.static_shape("tf.sparse.to_indicator")[:-1] + (int(vocab_size),)
    if not is_traced(sp._values):
        ids = np.asarray(sp._values.numpy()).astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise InvalidArgumentError(None, None, "Indices are not valid (out of bounds).  Shape: "
                                       f"[{','.join(map(str, shape))}]")
    return bind(INDICATOR, sp._indices, sp._values, shape=shape)


# -- structure ---------------------------------------------------------------------------

def expand_dims(sp_input: Any, axis: Optional[int] = None, name: Any = None) -> SparseTensor:
    """``tf.sparse.expand_dims``: a new dimension of size 1 at ``axis`` (default -1)."""
    sp = _check(sp_input, "expand_dims")
    shape = sp.static_shape("tf.sparse.expand_dims")
    ax = _axis(-1 if axis is None else int(axis), len(shape) + 1, "expand_dims")
    ind = bind(_INSERT, sp._indices, axis=ax)
    return SparseTensor._of(ind, sp._values, shape[:ax] + (1,) + shape[ax:])


def transpose(sp_input: Any, perm: Optional[Sequence[int]] = None, name: Any = None) -> SparseTensor:
    """``tf.sparse.transpose``: dimensions permuted by ``perm`` (reversed by default), reordered."""
    sp = _check(sp_input, "transpose")
    shape = sp.static_shape("tf.sparse.transpose")
    p = list(range(len(shape)))[::-1] if perm is None else [int(d) for d in np.asarray(perm).reshape(-1)]
    if sorted(p) != list(range(len(shape))):
        raise InvalidArgumentError(None, None, f"tf.sparse.transpose: `perm` {p} is not a permutation of "
                                   f"0..{len(shape) - 1}.")
    ind = bind(_COLS, sp._indices, perm=tuple(p))
    return _sorted(ind, sp._values, tuple(shape[k] for k in p))


_INSERT = define("SparseInsertIndexColumn",
                 lambda indices, *, axis: jnp.insert(indices, axis, 0, axis=1), differentiable=False)
_COLS = define("SparsePermuteColumns", lambda indices, *, perm: indices[:, list(perm)], differentiable=False)


_CONCAT = define("SparseConcatParts", lambda *parts: jnp.concatenate(parts, axis=0))
_OFFSET = define("SparseOffsetIndices",
                 lambda indices, *, axis, offset: indices.at[:, axis].add(offset), differentiable=False)


def concat(axis: int, sp_inputs: Sequence[Any], expand_nonconcat_dims: bool = False, name: Any = None,
           concat_dim: Any = None) -> SparseTensor:
    """``tf.sparse.concat``: SparseTensors joined along ``axis`` (row-major order).  Without
    ``expand_nonconcat_dims`` the other dimensions must match; with it they are the maximum."""
    if concat_dim is not None:
        axis = concat_dim
    sps = [_check(s, "concat", "sp_inputs") for s in sp_inputs]
    if not sps:
        raise ValueError("tf.sparse.concat: `sp_inputs` must hold at least one SparseTensor.")
    shapes = [s.static_shape("tf.sparse.concat") for s in sps]
    rank = len(shapes[0])
    for i, (s, sh) in enumerate(zip(sps, shapes)):
        if len(sh) != rank:
            raise InvalidArgumentError(None, None, f"Ranks of all input tensors must match: expected {rank} but got "
                                       f"{len(sh)} at position {i}")
        if s.dtype != sps[0].dtype:
            raise InvalidArgumentError(None, None, f"cannot compute SparseConcat as input #{i}(zero-based) was expected "
                                       f"to be a {sps[0].dtype.name} tensor but is a {s.dtype.name} tensor")
    ax = _axis(int(axis), rank, "concat")
    out = list(shapes[0])
    for i, sh in enumerate(shapes[1:], 1):
        for d in range(rank):
            if d == ax:
                continue
            if expand_nonconcat_dims:
                out[d] = max(out[d], sh[d])
            elif sh[d] != out[d]:
                raise InvalidArgumentError(None, None, f"Input shapes must match: expected {out[d]} for dimension {d} "
                                           f"but got {sh[d]} at position {i}")
    offset, parts = 0, []
    for s, sh in zip(sps, shapes):
        parts.append(bind(_OFFSET, s._indices, axis=ax, offset=offset) if offset else s._indices)
        offset += sh[ax]
    out[ax] = offset
    return _sorted(bind(_CONCAT, *parts), bind(_CONCAT, *[s._values for s in sps]), tuple(out))


def slice(sp_input: Any, start: Any, size: Any, name: Any = None) -> SparseTensor:  # noqa: A001 - TF's name
    """``tf.sparse.slice``: the entries in ``[start, start + size)``, shifted to start at 0 (the
    result's shape clipped to the input's)."""
    sp = _check(sp_input, "slice")
    shape = np.asarray(sp.static_shape("tf.sparse.slice"), np.int64)
    st = np.asarray(start.numpy() if isinstance(start, Tensor) else start, np.int64).reshape(-1)
    sz = np.asarray(size.numpy() if isinstance(size, Tensor) else size, np.int64).reshape(-1)
    if st.shape[0] != len(shape) or sz.shape[0] != len(shape):
        raise InvalidArgumentError(None, None, f"Expected start and size to have {len(shape)} values each (the rank); "
                                   f"got {st.shape[0]} and {sz.shape[0]} (arguments `start`, `size` of tf.sparse.slice)")
    ind = host_indices(sp, "tf.sparse.slice")
    end = np.minimum(st + sz, shape)
    keep = np.nonzero(((ind >= st) & (ind < end)).all(axis=1))[0] if len(shape) else np.arange(len(ind))
    out_shape = tuple(int(d) for d in np.maximum(end - st, 0))
    return SparseTensor._of(ind[keep] - st, _gather(sp._values, keep), out_shape)


def retain(sp_input: Any, to_retain: Any) -> SparseTensor:
    """``tf.sparse.retain``: the entries where the bool vector ``to_retain`` is True."""
    sp = _check(sp_input, "retain")
    keep = np.asarray(to_retain.numpy() if isinstance(to_retain, Tensor) else to_retain)
    if keep.ndim != 1:
        raise ValueError(f"Shape {keep.shape} must have rank 1 (argument `to_retain` of tf.sparse.retain)")
    if keep.shape[0] != sp._values.shape[0]:
        raise ValueError(f"Dimensions {sp._values.shape[0]} and {keep.shape[0]} are not compatible (the entries of "
                         "`sp_input` and the length of `to_retain`)")
    sel = np.nonzero(keep)[0]
    return SparseTensor._of(host_indices(sp, "tf.sparse.retain")[sel], _gather(sp._values, sel),
                            sp.static_shape("tf.sparse.retain"))


def fill_empty_rows(sp_input: Any, default_value: Any, name: Any = None) -> Tuple[SparseTensor, Tensor]:
    """``tf.sparse.fill_empty_rows``: an entry ``[r, 0, ...] = default_value`` in each row ``r``
    with none, entries sorted by row (stably); and the bool vector of the rows filled."""
    sp = _check(sp_input, "fill_empty_rows")
    shape = sp.static_shape("tf.sparse.fill_empty_rows")
    ind = host_indices(sp, "tf.sparse.fill_empty_rows")
    empty = np.ones(shape[0], bool)
    empty[ind[:, 0]] = False
    rows = np.nonzero(empty)[0]
    new = np.zeros((len(rows), len(shape)), np.int64)
    new[:, 0] = rows
    all_ind = np.concatenate([ind, new])
    order = np.argsort(all_ind[:, 0], kind="stable")
    sel = np.concatenate([np.arange(len(ind)), np.full(len(rows), len(ind))])[order]
    fill = convert_to_tensor(default_value, dtype=sp.dtype)
    values = bind(GATHER_OR, sp._values, fill, sel.astype(np.int32))
    return SparseTensor._of(all_ind[order], values, shape), convert_to_tensor(empty)


# -- arithmetic --------------------------------------------------------------------------

def _union(a: SparseTensor, b: SparseTensor, op: str):
    """The row-major union of ``a``'s and ``b``'s entries: (indices, where each came from in
    ``a`` and in ``b`` (-1: absent), shape)."""
    sa, sb = a.static_shape(op), b.static_shape(op)
    if len(sa) != len(sb) or sa != sb:
        d = next((k for k in range(min(len(sa), len(sb))) if sa[k] != sb[k]), min(len(sa), len(sb)))
        got = (sa[d] if d < len(sa) else "?", sb[d] if d < len(sb) else "?")
        raise InvalidArgumentError(None, None, f"Operands' shapes do not match: got {got[0]} and {got[1]} for "
                                   f"dimension {d}")
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: the SparseTensors' dtypes differ: {a.dtype.name} and {b.dtype.name}.")
    ia, ib = host_indices(a, op), host_indices(b, op)
    both = np.concatenate([ia, ib])
    flat = np.ravel_multi_index(tuple(both.T), sa) if sa else np.zeros(len(both), np.int64)
    keys, first, seg = np.unique(flat, return_index=True, return_inverse=True)
    return both[first], seg.reshape(-1), len(ia), len(keys), sa


def add(a: Any, b: Any, threshold: Any = 0, thresh: Any = None) -> Any:
    """``tf.sparse.add``: sparse + dense is dense; sparse + sparse is sparse (TF's merge, ``_merge``:
    an entry of ``a`` and one of ``b`` at the same index summed, row-major order, a sum of magnitude
    below ``threshold`` dropped)."""
    if thresh is not None:
        threshold = thresh
    if not isinstance(a, SparseTensor) and not isinstance(b, SparseTensor):
        raise TypeError("tf.sparse.add: at least one of `a` and `b` must be a SparseTensor.")
    if not isinstance(a, SparseTensor) or not isinstance(b, SparseTensor):
        sp, dense = (a, b) if isinstance(a, SparseTensor) else (b, a)
        d = convert_to_tensor(dense, dtype=sp.dtype)
        if tuple(d.shape) != sp.static_shape("tf.sparse.add"):
            raise InvalidArgumentError(None, None, f"Dimension mismatch: a_shape={list(sp.shape)} but b shape "
                                       f"{list(d.shape)} (tf.sparse.add of a SparseTensor and a dense tensor)")
        return bind(DENSE_ADD, sp._indices, sp._values, d)
    ind, seg, paired, n, shape = _merge(a, b)
    values = bind(SEGMENT, bind(_CONCAT, a._values, b._values), seg.astype(np.int32), n=n)
    out = SparseTensor._of(ind, values, shape)
    thr = np.asarray(threshold.numpy() if isinstance(threshold, Tensor) else threshold)
    if np.any(thr != 0):   # (TF's threshold drops only sums: an entry of one side stays)
        keep = ~paired | (np.abs(np.asarray(values.numpy())) >= thr)
        out = retain(out, keep)
    return out


def _merge(a: SparseTensor, b: SparseTensor):
    """TF's ``SparseAdd`` merge of two row-major lists of entries: the ``t``-th entry at an index in
    ``a`` meets the ``t``-th at that index in ``b`` (one output entry, their sum); the others stay
    apart, so a duplicated index in one input stays duplicated.  Returns (indices, each input
    entry's output position (``a``'s, then ``b``'s), which outputs are sums, count, shape)."""
    ind, _, na, _, shape = _union(a, b, "tf.sparse.add")   # (checks the shapes and dtypes)
    both = np.concatenate([host_indices(a, "tf.sparse.add"), host_indices(b, "tf.sparse.add")])
    k = np.asarray(np.ravel_multi_index(tuple(both.T), shape) if shape else np.zeros(len(both)), np.int64)
    r = np.concatenate([_occurrence(k[:na]), _occurrence(k[na:])])
    order = np.lexsort((r, k))
    ks, rs = k[order], r[order]
    new = np.concatenate([[True], (ks[1:] != ks[:-1]) | (rs[1:] != rs[:-1])]) if len(k) else np.zeros(0, bool)
    pos = np.cumsum(new) - 1
    seg = np.empty(len(k), np.int64)
    seg[order] = pos
    n = int(new.sum())
    return both[order[new]], seg, np.bincount(pos, minlength=n) == 2, n, shape


def _occurrence(k: np.ndarray) -> np.ndarray:
    """For each key, how many equal keys come before it (0 for the first)."""
    order = np.argsort(k, kind="stable")
    ks = k[order]
    start = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]])) if len(ks) else np.zeros(0, np.int64)
    out = np.empty(len(k), np.int64)
    out[order] = np.arange(len(ks)) - np.repeat(start, np.diff(np.append(start, len(ks))))
    return out


def _minmax(sp_a: Any, sp_b: Any, fn: Callable[[Any, Any], Any], op: str) -> SparseTensor:
    a, b = _check(sp_a, op, "sp_a"), _check(sp_b, op, "sp_b")
    ind, seg, na, n, shape = _union(a, b, f"tf.sparse.{op}")
    where_a = np.full(n, -1, np.int64)
    where_b = np.full(n, -1, np.int64)
    where_a[seg[:na]] = np.arange(na)
    where_b[seg[na:]] = np.arange(len(seg) - na)
    zero = convert_to_tensor(0, dtype=a.dtype)
    va = bind(GATHER_OR, a._values, zero, where_a.astype(np.int32))
    vb = bind(GATHER_OR, b._values, zero, where_b.astype(np.int32))
    return SparseTensor._of(ind, fn(va, vb), shape)


def maximum(sp_a: Any, sp_b: Any, name: Any = None) -> SparseTensor:
    """``tf.sparse.maximum``: the elementwise maximum over the union of entries (absent: 0)."""
    from .math import maximum as _max
    return _minmax(sp_a, sp_b, _max, "maximum")


def minimum(sp_a: Any, sp_b: Any, name: Any = None) -> SparseTensor:
    """``tf.sparse.minimum``: the elementwise minimum over the union of entries (absent: 0)."""
    from .math import minimum as _min
    return _minmax(sp_a, sp_b, _min, "minimum")


def sparse_dense_matmul(sp_a: Any, b: Any, adjoint_a: bool = False, adjoint_b: bool = False, name: Any = None) -> Tensor:
    """``tf.sparse.sparse_dense_matmul``: ``sp_a @ b`` for a rank-2 SparseTensor ``sp_a``."""
    sp = _check(sp_a, "sparse_dense_matmul", "sp_a")
    shape = sp.static_shape("tf.sparse.sparse_dense_matmul")
    d = convert_to_tensor(b, dtype=sp.dtype)
    if len(shape) != 2 or d.ndim != 2:
        raise ValueError(f"tf.sparse.sparse_dense_matmul multiplies matrices: `sp_a` has rank {len(shape)} and `b` "
                         f"rank {d.ndim} (expected 2 and 2).")
    m, k = shape[::-1] if adjoint_a else shape
    kb = d.shape[1] if adjoint_b else d.shape[0]
    if k != kb:
        raise InvalidArgumentError(None, None, f"Cannot multiply A and B because inner dimension does not match: {k} "
                                   f"vs. {kb}.  Did you forget a transpose?  Dimensions of A: [{shape[0]}, {shape[1]})."
                                   f"  Dimensions of B: [{d.shape[0]},{d.shape[1]}]")
    return bind(MATMUL, sp._indices, sp._values, d, rows=m, adjoint_a=bool(adjoint_a), adjoint_b=bool(adjoint_b))


def _reduction(sp_input: Any, axis: Any, keepdims: Any, output_is_sparse: bool, kind: str, op: str) -> Any:
    sp = _check(sp_input, op)
    shape = sp.static_shape(f"tf.sparse.{op}")
    rank = len(shape)
    if axis is None:
        axes = set(range(rank))
    else:
        ax = np.asarray(axis.numpy() if isinstance(axis, Tensor) else axis).reshape(-1)
        axes = {_axis(int(a), rank, op) for a in ax}
    keep = tuple(k for k in range(rank) if k not in axes)
    out_shape = tuple(shape[k] for k in keep)
    if output_is_sparse:
        ind = host_indices(sp, f"tf.sparse.{op}")[:, list(keep)]
        flat = np.ravel_multi_index(tuple(ind.T), out_shape) if keep else np.zeros(len(ind), np.int64)
        _, first, seg = np.unique(flat, return_index=True, return_inverse=True)
        seg = seg.reshape(-1).astype(np.int32)
        if kind == "sum":
            values = bind(SEGMENT, sp._values, seg, n=len(first))
        else:
            values = bind(REDUCE, seg[:, None], sp._values, keep=(0,), shape=(len(first),), kind="max")
        new = ind[first]
        if keepdims:
            full = np.zeros((len(first), rank), np.int64)
            full[:, list(keep)] = new
            return SparseTensor._of(full, values, tuple(1 if k in axes else shape[k] for k in range(rank)))
        return SparseTensor._of(new, values, out_shape)
    out = bind(REDUCE, sp._indices, sp._values, keep=keep, shape=out_shape, kind=kind)
    if keepdims:
        from .array import reshape as _reshape
        out = _reshape(out, [1 if k in axes else shape[k] for k in range(rank)])
    return out


def reduce_sum(sp_input: Any, axis: Any = None, keepdims: Any = None, output_is_sparse: bool = False,
               name: Any = None) -> Any:
    """``tf.sparse.reduce_sum``: the sum of the entries over ``axis`` (all by default); dense, or
    a SparseTensor of the groups that have entries with ``output_is_sparse``."""
    return _reduction(sp_input, axis, keepdims, output_is_sparse, "sum", "reduce_sum")


def reduce_max(sp_input: Any, axis: Any = None, keepdims: Any = None, output_is_sparse: bool = False,
               name: Any = None) -> Any:
    """``tf.sparse.reduce_max``: the maximum of the present entries over ``axis`` (absent entries
    are not zeros; a group with none gives 0 in the dense result)."""
    return _reduction(sp_input, axis, keepdims, output_is_sparse, "max", "reduce_max")


def softmax(sp_input: Any, name: Any = None) -> SparseTensor:
    """``tf.sparse.softmax``: a softmax over the present entries of each innermost row."""
    sp = _check(sp_input, "softmax")
    shape = sp.static_shape("tf.sparse.softmax")
    return sp.with_values(bind(SOFTMAX, sp._indices, sp._values, shape=shape))


def map_values(op: Callable[..., Any], *args: Any, **kwargs: Any) -> SparseTensor:
    """``tf.sparse.map_values``: ``op`` applied to the values of the SparseTensors in ``args`` /
    ``kwargs`` (which must have the same indices), giving a SparseTensor with those indices."""
    leaves = [x for x in flatten((args, kwargs)) if isinstance(x, SparseTensor)]
    if not leaves:
        raise ValueError("No SparseTensor in argument list of map_values")
    first = leaves[0]
    for other in leaves[1:]:
        same = other._indices.shape == first._indices.shape and other._static == first._static
        if same and not (is_traced(other._indices) or is_traced(first._indices)):
            same = bool(np.array_equal(np.asarray(other._indices.numpy()), np.asarray(first._indices.numpy())))
        if not same:
            raise InvalidArgumentError(None, None, "Inputs must have identical indices.")

    def sub(x: Any) -> Any:
        return x._values if isinstance(x, SparseTensor) else x

    mapped = pack_sequence_as((args, kwargs), [sub(x) for x in flatten((args, kwargs))])
    return first.with_values(op(*mapped[0], **mapped[1]))


def eye(num_rows: int, num_columns: Optional[int] = None, dtype: Any = _dtypes.float32, name: Any = None) -> SparseTensor:
    """``tf.sparse.eye``: the identity as a SparseTensor of shape ``[num_rows, num_columns]``."""
    rows = int(num_rows)
    cols = rows if num_columns is None else int(num_columns)
    n = min(rows, cols)
    ind = np.stack([np.arange(n), np.arange(n)], axis=1).astype(np.int64)
    return SparseTensor._of(ind, convert_to_tensor(np.ones(n), dtype=dtype), (rows, cols))


#: ``tf.sparse``'s names.
PUBLIC = ("SparseTensor", "add", "concat", "expand_dims", "eye", "fill_empty_rows", "from_dense", "map_values",
          "maximum", "minimum", "reduce_max", "reduce_sum", "reorder", "reshape", "retain", "slice", "softmax",
          "sparse_dense_matmul", "to_dense", "to_indicator", "transpose")

__all__ = ["PUBLIC", "SparseTensor", "SparseTensorSpec", "add", "concat", "expand_dims", "eye", "fill_empty_rows", "from_dense",
           "map_values", "maximum", "minimum", "reduce_max", "reduce_sum", "reorder", "reshape", "retain", "slice",
           "softmax", "sparse_dense_matmul", "to_dense", "to_indicator", "transpose", "check_indices", "index_dtype"]
