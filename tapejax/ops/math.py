"""Math ops (``tf.math``), declared as table rows; operators are installed here too."""
import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtypes
from .._primitives import bind, define
from .._tensor import Tensor
from .._variable import Variable
from ._registry import binary_ops, check_binary, dtype_of, static_axis, unary_ops


def _truediv(x, y):
    return jnp.true_divide(x, y)


def _floormod(x, y):
    return jnp.mod(x, y)


_UNARY = [
    ("negative", "Neg", jnp.negative),
    ("square", "Square", jnp.square),
    ("sqrt", "Sqrt", jnp.sqrt),
    ("exp", "Exp", jnp.exp),
    ("log", "Log", jnp.log),
    ("tanh", "Tanh", jnp.tanh),
    ("sigmoid", "Sigmoid", jax.nn.sigmoid),
    ("abs", "Abs", jnp.abs),
    ("logical_not", "LogicalNot", jnp.logical_not, False),
]

_BINARY = [
    ("add", "AddV2", jnp.add),
    ("subtract", "Sub", jnp.subtract),
    ("multiply", "Mul", jnp.multiply),
    ("_realdiv", "RealDiv", _truediv),
    ("pow", "Pow", jnp.power),
    ("floordiv", "FloorDiv", jnp.floor_divide, False),
    ("floormod", "FloorMod", _floormod),
    ("less", "Less", jnp.less, False),
    ("less_equal", "LessEqual", jnp.less_equal, False),
    ("greater", "Greater", jnp.greater, False),
    ("greater_equal", "GreaterEqual", jnp.greater_equal, False),
    ("equal", "Equal", jnp.equal, False),
    ("not_equal", "NotEqual", jnp.not_equal, False),
    ("logical_and", "LogicalAnd", jnp.logical_and, False),
    ("logical_or", "LogicalOr", jnp.logical_or, False),
]

_ns = {}
unary_ops(_ns, _UNARY)
binary_ops(_ns, _BINARY)
globals().update(_ns)

_CAST = define("Cast", lambda x, dtype: x.astype(dtype))


def cast(x, dtype, name=None):
    """``tf.cast``: convert to ``dtype`` (float -> int truncates toward zero)."""
    target = _dtypes.as_dtype(dtype)
    store = _dtypes.storage_dtype(target._np, "cast")
    src = dtype_of(x)
    if src is not None and src == store:
        return bind(_IDENTITY, x)
    return bind(_CAST, x, dtype=store.name)


_IDENTITY = define("Identity", lambda x: x)


def identity(input, name=None):
    """``tf.identity``: the same value as a new tensor (the tape sees a distinct tensor)."""
    return bind(_IDENTITY, input)


def divide(x, y, name=None):
    """``tf.divide`` / ``tf.math.truediv``: integer inputs give floats (int32 -> float64, as TF)."""
    check_binary(x, y, "RealDiv")
    d = dtype_of(x) or dtype_of(y)
    if d is not None and d.kind in "iu":
        to = np.float32 if d.itemsize <= 2 else np.float64
        x, y = cast(x, to), cast(y, to)
    return _ns["_realdiv"](x, y)


truediv = divide


def _sum(x, axis, keepdims):
    return jnp.sum(x, axis=axis, keepdims=keepdims)


def _mean(x, axis, keepdims):
    m = jnp.mean(x, axis=axis, keepdims=keepdims)
    return m.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.integer) else m


_SUM = define("Sum", _sum)
_MEAN = define("Mean", _mean)


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None):
    """``tf.reduce_sum``: sum over ``axis`` (all axes when None)."""
    return bind(_SUM, input_tensor, axis=static_axis(axis), keepdims=bool(keepdims))


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None):
    """``tf.reduce_mean``: mean over ``axis`` (integer inputs give an integer mean, as TF)."""
    return bind(_MEAN, input_tensor, axis=static_axis(axis), keepdims=bool(keepdims))


def _matmul(a, b, transpose_a, transpose_b, adjoint_a, adjoint_b):
    if transpose_a:
        a = jnp.swapaxes(a, -1, -2)
    if adjoint_a:
        a = jnp.conj(jnp.swapaxes(a, -1, -2))
    if transpose_b:
        b = jnp.swapaxes(b, -1, -2)
    if adjoint_b:
        b = jnp.conj(jnp.swapaxes(b, -1, -2))
    return jnp.matmul(a, b)


_MATMUL = define("MatMul", _matmul)


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, output_type=None, name=None):
    """``tf.linalg.matmul``: (batched) matrix product; both inputs rank >= 2."""
    from .._errors import InvalidArgumentError
    check_binary(a, b, "MatMul")
    for arg, v in (("a", a), ("b", b)):
        nd = v.ndim if isinstance(v, (Tensor, Variable)) else np.ndim(v)
        if nd < 2:
            raise InvalidArgumentError(None, None, f"In[{0 if arg == 'a' else 1}] ndims must be >= 2: "
                                       f"matmul argument `{arg}` has rank {nd}")
    return bind(_MATMUL, a, b, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b),
                adjoint_a=bool(adjoint_a), adjoint_b=bool(adjoint_b))


# -- operators ----------------------------------------------------------------

def _swap(fn):
    return lambda a, b: fn(b, a)


def _eq(a, b):
    if b is None:
        return False
    return _ns["equal"](a, b)


def _ne(a, b):
    if b is None:
        return True
    return _ns["not_equal"](a, b)


_OPERATORS = {
    "__add__": _ns["add"], "__radd__": _swap(_ns["add"]),
    "__sub__": _ns["subtract"], "__rsub__": _swap(_ns["subtract"]),
    "__mul__": _ns["multiply"], "__rmul__": _swap(_ns["multiply"]),
    "__truediv__": divide, "__rtruediv__": _swap(divide),
    "__floordiv__": _ns["floordiv"], "__rfloordiv__": _swap(_ns["floordiv"]),
    "__mod__": _ns["floormod"], "__rmod__": _swap(_ns["floormod"]),
    "__pow__": _ns["pow"], "__rpow__": _swap(_ns["pow"]),
    "__matmul__": matmul, "__rmatmul__": _swap(matmul),
    "__neg__": _ns["negative"], "__abs__": _ns["abs"],
    "__pos__": lambda a: a,
    "__lt__": _ns["less"], "__le__": _ns["less_equal"],
    "__gt__": _ns["greater"], "__ge__": _ns["greater_equal"],
    "__eq__": _eq, "__ne__": _ne,
    "__and__": _ns["logical_and"], "__rand__": _swap(_ns["logical_and"]),
    "__or__": _ns["logical_or"], "__ror__": _swap(_ns["logical_or"]),
    "__invert__": _ns["logical_not"],
}

for _cls in (Tensor, Variable):
    for _name, _fn in _OPERATORS.items():
        setattr(_cls, _name, _fn)

__all__ = [n for n in _ns if not n.startswith("_")] + [
    "cast", "identity", "divide", "truediv", "reduce_sum", "reduce_mean", "matmul"]
