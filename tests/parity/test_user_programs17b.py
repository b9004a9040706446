"""Round seventeen (b) of realistic user programs, each run under real TensorFlow 2.21 and under
tapejax: scientists' programs that differentiate likelihoods, flows and simulators. Gaussian-process
regression (a softplus-constrained kernel fitted by Adam through a Cholesky log marginal
likelihood, its predictive mean and variance; the same likelihood's gradient by ``logdet``,
``slogdet``, ``matrix_inverse``, ``matrix_solve`` and ``lstsq``; a sparse variational GP's ELBO
written with ``LinearOperator``s), normalising flows (RealNVP coupling layers and a planar flow
fitted by maximum likelihood, their log-determinants checked against ``batch_jacobian``),
physics (a PINN with nested tapes, a neural ODE through a hand-written RK4 solver, a mass-spring
simulation in a ``while_loop``, a heat-equation residual, a trajectory optimisation, a knife-edge
diffraction fit by ``tf.math.special.fresnel_cos`` / ``fresnel_sin``) and
decompositions at tied values (``eigh`` and ``svd`` of an identity-initialised parameter, where
TF's gradients take a safe reciprocal of the gaps; ``logdet`` reading the lower triangle). Sampling,
inference, tape-written optimisers and linear-algebra gradients are in
``test_user_programs17b2.py``. Data is drawn with NumPy and fed in; float32 throughout.
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-4, atol=2e-5)


def _gp_data(n=8, seed=0):
    rs = np.random.RandomState(seed)
    x = np.sort(rs.uniform(-2, 2, (n, 1)), axis=0).astype(np.float32)
    y = (np.sin(2 * x) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return x, y


def _rbf(tf, a, b, ls, var):
    d = tf.reduce_sum(tf.square(a[:, None, :] - b[None, :, :]), -1)
    return var * tf.exp(-0.5 * d / tf.square(ls))


# ---------------------------------------------------------------------------
# Gaussian processes
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_gp_softplus_hyperparameters_fitted_by_adam_then_predictive(tf):
    """GP regression with length-scale, signal and noise variance as unconstrained Variables mapped
    through ``softplus``: the negative log marginal likelihood by ``cholesky``, ``triangular_solve``
    (twice) and ``2 * sum(log(diag(L)))``, minimised by Adam for 6 steps in a compiled step; then
    the predictive mean by ``cholesky_solve`` and the variance by a triangular solve at 3 test points."""
    x, y = _gp_data()
    xs = np.array([[-1.5], [0.1], [1.7]], np.float32)
    raw = [tf.Variable(0.3, name="ls"), tf.Variable(0.0, name="var"), tf.Variable(-2.0, name="noise")]
    opt = tf.keras.optimizers.Adam(0.05)

    def hyper():
        return [tf.nn.softplus(r) + 1e-4 for r in raw]

    def nll():
        ls, var, noise = hyper()
        k = _rbf(tf, x, x, ls, var) + noise * tf.eye(8)
        chol = tf.linalg.cholesky(k)
        a = tf.linalg.triangular_solve(chol, y, lower=True)
        logdet = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
        return 0.5 * tf.reduce_sum(tf.square(a)) + 0.5 * logdet + 4.0 * np.log(2 * np.pi).astype(np.float32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = nll()
        grads = tape.gradient(loss, raw)
        opt.apply_gradients(zip(grads, raw))
        return loss, grads

    hist = [step() for _ in range(6)]
    ls, var, noise = hyper()
    k = _rbf(tf, x, x, ls, var) + noise * tf.eye(8)
    chol = tf.linalg.cholesky(k)
    ks = _rbf(tf, x, xs, ls, var)
    mean = tf.matmul(ks, tf.linalg.cholesky_solve(chol, y), transpose_a=True)
    v = tf.linalg.triangular_solve(chol, ks, lower=True)
    pvar = var - tf.reduce_sum(tf.square(v), 0)
    return hist, [r.numpy() for r in raw], mean, pvar


@parity(modes=True, **TOL)
def test_gp_likelihood_gradient_by_five_equivalent_formulations(tf):
    """The GP negative log-likelihood written five ways (``logdet`` + ``matrix_solve``, ``slogdet`` +
    ``matrix_inverse``, Cholesky + ``cholesky_solve``, ``lstsq`` for the quadratic term,
    ``linalg.inv`` + ``det``): each value and its gradient w.r.t. the log length-scale and log noise."""
    x, y = _gp_data(6, seed=1)
    log_ls = tf.Variable(-0.2)
    log_noise = tf.Variable(-1.5)

    def kmat():
        return _rbf(tf, x, x, tf.exp(log_ls), 1.0) + tf.exp(log_noise) * tf.eye(6)

    forms = {
        "logdet_solve": lambda k: tf.linalg.logdet(k) + tf.reduce_sum(y * tf.linalg.solve(k, y)),
        "slogdet_inverse": lambda k: tf.linalg.slogdet(k)[1] + tf.reduce_sum(y * tf.matmul(tf.linalg.inv(k), y)),
        "cholesky": lambda k: (2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(tf.linalg.cholesky(k))))
                               + tf.reduce_sum(y * tf.linalg.cholesky_solve(tf.linalg.cholesky(k), y))),
        "lstsq": lambda k: tf.linalg.logdet(k) + tf.reduce_sum(y * tf.linalg.lstsq(k, y, fast=True)),
        "det": lambda k: tf.math.log(tf.linalg.det(k)) + tf.reduce_sum(y * tf.matmul(tf.linalg.inv(k), y)),
    }
    out = {}
    for name, f in forms.items():
        with tf.GradientTape() as tape:
            loss = 0.5 * f(kmat())
        out[name] = (loss, tape.gradient(loss, [log_ls, log_noise]))
    return out


@parity(modes=True, **TOL)
def test_sparse_variational_gp_elbo_with_linear_operators(tf):
    """An SVGP's ELBO with 3 inducing points: ``Kuu`` as a ``LinearOperatorFullMatrix`` (its
    ``cholesky``, ``solve``, ``log_abs_determinant``), the variational ``q(u) = N(m, S S^T)`` with ``S``
    a ``LinearOperatorLowerTriangular`` (``to_dense``, ``matmul``, ``diag_part``), the KL term and the
    expected log likelihood; its value and gradients w.r.t. inducing inputs, ``m`` and ``S`` for
    2 SGD steps."""
    x, y = _gp_data(6, seed=2)
    z = tf.Variable(np.array([[-1.0], [0.0], [1.0]], np.float32), name="z")
    m = tf.Variable(np.array([[0.1], [-0.2], [0.3]], np.float32), name="m")
    s_raw = tf.Variable(np.array([[0.5, 0, 0], [0.1, 0.4, 0], [-0.1, 0.2, 0.6]], np.float32), name="s")
    noise = 0.1
    ls = tf.constant(0.8)

    def elbo():
        kuu = tf.linalg.LinearOperatorFullMatrix(_rbf(tf, z, z, ls, 1.0) + 1e-3 * tf.eye(3),
                                                 is_self_adjoint=True, is_positive_definite=True)
        kuf = _rbf(tf, z, x, ls, 1.0)
        s = tf.linalg.LinearOperatorLowerTriangular(s_raw)
        a = kuu.solve(kuf)                                    # Kuu^-1 Kuf
        mean = tf.matmul(a, m.read_value(), transpose_a=True)
        sst = s.matmul(s.to_dense(), adjoint_arg=True)
        var = (1.0 - tf.reduce_sum(kuf * a, 0)
               + tf.reduce_sum(a * tf.matmul(sst, a), 0))[:, None]
        ell = tf.reduce_sum(-0.5 * np.log(2 * np.pi * noise) - 0.5 * (tf.square(y - mean) + var) / noise)
        kinv_s = kuu.solve(sst)
        kl = 0.5 * (tf.linalg.trace(kinv_s)
                    + tf.reduce_sum(m * kuu.solve(m.read_value())) - 3.0
                    + kuu.log_abs_determinant()
                    - 2.0 * tf.reduce_sum(tf.math.log(tf.abs(s.diag_part()))))
        return ell - kl, ell, kl

    out = []
    params = [z, m, s_raw]
    for _ in range(2):
        with tf.GradientTape() as tape:
            e, ell, kl = elbo()
            loss = -e
        g = tape.gradient(loss, params)
        out.append((e, ell, kl, g))
        for p, gi in zip(params, g):
            p.assign_sub(0.01 * gi)
    return out, [p.numpy() for p in params]


# ---------------------------------------------------------------------------
# Normalising flows
# ---------------------------------------------------------------------------

def _coupling_vars(tf, seed, h=4):
    return [tf.Variable(init_array((2, h), seed, 0.4)), tf.Variable(np.zeros(h, np.float32)),
            tf.Variable(init_array((h, 2), seed + 1, 0.3)), tf.Variable(init_array((h, 2), seed + 2, 0.3))]


def _realnvp(tf, layers, masks, x):
    """Forward x -> z through affine couplings; returns z and the summed log|det J|."""
    logdet = tf.zeros(tf.shape(x)[:1])
    for (w1, b1, ws, wt), mk in zip(layers, masks):
        mk = tf.constant(mk)
        h = tf.tanh(tf.matmul(x * mk, w1) + b1)
        s = tf.tanh(tf.matmul(h, ws)) * (1 - mk)
        t = tf.matmul(h, wt) * (1 - mk)
        x = x * mk + (1 - mk) * (x * tf.exp(s) + t)
        logdet += tf.reduce_sum(s, -1)
    return x, logdet


def _moons(n=8, seed=3):
    rs = np.random.RandomState(seed)
    t = rs.uniform(0, np.pi, n)
    return np.stack([np.cos(t), np.sin(t) - 0.3], 1).astype(np.float32) + 0.05 * rs.randn(n, 2).astype(np.float32)


@parity(modes=True, **TOL)
def test_realnvp_fitted_by_maximum_likelihood_and_its_logdet_by_batch_jacobian(tf):
    """Three RealNVP affine coupling layers with alternating masks fitted to a 2-D point cloud by
    maximum likelihood (standard-normal base, Adam, 4 steps): the NLL and the gradient of the
    first layer per step; then the flow's summed log-determinant against ``log|det|`` of
    ``tape.batch_jacobian`` of the flow, and the inverse-free density of two points."""
    data = _moons()
    masks = [np.array([1, 0], np.float32), np.array([0, 1], np.float32), np.array([1, 0], np.float32)]
    layers = [_coupling_vars(tf, 10 * i) for i in range(3)]
    flat = [v for layer in layers for v in layer]
    opt = tf.keras.optimizers.Adam(0.02)

    def nll(x):
        z, ld = _realnvp(tf, layers, masks, x)
        logp = -0.5 * tf.reduce_sum(tf.square(z), -1) - np.log(2 * np.pi).astype(np.float32) + ld
        return -tf.reduce_mean(logp), logp

    hist = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss, _ = nll(data)
        g = tape.gradient(loss, flat)
        opt.apply_gradients(zip(g, flat))
        hist.append((loss, g[:4]))
    x = tf.constant(data[:4])
    with tf.GradientTape() as tape:
        tape.watch(x)
        z, ld = _realnvp(tf, layers, masks, x)
    jac = tape.batch_jacobian(z, x)
    _, logabs = tf.linalg.slogdet(jac)
    return hist, ld, logabs, nll(tf.constant(data[:2]))[1]


@parity(modes=True, **TOL)
def test_planar_flow_density_and_its_jacobian_determinant(tf):
    """Two planar flows ``z + u * tanh(w.z + b)`` on a 2-D Gaussian base, with ``u`` reparameterised
    by TF's invertibility fix (``softplus`` of ``w.u``): the log-density of samples pushed forward,
    its log-det term against ``linalg.det`` of a ``batch_jacobian`` (with ``experimental_use_pfor``
    both ways), and the gradient of a KL-style loss to a target energy w.r.t. every flow parameter."""
    eps = np.random.RandomState(4).randn(5, 2).astype(np.float32)
    ps = [(tf.Variable(init_array((2,), 20 + i)), tf.Variable(init_array((2,), 30 + i)),
           tf.Variable(0.1 * (i + 1))) for i in range(2)]

    def flow(z):
        ld = tf.zeros([5])
        for u, w, b in ps:
            wu = tf.reduce_sum(w * u)
            u_hat = u + (-1.0 + tf.nn.softplus(wu) - wu) * w / tf.reduce_sum(w * w)
            a = tf.reduce_sum(z * w, -1, keepdims=True) + b
            z = z + u_hat * tf.tanh(a)
            psi = (1 - tf.square(tf.tanh(a))) * w
            ld += tf.math.log(tf.abs(1 + tf.reduce_sum(psi * u_hat, -1)))
        return z, ld

    z0 = tf.constant(eps)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(z0)
        zk, ld = flow(z0)
        logq = -0.5 * tf.reduce_sum(tf.square(z0), -1) - np.log(2 * np.pi).astype(np.float32) - ld
        energy = 0.5 * tf.square(tf.norm(zk, axis=-1) - 2.0) / 0.16
        loss = tf.reduce_mean(logq + energy)
    jac = tape.batch_jacobian(zk, z0)
    jac_loop = tape.batch_jacobian(zk, z0, experimental_use_pfor=False)
    grads = tape.gradient(loss, [v for p in ps for v in p])
    del tape
    return loss, ld, tf.math.log(tf.abs(tf.linalg.det(jac))), jac_loop, grads


# ---------------------------------------------------------------------------
# Physics, ODEs and control
# ---------------------------------------------------------------------------

def _pinn_vars(tf, seed=5, h=6):
    return [tf.Variable(init_array((1, h), seed, 1.0)), tf.Variable(init_array((h,), seed + 1, 0.5)),
            tf.Variable(init_array((h, 1), seed + 2, 0.5)), tf.Variable([0.0])]


def _pinn_u(tf, vs, x):
    w1, b1, w2, b2 = vs
    return tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2


@parity(modes=True, **TOL)
def test_pinn_oscillator_residual_by_nested_tapes_three_ways(tf):
    """A PINN for ``u'' + 4u = 0, u(0)=1, u'(0)=0`` on collocation points: ``u_x`` and ``u_xx`` by
    two nested non-persistent tapes, by one persistent inner tape differentiated twice, and by
    ``batch_jacobian`` of ``u_x``; the three residuals agree, and the training loss (residual plus
    the initial conditions) is minimised for 3 Adam steps with the nested-tape form, losses and the
    gradient of the output bias (which the residual sees only through ``u``) recorded."""
    vs = _pinn_vars(tf)
    xc = tf.constant(np.linspace(0, 1.5, 7, dtype=np.float32)[:, None])
    x0 = tf.constant([[0.0]])
    opt = tf.keras.optimizers.Adam(0.01)

    def derivs_nested(x):
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                u = _pinn_u(tf, vs, x)
            ux = t1.gradient(u, x)
        return u, ux, t2.gradient(ux, x)

    def derivs_persistent(x):
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            u = _pinn_u(tf, vs, x)
            ux = t.gradient(u, x)
        uxx = t.gradient(ux, x)
        del t
        return u, ux, uxx

    def derivs_jacobian(x):
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                u = _pinn_u(tf, vs, x)
            ux = t1.gradient(u, x)
        return u, ux, t2.batch_jacobian(ux, x)[:, :, 0]

    res = [d(xc) for d in (derivs_nested, derivs_persistent, derivs_jacobian)]
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            u, _, uxx = derivs_nested(xc)
            u0, ux0, _ = derivs_nested(x0)
            loss = (tf.reduce_mean(tf.square(uxx + 4.0 * u)) + tf.square(u0[0, 0] - 1.0)
                    + tf.square(ux0[0, 0]))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((loss, g[3]))
    return res, hist, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_heat_equation_residual_with_two_input_coordinates(tf):
    """A PINN for ``u_t = 0.1 u_xx`` whose network takes ``(x, t)`` as one ``[n, 2]`` input: ``u_t``
    and ``u_x`` as columns of one gradient, ``u_xx`` by an outer tape on the ``u_x`` column (a
    sliced gradient), the boundary loss at ``x = +-1``; the loss and its gradient w.r.t. every
    weight, also inside ``tf.function``."""
    vs = [tf.Variable(init_array((2, 5), 40, 0.8)), tf.Variable(init_array((5,), 41, 0.3)),
          tf.Variable(init_array((5, 1), 42, 0.5)), tf.Variable([0.0])]
    rs = np.random.RandomState(6)
    xt = np.stack([rs.uniform(-1, 1, 6), rs.uniform(0, 1, 6)], 1).astype(np.float32)
    bnd = np.array([[-1.0, 0.3], [1.0, 0.3], [-1.0, 0.8], [1.0, 0.8]], np.float32)

    def full(pts):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as t2:
                t2.watch(pts)
                with tf.GradientTape() as t1:
                    t1.watch(pts)
                    u = _pinn_u(tf, vs, pts)
                du = t1.gradient(u, pts)
                ux, ut = du[:, 0], du[:, 1]
            uxx = t2.gradient(ux, pts)[:, 0]
            res = ut - 0.1 * uxx
            loss = tf.reduce_mean(tf.square(res)) + tf.reduce_mean(tf.square(_pinn_u(tf, vs, tf.constant(bnd))))
        return loss, res, outer.gradient(loss, vs)

    pts = tf.constant(xt)
    eager = full(pts)
    compiled = tf.function(full)(pts)
    return eager, compiled


def _rk4(f, y, dt, n, tf, loop):
    def step(y):
        k1 = f(y)
        k2 = f(y + 0.5 * dt * k1)
        k3 = f(y + 0.5 * dt * k2)
        k4 = f(y + dt * k3)
        return y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    for _ in loop(n):
        y = step(y)
    return y


@parity(modes=True, **TOL)
def test_neural_ode_by_hand_written_rk4_compiled_and_eager(tf):
    """A neural ODE ``dy/dt = tanh(y W1 + b) W2`` integrated by hand-written RK4 for 6 steps: in a
    ``for _ in tf.range(n)`` loop inside ``tf.function`` (AutoGraph) and in a Python loop eagerly;
    the endpoint, the loss to a target and the gradient w.r.t. the weights and the initial state
    (differentiated through the solver) agree, and 2 SGD steps of the compiled form train it."""
    w1 = tf.Variable(init_array((2, 4), 50, 0.6))
    b = tf.Variable(np.zeros(4, np.float32))
    w2 = tf.Variable(init_array((4, 2), 51, 0.6))
    y0 = tf.constant([[1.0, 0.0], [0.0, 1.0], [0.5, -0.5]])
    target = tf.constant([[0.0, 1.0], [-1.0, 0.0], [0.5, 0.5]])

    def f(y):
        return tf.matmul(tf.tanh(tf.matmul(y, w1) + b), w2)

    def loss_and_grads(loop):
        with tf.GradientTape() as tape:
            tape.watch(y0)
            yT = _rk4(f, y0, 0.25, 6, tf, loop)
            loss = tf.reduce_mean(tf.square(yT - target))
        return yT, loss, tape.gradient(loss, [w1, b, w2, y0])

    eager = loss_and_grads(range)
    compiled_fn = tf.function(lambda: loss_and_grads(tf.range))
    compiled = compiled_fn()
    hist = []
    for _ in range(2):
        yT, loss, g = compiled_fn()
        for v, gi in zip([w1, b, w2], g[:3]):
            v.assign_sub(0.2 * gi)
        hist.append(loss)
    return eager, compiled, hist, w2.numpy()


@parity(modes=True, **TOL)
def test_mass_spring_while_loop_with_maximum_iterations_fits_the_stiffness(tf):
    """A damped mass-spring system stepped by semi-implicit Euler in ``tf.while_loop`` (the condition
    is a time horizon, ``maximum_iterations=12`` stops it earlier): the final position's gradient
    w.r.t. log-stiffness and damping, and 3 Adam steps fitting the stiffness to a target position,
    eagerly and inside ``tf.function``."""
    def run(compiled):
        log_k = tf.Variable(0.5)
        c = tf.Variable(0.2)
        opt = tf.keras.optimizers.Adam(0.1)

        def simulate():
            k = tf.exp(log_k)

            def cond(t, x, v):
                return t < 5.0

            def body(t, x, v):
                v = v + 0.1 * (-k * x - c * v)
                return t + 0.1, x + 0.1 * v, v

            _, x, v = tf.while_loop(cond, body, (tf.constant(0.0), tf.constant(1.0), tf.constant(0.0)),
                                    maximum_iterations=12)
            return x, v

        def step():
            with tf.GradientTape() as tape:
                x, v = simulate()
                loss = tf.square(x - 0.3) + 0.1 * tf.square(v)
            g = tape.gradient(loss, [log_k, c])
            opt.apply_gradients(zip(g, [log_k, c]))
            return x, loss, g

        step = tf.function(step) if compiled else step
        return [step() for _ in range(3)], log_k.numpy(), c.numpy()

    return run(False), run(True)


@parity(modes=True, **TOL)
def test_trajectory_optimisation_of_a_double_integrator_with_box_controls(tf):
    """Optimal control: a sequence of 8 accelerations (a Variable) drives a point mass from rest at 0
    to rest at 1; the loss is the terminal error plus control effort, minimised by gradient steps
    projected onto ``|u| <= 0.8`` by ``assign(clip_by_value(...))``; the state rollout is a Python
    loop with ``tf.stack``. The losses, the controls (some at the bound) and the final state."""
    u = tf.Variable(np.linspace(1.0, -1.0, 8).astype(np.float32))
    dt = 0.25

    def rollout():
        x, v, xs = tf.constant(0.0), tf.constant(0.0), []
        for i in range(8):
            v = v + dt * u[i]
            x = x + dt * v
            xs.append(tf.stack([x, v]))
        return tf.stack(xs)

    hist = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            traj = rollout()
            loss = (10.0 * tf.square(traj[-1, 0] - 1.0) + 10.0 * tf.square(traj[-1, 1])
                    + 0.01 * tf.reduce_sum(tf.square(u)))
        g = tape.gradient(loss, u)
        u.assign(tf.clip_by_value(u - 0.3 * g, -0.8, 0.8))
        hist.append((loss, g))
    return hist, u.numpy(), rollout()[-1]


# ---------------------------------------------------------------------------
# Decompositions at tied values (a parameter initialised to the identity)
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_spectral_loss_of_a_symmetric_parameter_initialised_to_the_identity(tf):
    """A learned symmetric metric ``M = (P + P^T) / 2`` with ``P`` initialised to the identity (every
    eigenvalue tied): a loss on its eigenvalues and on the top eigenvector's projector onto a data
    direction. TF's eigh gradient takes a safe reciprocal of the eigenvalue gaps, so the first
    step's eigenvector term is 0 (not NaN); 3 SGD steps, eagerly and compiled, break the tie."""
    d = tf.constant([[0.6], [0.8], [0.0]])

    def run(compiled):
        p = tf.Variable(np.eye(3, dtype=np.float32))

        def step():
            with tf.GradientTape() as tape:
                m = 0.5 * (p + tf.transpose(p))
                e, v = tf.linalg.eigh(m)
                top = v[:, -1:]
                loss = (tf.reduce_sum(tf.square(e - tf.constant([0.5, 1.0, 2.0])))
                        - tf.reduce_sum(tf.square(tf.matmul(top, d, transpose_a=True))))
            g = tape.gradient(loss, p)
            p.assign_sub(0.1 * g)
            return loss, g, e

        step = tf.function(step) if compiled else step
        return [step() for _ in range(3)], p.numpy()

    return run(False), run(True)


