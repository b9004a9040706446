"""Round twenty-four (b), third part: portfolios, risk and models fitted by gradients, each run
under real TensorFlow 2.21 and under tapejax.

Mean-variance and maximum-Sharpe portfolios with ``softmax`` weights trained by Adam, risk parity
by a log-barrier with projected steps (``maximum(w, eps)``, float64), long-only minimum variance by
projection onto the simplex through ``tf.sort`` / ``cumsum`` with tied entries, the Kelly criterion
with ``log1p`` near -1 and a leverage ``clip_by_value`` at its bound, value-at-risk and expected
shortfall by ``top_k`` and ``sort`` with tied scenario losses at the cut-off, deep hedging with a
CVaR loss (Rockafellar-Uryasev ``relu`` and ``top_k`` forms) in a compiled step, GARCH(1, 1) by
maximum likelihood over ``tf.scan``, Merton's jump-diffusion price as a Poisson series by
``lgamma``, a CRR binomial tree for an American put with its Greeks in a ``tf.function``, gamma of
piecewise-linear payoffs by nested tapes (its xfail: TF's None through ``maximum``), quasi-Monte Carlo
by ``ndtri`` of a stratified grid, the dtype errors of mixing float32 and float64 pricers, and a CDS
curve from hazard rates by ``expm1`` with its hazard jacobian.
"""
import numpy as np

from .harness import init_array, parity, raises, xfail_on_tapejax
from .test_user_programs24b import TOL, bs_call

# ---------------------------------------------------------------------------
# Portfolios
# ---------------------------------------------------------------------------


def _returns(n, d, seed):
    rs = np.random.RandomState(seed)
    mix = rs.randn(d, d).astype(np.float32) * 0.3 + np.eye(d, dtype=np.float32)
    return (rs.randn(n, d).astype(np.float32) @ mix) * 0.02 + 0.001 * np.arange(1, d + 1, dtype=np.float32)


@parity(modes=True, **TOL)
def test_mean_variance_and_max_sharpe_portfolios_with_softmax_weights(tf):
    """Weights ``softmax(z)`` over 4 assets; the mean-variance utility ``mu'w - gamma/2 w'Sw`` from
    the sample covariance (``matmul`` of centred returns) and the Sharpe ratio ``mean / std`` of the
    portfolio's returns (``reduce_std``), each trained by 4 Adam steps: objectives, weights,
    gradients; one logit starts far below the others so its weight's gradient is tiny."""
    r = tf.constant(_returns(40, 4, 301))
    mu = tf.reduce_mean(r, 0)
    xc = r - mu
    cov = tf.matmul(xc, xc, transpose_a=True) / 39.0
    out = []
    for objective in ("mv", "sharpe"):
        z = tf.Variable([0.0, 0.2, -0.1, -8.0])
        opt = tf.keras.optimizers.Adam(0.1)
        hist = []
        for _ in range(4):
            with tf.GradientTape() as tape:
                w = tf.nn.softmax(z)
                if objective == "mv":
                    obj = tf.tensordot(mu, w, 1) - 2.0 * tf.tensordot(w, tf.linalg.matvec(cov, w), 1)
                else:
                    pr = tf.linalg.matvec(r, w)
                    obj = tf.reduce_mean(pr) / tf.math.reduce_std(pr) * np.sqrt(252.0)
                loss = -obj
            g = tape.gradient(loss, z)
            opt.apply_gradients([(g, z)])
            hist.append((obj, w, g))
        out.append(hist)
    return out


@parity(x64=True, rtol=1e-8, atol=1e-12)
def test_risk_parity_by_a_log_barrier_with_projected_steps_in_float64(tf):
    """Risk parity by Spinu's convex problem ``min 1/2 w'Sw - sum b_i log w_i``: 30 projected
    gradient steps in a compiled ``for`` loop (``maximum(w - lr g, 1e-8)``), the weights normalised
    after; the risk contributions ``w_i (Sw)_i / w'Sw`` approach the budgets.  The gradient of the
    final weights' variance with respect to the covariance by a tape around the solver."""
    rs = np.random.RandomState(302)
    a = rs.randn(4, 4) * 0.1
    cov = tf.Variable(a @ a.T + np.diag([0.02, 0.04, 0.01, 0.03]))
    budget = tf.constant([0.25, 0.25, 0.25, 0.25], tf.float64)

    @tf.function
    def solve(cov):
        w = tf.fill([4], tf.constant(0.5, tf.float64))
        for _ in tf.range(30):
            g = tf.linalg.matvec(cov, w) - budget / w
            w = tf.maximum(w - 2.0 * g, 1e-8)
        return w / tf.reduce_sum(w)

    with tf.GradientTape() as tape:
        w = solve(cov)
        var = tf.tensordot(w, tf.linalg.matvec(cov, w), 1)
    rc = w * tf.linalg.matvec(cov, w) / var
    return w, rc, var, tape.gradient(var, cov)


