"""tapejax: TensorFlow's GradientTape API on JAX.

``import tapejax as tf`` and TF2 gradient code runs on JAX: the tape records
the ops that touch watched tensors and ``tape.gradient`` replays them as one
compiled ``jax.vjp``.  The public surface is listed here, explicitly: every
name below is imported from the module that defines it, in the order the
layers build on each other (dtypes and tensors, the op entry point and the
tape, gradient control, compiled steps, training), and ``__all__`` lists them.
"""
from types import SimpleNamespace as _SimpleNamespace

from .core import errors
from . import ops as _ops  # noqa: F401  (importing the op families registers the ops and Tensor operators)
from .core.dtypes import (DType, as_dtype, bfloat16, bool, complex64, complex128, double, float16, float32,
                          float64, half, int8, int16, int32, int64, string, uint8, uint16, uint32, uint64)
from .core.tensor import Tensor, TensorShape
from .core.convert import constant, convert_to_tensor, is_tensor
from .core.conversion import register_tensor_conversion_function
from .core.indexed_slices import IndexedSlices
from .ops.sparse_tensor import SparseTensor, SparseTensorSpec
from .ops.ragged_tensor import RaggedTensor, RaggedTensorSpec
from .core.creator import variable_creator_scope
from .core.variable import Variable
from .core.bind import Primitive, bind, define as define_op
from .ops.printing import print_ as print
from .runtime.deferred import deferred_execution, set_deferred_execution
from .runtime.speculate import set_speculative_updates, speculative_updates
from .autodiff.replay import cache_info, cache_stats, clear_cache, set_cache_size
from .autodiff.nodes import UnconnectedGradients
from .autodiff.tape import GradientTape

# -- the op library: tf.<op>, and the tf.math / tf.nn / tf.linalg / tf.random / tf.nest namespaces
from .ops.array import (broadcast_to, concat, einsum, expand_dims, eye, fill, linspace, meshgrid, one_hot, ones,
                        ones_like, pad, range, rank, repeat, reshape, reverse, roll, shape, size, split, squeeze, stack,
                        tensordot, tile, transpose, unstack, zeros, zeros_like)
from .ops.sorting import argsort, sort, unique
from .ops.indexing import (boolean_mask, gather, gather_nd, scatter_nd, slice, strided_slice, tensor_scatter_nd_add,
                           tensor_scatter_nd_update)
from .ops.scatter import tensor_scatter_nd_max, tensor_scatter_nd_min, tensor_scatter_nd_sub
from .ops.special import complex, saturate_cast, scalar_mul, truncatediv, truncatemod
from .ops.linalg_more import eig, eigvals, sqrtm as matrix_square_root
from .ops.layout import (batch_to_space, bitcast, broadcast_dynamic_shape, broadcast_static_shape, dynamic_partition,
                         dynamic_stitch, ensure_shape, fftnd, histogram_fixed_width, histogram_fixed_width_bins, ifftnd,
                         irfftnd, required_space_to_batch_paddings, reverse_sequence, rfftnd, searchsorted,
                         sequence_mask, shape_n, space_to_batch, space_to_batch_nd, unique_with_counts, unravel_index)
from .ops.conv import conv, conv2d_backprop_filter_v2, conv2d_backprop_input_v2
from .ops.segment import approx_top_k
from .ops.sparse_edit import edit_distance
from .ops.ragged_ops import ragged_fill_empty_rows, ragged_fill_empty_rows_grad
from .ops.patches_sequences import extract_volume_patches, random_index_shuffle
from .ops.utilities import (AggregationMethod, VariableAggregation, VariableSynchronization, constant_initializer,
                            control_dependencies, executing_eagerly, get_current_name_scope, get_logger,
                            get_static_value, group, guarantee_const, identity_n, inside_function, is_symbolic_tensor,
                            no_op, ones_initializer, parallel_stack, random_normal_initializer,
                            random_uniform_initializer, timestamp, tuple, zeros_initializer)
from .ops.unsupported import TOP_LEVEL as _UNSUPPORTED, unsupported as _unsupported
from .ops.math import (abs, acos, acosh, add, add_n, asin, asinh, atan, atan2, atanh, cast, cos, cosh, divide, equal, exp,
                       floor,
                       floordiv, floormod, greater, greater_equal, identity, less, less_equal, log, logical_and,
                       logical_not, logical_or, matmul, maximum, minimum, multiply, negative, not_equal, pow,
                       round, sigmoid, sign, sin, sinh, sqrt, square, subtract, tan, tanh, truediv)
from .ops.reduce import (argmax, argmin, clip_by_global_norm, clip_by_norm, clip_by_value, cumsum, reduce_all,
                         reduce_any, reduce_logsumexp, reduce_max, reduce_mean, reduce_min, reduce_prod,
                         reduce_sum, where)
from .ops.linalg import norm
from .ops.jax_op import op
from .ops.namespaces import (bitwise, dtypes, linalg, math, nest, nn, quantization, random, ragged, sets, signal,
                             sparse)

# -- gradient control, compiled steps, jacobians and forward mode
from .autodiff.custom import RegisterGradient, gradient_override_map, gradients, hessians, no_gradient, stop_gradient
from .autodiff.custom_gradient import custom_gradient
from .compile.control_flow import cond, foldl, foldr, scan, while_loop
from .compile.functional_ops import case, grad_pass_through, map_fn, recompute_grad, switch_case, vectorized_map
from .compile.function import Function, TensorSpec, function
from .compile.tensor_array import TensorArray
from .compile.tensor_array_args import TensorArraySpec
from .compile.type_spec import type_spec_from_value
from .compile.host import init_scope, numpy_function, py_function
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
from .data.io_names import audio, image, io  # tf.image: ops' image ops and data's codecs; tf.audio: WAV
from .data.hostops import as_string
from .data.hostops_text import strings
from .data.lookup import fingerprint, lookup
from .data.optional import Optional as _Optional
from .compat import config, debugging, summary, test
from . import distribute
from .compat.device import device
from .compat.device_spec import DeviceSpec

