"""tapejax: TensorFlow's GradientTape API on JAX.

``import tapejax as tf`` and TF2 gradient code runs on JAX: the tape records
the ops that touch watched tensors and ``tape.gradient`` replays them as one
compiled ``jax.vjp``.  The public surface is listed here, explicitly.
"""
from . import _dtypes as dtypes
from . import _errors as errors
from . import ops as _ops  # registers the ops and the Tensor operators
from ._dtypes import (DType, as_dtype, bfloat16, bool, complex64, complex128, double, float16,
                      float32, float64, half, int8, int16, int32, int64, uint8, uint16, uint32, uint64)
from ._nest import flatten as _flatten  # noqa: F401
from ._primitives import Primitive, bind, define as define_op
from ._print import print_ as print
from ._replay import cache_info, clear_cache, set_cache_size
from ._tape import GradientTape, UnconnectedGradients
from ._tensor import Tensor, TensorShape, constant, convert_to_tensor, is_tensor
from ._variable import Variable
from .ops.array import ones, ones_like, reshape, shape, stack, zeros, zeros_like
from .ops.math import (abs, add, cast, divide, equal, exp, floordiv, floormod, greater,
                       greater_equal, identity, less, less_equal, log, logical_and, logical_not,
                       logical_or, matmul, multiply, negative, not_equal, pow, reduce_mean,
                       reduce_sum, sigmoid, sqrt, square, subtract, tanh, truediv)
from . import _namespaces
from ._namespaces import linalg, math, nn, nest

newaxis = None
__version__ = "0.1.0"

__all__ = [
    "GradientTape", "UnconnectedGradients", "Tensor", "TensorShape", "Variable", "DType",
    "constant", "convert_to_tensor", "is_tensor", "as_dtype", "cast", "identity", "reshape",
    "stack", "zeros", "ones", "zeros_like", "ones_like", "shape", "add", "subtract", "multiply",
    "divide", "truediv", "negative", "pow", "square", "sqrt", "exp", "log", "tanh", "sigmoid",
    "abs", "matmul", "reduce_sum", "reduce_mean", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "floordiv", "floormod",
    "print", "cache_info", "clear_cache", "set_cache_size", "errors", "dtypes", "math", "nn", "linalg",
    "nest", "newaxis", "bind", "define_op", "Primitive",
    "float16", "half", "bfloat16", "float32", "float64", "double", "complex64", "complex128",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
]
