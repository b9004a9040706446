"""A compiled specialisation of a ``tapejax.function`` (``Entry``) and how a call runs it.

``run_entry`` is the general call: each assigned Variable's value is donated (a copy where the
Variable does not own its buffer, ``Variable.owns_buffer``, or where the program calls back into
Python or checks at run time), the program runs, and its new values are written back
(``ownership.write_back``: a Variable owns a new value nobody else holds) as one unit that a
Ctrl-C cannot split (``ownership.deferred_interrupts``); a failed run-time check is raised
after the write-back (``ops.checks.raise_if_failed``), as TF's failed ``Assert``.

The program is flat: ``jitted(*rw values, *ro values, *dynamic leaves) -> (*outputs, *new rw
values)``, the ``rw`` values donated, so that JAX's C++ dispatch takes a call of arrays.

``run_fast`` is the steady call of a plain program (no run-time check, no host callback, no
mesh) on plain ``Variable``s (or of a subclass in ``ownership.SLOT_GUARDS``, while its guard says
so: a Keras variable outside a Keras scope) whose new values are all buffers the program makes
(``tracing.fresh_outputs``, decided once from the jaxpr): from the entry's second call
(``fast_ready``), ``Entry.steady`` is a function written for that entry (``steady_call``: its
Variables, program and output template bound, every loop over the Variables unrolled), and
``tensors_call`` writes the same for a call of Tensors only (``Function.__call__``'s steady
call: the Tensors' avals compared with the entry's key, which is the key lookup for that call).
When every assigned Variable owns its value (as the previous call left it) and every value is a
concrete array, the values go in as they are; the call's result is stored by a C loop and the
write-back is straight-line attribute stores, which CPython runs without delivering a signal
between them: a KeyboardInterrupt arriving after the call is raised after the write-back, as
``deferred_interrupts`` delivers it, without swapping the signal handler twice per call.
Anything else declines (``SLOW``, nothing having run) and takes ``run_entry``.  Both give
``run_entry``'s values and ownership records (``tests/test_function.py``).
"""
from __future__ import annotations

import itertools
import re
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

from ..core import transfer
from ..core.bind import REGISTRY, bind
from ..core.convert import convert_to_tensor
from ..core.errors import NumericsError, compiled_numerics_error
from ..core.ownership import SLOT_GUARDS, deferred_interrupts, write_back
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..core.variable_shape import shape_changed
from ..ops.checks import raise_if_failed
from . import polymorphism
from .host import take_error
from .sharding import MeshPlan
from .signature import DYN, LeafSpec, fill


def cut_unconnected(entry: "Entry", inputs: list) -> list:
    """The inputs of a program recorded as one op (``Function._call_under_tape``), each one that no
    output reaches (``Entry.connected``) read through ``StopGradient``: TF gives its source ``None``
    (a Variable read only under ``stop_gradient``, or read and unused), the op's VJP a zero."""
    if False not in entry.connected:
        return inputs
    from ..autodiff.custom import _STOP  # (imported where used, as function.py's graph_mode)
    return [x if c else bind(_STOP, convert_to_tensor(x)) for x, c in zip(inputs, entry.connected)]


class Entry:
    """One compiled specialisation: the program, its Variables and output structure."""

    __slots__ = ("jitted", "rw", "ro", "out_tpl", "n_out", "template", "in_shardings", "prim", "copies",
                 "checked", "plain", "specs", "plan", "fresh", "steady", "hot", "guards", "prim_errors",
                 "callbacks", "reshapes", "connected")

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
        self.prim_errors: list = []   # a checked program's op: [its error's treedef, its leaf count]
        self.callbacks = copies       # it calls back into Python (``copies`` also counts checks)
        # which new values of ``rw`` are buffers the program makes (``tracing.fresh_outputs``)
        self.fresh: Optional[Sequence[bool]] = fresh
        # the steady call (``steady_call``), set from the second call when it applies (``fast_ready``)
        self.steady: Optional[Callable[[Sequence[Any]], Any]] = None
        # its steady calls for calls of Tensors only (``tensors_call``) by their number
        self.hot: Dict[int, Callable[[tuple], Any]] = {}
        # what the steady calls ask first (``ownership.SLOT_GUARDS``: the Variables' subclasses')
        self.guards: tuple = ()
        # the positions in ``rw`` whose new value has another shape than the value read (a Variable
        # with a declared shape such as ``[None, 2]`` grown by the step): each call then tells
        # ``core.variable_shape.shape_changed``, and the next call traces again at the new shape
        self.reshapes: Tuple[int, ...] = ()
        # per input of ``(*ro, *dyn)``: can a gradient reach it from an output (``tracing.connected_inputs``)
        self.connected: Tuple[bool, ...] = ()

    @property
    def fast(self) -> bool:
        """Whether the steady call takes the fast path (``run_fast``)."""
        return self.steady is not None

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