@parity(modes=True, **TOL)
def test_orthogonal_layer_by_polar_factor_of_an_identity_initialised_weight(tf):
    """An orthogonal layer parametrised by the polar factor ``U V^T`` of ``linalg.svd(W)`` with ``W``
    initialised to the identity (all singular values tied, TF's gradient finite by its safe
    reciprocal), fitted to rotate points onto targets for 3 steps; the loss, the gradient, the
    singular values and the orthogonality of the factor."""
    rs = np.random.RandomState(17)
    x = rs.randn(6, 3).astype(np.float32)
    c, s_ = np.cos(0.4), np.sin(0.4)
    y = (x @ np.array([[1, 0, 0], [0, c, -s_], [0, s_, c]], np.float32).T).astype(np.float32)
    w = tf.Variable(np.eye(3, dtype=np.float32))
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            s, u, v = tf.linalg.svd(w)
            q = tf.matmul(u, v, transpose_b=True)
            loss = tf.reduce_mean(tf.square(tf.matmul(x, q, transpose_b=True) - y))
        g = tape.gradient(loss, w)
        w.assign_sub(0.5 * g)
        hist.append((loss, g, s))
    return hist, w.numpy()


@parity(modes=True, **TOL)
def test_logdet_of_a_precision_filled_from_its_lower_triangle(tf):
    """A Gaussian's precision ``Lambda`` held as one free matrix whose upper triangle the user never
    symmetrises: TF's ``logdet`` (a Cholesky) reads its lower triangle, so the NLL and its gradient
    are those of the symmetric matrix the lower triangle defines, and the gradient is symmetric;
    compared with ``slogdet`` of the explicitly symmetrised matrix."""
    rs = np.random.RandomState(18)
    x = rs.randn(10, 3).astype(np.float32)
    raw = tf.Variable(np.array([[2.0, 5.0, -3.0], [0.3, 1.5, 7.0], [-0.2, 0.1, 1.0]], np.float32))
    with tf.GradientTape(persistent=True) as tape:
        lower = tf.linalg.band_part(raw, -1, 0)
        sym = lower + tf.transpose(tf.linalg.band_part(raw, -1, 0) - tf.linalg.band_part(raw, 0, 0))
        quad = tf.reduce_mean(tf.reduce_sum(tf.matmul(x, sym) * x, -1))
        nll_logdet = 0.5 * quad - 0.5 * tf.linalg.logdet(raw)
        nll_slogdet = 0.5 * quad - 0.5 * tf.linalg.slogdet(sym)[1]
    out = (nll_logdet, nll_slogdet, tape.gradient(nll_logdet, raw), tape.gradient(nll_slogdet, raw))
    del tape
    return out


