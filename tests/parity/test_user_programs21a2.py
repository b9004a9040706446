"""Round twenty-one (a) of realistic user programs, second half: model compression as the TF Model
Optimization toolkit's guides and research code write it by hand, under real TensorFlow 2.21 and
under tapejax with deferred execution and predicted updates on and off (``modes=True``).

Quantization-aware training: ``tf.quantization.fake_quant_with_min_max_vars`` / ``_args`` /
``_per_channel`` with trainable range Variables (their gradients inside, at and beyond the range
ends; ``narrow_range``, ``num_bits``), moving-average ranges kept by ``assign``, straight-through
estimators by ``x + tf.stop_gradient(tf.round(x) - x)`` and by ``@tf.custom_gradient``,
``quantize_and_dequantize_v2`` (its gradient masked by the given range, zeros for the range) and the
deprecated ``quantize_and_dequantize`` (everything passes), binarised weights (``tf.sign`` with a
clipped STE), DoReFa, a learned step size (LSQ) with its gradient scale, a conv kernel quantised
per output channel, and a quantiser ``custom_gradient`` reading a scale Variable.  Pruning: magnitude
pruning on a polynomial-decay sparsity schedule with a mask Variable from ``tf.math.top_k`` and one
from a quantile by ``tf.sort``, the mask in the forward or on the gradients, masked weights assigned
back; L0 hard-concrete gates; structured (channel) pruning by column norms; lottery-ticket
rewinding; distillation into a pruned student; masks as Variable and Keras kernel constraints.  (The DP and federated programs are in
``test_user_programs21a.py``.)
"""
import numpy as np

from .harness import init_array, keras_init, parity, regression_data

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _cls_data(seed, n=6, d=4, k=3):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, k, size=n).astype(np.int32)


# ---------------------------------------------------------------------------
# Quantization-aware training
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_qat_dense_with_trainable_fake_quant_ranges_for_weights_and_activations(tf):
    """A QAT dense layer as TFMOT's ``LastValueQuantizer`` / ``MovingAverageQuantizer`` lower to: the
    kernel through ``fake_quant_with_min_max_vars`` with trainable ``w_min`` / ``w_max`` (8 bits,
    narrow range), the activations through it with trainable ``a_min`` / ``a_max`` (4 bits), the
    input through ``fake_quant_with_min_max_args(-3, 3)``.  Adam trains weights and ranges together
    (the ranges get the gradient of what falls outside them: some activations start beyond
    ``a_max``); eager steps, then compiled ones."""
    x, y = regression_data(n=6, d=3, seed=2201)
    w = tf.Variable(init_array((3, 4), 2202))
    w2 = tf.Variable(init_array((4, 1), 2203))
    w_min, w_max = tf.Variable(-0.6), tf.Variable(0.6)
    a_min, a_max = tf.Variable(0.0), tf.Variable(0.5)
    ws = [w, w2, w_min, w_max, a_min, a_max]
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def step(x, y):
        with tf.GradientTape() as tape:
            xq = tf.quantization.fake_quant_with_min_max_args(x, -3.0, 3.0)
            wq = tf.quantization.fake_quant_with_min_max_vars(w, w_min, w_max, num_bits=8, narrow_range=True)
            h = tf.nn.relu(tf.matmul(xq, wq))
            hq = tf.quantization.fake_quant_with_min_max_vars(h, a_min, a_max, num_bits=4)
            loss = tf.reduce_mean((tf.matmul(hq, w2) - y) ** 2)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, hq, tf.reduce_mean(tf.cast(h > a_max, tf.float32))

    compiled = tf.function(step)
    out = [(step if i < 2 else compiled)(x, y) for i in range(4)]
    return out, ws


