"""Slice a tape for one gradient call and name its structure with a hashable key.

Given the codes of the sources and of the targets (see ``autodiff.tape``):

1. forward: a node is *live* if one of its inputs is live; the sources are
   live (a source that some node produces makes that output live, whatever
   the node's inputs);
2. backward: a live node is in the *slice* if one of its outputs is needed;
   the targets are needed, and a slice node needs its live inputs.

A source is *connected* iff its code is needed.  Everything a slice node
reads that is not live is a constant: its value is an argument (a *leaf*) of
the compiled function, never baked in, so the next training step, with new
values and the same structure, hits the cache.

The ``Program`` is that structure: the slice nodes' interned signatures and
positions, the connected sources' codes and avals, the connected targets'
codes and which targets bring their own cotangent.  It is the cache key
(hashable, readable ``repr``) and also knows how to gather the leaves.  Its
``late`` lists the slice's nodes whose op traces part of itself when the
gradient is taken (custom gradients, see ``autodiff.replay.resolve_late``).

Two pure functions are built from a Program (``autodiff.replay`` jits them):
``build_backward`` (first order: reverse walk, each node's vjp at its saved
input values) and ``build_replay`` (the forward again from the true leaves,
for ``jax.vjp``/``jax.jvp`` when the result must be differentiable in them:
nested tapes, jacobians, forward accumulators; and when the forward was
deferred, see ``runtime.deferred``, so there are no saved values to reuse).  Each is
built from typed steps (``OpStep``/``ReadStep``, ``OpBack``/``ReadBack``)
and comes with its ``LeafPlan``: where each argument is read from
(``Leaf``).  Gathering the leaves computes any pending value (a thunk) among
them.
"""
from typing import Any, Callable, Literal, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..core.bind import READ
from ..ops.indexing import RESOURCE_GATHER
from ..runtime.thunks import Thunk, force_all
from .nodes import OUT, Node
from .sparse import Layout, concat_pieces, sparse_layout
from .user_grad import conj_complex

#: ``(shape, dtype)`` of a source (plain tuples: built on every gradient call, hashed in keys).
Aval = tuple[tuple[int, ...], Any]
#: node -> the pure function a replay runs for it (``autodiff.replay.resolve_impl``).
ImplResolver = Callable[[Node], Callable[..., Any]]


class Leaf(NamedTuple):
    """Where one argument (a *leaf*) of a compiled call comes from: ``kind == "node"``: the
    recorded input ``index`` of the slice node at slice position ``pos``; ``kind == "src"``: the
    value of connected source ``pos`` (``index`` 0)."""
    kind: Literal["node", "src"]
    pos: int
    index: int


#: The leaves of a compiled call, in argument order (``gather_leaves`` reads them).
LeafPlan = tuple[Leaf, ...]


class ProgramKey(NamedTuple):
    """What a ``Program`` is equal by (the cache key's parts)."""
    sigs: tuple[int, ...]          # the slice nodes' interned signatures
    slice: tuple[int, ...]         # their positions on the tape
    src_codes: tuple[int, ...]     # connected sources
    src_avals: tuple[Aval, ...]
    tgt_codes: tuple[int, ...]     # connected targets
    ct_given: tuple[bool, ...]     # which targets bring their own cotangent


class EntryKey(NamedTuple):
    """The key of another compiled form of a Program in the replay cache (``kind``:
    ``"backward"``, ``"fused"``, ``"jvp"`` ...); the Program alone keys the recorded form."""
    kind: str
    program: "Program"


