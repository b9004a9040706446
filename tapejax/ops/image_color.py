"""``tf.image``'s dtype conversion, color spaces and photometric adjustments, and their random forms.

``convert_image_dtype`` is TF's rule table, as one pure function (``convert``) the other ops reuse:
integer to integer by shifting the scale (``floordiv`` down, ``multiply`` up, the cast first),
float to float by a cast, integer to float by ``1 / max``, float to integer by ``max + 0.5`` then a
(saturating, if asked) cast.  Each ``adjust_*`` op works as TF does: a float16/float32 image as it
is, any other dtype converted to float32 first and back afterwards (brightness, contrast and gamma
saturate on the way back; hue and saturation do not).  The HSV formulas are TF's kernels'
(``RGBToHSV``: hue in [0, 1), 0 for a gray pixel; ``HSVToRGB``); ``adjust_hue`` and
``adjust_saturation`` go through them.

Gradients: each op is one primitive and ``jax.vjp`` of it is its gradient.  TF registers none for
``AdjustContrastv2``, ``AdjustHue`` and ``AdjustSaturation`` (``tape.gradient`` raises LookupError);
tapejax gives the exact one (a deliberate improvement).  ``hsv_to_rgb`` has no gradient in TF
(``None``), nor here.

The ``random_*`` ops draw their factor with ``tapejax.random``'s seed rules (``uniform`` with an op
``seed``) and the ``stateless_*`` ones from a ``[2]`` seed (``stateless_uniform``), then adjust:
TF's construction, with another generator's values.
"""
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import FailedPreconditionError, InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import _grads as G, random as _r, rng as _rng
from ._registry import _call, _shape, dtype_of, prim, tf_types
from .image_geometry import image_rank
from .special import saturation_bounds


def _max(d):
    d = np.dtype(d)
    return np.iinfo(d).max if d.kind in "iu" else float(np.finfo(d).max)


def _saturate(x, d):
    """TF's ``saturate_cast`` of array ``x`` to dtype ``d`` (``special.saturation_bounds``)."""
    lo, hi = saturation_bounds(np.dtype(x.dtype), np.dtype(d))
    return jnp.clip(x, lo, hi).astype(np.dtype(d))


