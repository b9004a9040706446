"""``tf.signal.dct`` / ``idct`` (types I-IV, ``norm='ortho'``), ``mfccs_from_log_mel_spectrograms``
and ``linear_to_mel_weight_matrix``.

The DCTs are one op (``DCT``) over the last axis, computed as TF computes them, through a real FFT:
type I as the FFT of the signal mirrored, type II as the FFT of length ``2N`` times a phase ramp,
type III as the inverse of that, type IV as the odd bins of a type II of length ``2N``; ``n`` crops
or zero-pads the input first.  ``idct`` is the DCT of the inverse type (scaled as TF: unnormalised
type II and III are inverses up to ``2N``).  Gradients are JAX's, which for these linear maps are
TF's (checked against TF's tape).

``linear_to_mel_weight_matrix`` is TF's HTK mel filterbank: ``mel = 1127 ln(1 + f / 700)``, the
``num_spectrogram_bins`` linear bins spaced from 0 to Nyquist, ``num_mel_bins + 2`` mel edges
spaced evenly between the edge frequencies, triangles ``max(0, min(rising, falling))``, and the
DC bin's row zero.  It is one op (``LinearToMelWeightMatrix``) of ``sample_rate`` and the edge
frequencies, which TF differentiates.
"""
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.tensor import Pending, Tensor
from ..core.variable import Variable
from . import _grads as G, math as _m
from ._registry import _call, _shape, dtype_of, prim, tf_types

_REAL = (np.dtype(np.float32), np.dtype(np.float64))


def _dct_array(x, kind: int, norm):
    """The DCT of ``kind`` of ``x``'s last axis (TF's FFT formulations)."""
    n = x.shape[-1]
    dt = x.dtype
    cdt = jnp.complex64 if dt == jnp.float32 else jnp.complex128
    nf = jnp.asarray(n, dt)
    if kind == 1:
        return jnp.real(jnp.fft.rfft(jnp.concatenate([x, x[..., -2:0:-1]], axis=-1))).astype(dt)
    if kind == 2:
        ramp = -jnp.arange(n).astype(dt) * jnp.asarray(np.pi * 0.5, dt) / nf
        scale = (2.0 * jnp.exp(1j * ramp.astype(cdt))).astype(cdt)
        out = jnp.real(jnp.fft.rfft(x, n=2 * n)[..., :n].astype(cdt) * scale).astype(dt)
        if norm == "ortho":
            n1 = jnp.asarray(0.5, dt) / jnp.sqrt(nf)
            out = out * jnp.concatenate([n1[None], jnp.full((n - 1,), n1 * jnp.asarray(np.sqrt(2.0), dt), dt)])
        return out
    if kind == 3:
        if norm == "ortho":
            n1 = jnp.sqrt(nf)
            x = x * jnp.concatenate([n1[None], jnp.full((n - 1,), n1 * jnp.asarray(np.sqrt(0.5), dt), dt)])
        else:
            x = x * nf
        ramp = jnp.arange(n).astype(dt) * jnp.asarray(np.pi * 0.5, dt) / nf
        scale = (2.0 * jnp.exp(1j * ramp.astype(cdt))).astype(cdt)
        return jnp.fft.irfft(scale * x.astype(cdt), n=2 * n)[..., :n].astype(dt)
    out = _dct_array(jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n)]), 2, None)[..., 1::2]
    if norm == "ortho":
        out = out * (jnp.asarray(np.sqrt(0.5), dt) / jnp.sqrt(nf))
    return out


def _dct(x, *, kind, n, norm):
    if n is not None:
        size = x.shape[-1]
        x = x[..., :n] if n <= size else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n - size)])
    return _dct_array(x, kind, norm)


_DCT = prim("DCT", _dct)


