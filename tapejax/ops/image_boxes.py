"""``tf.image``'s ops on boxes of pixels: ``crop_and_resize``, ``draw_bounding_boxes`` and
``extract_glimpse``.

``crop_and_resize`` samples each box (``[y1, x1, y2, x2]`` in normalized coordinates, of the image
``box_indices`` names) at ``crop_size`` points, TF's ``CropAndResize`` rules: sample row ``y`` of a
box is at ``y1 * (h - 1) + y * (y2 - y1) * (h - 1) / (crop_h - 1)`` (the box's center when
``crop_h`` is 1), and a sample outside ``[0, h - 1]`` is ``extrapolation_value``; ``bilinear`` mixes
the pixels at ``floor`` and ``ceil`` of the position, ``nearest`` takes the rounded one (halves away
from zero).  It is gathers and arithmetic in JAX, so the gradients are JAX's: with respect to the
image (TF's ``CropAndResizeGradImage``: the transposed gathers, in the image's float dtype) and to
the boxes (TF's ``CropAndResizeGradBoxes``: the derivative of the bilinear sample's position, zero
outside the image and at integer positions, where ``floor == ceil``).  TF computes the boxes'
gradient of the *bilinear* sampler for ``nearest`` too; a ``jax.custom_jvp`` does the same here.
``box_indices`` and ``crop_size`` have no gradient (None), as in TF.  Every image dtype TF takes
gives float32.

Known difference: where TF's float32 sample position is exactly an integer (``floor == ceil``: no
box gradient from that sample) and XLA's compiled gradient program computes it one ulp away, the
boxes' gradient gets that sample's one-sided difference (seen for a 1 x 5 crop of a zero-height box
batched with another box); values and the image's gradient are not affected.

``draw_bounding_boxes`` paints each box's outline (rows and columns at ``int(y * (h - 1))`` ...,
truncated toward zero as TF's kernel) in the box's color (``colors[i % len(colors)]``, TF's default
table without colors), a later box over an earlier one; boxes inverted or wholly outside the image
are skipped, as TF (which logs a warning).  TF registers no gradient for it (LookupError).

``extract_glimpse`` cuts a fixed-size window per image at an offset (TF's ``ExtractGlimpses``
conventions: the offset truncated toward zero, the part of a window past an edge filled with noise);
one gather and a mask, so any offsets run in one compiled op.  Its noise is drawn from
``tapejax.random``'s global stream (TF's op takes no seed), so those values differ from TF's.
"""
import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.errors import InvalidArgumentError, OutOfRangeError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import random as _r
from ._registry import _call, _shape, dtype_of, prim, tf_types
from .image_nms import data_dtype, host_data, no_gradient

_TENSORISH = (Tensor, Variable)


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


# -- crop_and_resize ------------------------------------------------------------------------------

def _positions(lo, hi, n_in, n_out, grad=False):
    """Sample positions ``[boxes, n_out]`` along one axis and their validity, in TF's float32 steps:
    ``CropAndResize`` divides ``(hi - lo) * (n_in - 1)`` by ``n_out - 1`` (an optimization barrier
    keeps XLA from multiplying by a reciprocal of the broadcast divisor instead, which moves positions by an ulp), and
    ``CropAndResizeGradBoxes`` (``grad``) multiplies ``hi - lo`` by the ratio, which puts some positions
    an ulp apart; where that crosses an integer, the gradient's pixel pair differs, so each follows
    its kernel."""
    if n_out > 1:
        if grad:
            scale = (hi - lo) * np.float32(np.float32(n_in - 1) / np.float32(n_out - 1))
        else:
            num, den = lax.optimization_barrier(((hi - lo) * (n_in - 1), jnp.full(lo.shape, n_out - 1, jnp.float32)))
            scale = num / den
        start, step = lax.optimization_barrier((lo[:, None] * (n_in - 1),   # (no fused multiply-add either)
                                                jnp.arange(n_out, dtype=jnp.float32)[None, :] * scale[:, None]))
        pos = start + step
    else:
        pos = (0.5 * (lo + hi) * (n_in - 1))[:, None]
    return pos, (pos >= 0) & (pos <= n_in - 1)


def _grid(boxes, shape, crop_size, grad=False):
    _, h, w, _ = shape
    y, vy = _positions(boxes[:, 0], boxes[:, 2], h, crop_size[0], grad)
    x, vx = _positions(boxes[:, 1], boxes[:, 3], w, crop_size[1], grad)
    return y, x, vy[:, :, None, None] & vx[:, None, :, None]


