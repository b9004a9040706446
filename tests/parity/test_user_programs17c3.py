"""Round seventeen (c) of realistic user programs, third part: loss engineering as the TF-era
repositories write it (custom ``GradientTape`` loops, some steps under ``tf.function``), run under
real TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and off
(``modes=True``).

Each loss meets a point where a derivative is undefined or infinite and TF picks a value: focal
loss at ``p = 1`` exactly (``pow(1 - p, gamma)`` with gamma 0, 0.5 and 2) next to the Keras focal
losses, label smoothing by Keras and by hand, class-balanced weights by the effective number of
samples, uncertainty-weighted multi-task losses with GradNorm's per-task gradient norms, Dice and
soft IoU on an empty mask and the Lovasz hinge (``top_k`` over tied errors, ``cumsum``), WGAN-GP
whose critic has a zero input gradient at one interpolate (``norm`` at 0), a hinge GAN whose
learning rates are Variables assigned on a schedule, CTC with a repeated and an infeasible label
(finite in TF with dense labels, so a ``tf.where(is_finite)`` guard keeps it; inf with sparse
labels), supervised contrastive loss with an anchor without positives, Huber, log-cosh and pinball
losses at their kinks (``tf.maximum`` at a tie, ``abs`` at 0, ``cosh`` overflowing), and saturated
sigmoid / softmax Keras classifiers. The metric-learning programs are in
``test_user_programs17c2.py``. Every number trained on is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _finite(t, tf):
    """``t`` with its non-finite entries as 0, and where they were (a NaN's or inf's position is
    part of the result, its arithmetic is not)."""
    ok = tf.math.is_finite(t)
    return tf.where(ok, t, 0.0), ok


@parity(modes=True, **LOOSE)
def test_focal_loss_at_a_probability_of_exactly_one_by_hand_and_by_keras(tf):
    """Focal loss ``-alpha_t (1 - p_t)^gamma log(p_t)`` written by hand from ``sigmoid`` (one logit
    so large that ``p = 1`` in float32: ``pow(0, gamma)``, whose derivative is 0 for gamma 2,
    infinite for 0.5 and ``0 * 0^-1`` for gamma 0) for three gammas, next to
    ``tf.keras.losses.BinaryFocalCrossentropy`` (from logits and from probabilities, with class
    balancing).  Values and gradients' finiteness compared; the gamma-2 loss trains a linear
    classifier."""
    rs = np.random.RandomState(3001)
    x = rs.randn(6, 2).astype(np.float32)
    x[0] = [30.0, 30.0]
    y = np.array([[1], [0], [1], [1], [0], [1]], np.float32)
    w = tf.Variable(np.array([[1.0], [0.5]], np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    keras_losses = [tf.keras.losses.BinaryFocalCrossentropy(gamma=2.0, from_logits=True),
                    tf.keras.losses.BinaryFocalCrossentropy(gamma=2.0, apply_class_balancing=True, alpha=0.25)]

    def focal(logits, gamma):
        p = tf.sigmoid(logits)
        p_t = y * p + (1 - y) * (1 - p)
        alpha_t = y * 0.25 + (1 - y) * 0.75
        return tf.reduce_mean(-alpha_t * tf.pow(1.0 - p_t, gamma) * tf.math.log(tf.maximum(p_t, 1e-7)))

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            logits = tf.matmul(x, w)
            losses = [focal(logits, g) for g in (0.0, 0.5, 2.0)]
            losses += [keras_losses[0](y, logits), keras_losses[1](y, tf.sigmoid(logits))]
        grads = [_finite(tape.gradient(loss, w), tf) for loss in losses]
        opt.apply_gradients([(tape.gradient(losses[2], w), w)])
        del tape
        out.append((losses, grads))
    return out, w


@parity(modes=True, **LOOSE)
def test_label_smoothing_by_keras_and_by_hand_with_class_balanced_weights(tf):
    """Label smoothing: ``tf.keras.losses.categorical_crossentropy(y, logits, from_logits=True,
    label_smoothing=0.1)``, the ``CategoricalCrossentropy`` class with the same smoothing and
    ``sample_weight``, and by hand (``y * (1 - ls) + ls / K`` against ``log_softmax``).  The
    sample weights are class-balanced by the effective number of samples,
    ``(1 - beta) / (1 - beta^n_c)`` with ``n_c`` from ``tf.math.bincount(labels, minlength=3,
    maxlength=3)`` of the batch's labels inside the compiled step, normalised to sum to the number
    of classes and gathered per example.  Adam trains on the weighted loss."""
    rs = np.random.RandomState(3011)
    x = rs.randn(8, 3).astype(np.float32)
    labels = tf.constant([0, 0, 0, 0, 0, 1, 1, 2])
    w = tf.Variable(init_array((3, 3), 3012))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    cce = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)

    @tf.function
    def step(labels):
        counts = tf.cast(tf.math.bincount(labels, minlength=3, maxlength=3), tf.float32)
        cb = (1.0 - 0.9) / (1.0 - tf.pow(0.9, counts))
        cb = cb / tf.reduce_sum(cb) * 3.0
        sample_w = tf.gather(cb, labels)
        y = tf.one_hot(labels, 3)
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            fn = tf.keras.losses.categorical_crossentropy(y, logits, from_logits=True, label_smoothing=0.1)
            by_hand = -tf.reduce_sum((y * 0.9 + 0.1 / 3) * tf.nn.log_softmax(logits), axis=1)
            weighted = cce(y, logits, sample_weight=sample_w)
        g = tape.gradient(weighted, w)
        opt.apply_gradients([(g, w)])
        return fn, by_hand, weighted, tf.reduce_sum(by_hand * sample_w) / 8.0, g, counts, cb

    out = [step(labels) for _ in range(3)]
    return out, w


@parity(modes=True, **LOOSE)
def test_uncertainty_weighted_multi_task_with_gradnorm_style_per_task_gradient_norms(tf):
    """Kendall et al.'s uncertainty weighting: a shared trunk, a classification head and a
    regression head; ``sum(exp(-s_i) L_i + s_i)`` (the regression term halved) with learned
    log-variances ``s`` in a Variable of two entries; a persistent tape also gives each weighted
    task loss's gradient norm on the last shared kernel (what GradNorm balances), logged.  The
    trunk and heads by one Adam, the log-variances by another, in a compiled step."""
    rs = np.random.RandomState(3021)
    x = rs.randn(8, 3).astype(np.float32)
    cls = rs.randint(0, 2, size=8).astype(np.int32)
    reg = rs.randn(8, 1).astype(np.float32)
    trunk = tf.Variable(init_array((3, 4), 3022))
    head_c = tf.Variable(init_array((4, 2), 3023))
    head_r = tf.Variable(init_array((4, 1), 3024))
    log_vars = tf.Variable([0.0, 0.0])
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    opt_s = tf.keras.optimizers.legacy.Adam(0.1)

    @tf.function
    def step():
        with tf.GradientTape(persistent=True) as tape:
            h = tf.tanh(tf.matmul(x, trunk))
            l_c = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(cls, tf.matmul(h, head_c)))
            l_r = tf.reduce_mean(tf.square(tf.matmul(h, head_r) - reg))
            w_c = tf.exp(-log_vars[0]) * l_c
            w_r = 0.5 * tf.exp(-log_vars[1]) * l_r
            loss = w_c + w_r + tf.reduce_sum(log_vars)
        norms = [tf.norm(tape.gradient(t, trunk)) for t in (w_c, w_r)]
        ws = [trunk, head_c, head_r]
        g = tape.gradient(loss, ws + [log_vars])
        g_none = [tape.gradient(w_c, head_r) is None, tape.gradient(w_r, head_c) is None]
        del tape
        opt.apply_gradients(zip(g[:3], ws))
        opt_s.apply_gradients([(g[3], log_vars)])
        return loss, l_c, l_r, norms, g, g_none

    out = [step() for _ in range(4)]
    return out, trunk, head_c, head_r, log_vars


@parity(modes=True, **LOOSE)
def test_dice_soft_iou_and_lovasz_hinge_on_masks_with_an_empty_one(tf):
    """Segmentation losses on 2 tiny masks (one empty): soft Dice per image
    ``1 - (2 sum(p y) + s) / (sum p + sum y + s)`` with ``s = 1`` and with ``s = 0`` (0/0 on the
    empty mask: NaN, position compared), soft IoU, and the Lovasz hinge as its reference code
    writes it: errors ``1 - logits * signs`` sorted by ``tf.nn.top_k`` (tied errors: the order of
    ties matters for the gathered labels), the Lovasz extension's gradient by ``cumsum`` and a
    difference through ``tf.concat``, ``dot(relu(errors_sorted), stop_gradient(grad))``.  A
    per-pixel linear model trained on Dice + Lovasz by SGD."""
    rs = np.random.RandomState(3031)
    feats = rs.randn(2, 3, 3, 2).astype(np.float32)
    masks = np.zeros((2, 3, 3), np.float32)
    masks[0, :2, 1:] = 1.0
    w = tf.Variable(np.array([[0.5], [-0.5]], np.float32))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def lovasz_hinge_flat(logits, labels):
        signs = 2.0 * labels - 1.0
        errors = 1.0 - logits * signs
        errors_sorted, perm = tf.nn.top_k(errors, k=tf.shape(errors)[0])
        gt_sorted = tf.gather(labels, perm)
        gts = tf.reduce_sum(gt_sorted)
        intersection = gts - tf.cumsum(gt_sorted)
        union = gts + tf.cumsum(1.0 - gt_sorted)
        jaccard = 1.0 - intersection / union
        grad = tf.concat((jaccard[0:1], jaccard[1:] - jaccard[:-1]), 0)
        return tf.tensordot(tf.nn.relu(errors_sorted), tf.stop_gradient(grad), 1), perm

    out = []
    for step in range(3):
        with tf.GradientTape() as tape:
            logits = tf.squeeze(tf.tensordot(feats, w, 1), -1) + b
            if step == 0:
                logits = logits + tf.stop_gradient(tf.round(logits * 2.0) / 2.0 - logits)   # (tied errors)
            p = tf.sigmoid(logits)
            inter = tf.reduce_sum(p * masks, axis=[1, 2])
            total = tf.reduce_sum(p, axis=[1, 2]) + tf.reduce_sum(masks, axis=[1, 2])
            dice1 = 1.0 - (2.0 * inter + 1.0) / (total + 1.0)
            dice0 = 1.0 - (2.0 * inter) / total
            iou = 1.0 - (inter + 1.0) / (total - inter + 1.0)
            lov, perm = lovasz_hinge_flat(tf.reshape(logits, [-1]), tf.reshape(masks, [-1]))
            loss = tf.reduce_mean(dice1) + lov
        g = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(g, [w, b]))
        out.append((loss, dice1, _finite(dice0, tf), iou, lov, perm, g))
    return out, w, b


@parity(modes=True, **LOOSE)
def test_wgan_gp_where_one_interpolate_has_a_zero_input_gradient(tf):
    """WGAN-GP as keras.io writes it: interpolates ``alpha * real + (1 - alpha) * fake``, an inner
    tape on them, ``norm = sqrt(reduce_sum(square(grads), axis=1))`` and ``mean((norm - 1)^2)``.
    The critic is a ReLU layer and one interpolate sits where every unit is off: its input
    gradient is exactly 0, ``sqrt(0)``'s infinite derivative times a zero gives NaN critic
    gradients in TF; the variant with ``sqrt(sum + 1e-12)`` is finite and trains (Adam, beta_1 0).
    The generator step follows with ``-mean(D(G(z)))``."""
    rs = np.random.RandomState(3041)
    real = rs.randn(4, 2).astype(np.float32)
    z = rs.randn(4, 2).astype(np.float32)
    alpha = rs.rand(4, 1).astype(np.float32)
    d1 = tf.Variable(np.array([[1.0, 0.5, -0.3], [0.2, 1.0, 0.4]], np.float32))
    db = tf.Variable(np.zeros(3, np.float32))
    d2 = tf.Variable(init_array((3, 1), 3042))
    gk = tf.Variable(init_array((2, 2), 3043))
    real[0] = [-5.0, -5.0]
    d_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.0)
    g_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.0)

    def critic(x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, d1) + db), d2)

    def generate():
        return tf.matmul(z, gk)

    out = []
    for eps in (None, 1e-12, 1e-12):
        fake = tf.tensor_scatter_nd_update(generate(), [[0]], [[-5.0, -5.0]])   # (row 0: all units off)
        with tf.GradientTape() as d_tape:
            inter = alpha * real + (1.0 - alpha) * fake
            with tf.GradientTape() as gp_tape:
                gp_tape.watch(inter)
                pred = critic(inter)
            grads = gp_tape.gradient(pred, inter)
            sq = tf.reduce_sum(tf.square(grads), axis=1)
            norm = tf.sqrt(sq) if eps is None else tf.sqrt(sq + eps)
            gp = tf.reduce_mean(tf.square(norm - 1.0))
            d_loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + 10.0 * gp
        dg = d_tape.gradient(d_loss, [d1, db, d2])
        if eps is not None:
            d_opt.apply_gradients(zip(dg, [d1, db, d2]))
        with tf.GradientTape() as g_tape:
            g_loss = -tf.reduce_mean(critic(generate()))
        gg = g_tape.gradient(g_loss, gk)
        g_opt.apply_gradients([(gg, gk)])
        out.append((d_loss, gp, norm, [_finite(t, tf) for t in dg], g_loss, gg))
    return out, d1, db, d2, gk


@parity(modes=True, **LOOSE)
def test_hinge_gan_with_learning_rates_in_variables_assigned_on_a_schedule(tf):
    """A hinge-loss GAN (SAGAN / BigGAN style): ``mean(relu(1 - D(real))) + mean(relu(1 + D(fake)))``
    for the critic, ``-mean(D(fake))`` for the generator, two time-scale learning rates held in
    ``tf.Variable``s passed to the legacy Adams and decayed linearly by ``assign`` after each
    step; one real sample sits exactly on the hinge (``D = 1``: relu's gradient at 0 is 0).  The
    critic step is compiled, the generator step eager."""
    rs = np.random.RandomState(3051)
    real = rs.randn(4, 2).astype(np.float32)
    real[0] = [1.0, 0.0]
    z = rs.randn(4, 2).astype(np.float32)
    dw = tf.Variable(np.array([[1.0], [0.3]], np.float32))
    db = tf.Variable([0.0])
    gw = tf.Variable(init_array((2, 2), 3052))
    lr_d = tf.Variable(0.04, trainable=False)
    lr_g = tf.Variable(0.01, trainable=False)
    d_opt = tf.keras.optimizers.legacy.Adam(lr_d, beta_1=0.0, beta_2=0.9)
    g_opt = tf.keras.optimizers.legacy.Adam(lr_g, beta_1=0.0, beta_2=0.9)

    def d(x):
        return tf.matmul(x, dw) + db

    @tf.function
    def d_step():
        with tf.GradientTape() as tape:
            real_out = d(real)
            loss = tf.reduce_mean(tf.nn.relu(1.0 - real_out)) + tf.reduce_mean(tf.nn.relu(1.0 + d(tf.matmul(z, gw))))
        g = tape.gradient(loss, [dw, db, gw])
        d_opt.apply_gradients(zip(g[:2], [dw, db]))
        return loss, real_out, g

    out = []
    for step in range(4):
        d_loss, real_out, dg = d_step()
        with tf.GradientTape() as tape:
            g_loss = -tf.reduce_mean(d(tf.matmul(z, gw)))
        gg = tape.gradient(g_loss, [gw, dw])
        g_opt.apply_gradients([(gg[0], gw)])
        lr_d.assign(0.04 * (1.0 - (step + 1) / 4))
        lr_g.assign(lr_g * 0.5)
        out.append((d_loss, real_out, dg[:2], dg[2], g_loss, gg, tf.identity(lr_d), tf.identity(lr_g)))
    return out, dw, db, gw, int(d_opt.iterations), int(g_opt.iterations)


def _ctc_program(tf, labels, label_len, logit_len):
    """A per-frame linear model trained by ``tf.nn.ctc_loss`` (dense labels, time-major logits,
    ``blank_index=0``, ``logit_length``) in a compiled SGD step; non-finite per-sequence losses
    zeroed by ``tf.where(tf.math.is_finite(per), per, 0)`` (PyTorch's ``zero_infinity`` as TF
    users write it) and the rest averaged."""
    rs = np.random.RandomState(3061)
    frames = rs.randn(5, 2, 3).astype(np.float32)   # [time, batch, features]
    w = tf.Variable(init_array((3, 3), 3062))
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    @tf.function
    def step():
        with tf.GradientTape(persistent=True) as tape:
            logits = tf.einsum("tbf,fc->tbc", frames, w)
            per = tf.nn.ctc_loss(labels, logits, label_len, logit_len, logits_time_major=True, blank_index=0)
            finite, loss = _finite_mean(tf, per)
            second = per[1]
        g = tape.gradient(loss, w)
        g_second = tape.gradient(second, w)
        del tape
        opt.apply_gradients([(g, w)])
        return per, finite, loss, g, g_second

    return [step() for _ in range(3)], w


def _finite_mean(tf, per):
    """The ``is_finite`` guard users copy from PyTorch: the mean of the finite losses (and the mask)."""
    finite = tf.math.is_finite(per)
    return finite, tf.reduce_sum(tf.where(finite, per, 0.0)) / tf.maximum(tf.reduce_sum(tf.cast(finite, tf.float32)), 1.0)


@parity(modes=True, **LOOSE)
def test_ctc_time_major_with_blank_zero_and_a_repeated_label_in_a_compiled_step(tf):
    """CTC where the second label ``[1, 1]`` repeats (a blank must separate the repeats: 3 of its
    4 frames are needed) and the first is shorter than its logits; every loss finite."""
    return _ctc_program(tf, np.array([[2, 1, 0], [1, 1, 0]], np.int32), np.array([2, 2], np.int32),
                        np.array([5, 4], np.int32))


@parity(modes=True, **LOOSE)
def test_ctc_with_an_infeasible_label_is_finite_in_tf_and_not_zeroed(tf):
    """The same program where the second label ``[1, 1, 2]`` needs 4 frames and has 3: TF's loss is
    finite (about 708, from its ``log(1e-307)`` for log 0), so the ``is_finite`` guard users copy
    from PyTorch does not zero it.  (tapejax's CTC gave 706.97 where TF gives 707.84: optax's
    recursion, now TF's.)"""
    return _ctc_program(tf, np.array([[2, 1, 0], [1, 1, 2]], np.int32), np.array([2, 3], np.int32),
                        np.array([5, 3], np.int32))


@parity(modes=True, **LOOSE)
def test_ctc_with_sparse_labels_from_dense_including_a_label_with_no_path(tf):
    """CTC as the older OCR examples feed it: padded label rows turned into a ``SparseTensor`` by
    ``tf.sparse.from_dense`` (padding 0 dropped), ``blank_index=-1``, batch-major logits; TF's
    CTCLoss kernel gives the second row (``[1, 1, 2]`` in 3 frames: its repeat needs a blank)
    ``inf`` with the softmax as its gradient, so the ``is_finite`` guard zeroes it here; eager SGD
    steps on the finite mean."""
    rs = np.random.RandomState(3081)
    frames = rs.randn(2, 4, 3).astype(np.float32)
    labels = tf.sparse.from_dense(np.array([[2, 1, 0], [1, 1, 2]], np.int32))
    w = tf.Variable(init_array((3, 4), 3082))
    opt = tf.keras.optimizers.legacy.SGD(0.2)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            logits = tf.einsum("btf,fc->btc", frames, w)
            per = tf.nn.ctc_loss(labels, logits, None, np.array([4, 3], np.int32), logits_time_major=False,
                                 blank_index=-1)
            finite, loss = _finite_mean(tf, per)
            second = per[1]
        g = tape.gradient(loss, w)
        g_second = tape.gradient(second, w)
        del tape
        opt.apply_gradients([(g, w)])
        out.append((per, finite, loss, g, g_second))
    return out, w


@parity(modes=True, **LOOSE)
def test_supervised_contrastive_loss_with_an_anchor_without_positives(tf):
    """SupCon (Khosla et al.): l2-normalised embeddings, ``logits = z z^T / T`` with the row max
    subtracted under ``stop_gradient``, self-contrast removed by a ``1 - eye`` mask, the log-prob
    of positives averaged per anchor by ``divide_no_nan`` of the positive count (one anchor has no
    positive: count 0, its term 0), and the mean over anchors; Adam, eager."""
    rs = np.random.RandomState(3071)
    x = rs.randn(6, 3).astype(np.float32)
    labels = tf.constant([0, 1, 0, 1, 2, 1])
    w = tf.Variable(init_array((3, 3), 3072))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    self_mask = 1.0 - tf.eye(6)
    pos = tf.cast(tf.equal(labels[:, None], labels[None, :]), tf.float32) * self_mask
    count = tf.reduce_sum(pos, axis=1)

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z = tf.math.l2_normalize(tf.matmul(x, w), axis=1)
            logits = tf.matmul(z, z, transpose_b=True) / 0.5
            logits = logits - tf.stop_gradient(tf.reduce_max(logits, axis=1, keepdims=True))
            exp = tf.exp(logits) * self_mask
            log_prob = logits - tf.math.log(tf.reduce_sum(exp, axis=1, keepdims=True))
            mean_pos = tf.math.divide_no_nan(tf.reduce_sum(pos * log_prob, axis=1), count)
            loss = -tf.reduce_mean(mean_pos)
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, mean_pos, g))
    return out, w, count


