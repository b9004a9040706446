"""Round twenty-two (b), second part: meta-learning and implicit differentiation written by hand
with nested ``GradientTape``s, as TF2-era research code writes them, each run under real TensorFlow
2.21 and under tapejax with deferred execution and predicted updates on and off (``modes=True``).

MAML with several inner SGD steps, second order and first order (``stop_gradient`` on the inner
gradients) in one compiled meta-step; inner steps by ``assign`` on copied Variables next to
functional inner steps (only the functional one reaches the meta-weights: the ``assign`` version's
meta-gradient is all ``None``); Meta-SGD's learned per-parameter rates; ANIL with a Keras body;
Reptile's interpolation by ``assign``; iMAML's implicit meta-gradient by conjugate gradient on
HVPs; a hypernetwork producing a target network's weights; a learned optimizer unrolled for 3
inner steps; hypergradient descent on per-layer log learning rates; a momentum coefficient learned
through an unrolled optimizer; a fixed point (deep-equilibrium layer) whose gradient comes from the
implicit function theorem in a ``tf.custom_gradient`` with ``variables``; and bilevel optimisation
of an L2 coefficient by unrolled and by implicit gradients.

Every random number is drawn with NumPy and fed in (tapejax's random ops are not TF's Philox).
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

TOL = dict(rtol=1e-4, atol=1e-5)
LOOSE = dict(rtol=5e-4, atol=5e-5)   # unrolled second-order chains and solves in float32


def _tasks(n_tasks, n, d, seed):
    """Sine-free regression tasks: a random linear map plus a tanh bump, support and query sets."""
    rs = np.random.RandomState(seed)
    out = []
    for _ in range(n_tasks):
        w = rs.randn(d, 1)
        xs, xq = rs.randn(n, d), rs.randn(n, d)
        out.append(tuple(a.astype(np.float32) for a in (xs, np.tanh(xs @ w), xq, np.tanh(xq @ w))))
    return out


def _net(tf, ws, x):
    w1, b1, w2, b2 = ws
    return tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2


def _mse(tf, ws, x, y):
    return tf.reduce_mean(tf.square(_net(tf, ws, x) - y))


def _vars(tf, d, h, seed):
    return [tf.Variable(init_array((d, h), seed)), tf.Variable(init_array((h,), seed + 1, 0.1)),
            tf.Variable(init_array((h, 1), seed + 2)), tf.Variable([0.0])]


# ---------------------------------------------------------------------------
# MAML and its relatives
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_maml_three_inner_steps_second_and_first_order_in_one_compiled_meta_step(tf):
    """A compiled meta-step over a batch of 2 tasks fed as stacked tensors: 3 functional inner SGD
    steps whose rate is a Variable, the query loss of the adapted weights averaged, meta-gradients
    w.r.t. the weights and the inner rate both second order and first order (``stop_gradient`` on
    the inner gradients, from the same persistent tape), Adam on the second-order ones; 3 meta-steps."""
    tasks = _tasks(2, 5, 2, 40)
    stacked = [tf.constant(np.stack([t[i] for t in tasks])) for i in range(4)]
    ws = _vars(tf, 2, 4, 41)
    lr = tf.Variable(0.2)
    opt = tf.keras.optimizers.Adam(0.01)

    def adapt(xs, ys, first_order):
        fast = list(ws)
        for _ in range(3):
            with tf.GradientTape() as inner:
                inner.watch(fast)
                loss = _mse(tf, fast, xs, ys)
            gs = inner.gradient(loss, fast)
            if first_order:
                gs = [tf.stop_gradient(g) for g in gs]
            fast = [w - lr * g for w, g in zip(fast, gs)]
        return fast

    @tf.function
    def meta_step(xs, ys, xq, yq):
        with tf.GradientTape(persistent=True) as outer:
            so = fo = 0.0
            for k in range(2):
                so += _mse(tf, adapt(xs[k], ys[k], False), xq[k], yq[k]) / 2.0
                fo += _mse(tf, adapt(xs[k], ys[k], True), xq[k], yq[k]) / 2.0
        g_so = outer.gradient(so, ws + [lr])
        g_fo = outer.gradient(fo, ws + [lr])
        opt.apply_gradients(zip(g_so[:4], ws))
        return so, fo, g_so, g_fo

    hist = [meta_step(*stacked) for _ in range(3)]
    return hist, ws, lr


@parity(modes=True, **TOL)
def test_maml_inner_steps_by_assign_on_copies_versus_functional_weights(tf):
    """Two ways of writing MAML's inner loop under one persistent outer tape: ``assign`` the
    meta-weights into copies and ``assign_sub`` SGD steps on them (the meta-gradient is all
    ``None``: assigns are not differentiable; the copies' gradient sums every recorded read, the
    support losses' included), and functional fast weights (a real second-order meta-gradient)."""
    xs, ys, xq, yq = _tasks(1, 6, 2, 42)[0]
    meta = _vars(tf, 2, 3, 43)
    copies = [tf.Variable(tf.zeros_like(v)) for v in meta]
    with tf.GradientTape(persistent=True) as outer:
        for c, v in zip(copies, meta):
            c.assign(v)
        support = []
        for _ in range(2):
            with tf.GradientTape() as inner:
                loss = _mse(tf, copies, xs, ys)
            support.append(loss)
            for c, g in zip(copies, inner.gradient(loss, copies)):
                c.assign_sub(0.3 * g)
        query_assign = _mse(tf, copies, xq, yq)
        fast = list(meta)
        for _ in range(2):
            with tf.GradientTape() as inner:
                inner.watch(fast)
                loss = _mse(tf, fast, xs, ys)
            fast = [w - 0.3 * g for w, g in zip(fast, inner.gradient(loss, fast))]
        query_fn = _mse(tf, fast, xq, yq)
        both = query_assign + support[0]
    return (support, query_assign, query_fn,
            outer.gradient(query_assign, meta),
            outer.gradient(query_assign, copies),
            outer.gradient(both, copies),
            outer.gradient(query_assign + support[0], copies),      # summed outside the tape: None
            outer.gradient(query_fn, meta),
            outer.gradient(query_fn, copies), copies)


@parity(modes=True, **LOOSE)
def test_meta_sgd_learns_per_parameter_inner_rates(tf):
    """Meta-SGD: the inner step ``w - alpha * g`` with a learned rate Variable per weight (same
    shapes), one inner step per task, meta-gradients w.r.t. weights and rates by one outer tape,
    SGD on both by ``assign_sub``; 3 meta-steps over 2 tasks eagerly, the fourth compiled."""
    tasks = _tasks(2, 5, 2, 44)
    ws = _vars(tf, 2, 3, 45)
    alphas = [tf.Variable(tf.fill(tf.shape(w), 0.1)) for w in ws]

    def meta_step():
        with tf.GradientTape() as outer:
            meta = 0.0
            for xs, ys, xq, yq in tasks:
                with tf.GradientTape() as inner:
                    loss = _mse(tf, ws, xs, ys)
                gs = inner.gradient(loss, ws)
                fast = [w - a * g for w, a, g in zip(ws, alphas, gs)]
                meta += _mse(tf, fast, xq, yq)
        grads = outer.gradient(meta, ws + alphas)
        for v, g in zip(ws + alphas, grads):
            v.assign_sub(0.05 * g)
        return meta, grads

    hist = [meta_step() for _ in range(3)] + [tf.function(meta_step)()]
    return hist, ws, alphas


@parity(modes=True, **LOOSE)
def test_anil_adapts_only_the_head_over_a_keras_dense_body(tf):
    """ANIL: a ``tf.keras.layers.Dense`` body shared across tasks, only the linear head adapted by
    2 functional inner steps; the body's meta-gradient flows through the inner head gradients
    (second order); a head-only first-order variant by ``stop_gradient``; Adam on body and head,
    3 meta-steps over 2 tasks."""
    tasks = _tasks(2, 6, 3, 46)
    body = tf.keras.layers.Dense(4, activation="tanh")
    body.build((None, 3))
    body.set_weights([init_array((3, 4), 47), init_array((4,), 48, 0.1)])
    head = [tf.Variable(init_array((4, 1), 49)), tf.Variable([0.0])]
    opt = tf.keras.optimizers.Adam(0.02)
    params = body.trainable_variables + head
    hist = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as outer:
            meta = meta_fo = 0.0
            for xs, ys, xq, yq in tasks:
                fs, fq = body(xs), body(xq)
                for first_order in (False, True):
                    fast = list(head)
                    for _ in range(2):
                        with tf.GradientTape() as inner:
                            inner.watch(fast)
                            loss = tf.reduce_mean(tf.square(tf.matmul(fs, fast[0]) + fast[1] - ys))
                        gs = inner.gradient(loss, fast)
                        if first_order:
                            gs = [tf.stop_gradient(g) for g in gs]
                        fast = [w - 0.5 * g for w, g in zip(fast, gs)]
                    q = tf.reduce_mean(tf.square(tf.matmul(fq, fast[0]) + fast[1] - yq))
                    if first_order:
                        meta_fo += q
                    else:
                        meta += q
        g = outer.gradient(meta, params)
        g_fo = outer.gradient(meta_fo, params)
        del outer
        opt.apply_gradients(zip(g, params))
        hist.append((meta, meta_fo, g, g_fo))
    return hist, params


@parity(modes=True, **LOOSE)
def test_reptile_batched_tasks_compiled_inner_loop_and_assign_interpolation(tf):
    """Batched Reptile: for each of 3 tasks the meta-weights are copied into a fast set by
    ``assign``, a compiled function runs 4 SGD steps by ``assign_sub`` in a ``tf.range`` loop, the
    adapted weights are summed into accumulators; the meta-weights move by
    ``assign_add(eps * (mean - w))`` with ``eps`` annealed; 2 outer iterations."""
    tasks = _tasks(3, 5, 2, 50)
    ws = _vars(tf, 2, 3, 51)
    fast = [tf.Variable(tf.zeros_like(w)) for w in ws]
    acc = [tf.Variable(tf.zeros_like(w)) for w in ws]

    @tf.function
    def inner_loop(x, y):
        losses = tf.TensorArray(tf.float32, size=4)
        for i in tf.range(4):
            with tf.GradientTape() as tape:
                loss = _mse(tf, fast, x, y)
            for v, g in zip(fast, tape.gradient(loss, fast)):
                v.assign_sub(0.2 * g)
            losses = losses.write(i, loss)
        return losses.stack()

    hist = []
    for it in range(2):
        for a in acc:
            a.assign(tf.zeros_like(a))
        for xs, ys, _, _ in tasks:
            for f, w in zip(fast, ws):
                f.assign(w)
            hist.append(inner_loop(xs, ys))
            for a, f in zip(acc, fast):
                a.assign_add(f / 3.0)
        eps = 1.0 - 0.5 * it
        for w, a in zip(ws, acc):
            w.assign_add(eps * (a - w))
    return hist, ws, acc


@parity(modes=True, **LOOSE)
def test_imaml_implicit_meta_gradient_by_conjugate_gradient_on_hvps(tf):
    """iMAML: the inner problem ``support loss + lam/2 ||phi - theta||^2`` by 8 functional gradient
    steps (tensors, no gradient kept), then the implicit meta-gradient ``(I + H/lam)^{-1} g_query``
    at ``phi`` by 5 conjugate-gradient steps on HVPs (nested tapes over watched tensors), compared
    with a direct ``solve`` against the Hessian from ``tape.jacobian``; 2 meta-steps on theta."""
    tasks = _tasks(2, 6, 2, 52)
    theta = tf.Variable(init_array((4,), 53))
    lam = 2.0

    def model_loss(p, x, y):
        pred = tf.tanh(tf.linalg.matvec(x, p[:2])) * p[2] + p[3]
        return tf.reduce_mean(tf.square(pred[:, None] - y))

    def hvp(p, v, x, y):
        with tf.GradientTape() as outer:
            outer.watch(p)
            with tf.GradientTape() as inner:
                inner.watch(p)
                loss = model_loss(p, x, y)
            gv = tf.reduce_sum(inner.gradient(loss, p) * v)
        return outer.gradient(gv, p)

    hist = []
    for _ in range(2):
        meta_g, direct_g, qs = [], [], []
        for xs, ys, xq, yq in tasks:
            phi = tf.identity(theta)
            for _ in range(8):
                with tf.GradientTape() as t:
                    t.watch(phi)
                    loss = model_loss(phi, xs, ys) + 0.5 * lam * tf.reduce_sum(tf.square(phi - theta))
                phi = phi - 0.1 * t.gradient(loss, phi)
            with tf.GradientTape() as t:
                t.watch(phi)
                q = model_loss(phi, xq, yq)
            gq = t.gradient(q, phi)
            x, r = tf.zeros_like(gq), gq
            p, rs = r, tf.reduce_sum(r * r)
            for _ in range(5):
                ap = p + hvp(phi, p, xs, ys) / lam
                alpha = rs / tf.reduce_sum(p * ap)
                x, r = x + alpha * p, r - alpha * ap
                rs_new = tf.reduce_sum(r * r)
                p, rs = r + rs_new / rs * p, rs_new
            with tf.GradientTape() as o:
                o.watch(phi)
                with tf.GradientTape() as i:
                    i.watch(phi)
                    ls = model_loss(phi, xs, ys)
                gs = i.gradient(ls, phi)
            hess = o.jacobian(gs, phi)
            direct = tf.linalg.solve(tf.eye(4) + hess / lam, gq[:, None])[:, 0]
            meta_g.append(x)
            direct_g.append(direct)
            qs.append(q)
        theta.assign_sub(0.3 * tf.add_n(meta_g) / 2.0)
        hist.append((qs, meta_g, direct_g))
    return hist, theta


# ---------------------------------------------------------------------------
# Networks that produce weights or updates, and learned hyperparameters
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_hypernetwork_dense_emits_a_target_mlps_weights_from_task_embeddings(tf):
    """A ``tf.keras.layers.Dense`` hypernetwork maps a per-task embedding Variable to the flat
    weights of a 2-4-1 target MLP (split and reshaped); 3 Adam steps on the hypernetwork and the
    embeddings of the two tasks trained (a third embedding never used: its gradient is None)."""
    tasks = _tasks(2, 6, 2, 54)
    hyper = tf.keras.layers.Dense(17)
    hyper.build((None, 3))
    hyper.set_weights([init_array((3, 17), 55, 0.3), np.zeros(17, np.float32)])
    embs = [tf.Variable(init_array((1, 3), 56 + k, 1.0)) for k in range(3)]
    opt = tf.keras.optimizers.Adam(0.05)
    params = hyper.trainable_variables + embs
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = 0.0
            for (xs, ys, _, _), e in zip(tasks, embs):
                flat = hyper(e)[0]
                w1, b1, w2, b2 = tf.split(flat, [8, 4, 4, 1])
                loss += _mse(tf, [tf.reshape(w1, (2, 4)), b1, tf.reshape(w2, (4, 1)), b2], xs, ys)
        grads = tape.gradient(loss, params)
        opt.apply_gradients((g, v) for g, v in zip(grads, params) if g is not None)
        hist.append((loss, grads))
    return hist, params


@parity(modes=True, **LOOSE)
def test_learned_optimizer_mlp_meta_trained_by_unrolling_three_inner_steps(tf):
    """A learned optimizer: a tiny per-coordinate MLP (Variables) maps ``(gradient, parameter)``
    features to an update; the optimizee (linear regression, a tensor) takes 3 unrolled steps
    whose gradients come from inner tapes watching it; the meta-loss is the sum of the optimizee
    losses; Adam on the optimizer's weights for 3 meta-steps (the last compiled)."""
    rs = np.random.RandomState(57)
    problems = []
    for _ in range(2):
        x = rs.randn(8, 3).astype(np.float32)
        problems.append((x, (x @ rs.randn(3, 1)).astype(np.float32)))
    opt_vars = [tf.Variable(init_array((2, 6), 58)), tf.Variable(np.zeros(6, np.float32)),
                tf.Variable(init_array((6, 1), 59, 0.3)), tf.Variable([0.0])]
    meta_opt = tf.keras.optimizers.Adam(0.01)

    def learned_update(g, p):
        feats = tf.stack([g, p], axis=-1)
        h = tf.tanh(tf.matmul(feats, opt_vars[0]) + opt_vars[1])
        return (tf.matmul(h, opt_vars[2]) + opt_vars[3])[:, 0]

    def meta_step():
        with tf.GradientTape() as outer:
            meta_loss, traj = 0.0, []
            for x, y in problems:
                p = tf.zeros(3)
                for _ in range(3):
                    with tf.GradientTape() as inner:
                        inner.watch(p)
                        loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, p)[:, None] - y))
                    g = inner.gradient(loss, p)
                    p = p - 0.1 * learned_update(g, p)
                    loss_after = tf.reduce_mean(tf.square(tf.linalg.matvec(x, p)[:, None] - y))
                    meta_loss += loss_after
                    traj.append(loss_after)
        grads = outer.gradient(meta_loss, opt_vars)
        meta_opt.apply_gradients(zip(grads, opt_vars))
        return meta_loss, traj, grads

    hist = [meta_step() for _ in range(2)] + [tf.function(meta_step)()]
    return hist, opt_vars