def _bilinear(image, box_ind, y, x):
    _, h, w, _ = image.shape
    top, bottom = jnp.floor(y), jnp.ceil(y)
    left, right = jnp.floor(x), jnp.ceil(x)
    ylerp = (y - top)[:, :, None, None]
    xlerp = (x - left)[:, None, :, None]
    n = box_ind[:, None, None]

    def at(rows, cols):
        r = jnp.clip(rows, 0, h - 1).astype(jnp.int32)[:, :, None]
        c = jnp.clip(cols, 0, w - 1).astype(jnp.int32)[:, None, :]
        return image[n, r, c]

    t = at(top, left) + (at(top, right) - at(top, left)) * xlerp
    b = at(bottom, left) + (at(bottom, right) - at(bottom, left)) * xlerp
    return t + (b - t) * ylerp


def _nearest(image, box_ind, y, x):
    _, h, w, _ = image.shape
    r = jnp.clip(jnp.floor(y + 0.5), 0, h - 1).astype(jnp.int32)[:, :, None]   # (roundf: halves away from 0)
    c = jnp.clip(jnp.floor(x + 0.5), 0, w - 1).astype(jnp.int32)[:, None, :]
    return image[box_ind[:, None, None], r, c]


_SAMPLERS = {"bilinear": _bilinear, "nearest": _nearest}


def _crop_fn(image, boxes, box_ind, crop_size, method, extrapolation_value):
    y, x, valid = _grid(boxes, image.shape, crop_size)
    return jnp.where(valid, _SAMPLERS[method](image, box_ind, y, x), jnp.float32(extrapolation_value))


def _crop_jvp(crop_size, method, extrapolation_value, primals, tangents):
    """TF's gradients: the image's through the sampled pixels (``CropAndResizeGradImage``, the forward's
    positions); the boxes' of the *bilinear* sampler whatever the method, at the positions of
    ``CropAndResizeGradBoxes``."""
    image, boxes, box_ind = primals
    dimage, dboxes, _ = tangents
    out = _crop_fn(image, boxes, box_ind, crop_size, method, extrapolation_value)
    y, x, valid = _grid(boxes, image.shape, crop_size)
    d_image = jnp.where(valid, _SAMPLERS[method](dimage, box_ind, y, x), 0.0)

    def at_grad_positions(b):
        gy, gx, gvalid = _grid(b, image.shape, crop_size, grad=True)
        return jnp.where(gvalid, _bilinear(image, box_ind, gy, gx), 0.0)

    _, d_boxes = jax.jvp(at_grad_positions, (boxes,), (dboxes,))
    return out, d_image + d_boxes


_crop = jax.custom_jvp(_crop_fn, nondiff_argnums=(3, 4, 5))
_crop.defjvp(_crop_jvp)


def _crop_and_resize(image, boxes, box_ind, *, crop_size, method, extrapolation_value):
    return _crop(image.astype(jnp.float32), boxes, box_ind, crop_size, method, extrapolation_value)


_CROP_AND_RESIZE = prim("CropAndResize", _crop_and_resize)

_IMAGE_DTYPES = ("uint8", "uint16", "int8", "int16", "int32", "int64", "float16", "float32", "float64")


def _concrete(x):
    return not (isinstance(x, _TENSORISH) and (isinstance(x._meta, jax.core.Tracer)
                                               or isinstance(getattr(x, "_value", None), jax.core.Tracer)))


def _exact_dtype(x, want, arg):
    """TF's conversion of an argument to a fixed dtype: a tensor of another dtype is a ValueError."""
    d = dtype_of(x) if isinstance(x, _TENSORISH) else None
    if d is not None and d != np.dtype(want):
        raise ValueError(f"Tensor conversion requested dtype {np.dtype(want).name} for Tensor with dtype {d.name} "
                         f"(argument `{arg}`)")
    if d is None:
        a = np.asarray(x)
        if a.size and a.dtype.kind == "f" and np.dtype(want).kind != "f":
            raise TypeError(f"Cannot convert {x!r} to EagerTensor of dtype {np.dtype(want).name} (argument `{arg}`)")
        return a.astype(want)
    return x


