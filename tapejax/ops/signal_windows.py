"""``tf.signal``'s window functions: ``hann_window``, ``hamming_window`` (raised cosines, periodic
or symmetric), ``vorbis_window``, ``kaiser_window`` and ``kaiser_bessel_derived_window``.

A window depends on static arguments only (its length, ``periodic``, ``dtype``), except the Kaiser
windows' ``beta``, which TF differentiates: the raised-cosine and Vorbis windows are constants
computed once per argument set in the requested dtype with TF's formulas (``a - b cos(2 pi n / N)``,
``N = length - 1``, or ``length`` when periodic and even), and the Kaiser windows are one op
(``KaiserWindow``, ``KaiserBesselDerivedWindow``) with ``beta`` as its operand, so a tape gives
``beta`` its gradient as TF does.  TF's quirks are kept: a length-1 window is ``[1]``; the Kaiser
window's positions are computed in float32 whatever the dtype; ``kaiser_bessel_derived_window`` of
an odd length has one sample less; ``kaiser_window(0)`` is TF's InvalidArgumentError.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import _grads as G, math as _m
from ._registry import _call, _shape, prim, tf_types


def _check(window_length, dtype, op: str) -> "tuple[int, np.dtype]":
    """TF's argument rules: a floating ``dtype`` (ValueError), a rank-0 int ``window_length``."""
    dt = _dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise ValueError(f"dtype must be a floating point type. Found {dt!r} (argument `dtype` of {op})")
    raw = getattr(window_length, "_value", window_length)
    a = np.asarray(raw)
    if a.dtype.kind not in "iu":
        raise TypeError(f"Cannot convert {raw!r} to EagerTensor of dtype int32 (argument `window_length` of {op})")
    if a.ndim != 0:
        raise ValueError(f"Shape {tuple(a.shape)} must have rank 0 (argument `window_length` of {op})")
    n = int(a)
    if n < 0:
        raise InvalidArgumentError(None, None, f"Requires start <= limit when delta > 0: 0/{n} (argument "
                                   f"`window_length` of {op} must be >= 0) [Op:Range]")
    return n, _dtypes.storage_dtype(dt._np, "dtype")


@functools.lru_cache(maxsize=256)
def _raised_cosine(n: int, periodic: bool, dtype: np.dtype, a: float, b: float):
    with jax.ensure_compile_time_eval():
        if n == 1:
            return jnp.ones([1], dtype)
        denom = jnp.asarray(n + (1 if periodic and n % 2 == 0 else 0) - 1, dtype)
        count = jnp.arange(n).astype(dtype)
        arg = jnp.asarray(2 * np.pi, dtype) * count / denom
        return (jnp.asarray(a, dtype) - jnp.asarray(b, dtype) * jnp.cos(arg)).astype(dtype)


def _periodic(periodic, op: str) -> bool:
    raw = getattr(periodic, "_value", periodic)
    a = np.asarray(raw)
    if a.ndim != 0:
        raise ValueError(f"Shape {tuple(a.shape)} must have rank 0 (argument `periodic` of {op})")
    if a.dtype.kind != "b":
        raise TypeError(f"Cannot convert {raw!r} to EagerTensor of dtype bool (argument `periodic` of {op})")
    return bool(a)


def hann_window(window_length, periodic=True, dtype=_dtypes.float32, name=None):
    """``tf.signal.hann_window``: ``0.5 - 0.5 cos(2 pi n / N)`` (periodic: ``N`` = length for even lengths)."""
    n, dt = _check(window_length, dtype, "hann_window")
    return Tensor(_raised_cosine(n, _periodic(periodic, "hann_window"), dt, 0.5, 0.5))


def hamming_window(window_length, periodic=True, dtype=_dtypes.float32, name=None):
    """``tf.signal.hamming_window``: ``0.54 - 0.46 cos(2 pi n / N)``."""
    n, dt = _check(window_length, dtype, "hamming_window")
    return Tensor(_raised_cosine(n, _periodic(periodic, "hamming_window"), dt, 0.54, 0.46))