def _project_simplex(tf, v):
    """Duchi et al.'s Euclidean projection onto the simplex, by a descending ``tf.sort``."""
    u = tf.sort(v, direction="DESCENDING")
    css = tf.cumsum(u)
    idx = tf.range(1, tf.shape(v)[0] + 1, dtype=v.dtype)
    cond = u - (css - 1.0) / idx > 0
    rho = tf.reduce_max(tf.where(cond, idx, tf.zeros_like(idx)))
    theta = (tf.gather(css, tf.cast(rho, tf.int32) - 1) - 1.0) / rho
    return tf.maximum(v - theta, 0.0)


@parity(modes=True, **TOL)
def test_long_only_minimum_variance_by_projection_onto_the_simplex_with_ties(tf):
    """Projected gradient descent for the long-only minimum-variance portfolio: each step
    ``w = project(w - lr S w)`` by a sort-based simplex projection (tied entries in the starting
    point, entries projected to exactly 0); 5 steps' weights, and the gradient of the projection
    itself (through ``sort``, ``cumsum``, ``gather``) at a point with ties."""
    r = _returns(30, 5, 303)
    cov = tf.constant(np.cov(r.T).astype(np.float32) * 100.0)
    v = tf.Variable([0.3, 0.3, 0.3, -0.2, 0.1])
    with tf.GradientTape() as tape:
        p = _project_simplex(tf, v)
        val = tf.reduce_sum(p * tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]))
    gproj = tape.gradient(val, v)
    w = tf.constant([0.2, 0.2, 0.2, 0.2, 0.2])
    hist = []
    for _ in range(5):
        w = _project_simplex(tf, w - 0.5 * tf.linalg.matvec(cov, w))
        hist.append(w)
    return p, gproj, hist


@parity(modes=True, **TOL)
def test_kelly_criterion_with_log1p_near_ruin_and_a_clipped_leverage(tf):
    """The Kelly fraction on two bets by gradient ascent on ``mean(log1p(w'r))`` over scenarios
    including a near-total loss (``w'r`` near -1, where ``log1p``'s slope is large); the leverage
    kept in [0, 1.5] by ``clip_by_value`` inside the tape (its gradient 0 outside the bounds, and at
    the bound itself TF's), 6 steps: growth rates, fractions, gradients."""
    r = tf.constant([[0.5, 0.2], [-0.3, 0.1], [0.8, -0.4], [-0.6, -0.05], [0.1, 0.4], [0.05, -0.1]])
    raw = tf.Variable([1.5, 0.4])  # exactly at the bound: TF passes the gradient there
    hist = []
    for _ in range(6):
        with tf.GradientTape() as tape:
            w = tf.clip_by_value(raw, 0.0, 1.5)
            growth = tf.reduce_mean(tf.math.log1p(tf.linalg.matvec(r, w)))
        g = tape.gradient(growth, raw)
        raw.assign_add(0.3 * g)
        hist.append((growth, w, g))
    return hist, raw


# ---------------------------------------------------------------------------
# Risk measures
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_var_and_expected_shortfall_by_top_k_and_sort_with_tied_losses(tf):
    """Historical VaR and ES at 80% over 20 scenarios whose portfolio losses tie at the cut-off
    (duplicated scenario rows): ES as the mean of ``top_k(losses, 4)`` (TF picks the lower index
    among ties, and the gradient goes to the picked rows), VaR as the 5th largest by a descending
    ``sort`` and ``gather``, and a linearly interpolated quantile; gradients with respect to the
    portfolio weights."""
    r = _returns(20, 3, 304)
    r[7] = r[15]
    r[11] = r[15]  # three scenarios with the 3rd largest loss: top_k(4) takes two of them
    w = tf.Variable([0.5, 0.3, 0.2])
    rt = tf.constant(r * 100.0)
    with tf.GradientTape(persistent=True) as tape:
        losses = -tf.linalg.matvec(rt, w)
        top, idx = tf.math.top_k(losses, k=4)
        es = tf.reduce_mean(top)
        srt = tf.sort(losses, direction="DESCENDING")
        var = tf.gather(srt, 4)
        pos = 0.2 * 19.0
        lo, hi = int(np.floor(pos)), int(np.ceil(pos))
        q = srt[lo] + (pos - lo) * (srt[hi] - srt[lo])
    out = losses, idx, es, var, q, [tape.gradient(x, w) for x in (es, var, q)], tape.gradient(top, losses)
    del tape
    return out


