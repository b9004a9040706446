"""``tf.image``'s non-max suppression: ``non_max_suppression``, ``non_max_suppression_with_scores``
(Soft-NMS), ``non_max_suppression_overlaps``, ``non_max_suppression_padded`` and
``combined_non_max_suppression``.

Every variant is one op whose kernel is a fixed-size XLA loop (``lax.while_loop`` bounded by the
static ``max_output_size``, each step O(num_boxes) vector work), so it runs the same eagerly, deferred
and inside ``tapejax.function``.  The greedy kernel (``greedy``) keeps, for every box, whether it is
still a candidate and its current score; a step selects the candidate with the highest score (the
lowest index among equal scores: TF's priority-queue order), then lowers every other candidate's
score by ``weight(similarity to the selected box)`` and drops those hard-suppressed or at or below
``score_threshold``.  TF's kernel does the same lazily (a candidate is compared with the boxes
selected since it was last looked at, when it reaches the top of the queue); both select the same
boxes, since a candidate's stale score bounds its current one.  Hard NMS is TF's weight
``1 if similarity <= threshold else 0``; Soft-NMS (``soft_nms_sigma > 0``) is
``exp(-0.5 * similarity**2 / sigma)``.  The IoU is TF's (in float32, corners in any order, 0 for a
box without area).

``non_max_suppression_padded`` is TF 2's other algorithm (a Python function of tiled suppression),
whose rules differ at the edges: boxes are first zeroed where ``score <= score_threshold``, sorted
by score, their corners ordered as the *first* box's are; a box suppresses a later one when their
IoU (with ``1e-8`` added to the union) is ``>= iou_threshold``, except inside one ``tile_size`` tile
where a non-positive threshold suppresses nothing; a kept box is an output only when one of its
coordinates is positive.  Here that is the same greedy loop over the sorted boxes with those rules.

``max_output_size`` (and ``combined``'s sizes) are read on the host (Python ints or concrete tensors:
static parameters of the op, so a compiled step has fixed shapes); the thresholds are operands, so
they may be tensors computed in a compiled step (TF's range checks then cannot raise: only a
threshold known on the host is checked).  ``non_max_suppression``, ``..._with_scores``, ``..._overlaps`` and
the unpadded ``..._padded`` return as many indices as were selected, which only the values decide:
they read the count (eager, or deferred: a value is asked for); inside ``tapejax.function`` use
``non_max_suppression_padded(..., pad_to_max_output_size=True)`` or
``combined_non_max_suppression``, whose shapes are static.

Gradients: the indices are integers (no gradient); TF registers no gradient for
``NonMaxSuppressionV5``'s scores or ``CombinedNonMaxSuppression``'s outputs, so asking a tape for one
raises ``LookupError``, as TF.  ``combined_non_max_suppression``'s order among equal scores is the
lowest box index first, then the lowest class (TF's heap and ``std::sort`` leave it unspecified).
"""
import collections
from typing import NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import indexing as _ix
from ._registry import _call, _shape, dtype_of, prim, tf_types

_TENSORISH = (Tensor, Variable)


# -- similarities ---------------------------------------------------------------------------------

def corners(boxes):
    """``(ymin, xmin, ymax, xmax)`` of ``[..., 4]`` boxes given by any two opposite corners."""
    y1, x1, y2, x2 = (boxes[..., k] for k in range(4))
    return jnp.minimum(y1, y2), jnp.minimum(x1, x2), jnp.maximum(y1, y2), jnp.maximum(x1, x2)


def iou_with(boxes, i):
    """TF's IoU (``non_max_suppression_op.cc``) of every box with box ``i``, in float32: 0 where
    either box has no area."""
    b = boxes.astype(jnp.float32)
    ymin, xmin, ymax, xmax = corners(b)
    area = (ymax - ymin) * (xmax - xmin)
    iy = jnp.maximum(jnp.minimum(ymax, ymax[i]) - jnp.maximum(ymin, ymin[i]), 0.0)
    ix = jnp.maximum(jnp.minimum(xmax, xmax[i]) - jnp.maximum(xmin, xmin[i]), 0.0)
    inter = iy * ix
    iou = inter / (area + area[i] - inter)
    return jnp.where((area <= 0) | (area[i] <= 0), 0.0, iou)


