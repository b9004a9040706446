"""Round twenty-four (c): classical machine learning and statistics ported to TF2 ops, each
run under real TensorFlow 2.21 and under tapejax.

t-SNE (each row's Gaussian precision found by bisection on the perplexity in a converted
``while`` loop, the KL gradient by the tape against the closed form, early exaggeration and
momentum), Cox proportional hazards (Breslow's partial likelihood with tied times by
``cumulative_logsumexp`` over the times sorted in descending order, the tie groups' last risk set
by ``unsorted_segment_min``, fitted by Newton in float64), GLMs fitted by IRLS with
``tf.linalg.solve`` (logistic, Poisson) and by Adam (gamma and Tweedie deviances, ``xlogy`` at
``y = 0``), quantile (pinball by ``maximum`` at residual 0) and expectile regression, an
ordinal regression with cumulative logits and thresholds kept ordered by ``cumsum(softplus)``,
pandas-style group statistics (``tf.unique`` of codes with NaN, each NaN a group of its own as
TF's ``==``; ``segment_sum``'s sorted ids), a float64 ridge path whose penalties are made by
``tf.cast`` of Python floats (float32 first, as TF converts them), and statistics written as
Python lists next to float64, float32 and float16 tensors (each list takes the tensor's dtype; a
Python float alone is float32).  Noise is NumPy's, fed in.
"""
import numpy as np

from .harness import init_array, parity, raises

TOL = dict(rtol=2e-4, atol=2e-5)
LOOSE = dict(rtol=1e-3, atol=1e-4)

# ---------------------------------------------------------------------------
# t-SNE
# ---------------------------------------------------------------------------


def _sq_dists(tf, x):
    s = tf.reduce_sum(tf.square(x), 1)
    return tf.maximum(s[:, None] + s[None, :] - 2.0 * tf.matmul(x, x, transpose_b=True), 0.0)


@parity(modes=True, **LOOSE)
def test_tsne_perplexity_bisection_kl_gradient_and_early_exaggeration(tf):
    """t-SNE on 8 points in 4-D: each row's precision ``beta`` found by 30 bisection steps on
    the entropy in a compiled ``while`` loop (vectorised over rows, the diagonal masked), the
    symmetrised ``P``; the KL's gradient by the tape against the closed form
    ``4 sum_j (p_ij - q_ij)(y_i - y_j)/(1 + d_ij)``; 4 momentum steps with early exaggeration 4
    for the first two: the betas, the entropies, the KLs and the embedding."""
    rs = np.random.RandomState(2401)
    x = rs.randn(8, 4).astype(np.float32)
    y0 = (rs.randn(8, 2) * 1e-1).astype(np.float32)
    n = 8
    target = np.log(3.0).astype(np.float32)  # perplexity 3
    mask = 1.0 - tf.eye(n)

    @tf.function
    def calibrate(d):
        lo = tf.zeros([n])
        hi = tf.fill([n], 1e3)
        beta = tf.ones([n])
        i = tf.constant(0)
        while i < 30:
            logits = -d * beta[:, None]
            logits = logits - 1e9 * (1.0 - mask)
            p = tf.nn.softmax(logits, axis=1)
            h = -tf.reduce_sum(tf.math.xlogy(p, p), 1)
            too_flat = h > target
            lo = tf.where(too_flat, beta, lo)
            hi = tf.where(too_flat, hi, beta)
            beta = (lo + hi) / 2.0
            i += 1
        return beta, p, h

    d = _sq_dists(tf, tf.constant(x))
    beta, p_cond, h = calibrate(d)
    p = (p_cond + tf.transpose(p_cond)) / (2.0 * n)
    y = tf.Variable(y0)
    vel = tf.zeros_like(y0)
    out = []
    for step in range(4):
        exag = 4.0 if step < 2 else 1.0
        with tf.GradientTape() as tape:
            num = mask / (1.0 + _sq_dists(tf, y))
            q = num / tf.reduce_sum(num)
            pe = exag * p
            kl = tf.reduce_sum(tf.math.xlogy(pe, pe) - tf.math.xlogy(pe, q + 1e-12))
        g = tape.gradient(kl, y)
        diff = y[:, None, :] - y[None, :, :]
        closed = 4.0 * tf.reduce_sum(((pe - exag * q) * num)[:, :, None] * diff, 1)
        vel = 0.5 * vel - 20.0 * g
        y.assign_add(vel)
        out.append((kl, g, g - closed))
    return beta, h, out, y


