"""Round nineteen (c), second half: score-based and energy-based generative training as the
research repositories of the TF era write it (raw ``tf`` ops, custom ``GradientTape`` loops, steps
under ``tf.function``), run under real TensorFlow 2.21 and under tapejax with deferred execution
and predicted updates on and off (``modes=True``).

Denoising score matching over several noise levels with annealed Langevin sampling; sliced score
matching with the Jacobian-vector product by a nested tape and by ``ForwardAccumulator`` (a jvp
inside a tape over the parameters); Hutchinson's trace estimator in a continuous normalising flow
(a vjp by an inner tape, the exact trace by ``batch_jacobian``); an energy-based model trained by
contrastive divergence on Langevin samples made by an inner tape inside the training tape, cut by
``tf.stop_gradient`` and kept in a replay buffer Variable written by slice ``assign``; JEM's
energy from classifier logits; noise-contrastive estimation with a learned normaliser;
consistency distillation against an EMA target network; rectified flow with an Euler sampler
and a reflow step; a VAE with KL annealing by a Variable and free bits by ``tf.maximum``; a GAN
with the R1 penalty and an EMA generator; and WGAN-GP at interpolates where the critic's gradient
is exactly zero (``tf.norm``'s NaN and its ``eps``-safe twin).  Every noise and every Rademacher
vector is drawn with NumPy and fed in as a tensor.
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

LOOSE = dict(rtol=2e-4, atol=2e-5)


def _vars(tf, dims, seed, trainable=True):
    d, h, o = dims
    return [tf.Variable(init_array((d, h), seed), trainable=trainable), tf.Variable(np.zeros(h, np.float32)),
            tf.Variable(init_array((h, o), seed + 1), trainable=trainable), tf.Variable(np.zeros(o, np.float32))]


def _net(tf, ws, x, act=None):
    act = act or tf.tanh
    return tf.matmul(act(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def _data(seed, n=6, d=2):
    rs = np.random.RandomState(seed)
    centres = np.array([[1.0, 1.0], [-1.0, -0.5]], np.float32)
    return (centres[rs.randint(0, 2, size=n)] + 0.2 * rs.randn(n, d)).astype(np.float32)


# ---------------------------------------------------------------------------
# Score matching
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_denoising_score_matching_over_noise_levels_and_annealed_langevin(tf):
    """NCSN: per-example noise levels drawn by NumPy index ``sigmas`` (``tf.gather``), the score
    ``s(x, i) = net([x, one_hot(i)]) / sigma_i``, the loss ``0.5 mean(|sigma s + z|^2)`` (lambda =
    sigma^2), compiled Adam steps; then annealed Langevin dynamics in a compiled function, a Python
    loop over the levels around a ``tf.range`` loop, step ``eps sigma^2 / sigma_L^2``."""
    sigmas = np.array([1.0, 0.5, 0.25], np.float32)
    ws = _vars(tf, (5, 8, 2), 2100)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def score(x, i):
        return _net(tf, ws, tf.concat([x, tf.one_hot(i, 3)], axis=1)) / tf.gather(sigmas, i)[:, None]

    @tf.function
    def step(x, i, z):
        sigma = tf.gather(sigmas, i)[:, None]
        with tf.GradientTape() as tape:
            s = score(x + sigma * z, i)
            loss = 0.5 * tf.reduce_mean(tf.reduce_sum(tf.square(sigma * s + z), axis=1))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g

    rs = np.random.RandomState(2102)
    out = [step(_data(2103 + k), rs.randint(0, 3, size=6), rs.randn(6, 2).astype(np.float32)) for k in range(3)]

    @tf.function
    def anneal(x, noise):
        for li in range(3):
            alpha = 0.1 * (sigmas[li] / sigmas[-1]) ** 2 / 16.0
            for j in tf.range(3):
                x = x + 0.5 * alpha * score(x, tf.fill([4], li)) + np.sqrt(alpha) * noise[li, j]
        return x

    return out, ws, anneal(rs.randn(4, 2).astype(np.float32), rs.randn(3, 3, 4, 2).astype(np.float32))


@parity(modes=True, **LOOSE)
def test_sliced_score_matching_by_a_nested_tape_and_by_forward_accumulator(tf):
    """Sliced score matching ``v^T (ds/dx) v + 0.5 (v^T s)^2`` with NumPy Rademacher ``v``: the
    ``v^T J`` by an inner tape (the gradient of ``sum(v * s)`` w.r.t. ``x``) and the ``J v`` by a
    ``tf.autodiff.ForwardAccumulator`` inside the outer tape over the parameters; both losses and
    their parameter gradients, training on the tape form (compiled steps, SGD)."""
    ws = _vars(tf, (2, 6, 2), 2110)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    @tf.function
    def step(x, v):
        with tf.GradientTape(persistent=True) as outer:
            with tf.GradientTape() as inner:
                inner.watch(x)
                s = _net(tf, ws, x)
                vs = tf.reduce_sum(v * s, axis=1)
            vj = inner.gradient(vs, x)
            loss_tape = tf.reduce_mean(tf.reduce_sum(vj * v, axis=1) + 0.5 * tf.square(vs))
            with tf.autodiff.ForwardAccumulator(primals=x, tangents=v) as acc:
                s2 = _net(tf, ws, x)
            jv = acc.jvp(s2)
            loss_fwd = tf.reduce_mean(tf.reduce_sum(v * jv, axis=1) + 0.5 * tf.square(tf.reduce_sum(v * s2, axis=1)))
        g, g_fwd = outer.gradient(loss_tape, ws), outer.gradient(loss_fwd, ws)
        opt.apply_gradients(zip(g, ws))
        return loss_tape, loss_fwd, g, g_fwd

    rs = np.random.RandomState(2112)
    out = [step(_data(2113 + k), rs.choice([-1.0, 1.0], size=(6, 2)).astype(np.float32)) for k in range(3)]
    return out, ws


@parity(modes=True, **LOOSE)
def test_hutchinson_trace_in_a_continuous_flow_against_the_exact_trace(tf):
    """A continuous normalising flow (FFJORD) integrated by 3 Euler steps from data to the base
    Gaussian: ``log p(x) = log N(z) + sum dt tr(df/dz)``, the trace by Hutchinson's ``eps^T
    (df/dz)^T eps`` (an inner tape's vjp of ``sum(f * eps)``, NumPy Rademacher ``eps``) and exactly
    by ``tape.batch_jacobian`` and ``tf.linalg.trace``; Adam trains the Hutchinson NLL in a
    compiled step (second order through the inner tape), both NLLs logged."""
    ws = _vars(tf, (3, 6, 2), 2120)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def nll(x, eps, exact):
        z, logdet = x, tf.zeros([tf.shape(x)[0]])
        for k in range(3):
            t = tf.fill([tf.shape(x)[0], 1], 1.0 - k / 3)
            with tf.GradientTape(persistent=exact) as inner:
                inner.watch(z)
                f = _net(tf, ws, tf.concat([z, t], axis=1))
                proj = tf.reduce_sum(f * eps[k], axis=1)
            if exact:
                tr = tf.linalg.trace(inner.batch_jacobian(f, z))
            else:
                tr = tf.reduce_sum(inner.gradient(proj, z) * eps[k], axis=1)
            z = z - f / 3.0
            logdet = logdet - tr / 3.0
        logp = -0.5 * tf.reduce_sum(z ** 2, axis=1) - np.log(2 * np.pi) + logdet
        return -tf.reduce_mean(logp)

    @tf.function
    def step(x, eps):
        with tf.GradientTape() as tape:
            loss = nll(x, eps, exact=False)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, nll(x, eps, exact=True), g

    rs = np.random.RandomState(2122)
    return [step(_data(2123 + k), rs.choice([-1.0, 1.0], size=(3, 6, 2)).astype(np.float32))
            for k in range(3)], ws


# ---------------------------------------------------------------------------
# Energy-based models and noise-contrastive estimation
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_ebm_contrastive_divergence_with_langevin_inside_the_tape_and_a_replay_buffer(tf):
    """An EBM trained by contrastive divergence (Du and Mordatch): negatives start from a replay
    buffer Variable (a NumPy mask re-initialises some rows with fresh noise by ``tf.where``), take
    5 Langevin steps whose ``dE/dx`` comes from an inner tape opened inside the training tape, are
    cut by ``tf.stop_gradient`` and written back by ``buffer[start:start + 4].assign``; the loss
    ``E(pos) - E(neg)`` plus the squared-energy regulariser.  Compiled steps with a tensor
    ``start``; the buffer and the parameter gradients (no leak through the Langevin chain)."""
    ws = _vars(tf, (2, 8, 1), 2130)
    rs = np.random.RandomState(2132)
    buffer = tf.Variable(rs.uniform(-2, 2, size=(12, 2)).astype(np.float32), trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def energy(x):
        return tf.squeeze(_net(tf, ws, x, tf.nn.swish), axis=1)

    @tf.function
    def step(pos, start, fresh, reinit, noise):
        with tf.GradientTape() as tape:
            neg = tf.where(reinit[:, None], fresh, buffer[start:start + 4])
            for k in range(5):
                with tf.GradientTape() as inner:
                    inner.watch(neg)
                    e = tf.reduce_sum(energy(neg))
                neg = neg - 0.05 * inner.gradient(e, neg) + 0.01 * noise[k]
            neg = tf.stop_gradient(neg)
            e_pos, e_neg = energy(pos), energy(neg)
            loss = tf.reduce_mean(e_pos) - tf.reduce_mean(e_neg) + 0.1 * tf.reduce_mean(e_pos ** 2 + e_neg ** 2)
        g = tape.gradient(loss, ws + [buffer])
        opt.apply_gradients(zip(g[:4], ws))
        buffer[start:start + 4].assign(neg)
        return loss, g[:4], g[4] is None, neg

    out = [step(_data(2133 + k, n=4), tf.constant(4 * k), rs.uniform(-2, 2, size=(4, 2)).astype(np.float32),
                rs.uniform(size=4) < 0.3, rs.randn(5, 4, 2).astype(np.float32)) for k in range(3)]
    return out, ws, buffer


@parity(modes=True, **LOOSE)
def test_jem_energy_from_classifier_logits_with_sgld_samples(tf):
    """JEM (Grathwohl et al.): a classifier's logits define ``E(x) = -logsumexp(logits)``; the loss
    is the cross-entropy plus ``E(data) - E(sgld samples)``, the samples made by 4 SGLD steps on
    ``-E`` with an inner tape outside the training tape (eager steps, SGD with momentum);
    ``p(x)``'s relative value ``tf.reduce_logsumexp`` and the accuracy are logged."""
    ws = _vars(tf, (2, 6, 3), 2140)
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9)
    rs = np.random.RandomState(2142)
    out = []
    for k in range(3):
        x, y = _data(2143 + k), rs.randint(0, 3, size=6)
        neg = tf.constant(rs.uniform(-2, 2, size=(6, 2)).astype(np.float32))
        for j in range(4):
            with tf.GradientTape() as inner:
                inner.watch(neg)
                logp = tf.reduce_sum(tf.reduce_logsumexp(_net(tf, ws, neg), axis=1))
            neg = neg + 0.5 * inner.gradient(logp, neg) + 0.01 * rs.randn(6, 2).astype(np.float32)
        with tf.GradientTape() as tape:
            logits = _net(tf, ws, x)
            ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            gen = -tf.reduce_mean(tf.reduce_logsumexp(logits, axis=1)) + tf.reduce_mean(
                tf.reduce_logsumexp(_net(tf, ws, neg), axis=1))
            loss = ce + gen
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32))
        out.append((loss, ce, gen, g, neg, acc))
    return out, ws


