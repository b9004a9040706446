"""Round twenty-two (a) of realistic user programs, second half: attribution methods and Bayesian
layers written by hand, run under real TensorFlow 2.21 and under tapejax with deferred execution
and predicted updates on and off (``modes=True``).

Attribution: vanilla saliency and input x gradient of per-example class scores picked by
``tf.gather(..., batch_dims=1)``, SmoothGrad by a Python loop and by one batched call, integrated
gradients by left / right Riemann sums and the trapezoid rule over a batched path, Grad-CAM and
Grad-CAM++ on an intermediate ``Conv2D`` of a small functional Keras model built with two
outputs, guided backprop by swapping the Keras ReLUs for a ``custom_gradient`` one, saliency after
replacing a softmax by ``linear`` on a called model, a DeepLIFT-like rescale rule by ``tf.custom_gradient``, and gradients through
``relu`` / ``tf.where`` / ``maximum`` / ``clip`` exactly at their kinks.  Bayesian layers: Bayes by
Backprop (``softplus(rho)``, the KL in closed form and by sampling, a scale-mixture prior), local
reparameterisation, Flipout, MC dropout through a seeded Keras ``Dropout`` with ``training=True``
(compared by statistics: tapejax's random streams differ from TF's by design, README "Semantics
worth knowing"), a deep ensemble trained in one loop, and a last-layer Laplace approximation whose
diagonal Hessian comes from nested tapes.  Noise a compared value depends on is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, keras_init, parity
from .test_user_programs22a import _mlp, _mlp_vars

TOL = dict(rtol=2e-4, atol=2e-5)


# ---------------------------------------------------------------------------
# Attribution
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_saliency_and_input_times_gradient_of_per_example_class_scores(tf):
    """Vanilla saliency (Simonyan et al.): the score of each example's predicted class, picked by
    ``tf.gather(logits, pred, batch_dims=1)`` and by a one-hot product, differentiated w.r.t. the
    watched batch; the map is ``reduce_max(abs(g), axis=-1)`` over channels of a (n, 4, 4, 2)
    image batch; input x gradient; the softmax-probability saliency, and the gradient of the
    ``argmax`` index itself (None: integer output)."""
    rs = np.random.RandomState(2401)
    x = tf.constant(rs.rand(3, 4, 4, 2).astype(np.float32))
    w = tf.Variable(init_array((32, 3), 2402))

    def model(x):
        return tf.matmul(tf.nn.softplus(tf.reshape(x, [-1, 32]) - 0.5), w)

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        logits = model(x)
        pred = tf.argmax(logits, axis=1, output_type=tf.int32)
        score = tf.gather(logits, pred, batch_dims=1)
        score2 = tf.reduce_sum(logits * tf.one_hot(pred, 3), axis=1)
        prob = tf.gather(tf.nn.softmax(logits), pred, batch_dims=1)
    g, g2, gp = tape.gradient(score, x), tape.gradient(score2, x), tape.gradient(prob, x)
    g_idx = tape.gradient(pred, x)
    del tape
    saliency = tf.reduce_max(tf.abs(g), axis=-1)
    return pred, score, g, g2, gp, saliency, x * g, g_idx


@parity(modes=True, **TOL)
def test_smoothgrad_by_a_python_loop_and_by_one_batched_call(tf):
    """SmoothGrad (Smilkov et al.): 8 noisy copies (``sigma = 0.15 * (max - min)``, NumPy noise)
    averaged in a Python loop of tapes, then the same copies as one batch (``tf.repeat`` of the
    input plus the stacked noise) under one tape with ``reshape`` back and ``reduce_mean``, and
    SmoothGrad-squared; the two averages agree with each other and with TF."""
    rs = np.random.RandomState(2411)
    x = rs.randn(2, 5).astype(np.float32)
    ws = _mlp_vars(tf, (5, 6, 3), 2412)
    sigma = 0.15 * (x.max() - x.min())
    noise = (sigma * rs.randn(8, 2, 5)).astype(np.float32)
    cls = tf.constant([1, 2])

    def score(z):
        return tf.gather(_mlp(tf, ws, z, tf.nn.elu), tf.tile(cls, [tf.shape(z)[0] // 2]), batch_dims=1)

    total = tf.zeros_like(x)
    sq = tf.zeros_like(x)
    for k in range(8):
        z = tf.constant(x + noise[k])
        with tf.GradientTape() as t:
            t.watch(z)
            s = score(z)
        gk = t.gradient(s, z)
        total += gk
        sq += tf.square(gk)
    loop = total / 8.0
    batch = tf.reshape(tf.repeat(x[None], 8, axis=0) + noise, [16, 5])
    with tf.GradientTape() as t:
        t.watch(batch)
        s = score(batch)
    gb = tf.reduce_mean(tf.reshape(t.gradient(s, batch), [8, 2, 5]), axis=0)
    return loop, sq / 8.0, gb, tf.reduce_max(tf.abs(loop - gb)) < 1e-5


@parity(modes=True, **TOL)
def test_integrated_gradients_riemann_left_right_and_trapezoid_over_a_batched_path(tf):
    """Integrated gradients (Sundararajan et al.) of a hand-written tanh MLP: the straight path
    from a zero baseline and from a "blurred" baseline (the feature mean), 16 steps interpolated as
    one batch (``alphas[:, None] * delta``), the gradients of the target-class probability by one
    tape, then the left Riemann sum, the right one and the trapezoid rule; the completeness gap
    ``sum(attr) - (F(x) - F(baseline))`` of each.  Eager and in a ``tf.function``."""
    rs = np.random.RandomState(2421)
    x = rs.rand(6).astype(np.float32)
    ws = _mlp_vars(tf, (6, 5, 3), 2422)

    def f(z):
        return tf.nn.softmax(_mlp(tf, ws, z, tf.tanh))[:, 2]

    def ig(x, baseline, m=16):
        alphas = tf.linspace(0.0, 1.0, m + 1)
        path = baseline[None] + alphas[:, None] * (x - baseline)[None]
        with tf.GradientTape() as t:
            t.watch(path)
            p = f(path)
        g = t.gradient(p, path)
        left = tf.reduce_mean(g[:-1], axis=0) * (x - baseline)
        right = tf.reduce_mean(g[1:], axis=0) * (x - baseline)
        trap = tf.reduce_mean((g[:-1] + g[1:]) / 2.0, axis=0) * (x - baseline)
        gap = f(tf.stack([x, baseline]))
        return left, right, trap, [tf.reduce_sum(a) - (gap[0] - gap[1]) for a in (left, right, trap)]

    xt = tf.constant(x)
    res = [ig(xt, b) for b in (tf.zeros(6), tf.fill([6], float(x.mean())))]
    return res, tf.function(ig)(xt, tf.zeros(6))


def _cam_model(tf, seed):
    """A functional CNN built with two outputs: the last conv block's activation and the logits."""
    layers = tf.keras.layers
    inp = tf.keras.Input((6, 6, 2))
    h = layers.Conv2D(3, 3, padding="same", activation="relu", name="conv1")(inp)
    a = layers.Conv2D(4, 3, padding="valid", activation="relu", name="conv2")(h)
    logits = layers.Dense(3, name="head")(layers.GlobalAveragePooling2D()(a))
    model = tf.keras.Model(inp, [a, logits])
    keras_init(model, seed)
    return model


