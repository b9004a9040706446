"""``tf.debugging``: TF's asserts, eager and inside ``tapejax.function``.

Every assert decides what it can from shapes and dtypes first (``assert_rank``,
``assert_shapes``, ``assert_type`` are static in tapejax: XLA shapes are known
when a function traces, so these raise ``ValueError`` / ``TypeError`` at the
call, as TF's do for static shapes).  Value asserts go through
``ops.checks.require``:

* eagerly they read the values and raise TF's ``InvalidArgumentError`` with
  TF's eager message (``Condition x == y did not hold.`` and the indices and
  values that differ, the first ``summarize`` elements of ``x`` and ``y``);
* inside ``tapejax.function`` they become functionalized checks
  (``jax.experimental.checkify``): the step runs, its Variable updates are
  written back (TF's failed ``Assert`` does not stop the step's other stateful
  ops either), then ``InvalidArgumentError`` is raised on the host with TF's
  graph message (``assertion failed: [Condition x == y did not hold
  element-wise:] [x (shape=(2,) dtype=float32) = ] [1 2] ...``).

Comparisons run through tapejax's own ops (``equal``, ``less`` ...), so a
dtype or shape mismatch raises the op's error, as in TF.  Asserts return
``None`` (TF2's eager result; inside a function TF returns the assert op,
which only control dependencies use); ``check_numerics`` and
``assert_all_finite`` return their input's value (an ``identity``, so the
gradient flows through them as through TF's).

``enable_check_numerics()`` turns on JAX's own NaN/Inf checker
(``jax_debug_nans`` and ``jax_debug_infs``: every program's output is checked,
eager ops and compiled steps alike) and the value checks of
``enable_value_checks()`` (see ``tapejax.ops.checks``).  What JAX raises
(``FloatingPointError``) becomes TF's ``InvalidArgumentError``
(``core.errors.NumericsError``, which is both):

* an eager op (``core.bind`` hands its error to ``_eager_numerics_error``)
  gets TF's eager message: the op's TF type, the output's dtype and shape, the
  counts of -Inf, +Inf and NaN elements, the input tensors, and
  ``: Tensor had -Inf and NaN values`` (the op is run again, unchecked, to
  count them: only on the error path);
* a ``tapejax.function`` step gets TF's ``Graph execution error`` shape naming
  the function; JAX checks the compiled program's outputs, so the op inside it
  is not named (run the function eagerly to see it);
* deferred execution is turned off while the checks are on, so each op is
  checked when it is called, as in TF.
"""
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import NUMERICS_ERROR
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, NumericsError
from ..core.executor import EAGER, Executor, active, install
from ..core.tensor import Tensor
from ..ops import math as _m, reduce as _red
from ..ops.checks import require, set_value_checks, summarize, traced, value_checks_enabled
from ._shapes import assert_rank, assert_rank_at_least, assert_rank_in, assert_scalar, assert_shapes, assert_type
from .config import get_log_device_placement, set_log_device_placement

__all__ = [
    "Assert", "assert_all_finite", "assert_equal", "assert_greater", "assert_greater_equal", "assert_integer",
    "assert_less", "assert_less_equal", "assert_near", "assert_negative", "assert_non_negative",
    "assert_non_positive", "assert_none_equal", "assert_positive", "assert_rank", "assert_rank_at_least",
    "assert_rank_in", "assert_scalar", "assert_shapes", "assert_type", "check_numerics",
    "disable_check_numerics", "disable_value_checks", "enable_check_numerics", "enable_value_checks",
    "is_numeric_tensor", "value_checks_enabled", "assert_proper_iterable", "assert_same_float_dtype",
    "disable_traceback_filtering", "enable_traceback_filtering", "is_traceback_filtering_enabled",
    "get_log_device_placement", "set_log_device_placement",
]


def _shape_dtype(t: Tensor) -> str:
    return f"shape={tuple(t.shape)} dtype={t.dtype.name}"


# -- Assert: the data list, eager and traced ---------------------------------------------

