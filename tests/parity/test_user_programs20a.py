"""Round twenty (a) of realistic user programs, first half: object-detection training as TF's
object-detection tutorials, keras.io's RetinaNet / YOLO-style examples and research code write it
(raw ops, custom ``GradientTape`` loops, some steps under ``tf.function``), run under real
TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and off
(``modes=True``).

Box arithmetic is where a wrong gradient is silent: IoU / GIoU / DIoU / CIoU losses by hand at
identical, disjoint and zero-area boxes (``tf.maximum(0, ...)`` overlaps, ``divide_no_nan``, the
``atan`` aspect term), anchors from ``tf.meshgrid`` matched to ground truth by an IoU matrix
(``argmax`` ties at TF's first index, positive / negative / ignore by ``tf.where``, an image with no
ground truth padded by -1), box encoding and decoding (``log`` ratios, a clipped ``exp``), matched
targets by ``tf.gather`` / ``tf.gather_nd`` with ``batch_dims``, RetinaNet's focal loss over
``max(1, num_positives)``, smooth L1 at its kink, YOLO's grid-cell targets by
``tf.tensor_scatter_nd_update``, CenterNet's penalty-reduced heatmap loss, RoI Align by
``crop_and_resize`` with gradients to the image and the boxes, RoI max pooling over crops, an FPN
top-down path by ``tf.image.resize`` and inference by the NMS family with tied scores.  The
segmentation programs are in ``test_user_programs20a2.py``.  Every number is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _iou_terms(tf, a, b):
    """Corner boxes ``[y1, x1, y2, x2]``: intersection, union, enclosing box and centre terms."""
    ay1, ax1, ay2, ax2 = tf.unstack(a, axis=-1)
    by1, bx1, by2, bx2 = tf.unstack(b, axis=-1)
    ih = tf.maximum(0.0, tf.minimum(ay2, by2) - tf.maximum(ay1, by1))
    iw = tf.maximum(0.0, tf.minimum(ax2, bx2) - tf.maximum(ax1, bx1))
    inter = ih * iw
    area_a = (ay2 - ay1) * (ax2 - ax1)
    area_b = (by2 - by1) * (bx2 - bx1)
    union = area_a + area_b - inter
    ch = tf.maximum(ay2, by2) - tf.minimum(ay1, by1)
    cw = tf.maximum(ax2, bx2) - tf.minimum(ax1, bx1)
    centre_d2 = ((ay1 + ay2 - by1 - by2) / 2) ** 2 + ((ax1 + ax2 - bx1 - bx2) / 2) ** 2
    return inter, union, ch, cw, centre_d2


def _pairwise_iou(tf, a, b):
    """IoU matrix ``[N, M]`` of corner boxes (anchor-to-ground-truth matching)."""
    a = a[:, None, :]
    b = b[None, :, :]
    inter, union, *_ = _iou_terms(tf, a, b)
    return tf.math.divide_no_nan(inter, union)


# ---------------------------------------------------------------------------
# IoU-family regression losses
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_iou_giou_diou_ciou_losses_by_hand_at_identical_disjoint_and_zero_area_boxes(tf):
    """The four IoU losses written as the papers' repositories do, on predicted boxes held in a
    Variable: one identical to its target (IoU 1, the ``atan`` terms equal), one disjoint (IoU 0,
    the overlap clipped by ``tf.maximum(0, ...)``: no gradient through it), one of zero area
    (``divide_no_nan`` of 0/0), one overlapping.  CIoU's ``alpha`` is under ``stop_gradient``.  The
    gradients with respect to the boxes of each loss, then three SGD steps on their sum."""
    target = tf.constant([[0.1, 0.1, 0.5, 0.6], [0.0, 0.0, 0.2, 0.2], [0.3, 0.3, 0.3, 0.3],
                          [0.2, 0.2, 0.7, 0.8]])
    pred = tf.Variable(np.array([[0.1, 0.1, 0.5, 0.6], [0.5, 0.6, 0.8, 0.9], [0.3, 0.3, 0.3, 0.3],
                                 [0.25, 0.1, 0.6, 0.7]], np.float32))

    def losses(p):
        inter, union, ch, cw, d2 = _iou_terms(tf, p, target)
        iou = tf.math.divide_no_nan(inter, union)
        enclose = ch * cw
        giou = iou - tf.math.divide_no_nan(enclose - union, enclose)
        c2 = ch ** 2 + cw ** 2 + 1e-7
        diou = iou - d2 / c2
        pw, ph = p[:, 3] - p[:, 1], p[:, 2] - p[:, 0]
        tw, th = target[:, 3] - target[:, 1], target[:, 2] - target[:, 0]
        v = (4.0 / np.pi ** 2) * tf.square(tf.atan(tf.math.divide_no_nan(tw, th))
                                           - tf.atan(tf.math.divide_no_nan(pw, ph)))
        alpha = tf.stop_gradient(tf.math.divide_no_nan(v, 1.0 - iou + v))
        ciou = diou - alpha * v
        return {"iou": 1.0 - iou, "giou": 1.0 - giou, "diou": 1.0 - diou, "ciou": 1.0 - ciou}

    with tf.GradientTape(persistent=True) as tape:
        per = losses(pred)
        means = {k: tf.reduce_mean(v) for k, v in per.items()}
    grads = {k: tape.gradient(v, pred) for k, v in means.items()}
    del tape
    steps = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            total = tf.add_n(list(tf.nest.map_structure(tf.reduce_mean, losses(pred)).values()))
        g = tape.gradient(total, pred)
        pred.assign_sub(0.1 * g)
        steps.append((total, g))
    return per, grads, steps, pred


@parity(modes=True, **LOOSE)
def test_giou_loss_over_padded_ground_truth_with_an_image_without_boxes_in_a_tf_function(tf):
    """A batch of two images, ground truth padded to three boxes with -1 (the second image has
    none): a validity mask from ``reduce_all(gt >= 0)``, the GIoU loss per box masked and averaged
    over ``max(1, num_valid)``; a compiled step gives loss, gradient to the predicted-box Variable
    and the per-image valid counts; the empty image's boxes get zero gradient."""
    gt = tf.constant(np.array([[[0.1, 0.1, 0.4, 0.5], [0.5, 0.5, 0.9, 0.8], [-1, -1, -1, -1]],
                               [[-1, -1, -1, -1], [-1, -1, -1, -1], [-1, -1, -1, -1]]], np.float32))
    pred = tf.Variable(np.array([[[0.15, 0.05, 0.45, 0.5], [0.4, 0.6, 0.9, 0.9], [0.0, 0.0, 0.1, 0.1]],
                                 [[0.2, 0.2, 0.3, 0.3], [0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.6, 0.7]]],
                                np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            valid = tf.cast(tf.reduce_all(gt >= 0.0, axis=-1), tf.float32)
            inter, union, ch, cw, _ = _iou_terms(tf, pred, gt)
            iou = tf.math.divide_no_nan(inter, union)
            enclose = ch * cw
            giou = iou - tf.math.divide_no_nan(enclose - union, enclose)
            per_box = (1.0 - giou) * valid
            loss = tf.reduce_sum(per_box) / tf.maximum(1.0, tf.reduce_sum(valid))
        g = tape.gradient(loss, pred)
        pred.assign_sub(0.2 * g)
        return loss, g, tf.reduce_sum(valid, axis=1), per_box

    return [step() for _ in range(3)], pred


# ---------------------------------------------------------------------------
# Anchors, matching, encoding
# ---------------------------------------------------------------------------

def _anchors(tf, size=4, scales=(0.3, 0.5)):
    """Centre-form anchors on a ``size x size`` grid by ``tf.meshgrid``, then corner form."""
    c = (tf.range(size, dtype=tf.float32) + 0.5) / size
    cy, cx = tf.meshgrid(c, c, indexing="ij")
    centres = tf.reshape(tf.stack([cy, cx], axis=-1), [-1, 1, 2])
    sizes = tf.constant([[s, s] for s in scales], tf.float32)[None]
    centres = tf.tile(centres, [1, len(scales), 1])
    sizes = tf.tile(sizes, [size * size, 1, 1])
    half = sizes / 2.0
    return tf.reshape(tf.concat([centres - half, centres + half], axis=-1), [-1, 4])


def _match(tf, anchors, gt, pos=0.5, neg=0.4):
    """RetinaNet's matcher: IoU matrix, best ground truth per anchor by ``argmax``, labels 1 / 0 /
    -1 (positive, negative, ignore) by ``tf.where``; ground truth padded with -1 is masked out."""
    valid = tf.reduce_all(gt >= 0.0, axis=-1)
    iou = _pairwise_iou(tf, anchors, gt) * tf.cast(valid, tf.float32)[None, :]
    best = tf.argmax(iou, axis=1, output_type=tf.int32)
    best_iou = tf.reduce_max(iou, axis=1)
    labels = tf.where(best_iou >= pos, 1, tf.where(best_iou < neg, 0, -1))
    return best, best_iou, labels, iou


@parity(modes=True, **LOOSE)
def test_meshgrid_anchors_matched_by_an_iou_matrix_with_ties_and_an_empty_image(tf):
    """Anchors from ``tf.meshgrid`` over a 4x4 grid at two scales; ground truth for two images
    padded with -1 (the second has none, so every IoU is 0 and ``argmax`` picks index 0, TF's first
    among ties; all anchors negative); a ground-truth box placed on two anchors with equal IoU gives
    a tie too.  The matched indices, the labels (positive / negative / ignore), the counts, and the
    matched boxes gathered per image by ``tf.gather(gt, best, batch_dims=1)``; then the same matcher
    over the batch by ``tf.map_fn`` and in a ``tf.function``."""
    anchors = _anchors(tf)
    gt = tf.constant(np.array([[[0.0, 0.0, 0.5, 0.5], [0.35, 0.1, 0.65, 0.4], [-1, -1, -1, -1]],
                               [[-1, -1, -1, -1]] * 3], np.float32))
    per_image = [_match(tf, anchors, gt[i]) for i in range(2)]
    best = tf.stack([m[0] for m in per_image])
    matched = tf.gather(gt, best, batch_dims=1)
    counts = [(tf.reduce_sum(tf.cast(m[2] == 1, tf.int32)), tf.reduce_sum(tf.cast(m[2] == -1, tf.int32)))
              for m in per_image]

    @tf.function
    def batched(gt):
        return tf.map_fn(lambda g: _match(tf, anchors, g)[:3], gt,
                         fn_output_signature=(tf.int32, tf.float32, tf.int32))

    return anchors, [m[:3] for m in per_image], matched, counts, batched(gt)


@parity(modes=True, **LOOSE)
def test_box_encoding_decoding_with_clipped_exp_and_smooth_l1_on_gathered_positives(tf):
    """Faster R-CNN's box coder: targets ``((cy - acy) / ah / 0.1, ..., log(h / ah) / 0.2, ...)``
    for matched anchors gathered by ``tf.gather_nd(gt, indices, batch_dims=1)``; a linear regression
    head over anchor features trained by smooth L1 (beta 1/9) on positives only, through a compiled
    step; the decoded boxes with ``tf.exp(tf.minimum(dh, log(1000 / 16)))`` clip, where a huge
    predicted ``dh`` gives zero gradient past the clip."""
    anchors = _anchors(tf, size=3, scales=(0.4,))
    gt = tf.constant(np.array([[[0.05, 0.05, 0.5, 0.45], [0.4, 0.5, 0.95, 0.95]],
                               [[0.3, 0.3, 0.7, 0.7], [-1, -1, -1, -1]]], np.float32))
    best = tf.stack([_match(tf, anchors, gt[i], pos=0.3, neg=0.2)[0] for i in range(2)])
    labels = tf.stack([_match(tf, anchors, gt[i], pos=0.3, neg=0.2)[2] for i in range(2)])
    matched = tf.gather_nd(gt, best[..., None], batch_dims=1)

    def to_centre(b):
        return (b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2, b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]

    acy, acx, ah, aw = to_centre(anchors)
    gcy, gcx, gh, gw = to_centre(matched)
    targets = tf.stack([(gcy - acy) / ah / 0.1, (gcx - acx) / aw / 0.1,
                        tf.math.log(gh / ah) / 0.2, tf.math.log(gw / aw) / 0.2], axis=-1)
    feats = tf.constant(np.random.RandomState(31).randn(2, 9, 5).astype(np.float32))
    w = tf.Variable(init_array((5, 4), 32, 0.3))
    positive = tf.cast(labels == 1, tf.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9)

    def smooth_l1(x, beta=1.0 / 9):
        ax = tf.abs(x)
        return tf.where(ax < beta, 0.5 * x * x / beta, ax - 0.5 * beta)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            deltas = tf.einsum("bad,dk->bak", feats, w)
            per = tf.reduce_sum(smooth_l1(deltas - targets), axis=-1) * positive
            loss = tf.reduce_sum(per) / tf.maximum(1.0, tf.reduce_sum(positive))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return loss, g

    out = [step() for _ in range(3)]
    dv = tf.Variable([[0.5, -0.3, 9.0, 0.1], [0.0, 0.0, -1.0, 2.0]])
    with tf.GradientTape() as tape:
        dy, dx, dh, dw = tf.unstack(dv * [0.1, 0.1, 0.2, 0.2], axis=-1)
        clip = float(np.log(1000.0 / 16))
        h = tf.exp(tf.minimum(dh, clip)) * ah[:2]
        wd = tf.exp(tf.minimum(dw, clip)) * aw[:2]
        cy, cx = dy * ah[:2] + acy[:2], dx * aw[:2] + acx[:2]
        decoded = tf.stack([cy - h / 2, cx - wd / 2, cy + h / 2, cx + wd / 2], axis=-1)
        area = tf.reduce_sum((decoded[:, 2] - decoded[:, 0]) * (decoded[:, 3] - decoded[:, 1]))
    return best, labels, matched, targets, out, w, decoded, tape.gradient(area, dv)


# ---------------------------------------------------------------------------
# Dense-detector losses
# ---------------------------------------------------------------------------

def _focal(tf, labels_onehot, logits, alpha=0.25, gamma=2.0):
    """keras.io's RetinaNet ``RetinaNetClassificationLoss``."""
    ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels_onehot, logits=logits)
    probs = tf.nn.sigmoid(logits)
    alpha = tf.where(tf.equal(labels_onehot, 1.0), alpha, (1.0 - alpha))
    pt = tf.where(tf.equal(labels_onehot, 1.0), probs, 1 - probs)
    return tf.reduce_sum(alpha * tf.pow(1.0 - pt, gamma) * ce, axis=-1)


@parity(modes=True, **LOOSE)
def test_retinanet_focal_loss_on_dense_anchors_with_ignore_and_an_image_without_positives(tf):
    """keras.io's RetinaNet loss: per-anchor class targets ``-1`` (ignore), ``-2`` (background) or a
    class id, one-hot by ``tf.one_hot`` of the class id (background and ignore give zeros), focal
    loss masked by ``tf.where(ignore, 0, loss)`` and summed over anchors divided by
    ``max(1, num_positives)`` per image (the second image has none: the normaliser is 1); the Huber box
    loss on positives (``tf.keras.losses.Huber(reduction='none')``).  Adam on a 1x1-conv head, two
    eager and two compiled steps; the gradients with respect to the head and the feature map."""
    rs = np.random.RandomState(41)
    feats = tf.Variable(rs.randn(2, 3, 3, 4).astype(np.float32))
    kernel = tf.Variable(init_array((1, 1, 4, 2 * 3 + 2 * 4), 42, 0.2))
    cls_t = tf.constant(np.array([[-2, 0, -2, -1, 2, -2, -2, -2, 1, -2, -1, -2, -2, 0, -2, -2, -2, -2],
                                  [-2] * 6 + [-1] * 2 + [-2] * 10], np.float32))
    box_t = tf.constant(rs.randn(2, 18, 4).astype(np.float32))
    huber = tf.keras.losses.Huber(delta=1.0, reduction="none")
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def step(feats):
        with tf.GradientTape() as tape:
            out = tf.nn.conv2d(feats, kernel, 1, "VALID")
            cls_p = tf.reshape(out[..., :6], [2, 18, 3])
            box_p = tf.reshape(out[..., 6:], [2, 18, 4])
            positive = tf.cast(tf.greater(cls_t, -1.0), tf.float32)
            ignore = tf.cast(tf.equal(cls_t, -1.0), tf.float32)
            onehot = tf.one_hot(tf.cast(cls_t, tf.int32), depth=3, dtype=tf.float32)
            clf = _focal(tf, onehot, cls_p)
            box = huber(box_t, box_p)
            clf = tf.where(tf.equal(ignore, 1.0), 0.0, clf)
            box = tf.where(tf.equal(positive, 1.0), box, 0.0)
            normalizer = tf.reduce_sum(positive, axis=-1)
            clf_loss = tf.math.divide_no_nan(tf.reduce_sum(clf, axis=-1), tf.maximum(1.0, normalizer))
            box_loss = tf.math.divide_no_nan(tf.reduce_sum(box, axis=-1), normalizer)
            loss = tf.reduce_mean(clf_loss + box_loss)
        gk, gf = tape.gradient(loss, [kernel, feats])
        opt.apply_gradients([(gk, kernel)])
        return loss, clf_loss, box_loss, gk, gf

    compiled = tf.function(step)
    return [(step if i < 2 else compiled)(feats) for i in range(4)], kernel


@parity(modes=True, **LOOSE)
def test_smooth_l1_and_huber_at_the_kink_and_at_zero(tf):
    """Box regression losses at their joints: residuals exactly at ``0``, ``+-beta`` and ``+-delta``
    (``tf.where(|x| < beta, ...)`` takes the linear branch at the kink; ``tf.keras.losses.Huber`` and
    ``tf.compat.v1.losses.huber_loss``-style by hand with ``tf.minimum(|x|, delta)``); values and
    gradients per residual."""
    x = tf.Variable([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 1.0 / 9, -1.0 / 9])
    with tf.GradientTape(persistent=True) as tape:
        beta = 1.0 / 9
        ax = tf.abs(x)
        sl1 = tf.where(ax < beta, 0.5 * x * x / beta, ax - 0.5 * beta)
        quad = tf.minimum(ax, 1.0)
        hub_hand = 0.5 * quad * quad + (ax - quad)
        hub = tf.keras.losses.Huber(delta=1.0, reduction="none")(tf.zeros([8, 1]), tf.reshape(x, [8, 1]))
        hub_mean = tf.keras.losses.Huber(delta=0.5)(tf.zeros([8]), x)
    grads = [tape.gradient(v, x) for v in (sl1, hub_hand, hub, hub_mean)]
    del tape
    return sl1, hub_hand, hub, hub_mean, grads


@parity(modes=True, **LOOSE)
def test_yolo_grid_assignment_by_tensor_scatter_nd_update_and_objectness_bce(tf):
    """YOLOv1/v3-style training targets: each ground-truth centre picks its grid cell by
    ``floor(c * S)`` and the target tensor ``[B, S, S, 5 + C]`` is written by
    ``tf.tensor_scatter_nd_update`` (objectness 1, offsets within the cell, ``sqrt`` sizes, one-hot
    class); the loss is ``lambda_coord``-weighted squared error on object cells,
    ``sigmoid_cross_entropy_with_logits`` objectness with ``lambda_noobj`` on empty cells and class
    cross-entropy; a conv head trained by SGD in a compiled step; gradients to the weights and to
    the input image.  Two objects fall in one cell: the later one's row wins (TF's CPU kernel), and
    the gradient with respect to the scattered updates reaches both (TF's rule: ``gather_nd`` of
    the output's gradient)."""
    S, C = 3, 2
    rs = np.random.RandomState(51)
    image = tf.Variable(rs.randn(2, 6, 6, 2).astype(np.float32))
    kernel = tf.Variable(init_array((2, 2, 2, 5 + C), 52, 0.3))
    boxes = np.array([[0.2, 0.25, 0.3, 0.4], [0.7, 0.8, 0.2, 0.1], [0.5, 0.5, 0.6, 0.6], [0.1, 0.3, 0.2, 0.2]],
                     np.float32)
    image_ids = np.array([0, 0, 1, 0])
    classes = np.array([1, 0, 1, 0])
    cells = np.floor(boxes[:, :2] * S).astype(np.int32)
    indices = tf.constant(np.stack([image_ids, cells[:, 0], cells[:, 1]], axis=1).astype(np.int32))
    offsets = (boxes[:, :2] * S - cells).astype(np.float32)
    updates = tf.concat([tf.ones([4, 1]), offsets, tf.sqrt(boxes[:, 2:]), tf.one_hot(classes, C)], axis=1)
    target = tf.tensor_scatter_nd_update(tf.zeros([2, S, S, 5 + C]), indices, updates)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            pred = tf.nn.conv2d(image, kernel, 2, "VALID")
            obj = target[..., 0]
            coord = tf.reduce_sum(tf.square(tf.sigmoid(pred[..., 1:5]) - target[..., 1:5]), axis=-1)
            obj_ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=obj, logits=pred[..., 0])
            cls_ce = tf.nn.softmax_cross_entropy_with_logits(labels=target[..., 5:], logits=pred[..., 5:])
            loss = (5.0 * tf.reduce_sum(obj * coord) + tf.reduce_sum(obj * obj_ce)
                    + 0.5 * tf.reduce_sum((1.0 - obj) * obj_ce) + tf.reduce_sum(obj * cls_ce)) / 2.0
        gk, gi = tape.gradient(loss, [kernel, image])
        opt.apply_gradients([(gk, kernel)])
        return loss, gk, gi

    # the gradient through tensor_scatter_nd_update: to the updates, and zero at the written cells
    base = tf.Variable(tf.fill([2, S, S, 5 + C], 0.5))
    upd = tf.Variable(updates)
    with tf.GradientTape() as tape:
        t2 = tf.tensor_scatter_nd_update(base, indices, upd * 2.0)
        s = tf.reduce_sum(t2 * tf.range(5 + C, dtype=tf.float32))
    return target, [step() for _ in range(3)], kernel, tape.gradient(s, [base, upd])


