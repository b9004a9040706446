"""``custom_gradient``: a function whose gradient the user defines, with TF's timing.

``f(*x) -> (y, grad_fn)``.  The rule is TF's timing: ``f`` runs when the
decorated function is called, ``grad_fn`` when ``tape.gradient`` runs, each
with the Python state of that moment; a compiled replay never freezes it.

*Call.*  ``f`` runs once, eagerly (no tape records inside it, but accumulators do, as TF's
push ``f``'s ops forward: ``autodiff.forward``; ops on concrete values are computed on the
spot even inside a trace, so ``tf.shape`` and random draws work), and ONE op is recorded on each tape
tracking an input: inputs are the flattened arguments, the Variables ``f``
reads and tensor keyword arguments, then ``f``'s outputs *as computed now*
(constants to the tape).  The op's value in every replay is those outputs,
so ``y`` is the call's even when the replay computes it (deferred
execution), and random numbers are drawn once.  The node's static
parameters hold a handle (``_CallContext``, equal to every other, so it
never splits a cache) on the call's ``grad_fn`` and the random state ``f``
started from; the recording tapes keep that record alive.

*Gradient.*  ``autodiff.replay.resolve_late`` calls ``_late_node`` for each such
node the gradient reaches (walking the slice back from the targets): the
backward is traced now (``jax.make_jaxpr`` on the inputs' avals).  An input
it returns ``None`` for loses its edge (the node's code for it becomes None),
and the gradient driver slices again: TF's ``None`` for a source reached only
through such inputs, and no ``grad_fn`` call for a custom gradient reached
only through them.  First order: the call's ``grad_fn``, as TF calls it.
Recorded by another tape (nested tapes, a persistent tape inside its
``with``): ``f`` is rematerialised on the op's inputs with the call's
random state, then its ``grad_fn``, so the gradient is a function of the
inputs that the outer tape differentiates (second order through
``grad_fn``, as TF).  Everything the trace closes over (a Tensor rebound
each step, a Variable's value, a random draw) is a constant of the jaxpr,
and its top-level literals (a Python float from a schedule) are lifted
too: both become constant inputs of the node, i.e. runtime arguments of
the compiled replay.  The jaxpr's structure (``_late.fingerprint``) joins the
node's signature: a steady loop compiles once even while the values it
reads change, and a ``grad_fn`` that computes something new (a Python
branch) gets a new compile, never a stale one.  The backward runs as a
``jax.custom_vjp`` whose value is the recorded outputs and whose
backward evaluates that jaxpr; the op's gradient goes to its inputs and
Variables only (TF's rule).  Its forward rule gives the op again, so when
the recorded gradient is differentiated (an outer tape), the outputs still
depend on the inputs through that backward, as TF's outer tape reaches the
op's inputs through ``grad_fn`` (the upstream ``dy`` depends on the outputs).  The call's ``grad_fn`` reads Variables as
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

The traced backward's key and arguments are ``autodiff.late``'s; running user code
with no tape recording and checking what it returns, ``autodiff.user_grad``'s.
"""
import contextlib
import functools
import inspect
import weakref
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from ..core import nest as _nest, state as _state
from ..core.bind import Primitive
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import traced_values
from ..ops import random as _random
from ..runtime.thunks import Thunk
from . import forward as _forward
from .late import LateBackward, trace
from .nodes import Node, _intern
from .user_grad import check_grad, conj_complex, describe, is_float

# --------------------------------------------------------------------------
# running f: the Variables it reads, the values it reads them as
# --------------------------------------------------------------------------

