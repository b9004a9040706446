"""Helpers that turn rows of op tables into registered primitives and TF-named functions.

An op family module declares its ops as data (TF type name, public name,
pure JAX function) and calls ``unary_ops`` / ``binary_ops``; the functions
they make all go through ``_primitives.bind``.
"""
import numpy as np

from .. import _dtypes
from .._primitives import bind, define
from .._tensor import Tensor
from .._variable import Variable
from .._errors import InvalidArgumentError

_TENSORISH = (Tensor, Variable)


def dtype_of(x):
    """NumPy dtype of a Tensor/Variable; None for Python data."""
    if isinstance(x, _TENSORISH):
        return np.dtype(x._value.dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return None


def check_binary(x, y, op_type):
    """TF's dtype rule for elementwise binary ops: both tensors share one dtype;
    a Python number takes the tensor's dtype (a float into an int tensor is a TypeError)."""
    dx = dtype_of(x) if isinstance(x, _TENSORISH) else None
    dy = dtype_of(y) if isinstance(y, _TENSORISH) else None
    if dx is not None and dy is not None:
        if dx != dy:
            raise InvalidArgumentError(
                None, None, f"cannot compute {op_type} as input #1(zero-based) was expected to be a "
                f"{dx.name} tensor but is a {dy.name} tensor [Op:{op_type}]")
        return
    d, other = (dx, y) if dx is not None else (dy, x)
    if d is not None and d.kind in "iub" and isinstance(other, float) and not float(other).is_integer():
        raise TypeError(f"Cannot convert {other!r} to EagerTensor of dtype {d.name}")


def unary_ops(namespace, table):
    """``table``: rows (public name, TF type, jax fn[, differentiable]). Defines each in ``namespace``."""
    for row in table:
        name, op_type, fn = row[:3]
        differentiable = row[3] if len(row) > 3 else True
        prim = define(op_type, fn, differentiable=differentiable)

        def op(x, name=None, _prim=prim):
            return bind(_prim, x)

        op.__name__ = op.__qualname__ = name
        op.__doc__ = f"``tf.{name}`` (TF op type ``{op_type}``), elementwise."
        namespace[name] = op


def binary_ops(namespace, table):
    """``table``: rows (public name, TF type, jax fn[, differentiable])."""
    for row in table:
        name, op_type, fn = row[:3]
        differentiable = row[3] if len(row) > 3 else True
        prim = define(op_type, fn, differentiable=differentiable)

        def op(x, y, name=None, _prim=prim, _t=op_type):
            check_binary(x, y, _t)
            return bind(_prim, x, y)

        op.__name__ = op.__qualname__ = name
        op.__doc__ = f"``tf.{name}`` (TF op type ``{op_type}``), elementwise with broadcasting."
        namespace[name] = op


def static_axis(axis):
    """An axis argument as a hashable static value (None, int or tuple of ints)."""
    if axis is None:
        return None
    if isinstance(axis, _TENSORISH):
        axis = np.asarray(axis._value).tolist()
    if isinstance(axis, (list, tuple, np.ndarray)):
        return tuple(int(a) for a in np.asarray(axis).reshape(-1))
    return int(axis)


def static_shape(shape):
    if isinstance(shape, _TENSORISH):
        shape = np.asarray(shape._value).tolist()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def static_dtype(dtype):
    return _dtypes.as_dtype(dtype).name