def _eager_item(item: Any, summarize_n: int) -> str:
    """One ``data`` item of TF's eager ``Assert`` message (``_summarize_eager``)."""
    if isinstance(item, str):
        return repr(item.encode())
    if isinstance(item, bytes):
        return repr(item)
    a = np.asarray(convert_to_tensor(item)._value)
    if a.ndim == 0:
        return str(a[()]) if summarize_n != 0 else ""
    flat = a.reshape(-1)
    shown = [str(v) for v in flat[:summarize_n]]
    if len(shown) < flat.size:
        shown.append("...")
    return ", ".join(shown)


def _traced_check(ok: Any, data: Sequence[Any], summarize_n: int) -> None:
    """A failed traced ``Assert``: TF's graph message, ``assertion failed: [item] [item] ...``
    with each tensor summarized to its first ``summarize_n`` elements."""
    parts = []
    values = {}
    for item in data:
        if item is None:
            parts.append("[]")
        elif isinstance(item, (str, bytes)):
            text = item.decode() if isinstance(item, bytes) else item
            parts.append("[" + text.replace("{", "{{").replace("}", "}}") + "]")
        else:
            v = convert_to_tensor(item)._value
            flat = jnp.reshape(v, (-1,))
            name = f"d{len(values)}"
            if v.ndim == 0:
                values[name] = v
                parts.append("[{" + name + "}]")
            else:
                n = flat.shape[0] if summarize_n < 0 else min(summarize_n, flat.shape[0])
                if n < flat.shape[0]:
                    name += "_more"   # rendered with TF's "..." for the elements left out
                values[name] = flat[:n]
                parts.append("{" + name + "}")
    require(ok, "assertion failed: " + " ".join(parts), **values)


def Assert(condition: Any, data: Sequence[Any], summarize: Optional[int] = None, name: Optional[str] = None):
    """``tf.debugging.Assert``: raise ``InvalidArgumentError`` when ``condition`` (a bool scalar)
    is False, showing ``data`` (strings and tensors, the first ``summarize`` elements of each)."""
    n = 3 if summarize is None else int(summarize)
    if traced(condition) or any(traced(d) for d in data if not isinstance(d, (str, bytes))):
        ok = jnp.all(convert_to_tensor(condition)._value)
        _traced_check(ok, data, n)
        return None
    cond = condition
    value = cond if isinstance(cond, (bool, np.bool_)) else np.asarray(convert_to_tensor(cond)._value)
    if bool(np.all(value)):
        return None
    if n < 0:
        n = 1 << 60
    text = "\n".join(_eager_item(d, n) for d in data)
    raise InvalidArgumentError(None, None, f"Expected '{cond!s}' to be true. Summarized data: {text}")


# -- binary asserts ------------------------------------------------------------------------

def _eager_binary_data(sym: str, x: Tensor, y: Tensor, test: np.ndarray, n: int) -> list:
    """TF's default eager message of a failed binary assert (``_make_assert_msg_data``)."""
    data: list = [f"Condition x {sym} y did not hold."]
    if n > 0:
        xa, ya = np.asarray(x._value), np.asarray(y._value)
        if xa.shape == ya.shape and xa.shape:
            mask = ~test
            where = np.argwhere(mask)
            k = min(n, where.shape[0])
            data += [f"Indices of first {k} different values:", where[:k].astype(np.int64),
                     "Corresponding x values:", xa[mask].reshape(-1)[:k],
                     "Corresponding y values:", ya[mask].reshape(-1)[:k]]
        xf, yf = xa.reshape(-1), ya.reshape(-1)
        data += [f"First {min(xf.size, n)} elements of x:", xf[:n],
                 f"First {min(yf.size, n)} elements of y:", yf[:n]]
    return data


def _pretty(item: Any, n: int) -> str:
    """TF's ``_pretty_print``: a Tensor as the list of its first ``n`` element strings."""
    if isinstance(item, Tensor) or hasattr(item, "_read"):
        a = np.asarray(convert_to_tensor(item)._value)
        if a.ndim == 0:
            return str(a[()])
        flat = a.reshape(-1)
        shown = [str(v) for v in flat[:n]]
        if len(shown) < flat.size:
            shown.append("...")
        return str(shown)
    return str(item)


