"""``tf.image``'s geometry: flips, transposes, rotations, crops and pads, their random forms, and
``extract_patches``.

As in TF, the deterministic ops are made of other ops (``reverse``, ``transpose``, ``slice``,
``pad``), so a tape records them as those ops and their gradients are the ops' own.  A crop or pad
takes its offsets and sizes as Python ints or concrete tensors (read on the host, as TF's eager
kernels do); a bad value raises TF's class for the kind of argument: ``ValueError`` for a Python
int (TF's static check), ``InvalidArgumentError`` for a tensor (TF's runtime assert).

The random ops draw with ``tapejax.random``'s seed rules (``uniform`` with an op ``seed``, or the
global stream) or, for ``stateless_*``, from a ``[2]`` seed tensor (``stateless_uniform``); the
drawn values then select through one op (``ImageRandomFlip``, ``ImageRandomCrop``).  TF's rules
hold (a 3-D image flips with probability 1/2, each image of a 4-D batch independently; a crop's
offset is uniform over the valid ones); the values differ from TF's (another generator).
"""
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import array as _a, indexing as _ix, math as _m, random as _r, rng as _rng
from ._registry import _call, _shape, prim, tf_types


def image_rank(image, *, ranks=(3, 4), what="image"):
    """``image``'s shape, after TF's checks: at least 3-D with positive inner dims, then one of
    ``ranks`` (ValueError, as TF's static shape checks)."""
    shape = _shape(image)
    if len(shape) < 3:
        raise ValueError(f"'{what}' (shape {list(shape)}) must be at least three-dimensional.")
    if any(d == 0 for d in shape[-3:]):
        raise ValueError(f"inner 3 dims of '{what}.shape' must be > 0: {list(shape)}")
    if ranks is not None and len(shape) not in ranks:
        raise ValueError(f"'{what}' (shape {list(shape)}) must have either 3 or 4 dimensions.")
    return shape


def host_int(v, arg):
    """A scalar argument as a Python int, and whether it was a tensor (TF checks a tensor's value
    with a runtime assert: InvalidArgumentError; a Python int statically: ValueError)."""
    if isinstance(v, (Tensor, Variable)):
        a = np.asarray(v.numpy())
        if a.shape != () or a.dtype.kind not in "iu":
            raise ValueError(f"argument `{arg}` must be a scalar integer; got shape {list(a.shape)}, "
                             f"dtype {a.dtype.name}")
        return int(a), True
    if isinstance(v, (bool, float)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"argument `{arg}` must be an int or an integer scalar tensor; got {v!r}")
    return int(v), False


def check(cond, msg, tensor):
    """TF's ``_assert``: a tensor argument's check fails at run time (InvalidArgumentError), a
    Python value's statically (ValueError)."""
    if not cond:
        if tensor:
            raise InvalidArgumentError(None, None, msg)
        raise ValueError(msg)


def _flip(image, axis):
    shape = image_rank(image)
    return _a.reverse(image, [axis + len(shape) - 3])


@tf_types("ReverseV2")
def flip_left_right(image):
    """``tf.image.flip_left_right``: reverse the width of a ``[h, w, c]`` or ``[b, h, w, c]`` image."""
    return _flip(image, 1)


@tf_types("ReverseV2")
def flip_up_down(image):
    """``tf.image.flip_up_down``: reverse the height."""
    return _flip(image, 0)


@tf_types("Transpose")
def transpose(image, name=None):
    """``tf.image.transpose``: swap height and width."""
    shape = image_rank(image)
    return _a.transpose(image, [1, 0, 2] if len(shape) == 3 else [0, 2, 1, 3])


