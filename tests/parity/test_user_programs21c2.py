"""Round twenty-one (c) of realistic user programs, second half: neural ODEs and implicit layers as
the TF-era research repositories write them, run under real TensorFlow 2.21 and under tapejax with
deferred execution and predicted updates on and off (``modes=True``).

Neural ODEs: a hand-written Dormand-Prince step with its embedded error estimate and a Python
step-size controller reading ``.numpy()``, the adjoint method written with ``tf.custom_gradient``
(a backward ODE solve of the augmented state inside the gradient function, closing over the
parameters: ``grad_fn(dy, variables=...)``), continuous normalising flows with the exact trace by
``batch_jacobian`` and Hutchinson's estimator by ``tf.autodiff.ForwardAccumulator``, augmented
ODEs, and a fixed-grid solver in a compiled ``while_loop`` differentiated w.r.t. its end time.
Implicit layers: deep equilibrium models (a fixed point found without a tape, the backward pass
solving ``(I - J^T) g = dy`` by a linear solve and by Broyden's method in a ``custom_gradient``),
Anderson acceleration, implicit differentiation of a ridge regression's argmin for its
regularisation strength beside the unrolled gradients a paper compares it with, and an
equality-constrained quadratic-programming layer by its KKT system.  The rendering and dynamics
programs are in ``test_user_programs21c.py``, a Burgers PINN by forward-over-reverse derivatives
in ``test_user_programs21c3.py``.  Every number is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _dense_vars(tf, dims, seed, scale=0.5):
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        out += [tf.Variable(init_array((a, b), seed + i, scale)), tf.Variable(np.zeros(b, np.float32))]
    return out


def _mlp(tf, ws, x):
    for i in range(0, len(ws) - 2, 2):
        x = tf.tanh(tf.matmul(x, ws[i]) + ws[i + 1])
    return tf.matmul(x, ws[-2]) + ws[-1]


def _rk4(f, y, t, h):
    k1 = f(t, y)
    k2 = f(t + h / 2, y + h / 2 * k1)
    k3 = f(t + h / 2, y + h / 2 * k2)
    k4 = f(t + h, y + h * k3)
    return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


# ---------------------------------------------------------------------------
# Neural ODEs
# ---------------------------------------------------------------------------

_DP_C = [0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0]
_DP_A = [[], [1 / 5], [3 / 40, 9 / 40], [44 / 45, -56 / 15, 32 / 9],
         [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
         [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
         [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]]
_DP_B5 = [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0]
_DP_B4 = [5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40]


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_dormand_prince_with_a_python_step_size_controller_reading_numpy(tf):
    """A neural ODE integrated from 0 to 1 by a hand-written Dormand-Prince 5(4) step: seven stages,
    the 5th-order solution and the embedded error estimate (``h sum (b5 - b4) k``, as torchdiffeq
    forms it, not the cancelling ``y5 - y4``), a mixed absolute/relative error norm
    read by ``.numpy()`` in a Python controller that accepts or rejects and rescales ``h``
    (``0.9 err^-1/5`` clipped to [0.2, 5]); the tape records every stage, rejected steps
    included, and the loss's gradient flows through the accepted ones.  The accept/reject
    sequence, step sizes and gradients of two Adam steps are compared."""
    ws = _dense_vars(tf, (3, 8, 2), 2201)
    y0 = tf.constant(np.random.RandomState(2202).randn(4, 2).astype(np.float32))
    target = np.random.RandomState(2203).randn(4, 2).astype(np.float32)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def f(t, y):
        return _mlp(tf, ws, tf.concat([y, tf.fill([4, 1], t)], 1)) * 4.0

    def solve(rtol=1e-3, atol=1e-4):
        t, h, y, log = 0.0, 1.0, y0, []
        while t < 1.0 - 1e-6:
            h = min(h, 1.0 - t)
            ks = []
            for c, a in zip(_DP_C, _DP_A):
                yi = y + h * sum(aij * kj for aij, kj in zip(a, ks)) if ks else y
                ks.append(f(t + c * h, yi))
            y5 = y + h * sum(b * k for b, k in zip(_DP_B5, ks))
            y_err = h * sum((b5 - b4) * k for b5, b4, k in zip(_DP_B5, _DP_B4, ks))
            scale = atol + rtol * tf.maximum(tf.abs(y), tf.abs(y5))
            err = float(tf.sqrt(tf.reduce_mean(tf.square(y_err / scale))).numpy())
            accept = err <= 1.0
            log.append((h, accept))
            if accept:
                t, y = t + h, y5
            h = h * min(5.0, max(0.2, 0.9 * max(err, 1e-10) ** -0.2))
        return y, log

    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            y1, log = solve()
            loss = tf.reduce_mean(tf.square(y1 - target))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        out.append((loss, g, y1, log))
    return out, ws


@parity(modes=True, **LOOSE)
def test_adjoint_method_by_custom_gradient_with_a_backward_augmented_solve(tf):
    """Chen et al.'s adjoint method in TF: ``odeint_adjoint`` is a ``tf.custom_gradient`` whose
    forward pass integrates by RK4 without recording; its ``grad_fn(dy, variables=None)`` integrates
    the augmented state ``(y, a, a_theta)`` backwards by RK4, each stage's vector-Jacobian
    products by an inner tape with ``output_gradients``, and returns the initial state's adjoint
    and the parameters' gradients.  It is compared with backpropagation through the same forward
    solver (close, not equal: the backward solve's own discretisation), and two SGD steps use it."""
    ws = _dense_vars(tf, (2, 6, 2), 2211)
    x = np.random.RandomState(2212).randn(5, 2).astype(np.float32)
    target = np.random.RandomState(2213).randn(5, 2).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    n, t1 = 4, 1.0

    def func(t, y):
        return _mlp(tf, ws, y)

    def forward(y):
        for i in range(n):
            y = _rk4(func, y, i * t1 / n, t1 / n)
        return y

    @tf.custom_gradient
    def odeint_adjoint(y0):
        y1 = forward(y0)

        def grad_fn(dy, variables=None):
            def aug_dynamics(t, state):
                y, a = state[0], state[1]
                with tf.GradientTape() as tape:
                    tape.watch(y)
                    fy = func(t, y)
                vjps = tape.gradient(fy, [y] + list(variables), output_gradients=a)
                return [fy, -vjps[0]] + [-v for v in vjps[1:]]

            state = [y1, dy] + [tf.zeros_like(v) for v in variables]
            h = -t1 / n
            for i in range(n):
                t = t1 - i * t1 / n
                k1 = aug_dynamics(t, state)
                k2 = aug_dynamics(t + h / 2, [s + h / 2 * k for s, k in zip(state, k1)])
                k3 = aug_dynamics(t + h / 2, [s + h / 2 * k for s, k in zip(state, k2)])
                k4 = aug_dynamics(t + h, [s + h * k for s, k in zip(state, k3)])
                state = [s + h / 6 * (a + 2 * b + 2 * c + d) for s, a, b, c, d in zip(state, k1, k2, k3, k4)]
            return state[1], state[2:]

        return y1, grad_fn

    out = []
    y0 = tf.constant(x)
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(y0)
            loss_adj = tf.reduce_mean(tf.square(odeint_adjoint(y0) - target))
            loss_bp = tf.reduce_mean(tf.square(forward(y0) - target))
        g_adj, g_bp = tape.gradient(loss_adj, ws), tape.gradient(loss_bp, ws)
        gy_adj, gy_bp = tape.gradient(loss_adj, y0), tape.gradient(loss_bp, y0)
        opt.apply_gradients(zip(g_adj, ws))
        out.append((loss_adj, loss_bp, g_adj, g_bp, gy_adj, gy_bp,
                    max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(g_adj, g_bp)) < 1e-2))
    return out, ws


