"""``tf.signal.stft`` / ``inverse_stft`` / ``inverse_stft_window_fn`` and ``mdct`` / ``inverse_mdct``:
compositions of the signal family's ops, as TF composes them, so a tape, deferral and
``tapejax.function`` see ordinary ops.

``stft`` frames the signals (``signal_shape.frame``), multiplies each frame by
``window_fn(frame_length, dtype=...)`` (skipped when None) and takes ``rfft`` with ``fft_length``
(default: the smallest power of two >= ``frame_length``).  ``inverse_stft`` is ``irfft``, the frames
cropped or zero-padded to ``frame_length``, windowed, and overlap-added; with
``inverse_stft_window_fn(frame_step)`` as its window it inverts ``stft`` (the forward window divided
by the overlapping squared windows' sum).  The MDCT pair is TF's: frames of ``frame_length`` with
hop ``frame_length / 2``, folded and transformed by a type-IV DCT (``signal_dct``).

A ``window_fn`` is called as ``window_fn(frame_length, dtype=...)`` with ``frame_length`` a Python
int (TF passes an int32 Tensor; a window function written with TF's ops takes either, and an int
stays static inside ``tapejax.function``).
"""
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from . import math as _m
from ._registry import _call, _shape, prim, tf_types
from .array import pad
from .signal_dct import _dct_array
from .signal_fft import irfft, rfft
from .signal_shape import _scalar_int, frame, overlap_and_add
from .signal_windows import hann_window, vorbis_window

_COMPLEX_TO_REAL = {np.dtype(np.complex64): _dtypes.float32, np.dtype(np.complex128): _dtypes.float64}


def _enclosing_power_of_two(n: int) -> int:
    return int(2 ** np.ceil(np.log(n) / np.log(2.0)))


def _length(v, what: str, op: str) -> int:
    return _scalar_int(v, what, op)


@tf_types("RFFT", "SignalFrame")
def stft(signals, frame_length, frame_step, fft_length=None, window_fn=hann_window, pad_end=False, name=None):
    """``tf.signal.stft``: ``[..., frames, fft_length // 2 + 1]`` complex spectra of windowed frames."""
    x = convert_to_tensor(signals)
    if len(_shape(x)) < 1:
        raise ValueError(f"Shape {tuple(_shape(x))} must have rank at least 1 (argument `signals` of stft)")
    length = _length(frame_length, "frame_length", "stft")
    step = _length(frame_step, "frame_step", "stft")
    n = _enclosing_power_of_two(length) if fft_length is None else _length(fft_length, "fft_length", "stft")
    framed = frame(x, length, step, pad_end=pad_end)
    if window_fn is not None:
        window = window_fn(length, dtype=framed.dtype)
        framed = _m.multiply(framed, window)
    return rfft(framed, [n])


@tf_types("IRFFT", "SignalOverlapAndAdd")
def inverse_stft(stfts, frame_length, frame_step, fft_length=None, window_fn=hann_window, name=None):
    """``tf.signal.inverse_stft``: signals from ``[..., frames, fft_length // 2 + 1]`` spectra
    (``irfft``, frames cropped or padded to ``frame_length``, windowed, overlap-added)."""
    z = convert_to_tensor(stfts, dtype_hint=_dtypes.complex64)
    if len(_shape(z)) < 2:
        raise ValueError(f"Shape {tuple(_shape(z))} must have rank at least 2 (argument `stfts` of inverse_stft)")
    length = _length(frame_length, "frame_length", "inverse_stft")
    step = _length(frame_step, "frame_step", "inverse_stft")
    n = _enclosing_power_of_two(length) if fft_length is None else _length(fft_length, "fft_length", "inverse_stft")
    frames = irfft(z, [n])
    have = _shape(frames)[-1]
    if have > length:
        frames = frames[..., :length]
    elif have < length:
        frames = pad(frames, [[0, 0]] * (len(_shape(frames)) - 1) + [[0, length - have]])
    if window_fn is not None:
        window = window_fn(length, dtype=_COMPLEX_TO_REAL[np.dtype(z._meta.dtype)])
        frames = _m.multiply(frames, window)
    return overlap_and_add(frames, step)


