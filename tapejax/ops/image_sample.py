"""``tf.image.sample_distorted_bounding_box`` and ``stateless_sample_distorted_bounding_box``: a random
crop of an image that keeps enough of one of its objects (TF's ``SampleDistortedBoundingBoxV2``
rules, as in its kernel).

Up to ``max_attempts`` candidates: an aspect ratio ``w / h`` uniform in ``aspect_ratio_range``; a
height between the ones whose area (``h * round(h * ratio)`` pixels) is ``area_range`` of the
image's, uniform over the integers, nudged by one where rounding left the area outside the range;
an offset uniform over the positions inside the image.  The first candidate whose pixels cover at
least ``min_object_covered`` of one box (boxes in pixels truncated toward zero, as TF's) wins;
without one, the whole image.  The candidates are drawn and tested all at once (``[max_attempts]``
vectors, then the first success): one fixed-shape op, also inside ``tapejax.function``.

Random values: ``seed`` (stateful: TF's op seed, 0 meaning none; ``tapejax.random``'s rules) or the
``[2]`` seed of the stateless form, four uniforms per attempt.  TF draws from Philox with its own
sequence of calls, so the crops differ from TF's for the same seed; what TF promises holds (tested
against TF's own results in tests/parity/test_image_boxes.py): the crop lies in the image, its
aspect ratio and area are in range or it is the whole image, it covers a box as asked, the same
stateless seed gives the same crop.  The outputs have no gradient (None), as in TF.
"""
import collections

import jax.core
import jax.numpy as jnp
import numpy as np

from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import random as _r, rng as _rng
from ._registry import _call, _shape, dtype_of, prim, tf_types
from .image_nms import data_dtype, host_data

_TENSORISH = (Tensor, Variable)

SampleDistortedBoundingBoxV2 = collections.namedtuple("SampleDistortedBoundingBoxV2", ["begin", "size", "bboxes"])
StatelessSampleDistortedBoundingBox = collections.namedtuple("StatelessSampleDistortedBoundingBox",
                                                             ["begin", "size", "bboxes"])


def _lrint(x):
    return jnp.round(x).astype(jnp.int32)   # (lrintf: to nearest, halves to even)


def _candidates(u, height, width, *, area_range, aspect_ratio_range):
    """Every attempt's crop ``(y, x, h, w)`` and whether it met the area constraints (TF's
    ``GenerateRandomCrop``), from ``u[attempts, 4]`` uniforms in [0, 1)."""
    f32 = jnp.float32
    lo_ar, hi_ar = aspect_ratio_range
    ratio = u[:, 0] * f32(hi_ar - lo_ar) + f32(lo_ar)
    wf, hf = width.astype(f32), height.astype(f32)
    min_area = f32(area_range[0]) * wf * hf
    max_area = f32(area_range[1]) * wf * hf
    h = _lrint(jnp.sqrt(min_area / ratio))
    max_h = _lrint(jnp.sqrt(max_area / ratio))
    too_wide = _lrint(max_h * ratio) > width
    fitted = ((wf + f32(0.5)) / ratio).astype(jnp.int32)   # (TF: in double, less 1e-7; checked just below)
    fitted = jnp.where(_lrint(fitted * ratio) > width, fitted - 1, fitted)
    max_h = jnp.minimum(jnp.where(too_wide, fitted, max_h), height)
    h = jnp.minimum(h, max_h)
    h = h + jnp.where(h < max_h, jnp.floor(u[:, 1] * (max_h - h + 1).astype(f32)).astype(jnp.int32), 0)
    w = _lrint(h * ratio)
    area = (w * h).astype(f32)
    grow = area < min_area
    h = jnp.where(grow, h + 1, h)
    w = jnp.where(grow, _lrint(h * ratio), w)
    area = (w * h).astype(f32)
    shrink = area > max_area
    h = jnp.where(shrink, h - 1, h)
    w = jnp.where(shrink, _lrint(h * ratio), w)
    area = (w * h).astype(f32)
    ok = ((area >= min_area) & (area <= max_area) & (w <= width) & (h <= height) & (w > 0) & (h > 0)
          & (ratio > 0) & (f32(area_range[1]) > 0))
    y = jnp.where(h < height, jnp.floor(u[:, 2] * (height - h).astype(f32)).astype(jnp.int32), 0)
    x = jnp.where(w < width, jnp.floor(u[:, 3] * (width - w).astype(f32)).astype(jnp.int32), 0)
    return y, x, h, w, ok