@tf_types("ReverseV2", "Transpose")
def rot90(image, k=1, name=None):
    """``tf.image.rot90``: rotate counter-clockwise by ``k`` quarter turns."""
    shape = image_rank(image)
    if isinstance(k, (Tensor, Variable)) and len(k.shape) != 0:
        raise ValueError(f"Shapes must be equal rank, but are {len(k.shape)} and 0 (argument `k` must be a scalar)")
    k, _ = host_int(k, "k")
    k %= 4
    o = len(shape) - 3
    perm = list(range(o)) + [o + 1, o, o + 2]
    if k == 0:
        return _m.identity(image)
    if k == 1:
        return _a.reverse(_a.transpose(image, perm), [o])
    if k == 2:
        return _a.reverse(image, [o, o + 1])
    return _a.transpose(_a.reverse(image, [o]), perm)


def _as_batch(image):
    shape = _shape(image)
    if len(shape) not in (3, 4):
        raise ValueError(f"'image' (shape {list(shape)}) must have either 3 or 4 dimensions.")
    image_rank(image)
    return (1,) + tuple(shape) if len(shape) == 3 else tuple(shape), len(shape) == 3


class _BoxArg(NamedTuple):
    """A bounding-box argument: its value on the host, and whether it was given as a Tensor
    (TF then raises InvalidArgumentError where a Python int gives ValueError)."""

    value: int
    tensor: bool


def _box(offset_height, offset_width, target_height, target_width) -> "tuple[_BoxArg, ...]":
    """The four bounding-box arguments of ``crop_to_bounding_box`` / ``pad_to_bounding_box``."""
    return tuple(_BoxArg(*host_int(v, name)) for v, name in (
        (offset_height, "offset_height"), (offset_width, "offset_width"),
        (target_height, "target_height"), (target_width, "target_width")))


@tf_types("Slice")
def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """``tf.image.crop_to_bounding_box``: the ``[target_height, target_width]`` window at the offsets."""
    (_, h, w, _), single = _as_batch(image)
    (oh, toh), (ow, tow), (th, tth), (tw, ttw) = _box(offset_height, offset_width, target_height, target_width)
    check(ow >= 0, "offset_width must be >= 0.", tow)
    check(oh >= 0, "offset_height must be >= 0.", toh)
    check(tw > 0, "target_width must be > 0.", ttw)
    check(th > 0, "target_height must be > 0.", tth)
    check(w >= tw + ow, "width must be >= target + offset.", tow or ttw)
    check(h >= th + oh, "height must be >= target + offset.", toh or tth)
    if single:
        return _ix.slice(image, [oh, ow, 0], [th, tw, -1])
    return _ix.slice(image, [0, oh, ow, 0], [-1, th, tw, -1])


@tf_types("PadV2")
def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """``tf.image.pad_to_bounding_box``: zeros around ``image`` to ``[target_height, target_width]``."""
    (_, h, w, _), single = _as_batch(image)
    (oh, toh), (ow, tow), (th, tth), (tw, ttw) = _box(offset_height, offset_width, target_height, target_width)
    check(oh >= 0, "offset_height must be >= 0", toh)
    check(ow >= 0, "offset_width must be >= 0", tow)
    check(tw - ow - w >= 0, "width must be <= target - offset", tow or ttw)
    check(th - oh - h >= 0, "height must be <= target - offset", toh or tth)
    pads = [[oh, th - oh - h], [ow, tw - ow - w], [0, 0]]
    return _a.pad(image, pads if single else [[0, 0]] + pads)


