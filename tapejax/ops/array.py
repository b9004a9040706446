"""Array ops (shapes, indexing, stacking, gathers and scatters, constructors).

Static arguments (shapes, axes, permutations, paddings) are read in the
Python wrapper and passed to the primitive as hashable tuples; tensor
arguments that only index (``indices``, ``segment_ids``) are inputs, so a
new index value does not recompile anything.

Gathers from a Variable (``tf.gather(v, i)``, ``embedding_lookup``): TF's
tape returns ``tf.IndexedSlices``; tapejax returns the *dense* gradient (a
Tensor of the Variable's shape, zeros outside the gathered rows, repeated
rows summed), which is what ``tf.convert_to_tensor(indexed_slices)`` gives
and what every tapejax optimizer consumes.  Out-of-range indices are not
checked on the device (TF raises); JAX's gather fills them with NaN/0 and
their gradient is dropped.
"""
import builtins
import collections

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, state as _state, tensor as _tensor
from ..core.bind import bind
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor, convert_to_tensor
from ..core.variable import Variable
from ._registry import (
    call_plain2,
    check_binary,
    dtype_of,
    op_error,
    plain_jit,
    prim,
    static_axis,
    static_shape,
    tf_types,
)

_TENSORISH = (Tensor, Variable)
_pyrange = builtins.range
_pyslice = builtins.slice


def _shape(x):
    if isinstance(x, _TENSORISH):
        return tuple(x._value.shape)
    return tuple(np.shape(x))


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _norm_axis(axis, ndim, op_type, arg="axis"):
    a = int(axis)
    if not -ndim <= a < ndim:
        raise _bad(op_type, f"Expected argument `{arg}` in the range [{-ndim}, {ndim}), but got {a}")
    return a % ndim


def _call(p, op_type, *args, **static):
    try:
        return bind(p, *args, **static)
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


# -- shapes ---------------------------------------------------------------------

_RESHAPE = prim("Reshape", lambda x, *, shape: jnp.reshape(x, shape))


@tf_types("Reshape")
def reshape(tensor, shape, name=None):
    """``tf.reshape`` (one dimension may be -1)."""
    shape = static_shape(shape)
    if shape.count(-1) > 1:
        raise _bad("Reshape", f"Only one input size may be -1: the requested shape {list(shape)} "
                   "(argument `shape`) has more")
    n = int(np.prod(_shape(tensor)))
    known = int(np.prod([s for s in shape if s != -1]))
    if (-1 not in shape and known != n) or (-1 in shape and (known == 0 or n % known)):
        raise _bad("Reshape", f"Input to reshape is a tensor with {n} values, but the requested shape "
                   f"{list(shape)} (argument `shape`) does not fit")
    return bind(_RESHAPE, tensor, shape=shape)


_PACK = prim("Pack", lambda *xs, axis: jnp.stack(xs, axis=axis))


@tf_types("Pack")
def stack(values, axis=0, name="stack"):
    """``tf.stack``: join equally shaped tensors along a new ``axis``."""
    shapes = {_shape(v) for v in values}
    if len(shapes) > 1:
        raise _bad("Pack", f"Shapes of all inputs must match (argument `values`): got {sorted(shapes)}")
    return _call(_PACK, "Pack", *values, axis=int(axis))


def _pack_nested(value):
    """convert_to_tensor of a (nested) list holding Tensors: a recorded Pack."""
    items = [(_pack_nested(v) if isinstance(v, (list, tuple)) else v) for v in value]
    dtype = next((x.dtype for x in items if isinstance(x, (Tensor, Variable))), None)
    items = [x if isinstance(x, (Tensor, Variable)) else convert_to_tensor(x, dtype=dtype) for x in items]
    return stack(items)


_tensor.pack_hook = _pack_nested


def _unstack(x, *, axis):
    return tuple(jnp.moveaxis(x, axis, 0))


_UNPACK = prim("Unpack", _unstack, multiple_results=True)


@tf_types("Unpack")
def unstack(value, num=None, axis=0, name="unstack"):
    """``tf.unstack``: a list of the slices along ``axis``."""
    shape = _shape(value)
    ax = _norm_axis(axis, len(shape), "Unpack")
    if num is not None and int(num) != shape[ax]:
        raise ValueError(f"Argument `num` ({num}) must equal the dimension {shape[ax]} of axis {axis}")
    return list(bind(_UNPACK, value, axis=ax))


def _split(x, *, sizes, axis):
    idx = np.cumsum(sizes)[:-1].tolist()
    return tuple(jnp.split(x, idx, axis=axis))


_SPLIT = prim("SplitV", _split, multiple_results=True)


