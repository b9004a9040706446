"""Diagonals and bands of matrices (``tf.linalg.diag``, ``diag_part``, ``band_part``: TF's
``MatrixDiagV3`` / ``MatrixDiagPartV3`` with one diagonal or a band ``k = (lo, hi)``, and
``MatrixBandPart``), part of ``tf.linalg``."""
import jax.numpy as jnp
import numpy as np

from ..core.bind import bind
from ..core.tensor import Tensor
from ..core.variable import Variable
from ._registry import _bad, _shape, prim, tf_types

# A band is stored as [..., hi - lo + 1, max_diag_len], diagonal hi first.  A diagonal shorter
# than max_diag_len is aligned by ``align``: "RIGHT_LEFT" (TF's default) right-aligns
# superdiagonals (d >= 0) and left-aligns subdiagonals; the other three are as named.

_ALIGNS = ("LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT")


def _diag_offset(d, diag_len, max_len, align):
    right = ((align in ("RIGHT_LEFT", "RIGHT_RIGHT")) & (d >= 0)) | \
        ((align in ("LEFT_RIGHT", "RIGHT_RIGHT")) & (d <= 0))
    return np.where(right, max_len - diag_len, 0)


def _diag(d, pad, *, lo, hi, num_rows, num_cols, align):
    if lo == hi:
        d = d[..., None, :]
    width = d.shape[-1]
    m = np.arange(num_rows)[:, None]
    n = np.arange(num_cols)[None, :]
    k = n - m
    diag_len = np.minimum(num_cols - np.maximum(k, 0), num_rows + np.minimum(k, 0))
    at = n - np.maximum(k, 0) + _diag_offset(k, diag_len, width, align)
    on = (lo <= k) & (k <= hi) & (0 <= at) & (at < width)
    vals = d[..., np.where(on, hi - k, 0), np.where(on, at, 0)]
    return jnp.where(on, vals, jnp.asarray(pad, d.dtype))


_DIAG = prim("MatrixDiagV3", _diag)


def _diag_band(k, op_type):
    """(lo, hi) from TF's ``k``: an int, or one or two ints (a list, tuple or int Tensor)."""
    kk = np.asarray(k._value if isinstance(k, (Tensor, Variable)) else k).reshape(-1)
    if kk.dtype.kind not in "iu" or not 1 <= kk.size <= 2:
        raise _bad(op_type, f"diag_index must be an int or a pair of ints (argument `k`); got {k!r}")
    lo, hi = int(kk[0]), int(kk[-1])
    if lo > hi:
        raise _bad(op_type, f"lower_diag_index must not be larger than upper_diag_index: {lo} > {hi} "
                   "(argument `k`)")
    return lo, hi


def _diag_align(align, op_type):
    if align not in _ALIGNS:
        raise _bad(op_type, f"Value for attr 'align' of {align!r} is not in the list of allowed values: "
                   + ", ".join(f'"{a}"' for a in _ALIGNS) + " (argument `align`)")
    return align


def _pad_constant(padding_value):
    """TF gives ``padding_value`` no gradient: the tape sees it as a constant."""
    return padding_value._value if isinstance(padding_value, (Tensor, Variable)) else padding_value


