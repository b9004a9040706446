"""Round seventeen (c) of realistic user programs, first half: self-supervised and semi-supervised
training as keras.io's TF-era examples and the research repositories write it (custom
``GradientTape`` loops, some steps under ``tf.function``), run under real TensorFlow 2.21 and under
tapejax with deferred execution and predicted updates on and off (``modes=True``).

The programs keep state outside the recorded computation and update it by ``assign`` between or
inside steps, where a stale read or a gradient leaking through a stop-gradient would hide: BYOL
(online and target networks, a predictor, the target following by a scheduled EMA), SimSiam
(one shared encoder, a stop-gradient branch, the collapse monitor), Barlow Twins (a
batch-standardised cross-correlation with a dead feature), MoCo (a key queue written by slice
``assign`` at a pointer Variable, eagerly and compiled, and by ``tf.concat`` + slicing), VICReg's
variance term at a collapsed dimension (``sqrt(var + eps)`` and its NaN twin without ``eps``), DINO's
centred and sharpened teacher, a momentum encoder read through ``tf.stop_gradient(variable)`` and
a step trained over ``tape.watched_variables()``, FixMatch (confidence mask, its mean logged, pseudo-labels under
``stop_gradient``), pseudo-labelling by ``boolean_mask`` with an empty selection, Mean Teacher,
entropy minimisation with class balance at saturated probabilities, and label propagation on a
small graph with an isolated node.  The metric-learning and loss-engineering programs are in
``test_user_programs17c2.py``.  Every number trained on is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, keras_init, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _views(seed, n=6, d=4):
    """Two 'augmented views' of one batch: the batch plus small independent NumPy noises."""
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    return (x + 0.1 * rs.randn(n, d)).astype(np.float32), (x + 0.1 * rs.randn(n, d)).astype(np.float32)


def _mlp(tf, ws, x):
    """A two-layer ReLU MLP of weight pairs ``ws = [w1, b1, w2, b2]``."""
    return tf.matmul(tf.nn.relu(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def _mlp_vars(tf, dims, seed, trainable=True):
    d, h, o = dims
    return [tf.Variable(init_array((d, h), seed), trainable=trainable), tf.Variable(np.zeros(h, np.float32)),
            tf.Variable(init_array((h, o), seed + 1), trainable=trainable), tf.Variable(np.zeros(o, np.float32))]


# ---------------------------------------------------------------------------
# Self-supervised: BYOL, SimSiam, Barlow Twins, MoCo, VICReg, DINO
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_byol_online_predictor_and_ema_target_with_a_cosine_tau_schedule(tf):
    """BYOL: online encoder+projector and predictor trained by Adam on the symmetrised
    ``2 - 2 cos(p, sg(z_target))``; the target network (same shapes, its own Variables) follows by
    ``t.assign(tau * t + (1 - tau) * o)`` after each step with tau on a cosine schedule.  The target
    is read inside the tape, so its Variables are watched and get ``None`` (the stop-gradient cuts
    them).  Steps alternate eager and compiled."""
    v1, v2 = _views(1001)
    online = _mlp_vars(tf, (4, 5, 3), 1002)
    predictor = _mlp_vars(tf, (3, 4, 3), 1004)
    target = [tf.Variable(v) for v in online]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def regression(p, z):
        p = tf.math.l2_normalize(p, axis=-1)
        z = tf.math.l2_normalize(z, axis=-1)
        return 2.0 - 2.0 * tf.reduce_sum(p * z, axis=-1)

    def step(x1, x2, tau):
        with tf.GradientTape() as tape:
            p1, p2 = _mlp(tf, predictor, _mlp(tf, online, x1)), _mlp(tf, predictor, _mlp(tf, online, x2))
            z1, z2 = tf.stop_gradient(_mlp(tf, target, x1)), tf.stop_gradient(_mlp(tf, target, x2))
            loss = tf.reduce_mean(regression(p1, z2) + regression(p2, z1))
        ws = online + predictor
        grads = tape.gradient(loss, ws + target)
        opt.apply_gradients(zip(grads[:len(ws)], ws))
        for t, o in zip(target, online):
            t.assign(tau * t + (1.0 - tau) * o)
        return loss, grads

    compiled = tf.function(step)
    out = []
    for k in range(4):
        tau = tf.constant(1.0 - 0.5 * (np.cos(np.pi * k / 4) + 1) / 2, tf.float32)
        loss, grads = (compiled if k % 2 else step)(v1, v2, tau)
        out.append((loss, grads[:8], [g is None for g in grads[8:]]))
    return out, online, predictor, target


@parity(modes=True, **LOOSE)
def test_simsiam_stop_gradient_branch_and_the_collapse_monitor(tf):
    """SimSiam as keras.io writes it: ``D(p, z) = -mean(cos(p, sg(z)))`` symmetrised over one
    shared encoder and a predictor, SGD with momentum in a compiled step, and the collapse monitor
    (the per-dimension std of the l2-normalised outputs, ``tf.math.reduce_std``) read eagerly."""
    v1, v2 = _views(1011, n=8)
    enc = _mlp_vars(tf, (4, 6, 3), 1012)
    pred = _mlp_vars(tf, (3, 2, 3), 1014)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    def d(p, z):
        z = tf.stop_gradient(z)
        return -tf.reduce_mean(tf.reduce_sum(tf.math.l2_normalize(p, axis=1) * tf.math.l2_normalize(z, axis=1),
                                             axis=1))

    @tf.function
    def train_step(x1, x2):
        with tf.GradientTape() as tape:
            z1, z2 = _mlp(tf, enc, x1), _mlp(tf, enc, x2)
            p1, p2 = _mlp(tf, pred, z1), _mlp(tf, pred, z2)
            loss = d(p1, z2) / 2 + d(p2, z1) / 2
        g = tape.gradient(loss, enc + pred)
        opt.apply_gradients(zip(g, enc + pred))
        return loss, g

    out = []
    for _ in range(3):
        loss, g = train_step(v1, v2)
        std = tf.math.reduce_std(tf.math.l2_normalize(_mlp(tf, enc, v1), axis=1), axis=0)
        out.append((loss, g, std, tf.reduce_mean(std)))
    return out, enc, pred


@parity(modes=True, **LOOSE)
def test_barlow_twins_cross_correlation_with_a_dead_feature(tf):
    """Barlow Twins: each view's embeddings are standardised over the batch
    (``(z - mean) / sqrt(var + eps)`` by ``tf.nn.moments``), ``c = z1n^T z2n / N``, the loss is
    ``sum((1 - diag c)^2) + lambda * sum(offdiag(c)^2)`` (off-diagonal by ``tf.linalg.set_diag``
    and by subtracting the diagonal).  One projector column starts dead (a ReLU that never fires:
    its standardised column is 0/sqrt(eps)); LARS-free SGD trains three steps."""
    v1, v2 = _views(1021, n=6)
    w1 = tf.Variable(init_array((4, 5), 1022))
    w2_init = init_array((5, 4), 1023)
    w2_init[:, 3] = -np.abs(w2_init[:, 3]) - 1.0
    w2 = tf.Variable(w2_init)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    def embed(x):
        return tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2))

    def standardise(z):
        mean, var = tf.nn.moments(z, axes=[0])
        return (z - mean) / tf.sqrt(var + 1e-5)

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z1, z2 = standardise(embed(v1)), standardise(embed(v2))
            c = tf.matmul(z1, z2, transpose_a=True) / 6.0
            on_diag = tf.reduce_sum(tf.square(tf.linalg.diag_part(c) - 1.0))
            off = tf.linalg.set_diag(c, tf.zeros(4))
            off_diag = tf.reduce_sum(tf.square(off))
            off_diag2 = tf.reduce_sum(tf.square(c)) - tf.reduce_sum(tf.square(tf.linalg.diag_part(c)))
            loss = on_diag + 0.005 * off_diag
        g = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(g, [w1, w2]))
        out.append((loss, on_diag, off_diag, off_diag2, c, g))
    return out, w1, w2


@parity(modes=True, **LOOSE)
def test_moco_queue_written_by_slice_assign_at_a_pointer_and_by_concat(tf):
    """MoCo v2: query encoder trained on InfoNCE over ``[l_pos, l_neg]`` logits (``l_neg`` against a
    non-trainable queue Variable), key encoder by momentum ``assign``; the queue is updated by
    ``queue[ptr:ptr + B].assign(k)`` with a pointer Variable wrapping around (eager steps reading
    ``int(ptr)`` and a compiled step slicing at the pointer tensor), and a second queue is kept by
    ``assign(tf.concat([k, queue[:-B]], 0))``.  The queues enter the loss through
    ``stop_gradient``-free reads and get no gradient (non-trainable, unwatched: None)."""
    rs = np.random.RandomState(1031)
    batches = [_views(1032 + i, n=2) for i in range(4)]
    wq = tf.Variable(init_array((4, 3), 1040))
    wk = tf.Variable(wq)
    queue = tf.Variable(tf.math.l2_normalize(rs.randn(6, 3).astype(np.float32), axis=1), trainable=False)
    fifo = tf.Variable(queue)
    ptr = tf.Variable(0)
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    def step(x1, x2, eager):
        with tf.GradientTape() as tape:
            q = tf.math.l2_normalize(tf.matmul(x1, wq), axis=1)
            k = tf.stop_gradient(tf.math.l2_normalize(tf.matmul(x2, wk), axis=1))
            l_pos = tf.reduce_sum(q * k, axis=1, keepdims=True)
            l_neg = tf.matmul(q, queue, transpose_b=True)
            logits = tf.concat([l_pos, l_neg], axis=1) / 0.2
            labels = tf.zeros(tf.shape(logits)[0], tf.int32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        gq, gk, gqueue = tape.gradient(loss, [wq, wk, queue])
        opt.apply_gradients([(gq, wq)])
        wk.assign(0.9 * wk + 0.1 * wq)
        p = int(ptr) if eager else ptr
        queue[p:p + 2].assign(k)
        ptr.assign((ptr + 2) % 6)
        fifo.assign(tf.concat([k, fifo[:-2]], axis=0))
        return loss, gq, gk is None, gqueue is None, logits

    compiled = tf.function(lambda a, b: step(a, b, eager=False))
    out = []
    for i, (x1, x2) in enumerate(batches):
        out.append(compiled(x1, x2) if i % 2 else step(x1, x2, eager=True))
    return out, wq, wk, queue, fifo, ptr


@parity(modes=True, **LOOSE)
def test_vicreg_variance_term_at_a_collapsed_dimension_with_and_without_eps(tf):
    """VICReg: invariance (MSE between views), variance ``mean(relu(1 - sqrt(var + eps)))`` and
    covariance (off-diagonal squares over ``d``) of each view.  One embedding dimension is constant
    (its weights zero): with ``eps = 1e-4`` its std term has a finite gradient; the same loss with
    ``eps = 0`` has ``sqrt(0)``'s infinite derivative times a zero: NaN gradients in TF, which the
    program reports (``tf.math.is_nan``) and then trains with ``eps``."""
    v1, v2 = _views(1051, n=5)
    w_init = init_array((4, 3), 1052)
    w_init[:, 2] = 0.0
    w = tf.Variable(w_init)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    def terms(z, eps):
        z = z - tf.reduce_mean(z, axis=0)
        var = tf.reduce_mean(tf.square(z), axis=0)
        std = tf.sqrt(var + eps)
        cov = tf.matmul(z, z, transpose_a=True) / 4.0
        off = cov - tf.linalg.diag(tf.linalg.diag_part(cov))
        return tf.reduce_mean(tf.nn.relu(1.0 - std)), tf.reduce_sum(tf.square(off)) / 3.0, std

    out = []
    for eps in (0.0, 1e-4, 1e-4, 1e-4):
        with tf.GradientTape() as tape:
            z1, z2 = tf.matmul(v1, w), tf.matmul(v2, w)
            inv = tf.reduce_mean(tf.square(z1 - z2))
            var1, cov1, std1 = terms(z1, eps)
            var2, cov2, _ = terms(z2, eps)
            loss = 25.0 * inv + 25.0 * (var1 + var2) + (cov1 + cov2)
        g = tape.gradient(loss, w)
        nan = tf.reduce_any(tf.math.is_nan(g))
        if eps:
            opt.apply_gradients([(g, w)])
        out.append((loss, inv, var1, cov1, std1, nan, tf.where(tf.math.is_nan(g), -1.0, g)))
    return out, w


@parity(modes=True, **LOOSE)
def test_dino_teacher_centering_and_sharpening_with_a_center_variable(tf):
    """DINO: the teacher's logits are centred by a ``center`` Variable and sharpened
    (``softmax((t - center) / 0.04)``), the student's softmax at temperature 0.1, the loss is the
    cross-entropy between them over the two view pairs; after each step the teacher follows the
    student by EMA and the center by ``center.assign(0.9 * center + 0.1 * mean(teacher logits))``
    (read before the EMA: the order matters).  Compiled step."""
    v1, v2 = _views(1061, n=4)
    student = _mlp_vars(tf, (4, 5, 3), 1062)
    teacher = [tf.Variable(v, trainable=False) for v in student]
    center = tf.Variable(tf.zeros([1, 3]), trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def h(t, s):
        t = tf.stop_gradient(tf.nn.softmax((t - center) / 0.04, axis=-1))
        return -tf.reduce_mean(tf.reduce_sum(t * tf.nn.log_softmax(s / 0.1, axis=-1), axis=-1))

    @tf.function
    def step(x1, x2):
        t1, t2 = _mlp(tf, teacher, x1), _mlp(tf, teacher, x2)
        with tf.GradientTape() as tape:
            s1, s2 = _mlp(tf, student, x1), _mlp(tf, student, x2)
            loss = (h(t1, s2) + h(t2, s1)) / 2
        g = tape.gradient(loss, student + teacher + [center])
        opt.apply_gradients(zip(g[:4], student))
        for t, s in zip(teacher, student):
            t.assign(0.7 * t + 0.3 * s)
        center.assign(0.9 * center + 0.1 * tf.reduce_mean(tf.concat([t1, t2], 0), axis=0, keepdims=True))
        return loss, g[:4], [gi is None for gi in g[4:]]

    out = [step(v1, v2) for _ in range(3)]
    return out, student, teacher, center


# ---------------------------------------------------------------------------
# Semi-supervised: FixMatch, pseudo-labels, Mean Teacher, entropy, label propagation
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_fixmatch_confidence_mask_and_stop_gradient_pseudo_labels_on_a_keras_model(tf):
    """FixMatch with a Keras model: the weak view's softmax under ``tf.stop_gradient`` gives
    ``max_prob`` and the pseudo-label by ``argmax``; the mask is ``tf.cast(max_prob >= tau,
    float32)``; the unlabelled loss is the mean over the batch of the masked sparse cross-entropy
    on the strong view; the mask's mean is logged.  A compiled step, SGD with Nesterov momentum."""
    rs = np.random.RandomState(1071)
    xl = rs.randn(4, 3).astype(np.float32)
    yl = np.array([0, 1, 2, 1], np.int32)
    xw = (3.0 * rs.randn(8, 3)).astype(np.float32)
    xs = (xw + 0.5 * rs.randn(8, 3)).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(5, activation="relu"), tf.keras.layers.Dense(3)])
    model.build((None, 3))
    keras_init(model, 1072)
    sce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9, nesterov=True)

    @tf.function
    def step(xl, yl, xw, xs):
        with tf.GradientTape() as tape:
            sup = tf.reduce_mean(sce(yl, model(xl, training=True)))
            probs = tf.stop_gradient(tf.nn.softmax(model(xw, training=True)))
            max_prob = tf.reduce_max(probs, axis=-1)
            pseudo = tf.argmax(probs, axis=-1)
            mask = tf.cast(max_prob >= 0.7, tf.float32)
            unsup = tf.reduce_mean(sce(pseudo, model(xs, training=True)) * mask)
            loss = sup + 1.0 * unsup
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, sup, unsup, tf.reduce_mean(mask), tf.cast(pseudo, tf.int32), mask

    out = [step(xl, yl, xw, xs) for _ in range(3)]
    return out, model.get_weights()


