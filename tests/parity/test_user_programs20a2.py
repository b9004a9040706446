"""Round twenty (a) of realistic user programs, second half: semantic-segmentation training as TF's
segmentation tutorial, keras.io's examples and research code write it, run under real TensorFlow
2.21 and under tapejax (raw-op programs with deferred execution and predicted updates on and off,
``modes=True``; the Keras-layer ones in the default mode, tf_keras on TF's side and Keras 3 on
tapejax's).

The losses are taken where their gradients are easy to get wrong: a tiny U-Net of raw ops
(``conv2d_transpose``, skip ``concat``, logits resized to the mask) trained on a sparse
cross-entropy with the ignore label 255 masked out, Dice + BCE with classes absent from the batch,
the Lovasz hinge (errors sorted by ``tf.nn.top_k`` and by a stable ``tf.argsort`` with ties,
its gradient through the gathers), boundary-weighted cross-entropy from morphological
``max_pool2d`` edges with class-balanced weights at a class of count 0, mean IoU by
``tf.math.confusion_matrix`` and by ``tf.keras.metrics.MeanIoU``; then Keras models: an FCN with
``Conv2DTranspose`` trained with ``SparseCategoricalCrossentropy(ignore_class=255)``, keras.io's
RetinaNet losses as ``tf.keras.losses.Loss`` subclasses on a small conv head, and
``BinaryFocalCrossentropy`` against the focal loss by hand.  The object-detection programs are in
``test_user_programs20a.py``.  Every number is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, keras_init, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)
KTOL = dict(rtol=2e-4, atol=2e-5)


def _seg_data(seed, n=2, hw=8, classes=3, ignore=True):
    rs = np.random.RandomState(seed)
    images = rs.randn(n, hw, hw, 2).astype(np.float32)
    labels = rs.randint(0, classes, size=(n, hw, hw)).astype(np.int32)
    if ignore:
        labels[:, 0, :] = 255
        labels[0, :, -1] = 255
    return images, labels


# ---------------------------------------------------------------------------
# Raw-op U-Net and per-pixel losses
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_raw_op_unet_with_conv2d_transpose_skip_concat_and_an_ignore_label(tf):
    """A two-level U-Net of raw ops: a strided ``conv2d`` down, ``conv2d_transpose`` up (an explicit
    ``output_shape``), the skip joined by ``tf.concat``, the logits computed at half resolution for a
    second head and resized to the mask by ``tf.image.resize`` (bilinear); the loss is
    ``sparse_softmax_cross_entropy_with_logits`` with the 255 pixels replaced by 0 and masked out,
    averaged over the valid pixels.  Adam, two eager steps and two compiled; gradients to every
    kernel and the images."""
    x, y = _seg_data(201)
    images = tf.Variable(x)
    ws = [tf.Variable(init_array(s, 202 + i, 0.3)) for i, s in
          enumerate([(3, 3, 2, 4), (3, 3, 4, 4), (3, 3, 4, 4), (1, 1, 6, 3), (1, 1, 4, 3)])]
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def step(labels):
        with tf.GradientTape() as tape:
            e1 = tf.nn.relu(tf.nn.conv2d(images, ws[0], 1, "SAME"))
            e2 = tf.nn.relu(tf.nn.conv2d(e1, ws[1], 2, "SAME"))
            up = tf.nn.conv2d_transpose(e2, ws[2], [2, 8, 8, 4], 2, "SAME")
            logits = tf.nn.conv2d(tf.concat([up, images], axis=-1), ws[3], 1, "SAME")
            aux = tf.image.resize(tf.nn.conv2d(e2, ws[4], 1, "SAME"), [8, 8])
            valid = tf.not_equal(labels, 255)
            safe = tf.where(valid, labels, tf.zeros_like(labels))
            vf = tf.cast(valid, tf.float32)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(safe, logits)
            ce_aux = tf.nn.sparse_softmax_cross_entropy_with_logits(safe, aux)
            loss = tf.reduce_sum((ce + 0.4 * ce_aux) * vf) / tf.reduce_sum(vf)
        grads = tape.gradient(loss, ws + [images])
        opt.apply_gradients(zip(grads[:5], ws))
        return loss, grads

    compiled = tf.function(step)
    out = [(step if i < 2 else compiled)(tf.constant(y)) for i in range(4)]
    return out, ws


@parity(modes=True, **LOOSE)
def test_dice_plus_bce_with_classes_absent_from_the_batch(tf):
    """Dice + BCE on multi-label masks where one class is empty in the target (and one also
    predicted ~0): soft Dice with ``smooth=1`` (the empty class scores ~1) and with
    ``divide_no_nan`` and no smoothing (0/0 gives 0 and a zero gradient), per class then averaged,
    plus ``sigmoid_cross_entropy_with_logits``; three SGD steps on the logits Variable, and the
    per-class Dice terms."""
    rs = np.random.RandomState(211)
    target = (rs.rand(2, 5, 5, 3) > 0.5).astype(np.float32)
    target[..., 1] = 0.0
    logits0 = rs.randn(2, 5, 5, 3).astype(np.float32)
    logits0[..., 2] = -30.0
    target[..., 2] = 0.0
    logits = tf.Variable(logits0)
    target = tf.constant(target)

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            p = tf.sigmoid(logits)
            inter = tf.reduce_sum(p * target, axis=[0, 1, 2])
            sums = tf.reduce_sum(p, axis=[0, 1, 2]) + tf.reduce_sum(target, axis=[0, 1, 2])
            dice_smooth = (2.0 * inter + 1.0) / (sums + 1.0)
            dice_nan = tf.math.divide_no_nan(2.0 * inter, sums)
            bce = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits))
            loss = bce + 1.0 - tf.reduce_mean(dice_smooth)
            loss2 = bce + 1.0 - tf.reduce_mean(dice_nan)
        g, g2 = tape.gradient(loss, logits), tape.gradient(loss2, logits)
        del tape
        logits.assign_sub(2.0 * g)
        out.append((loss, loss2, dice_smooth, dice_nan, g, g2))
    return out


def _lovasz_grad(tf, gt_sorted):
    """Berman et al.'s ``lovasz_grad``: the Jaccard loss's gradient with respect to sorted errors."""
    gts = tf.reduce_sum(gt_sorted)
    intersection = gts - tf.cumsum(gt_sorted)
    union = gts + tf.cumsum(1.0 - gt_sorted)
    jaccard = 1.0 - intersection / union
    return tf.concat((jaccard[0:1], jaccard[1:] - jaccard[:-1]), 0)


@parity(modes=True, **LOOSE)
def test_lovasz_hinge_with_tied_errors_sorted_by_top_k_and_by_a_stable_argsort(tf):
    """The Lovasz hinge of Berman et al.'s TF code: ``errors = 1 - logits * signs``, sorted
    descending by ``tf.nn.top_k(errors, k=n)`` (the original) and by
    ``tf.argsort(direction='DESCENDING', stable=True)`` + ``tf.gather`` (tied errors keep the lower
    index first in both), the labels permuted alike, ``lovasz_grad`` by ``cumsum``, loss
    ``tensordot(relu(errors_sorted), stop_gradient(grad), 1)``; per image and over a batch with an
    image of no positives (``tf.cond``-free: its Jaccard terms still defined).  Gradients to the
    logits, two SGD steps in a ``tf.function``."""
    logits0 = np.array([[0.5, -0.5, 0.5, 2.0, -1.0, 0.5], [0.3, -0.2, 0.3, -0.7, 1.0, 0.0]], np.float32)
    labels = tf.constant([[1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    logits = tf.Variable(logits0)

    def hinge_flat(lg, lb, use_top_k):
        signs = 2.0 * lb - 1.0
        errors = 1.0 - lg * tf.stop_gradient(signs)
        if use_top_k:
            errors_sorted, perm = tf.nn.top_k(errors, k=tf.shape(errors)[0], name="descending_sort")
        else:
            perm = tf.argsort(errors, direction="DESCENDING", stable=True)
            errors_sorted = tf.gather(errors, perm)
        gt_sorted = tf.gather(lb, perm)
        grad = _lovasz_grad(tf, gt_sorted)
        return tf.tensordot(tf.nn.relu(errors_sorted), tf.stop_gradient(grad), 1, name="loss_non_void"), perm

    with tf.GradientTape(persistent=True) as tape:
        per = [[hinge_flat(logits[i], labels[i], k) for i in range(2)] for k in (True, False)]
        totals = [tf.add_n([p[0] for p in ps]) / 2.0 for ps in per]
    grads = [tape.gradient(t, logits) for t in totals]
    del tape

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.add_n([hinge_flat(logits[i], labels[i], True)[0] for i in range(2)]) / 2.0
        g = tape.gradient(loss, logits)
        logits.assign_sub(0.5 * g)
        return loss, g

    return per, totals, grads, [step() for _ in range(2)], logits


@parity(modes=True, **LOOSE)
def test_boundary_weighted_ce_with_class_balanced_weights_and_a_class_never_seen(tf):
    """Boundary-aware cross-entropy: the one-hot mask's edges by morphological gradient
    (``max_pool2d(m) + max_pool2d(-m)`` over 3x3, ``SAME``), pixel weights ``1 + 4 * edge``, times
    class-balanced weights by the effective number of samples ``(1 - beta) / (1 - beta^n)`` from
    per-class counts (one class has count 0: ``divide_no_nan`` gives it weight 0, then weights
    renormalised to sum to the number of classes); softmax CE by hand with ``log_softmax``.
    Gradients to a 1x1-conv head and the features, three steps of SGD with momentum."""
    rs = np.random.RandomState(221)
    labels = rs.randint(0, 3, size=(2, 6, 6)).astype(np.int32)
    labels[labels == 2] = 1
    labels = tf.constant(labels)
    feats = tf.Variable(rs.randn(2, 6, 6, 3).astype(np.float32))
    kernel = tf.Variable(init_array((1, 1, 3, 4), 222, 0.4))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    onehot = tf.one_hot(labels, 4)
    edge = tf.reduce_max(tf.nn.max_pool2d(onehot, 3, 1, "SAME") + tf.nn.max_pool2d(-onehot, 3, 1, "SAME"), axis=-1)
    counts = tf.reduce_sum(onehot, axis=[0, 1, 2])
    beta = 0.99
    class_w = tf.math.divide_no_nan(1.0 - beta, 1.0 - tf.pow(beta, counts))
    class_w = class_w / tf.reduce_sum(class_w) * 4.0
    pixel_w = (1.0 + 4.0 * edge) * tf.gather(class_w, labels)

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = tf.nn.conv2d(feats, kernel, 1, "SAME")
            ce = -tf.reduce_sum(onehot * tf.nn.log_softmax(logits), axis=-1)
            loss = tf.reduce_sum(ce * pixel_w) / tf.reduce_sum(pixel_w)
        gk, gf = tape.gradient(loss, [kernel, feats])
        opt.apply_gradients([(gk, kernel)])
        out.append((loss, gk, gf))
    return edge, counts, class_w, out, kernel


@parity(modes=True, **LOOSE)
def test_mean_iou_by_confusion_matrix_with_an_ignore_label_and_an_absent_class(tf):
    """Evaluation as research code writes it: predictions by ``argmax`` of the logits,
    ``tf.math.confusion_matrix`` over flattened pixels with ``weights`` zero at the ignore label
    (its labels first clipped into range), per-class IoU ``diag / (row + col - diag)`` by
    ``divide_no_nan``, the mean over classes present (a class absent from both is left out), and
    the pixel accuracy; accumulated over two batches in a non-trainable Variable by ``assign_add``
    inside a ``tf.function``.  The matrix "saved" after the first batch by ``tf.cast(total,
    tf.int32)`` is the Variable itself in TF (a cast to the own dtype is no op), so it shows the
    second batch too; ``tf.identity`` copies."""
    rs = np.random.RandomState(231)
    logits = [rs.randn(2, 4, 4, 4).astype(np.float32) for _ in range(2)]
    for lg in logits:
        lg[..., 3] -= 50.0
    labels = [rs.randint(0, 3, size=(2, 4, 4)).astype(np.int32) for _ in range(2)]
    labels[0][0, 0, :] = 255
    total = tf.Variable(tf.zeros([4, 4], tf.int32), trainable=False)

    @tf.function
    def update(lg, lb):
        pred = tf.reshape(tf.argmax(lg, axis=-1, output_type=tf.int32), [-1])
        lb = tf.reshape(lb, [-1])
        w = tf.cast(tf.not_equal(lb, 255), tf.int32)
        cm = tf.math.confusion_matrix(tf.where(w > 0, lb, 0), pred, num_classes=4, weights=w, dtype=tf.int32)
        total.assign_add(cm)
        return cm

    cms = [update(tf.constant(logits[0]), tf.constant(labels[0]))]
    after_first = tf.cast(total, tf.int32)   # TF: the Variable itself (same dtype), so not a snapshot
    after_first_copy = tf.identity(total)
    cms.append(update(tf.constant(logits[1]), tf.constant(labels[1])))
    cm = tf.cast(total, tf.float32)
    diag = tf.linalg.diag_part(cm)
    union = tf.reduce_sum(cm, 0) + tf.reduce_sum(cm, 1) - diag
    iou = tf.math.divide_no_nan(diag, union)
    present = tf.cast(union > 0, tf.float32)
    miou = tf.reduce_sum(iou * present) / tf.reduce_sum(present)
    acc = tf.reduce_sum(diag) / tf.reduce_sum(cm)
    return cms, total, iou, miou, acc, after_first, after_first_copy


@parity(modes=True, **LOOSE)
def test_labels_downsampled_by_nearest_and_probabilities_by_antialiased_resize(tf):
    """DeepLab-style training at the output stride: the label map downsampled to the logits by
    ``tf.image.resize(..., method='nearest')`` of a ``[..., None]`` int mask (ints kept by a cast
    round trip), the probabilities upsampled for a second, full-resolution Dice term by bilinear
    ``tf.image.resize`` and a third, coarser term by ``antialias=True``; gradients to a strided conv
    head and the image; Adam steps, the last compiled."""
    x, y = _seg_data(271, hw=8, ignore=False)
    image = tf.Variable(x)
    kernel = tf.Variable(init_array((3, 3, 2, 3), 272, 0.4))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    onehot_full = tf.one_hot(y, 3)

    def step():
        with tf.GradientTape() as tape:
            logits = tf.nn.conv2d(image, kernel, 2, "SAME")
            small = tf.image.resize(tf.cast(y[..., None], tf.float32), tf.shape(logits)[1:3], method="nearest")
            small = tf.cast(small[..., 0], tf.int32)
            ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(small, logits))
            probs = tf.nn.softmax(logits)
            up = tf.image.resize(probs, [8, 8])
            dice = 1.0 - tf.reduce_mean((2.0 * tf.reduce_sum(up * onehot_full, [1, 2]) + 1.0)
                                        / (tf.reduce_sum(up + onehot_full, [1, 2]) + 1.0))
            coarse = tf.image.resize(probs, [3, 3], antialias=True)
            target = tf.image.resize(onehot_full, [3, 3], antialias=True)
            loss = ce + dice + tf.reduce_mean(tf.square(coarse - target))
        gk, gi = tape.gradient(loss, [kernel, image])
        opt.apply_gradients([(gk, kernel)])
        return loss, small, gk, gi

    compiled = tf.function(step)
    return [step(), step(), compiled()], kernel


@parity(modes=True, **LOOSE)
def test_proposals_by_top_k_objectness_padded_nms_and_roi_align_with_box_gradients(tf):
    """A two-stage detector's proposal layer: anchors' deltas (a Variable) decoded to boxes, the
    top-k by objectness (``tf.math.top_k``, tied scores), their boxes gathered by the computed
    indices, ``non_max_suppression_padded`` in a ``tf.function`` with the kept count, and RoI Align
    (``crop_and_resize``) of the kept proposals (padding masked out of the loss); the gradient
    reaches the deltas through ``crop_and_resize``'s boxes gradient and the gathers (zero rows for
    anchors not kept), the objectness gets none (integer indices: None).  The boxes are clipped below
    the image's edge: a box ending at exactly 1.0 puts its last sample at ``y1 * 5 + (1 - y1) * 5``,
    5.0 or 5.0000005 by the last bit of ``y1``, inside the image or extrapolated (TF's own
    discontinuity), and one ulp of the first step's update (XLA's code generation, JAX's version) decided which."""
    rs = np.random.RandomState(281)
    feats = tf.constant(rs.randn(1, 6, 6, 2).astype(np.float32))
    anchors = tf.constant([[0.0, 0.0, 0.5, 0.5], [0.1, 0.1, 0.6, 0.6], [0.5, 0.5, 1.0, 1.0], [0.2, 0.6, 0.7, 0.95],
                           [0.45, 0.0, 0.95, 0.45], [0.3, 0.3, 0.6, 0.6]])
    deltas = tf.Variable(rs.randn(6, 4).astype(np.float32) * 0.05)
    objectness = tf.Variable([0.9, 0.8, 0.9, 0.4, 0.7, 0.8])

    @tf.function
    def propose_and_pool():
        with tf.GradientTape() as tape:
            boxes = tf.clip_by_value(anchors + deltas, 0.0, 0.98)   # (not at the edge: below)
            scores, idx = tf.math.top_k(objectness, k=5)
            top = tf.gather(boxes, idx)
            keep, n = tf.image.non_max_suppression_padded(top, scores, 3, iou_threshold=0.5,
                                                          pad_to_max_output_size=True)
            rois = tf.gather(top, keep)
            pooled = tf.image.crop_and_resize(feats, rois, tf.zeros([3], tf.int32), [2, 2])
            valid = tf.cast(tf.range(3) < n, tf.float32)
            loss = tf.reduce_sum(tf.reduce_mean(tf.square(pooled), axis=[1, 2, 3]) * valid)
        gd, go = tape.gradient(loss, [deltas, objectness])
        return idx, keep, n, rois, loss, gd, go is None

    first = propose_and_pool()
    deltas.assign_sub(0.1 * first[5])
    return first, propose_and_pool()