def _cnf_data(seed, n=6):
    rs = np.random.RandomState(seed)
    return (rs.randn(n, 2) * [1.0, 0.5] + [0.5, -0.3]).astype(np.float32)


@parity(modes=True, **LOOSE)
def test_cnf_exact_trace_by_batch_jacobian_and_hutchinson_by_forward_accumulator(tf):
    """A continuous normalising flow with time-conditioned dynamics integrated by 3 midpoint steps:
    ``d log p / dt = -tr(df/dz)``, the trace exactly (``batch_jacobian`` of each stage,
    ``tf.linalg.trace``) and by Hutchinson's estimator with Gaussian NumPy probes where the
    Jacobian-vector product comes from ``tf.autodiff.ForwardAccumulator`` inside the parameter tape
    (forward-over-reverse); each NLL's parameter gradient, Adam on the exact one, compiled."""
    ws = _dense_vars(tf, (3, 8, 2), 2221)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def f(z, t):
        return _mlp(tf, ws, tf.concat([z, tf.fill([tf.shape(z)[0], 1], t)], 1))

    def trace_exact(z, t):
        with tf.GradientTape() as tape:
            tape.watch(z)
            fz = f(z, t)
        return fz, tf.linalg.trace(tape.batch_jacobian(fz, z))

    def trace_hutch(z, t, eps):
        with tf.autodiff.ForwardAccumulator(primals=z, tangents=eps) as acc:
            fz = f(z, t)
        return fz, tf.reduce_sum(eps * acc.jvp(fz), 1)

    def nll(x, tr_fn):
        z, dlogp, h = x, tf.zeros([tf.shape(x)[0]]), 1.0 / 3
        for k in range(3):
            t = 1.0 - k * h
            f1, tr1 = tr_fn(z, t, 0)
            zm = z - h / 2 * f1
            f2, tr2 = tr_fn(zm, t - h / 2, 1)
            z, dlogp = z - h * f2, dlogp - h * tr2
        logp = -0.5 * tf.reduce_sum(z ** 2, 1) - np.log(2 * np.pi) + dlogp
        return -tf.reduce_mean(logp), tr1

    @tf.function
    def step(x, eps):
        with tf.GradientTape(persistent=True) as tape:
            exact, tr_e = nll(x, lambda z, t, i: trace_exact(z, t))
            hutch, tr_h = nll(x, lambda z, t, i: trace_hutch(z, t, eps[i]))
        g, g_h = tape.gradient(exact, ws), tape.gradient(hutch, ws)
        opt.apply_gradients(zip(g, ws))
        return exact, hutch, g, g_h, tr_e, tr_h

    rs = np.random.RandomState(2222)
    return [step(_cnf_data(2223 + k), rs.randn(2, 6, 2).astype(np.float32)) for k in range(3)], ws


