"""Round twenty-two (a) of realistic user programs, first half: adversarial training, gradient
regularisers and certified training as CleverHans-style and research code writes them by hand
(raw ``tf`` ops and ``tf.keras`` layers, custom ``GradientTape`` loops, some steps under
``tf.function``), run under real TensorFlow 2.21 and under tapejax with deferred execution and
predicted updates on and off (``modes=True``).

The programs take gradients with respect to inputs (``tape.watch(x)``), differentiate through
gradients, project and clip inside loops: FGSM with a random start and ``tf.sign``'s zero
gradient, a targeted PGD inside a ``tf.function`` with a Python ``for``, TRADES, free adversarial
training on a perturbation Variable, a persistent tape for both input and weight gradients, double
backprop, Jacobian regularisation by random projections, WGAN-GP on interpolates (the stateless
``alpha`` compared by its statistics, the penalty where it does not depend on the draws), spectral
normalisation by power iteration, a Lipschitz-margin loss, interval bound propagation with a
CROWN-IBP mixing schedule and randomised smoothing with a host-side vote.  Attribution and
Bayesian layers are in ``test_user_programs22a2.py``.  Random numbers a value depends on are
drawn with NumPy and fed in (tapejax's random ops run JAX's generators, README "Semantics worth
knowing").
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-4, atol=2e-5)


def _data(seed, n=6, d=4, classes=3, box=True):
    """A batch in the [0, 1] box (or normal) and integer labels."""
    rs = np.random.RandomState(seed)
    x = rs.rand(n, d) if box else rs.randn(n, d)
    return x.astype(np.float32), rs.randint(0, classes, n).astype(np.int32)


def _mlp_vars(tf, dims, seed):
    d, h, o = dims
    return [tf.Variable(init_array((d, h), seed)), tf.Variable(np.zeros(h, np.float32)),
            tf.Variable(init_array((h, o), seed + 1)), tf.Variable(np.zeros(o, np.float32))]


def _mlp(tf, ws, x, act=None):
    act = act or tf.nn.relu
    return tf.matmul(act(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def _xent(tf, y, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


# ---------------------------------------------------------------------------
# Adversarial training
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_fgsm_with_random_start_training_and_the_zero_gradient_of_sign(tf):
    """"Fast is better than free" FGSM training: ``delta`` starts uniform in the eps-ball (NumPy),
    one signed step of size ``1.25 eps``, projection by ``clip_by_value`` onto the ball and onto
    the [0, 1] box; the adversarial batch is not stopped, so the weight gradient flows through the
    attack's ``sign`` (zero) and through ``x`` itself.  Also the input gradient of the adversarial
    loss, the gradient of ``sum(sign(g))`` (zeros, not None) and SGD steps."""
    x, y = _data(2201)
    ws = _mlp_vars(tf, (4, 5, 3), 2202)
    rs = np.random.RandomState(2203)
    eps = 0.1
    opt = tf.keras.optimizers.legacy.SGD(0.2, momentum=0.9)
    out = []
    for step in range(3):
        delta0 = rs.uniform(-eps, eps, x.shape).astype(np.float32)
        xt = tf.constant(x)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(xt)
            with tf.GradientTape() as inner:
                x0 = xt + delta0
                inner.watch(x0)
                attack_loss = _xent(tf, y, _mlp(tf, ws, x0))
            g = inner.gradient(attack_loss, x0)
            s = tf.sign(g)
            delta = tf.clip_by_value(x0 + 1.25 * eps * s - xt, -eps, eps)
            x_adv = tf.clip_by_value(xt + delta, 0.0, 1.0)
            loss = _xent(tf, y, _mlp(tf, ws, x_adv))
            sign_sum = tf.reduce_sum(s)
        gw = tape.gradient(loss, ws)
        gx = tape.gradient(loss, xt)
        gs = tape.gradient(sign_sum, [xt] + ws)
        del tape
        opt.apply_gradients(zip(gw, ws))
        out.append((attack_loss, loss, g, x_adv, gw, gx, gs))
    return out, ws


@parity(modes=True, **TOL)
def test_targeted_pgd_with_random_start_in_a_tf_function_with_a_python_for(tf):
    """A targeted L-inf PGD (CleverHans style): minimise the cross-entropy to a target class,
    ``x_adv - alpha * sign(grad)``, random start fed in, five steps by a Python ``for`` inside one
    ``tf.function`` (unrolled in the trace), projection with tensor bounds ``x - eps`` / ``x + eps``
    then the [0, 1] box; the success rate and the per-step losses are returned; then the model
    is trained on the adversarial batch (labels the true ones) with Adam, twice."""
    x, y = _data(2211, n=5)
    target = (y + 1) % 3
    start = np.random.RandomState(2212).uniform(-0.2, 0.2, x.shape).astype(np.float32)
    ws = _mlp_vars(tf, (4, 6, 3), 2213)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def attack(x, t, start, eps, alpha):
        x_adv = tf.clip_by_value(x + start, 0.0, 1.0)
        losses = []
        for _ in range(5):
            with tf.GradientTape() as tape:
                tape.watch(x_adv)
                loss = _xent(tf, t, _mlp(tf, ws, x_adv))
            grad = tape.gradient(loss, x_adv)
            x_adv = x_adv - alpha * tf.sign(grad)
            x_adv = tf.clip_by_value(x_adv, x - eps, x + eps)
            x_adv = tf.clip_by_value(x_adv, 0.0, 1.0)
            losses.append(loss)
        pred = tf.argmax(_mlp(tf, ws, x_adv), axis=1, output_type=tf.int32)
        return x_adv, tf.stack(losses), tf.reduce_mean(tf.cast(tf.equal(pred, t), tf.float32))

    out = []
    for _ in range(2):
        x_adv, losses, success = attack(x, target, start, tf.constant(0.2), tf.constant(0.06))
        with tf.GradientTape() as tape:
            loss = _xent(tf, y, _mlp(tf, ws, x_adv))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        out.append((x_adv, losses, success, loss, g, tf.reduce_max(tf.abs(x_adv - x))))
    return out, ws, attack.experimental_get_tracing_count()


@parity(modes=True, **TOL)
def test_trades_kl_attack_inside_the_step_and_the_robust_regulariser(tf):
    """TRADES: the attack starts at ``x + 0.001 * noise`` (NumPy) and maximises
    ``KL(p_clean || p_adv)`` (``reduction=sum`` by ``tf.keras.losses.KLDivergence`` on softmaxes,
    the clean side under ``stop_gradient``) for three signed steps; the training loss is the clean
    cross-entropy plus ``beta * KL`` at the adversarial point (batchmean by hand); compiled step,
    SGD with momentum.  The attack's first KL is ~0 and its gradient tiny but not zero."""
    x, y = _data(2221, n=6)
    noise = np.random.RandomState(2222).randn(*x.shape).astype(np.float32)
    ws = _mlp_vars(tf, (4, 5, 3), 2223)
    kl = tf.keras.losses.KLDivergence(reduction=tf.keras.losses.Reduction.SUM)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    @tf.function
    def step(x, y, noise):
        p_clean = tf.stop_gradient(tf.nn.softmax(_mlp(tf, ws, x)))
        x_adv = x + 0.001 * noise
        kls = []
        for _ in range(3):
            with tf.GradientTape() as t:
                t.watch(x_adv)
                loss_kl = kl(p_clean, tf.nn.softmax(_mlp(tf, ws, x_adv)))
            g = t.gradient(loss_kl, x_adv)
            x_adv = tf.clip_by_value(tf.clip_by_value(x_adv + 0.03 * tf.sign(g), x - 0.1, x + 0.1), 0.0, 1.0)
            kls.append(loss_kl)
        x_adv = tf.stop_gradient(x_adv)
        with tf.GradientTape() as tape:
            logits = _mlp(tf, ws, x)
            natural = _xent(tf, y, logits)
            p_nat = tf.nn.softmax(logits)
            log_adv = tf.nn.log_softmax(_mlp(tf, ws, x_adv))
            robust = tf.reduce_sum(p_nat * (tf.math.log(p_nat + 1e-12) - log_adv)) / 6.0
            loss = natural + 6.0 * robust
        grads = tape.gradient(loss, ws)
        opt.apply_gradients(zip(grads, ws))
        return tf.stack(kls), natural, robust, grads, x_adv

    out = [step(x, y, noise) for _ in range(3)]
    return out, ws


