"""Round eight of realistic user programs, each run under real TensorFlow 2.21 and under tapejax
with deferred execution and predicted updates on and off (``modes=True``: the answer must not
depend on tapejax's execution mode).  This round looks at how the tape is *steered*, where a
wrong number, a ``None`` where TF has a value (or the reverse) or a leak could hide: meta-learning
with a learned inner learning rate and first-order MAML by ``stop_recording`` around the inner
gradient, a hypergradient attempted through ``assign`` (None, as in TF) next to the unrolled one,
WGAN-GP with several critic steps per generator step and a compiled critic differentiated twice,
``watch_accessed_variables=False`` with a Keras layer watched only after its first call, a
data-dependent (ActNorm) initialisation inside the tape, BYOL-style target branches under
``stop_recording`` while an inner tape keeps recording, ``reset()`` of a persistent tape between
two phases, dict sources with ``UnconnectedGradients.ZERO`` (an int step counter among them),
Jacobians w.r.t. weights inside a training loss, forward-over-reverse Hessian-vector products in
a Newton-CG step, several gradient calls per step with updates in between (SAM, PCGrad), a split
model's backward chained by ``output_gradients``, ``clip_by_global_norm`` differentiated at its
tie, a custom gradient that recomputes its block under a tape, custom-gradient cells with
Variables (one returning ``None`` for its Variable), integer and boolean paths (argmax hard
attention, ``boolean_mask``), ``-inf`` logits masked by ``where``, graph pooling by
``unsorted_segment_mean`` / ``unsorted_segment_sqrt_n`` with an empty graph, a Keras loss at its
kink, Python branches on ``.numpy()`` / ``float()`` / ``bool()`` of tensors under a tape, and
Python threads: two training loops in lockstep (tapes are thread-local, as in TF), a parameter
server thread applying the main thread's gradients, and a worker's ops unseen by the main
thread's tape.  Random draws are made with NumPy and fed in.
"""
import queue
import threading

import numpy as np

from .harness import init_array, mlp, mlp_vars, parity, regression_data

