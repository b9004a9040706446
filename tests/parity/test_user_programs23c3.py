"""Round twenty-three (c), third part: variational inference written by hand in TF2 (raw tf ops,
no TensorFlow Probability), each run under real TensorFlow 2.21 and under tapejax.

A Gaussian VAE with the closed-form KL in a compiled step, the IWAE bound by ``reduce_logsumexp``
over K samples, a beta-VAE ``tf.keras.Model`` whose ``beta`` Variable a callback anneals under
``fit``, a learned mixture-of-Gaussians prior, a Bernoulli likelihood from logits with Keras
Dense layers, free bits by ``tf.maximum`` on per-dimension KLs, Dirichlet amortised inference
with the KL by ``lgamma`` / ``digamma`` and a Beta-Bernoulli evidence by ``lbeta``, keras.io's
older VAE whose sampling layer adds the KL by ``add_loss`` under ``fit`` (and such a layer in a
custom loop calling the model twice a step), a heterogeneous-likelihood VAE whose compiled step
concatenates a dict batch's values in the caller's key order, a stick-breaking VAE with Kumaraswamy posteriors
(``cumprod`` sticks away from zero: at a zero TF's cumprod gradient is 0, tapejax's exact, a
documented deliberate difference).  Noise is NumPy's, fed
in; losses per step, gradients with their None-ness and the Variables after a few steps are
compared.
"""
import numpy as np

from .harness import init_array, parity
from .test_user_programs23c import LOG2PI, LOOSE, TOL, _dense_vars, _init_trainable, _mlp, _std_normal_logp


def _vae_data(n, d, seed):
    rs = np.random.RandomState(seed)
    return (rs.randn(n, 2) @ rs.randn(2, d)).astype(np.float32)


@parity(modes=True, **TOL)
def test_gaussian_vae_closed_form_kl_in_a_compiled_step(tf):
    """A Gaussian VAE (encoder to mean and log-variance, decoder with a learned output
    log-scale) on 6-D data: the reparameterised sample with NumPy noise, the closed-form KL
    ``-0.5 sum(1 + logvar - mu^2 - exp(logvar))``, the Gaussian log-likelihood; 4 Adam steps in a
    compiled step: the ELBO, KL and reconstruction per step, all gradients, the Variables."""
    x = _vae_data(8, 6, 2360)
    eps = np.random.RandomState(2361).randn(4, 8, 2).astype(np.float32)
    enc = _dense_vars(tf, (6, 8, 4), 2362, 0.4)
    dec = _dense_vars(tf, (2, 8, 6), 2364, 0.4)
    out_log_scale = tf.Variable(np.zeros(6, np.float32))
    vs = enc + dec + [out_log_scale]
    opt = tf.keras.optimizers.Adam(0.01)

    @tf.function
    def step(x, e):
        with tf.GradientTape() as tape:
            mu, logvar = tf.split(_mlp(tf, enc, x, act=tf.nn.elu), 2, -1)
            z = mu + tf.exp(0.5 * logvar) * e
            xr = _mlp(tf, dec, z, act=tf.nn.elu)
            rec = tf.reduce_sum(-0.5 * tf.square((x - xr) / tf.exp(out_log_scale)) - out_log_scale
                                - 0.5 * LOG2PI, -1)
            kl = -0.5 * tf.reduce_sum(1 + logvar - tf.square(mu) - tf.exp(logvar), -1)
            elbo = tf.reduce_mean(rec - kl)
            loss = -elbo
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return elbo, tf.reduce_mean(kl), tf.reduce_mean(rec), g

    hist = [step(tf.constant(x), tf.constant(eps[i])) for i in range(4)]
    return hist, vs


