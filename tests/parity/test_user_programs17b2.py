"""Round seventeen (b), second part: sampling and inference, optimisation algorithms written with
tapes, and linear-algebra gradients at their edges, each run under real TensorFlow 2.21 and under
tapejax. Hamiltonian Monte Carlo whose potential gradient comes from an inner tape, unadjusted
Langevin dynamics, reparameterised variational inference with an analytic KL, a mixture density
network, a Kalman filter's log-likelihood over ``tf.scan``, a Laplace approximation by nested
tapes; L-BFGS's two-loop recursion, Newton's method, Levenberg-Marquardt from ``tape.jacobian``,
implicit differentiation of a fixed point by ``tf.custom_gradient``, projected gradient descent;
gradients through ``svd``, ``eigh``, ``qr``, ``expm``, ``sqrtm``, ``einsum``, ``tensordot``,
``norm`` and ``pinv``. Random draws come from NumPy and are fed in (tapejax's stateless ops run
JAX's Threefry, not TF's Philox); float32 throughout.
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-4, atol=2e-5)


# ---------------------------------------------------------------------------
# Sampling and inference
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_hmc_leapfrog_with_an_inner_tape_potential_gradient(tf):
    """HMC on a correlated 2-D Gaussian: the potential's gradient by an inner ``GradientTape`` in
    each of 4 leapfrog steps, momenta and the Metropolis uniform fed from NumPy, the accept
    decision by ``tf.where`` on a tensor comparison; 5 transitions in a compiled function, each
    state, the Hamiltonian change and the accept flags."""
    rs = np.random.RandomState(7)
    moms = rs.randn(5, 2).astype(np.float32)
    us = rs.uniform(size=5).astype(np.float32)
    prec = tf.constant([[2.0, -1.2], [-1.2, 1.5]])

    def potential(q):
        return 0.5 * tf.reduce_sum(q * tf.linalg.matvec(prec, q))

    def grad_u(q):
        with tf.GradientTape() as t:
            t.watch(q)
            u = potential(q)
        return t.gradient(u, q)

    @tf.function
    def transition(q, p, u):
        eps = 0.2
        q1, p1 = q, p - 0.5 * eps * grad_u(q)
        for i in range(4):
            q1 = q1 + eps * p1
            if i < 3:
                p1 = p1 - eps * grad_u(q1)
        p1 = p1 - 0.5 * eps * grad_u(q1)
        h0 = potential(q) + 0.5 * tf.reduce_sum(tf.square(p))
        h1 = potential(q1) + 0.5 * tf.reduce_sum(tf.square(p1))
        accept = tf.math.log(u) < h0 - h1
        return tf.where(accept, q1, q), h1 - h0, accept

    q = tf.constant([1.5, -1.0])
    out = []
    for i in range(5):
        q, dh, acc = transition(q, tf.constant(moms[i]), tf.constant(us[i]))
        out.append((q, dh, acc))
    return out


@parity(modes=True, **TOL)
def test_unadjusted_langevin_on_a_banana_density_eager_and_compiled(tf):
    """Unadjusted Langevin dynamics ``x += eps * grad log p(x) + sqrt(2 eps) * noise`` on a banana
    density for 6 steps of a batch of 4 chains, the score by ``tape.gradient`` of the summed
    log-density w.r.t. the chains (a watched tensor); eagerly and in a compiled ``tf.range`` loop
    with the noise indexed from a fed tensor."""
    noise = np.random.RandomState(8).randn(6, 4, 2).astype(np.float32)
    x0 = np.random.RandomState(9).randn(4, 2).astype(np.float32)

    def logp(x):
        return -0.5 * tf.square(x[:, 0]) / 4.0 - 0.5 * tf.square(x[:, 1] - 0.5 * tf.square(x[:, 0]) + 1.0)

    def score(x):
        with tf.GradientTape() as t:
            t.watch(x)
            lp = tf.reduce_sum(logp(x))
        return t.gradient(lp, x)

    def run(x, nz, rng):
        for i in rng(6):
            x = x + 0.05 * score(x) + np.sqrt(0.1).astype(np.float32) * nz[i]
        return x, logp(x)

    eager = run(tf.constant(x0), tf.constant(noise), range)
    compiled = tf.function(lambda x, nz: run(x, nz, tf.range))(tf.constant(x0), tf.constant(noise))
    return eager, compiled


@parity(modes=True, rtol=2e-4, atol=1e-3)  # the mu gradient's entries are ~50: 1e-3 is its float32 round-off
def test_variational_bayes_regression_by_reparameterisation_and_analytic_kl(tf):
    """Mean-field VI for Bayesian linear regression: ``q(w) = N(mu, softplus(rho)^2)``, 3 Monte Carlo
    draws per step by the reparameterisation trick (fed NumPy noise), the Gaussian log-likelihood
    and the analytic KL to ``N(0, 1)``; the ELBO, its gradient w.r.t. ``mu`` and ``rho`` and the
    fitted variational parameters after 5 Adam steps."""
    rs = np.random.RandomState(10)
    x = rs.randn(10, 3).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5]) + 0.3 * rs.randn(10)).astype(np.float32)
    eps = rs.randn(5, 3, 3).astype(np.float32)
    mu = tf.Variable(np.zeros(3, np.float32))
    rho = tf.Variable(np.full(3, -1.0, np.float32))
    opt = tf.keras.optimizers.Adam(0.1)
    hist = []
    for step in range(5):
        with tf.GradientTape() as tape:
            sigma = tf.nn.softplus(rho)
            w = mu + sigma * eps[step]                       # [3 samples, 3]
            pred = tf.einsum("nd,sd->sn", x, w)
            ll = tf.reduce_mean(tf.reduce_sum(-0.5 * tf.square(y - pred) / 0.25
                                              - 0.5 * np.log(2 * np.pi * 0.25), -1))
            kl = tf.reduce_sum(0.5 * (tf.square(sigma) + tf.square(mu) - 1.0) - tf.math.log(sigma))
            elbo = ll - kl
            loss = -elbo
        g = tape.gradient(loss, [mu, rho])
        opt.apply_gradients(zip(g, [mu, rho]))
        hist.append((elbo, kl, g))
    return hist, mu.numpy(), rho.numpy()


@parity(modes=True, **TOL)
def test_mixture_density_network_loss_by_reduce_logsumexp(tf):
    """A mixture density network (one hidden layer, 3 Gaussian components) on a multimodal 1-D
    target: mixture weights by ``log_softmax``, scales by ``exp``, the NLL by ``reduce_logsumexp``
    over components; 3 SGD steps in a compiled step, the losses, gradients and the mixture
    parameters at two inputs."""
    rs = np.random.RandomState(11)
    x = rs.uniform(-1, 1, (12, 1)).astype(np.float32)
    y = (np.sin(3 * x) + np.where(rs.rand(12, 1) > 0.5, 1.0, -1.0) + 0.1 * rs.randn(12, 1)).astype(np.float32)
    w1 = tf.Variable(init_array((1, 8), 60, 1.0))
    b1 = tf.Variable(np.zeros(8, np.float32))
    w2 = tf.Variable(init_array((8, 9), 61, 0.3))
    b2 = tf.Variable(np.zeros(9, np.float32))
    vs = [w1, b1, w2, b2]

    def params(x):
        h = tf.tanh(tf.matmul(x, w1) + b1)
        logits, mean, log_s = tf.split(tf.matmul(h, w2) + b2, 3, axis=-1)
        return tf.nn.log_softmax(logits), mean, log_s

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logpi, mean, log_s = params(x)
            comp = -0.5 * tf.square((y - mean) * tf.exp(-log_s)) - log_s - 0.5 * np.log(2 * np.pi)
            loss = -tf.reduce_mean(tf.reduce_logsumexp(logpi + comp, axis=-1))
        g = tape.gradient(loss, vs)
        for v, gi in zip(vs, g):
            v.assign_sub(0.1 * gi)
        return loss, g

    hist = [step(x, y) for _ in range(3)]
    return hist, params(tf.constant([[-0.5], [0.5]]))


@parity(modes=True, **TOL)
def test_kalman_filter_log_likelihood_over_scan_w_r_t_noise_parameters(tf):
    """A 2-D constant-velocity Kalman filter over 8 noisy position observations written as
    ``tf.scan`` over (mean, covariance, log-likelihood) carries; the log-likelihood and its gradient
    w.r.t. the log process- and observation-noise Variables, eagerly and compiled, then 3 Adam
    steps of maximum likelihood."""
    rs = np.random.RandomState(12)
    obs = (np.cumsum(0.5 + 0.2 * rs.randn(8)) + 0.3 * rs.randn(8)).astype(np.float32)[:, None]
    log_q = tf.Variable(-2.0)
    log_r = tf.Variable(-1.0)
    f = tf.constant([[1.0, 1.0], [0.0, 1.0]])
    h = tf.constant([[1.0, 0.0]])

    def loglik():
        q = tf.exp(log_q) * tf.constant([[1 / 3, 1 / 2], [1 / 2, 1.0]])
        r = tf.exp(log_r)

        def body(carry, z):
            m, p, ll = carry
            m = tf.linalg.matvec(f, m)
            p = tf.matmul(tf.matmul(f, p), f, transpose_b=True) + q
            s = tf.matmul(tf.matmul(h, p), h, transpose_b=True)[0, 0] + r
            k = tf.matmul(p, h, transpose_b=True)[:, 0] / s
            innov = z[0] - m[0]
            m = m + k * innov
            p = p - tf.matmul(k[:, None], tf.matmul(h, p))
            ll = ll - 0.5 * (tf.math.log(2 * np.pi * s) + tf.square(innov) / s)
            return m, p, ll

        init = (tf.constant([0.0, 0.5]), tf.eye(2), tf.constant(0.0))
        ms, ps, lls = tf.scan(body, tf.constant(obs), initializer=init)
        return lls[-1], ms

    def grad():
        with tf.GradientTape() as tape:
            ll, ms = loglik()
        return ll, ms, tape.gradient(ll, [log_q, log_r])

    eager = grad()
    compiled = tf.function(grad)()
    opt = tf.keras.optimizers.Adam(0.1)
    hist = []
    for _ in range(3):
        ll, _, g = grad()
        opt.apply_gradients(zip([-gi for gi in g], [log_q, log_r]))
        hist.append(ll)
    return eager, compiled, hist, log_q.numpy(), log_r.numpy()


@parity(modes=True, **TOL)
def test_laplace_approximation_of_bayesian_logistic_regression(tf):
    """Bayesian logistic regression with a ``N(0, I)`` prior: the MAP by 4 Newton steps (gradient
    and Hessian by nested tapes, ``tape.jacobian`` of the gradient, ``linalg.solve``), then the
    Laplace posterior covariance by ``linalg.inv`` of the Hessian, the log evidence by ``logdet``,
    and the predictive probit-approximated probability at two inputs; the Hessian is also taken
    by a persistent tape's ``jacobian`` with ``experimental_use_pfor=False``."""
    rs = np.random.RandomState(13)
    x = np.concatenate([rs.randn(16, 2), np.ones((16, 1))], 1).astype(np.float32)
    y = (rs.rand(16) < 1 / (1 + np.exp(-(x @ [1.5, -1.0, 0.3])))).astype(np.float32)

    def neg_log_post(w):
        logits = tf.linalg.matvec(x, w)
        nll = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        return nll + 0.5 * tf.reduce_sum(tf.square(w))

    def grad_hess(w):
        with tf.GradientTape() as outer:
            outer.watch(w)
            with tf.GradientTape() as inner:
                inner.watch(w)
                f = neg_log_post(w)
            g = inner.gradient(f, w)
        return f, g, outer.jacobian(g, w)

    w = tf.zeros([3])
    hist = []
    for _ in range(4):
        f, g, hmat = grad_hess(w)
        w = w - tf.linalg.solve(hmat, g[:, None])[:, 0]
        hist.append((f, tf.norm(g)))
    f, g, hmat = grad_hess(w)
    with tf.GradientTape(persistent=True) as t:
        t.watch(w)
        with tf.GradientTape() as t1:
            t1.watch(w)
            f2 = neg_log_post(w)
        g2 = t1.gradient(f2, w)
    h_loop = t.jacobian(g2, w, experimental_use_pfor=False)
    del t
    cov = tf.linalg.inv(hmat)
    log_ev = -f + 1.5 * np.log(2 * np.pi).astype(np.float32) - 0.5 * tf.linalg.logdet(hmat) \
        - 1.5 * np.log(2 * np.pi).astype(np.float32)
    xs = tf.constant([[0.5, -0.5, 1.0], [-1.0, 1.0, 1.0]])
    mu = tf.linalg.matvec(xs, w)
    var = tf.reduce_sum(tf.matmul(xs, cov) * xs, -1)
    prob = tf.sigmoid(mu / tf.sqrt(1.0 + np.pi * var / 8.0))
    return hist, w, hmat, h_loop, cov, log_ev, prob


