"""Slice a tape for one gradient call and name its structure with a hashable key.

Given the codes of the sources and of the targets (see ``_tape``):

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
gradient is taken (custom gradients, see ``_replay.resolve_late``).

Two pure functions are built from a Program (``_replay`` jits them):
``build_backward`` (first order: reverse walk, each node's vjp at its saved
input values) and ``build_replay`` (the forward again from the true leaves,
for ``jax.vjp``/``jax.jvp`` when the result must be differentiable in them:
nested tapes, jacobians, forward accumulators; and when the forward was
deferred, see ``_lazy``, so there are no saved values to reuse).  Gathering
the leaves computes any pending value (a thunk) among them.
"""
import jax
import jax.numpy as jnp
import numpy as np

from ._lazy import _Thunk, force_all
from ._primitives import READ
from ._tape import OUT


class Program:
    """The structure of one gradient computation: cache key and leaf plan."""

    __slots__ = ("key", "slice", "src_codes", "src_avals", "tgt_codes", "ct_given", "_hash", "backward_key",
                 "fused_key", "late")

    def __init__(self, nodes, slice_idx, src_codes, src_avals, tgt_codes, ct_given):
        self.slice = slice_idx
        self.src_codes = src_codes
        self.src_avals = src_avals
        self.tgt_codes = tgt_codes
        self.ct_given = ct_given
        self.key = (tuple([nodes[i].sig for i in slice_idx]), slice_idx, src_codes, src_avals,
                    tgt_codes, ct_given)
        self._hash = hash(self.key)
        self.backward_key = ("backward", self)  # the saved-values gradient of this structure
        self.fused_key = ("fused", self)        # forward and gradient in one (pending targets)
        # Slice nodes whose op traces part of itself when the gradient is taken (custom
        # gradients: ``_replay.resolve_late``), by node index.
        self.late = tuple([i for i in slice_idx if getattr(nodes[i].prim, "late", None) is not None])

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Program) and self._hash == other._hash and self.key == other.key

    def __repr__(self):
        return (f"Program(nodes={len(self.slice)}, sources={len(self.src_codes)}, "
                f"targets={len(self.tgt_codes)}, src_avals={self.src_avals})")


def slice_tape(nodes, src_codes, tgt_codes):
    """(slice node indices, needed codes) for these sources and targets."""
    live = set(src_codes)
    live_nodes = []
    for idx, node in enumerate(nodes):
        for c in node.refs:
            if c in live:
                live_nodes.append(idx)
                base = idx * OUT
                for k in range(node.n_out):
                    live.add(base + k)
                break
    needed = {c for c in tgt_codes if c in live}
    picked = []
    for idx in reversed(live_nodes):
        node = nodes[idx]
        base = idx * OUT
        for k in range(node.n_out):
            if base + k in needed:
                picked.append(idx)
                for c in node.refs:
                    if c in live:
                        needed.add(c)
                break
    picked.reverse()
    return tuple(picked), needed


def aval(value):
    return (value.shape, value.dtype)