@parity(modes=True, **LOOSE)
def test_augmented_neural_ode_classifier_against_the_plain_one(tf):
    """Dupont et al.'s augmented neural ODE: 2-D inputs padded with two zero dimensions
    (``tf.pad``), an ODE in 4-D integrated by 3 Euler steps with ``tf.function``, a linear
    read-out and sigmoid cross-entropy on the concentric-annuli labels a plain 2-D ODE cannot
    separate; both models train by Adam, and each one's input gradients (through the flow) are
    compared."""
    rs = np.random.RandomState(2231)
    r = np.concatenate([rs.uniform(0, 0.5, 4), rs.uniform(1.0, 1.5, 4)])
    a = rs.uniform(0, 2 * np.pi, 8)
    x = tf.constant(np.stack([r * np.cos(a), r * np.sin(a)], 1).astype(np.float32))
    y = np.array([[0.0]] * 4 + [[1.0]] * 4, np.float32)
    aug, plain = _dense_vars(tf, (4, 8, 4), 2232), _dense_vars(tf, (2, 8, 2), 2234)
    read_aug, read_plain = _dense_vars(tf, (4, 1), 2236), _dense_vars(tf, (2, 1), 2237)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def flow(ws, z):
        for _ in range(3):
            z = z + _mlp(tf, ws, z) / 3
        return z

    @tf.function
    def step(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            la = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                y, _mlp(tf, read_aug, flow(aug, tf.pad(x, [[0, 0], [0, 2]])))))
            lp = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, _mlp(tf, read_plain, flow(plain, x))))
        va, vp = aug + read_aug, plain + read_plain
        ga, gp = tape.gradient(la, va), tape.gradient(lp, vp)
        opt.apply_gradients(zip(ga + gp, va + vp))
        return la, lp, ga, gp, tape.gradient(la, x), tape.gradient(lp, x)

    return [step(x) for _ in range(4)], aug, plain