@parity(modes=True, **LOOSE)
def test_pseudo_labels_selected_by_boolean_mask_with_an_empty_selection(tf):
    """Pseudo-labelling by selection: confident unlabelled rows are picked by ``tf.boolean_mask``
    and their loss averaged by ``reduce_mean`` (NaN when nothing is confident, with finite
    gradients: the mean's gradient lands on no element) and by ``divide_no_nan`` of a sum by a
    count (0); the unlabelled weight ramps up in a Variable.  The threshold is first too high
    (empty), then lowered."""
    rs = np.random.RandomState(1081)
    xl = rs.randn(4, 3).astype(np.float32)
    yl = np.array([0, 1, 1, 0], np.int32)
    xu = rs.randn(6, 3).astype(np.float32)
    w = tf.Variable(init_array((3, 2), 1082))
    alpha = tf.Variable(0.0, trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    out = []
    for step, tau in enumerate((0.99, 0.99, 0.85, 0.85)):
        with tf.GradientTape(persistent=True) as tape:
            sup = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yl, tf.matmul(xl, w)))
            logits_u = tf.matmul(xu, w)
            probs = tf.nn.softmax(tf.stop_gradient(logits_u))
            keep = tf.reduce_max(probs, axis=1) >= tau
            sel_logits = tf.boolean_mask(logits_u, keep)
            sel_labels = tf.boolean_mask(tf.argmax(probs, axis=1, output_type=tf.int32), keep)
            per = tf.nn.sparse_softmax_cross_entropy_with_logits(sel_labels, sel_logits)
            unsup_mean = tf.reduce_mean(per)
            count = tf.reduce_sum(tf.cast(keep, tf.float32))
            unsup = tf.math.divide_no_nan(tf.reduce_sum(per), count)
            loss = sup + alpha * unsup
        g_mean, g = tape.gradient(unsup_mean, w), tape.gradient(loss, w)
        del tape
        opt.apply_gradients([(g, w)])
        alpha.assign(min(1.0, (step + 1) / 3))
        out.append((loss, unsup_mean, count, tf.shape(sel_logits), sel_labels, g_mean, g))
    return out, w, alpha