class Program:
    """The structure of one gradient computation: cache key and leaf plan."""

    __slots__ = ("key", "slice", "src_codes", "src_avals", "tgt_codes", "ct_given", "_hash", "backward_key",
                 "fused_key", "late", "_layout")

    def __init__(self, nodes: Sequence[Node], slice_idx: tuple[int, ...], src_codes: tuple[int, ...],
                 src_avals: tuple[Aval, ...], tgt_codes: tuple[int, ...], ct_given: tuple[bool, ...]):
        self.slice = slice_idx
        self.src_codes = src_codes
        self.src_avals = src_avals
        self.tgt_codes = tgt_codes
        self.ct_given = ct_given
        self.key = ProgramKey(tuple([nodes[i].sig for i in slice_idx]), slice_idx, src_codes, src_avals,
                              tgt_codes, ct_given)
        self._hash = hash(self.key)
        self.backward_key = EntryKey("backward", self)  # the saved-values gradient of this structure
        self.fused_key = EntryKey("fused", self)        # forward and gradient in one (pending targets)
        # Slice nodes whose op traces part of itself when the gradient is taken (custom
        # gradients: ``autodiff.replay.resolve_late``), by node index.
        self.late: tuple[int, ...] = tuple([i for i in slice_idx
                                            if getattr(nodes[i].prim, "late", None) is not None])
        self._layout: "Layout | None" = None

    def layout(self, nodes: Sequence[Node]) -> Layout:
        """Which of this gradient's sources get ``IndexedSlices`` and where its outputs are
        (``autodiff.sparse``; decided once, from the structure the key names)."""
        lay = self._layout
        if lay is None:
            lay = self._layout = sparse_layout(nodes, self.slice, self.src_codes, self.src_avals, self.tgt_codes)
        return lay

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and self._hash == other._hash and self.key == other.key

    def __repr__(self) -> str:
        return (f"Program(nodes={len(self.slice)}, sources={len(self.src_codes)}, "
                f"targets={len(self.tgt_codes)}, src_avals={self.src_avals})")


def slice_tape(nodes: Sequence[Node], src_codes, tgt_codes) -> tuple[tuple[int, ...], set[int]]:
    """(slice node indices, needed codes) for these sources and targets.  An output of a node
    whose op knows which inputs each output depends on (``Primitive.out_deps``: a nested
    gradient's) is live only from those inputs, and needs only those."""
    live = set(src_codes)
    live_nodes: list[int] = []
    for idx, node in enumerate(nodes):
        for c in node.refs:
            if c in live:
                base = idx * OUT
                deps = node.prim.out_deps
                fed = [r in live for r in node.refs]
                outs = range(node.n_out) if deps is None else [
                    k for k, d in enumerate(deps) if any(f and u for f, u in zip(fed, d))]
                if outs:
                    live_nodes.append(idx)
                    live.update(base + k for k in outs)
                break
    needed = {c for c in tgt_codes if c in live}
    picked: list[int] = []
    for idx in reversed(live_nodes):
        node = nodes[idx]
        base = idx * OUT
        deps = node.prim.out_deps
        if deps is None:
            for k in range(node.n_out):
                if base + k in needed:
                    picked.append(idx)
                    for c in node.refs:
                        if c in live:
                            needed.add(c)
                    break
            continue
        outs = [k for k in range(node.n_out) if base + k in needed]
        if outs:
            picked.append(idx)
            needed.update(c for i, c in enumerate(node.refs) if c in live and any(deps[k][i] for k in outs))
    picked.reverse()
    return tuple(picked), needed


def aval(value) -> Aval:
    return (value.shape, value.dtype)


class Built(NamedTuple):
    """A pure function built from a Program (``build_replay``, ``build_backward``) and the plan
    that gathers its leaves."""
    fn: Callable[..., Any]
    plan: LeafPlan


# -- the replay: the forward again, from the true leaves ---------------------------------------

class SourceInit(NamedTuple):
    """A source that is a leaf of the slice: ``env[slot] = leaves[leaf] + eps[eps]`` (-1: no
    perturbation here, the source's gradient is sparse: ``autodiff.sparse``)."""
    slot: int
    leaf: int
    eps: int