@tf_types("SplitV")
def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """``tf.split``: ``num_or_size_splits`` an int (equal parts) or a list of sizes (one may be -1)."""
    shape = _shape(value)
    ax = _norm_axis(axis, len(shape), "Split")
    d = shape[ax]
    if isinstance(num_or_size_splits, (int, np.integer)):
        k = int(num_or_size_splits)
        if k <= 0 or d % k:
            raise _bad("Split", f"Number of ways to split should evenly divide the split dimension, but "
                       f"got split_dim {ax} (size = {d}) and num_split {k} (argument `num_or_size_splits`)")
        sizes = (d // k,) * k
    else:
        sizes = list(static_shape(num_or_size_splits))
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = d - (sum(sizes) + 1)
        if sum(sizes) != d or min(sizes, default=0) < 0:
            raise _bad("SplitV", f"Determined shape must either match input shape along split_dim "
                       f"exactly if fully specified, or be less than the size of the input along "
                       f"split_dim if not fully specified: sizes {sizes} vs dimension {d}")
        sizes = tuple(sizes)
    return list(bind(_SPLIT, value, sizes=sizes, axis=ax))


_TRANSPOSE = prim("Transpose", lambda x, *, perm, conj: jnp.conj(jnp.transpose(x, perm)) if conj
                  else jnp.transpose(x, perm))


@tf_types("Transpose")
def transpose(a, perm=None, conjugate=False, name="transpose"):
    """``tf.transpose``: reverses the axes when ``perm`` is None."""
    nd = len(_shape(a))
    perm = tuple(_pyrange(nd))[::-1] if perm is None else static_shape(perm)
    if len(perm) != nd:
        raise _bad("Transpose", f"transpose expects a vector of size {nd}. But input(1) (argument "
                   f"`perm`) is {list(perm)}")
    if sorted(p % max(nd, 1) for p in perm) != list(_pyrange(nd)):
        raise _bad("Transpose", f"Argument `perm` {list(perm)} is not a permutation of "
                   f"{list(_pyrange(nd))}")
    return bind(_TRANSPOSE, a, perm=tuple(p % nd for p in perm), conj=bool(conjugate))


_CONCAT = prim("ConcatV2", lambda *xs, axis: jnp.concatenate(xs, axis=axis))


@tf_types("ConcatV2")
def concat(values, axis, name="concat"):
    """``tf.concat`` along ``axis``."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    shapes = [_shape(v) for v in values]
    nd = len(shapes[0])
    ax = _norm_axis(axis, max(nd, 1), "ConcatV2")
    for s in shapes[1:]:
        if len(s) != nd or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != ax):
            raise _bad("ConcatV2", f"ConcatOp : Dimensions of inputs should match (argument `values`): "
                       f"shape[0] = {list(shapes[0])} vs. {list(s)}")
    dts = [dtype_of(v) if isinstance(v, _TENSORISH) else None for v in values]
    d0 = next((d for d in dts if d is not None), None)
    for i, d in enumerate(dts):
        if d is not None and d != d0:
            assert d0 is not None  # the first dtype that is not None
            raise _bad("ConcatV2", f"cannot compute ConcatV2 as input #{i}(zero-based) was expected to be "
                       f"a {d0.name} tensor but is a {d.name} tensor (argument `values`)")
    return _call(_CONCAT, "ConcatV2", *values, axis=ax)


_SQUEEZE = prim("Squeeze", lambda x, *, axis: jnp.squeeze(x, axis))


@tf_types("Squeeze")
def squeeze(input, axis=None, name=None):
    """``tf.squeeze``: drop size-1 dimensions (all, or those in ``axis``)."""
    shape = _shape(input)
    if axis is None:
        ax = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        ax = static_axis(axis)
        ax = tuple(_norm_axis(a, len(shape), "Squeeze") for a in (ax if isinstance(ax, tuple) else (ax,)))
        for a in ax:
            if shape[a] != 1:
                raise _bad("Squeeze", f"Can not squeeze dim[{a}], expected a dimension of 1, got "
                           f"{shape[a]} (argument `axis`)")
    return bind(_SQUEEZE, input, axis=ax)


_EXPAND = prim("ExpandDims", lambda x, *, axis: jnp.expand_dims(x, axis))


@tf_types("ExpandDims")
def expand_dims(input, axis, name=None):
    """``tf.expand_dims``: insert a size-1 dimension at ``axis`` (``-1`` appends)."""
    nd = len(_shape(input))
    ax = _norm_axis(axis, nd + 1, "ExpandDims")
    return bind(_EXPAND, input, axis=ax)


_TILE = prim("Tile", lambda x, *, reps: jnp.tile(x, reps))


@tf_types("Tile")
def tile(input, multiples, name=None):
    """``tf.tile``: ``multiples`` has one entry per dimension."""
    reps = static_shape(multiples)
    nd = len(_shape(input))
    if len(reps) != nd:
        raise _bad("Tile", f"Expected multiples argument to be a vector of length {nd} but got length "
                   f"{len(reps)}")
    return bind(_TILE, input, reps=reps)


def _pad(x, c, *, pads, mode):
    if mode == "constant":
        return jnp.pad(x, pads, mode="constant", constant_values=c)
    return jnp.pad(x, pads, mode=mode)


_PAD = prim("PadV2", _pad)
_PAD_MIRROR = prim("MirrorPad", _pad)


@tf_types("PadV2", "MirrorPad")
def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """``tf.pad``: ``paddings`` is ``[[before, after], ...]`` per dimension; modes CONSTANT,
    REFLECT, SYMMETRIC (case-insensitive, as TF)."""
    m = str(mode).upper()
    if m not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise ValueError(f'Value of argument `mode` expected to be one of "CONSTANT", "REFLECT", or '
                         f'"SYMMETRIC". Received `mode` = {m}')
    pads = np.asarray(getattr(paddings, "_value", paddings)).reshape(-1, 2)
    pads = tuple((int(a), int(b)) for a, b in pads)
    nd = len(_shape(tensor))
    if len(pads) != nd:
        raise _bad("Pad", f"The first dimension of paddings must be the rank of inputs [{len(pads)},2], "
                   f"{nd} (argument `paddings`)")
    if m == "CONSTANT":
        d = dtype_of(tensor)
        c = convert_to_tensor(constant_values, dtype_hint=d) if d is not None else constant_values
        return bind(_PAD, tensor, c, pads=pads, mode="constant")
    return bind(_PAD_MIRROR, tensor, 0, pads=pads, mode=m.lower() if m == "REFLECT" else "symmetric")


_BROADCAST_TO = prim("BroadcastTo", lambda x, *, shape: jnp.broadcast_to(x, shape))


@tf_types("BroadcastTo")
def broadcast_to(input, shape, name=None):
    """``tf.broadcast_to`` (the gradient sums over the broadcast dimensions)."""
    shape = static_shape(shape)
    try:
        np.broadcast_shapes(_shape(input), shape)
    except ValueError:
        raise _bad("BroadcastTo", f"Unable to broadcast tensor of shape {list(_shape(input))} to tensor "
                   f"of shape {list(shape)} (argument `shape`)") from None
    return bind(_BROADCAST_TO, input, shape=shape)


_REVERSE = prim("ReverseV2", lambda x, *, axis: jnp.flip(x, axis))


@tf_types("ReverseV2")
def reverse(tensor, axis, name=None):
    """``tf.reverse`` along the listed axes."""
    nd = len(_shape(tensor))
    ax = static_axis(axis)
    ax = tuple(_norm_axis(a, nd, "ReverseV2") for a in (ax if isinstance(ax, tuple) else (ax,)))
    return bind(_REVERSE, tensor, axis=ax)


_ROLL = prim("Roll", lambda x, *, shift, axis: jnp.roll(x, shift, axis))


@tf_types("Roll")
def roll(input, shift, axis, name=None):
    """``tf.roll``: ``shift`` and ``axis`` ints or equally long lists."""
    sh = static_axis(shift)
    ax = static_axis(axis)
    return _call(_ROLL, "Roll", input, shift=sh, axis=ax)


def _repeat(x, *, repeats, axis):
    return jnp.repeat(x, np.asarray(repeats) if isinstance(repeats, tuple) else repeats, axis=axis,
                      total_repeat_length=int(np.sum(repeats)) if isinstance(repeats, tuple) else None)


_REPEAT = prim("Repeat", _repeat)


@tf_types("Repeat")
def repeat(input, repeats, axis=None, name=None):
    """``tf.repeat``: ``repeats`` an int or one int per element along ``axis`` (flattened when None)."""
    r = static_axis(repeats)
    return _call(_REPEAT, "Repeat", input, repeats=r, axis=None if axis is None else int(axis))


# -- sorting, unique ------------------------------------------------------------------

def _sort(x, *, axis, descending):
    if descending:
        return -jnp.sort(-x, axis=axis, stable=True) if jnp.issubdtype(x.dtype, jnp.floating) else \
            jnp.flip(jnp.sort(jnp.flip(x, axis), axis=axis, stable=True), axis)
    return jnp.sort(x, axis=axis, stable=True)


_SORT = prim("Sort", _sort)


def _direction(direction):
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"Argument `direction` should be one of {{'ASCENDING', 'DESCENDING'}}. "
                         f"Received: direction={direction}")
    return direction == "DESCENDING"


@tf_types("Sort")
def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``tf.sort`` (stable; the gradient follows each value to its sorted position)."""
    return bind(_SORT, values, axis=int(axis), descending=_direction(direction))


def _argsort(x, *, axis, descending):
    return jnp.argsort(x, axis=axis, stable=True, descending=descending).astype(jnp.int32)


_ARGSORT = prim("ArgSort", _argsort, differentiable=False)


@tf_types("ArgSort")
def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """``tf.argsort``: int32 indices (always stable here)."""
    return bind(_ARGSORT, values, axis=int(axis), descending=_direction(direction))


def _unique(x, *, dtype):
    vals, first, inv = np.unique(np.asarray(x), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return jnp.asarray(vals[order]), jnp.asarray(rank[inv.reshape(-1)].astype(dtype))


_UNIQUE = prim("Unique", _unique, differentiable=False, multiple_results=True, jit=False)


#: ``(y, idx)`` of ``unique``: TF's namedtuple.
Unique = collections.namedtuple("Unique", ["y", "idx"])


@tf_types("Unique")
def unique(x, out_idx=_dtypes.int32, name=None):
    """``tf.unique`` of a 1-D tensor: values in order of first appearance and each element's index
    into them.  The output size depends on the values, so this reads them (eager only; no gradient,
    as TF)."""
    if len(_shape(x)) != 1:
        raise _bad("Unique", f"unique expects a 1D vector (argument `x`), got shape {list(_shape(x))}")
    store = _dtypes.storage_dtype(_dtypes.as_dtype(out_idx)._np, "out_idx")
    return Unique(*bind(_UNIQUE, x, dtype=store.name))


# -- gathers and scatters ------------------------------------------------------------

def _gather(params, indices, *, axis=0, batch_dims=0):
    if batch_dims == 0:
        return jnp.take(params, indices, axis=axis)
    f = lambda p, i: _gather(p, i, axis=axis - 1, batch_dims=batch_dims - 1)  # noqa: E731
    return jax.vmap(f)(params, indices)


_GATHER = prim("GatherV2", _gather)
_GATHER_PLAIN = plain_jit(_GATHER, lambda p, i: p.ndim >= 1 and i.dtype.kind in "iu")


def _int_indices(indices, op_type, arg="indices"):
    t = convert_to_tensor(indices)
    if t._value.dtype.kind not in "iu":
        raise _bad(op_type, f"Value for attr 'Tindices' of {t.dtype.name} is not in the list of "
                   f"allowed values: int16, int32, int64 (argument `{arg}`)")
    return t


@tf_types("GatherV2")
def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """``tf.gather`` along ``axis`` (default ``batch_dims``).  From a Variable the gradient is dense
    (see the module docstring)."""
    if type(params) is Tensor and type(indices) is Tensor and axis is None and batch_dims == 0:
        try:  # the fast path: index dtype and params rank are checked when JAX traces
            return call_plain2(_GATHER, _GATHER_PLAIN, params, indices)
        except Exception:  # noqa: BLE001 - the checked path below raises TF's error for it
            pass
    idx = _int_indices(indices, "GatherV2")
    nd = len(_shape(params))
    bd = int(batch_dims) % (idx.ndim + 1) if batch_dims < 0 else int(batch_dims)
    ax = bd if axis is None else int(axis)
    if not -nd <= ax < nd:
        raise _bad("GatherV2", f"Shape must be at least rank {ax + 1} but is rank {nd} (argument `axis`)")
    ax %= nd
    if ax == 0 and bd == 0:
        return bind(_GATHER, params, idx)  # the common case: no static parameters
    return bind(_GATHER, params, idx, axis=ax, batch_dims=bd)


def _gather_nd(params, indices, *, batch_dims):
    if batch_dims:
        f = lambda p, i: _gather_nd(p, i, batch_dims=batch_dims - 1)  # noqa: E731
        return jax.vmap(f)(params, indices)
    k = indices.shape[-1]
    return params[tuple(jnp.moveaxis(indices, -1, 0)[j] for j in _pyrange(k))]


_GATHER_ND = prim("GatherNd", _gather_nd)


@tf_types("GatherNd")
def gather_nd(params, indices, batch_dims=0, name=None, bad_indices_policy=""):
    """``tf.gather_nd``: ``indices[..., k]`` index the first ``k`` dimensions of ``params``."""
    idx = _int_indices(indices, "GatherNd")
    if idx._value.shape[-1] > len(_shape(params)) - int(batch_dims):
        raise _bad("GatherNd", f"index innermost dimension length must be <= params rank; saw: "
                   f"{idx._value.shape[-1]} vs. {len(_shape(params))} (argument `indices`)")
    return bind(_GATHER_ND, params, idx, batch_dims=int(batch_dims))


def _scatter_idx(indices):
    k = indices.shape[-1]
    return tuple(jnp.moveaxis(indices, -1, 0)[j] for j in _pyrange(k))


_SCATTER_ND = prim("ScatterNd", lambda idx, upd, *, shape: jnp.zeros(shape, upd.dtype)
                   .at[_scatter_idx(idx)].add(upd, mode="drop"))
_TS_UPDATE = prim("TensorScatterUpdate", lambda t, idx, upd: t.at[_scatter_idx(idx)].set(upd, mode="drop"))
_TS_ADD = prim("TensorScatterAdd", lambda t, idx, upd: t.at[_scatter_idx(idx)].add(upd, mode="drop"))


@tf_types("ScatterNd")
def scatter_nd(indices, updates, shape, name=None):
    """``tf.scatter_nd``: zeros of ``shape`` with ``updates`` summed in at ``indices``."""
    return _call(_SCATTER_ND, "ScatterNd", _int_indices(indices, "ScatterNd"), updates,
                 shape=static_shape(shape))


@tf_types("TensorScatterUpdate")
def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_update``: ``tensor`` with the slices at ``indices`` replaced."""
    check_binary(tensor, updates, "TensorScatterUpdate")
    return _call(_TS_UPDATE, "TensorScatterUpdate", tensor, _int_indices(indices, "TensorScatterUpdate"),
                 updates)


@tf_types("TensorScatterAdd")
def tensor_scatter_nd_add(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_add``: ``tensor`` with ``updates`` added at ``indices``."""
    check_binary(tensor, updates, "TensorScatterAdd")
    return _call(_TS_ADD, "TensorScatterAdd", tensor, _int_indices(indices, "TensorScatterAdd"), updates)


_SLICE = prim("Slice", lambda x, *, begin, size: jax.lax.slice(
    x, begin, tuple(b + s for b, s in zip(begin, size))))


@tf_types("Slice")
def slice(input_, begin, size, name=None):  # noqa: A001  (TF's name)
    """``tf.slice``: ``size[i] == -1`` takes everything from ``begin[i]``."""
    shape = _shape(input_)
    begin = static_shape(begin)
    size = static_shape(size)
    if len(begin) != len(shape) or len(size) != len(shape):
        raise _bad("Slice", f"Expected `begin` and `size` arguments to be 1-D tensors of size "
                   f"{len(shape)}, but got shapes [{len(begin)}] and [{len(size)}] instead.")
    size = tuple(d - b if s == -1 else s for s, b, d in zip(size, begin, shape))
    for b, s, d in zip(begin, size, shape):
        if b < 0 or s < 0 or b + s > d:
            raise _bad("Slice", f"Expected begin[i] + size[i] <= dim, got begin {list(begin)}, size "
                       f"{list(size)} for shape {list(shape)}")
    return bind(_SLICE, input_, begin=begin, size=size)


def _boolean_mask(x, *, mask, mask_shape, axis):
    keep = np.nonzero(np.asarray(mask, bool))[0]
    xs = x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + len(mask_shape):])
    return jnp.take(xs, jnp.asarray(keep, jnp.int32), axis=axis)


