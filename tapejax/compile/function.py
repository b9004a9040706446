"""``tapejax.function``: a Python function compiled with ``jax.jit``, Variables threaded as state.

How a call works
----------------
1. **Key.**  The arguments are walked once: Tensors, ``jax.Array`` and NumPy
   arrays are *dynamic* (the key holds their shape and dtype); Python
   scalars and strings are *static* by value, Variables and other objects
   (Modules, optimizers, callables) by identity, as ``tf.function`` does.  A miss traces; a hit calls the compiled program.
2. **Discovery** (the first trace of a Function, or when a later trace meets
   a Variable the last one did not): the function runs once under
   ``jax.eval_shape`` with a *collector* installed in ``_state``.  Every
   ``Variable`` read or assigned reports itself to it (``Variable._read`` /
   ``assign*`` test one thread-local attribute, nothing else happens when no
   function traces); what it assigns is undone afterwards.  Variables may be
   *created* only here and only on the Function's first call (TF's rule):
   their initial value must be concrete, so when one is computed by traced
   ops the pass is rerun under ``jax.ensure_compile_time_eval`` (constants
   evaluated eagerly); it must not depend on the arguments.
3. **Trace.**  ``jax.jit(pure, donate_argnums=0)`` where
   ``pure(rw_values, ro_values, dynamic_args) -> (outputs, new rw_values)``:
   inside, each discovered Variable's ``_value`` is swapped for the tracer
   and restored after, so the user's code (tapes, optimizers, ``assign``)
   runs unchanged on tracers.  ``GradientTape`` records at trace time and
   ``tape.gradient`` calls the compiled replay, which ``jit`` inlines: the
   compiled step has no Python tape cost.  Variables that are assigned are
   donated and written back after the call (a Variable that does not own its
   buffer, ``Variable.owns_buffer``, donates a copy; after the call each owns
   its new value unless the program passed an input through); Variables only
   read are plain inputs.  A pending update of a Variable the function
   touches is computed before the trace uses it, outside the trace
   (``_lazy.force_many``): no tracer is ever left in a Variable or a pending
   value.
4. **Call.**  Later calls with the same key: one dict lookup, one compiled
   call, and the write-back of the assigned Variables.

Called eagerly under a recording ``GradientTape``, a function that assigns
no Variable is recorded as ONE op (its compiled program; inputs: its Tensor
arguments and the Variables it reads), so the tape differentiates through it
to any order, as TF records a ``tf.function`` call.  A function that assigns
Variables runs op by op in that case (every op recorded; same values).
Called while another function traces, it is inlined.

Python side effects (``print``, appending to lists, counters) run while
tracing only, as in TF: twice on the first call (discovery and trace; the
start of the function a third time when discovery reruns, see 2.), once
per retrace, never on a cache hit.  ``tapejax.print`` and ``jax.debug.print``
print on every call.

Python ``if`` / ``while`` on a traced tensor cannot be compiled: it raises
``OperatorNotAllowedInGraphError`` (a TypeError, as TF with autograph off)
naming ``tapejax.cond`` / ``tapejax.while_loop``.
"""
import functools
import itertools
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, state as _state
from ..core.caches import Family
from ..core.errors import OperatorNotAllowedInGraphError
from ..core.tensor import Tensor, convert_to_tensor
from ..core.variable import Variable, deferred_interrupts, write_back
from ..optimizers._base import slot_owner

if TYPE_CHECKING:
    from ..core.bind import Primitive

_Tracer = jax.core.Tracer
_Array = jax.Array


_CF_HINT = ("Python control flow on a tensor value cannot be compiled: use tapejax.cond(pred, "
            "true_fn, false_fn) for `if`, tapejax.while_loop(cond, body, loop_vars) for `while`, "
            "tapejax.scan / tapejax.foldl for loops over a tensor, or pass the value as a Python "
            "argument (it then keys the cache by value).")


# ---------------------------------------------------------------------------
# TensorSpec and input signatures
# ---------------------------------------------------------------------------