@parity(modes=True, **LOOSE)
def test_centernet_penalty_reduced_heatmap_focal_loss_with_clipped_sigmoid(tf):
    """CenterNet's heatmap loss: a Gaussian target heatmap drawn at two centres (exactly 1 there),
    predictions ``clip_by_value(sigmoid(logits), 1e-4, 1 - 1e-4)`` (saturated logits sit on the clip:
    no gradient), ``pos = y == 1``, the positive term ``log(p) (1 - p)^2`` and the negative term
    ``log(1 - p) p^2 (1 - y)^4``, normalised by ``num_pos`` (``tf.cond`` on zero positives: an empty
    heatmap gives the negative term alone); the size regression by ``gather_nd`` at the centres.
    Three Adam steps on the logits Variable and the size map."""
    H = W = 5
    yy, xx = np.mgrid[0:H, 0:W]
    heat = np.zeros((2, H, W, 1), np.float32)
    for b, (cy, cx) in [(0, (1, 1)), (0, (3, 4))]:
        heat[b, ..., 0] = np.maximum(heat[b, ..., 0], np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 2.0))
    heat = tf.constant(heat)
    rs = np.random.RandomState(61)
    logits0 = rs.randn(2, H, W, 1).astype(np.float32)
    logits0[1, 0, 0, 0] = 12.0
    logits0[0, 2, 2, 0] = -11.0
    logits = tf.Variable(logits0)
    sizes = tf.Variable(rs.rand(2, H, W, 2).astype(np.float32))
    centres = tf.constant([[0, 1, 1], [0, 3, 4]])
    size_t = tf.constant([[0.3, 0.2], [0.5, 0.4]])
    opt = tf.keras.optimizers.legacy.Adam(0.1)

    def heatmap_loss(y, logit):
        p = tf.clip_by_value(tf.sigmoid(logit), 1e-4, 1 - 1e-4)
        pos = tf.cast(tf.equal(y, 1.0), tf.float32)
        neg = 1.0 - pos
        pos_loss = tf.math.log(p) * tf.pow(1 - p, 2) * pos
        neg_loss = tf.math.log(1 - p) * tf.pow(p, 2) * tf.pow(1 - y, 4) * neg
        num_pos = tf.reduce_sum(pos)
        pos_loss, neg_loss = tf.reduce_sum(pos_loss), tf.reduce_sum(neg_loss)
        return tf.cond(num_pos > 0, lambda: -(pos_loss + neg_loss) / num_pos, lambda: -neg_loss)

    out = []
    for i in range(3):
        with tf.GradientTape() as tape:
            hm = [heatmap_loss(heat[b], logits[b]) for b in range(2)]
            reg = tf.reduce_mean(tf.abs(tf.gather_nd(sizes, centres) - size_t))
            loss = tf.add_n(hm) + 0.1 * reg
        g = tape.gradient(loss, [logits, sizes])
        opt.apply_gradients(zip(g, [logits, sizes]))
        out.append((hm, reg, g))
    return out, logits, sizes


