"""TF's tensor conversion registry: objects of other types that ops take as dense Tensors.

``register_tensor_conversion_function(base_type, fn, priority)`` is TF's API: an object whose
type is ``base_type`` (or a subclass) is turned into a Tensor by ``fn(value, dtype=None,
name=None, as_ref=False)`` wherever an op or ``convert_to_tensor`` needs a Tensor.  tapejax's
own ``IndexedSlices`` joins this way (``core.indexed_slices``: its conversion is the recorded
densifying op, so gradients flow through it), and so can a user's array-like class.

The one entry point (``core.bind.operand``) and ``convert_to_tensor`` ask ``conversion_for``:
one dict lookup per operand type (the answer, None included, is cached per type and the cache
is cleared when a function is registered), so operands of other types pay next to nothing.
"""
from typing import Any, Callable, NamedTuple, Optional

import numpy as np


class _Entry(NamedTuple):
    """One registration: the base type, the conversion function, its priority, and the order it
    was registered in (ties go to the earlier one, as in TF)."""
    base: type
    fn: Callable[..., Any]
    priority: int
    order: int


_ENTRIES: "list[_Entry]" = []
#: type -> the conversion function for it (None: none registered), filled as types are seen.
_BY_TYPE: "dict[type, Optional[Callable[..., Any]]]" = {}

#: Types TF refuses as ``base_type`` (they convert by TF's own rules).
_REFUSED = (str, bytes, bool, int, float, complex, list, tuple, np.ndarray, np.generic)


def register_tensor_conversion_function(base_type, conversion_func, priority=100) -> None:
    """``tf.register_tensor_conversion_function``: ``conversion_func(value, dtype=None, name=None,
    as_ref=False)`` converts objects of ``base_type`` (a type or a tuple of types) to a Tensor
    when an op or ``convert_to_tensor`` needs one; the lowest ``priority`` wins.  It may return
    ``NotImplemented`` to let the next registered function try."""
    bases = base_type if isinstance(base_type, tuple) else (base_type,)
    for b in bases:
        if not isinstance(b, type):
            raise TypeError(f"Argument `base_type` must be a type or a tuple of types; got {b!r}")
        if issubclass(b, _REFUSED):
            raise TypeError(f"Cannot register conversions for Python numeric types, strings, lists, "
                            f"tuples and NumPy arrays (they convert by TF's own rules); got {b.__name__}")
    if not callable(conversion_func):
        raise TypeError(f"Argument `conversion_func` must be callable; got {conversion_func!r}")
    for b in bases:
        _ENTRIES.append(_Entry(b, conversion_func, int(priority), len(_ENTRIES)))
    _ENTRIES.sort(key=lambda e: (e.priority, e.order))
    _BY_TYPE.clear()


def _resolve(t: type) -> "Optional[Callable[..., Any]]":
    fns = [e.fn for e in _ENTRIES if issubclass(t, e.base)]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def chained(value, dtype=None, name=None, as_ref=False):
        for fn in fns:
            out = fn(value, dtype=dtype, name=name, as_ref=as_ref)
            if out is not NotImplemented:
                return out
        return NotImplemented

    return chained


def conversion_for(t: type) -> "Optional[Callable[..., Any]]":
    """The conversion function registered for values of type ``t`` (or a base of it), or None."""
    try:
        return _BY_TYPE[t]
    except KeyError:
        fn = _BY_TYPE[t] = _resolve(t)
        return fn


#: ``conversion_for`` as one dict read for types seen before (what ``operand`` uses).
PEEK = _BY_TYPE.get

__all__ = ["PEEK", "conversion_for", "register_tensor_conversion_function"]
