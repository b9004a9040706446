"""A compiled specialisation of a ``tapejax.function`` (``Entry``) and how a call runs it.

``run_entry`` is the general call: each assigned Variable's value is donated (a copy where the
Variable does not own its buffer, ``Variable.owns_buffer``, or where the program calls back into
Python or checks at run time), the program runs, and its new values are written back
(``ownership.write_back``: a Variable owns a new value nobody else holds) as one unit that a
Ctrl-C cannot split (``ownership.deferred_interrupts``); a failed run-time check is raised
after the write-back (``ops.checks.raise_if_failed``), as TF's failed ``Assert``.

``run_fast`` is the steady call of a plain program (no run-time check, no host callback, no
mesh) on plain ``Variable``s whose new values are all buffers the program makes
(``tracing.fresh_outputs``, decided once from the jaxpr): from the entry's second call
(``fast_ready``), when every assigned Variable owns its value (as the previous call left
it), the values go in as they are and the write-back is C loops (``setattr`` over ``map``)
after the call's result was stored by a C loop too: a KeyboardInterrupt arriving after the
call is raised after the write-back, as ``deferred_interrupts`` delivers it, without swapping
the signal handler twice per call.  It gives ``run_entry``'s values and ownership records
(``tests/test_function.py``).
"""
from __future__ import annotations

import collections
import itertools
import re
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp

from ..core import transfer
from ..core.bind import REGISTRY
from ..core.errors import NumericsError, compiled_numerics_error
from ..core.ownership import deferred_interrupts, write_back
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops.checks import raise_if_failed
from . import polymorphism
from .host import take_error
from .sharding import MeshPlan
from .signature import DYN, LeafSpec, fill


class Entry:
    """One compiled specialisation: the program, its Variables and output structure."""

    __slots__ = ("jitted", "rw", "ro", "out_tpl", "n_out", "template", "in_shardings", "prim", "copies",
                 "checked", "plain", "specs", "plan", "fresh", "fast")

    def __init__(self, jitted, rw, ro, out_tpl, n_out, tpl, copies, checked, specs, plan, fresh=None):
        self.jitted = jitted
        self.rw = rw
        self.ro = ro
        self.out_tpl = out_tpl
        self.n_out = n_out
        self.template = tpl
        self.copies = copies      # the program calls back into Python or checks: donate copies
        self.checked = checked    # the program returns a checkify error first
        self.plain = not (copies or checked)
        self.specs: Sequence[LeafSpec] = specs   # the dynamic leaves it accepts
        self.plan: Optional[polymorphism.Plan] = plan
        self.in_shardings: Any = None
        self.prim: Any = None     # the recorded op, made on the first call from inside a tape
        # which new values of ``rw`` are buffers the program makes (``tracing.fresh_outputs``)
        self.fresh: Optional[Sequence[bool]] = fresh
        self.fast = False         # the steady call takes ``run_fast`` (from the second call)

    def accepts(self, avals) -> bool:
        """Whether a call whose dynamic leaves have ``avals`` can run this program."""
        if self.plan is not None:
            return self.plan.accepts(avals)
        return len(avals) == len(self.specs) and all(s.accepts_aval(a) for s, a in zip(self.specs, avals))


def _internal_fp_error() -> "type[Exception]":
    """What JAX's NaN/Inf checks raise inside a nested jit (FloatingPointError at top level)."""
    try:
        from jax._src.api_util import InternalFloatingPointError
        return InternalFloatingPointError
    except ImportError:  # pragma: no cover - another JAX: nothing of that name to translate
        return type("_NoSuchError", (Exception,), {})


InternalFloatingPointError = _internal_fp_error()


def floating_point_error(e: Exception) -> FloatingPointError:
    """JAX's NaN/Inf debugging (``enable_check_numerics``) found a NaN or Inf in a compiled
    step: TF's error (``NumericsError``, an ``InvalidArgumentError`` that is also JAX's
    ``FloatingPointError``) in TF's graph-execution shape, naming the op when JAX names the
    op's own jitted function (``jit(Log_kinds)``: op type ``Log``)."""
    if isinstance(e, NumericsError):
        return e
    name = str(e.args[0]) if e.args else ""
    m = re.fullmatch(r"jit\((\w+?)(?:_kinds|_plain)?\)", name)
    op = m.group(1) if m is not None and m.group(1) in REGISTRY else None
    return compiled_numerics_error(e, "a tapejax.function step", op)


_Array = type(jnp.zeros(()))   # the concrete array type
_starmap = itertools.starmap
_consume = collections.deque(maxlen=0).extend   # runs an iterator to its end, in C
_VAL = itertools.repeat("_val")
_OWN = itertools.repeat("_own")


def fast_ready(entry: Entry) -> None:
    """Let ``entry``'s next calls take ``run_fast`` when its Variables are plain
    ``Variable``s (a subclass may read or write its value its own way) and every new value is a
    buffer the program makes (so each Variable owns its new value, as ``write_back`` would find:
    a program that passes an argument through, or returns one value twice, keeps the slow
    path's identity checks)."""
    if (entry.fresh is not None and all(entry.fresh) and all(type(v) is Variable for v in entry.rw)
            and all(type(v) is Variable for v in entry.ro)):
        entry.fast = True


