"""Round nineteen (c), first half: diffusion models and VQ-VAEs trained as keras.io's TF-era
examples and the research repositories write them (raw ``tf`` ops, custom ``GradientTape`` loops,
steps and sampling loops under ``tf.function``), run under real TensorFlow 2.21 and under tapejax
with deferred execution and predicted updates on and off (``modes=True``).

Diffusion: DDPM with a linear beta schedule kept as NumPy constants and read by
``tf.gather(alphas_cumprod, t)`` at integer timesteps, sinusoidal timestep embeddings, epsilon- and
v-prediction with min-SNR weighting, an EMA copy of the weights ``assign``ed after each step and
used for sampling, DDPM ancestral sampling into a ``TensorArray`` and DDIM with a carried tensor
(both ``tf.range`` loops in a compiled function, ``x0`` clipped), a gradient taken through a DDIM
sampler, classifier-free guidance (null labels by a NumPy dropout mask and ``tf.where``),
classifier guidance by an inner tape on the noisy input, and self-conditioning.  VQ-VAE: nearest
codes by the expanded-square distance and ``tf.argmin`` with tied (duplicated) codebook rows, the
straight-through estimator, codebook and commitment losses, ``tf.gather`` (a sparse gradient that
legacy Adam applies row-wise) and one-hot matmul quantisation, the EMA codebook with Laplace
smoothing, dead-code restarts by ``tf.tensor_scatter_nd_update``, code perplexity and a residual
quantiser.  Score-based and energy-based programs are in ``test_user_programs19c2.py``.  Every
noise is drawn with NumPy and fed in as a tensor.
"""
import numpy as np

from .harness import init_array, keras_init, parity

LOOSE = dict(rtol=2e-4, atol=2e-5)

T = 8
BETAS = np.linspace(1e-2, 0.2, T).astype(np.float32)
ALPHAS = (1.0 - BETAS).astype(np.float32)
ACP = np.cumprod(ALPHAS).astype(np.float32)
ACP_PREV = np.concatenate([[1.0], ACP[:-1]]).astype(np.float32)
POST_VAR = (BETAS * (1.0 - ACP_PREV) / (1.0 - ACP)).astype(np.float32)


def _cosine_acp(steps, s=0.008):
    """Nichol and Dhariwal's cosine schedule's cumulative alphas (betas clipped at 0.999)."""
    f = np.cos((np.arange(steps + 1) / steps + s) / (1 + s) * np.pi / 2) ** 2
    betas = np.clip(1 - f[1:] / f[:-1], 0, 0.999)
    return np.cumprod(1 - betas).astype(np.float32)


def _temb(tf, t, dim=4):
    """The transformer-style sinusoidal embedding of integer timesteps ``t`` ([B] -> [B, dim])."""
    half = dim // 2
    freqs = tf.exp(-np.log(10000.0) * tf.range(half, dtype=tf.float32) / half)
    args = tf.cast(t, tf.float32)[:, None] * freqs[None, :]
    return tf.concat([tf.cos(args), tf.sin(args)], axis=-1)


def _net_vars(tf, dims, seed):
    d, h, o = dims
    return [tf.Variable(init_array((d, h), seed)), tf.Variable(np.zeros(h, np.float32)),
            tf.Variable(init_array((h, o), seed + 1)), tf.Variable(np.zeros(o, np.float32))]