TOL = dict(rtol=2e-5, atol=2e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# Meta-learning and hypergradients
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_meta_sgd_learns_per_parameter_inner_rates_over_two_tasks(tf):
    """Meta-SGD: an MLP's fast weights ``w - alpha * g`` with a learned per-parameter inner rate
    ``alpha`` (a list of Variables); two tasks per meta-batch, each with its own inner tape inside
    one outer tape; the summed query loss is differentiated w.r.t. the weights (second order
    through the inner gradient) and the rates, and Adam updates both."""
    vs = mlp_vars(tf, d=2, h=3, seed=11)
    alphas = [tf.Variable(tf.fill(v.shape, 0.3)) for v in vs]
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    tasks = [(regression_data(n=4, d=2, seed=20 + 2 * k), regression_data(n=4, d=2, seed=21 + 2 * k))
             for k in range(2)]
    out = []
    for step in range(2):
        with tf.GradientTape() as outer:
            meta = 0.0
            for (xs, ys), (xq, yq) in tasks:
                with tf.GradientTape() as inner:
                    ls = tf.reduce_mean((mlp(tf, vs, xs) - ys) ** 2)
                gs = inner.gradient(ls, vs)
                fast = [v - a * g for v, a, g in zip(vs, alphas, gs)]
                meta = meta + tf.reduce_mean((mlp(tf, fast, xq) - yq) ** 2)
        grads = outer.gradient(meta, vs + alphas)
        opt.apply_gradients(zip(grads, vs + alphas))
        out.append((meta, grads[:4], grads[4:]))
    return out, vs, alphas


@parity(modes=True, **LOOSE)
def test_first_order_maml_by_stop_recording_the_inner_gradient(tf):
    """First-order MAML written with ``outer.stop_recording()`` around the inner gradient: the
    outer gradient is the query gradient at the adapted weights (checked against a separate tape
    on them), while the full second-order version differs; both are trained side by side."""
    xs, ys = regression_data(n=5, d=2, seed=31)
    xq, yq = regression_data(n=5, d=2, seed=32)
    w_fo = tf.Variable(init_array((2, 1), 33))
    w_so = tf.Variable(init_array((2, 1), 33))

    def loss(w, x, y):
        return tf.reduce_mean((tf.tanh(tf.matmul(x, w)) - y) ** 2)

    out = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                li = loss(w_fo, xs, ys)
            with outer.stop_recording():
                g = inner.gradient(li, w_fo)
            fast = w_fo - 0.5 * g
            lq = loss(fast, xq, yq)
        g_fo = outer.gradient(lq, w_fo)
        fast_c = tf.constant(fast.numpy())
        with tf.GradientTape() as check:
            check.watch(fast_c)
            lc = loss(fast_c, xq, yq)
        g_check = check.gradient(lc, fast_c)
        with tf.GradientTape() as outer2:
            with tf.GradientTape() as inner2:
                li2 = loss(w_so, xs, ys)
            fast2 = w_so - 0.5 * inner2.gradient(li2, w_so)
            lq2 = loss(fast2, xq, yq)
        g_so = outer2.gradient(lq2, w_so)
        w_fo.assign_sub(0.2 * g_fo)
        w_so.assign_sub(0.2 * g_so)
        out.append((lq, g_fo, g_check, lq2, g_so))
    return out, w_fo, w_so


@parity(modes=True, **TOL)
def test_hypergradient_through_assign_is_none_and_through_tensors_is_not(tf):
    """A user tries to learn the inner learning rate by unrolling ``w.assign_sub(lr * g)`` inside
    the outer tape: ``assign`` records no gradient, so d(val loss)/d(lr) is None (TF's answer);
    the same unroll with tensors (``w_t = w_t - lr * g``) gives the hypergradient, which trains
    ``lr``.  The assign version's weights still move every step."""
    x, y = regression_data(n=6, d=2, seed=41)
    xv, yv = regression_data(n=6, d=2, seed=42)
    w = tf.Variable(init_array((2, 1), 43))
    w0 = init_array((2, 1), 44)
    lr = tf.Variable(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            for _ in range(2):
                with tf.GradientTape() as inner:
                    li = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
                w.assign_sub(lr * inner.gradient(li, w))
            lv = tf.reduce_mean((tf.matmul(xv, w) - yv) ** 2)
        g_assign = outer.gradient(lv, [lr, w])
        with tf.GradientTape() as outer:
            wt = tf.constant(w0)
            for _ in range(2):
                with tf.GradientTape() as inner:
                    inner.watch(wt)
                    li = tf.reduce_mean((tf.matmul(x, wt) - y) ** 2)
                wt = wt - lr * inner.gradient(li, wt)
            lv2 = tf.reduce_mean((tf.matmul(xv, wt) - yv) ** 2)
        g_lr = outer.gradient(lv2, lr)
        lr.assign_sub(0.05 * g_lr)
        out.append((lv, g_assign[0] is None, g_assign[1], lv2, g_lr))
    return out, w, lr


# ---------------------------------------------------------------------------
# WGAN-GP with several critic steps per generator step
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_wgan_gp_three_critic_steps_per_generator_step_with_a_compiled_critic(tf):
    """WGAN-GP, eagerly: the critic is a ``tf.function`` called under nested tapes (its gradient
    w.r.t. the interpolates is taken by the inner tape and that gradient's norm differentiated by
    the outer one: second order through a compiled function); three critic updates, then one
    generator update with its own tape; interpolation weights come from NumPy."""
    rs = np.random.RandomState(51)
    real = rs.randn(6, 2).astype(np.float32) + 1.0
    gw = tf.Variable(init_array((3, 2), 52))
    gb = tf.Variable(np.zeros(2, np.float32))
    c1 = tf.Variable(init_array((2, 4), 53))
    c2 = tf.Variable(init_array((4, 1), 54))
    copt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.5)
    gopt = tf.keras.optimizers.legacy.SGD(0.05)
    traces = []

    @tf.function
    def critic(x):
        traces.append(1)
        return tf.matmul(tf.nn.softplus(tf.matmul(x, c1)), c2)

    out = []
    for it in range(2):
        for k in range(3):
            z = rs.randn(6, 3).astype(np.float32)
            eps = rs.rand(6, 1).astype(np.float32)
            fake = tf.matmul(z, gw) + gb
            with tf.GradientTape() as ctape:
                xhat = eps * real + (1.0 - eps) * fake
                with tf.GradientTape() as gp_tape:
                    gp_tape.watch(xhat)
                    d_hat = critic(xhat)
                gx = gp_tape.gradient(d_hat, xhat)
                gp = tf.reduce_mean((tf.norm(gx, axis=1) - 1.0) ** 2)
                wd = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real))
                closs = wd + 10.0 * gp
            cg = ctape.gradient(closs, [c1, c2, gw])
            copt.apply_gradients(zip(cg[:2], [c1, c2]))
            out.append((closs, gp, cg[2] is None))
        z = rs.randn(6, 3).astype(np.float32)
        with tf.GradientTape() as gtape:
            gloss = -tf.reduce_mean(critic(tf.matmul(z, gw) + gb))
        gg = gtape.gradient(gloss, [gw, gb, c1])
        gopt.apply_gradients(zip(gg[:2], [gw, gb]))
        out.append((gloss, gg[2] is not None))
    return out, gw, gb, c1, c2


