"""Round four of realistic user programs, each run under real TensorFlow 2.21 and under tapejax;
the eager training loops also with deferred execution and predicted updates off (``modes=True``;
the programs whose step is compiled, the Keras programs and the data-feeding ones run in the
default mode only, to keep the suite's time: the fuzzer and the mode tests cover deferral there): eager training loops with tape options
(``watch_accessed_variables=False``, ``stop_recording``, ``unconnected_gradients``), gradient
accumulation, curvature, EMA weight swapping, seeded sampling (compared through quantities that
do not depend on the random generator: tapejax's draws differ from TF's by design), recurrent
Keras layers, tf.data pipelines feeding the loops, and Keras's ``fit`` with callbacks, validation
data, ``loss_weights``, freezing and mixed precision.  The TF side's Keras is tf_keras (Keras 2,
see ``test_keras.py``); tapejax's is Keras 3 on JAX.
"""
import os
import tempfile

import numpy as np

from .harness import init_array, keras_init, mlp, mlp_vars, parity, raises, regression_data

TOL = dict(rtol=2e-5, atol=2e-6)
KTOL = dict(rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# Eager training loops with tape options
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_eager_gradient_accumulation_every_k_micro_batches(tf):
    """Accumulators made with ``zeros_like`` of each trainable Variable, ``assign_add`` per micro
    batch, ``apply_gradients`` and reset every third micro batch, eagerly."""
    x, y = regression_data(n=12)
    vs = mlp_vars(tf)
    acc = [tf.Variable(tf.zeros_like(v), trainable=False) for v in vs]
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for i in range(9):
        xb, yb = x[(i % 4) * 3:(i % 4) * 3 + 3], y[(i % 4) * 3:(i % 4) * 3 + 3]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, xb) - yb) ** 2)
        for a, g in zip(acc, tape.gradient(loss, vs)):
            a.assign_add(g / 3.0)
        out.append(loss)
        if (i + 1) % 3 == 0:
            opt.apply_gradients(zip([a.read_value() for a in acc], vs))
            out.append([a.numpy().copy() for a in acc])
            for a in acc:
                a.assign(tf.zeros_like(a))
    return out, vs, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_watch_only_the_head_eagerly(tf):
    """``watch_accessed_variables=False`` + ``tape.watch(head)``: the body's gradients are None,
    the head trains with SGD + momentum; the body is read every step."""
    x, y = regression_data()
    w1, b1, w2, b2 = vs = mlp_vars(tf)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    out = []
    for _ in range(4):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([w2, b2])
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        grads = tape.gradient(loss, vs)
        out.append([g is None for g in grads])
        out.append([len(tape.watched_variables())])
        opt.apply_gradients([(g, v) for g, v in zip(grads, vs) if g is not None])
        out.append(loss)
    return out, vs


@parity(modes=True, **TOL)
def test_stop_recording_for_metrics_inside_the_tape(tf):
    """A running accuracy and a norm computed under ``tape.stop_recording()`` inside the tape; the
    tape's gradient ignores them; a second target after the block is still recorded."""
    x, y = regression_data()
    vs = mlp_vars(tf)
    opt = tf.keras.optimizers.legacy.SGD(0.2)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            pred = mlp(tf, vs, x)
            loss = tf.reduce_mean((pred - y) ** 2)
            with tape.stop_recording():
                hit = tf.reduce_mean(tf.cast(tf.abs(pred - y) < 0.5, tf.float32))
                wnorm = tf.linalg.global_norm(vs)
                unrec = tf.reduce_sum(vs[0])
            reg = 0.01 * tf.add_n([tf.reduce_sum(v ** 2) for v in vs])
        outside = tape.gradient(loss + reg, vs)          # the sum was made after the block: None
        g_loss = tape.gradient([loss, reg], vs)
        out.append((loss, hit, wnorm, tape.gradient(unrec, vs[0]), tape.gradient(reg, vs[3]), outside))
        del tape
        opt.apply_gradients(zip(g_loss, vs))
    return out, vs


@parity(modes=True, **TOL)
def test_unconnected_zero_gradients_feed_adam_slots(tf):
    """``unconnected_gradients=ZERO`` gives a zero gradient for an unused Variable; Adam then still
    moves it (its momentum from earlier connected steps), which None would have skipped."""
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 2))
    extra = tf.Variable(init_array((3, 1), 3))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for i in range(5):
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w)
            if i < 2:
                pred = pred + tf.matmul(x, extra)
            loss = tf.reduce_mean((pred - y) ** 2)
        g = tape.gradient(loss, [w, extra], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        opt.apply_gradients(zip(g, [w, extra]))
        out.append((loss, g[1]))
    return out, w, extra


@parity(modes=True, **TOL)
def test_gauss_newton_step_from_the_jacobian(tf):
    """The residuals' Jacobian w.r.t. a small model's weights (``tape.jacobian``), the
    Levenberg-Marquardt step solved with ``tf.linalg.solve``, applied by ``assign_sub``."""
    x, y = regression_data(n=6, d=2)
    w = tf.Variable(init_array((2, 1), 4))
    b = tf.Variable([0.0])
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            r = tf.reshape(tf.tanh(tf.matmul(x, w) + b) - y, [-1])
        jw, jb = tape.jacobian(r, w), tape.jacobian(r, b)
        j = tf.concat([tf.reshape(jw, [6, 2]), jb], axis=1)
        h = tf.matmul(j, j, transpose_a=True) + 0.1 * tf.eye(3)
        step = tf.linalg.solve(h, tf.matmul(j, r[:, None], transpose_a=True))
        w.assign_sub(step[:2])
        b.assign_sub(step[2])
        out.append((tf.reduce_sum(r ** 2), jw, jb))
    return out, w, b


@parity(modes=True, **TOL)
def test_batch_jacobian_input_sensitivity_penalty(tf):
    """A Jacobian penalty (the Frobenius norm of ``batch_jacobian`` of the outputs w.r.t. the
    inputs) added to the loss: the inner persistent tape sits inside the outer tape."""
    x, _ = regression_data(n=5, d=3)
    w1 = tf.Variable(init_array((3, 4), 5))
    w2 = tf.Variable(init_array((4, 2), 6))
    xt = tf.constant(x)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(xt)
                out_ = tf.matmul(tf.nn.softplus(tf.matmul(xt, w1)), w2)
            jac = inner.batch_jacobian(out_, xt)
            loss = tf.reduce_mean(out_ ** 2) + 0.1 * tf.reduce_mean(tf.reduce_sum(jac ** 2, axis=[1, 2]))
        g = outer.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(g, [w1, w2]))
        out.append((loss, jac.shape.as_list(), g))
    return out, w1, w2


@parity(**TOL)
def test_hvp_conjugate_gradient_in_a_function(tf):
    """Truncated Newton: Hessian-vector products by nested tapes inside a ``tf.function``, a
    few conjugate-gradient iterations in a Python loop, the step applied by ``assign_add``."""
    x, y = regression_data(n=10, d=3, seed=3)
    w = tf.Variable(init_array((3, 1), 7))

    def loss_fn():
        return tf.reduce_mean(tf.math.log1p(tf.exp(-y * tf.matmul(x, w)))) + 0.05 * tf.reduce_sum(w ** 2)

    @tf.function
    def hvp(v):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = loss_fn()
            g = inner.gradient(loss, w)
        return outer.gradient(g, w, output_gradients=v)

    @tf.function
    def grad():
        with tf.GradientTape() as t:
            loss = loss_fn()
        return loss, t.gradient(loss, w)

    out = []
    for _ in range(2):
        loss, g = grad()
        d = tf.zeros_like(w)
        r = -g
        p = r
        for _ in range(3):
            hp = hvp(p)
            alpha = tf.reduce_sum(r * r) / tf.reduce_sum(p * hp)
            d = d + alpha * p
            r_new = r - alpha * hp
            beta = tf.reduce_sum(r_new * r_new) / tf.reduce_sum(r * r)
            p = r_new + beta * p
            r = r_new
        w.assign_add(d)
        out.append((loss, g, d))
    return out, w