# ---------------------------------------------------------------------------
# Optimisation algorithms written with tapes
# ---------------------------------------------------------------------------

def _rosenbrock(tf, x):
    return tf.reduce_sum(100.0 * tf.square(x[1:] - tf.square(x[:-1])) + tf.square(1.0 - x[:-1]))


@parity(modes=True, **TOL)
def test_lbfgs_two_loop_recursion_in_python_over_tensors(tf):
    """L-BFGS (memory 3) on a 3-D Rosenbrock function: the gradient by a tape each iteration, the
    two-loop recursion over Python lists of ``(s, y)`` tensors with ``tensordot`` inner products,
    a backtracking Armijo line search in Python on tensor comparisons; 6 iterations, the
    objective, gradient norm and step length per iteration and the final point."""
    x = tf.Variable([-1.2, 1.0, 0.8])

    def fg():
        with tf.GradientTape() as t:
            f = _rosenbrock(tf, x)
        return f, t.gradient(f, x)

    mem, hist = [], []
    f, g = fg()
    for _ in range(6):
        q, alphas = g, []
        for s, y in reversed(mem):
            rho = 1.0 / tf.tensordot(y, s, 1)
            a = rho * tf.tensordot(s, q, 1)
            q = q - a * y
            alphas.append((rho, a))
        gamma = tf.tensordot(mem[-1][0], mem[-1][1], 1) / tf.tensordot(mem[-1][1], mem[-1][1], 1) if mem else 1e-3
        r = gamma * q
        for (s, y), (rho, a) in zip(mem, reversed(alphas)):
            b = rho * tf.tensordot(y, r, 1)
            r = r + s * (a - b)
        d = -r
        step, x_old = 1.0, tf.identity(x)
        while True:
            x.assign(x_old + step * d)
            f_new, g_new = fg()
            if bool(f_new <= f + 1e-4 * step * tf.tensordot(g, d, 1)) or step < 1e-3:
                break
            step *= 0.5
        mem = (mem + [(x - x_old, g_new - g)])[-3:]
        f, g = f_new, g_new
        hist.append((f, tf.norm(g), step))
    return hist, x.numpy()