@parity(modes=True, **LOOSE)
def test_fixed_grid_ode_in_a_compiled_while_loop_differentiated_by_its_end_time(tf):
    """A fixed-grid RK4 solver in a ``tf.while_loop`` (``maximum_iterations`` given) whose step is
    ``t1 / n``: the gradient of the final state's loss w.r.t. the integration time ``t1`` (a
    Variable, e.g. a learned horizon) and the parameters, against the analytic ``dL/dt1 =
    dL/dy . f(y(t1))`` read from the same solve."""
    ws = _dense_vars(tf, (2, 5, 2), 2241)
    t1 = tf.Variable(0.8)
    y0 = tf.constant(np.random.RandomState(2242).randn(3, 2).astype(np.float32))
    target = np.random.RandomState(2243).randn(3, 2).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def func(t, y):
        return _mlp(tf, ws, y)

    @tf.function
    def step():
        with tf.GradientTape(persistent=True) as tape:
            h = t1 / 6.0
            _, y1 = tf.while_loop(lambda i, y: i < 6, lambda i, y: (i + 1, _rk4(func, y, tf.cast(i, tf.float32) * h, h)),
                                  [tf.constant(0), y0], maximum_iterations=6)
            loss = tf.reduce_mean(tf.square(y1 - target))
        g_t1, g_ws = tape.gradient(loss, t1), tape.gradient(loss, ws)
        dl_dy = tape.gradient(loss, y1)
        analytic = tf.reduce_sum(dl_dy * func(t1, y1))
        opt.apply_gradients(zip([g_t1] + g_ws, [t1] + ws))
        return loss, g_t1, analytic, g_ws

    return [step() for _ in range(3)], t1, ws


# ---------------------------------------------------------------------------
# Implicit layers
# ---------------------------------------------------------------------------

def _deq_setup(tf, seed, d=4, n=3, k=3):
    rs = np.random.RandomState(seed)
    w = tf.Variable((0.4 * rs.randn(d, d) / np.sqrt(d)).astype(np.float32))
    u = tf.Variable((0.5 * rs.randn(k, d)).astype(np.float32))
    b = tf.Variable(np.zeros(d, np.float32))
    head = tf.Variable((0.5 * rs.randn(d, 1)).astype(np.float32))
    x = rs.randn(n, k).astype(np.float32)
    y = rs.randn(n, 1).astype(np.float32)
    return (w, u, b, head), x, y