@parity(modes=True, **TOL)
def test_knife_edge_fresnel_diffraction_fit(tf):
    """Optics: the intensity behind a straight edge, ``I = ((C(v) + 1/2)^2 + (S(v) + 1/2)^2) / 2`` with
    ``v = a (x - x0)`` and the Fresnel integrals ``tf.math.special.fresnel_cos`` / ``fresnel_sin``
    (TF's gradients are their integrands), fitted to a measured profile for 4 Adam steps: the
    loss, the gradients w.r.t. the scale and the edge position, and the fitted parameters."""
    xs = np.linspace(-2, 3, 12).astype(np.float32)
    # (a measured profile: a smooth edge at 0.3 with ringing on the lit side)
    meas = (0.5 * (1 + np.tanh(2.0 * (xs - 0.3))) * (1 + 0.2 * np.sin(3.0 * xs) * (xs > 0.3))).astype(np.float32)
    a = tf.Variable(1.2)
    x0 = tf.Variable(0.0)
    opt = tf.keras.optimizers.Adam(0.05)
    hist = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            vv = a * (xs - x0)
            inten = 0.5 * (tf.square(tf.math.special.fresnel_cos(vv) + 0.5)
                           + tf.square(tf.math.special.fresnel_sin(vv) + 0.5))
            loss = tf.reduce_mean(tf.square(inten - meas))
        g = tape.gradient(loss, [a, x0])
        opt.apply_gradients(zip(g, [a, x0]))
        hist.append((loss, g))
    return hist, a.numpy(), x0.numpy()


