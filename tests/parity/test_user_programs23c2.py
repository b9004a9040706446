"""Round twenty-three (c), second part: discrete latents, gradient estimators and densities
written by hand in TF2, each run under real TensorFlow 2.21 and under tapejax.

Gumbel-softmax with an annealed temperature and its straight-through hard version
(``stop_gradient(hard - soft) + soft``, and by ``tf.custom_gradient`` reading a temperature
Variable), REINFORCE with a moving-average baseline Variable,
score-function estimators with a control variate fitted per batch, REBAR's mixture of the
score-function and relaxed terms with ``eta`` tuned by the gradient of the estimator's variance
(a gradient of a gradient), DiCE's magic box ``exp(logp - stop_gradient(logp))`` to second order;
a mixture density network with ``softplus`` scales, a Gaussian process's marginal likelihood by
``cholesky`` / ``cholesky_solve`` with an ARD Matern kernel, EM for a Gaussian mixture in TF ops,
an energy-based model trained by contrastive divergence with Langevin samples, and Student-t
regression by ``lgamma``.  Noise is NumPy's, fed in.
"""
import numpy as np

from .harness import init_array, parity
from .test_user_programs23c import LOG2PI, TOL, _dense_vars, _mlp

# ---------------------------------------------------------------------------
# Discrete latents and gradient estimators
# ---------------------------------------------------------------------------


def _gumbel(u):
    return -np.log(-np.log(u + 1e-20) + 1e-20).astype(np.float32)


@parity(modes=True, **TOL)
def test_categorical_vae_gumbel_softmax_with_an_annealed_temperature(tf):
    """A categorical VAE (2 latents of 4 classes) on binary 6-D data: Gumbel noise from NumPy
    uniforms, ``softmax((logits + g) / tau)`` with ``tau = max(0.5, exp(-r * step))`` fed as a
    tensor to a compiled step, the Bernoulli decoder from logits, the KL to the uniform prior by
    ``softmax * (log_softmax + log K)``; 4 Adam steps: losses, KLs, gradients, and the relaxed
    samples' row sums."""
    rs = np.random.RandomState(2501)
    x = (rs.rand(6, 6) < 0.4).astype(np.float32)
    g = _gumbel(rs.uniform(size=(4, 6, 2, 4)))
    enc = _dense_vars(tf, (6, 8, 8), 2502, 0.5)
    dec = _dense_vars(tf, (8, 8, 6), 2504, 0.5)
    vs = enc + dec
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def step(x, g, tau):
        with tf.GradientTape() as tape:
            logits = tf.reshape(_mlp(tf, enc, x), [-1, 2, 4])
            y = tf.nn.softmax((logits + g) / tau, axis=-1)
            xl = _mlp(tf, dec, tf.reshape(y, [-1, 8]))
            rec = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=xl), -1)
            q = tf.nn.softmax(logits)
            kl = tf.reduce_sum(q * (tf.nn.log_softmax(logits) + np.log(4.0)), [-2, -1])
            loss = tf.reduce_mean(rec + kl)
        grads = tape.gradient(loss, vs)
        opt.apply_gradients(zip(grads, vs))
        return loss, tf.reduce_mean(kl), grads, tf.reduce_sum(y, -1)

    hist = []
    for i in range(4):
        tau = max(0.5, float(np.exp(-0.3 * i)))
        hist.append(step(tf.constant(x), tf.constant(g[i]), tf.constant(tau)) + (tau,))
    return hist


