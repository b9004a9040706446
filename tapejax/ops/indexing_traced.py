"""Slices whose start is known only when a compiled step runs (a loop index), as XLA's
``dynamic_slice`` of a size known while tracing.

``x[i * 3:(i + 1) * 3]``, ``x[i:i + k]``, ``x[..., 2 * i:2 * i + 2]`` with ``i`` a loop index inside
``tapejax.function``: the bounds are traced, but ``stop - start`` is a constant of their linear
forms (``ops.affine``), so the result has a static size and lowers to ``lax.dynamic_slice`` (its
gradient TF's: the slice's cotangent padded back, dense).  A slice whose size depends on a traced
value (``x[:i]``, ``x[i:]``, ``x[i:j]``) cannot compile in XLA's static shapes: ValueError, naming
what to write instead.

Where the start runs past the dimension TF gives a *shorter* slice (``x[i:i + 3]`` with ``i`` the
last row gives one row), a size known only at run time; tapejax's slice keeps its static size, so
it checks at run time (``ops.checks.require``: InvalidArgumentError from the compiled step) that
TF's slice would have that size, unless the start's range is proven inside the dimension while
tracing (a ``for`` over ``tf.range`` with static bounds: no check; a step with a check waits for
its result, ``ops.checks``).  A negative
start counts from the end, as TF's (``x[i:i + 3]`` with ``i = -4``).

A bound may be a scalar integer Variable (MoCo's queue written at ``queue[ptr:ptr + B]``): inside a
trace its read is traced, and its reads between two assigns are one value, so ``ptr + B - ptr``
is ``B`` as for a loop index.

``tf.slice`` with a traced ``begin`` is ``dynamic_slice`` too.  TF's kernel rejects a ``begin``
outside ``[0, dim - size]`` (InvalidArgumentError); ``dynamic_slice`` clamps it, so that check is
made in the value-check mode only (``ops.checks``), as the gather's, on the axes whose ``begin``
is not proven in range while tracing.

A scalar tensor index into an axis of size 0 (``b[j - 1]`` in a loop over ``tf.range(size(b))`` that
runs no time for an empty ``b``) is traced against that axis padded to one zero (``pad_empty_axes``):
TF's graph only fails such an index when it runs; JAX refuses it while tracing.
"""
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.core
import jax.numpy as jnp

from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import Variable
from .affine import Form, form_of, static_int
from .checks import VALUE_CHECKS, require

__all__ = ["TracedSizeError", "DynamicSlice", "traced_slice", "dynamic_starts", "dynamic_update_starts", "check_slice_begin", "is_traced"]


def is_traced(v: Any) -> bool:
    """Whether ``v`` is a Tensor known only when a compiled step runs, or a Variable read in a trace."""
    if isinstance(v, Variable):
        v = convert_to_tensor(v)
    return isinstance(v, Tensor) and isinstance(v._value, jax.core.Tracer)


def _read(bound: Any) -> Any:
    """A slice bound with a Variable read (its form is then its read's: ``ops.affine``)."""
    return convert_to_tensor(bound) if isinstance(bound, Variable) else bound


_HINT = ("give the slice a size known while tracing: a constant offset of a traced start (`x[i * 3:i * 3 + 3]`, "
         "`x[i:i + k]` with `k` a Python int, `i` a loop index) or `tf.slice(x, [start], [size])` with a static "
         "size; inside tapejax.function XLA compiles static shapes")


class TracedSizeError(ValueError):
    """A slice whose size (or step) is known only at run time inside a trace: XLA compiles static
    shapes.  (A dataset function that raises it runs eagerly per element instead, where TF's
    dynamic shapes are plain NumPy sizes.)"""


class DynamicSlice(NamedTuple):
    """One traced slice of ``tensor[key]``: its spec entry, ``("d", axis, step, span)`` with the
    start (a Tensor: the op's operand), or ``("s", start, stop, step)`` with ``start`` None when
    the start is static after all (``(i + 1) - i``)."""

    spec: Any
    start: Optional[Tensor]


def _form(bound: Any, what: str) -> Form:
    f = form_of(bound)
    if f is None:   # a float or non-scalar bound (TF: TypeError)
        raise TypeError("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and scalar "
                        f"tf.int32/tf.int64 tensors are valid indices, got slice {what} {bound!r}")
    return f