@parity(modes=True, **LOOSE)
def test_fake_quant_range_gradients_at_and_beyond_the_ends_for_bits_and_narrow_range(tf):
    """The range Variables' gradients where the values sit exactly at the nudged ends, just inside,
    just beyond and far beyond, for 2, 4 and 8 bits with and without ``narrow_range``; the input's
    gradient passes at the ends (inclusive).  Ranges not containing 0 are nudged (``[0.5, 2]`` acts
    as ``[0, 1.5]``), and ``min == max == 0`` gives zeros with the gradient passing."""
    out = []
    for lo, hi in ((-1.0, 1.0), (0.5, 2.0), (-2.0, -0.25), (0.0, 0.0)):
        for bits, narrow in ((2, False), (4, True), (8, False)):
            a, b = tf.Variable(lo), tf.Variable(hi)
            x = tf.Variable([lo - 1.0, lo - 1e-3, lo, lo + 1e-3, 0.0, hi - 1e-3, hi, hi + 1e-3, hi + 1.0])
            with tf.GradientTape() as tape:
                y = tf.quantization.fake_quant_with_min_max_vars(x, a, b, num_bits=bits, narrow_range=narrow)
                loss = tf.reduce_sum(y * tf.range(1.0, 10.0))
            out.append((y, tape.gradient(loss, [x, a, b])))
    return out


@parity(modes=True, **LOOSE)
def test_per_channel_kernel_ranges_from_the_kernel_and_ema_activation_ranges_by_assign(tf):
    """Per-channel weight quantisation: each output column of the kernel gets its own range, set
    before every step from the kernel itself (``reduce_min`` / ``reduce_max`` over axis 0, TFMOT's
    ``LastValueQuantizer`` with ``per_axis=True``) by ``assign``; activations get an EMA range
    (``a_min.assign(0.9 a_min + 0.1 batch_min)``) updated in training and read frozen at
    inference; the kernel's gradient through ``fake_quant_with_min_max_vars_per_channel`` and the
    range Variables' own (non-trainable: watched by the tape anyway, they get the sums)."""
    x, y = _cls_data(2211, n=6, d=4, k=3)
    k = tf.Variable(init_array((4, 3), 2212))
    kmin = tf.Variable(tf.zeros([3]), trainable=False)
    kmax = tf.Variable(tf.zeros([3]), trainable=False)
    a_min, a_max = tf.Variable(-1.0, trainable=False), tf.Variable(1.0, trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    @tf.function
    def step(x, y):
        kmin.assign(tf.minimum(tf.reduce_min(k, axis=0), 0.0))
        kmax.assign(tf.maximum(tf.reduce_max(k, axis=0), 0.0))
        with tf.GradientTape() as tape:
            tape.watch([kmin, kmax])
            kq = tf.quantization.fake_quant_with_min_max_vars_per_channel(k, kmin, kmax, num_bits=4)
            logits = tf.matmul(x, kq)
            a_min.assign(0.9 * a_min + 0.1 * tf.reduce_min(logits))
            a_max.assign(0.9 * a_max + 0.1 * tf.reduce_max(logits))
            lq = tf.quantization.fake_quant_with_min_max_vars(logits, a_min, a_max, num_bits=8)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, lq))
        gk, gmin, gmax = tape.gradient(loss, [k, kmin, kmax])
        opt.apply_gradients([(gk, k)])
        return loss, gk, gmin, gmax, kq

    out = [step(x, y) for _ in range(3)]
    infer = tf.quantization.fake_quant_with_min_max_vars(tf.matmul(x, k), a_min, a_max)
    return out, k, kmin, kmax, a_min, a_max, infer


@parity(modes=True, **LOOSE)
def test_conv_kernel_fake_quantised_per_output_channel_and_filter_norms(tf):
    """A QAT ``conv2d``: the ``[3, 3, 2, 4]`` kernel quantised per output channel (the last axis)
    by ``fake_quant_with_min_max_vars_per_channel`` over ranges from ``reduce_min`` / ``reduce_max``
    over the other three axes (kept around 0), narrow range, 4 bits; the filter norms logged."""
    rs = np.random.RandomState(2281)
    x, y = rs.randn(2, 5, 5, 2).astype(np.float32), rs.randn(2, 1).astype(np.float32)
    k, head = tf.Variable(init_array((3, 3, 2, 4), 2282)), tf.Variable(init_array((4, 1), 2283))
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for _ in range(2):
        kmin = tf.minimum(tf.reduce_min(k, axis=[0, 1, 2]), 0.0)
        kmax = tf.maximum(tf.reduce_max(k, axis=[0, 1, 2]), 0.0)
        with tf.GradientTape() as tape:
            kq = tf.quantization.fake_quant_with_min_max_vars_per_channel(k, kmin, kmax, num_bits=4, narrow_range=True)
            pooled = tf.reduce_mean(tf.nn.relu(tf.nn.conv2d(x, kq, 1, "VALID")), axis=[1, 2])
            loss = tf.reduce_mean((tf.matmul(pooled, head) - y) ** 2)
        g = tape.gradient(loss, [k, head])
        opt.apply_gradients(zip(g, [k, head]))
        out.append((loss, g, kq, tf.sqrt(tf.reduce_sum(tf.square(k), axis=[0, 1, 2]))))
    return out


