"""The ops TF dispatches on ``tf.RaggedTensor``: elementwise math, reductions, ``tf.gather``,
``tf.concat``, ``tf.shape``, ``tf.cast`` / ``tf.identity`` and the Python operators.

Each is registered in ``ops._registry``'s dispatch tables (``UNARY_DISPATCH``,
``BINARY_DISPATCH``, ``OP_DISPATCH``), which the ops consult only when an argument is no Tensor,
so there is one op path: a ragged op is the dense op applied to ``flat_values`` (recorded as
usual) plus partition bookkeeping.

* Unary elementwise ops map ``flat_values`` (TF dispatches every one of them).
* Binary elementwise ops, TF's rules: two RaggedTensors must have the same row partitions (equal
  ``nested_row_splits``, checked on the host when both are concrete: ``InvalidArgumentError``
  otherwise); a dense operand broadcasts to the ragged shape when it is a scalar, touches only
  the uniform inner dimensions, or has size 1 (or ``nrows``) in the outer dimension and 1 in the
  ragged ones (it is gathered at each value's row: its gradient is TF's, a segment sum).
* Reductions (``reduce_sum / mean / max / min / prod / any / all``; ``reduce_variance / std`` as
  the mean of squared deviations, over all axes or the ragged axis of ragged_rank 1) over ``axis=None``, the
  innermost ragged axis (one segment reduction over ``row_splits``: static, traces), uniform inner
  axes, and axis 0 of a ``ragged_rank`` 1 tensor (columns: read on the host).  An empty row gives
  TF's identity: 0, 1, the dtype's lowest / highest *finite* value for max / min, NaN for mean
  (``sum / count``, as TF's).  Other axes of deeper ragged tensors raise ``NotImplementedError``.
* ``tf.shape`` of a RaggedTensor is a *documented difference*: TF 2.21 returns a
  ``DynamicRaggedShape``; tapejax returns the bounding shape (an int32 Tensor, ``[nrows, longest
  row, inner dims]``, read on the host), whose ``[0]`` and inner entries are TF's.
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import math as _m, ragged_partition as _rp
from ._registry import BINARY_DISPATCH, OP_DISPATCH, UNARY_DISPATCH
from .indexing import gather
from .ragged_dense import gather_rows, host_tensor
from .ragged_tensor import FLATTEN, GATHER, OPERATORS, RaggedTensor
from .reduce import reduce_mean, reduce_sum, where


def _segment_reduce(values, splits, *, kind, nrows):
    ids = _rp._splits_to_rowids(splits, n=values.shape[0])
    if kind == "any":
        return jax.ops.segment_sum(values.astype(jnp.int32), ids, nrows, indices_are_sorted=True) > 0
    if kind == "all":
        return jax.ops.segment_sum((~values).astype(jnp.int32), ids, nrows, indices_are_sorted=True) == 0
    fn = {"sum": jax.ops.segment_sum, "max": jax.ops.segment_max, "min": jax.ops.segment_min,
          "prod": jax.ops.segment_prod}[kind]
    out = fn(values, ids, nrows, indices_are_sorted=True)
    if kind in ("max", "min") and jnp.issubdtype(values.dtype, jnp.floating):   # TF: lowest / highest finite
        empty = (splits[1:] == splits[:-1]).reshape((nrows,) + (1,) * (values.ndim - 1))
        info = jnp.finfo(values.dtype)
        out = jnp.where(empty, info.min if kind == "max" else info.max, out)
    return out


SEGMENT_REDUCE = define("RaggedSegmentReduce", _segment_reduce)
COLUMN_REDUCE = define("RaggedColumnReduce",
                       lambda values, cols, *, kind, n: {"sum": jax.ops.segment_sum, "max": jax.ops.segment_max,
                                                         "min": jax.ops.segment_min, "prod": jax.ops.segment_prod}[
                                                             kind](values, cols, n))

_KIND = {"Sum": "sum", "Max": "max", "Min": "min", "Prod": "prod", "Any": "any", "All": "all"}


# -- elementwise --------------------------------------------------------------------------------
def _unary(op: Any, op_type: str, rt: RaggedTensor) -> RaggedTensor:
    return rt.with_flat_values(op(rt.flat_values))


def same_partitions(a: RaggedTensor, b: RaggedTensor, what: str) -> None:
    """TF's check that two RaggedTensors share their row partitions (on the host when concrete)."""
    sa, sb = a.nested_row_splits, b.nested_row_splits
    if len(sa) != len(sb):
        raise ValueError(f"{what}: the RaggedTensors have different ragged ranks ({len(sa)} and {len(sb)})")
    for x, y in zip(sa, sb):
        if x is y:
            continue
        if x.shape[0] != y.shape[0]:
            raise InvalidArgumentError(None, None, f"{what}: Inputs must have identical ragged splits: "
                                       f"{x.shape[0] - 1} rows vs. {y.shape[0] - 1} rows")
        try:
            hx, hy = _rp.host_splits(x, what), _rp.host_splits(y, what)
        except _rp.TracedRaggedError:
            continue   # (inside a trace, as TF's XLA kernels: unchecked)
        if not np.array_equal(hx, hy):
            raise InvalidArgumentError(None, None, f"{what}: Inputs must have identical ragged splits; got "
                                       f"row_splits {hx.tolist()} vs. {hy.tolist()}")


