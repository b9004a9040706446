"""``tapejax.function``: a Python function compiled with ``jax.jit``, Variables threaded as state.

How a call works
----------------
1. **Key** (``signature.py``).  The arguments are walked once: Tensors and
   arrays are dynamic (the key holds their shape and dtype), Python values
   static by value, Variables and other objects by identity, as
   ``tf.function``.  A hit calls the compiled program: one dict lookup, one
   compiled call, the write-back of the assigned Variables.  A call of Tensors
   only first tries the steady call of the entry the latest such call took
   (``entries.tensors_call``: the Tensors' avals compared with that entry's key,
   the lookup written out), and takes the key lookup when they differ.
2. **Trace** (``tracing.py``), on a miss.  The Python body (converted by
   AutoGraph unless ``autograph=False``, ``autograph.py``) runs once under
   ``jax.make_jaxpr``; every Variable it touches becomes an input of the
   program, every Variable it assigns also an output.  The body runs once per
   new input signature, as in TF; a function that creates Variables (on its
   first call only, TF's rule) is traced twice on that call, as in TF.
   ``GradientTape`` records while the body runs and ``tape.gradient`` inlines
   its compiled replay: the compiled step has no Python tape cost.
3. **Program.**  ``jax.jit(program, donate_argnums=range(len(rw)))`` where
   ``program(*rw, *ro, *dyn) -> (*outputs, *new rw)`` evaluates the trace's
   jaxpr (flat: JAX's C++ dispatch takes a call of arrays): assigned
   Variables (``rw``) are donated and written back after the call (one that
   does not own its buffer, ``Variable.owns_buffer``, donates a copy), the
   ones only read (``ro``) are plain inputs.  From its second call, a program
   with no run-time check or host callback, on plain ``Variable``s (or Keras
   variables outside a Keras scope: ``ownership.SLOT_GUARDS``), whose new
   values are all buffers it makes, takes the steady call's fast path
   (``entries.run_fast``: a call written for the entry, its loops over the
   Variables unrolled).  A program that calls back into
   Python (``tapejax.print``) or checks at run time gets copies, so the
   Variables are untouched when it fails, and the call waits for its prints.
   With ``None`` sizes in ``input_signature`` or ``reduce_retracing=True`` the
   body is traced once with symbolic sizes and the program exported
   (``polymorphism.py``).

Called eagerly under a recording ``GradientTape``, a function that assigns
no Variable is recorded as ONE op (its compiled program; inputs: its Tensor
arguments and the Variables it reads), so the tape differentiates through it
to any order, as TF records a ``tf.function`` call.  A function that assigns
Variables runs op by op in that case (every op recorded; same values).
Called while another function traces, it is inlined.

Python side effects (``print``, appending to lists, counters) run while
tracing only, as in TF; ``tapejax.print`` prints on every call, in order.
``tapejax.config.run_functions_eagerly(True)`` runs bodies as plain Python.
"""
from __future__ import annotations

import functools
import inspect
import threading
import types
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.core
import numpy as np
from jax.experimental import checkify
from jax.extend import core as jex

from ..core import state as _state
from ..core.caches import Family
from ..core.tensor import Tensor
from ..core.variable import announce
from ..core.variable_shape import SHAPE_CHANGED, declared
from ..ops.checks import CHECK_ERRORS
from . import autograph as _autograph, config as _config, polymorphism, retracing, tracing
from .bound import BoundFunction
from .entries import SLOW, Entry, InternalFloatingPointError, cut_unconnected, floating_point_error, run, tensors_call
from .sharding import MeshPlan
from .signature import (
    DYN,
    LeafSpec,
    TensorSpec,
    bind_signature,
    call_key,
    check_signature,
    fill,
    shape_free,
    signature_leaves,
    skeleton,
    template,
    tensor_args,
)

#: Compiled specialisations kept per Function (least recently used dropped first;
#: a dropped one is traced again when called again).
_FUNCTION_CACHE = Family("function", 256)
_local = _state._local
_FLAGS = _config.FLAGS
_SCALARS = (bool, int, float, str, type(None))   # defaults a steady call of Tensors may leave out