@parity(modes=True, **TOL)
def test_free_adversarial_training_replays_a_minibatch_with_a_perturbation_variable(tf):
    """"Adversarial training for free": each minibatch is replayed ``m = 3`` times; one tape gives
    the gradient for the weights and for the perturbation Variable ``delta`` (a Variable: watched
    without ``watch``), the weights step by SGD and ``delta`` by ``assign`` of the signed,
    clipped ascent step; ``delta`` is carried over to the next minibatch.  Every other replay runs
    in a ``tf.function``."""
    batches = [_data(2231 + i, n=4) for i in range(3)]
    ws = _mlp_vars(tf, (4, 5, 3), 2235)
    delta = tf.Variable(tf.zeros([4, 4]))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    eps = 0.08

    def replay(x, y):
        with tf.GradientTape() as tape:
            x_adv = tf.clip_by_value(x + delta, 0.0, 1.0)
            loss = _xent(tf, y, _mlp(tf, ws, x_adv))
        grads = tape.gradient(loss, ws + [delta])
        opt.apply_gradients(zip(grads[:4], ws))
        delta.assign(tf.clip_by_value(delta + eps * tf.sign(grads[4]), -eps, eps))
        return loss, grads

    compiled = tf.function(replay)
    out = []
    for x, y in batches:
        for i in range(3):
            out.append((compiled if i % 2 else replay)(x, y))
    return out, ws, delta