@tf_types("CropAndResize")
def crop_and_resize(image, boxes, box_indices, crop_size, method="bilinear", extrapolation_value=0.0, name=None):
    """``tf.image.crop_and_resize``: ``[num_boxes, crop_h, crop_w, depth]`` float32 crops of the
    ``[batch, h, w, depth]`` images, box ``i`` cut from image ``box_indices[i]`` and resized by
    ``method`` (``bilinear`` or ``nearest``)."""
    op = "CropAndResize"
    if not isinstance(extrapolation_value, (int, float, np.number)) or isinstance(extrapolation_value, bool):
        raise TypeError(f"Expected float for argument 'extrapolation_value' not {extrapolation_value!r}.")
    d = data_dtype(image)
    if d.name not in _IMAGE_DTYPES:
        raise _bad(op, f"Value for attr 'T' of {d.name} is not in the list of allowed values: "
                   f"{', '.join(_IMAGE_DTYPES)} (argument `image`)")
    if not isinstance(image, _TENSORISH):
        image = np.asarray(image, np.float32 if d == np.float64 else d)
    boxes = _exact_dtype(boxes, np.float32, "boxes")
    box_indices = _exact_dtype(box_indices, np.int32, "box_indices")
    size = crop_size.numpy() if isinstance(crop_size, _TENSORISH) else crop_size
    size = _exact_dtype(size, np.int32, "crop_size")
    if method not in ("bilinear", "nearest"):
        raise _bad(op, f'Value for attr \'method\' of "{method}" is not in the list of allowed values: "bilinear", '
                   '"nearest" (argument `method`)')
    ishape, bshape, ind_shape = _shape(image), _shape(boxes), _shape(box_indices)
    if len(ishape) != 4:
        raise _bad(op, f"input image must be 4-D{list(ishape)} (argument `image`)")
    if min(ishape[1:3]) <= 0:
        raise _bad(op, f"image dimensions must be positive (argument `image`, shape {list(ishape)})")
    if len(bshape) != 2:
        raise _bad(op, f"boxes must be 2-D, got: {list(bshape)}")
    if bshape[1] != 4:
        raise _bad(op, f"boxes must have 4 columns (argument `boxes`, shape {list(bshape)})")
    if tuple(ind_shape) != (bshape[0],):
        raise _bad(op, f"box_index has incompatible shape (argument `box_indices`, shape {list(ind_shape)}; expected "
                   f"[{bshape[0]}])")
    if size.shape != (2,):
        raise _bad(op, f"crop_size must have two elements{list(size.shape)}")
    ch, cw = int(size[0]), int(size[1])
    if ch <= 0 or cw <= 0:
        raise _bad(op, f"crop dimensions must be positive (argument `crop_size`, got [{ch}, {cw}])")
    if _concrete(box_indices) and bshape[0]:
        ind = np.asarray(box_indices.numpy() if isinstance(box_indices, _TENSORISH) else box_indices)
        if ind.min() < 0 or ind.max() >= ishape[0]:
            raise OutOfRangeError(None, None, f"box_index has values outside [0, batch_size) (argument `box_indices`, "
                                  f"batch_size {ishape[0]}) [Op:{op}]")
    return _call(_CROP_AND_RESIZE, op, image, boxes, box_indices, crop_size=(ch, cw), method=method,
                 extrapolation_value=float(extrapolation_value))


# -- draw_bounding_boxes --------------------------------------------------------------------------

#: TF's default colors (``draw_bounding_box_op.cc``), RGBA.
DEFAULT_COLORS = np.array([[1, 1, 0, 1], [0, 0, 1, 1], [1, 0, 0, 1], [0, 1, 0, 1], [0.5, 0, 0.5, 1], [0.5, 0.5, 0, 1],
                           [0.5, 0, 0, 1], [0, 0, 0.5, 1], [0, 1, 1, 1], [1, 0, 1, 1]], np.float32)


