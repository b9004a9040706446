"""``tf.image``'s box ops under TensorFlow and tapejax: ``crop_and_resize`` (values and gradients
with respect to the image and the boxes, None for ``box_indices``), the non-max suppressions
(indices, Soft-NMS scores, padded outputs, combined per-class results; TF's tie order, thresholds,
empty and zero-area boxes; LookupError where TF registers no gradient), ``draw_bounding_boxes``,
each op's bad input (TF's classes), the fixed-shape ones inside ``tf.function`` /
``tapejax.function``, and a user's program: an ROI-pooling head trained a few steps whose scores
go through ``combined_non_max_suppression``, with deferral on and off."""
import numpy as np

from .harness import parity, raises

RNG = np.random.default_rng(11)
IMG = RNG.uniform(0, 1, (2, 5, 6, 3)).astype(np.float32)
#: Boxes inside, partly outside, of zero height, inverted and whole.
BOXES = np.array([[0.1, 0.2, 0.8, 0.9], [-0.2, 0.5, 1.3, 0.7], [0.25, 0.2, 0.25, 0.6], [0.9, 0.9, 0.1, 0.1],
                  [0.0, 0.0, 1.0, 1.0]], np.float32)
BOX_IND = np.array([0, 1, 1, 0, 1], np.int32)
#: Boxes for NMS: overlapping pairs, far-apart boxes.
NMS_BOXES = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1],
                      [0, 100, 1, 101]], np.float32)
NMS_SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)


def _random_boxes(seed, n=40):
    r = np.random.default_rng(seed)
    boxes, scores = r.uniform(0, 1, (n, 4)).astype(np.float32), r.uniform(0, 1, n).astype(np.float32)
    scores[5] = scores[7]   # a tie: the lower index first
    return boxes, scores


def _crop_vg(tf, method, size, image=IMG, extrapolation_value=0.0):
    x, b, i = tf.constant(image), tf.constant(BOXES), tf.constant(BOX_IND)
    with tf.GradientTape() as g:
        g.watch([x, b, i])
        y = tf.image.crop_and_resize(x, b, i, size, method=method, extrapolation_value=extrapolation_value)
        loss = tf.reduce_sum(y * y)
    return [y] + g.gradient(loss, [x, b, i])


@parity(rtol=1e-4, atol=2e-5)
def test_crop_and_resize_values_and_gradients(tf):
    """Bilinear and nearest crops of boxes inside, outside (extrapolated), degenerate and inverted, for
    several crop sizes (1 x 1: the box's center); d/d image and d/d boxes (nearest's boxes gradient is
    the bilinear one, as TF's kernel), None for box_indices."""
    return [_crop_vg(tf, m, size, extrapolation_value=ext) for m in ("bilinear", "nearest")
            for size, ext in (([3, 4], -0.5), ([1, 1], 0.0), ([7, 2], 0.25))]


@parity(rtol=1e-3, atol=1e-3)
def test_crop_and_resize_dtypes_and_empty(tf):
    """float32 out for uint8 / int32 / float16 images; crop_size as a tensor; no boxes at all; a
    float16 image's gradient is float16."""
    x16 = tf.constant(IMG.astype(np.float16))
    with tf.GradientTape() as g:
        g.watch(x16)
        y = tf.image.crop_and_resize(x16, BOXES, BOX_IND, [3, 3])
    return (tf.image.crop_and_resize(tf.constant((IMG * 255).astype(np.uint8)), BOXES, BOX_IND, [3, 4]),
            tf.image.crop_and_resize(tf.constant((IMG * 9).astype(np.int32)), BOXES, BOX_IND, tf.constant([2, 3]),
                                     method="nearest"),
            y, g.gradient(y, x16).dtype.name,
            tf.image.crop_and_resize(IMG, np.zeros((0, 4), np.float32), np.zeros((0,), np.int32), [3, 4]))


