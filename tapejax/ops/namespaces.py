"""TF's sub-namespaces (``tf.math``, ``tf.nn``, ``tf.linalg``, ``tf.random``, ``tf.nest``) and
the top-level op names, as plain data over the op family modules, so one function has one
definition and ``tools/gen_ops_table.py`` can list every public op with its namespaces."""
import sys

from ..core import dtypes as _dtypes, nest as _nest
from ..core.modules import new_module
from . import (
    array as _a,
    bitwise as _bw,
    conv as _cv,
    diagonals as _dg,
    image_boxes as _ibx,
    image_color as _ic,
    image_geometry as _ig,
    image_metrics as _imx,
    image_nms as _inms,
    image_resize as _ir,
    image_sample as _isd,
    indexing as _ix,
    layout as _lo,
    linalg as _l,
    linalg_extra as _lx,
    linalg_more as _lm,
    linear_operator as _lop,
    linear_operator_block as _lopb,
    linear_operator_circulant as _lopc,
    linear_operator_diag as _lopd,
    linear_operator_dispatch as _lopx,
    linear_operator_kronecker as _lopk,
    linear_operator_orthogonal as _lopo,
    linear_operator_structured as _lops,
    linear_operator_wrappers as _lopw,
    math as _m,
    nn as _nn,
    nn_ctc as _ctc,
    nn_embedding_sparse as _nes,
    nn_extra as _nx,
    nn_losses as _nl,
    nn_sampled as _smp,
    patches_sequences as _psq,
    pooling_more as _pm,
    quantization as _qz,
    ragged_ops as _rgo,
    random as _r,
    reduce as _red,
    rng as _rng,
    scatter as _sc,
    segment as _sg,
    signal_dct as _sdct,
    signal_fft as _sfft,
    signal_shape as _sshape,
    signal_spectral as _sspec,
    signal_windows as _swin,
    sorting as _so,
    sparse_counts as _spc,
    sparse_more as _spm,
    sparse_ops as _spo,
    sparse_sets as _sets,
    special as _sp,
    unsupported as _un,
    utilities as _ut,
)


def _module(name, doc, members):
    return new_module(f"tapejax.{name}", doc, members)


def _pick(src, names):
    return {n: getattr(src, n) for n in names.split()}


#: tf.<name> for the ops (the top level of TensorFlow's namespace).
TOP = {}
TOP.update(_pick(_m, """add add_n subtract multiply divide truediv floordiv floormod pow negative abs sign
    square sqrt exp log sin cos tan tanh sigmoid maximum minimum equal not_equal less less_equal greater
    greater_equal logical_and logical_or logical_not round floor cast identity matmul asin acos atan cosh
    sinh atan2"""))
TOP.update(_pick(_red, """clip_by_value clip_by_norm clip_by_global_norm reduce_sum reduce_mean reduce_max
    reduce_min reduce_prod reduce_logsumexp reduce_any reduce_all argmax argmin cumsum where"""))
TOP.update(_pick(_a, """reshape transpose concat stack unstack split squeeze expand_dims tile pad one_hot
    zeros ones fill zeros_like ones_like range linspace eye shape rank size reverse roll
    broadcast_to meshgrid repeat einsum tensordot"""))
TOP.update(_pick(_so, "sort argsort unique"))
TOP.update(_pick(_ix, """gather gather_nd slice boolean_mask scatter_nd tensor_scatter_nd_update
    tensor_scatter_nd_add"""))
TOP.update(_pick(_l, "norm"))
TOP.update(_pick(_m, "asinh acosh atanh"))
TOP.update(_pick(_ix, "strided_slice"))
TOP.update(_pick(_sc, "tensor_scatter_nd_sub tensor_scatter_nd_max tensor_scatter_nd_min"))
TOP.update(_pick(_sp, "complex saturate_cast truncatediv truncatemod"))
TOP.update(_pick(_lo, """space_to_batch space_to_batch_nd batch_to_space required_space_to_batch_paddings
    reverse_sequence sequence_mask searchsorted unravel_index histogram_fixed_width histogram_fixed_width_bins
    unique_with_counts dynamic_partition dynamic_stitch bitcast fftnd ifftnd rfftnd irfftnd shape_n
    broadcast_dynamic_shape broadcast_static_shape ensure_shape"""))
