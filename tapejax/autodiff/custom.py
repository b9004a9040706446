"""Gradient control: ``stop_gradient``, the gradient registry (``RegisterGradient``,
``gradient_override_map``) and graph-mode ``gradients``.

stop_gradient
    The op ``StopGradient`` is not differentiable to the tape (its output is a
    cut, so a source reachable only through it is unconnected: ``None``) and
    its function is ``lax.stop_gradient``, so it also holds inside compiled
    code, ``jax.grad`` and nested derivatives.

custom_gradient
    In ``autodiff.custom_gradient`` (the traced backward's key and arguments in
    ``autodiff.late``); ``tapejax.custom_gradient`` is imported from there.

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
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.core import Tracer

from ..core import dtypes as _dtypes, nest as _nest, state as _state
from ..core.bind import REGISTRY, Primitive, bind, define
from ..core.caches import LRU
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from . import gradient as _gradient, replay as _replay
from .jacobian import _jacobian
from .nodes import NO_GRADIENT, Node, UnconnectedGradients, _intern, _unconnected
from .tape import GradientTape
from .user_grad import check_grad, conj_complex, describe

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
    ``jax.grad`` and in higher derivatives.  A Variable is read with the tapes paused, as TF runs
    its StopGradient under ``stop_recording``: no tape watches it for that read
    (``tape.watched_variables()`` leaves it out).
    """
    if input is None:
        raise ValueError("Argument `input` of stop_gradient must be a Tensor, Variable or array-like; "
                         "got None")
    if not isinstance(input, Tensor):
        with _state.swap(tapes=[]) if hasattr(input, "_read") else contextlib.nullcontext():
            input = convert_to_tensor(input)
    return bind(_STOP, input)


# --------------------------------------------------------------------------
# the gradient registry
# --------------------------------------------------------------------------

#: A gradient function: ``fn(op, *grads) -> input gradients``.
GradientFn = Callable[..., Any]


class _Registration(NamedTuple):
    """A registered gradient function and where it was registered (for the error message of a
    second registration)."""
    fn: "GradientFn | None"   # None: registered by ``no_gradient``
    where: str


_GRADIENTS: dict[str, _Registration] = {}   # name -> its registration
#: Op types tapejax defines itself (imported before this module): they have
#: their gradient already, so RegisterGradient refuses them as TF does.
_BUILTIN_OP_TYPES = frozenset(REGISTRY)


def _identity_grad(op: "_Op", *grads: Any) -> Any:
    return grads[0]


#: Gradient names that exist without registration ("Identity": pass the gradient through).
BUILTIN_GRADIENTS: dict[str, GradientFn] = {"Identity": _identity_grad}


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

    def __init__(self, op_type: str):
        if not isinstance(op_type, str):
            raise TypeError("op_type must be a string")
        self._op_type = op_type

    def __call__(self, f: GradientFn) -> GradientFn:
        name = self._op_type
        if not callable(f):
            raise TypeError(f"RegisterGradient({name!r}) decorates a function fn(op, *grads); got {f!r}")
        if name in _GRADIENTS:
            raise KeyError(f"Registering two gradient with name '{name}'! (Previous registration was in "
                           f"{_GRADIENTS[name].where})")
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
        _GRADIENTS[name] = _Registration(f, where)
        if name in REGISTRY:
            # An op type defined with define_op may have compiled replays that used JAX's
            # gradient for it: drop them so the registered gradient is used from now on.
            _replay.clear_cache()
        return f