class TensorSpec:
    """``tf.TensorSpec``: a shape (``None`` for any size) and a dtype."""

    __slots__ = ("_shape", "_dtype", "_name")

    def __init__(self, shape, dtype=_dtypes.float32, name=None):
        self._shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self._dtype = _dtypes.as_dtype(dtype)
        self._name = name

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def name(self):
        return self._name

    def is_compatible_with(self, x):
        shape = tuple(x.shape)
        if np.dtype(x.dtype) != self._dtype._np:
            return False
        if self._shape is None:
            return True
        return len(shape) == len(self._shape) and all(s is None or s == d for s, d in zip(self._shape, shape))

    def __eq__(self, other):
        return (isinstance(other, TensorSpec) and self._shape == other._shape
                and self._dtype == other._dtype and self._name == other._name)

    def __hash__(self):
        return hash((self._shape, self._dtype.name, self._name))

    def __repr__(self):
        shape = None if self._shape is None else list(self._shape)
        return f"TensorSpec(shape={tuple(shape) if shape is not None else None}, dtype=tf.{self._dtype.name}, name={self._name!r})"


def _spec_of(x):
    return f"TensorSpec(shape={tuple(x.shape)}, dtype=tf.{np.dtype(x.dtype).name}, name=None)"


def _bind_signature(signature, args, kwargs, fname, method=False):
    """TF's input_signature binding: every argument a Tensor compatible with its spec.  For a
    method (``method``: decorated in a class body, called through its instance) the signature
    describes the arguments after ``self``."""
    if method and len(args) == len(signature) + 1:
        return (args[0],) + tuple(_bind_signature(signature, args[1:], kwargs, fname))
    if kwargs:
        raise TypeError(f"{fname}: with an input_signature, pass the arguments positionally; "
                        f"got keyword arguments {sorted(kwargs)}")
    if len(args) != len(signature):
        raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed: the input_signature "
                        f"has {len(signature)} argument(s) but the call passed {len(args)}.")
    out = []
    for i, (a, spec) in enumerate(zip(args, signature)):
        if isinstance(a, (Tensor, Variable, _Array, np.ndarray)):
            t = convert_to_tensor(a)
        else:
            try:
                t = convert_to_tensor(a, dtype=spec.dtype)
            except (TypeError, ValueError) as e:
                raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed: argument {i} "
                                f"{a!r} cannot be converted to {spec!r}: {e}") from None
        if not spec.is_compatible_with(t._value):
            raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed due to `Can not cast "
                            f"{_spec_of(t._value)} to {spec!r}` (argument {i}).")
        out.append(t)
    return tuple(out)


# ---------------------------------------------------------------------------
# Argument keys: dynamic arrays by shape/dtype, Python values by value
# ---------------------------------------------------------------------------

_DYN = object()  # marks a dynamic leaf in a template


def _aval_key(v):
    return v.aval   # shape, dtype, weak type (and sharding): hashable, and what jit keys on


def _key(x, dyn):
    """Hashable key of one argument; appends its dynamic arrays to ``dyn``."""
    t = type(x)
    if t is Tensor:
        v = x._value
        dyn.append(v)
        return _aval_key(v)
    if t is tuple or t is list:
        return (t, tuple([_key(e, dyn) for e in x]))
    if t is dict:
        return (dict, tuple([(k, _key(x[k], dyn)) for k in sorted(x)]))
    if t in (int, float, bool, str, type(None)):
        return (t, x)
    if isinstance(x, Tensor):
        v = x._value
        dyn.append(v)
        return _aval_key(v)
    if isinstance(x, Variable):
        return ("var", x._id)
    if isinstance(x, (_Array, _Tracer)):
        dyn.append(x)
        return _aval_key(x)
    if isinstance(x, (np.ndarray, np.generic)):
        v = convert_to_tensor(x)._value
        dyn.append(v)
        return ("np", _aval_key(v))
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return (t, tuple([_key(e, dyn) for e in x]))
    if t in (bytes, complex, type) or isinstance(x, (np.dtype, _dtypes.DType)):
        return (t, x)
    # Any other object (a Module, an optimizer, a callable) keys by identity, as TF's
    # weak-reference keys: two equal-but-distinct models must not share Variables.
    # The entry's template holds the object, so its id is not reused while cached.
    return ("obj", t, id(x))