def _covers(y, x, h, w, rects, min_covered):
    """TF's ``SatisfiesOverlapConstraints``: the crop has a pixel and covers ``min_covered`` of a box."""
    f32 = jnp.float32
    by0, bx0, by1, bx1 = (rects[:, k][None, :] for k in range(4))
    iy0, ix0 = jnp.maximum(y[:, None], by0), jnp.maximum(x[:, None], bx0)
    iy1, ix1 = jnp.minimum((y + h)[:, None], by1), jnp.minimum((x + w)[:, None], bx1)
    inter = jnp.where((iy0 > iy1) | (ix0 > ix1), 0, (iy1 - iy0) * (ix1 - ix0)).astype(f32)
    box_area = ((by1 - by0) * (bx1 - bx0)).astype(f32)
    covered = (box_area >= 1) & (inter / jnp.where(box_area >= 1, box_area, 1) >= min_covered)
    return ((w * h).astype(f32) >= 1) & jnp.any(covered, axis=1)


def _sample(u, image_size, boxes, min_covered, *, area_range, aspect_ratio_range):
    height, width = image_size[0].astype(jnp.int32), image_size[1].astype(jnp.int32)
    flat = boxes.reshape(-1, 4)
    if flat.shape[0]:
        rects = jnp.stack([(flat[:, 0] * height.astype(jnp.float32)).astype(jnp.int32),
                           (flat[:, 1] * width.astype(jnp.float32)).astype(jnp.int32),
                           (flat[:, 2] * height.astype(jnp.float32)).astype(jnp.int32),
                           (flat[:, 3] * width.astype(jnp.float32)).astype(jnp.int32)], 1)
    else:   # (use_image_if_no_bounding_boxes: the whole image is the object)
        rects = jnp.stack([jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), height, width])[None]
    y, x, h, w, ok = _candidates(u, height, width, area_range=area_range, aspect_ratio_range=aspect_ratio_range)
    ok = ok & _covers(y, x, h, w, rects, min_covered.astype(jnp.float32))
    first = jnp.argmax(ok)
    found = ok[first]
    y, x = jnp.where(found, y[first], 0), jnp.where(found, x[first], 0)
    h, w = jnp.where(found, h[first], height), jnp.where(found, w[first], width)
    dt = image_size.dtype
    begin = jnp.stack([y, x, jnp.zeros((), jnp.int32)]).astype(dt)
    size = jnp.stack([h, w, jnp.full((), -1, jnp.int32)]).astype(dt)
    hf, wf = height.astype(jnp.float32), width.astype(jnp.float32)
    bboxes = jnp.stack([y / hf, x / wf, (y + h) / hf, (x + w) / wf]).astype(jnp.float32).reshape(1, 1, 4)
    return begin, size, bboxes


_SAMPLE = prim("SampleDistortedBoundingBoxV2", _sample, differentiable=False, multiple_results=True)

_SIZE_DTYPES = ("uint8", "int8", "int16", "int32", "int64")


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _pair(v, default, arg, op):
    v = default if v is None else v
    a = [float(t) for t in np.asarray(v.numpy() if isinstance(v, _TENSORISH) else v, np.float64).reshape(-1)]
    if len(a) != 2:
        field = {"aspect_ratio_range": "Aspect ratio range", "area_range": "Area range"}[arg]
        raise _bad(op, f"{field} field must specify 2 dimensions (argument `{arg}`, got {a})")
    return tuple(a)