# -- the greedy kernel ----------------------------------------------------------------------------

class Selected(NamedTuple):
    """The kernel's result: ``indices[k]`` and ``scores[k]`` (zero past ``count``), and ``count``."""

    indices: jax.Array
    scores: jax.Array
    count: jax.Array


def greedy(similarity, scores, k, iou_threshold, score_threshold, soft_nms_sigma=0.0):
    """Greedy (Soft-)NMS over ``scores[n]`` selecting at most ``k`` (static) boxes.

    ``similarity(i)`` is the ``[n]`` similarity of every box with box ``i`` (float32); the thresholds
    and ``soft_nms_sigma`` are scalars (numbers or arrays, also traced), compared in the scores' dtype
    as TF's kernel does."""
    n = scores.shape[0]
    dt = scores.dtype
    thr, sthr = jnp.asarray(iou_threshold).astype(dt), jnp.asarray(score_threshold).astype(dt)
    sigma = jnp.asarray(soft_nms_sigma).astype(dt)
    soft = sigma > 0
    scale = jnp.where(soft, jnp.asarray(-0.5, dt) / jnp.where(soft, sigma, jnp.ones((), dt)), jnp.zeros((), dt))
    alive = scores > sthr
    out_i = jnp.zeros((k,), jnp.int32)
    out_s = jnp.zeros((k,), dt)
    if k == 0 or n == 0:
        return Selected(out_i, out_s, jnp.zeros((), jnp.int32))

    def cond(state):
        alive, _, _, _, count = state
        return (count < k) & jnp.any(alive)

    def body(state):
        alive, cur, out_i, out_s, count = state
        i = jnp.argmax(jnp.where(alive, cur, -jnp.inf)).astype(jnp.int32)
        out_i = out_i.at[count].set(i)
        out_s = out_s.at[count].set(cur[i])
        sim = similarity(i).astype(dt)
        weight = jnp.where(soft | (sim <= thr), jnp.exp(scale * sim * sim), jnp.zeros((), dt))
        cur = cur * weight
        keep = alive & (cur > sthr) & (jnp.arange(n) != i) & (soft | ~(sim > thr))
        return keep, cur, out_i, out_s, count + 1

    state = (alive, scores, out_i, out_s, jnp.zeros((), jnp.int32))
    _, _, out_i, out_s, count = lax.while_loop(cond, body, state)
    return Selected(out_i, out_s, count)


def no_gradient(op_type, fn):
    """``fn`` (arrays, then static keywords) whose vjp raises TF's LookupError: TF registers no
    gradient for ``op_type``."""
    def bwd(_, g):
        raise LookupError(f"gradient registry has no entry for: {op_type}")

    def call(*arrays, **static):
        f = jax.custom_vjp(lambda *a: fn(*a, **static))
        f.defvjp(lambda *a: (fn(*a, **static), None), bwd)
        return f(*arrays)

    call.__name__ = fn.__name__
    return call


def _nms(boxes, scores, iou_threshold, score_threshold, soft_nms_sigma, *, k):
    r = greedy(lambda i: iou_with(boxes, i), scores, k, iou_threshold, score_threshold, soft_nms_sigma)
    return r.indices, r.scores, r.count


def _nms_overlaps(overlaps, scores, iou_threshold, score_threshold, *, k):
    r = greedy(lambda i: overlaps[:, i], scores, k, iou_threshold, score_threshold)
    return r.indices, r.count


_NMS_V3 = prim("NonMaxSuppressionV3", _nms, differentiable=False, multiple_results=True)
_NMS_V5 = prim("NonMaxSuppressionV5", no_gradient("NonMaxSuppressionV5", _nms), multiple_results=True)
_NMS_OVERLAPS = prim("NonMaxSuppressionWithOverlaps", _nms_overlaps, differentiable=False, multiple_results=True)


# -- argument checks ------------------------------------------------------------------------------