# ---------------------------------------------------------------------------
# Keras models (tf_keras on TF's side, Keras 3 on tapejax's): default mode
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_keras_fcn_with_conv2d_transpose_and_ignore_class_in_a_custom_loop(tf):
    """A small FCN of ``tf.keras.layers`` (Conv2D, MaxPooling2D, Conv2DTranspose, a skip by
    ``Concatenate``) trained by a tape loop with ``SparseCategoricalCrossentropy(from_logits=True,
    ignore_class=255)`` (two eager steps, one compiled), then ``tf.keras.metrics.MeanIoU`` over the
    predicted masks with the ignore pixels given ``sample_weight`` 0 (labels clipped into range),
    its result, total confusion matrix and a reset."""
    x, y = _seg_data(241, hw=8)
    layers = tf.keras.layers
    inputs = tf.keras.Input((8, 8, 2))
    d1 = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    p1 = layers.MaxPooling2D(2)(d1)
    b = layers.Conv2D(4, 3, padding="same", activation="relu")(p1)
    u1 = layers.Conv2DTranspose(4, 3, strides=2, padding="same")(b)
    out = layers.Conv2D(3, 1)(layers.Concatenate()([u1, d1]))
    model = tf.keras.Model(inputs, out)
    keras_init(model, 242)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255)
    opt = tf.keras.optimizers.Adam(0.01)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, g

    compiled = tf.function(step)
    steps = [(step if i < 2 else compiled)(x, y) for i in range(3)]
    pred = tf.argmax(model(x), axis=-1, output_type=tf.int32)
    metric = tf.keras.metrics.MeanIoU(num_classes=3)
    metric.update_state(np.where(y == 255, 0, y), pred, sample_weight=(y != 255).astype(np.float32))
    res = metric.result()
    cm = np.asarray(metric.total_cm).astype(np.float32)   # (tf_keras keeps it in float32, Keras 3 in int32)
    metric.reset_state()
    return steps, [np.array(w) for w in model.weights], pred, res, cm, metric.result()


