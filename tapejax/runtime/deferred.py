"""The deferred executor: the forward runs inside the compiled gradient, the updates in one program.

An eager op costs a JAX dispatch (4-6 µs on a small CPU) whatever its size, and in a training
step most ops are recorded by a tape whose ``gradient`` replays them anyway.  So, while plain
``GradientTape``s record, ``DeferredExecutor.run`` does not dispatch an op a tape records: its
result is a ``Pending`` Tensor that knows its shape and dtype (``thunks.aval_for``:
``jax.eval_shape``, cached per op and input signature, which also raises the op's shape and
dtype errors when it is called) and how to compute its value (a ``Thunk``).
``tape.gradient`` then computes the targets' values and the gradients in one compiled program
(``gradient``: the replay's fused form, forward from the true leaves inside ``jax.vjp``) and
fills in the pending targets, e.g. the loss the step prints.

The gradients come back as ``Pending`` Tensors holding their values (``results``).  An op no
tape records on a pending input stays pending too (``lr * g``), and so does a Variable's
``assign_sub``/``assign_add`` with a pending delta (``update``: ``updates.defer_update``).  The
next step's tape reads the Variable and the read stays pending (``read_pending``); its gradient
then computes the pending updates inside its own program (``thunks.call_with_pending``), so a
training step is ONE dispatch.  Where a loop's updates repeat, ``speculate`` goes one step
further (a policy inside this executor: ``gradient`` and ``apply``): the gradient's program
computes this step's updates itself and returns no gradients.

Anything else that needs a pending value (``numpy()``, printing, an op that is not deferred,
``jnp.asarray``) computes it (``thunks.force_many``).  Semantics are unchanged: a thunk holds
its input *values* (a Variable's value as it was read; host data is copied when the op is
called), ops that no tape records and that have no pending input run at once, and nothing is
deferred inside ``tapejax.function`` or control-flow traces, under
``gradient_override_map``, while any other recorder (a forward accumulator, a custom-gradient
trace) is on the tape stack, or when an input is not a concrete array or is committed to a
device (``jax.device_put``, sharded Variables: their device checks stay eager): there it does
what the eager executor does.  NumPy operands (copied by ``bind`` when the op is called) are put
on the device and the op stays pending (``_on_device``), and so do the matrix decompositions
(``core.bind.PureResults``): an op that ran at once would compute its pending inputs op by op,
splitting the step into programs of their own.  What an unread pending value keeps alive is bounded
(``settle``).

``set_deferred_execution(False)`` (or ``TAPEJAX_DEFERRED=0`` in the environment) installs the
eager executor instead.
"""
import weakref
from typing import Any, Sequence

import numpy as np

from ..core.executor import EAGER, Executor, active, install, is_variable, peek, record
from ..core.ownership import commit
from ..core.state import _local, env_flag, next_id, tracing
from ..core.tensor import Pending, Tensor
from ..core.transfer import to_device
from ..core.variable import Variable
from . import prediction, speculate
from .settle import OPEN_MAX, TAPED, note_untaped, settle
from .thunks import (
    _AVAL_PEEK,
    Thunk,
    _Array,
    aval_for,
    avals_for,
    call_with_pending,
    committed,
    concrete,
    force_all,
    valued,
)
from .updates import defer_update

_ref = weakref.ref
_new = object.__new__


def _reads(operands: tuple, vals: tuple, tapes: list) -> "tuple[tuple, tuple, list]":
    """(ids, values) of a deferred op's operands, its Variables read now (each read recorded;
    a pending update stays pending), and those Variables (the op's thunk is lent their buffers:
    ``Variable._lend``)."""
    ids = []
    out = list(vals)
    read = []
    for k, x in enumerate(operands):
        t = type(x)
        if t is Tensor or t is Pending:
            ids.append(x._id)
        elif t is _Array:
            ids.append(0)
        elif is_variable(x):
            r = x._read_deferred(tapes)
            ids.append(r._id)
            out[k] = peek(r)
            read.append(x)
        else:
            ids.append(x._id if isinstance(x, Tensor) else 0)
    return tuple(ids), tuple(out), read