# ---------------------------------------------------------------------------
# Cox proportional hazards
# ---------------------------------------------------------------------------


def _cox_breslow(tf, eta, times_desc_idx, event, group, n_groups):
    """Breslow's negative log partial likelihood; the data sorted by time descending, each
    tie group's risk set the cumulative log-sum-exp at the group's last member."""
    e = tf.gather(eta, times_desc_idx)
    ev = tf.gather(event, times_desc_idx)
    g = tf.gather(group, times_desc_idx)
    cum = tf.math.cumulative_logsumexp(e)
    # the last position of each tie group in descending order holds its whole risk set
    pos = tf.range(tf.shape(e)[0])
    last = tf.math.unsorted_segment_max(pos, g, n_groups)
    risk = tf.gather(cum, tf.gather(last, g))
    return -tf.reduce_sum(ev * (e - risk))


@parity(x64=True, **TOL)
def test_cox_proportional_hazards_breslow_ties_fitted_by_newton_in_float64(tf):
    """A Cox model on 10 subjects with tied times (three at 2.0, two at 5.0) and censoring:
    the times sorted descending by ``argsort(..., stable=True)``, Breslow's risk sets by
    ``cumulative_logsumexp`` read at each tie group's last member; 4 Newton steps in float64
    in a ``tf.function``, the Hessian by ``tape.jacobian`` of the gradient and ``tf.linalg.solve``: the negative
    log partial likelihoods, gradients, coefficients, and the order of the tied indices."""
    rs = np.random.RandomState(2410)
    x = rs.randn(10, 2)
    times = np.array([2.0, 5.0, 1.0, 2.0, 7.0, 5.0, 3.0, 2.0, 9.0, 4.0])
    event = np.array([1, 1, 0, 1, 1, 0, 1, 1, 0, 1], np.float64)
    t = tf.constant(times, tf.float64)
    order = tf.argsort(t, direction="DESCENDING", stable=True)
    uniq, group = tf.unique(-tf.gather(t, order))
    # groups are numbered in sorted order; map back to the original subjects
    group_orig = tf.scatter_nd(order[:, None], group, [10])
    beta = tf.Variable(np.zeros(2), dtype=tf.float64)
    xt = tf.constant(x)
    ev = tf.constant(event)

    @tf.function
    def newton_step():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                nll = _cox_breslow(tf, tf.linalg.matvec(xt, beta), order, ev, group_orig, 7)
            g = inner.gradient(nll, beta)
        h = outer.jacobian(g, beta)
        beta.assign_sub(tf.linalg.solve(h, g[:, None])[:, 0])
        return nll, g, h

    hist = [newton_step() for _ in range(4)]
    return order, uniq, group_orig, hist, beta


