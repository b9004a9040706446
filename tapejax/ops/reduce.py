"""Reductions, scans, selection, clipping, top_k, segments and bincount (``tf.math`` and the top
level), declared as primitives with hand-written TF-named wrappers."""
import collections
import functools
from typing import Any, List

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, bind1
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.indexed_slices import IndexedSlices
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import _grads as G
from ._registry import (
    _KINDS,
    _OPERANDS,
    _PY_NUMBERS,
    NONE_OPERAND,
    OP_DISPATCH,
    _shape,
    check_binary,
    check_float,
    check_same_dtypes,
    constant_dtype,
    dtype_of,
    op_error,
    prim,
    scalar_constant,
    static_axis,
    tf_types,
)
from .checks import VALUE_CHECKS, require, require_in_range
from .matching import matching_values
from .math import not_equal


def _reduction(op_type, fn, doc, *, kinds=None, differentiable=True, bool_only=False):
    p = prim(op_type, fn, differentiable=differentiable)
    allowed = _KINDS[kinds]

    def op(input_tensor, axis=None, keepdims=False, name=None):
        tx = type(input_tensor)
        if (tx in _OPERANDS and (axis is None or type(axis) is int) and not bool_only
                and (allowed is None or input_tensor._meta.dtype.kind in allowed)):
            # the fast path: one Tensor, an int axis (bound into the jitted call), bind's record
            skey = () if axis is None and not keepdims else (("axis", axis), ("keepdims", bool(keepdims)))
            try:
                return bind1(p, p.fixed(skey), skey, input_tensor)
            except (TypeError, ValueError) as e:
                raise op_error(e, op_type) from e
        dispatch = OP_DISPATCH.get((op_type, tx))   # a composite tensor (ragged_math)
        if dispatch is not None:
            return dispatch(op, op_type, input_tensor, axis, keepdims)
        if input_tensor is None:
            raise ValueError(NONE_OPERAND)
        if kinds is not None:
            check_float(input_tensor, op_type, kinds, "input_tensor")
        if bool_only:
            d = dtype_of(input_tensor)
            if d is not None and d.kind != "b":
                raise InvalidArgumentError(None, None, f"{op_type}: argument `input_tensor` must be a "
                                           f"bool tensor; got {d.name} [Op:{op_type}]")
        ax = static_axis(axis)
        try:
            if axis is None and not keepdims:  # the fast path: no static parameters
                return bind(p, input_tensor)
            return bind(p, input_tensor, axis=ax, keepdims=bool(keepdims))
        except (TypeError, ValueError) as e:
            raise op_error(e, op_type) from e

    op.__doc__ = doc
    op._tf_types = (op_type,)
    return op


def _no_bool(op_type, fn, arg="input_tensor"):
    """``fn``, refusing a bool input as TF's kernels of ``op_type`` do (none is registered for
    bool).  The check runs where JAX traces ``fn`` (once per input signature), so it costs the
    op's calls nothing; its TypeError reaches the caller as TF's InvalidArgumentError
    (``op_error``)."""
    def impl(x, **kw):
        if x.dtype == jnp.bool_:
            raise TypeError(f"Value for attr 'T' of bool is not in the list of allowed values (argument "
                            f"`{arg}` of {op_type}): TF has no {op_type} kernel for bool tensors; "
                            "cast it first (tf.cast(x, tf.int32))")
        return fn(x, **kw)
    return impl


def _lowest(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).min


def _highest(dtype):
    return jnp.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).max


def _or_identity(fn, identity):
    """``fn``, giving a reduction over no elements ``identity(dtype)`` as TF's kernels do
    (``reduce_max`` of an empty tensor is -inf, or the integer dtype's minimum), where XLA's
    reductions refuse an empty operand.  The size is static: decided where JAX traces."""
    def impl(x, *, axis=None, keepdims=False):
        if x.size == 0:
            shape = jax.eval_shape(lambda y: jnp.sum(y, axis=axis, keepdims=keepdims), x).shape
            return jnp.full(shape, identity(x.dtype), x.dtype)
        return fn(x, axis=axis, keepdims=keepdims)
    return impl


def _max_or_min(is_max):
    def fn(x, *, axis=None, keepdims=False):   # (TF's gradient rule for floats, the values for every dtype)
        return (G.extreme if jnp.issubdtype(x.dtype, jnp.inexact) else G.extreme.fun)(x, axis, keepdims, is_max)
    return fn