def _tensor_args(x, out):
    """The dynamic leaves as op inputs, in ``_key``'s order (Tensors keep their ids)."""
    if isinstance(x, Tensor):
        out.append(x)
    elif isinstance(x, (_Array, _Tracer)):
        out.append(x)
    elif isinstance(x, (np.ndarray, np.generic)):
        out.append(convert_to_tensor(x))
    elif type(x) is tuple or type(x) is list or (isinstance(x, tuple) and hasattr(x, "_fields")):
        for e in x:
            _tensor_args(e, out)
    elif type(x) is dict:
        for k in sorted(x):
            _tensor_args(x[k], out)


def _template(x):
    """The argument structure with dynamic leaves replaced by ``_DYN`` (holds no arrays)."""
    if isinstance(x, Tensor) or isinstance(x, (_Array, _Tracer, np.ndarray, np.generic)):
        return _DYN
    t = type(x)
    if t is tuple or t is list:
        return t(_template(e) for e in x)
    if t is dict:
        return {k: _template(x[k]) for k in sorted(x)}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*[_template(e) for e in x])
    return x


def _fill(tpl, it):
    """Rebuild the arguments from a template, dynamic leaves as Tensors from ``it``."""
    if tpl is _DYN:
        return next(it)
    t = type(tpl)
    if t is tuple or t is list:
        return t(_fill(e, it) for e in tpl)
    if t is dict:
        return {k: _fill(v, it) for k, v in tpl.items()}
    if isinstance(tpl, tuple) and hasattr(tpl, "_fields"):
        return t(*[_fill(e, it) for e in tpl])
    return tpl


def _split_out(x, dyn):
    """Outputs -> template with arrays taken out into ``dyn``."""
    if isinstance(x, (Tensor, Variable)):
        dyn.append(x._value)
        return _DYN
    if isinstance(x, (_Array, _Tracer)):
        dyn.append(x)
        return _DYN
    t = type(x)
    if t is tuple or t is list:
        return t(_split_out(e, dyn) for e in x)
    if t is dict:
        return {k: _split_out(v, dyn) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*[_split_out(e, dyn) for e in x])
    return x


# ---------------------------------------------------------------------------
# The collector (installed in _state while a Function traces)
# ---------------------------------------------------------------------------

class _Rediscover(Exception):
    """The trace touched a Variable the last discovery did not see."""


class _NeedEval(Exception):
    """Discovery met a Variable whose initial value is traced: rerun it evaluating constants."""


_SINGLETON_MSG = ("tf.function only supports singleton tf.Variables created on the first call. Make "
                  "sure the tf.Variable is only created once or created outside tf.function. "
                  "(tapejax.function `{}`)")
_NON_FIRST_MSG = ("Creating variables on a non-first call to a function decorated with tf.function. "
                  "(tapejax.function `{}`: create the Variables outside, or on the first call)")


class _Discover:
    """Discovery: remember every Variable touched (and its value before the call)."""

    def __init__(self, fname, allow_create, eval_mode):
        self.fname = fname
        self.allow_create = allow_create
        self.eval_mode = eval_mode
        self.orig = {}        # var id -> (var, value before)  (insertion = first-touch order)
        self.assigned = set()
        self.created_ids = set()

    def touch(self, var, assign):
        if var._id not in self.orig:
            _ = var._value   # (a pending update is computed now, outside the trace: ``_lazy.force_many``)
            self.orig[var._id] = (var, var._state())
        if assign:
            self.assigned.add(var._id)

    def created(self, var):
        if not self.allow_create:
            raise ValueError(_NON_FIRST_MSG.format(self.fname))
        if isinstance(var._value, _Tracer):
            if not self.eval_mode:
                raise _NeedEval()
            raise ValueError(f"tapejax.function `{self.fname}` created a Variable whose initial value "
                             "depends on the function's arguments; Variables created inside a "
                             "tapejax.function are initialised once, outside the compiled program: "
                             "give an initial value that does not depend on the arguments.")
        self.orig[var._id] = (var, var._state())
        self.created_ids.add(var._id)

    def restore(self):
        for var, state in self.orig.values():
            var._restore(state)


