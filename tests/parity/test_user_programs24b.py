"""Round twenty-four (b) of realistic user programs: quantitative finance as TF Quant Finance-era
and users' code writes it, each run under real TensorFlow 2.21 and under tapejax.

This file holds option pricing and its sensitivities: Black-Scholes prices and Greeks by tape
(delta, vega, rho, theta; gamma by nested tapes) against the closed forms in float64 and float32,
deep out-of-the-money strikes where ``erfc`` / the normal density sit in their tails, Monte Carlo
with pathwise Greeks at the kink (paths exactly at the strike: ``tf.maximum``'s tie gives the
gradient to its first argument, ``relu``'s gives none, ``tf.where`` on ``>`` none) and digital
payoffs whose pathwise gradient is None or zero, antithetic and control variates in a
``tf.function``, Euler schemes for GBM in a ``tf.while_loop``, a ``tf.scan`` and a converted loop
with gradients through the paths, Heston with full truncation (``sqrt(maximum(v, 0))`` at 0),
implied volatility by Newton and by bisection inside ``tf.function``, and SABR's Hagan formula with
the ``tf.where`` trap at the money (a NaN gradient in both) and its safe form calibrated by Adam.
Noise is NumPy's, fed in; float64 programs run the tapejax side under x64.
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-4, atol=2e-5)
TOL64 = dict(rtol=1e-9, atol=1e-11)
SQRT2 = float(np.sqrt(2.0))
INV_SQRT2PI = float(1.0 / np.sqrt(2.0 * np.pi))


def ncdf(tf, x):
    """The standard normal CDF as TF Quant Finance writes it: ``0.5 * erfc(-x / sqrt 2)``."""
    return 0.5 * tf.math.erfc(-x / SQRT2)


def npdf(tf, x):
    return INV_SQRT2PI * tf.exp(-0.5 * tf.square(x))


def bs_call(tf, s, k, t, r, sigma):
    """Black-Scholes call; returns (price, d1, d2)."""
    sq = sigma * tf.sqrt(t)
    d1 = (tf.math.log(s / k) + (r + 0.5 * sigma * sigma) * t) / sq
    d2 = d1 - sq
    return s * ncdf(tf, d1) - k * tf.exp(-r * t) * ncdf(tf, d2), d1, d2


# ---------------------------------------------------------------------------
# Black-Scholes Greeks by tape
# ---------------------------------------------------------------------------


def _greeks_by_tape(tf, dtype):
    s = tf.Variable(np.array([80.0, 100.0, 120.0, 100.0], dtype))
    k = tf.constant(np.array([100.0, 100.0, 100.0, 90.0], dtype))
    t = tf.Variable(np.array([0.5, 1.0, 2.0, 0.25], dtype))
    r = tf.Variable(np.array([0.01, 0.03, 0.05, 0.0], dtype))
    sigma = tf.Variable(np.array([0.2, 0.25, 0.3, 0.4], dtype))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            price, d1, d2 = bs_call(tf, s, k, t, r, sigma)
        delta, vega, rho, dt = inner.gradient(price, [s, sigma, r, t])
    gamma = outer.gradient(delta, s)
    disc = tf.exp(-r * t)
    closed = dict(delta=ncdf(tf, d1), gamma=npdf(tf, d1) / (s * sigma * tf.sqrt(t)),
                  vega=s * npdf(tf, d1) * tf.sqrt(t), rho=k * t * disc * ncdf(tf, d2),
                  theta=s * npdf(tf, d1) * sigma / (2 * tf.sqrt(t)) + r * k * disc * ncdf(tf, d2))
    return price, dict(delta=delta, gamma=gamma, vega=vega, rho=rho, theta=dt), closed


@parity(x64=True, **TOL64)
def test_black_scholes_greeks_by_tape_against_the_closed_forms_in_float64(tf):
    """A float64 Black-Scholes pricer over four contracts (one with r = 0): delta, vega, rho and
    the time derivative from one tape, gamma from a tape around it, and the closed forms; the
    tape's Greeks equal the closed forms to 1e-10."""
    price, greeks, closed = _greeks_by_tape(tf, np.float64)
    gaps = {n: tf.reduce_max(tf.abs(greeks[n] - closed[n])) for n in closed}
    return price, greeks, closed, [bool(g < 1e-10) for g in gaps.values()]


