"""TF's sub-namespaces (``tf.math``, ``tf.nn``, ``tf.linalg``, ``tf.random``, ``tf.nest``) and
the top-level op names, as plain data over the op family modules, so one function has one
definition and ``tools/gen_ops_table.py`` can list every public op with its namespaces."""
import sys

from ..core import dtypes as _dtypes, nest as _nest
from ..core.modules import new_module
from . import (
    array as _a,
    diagonals as _dg,
    indexing as _ix,
    linalg as _l,
    math as _m,
    nn as _nn,
    random as _r,
    reduce as _red,
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
    zeros ones fill zeros_like ones_like range linspace eye shape rank size reverse roll sort argsort
    unique broadcast_to meshgrid repeat einsum tensordot"""))
TOP.update(_pick(_ix, """gather gather_nd slice boolean_mask scatter_nd tensor_scatter_nd_update
    tensor_scatter_nd_add"""))
TOP.update(_pick(_l, "norm"))

# tf.math has neither where, the clip_* ops nor range/linspace (they are top-level only in TF);
# cast / identity / matmul stay (tapejax exported them there from the start).
_NOT_MATH = {"where", "clip_by_value", "clip_by_norm", "clip_by_global_norm", "global_norm"}
_MATH = {n: getattr(mod, n) for mod in (_m, _red) for n in mod.__all__ if n not in _NOT_MATH}
math = _module("math", "``tf.math``", _MATH)
nn = _module("nn", "``tf.nn``", {n: getattr(_nn, n) for n in _nn.__all__})
linalg = _module("linalg", "``tf.linalg``", {**{n: getattr(mod, n) for mod in (_l, _dg) for n in mod.__all__},
                                             "global_norm": _red.global_norm})
random = _module("random", "``tf.random``: TF's seed rules on JAX PRNG keys (see tapejax.ops.random)",
                 {n: getattr(_r, n) for n in _r.__all__})
nest = _module("nest", "``tf.nest``", {"flatten": _nest.flatten, "pack_sequence_as": _nest.pack_sequence_as,
                                        "map_structure": _nest.map_structure, "is_nested": _nest.is_nested})

#: ``tf.dtypes``: the DType objects and ``as_dtype`` (``core.dtypes``), and ``cast``.
dtypes = _module("dtypes", "``tf.dtypes``", {**{n: getattr(_dtypes, n) for n in _dtypes.PUBLIC}, "cast": _m.cast})

# ``import tapejax.math`` (etc.) works like ``import tensorflow.math``.
for _mod in (math, nn, linalg, random, nest, dtypes):
    sys.modules.setdefault(_mod.__name__, _mod)


#: namespace name -> {public name: function}, for the coverage table ("" is the top level).
NAMESPACES = {"": TOP, "math": _MATH, "nn": dict(vars(nn)), "linalg": dict(vars(linalg)),
              "random": dict(vars(random))}
for _ns in NAMESPACES.values():
    for _k in [k for k in _ns if k.startswith("__") or k == "__all__"]:
        del _ns[_k]