@parity(modes=True, **TOL)
def test_grad_cam_and_grad_cam_plus_plus_on_a_two_output_functional_model(tf):
    """Grad-CAM on a model built with ``outputs=[conv2_activation, logits]`` (no second model):
    the gradient of the chosen class logit w.r.t. the conv activation, channel weights by spatial
    mean, ``relu`` of the weighted sum, normalised by ``reduce_max`` (guarded by ``divide_no_nan``);
    Grad-CAM++'s weights from the first gradient's powers (the exp-score closed form
    ``g^2 / (2 g^2 + sum(A) g^3)``, ``tf.where`` at a zero denominator); counterfactual maps from the
    negated gradient; a model update by the logits' cross-entropy where ``conv2``'s activation output
    gets no loss (its gradient path is the logits)."""
    model = _cam_model(tf, 2431)
    rs = np.random.RandomState(2432)
    x = tf.constant(rs.rand(2, 6, 6, 2).astype(np.float32))
    y = np.array([0, 2], np.int32)

    def cams(cls):
        with tf.GradientTape() as tape:
            acts, logits = model(x)
            score = tf.gather(logits, cls, batch_dims=1)
        g = tape.gradient(score, acts)
        weights = tf.reduce_mean(g, axis=(1, 2))
        cam = tf.nn.relu(tf.einsum("nhwc,nc->nhw", acts, weights))
        cam = tf.math.divide_no_nan(cam, tf.reduce_max(cam, axis=(1, 2), keepdims=True))
        counter = tf.nn.relu(tf.einsum("nhwc,nc->nhw", acts, -weights))
        g2, g3 = tf.square(g), g * g * g
        denom = 2.0 * g2 + tf.reduce_sum(acts, axis=(1, 2), keepdims=True) * g3
        alpha = tf.where(denom != 0.0, g2 / tf.where(denom != 0.0, denom, 1.0), 0.0)
        w_pp = tf.reduce_sum(alpha * tf.nn.relu(g), axis=(1, 2))
        cam_pp = tf.nn.relu(tf.einsum("nhwc,nc->nhw", acts, w_pp))
        return g, cam, counter, w_pp, cam_pp

    first = cams(tf.constant([1, 0]))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    with tf.GradientTape() as tape:
        acts, logits = model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return first, loss, grads, cams(tf.constant([2, 2]))