@parity(modes=True, **TOL)
def test_deep_hedging_with_a_cvar_loss_in_a_compiled_step(tf):
    """Deep hedging of a short call on 3-step GBM paths: a small MLP maps (time, log-moneyness) to
    the hedge ratio, the P&L sums ``delta * dS``, the loss is CVaR at 75% two ways, Rockafellar-
    Uryasev's ``w + mean(relu(-pnl - w)) / 0.25`` with ``w`` trainable and the mean of
    ``top_k(-pnl)``; 3 Adam steps of each in a ``tf.function``: losses, ``w`` and gradients."""
    z = np.random.RandomState(305).randn(3, 32).astype(np.float32)
    dt, sigma, k = 1.0 / 3.0, 0.2, 1.0
    logs = np.cumsum(-0.5 * sigma ** 2 * dt + sigma * np.sqrt(dt) * z, 0)
    paths = np.concatenate([np.ones((1, 32), np.float32), np.exp(logs)], 0).astype(np.float32)
    payoff = np.maximum(paths[-1] - k, 0.0).astype(np.float32)
    out = []
    for form in ("ru", "topk"):
        ws = [tf.Variable(init_array((2, 8), 306, 0.5)), tf.Variable(np.zeros(8, np.float32)),
              tf.Variable(init_array((8, 1), 307, 0.5)), tf.Variable([0.5])]
        var_w = tf.Variable(0.05)
        train = ws + ([var_w] if form == "ru" else [])
        opt = tf.keras.optimizers.Adam(0.02)

        @tf.function
        def step(paths, payoff):
            with tf.GradientTape() as tape:
                pnl = 0.08 - payoff
                for i in range(3):
                    x = tf.stack([tf.fill([32], i * dt), tf.math.log(paths[i] / k)], 1)
                    h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
                    delta = tf.sigmoid(tf.squeeze(tf.matmul(h, ws[2]), 1) + ws[3])
                    pnl += delta * (paths[i + 1] - paths[i])
                if form == "ru":
                    loss = var_w + tf.reduce_mean(tf.nn.relu(-pnl - var_w)) / 0.25
                else:
                    loss = tf.reduce_mean(tf.math.top_k(-pnl, 8).values)
            grads = tape.gradient(loss, train)
            opt.apply_gradients(zip(grads, train))
            return loss, grads

        out.append(([step(paths, payoff) for _ in range(3)], var_w))
    return out


@parity(x64=True, rtol=1e-8, atol=1e-11)
def test_garch_maximum_likelihood_over_scan_in_float64(tf):
    """GARCH(1, 1) fitted by maximum likelihood: the conditional variance recursion
    ``s2_t = omega + alpha r_{t-1}^2 + beta s2_{t-1}`` by ``tf.scan``, parameters kept positive by
    ``softplus`` (omega) and ``alpha + beta < 1`` by a ``softmax`` over three logits; the Gaussian
    negative log-likelihood and 3 Adam steps on float64 Variables in a ``tf.function``."""
    rs = np.random.RandomState(308)
    r = rs.randn(40) * 0.01
    r[20:25] *= 4.0  # a volatility burst
    rt = tf.constant(r)
    raw_omega = tf.Variable(-9.0, dtype=tf.float64)
    logits = tf.Variable([0.0, 2.0, -1.0], dtype=tf.float64)
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            omega = tf.nn.softplus(raw_omega)
            p = tf.nn.softmax(logits)
            alpha, beta = p[0], p[1]
            s2 = tf.scan(lambda s, x: omega + alpha * x * x + beta * s, rt[:-1],
                         initializer=tf.math.reduce_variance(rt))
            nll = 0.5 * tf.reduce_sum(tf.math.log(s2) + tf.square(rt[1:]) / s2)
        grads = tape.gradient(nll, [raw_omega, logits])
        opt.apply_gradients(zip(grads, [raw_omega, logits]))
        return nll, grads

    return [step() for _ in range(3)], raw_omega, logits