def _avals(dyn):
    return [jax.ShapeDtypeStruct(d.shape, d.dtype, weak_type=getattr(d, "weak_type", False)) for d in dyn]


class Function:
    """A compiled, callable wrapper made by ``tapejax.function``.

    Calls with Tensors of the same shapes and dtypes (and equal Python
    arguments) reuse one compiled XLA program (at most 256 are kept, least
    recently used dropped first).  ``experimental_get_tracing_count()``
    counts the traces; ``python_function`` is the wrapped function.
    """

    _IS_TAPEJAX_FUNCTION = True   # (AutoGraph calls it as it is: it converts its own body)

    def __init__(self, func, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
                 mesh=None, in_specs=None, variable_specs=None, name=None, experimental_autograph_options=None):
        self.python_function = func
        self.input_signature = check_signature(input_signature)
        self._autograph = bool(autograph)
        self._ag_options = experimental_autograph_options
        self._jit_compile = jit_compile
        self._reduce_retracing = bool(reduce_retracing)
        self._name = name or getattr(func, "__name__", "function")
        self._cache = _FUNCTION_CACHE.new()   # call key -> Entry (bounded LRU)
        self._poly: Dict[Any, List[Entry]] = {}   # shape-free key -> polymorphic entries
        self._failed: set = set()   # (shape-free key, specs) whose symbolic trace failed
        self._last_specs: Dict[Any, Sequence[LeafSpec]] = {}   # shape-free key -> last traced specs
        # skeleton of the key (Python values and structure) -> the specs of its latest trace
        self._latest_specs: Dict[Any, Sequence[LeafSpec]] = {}
        self._tracing_count = 0
        self._first = True          # no call has traced successfully yet (Variables may be created)
        # a decorated method: instance -> its traces (an instance there has had its first call)
        self._per_instance: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._lock = threading.RLock()
        # the steady call (``entries.tensors_call``) of the entry the latest call of Tensors only
        # took: ``__call__`` tries it first
        self._hot: Optional[Callable[[tuple], Any]] = None
        # the same for a decorated method: id(instance) -> (instance, its steady call)
        self._hot_bound: Dict[int, Tuple[Any, Callable[[tuple], Any]]] = {}
        self._mesh = None if mesh is None else MeshPlan(mesh, in_specs, variable_specs)
        # a function defined in a class body with `self` first: called as a method, its
        # input_signature describes the arguments after `self` (TF's)
        code = getattr(func, "__code__", None)
        self._method = bool(code and code.co_argcount and code.co_varnames[0] == "self"
                            and "." in getattr(func, "__qualname__", ""))
        self._calls = retracing.detector(func)   # TF's call statistics (the retracing warning)
        try:
            self._py_signature: Optional[inspect.Signature] = inspect.signature(func)
        except (TypeError, ValueError):
            self._py_signature = None
        params = [] if self._py_signature is None else list(self._py_signature.parameters.values())
        # the number of parameters when all are plain positional-or-keyword ones (else -1)
        self._n_plain = len(params) if all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params) else -1
        self._param_names = tuple(p.name for p in params)
        self._defaults = {p.name: p.default for p in params if p.default is not p.empty}
        # a function's name, doc and attributes; a callable object's (a Keras model) own state is
        # not copied onto the Function (its lock, its layers: ``__wrapped__`` reaches them)
        functools.update_wrapper(self, func, updated=functools.WRAPPER_UPDATES
                                 if isinstance(func, (types.FunctionType, types.MethodType)) else ())

    # -- descriptor: decorated methods ------------------------------------
    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return BoundFunction(self, instance)

    def experimental_get_tracing_count(self) -> int:
        """How many times the Python body was traced (2 for a first call that creates
        Variables, as TF)."""
        return self._tracing_count

    @property
    def function_spec(self):
        return self.input_signature

    def _body(self) -> Callable[..., Any]:
        """The Python function as traced: converted by AutoGraph unless ``autograph=False``."""
        if not self._autograph:
            return self.python_function
        return _autograph.converted(self.python_function, self._ag_options)

    # -- the call ------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        loc = _local
        if kwargs or loc.tapes or loc.collector is not None or self.input_signature is not None or _FLAGS.eager:
            return self._call((), args, kwargs)
        hot = self._hot   # the steady call of the latest call of Tensors only (``_keyed``)
        if hot is not None:   # (``_steady`` written out)
            try:
                out = hot(args)
            except (InternalFloatingPointError, FloatingPointError) as e:
                raise floating_point_error(e) from e
            if out is not SLOW:
                try:
                    self._calls.calls_per_tracing[-1] += 1   # (``_Detector.not_traced``, written out)
                except IndexError:   # pragma: no cover - a traced function's statistics have a trace
                    self._calls.not_traced()
                return out
        return self._keyed(args, kwargs)

    def _steady(self, hot, args):
        """``hot(args)`` (``entries.tensors_call``), counted as a call that did not trace when it
        ran; ``SLOW`` when it declined."""
        try:
            out = hot(args)
        except (InternalFloatingPointError, FloatingPointError) as e:
            raise floating_point_error(e) from e
        if out is not SLOW:
            try:
                self._calls.calls_per_tracing[-1] += 1
            except IndexError:   # pragma: no cover - a traced function's statistics have a trace
                self._calls.not_traced()
        return out

    def _call(self, lead: tuple, args, kwargs):
        """A call; ``lead``: arguments before the ones ``input_signature`` describes (a method's
        instance)."""
        if self.input_signature is not None:
            args = bind_signature(self.input_signature, args, kwargs, self._name, self._method)
        if lead:
            args = lead + tuple(args)
        if _config.FLAGS.eager:   # tf.config.run_functions_eagerly(True): plain Python
            return self.python_function(*args, **kwargs)
        if _state._local.collector is not None:
            # Called while another tapejax.function traces: inline (TF traces it once per signature).
            return self._body()(*args, **kwargs)
        if _state.tapes():
            return self._call_under_tape(args, kwargs)
        return self._keyed(args, kwargs, len(lead))

    def _canonical(self, args, kwargs):
        """The call bound to the Python signature, defaults filled (TF's canonical call): a
        positional and a keyword call of the same values, or a default left out and given,
        share one trace.  Arguments that do not bind are passed on as they are (the body
        raises Python's TypeError)."""
        sig = self._py_signature
        n = self._n_plain
        if sig is None or self.input_signature is not None or (not kwargs and len(args) == n):
            return args, kwargs   # (every parameter given positionally: already canonical)
        if n >= 0:   # plain parameters only: bound by hand (``Signature.bind`` costs ~10 us a call)
            if len(args) > n:
                return args, kwargs
            out = list(args)
            used = 0
            for name in self._param_names[len(args):]:
                if name in kwargs:
                    out.append(kwargs[name])
                    used += 1
                elif name in self._defaults:
                    out.append(self._defaults[name])
                else:
                    return args, kwargs   # (a missing argument: the body raises Python's TypeError)
            return (tuple(out), {}) if used == len(kwargs) else (args, kwargs)
        try:
            ba = sig.bind(*args, **kwargs)
        except TypeError:
            return args, kwargs
        ba.apply_defaults()
        return ba.args, ba.kwargs

    def _keyed(self, args, kwargs, n_lead: int = 0):
        """Key the call, trace on a miss, run the compiled program.  ``n_lead``: arguments before
        the written ones (a method's instance)."""
        written = args[n_lead:] if n_lead else args
        raw = written if not kwargs and all(type(a) is Tensor for a in written) else None
        args, kwargs = self._canonical(args, kwargs)
        dyn: List[Any] = []
        parts = []
        for a in args:   # the common case inline: a Tensor argument keys by its aval
            if type(a) is Tensor:
                v = a._value
                dyn.append(v)
                parts.append(v.aval)
            else:
                parts.append(call_key((a,), None, dyn)[0][0])
        key = (tuple(parts), call_key((), kwargs, dyn)[1] if kwargs else None)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._entry(key, args, kwargs, dyn)
        else:
            self._calls.not_traced()
        if raw is not None and entry.steady is not None and entry.plan is None and len(dyn) == len(raw):
            self._note_steady(entry, key, args, kwargs, raw, n_lead)
        return self._run(entry, dyn)

    def _note_steady(self, entry: Entry, key, args, kwargs, raw, n_lead: int) -> None:
        """A call of Tensors only (``raw``, after ``n_lead`` arguments: a method's instance) that
        keyed ``entry``: the next such call starts at the entry's steady call (``__call__``,
        ``BoundFunction.__call__``), when the call's canonical form is those Tensors and
        defaults that are Python scalars (keyed by value, the same in every such call)."""
        n = len(raw)
        if not (all(a is b for a, b in zip(args[n_lead:], raw))
                and all(type(a) in _SCALARS for a in (*args[n_lead + n:], *kwargs.values()))):
            return
        hot = entry.hot.get(n)
        if hot is None:
            hot = entry.hot[n] = tensors_call(entry, key[0][n_lead:n_lead + n])
        if n_lead:
            # (the entry's template holds the instance: its id is not reused while this is kept,
            # and ``_entry`` drops these on every miss, before anything is evicted)
            self._hot_bound[id(args[0])] = (args[0], hot)
        else:
            self._hot = hot

    def _entry(self, key, args, kwargs, dyn) -> Entry:
        """The entry for a call that missed the cache: a polymorphic one that accepts it, or a
        new trace.  Caches it under ``key``; nothing runs here."""
        self._hot = None   # (the cache changes: the steady call starts from a key lookup again)
        self._hot_bound.clear()
        entry = self._cache.get(key)
        if entry is not None:
            return entry
        sf = shape_free(key)
        avals = _avals(dyn)
        for e in self._poly.get(sf, ()):
            if e.accepts(avals):
                self._cache[key] = e
                self._calls.not_traced()
                return e
        count = self._tracing_count
        entry = self._build(key, sf, args, kwargs, dyn, avals)
        if self._tracing_count != count:
            self._calls.traced(repr(self.python_function))
        else:
            self._calls.not_traced()
        return entry

    def _specs_for(self, sf, avals) -> Sequence[LeafSpec]:
        """The leaf specs a new trace generalises to: the input signature's, or (with
        ``reduce_retracing``) the last trace's relaxed to this call, else the call's own."""
        sig = None if self.input_signature is None else signature_leaves(self.input_signature)
        if sig is not None and len(sig) == len(avals):
            return [s.leaf() for s in sig]
        if self._reduce_retracing and sf in self._last_specs:
            relaxed = polymorphism.relax(self._last_specs[sf], avals)
            if relaxed is not None:
                return relaxed
        prev = self._latest_specs.get(skeleton(sf)) if self._reduce_retracing else None
        if prev is not None and len(prev) == len(avals):
            # a new rank after earlier traces of the same structure and Python values: TF relaxes
            # the leaves that changed rank to an unknown shape and keeps the others as the last
            # trace relaxed them; XLA needs the rank, so every size of a changed leaf is
            # generalised.  A new Python value or structure has no common supertype with the
            # earlier traces in TF: it is traced for the call's own shapes.
            return polymorphism.relax_ranks(prev, avals)
        return polymorphism.concrete(avals)

    def _build(self, key, sf, args, kwargs, dyn, avals) -> Entry:
        tpl = (template(args), template(dict(sorted(kwargs.items()))) if kwargs else None)   # (TF: **kw sorted)
        specs = self._specs_for(sf, avals)
        entry = None
        # (a call inside a program traced with symbolic sizes, a SavedModel export, has symbolic
        # avals already: traced for them as they are, with no symbols of its own)
        poly = (any(s.polymorphic for s in specs) and self._mesh is None
                and (sf, tuple(specs)) not in self._failed and not polymorphism.has_empty(specs, avals)
                and all(isinstance(d, (int, np.integer)) for a in avals for d in a.shape))
        if poly:
            p = polymorphism.plan(specs, [a.weak_type for a in avals], example=avals)
            try:
                entry = self._make(tpl, list(p.avals), specs, p)
            except Exception:   # noqa: BLE001 - any failure with symbolic sizes: trace per shape
                entry = None
            if entry is None:
                self._failed.add((sf, tuple(specs)))
            else:
                self._poly.setdefault(sf, []).append(entry)
        if entry is None:
            entry = self._make(tpl, avals, polymorphism.concrete(avals), None)
            assert entry is not None   # (only a polymorphic program can fail to export)
        self._last_specs[sf] = entry.specs
        self._latest_specs[skeleton(sf)] = entry.specs
        for v in entry.rw + entry.ro:   # (a Variable whose shape may change: ``_forget_programs``)
            if declared(v) is not None:
                _SHAPE_WATCH.setdefault(id(v), weakref.WeakSet()).add(self)
        if self._mesh is not None:
            entry.in_shardings = self._mesh.input_shardings(args, kwargs, self._name)
            self._mesh.place_variables(entry.rw + entry.ro)
        self._cache[key] = entry
        return entry

    def _forget_programs(self) -> None:
        """Drop every traced program: a Variable they read or assign (made with a declared shape
        such as ``[None, 3]``) is about to take a value of another shape, which the programs'
        static shapes do not fit.  The next call traces again (TF's graph takes the new shape)."""
        with self._lock:
            self._cache.clear()
            self._poly.clear()
            self._hot = None
            self._hot_bound.clear()

    def _instance_of(self, tpl) -> Any:
        """A decorated method's instance in a call's template (None for a plain function, or an
        instance that cannot be a weak key)."""
        if not self._method or not tpl[0]:
            return None
        inst = tpl[0][0]
        try:
            weakref.ref(inst)
            hash(inst)
        except TypeError:
            return None
        return inst

    def _count_trace(self, inst) -> None:
        self._tracing_count += 1
        if inst is not None:
            self._per_instance[inst] = self._per_instance.get(inst, 0) + 1

    def _trace(self, tpl, avals):
        """The program's trace; on the first call, TF's initialising trace first when the body
        creates Variables.  A decorated method is a function per instance, as TF's (its own
        first call, Variable creation and tracing count): another instance's first call may
        create its Variables (optimizer slots) too."""
        body, fname = self._body(), self._name
        inst = self._instance_of(tpl)
        first = self._first if inst is None else inst not in self._per_instance
        if not first:
            self._count_trace(inst)
            return tracing.trace(body, tpl, avals, fname=fname, create_error=tracing.NON_FIRST_MSG)
        self._count_trace(inst)
        tr = tracing.trace(body, tpl, avals, fname=fname, create_error=None)
        if tr.created:
            for c, value in zip(tr.created, tracing.initial_values(tr, fname)):
                c.var._value = value
            for c in tr.created:   # every one holds its value: a restore waiting for them applies now
                announce(c.var)    # (``core.variable.CREATION_HOOKS``)
            self._first = False
            self._count_trace(inst)
            tr = tracing.trace(body, tpl, avals, fname=fname, create_error=tracing.SINGLETON_MSG)
        self._first = False
        return tr

    def _make(self, tpl, avals, specs, plan) -> Optional[Entry]:
        """Trace and build the entry (``None`` when a polymorphic program cannot be exported)."""
        tr = self._trace(tpl, avals)
        closed, rw, ro = tracing.program(tr)
        fun = jex.jaxpr_as_fun(closed)
        n_out, mesh = tr.n_out, self._mesh

        def prog(*vals):   # (*rw, *ro, *dyn) -> (*outputs, *new rw)
            flat = fun(*vals)
            if mesh is not None:
                return [*flat[:n_out], *(mesh.constrain(v, x) for v, x in zip(rw, flat[n_out:]))]
            return flat

        checked = tracing.checks(closed.jaxpr)
        run: Callable[..., Any] = checkify.checkify(prog, errors=CHECK_ERRORS) if checked else prog
        call: Callable[..., Any] = run
        if plan is not None:
            exported = polymorphism.export(run, _avals([v._value for v in rw]) + _avals([v._value for v in ro]),
                                           plan)
            if exported is None:
                return None
            call = exported.call
        entry = Entry(jax.jit(call, donate_argnums=tuple(range(len(rw)))), rw, ro, tr.out_tpl, n_out, tpl,
                      tracing.calls_back(closed.jaxpr), checked, specs, plan,
                      fresh=None if mesh is not None else tracing.fresh_outputs(closed, n_out))
        entry.callbacks = tracing.calls_back(closed.jaxpr, checks=False)
        entry.connected = tracing.connected_inputs(closed.jaxpr, n_out)[len(rw):]
        # Variables the step gives another shape (declared ``[None, 2]``, grown by ``concat``)
        entry.reshapes = tuple(i for i in range(len(rw))
                               if closed.in_avals[i].shape != closed.out_avals[n_out + i].shape)
        return entry

    def _call_under_tape(self, args, kwargs):
        """Called eagerly while a GradientTape records.

        A function that assigns no Variable is recorded as ONE op (its compiled
        program) whose inputs are its Tensor arguments and the Variables it
        reads, so the tape differentiates through the compiled function (as TF
        records a tf.function call); a run-time check's error is a leading result,
        raised after the op.  A function that assigns Variables or calls back into
        Python runs op by op instead, so every op is recorded (same values and
        gradients).
        """
        args, kwargs = self._canonical(args, kwargs)
        dyn: List[Any] = []
        key = call_key(args, kwargs, dyn)
        entry = self._cache.get(key)
        if entry is None:
            with _state.swap(tapes=()), self._lock:   # build with no tape recording the trace
                entry = self._entry(key, args, kwargs, dyn)
        if entry.rw or self._mesh is not None or entry.callbacks:   # (host callbacks: op by op)
            from ..autodiff.custom import graph_mode  # graph mode: tapejax.gradients works (issue #4)
            with graph_mode():
                return self.python_function(*args, **kwargs)
        tensors: List[Any] = []
        tensor_args((args, kwargs), tensors)
        if entry.prim is None:
            from ..core.bind import Primitive
            jitted, checked, err_tree = entry.jitted, entry.checked, []

            def impl(*vals):   # (no Variable assigned: the program's results are its outputs)
                if not checked:
                    return tuple(jitted(*vals))
                err, flat = jitted(*vals)   # a run-time check's error: its leaves lead the results
                leaves, tree = jax.tree_util.tree_flatten(err)
                err_tree[:] = [tree, len(leaves)]
                return (*leaves, *flat)

            entry.prim = Primitive(f"PartitionedCall[{self._name}]", impl, multiple_results=True)
            entry.prim_errors = err_tree
        from ..core.bind import bind
        outs = list(bind(entry.prim, *cut_unconnected(entry, [*entry.ro, *tensors])))
        if entry.checked:   # (a host sync, as any checked program's call)
            from ..ops.checks import raise_if_failed
            tree, n = entry.prim_errors
            raise_if_failed(jax.tree_util.tree_unflatten(tree, [o._value for o in outs[:n]]))
            outs = outs[n:]
        return self._outputs(entry, outs, wrap=False)

    def _run(self, entry: Entry, dyn):
        return run(entry, dyn)

    @staticmethod
    def _outputs(entry: Entry, outs, wrap: bool):
        tpl = entry.out_tpl
        if tpl is DYN:
            return Tensor(outs[0]) if wrap else outs[0]
        if tpl is None:
            return None
        return fill(tpl, iter([Tensor(o) for o in outs] if wrap else outs))

    def get_concrete_function(self, *args, **kwargs):
        """``tf.function.get_concrete_function``: the traced program for these arguments
        (Tensors or ``TensorSpec``s; none when the function has an ``input_signature``)."""
        from .concrete import concrete_function
        return concrete_function(self, args, kwargs)

    def __repr__(self):
        return f"<tapejax.function {self._name}>"