def _sum(x, *, axis=None, keepdims=False, fn=jnp.sum):   # (integers keep their dtype, as TF: not int64 under x64)
    return fn(x, axis=axis, keepdims=keepdims, dtype=x.dtype if jnp.issubdtype(x.dtype, jnp.integer) else None)


def _mean(x, *, axis=None, keepdims=False):
    m = jnp.mean(x, axis=axis, keepdims=keepdims)
    return m.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.integer) else m


def _logsumexp(x, *, axis=None, keepdims=False):
    # TF's formula: the max is a constant (stop_gradient) and non-finite maxima are replaced by 0.
    raw = jnp.max(x, axis=axis, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(raw), raw, 0))
    r = jnp.log(jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else jnp.squeeze(r, axis=axis)


def _variance(x, *, axis=None, keepdims=False):
    mean = jnp.mean(x, axis=axis, keepdims=True)
    return jnp.mean(jnp.square(x - mean), axis=axis, keepdims=keepdims)


def _std(x, *, axis=None, keepdims=False):
    return G.sqrt(_variance(x, axis=axis, keepdims=keepdims))


def _euclidean(x, *, axis=None, keepdims=False):
    return G.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))


reduce_sum = _reduction("Sum", _no_bool("Sum", _sum), "``tf.reduce_sum``: sum over ``axis`` (all axes when None).")
reduce_mean = _reduction("Mean", _no_bool("Mean", _mean), "``tf.reduce_mean``: mean over ``axis`` (integer inputs give "
                         "an integer mean, as TF).")
reduce_max = _reduction("Max", _no_bool("Max", _or_identity(_max_or_min(True), _lowest)),
                        "``tf.reduce_max``: the gradient is split evenly among tied maxima, NaN where the maximum "
                        "is NaN (as TF).")
reduce_min = _reduction("Min", _no_bool("Min", _or_identity(_max_or_min(False), _highest)),
                        "``tf.reduce_min``: the gradient is split evenly among tied minima, NaN where the minimum "
                        "is NaN (as TF).")
reduce_prod = _reduction("Prod", _no_bool("Prod", functools.partial(_sum, fn=jnp.prod)),
                         "``tf.reduce_prod`` (its gradient is exact at zeros, as TF's).")
reduce_logsumexp = _reduction("ReduceLogSumExp", _or_identity(_logsumexp, _lowest),
                              "``tf.reduce_logsumexp``: log(sum(exp(x))) computed stably.", kinds="real")
reduce_variance = _reduction("ReduceVariance", _variance, "``tf.math.reduce_variance``.", kinds="float")
reduce_std = _reduction("ReduceStd", _std, "``tf.math.reduce_std``.", kinds="float")
reduce_euclidean_norm = _reduction("EuclideanNorm", _no_bool("EuclideanNorm", _euclidean),
                                   "``tf.math.reduce_euclidean_norm`` (its gradient at 0 is NaN, as TF).")
reduce_any = _reduction("Any", lambda x, *, axis=None, keepdims=False: jnp.any(x, axis=axis, keepdims=keepdims),
                        "``tf.reduce_any`` (bool).", differentiable=False, bool_only=True)
reduce_all = _reduction("All", lambda x, *, axis=None, keepdims=False: jnp.all(x, axis=axis, keepdims=keepdims),
                        "``tf.reduce_all`` (bool).", differentiable=False, bool_only=True)
for _n in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_logsumexp",
           "reduce_variance", "reduce_std", "reduce_euclidean_norm", "reduce_any", "reduce_all"):
    globals()[_n].__name__ = globals()[_n].__qualname__ = _n


def _reduce_std_dtype_check(fn):
    def op(input_tensor, axis=None, keepdims=False, name=None):
        d = dtype_of(input_tensor) if isinstance(input_tensor, (Tensor, Variable)) else None
        if d is not None and d.kind == "b":   # (TF: its Mean kernel refuses bool first)
            raise InvalidArgumentError(None, None, f"Value for attr 'T' of bool is not in the list of allowed "
                                       f"values: the number types (argument `input_tensor` of {fn.__name__}) "
                                       "[Op:Mean]")
        if d is not None and d.kind not in "fcV":
            raise TypeError(f"Input must be either real or complex. Received integer type "
                            f"{_dtypes.as_dtype(d)!r}.")
        return fn(input_tensor, axis, keepdims)
    op.__name__ = op.__qualname__ = fn.__name__
    op.__doc__ = fn.__doc__
    op._tf_types = fn._tf_types
    return op