@parity(modes=True, **LOOSE)
def test_straight_through_round_by_stop_gradient_and_by_custom_gradient_agree(tf):
    """Two STEs for a 3-bit uniform weight quantiser on ``[-1, 1]``: ``w + tf.stop_gradient(q(w) - w)``
    and a ``@tf.custom_gradient`` round whose backward passes ``dy`` only where ``|w| <= 1``
    (the clipped STE); the clipped one's gradient is zero for weights outside, the plain one's is
    not.  Two models trained side by side; their quantised weights, losses and gradients logged.
    ``tf.round`` rounds half to even (weights at exact halves of a step)."""
    x, y = regression_data(n=5, d=4, seed=2221)
    init = init_array((4, 1), 2222, scale=0.8)
    init[0, 0], init[1, 0], init[2, 0] = 1.5, -1.2, 1.0 / 7.0   # outside, outside, a half step (3.5 / 7 * 2 / 7)
    w_a, w_b = tf.Variable(init), tf.Variable(init)
    opt_a, opt_b = tf.keras.optimizers.legacy.SGD(0.1), tf.keras.optimizers.legacy.SGD(0.1)
    levels = 3.5

    def q(w):
        return tf.round(tf.clip_by_value(w, -1.0, 1.0) * levels) / levels

    @tf.custom_gradient
    def ste_clipped(w):
        def grad(dy):
            return dy * tf.cast(tf.abs(w) <= 1.0, dy.dtype)
        return q(w), grad

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            qa = w_a + tf.stop_gradient(q(w_a) - w_a)
            qb = ste_clipped(w_b)
            la = tf.reduce_mean((tf.matmul(x, qa) - y) ** 2)
            lb = tf.reduce_mean((tf.matmul(x, qb) - y) ** 2)
        ga, gb = tape.gradient(la, w_a), tape.gradient(lb, w_b)
        del tape
        opt_a.apply_gradients([(ga, w_a)])
        opt_b.apply_gradients([(gb, w_b)])
        out.append((qa, qb, la, lb, ga, gb))
    return out, w_a, w_b


@parity(modes=True, **LOOSE)
def test_quantize_and_dequantize_v2_and_the_deprecated_op_with_grad_pass_through(tf):
    """Activation quantisation by ``tf.quantization.quantize_and_dequantize_v2`` with a given range
    held in Variables (its gradient is masked to the range; the range Variables get zeros, not
    None), by the same op with ``range_given=False`` (the range is the tensor's own, but the
    gradient mask still uses the arguments), by ``tf.grad_pass_through`` of it (everything passes)
    and by the deprecated ``quantize_and_dequantize`` (passes; the range gets None).  HALF_UP and
    HALF_TO_EVEN rounding, signed and unsigned."""
    rs = np.random.RandomState(2231)
    x = tf.Variable((rs.randn(3, 4) * 1.5).astype(np.float32))
    lo, hi = tf.Variable(-1.0), tf.Variable(1.0)
    out = []
    for mode, signed in (("HALF_TO_EVEN", True), ("HALF_UP", True), ("HALF_UP", False)):
        with tf.GradientTape(persistent=True) as tape:
            given = tf.quantization.quantize_and_dequantize_v2(x, lo, hi, signed_input=signed, num_bits=4,
                                                                range_given=True, round_mode=mode)
            own = tf.quantization.quantize_and_dequantize_v2(x, lo, hi, signed_input=signed, num_bits=4,
                                                              round_mode=mode)
            passed = tf.grad_pass_through(lambda t: tf.quantization.quantize_and_dequantize_v2(
                t, -1.0, 1.0, num_bits=4, range_given=True, round_mode=mode))(x)
            old = tf.quantization.quantize_and_dequantize(x, lo, hi, signed_input=signed, num_bits=4,
                                                          range_given=True, round_mode=mode)
            losses = [tf.reduce_sum(t * tf.reshape(tf.range(12.0), [3, 4])) for t in (given, own, passed, old)]
        grads = [tape.gradient(loss, [x, lo, hi]) for loss in losses]
        del tape
        out.append((given, own, passed, old, grads))
    return out


