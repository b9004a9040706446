"""Embedding tables in a Keras call: TF's ``IndexedSlices`` gradient for a table read by row gathers.

TF's gradient of a Keras ``Embedding``'s table is ``IndexedSlices`` of the looked-up rows (its
``ResourceGather``), and tf_keras' legacy optimizers then update only those rows.  A Keras call
is one op over its variables (``calls``), whose ``jax.vjp`` gives every variable a dense
gradient; so when the call's trace (with ``ops.tf_rules``' conventions, ``jit`` bodies inlined)
shows a trainable variable that reaches the results only through row gathers
(``ops.take(table, ids, axis=0)``) with ids computed from the arguments alone, the call runs as
a ``SparsePlan``: an op computing the ids (no tape records integers), one ``tf.gather`` per
gather on the table's Variable (the tape's sparse rule, ``autodiff.sparse``), then the rest of
the traced jaxpr with the gathered rows as inputs, as ``Piece`` ops grouped by dependencies
(``grouping``).  A table also used another way (tied input and output embeddings) keeps the
dense gradient, as TF's sum with a dense gradient does; a gather inside a loop or branch body
is not seen (dense too).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import numpy as np
from jax import lax
from jax.extend import core as jex
from jax.extend.core import Literal

from ..core import state as _state
from ..core.bind import bind, define
from ..ops.indexing import gather
from ..ops.tf_rules import with_tf_rules
from .grouping import dependencies, group_results
from .keys import CallInfo, CallKey

__all__ = ["KERAS_PIECE", "KERAS_PIECE_N", "Piece", "PieceGroup", "SparsePlan", "bind_sparse", "gathers_a_variable",
           "sparse_plan"]


class Piece:
    """A part of a traced call as a pure function (the static parameter of a ``KerasCallPiece``
    op, compared by identity: one per plan)."""

    __slots__ = ("fn", "label")

    def __init__(self, closed: Any, label: str, last_axis_dropped: bool = False) -> None:
        fn = jex.jaxpr_as_fun(closed)
        # (the gathers' indices end in an axis of 1: dropped inside the op, not by one more dispatch)
        self.fn = (lambda *a: [i[..., 0] for i in fn(*a)]) if last_axis_dropped else fn
        self.label = label

    def __repr__(self) -> str:
        return f"<{self.label}>"


class PieceGroup(NamedTuple):
    """``Group`` for a sparse plan: a piece over some of the operands and gathered rows."""

    piece: Piece
    keep: tuple                  # positions in (operands..., rows...)
    outputs: tuple
    one: bool
    taped: bool


class SparsePlan(NamedTuple):
    """A call whose embedding tables reach its results only through row gathers (``ops.take``
    on axis 0), run as TF runs it: the gathers' indices (an op over the arguments, no tape
    records), one ``tf.gather`` per gather on the table's Variable (so its gradient is
    ``IndexedSlices`` of the looked-up rows, TF's ``ResourceGather``), then the rest of the call
    with the rows as inputs (``groups``, grouped by dependencies as ``calls._plan`` does)."""

    index_piece: Piece
    index_keep: tuple            # operand positions the indices depend on
    gathers: tuple               # per gather: the table's operand position
    groups: tuple                # PieceGroup


KERAS_PIECE = define("KerasCallPiece", lambda *dyn, piece: piece.fn(*dyn)[0])
KERAS_PIECE_N = define("KerasCallPieceN", lambda *dyn, piece: tuple(piece.fn(*dyn)), multiple_results=True)


def gathers_a_variable(jaxpr, n_var: int, invars=None) -> bool:
    """Whether some ``gather`` (in ``jit`` bodies too) takes a variable operand as it is: the
    cheap test before ``sparse_plan`` traces the call again."""
    own = set(jaxpr.invars[:n_var]) if invars is None else invars
    for e in jaxpr.eqns:
        if e.primitive is lax.gather_p and not isinstance(e.invars[0], Literal) and e.invars[0] in own:
            return True
        if e.primitive.name in ("jit", "pjit"):
            inner = e.params["jaxpr"].jaxpr
            mapped = {iv for iv, ov in zip(inner.invars, e.invars) if not isinstance(ov, Literal) and ov in own}
            if mapped and gathers_a_variable(inner, n_var, mapped):
                return True
    return False


def _row_gather(eqn, table) -> bool:
    """``ops.take(table, ids, axis=0)``'s gather: whole rows of ``table`` at integer ids, the rows'
    axes last (what TF's ``ResourceGather`` computes)."""
    if eqn.primitive is not lax.gather_p:
        return False
    dn = eqn.params["dimension_numbers"]
    idx = eqn.invars[1].aval
    r = idx.ndim
    return (table.ndim >= 1 and r >= 1 and idx.shape[-1] == 1 and np.dtype(idx.dtype).kind in "iu"
            and tuple(dn.collapsed_slice_dims) == (0,) and tuple(dn.start_index_map) == (0,)
            and tuple(getattr(dn, "operand_batching_dims", ())) == ()
            and tuple(getattr(dn, "start_indices_batching_dims", ())) == ()
            and tuple(dn.offset_dims) == tuple(range(r - 1, r - 1 + table.ndim - 1))
            and tuple(eqn.params["slice_sizes"]) == (1,) + tuple(table.shape[1:]))


def _pruned(jaxpr, invars: list, outvars: list):
    """``jaxpr`` with these inputs and outputs and only the equations the outputs need."""
    need = {v for v in outvars if not isinstance(v, Literal)}
    kept = []
    for e in reversed(jaxpr.eqns):
        if any(o in need for o in e.outvars):
            kept.append(e)
            need.update(v for v in e.invars if not isinstance(v, Literal))
    kept.reverse()
    d = jaxpr.debug_info
    return jaxpr.replace(invars=list(invars), outvars=list(outvars), eqns=kept,
                         effects=frozenset().union(*[e.effects for e in kept]),
                         debug_info=d._replace(arg_names=("",) * len(invars), result_paths=("",) * len(outvars)))


def sparse_plan(key: CallKey, fn, specs, info: CallInfo, n_var: int) -> "Optional[SparsePlan]":
    """The call as ``SparsePlan`` when some trainable variable is read by row gathers only, with
    indices that depend on the arguments alone; None otherwise (the call is one op, and the
    table's gradient dense)."""
    n_train = len(key.state(key.target.get()).trainable) if key.state is not None else 0
    closed = jax.make_jaxpr(with_tf_rules(fn))(*specs)   # (jit bodies inlined: the gathers in sight)
    jaxpr = closed.jaxpr
    if jaxpr.effects:   # (a print or callback inside: it would run once per piece; one op keeps it once)
        return None
    free: set = set(jaxpr.constvars) | set(jaxpr.invars[n_var:])   # values that read no variable
    uses: dict = {}
    for i, e in enumerate(jaxpr.eqns):
        if all(isinstance(v, Literal) or v in free for v in e.invars):
            free.update(e.outvars)
        for p, v in enumerate(e.invars):
            if not isinstance(v, Literal):
                uses.setdefault(v, []).append((i, p))
    results = {v for v in jaxpr.outvars if not isinstance(v, Literal)}
    cut: dict = {}   # gather equation -> the table's operand position
    for k in range(n_train):
        v = jaxpr.invars[k]
        us = uses.get(v, ())
        if us and v not in results and all(p == 0 and _row_gather(jaxpr.eqns[i], v.aval)
                                           and jaxpr.eqns[i].invars[1] in free for i, p in us):
            cut.update((i, k) for i, _ in us)
    if not cut:
        return None
    order = sorted(cut)
    rows = [jaxpr.eqns[i].outvars[0] for i in order]
    indices = [jaxpr.eqns[i].invars[1] for i in order]
    rest = jaxpr.replace(invars=list(jaxpr.invars) + rows,
                         eqns=[e for i, e in enumerate(jaxpr.eqns) if i not in cut])
    label = key.target.label
    index_jaxpr = _pruned(jaxpr, list(jaxpr.invars), indices)
    index_keep = tuple(sorted(frozenset().union(*dependencies(index_jaxpr))))
    index_piece = Piece(jex.ClosedJaxpr(_pruned(index_jaxpr, [jaxpr.invars[i] for i in index_keep], indices),
                                        closed.consts), f"{label}: gather indices", last_axis_dropped=True)
    groups = []
    for dep, js, taped, _ in group_results(rest, info):   # (no cut: ``calls._plan`` asks for none)
        keep = tuple(sorted(dep))
        sub = _pruned(rest, [rest.invars[i] for i in keep], [rest.outvars[j] for j in js])
        groups.append(PieceGroup(Piece(jex.ClosedJaxpr(sub, closed.consts), label), keep, js, len(js) == 1, taped))
    return SparsePlan(index_piece, index_keep, tuple(cut[i] for i in order), tuple(groups))


def bind_sparse(sp: SparsePlan, operands, n_results: int) -> list:
    """``calls._bind`` for a ``SparsePlan``: the indices, the gathers, then the rest of the call."""
    with _state.swap(tapes=()):   # (integers: no tape records them)
        idx = bind(KERAS_PIECE_N, *[operands[i] for i in sp.index_keep], piece=sp.index_piece)
    rows = [gather(operands[k], i) for k, i in zip(sp.gathers, idx)]
    given = list(operands) + rows
    flat: list = [None] * n_results
    for g in sp.groups:
        ops = [given[i] for i in g.keep]
        if g.taped:
            res = (bind(KERAS_PIECE, *ops, piece=g.piece),) if g.one else bind(KERAS_PIECE_N, *ops, piece=g.piece)
        else:
            with _state.swap(tapes=()):
                res = bind(KERAS_PIECE_N, *ops, piece=g.piece)
        for j, r in zip(g.outputs, res):
            flat[j] = r
    return flat
