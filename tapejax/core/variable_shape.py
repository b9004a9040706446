"""A Variable's declared shape: TF's ``tf.Variable(initial, shape=...)``.

TF lets a Variable declare a shape less specific than its initial value's (``shape=[None, 3]``,
``shape=tf.TensorShape(None)``): ``v.shape`` is then the declared shape, ``assign`` takes any
value compatible with it (the Variable's value changes shape: a buffer that grows), and the
value, its reads and ``tf.shape(v)`` have the value's own shape.  ``assign_add`` / ``assign_sub``
still need the current value's shape (TF's kernels: InvalidArgumentError).  ``validate_shape`` does
not loosen this in TF 2 (a Variable's shape is its initial value's unless ``shape`` says
otherwise), and an incompatible ``shape`` is TF's ValueError either way.

``declared_shape`` decides the declared shape at creation (None when it is the value's own, the
common case), ``declare`` records it and ``declared`` reads it back, ``assign_shape_error`` is
the error of an ``assign``.  The few declared shapes live in a table keyed by the Variable's
``id`` (an entry leaves with its Variable), not in a slot: every Variable, Keras's and copies
made without ``__init__`` included, then reads None without a per-Variable field, and a
Variable's ``shape`` pays one test of an empty table.  ``core.variable`` and the checkpoint
restore (``train.restore``) call them.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional

from .shape import TensorShape, as_shape

#: ``id(variable) -> declared shape`` for the Variables that declare one (``declare``).
DECLARED: Dict[int, TensorShape] = {}

#: Called with a Variable whose value an ``assign`` gives another shape (its declared shape
#: allows it): ``tapejax.function`` forgets the programs it traced with the old shape.
SHAPE_CHANGED: List[Callable[[Any], None]] = []


def shape_changed(var: Any) -> None:
    """Run the ``SHAPE_CHANGED`` hooks for ``var`` (its value's shape is about to change)."""
    for hook in tuple(SHAPE_CHANGED):
        hook(var)


def declared_shape(shape: Any, value_shape: tuple) -> Optional[TensorShape]:
    """The shape a Variable made with ``shape=shape`` from a value of ``value_shape`` declares:
    None when ``shape`` is None or fully the value's, else the (partly or wholly unknown) shape.
    ValueError (TF's text) when the two are incompatible."""
    if shape is None:
        return None
    declared = as_shape(shape)
    if not declared.is_compatible_with(value_shape):
        raise ValueError(f"In this `tf.Variable` creation, the initial value's shape ({tuple(value_shape)}) is "
                         f"not compatible with the explicitly supplied `shape` argument ({shape}).")
    if declared.rank is not None and declared.is_fully_defined():
        return None
    return declared


def declare(var: Any, shape: TensorShape) -> None:
    """Record ``shape`` as ``var``'s declared shape (until ``var`` is collected)."""
    key = id(var)
    DECLARED[key] = shape
    weakref.finalize(var, DECLARED.pop, key, None)


def declared(var: Any) -> Optional[TensorShape]:
    """``var``'s declared shape, or None (its shape is its value's)."""
    return DECLARED.get(id(var)) if DECLARED else None


def assign_shape_error(name: str, declared: Optional[TensorShape], current: tuple,
                       new: tuple) -> Optional[ValueError]:
    """The ValueError of ``assign``-ing a value of shape ``new`` to the Variable ``name`` (declared
    shape ``declared``, None for its value's ``current``), or None when it may."""
    if declared is None:
        if tuple(new) == tuple(current):
            return None
        shape = str(tuple(current))
    else:
        if declared.is_compatible_with(new):
            return None
        shape = str(declared)
    return ValueError(f"Cannot assign value to variable '{name}': Shape mismatch. The variable shape {shape}, "
                      f"and the assigned value shape {tuple(new)} are incompatible.")


__all__ = ["DECLARED", "SHAPE_CHANGED", "declared_shape", "declare", "declared", "assign_shape_error",
           "shape_changed"]