# ---------------------------------------------------------------------------
# What the tape watches
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_keras_layer_watched_only_after_its_first_call_gets_none(tf):
    """``watch_accessed_variables=False`` with a Dense layer built by its first call inside the
    tape: ``tape.watch(layer.trainable_variables)`` after the call comes too late (the reads were
    not watched: None, and the optimizer is given nothing); from the next step the kernel alone
    is watched before the call and trains, the bias stays None."""
    x, y = regression_data(n=6, d=3, seed=61)
    layer = tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.Constant(0.3),
                                  bias_initializer=tf.keras.initializers.Constant(0.1))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for step in range(4):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            if step > 0:
                tape.watch(layer.kernel)
            loss = tf.reduce_mean((layer(x) - y) ** 2)
            if step == 0:
                tape.watch(layer.trainable_variables)
        grads = tape.gradient(loss, layer.trainable_variables)
        out.append((loss, [g is None for g in grads], len(tape.watched_variables())))
        pairs = [(g, v) for g, v in zip(grads, layer.trainable_variables) if g is not None]
        if pairs:
            opt.apply_gradients(pairs)
    return out, layer.kernel, layer.bias


@parity(modes=True, **TOL)
def test_actnorm_data_dependent_init_inside_the_tape_on_the_first_step(tf):
    """An ActNorm layer whose scale and shift Variables are created inside the tape on the first
    step from the batch's statistics (so the first output is standardised); the Variables are
    watched (created inside the tape) and trained; the gradient w.r.t. the watched input does
    not go through the initial values (creating a Variable records nothing)."""
    rs = np.random.RandomState(62)
    batches = [rs.randn(5, 3).astype(np.float32) * 2.0 + 1.0 for _ in range(4)]
    y = rs.randn(5, 1).astype(np.float32)
    w = tf.Variable(init_array((3, 1), 63))
    state = {}
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for xb in batches:
        xt = tf.constant(xb)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            if not state:
                mean, var = tf.nn.moments(xt, axes=[0])
                state["log_s"] = tf.Variable(-0.5 * tf.math.log(var + 1e-6), name="log_s")
                state["b"] = tf.Variable(-mean, name="b")
            h = (xt + state["b"]) * tf.exp(state["log_s"])
            loss = tf.reduce_mean((tf.matmul(h, w) - y) ** 2) + 0.01 * tf.reduce_mean(h ** 2)
        tv = [w, state["log_s"], state["b"]]
        g = tape.gradient(loss, tv + [xt])
        opt.apply_gradients(zip(g[:3], tv))
        out.append((loss, tf.reduce_mean(h, 0), g, len(tape.watched_variables())))
    return out, tv


@parity(modes=True, **TOL)
def test_variable_created_inside_an_unwatching_tape_is_not_watched(tf):
    """With ``watch_accessed_variables=False`` a Variable created inside the tape (a lazily built
    bias) is not watched (None) until the following steps watch it explicitly; the watched weight
    trains every step."""
    x, y = regression_data(n=6, d=2, seed=64)
    w = tf.Variable(init_array((2, 1), 65))
    box = []
    out = []
    for step in range(3):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(w)
            if not box:
                box.append(tf.Variable([0.2]))
            else:
                tape.watch(box[0])
            loss = tf.reduce_mean((tf.matmul(x, w) + box[0] - y) ** 2)
        gw, gb = tape.gradient(loss, [w, box[0]])
        w.assign_sub(0.1 * gw)
        if gb is not None:
            box[0].assign_sub(0.1 * gb)
        out.append((loss, gb is None, len(tape.watched_variables())))
    return out, w, box[0]


# ---------------------------------------------------------------------------
# stop_recording and reset
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_byol_target_branch_under_stop_recording_with_an_inner_tape_still_recording(tf):
    """BYOL-style: the online branch is recorded; the target branch (an EMA copy of the online
    weights) is computed under ``tape.stop_recording()``, and inside that block an inner tape
    measures the target's sensitivity to its input (an inner tape records while the outer one
    is stopped); after each optimizer step the target follows by ``assign``."""
    rs = np.random.RandomState(71)
    views = [(rs.randn(4, 3).astype(np.float32), rs.randn(4, 3).astype(np.float32)) for _ in range(3)]
    online = [tf.Variable(init_array((3, 3), 72)), tf.Variable(init_array((3, 2), 73))]
    pred = tf.Variable(init_array((2, 2), 74))
    target = [tf.Variable(v) for v in online]
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)

    def encode(ws, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, ws[0])), ws[1])

    out = []
    for v1, v2 in views:
        with tf.GradientTape() as tape:
            p = tf.math.l2_normalize(tf.matmul(encode(online, v1), pred), axis=1)
            with tape.stop_recording():
                xt = tf.constant(v2)
                with tf.GradientTape() as sens:
                    sens.watch(xt)
                    z = tf.math.l2_normalize(encode(target, xt), axis=1)
                dz = sens.gradient(tf.reduce_sum(z), xt)
            loss = 2.0 - 2.0 * tf.reduce_mean(tf.reduce_sum(p * z, axis=1))
        tv = online + [pred]
        grads = tape.gradient(loss, tv + target)
        opt.apply_gradients(zip(grads[:3], tv))
        for t, o in zip(target, online):
            t.assign(0.9 * t + 0.1 * o)
        out.append((loss, dz, [g is None for g in grads]))
    return out, online, pred, target