@parity(modes=True, **TOL)
def test_one_persistent_tape_for_the_input_gradient_and_the_weight_gradients(tf):
    """A persistent tape records the clean loss, its input gradient is taken *inside* the tape
    (recorded, TF warns), the FGSM point built from it and the adversarial loss recorded too; then
    the weight gradients of the clean, adversarial and mixed losses and the input gradients of
    each (the adversarial loss's input gradient flows only through ``x + eps * sign``), a
    ``watched_variables`` count, and a Keras ``Dense`` model's kernel and bias gradients."""
    x, y = _data(2241, n=5)
    model = tf.keras.Sequential([tf.keras.layers.Dense(5, activation="tanh"), tf.keras.layers.Dense(3)])
    model.build((None, 4))
    rs = np.random.RandomState(2242)
    model.set_weights([(0.5 * rs.randn(*w.shape)).astype(np.float32) for w in model.get_weights()])
    xt = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(xt)
        clean = _xent(tf, y, model(xt))
        gx = tape.gradient(clean, xt)
        x_adv = xt + 0.1 * tf.sign(gx)
        adv = _xent(tf, y, model(x_adv))
        mixed = 0.5 * clean + 0.5 * adv
    tv = model.trainable_variables
    res = [tape.gradient(clean, tv), tape.gradient(adv, tv), tape.gradient(mixed, tv),
           tape.gradient(adv, xt), tape.gradient(mixed, xt), tape.gradient(gx, xt)]
    n_watched = len(tape.watched_variables())
    del tape
    return clean, adv, gx, x_adv, res, n_watched


# ---------------------------------------------------------------------------
# Gradient regularisers
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_double_backprop_input_gradient_norm_penalty_eager_and_compiled(tf):
    """Drucker and LeCun's double backprop: ``loss + lam * mean ||d loss_i / d x_i||^2`` where the
    per-example input gradient comes from an inner tape over the summed loss (``tape.gradient``
    inside the outer tape), for a tanh MLP and a ReLU MLP (its penalty's weight gradient flows only
    through the linear parts); two eager steps then two compiled, Adam."""
    x, y = _data(2251, n=6, box=False)
    nets = {"tanh": _mlp_vars(tf, (4, 5, 3), 2252), "relu": _mlp_vars(tf, (4, 5, 3), 2254)}
    opts = {k: tf.keras.optimizers.legacy.Adam(0.03) for k in nets}

    def step(x, y):
        res = []
        for name, ws in nets.items():
            act = tf.tanh if name == "tanh" else tf.nn.relu
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    per = tf.nn.sparse_softmax_cross_entropy_with_logits(y, _mlp(tf, ws, x, act))
                    total = tf.reduce_sum(per)
                gx = inner.gradient(total, x)
                penalty = tf.reduce_mean(tf.reduce_sum(tf.square(gx), axis=1))
                loss = tf.reduce_mean(per) + 0.5 * penalty
            g = outer.gradient(loss, ws)
            opts[name].apply_gradients(zip(g, ws))
            res.append((loss, penalty, gx, g))
        return res

    compiled = tf.function(step)
    xt = tf.constant(x)
    out = [(step if i < 2 else compiled)(xt, y) for i in range(4)]
    return out, nets


