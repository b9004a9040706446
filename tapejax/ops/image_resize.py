"""``tf.image.resize`` (TF 2's: half-pixel centers), ``resize_with_pad``, ``crop_and_resize`` and
``ResizeMethod``.

Every method but nearest is separable: the output is ``W_h @ image @ W_w^T`` per channel, with
weight matrices that depend only on the sizes, so they are computed once on the host (NumPy, as
float32) and the op is two contractions that JAX differentiates (the transposed contractions are
TF's resize gradients).  The weights follow TF's kernels:

* ``bilinear``, ``bicubic`` (no antialias): TF's ``ResizeBilinear`` / ``ResizeBicubic`` with half-pixel
  centers are the triangle / Keys-cubic (a = -0.5) kernels sampled at ``(i + 0.5) * in / out``, with
  out-of-range taps dropped and the rest renormalised (``bilinear``'s clamp at the edges is the same
  thing);
* ``lanczos3``, ``lanczos5``, ``gaussian``, ``mitchellcubic`` and antialiased ``bilinear``/``bicubic``:
  TF's ``ScaleAndTranslate`` (its kernels and radii; with ``antialias`` and downsampling the kernel
  is widened by ``in / out``);
* ``area``: TF's ``ResizeArea``, the box average of ``[i * in / out, (i + 1) * in / out)`` (no half-pixel
  shift).  TF has no gradient for it (LookupError); tapejax gives the exact one (the weights'
  transpose): a deliberate improvement;
* ``nearest``: TF's ``ResizeNearestNeighbor``, input row ``min(floor((i + 0.5) * in / out), in - 1)``,
  a gather that keeps the dtype (every other method returns float32).

``jax.image.scale_and_translate`` computes the same weights for its kernels, but has neither TF's
gaussian nor mitchellcubic kernel, so the weights here are TF's formulas for all of them.
"""
import enum

import jax.numpy as jnp
import numpy as np

from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import array as _a
from ._registry import _call, _shape, prim, tf_types
from .image_geometry import check, host_int, image_rank, pad_to_bounding_box


class ResizeMethod(str, enum.Enum):
    """``tf.image.ResizeMethod``: the method names ``resize`` takes (a member or its string)."""
    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"
    BICUBIC = "bicubic"
    AREA = "area"
    LANCZOS3 = "lanczos3"
    LANCZOS5 = "lanczos5"
    GAUSSIAN = "gaussian"
    MITCHELLCUBIC = "mitchellcubic"

    def __str__(self):
        return self.value


def _keys(x, a=-0.5):
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0))


def _mitchell(x, b=1 / 3, c=1 / 3):
    return np.where(x < 1, ((12 - 9 * b - 6 * c) * x ** 3 + (-18 + 12 * b + 6 * c) * x ** 2 + (6 - 2 * b)) / 6,
                    np.where(x < 2, ((-b - 6 * c) * x ** 3 + (6 * b + 30 * c) * x ** 2 + (-12 * b - 48 * c) * x
                                     + (8 * b + 24 * c)) / 6, 0.0))


def _lanczos(r):
    return lambda x: np.where(x < r, np.sinc(x) * np.sinc(x / r), 0.0)


#: TF's sampling kernels (``sampling_kernels.h``): name -> (kernel of |x|, radius).
_KERNELS = {
    "triangle": (lambda x: np.maximum(0.0, 1.0 - x), 1.0),
    "keyscubic": (_keys, 2.0),
    "lanczos3": (_lanczos(3), 3.0),
    "lanczos5": (_lanczos(5), 5.0),
    "gaussian": (lambda x: np.where(x < 1.5, np.exp(-x * x / (2 * 0.5 ** 2)), 0.0), 1.5),
    "mitchellcubic": (_mitchell, 2.0),
}