reduce_variance = _reduce_std_dtype_check(reduce_variance)
reduce_std = _reduce_std_dtype_check(reduce_std)


def _count_nonzero(x, *, axis, keepdims, dtype):
    return jnp.sum(x != 0, axis=axis, keepdims=keepdims).astype(dtype)


_COUNT_NONZERO = prim("CountNonzero", _count_nonzero, differentiable=False)


@tf_types("CountNonzero")
def count_nonzero(input, axis=None, keepdims=None, dtype=_dtypes.int64, name=None):
    """``tf.math.count_nonzero``: int64 by default (int32 without JAX's x64 mode)."""
    store = _dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype")
    return bind(_COUNT_NONZERO, input, axis=static_axis(axis), keepdims=bool(keepdims), dtype=store.name)


def _arg(fn, skip):
    def impl(x, *, axis, dtype):
        if jnp.issubdtype(x.dtype, jnp.floating):   # TF's kernel passes over NaN (JAX picks it)
            x = jnp.where(jnp.isnan(x), jnp.asarray(skip, x.dtype), x)
        return fn(x, axis=axis).astype(dtype)
    return impl


_ARGMAX = prim("ArgMax", _arg(jnp.argmax, -np.inf), differentiable=False)
_ARGMIN = prim("ArgMin", _arg(jnp.argmin, np.inf), differentiable=False)


def _argminmax(p, op_type, input, axis, output_type):
    if axis is None:
        axis = 0
    store = _dtypes.storage_dtype(_dtypes.as_dtype(output_type)._np, "output_type")
    ax = static_axis(axis)
    if isinstance(ax, int):
        nd = len(_shape(input))
        if not -nd <= ax < nd:
            raise InvalidArgumentError(None, None, f"Expected dimension in the range [{-nd}, {nd}), but got {ax} "
                                       f"(argument `axis`) [Op:{op_type}]")
    try:
        return bind(p, input, axis=ax, dtype=store.name)
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


@tf_types("ArgMax")
def argmax(input, axis=None, output_type=_dtypes.int64, name=None):
    """``tf.math.argmax`` over ``axis`` (0 when None): int64 (int32 without x64); the lower index wins ties."""
    return _argminmax(_ARGMAX, "ArgMax", input, axis, output_type)


@tf_types("ArgMin")
def argmin(input, axis=None, output_type=_dtypes.int64, name=None):
    """``tf.math.argmin`` over ``axis`` (0 when None): int64 (int32 without x64); the lower index wins ties."""
    return _argminmax(_ARGMIN, "ArgMin", input, axis, output_type)


# -- scans ----------------------------------------------------------------------

def _scan(fn, identity):
    def impl(x, *, axis, exclusive, reverse):
        if reverse:
            x = jnp.flip(x, axis)
        y = fn(x, axis)
        if exclusive:
            pad = [(0, 0)] * x.ndim
            pad[axis] = (1, 0)
            y = jnp.pad(y, pad, constant_values=identity)
            y = jax.lax.slice_in_dim(y, 0, x.shape[axis], axis=axis)
        if reverse:
            y = jnp.flip(y, axis)
        return y
    return impl


def _cumlse(x, axis):
    return jax.lax.cumlogsumexp(x, axis=axis)


_CUMSUM = prim("Cumsum", _no_bool("Cumsum", _scan(lambda x, a: jnp.cumsum(x, axis=a), 0), "x"))
_CUMPROD = prim("Cumprod", _no_bool("Cumprod", _scan(lambda x, a: jnp.cumprod(x, axis=a), 1), "x"))
_CUMLSE = prim("CumulativeLogsumexp", _scan(_cumlse, -jnp.inf))