@parity(modes=True, **TOL)
def test_jacobian_regulariser_by_random_projections_against_the_full_frobenius_norm(tf):
    """Hoffman et al.'s Jacobian regulariser: ``n_proj`` random unit vectors ``v`` (NumPy), each
    ``J^T v`` by ``tape.gradient(logits, x, output_gradients=v)`` inside the outer tape, the
    estimate ``C * mean ||J^T v||^2``, next to the exact ``||J||_F^2`` by ``batch_jacobian``; the
    loss trains on the estimate (SGD, three steps) and the weight gradient of the exact norm is
    taken too."""
    x, y = _data(2261, n=4, box=False)
    ws = _mlp_vars(tf, (4, 5, 3), 2262)
    rs = np.random.RandomState(2263)
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    xt = tf.constant(x)
    out = []
    for _ in range(3):
        vs = rs.randn(2, 4, 3).astype(np.float32)
        vs /= np.linalg.norm(vs, axis=-1, keepdims=True)
        with tf.GradientTape(persistent=True) as outer:
            with tf.GradientTape(persistent=True) as inner:
                inner.watch(xt)
                logits = _mlp(tf, ws, xt, tf.tanh)
            est = 0.0
            for v in vs:
                jv = inner.gradient(logits, xt, output_gradients=tf.constant(v))
                est += tf.reduce_sum(tf.square(jv)) / 4.0
            est = 3.0 * est / 2.0
            jac = inner.batch_jacobian(logits, xt)
            exact = tf.reduce_sum(tf.square(jac)) / 4.0
            loss = _xent(tf, y, logits) + 0.1 * est
        g, g_exact = outer.gradient(loss, ws), outer.gradient(exact, ws)
        del inner, outer
        opt.apply_gradients(zip(g, ws))
        out.append((loss, est, exact, jac, g, g_exact))
    return out, ws


@parity(modes=True, **TOL)
def test_wgan_gp_penalty_on_interpolates_with_a_stateless_uniform_alpha(tf):
    """WGAN-GP critic steps: ``alpha = tf.random.stateless_uniform([n, 1], seed=[7, step])``, the
    interpolates ``alpha * real + (1 - alpha) * fake`` watched, the penalty
    ``mean((||grad|| - 1)^2)`` inside the outer tape.  The draws differ between TF and tapejax
    (Philox vs. Threefry), so the compared numbers are those that do not depend on them: the
    penalty of a linear critic (its input gradient is its weight), the draws' statistics
    (shape, range, the same seed twice), and a ReLU critic's full step with ``alpha`` fed from
    NumPy (Adam(0.01, beta_1=0.5), five critic steps)."""
    rs = np.random.RandomState(2271)
    real = rs.randn(6, 3).astype(np.float32)
    fake = (rs.randn(6, 3) + 1).astype(np.float32)
    w_lin = tf.Variable(init_array((3, 1), 2272))
    critic = _mlp_vars(tf, (3, 5, 1), 2273)
    opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.5)
    alphas = rs.rand(5, 6, 1).astype(np.float32)

    def gp(fn, alpha):
        inter = alpha * tf.constant(real) + (1.0 - alpha) * fake
        with tf.GradientTape() as t:
            t.watch(inter)
            d = fn(inter)
        grad = t.gradient(d, inter)
        norm = tf.sqrt(tf.reduce_sum(tf.square(grad), axis=1) + 1e-12)
        return tf.reduce_mean(tf.square(norm - 1.0))

    out = []
    for step in range(5):
        alpha = tf.random.stateless_uniform([6, 1], seed=[7, step])
        again = tf.random.stateless_uniform([6, 1], seed=[7, step])
        with tf.GradientTape() as tape:
            lin_pen = gp(lambda z: tf.matmul(z, w_lin), alpha)
        g_lin = tape.gradient(lin_pen, w_lin)
        with tf.GradientTape() as tape:
            wd = tf.reduce_mean(_mlp(tf, critic, fake)) - tf.reduce_mean(_mlp(tf, critic, real))
            pen = gp(lambda z: _mlp(tf, critic, z), alphas[step])
            loss = wd + 10.0 * pen
        g = tape.gradient(loss, critic)
        opt.apply_gradients(zip(g, critic))
        stats = (alpha.shape.as_list(), alpha.dtype.name, bool(tf.reduce_all((alpha >= 0) & (alpha < 1))),
                 bool(tf.reduce_all(tf.equal(alpha, again))))
        out.append((lin_pen, g_lin, wd, pen, g, stats))
    return out, critic