@parity(modes=True, **TOL)
def test_persistent_tape_reset_between_two_phases_of_a_step(tf):
    """One persistent tape per step with two phases: a reconstruction loss differentiated, then
    ``reset()`` (forgets the recording, the watched input and the watched Variables), then a
    second loss recorded in the same block; the input is watched again only on odd steps."""
    x, _ = regression_data(n=5, d=3, seed=75)
    enc = tf.Variable(init_array((3, 2), 76))
    dec = tf.Variable(init_array((2, 3), 77))
    xt = tf.constant(x)
    out = []
    for step in range(4):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(xt)
            code = tf.matmul(xt, enc)
            rec = tf.reduce_mean((tf.matmul(code, dec) - xt) ** 2)
            g1 = tape.gradient(rec, [enc, dec, xt])
            n_before = len(tape.watched_variables())
            tape.reset()
            n_after = len(tape.watched_variables())
            if step % 2:
                tape.watch(xt)
            sparsity = tf.reduce_mean(tf.abs(tf.matmul(xt, enc)))
        g2 = tape.gradient(sparsity, [enc, dec, xt])
        gr = tape.gradient(rec, [enc, dec])
        del tape
        enc.assign_sub(0.1 * g1[0] + 0.05 * g2[0])
        dec.assign_sub(0.1 * g1[1])
        out.append((rec, sparsity, g1, [g is None for g in g2], g2[0], g2[2], gr, n_before, n_after))
    return out, enc, dec


# ---------------------------------------------------------------------------
# Unconnected sources and structured sources
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_multi_head_dict_sources_with_zero_for_the_idle_head_and_the_step_counter(tf):
    """A shared trunk with two heads trained on alternate steps; the sources are a dict of the
    trunk, both heads and an int step counter, differentiated with ``UnconnectedGradients.ZERO``:
    the idle head gets float zeros, the counter int zeros (read in the loss through a cast, an
    integer path); Adam updates the float Variables with the zeros included."""
    x, ya = regression_data(n=6, d=3, seed=81)
    _, yb = regression_data(n=6, d=3, seed=82)
    trunk = tf.Variable(init_array((3, 4), 83))
    head_a = tf.Variable(init_array((4, 1), 84))
    head_b = tf.Variable(init_array((4, 1), 85))
    counter = tf.Variable(0)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.matmul(x, trunk))
            head, y = (head_a, ya) if step % 2 == 0 else (head_b, yb)
            scale = 1.0 + 0.1 * tf.cast(counter, tf.float32)
            loss = scale * tf.reduce_mean((tf.matmul(h, head) - y) ** 2)
        src = {"trunk": trunk, "heads": [head_a, head_b], "step": counter}
        g = tape.gradient(loss, src, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        opt.apply_gradients(zip([g["trunk"]] + g["heads"], [trunk, head_a, head_b]))
        counter.assign_add(1)
        out.append((loss, g))
    return out, trunk, head_a, head_b, counter


# ---------------------------------------------------------------------------
# Jacobians and curvature
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_jacobian_wrt_weights_penalised_inside_the_training_loss(tf):
    """A parameter-sensitivity penalty: ``inner.jacobian`` of the per-example outputs w.r.t. the
    first layer's weights (shape [5, 1, 3, 4]) inside the outer tape, its squared norm added to
    the loss; the outer gradient goes through the Jacobian (second order); one step computes
    it without pfor (which eagerly needs a persistent inner tape)."""
    x, y = regression_data(n=5, d=3, seed=91)
    w1 = tf.Variable(init_array((3, 4), 92))
    w2 = tf.Variable(init_array((4, 1), 93))
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for step in range(3):
        with tf.GradientTape() as outer:
            with tf.GradientTape(persistent=step == 1) as inner:   # eager no-pfor needs persistent
                pred = tf.matmul(tf.tanh(tf.matmul(x, w1)), w2)
            jac = inner.jacobian(pred, w1, experimental_use_pfor=step != 1)
            loss = tf.reduce_mean((pred - y) ** 2) + 0.05 * tf.reduce_sum(jac ** 2)
        g = outer.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(g, [w1, w2]))
        out.append((loss, jac.shape.as_list(), g))
    return out, w1, w2