@parity(modes=True, **LOOSE)
def test_noise_contrastive_estimation_with_a_learned_normaliser(tf):
    """NCE (Gutmann and Hyvarinen): an unnormalised log-density ``-0.5 |(x - mu) / s|^2 + c`` with
    ``c`` a learned normaliser, noise from ``N(0, 2^2)`` with its log-density written out, the
    logistic loss on ``G = log p - log q - log nu`` by ``tf.math.log_sigmoid`` (and its twin by
    ``sigmoid_cross_entropy_with_logits``); eager Adam steps; ``c`` converges toward the true
    log-normaliser, logged against it."""
    mu, log_s, c = tf.Variable([0.0, 0.0]), tf.Variable([0.3, -0.2]), tf.Variable(0.0)
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    rs = np.random.RandomState(2150)
    out = []
    for _ in range(4):
        data = _data(int(rs.randint(1000)), n=8)
        noise = (2.0 * rs.randn(16, 2)).astype(np.float32)

        def log_q(x):
            return -0.5 * tf.reduce_sum(tf.square(x / 2.0), axis=1) - 2.0 * np.log(2.0) - np.log(2 * np.pi)

        with tf.GradientTape() as tape:
            def g_of(x):
                lp = -0.5 * tf.reduce_sum(tf.square((x - mu) * tf.exp(-log_s)), axis=1) + c
                return lp - log_q(x) - np.log(2.0)
            gd, gn = g_of(data), g_of(noise)
            loss = -tf.reduce_mean(tf.math.log_sigmoid(gd)) - 2.0 * tf.reduce_mean(tf.math.log_sigmoid(-gn))
            twin = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(tf.ones_like(gd), gd)) + 2.0 * tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(tf.zeros_like(gn), gn))
        g = tape.gradient(loss, [mu, log_s, c])
        opt.apply_gradients(zip(g, [mu, log_s, c]))
        true_c = -tf.reduce_sum(log_s) - np.log(2 * np.pi)
        out.append((loss, twin, g, true_c))
    return out, mu, log_s, c