@parity(modes=True, **TOL)
def test_spectral_normalisation_by_power_iteration_with_a_stopped_u(tf):
    """Miyato et al.'s spectral normalisation written by hand: a ``u`` Variable, one power
    iteration per step (``v = l2_normalize(W^T u)``, ``u = l2_normalize(W v)``) under
    ``tf.stop_gradient``, ``sigma = u^T W v`` (gradient through ``W`` only), the layer uses
    ``W / sigma``; ``u`` is ``assign``ed after the tape; sigma is compared with the top singular
    value after the steps.  Compiled step, Adam on a regression loss."""
    rs = np.random.RandomState(2281)
    x = rs.randn(8, 4).astype(np.float32)
    t = rs.randn(8, 2).astype(np.float32)
    w1 = tf.Variable(init_array((4, 5), 2282, 1.0))
    w2 = tf.Variable(init_array((5, 2), 2283, 1.0))
    u1 = tf.Variable(tf.math.l2_normalize(rs.randn(4).astype(np.float32)), trainable=False)
    u2 = tf.Variable(tf.math.l2_normalize(rs.randn(5).astype(np.float32)), trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def sn(w, u):
        v = tf.stop_gradient(tf.math.l2_normalize(tf.linalg.matvec(w, u, transpose_a=True)))
        u_new = tf.stop_gradient(tf.math.l2_normalize(tf.linalg.matvec(w, v)))
        sigma = tf.tensordot(u_new, tf.linalg.matvec(w, v), 1)
        return w / sigma, sigma, u_new

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            w1n, s1, nu1 = sn(w1, u1)
            w2n, s2, nu2 = sn(w2, u2)
            loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.leaky_relu(tf.matmul(x, w1n), 0.2), w2n) - t))
        g = tape.gradient(loss, [w1, w2, u1, u2])
        opt.apply_gradients(zip(g[:2], [w1, w2]))
        u1.assign(nu1)
        u2.assign(nu2)
        return loss, s1, s2, g[:2], [gi is None for gi in g[2:]]

    out = [step() for _ in range(6)]
    top = [tf.reduce_max(tf.linalg.svd(w, compute_uv=False)) for w in (w1, w2)]
    return out, w1, w2, u1, u2, top


@parity(modes=True, **TOL)
def test_lipschitz_margin_training_with_a_frobenius_bound_and_a_hinge(tf):
    """Lipschitz-margin training (Tsuzuku et al.): the network's Lipschitz bound is the product of
    the layers' Frobenius norms (``tf.norm``; ReLU is 1-Lipschitz), every non-target logit is
    raised by ``sqrt(2) * eps * L`` (``one_hot`` mask) before the cross-entropy; next to it a
    multi-class hinge ``relu(margin - (z_y - max_{j != y} z_j))`` with the max over the masked
    logits (``tf.where`` to ``-inf``), a margin exactly met by one row at the start.  Three SGD
    steps, eager."""
    x, y = _data(2291, n=5, box=False)
    ws = _mlp_vars(tf, (4, 4, 3), 2292)
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            logits = _mlp(tf, ws, x)
            lip = tf.norm(ws[0]) * tf.norm(ws[2])
            onehot = tf.one_hot(y, 3)
            lmt = _xent(tf, y, logits + np.sqrt(2.0).astype(np.float32) * 0.1 * lip * (1.0 - onehot))
            z_y = tf.reduce_sum(logits * onehot, axis=1)
            others = tf.reduce_max(tf.where(onehot > 0, -np.inf, logits), axis=1)
            margin = z_y - others
            hinge = tf.reduce_mean(tf.nn.relu(tf.stop_gradient(margin[0]) - margin))
            loss = lmt + hinge
        g, g_hinge = tape.gradient(loss, ws), tape.gradient(hinge, ws)
        del tape
        opt.apply_gradients(zip(g, ws))
        out.append((loss, lmt, hinge, lip, margin, g, g_hinge))
    return out, ws


