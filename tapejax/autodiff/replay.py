"""Compiled gradients: one ``jax.jit`` per program structure, in a bounded cache.

A ``Program`` (``program``: a tape slice's structure, the cache key) maps in the LRU
``_CACHE`` to a compiled entry: one stable ``jax.jit`` object (so JAX's own trace cache is
hit on the next call) and the plan that gathers its arguments.  ``gradient`` (the driver)
looks entries up (``lookup_run``) and the active executor runs them.

Three compiled forms exist for one Program:

* first order (no other tape records the call): ``Backward``, built by
  ``autodiff.program.build_backward``: the reverse walk over the slice, each node's
  ``jax.vjp`` taken at the input values the tape saved when the op ran.  The
  forward is not computed a second time (XLA drops what no vjp reads, e.g. a
  matmul's product), as TF and PyTorch reuse their saved activations;
* recorded (a nested tape, or a persistent tape used inside its own ``with``
  block): ``Compiled``, ``jax.vjp`` of the replayed forward
  (``autodiff.program.build_replay``) from the true leaves.  The call goes through
  ``bind`` as an op whose inputs are those leaves and cotangents, so the
  outer tape records the gradient computation itself and can differentiate
  it again (2nd, 3rd order); a jaxpr pass tells it which inputs the
  gradient really uses (TF's higher-order ``None``);
* fused (first order, and a target is still pending: its op was deferred,
  see ``runtime.deferred``): ``jax.vjp`` of the replayed forward, returning the targets'
  values with the gradients, so the forward of a training step runs once,
  inside this one compiled call, and the pending targets get their values.
  Where its arguments are still pending (the Variables' updates of the
  previous step, read by this tape), the same function runs after their
  graph in one program (``runtime.thunks.call_with_pending``): one dispatch per step.

Custom gradients run user Python at gradient time (TF's timing): before the
lookup, ``resolve_late`` replaces each custom-gradient node of the slice by
the node with its backward traced now (``autodiff.custom_gradient``); what the trace read
becomes new constant inputs (arguments) and its structure part of the node's
signature, so the Program names the computation actually traced.

Which function the replay runs for a node (``resolve_impl``) is the op's own
``impl`` unless a rule registered with ``register_impl_rule`` says otherwise:
the gradient registry (``autodiff.custom``: ``RegisterGradient``,
``gradient_override_map``) registers its rule where it is defined, as JAX
fills ``primitive_transposes`` where each transpose is defined.
"""
import threading
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from ..core import state as _state
from ..core.bind import Primitive
from ..core.caches import LRU
from ..runtime import prediction as _prediction
from ..runtime.thunks import clear_programs
from .nodes import OUT, Node, _log
from .program import LeafPlan, Program, ReplayBuilt, build_backward, build_sparse_replay, seed
from .sparse import Layout, sparse_grads

_tuple_new = tuple.__new__


class CacheInfo(NamedTuple):
    """``cache_info()``: counters of the compiled-replay cache."""
    hits: int
    misses: int
    compiles: int
    evictions: int
    size: int
    maxsize: int


class _Stats:
    hits = 0
    misses = 0
    compiles = 0


_stats = _Stats()
_CACHE = LRU("replay", 512)
#: Call structure (``gradient.SliceKey``) -> its ``gradient.Plan`` (the slice and Program).
_SLICES = LRU("slices", 4096)
_lock = threading.Lock()        # held while a missing entry is built
_count_lock = threading.Lock()  # hits/misses: exact under concurrent threads


def cache_info() -> CacheInfo:
    """Counters of the compiled-replay cache: (hits, misses, compiles, evictions, size, maxsize).

    ``compiles`` counts traces of replay functions (a new structure, or a new
    shape/dtype of the same structure), also of a fused gradient compiled with
    the pending Variable updates it reads (``runtime.thunks.call_with_pending``): a
    training loop's first step compiles its gradient, its third the steady
    step (the previous updates and the gradient, one program), then none.
    """
    return CacheInfo(_stats.hits, _stats.misses, _stats.compiles, _CACHE.evictions, len(_CACHE),
                     _CACHE.maxsize)