# ---------------------------------------------------------------------------
# Image ops with gradients: RoI Align / RoI pooling, FPN, augmentation
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_roi_align_by_crop_and_resize_with_boxes_outside_the_image_and_extrapolation(tf):
    """Mask R-CNN's RoI Align as research code writes it: ``crop_and_resize`` of a feature map held
    in a Variable with box Variables (one box partly outside the image, one flipped with
    ``y1 > y2``, one degenerate of zero height, one a single point), ``extrapolation_value`` 0 and
    0.5, bilinear and nearest; ``avg_pool2d`` of a 4x4 crop to 2x2 (the "sampling ratio 2" trick).
    Gradients to the image and to the boxes (TF's CropAndResizeGradBoxes, which is the bilinear
    sampler's for ``nearest`` too), then two SGD steps on both.  (No sample sits exactly on the
    image's edge: there the test suite's quick XLA code generation moves the position by an ulp,
    see ``tests/_env.py``'s ``default_codegen``.)"""
    rs = np.random.RandomState(71)
    image = tf.Variable(rs.randn(2, 6, 7, 3).astype(np.float32))
    boxes = tf.Variable(np.array([[0.1, 0.2, 0.6, 0.7], [-0.23, 0.52, 0.41, 1.3], [0.8, 0.6, 0.2, 0.1],
                                  [0.5, 0.2, 0.5, 0.9], [0.3, 0.3, 0.3, 0.3]], np.float32))
    box_ind = tf.constant([0, 1, 1, 0, 1])
    w = tf.constant(rs.randn(2, 2, 3).astype(np.float32))
    out = []
    for method, extra in (("bilinear", 0.0), ("bilinear", 0.5), ("nearest", 0.0)):
        with tf.GradientTape() as tape:
            crops = tf.image.crop_and_resize(image, boxes, box_ind, [4, 4], method=method,
                                             extrapolation_value=extra)
            pooled = tf.nn.avg_pool2d(crops, 2, 2, "VALID")
            loss = tf.reduce_sum(pooled * w)
        gi, gb = tape.gradient(loss, [image, boxes])
        out.append((crops, loss, gi, gb))
    steps = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            crops = tf.image.crop_and_resize(image, boxes, box_ind, [3, 3])
            loss = tf.reduce_mean(tf.square(crops - 0.5))
        gi, gb = tape.gradient(loss, [image, boxes])
        image.assign_sub(0.5 * gi)
        boxes.assign_sub(0.5 * gb)
        steps.append((loss, gb))
    return out, steps, boxes