def _value_rows(rt: RaggedTensor) -> Tensor:
    """The outermost row of each flat value (composed through the ragged levels)."""
    ids = rt.value_rowids()
    inner: Any = rt._values
    while isinstance(inner, RaggedTensor):
        ids = bind(GATHER, ids, inner.value_rowids())
        inner = inner._values
    return ids


def _dense_on_values(rt: RaggedTensor, dense: Tensor, what: str) -> Tensor:
    """``dense`` broadcast to ``rt``'s shape and read at its flat values (TF's ragged broadcasting
    of a dense operand), or TF's error."""
    inner = tuple(rt.flat_values.shape[1:])
    if dense.ndim <= len(inner):
        return dense   # (only the uniform inner dimensions: plain broadcasting)
    ndim = rt.ndim
    if dense.ndim > ndim:
        raise ValueError(f"{what}: the dense operand's rank {dense.ndim} is larger than the RaggedTensor's ({ndim})")
    shape = (1,) * (ndim - dense.ndim) + tuple(dense.shape)
    rows, ragged_dims, rest = shape[0], shape[1:1 + rt.ragged_rank], shape[1 + rt.ragged_rank:]
    if rows not in (1, rt.nrows_static) or any(d != 1 for d in ragged_dims):
        raise InvalidArgumentError(None, None, f"{what}: Incompatible shapes: the dense operand of shape "
                                   f"{list(dense.shape)} does not broadcast to the RaggedTensor's shape "
                                   f"{list(rt.shape)} (its outer dimension must be 1 or {rt.nrows_static} and its "
                                   "ragged dimensions 1)")
    per_row = bind(FLATTEN, dense, shape=(rows,) + rest)
    if rows == 1:
        return bind(FLATTEN, per_row, shape=rest) if rest else bind(FLATTEN, per_row, shape=())
    return bind(GATHER, per_row, _value_rows(rt))


def _binary(op: Any, op_type: str, x: Any, y: Any) -> RaggedTensor:
    what = f"tf.{getattr(op, '__name__', op_type)} ({op_type})"
    if isinstance(x, RaggedTensor) and isinstance(y, RaggedTensor):
        same_partitions(x, y, what)
        return x.with_flat_values(op(x.flat_values, y.flat_values))
    rt = x if isinstance(x, RaggedTensor) else y
    other = y if rt is x else x
    dense = other if isinstance(other, Tensor) else convert_to_tensor(
        other, dtype=rt.dtype if isinstance(other, (int, float, bool)) else None)
    d = _dense_on_values(rt, dense, what)
    return rt.with_flat_values(op(rt.flat_values, d) if rt is x else op(d, rt.flat_values))


# -- reductions ---------------------------------------------------------------------------------
def _axes(axis: Any, ndim: int, name: str) -> Any:
    if axis is None:
        return None
    if isinstance(axis, Tensor):
        axis = np.asarray(axis.numpy()).tolist()
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"axis={a} out of bounds: expected {-ndim}<=axis<{ndim} (argument `axis` of {name})")
        out.append(a % ndim)
    return sorted(set(out), reverse=True)


def _innermost(rt: RaggedTensor, fn: Any) -> Any:
    """``rt`` with its innermost ragged level replaced by ``fn(level)`` (a Tensor)."""
    if isinstance(rt._values, RaggedTensor):
        return rt.with_values(_innermost(rt._values, fn))
    return fn(rt)