@parity(modes=True, **TOL)
def test_deeplift_rescale_rule_by_custom_gradient_on_relu(tf):
    """A DeepLIFT-like rescale rule: a ``tf.custom_gradient`` ReLU whose gradient is the multiplier
    ``(relu(x) - relu(x_ref)) / (x - x_ref)``, falling back to the ordinary derivative where
    ``|x - x_ref| < 1e-6`` (``tf.where``); the reference pre-activations come from a baseline pass
    captured by closure.  Attributions ``(x - baseline) * grad`` satisfy summation-to-delta
    exactly (returned as the gap), compared with plain gradient x input; a second hidden unit
    whose pre-activation equals its reference exercises the fallback."""
    rs = np.random.RandomState(2441)
    x = rs.randn(2, 4).astype(np.float32)
    base = np.zeros((1, 4), np.float32)
    w1 = init_array((4, 5), 2442)
    w1[:, 1] = 0.0
    b1 = np.array([0.1, -0.2, 0.0, 0.3, -0.1], np.float32)
    w2 = init_array((5, 1), 2443)

    def rescale_relu(ref):
        @tf.custom_gradient
        def op(z):
            out = tf.nn.relu(z)

            def grad(dy):
                dz = z - ref
                mult = tf.where(tf.abs(dz) < 1e-6, tf.cast(z > 0, tf.float32),
                                (out - tf.nn.relu(ref)) / tf.where(tf.abs(dz) < 1e-6, 1.0, dz))
                return dy * mult
            return out, grad
        return op

    def net(z, act):
        return tf.matmul(act(tf.matmul(z, w1) + b1), w2)

    ref = tf.matmul(tf.constant(base), w1) + b1
    xt = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(xt)
        out_dl = net(xt, rescale_relu(ref))
        out = net(xt, tf.nn.relu)
    g_dl, g = tape.gradient(out_dl, xt), tape.gradient(out, xt)
    del tape
    attr = (xt - base) * g_dl
    gap = tf.reduce_sum(attr, axis=1) - (out_dl[:, 0] - net(tf.constant(base), tf.nn.relu)[0, 0])
    return out_dl, g_dl, attr, gap, xt * g


