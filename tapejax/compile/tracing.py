"""Tracing a Python function once into a program with Variables as state.

The Python body of a ``tapejax.function`` runs once per new input signature
(TF's rule), and the Variables it touches are found *while* it runs:

1. ``jax.make_jaxpr`` traces the body with the dynamic arguments as inputs and
   a ``Collector`` installed in ``core.state`` (``Variable`` reads, assigns
   and creation report to it).
2. The first touch of a Variable puts a *read* in the function-level trace:
   ``tapejax_variable[index=i]``, an op with no inputs whose result stands for
   the Variable's value, bound at the function's own trace even when the touch
   happens inside a nested trace (a ``cond`` branch, a loop body, a tape's
   replay: those capture it like any outer value).  The Variable holds that
   tracer until the trace ends; its own value is put back afterwards.
3. After the trace, each read is replaced by a new input of the jaxpr (the
   Variables assigned first, donated; then the ones only read), and the new
   values of the assigned Variables become extra outputs: ``program(rw, ro,
   dyn) -> (outputs, new rw)``.  Compiling it replays the jaxpr, never the
   user's Python.

Variables created by the body (TF's rule: on the first call only) make that
first trace an *initialisation*: their initial values are extra outputs,
computed after the trace by the part of the jaxpr they need (ValueError when
that reads the arguments); then the body is traced again with the Variables
existing, and that trace is the program (TF traces twice in that case too,
and ``experimental_get_tracing_count`` says 2).  If the initialising trace
fails, Variables it created with a computed initial value hold zeros.

A trace that fails changes no Variable: every touched Variable gets its own
value back, and nothing runs before the trace succeeds.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.core
import jax.numpy as jnp
from jax.extend import core as jex

from ..core import state as _state
from ..core.errors import InaccessibleTensorError, OperatorNotAllowedInGraphError
from ..core.variable import Variable
from ..ops import affine as _affine
from .signature import fill, split_out

_Tracer = jax.core.Tracer

CF_HINT = ("Python control flow on a tensor value cannot be compiled as Python: with autograph=True "
           "(the default; it needs `pip install tapejax[autograph]`) tapejax.function converts `if`, "
           "`while` and `for` on tensors; otherwise use tapejax.cond(pred, true_fn, false_fn) for `if`, "
           "tapejax.while_loop(cond, body, loop_vars) for `while`, tapejax.scan / tapejax.foldl for "
           "loops over a tensor, or pass the value as a Python argument (it then keys the cache by "
           "value).")

SINGLETON_MSG = ("tf.function only supports singleton tf.Variables created on the first call. Make "
                 "sure the tf.Variable is only created once or created outside tf.function. "
                 "(tapejax.function `{}`)")
NON_FIRST_MSG = ("Creating variables on a non-first call to a function decorated with tf.function. "
                 "(tapejax.function `{}`: create the Variables outside, or on the first call)")


# ---------------------------------------------------------------------------
# The read of a Variable: an op with no inputs, replaced by a program input
# ---------------------------------------------------------------------------

def _no_impl(*args, **params):
    raise RuntimeError("tapejax_variable is a placeholder of a tapejax.function trace; it never runs")


def _no_constant_folding():
    """Turn off ``jax.ensure_compile_time_eval`` for one bind: under it JAX evaluates a primitive
    with no tracer inputs on the spot (JAX 0.10 has no public switch for that flag; a JAX
    without it gets no switch, and such a read fails loudly in ``_no_impl``)."""
    from jax._src import config as _jax_config
    flag = getattr(_jax_config, "eager_constant_folding", None)
    return contextlib.nullcontext() if flag is None else flag(False)


VARIABLE_READ = jex.Primitive("tapejax_variable")
VARIABLE_READ.def_abstract_eval(lambda *, index, aval: aval)
VARIABLE_READ.def_impl(_no_impl)


@dataclasses.dataclass
class Touched:
    """A Variable the trace touched: its value before (put back after) and its read's index."""

    var: Variable
    saved: Any
    index: int
    assigned: bool = False


@dataclasses.dataclass
class Created:
    """A Variable the trace created, and its initial value (an array or a tracer)."""

    var: Variable
    init: Any