# ---------------------------------------------------------------------------
# Certified training
# ---------------------------------------------------------------------------

def _ibp(tf, ws, lower, upper):
    """Interval bounds through Dense + ReLU + Dense: the centre/radius form for the first layer,
    the ``tf.maximum`` / ``tf.minimum`` split of ``W`` for the second (both exact for intervals)."""
    mu, r = (upper + lower) / 2.0, (upper - lower) / 2.0
    mu1 = tf.matmul(mu, ws[0]) + ws[1]
    r1 = tf.matmul(r, tf.abs(ws[0]))
    l1, u1 = tf.nn.relu(mu1 - r1), tf.nn.relu(mu1 + r1)
    wp, wn = tf.maximum(ws[2], 0.0), tf.minimum(ws[2], 0.0)
    l2 = tf.matmul(l1, wp) + tf.matmul(u1, wn) + ws[3]
    u2 = tf.matmul(u1, wp) + tf.matmul(l1, wn) + ws[3]
    return (mu1 - r1, mu1 + r1), l2, u2


@parity(modes=True, **TOL)
def test_interval_bound_propagation_with_a_crown_ibp_mixing_schedule(tf):
    """Certified training by IBP (Gowal et al.) mixed with a CROWN-style bound (Zhang et al.): the
    worst-case logits (lower bound at the label, upper elsewhere, by ``tf.where`` on the one-hot),
    the hidden layer's pre-activation bounds reused by a linear relaxation of the unstable ReLUs
    (upper slope ``u / (u - l)``, adaptive lower slope ``u > -l``) bounding the margins
    ``z_y - z_j`` backward through the network; ``beta`` goes 1 -> 0 and ``kappa`` 1 -> 0.5 over
    four compiled steps; ``eps`` ramps in a Variable.  One input feature sits on the box edge and a
    first-layer weight is exactly 0 (``abs``'s gradient at 0 is 0 in TF)."""
    x, y = _data(2301, n=4, d=3)
    x[0, 0] = 0.0
    ws = _mlp_vars(tf, (3, 4, 3), 2302)
    w0 = ws[0].numpy()
    w0[1, 2] = 0.0
    ws[0].assign(w0)
    eps = tf.Variable(0.0, trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    spec = np.stack([np.eye(3, dtype=np.float32)[yi] - np.eye(3, dtype=np.float32) for yi in y])  # (n, 3, 3)

    def crown_margin_lower(ws, x, eps, l_pre, u_pre):
        unstable = (l_pre < 0) & (u_pre > 0)
        upper_slope = tf.where(unstable, u_pre / tf.where(unstable, u_pre - l_pre, 1.0),
                               tf.cast(l_pre >= 0, tf.float32))
        lower_slope = tf.where(unstable, tf.cast(u_pre > -l_pre, tf.float32), tf.cast(l_pre >= 0, tf.float32))
        a = tf.einsum("nkj,hj->nkh", spec, ws[2])  # margin coefficients on the hidden ReLU outputs
        slope = tf.where(a >= 0, lower_slope[:, None, :], upper_slope[:, None, :])
        bias = tf.where(a >= 0, 0.0, -upper_slope[:, None, :] * l_pre[:, None, :])
        lam = a * slope
        coef = tf.einsum("nkh,dh->nkd", lam, ws[0])
        const = tf.einsum("nkh,h->nk", lam, ws[1]) + tf.reduce_sum(a * bias, -1) + tf.einsum("nkj,j->nk", spec,
                                                                                              ws[3])
        return tf.einsum("nkd,nd->nk", coef, x) - eps * tf.reduce_sum(tf.abs(coef), -1) + const

    @tf.function
    def step(x, y, beta, kappa):
        with tf.GradientTape() as tape:
            logits = _mlp(tf, ws, x)
            (l_pre, u_pre), l2, u2 = _ibp(tf, ws, tf.clip_by_value(x - eps, 0.0, 1.0),
                                          tf.clip_by_value(x + eps, 0.0, 1.0))
            onehot = tf.one_hot(y, 3) > 0
            worst = tf.where(onehot, l2, u2)
            ibp_margin = tf.reduce_sum(tf.where(onehot, l2, 0.0), 1, keepdims=True) - u2
            crown = crown_margin_lower(ws, x, eps, l_pre, u_pre)
            mixed = beta * ibp_margin + (1.0 - beta) * crown
            robust = tf.reduce_mean(tf.reduce_logsumexp(-tf.where(onehot, 0.0, mixed), axis=1))
            loss = kappa * _xent(tf, y, logits) + (1.0 - kappa) * robust
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, worst, ibp_margin, crown, g

    out = []
    for k in range(4):
        eps.assign(0.05 * k)
        out.append(step(x, y, tf.constant(1.0 - k / 3), tf.constant(1.0 - 0.5 * k / 3)))
    (l_pre, u_pre), l2, u2 = _ibp(tf, ws, tf.constant(x), tf.constant(x))
    return out, ws, l2 - u2, l_pre - u_pre


@parity(modes=True, **TOL)
def test_randomised_smoothing_noisy_predictions_and_a_majority_vote_on_the_host(tf):
    """Randomised smoothing (Cohen et al.): a model trained with Gaussian noise augmentation (noise
    from NumPy, two SGD steps), then for each input 64 noisy copies predicted in batches of 16 by a
    ``tf.function`` (``tf.tile`` + noise), the class counts by ``np.bincount`` on the host, the
    top class, and the certified radius ``sigma * Phi^-1(p_A)`` by ``tf.math.ndtri`` where the
    vote's share is above one half; abstentions marked -1."""
    x, y = _data(2311, n=3, box=False)
    ws = _mlp_vars(tf, (4, 6, 3), 2312)
    rs = np.random.RandomState(2313)
    sigma = 0.25
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    losses = []
    for _ in range(2):
        noisy = x + sigma * rs.randn(*x.shape).astype(np.float32)
        with tf.GradientTape() as tape:
            loss = _xent(tf, y, _mlp(tf, ws, noisy))
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        losses.append(loss)

    @tf.function
    def predict_noisy(x1, noise):
        batch = tf.tile(x1[None], [16, 1]) + noise
        return tf.argmax(_mlp(tf, ws, batch), axis=1, output_type=tf.int32)

    votes, radii = [], []
    for i in range(3):
        preds = np.concatenate([predict_noisy(x[i], (sigma * rs.randn(16, 4)).astype(np.float32)).numpy()
                                for _ in range(4)])
        counts = np.bincount(preds, minlength=3)
        top = int(np.argmax(counts))
        p_a = np.float32(min(counts[top] / 64.0, 0.999))
        radius = sigma * tf.math.ndtri(tf.constant(p_a)) if p_a > 0.5 else tf.constant(-1.0)
        votes.append((counts.tolist(), top))
        radii.append(radius)
    return losses, ws, votes, radii


@parity(modes=True, **TOL)
def test_mc_dropout_rate_changed_on_a_built_model_for_the_uncertainty_pass(tf):
    """MC dropout as uncertainty code does it: a Keras model with ``Dropout(0.5)`` is called at
    inference and with ``training=True``, then every Dropout layer's ``rate`` is set to 0.2 for the
    prediction passes and back to 0.5.  The masks are the backend's, so the compared numbers are
    the statistics that follow from the rate: the keep fraction of each phase (within 0.06 of
    1 - rate over 3200 units) and the kept values' scale ``1 / (1 - rate)`` (tapejax served the
    old rate from the call's compiled op: fixed)."""
    rs = np.random.RandomState(2321)
    x = tf.constant(np.abs(rs.randn(40, 4)).astype(np.float32) + 0.5)
    model = tf.keras.Sequential([tf.keras.layers.Dense(80, activation="relu", kernel_initializer="ones"),
                                 tf.keras.layers.Dropout(0.5, seed=5)])
    model.build((None, 4))
    dense = model(x, training=False)

    def phase():
        out = model(x, training=True)
        kept = tf.cast(out != 0.0, tf.float32)
        keep = float(tf.reduce_mean(kept))
        scale = tf.reduce_sum(out) / tf.reduce_sum(dense * kept)
        return keep, scale

    stats = [phase()]
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Dropout):
            layer.rate = 0.2
    stats.append(phase())
    model.layers[1].rate = 0.5
    stats.append(phase())
    return ([abs(k - (1 - r)) < 0.06 for (k, _), r in zip(stats, (0.5, 0.2, 0.5))],
            [s for _, s in stats], bool(tf.reduce_all(model(x, training=False) == dense)))