TOP.update(_pick(_cv, "conv2d_backprop_filter_v2 conv2d_backprop_input_v2"))
TOP.update(_pick(_ut, """control_dependencies group no_op tuple identity_n guarantee_const executing_eagerly
    inside_function is_symbolic_tensor get_static_value timestamp get_logger get_current_name_scope
    parallel_stack AggregationMethod VariableAggregation VariableSynchronization constant_initializer
    zeros_initializer ones_initializer random_normal_initializer random_uniform_initializer"""))
TOP["conv"] = _cv.conv
TOP["extract_volume_patches"] = _psq.extract_volume_patches
TOP["random_index_shuffle"] = _psq.random_index_shuffle
TOP["realdiv"] = _m.divide
TOP["approx_top_k"] = _sg.approx_top_k
TOP.update({"eig": _lm.eig, "eigvals": _lm.eigvals, "matrix_square_root": _lm.sqrtm,
            "scalar_mul": _sp.scalar_mul})

# tf.math has neither where, the clip_* ops nor range/linspace (they are top-level only in TF);
# cast / identity / matmul stay (tapejax exported them there from the start).
_NOT_MATH = {"where", "clip_by_value", "clip_by_norm", "clip_by_global_norm", "global_norm"}
_MATH = {n: getattr(mod, n) for mod in (_m, _red) for n in mod.__all__ if n not in _NOT_MATH}
_MATH.update({n: getattr(_sp, n) for n in _sp.__all__ if n not in ("complex", "saturate_cast", "truncatediv",
                                                                    "truncatemod", "no_gradient")})
_MATH.update({n: getattr(_sg, n) for n in _sg.__all__ if n != "approx_top_k"})
_MATH.update({"softmax": _nn.softmax, "log_softmax": _nn.log_softmax, "accumulate_n": _m.add_n,
              "bincount": _red.bincount})
_MATH["sobol_sample"] = _psq.sobol_sample
for _k in ("dawsn", "expint", "fresnel_cos", "fresnel_sin", "spence"):   # (tf.math.special's only)
    _MATH.pop(_k)
special = _module("math.special", "``tf.math.special``", {n: getattr(_sp, n) for n in (
    "bessel_i0", "bessel_i0e", "bessel_i1", "bessel_i1e", "dawsn", "expint", "fresnel_cos", "fresnel_sin",
    "spence")})
_MATH["special"] = special
math = _module("math", "``tf.math``", _MATH)
_NN = {n: getattr(mod, n) for mod in (_nn, _nl) for n in mod.__all__}
_NN.update({n: getattr(_cv, n) for n in _cv.__all__ if n not in ("conv", "conv2d_backprop_filter_v2",
                                                                  "conv2d_backprop_input_v2")})
_NN.update({n: getattr(_nx, n) for n in _nx.__all__})
_NN.update({n: getattr(_ctc, n) for n in _ctc.__all__})
_NN.update({n: getattr(_smp, n) for n in _smp.__all__})
_NN.update({n: getattr(_pm, n) for n in _pm.__all__})
_NN.update({n: getattr(_nes, n) for n in _nes.__all__})
_NN.update({"top_k": _red.top_k, "in_top_k": _sg.in_top_k, "zero_fraction": _sg.zero_fraction,
            "approx_max_k": _sg.approx_max_k, "approx_min_k": _sg.approx_min_k, "depth_to_space": _lo.depth_to_space,
            "space_to_depth": _lo.space_to_depth, "space_to_batch": _lo.space_to_batch_nd})
nn = _module("nn", "``tf.nn``", _NN)
linalg = _module("linalg", "``tf.linalg``", {**{n: getattr(mod, n) for mod in (_l, _dg, _lm, _lx) for n in mod.__all__},
                                             "global_norm": _red.global_norm, **_lopx.DISPATCH,
                                             "LinearOperator": _lop.LinearOperator,
                                             **{n: getattr(mod, n) for mod in (_lopw, _lopd, _lopo, _lopb, _lopk, _lopc, _lops) for n in mod.__all__}})