@parity(modes=True, **TOL)
def test_straight_through_gumbel_softmax_hard_samples(tf):
    """The straight-through hard Gumbel-softmax ``stop_gradient(one_hot(argmax(y)) - y) + y``:
    forward values exactly one-hot, gradients those of the soft sample (checked against a
    second tape on the soft one), a policy picking one of 3 actions to match a reward table;
    3 SGD steps on ``-reward``: the hard samples, rewards, gradients; and ``tf.stop_gradient``'s
    own gradient is None for a lone source."""
    rs = np.random.RandomState(2510)
    g = _gumbel(rs.uniform(size=(3, 5, 3)))
    feats = rs.randn(5, 2).astype(np.float32)
    reward = tf.constant([[1.0, -1.0, 0.5], [0.0, 2.0, -0.5], [-1.0, 0.0, 1.5], [0.3, 0.3, 0.3],
                          [2.0, 1.0, 0.0]])
    w = tf.Variable(init_array((2, 3), 2511, 0.5))
    out = []
    for i in range(3):
        with tf.GradientTape(persistent=True) as tape:
            logits = tf.matmul(feats, w)
            y = tf.nn.softmax((logits + g[i]) / 0.7)
            hard = tf.one_hot(tf.argmax(y, -1), 3)
            y_st = tf.stop_gradient(hard - y) + y
            r_hard = tf.reduce_mean(tf.reduce_sum(y_st * reward, -1))
            r_soft = tf.reduce_mean(tf.reduce_sum(y * reward, -1))
            loss = -r_hard
            loss_soft = -r_soft
        gw = tape.gradient(loss, w)
        g_soft = tape.gradient(loss_soft, w)
        g_none = tape.gradient(tf.reduce_sum(tf.stop_gradient(y)), w)
        del tape
        w.assign_sub(0.5 * gw)
        out.append((y_st, r_hard, gw, gw - g_soft, g_none))
    return out, w


@parity(modes=True, **TOL)
def test_reinforce_bernoulli_policy_with_a_moving_average_baseline_variable(tf):
    """REINFORCE on a 4-armed Bernoulli-action problem: actions drawn by comparing NumPy uniforms
    with ``sigmoid(logits)``, the log-probability by ``-sigmoid_cross_entropy_with_logits``, the
    surrogate ``-stop_gradient(R - b) * log p`` with the baseline a non-trainable Variable updated
    by ``b.assign(0.9 b + 0.1 mean R)`` after each step; 5 steps with an SGD optimizer in a compiled
    step: surrogate, rewards, baseline, gradients, and the gradient's None for the baseline."""
    rs = np.random.RandomState(2520)
    u = rs.uniform(size=(5, 8, 4)).astype(np.float32)
    target = np.array([1.0, 0.0, 1.0, 1.0], np.float32)
    logits = tf.Variable(np.array([0.3, -0.2, 0.0, 0.6], np.float32))
    baseline = tf.Variable(0.0, trainable=False)
    opt = tf.keras.optimizers.SGD(0.5)

    @tf.function
    def step(u):
        with tf.GradientTape() as tape:
            p = tf.sigmoid(logits)
            a = tf.cast(u < p, tf.float32)
            logp = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=a, logits=tf.ones_like(a) * logits), -1)
            r = tf.reduce_sum(tf.cast(tf.equal(a, target), tf.float32), -1)
            adv = tf.stop_gradient(r - baseline)
            surrogate = -tf.reduce_mean(adv * logp)
        g, gb = tape.gradient(surrogate, [logits, baseline])
        opt.apply_gradients([(g, logits)])
        baseline.assign(0.9 * baseline + 0.1 * tf.reduce_mean(r))
        return surrogate, tf.reduce_mean(r), g, gb

    hist = [step(tf.constant(u[i])) for i in range(5)]
    return hist, logits, baseline