class DeferredExecutor(Executor):
    """See the module docstring."""

    name = "deferred"

    def run(self, tapes, prim, call, skey, operands):
        if prim.jit and not prim.multiple_results:
            if tapes:
                if _local.defers:   # (only plain tapes record, nothing traces: ``core.state``)
                    n = len(operands)
                    if n == 2:
                        return self.run2(tapes, prim, call, operands[0], operands[1], skey)
                    if n == 1:
                        return self.run1(tapes, prim, call, skey, operands[0])
                    out = _small_n(tapes, prim, call, skey, operands)
                    if out is not None:
                        return out
            elif _local.collector is None:
                vals = tuple([peek(x) for x in operands])
                for v in vals:
                    if type(v) is Thunk:   # an op on a pending value: stays pending
                        if _NDArray in [type(u) for u in vals]:
                            vals = tuple([_on_device(u) if type(u) is _NDArray else u for u in vals])
                        if concrete(vals):
                            for x in operands:
                                if is_variable(x):
                                    x._share()   # (a pending op's input: no longer the Variable's alone)
                            return _defer_untaped(call, vals)
                        break
        elif _local.defers and getattr(prim, "deferred_results", False):
            out = _defer_many(tapes, prim, call, skey, operands)
            if out is not None:
                return out
        return EAGER.run(tapes, prim, call, skey, operands)

    # The ops of a training step's forward (``bind1`` / ``bind2``; ``run`` for one or two operands):
    # the deferred case written out, without ``run``'s tuple of operands.  The operands: Tensors,
    # pending Tensors, Variables, constant and NumPy arrays; another kind, or an operand that may
    # not be deferred (a committed array), and the op runs as the eager executor runs it, nothing
    # read or recorded before that.  (``run2``'s ``skey``: ``run``'s static parameters; ``bind2``'s
    # ops have none.)
    def run1(self, tapes, prim, call, skey, x):
        if not (_local.defers and prim.jit):
            if not tapes and type(x) is Variable and _local.collector is None:
                out = _now(call, (x,))   # (an op on a Variable, no tape: ``tf.tanh(v)`` in an evaluation)
                if out is not None:
                    return out
            return self.run(tapes, prim, call, skey, (x,))   # (``run`` checks both before it comes here)
        tx = type(x)
        if tx is Tensor:
            vx = x._value
        elif tx is Pending:
            vx = x._thunk
        elif tx is Variable:
            vx = x._val
        elif tx is _Array:
            vx = x
        elif tx is _NDArray:
            vx = _on_device(x)   # (then a constant: id 0, as an array operand)
            if vx is None:
                return EAGER.run(tapes, prim, call, skey, (x,))
            tx = _Array
        elif issubclass(tx, Tensor):   # a subclass: a Variable's slice (``ops.indexing``)
            vx = x._thunk if issubclass(tx, Pending) else x._value
        else:
            return EAGER.run(tapes, prim, call, skey, (x,))
        t = type(vx)
        if t is not Thunk and (t is not _Array or committed(vx)):
            return EAGER.run(tapes, prim, call, skey, (x,))
        aval = _AVAL_PEEK((call, vx.aval))
        if aval is None:
            aval = aval_for(call, (vx,))   # raises what the call would, before any read
        if tx is Variable:
            var = x
            x = x._read_deferred(tapes)
            vx = x._thunk if type(x) is Pending else x._value
            out = _defer(tapes, prim, call, skey, (x._id,), (vx,), aval)
            var._lend(out._thunk)
            return out
        if tx is _Array:
            return _defer(tapes, prim, call, skey, (0,), (vx,), aval)
        return _defer(tapes, prim, call, skey, (x._id,), (vx,), aval)

    def run2(self, tapes, prim, call, x, y, skey=()):
        if not (_local.defers and prim.jit):
            if not tapes and _local.collector is None:
                # ``lr * g`` on a gradient stays pending; ``v * x`` on a Variable runs now
                out = _untaped2(call, x, y) if prim.jit else None
                if out is None and (type(x) is Variable or type(y) is Variable):
                    out = _now(call, (x, y))
                if out is not None:
                    return out
            return self.run(tapes, prim, call, skey, (x, y))
        tx = type(x)
        if tx is Tensor:
            vx = x._value
        elif tx is Pending:
            vx = x._thunk
        elif tx is Variable:
            vx = x._val
        elif tx is _Array:
            vx = x
        elif tx is _NDArray:
            vx = _on_device(x)   # (then a constant: id 0, as an array operand)
            if vx is None:
                return EAGER.run(tapes, prim, call, skey, (x, y))
            tx = _Array
        elif issubclass(tx, Tensor):   # a subclass: a Variable's slice (``ops.indexing``)
            vx = x._thunk if issubclass(tx, Pending) else x._value
        else:
            return EAGER.run(tapes, prim, call, skey, (x, y))
        t = type(vx)
        if t is not Thunk and (t is not _Array or committed(vx)):
            return EAGER.run(tapes, prim, call, skey, (x, y))
        ty = type(y)
        if ty is Tensor:
            vy = y._value
        elif ty is Pending:
            vy = y._thunk
        elif ty is Variable:
            vy = y._val
        elif ty is _Array:
            vy = y
        elif ty is _NDArray:
            vy = _on_device(y)
            if vy is None:
                return EAGER.run(tapes, prim, call, skey, (x, y))
            ty = _Array
        elif issubclass(ty, Tensor):
            vy = y._thunk if issubclass(ty, Pending) else y._value
        else:
            return EAGER.run(tapes, prim, call, skey, (x, y))
        t = type(vy)
        if t is not Thunk and (t is not _Array or committed(vy)):
            return EAGER.run(tapes, prim, call, skey, (x, y))
        aval = _AVAL_PEEK((call, vx.aval, vy.aval))
        if aval is None:
            aval = aval_for(call, (vx, vy))   # raises what the call would, before any read
        if tx is Variable:
            xv = x
            x = x._read_deferred(tapes)
            vx = x._thunk if type(x) is Pending else x._value
        if ty is Variable:
            yv = y
            y = y._read_deferred(tapes)
            vy = y._thunk if type(y) is Pending else y._value
        out = _defer(tapes, prim, call, skey, (0 if tx is _Array else x._id, 0 if ty is _Array else y._id),
                     (vx, vy), aval)
        if tx is Variable:   # (the op's thunk holds the buffers the reads lent: ``Variable._lend``)
            xv._lend(out._thunk)
        if ty is Variable:
            yv._lend(out._thunk)
        return out

    def read_pending(self, var, lazy, tapes):
        if _local.defers:
            # a pending update read by a recording tape stays pending: the gradient computes
            # it in its own program (``thunks.call_with_pending``)
            return Pending(lazy)
        return Tensor(var._value)

    def update(self, var, op, delta, op_type):
        if type(delta) is Pending and _local.collector is None and defer_update(var, op, delta):
            return
        EAGER.update(var, op, delta, op_type)

    def apply(self, update):
        if speculate.enabled():
            new = speculate.on_apply(update.fn, update.state, update.grads, update.extra)
            if new is not None:   # (the prediction's records hold these values: not owned)
                commit(update.state, update.constrained, lambda vals, shared: new, owned=False)
                return
        EAGER.apply(update)

    def gradient(self, entry, leaves, given):
        if not entry.fused:
            return results(entry.fn(tuple(force_all(leaves)), given)), None
        track = speculate.track(entry) if speculate.enabled() else None
        if track is not None and speculate.predicts(track, entry.n_grads):
            out = prediction.run_predicted(track, entry, leaves, given)
            if out is not None:   # the step's updates predicted: computed here, the gradients not returned
                values, grads = out
                return grads, values
        out = None
        for v in leaves:
            if type(v) is Thunk:   # pending values (a Variable's update): computed in the same program
                out = call_with_pending(entry, entry.raw, leaves, given)
                if out is None:
                    leaves = tuple(force_all(leaves))
                break
        grads, values = entry.fn(leaves, given) if out is None else out
        res = results(grads)
        if track is not None:
            speculate.tag_results(res, entry, track)
        return res, values