@parity(modes=True, **LOOSE)
def test_hypergradient_descent_on_per_layer_log_learning_rates_compiled(tf):
    """Hypergradient descent: per-layer learning rates ``exp(log_lr)`` in a Variable of shape [2];
    each compiled step unrolls 2 functional SGD steps from the current weights, differentiates
    the validation loss w.r.t. ``log_lr`` (the weights' own gradient too), updates ``log_lr`` by
    SGD and assigns the unrolled weights back; 4 steps, learning rates and losses."""
    x, y = _tasks(1, 8, 2, 60)[0][:2]
    xv, yv = _tasks(1, 8, 2, 61)[0][:2]
    ws = _vars(tf, 2, 3, 62)
    log_lr = tf.Variable(np.log([0.05, 0.05]).astype(np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as outer:
            lrs = tf.exp(log_lr)
            fast = list(ws)
            for _ in range(2):
                with tf.GradientTape() as inner:
                    inner.watch(fast)
                    loss = _mse(tf, fast, x, y)
                gs = inner.gradient(loss, fast)
                fast = [w - lrs[i // 2] * g for i, (w, g) in enumerate(zip(fast, gs))]
            val = _mse(tf, fast, xv, yv)
        g_lr, g_w0 = outer.gradient(val, [log_lr, ws[0]])
        log_lr.assign_sub(0.5 * g_lr)
        for w, f in zip(ws, fast):
            w.assign(f)
        return loss, val, g_lr, g_w0

    hist = [step() for _ in range(4)]
    return hist, tf.exp(log_lr), ws


@parity(modes=True, **LOOSE)
def test_momentum_coefficient_learned_through_an_unrolled_heavy_ball_optimizer(tf):
    """A momentum coefficient ``sigmoid(logit)`` learned by differentiating the final training loss
    through 4 unrolled heavy-ball steps (velocity and weights as tensors); the gradient w.r.t. the
    logit and the initial weights; 3 outer updates of the logit by ``assign_sub``."""
    x, y = _tasks(1, 8, 3, 63)[0][:2]
    w0 = tf.Variable(init_array((3, 1), 64))
    logit = tf.Variable(0.0)
    hist = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            beta = tf.sigmoid(logit)
            w, vel, losses = tf.identity(w0), tf.zeros((3, 1)), []
            for _ in range(4):
                with tf.GradientTape() as inner:
                    inner.watch(w)
                    loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w)) - y))
                vel = beta * vel + inner.gradient(loss, w)
                w = w - 0.3 * vel
                losses.append(loss)
            final = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w)) - y))
        g_logit, g_w0 = outer.gradient(final, [logit, w0])
        logit.assign_sub(2.0 * g_logit)
        hist.append((losses, final, g_logit, g_w0))
    return hist, logit