def _net(tf, ws, x):
    return tf.matmul(tf.nn.silu(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def _eps_model(tf, ws, x, t):
    return _net(tf, ws, tf.concat([x, _temb(tf, t)], axis=-1))


def _batch(seed, n=6, d=2, steps=T):
    rs = np.random.RandomState(seed)
    x0 = np.tanh(rs.randn(n, d)).astype(np.float32)
    return x0, rs.randint(0, steps, size=n).astype(np.int32), rs.randn(n, d).astype(np.float32)


# ---------------------------------------------------------------------------
# Diffusion training
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_ddpm_epsilon_prediction_with_gathered_schedule_and_an_ema_copy(tf):
    """The DDPM training step: ``x_t = sqrt(acp[t]) x0 + sqrt(1 - acp[t]) eps`` with both
    coefficients by ``tf.gather`` of schedule constants at integer timesteps (reshaped to
    ``[B, 1]``), the epsilon-MSE, Adam in a compiled step that then moves an EMA copy by
    ``ema.assign(decay * ema + (1 - decay) * w)``; the EMA Variables are never read in the tape."""
    ws = _net_vars(tf, (6, 8, 2), 1900)
    ema = [tf.Variable(w, trainable=False) for w in ws]
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    sqrt_acp, sqrt_1m = tf.constant(np.sqrt(ACP)), tf.constant(np.sqrt(1.0 - ACP))

    @tf.function
    def train_step(x0, t, noise):
        a = tf.reshape(tf.gather(sqrt_acp, t), [-1, 1])
        s = tf.reshape(tf.gather(sqrt_1m, t), [-1, 1])
        with tf.GradientTape() as tape:
            xt = a * x0 + s * noise
            loss = tf.reduce_mean(tf.square(noise - _eps_model(tf, ws, xt, t)))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        for e, w in zip(ema, ws):
            e.assign(0.9 * e + 0.1 * w)
        return loss, g

    out = [train_step(*_batch(1901 + k)) for k in range(3)]
    return out, ws, ema


@parity(modes=True, **LOOSE)
def test_cosine_schedule_v_prediction_with_min_snr_weighting(tf):
    """v-prediction on a cosine schedule: ``v = sqrt(acp) eps - sqrt(1 - acp) x0``, the loss
    weighted per example by ``min(snr, 5) / (snr + 1)`` (min-SNR-gamma for v targets), ``snr =
    acp / (1 - acp)`` gathered; ``x0`` recovered from the v prediction with ``tf.math.rsqrt`` of
    the schedule's sum (1, written out) is logged.  Eager steps, SGD with momentum."""
    acp = _cosine_acp(T)
    ws = _net_vars(tf, (6, 8, 2), 1910)
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9)
    acp_t = tf.constant(acp)
    out = []
    for k in range(3):
        x0, t, noise = _batch(1911 + k)
        ab = tf.gather(acp_t, t)[:, None]
        snr = ab / (1.0 - ab)
        weight = tf.minimum(snr, 5.0) / (snr + 1.0)
        with tf.GradientTape() as tape:
            xt = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
            v = tf.sqrt(ab) * noise - tf.sqrt(1.0 - ab) * x0
            v_hat = _eps_model(tf, ws, xt, t)
            per = tf.reduce_mean(tf.square(v - v_hat), axis=1, keepdims=True)
            loss = tf.reduce_mean(weight * per)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        x0_hat = (tf.sqrt(ab) * xt - tf.sqrt(1.0 - ab) * v_hat) * tf.math.rsqrt(ab + (1.0 - ab))
        out.append((loss, weight, g, x0_hat))
    return out, ws


@parity(modes=True, **LOOSE)
def test_ddpm_ancestral_sampling_into_a_tensor_array_with_clipped_x0(tf):
    """DDPM sampling from trained-by-hand weights: a ``for i in tf.range(T)`` loop in a compiled
    function, ``t = T - 1 - i``, ``x0 = clip((x - sqrt(1 - acp) eps) * rsqrt(acp), -1, 1)``, the
    posterior mean from the gathered coefficients and ``sqrt(posterior variance)`` noise except at
    ``t = 0`` (``tf.where`` on the scalar), each ``x`` written to a ``TensorArray``; the noises are
    one NumPy array indexed by the loop counter."""
    rs = np.random.RandomState(1920)
    ws = _net_vars(tf, (6, 8, 2), 1921)
    x_T = rs.randn(4, 2).astype(np.float32)
    noises = rs.randn(T, 4, 2).astype(np.float32)
    c0 = tf.constant(np.sqrt(ACP_PREV) * BETAS / (1.0 - ACP))
    ct = tf.constant(np.sqrt(ALPHAS) * (1.0 - ACP_PREV) / (1.0 - ACP))
    acp, pvar = tf.constant(ACP), tf.constant(POST_VAR)

    @tf.function
    def sample(x, noises):
        ta = tf.TensorArray(tf.float32, size=T)
        for i in tf.range(T):
            t = T - 1 - i
            eps = _eps_model(tf, ws, x, tf.fill([4], t))
            ab = tf.gather(acp, t)
            x0 = tf.clip_by_value((x - tf.sqrt(1.0 - ab) * eps) * tf.math.rsqrt(ab), -1.0, 1.0)
            mean = tf.gather(c0, t) * x0 + tf.gather(ct, t) * x
            x = mean + tf.where(t > 0, tf.sqrt(tf.gather(pvar, t)), 0.0) * noises[i]
            ta = ta.write(i, x)
        return x, ta.stack()

    x, xs = sample(tf.constant(x_T), tf.constant(noises))
    return x, xs, tf.reduce_max(tf.abs(xs[-1] - x))


@parity(modes=True, **LOOSE)
def test_ddim_sampler_with_a_carried_tensor_and_a_gradient_through_it(tf):
    """Deterministic DDIM (eta 0) over the timestep subsequence ``[7, 5, 3, 1]`` with the previous
    cumulative alpha gathered from a shifted table, ``x`` carried through a ``tf.range`` loop in a
    compiled function; then a tape around the whole sampler gives the gradient of a loss on the
    final sample w.r.t. the EMA weights (DOODL-style guidance through the sampler), and one SGD
    step on those weights."""
    rs = np.random.RandomState(1930)
    ws = [tf.Variable(v, trainable=False) for v in _net_vars(tf, (6, 8, 2), 1931)]
    x_T = tf.constant(rs.randn(3, 2).astype(np.float32))
    seq = tf.constant([7, 5, 3, 1])
    prev = tf.constant([5, 3, 1, -1])
    acp = tf.constant(ACP)
    target = tf.constant([[0.5, -0.5]])

    def ddim(x):
        for i in tf.range(4):
            t, tp = seq[i], prev[i]
            ab = tf.gather(acp, t)
            ab_prev = tf.where(tp >= 0, tf.gather(acp, tf.maximum(tp, 0)), 1.0)
            eps = _eps_model(tf, ws, x, tf.fill([3], t))
            x0 = tf.clip_by_value((x - tf.sqrt(1.0 - ab) * eps) / tf.sqrt(ab), -1.0, 1.0)
            x = tf.sqrt(ab_prev) * x0 + tf.sqrt(1.0 - ab_prev) * eps
        return x

    @tf.function
    def guided_step():
        with tf.GradientTape() as tape:
            tape.watch(ws)
            x = ddim(x_T)
            loss = tf.reduce_mean(tf.square(x - target))
        g = tape.gradient(loss, ws)
        for w, gi in zip(ws, g):
            w.assign_sub(0.1 * gi)
        return x, loss, g

    return [guided_step() for _ in range(2)], tf.function(ddim)(x_T), ws


@parity(modes=True, **LOOSE)
def test_classifier_free_guidance_with_a_numpy_null_label_dropout(tf):
    """Classifier-free guidance: a label-embedding table with a null row (index ``n_classes``) read
    by ``tf.gather``; during training a NumPy mask drops labels to the null class by ``tf.where``;
    compiled Adam steps; then guided epsilon ``(1 + w) eps(x, y) - w eps(x, null)`` evaluated in
    one doubled batch (``tf.concat``, ``tf.split``) inside a compiled 3-step DDIM loop."""
    n_cls = 3
    emb = tf.Variable(init_array((n_cls + 1, 2), 1940))
    ws = _net_vars(tf, (8, 8, 2), 1941)
    opt = tf.keras.optimizers.legacy.Adam(0.03)
    acp = tf.constant(ACP)

    def model(x, t, y):
        return _net(tf, ws, tf.concat([x, _temb(tf, t), tf.gather(emb, y)], axis=-1))

    @tf.function
    def train_step(x0, t, noise, y, drop):
        y = tf.where(drop, n_cls, y)
        ab = tf.gather(acp, t)[:, None]
        with tf.GradientTape() as tape:
            xt = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
            loss = tf.reduce_mean(tf.square(noise - model(xt, t, y)))
        g = tape.gradient(loss, [emb] + ws)
        opt.apply_gradients(zip(g, [emb] + ws))
        return loss, g, y

    rs = np.random.RandomState(1942)
    out = []
    for k in range(3):
        x0, t, noise = _batch(1943 + k)
        y = rs.randint(0, n_cls, size=6).astype(np.int32)
        out.append(train_step(x0, t, noise, y, rs.uniform(size=6) < 0.3))

    @tf.function
    def guided_sample(x, y, w):
        for t in tf.constant([7, 4, 1]):
            ab = tf.gather(acp, t)
            ab_prev = tf.gather(acp, tf.maximum(t - 3, 0))
            eps_c, eps_u = tf.split(model(tf.concat([x, x], 0), tf.fill([4], t),
                                          tf.concat([y, tf.fill([2], n_cls)], 0)), 2)
            eps = (1.0 + w) * eps_c - w * eps_u
            x0 = (x - tf.sqrt(1.0 - ab) * eps) / tf.sqrt(ab)
            x = tf.sqrt(ab_prev) * x0 + tf.sqrt(1.0 - ab_prev) * eps
        return x

    x_T = tf.constant(rs.randn(2, 2).astype(np.float32))
    return out, emb, ws, [guided_sample(x_T, tf.constant([0, 2]), w) for w in (0.0, 2.0)]


@parity(modes=True, **LOOSE)
def test_classifier_guidance_by_an_inner_tape_on_the_noisy_input(tf):
    """Classifier guidance (Dhariwal and Nichol): a noisy classifier ``p(y | x_t, t)`` is trained
    two steps, then in a compiled DDIM loop each step opens a tape watching ``x_t`` for
    ``grad log softmax(logits)[y]`` and shifts epsilon by ``-sqrt(1 - acp) * s * grad``; the
    classifier's Variables are not watched by that tape.  Also the gradient's value at the start."""
    cls = _net_vars(tf, (6, 5, 3), 1950)
    den = _net_vars(tf, (6, 8, 2), 1952)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    acp = tf.constant(ACP)
    rs = np.random.RandomState(1954)
    out = []
    for k in range(2):
        x0, t, noise = _batch(1955 + k)
        y = rs.randint(0, 3, size=6)
        ab = tf.gather(acp, t)[:, None]
        with tf.GradientTape() as tape:
            logits = _eps_model(tf, cls, tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise, t)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g = tape.gradient(loss, cls)
        opt.apply_gradients(zip(g, cls))
        out.append((loss, g))

    def cond_grad(x, t, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            logp = tf.nn.log_softmax(_eps_model(tf, cls, x, t))
            sel = tf.reduce_sum(tf.gather(logp, y, batch_dims=1))
        return tape.gradient(sel, x), len(tape.watched_variables())

    @tf.function
    def sample(x, y, scale):
        for t in tf.constant([7, 5, 3, 1]):
            tb = tf.fill([3], t)
            ab = tf.gather(acp, t)
            ab_prev = tf.where(t >= 2, tf.gather(acp, tf.maximum(t - 2, 0)), 1.0)
            grad, _ = cond_grad(x, tb, y)
            eps = _eps_model(tf, den, x, tb) - tf.sqrt(1.0 - ab) * scale * grad
            x0 = (x - tf.sqrt(1.0 - ab) * eps) / tf.sqrt(ab)
            x = tf.sqrt(ab_prev) * x0 + tf.sqrt(1.0 - ab_prev) * eps
        return x

    x_T = tf.constant(rs.randn(3, 2).astype(np.float32))
    y = tf.constant([0, 1, 2])
    return out, cond_grad(x_T, tf.fill([3], 7), y), [sample(x_T, y, s) for s in (0.0, 3.0)]


@parity(modes=True, **LOOSE)
def test_self_conditioning_with_a_stop_gradient_first_pass(tf):
    """Self-conditioning (Chen et al.'s analog bits): on the examples a NumPy mask selects, a
    first pass with a zero condition predicts ``x0`` under ``tf.stop_gradient``; the second pass
    takes it as an extra input (``tf.where`` on the mask, zeros elsewhere) and is trained on the
    x0-MSE.  The same step with the first pass not stopped is logged for its different gradient."""
    ws = _net_vars(tf, (8, 8, 2), 1960)
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    acp = tf.constant(ACP)
    rs = np.random.RandomState(1962)

    def model(xt, t, cond):
        return _net(tf, ws, tf.concat([xt, cond, _temb(tf, t)], axis=-1))

    @tf.function
    def step(x0, t, noise, use, stop):
        ab = tf.gather(acp, t)[:, None]
        xt = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
        with tf.GradientTape() as tape:
            first = model(xt, t, tf.zeros_like(xt))
            first = tf.stop_gradient(first) if stop else first
            cond = tf.where(use[:, None], first, tf.zeros_like(first))
            loss = tf.reduce_mean(tf.square(model(xt, t, cond) - x0))
        return loss, tape.gradient(loss, ws)

    out = []
    for k in range(3):
        batch = _batch(1963 + k)
        use = rs.uniform(size=6) < 0.5
        loss, g = step(*batch, use, True)
        loss2, g2 = step(*batch, use, False)
        opt.apply_gradients(zip(g, ws))
        out.append((loss, g, loss2, g2))
    return out, ws


@parity(**LOOSE)
def test_keras_denoiser_with_an_ema_model_made_by_clone_and_set_weights(tf):
    """A Keras denoiser as keras.io's DDIM example keeps it: ``ema_network`` a
    ``tf.keras.models.clone_model`` of the network given its weights, moved after each compiled
    step by ``ema_w.assign(0.8 * ema_w + 0.2 * w)`` over ``zip(network.weights,
    ema_network.weights)``; the sinusoidal embedding enters through a ``Concatenate`` of the
    functional model's two inputs; denoised predictions of both networks compared."""
    xin, tin = tf.keras.Input((2,)), tf.keras.Input((4,))
    h = tf.keras.layers.Concatenate()([xin, tin])
    h = tf.keras.layers.Dense(8, activation="swish")(h)
    network = tf.keras.Model([xin, tin], tf.keras.layers.Dense(2)(h))
    keras_init(network, 1970)
    ema_network = tf.keras.models.clone_model(network)
    ema_network.set_weights(network.get_weights())
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    acp = tf.constant(ACP)

    @tf.function
    def train_step(x0, t, noise):
        ab = tf.gather(acp, t)[:, None]
        xt = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.abs(noise - network([xt, _temb(tf, t)], training=True)))
        g = tape.gradient(loss, network.trainable_weights)
        opt.apply_gradients(zip(g, network.trainable_weights))
        for w, ema_w in zip(network.weights, ema_network.weights):
            ema_w.assign(0.8 * ema_w + 0.2 * w)
        return loss, g

    out = [train_step(*_batch(1971 + k)) for k in range(3)]
    x0, t, _ = _batch(1975)
    inputs = [tf.constant(x0), _temb(tf, tf.constant(t))]
    return out, network.get_weights(), ema_network.get_weights(), network(inputs), ema_network(inputs)


@parity(modes=True, **LOOSE)
def test_ddpm_with_tf_train_exponential_moving_average_swapped_in_for_sampling(tf):
    """The original DDPM code's EMA: ``tf.train.ExponentialMovingAverage(0.9).apply(ws)`` after
    each compiled Adam step (shadows made on the first call, from the values before it), then the
    evaluation swaps the averages in by ``assign`` (a backup kept), takes one denoising
    prediction and swaps back.  The two layers' weights share the names ``kernel`` / ``bias`` and
    ``apply`` runs in a ``name_scope``: the shadows' names (without TF's process-dependent
    ``_<n>``) are ``kernel/ExponentialMovingAverage`` ..., four distinct ones."""
    init = _net_vars(tf, (6, 8, 2), 1980)
    ws = [tf.Variable(v, name=n) for v, n in zip(init, ["kernel", "bias"] * 2)]
    ema = tf.train.ExponentialMovingAverage(0.9)
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    acp = tf.constant(ACP)

    @tf.function
    def train_step(x0, t, noise):
        ab = tf.gather(acp, t)[:, None]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(noise - _eps_model(tf, ws, tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise, t)))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        with tf.name_scope("train"):
            ema.apply(ws)
        return loss

    losses = [train_step(*_batch(1981 + k)) for k in range(3)]
    x0, t, _ = _batch(1985)
    backup = [tf.identity(w) for w in ws]
    for w in ws:
        w.assign(ema.average(w))
    pred_ema = _eps_model(tf, ws, x0, t)
    for w, b in zip(ws, backup):
        w.assign(b)
    names = [ema.average_name(w) for w in ws]
    return (losses, pred_ema, _eps_model(tf, ws, x0, t), ws, [ema.average(w) for w in ws], len(set(names)),
            [n.rsplit("_", 1)[0] if n[-1].isdigit() else n for n in names])