# ---------------------------------------------------------------------------
# Consistency distillation and flow matching
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_consistency_distillation_against_an_ema_target_network(tf):
    """Consistency distillation (Song et al. 2023): the student ``f(x, t) = c_skip(t) x + c_out(t)
    F(x, t)`` with the boundary coefficients (sigma_data 0.5, eps 0.002), the teacher's one Euler
    step of the PF-ODE from ``t_{n+1}`` to ``t_n`` (teacher Variables non-trainable), the target
    ``f_ema(x_{t_n}, t_n)`` under ``tf.stop_gradient`` from the EMA network, the EMA ``assign``ed
    with mu 0.9 in the compiled step; the EMA network's Variables get None."""
    sd, eps = 0.5, 0.002
    grid = np.array([0.002, 0.2, 0.5, 1.0, 2.0], np.float32)
    student = _vars(tf, (3, 8, 2), 2160)
    target = [tf.Variable(v, trainable=False) for v in student]
    teacher = _vars(tf, (3, 8, 2), 2162, trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def f(ws, x, t):
        c_skip = sd ** 2 / ((t - eps) ** 2 + sd ** 2)
        c_out = sd * (t - eps) / tf.sqrt(sd ** 2 + t ** 2)
        return c_skip * x + c_out * _net(tf, ws, tf.concat([x, t], axis=1))

    @tf.function
    def step(x, n, z):
        t1, t0 = tf.gather(grid, n + 1)[:, None], tf.gather(grid, n)[:, None]
        x1 = x + t1 * z
        d = _net(tf, teacher, tf.concat([x1, t1], axis=1))
        x0 = x1 + (t0 - t1) * d
        with tf.GradientTape() as tape:
            pred = f(student, x1, t1)
            tgt = tf.stop_gradient(f(target, x0, t0))
            loss = tf.reduce_mean(tf.reduce_sum(tf.square(pred - tgt), axis=1))
        g = tape.gradient(loss, student + target)
        opt.apply_gradients(zip(g[:4], student))
        for a, b in zip(target, student):
            a.assign(0.9 * a + 0.1 * b)
        return loss, g[:4], [gi is None for gi in g[4:]]

    rs = np.random.RandomState(2164)
    out = [step(_data(2165 + k), rs.randint(0, 4, size=6), rs.randn(6, 2).astype(np.float32)) for k in range(3)]
    z = tf.constant(rs.randn(3, 2).astype(np.float32) * 2.0)
    return out, student, target, f(target, z, tf.fill([3, 1], 2.0))


@parity(modes=True, **LOOSE)
def test_rectified_flow_matching_with_an_euler_sampler_and_a_reflow_step(tf):
    """Rectified flow: ``x_t = (1 - t) x0 + t x1`` with NumPy ``t``, the velocity target ``x1 - x0``,
    compiled Adam steps; a 4-step Euler sampler in a compiled ``tf.range`` loop (``t = i / 4`` from
    the counter's cast); then one reflow step trains on the coupled pairs ``(x0, sample(x0))``
    the sampler made, and the straightness ``mean |v - (x1 - x0)|^2`` along the new flow."""
    ws = _vars(tf, (3, 8, 2), 2170)
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    @tf.function
    def step(x0, x1, t):
        with tf.GradientTape() as tape:
            xt = (1.0 - t) * x0 + t * x1
            loss = tf.reduce_mean(tf.square(_net(tf, ws, tf.concat([xt, t], axis=1)) - (x1 - x0)))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g

    @tf.function
    def sample(x):
        for i in tf.range(4):
            t = tf.fill([tf.shape(x)[0], 1], tf.cast(i, tf.float32) / 4.0)
            x = x + 0.25 * _net(tf, ws, tf.concat([x, t], axis=1))
        return x

    rs = np.random.RandomState(2172)
    out = [step(rs.randn(6, 2).astype(np.float32), _data(2173 + k), rs.uniform(size=(6, 1)).astype(np.float32))
           for k in range(3)]
    x0 = rs.randn(6, 2).astype(np.float32)
    x1 = sample(x0)
    reflow = step(x0, x1, rs.uniform(size=(6, 1)).astype(np.float32))
    return out, x1, reflow, ws, sample(x0)


# ---------------------------------------------------------------------------
# VAE and GAN training tricks
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_vae_with_kl_annealing_by_a_variable_and_free_bits(tf):
    """A VAE whose KL weight ``beta`` is a non-trainable Variable ``assign``ed ``min(1, step / 3)``
    between compiled steps, with free bits: the batch-mean KL per latent dimension is clipped below
    by ``tf.maximum(kl_d, 0.1)`` (dimensions under it get no KL gradient); one latent dimension's
    encoder weights are zero, so its KL is exactly 0 (``mu = 0``, ``log var = 0``).  The
    reparameterisation noise is NumPy's; the per-dimension KLs and the ELBO terms are logged."""
    enc_w = init_array((3, 4), 2180)
    enc_w[:, [1, 3]] = 0.0
    enc = [tf.Variable(enc_w), tf.Variable(np.zeros(4, np.float32))]
    dec = [tf.Variable(init_array((2, 3), 2181)), tf.Variable(np.zeros(3, np.float32))]
    beta = tf.Variable(0.0, trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    @tf.function
    def step(x, noise):
        with tf.GradientTape() as tape:
            h = tf.matmul(x, enc[0]) + enc[1]
            mu, logvar = tf.split(h, 2, axis=1)
            z = mu + tf.exp(0.5 * logvar) * noise
            recon = tf.reduce_mean(tf.reduce_sum(tf.square(tf.matmul(z, dec[0]) + dec[1] - x), axis=1))
            kl_d = tf.reduce_mean(0.5 * (tf.square(mu) + tf.exp(logvar) - logvar - 1.0), axis=0)
            kl = tf.reduce_sum(tf.maximum(kl_d, 0.1))
            loss = recon + beta * kl
        g = tape.gradient(loss, enc + dec)
        opt.apply_gradients(zip(g, enc + dec))
        return loss, recon, kl_d, kl, g

    rs = np.random.RandomState(2182)
    out = []
    for k in range(4):
        out.append(step(rs.randn(6, 3).astype(np.float32), rs.randn(6, 2).astype(np.float32)))
        beta.assign(min(1.0, (k + 1) / 3))
    return out, enc, dec, beta


@parity(modes=True, **LOOSE)
def test_gan_with_the_r1_penalty_and_an_ema_generator(tf):
    """StyleGAN2-style training on 2-D points: the non-saturating losses by ``tf.nn.softplus``,
    the R1 penalty ``gamma / 2 * mean |dD(x_real)/dx|^2`` by an inner tape watching the real batch
    inside the discriminator's tape (second order), alternating compiled D and G steps, the
    generator's EMA ``assign``ed after each G step and sampled on fixed NumPy latents."""
    gen = _vars(tf, (2, 6, 2), 2190)
    gen_ema = [tf.Variable(v, trainable=False) for v in gen]
    disc = _vars(tf, (2, 6, 1), 2192)
    d_opt = tf.keras.optimizers.legacy.Adam(0.02, beta_1=0.0, beta_2=0.99)
    g_opt = tf.keras.optimizers.legacy.Adam(0.02, beta_1=0.0, beta_2=0.99)

    @tf.function
    def d_step(real, z):
        fake = _net(tf, gen, z)
        with tf.GradientTape() as tape:
            with tf.GradientTape() as r1_tape:
                r1_tape.watch(real)
                d_real = _net(tf, disc, real, tf.nn.leaky_relu)
                d_sum = tf.reduce_sum(d_real)
            r1_grad = r1_tape.gradient(d_sum, real)
            r1 = tf.reduce_mean(tf.reduce_sum(tf.square(r1_grad), axis=1))
            d_fake = _net(tf, disc, fake, tf.nn.leaky_relu)
            loss = tf.reduce_mean(tf.nn.softplus(d_fake) + tf.nn.softplus(-d_real)) + 5.0 * r1
        g = tape.gradient(loss, disc)
        d_opt.apply_gradients(zip(g, disc))
        return loss, r1, g

    @tf.function
    def g_step(z):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.softplus(-_net(tf, disc, _net(tf, gen, z), tf.nn.leaky_relu)))
        g = tape.gradient(loss, gen + disc)
        g_opt.apply_gradients(zip(g[:4], gen))
        for e, w in zip(gen_ema, gen):
            e.assign(0.7 * e + 0.3 * w)
        return loss, g[:4], [gi is None for gi in g[4:]]

    rs = np.random.RandomState(2194)
    out = [(d_step(_data(2195 + k), rs.randn(6, 2).astype(np.float32)), g_step(rs.randn(6, 2).astype(np.float32)))
           for k in range(3)]
    z = tf.constant(rs.randn(4, 2).astype(np.float32))
    return out, gen, gen_ema, disc, _net(tf, gen_ema, z)


@parity(modes=True, **LOOSE)
def test_wgan_gp_at_interpolates_where_the_critic_gradient_is_exactly_zero(tf):
    """WGAN-GP with a ReLU critic whose hidden units are all dead on half the interpolates (their
    input gradient is exactly 0): ``(tf.norm(g) - 1)^2`` then has ``0 / 0`` in the norm's
    derivative, NaN in some parameter gradients (TF's ReLU second derivative is a select, so the
    NaN does not reach every weight), while the ``sqrt(sum(g^2) + 1e-12)`` form stays finite; the
    step applies the safe gradient.  The NaN pattern and the finite values are compared."""
    rs = np.random.RandomState(2200)
    w1 = np.abs(init_array((2, 4), 2201))
    critic = [tf.Variable(w1), tf.Variable(np.full(4, -1.0, np.float32)),
              tf.Variable(init_array((4, 1), 2202)), tf.Variable([0.0])]
    opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.5, beta_2=0.9)
    real = np.array([[-2.0, -1.5], [-1.0, -2.0], [2.0, 1.5], [1.5, 2.5]], np.float32)
    fake = np.array([[-1.5, -2.0], [-2.5, -1.0], [1.0, 2.0], [3.0, 1.0]], np.float32)

    def step(alpha, safe):
        alpha = tf.convert_to_tensor(alpha)
        inter = alpha * real + (1.0 - alpha) * fake
        with tf.GradientTape() as tape:
            with tf.GradientTape() as gp_tape:
                gp_tape.watch(inter)
                c = _net(tf, critic, inter, tf.nn.relu)
            grad = gp_tape.gradient(c, inter)
            norm = tf.sqrt(tf.reduce_sum(tf.square(grad), axis=1) + 1e-12) if safe else tf.norm(grad, axis=1)
            gp = tf.reduce_mean(tf.square(norm - 1.0))
            loss = tf.reduce_mean(_net(tf, critic, fake, tf.nn.relu)) - tf.reduce_mean(
                _net(tf, critic, real, tf.nn.relu)) + 10.0 * gp
        return loss, gp, norm, tape.gradient(loss, critic)

    compiled = tf.function(step)
    out = []
    for k in range(3):
        alpha = rs.uniform(size=(4, 1)).astype(np.float32)
        unsafe = step(alpha, False)
        safe = compiled(alpha, True)
        opt.apply_gradients(zip(safe[3], critic))
        out.append((unsafe, [tf.math.is_nan(g) for g in unsafe[3]], safe, compiled(alpha, False)[3]))
    return out, critic