# ---------------------------------------------------------------------------
# Implicit differentiation
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_deq_fixed_point_with_implicit_gradient_by_custom_gradient_with_variables(tf):
    """A deep-equilibrium layer ``z = tanh(W z + U x)``: the forward fixed point by 30 Python
    iterations, the backward by the implicit function theorem in a ``tf.custom_gradient`` whose
    ``grad_fn`` takes ``variables`` (adjoint fixed point ``u = dz + J^T u``, then one VJP through a
    single application for ``x``, ``W`` and ``U``); compared with backprop through 40 unrolled
    iterations; 2 SGD steps on ``W`` and ``U``."""
    x = tf.constant(np.random.RandomState(65).randn(4, 3).astype(np.float32))
    y = tf.constant(np.random.RandomState(66).randn(4, 3).astype(np.float32))
    w = tf.Variable(init_array((3, 3), 67, 0.2))
    u = tf.Variable(init_array((3, 3), 68, 0.5))

    def f(z, x):
        return tf.tanh(tf.matmul(z, w) + tf.matmul(x, u))

    @tf.custom_gradient
    def deq(x):
        z = tf.zeros_like(x)
        for _ in range(30):
            z = f(z, x)

        def grad_fn(dz, variables=None):
            with tf.GradientTape(persistent=True) as t:
                t.watch([z, x])
                fz = f(z, x)
            a = dz
            for _ in range(30):
                a = dz + t.gradient(fz, z, output_gradients=a)
            grads = t.gradient(fz, [x] + list(variables), output_gradients=a)
            return grads[0], grads[1:]

        return z, grad_fn

    hist = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            z_imp = deq(x)
            loss_imp = tf.reduce_sum(tf.square(z_imp - y))
            z = tf.zeros_like(x)
            for _ in range(40):
                z = f(z, x)
            loss_unr = tf.reduce_sum(tf.square(z - y))
        g_imp = tape.gradient(loss_imp, [x, w, u])
        g_unr = tape.gradient(loss_unr, [x, w, u])
        del tape
        w.assign_sub(0.1 * g_imp[1])
        u.assign_sub(0.1 * g_imp[2])
        hist.append((loss_imp, loss_unr, g_imp, g_unr))
    return hist, w, u


