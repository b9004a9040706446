"""Round twenty-two (b): curvature products and second-order optimizers written by hand, as TF2-era
research code writes them (raw ops, nested ``GradientTape``s, ``tf.autodiff.ForwardAccumulator``
around a tape, preconditioner state in Variables updated by ``assign``), each run under real
TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and off
(``modes=True``).

Curvature: Hessian-vector products three ways (reverse-over-reverse, forward-over-reverse,
``tape.jacobian`` then ``matvec``; ``experimental_use_pfor`` on and off) checked against one
another and against TF, Gauss-Newton-vector products by ``ForwardAccumulator`` and
``output_gradients``, the Fisher diagonal from per-example gradients (``jacobian`` and a Dense
layer's ``batch_jacobian`` trick), Hutchinson's trace estimate and the top eigenvalue by power
iteration on HVPs.  Optimizers: Newton's method by ``solve`` / ``cholesky_solve``, natural gradient
with a damped empirical Fisher, K-FAC for one Dense layer (``inv`` and ``eigh`` inverses), Shampoo's
``eigh`` matrix roots, L-BFGS over per-variable lists with a Python backtracking line search,
Hessian-free conjugate gradient in a ``tf.while_loop`` and AdaHessian.  The meta-learning and
implicit-differentiation programs are in ``test_user_programs22b2.py``.

Every random number is drawn with NumPy and fed in (tapejax's random ops are not TF's Philox).
"""
import numpy as np

from .harness import init_array, parity, raises

TOL = dict(rtol=1e-4, atol=1e-5)
LOOSE = dict(rtol=5e-4, atol=5e-5)   # solves and eigendecompositions of damped float32 curvature


def _data(n, d, seed, classes=None):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    if classes is None:
        return x, rs.randn(n, 1).astype(np.float32)
    return x, rs.randint(0, classes, n).astype(np.int32)


def _flat_mlp(tf, theta, x, d=3, h=4):
    """A d-h-1 tanh MLP whose weights are slices of one flat parameter vector."""
    w1 = tf.reshape(theta[:d * h], (d, h))
    b1 = theta[d * h:d * h + h]
    w2 = tf.reshape(theta[d * h + h:d * h + 2 * h], (h, 1))
    b2 = theta[d * h + 2 * h:]
    return tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2


# ---------------------------------------------------------------------------
# Curvature products
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_hessian_vector_products_three_ways_on_a_flat_parameter_mlp(tf):
    """The HVP of an MLP's MSE at a flat parameter Variable with a fed vector: reverse-over-reverse
    (nested tapes, ``gradient(g . v)``), forward-over-reverse (``ForwardAccumulator`` around a
    tape, ``acc.jvp(g)``) and the full Hessian by ``tape.jacobian`` (pfor on and off) then
    ``matvec``; each product, their largest differences and the Hessian's symmetry gap."""
    x, y = _data(6, 3, 1)
    theta = tf.Variable(init_array((21,), 2))
    v = tf.constant(init_array((21,), 3, 1.0))

    def loss_fn():
        return tf.reduce_mean(tf.square(_flat_mlp(tf, theta, x) - y))

    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = loss_fn()
        g = inner.gradient(loss, theta)
        gv = tf.reduce_sum(g * v)
    hvp_rr = outer.gradient(gv, theta)

    with tf.autodiff.ForwardAccumulator(primals=theta, tangents=v) as acc:
        with tf.GradientTape() as t:
            loss2 = loss_fn()
        g2 = t.gradient(loss2, theta)
    hvp_fr = acc.jvp(g2)

    hs = []
    for pfor in (True, False):
        with tf.GradientTape(persistent=True) as outer:
            with tf.GradientTape() as inner:
                loss3 = loss_fn()
            g3 = inner.gradient(loss3, theta)
        hs.append(outer.jacobian(g3, theta, experimental_use_pfor=pfor))
        del outer
    hvp_jac = tf.linalg.matvec(hs[0], v)
    gaps = [tf.reduce_max(tf.abs(a - b)) for a, b in ((hvp_rr, hvp_fr), (hvp_rr, hvp_jac), (hs[0], hs[1]))]
    return (loss, g, hvp_rr, hvp_fr, hvp_jac, hs[1], tf.reduce_max(tf.abs(hs[0] - tf.transpose(hs[0]))),
            [bool(gap < 1e-4) for gap in gaps], acc.jvp(loss2))