@parity(**TOL)
def test_black_scholes_greeks_by_tape_in_float32(tf):
    """The same pricer in float32: the Greeks' dtypes stay float32 and agree with the closed forms
    to float32's precision."""
    price, greeks, closed = _greeks_by_tape(tf, np.float32)
    gaps = {n: tf.reduce_max(tf.abs(greeks[n] - closed[n]) / (1.0 + tf.abs(closed[n]))) for n in closed}
    return price, greeks, closed, [bool(g < 1e-4) for g in gaps.values()]


@parity(x64=True, rtol=1e-7, atol=1e-300)
def test_deep_out_of_the_money_calls_and_puts_in_the_normal_tails(tf):
    """Strikes 20 and 500 around a spot of 100 (|d| up to 11): the put by ``erfc`` directly, the
    call's and put's log prices and their gradients (delta / price), and the vega that the normal
    density's tail makes tiny; float64, so the tails are not flushed."""
    s = tf.Variable(np.full(4, 100.0))
    k = tf.constant([20.0, 40.0, 300.0, 500.0], tf.float64)
    t, r = tf.constant(0.5, tf.float64), tf.constant(0.02, tf.float64)
    sigma = tf.Variable(np.full(4, 0.2))
    with tf.GradientTape(persistent=True) as tape:
        call, d1, d2 = bs_call(tf, s, k, t, r, sigma)
        put = k * tf.exp(-r * t) * ncdf(tf, -d2) - s * ncdf(tf, -d1)
        log_call = tf.math.log(call[2:])
        log_put = tf.math.log(put[:2])
    out = (call[2:], put[:2], tape.gradient(log_call, [s, sigma]), tape.gradient(log_put, [s, sigma]),
           tape.gradient(call, sigma))
    del tape
    return out


@parity(**TOL)
def test_float32_call_far_out_of_the_money_underflows_like_tf(tf):
    """The float32 pricer at strikes 300 and 2000: the call is 0 or a cancellation's residue, the
    density underflows, and the gradient of ``log(call)`` is whatever float32 gives: inf / NaN
    where the price is 0, as TF gives them."""
    s = tf.Variable(np.full(3, 100.0, np.float32))
    k = tf.constant([150.0, 300.0, 2000.0])
    sigma = tf.Variable(np.full(3, 0.2, np.float32))
    with tf.GradientTape(persistent=True) as tape:
        call, d1, _ = bs_call(tf, s, k, tf.constant(0.5), tf.constant(0.02), sigma)
        vega = s * npdf(tf, d1) * tf.sqrt(0.5)
        log_call = tf.math.log(call)
    out = call, vega, log_call, tape.gradient(log_call, [s, sigma]), tape.gradient(vega, sigma)
    del tape
    return out


# ---------------------------------------------------------------------------
# Monte Carlo with pathwise Greeks
# ---------------------------------------------------------------------------


def _normals_with_zeros(n, seed):
    z = np.random.RandomState(seed).randn(n).astype(np.float32)
    z[::5] = 0.0  # paths that end exactly at the money when (r - sigma^2 / 2) = 0
    return z


@parity(modes=True, **TOL)
def test_pathwise_greeks_at_the_kink_maximum_relu_and_where(tf):
    """GBM terminal values with r = sigma^2 / 2 exactly (sigma = 0.5, r = 0.125), so a path with
    z = 0 ends exactly at the strike: the pathwise delta and vega of the call payoff written as
    ``maximum(S - K, 0)`` (TF's tie sends the gradient to S - K), ``relu(S - K)`` (nothing at 0),
    ``where(S > K, S - K, 0)`` and ``maximum(0, S - K)`` (the tie's gradient to the constant)."""
    z = _normals_with_zeros(20, 101)
    s0, sigma = tf.Variable(100.0), tf.Variable(0.5)
    r, t, k = 0.125, 1.0, 100.0
    with tf.GradientTape(persistent=True) as tape:
        st = s0 * tf.exp((r - 0.5 * sigma * sigma) * t + sigma * np.sqrt(t) * z)
        disc = np.exp(-r * t)
        payoffs = {"maximum": tf.maximum(st - k, 0.0), "relu": tf.nn.relu(st - k),
                   "where": tf.where(st > k, st - k, 0.0), "maximum_swapped": tf.maximum(0.0, st - k)}
        prices = {n: disc * tf.reduce_mean(p) for n, p in payoffs.items()}
    greeks = {n: tape.gradient(p, [s0, sigma]) for n, p in prices.items()}
    per_path = tape.gradient(payoffs["maximum"], st)
    del tape
    return st, prices, greeks, per_path