def build_replay(nodes, program, resolve_impl):
    """A pure ``replay(eps, leaves) -> targets`` and the plan to gather leaves.

    ``eps[e]`` is the zero perturbation of connected source ``e``, added where
    that source is produced (every read of a source Variable).  The plan is a
    list of ``(kind, a, b)``: ``('node', slice_pos, input_pos)`` takes a
    recorded input value; ``('src', e, 0)`` the value of source ``e`` itself
    (for sources that are leaves of the slice).
    """
    eps_of = {c: e for e, c in enumerate(program.src_codes)}
    slot_of = {}
    plan = []
    init = []     # (slot, leaf, eps)
    steps = []
    slice_set = set(program.slice)

    def new_slot(code):
        slot_of[code] = len(slot_of)
        return slot_of[code]

    # A source's own value is a leaf only where something uses it: a slice node's input, or a
    # target.  A Variable's code is used by its reads alone, which take the values they read
    # and only its perturbation (one argument fewer per Variable for the compiled call).
    used = set(program.tgt_codes)
    for idx in program.slice:
        node = nodes[idx]
        if node.prim is not READ:
            used.update(node.refs)
    for e, c in enumerate(program.src_codes):
        produced_in_slice = c >= 0 and (c // OUT) in slice_set
        if not produced_in_slice and c in used:
            init.append((new_slot(c), len(plan), e))
            plan.append(("src", e, 0))

    for pos, idx in enumerate(program.slice):
        node = nodes[idx]
        if node.prim is READ:
            out = idx * OUT
            e = eps_of[node.refs[0]]
            e_out = eps_of.get(out, -1)
            steps.append((None, None, ((False, len(plan)),), (new_slot(out),), (e,), e_out))
            plan.append(("node", pos, 0))
            continue
        args = []
        for j, c in enumerate(node.refs):
            if c is not None and c in slot_of:
                args.append((True, slot_of[c]))
            else:
                args.append((False, len(plan)))
                plan.append(("node", pos, j))
        outs = tuple(new_slot(idx * OUT + k) for k in range(node.n_out))
        out_eps = tuple(eps_of.get(idx * OUT + k, -1) for k in range(node.n_out))
        impl = resolve_impl(node)
        steps.append((impl, dict(node.static), tuple(args), outs, out_eps, node.prim.multiple_results))

    tgt_slots = tuple(slot_of[c] for c in program.tgt_codes)
    n_slots = len(slot_of)
    init = tuple(init)
    steps = tuple(steps)

    def replay(eps, leaves):
        env = [None] * n_slots
        for slot, leaf, e in init:
            env[slot] = leaves[leaf] + eps[e]
        for step in steps:
            impl = step[0]
            if impl is None:  # a Variable read: the value read + the Variable's eps
                _, _, ((_, leaf),), (slot,), (e,), e_out = step
                v = leaves[leaf] + eps[e]
                env[slot] = v if e_out < 0 else v + eps[e_out]
                continue
            _, static, args, outs, out_eps, multi = step
            vals = [env[a] if live else leaves[a] for live, a in args]
            res = impl(*vals, **static)
            if not multi:
                res = (res,)
            for slot, r, e in zip(outs, res, out_eps):
                env[slot] = r if e < 0 else r + eps[e]
        return tuple(env[s] for s in tgt_slots)

    return replay, tuple(plan)


def _zero_cotangent(out):
    """The cotangent of an output nobody differentiates (float0 for integer outputs)."""
    if jnp.issubdtype(out.dtype, jnp.inexact):
        return jnp.zeros(out.shape, out.dtype)
    return np.zeros(out.shape, jax.dtypes.float0)


def seed(out, given):
    """The cotangent a target starts with: ones, or ``given`` (validated up front: it
    broadcasts to the target with size-1 extras only)."""
    if given is None:
        return jnp.ones_like(out)
    ct = jnp.asarray(given, out.dtype)
    joint = np.broadcast_shapes(ct.shape, out.shape)
    return jnp.broadcast_to(ct, joint).reshape(out.shape)


def build_backward(nodes, program, resolve_impl):
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
    """
    src_index = {c: e for e, c in enumerate(program.src_codes)}
    slice_set = set(program.slice)

    def diff(c):
        return c is not None and (c in src_index or (c >= 0 and c // OUT in slice_set))

    given_at = {}   # target code -> [index into cts, or None for a seed of ones]
    n_given = 0
    for c, given in zip(program.tgt_codes, program.ct_given):
        given_at.setdefault(c, []).append(n_given if given else None)
        n_given += bool(given)

    plan = []
    leaf_of = {}
    steps = []
    for pos, idx in enumerate(program.slice):
        node = nodes[idx]
        outs = tuple(idx * OUT + k for k in range(node.n_out))
        if node.prim is READ:
            # The read's value matters only when the read itself is a target (its seed's shape).
            leaf = -1
            if outs[0] in given_at:
                leaf = len(plan)
                plan.append(("node", pos, 0))
            to = node.refs[0] if diff(node.refs[0]) else None
            steps.append((None, None, (leaf,), (), outs, to, False))
            continue
        args = []
        for j, c in enumerate(node.refs):
            if c is None or c not in leaf_of:
                if c is not None:
                    leaf_of[c] = len(plan)
                args.append(len(plan))
                plan.append(("node", pos, j))
            else:
                args.append(leaf_of[c])
        dj = tuple(j for j, c in enumerate(node.refs) if diff(c))
        to = tuple(node.refs[j] for j in dj)
        steps.append((resolve_impl(node), dict(node.static), tuple(args), dj, outs, to,
                      node.prim.multiple_results))
    steps = tuple(reversed(steps))
    src_codes = program.src_codes
    src_avals = program.src_avals

    def backward(leaves, cts):
        ct = {}
        grads = {}

        def add(c, g):
            prev = ct.get(c)
            ct[c] = g if prev is None else prev + g

        def seed_outputs(outs, values):
            for o, v in zip(outs, values):
                for i in given_at.get(o, ()):
                    add(o, seed(v, None if i is None else cts[i]))

        for impl, static, args, dj, outs, to, multi in steps:
            if impl is None:  # a Variable read: its cotangent goes to the Variable
                if args[0] >= 0:
                    seed_outputs(outs, (leaves[args[0]],))
                g = ct.pop(outs[0], None)
                if g is None:
                    continue
                if outs[0] in src_index:
                    grads[outs[0]] = g
                if to is not None:
                    add(to, g)
                continue
            vals = [leaves[a] for a in args]

            def f(*dvals, vals=vals, impl=impl, static=static, dj=dj):
                full = list(vals)
                for j, v in zip(dj, dvals):
                    full[j] = v
                return impl(*full, **static)

            out, pull = jax.vjp(f, *[vals[j] for j in dj])
            outl = out if multi else (out,)
            seed_outputs(outs, outl)
            got = [ct.pop(o, None) for o in outs]
            if all(g is None for g in got):
                continue
            for o, g in zip(outs, got):
                if g is not None and o in src_index:
                    grads[o] = g
            got = [_zero_cotangent(v) if g is None else g for g, v in zip(got, outl)]
            in_cts = pull(tuple(got) if multi else got[0])
            for c, g in zip(to, in_cts):
                add(c, g)
        # Sources no slice node produces (watched tensors, Variables, sources that are
        # also targets): their accumulated cotangent, plus their own seed when a target.
        out = []
        for c, (shape, dtype) in zip(src_codes, src_avals):
            g = grads.get(c)
            if g is None:
                g = ct.get(c)
                if not (c >= 0 and c // OUT in slice_set):
                    for i in given_at.get(c, ()):
                        s = seed(jnp.zeros(shape, dtype), None if i is None else cts[i])
                        g = s if g is None else g + s
            out.append(jnp.zeros(shape, dtype) if g is None else g.astype(dtype))
        return tuple(out)

    return backward, tuple(plan)


def gather_leaves(nodes, program, plan, src_values, force=True):
    """The compiled function's arguments; a pending value (a thunk, see ``_lazy``) is computed
    (``force``) or left as it is."""
    sl = program.slice
    leaves = [nodes[sl[a]].vals[b] if kind == "node" else src_values[a] for kind, a, b in plan]
    if not force:
        return tuple(leaves)
    for v in leaves:
        if type(v) is _Thunk:
            return tuple(force_all(leaves))
    return tuple(leaves)