@parity(modes=True, **LOOSE)
def test_roi_max_pooling_by_max_pool_over_crops_with_tied_maxima(tf):
    """tf-faster-rcnn's RoI pooling: ``crop_and_resize`` to twice the pooled size, then
    ``max_pool2d`` 2x2 / 2; a constant region (and the extrapolated area of a box outside the image)
    gives tied maxima, where TF's max-pool gradient goes to the first maximum only.  A classifier
    over the pooled features trained three steps in a ``tf.function``; gradients to the feature map
    and the classifier.  (Bins by ``reduce_max`` split tied gradients instead; under the test
    suite's quick XLA code generation a fused program recomputing the crops can round them
    differently from the maximum and give NaN: see the round's report.)"""
    rs = np.random.RandomState(81)
    fm = rs.randn(1, 6, 6, 2).astype(np.float32)
    fm[0, :3, :3, :] = 1.0
    fm = tf.Variable(fm)
    boxes = tf.constant([[0.0, 0.0, 0.4, 0.4], [0.3, 0.35, 0.97, 1.0], [0.8, 0.75, 1.5, 1.45]])
    w = tf.Variable(init_array((8, 2), 82))
    labels = tf.constant([0, 1, 1])

    def roi_pool(fm):
        crops = tf.image.crop_and_resize(fm, boxes, tf.zeros([3], tf.int32), [4, 4])
        return tf.nn.max_pool2d(crops, 2, 2, "VALID")

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            pooled = roi_pool(fm)
            logits = tf.matmul(tf.reshape(pooled, [3, 8]), w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        gf, gw = tape.gradient(loss, [fm, w])
        w.assign_sub(0.3 * gw)
        return loss, pooled, gf, gw

    with tf.GradientTape() as tape:
        s = tf.reduce_sum(roi_pool(fm))
    return tape.gradient(s, fm), [step() for _ in range(3)], w


@parity(modes=True, **LOOSE)
def test_fpn_top_down_path_by_resize_nearest_and_bilinear_with_antialias_downsampling(tf):
    """A tiny FPN: C3 and C4 levels from strided ``conv2d``; lateral 1x1 convs; P4 upsampled by
    ``tf.image.resize(method='nearest')`` (and bilinear in a second head) to C3's size and added;
    a P5 level by ``tf.image.resize(..., antialias=True)`` downsampling of P4; a per-level
    objectness loss against targets resized to each level (``area``).  Gradients to all kernels and
    the image; Adam steps, the last two compiled."""
    rs = np.random.RandomState(91)
    image = tf.Variable(rs.randn(1, 8, 8, 2).astype(np.float32))
    k3 = tf.Variable(init_array((3, 3, 2, 4), 92, 0.3))
    k4 = tf.Variable(init_array((3, 3, 4, 4), 93, 0.3))
    l3 = tf.Variable(init_array((1, 1, 4, 3), 94, 0.3))
    l4 = tf.Variable(init_array((1, 1, 4, 3), 95, 0.3))
    head = tf.Variable(init_array((1, 1, 3, 1), 96, 0.3))
    target = tf.constant((rs.rand(1, 8, 8, 1) > 0.6).astype(np.float32))
    ws = [k3, k4, l3, l4, head]
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def step(method):
        with tf.GradientTape() as tape:
            c3 = tf.nn.relu(tf.nn.conv2d(image, k3, 2, "SAME"))
            c4 = tf.nn.relu(tf.nn.conv2d(c3, k4, 2, "SAME"))
            p4 = tf.nn.conv2d(c4, l4, 1, "SAME")
            p3 = tf.nn.conv2d(c3, l3, 1, "SAME") + tf.image.resize(p4, tf.shape(c3)[1:3], method=method)
            p5 = tf.image.resize(p4, [1, 1], antialias=True)
            loss = 0.0
            for p in (p3, p4, p5):
                t = tf.image.resize(target, tf.shape(p)[1:3], method="area")
                logit = tf.nn.conv2d(p, head, 1, "SAME")
                loss += tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=logit))
        grads = tape.gradient(loss, ws + [image])
        opt.apply_gradients(zip(grads[:5], ws))
        return loss, grads

    compiled = tf.function(step)
    out = [step("nearest"), step("bilinear"), compiled("nearest"), compiled("bilinear")]
    return out, ws