# ---------------------------------------------------------------------------
# Learned variances and discrete latents
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_improved_ddpm_hybrid_loss_with_learned_variance_and_discretised_decoder(tf):
    """Improved DDPM (Nichol and Dhariwal): the network outputs epsilon and ``v``; the log variance
    interpolates ``v`` between ``log beta`` and the posterior's clipped log variance (its ``t = 0``
    entry, log 0, replaced by the ``t = 1`` one); ``L_vlb`` is the Gaussian KL with the mean from a
    stopped epsilon, at ``t = 0`` the discretised Gaussian decoder's NLL (the tanh CDF, ``tf.where``
    at the +-1 edges, ``log(tf.maximum(., 1e-12))``); the loss ``L_simple + 0.001 L_vlb``; data on
    the 8-bit grid with exact +-1 values and batches holding ``t = 0``."""
    steps = 6
    betas = np.linspace(0.02, 0.3, steps).astype(np.float32)
    acp = np.cumprod(1.0 - betas).astype(np.float32)
    acp_prev = np.concatenate([[1.0], acp[:-1]]).astype(np.float32)
    pvar = betas * (1.0 - acp_prev) / (1.0 - acp)
    log_pvar = np.log(np.concatenate([pvar[1:2], pvar[1:]])).astype(np.float32)
    c0 = (np.sqrt(acp_prev) * betas / (1.0 - acp)).astype(np.float32)
    ct = (np.sqrt(1.0 - betas) * (1.0 - acp_prev) / (1.0 - acp)).astype(np.float32)
    ws = _vars(tf, (3, 8, 4), 2210)
    opt = tf.keras.optimizers.legacy.Adam(0.01)

    def cdf(x):
        return 0.5 * (1.0 + tf.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * tf.pow(x, 3))))

    def gather(a, t):
        return tf.gather(a, t)[:, None]

    @tf.function
    def step(x0, t, noise):
        ab = gather(acp, t)
        xt = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
        with tf.GradientTape() as tape:
            out = _net(tf, ws, tf.concat([xt, tf.cast(t, tf.float32)[:, None] / steps], axis=1))
            eps, v = out[:, :2], out[:, 2:]
            frac = (v + 1.0) / 2.0
            log_var = frac * gather(np.log(betas), t) + (1.0 - frac) * gather(log_pvar, t)
            x0_hat = (xt - tf.sqrt(1.0 - ab) * tf.stop_gradient(eps)) / tf.sqrt(ab)
            mean = gather(c0, t) * x0_hat + gather(ct, t) * xt
            true_mean, true_lv = gather(c0, t) * x0 + gather(ct, t) * xt, gather(log_pvar, t)
            kl = 0.5 * (-1.0 + log_var - true_lv + tf.exp(true_lv - log_var)
                        + tf.square(true_mean - mean) * tf.exp(-log_var)) / np.log(2.0)
            inv = tf.exp(-0.5 * log_var)
            cdf_plus, cdf_min = cdf(inv * (x0 - mean + 1 / 255.0)), cdf(inv * (x0 - mean - 1 / 255.0))
            log_probs = tf.where(x0 < -0.999, tf.math.log(tf.maximum(cdf_plus, 1e-12)),
                                 tf.where(x0 > 0.999, tf.math.log(tf.maximum(1.0 - cdf_min, 1e-12)),
                                          tf.math.log(tf.maximum(cdf_plus - cdf_min, 1e-12))))
            vlb = tf.reduce_mean(tf.where((t == 0)[:, None], -log_probs / np.log(2.0), kl), axis=1)
            l_simple = tf.reduce_mean(tf.square(noise - eps))
            loss = l_simple + 0.001 * tf.reduce_mean(vlb)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, l_simple, vlb, g

    rs = np.random.RandomState(2212)
    out = []
    for k in range(3):
        x0 = np.clip(np.round(rs.randn(6, 2) * 127.5) / 127.5, -1.0, 1.0).astype(np.float32)
        x0[0] = [-1.0, 1.0]
        t = rs.randint(0, steps, size=6).astype(np.int32)
        t[:2] = 0
        out.append(step(x0, t, rs.randn(6, 2).astype(np.float32)))
    return out, ws