def _binary_assert(sym: str, op: Callable, x: Any, y: Any, data: Optional[Sequence[Any]],
                   summarize_n: Optional[int], message: Optional[str]) -> None:
    x = convert_to_tensor(x)
    y = convert_to_tensor(y)
    test = op(x, y)   # TF's dtype and shape errors come from the op
    if traced(test, x, y):
        if data is None:
            data = [f"Condition x {sym} y did not hold element-wise:", f"x ({_shape_dtype(x)}) = ", x,
                    f"y ({_shape_dtype(y)}) = ", y]
        if message is not None:
            data = [message] + list(data)
        _traced_check(jnp.all(test._value), data, 3 if summarize_n is None else summarize_n)
        return None
    t = np.asarray(test._value)
    if bool(np.all(t)):
        return None
    n = 3 if summarize_n is None else (1 << 60 if summarize_n < 0 else int(summarize_n))
    if data is None:
        data = _eager_binary_data(sym, x, y, t, n)
    if message is not None:
        data = [message] + list(data)
    raise InvalidArgumentError(None, None, "\n".join(_pretty(d, n) for d in data))


def _binary(sym: str, op: Callable, public: str) -> Callable:
    def assert_fn(x, y, message=None, summarize=None, name=None):
        return _binary_assert(sym, op, x, y, None, summarize, message)
    assert_fn.__name__ = assert_fn.__qualname__ = public
    assert_fn.__doc__ = (f"``tf.debugging.{public}``: ``x {sym} y`` element-wise (broadcasting), else "
                         "``InvalidArgumentError`` (eager: now; in ``tapejax.function``: after the step).")
    return assert_fn


assert_equal = _binary("==", _m.equal, "assert_equal")
assert_none_equal = _binary("!=", _m.not_equal, "assert_none_equal")
assert_less = _binary("<", _m.less, "assert_less")
assert_less_equal = _binary("<=", _m.less_equal, "assert_less_equal")
assert_greater = _binary(">", _m.greater, "assert_greater")
assert_greater_equal = _binary(">=", _m.greater_equal, "assert_greater_equal")


def _unary(cond: str, op: Callable, zero_first: bool, public: str, sep: str = "\n") -> Callable:
    def assert_fn(x, message=None, summarize=None, name=None):
        x = convert_to_tensor(x)
        zero = convert_to_tensor(0, dtype=x.dtype)
        data: list = [message, f"Condition x {cond} did not hold element-wise:", f"x ({_shape_dtype(x)}) = ", x]
        if sep == "":   # TF's assert_non_positive joins these two lines (a missing comma in TF)
            data = [message, data[1] + data[2], x]
        data = ["" if d is None else d for d in data]
        a, b = (zero, x) if zero_first else (x, zero)
        return _binary_assert(f"{cond}", op, a, b, data, summarize, None)
    assert_fn.__name__ = assert_fn.__qualname__ = public
    assert_fn.__doc__ = f"``tf.debugging.{public}``: ``x {cond}`` element-wise, else ``InvalidArgumentError``."
    return assert_fn


assert_positive = _unary("> 0", _m.less, True, "assert_positive")
assert_negative = _unary("< 0", _m.less, False, "assert_negative")
assert_non_negative = _unary(">= 0", _m.less_equal, True, "assert_non_negative")
assert_non_positive = _unary("<= 0", _m.less_equal, False, "assert_non_positive", sep="")


def _tol_text(t: Tensor, raw: Any, dtype: np.dtype) -> str:
    """A tolerance in the message: the tensor's text (eager), or inside a trace the number the
    user gave (a traced tolerance shows as ``<traced>``)."""
    if not traced(t):
        return str(t)
    if isinstance(raw, (int, float, np.number)):
        return summarize(np.asarray(raw, dtype))
    return "<traced>"


