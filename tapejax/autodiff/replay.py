"""The compiled gradient: one ``jax.jit`` per program structure.

``gradient(tape, targets, sources, cotangents, mode)``:

1. codes of sources and targets on the tape; ``_program.slice_tape``
   (memoized per call structure in ``_SLICES``);
2. ``Program`` (the key); the bounded LRU ``_CACHE`` maps it to a compiled
   entry: one stable ``jax.jit`` object (so JAX's own trace cache is hit on
   the next call) and the plan that gathers its arguments;
3. call it with those arguments and the given cotangents; missing
   cotangents are ones, made inside the compiled function;
4. ``None`` (or zeros) for unconnected sources, results cast to the sources'
   dtypes.

Three compiled forms exist for one Program:

* first order (no other tape records the call): ``Backward``, built by
  ``_program.build_backward``: the reverse walk over the slice, each node's
  ``jax.vjp`` taken at the input values the tape saved when the op ran.  The
  forward is not computed a second time (XLA drops what no vjp reads, e.g. a
  matmul's product), as TF and PyTorch reuse their saved activations;
* recorded (a nested tape, or a persistent tape used inside its own ``with``
  block): ``Compiled``, ``jax.vjp`` of the replayed forward
  (``_program.build_replay``) from the true leaves.  The call goes through
  ``bind`` as an op whose inputs are those leaves and cotangents, so the
  outer tape records the gradient computation itself and can differentiate
  it again (2nd, 3rd order); a jaxpr pass tells it which inputs the
  gradient really uses (TF's higher-order ``None``);
* fused (first order, and a target is still pending: its op was deferred,
  see ``_lazy``): ``jax.vjp`` of the replayed forward, returning the targets'
  values with the gradients, so the forward of a training step runs once,
  inside this one compiled call, and the pending targets get their values.
  Where its arguments are still pending (the Variables' updates of the
  previous step, read by this tape), the same function runs after their
  graph in one program (``_lazy.call_with_pending``): one dispatch per step.

Custom gradients run user Python at gradient time (TF's timing): before the
lookup, ``resolve_late`` replaces each custom-gradient node of the slice by
the node with its backward traced now (``_custom_gradient``); what the trace read
becomes new constant inputs (arguments) and its structure part of the node's
signature, so the Program names the computation actually traced.

Which function the replay runs for a node (``resolve_impl``) is the op's own
``impl`` unless a rule registered with ``register_impl_rule`` says otherwise:
the gradient registry (``_custom``: ``RegisterGradient``,
``gradient_override_map``) registers its rule where it is defined, as JAX
fills ``primitive_transposes`` where each transpose is defined.

``_tape`` does not import this module (this module imports it): the driver
``GradientTape.gradient`` calls is handed to it at import,
``_tape.set_gradient_driver(gradient)``.
"""
import threading
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import Primitive, bind, with_id
from ..core.caches import LRU
from ..core.tensor import Tensor
from ..runtime import speculate as _speculate
from ..runtime.pending import Pending, _Thunk, call_with_pending, clear_programs, force_all, pending_results
from .program import Aval, LeafPlan, Program, build_backward, build_replay, gather_leaves, seed, slice_tape
from .tape import _TRAINABLE, OUT, Node, set_gradient_driver

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
_lock = threading.Lock()        # held while a missing entry is built
_count_lock = threading.Lock()  # hits/misses: exact under concurrent threads