def run(entry: Entry, dyn):
    """Run ``entry`` on the dynamic leaves ``dyn``: the fast path once it applies (``fast_ready``),
    else ``run_entry``; JAX's NaN/Inf debugging error as the one it raises at top level."""
    try:
        if entry.fast:
            return run_fast(entry, dyn)
        out = run_entry(entry, dyn)
        if entry.plain and entry.fresh is not None and entry.in_shardings is None:
            fast_ready(entry)   # JAX has compiled it: the next calls may take the fast path
        return out
    except (InternalFloatingPointError, FloatingPointError) as e:
        raise floating_point_error(e) from e
    except jax.errors.JaxRuntimeError as e:   # a py_function's error in its host callback: TF's class
        err = take_error(e)
        if err is None:
            raise
        raise err from None

def run_fast(entry: Entry, dyn):
    """``run_entry`` for the steady call of a plain program whose Variables are plain
    ``Variable``s holding arrays, the assigned ones owning theirs (as the previous call left
    them): their values go to the program as they are and its new values are written back
    with C-level loops.  A Ctrl-C cannot split the call and the write-back: the call's
    result is stored by a C loop (``list.extend`` over ``starmap``) before any Python
    bytecode runs, and a KeyboardInterrupt raised right after it finds the write-back in the
    ``finally`` block, one C call that no signal handler interrupts; it is raised after it,
    as ``deferred_interrupts`` does.  Anything else takes ``run_entry``."""
    rw = entry.rw
    rw_vals = []
    for v in rw:
        x = v._val
        if x is not v._own or type(x) is not _Array:   # (not its own, or a pending update)
            return run_entry(entry, dyn)
        rw_vals.append(x)
    ro_vals = []
    for v in entry.ro:
        x = v._val
        if type(x) is not _Array:   # (a pending update)
            return run_entry(entry, dyn)
        ro_vals.append(x)
    if rw:
        box: list = []
        try:
            box.extend(_starmap(entry.jitted, ((rw_vals, ro_vals, dyn),)))
        finally:
            if box:
                outs, new = box[0]
                _consume(map(setattr, rw, _VAL, new))
                _consume(map(setattr, rw, _OWN, new))   # (each a fresh buffer: its Variable's own)
    else:
        outs = entry.jitted(rw_vals, ro_vals, dyn)[0]
    tpl = entry.out_tpl
    if tpl is DYN:
        return Tensor(outs[0])
    if tpl is None:
        return None
    return fill(tpl, iter([Tensor(o) for o in outs]))

def run_entry(entry: Entry, dyn):
    """One call of ``entry``: the Variables' values in (a copy of each one it does not own), the
    program, the write-back of the new values (``ownership.write_back``), the outputs."""
    rw = entry.rw
    rw_vals = [v._value for v in rw]
    copy_all = entry.copies
    for i, v in enumerate(rw):
        # A value the Variable does not own (a read, a Tensor the user kept, a pending
        # value's input, another Variable may hold it: ``Variable.owns_buffer``) must
        # survive the call: donate a copy.  A program that calls back into Python or checks
        # at run time can fail after its inputs were donated: it always gets copies.
        if copy_all or not v.owns_buffer():
            rw_vals[i] = transfer.copy(rw_vals[i])
    ro_vals = [v._value for v in entry.ro]
    if entry.in_shardings is not None:
        dyn = MeshPlan.place_inputs(dyn, entry.in_shardings)
    if entry.plain:   # (the common case inline: no run-time check or host callback)
        if rw:
            # Ctrl-C cannot split the call (which consumed the old values) and the write-back.
            with deferred_interrupts():
                outs, new_rw = entry.jitted(rw_vals, ro_vals, dyn)
                # each Variable owns its new value unless the program passed an input through
                # (an unassigned path) or returned it twice (also as an output, or to another
                # Variable)
                write_back(rw, new_rw, itertools.chain(rw_vals, ro_vals, dyn), outs)
        else:
            outs = entry.jitted(rw_vals, ro_vals, dyn)[0]
    elif rw:
        with deferred_interrupts():
            outs, new_rw, err = call_checked(entry, rw_vals, ro_vals, dyn)
            write_back(rw, new_rw, itertools.chain(rw_vals, ro_vals, dyn), outs)
        # as TF's failed Assert: the step's Variable updates happened, then the step raises
        raise_if_failed(err)
    else:
        outs, _, err = call_checked(entry, rw_vals, ro_vals, dyn)
        raise_if_failed(err)
    tpl = entry.out_tpl
    if tpl is DYN:
        return Tensor(outs[0])
    if tpl is None:
        return None
    return fill(tpl, iter([Tensor(o) for o in outs]))

def call_checked(entry: Entry, rw_vals, ro_vals, dyn):
    """Run a program that checks at run time (``tapejax.debugging``, the value checks of
    ``ops.checks``, converted asserts) or calls back into Python: (outputs, new Variable
    values, the checkify error or None); the caller writes back, then raises a failed check
    (``ops.checks.raise_if_failed``)."""
    err = None
    if entry.checked:
        err, (outs, new_rw) = entry.jitted(rw_vals, ro_vals, dyn)
    else:
        outs, new_rw = entry.jitted(rw_vals, ro_vals, dyn)
    if entry.copies:
        jax.effects_barrier()   # its prints have happened when the call returns (TF)
    return outs, new_rw, err


__all__ = ["Entry", "InternalFloatingPointError", "call_checked", "fast_ready", "floating_point_error", "run", "run_entry",
           "run_fast"]