@parity(modes=True, **LOOSE)
def test_bilevel_l2_coefficient_by_unrolled_and_by_implicit_gradients(tf):
    """Bilevel tuning of ridge regression's ``log lam``: the unrolled hypergradient through 10
    functional gradient steps from zero weights, the implicit one at the closed-form solution
    ``w* = solve(X^T X / n + lam I, X^T y / n)`` both by differentiating through ``solve`` and by the
    implicit function theorem written by hand (``-lam * v^T H^{-1} w*``); 3 outer steps on the
    implicit hypergradient (``watch_accessed_variables=False`` tapes, the Variable watched)."""
    rs = np.random.RandomState(69)
    x = rs.randn(12, 4).astype(np.float32)
    w_true = rs.randn(4, 1).astype(np.float32)
    y = (x @ w_true + 0.5 * rs.randn(12, 1)).astype(np.float32)
    xv = rs.randn(10, 4).astype(np.float32)
    yv = (xv @ w_true).astype(np.float32)
    log_lam = tf.Variable(0.0)
    xtx, xty = tf.constant(x.T @ x / 12.0), tf.constant(x.T @ y / 12.0)

    def val_loss(w):
        return tf.reduce_mean(tf.square(tf.matmul(xv, w) - yv))

    hist = []
    for _ in range(3):
        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
            tape.watch(log_lam)
            lam = tf.exp(log_lam)
            w = tf.zeros((4, 1))
            for _ in range(10):
                with tf.GradientTape() as inner:
                    inner.watch(w)
                    train = tf.reduce_mean(tf.square(tf.matmul(x, w) - y)) + lam * tf.reduce_sum(tf.square(w))
                w = w - 0.2 * inner.gradient(train, w)
            unrolled = val_loss(w)
            h = 2.0 * (xtx + lam * tf.eye(4))
            w_star = tf.linalg.solve(h / 2.0, xty)
            through_solve = val_loss(w_star)
        g_unrolled, g_solve = tape.gradient([unrolled], log_lam), tape.gradient(through_solve, log_lam)
        with tf.GradientTape() as t:
            t.watch(w_star)
            vl = val_loss(w_star)
        v = t.gradient(vl, w_star)
        g_ift = -lam * tf.reduce_sum(v * tf.linalg.solve(h, 2.0 * w_star))
        log_lam.assign_sub(1.0 * g_ift)
        hist.append((unrolled, through_solve, g_unrolled, g_solve, g_ift, tape.gradient(vl, log_lam)))
    return hist, log_lam