def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_implements=None, experimental_autograph_options=None,
             experimental_attributes=None, experimental_relax_shapes=None,
             experimental_compile=None, experimental_follow_type_hints=None, *,
             mesh=None, in_specs=None, variable_specs=None):
    """Compile ``func`` with ``jax.jit`` (``tf.function``); a decorator or a call.

    Arguments:
      func: the Python function (or method).  Without it, returns a decorator.
      input_signature: a sequence of ``tapejax.TensorSpec``; every call must
        pass Tensors compatible with it (TypeError otherwise, as TF).  A
        ``None`` dimension accepts any size: the body is traced once with a
        symbolic size (one trace for every batch size, as TF) and XLA compiles
        one program per concrete size (see ``polymorphism.py`` for when it
        falls back to a trace per size).
      autograph: convert Python ``if``/``while``/``for`` on tensors, ``and``/
        ``or``/``not`` and conditional expressions into staged control flow
        (``tapejax.cond``, ``tapejax.while_loop``, a loop over the leading
        axis), recursively through the functions it calls, as TF's AutoGraph
        (needs ``pip install tapejax[autograph]``; without it the function
        is traced as written).  ``False``: Python control flow on a traced
        tensor raises ``OperatorNotAllowedInGraphError``.
      jit_compile: accepted for TF compatibility; tapejax always compiles with XLA.
      reduce_retracing: a call that differs from an earlier trace only in sizes
        generalises them to ``None`` (one symbolic trace for the new sizes and
        every later one), as TF's relaxed shapes; a new rank is a new trace.
      mesh, in_specs, variable_specs: run on several devices (see below).

    Every Variable the function reads or assigns is state of the compiled
    program: read ones are inputs, assigned ones are donated and written
    back after each call.  Variables may be created inside only on the first
    call (ValueError later, as TF), which then traces twice.  Tensor
    arguments key the compiled programs by shape and dtype, Python arguments
    by value; TF's warning is logged when calls keep retracing.

    Several devices: with ``mesh`` (a ``jax.sharding.Mesh``), ``in_specs``
    (a ``PartitionSpec`` for every Tensor argument, or a sequence with one
    per positional argument, ``None`` for replicated) shards the inputs, e.g.
    ``PartitionSpec('data')`` splits the batch over the mesh axis ``'data'``;
    Variables are replicated unless ``variable_specs`` (a callable
    ``Variable -> PartitionSpec or None``) says otherwise, and they keep that
    sharding across steps.  XLA inserts the collectives (a data-parallel
    step all-reduces the gradients).  Several hosts: call
    ``jax.distributed.initialize()`` first on every host, build the mesh over
    ``jax.devices()`` (all hosts' devices), and run the same script on each
    host; feed each host's slice of the batch as a global array (for example
    with ``jax.make_array_from_process_local_data``) and pass it as a Tensor.
    """
    if jit_compile is None and experimental_compile is not None:
        jit_compile = experimental_compile
    if experimental_relax_shapes is not None:
        reduce_retracing = experimental_relax_shapes
    check_signature(input_signature)
    if mesh is None and (in_specs is not None or variable_specs is not None):
        raise ValueError("in_specs and variable_specs need a mesh: pass mesh=jax.sharding.Mesh(...)")
    if mesh is not None:
        MeshPlan(mesh, in_specs, variable_specs)   # checks the arguments now, before any call

    def decorate(f):
        if not callable(f):
            raise TypeError(f"{f!r} is not a callable object")
        return Function(f, input_signature=input_signature, autograph=autograph, jit_compile=jit_compile,
                        reduce_retracing=reduce_retracing, mesh=mesh, in_specs=in_specs,
                        variable_specs=variable_specs, experimental_autograph_options=experimental_autograph_options)

    if func is None:
        return decorate
    return decorate(func)



#: ``id(variable) -> the functions whose programs read or assign it``, for Variables made with a
#: declared shape (``core.variable_shape``): an ``assign`` of another shape drops their programs.
_SHAPE_WATCH: "Dict[int, weakref.WeakSet]" = {}


def _variable_shape_changed(var: Any) -> None:
    for fn in tuple(_SHAPE_WATCH.get(id(var), ())):
        fn._forget_programs()


SHAPE_CHANGED.append(_variable_shape_changed)

__all__ = ["Entry", "Function", "TensorSpec", "function"]