@parity(modes=True, **LOOSE)
def test_binary_connect_sign_weights_with_a_clipped_ste_and_weight_clipping(tf):
    """BinaryConnect / XNOR-style training: the forward uses ``alpha * tf.sign(w)`` with ``alpha`` the
    mean of ``|w|`` per output column (its gradient flows), the backward of the sign is the clipped
    straight-through ``dy * 1{|w| <= 1}`` (``tf.custom_gradient``); after each Adam step the
    real-valued weights are clipped to ``[-1, 1]`` by ``assign(tf.clip_by_value(...))``.  A zero
    weight binarises to 0 (``tf.sign(0) = 0``).  Compiled step."""
    x, y = _cls_data(2241, n=6, d=4, k=2)
    init = init_array((4, 2), 2242, scale=1.0)
    init[3, 1] = 0.0
    w = tf.Variable(init)
    opt = tf.keras.optimizers.legacy.Adam(0.1)

    @tf.custom_gradient
    def binarize(v):
        def grad(dy):
            return dy * tf.cast(tf.abs(v) <= 1.0, tf.float32)
        return tf.sign(v), grad

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            alpha = tf.reduce_mean(tf.abs(w), axis=0)
            wb = binarize(w) * alpha
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(x, wb)))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        w.assign(tf.clip_by_value(w, -1.0, 1.0))
        return loss, g, wb

    out = [step(x, y) for _ in range(4)]
    return out, w


@parity(modes=True, **LOOSE)
def test_lsq_learned_step_size_with_its_gradient_scale(tf):
    """LSQ (Esser et al.): ``q = round(clip(v / s, -Qn, Qp)) * s`` with the round's STE written as
    ``r + stop_gradient(round(r) - r)``, and the step ``s`` a Variable whose gradient is scaled by
    ``g = 1 / sqrt(N Qp)`` through ``s * g + stop_gradient(s - s * g)`` (value ``s``, gradient times
    g).  ``s`` is initialised as ``2 mean|v| / sqrt(Qp)``; activations (ReLU, unsigned) and weights
    (signed) each get their own step.  ``s``'s gradient differs inside and at the clip ends."""
    x, y = regression_data(n=6, d=3, seed=2251)
    w = tf.Variable(init_array((3, 4), 2252))
    w2 = tf.Variable(init_array((4, 1), 2253))
    qn, qp = 4.0, 3.0
    s_w = tf.Variable(float(2.0 * np.mean(np.abs(w.numpy())) / np.sqrt(qp)))
    s_a = tf.Variable(0.3)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    def grad_scale(s, g):
        return s * g + tf.stop_gradient(s - s * g)

    def lsq(v, s, lo, hi):
        s = grad_scale(s, float(1.0 / np.sqrt(float(np.prod(v.shape)) * hi)))
        r = tf.clip_by_value(v / s, lo, hi)
        return (r + tf.stop_gradient(tf.round(r) - r)) * s

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            wq = lsq(w, s_w, -qn, qp)
            h = tf.nn.relu(tf.matmul(x, wq))
            hq = lsq(h, s_a, 0.0, 7.0)
            loss = tf.reduce_mean((tf.matmul(hq, w2) - y) ** 2)
        vs = [w, w2, s_w, s_a]
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        out.append((loss, g, wq, hq))
    return out, w, w2, s_w, s_a