def _check_dct(input, kind, n, axis, norm):  # noqa: A002  (TF's name)
    """TF's argument rules (``_validate_dct_arguments``), then the input as a float Tensor."""
    if axis != -1:
        raise NotImplementedError(f"axis must be -1. Got: {axis} (argument `axis`)")
    if n is not None and n < 1:
        raise ValueError(f"n should be a positive integer or None (argument `n` = {n})")
    if kind not in (1, 2, 3, 4):
        raise ValueError(f"Types I, II, III and IV (I)DCT are supported (argument `type` = {kind!r}).")
    x = input if isinstance(input, (Tensor, Variable)) else convert_to_tensor(input)
    shape = _shape(x)
    if kind == 1:
        if norm == "ortho":
            raise ValueError("Normalization is not supported for the Type-I DCT (argument `norm`).")
        if len(shape) and shape[-1] < 2:
            raise ValueError(f"Type-I DCT requires the dimension to be greater than one (argument `input` of "
                             f"shape {list(shape)}).")
    if norm not in (None, "ortho"):
        raise ValueError(f"Unknown normalization. Expected None or 'ortho', got: {norm} (argument `norm`)")
    d = dtype_of(x)
    if d is not None and d.kind in "biu":   # (TF: its zero constant does not convert)
        raise TypeError(f"Cannot convert 0.0 to EagerTensor of dtype {d.name} (argument `input` of dct must be "
                        "float32 or float64)")
    if d not in _REAL:
        raise ValueError(f"RFFT requires tf.float32 or tf.float64 inputs, got: a {getattr(d, 'name', d)} tensor "
                         "(argument `input` of dct)")
    if not len(shape):
        raise ValueError("Shape () must have rank at least 1 (argument `input` of dct)")
    return x


@tf_types("DCT")
def dct(input, type=2, n=None, axis=-1, norm=None, name=None):  # noqa: A002  (TF's names)
    """``tf.signal.dct``: the DCT of ``type`` (1-4) over the last axis; ``n`` crops or zero-pads it;
    ``norm='ortho'`` scales types II-IV to orthonormal."""
    x = _check_dct(input, type, n, axis, norm)
    return _call(_DCT, "DCT", x, kind=int(type), n=None if n is None else int(n), norm=norm)


@tf_types("DCT")
def idct(input, type=2, n=None, axis=-1, norm=None, name=None):  # noqa: A002  (TF's names)
    """``tf.signal.idct``: the DCT of the inverse type (II <-> III, I and IV their own); unnormalised
    it inverts ``dct`` up to ``2N`` (``2(N - 1)`` for type I), as TF."""
    x = _check_dct(input, type, n, axis, norm)
    inverse = {1: 1, 2: 3, 3: 2, 4: 4}[type]
    return _call(_DCT, "DCT", x, kind=inverse, n=None if n is None else int(n), norm=norm)


def mfccs_from_log_mel_spectrograms(log_mel_spectrograms, name=None):
    """``tf.signal.mfccs_from_log_mel_spectrograms``: an orthonormal-scaled type-II DCT of the last
    axis (``dct(x) / sqrt(2 * num_mel_bins)``)."""
    x = convert_to_tensor(log_mel_spectrograms)
    shape = _shape(x)
    if len(shape) and shape[-1] == 0:
        raise ValueError(f"num_mel_bins must be positive. Got: a tensor of shape {list(shape)} (argument "
                         "`log_mel_spectrograms`)")
    d2 = dct(x, type=2)
    return _m.multiply(d2, convert_to_tensor(np.asarray(1.0 / np.sqrt(np.float64(shape[-1]) * 2.0),
                                                        np.dtype(x._meta.dtype))))


mfccs_from_log_mel_spectrograms._tf_types = ("DCT",)

_BREAK_HZ = 700.0
_HIGH_Q = 1127.0


def _to_mel(f):
    return _HIGH_Q * jnp.log(1.0 + f / _BREAK_HZ)


def _linspace(a, b, num, dt):
    if num == 1:
        return a[None]
    step = (b - a) / jnp.asarray(num - 1, dt)
    out = a + jnp.arange(num).astype(dt) * step
    return out.at[-1].set(b)