def _reduce_axis(op: Any, op_type: str, rt: RaggedTensor, a: int, keepdims: bool) -> Any:
    k, name = rt.ragged_rank, f"tf.{getattr(op, '__name__', op_type)}"
    if a > k:
        return rt.with_flat_values(op(rt.flat_values, axis=a - k, keepdims=keepdims))
    kind = _KIND[op_type]
    if a == k:
        def level(r: RaggedTensor) -> Tensor:
            out = bind(SEGMENT_REDUCE, r._values, r._row_splits, kind=kind, nrows=r.nrows_static)
            return bind(FLATTEN, out, shape=(out.shape[0], 1) + tuple(out.shape[1:])) if keepdims else out
        return _innermost(rt, level)
    if a == 0 and k == 1:
        s = _rp.host_splits(rt._row_splits, name)
        lens = np.diff(s)
        cols = np.arange(int(s[-1])) - np.repeat(s[:-1], lens)
        width = int(lens.max()) if lens.size else 0
        out = bind(COLUMN_REDUCE, rt._values, host_tensor(cols.astype(np.int64)), kind=kind, n=width)
        return bind(FLATTEN, out, shape=(1,) + tuple(out.shape)) if keepdims else out
    raise NotImplementedError(f"{name} of a RaggedTensor with ragged_rank {k} over axis {a}: tapejax reduces a "
                              "RaggedTensor over axis=None, its innermost ragged axis, its uniform inner axes and "
                              "(ragged_rank 1) axis 0")


def _reduce(op: Any, op_type: str, rt: RaggedTensor, axis: Any, keepdims: bool) -> Any:
    name = f"tf.{getattr(op, '__name__', op_type)}"
    axes = _axes(axis, rt.ndim, name)
    if op_type == "Mean":
        total = _reduce(reduce_sum, "Sum", rt, axis, keepdims)
        ones = rt.with_flat_values(bind(_ONES, rt.flat_values))
        return _m.divide(total, _reduce(reduce_sum, "Sum", ones, axis, keepdims))
    if op_type in ("ReduceVariance", "ReduceStd"):   # TF's: the mean of squared deviations from the mean
        mean = _reduce(reduce_mean, "Mean", rt, axis, True)
        if isinstance(mean, RaggedTensor) or (axes is not None and 0 in axes and len(axes) < rt.ndim):
            raise NotImplementedError(f"{name} of a RaggedTensor over axis {axis}: tapejax computes ragged "
                                      "variances over axis=None, the ragged axis of ragged_rank 1 and the inner axes")
        dev = _binary(_m.subtract, "Sub", rt, mean)
        var = _reduce(reduce_mean, "Mean", _unary(_m.square, "Square", dev), axis, keepdims)
        return var if op_type == "ReduceVariance" else _m.sqrt(var)
    if op_type not in _KIND:
        raise NotImplementedError(f"{name} of a RaggedTensor: tapejax's ragged reductions are reduce_sum, "
                                  "reduce_mean, reduce_max, reduce_min, reduce_prod, reduce_any and reduce_all")
    if axes is None or len(axes) == rt.ndim:
        out = op(rt.flat_values)
        return bind(FLATTEN, out, shape=(1,) * rt.ndim) if keepdims else out
    out: Any = rt
    for a in axes:
        if not isinstance(out, RaggedTensor):
            out = op(out, axis=a, keepdims=keepdims)
        else:
            out = _reduce_axis(op, op_type, out, a, keepdims)
    return out


_ONES = define("RaggedOnesLike", lambda x: jnp.ones_like(x), differentiable=False)