@parity
def test_crop_and_resize_bad_input(tf):
    """TF's classes: OutOfRangeError for a box index outside the batch; InvalidArgumentError for
    ranks, shapes, sizes, the method and the image dtype; ValueError for boxes / indices of another
    dtype; TypeError for a float crop_size and a tensor extrapolation_value."""
    c = tf.image.crop_and_resize
    return [raises(f) for f in (
        lambda: c(IMG, BOXES, [0, 2, 0, 0, 0], [3, 4]), lambda: c(IMG, BOXES, [0, -1, 0, 0, 0], [3, 4]),
        lambda: c(IMG, BOXES, [0], [3, 4]),
        lambda: c(IMG[0], BOXES, BOX_IND, [3, 4]), lambda: c(IMG, BOXES[:, :3], BOX_IND, [3, 4]),
        lambda: c(IMG, BOXES[0], BOX_IND, [3, 4]), lambda: c(IMG, BOXES, BOX_IND, [0, 4]),
        lambda: c(IMG, BOXES, BOX_IND, [1, 2, 3]), lambda: c(IMG, BOXES, BOX_IND, [1.0, 2.0]),
        lambda: c(IMG, BOXES, BOX_IND, [3, 4], method="bicubic"),
        lambda: c(IMG, BOXES, BOX_IND, [3, 4], extrapolation_value=tf.constant(1.0)),
        lambda: c(tf.constant(IMG > 0.5), BOXES, BOX_IND, [3, 4]),
        lambda: c(tf.zeros([2, 0, 3, 1]), BOXES, BOX_IND, [3, 4]))]


@parity(rtol=1e-5, atol=1e-6)
def test_non_max_suppression_variants(tf):
    """non_max_suppression, ..._with_scores (hard and Soft-NMS: decayed scores, score_threshold),
    ..._padded (padded and not, a batch, small tiles), ..._overlaps, on random boxes with a score tie,
    for IoU thresholds from 0 to 1."""
    out = []
    for seed in (0, 1):
        b, s = _random_boxes(seed)
        for thr in (0.0, 0.3, 0.7, 1.0):
            out += [tf.image.non_max_suppression(b, s, 12, thr, 0.2),
                    list(tf.image.non_max_suppression_with_scores(b, s, 12, thr, 0.2)),
                    list(tf.image.non_max_suppression_with_scores(b, s, 12, thr, 0.2, soft_nms_sigma=0.3)),
                    list(tf.image.non_max_suppression_padded(b, s, 12, thr, 0.2, pad_to_max_output_size=True)),
                    list(tf.image.non_max_suppression_padded(b, s, 30, thr, 0.1, pad_to_max_output_size=True,
                                                             tile_size=8)),
                    list(tf.image.non_max_suppression_padded(np.stack([b, b[::-1]]), np.stack([s, s]), 12, thr,
                                                             pad_to_max_output_size=True, tile_size=16))]
        overlaps = np.random.default_rng(seed).uniform(0, 1, (10, 10)).astype(np.float32)
        out.append(tf.image.non_max_suppression_overlaps(overlaps, s[:10], 5, 0.5, 0.1))
    return out


@parity
def test_non_max_suppression_edges(tf):
    """TF's order among equal scores (lower index first), all scores below the threshold, no boxes,
    zero-area boxes (IoU 0), max_output_size 0 and as a tensor, float16 boxes, a padded output past the
    valid ones (zeros), inverted corners and negative coordinates in the padded rules."""
    nms = tf.image.non_max_suppression
    ties = np.tile(NMS_BOXES[:1], (5, 1)) + (np.arange(5)[:, None] * [0, 2, 0, 2]).astype(np.float32)
    zero = np.array([[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 1, 1]], np.float32)
    return (nms(NMS_BOXES, NMS_SCORES, 3, 0.5), nms(ties, np.full(5, 0.5, np.float32), 5, 0.5),
            nms(NMS_BOXES, NMS_SCORES, 3, score_threshold=0.99), nms(np.zeros((0, 4), np.float32),
                                                                     np.zeros(0, np.float32), 3),
            nms(zero, np.array([0.9, 0.8, 0.7], np.float32), 3, 0.0), nms(NMS_BOXES, NMS_SCORES, 0),
            nms(NMS_BOXES, NMS_SCORES, tf.constant(2)),
            nms(tf.constant(NMS_BOXES.astype(np.float16)), tf.constant(NMS_SCORES.astype(np.float16)), 3),
            list(tf.image.non_max_suppression_with_scores(NMS_BOXES, NMS_SCORES, 6, 0.5, 0.5, soft_nms_sigma=0.5)),
            list(tf.image.non_max_suppression_padded(NMS_BOXES, NMS_SCORES, 8, pad_to_max_output_size=True)),
            list(tf.image.non_max_suppression_padded(tf.constant(NMS_BOXES), tf.constant(NMS_SCORES), 4)),
            list(tf.image.non_max_suppression_padded(NMS_BOXES[:, [2, 3, 0, 1]], NMS_SCORES, 6,
                                                     pad_to_max_output_size=True)),
            list(tf.image.non_max_suppression_padded(NMS_BOXES - 200, NMS_SCORES, 6, pad_to_max_output_size=True)),
            list(tf.image.non_max_suppression_padded(NMS_BOXES, NMS_SCORES, 0, pad_to_max_output_size=True)))