# ---------------------------------------------------------------------------
# Models and numerics
# ---------------------------------------------------------------------------


@parity(x64=True, rtol=1e-9, atol=1e-12)
def test_merton_jump_diffusion_price_as_a_poisson_series_by_lgamma(tf):
    """Merton's jump-diffusion call as the Poisson-weighted sum of Black-Scholes prices over 0..19
    jumps: weights ``exp(-lam' T + n log(lam' T) - lgamma(n + 1))``, per-term vol and rate shifted
    by the jumps; the price and its gradients with respect to the intensity, the jump mean and
    jump vol, and the diffusion vol; float64."""
    lam, mu_j, delta, sigma = (tf.Variable(v, dtype=tf.float64) for v in (0.8, -0.1, 0.15, 0.2))
    s, k, t, r = 100.0, 100.0, 1.0, 0.03
    n = tf.range(20, dtype=tf.float64)
    with tf.GradientTape() as tape:
        kbar = tf.exp(mu_j + 0.5 * delta * delta) - 1.0
        lam_p = lam * (1.0 + kbar)
        sig_n = tf.sqrt(sigma * sigma + n * delta * delta / t)
        r_n = r - lam * kbar + n * tf.math.log1p(kbar) / t
        logw = -lam_p * t + n * tf.math.log(lam_p * t) - tf.math.lgamma(n + 1.0)
        prices = bs_call(tf, tf.constant(s, tf.float64), tf.constant(k, tf.float64), tf.constant(t, tf.float64), r_n,
                         sig_n)[0]
        price = tf.reduce_sum(tf.exp(logw) * prices)
    return price, tf.reduce_sum(tf.exp(logw)), tape.gradient(price, [lam, mu_j, delta, sigma])


@parity(x64=True, rtol=1e-9, atol=1e-12)
def test_crr_binomial_american_put_with_delta_and_vega_in_a_tf_function(tf):
    """A 10-step Cox-Ross-Rubinstein tree for an American put (backward induction unrolled in
    Python, ``maximum(continuation, exercise)`` at each level), float64, in a ``tf.function`` that
    also takes delta and vega from a tape; and the number of nodes where early exercise wins."""
    s0, sigma = tf.Variable(100.0, dtype=tf.float64), tf.Variable(0.3, dtype=tf.float64)
    k, t, r, n = 105.0, 1.0, 0.05, 10
    dt = t / n

    @tf.function
    def greeks():
        with tf.GradientTape() as tape:
            u = tf.exp(sigma * np.sqrt(dt))
            d = 1.0 / u
            p = (np.exp(r * dt) - d) / (u - d)
            j = tf.range(n + 1, dtype=tf.float64)
            values = tf.maximum(k - s0 * u ** (n - j) * d ** j, 0.0)
            early = tf.constant(0)
            for i in range(n - 1, -1, -1):
                jj = tf.range(i + 1, dtype=tf.float64)
                cont = np.exp(-r * dt) * (p * values[:-1] + (1.0 - p) * values[1:])
                exercise = k - s0 * u ** (i - jj) * d ** jj
                early += tf.reduce_sum(tf.cast(exercise > cont, tf.int32))
                values = tf.maximum(cont, exercise)
        return values[0], early, tape.gradient(values[0], [s0, sigma])

    return greeks()


@xfail_on_tapejax((
    "a second derivative through tf.maximum / reduce_max: TF's gradient of Maximum is a Select on the "
    "mask x >= y (GreaterEqual has no gradient), so the first gradient does not depend on x and the "
    "outer tape gives None; tapejax records the inner gradient as one op whose inputs include x "
    "(its jaxpr reads x through the mask: autodiff/replay.py input_dependence) and gives 0.0. "
    "Pruning bool values there would also cut relu's ReluGrad, which TF connects (zeros)"))
@parity
def test_gamma_of_piecewise_linear_payoffs_by_nested_tapes_is_none_as_tf(tf):
    """Gamma by nested tapes of payoffs linear in the spot on each side of a kink: through
    ``maximum`` and ``reduce_max`` TF's first gradient does not depend on the spot (None), through
    ``relu`` and ``abs`` it does (zeros), through ``where`` it does not (None)."""
    s = tf.Variable([90.0, 110.0])
    out = []
    for payoff in (lambda x: tf.maximum(x - 100.0, 0.0), lambda x: tf.reduce_max(tf.stack([x - 100.0, 0.0 * x]), 0),
                   lambda x: tf.nn.relu(x - 100.0), lambda x: tf.abs(x - 100.0),
                   lambda x: tf.where(x > 100.0, x - 100.0, 0.0)):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                v = tf.reduce_sum(payoff(s))
            delta = inner.gradient(v, s)
        out.append((delta, outer.gradient(delta, s)))
    return out