@parity(modes=True, **TOL)
def test_iwae_bound_by_reduce_logsumexp_over_k_samples(tf):
    """The IWAE bound with K = 5 importance samples on 4-D data: ``log w = log p(x|z) + log p(z) -
    log q(z|x)`` for [K, B] samples, the bound ``mean(logsumexp(log w, 0) - log K)`` against the ELBO
    (mean of ``log w``), the normalised importance weights by ``softmax`` over K; 3 Adam steps on the
    IWAE bound: its value, gradients, and the effective sample size per example at the end."""
    x = _vae_data(6, 4, 2370)
    k = 5
    eps = np.random.RandomState(2371).randn(4, k, 6, 2).astype(np.float32)
    enc = _dense_vars(tf, (4, 6, 4), 2372, 0.4)
    dec = _dense_vars(tf, (2, 6, 4), 2374, 0.4)
    vs = enc + dec
    opt = tf.keras.optimizers.Adam(0.02)

    def log_weights(x, e):
        mu, log_sd = tf.split(_mlp(tf, enc, x, act=tf.tanh), 2, -1)
        z = mu + tf.exp(log_sd) * e                          # [K, B, 2]
        log_q = tf.reduce_sum(-0.5 * tf.square(e) - log_sd - 0.5 * LOG2PI, -1)
        log_pz = _std_normal_logp(tf, z)
        xr = _mlp(tf, dec, tf.reshape(z, [-1, 2]), act=tf.tanh)
        xr = tf.reshape(xr, [k, -1, 4])
        log_px = tf.reduce_sum(-0.5 * tf.square(x - xr) - 0.5 * LOG2PI, -1)
        return log_px + log_pz - log_q

    hist = []
    for i in range(3):
        with tf.GradientTape() as tape:
            lw = log_weights(tf.constant(x), tf.constant(eps[i]))
            iwae = tf.reduce_mean(tf.reduce_logsumexp(lw, axis=0) - np.log(k))
            elbo = tf.reduce_mean(lw)
            loss = -iwae
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((iwae, elbo, g))
    lw = log_weights(tf.constant(x), tf.constant(eps[3]))
    wn = tf.nn.softmax(lw, axis=0)
    ess = 1.0 / tf.reduce_sum(tf.square(wn), 0)
    return hist, wn, ess


@parity(**LOOSE)
def test_beta_vae_keras_model_with_annealing_callback_assigning_beta(tf):
    """A beta-VAE as a ``tf.keras.Model`` with a non-trainable ``beta`` Variable read in its custom
    ``train_step``; a ``Callback`` assigns the linear warm-up (then cyclical) schedule in
    ``on_train_batch_begin``; the noise is the data's last columns (fed through ``fit``, split
    off in ``train_step``); three ``Mean`` trackers (total, reconstruction, KL).  Fit 3 epochs:
    the history, the beta values seen, the weights."""
    x = _vae_data(8, 4, 2380)
    eps = np.random.RandomState(2381).randn(8, 2).astype(np.float32)
    data = np.concatenate([x, eps], -1)

    class BetaVAE(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.enc = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh"), tf.keras.layers.Dense(4)])
            self.dec = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh"), tf.keras.layers.Dense(4)])
            self.beta = tf.Variable(0.0, trainable=False)
            self.trackers = [tf.keras.metrics.Mean(name=n) for n in ("loss", "rec", "kl")]

        @property
        def metrics(self):
            return self.trackers

        def call(self, x):
            mu, logvar = tf.split(self.enc(x), 2, -1)
            return self.dec(mu)

        def train_step(self, data):
            x, e = data[:, :4], data[:, 4:]
            with tf.GradientTape() as tape:
                mu, logvar = tf.split(self.enc(x), 2, -1)
                z = mu + tf.exp(0.5 * logvar) * e
                rec = tf.reduce_mean(tf.reduce_sum(tf.square(x - self.dec(z)), -1))
                kl = tf.reduce_mean(-0.5 * tf.reduce_sum(1 + logvar - tf.square(mu) - tf.exp(logvar), -1))
                loss = rec + self.beta * kl
            g = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(g, self.trainable_variables))
            for t, v in zip(self.trackers, (loss, rec, kl)):
                t.update_state(v)
            return {t.name: t.result() for t in self.trackers}

    seen = []

    class Anneal(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            it = int(self.model.optimizer.iterations.numpy())
            beta = min(1.0, it / 4.0) if it < 4 else 0.5 * (1 + np.cos(np.pi * (it % 2)))
            self.model.beta.assign(beta)
            seen.append(float(self.model.beta.numpy()))

    model = BetaVAE()
    model(x[:1])
    _init_trainable(model, seed=2382)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.02))
    h = model.fit(data, batch_size=4, epochs=3, shuffle=False, verbose=0, callbacks=[Anneal()])
    return ({k: [float(v) for v in h.history[k]] for k in ("loss", "rec", "kl")}, seen,
            model.trainable_weights, model.beta)