def _scan_op(p, op_type, x, axis, exclusive, reverse):
    ax = static_axis(axis)
    if ax is None:  # TF converts the axis to a Tensor
        raise ValueError("Attempt to convert a value (None) with an unsupported type (<class 'NoneType'>) "
                         "to a Tensor (argument `axis`).")
    if isinstance(ax, tuple):
        raise InvalidArgumentError(None, None, f"ScanOp: axis must be a scalar, not "
                                   f"{list(np.shape(getattr(axis, '_value', axis)))} (argument `axis`) "
                                   f"[Op:{op_type}]")
    nd = x.ndim if isinstance(x, (Tensor, Variable)) else np.ndim(x)
    if not -max(nd, 1) <= ax < max(nd, 1):
        raise InvalidArgumentError(None, None, f"ScanOp: Expected scan axis in the range "
                                   f"[{-max(nd, 1)}, {max(nd, 1)}), but got {ax} (argument `axis`) "
                                   f"[Op:{op_type}]")
    try:
        return bind(p, x, axis=ax % max(nd, 1), exclusive=bool(exclusive), reverse=bool(reverse))
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


@tf_types("Cumsum")
def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """``tf.math.cumsum``."""
    return _scan_op(_CUMSUM, "Cumsum", x, axis, exclusive, reverse)


@tf_types("Cumprod")
def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """``tf.math.cumprod``.  Its gradient is exact at zeros (TF's divides by ``x`` and gives 0 there:
    a deliberate difference)."""
    return _scan_op(_CUMPROD, "Cumprod", x, axis, exclusive, reverse)


@tf_types("CumulativeLogsumexp")
def cumulative_logsumexp(x, axis=0, exclusive=False, reverse=False, name=None):
    """``tf.math.cumulative_logsumexp``."""
    check_float(x, "CumulativeLogsumexp", "real")
    return _scan_op(_CUMLSE, "CumulativeLogsumexp", x, axis, exclusive, reverse)


# -- selection, clipping ----------------------------------------------------------

_SELECT = prim("SelectV2", lambda c, x, y: jnp.where(c, x, y))
_WHERE = prim("Where", lambda c, *, dtype: jnp.argwhere(c).astype(dtype), differentiable=False, jit=False)


@tf_types("SelectV2", "Where")
def where(condition, x=None, y=None, name=None):
    """``tf.where``: ``where(c, x, y)`` selects with broadcasting; ``where(c)`` gives the int64
    coordinates of true entries (int32 without x64; its shape depends on the values, so it reads
    them: eager only)."""
    if (x is None) != (y is None):
        raise ValueError("x and y must both be non-None or both be None.")
    if type(condition) is not Tensor or type(x) is not Tensor or type(y) is not Tensor:
        dispatch = (OP_DISPATCH.get(("SelectV2", type(condition))) or OP_DISPATCH.get(("SelectV2", type(x)))
                    or OP_DISPATCH.get(("SelectV2", type(y))))   # a composite tensor (ragged_math)
        if dispatch is not None:
            return dispatch(condition, x, y)
        if x is not None and y is not None:   # (a Python value takes the other's dtype, as TF's)
            x, y = matching_values([x, y])
    if x is None:
        store = _dtypes.storage_dtype(np.dtype(np.int64), "where")
        c = convert_to_tensor(condition)
        if c._meta.dtype.kind != "b":
            c = not_equal(c, 0)
        return bind(_WHERE, c, dtype=store.name)
    cd = dtype_of(condition)
    if cd is not None and cd.kind != "b":
        raise InvalidArgumentError(None, None, f"SelectV2: argument `condition` must be bool; got "
                                   f"{cd.name} [Op:SelectV2]")
    check_binary(x, y, "SelectV2")
    try:
        return bind(_SELECT, condition, x, y)
    except (TypeError, ValueError) as e:
        raise op_error(e, "SelectV2") from e


_CLIP = prim("ClipByValue", G.clip_by_value)


@tf_types("ClipByValue")
def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """``tf.clip_by_value``: the gradient passes at the bounds (inclusive, as TF); points below
    (above) the bound send their gradient to ``clip_value_min`` (``clip_value_max``).  An
    ``IndexedSlices`` stays one (its values clipped), as in TF."""
    if type(t) is IndexedSlices:
        return t._with_values(clip_by_value(t.values, clip_value_min, clip_value_max))
    dt = constant_dtype(t)
    if dt is not None:  # Python bounds as cached arrays (scalar_constant)
        if type(clip_value_min) in _PY_NUMBERS:
            clip_value_min = scalar_constant(clip_value_min, dt)
        if type(clip_value_max) in _PY_NUMBERS:
            clip_value_max = scalar_constant(clip_value_max, dt)
    check_binary(t, clip_value_min, "ClipByValue")
    check_binary(t, clip_value_max, "ClipByValue")
    try:
        return bind(_CLIP, t, clip_value_min, clip_value_max)
    except (TypeError, ValueError) as e:
        raise op_error(e, "ClipByValue") from e


