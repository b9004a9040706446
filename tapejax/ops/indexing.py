"""Indexing ops: gathers and scatters, slices and masks, ``tensor[key]`` (``StridedSlice``) and the
sliced read of a Variable that can be assigned (``VariableSlice``, TF's sliced assign).

Gathers: the tape's gradient of a gather on axis 0 with respect to its params is
``tf.IndexedSlices``, as TF's (``autodiff.sparse`` decides it, the compiled gradient produces
the rows without making the dense gradient).  ``tf.gather`` / ``embedding_lookup`` on a
Variable, eagerly, is TF's ``ResourceGather`` (``Variable.sparse_read``): it reads only the
gathered rows, so the Variable keeps its buffer for an optimizer's in-place (donated) sparse
update; the tapes record the rows and the indices (``GradientTape._record_sparse_read``).
Inside ``tapejax.function``, under a gradient override or another kind of recorder, it is the
plain gather of a Variable read (the same values and gradients).  Out-of-range indices are not
checked by default (TF's CPU kernel raises, TF's GPU kernel gives zeros; JAX wraps a negative
index and fills a row past the end, NaN for floats) unless the value-check mode is on
(``ops.checks``): ``gather`` then raises TF's InvalidArgumentError.

Slices whose start is known only when a compiled step runs (``x[i * 3:(i + 1) * 3]``,
``tf.slice(x, [i, 0], [3, -1])``, ``v[i:i + 2].assign(...)``) are ``dynamic_slice`` of a static
size: ``indexing_traced`` (with ``affine``, the loop index's linear form).
"""
import builtins
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import state as _state
from ..core.bind import bind, bind2
from ..core.convert import convert_to_tensor
from ..core.tensor import Pending, Tensor, _flatten, _unflatten, register_operators
from ..core.variable import Variable
from . import _grads as G
from ._registry import (
    _TENSORISH,
    OP_DISPATCH,
    _Array,
    _bad,
    _call,
    _shape,
    check_binary,
    plain_jit,
    prim,
    static_shape,
    tf_types,
)
from .affine import form_of
from .checks import VALUE_CHECKS, require_in_range
from .indexing_traced import (
    TracedSizeError,
    check_slice_begin,
    dynamic_starts,
    dynamic_update_starts,
    is_traced,
    pad_empty_axes,
    traced_slice,
)

_pyrange = builtins.range
_pyslice = builtins.slice

# -- gathers and scatters ------------------------------------------------------------

def _gather(params, indices, *, axis=0, batch_dims=0):
    if batch_dims == 0:
        return jnp.take(params, indices, axis=axis)
    f = lambda p, i: _gather(p, i, axis=axis - 1, batch_dims=batch_dims - 1)  # noqa: E731
    return jax.vmap(f)(params, indices)


_GATHER = prim("GatherV2", _gather)
_GATHER_PLAIN = plain_jit(_GATHER, lambda p, i: p.ndim >= 1 and i.dtype.kind in "iu")
#: The gather op (``autodiff.sparse`` gives its params an ``IndexedSlices`` gradient).
GATHER = _GATHER
#: A gather on a Variable that read only the rows (``sparse_read``).  Its recorded node holds the
#: rows it read and the indices; the replay adds the Variable's perturbation gathered at the
#: indices (``autodiff.program``), so its function here is the rows themselves.
RESOURCE_GATHER = prim("ResourceGather", lambda rows, indices: rows)


def _int_indices(indices, op_type, arg="indices"):
    t = convert_to_tensor(indices)
    if t._meta.dtype.kind not in "iu":
        raise _bad(op_type, f"Value for attr 'Tindices' of {t.dtype.name} is not in the list of "
                   f"allowed values: int16, int32, int64 (argument `{arg}`)")
    return t


def sparse_read(var, indices, name=None):
    """``Variable.sparse_read``: the rows ``var[indices]`` (TF's ``ResourceGather``), read without
    handing out the Variable's buffer (see the module docstring).  None where that path does not
    apply (a function traces, a gradient override is active, a recorder other than a plain tape
    records, the Variable holds a traced value): the caller gathers from a read instead."""
    loc = _state._local
    if loc.collector is not None or loc.overrides or type(var) is not Variable:
        return None
    tapes = loc.tapes
    for t in tapes:
        if not t._defers or not hasattr(t, "_record_sparse_read"):
            return None
    value = var._value   # (a pending update is computed now)
    if type(value) is not _Array or value.ndim < 1:
        return None
    idx = indices if type(indices) is Tensor else _int_indices(indices, "ResourceGather")
    iv = idx._value
    if iv.dtype.kind not in "iu":
        raise _bad("ResourceGather", f"Value for attr 'Tindices' of {np.dtype(iv.dtype).name} is not in the list "
                   "of allowed values: int32, int64 (argument `indices`)")
    rows = Tensor(_GATHER_PLAIN(value, iv))
    for t in tapes:
        getattr(t, "_record_sparse_read")(var, idx, rows)   # (a GradientTape's: checked above)
    return rows