_BOOLEAN_MASK = prim("BooleanMask", _boolean_mask)


@tf_types("BooleanMask")
def boolean_mask(tensor, mask, axis=None, name="boolean_mask"):
    """``tf.boolean_mask``: the entries where ``mask`` is true.  The output size depends on the
    mask's values, which are read on the host (eager only) and become a static parameter; the
    gradient scatters back, as TF's."""
    m = convert_to_tensor(mask)
    if m._value.dtype.kind != "b":
        raise TypeError(f"Argument `mask` must be a bool tensor; got {m.dtype.name}")
    shape = _shape(tensor)
    ax = 0 if axis is None else int(axis) % len(shape)
    if tuple(shape[ax:ax + m.ndim]) != tuple(m.shape):
        raise ValueError(f"Shapes {list(shape)} and {list(m.shape)} are incompatible: `mask` must match "
                         f"the dimensions of `tensor` from `axis` {ax}")
    flat = tuple(bool(b) for b in np.asarray(m._value).reshape(-1))
    return bind(_BOOLEAN_MASK, tensor, mask=flat, mask_shape=tuple(m.shape), axis=ax)


# -- einsum, tensordot, meshgrid ---------------------------------------------------------

_EINSUM = prim("Einsum", lambda *xs, equation: jnp.einsum(equation, *xs))


