"""A ``tapejax.function`` bound to an instance (a decorated method, ``Function.__get__``).

TF makes a decorated method a function per instance: the instance keys the cache (as the first
argument), has its own first call and tracing count, and its steady call of Tensors only
(``Function._hot_bound``) is tried first, as ``Function.__call__`` tries its own.
"""
from __future__ import annotations

from ..core import state as _state
from . import config as _config
from .entries import SLOW

_local = _state._local
_FLAGS = _config.FLAGS


class BoundFunction:
    """A Function bound to an instance (a decorated method); the instance keys the cache."""

    __slots__ = ("_fn", "_self")
    _IS_TAPEJAX_FUNCTION = True   # (AutoGraph calls it as it is: it converts its own body)

    def __init__(self, fn, instance):
        self._fn = fn
        self._self = instance

    def __call__(self, *args, **kwargs):
        fn, inst = self._fn, self._self
        loc = _local
        if not (kwargs or loc.tapes or loc.collector is not None or fn.input_signature is not None or _FLAGS.eager):
            pair = fn._hot_bound.get(id(inst))   # (``Function.__call__``'s steady call, per instance)
            if pair is not None and pair[0] is inst:
                out = fn._steady(pair[1], args)
                if out is not SLOW:
                    return out
        return fn._call((inst,), args, kwargs)   # (an input_signature leaves out the instance)

    def experimental_get_tracing_count(self):
        """This instance's traces (TF: a decorated method is a function per instance)."""
        if self._fn._instance_of(((self._self,), None)) is None:   # (not a weak key: the function's count)
            return self._fn.experimental_get_tracing_count()
        return self._fn._per_instance.get(self._self, 0)

    def get_concrete_function(self, *args, **kwargs):
        from .concrete import concrete_function
        return concrete_function(self._fn, args, kwargs, lead=(self._self,))

    @property
    def python_function(self):
        return self._fn.python_function.__get__(self._self)


__all__ = ["BoundFunction"]
