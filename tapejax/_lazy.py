"""Deferred execution of recorded ops: the forward runs inside the compiled gradient.

An eager op costs a JAX dispatch (4-6 µs on a small CPU) whatever its size,
and in a training step most ops are recorded by a tape whose ``gradient``
replays them anyway.  So, while plain ``GradientTape``s record, an op that a
tape records is not dispatched: its result is a ``Pending`` tensor that knows
its shape and dtype (``jax.eval_shape``, cached per op and input signature)
and how to compute its value (a ``_Thunk``: the op's jitted callable and its
input arrays or thunks).  ``tape.gradient`` then computes the targets'
values and the gradients in one compiled program (``_replay``: the replay
form, forward from the true leaves inside ``jax.vjp``), and fills in the
pending targets, e.g. the loss the step prints.

Anything else that needs a pending value (``numpy()``, printing, an op that
is not deferred, a Variable assign, ``jnp.asarray``) *forces* it: the
pending chain runs eagerly, op by op, as it would have without deferral.
Semantics are unchanged: a thunk holds the input *values* (a Variable's
value as it was read), shapes and dtype errors are raised when the op is
called (``eval_shape`` traces the same function the eager call would),
ops that no tape records run at once, and nothing is deferred inside
``tapejax.function`` or control-flow traces, under ``gradient_override_map``,
while any other recorder (a forward accumulator, a custom-gradient trace)
is on the tape stack, or when an input is not a concrete array or is committed to a
device (``jax.device_put``, sharded Variables: their device checks stay eager).

``set_deferred_execution(False)`` (or ``TAPEJAX_DEFERRED=0`` in the
environment) runs every op at once, as before.
"""
import os

import jax
import jax.numpy as jnp

from ._lru import LRU
from ._state import _local, next_id
from ._tensor import Tensor, TensorShape

_Array = type(jnp.zeros(()))   # the concrete array type
_ShapeDtype = jax.ShapeDtypeStruct


class _Flags:
    enabled = os.environ.get("TAPEJAX_DEFERRED", "1").strip().lower() not in ("0", "false", "no", "off")


_flags = _Flags()


def set_deferred_execution(enabled):
    """Turn deferred execution of recorded ops on (the default) or off, for every thread.

    Off, every op is dispatched when it is called (the values are the same;
    only the number of dispatches changes).  Returns the previous setting.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"Argument `enabled` must be a bool; got {enabled!r} of type "
                        f"{type(enabled).__name__}")
    prev = _flags.enabled
    _flags.enabled = enabled
    return prev


def deferred_execution():
    """Whether recorded ops are deferred into the compiled gradient (see ``set_deferred_execution``)."""
    return _flags.enabled


class _Thunk:
    """How to compute one pending value: ``call(*args)``, args being arrays or thunks.

    ``aval`` has the value's shape, dtype and weak type (the attribute name
    arrays use too, so a signature is built the same way for both).
    """

    __slots__ = ("call", "args", "aval", "value", "__weakref__")

    def __init__(self, call, args, aval):
        self.call = call
        self.args = args
        self.aval = aval
        self.value = None

    def set(self, value):
        if self.value is None:
            self.value = value
            self.args = None   # the inputs are no longer needed

    def force(self):
        """The value, computing what is still pending (iteratively: chains may be long)."""
        if self.value is not None:
            return self.value
        stack = [self]
        while stack:
            th = stack[-1]
            if th.value is not None:
                stack.pop()
                continue
            waiting = [a for a in th.args if type(a) is _Thunk and a.value is None]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            th.set(th.call(*[a.value if type(a) is _Thunk else a for a in th.args]))
        return self.value


class Pending(Tensor):
    """A Tensor whose value is computed when first needed (see the module docstring).

    Shape, dtype and rank are known without computing it; anything that reads
    ``_value`` forces it.
    """

    __slots__ = ("_thunk",)

    def __init__(self, thunk):
        self._thunk = thunk
        self._id = next_id()

    @property
    def _value(self):
        th = self._thunk
        v = th.value
        return v if v is not None else th.force()

    @property
    def _meta(self):
        return self._thunk.aval

    @property
    def shape(self):
        return TensorShape(self._thunk.aval.shape)

    @property
    def dtype(self):
        from ._dtypes import as_dtype
        return as_dtype(self._thunk.aval.dtype)

    @property
    def ndim(self):
        return len(self._thunk.aval.shape)


def _flatten(t):
    return (t._value,), None


def _unflatten(_, children):
    return Tensor(children[0])


jax.tree_util.register_pytree_node(Pending, _flatten, _unflatten)


#: (jitted callable, input avals) -> output aval (``jax.eval_shape``).  Bounded.
_AVALS = LRU("deferred_avals", 8192)
_AVAL_PEEK = _AVALS._data.get
_ShapedArray = type(jnp.zeros(()).aval)


def _out_aval(call, args, key):
    out = jax.eval_shape(call, *[_ShapeDtype(a.aval.shape, a.aval.dtype, weak_type=a.aval.weak_type)
                                 for a in args])
    aval = _ShapedArray(out.shape, out.dtype, weak_type=getattr(out, "weak_type", False))
    return _AVALS.setdefault(key, aval)


def aval_for(call, args):
    """The output aval of ``call(*args)`` (arrays or thunks); raises what tracing ``call`` raises."""
    if len(args) == 1:
        key = (call, args[0].aval)
    elif len(args) == 2:
        key = (call, args[0].aval, args[1].aval)
    else:
        key = (call, *[a.aval for a in args])
    a = _AVAL_PEEK(key)
    return a if a is not None else _out_aval(call, args, key)


_TAPE_TYPES = set()   # the recorder types that may defer (plain GradientTape; set by _tape)


def can_defer(tapes):
    """Whether ops recorded by ``tapes`` (this thread's recording tapes, non-empty) may be deferred."""
    if not _flags.enabled or _local.collector is not None or _local.overrides:
        return False
    for t in tapes:
        if type(t) not in _TAPE_TYPES:
            return False
    return True


def concrete(vals):
    """Whether every value is a thunk or a concrete array on the default device, not committed to
    one (what a thunk may take: a committed array keeps its device checks, which run eagerly)."""
    for v in vals:
        tv = type(v)
        if tv is not _Thunk and (tv is not _Array or v.committed):
            return False
    return True


def defer(tapes, prim, call, skey, ids, vals, aval=None):
    """Record ``prim`` (one output; static parameters ``skey`` bound into ``call``) on ``tapes``
    with a pending result.  An op that no tape keeps as a node runs at once."""
    if aval is None:
        aval = aval_for(call, vals)
    th = _Thunk(call, vals, aval)
    result = Pending(th)
    rid = result._id
    kept = False
    for tape in tapes:
        tape._record_simple(prim, skey, ids, vals, result)
        if not kept and rid in tape._codes:
            kept = True
    if not kept:
        th.force()
    return result


def force_all(vals):
    """``vals`` with every thunk replaced by its value."""
    return [v.force() if type(v) is _Thunk else v for v in vals]
