"""Which gradients are ``IndexedSlices``: TF's rule, decided on a Program's structure.

TF's gradient of a gather (``GatherV2`` on axis 0 without batch dimensions, ``ResourceGather``:
``tf.gather`` / ``embedding_lookup`` on a Variable) with respect to its params is
``IndexedSlices(values=the cotangent of the gather's output, indices=the gather's indices,
dense_shape=the params' shape)``.  It flows unchanged through a Variable read and ``Identity``,
gradients of several gathers are concatenated (values and indices, in the order TF's tape runs
their backward functions: ``tf_backward_order``), and it is
densified as soon as it meets a dense contribution (another use of the params, the params being
a target, a sum with a dense gradient).  So a source's gradient is sparse exactly when every
path from it in the slice is ``source -> (read | identity)* -> gather params``, with at least one
gather, no step of it a target or another source, and the gathers' indices constants of the
slice (``sparse_layout``).

That is decided once per Program (cached with it) and the compiled gradient then produces the
pieces without ever making the dense gradient: the backward over saved values takes each
gather's output cotangent as it is (``program.build_backward``), and the replay differentiates
with respect to a perturbation of each gather's output instead of the params' one
(``program.build_replay``).  The compiled call returns, for a sparse source, two arrays (values
``[n, *row]`` and indices ``[n]``) where a dense source has one: ``Layout`` says where each
source's outputs are, and ``gradient`` wraps them as ``IndexedSlices``.

A ``ResourceGather`` node (``ops.indexing``: an eager gather on a Variable, which reads only the
rows, so the Variable keeps its buffer for an optimizer to update in place) is a gather whose
params are the Variable itself: its piece is its output's cotangent, and where the Variable's
gradient is dense its rows are scattered into it.
"""
from typing import Any, NamedTuple, Optional, Sequence

import jax.numpy as jnp

from ..core.bind import READ
from ..ops.indexing import GATHER, RESOURCE_GATHER
from .nodes import OUT, Node
from .user_grad import conj_complex

_PASS_THROUGH = frozenset(["Identity"])


class SparseSource(NamedTuple):
    """A source whose gradient is ``IndexedSlices``: the gather nodes whose output cotangents are
    its pieces (node indices, in the order TF concatenates them: ``tf_backward_order``), the codes its gradient passes through on the way
    (reads, identities: nothing flows back to them), and its dense shape."""
    pieces: tuple[int, ...]
    through: frozenset[int]
    dense_shape: tuple[int, ...]


class Layout(NamedTuple):
    """Where a compiled gradient's outputs are: per connected source, None (one dense output)
    or its ``SparseSource`` (two outputs: values, indices); ``starts[j]`` the position of source
    ``j``'s first output; ``n_out`` how many outputs there are."""
    sparse: tuple[Optional[SparseSource], ...]
    starts: tuple[int, ...]
    n_out: int


def is_sparse_gather(node: Node) -> bool:
    """A gather whose params gradient TF gives as ``IndexedSlices`` (axis 0, no batch dims)."""
    if node.prim is RESOURCE_GATHER:
        return True
    if node.prim is not GATHER:
        return False
    static = dict(node.static)
    return static.get("axis", 0) == 0 and static.get("batch_dims", 0) == 0


def dense_layout(n: int) -> Layout:
    return Layout((None,) * n, tuple(range(n)), n)


