"""``tf.extract_volume_patches`` and ``tf.math.sobol_sample``.

``extract_volume_patches`` gathers every window of a 5-D ``[batch, planes, rows, cols, depth]``
input (zeros where SAME pads, TF's split of the padding: the smaller half first) and lays each
patch out as TF does, ``[planes, rows, cols, depth]`` flattened with depth fastest.  It is a
gather, so its gradient is the scatter-add back (TF's gradient of the op).

``sobol_sample`` is TF's Sobol sequence: Joe and Kuo's direction numbers (new-joe-kuo-6.21201),
without the initial all-zero point, ``skip`` points further on.  SciPy's unscrambled
``stats.qmc.Sobol`` uses the same direction numbers, so the points are TF's bit for bit (checked
in tests/parity/test_ops_nn_more.py); SciPy ships with JAX.  The result is data (no inputs to
differentiate), computed on the host.
"""
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, UnimplementedError
from ._registry import _call, _shape, prim, tf_types
from .pooling_more import _windows


def _volume_patches(x, *, ksizes, strides, padding):
    b, p, r, c, d = x.shape
    wins = [_windows(n, k, s, padding) for n, k, s in zip((p, r, c), ksizes, strides)]
    (op, wp), (orr, wr), (oc, wc) = wins
    valid = (wp[:, None, None, :, None, None] >= 0) & (wr[None, :, None, None, :, None] >= 0) & \
        (wc[None, None, :, None, None, :] >= 0)
    flat = np.where(valid, (wp[:, None, None, :, None, None] * r + wr[None, :, None, None, :, None]) * c
                    + wc[None, None, :, None, None, :], p * r * c)
    xs = jnp.concatenate([x.reshape(b, p * r * c, d), jnp.zeros((b, 1, d), x.dtype)], axis=1)
    return xs[:, flat.reshape(-1), :].reshape(b, op, orr, oc, int(np.prod(ksizes)) * d)


_VOLUME_PATCHES = prim("ExtractVolumePatches", _volume_patches)


def _five(v, arg):
    a = [int(t) for t in np.asarray(v).reshape(-1)]
    if len(a) == 5 and min(a) >= 1 and (a[0] != 1 or a[4] != 1):
        raise UnimplementedError(None, None, f"Only support {arg} across space: argument `{arg}` must be [1, planes, "
                                 f"rows, cols, 1]; got {a} [Op:ExtractVolumePatches]")
    if len(a) != 5 or min(a) < 1:
        raise ValueError(f"extract_volume_patches: argument `{arg}` must be [1, planes, rows, cols, 1] of positive "
                         f"ints; got {a}")
    return tuple(a[1:4])


@tf_types("ExtractVolumePatches")
def extract_volume_patches(input, ksizes, strides, padding, name=None):  # noqa: A002
    """``tf.extract_volume_patches``: the ``ksizes`` windows of a 5-D input every ``strides`` (``"SAME"``
    or ``"VALID"``), each flattened into the last dimension."""
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"extract_volume_patches: argument `padding` must be 'SAME' or 'VALID'; got {padding!r}")
    shape = _shape(input)
    if len(shape) != 5:
        raise InvalidArgumentError(None, None, f"input must be 5-dimensional (argument `input`); got shape "
                                   f"{list(shape)} [Op:ExtractVolumePatches]")
    k, s = _five(ksizes, "ksizes"), _five(strides, "strides")
    return _call(_VOLUME_PATCHES, "ExtractVolumePatches", input, ksizes=k, strides=s, padding=padding)


#: The dimensions Joe and Kuo's table (and so TF's and SciPy's Sobol sequence) covers.
_SOBOL_MAX_DIM = 21201


def sobol_sample(dim, num_results, skip=0, dtype=_dtypes.float32, name=None):
    """``tf.math.sobol_sample``: ``[num_results, dim]`` points of the Sobol sequence (TF's: see the
    module docstring), starting ``skip`` points in."""
    d = _dtypes.as_dtype(dtype)
    if d.name not in ("float32", "float64"):
        raise TypeError(f"sobol_sample: argument `dtype` must be float32 or float64; got {d.name}")
    dim, num_results, skip = (int(np.asarray(getattr(v, "_value", v))) for v in (dim, num_results, skip))
    if not 1 <= dim <= _SOBOL_MAX_DIM:
        raise InvalidArgumentError(None, None, f"dim must be in [1, {_SOBOL_MAX_DIM}] (argument `dim`); got {dim} "
                                   "[Op:SobolSample]")
    if num_results < 1:
        raise InvalidArgumentError(None, None, f"num_results must be at least 1 (argument `num_results`); got "
                                   f"{num_results} [Op:SobolSample]")
    if skip < 0:
        raise InvalidArgumentError(None, None, f"skip must be non-negative (argument `skip`); got {skip} "
                                   "[Op:SobolSample]")
    import warnings

    from scipy.stats import qmc
    gen = qmc.Sobol(dim, scramble=False)
    gen.fast_forward(skip + 1)   # (TF leaves out the first point, all zeros)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # (SciPy's note on non-powers of 2)
        pts = gen.random(num_results)
    return convert_to_tensor(pts.astype(_dtypes.storage_dtype(d._np, "dtype")))


sobol_sample._tf_types = ("SobolSample",)

__all__ = ["extract_volume_patches", "sobol_sample"]