@parity(modes=True, **TOL)
def test_digital_options_pathwise_gradient_is_none_or_zero_and_smoothed_digital(tf):
    """A digital call three ways: ``cast(S > K)`` (the tape gives None: Cast from bool is not
    differentiable), ``where(S > K, 1, 0)`` (constants: None), ``sign(S - K)`` (zeros), and the
    smoothed ``sigmoid((S - K) / eps)`` whose delta approaches the likelihood-ratio estimate."""
    z = np.random.RandomState(102).randn(64).astype(np.float32)
    s0, sigma = tf.Variable(100.0), tf.Variable(0.2)
    k, t, r = 105.0, 0.5, 0.03
    with tf.GradientTape(persistent=True) as tape:
        st = s0 * tf.exp((r - 0.5 * sigma ** 2) * t + sigma * np.sqrt(t) * z)
        by_cast = tf.reduce_mean(tf.cast(st > k, tf.float32))
        by_where = tf.reduce_mean(tf.where(st > k, 1.0, 0.0))
        by_sign = tf.reduce_mean(0.5 * (tf.sign(st - k) + 1.0))
        smooth = tf.reduce_mean(tf.sigmoid((st - k) / 2.0))
    lr_delta = tf.reduce_mean(tf.cast(st > k, tf.float32) * z / (s0 * sigma * np.sqrt(t)))
    out = ([by_cast, by_where, by_sign, smooth], tape.gradient(by_cast, [s0, sigma]),
           tape.gradient(by_where, s0), tape.gradient(by_sign, [s0, sigma]),
           tape.gradient(smooth, [s0, sigma]), lr_delta)
    del tape
    return out


@parity(modes=True, **TOL)
def test_antithetic_and_control_variate_pricer_in_a_tf_function(tf):
    """A compiled MC pricer: antithetic pairs (z, -z), the terminal price as control variate with
    known mean ``S0 exp(rT)``, beta = Cov / Var estimated from the same draws (differentiated
    through, and held by ``stop_gradient``); prices, standard errors and delta / vega of each."""
    z = np.random.RandomState(103).randn(3, 32).astype(np.float32)
    s0, sigma = tf.Variable(100.0), tf.Variable(0.25)
    k, t, r = 100.0, 1.0, 0.05

    @tf.function
    def price(z):
        with tf.GradientTape(persistent=True) as tape:
            zz = tf.concat([z, -z], 0)
            st = s0 * tf.exp((r - 0.5 * sigma * sigma) * t + sigma * np.sqrt(t) * zz)
            pay = np.exp(-r * t) * tf.maximum(st - k, 0.0)
            anti = 0.5 * (pay[:32] + pay[32:])
            plain = tf.reduce_mean(anti)
            cv = st - s0 * np.exp(r * t)
            beta = tf.reduce_mean((pay - tf.reduce_mean(pay)) * cv) / tf.reduce_mean(tf.square(cv - tf.reduce_mean(cv)))
            controlled = tf.reduce_mean(pay - beta * cv)
            held = tf.reduce_mean(pay - tf.stop_gradient(beta) * cv)
        se = tf.math.reduce_std(anti) / np.sqrt(32.0)
        se_cv = tf.math.reduce_std(pay - beta * cv) / np.sqrt(64.0)
        grads = [tape.gradient(p, [s0, sigma]) for p in (plain, controlled, held)]
        return plain, controlled, held, se, se_cv, beta, grads

    return [price(tf.constant(z[i])) for i in range(3)]


# ---------------------------------------------------------------------------
# Euler schemes with gradients through the paths
# ---------------------------------------------------------------------------