@parity(rtol=1e-5, atol=1e-6)
def test_combined_non_max_suppression(tf):
    """Per-class NMS then the best over the classes: shared boxes (q = 1) and a box per class,
    pad_per_class, clip_boxes on and off, score_threshold leaving fewer than max_total_size."""
    out = []
    for seed in (0, 1, 2):
        r = np.random.default_rng(seed)
        b = r.uniform(-0.1, 1.1, (2, 30, 1, 4)).astype(np.float32)
        s = r.uniform(0, 1, (2, 30, 3)).astype(np.float32)
        bq = r.uniform(-0.1, 1.1, (2, 30, 3, 4)).astype(np.float32)
        c = tf.image.combined_non_max_suppression
        out += [list(c(b, s, 4, 10, 0.5, 0.3)), list(c(b, s, 2, 10, 0.5, 0.3, pad_per_class=True, clip_boxes=False)),
                list(c(b, s, 1, 10, pad_per_class=True)), list(c(bq, s, 5, 7, 0.4)), list(c(b, s, 2, 4, 0.5, 0.9))]
    return out


@parity
def test_non_max_suppression_gradients(tf):
    """TF registers no gradient for NonMaxSuppressionV5's scores nor CombinedNonMaxSuppression
    (LookupError); gathering the boxes at the selected indices differentiates (the indices are
    constants)."""
    b, s = tf.constant(NMS_BOXES), tf.constant(NMS_SCORES)
    with tf.GradientTape(persistent=True) as g:
        g.watch([b, s])
        idx = tf.image.non_max_suppression(b, s, 3)
        picked = tf.reduce_sum(tf.gather(s, idx) * 2.0) + tf.reduce_sum(tf.gather(b, idx))
        _, soft = tf.image.non_max_suppression_with_scores(b, s, 3, soft_nms_sigma=0.5)
        comb = tf.image.combined_non_max_suppression(b[None, :, None], s[None, :, None], 2, 3)
    return (g.gradient(picked, [b, s]), raises(g.gradient, soft, s),
            raises(g.gradient, comb.nmsed_scores, s), raises(g.gradient, comb.nmsed_boxes, b))


@parity
def test_non_max_suppression_bad_input(tf):
    """TF's classes for bad max_output_size (negative, int64, float, a vector), IoU thresholds outside
    [0, 1], shapes, dtypes (float64; float16 scores with float32 boxes; Soft-NMS's float32
    thresholds with float16 boxes), a negative sigma, a batch without padding, combined's checks."""
    nms, b, s = tf.image.non_max_suppression, NMS_BOXES, NMS_SCORES
    c, cb, cs = tf.image.combined_non_max_suppression, NMS_BOXES[None, :, None], NMS_SCORES[None, :, None]
    return [raises(f) for f in (
        lambda: nms(b, s, -1), lambda: nms(b, s, 2.0),
        lambda: nms(b, s, [2]), lambda: nms(b, s, 3, 1.5), lambda: nms(b, s, 3, -0.5), lambda: nms(b, s[:3], 3),
        lambda: nms(b, s[None], 3), lambda: nms(b[:, :3], s, 3), lambda: nms(b[None], s, 3),
        lambda: nms(tf.constant(b), tf.constant(s.astype(np.float16)), 3),
        lambda: tf.image.non_max_suppression_with_scores(b, s, 3, soft_nms_sigma=-1.0),
        lambda: tf.image.non_max_suppression_with_scores(tf.constant(b.astype(np.float16)),
                                                         tf.constant(s.astype(np.float16)), 3),
        lambda: tf.image.non_max_suppression_padded(tf.constant(np.stack([b, b])), tf.constant(np.stack([s, s])), 4),
        lambda: tf.image.non_max_suppression_padded(tf.constant(b.astype(np.float16)),
                                                    tf.constant(s.astype(np.float16)), 4,
                                                    pad_to_max_output_size=True),
        lambda: tf.image.non_max_suppression_overlaps(np.ones((2, 3), np.float32), s[:3], 3),
        lambda: c(np.tile(cb, (1, 1, 2, 1)), np.tile(cs, (1, 1, 3)), 2, 4), lambda: c(cb, cs, 2, 4, 1.5),
        lambda: c(cb, cs, -1, 4), lambda: c(cb, cs, 2, 0), lambda: c(cb, cs, 2, 2 ** 31), lambda: c(cb, cs[0], 2, 4),
        lambda: c(cb[..., :3], cs, 2, 4), lambda: c(tf.constant(cb.astype(np.float16)), tf.constant(cs), 2, 4))]