@parity(modes=True, **TOL)
def test_attribution_gradients_exactly_at_relu_where_maximum_and_clip_kinks(tf):
    """Gradients at the kinks, where the attribution of a feature is decided by the convention:
    pre-activations built to be exactly 0 go through ``relu`` (0), ``relu6`` at 0 and at 6,
    ``tf.where(z > 0, z, 0)`` (0) and ``tf.where(z >= 0, z, 0)`` (1), ``maximum(z, 0)`` (TF gives
    the tie to the first argument), ``maximum(0, z)``, ``leaky_relu`` (alpha at 0? TF: the
    ``x > 0`` branch), ``elu`` (1 at 0), ``abs`` (0), ``clip_by_value`` at both bounds (passed
    through) and a Keras ``Dense(activation='relu')`` whose bias makes a unit exactly 0.  The
    input gradient of each and of their sum."""
    x = tf.constant([[0.0, 6.0, -1.0, 2.0], [1.0, 0.0, 6.0, -6.0]])
    dense = tf.keras.layers.Dense(2, activation="relu")
    dense.build((None, 4))
    dense.set_weights([np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]], np.float32),
                       np.array([0.0, -6.0], np.float32)])
    fns = {
        "relu": tf.nn.relu, "relu6": tf.nn.relu6,
        "where_gt": lambda z: tf.where(z > 0, z, tf.zeros_like(z)),
        "where_ge": lambda z: tf.where(z >= 0, z, tf.zeros_like(z)),
        "max_z0": lambda z: tf.maximum(z, 0.0), "max_0z": lambda z: tf.maximum(0.0, z),
        "min_z6": lambda z: tf.minimum(z, 6.0),
        "leaky": lambda z: tf.nn.leaky_relu(z, 0.1), "elu": tf.nn.elu, "abs": tf.abs,
        "clip": lambda z: tf.clip_by_value(z, 0.0, 6.0), "dense": dense,
    }
    out = {}
    for name, fn in fns.items():
        with tf.GradientTape() as t:
            t.watch(x)
            y = fn(x)
        out[name] = (y, t.gradient(y, x))
    with tf.GradientTape() as t:
        t.watch(x)
        total = tf.add_n([tf.reduce_sum(fn(x)) for fn in fns.values()])
    return out, t.gradient(total, x)


@parity(modes=True, **TOL)
def test_guided_backprop_by_swapping_keras_relu_activations_for_a_custom_gradient(tf):
    """Guided backprop and guided Grad-CAM as the widely copied TF 2 snippet writes them: the
    two-output CNN is called first (plain saliency and Grad-CAM), then every layer whose
    ``layer.activation == tf.keras.activations.relu`` gets a ``@tf.custom_gradient`` guided ReLU
    (gradient ``(dy > 0) * (x > 0) * dy``) and the input gradient is taken again; guided Grad-CAM
    multiplies it by the upsampled CAM.  The number of layers swapped is compared too (tapejax's
    layers held Keras's own ``relu``, not ``tf.keras.activations.relu``, and the swap reached a
    stale compiled call: fixed)."""
    model = _cam_model(tf, 2461)
    x = tf.constant(np.random.RandomState(2462).rand(2, 6, 6, 2).astype(np.float32))

    @tf.custom_gradient
    def guided_relu(z):
        def grad(dy):
            return tf.cast(dy > 0, tf.float32) * tf.cast(z > 0, tf.float32) * dy
        return tf.nn.relu(z), grad

    def saliency_and_cam():
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            acts, logits = model(x)
            score = logits[:, 1]
        g_x, g_a = tape.gradient(score, x), tape.gradient(score, acts)
        del tape
        cam = tf.nn.relu(tf.einsum("nhwc,nc->nhw", acts, tf.reduce_mean(g_a, axis=(1, 2))))
        return g_x, cam

    plain, cam = saliency_and_cam()
    swapped = []
    for layer in model.layers:
        if hasattr(layer, "activation") and layer.activation == tf.keras.activations.relu:
            layer.activation = guided_relu
            swapped.append(layer.name)
    guided, cam2 = saliency_and_cam()
    up = tf.image.resize(cam[..., None], [6, 6], method="bilinear")
    return swapped, plain, cam, guided, cam2, guided * up