@tf_types("Einsum")
def einsum(equation, *inputs, **kwargs):
    """``tf.einsum``."""
    if not isinstance(equation, str):
        raise TypeError(f"Argument `equation` must be a string; got {equation!r}")
    return _call(_EINSUM, "Einsum", *inputs, equation=equation.replace(" ", ""))


def _tensordot(a, b, *, axes):
    return jnp.tensordot(a, b, axes)


_TENSORDOT = prim("Tensordot", _tensordot)


@tf_types("Tensordot")
def tensordot(a, b, axes, name=None):
    """``tf.tensordot``: ``axes`` an int or a pair of axis lists."""
    check_binary(a, b, "Tensordot")
    if isinstance(axes, (int, np.integer)):
        ax = int(axes)
    else:
        ax = tuple(static_axis(x) if not isinstance(x, (int, np.integer)) else (int(x),) for x in axes)
    return _call(_TENSORDOT, "Tensordot", a, b, axes=ax)


@tf_types("Reshape", "BroadcastTo")
def meshgrid(*args, **kwargs):
    """``tf.meshgrid``: ``indexing='xy'`` (default) or ``'ij'``.  Each output is a reshape and a
    broadcast of its own input (as TF composes it), so each output's gradient reaches only that input."""
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"Key word arguments {list(kwargs)} are not supported (only `indexing`, `name`)")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Argument `indexing` parameter must be either 'xy' or 'ij', got '{indexing}'")
    n = len(args)
    sizes = [int(np.prod(_shape(a))) for a in args]
    if indexing == "xy" and n > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    outs = []
    for i, a in enumerate(args):
        shp = [1] * n
        pos = i
        if indexing == "xy" and n > 1 and i < 2:
            pos = 1 - i
        shp[pos] = -1
        outs.append(broadcast_to(reshape(a, shp), sizes))
    return outs