@parity(modes=True, **TOL)
def test_cox_efron_ties_by_adam_in_a_compiled_step(tf):
    """Efron's correction for ties, written with segment sums: for a tie group of ``d`` events
    the ``l``-th term subtracts ``l/d`` of the events' summed hazard from the risk set's sum;
    a linear risk score fitted by 5 Adam steps in a ``tf.function``: losses and gradients."""
    rs = np.random.RandomState(2411)
    x = rs.randn(9, 3).astype(np.float32)
    times = np.array([3.0, 1.0, 3.0, 2.0, 3.0, 5.0, 2.0, 4.0, 1.0], np.float32)
    event = np.array([1, 1, 1, 0, 1, 1, 1, 0, 1], np.float32)
    # host-side bookkeeping, as users do with NumPy
    uniq = np.unique(times[event == 1])
    w = tf.Variable(init_array((3,), 2412, 0.3))
    opt = tf.keras.optimizers.Adam(0.1)
    at_risk = (times[None, :] >= uniq[:, None]).astype(np.float32)          # [G, N]
    is_event = ((times[None, :] == uniq[:, None]) & (event[None, :] == 1)).astype(np.float32)
    d = is_event.sum(1)
    dmax = int(d.max())
    ls = np.arange(dmax, dtype=np.float32)
    lmask = (ls[None, :] < d[:, None]).astype(np.float32)                   # [G, dmax]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            eta = tf.linalg.matvec(tf.constant(x), w)
            r = tf.exp(eta)
            risk = tf.linalg.matvec(at_risk, r)
            tied = tf.linalg.matvec(is_event, r)
            frac = ls[None, :] / tf.maximum(d, 1.0)[:, None]
            denom = risk[:, None] - frac * tied[:, None]
            ll = tf.reduce_sum(tf.linalg.matvec(is_event, eta)) - tf.reduce_sum(lmask * tf.math.log(denom))
            loss = -ll
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return loss, g

    return [step() for _ in range(5)], w


# ---------------------------------------------------------------------------
# GLMs
# ---------------------------------------------------------------------------


@parity(x64=True, **TOL)
def test_logistic_regression_by_irls_in_float64_against_the_tape_gradient(tf):
    """Logistic regression by IRLS in float64: ``W = p(1-p)``, the working response, the normal
    equations ``X^T W X beta = X^T W z`` by ``tf.linalg.solve``; 5 iterations, each checked
    against the tape's gradient of the mean log-loss (zero at the end) and the deviance by
    ``sigmoid_cross_entropy_with_logits``: coefficients, deviances, gradient norms."""
    rs = np.random.RandomState(2420)
    x = np.concatenate([np.ones((20, 1)), rs.randn(20, 2)], 1)
    yv = (rs.rand(20) < 1 / (1 + np.exp(-(x @ [0.3, 1.0, -0.8])))).astype(np.float64)
    xt, yt = tf.constant(x), tf.constant(yv)
    beta = tf.zeros([3], tf.float64)
    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            tape.watch(beta)
            eta = tf.linalg.matvec(xt, beta)
            dev = 2.0 * tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=yt, logits=eta))
        g = tape.gradient(dev, beta)
        p = tf.sigmoid(eta)
        w = p * (1.0 - p)
        z = eta + (yt - p) / w
        xtw = tf.transpose(xt) * w[None, :]
        beta = tf.linalg.solve(tf.matmul(xtw, xt), tf.linalg.matvec(xtw, z)[:, None])[:, 0]
        out.append((dev, tf.norm(g)))
    return out, beta


@parity(x64=True, **TOL)
def test_poisson_glm_irls_and_deviance_with_zero_counts(tf):
    """A Poisson GLM with log link and an exposure offset, counts with zeros: IRLS by
    ``tf.linalg.solve`` for 6 iterations; the deviance ``2 sum(xlogy(y, y/mu) - (y - mu))`` (0
    at ``y = 0``, no NaN) and its gradient w.r.t. ``mu`` (finite at ``y = 0``); ``log(y)`` at 0 as
    TF gives it, ``-inf``."""
    rs = np.random.RandomState(2421)
    x = np.concatenate([np.ones((16, 1)), rs.randn(16, 2) * 0.5], 1)
    expo = rs.uniform(0.5, 2.0, 16)
    yv = rs.poisson(expo * np.exp(x @ [0.2, 0.5, -0.4])).astype(np.float64)
    yv[:3] = 0.0
    xt, yt, off = tf.constant(x), tf.constant(yv), tf.math.log(tf.constant(expo))
    beta = tf.zeros([3], tf.float64)
    devs = []
    for _ in range(6):
        eta = tf.linalg.matvec(xt, beta) + off
        mu = tf.exp(eta)
        z = eta - off + (yt - mu) / mu
        xtw = tf.transpose(xt) * mu[None, :]
        beta = tf.linalg.solve(tf.matmul(xtw, xt), tf.linalg.matvec(xtw, z)[:, None])[:, 0]
        devs.append(2.0 * tf.reduce_sum(tf.math.xlogy(yt, yt / mu) - (yt - mu)))
    mu = tf.exp(tf.linalg.matvec(xt, beta) + off)
    with tf.GradientTape() as tape:
        tape.watch(mu)
        dev = 2.0 * tf.reduce_sum(tf.math.xlogy(yt, yt / mu) - (yt - mu))
    return devs, beta, tape.gradient(dev, mu), tf.math.log(yt[:4])