@parity(modes=True, **TOL)
def test_clip_by_global_norm_with_a_none_gradient_eagerly(tf):
    """``tf.clip_by_global_norm`` over a list with a None (a frozen Variable), the norm logged,
    the clipped list applied; then the same with ``clip_by_norm`` per tensor."""
    x, y = regression_data()
    vs = mlp_vars(tf)
    frozen = tf.Variable([[2.0]])
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    out = []
    for i in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) * 3.0 - y) ** 2)
        grads = tape.gradient(loss, vs + [frozen])
        if i % 2 == 0:
            clipped, norm = tf.clip_by_global_norm(grads, 0.3)
        else:
            clipped = [None if g is None else tf.clip_by_norm(g, 0.1) for g in grads]
            norm = tf.linalg.global_norm([g for g in grads if g is not None])
        out.append((loss, norm, [c is None for c in clipped]))
        opt.apply_gradients([(c, v) for c, v in zip(clipped, vs + [frozen]) if c is not None])
    return out, vs, frozen


@parity(modes=True, **TOL)
def test_ema_swap_weights_for_evaluation_eagerly(tf):
    """``ExponentialMovingAverage(num_updates=opt.iterations)`` applied after each eager step;
    evaluation swaps the averages into the model Variables and back."""
    x, y = regression_data(n=10)
    vs = mlp_vars(tf, seed=2)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    ema = tf.train.ExponentialMovingAverage(0.9, num_updates=opt.iterations)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        ema.apply(vs)
        backup = [tf.identity(v) for v in vs]
        for v in vs:
            v.assign(ema.average(v))
        eval_loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        for v, b in zip(vs, backup):
            v.assign(b)
        out.append((loss, eval_loss))
    return out, vs, [ema.average(v) for v in vs]


@parity(**TOL)
def test_wgan_gp_with_variables_in_a_function(tf):
    """WGAN-GP critic step compiled: the penalty's gradient w.r.t. the interpolates is taken by an
    inner tape inside the outer one; the generator step eager; interpolation weights from NumPy."""
    rs = np.random.RandomState(1)
    real = tf.constant(rs.randn(6, 3).astype(np.float32))
    z = tf.constant(rs.randn(6, 2).astype(np.float32))
    eps = tf.constant(rs.uniform(size=(6, 1)).astype(np.float32))
    g_w = tf.Variable(init_array((2, 3), 8))
    c_w1 = tf.Variable(init_array((3, 5), 9))
    c_w2 = tf.Variable(init_array((5, 1), 10))
    c_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.0, beta_2=0.9)
    g_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.0, beta_2=0.9)

    def critic(v):
        return tf.matmul(tf.nn.leaky_relu(tf.matmul(v, c_w1), 0.2), c_w2)

    @tf.function
    def c_step():
        fake = tf.matmul(z, g_w)
        with tf.GradientTape() as tape:
            inter = real + eps * (fake - real)
            with tf.GradientTape() as gp_tape:
                gp_tape.watch(inter)
                c = critic(inter)
            gnorm = tf.sqrt(tf.reduce_sum(gp_tape.gradient(c, inter) ** 2, axis=1) + 1e-12)
            gp = tf.reduce_mean((gnorm - 1.0) ** 2)
            loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + 10.0 * gp
        grads = tape.gradient(loss, [c_w1, c_w2, g_w])
        c_opt.apply_gradients(zip(grads[:2], [c_w1, c_w2]))
        return loss, gp, grads[2] is None

    out = []
    for _ in range(3):
        for _ in range(2):
            out.append(c_step())
        with tf.GradientTape() as tape:
            g_loss = -tf.reduce_mean(critic(tf.matmul(z, g_w)))
        g_opt.apply_gradients([(tape.gradient(g_loss, g_w), g_w)])
        out.append(g_loss)
    return out, g_w, c_w1, c_w2


# ---------------------------------------------------------------------------
# Seeded sampling, RL, generative models (generator-free quantities compared)
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_reinforce_with_seeded_categorical_actions(tf):
    """REINFORCE on a contextual bandit: ``tf.random.categorical`` under ``tf.random.set_seed``
    picks the actions (values are the generator's, so the program checks what does not depend on
    it: integer dtype (int64 in TF, int32 without JAX's x64 mode), range, the same draws after re-seeding, and the policy gradient equal to the
    analytic ``(onehot(a) - softmax) * reward`` of the drawn actions)."""
    x = tf.constant(init_array((6, 3), 11, 1.0))
    w = tf.Variable(init_array((3, 4), 12))
    rewards = tf.constant(np.linspace(-1, 1, 4).astype(np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for step in range(3):
        tf.random.set_seed(100 + step)
        a1 = tf.random.categorical(tf.matmul(x, w), 1, seed=7)
        tf.random.set_seed(100 + step)
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            a = tf.random.categorical(logits, 1, seed=7)[:, 0]
            r = tf.gather(rewards, a)
            logp = tf.reduce_sum(tf.nn.log_softmax(logits) * tf.one_hot(a, 4), axis=1)
            loss = -tf.reduce_mean(logp * r)
        g = tape.gradient(loss, w)
        an, xn, rn = a.numpy(), x.numpy(), r.numpy()
        lg = xn @ w.numpy()
        p = np.exp(lg - lg.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        analytic = -xn.T @ ((np.eye(4)[an] - p) * rn[:, None]) / 6
        out.append((a.dtype.is_integer, a1.shape.as_list(), bool(np.all((an >= 0) & (an < 4))),
                    bool(np.array_equal(a1.numpy()[:, 0], an)), bool(np.allclose(g.numpy(), analytic, atol=1e-5))))
        opt.apply_gradients([(g, w)])
    return out


@parity(modes=True, **TOL)
def test_actor_critic_with_two_optimizers(tf):
    """Advantage actor-critic on fixed episodes: the critic's value regresses the discounted
    returns (Adam), the actor's loss uses the advantage under ``stop_gradient`` (RMSprop); one
    persistent tape gives both gradients."""
    rs = np.random.RandomState(4)
    s = tf.constant(rs.randn(5, 3).astype(np.float32))
    acts = tf.constant([0, 2, 1, 1, 0])
    rew = np.array([1.0, 0.0, -0.5, 2.0, 1.0], np.float32)
    ret = np.zeros(5, np.float32)
    run = 0.0
    for i in reversed(range(5)):
        run = rew[i] + 0.9 * run
        ret[i] = run
    ret = tf.constant(ret)
    actor = tf.Variable(init_array((3, 3), 13))
    critic = tf.Variable(init_array((3, 1), 14))
    a_opt, c_opt = tf.keras.optimizers.legacy.RMSprop(0.05), tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(4):
        with tf.GradientTape(persistent=True) as tape:
            v = tf.squeeze(tf.matmul(s, critic), 1)
            adv = tf.stop_gradient(ret - v)
            logp = -tf.nn.sparse_softmax_cross_entropy_with_logits(acts, tf.matmul(s, actor))
            ent = -tf.reduce_sum(tf.nn.softmax(tf.matmul(s, actor)) * tf.nn.log_softmax(tf.matmul(s, actor)), 1)
            a_loss = -tf.reduce_mean(logp * adv) - 0.01 * tf.reduce_mean(ent)
            c_loss = tf.reduce_mean((ret - v) ** 2)
        ga, gc = tape.gradient(a_loss, [actor, critic]), tape.gradient(c_loss, [actor, critic])
        a_opt.apply_gradients([(ga[0], actor)])
        c_opt.apply_gradients([(gc[1], critic)])
        out.append((a_loss, c_loss, ga[1] is None, gc[0] is None))
        del tape
    return out, actor, critic


@parity(**TOL)
def test_vae_step_compiled_with_reparameterisation(tf):
    """A tiny VAE: encoder to (mu, logvar), ``z = mu + exp(0.5 logvar) * eps`` with eps fed from
    NumPy, decoder, reconstruction + KL, one compiled step; the seeded ``tf.random.normal`` is
    checked to repeat under the same seeds."""
    x = tf.constant(np.random.RandomState(5).rand(6, 4).astype(np.float32))
    enc = tf.Variable(init_array((4, 4), 15))
    dec = tf.Variable(init_array((2, 4), 16))
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    @tf.function
    def step(eps):
        with tf.GradientTape() as tape:
            h = tf.matmul(x, enc)
            mu, logvar = tf.split(h, 2, axis=1)
            z = mu + tf.exp(0.5 * logvar) * eps
            logits = tf.matmul(z, dec)
            rec = tf.reduce_mean(tf.reduce_sum(
                tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits), axis=1))
            kl = -0.5 * tf.reduce_mean(tf.reduce_sum(1 + logvar - mu ** 2 - tf.exp(logvar), axis=1))
            loss = rec + kl
        grads = tape.gradient(loss, [enc, dec])
        opt.apply_gradients(zip(grads, [enc, dec]))
        return loss, rec, kl

    rs = np.random.RandomState(6)
    out = [step(tf.constant(rs.randn(6, 2).astype(np.float32))) for _ in range(4)]
    tf.random.set_seed(3)
    e1 = tf.random.normal([6, 2], seed=1)
    tf.random.set_seed(3)
    e2 = tf.random.normal([6, 2], seed=1)
    return out, enc, dec, bool(np.array_equal(e1.numpy(), e2.numpy())), e1.dtype.name


@parity(modes=True, **TOL)
def test_contrastive_loss_with_linalg_normalize(tf):
    """InfoNCE on two views: embeddings normalised by ``tf.linalg.normalize`` (its norm output
    logged), cosine logits over a temperature, cross entropy against the diagonal."""
    rs = np.random.RandomState(7)
    v1 = tf.constant(rs.randn(5, 4).astype(np.float32))
    v2 = tf.constant((v1.numpy() + 0.3 * rs.randn(5, 4)).astype(np.float32))
    proj = tf.Variable(init_array((4, 3), 17))
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z1, n1 = tf.linalg.normalize(tf.matmul(v1, proj), axis=1)
            z2, _ = tf.linalg.normalize(tf.matmul(v2, proj), ord="euclidean", axis=-1)
            logits = tf.matmul(z1, z2, transpose_b=True) / 0.5
            labels = tf.range(5)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        g = tape.gradient(loss, proj)
        opt.apply_gradients([(g, proj)])
        out.append((loss, n1, g))
    return out, proj


@parity(**TOL)
def test_input_signature_step_with_an_inner_range_loop(tf):
    """A compiled step with ``input_signature`` (batch size None) whose body runs
    ``for i in tf.range(2)`` inner SGD updates on the halves of the batch (``tf.reshape`` to
    ``[2, -1, 3]``); called with three batch sizes."""
    x, y = regression_data(n=12)
    w = tf.Variable(init_array((3, 1), 18))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)])
    def step(xb, yb):
        xr, yr = tf.reshape(xb, [2, -1, 3]), tf.reshape(yb, [2, -1, 1])
        total = tf.constant(0.0)
        for i in tf.range(2):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xr[i], w) - yr[i]) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            total += loss
        return total / 2.0

    out = [step(x, y), step(x[:8], y[:8]), step(x[4:], y[4:]), step(x, y)]
    # (the tracing count is not compared: a reshape of a symbolic batch by 2 falls back to one trace
    # per batch size, the documented fallback of tapejax/compile/polymorphism.py)
    return out, w