def sparse_layout(nodes: Sequence[Node], slice_idx: Sequence[int], src_codes: Sequence[int],
                  src_avals: Sequence[tuple], tgt_codes: Sequence[int]) -> Layout:
    """The ``Layout`` of a gradient over this slice (see the module docstring)."""
    slice_set = set(slice_idx)
    uses: dict[int, list[tuple[int, int]]] = {}
    for idx in slice_idx:
        for j, c in enumerate(nodes[idx].refs):
            if c is not None:
                uses.setdefault(c, []).append((idx, j))
    targets = set(tgt_codes)
    sources = set(src_codes)

    def produced(c: Optional[int]) -> bool:
        return c is not None and c >= 0 and c // OUT in slice_set

    def walk(c: int, pieces: list[int], through: set[int]) -> bool:
        """Every use of code ``c`` leads to a gather's params only."""
        for idx, j in uses.get(c, ()):
            node = nodes[idx]
            if node.prim is READ or node.prim.name in _PASS_THROUGH:
                out = idx * OUT
                if out in targets or out in sources:
                    return False
                through.add(out)
                if not walk(out, pieces, through):
                    return False
            elif j == 0 and is_sparse_gather(node):
                ind = node.refs[1] if len(node.refs) > 1 else None
                if produced(ind) or ind in sources:
                    return False
                pieces.append(idx)
            else:
                return False
        return True

    sparse: list[Optional[SparseSource]] = []
    order: Optional[dict[int, int]] = None
    for c, (shape, _dtype) in zip(src_codes, src_avals):
        found: Optional[SparseSource] = None
        if c not in targets and not produced(c) and len(shape) >= 1:
            pieces: list[int] = []
            through: set[int] = set()
            if walk(c, pieces, through) and pieces:
                if len(pieces) > 1:
                    if order is None:
                        order = tf_backward_order(nodes, tgt_codes)
                    rank = order
                    pieces.sort(key=lambda idx: rank.get(idx, idx))
                found = SparseSource(tuple(pieces), frozenset(through), tuple(shape))
        sparse.append(found)
    starts = []
    n = 0
    for s in sparse:
        starts.append(n)
        n += 1 if s is None else 2
    return Layout(tuple(sparse), tuple(starts), n)


def tf_backward_order(nodes: Sequence[Node], tgt_codes: Sequence[int]) -> dict[int, int]:
    """node index -> its rank in the order TF's eager tape runs the backward functions
    (``tensorflow/c/eager/tape.h``, ``ComputeGradient``), which is the order the pieces of a sparse
    gradient are concatenated in: from the targets, every op reachable backward; an op runs once
    every use of each of its outputs has run, and a newly ready op goes to the front of the queue
    that ops are taken from the back of (so, breadth first)."""
    usage: dict[int, int] = {}
    ops: list[int] = []
    seen: set[int] = set()
    stack = [c for c in tgt_codes if c is not None]
    while stack:
        c = stack.pop()
        if c < 0:
            continue
        op = c // OUT
        if op in seen or op >= len(nodes):
            continue
        seen.add(op)
        ops.append(op)
        for r in nodes[op].refs:
            if r is None:
                continue
            if r in usage:
                usage[r] += 1
            else:
                usage[r] = 1
                if r >= 0:
                    stack.append(r)
    missing: dict[int, int] = {}
    for r in usage:
        if r >= 0 and r // OUT in seen:
            missing[r // OUT] = missing.get(r // OUT, 0) + 1
    queue = sorted(op for op in ops if op not in missing)
    rank: dict[int, int] = {}
    while queue:
        op = queue.pop()
        rank[op] = len(rank)
        for r in nodes[op].refs:
            if r is None or r not in usage:
                continue
            usage[r] -= 1
            if usage[r] > 0 or r < 0:
                continue
            p = r // OUT
            if p in missing:
                missing[p] -= 1
                if missing[p] == 0:
                    queue.insert(0, p)
    return rank


def sparse_grads(built: Any, layout: "Layout | None", src_avals: Sequence[tuple], leaves: Sequence[Any],
                 grads: Sequence[Any]) -> tuple:
    """The flat gradient outputs (``layout``'s order) from the gradients by each perturbation
    ``grads`` (``ReplayBuilt.eps``'s order): a dense gradient cast to its source's dtype, or a
    sparse one's values and indices, each gather's rows concatenated in tape order."""
    out = []
    for e, (slots, (_, dtype)) in enumerate(zip(built.by_src, src_avals)):
        if layout is None or layout.sparse[e] is None:
            out.append(conj_complex(grads[slots[0]].astype(dtype)))
            continue
        out.extend(concat_pieces([(grads[k], leaves[built.eps[k].ind]) for k in slots], built.eps[slots[0]].row,
                                  dtype))
    return tuple(out)


def concat_pieces(pieces: Sequence[tuple[Any, Any]], row: tuple, dtype: Any) -> tuple[Any, Any]:
    """(values, indices) of a sparse gradient from its pieces (a gather output's cotangent and
    indices each)."""
    vals = [conj_complex(g.reshape((-1,) + tuple(row)).astype(dtype)) for g, _ in pieces]   # TF's convention
    inds = [jnp.reshape(i, (-1,)) for _, i in pieces]
    if len(pieces) == 1:
        return vals[0], inds[0]
    return jnp.concatenate(vals, axis=0), jnp.concatenate(inds, axis=0)


__all__ = ["Layout", "concat_pieces", "sparse_grads", "SparseSource", "dense_layout", "is_sparse_gather", "sparse_layout"]