def _clip_by_norm(t, clip_norm, *, axes):
    l2sum = jnp.sum(t * t, axis=axes, keepdims=True)
    pred = l2sum > 0
    l2sum_safe = jnp.where(pred, l2sum, jnp.ones_like(l2sum))
    l2norm = jnp.where(pred, G.sqrt(l2sum_safe), l2sum)
    inter = t * clip_norm
    return inter / G.maximum(l2norm, jnp.asarray(clip_norm, t.dtype))


_CLIP_NORM = prim("ClipByNorm", _clip_by_norm)


@tf_types("ClipByNorm")
def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``tf.clip_by_norm``: ``t * clip_norm / max(||t||, clip_norm)`` (TF's formula, finite at 0).
    An ``IndexedSlices`` stays one: its values clipped by their own norm, as in TF."""
    if type(t) is IndexedSlices:
        return t._with_values(clip_by_norm(t.values, clip_norm, axes))
    check_float(t, "ClipByNorm", "float", "t")
    return bind(_CLIP_NORM, t, clip_norm, axes=static_axis(axes))


def _clip_global(clip_norm, use_norm, *ts, given):
    if not given:
        use_norm = G.sqrt(sum(jnp.sum(jnp.square(t)) for t in ts))
    scale = clip_norm * G.minimum(1.0 / use_norm, 1.0 / clip_norm)   # a tie (norm == clip_norm): through the norm (TF)
    scale = jnp.where(jnp.isfinite(use_norm), scale, jnp.nan)
    return tuple((t * scale).astype(t.dtype) for t in ts) + (use_norm,)


_CLIP_GLOBAL = prim("ClipByGlobalNorm", _clip_global, multiple_results=True)


@tf_types("ClipByGlobalNorm")
def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """``tf.clip_by_global_norm``: ``(clipped list, global norm)``; a non-finite norm gives NaNs, None stays None."""
    if not isinstance(t_list, (list, tuple)):
        raise TypeError(f"`t_list` should be a sequence of tensors. Received {type(t_list)}.")
    live = [i for i, t in enumerate(t_list) if t is not None]
    ts = [_values_of(t_list[i]) for i in live]
    ts = check_same_dtypes(ts, "Pack") if use_norm is None else ts   # (TF stacks the norms: one dtype)
    dt = next((t.dtype for t in ts if isinstance(t, (Tensor, Variable))), _dtypes.float32)
    cn = convert_to_tensor(clip_norm, dtype_hint=dt)
    un = cn if use_norm is None else convert_to_tensor(use_norm, dtype_hint=dt)
    outs = bind(_CLIP_GLOBAL, cn, un, *ts, given=use_norm is not None)
    clipped: List[Any] = [None] * len(t_list)   # Tensors, IndexedSlices, None
    for i, o in zip(live, outs[:-1]):
        t = t_list[i]
        clipped[i] = t._with_values(o) if type(t) is IndexedSlices else o
    return clipped, outs[-1]


def _values_of(t):
    """A tensor, or an ``IndexedSlices``' values (TF's norms of gradients read only the values)."""
    return convert_to_tensor(t.values) if type(t) is IndexedSlices else t


@tf_types("GlobalNorm")
def global_norm(t_list, name=None):
    """``tf.linalg.global_norm``: ``sqrt(sum of the squared entries of every tensor)``; ``None``
    entries are skipped, an ``IndexedSlices`` counts its values (as TF)."""
    if not isinstance(t_list, (list, tuple)):
        raise TypeError(f"`t_list` should be a sequence of tensors. Received {type(t_list)}.")
    ts = check_same_dtypes([_values_of(t) for t in t_list if t is not None], "Pack")   # (TF stacks the norms)
    if not ts:
        raise ValueError("`t_list` holds no tensors (only None)")
    return bind(_GLOBAL_NORM, *ts)


def _global_norm(*ts):
    return G.sqrt(sum(jnp.sum(jnp.square(t.astype(ts[0].dtype))) for t in ts))


_GLOBAL_NORM = prim("GlobalNorm", _global_norm)


def _l2_normalize(x, *, axis, epsilon):
    sq = jnp.sum(jnp.square(x), axis=axis, keepdims=True)
    return x * G.rsqrt(G.maximum(sq, jnp.asarray(epsilon, sq.dtype)))   # (a tie: through ``sq``, as TF)


_L2_NORMALIZE = prim("L2Normalize", _l2_normalize)


@tf_types("L2Normalize")
def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None):
    """``tf.math.l2_normalize``: ``x / sqrt(max(sum(x**2), epsilon))`` over ``axis``."""
    axis = dim if axis is None else axis
    ax = static_axis(axis)
    nd = len(_shape(x))
    for a in (ax if isinstance(ax, tuple) else () if ax is None else (ax,)):
        if not -nd <= a < nd:
            raise InvalidArgumentError(None, None, f"Invalid reduction dimension ({a} for input with {nd} "
                                       f"dimension(s)) (argument `axis`) [Op:Sum]")
    return bind(_L2_NORMALIZE, x, axis=ax, epsilon=float(epsilon))


# -- top_k, segments, bincount ------------------------------------------------------

#: ``(values, indices)`` of ``top_k``: TF's namedtuple.
TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


def _top_k(x, *, k, dtype):
    v, i = jax.lax.top_k(x, k)
    return v, i.astype(dtype)


_TOP_K = prim("TopKV2", _top_k, multiple_results=True, pure_results=True)


@tf_types("TopKV2")
def top_k(input, k=1, sorted=True, index_type=_dtypes.int32, name=None):
    """``tf.math.top_k`` along the last axis: ``(values, indices)``; ties go to the lower index."""
    k = int(k)
    n = input.shape[-1] if isinstance(input, (Tensor, Variable)) else np.shape(input)[-1]
    if k > n or k < 0:
        raise InvalidArgumentError(None, None, f"input must have at least k columns. Had {n}, needed "
                                   f"{k} (argument `k`) [Op:TopKV2]")
    store = _dtypes.storage_dtype(_dtypes.as_dtype(index_type)._np, "index_type")
    return TopKV2(*bind(_TOP_K, input, k=k, dtype=store.name))


def _unsorted_segment_sum(data, ids, *, num_segments):   # (TF's ids: any prefix of data's shape; JAX's: 1-D)
    return jax.ops.segment_sum(data.reshape((ids.size,) + data.shape[ids.ndim:]), ids.reshape(-1), num_segments=num_segments)


_SEGMENT_SUM = prim("UnsortedSegmentSum", _unsorted_segment_sum)


def _seg_ids_check(data, segment_ids, op_type):
    ids = convert_to_tensor(segment_ids)
    if ids._meta.dtype.kind not in "iu":
        raise InvalidArgumentError(None, None, f"{op_type}: argument `segment_ids` must be an integer "
                                   f"tensor; got {ids.dtype.name} [Op:{op_type}]")
    dshape = tuple(data.shape) if isinstance(data, (Tensor, Variable)) else np.shape(data)
    if tuple(ids.shape) != tuple(dshape[:ids.ndim]):
        raise InvalidArgumentError(None, None, f"{op_type}: `segment_ids` shape {tuple(ids.shape)} must be "
                                   f"a prefix of `data` shape {tuple(dshape)} [Op:{op_type}]")
    return ids


@tf_types("UnsortedSegmentSum")
def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_sum``: out[i] = sum of data[j] with segment_ids[j] == i."""
    ids = _seg_ids_check(data, segment_ids, "UnsortedSegmentSum")
    n = int(num_segments)
    if VALUE_CHECKS[0]:   # opt-in: TF's CPU kernel rejects an id >= num_segments (JAX drops it)
        require_in_range(ids._value, n, "segment_ids", f"is out of range [0, {n})", "UnsortedSegmentSum",
                         negative_ok=True)   # (TF drops negative ids, as JAX does)
    return bind(_SEGMENT_SUM, data, ids, num_segments=n)