@tf_types("GatherV2", "ResourceGather")
def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """``tf.gather`` along ``axis`` (default ``batch_dims``).  Its gradient with respect to
    ``params`` is ``IndexedSlices`` on axis 0; on a Variable it is ``sparse_read`` (see the module
    docstring)."""
    if type(params) is not Tensor or type(indices) is not Tensor:
        dispatch = OP_DISPATCH.get(("GatherV2", type(params))) or OP_DISPATCH.get(("GatherV2", type(indices)))
        if dispatch is not None:
            return dispatch(params, indices, axis, batch_dims)
    if (type(params) is Variable and (axis is None or axis == 0) and batch_dims == 0
            and not VALUE_CHECKS[0]):
        out = sparse_read(params, indices)
        if out is not None:
            return out
    if (type(params) is Tensor and type(indices) is Tensor and axis is None and batch_dims == 0
            and not VALUE_CHECKS[0]):
        try:  # the fast path: index dtype and params rank are checked when JAX traces
            return bind2(_GATHER, _GATHER_PLAIN, params, indices)
        except Exception:  # noqa: BLE001 - the checked path below raises TF's error for it
            pass
    idx = _int_indices(indices, "GatherV2")
    nd = len(_shape(params))
    bd = int(batch_dims) % (idx.ndim + 1) if batch_dims < 0 else int(batch_dims)
    ax = bd if axis is None else int(axis)
    if not -nd <= ax < nd:
        raise _bad("GatherV2", f"Shape must be at least rank {ax + 1} but is rank {nd} (argument `axis`)")
    ax %= nd
    if VALUE_CHECKS[0]:   # opt-in: TF's CPU kernel rejects an index out of range (JAX clamps)
        n = _shape(params)[ax]
        require_in_range(idx._value, n, "indices", f"is not in [0, {n})",
                         "ResourceGather" if isinstance(params, Variable) else "GatherV2")
    if ax == 0 and bd == 0:
        return bind(_GATHER, params, idx)  # the common case: no static parameters
    return bind(_GATHER, params, idx, axis=ax, batch_dims=bd)


def _gather_nd(params, indices, *, batch_dims):
    if batch_dims:
        f = lambda p, i: _gather_nd(p, i, batch_dims=batch_dims - 1)  # noqa: E731
        return jax.vmap(f)(params, indices)
    k = indices.shape[-1]
    # an index out of range gives JAX's fill (NaN), as gather's: plain indexing clamps it to the
    # last row, a silently wrong value (TF's CPU kernel raises; tapejax.debugging value checks)
    return params.at[tuple(jnp.moveaxis(indices, -1, 0)[j] for j in _pyrange(k))].get(mode="fill")


_GATHER_ND = prim("GatherNd", _gather_nd)


@tf_types("GatherNd")
def gather_nd(params, indices, batch_dims=0, name=None, bad_indices_policy=""):
    """``tf.gather_nd``: ``indices[..., k]`` index the first ``k`` dimensions of ``params``."""
    idx = _int_indices(indices, "GatherNd")
    if idx._meta.shape[-1] > len(_shape(params)) - int(batch_dims):
        raise _bad("GatherNd", f"index innermost dimension length must be <= params rank; saw: "
                   f"{idx._meta.shape[-1]} vs. {len(_shape(params))} (argument `indices`)")
    if int(batch_dims) == 0 and idx.ndim == 2 and idx._meta.shape[-1] == 1:
        return gather(params, idx[:, 0])   # rows: TF's gradient is then IndexedSlices too (_GatherNdGrad)
    return bind(_GATHER_ND, params, idx, batch_dims=int(batch_dims))


def _scatter_idx(indices):
    k = indices.shape[-1]
    return tuple(jnp.moveaxis(indices, -1, 0)[j] for j in _pyrange(k))


_SCATTER_ND = prim("ScatterNd", lambda idx, upd, *, shape: jnp.zeros(shape, upd.dtype)
                   .at[_scatter_idx(idx)].add(upd, mode="drop"))
