"""Segment reductions beyond the sum (``tf.math.segment_*`` / ``unsorted_segment_*``) and the rest of
``tf.math``'s selection and ordering ops (``in_top_k``, ``invert_permutation``, ``confusion_matrix``,
``is_non_decreasing`` ...), as primitives with TF-named wrappers.

Empty segments: ``unsorted_segment_max`` gives the dtype's lowest value, ``_min`` its highest
(and so for segments of -inf / inf entries: TF's kernel starts from those values),
``_prod`` one, ``_mean`` and ``_sqrt_n`` zero (TF's kernels); the sorted ``segment_*`` ops give
zero there.  The sorted forms read the number of segments from the last id (eager only for traced
ids, as ``segment_sum``); max/min gradients split evenly between tied entries (TF's rule).
"""
import collections

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ._registry import _call, _shape, prim, tf_types
from .checks import VALUE_CHECKS, require_in_range
from .reduce import _seg_ids_check


def _extreme(dtype, high):
    d = np.dtype(dtype)
    if d.kind == "f" or d == jnp.bfloat16:
        info = jnp.finfo(d)
        return info.max if high else info.min
    info = np.iinfo(d)
    return info.max if high else info.min


def _counts(ids, n, dtype):
    return jax.ops.segment_sum(jnp.ones(ids.shape, dtype), ids, num_segments=n)


def _tie_split(reduce):
    """A segment max/min whose gradient splits evenly between the tied entries (TF's rule)."""
    def f(data, ids, n):
        return reduce(data, ids, num_segments=n)

    f = jax.custom_jvp(f, nondiff_argnums=(2,))

    @f.defjvp
    def jvp(n, p, t):
        data, ids = p
        out = f(data, ids, n)
        ids_b = ids.reshape(ids.shape + (1,) * (data.ndim - ids.ndim))
        picked = jnp.take(out, jnp.clip(ids, 0, n - 1), axis=0)
        sel = (picked == data) & (ids_b >= 0) & (ids_b < n)
        count = jax.ops.segment_sum(sel.astype(data.dtype), ids, num_segments=n)
        td = jnp.where(sel, t[0], jnp.zeros_like(data))
        return out, jax.ops.segment_sum(td, ids, num_segments=n) / jnp.maximum(count, 1)

    return f


def _prod(data, ids, n):
    return jax.ops.segment_prod(data, ids, num_segments=n)


_prod = jax.custom_jvp(_prod, nondiff_argnums=(2,))


@_prod.defjvp
def _prod_jvp(n, p, t):
    """TF's rule (``_UnsortedSegmentProdGrad``): each entry's partial is the product of the other
    entries of its segment (0 where another entry is 0)."""
    data, ids = p
    zero = data == 0
    zeros = jax.ops.segment_sum(zero.astype(jnp.int32), ids, num_segments=n)
    nonzero_prod = jax.ops.segment_prod(jnp.where(zero, jnp.ones_like(data), data), ids, num_segments=n)
    idx = jnp.clip(ids, 0, n - 1)
    z, pr = jnp.take(zeros, idx, axis=0), jnp.take(nonzero_prod, idx, axis=0)
    partial = jnp.where(zero, jnp.where(z == 1, pr, 0), jnp.where(z == 0, pr / jnp.where(zero, 1, data), 0))
    return _prod(data, ids, n), jax.ops.segment_sum(t[0] * partial, ids, num_segments=n)


_MAX = _tie_split(jax.ops.segment_max)
_MIN = _tie_split(jax.ops.segment_min)


def _unsorted(kind, data, ids, num_segments, empty_zero):
    n = num_segments
    if ids.ndim != 1:   # (TF's ids may be any prefix of data's shape, JAX's are 1-D: flattened)
        data, ids = data.reshape((ids.size,) + data.shape[ids.ndim:]), ids.reshape(-1)
    ids = ids.astype(jnp.int32)
    if kind == "max":
        out = _MAX(data, ids, n)
        fill = _extreme(data.dtype, False)
    elif kind == "min":
        out = _MIN(data, ids, n)
        fill = _extreme(data.dtype, True)
    elif kind == "prod":
        return _prod(data, ids, n)
    else:
        s = jax.ops.segment_sum(data, ids, num_segments=n)
        c = _counts(ids, n, data.dtype).reshape((n,) + (1,) * (data.ndim - ids.ndim))
        c = jnp.maximum(c, 1)
        return s / (c if kind == "mean" else jnp.sqrt(c))
    c = _counts(ids, n, jnp.int32).reshape((n,) + (1,) * (data.ndim - ids.ndim))
    if not empty_zero:   # TF's kernel starts from the lowest (highest) finite value: -inf (inf) never wins
        fill = jnp.asarray(fill, out.dtype)
        out = jnp.where(out < fill if kind == "max" else out > fill, fill, out)
    return jnp.where(c > 0, out, jnp.asarray(0 if empty_zero else fill, out.dtype))