# -- other dispatched ops ---------------------------------------------------------------------
def _gather(params: Any, indices: Any, axis: Any = None, batch_dims: int = 0) -> Any:
    if batch_dims != 0 or axis not in (None, 0):
        raise NotImplementedError("tf.gather of RaggedTensors: tapejax gathers along axis 0 with batch_dims=0")
    if isinstance(indices, RaggedTensor):
        if isinstance(params, RaggedTensor):
            raise NotImplementedError("tf.gather with RaggedTensor params and RaggedTensor indices")
        return indices.with_flat_values(gather(params, indices.flat_values))
    idx_t = indices if isinstance(indices, Tensor) else convert_to_tensor(indices)
    if not idx_t.dtype.is_integer:
        raise TypeError(f"Value passed to parameter 'indices' has DataType {idx_t.dtype.name} not in list of allowed "
                        "values: int16, int32, int64")
    idx = _rp.host_splits(idx_t, "tf.gather of RaggedTensor rows")
    n = params.nrows_static
    bad = np.nonzero((idx < 0) | (idx >= n))[0] if idx.ndim else np.nonzero([idx < 0 or idx >= n])[0]
    if bad.size:
        flat = idx.reshape(-1)
        raise InvalidArgumentError(None, None, f"indices[{int(bad[0])}] = {int(flat[int(bad[0])])} is not in "
                                   f"[0, {n}) (argument `indices` of tf.gather)")
    if idx.ndim == 0:
        return params[int(idx)]
    if idx.ndim != 1:
        raise NotImplementedError("tf.gather of RaggedTensor rows: tapejax takes scalar or vector indices")
    return gather_rows(params, idx)


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``tf.where(c, x, y)`` with RaggedTensors: each ragged argument (same partitions) read at its
    flat values, dense ones broadcast to them as the binary ops do; ``tf.where(c)`` of a ragged
    condition is not built."""
    if x is None:
        raise NotImplementedError("tf.where(condition) of a RaggedTensor (its coordinates): tapejax selects with "
                                  "tf.where(condition, x, y) only")
    rts = [a for a in (condition, x, y) if isinstance(a, RaggedTensor)]
    for other in rts[1:]:
        same_partitions(rts[0], other, "tf.where (SelectV2)")
    first = rts[0]
    dtype = next((a.dtype for a in (x, y) if isinstance(a, (RaggedTensor, Tensor))), None)

    def flat(a: Any, is_value: bool) -> Any:
        if isinstance(a, RaggedTensor):
            return a.flat_values
        t = a if isinstance(a, Tensor) else convert_to_tensor(a, dtype=dtype if is_value else None)
        return _dense_on_values(first, t, "tf.where (SelectV2)")
    return first.with_flat_values(where(flat(condition, False), flat(x, True), flat(y, True)))


def _shape(rt: RaggedTensor, out_type: Any = None) -> Tensor:
    dims = rt.host_bounding_shape("tf.shape")
    return convert_to_tensor(np.asarray(dims, np.int64), dtype=_dtypes.int32 if out_type is None else out_type)


def _cast(rt: RaggedTensor, dtype: Any) -> RaggedTensor:
    return rt.with_flat_values(_m.cast(rt.flat_values, dtype))


def _identity(rt: RaggedTensor) -> RaggedTensor:
    return rt.with_flat_values(_m.identity(rt.flat_values))


UNARY_DISPATCH[RaggedTensor] = _unary
BINARY_DISPATCH[RaggedTensor] = _binary
OP_DISPATCH.update({("GatherV2", RaggedTensor): _gather, ("Shape", RaggedTensor): _shape,
                    ("Cast", RaggedTensor): _cast, ("SelectV2", RaggedTensor): _where,
                    ("Identity", RaggedTensor): _identity})
for _t in ("Sum", "Mean", "Max", "Min", "Prod", "Any", "All", "ReduceLogSumExp", "ReduceVariance", "ReduceStd",
           "EuclideanNorm"):
    OP_DISPATCH[(_t, RaggedTensor)] = _reduce


def _py(fn: Any, op_type: str, swap: bool = False) -> Any:
    if swap:
        return lambda self, other: _binary(fn, op_type, convert_to_tensor(other, dtype=self.dtype)
                                           if isinstance(other, (int, float, bool)) else other, self)
    return lambda self, other: _binary(fn, op_type, self, other)


OPERATORS.update({
    "__add__": _py(_m.add, "AddV2"), "__radd__": _py(_m.add, "AddV2", True),
    "__sub__": _py(_m.subtract, "Sub"), "__rsub__": _py(_m.subtract, "Sub", True),
    "__mul__": _py(_m.multiply, "Mul"), "__rmul__": _py(_m.multiply, "Mul", True),
    "__truediv__": _py(_m.divide, "RealDiv"), "__rtruediv__": _py(_m.divide, "RealDiv", True),
    "__floordiv__": _py(_m.floordiv, "FloorDiv"), "__rfloordiv__": _py(_m.floordiv, "FloorDiv", True),
    "__mod__": _py(_m.floormod, "FloorMod"), "__rmod__": _py(_m.floormod, "FloorMod", True),
    "__pow__": _py(_m.pow, "Pow"), "__rpow__": _py(_m.pow, "Pow", True),
    "__and__": _py(_m.logical_and, "LogicalAnd"), "__rand__": _py(_m.logical_and, "LogicalAnd", True),
    "__or__": _py(_m.logical_or, "LogicalOr"), "__ror__": _py(_m.logical_or, "LogicalOr", True),
    "__lt__": _py(_m.less, "Less"), "__le__": _py(_m.less_equal, "LessEqual"),
    "__gt__": _py(_m.greater, "Greater"), "__ge__": _py(_m.greater_equal, "GreaterEqual"),
    "__eq__": _py(_m.equal, "Equal"), "__ne__": _py(_m.not_equal, "NotEqual"),
    "__neg__": lambda self: _unary(_m.negative, "Neg", self), "__abs__": lambda self: _unary(_m.abs, "Abs", self),
    "__invert__": lambda self: _unary(_m.logical_not, "LogicalNot", self),
})

__all__ = ["COLUMN_REDUCE", "SEGMENT_REDUCE", "same_partitions"]