def _draw(images, boxes, colors):
    b, h, w, depth = images.shape
    rows = jnp.arange(h)[:, None]
    cols = jnp.arange(w)[None, :]

    def paint(i, painter):   # painter[b, h, w]: the last box drawn over each pixel (-1: none)
        box = boxes[:, i]                                     # [b, 4]
        t = lambda v, n: (v * jnp.float32(n - 1)).astype(jnp.int32)[:, None, None]   # noqa: E731 (trunc toward 0)
        r0, c0, r1, c1 = t(box[:, 0], h), t(box[:, 1], w), t(box[:, 2], h), t(box[:, 3], w)
        skip = (r0 > r1) | (c0 > c1) | (r0 >= h) | (r1 < 0) | (c0 >= w) | (c1 < 0)
        in_cols = (cols >= jnp.maximum(c0, 0)) & (cols <= jnp.minimum(c1, w - 1))
        in_rows = (rows >= jnp.maximum(r0, 0)) & (rows <= jnp.minimum(r1, h - 1))
        line = (((rows == r0) | (rows == r1)) & in_cols) | (((cols == c0) | (cols == c1)) & in_rows)
        return jnp.where(line & ~skip, i, painter)

    painter = lax.fori_loop(0, boxes.shape[1], paint, jnp.full((b, h, w), -1, jnp.int32))
    color = colors[jnp.maximum(painter, 0) % colors.shape[0], :depth].astype(images.dtype)
    return jnp.where((painter >= 0)[..., None], color, images)


_DRAW = prim("DrawBoundingBoxesV2", no_gradient("DrawBoundingBoxesV2", _draw))


@tf_types("DrawBoundingBoxesV2")
def draw_bounding_boxes(images, boxes, colors=None, name=None):
    """``tf.image.draw_bounding_boxes``: ``[batch, h, w, depth]`` float images (depth 1, 3 or 4) with
    the outlines of ``[batch, num_boxes, 4]`` boxes painted in ``colors`` (``[num_colors, >= depth]``;
    None or empty: TF's default table)."""
    op = "DrawBoundingBoxesV2"
    d = data_dtype(images, np.float32)
    if d.name not in ("float16", "float32"):
        raise _bad(op, f"Value for attr 'T' of {d.name} is not in the list of allowed values: float, half "
                   "(argument `images`)")
    images = host_data(images, d)
    for x, arg, i in ((boxes, "boxes", 1), (colors, "colors", 2)):
        bd = dtype_of(x) if isinstance(x, _TENSORISH) else None
        if bd is not None and bd != np.float32:
            raise _bad(op, f"cannot compute {op} as input #{i}(zero-based) was expected to be a float tensor but is "
                       f"a {bd.name} tensor (argument `{arg}`)")
    boxes = host_data(boxes, np.float32)
    ishape, bshape = _shape(images), _shape(boxes)
    if len(ishape) != 4:
        raise _bad(op, f"The rank of the images should be 4 (argument `images`, shape {list(ishape)})")
    if len(bshape) != 3:
        raise _bad(op, f"The rank of the boxes tensor should be 3 (argument `boxes`, shape {list(bshape)})")
    if ishape[0] != bshape[0]:
        raise _bad(op, f"The batch sizes should be the same (images {ishape[0]}, boxes {bshape[0]})")
    depth = ishape[3]
    if depth not in (1, 3, 4):
        raise _bad(op, f"Channel depth should be either 1 (GRY), 3 (RGB), or 4 (RGBA); got {depth}")
    if bshape[2] != 4:
        raise _bad(op, f"The size of the third dimension of the box must be 4. Received: {bshape[2]}")
    if colors is not None:
        colors = host_data(colors, np.float32)
        cshape = _shape(colors)
        if len(cshape) != 2:
            raise _bad(op, f"colors must be a 2-D matrix{list(cshape)}")
        if cshape[1] < depth:
            raise _bad(op, f"colors must have equal or more channels than the image provided: {list(cshape)}")
        if cshape[0] == 0:
            colors = None
    if colors is None:
        table = DEFAULT_COLORS.copy()
        if depth == 1:
            table[:, 0] = 1.0
        colors = table
    return _call(_DRAW, op, images, boxes, colors)


# -- extract_glimpse ------------------------------------------------------------------------------

def _glimpse_axis(offset, n_in, n_out):
    """Per image, each output position's source index along one axis and whether it is inside the
    image: TF's ``ExtractGlimpses`` (offset truncated toward zero; a window past an edge keeps the
    part inside, shifted to the output's far side when it starts before the image)."""
    o = offset.astype(jnp.int32)[:, None]                      # [batch, 1]
    before = o < 0
    past = ~before & (o + n_out >= n_in)
    kept = jnp.where(before, jnp.maximum(0, n_out + o), jnp.where(past, jnp.maximum(0, n_in - o), n_out))
    ext = jnp.minimum(kept, n_in)
    base = jnp.where(before, n_out - kept, 0)
    start = jnp.where(before, 0, o)
    c = jnp.arange(n_out)[None, :] - base
    return jnp.clip(start + c, 0, n_in - 1), (c >= 0) & (c < ext), kept > 0