@parity(modes=True, **TOL)
def test_gamma_and_tweedie_glms_fitted_by_adam(tf):
    """Gamma (log link) and Tweedie (power 1.5) GLMs on positive data with exact zeros for the
    Tweedie one, fitted by 6 Adam steps each in eager loops: the unit deviances
    ``2(-log(y/mu) + (y - mu)/mu)`` and ``2(y^(2-p)/((1-p)(2-p)) - y mu^(1-p)/(1-p) +
    mu^(2-p)/(2-p))`` (``pow(0, 0.5)`` = 0), losses and gradients of both."""
    rs = np.random.RandomState(2422)
    x = rs.randn(12, 2).astype(np.float32)
    yg = rs.gamma(2.0, 0.5, 12).astype(np.float32) + 0.05
    yt = np.where(rs.rand(12) < 0.3, 0.0, rs.gamma(1.5, 1.0, 12)).astype(np.float32)
    out = {}
    for name, yv in (("gamma", yg), ("tweedie", yt)):
        w = tf.Variable(init_array((2,), 2423, 0.2))
        b = tf.Variable(0.1)
        opt = tf.keras.optimizers.Adam(0.05)
        hist = []
        for _ in range(6):
            with tf.GradientTape() as tape:
                mu = tf.exp(tf.linalg.matvec(tf.constant(x), w) + b)
                y = tf.constant(yv)
                if name == "gamma":
                    dev = 2.0 * (-tf.math.log(y / mu) + (y - mu) / mu)
                else:
                    p = 1.5
                    dev = 2.0 * (tf.pow(y, 2.0 - p) / ((1 - p) * (2 - p)) - y * tf.pow(mu, 1.0 - p) / (1 - p)
                                 + tf.pow(mu, 2.0 - p) / (2 - p))
                loss = tf.reduce_mean(dev)
            g = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(g, [w, b]))
            hist.append((loss, g))
        out[name] = (hist, w, b)
    return out


# ---------------------------------------------------------------------------
# Quantile, expectile and ordinal regression
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_quantile_regression_pinball_loss_at_zero_residuals(tf):
    """Quantile regression for tau in (0.1, 0.5, 0.9) jointly: the pinball loss written as
    ``maximum(tau * r, (tau - 1) * r)``, with targets placed so that some residuals are exactly 0
    at the start (``maximum``'s tie sends the gradient to its first argument, as TF's
    ``MaximumGrad`` does: ``x >= y``); and the same loss by ``tf.where(r >= 0, ...)``;
    4 SGD steps: losses, both gradients, coefficients."""
    x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0], [1.0, -1.0], [1.0, 0.5], [1.0, 3.0]], np.float32)
    y = np.array([0.5, 1.0, 1.5, 0.0, 2.0, -1.0], np.float32)
    taus = tf.constant([0.1, 0.5, 0.9])
    w = tf.Variable(np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]], np.float32))  # residuals 0 at rows 0-3
    out = []
    for _ in range(4):
        with tf.GradientTape(persistent=True) as tape:
            r = y[:, None] - tf.matmul(x, w)
            l1 = tf.reduce_mean(tf.maximum(taus * r, (taus - 1.0) * r))
            l2 = tf.reduce_mean(tf.where(r >= 0.0, taus * r, (taus - 1.0) * r))
        g1, g2 = tape.gradient(l1, w), tape.gradient(l2, w)
        del tape
        w.assign_sub(0.5 * g1)
        out.append((l1, l2, g1, g2))
    return out, w