def cache_stats():
    """Every cache in tapejax, by name: ``CacheStats(size, maxsize, evictions, instances)``.

    All of them are bounded LRUs.  ``"replay"`` is the compiled-replay cache
    of ``cache_info()``; ``"slices"`` memoizes tape slices; ``"signatures"``
    interns recorded node structures; ``"control_flow"`` holds the ops
    ``cond``/``while_loop``/``scan`` build; ``"op_output_trees"`` the output
    structures of ``tapejax.op`` JAX ops; ``"jax_op_functions"`` the ops
    ``tapejax.op`` made for functions without a ``type_name``; ``"custom_checked"`` the
    checked replays of user-defined op types; ``"scalar_constants"`` the
    Python numbers used with tensors, as device arrays; ``"deferred_avals"``
    the output shapes and dtypes of deferred ops; ``"deferred_programs"`` and
    ``"deferred_structures"`` the compiled programs of pending values (alone,
    or with the fused gradient that reads them) and the structures seen once;
    ``"fused_updates"`` a pending Variable update joined
    with its delta's op.  Per-object caches
    (``"function"``: one per ``tapejax.function``; ``"optimizer_updates"``:
    one per optimizer; ``"eager_jit_fixed"``: one per op type, the jitted
    callables by static parameter values) report the largest
    member's ``size``, their bound per member, the evictions of all members
    and how many members are alive (``instances``).
    """
    from ..core.caches import stats
    return stats()


def clear_cache():
    """Drop every compiled replay and reset the counters (also the slice memo and the programs of
    pending values, which may hold a replay: see ``cache_stats``)."""
    with _lock:
        _CACHE.clear()
        _SLICES.clear()
        clear_programs()
        _prediction.clear()
        with _count_lock:
            _stats.hits = _stats.misses = _stats.compiles = 0


def set_cache_size(maxsize: int) -> None:
    """Bound the number of compiled replays kept (least recently used go first)."""
    if not isinstance(maxsize, int) or maxsize < 1:
        raise ValueError(f"maxsize must be a positive int; got {maxsize!r}")
    with _lock:
        _CACHE.resize(maxsize)


#: A rule choosing the function the replay runs for a node: a pure function, or None (the
#: rule does not apply).
ImplRule = Callable[[Node], "Callable[..., Any] | None"]

#: The registered rules by name, consulted in registration order (see ``register_impl_rule``).
_IMPL_RULES: dict[str, ImplRule] = {}


def register_impl_rule(name: str, rule: ImplRule) -> None:
    """Consult ``rule`` in ``resolve_impl`` (registering a name again replaces its rule).

    ``autodiff.custom`` registers the gradient registry's rule when imported: a node
    whose gradient is overridden or registered runs as a ``jax.custom_vjp``
    calling that gradient."""
    _IMPL_RULES[name] = rule


def resolve_impl(node: Node) -> Callable[..., Any]:
    """The pure function the replay runs for ``node``: the first registered rule's answer,
    else the op's own function (JAX differentiates it).  Called when a replay is built, never
    on the cached path."""
    for rule in _IMPL_RULES.values():
        impl = rule(node)
        if impl is not None:
            return impl
    return node.prim.impl


class Compiled:
    """A compiled gradient for one Program."""

    __slots__ = ("fn", "raw", "deps", "plan", "gather", "prim", "n_leaves", "srcs")

    def __init__(self, fn: Callable[..., Any], plan: LeafPlan, raw: Callable[..., Any]):
        self.fn = fn
        self.raw = raw      # the un-jitted function, for the dependence analysis
        # which inputs the gradients depend on (computed when first nested)
        self.deps: "Dependence | None" = None
        self.plan = plan
        self.gather = _plain(plan)
        self.srcs = _src_positions(plan)
        self.n_leaves = len(plan)
        self.prim = GradientPrimitive(fn, self.n_leaves)


class GradientPrimitive(Primitive):
    """The op a nested gradient call records (``Compiled.prim``): ``fn(leaves, cotangents)``, already
    jitted (no second jit layer for the eager call), a pure function whose output shapes follow
    its inputs'.  So the deferred executor may leave it pending (``deferred_results``): under a
    plain outer tape, an inner ``tape.gradient`` is computed inside the outer gradient's program
    (one dispatch for a second derivative), unless its value is read first."""

    deferred_results = True

    def __init__(self, fn: Callable[..., Any], n: int):
        super().__init__("SymbolicGradient", lambda *a: fn(a[:n], a[n:]), multiple_results=True, jit=False)