@parity(modes=True, **TOL)
def test_vae_with_a_learned_mixture_of_gaussians_prior(tf):
    """A VAE whose prior is a learned 3-component Gaussian mixture in 2-D (logits, means,
    softplus scales as Variables): ``log p(z)`` by ``reduce_logsumexp`` over components, the KL
    estimated by one sample as ``log q(z|x) - log p(z)``; 2 Adam steps eager: the ELBO, the
    prior's gradients and the mixture weights; then the prior's responsibilities of two codes."""
    x = _vae_data(8, 4, 2390)
    eps = np.random.RandomState(2391).randn(3, 8, 2).astype(np.float32)
    enc = _dense_vars(tf, (4, 6, 4), 2392, 0.4)
    dec = _dense_vars(tf, (2, 6, 4), 2394, 0.4)
    logits = tf.Variable(np.zeros(3, np.float32))
    means = tf.Variable(init_array((3, 2), 2396, 1.5))
    raw_scales = tf.Variable(np.full((3, 2), 0.5, np.float32))
    prior = [logits, means, raw_scales]
    vs = enc + dec + prior
    opt = tf.keras.optimizers.Adam(0.02)

    def log_prior(z):
        sc = tf.nn.softplus(raw_scales)
        comp = tf.reduce_sum(-0.5 * tf.square((z[:, None, :] - means) / sc) - tf.math.log(sc) - 0.5 * LOG2PI, -1)
        return tf.reduce_logsumexp(tf.nn.log_softmax(logits) + comp, -1), comp

    hist = []
    for i in range(2):
        with tf.GradientTape() as tape:
            mu, log_sd = tf.split(_mlp(tf, enc, x), 2, -1)
            z = mu + tf.exp(log_sd) * eps[i]
            log_q = tf.reduce_sum(-0.5 * tf.square(eps[i]) - log_sd - 0.5 * LOG2PI, -1)
            lp, _ = log_prior(z)
            rec = tf.reduce_sum(-0.5 * tf.square(x - _mlp(tf, dec, z)), -1)
            elbo = tf.reduce_mean(rec + lp - log_q)
            loss = -elbo
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((elbo, g[-3:]))
    _, comp = log_prior(tf.constant([[0.0, 0.0], [1.0, -1.0]]))
    return hist, tf.nn.softmax(logits), tf.nn.softmax(tf.nn.log_softmax(logits) + comp, -1), prior


@parity(modes=True, **TOL)
def test_bernoulli_vae_from_logits_with_keras_dense_layers(tf):
    """A VAE on binary 8-D data with ``tf.keras.layers.Dense`` encoder and decoder called in a raw
    compiled loop: the reconstruction term by ``sigmoid_cross_entropy_with_logits`` summed over
    pixels, the closed-form KL; 3 Adam steps: the negative ELBO, the gradients, the decoded
    probabilities of the means and the layers' weights."""
    rs = np.random.RandomState(2400)
    x = (rs.rand(6, 8) < np.linspace(0.1, 0.9, 8)).astype(np.float32)
    eps = rs.randn(3, 6, 2).astype(np.float32)
    enc1, enc2 = tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(4)
    dec1, dec2 = tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(8)
    enc2(enc1(x))
    dec2(dec1(eps[0]))
    layers = [enc1, enc2, dec1, dec2]
    for i, layer in enumerate(layers):
        layer.set_weights([init_array(w.shape, 2401 + i, 0.5) for w in layer.get_weights()])
    vs = [v for layer in layers for v in layer.trainable_variables]
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def step(x, e):
        with tf.GradientTape() as tape:
            mu, logvar = tf.split(enc2(enc1(x)), 2, -1)
            z = mu + tf.exp(0.5 * logvar) * e
            logits = dec2(dec1(z))
            rec = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits), -1)
            kl = -0.5 * tf.reduce_sum(1 + logvar - tf.square(mu) - tf.exp(logvar), -1)
            loss = tf.reduce_mean(rec + kl)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, g

    hist = [step(tf.constant(x), tf.constant(eps[i])) for i in range(3)]
    mu, _ = tf.split(enc2(enc1(x)), 2, -1)
    return hist, tf.sigmoid(dec2(dec1(mu))), [layer.get_weights() for layer in layers]