def scale_weights(n_in, n_out, kernel, antialias):
    """``[n_out, n_in]`` weights of TF's ``ScaleAndTranslate`` along one axis (no translation), in
    float32 arithmetic as TF's kernel (a tap exactly at the kernel's radius counts or not by it)."""
    fn, radius = _KERNELS[kernel]
    f32 = np.float32
    inv_scale = f32(1.0 / float(f32(n_out) / f32(n_in)))
    kscale = max(inv_scale, f32(1.0)) if antialias else f32(1.0)
    reach = f32(f32(radius) * kscale)
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        sample = f32(f32(i + 0.5) * inv_scale)
        lo = int(np.clip(np.ceil(f32(sample - reach - f32(0.5))), 0, n_in - 1))
        hi = int(np.clip(np.floor(f32(sample + reach - f32(0.5))), 0, n_in - 1)) + 1
        pos = (np.arange(lo, hi, dtype=np.float32) + f32(0.5) - sample).astype(np.float32)
        k = fn(np.abs(pos / kscale).astype(np.float64))
        total = k.sum()
        w[i, lo:hi] = k / total if abs(total) >= 1000 * np.finfo(np.float32).tiny else k
    return w.astype(np.float32)


def bicubic_weights(n_in, n_out):
    """``[n_out, n_in]`` weights of TF's ``ResizeBicubic`` (half-pixel centers): Keys' kernel read
    from TF's 1024-entry table at the rounded fraction, out-of-range taps dropped, renormalised."""
    f32, table = np.float32, 1024
    scale = f32(f32(n_in) / f32(n_out))
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        x = f32(f32(f32(i) + f32(0.5)) * scale - f32(0.5))
        loc = int(np.floor(x))
        t = int(np.rint(f32(x - f32(loc)) * table)) / table
        taps = _keys(np.array([1 + t, t, 1 - t, 2 - t]))
        idx = np.arange(loc - 1, loc + 3)
        taps = np.where((idx >= 0) & (idx < n_in), taps, 0.0)
        total = taps.sum()
        taps = taps / total if abs(total) >= 1000 * np.finfo(np.float32).tiny else taps
        for j, v in zip(np.clip(idx, 0, n_in - 1), taps):
            w[i, j] += v
    return w.astype(np.float32)


def area_weights(n_in, n_out):
    """``[n_out, n_in]`` weights of TF's ``ResizeArea``: each input cell's overlap with the output's box."""
    s = n_in / n_out
    lo = np.arange(n_out)[:, None] * s
    hi = np.minimum(lo + s, n_in)
    src = np.arange(n_in)[None, :]
    return (np.clip(np.minimum(hi, src + 1) - np.maximum(lo, src), 0, None) / s).astype(np.float32)


def _separable(x, wh, ww):
    x = x.astype(jnp.float32)
    return jnp.einsum("oh,bhwc,pw->bopc", jnp.asarray(wh), x, jnp.asarray(ww))


def _weights(n_in, n_out, kernel, antialias):
    if kernel == "area":
        return area_weights(n_in, n_out)
    if kernel == "bicubic":
        return bicubic_weights(n_in, n_out)
    return scale_weights(n_in, n_out, kernel, antialias)


def _resize_sep(x, *, size, kernel, antialias):
    return _separable(x, _weights(x.shape[1], size[0], kernel, antialias),
                      _weights(x.shape[2], size[1], kernel, antialias))


