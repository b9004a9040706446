"""Scatters: TF's Variable scatter methods (``v.scatter_add(IndexedSlices)``, ``v.scatter_nd_update``
...) and ``sparse_read``, and the ``tensor_scatter_nd_*`` ops the indexing module lacks.

A Variable scatter is an update, not a differentiable op (as TF's): the new value is computed by
one jitted function that donates the Variable's buffer where the Variable owns it
(``core.ownership.commit``), so XLA writes the rows in place; inside ``tapejax.function`` the
Variable is threaded state and the function donates it.  An index outside the Variable is
dropped (TF's GPU kernels; its CPU kernels raise) unless the value-check mode is on
(``ops.checks``), which raises TF's InvalidArgumentError first, before anything changes.  The
methods return the Variable (TF returns a handle on its updated value).
"""
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import state as _state
from ..core.convert import convert_to_tensor
from ..core.errors import OutOfRangeError
from ..core.indexed_slices import IndexedSlices
from ..core.ownership import Donating, commit
from ..core.tensor import register_methods
from ..core.variable import Variable
from ._registry import _bad, _call, check_binary, prim
from .checks import VALUE_CHECKS, require_in_range
from .indexing import _int_indices, _scatter_idx, gather, gather_nd, sparse_read

# -- tensor_scatter_nd_{sub,max,min} ---------------------------------------------------------

_TS_SUB = prim("TensorScatterSub", lambda t, idx, upd: t.at[_scatter_idx(idx)].add(-upd, mode="drop"))
_TS_MAX = prim("TensorScatterMax", lambda t, idx, upd: t.at[_scatter_idx(idx)].max(upd, mode="drop"))
_TS_MIN = prim("TensorScatterMin", lambda t, idx, upd: t.at[_scatter_idx(idx)].min(upd, mode="drop"))


def _tensor_scatter(p, op_type):
    def op(tensor, indices, updates, name=None):
        check_binary(tensor, updates, op_type)
        return _call(p, op_type, tensor, _int_indices(indices, op_type), updates)
    op.__name__ = op.__qualname__ = {"TensorScatterSub": "tensor_scatter_nd_sub", "TensorScatterMax":
                                     "tensor_scatter_nd_max", "TensorScatterMin": "tensor_scatter_nd_min"}[op_type]
    op.__doc__ = f"``tf.{op.__name__}`` (TF op type ``{op_type}``): ``tensor`` with ``updates`` combined in at ``indices``."
    op._tf_types = (op_type,)
    return op


tensor_scatter_nd_sub = _tensor_scatter(_TS_SUB, "TensorScatterSub")
tensor_scatter_nd_max = _tensor_scatter(_TS_MAX, "TensorScatterMax")
tensor_scatter_nd_min = _tensor_scatter(_TS_MIN, "TensorScatterMin")


# -- Variable updates -----------------------------------------------------------------------

def _rows(how):
    """``f(vals, indices, updates) -> [new value]`` for a scatter along the first dimension."""
    def f(vals, ind, upd):
        v = vals[0]
        upd = jnp.broadcast_to(upd.astype(v.dtype), tuple(ind.shape) + tuple(v.shape[1:]))
        at = v.at[ind]
        kw = dict(mode="drop", wrap_negative_indices=False)
        if how == "sub":
            return [at.add(-upd, **kw)]
        if how == "mul":
            return [at.multiply(upd, **kw)]
        if how == "div":
            return [at.divide(upd, **kw)]
        return [getattr(at, "set" if how == "update" else str(how))(upd, **kw)]
    return f


def _nd(how):
    def f(vals, ind, upd):
        v = vals[0]
        k = ind.shape[-1]
        upd = jnp.broadcast_to(upd.astype(v.dtype), tuple(ind.shape[:-1]) + tuple(v.shape[k:]))
        at = v.at[_scatter_idx(ind)]
        kw = dict(mode="drop", wrap_negative_indices=False)
        if how == "sub":
            return [at.add(-upd, **kw)]
        return [getattr(at, "set" if how == "update" else str(how))(upd, **kw)]
    return f