@parity(modes=True, **TOL)
def test_newton_method_with_a_hessian_solve_compiled(tf):
    """Newton's method on a smooth convex function (log-sum-exp plus a quadratic) in a compiled
    function: the gradient and Hessian by nested tapes (``tape.jacobian`` of the gradient inside
    ``tf.function``), the step by ``tf.linalg.solve``; 4 iterations in a ``tf.range`` loop with a
    ``TensorArray`` of objective values, and the gradient of the optimum w.r.t. a data Variable
    (differentiated through the unrolled solver by an outer tape)."""
    a = tf.Variable([[1.0, 2.0, -1.0], [0.5, -1.0, 1.0], [-1.0, 0.3, 0.2], [0.2, 0.1, 1.5]])

    def obj(w):
        return tf.reduce_logsumexp(tf.linalg.matvec(a, w)) + 0.5 * tf.reduce_sum(tf.square(w))

    @tf.function
    def solve(w):
        fs = tf.TensorArray(tf.float32, size=4)
        for i in tf.range(4):
            with tf.GradientTape() as t2:
                t2.watch(w)
                with tf.GradientTape() as t1:
                    t1.watch(w)
                    f = obj(w)
                g = t1.gradient(f, w)
            hmat = t2.jacobian(g, w)
            w = w - tf.linalg.solve(hmat, g[:, None])[:, 0]
            fs = fs.write(i, f)
        return w, fs.stack()

    with tf.GradientTape() as outer:
        w, fs = solve(tf.constant([1.0, -1.0, 0.5]))
        val = obj(w)
    return w, fs, val, outer.gradient(val, a)