@parity(modes=True, **LOOSE)
def test_newton_cg_with_forward_over_reverse_hessian_vector_products(tf):
    """Truncated Newton eagerly: each conjugate-gradient iteration takes a Hessian-vector product
    by a ``ForwardAccumulator`` around a tape (TF's documented forward-over-reverse HVP), checked
    against reverse-over-reverse nested tapes; three CG iterations per step, then ``assign_add``."""
    x, y = regression_data(n=8, d=3, seed=95)
    w = tf.Variable(init_array((3, 1), 96))

    def loss_fn():
        return tf.reduce_mean(tf.math.softplus(tf.matmul(x, w) - y) ** 2) + 0.01 * tf.reduce_sum(w ** 2)

    def hvp_fwd(v):
        with tf.autodiff.ForwardAccumulator(w, v) as acc:
            with tf.GradientTape() as tape:
                loss = loss_fn()
            g = tape.gradient(loss, w)
        return acc.jvp(g)

    def hvp_rev(v):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = loss_fn()
            g = inner.gradient(loss, w)
            gv = tf.reduce_sum(g * v)
        return outer.gradient(gv, w)

    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        g = tape.gradient(loss, w)
        d = tf.zeros_like(w)
        r = -g
        p = r
        for _ in range(3):
            hp = hvp_fwd(p)
            alpha = tf.reduce_sum(r * r) / tf.reduce_sum(p * hp)
            d = d + alpha * p
            r_new = r - alpha * hp
            p = r_new + tf.reduce_sum(r_new * r_new) / tf.reduce_sum(r * r) * p
            r = r_new
        out.append((loss, g, hvp_fwd(g), hvp_rev(g), d))
        w.assign_add(d)
    return out, w


# ---------------------------------------------------------------------------
# Several gradient calls per step, chained backward passes, custom gradients
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_sharpness_aware_minimisation_perturbs_restores_and_steps(tf):
    """SAM: the gradient at the weights gives a perturbation ``rho * g / |g|`` applied by
    ``assign_add``; the gradient at the perturbed weights is taken by a second tape, the
    perturbation removed by ``assign_sub``, and SGD with momentum applies the second gradient
    (two gradient calls and four kinds of update per step)."""
    x, y = regression_data(n=8, d=3, seed=201)
    vs = mlp_vars(tf, seed=202)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        g = tape.gradient(loss, vs)
        norm = tf.linalg.global_norm(g)
        eps = [0.05 * gi / (norm + 1e-12) for gi in g]
        for v, e in zip(vs, eps):
            v.assign_add(e)
        with tf.GradientTape() as tape2:
            loss2 = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        g2 = tape2.gradient(loss2, vs)
        for v, e in zip(vs, eps):
            v.assign_sub(e)
        opt.apply_gradients(zip(g2, vs))
        out.append((loss, loss2, norm))
    return out, vs


@parity(modes=True, **TOL)
def test_pcgrad_projects_conflicting_task_gradients_from_one_persistent_tape(tf):
    """PCGrad for two tasks: both task gradients from one persistent tape, flattened, the first
    projected off the second when their dot product is negative (a Python ``if`` on a tensor),
    split back into the Variables' shapes (``int(tf.size(v))``) and applied by Adam."""
    x, ya = regression_data(n=6, d=3, seed=211)
    _, yb = regression_data(n=6, d=3, seed=212)
    vs = mlp_vars(tf, seed=213)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(4):
        with tf.GradientTape(persistent=True) as tape:
            pred = mlp(tf, vs, x)
            la = tf.reduce_mean((pred - ya) ** 2)
            lb = tf.reduce_mean(tf.abs(pred - yb))
        fa = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(la, vs)], 0)
        fb = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(lb, vs)], 0)
        del tape
        dot = tf.reduce_sum(fa * fb)
        if dot < 0:
            fa = fa - dot / tf.reduce_sum(fb * fb) * fb
        parts = tf.split(fa + fb, [int(tf.size(v)) for v in vs])
        opt.apply_gradients(zip([tf.reshape(p, v.shape) for p, v in zip(parts, vs)], vs))
        out.append((la, lb, dot))
    return out, vs


@parity(modes=True, **TOL)
def test_split_model_backward_chained_by_output_gradients(tf):
    """A model split in two stages (as for pipeline parallelism): stage two's tape watches a
    detached copy of stage one's activations and gives their gradient, which is fed to stage
    one's tape as ``output_gradients``; each stage has its own optimizer."""
    x, y = regression_data(n=6, d=3, seed=221)
    wa = tf.Variable(init_array((3, 4), 222))
    wb = tf.Variable(init_array((4, 1), 223))
    opt_a = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    opt_b = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape_a:
            h = tf.tanh(tf.matmul(x, wa))
        h_in = tf.identity(tf.stop_gradient(h))
        with tf.GradientTape() as tape_b:
            tape_b.watch(h_in)
            loss = tf.reduce_mean((tf.matmul(h_in, wb) - y) ** 2)
        gh, gwb = tape_b.gradient(loss, [h_in, wb])
        gwa = tape_a.gradient(h, wa, output_gradients=gh)
        opt_b.apply_gradients([(gwb, wb)])
        opt_a.apply_gradients([(gwa, wa)])
        out.append((loss, gh, gwa))
    return out, wa, wb


