"""Round twenty-four (b), second part: quantitative finance beyond Black-Scholes, each run under
real TensorFlow 2.21 and under tapejax.

Heston's semi-closed form by the characteristic function (complex128 ``exp`` / ``sqrt`` / ``log``
on a quadrature grid, gradients with respect to real parameters through complex intermediates) and
its calibration; yield curves: discount factors by ``cumsum`` / ``cumprod`` / ``exp`` of forward
rates, par-swap bootstrapping, key-rate durations by ``tape.jacobian`` and convexity by
``batch_jacobian``; Longstaff-Schwartz American puts with ``tf.linalg.lstsq`` regressions on the
in-the-money paths; a lookback option whose running maximum has exact ties (``reduce_max``'s
gradient shared between them, ``cummax`` by ``scan``); barrier options with an indicator and a
Brownian-bridge survival factor; basket options on correlated paths by ``cholesky`` with the
correlation's gradient; an implied-vol surface interpolated bilinearly by ``searchsorted`` with
queries on the nodes; and Greeks by forward mode (``ForwardAccumulator``) against the tape.
"""
import numpy as np

from .harness import init_array, parity
from .test_user_programs24b import TOL, bs_call, ncdf

# ---------------------------------------------------------------------------
# Heston by its characteristic function (complex arithmetic)
# ---------------------------------------------------------------------------


def _heston_call(tf, s, k, t, r, kappa, theta, xi, rho, v0, u, w):
    """Heston calls at the strikes ``k`` by the Gil-Pelaez form: P_j = 1/2 + 1/pi * int Re(e^{-iu ln K}
    phi_j(u) / (iu)) du on a fixed quadrature (nodes ``u``, weights ``w``), the 'little trap'
    formulation; real parameters enter by ``tf.complex(p, 0)``, the spot by ``tf.cast``."""
    cdt = tf.complex128

    def cx(p):
        return tf.complex(p, tf.zeros_like(p))

    iu = tf.complex(tf.zeros_like(u), u)[:, None]
    lk = cx(tf.math.log(k))[None, :]
    kap, th, sig, rh, tt = cx(kappa), cx(theta), cx(xi), cx(rho), cx(t)

    def phi(uj, bj):
        d = tf.sqrt(tf.square(rh * sig * iu - bj) - sig * sig * (2.0 * uj * iu - tf.square(iu)))
        g = (bj - rh * sig * iu - d) / (bj - rh * sig * iu + d)
        e = tf.exp(-d * tt)
        cc = cx(r) * iu * tt + kap * th / (sig * sig) * (
            (bj - rh * sig * iu - d) * tt - 2.0 * tf.math.log((1.0 - g * e) / (1.0 - g)))
        dd = (bj - rh * sig * iu - d) / (sig * sig) * (1.0 - e) / (1.0 - g * e)
        return tf.exp(cc + dd * cx(v0) + iu * tf.cast(tf.math.log(s), cdt))

    probs = []
    for uj, bj in ((0.5, kappa - rho * xi), (-0.5, kappa)):
        f = phi(tf.constant(uj, cdt), cx(bj))
        integrand = tf.math.real(tf.exp(-iu * lk) * f / iu)
        probs.append(0.5 + tf.reduce_sum(w[:, None] * integrand, 0) / np.pi)
    return s * probs[0] - k * tf.exp(-r * t) * probs[1]


def _quadrature(n=32):
    x, wts = np.polynomial.legendre.leggauss(n)
    u = 0.5 * (x + 1.0) * 60.0 + 1e-8
    return u, wts * 30.0


@parity(x64=True, rtol=1e-8, atol=1e-9)
def test_heston_characteristic_function_price_and_real_parameter_gradients(tf):
    """Heston calls at three strikes by 32-point Gauss-Legendre quadrature of the characteristic
    function (complex128 throughout), their gradients with respect to the five real parameters and
    the spot through ``tf.complex`` / ``cast`` / ``math.real``, weighted per strike by
    ``output_gradients``."""
    u, w = _quadrature()
    params = [tf.Variable(v, dtype=tf.float64) for v in (2.0, 0.04, 0.5, -0.7, 0.05)]
    s = tf.Variable(100.0, dtype=tf.float64)
    with tf.GradientTape() as tape:
        c = _heston_call(tf, s, tf.constant([85.0, 100.0, 120.0], tf.float64), tf.constant(1.0, tf.float64),
                         tf.constant(0.02, tf.float64), *params, tf.constant(u), tf.constant(w))
    return c, tape.gradient(c, params + [s], output_gradients=tf.constant([1.0, -2.0, 3.0], tf.float64))