def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _host_scalar(v, arg, op_type, *, integer=False):
    """A scalar argument's value on the host (a Python number, NumPy scalar or concrete tensor)."""
    if isinstance(v, _TENSORISH):
        if isinstance(v._meta, jax.core.Tracer) or isinstance(getattr(v, "_value", None), jax.core.Tracer):
            raise TypeError(f"{op_type}: argument `{arg}` must be known when the op is built (a Python number or a "
                            "tensor computed outside tapejax.function); got a traced tensor")
        a = np.asarray(v.numpy())
        if a.shape != ():
            raise _bad(op_type, f"{arg} must be 0-D, got shape {list(a.shape)}")
        if integer and a.dtype != np.int32:
            raise _bad(op_type, f"cannot compute {op_type} as argument `{arg}` was expected to be a int32 tensor "
                       f"but is a {a.dtype.name} tensor")
        return a.item()
    if integer:
        if isinstance(v, (bool, float, np.floating)) or not isinstance(v, (int, np.integer)):
            if isinstance(v, (list, tuple, np.ndarray)):
                raise _bad(op_type, f"{arg} must be 0-D, got shape {list(np.shape(v))}")
            raise TypeError(f"Cannot convert {v!r} to EagerTensor of dtype int32 (argument `{arg}`)")
        if not -2 ** 31 <= int(v) < 2 ** 31:
            raise _bad(op_type, f"cannot compute {op_type} as argument `{arg}` was expected to be a int32 tensor "
                       "but is a int64 tensor")
        return int(v)
    if isinstance(v, (list, tuple, np.ndarray)) and np.shape(v) != ():
        raise _bad(op_type, f"{arg} must be 0-D, got shape {list(np.shape(v))}")
    return float(np.asarray(v))


def _float_kind(x, op_type, arg, allowed):
    d = dtype_of(x) if isinstance(x, _TENSORISH) else None
    if d is None:
        d = np.asarray(x).dtype
        if d.kind in "fiu" and d not in (np.float16,):
            d = np.dtype(np.float32)   # (Python and NumPy data convert to the op's float32)
    if d.name not in allowed:
        raise _bad(op_type, f"Value for attr 'T' of {d.name} is not in the list of allowed values: "
                   f"{', '.join(allowed)} (argument `{arg}`)")
    return d


def _check_boxes_scores(boxes, scores, op_type, allowed=("float16", "float32")):
    bs, ss = _shape(boxes), _shape(scores)
    db = _float_kind(boxes, op_type, "boxes", allowed)
    ds = _float_kind(scores, op_type, "scores", allowed)
    if db != ds:
        raise _bad(op_type, f"cannot compute {op_type} as input #1(zero-based) was expected to be a {db.name} "
                   f"tensor but is a {ds.name} tensor (argument `scores`)")
    if len(bs) != 2:
        raise _bad(op_type, f"boxes must be 2-D{list(bs)} (Shape must be rank 2 but is rank {len(bs)})")
    if bs[1] != 4:
        raise _bad(op_type, f"boxes must have 4 columns (Dimension must be 4 but is {bs[1]})")
    _check_scores(ss, bs[0], op_type)
    return db


def data_dtype(x, default=None) -> np.dtype:
    """A Tensor's dtype, else ``default`` or the NumPy dtype of the Python data."""
    d = dtype_of(x) if isinstance(x, _TENSORISH) else None
    if d is None:
        d = np.dtype(default) if default is not None else np.asarray(x).dtype
    return d


def host_data(x, dtype):
    """Python or NumPy data as a NumPy array of the dtype its check gave (Tensors pass through)."""
    return x if isinstance(x, _TENSORISH) else np.asarray(x, dtype)


def _check_scores(ss, n, op_type):
    if len(ss) != 1:
        raise _bad(op_type, f"scores must be 1-D{list(ss)} (Shape must be rank 1 but is rank {len(ss)})")
    if ss[0] != n:
        raise _bad(op_type, f"scores has incompatible shape (Dimensions must be equal, but are {n} and {ss[0]})")


def _traced(v):
    return isinstance(v, _TENSORISH) and (isinstance(v._meta, jax.core.Tracer)
                                          or isinstance(getattr(v, "_value", None), jax.core.Tracer))