@parity(modes=True, **TOL)
def test_score_function_estimator_with_a_fitted_control_variate(tf):
    """A score-function gradient of ``E_{z ~ N(mu, s^2)} [f(z)]`` for a non-differentiable-in-use
    ``f`` (its samples held by ``stop_gradient``): per-sample score terms by ``tape.jacobian`` of the
    per-sample log-densities w.r.t. ``[mu, log_s]``, the optimal scalar control variate ``c =
    Cov(f s, s) / Var(s)`` computed from them, the controlled and plain estimators' means and
    variances, and the reparameterised gradient for reference; 3 Adam steps on the controlled one."""
    eps = np.random.RandomState(2530).randn(3, 32).astype(np.float32)
    mu = tf.Variable(0.5)
    log_s = tf.Variable(-0.3)
    opt = tf.keras.optimizers.Adam(0.1)

    def f(z):
        return tf.square(z - 2.0) + tf.sin(3.0 * z)

    out = []
    for i in range(3):
        with tf.GradientTape(persistent=True) as tape:
            s = tf.exp(log_s)
            z = mu + s * eps[i]
            zs = tf.stop_gradient(z)
            logq = -0.5 * tf.square((zs - mu) / s) - log_s - 0.5 * LOG2PI
            fz = tf.stop_gradient(f(z))
            reparam = tf.reduce_mean(f(z))
        jm, js = tape.jacobian(logq, [mu, log_s])
        g_rep = tape.gradient(reparam, [mu, log_s])
        del tape
        score = tf.stack([jm, js], -1)                      # [32, 2]
        fs = fz[:, None] * score
        cov = tf.reduce_mean((fs - tf.reduce_mean(fs, 0)) * (score - tf.reduce_mean(score, 0)), 0)
        c = cov / (tf.math.reduce_variance(score, 0) + 1e-6)
        controlled = fs - c * score
        est = tf.reduce_mean(controlled, 0)
        opt.apply_gradients(zip(tf.unstack(est), [mu, log_s]))
        out.append((tf.reduce_mean(fs, 0), est, tf.math.reduce_variance(fs, 0),
                    tf.math.reduce_variance(controlled, 0), g_rep, c))
    return out, mu, log_s


@parity(modes=True, **TOL)
def test_rebar_like_estimator_with_eta_tuned_by_the_variance_gradient(tf):
    """A REBAR-style estimator for independent Bernoulli latents with ``f(b) = sum((b - t)^2)``:
    ``z = logit + log u - log(1 - u)``, ``b = H(z)``, the conditional relaxation ``z~`` from ``v``,
    the surrogate ``stop_gradient(f(b) - eta f(sig(z~/lam))) log p(b) + eta f(sig(z/lam)) -
    eta f(sig(z~/lam))``; the per-batch gradient w.r.t. the logits under an inner tape, its
    squared norm's gradient w.r.t. ``eta`` and ``log_lam`` by an outer tape (REBAR tunes them so);
    3 steps: both gradients, the estimator's mean against the exact gradient."""
    rs = np.random.RandomState(2540)
    u = rs.uniform(0.02, 0.98, (3, 16, 3)).astype(np.float32)
    v = rs.uniform(0.02, 0.98, (3, 16, 3)).astype(np.float32)
    t = tf.constant([0.45, 0.55, 0.2])
    logits = tf.Variable([0.2, -0.4, 0.6])
    eta = tf.Variable(0.5)
    log_lam = tf.Variable(np.log(0.5).astype(np.float32))
    opt = tf.keras.optimizers.SGD(0.1)

    def f(b):
        return tf.reduce_sum(tf.square(b - t), -1)

    out = []
    for i in range(3):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                theta = tf.sigmoid(logits)
                lam = tf.exp(log_lam)
                z = logits + tf.math.log(u[i]) - tf.math.log(1 - u[i])
                b = tf.stop_gradient(tf.cast(z > 0, tf.float32))
                vp = tf.where(b > 0, (1 - theta) + v[i] * theta, v[i] * (1 - theta))
                zt = logits + tf.math.log(vp) - tf.math.log(1 - vp)
                logp = tf.reduce_sum(b * tf.math.log(theta) + (1 - b) * tf.math.log(1 - theta), -1)
                fz = f(tf.sigmoid(z / lam))
                fzt = f(tf.sigmoid(zt / lam))
                surrogate = tf.reduce_mean(tf.stop_gradient(f(b) - eta * fzt) * logp + eta * fz - eta * fzt)
            g = inner.gradient(surrogate, logits)
            var_proxy = tf.reduce_sum(tf.square(g))
        g_eta, g_lam = outer.gradient(var_proxy, [eta, log_lam])
        theta = tf.sigmoid(logits)
        exact = theta * (1 - theta) * ((1 - t) ** 2 - t ** 2)
        opt.apply_gradients([(g, logits), (g_eta, eta), (g_lam, log_lam)])
        out.append((surrogate, g, exact, var_proxy, g_eta, g_lam))
    return out, logits, eta, log_lam