# ---------------------------------------------------------------------------
# VQ-VAE
# ---------------------------------------------------------------------------

def _codes(tf, z, codebook):
    """Nearest codebook rows by the expanded squared distance and ``tf.argmin`` (first on ties)."""
    d = (tf.reduce_sum(z ** 2, axis=1, keepdims=True) - 2.0 * tf.matmul(z, codebook, transpose_b=True)
         + tf.reduce_sum(codebook ** 2, axis=1))
    return tf.argmin(d, axis=1), d


def _vq_setup(tf, seed, k=5, d=2):
    rs = np.random.RandomState(seed)
    book = rs.randn(k, d).astype(np.float32)
    book[3] = book[1]  # a duplicated code: argmin's tie goes to index 1
    return (rs.randn(8, 3).astype(np.float32), tf.Variable(init_array((3, d), seed + 1)),
            tf.Variable(book), tf.Variable(init_array((d, 3), seed + 2)))


@parity(modes=True, x64=True, **LOOSE)
def test_vq_vae_straight_through_with_gather_and_tied_codes_under_sparse_adam(tf):
    """keras.io's VQ-VAE quantiser on raw ops: codes by ``argmin`` (a duplicated codebook row, so
    ties pick the first), ``q = tf.gather(codebook, idx)``, the codebook loss ``|sg(z) - q|^2``,
    commitment ``0.25 |z - sg(q)|^2`` and the straight-through ``z + sg(q - z)`` into the decoder.
    The codebook's gradient is an ``IndexedSlices`` that legacy Adam applies sparsely (untouched
    rows keep their moments); eager and compiled steps alternate."""
    x, enc, book, dec = _vq_setup(tf, 1980)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def step(x):
        with tf.GradientTape() as tape:
            z = tf.matmul(x, enc)
            idx, _ = _codes(tf, z, book)
            q = tf.gather(book, idx)
            codebook_loss = tf.reduce_mean(tf.square(tf.stop_gradient(z) - q))
            commit = tf.reduce_mean(tf.square(z - tf.stop_gradient(q)))
            recon = tf.reduce_mean(tf.square(tf.matmul(z + tf.stop_gradient(q - z), dec) - x))
            loss = recon + codebook_loss + 0.25 * commit
        g = tape.gradient(loss, [enc, book, dec])
        opt.apply_gradients(zip(g, [enc, book, dec]))
        return loss, recon, idx, g

    compiled = tf.function(step)
    out = [(compiled if k % 2 else step)(x) for k in range(4)]
    return out, [type(o[3][1]).__name__ for o in out], enc, book, dec