@parity(modes=True, **LOOSE)
def test_mean_teacher_consistency_with_a_sigmoid_ramp_and_an_unwatched_teacher(tf):
    """Mean Teacher: the student's softmax on a noisy view is pulled to the teacher's (EMA weights,
    computed outside the tape) by MSE, weighted by the sigmoid ramp-up ``exp(-5 (1 - t)^2)``;
    the supervised term uses only the labelled half of the batch (labels -1 mark unlabelled rows,
    selected by ``tf.where`` on a mask); the teacher updates with ``alpha = min(1 - 1/(step+1),
    0.95)``.  Teacher Variables read inside the tape give None gradients in both steps."""
    rs = np.random.RandomState(1091)
    x = rs.randn(6, 3).astype(np.float32)
    noise = [(0.1 * rs.randn(6, 3)).astype(np.float32) for _ in range(4)]
    labels = np.array([0, 2, -1, 1, -1, -1], np.int32)
    student = _mlp_vars(tf, (3, 4, 3), 1092)
    teacher = [tf.Variable(v, trainable=False) for v in student]
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    out = []
    for step in range(4):
        ramp = float(np.exp(-5.0 * (1.0 - step / 3) ** 2))
        t_probs = tf.nn.softmax(_mlp(tf, teacher, x + noise[step][::-1]))
        with tf.GradientTape() as tape:
            logits = _mlp(tf, student, x + noise[step])
            labelled = labels >= 0
            safe = tf.where(labelled, labels, tf.zeros_like(labels))
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(safe, logits)
            sup = tf.reduce_sum(tf.where(labelled, ce, 0.0)) / tf.reduce_sum(tf.cast(labelled, tf.float32))
            cons = tf.reduce_mean(tf.square(tf.nn.softmax(logits) - t_probs))
            loss = sup + ramp * 10.0 * cons
            total = loss + tf.reduce_sum(_mlp(tf, teacher, x)) * 0.0
        g = tape.gradient(total, student + teacher)
        opt.apply_gradients(zip(g[:4], student))
        a = min(1.0 - 1.0 / (step + 1), 0.95)
        for t, s in zip(teacher, student):
            t.assign(a * t + (1 - a) * s)
        out.append((loss, sup, cons, g[:4], [gi is None for gi in g[4:]]))
    return out, student, teacher


