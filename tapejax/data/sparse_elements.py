"""SparseTensor components of dataset elements: held on the host, batched as tf.data batches them.

Inside a pipeline a component that is a ``SparseTensor`` (``tf.io.VarLenFeature``'s parse, a
``map`` returning one) is a ``SparseValue``: its indices, values and dense shape as NumPy arrays
(int64 indices and shape, values of the dtype tapejax holds them in), never a tuple, so element
structures keep it as one component.  Its spec is ``tf.SparseTensorSpec`` (``spec``: the dense
shape, dtype); it becomes a ``SparseTensor`` when handed to a user's function or an iterator's
caller (``to_sparse``), and a function's SparseTensor output becomes one again (``from_sparse``).

``batch`` stacks SparseValues as TF's ``batch`` stacks SparseTensors (``stack``): each element's
entries prefixed by its position in the batch, the dense shape ``[n] + `` the elementwise maximum
of the elements' dense shapes (their ranks must agree: InvalidArgumentError as TF's); ``unbatch``
takes rows (``SparseValue[i]``: the entries of row ``i``, dense shape ``dense_shape[1:]``).  A function
whose input or output has a SparseTensor component runs eagerly per element (its spec from
sample runs, ``hostfn``): the number of entries of each element is data.
"""
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..ops.sparse_tensor import SparseTensor, SparseTensorSpec


@dataclass(frozen=True, eq=False)
class SparseValue:
    """A SparseTensor component on the host (TF's ``SparseTensorValue``, as ``as_numpy_iterator``
    gives it): ``indices`` int64 ``[N, rank]``, ``values`` ``[N]``, ``dense_shape`` int64 ``[rank]``."""

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def shape(self) -> tuple:
        """The dense shape (what a component's ``shape`` means)."""
        return tuple(int(d) for d in self.dense_shape)

    def __getitem__(self, i: int) -> "SparseValue":
        """Row ``i`` (``unbatch``): the entries whose first index is ``i``, without it."""
        keep = self.indices[:, 0] == i
        return SparseValue(self.indices[keep, 1:], self.values[keep], self.dense_shape[1:])

    def __repr__(self) -> str:
        return f"SparseTensorValue(indices={self.indices!r}, values={self.values!r}, dense_shape={self.dense_shape!r})"


def from_sparse(sp: SparseTensor) -> SparseValue:
    """A SparseTensor's host copy (reads its parts)."""
    shape = sp.static_shape("a dataset element")
    values = np.asarray(sp.values.numpy())
    return SparseValue(np.asarray(sp.indices.numpy(), np.int64).reshape(len(values), len(shape)), values,
                       np.asarray(shape, np.int64))


def to_sparse(v: SparseValue) -> SparseTensor:
    return SparseTensor._of(v.indices, convert_to_tensor(v.values), v.shape)


def dense(v: SparseValue) -> np.ndarray:
    """The dense array (entries at the same index: the last one, as TF's ``to_dense``)."""
    out = np.zeros(v.shape, v.values.dtype)
    if len(v.values):
        out[tuple(v.indices.T)] = v.values
    return out


def spec(v: SparseValue) -> SparseTensorSpec:
    return SparseTensorSpec(v.shape, _dtypes.as_dtype(v.values.dtype))


def zero(s: SparseTensorSpec) -> SparseValue:
    """An element with no entries fitting spec ``s`` (unknown dimensions 1)."""
    dims = list(s.dims) if s.dims is not None else [1]
    shape = np.asarray([1 if d is None else d for d in dims], np.int64)
    return SparseValue(np.zeros((0, len(shape)), np.int64), np.zeros(0, s.dtype.as_numpy_dtype), shape)


def batched(s: SparseTensorSpec, size: Optional[int]) -> SparseTensorSpec:
    if s.dims is None:
        return SparseTensorSpec(None, s.dtype)
    return SparseTensorSpec((size,) + s.dims, s.dtype)


def unbatched(s: SparseTensorSpec) -> SparseTensorSpec:
    if s.dims is None:
        return s
    return SparseTensorSpec(s.dims[1:], s.dtype)


def combine(a: SparseTensorSpec, b: Any) -> Optional[SparseTensorSpec]:
    """The most specific spec both fit (dimensions that differ unknown), or None."""
    if not isinstance(b, SparseTensorSpec) or a.dtype != b.dtype:
        return None
    if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
        return SparseTensorSpec(None, a.dtype)
    return SparseTensorSpec([x if x == y else None for x, y in zip(a.dims, b.dims)], a.dtype)


def stack(comps: Sequence[SparseValue], k: int) -> SparseValue:
    """TF's batch of SparseTensors (the module docstring); ``k`` the component's position."""
    rank = len(comps[0].dense_shape)
    for i, c in enumerate(comps):
        if len(c.dense_shape) != rank:
            raise InvalidArgumentError(f"Cannot batch tensors with different ranks in component {k}: first element "
                                       f"had rank {rank} and element {i} had rank {len(c.dense_shape)}.")
    shape = np.max(np.stack([c.dense_shape for c in comps]), axis=0) if rank else np.zeros(0, np.int64)
    indices = np.concatenate([np.concatenate([np.full((len(c.indices), 1), i, np.int64), c.indices], axis=1)
                              for i, c in enumerate(comps)]) if comps else np.zeros((0, rank + 1), np.int64)
    values = np.concatenate([c.values for c in comps])
    return SparseValue(indices, values, np.concatenate([[len(comps)], shape]).astype(np.int64))


def grown(v: SparseValue, s: SparseTensorSpec) -> SparseValue:
    """``v`` with each dimension ``s`` leaves unknown one larger (``hostfn``'s spec inference)."""
    if s.dims is None:
        return v
    more = np.asarray([1 if d is None else 0 for d in s.dims], np.int64)
    return SparseValue(v.indices, v.values, v.dense_shape + more)


__all__ = ["SparseValue", "batched", "combine", "dense", "from_sparse", "grown", "spec", "stack", "to_sparse",
           "unbatched", "zero"]