class _VariableWatcher:
    """Sits on the tape stack while ``f`` runs: collects the Variables it reads."""

    __slots__ = ("variables",)
    _defers = False   # (a recorder: see ``core.state.Recorder``)

    def __init__(self):
        self.variables: dict[int, Any] = {}

    def _record_read(self, var, t):
        self.variables.setdefault(var._id, var)

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        pass

    def __getattr__(self, name):  # any other recording hook a tape stack entry may get: ignore it
        if name.startswith("_record"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def _substituted(variables: list, values: Sequence[Any]) -> traced_values:
    """Variables read inside the block give ``values`` (the replay's traced reads; the one
    place besides ``tapejax.function`` where a Variable may hold a tracer, see ``core.variable``)."""
    return traced_values(variables, values)


# --------------------------------------------------------------------------
# structures of arguments: hashable skeletons (part of the cache key)
# --------------------------------------------------------------------------

#: A leaf (a tensor, or any value where constants are not kept) in a skeleton.
_LEAF = "*"


class _Const(NamedTuple):
    """A leaf kept by value (a keyword argument's Python value: part of the cache key)."""
    value: Any


class _Struct(NamedTuple):
    """A container: ``kind`` is ``"dict"``, ``"namedtuple"`` or the sequence type's name; a
    dict's ``keys`` in insertion order (else ()) and its children in sorted key order."""
    kind: str
    cls: type
    keys: tuple
    children: tuple


#: A hashable description of a nested structure (``_skeleton``).
_Skeleton = Any   # _Struct | _Const | _LEAF


def _is_tensorish(x: Any) -> bool:
    return isinstance(x, (Tensor, jax.Array, np.ndarray, Tracer)) or hasattr(x, "_read")


def _skeleton(x: Any, consts: bool = False) -> _Skeleton:
    """A hashable description of a nested structure; leaves become ``_LEAF``.

    With ``consts``, leaves that are not tensors are kept as ``_Const(value)``
    (they must be hashable: they are part of the compiled replay's key)."""
    if isinstance(x, dict):
        keys = tuple(sorted(x))
        return _Struct("dict", type(x), tuple(x), tuple(_skeleton(x[k], consts) for k in keys))
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        return _Struct("namedtuple", type(x), (), tuple(_skeleton(v, consts) for v in x))
    if isinstance(x, (list, tuple)):
        return _Struct(type(x).__name__, type(x), (), tuple(_skeleton(v, consts) for v in x))
    if consts and not _is_tensorish(x):
        try:
            hash(x)
        except TypeError:
            raise TypeError(f"a keyword argument of a @custom_gradient function holds {x!r}: it must be "
                            "a Tensor, a Variable or a hashable Python value") from None
        return _Const(x)
    return _LEAF


def _build(skel: _Skeleton, it: Iterator[Any]) -> Any:
    """Inverse of ``_skeleton``: leaves taken in order from the iterator ``it``."""
    if isinstance(skel, _Const):
        return skel.value
    if not isinstance(skel, _Struct):
        return next(it)
    cls = skel.cls
    if skel.kind == "dict":
        order = skel.keys
        built = {k: _build(c, it) for k, c in zip(sorted(order), skel.children)}
        return cls((k, built[k]) for k in order) if cls is not dict else {k: built[k] for k in order}
    if skel.kind == "namedtuple":
        return cls(*[_build(c, it) for c in skel.children])
    return cls(_build(c, it) for c in skel.children)


# --------------------------------------------------------------------------
# custom_gradient
# --------------------------------------------------------------------------

def _accepts_variables(grad_fn: Callable[..., Any]) -> bool:
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


def _split_result(fname: str, res: Any) -> tuple[Any, Callable[..., Any]]:
    if not isinstance(res, (tuple, list)) or len(res) != 2 or not callable(res[1]):
        raise TypeError(f"A @custom_gradient function must return a pair (output, grad_fn) with a "
                        f"callable grad_fn; {fname} returned {type(res).__name__}"
                        + (f" of length {len(res)}" if isinstance(res, (tuple, list)) else ""))
    return res[0], res[1]


class _Bound:
    """The instance a decorated method is bound to: compared by identity."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Bound) and other.obj is self.obj


class _Spec(NamedTuple):
    """Static description of one call of a custom-gradient function (cache key part)."""
    in_skel: _Skeleton        # the positional arguments' structure
    n_in: int                 # how many flat arguments (the inputs grad_fn returns gradients for)
    var_refs: tuple           # refs of the Variables f reads (trainable first)
    n_train: int              # how many of them grad_fn gets in `variables`
    kw_skel: _Skeleton        # the keyword arguments' values (Python values kept), by name
    kw_names: tuple[str, ...]
    out_skel: _Skeleton       # the structure of f's output
    bound: "_Bound | None"    # _Bound(instance) for a decorated method
    n_vals: int               # the op's true inputs: flat args, Variable reads, tensor kwargs
    n_out: int                # then its outputs as the call computed them (constants)

    def __repr__(self) -> str:
        return f"_Spec(inputs={self.n_in}, variables={len(self.var_refs)})"


class _RngState(NamedTuple):
    """The global random generator as ``f`` found it when called."""
    key: object    # its key (an array; a tracer inside a compiled step's state_scope)
    counts: dict   # its per-op-seed counters


def _rng_snapshot() -> _RngState:
    g = _random._GLOBAL
    return _RngState(g.key, dict(g._op_counts) if g._op_counts else {})


@contextlib.contextmanager
def _rng_replayed(state: "_RngState | None") -> Iterator[None]:
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

    def __init__(self, grad_fn: Callable[..., Any], rng: _RngState):
        self.grad_fn = grad_fn
        self.rng = rng


#: tape -> the records of the calls it recorded: a tape keeps them alive (TF's tape keeps its
#: grad_fns), and nothing else does.
_KEPT: "weakref.WeakKeyDictionary[Any, list[_CallRecord]]" = weakref.WeakKeyDictionary()


class _CallContext:
    """The node's handle on its call's ``_CallRecord``, held weakly: the handle sits in the
    node's static parameters, which the signature table keeps for the first call of a
    structure.  It equals every other handle, so it never splits a cache; only
    ``_late_node`` reads it, from the node at hand."""

    __slots__ = ("record",)

    def __init__(self, record: _CallRecord):
        self.record = weakref.ref(record)   # record() is None once no recording tape is alive

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CallContext)

    def __hash__(self) -> int:
        return 0x5EED

    def __repr__(self) -> str:
        return "<custom_gradient call>"


class _CustomPrim(Primitive):
    """The op of one custom-gradient function; ``late(node, nested)`` is ``autodiff.replay``'s hook that
    traces the node's backward when a gradient is taken."""

    __slots__ = ("late",)


def _abstract(x: Any) -> jax.ShapeDtypeStruct:
    a = x.aval if type(x) is Thunk else jax.typeof(x)
    return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False))


