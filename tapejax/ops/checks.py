"""Runtime checks: raised now when the value is known, functionalized (checkify) when traced.

TF's asserts (``tf.debugging``) and the value checks of TF's CPU kernels (an
out-of-range ``gather`` index, a singular ``inv``) need a tensor's *value*.
``require(ok, template, **values)`` is the one way to ask for one:

* eagerly ``ok`` is concrete: it is read on the host and a False raises
  ``InvalidArgumentError`` at once, before the op runs (the user asked for the
  check, so the host read is theirs);
* inside a JAX trace (``tapejax.function``, a ``cond``/``scan`` body traced by
  one) ``ok`` is a tracer: ``jax.experimental.checkify.check`` puts a
  functionalized check in the program.  ``tapejax.function`` sees the check in
  the traced program, compiles the step under ``checkify.checkify`` and calls
  ``raise_if_failed`` on the returned error after the step (so a failed check
  is never dropped: it raises ``InvalidArgumentError`` on the host, as TF's
  ``Assert`` op fails the step).  A raw ``jax.jit`` of tapejax code that
  meets a check needs ``checkify.checkify`` around it, JAX's own rule (JAX
  says so when it lowers the program).

The message of a traced check is ``template.format(**values)`` rendered on the
host after the step: 0-d values print as numbers, a value whose name ends in
``_at`` as a comma-separated multi-index (``indices[1,0] = 5``), in ``_more``
as a summarized tensor with elements left out (``[1 2 3...]``), in
``_numerics`` as ``Inf`` / ``NaN`` / ``Inf and NaN`` (0, 1, 2), others as
TF's summarized tensors (``[1 2 3]``).

The opt-in value-check mode (``tapejax.debugging.enable_value_checks()``, also
turned on by ``enable_check_numerics``) makes the ops whose TF CPU kernel
rejects a value that JAX clamps or turns into inf/NaN check it, each next to
its op in its family module (``array.gather``, ``tf.slice`` with a traced ``begin``
(``indexing_traced``), ``math.unsorted_segment_sum``,
``linalg.inv`` / ``solve`` / ``det``'s gradient, the integer divisions of ``_binary.binary_ops``).  Off by default: JAX's
semantics (TF's on GPU), no host read, no extra work.  A ``tapejax.function``
traced while the mode was off keeps its program (as TF keeps a traced graph).
"""
from typing import Any, Optional

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from ..core.errors import InvalidArgumentError

__all__ = ["VALUE_CHECKS", "require", "require_in_range", "traced", "raise_if_failed", "render", "summarize",
           "value_checks_enabled", "set_value_checks", "CHECK_ERRORS"]

#: The checkify error classes a compiled step collects: the user checks ``require`` emits.
CHECK_ERRORS = checkify.user_checks

_Tracer = jax.core.Tracer
#: Marks the checks ``require`` made (their templates are rendered by ``render``).
_MARK = "[tapejax check] "
#: The value-check mode, a one-element list read on the ops' hot paths (``VALUE_CHECKS[0]``).
VALUE_CHECKS = [False]


def value_checks_enabled() -> bool:
    """Whether the ops check the values TF's CPU kernels reject (off by default)."""
    return VALUE_CHECKS[0]


def set_value_checks(on: bool) -> bool:
    """Turn the value-check mode on or off; returns the previous setting."""
    prev = VALUE_CHECKS[0]
    VALUE_CHECKS[0] = bool(on)
    return prev


def traced(*values: Any) -> bool:
    """Whether any of ``values`` (arrays or Tensors) is a JAX tracer."""
    for v in values:
        if isinstance(getattr(v, "_value", v), _Tracer):
            return True
    return False


def summarize(a: Any, n: Optional[int] = 3) -> str:
    """TF's summarized tensor text (``Tensor::SummarizeValue``): the first ``n`` elements,
    space separated in brackets, ``...`` after them when there are more; a scalar alone."""
    a = np.asarray(a)
    if a.ndim == 0:
        return _num(a[()])
    flat = a.reshape(-1)
    shown = flat if n is None or n < 0 else flat[:n]
    more = "..." if len(shown) < flat.size else ""
    return "[" + " ".join(_num(v) for v in shown) + more + "]"