@tf_types("Slice", "PadV2")
def resize_with_crop_or_pad(image, target_height, target_width):
    """``tf.image.resize_with_crop_or_pad``: center-crop and/or zero-pad to the target size."""
    (_, h, w, _), _single = _as_batch(image)
    th, tth = host_int(target_height, "target_height")
    tw, ttw = host_int(target_width, "target_width")
    check(tw > 0, "target_width must be > 0.", ttw)
    check(th > 0, "target_height must be > 0.", tth)
    dw, dh = tw - w, th - h
    cropped = crop_to_bounding_box(image, max(-dh // 2, 0), max(-dw // 2, 0), min(th, h), min(tw, w))
    return pad_to_bounding_box(cropped, max(dh // 2, 0), max(dw // 2, 0), th, tw)


@tf_types("Slice")
def central_crop(image, central_fraction):
    """``tf.image.central_crop``: the central ``central_fraction`` of height and width."""
    f = central_fraction
    if isinstance(f, (Tensor, Variable)):
        f = float(np.asarray(f.numpy()))
    f = float(f)
    if f <= 0.0 or f > 1.0:
        raise ValueError("central_fraction must be within (0, 1]")
    if f == 1.0:
        return image
    shape = image_rank(image, ranks=None)
    if len(shape) not in (3, 4):
        raise ValueError(f"`image` should either be a Tensor with rank = 3 or rank = 4. Had rank = {len(shape)}.")
    h, w = shape[-3], shape[-2]
    sh, sw = int((h - h * f) / 2), int((w - w * f) / 2)
    begin, size = [sh, sw, 0], [h - 2 * sh, w - 2 * sw, -1]
    if len(shape) == 4:
        begin, size = [0] + begin, [-1] + size
    return _ix.slice(image, begin, size)


# -- random flips and crops ----------------------------------------------------------------------

def _select_flip(u, x, *, axis, batched):
    flipped = jnp.flip(x, axis)
    if batched:   # (TF: round(u) per image; a 4-D batch flips each image on its own)
        return jnp.where(jnp.round(u).reshape(-1, 1, 1, 1) > 0, flipped, x)
    return jnp.where(u < 0.5, flipped, x)


_RANDOM_FLIP = prim("ImageRandomFlip", _select_flip)


def _random_flip(image, axis, draw):
    shape = image_rank(image)
    batched = len(shape) == 4
    u = draw([shape[0]] if batched else [])
    return _call(_RANDOM_FLIP, "ImageRandomFlip", u, image, axis=axis + len(shape) - 3, batched=batched)


def _stateful(seed):
    return lambda shape: _r.uniform(shape, 0, 1.0, seed=seed)


def _stateless(seed):
    return lambda shape: _rng.stateless_uniform(shape, seed, 0, 1.0)


@tf_types("ImageRandomFlip")
def random_flip_left_right(image, seed=None):
    """``tf.image.random_flip_left_right``: flip the width with probability 1/2 (per image)."""
    return _random_flip(image, 1, _stateful(seed))


@tf_types("ImageRandomFlip")
def random_flip_up_down(image, seed=None):
    """``tf.image.random_flip_up_down``: flip the height with probability 1/2 (per image)."""
    return _random_flip(image, 0, _stateful(seed))


@tf_types("ImageRandomFlip")
def stateless_random_flip_left_right(image, seed):
    """``tf.image.stateless_random_flip_left_right``: the same ``seed`` flips the same way."""
    return _random_flip(image, 1, _stateless(seed))


@tf_types("ImageRandomFlip")
def stateless_random_flip_up_down(image, seed):
    """``tf.image.stateless_random_flip_up_down``."""
    return _random_flip(image, 0, _stateless(seed))


def _crop_at(r, x, *, size):
    limit = jnp.asarray([d - s + 1 for d, s in zip(x.shape, size)], r.dtype)
    return lax.dynamic_slice(x, tuple(r % limit), size)


_RANDOM_CROP = prim("ImageRandomCrop", _crop_at)


def _random_crop(value, size, draw):
    shape = _shape(value)
    if isinstance(size, (Tensor, Variable)):
        size = np.asarray(size.numpy())
    size = tuple(int(s) for s in np.asarray(size).reshape(-1))
    if len(size) != len(shape):
        raise InvalidArgumentError(None, None, f"Incompatible shapes: [{len(shape)}] vs. [{len(size)}] (argument "
                                   f"`size` must give one size per dimension of `value`, shape {list(shape)})")
    if any(s > d or s < 0 for s, d in zip(size, shape)):
        raise InvalidArgumentError(None, None, f"Need value.shape >= size, got {list(shape)} vs {list(size)} "
                                   "(argument `size`)")
    r = draw(len(size))
    return _call(_RANDOM_CROP, "ImageRandomCrop", r, value, size=size)


@tf_types("ImageRandomCrop")
def random_crop(value, size, seed=None, name=None):
    """``tf.image.random_crop``: a ``size`` window of ``value`` at a uniform offset (any rank)."""
    return _random_crop(value, size, lambda n: _r.uniform([n], 0, 2 ** 31 - 1, dtype=_dtypes.int32, seed=seed))


@tf_types("ImageRandomCrop")
def stateless_random_crop(value, size, seed, name=None):
    """``tf.image.stateless_random_crop``: the same ``seed`` crops at the same offset."""
    return _random_crop(value, size, lambda n: _rng.stateless_uniform([n], seed, 0, 2 ** 31 - 1, dtype=_dtypes.int32))


# -- extract_patches ------------------------------------------------------------------------------

def _positions(n, k, s, r, padding):
    """Output length and the input positions of every window entry along one dimension (-1: pad)."""
    ke = (k - 1) * r + 1
    if padding == "VALID":
        out, start = max((n - ke) // s + 1, 0), 0
    else:
        out = -(-n // s)
        start = -(max((out - 1) * s + ke - n, 0) // 2)
    pos = start + np.arange(out)[:, None] * s + np.arange(k)[None, :] * r
    return out, np.where((pos >= 0) & (pos < n), pos, -1)


def _patches(x, *, sizes, strides, rates, padding):
    b, h, w, c = x.shape
    oh, ph = _positions(h, sizes[0], strides[0], rates[0], padding)
    ow, pw = _positions(w, sizes[1], strides[1], rates[1], padding)
    ok = (ph[:, None, :, None] >= 0) & (pw[None, :, None, :] >= 0)
    flat = np.where(ok, ph[:, None, :, None] * w + pw[None, :, None, :], h * w)   # [oh, ow, kh, kw]
    xs = jnp.concatenate([x.reshape(b, h * w, c), jnp.zeros((b, 1, c), x.dtype)], axis=1)
    return xs[:, flat.reshape(-1), :].reshape(b, oh, ow, sizes[0] * sizes[1] * c)


_PATCHES = prim("ExtractImagePatches", _patches)


def _four(v, arg):
    a = [int(t) for t in np.asarray(getattr(v, "_value", v)).reshape(-1)]
    if len(a) != 4 or min(a) < 1:
        raise ValueError(f"extract_patches: argument `{arg}` must be [1, rows, cols, 1] of positive ints; got {a}")
    if a[0] != 1 or a[3] != 1:
        raise InvalidArgumentError(None, None, f"Only support {arg} across space: argument `{arg}` must be "
                                   f"[1, rows, cols, 1]; got {a} [Op:ExtractImagePatches]")
    return tuple(a[1:3])


@tf_types("ExtractImagePatches")
def extract_patches(images, sizes, strides, rates, padding, name=None):
    """``tf.image.extract_patches``: every ``sizes`` window of a ``[b, h, w, c]`` batch (entries ``rates``
    apart, windows ``strides`` apart), flattened (rows, cols, channels) into the last dimension."""
    if padding not in ("SAME", "VALID"):
        raise InvalidArgumentError(None, None, f"Value for attr 'padding' of {padding!r} is not in the list of allowed "
                                   "values: 'SAME', 'VALID' (argument `padding` of extract_patches)")
    shape = _shape(images)
    if len(shape) != 4:
        raise InvalidArgumentError(None, None, f"input must be 4-dimensional (argument `images`); got shape "
                                   f"{list(shape)} [Op:ExtractImagePatches]")
    return _call(_PATCHES, "ExtractImagePatches", images, sizes=_four(sizes, "sizes"),
                 strides=_four(strides, "strides"), rates=_four(rates, "rates"), padding=padding)


__all__ = ["flip_left_right", "flip_up_down", "transpose", "rot90", "crop_to_bounding_box", "pad_to_bounding_box",
           "resize_with_crop_or_pad", "central_crop", "random_flip_left_right", "random_flip_up_down",
           "stateless_random_flip_left_right", "stateless_random_flip_up_down", "random_crop",
           "stateless_random_crop", "extract_patches"]