class ReadStep(NamedTuple):
    """A Variable read: ``env[slot]`` = the value read (``leaves[leaf]``) plus the Variable's
    perturbation ``eps[eps]`` (-1: none, its gradient is sparse), plus the read's own
    (``out_eps``; -1: the read is no source)."""
    leaf: int
    slot: int
    eps: int
    out_eps: int


class GatherStep(NamedTuple):
    """A ``ResourceGather`` (the rows a gather on a Variable read, ``leaves[rows]``, at the
    indices ``leaves[ind]``): ``env[slot]`` = the rows plus the Variable's perturbation gathered
    at the indices (``var_eps``), plus the gather's own perturbation where its Variable's
    gradient is sparse (``piece_eps``), plus the output's own where it is a source (``out_eps``);
    -1: none."""
    rows: int
    ind: int
    slot: int
    var_eps: int
    piece_eps: int
    out_eps: int


class Arg(NamedTuple):
    """One input of an op step: ``env[index]`` (``live``: computed in the replay) or
    ``leaves[index]`` (a constant)."""
    live: bool
    index: int


class OpStep(NamedTuple):
    """An op: ``impl(*args, **static)`` into the env slots ``outs``, each output plus its
    perturbation ``eps[out_eps[k]]`` where it is a source (-1: none); a gather whose params'
    gradient is sparse adds ``eps[piece_eps]`` to its output too."""
    impl: Callable[..., Any]
    static: dict
    args: tuple[Arg, ...]
    outs: tuple[int, ...]
    out_eps: tuple[int, ...]
    multi: bool   # the op returns a sequence of outputs
    piece_eps: int = -1


class EpsSlot(NamedTuple):
    """One perturbation the replay is differentiated by: of connected source ``src`` (``ind``
    -1: shaped as the source), or, for a source whose gradient is sparse, of one gather's output
    (shaped ``leaves[ind].shape + row``, its indices being ``leaves[ind]``)."""
    src: int
    ind: int
    row: tuple[int, ...]


class ReplayBuilt(NamedTuple):
    """``build_sparse_replay``'s result: the replay, its leaf plan, its perturbations (``eps``) and,
    per connected source, the perturbations its gradient is made of (``by_src``: one for a dense
    gradient, one per gather for a sparse one, in tape order)."""
    fn: Callable[..., Any]
    plan: LeafPlan
    eps: tuple[EpsSlot, ...]
    by_src: tuple[tuple[int, ...], ...]


def build_replay(nodes: Sequence[Node], program: Program, resolve_impl: ImplResolver,
                 held: tuple[int, ...] = ()) -> Built:
    """A pure ``replay(eps, leaves) -> targets`` and the plan to gather leaves; with ``held``
    (codes of values the slice computes), ``replay(eps, leaves) -> (targets, their values)``.

    ``eps[e]`` is the zero perturbation of connected source ``e``, added where
    that source is produced (every read of a source Variable).  The plan's
    ``Leaf("node", slice_pos, input_pos)`` takes a recorded input value,
    ``Leaf("src", e, 0)`` the value of source ``e`` itself (for sources that
    are leaves of the slice).
    """
    built = build_sparse_replay(nodes, program, resolve_impl, None, held)
    return Built(built.fn, built.plan)