@parity(modes=True, **LOOSE)
def test_dorefa_k_bit_weights_through_tanh_normalisation(tf):
    """DoReFa-Net's weight quantiser: ``wt = tanh(w) / (2 max|tanh(w)|) + 0.5`` (the max under the
    tape: one weight gets its gradient), quantised to k = 2 bits by the STE round, mapped back by
    ``2 q - 1``; first-layer activations quantised the same way after ``clip(h, 0, 1)``."""
    x, y = regression_data(n=5, d=3, seed=2261)
    w = tf.Variable(init_array((3, 4), 2262))
    w2 = tf.Variable(init_array((4, 1), 2263))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def quantize_k(v, k):
        n = float(2 ** k - 1)
        return v + tf.stop_gradient(tf.round(v * n) / n - v)

    def dorefa_w(v, k):
        t = tf.tanh(v)
        t = t / (2.0 * tf.reduce_max(tf.abs(t))) + 0.5
        return 2.0 * quantize_k(t, k) - 1.0

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = quantize_k(tf.clip_by_value(tf.matmul(x, dorefa_w(w, 2)), 0.0, 1.0), 2)
            loss = tf.reduce_mean((tf.matmul(h, dorefa_w(w2, 2)) - y) ** 2)
        g = tape.gradient(loss, [w, w2])
        opt.apply_gradients(zip(g, [w, w2]))
        out.append((loss, g, h))
    return out, w, w2


# ---------------------------------------------------------------------------
# Pruning and sparsity
# ---------------------------------------------------------------------------

def _polynomial_sparsity(step, begin=0, end=4, s0=0.0, s1=0.75, power=3):
    """TFMOT's ``PolynomialDecay`` sparsity schedule at ``step`` (host arithmetic)."""
    p = min(1.0, max(0.0, (step - begin) / (end - begin)))
    return s1 + (s0 - s1) * (1.0 - p) ** power


@parity(modes=True, **LOOSE)
def test_magnitude_pruning_by_top_k_on_a_polynomial_schedule_with_the_mask_in_the_forward(tf):
    """``prune_low_magnitude`` by hand: a mask Variable per kernel is recomputed every other step by
    ``tf.math.top_k`` of ``|w|`` flattened (keep ``k`` = (1 - sparsity) n, sparsity on a cubic
    polynomial schedule), scattered back by ``tf.scatter_nd``; the forward uses ``w * mask``, so
    pruned weights get gradient 0; after each compiled step the weights are ``assign``ed masked.
    The realised sparsity (``tf.math.zero_fraction``) is logged."""
    x, y = regression_data(n=6, d=4, seed=2301)
    w = tf.Variable(init_array((4, 3), 2302))
    w2 = tf.Variable(init_array((3, 1), 2303))
    mask = tf.Variable(tf.ones([4, 3]), trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)

    def update_mask(k):
        flat = tf.reshape(tf.abs(w), [-1])
        _, idx = tf.math.top_k(flat, k=k)
        mask.assign(tf.reshape(tf.scatter_nd(idx[:, None], tf.ones([k]), [12]), [4, 3]))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.matmul(x, w * mask))
            loss = tf.reduce_mean((tf.matmul(h, w2) - y) ** 2)
        g = tape.gradient(loss, [w, w2])
        opt.apply_gradients(zip(g, [w, w2]))
        w.assign(w * mask)
        return loss, g

    out = []
    for s in range(6):
        sparsity = _polynomial_sparsity(s)
        if s % 2 == 0:
            update_mask(int(round(12 * (1.0 - sparsity))))
        loss, g = step(x, y)
        out.append((sparsity, loss, g, mask.numpy(), tf.math.zero_fraction(w)))
    return out, w, w2