@parity(modes=True, **LOOSE)
def test_deq_fixed_point_without_a_tape_and_a_backward_linear_solve(tf):
    """A deep equilibrium layer ``z* = tanh(z* W + x U + b)`` (Bai et al.): the fixed point by 30
    plain iterations outside any tape; inside the tape one more application re-attaches the
    parameters, and an identity ``tf.custom_gradient`` hook's backward solves
    ``(I - J^T) g = dy`` per example with ``J`` from a fresh tape's ``batch_jacobian`` at ``z*``
    (``tf.linalg.solve`` on ``I - J^T``).  Compared with the gradient of 60 unrolled iterations
    under the tape and with the 'one-step' (Jacobian-free) gradient; SGD on the implicit one."""
    (w, u, b, head), x, y = _deq_setup(tf, 2251)
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    def f(z):
        return tf.tanh(tf.matmul(z, w) + tf.matmul(x, u) + b)

    def fixed_point(iters=30):
        z = tf.zeros([3, 4])
        for _ in range(iters):
            z = f(z)
        return z

    def implicit_hook(z_star):
        @tf.custom_gradient
        def hook(z):
            def grad(dy):
                with tf.GradientTape() as t:
                    t.watch(z_star)
                    fz = f(z_star)
                jac = t.batch_jacobian(fz, z_star)
                eye = tf.eye(4, batch_shape=[3])
                return tf.squeeze(tf.linalg.solve(eye - tf.linalg.matrix_transpose(jac), dy[..., None]), -1)
            return tf.identity(z), grad
        return hook

    out = []
    params = [w, u, b, head]
    for _ in range(3):
        z_star = tf.stop_gradient(fixed_point())
        with tf.GradientTape(persistent=True) as tape:
            z = implicit_hook(z_star)(f(z_star))
            loss = tf.reduce_mean(tf.square(tf.matmul(z, head) - y))
            z_unrolled = fixed_point(60)
            loss_unrolled = tf.reduce_mean(tf.square(tf.matmul(z_unrolled, head) - y))
            loss_onestep = tf.reduce_mean(tf.square(tf.matmul(f(z_star), head) - y))
        g = tape.gradient(loss, params)
        g_unrolled, g_one = tape.gradient(loss_unrolled, params), tape.gradient(loss_onestep, params)
        residual = tf.norm(f(z_star) - z_star)
        opt.apply_gradients(zip(g, params))
        out.append((loss, loss_unrolled, g, g_unrolled, g_one, residual))
    return out, params


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_deq_backward_by_broyden_over_vjps_of_a_persistent_tape_with_variables(tf):
    """A DEQ whose ``custom_gradient`` wraps the whole layer (``f(x)`` closing over its Variables):
    the forward fixed point by Broyden's method (rank-one inverse updates in Python, 12 steps), the
    backward ``grad_fn(dy, variables=...)`` solves ``g = J^T g + dy`` by Broyden too, each
    ``J^T v`` a vjp from one persistent tape at ``z*``, and returns the input's and the Variables'
    gradients (``g`` pushed through ``f``'s parameters by one more tape).  Adam, eager and
    compiled steps."""
    (w, u, b, head), x, y = _deq_setup(tf, 2261)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    params = [w, u, b]

    def f(z, xx):
        return tf.tanh(tf.matmul(z, w) + tf.matmul(xx, u) + b)

    def broyden(g_fn, z0, iters=12):
        z = z0
        gz = g_fn(z)
        inv = tf.eye(tf.size(z0)) * -1.0
        for _ in range(iters):
            dz = -tf.reshape(tf.linalg.matvec(inv, tf.reshape(gz, [-1])), tf.shape(z))
            z_new = z + dz
            g_new = g_fn(z_new)
            s, yv = tf.reshape(dz, [-1]), tf.reshape(g_new - gz, [-1])
            inv_y = tf.linalg.matvec(inv, yv)
            denom = tf.tensordot(s, inv_y, 1)
            inv = inv + tf.tensordot(s - inv_y, tf.linalg.matvec(inv, s, transpose_a=True), 0) / denom
            z, gz = z_new, g_new
        return z

    @tf.custom_gradient
    def deq(xx):
        z_star = broyden(lambda z: f(z, xx) - z, tf.zeros([3, 4]))

        def grad_fn(dy, variables=None):
            with tf.GradientTape(persistent=True) as t:
                t.watch(z_star)
                fz = f(z_star, xx)
            g = broyden(lambda v: t.gradient(fz, z_star, output_gradients=v) + dy - v, tf.zeros_like(dy))
            with tf.GradientTape() as t2:
                t2.watch(xx)
                fz2 = f(z_star, xx)
            grads = t2.gradient(fz2, [xx] + list(variables), output_gradients=g)
            return grads[0], grads[1:]

        return z_star, grad_fn

    def step(xx):
        with tf.GradientTape() as tape:
            tape.watch(xx)
            z = deq(xx)
            loss = tf.reduce_mean(tf.square(tf.matmul(z, head) - y))
        grads = tape.gradient(loss, params + [head, xx])
        opt.apply_gradients(zip(grads[:4], params + [head]))
        return loss, grads, z

    compiled = tf.function(step)
    xx = tf.constant(x)
    return [(compiled if k >= 2 else step)(xx) for k in range(4)], params, head


def _ridge_data(seed, n=8, d=3):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    w = rs.randn(d, 1).astype(np.float32)
    return x, (x @ w + 0.5 * rs.randn(n, 1)).astype(np.float32)