def fast_ready(entry: Entry) -> None:
    """Let ``entry``'s next calls take ``run_fast`` when its Variables are plain ``Variable``s or
    of a subclass in ``ownership.SLOT_GUARDS`` (another subclass may read or write its value its
    own way; a guard is called on each steady call, which declines when one says False) and every
    new value is a buffer the program makes (so each Variable owns its new value, as
    ``write_back`` would find: a program that passes an argument through, or returns one value
    twice, keeps the slow path's identity checks)."""
    if entry.fresh is None or not all(entry.fresh) or entry.reshapes:
        return
    guards: list = []
    for v in (*entry.rw, *entry.ro):
        cls = type(v)
        if cls is not Variable:
            guard = SLOT_GUARDS.get(cls)
            if guard is None:
                return
            if guard not in guards:
                guards.append(guard)
    entry.guards = tuple(guards)
    entry.steady = steady_call(entry)


#: What ``Entry.steady`` returns when a Variable does not own its value or holds no array (a
#: pending update, a read handed out): the call then takes ``run_entry``, nothing having run.
SLOW = type("SLOW", (), {"__repr__": lambda self: "SLOW", "__slots__": ()})()


def steady_call(entry: Entry) -> Callable[[Sequence[Any]], Any]:
    """``entry``'s steady call as a function of its dynamic leaves (a list of arrays).

    Written for the entry's Variables (``v0 ...`` assigned, ``r0 ...`` only read), program and
    output template; for two dynamic leaves, two assigned Variables and one read it is::

        def steady(dyn):
            x0, x1 = dyn
            if type(x0) is not _Array or type(x1) is not _Array:
                return SLOW
            a0 = v0._val
            if a0 is not v0._own or type(a0) is not _Array:
                return SLOW
            a1 = v1._val
            ...
            b0 = r0._val
            if type(b0) is not _Array:
                return SLOW
            box = []
            try:
                box.extend(_starmap(jitted, ((a0, a1, b0, x0, x1),)))
            finally:
                if box:
                    o0, n0, n1 = box[0]
                    v0._val = n0
                    v0._own = n0
                    v1._val = n1
                    v1._own = n1
            return Tensor(o0)

    Where the entry has Variables of a registered subclass (``fast_ready``), the body starts by
    calling their guards (``if not g0(): return SLOW``).

    The compiled call's result is stored by a C loop (``list.extend`` over ``starmap``) before
    any bytecode runs, and a KeyboardInterrupt raised right after it finds the write-back in the
    ``finally`` block: attribute stores of slots, between which CPython delivers no signal (it
    does so at calls and backward jumps; a ``Variable``'s slots run no Python code).  Each new
    value is a fresh buffer (``fast_ready``): its Variable's own."""
    n = len(entry.specs)
    head = [f"{_names('x', n)}, = dyn" if n else "if dyn:", *([] if n else ["    return SLOW"])]
    if n:
        head += [f"if {' or '.join(f'type(x{i}) is not _Array' for i in range(n))}:", "    return SLOW"]
    return _written(entry, "dyn", head, n, {})


def tensors_call(entry: Entry, avals: Sequence[Any]) -> Callable[[tuple], Any]:
    """``entry``'s steady call as a function of a call's positional arguments, for an entry keyed
    by Tensors only, ``avals`` the key's (their values' avals): ``steady_call`` preceded by the
    key lookup written out.  Arguments that are not that many Tensors holding concrete arrays
    whose avals equal ``avals`` (the key's equality: by identity first, as a dict compares keys)
    decline (``SLOW``)::

        def steady(args):
            if len(args) != 2:
                return SLOW
            t0, t1 = args
            if type(t0) is not Tensor or type(t1) is not Tensor:
                return SLOW
            x0 = t0._value
            if type(x0) is not _Array:
                return SLOW
            c = x0.aval
            if c is not k0 and c != k0:
                return SLOW
            ...   (``steady_call``'s body)
    """
    n = len(avals)
    head = [f"if len(args) != {n}:", "    return SLOW"]
    if n:
        head += [f"{_names('t', n)}, = args",
                 f"if {' or '.join(f'type(t{i}) is not Tensor' for i in range(n))}:", "    return SLOW"]
    for i in range(n):
        head += [f"x{i} = t{i}._value", f"if type(x{i}) is not _Array:", "    return SLOW",
                 f"c = x{i}.aval", f"if c is not k{i} and c != k{i}:", "    return SLOW"]
    return _written(entry, "args", head, n, {f"k{i}": a for i, a in enumerate(avals)})


def _names(prefix: str, n: int) -> str:
    return ", ".join(f"{prefix}{i}" for i in range(n))