def _num(v: Any) -> str:
    if isinstance(v, (np.floating, float)):
        return f"{float(v):.6g}"
    if isinstance(v, (np.bool_, bool)):
        return str(int(bool(v)))
    return str(v)


def render(template: str, values: dict) -> str:
    """``template`` with ``values`` (arrays read back from a failed traced check) filled in."""
    out = {}
    for k, v in values.items():
        a = np.asarray(v)
        if k.endswith("_at"):
            out[k] = ",".join(str(int(i)) for i in a.reshape(-1))
        elif k.endswith("_more"):
            out[k] = summarize(a, None)[:-1] + "...]"
        elif k.endswith("_numerics"):
            out[k] = ("Inf", "NaN", "Inf and NaN")[int(a)]
        elif a.ndim == 0:
            out[k] = _num(a[()])
        else:
            out[k] = summarize(a, None)
    return template.format(**out)


def require(ok: Any, template: str, **values: Any) -> None:
    """Check ``ok`` (a bool scalar): raise ``InvalidArgumentError`` now when it is concrete and
    False, or add a functionalized check to the program being traced.  ``values`` fill
    ``template`` (see the module docstring); give them as arrays computed from the inputs."""
    if isinstance(ok, _Tracer) or any(isinstance(v, _Tracer) for v in values.values()):
        fields: Any = {k: jax.numpy.asarray(v) for k, v in values.items()}
        checkify.check(jax.numpy.asarray(ok, bool), _MARK + template, **fields)
        return
    if not bool(np.asarray(ok)):
        raise InvalidArgumentError(None, None, render(template, values))


def raise_if_failed(err: Optional[checkify.Error]) -> None:
    """Raise the first failed check of a checkified step's ``err`` as ``InvalidArgumentError``
    (reading it is a host sync, paid only by programs that contain checks)."""
    if err is None:
        return
    exc = err.get_exception()
    if exc is None:
        return
    fmt = getattr(exc, "fmt_string", None)
    if isinstance(fmt, str) and fmt.startswith(_MARK):
        raise InvalidArgumentError(None, None, render(fmt[len(_MARK):], getattr(exc, "kwargs", {})))
    raise InvalidArgumentError(None, None, str(exc).split(" (`check` failed)")[0])   # (a converted assert)


def require_in_range(values: Any, hi: int, name: str, tail: str, op_type: str,
                     negative_ok: bool = False) -> None:
    """TF's kernel check of an index-like input: every value in ``[0, hi)`` (or ``< hi`` with
    ``negative_ok``); else ``InvalidArgumentError`` for the first bad one, ``name[i,j] = value
    tail`` (``indices[1,0] = 5 is not in [0, 3)``; ``name = value tail`` for a scalar), with
    ``[Op:op_type]`` eagerly.  Eagerly the values are read once and checked on the host."""
    if traced(values):
        v = jnp.asarray(values)
        bad = v >= hi if negative_ok else (v < 0) | (v >= hi)
        flat = jnp.ravel(bad)
        first = jnp.argmax(flat)
        fields = {"value": jnp.ravel(v)[first]}
        where = name
        if v.ndim:
            fields["i_at"] = jnp.stack(jnp.unravel_index(first, v.shape))
            where = name + "[{i_at}]"
        require(~jnp.any(flat), where + " = {value} " + tail.replace("{", "{{").replace("}", "}}"), **fields)
        return
    a = np.asarray(values)
    b = a >= hi if negative_ok else (a < 0) | (a >= hi)
    if not b.any():
        return
    at = tuple(int(i) for i in np.argwhere(b)[0])
    where = f"{name}[{','.join(str(i) for i in at)}]" if b.ndim else name
    raise InvalidArgumentError(None, None, f"{where} = {a[at]} {tail} [Op:{op_type}]")