def cache_info() -> CacheInfo:
    """Counters of the compiled-replay cache: (hits, misses, compiles, evictions, size, maxsize).

    ``compiles`` counts traces of replay functions (a new structure, or a new
    shape/dtype of the same structure), also of a fused gradient compiled with
    the pending Variable updates it reads (``_lazy.call_with_pending``): a
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
    structures of ``tapejax.op`` JAX ops; ``"custom_checked"`` the
    checked replays of user-defined op types; ``"scalar_constants"`` the
    Python numbers used with tensors, as device arrays; ``"deferred_avals"``
    the output shapes and dtypes of deferred ops; ``"deferred_programs"`` and
    ``"deferred_structures"`` the compiled programs of pending values (alone,
    or with the fused gradient that reads them) and the structures seen once;
    ``"fused_updates"`` a pending Variable update joined
    with its delta's op.  Per-object caches
    (``"function"``: one per ``tapejax.function``; ``"optimizer_updates"``:
    one per optimizer; ``"eager_jit"`` and ``"eager_jit_fixed"``: one per op
    type, by static parameter names / values) report the largest
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
        _speculate.clear()
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

    ``_custom`` registers the gradient registry's rule when imported: a node
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
        self.deps: "list[bool] | None" = None
        self.plan = plan
        self.gather = _plain(plan)
        self.srcs = _src_positions(plan)
        self.n_leaves = len(plan)
        n = self.n_leaves
        # fn is already jitted: no second jit layer for the eager call.
        self.prim = Primitive("SymbolicGradient", lambda *a: fn(a[:n], a[n:]), multiple_results=True,
                              jit=False)


def _grads_and_targets(replay: Callable[..., Any], program: Program) -> Callable[..., Any]:
    """``(leaves, cts) -> (gradients, target values)`` through ``jax.vjp`` of the replay."""
    src_avals = program.src_avals
    ct_given = program.ct_given

    def fn(leaves, cts):
        eps0 = tuple(jnp.zeros(shape, dtype) for shape, dtype in src_avals)
        outs, vjp = jax.vjp(lambda e: replay(e, leaves), eps0)
        it = iter(cts)
        seeds = [seed(o, next(it) if given else None) for o, given in zip(outs, ct_given)]
        (grads,) = vjp(tuple(seeds))
        return tuple(g.astype(dtype) for g, (_, dtype) in zip(grads, src_avals)), outs

    return fn


def _compile(nodes: Sequence[Node], program: Program) -> Compiled:
    replay, plan = build_replay(nodes, program, resolve_impl)
    both = _grads_and_targets(replay, program)

    def grad_fn(leaves, cts):
        return both(leaves, cts)[0]

    def counted(leaves, cts):
        out = grad_fn(leaves, cts)
        _stats.compiles += 1  # runs once per trace that succeeds
        return out

    return Compiled(jax.jit(counted), plan, raw=grad_fn)


class Backward:
    """A compiled first-order gradient over the saved values (``build_backward``)."""

    __slots__ = ("fn", "plan", "gather", "srcs", "raw")

    def __init__(self, fn: Callable[..., Any], plan: LeafPlan, raw: "Callable[..., Any] | None" = None):
        self.fn = fn
        self.plan = plan
        self.gather = _plain(plan)
        self.srcs = _src_positions(plan)
        self.raw = raw   # fused: the un-jitted function (run after pending updates, see _call_fused)


def _compile_backward(nodes: Sequence[Node], program: Program) -> Backward:
    backward, plan = build_backward(nodes, program, resolve_impl)

    def counted(leaves, cts):
        out = backward(leaves, cts)
        _stats.compiles += 1  # runs once per trace that succeeds
        return out

    return Backward(jax.jit(counted), plan)


def _compile_fused(nodes: Sequence[Node], program: Program) -> Backward:
    """The gradient when targets are pending (``_lazy``): the forward runs here, from the true
    leaves, and the targets' values come back with the gradients (one dispatch for both)."""
    replay, plan = build_replay(nodes, program, resolve_impl)
    both = _grads_and_targets(replay, program)

    def counted(leaves, cts):
        out = both(leaves, cts)
        _stats.compiles += 1  # runs once per trace that succeeds
        return out

    # ``raw``: traced inside a program with pending updates too, where its traces are compiles
    return Backward(jax.jit(counted), plan, raw=counted)


# -- which inputs does a compiled gradient really use? --------------------------
# An outer tape must see the gradient op as depending only on the inputs its
# result is computed from: d(2x)/dx = 2 does not use x, and TF then gives the
# second derivative None (its gradient graph has no path from x).  The jaxpr
# of the gradient function says it; nested jaxprs (pjit, custom_jvp calls)
# are followed, any other primitive is taken to use all its inputs.  A
# custom_vjp call is not followed: its derivative is its backward's, which may
# use inputs its value does not (a custom gradient's value is the constants the
# call computed, its derivative grad_fn's, see ``_custom_gradient``).

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