@parity(**TOL)
def test_manager_checkpoint_restore_then_continue_identically(tf):
    """An eager run saves with ``CheckpointManager(max_to_keep=2)`` every 2 steps; a fresh model
    and optimizer restore ``manager.latest_checkpoint`` and continue: the losses match the
    uninterrupted run's."""
    x, y = regression_data(n=10)
    d = tempfile.mkdtemp()

    def make():
        vs = mlp_vars(tf, seed=3)
        opt = tf.keras.optimizers.legacy.Adam(0.05)
        step_v = tf.Variable(0, dtype=tf.int64)
        return vs, opt, step_v, tf.train.Checkpoint(vs=vs, opt=opt, step=step_v)

    def train(vs, opt, step_v, n):
        losses = []
        for _ in range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
            step_v.assign_add(1)
            losses.append(loss)
        return losses

    vs, opt, step_v, ckpt = make()
    mgr = tf.train.CheckpointManager(ckpt, d, max_to_keep=2)
    full = []
    for _ in range(3):
        full += train(vs, opt, step_v, 2)
        mgr.save(checkpoint_number=step_v)
    full += train(vs, opt, step_v, 3)
    kept = [os.path.basename(p) for p in mgr.checkpoints]
    vs2, opt2, step2, ckpt2 = make()
    mgr2 = tf.train.CheckpointManager(ckpt2, d, max_to_keep=2)
    ckpt2.restore(mgr2.latest_checkpoint)
    resumed = train(vs2, opt2, step2, 3)
    return full[6:], resumed, kept, int(step2.numpy()), vs2, int(opt2.iterations.numpy())


@parity(**KTOL)
def test_lstm_sequence_regressor_custom_loop(tf):
    """``tf.keras.layers.LSTM`` (weights set from NumPy) + Dense regressing the sum of a sequence;
    a custom loop with Adam, one compiled evaluation between steps; a ``return_sequences``
    layer's output shape."""
    rs = np.random.RandomState(8)
    x = rs.randn(6, 5, 2).astype(np.float32)
    y = x.sum(axis=(1, 2))[:, None].astype(np.float32)
    lstm = tf.keras.layers.LSTM(3)
    head = tf.keras.layers.Dense(1)
    model = tf.keras.Sequential([tf.keras.Input((5, 2)), lstm, head])
    model.set_weights([init_array(tuple(v.shape), 20 + i) for i, v in enumerate(model.weights)])
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def evaluate(xb):
        return tf.reduce_mean((model(xb, training=False) - y) ** 2)

    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append((loss, evaluate(x)))
    seq = tf.keras.layers.LSTM(3, return_sequences=True)
    seq(x[:1])
    seq.set_weights([init_array(tuple(v.shape), 30 + i) for i, v in enumerate(seq.weights)])
    return out, [v.numpy() for v in model.weights], seq(x).shape.as_list()


@parity(**KTOL)
def test_gru_classifier_compiled_step(tf):
    """``tf.keras.layers.GRU`` (reset_after, weights from NumPy) over embedded tokens, trained by
    a compiled step with SparseCategoricalCrossentropy; the gradient of the embedding is dense
    after ``convert_to_tensor``."""
    tokens = np.random.RandomState(9).randint(0, 7, size=(5, 4)).astype(np.int32)
    labels = np.array([0, 1, 1, 0, 1], np.int32)
    model = tf.keras.Sequential([tf.keras.Input((4,), dtype="int32"), tf.keras.layers.Embedding(7, 3),
                                 tf.keras.layers.GRU(4), tf.keras.layers.Dense(2)])
    model.set_weights([init_array(tuple(v.shape), 40 + i) for i, v in enumerate(model.weights)])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.legacy.SGD(0.3)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, tf.convert_to_tensor(grads[0])

    out = [step(tokens, labels) for _ in range(3)]
    return out, [v.numpy() for v in model.weights]


@parity(**TOL)
def test_slice_bounds_computed_from_tf_shape_in_a_function(tf):
    """The batch split in halves by ``x[:tf.shape(x)[0] // 2]`` inside a compiled step (TF
    constant-folds the static shape; the slice's bounds are Tensors)."""
    x, y = regression_data(n=8)
    w = tf.Variable(init_array((3, 1), 19))

    @tf.function
    def step(xb, yb):
        n = tf.shape(xb)[0] // 2
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb[:n], w) - yb[:n]) ** 2)
            loss += 0.5 * tf.reduce_mean((tf.matmul(xb[n:2 * n], w) - yb[n:]) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    return [step(x, y) for _ in range(3)], w


# ---------------------------------------------------------------------------
# tf.data feeding the loops (TF's order where it is deterministic; a shuffled order is grain's,
# so shuffled programs compare what does not depend on the order)
# ---------------------------------------------------------------------------

def _lin(tf, seed=21):
    return tf.Variable(init_array((3, 1), seed)), tf.Variable([0.0])


@parity(**TOL)
def test_full_batch_shuffled_pipeline_trains_order_free(tf):
    """``from_tensor_slices((x, y)).shuffle(buf, seed).batch(n).prefetch(AUTOTUNE)`` with one
    batch per epoch: the mean loss and its gradient do not depend on the order; the epoch's
    multiset of rows does not either."""
    x, y = regression_data(n=10)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10, seed=3).batch(10).prefetch(tf.data.AUTOTUNE)
    w, b = _lin(tf)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            out.append((loss, np.sort(xb.numpy()[:, 0])))
    return out, w, b


@parity(**TOL)
def test_repeat_take_zip_and_parallel_map_feed_a_loop(tf):
    """Features and labels zipped from two datasets, ``map(num_parallel_calls=AUTOTUNE)``
    standardising, ``batch(3, drop_remainder=True).repeat().take(7)`` steps in a loop."""
    x, y = regression_data(n=8)
    mean, std = x.mean(0), x.std(0)
    xs = tf.data.Dataset.from_tensor_slices(x)
    ys = tf.data.Dataset.from_tensor_slices(y)
    ds = (tf.data.Dataset.zip((xs, ys))
          .map(lambda a, t: ((a - mean) / std, t * 2.0), num_parallel_calls=tf.data.AUTOTUNE)
          .batch(3, drop_remainder=True).repeat().take(7))
    w, b = _lin(tf)
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for xb, yb in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        out.append(loss)
    return out, w, b, int(ds.cardinality().numpy())


