"""``tf.image``'s measures and filters: ``total_variation``, ``image_gradients``, ``sobel_edges``, ``psnr``,
``ssim`` and ``ssim_multiscale``.

Each is one primitive over a pure JAX function with TF's formulas, so ``jax.vjp`` of it is the
gradient TF's composed ops give:

* ``ssim``: TF's Gaussian window (``filter_size`` taps, ``filter_sigma``, normalised by a softmax over
  the window, as ``_fspecial_gauss``) applied per channel with VALID padding; luminance and
  contrast-structure terms with ``c1 = (k1 max_val)^2``, ``c2 = (k2 max_val)^2``; the mean over the
  valid window positions and then over channels.  Inputs go through ``convert_image_dtype`` to
  float32 first (so a uint8 pair with ``max_val=255`` is scaled as TF does);
* ``ssim_multiscale``: five scales (TF's ``power_factors``), each halving by a 2x2 average pool after a
  symmetric pad of an odd height or width; ``relu`` of the contrast-structure terms of the first
  scales and of the last scale's SSIM, raised to the factors and multiplied;
* ``psnr``: ``20 log10(max_val) - 10 log10(mse)`` per image, in float32.

The leading (batch) dimensions of two compared images broadcast, as TF's shape check allows.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import _grads as G
from ._registry import _call, _shape, dtype_of, prim, tf_types
from .image_color import convert


def _tv(x):
    # (TF's abs, whose derivative at 0 is sign(0) = 0: jnp.abs's is 1, which gave a flat image's
    # total variation a gradient)
    d1 = G.tf_abs(x[..., 1:, :, :] - x[..., :-1, :, :])
    d2 = G.tf_abs(x[..., :, 1:, :] - x[..., :, :-1, :])
    axes = None if x.ndim == 3 else (1, 2, 3)
    return jnp.sum(d1, axis=axes) + jnp.sum(d2, axis=axes)


_TV = prim("TotalVariation", _tv)


@tf_types("TotalVariation")
def total_variation(images, name=None):
    """``tf.image.total_variation``: the sum of absolute differences of neighbouring pixels (a scalar for
    one image, ``[batch]`` for a batch)."""
    if len(_shape(images)) not in (3, 4):
        raise ValueError("'images' must be either 3 or 4-dimensional.")
    return _call(_TV, "TotalVariation", images)


def _gradients(x):
    dy = jnp.concatenate([x[:, 1:] - x[:, :-1], jnp.zeros_like(x[:, :1])], 1)
    dx = jnp.concatenate([x[:, :, 1:] - x[:, :, :-1], jnp.zeros_like(x[:, :, :1])], 2)
    return dy, dx


_GRADIENTS = prim("ImageGradients", _gradients, multiple_results=True, pure_results=True)


@tf_types("ImageGradients")
def image_gradients(image):
    """``tf.image.image_gradients``: ``(dy, dx)`` forward differences of a ``[b, h, w, d]`` batch, zero in
    the last row / column."""
    shape = _shape(image)
    if len(shape) != 4:
        raise ValueError(f"image_gradients expects a 4D tensor [batch_size, h, w, d], not {list(shape)}.")
    dy, dx = _call(_GRADIENTS, "ImageGradients", image)
    return dy, dx


def _sobel(x):
    p = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
    h, w = x.shape[1], x.shape[2]

    def at(i, j):
        return p[:, i:i + h, j:j + w]
    gy = -at(0, 0) - 2 * at(0, 1) - at(0, 2) + at(2, 0) + 2 * at(2, 1) + at(2, 2)
    gx = -at(0, 0) + at(0, 2) - 2 * at(1, 0) + 2 * at(1, 2) - at(2, 0) + at(2, 2)
    return jnp.stack([gy, gx], -1)


_SOBEL = prim("SobelEdges", _sobel)


@tf_types("SobelEdges")
def sobel_edges(image):
    """``tf.image.sobel_edges``: ``[b, h, w, d, 2]``, the vertical and horizontal Sobel responses (the
    image reflected at its border)."""
    shape = _shape(image)
    if len(shape) != 4:
        raise ValueError(f"sobel_edges expects a 4-D image [batch_size, h, w, d]; got shape {list(shape)}")
    if shape[1] < 2 or shape[2] < 2:
        raise InvalidArgumentError(None, None, f"paddings must be less than the dimension size: 1, 1 not less than "
                                   f"{min(shape[1], shape[2])} (argument `image`, shape {list(shape)}) [Op:MirrorPad]")
    return _call(_SOBEL, "SobelEdges", image)


# -- psnr, ssim -----------------------------------------------------------------------------------

def _compatible(a, b, inner: type = ValueError):
    """TF's ``_verify_compatible_image_shapes``: both at least 3-D, the same inner 3 dims, leading dims
    that broadcast.  ``inner``: the class for unequal inner dims (``psnr`` meets them first in its
    ``SquaredDifference``: InvalidArgumentError)."""
    s1, s2 = _shape(a), _shape(b)
    for s in (s1, s2):
        if len(s) < 3:
            raise ValueError(f"Shape {list(s)} must have rank at least 3")
    if tuple(s1[-3:]) != tuple(s2[-3:]):
        msg = f"Shapes {list(s1[-3:])} and {list(s2[-3:])} are incompatible"
        raise ValueError(msg) if inner is ValueError else inner(None, None, msg)
    for d1, d2 in zip(reversed(s1[:-3]), reversed(s2[:-3])):
        if not (d1 == 1 or d2 == 1 or d1 == d2):
            raise ValueError(f"Two images are not compatible: {list(s1)} and {list(s2)}")
    return s1


def _floats(a, b, max_val):
    m = convert(jnp.asarray(max_val).astype(a.dtype), jnp.float32)
    return convert(a, jnp.float32), convert(b, jnp.float32), m


def _psnr(a, b, max_val):
    a, b, m = _floats(a, b, max_val)
    mse = jnp.mean(jnp.square(a - b), axis=(-3, -2, -1))
    return 20 * jnp.log(m) / jnp.log(10.0) - np.float32(10 / np.log(10)) * jnp.log(mse)


_PSNR = prim("PSNR", _psnr)


def _max_val(v, image):
    if isinstance(v, (Tensor, Variable)):
        return v
    d = dtype_of(image)
    return np.asarray(v, d if d is not None else np.float32)


def _pair_dtypes(a, b, op):
    da, db = dtype_of(a), dtype_of(b)
    if da is not None and db is not None and da != db:
        raise InvalidArgumentError(None, None, f"cannot compute {op} as input #1(zero-based) was expected to be a "
                                   f"{da.name} tensor but is a {db.name} tensor (arguments `a`/`img1` and "
                                   f"`b`/`img2` must share a dtype)")


@tf_types("PSNR")
def psnr(a, b, max_val, name=None):
    """``tf.image.psnr``: peak signal-to-noise ratio per image, ``max_val`` the dynamic range (255 for uint8)."""
    _compatible(a, b, InvalidArgumentError)
    _pair_dtypes(a, b, "SquaredDifference")
    return _call(_PSNR, "PSNR", a, b, _max_val(max_val, a))


def _gauss(size, sigma):
    coords = jnp.arange(size, dtype=sigma.dtype) - (size - 1) / 2.0
    g = jnp.square(coords) * (-0.5 / jnp.square(sigma))
    g2 = (g[None, :] + g[:, None]).reshape(-1)
    return jax.nn.softmax(g2).reshape(size, size)


def _ssim_channels(x, y, max_val, size, sigma, k1, k2):
    """Per-channel SSIM map and contrast-structure map of two ``[..., h, w, c]`` float images."""
    x, y = jnp.broadcast_arrays(x, y)
    head, (h, w, c) = x.shape[:-3], x.shape[-3:]
    kernel = jnp.tile(_gauss(size, jnp.asarray(sigma, x.dtype))[:, :, None, None], (1, 1, 1, c))

    def reducer(z):
        z = z.reshape((-1, h, w, c))
        out = lax.conv_general_dilated(z, kernel, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                       feature_group_count=c)
        return out.reshape(head + out.shape[1:])
    c1, c2 = (k1 * max_val) ** 2, (k2 * max_val) ** 2
    mean0, mean1 = reducer(x), reducer(y)
    num0 = mean0 * mean1 * 2.0
    den0 = jnp.square(mean0) + jnp.square(mean1)
    luminance = (num0 + c1) / (den0 + c1)
    num1 = reducer(x * y) * 2.0
    den1 = reducer(jnp.square(x) + jnp.square(y))
    cs = (num1 - num0 + c2) / (den1 - den0 + c2)
    return luminance * cs, cs


def _ssim(a, b, max_val, *, size, sigma, k1, k2, index_map):
    a, b, m = _floats(a, b, max_val)
    val, _ = _ssim_channels(a, b, m, size, sigma, k1, k2)
    if not index_map:
        val = jnp.mean(val, axis=(-3, -2))
    return jnp.mean(val, axis=-1)


_SSIM = prim("SSIM", _ssim)


def _check_window(shape, size):
    if shape[-3] < size or shape[-2] < size:
        raise InvalidArgumentError(None, None, f"assertion failed: image height and width ({shape[-3]}, {shape[-2]}) "
                                   f"must be at least filter_size ({size}) (argument `filter_size`)")


@tf_types("SSIM")
def ssim(img1, img2, max_val, filter_size=11, filter_sigma=1.5, k1=0.01, k2=0.03, return_index_map=False):
    """``tf.image.ssim``: structural similarity per image (``[...]``), or its map over the window
    positions with ``return_index_map=True``."""
    shape = _compatible(img1, img2)
    _pair_dtypes(img1, img2, "SSIM")
    size = int(filter_size)
    _check_window(shape, size)
    return _call(_SSIM, "SSIM", img1, img2, _max_val(max_val, img1), size=size, sigma=float(filter_sigma),
                 k1=float(k1), k2=float(k2), index_map=bool(return_index_map))


#: TF's ``_MSSSIM_WEIGHTS`` (Wang, Simoncelli and Bovik's five scales).
MSSSIM_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)


def _ms_ssim(a, b, max_val, *, power_factors, size, sigma, k1, k2):
    a, b, m = _floats(a, b, max_val)
    a, b = jnp.broadcast_arrays(a, b)
    mcs = []
    val = jnp.zeros(())
    for k in range(len(power_factors)):
        if k > 0:
            head, (h, w, c) = a.shape[:-3], a.shape[-3:]
            pad = ((0, 0), (0, h % 2), (0, w % 2), (0, 0))

            def down(z):
                z = jnp.pad(z.reshape((-1, h, w, c)), pad, mode="symmetric")
                hh, ww = z.shape[1] // 2, z.shape[2] // 2
                z = z[:, :2 * hh, :2 * ww].reshape(-1, hh, 2, ww, 2, c).mean(axis=(2, 4))
                return z.reshape(head + z.shape[1:])
            a, b = down(a), down(b)
        val, cs = _ssim_channels(a, b, m, size, sigma, k1, k2)
        val, cs = jnp.mean(val, axis=(-3, -2)), jnp.mean(cs, axis=(-3, -2))
        mcs.append(jax.nn.relu(cs))
    mcs.pop()
    stacked = jnp.stack(mcs + [jax.nn.relu(val)], axis=-1)
    ms = jnp.prod(stacked ** jnp.asarray(power_factors, stacked.dtype), axis=-1)
    return jnp.mean(ms, axis=-1)


_MS_SSIM = prim("MSSSIM", _ms_ssim)


@tf_types("MSSSIM")
def ssim_multiscale(img1, img2, max_val, power_factors=MSSSIM_WEIGHTS, filter_size=11, filter_sigma=1.5, k1=0.01,
                    k2=0.03):
    """``tf.image.ssim_multiscale``: MS-SSIM over ``len(power_factors)`` scales (each half the last)."""
    shape = _compatible(img1, img2)
    _pair_dtypes(img1, img2, "MSSSIM")
    size = int(filter_size)
    factors = tuple(float(f) for f in np.asarray(getattr(power_factors, "_value", power_factors)).reshape(-1))
    h, w = shape[-3], shape[-2]
    for _ in range(len(factors) - 1):
        h, w = (h + h % 2) // 2, (w + w % 2) // 2
    _check_window((h, w, 1), size)
    return _call(_MS_SSIM, "MSSSIM", img1, img2, _max_val(max_val, img1), power_factors=factors, size=size,
                 sigma=float(filter_sigma), k1=float(k1), k2=float(k2))


__all__ = ["total_variation", "image_gradients", "sobel_edges", "psnr", "ssim", "ssim_multiscale"]