@parity(modes=True, **TOL)
def test_hvp_of_a_variable_list_by_forward_over_reverse_inside_tf_function(tf):
    """Forward-over-reverse HVPs of a softmax classifier's loss w.r.t. a list of two Variables with
    a list of tangents, compiled; then reverse-over-reverse eagerly on the same tangents, and the
    ``jvp`` of a tensor not computed from the primals (None; zeros with ``unconnected_gradients``)."""
    x, y = _data(5, 3, 4, classes=3)
    w = tf.Variable(init_array((3, 3), 5))
    b = tf.Variable(init_array((3,), 6))
    tw = tf.constant(init_array((3, 3), 7, 1.0))
    tb = tf.constant(init_array((3,), 8, 1.0))

    def loss_fn():
        logits = tf.matmul(x, w) + b
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    @tf.function
    def hvp_fwd(tw, tb):
        with tf.autodiff.ForwardAccumulator([w, b], [tw, tb]) as acc:
            with tf.GradientTape() as t:
                loss = loss_fn()
            gw, gb = t.gradient(loss, [w, b])
        return loss, acc.jvp([gw, gb])

    loss, (hw, hb) = hvp_fwd(tw, tb)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            l2 = loss_fn()
        gw, gb = inner.gradient(l2, [w, b])
        dot = tf.reduce_sum(gw * tw) + tf.reduce_sum(gb * tb)
    rw, rb = outer.gradient(dot, [w, b])
    with tf.autodiff.ForwardAccumulator(w, tw) as acc:
        other = tf.constant([1.0, 2.0]) * 3.0
    return (loss, hw, hb, rw, rb, acc.jvp(other),
            acc.jvp(other, unconnected_gradients=tf.UnconnectedGradients.ZERO))


@parity(modes=True, **TOL)
def test_gauss_newton_vector_products_by_forward_accumulator_and_output_gradients(tf):
    """The generalised Gauss-Newton product ``J^T H_L J v`` of a softmax classifier (one hidden
    layer): ``J v`` of the logits by ``ForwardAccumulator``, the cross-entropy's logit Hessian
    ``(diag(p) - p p^T) / n`` applied by hand, ``J^T`` by ``tape.gradient(logits, vs,
    output_gradients=...)``; checked against the explicit ``J^T H J`` from ``tape.jacobian``."""
    x, y = _data(4, 3, 9, classes=3)
    w1 = tf.Variable(init_array((3, 4), 10))
    w2 = tf.Variable(init_array((4, 3), 11))
    vs = [w1, w2]
    tang = [tf.constant(init_array((3, 4), 12, 1.0)), tf.constant(init_array((4, 3), 13, 1.0))]

    def logits_fn():
        return tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)

    with tf.autodiff.ForwardAccumulator(vs, tang) as acc:
        with tf.GradientTape(persistent=True) as tape:
            logits = logits_fn()
    jv = acc.jvp(logits)
    p = tf.nn.softmax(logits)
    hjv = (p * jv - p * tf.reduce_sum(p * jv, axis=-1, keepdims=True)) / 4.0
    ggn = tape.gradient(logits, vs, output_gradients=hjv)
    jac = tape.jacobian(logits, vs)                          # [4, 3, ...param]
    del tape
    jflat = tf.concat([tf.reshape(j, (12, -1)) for j in jac], axis=1)       # [12, 24]
    vflat = tf.concat([tf.reshape(t, (-1,)) for t in tang], 0)
    pb = tf.reshape(p, (4, 3, 1))
    h_l = (tf.linalg.diag(p) - pb * tf.transpose(pb, (0, 2, 1))) / 4.0          # [4, 3, 3]
    h_full = tf.reshape(tf.einsum("nab,nm->namb", h_l, tf.eye(4)), (12, 12))          # block diagonal
    explicit = tf.linalg.matvec(tf.matmul(jflat, tf.matmul(h_full, jflat), transpose_a=True), vflat)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return loss, jv, ggn, explicit, tf.concat([tf.reshape(g, (-1,)) for g in ggn], 0) - explicit