def assert_near(x, y, rtol=None, atol=None, message=None, summarize=None, name=None):
    """``tf.debugging.assert_near``: ``|x - y| <= atol + rtol * |y|`` element-wise; the default
    tolerances are ``10 * eps`` of ``x``'s dtype (1.19e-6 for float32)."""
    x = convert_to_tensor(x)
    y = convert_to_tensor(y, dtype=x.dtype)
    real = np.dtype(x._value.dtype)
    if real.kind == "c":
        real = np.finfo(real).dtype
    eps = np.finfo(real).eps   # (an int dtype raises NumPy's ValueError, as TF's does)
    rtol = 10 * eps if rtol is None else rtol
    atol = 10 * eps if atol is None else atol
    rtol_t = convert_to_tensor(rtol, dtype=_dtypes.as_dtype(real))
    atol_t = convert_to_tensor(atol, dtype=_dtypes.as_dtype(real))
    tol = _m.add(atol_t, _m.multiply(rtol_t, _m.abs(y)))
    ok: Any = _red.reduce_all(_m.less_equal(_m.abs(_m.subtract(x, y)), tol))
    tols = [_tol_text(rtol_t, rtol, real), _tol_text(atol_t, atol, real)]
    data = [message, f"x and y not equal to tolerance rtol = {tols[0]}, atol = {tols[1]}",
            f"x ({_shape_dtype(x)}) = ", x, f"y ({_shape_dtype(y)}) = ", y]
    if traced(ok):
        _traced_check(ok._value, [d if d is not None else "" for d in data], 3 if summarize is None else summarize)
        return None
    return Assert(ok, ["" if d is None else d for d in data], summarize=summarize)


def assert_integer(x, message=None, name=None):
    """``tf.debugging.assert_integer``: TypeError unless ``x`` has an integer dtype."""
    t = convert_to_tensor(x)
    if not t.dtype.is_integer:
        prefix = f"{message}: " if message else ""
        raise TypeError(f"{prefix}Expected \"x\" to be integer type.  Found: tensor of dtype {t.dtype!r}")


def is_numeric_tensor(tensor) -> bool:
    """``tf.debugging.is_numeric_tensor``: a Tensor (or Variable) of a numeric dtype."""
    if not (isinstance(tensor, Tensor) or hasattr(tensor, "_read")):
        return False
    return np.dtype(tensor.dtype._np).kind in "biufcV" and np.dtype(tensor.dtype._np).kind != "b"


# -- numerics ----------------------------------------------------------------------------------

_FLOAT_KINDS = "fV"   # bfloat16 is a NumPy void-kind extension type


def check_numerics(tensor, message, name=None):
    """``tf.debugging.check_numerics``: ``tensor`` back, or ``InvalidArgumentError``
    ("``message`` : Tensor had NaN values", "Inf values", "Inf and NaN values")."""
    t = convert_to_tensor(tensor)
    dt = np.dtype(t._value.dtype)
    if dt.kind not in _FLOAT_KINDS:
        raise InvalidArgumentError(
            None, None, f"Value for attr 'T' of {t.dtype.name} is not in the list of allowed values: "
            "bfloat16, half, float, double (argument `tensor` of CheckNumerics) [Op:CheckNumerics]")
    v = t._value
    if traced(v):
        nan = jnp.any(jnp.isnan(v))
        inf = jnp.any(jnp.isinf(v))
        which = jnp.where(nan & inf, 2, jnp.where(nan, 1, 0))
        require(~(nan | inf), message.replace("{", "{{").replace("}", "}}") + " : Tensor had {kind_numerics} values",
                kind_numerics=which)
        return _m.identity(t)
    a = np.asarray(v).astype(np.float32) if dt.kind == "V" else np.asarray(v)
    nan, inf = bool(np.isnan(a).any()), bool(np.isinf(a).any())
    if nan or inf:
        kind = "Inf and NaN" if nan and inf else ("NaN" if nan else "Inf")
        raise InvalidArgumentError(None, None, f"{message} : Tensor had {kind} values [Op:CheckNumerics]")
    return _m.identity(t)


def assert_all_finite(x, message, name=None):
    """``tf.debugging.assert_all_finite`` (TF2): ``check_numerics(x, message)``."""
    return check_numerics(x, message, name)


class _NumericsState(NamedTuple):
    """The settings ``enable_check_numerics`` replaced (restored by ``disable_check_numerics``)."""

    debug_nans: bool
    debug_infs: bool
    value_checks: bool
    executor: Executor


_NUMERICS_PREV: "list[_NumericsState]" = []