@parity(x64=True, rtol=1e-9, atol=1e-10)
def test_euler_gbm_asian_option_by_while_loop_scan_and_a_converted_loop_float64(tf):
    """An arithmetic Asian call on Euler GBM paths (8 steps, 16 paths, float64) three ways: a
    ``tf.while_loop`` with ``maximum_iterations`` carrying the running sum, a ``tf.scan`` over the
    increments, and a ``for i in tf.range(n)`` loop in a ``tf.function``; prices and pathwise delta
    / vega / d/dr agree between them."""
    dw = np.random.RandomState(104).randn(8, 16) * np.sqrt(0.125)
    s0, sigma, r = tf.Variable(100.0, dtype=tf.float64), tf.Variable(0.3, dtype=tf.float64), tf.Variable(0.02, dtype=tf.float64)
    dwt = tf.constant(dw)
    dt, k = 0.125, 100.0

    def pay(avg):
        return tf.exp(-r) * tf.reduce_mean(tf.maximum(avg - k, 0.0))

    def by_while():
        def body(i, s, acc):
            s = s + r * s * dt + sigma * s * dwt[i]
            return i + 1, s, acc + s
        _, _, acc = tf.while_loop(lambda i, s, acc: i < 8, body,
                                  (tf.constant(0), s0 * tf.ones([16], tf.float64), tf.zeros([16], tf.float64)),
                                  maximum_iterations=8)
        return pay(acc / 8.0)

    def by_scan():
        path = tf.scan(lambda s, d: s + r * s * dt + sigma * s * d, dwt, initializer=s0 * tf.ones([16], tf.float64))
        return pay(tf.reduce_mean(path, 0))

    @tf.function
    def by_loop(dwt):
        s = s0 * tf.ones([16], tf.float64)
        acc = tf.zeros([16], tf.float64)
        for i in tf.range(8):
            s = s + r * s * dt + sigma * s * dwt[i]
            acc += s
        return pay(acc / 8.0)

    out = []
    for f in (by_while, by_scan, lambda: by_loop(dwt)):
        with tf.GradientTape() as tape:
            p = f()
        out.append((p, tape.gradient(p, [s0, sigma, r])))
    return out


@parity(modes=True, **TOL)
def test_heston_full_truncation_euler_with_sqrt_of_maximum_at_zero(tf):
    """Heston paths by full-truncation Euler (``vp = maximum(v, 0)``, ``sqrt(vp)``) with a large
    vol-of-vol so the variance goes negative and ``sqrt`` is taken at exactly 0 (its derivative
    infinite, masked by the maximum's gradient); a call's price and its gradients with respect to
    kappa, theta, xi, rho and v0 from a compiled pricer, and the count of truncated steps."""
    rs = np.random.RandomState(105)
    z1 = rs.randn(10, 24).astype(np.float32)
    z2 = rs.randn(10, 24).astype(np.float32)
    params = [tf.Variable(v) for v in (1.5, 0.04, 0.9, -0.6, 0.02)]
    s0, k, dt = 100.0, 100.0, 0.05

    @tf.function
    def price(z1, z2):
        kappa, theta, xi, rho, v0 = params
        with tf.GradientTape() as tape:
            x = tf.zeros([24]) + np.log(s0)
            v = v0 * tf.ones([24])
            hits = tf.constant(0)
            for i in tf.range(10):
                vp = tf.maximum(v, 0.0)
                hits += tf.reduce_sum(tf.cast(v <= 0.0, tf.int32))
                w1 = z1[i]
                w2 = rho * z1[i] + tf.sqrt(1.0 - rho * rho) * z2[i]
                x = x - 0.5 * vp * dt + tf.sqrt(vp * dt) * w1
                v = v + kappa * (theta - vp) * dt + xi * tf.sqrt(vp * dt) * w2
            p = tf.reduce_mean(tf.maximum(tf.exp(x) - k, 0.0))
        return p, hits, tape.gradient(p, params)

    return price(tf.constant(z1), tf.constant(z2))


# ---------------------------------------------------------------------------
# Implied volatility
# ---------------------------------------------------------------------------