@parity(modes=True, **LOOSE)
def test_vq_one_hot_matmul_quantisation_and_code_perplexity(tf):
    """Sonnet's VectorQuantizer form: ``encodings = tf.one_hot(argmin, K)``, ``q = encodings @
    codebook`` (a dense codebook gradient), the straight-through estimator and the perplexity
    ``exp(-sum(p log(p + 1e-10)))`` of the mean encodings, with unused codes (p = 0); compiled
    RMSprop steps and the per-step code histogram."""
    x, enc, book, dec = _vq_setup(tf, 1990, k=6)
    opt = tf.keras.optimizers.legacy.RMSprop(0.02)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            z = tf.matmul(x, enc)
            idx, dist = _codes(tf, z, book)
            enc_1h = tf.one_hot(idx, 6)
            q = tf.matmul(enc_1h, book)
            vq_loss = tf.reduce_mean((tf.stop_gradient(z) - q) ** 2) + 0.25 * tf.reduce_mean(
                (z - tf.stop_gradient(q)) ** 2)
            loss = tf.reduce_mean((tf.matmul(z + tf.stop_gradient(q - z), dec) - x) ** 2) + vq_loss
        g = tape.gradient(loss, [enc, book, dec])
        opt.apply_gradients(zip(g, [enc, book, dec]))
        p = tf.reduce_mean(enc_1h, axis=0)
        return loss, g, tf.exp(-tf.reduce_sum(p * tf.math.log(p + 1e-10))), p, tf.reduce_min(dist, axis=1)

    return [step(x) for _ in range(3)], enc, book, dec


