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
"""
import re
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np
from jax.core import ShapedArray, Tracer
from jax.extend import core as _jcore

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _param_key(v: Any) -> Any:
    """A hashable stand-in for one equation parameter that is equal across traces of the same
    program (sub-jaxprs by their structure and values, objects by their repr without addresses)."""
    if isinstance(v, (str, int, float, bool, type(None))):
        return v
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_param_key(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple(sorted((str(k), _param_key(x)) for k, x in v.items()))
    if isinstance(v, _jcore.ClosedJaxpr):
        return ("closed", fingerprint(v.jaxpr, lifted=False), tuple(_value_key(c) for c in v.consts))
    if isinstance(v, _jcore.Jaxpr):
        return ("jaxpr", fingerprint(v, lifted=False))
    if isinstance(v, (np.dtype, ShapedArray)):
        return v
    return (type(v).__qualname__, _ADDRESS.sub("", repr(v)))


_TRACED_CONST = iter(range(1, 1 << 62)).__next__


def _value_key(c: Any) -> tuple:
    """A constant inside a sub-jaxpr (rare: they are hoisted): its value is part of the key
    (a traced one, inside an enclosing trace, makes the key unique)."""
    if isinstance(c, Tracer):
        return ("traced", _TRACED_CONST())
    a = np.asarray(c)
    return (a.shape, a.dtype.str, a.tobytes())


def fingerprint(jaxpr: _jcore.Jaxpr, lifted: bool = True) -> tuple:
    """The jaxpr's structure; ``lifted``: its literals are abstracted (their values are
    arguments, see ``literals``), else their values are part of it (sub-jaxprs)."""
    names: dict[Any, int] = {}

    def ref(x: Any) -> Any:
        if isinstance(x, _jcore.Literal):
            return ("lit", x.aval) if lifted else ("lit", x.aval, _value_key(x.val))
        n = names.get(x)
        if n is None:
            n = names[x] = len(names)
        return n

    parts: list[tuple] = [tuple((ref(v), v.aval) for v in jaxpr.constvars),
                          tuple((ref(v), v.aval) for v in jaxpr.invars)]
    for e in jaxpr.eqns:
        parts.append((e.primitive.name, _param_key(e.params), tuple(ref(x) for x in e.invars),
                      tuple((ref(x), x.aval) for x in e.outvars)))
    parts.append(tuple(ref(x) for x in jaxpr.outvars))
    return tuple(parts)


def _literal_value(x: _jcore.Literal) -> np.ndarray:
    aval = x.aval
    return np.asarray(x.val, aval.dtype if isinstance(aval, ShapedArray) else None)


def literals(jaxpr: _jcore.Jaxpr) -> tuple:
    """The top-level literal values, in the order ``eval_lifted`` reads them."""
    atoms = [x for e in jaxpr.eqns for x in e.invars] + list(jaxpr.outvars)
    return tuple(_literal_value(x) for x in atoms if isinstance(x, _jcore.Literal))


def eval_lifted(jaxpr: _jcore.Jaxpr, consts: Sequence[Any], lits: Sequence[Any], args: Sequence[Any]) -> list:
    """``jax.core.eval_jaxpr`` with the top-level literals read from ``lits`` (arguments)."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    it = iter(lits)

    def read(x: Any) -> Any:
        return next(it) if isinstance(x, _jcore.Literal) else env[x]

    for e in jaxpr.eqns:
        invals = [read(x) for x in e.invars]
        with e.ctx.manager:
            ans = e.primitive.bind(*invals, **e.primitive.get_bind_params(e.params))
        if e.primitive.multiple_results:
            env.update(zip(e.outvars, ans))
        else:
            env[e.outvars[0]] = ans
    return [read(x) for x in jaxpr.outvars]


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