@parity(x64=True, rtol=1e-8, atol=1e-10)
def test_implied_vol_by_newton_while_loop_and_by_bisection_in_tf_function(tf):
    """Implied volatilities of five float64 call prices: Newton in a ``while`` on a tensor
    tolerance (AutoGraph, vega from an inner tape), bisection in a ``for _ in tf.range(60)`` loop
    updating brackets by ``tf.where``; both recover the vols that made the prices, and the
    iteration count comes back."""
    s, t, r = 100.0, tf.constant(0.75, tf.float64), tf.constant(0.01, tf.float64)
    k = tf.constant([70.0, 90.0, 100.0, 110.0, 140.0], tf.float64)
    true_vol = tf.constant([0.35, 0.28, 0.25, 0.23, 0.3], tf.float64)
    target = bs_call(tf, tf.constant(s, tf.float64), k, t, r, true_vol)[0]

    @tf.function
    def newton(target):
        vol = tf.fill([5], tf.constant(0.5, tf.float64))
        err = tf.constant(1.0, tf.float64)
        n = tf.constant(0)
        while err > 1e-12 and n < 50:
            with tf.GradientTape() as tape:
                tape.watch(vol)
                diff = bs_call(tf, tf.constant(s, tf.float64), k, t, r, vol)[0] - target
            vega = tape.gradient(diff, vol)
            vol = vol - diff / vega
            err = tf.reduce_max(tf.abs(diff))
            n += 1
        return vol, n

    @tf.function
    def bisect(target):
        lo = tf.fill([5], tf.constant(0.01, tf.float64))
        hi = tf.fill([5], tf.constant(2.0, tf.float64))
        for _ in tf.range(60):
            mid = 0.5 * (lo + hi)
            above = bs_call(tf, tf.constant(s, tf.float64), k, t, r, mid)[0] > target
            hi = tf.where(above, mid, hi)
            lo = tf.where(above, lo, mid)
        return 0.5 * (lo + hi)

    vol_n, n = newton(target)
    vol_b = bisect(target)
    return vol_n, n, vol_b, tf.reduce_max(tf.abs(vol_n - true_vol)) < 1e-10, tf.reduce_max(tf.abs(vol_b - true_vol)) < 1e-9


@parity(**TOL)
def test_gradient_of_implied_vol_through_unrolled_newton_steps_is_one_over_vega(tf):
    """Implied vol by six Newton steps in a compiled ``for i in tf.range(6)`` loop (vega in closed
    form), differentiated with respect to the market prices through the loop: the gradient
    approaches ``1 / vega`` at the solution; float32."""
    k = tf.constant([90.0, 100.0, 115.0])
    prices = tf.Variable(bs_call(tf, 100.0, k, 1.0, 0.02, tf.constant([0.3, 0.25, 0.22]))[0])

    @tf.function
    def implied(prices):
        vol = tf.fill([3], 0.4)
        for _ in tf.range(6):
            c, d1, _ = bs_call(tf, 100.0, k, 1.0, 0.02, vol)
            vol = vol - (c - prices) / (100.0 * npdf(tf, d1))
        return vol

    with tf.GradientTape() as tape:
        vol = implied(prices)
    g = tape.gradient(vol, prices)
    _, d1, _ = bs_call(tf, 100.0, k, 1.0, 0.02, vol)
    return vol, g, g * 100.0 * npdf(tf, d1)


# ---------------------------------------------------------------------------
# SABR
# ---------------------------------------------------------------------------