@parity(modes=True, **LOOSE)
def test_quantile_threshold_by_sort_with_the_mask_applied_to_the_gradients(tf):
    """Pruning the other way round: the forward uses the raw weights, the mask multiplies the
    gradients after ``tape.gradient`` (pruned weights then get no update from the masked gradient,
    but momentum built before pruning still moves them until the weights are re-masked by
    ``assign``).  The threshold is the sparsity quantile of ``|w|`` by ``tf.sort`` and ``tf.gather``
    (ties at the threshold kept: ``>=``); two layers pruned by one global threshold over the
    concatenation of their magnitudes."""
    x, y = regression_data(n=6, d=3, seed=2311)
    init = init_array((3, 4), 2312)
    init[0, 1] = init[0, 2] = 0.25     # a tie
    ws = [tf.Variable(init), tf.Variable(init_array((4, 1), 2313))]
    masks = [tf.Variable(tf.ones_like(v), trainable=False) for v in ws]
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    out = []
    for s in range(5):
        if s in (1, 3):
            mags = tf.concat([tf.reshape(tf.abs(v), [-1]) for v in ws], axis=0)
            k = int(_polynomial_sparsity(s, end=3) * 16)
            thr = tf.gather(tf.sort(mags), k)
            for v, m in zip(ws, masks):
                m.assign(tf.cast(tf.abs(v) >= thr, tf.float32))
            out.append(thr)
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, ws[0]))
            loss = tf.reduce_mean((tf.matmul(h, ws[1]) - y) ** 2)
        g = [gi * m for gi, m in zip(tape.gradient(loss, ws), masks)]
        opt.apply_gradients(zip(g, ws))
        moved = [tf.reduce_sum(tf.abs(v * (1.0 - m))) for v, m in zip(ws, masks)]
        for v, m in zip(ws, masks):
            v.assign(v * m)
        out.append((loss, g, moved))
    return out, ws, masks


@parity(modes=True, **LOOSE)
def test_l0_hard_concrete_gates_with_clipped_stretch_and_expected_l0_penalty(tf):
    """Louizos et al.'s L0 regularisation: one gate per input feature,
    ``s = sigmoid((log u - log(1 - u) + log_alpha) / beta)`` with ``u`` drawn by NumPy, stretched
    to ``(gamma, zeta) = (-0.1, 1.1)`` and hard-clipped to ``[0, 1]`` (gates clipped at 0 or 1 get
    gradient 0), the expected L0 ``sum sigmoid(log_alpha - beta log(-gamma / zeta))``; the test-time
    gate ``clip(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1)``.  One ``log_alpha`` starts very
    negative (a closed gate), one very positive (open)."""
    x, y = regression_data(n=6, d=4, seed=2321)
    w = tf.Variable(init_array((4, 1), 2322))
    log_alpha = tf.Variable([-6.0, 0.5, 6.0, 1.0])
    beta, gamma, zeta = 2.0 / 3.0, -0.1, 1.1
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    rs = np.random.RandomState(2323)
    out = []
    for _ in range(4):
        u = rs.uniform(1e-6, 1 - 1e-6, size=4).astype(np.float32)
        with tf.GradientTape() as tape:
            s = tf.sigmoid((tf.math.log(u) - tf.math.log(1.0 - u) + log_alpha) / beta)
            z = tf.clip_by_value(s * (zeta - gamma) + gamma, 0.0, 1.0)
            pred = tf.matmul(x * z, w)
            l0 = tf.reduce_sum(tf.sigmoid(log_alpha - beta * np.log(-gamma / zeta)))
            loss = tf.reduce_mean((pred - y) ** 2) + 0.05 * l0
        g = tape.gradient(loss, [w, log_alpha])
        opt.apply_gradients(zip(g, [w, log_alpha]))
        out.append((z, l0, loss, g))
    test_gate = tf.clip_by_value(tf.sigmoid(log_alpha) * (zeta - gamma) + gamma, 0.0, 1.0)
    return out, w, log_alpha, test_gate


@parity(modes=True, **LOOSE)
def test_structured_channel_pruning_by_column_norms_prunes_the_next_layers_rows(tf):
    """Channel pruning: the hidden units of a two-layer network are ranked by the L2 norm of their
    incoming kernel columns (``tf.norm(axis=0)``), the ``k`` largest kept by ``top_k`` indices
    turned into a channel mask (``tf.reduce_max(tf.one_hot(idx, h), 0)``), which masks the first
    kernel's columns, the bias and the second kernel's rows (``mask[:, None]``); fine-tuning
    continues in a compiled step and the pruned channels' gradients are 0 everywhere."""
    x, y = regression_data(n=6, d=3, seed=2331)
    w1 = tf.Variable(init_array((3, 5), 2332))
    b1 = tf.Variable(init_array((5,), 2333, scale=0.1))
    w2 = tf.Variable(init_array((5, 1), 2334))
    ch = tf.Variable(tf.ones([5]), trainable=False)
    vs = [w1, b1, w2]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1 * ch) + b1 * ch)
            loss = tf.reduce_mean((tf.matmul(h, w2 * ch[:, None]) - y) ** 2)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, g

    out = [step(x, y)]
    for k in (3, 2):
        norms = tf.norm(w1, axis=0)
        _, idx = tf.math.top_k(norms, k=k)
        ch.assign(tf.reduce_max(tf.one_hot(idx, 5), axis=0))
        out.append((norms, idx, ch.numpy(), step(x, y), step(x, y)))
    return out, vs, ch