@parity(modes=True, **LOOSE)
def test_flip_augmentation_with_box_flipping_and_numpy_offset_crops_with_box_clipping(tf):
    """The augmentation of detection input pipelines: ``tf.image.flip_left_right`` of the image with
    boxes flipped by ``[y1, 1 - x2, y2, 1 - x1]``; a crop at NumPy offsets by ``tf.image.crop_to_bounding_box``
    with boxes shifted, rescaled, clipped by ``clip_by_value`` and filtered by ``boolean_mask`` on
    their remaining area (one falls outside and is dropped, leaving also an all-dropped case of
    shape ``(0, 4)``); a regression loss of crop features through both augmentations, with
    gradients to the image."""
    rs = np.random.RandomState(101)
    image = tf.Variable(rs.rand(8, 10, 3).astype(np.float32))
    boxes = tf.constant([[0.1, 0.1, 0.5, 0.3], [0.6, 0.7, 0.9, 0.95], [0.0, 0.0, 0.2, 0.15]])

    def flip(img, b):
        return tf.image.flip_left_right(img), tf.stack([b[:, 0], 1.0 - b[:, 3], b[:, 2], 1.0 - b[:, 1]], axis=1)

    def crop(img, b, oy, ox, h, w):
        H, W = 8.0, 10.0
        out = tf.image.crop_to_bounding_box(img, oy, ox, h, w)
        shift = tf.constant([oy / H, ox / W, oy / H, ox / W])
        scale = tf.constant([H / h, W / w, H / h, W / w])
        nb = tf.clip_by_value((b - shift) * scale, 0.0, 1.0)
        area = (nb[:, 2] - nb[:, 0]) * (nb[:, 3] - nb[:, 1])
        return out, tf.boolean_mask(nb, area > 0.0)

    with tf.GradientTape() as tape:
        fimg, fboxes = flip(image, boxes)
        cimg, cboxes = crop(fimg, fboxes, 2, 3, 5, 6)
        empty_img, empty = crop(image, boxes[1:2], 0, 0, 4, 4)
        pooled = tf.image.crop_and_resize(cimg[None], cboxes, tf.zeros([tf.shape(cboxes)[0]], tf.int32), [2, 2])
        loss = tf.reduce_sum(tf.square(pooled)) + tf.reduce_mean(empty_img)
    return fboxes, cboxes, empty, tf.shape(empty), loss, tape.gradient(loss, image)