@parity(modes=True, **TOL)
def test_fisher_diagonal_from_per_example_gradients_by_jacobian_and_batch_jacobian(tf):
    """The empirical Fisher diagonal of a Dense softmax layer: per-example gradients by
    ``tape.jacobian`` of the per-example losses (pfor on and off), squared and averaged; the same
    from the Dense layer trick (``batch_jacobian`` of per-example losses w.r.t. the pre-activations
    broadcast to rows, outer product with the inputs); the layer is a ``tf.keras.layers.Dense``.
    ``experimental_use_pfor=False`` on a non-persistent tape raises (RuntimeError)."""
    x, y = _data(5, 3, 14, classes=4)
    layer = tf.keras.layers.Dense(4)
    layer.build((None, 3))
    layer.set_weights([init_array((3, 4), 15), init_array((4,), 16)])
    out = []
    for pfor in (True, False):
        with tf.GradientTape(persistent=not pfor) as tape:
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=layer(x))
        jk, jb = tape.jacobian(losses, layer.trainable_variables, experimental_use_pfor=pfor)
        out.append((tf.reduce_mean(tf.square(jk), 0), tf.reduce_mean(tf.square(jb), 0)))
    with tf.GradientTape() as tape:                 # the loop fallback needs a persistent tape
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=layer(x))
    out.append(raises(tape.jacobian, losses, layer.kernel, experimental_use_pfor=False))
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        z = layer(xt)
        tape.watch(z)
        per = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z)
        per_rows = tf.tile(per[:, None], (1, 2))
    dz = tape.batch_jacobian(per_rows, z)[:, 0, :]                        # [5, 4]
    per_ex_k = tf.einsum("ni,nj->nij", xt, dz)
    return out, tf.reduce_mean(tf.square(per_ex_k), 0), tf.reduce_mean(tf.square(dz), 0), losses


@parity(modes=True, **TOL)
def test_hutchinson_trace_with_rademacher_probes_compiled_against_the_exact_trace(tf):
    """Hutchinson's estimate ``mean_k z_k^T H z_k`` of the Hessian trace of a flat-parameter MLP
    loss with 8 seeded Rademacher probes (NumPy), each HVP by nested tapes inside a compiled
    ``tf.range`` loop writing a ``TensorArray``; the exact trace from ``tape.jacobian``."""
    x, y = _data(6, 3, 17)
    theta = tf.Variable(init_array((21,), 18))
    probes = np.random.RandomState(19).choice([-1.0, 1.0], size=(8, 21)).astype(np.float32)

    def loss_fn():
        return tf.reduce_mean(tf.square(_flat_mlp(tf, theta, x) - y))

    @tf.function
    def hutchinson(zs):
        ta = tf.TensorArray(tf.float32, size=8)
        for k in tf.range(8):
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    loss = loss_fn()
                g = inner.gradient(loss, theta)
                gz = tf.reduce_sum(g * zs[k])
            ta = ta.write(k, tf.reduce_sum(zs[k] * outer.gradient(gz, theta)))
        return ta.stack()

    samples = hutchinson(tf.constant(probes))
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = loss_fn()
        g = inner.gradient(loss, theta)
    hess = outer.jacobian(g, theta)
    return samples, tf.reduce_mean(samples), tf.linalg.trace(hess)


@parity(modes=True, **LOOSE)
def test_top_hessian_eigenvalue_by_power_iteration_on_hvps(tf):
    """The top Hessian eigenvalue of a logistic-regression loss by 12 steps of power iteration on
    forward-over-reverse HVPs (a Python loop of eager steps, the iterate normalised by
    ``tf.norm``), its Rayleigh quotients, and ``eigvalsh`` of the Hessian from ``tape.hessians``-style
    nested jacobians."""
    x, y = _data(8, 4, 20, classes=2)
    w = tf.Variable(init_array((4,), 21))
    yf = tf.constant(y.astype(np.float32))

    def loss_fn():
        z = tf.linalg.matvec(x, w)
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=yf, logits=z)) + 0.01 * tf.reduce_sum(w * w)

    def hvp(v):
        with tf.autodiff.ForwardAccumulator(w, v) as acc:
            with tf.GradientTape() as t:
                loss = loss_fn()
            g = t.gradient(loss, w)
        return acc.jvp(g)

    v = tf.constant(init_array((4,), 22, 1.0))
    v = v / tf.norm(v)
    rayleigh = []
    for _ in range(12):
        hv = hvp(v)
        rayleigh.append(tf.reduce_sum(v * hv))
        v = hv / tf.norm(hv)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = loss_fn()
        g = inner.gradient(loss, w)
    eig = tf.linalg.eigvalsh(outer.jacobian(g, w))
    return rayleigh, tf.abs(v), eig, tf.abs(rayleigh[-1] - eig[-1]) < 1e-3