# -- __getitem__ -------------------------------------------------------------
# The index is split into a static spec (part of the cache key) and dynamic
# tensor indices (inputs, so x[i] with a tensor i does not recompile per i).

def _getitem_impl(x, *dyn, spec):
    it = iter(dyn)
    idx = []
    for kind, *a in spec:
        if kind == "i":
            idx.append(a[0])
        elif kind == "s":
            idx.append(_pyslice(*a))
        elif kind == "n":
            idx.append(None)
        elif kind == "e":
            idx.append(Ellipsis)
        else:
            idx.append(next(it))
    return x[tuple(idx)]


_GETITEM = prim("StridedSlice", _getitem_impl)


def _slice_bound(b):
    if b is None or isinstance(b, (int, np.integer)):
        return None if b is None else int(b)
    return int(np.asarray(getattr(b, "_value", b)))


def getitem(x, key) -> Tensor:
    """``tensor[key]``: ints, slices, ``...``, ``None``, scalar integer tensors, and a bool tensor
    (a ``boolean_mask``).  A Python list is a tuple of indices (as TF); an out-of-range int index is
    an InvalidArgumentError; array-valued indices are a TypeError (use ``tf.gather``)."""
    if isinstance(key, list):
        key = tuple(key)
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) == 1 and isinstance(key[0], _TENSORISH) and key[0]._value.dtype.kind == "b":
        out = boolean_mask(x, key[0])
        assert isinstance(out, Tensor)  # (one result)
        return out
    shape = _shape(x)
    spec = []
    dyn = []
    dim = 0            # the input dimension the next index applies to (None after an ellipsis)
    for k in key:
        if k is None:
            spec.append(("n",))
        elif k is Ellipsis:
            spec.append(("e",))
            dim = None
        elif isinstance(k, _pyslice):
            spec.append(("s", _slice_bound(k.start), _slice_bound(k.stop), _slice_bound(k.step)))
            dim = None if dim is None else dim + 1
        elif isinstance(k, (bool, np.bool_)):
            raise TypeError("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and "
                            "scalar tf.int32/tf.int64 tensors are valid indices, got True/False")
        elif isinstance(k, (int, np.integer)):
            k = int(k)
            if dim is not None:
                if dim >= len(shape):
                    raise _bad("StridedSlice", f"Index out of range using input dim {dim}; input has only "
                               f"{len(shape)} dims")
                if not -shape[dim] <= k < shape[dim]:
                    raise _bad("StridedSlice", f"slice index {k} of dimension {dim} out of bounds (size "
                               f"{shape[dim]})")
                dim += 1
            spec.append(("i", k))
        else:
            t = convert_to_tensor(k)
            if t.dtype.is_floating or t.dtype.is_bool or t._value.ndim != 0:
                raise TypeError("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and "
                                f"scalar tf.int32/tf.int64 tensors are valid indices, got {k!r}")
            spec.append(("t",))
            dyn.append(t)
            dim = None if dim is None else dim + 1
    out = _call(_GETITEM, "StridedSlice", x, *dyn, spec=tuple(spec))
    assert isinstance(out, Tensor)  # (one result)
    return out


