"""``tf.signal.frame`` and ``tf.signal.overlap_and_add``: a signal cut into (overlapping) frames
along one axis, and frames summed back into a signal.

``frame`` is one op (``SignalFrame``): an optional end padding with ``pad_value`` and one gather of
a ``[num_frames, frame_length]`` index grid along ``axis``; its gradient is the gather's (the
overlapping samples' gradients summed), and ``pad_value`` gets ``None``, as TF's ``PadV2``.
``overlap_and_add`` (``SignalOverlapAndAdd``) sums frames without a scatter, as TF's does: the
frames are padded to whole hops, regrouped so that the frames overlapping one output hop line up,
and reduced.  The lengths are static (TF reads them statically when they are constants), so
``num_frames = 1 + (N - frame_length) // frame_step`` (at least 0), or ``ceil(N / frame_step)``
with ``pad_end``, is known when the op is recorded.
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ._registry import _call, _shape, prim, tf_types
from .special import no_gradient


def _scalar_int(v, what: str, op: str) -> int:
    """A rank-0 integer argument as a Python int (TF's errors for another rank or a float)."""
    raw = getattr(v, "_value", v)
    a = np.asarray(raw)
    if a.ndim != 0:
        raise ValueError(f"Shape {tuple(a.shape)} must have rank 0 (argument `{what}` of {op})")
    if a.dtype.kind not in "iu":
        if op == "overlap_and_add":
            raise ValueError(f"frame_step must be an integer. Got {a.dtype.name} (argument `{what}`)")
        raise InvalidArgumentError(None, None, f"Argument `{what}` of {op} must be an integer; got {raw!r} "
                                   f"of dtype {a.dtype.name} [Op:FloorDiv]")
    return int(a)


def _num_frames(n: int, length: int, step: int, pad: bool) -> int:
    if pad:
        return -(-n // step)
    return max(0, 1 + (n - length) // step)


def _frame(x, pad_value, *, axis, length, step, pad):
    n = x.shape[axis]
    frames = _num_frames(n, length, step, pad)
    out_shape = x.shape[:axis] + (frames, length) + x.shape[axis + 1:]
    if pad:
        extra = max(0, length + step * (frames - 1) - n)
        if extra:
            widths = [(0, 0, 0)] * x.ndim
            widths[axis] = (0, extra, 0)
            x = lax.pad(x, pad_value.astype(x.dtype), widths)
    if frames * length == 0:
        return jnp.zeros(out_shape, x.dtype)
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    return jnp.take(x, jnp.asarray(idx, jnp.int32), axis=axis)


_FRAME = prim("SignalFrame", _frame)


@tf_types("SignalFrame")
def frame(signal, frame_length, frame_step, pad_end=False, pad_value=0, axis=-1, name=None):
    """``tf.signal.frame``: ``signal``'s ``axis`` cut into frames of ``frame_length`` samples every
    ``frame_step``: shape ``[..., num_frames, frame_length, ...]`` (``pad_end`` pads the last
    frames with ``pad_value``)."""
    x = convert_to_tensor(signal)
    shape = _shape(x)
    if len(shape) < 1:
        raise ValueError(f"Shape {tuple(shape)} must have rank at least 1 (argument `signal` of frame)")
    length = _scalar_int(frame_length, "frame_length", "frame")
    step = _scalar_int(frame_step, "frame_step", "frame")
    ax = _scalar_int(axis, "axis", "frame")
    if not -len(shape) <= ax < len(shape):
        raise IndexError(f"list index out of range: argument `axis` = {ax} for a signal of rank {len(shape)}")
    ax %= len(shape)
    if step == 0 or (pad_end and step < 0):
        raise InvalidArgumentError(None, None, f"Argument `frame_step` must be positive; got {step} "
                                   "(Integer division by zero) [Op:FloorDiv]")
    if length < 0:
        raise InvalidArgumentError(None, None, f"Argument `frame_length` must be >= 0; got {length} [Op:Range]")
    frames = _num_frames(shape[ax], length, step, bool(pad_end))
    if step < 0 and frames and length and (frames - 1) * step < 0:   # (TF: a gather out of range)
        raise InvalidArgumentError(None, None, f"Argument `frame_step` = {step} selects samples before the start "
                                   f"of the signal ({frames} frames of {length}) [Op:GatherV2]")
    d = np.dtype(x._meta.dtype)
    try:
        pv = convert_to_tensor(pad_value, dtype=d)
    except (TypeError, ValueError) as e:
        raise TypeError(f"Cannot convert {pad_value!r} to EagerTensor of dtype {d.name} (argument `pad_value`: "
                        f"{e})") from None
    if len(_shape(pv)) != 0:
        raise ValueError(f"Shape {tuple(_shape(pv))} must have rank 0 (argument `pad_value` of frame)")
    return _call(_FRAME, "SignalFrame", x, no_gradient(pv), axis=ax, length=length, step=step, pad=bool(pad_end))


def _overlap_and_add(x, *, step):
    frames, length = x.shape[-2:]
    outer = x.shape[:-2]
    out_len = length + step * (frames - 1)
    if step == length:
        return x.reshape(outer + (out_len,))
    segments = -(-length // step)                    # hops one frame spans
    widths = [(0, 0)] * len(outer) + [(0, segments), (0, segments * step - length)]
    x = jnp.pad(x, widths)
    x = x.reshape(outer + (frames + segments, segments, step))
    x = jnp.swapaxes(x, -3, -2)                      # [segments, frames + segments, step]
    x = x.reshape(outer + ((frames + segments) * segments, step))
    x = x[..., :(frames + segments - 1) * segments, :]
    x = x.reshape(outer + (segments, frames + segments - 1, step)).sum(axis=-3, dtype=x.dtype)
    return x.reshape(outer + ((frames + segments - 1) * step,))[..., :out_len]


_OLA = prim("SignalOverlapAndAdd", _overlap_and_add)


@tf_types("SignalOverlapAndAdd")
def overlap_and_add(signal, frame_step, name=None):
    """``tf.signal.overlap_and_add``: ``signal [..., frames, frame_length]`` summed into
    ``[..., frame_length + frame_step * (frames - 1)]``, frame ``i`` starting at ``i * frame_step``."""
    x = convert_to_tensor(signal)
    shape = _shape(x)
    if len(shape) < 2:
        raise ValueError(f"Shape {tuple(shape)} must have rank at least 2 (argument `signal` of overlap_and_add)")
    step = _scalar_int(frame_step, "frame_step", "overlap_and_add")
    if step <= 0:
        raise InvalidArgumentError(None, None, f"Argument `frame_step` must be positive; got {step} "
                                   "(Paddings must be non-negative) [Op:Pad]")
    return _call(_OLA, "SignalOverlapAndAdd", x, step=step)


__all__ = ["frame", "overlap_and_add"]