# ---------------------------------------------------------------------------
# Second-order optimizers written by hand
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_damped_newton_on_logistic_regression_by_solve_and_cholesky_solve(tf):
    """Four damped Newton steps on L2-regularised logistic regression: gradient and Hessian by
    nested tapes and ``jacobian``, the step by ``tf.linalg.solve`` for one Variable and by
    ``cholesky`` + ``cholesky_solve`` for its twin, applied by ``assign_sub``; losses, gradient
    norms and both Variables per step."""
    x, y = _data(10, 3, 23, classes=2)
    yf = tf.constant(y.astype(np.float32)[:, None])
    xb = tf.concat([tf.constant(x), tf.ones((10, 1))], axis=1)
    w_solve = tf.Variable(np.zeros((4, 1), np.float32))
    w_chol = tf.Variable(np.zeros((4, 1), np.float32))

    def grad_hess(w):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=yf, logits=xb @ w))
                loss += 0.05 * tf.reduce_sum(tf.square(w))
            g = inner.gradient(loss, w)
        h = tf.reshape(outer.jacobian(g, w), (4, 4))
        return loss, g, h + 1e-3 * tf.eye(4)

    hist = []
    for _ in range(4):
        l1, g1, h1 = grad_hess(w_solve)
        w_solve.assign_sub(tf.linalg.solve(h1, g1))
        l2, g2, h2 = grad_hess(w_chol)
        chol = tf.linalg.cholesky(h2)
        w_chol.assign_sub(tf.linalg.cholesky_solve(chol, g2))
        hist.append((l1, tf.norm(g1), l2, tf.norm(g2), tf.identity(w_solve)))
    return hist, w_solve, w_chol


@parity(modes=True, **LOOSE)
def test_natural_gradient_with_a_damped_empirical_fisher_in_a_compiled_step(tf):
    """Natural-gradient descent on a 3-class softmax regression with flat parameters: per-example
    gradients by ``tape.jacobian`` of the per-example losses, the empirical Fisher ``G^T G / n +
    lambda I``, the step ``solve(F, g)``, 4 compiled steps with the damping decayed in a
    Variable; losses and parameters."""
    x, y = _data(8, 2, 24, classes=3)
    theta = tf.Variable(init_array((9,), 25))
    damping = tf.Variable(0.1)

    def per_example_losses():
        w = tf.reshape(theta[:6], (2, 3))
        logits = tf.matmul(x, w) + theta[6:]
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)

    @tf.function
    def step():
        with tf.GradientTape(persistent=True) as tape:
            losses = per_example_losses()
            loss = tf.reduce_mean(losses)
        g = tape.gradient(loss, theta)
        per = tape.jacobian(losses, theta)                              # [8, 9]
        fisher = tf.matmul(per, per, transpose_a=True) / 8.0 + damping * tf.eye(9)
        nat = tf.linalg.solve(fisher, g[:, None])[:, 0]
        theta.assign_sub(0.5 * nat)
        damping.assign(damping * 0.5)
        return loss, tf.norm(nat), tf.linalg.trace(fisher)

    hist = [step() for _ in range(4)]
    return hist, theta, damping