@parity(modes=True, **TOL)
def test_universal_perturbation_clipped_by_global_norm_from_the_budget_boundary(tf):
    """A universal adversarial perturbation: a Variable clipped by ``clip_by_global_norm`` in
    the forward pass, trained to raise a fixed model's loss, started on the budget's boundary
    (norm exactly 5, where TF's ``minimum(1 / norm, 1 / clip_norm)`` routes the gradient through
    the norm); the model is then fine-tuned on the perturbed inputs."""
    x, y = regression_data(n=6, d=2, seed=231)
    delta = tf.Variable([[3.0, 4.0]])
    w = tf.Variable(init_array((2, 1), 232))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            (d,), n = tf.clip_by_global_norm([delta], 5.0)
            adv = tf.reduce_mean((tf.matmul(x + d, w) - y) ** 2)
        gd, gw = tape.gradient(adv, [delta, w])
        delta.assign_add(0.5 * gd)
        w.assign_sub(0.05 * gw)
        out.append((adv, n, gd, gw))
    return out, delta, w


@parity(modes=True, **TOL)
def test_custom_gradient_recomputes_its_block_with_an_inner_tape(tf):
    """Hand-made gradient checkpointing: a ``tf.custom_gradient`` block that reads a Variable
    keeps no activations and, in its gradient function, recomputes the block under a new tape
    and returns that tape's gradients (``output_gradients=dy``) for the input and the Variable."""
    x, y = regression_data(n=6, d=3, seed=241)
    w1 = tf.Variable(init_array((3, 4), 242))
    w2 = tf.Variable(init_array((4, 1), 243))

    @tf.custom_gradient
    def block(h):
        out = tf.nn.gelu(tf.matmul(h, w1))

        def grad(dy, variables=None):
            with tf.GradientTape() as t:
                t.watch(h)
                o = tf.nn.gelu(tf.matmul(h, w1))
            gh, gw = t.gradient(o, [h, w1], output_gradients=dy)
            return gh, [gw]

        return out, grad

    xt = tf.constant(x)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            loss = tf.reduce_mean((tf.matmul(block(xt), w2) - y) ** 2)
        g = tape.gradient(loss, [w1, w2, xt])
        opt.apply_gradients(zip(g[:2], [w1, w2]))
        out.append((loss, g))
    return out, w1, w2


@parity(modes=True, **TOL)
def test_custom_gradient_cells_with_variables_unrolled_one_freezing_its_variable(tf):
    """An RNN cell with a ``tf.custom_gradient`` that clips the state gradient and returns the
    Variable's gradient (``variables=``), unrolled over four steps; a gate with a custom gradient
    returning ``None`` for its Variable (a frozen gate, None at the tape) and for one input."""
    rs = np.random.RandomState(131)
    seq = rs.randn(4, 3, 2).astype(np.float32)
    target = rs.randn(3, 2).astype(np.float32)
    wc = tf.Variable(init_array((2, 2), 132))
    wg = tf.Variable(init_array((2, 2), 133))

    @tf.custom_gradient
    def cell(h, xin):
        out = tf.tanh(tf.matmul(h, wc) + xin)

        def grad(dy, variables=None):
            da = dy * (1.0 - out ** 2)
            dh = tf.clip_by_value(tf.matmul(da, wc, transpose_b=True), -0.3, 0.3)
            return (dh, da), [tf.matmul(h, da, transpose_a=True)]

        return out, grad

    @tf.custom_gradient
    def gate(h, xin):
        s = tf.sigmoid(tf.matmul(xin, wg))

        def grad(dy, variables=None):
            return (dy * s, None), [None]

        return h * s, grad

    opt = tf.keras.optimizers.legacy.SGD(0.2)
    out = []
    for _ in range(3):
        xs = tf.constant(seq)
        with tf.GradientTape() as tape:
            tape.watch(xs)
            h = tf.zeros([3, 2])
            for t in range(4):
                h = gate(cell(h, xs[t]), xs[t])
            loss = tf.reduce_mean((h - target) ** 2)
        gc, gg, gx = tape.gradient(loss, [wc, wg, xs])
        opt.apply_gradients([(gc, wc)])
        out.append((loss, gc, gg is None, gx))
    return out, wc, wg


# ---------------------------------------------------------------------------
# Integer and boolean paths, masking
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_hard_attention_by_argmax_and_a_boolean_mask_loss(tf):
    """Hard attention: ``argmax`` of the scores picks a memory row by ``gather`` (the scores get
    no gradient through the index: None for their Variable, whose only path is the integer one);
    the loss averages only the valid labels by ``boolean_mask``; a float mask from ``cast`` of a
    comparison multiplies a term (no gradient through the comparison)."""
    rs = np.random.RandomState(141)
    q = rs.randn(5, 3).astype(np.float32)
    valid = np.array([True, False, True, True, False])
    y = rs.randn(5, 2).astype(np.float32)
    keys = tf.Variable(init_array((4, 3), 142))
    memory = tf.Variable(init_array((4, 2), 143))
    proj = tf.Variable(init_array((2, 2), 144))
    opt = tf.keras.optimizers.legacy.SGD(0.3)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            scores = tf.matmul(q, keys, transpose_b=True)
            idx = tf.argmax(scores, axis=1, output_type=tf.int32)
            picked = tf.matmul(tf.gather(memory, idx), proj)
            err = tf.boolean_mask(picked - y, valid)
            close = tf.cast(tf.abs(picked) < 0.5, tf.float32)
            loss = tf.reduce_mean(err ** 2) + 0.1 * tf.reduce_mean(close * picked)
        gk, gm, gp = tape.gradient(loss, [keys, memory, proj])
        opt.apply_gradients([(gm, memory), (gp, proj)])
        out.append((loss, idx, gk is None, tf.convert_to_tensor(gm), gp))
    return out, memory, proj