@parity(**TOL)
def test_padded_batches_of_sequences_with_a_mask(tf):
    """Variable-length sequences from ``range(n).map(tf.range ...)``, ``padded_batch`` with -1
    padding; the loss masks the padding; an embedding-free bag-of-positions regressor."""
    lengths = [3, 1, 4, 2, 5]
    ds = (tf.data.Dataset.from_tensor_slices(lengths)
          .map(lambda n: (tf.cast(tf.range(n), tf.float32) / 5.0, tf.cast(n, tf.float32)))
          .padded_batch(2, padded_shapes=([None], []), padding_values=(-1.0, 0.0)))
    w = tf.Variable([0.5])
    b = tf.Variable([0.1])
    out = []
    for epoch in range(2):
        for seq, n in ds:
            mask = tf.cast(seq >= 0.0, tf.float32)
            with tf.GradientTape() as tape:
                pred = tf.reduce_sum((seq * w + b) * mask, axis=1)
                loss = tf.reduce_mean((pred - n) ** 2)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.05 * gw)
            b.assign_sub(0.05 * gb)
            out.append((seq, loss))
    return out, w, b


@parity(**TOL)
def test_window_flat_map_autoregressive_forecaster(tf):
    """Sliding windows of a series by ``window(4, shift=1, drop_remainder=True)`` +
    ``flat_map(lambda w: w.batch(4))``, split into (inputs, target) by ``map``, batched, and a
    linear AR(3) model trained on them in a compiled step."""
    series = np.sin(np.arange(12) * 0.5).astype(np.float32)
    ds = (tf.data.Dataset.from_tensor_slices(series).window(4, shift=1, drop_remainder=True)
          .flat_map(lambda win: win.batch(4))
          .map(lambda s: (s[:3], s[3:]))
          .batch(4))
    w = tf.Variable(np.zeros((3, 1), np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.2, momentum=0.5)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    out = []
    for _ in range(2):
        for xb, yb in ds:
            out.append((xb.shape.as_list(), step(xb, yb)))
    return out, w


@parity(**TOL)
def test_py_function_map_feeds_a_loop(tf):
    """``Dataset.range(6).map(lambda i: tf.py_function(...))`` computing features in Python,
    ``set_shape`` restoring the static shape, batched into an eager loop."""
    def feats(i):
        i = int(i.numpy())
        return np.array([i / 6.0, (i % 3) / 3.0, 1.0], np.float32), np.float32(i % 2)

    def fn(i):
        f, t = tf.py_function(feats, [i], [tf.float32, tf.float32])
        f.set_shape([3])
        t.set_shape([])
        return f, t

    ds = tf.data.Dataset.range(6).map(fn).batch(3)
    w = tf.Variable(np.zeros((3, 1), np.float32))
    out = []
    for _ in range(2):
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                logits = tf.squeeze(tf.matmul(xb, w), 1)
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=yb, logits=logits))
            w.assign_sub(0.5 * tape.gradient(loss, w))
            out.append((xb, loss))
    return out, w, [s.shape.as_list() for s in ds.element_spec]


@parity(**TOL)
def test_enumerate_filter_batch_into_a_signature_step(tf):
    """``enumerate`` + ``filter`` (every third row held out for validation) + ``batch``; a
    training step with an ``input_signature``; validation loss computed each epoch."""
    x, y = regression_data(n=12, seed=4)
    base = tf.data.Dataset.from_tensor_slices((x, y)).enumerate()
    train = base.filter(lambda i, xy: i % 3 != 0).map(lambda i, xy: xy).batch(4)
    val = base.filter(lambda i, xy: i % 3 == 0).map(lambda i, xy: xy).batch(8)
    w, b = _lin(tf, 22)

    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None, 1])])
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss

    out = []
    for _ in range(2):
        out.append([step(xb, yb) for xb, yb in train])
        out.append([tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2) for xb, yb in val])
    return out, w, b


@parity(**TOL)
def test_iterator_next_inside_a_compiled_epoch(tf):
    """``iter(dataset)`` passed to a compiled step that calls ``next`` twice per step (two
    micro-batches summed), until the iterator is exhausted (``get_next_as_optional``)."""
    x, y = regression_data(n=12, seed=5)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(3)
    w, b = _lin(tf, 23)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def step(it):
        total = tf.constant(0.0)
        grads = [tf.zeros_like(w), tf.zeros_like(b)]
        for _ in range(2):
            xb, yb = next(it)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
            grads = [a + g for a, g in zip(grads, tape.gradient(loss, [w, b]))]
            total += loss
        opt.apply_gradients(zip(grads, [w, b]))
        return total

    it = iter(ds)
    out = [step(it), step(it)]
    out.append(bool(it.get_next_as_optional().has_value()))
    return out, w, b


# ---------------------------------------------------------------------------
# Keras: fit with callbacks, validation data, multiple heads, freezing, metrics
# ---------------------------------------------------------------------------

def _kdata(n=16, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _kmlp(tf, bn=False, dropout=None, out=3):
    layers = [tf.keras.Input(shape=(5,)), tf.keras.layers.Dense(6, activation="relu")]
    if bn:
        layers.append(tf.keras.layers.BatchNormalization())
    if dropout is not None:
        layers.append(tf.keras.layers.Dropout(dropout))
    layers.append(tf.keras.layers.Dense(out))
    model = tf.keras.Sequential(layers)
    keras_init(model)
    return model


def _hist(h, keys):
    return {k: [float(v) for v in h.history[k]] for k in keys}


@parity(**KTOL)
def test_fit_with_validation_data_and_a_logging_callback(tf):
    """``fit(validation_data=...)`` with a custom Callback that records ``logs`` at each epoch
    end and the batch count; the History's loss / val_loss / accuracy."""
    x, y = _kdata(n=16)
    xv, yv = _kdata(n=6, seed=3)
    model = _kmlp(tf)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    seen = []

    class Log(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(("batch", batch))

        def on_epoch_end(self, epoch, logs=None):
            seen.append((epoch, sorted(logs), round(float(logs["val_loss"]), 4)))

    h = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
                  validation_data=(xv, yv), callbacks=[Log()])
    return _hist(h, ["loss", "val_loss", "accuracy", "val_accuracy"]), seen, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_early_stopping_restores_the_best_weights(tf):
    """``EarlyStopping(monitor='val_loss', patience=1, restore_best_weights=True)`` with a large
    learning rate that makes validation loss rise: the epochs run and the weights kept."""
    x, y = _kdata(n=16)
    xv, yv = _kdata(n=8, seed=5)
    model = _kmlp(tf)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.8) if False else "sgd",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.learning_rate.assign(1.5)
    stop = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    h = model.fit(x, y, batch_size=16, epochs=8, shuffle=False, verbose=0, validation_data=(xv, yv),
                  callbacks=[stop])
    return (_hist(h, ["loss", "val_loss"]), int(stop.stopped_epoch), [v.numpy() for v in model.weights],
            model.evaluate(xv, yv, verbose=0))


@parity(**KTOL)
def test_model_checkpoint_best_only_then_load_weights(tf):
    """``ModelCheckpoint(save_best_only=True, save_weights_only=True)`` into a temporary
    directory during fit; a fresh model loads the file and evaluates like the best epoch."""
    x, y = _kdata(n=16)
    xv, yv = _kdata(n=8, seed=6)
    path = os.path.join(tempfile.mkdtemp(), "best.weights.h5")
    model = _kmlp(tf)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.learning_rate.assign(1.0)
    ck = tf.keras.callbacks.ModelCheckpoint(path, monitor="val_loss", save_best_only=True,
                                            save_weights_only=True)
    h = model.fit(x, y, batch_size=8, epochs=4, shuffle=False, verbose=0, validation_data=(xv, yv),
                  callbacks=[ck])
    fresh = _kmlp(tf)
    fresh.load_weights(path)
    fresh.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return (_hist(h, ["val_loss"]), fresh.evaluate(xv, yv, verbose=0), [v.numpy() for v in fresh.weights],
            os.path.exists(path))