@parity(modes=True, **TOL)
def test_expectile_regression_with_keras_sgd_in_a_compiled_step(tf):
    """Expectile regression (``|tau - 1(r < 0)| r^2``) for tau = 0.2 and 0.8 with a shared
    feature map, in a ``tf.function`` step with ``tf.keras.optimizers.SGD(momentum=0.9)``: the
    residuals start at exactly 0 for two rows; losses, gradients and the expectiles' order."""
    rs = np.random.RandomState(2430)
    x = rs.randn(10, 3).astype(np.float32)
    y = (x @ np.array([0.5, -0.2, 0.1], np.float32) + rs.randn(10).astype(np.float32) * 0.3)
    w = tf.Variable(np.zeros((3, 2), np.float32))
    b = tf.Variable(np.array([y[0], y[1]], np.float32) * 0 + np.float32(0.0))
    tau = tf.constant([0.2, 0.8])
    yv = np.copy(y)
    yv[:2] = 0.0
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            r = yv[:, None] - (tf.matmul(x, w) + b)
            wt = tf.abs(tau - tf.cast(r < 0.0, tf.float32))
            loss = tf.reduce_mean(wt * tf.square(r))
        g = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(g, [w, b]))
        return loss, g

    hist = [step() for _ in range(5)]
    return hist, w, b, tf.reduce_all(b[0] <= b[1])


@parity(modes=True, **TOL)
def test_ordinal_regression_cumulative_logits_with_ordered_thresholds(tf):
    """An ordinal (proportional odds) regression with 4 classes: thresholds ``c_0 + cumsum(
    softplus(d))`` so they stay ordered, ``P(y <= k) = sigmoid(c_k - x w)`` padded with 0 and 1,
    class probabilities by differences, the NLL by ``gather`` with ``batch_dims=1``; 5 Adam steps:
    losses, gradients (thresholds included), and predicted classes by ``argmax``."""
    rs = np.random.RandomState(2440)
    x = rs.randn(12, 2).astype(np.float32)
    score = x @ np.array([1.0, -0.5], np.float32)
    y = np.digitize(score, [-0.7, 0.0, 0.7]).astype(np.int32)
    w = tf.Variable(np.zeros(2, np.float32))
    c0 = tf.Variable(-1.0)
    d = tf.Variable(np.zeros(2, np.float32))
    opt = tf.keras.optimizers.Adam(0.1)
    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            thr = tf.concat([[c0], c0 + tf.cumsum(tf.nn.softplus(d))], 0)
            s = tf.linalg.matvec(tf.constant(x), w)
            cdf = tf.sigmoid(thr[None, :] - s[:, None])
            n = tf.shape(cdf)[0]
            cdf = tf.concat([tf.zeros([n, 1]), cdf, tf.ones([n, 1])], 1)
            probs = cdf[:, 1:] - cdf[:, :-1]
            nll = -tf.reduce_mean(tf.math.log(tf.gather(probs, y[:, None], batch_dims=1) + 1e-7))
        g = tape.gradient(nll, [w, c0, d])
        opt.apply_gradients(zip(g, [w, c0, d]))
        out.append((nll, g, tf.cast(tf.argmax(probs, 1), tf.int32)))
    return out, thr


# ---------------------------------------------------------------------------
# Group statistics
# ---------------------------------------------------------------------------