@parity(modes=True, **TOL)
def test_padded_logits_set_to_minus_inf_by_where_keep_finite_gradients(tf):
    """A classifier over a variable number of options per row: padded option logits are set to
    ``-inf`` by ``tf.where`` before ``log_softmax``; the label's log-probability is read by a
    one-hot sum that only touches valid options, and an entropy term uses the double-``where``
    trick (``where(mask, p * log(where(mask, p, 1)), 0)``) so no NaN reaches the weights."""
    rs = np.random.RandomState(151)
    x = rs.randn(4, 3).astype(np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], bool)
    labels = np.array([2, 0, 3, 0])
    w = tf.Variable(init_array((3, 4), 152))
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            masked = tf.where(mask, logits, tf.fill(tf.shape(logits), float("-inf")))
            logp = tf.nn.log_softmax(masked, axis=1)
            safe_logp = tf.where(mask, logp, 0.0)
            nll = -tf.reduce_mean(tf.reduce_sum(tf.one_hot(labels, 4) * safe_logp, axis=1))
            p = tf.exp(logp)
            ent = -tf.reduce_sum(tf.where(mask, p * tf.math.log(tf.where(mask, p, 1.0)), 0.0), axis=1)
            loss = nll - 0.1 * tf.reduce_mean(ent)
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, ent, g, tf.reduce_all(tf.math.is_finite(g))))
    return out, w


@parity(modes=True, **TOL)
def test_gnn_readout_by_unsorted_segment_mean_and_sqrt_n_with_an_empty_graph(tf):
    """A message-passing step over a batch of three graphs (edges gathered by index, messages
    summed per receiver by ``unsorted_segment_sum``), node states pooled per graph by
    ``unsorted_segment_mean`` and ``unsorted_segment_sqrt_n`` where graph 1 has no nodes (its
    readout is zero, its gradient finite), then a per-graph regression."""
    rs = np.random.RandomState(161)
    nodes = rs.randn(5, 3).astype(np.float32)
    senders = np.array([0, 1, 2, 3, 4, 3], np.int32)
    receivers = np.array([1, 0, 0, 4, 3, 4], np.int32)
    graph_of = np.array([0, 0, 0, 2, 2], np.int32)
    y = rs.randn(3, 1).astype(np.float32)
    wm = tf.Variable(init_array((3, 3), 162))
    wo = tf.Variable(init_array((6, 1), 163))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            msg = tf.nn.relu(tf.matmul(tf.gather(nodes, senders), wm))
            h = nodes + tf.math.unsorted_segment_sum(msg, receivers, num_segments=5)
            r = tf.concat([tf.math.unsorted_segment_mean(h, graph_of, 3),
                           tf.math.unsorted_segment_sqrt_n(h, graph_of, 3)], axis=1)
            pred = tf.matmul(r, wo)
            loss = tf.reduce_mean((pred - y) ** 2)
        g = tape.gradient(loss, [wm, wo])
        opt.apply_gradients(zip(g, [wm, wo]))
        out.append((loss, r, g))
    return out, wm, wo


# ---------------------------------------------------------------------------
# Keras losses at a kink
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_mae_on_zero_inflated_targets_with_a_zero_initialised_head(tf):
    """A regressor on zero-inflated targets (``max(N(0, 1), 0)``: half of them exactly 0) whose
    output layer is zero-initialised (a common choice for the last layer), trained with
    ``MeanAbsoluteError``: on the first step every prediction is exactly 0, so the rows whose
    target is 0 sit at the kink of ``|y - p|``, where TF's gradient is 0."""
    rs = np.random.RandomState(251)
    x = rs.randn(6, 3).astype(np.float32)
    y = np.maximum(rs.randn(6, 1), 0.0).astype(np.float32)
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(4, activation="tanh", kernel_initializer=tf.keras.initializers.Constant(0.3)),
        tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    loss_fn = tf.keras.losses.MeanAbsoluteError()
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((loss, g))
    return out, model.trainable_variables