def _grl_and_fixed_point(tf):
    @tf.custom_gradient
    def reverse_grad(h):
        return tf.identity(h), lambda dy: -0.5 * dy

    @tf.custom_gradient
    def fixed_point(a):
        z = tf.zeros_like(a)
        for _ in range(8):      # not converged: the forward ops' JVP is not the implicit one
            z = tf.tanh(0.5 * z + a)

        def grad_fn(dz):
            d = 1.0 - tf.square(z)
            return dz * d / (1.0 - 0.5 * d)
        return z, grad_fn
    return reverse_grad, fixed_point


@parity(modes=True, **LOOSE)
def test_forward_mode_through_custom_gradients_follows_their_forward_ops(tf):
    """Forward mode through ``tf.custom_gradient`` functions, as TF pushes it: a gradient-reversal
    layer (domain adaptation: identity forward, ``-lam * dy`` backward) and a fixed point solved by
    8 Python iterations with an implicit ``grad_fn``; ``ForwardAccumulator`` JVPs follow the
    forward ops (before the fix tapejax transposed ``grad_fn``: the reversed sign, the implicit
    adjoint) while the tape's gradients follow ``grad_fn``; a ``tf.function`` called under the
    accumulator is one op to it, pushed forward through ``grad_fn``."""
    reverse_grad, fixed_point = _grl_and_fixed_point(tf)
    x = tf.constant(init_array((3, 2), 70, 1.0))
    w = tf.Variable(init_array((2, 2), 71, 0.3))
    with tf.autodiff.ForwardAccumulator(w, tf.constant(init_array((2, 2), 72, 1.0))) as acc:
        with tf.GradientTape() as tape:
            h = tf.matmul(x, w)
            domain = tf.reduce_sum(tf.square(reverse_grad(h)))
            z = fixed_point(h)
            loss = tf.reduce_sum(z * z)
        grads = tape.gradient([domain, loss], w)
        compiled = tf.function(reverse_grad)(h)
    return domain, loss, grads, acc.jvp(domain), acc.jvp(z), acc.jvp(loss), acc.jvp(compiled)


