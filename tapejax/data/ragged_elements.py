"""RaggedTensor components of dataset elements: held on the host, batched as tf.data batches them.

As ``sparse_elements`` does for SparseTensors: inside a pipeline a component that is a
``RaggedTensor`` (sliced from one, a ``map`` returning one, ``ragged_batch``'s output, a parsed
``tf.io.RaggedFeature``) is a ``RaggedValue``: its flat values and row splits (outermost first) as
NumPy arrays, never a tuple, so element structures keep it as one component.  Its spec is
``tf.RaggedTensorSpec``; a ``RaggedValue`` with no splits is TF's ragged_rank-0 ragged component
(a row of a ``ragged_rank`` 1 RaggedTensor), handed to the user as a dense Tensor, as TF's.  It
becomes a ``RaggedTensor`` when handed to a user's function or an iterator's caller
(``to_ragged``), and a function's RaggedTensor output becomes one again (``from_ragged``).

``batch`` stacks RaggedValues (``stack``: one more outer partition, TF's ``batch`` of ragged
components); ``ragged_batch`` does the same for dense components whose shapes vary
(``ragged_stack``: ``ragged_rank`` 1 over the first dimension); a dense component of a known
shape is batched densely, as TF's.  ``unbatch`` and ``from_tensor_slices`` take rows
(``RaggedValue[i]``).  A function whose input or output has a ragged component runs eagerly per
element (its spec from sample runs, ``hostfn``).
"""
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..ops.ragged_dense import host_tensor
from ..ops.ragged_tensor import RaggedTensor, RaggedTensorSpec


@dataclass(frozen=True, eq=False)
class RaggedValue:
    """A RaggedTensor component on the host: ``flat_values`` and ``splits`` (int64 row splits,
    outermost first; none for a ragged_rank-0 component)."""

    flat_values: np.ndarray
    splits: Tuple[np.ndarray, ...]

    @property
    def dtype(self) -> np.dtype:
        return self.flat_values.dtype

    @property
    def ragged_rank(self) -> int:
        return len(self.splits)

    @property
    def shape(self) -> tuple:
        """The static shape: rows, then None for each ragged dimension, then the inner ones."""
        if not self.splits:
            return tuple(self.flat_values.shape)
        return (len(self.splits[0]) - 1,) + (None,) * len(self.splits) + tuple(self.flat_values.shape[1:])

    def __len__(self) -> int:
        return len(self.splits[0]) - 1 if self.splits else len(self.flat_values)

    def __getitem__(self, i: int) -> "RaggedValue":
        """Row ``i`` (``unbatch``, ``from_tensor_slices``)."""
        if not self.splits:
            return RaggedValue(self.flat_values[i], ())
        lo, hi = int(self.splits[0][i]), int(self.splits[0][i + 1])
        inner = []
        for s in self.splits[1:]:
            inner.append(s[lo:hi + 1] - s[lo])
            lo, hi = int(s[lo]), int(s[hi])
        return RaggedValue(self.flat_values[lo:hi], tuple(inner))

    def numpy(self) -> np.ndarray:
        """TF's ``RaggedTensor.numpy()`` (what ``as_numpy_iterator`` gives)."""
        if not self.splits:
            return self.flat_values
        values = RaggedValue(self.flat_values, self.splits[1:]).numpy()
        s = self.splits[0]
        rows = [values[int(s[i]):int(s[i + 1])] for i in range(len(s) - 1)]
        if not rows:
            return np.zeros((0, 0) + values.shape[1:], dtype=values.dtype)
        variable = any(len(r) != len(rows[0]) for r in rows)
        if variable:
            out = np.empty(len(rows), dtype=object)
            for i, r in enumerate(rows):
                out[i] = r
            return out
        return np.array(rows)

    def __repr__(self) -> str:
        return f"RaggedValue(flat_values={self.flat_values!r}, splits={self.splits!r})"


def from_ragged(rt: Any) -> RaggedValue:
    """A RaggedTensor's host copy (reads its parts)."""
    splits = tuple(np.asarray(s.numpy(), np.int64) for s in rt.nested_row_splits)
    return RaggedValue(np.asarray(rt.flat_values.numpy()), splits)