@parity(modes=True, **LOOSE)
def test_kfac_for_one_dense_layer_with_running_kronecker_factors(tf):
    """K-FAC on a single Dense softmax layer (raw Variables): the activation covariance ``A`` (inputs
    with a ones column) and the pre-activation-gradient covariance ``G`` (per-example ``dL/ds``
    times batch size, from ``tape.gradient`` w.r.t. the watched pre-activations) kept as running
    averages in Variables; the preconditioned step ``inv(G + d) grad inv(A + d)`` by
    ``tf.linalg.inv`` for one copy and by ``eigh`` for the other, 3 steps each."""
    x, y = _data(6, 3, 26, classes=3)
    xa = tf.concat([tf.constant(x), tf.ones((6, 1))], axis=1)              # [6, 4]
    copies = []
    for _ in range(2):
        copies.append(dict(w=tf.Variable(init_array((4, 3), 27)),
                           a=tf.Variable(tf.eye(4)), g=tf.Variable(tf.eye(3))))

    def inv_eigh(m, damp):
        e, q = tf.linalg.eigh(m)
        return tf.matmul(q / (e + damp), q, transpose_b=True)

    def step(c, use_eigh):
        with tf.GradientTape() as tape:
            s = tf.matmul(xa, c["w"])
            tape.watch(s)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=s))
        ds, gw = tape.gradient(loss, [s, c["w"]])
        ds = ds * 6.0
        c["a"].assign(0.9 * c["a"] + 0.1 * tf.matmul(xa, xa, transpose_a=True) / 6.0)
        c["g"].assign(0.9 * c["g"] + 0.1 * tf.matmul(ds, ds, transpose_a=True) / 6.0)
        if use_eigh:
            a_inv, g_inv = inv_eigh(c["a"], 0.1), inv_eigh(c["g"], 0.1)
        else:
            a_inv = tf.linalg.inv(c["a"] + 0.1 * tf.eye(4))
            g_inv = tf.linalg.inv(c["g"] + 0.1 * tf.eye(3))
        upd = tf.matmul(tf.matmul(a_inv, gw), g_inv)
        c["w"].assign_sub(0.2 * upd)
        return loss, gw, upd

    hist = [(step(copies[0], False), step(copies[1], True)) for _ in range(3)]
    return hist, [(c["w"], c["a"], c["g"]) for c in copies]


@parity(modes=True, **LOOSE)
def test_shampoo_preconditioner_roots_by_eigh_in_a_compiled_step(tf):
    """Shampoo on a 3x2 linear-regression weight: left/right statistics ``L += G G^T``, ``R += G^T G``
    in Variables, inverse fourth roots by ``eigh`` with eigenvalues floored by ``maximum``, the
    update ``L^{-1/4} G R^{-1/4}``; 4 compiled steps, losses, statistics and weights."""
    x = np.random.RandomState(28).randn(8, 3).astype(np.float32)
    y = (x @ init_array((3, 2), 29, 1.0)).astype(np.float32)
    w = tf.Variable(init_array((3, 2), 30))
    left = tf.Variable(1e-2 * tf.eye(3))
    right = tf.Variable(1e-2 * tf.eye(2))

    def inv_root(m, p):
        e, q = tf.linalg.eigh(m)
        e = tf.maximum(e, 1e-6)
        return tf.matmul(q * tf.pow(e, -1.0 / p), q, transpose_b=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        g = tape.gradient(loss, w)
        left.assign_add(tf.matmul(g, g, transpose_b=True))
        right.assign_add(tf.matmul(g, g, transpose_a=True))
        w.assign_sub(0.3 * tf.matmul(tf.matmul(inv_root(left, 4), g), inv_root(right, 4)))
        return loss, g

    hist = [step() for _ in range(4)]
    return hist, left, right, w


@parity(modes=True, **LOOSE)
def test_lbfgs_two_loop_over_variable_lists_with_a_python_backtracking_line_search(tf):
    """L-BFGS (memory 3) on an MLP's MSE with the Variables kept as a list: the two-loop recursion
    over Python lists of per-variable tensors (dot products summed over the list), an Armijo
    backtracking line search in Python on ``float(loss)`` that ``assign``s trial points, the
    curvature pair skipped when ``s . y <= 0``; 5 iterations, losses, step sizes and weights."""
    x, y = _data(8, 3, 31)
    vs = [tf.Variable(init_array((3, 4), 32)), tf.Variable(np.zeros(4, np.float32)),
          tf.Variable(init_array((4, 1), 33)), tf.Variable([0.0])]

    def dot(a, b):
        return tf.add_n([tf.reduce_sum(ai * bi) for ai, bi in zip(a, b)])

    def loss_grad():
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.matmul(x, vs[0]) + vs[1])
            loss = tf.reduce_mean(tf.square(tf.matmul(h, vs[2]) + vs[3] - y))
        return loss, tape.gradient(loss, vs)

    s_hist, y_hist, hist = [], [], []
    loss, g = loss_grad()
    for _ in range(5):
        q, alphas = list(g), []
        for s, yv in reversed(list(zip(s_hist, y_hist))):
            a = dot(s, q) / dot(yv, s)
            alphas.append(a)
            q = [qi - a * yi for qi, yi in zip(q, yv)]
        gamma = dot(s_hist[-1], y_hist[-1]) / dot(y_hist[-1], y_hist[-1]) if s_hist else 1.0
        r = [gamma * qi for qi in q]
        for (s, yv), a in zip(zip(s_hist, y_hist), reversed(alphas)):
            b = dot(yv, r) / dot(yv, s)
            r = [ri + (a - b) * si for ri, si in zip(r, s)]
        direction = [-ri for ri in r]
        start = [tf.identity(v) for v in vs]
        slope = float(dot(g, direction))
        t = 1.0
        while True:
            for v, s0, d in zip(vs, start, direction):
                v.assign(s0 + t * d)
            new_loss, new_g = loss_grad()
            if float(new_loss) <= float(loss) + 1e-4 * t * slope or t < 1e-3:
                break
            t *= 0.5
        s_new = [v - s0 for v, s0 in zip(vs, start)]
        y_new = [a - b for a, b in zip(new_g, g)]
        if float(dot(s_new, y_new)) > 1e-10:
            s_hist, y_hist = (s_hist + [s_new])[-3:], (y_hist + [y_new])[-3:]
        loss, g = new_loss, new_g
        hist.append((loss, t, len(s_hist)))
    return hist, vs