@functools.lru_cache(maxsize=256)
def _vorbis(n: int, dtype: np.dtype):
    with jax.ensure_compile_time_eval():
        arg = jnp.arange(n).astype(dtype)
        inner = jnp.sin(jnp.asarray(np.pi, dtype) / jnp.asarray(n, dtype) * (arg + jnp.asarray(0.5, dtype)))
        return jnp.sin(jnp.asarray(np.pi / 2.0, dtype) * inner ** 2).astype(dtype)


def vorbis_window(window_length, dtype=_dtypes.float32, name=None):
    """``tf.signal.vorbis_window``: ``sin(pi / 2 sin^2(pi (n + 0.5) / N))`` (a power-complementary window)."""
    n, dt = _check(window_length, dtype, "vorbis_window")
    return Tensor(_vorbis(n, dt))


def _kaiser(beta, *, n):
    dtype = beta.dtype
    if n == 1:
        return jnp.ones([1], dtype)
    half = (np.float32(n) - np.float32(1.0)) / np.float32(2.0)           # (TF: float32 positions)
    pos = jnp.asarray(np.arange(-half, half + np.float32(0.1), dtype=np.float32)).astype(dtype)
    halfd = jnp.asarray(half, dtype)
    num = beta * jnp.sqrt(G.relu(jnp.ones((), dtype) - jnp.square(pos / halfd)))
    i0e = jax.scipy.special.i0e
    return (jnp.exp(num - beta) * (i0e(num) / i0e(beta))).astype(dtype)


def _kbd(beta, *, n):
    half = n // 2
    w = _kaiser(beta, n=half + 1)
    csum = jnp.cumsum(w)
    halfw = jnp.sqrt(csum[:-1] / csum[-1])
    return jnp.concatenate([halfw, halfw[::-1]])


_KAISER = prim("KaiserWindow", _kaiser)
_KBD = prim("KaiserBesselDerivedWindow", _kbd)


def _beta(beta, dt, op: str):
    b = convert_to_tensor(beta, dtype_hint=_dtypes.float32) if not isinstance(beta, (int, float)) else None
    if b is None:
        return convert_to_tensor(np.asarray(beta, dt))
    if len(_shape(b)) != 0:
        raise ValueError(f"Shape {tuple(_shape(b))} must have rank 0 (argument `beta` of {op})")
    return _m.cast(b, _dtypes.as_dtype(dt))


@tf_types("KaiserWindow")
def kaiser_window(window_length, beta=12.0, dtype=_dtypes.float32, name=None):
    """``tf.signal.kaiser_window``: ``I0(beta sqrt(1 - (2n / (N - 1) - 1)^2)) / I0(beta)`` (through
    ``i0e`` for range); differentiable in ``beta``."""
    n, dt = _check(window_length, dtype, "kaiser_window")
    if n == 0:
        raise InvalidArgumentError(None, None, "Requires start <= limit when delta > 0: 0.5/-0.4 (argument "
                                   "`window_length` of kaiser_window must be >= 1) [Op:Range]")
    b = _beta(beta, dt, "kaiser_window")
    if n == 1:   # (TF: ones, not connected to beta)
        return _const(np.ones([1], dt))
    return _call(_KAISER, "KaiserWindow", b, n=n)


@tf_types("KaiserBesselDerivedWindow")
def kaiser_bessel_derived_window(window_length, beta=12.0, dtype=_dtypes.float32, name=None):
    """``tf.signal.kaiser_bessel_derived_window``: the square root of the normalised running sum of a
    Kaiser window of ``window_length // 2 + 1``, mirrored (``2 * (window_length // 2)`` samples, as TF)."""
    n, dt = _check(window_length, dtype, "kaiser_bessel_derived_window")
    b = _beta(beta, dt, "kaiser_bessel_derived_window")
    if n < 2:   # (TF: an empty window, not connected to beta)
        return _const(np.zeros([0], dt))
    return _call(_KBD, "KaiserBesselDerivedWindow", b, n=n)


def _const(a):
    with jax.ensure_compile_time_eval():
        return Tensor(jnp.asarray(a))


for _f in (hann_window, hamming_window, vorbis_window):
    _f._tf_types = ()

__all__ = ["hamming_window", "hann_window", "kaiser_bessel_derived_window", "kaiser_window", "vorbis_window"]