def _used_inputs(jaxpr, used_outputs):
    need = {v for v, u in zip(jaxpr.outvars, used_outputs) if u and not _is_literal(v)}
    for eqn in reversed(jaxpr.eqns):
        outs = [not _is_literal(o) and o in need for o in eqn.outvars]
        if not any(outs):
            continue
        sub = _sub_jaxpr(eqn)
        ins = _used_inputs(sub, outs) if sub is not None else [True] * len(eqn.invars)
        need.update(v for v, u in zip(eqn.invars, ins) if u and not _is_literal(v))
    return [v in need for v in jaxpr.invars]


def input_dependence(fn: Callable[..., Any], *args) -> list[bool]:
    """For each flattened array input of ``fn(*args)``: does some output depend on it?"""
    closed = jax.make_jaxpr(fn)(*args)
    return _used_inputs(closed.jaxpr, [True] * len(closed.jaxpr.outvars))


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


def _source_codes(tape, sources: Sequence[Any]) -> tuple[list[int | None], list[Aval]]:
    """Each source's code on ``tape`` (None where it is untracked or not of a trainable dtype),
    and each source's (shape, dtype)."""
    get = tape._codes.get
    codes: list[int | None] = []
    avals: list[Aval] = []
    for s in sources:
        m = s._meta
        dt = m.dtype
        code = get(s._id)
        if code is not None:
            t = _TRAINABLE.get(dt)
            if t is None:
                t = _TRAINABLE[dt] = _dtypes.is_trainable_dtype(dt)
            if not t:
                code = None
        codes.append(code)
        avals.append((m.shape, dt))
    return codes, avals


class SliceKey(NamedTuple):
    """The structure of a gradient call: the key of ``_SLICES``."""
    sigs: tuple[int, ...]                 # every node's interned signature
    src_codes: tuple[int | None, ...]     # each source's code (None: untracked)
    tgt_codes: tuple[int | None, ...]     # each target's code
    ct_given: tuple[bool, ...]            # which targets bring their own cotangent
    src_avals: tuple[Aval, ...]


#: Memo of slices: ``SliceKey`` -> a ``Plan``.  A training loop then pays one
#: tuple of ints and one dict lookup per call instead of slicing the tape
#: again.  Bounded (LRU); cleared with the cache.
_SLICES = LRU("slices", 4096)


class KeptTarget(NamedTuple):
    """A target that depends on a connected source: its position among the targets, its code."""
    pos: int
    code: int


class Plan:
    """What one structure of gradient call computes: the connected source codes
    (``live_src``), the kept targets, the Program (None: nothing is connected),
    for each live code the position of its first source (``first``), and for each source the
    position of its gradient among the compiled call's outputs, or -1 (``result_pos``)."""

    __slots__ = ("live_src", "kept", "program", "first", "result_pos")

    def __init__(self, live_src: list[int], kept: list[KeptTarget], program: "Program | None",
                 first: tuple[int, ...], result_pos: tuple[int, ...]):
        self.live_src = live_src
        self.kept = kept
        self.program = program
        self.first = first
        self.result_pos = result_pos