@parity(modes=True, **TOL)
def test_saliency_after_replacing_the_softmax_by_linear_on_a_called_model(tf):
    """tf-keras-vis's ``ReplaceToLinear``: a classifier with a softmax output is trained one step
    and its probabilities read, then ``model.layers[-1].activation = tf.keras.activations.linear``
    and the saliency of the class logits is taken (eagerly and by a ``tf.function`` made after the
    swap); a tape recorded before the swap is differentiated after it (its softmax gradient, as TF's
    tape recorded it); the activation is put back and the probabilities read again."""
    rs = np.random.RandomState(2471)
    x = tf.constant(rs.randn(3, 4).astype(np.float32))
    y = np.array([0, 2, 1], np.int32)
    model = tf.keras.Sequential([tf.keras.layers.Dense(5, activation="tanh"),
                                 tf.keras.layers.Dense(3, activation="softmax")])
    model.build((None, 4))
    keras_init(model, 2472)
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    with tf.GradientTape() as tape:
        probs = model(x, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, probs))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    with tf.GradientTape() as early:
        early.watch(x)
        p1 = model(x)[:, 1]
    model.layers[-1].activation = tf.keras.activations.linear

    def saliency(x):
        with tf.GradientTape() as t:
            t.watch(x)
            z = tf.gather(model(x), y, batch_dims=1)
        return z, t.gradient(z, x)

    eager = saliency(x)
    compiled = tf.function(saliency)(x)
    g_early = early.gradient(p1, x)
    model.layers[-1].activation = tf.keras.activations.softmax
    return loss, p1, eager, compiled, g_early, model(x)


# ---------------------------------------------------------------------------
# Bayesian layers
# ---------------------------------------------------------------------------

def _normal_logpdf(tf, w, mu, sigma):
    return -0.5 * np.log(2 * np.pi).astype(np.float32) - tf.math.log(sigma) - 0.5 * tf.square((w - mu) / sigma)


@parity(modes=True, **TOL)
def test_bayes_by_backprop_closed_form_and_sampled_kl_with_a_scale_mixture_prior(tf):
    """Bayes by Backprop (Blundell et al.) for a 3-4-1 regression net: ``mu`` and ``rho`` Variables,
    ``sigma = softplus(rho)``, weights ``mu + sigma * eps`` with ``eps`` fed from NumPy (two samples
    per step); the KL to ``N(0, 1)`` in closed form (for the first layer) and by sampling
    ``log q(w) - log p(w)`` against a two-Gaussian scale-mixture prior (``reduce_logsumexp`` of the
    weighted log-densities); the ELBO per batch with the KL weight ``1 / n_batches``; Adam, three
    steps in a ``tf.function``; the gradients w.r.t. ``rho`` carry softplus' ``sigmoid``."""
    rs = np.random.RandomState(2501)
    x = rs.randn(8, 3).astype(np.float32)
    t = (x @ [[1.0], [-0.5], [0.3]] + 0.1 * rs.randn(8, 1)).astype(np.float32)
    shapes = [(3, 4), (4,), (4, 1), (1,)]
    mus = [tf.Variable(init_array(s, 2502 + i, 0.3)) for i, s in enumerate(shapes)]
    rhos = [tf.Variable(np.full(s, -3.0, np.float32) + init_array(s, 2510 + i, 0.1)) for i, s in enumerate(shapes)]
    eps = [[rs.randn(*s).astype(np.float32) for s in shapes] for _ in range(6)]
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def mixture_logprior(w):
        a = np.log(0.5).astype(np.float32) + _normal_logpdf(tf, w, 0.0, tf.constant(1.0))
        b = np.log(0.5).astype(np.float32) + _normal_logpdf(tf, w, 0.0, tf.constant(0.1))
        return tf.reduce_logsumexp(tf.stack([a, b]), axis=0)

    @tf.function
    def step(e1, e2):
        with tf.GradientTape() as tape:
            nll, kl_mc = 0.0, 0.0
            for e in (e1, e2):
                sig = [tf.math.softplus(r) for r in rhos]
                w = [m + s * n for m, s, n in zip(mus, sig, e)]
                pred = tf.matmul(tf.nn.relu(tf.matmul(x, w[0]) + w[1]), w[2]) + w[3]
                nll += 0.5 * tf.reduce_sum(tf.square(pred - t)) / 0.01 / 2.0
                kl_mc += tf.add_n([tf.reduce_sum(_normal_logpdf(tf, wi, m, s) - mixture_logprior(wi))
                                   for wi, m, s in zip(w, mus, sig)]) / 2.0
            s0 = tf.math.softplus(rhos[0])
            kl_closed = tf.reduce_sum(-tf.math.log(s0) + (tf.square(s0) + tf.square(mus[0])) / 2.0 - 0.5)
            loss = nll + kl_mc / 4.0
        g = tape.gradient(loss, mus + rhos)
        opt.apply_gradients(zip(g, mus + rhos))
        return loss, nll, kl_mc, kl_closed, g

    out = [step(eps[2 * i], eps[2 * i + 1]) for i in range(3)]
    return out, mus, rhos


