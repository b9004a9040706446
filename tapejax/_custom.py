"""Gradient control: ``stop_gradient``, ``custom_gradient``, the gradient registry
(``RegisterGradient``, ``gradient_override_map``) and ``gradients``.

stop_gradient
    The op ``StopGradient`` is not differentiable to the tape (its output is a
    cut, so a source reachable only through it is unconnected: ``None``) and
    its function is ``lax.stop_gradient``, so it also holds inside compiled
    code, ``jax.grad`` and nested derivatives.

custom_gradient
    ``f(*x) -> (y, grad_fn)``.  The rule is TF's timing: ``f`` runs when the
    decorated function is called, ``grad_fn`` when ``tape.gradient`` runs, each
    with the Python state of that moment; a compiled replay never freezes it.

    *Call.*  ``f`` runs once, eagerly (no tape records inside it; ops on
    concrete values are computed on the spot even inside a trace, so
    ``tf.shape`` and random draws work), and ONE op is recorded on each tape
    tracking an input: inputs are the flattened arguments, the Variables ``f``
    reads and tensor keyword arguments, then ``f``'s outputs *as computed now*
    (constants to the tape).  The op's value in every replay is those outputs,
    so ``y`` is the call's even when the replay computes it (deferred
    execution), and random numbers are drawn once.  The node's static
    parameters hold a handle (``_CallContext``, equal to every other, so it
    never splits a cache) on the call's ``grad_fn`` and the random state ``f``
    started from; the recording tapes keep that record alive.

    *Gradient.*  ``_replay.resolve_late`` calls ``_late_node`` for each such
    node in the slice: the backward is traced now (``jax.make_jaxpr`` on the
    inputs' avals).  First order: the call's ``grad_fn``, as TF calls it.
    Recorded by another tape (nested tapes, a persistent tape inside its
    ``with``): ``f`` is rematerialised on the op's inputs with the call's
    random state, then its ``grad_fn``, so the gradient is a function of the
    inputs that the outer tape differentiates (second order through
    ``grad_fn``, as TF).  Everything the trace closes over (a Tensor rebound
    each step, a Variable's value, a random draw) is a constant of the jaxpr,
    and its top-level literals (a Python float from a schedule) are lifted
    too: both become constant inputs of the node, i.e. runtime arguments of
    the compiled replay.  The jaxpr's structure (``_fingerprint``) joins the
    node's signature: a steady loop compiles once even while the values it
    reads change, and a ``grad_fn`` that computes something new (a Python
    branch) gets a new compile, never a stale one.  The backward runs as a
    ``jax.custom_vjp`` whose value is the recorded outputs and whose
    backward evaluates that jaxpr; the op's gradient goes to its inputs and
    Variables only (TF's rule).  The call's ``grad_fn`` reads Variables as
    they are at gradient time (TF); a rematerialised ``f`` and its ``grad_fn``
    read them as the op's inputs (the values the call read), which the outer
    tape differentiates.

    Under ``jax.jit`` / ``jax.grad`` (a call on traced values, e.g. inside
    ``tapejax.function`` with no tape) the op is the same ``custom_vjp``,
    its backward traced with the enclosing trace and ``jax.closure_convert``-ed
    (values an enclosing differentiation perturbs get no gradient through this
    op): state is read when that trace runs, as TF's ``tf.function`` does.

    Left as it is: when another tape records the gradient, ``f`` runs again at
    gradient time, so a Python value ``f`` itself reads that changed between
    the call and the gradient is seen as it is then (TF's ``grad_fn`` would
    close over the call's).  Each gradient call traces its custom-gradient
    nodes once (about a millisecond each), as TF runs ``grad_fn`` in Python.

RegisterGradient / gradient_override_map
    ``RegisterGradient("Name")(fn)`` registers ``fn(op, *grads)``.  Ops created
    inside ``gradient_override_map({"OpType": "Name"})`` carry ``"Name"`` as
    their gradient (``Node.grad_type``); an op type registered by name (a new
    op made with ``tapejax.define_op``) uses its own registered gradient.
    The registry's rule, registered with ``_replay.register_impl_rule``, wraps
    such a node's function in a ``jax.custom_vjp`` whose backward calls the
    registered function.  ``"Identity"`` is the built-in identity gradient, so
    ``{"Floor": "Identity"}`` is a straight-through estimator.

    Deliberate difference from TensorFlow: TF honours the map only in graph
    gradients (``tf.gradients`` in a ``tf.function``); every ``GradientTape``
    ignores it (tensorflow issues 35203, 36870).  tapejax honours it for every
    gradient API, eager tapes included.

gradients (graph mode)
    ``tapejax.function`` runs the user's function inside ``graph_mode()``: a
    ``_GraphTape`` on the tape stack records every float op (anything it
    meets untracked becomes a leaf), as a TF graph holds every op.
    ``gradients(ys, xs, ...)`` is a gradient call on that tape; ``stop_gradients``
    are honoured on a view of the recording where each stopped tensor is a
    new leaf for its consumers.  Eagerly (no graph mode) it raises TF's
    RuntimeError.
"""
import contextlib
import functools
import inspect
import re
import weakref
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax.extend import core as _jcore

from . import _dtypes, _nest, _replay, _state
from ._lazy import _Thunk
from ._lru import LRU
from ._primitives import REGISTRY, Primitive, bind, define
from ._tape import GradientTape, Node, UnconnectedGradients, _intern, _unconnected
from ._tensor import Tensor, convert_to_tensor
from .ops import random as _random

_Tracer = jax.core.Tracer


# --------------------------------------------------------------------------
# running user Python (f, grad_fn, registered gradients) with no tape recording
# --------------------------------------------------------------------------

@contextlib.contextmanager
def _tape_stack(stack):
    """Replace this thread's stack of recording tapes by ``stack`` for the block."""
    local = _state._local
    saved = local.tapes
    local.tapes = stack
    try:
        yield
    finally:
        local.tapes = saved