_PRIMS = {k: prim(f"UnsortedSegment{k.capitalize() if k != 'sqrt_n' else 'SqrtN'}",
                  lambda data, ids, *, num_segments, empty_zero, _k=k: _unsorted(_k, data, ids, num_segments, empty_zero))
          for k in ("max", "min", "prod", "mean", "sqrt_n")}


def _make_unsorted(kind):
    op_type = _PRIMS[kind].name

    def op(data, segment_ids, num_segments, name=None):
        ids = _seg_ids_check(data, segment_ids, op_type)
        n = int(num_segments)
        if VALUE_CHECKS[0]:
            require_in_range(ids._value, n, "segment_ids", f"is out of range [0, {n})", op_type, negative_ok=True)
        return _call(_PRIMS[kind], op_type, data, ids, num_segments=n, empty_zero=False)

    op.__name__ = op.__qualname__ = f"unsorted_segment_{kind}"
    op.__doc__ = f"``tf.math.unsorted_segment_{kind}`` (see the module docstring for empty segments)."
    op._tf_types = (op_type,)
    return op


def _make_sorted(kind):
    op_type = f"Segment{kind.capitalize()}"

    def op(data, segment_ids, name=None):
        ids = _seg_ids_check(data, segment_ids, op_type)
        v = np.asarray(ids._value)
        if v.size and np.any(np.diff(v) < 0):
            raise InvalidArgumentError(None, None, f"segment ids are not increasing [Op:{op_type}]")
        n = int(v[-1]) + 1 if v.size else 0
        return _call(_PRIMS[kind], op_type, data, ids, num_segments=n, empty_zero=True)

    op.__name__ = op.__qualname__ = f"segment_{kind}"
    op.__doc__ = f"``tf.math.segment_{kind}`` (sorted ids; empty segments give 0)."
    op._tf_types = (_PRIMS[kind].name,)
    return op


unsorted_segment_max, unsorted_segment_min = _make_unsorted("max"), _make_unsorted("min")
unsorted_segment_prod, unsorted_segment_mean = _make_unsorted("prod"), _make_unsorted("mean")
unsorted_segment_sqrt_n = _make_unsorted("sqrt_n")
segment_max, segment_min, segment_prod, segment_mean = (_make_sorted("max"), _make_sorted("min"),
                                                        _make_sorted("prod"), _make_sorted("mean"))


# -- selection and ordering -----------------------------------------------------------------

_IN_TOP_K = prim("InTopKV2", lambda predictions, targets, *, k: _in_top_k(predictions, targets, k),
                 differentiable=False)


def _in_top_k(pred, targets, k):
    t = jnp.take_along_axis(pred, targets[:, None].astype(jnp.int32), axis=1)
    greater = jnp.sum(pred > t, axis=1)
    ok = (targets >= 0) & (targets < pred.shape[1]) & jnp.all(jnp.isfinite(pred), axis=1)
    return (greater < k) & ok


@tf_types("InTopKV2")
def in_top_k(targets, predictions, k, name=None):
    """``tf.math.in_top_k(targets, predictions, k)``: whether each target's prediction is among the
    ``k`` largest of its row (ties count in favour, as TF); False for a row with a non-finite value."""
    t = convert_to_tensor(targets).dtype
    if not t.is_integer:
        raise InvalidArgumentError(None, None, f"Value for attr 'T' of {t.name} is not in the list of allowed "
                                   "values: int32, int64 (argument `targets` of InTopKV2) [Op:InTopKV2]")
    return _call(_IN_TOP_K, "InTopKV2", predictions, targets, k=int(k))


_INVERT_PERM = prim("InvertPermutation", lambda x: jnp.zeros_like(x).at[x].set(jnp.arange(x.shape[0], dtype=x.dtype)),
                    differentiable=False)


@tf_types("InvertPermutation")
def invert_permutation(x, name=None):
    """``tf.math.invert_permutation``: ``y[x[i]] = i``."""
    t = convert_to_tensor(x)
    if t.ndim != 1:
        raise InvalidArgumentError(None, None, f"invert_permutation expects a 1D vector (argument `x` has rank "
                                   f"{t.ndim}) [Op:InvertPermutation]")
    return _call(_INVERT_PERM, "InvertPermutation", t)


_MONOTONE = prim("IsMonotonic", lambda x, *, strict: (jnp.all(jnp.diff(x.reshape(-1)) > 0) if strict
                                                      else jnp.all(jnp.diff(x.reshape(-1)) >= 0)), differentiable=False)