def _batch(vals, ind, upd):
    """``batch_scatter_update``: ``v[b..., ind[b..., j]] = upd[b..., j]``."""
    v = vals[0]
    nb = ind.ndim - 1
    grids = jnp.meshgrid(*[jnp.arange(d) for d in ind.shape], indexing="ij")
    coords = tuple(grids[:nb]) + (ind,)
    upd = jnp.broadcast_to(upd.astype(v.dtype), tuple(ind.shape) + tuple(v.shape[nb + 1:]))
    return [v.at[coords].set(upd, mode="drop", wrap_negative_indices=False)]


_UPDATES: dict = {}


def _donating(kind, how):
    key = (kind, how)
    fn = _UPDATES.get(key)
    if fn is None:
        f = {"rows": _rows, "nd": _nd}[kind](how) if kind != "batch" else _batch
        fn = _UPDATES.setdefault(key, Donating(f))
    return fn


def _apply(var, kind, how, ind, upd, op_type):
    """Update ``var`` with a scatter (see the module docstring); returns ``var``."""
    if VALUE_CHECKS[0]:
        n = var._meta.shape[0] if kind != "nd" else None
        if n is not None:
            require_in_range(ind, n, "indices", f"is not in [0, {n})", op_type)
    col = _state._local.collector
    if col is not None or isinstance(var._val, jax.core.Tracer):   # a function traces: threaded state
        if col is not None:
            col.touch(var, True)
        f = {"rows": _rows, "nd": _nd}[kind](how) if kind != "batch" else _batch
        var._value = f([var._value], ind, upd)[0]
        return var
    fn = _donating(kind, how)
    commit([var], [], lambda vals, shared: fn(vals, shared, ind, upd))
    return var


def _values_of(var, value, what):
    t = convert_to_tensor(value, dtype_hint=var.dtype)
    if np.dtype(t._meta.dtype) != np.dtype(var._meta.dtype):
        raise _bad(what, f"`updates` has dtype {np.dtype(t._meta.dtype).name}, the Variable {var.name} has "
                   f"{np.dtype(var._meta.dtype).name}")
    return t._value


def _slices_method(how, op_type):
    def method(self, sparse_delta, use_locking=False, name=None):
        if not isinstance(sparse_delta, IndexedSlices):
            raise TypeError(f"Argument `sparse_delta` must be a `tf.IndexedSlices`. Received arg: {sparse_delta!r}")
        ind = _int_indices(sparse_delta.indices, op_type)._value
        upd = _values_of(self, sparse_delta.values, op_type)
        want = tuple(ind.shape) + tuple(self._meta.shape[1:])
        if upd.shape not in (want, ()):
            raise _bad(op_type, f"Must have updates.shape = indices.shape + params.shape[1:] or updates.shape = [], "
                       f"got updates.shape {list(upd.shape)}, indices.shape {list(ind.shape)}, params.shape "
                       f"{list(self._meta.shape)}")
        return _apply(self, "rows", how, ind, upd, op_type)
    method.__name__ = method.__qualname__ = f"scatter_{how}"
    method.__doc__ = (f"``Variable.scatter_{how}(sparse_delta)``: the rows ``sparse_delta.indices`` "
                      f"{'set to' if how == 'update' else how + ' with'} ``sparse_delta.values`` (TF's ``{op_type}``); "
                      "returns the Variable.")
    return method


def _nd_method(how, op_type):
    def method(self, indices, updates, name=None):
        ind = _int_indices(indices, op_type)._value
        upd = _values_of(self, updates, op_type)
        k = ind.shape[-1] if ind.ndim else 0
        shape = tuple(self._meta.shape)
        want = tuple(ind.shape[:-1]) + shape[k:]
        if ind.ndim == 0 or k > len(shape) or upd.shape not in (want, ()):
            raise _bad(op_type, f"updates.shape {list(upd.shape)} and indices.shape {list(ind.shape)} do not fit the "
                       f"Variable's shape {list(shape)}: expected updates of shape {list(want)}")
        if VALUE_CHECKS[0]:
            for j in range(k):
                require_in_range(ind[..., j], shape[j], "indices", f"does not index into shape {list(shape)}",
                                 op_type)
        return _apply(self, "nd", how, ind, upd, op_type)
    method.__name__ = method.__qualname__ = f"scatter_nd_{how}"
    method.__doc__ = (f"``Variable.scatter_nd_{how}(indices, updates)``: ``indices[..., k]`` index the first "
                      f"``k`` dimensions (TF's ``{op_type}``); returns the Variable.")
    return method


