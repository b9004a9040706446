"""``tf.sparse``'s remaining core: ``split``, ``reset_shape`` and the sparse segment reductions.

``split`` and ``reset_shape`` (without a new shape) read the indices on the host, as the
value-dependent ops of ``sparse_ops`` do (eager only).  ``segment_sum`` / ``segment_mean`` /
``segment_sqrt_n`` take *dense* data: rows ``indices`` of ``data`` summed (averaged, divided by
the square root of the count) into ``segment_ids``; they are a recorded gather and segment
reduction (``GATHER_SEGMENT``), so their gradients with respect to ``data`` are JAX's (TF's: the
rows' cotangents scattered back).  Without ``num_segments`` the segment ids must be increasing
and their number is the last one plus one (read on the host), as TF's; TF checks the indices
and ids eagerly (InvalidArgumentError), and so does this where they are concrete.
"""
from typing import Any, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from .sparse_ops import retain
from .sparse_tensor import SparseTensor, host_indices, is_traced


def _segment(data, indices, ids, *, n, kind):
    rows = data[indices]
    total = jax.ops.segment_sum(rows, ids, num_segments=n)
    if kind == "sum":
        return total
    count = jax.ops.segment_sum(jnp.ones(ids.shape, data.dtype), ids, num_segments=n)
    count = count.reshape(count.shape + (1,) * (data.ndim - 1))
    scale = jnp.maximum(count, 1) if kind == "mean" else jnp.sqrt(jnp.maximum(count, 1))
    return total / scale


GATHER_SEGMENT = define("SparseSegmentReduction", _segment)


def _host(x: Any) -> Optional[np.ndarray]:
    t = x if isinstance(x, Tensor) else convert_to_tensor(x)
    return None if is_traced(t) else np.asarray(t.numpy()).reshape(-1)


def _segment_op(kind: str, data: Any, indices: Any, segment_ids: Any, num_segments: Any) -> Tensor:
    d = data if isinstance(data, Tensor) else convert_to_tensor(data)
    ind, ids = convert_to_tensor(indices), convert_to_tensor(segment_ids)
    hi, hs = _host(ind), _host(ids)
    if hi is not None and hi.size and (hi.min() < 0 or hi.max() >= d.shape[0]):
        bad = int(np.nonzero((hi < 0) | (hi >= d.shape[0]))[0][0])
        raise InvalidArgumentError(None, None, f"Bad: indices[{bad}] == {int(hi[bad])} out of range [0, {d.shape[0]})")
    if hi is not None and hs is not None and hi.shape != hs.shape:
        raise InvalidArgumentError(None, None, f"segment_ids and indices should have same size: {hs.size} vs {hi.size}")
    if num_segments is None:
        if hs is None:
            raise ValueError(f"tf.sparse.segment_{kind}: without num_segments the number of segments depends on "
                             "segment_ids' values, unknown inside a tapejax.function trace; pass num_segments.")
        if hs.size > 1 and np.any(np.diff(hs) < 0):
            raise InvalidArgumentError(None, None, "segment ids are not increasing")
        n = int(hs[-1]) + 1 if hs.size else 0
    else:
        n = int(num_segments.numpy() if isinstance(num_segments, Tensor) else num_segments)
    return bind(GATHER_SEGMENT, d, ind, ids, n=n, kind=kind)


def segment_sum(data: Any, indices: Any, segment_ids: Any, num_segments: Any = None, name: Any = None,
                sparse_gradient: bool = False) -> Tensor:
    """``tf.sparse.segment_sum``: ``out[segment_ids[i]] += data[indices[i]]``."""
    return _segment_op("sum", data, indices, segment_ids, num_segments)


def segment_mean(data: Any, indices: Any, segment_ids: Any, num_segments: Any = None, name: Any = None,
                 sparse_gradient: bool = False) -> Tensor:
    """``tf.sparse.segment_mean``: the mean of the rows of each segment (0 for an empty one)."""
    return _segment_op("mean", data, indices, segment_ids, num_segments)