def no_gradient(op_type: str) -> None:
    """``tf.no_gradient(op_type)`` (TF's ``NotDifferentiable``): ops of type ``op_type`` have no
    gradient, so the tape gives their inputs ``None`` through them (as a ``stop_gradient``).

    ``op_type`` is registered in the gradient registry with no function: registering it again
    (here or with ``RegisterGradient``), or naming a built-in op type (which has its gradient),
    raises TF's KeyError; a non-string is TF's TypeError.  An op type defined with
    ``tapejax.define_op`` becomes not differentiable at once (ops recorded from then on); a name
    not defined yet is kept for ``gradient_override_map`` (an op mapped to it is a cut for the
    tape, as TF's graph gradient skips it: None for a source reached only through it) and for an
    op type defined later under it (zeros along its path there: its Primitive was made
    differentiable, and the gradient registry stops the gradient through it).
    """
    if not isinstance(op_type, str):
        raise TypeError("op_type must be a string")
    if op_type in _GRADIENTS:
        raise KeyError(f"Registering two gradient with name '{op_type}'! (Previous registration was in "
                       f"{_GRADIENTS[op_type].where})")
    if op_type in BUILTIN_GRADIENTS or op_type in _BUILTIN_OP_TYPES:
        raise KeyError(f"Registering two gradient with name '{op_type}'! ('{op_type}' is a built-in op type "
                       "of tapejax and already has its gradient)")
    _GRADIENTS[op_type] = _Registration(None, "tapejax.no_gradient")
    NO_GRADIENT.add(op_type)
    prim = REGISTRY.get(op_type)
    if prim is not None and prim.differentiable:
        prim.differentiable = False
        prim.nondiff_reason = f"op type '{op_type}' was registered with tf.no_gradient"
        _replay.clear_cache()


def _stopped_impl(prim: Primitive) -> Callable[..., Any]:
    """``prim``'s function with no gradient to its inputs (an op type registered by ``no_gradient``)."""
    impl = prim.impl

    def stopped(*vals, **static):
        return impl(*[lax.stop_gradient(v) for v in vals], **static)

    return stopped


def _registered(name: str) -> "GradientFn | None":
    entry = _GRADIENTS.get(name)
    if entry is not None:
        return entry.fn
    return BUILTIN_GRADIENTS.get(name)


def _gradient_override_push(op_type_map: dict) -> dict:
    if not isinstance(op_type_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in op_type_map.items()):
        raise TypeError("op_type_map must be a dictionary mapping strings to strings")
    mapping = dict(op_type_map)
    _state.push_override(mapping)
    return mapping


@contextlib.contextmanager
def gradient_override_map(op_type_map: dict) -> Iterator[None]:
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
        _state.pop_override(mapping)  # this thread's: the map applies to ops this thread creates


class _Op:
    """The ``op`` a registered gradient function receives."""

    __slots__ = ("type", "name", "inputs", "outputs", "_attrs")

    def __init__(self, prim: Primitive, inputs: list[Tensor], outputs: list[Tensor], attrs: dict):
        self.type = prim.name
        self.name = prim.name
        self.inputs = inputs
        self.outputs = outputs
        self._attrs = attrs

    def get_attr(self, name: str) -> Any:
        if name in self._attrs:
            return self._attrs[name]
        if name == "T" and self.inputs:
            return self.inputs[0].dtype
        raise ValueError(f"Operation '{self.name}' has no attr named '{name}'. (attrs of this op: "
                         f"{sorted(self._attrs) + (['T'] if self.inputs else [])})")

    def __repr__(self) -> str:
        return f"<tapejax op type={self.type!r} inputs={len(self.inputs)} outputs={len(self.outputs)}>"


def _no_gradient_error(node_name: str, type_name: str, cause: str) -> LookupError:
    return LookupError(
        f"No gradient defined for operation '{node_name}' (op type: {type_name}). {cause} "
        "Register one with @tapejax.RegisterGradient(op type) (or map the op to one with "
        "gradient_override_map), or insert tapejax.stop_gradient to treat it as a constant.")