def to_ragged(v: RaggedValue) -> Any:
    """The RaggedTensor (a Tensor for ragged_rank 0)."""
    out: Any = convert_to_tensor(v.flat_values)
    for s in reversed(v.splits):
        out = RaggedTensor._of(out, host_tensor(s), _dtypes.int64)
    return out


def spec(v: RaggedValue) -> RaggedTensorSpec:
    return RaggedTensorSpec(v.shape, _dtypes.as_dtype(v.dtype), v.ragged_rank)


def zero(s: RaggedTensorSpec) -> RaggedValue:
    """An element with empty rows fitting spec ``s`` (unknown dimensions 1; ``hostfn``)."""
    dims = list(s.shape) if s.shape is not None else [1] * (s.ragged_rank + 1)
    nrows = 1 if dims[0] is None else dims[0]
    inner = tuple(1 if d is None else d for d in dims[s.ragged_rank + 1:])
    flat = np.zeros((0,) + inner, s.dtype.as_numpy_dtype)
    if s.ragged_rank == 0:
        return RaggedValue(np.zeros((nrows,) + inner, s.dtype.as_numpy_dtype), ())
    splits = (np.zeros(nrows + 1, np.int64),) + tuple(np.zeros(1, np.int64) for _ in range(s.ragged_rank - 1))
    return RaggedValue(flat, splits)


def batched(s: RaggedTensorSpec, size: Optional[int]) -> RaggedTensorSpec:
    shape = None if s.shape is None else (size,) + tuple(s.shape)
    return RaggedTensorSpec(shape, s.dtype, s.ragged_rank + 1, s.row_splits_dtype)


def unbatched(s: RaggedTensorSpec) -> RaggedTensorSpec:
    shape = None if s.shape is None else (None,) + tuple(s.shape)[2:] if s.ragged_rank else tuple(s.shape)[1:]
    return RaggedTensorSpec(shape, s.dtype, max(s.ragged_rank - 1, 0), s.row_splits_dtype)


def combine(a: RaggedTensorSpec, b: Any) -> Optional[RaggedTensorSpec]:
    """The most specific spec both fit (dimensions that differ unknown), or None."""
    if not isinstance(b, RaggedTensorSpec) or a.dtype != b.dtype or a.ragged_rank != b.ragged_rank:
        return None
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return RaggedTensorSpec(None, a.dtype, a.ragged_rank)
    return RaggedTensorSpec([x if x == y else None for x, y in zip(a.shape, b.shape)], a.dtype, a.ragged_rank)


def _rows(c: Any) -> RaggedValue:
    return c if isinstance(c, RaggedValue) else RaggedValue(np.asarray(c), ())


def stack(comps: Sequence[Any], k: int) -> RaggedValue:
    """TF's batch of ragged components: one more outer partition over the elements' rows."""
    vals = [_rows(c) for c in comps]
    rank, inner = vals[0].ragged_rank, vals[0].flat_values.shape[1:]
    for i, v in enumerate(vals):
        if v.ragged_rank != rank or v.flat_values.ndim != vals[0].flat_values.ndim:
            raise InvalidArgumentError(f"Cannot batch tensors with different ranks in component {k}: first element "
                                       f"had rank {len(vals[0].shape)} and element {i} had rank {len(v.shape)}.")
        if v.flat_values.shape[1:] != inner and (rank or v.flat_values.ndim > 1):
            raise InvalidArgumentError(f"Cannot batch ragged tensors with different inner shapes in component {k}: "
                                       f"{list(inner)} and {list(v.flat_values.shape[1:])} (element {i}).")
    outer = np.concatenate([[0], np.cumsum([len(v) for v in vals])]).astype(np.int64)
    levels: List[np.ndarray] = [outer]
    for level in range(rank):
        pieces, offset = [np.zeros(1, np.int64)], 0
        for v in vals:
            s = v.splits[level]
            pieces.append(s[1:] + offset)
            offset += int(s[-1])
        levels.append(np.concatenate(pieces))
    flat = np.concatenate([v.flat_values for v in vals]) if vals else np.zeros((0,) + inner)
    return RaggedValue(flat, tuple(levels))