def _sabr_vol(tf, f, k, t, alpha, beta, rho, nu, safe):
    """Hagan's lognormal SABR vol; at the money ``z / x(z)`` is 0/0 and is replaced by 1."""
    fk = f * k
    logfk = tf.math.log(f / k)
    fkb = tf.pow(fk, (1.0 - beta) / 2.0)
    z = nu / alpha * fkb * logfk
    xz = tf.math.log((tf.sqrt(1.0 - 2.0 * rho * z + z * z) + z - rho) / (1.0 - rho))
    atm = tf.abs(z) < 1e-7
    if safe:  # the double-where: no NaN reaches the gradient
        z_safe = tf.where(atm, tf.ones_like(z), z)
        xz_safe = tf.math.log((tf.sqrt(1.0 - 2.0 * rho * z_safe + z_safe * z_safe) + z_safe - rho) / (1.0 - rho))
        ratio = tf.where(atm, tf.ones_like(z), z_safe / xz_safe)
    else:
        ratio = tf.where(atm, tf.ones_like(z), z / xz)
    denom = fkb * (1.0 + (1.0 - beta) ** 2 / 24.0 * logfk ** 2 + (1.0 - beta) ** 4 / 1920.0 * logfk ** 4)
    corr = 1.0 + ((1.0 - beta) ** 2 / 24.0 * alpha ** 2 / (fkb * fkb)
                  + rho * beta * nu * alpha / (4.0 * fkb) + (2.0 - 3.0 * rho ** 2) / 24.0 * nu ** 2) * t
    return alpha / denom * ratio * corr


@parity(modes=True, **TOL)
def test_sabr_hagan_where_trap_at_the_money_and_adam_calibration_of_the_safe_form(tf):
    """Hagan's formula over a smile with one strike at the forward: the naive
    ``where(|z| < eps, 1, z / x(z))`` has a NaN gradient (the untaken branch's 0/0 reaches it, in
    TF as in JAX); the double-where form is finite, and calibrates alpha, rho, nu (rho kept in
    (-1, 1) by ``tanh``) to a market smile by 3 Adam steps."""
    f, t, beta = 0.03, 2.0, 0.5
    k = tf.constant([0.02, 0.025, 0.03, 0.035, 0.045])
    market = tf.constant([0.26, 0.235, 0.22, 0.215, 0.225])
    alpha, rho_raw, nu = tf.Variable(0.04), tf.Variable(-0.2), tf.Variable(0.5)
    with tf.GradientTape() as tape:
        naive = _sabr_vol(tf, f, k, t, alpha, beta, tf.tanh(rho_raw), nu, safe=False)
        loss_naive = tf.reduce_sum(tf.square(naive - market))
    g_naive = tape.gradient(loss_naive, [alpha, rho_raw, nu])
    opt = tf.keras.optimizers.Adam(0.01)
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            vols = _sabr_vol(tf, f, k, t, alpha, beta, tf.tanh(rho_raw), nu, safe=True)
            loss = tf.reduce_sum(tf.square(vols - market))
        grads = tape.gradient(loss, [alpha, rho_raw, nu])
        opt.apply_gradients(zip(grads, [alpha, rho_raw, nu]))
        hist.append((loss, grads))
    return naive, g_naive, hist, [alpha, rho_raw, nu]


@parity(modes=True, **TOL)
def test_local_vol_euler_with_a_grid_looked_up_by_searchsorted(tf):
    """A local-volatility surface on a (time, spot) grid, a trainable Variable; Euler paths look up
    each step's vol by ``tf.searchsorted`` on the spot nodes (a path exactly on a node included)
    and linear weights, gathered from the grid row of that step; the price's gradient with respect
    to the grid (zero where no path passes), 2 SGD steps toward a target price."""
    nodes = np.array([80.0, 90.0, 100.0, 110.0, 120.0], np.float32)
    grid = tf.Variable(0.2 + init_array((4, 5), 106, 0.02))
    dw = np.random.RandomState(107).randn(4, 6).astype(np.float32) * 0.5
    dw[0, 0] = 0.0
    dwt = tf.constant(dw)
    hist = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            s = tf.constant([100.0, 95.0, 105.0, 100.0, 90.0, 112.0])
            for i in range(4):
                j = tf.clip_by_value(tf.searchsorted(nodes, s, side="right") - 1, 0, 3)
                lo = tf.gather(nodes, j)
                w = tf.clip_by_value((s - lo) / 10.0, 0.0, 1.0)
                row = grid[i]
                vol = (1.0 - w) * tf.gather(row, j) + w * tf.gather(row, j + 1)
                s = s * (1.0 + vol * dwt[i])
            price = tf.reduce_mean(tf.maximum(s - 100.0, 0.0))
            loss = tf.square(price - 4.0)
        g = tape.gradient(loss, grid)
        grid.assign_sub(0.01 * g)
        hist.append((price, g, j))
    return hist, grid
