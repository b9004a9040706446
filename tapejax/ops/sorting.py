"""``tf.sort``, ``tf.argsort`` and ``tf.unique``: stable sorts (a descending float sort negates,
so equal values keep their order and ``-0.0`` / ``0.0`` sort as TF's), int32 sort indices, and
``unique``'s values in order of first appearance (its output size depends on the values: read on
the host, eager only).  Bool inputs are TF's error: it registers no sort kernel for them."""
import collections

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ._registry import _bad, _shape, check_float, prim, tf_types


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
    check_float(values, "Sort", "number", "values")   # (TF has no bool kernel)
    return bind(_SORT, values, axis=int(axis), descending=_direction(direction))


def _argsort(x, *, axis, descending):
    return jnp.argsort(x, axis=axis, stable=True, descending=descending).astype(jnp.int32)


_ARGSORT = prim("ArgSort", _argsort, differentiable=False)


@tf_types("ArgSort")
def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """``tf.argsort``: int32 indices (always stable here)."""
    check_float(values, "ArgSort", "number", "values")   # (TF has no bool kernel)
    return bind(_ARGSORT, values, axis=int(axis), descending=_direction(direction))


def _unique(x, *, dtype):
    # (TF compares with ``==``: every NaN is a value of its own, and a group's value is its first
    # element, ``-0.0`` or ``0.0``)
    x = np.asarray(x)
    _, first, inv = np.unique(x, return_index=True, return_inverse=True, equal_nan=False)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return jnp.asarray(x[first[order]]), jnp.asarray(rank[inv.reshape(-1)].astype(dtype))


_UNIQUE = prim("Unique", _unique, differentiable=False, multiple_results=True, jit=False)


#: ``(y, idx)`` of ``unique``: TF's namedtuple.
Unique = collections.namedtuple("Unique", ["y", "idx"])


@tf_types("Unique")
def unique(x, out_idx=_dtypes.int32, name=None):
    """``tf.unique`` of a 1-D tensor: values in order of first appearance (each NaN its own value,
    as TF's ``==``) and each element's index into them.  The output size depends on the values, so this reads them (eager only; no gradient,
    as TF)."""
    if len(_shape(x)) != 1:
        raise _bad("Unique", f"unique expects a 1D vector (argument `x`), got shape {list(_shape(x))}")
    store = _dtypes.storage_dtype(_dtypes.as_dtype(out_idx)._np, "out_idx")
    return Unique(*bind(_UNIQUE, x, dtype=store.name))


__all__ = ["Unique", "argsort", "sort", "unique"]