@parity(modes=True, **TOL)
def test_levenberg_marquardt_from_the_jacobian_of_residuals(tf):
    """Levenberg-Marquardt fitting ``y = a * exp(-b t) + c`` to 10 noisy points: the residual
    Jacobian by ``tape.jacobian`` (and once by a non-pfor loop), the damped normal equations
    ``(J^T J + lam diag(J^T J)) delta = -J^T r`` solved by ``cholesky_solve``, the damping raised or
    lowered on a Python comparison of tensor costs; 4 iterations, costs, damping and parameters
    (a fifth compares two costs equal to float32 rounding at convergence: XLA 0.12's CPU rounding
    took the other branch from TF's)."""
    rs = np.random.RandomState(14)
    t = np.linspace(0, 3, 10).astype(np.float32)
    y = (2.0 * np.exp(-1.3 * t) + 0.5 + 0.02 * rs.randn(10)).astype(np.float32)

    def residuals(p):
        return p[0] * tf.exp(-p[1] * t) + p[2] - y

    p = tf.constant([1.0, 0.5, 0.0])
    lam, hist = 1e-2, []
    for it in range(4):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(p)
            r = residuals(p)
        jac = tape.jacobian(r, p)
        jac_loop = tape.jacobian(r, p, experimental_use_pfor=False) if it == 0 else jac
        del tape
        jtj = tf.matmul(jac, jac, transpose_a=True)
        a = jtj + lam * tf.linalg.diag(tf.linalg.diag_part(jtj))
        delta = tf.linalg.cholesky_solve(tf.linalg.cholesky(a), -tf.linalg.matvec(jac, r, transpose_a=True)[:, None])
        p_new = p + delta[:, 0]
        cost, cost_new = tf.reduce_sum(tf.square(r)), tf.reduce_sum(tf.square(residuals(p_new)))
        if cost_new < cost:
            p, lam = p_new, lam * 0.3
        else:
            lam = lam * 10.0
        hist.append((cost, cost_new, lam, jac_loop))
    return hist, p