@tf_types("UnsortedSegmentSum")
def segment_sum(data, segment_ids, name=None):
    """``tf.math.segment_sum`` (sorted ids; the segment count is read from the last id: eager only)."""
    v = np.asarray((ids := _seg_ids_check(data, segment_ids, "SegmentSum"))._value).reshape(-1)
    if v.size and np.any(np.diff(v) < 0):   # (TF's kernel checks, as segment.py's segment_* ops)
        raise InvalidArgumentError(None, None, "segment ids are not increasing [Op:SegmentSum]")
    return bind(_SEGMENT_SUM, data, ids, num_segments=int(v[-1]) + 1 if v.size else 0)


def _bincount(arr, *weights, length, dtype, per_row=False, binary=False):
    w = weights[0] if weights else None
    if per_row:  # rank 2, axis=-1: one histogram per row
        if w is None:
            out = jax.vmap(lambda a: jnp.bincount(a, length=length))(arr)
        else:
            out = jax.vmap(lambda a, b: jnp.bincount(a, b, length=length))(arr, w)
    else:
        out = jnp.bincount(arr.reshape(-1), None if w is None else w.reshape(-1), length=length)
    if binary:
        out = out > 0
    return out.astype(dtype)


_BINCOUNT = prim("Bincount", _bincount, differentiable=False)


