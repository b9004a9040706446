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
(hashable, readable ``repr``) and also knows how to gather the leaves.
"""
import numpy as np

from ._primitives import READ
from ._tape import OUT


class Program:
    """The structure of one gradient computation: cache key and leaf plan."""

    __slots__ = ("key", "slice", "src_codes", "src_avals", "tgt_codes", "ct_given", "_hash")

    def __init__(self, nodes, slice_idx, src_codes, src_avals, tgt_codes, ct_given):
        self.slice = slice_idx
        self.src_codes = src_codes
        self.src_avals = src_avals
        self.tgt_codes = tgt_codes
        self.ct_given = ct_given
        self.key = (tuple([nodes[i].sig for i in slice_idx]), slice_idx, src_codes, src_avals,
                    tgt_codes, ct_given)
        self._hash = hash(self.key)

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

    for e, c in enumerate(program.src_codes):
        produced_in_slice = c >= 0 and (c // OUT) in slice_set
        if not produced_in_slice:
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


def gather_leaves(nodes, program, plan, src_values):
    sl = program.slice
    return tuple([nodes[sl[a]].vals[b] if kind == "node" else src_values[a] for kind, a, b in plan])