@parity(**KTOL)
def test_learning_rate_scheduler_and_reduce_on_plateau(tf):
    """``LearningRateScheduler`` halving the rate each epoch, then (a second fit)
    ``ReduceLROnPlateau(monitor='loss', factor=0.5, patience=0)``; the rates the callbacks set
    and the losses."""
    x, y = _kdata(n=16)
    model = _kmlp(tf)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rates = []

    class Rate(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            rates.append(round(float(np.asarray(self.model.optimizer.learning_rate)), 6))

    sched = tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.4 * 0.5 ** epoch)
    h1 = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0, callbacks=[sched, Rate()])
    model.optimizer.learning_rate.assign(3.0)
    plateau = tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_lr=0.1)
    h2 = model.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0, callbacks=[plateau, Rate()])
    return _hist(h1, ["loss"]), _hist(h2, ["loss"]), rates, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_train_step_override_with_validation_and_test_step(tf):
    """A subclassed Model overriding ``train_step`` (GradientTape, gradient clipping by global
    norm, a Mean tracker) and ``test_step``; ``fit`` with ``validation_data``; then
    ``evaluate`` and ``predict``."""
    x, y = _kdata(n=12)
    xv, yv = _kdata(n=6, seed=7)

    class M(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d1 = tf.keras.layers.Dense(4, activation="tanh")
            self.d2 = tf.keras.layers.Dense(3)
            self.tracker = tf.keras.metrics.Mean(name="loss")
            self.acc = tf.keras.metrics.SparseCategoricalAccuracy(name="acc")

        def call(self, x, training=False):
            return self.d2(self.d1(x))

        def _loss(self, yb, logits):
            return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True))

        def train_step(self, data):
            xb, yb = data
            with tf.GradientTape() as tape:
                logits = self(xb, training=True)
                loss = self._loss(yb, logits)
            grads, _ = tf.clip_by_global_norm(tape.gradient(loss, self.trainable_variables), 0.5)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            self.tracker.update_state(loss)
            self.acc.update_state(yb, logits)
            return {"loss": self.tracker.result(), "acc": self.acc.result()}

        def test_step(self, data):
            xb, yb = data
            logits = self(xb, training=False)
            self.tracker.update_state(self._loss(yb, logits))
            self.acc.update_state(yb, logits)
            return {"loss": self.tracker.result(), "acc": self.acc.result()}

        @property
        def metrics(self):
            return [self.tracker, self.acc]

    m = M()
    m(x[:1])
    keras_init(m, 2)
    m.compile(optimizer="sgd")
    m.optimizer.learning_rate.assign(0.5)
    h = m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, validation_data=(xv, yv))
    ev = m.evaluate(xv, yv, batch_size=3, verbose=0)
    pred = m.predict(xv, batch_size=4, verbose=0)
    return _hist(h, ["loss", "acc", "val_loss", "val_acc"]), ev, pred


@parity(**KTOL)
def test_functional_two_inputs_two_outputs_with_loss_weights(tf):
    """A functional model with two inputs (concatenated) and two named outputs, compiled with a
    loss per output and ``loss_weights``; fit, then evaluate returns each loss."""
    rs = np.random.RandomState(8)
    a, b = rs.randn(12, 3).astype(np.float32), rs.randn(12, 2).astype(np.float32)
    yc = rs.randint(0, 2, size=12).astype(np.int32)
    yr = rs.randn(12, 1).astype(np.float32)
    ia, ib = tf.keras.Input((3,), name="a"), tf.keras.Input((2,), name="b")
    h = tf.keras.layers.Dense(4, activation="relu")(tf.keras.layers.Concatenate()([ia, ib]))
    cls = tf.keras.layers.Dense(2, name="cls")(h)
    reg = tf.keras.layers.Dense(1, name="reg")(h)
    model = tf.keras.Model([ia, ib], [cls, reg])
    keras_init(model, 3)
    model.compile(optimizer="sgd",
                  loss={"cls": tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.25})
    model.optimizer.learning_rate.assign(0.1)
    hist = model.fit({"a": a, "b": b}, {"cls": yc, "reg": yr}, batch_size=6, epochs=3, shuffle=False, verbose=0)
    ev = model.evaluate({"a": a, "b": b}, {"cls": yc, "reg": yr}, verbose=0, return_dict=True)
    return _hist(hist, ["loss"]), {k: float(ev[k]) for k in sorted(ev)}, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_fine_tuning_freeze_the_base_mid_training(tf):
    """A custom loop trains the whole model, then ``base.trainable = False`` (the base layer):
    ``trainable_variables`` shrinks, the base stops moving, the head keeps training."""
    x, y = _kdata(n=12)
    base = tf.keras.layers.Dense(6, activation="relu", name="base")
    head = tf.keras.layers.Dense(3, name="head")
    model = tf.keras.Sequential([tf.keras.Input((5,)), base, head])
    keras_init(model, 4)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.05)
    out = []

    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(2):
        out.append(step())
    base.trainable = False
    frozen = [v.numpy().copy() for v in base.weights]
    for _ in range(3):
        out.append(step())
    out.append(len(model.trainable_variables))
    out.append([bool(np.array_equal(a, v.numpy())) for a, v in zip(frozen, base.weights)])
    return out, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_batch_norm_training_vs_inference_in_a_custom_loop(tf):
    """BatchNormalization updated by ``training=True`` calls in a compiled step, read by
    ``training=False`` evaluations between steps: moving statistics and both outputs."""
    x, y = _kdata(n=8)
    model = _kmlp(tf, bn=True)
    bn = model.layers[1]
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    out = []
    for _ in range(3):
        out.append(step())
        out.append(loss_fn(y, model(x, training=False)))
        out.append([bn.moving_mean.numpy().copy(), bn.moving_variance.numpy().copy()])
    return out, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_dropout_training_flag_determines_randomness(tf):
    """Dropout(0.5): ``training=False`` is the identity (same output twice), ``training=True``
    zeroes about half and scales the rest by 2 (checked through the output's structure, not the
    generator's values); gradients flow only through the kept units."""
    tf.random.set_seed(0)
    drop = tf.keras.layers.Dropout(0.5)
    x = tf.constant(np.arange(1, 41, dtype=np.float32).reshape(4, 10))
    a, b = drop(x, training=False), drop(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        d = drop(x, training=True)
    g = tape.gradient(d, x).numpy()
    dn = d.numpy()
    kept = dn != 0
    return (a, b, bool(np.allclose(dn[kept], 2 * x.numpy()[kept])), bool(0 < kept.sum() < 40),
            bool(np.array_equal(g != 0, kept)), bool(np.allclose(g[kept], 2.0)))


@parity(**KTOL)
def test_metrics_updated_in_a_loop_and_reset_per_epoch(tf):
    """Mean, SparseCategoricalAccuracy and AUC (on the positive class probability) updated
    batch by batch in a custom loop, read and ``reset_state`` at each epoch end."""
    x, y = _kdata(n=12, classes=2)
    model = _kmlp(tf, out=2)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.2)
    mean = tf.keras.metrics.Mean()
    acc = tf.keras.metrics.SparseCategoricalAccuracy()
    auc = tf.keras.metrics.AUC(num_thresholds=50)
    out = []
    for _ in range(3):
        for i in range(0, 12, 4):
            xb, yb = x[i:i + 4], y[i:i + 4]
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = loss_fn(yb, logits)
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            mean.update_state(loss)
            acc.update_state(yb, logits)
            auc.update_state(yb, tf.nn.softmax(logits)[:, 1])
        out.append((mean.result(), acc.result(), auc.result()))
        for m in (mean, acc, auc):
            m.reset_state()
    out.append((mean.result(), acc.result()))
    return out


@parity(**KTOL)
def test_kernel_and_activity_regularizers_in_a_compiled_step(tf):
    """Dense layers with an L2 kernel regularizer, an L1 bias regularizer and an activity
    regularizer; ``model.losses`` added inside the tape of a compiled step."""
    x, y = _kdata(n=8)
    model = tf.keras.Sequential([
        tf.keras.Input((5,)),
        tf.keras.layers.Dense(4, activation="relu", kernel_regularizer=tf.keras.regularizers.l2(0.1),
                              bias_regularizer=tf.keras.regularizers.l1(0.05)),
        tf.keras.layers.Dense(3, activity_regularizer=tf.keras.regularizers.L1L2(l1=0.01, l2=0.02))])
    keras_init(model, 5)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            data_loss = loss_fn(y, logits)
            reg = tf.add_n(model.losses)
            loss = data_loss + reg
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return data_loss, reg, len(model.losses)

    return [step() for _ in range(3)], [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_save_weights_mid_custom_loop_and_reload_into_a_copy(tf):
    """``save_weights`` after two custom-loop steps, two more steps, then ``load_weights`` back
    into the same model and into a fresh one: predictions equal the saved state's."""
    x, y = _kdata(n=8)
    path = os.path.join(tempfile.mkdtemp(), "m.weights.h5")
    model = _kmlp(tf)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.05)

    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    out = [step(), step()]
    model.save_weights(path)
    saved_pred = model(x)
    out += [step(), step()]
    model.load_weights(path)
    fresh = _kmlp(tf)
    fresh.load_weights(path)
    out += [model(x), fresh(x), saved_pred, step()]
    return out