def _nearest_index(n_in, n_out):
    scale = np.float32(n_in) / np.float32(n_out)
    return np.minimum(np.floor((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale).astype(np.int64),
                      n_in - 1)


def _resize_nearest(x, *, size):
    return x[:, _nearest_index(x.shape[1], size[0])][:, :, _nearest_index(x.shape[2], size[1])]


_OPS = {"bilinear": prim("ResizeBilinear", _resize_sep), "bicubic": prim("ResizeBicubic", _resize_sep),
        "area": prim("ResizeArea", _resize_sep), "scale": prim("ScaleAndTranslate", _resize_sep)}
_NEAREST = prim("ResizeNearestNeighbor", _resize_nearest)


def _size(size):
    if isinstance(size, (Tensor, Variable)):
        size = size.numpy()
    a = np.asarray(size)
    if a.dtype.kind not in "iu":
        raise ValueError("'size' must be a 1-D int32 Tensor")
    if a.shape != (2,):
        raise ValueError("'size' must be a 1-D Tensor of 2 elements: new_height, new_width")
    return int(a[0]), int(a[1])


def _method(method):
    m = method.value if isinstance(method, ResizeMethod) else method
    if m not in {e.value for e in ResizeMethod}:
        raise ValueError(f"Resize method is not implemented: {method}")
    return m


@tf_types("ResizeBilinear", "ResizeBicubic", "ResizeArea", "ResizeNearestNeighbor", "ScaleAndTranslate")
def resize(images, size, method=ResizeMethod.BILINEAR, preserve_aspect_ratio=False, antialias=False, name=None):
    """``tf.image.resize``: ``[h, w, c]`` or ``[b, h, w, c]`` images to ``size = [new_h, new_w]`` by ``method``
    (TF 2's half-pixel centers); float32 out except for ``nearest`` (the input's dtype)."""
    shape = _shape(images)
    if len(shape) not in (3, 4):
        raise ValueError("'images' must have either 3 or 4 dimensions.")
    nh, nw = _size(size)
    m = _method(method)
    h, w = shape[-3], shape[-2]
    if preserve_aspect_ratio:
        f = min(np.float32(nh) / np.float32(h), np.float32(nw) / np.float32(w))
        nh, nw = int(np.round(f * np.float32(h))), int(np.round(f * np.float32(w)))
    if nh <= 0 or nw <= 0:
        raise InvalidArgumentError(None, None, f"output dimensions must be positive (argument `size`); got "
                                   f"[{nh}, {nw}]")
    x = images if len(shape) == 4 else _a.expand_dims(images, 0)
    if m == "nearest":
        out = _call(_NEAREST, "ResizeNearestNeighbor", x, size=(nh, nw))
    else:
        aa = bool(antialias) and m != "area"   # (TF's ResizeArea ignores antialias)
        if m == "area" or (m in ("bilinear", "bicubic") and not aa):
            p, kernel = _OPS[m], {"bilinear": "triangle"}.get(m, m)
        else:
            p, kernel = _OPS["scale"], {"bilinear": "triangle", "bicubic": "keyscubic"}.get(m, m)
        out = _call(p, p.name, x, size=(nh, nw), kernel=kernel, antialias=aa)
    return out if len(shape) == 4 else _a.squeeze(out, [0])


@tf_types("ResizeBilinear", "PadV2")
def resize_with_pad(image, target_height, target_width, method=ResizeMethod.BILINEAR, antialias=False):
    """``tf.image.resize_with_pad``: resize keeping the aspect ratio, then zero-pad to the target size."""
    shape = _shape(image)
    if len(shape) not in (3, 4):
        raise ValueError(f"'image' (shape {list(shape)}) must have either 3 or 4 dimensions.")
    image_rank(image)
    th, tth = host_int(target_height, "target_height")
    tw, ttw = host_int(target_width, "target_width")
    check(tw > 0, "target_width must be > 0.", ttw)
    check(th > 0, "target_height must be > 0.", tth)
    h, w = np.float32(shape[-3]), np.float32(shape[-2])
    ratio = max(w / np.float32(tw), h / np.float32(th))
    rh, rw = h / ratio, w / ratio
    ph = max(0, int(np.floor((np.float32(th) - rh) / 2)))
    pw = max(0, int(np.floor((np.float32(tw) - rw) / 2)))
    resized = resize(image, [int(np.floor(rh)), int(np.floor(rw))], method, antialias=antialias)
    return pad_to_bounding_box(resized, ph, pw, th, tw)


__all__ = ["ResizeMethod", "resize", "resize_with_pad"]