@parity(x64=True, rtol=1e-7, atol=1e-9)
def test_heston_calibration_by_adam_on_a_smile_in_a_tf_function(tf):
    """Calibrating Heston's kappa, theta, xi, rho, v0 (positivity by ``softplus``, rho by
    ``tanh``) to four market call prices in a compiled Adam step on float64 Variables; two
    steps: loss, gradients and parameters."""
    u, w = _quadrature(16)
    ut, wt = tf.constant(u), tf.constant(w)
    ks = tf.constant([90.0, 100.0, 110.0, 120.0], tf.float64)
    market = tf.constant([14.5, 8.2, 3.9, 1.5], tf.float64)
    raw = [tf.Variable(v, dtype=tf.float64) for v in (0.5, -3.0, -0.5, -0.5, -3.0)]
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            kappa, theta, xi, v0 = (tf.nn.softplus(raw[i]) for i in (0, 1, 2, 4))
            rho = tf.tanh(raw[3])
            prices = _heston_call(tf, tf.constant(100.0, tf.float64), ks, tf.constant(0.5, tf.float64),
                                  tf.constant(0.01, tf.float64), kappa, theta, xi, rho, v0, ut, wt)
            loss = tf.reduce_sum(tf.square(prices - market))
        grads = tape.gradient(loss, raw)
        opt.apply_gradients(zip(grads, raw))
        return loss, grads

    return [step() for _ in range(2)], raw


# ---------------------------------------------------------------------------
# Yield curves
# ---------------------------------------------------------------------------


@parity(x64=True, rtol=1e-9, atol=1e-12)
def test_discount_curve_from_forwards_and_key_rate_durations_by_jacobian(tf):
    """Piecewise-flat forward rates on 6 buckets: discount factors by ``exp(-cumsum(f dt))`` and by
    ``cumprod(1 / (1 + f dt))`` (simple compounding), three coupon bonds priced off them, their
    key-rate durations by ``tape.jacobian`` (bonds x buckets, zero past each bond's maturity) and
    the parallel-shift duration as the jacobian's row sums."""
    dt = tf.constant([0.5, 0.5, 1.0, 1.0, 2.0, 5.0], tf.float64)
    fwd = tf.Variable([0.02, 0.022, 0.025, 0.027, 0.03, 0.032], dtype=tf.float64)
    cf = tf.constant([[2.0, 102.0, 0, 0, 0, 0], [1.5, 1.5, 3.0, 103.0, 0, 0], [0, 1.0, 2.0, 2.0, 4.0, 110.0]],
                     tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        df_cont = tf.exp(-tf.cumsum(fwd * dt))
        df_simple = tf.math.cumprod(1.0 / (1.0 + fwd * dt))
        prices = tf.linalg.matvec(cf, df_cont)
        prices_simple = tf.linalg.matvec(cf, df_simple)
    krd = tape.jacobian(prices, fwd)
    krd_simple = tape.jacobian(prices_simple, fwd)
    del tape
    return df_cont, df_simple, prices, krd, krd_simple, -tf.reduce_sum(krd, 1) / prices


@parity(x64=True, rtol=1e-9, atol=1e-12)
def test_par_swap_bootstrap_by_a_converted_loop_and_its_sensitivities(tf):
    """Bootstrapping annual discount factors from par swap rates in a ``tf.function``: each year's
    ``P_n = (1 - s_n * sum_{i<n} P_i) / (1 + s_n)`` with the annuity carried in the loop and the
    factors written to a ``TensorArray``; zero rates by ``-log(P) / t``; the jacobian of the zero
    curve with respect to the swap rates (lower-triangular) by ``tape.jacobian``."""
    swaps = tf.Variable([0.015, 0.018, 0.021, 0.023, 0.025], dtype=tf.float64)

    @tf.function
    def bootstrap(s):
        dfs = tf.TensorArray(tf.float64, size=5)
        annuity = tf.constant(0.0, tf.float64)
        for n in tf.range(5):
            p = (1.0 - s[n] * annuity) / (1.0 + s[n])
            dfs = dfs.write(n, p)
            annuity += p
        return dfs.stack()

    with tf.GradientTape() as tape:
        dfs = bootstrap(swaps)
        zeros = -tf.math.log(dfs) / tf.range(1.0, 6.0, dtype=tf.float64)
    jac = tape.jacobian(zeros, swaps)
    upper = tf.linalg.band_part(jac, 0, -1) - tf.linalg.band_part(jac, 0, 0)
    return dfs, zeros, jac, tf.reduce_max(tf.abs(upper))


@parity(x64=True, rtol=1e-9, atol=1e-12)
def test_bond_convexity_by_batch_jacobian_of_a_yield_gradient(tf):
    """A batch of bonds each priced at its own yield: duration by the gradient with respect to the
    yields, convexity per bond by ``batch_jacobian`` of that gradient under an outer tape (the
    second derivative, diagonal), against the closed sums."""
    t = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0], tf.float64)
    cf = tf.constant([[3.0] * 4 + [103.0], [5.0] * 4 + [105.0], [0.0] * 4 + [100.0]], tf.float64)
    y = tf.Variable([[0.03], [0.04], [0.025]], dtype=tf.float64)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            price = tf.reduce_sum(cf * tf.exp(-y * t), 1, keepdims=True)
        dp = inner.gradient(price, y)
    conv = outer.batch_jacobian(dp, y)
    closed = tf.reduce_sum(cf * t * t * tf.exp(-y * t), 1)
    return price, dp, conv, closed