@parity(modes=True, **LOOSE)
def test_lottery_ticket_rewinding_to_an_initial_copy_keeps_the_mask(tf):
    """The lottery-ticket procedure: snapshot the initial weights (``tf.identity`` and ``.numpy()``),
    train three steps, prune half of each layer by magnitude (``tf.math.top_k`` of ``-|w|`` for the
    smallest), rewind the weights to the initial snapshot times the mask by ``assign``, reset the
    optimizer (a new Adam: no slots) and retrain with the mask in the forward; the ticket's
    weights outside the mask stay 0 and its first loss is the masked initial network's."""
    x, y = regression_data(n=6, d=3, seed=2341)
    vs = [tf.Variable(init_array((3, 4), 2342)), tf.Variable(init_array((4, 1), 2343))]
    init_t = [tf.identity(v) for v in vs]
    init_np = [v.numpy() for v in vs]
    masks = [tf.Variable(tf.ones_like(v), trainable=False) for v in vs]

    def train(opt, steps):
        losses = []
        for _ in range(steps):
            with tf.GradientTape() as tape:
                h = tf.tanh(tf.matmul(x, vs[0] * masks[0]))
                loss = tf.reduce_mean((tf.matmul(h, vs[1] * masks[1]) - y) ** 2)
            g = tape.gradient(loss, vs)
            opt.apply_gradients(zip(g, vs))
            losses.append((loss, g))
        return losses

    dense = train(tf.keras.optimizers.legacy.Adam(0.05), 3)
    for v, m in zip(vs, masks):
        n = int(np.prod(v.shape))
        _, small = tf.math.top_k(-tf.reshape(tf.abs(v), [-1]), k=n // 2)
        m.assign(tf.reshape(tf.tensor_scatter_nd_update(tf.ones([n]), small[:, None], tf.zeros([n // 2])), v.shape))
    for v, t0, m in zip(vs, init_t, masks):
        v.assign(t0 * m)
    same_init = [bool(np.array_equal(a, b.numpy())) for a, b in zip(init_np, init_t)]
    ticket = train(tf.keras.optimizers.legacy.Adam(0.05), 3)
    return dense, ticket, vs, masks, same_init


@parity(modes=True, **LOOSE)
def test_distillation_from_a_frozen_keras_teacher_into_a_pruned_student(tf):
    """Knowledge distillation into a pruned student (TFMOT's prune-then-distill recipe): a frozen
    Keras teacher (``trainable = False``: no trainable variables, its gradient not asked), a Keras
    student whose first kernel is pruned by a fixed 50% magnitude mask re-applied by ``assign``
    after each step; the loss ``alpha CE(y, s) + (1 - alpha) T^2 KL(softmax(t / T) || softmax(s / T))``
    by ``tf.keras.losses.KLDivergence``; compiled step, the student's gradients and the teacher's
    untouched weights compared."""
    x, y = _cls_data(2351, n=8, d=4, k=3)
    teacher = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(3)])
    student = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(3)])
    teacher.build((None, 4))
    student.build((None, 4))
    keras_init(teacher, 2352)
    keras_init(student, 2353)
    teacher.trainable = False
    k = student.layers[0].kernel
    thr = np.median(np.abs(k.numpy()))
    mask = tf.constant((np.abs(k.numpy()) >= thr).astype(np.float32))
    k.assign(k * mask)
    kl = tf.keras.losses.KLDivergence()
    sce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    T, alpha = 2.0, 0.3

    @tf.function
    def step(x, y):
        t_logits = teacher(x, training=False)
        with tf.GradientTape() as tape:
            s_logits = student(x, training=True)
            distill = kl(tf.nn.softmax(t_logits / T), tf.nn.softmax(s_logits / T)) * T ** 2
            loss = alpha * sce(y, s_logits) + (1.0 - alpha) * distill
        g = tape.gradient(loss, student.trainable_variables)
        opt.apply_gradients(zip(g, student.trainable_variables))
        k.assign(k * mask)
        return loss, distill, g

    out = [step(x, y) for _ in range(3)]
    return (out, student.get_weights(), teacher.get_weights(), len(teacher.trainable_variables),
            float(np.mean(student.get_weights()[0] == 0)))


@parity(modes=True, **LOOSE)
def test_pruning_masks_as_variable_and_kernel_constraints_applied_by_the_optimizer(tf):
    """Pruning by constraint: a raw Variable created with ``constraint=lambda v: clip(v * mask)`` and
    a Keras ``Dense`` with a ``kernel_constraint`` (a ``Constraint`` subclass multiplying by a
    mask): the legacy optimizers apply the constraint after each update (SGD then Adam on the
    Variable; SGD in a compiled step on the model), so the pruned entries are 0 after every step
    even though their gradients are not."""
    x, y = regression_data(n=5, d=3, seed=2361)
    mask = tf.constant([[1.0], [0.0], [1.0]])
    w = tf.Variable(init_array((3, 1), 2362) * 4, constraint=lambda v: tf.clip_by_value(v * mask, -1.0, 1.0))
    out = []
    for opt in (tf.keras.optimizers.legacy.SGD(0.1), tf.keras.optimizers.legacy.Adam(0.1)):
        for _ in range(2):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            g = tape.gradient(loss, w)
            opt.apply_gradients([(g, w)])
            out.append((loss, g, w.numpy()))

    class Mask(tf.keras.constraints.Constraint):
        def __init__(self, m):
            self.m = m

        def __call__(self, v):
            return v * self.m

    m = np.array([[1, 0], [0, 1], [1, 1]], np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, kernel_constraint=Mask(m)), tf.keras.layers.Dense(1)])
    model.build((None, 3))
    keras_init(model, 2363)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, g

    out.append([step() for _ in range(2)])
    return out, w, model.get_weights()