@xfail_on_tapejax("design limit: a recorded gradient pushed forward (forward-over-reverse) replays the "
                  "custom-gradient op as one jax.custom_vjp, whose forward tangent JAX can only get by "
                  "transposing grad_fn; TF pushes the op's output forward through f's ops. They differ "
                  "only where grad_fn is not f's derivative (here the gradient reversal)")
@parity(modes=True, **LOOSE)
def test_forward_over_reverse_through_a_gradient_reversal_layer(tf):
    """The HVP-style ``acc.jvp(tape.gradient(...))`` of a loss through a gradient-reversal layer: in
    TF the upstream ``dy`` that ``grad_fn`` scales carries the forward ops' tangent (+), in tapejax
    the transposed ``grad_fn``'s (-)."""
    reverse_grad, _ = _grl_and_fixed_point(tf)
    x = tf.constant(init_array((3, 2), 70, 1.0))
    w = tf.Variable(init_array((2, 2), 71, 0.3))
    with tf.autodiff.ForwardAccumulator(w, tf.constant(init_array((2, 2), 72, 1.0))) as acc:
        with tf.GradientTape() as tape:
            domain = tf.reduce_sum(tf.square(reverse_grad(tf.matmul(x, w))))
        g = tape.gradient(domain, w)
    return g, acc.jvp(g)


