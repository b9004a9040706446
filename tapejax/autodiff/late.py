"""A backward traced at gradient time: its structure as a key, its values as arguments.

A custom gradient's backward is traced when ``tape.gradient`` runs
(``autodiff.custom_gradient``, through ``autodiff.replay.resolve_late``).  ``trace`` turns
that trace into a ``LateBackward`` and its runtime arguments:

* the arguments: everything the trace closes over (a Tensor rebound each
  step, a Variable's value, a random draw) is a constant of the jaxpr, and its
  top-level literals (a Python float from a schedule) are lifted too
  (``literals``); both are passed in, so new values are new arguments, not a
  new compile;
* the key (``LateKey``): the jaxpr's structure (``fingerprint``: equations,
  parameters, wiring and avals, literal values abstracted), the output tree
  and whether the backward rematerialises ``f``.  An equal key means the same
  computation of those arguments; it joins the node's signature, hence the
  replay's cache key;
* the evaluation: ``eval_lifted`` runs the jaxpr reading its literals from the
  arguments (``jax.core.eval_jaxpr`` otherwise).

The key and the evaluation are ``core.jaxpr_key``'s (a ``tapejax.op`` made with ``jit=False``
keys its call-time trace the same way).
"""
from typing import Any, Callable, NamedTuple, Sequence

import jax
from jax.extend import core as _jcore

from ..core.jaxpr_key import eval_lifted, fingerprint, literals


class LateKey(NamedTuple):
    """What a traced backward computes: equal keys, the same computation of its arguments."""
    nested: bool        # traced for a recorded gradient (``f`` rematerialised) or first order
    structure: tuple    # ``fingerprint`` of the jaxpr
    out_tree: Any       # the tree of the backward's result


class LateBackward:
    """A node's backward as traced when the gradient was asked for: ``run(v, cts, extra)`` with
    ``extra`` = the trace's constants then its literals (runtime arguments of the compiled
    replay).  ``key`` joins the replay's cache key."""

    __slots__ = ("key", "jaxpr", "n_consts", "out_tree")

    def __init__(self, key: LateKey, jaxpr: _jcore.Jaxpr, n_consts: int):
        self.key = key
        self.jaxpr = jaxpr
        self.n_consts = n_consts
        self.out_tree = key.out_tree

    def run(self, v: Sequence[Any], cts: Sequence[Any], extra: Sequence[Any]) -> Any:
        n = self.n_consts
        flat = eval_lifted(self.jaxpr, extra[:n], extra[n:], (*v, *cts))
        return jax.tree_util.tree_unflatten(self.out_tree, flat)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LateBackward) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"<custom_gradient backward: {len(self.jaxpr.eqns)} equations>"


def trace(backward: Callable[..., Any], args: Sequence[Any], nested: bool) -> tuple[LateBackward, tuple]:
    """Trace ``backward(*args)`` (``args``: abstract values) now: the ``LateBackward`` and its
    runtime arguments (the trace's constants, then its top-level literals)."""
    closed, shape = jax.make_jaxpr(backward, return_shape=True)(*args)
    jaxpr = closed.jaxpr
    consts = tuple(closed.consts)
    late = LateBackward(LateKey(nested, fingerprint(jaxpr), jax.tree_util.tree_structure(shape)), jaxpr,
                        len(consts))
    return late, consts + literals(jaxpr)