def threshold(v, arg, op_type, dtype: "np.dtype | type" = np.float32, low=None, high=None, what=None):
    """A scalar float argument as an operand: a traced tensor as it is (TF's runtime checks cannot
    raise inside a compiled step), anything else checked on the host (0-D, in ``[low, high]``) and
    passed as a ``dtype`` scalar."""
    if _traced(v):
        if tuple(v._meta.shape) != ():
            raise _bad(op_type, f"{arg} must be 0-D, got shape {list(v._meta.shape)}")
        return v
    t = _host_scalar(v, arg, op_type)
    if (low is not None and t < low) or (high is not None and t > high):
        raise _bad(op_type, what.format(t) if what else f"{arg} must be in [{low}, {high}] (got {t})")
    return np.asarray(t, dtype)


def _max_output(max_output_size, op_type, arg="max_output_size"):
    k = _host_scalar(max_output_size, arg, op_type, integer=True)
    if k < 0:
        raise _bad(op_type, "output size must be non-negative (argument `max_output_size`)")
    return k


def _iou_threshold(v, op_type, dtype: "np.dtype | type" = np.float32):
    return threshold(v, "iou_threshold", op_type, dtype, 0.0, 1.0,
                     "iou_threshold must be in [0, 1] (argument `iou_threshold`, got {})")


def _first(selected, count, op_type):
    """The first ``count`` entries of a padded result: the count is read on the host (the output's
    length depends on the values, as TF's eager kernel's)."""
    if isinstance(count._meta, jax.core.Tracer) or isinstance(getattr(count, "_value", None), jax.core.Tracer):
        raise TypeError(f"{op_type}: the number of selected boxes depends on the scores' values, so its output has "
                        "no static shape inside tapejax.function; use tf.image.non_max_suppression_padded(..., "
                        "pad_to_max_output_size=True) (indices and a count) or combined_non_max_suppression")
    n = int(np.asarray(count.numpy()))
    return [_ix.slice(s, [0], [n]) for s in selected]


# -- the public functions -------------------------------------------------------------------------

@tf_types("NonMaxSuppressionV3")
def non_max_suppression(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"),
                        name=None):
    """``tf.image.non_max_suppression``: int32 indices of the boxes greedily kept (highest score first)
    that overlap no kept box by IoU > ``iou_threshold`` and score > ``score_threshold``."""
    op = "NonMaxSuppressionV3"
    d = _check_boxes_scores(boxes, scores, op)
    boxes, scores = host_data(boxes, d), host_data(scores, d)
    k = _max_output(max_output_size, op)
    thr = _iou_threshold(iou_threshold, op)
    sthr = threshold(score_threshold, "score_threshold", op)
    idx, _, count = _call(_NMS_V3, op, boxes, scores, thr, sthr, np.zeros((), np.float32), k=k)
    return _first([idx], count, op)[0]


@tf_types("NonMaxSuppressionV5")
def non_max_suppression_with_scores(boxes, scores, max_output_size, iou_threshold=0.5,
                                    score_threshold=float("-inf"), soft_nms_sigma=0.0, name=None):
    """``tf.image.non_max_suppression_with_scores``: ``(indices, scores)``; with ``soft_nms_sigma > 0``,
    Soft-NMS (overlapping boxes' scores decay by ``exp(-iou**2 / (2 sigma))``, the returned scores are
    the decayed ones)."""
    op = "NonMaxSuppressionV5"
    d = _check_boxes_scores(boxes, scores, op)
    boxes, scores = host_data(boxes, d), host_data(scores, d)
    k = _max_output(max_output_size, op)
    for v, arg in ((iou_threshold, "iou_threshold"), (score_threshold, "score_threshold"),
                   (soft_nms_sigma, "soft_nms_sigma")):
        vd = dtype_of(v) or np.dtype(np.float32)
        if vd != d:
            raise _bad(op, f"cannot compute {op} as argument `{arg}` was expected to be a {d.name} tensor but is a "
                       f"{vd.name} tensor")
    thr = _iou_threshold(iou_threshold, op, d)
    sigma = threshold(soft_nms_sigma, "soft_nms_sigma", op, d, 0.0, None,
                      "soft_nms_sigma_val must be >= 0 (argument `soft_nms_sigma`, got {})")
    sthr = threshold(score_threshold, "score_threshold", op, d)
    idx, sel, count = _call(_NMS_V5, op, boxes, scores, thr, sthr, sigma, k=k)
    return tuple(_first([idx, sel], count, op))