def results(values: Sequence[Any]) -> tuple:
    """A gradient call's arrays as ``Pending`` Tensors that hold them (``thunks.valued``), so that
    untaped ops on them (``lr * g``) and a Variable update with them stay pending and run as one
    program.  A gradient call ends a step: ``settle``."""
    out = []
    for v in values:
        if type(v) is _Array:
            out.append(Pending(valued(v)))
        else:
            out.append(Tensor(v))
    settle()   # the end of a step: values of earlier steps nobody read are computed now
    return tuple(out)


def _small_n(tapes, prim, call, skey, operands):
    """``run``'s deferred case for any number of operands (Tensors, pending Tensors, Variables
    whose value an op may take before the read, constant and NumPy arrays).  None where one is
    of another kind or may not be deferred; nothing is read or recorded before that."""
    vals = []
    reads = False
    for x in operands:
        tx = type(x)
        if tx is Tensor:
            v = x._value
        elif tx is Pending:
            v = x._thunk
        elif tx is _Array:
            v = x
        elif tx is _NDArray:
            v = _on_device(x)   # (then a constant: id 0, as an array operand)
        elif is_variable(x) and x._peekable:
            v = x._val
            reads = True
        elif issubclass(tx, Tensor):   # a subclass: a Variable's slice (``ops.indexing``)
            v = x._thunk if issubclass(tx, Pending) else x._value
        else:
            return None
        t = type(v)
        if t is not Thunk and (t is not _Array or committed(v)):
            return None
        vals.append(v)
    vals = tuple(vals)
    aval = aval_for(call, vals)   # raises what the call would, before any read
    if not reads:
        ids = tuple([x._id if isinstance(x, Tensor) else 0 for x in operands])
        return _defer(tapes, prim, call, skey, ids, vals, aval)
    ids, vals, read = _reads(operands, vals, tapes)
    out = _defer(tapes, prim, call, skey, ids, vals, aval)
    for var in read:
        var._lend(out._thunk)
    return out