class VariableSlice(Tensor):
    """``variable[key]``: the slice, read as a Tensor, that can also be assigned (TF's sliced assign).

    It is the recorded read's Tensor (same value, same id: tapes see the read),
    plus ``assign`` / ``assign_add`` / ``assign_sub``, which update that part of
    the Variable and return the Variable.
    """

    __slots__ = ("_var", "_key")

    def _update(self, value, how):
        var = self._var
        want = np.dtype(var._value.dtype)
        if isinstance(value, _TENSORISH):
            new = convert_to_tensor(value)._value
            if np.dtype(new.dtype) != want:
                raise ValueError(f"Tensor conversion requested dtype {want.name} for Tensor with dtype "
                                 f"{np.dtype(new.dtype).name}: {value!r}")
        else:
            new = convert_to_tensor(value, dtype=want)._value
        target = tuple(self._value.shape)
        try:
            joint = np.broadcast_shapes(tuple(new.shape), target)
        except ValueError:
            joint = None
        if joint != target:
            raise _bad("StridedSliceAssign", f"sliced l-value shape {list(target)} does not match "
                       f"r-value shape {list(new.shape)}")
        collector = _state._local.collector
        if collector is not None:  # a tapejax.function is tracing: the Variable is state
            collector.touch(var, True)
        var._value = getattr(var._value.at[self._key], how)(new)
        return var

    def assign(self, value, use_locking=None, name=None, read_value=True):
        var = self._update(value, "set")
        return var if read_value else None

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        var = self._update(delta, "add")
        return var if read_value else None

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        var = self._update(-convert_to_tensor(delta, dtype_hint=self._var.dtype)._value, "add")
        return var if read_value else None