newaxis = None
#: ``tf.experimental``: only ``Optional`` (tf.data's), the rest of TF's experimental namespace is out of scope
experimental = _SimpleNamespace(Optional=_Optional)
__version__ = "0.1.0"
realdiv = divide
Assert = debugging.Assert
assert_equal, assert_greater, assert_less = debugging.assert_equal, debugging.assert_greater, debugging.assert_less
assert_rank = debugging.assert_rank


def __getattr__(name):
    """TF's top-level names for types with no JAX representation (``tf.as_string``) raise ``tapejax.ops.unsupported.UnsupportedError``, saying what to use instead."""
    if name in _UNSUPPORTED:
        raise _unsupported(_UNSUPPORTED[name], name)
    raise AttributeError(f"module 'tapejax' has no attribute {name!r}")


__all__ = [
    "abs", "acos", "acosh", "add", "add_n", "AggregationMethod", "approx_top_k", "argmax", "argmin",
    "argsort", "as_dtype", "as_string", "asin", "asinh", "Assert", "assert_equal", "assert_greater", "assert_less",
    "assert_rank", "atan", "atan2", "atanh", "audio", "autodiff", "autograph", "batch_to_space", "bfloat16", "bind",
    "bitcast", "bitwise", "bool", "boolean_mask", "broadcast_dynamic_shape", "broadcast_static_shape",
    "broadcast_to", "cache_info", "cache_stats", "case", "cast", "clear_cache", "clip_by_global_norm", "clip_by_norm",
    "clip_by_value", "compat", "complex", "complex128", "complex64", "concat", "cond", "config", "constant",
    "constant_initializer", "control_dependencies", "conv", "conv2d_backprop_filter_v2", "distribute",
    "conv2d_backprop_input_v2", "convert_to_tensor", "cos", "cosh", "cumsum", "custom_gradient", "data",
    "debugging", "deferred_execution", "define_op", "device", "DeviceSpec", "divide", "double", "DType", "dtypes",
    "dynamic_partition", "dynamic_stitch", "edit_distance", "eig", "eigvals", "einsum", "ensure_shape", "equal", "errors", "executing_eagerly",
    "exp", "expand_dims", "experimental", "extract_volume_patches", "eye", "fftnd", "fill", "fingerprint", "float16", "float32", "float64", "floor", "floordiv",
    "floormod", "foldl", "foldr", "Function", "function", "gather", "gather_nd", "get_current_name_scope",
    "get_logger", "get_static_value", "grad_pass_through", "gradient_override_map", "gradients", "GradientTape", "greater",
    "greater_equal", "group", "guarantee_const", "half", "hessians", "histogram_fixed_width",
    "histogram_fixed_width_bins", "identity", "identity_n", "ifftnd", "image", "IndexedSlices", "inside_function",
    "int16", "io", "int32", "int64", "int8", "irfftnd", "is_symbolic_tensor", "is_tensor", "keras", "less",
    "less_equal", "linalg", "linspace", "log", "logical_and", "logical_not", "logical_or", "lookup", "math", "matmul",
    "matrix_square_root", "map_fn", "maximum", "meshgrid", "minimum", "Module", "multiply", "name_scope", "negative", "nest", "newaxis", "nn",
    "no_gradient", "no_op", "variable_creator_scope", "numpy_function", "py_function", "init_scope", "norm", "not_equal", "one_hot", "ones", "ones_initializer", "ones_like", "op", "optimizers",
    "pad", "parallel_stack", "pow", "Primitive", "print", "ragged", "RaggedTensor", "RaggedTensorSpec", "random", "random_normal_initializer",
    "quantization", "ragged_fill_empty_rows", "ragged_fill_empty_rows_grad", "random_index_shuffle", "random_uniform_initializer", "range", "rank", "realdiv", "recompute_grad", "reduce_all", "reduce_any", "reduce_logsumexp",
    "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum",
    "register_tensor_conversion_function", "RegisterGradient", "repeat", "required_space_to_batch_paddings",
    "reshape", "reverse", "reverse_sequence", "rfftnd", "roll", "round", "saturate_cast", "saved_model", "scalar_mul",
    "scan", "scatter_nd", "searchsorted", "sequence_mask", "set_cache_size", "set_deferred_execution", "sets",
    "set_speculative_updates", "shape", "shape_n", "sigmoid", "sign", "sin", "sinh", "size", "slice", "sort",
    "space_to_batch", "space_to_batch_nd", "signal", "sparse", "SparseTensor", "SparseTensorSpec", "speculative_updates", "split", "sqrt", "square",
    "squeeze", "stack", "stop_gradient", "strided_slice", "string", "strings", "subtract", "summary", "switch_case", "tan", "tanh",
    "Tensor", "tensor_scatter_nd_add", "tensor_scatter_nd_max", "tensor_scatter_nd_min",
    "tensor_scatter_nd_sub", "tensor_scatter_nd_update", "tensordot", "TensorArray", "TensorArraySpec", "TensorShape", "TensorSpec", "test",
    "tile", "timestamp", "train", "transpose", "truediv", "truncatediv", "truncatemod", "tuple", "type_spec_from_value", "uint16",
    "uint32", "uint64", "uint8", "UnconnectedGradients", "unique", "unique_with_counts", "unravel_index",
    "unstack", "Variable", "VariableAggregation", "vectorized_map", "VariableSynchronization", "where", "while_loop", "zeros",
    "zeros_initializer", "zeros_like",
]