@parity(**KTOL)
def test_optimizer_clipnorm_clipvalue_and_global_clipnorm(tf):
    """The same model trained three times with ``clipnorm``, ``clipvalue`` and
    ``global_clipnorm`` on Adam and SGD: losses and weights after four steps."""
    x, y = _kdata(n=8)
    res = []
    for kw, cls in ((dict(clipnorm=0.1), "SGD"), (dict(clipvalue=0.05), "Adam"), (dict(global_clipnorm=0.2), "SGD")):
        model = _kmlp(tf)
        opt = getattr(tf.keras.optimizers, cls)(learning_rate=0.5, **kw)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        losses = []
        for _ in range(4):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            losses.append(loss)
        res.append((losses, [v.numpy() for v in model.weights]))
    return res


@parity(**KTOL)
def test_fit_evaluate_predict_on_tf_data_pipelines(tf):
    """``model.fit(dataset, validation_data=val_dataset)`` on batched ``tf.data`` pipelines,
    then ``fit(dataset.repeat(), steps_per_epoch=...)``, ``evaluate(dataset)`` and
    ``predict`` on a features-only ``map``."""
    x, y = _kdata(n=16)
    model = _kmlp(tf)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    val = tf.data.Dataset.from_tensor_slices((x[:8], y[:8])).batch(4)
    h1 = model.fit(ds, epochs=2, verbose=0, validation_data=val)
    h2 = model.fit(ds.repeat(), steps_per_epoch=3, epochs=2, verbose=0)
    return (_hist(h1, ["loss", "accuracy", "val_loss", "val_accuracy"]), _hist(h2, ["loss"]),
            model.evaluate(ds, verbose=0), model.predict(ds.map(lambda a, b: a), verbose=0))


@parity(rtol=2e-3, atol=2e-3)
def test_mixed_float16_policy_with_manual_loss_scaling(tf):
    """``set_global_policy('mixed_float16')``: Dense layers compute in float16 with float32
    Variables, a float32 output layer; a custom loop scales the loss by 1024 and unscales the
    gradients (float32, as the Variables) before SGD; the policy is put back afterwards."""
    x, y = _kdata(n=8)
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="relu"),
                                     tf.keras.layers.Dense(3), tf.keras.layers.Activation("linear", dtype="float32")])
        keras_init(model, 6)
        hidden_dtype = model.layers[0].compute_dtype
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
            scaled = loss * 1024.0
        grads = [g / 1024.0 for g in tape.gradient(scaled, model.trainable_variables)]
        finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append((logits.dtype.name, loss, [g.dtype.name for g in grads], finite))
    # (a Keras 3 variable's ``dtype`` is a string: read through tf.as_dtype on both sides)
    return (out, tf.as_dtype(hidden_dtype).name, [tf.as_dtype(v.dtype).name for v in model.weights],
            [v.numpy() for v in model.weights])


@parity(modes=True, **TOL)
def test_where_guarded_sqrt_gives_tf_nan_gradient_and_the_safe_form(tf):
    """The classic ``tf.where(d > 0, tf.sqrt(d), 0)`` gradient: NaN at d == 0 in TF (the unused
    branch's infinite gradient times zero), and the double-where safe form that users switch to;
    a pairwise-distance loss trained with the safe form."""
    p = tf.Variable([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    out = []
    for safe in (False, True, True, True):
        with tf.GradientTape() as tape:
            diff = p[:, None, :] - p[None, :, :]
            d = tf.reduce_sum(diff ** 2, axis=-1)
            if safe:
                dist = tf.where(d > 0, tf.sqrt(tf.where(d > 0, d, tf.ones_like(d))), tf.zeros_like(d))
            else:
                dist = tf.where(d > 0, tf.sqrt(d), tf.zeros_like(d))
            loss = tf.reduce_sum((dist - 1.0) ** 2)
        g = tape.gradient(loss, p)
        out.append((loss, g))
        if safe:
            p.assign_sub(0.05 * g)
    return out, p


@parity(**TOL)
def test_nested_functions_inner_tape_outer_optimizer(tf):
    """A compiled ``grads(x, y)`` holding the tape, called by a compiled ``train(x, y)`` that
    clips and applies, called by an eager loop; and the inner one called eagerly too."""
    x, y = regression_data(n=8, seed=6)
    vs = mlp_vars(tf, seed=4)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def grads(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, xb) - yb) ** 2)
        return loss, tape.gradient(loss, vs)

    @tf.function
    def train(xb, yb):
        loss, g = grads(xb, yb)
        g, _ = tf.clip_by_global_norm(g, 1.0)
        opt.apply_gradients(zip(g, vs))
        return loss

    out = [train(x, y) for _ in range(3)]
    out.append(grads(x[:4], y[:4]))
    out.append(train(x[:4], y[:4]))
    return out, vs


@parity(modes=True, **TOL)
def test_per_example_weights_through_output_gradients(tf):
    """Per-example loss weights passed as ``output_gradients`` of the per-example losses (a
    vector target), against the explicitly weighted mean; trained with the former."""
    x, y = regression_data(n=6, seed=7)
    wts = tf.constant(np.array([1.0, 0.5, 2.0, 0.0, 1.0, 1.5], np.float32) / 6.0)
    w, b = _lin(tf, 24)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            per = tf.squeeze((tf.matmul(x, w) + b - y) ** 2, 1)
            weighted = tf.reduce_sum(per * wts)
        g1 = tape.gradient(per, [w, b], output_gradients=wts)
        g2 = tape.gradient(weighted, [w, b])
        del tape
        w.assign_sub(0.1 * g1[0])
        b.assign_sub(0.1 * g1[1])
        out.append((weighted, g1, g2))
    return out, w, b


@parity(modes=True, **TOL)
def test_tape_reset_discards_a_warmup_forward(tf):
    """``tape.reset()`` inside the block drops a warm-up forward pass recorded before it; only
    what follows is differentiated (the warm-up's Variable gets None)."""
    x, y = regression_data(n=6, seed=8)
    w, b = _lin(tf, 25)
    warm = tf.Variable([[2.0]])
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            junk = tf.reduce_sum(warm * tf.matmul(x, w))
            tape.reset()
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        gw, gb, gwarm = tape.gradient(loss, [w, b, warm])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        out.append((loss, junk, gwarm is None, tape.gradient(loss, warm) if False else None))
    return out, w, b


@parity(modes=True, **TOL)
def test_piecewise_schedule_and_learning_rate_reads(tf):
    """A ``PiecewiseConstantDecay`` on a legacy Adam and an ``InverseTimeDecay`` on SGD: the rate
    read by calling the schedule on ``optimizer.iterations`` every step, losses and weights."""
    x, y = regression_data(n=8, seed=9)
    w1, b1 = _lin(tf, 26)
    w2, b2 = _lin(tf, 27)
    s1 = tf.keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01])
    s2 = tf.keras.optimizers.schedules.InverseTimeDecay(0.2, decay_steps=1, decay_rate=0.5)
    o1 = tf.keras.optimizers.legacy.Adam(s1)
    o2 = tf.keras.optimizers.legacy.SGD(s2)
    out = []
    for _ in range(6):
        with tf.GradientTape(persistent=True) as tape:
            l1 = tf.reduce_mean((tf.matmul(x, w1) + b1 - y) ** 2)
            l2 = tf.reduce_mean((tf.matmul(x, w2) + b2 - y) ** 2)
        o1.apply_gradients(zip(tape.gradient(l1, [w1, b1]), [w1, b1]))
        o2.apply_gradients(zip(tape.gradient(l2, [w2, b2]), [w2, b2]))
        del tape
        out.append((l1, l2, float(s1(o1.iterations)), float(s2(o2.iterations))))
    return out, w1, w2, int(o1.iterations.numpy())