@parity(modes=True, **TOL)
def test_implicit_differentiation_of_a_fixed_point_by_custom_gradient(tf):
    """A deep-equilibrium-style layer ``z* = tanh(W z* + x)`` solved by 30 forward iterations
    under ``tf.custom_gradient`` whose backward solves ``(I - J)^T v = dy`` with ``J`` the Jacobian of
    the map at ``z*`` (``tape.batch_jacobian`` inside ``grad_fn``) and ``linalg.solve``; the
    gradient w.r.t. ``W`` (a Variable, via ``variables=``) and ``x`` against unrolled
    differentiation through the 30 iterations."""
    w = tf.Variable(init_array((3, 3), 70, 0.3))
    x = tf.constant(init_array((2, 3), 71, 1.0))

    def fmap(z, x):
        return tf.tanh(tf.matmul(z, w) + x)

    @tf.custom_gradient
    def fixed_point(x):
        z = tf.zeros_like(x)
        for _ in range(30):
            z = fmap(z, x)

        def grad_fn(dy, variables=None):
            with tf.GradientTape() as t:
                t.watch(z)
                fz = fmap(z, x)
            jac = t.batch_jacobian(fz, z)                   # [b, out, in]
            eye = tf.eye(3, batch_shape=[2])
            v = tf.linalg.solve(tf.transpose(eye - jac, [0, 2, 1]), dy[:, :, None])[:, :, 0]
            with tf.GradientTape() as t2:
                t2.watch(x)
                fz = fmap(z, x)
            gx, gw = t2.gradient(fz, [x, variables[0]], output_gradients=v)
            return gx, [gw]

        return z, grad_fn

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        z_imp = fixed_point(x)
        loss_imp = tf.reduce_sum(tf.square(z_imp - 0.2))
        z = tf.zeros_like(x)
        for _ in range(30):
            z = fmap(z, x)
        loss_unr = tf.reduce_sum(tf.square(z - 0.2))
    return (z_imp, tape.gradient(loss_imp, [w, x]), tape.gradient(loss_unr, [w, x]))