@parity(modes=True, **TOL)
def test_stateless_normal_weight_noise_compared_by_its_statistics(tf):
    """Bayes-by-Backprop noise from ``tf.random.stateless_normal(seed=[step, layer])``: the draws
    are JAX's in tapejax (not TF's Philox), so the program compares what a user checks about them:
    shapes, dtypes, the same seed twice, different seeds differing, a large sample's KL estimate
    ``mean(log q - log p)`` within 0.05 of the closed form, and the reparameterised weight's
    gradient w.r.t. ``mu`` (one, independent of the draw) and the mean gradient w.r.t. ``rho``
    (close to the closed-form KL's)."""
    mu = tf.Variable([0.5, -1.0])
    rho = tf.Variable([-1.0, 0.5])
    eps = tf.random.stateless_normal([20000, 2], seed=[3, 0])
    same = tf.random.stateless_normal([20000, 2], seed=[3, 0])
    other = tf.random.stateless_normal([20000, 2], seed=[3, 1])
    with tf.GradientTape(persistent=True) as tape:
        sigma = tf.math.softplus(rho)
        w = mu + sigma * eps
        kl_mc = tf.reduce_mean(tf.reduce_sum(_normal_logpdf(tf, w, mu, sigma) - _normal_logpdf(tf, w, 0.0, 1.0), 1))
        kl = tf.reduce_sum(-tf.math.log(sigma) + (tf.square(sigma) + tf.square(mu)) / 2.0 - 0.5)
        w_sum = tf.reduce_mean(tf.reduce_sum(w, 1))
    g_mu = tape.gradient(w_sum, mu)
    g_mc, g_kl = tape.gradient(kl_mc, [mu, rho]), tape.gradient(kl, [mu, rho])
    del tape
    close = [bool(tf.reduce_all(tf.abs(a - b) < 0.05)) for a, b in zip(g_mc, g_kl)]
    return (eps.shape.as_list(), eps.dtype.name, bool(tf.reduce_all(eps == same)),
            bool(tf.reduce_any(eps != other)), bool(tf.abs(kl_mc - kl) < 0.05), kl, g_mu, g_kl, close)


@parity(modes=True, **TOL)
def test_local_reparameterisation_and_flipout_dense_layers(tf):
    """Two ways to sample a Bayesian Dense layer's output with less variance: local
    reparameterisation (Kingma et al.: ``mean = x mu``, ``var = x^2 sigma^2``, ``mean + sqrt(var +
    1e-8) * eps`` with per-example ``eps``) and Flipout (Wen et al.: ``x mu + ((x * s_in) dW) * s_out``
    with random sign vectors and ``dW = sigma * eps``), all draws fed from NumPy; a sigmoid
    cross-entropy plus the closed-form KL scaled by 1/n; SGD, three eager steps each; also the
    exact output variance of the local form against the sampled spread of 200 weight draws'
    means (a statistic)."""
    rs = np.random.RandomState(2521)
    x = rs.randn(6, 3).astype(np.float32)
    y = (rs.rand(6, 1) < 0.5).astype(np.float32)
    params = {k: (tf.Variable(init_array((3, 1), 2522, 0.5)), tf.Variable(np.full((3, 1), -2.0, np.float32)))
              for k in ("local", "flipout")}
    opts = {k: tf.keras.optimizers.legacy.SGD(0.1) for k in params}
    out = []
    for _ in range(3):
        e_out = rs.randn(6, 1).astype(np.float32)
        e_w = rs.randn(3, 1).astype(np.float32)
        s_in = np.sign(rs.randn(6, 3)).astype(np.float32)
        s_out = np.sign(rs.randn(6, 1)).astype(np.float32)
        res = []
        for k, (mu, rho) in params.items():
            with tf.GradientTape() as tape:
                sigma = tf.math.softplus(rho)
                if k == "local":
                    mean = tf.matmul(x, mu)
                    var = tf.matmul(tf.square(x), tf.square(sigma))
                    logits = mean + tf.sqrt(var + 1e-8) * e_out
                else:
                    logits = tf.matmul(x, mu) + tf.matmul(x * s_in, sigma * e_w) * s_out
                nll = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
                kl = tf.reduce_sum(-tf.math.log(sigma) + (tf.square(sigma) + tf.square(mu)) / 2.0 - 0.5)
                loss = nll + kl / 6.0
            g = tape.gradient(loss, [mu, rho])
            opts[k].apply_gradients(zip(g, [mu, rho]))
            res.append((logits, loss, g))
        out.append(res)
    mu, rho = params["local"]
    sigma = tf.math.softplus(rho)
    draws = mu[None] + sigma[None] * rs.randn(200, 3, 1).astype(np.float32)
    sampled = tf.math.reduce_variance(tf.einsum("nd,sdo->sno", x, draws), axis=0)
    exact = tf.matmul(tf.square(x), tf.square(sigma))
    return out, params, exact, bool(tf.reduce_all(tf.abs(sampled - exact) < 0.35 * exact + 1e-3))