# ---------------------------------------------------------------------------
# Inference: the NMS family on tied scores
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_postprocessing_by_the_nms_family_with_tied_scores_and_soft_nms(tf):
    """Decoded boxes of a trained head post-processed at inference: ``non_max_suppression`` (tied
    scores keep the lower index first), ``_padded`` with ``pad_to_max_output_size``,
    ``_with_scores`` with ``soft_nms_sigma`` 0.5 (scores decay with overlap), and
    ``combined_non_max_suppression`` per class with ``clip_boxes`` on and off; the kept boxes by
    ``tf.gather``, also inside a ``tf.function`` (by ``_padded``: tapejax gives the unpadded op no
    static output shape inside a function, a documented limit)."""
    boxes = tf.constant([[0.0, 0.0, 0.5, 0.5], [0.05, 0.0, 0.55, 0.5], [0.6, 0.6, 1.0, 1.0],
                         [0.0, 0.0, 0.5, 0.5], [0.62, 0.58, 1.02, 0.98], [0.2, 0.7, 0.4, 0.9]])
    scores = tf.constant([0.9, 0.9, 0.8, 0.9, 0.8, 0.3])
    sel = tf.image.non_max_suppression(boxes, scores, 4, iou_threshold=0.5)
    padded, valid = tf.image.non_max_suppression_padded(boxes, scores, 5, iou_threshold=0.5,
                                                        pad_to_max_output_size=True)
    soft_idx, soft_scores = tf.image.non_max_suppression_with_scores(boxes, scores, 6, iou_threshold=1.0,
                                                                     score_threshold=0.1, soft_nms_sigma=0.5)
    per_class = tf.stack([scores, tf.reverse(scores, [0])], axis=1)[None]
    comb = [tf.image.combined_non_max_suppression(boxes[None, :, None, :], per_class, 3, 4, 0.5, 0.2,
                                                  clip_boxes=c) for c in (True, False)]

    @tf.function
    def infer(b, s):
        keep, n = tf.image.non_max_suppression_padded(b, s, 3, 0.4, score_threshold=0.5,
                                                      pad_to_max_output_size=True)
        valid = tf.cast(tf.range(3) < n, tf.float32)
        return keep, n, tf.gather(b, keep) * valid[:, None], tf.gather(s, keep) * valid

    return (sel, tf.gather(boxes, sel), padded, valid, soft_idx, soft_scores,
            [list(c) for c in comb], infer(boxes, scores))