_NDArray = np.ndarray


def _on_device(a):
    """A host operand (NumPy data, which ``bind`` has copied: ``core.tensor.host_snapshot``) as a
    constant device array, so the op can stay pending: otherwise it would run now, computing its
    pending inputs op by op, outside the gradient's program (a loss on NumPy labels split a
    training step into several programs).  The transfer is the one the op's call would make.
    None (stays a host array: the op runs now, as the eager executor runs it) for data JAX does
    not hold (strings, objects)."""
    if a.dtype.kind not in "biufc":
        return None
    return to_device(a)


def _defer(tapes, prim, call, skey, ids, vals, aval):
    """Record ``prim`` (one output; static parameters ``skey`` bound into ``call``) on ``tapes``
    with a pending result.  An op that no tape keeps as a node (no gradient: an accuracy's
    ``argmax``; not connected to a watched value) runs at once on computed inputs; on a pending
    input (the step's logits) it stays pending as an untaped op does, so that a metric inside
    the tape does not compute the forward apart from the gradient's program."""
    th = Thunk(call, vals, aval)
    result = _new(Pending)   # ``Pending(th)``, written out (a forward op's hot path)
    result._thunk = th
    result._id = next_id()
    kept = False
    for tape in tapes:   # (plain tapes: each says whether it keeps the op)
        if tape._record_simple(prim, skey, ids, vals, result):
            kept = True
    if not kept:
        for a in vals:
            if type(a) is Thunk and a.value is None:
                for b in vals:
                    if type(b) is Thunk:
                        b.used = True
                note_untaped(result, th)
                return result
        if tracing():   # (a value computed now is computed outside the trace: ``force_many``)
            th.force()
        else:   # (computed inputs: the op alone, without walking a graph of one)
            th.set(call(*[a.value if type(a) is Thunk else a for a in vals]))
        return result
    for a in vals:
        if type(a) is Thunk:
            a.used = True
    th.owner = tapes   # (noted for ``settle``)
    th.held = _ref(result)   # (whether the user may still read it: ``autodiff.gradient``)
    TAPED.append(_ref(th))
    if len(TAPED) > OPEN_MAX:
        settle(everyone=True)
    return result