@parity(modes=True, **TOL)
def test_mc_dropout_prediction_through_a_seeded_keras_dropout_by_its_statistics(tf):
    """MC dropout (Gal and Ghahramani): a Keras ``Dropout(0.5, seed=3)`` called with
    ``training=True`` at prediction, 100 forward passes.  The masks are the backend's (tapejax's
    differ from TF's by design), so the compared numbers are the mask-independent ones: each kept
    unit is scaled by exactly 2 (``{0, 2x}``), the keep rate within 0.1 of one half, passes
    differ, ``training=False`` is the identity, the predictive mean of a *linear* head within 15%
    of the deterministic prediction, and the gradient through one dropout pass is ``2 * mask``
    (checked against the pass's own mask)."""
    rs = np.random.RandomState(2531)
    x = tf.constant((rs.rand(4, 8) + 0.5).astype(np.float32))
    drop = tf.keras.layers.Dropout(0.5, seed=3)
    head = tf.Variable(np.abs(init_array((8, 1), 2532)) + 0.1)
    passes = tf.stack([drop(x, training=True) for _ in range(100)])
    vals_ok = bool(tf.reduce_all((passes == 0.0) | (tf.abs(passes - 2.0 * x[None]) < 1e-6)))
    keep = float(tf.reduce_mean(tf.cast(passes != 0.0, tf.float32)))
    differ = bool(tf.reduce_any(passes[0] != passes[1]))
    ident = bool(tf.reduce_all(drop(x, training=False) == x))
    preds = tf.einsum("sni,io->sno", passes, head)
    det = tf.matmul(x, head)
    mean_ok = bool(tf.reduce_all(tf.abs(tf.reduce_mean(preds, 0) - det) < 0.15 * det))
    with tf.GradientTape() as tape:
        tape.watch(x)
        d = drop(x, training=True)
        s = tf.reduce_sum(d)
    g = tape.gradient(s, x)
    grad_ok = bool(tf.reduce_all(g == 2.0 * tf.cast(d != 0.0, tf.float32)))
    return vals_ok, abs(keep - 0.5) < 0.1, differ, ident, mean_ok, grad_ok, passes.shape.as_list()