# ---------------------------------------------------------------------------
# Mask R-CNN-style mask head
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_mask_rcnn_mask_head_on_crop_and_resized_ground_truth_masks(tf):
    """Mask R-CNN's mask targets: the ground-truth instance masks ``crop_and_resize``d to 4x4 at the
    positive proposals (each proposal's matched instance by ``box_indices``), thresholded at 0.5 by
    ``tf.round``; the mask head's per-class logits ``[R, 4, 4, C]`` with the proposal's class
    picked by ``tf.gather(..., batch_dims=1)`` after a transpose; binary cross-entropy averaged over
    positives.  Two eager and one compiled SGD step; gradients to the head and the RoI features."""
    rs = np.random.RandomState(111)
    masks = np.zeros((2, 8, 8, 1), np.float32)
    masks[0, 1:5, 2:7] = 1.0
    masks[1, 4:8, 0:3] = 1.0
    masks = tf.constant(masks)
    proposals = tf.constant([[0.1, 0.2, 0.6, 0.9], [0.45, -0.05, 0.98, 0.4], [0.0, 0.1, 0.7, 0.8]])
    matched = tf.constant([0, 1, 0])
    classes = tf.constant([2, 1, 2])
    targets = tf.round(tf.image.crop_and_resize(masks, proposals, matched, [4, 4]))[..., 0]
    feats = tf.Variable(rs.randn(3, 4, 4, 3).astype(np.float32))
    kernel = tf.Variable(init_array((3, 3, 3, 3), 112, 0.3))
    bias = tf.Variable(np.zeros(3, np.float32))

    def step():
        with tf.GradientTape() as tape:
            logits = tf.nn.conv2d(feats, kernel, 1, "SAME") + bias
            per_class = tf.transpose(logits, [0, 3, 1, 2])
            picked = tf.gather(per_class, classes, batch_dims=1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=picked))
        gk, gb, gf = tape.gradient(loss, [kernel, bias, feats])
        kernel.assign_sub(0.5 * gk)
        bias.assign_sub(0.5 * gb)
        return loss, gk, gb, gf

    compiled = tf.function(step)
    return targets, [step(), step(), compiled()], kernel, bias