@tf_types("NonMaxSuppressionWithOverlaps")
def non_max_suppression_overlaps(overlaps, scores, max_output_size, overlap_threshold=0.5,
                                 score_threshold=float("-inf"), name=None):
    """``tf.image.non_max_suppression_overlaps``: greedy NMS on a given ``[n, n]`` overlap matrix
    (box ``i`` is suppressed by a kept box ``j`` when ``overlaps[i, j] > overlap_threshold``)."""
    op = "NonMaxSuppressionWithOverlaps"
    overlaps = host_data(overlaps, _float_kind(overlaps, op, "overlaps", ("float32",)))
    scores = host_data(scores, _float_kind(scores, op, "scores", ("float32",)))
    os_ = _shape(overlaps)
    if len(os_) != 2:
        raise _bad(op, f"overlaps must be 2-D{list(os_)}")
    if os_[0] != os_[1]:
        raise _bad(op, f"overlaps must be square{list(os_)}")
    _check_scores(_shape(scores), os_[0], op)
    k = _max_output(max_output_size, op)
    thr = threshold(overlap_threshold, "overlap_threshold", op)
    sthr = threshold(score_threshold, "score_threshold", op)
    idx, count = _call(_NMS_OVERLAPS, op, overlaps, scores, thr, sthr, k=k)
    return _first([idx], count, op)[0]


# -- non_max_suppression_padded (TF 2's tiled algorithm's rules) ----------------------------------