def _grads_and_targets(built: ReplayBuilt, program: Program, layout: "Layout | None",
                       held: bool = False) -> Callable[..., Any]:
    """``(leaves, cts) -> (gradients, target values)`` through ``jax.vjp`` of the replay
    (``build_sparse_replay``): the gradients in ``layout``'s flat order (``autodiff.sparse``), in
    TF's convention for complex values; with ``held`` (a replay that also returns values the
    slice computes) those values follow the targets'."""
    src_avals = program.src_avals
    ct_given = program.ct_given
    replay = built.fn
    slots = built.eps

    def fn(leaves, cts):
        eps0 = tuple(jnp.zeros(s.row if s.ind < 0 else tuple(leaves[s.ind].shape) + s.row, src_avals[s.src][1])
                     for s in slots)
        if held:
            outs, vjp, more = jax.vjp(lambda e: replay(e, leaves), eps0, has_aux=True)
        else:
            outs, vjp = jax.vjp(lambda e: replay(e, leaves), eps0)
            more = ()
        it = iter(cts)
        seeds = [seed(o, next(it) if given else None) for o, given in zip(outs, ct_given)]
        (grads,) = vjp(tuple(seeds))
        return sparse_grads(built, layout, src_avals, leaves, grads), tuple(outs) + tuple(more)

    return fn


def _compile(nodes: Sequence[Node], program: Program) -> Compiled:
    layout = program.layout(nodes)
    built = build_sparse_replay(nodes, program, resolve_impl, layout)
    both = _grads_and_targets(built, program, layout)

    def grad_fn(leaves, cts):
        return both(leaves, cts)[0]

    def counted(leaves, cts):
        out = grad_fn(leaves, cts)
        _stats.compiles += 1  # runs once per trace that succeeds
        return out

    return Compiled(jax.jit(counted), built.plan, raw=grad_fn)


class Backward:
    """A compiled first-order gradient (what ``Executor.gradient`` runs): over the saved values
    (``build_backward``: ``fn(leaves, cts) -> gradients``), or ``fused``: the forward replayed
    from the true leaves too (``fn(leaves, cts) -> (gradients, target values)``, ``raw`` the
    same not jitted, for running it after pending updates in one program); ``n_grads``
    gradients."""

    __slots__ = ("fn", "plan", "gather", "srcs", "raw", "fused", "n_grads")

    def __init__(self, fn: Callable[..., Any], plan: LeafPlan, n_grads: int, raw: "Callable[..., Any] | None" = None):
        self.fn = fn
        self.plan = plan
        self.gather = _plain(plan)
        self.srcs = _src_positions(plan)
        self.raw = raw
        self.fused = raw is not None
        self.n_grads = n_grads


def _compile_backward(nodes: Sequence[Node], program: Program) -> Backward:
    layout = program.layout(nodes)
    backward, plan = build_backward(nodes, program, resolve_impl, layout)

    def counted(leaves, cts):
        out = backward(leaves, cts)
        _stats.compiles += 1  # runs once per trace that succeeds
        return out

    return Backward(jax.jit(counted), plan, layout.n_out)


def _compile_fused(nodes: Sequence[Node], program: Program, held: tuple[int, ...] = ()) -> Backward:
    """The gradient when targets are pending (``runtime.deferred``): the forward runs here, from the true
    leaves, and the targets' values come back with the gradients (one dispatch for both); so do
    the values of the slice's codes ``held`` (pending intermediates the user holds: a metric
    read after the gradient does not compute the forward again)."""
    layout = program.layout(nodes)
    built = build_sparse_replay(nodes, program, resolve_impl, layout, held)
    both = _grads_and_targets(built, program, layout, bool(held))

    def counted(leaves, cts):
        out = both(leaves, cts)
        _stats.compiles += 1  # runs once per trace that succeeds
        return out

    # ``raw``: traced inside a program with pending updates too, where its traces are compiles
    return Backward(jax.jit(counted), built.plan, layout.n_out, raw=counted)


