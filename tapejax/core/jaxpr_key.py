"""A jaxpr's structure as a hashable key, its literals as values, and its evaluation with them.

A traced piece of user code (a custom gradient's backward, ``autodiff.late``; a ``tapejax.op``
made with ``jit=False``, traced at each call, ``ops.jax_op``) is keyed by what it computes rather
than by the Python function that made it, so a compiled replay is reused exactly when the trace is
the same computation:

* ``fingerprint``: equations, parameters, wiring and avals; literal values abstracted
  (``lifted``: they are then runtime arguments, ``literals``) or part of the key;
* ``literals``: the top-level literal values (a Python float a schedule gave), in the order
  ``eval_lifted`` reads them;
* ``eval_lifted``: ``jax.core.eval_jaxpr`` reading those literals from arguments;
* ``value_key``: a constant's value as a key (shape, dtype, bytes).
"""
import re
from typing import Any, Sequence

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
        return ("closed", fingerprint(v.jaxpr, lifted=False), tuple(value_key(c) for c in v.consts))
    if isinstance(v, _jcore.Jaxpr):
        return ("jaxpr", fingerprint(v, lifted=False))
    if isinstance(v, (np.dtype, ShapedArray)):
        return v
    return (type(v).__qualname__, _ADDRESS.sub("", repr(v)))


_TRACED_CONST = iter(range(1, 1 << 62)).__next__


def value_key(c: Any) -> tuple:
    """A constant's value as a key (a sub-jaxpr's, a call-time trace's); a traced one, inside an
    enclosing trace, makes the key unique."""
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
            return ("lit", x.aval) if lifted else ("lit", x.aval, value_key(x.val))
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