@parity(**KTOL)
def test_keras_io_retinanet_losses_as_loss_subclasses_on_a_conv_head(tf):
    """keras.io's RetinaNet losses as written there: ``RetinaNetBoxLoss`` (smooth L1 with delta
    1.0 by ``tf.where(tf.less(abs, delta), ...)``) and ``RetinaNetClassificationLoss`` (focal) as
    ``tf.keras.losses.Loss`` subclasses with ``reduction='none'``, combined by ``RetinaNetLoss``'s
    ``call`` (positive / ignore masks from the class targets, ``divide_no_nan`` by the positive
    count), on a two-layer ``Conv2D`` head (Keras layers) over a feature map; three custom-loop SGD
    steps, the last in a ``tf.function``."""
    class RetinaNetBoxLoss(tf.keras.losses.Loss):
        def __init__(self, delta):
            super().__init__(reduction="none", name="RetinaNetBoxLoss")
            self._delta = delta

        def call(self, y_true, y_pred):
            difference = y_true - y_pred
            absolute_difference = tf.abs(difference)
            squared_difference = difference ** 2
            loss = tf.where(tf.less(absolute_difference, self._delta), 0.5 * squared_difference,
                            absolute_difference - 0.5)
            return tf.reduce_sum(loss, axis=-1)

    class RetinaNetClassificationLoss(tf.keras.losses.Loss):
        def __init__(self, alpha, gamma):
            super().__init__(reduction="none", name="RetinaNetClassificationLoss")
            self._alpha = alpha
            self._gamma = gamma

        def call(self, y_true, y_pred):
            cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
            probs = tf.nn.sigmoid(y_pred)
            alpha = tf.where(tf.equal(y_true, 1.0), self._alpha, (1.0 - self._alpha))
            pt = tf.where(tf.equal(y_true, 1.0), probs, 1 - probs)
            loss = alpha * tf.pow(1.0 - pt, self._gamma) * cross_entropy
            return tf.reduce_sum(loss, axis=-1)

    clf_loss_fn = RetinaNetClassificationLoss(0.25, 2.0)
    box_loss_fn = RetinaNetBoxLoss(1.0)

    def retinanet_loss(y_true, y_pred):
        y_pred = tf.cast(y_pred, dtype=tf.float32)
        box_labels = y_true[:, :, :4]
        box_predictions = y_pred[:, :, :4]
        cls_labels = tf.one_hot(tf.cast(y_true[:, :, 4], dtype=tf.int32), depth=2, dtype=tf.float32)
        cls_predictions = y_pred[:, :, 4:]
        positive_mask = tf.cast(tf.greater(y_true[:, :, 4], -1.0), dtype=tf.float32)
        ignore_mask = tf.cast(tf.equal(y_true[:, :, 4], -2.0), dtype=tf.float32)
        clf_loss = clf_loss_fn(cls_labels, cls_predictions)
        box_loss = box_loss_fn(box_labels, box_predictions)
        clf_loss = tf.where(tf.equal(ignore_mask, 1.0), 0.0, clf_loss)
        box_loss = tf.where(tf.equal(positive_mask, 1.0), box_loss, 0.0)
        normalizer = tf.reduce_sum(positive_mask, axis=-1)
        clf_loss = tf.math.divide_no_nan(tf.reduce_sum(clf_loss, axis=-1), normalizer)
        box_loss = tf.math.divide_no_nan(tf.reduce_sum(box_loss, axis=-1), normalizer)
        return clf_loss + box_loss

    rs = np.random.RandomState(251)
    feats = rs.randn(2, 3, 3, 4).astype(np.float32)
    cls = np.full((2, 9), -1.0, np.float32)
    cls[0, [1, 4]] = [0.0, 1.0]
    cls[0, 7] = -2.0
    y_true = np.concatenate([rs.randn(2, 9, 4).astype(np.float32), cls[..., None]], axis=-1)
    head = tf.keras.Sequential([tf.keras.Input((3, 3, 4)), tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                                tf.keras.layers.Conv2D(6, 1), tf.keras.layers.Reshape((9, 6))])
    keras_init(head, 252)
    opt = tf.keras.optimizers.SGD(0.05)

    def step(x, y):
        with tf.GradientTape() as tape:
            per_image = retinanet_loss(y, head(x, training=True))
            loss = tf.reduce_mean(per_image)
        g = tape.gradient(loss, head.trainable_variables)
        opt.apply_gradients(zip(g, head.trainable_variables))
        return per_image, g

    compiled = tf.function(step)
    steps = [(step if i < 2 else compiled)(feats, y_true) for i in range(3)]
    return steps, [np.array(w) for w in head.weights]