@parity(**TOL)
def test_quasi_monte_carlo_by_ndtri_of_a_stratified_grid(tf):
    """Quasi-Monte Carlo: normals by ``tf.math.ndtri`` of the midpoints ``(i + 1/2) / n`` (the middle
    one exactly 0.5), a call priced from them against Black-Scholes, its vega by tape, and the
    gradient of ``ndtri`` itself with respect to the uniforms (``sqrt(2 pi) exp(z^2 / 2)``), also
    at 0 and 1 where ``ndtri`` is infinite."""
    u = tf.Variable((np.arange(63, dtype=np.float32) + 0.5) / 63.0)
    sigma = tf.Variable(0.25)
    with tf.GradientTape(persistent=True) as tape:
        z = tf.math.ndtri(u)
        st = 100.0 * tf.exp(-0.5 * sigma * sigma + sigma * z)
        qmc = tf.reduce_mean(tf.maximum(st - 100.0, 0.0))
        edges = tf.constant([0.0, 1.0, 0.5])
        tape.watch(edges)
        zedge = tf.math.ndtri(edges)
    out = (qmc, bs_call(tf, 100.0, 100.0, 1.0, 0.0, sigma)[0], tape.gradient(qmc, sigma),
           tape.gradient(tf.reduce_sum(z), u), zedge, tape.gradient(zedge, edges), tf.math.erfinv(tf.constant([-1.0, 0.0, 1.0])))
    del tape
    return out


@parity(x64=True)
def test_mixing_float32_and_float64_pricers_raises_as_tf(tf):
    """A float64 pricer fed a float32 spot: ``tf.constant`` float32 times a float64 tensor is TF's
    InvalidArgumentError eagerly and TypeError inside ``tf.function``; a Python float mixes with
    either; ``tf.cast`` to float64 first works, and the gradient of a float64 pricer with respect to
    a float32 source cast up is float32."""
    s32 = tf.constant([100.0, 110.0])
    vol64 = tf.constant([0.2, 0.25], tf.float64)

    @tf.function
    def f(a, b):
        return a * b

    eager = raises(lambda: s32 * vol64)
    staged = raises(f, s32, vol64)
    with tf.GradientTape() as tape:
        tape.watch(s32)
        price = bs_call(tf, tf.cast(s32, tf.float64), tf.constant(100.0, tf.float64), tf.constant(1.0, tf.float64),
                        tf.constant(0.01, tf.float64), vol64)[0]
    g = tape.gradient(price, s32)
    return eager, staged, (vol64 * 2.0).dtype.name, price, g


@parity(modes=True, rtol=2e-4, atol=1e-10)
def test_cds_par_spreads_from_hazard_rates_by_expm1_and_their_hazard_deltas(tf):
    """A credit-default-swap curve from piecewise hazard rates over 1-, 2- and 5-year buckets (a
    distressed name: hazard up to 2 a year, so ``lambda dt`` reaches 10): default probabilities
    per bucket by ``-expm1(-lambda dt)`` times the survival ``exp(-cumsum(lambda dt, exclusive))``,
    protection and premium legs, par spreads at 3 maturities; their jacobian with respect to the
    hazards (TF's Expm1 gradient is ``exp(x)``, which JAX's ``expm1(x) + 1`` loses at -10)."""
    dt = tf.constant([1.0, 2.0, 5.0])
    hazard = tf.Variable([0.8, 1.2, 2.0])
    disc = tf.exp(-0.03 * tf.cumsum(dt))
    with tf.GradientTape() as tape:
        surv_start = tf.exp(-tf.cumsum(hazard * dt, exclusive=True))
        pd = -tf.math.expm1(-hazard * dt) * surv_start
        surv_end = surv_start - pd
        protection = 0.6 * tf.cumsum(disc * pd)
        premium = tf.cumsum(disc * surv_end * dt)
        spreads = protection / premium
        tail = -tf.math.expm1(-hazard * dt)
        sens = tf.concat([spreads, tail], 0)
    return pd, spreads, tape.jacobian(sens, hazard)