def _checked(op, image_size, bounding_boxes, min_object_covered, aspect_ratio_range, area_range, max_attempts,
             use_image_if_no_bounding_boxes):
    d = data_dtype(image_size)
    if d.kind in "iu" and not isinstance(image_size, _TENSORISH):
        d = np.dtype(np.int32)
    if d.name not in _SIZE_DTYPES:
        raise _bad(op, f"Value for attr 'T' of {d.name} is not in the list of allowed values: "
                   f"{', '.join(_SIZE_DTYPES)} (argument `image_size`)")
    image_size = host_data(image_size, d)
    ss = _shape(image_size)
    if len(ss) != 1:
        raise _bad(op, f"image_size must be 1-dimensional{list(ss)}")
    if ss[0] != 3:
        raise _bad(op, f"image_size must contain 3 elements{list(ss)}")
    bd = dtype_of(bounding_boxes) if isinstance(bounding_boxes, _TENSORISH) else None
    if bd is not None and bd != np.float32:
        raise ValueError(f"Tensor conversion requested dtype float32 for Tensor with dtype {bd.name} (argument "
                         "`bounding_boxes`)")
    boxes = host_data(bounding_boxes, np.float32)
    bs = _shape(boxes)
    if len(bs) != 3:
        raise _bad(op, f"input boxes must be 3-dimensional [batch, num_boxes, coords]: {list(bs)}")
    if bs[-1] != 4:
        raise _bad(op, f"bounding boxes must have shape [4] or [*, 4], got {list(bs)}")
    if not isinstance(boxes, _TENSORISH) or not isinstance(getattr(boxes, "_value", None), jax.core.Tracer):
        vals = np.asarray(boxes.numpy() if isinstance(boxes, _TENSORISH) else boxes)
        bad = vals[(vals < 0) | (vals > 1)]
        if bad.size:
            raise _bad(op, f"All bounding box coordinates must be in [0.0, 1.0]: {bad[0]} (argument `bounding_boxes`)")
    n_boxes = int(np.prod(bs[:-1]))
    if n_boxes == 0 and not use_image_if_no_bounding_boxes:
        raise _bad(op, "No bounding boxes provided as input. One must enable use_image_if_no_bounding_boxes if you "
                   "wish to not provide any bounding boxes.")
    mc = min_object_covered
    if isinstance(mc, _TENSORISH):
        if not isinstance(getattr(mc, "_value", None), jax.core.Tracer) and float(mc.numpy()) < 0:
            raise _bad(op, f"Min object covered must be non-negative: {float(mc.numpy())}")
    else:
        if float(mc) < 0:
            raise _bad(op, f"Min object covered must be non-negative: {float(mc)}")
        mc = np.float32(mc)
    ar = _pair(aspect_ratio_range, (0.75, 1.33), "aspect_ratio_range", op)
    if not (ar[0] > 0 and ar[1] > 0):
        raise _bad(op, f"Aspect ratio range must be non-negative: [{ar[0]:g}, {ar[1]:g}]")
    area = _pair(area_range, (0.05, 1.0), "area_range", op)
    if not (area[0] > 0 and area[1] > 0):
        raise _bad(op, f"Area range must be non-negative: [{area[0]:g}, {area[1]:g}]")
    if not (area[0] <= 1 and area[1] <= 1):
        raise _bad(op, f"Area range must be less then or equal to 1.0: [{area[0]:g}, {area[1]:g}]")
    attempts = 100 if max_attempts is None else int(max_attempts)
    if attempts <= 0:
        raise _bad(op, f"Max attempts must be non-negative: {attempts}")
    return image_size, boxes, mc, ar, area, attempts


@tf_types("SampleDistortedBoundingBoxV2")
def sample_distorted_bounding_box(image_size, bounding_boxes, seed=0, min_object_covered=0.1,
                                  aspect_ratio_range=None, area_range=None, max_attempts=None,
                                  use_image_if_no_bounding_boxes=None, name=None):
    """``tf.image.sample_distorted_bounding_box``: ``(begin, size, bboxes)`` of a random crop of an image
    of ``image_size`` ``[h, w, c]`` covering ``min_object_covered`` of one of ``bounding_boxes``
    (``[batch, n, 4]``, normalized); ``tf.slice(image, begin, size)`` cuts it.  ``seed`` 0: no op seed."""
    op = "SampleDistortedBoundingBoxV2"
    image_size, boxes, mc, ar, area, attempts = _checked(
        op, image_size, bounding_boxes, min_object_covered, aspect_ratio_range, area_range, max_attempts,
        use_image_if_no_bounding_boxes)
    u = _r.uniform([attempts, 4], 0, 1.0, seed=seed or None)
    out = _call(_SAMPLE, op, u, image_size, boxes, mc, area_range=area, aspect_ratio_range=ar)
    return SampleDistortedBoundingBoxV2(*out)


@tf_types("SampleDistortedBoundingBoxV2")
def stateless_sample_distorted_bounding_box(image_size, bounding_boxes, seed, min_object_covered=0.1,
                                            aspect_ratio_range=None, area_range=None, max_attempts=None,
                                            use_image_if_no_bounding_boxes=None, name=None):
    """``tf.image.stateless_sample_distorted_bounding_box``: the same ``[2]`` ``seed`` gives the same crop."""
    op = "StatelessSampleDistortedBoundingBox"
    image_size, boxes, mc, ar, area, attempts = _checked(
        op, image_size, bounding_boxes, min_object_covered, aspect_ratio_range, area_range, max_attempts,
        use_image_if_no_bounding_boxes)
    sshape = _shape(seed)
    if tuple(sshape) != (2,):
        raise _bad(op, f"seed must have shape [2], not {list(sshape)}")
    u = _rng.stateless_uniform([attempts, 4], seed, 0, 1.0)
    out = _call(_SAMPLE, op, u, image_size, boxes, mc, area_range=area, aspect_ratio_range=ar)
    return StatelessSampleDistortedBoundingBox(*out)


__all__ = ["sample_distorted_bounding_box", "stateless_sample_distorted_bounding_box"]