# ---------------------------------------------------------------------------
# Python decisions on tensor values under the tape
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_python_branches_on_numpy_float_and_bool_of_tensors_under_the_tape(tf):
    """A forward that decides in Python on values read under the tape: ``loss.numpy() > 0.5``
    adds a term, ``float(norm)`` scales a penalty by a Python number (a constant for the
    gradient), ``bool(reduce_any(...))`` skips a head, ``int(argmax)`` picks which Variable to
    regularise; the decisions change over the steps."""
    x, y = regression_data(n=6, d=3, seed=171)
    vs = mlp_vars(tf, seed=172)
    extra = tf.Variable(init_array((3, 1), 173))
    opt = tf.keras.optimizers.legacy.SGD(0.2)
    out = []
    for step in range(5):
        with tf.GradientTape() as tape:
            pred = mlp(tf, vs, x)
            loss = tf.reduce_mean((pred - y) ** 2)
            decisions = [bool(loss.numpy() > 0.5)]
            if decisions[0]:
                loss = loss + 0.1 * tf.reduce_mean(tf.matmul(x, extra) ** 2)
            scale = float(tf.norm(vs[0]))
            loss = loss + 0.01 * scale * tf.reduce_sum(vs[2] ** 2)
            big = bool(tf.reduce_any(tf.abs(pred) > 1.0 + 0.2 * step))
            decisions.append(big)
            if not big:
                loss = loss + 0.05 * tf.reduce_mean(pred)
            k = int(tf.argmax(tf.stack([tf.reduce_sum(v ** 2) for v in vs[:2]])))
            decisions.append(k)
            loss = loss + 0.01 * tf.reduce_sum(vs[k] ** 2)
        g = tape.gradient(loss, vs + [extra])
        opt.apply_gradients([(gi, v) for gi, v in zip(g, vs + [extra]) if gi is not None])
        out.append((loss, decisions, scale, g[4] is None))
    return out, vs, extra


# ---------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------

def _thread_train(tf, seed, steps, barrier, result):
    """One worker's eager loop: its own Variables, tape and optimizer; ``barrier`` (or None) holds
    the workers in lockstep so their tapes are open at the same time."""
    x, y = regression_data(n=6, d=3, seed=seed)
    vs = mlp_vars(tf, seed=seed + 1)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    out = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            if barrier is not None:
                barrier.wait()
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
            if barrier is not None:
                barrier.wait()
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        out.append((loss, len(tape.watched_variables())))
    result.append((out, [v.numpy() for v in vs]))


@parity(modes=True, **TOL)
def test_two_threads_train_their_own_models_in_lockstep_like_the_sequential_run(tf):
    """Two Python threads, each with its own MLP, tape and optimizer, held in lockstep by a
    barrier (both tapes record at once); each thread's tape sees only its own reads (four
    watched Variables), and the results equal the same two loops run one after the other."""
    barrier = threading.Barrier(2, timeout=60)
    res_a, res_b = [], []
    threads = [threading.Thread(target=_thread_train, args=(tf, s, 3, barrier, r))
               for s, r in ((180, res_a), (190, res_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seq_a, seq_b = [], []
    _thread_train(tf, 180, 3, None, seq_a)
    _thread_train(tf, 190, 3, None, seq_b)
    return res_a, res_b, seq_a, seq_b


@parity(modes=True, **TOL)
def test_gradients_applied_by_a_parameter_server_thread(tf):
    """The main thread computes gradients and hands them over a queue to a long-lived server
    thread that applies them (an optimizer for the MLP, ``assign_sub`` for a linear head) and
    acknowledges; the main thread's next step reads the updated Variables."""
    x, y = regression_data(n=6, d=3, seed=185)
    vs = mlp_vars(tf, seed=186)
    w = tf.Variable(init_array((3, 1), 187))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    inbox, acks = queue.Queue(), queue.Queue()

    def server():
        for item in iter(inbox.get, None):
            opt.apply_gradients(zip(item[:4], vs))
            w.assign_sub(0.1 * item[4])
            acks.put(True)

    thread = threading.Thread(target=server)
    thread.start()
    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2) + tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        inbox.put(tape.gradient(loss, vs + [w]))
        out.append((loss, acks.get(timeout=60)))
    inbox.put(None)
    thread.join()
    return out, vs, w


@parity(modes=True, **TOL)
def test_a_tape_does_not_record_ops_run_by_another_thread(tf):
    """The main thread's tape is open while a worker thread computes with the same Variable: the
    worker's result is not on the tape (its gradient is None, the tape watches only what the main
    thread read), and the main thread's own gradient is unaffected."""
    x, y = regression_data(n=5, d=3, seed=195)
    w = tf.Variable(init_array((3, 1), 196))
    v = tf.Variable(init_array((3, 1), 197))
    out = []
    for _ in range(3):
        box = []
        with tf.GradientTape(persistent=True) as tape:
            worker = threading.Thread(target=lambda: box.append(tf.reduce_sum(tf.matmul(x, v)) * tf.reduce_sum(w)))
            worker.start()
            worker.join()
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        gw = tape.gradient(loss, w)
        out.append((loss, box[0], tape.gradient(box[0], [w, v]), gw,
                    [u.name for u in tape.watched_variables()]))
        del tape
        w.assign_sub(0.1 * gw)
    return out, w