def convert(x, dtype, saturate=False):
    """TF's ``convert_image_dtype`` of array ``x`` to ``dtype`` (see the module docstring)."""
    d = np.dtype(dtype)
    if x.dtype == d:
        return x
    src_int, dst_int = x.dtype.kind in "iu", d.kind in "iu"
    if src_int and dst_int:
        s_in, s_out = _max(x.dtype), _max(d)
        if s_in > s_out:
            scaled = x // ((s_in + 1) // (s_out + 1))
            return _saturate(scaled, d) if saturate else scaled.astype(d)
        cast = _saturate(x, d) if saturate else x.astype(d)
        return cast * np.array((s_out + 1) // (s_in + 1), d)
    if not src_int and not dst_int:
        return x.astype(d)
    if src_int:
        return x.astype(d) * np.array(1.0 / _max(x.dtype), d)
    with np.errstate(over="ignore"):   # (float16 holds no int32 scale: inf, as TF's)
        scale = np.array(_max(d) + 0.5, x.dtype)
    scaled = x * scale
    return _saturate(scaled, d) if saturate else scaled.astype(d)


_CONVERT = prim("ConvertImageDtype", lambda x, *, dtype, saturate: convert(x, dtype, saturate))


def _dtype_name(image):
    d = dtype_of(image)
    return np.dtype(np.float32) if d is None else d


@tf_types("ConvertImageDtype")
def convert_image_dtype(image, dtype, saturate=False, name=None):
    """``tf.image.convert_image_dtype``: rescale between integer ranges ``[0, MAX]`` and floats in ``[0, 1)``."""
    d = _dtypes.as_dtype(dtype)
    if not (d.is_floating or d.is_integer):
        raise AttributeError("dtype must be either floating point or integer")
    src = _dtype_name(image)
    if src.kind not in "iuf" and src != np.dtype(jnp.bfloat16):
        raise AttributeError("image dtype must be either floating point or integer")
    store = _dtypes.storage_dtype(d._np, "dtype")
    return _call(_CONVERT, "ConvertImageDtype", image, dtype=np.dtype(store).name, saturate=bool(saturate))


def _as_float(x):
    return x if x.dtype in (jnp.float16, jnp.float32) else convert(x, jnp.float32)


def _channels3(image, op_type, exc: type = InvalidArgumentError):
    shape = _shape(image)
    if not shape or shape[-1] != 3:
        raise exc(None, None, f"input must have 3 channels but input only has {shape[-1] if shape else 0} channels "
                  f"(argument `image`, shape {list(shape)}) [Op:{op_type}]")
    return shape


# -- color spaces ---------------------------------------------------------------------------------

def rgb_hsv(x):
    """TF's ``RGBToHSV`` kernel on ``[..., 3]`` floats."""
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    v = jnp.max(x, -1)
    rng = v - jnp.min(x, -1)
    s = jnp.where(v > 0, rng / jnp.where(v > 0, v, 1), 0)
    safe = jnp.where(rng > 0, rng, 1)
    h = jnp.where(r == v, (g - b) / (6 * safe),
                  jnp.where(g == v, (b - r) / (6 * safe) + 2.0 / 6, (r - g) / (6 * safe) + 4.0 / 6))
    h = jnp.where(rng > 0, h, 0)
    h = jnp.where(h < 0, h + 1, h)
    return jnp.stack([h, s, v], -1).astype(x.dtype)


def hsv_rgb(x):
    """TF's ``HSVToRGB`` kernel on ``[..., 3]`` floats."""
    h, s, v = x[..., 0], x[..., 1], x[..., 2]
    dh = h * 6
    dr = jnp.clip(jnp.abs(dh - 3) - 1, 0, 1)
    dg = jnp.clip(2 - jnp.abs(dh - 2), 0, 1)
    db = jnp.clip(2 - jnp.abs(dh - 4), 0, 1)
    one_minus_s = 1 - s
    return jnp.stack([(one_minus_s + s * dr) * v, (one_minus_s + s * dg) * v, (one_minus_s + s * db) * v],
                     -1).astype(x.dtype)


_RGB_TO_HSV = prim("RGBToHSV", rgb_hsv)
_HSV_TO_RGB = prim("HSVToRGB", hsv_rgb, differentiable=False,
                   nondiff_reason="TF defines no gradient for HSVToRGB (tf.image.hsv_to_rgb)")


def _hsv_op(p, images):
    _channels3(images, p.name, FailedPreconditionError)   # (TF's kernel's class for this check)
    d = _dtype_name(images)
    if d.kind != "f" and d != np.dtype(jnp.bfloat16):
        raise InvalidArgumentError(None, None, f"Value for attr 'T' of {d.name} is not in the list of allowed "
                                   f"values: half, bfloat16, float, double (argument `images`) [Op:{p.name}]")
    return _call(p, p.name, images)


@tf_types("RGBToHSV")
def rgb_to_hsv(images, name=None):
    """``tf.image.rgb_to_hsv``: float RGB in [0, 1] to (hue, saturation, value), each in [0, 1]."""
    return _hsv_op(_RGB_TO_HSV, images)


@tf_types("HSVToRGB")
def hsv_to_rgb(images, name=None):
    """``tf.image.hsv_to_rgb``: the inverse of ``rgb_to_hsv`` (no gradient, as TF)."""
    return _hsv_op(_HSV_TO_RGB, images)


_MATRICES = {
    "yuv": np.array([[0.299, -0.14714119, 0.61497538], [0.587, -0.28886916, -0.51496512],
                     [0.114, 0.43601035, -0.10001026]]),
    "yuv_inv": np.array([[1, 1, 1], [0, -0.394642334, 2.03206185], [1.13988303, -0.58062185, 0]]),
    "yiq": np.array([[0.299, 0.59590059, 0.2115], [0.587, -0.27455667, -0.52273617],
                     [0.114, -0.32134392, 0.31119955]]),
    "yiq_inv": np.array([[1, 1, 1], [0.95598634, -0.27201283, -1.10674021], [0.6208248, -0.64720424, 1.70423049]]),
}
_COLOR_MATMUL = prim("ImageColorTransform", lambda x, *, space: x @ jnp.asarray(_MATRICES[space], x.dtype))


def _matrix_op(images, space):
    shape = _shape(images)
    if not shape or shape[-1] != 3:
        raise InvalidArgumentError(None, None, f"Matrix size-incompatible: In[0]: {list(shape)}, In[1]: [3,3] "
                                   "(argument `images` must have 3 channels) [Op:MatMul]")
    d = _dtype_name(images)
    if d.kind != "f" and d != np.dtype(jnp.bfloat16):
        raise TypeError(f"argument `images` must be a float tensor; got {d.name}")
    return _call(_COLOR_MATMUL, "MatMul", images, space=space)


@tf_types("ImageColorTransform")
def rgb_to_yuv(images):
    """``tf.image.rgb_to_yuv``: float RGB to YUV (Y in [0, 1], U and V centred on 0)."""
    return _matrix_op(images, "yuv")


@tf_types("ImageColorTransform")
def yuv_to_rgb(images):
    """``tf.image.yuv_to_rgb``."""
    return _matrix_op(images, "yuv_inv")


@tf_types("ImageColorTransform")
def rgb_to_yiq(images):
    """``tf.image.rgb_to_yiq``."""
    return _matrix_op(images, "yiq")


@tf_types("ImageColorTransform")
def yiq_to_rgb(images):
    """``tf.image.yiq_to_rgb``."""
    return _matrix_op(images, "yiq_inv")


def _gray(x):
    flt = convert(x, jnp.float32)
    gray = flt @ jnp.asarray([0.2989, 0.587, 0.114], jnp.float32)
    return convert(gray[..., None], x.dtype)


_GRAY = prim("RGBToGrayscale", _gray)


@tf_types("RGBToGrayscale")
def rgb_to_grayscale(images, name=None):
    """``tf.image.rgb_to_grayscale``: ``[..., 3]`` to ``[..., 1]`` (TF's weights 0.2989, 0.587, 0.114)."""
    shape = _shape(images)
    if not shape or shape[-1] != 3:
        raise InvalidArgumentError(None, None, f"Matrix size-incompatible: In[0]: {list(shape)}, In[1]: [3,1] "
                                   "(argument `images` must have 3 channels) [Op:MatMul]")
    return _call(_GRAY, "RGBToGrayscale", images)


_TILE3 = prim("GrayscaleToRGB", lambda x: jnp.concatenate([x, x, x], -1))


@tf_types("GrayscaleToRGB")
def grayscale_to_rgb(images, name=None):
    """``tf.image.grayscale_to_rgb``: repeat the single channel three times."""
    shape = _shape(images)
    if len(shape) < 2:
        raise ValueError(f"A grayscale image (shape {list(shape)}) must be at least two-dimensional.")
    if shape[-1] != 1:
        raise ValueError("Last dimension of a grayscale image should be size 1.")
    return _call(_TILE3, "GrayscaleToRGB", images)


# -- adjustments ----------------------------------------------------------------------------------

def _factor(v, image=None):
    """A scalar factor as an operand: a tensor as it is, a Python number as float32 (TF's cast)."""
    if isinstance(v, (Tensor, Variable)):
        return v
    return np.asarray(v, np.float32)


def _brightness(x, delta):
    f = _as_float(x)
    return convert(f + delta.astype(f.dtype), x.dtype, saturate=True)


def _contrast(x, factor):
    f = _as_float(x)
    mean = jnp.mean(f, axis=(-3, -2), keepdims=True)
    return convert((f - mean) * factor.astype(f.dtype) + mean, x.dtype, saturate=True)


def _gamma(x, gamma, gain):
    f = _as_float(x)
    return convert(gain.astype(f.dtype) * f ** gamma.astype(f.dtype), x.dtype, saturate=True)


def _hue(x, delta):
    f = _as_float(x)
    hsv = rgb_hsv(f.astype(jnp.float32))
    h = jnp.mod(hsv[..., 0] + delta.astype(jnp.float32), 1.0)
    out = hsv_rgb(jnp.stack([h, hsv[..., 1], hsv[..., 2]], -1)).astype(f.dtype)
    return convert(out, x.dtype)


def _saturation(x, scale):
    f = _as_float(x)
    hsv = rgb_hsv(f.astype(jnp.float32))
    s = jnp.clip(hsv[..., 1] * scale.astype(jnp.float32), 0.0, 1.0)
    out = hsv_rgb(jnp.stack([hsv[..., 0], s, hsv[..., 2]], -1)).astype(f.dtype)
    return convert(out, x.dtype)


_BRIGHTNESS = prim("AdjustBrightness", _brightness)
_CONTRAST = prim("AdjustContrastv2", _contrast)
_GAMMA = prim("AdjustGamma", _gamma)
_HUE = prim("AdjustHue", _hue)
_SATURATION = prim("AdjustSaturation", _saturation)


@tf_types("AdjustBrightness")
def adjust_brightness(image, delta):
    """``tf.image.adjust_brightness``: add ``delta`` (in the [0, 1] float scale; integer images saturate)."""
    return _call(_BRIGHTNESS, "AdjustBrightness", image, _factor(delta, image))


@tf_types("AdjustContrastv2")
def adjust_contrast(images, contrast_factor):
    """``tf.image.adjust_contrast``: ``(x - mean) * contrast_factor + mean``, the mean per image and channel."""
    shape = _shape(images)
    if len(shape) < 3:
        raise InvalidArgumentError(None, None, f"input must be at least 3-D, got shape {list(shape)} (argument "
                                   "`images`) [Op:AdjustContrastv2]")
    return _call(_CONTRAST, "AdjustContrastv2", images, _factor(contrast_factor, images))


@tf_types("AdjustGamma")
def adjust_gamma(image, gamma=1, gain=1):
    """``tf.image.adjust_gamma``: ``gain * image ** gamma`` (in the [0, 1] float scale)."""
    if isinstance(gamma, (Tensor, Variable)):
        if np.any(np.asarray(gamma.numpy()) < 0):
            raise InvalidArgumentError(None, None, "Gamma should be a non-negative real number. (argument `gamma`)")
    elif gamma < 0:
        raise ValueError("Gamma should be a non-negative real number.")
    return _call(_GAMMA, "AdjustGamma", image, _factor(gamma, image), _factor(gain, image))


@tf_types("AdjustHue")
def adjust_hue(image, delta, name=None):
    """``tf.image.adjust_hue``: rotate the hue by ``delta`` (a fraction of the color wheel, in [-1, 1])."""
    d = float(np.asarray(delta.numpy())) if isinstance(delta, (Tensor, Variable)) else float(delta)
    if d < -1 or d > 1:
        raise ValueError("delta must be in the interval [-1, 1]")
    _channels3(image, "AdjustHue")
    return _call(_HUE, "AdjustHue", image, _factor(delta, image))


@tf_types("AdjustSaturation")
def adjust_saturation(image, saturation_factor, name=None):
    """``tf.image.adjust_saturation``: scale the HSV saturation by ``saturation_factor`` (clipped to [0, 1])."""
    _channels3(image, "AdjustSaturation")
    return _call(_SATURATION, "AdjustSaturation", image, _factor(saturation_factor, image))


def _std(x):
    f = x.astype(jnp.float32)
    n = np.prod(f.shape[-3:])
    mean = jnp.mean(f, axis=(-3, -2, -1), keepdims=True)
    # TF's formula (``reduce_std``: the square of ``abs(f - mean)``): a constant image's gradient
    # is finite, TF's ``abs`` and ``sqrt`` conventions at 0 carrying it through the deviations
    std = G.sqrt(jnp.mean(jnp.square(G.tf_abs(f - mean)), axis=(-3, -2, -1), keepdims=True))
    return (f - mean) / G.maximum(std, np.float32(1.0 / np.sqrt(n)))   # (a tie: through ``std``, as TF)


_STANDARDIZE = prim("PerImageStandardization", _std)


@tf_types("PerImageStandardization")
def per_image_standardization(image):
    """``tf.image.per_image_standardization``: ``(x - mean) / max(stddev, 1 / sqrt(num_elements))`` per
    image, as float32."""
    image_rank(image, ranks=None)
    return _call(_STANDARDIZE, "PerImageStandardization", image)


# -- random adjustments ----------------------------------------------------------------------------

def _check_range(lower, upper):
    if upper <= lower:
        raise ValueError("upper must be > lower.")
    if lower < 0:
        raise ValueError("lower must be non-negative.")


def _check_delta(max_delta, hue=False):
    if hue and max_delta > 0.5:
        raise ValueError("max_delta must be <= 0.5.")
    if max_delta < 0:
        raise ValueError("max_delta must be non-negative.")


def random_brightness(image, max_delta, seed=None):
    """``tf.image.random_brightness``: ``adjust_brightness`` by a delta uniform in ``[-max_delta, max_delta)``."""
    _check_delta(max_delta)
    return adjust_brightness(image, _r.uniform([], -max_delta, max_delta, seed=seed))


def stateless_random_brightness(image, max_delta, seed):
    """``tf.image.stateless_random_brightness``: the same ``seed`` gives the same delta."""
    _check_delta(max_delta)
    return adjust_brightness(image, _rng.stateless_uniform([], seed, -max_delta, max_delta))


def random_contrast(image, lower, upper, seed=None):
    """``tf.image.random_contrast``: ``adjust_contrast`` by a factor uniform in ``[lower, upper)``."""
    _check_range(lower, upper)
    return adjust_contrast(image, _r.uniform([], lower, upper, seed=seed))


def stateless_random_contrast(image, lower, upper, seed):
    """``tf.image.stateless_random_contrast``."""
    _check_range(lower, upper)
    return adjust_contrast(image, _rng.stateless_uniform([], seed, lower, upper))


def random_saturation(image, lower, upper, seed=None):
    """``tf.image.random_saturation``: ``adjust_saturation`` by a factor uniform in ``[lower, upper)``."""
    _check_range(lower, upper)
    return adjust_saturation(image, _r.uniform([], lower, upper, seed=seed))


def stateless_random_saturation(image, lower, upper, seed=None):
    """``tf.image.stateless_random_saturation``."""
    _check_range(lower, upper)
    return adjust_saturation(image, _rng.stateless_uniform([], seed, lower, upper))


def random_hue(image, max_delta, seed=None):
    """``tf.image.random_hue``: ``adjust_hue`` by a delta uniform in ``[-max_delta, max_delta)`` (at most 0.5)."""
    _check_delta(max_delta, hue=True)
    return adjust_hue(image, _r.uniform([], -max_delta, max_delta, seed=seed))


def stateless_random_hue(image, max_delta, seed):
    """``tf.image.stateless_random_hue``."""
    _check_delta(max_delta, hue=True)
    return adjust_hue(image, _rng.stateless_uniform([], seed, -max_delta, max_delta))


for _f in (random_brightness, stateless_random_brightness):
    _f._tf_types = ("AdjustBrightness",)
for _f in (random_contrast, stateless_random_contrast):
    _f._tf_types = ("AdjustContrastv2",)
for _f in (random_saturation, stateless_random_saturation):
    _f._tf_types = ("AdjustSaturation",)
for _f in (random_hue, stateless_random_hue):
    _f._tf_types = ("AdjustHue",)

__all__ = ["convert_image_dtype", "rgb_to_hsv", "hsv_to_rgb", "rgb_to_yuv", "yuv_to_rgb", "rgb_to_yiq", "yiq_to_rgb",
           "rgb_to_grayscale", "grayscale_to_rgb", "adjust_brightness", "adjust_contrast", "adjust_gamma",
           "adjust_hue", "adjust_saturation", "per_image_standardization", "random_brightness",
           "stateless_random_brightness", "random_contrast", "stateless_random_contrast", "random_saturation",
           "stateless_random_saturation", "random_hue", "stateless_random_hue"]