@tf_types("MatrixDiagV3")
def diag(diagonal, name="diag", k=0, num_rows=-1, num_cols=-1, padding_value=0, align="RIGHT_LEFT"):
    """``tf.linalg.diag``: (batched) matrices with ``diagonal`` on diagonal ``k``, or on the band
    ``k = (lo, hi)`` (``diagonal`` then holds ``hi - lo + 1`` diagonals, ``hi`` first, aligned
    by ``align``); the rest is ``padding_value``.  An unset ``num_rows``/``num_cols`` is the
    smallest that fits (square when both are unset)."""
    lo, hi = _diag_band(k, "MatrixDiagV3")
    _diag_align(align, "MatrixDiagV3")
    shape = _shape(diagonal)
    if len(shape) < (1 if lo == hi else 2):
        raise _bad("MatrixDiagV3", f"diagonal must be at least {1 if lo == hi else 2}-dim, received "
                   f"shape: {list(shape)}")
    if lo != hi and shape[-2] != hi - lo + 1:
        raise _bad("MatrixDiagV3", f"The number of diagonals provided in the input does not match the "
                   f"lower_diag_index and upper_diag_index range: argument `diagonal` has {shape[-2]} "
                   f"diagonals, k={lo, hi} needs {hi - lo + 1}")
    width = shape[-1]
    min_rows, min_cols = width - min(hi, 0), width + max(lo, 0)
    rows, cols = int(num_rows), int(num_cols)
    if rows < 0 and cols < 0:
        rows = cols = max(min_rows, min_cols)
    elif rows < 0:
        rows = min_rows
    elif cols < 0:
        cols = min_cols
    if rows < min_rows:
        raise _bad("MatrixDiagV3", f"The number of rows is too small: num_rows={rows}, at least "
                   f"{min_rows} needed")
    if cols < min_cols:
        raise _bad("MatrixDiagV3", f"The number of columns is too small: num_cols={cols}, at least "
                   f"{min_cols} needed")
    if rows != min_rows and cols != min_cols:
        raise _bad("MatrixDiagV3", f"The number of rows or columns is not consistent with the specified "
                   f"d_lower, d_upper, and diagonal: num_rows={rows}, num_cols={cols} (one must be its "
                   f"minimum: {min_rows} rows or {min_cols} columns)")
    return bind(_DIAG, diagonal, _pad_constant(padding_value), lo=lo, hi=hi, num_rows=rows,
                num_cols=cols, align=align)


def _diag_part(x, pad, *, lo, hi, align):
    rows, cols = x.shape[-2], x.shape[-1]
    k = hi - np.arange(hi - lo + 1)[:, None]
    diag_len = np.minimum(cols - np.maximum(k, 0), rows + np.minimum(k, 0))
    max_len = int(diag_len.max())
    n = np.arange(max_len)[None, :]
    offset = _diag_offset(k, diag_len, max_len, align)
    i = n + np.maximum(-k, 0) - offset
    j = n + np.maximum(k, 0) - offset
    on = (0 <= i) & (i < rows) & (0 <= j) & (j < cols)
    out = jnp.where(on, x[..., np.where(on, i, 0), np.where(on, j, 0)], jnp.asarray(pad, x.dtype))
    return out[..., 0, :] if lo == hi else out


_DIAG_PART = prim("MatrixDiagPartV3", _diag_part)


@tf_types("MatrixDiagPartV3")
def diag_part(input, name="diag_part", k=0, padding_value=0, align="RIGHT_LEFT"):
    """``tf.linalg.diag_part``: diagonal ``k`` of the innermost matrices, or the band
    ``k = (lo, hi)`` as ``[..., hi - lo + 1, max_diag_len]`` (diagonal ``hi`` first, shorter
    diagonals aligned by ``align`` and filled with ``padding_value``)."""
    lo, hi = _diag_band(k, "MatrixDiagPartV3")
    _diag_align(align, "MatrixDiagPartV3")
    shape = _shape(input)
    if len(shape) < 2:
        raise _bad("MatrixDiagPartV3", f"input must be at least 2-dim, received shape: {list(shape)}")
    rows, cols = shape[-2], shape[-1]
    for which, d in (("lower", lo), ("upper", hi)):
        if not (-rows < d < cols or (d == 0 and rows * cols == 0)):
            raise _bad("MatrixDiagPartV3", f"{which}_diag_index is out of bound: {d}. It must be between "
                       f"{-rows} and {cols} (exclusive) for a {rows}x{cols} matrix (argument `k`)")
    return bind(_DIAG_PART, input, _pad_constant(padding_value), lo=lo, hi=hi, align=align)


def _band(x, *, lower, upper):
    m, n = x.shape[-2], x.shape[-1]
    i = jnp.arange(m)[:, None]
    j = jnp.arange(n)[None, :]
    keep = jnp.ones((m, n), bool)
    if lower >= 0:
        keep = keep & (i - j <= lower)
    if upper >= 0:
        keep = keep & (j - i <= upper)
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


_BAND = prim("MatrixBandPart", _band)


@tf_types("MatrixBandPart")
def band_part(input, num_lower, num_upper, name=None):
    """``tf.linalg.band_part``: keep ``num_lower`` sub- and ``num_upper`` super-diagonals (-1: all)."""
    if len(_shape(input)) < 2:
        raise _bad("MatrixBandPart", f"input must be at least 2-dim, received shape: {list(_shape(input))} "
                   "(argument `input`)")
    return bind(_BAND, input, lower=int(num_lower), upper=int(num_upper))


__all__ = ["diag", "diag_part", "band_part"]
