"""tapejax: TensorFlow's GradientTape API on JAX.

``import tapejax as tf`` and TF2 gradient code runs on JAX: the tape records
the ops that touch watched tensors and ``tape.gradient`` replays them as one
compiled ``jax.vjp``.  The public surface is listed here, explicitly: every
name below is imported from the module that defines it, in the order the
layers build on each other (dtypes and tensors, the op entry point and the
tape, gradient control, compiled steps, training), and ``__all__`` lists them.
"""
from .core import errors
from . import ops as _ops  # noqa: F401  (importing the op families registers the ops and Tensor operators)
from .core.dtypes import (DType, as_dtype, bfloat16, bool, complex64, complex128, double, float16, float32,
                          float64, half, int8, int16, int32, int64, uint8, uint16, uint32, uint64)
from .core.tensor import Tensor, TensorShape
from .core.convert import constant, convert_to_tensor, is_tensor
from .core.conversion import register_tensor_conversion_function
from .core.indexed_slices import IndexedSlices
from .core.variable import Variable
from .core.bind import Primitive, bind, define as define_op
from .ops.printing import print_ as print
from .runtime.deferred import deferred_execution, set_deferred_execution
from .runtime.speculate import set_speculative_updates, speculative_updates
from .autodiff.replay import cache_info, cache_stats, clear_cache, set_cache_size
from .autodiff.nodes import UnconnectedGradients
from .autodiff.tape import GradientTape

# -- the op library: tf.<op>, and the tf.math / tf.nn / tf.linalg / tf.random / tf.nest namespaces
from .ops.array import (argsort, broadcast_to, concat, einsum, expand_dims, eye, fill, linspace, meshgrid,
                        one_hot, ones, ones_like, pad, range, rank, repeat, reshape, reverse, roll, shape, size,
                        sort, split, squeeze, stack, tensordot, tile, transpose, unique, unstack, zeros, zeros_like)
from .ops.indexing import (boolean_mask, gather, gather_nd, scatter_nd, slice, tensor_scatter_nd_add,
                           tensor_scatter_nd_update)
from .ops.math import (abs, acos, add, add_n, asin, atan, atan2, cast, cos, cosh, divide, equal, exp, floor,
                       floordiv, floormod, greater, greater_equal, identity, less, less_equal, log, logical_and,
                       logical_not, logical_or, matmul, maximum, minimum, multiply, negative, not_equal, pow,
                       round, sigmoid, sign, sin, sinh, sqrt, square, subtract, tan, tanh, truediv)
from .ops.reduce import (argmax, argmin, clip_by_global_norm, clip_by_norm, clip_by_value, cumsum, reduce_all,
                         reduce_any, reduce_logsumexp, reduce_max, reduce_mean, reduce_min, reduce_prod,
                         reduce_sum, where)
from .ops.linalg import norm
from .ops.jax_op import op
from .ops.namespaces import dtypes, linalg, math, nest, nn, random

# -- gradient control, compiled steps, jacobians and forward mode
from .autodiff.custom import RegisterGradient, gradient_override_map, gradients, hessians, stop_gradient
from .autodiff.custom_gradient import custom_gradient
from .compile.control_flow import cond, foldl, foldr, scan, while_loop
from .compile.function import Function, TensorSpec, function
from .compile import autograph
from . import autodiff

# -- training and the TF namespaces around it
from . import optimizers
from . import keras
from .train.module import Module, name_scope
from . import train
from .train import saved_model
from . import compat
from . import data
from .compat import config, debugging, summary, test
from .compat.device import device

newaxis = None
__version__ = "0.1.0"

__all__ = [
    "abs", "acos", "add", "add_n", "argmax", "argmin", "argsort", "as_dtype", "asin", "atan",
    "atan2", "autodiff", "autograph", "bfloat16", "bind", "bool", "boolean_mask", "broadcast_to",
    "cache_info", "cache_stats", "cast", "clear_cache", "clip_by_global_norm", "clip_by_norm",
    "clip_by_value", "compat", "complex128", "complex64", "concat", "cond", "config", "constant",
    "convert_to_tensor", "cos", "cosh", "cumsum", "custom_gradient", "data", "debugging",
    "deferred_execution", "define_op", "device", "divide", "double", "DType", "dtypes", "einsum", "equal",
    "errors", "exp",
    "expand_dims", "eye", "fill", "float16", "float32", "float64", "floor", "floordiv",
    "floormod", "foldl", "foldr", "Function", "function", "gather", "gather_nd",
    "gradient_override_map", "gradients", "GradientTape", "greater", "greater_equal", "half",
    "hessians", "identity", "IndexedSlices", "int16", "int32", "int64", "int8", "is_tensor", "keras", "less",
    "less_equal", "linalg", "linspace", "log", "logical_and", "logical_not", "logical_or",
    "math", "matmul", "maximum", "meshgrid", "minimum", "Module", "multiply", "name_scope",
    "negative", "nest", "newaxis", "nn", "norm", "not_equal", "one_hot", "ones", "ones_like",
    "op", "optimizers", "pad", "pow", "Primitive", "print", "random", "range", "rank",
    "reduce_all", "reduce_any", "reduce_logsumexp", "reduce_max", "reduce_mean", "reduce_min",
    "reduce_prod", "reduce_sum", "register_tensor_conversion_function", "RegisterGradient", "repeat", "reshape", "saved_model", "reverse", "roll",
    "round", "scan", "scatter_nd", "set_cache_size", "set_deferred_execution",
    "set_speculative_updates", "shape", "sigmoid", "sign", "sin", "sinh", "size", "slice",
    "sort", "speculative_updates", "split", "sqrt", "square", "squeeze", "stack",
    "stop_gradient", "subtract", "summary", "tan", "tanh", "Tensor", "tensor_scatter_nd_add",
    "tensor_scatter_nd_update", "tensordot", "TensorShape", "TensorSpec", "test", "tile", "train",
    "transpose", "truediv", "uint16", "uint32", "uint64", "uint8", "UnconnectedGradients",
    "unique", "unstack", "Variable", "where", "while_loop", "zeros", "zeros_like",
]