def _inverse_window(window, *, step):
    length = window.shape[0]
    denom = jnp.square(window)
    overlaps = -(-length // step)
    denom = jnp.pad(denom, [(0, overlaps * step - length)]).reshape(overlaps, step)
    denom = jnp.tile(jnp.sum(denom, axis=0, keepdims=True), (overlaps, 1)).reshape(overlaps * step)[:length]
    safe = jnp.where(denom == 0, jnp.ones_like(denom), denom)
    return jnp.where(denom == 0, jnp.zeros_like(window), window / safe)


_INVERSE_WINDOW = prim("InverseStftWindow", _inverse_window)


def inverse_stft_window_fn(frame_step, forward_window_fn=hann_window, name=None):
    """``tf.signal.inverse_stft_window_fn``: a ``window_fn`` for ``inverse_stft`` that inverts ``stft``
    windowed by ``forward_window_fn`` with hop ``frame_step``."""
    step = _scalar_int(frame_step, "frame_step", "inverse_stft_window_fn")
    if step <= 0:
        raise ValueError(f"Argument `frame_step` of inverse_stft_window_fn must be positive; got {step}")

    def inverse_stft_window_fn_inner(frame_length, dtype):
        length = _scalar_int(frame_length, "frame_length", "inverse_stft_window_fn")
        window = convert_to_tensor(forward_window_fn(length, dtype=dtype))
        return _call(_INVERSE_WINDOW, "InverseStftWindow", window, step=step)

    return inverse_stft_window_fn_inner


inverse_stft_window_fn._tf_types = ("InverseStftWindow",)


def _mdct_fold(frames, *, norm, windowed):
    if not windowed:
        frames = frames * jnp.asarray(1.0 / np.sqrt(2), frames.dtype)
    a, b, c, d = jnp.split(frames, 4, axis=-1)
    folded = jnp.concatenate([-c[..., ::-1] - d, a - b[..., ::-1]], axis=-1)
    return _dct_array(folded, 4, norm)


def _imdct_unfold(mdcts, *, norm):
    half = mdcts.shape[-1]
    if norm is None:
        out = jnp.asarray(0.5, mdcts.dtype) / jnp.asarray(half, mdcts.dtype) * _dct_array(mdcts, 4, None)
    else:
        out = _dct_array(mdcts, 4, "ortho")
    a, b = jnp.split(out, 2, axis=-1)
    return jnp.concatenate([b, -b[..., ::-1], -a[..., ::-1], -a], axis=-1)


_MDCT = prim("MDCTFold", _mdct_fold)
_IMDCT = prim("InverseMDCTUnfold", _imdct_unfold)


def _check_norm(norm):
    if norm not in (None, "ortho"):
        raise ValueError(f"Unknown normalization. Expected None or 'ortho', got: {norm} (argument `norm`)")


@tf_types("MDCTFold", "SignalFrame")
def mdct(signals, frame_length, window_fn=vorbis_window, pad_end=False, norm=None, name=None):
    """``tf.signal.mdct``: ``[..., frames, frame_length // 2]`` MDCT coefficients of frames with hop
    ``frame_length // 2`` (``frame_length`` a multiple of 4)."""
    x = convert_to_tensor(signals)
    if len(_shape(x)) < 1:
        raise ValueError(f"Shape {tuple(_shape(x))} must have rank at least 1 (argument `signals` of mdct)")
    length = _scalar_int(frame_length, "frame_length", "mdct")
    if length % 4 != 0:
        raise ValueError(f"The frame length must be a multiple of 4 (argument `frame_length` = {length}).")
    _check_norm(norm)
    framed = frame(x, length, length // 2, pad_end=pad_end)
    if window_fn is not None:
        framed = _m.multiply(framed, window_fn(length, dtype=framed.dtype))
    return _call(_MDCT, "MDCTFold", framed, norm=norm, windowed=window_fn is not None)


@tf_types("InverseMDCTUnfold", "SignalOverlapAndAdd")
def inverse_mdct(mdcts, window_fn=vorbis_window, norm=None, name=None):
    """``tf.signal.inverse_mdct``: signals from ``[..., frames, frame_length // 2]`` MDCT coefficients
    (type-IV DCT, unfolded, windowed, overlap-added)."""
    z = convert_to_tensor(mdcts)
    shape = _shape(z)
    if len(shape) < 2:
        raise ValueError(f"Shape {tuple(shape)} must have rank at least 2 (argument `mdcts` of inverse_mdct)")
    _check_norm(norm)
    half = shape[-1]
    frames = _call(_IMDCT, "InverseMDCTUnfold", z, norm=norm)
    if window_fn is not None:
        frames = _m.multiply(frames, window_fn(2 * half, dtype=z.dtype))
    else:
        frames = _m.multiply(frames, convert_to_tensor(np.asarray(1.0 / np.sqrt(2), np.dtype(z._meta.dtype))))
    return overlap_and_add(frames, half)


__all__ = ["inverse_mdct", "inverse_stft", "inverse_stft_window_fn", "mdct", "stft"]