@parity(x64=True)
def test_box_ops_64_bit_arguments(tf):
    """int64 box indices and max_output_size, float64 boxes and scores: TF's classes (the tapejax side
    runs in JAX's 64-bit mode, where these dtypes exist)."""
    b, s = NMS_BOXES, NMS_SCORES
    return [raises(f) for f in (
        lambda: tf.image.crop_and_resize(IMG, BOXES, tf.constant(BOX_IND.astype(np.int64)), [3, 4]),
        lambda: tf.image.crop_and_resize(IMG, tf.constant(BOXES.astype(np.float64)), BOX_IND, [3, 4]),
        lambda: tf.image.non_max_suppression(b, s, tf.constant(2, tf.int64)),
        lambda: tf.image.non_max_suppression(tf.constant(b.astype(np.float64)), tf.constant(s.astype(np.float64)), 3),
        lambda: tf.image.non_max_suppression_overlaps(tf.constant(np.eye(3)), s[:3], 3),
        lambda: tf.image.draw_bounding_boxes(IMG, tf.zeros([2, 1, 4]), tf.constant(np.eye(3))),
        lambda: tf.image.draw_bounding_boxes(tf.constant(IMG.astype(np.float64)), tf.zeros([2, 1, 4]), None))]


def _postprocess(tf):
    """The fixed-shape box ops in one compiled function."""
    @tf.function
    def detect(boxes, scores):
        idx, n = tf.image.non_max_suppression_padded(boxes, scores, 4, 0.5, pad_to_max_output_size=True)
        comb = tf.image.combined_non_max_suppression(boxes[None, :, None], tf.stack([scores, 1.0 - scores], 1)[None],
                                                     3, 5, 0.4)
        crops = tf.image.crop_and_resize(tf.constant(IMG), tf.clip_by_value(boxes / 101.0, 0.0, 1.0),
                                         tf.zeros([6], tf.int32), [2, 2])
        return idx, n, list(comb), crops
    return detect


@parity(rtol=1e-5, atol=1e-6)
def test_box_ops_inside_a_function(tf):
    """non_max_suppression_padded, combined_non_max_suppression and crop_and_resize in tf.function /
    tapejax.function, called twice with new values."""
    detect = _postprocess(tf)
    return detect(tf.constant(NMS_BOXES), tf.constant(NMS_SCORES)), detect(tf.constant(NMS_BOXES),
                                                                           tf.constant(NMS_SCORES[::-1].copy()))


@parity(rtol=1e-5, atol=1e-6)
def test_thresholds_as_function_arguments(tf):
    """IoU and score thresholds and Soft-NMS's sigma given as tensors to a compiled function: the
    padded, combined and overlaps variants with values that change between calls (one trace)."""
    @tf.function
    def detect(boxes, scores, iou, low):
        idx, n = tf.image.non_max_suppression_padded(boxes, scores, 5, iou, low, pad_to_max_output_size=True)
        comb = tf.image.combined_non_max_suppression(boxes[None, :, None], scores[None, :, None], 4, 4, iou, low)
        return idx, n, list(comb)

    b, s = _random_boxes(3, 20)
    return [detect(tf.constant(b), tf.constant(s), tf.constant(iou), tf.constant(low))
            for iou, low in ((0.5, 0.1), (0.2, 0.5), (0.9, -1.0))]


