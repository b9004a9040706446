"""Pending Variable updates: ``v.assign_sub(lr * g)`` on a pending gradient stays pending.

The deferred executor's ``update``: the Variable's value becomes a ``Thunk`` (``defer_update``),
computed with every other pending update, in one program (``compute_pending_updates``), when
any of them is read, or inside the next gradient's own program when the next step's tape
reads the Variable (the read is a ``Pending`` on the thunk: ``Variable._read_deferred``).  A delta whose own op is still pending (``lr * g``) joins the
update as one jitted callable (``fused``), so a step's update program has one node per
Variable.  An update that a gradient's program predicted (``speculate.on_update``) takes that
value at once and leaves nothing pending.

The Variable's update lock (``core.variable.UPDATE_LOCK``) makes each read-modify-write and the
computing of pending updates atomic: concurrent updates are never lost.
"""
import weakref
from typing import Any, Callable

import jax

from ..core.caches import LRU
from ..core.variable import UPDATE_LOCK
from . import speculate
from .thunks import Thunk, aval_for, concrete, force_many

_Array = type(jax.numpy.zeros(()))


#: Variables whose value is a pending update: id -> weak reference (a dropped Variable takes
#: its pending update with it).
_PENDING: "dict[int, weakref.ref]" = {}

#: (update, the delta's op) -> the two as one jitted callable.
_FUSED = LRU("fused_updates", 256)
_FUSED_PEEK = _FUSED._data.get


def fused(op: Callable[..., Any], call: Callable[..., Any]) -> Callable[..., Any]:
    """``op(old, call(*args))`` as one jitted callable: an update whose delta is still pending."""
    key = (op, call)
    fn = _FUSED_PEEK(key)   # a hit does not refresh recency (as the aval cache)
    if fn is None:
        fn = _FUSED.setdefault(key, jax.jit(lambda old, *args: op(old, call(*args))))
    return fn


def compute_pending_updates() -> None:
    """Compute every pending Variable update together (one program, see ``thunks.force_many``)."""
    with UPDATE_LOCK:
        variables = [v for v in [r() for r in _PENDING.values()]
                     if v is not None and type(v._val) is Thunk]
        _PENDING.clear()
        thunks = [v._val for v in variables]
        try:
            force_many(thunks)
        finally:
            for v, th in zip(variables, thunks):
                if v._val is th and th.value is not None:
                    v._val = th.value   # (shared with any Pending read of the update: not owned)


def defer_update(var: Any, op: Callable[..., Any], delta: Any) -> bool:
    """Keep ``var``'s update ``op(value, delta)`` (``delta`` a Pending Tensor) pending: True where
    it did (or a prediction gave its value); False where it must run now (another dtype or
    shape: the eager path raises TF's error; a ``tapejax.function`` tracing, or a value
    committed to a device).  The caller holds ``UPDATE_LOCK`` and checked that deferral is on
    and no function traces."""
    th = delta._thunk
    old = var._val
    if isinstance(old, Thunk):   # one pending update per Variable at most: an earlier one is computed
        old = old.value if old.value is not None else var._value
    aval = th.aval
    if (type(old) is not _Array or aval.dtype != old.dtype or aval.shape != old.shape
            or not concrete((old,))):
        return False
    args = th.args
    if args is not None and th.value is None and th.tag is None:
        # the delta's own op (``lr * g``) goes into the update: one node instead of two in the
        # step's update program (not a gradient's own thunk: see ``speculate``).  The delta's
        # thunk stays as it is: a delta that is read later (rare) is computed on its own then.
        call, vals = fused(op, th.call), (old, *args)
    else:
        call, vals = op, (old, th)
    if speculate.enabled():   # a gradient's update: predicted, or noted for the next call
        value = speculate.on_update(var, call, vals)
        if value is not None:   # the gradient's program computed this very update
            var._val = value
            var._own = None   # (the prediction's records hold it)
            return True
    out = old.aval   # same dtype and shape as the value, which is strongly typed
    if out.weak_type:
        out = aval_for(call, vals)
    th = Thunk(call, vals, out)
    th.group = compute_pending_updates   # computing one computes them all, in one program
    var._val = th
    var._own = None   # the old buffer is the thunk's input
    _PENDING[var._id] = weakref.ref(var)
    return True