@parity(modes=True, **LOOSE)
def test_entropy_minimisation_with_class_balance_at_saturated_probabilities(tf):
    """Information maximisation (SHOT-style): mean per-example entropy minus the entropy of the mean
    prediction.  Entropy written three ways: ``p * log(p + 1e-8)``, ``tf.math.xlogy(p, p)`` and
    ``p * log_softmax``; one row's logits are so large that its softmax is exactly one-hot in
    float32 (``p = 0`` entries: xlogy gives 0 and a gradient without NaN, ``p * log(p)`` would not
    be used).  Adam trains on the ``log_softmax`` form; the three values and gradients logged."""
    rs = np.random.RandomState(1101)
    x = rs.randn(5, 3).astype(np.float32)
    x[4] = [40.0, -40.0, 0.0]
    w = tf.Variable(init_array((3, 3), 1102) + np.eye(3, dtype=np.float32))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            logits = tf.matmul(x, w)
            p = tf.nn.softmax(logits)
            ent_eps = -tf.reduce_mean(tf.reduce_sum(p * tf.math.log(p + 1e-8), axis=1))
            ent_xlogy = -tf.reduce_mean(tf.reduce_sum(tf.math.xlogy(p, p), axis=1))
            ent_ls = -tf.reduce_mean(tf.reduce_sum(p * tf.nn.log_softmax(logits), axis=1))
            pm = tf.reduce_mean(p, axis=0)
            div = -tf.reduce_sum(pm * tf.math.log(pm + 1e-8))
            loss = ent_ls - div
        gs = [tape.gradient(e, w) for e in (ent_eps, ent_xlogy, ent_ls, loss)]
        del tape
        opt.apply_gradients([(gs[-1], w)])
        out.append((ent_eps, ent_xlogy, ent_ls, div, gs, tf.reduce_min(p)))
    return out, w