_TS_UPDATE = prim("TensorScatterUpdate", lambda t, idx, upd: (G.scatter_set(t, idx, upd) if jnp.issubdtype(
    t.dtype, jnp.inexact) else t.at[_scatter_idx(idx)].set(upd, mode="drop")))   # (TF's gradient, duplicates)
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


def _slice_impl(x, *dyn_begin, begin, size):
    if dyn_begin:   # a begin known only when the step runs (a loop index): XLA's dynamic_slice
        b = dyn_begin[0]
        return jax.lax.dynamic_slice(x, tuple(b[i] for i in _pyrange(x.ndim)), size)
    return jax.lax.slice(x, begin, tuple(b + s for b, s in zip(begin, size)))


_SLICE = prim("Slice", _slice_impl)


@tf_types("Slice")
def slice(input_, begin, size, name=None):  # noqa: A001  (TF's name)
    """``tf.slice``: ``size[i] == -1`` takes everything from ``begin[i]``.  A ``begin`` known only
    when a compiled step runs is ``dynamic_slice`` (``ops.indexing_traced``)."""
    shape = _shape(input_)
    if _traced_begin(begin):
        return _slice_at_traced_begin(input_, begin, static_shape(size), shape)
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


def _traced_begin(begin):
    """Whether ``begin`` holds a value known only when the step runs (a loop index inside
    ``tapejax.function``: ``tf.slice(x, [i * bs, 0], [bs, -1])``)."""
    if isinstance(begin, (list, tuple)):
        return builtins.any(is_traced(b) for b in begin)
    return is_traced(begin)


def _slice_at_traced_begin(input_, begin, size, shape):
    """``tf.slice`` whose ``begin`` is traced: XLA needs a static ``size`` (-1 only on an axis whose
    ``begin`` is a Python int; TF's graph also allows a size known at run time); it is
    ``dynamic_slice``, whose gradient is TF's (the cotangent padded back, dense).  TF's check of
    ``begin`` is made in the value-check mode (``ops.indexing_traced``)."""
    if len(size) != len(shape):
        raise _bad("Slice", f"Expected `begin` and `size` arguments to be 1-D tensors of size "
                   f"{len(shape)}, but got `size` of shape [{len(size)}] instead.")
    listed = isinstance(begin, (list, tuple))
    for axis, (s, d) in enumerate(zip(size, shape)):
        if s < 0 and s != -1 or s > d:
            raise _bad("Slice", f"Expected 0 <= size[i] <= dim, got size {list(size)} for shape {list(shape)}")
        fixed = begin[axis] if listed and axis < len(begin) and not is_traced(begin[axis]) else None
        if s == -1 and fixed is not None:   # a static begin on this axis: the rest of it
            size = size[:axis] + (d - int(getattr(fixed, "_value", fixed)),) + size[axis + 1:]
        elif s == -1:
            raise TracedSizeError(f"`size`[{axis}] = -1 with a `begin` known only at run time gives a slice "
                             f"whose shape XLA cannot compile inside tapejax.function: give the size "
                             f"(got size={list(size)})")
    b = convert_to_tensor(begin, dtype_hint="int32")
    if b.shape.rank != 1 or b.shape[0] != len(shape):
        raise _bad("Slice", f"Expected `begin` and `size` arguments to be 1-D tensors of size "
                   f"{len(shape)}, but got `begin` of shape {b.shape.as_list()} instead.")
    forms = [form_of(e) for e in begin] if listed else []
    check_slice_begin(b._value, size, shape, forms)
    return bind(_SLICE, input_, b, begin=None, size=tuple(size))


def _boolean_mask(x, *, mask, mask_shape, axis):
    keep = np.nonzero(np.asarray(mask, bool))[0]
    xs = x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + len(mask_shape):])
    return jnp.take(xs, jnp.asarray(keep, jnp.int32), axis=axis)


_BOOLEAN_MASK = prim("BooleanMask", _boolean_mask)