@parity(modes=True, **LOOSE)
def test_hessian_free_conjugate_gradient_in_a_while_loop_on_hvps(tf):
    """Hessian-free optimisation: each compiled outer step solves ``(H + lambda I) d = -g`` by 4
    iterations of conjugate gradient in a ``tf.while_loop`` whose body computes an HVP with nested
    tapes on the flat parameter Variable, stops early on the residual norm, and applies ``d``;
    3 outer steps, losses, CG iteration counts, residuals and parameters (CG's round-off grows
    fast with more iterations or less damping: 6 iterations at damping 0.1 differ by 0.4% after
    3 steps between two float32 implementations)."""
    x, y = _data(8, 3, 34)
    theta = tf.Variable(init_array((21,), 35))

    def loss_fn(th):
        return tf.reduce_mean(tf.square(_flat_mlp(tf, th, x) - y))

    def hvp(v):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = loss_fn(theta)
            g = inner.gradient(loss, theta)
            gv = tf.reduce_sum(g * v)
        return outer.gradient(gv, theta) + 0.5 * v

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(theta)
        g = tape.gradient(loss, theta)
        b = -g

        def cond(i, d, r, p, rs):
            return tf.logical_and(i < 4, rs > 1e-10)

        def body(i, d, r, p, rs):
            hp = hvp(p)
            alpha = rs / tf.reduce_sum(p * hp)
            d = d + alpha * p
            r = r - alpha * hp
            rs_new = tf.reduce_sum(r * r)
            p = r + (rs_new / rs) * p
            return i + 1, d, r, p, rs_new

        init = (tf.constant(0), tf.zeros_like(b), b, b, tf.reduce_sum(b * b))
        iters, d, r, _, rs = tf.while_loop(cond, body, init)
        theta.assign_add(d)
        return loss, iters, tf.sqrt(rs), tf.norm(d)

    hist = [step() for _ in range(3)]
    return hist, theta