@parity(modes=True, **LOOSE)
def test_label_propagation_with_a_learned_kernel_width_and_an_isolated_node(tf):
    """Label propagation on a 6-node graph: Gaussian affinities ``exp(-d^2 / sigma^2)`` thresholded
    to a kNN-like mask (one node isolated), symmetric normalisation ``D^-1/2 W D^-1/2`` with the
    isolated node's ``1/sqrt(0)`` replaced by ``tf.where(deg > 0, ...)`` (its twin with
    ``divide_no_nan``), then ``F <- a S F + (1 - a) Y`` for five iterations by a ``for`` over ``tf.range(5)``
    in a compiled function; the kernel width ``sigma`` (a Variable) is trained by the
    cross-entropy of the propagated labels on the held-out labelled nodes."""
    rs = np.random.RandomState(1111)
    pts = rs.randn(6, 2).astype(np.float32)
    pts[5] = [8.0, 8.0]
    y0 = np.zeros((6, 2), np.float32)
    y0[0, 0] = y0[1, 1] = 1.0
    held = np.array([2, 3], np.int32)
    held_y = np.array([0, 1], np.int32)
    sigma = tf.Variable(1.0)
    d2 = np.sum((pts[:, None] - pts[None]) ** 2, -1).astype(np.float32)
    adj = ((d2 < 6.0) & ~np.eye(6, dtype=bool)).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    @tf.function
    def propagate(y0):
        w = tf.exp(-d2 / tf.square(sigma)) * adj
        deg = tf.reduce_sum(w, axis=1)
        inv = tf.where(deg > 0, 1.0 / tf.sqrt(tf.where(deg > 0, deg, 1.0)), 0.0)
        inv2 = tf.math.divide_no_nan(1.0, tf.sqrt(deg))
        s = inv[:, None] * w * inv[None, :]
        f = y0
        for _ in tf.range(5):
            f = 0.8 * tf.matmul(s, f) + 0.2 * y0
        return f, inv, inv2, deg

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            f, inv, inv2, deg = propagate(y0)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                held_y, tf.math.log(tf.gather(f, held) + 1e-6)))
        g = tape.gradient(loss, sigma)
        opt.apply_gradients([(g, sigma)])
        out.append((loss, g, f, inv, inv2, deg, tf.argmax(f, axis=1, output_type=tf.int32)))
    return out, sigma