@parity(modes=True, **TOL)
def test_dice_magic_box_first_and_second_order_gradients(tf):
    """DiCE's magic box ``exp(logp - stop_gradient(logp))`` (value exactly 1) times a cost sampled
    from a categorical policy (actions fed from NumPy): the first-order gradient equals the score
    function estimate (checked), and the second-order gradient by nested tapes (a ``jacobian`` of
    the gradient) equals the Hessian of the expected cost's estimator; in a compiled function
    and eagerly."""
    acts = np.random.RandomState(2550).randint(0, 3, size=(12,))
    cost_tab = tf.constant([1.0, -0.5, 2.0])
    theta = tf.Variable([0.1, -0.2, 0.3])

    def run(acts):
        with tf.GradientTape() as t2:
            with tf.GradientTape(persistent=True) as t1:
                logp = tf.gather(tf.nn.log_softmax(theta), acts)
                magic = tf.exp(logp - tf.stop_gradient(logp))
                cost = tf.gather(cost_tab, acts)
                dice = tf.reduce_mean(magic * cost)
                sf = tf.reduce_mean(tf.stop_gradient(cost) * logp)
            g = t1.gradient(dice, theta)
            g_sf = t1.gradient(sf, theta)
        h = t2.jacobian(g, theta)
        return dice, g, h, g_sf

    eager = run(tf.constant(acts))
    compiled = tf.function(run)(tf.constant(acts))
    with tf.GradientTape() as t:
        logp = tf.gather(tf.nn.log_softmax(theta), acts)
        sf = tf.reduce_mean(tf.gather(cost_tab, acts) * logp)
    return eager, compiled, t.gradient(sf, theta)


@parity(modes=True, **TOL)
def test_straight_through_by_custom_gradient_reading_a_temperature_variable(tf):
    """A hard Gumbel sample by ``tf.custom_gradient`` whose forward reads a temperature Variable:
    its ``grad(dy, variables=None)`` recomputes the soft sample under an inner tape and returns the
    logits' gradient and ``[d/d tau]`` (TF's rule for Variables read inside); 2 steps updating the
    kernel and the temperature: the hard samples and both gradients."""
    tau = tf.Variable(0.7)
    w = tf.Variable([[0.5, -0.3, 0.1], [0.2, 0.4, -0.6]])
    x = np.random.RandomState(0).randn(4, 2).astype(np.float32)
    g_noise = -np.log(-np.log(np.random.RandomState(1).uniform(size=(4, 3)))).astype(np.float32)

    @tf.custom_gradient
    def st(logits):
        y = tf.nn.softmax((logits + g_noise) / tau)
        hard = tf.one_hot(tf.argmax(y, -1), 3)

        def grad(dy, variables=None):
            with tf.GradientTape() as t:
                t.watch(logits)
                yy = tf.nn.softmax((logits + g_noise) / tau)
            gl, gt = t.gradient(yy, [logits, tau], output_gradients=dy)
            return gl, [gt]
        return hard, grad

    out = []
    for _ in range(2):
        with tf.GradientTape() as t:
            h = st(tf.matmul(x, w))
            loss = tf.reduce_sum(h * [1.0, -2.0, 0.5])
        g = t.gradient(loss, [w, tau])
        out.append((h, g))
        w.assign_sub(0.1 * g[0])
        tau.assign_sub(0.01 * g[1])
    return out


