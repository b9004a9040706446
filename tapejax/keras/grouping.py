"""Which results of a traced Keras call depend on which operands (``calls``' plan).

A Keras call is traced once per key (``calls._plan``); its jaxpr says, for each result, the
operands it is computed from (``dependencies``).  Results that depend on the same operands
are one op (``group_results``), so a variable a result does not read gets TF's ``None``
gradient for it; an output the call also returns and other results are computed from (Grad-CAM's
``Model(inputs, [conv.output, preds])``, ``inner_outputs``) is cut: the ops computed from it
take it as an operand, and run after the op that gives it (``in_order``).
"""
from __future__ import annotations

from typing import Optional

from jax.extend.core import Literal

from .keys import CallInfo

__all__ = ["dependencies", "group_results", "in_order", "inner_outputs"]


def dependencies(jaxpr, cuts: Optional[dict] = None) -> list:
    """For each output of ``jaxpr``, the positions of the inputs it depends on (a backward pass over
    the equations; an equation depends on all its inputs).  With ``cuts`` (variable -> position
    of an output the call also returns), each output's pair (its inputs, the positions of the
    other outputs it is computed from): the pass stops at those outputs' variables."""
    position = {v: i for i, v in enumerate(jaxpr.invars)}
    out: list = []
    for o in jaxpr.outvars:
        if isinstance(o, Literal):
            out.append(frozenset() if cuts is None else (frozenset(), frozenset()))
            continue
        stop = {} if cuts is None else {v: i for v, i in cuts.items() if v is not o}
        live = {o}
        for eqn in reversed(jaxpr.eqns):
            if any(v in live and v not in stop for v in eqn.outvars):
                live.update(v for v in eqn.invars if not isinstance(v, Literal))
        deps = frozenset(position[v] for v in live if v in position)
        out.append(deps if cuts is None else (deps, frozenset(stop[v] for v in live if v in stop)))
    return out


def inner_outputs(jaxpr, n_out: int) -> dict:
    """The call's outputs (the first ``n_out`` results) that other results are computed from: a
    functional model returning an inner layer's output with its predictions (Grad-CAM's
    ``Model(inputs, [conv.output, model.output])``).  TF's graph holds one tensor for such an
    output, so ``tape.gradient(preds, conv_output)`` has a value: the ops of the results computed
    from it take it as an operand (variable -> its position)."""
    outvars = jaxpr.outvars[:n_out]
    produced = {v for eqn in jaxpr.eqns for v in eqn.outvars}
    used = {v for eqn in jaxpr.eqns for v in eqn.invars if not isinstance(v, Literal)}
    inner: dict = {}
    for i, v in enumerate(outvars):
        if not isinstance(v, Literal) and v in produced and v in used and v not in inner:
            inner[v] = i
    return inner


def group_results(jaxpr, info: CallInfo) -> list:
    """The results grouped by the operands they depend on: ``(operands, results, taped, cut)`` per
    group, ``cut`` the positions of the call's outputs it takes as operands (``inner_outputs``);
    the state updates and the output masks are groups no tape records."""
    deps = dependencies(jaxpr)
    n = len(jaxpr.outvars)
    n_out, n_up, n_mask = info.n_out, len(info.updated), len(info.masked)
    inner = inner_outputs(jaxpr, n_out)
    cut_deps = dependencies(jaxpr, inner) if inner else [(d, frozenset()) for d in deps]
    sets: dict = {}
    for j in list(range(n_out)) + list(range(n_out + n_up, n - n_mask)):
        sets.setdefault(cut_deps[j], []).append(j)
    groups = [(dep, tuple(js), True, tuple(sorted(cut))) for (dep, cut), js in sets.items()]
    for untaped in (tuple(range(n_out, n_out + n_up)), tuple(range(n - n_mask, n))):
        if untaped:
            groups.append((frozenset().union(*(deps[j] for j in untaped)), untaped, False, ()))
    return groups


def in_order(groups: list) -> list:
    """``groups`` ordered so that a group comes after those giving the outputs it cuts at."""
    done: set = set()
    left, ordered = list(groups), []
    while left:
        ready = [g for g in left if set(g[3]) <= done]
        if not ready:   # (cannot happen: a cut output is never computed from what it cuts)
            raise RuntimeError("a Keras call's outputs depend on each other in a cycle")
        for g in ready:
            left.remove(g)
            ordered.append(g)
            done.update(g[1])
    return ordered
