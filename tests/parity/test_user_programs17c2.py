"""Round seventeen (c) of realistic user programs, second half: metric learning and the loss
engineering around it, written as the TF-era repositories write them (custom ``GradientTape``
loops, some steps under ``tf.function``) and run under real TensorFlow 2.21 and under tapejax with
deferred execution and predicted updates on and off (``modes=True``).

The losses meet the points where a derivative is undefined and TF picks a value: pairwise
distances by the expanded-square trick (``maximum(d2, 0)``, ``sqrt`` at 0 on the diagonal, with
and without the usual epsilon mask), batch-hard and batch-all triplet mining by masks with ties in
``reduce_max``, the siamese contrastive loss with ``tf.norm`` of an identical pair, center loss
with centres updated by ``scatter_sub`` of ``IndexedSlices`` and by ``tensor_scatter_nd_sub`` (with
repeated labels), ArcFace's ``acos`` at a cosine of exactly 1, CosFace and proxy-NCA with a
``-inf`` mask, the N-pair loss, focal loss at ``p = 1`` with several ``gamma``, label smoothing by
Keras and by hand, class-balanced weights, uncertainty-weighted multi-task losses with GradNorm's
per-task gradient norms, Dice / soft-IoU on an empty mask and the Lovasz hinge (``top_k`` with tied
errors, ``cumsum``), WGAN-GP whose critic has a zero input gradient, a hinge GAN whose learning
rates are Variables assigned on a schedule, CTC with an infeasible label, and Huber, log-cosh and
pinball losses at their kinks.  The self- and semi-supervised programs are in
``test_user_programs17c.py``.  Every number trained on is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _nan_as(t, tf, fill=-7.0):
    """``t`` with its NaNs replaced (the harness compares NaN to NaN too; this keeps a NaN's
    position visible in the output next to the finite entries)."""
    return tf.where(tf.math.is_nan(t), fill, t)


def _pairwise_sq(tf, e):
    """The expanded-square pairwise squared distances ``|a|^2 - 2 a.b + |b|^2``, clamped at 0."""
    dot = tf.matmul(e, e, transpose_b=True)
    sq = tf.linalg.diag_part(dot)
    return tf.maximum(tf.expand_dims(sq, 0) - 2.0 * dot + tf.expand_dims(sq, 1), 0.0)


# ---------------------------------------------------------------------------
# Metric learning
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_batch_hard_triplet_loss_with_the_sqrt_at_zero_masked_and_unmasked(tf):
    """Batch-hard triplet loss as the popular TF implementation writes it: pairwise distances by the
    expanded square, ``maximum(d2, 0)``, then ``sqrt`` of ``d2 + mask * 1e-16`` zeroed back on the
    exact zeros (the diagonal); the hardest positive by ``reduce_max`` over the masked distances,
    the hardest negative by ``reduce_min`` after adding the row maximum to the non-negatives.  Two
    rows are duplicates (a tie in the hardest positive: TF's max gradient is split over the ties).
    The unmasked ``sqrt(maximum(d2, 0))`` is the form the epsilon guards against (sqrt's infinite
    derivative at the diagonal's 0); TF 2.21's sqrt gradient is 0 where the incoming gradient is 0,
    so it has no NaN here either, and both forms' gradients are compared; the masked form trains."""
    rs = np.random.RandomState(2001)
    x = rs.randn(6, 4).astype(np.float32)
    x[3] = x[2]
    labels = tf.constant([0, 0, 1, 1, 1, 2])
    w = tf.Variable(init_array((4, 3), 2002))
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def distances(e, masked):
        d2 = _pairwise_sq(tf, e)
        if not masked:
            return tf.sqrt(d2)
        zero = tf.cast(tf.equal(d2, 0.0), tf.float32)
        return tf.sqrt(d2 + zero * 1e-16) * (1.0 - zero)

    eq = tf.equal(tf.expand_dims(labels, 0), tf.expand_dims(labels, 1))
    not_self = tf.logical_not(tf.cast(tf.eye(6), tf.bool))
    pos_mask = tf.cast(tf.logical_and(eq, not_self), tf.float32)
    neg_mask = tf.cast(tf.logical_not(eq), tf.float32)
    out = []
    for masked in (False, True, True, True):
        with tf.GradientTape() as tape:
            d = distances(tf.matmul(x, w), masked)
            hardest_pos = tf.reduce_max(pos_mask * d, axis=1, keepdims=True)
            max_d = tf.reduce_max(d, axis=1, keepdims=True)
            hardest_neg = tf.reduce_min(d + max_d * (1.0 - neg_mask), axis=1, keepdims=True)
            loss = tf.reduce_mean(tf.maximum(hardest_pos - hardest_neg + 0.5, 0.0))
        g = tape.gradient(loss, w)
        if masked:
            opt.apply_gradients([(g, w)])
        out.append((loss, hardest_pos, hardest_neg, tf.reduce_any(tf.math.is_nan(g)), _nan_as(g, tf)))
    return out, w


@parity(modes=True, **LOOSE)
def test_batch_all_triplet_loss_counts_the_positive_triplets_in_a_compiled_step(tf):
    """Batch-all triplet loss: the [B, B, B] tensor ``d(a, p) - d(a, n) + margin`` masked by
    distinct indices and valid labels (``tf.logical_and`` of broadcast masks), ``relu``, and the
    average over the triplets whose loss is positive (counted with ``tf.greater(., 1e-16)``), the
    fraction of positive triplets logged; the squared-distance variant (no sqrt) in a compiled step
    with Adam."""
    rs = np.random.RandomState(2011)
    x = rs.randn(6, 3).astype(np.float32)
    labels = tf.constant([0, 1, 0, 1, 2, 2])
    w = tf.Variable(init_array((3, 3), 2012))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    idx_ne = tf.logical_not(tf.cast(tf.eye(6), tf.bool))
    distinct = tf.logical_and(tf.logical_and(tf.expand_dims(idx_ne, 2), tf.expand_dims(idx_ne, 1)),
                              tf.expand_dims(idx_ne, 0))
    eq = tf.equal(tf.expand_dims(labels, 0), tf.expand_dims(labels, 1))
    valid = tf.logical_and(tf.expand_dims(eq, 2), tf.logical_not(tf.expand_dims(eq, 1)))
    mask = tf.cast(tf.logical_and(distinct, valid), tf.float32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            d = _pairwise_sq(tf, tf.matmul(x, w))
            t = (tf.expand_dims(d, 2) - tf.expand_dims(d, 1) + 1.0) * mask
            t = tf.maximum(t, 0.0)
            num_pos = tf.reduce_sum(tf.cast(tf.greater(t, 1e-16), tf.float32))
            loss = tf.reduce_sum(t) / (num_pos + 1e-16)
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return loss, num_pos, num_pos / tf.reduce_sum(mask), g

    out = [step() for _ in range(4)]
    return out, w, tf.reduce_sum(mask)


@parity(modes=True, **LOOSE)
def test_siamese_contrastive_loss_with_tf_norm_of_an_identical_pair(tf):
    """Hadsell's contrastive loss on pairs, ``y d^2 + (1 - y) max(margin - d, 0)^2``, with ``d``
    two ways: keras.io's ``sqrt(maximum(sum_sq, epsilon))`` and ``tf.norm(a - b, axis=1)``.  One
    dissimilar pair is identical (``d = 0``, the hinge's gradient there -2): ``tf.norm``'s
    gradient is sqrt's infinite derivative times a zero, NaN in TF; the epsilon form is finite
    (its ``maximum`` passes no gradient below epsilon); the NaN-ness is compared and the epsilon
    form trains with RMSprop."""
    rs = np.random.RandomState(2021)
    a = rs.randn(5, 3).astype(np.float32)
    b = rs.randn(5, 3).astype(np.float32)
    b[2] = a[2]
    y = np.array([1, 0, 0, 1, 0], np.float32)
    w = tf.Variable(init_array((3, 2), 2022))
    opt = tf.keras.optimizers.legacy.RMSprop(0.05)

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            ea, eb = tf.matmul(a, w), tf.matmul(b, w)
            d_eps = tf.sqrt(tf.maximum(tf.reduce_sum(tf.square(ea - eb), axis=1), 1e-7))
            d_norm = tf.norm(ea - eb, axis=1)
            losses = [tf.reduce_mean(y * tf.square(d) + (1 - y) * tf.square(tf.maximum(1.0 - d, 0.0)))
                      for d in (d_eps, d_norm)]
        g_eps, g_norm = [tape.gradient(loss, w) for loss in losses]
        del tape
        opt.apply_gradients([(g_eps, w)])
        out.append((losses, d_eps, d_norm, g_eps, tf.reduce_any(tf.math.is_nan(g_norm))))
    return out, w


@parity(modes=True, **LOOSE)
def test_center_loss_with_centres_updated_by_scatter_sub_and_tensor_scatter_nd_sub(tf):
    """Center loss (Wen et al.) as TF ports write it: centres in a non-trainable Variable, the loss
    ``mean |f - c_y|^2`` plus softmax cross-entropy, and after each step the centres move by
    ``alpha * (c_y - f) / (1 + count_y)`` with the counts by ``tf.unique_with_counts``: once by
    ``centers.scatter_sub(tf.IndexedSlices(...))`` (repeated labels accumulate) and, for a twin
    Variable, by ``assign(tf.tensor_scatter_nd_sub(...))`` inside a compiled step.  The centres get
    no gradient (read through ``tf.gather`` of an unwatched Variable: None)."""
    rs = np.random.RandomState(2031)
    x = rs.randn(6, 3).astype(np.float32)
    labels = tf.constant([0, 2, 0, 0, 2, 1])
    w = tf.Variable(init_array((3, 2), 2032))
    head = tf.Variable(init_array((2, 3), 2033))
    centers = tf.Variable(tf.zeros([3, 2]), trainable=False)
    twin = tf.Variable(tf.zeros([3, 2]), trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def diffs(f):
        _, idx, count = tf.unique_with_counts(labels)
        appear = tf.cast(tf.gather(count, idx), tf.float32)[:, None]
        return 0.5 * (tf.gather(centers, labels) - f) / (1.0 + appear)

    @tf.function
    def twin_update(f):
        twin.assign(tf.tensor_scatter_nd_sub(twin, labels[:, None], 0.5 * (tf.gather(twin, labels) - f) / (
            1.0 + tf.cast(tf.gather(tf.unique_with_counts(labels)[2], tf.unique_with_counts(labels)[1]),
                          tf.float32)[:, None])))

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            f = tf.matmul(x, w)
            center_loss = tf.reduce_mean(tf.reduce_sum(tf.square(f - tf.gather(centers, labels)), axis=1))
            ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.matmul(f, head)))
            loss = ce + 0.1 * center_loss
        g = tape.gradient(loss, [w, head, centers])
        opt.apply_gradients(zip(g[:2], [w, head]))
        centers.scatter_sub(tf.IndexedSlices(diffs(f), labels))
        twin_update(f)
        out.append((loss, center_loss, g[:2], g[2] is None, tf.identity(centers)))
    return out, w, head, centers, twin


@parity(modes=True, **LOOSE)
def test_arcface_margin_with_acos_at_a_cosine_of_exactly_one(tf):
    """ArcFace: features and class weights ``l2_normalize``d (weights along axis 0), ``cos`` by
    ``matmul``, ``theta = acos(clip(cos, -1 + eps, 1 - eps))``, the target logit
    ``cos(theta + m)`` put in by ``one_hot`` and ``tf.where``, scaled by ``s``.  A feature lies
    exactly along its class weight (cos = 1): without the clip ``acos``'s derivative there is
    infinite, the gradients NaN / inf (compared by ``is_finite``); clipped, the margin trains
    (``clip_by_value`` passes no gradient at the clipped entry)."""
    rs = np.random.RandomState(2041)
    x = rs.randn(4, 2).astype(np.float32)
    x[0] = [3.0, 0.0]
    labels = tf.constant([0, 1, 2, 1])
    w_init = init_array((2, 3), 2042)
    w_init[:, 0] = [2.0, 0.0]
    w = tf.Variable(w_init)
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    s, m = 4.0, 0.3

    out = []
    for clip in (False, True, True, True):
        with tf.GradientTape() as tape:
            cos = tf.matmul(tf.math.l2_normalize(x, axis=1), tf.math.l2_normalize(w, axis=0))
            c = tf.clip_by_value(cos, -1.0 + 1e-7, 1.0 - 1e-7) if clip else cos
            theta = tf.acos(c)
            target = tf.cos(theta + m)
            onehot = tf.one_hot(labels, 3)
            logits = s * tf.where(onehot > 0, target, cos)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        g = tape.gradient(loss, w)
        if clip:
            opt.apply_gradients([(g, w)])
        out.append((loss, cos, theta, tf.math.is_finite(g)))
        out.append(tf.where(tf.math.is_finite(g), g, 0.0))
    return out, w


@parity(modes=True, **LOOSE)
def test_cosface_and_proxy_nca_with_a_minus_inf_masked_logsumexp(tf):
    """CosFace (``s * (cos - m * onehot)``) on l2-normalised features and weights, beside proxy-NCA:
    learnable proxies (l2-normalised, scaled), ``-|x - p|^2`` to each by the expanded square, the
    positive proxy's term against the log-sum-exp over the *other* proxies (its own masked by
    ``tf.where(onehot, -inf, .)``).  Both trained together by Adam in a compiled step; the proxies
    get gradients through the mask's other branch only."""
    rs = np.random.RandomState(2051)
    x = rs.randn(6, 3).astype(np.float32)
    labels = tf.constant([0, 1, 2, 0, 1, 2])
    emb = tf.Variable(init_array((3, 3), 2052))
    w = tf.Variable(init_array((3, 3), 2053))
    proxies = tf.Variable(init_array((3, 3), 2054))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            f = tf.math.l2_normalize(tf.matmul(x, emb), axis=1)
            cos = tf.matmul(f, tf.math.l2_normalize(w, axis=0))
            onehot = tf.one_hot(labels, 3)
            cosface = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(onehot, 8.0 * (cos - 0.35 * onehot)))
            p = 3.0 * tf.math.l2_normalize(proxies, axis=1)
            fx = 3.0 * f
            d = (tf.reduce_sum(fx * fx, 1, keepdims=True) - 2.0 * tf.matmul(fx, p, transpose_b=True)
                 + tf.reduce_sum(p * p, 1)[None, :])
            pos = tf.reduce_sum(-d * onehot, axis=1)
            neg = tf.reduce_logsumexp(tf.where(onehot > 0, -np.inf, -d), axis=1)
            nca = tf.reduce_mean(-(pos - neg))
            loss = cosface + nca
        vs = [emb, w, proxies]
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return cosface, nca, g

    out = [step() for _ in range(3)]
    return out, emb, w, proxies


@parity(modes=True, **LOOSE)
def test_n_pair_loss_with_multi_positive_labels_and_embedding_l2(tf):
    """The N-pair loss: ``logits = anchors @ positives^T``, targets the row-normalised label-equality
    matrix (two anchors share a class, so a row has two positives) through
    ``tf.keras.losses.categorical_crossentropy(from_logits=True)`` and by ``log_softmax`` by hand,
    plus the embedding L2 term ``mean(sum(a^2) + sum(p^2)) * 0.25 * 0.002``; SGD with momentum,
    eager steps."""
    rs = np.random.RandomState(2061)
    xa = rs.randn(5, 3).astype(np.float32)
    xp = (xa + 0.3 * rs.randn(5, 3)).astype(np.float32)
    labels = tf.constant([0, 1, 2, 1, 3])
    w = tf.Variable(init_array((3, 4), 2062))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)

    eq = tf.cast(tf.equal(labels[:, None], labels[None, :]), tf.float32)
    target = eq / tf.reduce_sum(eq, axis=1, keepdims=True)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            a, p = tf.matmul(xa, w), tf.matmul(xp, w)
            logits = tf.matmul(a, p, transpose_b=True)
            xent = tf.reduce_mean(tf.keras.losses.categorical_crossentropy(target, logits, from_logits=True))
            by_hand = tf.reduce_mean(-tf.reduce_sum(target * tf.nn.log_softmax(logits), axis=1))
            l2 = tf.reduce_mean(tf.reduce_sum(a * a, 1) + tf.reduce_sum(p * p, 1)) * 0.25 * 0.002
            loss = xent + l2
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, xent, by_hand, l2, g))
    return out, w