random = _module("random", "``tf.random``: TF's seed rules on JAX PRNG keys (see tapejax.ops.random)",
                 {**{n: getattr(_r, n) for n in _r.__all__}, **{n: getattr(_rng, n) for n in _rng.__all__},
                  **{n: getattr(_smp, n) for n in _smp.__all__ if n.endswith("_sampler")}})
nest = _module("nest", "``tf.nest``", {"flatten": _nest.flatten, "pack_sequence_as": _nest.pack_sequence_as,
                                        "map_structure": _nest.map_structure, "is_nested": _nest.is_nested,
                                        "assert_same_structure": _ut.assert_same_structure})
bitwise = _module("bitwise", "``tf.bitwise``", {n: getattr(_bw, n) for n in _bw.__all__})
strings = _un.strings
ragged = _module("ragged", "``tf.ragged``: RaggedTensor ops (see tapejax.ops.ragged_tensor)",
                 dict(_rgo.PUBLIC, cross_hashed=_spc.ragged_cross_hashed))
sparse = _module("sparse", "``tf.sparse``: SparseTensor ops (see tapejax.ops.sparse_tensor)",
                 {**{n: getattr(_spo, n) for n in _spo.PUBLIC},
                  **{n: getattr(_spm, n) for n in _spm.__all__ if n.islower()},
                  **{n: getattr(_spc, n) for n in _spc.__all__}})
sets = _module("sets", "``tf.sets``: set operations along the last dimension (see tapejax.ops.sparse_sets)",
               {n: getattr(_sets, n) for n in _sets.__all__})
#: ``tf.image``: the image family modules (``image_*``).
IMAGE_MODULES = (_ig, _ir, _ic, _imx, _inms, _ibx, _isd)
image = _module("image", "``tf.image``", {n: getattr(mod, n) for mod in IMAGE_MODULES for n in mod.__all__})

#: ``tf.signal``: the signal family modules (``signal_*``), and the n-d FFTs of ``layout``.
SIGNAL_MODULES = (_sfft, _sshape, _swin, _sspec, _sdct)
signal = _module("signal", "``tf.signal``", {**{n: getattr(mod, n) for mod in SIGNAL_MODULES for n in mod.__all__
                                                if n.islower()},
                                             **_pick(_lo, "fftnd ifftnd rfftnd irfftnd")})

#: ``tf.quantization``: the float-to-float quantisers (``quantization``; TF's quantized dtypes have no JAX
#: representation, nor the ops on them).
quantization = _module("quantization", "``tf.quantization``", {n: getattr(_qz, n) for n in _qz.__all__})

#: ``tf.dtypes``: the DType objects and ``as_dtype`` (``core.dtypes``), ``cast`` and ``saturate_cast``.
dtypes = _module("dtypes", "``tf.dtypes``", {**{n: getattr(_dtypes, n) for n in _dtypes.PUBLIC}, "cast": _m.cast,
                                             "saturate_cast": _sp.saturate_cast, "complex": _sp.complex})

# ``import tapejax.math`` (etc.) works like ``import tensorflow.math``.
for _mod in (math, special, nn, linalg, random, nest, dtypes, bitwise, image, sparse, ragged, signal, quantization,
             sets):
    sys.modules.setdefault(_mod.__name__, _mod)


#: namespace name -> {public name: function}, for the coverage table ("" is the top level).
NAMESPACES = {"": TOP, "math": _MATH, "nn": dict(vars(nn)), "linalg": dict(vars(linalg)),
              "random": dict(vars(random)), "bitwise": dict(vars(bitwise)), "math.special": dict(vars(special)),
              "image": dict(vars(image)), "signal": dict(vars(signal)),
              "quantization": dict(vars(quantization))}
for _ns in NAMESPACES.values():
    for _k in [k for k in _ns if k.startswith("__") or k == "__all__"]:
        del _ns[_k]