@xfail_on_tapejax("tapejax.keras is Keras 3 (tapejax/keras/README.md), whose Dense.kernel and .bias are "
                  "read-only properties: setting one raises AttributeError, as under TF 2.21's own Keras 3; "
                  "tf_keras' layers take a Tensor there")
@parity(modes=True, **LOOSE)
def test_maml_by_setting_a_keras_copys_kernels_to_fast_weight_tensors(tf):
    """The tf_keras MAML idiom: a second instance of the model whose layers' ``kernel`` / ``bias``
    attributes are set to the fast-weight tensors ``w - lr * g``, so calling it differentiates back
    to the meta-model's Variables."""
    xs, ys, xq, yq = _tasks(1, 5, 2, 73)[0]

    def make():
        m = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="tanh"), tf.keras.layers.Dense(1)])
        m.build((None, 2))
        return m

    model, fast = make(), make()
    model.set_weights([init_array(tuple(w.shape), 74 + i) for i, w in enumerate(model.weights)])
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            support = tf.reduce_mean(tf.square(model(xs) - ys))
        gs = inner.gradient(support, model.trainable_variables)
        for k, layer in enumerate(model.layers):
            fast.layers[k].kernel = layer.kernel - 0.3 * gs[2 * k]
            fast.layers[k].bias = layer.bias - 0.3 * gs[2 * k + 1]
        query = tf.reduce_mean(tf.square(fast(xq) - yq))
    return support, query, outer.gradient(query, model.trainable_variables)