# ---------------------------------------------------------------------------
# American options, path-dependent payoffs
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_longstaff_schwartz_american_put_with_lstsq_on_in_the_money_paths(tf):
    """Longstaff-Schwartz for an American put on 32 GBM paths, 4 exercise dates: at each date a
    ``tf.linalg.lstsq`` regression of discounted cash flows on (1, S, S^2), weighted to the
    in-the-money paths, decides exercise; the price and its pathwise delta and vega (exercise
    decisions held by ``stop_gradient``), and the count of exercised paths per date."""
    z = np.random.RandomState(201).randn(4, 32).astype(np.float32)
    s0, sigma = tf.Variable(1.0), tf.Variable(0.3)
    k, r, dt = 1.05, 0.04, 0.25
    with tf.GradientTape() as tape:
        logs = tf.cumsum((r - 0.5 * sigma * sigma) * dt + sigma * np.sqrt(dt) * z, axis=0)
        paths = s0 * tf.exp(logs)
        cash = tf.maximum(k - paths[-1], 0.0)
        counts = []
        for i in (2, 1, 0):
            cash = cash * np.exp(-r * dt)
            s = paths[i]
            exercise = tf.maximum(k - s, 0.0)
            itm = tf.cast(exercise > 0.0, tf.float32)
            basis = tf.stack([tf.ones_like(s), s, s * s], 1) * itm[:, None]
            coef = tf.linalg.lstsq(basis, (cash * itm)[:, None], l2_regularizer=1e-6)
            cont = tf.squeeze(tf.matmul(tf.stack([tf.ones_like(s), s, s * s], 1), coef), 1)
            ex = tf.stop_gradient(tf.cast((exercise > cont) & (itm > 0), tf.float32))
            cash = ex * exercise + (1.0 - ex) * cash
            counts.append(tf.reduce_sum(ex))
        price = np.exp(-r * dt) * tf.reduce_mean(cash)
    return price, counts, tape.gradient(price, [s0, sigma])