def _plan(nodes: Sequence[Node], src_codes_all: list[int | None], tgt_all: list[int | None],
          cts: Sequence[Any], src_avals: list[Aval]) -> Plan:
    # one C call (as ``Node``): this runs on every gradient call
    key = _tuple_new(SliceKey, (tuple([n.sig for n in nodes]), tuple(src_codes_all), tuple(tgt_all),
                                tuple([c is not None for c in cts]), tuple(src_avals)))
    hit = _SLICES.get(key)
    if hit is not None:
        return hit
    uniq = list(dict.fromkeys(c for c in src_codes_all if c is not None))
    slice_idx, needed = slice_tape(nodes, uniq, [c for c in tgt_all if c is not None])
    live_src = [c for c in uniq if c in needed]
    live_set = set(live_src)
    # Targets that depend on a connected source: a source itself, or made by a slice node.
    in_slice = set(slice_idx)
    kept = [KeptTarget(i, c) for i, c in enumerate(tgt_all)
            if c is not None and (c in live_set or (c >= 0 and c // OUT in in_slice))]
    program = None
    first: tuple[int, ...] = ()
    result_pos = (-1,) * len(src_codes_all)
    if live_src and kept:
        aval_of: dict[int | None, Aval] = {}
        for a, c in zip(src_avals, src_codes_all):
            aval_of.setdefault(c, a)
        program = Program(nodes, slice_idx, tuple(live_src), tuple(aval_of[c] for c in live_src),
                          tuple(c for _, c in kept), tuple(cts[i] is not None for i, _ in kept))
        first = tuple(src_codes_all.index(c) for c in live_src)
        pos: dict[int | None, int] = {c: j for j, c in enumerate(live_src)}
        result_pos = tuple(pos.get(c, -1) for c in src_codes_all)
    return _SLICES.setdefault(key, Plan(live_src, kept, program, first, result_pos))


def gradient(tape, targets: Sequence[Any], sources: Sequence[Any], cts: Sequence[Any], mode) -> list:
    """Flat gradients of the summed ``targets`` w.r.t. each of ``sources`` (``GradientTape.gradient``
    runs it: see ``set_gradient_driver`` below; ``cts``: the given cotangents, None for ones)."""
    nodes = tape._nodes
    src_codes_all, src_avals = _source_codes(tape, sources)
    codes = tape._codes
    if None in src_codes_all:
        # A target that is itself a source has gradient 1 even when the tape never
        # tracked it (TF: gradient(x, x) == 1): give it a code of its own here.
        tgt_ids = {t._id for t in targets}
        virtual: dict[int, int] = {}
        for k, s in enumerate(sources):
            if src_codes_all[k] is None and _dtypes.is_trainable_dtype(src_avals[k][1]):
                if s._id in tgt_ids:
                    virtual.setdefault(s._id, -(tape._n_leaves + 1 + len(virtual)))
                    src_codes_all[k] = virtual[s._id]
            elif src_codes_all[k] is None:
                tape_log_int(s)
        tgt_all = [codes.get(t._id, virtual.get(t._id)) for t in targets]
    else:
        tgt_all = [codes.get(t._id) for t in targets]
    plan = _plan(nodes, src_codes_all, tgt_all, cts, src_avals)
    program = plan.program
    results: list[Any]
    if program is None:
        results = [None] * len(sources)
    else:
        kept = plan.kept
        src_objs = [sources[k] for k in plan.first]   # each live code's first source
        nested = bool(_state.tapes())
        if program.late:
            nodes, program = resolve_late(nodes, program, nested)
        if not nested and _pending_targets(targets, kept):
            outs = lookup_run(
                nodes, program,
                lambda entry: _call_fused(entry, nodes, program, src_objs, kept, cts, targets),
                key=program.fused_key, build=_compile_fused)
        else:
            outs = lookup_run(
                nodes, program,
                lambda entry: _call_gradient(entry, nodes, program, src_objs, kept, cts, nested),
                key=None if nested else program.backward_key, build=None if nested else _compile_backward)
        results = [outs[j] if j >= 0 else None for j in plan.result_pos]
    if mode.value == "zero":
        results = [r if r is not None else Tensor(jnp.zeros(a[0], a[1]))
                   for r, a in zip(results, src_avals)]
    return results


set_gradient_driver(gradient)   # GradientTape.gradient runs it (``_tape`` cannot import this module)


def resolve_late(nodes: Sequence[Node], program: Program,
                 nested: "bool | None" = None) -> tuple[Sequence[Node], Program]:
    """``(nodes, program)`` with each node of ``program.late`` (a custom gradient) replaced by
    ``node.prim.late(node, nested)``: the node with its backward traced now, at gradient time,
    as TF runs ``grad_fn`` then.  The traced computation's constants and literals are new
    constant inputs of the node and its structure is part of the node's signature, so the new
    ``Program`` (the cache key) is the old one exactly when the traced computation is the same;
    new values of the constants are new arguments, not a new compile.  ``nested``: another tape
    records this gradient (default: any tape is recording)."""
    if not program.late:
        return nodes, program
    if nested is None:
        nested = bool(_state.tapes())
    nodes = list(nodes)
    for idx in program.late:
        node = nodes[idx]
        nodes[idx] = node.prim.late(node, nested)
    return nodes, Program(nodes, program.slice, program.src_codes, program.src_avals, program.tgt_codes,
                          program.ct_given)


def _pending_targets(targets: Sequence[Any], kept: list[KeptTarget]) -> bool:
    for i, _ in kept:
        t = targets[i]
        if type(t) is Pending and t._thunk.value is None:
            return True
    return False


def _plain(plan: LeafPlan) -> tuple[tuple[str, int, int], ...]:
    """``plan`` with each ``Leaf`` as a plain tuple: what every gradient call gathers by (CPython
    unpacks an exact tuple on its fast path, a NamedTuple on the generic one)."""
    return tuple([(leaf.kind, leaf.pos, leaf.index) for leaf in plan])


def _src_positions(plan: LeafPlan) -> tuple[int, ...]:
    """The sources a compiled call reads itself (its plan's ``Leaf("src", e, 0)``: a watched
    tensor an op uses; a Variable's value is read by its recorded reads instead)."""
    return tuple(e for kind, e, _ in plan if kind == "src")


def _src_values(entry: "Compiled | Backward", src_objs: Sequence[Any]) -> list[Any]:
    """The values of the sources ``entry`` reads itself (None elsewhere).  A pending source
    stays a thunk: the gathering computes it."""
    vals: list[Any] = [None] * len(src_objs)
    for e in entry.srcs:
        s = src_objs[e]
        vals[e] = s._thunk if type(s) is Pending else s._value
    return vals


def _call_fused(entry: Backward, nodes: Sequence[Node], program: Program, src_objs: Sequence[Any],
                kept: list[KeptTarget], cts: Sequence[Any], targets: Sequence[Any]) -> tuple:
    """Run the fused forward + gradient; the pending targets get their values."""
    leaves = gather_leaves(nodes, program, entry.gather, _src_values(entry, src_objs), force=False)
    given = tuple([cts[i]._value for i, _ in kept if cts[i] is not None])
    track = _speculate.track(entry) if _speculate._flags.enabled else None
    out = None
    if track is not None and _speculate.predicts(track, len(program.src_codes)):
        out = _speculate.run_predicted(track, entry, leaves, given)
    if out is not None:   # the step's updates predicted: computed here, the gradients not returned
        values, results = out
    else:
        for v in leaves:
            if type(v) is _Thunk:   # pending values (a Variable's update): computed in the same program
                out = call_with_pending(entry, entry.raw, leaves, given)
                if out is None:
                    leaves = tuple(force_all(leaves))
                break
        grads, values = entry.fn(leaves, given) if out is None else out
        results = pending_results(grads)
        if track is not None:
            _speculate.tag_results(results, entry, track)
    for (i, _), v in zip(kept, values):
        t = targets[i]
        if type(t) is Pending:
            t._thunk.set(v)
    return results


def _call_gradient(entry: "Compiled | Backward", nodes: Sequence[Node], program: Program,
                   src_objs: Sequence[Any], kept: list[KeptTarget], cts: Sequence[Any], nested: bool) -> tuple:
    """Run the compiled gradient: the saved-values backward, or (``nested``: another tape
    records this call) the replay as an op that the outer tapes record (2nd, 3rd order)."""
    leaves = gather_leaves(nodes, program, entry.gather, _src_values(entry, src_objs))
    given = [cts[i] for i, _ in kept if cts[i] is not None]
    if not nested:
        return pending_results(entry.fn(leaves, tuple(g._value for g in given)))
    assert isinstance(entry, Compiled)   # the recorded form (``_compile``)
    given_vals = tuple(g._value for g in given)
    if entry.deps is None:
        entry.deps = input_dependence(entry.raw, leaves, given_vals)
    deps = entry.deps
    ids = _leaf_ids(nodes, program, entry.plan, src_objs)
    # Inputs the gradient does not use are passed as constants (id 0).
    args = [with_id(v, i if d else 0) for v, i, d in zip(leaves, ids, deps)]
    args += [g if d else g._value for g, d in zip(given, deps[len(leaves):])]
    out = bind(entry.prim, *args)
    assert isinstance(out, tuple)   # the op has multiple results
    return out


def _leaf_ids(nodes: Sequence[Node], program: Program, plan: LeafPlan, src_objs: Sequence[Any]) -> list[int]:
    sl = program.slice
    return [nodes[sl[a]].ids[b] if kind == "node" else src_objs[a]._id for kind, a, b in plan]


def tape_log_int(s) -> None:
    """Warn, as TF, that a source of an integer dtype gets no gradient."""
    from .tape import _log
    _log.warning("The dtype of the source tensor must be floating (e.g. tf.float32) when calling "
                 "GradientTape.gradient, got %r", s.dtype)