@tf_types("IsMonotonic")
def is_non_decreasing(x, name=None):
    """``tf.math.is_non_decreasing``: the flattened ``x`` never decreases (True for fewer than 2 entries)."""
    return _call(_MONOTONE, "IsMonotonic", x, strict=False)


@tf_types("IsMonotonic")
def is_strictly_increasing(x, name=None):
    """``tf.math.is_strictly_increasing``: the flattened ``x`` always increases."""
    return _call(_MONOTONE, "IsMonotonic", x, strict=True)


_ZERO_FRACTION = prim("ZeroFraction", lambda x: jnp.mean((x == 0).astype(jnp.float32)), differentiable=False)


@tf_types("ZeroFraction")
def zero_fraction(value, name=None):
    """``tf.math.zero_fraction`` (also ``tf.nn``): the fraction of zeros, float32."""
    return _call(_ZERO_FRACTION, "ZeroFraction", value)


_CONFUSION = prim("ConfusionMatrix", lambda labels, pred, *w, n, dtype: jnp.zeros((n, n), dtype).at[
    labels.astype(jnp.int32), pred.astype(jnp.int32)].add(w[0].astype(dtype) if w else jnp.ones((), dtype),
                                                          mode="drop"), differentiable=False)


@tf_types("ConfusionMatrix")
def confusion_matrix(labels, predictions, num_classes=None, weights=None, dtype=_dtypes.int32, name=None):
    """``tf.math.confusion_matrix``: counts (or summed ``weights``) of (label, prediction) pairs;
    ``num_classes`` defaults to the largest value + 1 (read from the values: eager only)."""
    lab, pre = convert_to_tensor(labels), convert_to_tensor(predictions)
    if tuple(lab.shape) != tuple(pre.shape):
        raise ValueError(f"`labels` and `predictions` must have the same shape; got {tuple(lab.shape)} and "
                         f"{tuple(pre.shape)}")
    if num_classes is None:
        n = int(max(np.max(np.asarray(lab._value), initial=-1), np.max(np.asarray(pre._value), initial=-1))) + 1
    else:
        n = int(num_classes)
    if VALUE_CHECKS[0]:
        require_in_range(lab._value, n, "labels", f"is out of range [0, {n})", "ConfusionMatrix")
        require_in_range(pre._value, n, "predictions", f"is out of range [0, {n})", "ConfusionMatrix")
    dt = _dtypes.as_dtype(dtype)._np
    args = (lab, pre) + (() if weights is None else (convert_to_tensor(weights),))
    return _call(_CONFUSION, "ConfusionMatrix", *args, n=n, dtype=dt.name)


#: ``(values, indices)`` of the approximate top-k ops: TF's namedtuple.
ApproxTopK = collections.namedtuple("ApproxTopK", ["values", "indices"])


def _approx_k(op_type, largest):
    p = prim(op_type, lambda x, *, k, axis: tuple(jax.lax.approx_max_k(x, k, reduction_dimension=axis) if largest
                                                   else jax.lax.approx_min_k(x, k, reduction_dimension=axis)),
             multiple_results=True)

    def op(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
           aggregate_to_topk=True, name=None):
        nd = len(_shape(operand))
        out = bind(p, operand, k=int(k), axis=int(reduction_dimension) % max(nd, 1))
        return ApproxTopK(*out)

    op.__name__ = op.__qualname__ = "approx_max_k" if largest else "approx_min_k"
    op.__doc__ = (f"``tf.math.{op.__name__}``: (values, indices) of ``k`` {'largest' if largest else 'smallest'} "
                  "entries along ``reduction_dimension`` (XLA's approximate top-k; exact on the CPU).")
    op._tf_types = (op_type,)
    return op


approx_max_k = _approx_k("ApproxTopK", True)
approx_min_k = _approx_k("ApproxMinK", False)


def approx_top_k(input, k, reduction_dimension=-1, recall_target=0.95, is_max_k=True,  # noqa: A002
                 reduction_input_size_override=-1, aggregate_to_topk=True, name=None):
    """``tf.approx_top_k``: ``approx_max_k`` (``is_max_k``) or ``approx_min_k``."""
    return (approx_max_k if is_max_k else approx_min_k)(input, k, reduction_dimension)


approx_top_k._tf_types = ("ApproxTopK", "ApproxMinK")


__all__ = ["approx_max_k", "approx_min_k", "approx_top_k", "confusion_matrix", "in_top_k", "invert_permutation", "is_non_decreasing",
           "is_strictly_increasing", "segment_max", "segment_mean", "segment_min", "segment_prod",
           "unsorted_segment_max", "unsorted_segment_mean", "unsorted_segment_min", "unsorted_segment_prod",
           "unsorted_segment_sqrt_n", "zero_fraction"]