class Collector:
    """Installed in ``core.state`` while the body traces (the ``state.Collector`` protocol)."""

    def __init__(self, fname: str, outer_trace: Any, create_error: Optional[str]):
        self.fname = fname
        self.outer = outer_trace
        self.create_error = create_error   # None: creating is allowed (the first call)
        self.touched: Dict[int, Touched] = {}
        self.order: List[Touched] = []
        self.made: List[Created] = []
        self._created_ids: set = set()
        self.ranges: Dict[int, Any] = {}   # AutoGraph's tf.range tensors of this trace (autograph_ops)

    def touch(self, var: Variable, assign: bool) -> None:
        rec = self.touched.get(var._id)
        if rec is None:
            if var._id in self._created_ids:
                return
            value = var._value   # a pending update is computed now, outside the trace
            rec = Touched(var, var._state(), len(self.order))
            # the function's trace, even from a nested one or under ensure_compile_time_eval
            # (a custom_gradient's f runs there): the read is a program input, never folded
            with jex.set_current_trace(self.outer), _no_constant_folding():
                read = VARIABLE_READ.bind(index=rec.index, aval=jax.core.ShapedArray(
                    value.shape, value.dtype, weak_type=value.aval.weak_type))
            self.touched[var._id] = rec
            self.order.append(rec)
            var._value = read
        if assign:
            rec.assigned = True

    def created(self, var: Variable) -> None:
        if self.create_error is not None:
            raise ValueError(self.create_error.format(self.fname))
        self._created_ids.add(var._id)
        self.made.append(Created(var, var._val))

    def restore(self) -> None:
        for rec in self.order:
            rec.var._restore(rec.saved)


# ---------------------------------------------------------------------------
# The trace
# ---------------------------------------------------------------------------

@dataclasses.dataclass
class Traced:
    """One trace of the body: its jaxpr and what it touched.

    ``jaxpr`` maps ``(reads in touch order..., dynamic args...)`` to
    ``(outputs..., new values of the assigned Variables..., initial values of the
    created ones...)``.
    """

    jaxpr: jex.ClosedJaxpr
    touched: Tuple[Touched, ...]
    created: Tuple[Created, ...]
    out_tpl: Any
    n_out: int

    @property
    def rw(self) -> Tuple[Variable, ...]:
        return tuple(t.var for t in self.touched if t.assigned)

    @property
    def ro(self) -> Tuple[Variable, ...]:
        return tuple(t.var for t in self.touched if not t.assigned)


def is_value_error(e: BaseException) -> bool:
    return isinstance(e, (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError,
                          jax.errors.TracerArrayConversionError, jax.errors.TracerBoolConversionError))


def value_error(e: BaseException, fname: str) -> OperatorNotAllowedInGraphError:
    """JAX's "a tracer was used as a Python value" as TF's OperatorNotAllowedInGraphError."""
    first = str(e).splitlines()[0] if str(e) else repr(e)
    return OperatorNotAllowedInGraphError(
        f"In tapejax.function `{fname}`: a traced tensor was used where Python needs its value "
        f"({type(e).__name__}). {CF_HINT}\n\nJAX said: {first}")


def trace(fn: Callable[..., Any], tpl: Any, avals: Sequence[Any], *, fname: str,
          create_error: Optional[str]) -> Traced:
    """Run ``fn`` once on tracers of ``avals`` (rebuilt into arguments by ``tpl``)."""
    from ..autodiff.custom import graph_mode  # graph mode: tapejax.gradients works (issue #4)

    box: List[Any] = []

    def body(*dyn_vals):
        col = Collector(fname, jex.find_top_trace(()), create_error)
        prev = _state.set_collector(col)
        box.append(col)
        try:
            args, kwargs = fill(tpl, iter([_affine.index(d) for d in dyn_vals]))   # (ints: ops.affine)
            with graph_mode():
                out = fn(*args, **(kwargs or {}))
                flat: List[Any] = []
                out_tpl = split_out(out, flat)
            new_rw = [t.var._value for t in col.order if t.assigned]
            inits = [c.init for c in col.made]
        finally:
            _state.set_collector(prev)
            col.restore()
        box.append(out_tpl)
        box.append(len(flat))
        return flat + new_rw + inits

    outer = jex.find_top_trace(())   # (a value of a trace around this one may be a constant)
    try:
        closed = jax.make_jaxpr(body)(*avals)
    except BaseException as e:
        if box:
            _created_failed(box[0])
        if is_value_error(e):
            raise value_error(e, fname) from None
        if isinstance(e, jax.errors.UnexpectedTracerError):
            raise _inaccessible(fname, str(e).splitlines()[0] if str(e) else repr(e)) from None
        raise
    if any(isinstance(c, _Tracer) and c._trace is not outer for c in closed.consts):   # a body's, leaked
        _created_failed(box[0])
        raise _inaccessible(fname, "a loop or branch body's traced value is a constant of the program")
    col = box[0]
    return Traced(closed, tuple(col.order), tuple(col.made), box[1], box[2])