class _Trace:
    """The compiling trace: only known Variables may be touched; none created."""

    __slots__ = ("fname", "known", "rw", "fresh")

    def __init__(self, fname, known, rw, fresh):
        self.fname = fname
        self.known = known
        self.rw = rw
        self.fresh = fresh   # this call just ran discovery (so creating now is a second creation)

    def touch(self, var, assign):
        if var._id not in self.known or (assign and var._id not in self.rw):
            raise _Rediscover()

    def created(self, var):
        if not self.fresh:
            raise _Rediscover()  # discovery decides: first call or not
        raise ValueError(_SINGLETON_MSG.format(self.fname))


# ---------------------------------------------------------------------------
# The Function
# ---------------------------------------------------------------------------

class _Entry:
    """One compiled specialisation (one argument key).

    ``make_pure(entry)`` builds the function ``jitted`` compiles; it reads the
    entry's fields when traced, not when built.
    """

    __slots__ = ("jitted", "rw", "ro", "out_tpl", "template", "in_shardings", "prim", "callbacks")

    def __init__(self, template, rw: tuple, ro: tuple, make_pure: Callable[["_Entry"], Callable[..., Any]]):
        self.callbacks = False   # the program calls back into Python (it may raise at run time)
        # one NamedSharding per dynamic input: set by Function._build when there is a mesh
        self.in_shardings: Optional[list[jax.sharding.NamedSharding]] = None
        self.prim: Optional[Primitive] = None   # made on the first call from inside a tape
        self.template = template
        self.rw = rw
        self.ro = ro
        self.out_tpl = None
        self.jitted = jax.jit(make_pure(self), donate_argnums=0)


def _is_value_error(e):
    return isinstance(e, (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError,
                          jax.errors.TracerArrayConversionError))


def _map_trace_error(e, fname):
    return OperatorNotAllowedInGraphError(
        f"In tapejax.function `{fname}`: a traced tensor was used where Python needs its value "
        f"({type(e).__name__}). {_CF_HINT}\n\nJAX said: {str(e).splitlines()[0] if str(e) else e!r}")


#: Compiled specialisations kept per Function (least recently used dropped first;
#: a dropped one is traced again when called again).
_FUNCTION_CACHE = Family("function", 256)