@parity(modes=True, **LOOSE)
def test_quantiser_custom_gradient_reading_a_scale_variable_and_per_example_range_gradients(tf):
    """A learned-scale quantiser as a ``@tf.custom_gradient`` that reads a scale Variable inside:
    its backward takes ``variables=`` and returns the scale's gradient (TF's protocol); then the
    per-example gradients of a fake-quantised layer's weights *and range Variables* by
    ``tf.vectorized_map`` over a tape per example (an STE inside) and by ``tape.jacobian``."""
    x, y = regression_data(n=4, d=3, seed=2371)
    w = tf.Variable(init_array((3, 2), 2372))
    s = tf.Variable(0.3)
    lo, hi = tf.Variable(-0.4), tf.Variable(0.6)

    @tf.custom_gradient
    def quant(v):
        def grad(dy, variables=None):
            return dy * tf.cast(tf.abs(v) <= 1.0, tf.float32), [tf.reduce_sum(dy * (tf.round(v / s) - v / s))]
        return tf.round(v / s) * s, grad

    @tf.custom_gradient
    def ste(v):
        return tf.round(v * 4) / 4, lambda dy: dy

    out = []
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.reduce_sum(tf.matmul(x, quant(w)), 1, keepdims=True) - y) ** 2)
        g = tape.gradient(loss, [w, s])
        opt.apply_gradients(zip(g, [w, s]))
        out.append((loss, g))

    def one(ex):
        xi, yi = ex
        with tf.GradientTape() as t:
            h = tf.quantization.fake_quant_with_min_max_vars(tf.matmul(xi[None], ste(w)), lo, hi, num_bits=3)
            loss = tf.reduce_sum((tf.reduce_sum(h, 1) - yi) ** 2)
        return t.gradient(loss, [w, lo, hi])

    per = tf.vectorized_map(one, (tf.constant(x), tf.constant(y)))
    with tf.GradientTape() as t:
        h = tf.quantization.fake_quant_with_min_max_vars(tf.matmul(x, ste(w)), lo, hi, num_bits=3)
        losses = tf.reduce_sum((tf.reduce_sum(h, 1, keepdims=True) - y) ** 2, axis=1)
    return out, w, s, per, t.jacobian(losses, [w, lo, hi])