@parity(modes=True, x64=True, **TOL)
def test_gp_in_float64_as_gpflow_users_write_it(tf):
    """A GP written in float64 throughout (GPflow's default): NumPy float64 inputs, ``float64``
    Variables, ``tf.eye(..., dtype=tf.float64)`` jitter, the Cholesky NLL and its gradient w.r.t.
    the log length-scale and log noise, 3 plain gradient steps (tapejax runs it in JAX's x64 mode:
    float64 needs it); the dtypes of every result are float64 on both sides."""
    x = np.linspace(0, 1, 6)[:, None]
    y = np.sin(6 * x) + 0.05 * np.cos(17 * x)
    log_ls = tf.Variable(np.log(0.3))
    log_noise = tf.Variable(np.log(0.05))
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            k = (tf.exp(-0.5 * tf.square(x - x.T) / tf.exp(2.0 * log_ls))
                 + (tf.exp(log_noise) + 1e-6) * tf.eye(6, dtype=tf.float64))
            chol = tf.linalg.cholesky(k)
            alpha = tf.linalg.cholesky_solve(chol, y)
            nll = 0.5 * tf.reduce_sum(y * alpha) + tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol))) \
                + 3.0 * np.log(2 * np.pi)
        g = tape.gradient(nll, [log_ls, log_noise])
        for v, gi in zip([log_ls, log_noise], g):
            v.assign_sub(0.05 * gi)
        hist.append((nll, g))
    return hist, log_ls.numpy(), log_noise.numpy(), log_ls.dtype.name