@parity(modes=True, **TOL)
def test_lookback_call_with_exact_ties_in_the_running_maximum(tf):
    """A floating-strike lookback on 6 paths, two of which reach their maximum and stay flat there
    (zero increments: exact ties, one path flat throughout): ``reduce_max``'s gradient is shared
    equally between the tied steps (TF's rule), while a running maximum by ``tf.scan(tf.maximum)``
    sends it on each tie to the accumulator, the earliest step; the per-step gradients and vegas."""
    inc = np.random.RandomState(202).randn(6, 8).astype(np.float32) * 0.1
    inc[0] = [0.1, 0.05, 0.1, 0.0, 0.0, 0.0, -0.1, 0.02]
    inc[1] = 0.0
    sigma = tf.Variable(0.2)
    with tf.GradientTape(persistent=True) as tape:
        path = 100.0 * tf.exp(tf.cumsum(sigma * inc / 0.2 * 1.0, axis=1))
        tape.watch(path)
        mx = tf.reduce_max(path, axis=1)
        cummax = tf.transpose(tf.scan(tf.maximum, tf.transpose(path)))
        lookback = tf.reduce_mean(mx - path[:, -1])
        lookback_scan = tf.reduce_mean(cummax[:, -1] - path[:, -1])
    out = (mx, lookback, tape.gradient(lookback, path), tape.gradient(lookback_scan, path),
           tape.gradient(lookback, sigma), tape.gradient(lookback_scan, sigma))
    del tape
    return out


@parity(modes=True, **TOL)
def test_up_and_out_barrier_with_indicator_and_brownian_bridge_survival(tf):
    """An up-and-out call on 5-step paths: the discrete indicator ``reduce_all(S < B)`` (its
    pathwise gradient only through the surviving payoffs), and the continuous-monitoring
    correction ``prod(1 - exp(-2 log(B/S_i) log(B/S_{i+1}) / (sigma^2 dt)))`` with a path
    touching the barrier's neighbourhood; prices, delta and vega of both."""
    z = np.random.RandomState(203).randn(5, 16).astype(np.float32)
    z[:, 0] = [0.6, 0.6, 0.6, 0.6, 0.6]
    s0, sigma = tf.Variable(100.0), tf.Variable(0.25)
    b, k, dt = 130.0, 100.0, 0.1
    with tf.GradientTape(persistent=True) as tape:
        logs = tf.math.log(s0) + tf.cumsum(-0.5 * sigma * sigma * dt + sigma * np.sqrt(dt) * z, axis=0)
        paths = tf.exp(tf.concat([tf.fill([1, 16], tf.math.log(s0)), logs], 0))
        alive = tf.cast(tf.reduce_all(paths < b, axis=0), tf.float32)
        pay = tf.maximum(paths[-1] - k, 0.0)
        discrete = tf.reduce_mean(alive * pay)
        lb = tf.math.log(b / tf.minimum(paths, b - 1e-3))
        cross = tf.exp(-2.0 * lb[:-1] * lb[1:] / (sigma * sigma * dt))
        bridge = tf.reduce_mean(alive * tf.reduce_prod(1.0 - cross, axis=0) * pay)
    out = discrete, bridge, tape.gradient(discrete, [s0, sigma]), tape.gradient(bridge, [s0, sigma]), alive
    del tape
    return out


# ---------------------------------------------------------------------------
# Correlation, surfaces, forward mode
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_basket_option_on_cholesky_correlated_paths_and_the_correlation_gradient(tf):
    """A 3-asset basket call: the correlation matrix built from a trainable pairwise vector (its
    unit diagonal by ``set_diag``), ``cholesky`` of it correlating NumPy normals; price, the
    gradient with respect to the correlations and vols through ``cholesky``, and the gradient of
    ``log det`` by the Cholesky diagonal against ``linalg.slogdet``'s."""
    z = np.random.RandomState(204).randn(64, 3).astype(np.float32)
    rho = tf.Variable([0.5, 0.3, 0.2])
    vols = tf.Variable([0.2, 0.3, 0.25])
    wts = tf.constant([0.4, 0.3, 0.3])
    with tf.GradientTape(persistent=True) as tape:
        off = tf.scatter_nd([[0, 1], [0, 2], [1, 2]], rho, [3, 3])
        corr = tf.linalg.set_diag(off + tf.transpose(off), tf.ones(3))
        chol = tf.linalg.cholesky(corr)
        w = tf.matmul(z, chol, transpose_b=True)
        st = 100.0 * tf.exp(-0.5 * vols * vols + vols * w)
        basket = tf.reduce_sum(st * wts, 1)
        price = tf.reduce_mean(tf.maximum(basket - 100.0, 0.0))
        logdet = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
        _, logdet2 = tf.linalg.slogdet(corr)
    out = (price, chol, tape.gradient(price, [rho, vols]), tape.gradient(logdet, rho),
           tape.gradient(logdet2, rho), tape.gradient(tf.reduce_sum(chol), rho))
    del tape
    return out