class Function:
    """A compiled, callable wrapper made by ``tapejax.function``.

    Calls with Tensors of the same shapes and dtypes (and equal Python
    arguments) reuse one compiled XLA program (at most 256 are kept, least
    recently used dropped first).  ``experimental_get_tracing_count()``
    counts the compiling traces.  ``python_function`` is the wrapped function.
    """

    def __init__(self, func, input_signature=None, jit_compile=None, reduce_retracing=False,
                 mesh=None, in_specs=None, variable_specs=None, name=None):
        self.python_function = func
        self.input_signature = None if input_signature is None else tuple(input_signature)
        self._jit_compile = jit_compile
        self._reduce_retracing = bool(reduce_retracing)
        self._name = name or getattr(func, "__name__", "function")
        self._cache = _FUNCTION_CACHE.new()   # argument key -> _Entry (bounded LRU)
        self._tracing_count = 0
        self._first = True          # no call has finished discovery yet
        self._known = None          # (vars in order, rw ids) from the last discovery
        self._lock = threading.RLock()
        self._mesh = mesh
        self._in_specs = in_specs
        self._variable_specs = variable_specs
        # a function defined in a class body with `self` first: called as a method, its
        # input_signature describes the arguments after `self` (TF's)
        code = getattr(func, "__code__", None)
        self._method = bool(code and code.co_argcount and code.co_varnames[0] == "self"
                            and "." in getattr(func, "__qualname__", ""))
        functools.update_wrapper(self, func)

    # -- descriptor: decorated methods ------------------------------------
    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return _BoundFunction(self, instance)

    def experimental_get_tracing_count(self):
        """How many times the function was traced for compilation.

        As TF's, except that the discovery pass is not counted (TF reports 2
        for a first call that creates Variables; tapejax reports 1).
        """
        return self._tracing_count

    @property
    def function_spec(self):
        return self.input_signature

    # -- the call ------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if _state._local.collector is not None:
            # Called while another tapejax.function traces: inline (as TF does).
            if self.input_signature is not None:
                args = _bind_signature(self.input_signature, args, kwargs, self._name, self._method)
            return self.python_function(*args, **kwargs)
        if _state.tapes():
            return self._call_under_tape(args, kwargs)
        if self.input_signature is not None:
            args = _bind_signature(self.input_signature, args, kwargs, self._name, self._method)
        dyn = []
        parts = []
        for a in args:   # the common case inline: a Tensor argument keys by its aval
            if type(a) is Tensor:
                v = a._value
                dyn.append(v)
                parts.append(v.aval)
            else:
                parts.append(_key(a, dyn))
        key = (tuple(parts), _key(kwargs, dyn) if kwargs else None)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                return self._build_and_run(key, args, kwargs, dyn)
        return self._run(entry, dyn)

    def _call_under_tape(self, args, kwargs):
        """Called eagerly while a GradientTape records.

        A function that assigns no Variable is recorded as ONE op (its compiled
        program) whose inputs are its Tensor arguments and the Variables it
        reads, so the tape differentiates through the compiled function (as TF
        records a tf.function call).  A function that assigns Variables runs
        op by op instead, so every op is recorded (same values and gradients).
        """
        if self.input_signature is not None:
            args = _bind_signature(self.input_signature, args, kwargs, self._name, self._method)
        dyn = []
        key = (tuple(_key(a, dyn) for a in args), _key(kwargs, dyn) if kwargs else None)
        entry = self._cache.get(key)
        if entry is None:
            stack = _state.tapes()
            saved = stack[:]
            stack[:] = []          # build (and run once) with no tape recording the trace
            try:
                with self._lock:
                    entry = self._cache.get(key)
                    if entry is None:
                        entry = self._build(key, args, kwargs, dyn)
            finally:
                stack[:] = saved
        if entry.rw or self._mesh is not None:
            from ..autodiff.custom import graph_mode  # graph mode: tapejax.gradients works (issue #4)
            with graph_mode():
                return self.python_function(*args, **kwargs)
        tensors = []
        _tensor_args((args, kwargs), tensors)
        if entry.prim is None:
            from ..core.bind import Primitive
            n_ro = len(entry.ro)
            jitted = entry.jitted

            def impl(*vals):
                return tuple(jitted([], list(vals[:n_ro]), list(vals[n_ro:]))[0])

            entry.prim = Primitive(f"PartitionedCall[{self._name}]", impl, multiple_results=True)
        from ..core.bind import bind
        outs = bind(entry.prim, *entry.ro, *tensors)
        tpl = entry.out_tpl
        if tpl is _DYN:
            return outs[0]
        if tpl is None:
            return None
        return _fill(tpl, iter(outs))

    def _run(self, entry, dyn):
        rw = entry.rw
        rw_vals = [v._value for v in rw]
        copy_all = entry.callbacks
        for i, v in enumerate(rw):
            # A value the Variable does not own (a read, a Tensor the user kept, a pending
            # value's input, another Variable may hold it: ``Variable.owns_buffer``) must
            # survive the call: donate a copy.  A program with host callbacks can fail after
            # its inputs were donated: it always gets copies, so the Variables are untouched
            # when it raises.
            if copy_all or not v.owns_buffer():
                rw_vals[i] = jnp.array(rw_vals[i], copy=True)
        ro_vals = [v._value for v in entry.ro]
        if self._mesh is not None:
            dyn = self._place_inputs(entry, dyn)
        if rw:
            # Ctrl-C cannot split the call (which consumed the old values) and the write-back.
            with deferred_interrupts():
                outs, new_rw = entry.jitted(rw_vals, ro_vals, dyn)
                # each Variable owns its new value unless the program passed an input through
                # (an unassigned path) or returned it twice (also as an output, or to another
                # Variable)
                write_back(rw, new_rw, itertools.chain(rw_vals, ro_vals, dyn), outs)
        else:
            outs, _ = entry.jitted(rw_vals, ro_vals, dyn)
        tpl = entry.out_tpl
        if tpl is _DYN:
            return Tensor(outs[0])
        if tpl is None:
            return None
        return _fill(tpl, iter([Tensor(o) for o in outs]))

    # -- building an entry ------------------------------------------------------
    def _discover(self, template, dyn):
        """Run the function abstractly (``jax.eval_shape``) to find the Variables it touches.

        A Variable created here needs a concrete initial value: when one is
        traced (computed by jnp ops inside the trace), the pass is abandoned at
        that creation and rerun under ``jax.ensure_compile_time_eval`` (ops on
        constants then run eagerly).  Variables created by tapejax itself
        (optimizer slots, ``iterations``) are concrete already, so the usual
        first call needs one pass.
        """
        try:
            self._discover_pass(template, dyn, eval_mode=False)
        except _NeedEval:
            self._discover_pass(template, dyn, eval_mode=True)

    def _discover_pass(self, template, dyn, eval_mode):
        col = _Discover(self._name, allow_create=self._first, eval_mode=eval_mode)
        fn = self.python_function

        def probe(dyn_vals):
            from ..autodiff.custom import graph_mode  # graph mode: tapejax.gradients works (issue #4)
            with graph_mode():
                args, kwargs = _fill(template, iter([Tensor(d) for d in dyn_vals]))
                if eval_mode:
                    with jax.ensure_compile_time_eval():
                        fn(*args, **(kwargs or {}))
                else:
                    fn(*args, **(kwargs or {}))
            return None

        prev = _state._local.collector
        _state._local.collector = col
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jax.eval_shape(probe, [jax.ShapeDtypeStruct(d.shape, d.dtype) for d in dyn])
        except jax.errors.JAXTypeError as e:
            if _is_value_error(e):
                raise _map_trace_error(e, self._name) from None
            raise
        finally:
            _state._local.collector = prev
            col.restore()
        order = [var for var, _ in col.orig.values()]
        self._known = (order, frozenset(col.assigned))
        self._first = False

    def _build_and_run(self, key, args, kwargs, dyn):
        entry = self._build(key, args, kwargs, dyn)
        return self._run(entry, dyn)

    def _build(self, key, args, kwargs, dyn):
        """Trace (discovering Variables when needed) without running; cache and return the entry.

        Nothing runs and no Variable changes here, so a failed trace (or a
        retrace after discovering new Variables) leaves all state as it was.
        """
        template = (_template(args), _template(kwargs) if kwargs else None)
        for attempt in range(2):
            fresh = self._known is None or attempt == 1
            if fresh:
                self._discover(template, dyn)
            assert self._known is not None  # _discover sets it
            order, assigned = self._known
            rw = tuple(v for v in order if v._id in assigned)
            ro = tuple(v for v in order if v._id not in assigned)
            entry = _Entry(template, rw, ro, functools.partial(self._make_pure, fresh=fresh))
            if self._mesh is not None:
                entry.in_shardings = self._input_shardings(args, kwargs)
                self._place_variables(entry)
            try:
                self._trace(entry, dyn)
            except _Rediscover:
                self._tracing_count -= 1   # that trace was abandoned
                continue
            except jax.errors.JAXTypeError as e:
                if _is_value_error(e):
                    raise _map_trace_error(e, self._name) from None
                raise
            self._cache[key] = entry
            return entry
        raise RuntimeError(f"tapejax.function `{self._name}` touches different Variables on every "
                           "trace; make the set of Variables it reads and assigns depend only on its "
                           "arguments' shapes and Python values.")

    @staticmethod
    def _spec(x, sharding=None):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=getattr(x, "weak_type", False),
                                    sharding=sharding)

    def _trace(self, entry, dyn):
        mesh = self._mesh is not None
        rw = [self._spec(v._value, v._value.sharding if mesh else None) for v in entry.rw]
        ro = [self._spec(v._value, v._value.sharding if mesh else None) for v in entry.ro]
        if mesh:
            assert entry.in_shardings is not None  # _build sets them when there is a mesh
            dn = [self._spec(d, s) for d, s in zip(dyn, entry.in_shardings)]
        else:
            dn = [self._spec(d) for d in dyn]
        traced = entry.jitted.trace(rw, ro, dn)
        entry.callbacks = bool(entry.rw) and _has_callback(traced.jaxpr.jaxpr)

    def _make_pure(self, entry, *, fresh):
        fn = self.python_function
        fname = self._name
        constrain = self._variable_constraint()

        def pure(rw_vals, ro_vals, dyn_vals):
            self._tracing_count += 1
            rw, ro = entry.rw, entry.ro
            col = _Trace(fname, frozenset(v._id for v in rw + ro), frozenset(v._id for v in rw), fresh)
            saved = [(v, v._state()) for v in rw + ro]
            prev = _state._local.collector
            _state._local.collector = col
            try:
                for v, val in zip(rw, rw_vals):
                    v._value = val
                for v, val in zip(ro, ro_vals):
                    v._value = val
                args, kwargs = _fill(entry.template, iter([Tensor(d) for d in dyn_vals]))
                from ..autodiff.custom import graph_mode  # graph mode: tapejax.gradients works (issue #4)
                with graph_mode():
                    out = fn(*args, **(kwargs or {}))
                outs = []
                entry.out_tpl = _split_out(out, outs)
                new_rw = [v._value for v in rw]
            finally:
                _state._local.collector = prev
                for v, st in saved:
                    v._restore(st)
            if constrain is not None:
                new_rw = [constrain(v, val) for v, val in zip(rw, new_rw)]
            return outs, new_rw

        return pure

    # -- several devices -------------------------------------------------------------
    def _var_sharding(self, var):
        P = jax.sharding.PartitionSpec
        mesh = self._mesh
        assert mesh is not None  # only called for a Function with a mesh
        spec = self._variable_specs(var) if self._variable_specs is not None else None
        if spec is None and self._variable_specs is not None:
            owner = slot_owner(var)   # optimizer state is placed like the Variable it belongs to
            if owner is not None:
                spec = self._variable_specs(owner)
        if spec is not None and not isinstance(spec, P):
            raise TypeError(f"variable_specs({var.name}) must return a PartitionSpec or None; got {spec!r}")
        return jax.sharding.NamedSharding(mesh, spec if spec is not None else P())

    def _variable_constraint(self):
        if self._mesh is None:
            return None

        def constrain(var, val):
            return jax.lax.with_sharding_constraint(val, self._var_sharding(var))
        return constrain

    def _input_shardings(self, args, kwargs):
        """One NamedSharding per dynamic leaf, in the order ``_key`` collects them."""
        P = jax.sharding.PartitionSpec
        mesh = self._mesh
        assert mesh is not None  # only called for a Function with a mesh
        specs = self._in_specs
        out = []
        per_arg = isinstance(specs, (list, tuple))
        if per_arg and len(specs) != len(args):
            raise ValueError(f"in_specs has {len(specs)} entries but `{self._name}` was called with "
                             f"{len(args)} positional arguments")
        for i, a in enumerate(args):
            n = []
            _key(a, n)
            spec = specs[i] if per_arg else specs
            out.extend([spec] * len(n))
        if kwargs:
            n = []
            _key(kwargs, n)
            out.extend([None if per_arg else specs] * len(n))
        shardings = []
        for spec in out:
            shardings.append(jax.sharding.NamedSharding(mesh, spec if spec is not None else P()))
        return shardings

    def _place_inputs(self, entry, dyn):
        assert entry.in_shardings is not None  # _build sets them when there is a mesh
        return [d if getattr(d, "sharding", None) == s else jax.device_put(d, s)
                for d, s in zip(dyn, entry.in_shardings)]

    def _place_variables(self, entry):
        for v in entry.rw + entry.ro:
            sh = self._var_sharding(v)
            if getattr(v._value, "sharding", None) != sh:
                v._value = jax.device_put(v._value, sh)

    def __repr__(self):
        return f"<tapejax.function {self._name}>"