@tf_types("Bincount")
def bincount(arr, weights=None, minlength=None, maxlength=None, dtype=_dtypes.int32, name=None,
             axis=None, binary_output=False):
    """``tf.math.bincount`` of a non-negative int tensor (TF gives it no gradient): flattened
    (``axis`` None or 0), or one histogram per row of a rank-2 ``arr`` (``axis=-1``);
    ``binary_output`` gives 1 where a value occurs.  The output length is ``max(arr) + 1`` (read
    from the values: eager only) clipped to ``[minlength, maxlength]``; larger values are dropped.
    ``minlength >= maxlength`` gives ``maxlength`` (also in a compiled step: ``minlength=C, maxlength=C``)."""
    if axis not in (None, 0, -1):
        raise ValueError(f"Unsupported value for argument axis={axis}. Only 0 and -1 are currently "
                         "supported.")
    if binary_output and weights is not None:
        raise ValueError("Arguments `binary_output` and `weights` are mutually exclusive. Please "
                         "specify only one.")
    a = convert_to_tensor(arr)
    per_row = axis == -1 and a._meta.ndim > 1
    if per_row and a._meta.ndim > 2:
        raise InvalidArgumentError(None, None, f"Shape must be at most rank 2 but is rank "
                                   f"{a._meta.ndim} (argument `arr` with axis=-1) [Op:DenseBincount]")
    fixed = maxlength if minlength is not None and maxlength is not None and minlength >= maxlength else None
    if fixed is not None and isinstance(a._value, jax.core.Tracer):   # (TF's run-time size, known here)
        require(jnp.all(a._value >= 0), "Input arr must be non-negative! [Op:DenseBincount]")
        n = int(fixed)
    else:
        host = np.asarray(a._value)
        if host.size and host.min() < 0:
            raise InvalidArgumentError(None, None, f"Input arr must be non-negative! Got {int(host.min())} "
                                       "in argument `arr` [Op:DenseBincount]")
        n = max(int(host.max()) + 1 if host.size else 0, -1 if minlength is None else int(minlength))
        n = n if maxlength is None else min(n, int(maxlength))
    flags = {k: True for k, v in (("per_row", per_row), ("binary", bool(binary_output))) if v}
    if weights is not None:
        w = convert_to_tensor(weights)
        store = np.dtype(w._meta.dtype)
        return bind(_BINCOUNT, a, w, length=n, dtype=store.name, **flags)
    store = _dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype")
    return bind(_BINCOUNT, a, length=n, dtype=store.name, **flags)


__all__ = [
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_logsumexp", "reduce_variance",
    "reduce_std", "reduce_euclidean_norm", "reduce_any", "reduce_all", "count_nonzero", "argmax", "argmin",
    "cumsum", "cumprod", "cumulative_logsumexp", "where", "clip_by_value", "clip_by_norm", "clip_by_global_norm",
    "global_norm",
    "l2_normalize", "top_k", "unsorted_segment_sum", "segment_sum", "bincount",
]