def build_sparse_replay(nodes: Sequence[Node], program: Program, resolve_impl: ImplResolver,
                        layout: "Layout | None", held: tuple[int, ...] = ()) -> ReplayBuilt:
    """``build_replay`` for a gradient whose ``layout`` (``autodiff.sparse``) makes some sources'
    gradients sparse: such a source gets no perturbation of its own; each of its gathers adds one
    to its output instead (``ReplayBuilt.eps``), so differentiating by them gives the
    ``IndexedSlices`` values and never the dense gradient.  ``layout`` None: every gradient dense
    (``eps[e]`` per source, as ``build_replay``)."""
    sparse = layout.sparse if layout is not None else (None,) * len(program.src_codes)
    eps_slots: list[EpsSlot] = []
    by_src: list[list[int]] = [[] for _ in program.src_codes]
    eps_of: dict[int, int] = {}
    for e, (c, (shape, _)) in enumerate(zip(program.src_codes, program.src_avals)):
        if sparse[e] is None:
            eps_of[c] = len(eps_slots)
            by_src[e].append(len(eps_slots))
            eps_slots.append(EpsSlot(e, -1, tuple(shape)))
    piece_src = {idx: e for e, sp in enumerate(sparse) if sp is not None for idx in sp.pieces}
    slot_of: dict[int, int] = {}
    plan: list[Leaf] = []
    init: list[SourceInit] = []
    steps: list[ReadStep | OpStep | GatherStep] = []
    slice_set = set(program.slice)

    def new_slot(code: int) -> int:
        slot_of[code] = len(slot_of)
        return slot_of[code]

    piece_slot: dict[int, int] = {}

    def piece_eps(idx: int, ind_leaf: int) -> int:
        e = piece_src.get(idx)
        if e is None:
            return -1
        piece_slot[idx] = len(eps_slots)
        eps_slots.append(EpsSlot(e, ind_leaf, tuple(program.src_avals[e][0][1:])))
        return len(eps_slots) - 1

    # A source's own value is a leaf only where something uses it: a slice node's input, or a
    # target.  A Variable's code is used by its reads alone, which take the values they read
    # and only its perturbation (one argument fewer per Variable for the compiled call).
    used = set(program.tgt_codes)
    for idx in program.slice:
        node = nodes[idx]
        if node.prim is not READ and node.prim is not RESOURCE_GATHER:
            used.update(node.refs)
    for e, c in enumerate(program.src_codes):
        produced_in_slice = c >= 0 and (c // OUT) in slice_set
        if not produced_in_slice and c in used:
            init.append(SourceInit(new_slot(c), len(plan), eps_of.get(c, -1)))
            plan.append(Leaf("src", e, 0))

    for pos, idx in enumerate(program.slice):
        node = nodes[idx]
        out = idx * OUT
        if node.prim is READ:
            steps.append(ReadStep(len(plan), new_slot(out), eps_of.get(node.refs[0], -1), eps_of.get(out, -1)))
            plan.append(Leaf("node", pos, 0))
            continue
        if node.prim is RESOURCE_GATHER:
            rows, ind = len(plan), len(plan) + 1
            plan.extend((Leaf("node", pos, 0), Leaf("node", pos, 1)))
            steps.append(GatherStep(rows, ind, new_slot(out), eps_of.get(node.refs[0], -1), piece_eps(idx, ind),
                                    eps_of.get(out, -1)))
            continue
        args = []
        for j, c in enumerate(node.refs):
            if c is not None and c in slot_of:
                args.append(Arg(True, slot_of[c]))
            else:
                args.append(Arg(False, len(plan)))
                plan.append(Leaf("node", pos, j))
        outs = tuple(new_slot(idx * OUT + k) for k in range(node.n_out))
        out_eps = tuple(eps_of.get(idx * OUT + k, -1) for k in range(node.n_out))
        pe = piece_eps(idx, args[1].index) if idx in piece_src else -1
        steps.append(OpStep(resolve_impl(node), dict(node.static), tuple(args), outs, out_eps,
                            node.prim.multiple_results, pe))

    tgt_slots = tuple(slot_of[c] for c in program.tgt_codes)
    held_slots = tuple(slot_of[c] for c in held)
    n_slots = len(slot_of)
    init_t = tuple(init)
    steps_t = tuple(steps)

    def replay(eps, leaves):
        env: list[Any] = [None] * n_slots
        for slot, leaf, e in init_t:
            env[slot] = leaves[leaf] if e < 0 else leaves[leaf] + eps[e]
        for step in steps_t:
            if isinstance(step, ReadStep):  # the value read + the Variable's eps
                v = leaves[step.leaf]
                if step.eps >= 0:
                    v = v + eps[step.eps]
                env[step.slot] = v if step.out_eps < 0 else v + eps[step.out_eps]
                continue
            if isinstance(step, GatherStep):   # the rows read + the Variable's eps at the indices
                v = leaves[step.rows]
                if step.var_eps >= 0:
                    v = v + jnp.take(eps[step.var_eps], leaves[step.ind], axis=0)
                for e in (step.piece_eps, step.out_eps):
                    if e >= 0:
                        v = v + eps[e]
                env[step.slot] = v
                continue
            vals = [env[a] if live else leaves[a] for live, a in step.args]
            res = step.impl(*vals, **step.static)
            if not step.multi:
                res = (res,)
            if step.piece_eps >= 0:
                res = (res[0] + eps[step.piece_eps],) + tuple(res[1:])
            for slot, r, e in zip(step.outs, res, step.out_eps):
                env[slot] = r if e < 0 else r + eps[e]
        if held_slots:
            return tuple(env[s] for s in tgt_slots), tuple(env[s] for s in held_slots)
        return tuple(env[s] for s in tgt_slots)

    for e, sp in enumerate(sparse):   # a sparse gradient's pieces, in TF's order (``autodiff.sparse``)
        if sp is not None:
            by_src[e] = [piece_slot[idx] for idx in sp.pieces]
    return ReplayBuilt(replay, tuple(plan), tuple(eps_slots), tuple(tuple(b) for b in by_src))


def _zero_cotangent(out):
    """The cotangent of an output nobody differentiates (float0 for integer outputs)."""
    if jnp.issubdtype(out.dtype, jnp.inexact):
        return jnp.zeros(out.shape, out.dtype)
    return np.zeros(out.shape, jax.dtypes.float0)


def seed(out, given):
    """The cotangent a target starts with: ones, or ``given`` (validated up front: it
    broadcasts to the target with size-1 extras only), in JAX's convention (a complex
    ``given`` conjugated, ``user_grad.conj_complex``)."""
    if given is None:
        return jnp.ones_like(out)
    ct = conj_complex(jnp.asarray(given, out.dtype))   # TF's convention to JAX's
    joint = np.broadcast_shapes(ct.shape, out.shape)
    return jnp.broadcast_to(ct, joint).reshape(out.shape)


# -- the first-order backward over the saved values ---------------------------------------------

class ReadBack(NamedTuple):
    """A Variable read, backward: the cotangent of its output (code ``out``) goes to the
    Variable's code ``to`` (None: not differentiated); ``leaf``: the read's value, needed only
    when the read itself is a target (its seed's shape), else -1."""
    leaf: int
    out: int
    to: int | None


class OpBack(NamedTuple):
    """An op, backward: ``jax.vjp`` of ``impl(*leaves[args], **static)`` in its differentiated
    inputs ``dj``; the cotangents of the outputs (codes ``outs``) are pulled back to the codes
    ``to`` (one per ``dj``)."""
    impl: Callable[..., Any]
    static: dict
    args: tuple[int, ...]
    dj: tuple[int, ...]
    outs: tuple[int, ...]
    to: tuple[int, ...]
    multi: bool   # the op returns a sequence of outputs


class GatherBack(NamedTuple):
    """A gather whose output's cotangent is a piece of a sparse gradient (``autodiff.sparse``), or a
    ``ResourceGather`` of a Variable with a dense gradient (``to``: the Variable's code, its
    cotangent scattered there; None: a piece).  ``ind``: the leaf of its indices; ``out``: its
    output's code; ``row``/``dtype``: its params' row shape and dtype (the seed's shape)."""
    ind: int
    out: int
    to: int | None
    shape: tuple[int, ...]
    dtype: Any


def build_backward(nodes: Sequence[Node], program: Program, resolve_impl: ImplResolver,
                   layout: "Layout | None" = None) -> Built:
    """A pure ``backward(leaves, cts) -> grads`` over the values the tape saved.

    Where ``build_replay`` recomputes the whole forward inside ``jax.vjp``,
    this walks the slice in reverse and pulls each node's cotangent back
    through ``jax.vjp`` of that node alone, at the input values recorded when
    the op ran eagerly.  Only what a node's own gradient needs is recomputed
    (XLA drops a matmul's forward product: its vjp does not read it), so a
    compute-bound step pays the forward once, not twice.  The leaves are the
    recorded inputs of the slice nodes, one per code (a recorded tensor used by
    several nodes is passed once).  Used when no other tape records the
    gradient call; a nested gradient replays (``build_replay``), so that the
    outer tape sees the gradient as a function of the true leaves.

    With a ``layout`` (``autodiff.sparse``) a sparse source's gradient is its gathers' output
    cotangents and indices, concatenated (two outputs); the reads and identities on the way are
    not walked, and the params value is no leaf.
    """
    src_index = {c: e for e, c in enumerate(program.src_codes)}
    slice_set = set(program.slice)
    sparse = layout.sparse if layout is not None else (None,) * len(program.src_codes)
    skipped: set[int] = set()    # outputs of reads/identities a sparse gradient passes through
    pieces_of: dict[int, int] = {}   # gather node -> the sparse source it is a piece of
    for e, sp in enumerate(sparse):
        if sp is not None:
            skipped |= sp.through
            for idx in sp.pieces:
                pieces_of[idx] = e

    def diff(c: int | None) -> bool:
        return c is not None and (c in src_index or (c >= 0 and c // OUT in slice_set))

    given_at: dict[int, list[int | None]] = {}   # target code -> [index into cts, or None: ones]
    n_given = 0
    for c, given in zip(program.tgt_codes, program.ct_given):
        given_at.setdefault(c, []).append(n_given if given else None)
        n_given += bool(given)

    plan: list[Leaf] = []
    leaf_of: dict[int, int] = {}
    steps: list[ReadBack | OpBack | GatherBack] = []
    aval_of = dict(zip(program.src_codes, program.src_avals))
    for pos, idx in enumerate(program.slice):
        node = nodes[idx]
        outs = tuple(idx * OUT + k for k in range(node.n_out))
        if outs[0] in skipped:
            continue   # a read or identity on a sparse gradient's way: nothing flows back through it
        if node.prim is RESOURCE_GATHER or idx in pieces_of:
            ind = len(plan)
            plan.append(Leaf("node", pos, 1))
            var = node.refs[0]
            if idx in pieces_of:
                e = pieces_of[idx]
                shape, dtype = program.src_avals[e]
                steps.append(GatherBack(ind, outs[0], None, tuple(shape), dtype))
            else:   # a ResourceGather of a Variable whose gradient is dense: scattered into it
                shape, dtype = aval_of[var]
                steps.append(GatherBack(ind, outs[0], var if diff(var) else None, tuple(shape), dtype))
            continue
        if node.prim is READ:
            # The read's value matters only when the read itself is a target (its seed's shape).
            leaf = -1
            if outs[0] in given_at:
                leaf = len(plan)
                plan.append(Leaf("node", pos, 0))
            var = node.refs[0]
            steps.append(ReadBack(leaf, outs[0], var if diff(var) else None))
            continue
        args = []
        for j, c in enumerate(node.refs):
            if c is None or c not in leaf_of:
                if c is not None:
                    leaf_of[c] = len(plan)
                args.append(len(plan))
                plan.append(Leaf("node", pos, j))
            else:
                args.append(leaf_of[c])
        dj = tuple(j for j, c in enumerate(node.refs) if diff(c))
        to = tuple(node.refs[j] for j in dj)
        steps.append(OpBack(resolve_impl(node), dict(node.static), tuple(args), dj, outs, to,
                            node.prim.multiple_results))
    steps_t = tuple(reversed(steps))
    src_codes = program.src_codes
    src_avals = program.src_avals
    piece_steps = {e: [idx * OUT for idx in sp.pieces] for e, sp in enumerate(sparse) if sp is not None}

    def backward(leaves, cts):
        ct = {}
        grads = {}
        pieces = {}

        def add(c, g):
            prev = ct.get(c)
            ct[c] = g if prev is None else prev + g

        def seed_outputs(outs, values):
            for o, v in zip(outs, values):
                for i in given_at.get(o, ()):
                    add(o, seed(v, None if i is None else cts[i]))

        for step in steps_t:
            if isinstance(step, GatherBack):   # a gather's output cotangent: a piece, or scattered
                out, ind = step.out, leaves[step.ind]
                oshape = tuple(ind.shape) + step.shape[1:]
                seed_outputs((out,), (jnp.zeros(oshape, step.dtype),))
                g = ct.pop(out, None)
                if g is not None and out in src_index:
                    grads[out] = g
                if step.to is None:
                    pieces[out] = (jnp.zeros(oshape, step.dtype) if g is None else g, ind)
                elif g is not None:
                    add(step.to, jnp.zeros(step.shape, g.dtype).at[ind].add(g, mode="drop"))
                continue
            if isinstance(step, ReadBack):  # its cotangent goes to the Variable
                out = step.out
                if step.leaf >= 0:
                    seed_outputs((out,), (leaves[step.leaf],))
                g = ct.pop(out, None)
                if g is None:
                    continue
                if out in src_index:
                    grads[out] = g
                if step.to is not None:
                    add(step.to, g)
                continue
            impl, static, dj, multi = step.impl, step.static, step.dj, step.multi
            vals = [leaves[a] for a in step.args]

            def f(*dvals, vals=vals, impl=impl, static=static, dj=dj):
                full = list(vals)
                for j, v in zip(dj, dvals):
                    full[j] = v
                return impl(*full, **static)

            out, pull = jax.vjp(f, *[vals[j] for j in dj])
            outl = out if multi else (out,)
            seed_outputs(step.outs, outl)
            got = [ct.pop(o, None) for o in step.outs]
            if all(g is None for g in got):
                continue
            for o, g in zip(step.outs, got):
                if g is not None and o in src_index:
                    grads[o] = g
            got = [_zero_cotangent(v) if g is None else g for g, v in zip(got, outl)]
            in_cts = pull(tuple(got) if multi else got[0])
            for c, g in zip(step.to, in_cts):
                add(c, g)
        # Sources no slice node produces (watched tensors, Variables, sources that are
        # also targets): their accumulated cotangent, plus their own seed when a target.
        res = []
        for e, (c, (shape, dtype)) in enumerate(zip(src_codes, src_avals)):
            if sparse[e] is not None:
                res.extend(concat_pieces([pieces[out] for out in piece_steps[e]], tuple(shape[1:]), dtype))
                continue
            g = grads.get(c)
            if g is None:
                g = ct.get(c)
                if not (c >= 0 and c // OUT in slice_set):
                    for i in given_at.get(c, ()):
                        s = seed(jnp.zeros(shape, dtype), None if i is None else cts[i])
                        g = s if g is None else g + s
            res.append(jnp.zeros(shape, dtype) if g is None else conj_complex(g.astype(dtype)))
        return tuple(res)

    return Built(backward, tuple(plan))


def gather_leaves(nodes: Sequence[Node], program: Program, plan: Sequence[tuple[str, int, int]],
                  src_values: Sequence[Any], force: bool = True) -> tuple:
    """The compiled function's arguments (``plan``: ``Leaf`` records, or the same as plain tuples);
    a pending value (a thunk, see ``runtime.deferred``) is computed (``force``) or left as it is."""
    sl = program.slice
    leaves = [nodes[sl[a]].vals[b] if kind == "node" else src_values[a] for kind, a, b in plan]
    if not force:
        return tuple(leaves)
    for v in leaves:
        if type(v) is Thunk:
            return tuple(force_all(leaves))
    return tuple(leaves)