@parity(**TOL)
def test_group_statistics_with_nan_codes_and_segment_sums_that_need_sorted_ids(tf):
    """A pandas-style ``groupby`` ported to TF: a float code column with NaN for missing values is
    factorised by ``tf.unique`` (TF's ``==`` makes each NaN a group of its own, as
    ``unique_with_counts``' counts show), group means by ``unsorted_segment_mean``; the sorted
    ``tf.math.segment_sum`` on the unsorted codes raises TF's InvalidArgumentError, and after a
    stable ``argsort`` by code it gives the unsorted op's sums; the group-mean-centred values'
    gradient w.r.t. the data."""
    codes = tf.constant([2.0, np.nan, 1.0, 2.0, -0.0, np.nan, 0.0, 1.0])
    vals = tf.constant([1.0, 5.0, 2.0, 3.0, 4.0, 6.0, 8.0, 0.5])
    uniq, gid = tf.unique(codes)
    _, _, counts = tf.unique_with_counts(codes)
    n = 6   # five groups (2, nan, 1, 0, nan) and an empty sixth
    means = tf.math.unsorted_segment_mean(vals, gid, n)
    err = raises(lambda: tf.math.segment_sum(vals, gid))
    order = tf.argsort(gid, stable=True)
    sums = tf.math.segment_sum(tf.gather(vals, order), tf.gather(gid, order))
    with tf.GradientTape() as tape:
        tape.watch(vals)
        centred = vals - tf.gather(tf.math.unsorted_segment_mean(vals, gid, n), gid)
        loss = tf.reduce_sum(tf.square(centred) * tf.range(1.0, 9.0))
    return (uniq, gid, counts, means, err, sums, tf.math.unsorted_segment_sum(vals, gid, n)[:5],
            centred, tape.gradient(loss, vals))


@parity(x64=True, rtol=1e-10, atol=1e-13)
def test_float64_ridge_path_with_penalties_made_by_tf_cast(tf):
    """A float64 ridge regularisation path as users write it: each penalty made by
    ``tf.cast(lam, tf.float64)`` from a Python float (TF converts it to float32 first:
    ``tf.cast(0.1, tf.float64)`` is 0.10000000149011612), a Cholesky jitter by
    ``tf.cast(1e-8, tf.float64)``, the solutions by ``cholesky_solve``, the effective degrees of
    freedom ``tr(X (X^T X + lam I)^-1 X^T)``; compared at float64 precision."""
    rs = np.random.RandomState(2590)
    x = rs.randn(10, 3)
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.1 * rs.randn(10)
    X, Y = tf.constant(x), tf.constant(y[:, None])
    gram = tf.matmul(X, X, transpose_a=True)
    jitter = tf.cast(1e-8, tf.float64)
    out = []
    for lam in (0.1, 1.0, 3.3):
        pen = tf.cast(lam, tf.float64)
        A = gram + (pen + jitter) * tf.eye(3, dtype=tf.float64)
        L = tf.linalg.cholesky(A)
        beta = tf.linalg.cholesky_solve(L, tf.matmul(X, Y, transpose_a=True))
        dof = tf.linalg.trace(tf.matmul(X, tf.linalg.cholesky_solve(L, tf.transpose(X))))
        out.append((pen, beta, dof))
    return jitter, out


@parity(x64=True, rtol=1e-6, atol=1e-9)
def test_standardised_features_from_listed_statistics_in_float64_float32_and_float16(tf):
    """Statistics written as Python lists next to tensors of three precisions, as a ported
    scikit-learn pipeline does: float64 features standardised by ``(x - [means]) / [scales]``
    (TF converts each list with the tensor's dtype: float64's exact 0.1), a float32 Gaussian
    log-density with ``0.5 * tf.math.log(2 * np.pi)`` (a Python float alone is float32), and a
    float16 linear score ``x16 * [weights]`` staying float16; values and dtypes, and the float64
    log-likelihood's gradient w.r.t. the means."""
    rs = np.random.RandomState(2595)
    x = rs.randn(5, 3)
    means, scales = [0.1, -0.2, 0.3], [1.5, 0.7, 2.2]
    X = tf.constant(x)
    with tf.GradientTape() as tape:
        mu = tf.constant(means, tf.float64)
        tape.watch(mu)
        z = (X - mu) / scales
        ll64 = -0.5 * tf.reduce_sum(tf.square(z)) - tf.reduce_sum(tf.math.log(tf.constant(scales, tf.float64)))
    z_list = (X - means) / scales
    x32 = tf.constant(x.astype(np.float32))
    logpdf32 = -0.5 * tf.square(x32) - 0.5 * tf.math.log(2 * np.pi)
    x16 = tf.constant(x[:, :2].astype(np.float16))
    score16 = tf.reduce_sum(x16 * [0.1, -0.3], 1) + 0.25
    return z, z_list, ll64, tape.gradient(ll64, mu), logpdf32, score16