@parity(**KTOL)
def test_distillation_from_a_frozen_keras_teacher(tf):
    """Knowledge distillation: a frozen Keras teacher (``trainable = False``), a student trained
    on ``KLDivergence`` of temperature-softened outputs plus hard-label cross entropy with
    ``label_smoothing``; the teacher receives no gradient."""
    x, y = _kdata(n=10)
    teacher = _kmlp(tf)
    teacher.trainable = False
    student = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
    keras_init(student, 7)
    kl = tf.keras.losses.KLDivergence()
    ce = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    opt = tf.keras.optimizers.SGD(0.2)
    out = []
    for _ in range(3):
        t_logits = teacher(x, training=False)
        with tf.GradientTape() as tape:
            s_logits = student(x, training=True)
            soft = kl(tf.nn.softmax(t_logits / 2.0), tf.nn.softmax(s_logits / 2.0)) * 4.0
            hard = ce(tf.one_hot(y, 3), s_logits)
            loss = 0.7 * soft + 0.3 * hard
        grads = tape.gradient(loss, student.trainable_variables + teacher.weights)
        opt.apply_gradients(zip(grads[:2], student.trainable_variables))
        out.append((soft, hard, [g is None for g in grads]))
    return out, [v.numpy() for v in student.weights], len(teacher.trainable_variables)


@parity(modes=True, **TOL)
def test_unrolled_rnn_over_unstacked_time_steps(tf):
    """An Elman RNN unrolled eagerly over ``tf.unstack(x, axis=1)``; outputs ``tf.stack``-ed;
    the loss reads only the last two steps, so the first input step's gradient is still
    connected (through the state) while an unused extra input is None."""
    rs = np.random.RandomState(10)
    seq = tf.constant(rs.randn(3, 4, 2).astype(np.float32))
    unused = tf.constant(rs.randn(3, 2).astype(np.float32))
    wx = tf.Variable(init_array((2, 3), 28))
    wh = tf.Variable(init_array((3, 3), 29) * 0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch([seq, unused])
            h = tf.zeros([3, 3])
            hs = []
            for xt in tf.unstack(seq, axis=1):
                h = tf.tanh(tf.matmul(xt, wx) + tf.matmul(h, wh))
                hs.append(h)
            stacked = tf.stack(hs, axis=1)
            loss = tf.reduce_mean(stacked[:, -2:] ** 2)
        gx, gu, gwx, gwh = tape.gradient(loss, [seq, unused, wx, wh])
        wx.assign_sub(0.3 * gwx)
        wh.assign_sub(0.3 * gwh)
        out.append((loss, gx[:, 0], gu is None))
    return out, wx, wh


@parity(modes=True, **TOL)
def test_minimize_with_tape_and_callable_var_list(tf):
    """``optimizer.minimize(loss, var_list, tape=tape)`` with a tensor loss and a tape, and
    ``minimize(callable, var_list=callable)``, alternating, on a legacy RMSprop."""
    x, y = regression_data(n=8, seed=11)
    w, b = _lin(tf, 30)
    opt = tf.keras.optimizers.legacy.RMSprop(0.05, momentum=0.5)
    out = []
    for i in range(4):
        if i % 2:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
            opt.minimize(loss, [w, b], tape=tape)
        else:
            loss_fn = lambda: tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)  # noqa: E731
            opt.minimize(loss_fn, var_list=lambda: [w, b])
            loss = loss_fn()
        out.append(loss)
    return out, w, b, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_multi_task_uncertainty_weighting(tf):
    """Two task losses weighted by learned log-variances (``exp(-s) * L + s``); all Variables in
    one Adam; a compiled step returning a dict of logs."""
    x, y = regression_data(n=8, seed=12)
    y2 = tf.constant((y > 0).astype(np.float32))
    trunk = tf.Variable(init_array((3, 4), 31))
    h1 = tf.Variable(init_array((4, 1), 32))
    h2 = tf.Variable(init_array((4, 1), 33))
    s = tf.Variable([0.0, 0.0])
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    vs = [trunk, h1, h2, s]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            z = tf.nn.relu(tf.matmul(x, trunk))
            l1 = tf.reduce_mean((tf.matmul(z, h1) - y) ** 2)
            l2 = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y2, logits=tf.matmul(z, h2)))
            loss = tf.exp(-s[0]) * l1 + s[0] + tf.exp(-s[1]) * l2 + s[1]
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return {"loss": loss, "reg": l1, "cls": l2, "s": tf.identity(s)}

    return [step() for _ in range(4)], vs


@parity(modes=True, **TOL)
def test_scatter_updates_of_a_memory_bank(tf):
    """A memory bank Variable updated by ``scatter_nd_update`` / ``tensor_scatter_nd_add`` and
    ``assign(..., read_value=False)`` between steps; the loss reads the bank through ``gather``
    (the bank is not trainable: its gradient is None)."""
    bank = tf.Variable(np.zeros((5, 2), np.float32), trainable=False)
    q = tf.Variable(init_array((2, 2), 34))
    feats = tf.constant(init_array((4, 2), 35, 1.0))
    out = []
    for i in range(4):
        with tf.GradientTape() as tape:
            keys = tf.matmul(feats, q)
            logits = tf.matmul(keys, tf.gather(bank, [0, 1, 2, 3, 4]), transpose_b=True)
            loss = tf.reduce_mean(tf.reduce_logsumexp(logits, axis=1)) + tf.reduce_mean(keys ** 2)
        gq, gbank = tape.gradient(loss, [q, bank])
        q.assign_sub(0.1 * gq)
        bank.scatter_nd_update([[i % 5], [(i + 1) % 5]], tf.stop_gradient(keys[:2]))
        r = bank.assign(tf.tensor_scatter_nd_add(bank, [[4]], [[0.1, -0.1]]), read_value=False)
        out.append((loss, gbank is None, r is None, tf.identity(bank)))
    return out, q, bank


# ---------------------------------------------------------------------------
# Eager loops whose Python reads and writes meet deferred and predicted updates
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_dqn_eager_with_huber_and_polyak_target_updates(tf):
    """DQN eagerly: Huber loss on TD targets from a target network updated by Polyak averaging
    (``t.assign(tau * v + (1 - tau) * t)``) after every Adam step; actions chosen by ``argmax``
    read as Python ints for the next transition."""
    rs = np.random.RandomState(13)
    obs = rs.randn(10, 3).astype(np.float32)
    q = [tf.Variable(init_array((3, 2), 36)), tf.Variable([0.0, 0.0])]
    t = [tf.Variable(v) for v in q]
    huber = tf.keras.losses.Huber(delta=1.0)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for step in range(7):
        s, s2 = obs[step:step + 3], obs[step + 1:step + 4]
        a = int(tf.argmax(tf.matmul(s[:1], q[0]) + q[1], axis=1)[0])
        r = tf.constant([1.0 if a == 0 else -0.5, 0.2, 0.0])
        target = r + 0.9 * tf.reduce_max(tf.matmul(s2, t[0]) + t[1], axis=1)
        with tf.GradientTape() as tape:
            qsa = tf.gather(tf.matmul(s, q[0]) + q[1], [a, 1 - a, a], axis=1, batch_dims=0)[:, 0]
            loss = huber(target, qsa)
        opt.apply_gradients(zip(tape.gradient(loss, q), q))
        for tv, qv in zip(t, q):
            tv.assign(0.3 * qv + 0.7 * tv)
        out.append((a, loss))
    return out, q, t


@parity(modes=True, **TOL)
def test_alternating_freezing_changes_the_updated_set(tf):
    """Block-coordinate training: even steps update the first layer, odd steps the second (and
    every third step both), one Adam; the predicted update must follow the changing set."""
    x, y = regression_data(n=8, seed=14)
    vs = mlp_vars(tf, seed=5)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for i in range(9):
        subset = vs if i % 3 == 2 else (vs[:2] if i % 2 == 0 else vs[2:])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, subset), subset))
        out.append(loss)
    return out, vs, [v.numpy() for v in opt.variables()[1:]]