def _mel_matrix(sample_rate, lower, upper, *, mel_bins, spectrogram_bins):
    dt = sample_rate.dtype
    zero = jnp.zeros((), dt)
    freqs = _linspace(zero, sample_rate / 2.0, spectrogram_bins, dt)[1:]
    bins_mel = _to_mel(freqs)[:, None]
    edges = _linspace(_to_mel(lower), _to_mel(upper), mel_bins + 2, dt)
    lo, mid, hi = edges[:-2][None, :], edges[1:-1][None, :], edges[2:][None, :]
    rising = (bins_mel - lo) / (mid - lo)
    falling = (hi - bins_mel) / (hi - mid)
    m = G.maximum(zero, G.minimum(rising, falling))   # (TF's tie rules: the gradient at 0 goes to zero)
    return jnp.pad(m, [(1, 0), (0, 0)]).astype(dt)


_MEL = prim("LinearToMelWeightMatrix", _mel_matrix)


def _host_number(v):
    """A constant Tensor's value as a Python number (TF reads it statically too), else None (a traced
    or pending Tensor: TF skips the checks for a non-constant Tensor too)."""
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    if isinstance(v, Tensor) and not isinstance(v, Pending):   # (a pending value is not computed for a check)
        try:
            return float(np.asarray(v._value))
        except Exception:  # noqa: BLE001 - a traced value: TF skips the checks too
            return None
    return None


@tf_types("LinearToMelWeightMatrix")
def linear_to_mel_weight_matrix(num_mel_bins=20, num_spectrogram_bins=129, sample_rate=8000, lower_edge_hertz=125.0,
                                upper_edge_hertz=3800.0, dtype=_dtypes.float32, name=None):
    """``tf.signal.linear_to_mel_weight_matrix``: ``[num_spectrogram_bins, num_mel_bins]`` triangular
    HTK-mel filters (TF's formula and edges; the DC row is zero)."""
    if num_mel_bins <= 0:
        raise ValueError(f"num_mel_bins must be positive. Got: {num_mel_bins} (argument `num_mel_bins`)")
    lo, hi = _host_number(lower_edge_hertz), _host_number(upper_edge_hertz)
    if lo is not None and lo < 0.0:
        raise ValueError(f"lower_edge_hertz must be non-negative. Got: {lower_edge_hertz} (argument "
                         "`lower_edge_hertz`)")
    if lo is not None and hi is not None and lo >= hi:
        raise ValueError(f"lower_edge_hertz {lo:.1f} >= upper_edge_hertz {hi:.1f} (arguments `lower_edge_hertz`, "
                         "`upper_edge_hertz`)")
    sr = _host_number(sample_rate)
    if sr is not None and not isinstance(sample_rate, Tensor):
        if sr <= 0.0:
            raise ValueError(f"sample_rate must be positive. Got: {sample_rate} (argument `sample_rate`)")
        if hi is not None and hi > sr / 2:
            raise ValueError(f"upper_edge_hertz must not be larger than the Nyquist frequency (sample_rate / 2). "
                             f"Got {upper_edge_hertz} for sample_rate: {sample_rate} (argument `upper_edge_hertz`)")
    dt = _dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise ValueError(f"dtype must be a floating point type. Got: {dt!r} (argument `dtype`)")
    nbins = int(num_spectrogram_bins)
    if nbins < 1:
        raise ValueError(f"num_spectrogram_bins must be positive. Got: {num_spectrogram_bins} (argument "
                         "`num_spectrogram_bins`)")

    if isinstance(sample_rate, Tensor) and sr is not None:
        sample_rate = sr   # (TF reads a constant sample_rate statically: no gradient for it)

    def arg(v):
        if isinstance(v, (Tensor, Variable)):
            return _m.cast(v, dt)
        return convert_to_tensor(np.asarray(v, _dtypes.storage_dtype(dt._np, "dtype")))

    return _call(_MEL, "LinearToMelWeightMatrix", arg(sample_rate), arg(lower_edge_hertz), arg(upper_edge_hertz),
                 mel_bins=int(num_mel_bins), spectrogram_bins=nbins)


__all__ = ["dct", "idct", "linear_to_mel_weight_matrix", "mfccs_from_log_mel_spectrograms"]