@parity(**KTOL)
def test_binary_focal_crossentropy_against_the_focal_loss_by_hand(tf):
    """``tf.keras.losses.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=0.25, gamma=2,
    from_logits=True)`` on dense per-anchor logits against keras.io's focal loss by hand averaged over
    the last axis; also ``label_smoothing=0.1`` and a ``sample_weight`` with a zero row; gradients to
    the logits of each; the hand-written loss also at saturated logits (+-25).  (Keras 3 computes the
    loss from ``sigmoid(logits)`` clipped to ``[1e-7, 1 - 1e-7]``, tf_keras from the logits, so the
    two Kerases differ at saturated logits: the Keras losses are taken away from them.)"""
    rs = np.random.RandomState(261)
    y = (rs.rand(3, 5) > 0.7).astype(np.float32)
    lg0 = rs.randn(3, 5).astype(np.float32) * 2
    logits = tf.Variable(lg0)
    sat0 = lg0.copy()
    sat0[0, 0], sat0[1, 1], sat0[2, 2] = 25.0, -25.0, 25.0
    saturated = tf.Variable(sat0)
    fl = tf.keras.losses.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=0.25, gamma=2.0, from_logits=True)
    fl_smooth = tf.keras.losses.BinaryFocalCrossentropy(gamma=2.0, from_logits=True, label_smoothing=0.1)
    sw = tf.constant([1.0, 0.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        a = fl(y, logits)
        b = fl_smooth(y, logits, sample_weight=sw)
        ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits)
        p = tf.sigmoid(logits)
        pt = tf.where(tf.equal(y, 1.0), p, 1 - p)
        alpha = tf.where(tf.equal(y, 1.0), 0.25, 0.75)
        hand = tf.reduce_mean(tf.reduce_mean(alpha * tf.pow(1.0 - pt, 2.0) * ce, axis=-1))
        ce_s = tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=saturated)
        ps = tf.sigmoid(saturated)
        pts = tf.where(tf.equal(y, 1.0), ps, 1 - ps)
        hand_s = tf.reduce_mean(alpha * tf.pow(1.0 - pts, 2.0) * ce_s)
    grads = [tape.gradient(v, logits) for v in (a, b, hand)]
    g_s = tape.gradient(hand_s, saturated)
    del tape
    return a, b, hand, grads, hand_s, g_s