@parity(modes=True, **TOL)
def test_deep_ensemble_of_gaussian_heads_trained_in_one_loop(tf):
    """Deep ensembles (Lakshminarayanan et al.): three 1-8-2 MLPs from different seeds, each
    predicting a mean and ``softplus(.) + 1e-6`` variance, trained by one tape over the sum of
    their Gaussian NLLs with one Adam over all Variables (a compiled step); each member's batch
    is its own NumPy bootstrap resample (``tf.gather`` of indices); the mixture's mean and
    variance ``mean(var + mu^2) - mean_mu^2`` on a test grid and the members' gradients."""
    rs = np.random.RandomState(2541)
    x = np.linspace(-2, 2, 10, dtype=np.float32)[:, None]
    y = (np.sin(2 * x) + 0.1 * rs.randn(10, 1)).astype(np.float32)
    boot = np.stack([rs.randint(0, 10, 10) for _ in range(3)]).astype(np.int32)
    members = [_mlp_vars(tf, (1, 8, 2), 2542 + 3 * k) for k in range(3)]
    allv = [v for m in members for v in m]
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    def predict(ws, z):
        out = _mlp(tf, ws, z, tf.tanh)
        return out[:, :1], tf.math.softplus(out[:, 1:]) + 1e-6

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            nlls = []
            for k, ws in enumerate(members):
                xb, yb = tf.gather(x, boot[k]), tf.gather(y, boot[k])
                mu, var = predict(ws, xb)
                nlls.append(tf.reduce_mean(0.5 * tf.math.log(var) + 0.5 * tf.square(yb - mu) / var))
            loss = tf.add_n(nlls)
        g = tape.gradient(loss, allv)
        opt.apply_gradients(zip(g, allv))
        return tf.stack(nlls), g

    out = [step() for _ in range(4)]
    grid = tf.constant([[-3.0], [0.0], [1.5]])
    mus, vars_ = zip(*[predict(ws, grid) for ws in members])
    mus, vars_ = tf.stack(mus), tf.stack(vars_)
    mix_mean = tf.reduce_mean(mus, 0)
    mix_var = tf.reduce_mean(vars_ + tf.square(mus), 0) - tf.square(mix_mean)
    return out, mix_mean, mix_var, allv


@parity(modes=True, **TOL)
def test_last_layer_laplace_with_a_diagonal_hessian_by_nested_tapes(tf):
    """A last-layer Laplace approximation (Daxberger et al.) of a trained 2-5-1 classifier: the
    MAP by four Adam steps, then the diagonal of the last layer's Hessian of the negative log
    posterior by nested tapes one coordinate at a time (the outer tape differentiates the
    ``k``-th gradient entry, ``g[k, 0]``, its ``k``-th entry kept), next to the generalised
    Gauss-Newton diagonal ``sum p(1-p) phi^2`` and the full Hessian's diagonal by ``jacobian``;
    the posterior variance ``1 / (diag + prior precision)`` and the probit predictive
    ``sigmoid(mu / sqrt(1 + pi var / 8))``.  The hidden layer is tanh (features fixed)."""
    rs = np.random.RandomState(2551)
    x = rs.randn(12, 2).astype(np.float32)
    y = (x[:, :1] * x[:, 1:] > 0).astype(np.float32)
    ws = _mlp_vars(tf, (2, 5, 1), 2552)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def nlp(w_last, b_last):
        phi = tf.tanh(tf.matmul(x, ws[0]) + ws[1])
        logits = tf.matmul(phi, w_last) + b_last
        nll = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        return nll + 0.5 * tf.reduce_sum(tf.square(w_last)), phi, logits

    losses = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss, _, _ = nlp(ws[2], ws[3])
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        losses.append(loss)
    w = tf.identity(ws[2])
    diag = []
    for k in range(5):
        with tf.GradientTape() as outer:
            outer.watch(w)
            with tf.GradientTape() as inner:
                inner.watch(w)
                f, phi, logits = nlp(w, ws[3])
            gk = inner.gradient(f, w)[k, 0]
        diag.append(outer.gradient(gk, w)[k, 0])
    diag = tf.stack(diag)
    with tf.GradientTape() as outer:
        outer.watch(w)
        with tf.GradientTape() as inner:
            inner.watch(w)
            f, phi, logits = nlp(w, ws[3])
        g = inner.gradient(f, w)
    hess = tf.reshape(outer.jacobian(g, w), [5, 5])
    p = tf.sigmoid(logits)
    ggn = tf.reduce_sum(p * (1 - p) * tf.square(phi), axis=0) + 1.0
    var_w = 1.0 / diag
    xs = tf.constant([[1.0, 1.0], [1.0, -1.0], [0.1, 0.0]])
    phis = tf.tanh(tf.matmul(xs, ws[0]) + ws[1])
    mu = tf.matmul(phis, w) + ws[3]
    var = tf.matmul(tf.square(phis), var_w[:, None])
    prob = tf.sigmoid(mu / tf.sqrt(1.0 + np.pi * var / 8.0))
    return losses, diag, tf.linalg.diag_part(hess), ggn, var_w, prob
