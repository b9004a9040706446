"""``tf.distribute.ReduceOp`` and the reductions of ``Strategy.reduce``.

A value here is the global value of one SPMD program (see the package's README): ``strategy.run``
gives the values its function computed on the whole global batch.  So a reduction across the
replicas leaves a value as it is, and a reduction along ``axis`` is that reduction of the
global value (TF reduces each replica's tensor along ``axis`` and then across the replicas:
the same numbers).
"""
import enum
from typing import Any

from ..core import nest
from ..core.convert import convert_to_tensor
from ..ops.math import cast, identity, truediv
from ..ops.reduce import reduce_sum
from ..ops.utilities import VariableAggregation

__all__ = ["ReduceOp", "across_replicas", "along_axis", "as_reduce_op"]


class ReduceOp(enum.Enum):
    """``tf.distribute.ReduceOp``: how a set of values is reduced (``SUM`` adds them, ``MEAN``
    averages them)."""

    SUM = "SUM"
    MEAN = "MEAN"

    @staticmethod
    def from_variable_aggregation(aggregation) -> "ReduceOp":
        """The ``ReduceOp`` of a ``tf.VariableAggregation`` (``SUM`` or ``MEAN``; ValueError for
        the others, as TF)."""
        mapping = {VariableAggregation.SUM: ReduceOp.SUM, VariableAggregation.MEAN: ReduceOp.MEAN}
        op = mapping.get(aggregation)
        if op is None:
            raise ValueError(f"Could not convert from `tf.VariableAggregation` {aggregation} to"
                             "`tf.distribute.ReduceOp` type")
        return op


def as_reduce_op(reduce_op: Any) -> ReduceOp:
    """``reduce_op`` as a ``ReduceOp``: a string names one in any case (``"sum"``), as TF's
    (ValueError ``'MAX' is not a valid ReduceOp`` otherwise); anything else is a TypeError."""
    if isinstance(reduce_op, ReduceOp):
        return reduce_op
    if isinstance(reduce_op, str):
        return ReduceOp(reduce_op.upper())
    raise TypeError(f"Expected `reduce_op` to be a `tf.distribute.ReduceOp`, not: {reduce_op!r}")


def across_replicas(value: Any, as_tensors: bool) -> Any:
    """``value`` reduced across the replicas (``axis=None``): the value itself, each leaf as a
    Tensor when ``as_tensors`` (a strategy's reduction returns Tensors on its device, as TF's
    ``MirroredStrategy`` does; the default strategy returns what it was given)."""
    if not as_tensors:
        return value
    return nest.map_structure(lambda v: v if v is None else identity(convert_to_tensor(v)), value)


def _axis_size(shape: tuple, axis: Any) -> int:
    rank = len(shape)
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"Expected `axis` to be an integer, tuple or list not: {axis!r}")
    if axis < -rank or axis >= rank:
        raise ValueError(f"`axis` = {axis!r} out of range for `value` with rank {rank}")
    return int(shape[axis])


def along_axis(op: ReduceOp, value: Any, axis: Any) -> Any:
    """``Strategy.reduce(op, value, axis)`` for an ``axis``: the sum along it, or TF's mean (the
    sum divided by the number of entries reduced, cast to the sum's dtype)."""
    t = convert_to_tensor(value)
    total = reduce_sum(t, axis=axis)   # (TF reduces first: its errors for a bad axis come from here)
    if op is ReduceOp.SUM:
        return total
    shape = tuple(t.shape)
    if isinstance(axis, (tuple, list)):
        count = 1
        for a in axis:
            count *= _axis_size(shape, a)
    else:
        count = _axis_size(shape, axis)
    return truediv(total, cast(count, total.dtype))