@parity(modes=True, x64=True, **LOOSE)
def test_gumbel_softmax_dvae_with_hard_straight_through_and_annealed_temperature(tf):
    """DALL-E's dVAE on a toy: ``softmax((logits + g) / tau)`` with NumPy Gumbel noise, the hard
    one-hot by ``argmax`` passed straight through (``stop_gradient(hard - soft) + soft``), a
    codebook matmul into the decoder, the KL of ``softmax(logits)`` to the uniform prior by
    ``tf.math.xlogy``; ``tau`` a Variable annealed by ``assign`` between compiled steps; code
    usage by ``tf.math.bincount(minlength = maxlength = K)`` and its perplexity."""
    rs = np.random.RandomState(2220)
    enc = _vars(tf, (3, 6, 4), 2221)
    book = tf.Variable(init_array((4, 2), 2223))
    dec = [tf.Variable(init_array((2, 3), 2224)), tf.Variable(np.zeros(3, np.float32))]
    tau = tf.Variable(1.0, trainable=False)
    ws = enc + [book] + dec
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    @tf.function
    def step(x, gumbel):
        with tf.GradientTape() as tape:
            logits = _net(tf, enc, x)
            soft = tf.nn.softmax((logits + gumbel) / tau)
            idx = tf.argmax(soft, axis=-1)
            hard = tf.one_hot(idx, 4)
            code = tf.stop_gradient(hard - soft) + soft
            recon = tf.reduce_mean(tf.square(tf.matmul(tf.matmul(code, book), dec[0]) + dec[1] - x))
            q = tf.nn.softmax(logits)
            kl = tf.reduce_mean(tf.reduce_sum(tf.math.xlogy(q, q * 4.0), axis=1))
            loss = recon + 0.1 * kl
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        counts = tf.math.bincount(tf.cast(idx, tf.int32), minlength=4, maxlength=4)
        p = tf.cast(counts, tf.float32) / 6.0
        return loss, kl, idx, counts, tf.exp(-tf.reduce_sum(tf.math.xlogy(p, p))), g

    out = []
    for k in range(3):
        x = rs.randn(6, 3).astype(np.float32)
        u = rs.uniform(1e-6, 1.0, size=(6, 4))
        out.append(step(x, (-np.log(-np.log(u))).astype(np.float32)))
        tau.assign(max(0.5, float(np.exp(-0.5 * (k + 1)))))
    return out, ws, tau


@xfail_on_tapejax("a data-dependent shape in a compiled step (tf.where(cond)'s row count) is a design "
                  "limit: XLA compiles static shapes (README, 'XLA compiles static shapes'); the eager "
                  "restart of test_user_programs19c.py runs it, and its compiled twin uses a mask")
@parity(x64=True)
def test_dead_code_restart_by_a_data_dependent_where_inside_a_compiled_step(tf):
    """The dead-code restart of ``test_user_programs19c.py`` moved into the compiled step as a
    user writes it first: ``dead = tf.where(counts == 0)`` (a row count known only at run time),
    ``tf.tensor_scatter_nd_update(codebook, dead, z[:n])``.  TF runs it; tapejax raises
    OperatorNotAllowedInGraphError while tracing."""
    book = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))

    @tf.function
    def restart(idx, z):
        counts = tf.math.bincount(idx, minlength=6, maxlength=6)
        dead = tf.where(counts == 0)
        n = tf.shape(dead)[0]
        book.assign(tf.tensor_scatter_nd_update(book, dead, z[:n]))
        return counts, n

    return restart(tf.constant([0, 0, 2, 5], tf.int32), tf.constant(-np.ones((6, 2), np.float32))), book