@parity(modes=True, **LOOSE)
def test_adahessian_hutchinson_diagonal_with_bias_corrected_moments(tf):
    """AdaHessian on an MLP (Variables in a list): the Hessian diagonal estimated by one seeded
    Rademacher probe per step (``z * Hz``, the HVP by nested tapes of the summed ``g . z`` over the
    Variable list), first and second moments of the gradient and diagonal in Variables
    with bias correction, Hessian power 1; 4 steps, the first two compiled."""
    x, y = _data(8, 3, 36)
    vs = [tf.Variable(init_array((3, 4), 37)), tf.Variable(np.zeros(4, np.float32)),
          tf.Variable(init_array((4, 1), 38)), tf.Variable([0.0])]
    ms = [tf.Variable(tf.zeros_like(v)) for v in vs]
    ds = [tf.Variable(tf.zeros_like(v)) for v in vs]
    t_var = tf.Variable(0.0)
    rs = np.random.RandomState(39)
    probes = [[rs.choice([-1.0, 1.0], size=v.shape).astype(np.float32) for v in vs] for _ in range(4)]

    def step(zs):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                h = tf.tanh(tf.matmul(x, vs[0]) + vs[1])
                loss = tf.reduce_mean(tf.square(tf.matmul(h, vs[2]) + vs[3] - y))
            gs = inner.gradient(loss, vs)
            gz = tf.add_n([tf.reduce_sum(g * z) for g, z in zip(gs, zs)])
        hzs = outer.gradient(gz, vs)
        t_var.assign_add(1.0)
        diags = []
        for v, g, z, hz, m, d in zip(vs, gs, zs, hzs, ms, ds):
            diag = z * hz
            m.assign(0.9 * m + 0.1 * g)
            d.assign(0.999 * d + 0.001 * diag * diag)
            m_hat = m / (1.0 - tf.pow(0.9, t_var))
            d_hat = d / (1.0 - tf.pow(0.999, t_var))
            v.assign_sub(0.05 * m_hat / (tf.sqrt(d_hat) + 1e-4))
            diags.append(diag)
        return loss, gs, diags

    compiled = tf.function(step)
    hist = [compiled([tf.constant(z) for z in probes[i]]) for i in range(2)]
    hist += [step([tf.constant(z) for z in probes[i]]) for i in range(2, 4)]
    return hist, vs, ds, t_var


@parity(modes=True, **TOL)
def test_hvp_through_tf_docs_log1pexp_custom_gradient_eager_and_compiled(tf):
    """A logistic loss built on the ``tf.custom_gradient`` ``log1pexp`` of TF's documentation, its
    HVP by forward-over-reverse eagerly and inside a ``tf.function`` (before the fix tapejax raised
    TypeError there: JAX cannot push a ``custom_vjp`` forward) and by reverse-over-reverse; the
    loss's own JVP goes through ``log1pexp``'s forward ops."""
    x, y = _data(6, 3, 40, classes=2)
    sign = tf.constant((2.0 * y - 1.0).astype(np.float32))
    w = tf.Variable(init_array((3,), 41))
    v = tf.constant(init_array((3,), 42, 1.0))

    @tf.custom_gradient
    def log1pexp(z):
        e = tf.exp(z)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return tf.math.log(1 + e), grad

    def loss_fn():
        return tf.reduce_mean(log1pexp(-sign * tf.linalg.matvec(x, w))) + 0.05 * tf.reduce_sum(w * w)

    def fwd_over_rev(v):
        with tf.autodiff.ForwardAccumulator(w, v) as acc:
            with tf.GradientTape() as t:
                loss = loss_fn()
            g = t.gradient(loss, w)
        return loss, acc.jvp(loss), g, acc.jvp(g)

    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = loss_fn()
        gv = tf.reduce_sum(inner.gradient(loss, w) * v)
    return fwd_over_rev(v), tf.function(fwd_over_rev)(v), outer.gradient(gv, w)


@parity(modes=True, **TOL)
def test_second_directional_derivatives_through_a_custom_gradient_three_nestings(tf):
    """Second derivatives along ``v`` of a loss through a ``custom_gradient`` whose ``grad_fn`` is
    not its forward's derivative (``x^3`` forward, ``10 dy`` back): forward-over-forward (nested
    accumulators on a tensor; on a Variable TF 2.21 raises an internal ValueError, "variable
    without handle data"), reverse-over-forward (a tape around the accumulator, a Variable
    primal) and the tape's own gradient; TF pushes forward through ``x^3``."""
    x0 = tf.constant([0.3, -0.2, 0.7])
    x = tf.Variable(x0)
    v = tf.constant([1.0, -1.0, 0.5])

    @tf.custom_gradient
    def cube(a):
        return a * a * a, lambda dy: dy * 10.0

    with tf.autodiff.ForwardAccumulator(x0, v) as outer_acc:
        with tf.autodiff.ForwardAccumulator(x0, v) as inner_acc:
            y = cube(x0)     # (on cube(x0 * 1.0) TF 2.21 gives [1.6, .6, .6] here, not 6 x v^2)
        jv = inner_acc.jvp(y)
    with tf.GradientTape(persistent=True) as tape:
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y2 = cube(x * 1.0)
            s = tf.reduce_sum(y2)
        jv2 = acc.jvp(y2)
    return jv, outer_acc.jvp(jv), jv2, tape.gradient(jv2, x), tape.gradient(s, x), acc.jvp(s)
