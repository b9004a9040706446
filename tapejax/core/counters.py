"""Integers TF keeps as int64 that tapejax holds as int32 without JAX's 64-bit mode: step
counters (``Checkpoint.save_counter``, an optimizer's ``iterations``, a loss scale's
``good_steps``: ``core.variable.counter`` makes one) and Variables made from int64 data or
with ``dtype=tf.int64`` (``core.variable`` notes them).  ``is_narrowed`` tells them apart from
Variables TF makes int32 too, so that a checkpoint written in TF's format gives TF the int64 it
restores into (a restore in tapejax narrows TF's int64 where the value fits: ``train.restore``)."""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

#: The Variables held as int32 / uint32 where TF's are 64-bit, by Variable id (Variables are
#: unhashable, as TF's).
_NARROWED: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_WIDE_INTS = (np.dtype(np.int64), np.dtype(np.uint64))


def note(var: Any, requested: Any) -> None:
    """Remember ``var`` when ``requested`` (the dtype its data or ``dtype=`` asked for) is a
    64-bit integer its value does not have."""
    if requested is not None and np.dtype(requested) in _WIDE_INTS and np.dtype(var._value.dtype) != np.dtype(requested):
        _NARROWED[var._id] = var


def is_narrowed(var: Any) -> bool:
    """Whether ``var`` holds as 32 bits an integer TF holds as 64."""
    return _NARROWED.get(getattr(var, "_id", -1)) is var


__all__ = ["is_narrowed", "note"]