@parity(modes=True, **LOOSE)
def test_yolo_letterbox_preprocessing_with_box_adjustment_and_drawn_predictions(tf):
    """YOLO's letterbox: ``tf.image.resize_with_pad`` of a 6x10 image to 8x8 (bilinear), the boxes
    moved into the padded frame by the scale and offsets computed as the repositories do; a loss on
    the letterboxed image gives the original image a gradient; ``resize(preserve_aspect_ratio=True)``
    + ``pad_to_bounding_box`` by hand gives the same frame; the adjusted boxes drawn by
    ``tf.image.draw_bounding_boxes`` for a look, with two colors."""
    rs = np.random.RandomState(291)
    image = tf.Variable(rs.rand(1, 6, 10, 3).astype(np.float32))
    boxes = tf.constant([[[0.1, 0.2, 0.5, 0.6], [0.4, 0.0, 1.0, 0.3]]])
    with tf.GradientTape() as tape:
        boxed = tf.image.resize_with_pad(image, 8, 8)
        resized = tf.image.resize(image, [8, 8], preserve_aspect_ratio=True)
        by_hand = tf.image.pad_to_bounding_box(resized, (8 - tf.shape(resized)[1]) // 2, 0, 8, 8)
        loss = tf.reduce_sum(tf.square(boxed - 0.5)) + 0.5 * tf.reduce_sum(by_hand)
    scale = tf.minimum(8.0 / 6.0, 8.0 / 10.0)
    new_h, new_w = 6.0 * scale, 10.0 * scale
    off_y, off_x = (8.0 - new_h) / 2.0, (8.0 - new_w) / 2.0
    adjusted = (boxes * [new_h, new_w, new_h, new_w] + [off_y, off_x, off_y, off_x]) / 8.0
    drawn = tf.image.draw_bounding_boxes(boxed, adjusted, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return boxed, tf.shape(resized), by_hand, loss, tape.gradient(loss, image), adjusted, drawn


@parity(modes=True, **LOOSE)
def test_rpn_low_quality_matches_and_a_balanced_anchor_sample(tf):
    """Faster R-CNN's RPN targets: labels from an IoU matrix by thresholds 0.7 / 0.3, then each
    ground-truth box forced onto its best anchors (``allow_low_quality_matches``: every anchor
    tied at the column maximum, by ``tf.equal(iou, reduce_max(iou, axis=0))`` and
    ``reduce_any``), a balanced sample of positives and negatives by a fixed NumPy permutation
    (``tf.gather`` of the permutation, ``boolean_mask`` of the eligible, the first ``k`` kept);
    the objectness loss ``sigmoid_cross_entropy_with_logits`` over the sample by
    ``tf.gather`` of computed indices; gradients to the objectness logits Variable (zero off the
    sample), two SGD steps."""
    iou = tf.constant([[0.8, 0.1], [0.5, 0.2], [0.1, 0.25], [0.0, 0.25], [0.2, 0.0], [0.05, 0.1]])
    logits = tf.Variable(np.random.RandomState(301).randn(6).astype(np.float32))
    perm = tf.constant(np.random.RandomState(302).permutation(6).astype(np.int32))

    best = tf.reduce_max(iou, axis=1)
    labels = tf.where(best >= 0.7, 1, tf.where(best < 0.3, 0, -1))
    forced = tf.reduce_any(tf.equal(iou, tf.reduce_max(iou, axis=0, keepdims=True)), axis=1)
    labels = tf.where(forced, 1, labels)
    shuffled = tf.gather(labels, perm)
    pos = tf.boolean_mask(perm, tf.equal(shuffled, 1))[:2]
    neg = tf.boolean_mask(perm, tf.equal(shuffled, 0))[:2]
    sample = tf.concat([pos, neg], axis=0)
    targets = tf.cast(tf.gather(labels, sample), tf.float32)

    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            picked = tf.gather(logits, sample)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=picked))
        g = tape.gradient(loss, logits)
        g = tf.convert_to_tensor(g)
        logits.assign_sub(1.0 * g)
        out.append((loss, g))
    return labels, forced, pos, neg, sample, out, logits
