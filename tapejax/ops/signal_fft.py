"""``tf.signal``'s Fourier transforms: ``fft``/``ifft`` of rank 1, 2 and 3, the real ones
(``rfft``/``irfft``, ``rfft2d``/``irfft2d``, ``rfft3d``/``irfft3d``) and ``fftshift``/``ifftshift``.

Each transform is one op (TF's type name: ``FFT``, ``RFFT2D`` ...) over ``jnp.fft`` on the innermost
``rank`` axes.  The wrappers keep TF's Python rules: the complex ones take complex64/complex128
only (TF's attr error otherwise, Python data converted as complex64), the real ones take
float32/float64 (complex64/complex128 for the inverse) and give complex64/complex128 (float32/
float64) back, and ``fft_length`` crops or zero-pads the input's innermost axes (for the inverse,
to ``fft_length[-1] // 2 + 1`` on the last one), read statically, as TF's wrapper does.

Gradients come from JAX's transposes, which are TF's registered ones: ``ifft(g) * n`` for ``FFT``,
``irfft`` of the gradient with the dropped Hermitian half folded back for ``RFFT`` (TF's
``_rfft_grad_helper``), ``rfft(g)`` scaled by ``[1, 2, ..., 2, 1] / n`` for ``IRFFT``; a padded input's
gradient is the padded part cut off.  Two deliberate differences, both where TF fails rather than
differs (``tests/parity/test_signal.py`` shows TF's failure next to tapejax's value):

* an ``fft_length`` shorter than the input: TF's gradient functions add tensors of the cropped and
  the uncropped length and raise InvalidArgumentError; tapejax gives the exact gradient (the
  cropped samples get zero);
* ``RFFT3D`` / ``IRFFT3D``: TF registers no gradient (LookupError); tapejax gives JAX's exact one.

TF's kernels abort the process on a zero ``fft_length`` for a non-empty input; tapejax raises
InvalidArgumentError naming ``fft_length``.  An empty input gives zeros of the output shape, as TF.
"""
from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import array as _a
from ._registry import _bad, _call, _shape, dtype_of, prim

_COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))
_REAL = (np.dtype(np.float32), np.dtype(np.float64))
_TO_COMPLEX = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}
_TO_REAL = {v: k for k, v in _TO_COMPLEX.items()}


class Transform(NamedTuple):
    """One of TF's FFT ops: its type name, rank, whether its input (or output) is real, direction."""
    op_type: str
    rank: int
    real: bool
    inverse: bool


def _axes(rank):
    return tuple(range(-rank, 0))


def _complex_fft(x, *, rank, inverse):
    if x.size == 0:
        return x
    f = jnp.fft.ifftn if inverse else jnp.fft.fftn
    return f(x, axes=_axes(rank))


def _real_fft(x, *, rank, n, inverse):
    """``rfftn`` (``irfftn`` when ``inverse``) over the innermost ``rank`` axes with TF's lengths ``n``."""
    out_dt = _TO_REAL[np.dtype(x.dtype)] if inverse else _TO_COMPLEX[np.dtype(x.dtype)]
    last = n[-1] if inverse else (n[-1] // 2 + 1 if n[-1] else 0)
    out_shape = x.shape[:-rank] + tuple(n[:-1]) + (last,)
    if x.size == 0 or 0 in out_shape:
        return jnp.zeros(out_shape, out_dt)
    f = jnp.fft.irfftn if inverse else jnp.fft.rfftn
    return f(x, s=n, axes=_axes(rank)).astype(out_dt)


_PRIMS = {}


def _prim(t: Transform):
    if t.op_type not in _PRIMS:
        if t.real:
            _PRIMS[t.op_type] = prim(t.op_type, _real_fft)
        else:
            _PRIMS[t.op_type] = prim(t.op_type, _complex_fft)
    return _PRIMS[t.op_type]


def _dtype_name(d):
    return {"float32": "float", "float64": "double", "float16": "half"}.get(d.name, d.name)


def _as_input(x, hint):
    """``x`` as a Tensor: Tensors and Variables as they are, Python data with TF's preferred dtype."""
    if isinstance(x, (Tensor, Variable)) or isinstance(x, (np.ndarray, np.generic)):
        return convert_to_tensor(x)
    try:
        return convert_to_tensor(x, dtype_hint=hint)
    except (TypeError, ValueError):
        return convert_to_tensor(x)


def _complex_op(t: Transform):
    p = _prim(t)

    def op(input, name=None):  # noqa: A002  (TF's argument name)
        x = _as_input(input, _dtypes.complex64)
        d = dtype_of(x)
        if d not in _COMPLEX:
            raise _bad(t.op_type, f"Value for attr 'Tcomplex' of {_dtype_name(d)} is not in the list of allowed "
                       "values: complex64, complex128 (argument `input`)")
        shape = _shape(x)
        if len(shape) < t.rank:
            raise _bad(t.op_type, f"Input must have rank of at least {t.rank} but got: {list(shape)} "
                       "(argument `input`)")
        return _call(p, t.op_type, x, rank=t.rank, inverse=t.inverse)

    return op


def _fft_lengths(fft_length, rank, op_type):
    """``fft_length`` as a tuple of ``rank`` Python ints, with TF's errors."""
    v = getattr(fft_length, "_value", fft_length)
    if isinstance(v, (int, np.integer)) or (isinstance(v, np.ndarray) and v.ndim == 0):
        raise TypeError(f"Argument `fft_length` must be a list of {rank} ints; got {fft_length!r} "
                        f"('{type(v).__name__}' object is not iterable)")
    a = np.asarray(v)
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"Cannot convert {fft_length!r} to EagerTensor of dtype int32 (argument `fft_length` "
                        "must hold ints)")
    a = a.astype(np.int64).reshape(-1) if a.ndim <= 1 else a
    if a.shape != (rank,):
        raise _bad(op_type, f"fft_length must have shape [{rank}]; got argument `fft_length` of shape "
                   f"{list(np.shape(v))}")
    return tuple(int(n) for n in a)