# ---------------------------------------------------------------------------
# Densities
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_bivariate_mixture_density_network_softplus_scales_keras_layers(tf):
    """A mixture density network on a 2-D target with ``tf.keras`` Dense layers called in a raw
    compiled loop: 3 components, mixture logits, means and ``softplus(.) + 1e-3`` scales per output
    dimension, the log-likelihood by ``reduce_logsumexp`` of ``log_softmax`` plus the diagonal
    Gaussians; 3 Adam steps: NLL, gradients, the layers' weights, and samples' component means."""
    rs = np.random.RandomState(2560)
    x = rs.uniform(-1, 1, (10, 1)).astype(np.float32)
    y = np.concatenate([np.sin(2 * x), np.cos(3 * x) * np.where(rs.rand(10, 1) > 0.5, 1, -1)], -1)
    y = (y + 0.05 * rs.randn(10, 2)).astype(np.float32)
    hidden = tf.keras.layers.Dense(8, activation="tanh")
    head = tf.keras.layers.Dense(3 + 3 * 2 * 2)
    head(hidden(x))
    for i, layer in enumerate((hidden, head)):
        layer.set_weights([init_array(w.shape, 2561 + i, 0.5) for w in layer.get_weights()])
    vs = hidden.trainable_variables + head.trainable_variables
    opt = tf.keras.optimizers.Adam(0.02)

    def params(x):
        out = head(hidden(x))
        logits = out[:, :3]
        means = tf.reshape(out[:, 3:9], [-1, 3, 2])
        scales = tf.nn.softplus(tf.reshape(out[:, 9:], [-1, 3, 2])) + 1e-3
        return tf.nn.log_softmax(logits), means, scales

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logpi, means, scales = params(x)
            comp = tf.reduce_sum(-0.5 * tf.square((y[:, None, :] - means) / scales) - tf.math.log(scales)
                                 - 0.5 * LOG2PI, -1)
            nll = -tf.reduce_mean(tf.reduce_logsumexp(logpi + comp, -1))
        g = tape.gradient(nll, vs)
        opt.apply_gradients(zip(g, vs))
        return nll, g

    hist = [step(tf.constant(x), tf.constant(y)) for _ in range(3)]
    logpi, means, scales = params(tf.constant([[0.0], [0.5]]))
    return hist, tf.exp(logpi), means, scales, vs


@parity(modes=True, **TOL)
def test_gp_marginal_likelihood_ard_matern32_by_cholesky_solve(tf):
    """A Gaussian process with an ARD Matern-3/2 kernel on 2-D inputs: ``softplus`` lengthscales,
    signal and noise variances as Variables, ``K + (noise + 1e-5) I``, ``cholesky``,
    ``alpha = cholesky_solve(L, y)``, the log marginal likelihood ``-0.5 y^T alpha -
    sum(log diag L) - n/2 log 2 pi``; its gradients against the trace formula
    ``0.5 tr((alpha alpha^T - K^-1) dK)`` done by hand for the noise; 4 Adam steps compiled; the
    predictive mean and variance at two points by ``triangular_solve``."""
    rs = np.random.RandomState(2570)
    xs = rs.uniform(-2, 2, (9, 2)).astype(np.float32)
    ys = (np.sin(xs[:, :1] * 1.5) + 0.2 * xs[:, 1:] + 0.1 * rs.randn(9, 1)).astype(np.float32)
    raw_ls = tf.Variable([0.5, 1.0])
    raw_sig = tf.Variable(0.3)
    raw_noise = tf.Variable(-2.0)
    vs = [raw_ls, raw_sig, raw_noise]
    opt = tf.keras.optimizers.Adam(0.05)

    def kern(a, b):
        ls = tf.nn.softplus(raw_ls)
        d = (a[:, None, :] - b[None, :, :]) / ls
        r = tf.sqrt(tf.reduce_sum(tf.square(d), -1) + 1e-12)
        return tf.nn.softplus(raw_sig) * (1 + np.sqrt(3.0) * r) * tf.exp(-np.sqrt(3.0) * r)

    def mll(x, y):
        noise = tf.nn.softplus(raw_noise)
        k = kern(x, x) + (noise + 1e-5) * tf.eye(9)
        chol = tf.linalg.cholesky(k)
        alpha = tf.linalg.cholesky_solve(chol, y)
        val = (-0.5 * tf.reduce_sum(y * alpha) - tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
               - 4.5 * LOG2PI)
        return val, k, chol, alpha

    with tf.GradientTape() as tape:
        val, k, chol, alpha = mll(tf.constant(xs), tf.constant(ys))
    g = tape.gradient(val, vs)
    kinv = tf.linalg.cholesky_solve(chol, tf.eye(9))
    dk = tf.sigmoid(raw_noise) * tf.eye(9)
    by_hand = 0.5 * tf.linalg.trace(tf.matmul(tf.matmul(alpha, alpha, transpose_b=True) - kinv, dk))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = -mll(x, y)[0]
        gs = tape.gradient(loss, vs)
        opt.apply_gradients(zip(gs, vs))
        return loss, gs

    hist = [step(tf.constant(xs), tf.constant(ys)) for _ in range(4)]
    _, _, chol, alpha = mll(tf.constant(xs), tf.constant(ys))
    xq = tf.constant([[0.0, 0.0], [1.0, -1.0]])
    ks = kern(tf.constant(xs), xq)
    mean = tf.matmul(ks, alpha, transpose_a=True)
    v = tf.linalg.triangular_solve(chol, ks, lower=True)
    var = tf.nn.softplus(raw_sig) - tf.reduce_sum(tf.square(v), 0)
    return val, g, g[2] - by_hand, hist, mean, var


