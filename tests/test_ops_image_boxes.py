"""tapejax-only checks of ``tf.image``'s box ops (tapejax/ops/image_boxes.py, image_nms.py); TF parity
is tests/parity/test_image_boxes.py.

Oracles: a plain-Python greedy NMS written from TF's kernel (priority queue by score, then index;
Soft-NMS's lazy re-scoring), ``jax.vjp`` of a direct bilinear sampler for crop_and_resize's
gradients, hand-derived outlines for draw_bounding_boxes.  Also: the fixed-shape ops compile once
in ``tapejax.function`` and run under ``jax.jit`` shapes; the value-length ones say what to use
there instead."""
import heapq
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from _env import default_codegen

RNG = np.random.default_rng(5)


def _iou(a, b):
    ay0, ax0, ay1, ax1 = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
    by0, bx0, by1, bx1 = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
    aa, ab = (ay1 - ay0) * (ax1 - ax0), (by1 - by0) * (bx1 - bx0)
    if aa <= 0 or ab <= 0:
        return 0.0
    inter = max(min(ay1, by1) - max(ay0, by0), 0) * max(min(ax1, bx1) - max(ax0, bx0), 0)
    return inter / (aa + ab - inter)


def reference_nms(boxes, scores, k, iou_threshold, score_threshold, sigma=0.0):
    """TF's NonMaxSuppressionV5 kernel in plain Python (float64): a heap of (score, index) candidates,
    each compared lazily with the boxes selected since it was last popped."""
    heap = [(-float(s), i, 0) for i, s in enumerate(scores) if s > score_threshold]
    heapq.heapify(heap)
    selected, sel_scores = [], []
    while len(selected) < k and heap:
        neg, i, begin = heapq.heappop(heap)
        score, original, hard = -neg, -neg, False
        for j in range(len(selected) - 1, begin - 1, -1):
            sim = _iou(boxes[i], boxes[selected[j]])
            score *= math.exp(-0.5 / sigma * sim * sim) if sigma > 0 else (1.0 if sim <= iou_threshold else 0.0)
            if sigma <= 0 and sim > iou_threshold:
                hard = True
                break
            if score <= score_threshold:
                break
        if hard:
            continue
        if score == original:
            selected.append(i)
            sel_scores.append(score)
        elif score > score_threshold:
            heapq.heappush(heap, (-score, i, len(selected)))
    return selected, sel_scores


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sigma", [0.0, 0.4])
def test_nms_matches_the_reference_kernel(seed, sigma):
    """Random boxes (some identical scores), hard and Soft-NMS: the same indices and scores."""
    r = np.random.default_rng(seed)
    boxes = r.uniform(0, 1, (30, 4)).astype(np.float32)
    scores = np.round(r.uniform(0, 1, 30), 1).astype(np.float32)   # many ties
    idx, sc = tf.image.non_max_suppression_with_scores(boxes, scores, 10, 0.4, 0.15, soft_nms_sigma=sigma)
    want_idx, want_sc = reference_nms(boxes.astype(np.float64), scores.astype(np.float64), 10, 0.4, 0.15, sigma)
    assert idx.numpy().tolist() == want_idx
    np.testing.assert_allclose(sc.numpy(), want_sc, rtol=1e-5)


def _bilinear_reference(image, boxes, ind, size):
    """crop_and_resize written directly (a Python loop over boxes and samples), float64."""
    _, h, w, c = image.shape
    out = np.zeros((len(boxes), size[0], size[1], c))
    for n, (y1, x1, y2, x2) in enumerate(boxes):
        for i in range(size[0]):
            y = y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (size[0] - 1) if size[0] > 1 else 0.5 * (y1 + y2) * (h - 1)
            for j in range(size[1]):
                x = x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (size[1] - 1) if size[1] > 1 else \
                    0.5 * (x1 + x2) * (w - 1)
                if not (0 <= y <= h - 1 and 0 <= x <= w - 1):
                    continue
                t, b, lft, rgt = math.floor(y), math.ceil(y), math.floor(x), math.ceil(x)
                im = image[ind[n]]
                top = im[t, lft] + (im[t, rgt] - im[t, lft]) * (x - lft)
                bot = im[b, lft] + (im[b, rgt] - im[b, lft]) * (x - lft)
                out[n, i, j] = top + (bot - top) * (y - t)
    return out


@default_codegen
def test_crop_and_resize_values_and_image_gradient():
    """Values against the direct loop; the image gradient is the vjp of a jnp sampler (the
    transposed gathers), the box indices' None."""
    image = RNG.uniform(0, 1, (2, 6, 7, 2)).astype(np.float32)
    boxes = np.array([[0.12, 0.07, 0.83, 0.71], [-0.3, 0.2, 0.6, 1.4], [0.33, 0.41, 0.52, 0.44]], np.float32)
    ind = np.array([1, 0, 1], np.int32)
    x, i = tf.constant(image), tf.constant(ind)
    ct = RNG.normal(0, 1, (3, 4, 5, 2)).astype(np.float32)
    with tf.GradientTape() as t:
        t.watch([x, i])
        y = tf.image.crop_and_resize(x, boxes, i, [4, 5])
    gx, gi = t.gradient(y, [x, i], output_gradients=tf.constant(ct))
    np.testing.assert_allclose(y.numpy(), _bilinear_reference(image, boxes, ind, (4, 5)), rtol=1e-5, atol=1e-6)
    assert gi is None

    def pure(img):
        return jnp.asarray(_jnp_sampler(img, boxes, ind, (4, 5)))
    _, vjp = jax.vjp(pure, jnp.asarray(image))
    np.testing.assert_allclose(gx.numpy(), vjp(jnp.asarray(ct))[0], rtol=1e-5, atol=1e-6)