@parity(modes=True, **TOL)
def test_free_bits_by_tf_maximum_on_per_dimension_kl(tf):
    """Amortised inference with free bits on a 4-D latent: the batch-mean KL per latent dimension
    floored by ``tf.maximum(kl_d, lambda)`` (the gradient of floored dimensions is zero, checked
    on the encoder's output kernel), against the plain KL; 3 SGD steps: both losses, the
    per-dimension KLs, which dimensions are floored, the gradients."""
    x = _vae_data(8, 5, 2410)
    eps = np.random.RandomState(2411).randn(3, 8, 4).astype(np.float32)
    enc = _dense_vars(tf, (5, 6, 8), 2412, 0.3)
    dec = _dense_vars(tf, (4, 6, 5), 2414, 0.4)
    vs = enc + dec
    lam = 0.25

    hist = []
    for i in range(3):
        with tf.GradientTape(persistent=True) as tape:
            mu, logvar = tf.split(_mlp(tf, enc, x, act=tf.tanh), 2, -1)
            z = mu + tf.exp(0.5 * logvar) * eps[i]
            rec = tf.reduce_mean(tf.reduce_sum(tf.square(x - _mlp(tf, dec, z, act=tf.tanh)), -1))
            kl_d = tf.reduce_mean(-0.5 * (1 + logvar - tf.square(mu) - tf.exp(logvar)), 0)
            kl_fb = tf.reduce_sum(tf.maximum(kl_d, lam))
            loss = rec + kl_fb
            plain = rec + tf.reduce_sum(kl_d)
        g = tape.gradient(loss, vs)
        g_plain = tape.gradient(plain, vs)
        g_kl = tape.gradient(kl_fb, enc[2])
        del tape
        for v, gi in zip(vs, g):
            v.assign_sub(0.05 * gi)
        hist.append((loss, plain, kl_d, kl_d < lam, g, g_plain, g_kl))
    return hist