class _CustomGradientFunction:
    """The function returned by ``custom_gradient(f)``."""

    def __init__(self, f: Callable[..., Any]):
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

    def _call_f(self, bound: "_Bound | None", args: tuple, kwargs: dict) -> tuple[Any, Callable[..., Any]]:
        if bound is None:
            return _split_result(self._name, self._f(*args, **kwargs))
        return _split_result(self._name, self._f(bound.obj, *args, **kwargs))

    # -- the eager (or traced) call ------------------------------------------
    def __call__(self, *args, **kwargs):
        return self._call(None, *args, **kwargs)

    def _call(self, bound: "_Bound | None", *args, **kwargs):
        flat_args = _nest.flatten(args)
        # Conversion reads Variables passed as arguments (recorded on tapes).
        inputs = [convert_to_tensor(a) for a in flat_args]
        rng = _rng_snapshot()
        watcher = _VariableWatcher()
        recs = _forward.recorders(_state.tapes())   # accumulators see f's ops (autodiff.forward)
        # Inside a trace, ops on concrete values alone (tf.shape ...) are computed on the spot.
        with _state.swap(tapes=(*recs, watcher)), jax.ensure_compile_time_eval():
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
        if any(isinstance(v, Tracer) for v in vals + outs):
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
            _forward.follow_primal(recs, flat_out, result)
        return _build(spec.out_skel, iter(result))

    # -- the pure function the replay runs --------------------------------------
    def _impl(self, *vals, spec: _Spec, ctx: _CallContext, late: "LateBackward | None" = None) -> tuple:
        """The op's function: a ``jax.custom_vjp`` whose value is the outputs the call computed
        (``vals`` = the op's inputs, then those outputs, then ``late``'s arguments) and whose
        backward gives the inputs' gradients.

        ``late`` (a ``LateBackward``): the backward traced when the gradient was asked for (see
        ``_late_node``), run on its runtime arguments.  Without it (a call under ``jax.jit`` /
        ``jax.grad``), the backward is traced with the enclosing trace: ``f`` rematerialised on
        the inputs, then ``grad_fn``, closure-converted (``jax.closure_convert``) so values an
        enclosing differentiation perturbs are explicit arguments given no gradient through this
        op, which is TF's rule (the op's gradient goes to its inputs and Variables only).
        """
        n, m = spec.n_vals, spec.n_out
        v, outs, extra = tuple(vals[:n]), tuple(vals[n:n + m]), tuple(vals[n + m:])
        float_out = tuple(is_float(o.dtype) for o in outs)
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
            # The value is the op again, not the bare constants: an enclosing differentiation
            # (an outer tape differentiating a recorded gradient) sees the outputs depend on the
            # inputs through this op's backward, as TF's outer tape does through grad_fn.
            return cv(v, outs, extra), (v, extra)

        def bwd(res, cts):
            v, extra = res
            cts = tuple(c for c, f in zip(cts, float_out) if f)
            return tuple(run(v, cts, extra)), no_outs, no_extra

        cv = jax.custom_vjp(fun)
        cv.defvjp(fwd, bwd)
        return cv(v, outs, extra)

    def _late_node(self, node: Node, nested: bool) -> Node:
        """``node`` with its backward traced now (``autodiff.replay.resolve_late``, at gradient time).

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
        float_out = tuple(is_float(a.dtype) for a in out_avals)
        ct_abs = tuple(a for a, f in zip(out_avals, float_out) if f)

        rec = ctx.record()   # None once no tape that recorded the call is alive

        def backward(v, cts):
            return self._backward(spec, rec, v, cts, out_avals, float_out, remat=nested)

        late, extra = trace(backward, (v_abs, ct_abs), nested)
        k = len(extra)
        # An input grad_fn returns None for is cut here, as TF's tape sees it: no gradient flows
        # to it through this op (None at the tape unless another path connects it).  Which are
        # None is the traced structure (``late.key.out_tree``), part of the new signature.
        nones = jax.tree_util.tree_unflatten(late.out_tree, [False] * late.out_tree.num_leaves)
        refs = tuple(None if g is None else r for r, g in zip(node.refs, nones)) + node.refs[len(nones):]
        return Node(node.prim, node.static + (("late", late),), node.grad_type, node.vals + extra,
                    node.ids + (0,) * k, refs + (None,) * k, node.n_out,
                    _intern(("late", node.sig, late.key)))

    def _run(self, spec: _Spec, vals: Sequence[Any]) -> tuple[list, Callable[..., Any], list]:
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

    def _backward(self, spec: _Spec, rec: "_CallRecord | None", vals: Sequence[Any], cts: Sequence[Any],
                  out_avals: Sequence[Any], float_out: Sequence[bool], remat: bool) -> tuple:
        """The gradients of the op's inputs ``vals``: ``grad_fn(cts)``, with ``grad_fn`` the call's
        (``remat`` False) or that of ``f`` run again on ``vals`` with the call's random state.

        Runs under a trace; ops on concrete values alone (``tf.shape``, a closed-over Tensor's
        arithmetic, random draws) are computed on the spot (``jax.ensure_compile_time_eval``),
        as TF runs them eagerly, so Python can use their values."""
        n_in, n_var = spec.n_in, len(spec.var_refs)
        name = self._name
        with _state.swap(tapes=()), jax.ensure_compile_time_eval():
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
            dys = [Tensor(conj_complex(next(it))) if f else Tensor(jnp.zeros(a.shape, a.dtype))
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
                                 f"gradient per flattened input, got {describe(flat_grads)})")
            out = []
            for i, (g, x) in enumerate(zip(flat_grads, vals[:n_in])):
                out.append(check_grad(g, x, f"gradient {i} returned by the grad_fn of {name} (input {i})"))
            for v, g, x in zip(train, var_grads, vals[n_in:n_in + spec.n_train]):
                out.append(check_grad(g, x, f"variable gradient for {v.name} returned by the grad_fn of "
                                            f"{name}"))
        out.extend([None] * (len(vals) - len(out)))  # non-trainable reads, tensor kwargs
        return tuple(out)


def _kwargs_of(spec: _Spec, kw_vals: Sequence[Any]) -> dict:
    values = _build(spec.kw_skel, iter([Tensor(v) for v in kw_vals]))
    return dict(zip(spec.kw_names, values))


def custom_gradient(f: "Callable[..., Any] | None" = None):
    """``tf.custom_gradient``: decorate ``f(*x) -> (y, grad_fn)`` to define its gradient.

    ``grad_fn(*dy)`` gets one upstream gradient per output of ``y`` (in ``y``'s
    top-level structure) and returns one gradient per flattened input of
    ``f``; ``None`` means no gradient flows to that input through this op, so,
    as in TF, ``tape.gradient`` gives ``None`` for a source reached only that
    way (zeros with ``unconnected_gradients='zero'``; another path's gradient
    where one exists), and the ``grad_fn`` of a custom gradient further up
    that path is not called.  If ``f`` reads trainable Variables, they are
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

    Difference from TF: when another tape records the gradient (nested
    tapes), ``f`` runs again at gradient time on traced values (Python side
    effects in ``f`` happen again then).
    """
    if f is None:
        return custom_gradient
    if not callable(f):
        raise TypeError(f"custom_gradient expects a callable f(*x) -> (y, grad_fn); got {f!r}")
    return _CustomGradientFunction(f)