def _override_impl(prim: Primitive, grad_name: str, fn: GradientFn,
                   tracked: tuple[bool, ...]) -> Callable[..., Any]:
    """``prim``'s function with its gradient replaced by the registered ``fn``."""
    impl = prim.impl
    multi = prim.multiple_results
    n_in = len(tracked)

    def overridden(*vals, **static):
        vals = tuple(v if isinstance(v, (jax.Array, Tracer)) else jnp.asarray(v) for v in vals)

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
            with _state.swap(tapes=()):
                grads = fn(op, *[Tensor(conj_complex(x)) for x in gs])
            flat = list(grads) if isinstance(grads, (list, tuple)) else [grads]
            if len(flat) != n_in:
                raise ValueError(f"Num gradients {len(flat)} generated for op {prim.name} (gradient "
                                 f"'{grad_name}') do not match num inputs {n_in}: expected one gradient "
                                 f"per input, got {describe(flat)}")
            return tuple(check_grad(gi, x, f"gradient for input {i} of op {prim.name} returned by "
                                           f"gradient '{grad_name}'") if t else None
                         for i, (gi, x, t) in enumerate(zip(flat, xs, tracked)))

        cv = jax.custom_vjp(primal)
        cv.defvjp(fwd, bwd)
        return cv(*vals)

    return overridden


_CHECKED = LRU("custom_checked", 1024)   # user-defined op type -> its checked replay impl


def _checked_impl(prim: Primitive) -> Callable[..., Any]:
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


def _registry_impl(node: Node) -> "Callable[..., Any] | None":
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
    entry = _GRADIENTS.get(name)
    if entry is not None and entry.fn is None:   # registered by no_gradient
        return _stopped_impl(prim)
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
        if vid not in self._codes and _dtypes.is_trainable_dtype(var._meta.dtype):
            self._watched_vars.setdefault(vid, var)
            self._new_leaf(vid)
        GradientTape._record_read(self, var, t)


def _graph_tapes() -> list["_GraphTape"]:
    local = _state._local
    try:
        return local.graph_tapes
    except AttributeError:
        local.graph_tapes = []
        return local.graph_tapes


@contextlib.contextmanager
def graph_mode() -> Iterator[GradientTape]:
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

    def __init__(self, nodes: list[Node], codes: dict[int, int]):
        self._nodes = nodes
        self._codes = codes


def _stopped_view(tape: GradientTape, stops: Sequence[Any]) -> "GradientTape | _View":
    """The tape with each stopped node output replaced, for its consumers, by a new leaf:
    nothing flows back through it (it can still be a source: its gradient is what flows in)."""
    codes = tape._codes
    repl: dict[int, int] = {}
    n_leaves = tape._n_leaves
    new_codes: "dict[int, int] | None" = None
    for s in stops:
        c = codes.get(s._id)
        if c is None or c < 0 or c in repl:
            continue  # untracked or a leaf: nothing flows through it anyway
        n_leaves += 1
        repl[c] = -n_leaves
        if new_codes is None:
            new_codes = dict(codes)
        new_codes[s._id] = repl[c]
    if new_codes is None:   # nothing stopped
        return tape
    nodes = list(tape._nodes)
    for idx, node in enumerate(nodes):
        if any(r in repl for r in node.refs if r is not None):
            refs = tuple(repl.get(r, r) if r is not None else None for r in node.refs)
            nodes[idx] = Node(node.prim, node.static, node.grad_type, node.vals, node.ids, refs,
                              node.n_out, _intern(("stopped", node.sig, refs)))
    return _View(nodes, new_codes)


def _as_tensor_list(x: Any, what: str) -> list:
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
    cts: list["Tensor | None"] = [None] * len(flat_ys)
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
    with _gradient.bounded_whiles_only():
        return list(_gradient.gradient(view, ys_t, flat_xs, cts, mode))


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False, gate_gradients=False,
             aggregation_method=None):
    """``tf.hessians``: for each ``x`` in ``xs`` the Hessian of ``sum(ys)``, shape ``x.shape + x.shape``.

    Graph mode only (inside ``tapejax.function``), like ``gradients``; eagerly
    it raises TF's RuntimeError (use nested GradientTapes or
    ``tape.jacobian`` of a gradient).  Each Hessian is one compiled jacobian
    of the recorded gradient, not a loop of gradient calls.  As in TF, an
    ``x`` whose gradient or Hessian is unconnected raises ValueError.
    """
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