@parity(modes=True, **TOL)
def test_dirichlet_amortised_inference_kl_by_lgamma_digamma_and_a_beta_bernoulli_evidence(tf):
    """Amortised inference for a Dirichlet posterior over 3 topic weights (a ProdLDA-like encoder
    to ``softplus`` concentrations): the exact KL between Dirichlets by ``lgamma`` / ``digamma``,
    the expected log-likelihood of bag-of-words counts under the posterior mean, 2 Adam steps
    (loss, KL, gradients); then a Beta-Bernoulli model's log evidence by ``tf.math.lbeta`` and its
    gradient w.r.t. the prior's ``softplus`` parameters."""
    rs = np.random.RandomState(2610)
    counts = rs.poisson(1.5, (5, 6)).astype(np.float32)
    enc = _dense_vars(tf, (6, 8, 3), 2611, 0.3)
    topics = tf.Variable(init_array((3, 6), 2613, 0.5))
    vs = enc + [topics]
    prior = tf.constant([0.8, 0.8, 0.8])
    opt = tf.keras.optimizers.Adam(0.05)

    def kl_dirichlet(a, b):
        a0 = tf.reduce_sum(a, -1)
        return (tf.math.lgamma(a0) - tf.reduce_sum(tf.math.lgamma(a), -1) - tf.math.lgamma(tf.reduce_sum(b))
                + tf.reduce_sum(tf.math.lgamma(b)) + tf.reduce_sum((a - b) * (tf.math.digamma(a)
                                                                   - tf.math.digamma(a0)[:, None]), -1))

    hist = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            alpha = tf.nn.softplus(_mlp(tf, enc, tf.math.log1p(counts))) + 1e-3
            theta = alpha / tf.reduce_sum(alpha, -1, keepdims=True)
            word_p = tf.matmul(theta, tf.nn.softmax(topics, -1))
            ll = tf.reduce_sum(counts * tf.math.log(word_p + 1e-8), -1)
            kl = kl_dirichlet(alpha, prior)
            loss = tf.reduce_mean(kl - ll)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((loss, kl, g))
    flips = tf.constant([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    raw = tf.Variable([0.5, -0.2])
    with tf.GradientTape() as tape:
        ab = tf.nn.softplus(raw)
        heads = tf.reduce_sum(flips)
        log_ev = tf.math.lbeta(tf.stack([ab[0] + heads, ab[1] + 7.0 - heads])) - tf.math.lbeta(ab)
    return hist, log_ev, tape.gradient(log_ev, raw)


@parity(rtol=1e-3, atol=1e-4)
def test_keras_io_vae_sampling_layer_add_loss_kl_under_fit(tf):
    """keras.io's older VAE: a functional encoder whose ``Sampling`` layer takes the noise as a
    third input (NumPy's, so both sides see it) and adds the KL by ``self.add_loss`` in ``call``,
    a functional decoder, the end-to-end ``Model`` compiled with binary cross-entropy on the
    reconstruction (``from_logits=False``, a sigmoid output) and fit for 2 epochs: the history
    (compiled loss plus the added KL), ``model.losses`` after a call, the trainable weights."""
    rs = np.random.RandomState(2620)
    x = (rs.rand(8, 6) < 0.5).astype(np.float32)
    eps = rs.randn(8, 2).astype(np.float32)

    class Sampling(tf.keras.layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var, e = inputs
            kl = -0.5 * tf.reduce_mean(tf.reduce_sum(1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var), -1))
            self.add_loss(0.5 * kl)
            return z_mean + tf.exp(0.5 * z_log_var) * e

    xin = tf.keras.Input(shape=(6,))
    ein = tf.keras.Input(shape=(2,))
    h = tf.keras.layers.Dense(5, activation="relu")(xin)
    z_mean = tf.keras.layers.Dense(2)(h)
    z_log_var = tf.keras.layers.Dense(2)(h)
    z = Sampling()([z_mean, z_log_var, ein])
    dh = tf.keras.layers.Dense(5, activation="relu")(z)
    out = tf.keras.layers.Dense(6, activation="sigmoid")(dh)
    vae = tf.keras.Model([xin, ein], out)
    rs2 = np.random.RandomState(2621)
    vae.set_weights([np.asarray(rs2.randn(*w.shape) * 0.5, np.float32) for w in vae.get_weights()])
    vae.compile(optimizer=tf.keras.optimizers.Adam(0.02), loss=tf.keras.losses.BinaryCrossentropy())
    hist = vae.fit([x, eps], x, batch_size=4, epochs=2, shuffle=False, verbose=0)
    pred = vae([x[:2], eps[:2]])
    return [float(v) for v in hist.history["loss"]], pred, [float(v) for v in vae.losses], vae.trainable_weights


@parity(modes=True, **TOL)
def test_stick_breaking_vae_kumaraswamy_posterior_and_cumprod_sticks(tf):
    """Nalisnick and Smyth's stick-breaking VAE with 3 sticks: ``softplus`` Kumaraswamy parameters
    from the encoder, ``v = (1 - u^(1/b))^(1/a)`` from NumPy uniforms, the weights by ``v *
    cumprod(1 - v, exclusive=True)`` plus the remainder, the KL to ``Beta(1, beta0)`` by its series
    (``digamma``, ``lbeta`` of ``[m / a, b]``, 10 terms); 3 Adam steps: the loss, the KL, the
    gradients, the mean stick weights."""
    rs = np.random.RandomState(2630)
    x = _vae_data(6, 5, 2631)
    u = rs.uniform(0.05, 0.95, (3, 6, 3)).astype(np.float32)
    enc = _dense_vars(tf, (5, 6, 6), 2632, 0.3)
    dec = _dense_vars(tf, (4, 6, 5), 2634, 0.4)
    vs = enc + dec
    beta0 = 2.0
    opt = tf.keras.optimizers.Adam(0.02)

    def kl_kuma_beta(a, b):
        m = tf.range(1.0, 11.0)
        lb = tf.math.lbeta(tf.stack([m / a[..., None], tf.broadcast_to(b[..., None], a.shape + (10,))], -1))
        series = tf.reduce_sum(tf.exp(lb) / (m + a[..., None] * b[..., None]), -1)
        return ((a - 1.0) / a * (-np.euler_gamma - tf.math.digamma(b) - 1.0 / b) + tf.math.log(a * b)
                + tf.math.lbeta(tf.constant([1.0, beta0])) - (b - 1.0) / b + (beta0 - 1.0) * b * series)

    hist = []
    for i in range(3):
        with tf.GradientTape() as tape:
            a, b = tf.split(tf.nn.softplus(_mlp(tf, enc, x, act=tf.tanh)) + 0.1, 2, -1)
            v = tf.pow(1.0 - tf.pow(u[i], 1.0 / b), 1.0 / a)
            rest = tf.math.cumprod(1.0 - v, axis=-1, exclusive=True)
            pi = tf.concat([v * rest, rest[:, -1:] * (1.0 - v[:, -1:])], -1)
            rec = tf.reduce_sum(tf.square(x - _mlp(tf, dec, pi, act=tf.tanh)), -1)
            kl = tf.reduce_sum(kl_kuma_beta(a, b), -1)
            loss = tf.reduce_mean(rec + kl)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((loss, tf.reduce_mean(kl), g, tf.reduce_mean(pi, 0)))
    return hist


@parity(modes=True, **TOL)
def test_kl_layer_add_loss_in_a_custom_loop_called_twice_a_step(tf):
    """A functional VAE-like model whose KL layer calls ``self.add_loss`` in ``call``, trained in a
    custom loop that calls the model twice a step (a held-out batch, then the training batch):
    ``model.losses`` holds the last call's KL only (checked by count before and after), and the
    loss ``rec + add_n(model.losses)``; 3 SGD steps: losses, the KL, gradients."""
    class KLLayer(tf.keras.layers.Layer):
        def call(self, inputs):
            mu, lv = inputs
            self.add_loss(-0.5 * tf.reduce_mean(tf.reduce_sum(1 + lv - tf.square(mu) - tf.exp(lv), -1)))
            return mu

    xin = tf.keras.Input(shape=(3,))
    h = tf.keras.layers.Dense(4)(xin)
    mu, lv = tf.keras.layers.Lambda(lambda t: tf.split(t, 2, -1))(h)
    out = tf.keras.layers.Dense(3)(KLLayer()([mu, lv]))
    model = tf.keras.Model(xin, out)
    model.set_weights([init_array(w.shape, 2640 + i, 0.5) for i, w in enumerate(model.get_weights())])
    x = np.random.RandomState(2641).randn(5, 3).astype(np.float32)
    opt = tf.keras.optimizers.SGD(0.1)
    res = []
    for _ in range(3):
        with tf.GradientTape() as t:
            model(x[:3], training=True)
            n_first = len(model.losses)
            y = model(x, training=True)
            loss = tf.reduce_mean(tf.square(y - x)) + tf.add_n(model.losses)
        g = t.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        res.append((loss, n_first, len(model.losses), model.losses[0], g))
    return res


@parity(modes=True, **TOL)
def test_heterogeneous_vae_fed_a_dict_batch_concatenated_in_the_callers_key_order(tf):
    """A VAE for mixed data (HI-VAE style): a compiled step takes the batch as a dict
    ``{"cont": .., "binary": .., "count": ..}`` and feeds the encoder ``tf.concat(list(batch.values()),
    -1)`` (the caller's key order, as TF's function body sees it), a Gaussian, a Bernoulli (from
    logits) and a Poisson (``tf.nn.log_poisson_loss``) likelihood per block; 3 Adam steps: the
    per-block log-likelihoods, the KL, gradients."""
    rs = np.random.RandomState(2650)
    batch = {"cont": rs.randn(6, 2).astype(np.float32), "binary": (rs.rand(6, 3) < 0.5).astype(np.float32),
             "count": rs.poisson(2.0, (6, 1)).astype(np.float32)}
    eps = rs.randn(3, 6, 2).astype(np.float32)
    enc = _dense_vars(tf, (6, 8, 4), 2651, 0.4)
    dec = _dense_vars(tf, (2, 8, 6), 2653, 0.4)
    vs = enc + dec
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def step(batch, e):
        with tf.GradientTape() as tape:
            mu, lv = tf.split(_mlp(tf, enc, tf.concat(list(batch.values()), -1), act=tf.tanh), 2, -1)
            z = mu + tf.exp(0.5 * lv) * e
            out = _mlp(tf, dec, z, act=tf.tanh)
            ll_cont = tf.reduce_sum(-0.5 * tf.square(batch["cont"] - out[:, :2]) - 0.5 * LOG2PI, -1)
            ll_bin = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=batch["binary"],
                                                                            logits=out[:, 2:5]), -1)
            ll_count = -tf.reduce_sum(tf.nn.log_poisson_loss(batch["count"], out[:, 5:], compute_full_loss=True), -1)
            kl = -0.5 * tf.reduce_sum(1 + lv - tf.square(mu) - tf.exp(lv), -1)
            loss = -tf.reduce_mean(ll_cont + ll_bin + ll_count - kl)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return {"loss": loss, "cont": tf.reduce_mean(ll_cont), "binary": tf.reduce_mean(ll_bin),
                "count": tf.reduce_mean(ll_count), "kl": tf.reduce_mean(kl)}, g

    hist = [step({k: tf.constant(v) for k, v in batch.items()}, tf.constant(eps[i])) for i in range(3)]
    return [(list(logs), logs, g) for logs, g in hist]