@parity(modes=True, **TOL)
def test_projected_gradient_descent_onto_a_box_and_the_simplex(tf):
    """Projected gradient descent: a nonnegative least-squares fit projected by
    ``assign(clip_by_value(w, 0, 1))`` each step (some weights pinned at the bounds), and a
    portfolio on the probability simplex projected by the sort-based Euclidean projection
    (``sort``, ``cumsum``, a boolean mask's ``reduce_max`` index); 5 steps each, compiled."""
    rs = np.random.RandomState(15)
    a = rs.randn(8, 4).astype(np.float32)
    b = (a @ np.array([0.5, 1.5, -0.3, 0.2]) + 0.05 * rs.randn(8)).astype(np.float32)
    mu = np.array([0.1, 0.2, 0.15, 0.05], np.float32)
    sig = (0.1 * np.eye(4) + 0.02).astype(np.float32)
    w = tf.Variable(np.full(4, 0.5, np.float32))
    p = tf.Variable(np.full(4, 0.25, np.float32))

    def simplex(v):
        u = tf.sort(v, direction="DESCENDING")
        css = tf.cumsum(u) - 1.0
        idx = tf.range(1, 5, dtype=tf.float32)
        cond = tf.cast(u - css / idx > 0, tf.float32)
        rho = tf.reduce_max(cond * idx)
        theta = tf.reduce_sum(cond * (u - u + css) * tf.cast(tf.equal(idx, rho), tf.float32)) / rho
        return tf.maximum(v - theta, 0.0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            l1 = tf.reduce_sum(tf.square(tf.linalg.matvec(a, w) - b))
            l2 = tf.reduce_sum(p * tf.linalg.matvec(sig, p)) - 2.0 * tf.reduce_sum(mu * p)
        gw, gp = tape.gradient([l1, l2], [w, p])
        w.assign(tf.clip_by_value(w - 0.02 * gw, 0.0, 1.0))
        p.assign(simplex(p - 0.5 * gp))
        return l1, l2, gw, gp

    hist = [step() for _ in range(5)]
    return hist, w.numpy(), p.numpy(), tf.reduce_sum(p)


# ---------------------------------------------------------------------------
# Linear-algebra gradients at their edges
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_orthogonal_procrustes_by_svd_and_rank_one_denoising(tf):
    """Procrustes alignment: the rotation ``U V^T`` from ``linalg.svd`` of ``B^T A`` (distinct
    singular values) and the alignment loss's gradient w.r.t. ``A`` through the SVD; the nuclear
    norm and the best rank-1 reconstruction ``s0 u0 v0^T`` of a matrix and their gradients;
    ``full_matrices=True`` of a tall matrix and ``compute_uv=False``."""
    a = tf.Variable(init_array((5, 3), 80, 1.0))
    b = tf.constant(init_array((5, 3), 81, 1.0))
    with tf.GradientTape(persistent=True) as tape:
        s, u, v = tf.linalg.svd(tf.matmul(b, a, transpose_a=True))
        rot = tf.matmul(u, v, transpose_b=True)
        align = tf.reduce_sum(tf.square(tf.matmul(a, rot, transpose_b=True) - b))
        s_only = tf.linalg.svd(a, compute_uv=False)
        nuclear = tf.reduce_sum(s_only)
        s2, u2, v2 = tf.linalg.svd(a)
        rank1 = s2[0] * tf.matmul(u2[:, :1], v2[:, :1], transpose_b=True)
        rank1_err = tf.reduce_sum(tf.square(a - rank1))
    sf, uf, vf = tf.linalg.svd(a, full_matrices=True)
    out = (s, rot, align, tape.gradient(align, a), nuclear, tape.gradient(nuclear, a),
           rank1, tape.gradient(rank1_err, a), sf, tf.abs(uf[:, :3]), tf.abs(vf))
    del tape
    return out


@parity(modes=True, **TOL)
def test_eigh_rayleigh_quotients_and_qr_orthonormalisation(tf):
    """Gradients through ``linalg.eigh`` of a symmetric matrix with distinct eigenvalues: the
    largest eigenvalue, the projector ``v v^T`` onto the top eigenvector (sign-free), the log
    spectrum; ``eigvalsh``; and a QR orthonormalisation (Gram-Schmidt replacement) of a tall
    matrix whose ``|diag(R)|`` and ``Q Q^T`` projector feed a loss differentiated w.r.t. the input."""
    m = tf.Variable(init_array((4, 4), 90, 1.0))
    x = tf.Variable(init_array((5, 3), 91, 1.0))
    with tf.GradientTape(persistent=True) as tape:
        sym = tf.matmul(m, m, transpose_b=True) + tf.linalg.diag([0.1, 0.5, 1.0, 2.0])
        e, v = tf.linalg.eigh(sym)
        top = e[-1]
        proj = tf.matmul(v[:, -1:], v[:, -1:], transpose_b=True)
        proj_loss = tf.reduce_sum(proj * tf.constant(init_array((4, 4), 92, 1.0)))
        logspec = tf.reduce_sum(tf.math.log(tf.linalg.eigvalsh(sym)))
        q, r = tf.linalg.qr(x)
        qproj = tf.matmul(q, q, transpose_b=True)
        qr_loss = tf.reduce_sum(tf.math.log(tf.abs(tf.linalg.diag_part(r)))) + tf.reduce_sum(qproj[0])
    out = (e, tf.abs(v), top, tape.gradient(top, m), proj, tape.gradient(proj_loss, m), logspec,
           tape.gradient(logspec, m), tf.abs(r), qproj, tape.gradient(qr_loss, x))
    del tape
    return out


@parity(modes=True, **TOL)
def test_rotation_by_expm_of_a_skew_matrix_and_a_matrix_square_root(tf):
    """A 3-D rotation ``expm(K)`` of a skew-symmetric generator built from 3 Variables is fitted to
    map points onto rotated targets (4 SGD steps, the rotation stays orthogonal); a covariance's
    ``sqrtm`` (``tf.linalg.sqrtm``) and its gradient, against the Cholesky factor's Frobenius norm."""
    theta = tf.Variable([0.1, -0.2, 0.05])
    rs = np.random.RandomState(16)
    pts = rs.randn(6, 3).astype(np.float32)
    c, s_ = np.cos(0.7), np.sin(0.7)
    target = (pts @ np.array([[c, -s_, 0], [s_, c, 0], [0, 0, 1]]).T).astype(np.float32)

    def rotation():
        a, b, g = theta[0], theta[1], theta[2]
        z = tf.zeros([])
        k = tf.stack([tf.stack([z, -g, b]), tf.stack([g, z, -a]), tf.stack([-b, a, z])])
        return tf.linalg.expm(k)

    hist = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            r = rotation()
            loss = tf.reduce_mean(tf.square(tf.matmul(pts, r, transpose_b=True) - target))
        g = tape.gradient(loss, theta)
        theta.assign_sub(0.5 * g)
        hist.append((loss, g))
    r = rotation()
    ortho = tf.matmul(r, r, transpose_a=True)
    cov = tf.Variable(np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]], np.float32))
    with tf.GradientTape(persistent=True) as tape:
        root = tf.linalg.sqrtm(cov)
        fro = tf.reduce_sum(tf.square(root))
        chol_fro = tf.reduce_sum(tf.square(tf.linalg.cholesky(cov)))
        weighted = tf.reduce_sum(root * tf.constant([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0]]))
    out = (hist, theta.numpy(), ortho, root, tf.matmul(root, root), fro, tape.gradient(fro, cov), chol_fro,
           tape.gradient(chol_fro, cov), tape.gradient(weighted, cov))
    del tape
    return out