# a pytree as a Tensor is (unflattened, a slice is a plain Tensor: it is no longer tied to its Variable)
jax.tree_util.register_pytree_node(VariableSlice, _tensor._flatten, _tensor._unflatten)


def _variable_getitem(var, key) -> VariableSlice:
    t = getitem(var, key)
    view = VariableSlice.__new__(VariableSlice)
    view._value, view._id = t._value, t._id
    view._var = var
    raw = tuple(key) if isinstance(key, (list, tuple)) else (key,)
    view._key = tuple(k._value if isinstance(k, _TENSORISH) else k for k in raw)
    return view


Tensor.__getitem__ = getitem
Variable.__getitem__ = _variable_getitem


# -- constructors (constants: never recorded) ---------------------------------

def _const_dtype(dtype):
    return _dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype")


def _const_shape(shape, op_type):
    shape = static_shape(shape)
    for d in shape:
        if d < 0:
            raise _bad(op_type, f"Dimension {d} must be >= 0 (argument `shape` {list(shape)})")
    return shape


def zeros(shape, dtype=_dtypes.float32, name=None, layout=None):
    """``tf.zeros``."""
    return Tensor(jnp.zeros(_const_shape(shape, "Fill"), _const_dtype(dtype)))


def ones(shape, dtype=_dtypes.float32, name=None, layout=None):
    """``tf.ones``."""
    return Tensor(jnp.ones(_const_shape(shape, "Fill"), _const_dtype(dtype)))


def zeros_like(input, dtype=None, name=None, layout=None):
    """``tf.zeros_like`` (a constant: TF gives its input no gradient)."""
    v = convert_to_tensor(input)._value
    return Tensor(jnp.zeros(v.shape, v.dtype if dtype is None else _const_dtype(dtype)))


def ones_like(input, dtype=None, name=None, layout=None):
    """``tf.ones_like`` (a constant: TF gives its input no gradient)."""
    v = convert_to_tensor(input)._value
    return Tensor(jnp.ones(v.shape, v.dtype if dtype is None else _const_dtype(dtype)))


def shape(input, out_type=None, name=None):
    """``tf.shape``: the shape as an int32 tensor (a constant to tapes).  A symbolic dimension
    (``jax.export`` of a signature with ``None``: ``tapejax.saved_model``) is computed by the program."""
    dt = np.int32 if out_type is None else _const_dtype(out_type)
    dims = _shape(input)
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return Tensor(jnp.asarray(np.asarray(dims, dtype=dt)))
    return Tensor(jnp.array(list(dims), dtype=dt))