def _counts(a: np.ndarray) -> "tuple[int, int, int]":
    inf = np.isinf(a)
    return int(np.sum(inf & (a < 0))), int(np.sum(inf & (a > 0))), int(np.sum(np.isnan(a)))


def _had(neg: int, pos: int, nan: int) -> str:
    """The tail of TF's CheckNumericsV2 message: ``-Inf, +Inf, and NaN`` ..."""
    kinds = [k for k, n in (("-Inf", neg), ("+Inf", pos), ("NaN", nan)) if n]
    if len(kinds) == 3:
        return f"{kinds[0]}, {kinds[1]}, and {kinds[2]}"
    return " and ".join(kinds)


def _operand_tensor(x: Any) -> Tensor:
    """An op's operand as a Tensor (a Variable's current value; a pending value computed)."""
    return x if isinstance(x, Tensor) else convert_to_tensor(x)


def _tf_str(t: Tensor) -> str:
    """TF's ``str`` of an eager tensor (``tf.Tensor([1. 0.], shape=(2,), dtype=float32)``)."""
    text = str(t)
    return "tf." + text[len("tapejax."):] if text.startswith("tapejax.") else text


def _eager_numerics_error(prim: Any, call: Callable[..., Any], operands: tuple, error: FloatingPointError):
    """TF's eager check-numerics error for ``prim`` run on ``operands`` (JAX found a NaN or Inf in
    its output): the op is run again with JAX's checks off to describe the bad output."""
    if traced(*operands):
        return error   # inside a trace: the compiled step reports it (``tapejax.function``)
    try:
        with jax.debug_nans(False), jax.debug_infs(False):
            inputs = [_operand_tensor(x) for x in operands]
            out = call(*[t._value for t in inputs])
    except Exception:   # pragma: no cover - the op itself fails unchecked: JAX's error stands
        return error
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for slot, o in enumerate(outs):
        a = np.asarray(o)
        if a.dtype.kind not in _FLOAT_KINDS:
            continue
        neg, pos, nan = _counts(a.astype(np.float32) if a.dtype.kind == "V" else a)
        if not (neg or pos or nan):
            continue
        lines = ["", "", f"!!! Detected Infinity or NaN in output {slot} of eagerly-executing op "
                 f"\"{prim.name}\" (# of outputs: {len(outs)}) !!!",
                 f"  dtype: <dtype: '{_dtypes.as_dtype(a.dtype).name}'>", f"  shape: {tuple(a.shape)}"]
        lines += [f"  # of {k} elements: {n}" for k, n in (("-Inf", neg), ("+Inf", pos), ("+NaN", nan)) if n]
        lines.append("")
        if len(operands) > 1:
            lines.append(f"  Input tensors ({len(operands)}):")
            lines += [f"         {i}: {_tf_str(t)}" for i, t in enumerate(inputs)]
        elif inputs:
            lines.append(f"  Input tensor: {_tf_str(inputs[0])}")
        lines += ["", f" : Tensor had {_had(neg, pos, nan)} values [Op:CheckNumericsV2]"]
        return NumericsError(None, None, "\n".join(lines))
    return error   # pragma: no cover - JAX's checker and the recount disagree


def enable_check_numerics(stack_height_limit=30, path_length_limit=50):
    """``tf.debugging.enable_check_numerics``: any op whose output holds a NaN or Inf raises TF's
    ``InvalidArgumentError`` (``NumericsError``; eager: at the op, with TF's message naming it; in
    ``tapejax.function``: after the step), through JAX's ``jax_debug_nans`` / ``jax_debug_infs``;
    also turns on the value checks (``enable_value_checks``) and turns deferred execution off
    until ``disable_check_numerics``.  The arguments are accepted for TF compatibility.  Every
    program compiles again (JAX's compiled programs are dropped), as TF's check numerics
    instruments every op anew.  Calling it again changes nothing (TF: idempotent)."""
    if not _NUMERICS_PREV:
        _NUMERICS_PREV.append(_NumericsState(bool(getattr(jax.config, "jax_debug_nans")),
                                             bool(getattr(jax.config, "jax_debug_infs")),
                                             value_checks_enabled(), install(EAGER)))
    jax.config.update("jax_debug_nans", True)
    jax.config.update("jax_debug_infs", True)
    NUMERICS_ERROR[0] = _eager_numerics_error
    jax.clear_caches()   # programs compiled before are compiled again, with the checks
    set_value_checks(True)