@parity(modes=True, x64=True, **LOOSE)
def test_vq_ema_codebook_with_laplace_smoothing_in_a_compiled_step(tf):
    """The EMA codebook (VQ-VAE-2 / Sonnet's VectorQuantizerEMA): cluster sizes and code sums are
    non-trainable Variables updated by ``assign`` with decay 0.8 from the batch's one-hot
    counts and ``encodings^T z``; Laplace smoothing ``(n_k + eps) / (n + K eps) * n`` and the
    codebook ``assign``ed their ratio; only the commitment loss trains the encoder (the codebook is
    read under no gradient and is not in the list)."""
    x, enc, book, dec = _vq_setup(tf, 2000)
    book = tf.Variable(book, trainable=False)
    cluster = tf.Variable(tf.zeros([5]), trainable=False)
    sums = tf.Variable(book, trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            z = tf.matmul(x, enc)
            idx, _ = _codes(tf, z, book)
            onehot = tf.one_hot(idx, 5)
            q = tf.matmul(onehot, book)
            loss = tf.reduce_mean((tf.matmul(z + tf.stop_gradient(q - z), dec) - x) ** 2) + 0.25 * tf.reduce_mean(
                (z - tf.stop_gradient(q)) ** 2)
        g = tape.gradient(loss, [enc, dec, book])
        opt.apply_gradients(zip(g[:2], [enc, dec]))
        cluster.assign(0.8 * cluster + 0.2 * tf.reduce_sum(onehot, axis=0))
        sums.assign(0.8 * sums + 0.2 * tf.matmul(onehot, z, transpose_a=True))
        n = tf.reduce_sum(cluster)
        smoothed = (cluster + 1e-5) / (n + 5 * 1e-5) * n
        book.assign(sums / smoothed[:, None])
        return loss, g[:2], g[2] is None, idx, smoothed

    return [step(x) for _ in range(3)], enc, dec, book, cluster, sums


@parity(modes=True, x64=True, **LOOSE)
def test_vq_dead_code_restart_by_tensor_scatter_nd_update(tf):
    """Dead-code restarts (Jukebox / SoundStream): after each step the usage counts by
    ``tf.math.unsorted_segment_sum``; eagerly the dead codes' indices come from ``tf.where(counts
    == 0)`` and the codebook is ``assign``ed ``tf.tensor_scatter_nd_update(codebook, idx,
    encoder outputs picked by NumPy indices)``; a compiled twin replaces dead rows by ``tf.where``
    on the mask from a fixed-size candidate batch.  Both codebooks and the number restarted."""
    x, enc, book, dec = _vq_setup(tf, 2010, k=6)
    book2 = tf.Variable(book)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    rs = np.random.RandomState(2013)
    picks = np.stack([rs.permutation(8)[:6] for _ in range(3)])
    jitter = (0.01 * rs.randn(3, 6, 2)).astype(np.float32)  # (a restarted code never equals an output:
    # TF's matmul rounds equal codebook rows differently by column, so exact ties are no oracle)

    def train(book, x):
        with tf.GradientTape() as tape:
            z = tf.matmul(x, enc)
            idx, _ = _codes(tf, z, book)
            q = tf.gather(book, idx)
            loss = tf.reduce_mean((tf.stop_gradient(z) - q) ** 2) + tf.reduce_mean(
                (tf.matmul(z + tf.stop_gradient(q - z), dec) - x) ** 2)
        g = tape.gradient(loss, [book])
        opt.apply_gradients(zip(g, [book]))
        return z, idx, loss

    @tf.function
    def compiled_restart(z, idx, pick, jit):
        counts = tf.math.unsorted_segment_sum(tf.ones_like(idx, tf.float32), idx, 6)
        book2.assign(tf.where((counts == 0)[:, None], tf.gather(z, pick) + jit, book2))
        return counts

    out = []
    for k in range(3):
        z, idx, loss = train(book, x)
        counts = tf.math.unsorted_segment_sum(tf.ones_like(idx, tf.float32), idx, 6)
        dead = tf.where(counts == 0)
        n_dead = int(tf.shape(dead)[0])
        book.assign(tf.tensor_scatter_nd_update(book, dead, tf.gather(z, picks[k][:n_dead]) + jitter[k][:n_dead]))
        z2, idx2, loss2 = train(book2, x)
        out.append((loss, idx, counts, dead, n_dead, loss2, compiled_restart(z2, idx2, picks[k], jitter[k])))
    return out, book, book2


@parity(modes=True, x64=True, **LOOSE)
def test_residual_vector_quantiser_with_two_stages(tf):
    """Residual VQ (SoundStream): the second codebook quantises the first stage's residual
    ``z - q1`` (each stage by ``argmin`` and ``gather``), the quantised output is ``q1 + q2`` with
    one straight-through estimator around the sum, each stage's codebook loss against its own
    stopped input; compiled Adam steps, both codebooks' gradients and the per-stage codes."""
    x, enc, book1, dec = _vq_setup(tf, 2020)
    book2 = tf.Variable(0.3 * init_array((5, 2), 2024))
    ws = [enc, book1, book2, dec]
    opt = tf.keras.optimizers.legacy.Adam(0.04)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            z = tf.matmul(x, enc)
            i1, _ = _codes(tf, z, book1)
            q1 = tf.gather(book1, i1)
            r = z - tf.stop_gradient(q1)
            i2, _ = _codes(tf, r, book2)
            q2 = tf.gather(book2, i2)
            q = q1 + q2
            cb = tf.reduce_mean((tf.stop_gradient(z) - q1) ** 2) + tf.reduce_mean((tf.stop_gradient(r) - q2) ** 2)
            loss = tf.reduce_mean((tf.matmul(z + tf.stop_gradient(q - z), dec) - x) ** 2) + cb + 0.25 * tf.reduce_mean(
                (z - tf.stop_gradient(q)) ** 2)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, cb, i1, i2, g

    return [step(x) for _ in range(3)], ws
