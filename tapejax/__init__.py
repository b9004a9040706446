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
from ._lazy import deferred_execution, set_deferred_execution
from ._replay import cache_info, cache_stats, clear_cache, set_cache_size
from ._speculate import set_speculative_updates, speculative_updates
from ._tape import GradientTape, UnconnectedGradients
from ._tensor import Tensor, TensorShape, constant, convert_to_tensor, is_tensor
from ._variable import Variable
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
    "print", "cache_info", "cache_stats", "clear_cache", "set_cache_size", "deferred_execution",
    "set_deferred_execution", "set_speculative_updates", "speculative_updates", "errors", "dtypes", "math", "nn", "linalg",
    "nest", "newaxis", "bind", "define_op", "Primitive",
    "float16", "half", "bfloat16", "float32", "float64", "double", "complex64", "complex128",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
]

# -- compiled training (issue #5)
from ._control_flow import cond, foldl, foldr, scan, while_loop  # noqa: E402
from ._function import Function, OperatorNotAllowedInGraphError, TensorSpec, function  # noqa: E402
from . import optimizers  # noqa: E402
from . import keras  # noqa: E402
from ._module import Module, name_scope  # noqa: E402
from . import train  # noqa: E402
errors.OperatorNotAllowedInGraphError = OperatorNotAllowedInGraphError
__all__ += ["function", "Function", "TensorSpec", "cond", "while_loop", "scan", "foldl", "foldr",
            "optimizers", "keras", "Module", "name_scope", "train"]

# -- gradient control (issue #4)
from ._custom import (RegisterGradient, custom_gradient, gradient_override_map, gradients, hessians,
                      stop_gradient)
from . import compat

__all__ += ["stop_gradient", "custom_gradient", "RegisterGradient", "gradient_override_map",
            "gradients", "hessians", "compat"]

# -- jacobians and forward mode (issue #6)
import sys as _sys  # noqa: E402
from ._forward import autodiff  # noqa: E402
_sys.modules.setdefault("tapejax.autodiff", autodiff)
__all__ += ["autodiff"]

# -- op library (issue #3)
from .ops.array import (argsort, boolean_mask, broadcast_to, concat, einsum, expand_dims, eye, fill,
                        gather, gather_nd, linspace, meshgrid, one_hot, ones, ones_like, pad, range,
                        rank, repeat, reshape, reverse, roll, scatter_nd, shape, size, slice, sort,
                        split, squeeze, stack, tensor_scatter_nd_add, tensor_scatter_nd_update,
                        tensordot, tile, transpose, unique, unstack, zeros, zeros_like)
from .ops.math import (abs, acos, add, add_n, argmax, argmin, asin, atan, atan2, cast, clip_by_global_norm,
                       clip_by_norm, clip_by_value, cos, cosh, cumsum, divide, equal, exp, floor,
                       floordiv, floormod, greater, greater_equal, identity, less, less_equal, log,
                       logical_and, logical_not, logical_or, matmul, maximum, minimum, multiply,
                       negative, not_equal, pow, reduce_all, reduce_any, reduce_logsumexp, reduce_max,
                       reduce_mean, reduce_min, reduce_prod, reduce_sum, round, sigmoid, sign, sin,
                       sinh, sqrt, square, subtract, tan, tanh, truediv, where)
from .ops.linalg import norm
from .ops.jax_op import op
from ._namespaces import random
__all__ += [n for n in [*_namespaces.TOP, "op", "random"] if n not in __all__]
# -- end op library (issue #3)