@parity
def test_draw_bounding_boxes(tf):
    """Outlines in the given colors (a later box over an earlier one), TF's default table (None or an
    empty colors tensor; gray images use 1 in the first channel), 1/3/4 channels, float16, boxes partly
    outside, inverted (skipped) and wholly outside (skipped); no gradient (LookupError)."""
    d = np.array([[[0.1, 0.2, 0.7, 0.9], [0.5, -0.2, 1.3, 0.5], [0.7, 0.9, 0.1, 0.2]],
                  [[0, 0, 1, 1], [0.3, 0.3, 0.3, 0.6], [2, 2, 3, 3]]], np.float32)
    col = np.array([[1.0, 0, 0], [0, 1, 0]], np.float32)
    x = tf.constant(IMG)
    with tf.GradientTape() as g:
        g.watch(x)
        y = tf.image.draw_bounding_boxes(x, d, col)
    four = np.concatenate([IMG, IMG[..., :1]], -1)
    return (y, tf.image.draw_bounding_boxes(IMG, d, None), tf.image.draw_bounding_boxes(IMG[..., :1], d, None),
            tf.image.draw_bounding_boxes(four, d, None), tf.image.draw_bounding_boxes(four, d, [[0.2, 0.4, 0.6, 0.8]]),
            tf.image.draw_bounding_boxes(tf.constant(IMG.astype(np.float16)), d, col),
            tf.image.draw_bounding_boxes(IMG, d, np.zeros((0, 3), np.float32)), raises(g.gradient, y, x),
            [raises(f) for f in (
                lambda: tf.image.draw_bounding_boxes(IMG[0], d, col),
                lambda: tf.image.draw_bounding_boxes(tf.constant((IMG * 255).astype(np.uint8)), d, col),
                lambda: tf.image.draw_bounding_boxes(IMG[..., :2], d, col),
                lambda: tf.image.draw_bounding_boxes(IMG, d[:1], col),
                lambda: tf.image.draw_bounding_boxes(IMG, d[..., :3], col),
                lambda: tf.image.draw_bounding_boxes(IMG, d, [1.0, 0, 0]),
                lambda: tf.image.draw_bounding_boxes(IMG, d, [[1.0, 0]]))])


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_roi_head_trained_then_detections_post_processed(tf):
    """A user's detection head: crop_and_resize pools each region of interest (boxes trained too) of
    a batch of feature maps, a linear layer scores three classes, a few SGD steps on a cross-entropy
    loss (every gradient TF's: image-independent weights, boxes through CropAndResizeGradBoxes);
    between steps an evaluation runs the scores through combined_non_max_suppression."""
    rng = np.random.default_rng(3)
    feats = tf.constant(rng.uniform(0, 1, (2, 8, 8, 4)).astype(np.float32))
    rois = tf.Variable(np.array([[0.1, 0.1, 0.6, 0.5], [0.3, 0.2, 0.9, 0.8], [0.05, 0.45, 0.5, 0.95],
                                 [0.2, 0.1, 0.7, 0.7]], np.float32))
    ind = tf.constant([0, 0, 1, 1])
    w = tf.Variable(rng.normal(0, 0.3, (3 * 3 * 4, 3)).astype(np.float32))
    labels = tf.constant([0, 2, 1, 2])
    losses, evals = [], []
    for _ in range(4):
        with tf.GradientTape() as tape:
            pooled = tf.image.crop_and_resize(feats, rois, ind, [3, 3])
            logits = tf.matmul(tf.reshape(pooled, [4, -1]), w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        gw, gr = tape.gradient(loss, [w, rois])
        w.assign_sub(0.5 * gw)
        rois.assign_sub(0.05 * gr)
        losses.append(loss)
        scores = tf.reshape(tf.nn.softmax(logits), [2, 2, 3])
        boxes = tf.reshape(rois, [2, 2, 1, 4])
        evals.append(list(tf.image.combined_non_max_suppression(boxes, scores, 2, 3, 0.5, 0.2)))
    return losses, w, rois, evals


def _crop_rules(tf, out, h, w, boxes, min_covered, ar=(0.75, 1.33), area=(0.05, 1.0)):
    """What TF promises of a sampled crop (its values depend on the generator): inside the image, the
    aspect ratio and area in range (rounded to pixels) or the whole image, covering ``min_covered`` of
    a box, ``bboxes`` the crop normalized."""
    begin, size, bboxes = (np.asarray(v.numpy()) for v in out)
    y, x, ch, cw = int(begin[0]), int(begin[1]), int(size[0]), int(size[1])
    whole = (y, x, ch, cw) == (0, 0, h, w)
    inside = y >= 0 and x >= 0 and y + ch <= h and x + cw <= w and begin[2] == 0 and size[2] == -1
    ratio_ok = ar[0] - 1.0 / ch <= cw / ch <= ar[1] + 1.0 / ch
    area_ok = area[0] * h * w - 1 <= ch * cw <= area[1] * h * w + 1
    rects = [(int(b[0] * h), int(b[1] * w), int(b[2] * h), int(b[3] * w)) for b in np.reshape(boxes, (-1, 4))]
    cover = any((max(0, min(y + ch, r[2]) - max(y, r[0])) * max(0, min(x + cw, r[3]) - max(x, r[1])))
                >= min_covered * (r[2] - r[0]) * (r[3] - r[1]) for r in rects)
    same_box = np.allclose(bboxes, [[[y / h, x / w, (y + ch) / h, (x + cw) / w]]])
    return (str(out[0].dtype.name), tuple(out[0].shape), tuple(out[2].shape), str(out[2].dtype.name), inside,
            whole or (ratio_ok and area_ok and cover), same_box), whole


@parity
def test_sample_distorted_bounding_box_rules(tf):
    """Stateful (op seeds, seed 0) and stateless sampling under TF's constraints for several settings;
    the stateless op repeats with its seed; impossible constraints give the whole image; no boxes with
    use_image_if_no_bounding_boxes; image_size's dtype is kept (uint8, int32); no gradient."""
    boxes = tf.constant([[[0.1, 0.2, 0.5, 0.6], [0.3, 0.3, 0.9, 0.8]]])
    s, sl = tf.image.sample_distorted_bounding_box, tf.image.stateless_sample_distorted_bounding_box
    out = []
    for k in range(4):
        out.append(_crop_rules(tf, s([100, 80, 3], boxes, seed=k + 1), 100, 80, boxes.numpy(), 0.1))
        out.append(_crop_rules(tf, sl([100, 80, 3], boxes, seed=[k, 7], min_object_covered=0.5,
                                      aspect_ratio_range=(0.5, 2.0), area_range=(0.2, 0.9)),
                               100, 80, boxes.numpy(), 0.5, (0.5, 2.0), (0.2, 0.9)))
    out.append(_crop_rules(tf, s(tf.constant([40, 60, 3]), boxes), 40, 60, boxes.numpy(), 0.1))
    rules, wholes = [r for r, _ in out], [w for _, w in out]
    a = sl([50, 50, 1], boxes, seed=[3, 4])
    b = sl([50, 50, 1], boxes, seed=tf.constant([3, 4]))
    impossible = s([100, 80, 3], boxes, seed=1, area_range=(0.01, 0.02), min_object_covered=1.0)
    none = s([30, 20, 3], tf.zeros([1, 0, 4]), seed=2, use_image_if_no_bounding_boxes=True)
    u8 = s(tf.constant([30, 20, 3], tf.uint8), boxes, seed=2)
    with tf.GradientTape() as g:
        g.watch(boxes)
        drawn = s([100, 80, 3], boxes, seed=5)
    return (rules, sum(wholes) < len(wholes) - 3, [bool(np.array_equal(x.numpy(), y.numpy())) for x, y in zip(a, b)],
            list(impossible), _crop_rules(tf, none, 30, 20, [[0.0, 0.0, 1.0, 1.0]], 0.1)[0], u8[0].dtype.name,
            u8[1].dtype.name,
            g.gradient(drawn.bboxes, boxes))


@parity
def test_sample_distorted_bounding_box_bad_input(tf):
    """TF's classes for image_size's shape and dtype, boxes outside [0, 1], of the wrong rank, of
    float64 (ValueError); no boxes without use_image_if_no_bounding_boxes; negative coverage, bad
    ranges and attempts; a stateless seed not of shape [2]."""
    s, boxes = tf.image.sample_distorted_bounding_box, [[[0.1, 0.2, 0.5, 0.6]]]
    return [raises(f) for f in (
        lambda: s([100, 80], boxes, seed=1), lambda: s([100.0, 80.0, 3.0], boxes, seed=1),
        lambda: s([100, 80, 3], [[[0.1, 0.2, 1.5, 0.6]]], seed=1), lambda: s([100, 80, 3], boxes[0], seed=1),
        lambda: s([100, 80, 3], [[[0.1, 0.2, 0.5]]], seed=1), lambda: s([100, 80, 3], tf.zeros([1, 0, 4]), seed=1),
        lambda: s([100, 80, 3], boxes, seed=1, min_object_covered=-0.1),
        lambda: s([100, 80, 3], boxes, seed=1, aspect_ratio_range=[-1, 2]),
        lambda: s([100, 80, 3], boxes, seed=1, aspect_ratio_range=[1, 2, 3]),
        lambda: s([100, 80, 3], boxes, seed=1, area_range=[0.5, 1.5]),
        lambda: s([100, 80, 3], boxes, seed=1, area_range=[0.0, 0.5]),
        lambda: s([100, 80, 3], boxes, seed=1, max_attempts=0),
        lambda: tf.image.stateless_sample_distorted_bounding_box([100, 80, 3], boxes, seed=[1, 2, 3]))]


GLIMPSE_CASES = [([3, 2], [[0.0, 0.0], [0.5, -0.6]], {}),
                 ([3, 2], [[1.0, 2.0], [4.0, -1.0]], dict(centered=False, normalized=False)),
                 ([3, 2], [[1.0, 2.0], [4.0, -1.0]], dict(centered=True, normalized=False)),
                 ([3, 2], [[0.3, 0.2], [0.9, 0.1]], dict(centered=False)), ([7, 8], [[0.0, 0.0], [0.0, 0.0]], {}),
                 ([4, 4], [[-0.9, 0.95], [1.5, -1.5]], {}), ([0, 2], [[0.0, 0.0], [0.0, 0.0]], {}),
                 ([5, 6], [[-20.0, 30.0], [2.0, 3.0]], dict(centered=False, normalized=False))]


@parity
def test_extract_glimpse(tf):
    """Windows inside, across every edge, larger than the image and wholly outside, under each
    convention (centered / normalized); zero noise exactly; uniform and gaussian noise (another
    generator): the part inside the image exact, the rest within each image's range; no gradient."""
    x = tf.constant(IMG * 10.0 + 1.0)
    out = []
    for size, off, kw in GLIMPSE_CASES:
        zero = tf.image.extract_glimpse(x, size, off, noise="zero", **kw)
        out.append(zero)
        inside = tf.not_equal(zero, 0.0)
        for noise in ("uniform", "gaussian"):
            y = tf.image.extract_glimpse(x, size, off, noise=noise, **kw)
            same_inside = tf.reduce_all(tf.equal(tf.where(inside, y, 0.0), zero))
            in_range = tf.reduce_all((y >= tf.reduce_min(x)) & (y <= tf.reduce_max(x)))
            out.append((same_inside, in_range, y.dtype.name, tuple(y.shape)))
    with tf.GradientTape() as g:
        g.watch(x)
        y = tf.image.extract_glimpse(x, [3, 3], [[0.0, 0.0], [0.1, 0.2]])
    bad = [raises(f) for f in (
        lambda: tf.image.extract_glimpse(x, [3, 2], [[0.0, 0.0], [0.0, 0.0]], noise="foo"),
        lambda: tf.image.extract_glimpse(tf.cast(x, tf.uint8), [3, 2], [[0.0, 0.0], [0.0, 0.0]]),
        lambda: tf.image.extract_glimpse(x[0], [3, 2], [[0.0, 0.0]]),
        lambda: tf.image.extract_glimpse(x, [3, 2], [[0.0, 0.0]]),
        lambda: tf.image.extract_glimpse(x, [3, 2], [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        lambda: tf.image.extract_glimpse(x, [3, 2, 1], [[0.0, 0.0], [0.0, 0.0]]))]
    return out, raises(g.gradient, y, x), bad