@parity(modes=True, **TOL)
def test_em_for_a_gaussian_mixture_in_tf_ops(tf):
    """EM for a 2-component 1-D Gaussian mixture written in TF ops inside one ``tf.function``: the
    E-step's responsibilities by ``softmax`` of the log joint, the M-step's weights, means and
    variances by weighted sums, the log-likelihood by ``reduce_logsumexp`` per iteration (it never
    decreases); 5 iterations in a Python loop, in a ``tf.while_loop`` and in an AutoGraph loop whose
    state is a dict (``state.values()`` in its key order); then the gradient of the
    final log-likelihood w.r.t. the data points (a watched tensor)."""
    rs = np.random.RandomState(2580)
    data = np.concatenate([rs.randn(8) * 0.5 - 1.0, rs.randn(8) * 0.8 + 1.5]).astype(np.float32)

    def loglik_terms(x, pi, mu, var):
        return (tf.math.log(pi) - 0.5 * tf.math.log(2 * np.pi * var)
                - 0.5 * tf.square(x[:, None] - mu) / var)

    def em_step(x, pi, mu, var):
        lj = loglik_terms(x, pi, mu, var)
        ll = tf.reduce_sum(tf.reduce_logsumexp(lj, -1))
        r = tf.nn.softmax(lj, -1)
        nk = tf.reduce_sum(r, 0)
        mu = tf.reduce_sum(r * x[:, None], 0) / nk
        var = tf.reduce_sum(r * tf.square(x[:, None] - mu), 0) / nk + 1e-4
        return nk / tf.cast(tf.shape(x)[0], tf.float32), mu, var, ll

    init = (tf.constant([0.5, 0.5]), tf.constant([-0.5, 0.5]), tf.constant([1.0, 1.0]))

    @tf.function
    def unrolled(x):
        pi, mu, var = init
        lls = []
        for _ in range(5):
            pi, mu, var, ll = em_step(x, pi, mu, var)
            lls.append(ll)
        return pi, mu, var, tf.stack(lls)

    @tf.function
    def looped(x):
        def body(i, pi, mu, var, lls):
            pi, mu, var, ll = em_step(x, pi, mu, var)
            return i + 1, pi, mu, var, lls.write(i, ll)
        _, pi, mu, var, lls = tf.while_loop(lambda i, *_: i < 5, body,
                                            (0,) + init + (tf.TensorArray(tf.float32, 5),))
        return pi, mu, var, lls.stack()

    @tf.function
    def as_dict(x):
        state = {"pi": init[0], "mu": init[1], "var": init[2]}
        for _ in tf.range(5):   # (AutoGraph: a dict loop variable, its key order kept as TF's)
            pi, mu, var, _ = em_step(x, *state.values())
            state = {"pi": pi, "mu": mu, "var": var}
        return tf.stack(list(state.values()))

    x = tf.constant(data)
    a = unrolled(x)
    b = looped(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        final = tf.reduce_sum(tf.reduce_logsumexp(loglik_terms(x, *a[:3]), -1))
    return a, b, as_dict(x), final, tape.gradient(final, x)


@parity(modes=True, **TOL)
def test_energy_based_model_contrastive_divergence_with_langevin_steps(tf):
    """An energy-based model (a small MLP energy) trained by contrastive divergence: negative
    samples start from NumPy noise and take 3 Langevin steps ``x -= 0.05 dE/dx + 0.1 noise`` with
    the gradient by ``tape.gradient`` w.r.t. the samples inside the loop, then held by
    ``stop_gradient``; the loss ``mean E(data) - mean E(neg) + 0.1 (E(data)^2 + E(neg)^2)``; 3 Adam
    steps in a compiled step: losses, energies, the final samples, gradients."""
    rs = np.random.RandomState(2590)
    data = (rs.randn(8, 2) * 0.3 + [1.0, -0.5]).astype(np.float32)
    x0 = rs.randn(3, 8, 2).astype(np.float32)
    noise = rs.randn(3, 3, 8, 2).astype(np.float32)
    ws = _dense_vars(tf, (2, 8, 1), 2591, 0.5)
    opt = tf.keras.optimizers.Adam(0.01)

    def energy(x):
        return tf.squeeze(_mlp(tf, ws, x, act=tf.nn.swish), -1)

    @tf.function
    def step(data, xn, nz):
        for k in range(3):
            with tf.GradientTape() as t:
                t.watch(xn)
                e = tf.reduce_sum(energy(xn))
            xn = xn - 0.05 * t.gradient(e, xn) + 0.1 * nz[k]
        xn = tf.stop_gradient(xn)
        with tf.GradientTape() as tape:
            ep, en = energy(data), energy(xn)
            loss = (tf.reduce_mean(ep) - tf.reduce_mean(en)
                    + 0.1 * tf.reduce_mean(tf.square(ep) + tf.square(en)))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, tf.reduce_mean(ep), tf.reduce_mean(en), xn, g

    hist = [step(tf.constant(data), tf.constant(x0[i]), tf.constant(noise[i])) for i in range(3)]
    return hist, ws


@parity(modes=True, **TOL)
def test_student_t_regression_by_lgamma_with_a_learned_degrees_of_freedom(tf):
    """Robust linear regression with a Student-t likelihood: ``df = 1 + softplus(raw_df)``, the
    log-density by ``lgamma((df + 1) / 2) - lgamma(df / 2) - 0.5 log(df pi s^2) - (df + 1)/2
    log1p(r^2 / (df s^2))``, data with two outliers; the NLL's gradient w.r.t. ``raw_df`` (through
    ``lgamma``'s digamma) eagerly and against ``tf.math.digamma`` by hand, then 4 Adam steps:
    losses, weights, df and scale, and the Gaussian fit's residuals for comparison."""
    rs = np.random.RandomState(2600)
    x = rs.randn(12, 2).astype(np.float32)
    y = (x @ np.array([1.5, -0.5]) + 0.2 * rs.randn(12)).astype(np.float32)
    y[3] += 6.0
    y[9] -= 5.0
    w = tf.Variable(np.zeros(2, np.float32))
    raw_df = tf.Variable(1.0)
    log_s = tf.Variable(0.0)
    vs = [w, raw_df, log_s]
    opt = tf.keras.optimizers.Adam(0.1)

    def nll():
        df = 1.0 + tf.nn.softplus(raw_df)
        s2 = tf.exp(2.0 * log_s)
        r = y - tf.linalg.matvec(x, w)
        lp = (tf.math.lgamma((df + 1) / 2) - tf.math.lgamma(df / 2) - 0.5 * tf.math.log(df * np.pi * s2)
              - (df + 1) / 2 * tf.math.log1p(tf.square(r) / (df * s2)))
        return -tf.reduce_sum(lp), df, r

    with tf.GradientTape() as tape:
        loss0, df, r = nll()
    g0 = tape.gradient(loss0, vs)
    s2 = tf.exp(2.0 * log_s)
    dlp_ddf = (0.5 * tf.math.digamma((df + 1) / 2) - 0.5 * tf.math.digamma(df / 2) - 0.5 / df
               - 0.5 * tf.math.log1p(tf.square(r) / (df * s2))
               + (df + 1) / 2 * tf.square(r) / (df * df * s2 + df * tf.square(r)))
    by_hand = -tf.reduce_sum(dlp_ddf) * tf.sigmoid(raw_df)
    hist = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss, df, _ = nll()
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((loss, df, g))
    return loss0, g0, g0[1] - by_hand, hist, w, tf.exp(log_s), nll()[2]