def traced_slice(k: slice, axis: Optional[int], shape: Sequence[int]) -> DynamicSlice:
    """The spec of slice ``k`` (a bound traced) on input ``axis`` of ``shape``; ValueError when its
    size depends on a traced value."""
    k = slice(_read(k.start), _read(k.stop), _read(k.step))
    text = f"[{_show(k.start)}:{_show(k.stop)}" + ("" if k.step is None else f":{_show(k.step)}") + "]"
    if axis is None or not 0 <= axis < len(shape):
        raise TracedSizeError(f"Slice {text} of a tensor of shape {list(shape)}: its dimension is not known")
    step = 1 if k.step is None else static_int(k.step)
    if step is None:
        raise TracedSizeError(f"Slice {text} inside tapejax.function has a traced step: {_HINT}")
    if step <= 0:
        raise TracedSizeError(f"Slice {text} inside tapejax.function has bounds known only at run time and step "
                         f"{step}: only a positive step is supported there (reverse the slice afterwards)")
    start = _form(k.start, "start") if k.start is not None else Form({}, 0)
    stop = None if k.stop is None else _form(k.stop, "stop")
    size = None if stop is None else stop.plus(start, -1).constant()
    if size is None:
        raise TracedSizeError(f"Slice {text} of dimension {axis} (size {shape[axis]}) inside tapejax.function: its size "
                         f"depends on a value known only at run time, which XLA cannot compile; {_HINT}")
    first = start.constant()
    if first is not None:   # a start known while tracing: a static slice after all
        return DynamicSlice(("s", first, first + size, step), None)
    n = shape[axis]
    count = max(0, -(-size // step))
    span = (count - 1) * step + 1 if count else 0
    st = convert_to_tensor(k.start)
    r = start.bounds()
    proven = (isinstance(n, int) and r is not None and r[0] >= 0   # (n symbolic: a None size in input_signature)
              and (r[1] + span <= n if count else r[0] + size >= 0))
    if not proven:   # TF's slice of a start past the end is shorter: XLA's cannot be
        s = st._value
        sn = _tf_start(s, n)
        en = _tf_start(s + size, n)
        got = jnp.maximum(0, (en - sn + step - 1) // step)
        shown = f"[s:s + {size}" + ("" if step == 1 else f":{step}") + "]"
        require(got == count, f"Slice {shown} with s = {{start}} of dimension {axis} (size {n}) has {{got}} "
                f"elements at run time where its compiled size is {count}: XLA compiles static shapes, so a slice "
                "whose start is known only at run time must lie inside its dimension (TF gives a shorter slice "
                "there)", got=got, start=s)
    return DynamicSlice(("d", axis, step, span), st)


def _show(b: Any) -> str:
    if b is None:
        return ""
    c = static_int(b)
    return str(c) if c is not None else "<traced>"


def _tf_start(s: Any, n: int) -> Any:
    """TF's (Python's) normalised slice bound: a negative one counts from the end, clamped to [0, n]."""
    return jnp.where(s < 0, jnp.maximum(s + n, 0), jnp.minimum(s, n))


def dynamic_starts(x: Any, spec: Sequence[Any], starts: Sequence[Any]) -> Any:
    """``x`` with each ``("d", axis, step, span)`` entry of ``spec`` applied as a ``dynamic_slice``
    of ``span`` at its start (TF's normalised start; ``starts`` in spec order); the caller indexes
    the result with ``::step`` on those axes."""
    for entry, s in zip([e for e in spec if e[0] == "d"], starts):
        _, axis, _, span = entry
        n = x.shape[axis]
        x = jax.lax.dynamic_slice_in_dim(x, _tf_start(s, n).astype(s.dtype), span, axis)
    return x


def dynamic_update_starts(x: Any, window: Any, spec: Sequence[Any], starts: Sequence[Any]) -> Any:
    """``x`` with ``window`` (``dynamic_starts(x, spec, starts)`` updated) written back in place."""
    dtype = jnp.result_type(*starts)
    at = [jnp.zeros((), dtype)] * x.ndim
    for entry, s in zip([e for e in spec if e[0] == "d"], starts):
        axis = entry[1]
        at[axis] = _tf_start(s, x.shape[axis]).astype(dtype)
    return jax.lax.dynamic_update_slice(x, window, at)


def pad_empty_axes(x: Any, spec: Sequence[Any]) -> Any:
    """``x`` with each axis of size 0 that a ``("t",)`` entry of ``spec`` (a tensor index) applies to
    padded to one zero (see the module docstring)."""
    consumed = sum(1 for e in spec if e[0] in "isdt")
    axis, pads = 0, [(0, 0)] * x.ndim
    for e in spec:
        if e[0] == "e":
            axis += x.ndim - consumed
        elif e[0] != "n":
            if e[0] == "t" and x.shape[axis] == 0:
                pads[axis] = (0, 1)
            axis += 1
    return jnp.pad(x, pads) if any(p != (0, 0) for p in pads) else x


def check_slice_begin(begin: Any, size: Sequence[int], shape: Sequence[int], forms: Sequence[Optional[Form]]) -> None:
    """``tf.slice``'s check of a traced ``begin`` (``0 <= begin[i] <= dim[i] - size[i]``), made in the
    value-check mode on every axis whose range is not proven while tracing (see the module
    docstring)."""
    if not VALUE_CHECKS[0]:
        return
    for axis, (s, d) in enumerate(zip(size, shape)):
        f = forms[axis] if axis < len(forms) else None
        r = None if f is None else f.bounds()
        if isinstance(d, int) and r is not None and r[0] >= 0 and r[1] + s <= d:
            continue
        b = begin[axis]
        require((b >= 0) & (b <= d), f"Expected begin[{axis}] in [0, {d}], but got {{value}} [Op:Slice]", value=b)
        require(b + s <= d, f"Expected size[{axis}] in [0, {{room}}], but got {s} [Op:Slice]", room=d - b)