def _defer_many(tapes, prim, call, skey, operands):
    """A recorded op of several outputs that declares itself pure (``prim.deferred_results``: a
    nested gradient, ``autodiff.replay``; a matrix decomposition, ``core.bind.PureResults``) left pending like a one-output op: one thunk computes
    its outputs (a tuple), one thunk per output takes its own (``prediction._PICKS``).  None where
    an operand may not be deferred (the caller runs it eagerly)."""
    if any([not x._peekable for x in operands if is_variable(x)]):
        return None
    vals = tuple([_on_device(v) if type(v) is _NDArray else v for v in [peek(x) for x in operands]])
    if not concrete(vals):
        return None
    avals = avals_for(call, vals)   # raises what the call would, before any read
    ids, vals, read = _reads(operands, vals, tapes)
    group = Thunk(call, vals, avals)
    for var in read:
        var._lend(group)
    picks = [Thunk(prediction._PICKS[j], (group,), a) for j, a in enumerate(avals)]
    result = tuple([Pending(th) for th in picks])
    record(tapes, prim, skey, ids, vals, result)
    if not any([o._id in t._codes for t in tapes for o in result]):   # no tape keeps it: now
        out = group.force()
        assert out is not None   # (a multi-output op's values)
        for th, v in zip(picks, out):
            th.set(v)
        return result
    for a in vals:
        if type(a) is Thunk:
            a.used = True
    group.used = True
    group.owner = tapes
    for o, th in zip(result, picks):
        th.owner = tapes
        th.held = _ref(o)
        TAPED.append(_ref(th))
    if len(TAPED) > OPEN_MAX:
        settle(everyone=True)
    return result


def _now(call, operands):
    """An op no tape records and no function traces, on Tensors, constant arrays and Variables
    whose value is a concrete array, run now: what ``EagerExecutor.run`` does without its
    Variable reads (a read hands the buffer out; the op keeps none of it, unless its result is
    that very buffer, which is then handed out).  None for other operands (``run`` decides)."""
    vals = []
    for a in operands:
        t = type(a)
        if t is Tensor:
            vals.append(a._value)
        elif t is _Array:
            vals.append(a)
        elif t is Variable and type(a._val) is _Array:
            vals.append(a._val)
        else:
            return None
    out = call(*vals)
    for a, v in zip(operands, vals):
        if out is v and type(a) is Variable:   # (an identity-like op gave the buffer back)
            a._own = None
            a._lent = None
    return Tensor(out)


def _untaped2(call, x, y):
    """``run``'s untaped case for two operands, written out (an update's ``lr * g``): a pending
    result where a Pending Tensor is one of them and the other a Tensor, a Pending Tensor or a
    constant array (concrete, uncommitted); None for anything else (``run`` then decides)."""
    tx, ty = type(x), type(y)
    if tx is Pending:
        vx = x._thunk
        vy = y._thunk if ty is Pending else y._value if ty is Tensor else y if ty is _Array else None
    elif ty is Pending:
        vy = y._thunk
        vx = x._value if tx is Tensor else x if tx is _Array else None
    else:
        return None
    if vx is None or vy is None:
        return None
    t = type(vx)   # (``concrete``, written out)
    if t is not Thunk and (t is not _Array or committed(vx)):
        return None
    t = type(vy)
    if t is not Thunk and (t is not _Array or committed(vy)):
        return None
    aval = _AVAL_PEEK((call, vx.aval, vy.aval))
    if aval is None:
        aval = aval_for(call, (vx, vy))   # raises what the call would
    th = Thunk(call, (vx, vy), aval)
    result = _new(Pending)
    result._thunk = th
    result._id = next_id()
    if type(vx) is Thunk:
        vx.used = True
    if type(vy) is Thunk:
        vy.used = True
    note_untaped(result, th)
    return result


def _defer_untaped(call, vals):
    """An op no tape records, on a pending input: its result stays pending, so a chain on a
    gradient (``lr * g``, a Variable update with it) runs as one program."""
    th = Thunk(call, vals, aval_for(call, vals))
    result = Pending(th)
    for a in vals:
        if type(a) is Thunk:
            a.used = True
    note_untaped(result, th)
    return result


DEFERRED = DeferredExecutor()


def set_deferred_execution(enabled: bool) -> bool:
    """Turn deferred execution of recorded ops on (the default) or off, for every thread.

    Off, every op is dispatched when it is called (the values are the same; only the number of
    dispatches changes).  Returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"Argument `enabled` must be a bool; got {enabled!r} of type "
                        f"{type(enabled).__name__}")
    prev = install(DEFERRED if enabled else EAGER)
    return prev is DEFERRED


def deferred_execution() -> bool:
    """Whether recorded ops are deferred into the compiled gradient (see ``set_deferred_execution``)."""
    return active() is DEFERRED


install(DEFERRED if env_flag("TAPEJAX_DEFERRED") else EAGER)

__all__ = ["DeferredExecutor", "DEFERRED", "deferred_execution", "results",
           "set_deferred_execution"]