def _written(entry: Entry, param: str, head: list, n_dyn: int, extra: dict) -> Callable[..., Any]:
    """The steady call's source for ``entry`` after ``head`` (which binds ``x0 ...``, the
    dynamic leaves), compiled with the entry's objects bound as closure variables."""
    names: dict = {"jitted": entry.jitted, "SLOW": SLOW, "_Array": _Array, "_starmap": _starmap,
                   "Tensor": Tensor, "fill": fill, "tpl": entry.out_tpl, **extra}
    body = list(head)
    for i, guard in enumerate(entry.guards):
        names[f"g{i}"] = guard
        body += [f"if not g{i}():", "    return SLOW"]
    for i, v in enumerate(entry.rw):
        names[f"v{i}"] = v
        body += [f"a{i} = v{i}._val", f"if a{i} is not v{i}._own or type(a{i}) is not _Array:", "    return SLOW"]
    for i, v in enumerate(entry.ro):
        names[f"r{i}"] = v
        body += [f"b{i} = r{i}._val", f"if type(b{i}) is not _Array:", "    return SLOW"]
    n_rw, n_out = len(entry.rw), entry.n_out
    args = ", ".join(x for x in (_names("a", n_rw), _names("b", len(entry.ro)), _names("x", n_dyn)) if x)
    results = ", ".join(x for x in (_names("o", n_out), _names("n", n_rw)) if x)
    if n_rw:
        body += ["box = []", "try:", f"    box.extend(_starmap(jitted, (({args}{',' if args else ''}),)))",
                 "finally:", "    if box:", f"        {results}, = box[0]"]
        for i in range(n_rw):
            body += [f"        v{i}._val = n{i}", f"        v{i}._own = n{i}"]
    elif n_out:
        body.append(f"{results}, = jitted({args})")
    else:
        body.append(f"jitted({args})")
    tpl = entry.out_tpl
    if tpl is DYN:
        body.append("return Tensor(o0)")
    elif tpl is None:
        body.append("return None")
    else:
        body.append(f"return fill(tpl, iter([{', '.join(f'Tensor(o{i})' for i in range(n_out))}]))")
    src = (f"def make({', '.join(names)}):\n    def steady({param}):\n"
           + "".join(f"        {line}\n" for line in body) + "    return steady\n")
    namespace: dict = {}
    exec(compile(src, "<tapejax.function steady call>", "exec"), namespace)   # noqa: S102 - our own source
    return namespace["make"](**names)


def run(entry: Entry, dyn):
    """Run ``entry`` on the dynamic leaves ``dyn``: the fast path once it applies (``fast_ready``),
    else ``run_entry``; JAX's NaN/Inf debugging error as the one it raises at top level."""
    try:
        if entry.steady is not None:
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
    """``run_entry`` for the steady call of a program that takes the fast path
    (``fast_ready``): its ``steady`` call, or ``run_entry`` where that declines (``SLOW``)."""
    steady = entry.steady
    out = SLOW if steady is None else steady(dyn)
    return run_entry(entry, dyn) if out is SLOW else out


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
    n_out = entry.n_out
    if entry.plain:   # (the common case inline: no run-time check or host callback)
        if rw:
            # Ctrl-C cannot split the call (which consumed the old values) and the write-back.
            with deferred_interrupts():
                flat = entry.jitted(*rw_vals, *ro_vals, *dyn)
                outs, new_rw = flat[:n_out], flat[n_out:]
                # each Variable owns its new value unless the program passed an input through
                # (an unassigned path) or returned it twice (also as an output, or to another
                # Variable)
                write_back(rw, new_rw, itertools.chain(rw_vals, ro_vals, dyn), outs)
            _reshaped(entry)
        else:
            outs = entry.jitted(*rw_vals, *ro_vals, *dyn)
    elif rw:
        with deferred_interrupts():
            outs, new_rw, err = call_checked(entry, rw_vals, ro_vals, dyn)
            write_back(rw, new_rw, itertools.chain(rw_vals, ro_vals, dyn), outs)
        _reshaped(entry)
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


def _reshaped(entry: Entry) -> None:
    """After a write-back that gave Variables values of another shape (``Entry.reshapes``): the
    programs traced at the old shapes (this one too) are dropped (``shape_changed``), as an
    ``assign`` of another shape drops them."""
    for i in entry.reshapes:
        shape_changed(entry.rw[i])


def call_checked(entry: Entry, rw_vals, ro_vals, dyn):
    """Run a program that checks at run time (``tapejax.debugging``, the value checks of
    ``ops.checks``, converted asserts) or calls back into Python: (outputs, new Variable
    values, the checkify error or None); the caller writes back, then raises a failed check
    (``ops.checks.raise_if_failed``)."""
    err = None
    if entry.checked:
        err, flat = entry.jitted(*rw_vals, *ro_vals, *dyn)
    else:
        flat = entry.jitted(*rw_vals, *ro_vals, *dyn)
    outs, new_rw = flat[:entry.n_out], flat[entry.n_out:]
    if entry.copies:
        # A host callback's error is the call's, as TF's: where the backend runs the program
        # asynchronously (a GPU) it arrives with the results, so wait for them here.
        jax.block_until_ready(flat)
        jax.effects_barrier()   # its prints have happened when the call returns (TF)
    return outs, new_rw, err


__all__ = ["SLOW", "Entry", "InternalFloatingPointError", "call_checked", "fast_ready", "floating_point_error", "run",
           "run_entry", "run_fast", "steady_call", "tensors_call"]