def _inaccessible(fname: str, detail: str) -> InaccessibleTensorError:
    return InaccessibleTensorError(
        f"In tapejax.function `{fname}`: a tensor made inside a loop or branch body was used outside it "
        "(e.g. appended to a Python list in a `for i in tf.range(n)` loop): it cannot be accessed from "
        f"here, as in TF. Accumulate with tf.TensorArray, or carry it as a loop variable.\n\n({detail})")


def _created_failed(col: Collector) -> None:
    for c in col.made:   # a Variable never holds a tracer: its initial value was never computed
        if isinstance(c.var._val, _Tracer):
            c.var._value = jnp.zeros(c.init.shape, c.init.dtype)


# ---------------------------------------------------------------------------
# From the trace to the program
# ---------------------------------------------------------------------------

def _split_reads(jaxpr: jex.Jaxpr, n: int):
    reads: List[Optional[jex.Var]] = [None] * n
    eqns = []
    for e in jaxpr.eqns:
        if e.primitive is VARIABLE_READ:
            reads[e.params["index"]] = e.outvars[0]
        else:
            eqns.append(e)
    return reads, eqns


def program(tr: Traced) -> Tuple[jex.ClosedJaxpr, Tuple[Variable, ...], Tuple[Variable, ...]]:
    """``tr`` as the jaxpr of ``(rw..., ro..., dyn...) -> (outputs..., new rw...)`` and the
    Variables ``rw`` (assigned: donated and written back) and ``ro`` (only read)."""
    assert not tr.created, "an initialising trace is not a program"
    jaxpr = tr.jaxpr.jaxpr
    reads, eqns = _split_reads(jaxpr, len(tr.touched))
    rw = [t for t in tr.touched if t.assigned]
    ro = [t for t in tr.touched if not t.assigned]
    invars = [reads[t.index] for t in rw + ro] + list(jaxpr.invars)
    new = jaxpr.replace(invars=invars, eqns=eqns, debug_info=_debug_info(jaxpr, len(invars), len(jaxpr.outvars)))
    return jex.ClosedJaxpr(new, tr.jaxpr.consts), tuple(t.var for t in rw), tuple(t.var for t in ro)


def initial_values(tr: Traced, fname: str) -> List[Any]:
    """The initial values of the Variables an initialising trace created (arrays).

    A value computed inside the trace is computed now by the part of the jaxpr it needs
    (nothing else runs: no print, no update), from the touched Variables' values; it
    must not depend on the function's arguments (ValueError, as TF).
    """
    out: List[Any] = []
    traced = [i for i, c in enumerate(tr.created) if isinstance(c.init, _Tracer)]
    if traced:
        jaxpr = tr.jaxpr.jaxpr
        reads, eqns = _split_reads(jaxpr, len(tr.touched))
        first = len(jaxpr.outvars) - len(tr.created)
        wanted = [jaxpr.outvars[first + i] for i in traced]
        kept, used = _prune(eqns, wanted)
        if any(v in used for v in jaxpr.invars):
            raise ValueError(
                f"tapejax.function `{fname}` created a Variable whose initial value depends on the "
                "function's arguments; Variables created inside a tapejax.function are initialised "
                "once, outside the compiled program: give an initial value that does not depend on "
                "the arguments.")
        pruned = jaxpr.replace(invars=list(reads),
                               outvars=wanted, eqns=kept, debug_info=_debug_info(jaxpr, len(reads), len(wanted)),
                               effects=frozenset().union(*[e.effects for e in kept]))
        vals = jax.jit(jex.jaxpr_as_fun(jex.ClosedJaxpr(pruned, tr.jaxpr.consts)))(
            *[t.var._value for t in tr.touched])
        computed = dict(zip(traced, vals))
    else:
        computed = {}
    for i, c in enumerate(tr.created):
        out.append(computed[i] if i in computed else c.init)
    return out