_CALLBACKS = ("debug_callback", "pure_callback", "io_callback")


def _has_callback(jaxpr):
    """Does this jaxpr (or one nested in it) call back into Python?"""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _CALLBACKS:
            return True
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                sub = getattr(sub, "jaxpr", sub)   # a ClosedJaxpr's Jaxpr
                if hasattr(sub, "eqns") and _has_callback(sub):
                    return True
    return False


def _check_spec(name, spec, allow_seq):
    P = jax.sharding.PartitionSpec
    if spec is None or isinstance(spec, P):
        return
    if allow_seq and isinstance(spec, (list, tuple)) and all(x is None or isinstance(x, P) for x in spec):
        return
    raise TypeError(f"{name} must be a jax.sharding.PartitionSpec" + (" or a sequence of them (one per "
                    "positional argument, None for replicated)" if allow_seq else "") + f"; got {spec!r}")


class _BoundFunction:
    """A Function bound to an instance (a decorated method); the instance keys the cache."""

    __slots__ = ("_fn", "_self")

    def __init__(self, fn, instance):
        self._fn = fn
        self._self = instance

    def __call__(self, *args, **kwargs):
        return self._fn(self._self, *args, **kwargs)

    def experimental_get_tracing_count(self):
        return self._fn.experimental_get_tracing_count()

    @property
    def python_function(self):
        return self._fn.python_function.__get__(self._self)


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
        ``None`` dimension accepts any size; XLA compiles one program per
        concrete shape.
      jit_compile: accepted for TF compatibility; tapejax always compiles with XLA.
      reduce_retracing: accepted for TF compatibility; XLA programs have
        static shapes, so each new shape is a new trace.
      autograph: accepted; tapejax does not rewrite Python control flow: use
        ``tapejax.cond`` / ``while_loop`` / ``scan`` on tensor values.
      mesh, in_specs, variable_specs: run on several devices (see below).

    Every Variable the function reads or assigns is state of the compiled
    program: read ones are inputs, assigned ones are donated and written
    back after each call.  Variables may be created inside only on the first
    call (ValueError later, as TF).  Tensor arguments key the compiled
    programs by shape and dtype, Python arguments by value.

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
    Variables used by a mesh function live on the mesh's devices: use them
    in functions on the same mesh.
    """
    if jit_compile is None and experimental_compile is not None:
        jit_compile = experimental_compile
    if experimental_relax_shapes is not None:
        reduce_retracing = experimental_relax_shapes
    if input_signature is not None:
        sig = tuple(input_signature) if isinstance(input_signature, (list, tuple)) else None
        if sig is None or not all(isinstance(s, TensorSpec) for s in sig):
            raise TypeError(f"input_signature must be a list or tuple of tapejax.TensorSpec; got "
                            f"{input_signature!r}")
    if mesh is None:
        if in_specs is not None or variable_specs is not None:
            raise ValueError("in_specs and variable_specs need a mesh: pass mesh=jax.sharding.Mesh(...)")
    elif not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh; got {mesh!r} of type {type(mesh).__name__}")
    else:
        _check_spec("in_specs", in_specs, allow_seq=True)
        if variable_specs is not None and not callable(variable_specs):
            raise TypeError("variable_specs must be a callable Variable -> PartitionSpec (or None for "
                            f"replicated); got {variable_specs!r}")
    cls = Function

    def decorate(f):
        if not callable(f):
            raise TypeError(f"{f!r} is not a callable object")
        return cls(f, input_signature=input_signature, jit_compile=jit_compile,
                   reduce_retracing=reduce_retracing, mesh=mesh, in_specs=in_specs,
                   variable_specs=variable_specs)

    if func is None:
        return decorate
    return decorate(func)