class _VariableWatcher:
    """Sits on the tape stack while ``f`` runs: collects the Variables it reads."""

    __slots__ = ("variables",)

    def __init__(self):
        self.variables = {}

    def _record_read(self, var, t):
        self.variables.setdefault(var._id, var)

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        pass

    def __getattr__(self, name):  # any other recording hook a tape stack entry may get: ignore it
        if name.startswith("_record"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


@contextlib.contextmanager
def _substituted(variables, values):
    """Variables read inside the block give ``values`` (the replay's traced reads)."""
    saved = [v._value for v in variables]
    try:
        for v, x in zip(variables, values):
            v._value = x
        yield
    finally:
        for v, x in zip(variables, saved):
            v._value = x


def _is_float(x):
    return _dtypes.is_trainable_dtype(jnp.result_type(x))


# --------------------------------------------------------------------------
# stop_gradient
# --------------------------------------------------------------------------

_STOP = REGISTRY.get("StopGradient") or define(
    "StopGradient", lax.stop_gradient, differentiable=False,
    nondiff_reason="tf.stop_gradient (op StopGradient) stops the gradient here")


def stop_gradient(input, name=None):
    """``tf.stop_gradient``: the value of ``input``, through which no gradient flows.

    To a tape the result is a constant: a source reachable only through it
    gets ``None`` (zeros with ``unconnected_gradients='zero'``), and other
    paths are unaffected (``x * stop_gradient(x)`` has gradient ``x``).
    It is ``lax.stop_gradient``, so it also holds under ``jax.jit`` /
    ``jax.grad`` and in higher derivatives.
    """
    if input is None:
        raise ValueError("Argument `input` of stop_gradient must be a Tensor, Variable or array-like; "
                         "got None")
    if not isinstance(input, Tensor) and not hasattr(input, "_read"):
        input = convert_to_tensor(input)
    return bind(_STOP, input)


# --------------------------------------------------------------------------
# structures of arguments: hashable skeletons (part of the cache key)
# --------------------------------------------------------------------------

_LEAF = "*"


def _is_tensorish(x):
    return isinstance(x, (Tensor, jax.Array, np.ndarray, _Tracer)) or hasattr(x, "_read")


def _skeleton(x, consts=False):
    """A hashable description of a nested structure; leaves become ``_LEAF``.

    With ``consts``, leaves that are not tensors are kept as ``("const", value)``
    (they must be hashable: they are part of the compiled replay's key)."""
    if isinstance(x, dict):
        keys = tuple(sorted(x))
        return ("dict", type(x), tuple(x), tuple(_skeleton(x[k], consts) for k in keys))
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        return ("namedtuple", type(x), tuple(_skeleton(v, consts) for v in x))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, type(x), tuple(_skeleton(v, consts) for v in x))
    if consts and not _is_tensorish(x):
        try:
            hash(x)
        except TypeError:
            raise TypeError(f"a keyword argument of a @custom_gradient function holds {x!r}: it must be "
                            "a Tensor, a Variable or a hashable Python value") from None
        return ("const", x)
    return _LEAF


def _build(skel, it):
    """Inverse of ``_skeleton``: leaves taken in order from the iterator ``it``."""
    if skel == _LEAF:
        return next(it)
    if skel[0] == "const":
        return skel[1]
    kind, cls = skel[0], skel[1]
    if kind == "dict":
        order, children = skel[2], skel[3]
        built = {k: _build(c, it) for k, c in zip(sorted(order), children)}
        return cls((k, built[k]) for k in order) if cls is not dict else {k: built[k] for k in order}
    if kind == "namedtuple":
        return cls(*[_build(c, it) for c in skel[2]])
    return cls(_build(c, it) for c in skel[2])


def _shape(x):
    return tuple(np.shape(x))


def _dtype_name(x):
    return np.dtype(jnp.result_type(x)).name


# --------------------------------------------------------------------------
# custom_gradient
# --------------------------------------------------------------------------

def _accepts_variables(grad_fn):
    try:
        sig = inspect.signature(grad_fn)
    except (TypeError, ValueError):
        return True  # builtins etc.: cannot tell, let the call decide
    for p in sig.parameters.values():
        if p.name == "variables" and p.kind != p.POSITIONAL_ONLY:
            return True
        if p.kind == p.VAR_KEYWORD:
            return True
    return False


def _split_result(fname, res):
    if not isinstance(res, (tuple, list)) or len(res) != 2 or not callable(res[1]):
        raise TypeError(f"A @custom_gradient function must return a pair (output, grad_fn) with a "
                        f"callable grad_fn; {fname} returned {type(res).__name__}"
                        + (f" of length {len(res)}" if isinstance(res, (tuple, list)) else ""))
    return res[0], res[1]


class _Bound:
    """The instance a decorated method is bound to: compared by identity."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Bound) and other.obj is self.obj


class _Spec:
    """Static description of one call of a custom-gradient function (cache key part)."""

    __slots__ = ("in_skel", "n_in", "var_refs", "n_train", "kw_skel", "kw_names", "out_skel", "bound",
                 "n_vals", "n_out", "_key")

    def __init__(self, in_skel, n_in, var_refs, n_train, kw_skel, kw_names, out_skel, bound, n_vals, n_out):
        self.in_skel = in_skel
        self.n_in = n_in
        self.var_refs = var_refs      # refs of the Variables f reads (trainable first)
        self.n_train = n_train        # how many of them grad_fn gets in `variables`
        self.kw_skel = kw_skel
        self.kw_names = kw_names
        self.out_skel = out_skel
        self.bound = bound            # _Bound(instance) for a decorated method, else None
        self.n_vals = n_vals          # the op's true inputs: flat args, Variable reads, tensor kwargs
        self.n_out = n_out            # then its outputs as the call computed them (constants)
        self._key = (in_skel, n_in, var_refs, n_train, kw_skel, kw_names, out_skel, bound, n_vals, n_out)

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, _Spec) and self._key == other._key

    def __repr__(self):
        return f"_Spec(inputs={self.n_in}, variables={len(self.var_refs)})"


class _RngState(NamedTuple):
    """The global random generator as ``f`` found it when called."""
    key: object    # its key (an array; a tracer inside a compiled step's state_scope)
    counts: dict   # its per-op-seed counters


def _rng_snapshot() -> _RngState:
    g = _random._GLOBAL
    return _RngState(g.key, dict(g._op_counts) if g._op_counts else {})


@contextlib.contextmanager
def _rng_replayed(state: "_RngState | None"):
    """Random ops in the block draw what they drew at the call (the generator is set to ``state``;
    None: as it is); the generator is left as it was before the block."""
    g = _random._GLOBAL
    saved = (g._key, g._op_counts, g.scopes)
    if state is not None:
        g._key, g._op_counts = state.key, dict(state.counts)
    else:
        g._op_counts = dict(g._op_counts)
    g.scopes += 1
    try:
        yield
    finally:
        g._key, g._op_counts, g.scopes = saved


class _CallRecord:
    """What one call leaves for its gradient: the ``grad_fn`` it returned and the random state
    ``f`` started from."""

    __slots__ = ("grad_fn", "rng", "__weakref__")

    def __init__(self, grad_fn, rng: _RngState):
        self.grad_fn = grad_fn
        self.rng = rng


#: tape -> the records of the calls it recorded: a tape keeps them alive (TF's tape keeps its
#: grad_fns), and nothing else does.
_KEPT = weakref.WeakKeyDictionary()


class _CallContext:
    """The node's handle on its call's ``_CallRecord``, held weakly: the handle sits in the
    node's static parameters, which the signature table keeps for the first call of a
    structure.  It equals every other handle, so it never splits a cache; only
    ``_late_node`` reads it, from the node at hand."""

    __slots__ = ("record",)

    def __init__(self, record: _CallRecord):
        self.record = weakref.ref(record)   # record() is None once no recording tape is alive

    def __eq__(self, other):
        return isinstance(other, _CallContext)

    def __hash__(self):
        return 0x5EED

    def __repr__(self):
        return "<custom_gradient call>"


class _CustomPrim(Primitive):
    """The op of one custom-gradient function; ``late(node, nested)`` is ``_replay``'s hook that
    traces the node's backward when a gradient is taken."""

    __slots__ = ("late",)