def _real_op(t: Transform):
    p = _prim(t)
    kind = "IRFFT" if t.inverse else "RFFT"

    def op(input_tensor, fft_length=None, name=None):
        x = _as_input(input_tensor, _dtypes.complex64 if t.inverse else _dtypes.float32)
        d = dtype_of(x)
        allowed = _COMPLEX if t.inverse else _REAL
        if d not in allowed:
            want = "tf.complex64 or tf.complex128" if t.inverse else "tf.float32 or tf.float64"
            raise ValueError(f"{kind} requires {want} inputs, got: a {getattr(d, 'name', d)} tensor (argument `input_tensor`)")
        shape = _shape(x)
        if len(shape) < t.rank:
            raise ValueError(f"Shape {tuple(shape)} must have rank at least {t.rank} (argument `input_tensor`)")
        inner = shape[len(shape) - t.rank:]
        if fft_length is None:
            n = tuple(inner)
            if t.inverse:
                n = n[:-1] + (max(0, 2 * (n[-1] - 1)),)
        else:
            n = _fft_lengths(fft_length, t.rank, t.op_type)
        for i, v in enumerate(n):
            if v < 0:
                if t.inverse:
                    raise ValueError(f"Dimension {v // 2 + 1 if i == t.rank - 1 else v} must be >= 0 "
                                     f"(argument `fft_length` = {list(n)})")
                raise _bad(t.op_type, f"fft_length[{i}] must >= 0, but got: {v} (argument `fft_length`)")
        if 0 in n and 0 not in shape:
            raise _bad(t.op_type, f"argument `fft_length` = {list(n)} has a zero length for a non-empty input of "
                       f"shape {list(shape)} (TF's kernel aborts the process here)")
        return _call(p, t.op_type, x, rank=t.rank, n=n, inverse=t.inverse)

    return op


def _named(fn, name, doc, op_type):
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn._tf_types = (op_type,)
    return fn


def _make():
    out = {}
    for rank, suffix in ((1, ""), (2, "2d"), (3, "3d")):
        for inverse in (False, True):
            i = "I" if inverse else ""
            ct = Transform(f"{i}FFT{suffix.upper()}", rank, False, inverse)
            out[f"{i.lower()}fft{suffix}"] = _named(
                _complex_op(ct), f"{i.lower()}fft{suffix}",
                f"``tf.signal.{i.lower()}fft{suffix}``: the {'inverse ' if inverse else ''}FFT over the innermost "
                f"{rank} axes of a complex64/complex128 ``input``.", ct.op_type)
            rt = Transform(f"{i}RFFT{suffix.upper()}", rank, True, inverse)
            what = ("a complex64/complex128 half spectrum to real signals of ``fft_length``" if inverse
                    else "the FFT of real float32/float64 signals, the non-negative frequencies only")
            out[f"{i.lower()}rfft{suffix}"] = _named(
                _real_op(rt), f"{i.lower()}rfft{suffix}",
                f"``tf.signal.{i.lower()}rfft{suffix}``: {what}, over the innermost {rank} axes; ``fft_length`` "
                f"({rank} ints, default the input's) crops or zero-pads them.", rt.op_type)
    return out


_OPS = _make()
fft, ifft, fft2d, ifft2d, fft3d, ifft3d = (_OPS[n] for n in ("fft", "ifft", "fft2d", "ifft2d", "fft3d", "ifft3d"))
rfft, irfft, rfft2d, irfft2d, rfft3d, irfft3d = (_OPS[n] for n in ("rfft", "irfft", "rfft2d", "irfft2d", "rfft3d",
                                                                   "irfft3d"))


def _shift_axes(x, axes, sign: int, what: str):
    shape = _shape(x)
    nd = len(shape)
    if axes is None:
        ax: "tuple[int, ...]" = tuple(range(nd))
    else:
        v = getattr(axes, "_value", axes)
        flat = np.asarray(v).reshape(-1)
        if flat.size and flat.dtype.kind not in "iu":
            raise TypeError(f"Argument `axes` of {what} must be an int or a list of ints; got {axes!r}")
        ax = tuple(int(a) for a in flat)
    for a in ax:
        if not -nd <= a < nd:
            raise InvalidArgumentError(None, None, f"Argument `axes` of {what}: axis {a} is out of range for a "
                                       f"tensor of rank {nd} (shape {list(shape)}) [Op:Roll]")
    shift = tuple(sign * (shape[a % nd] // 2) for a in ax)
    return shift, ax


def fftshift(x, axes: "Optional[object]" = None, name=None):
    """``tf.signal.fftshift``: roll the zero frequency to the centre of ``axes`` (default all), as
    ``numpy.fft.fftshift``."""
    t = convert_to_tensor(x)
    shift, ax = _shift_axes(t, axes, 1, "fftshift")
    return _a.roll(t, list(shift), list(ax))


def ifftshift(x, axes: "Optional[object]" = None, name=None):
    """``tf.signal.ifftshift``: the inverse of ``fftshift`` (they differ for odd lengths)."""
    t = convert_to_tensor(x)
    shift, ax = _shift_axes(t, axes, -1, "ifftshift")
    return _a.roll(t, list(shift), list(ax))


fftshift._tf_types = ifftshift._tf_types = ("Roll",)

__all__ = ["Transform", "fft", "fft2d", "fft3d", "fftshift", "ifft", "ifft2d", "ifft3d", "ifftshift", "irfft",
           "irfft2d", "irfft3d", "rfft", "rfft2d", "rfft3d"]