@parity(modes=True, **TOL)
def test_reading_optimizer_slots_during_training(tf):
    """A loop that logs Adam's first-moment slot (``get_slot``) and the momentum of SGD every
    other step, while the updates repeat (the step the loop predicts)."""
    x, y = regression_data(n=8, seed=15)
    w, b = _lin(tf, 37)
    w2, b2 = _lin(tf, 38)
    adam = tf.keras.optimizers.legacy.Adam(0.05)
    sgd = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9)
    out = []
    for i in range(8):
        with tf.GradientTape(persistent=True) as tape:
            l1 = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
            l2 = tf.reduce_mean((tf.matmul(x, w2) + b2 - y) ** 2)
        adam.apply_gradients(zip(tape.gradient(l1, [w, b]), [w, b]))
        sgd.apply_gradients(zip(tape.gradient(l2, [w2, b2]), [w2, b2]))
        del tape
        if i % 2:
            out.append((l1, l2, adam.get_slot(w, "m").numpy(), sgd.get_slot(b2, "momentum").numpy()))
    return out, w, b, w2, b2


@parity(modes=True, **TOL)
def test_keep_best_weights_by_identity_and_restore(tf):
    """Eager early stopping: when the loss improves, ``best = [tf.identity(v) ...]``; the step
    size is too large so it diverges later; the best snapshot is assigned back at the end."""
    x, y = regression_data(n=8, seed=16)
    vs = mlp_vars(tf, seed=6)
    opt = tf.keras.optimizers.legacy.SGD(0.6, momentum=0.9)
    best, best_loss, out = None, float("inf"), []
    for i in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        if float(loss) < best_loss:
            best_loss, best = float(loss), [tf.identity(v) for v in vs]
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        out.append(loss)
    for v, bv in zip(vs, best):
        v.assign(bv)
    return out, best_loss, vs, tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)


@parity(modes=True, **TOL)
def test_numpy_snapshots_and_rollback_on_nan(tf):
    """A loop that keeps NumPy copies of the weights (``v.numpy().copy()``) and rolls back with
    ``assign`` and halves the learning rate when the loss is not finite or rises by 10x."""
    x, y = regression_data(n=8, seed=17)
    w, b = _lin(tf, 39)
    lr = 1.5
    snap = [w.numpy().copy(), b.numpy().copy()]
    prev, out = None, []
    for i in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x * 3.0, w) + b - y) ** 2)
        lv = float(loss)
        if not np.isfinite(lv) or (prev is not None and lv > 10 * prev):
            w.assign(snap[0])
            b.assign(snap[1])
            lr *= 0.5
            out.append(("rollback", lr))
            continue
        snap, prev = [w.numpy().copy(), b.numpy().copy()], lv
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        out.append(loss)
    return out, w, b


@parity(modes=True, **TOL)
def test_learning_rate_variable_annealed_by_the_loop(tf):
    """``opt.learning_rate = v`` with a Python float replaced by ``assign`` on the optimizer's
    learning rate every few steps (cosine by hand); a plain SGD on the same data as a check."""
    x, y = regression_data(n=8, seed=18)
    w, b = _lin(tf, 40)
    opt = tf.keras.optimizers.legacy.SGD(0.2, momentum=0.5)
    out = []
    for i in range(9):
        if i % 3 == 0:
            opt.learning_rate = 0.2 * 0.5 * (1 + np.cos(np.pi * i / 9))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        out.append((loss, float(opt.learning_rate.numpy() if hasattr(opt.learning_rate, "numpy") else opt.learning_rate)))
    return out, w, b


@parity(modes=True, **TOL)
def test_non_persistent_tape_second_gradient_raises_and_training_goes_on(tf):
    """Calling ``gradient`` twice on a non-persistent tape raises RuntimeError; the loop catches
    it, records the error and keeps training with the first gradient."""
    x, y = regression_data(n=6, seed=19)
    w, b = _lin(tf, 41)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        g = tape.gradient(loss, [w, b])
        out.append(raises(tape.gradient, loss, [w, b]))
        w.assign_sub(0.1 * g[0])
        b.assign_sub(0.1 * g[1])
        out.append(loss)
    return out, w, b


@parity(**TOL)
def test_whole_epoch_compiled_over_a_dataset(tf):
    """``for xb, yb in dataset:`` inside a ``tf.function`` (the epoch is one compiled loop over a
    batched dataset), the dataset passed as an argument, an optimizer stepping per batch; the
    epoch's mean loss returned.  (``drop_remainder=True``: a short last batch inside a compiled
    loop is tapejax's documented InvalidArgumentError, XLA's static shapes.)"""
    x, y = regression_data(n=10, seed=20)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True)
    w, b = _lin(tf, 42)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)

    @tf.function
    def epoch(data):
        total, n = tf.constant(0.0), tf.constant(0.0)
        for xb, yb in data:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            total += loss
            n += 1.0
        return total / n

    return [epoch(ds) for _ in range(3)], w, b, int(opt.iterations.numpy())


@parity(**KTOL)
def test_dict_features_dataset_into_a_named_input_model(tf):
    """A dataset of ``({"num": ..., "cat": ...}, label)`` dicts built by ``map`` from a feature
    matrix, fed to ``fit`` of a functional model with named inputs and an Embedding branch."""
    rs = np.random.RandomState(21)
    num = rs.randn(12, 3).astype(np.float32)
    cat = rs.randint(0, 4, size=(12, 1)).astype(np.int32)
    lab = rs.randint(0, 2, size=12).astype(np.int32)
    ds = (tf.data.Dataset.from_tensor_slices((num, cat, lab))
          .map(lambda n, c, t: ({"num": n, "cat": c}, t)).batch(4))
    i_num, i_cat = tf.keras.Input((3,), name="num"), tf.keras.Input((1,), name="cat", dtype="int32")
    e = tf.keras.layers.Flatten()(tf.keras.layers.Embedding(4, 2)(i_cat))
    h = tf.keras.layers.Dense(4, activation="relu")(tf.keras.layers.Concatenate()([i_num, e]))
    model = tf.keras.Model({"num": i_num, "cat": i_cat}, tf.keras.layers.Dense(2)(h))
    keras_init(model, 8)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.optimizer.learning_rate.assign(0.2)
    h = model.fit(ds, epochs=3, verbose=0)
    return _hist(h, ["loss", "accuracy"]), model.evaluate(ds, verbose=0), [v.numpy() for v in model.weights]


@parity(**TOL)
def test_unbatch_rebatch_cache_and_take_twice(tf):
    """``batch(3).map(normalise per batch).unbatch().batch(4)``, ``cache()``, iterated twice via
    ``take(2)`` (the same elements each time) to train two epochs."""
    x, y = regression_data(n=9, seed=22)
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).batch(3)
          .map(lambda a, t: (a - tf.reduce_mean(a, axis=0), t)).unbatch().batch(4).cache())
    w, b = _lin(tf, 43)
    out = []
    for _ in range(2):
        for xb, yb in ds.take(2):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            out.append((xb, loss))
    return out, w, b, int(ds.cardinality().numpy())


@parity(modes=True, **TOL)
def test_triplet_margin_loss_with_sqrt_of_relu_distances(tf):
    """Batch-hard triplet loss plus a spread term over distances ``sqrt(relu(d2))`` (the relu
    guards round-off): the gradient is NaN when a distance is exactly 0 (the diagonal: TF
    multiplies relu's mask into sqrt's infinite gradient; tapejax gave a finite gradient), which
    users then fix by keeping the diagonal off 0; that form trains."""
    rs = np.random.RandomState(23)
    x = tf.constant(rs.randn(6, 3).astype(np.float32))
    labels = tf.constant([0, 0, 1, 1, 2, 2])
    w = tf.Variable(init_array((3, 2), 44))
    same = tf.cast(tf.equal(labels[:, None], labels[None, :]), tf.float32)
    out = []
    for masked in (False, True, True, True):
        with tf.GradientTape() as tape:
            e = tf.matmul(x, w)
            d2 = tf.reduce_sum((e[:, None, :] - e[None, :, :]) ** 2, axis=-1) - 1e-3 * (1.0 - tf.eye(6))
            if masked:
                d2 = d2 + tf.eye(6)   # no exact zeros on the diagonal
            d = tf.sqrt(tf.nn.relu(d2))
            pos = tf.reduce_max(d * (same - tf.eye(6)), axis=1)
            neg = tf.reduce_min(d + 1e3 * same, axis=1)
            loss = tf.reduce_mean(tf.nn.relu(pos - neg + 1.0)) - 0.01 * tf.reduce_mean(d)   # + spread
        g = tape.gradient(loss, w)
        out.append((loss, bool(np.isnan(g.numpy()).any())))
        if masked:
            w.assign_sub(0.1 * g)
    return out, w