@parity(modes=True, **LOOSE)
def test_ridge_argmin_hyperparameter_by_implicit_differentiation_and_unrolled_descent(tf):
    """Hyperparameter optimisation of a ridge penalty ``lambda = exp(log_lam)`` on a validation
    split, the inner argmin ``w*(lambda)`` differentiated three ways: by a ``custom_gradient``
    applying the implicit function theorem (``dw*/dlambda = -(X^T X + lambda I)^-1 w*`` by
    ``tf.linalg.cholesky_solve``), through ``tf.linalg.solve``'s own gradient, and by unrolling
    4, 12 and 30 steps of gradient descent on the inner loss under the tape (the paper's
    comparison: the unrolled hypergradient approaches the implicit one).  Adam on ``log_lam``."""
    xtr, ytr = _ridge_data(2271)
    xva, yva = _ridge_data(2272)
    log_lam = tf.Variable(0.5)
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    gram, xty = xtr.T @ xtr, xtr.T @ ytr

    @tf.custom_gradient
    def ridge_implicit(lam):
        chol = tf.linalg.cholesky(gram + lam * tf.eye(3))
        w = tf.linalg.cholesky_solve(chol, xty)

        def grad(dw):
            return tf.reduce_sum(dw * -tf.linalg.cholesky_solve(chol, w))
        return w, grad

    def ridge_unrolled(lam, steps, lr=0.1):
        w = tf.zeros([3, 1])
        for _ in range(steps):
            w = w - lr * (tf.matmul(gram, w) - xty + lam * w) / 4.0
        return w

    def val(w):
        return tf.reduce_mean(tf.square(tf.matmul(xva, w) - yva))

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            lam = tf.exp(log_lam)
            l_imp = val(ridge_implicit(lam))
            l_solve = val(tf.linalg.solve(gram + lam * tf.eye(3), xty))
            l_unr = [val(ridge_unrolled(lam, k)) for k in (4, 12, 30)]
        g_imp, g_solve = tape.gradient(l_imp, log_lam), tape.gradient(l_solve, log_lam)
        g_unr = [tape.gradient(v, log_lam) for v in l_unr]
        opt.apply_gradients([(g_imp, log_lam)])
        out.append((l_imp, l_solve, l_unr, g_imp, g_solve, g_unr, [abs(float(g - g_imp)) for g in g_unr]))
    return out, log_lam


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_anderson_acceleration_forward_and_an_implicit_backward_against_picard(tf):
    """Anderson acceleration (memory 3, ``beta = 1``) of a contractive layer ``z = f(z) =
    0.5 tanh(z W + x U) + x V``: the mixing weights from a small regularised least-squares problem
    by ``tf.linalg.lstsq`` of the residual history; the result beside plain Picard iteration
    (residual norms per iteration logged); the loss's gradient through a ``custom_gradient``
    solving ``(I - J^T) g = dy`` with ``J`` by ``tape.jacobian`` of the flattened map (not batched),
    compared with unrolling the Picard iterations.  SGD, two steps."""
    (w, u, b, head), x, y = _deq_setup(tf, 2281)
    v = tf.Variable(init_array((3, 4), 2282, 0.3))
    params = [w, u, v, head]
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def f(z):
        return 0.5 * tf.tanh(tf.matmul(z, w) + tf.matmul(x, u)) + tf.matmul(x, v)

    def anderson(z0, m=3, iters=10, lam=1e-4):
        xs, fs, res = [tf.reshape(z0, [-1])], [tf.reshape(f(z0), [-1])], []
        for k in range(1, iters):
            n = min(k, m)
            g = tf.stack([fs[-i - 1] - xs[-i - 1] for i in range(n)], 1)
            gtg = tf.matmul(g, g, transpose_a=True) + lam * tf.eye(n)
            alpha = tf.linalg.lstsq(gtg, tf.ones([n, 1]), l2_regularizer=0.0)
            alpha = alpha / tf.reduce_sum(alpha)
            xk = tf.squeeze(tf.matmul(tf.stack([fs[-i - 1] for i in range(n)], 1), alpha), 1)
            xs.append(xk)
            fs.append(tf.reshape(f(tf.reshape(xk, [3, 4])), [-1]))
            res.append(tf.norm(fs[-1] - xs[-1]))
        return tf.reshape(xs[-1], [3, 4]), res

    def picard(z, iters=10):
        res = []
        for _ in range(iters):
            z_new = f(z)
            res.append(tf.norm(z_new - z))
            z = z_new
        return z, res

    def hook(z_star):
        @tf.custom_gradient
        def h(z):
            def grad(dy):
                with tf.GradientTape() as t:
                    t.watch(z_star)
                    fz = tf.reshape(f(z_star), [-1])
                jac = tf.reshape(t.jacobian(fz, z_star), [12, 12])
                sol = tf.linalg.solve(tf.eye(12) - tf.transpose(jac), tf.reshape(dy, [12, 1]))
                return tf.reshape(sol, [3, 4])
            return tf.identity(z), grad
        return h

    out = []
    for _ in range(2):
        z_and, res_and = anderson(tf.zeros([3, 4]))
        z_star = tf.stop_gradient(z_and)
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(hook(z_star)(f(z_star)), head) - y))
            z_pic, res_pic = picard(tf.zeros([3, 4]), 25)
            loss_pic = tf.reduce_mean(tf.square(tf.matmul(z_pic, head) - y))
        g, g_pic = tape.gradient(loss, params), tape.gradient(loss_pic, params)
        opt.apply_gradients(zip(g, params))
        out.append((loss, loss_pic, g, g_pic, res_and, res_pic[:10]))
    return out, params