def ragged_rank_of(s: Any) -> Optional[int]:
    """``ragged_batch``'s rule for one component's spec: a RaggedTensor keeps its ragged rank; a
    dense component with unknown dimensions becomes ragged up to its last unknown one (TF's); a
    fully known dense one (and a None / SparseTensor one) is batched as ``batch`` does (None)."""
    if isinstance(s, RaggedTensorSpec):
        return s.ragged_rank
    shape = getattr(s, "shape", ())
    if not hasattr(s, "dtype") or type(s).__name__ != "TensorSpec":
        return None
    if shape is None:
        return 0
    unknown = [i for i, d in enumerate(shape) if d is None]
    return unknown[-1] if unknown else None


def as_ragged_spec(s: Any, rank: Optional[int]) -> Any:
    """The element spec ``ragged_batch`` batches: ``s``, or its ragged form for ``rank``."""
    if rank is None or isinstance(s, RaggedTensorSpec):
        return s
    return RaggedTensorSpec(s.shape if s.shape is not None else None, s.dtype, rank)


def _as_ragged(c: Any, rank: int) -> RaggedValue:
    """A dense element as a RaggedValue of ``rank`` (uniform partitions of its first dimensions)."""
    if isinstance(c, RaggedValue):
        return c
    a = np.asarray(c)
    splits = []
    for level in range(rank):
        nrows = int(np.prod(a.shape[:level + 1], dtype=np.int64))
        splits.append(np.arange(nrows + 1, dtype=np.int64) * int(a.shape[level + 1]))
    flat = a.reshape((int(np.prod(a.shape[:rank + 1], dtype=np.int64)),) + a.shape[rank + 1:])
    return RaggedValue(flat, tuple(splits))


class RaggedStack:
    """``ragged_batch``'s batch function: each component by its rank (``ragged_rank_of``): ragged
    ones stacked with one more partition, dense ones by ``dense`` (``nodes.stack``)."""

    def __init__(self, ranks: Sequence[Optional[int]], dense: Callable[[Sequence[Any]], Any]):
        self._ranks, self._dense = list(ranks), dense

    def __call__(self, elements: Sequence[Any]) -> Tuple[Any, ...]:
        out = []
        for k, rank in enumerate(self._ranks):
            comps = [e[k] for e in elements]
            if rank is None:
                out.append(self._dense([(c,) for c in comps])[0])
            else:
                out.append(stack([_as_ragged(c, rank) for c in comps], k))
        return tuple(out)


def grown(v: RaggedValue, s: RaggedTensorSpec) -> RaggedValue:
    """``v`` with one more row (its last repeated) where ``s`` leaves the number of rows unknown
    (``hostfn``'s spec inference: output dimensions that follow it become unknown)."""
    if (s.shape is not None and s.shape[0] is not None) or len(v) == 0:
        return v
    last = v[len(v) - 1]
    return stack([v[i] for i in range(len(v))] + [last], 0) if v.splits else RaggedValue(
        np.concatenate([v.flat_values, v.flat_values[-1:]]), ())


def is_ragged(value: Any) -> bool:
    return isinstance(value, RaggedTensor)


def as_component(value: Any) -> Any:
    """A function output or ``from_tensor_slices`` input that is a RaggedTensor as a RaggedValue."""
    return from_ragged(value) if isinstance(value, RaggedTensor) else value


def handed_out(c: Any) -> Any:
    """A component as a user sees it: a RaggedValue as its RaggedTensor (or Tensor)."""
    return to_ragged(c) if isinstance(c, RaggedValue) else c


__all__ = ["RaggedValue", "as_component", "batched", "combine", "from_ragged", "grown", "handed_out", "is_ragged",
           "RaggedStack", "as_ragged_spec", "ragged_rank_of", "spec", "stack", "to_ragged", "unbatched", "zero"]
