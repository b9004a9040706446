"""``tf.edit_distance``: the Levenshtein distance between the sequences of two SparseTensors.

TF's ``EditDistance`` kernel, as its source has it: each SparseTensor is read as groups of
consecutive entries with equal leading ``rank - 1`` indices (the group's cell), its values in the
order given being the sequence (TF assumes the canonical row-major order and does not sort: an
unordered input gives TF's merge result, reproduced here).  The two group lists are walked as a
merge: a cell both have gets ``levenshtein(truth, hypothesis)`` (divided by the truth's length
with ``normalize``), a cell only the hypothesis has its length (``inf`` normalized), a cell only
the truth has its length (``1.0`` normalized), every other cell 0.  The output is float32 of
shape ``max(hypothesis.shape[:-1], truth.shape[:-1])``; the op has no gradient (TF registers
none: a tape gives None).

The distance needs the index values, so it runs on the host: eagerly on the concrete indices
and values (TF's errors at the call), and inside a ``tapejax.function`` trace as the op
``EditDistance``, a ``jax.pure_callback`` of the same NumPy function (the output shape is static:
the dense shapes are; a cell outside the output there fails the step with JAX's runtime error
rather than TF's ``InternalError``).  String SparseTensors keep their
values on the host (``ops.sparse_tensor``) and are computed there directly.
"""
from typing import Any, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.bind import bind, define
from ..core.errors import InternalError, InvalidArgumentError
from ..core.tensor import Tensor
from .sparse_tensor import SparseTensor, host_indices, is_traced


def _levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The edit distance (insertions, deletions, substitutions of cost 1) of ``a`` and ``b``."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def _groups(indices: np.ndarray, values: Sequence[Any]) -> List[Tuple[Tuple[int, ...], List[Any]]]:
    """Runs of consecutive entries with equal leading indices: (cell, the run's values)."""
    out: List[Tuple[Tuple[int, ...], List[Any]]] = []
    for row, v in zip(indices, values):
        cell = tuple(int(i) for i in row[:-1])
        if out and out[-1][0] == cell:
            out[-1][1].append(v)
        else:
            out.append((cell, [v]))
    return out


def distances(h_idx: np.ndarray, h_val: Sequence[Any], t_idx: np.ndarray, t_val: Sequence[Any],
              out_shape: Tuple[int, ...], normalize: bool) -> np.ndarray:
    """The output of TF's ``EditDistance`` kernel (the module docstring) on host values."""
    out = np.zeros(out_shape, np.float32)
    flat = out.reshape(-1)
    strides = np.cumprod((1,) + tuple(out_shape[:0:-1]))[::-1] if out_shape else np.zeros(0, np.int64)

    def put(cell: Tuple[int, ...], value: Any) -> None:
        loc = int(np.dot(cell, strides)) if cell else 0
        if not 0 <= loc < flat.size:
            raise InternalError(None, None, f"Got an inner product {loc} which would require writing to outside of "
                                f"the buffer for the output tensor (max elements {flat.size})")
        flat[loc] = value

    hyp, truth = _groups(h_idx, h_val), _groups(t_idx, t_val)
    i = j = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        while i < len(hyp) and j < len(truth):
            (gh, sh), (gt, st) = hyp[i], truth[j]
            if gh == gt:
                d = np.float32(_levenshtein(st, sh))
                put(gt, d / np.float32(len(st)) if normalize else d)
                i, j = i + 1, j + 1
            elif gt > gh:   # no truth at this hypothesis' cell
                put(gh, np.float32(len(sh)) / np.float32(0) if normalize else len(sh))
                i += 1
            else:           # no hypothesis at this truth's cell
                put(gt, 1.0 if normalize else len(st))
                j += 1
        for gh, sh in hyp[i:]:
            put(gh, np.float32(len(sh)) / np.float32(0) if normalize else len(sh))
        for gt, st in truth[j:]:
            put(gt, 1.0 if normalize else len(st))
    return out


def _impl(h_idx, h_val, t_idx, t_val, *, out_shape, normalize):
    def host(hi, hv, ti, tv):
        return distances(np.asarray(hi), np.asarray(hv).tolist(), np.asarray(ti), np.asarray(tv).tolist(),
                         out_shape, normalize)
    return jax.pure_callback(host, jax.ShapeDtypeStruct(out_shape, jnp.float32), h_idx, h_val, t_idx, t_val)


EDIT_DISTANCE = define("EditDistance", _impl, differentiable=False, jit=False)


def _host_values(values: Any) -> list:
    return list(values) if isinstance(values, np.ndarray) else np.asarray(values.numpy()).tolist()


def _check(st: Any, what: str) -> SparseTensor:
    if not isinstance(st, SparseTensor):
        raise TypeError(f"{what} must be a SparseTensor.")
    return st


def edit_distance(hypothesis: Any, truth: Any, normalize: bool = True, name: str = "edit_distance") -> Tensor:
    """``tf.edit_distance``: the Levenshtein distances between the sequences (the last dimension)
    of two SparseTensors, per cell of their leading dimensions, divided by the truth's lengths
    with ``normalize`` (the module docstring has TF's rules)."""
    hyp = _check(hypothesis, "Hypothesis")
    tru = _check(truth, "Truth")
    h_shape = hyp.static_shape("tf.edit_distance")
    t_shape = tru.static_shape("tf.edit_distance")
    if len(t_shape) < 2:
        raise InvalidArgumentError(None, None, "Input SparseTensors must have rank at least 2, but truth_shape rank "
                                   f"is: {len(t_shape)}")
    if len(t_shape) != len(h_shape):
        raise InvalidArgumentError(None, None, "Expected truth and hypothesis to have matching ranks, but their "
                                   f"shapes are: [{len(t_shape)}] and [{len(h_shape)}]")
    if hyp.dtype != tru.dtype:
        raise InvalidArgumentError(None, None, f"cannot compute EditDistance as input #4(zero-based) was expected to "
                                   f"be a {hyp.dtype.name} tensor but is a {tru.dtype.name} tensor")
    out_shape = tuple(max(a, b) for a, b in zip(h_shape[:-1], t_shape[:-1]))
    normalize = bool(normalize)
    parts = (hyp.indices, hyp.values, tru.indices, tru.values)
    if isinstance(hyp.values, np.ndarray) or not any(is_traced(p) for p in parts):
        # concrete (or string) values: computed here, TF's errors raised at the call
        h_idx, t_idx = host_indices(hyp, "tf.edit_distance"), host_indices(tru, "tf.edit_distance")
        return Tensor(jnp.asarray(distances(h_idx, _host_values(hyp.values), t_idx, _host_values(tru.values),
                                            out_shape, normalize)))
    return bind(EDIT_DISTANCE, hyp.indices, hyp.values, tru.indices, tru.values, out_shape=out_shape,
                normalize=normalize)


__all__ = ["distances", "edit_distance"]