def rank(input, name=None):
    """``tf.rank``: int32 scalar (a constant)."""
    return Tensor(jnp.asarray(np.int32(len(_shape(input)))))


def size(input, out_type=None, name=None):
    """``tf.size``: number of elements, int32 (a constant)."""
    dt = np.int32 if out_type is None else _const_dtype(out_type)
    return Tensor(jnp.asarray(np.asarray(int(np.prod(_shape(input))), dtype=dt)))


def fill(dims, value, name=None, layout=None):
    """``tf.fill``: ``value``'s dtype (Python float -> float32, int -> int32).  TF gives ``value``
    the sum of the output gradient; here too (it is a recorded BroadcastTo)."""
    v = convert_to_tensor(value)
    if v.ndim:
        raise _bad("Fill", f"value must be a scalar, got shape {list(v.shape)} (argument `value`)")
    return bind(_BROADCAST_TO, v, shape=static_shape(dims))


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001  (TF's name)
    """``tf.range``: int32 for ints, float32 when any bound is a float (or ``dtype``)."""
    if limit is None:
        start, limit = 0, start
    vals = [np.asarray(getattr(v, "_value", v)) for v in (start, limit, delta)]
    if dtype is None:
        kinds = [v.dtype.kind for v in vals]
        dt = np.float32 if "f" in kinds else np.int32
        for v in (start, limit, delta):
            if isinstance(v, _TENSORISH):
                dt = np.result_type(dt, v._value.dtype) if "f" in kinds else v._value.dtype
    else:
        dt = _const_dtype(dtype)
    if float(vals[2]) == 0:
        raise _bad("Range", "Requires delta != 0 (argument `delta`)")
    for arg, v in zip(("start", "limit", "delta"), vals):
        if not np.all(np.isfinite(v)):
            raise _bad("Range", f"Requires finite bounds: argument `{arg}` is {v.item()!r}")
    return Tensor(jnp.arange(vals[0].item(), vals[1].item(), vals[2].item(), dtype=dt))


def linspace(start, stop, num, name=None, axis=0):
    """``tf.linspace``: ``num`` evenly spaced values, float32 for Python floats."""
    s = convert_to_tensor(start)
    e = convert_to_tensor(stop, dtype_hint=s.dtype)
    return Tensor(jnp.linspace(s._value, e._value, int(num), axis=int(axis)))


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dtypes.float32, name=None):
    """``tf.eye`` (float32 by default)."""
    m = jnp.eye(int(num_rows), None if num_columns is None else int(num_columns), dtype=_const_dtype(dtype))
    if batch_shape is not None:
        m = jnp.broadcast_to(m, static_shape(batch_shape) + m.shape)
    return Tensor(m)


def _one_hot(indices, on, off, *, depth, axis, dtype):
    oh = jax.nn.one_hot(indices, depth, axis=axis, dtype=jnp.bool_)
    return jnp.where(oh, on, off).astype(dtype)


_ONE_HOT = prim("OneHot", _one_hot, differentiable=False)


@tf_types("OneHot")
def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """``tf.one_hot``: float32 by default (or the dtype of ``on_value``/``off_value``).  TF gives it
    no gradient (not even to ``on_value``/``off_value``): the tape gives None."""
    idx = convert_to_tensor(indices)
    if idx._value.dtype.kind not in "iu":
        raise _bad("OneHot", f"Value for attr 'TI' of {idx.dtype.name} is not in the list of allowed "
                   f"values: uint8, int8, int32, int64 (argument `indices`)")
    given = on_value if on_value is not None else off_value
    if dtype is None:
        dt = np.dtype(getattr(convert_to_tensor(given), "_value").dtype) if given is not None else np.float32
    else:
        dt = _const_dtype(dtype)
    on = convert_to_tensor(1 if on_value is None else on_value, dtype_hint=dt)
    off = convert_to_tensor(0 if off_value is None else off_value, dtype_hint=dt)
    return bind(_ONE_HOT, idx, on, off, depth=int(depth), axis=-1 if axis is None else int(axis),
                dtype=np.dtype(dt).name)


__all__ = ["reshape", "stack", "unstack", "split", "transpose", "concat", "squeeze", "expand_dims",
           "tile", "pad", "broadcast_to", "reverse", "roll", "repeat", "sort", "argsort", "unique",
           "gather", "gather_nd", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add",
           "slice", "boolean_mask", "einsum", "tensordot", "meshgrid", "getitem", "zeros", "ones",
           "zeros_like", "ones_like", "shape", "rank", "size", "fill", "range", "linspace", "eye",
           "one_hot"]