# -- which inputs does a compiled gradient really use? --------------------------
# An outer tape must see each output of the gradient op as depending only on the
# inputs it is computed from: d(2x)/dx = 2 does not use x, and TF then gives the
# second derivative None (its gradient graph has no path from x); for
# y = x*x + 2z, dy/dz uses neither x nor z while dy/dx uses x (``Dependence``:
# the op's ``out_deps``, which ``program.slice_tape`` follows).  The jaxpr
# of the gradient function says it; nested jaxprs (pjit, custom_jvp calls)
# are followed, any other primitive is taken to use all its inputs.  A
# custom_vjp call is not followed: its derivative is its backward's, which may
# use inputs its value does not (a custom gradient's value is the constants the
# call computed, its derivative grad_fn's, see ``autodiff.custom_gradient``).

def _is_literal(v):
    return hasattr(v, "val")


def _sub_jaxpr(eqn):
    if eqn.primitive.name.startswith("custom_vjp"):
        return None
    for key in ("jaxpr", "call_jaxpr"):
        sub = eqn.params.get(key)
        if sub is not None:
            sub = getattr(sub, "jaxpr", sub)
            if len(sub.invars) == len(eqn.invars) and len(sub.outvars) == len(eqn.outvars):
                return sub
    return None


def _output_masks(jaxpr, out_masks: Sequence[int]) -> list[int]:
    """Per input of ``jaxpr``: the bitmask of the outputs (``out_masks[k]`` for output ``k``) that
    depend on it, in one backward pass over the equations."""
    mask: dict[Any, int] = {}
    for v, m in zip(jaxpr.outvars, out_masks):
        if m and not _is_literal(v):
            mask[v] = mask.get(v, 0) | m
    for eqn in reversed(jaxpr.eqns):
        outs = [0 if _is_literal(o) else mask.get(o, 0) for o in eqn.outvars]
        if not any(outs):
            continue
        sub = _sub_jaxpr(eqn)
        if sub is not None:
            ins = _output_masks(sub, outs)
        else:
            every = 0
            for m in outs:
                every |= m
            ins = [every] * len(eqn.invars)
        for v, m in zip(eqn.invars, ins):
            if m and not _is_literal(v):
                mask[v] = mask.get(v, 0) | m
    return [mask.get(v, 0) for v in jaxpr.invars]


class Dependence(NamedTuple):
    """Which flattened array inputs of a function its outputs depend on."""
    any: list[bool]                            # per input: does some output depend on it?
    per_output: tuple[tuple[bool, ...], ...]   # per output, per input


def input_dependence(fn: Callable[..., Any], *args) -> Dependence:
    """Which flattened array inputs of ``fn(*args)`` its outputs depend on (any use counts)."""
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    masks = _output_masks(jaxpr, [1 << k for k in range(len(jaxpr.outvars))])
    per = tuple(tuple(bool(m >> k & 1) for m in masks) for k in range(len(jaxpr.outvars)))
    return Dependence([m != 0 for m in masks], per)


#: Builds a compiled entry for a Program (``_compile`` and its kin, a jacobian's ...).
Build = Callable[[Sequence[Node], Program], Any]


def lookup(nodes: Sequence[Node], program: Program, key: Any = None, build: "Build | None" = None) -> Any:
    """The cached compiled function for ``program`` (``key``/``build``: another
    kind of compiled call on the same slice, e.g. a jacobian, sharing this cache)."""
    return _lookup(nodes, program, program if key is None else key, build)[0]


def _lookup(nodes: Sequence[Node], program: Program, key: Any, build: "Build | None") -> tuple[Any, bool]:
    """(entry, whether this call built it)."""
    entry = _CACHE.get(key)
    if entry is not None:
        with _count_lock:
            _stats.hits += 1
        return entry, False
    with _lock:
        entry = _CACHE.get(key)
        if entry is None:
            entry = (build or _compile)(nodes, program)
            _CACHE[key] = entry
            with _count_lock:
                _stats.misses += 1
            return entry, True
        with _count_lock:   # another thread built it meanwhile
            _stats.hits += 1
    return entry, False