@parity(modes=True, **TOL)
def test_einsum_tensordot_norms_and_pinv_in_a_physics_fit(tf):
    """A bilinear interaction model written with ``einsum`` (``'bi,ijk,bj->bk'``, a trace
    ``'ii->'``, a batched outer product) and ``tensordot`` with paired axes, regularised by
    ``linalg.norm`` at several orders (``'fro'``, ``'euclidean'``, ``1``, ``2`` of a vector,
    ``np.inf`` and ``1`` of a matrix over ``axis=[-2, -1]``), and a ``pinv`` least-squares readout;
    the value of each term and the gradients w.r.t. the coupling tensor and the readout input."""
    t3 = tf.Variable(init_array((3, 3, 2), 100, 0.5))
    m = tf.Variable(init_array((4, 3), 101, 1.0))
    x = tf.constant(init_array((5, 3), 102, 1.0))
    y = tf.constant(init_array((5, 2), 103, 1.0))
    with tf.GradientTape(persistent=True) as tape:
        out = tf.einsum("bi,ijk,bj->bk", x, t3, x)
        tr = tf.einsum("ii->", t3[:, :, 0])
        outer = tf.einsum("bi,bj->bij", x, out)
        td = tf.tensordot(x, t3, axes=[[1], [0]])                   # [5, 3, 2]
        td2 = tf.tensordot(t3, t3, axes=[[0, 1], [0, 1]])            # [2, 2]
        norms = [tf.norm(t3[:, :, 0], "fro", axis=[-2, -1]), tf.norm(t3, "euclidean"),
                 tf.norm(out[0], 1), tf.norm(out[0], 2), tf.norm(t3[:, :, 1], np.inf, axis=[-2, -1]),
                 tf.norm(t3[:, :, 1], 1, axis=[-2, -1])]
        loss = tf.reduce_mean(tf.square(out - y)) + 0.01 * tf.add_n(norms) + 0.1 * tr \
            + 0.01 * tf.reduce_sum(td2) + 0.001 * tf.reduce_sum(outer) + 0.001 * tf.reduce_sum(td)
        readout = tf.matmul(tf.linalg.pinv(m), tf.constant(init_array((4, 2), 104, 1.0)))
        ro_loss = tf.reduce_sum(tf.square(readout))
    grads = [tape.gradient(n, t3) for n in norms]
    res = (out, tr, td2, norms, loss, tape.gradient(loss, t3), grads, readout, tape.gradient(ro_loss, m))
    del tape
    return res
