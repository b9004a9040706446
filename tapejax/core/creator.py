"""``tf.variable_creator_scope``: the creator chain every ``tf.Variable(...)`` call runs.

``ScopedCreation`` is ``Variable``'s metaclass (TF's ``VariableMetaclass``): while a
``variable_creator_scope`` is open on this thread, calling the class that declares
``_SCOPED_ROOT`` (``Variable`` itself, not its subclasses, as in TF) calls the innermost creator
as ``creator(next_creator, **kwargs)`` with every argument of ``tf.Variable`` by name; the
last ``next_creator`` makes the Variable.  With no scope open on any thread the call costs
one list read.
"""
import threading
from typing import Any, Callable

_COUNT_LOCK = threading.Lock()   # guards ``_OPEN_SCOPES``
_CREATORS = threading.local()   # ``stack``: this thread's variable creator scopes (innermost last)
_OPEN_SCOPES = [0]              # variable creator scopes open on any thread

#: ``tf.Variable``'s arguments, in order, as a creator receives them (``kwargs``).
_CREATOR_ARGS = ("initial_value", "trainable", "validate_shape", "caching_device", "name", "variable_def", "dtype",
                 "import_scope", "constraint", "synchronization", "aggregation", "shape",
                 "experimental_enable_variable_lifting")
_CREATOR_DEFAULTS = {"trainable": None, "validate_shape": True, "caching_device": None, "name": None,
                     "variable_def": None, "dtype": None, "import_scope": None, "constraint": None,
                     "synchronization": None, "aggregation": None, "shape": None,
                     "experimental_enable_variable_lifting": None}


class ScopedCreation(type):
    """``tf.Variable(...)`` runs this thread's variable creator scopes (``variable_creator_scope``),
    as TF's ``VariableMetaclass``: the innermost creator is called as ``creator(next_creator,
    **kwargs)`` with every argument of ``tf.Variable`` by name; ``next_creator(**kwargs)`` calls the
    next one out, the last makes the Variable.  Subclasses are made directly (as in TF)."""

    def __call__(cls, *args, **kwargs):
        if not _OPEN_SCOPES[0] or "_SCOPED_ROOT" not in cls.__dict__:   # (the common case: one list read)
            return type.__call__(cls, *args, **kwargs)
        stack = getattr(_CREATORS, "stack", None)
        if not stack:   # (scopes open on other threads only)
            return type.__call__(cls, *args, **kwargs)
        if len(args) > len(_CREATOR_ARGS):
            raise TypeError(f"Variable() takes at most {len(_CREATOR_ARGS)} positional arguments; got {len(args)}")
        given: "dict[str, Any]" = dict(zip(_CREATOR_ARGS, args))
        for k in kwargs:
            if k in given:
                raise TypeError(f"Variable() got multiple values for argument '{k}'")
            if k not in _CREATOR_ARGS:
                raise TypeError(f"Variable() got an unexpected keyword argument '{k}'")
        given.update(kwargs)
        full = {k: given.get(k, _CREATOR_DEFAULTS.get(k)) for k in _CREATOR_ARGS}

        def make(**kw):
            return type.__call__(cls, **kw)
        chain = make
        for creator in tuple(stack):   # outermost first: each wraps the next one out
            chain = _next_creator(creator, chain)
        return chain(**full)


def _next_creator(creator: Callable[..., Any], inner: Callable[..., Any]) -> Callable[..., Any]:
    def call(**kwargs):
        return creator(inner, **kwargs)
    return call


class variable_creator_scope:
    """``tf.variable_creator_scope(creator)``: within the block every ``tf.Variable(...)`` call goes
    through ``creator(next_creator, **kwargs)`` (this thread only; scopes nest, the innermost is
    called first).  ``creator`` may change the arguments, make the Variable some other way, or
    return something else in its place."""

    def __init__(self, variable_creator: Callable[..., Any]):
        self._creator = variable_creator

    def __enter__(self):
        stack = getattr(_CREATORS, "stack", None)
        if stack is None:
            stack = _CREATORS.stack = []
        stack.append(self._creator)
        with _COUNT_LOCK:
            _OPEN_SCOPES[0] += 1
        return self

    def __exit__(self, *exc):
        stack = _CREATORS.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self._creator:
                del stack[i]
                break
        with _COUNT_LOCK:
            _OPEN_SCOPES[0] -= 1
        return False