def _debug_info(jaxpr, n_in: int, n_out: int):
    """The trace's debug info for a jaxpr with other inputs and outputs (names unknown)."""
    d = jaxpr.debug_info
    return d._replace(arg_names=("",) * n_in, result_paths=("",) * n_out)


def _prune(eqns, wanted):
    """The equations ``wanted`` needs (in order) and every variable they read."""
    used = {v for v in wanted if isinstance(v, jex.Var)}
    kept = []
    for e in reversed(eqns):
        if any(o in used for o in e.outvars):
            kept.append(e)
            used.update(v for v in e.invars if isinstance(v, jex.Var))
    kept.reverse()
    return kept, used


_CALLBACKS = ("debug_callback", "pure_callback", "io_callback")


def calls_back(jaxpr: jex.Jaxpr, checks: bool = True) -> bool:
    """Does this jaxpr (or one nested in it) call back into Python or (``checks``) check at run time?"""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _CALLBACKS or (checks and eqn.primitive.name == "check"):
            return True
        for sub in _nested(eqn):
            if calls_back(sub, checks):
                return True
    return False


def checks(jaxpr: jex.Jaxpr) -> bool:
    """Does this jaxpr (or one nested in it) hold a ``checkify.check``?"""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "check":
            return True
        if any(checks(sub) for sub in _nested(eqn)):
            return True
    return False


def fresh_outputs(closed: jex.ClosedJaxpr, n_out: int) -> Tuple[bool, ...]:
    """For each new value of an assigned Variable (the outputs after the first ``n_out``): is it
    a buffer the program makes, so that the Variable alone holds it after the call?  Not where the
    jaxpr returns an input or a constant as it is (JAX hands that array back) or one value twice
    (also as an output, or to another Variable): what ``ownership.fresh_outputs`` finds by
    identity after each call, decided once from the jaxpr."""
    jaxpr = closed.jaxpr
    given = set(jaxpr.invars) | set(jaxpr.constvars)
    count: Dict[Any, int] = {}
    for v in jaxpr.outvars:
        if isinstance(v, jex.Var):
            count[v] = count.get(v, 0) + 1
    return tuple(isinstance(v, jex.Var) and not isinstance(v, jex.Literal) and v not in given and count[v] == 1
                 for v in jaxpr.outvars[n_out:])


def connected_inputs(jaxpr: jex.Jaxpr, n_out: int) -> Tuple[bool, ...]:
    """For each input of ``jaxpr``: does one of its first ``n_out`` outputs depend on it other than
    through ``stop_gradient``?  A tape recording the call as one op gives such an input's source
    ``None``, as TF's gradient of a function call (a Variable read only under ``stop_gradient`` or
    not used).  Jitted sub-jaxprs are looked into; other nested jaxprs count every input."""
    live = _reaching(jaxpr, [v for v in jaxpr.outvars[:n_out] if isinstance(v, jex.Var)])
    return tuple(v in live for v in jaxpr.invars)


def _reaching(jaxpr: jex.Jaxpr, outs) -> set:
    live = set(outs)
    for eqn in reversed(jaxpr.eqns):
        used = [i for i, v in enumerate(eqn.outvars) if v in live]
        if not used or eqn.primitive.name == "stop_gradient":
            continue
        sub = eqn.params.get("jaxpr") if eqn.primitive.name in ("pjit", "jit", "closed_call") else None
        inner = getattr(sub, "jaxpr", sub)
        if inner is not None and hasattr(inner, "eqns") and len(inner.invars) == len(eqn.invars):
            reach = _reaching(inner, [inner.outvars[i] for i in used if isinstance(inner.outvars[i], jex.Var)])
            live.update(v for v, iv in zip(eqn.invars, inner.invars) if iv in reach and isinstance(v, jex.Var))
        else:
            live.update(v for v in eqn.invars if isinstance(v, jex.Var))
    return live


def _nested(eqn):
    for p in eqn.params.values():
        for sub in (p if isinstance(p, (tuple, list)) else (p,)):
            sub = getattr(sub, "jaxpr", sub)   # a ClosedJaxpr's Jaxpr
            if hasattr(sub, "eqns"):
                yield sub


__all__ = ["CF_HINT", "Collector", "Created", "NON_FIRST_MSG", "SINGLETON_MSG", "Touched", "Traced",
           "VARIABLE_READ", "calls_back", "checks", "connected_inputs", "fresh_outputs", "initial_values", "is_value_error", "program",
           "trace", "value_error"]
