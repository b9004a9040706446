"""``tf.bitwise``: bitwise ops on integer tensors (TF gives them no gradient), and the Tensor
operators ``&``, ``|``, ``^``, ``~``, which are TF's logical ops on bool tensors and these on
integer ones (``math_ops``' operator overloads)."""
import jax.numpy as jnp

from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor, register_operators
from ..core.variable import Variable
from ._binary import binary_ops
from ._registry import dtype_of, unary_ops
from .math import logical_and, logical_not, logical_or, logical_xor


def _int_only(fn, op_type):
    def op(x, y=None, name=None, _fn=fn):
        for arg, v in (("x", x), ("y", y)):
            d = dtype_of(v)
            if d is not None and d.kind not in "iu":
                raise InvalidArgumentError(None, None, f"Value for attr 'T' of {d.name} is not in the list of allowed "
                                           f"values: int8, int16, int32, int64, uint8, uint16, uint32, uint64 "
                                           f"(argument `{arg}` of {op_type})")
        return _fn(x) if y is None else _fn(x, y)
    return op


_ns: dict = {}
binary_ops(_ns, [
    ("bitwise_and", "BitwiseAnd", jnp.bitwise_and, False),
    ("bitwise_or", "BitwiseOr", jnp.bitwise_or, False),
    ("bitwise_xor", "BitwiseXor", jnp.bitwise_xor, False),
    ("left_shift", "LeftShift", jnp.left_shift, False),
    ("right_shift", "RightShift", jnp.right_shift, False),   # arithmetic for signed, logical for unsigned
])
unary_ops(_ns, [("invert", "Invert", jnp.invert, False)])


def _checked(name, op_type):
    fn = _int_only(_ns[name], op_type)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``tf.bitwise.{name}`` (TF op type ``{op_type}``): integer tensors only."
    fn._tf_types = (op_type,)
    return fn


bitwise_and = _checked("bitwise_and", "BitwiseAnd")
bitwise_or = _checked("bitwise_or", "BitwiseOr")
bitwise_xor = _checked("bitwise_xor", "BitwiseXor")
left_shift = _checked("left_shift", "LeftShift")
right_shift = _checked("right_shift", "RightShift")
invert = _checked("invert", "Invert")


def _is_bool(x, y=None):
    d = dtype_of(x)
    if d is None and y is not None:
        d = dtype_of(y)
    return d is None or d.kind == "b"


def _dispatch(logical, bitwise):
    def op(x, y):
        return logical(x, y) if _is_bool(x, y) else bitwise(x, y)
    return op


def _swap(fn):
    return lambda a, b: fn(b, a)


def _invert_op(x):
    return logical_not(x) if _is_bool(x) else invert(x)


_and, _or, _xor = (_dispatch(logical_and, bitwise_and), _dispatch(logical_or, bitwise_or),
                   _dispatch(logical_xor, bitwise_xor))
_OPERATORS = {"__and__": _and, "__rand__": _swap(_and), "__or__": _or, "__ror__": _swap(_or),
              "__xor__": _xor, "__rxor__": _swap(_xor), "__invert__": _invert_op}
register_operators(Tensor, _OPERATORS)
register_operators(Variable, _OPERATORS)

__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift"]