@tf_types("BooleanMask")
def boolean_mask(tensor, mask, axis=None, name="boolean_mask"):
    """``tf.boolean_mask``: the entries where ``mask`` is true.  The output size depends on the
    mask's values, which are read on the host (eager only) and become a static parameter; the
    gradient scatters back, as TF's.  A numeric mask keeps its nonzero entries (TF's
    ``where(mask)``)."""
    m = convert_to_tensor(mask)
    if m.ndim == 0:
        raise ValueError("mask cannot be scalar.")   # TF's check (it gave a [1, ...] expansion)
    shape = _shape(tensor)
    ax = 0 if axis is None else int(axis) % len(shape)
    if tuple(shape[ax:ax + m.ndim]) != tuple(m.shape):
        raise ValueError(f"Shapes {list(shape)} and {list(m.shape)} are incompatible: `mask` must match "
                         f"the dimensions of `tensor` from `axis` {ax}")
    flat = tuple(bool(b) for b in np.asarray(m._value).reshape(-1))
    return bind(_BOOLEAN_MASK, tensor, mask=flat, mask_shape=tuple(m.shape), axis=ax)


# -- __getitem__ -------------------------------------------------------------
# The index is split into a static spec (part of the cache key) and dynamic
# tensor indices (inputs, so x[i] with a tensor i does not recompile per i).

def _split_dyn(spec, dyn):
    """The dynamic operands of a ``tensor[key]`` spec: (traced slice starts, tensor indices)."""
    kinds = [e[0] for e in spec if e[0] in "td"]
    return ([v for k, v in zip(kinds, dyn) if k == "d"], [v for k, v in zip(kinds, dyn) if k == "t"])


def _index_tuple(spec, tensor_indices):
    """The NumPy-style index of a spec (a traced slice is ``::step`` of its dynamic window)."""
    it = iter(tensor_indices)
    idx = []
    for kind, *a in spec:
        if kind == "i":
            idx.append(a[0])
        elif kind == "s":
            idx.append(_pyslice(*a))
        elif kind == "d":
            idx.append(_pyslice(None, None, a[1]))
        elif kind == "n":
            idx.append(None)
        elif kind == "e":
            idx.append(Ellipsis)
        else:
            idx.append(next(it))
    return tuple(idx)


def _getitem_impl(x, *dyn, spec):
    starts, tensor_indices = _split_dyn(spec, dyn)
    if starts:   # traced slice starts first: each a dynamic_slice of its static span
        x = dynamic_starts(x, spec, starts)
    x = pad_empty_axes(x, spec)
    return x[_index_tuple(spec, tensor_indices)]


_GETITEM = prim("StridedSlice", _getitem_impl)


def _slice_bound(b):
    if b is None or isinstance(b, (int, np.integer)):
        return None if b is None else int(b)
    return int(np.asarray(getattr(b, "_value", b)))


def _traced_slice(k: _pyslice) -> bool:
    """Whether a bound of slice ``k`` is known only when a compiled step runs (Python ints and None,
    the common case, answered first)."""
    a, b, c = k.start, k.stop, k.step
    if (a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int):
        return False
    return is_traced(a) or is_traced(b) or is_traced(c)


def _consumes(k) -> bool:
    """Whether index ``k`` applies to an input dimension (not ``None`` or ``...``)."""
    return k is not None and k is not Ellipsis


def _input_axis(key: tuple, pos: int, ndim: int):
    """The input dimension ``key[pos]`` applies to (counted from the end after an ellipsis)."""
    ell = next((j for j, k in enumerate(key) if k is Ellipsis), None)
    if ell is None or pos < ell:
        return builtins.sum(1 for k in key[:pos] if _consumes(k))
    return ndim - builtins.sum(1 for k in key[pos:] if _consumes(k))


def getitem(x, key) -> Tensor:
    """``tensor[key]``: ints, slices (whose bounds may be a loop index inside a compiled step, when
    the size is static: ``indexing_traced``), ``...``, ``None``, scalar integer tensors, and a bool
    tensor (a ``boolean_mask``).  A Python list is a tuple of indices (as TF); an out-of-range int index is
    an InvalidArgumentError; array-valued indices are a TypeError (use ``tf.gather``)."""
    if isinstance(key, bool) or (isinstance(key, np.ndarray) and key.dtype == np.bool_):
        # TF's ``__getitem__`` masks by a Python bool or a NumPy bool array as by a bool tensor
        # (``errs[np.isfinite(x).all(1)]``; a scalar mask is boolean_mask's ValueError)
        out = boolean_mask(x, key)
        assert isinstance(out, Tensor)  # (one result)
        return out
    if isinstance(key, list):
        key = tuple(key)
    if not isinstance(key, tuple):
        key = (key,)
    elif bool in map(type, key):   # (Python bools: TF's rule)
        key = _bool_indices(key)
    if len(key) == 1 and isinstance(key[0], _TENSORISH) and key[0]._meta.dtype.kind == "b":
        out = boolean_mask(x, key[0])
        assert isinstance(out, Tensor)  # (one result)
        return out
    spec, dyn = _parse_key(x, key)
    out = _call(_GETITEM, "StridedSlice", x, *dyn, spec=spec)
    assert isinstance(out, Tensor)  # (one result)
    return out