def _glimpse(x, offsets, u, *, size, centered, normalized, noise):
    b, h, w, ch = x.shape
    gh, gw = size
    oy, ox = offsets[:, 0], offsets[:, 1]
    if normalized:
        ox, oy = ox * w, oy * h
        if centered:
            ox = ox / 2.0 + w / 2.0 - gw / 2.0
            oy = oy / 2.0 + h / 2.0 - gh / 2.0
    elif centered:
        ox, oy = ox + w / 2.0, oy + h / 2.0
    rows, vy, any_y = _glimpse_axis(oy, h, gh)
    cols, vx, any_x = _glimpse_axis(ox, w, gw)
    inside = (vy[:, :, None] & vx[:, None, :] & (any_y & any_x)[:, :, None])[..., None]
    picked = x[jnp.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
    if noise == "uniform":
        lo = jnp.min(x, axis=(1, 2, 3), keepdims=True)
        fill = lo + u * (jnp.max(x, axis=(1, 2, 3), keepdims=True) - lo)
    elif noise == "gaussian":
        mean = jnp.mean(x, axis=(1, 2), keepdims=True)
        sigma = jnp.sqrt(jnp.mean(jnp.square(x - mean), axis=(1, 2), keepdims=True))
        fill = jnp.clip(mean + u * sigma, jnp.min(x, axis=(1, 2), keepdims=True), jnp.max(x, axis=(1, 2), keepdims=True))
    else:
        fill = jnp.zeros((), x.dtype)
    return jnp.where(inside, picked, fill)


_GLIMPSE = prim("ExtractGlimpseV2", no_gradient("ExtractGlimpseV2", _glimpse))


@tf_types("ExtractGlimpseV2")
def extract_glimpse(input, size, offsets, centered=True, normalized=True, noise="uniform", name=None):  # noqa: A002
    """``tf.image.extract_glimpse``: a ``size`` window of each ``[batch, h, w, c]`` float32 image at
    ``offsets[i] = (y, x)`` (of the window's center when ``centered`` and ``normalized``, in [-1, 1];
    see TF's docs for the other conventions); where the window leaves the image, ``noise``:
    ``uniform`` (between the image's min and max), ``gaussian`` (each channel's mean and deviation,
    clipped to its range) or ``zero``.  The noise comes from ``tapejax.random``'s global stream, so
    its values differ from TF's; no gradient (LookupError), as TF."""
    op = "ExtractGlimpseV2"
    for v, arg in ((input, "input"), (offsets, "offsets")):
        d = data_dtype(v, np.float32)
        if d != np.float32:
            raise ValueError(f"Tensor conversion requested dtype float32 for Tensor with dtype {d.name} (argument "
                             f"`{arg}`)")
    x, offsets = host_data(input, np.float32), host_data(offsets, np.float32)
    if noise not in ("uniform", "gaussian", "zero"):
        raise _bad(op, f"The noise could only be uniform, gaussian, or zero, got {noise!r} (argument `noise`)")
    xs, os_ = _shape(x), _shape(offsets)
    if len(xs) != 4:
        raise _bad(op, f"input must be 4-dimensional (batch_size, height, width, depth){list(xs)}")
    s = _exact_dtype(size.numpy() if isinstance(size, _TENSORISH) else size, np.int32, "size")
    if s.shape != (2,):
        raise _bad(op, f"input must be a vector of size 2 (height, width){list(s.shape)} (argument `size`)")
    if len(os_) != 2 or os_[0] != xs[0]:
        raise _bad(op, f"first dimension should be batch{list(os_)} (argument `offsets`)")
    if os_[1] != 2:
        raise _bad(op, f"second dimension should be of size 2 (y,x){list(os_)} (argument `offsets`)")
    gh, gw = int(s[0]), int(s[1])
    if gh < 0 or gw < 0:
        raise _bad(op, f"glimpse size must be non-negative (argument `size`, got [{gh}, {gw}])")
    shape = [xs[0], gh, gw, xs[3]]
    if noise == "uniform":
        u = _r.uniform(shape, 0, 1.0)
    elif noise == "gaussian":
        u = _r.normal(shape)
    else:
        u = np.zeros((), np.float32)
    return _call(_GLIMPSE, op, x, offsets, u, size=(gh, gw), centered=bool(centered), normalized=bool(normalized),
                 noise=noise)


__all__ = ["crop_and_resize", "draw_bounding_boxes", "extract_glimpse"]