@parity(modes=True, **TOL)
def test_vol_surface_bilinear_interpolation_by_searchsorted_with_queries_on_nodes(tf):
    """An implied-vol surface on a (maturity, strike) grid, a Variable; queries located by
    ``searchsorted`` (one on an interior node, one on the last node, one outside clipped), the
    bilinear weights, and a Black-Scholes price at the interpolated vol; gradients of the prices
    with respect to the grid (four nodes each) and to the query strikes (the slope of the cell they
    fall in), then 2 SGD steps fitting quotes."""
    ts = tf.constant([0.25, 0.5, 1.0, 2.0])
    ks = tf.constant([80.0, 90.0, 100.0, 110.0, 120.0])
    grid = tf.Variable(0.2 + init_array((4, 5), 205, 0.03))
    qt = tf.constant([0.5, 0.75, 2.0, 1.5])
    qk = tf.Variable([100.0, 95.0, 120.0, 130.0])
    quotes = tf.constant([9.0, 9.5, 10.0, 1.0])

    def interp(t, k):
        i = tf.clip_by_value(tf.searchsorted(ts, t, side="right") - 1, 0, 2)
        j = tf.clip_by_value(tf.searchsorted(ks, k, side="right") - 1, 0, 3)
        t0, t1 = tf.gather(ts, i), tf.gather(ts, i + 1)
        k0, k1 = tf.gather(ks, j), tf.gather(ks, j + 1)
        a = tf.clip_by_value((t - t0) / (t1 - t0), 0.0, 1.0)
        b = tf.clip_by_value((k - k0) / (k1 - k0), 0.0, 1.0)
        g = lambda di, dj: tf.gather_nd(grid, tf.stack([i + di, j + dj], 1))  # noqa: E731
        return (1 - a) * (1 - b) * g(0, 0) + (1 - a) * b * g(0, 1) + a * (1 - b) * g(1, 0) + a * b * g(1, 1), i, j

    hist = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            vol, i, j = interp(qt, qk)
            price = bs_call(tf, 100.0, qk, qt, 0.01, vol)[0]
            loss = tf.reduce_sum(tf.square(price - quotes))
        hist.append((vol, i, j, price, tape.gradient(price, [grid, qk]), tape.gradient(vol, qk)))
        grid.assign_sub(1e-4 * tape.gradient(loss, grid))
        del tape
    return hist, grid


@parity(**TOL)
def test_greeks_by_forward_accumulator_against_the_tape(tf):
    """Vega of a Black-Scholes strip by ``ForwardAccumulator`` (one JVP with tangent 1 on sigma),
    delta likewise, gamma by forward-over-reverse (a tape inside the accumulator), and the same
    from tapes; with ``ncdf`` by ``erfc``."""
    s = tf.constant([90.0, 100.0, 110.0])
    sigma = tf.constant([0.2, 0.25, 0.3])
    k = 100.0
    with tf.autodiff.ForwardAccumulator(sigma, tf.ones_like(sigma)) as acc:
        price = bs_call(tf, s, k, 1.0, 0.02, sigma)[0]
    vega_fwd = acc.jvp(price)
    with tf.autodiff.ForwardAccumulator(s, tf.ones_like(s)) as acc:
        with tf.GradientTape() as tape:
            tape.watch(s)
            price = bs_call(tf, s, k, 1.0, 0.02, sigma)[0]
        delta = tape.gradient(price, s)
    gamma_fwd = acc.jvp(delta)
    with tf.GradientTape(persistent=True) as outer:
        outer.watch([s, sigma])
        with tf.GradientTape() as inner:
            inner.watch(s)
            p = bs_call(tf, s, k, 1.0, 0.02, sigma)[0]
        d = inner.gradient(p, s)
    out = vega_fwd, delta, gamma_fwd, outer.gradient(p, sigma), outer.gradient(d, s), ncdf(tf, tf.constant(0.0))
    del outer
    return out
