"""Sparse updates: an ``IndexedSlices`` gradient applied to the rows it holds.

``apply_gradients`` turns an ``IndexedSlices`` into ``(values, indices)`` (``sparse_pair``: TF's
checks first) and the rule's ``_apply_sparse`` updates only those rows, inside the same compiled
update as the dense gradients, which donates the Variable's buffer where it owns it (a gather on
a Variable reads only its rows, so it does: ``ops.indexing.sparse_read``), so XLA writes the rows
in place and the step costs what the rows cost, not what the table costs.

The helpers are tf_keras' building blocks on JAX: ``dedup_rows`` (``_deduplicate_indexed_slices``:
duplicate indices summed, before any rule but plain SGD's), ``take_rows`` / ``put_rows``
(``tf.gather`` / ``ResourceScatterUpdate``), ``add_rows`` (``ResourceScatterAdd``).  Shapes stay
static under ``jax.jit``: the unique indices are padded to the number of rows given with an
index past the end, which every gather reads as zeros and every scatter drops.  An index out of
range is dropped as well (TF's CPU kernels raise; its GPU kernels skip it).
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.indexed_slices import IndexedSlices


def sparse_pair(g: IndexedSlices, v: Any, refuse_constraint: bool = True) -> tuple[Any, Any]:
    """``(values, indices)`` arrays of the gradient ``g`` of Variable ``v``, after TF's checks (the
    legacy optimizers refuse a constraint on a sparse update, ``refuse_constraint``: tf_keras'
    new ones apply it after the update as after a dense one; dtype, index dtype and row shape
    must fit)."""
    if refuse_constraint and v.constraint is not None:
        raise RuntimeError(f"Cannot use a constraint function on a sparse variable. Received: grad={g!r}, "
                           f"var.constraint={v.constraint!r}.")
    values = convert_to_tensor(g.values)
    indices = convert_to_tensor(g.indices)
    want = np.dtype(v._meta.dtype)
    have = np.dtype(values._meta.dtype)
    if have != want:
        raise InvalidArgumentError(None, None, f"var and grad do not have the same dtype: variable {v.name} has "
                                   f"dtype {want.name}, its gradient's values have dtype {have.name}")
    if np.dtype(indices._meta.dtype).kind not in "iu":
        raise TypeError(f"The indices of the IndexedSlices gradient of {v.name} must be integers; got "
                        f"{np.dtype(indices._meta.dtype).name}")
    vshape, ishape, pshape = tuple(values._meta.shape), tuple(indices._meta.shape), tuple(v._meta.shape)
    if len(ishape) != 1 or vshape != ishape + pshape[1:]:
        raise InvalidArgumentError(
            None, None, f"Must have updates.shape = indices.shape + params.shape[1:], got updates.shape "
            f"{list(vshape)}, indices.shape {list(ishape)}, params.shape {list(pshape)} (the IndexedSlices "
            f"gradient of {v.name}) [Op:ResourceScatterAdd]")
    return values._value, indices._value


def _in_range(ind: Any, n: int) -> Any:
    """``ind`` with every index outside ``[0, n)`` mapped to ``n`` (the dropped row)."""
    return jnp.where((ind < 0) | (ind >= n), n, ind)


def dedup_rows(g: Any, ind: Any, n: int) -> tuple[Any, Any]:
    """``(summed rows, unique indices)``: rows of ``g`` with equal indices summed, padded to
    ``len(ind)`` rows with index ``n`` (out of range, zero rows); to ``n`` rows where ``len(ind)``
    is a symbolic size (a ``tapejax.function`` traced for every batch size: at most ``n`` rows
    are distinct, and the pad must be static)."""
    k = ind.shape[0]
    if not isinstance(k, int):
        k = n
    u, inv = jnp.unique(_in_range(ind, n), size=k, fill_value=n, return_inverse=True)
    return jax.ops.segment_sum(g, inv.reshape(-1), num_segments=k), u


def take_rows(x: Any, ind: Any) -> Any:
    """Rows ``x[ind]`` (zeros at an index out of range)."""
    return x.at[_in_range(ind, x.shape[0])].get(mode="fill", fill_value=0)


def put_rows(x: Any, ind: Any, rows: Any) -> Any:
    """``x`` with rows ``ind`` replaced by ``rows`` (indices out of range dropped)."""
    return x.at[_in_range(ind, x.shape[0])].set(rows.astype(x.dtype), mode="drop")


def add_rows(x: Any, ind: Any, rows: Any) -> Any:
    """``x`` with ``rows`` added at ``ind`` (repeated indices add up; out of range dropped)."""
    return x.at[_in_range(ind, x.shape[0])].add(rows.astype(x.dtype), mode="drop")


__all__ = ["add_rows", "dedup_rows", "put_rows", "sparse_pair", "take_rows"]