@parity(modes=True, **LOOSE)
def test_momentum_encoder_read_through_stop_gradient_and_trained_over_watched_variables(tf):
    """A MoCo-style step written against the tape's own list: the key encoder's trainable Variables
    are read as ``tf.stop_gradient(v)`` (TF reads them unrecorded, so the tape does not watch
    them), the query encoder normally; the step applies ``tape.gradient(loss,
    tape.watched_variables())`` to ``tape.watched_variables()`` (the query weights only), then
    moves the key weights by EMA.  Compiled and eager steps alternate; the number of watched
    Variables and (eagerly) their names are compared."""
    v1, v2 = _views(1121, n=4)
    q = [tf.Variable(init_array((4, 3), 1122), name="q_kernel"), tf.Variable(np.zeros(3, np.float32), name="q_bias")]
    k = [tf.Variable(v, name=n) for v, n in zip(q, ("k_kernel", "k_bias"))]
    opt = tf.keras.optimizers.legacy.SGD(0.3)

    def step(x1, x2):
        with tf.GradientTape() as tape:
            zq = tf.math.l2_normalize(tf.matmul(x1, q[0]) + q[1], axis=1)
            zk = tf.math.l2_normalize(tf.matmul(x2, tf.stop_gradient(k[0])) + tf.stop_gradient(k[1]), axis=1)
            logits = tf.matmul(zq, zk, transpose_b=True) / 0.5
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.range(4), logits))
        watched = tape.watched_variables()
        grads = tape.gradient(loss, watched)
        opt.apply_gradients(zip(grads, watched))
        for a, b in zip(k, q):
            a.assign(0.8 * a + 0.2 * b)
        return loss, grads, len(watched)

    compiled = tf.function(step)
    out = [(compiled if i % 2 else step)(v1, v2) for i in range(4)]
    with tf.GradientTape() as tape:
        tf.reduce_sum(tf.stop_gradient(k[0])) + tf.reduce_sum(q[1]) + tf.reduce_sum(tf.stop_gradient(q[0]))
    return out, q, k, [v.name for v in tape.watched_variables()]