def _abstract(x) -> jax.ShapeDtypeStruct:
    a = x.aval if type(x) is _Thunk else jax.typeof(x)
    return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False))


# -- a backward traced at gradient time: jaxpr, key, runtime arguments -------------------------

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _param_key(v):
    """A hashable stand-in for one equation parameter that is equal across traces of the same
    program (sub-jaxprs by their structure and values, objects by their repr without addresses)."""
    if isinstance(v, (str, int, float, bool, type(None))):
        return v
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_param_key(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple(sorted((str(k), _param_key(x)) for k, x in v.items()))
    if isinstance(v, _jcore.ClosedJaxpr):
        return ("closed", _fingerprint(v.jaxpr, lifted=False), tuple(_value_key(c) for c in v.consts))
    if isinstance(v, _jcore.Jaxpr):
        return ("jaxpr", _fingerprint(v, lifted=False))
    if isinstance(v, (np.dtype, jax.core.ShapedArray)):
        return v
    return (type(v).__qualname__, _ADDRESS.sub("", repr(v)))


_TRACED_CONST = iter(range(1, 1 << 62)).__next__


def _value_key(c):
    """A constant inside a sub-jaxpr (rare: they are hoisted): its value is part of the key
    (a traced one, inside an enclosing trace, makes the key unique)."""
    if isinstance(c, _Tracer):
        return ("traced", _TRACED_CONST())
    a = np.asarray(c)
    return (a.shape, a.dtype.str, a.tobytes())


def _fingerprint(jaxpr, lifted=True) -> tuple:
    """The jaxpr's structure; ``lifted``: its literals are abstracted (their values are
    arguments, see ``_literals``), else their values are part of it (sub-jaxprs)."""
    names = {}

    def ref(x):
        if isinstance(x, _jcore.Literal):
            return ("lit", x.aval) if lifted else ("lit", x.aval, _value_key(x.val))
        n = names.get(x)
        if n is None:
            n = names[x] = len(names)
        return n

    parts = [tuple((ref(v), v.aval) for v in jaxpr.constvars), tuple((ref(v), v.aval) for v in jaxpr.invars)]
    for e in jaxpr.eqns:
        parts.append((e.primitive.name, _param_key(e.params), tuple(ref(x) for x in e.invars),
                      tuple((ref(x), x.aval) for x in e.outvars)))
    parts.append(tuple(ref(x) for x in jaxpr.outvars))
    return tuple(parts)


def _literals(jaxpr) -> tuple:
    """The top-level literal values, in the order ``_eval_lifted`` reads them."""
    atoms = [x for e in jaxpr.eqns for x in e.invars] + list(jaxpr.outvars)
    return tuple(np.asarray(x.val, x.aval.dtype) for x in atoms if isinstance(x, _jcore.Literal))


def _eval_lifted(jaxpr, consts, lits, args):
    """``jax.core.eval_jaxpr`` with the top-level literals read from ``lits`` (arguments)."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    it = iter(lits)

    def read(x):
        return next(it) if isinstance(x, _jcore.Literal) else env[x]

    for e in jaxpr.eqns:
        invals = [read(x) for x in e.invars]
        with e.ctx.manager:
            ans = e.primitive.bind(*invals, **e.primitive.get_bind_params(e.params))
        if e.primitive.multiple_results:
            env.update(zip(e.outvars, ans))
        else:
            env[e.outvars[0]] = ans
    return [read(x) for x in jaxpr.outvars]


class _Late:
    """A node's backward as traced when the gradient was asked for: ``run(v, cts, extra)`` with
    ``extra`` = the trace's constants then its literals (runtime arguments of the compiled
    replay).  ``key`` (mode, jaxpr structure, output tree) joins the replay's cache key: an
    equal key means the same computation of those arguments."""

    __slots__ = ("key", "jaxpr", "n_consts", "out_tree")

    def __init__(self, key, jaxpr, n_consts, out_tree):
        self.key = key
        self.jaxpr = jaxpr
        self.n_consts = n_consts
        self.out_tree = out_tree

    def run(self, v, cts, extra):
        n = self.n_consts
        flat = _eval_lifted(self.jaxpr, extra[:n], extra[n:], (*v, *cts))
        return jax.tree_util.tree_unflatten(self.out_tree, flat)

    def __eq__(self, other):
        return isinstance(other, _Late) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"<custom_gradient backward: {len(self.jaxpr.eqns)} equations>"


class _CustomGradientFunction:
    """The function returned by ``custom_gradient(f)``."""

    def __init__(self, f):
        self._f = f
        self._name = getattr(f, "__name__", "custom_gradient")
        self._prim = _CustomPrim(f"CustomGradient:{self._name}", self._impl, multiple_results=True)
        self._prim.late = self._late_node
        functools.update_wrapper(self, f)

    def __get__(self, obj, objtype=None):
        """As a method decorator: ``self`` is bound, not an input (as TF's ``Bind``)."""
        if obj is None:
            return self
        return functools.partial(self._call, _Bound(obj))

    def _call_f(self, bound, args, kwargs):
        if bound is None:
            return _split_result(self._name, self._f(*args, **kwargs))
        return _split_result(self._name, self._f(bound.obj, *args, **kwargs))

    # -- the eager (or traced) call ------------------------------------------
    def __call__(self, *args, **kwargs):
        return self._call(None, *args, **kwargs)

    def _call(self, bound, *args, **kwargs):
        flat_args = _nest.flatten(args)
        # Conversion reads Variables passed as arguments (recorded on tapes).
        inputs = [convert_to_tensor(a) for a in flat_args]
        rng = _rng_snapshot()
        watcher = _VariableWatcher()
        # Inside a trace, ops on concrete values alone (tf.shape ...) are computed on the spot.
        with _tape_stack([watcher]), jax.ensure_compile_time_eval():
            out, grad_fn = self._call_f(bound, args, kwargs)
        arg_ids = {id(a) for a in flat_args}
        read = [v for v in watcher.variables.values() if id(v) not in arg_ids]
        trainable = [v for v in read if v._trainable]
        others = [v for v in read if not v._trainable]
        if trainable and not _accepts_variables(grad_fn):
            raise TypeError("@tf.custom_gradient grad_fn must accept keyword argument 'variables', "
                            f"since function uses variables: {trainable}")
        flat_out = [convert_to_tensor(o) for o in _nest.flatten(out)]
        # Keyword arguments are passed to f but get no gradient (as TF): their tensors are
        # untracked inputs of the op, other values are part of its static key.
        kw_names = tuple(sorted(kwargs))
        kw_tensors = [convert_to_tensor(k) for k in _nest.flatten([kwargs[k] for k in kw_names])
                      if _is_tensorish(k)]
        variables = trainable + others
        reads = [v._read() for v in variables]  # recorded: the tape watches them as TF's does
        all_in = inputs + reads + kw_tensors
        spec = _Spec(_skeleton(args), len(inputs), tuple(v.ref() for v in variables), len(trainable),
                     _skeleton([kwargs[k] for k in kw_names], consts=True), kw_names, _skeleton(out), bound,
                     len(all_in), len(flat_out))
        held = _CallRecord(grad_fn, rng)
        ctx = _CallContext(held)
        vals = [t._value for t in all_in]
        outs = [o._value for o in flat_out]   # the forward's values: computed now, as in TF
        result_vals = outs
        if any(isinstance(v, _Tracer) for v in vals + outs):
            # Under jax.jit / jax.grad: the custom_vjp itself, so JAX's own AD honours grad_fn.
            result_vals = self._impl(*vals, *outs, spec=spec, ctx=ctx)
        result = tuple(Tensor(v) for v in result_vals)
        tapes = _state.tapes()
        if tapes:
            # The outputs' values are constant inputs of the op: the replay gives them back.
            ids = [t._id for t in inputs + reads] + [0] * (len(kw_tensors) + len(outs))
            static = {"spec": spec, "ctx": ctx}
            for tape in tapes:
                tape._record_op(self._prim, static, None, ids, vals + outs, result)
                try:
                    _KEPT.setdefault(tape, []).append(held)
                except TypeError:   # a recorder that is not a tape (not weakly referable)
                    pass
        return _build(spec.out_skel, iter(result))

    # -- the pure function the replay runs --------------------------------------
    def _impl(self, *vals, spec, ctx, late=None):
        """The op's function: a ``jax.custom_vjp`` whose value is the outputs the call computed
        (``vals`` = the op's inputs, then those outputs, then ``late``'s arguments) and whose
        backward gives the inputs' gradients.

        ``late`` (a ``_Late``): the backward traced when the gradient was asked for (see
        ``_late_node``), run on its runtime arguments.  Without it (a call under ``jax.jit`` /
        ``jax.grad``), the backward is traced with the enclosing trace: ``f`` rematerialised on
        the inputs, then ``grad_fn``, closure-converted (``jax.closure_convert``) so values an
        enclosing differentiation perturbs are explicit arguments given no gradient through this
        op, which is TF's rule (the op's gradient goes to its inputs and Variables only).
        """
        n, m = spec.n_vals, spec.n_out
        v, outs, extra = tuple(vals[:n]), tuple(vals[n:n + m]), tuple(vals[n + m:])
        float_out = tuple(_is_float(o.dtype) for o in outs)
        if late is None:
            out_avals = tuple(_abstract(o) for o in outs)
            ct_example = tuple(jnp.zeros(a.shape, a.dtype) for a, f in zip(out_avals, float_out) if f)

            rec = ctx.record()   # alive: the call that runs this holds it

            def backward(v, cts):
                return self._backward(spec, rec, v, cts, out_avals, float_out, remat=True)

            bwd_conv, consts = jax.closure_convert(backward, v, ct_example)
            extra = tuple(consts)

            def run(v, cts, extra):
                return bwd_conv(v, cts, *extra)
        else:
            run = late.run
        no_outs, no_extra = (None,) * m, (None,) * len(extra)

        def fun(v, outs, extra):
            return outs

        def fwd(v, outs, extra):
            return outs, (v, extra)

        def bwd(res, cts):
            v, extra = res
            cts = tuple(c for c, f in zip(cts, float_out) if f)
            return tuple(run(v, cts, extra)), no_outs, no_extra

        cv = jax.custom_vjp(fun)
        cv.defvjp(fwd, bwd)
        return cv(v, outs, extra)

    def _late_node(self, node: Node, nested: bool) -> Node:
        """``node`` with its backward traced now (``_replay.resolve_late``, at gradient time).

        First order (``nested`` False): the ``grad_fn`` the call returned, as TF calls it.
        Recorded by another tape (``nested``): ``f`` rematerialised on the op's inputs with the
        call's random state, then its ``grad_fn``, so the gradient is a function of the inputs
        that the outer tape can differentiate.  Either runs now, with the Python state of now;
        the trace's constants and literals become inputs of the node (constants to the tape) and
        its structure joins the node's signature, so the compiled replay is reused exactly when
        the traced computation is the same."""
        static = dict(node.static)
        spec, ctx = static["spec"], static["ctx"]
        n, m = spec.n_vals, spec.n_out
        v_abs = tuple(_abstract(x) for x in node.vals[:n])
        out_avals = tuple(_abstract(o) for o in node.vals[n:n + m])
        float_out = tuple(_is_float(a.dtype) for a in out_avals)
        ct_abs = tuple(a for a, f in zip(out_avals, float_out) if f)

        rec = ctx.record()   # None once no tape that recorded the call is alive

        def backward(v, cts):
            return self._backward(spec, rec, v, cts, out_avals, float_out, remat=nested)

        closed, shape = jax.make_jaxpr(backward, return_shape=True)(v_abs, ct_abs)
        out_tree = jax.tree_util.tree_structure(shape)
        jaxpr = closed.jaxpr
        consts = tuple(closed.consts)
        late = _Late((nested, _fingerprint(jaxpr), out_tree), jaxpr, len(consts), out_tree)
        extra = consts + _literals(jaxpr)
        k = len(extra)
        return Node(node.prim, node.static + (("late", late),), node.grad_type, node.vals + extra,
                    node.ids + (0,) * k, node.refs + (None,) * k, node.n_out,
                    _intern(("late", node.sig, late.key)))

    def _run(self, spec, vals):
        """Call f on Tensors wrapping ``vals``; returns (flat outputs, grad_fn, variables)."""
        n_in, n_var = spec.n_in, len(spec.var_refs)
        variables = [r.deref() for r in spec.var_refs]
        args = _build(spec.in_skel, iter([Tensor(v) for v in vals[:n_in]]))
        kwargs = _kwargs_of(spec, vals[n_in + n_var:])
        with _substituted(variables, vals[n_in:n_in + n_var]):
            out, grad_fn = self._call_f(spec.bound, args, kwargs)
        flat = [convert_to_tensor(o) for o in _nest.flatten(out)]
        if _skeleton(out) != spec.out_skel:
            raise ValueError(f"@custom_gradient function {self._name} returned a different output "
                             "structure when replayed; it must be a deterministic function of its inputs")
        return flat, grad_fn, variables

    def _backward(self, spec, rec, vals, cts, out_avals, float_out, remat):
        """The gradients of the op's inputs ``vals``: ``grad_fn(cts)``, with ``grad_fn`` the call's
        (``remat`` False) or that of ``f`` run again on ``vals`` with the call's random state.

        Runs under a trace; ops on concrete values alone (``tf.shape``, a closed-over Tensor's
        arithmetic, random draws) are computed on the spot (``jax.ensure_compile_time_eval``),
        as TF runs them eagerly, so Python can use their values."""
        n_in, n_var = spec.n_in, len(spec.var_refs)
        name = self._name
        with _tape_stack([]), jax.ensure_compile_time_eval():
            grad_fn = None if remat or rec is None else rec.grad_fn
            if grad_fn is None:
                with _rng_replayed(None if rec is None else rec.rng):
                    _, grad_fn, variables = self._run(spec, vals)
                # grad_fn of a rematerialised f reads the Variables as the op's inputs (so an
                # outer tape differentiates through them)
                substituted = variables
            else:
                # the call's grad_fn reads the Variables as they are now, as in TF
                variables = [r.deref() for r in spec.var_refs]
                substituted = []
            it = iter(cts)
            dys = [Tensor(next(it)) if f else Tensor(jnp.zeros(a.shape, a.dtype))
                   for a, f in zip(out_avals, float_out)]
            packed = _build(spec.out_skel, iter(dys))
            if not isinstance(packed, (list, tuple)):
                packed = [packed]
            train = variables[:spec.n_train]
            with _substituted(substituted, vals[n_in:n_in + n_var]):
                if train:
                    res = grad_fn(*packed, variables=train)
                    if not isinstance(res, (list, tuple)) or len(res) != 2:
                        raise ValueError(f"@custom_gradient grad_fn of {name} uses variables, so it must "
                                         "return a pair (input_grads, variable_grads); got "
                                         f"{type(res).__name__}")
                    input_grads, var_grads = res
                    var_grads = _nest.flatten(var_grads)
                    if len(var_grads) != len(train):
                        raise ValueError("Must return gradient for each variable from @custom_gradient "
                                         f"grad_fn: {name} reads {len(train)} trainable variable(s) "
                                         f"{[v.name for v in train]} but grad_fn returned "
                                         f"{len(var_grads)} variable gradient(s)")
                else:
                    input_grads, var_grads = grad_fn(*packed), []
            flat_grads = _nest.flatten(input_grads)
            if len(flat_grads) != n_in:
                raise ValueError(f"custom_gradient function expected to return {n_in} gradients, but "
                                 f"returned {len(flat_grads)} instead. (grad_fn of {name}: expected one "
                                 f"gradient per flattened input, got {_describe(flat_grads)})")
            out = []
            for i, (g, x) in enumerate(zip(flat_grads, vals[:n_in])):
                out.append(_check_grad(g, x, f"gradient {i} returned by the grad_fn of {name} (input {i})"))
            for v, g, x in zip(train, var_grads, vals[n_in:n_in + spec.n_train]):
                out.append(_check_grad(g, x, f"variable gradient for {v.name} returned by the grad_fn of "
                                             f"{name}"))
        out.extend([None] * (len(vals) - len(out)))  # non-trainable reads, tensor kwargs
        return tuple(out)


def _kwargs_of(spec, kw_vals):
    values = _build(spec.kw_skel, iter([Tensor(v) for v in kw_vals]))
    return dict(zip(spec.kw_names, values))


def _describe(grads):
    return "[" + ", ".join("None" if g is None else
                           f"shape {tuple(np.shape(getattr(g, '_value', g)))}" for g in grads) + "]"


def _check_grad(g, x, what):
    """One returned gradient as an array of ``x``'s shape and dtype (None: zero)."""
    if g is None or not _is_float(x):
        return None
    if hasattr(g, "_read"):
        g = g._read()
    arr = g._value if isinstance(g, Tensor) else jnp.asarray(g)
    if _shape(arr) != _shape(x):
        raise ValueError(f"The {what} has shape {_shape(arr)} and dtype {_dtype_name(arr)}, but the input has "
                         f"shape {_shape(x)} and dtype {_dtype_name(x)}: the shapes must be equal")
    return arr.astype(jnp.result_type(x))


def custom_gradient(f=None):
    """``tf.custom_gradient``: decorate ``f(*x) -> (y, grad_fn)`` to define its gradient.

    ``grad_fn(*dy)`` gets one upstream gradient per output of ``y`` (in ``y``'s
    top-level structure) and returns one gradient per flattened input of
    ``f`` (``None`` means zero).  If ``f`` reads trainable Variables, they are
    inputs too: ``grad_fn(*dy, variables=None)`` receives them and returns
    ``(input_grads, variable_grads)``; a ``grad_fn`` without a ``variables``
    keyword is a TypeError when the function is called, as in TF.  A wrong
    number of gradients is a ValueError (as TF); a gradient of the wrong
    shape is a ValueError naming expected and got shapes (TF returns the
    wrongly shaped gradient).  Works eagerly, inside ``jax.jit`` (the op is a
    ``jax.custom_vjp``, so ``jax.grad`` honours it too), and under nested
    tapes: the second derivative differentiates ``grad_fn``.

    ``f`` runs at the call and ``grad_fn`` at each ``tape.gradient``, each
    seeing the Python state of that moment (see the module docstring): a
    schedule read by ``grad_fn`` (gradient reversal) or a Tensor rebound every
    step is current at every step, with one compile for a steady loop.
    ``tf.shape`` and random ops work inside ``f``; the random numbers are
    drawn once, at the call.

    Differences from TF: a ``grad_fn`` that returns ``None`` for an input
    gives zeros for it rather than TF's ``None`` (the tape decides what is
    connected before ``grad_fn`` runs); when another tape records the
    gradient (nested tapes), ``f`` runs again at gradient time on traced
    values (Python side effects in ``f`` happen again then).
    """
    if f is None:
        return custom_gradient
    if not callable(f):
        raise TypeError(f"custom_gradient expects a callable f(*x) -> (y, grad_fn); got {f!r}")
    return _CustomGradientFunction(f)


# --------------------------------------------------------------------------
# the gradient registry
# --------------------------------------------------------------------------

_GRADIENTS = {}   # name -> (fn, where it was registered)
#: Op types tapejax defines itself (imported before this module): they have
#: their gradient already, so RegisterGradient refuses them as TF does.
_BUILTIN_OP_TYPES = frozenset(REGISTRY)


def _identity_grad(op, *grads):
    return grads[0]


#: Gradient names that exist without registration ("Identity": pass the gradient through).
BUILTIN_GRADIENTS = {"Identity": _identity_grad}


class RegisterGradient:
    """``tf.RegisterGradient(op_type)``: a decorator registering ``fn(op, *grads)``.

    ``op`` has ``type``, ``name``, ``inputs``, ``outputs`` (Tensors) and
    ``get_attr(name)``; ``grads`` holds one gradient per output of the op;
    ``fn`` returns one gradient per input (a single Tensor for one input,
    ``None`` for "no gradient").  The name can be an op type made with
    ``tapejax.define_op`` (its gradient) or any name for
    ``gradient_override_map``.  Registering a name twice, or the name of a
    built-in op type or gradient, raises KeyError, as in TF.
    """

    def __init__(self, op_type):
        if not isinstance(op_type, str):
            raise TypeError("op_type must be a string")
        self._op_type = op_type

    def __call__(self, f):
        name = self._op_type
        if not callable(f):
            raise TypeError(f"RegisterGradient({name!r}) decorates a function fn(op, *grads); got {f!r}")
        if name in _GRADIENTS:
            raise KeyError(f"Registering two gradient with name '{name}'! (Previous registration was in "
                           f"{_GRADIENTS[name][1]})")
        if name in BUILTIN_GRADIENTS or name in _BUILTIN_OP_TYPES:
            raise KeyError(f"Registering two gradient with name '{name}'! ('{name}' is a built-in op type "
                           "of tapejax and already has its gradient; register a new name and use "
                           "gradient_override_map({'" + name + "': 'NewName'}) to replace it)")
        prim = REGISTRY.get(name)
        if prim is not None and not prim.differentiable:
            raise KeyError(f"Registering two gradient with name '{name}'! (op type '{name}' was defined "
                           "with differentiable=False, which registers it as not differentiable, as TF's "
                           "NotDifferentiable; define it differentiable to give it a gradient)")
        code = getattr(f, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(f)
        _GRADIENTS[name] = (f, where)
        if name in REGISTRY:
            # An op type defined with define_op may have compiled replays that used JAX's
            # gradient for it: drop them so the registered gradient is used from now on.
            _replay.clear_cache()
        return f


def _registered(name):
    entry = _GRADIENTS.get(name)
    if entry is not None:
        return entry[0]
    return BUILTIN_GRADIENTS.get(name)


def _gradient_override_push(op_type_map):
    if not isinstance(op_type_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in op_type_map.items()):
        raise TypeError("op_type_map must be a dictionary mapping strings to strings")
    mapping = dict(op_type_map)
    _state.overrides().append(mapping)
    return mapping


@contextlib.contextmanager
def gradient_override_map(op_type_map):
    """Ops of type ``K`` created in the block use the gradient registered as ``op_type_map[K]``.

    ``{"Floor": "Identity"}`` makes ``floor`` a straight-through estimator;
    ``{"Identity": "CustomGrad"}`` gives ``identity`` the gradient registered
    with ``RegisterGradient("CustomGrad")``.  The map is keyed by op *type*
    and applies to ops created inside the block, whenever their gradient is
    taken; a name that is not registered raises LookupError when the gradient
    is computed (as TF).  Ops TF does not differentiate (``Floor``, ``Round``,
    ``StopGradient`` ...) become differentiable through the mapped gradient.

    Deliberate difference from TensorFlow: TF honours the map only for graph
    gradients (``tf.gradients`` inside a ``tf.function``); every GradientTape
    ignores it (tensorflow issues 35203, 36870).  tapejax honours it for
    every gradient API, eager ``GradientTape`` included.
    """
    mapping = _gradient_override_push(op_type_map)
    try:
        yield
    finally:
        stack = _state.overrides()  # this thread's: the map applies to ops this thread creates
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is mapping:
                del stack[i]
                break


class _Op:
    """The ``op`` a registered gradient function receives."""

    __slots__ = ("type", "name", "inputs", "outputs", "_attrs")

    def __init__(self, prim, inputs, outputs, attrs):
        self.type = prim.name
        self.name = prim.name
        self.inputs = inputs
        self.outputs = outputs
        self._attrs = attrs

    def get_attr(self, name):
        if name in self._attrs:
            return self._attrs[name]
        if name == "T" and self.inputs:
            return self.inputs[0].dtype
        raise ValueError(f"Operation '{self.name}' has no attr named '{name}'. (attrs of this op: "
                         f"{sorted(self._attrs) + (['T'] if self.inputs else [])})")

    def __repr__(self):
        return f"<tapejax op type={self.type!r} inputs={len(self.inputs)} outputs={len(self.outputs)}>"


def _no_gradient_error(node_name, type_name, cause):
    return LookupError(
        f"No gradient defined for operation '{node_name}' (op type: {type_name}). {cause} "
        "Register one with @tapejax.RegisterGradient(op type) (or map the op to one with "
        "gradient_override_map), or insert tapejax.stop_gradient to treat it as a constant.")


def _override_impl(prim, grad_name, fn, tracked):
    """``prim``'s function with its gradient replaced by the registered ``fn``."""
    impl = prim.impl
    multi = prim.multiple_results
    n_in = len(tracked)

    def overridden(*vals, **static):
        vals = tuple(v if isinstance(v, (jax.Array, _Tracer)) else jnp.asarray(v) for v in vals)

        def primal(*xs):
            return impl(*xs, **static)

        def fwd(*xs):
            out = impl(*xs, **static)
            return out, (xs, out)

        def bwd(res, g):
            xs, out = res
            outs = out if multi else (out,)
            gs = g if multi else (g,)
            op = _Op(prim, [Tensor(x) for x in xs], [Tensor(o) for o in outs], static)
            with _tape_stack([]):
                grads = fn(op, *[Tensor(x) for x in gs])
            flat = list(grads) if isinstance(grads, (list, tuple)) else [grads]
            if len(flat) != n_in:
                raise ValueError(f"Num gradients {len(flat)} generated for op {prim.name} (gradient "
                                 f"'{grad_name}') do not match num inputs {n_in}: expected one gradient "
                                 f"per input, got {_describe(flat)}")
            return tuple(_check_grad(gi, x, f"gradient for input {i} of op {prim.name} returned by "
                                            f"gradient '{grad_name}'") if t else None
                         for i, (gi, x, t) in enumerate(zip(flat, xs, tracked)))

        cv = jax.custom_vjp(primal)
        cv.defvjp(fwd, bwd)
        return cv(*vals)

    return overridden


_CHECKED = LRU("custom_checked", 1024)   # user-defined op type -> its checked replay impl


def _checked_impl(prim):
    """``prim.impl``, turning "JAX cannot differentiate this forward" into TF's LookupError."""
    fn = _CHECKED.get(prim)
    if fn is not None:
        return fn
    impl = prim.impl

    def checked(*vals, **static):
        try:
            return impl(*vals, **static)
        except Exception as e:  # noqa: BLE001 - re-raised unless it is a differentiation failure
            try:
                impl(*[lax.stop_gradient(v) for v in vals], **static)
            except Exception:  # noqa: BLE001
                raise e from None
            raise _no_gradient_error(prim.name, prim.name,
                                     f"It has no registered gradient and JAX cannot differentiate its "
                                     f"forward function ({type(e).__name__}: {e}).") from e

    return _CHECKED.setdefault(prim, checked)


def _registry_impl(node):
    """The gradient registry's replay rule (``_replay.register_impl_rule``): the pure function
    the replay runs for ``node``, or None (the op runs as is: JAX differentiates it).

    A gradient override (``node.grad_type``) or a gradient registered under
    the op's own type wraps the op in a ``jax.custom_vjp``; for an op type a
    user defined, a forward JAX cannot differentiate is TF's LookupError "No
    gradient defined".
    """
    prim = node.prim
    name = node.grad_type
    if name is None:
        if prim.name in _GRADIENTS:
            name = prim.name
        elif REGISTRY.get(prim.name) is prim and prim.name not in _BUILTIN_OP_TYPES:
            return _checked_impl(prim)  # a user's op type: "JAX cannot differentiate it" -> LookupError
        else:
            return None
    fn = _registered(name)
    if fn is None:
        raise _no_gradient_error(prim.name, prim.name,
                                 f"Its gradient was mapped to '{name}' by gradient_override_map, and no "
                                 f"gradient is registered under that name (registered: "
                                 f"{sorted(set(_GRADIENTS) | set(BUILTIN_GRADIENTS))}).")
    tracked = tuple(c is not None for c in node.refs)
    return _override_impl(prim, name, fn, tracked)


_replay.register_impl_rule("gradient_registry", _registry_impl)


# --------------------------------------------------------------------------
# graph mode and tf.gradients
# --------------------------------------------------------------------------

class _GraphTape(GradientTape):
    """The tape of graph mode: records every float op (as a TF graph holds every op).

    A float tensor used by an op without being on the tape (a constant made
    in the function, an argument, a captured tensor, the output of a cut) is
    made a leaf on the spot, and every float Variable read is watched, so
    ``gradients`` can differentiate anything with respect to anything.
    Integer tensors and Python numbers stay constants (TF's rule for
    ``tf.gradients``).
    """

    def __init__(self):
        super().__init__(persistent=True, watch_accessed_variables=True)

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        codes = self._codes
        for i, v in zip(ids, vals):
            if i and i not in codes and hasattr(v, "dtype") and _dtypes.is_trainable_dtype(v.dtype):
                self._new_leaf(i)
        GradientTape._record_op(self, prim, static, grad_type, ids, vals, result)

    def _record_read(self, var, t):
        vid = var._id
        if vid not in self._codes and _dtypes.is_trainable_dtype(var._value.dtype):
            self._watched_vars.setdefault(vid, var)
            self._new_leaf(vid)
        GradientTape._record_read(self, var, t)


def _graph_tapes():
    local = _state._local
    try:
        return local.graph_tapes
    except AttributeError:
        local.graph_tapes = []
        return local.graph_tapes


@contextlib.contextmanager
def graph_mode():
    """Graph mode for the block: every op is recorded, so ``tapejax.gradients`` works.

    ``tapejax.function`` enters it around the traced Python function (TF's
    graph); the tape lives for the block only.
    """
    tape = _GraphTape()
    graphs = _graph_tapes()
    graphs.append(tape)
    tape.__enter__()
    try:
        yield tape
    finally:
        tape.__exit__(None, None, None)
        for i in range(len(graphs) - 1, -1, -1):
            if graphs[i] is tape:
                del graphs[i]
                break
        tape._release()


class _View:
    """A tape's recording as seen with some tensors stopped (``stop_gradients``)."""

    __slots__ = ("_nodes", "_codes")

    def __init__(self, nodes, codes):
        self._nodes = nodes
        self._codes = codes


def _stopped_view(tape, stops):
    """The tape with each stopped node output replaced, for its consumers, by a new leaf:
    nothing flows back through it (it can still be a source: its gradient is what flows in)."""
    codes = tape._codes
    repl = {}
    n_leaves = tape._n_leaves
    new_codes = None
    for s in stops:
        c = codes.get(s._id)
        if c is None or c < 0 or c in repl:
            continue  # untracked or a leaf: nothing flows through it anyway
        n_leaves += 1
        repl[c] = -n_leaves
        if new_codes is None:
            new_codes = dict(codes)
        new_codes[s._id] = repl[c]
    if not repl:
        return tape
    from ._tape import Node, _intern
    nodes = list(tape._nodes)
    for idx, node in enumerate(nodes):
        if any(r in repl for r in node.refs if r is not None):
            refs = tuple(repl.get(r, r) if r is not None else None for r in node.refs)
            nodes[idx] = Node(node.prim, node.static, node.grad_type, node.vals, node.ids, refs,
                              node.n_out, _intern(("stopped", node.sig, refs)))
    return _View(nodes, new_codes)


def _as_tensor_list(x, what):
    flat = _nest.flatten(x)
    for t in flat:
        if not isinstance(t, Tensor) and not hasattr(t, "_read"):
            raise TypeError(f"Argument `{what}` of tf.gradients must hold Tensors or Variables; got "
                            f"{t!r} of type {type(t).__name__}")
    return flat


def gradients(ys, xs, grad_ys=None, name="gradients", gate_gradients=False, aggregation_method=None,
              stop_gradients=None, unconnected_gradients=UnconnectedGradients.NONE):
    """``tf.gradients``: for each ``x`` in ``xs``, ``sum over ys of dy/dx`` (graph mode only).

    Works inside ``tapejax.function`` (graph mode records every op); eagerly
    it raises RuntimeError as TF does: use ``tapejax.GradientTape``.
    ``grad_ys`` (one per ``y``, ``None`` meaning ones) weight the ys;
    ``stop_gradients`` are held constant (partial derivatives; a source whose
    every path is stopped gets ``None``); integer tensors are constants;
    unconnected ``xs`` give ``None`` or zeros (``unconnected_gradients``).
    Returns a list with one entry per ``x``.  The result is itself recorded,
    so calling ``gradients`` on it gives higher derivatives.  ``name``,
    ``gate_gradients`` and ``aggregation_method`` are accepted and ignored.
    """
    graphs = _graph_tapes()
    if not graphs:
        raise RuntimeError("tf.gradients is not supported when eager execution is enabled. Use "
                           "tf.GradientTape instead. (tapejax.gradients works inside tapejax.function, "
                           "which runs in graph mode.)")
    tape = graphs[-1]
    mode = _unconnected(unconnected_gradients)
    flat_ys = _as_tensor_list(ys, "ys")
    flat_xs = _as_tensor_list(xs, "xs")
    stops = _as_tensor_list(stop_gradients, "stop_gradients") if stop_gradients is not None else []
    cts = [None] * len(flat_ys)
    if grad_ys is not None:
        flat_g = _nest.flatten(grad_ys)
        if len(flat_g) != len(flat_ys):
            raise ValueError(f"Passed {len(flat_g)} grad_ys for {len(flat_ys)} ys")
        for i, (g, y) in enumerate(zip(flat_g, flat_ys)):
            if g is None:
                continue
            g = convert_to_tensor(g, dtype_hint=y.dtype)
            if tuple(g.shape) != tuple(y.shape):
                raise ValueError(f"grad_ys[{i}] has shape {tuple(g.shape)} but ys[{i}] has shape "
                                 f"{tuple(y.shape)}: they must be equal")
            cts[i] = g
    ys_t = [y if isinstance(y, Tensor) else y._read() for y in flat_ys]
    view = _stopped_view(tape, stops)
    return list(_replay.gradient(view, ys_t, flat_xs, cts, mode))


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False, gate_gradients=False,
             aggregation_method=None):
    """``tf.hessians``: for each ``x`` in ``xs`` the Hessian of ``sum(ys)``, shape ``x.shape + x.shape``.

    Graph mode only (inside ``tapejax.function``), like ``gradients``; eagerly
    it raises TF's RuntimeError (use nested GradientTapes or
    ``tape.jacobian`` of a gradient).  Each Hessian is one compiled jacobian
    of the recorded gradient, not a loop of gradient calls.  As in TF, an
    ``x`` whose gradient or Hessian is unconnected raises ValueError.
    """
    from ._jacobian import _jacobian
    graphs = _graph_tapes()
    if not graphs:
        raise RuntimeError("tf.gradients is not supported when eager execution is enabled. Use "
                           "tf.GradientTape instead. (tapejax.hessians works inside tapejax.function, "
                           "which runs in graph mode.)")
    tape = graphs[-1]
    flat_xs = _as_tensor_list(xs, "xs")
    out = []
    for i, (x, g) in enumerate(zip(flat_xs, gradients(ys, flat_xs))):
        h = None if g is None else _jacobian(tape, g, [x], None)[0]
        if h is None:
            raise ValueError(f"None values not supported: the {'gradient' if g is None else 'Hessian'} "
                             f"of ys with respect to xs[{i}] is unconnected (TF raises here too).")
        out.append(h)
    return out


def gradients_v1(ys, xs, grad_ys=None, name="gradients", colocate_gradients_with_ops=False,
                 gate_gradients=False, aggregation_method=None, stop_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
    """``tf.compat.v1.gradients`` (its extra ``colocate_gradients_with_ops`` is ignored)."""
    return gradients(ys, xs, grad_ys, name, gate_gradients, aggregation_method, stop_gradients,
                     unconnected_gradients)