def disable_check_numerics():
    """``tf.debugging.disable_check_numerics``: back to the settings before ``enable_check_numerics``
    (a no-op when it is not on)."""
    if not _NUMERICS_PREV:
        return
    prev = _NUMERICS_PREV.pop()
    jax.config.update("jax_debug_nans", prev.debug_nans)
    jax.config.update("jax_debug_infs", prev.debug_infs)
    NUMERICS_ERROR[0] = None
    set_value_checks(prev.value_checks)
    if active() is EAGER:
        install(prev.executor)


def enable_value_checks():
    """Make the ops whose TF CPU kernel rejects a value JAX would clamp or turn into inf/NaN raise
    TF's ``InvalidArgumentError`` (eager: at the op; in ``tapejax.function``: after the step):
    ``gather`` / ``embedding_lookup`` with an index out of range, ``tf.slice`` with a ``begin`` known
    only when a compiled step runs that puts the slice past the end, ``unsorted_segment_sum`` with a
    segment id >= ``num_segments``, ``linalg.inv`` / ``solve`` of a singular matrix and
    ``linalg.det``'s gradient there.  Off by default (JAX's semantics, as TF on GPU): each check
    reads values (a host sync eagerly, an error output compiled)."""
    set_value_checks(True)


def disable_value_checks():
    """Back to JAX's semantics for those ops (the default)."""
    set_value_checks(False)


# -- argument checks and tracebacks ---------------------------------------------------------------

def assert_proper_iterable(values):
    """``tf.debugging.assert_proper_iterable``: TypeError unless ``values`` is an iterable that is
    not a string, bytes, a NumPy array or a Tensor (which iterate element by element)."""
    unintentional = (Tensor, np.ndarray, bytes, str)
    if isinstance(values, unintentional) or hasattr(values, "_read"):
        raise TypeError(f'Expected argument "values" to be a "proper" iterable.  Found: {type(values)}')
    if not hasattr(values, "__iter__"):
        raise TypeError(f'Expected argument "values" to be iterable.  Found: {type(values)}')


def assert_same_float_dtype(tensors=None, dtype=None):
    """``tf.debugging.assert_same_float_dtype``: the one floating dtype of ``tensors`` (and
    ``dtype`` when given), else ValueError; float32 when neither gives one."""
    want = None if dtype is None else _dtypes.as_dtype(dtype)
    first = None
    for t in tensors or ():
        t = t if isinstance(t, Tensor) or hasattr(t, "_read") else convert_to_tensor(t)
        if want is None:
            want, first = t.dtype, t
        elif t.dtype != want:
            shown = t if isinstance(t, Tensor) else convert_to_tensor(t)
            against = f" as {_tf_str(first)}" if first is not None else ""
            raise ValueError(f"{_tf_str(shown)}, type=<dtype: '{t.dtype.name}'>, must be of the same type "
                             f"(<dtype: '{want.name}'>){against}.")
    if want is None:
        return _dtypes.float32
    if not want.is_floating:
        raise ValueError(f"Expected floating point type, got <dtype: '{want.name}'>.")
    return want


def enable_traceback_filtering() -> None:
    """``tf.debugging.enable_traceback_filtering``: JAX's traceback filtering on
    (``jax_traceback_filtering="auto"``: JAX's and tapejax's frames left out of errors)."""
    jax.config.update("jax_traceback_filtering", "auto")


def disable_traceback_filtering() -> None:
    """``tf.debugging.disable_traceback_filtering``: full tracebacks (``jax_traceback_filtering="off"``)."""
    jax.config.update("jax_traceback_filtering", "off")


def is_traceback_filtering_enabled() -> bool:
    """``tf.debugging.is_traceback_filtering_enabled``: whether JAX filters tracebacks."""
    return getattr(jax.config, "jax_traceback_filtering") != "off"