@parity(modes=True, **LOOSE)
def test_huber_log_cosh_and_pinball_losses_at_their_kinks(tf):
    """Robust regression losses where their derivative changes: Huber by ``tf.keras.losses.Huber``
    and by hand with ``tf.where(abs(e) <= delta, ...)`` at ``|e| = delta`` exactly; log-cosh by
    ``tf.keras.losses.log_cosh``, by the stable ``e + softplus(-2e) - log 2`` and naively
    ``log(cosh(e))`` with ``e = 100`` (cosh overflows: inf loss, NaN gradient); the pinball loss
    ``maximum(q e, (q - 1) e)`` at ``e = 0`` (a tie: TF gives the gradient to the first argument)
    and its ``where`` form; MAE's ``abs`` at 0.  The residuals come from a bias Variable."""
    base = np.array([1.0, -1.0, 0.0, 0.5, 100.0, -2.0], np.float32)
    y = np.zeros(6, np.float32)
    b = tf.Variable(0.0)
    opt = tf.keras.optimizers.legacy.SGD(0.01)
    huber = tf.keras.losses.Huber(delta=1.0)

    out = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            e = base + b
            small = e[:4]
            losses = {
                "huber_keras": huber(y[:4], small),
                "huber_hand": tf.reduce_mean(tf.where(tf.abs(small) <= 1.0, 0.5 * small ** 2,
                                                      tf.abs(small) - 0.5)),
                "logcosh_keras": tf.reduce_mean(tf.keras.losses.log_cosh(y[:4], small)),
                "logcosh_stable": tf.reduce_mean(e + tf.nn.softplus(-2.0 * e) - np.log(2.0).astype(np.float32)),
                "logcosh_naive": tf.reduce_mean(tf.math.log(tf.cosh(e))),
                "pinball_max": tf.reduce_mean(tf.maximum(0.9 * e, (0.9 - 1.0) * e)),
                "pinball_where": tf.reduce_mean(tf.where(e >= 0, 0.9 * e, (0.9 - 1.0) * e)),
                "mae": tf.reduce_mean(tf.abs(small)),
            }
            pinball = tf.maximum(0.9 * e, -0.1 * e)
        grads = {k: _finite(tape.gradient(v, b), tf) for k, v in losses.items()}
        per_elem = tape.jacobian(pinball, b)
        del tape
        opt.apply_gradients([(grads["huber_keras"][0], b)])
        out.append((losses, grads, per_elem))
    return out, b