def lookup_run(nodes: Sequence[Node], program: Program, run: Callable[[Any], Any], key: Any = None,
               build: "Build | None" = None) -> Any:
    """``run(entry)`` with the cached compiled entry.  When this call built the entry and its
    first run raises (a user's gradient function failed while tracing), the entry is dropped:
    a failed call leaves no entry and no miss behind."""
    key = program if key is None else key
    entry, built = _lookup(nodes, program, key, build)
    if not built:
        return run(entry)
    try:
        return run(entry)
    except Exception:
        _forget(key, entry)
        raise


def _forget(key, entry):
    """Drop ``entry``, made by this call, whose first run failed (a user's gradient function
    raised while tracing): a failed call leaves no entry and no miss behind."""
    with _lock:
        if _CACHE.get(key) is entry:
            _CACHE.pop(key)
            with _count_lock:
                _stats.misses -= 1


class Resolved(NamedTuple):
    """``resolve_late``'s result: the nodes with the custom-gradient nodes the gradient reaches
    traced now, the Program over them and ``cut``: some ``grad_fn`` returned None for an input
    (that node's edge to it is cut, see ``autodiff.custom_gradient``), so the slice must be taken
    again on ``nodes`` (sources and targets may have become unconnected, and the custom-gradient
    nodes no gradient reaches any more were left as they were, their ``grad_fn`` not called)."""
    nodes: Sequence[Node]
    program: Program
    cut: bool


def resolve_late(nodes: Sequence[Node], program: Program, nested: "bool | None" = None) -> Resolved:
    """``(nodes, program, cut)`` with each node of ``program.late`` (a custom gradient) that the
    gradient reaches replaced by ``node.prim.late(node, nested)``: the node with its backward traced
    now, at gradient time, as TF runs ``grad_fn`` then.  The traced computation's constants and
    literals are new constant inputs of the node and its structure is part of the node's signature,
    so the new ``Program`` (the cache key) is the old one exactly when the traced computation is the
    same; new values of the constants are new arguments, not a new compile.  ``nested``: another
    tape records this gradient (default: any tape is recording).

    The slice is walked from the targets back, as TF's tape runs the backward: a node is reached
    when a gradient flows into one of its outputs, and an input a ``grad_fn`` returns None for
    gets nothing from that node, so a custom-gradient node reached only through such an input
    is not traced (TF does not call its ``grad_fn``) and ``cut`` is True."""
    if not program.late:
        return Resolved(nodes, program, False)
    if nested is None:
        nested = bool(_state.tapes())
    nodes = list(nodes)
    late = set(program.late)
    needed = set(program.tgt_codes)
    cut = False
    for idx in reversed(program.slice):
        node = nodes[idx]
        base = idx * OUT
        if not any(base + k in needed for k in range(node.n_out)):
            continue   # (only after a cut: every slice node leads to a target)
        if idx in late:
            new = nodes[idx] = node.prim.late(node, nested)
            if any(a is not None and b is None for a, b in zip(node.refs, new.refs)):
                cut = True
            node = new
        needed.update(c for c in node.refs if c is not None)
    return Resolved(nodes, Program(nodes, program.slice, program.src_codes, program.src_avals, program.tgt_codes,
                                   program.ct_given), cut)


def _plain(plan: LeafPlan) -> tuple[tuple[str, int, int], ...]:
    """``plan`` with each ``Leaf`` as a plain tuple: what every gradient call gathers by (CPython
    unpacks an exact tuple on its fast path, a NamedTuple on the generic one)."""
    return tuple([(leaf.kind, leaf.pos, leaf.index) for leaf in plan])


def _src_positions(plan: LeafPlan) -> tuple[int, ...]:
    """The sources a compiled call reads itself (its plan's ``Leaf("src", e, 0)``: a watched
    tensor an op uses; a Variable's value is read by its recorded reads instead)."""
    return tuple(e for kind, e, _ in plan if kind == "src")


def tape_log_int(s) -> None:
    """Warn, as TF, that a source of an integer dtype gets no gradient."""
    _log.warning("The dtype of the source tensor must be floating (e.g. tf.float32) when calling "
                 "GradientTape.gradient, got %r", s.dtype)
