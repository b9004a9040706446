"""TF's sub-namespaces (``tf.math``, ``tf.nn``, ``tf.linalg``, ``tf.nest``) as plain modules
built from the op family modules, so one function has one definition."""
import types

from . import _nest
from .ops import math as _m
from .ops import nn as _nn


def _module(name, doc, members):
    mod = types.ModuleType(f"tapejax.{name}", doc)
    for k, v in members.items():
        setattr(mod, k, v)
    mod.__all__ = sorted(members)
    return mod


math = _module("math", "``tf.math``", {n: getattr(_m, n) for n in _m.__all__})
nn = _module("nn", "``tf.nn``", {n: getattr(_nn, n) for n in _nn.__all__} | {"sigmoid": _m.sigmoid, "tanh": _m.tanh})
linalg = _module("linalg", "``tf.linalg``", {"matmul": _m.matmul})
nest = _module("nest", "``tf.nest``", {"flatten": _nest.flatten, "pack_sequence_as": _nest.pack_sequence_as,
                                        "map_structure": _nest.map_structure, "is_nested": _nest.is_nested})