@parity(modes=True, **LOOSE)
def test_equality_constrained_qp_layer_by_its_kkt_system(tf):
    """An OptNet-style layer for ``min 0.5 z^T Q z + p^T z s.t. A z = b`` with ``Q = L L^T + 0.1 I``
    (``L`` a lower-triangular Variable by ``tf.linalg.band_part``), ``p`` from the input by a
    linear map: the KKT matrix assembled by ``tf.concat`` and solved by ``tf.linalg.solve`` for a
    batch (``tf.broadcast_to``), the primal solution fitted to targets through the solve; the
    multipliers and the constraint residual (zero) are logged, and the gradient w.r.t. the
    constraint offset ``b`` is compared with ``-nu`` (the envelope theorem on the objective)."""
    rs = np.random.RandomState(2291)
    lw = tf.Variable(np.tril(rs.randn(3, 3) * 0.5).astype(np.float32) + np.eye(3, dtype=np.float32))
    pw = tf.Variable(init_array((2, 3), 2292))
    a = tf.constant(rs.randn(1, 3).astype(np.float32))
    b = tf.Variable([[0.5]])
    x = rs.randn(4, 2).astype(np.float32)
    target = rs.randn(4, 3).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    def layer(xx):
        low = tf.linalg.band_part(lw, -1, 0)
        q = tf.matmul(low, low, transpose_b=True) + 0.1 * tf.eye(3)
        kkt = tf.concat([tf.concat([q, tf.transpose(a)], 1), tf.concat([a, tf.zeros([1, 1])], 1)], 0)
        rhs = tf.concat([-tf.matmul(xx, pw), tf.broadcast_to(b, [tf.shape(xx)[0], 1])], 1)
        sol = tf.linalg.solve(tf.broadcast_to(kkt, [tf.shape(xx)[0], 4, 4]), rhs[..., None])[..., 0]
        z = sol[:, :3]
        obj = 0.5 * tf.reduce_sum(tf.matmul(z, q) * z, 1) + tf.reduce_sum(tf.matmul(xx, pw) * z, 1)
        return z, sol[:, 3:], obj

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            z, nu, obj = layer(x)
            loss = tf.reduce_mean(tf.square(z - target))
            obj_sum = tf.reduce_sum(obj)
        g = tape.gradient(loss, [lw, pw, b])
        g_obj_b = tape.gradient(obj_sum, b)
        opt.apply_gradients(zip(g, [lw, pw, b]))
        out.append((loss, g, nu, g_obj_b, -tf.reduce_sum(nu), tf.matmul(z, a, transpose_b=True) - b))
    return out, lw, pw, b