def _bool_indices(key: tuple) -> tuple:
    """``key`` with its Python bools as the ints 0 / 1, or TF's error for them.

    A Python bool passes TF's index check (it is an ``Integral``), and TF stacks the slice's begin
    vector (each index, a slice's start, 0 for ``:``, ``...`` and ``None``) into one tensor whose
    dtype its first entry decides: when it is a bool and all are (``t[[True, False, True]]``, which
    is no mask: use ``tf.boolean_mask``), StridedSlice refuses a bool index (eagerly
    InvalidArgumentError, traced TypeError); a bool followed by an int cannot be converted eagerly
    (TypeError) and traced is an int; an int first makes every bool an int (``t[0, True]``)."""
    begins = [(0 if k.start is None else k.start) if isinstance(k, _pyslice) else
              0 if k is None or k is Ellipsis else k for k in key]
    if type(begins[0]) is bool:
        eager = _state._local.collector is None
        if all(type(b) is bool for b in begins):
            if eager:
                raise _bad("StridedSlice", "Value for attr 'Index' of bool is not in the list of allowed values: "
                           "int16, int32, int64 (a Python list of bools is a tuple of indices, not a mask: "
                           "use tf.boolean_mask)")
            raise TypeError("Value passed to parameter 'begin' has DataType bool not in list of allowed values: "
                            "int32, int64 (a Python list of bools is a tuple of indices, not a mask: use "
                            "tf.boolean_mask)")
        if eager:
            other = next(b for b in begins if type(b) is not bool)
            raise TypeError(f"Cannot convert {other!r} to EagerTensor of dtype bool")
    return tuple(int(k) if type(k) is bool else k for k in key)


def _parse_key(x, key: tuple):
    """``tensor[key]``'s static spec (one entry per index) and its dynamic operands."""
    shape = _shape(x)
    spec = []
    dyn = []
    dim = 0            # the input dimension the next index applies to (None after an ellipsis)
    for pos, k in enumerate(key):
        if k is None:
            spec.append(("n",))
        elif k is Ellipsis:
            spec.append(("e",))
            dim = None
        elif isinstance(k, _pyslice):
            if _traced_slice(k):   # a loop index's slice
                ds = traced_slice(k, _input_axis(key, pos, len(shape)), shape)
                spec.append(ds.spec)
                if ds.start is not None:
                    dyn.append(ds.start)
            else:
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
            if t.dtype.is_floating or t.dtype.is_bool or t._meta.ndim != 0:
                raise TypeError("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and "
                                f"scalar tf.int32/tf.int64 tensors are valid indices, got {k!r}")
            if dim is not None and dim < len(shape) and shape[dim] == 0 and _state._local.collector is None:
                raise _bad("StridedSlice", f"slice index {t.numpy()} of dimension {dim} out of bounds.")
            spec.append(("t",))
            dyn.append(t)
            dim = None if dim is None else dim + 1
    return tuple(spec), dyn


@tf_types("StridedSlice")
def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                  shrink_axis_mask=0, var=None, name=None):
    """``tf.strided_slice``: ``input_[begin:end:strides]`` per dimension, with TF's masks (bit ``i``:
    ``begin_mask`` / ``end_mask`` ignore ``begin[i]`` / ``end[i]``, ``ellipsis_mask`` an ellipsis,
    ``new_axis_mask`` a new axis, ``shrink_axis_mask`` takes index ``begin[i]``); the same op as
    ``tensor[key]``.  ``begin``, ``end`` and ``strides`` are read on the host (static)."""
    b, e = static_shape(begin), static_shape(end)
    s = static_shape(strides) if strides is not None else (1,) * len(b)
    if not len(b) == len(e) == len(s):
        raise _bad("StridedSlice", f"Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
                   f"[{len(b)}], [{len(e)}], and [{len(s)}] instead.")
    if bin(int(ellipsis_mask)).count("1") > 1:
        raise _bad("StridedSlice", "Multiple ellipses in slice spec not allowed")
    key = []
    for i in _pyrange(len(b)):
        bit = 1 << i
        if ellipsis_mask & bit:
            key.append(Ellipsis)
        elif new_axis_mask & bit:
            key.append(None)
        elif shrink_axis_mask & bit:
            key.append(b[i])
        else:
            if s[i] == 0:
                raise _bad("StridedSlice", f"strides[{i}] must be non-zero")
            key.append(_pyslice(None if begin_mask & bit else b[i], None if end_mask & bit else e[i], s[i]))
    return getitem(input_, tuple(key))