def _padded_one(boxes, scores, iou_threshold, score_threshold, *, k, tile_size, swap):
    n = scores.shape[0]
    keep_score = scores > score_threshold
    scores = jnp.where(keep_score, scores, 0.0).astype(jnp.float32)
    boxes = jnp.where(keep_score[:, None], boxes, 0.0).astype(jnp.float32)
    y1, x1, y2, x2 = (boxes[:, j] for j in range(4))
    sy, sx = swap
    boxes = jnp.stack([jnp.where(sy, y2, y1), jnp.where(sx, x2, x1), jnp.where(sy, y1, y2), jnp.where(sx, x1, x2)], 1)
    order = jnp.argsort(-scores, stable=True).astype(jnp.int32)
    b = boxes[order]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    pos = jnp.arange(n)
    thr = jnp.asarray(iou_threshold).astype(jnp.float32)
    output = jnp.any(b > 0, axis=1)

    def iou(p):
        iy = jnp.maximum(jnp.minimum(b[:, 2], b[p, 2]) - jnp.maximum(b[:, 0], b[p, 0]), 0.0)
        ix = jnp.maximum(jnp.minimum(b[:, 3], b[p, 3]) - jnp.maximum(b[:, 1], b[p, 1]), 0.0)
        inter = ix * iy
        return inter / (area[p] + area - inter + jnp.float32(1e-8))

    def cond(state):
        alive, _, count = state
        return (count < k) & jnp.any(alive)

    def body(state):
        alive, out, count = state
        p = jnp.argmax(alive).astype(jnp.int32)
        o = iou(p)
        same_tile = (pos // tile_size) == (p // tile_size)
        suppress = jnp.where(same_tile, (thr > 0) & (o >= thr), o >= thr)
        out = out.at[count].set(jnp.where(output[p], order[p], out[count]))
        count = count + output[p].astype(jnp.int32)
        return alive & ~suppress & (pos != p), out, count

    out = jnp.zeros((max(k, 1),), jnp.int32)
    if n == 0 or k == 0:
        return out[:k], jnp.zeros((), jnp.int32)
    _, out, count = lax.while_loop(cond, body, (jnp.ones((n,), bool), out, jnp.zeros((), jnp.int32)))
    return out[:k], jnp.minimum(count, k)


def _padded(boxes, scores, iou_threshold, score_threshold, *, k, tile_size):
    flat_b = boxes.reshape((-1,) + boxes.shape[-2:])
    flat_s = scores.reshape((-1, scores.shape[-1]))
    if flat_b.shape[0] and flat_b.shape[1]:
        first = flat_s[0, 0] > score_threshold   # (the corners are ordered as the first box's, after the filter)
        swap = (first & (flat_b[0, 0, 0] > flat_b[0, 0, 2]), first & (flat_b[0, 0, 1] > flat_b[0, 0, 3]))
    else:
        swap = (jnp.bool_(False), jnp.bool_(False))
    idx, count = jax.vmap(lambda b, s: _padded_one(b, s, iou_threshold, score_threshold, k=k, tile_size=tile_size,
                                                  swap=swap))(flat_b, flat_s)
    return idx.reshape(boxes.shape[:-2] + (k,)), count.reshape(boxes.shape[:-2])


_NMS_PADDED = prim("NonMaxSuppressionPadded", _padded, differentiable=False, multiple_results=True)


@tf_types("NonMaxSuppressionPadded")
def non_max_suppression_padded(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"),
                               pad_to_max_output_size=False, name=None, sorted_input=False,
                               canonicalized_coordinates=False, tile_size=512):
    """``tf.image.non_max_suppression_padded``: ``(indices, valid_outputs)`` for ``[..., n, 4]`` boxes
    (a batch needs ``pad_to_max_output_size=True``); padded indices are 0.  TF 2's rules (see the
    module docstring); ``sorted_input`` and ``canonicalized_coordinates`` only skip work in TF, so
    they change nothing here."""
    op = "NonMaxSuppressionPadded"
    bs, ss = _shape(boxes), _shape(scores)
    if not pad_to_max_output_size and len(bs) > 2:
        raise ValueError(f"'pad_to_max_output_size' (value {pad_to_max_output_size}) must be True for batched input")
    for x, arg in ((boxes, "boxes"), (scores, "scores")):
        d = dtype_of(x) or np.dtype(np.float32)
        if d != np.float32:
            raise TypeError(f"Input 'y' of 'Greater' Op has type float32 that does not match type {d.name} of "
                            f"argument 'x' (argument `{arg}` of non_max_suppression_padded must be float32)")
    if len(bs) < 2 or bs[-1] != 4 or tuple(ss) != tuple(bs[:-1]):
        raise ValueError(f"non_max_suppression_padded: `boxes` must be [..., num_boxes, 4] and `scores` [..., "
                         f"num_boxes]; got shapes {list(bs)} and {list(ss)}")
    if bs[-2] == 0:
        raise ValueError("slice index 0 of dimension 1 out of bounds (argument `boxes` has no boxes)")
    k = _host_scalar(max_output_size, "max_output_size", op, integer=True)
    if k < 0:
        raise _bad(op, f"Requires start <= limit when delta > 0: 0/{k} (argument `max_output_size`)")
    idx, count = _call(_NMS_PADDED, op, boxes, scores, threshold(iou_threshold, "iou_threshold", op),
                       threshold(score_threshold, "score_threshold", op), k=k, tile_size=int(tile_size))
    if not pad_to_max_output_size:
        idx = _first([idx], count, op)[0]
    return idx, count


# -- combined_non_max_suppression -----------------------------------------------------------------

CombinedNonMaxSuppression = collections.namedtuple(
    "CombinedNonMaxSuppression", ["nmsed_boxes", "nmsed_scores", "nmsed_classes", "valid_detections"])


def _combined(boxes, scores, iou_threshold, score_threshold, *, per_class, per_batch, total, pad_per_class, clip):
    nb, n, q, _ = boxes.shape
    c = scores.shape[2]
    spc = min(per_class, n)

    def one_class(b, s):     # b [n, 4], s [n]
        r = greedy(lambda i: iou_with(b, i), s, spc, iou_threshold, score_threshold)
        ok = jnp.arange(spc) < r.count
        return r.indices, jnp.where(ok, r.scores, -jnp.inf), ok

    def one_image(b, s):     # b [n, q, 4], s [n, c]
        bc = jnp.broadcast_to(b, (n, c, 4)) if q == 1 else b
        idx, sc, ok = jax.vmap(one_class, in_axes=(1, 1))(bc, s)          # [c, spc]
        cls = jnp.broadcast_to(jnp.arange(c)[:, None], (c, spc))
        coords = bc[idx, cls]                                               # [c, spc, 4]
        idx, sc, ok, cls, coords = (a.reshape((c * spc,) + a.shape[2:]) for a in (idx, sc, ok, cls, coords))
        if c * spc < per_batch:
            extra = per_batch - c * spc
            sc = jnp.concatenate([sc, jnp.full((extra,), -jnp.inf, sc.dtype)])
            ok = jnp.concatenate([ok, jnp.zeros((extra,), bool)])
            cls = jnp.concatenate([cls, jnp.zeros((extra,), cls.dtype)])
            coords = jnp.concatenate([coords, jnp.zeros((extra, 4), coords.dtype)])
        order = jnp.argsort(-sc, stable=True)[:per_batch]
        valid = jnp.minimum(jnp.sum(ok).astype(jnp.int32), total if not pad_per_class else per_batch)
        live = jnp.arange(per_batch) < valid
        coords = coords[order]
        if clip:
            coords = jnp.clip(coords, 0.0, 1.0)
        return (jnp.where(live[:, None], coords, 0.0), jnp.where(live, sc[order], 0.0),
                jnp.where(live, cls[order], 0).astype(jnp.float32), valid)

    return jax.vmap(one_image)(boxes, scores)


_COMBINED = prim("CombinedNonMaxSuppression", no_gradient("CombinedNonMaxSuppression", _combined),
                 multiple_results=True)


@tf_types("CombinedNonMaxSuppression")
def combined_non_max_suppression(boxes, scores, max_output_size_per_class, max_total_size, iou_threshold=0.5,
                                 score_threshold=float("-inf"), pad_per_class=False, clip_boxes=True, name=None):
    """``tf.image.combined_non_max_suppression``: per image and class, NMS of ``[b, n, q, 4]`` boxes
    (``q`` 1: shared by the classes, or one box per class) by ``[b, n, classes]`` scores, then the
    best ``max_total_size`` over the classes: ``(nmsed_boxes, nmsed_scores, nmsed_classes,
    valid_detections)``, zero past ``valid_detections``, float32 (classes as floats, as TF)."""
    op = "CombinedNonMaxSuppression"
    for x, arg, i in ((boxes, "boxes", 0), (scores, "scores", 1)):
        d = data_dtype(x, np.float32)
        if d != np.float32:
            raise _bad(op, f"cannot compute {op} as input #{i}(zero-based) was expected to be a float tensor but "
                       f"is a {d.name} tensor (argument `{arg}`)")
    boxes, scores = host_data(boxes, np.float32), host_data(scores, np.float32)
    bs, ss = _shape(boxes), _shape(scores)
    if len(bs) != 4 or len(ss) != 3 or bs[0] != ss[0]:
        raise _bad(op, f"boxes and scores must have same batch size (arguments `boxes` [batch, num_boxes, q, 4] "
                   f"and `scores` [batch, num_boxes, num_classes]; got shapes {list(bs)} and {list(ss)})")
    if bs[1] != ss[1]:
        raise _bad(op, f"boxes and scores must have same number of boxes; got {bs[1]} and {ss[1]}")
    if bs[3] != 4:
        raise _bad(op, "boxes must have 4 columns")
    if bs[2] not in (1, ss[2]):
        raise _bad(op, "third dimension of boxes must be either 1 or num classes")
    per_class = _host_scalar(max_output_size_per_class, "max_output_size_per_class", op, integer=True)
    if per_class <= 0:
        raise _bad(op, "max_size_per_class must be positive (argument `max_output_size_per_class`)")
    total = _host_scalar(max_total_size, "max_total_size", op, integer=True)
    if total <= 0:
        raise _bad(op, "max_total_size must be > 0")
    thr = _iou_threshold(iou_threshold, op)
    sthr = threshold(score_threshold, "score_threshold", op)
    per_batch = min(total, per_class * ss[2]) if pad_per_class else total
    out = _call(_COMBINED, op, boxes, scores, thr, sthr, per_class=per_class, per_batch=per_batch, total=total,
                pad_per_class=bool(pad_per_class), clip=bool(clip_boxes))
    return CombinedNonMaxSuppression(*out)


__all__ = ["non_max_suppression", "non_max_suppression_with_scores", "non_max_suppression_overlaps",
           "non_max_suppression_padded", "combined_non_max_suppression"]