def _jnp_sampler(image, boxes, ind, size):
    """The same bilinear sampling as dense interpolation weights (a different construction)."""
    _, h, w, _ = image.shape
    outs = []
    for n, (y1, x1, y2, x2) in enumerate(boxes):
        ys = np.array([y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (size[0] - 1) for i in range(size[0])])
        xs = np.array([x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (size[1] - 1) for j in range(size[1])])
        wy = np.where((ys >= 0) & (ys <= h - 1), 1.0, 0.0)[:, None] * np.maximum(0, 1 - np.abs(ys[:, None] - np.arange(h)))
        wx = np.where((xs >= 0) & (xs <= w - 1), 1.0, 0.0)[:, None] * np.maximum(0, 1 - np.abs(xs[:, None] - np.arange(w)))
        outs.append(jnp.einsum("ih,hwc,jw->ijc", wy.astype(np.float32), image[ind[n]], wx.astype(np.float32)))
    return jnp.stack(outs)


def test_draw_bounding_boxes_hand_derived():
    """A 5 x 6 gray image: box rows int(0.25 * 4) = 1 and int(1.0 * 4) = 4, columns int(0.2 * 5) = 1
    and int(0.6 * 5) = 3, painted 1.0 (TF's default gray color)."""
    out = tf.image.draw_bounding_boxes(np.zeros((1, 5, 6, 1), np.float32), [[[0.25, 0.2, 1.0, 0.6]]]).numpy()[0, :, :, 0]
    want = np.zeros((5, 6))
    want[1, 1:4] = want[4, 1:4] = want[1:5, 1] = want[1:5, 3] = 1.0
    np.testing.assert_array_equal(out, want)


def test_fixed_shape_ops_compile_once_in_a_function():
    """padded NMS, combined NMS and crop_and_resize in tapejax.function: one trace for new values of
    the same shapes."""
    traces = []

    @tf.function
    def step(boxes, scores, image):
        traces.append(1)
        idx, n = tf.image.non_max_suppression_padded(boxes, scores, 3, pad_to_max_output_size=True)
        comb = tf.image.combined_non_max_suppression(boxes[None, :, None], scores[None, :, None], 2, 3)
        crops = tf.image.crop_and_resize(image, boxes, tf.zeros([5], tf.int32), [2, 2])
        return idx, n, comb.valid_detections, crops

    for s in range(3):
        r = np.random.default_rng(s)
        out = step(tf.constant(r.uniform(0, 1, (5, 4)).astype(np.float32)),
                   tf.constant(r.uniform(0, 1, 5).astype(np.float32)),
                   tf.constant(r.uniform(0, 1, (1, 4, 4, 1)).astype(np.float32)))
        assert out[0].shape == (3,) and out[3].shape == (5, 2, 2, 1)
    assert len(traces) == 1


def test_traced_thresholds_match_host_ones():
    """Thresholds as tapejax.function arguments give what Python numbers give eagerly (one trace for
    several values)."""
    traces = []

    @tf.function
    def f(boxes, scores, iou, low):
        traces.append(1)
        return tf.image.non_max_suppression_padded(boxes, scores, 6, iou, low, pad_to_max_output_size=True)

    boxes, scores = RNG.uniform(0, 1, (25, 4)).astype(np.float32), RNG.uniform(0, 1, 25).astype(np.float32)
    for iou, low in ((0.3, 0.2), (0.7, -1.0)):
        got = f(tf.constant(boxes), tf.constant(scores), tf.constant(iou), tf.constant(low))
        want = tf.image.non_max_suppression_padded(boxes, scores, 6, iou, low, pad_to_max_output_size=True)
        assert got[0].numpy().tolist() == want[0].numpy().tolist() and int(got[1]) == int(want[1])
    assert len(traces) == 1


def test_value_length_ops_say_what_to_use_in_a_function():
    """non_max_suppression's length depends on the scores: inside tapejax.function it raises a
    TypeError naming the fixed-shape alternatives."""
    @tf.function
    def f(boxes, scores):
        return tf.image.non_max_suppression(boxes, scores, 3)

    with pytest.raises(TypeError, match="non_max_suppression_padded"):
        f(tf.constant(RNG.uniform(0, 1, (5, 4)).astype(np.float32)), tf.constant(RNG.uniform(0, 1, 5).astype(np.float32)))


def test_max_output_size_must_be_static_in_a_function():
    @tf.function
    def f(boxes, scores, k):
        return tf.image.non_max_suppression_padded(boxes, scores, k, pad_to_max_output_size=True)

    with pytest.raises(TypeError, match="max_output_size"):
        f(tf.constant(np.zeros((5, 4), np.float32)), tf.constant(np.zeros(5, np.float32)), tf.constant(3))


def test_bad_inputs_change_nothing():
    """A bad call raises before any op runs: a recording tape has no node and a Variable keeps its value."""
    v = tf.Variable(np.ones((2, 4, 4, 1), np.float32))
    with tf.GradientTape() as t:
        with pytest.raises(tf.errors.OutOfRangeError):
            tf.image.crop_and_resize(v, [[0, 0, 1, 1]], [2], [2, 2])
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.image.non_max_suppression([[0, 0, 1, 1]], [0.5], 1, iou_threshold=2.0)
    assert t.gradient(tf.constant(1.0), v) is None
    np.testing.assert_array_equal(v.numpy(), 1.0)