class _SliceAssign:
    """The sliced assign of ``variable[key]`` (TF's): ``assign`` / ``assign_add`` / ``assign_sub``
    update that part of the Variable and return the Variable."""

    __slots__ = ()
    _var: Variable
    _key: Any
    _spec: Any
    _dyn: tuple
    _meta: Any

    def _update(self, value, how):
        var = self._var
        want = np.dtype(var._meta.dtype)
        if isinstance(value, _TENSORISH):
            new = convert_to_tensor(value)._value
            if np.dtype(new.dtype) != want:
                raise ValueError(f"Tensor conversion requested dtype {want.name} for Tensor with dtype "
                                 f"{np.dtype(new.dtype).name}: {value!r}")
        else:
            new = convert_to_tensor(value, dtype=want)._value
        target = tuple(self._meta.shape)
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
        if self._key is not None:
            var._value = getattr(var._value.at[self._key], how)(new)
            return var
        # a slice with a traced start: its dynamic window is updated and written back
        starts, tensor_indices = _split_dyn(self._spec, self._dyn)
        full = var._value
        window = dynamic_starts(full, self._spec, starts)
        window = getattr(window.at[_index_tuple(self._spec, tensor_indices)], how)(new)
        var._value = dynamic_update_starts(full, window, self._spec, starts)
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


class VariableSlice(_SliceAssign, Tensor):
    """``variable[key]``: the slice, read as a Tensor, that can also be assigned (TF's sliced assign).

    It is the recorded read's Tensor (same value, same id: tapes see the read),
    plus ``assign`` / ``assign_add`` / ``assign_sub``, which update that part of
    the Variable and return the Variable.
    """

    __slots__ = ("_var", "_key", "_spec", "_dyn")


class PendingSlice(_SliceAssign, Pending):
    """``variable[key]`` under deferred execution: ``VariableSlice`` on a pending value (the
    slice of a Variable read by a recording tape, or of a pending update), so that the slice stays
    in the step's program instead of being computed, with what it reads, on its own.  It holds
    the executor's own ``Pending`` (``_pending``), which the runtime tracks by weak reference
    (whether the user may still read the value): alive exactly as long as this view is."""

    __slots__ = ("_var", "_key", "_spec", "_dyn", "_pending")


# a pytree as a Tensor is (unflattened, a slice is a plain Tensor: it is no longer tied to its Variable)
jax.tree_util.register_pytree_node(VariableSlice, _flatten, _unflatten)
jax.tree_util.register_pytree_node(PendingSlice, _flatten, _unflatten)


def _variable_getitem(var, key) -> "VariableSlice | PendingSlice":
    raw = tuple(key) if isinstance(key, (list, tuple)) else (key,)
    if bool in map(type, raw):
        raw = key = _bool_indices(raw)
    traced = False
    for k in raw:
        if type(k) is _pyslice and _traced_slice(k):
            traced = True
    if not traced:
        t = getitem(var, key)
        spec, dyn = None, ()
    else:   # (a loop index's slice: assigned through its dynamic window)
        spec, dyn = _parse_key(var, raw)
        t = _call(_GETITEM, "StridedSlice", var, *dyn, spec=spec)
        assert isinstance(t, Tensor)  # (one result)
    view: "VariableSlice | PendingSlice"
    if type(t) is Pending:   # (deferred: the view takes the pending value, not computing it)
        view = PendingSlice.__new__(PendingSlice)
        view._thunk, view._id, view._pending = t._thunk, t._id, t
    else:
        view = VariableSlice.__new__(VariableSlice)
        view._value, view._id = t._value, t._id
    view._var = var
    view._key = None if traced else tuple(k._value if isinstance(k, _TENSORISH) else k for k in raw)
    view._spec, view._dyn = spec, tuple(convert_to_tensor(d)._value for d in dyn)
    return view


register_operators(Tensor, {"__getitem__": getitem})
register_operators(Variable, {"__getitem__": _variable_getitem})


__all__ = ["GATHER", "RESOURCE_GATHER", "sparse_read", "strided_slice", "gather", "gather_nd", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add", "slice",
           "boolean_mask", "getitem", "VariableSlice", "PendingSlice"]