def segment_sqrt_n(data: Any, indices: Any, segment_ids: Any, num_segments: Any = None, name: Any = None,
                   sparse_gradient: bool = False) -> Tensor:
    """``tf.sparse.segment_sqrt_n``: each segment's sum divided by the square root of its size."""
    return _segment_op("sqrt_n", data, indices, segment_ids, num_segments)


def split(sp_input: Any = None, num_split: Any = None, axis: Any = None, name: Any = None,
          keyword_required: Any = None) -> List[SparseTensor]:
    """``tf.sparse.split``: ``num_split`` SparseTensors along ``axis``, the first ``size %
    num_split`` one larger."""
    if not isinstance(sp_input, SparseTensor):
        raise TypeError(f"Input must be a SparseTensor (argument `sp_input` of tf.sparse.split); got "
                        f"{type(sp_input).__name__}.")
    if num_split is None or axis is None:
        raise ValueError("tf.sparse.split needs `num_split` and `axis`.")
    shape = sp_input.static_shape("tf.sparse.split")
    ax = int(axis) % len(shape) if -len(shape) <= int(axis) < len(shape) else None
    if ax is None:
        raise InvalidArgumentError(None, None, f"tf.sparse.split: axis {axis} is out of range for rank {len(shape)}.")
    k = int(num_split)
    if k < 1 or k > shape[ax]:
        raise InvalidArgumentError(None, None, f"tf.sparse.split: `num_split` must be in [1, {shape[ax]}] (the size "
                                   f"of dimension {ax}); got {k}.")
    size, extra = divmod(shape[ax], k)
    ind = host_indices(sp_input, "tf.sparse.split")[:, ax]
    out, start = [], 0
    for i in range(k):
        n = size + (1 if i < extra else 0)
        keep = (ind >= start) & (ind < start + n)
        piece = retain(sp_input, keep)
        shifted = np.asarray(piece.indices.numpy(), np.int64).reshape(int(np.shape(piece.indices)[0]), len(shape))
        shifted[:, ax] -= start
        out.append(SparseTensor._of(shifted, piece.values, shape[:ax] + (n,) + shape[ax + 1:]))
        start += n
    return out


def reset_shape(sp_input: Any, new_shape: Any = None) -> SparseTensor:
    """``tf.sparse.reset_shape``: the same entries with dense shape ``new_shape`` (each dimension
    at least the current one), or, without it, the tightest shape holding the entries."""
    if not isinstance(sp_input, SparseTensor):
        raise TypeError(f"Input must be a SparseTensor (argument `sp_input` of tf.sparse.reset_shape); got "
                        f"{type(sp_input).__name__}.")
    shape = sp_input.static_shape("tf.sparse.reset_shape")
    if new_shape is None:
        ind = host_indices(sp_input, "tf.sparse.reset_shape")
        tight = tuple(int(d) + 1 for d in ind.max(axis=0)) if len(ind) else (0,) * len(shape)
        return SparseTensor._of(sp_input.indices, sp_input.values, tight)
    want = tuple(int(d) for d in np.asarray(new_shape.numpy() if isinstance(new_shape, Tensor) else new_shape)
                 .reshape(-1))
    if len(want) != len(shape):
        raise ValueError(f"Dimensions {len(want)} and {len(shape)} are not compatible (the rank of `new_shape` and of "
                         "`sp_input`)")
    if any(w < s for w, s in zip(want, shape)):
        raise ValueError(f"Requested new_shape should have dimension sizes >= sp_input.shape.  Found new_shape "
                         f"({list(want)}), sp_input.shape ({list(shape)}).")
    return SparseTensor._of(sp_input.indices, sp_input.values, want)


__all__ = ["GATHER_SEGMENT", "reset_shape", "segment_mean", "segment_sqrt_n", "segment_sum", "split"]