def batch_scatter_update(self, sparse_delta, use_locking=False, name=None):
    """``Variable.batch_scatter_update(sparse_delta)``: for every batch position ``b``,
    ``v[b, indices[b, j]] = values[b, j]`` (the indices' leading dimensions are the batch)."""
    if not isinstance(sparse_delta, IndexedSlices):
        raise TypeError(f"Argument `sparse_delta` must be a `tf.IndexedSlices`. Received arg: {sparse_delta!r}")
    ind = _int_indices(sparse_delta.indices, "ResourceScatterUpdate")._value
    upd = _values_of(self, sparse_delta.values, "ResourceScatterUpdate")
    if ind.ndim < 1 or tuple(ind.shape[:-1]) != tuple(self._meta.shape[:ind.ndim - 1]):
        raise _bad("ResourceScatterUpdate", f"the indices' batch dimensions {list(ind.shape[:-1])} must be the "
                   f"Variable's first dimensions {list(self._meta.shape)}")
    return _apply(self, "batch", "update", ind, upd, "ResourceScatterUpdate")


def _sparse_read_method(self, indices, name=None):
    """``Variable.sparse_read(indices)``: the rows ``indices`` (TF's ``ResourceGather``; its gradient
    is ``IndexedSlices``)."""
    out = sparse_read(self, indices)
    return out if out is not None else gather(self, indices)


def _gather_nd_method(self, indices, name=None):
    """``Variable.gather_nd(indices)``: ``tf.gather_nd`` of the Variable's value."""
    return gather_nd(self, indices)


def count_up_to(self, limit):
    """``Variable.count_up_to(limit)`` (TF 1's counter, deprecated in TF 2): the value before an
    increment by 1; OutOfRangeError once it has reached ``limit`` (a host read, as TF's kernel)."""
    old = int(np.asarray(self.numpy()))
    if old >= int(limit):
        raise OutOfRangeError(None, None, f"Reached limit of {int(limit)} [Op:ResourceCountUpTo]")
    value = self.read_value()
    self.assign_add(np.asarray(1, np.dtype(self.dtype.as_numpy_dtype)))
    return value


register_methods(Variable, {
    "sparse_read": _sparse_read_method,
    "gather_nd": _gather_nd_method,
    "count_up_to": count_up_to,
    "scatter_add": _slices_method("add", "ResourceScatterAdd"),
    "scatter_sub": _slices_method("sub", "ResourceScatterSub"),
    "scatter_mul": _slices_method("mul", "ResourceScatterMul"),
    "scatter_div": _slices_method("div", "ResourceScatterDiv"),
    "scatter_max": _slices_method("max", "ResourceScatterMax"),
    "scatter_min": _slices_method("min", "ResourceScatterMin"),
    "scatter_update": _slices_method("update", "ResourceScatterUpdate"),
    "batch_scatter_update": batch_scatter_update,
    "scatter_nd_add": _nd_method("add", "ResourceScatterNdAdd"),
    "scatter_nd_sub": _nd_method("sub", "ResourceScatterNdSub"),
    "scatter_nd_update": _nd_method("update", "ResourceScatterNdUpdate"),
    "scatter_nd_max": _nd_method("max", "ResourceScatterNdMax"),
    "scatter_nd_min": _nd_method("min", "ResourceScatterNdMin"),
})

__all__ = ["tensor_scatter_nd_max", "tensor_scatter_nd_min", "tensor_scatter_nd_sub"]