@xfail_on_tapejax("TF's Keras (tf_keras and Keras 3's TensorFlow backend) keeps the logits on a sigmoid / "
                  "softmax output (`_keras_logits`, or the graph's Sigmoid / Softmax op) and its probability "
                  "crossentropies use them (`sigmoid_cross_entropy_with_logits`: exact at saturation); "
                  "tapejax's Keras is Keras 3 on the JAX backend, whose arrays carry no logits, so the "
                  "crossentropy clips the probability to [1e-7, 1 - 1e-7]: losses 10.8, 11.5, 6.2 where TF's are "
                  "14.8, 44.8, 10.7, and no gradient through the clipped entries (not fixed: the logits are inside the model's one "
                  "tape op)")
@parity(**LOOSE)
def test_saturated_sigmoid_and_softmax_models_trained_with_probability_crossentropies(tf):
    """The most common Keras classifier: ``Dense(1, activation="sigmoid")`` with
    ``BinaryCrossentropy()`` and ``Dense(2, activation="softmax")`` with
    ``CategoricalCrossentropy()`` (probabilities, not logits), on inputs that saturate the outputs
    (confidently wrong examples), trained by SGD; the focal loss from logits (which applies the
    sigmoid itself) beside them."""
    x = np.array([[10.0], [-12.0], [0.3]], np.float32)
    y = np.array([[0.0], [1.0], [1.0]], np.float32)
    binary = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="sigmoid")])
    binary.build((None, 1))
    binary.set_weights([np.array([[2.0]], np.float32), np.array([0.5], np.float32)])
    multi = tf.keras.Sequential([tf.keras.layers.Dense(2, activation="softmax")])
    multi.build((None, 1))
    multi.set_weights([np.array([[3.0, -3.0]], np.float32), np.array([0.5, 0.0], np.float32)])
    y2 = tf.one_hot([1, 0, 1], 2)
    bce, cce = tf.keras.losses.BinaryCrossentropy(), tf.keras.losses.CategoricalCrossentropy()
    focal = tf.keras.losses.BinaryFocalCrossentropy(gamma=0.0, from_logits=True, label_smoothing=0.1)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    z = tf.Variable([[30.0], [0.2], [-3.0]])
    out = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            lb, lc, lf = bce(y, binary(x)), cce(y2, multi(x)), focal(y, z)
            total = lb + lc
        ws = binary.trainable_variables + multi.trainable_variables
        g = tape.gradient(total, ws)
        gz = tape.gradient(lf, z)
        del tape
        opt.apply_gradients(zip(g, ws))
        out.append((lb, lc, lf, g, gz))
    return out, binary.get_weights(), multi.get_weights()
