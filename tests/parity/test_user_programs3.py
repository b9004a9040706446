"""Realistic training programs where features meet, run under real TensorFlow 2.21 and under
tapejax with its execution modes on and off (``modes=True``).  Every number a user would
look at is compared: losses, gradients (``None`` included), Variables after training,
optimizer counters and metric values.  Several stress the predicted updates of deferred
execution (a learning rate or the data changed mid-training, a Variable assigned between the
gradient and the update, a gradient modified or applied twice, two optimizers on one
Variable).  ``optimizer.iterations`` is compared as a Python int: it is int64 in TF, int32
without JAX's x64 mode (README, "Semantics worth knowing").
"""
import os
import tempfile

import numpy as np

from .harness import init_array, keras_init, parity, regression_data

TOL = dict(rtol=2e-5, atol=2e-6)


@parity(modes=True, **TOL)
def test_gradient_accumulation_in_a_compiled_loop(tf):
    """Micro-batch gradients summed into Variable accumulators by ``assign_add`` inside
    ``for i in tf.range(k)``; clipped by global norm and applied once per step."""
    x, y = regression_data(n=12)
    w = tf.Variable(init_array((3, 1), 1))
    b = tf.Variable([0.1])
    acc = [tf.Variable(tf.zeros_like(w)), tf.Variable(tf.zeros_like(b))]
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    xs, ys = tf.constant(x.reshape(3, 4, 3)), tf.constant(y.reshape(3, 4, 1))

    @tf.function
    def step():
        for a in acc:
            a.assign(tf.zeros_like(a))
        total = tf.constant(0.0)
        for i in tf.range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xs[i], w) + b - ys[i]) ** 2)
            for a, g in zip(acc, tape.gradient(loss, [w, b])):
                a.assign_add(g / 3.0)
            total += loss
        grads, norm = tf.clip_by_global_norm([a.read_value() for a in acc], 0.5)
        opt.apply_gradients(zip(grads, [w, b]))
        return total / 3.0, norm

    out = [step() for _ in range(4)]
    return out, w, b, acc, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_gan_alternating_compiled_and_eager_steps(tf):
    """Discriminator steps compiled, generator steps eager, alternating; two optimizers."""
    z, real = regression_data(n=6, d=2)[0], regression_data(n=6, d=3, seed=5)[0]
    gw = tf.Variable(init_array((2, 3), 2))
    dw = tf.Variable(init_array((3, 1), 3))
    g_opt, d_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.RMSprop(0.02)

    def losses():
        fake = tf.tanh(tf.matmul(z, gw))
        d_real, d_fake = tf.matmul(real, dw), tf.matmul(fake, dw)
        d_loss = tf.reduce_mean(tf.nn.softplus(-d_real) + tf.nn.softplus(d_fake))
        g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
        return d_loss, g_loss

    @tf.function
    def d_step():
        with tf.GradientTape() as t:
            d_loss, _ = losses()
        g = t.gradient(d_loss, [dw, gw])
        d_opt.apply_gradients([(g[0], dw)])
        return d_loss, g[1]

    hist = []
    for _ in range(3):
        d_loss, g_of_gen = d_step()
        with tf.GradientTape() as t:
            _, g_loss = losses()
        grads = t.gradient(g_loss, [gw, dw])
        g_opt.apply_gradients([(grads[0], gw)])
        hist.append((d_loss, g_loss, g_of_gen, grads[1]))
    return hist, gw, dw, int(g_opt.iterations.numpy()), int(d_opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_schedule_clipping_and_none_gradients(tf):
    """An ExponentialDecay schedule read through ``optimizer.iterations``; a frozen head
    gives a None gradient that ``apply_gradients`` skips; global-norm clipping with None."""
    x, y = regression_data()
    w = tf.Variable(init_array((3, 4), 4))
    unused = tf.Variable(init_array((4, 1), 5))
    head = tf.Variable(init_array((4, 1), 6))
    sched = tf.keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.5)
    opt = tf.keras.optimizers.Adam(sched)
    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(tf.nn.relu(tf.matmul(x, w)), head) - y) ** 2)
        grads = tape.gradient(loss, [w, unused, head])
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients([(g, v) for g, v in zip(clipped, [w, unused, head]) if g is not None])
        out.append((loss, norm, clipped[1], sched(opt.iterations)))
    return out, w, unused, head, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_checkpoint_mid_training_restores_into_a_fresh_model(tf):
    """Save a Module and its Adam state after 3 steps, restore into fresh objects, train on:
    the same numbers as the run that was never interrupted."""
    x, y = regression_data()

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(init_array((3, 2), 7), name="w")
            self.v = tf.Variable(init_array((2, 1), 8), name="v")

        def __call__(self, x):
            return tf.matmul(tf.tanh(tf.matmul(x, self.w)), self.v)

    def train(net, opt, n):
        out = []
        for _ in range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((net(x) - y) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
            out.append(loss)
        return out

    net, opt = Net(), tf.keras.optimizers.Adam(0.05)
    first = train(net, opt, 3)
    path = tf.train.Checkpoint(net=net, opt=opt).save(os.path.join(tempfile.mkdtemp(), "ck"))
    straight = train(net, opt, 3)
    fresh, fresh_opt = Net(), tf.keras.optimizers.Adam(0.05)
    fresh.w.assign(tf.zeros_like(fresh.w))
    tf.train.Checkpoint(net=fresh, opt=fresh_opt).restore(path)
    resumed = train(fresh, fresh_opt, 3)
    return first, straight, resumed, net.trainable_variables, fresh.trainable_variables, int(fresh_opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_early_stopping_inside_a_compiled_step(tf):
    """``if loss < best:`` in a converted function keeps the best weights and counts patience."""
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 9))
    best = tf.Variable(1e9)
    best_w = tf.Variable(tf.zeros_like(w))
    patience = tf.Variable(0)
    lr = tf.Variable(0.3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        w.assign_sub(lr * tape.gradient(loss, w))
        if loss < best:
            best.assign(loss)
            best_w.assign(w)
            patience.assign(0)
        else:
            patience.assign_add(1)
            lr.assign(lr * 0.5)
        return loss

    losses = []
    for _ in range(8):
        losses.append(step())
        if patience.numpy() >= 2:
            break
    return losses, best, best_w, patience, lr, w


@parity(modes=True, **TOL)
def test_tensor_array_rnn_trained_by_a_compiled_step(tf):
    """An Elman RNN unrolled by ``tf.while_loop`` into a ``TensorArray``; the loss reads the
    stacked states; the step is compiled, the evaluation eager."""
    seq = tf.constant(np.random.RandomState(3).randn(5, 4, 2).astype(np.float32))  # time, batch, feat
    target = tf.constant(np.random.RandomState(4).randn(4, 1).astype(np.float32))
    wx = tf.Variable(init_array((2, 3), 10))
    wh = tf.Variable(init_array((3, 3), 11))
    wo = tf.Variable(init_array((3, 1), 12))
    opt = tf.keras.optimizers.Adam(0.05)

    def run(seq):
        ta = tf.TensorArray(tf.float32, size=5)

        def body(t, h, ta):
            h = tf.tanh(tf.matmul(seq[t], wx) + tf.matmul(h, wh))
            return t + 1, h, ta.write(t, h)

        _, h, ta = tf.while_loop(lambda t, h, ta: t < 5, body, (0, tf.zeros((4, 3)), ta), maximum_iterations=5)
        states = ta.stack()
        return tf.matmul(h, wo), tf.reduce_mean(states ** 2)

    @tf.function
    def step(seq):
        with tf.GradientTape() as tape:
            pred, act = run(seq)
            loss = tf.reduce_mean((pred - target) ** 2) + 0.1 * act
        grads = tape.gradient(loss, [wx, wh, wo])
        opt.apply_gradients(zip(grads, [wx, wh, wo]))
        return loss, grads

    out = []
    for _ in range(3):
        loss, grads = step(seq)
        with tf.GradientTape() as tape:
            pred, act = run(seq)
        out.append((loss, grads, tape.gradient(act, [wx, wo])))
    return out, wx, wh, wo


@parity(modes=True, **TOL)
def test_physics_informed_loss_with_jacobians(tf):
    """u(x, t) by a small MLP; the residual u_t + u * u_x - nu * u_xx needs first and second
    derivatives (a persistent inner tape and ``batch_jacobian``); trained by SGD."""
    pts = tf.constant(np.random.RandomState(5).uniform(-1, 1, (6, 2)).astype(np.float32))
    w1 = tf.Variable(init_array((2, 5), 13))
    w2 = tf.Variable(init_array((5, 1), 14))
    opt = tf.keras.optimizers.SGD(0.05)
    out = []
    for _ in range(2):
        with tf.GradientTape() as outer:
            with tf.GradientTape(persistent=True) as t2:
                t2.watch(pts)
                with tf.GradientTape() as t1:
                    t1.watch(pts)
                    u = tf.matmul(tf.tanh(tf.matmul(pts, w1)), w2)
                du = t1.batch_jacobian(u, pts)[:, 0, :]     # (6, 2): u_x, u_t
                u_x = du[:, 0:1]
            u_xx = t2.gradient(u_x, pts)[:, 0:1]
            jac = t2.jacobian(u_x, pts)
            del t2
            resid = du[:, 1:2] + u * u_x - 0.1 * u_xx
            loss = tf.reduce_mean(resid ** 2) + tf.reduce_mean(u[:2] ** 2)
        grads = outer.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        out.append((loss, grads, tf.reduce_sum(jac)))
    return out, w1, w2


@parity(modes=True, **TOL)
def test_keras_mean_metric_updated_inside_the_tape(tf):
    """``tf.keras.metrics.Mean`` and ``MeanAbsoluteError`` updated inside the tape every step,
    read and reset between epochs, with a compiled step in the second epoch."""
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 15))
    opt = tf.keras.optimizers.SGD(0.1)
    loss_m, mae = tf.keras.metrics.Mean(), tf.keras.metrics.MeanAbsoluteError()

    def step():
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w)
            loss = tf.reduce_mean((pred - y) ** 2)
            loss_m.update_state(loss)
            mae.update_state(y, pred)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    compiled = tf.function(step)
    epochs = []
    for epoch in range(2):
        losses = [(compiled if epoch else step)() for _ in range(3)]
        epochs.append((losses, loss_m.result(), mae.result(), loss_m.count))
        loss_m.reset_state()
        mae.reset_state()
    return epochs, w, loss_m.result()


@parity(modes=True, **TOL)
def test_module_with_variables_created_on_first_call(tf):
    """A ``tf.Module`` whose Dense-like layers build their Variables lazily on the first call,
    which happens inside the ``tf.function`` step; ``trainable_variables`` then lists them."""
    x, y = regression_data()

    class Dense(tf.Module):
        def __init__(self, units, seed, name=None):
            super().__init__(name=name)
            self.units, self.seed, self.w = units, seed, None

        def __call__(self, x):
            if self.w is None:
                self.w = tf.Variable(init_array((x.shape[-1], self.units), self.seed), name="w")
                self.b = tf.Variable(tf.zeros([self.units]), name="b")
            return tf.matmul(x, self.w) + self.b

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = Dense(4, 16), Dense(1, 17)

        def __call__(self, x):
            return self.l2(tf.nn.relu(self.l1(x)))

    net = Net()
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - y) ** 2)
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    losses = [step(x, y) for _ in range(4)]
    names = [v.name for v in net.trainable_variables]
    return losses, names, net.trainable_variables, len(net.variables)


@parity(modes=True, **TOL)
def test_ensemble_with_hand_made_loss_scaling(tf):
    """Three members trained together on one tape in float16 compute with float32 master
    weights; the loss is scaled by hand, the gradients unscaled and checked for finiteness."""
    x, y = regression_data()
    members = [(tf.Variable(init_array((3, 4), 20 + i)), tf.Variable(init_array((4, 1), 30 + i))) for i in range(3)]
    params = [v for m in members for v in m]
    opt = tf.keras.optimizers.SGD(0.05)
    scale = tf.Variable(1024.0, trainable=False)
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            xh = tf.cast(x, tf.float16)
            preds = [tf.matmul(tf.nn.relu(tf.matmul(xh, tf.cast(a, tf.float16))), tf.cast(b, tf.float16))
                     for a, b in members]
            mean = tf.cast(tf.add_n(preds), tf.float32) / 3.0
            loss = tf.reduce_mean((mean - y) ** 2)
            scaled = loss * scale
        grads = [g / scale for g in tape.gradient(scaled, params)]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        if bool(finite):
            opt.apply_gradients(zip(grads, params))
            if step == 1:
                scale.assign(scale * 2.0)
        else:
            scale.assign(scale / 2.0)
        out.append((loss, finite, [g.dtype.name for g in grads]))
    return out, params, scale

@parity(modes=True, **TOL)
def test_persistent_tape_across_updates(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 1))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            pred = tf.matmul(x, w) + b
            loss = tf.reduce_mean((pred - y) ** 2)
            reg = tf.reduce_sum(w ** 2)
        gw = tape.gradient(loss, w)
        opt.apply_gradients([(gw, w)])
        gb = tape.gradient(loss, b)
        opt.apply_gradients([(gb, b)])
        greg = tape.gradient(reg, w)
        w.assign_sub(0.01 * greg)
        out.append((loss, gw, gb, greg))
        del tape
    return out, w, b


@parity(modes=True, **TOL)
def test_dqn_numpy_replay_compiled(tf):
    rs = np.random.RandomState(0)
    obs = np.zeros((16, 3), np.float32)
    rew = np.zeros((16,), np.float32)
    nxt = np.zeros((16, 3), np.float32)
    act = np.zeros((16,), np.int32)
    q = [tf.Variable(init_array((3, 4), 2)), tf.Variable(init_array((4, 2), 3))]
    tq = [tf.Variable(v) for v in q]
    opt = tf.keras.optimizers.Adam(0.01)

    def qf(ps, s):
        return tf.matmul(tf.nn.relu(tf.matmul(s, ps[0])), ps[1])

    @tf.function
    def train(s, a, r, s2):
        target = r + 0.9 * tf.reduce_max(qf(tq, s2), axis=1)
        with tf.GradientTape() as tape:
            qs = tf.gather(qf(q, s), a, batch_dims=1)
            loss = tf.reduce_mean(tf.keras.losses.huber(target[:, None], qs[:, None]))
        grads = tape.gradient(loss, q)
        opt.apply_gradients(zip(grads, q))
        return loss

    out = []
    for step in range(6):
        obs[:] = rs.randn(16, 3)
        nxt[:] = rs.randn(16, 3)
        rew[:] = rs.randn(16)
        act[:] = rs.randint(0, 2, 16)
        idx = rs.randint(0, 16, 4)
        loss = train(obs[idx], act[idx], rew[idx], nxt[idx])
        out.append(loss)
        if step % 2 == 1:
            for a, b in zip(tq, q):
                a.assign(b)
        with tf.GradientTape() as tape:
            l2 = tf.reduce_mean(qf(q, obs))
        out.append(tape.gradient(l2, q))
    return out, q, tq


@parity(modes=True, **TOL)
def test_minimize_callable_and_var_list_callable_lazy(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 4))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.legacy.RMSprop(0.05, momentum=0.3, centered=True)
    losses = []
    for i in range(4):
        loss_fn = lambda: tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)  # noqa: E731
        opt.minimize(loss_fn, var_list=lambda: [w, b] if i > 1 else [w])
        losses.append(loss_fn())
    return losses, w, b, [v.numpy() for v in opt.variables()][1:]


@parity(modes=True, **TOL)
def test_gradient_of_function_under_outer_tape(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 5))

    @tf.function
    def inner_grad(w_t):
        with tf.GradientTape() as t:
            t.watch(w_t)
            loss = tf.reduce_mean((tf.matmul(x, w_t) - y) ** 2)
        return loss, t.gradient(loss, w_t)

    out = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            loss, g = inner_grad(tf.identity(w))
            adapted = w - 0.1 * g
            meta = tf.reduce_mean((tf.matmul(x, adapted) - y) ** 2)
        mg = outer.gradient(meta, w)
        w.assign_sub(0.05 * mg)
        out.append((loss, g, meta, mg))
    return out, w


@parity(modes=True, **TOL)
def test_assign_inside_tape_then_read(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 6))
    ema = tf.Variable(tf.zeros_like(w))
    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            l1 = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            ema.assign(0.9 * ema + 0.1 * w)
            w.assign(w * 0.99)
            l2 = tf.reduce_mean((tf.matmul(x, w) - y) ** 2) + tf.reduce_sum(ema * w)
            total = l1 + l2
        g = tape.gradient(total, [w, ema])
        w.assign_sub(0.1 * g[0])
        out.append((l1, l2, g))
    return out, w, ema


@parity(modes=True, **TOL)
def test_tf_data_pipeline_feeding_signature_step(tf):
    x, y = regression_data(n=20)
    ds = (tf.data.Dataset.from_tensor_slices((x, y))
          .map(lambda a, b: (a * 2.0, b + 1.0))
          .batch(6)
          .prefetch(2))
    w = tf.Variable(init_array((3, 1), 7))
    opt = tf.keras.optimizers.SGD(0.05, nesterov=True, momentum=0.9)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)])
    def step(a, b):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(a, w) - b) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss, tf.shape(a)[0]

    out = []
    for epoch in range(2):
        for a, b in ds:
            out.append(step(a, b))
    return out, w, len(step.get_concrete_function().structured_outputs) if hasattr(step, "get_concrete_function") else 2

@parity(modes=True, **TOL)
def test_lr_changed_mid_training(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 1))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    out = []
    for step in range(12):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        if step == 5:
            opt.learning_rate = 0.01
        if step == 8:
            opt.learning_rate.assign(0.2)
        if step == 10:
            opt.momentum = 0.0
        opt.apply_gradients([(g, w)])
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_python_lr_decays_each_step(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 2))
    lr = 0.2
    out = []
    for step in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        w.assign_sub(lr * g)
        lr = lr * 0.8 if step > 4 else lr
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_gradient_modified_sometimes(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 3))
    b = tf.Variable([0.1])
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for step in range(12):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        if step in (6, 7):
            gw = tf.clip_by_norm(gw, 0.1)
        if step == 9:
            opt.apply_gradients([(gb, b), (gw, w)])
        elif step == 10:
            opt.apply_gradients([(gw, w)])
        else:
            opt.apply_gradients([(gw, w), (gb, b)])
        if step % 4 == 3:
            out.append(tf.norm(gw))
        out.append(loss)
    return out, w, b


@parity(modes=True, **TOL)
def test_skip_update_on_condition(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 4))
    opt = tf.keras.optimizers.legacy.SGD(0.3)
    out = []
    for step in range(12):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        if step % 5 != 4:
            opt.apply_gradients([(g, w)])
        else:
            w.assign(w * 0.5)
        out.append(loss)
    return out, w, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_two_optimizers_same_variable(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 5))
    a = tf.keras.optimizers.legacy.SGD(0.1)
    b = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for step in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        (a if step % 3 else b).apply_gradients([(g, w)])
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_data_changes_between_steps(tf):
    x, y = regression_data(n=24)
    w = tf.Variable(init_array((3, 1), 6))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for step in range(12):
        xb = x[(step % 3) * 8:(step % 3) * 8 + 8]
        yb = y[(step % 3) * 8:(step % 3) * 8 + 8]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_assign_between_steps_and_reads(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 7))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    snap = None
    for step in range(12):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        if step == 4:
            snap = w.read_value()
        if step == 8:
            w.assign(snap)
        if step == 9:
            opt.variables()[1].assign(tf.zeros_like(w))
        out.append(loss)
    return out, w, snap

@parity(modes=True, **TOL)
def test_replay_buffer_in_variables(tf):
    """A replay buffer held in tf.Variables, written by slice assign in a compiled insert."""
    buf_x = tf.Variable(tf.zeros((6, 3)), trainable=False)
    buf_y = tf.Variable(tf.zeros((6, 1)), trainable=False)
    ptr = tf.Variable(0, trainable=False)
    w = tf.Variable(init_array((3, 1), 1))
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def insert(x, y):
        i = ptr % 6
        buf_x[i].assign(x)
        buf_y[i].assign(y)
        ptr.assign_add(1)

    @tf.function
    def train():
        n = tf.minimum(ptr, 6)
        mask = tf.cast(tf.range(6) < n, tf.float32)[:, None]
        with tf.GradientTape() as tape:
            pred = tf.matmul(buf_x, w)
            loss = tf.reduce_sum(mask * (pred - buf_y) ** 2) / tf.cast(n, tf.float32)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    xs, ys = regression_data(n=9)
    out = []
    for i in range(9):
        insert(xs[i], ys[i])
        out.append(train())
    return out, w, buf_x, ptr


@parity(modes=True, **TOL)
def test_embedding_sparse_adam_with_global_clipping(tf):
    """Embedding rows gathered with duplicates (IndexedSlices), clip_by_global_norm, Adam."""
    emb = tf.Variable(init_array((6, 2), 2))
    w = tf.Variable(init_array((2, 1), 3))
    ids = tf.constant([[0, 2, 2], [5, 0, 1]])
    y = tf.constant([[1.0], [-1.0]])
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            h = tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1)
            loss = tf.reduce_mean((tf.matmul(h, w) - y) ** 2)
        g = tape.gradient(loss, [emb, w])
        clipped, norm = tf.clip_by_global_norm(g, 0.3)
        opt.apply_gradients(zip(clipped, [emb, w]))
        out.append((loss, norm, tf.convert_to_tensor(clipped[0])))
    return out, emb, w


@parity(modes=True, **TOL)
def test_custom_gradient_with_variables_in_function(tf):
    """A custom_gradient layer reading a Variable (``variables=`` kwarg) inside tf.function."""
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 4))

    @tf.custom_gradient
    def clipped_linear(x):
        out = tf.matmul(x, w)

        def grad(dy, variables=None):
            gx = tf.matmul(dy, tf.transpose(w))
            gw = tf.clip_by_value(tf.matmul(tf.transpose(x), dy), -0.2, 0.2)
            return gx, [gw]

        return out, grad

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((clipped_linear(x) - y) ** 2)
        g = tape.gradient(loss, w)
        w.assign_sub(0.5 * g)
        return loss, g

    out = [step() for _ in range(3)]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((clipped_linear(x) - y) ** 2)
    out.append(tape.gradient(loss, w))
    return out, w


@parity(modes=True, **TOL)
def test_checkpoint_manager_restore_before_slots_exist(tf):
    """CheckpointManager keeps 2; restoring into a fresh optimizer whose slots are created by
    the first compiled step (deferred restoration), then training continues."""
    x, y = regression_data()
    d = tempfile.mkdtemp()

    def make():
        w = tf.Variable(init_array((3, 1), 5), name="w")
        opt = tf.keras.optimizers.legacy.Adam(0.1)
        ckpt = tf.train.Checkpoint(w=w, opt=opt, step=tf.Variable(0))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            ckpt.step.assign_add(1)
            return loss

        return w, opt, ckpt, step

    w, opt, ckpt, step = make()
    mgr = tf.train.CheckpointManager(ckpt, d, max_to_keep=2)
    out = []
    for i in range(5):
        out.append(step())
        if i % 2 == 0:
            mgr.save()
    kept = [os.path.basename(p) for p in mgr.checkpoints]
    w2, opt2, ckpt2, step2 = make()
    ckpt2.restore(tf.train.latest_checkpoint(d))
    resumed = [step2() for _ in range(3)]
    return out, kept, resumed, w2, ckpt2.step, int(opt2.iterations.numpy())


@parity(modes=True, **TOL)
def test_watch_accessed_variables_false_in_function(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 6))
    b = tf.Variable([0.5])

    @tf.function
    def grads():
        with tf.GradientTape(watch_accessed_variables=False, persistent=True) as tape:
            tape.watch(b)
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        return tape.gradient(loss, [w, b], unconnected_gradients="zero"), tape.gradient(loss, b)

    out = []
    for _ in range(3):
        (gw, gb), gb2 = grads()
        b.assign_sub(0.1 * gb)
        out.append((gw, gb, gb2))
    return out, b


@parity(modes=True, **TOL)
def test_losses_collected_in_tensor_array_inside_function(tf):
    x, y = regression_data(n=12)
    xs, ys = tf.constant(x.reshape(3, 4, 3)), tf.constant(y.reshape(3, 4, 1))
    w = tf.Variable(init_array((3, 1), 7))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    @tf.function
    def epoch():
        ta = tf.TensorArray(tf.float32, size=3)
        for i in tf.range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xs[i], w) - ys[i]) ** 2)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            ta = ta.write(i, loss)
        return ta.stack()

    return [epoch() for _ in range(3)], w, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_recompute_grad_block(tf):
    x, y = regression_data()
    w1 = tf.Variable(init_array((3, 4), 8))
    w2 = tf.Variable(init_array((4, 1), 9))

    @tf.recompute_grad
    def block(h):
        return tf.nn.gelu(tf.matmul(h, w1))

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(block(x), w2) - y) ** 2)
        g = tape.gradient(loss, [w1, w2])
        for v, gv in zip([w1, w2], g):
            v.assign_sub(0.1 * gv)
        out.append((loss, g))
    return out

@parity(modes=True, **TOL)
def test_reinforce_with_discounted_returns_by_scan(tf):
    rs = np.random.RandomState(0)
    obs = tf.constant(rs.randn(6, 3).astype(np.float32))
    acts = tf.constant(rs.randint(0, 2, 6).astype(np.int32))
    rews = tf.constant(rs.randn(6).astype(np.float32))
    w = tf.Variable(init_array((3, 2), 1))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        returns = tf.scan(lambda acc, r: r + 0.9 * acc, rews, initializer=0.0, reverse=True)
        returns = (returns - tf.reduce_mean(returns)) / (tf.math.reduce_std(returns) + 1e-6)
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(tf.matmul(obs, w))
            chosen = tf.reduce_sum(tf.one_hot(acts, 2) * logp, axis=1)
            loss = -tf.reduce_mean(chosen * tf.stop_gradient(returns))
            ent = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, axis=1))
            total = loss - 0.01 * ent
        g = tape.gradient(total, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, ent, g, returns))
    return out, w


@parity(modes=True, **TOL)
def test_causal_attention_with_masks_compiled(tf):
    rs = np.random.RandomState(1)
    x = tf.constant(rs.randn(2, 4, 6).astype(np.float32))
    pad = tf.constant([[1, 1, 1, 0], [1, 1, 0, 0]], tf.float32)
    wq, wk, wv = (tf.Variable(init_array((6, 6), s)) for s in (2, 3, 4))
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            q, k, v = (tf.einsum("btd,de->bte", x, m) for m in (wq, wk, wv))
            logits = tf.einsum("bqd,bkd->bqk", q, k) / tf.sqrt(6.0)
            causal = tf.linalg.band_part(tf.ones((4, 4)), -1, 0)
            mask = causal[None] * pad[:, None, :]
            logits = tf.where(mask > 0, logits, -1e9)
            att = tf.nn.softmax(logits, axis=-1)
            out = tf.einsum("bqk,bkd->bqd", att, v)
            mean, var = tf.nn.moments(out, axes=[-1], keepdims=True)
            normed = (out - mean) * tf.math.rsqrt(var + 1e-5)
            loss = tf.reduce_sum(tf.reduce_mean(normed ** 3, -1) * pad) / tf.reduce_sum(pad)
        grads = tape.gradient(loss, [wq, wk, wv])
        opt.apply_gradients(zip(grads, [wq, wk, wv]))
        return loss, grads, att

    return [step(x) for _ in range(3)]


@parity(modes=True, **TOL)
def test_graph_message_passing_with_segments(tf):
    senders = tf.constant([0, 1, 2, 2, 3, 0])
    receivers = tf.constant([1, 2, 0, 3, 0, 3])
    feats = tf.constant(init_array((4, 3), 5, 1.0))
    w_msg = tf.Variable(init_array((3, 3), 6))
    w_out = tf.Variable(init_array((3, 1), 7))
    target = tf.constant([[1.0], [0.0], [-1.0], [0.5]])
    opt = tf.keras.optimizers.legacy.RMSprop(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = feats
            for _ in range(2):
                msgs = tf.nn.relu(tf.matmul(tf.gather(h, senders), w_msg))
                agg = tf.math.unsorted_segment_mean(msgs, receivers, num_segments=4)
                h = h + agg
            pooled = tf.math.segment_sum(h, tf.constant([0, 0, 1, 1]))
            loss = tf.reduce_mean((tf.matmul(h, w_out) - target) ** 2) + 0.01 * tf.reduce_sum(pooled ** 2)
        g = tape.gradient(loss, [w_msg, w_out])
        opt.apply_gradients(zip(g, [w_msg, w_out]))
        out.append((loss, g))
    return out, w_msg, w_out


@parity(modes=True, **TOL)
def test_dict_losses_and_nested_sources(tf):
    x, y = regression_data()
    params = {"enc": {"w": tf.Variable(init_array((3, 2), 8)), "b": tf.Variable([0.1, -0.1])},
              "dec": [tf.Variable(init_array((2, 1), 9))], "unused": tf.Variable(1.0)}
    with tf.GradientTape(persistent=True) as tape:
        h = tf.tanh(tf.matmul(x, params["enc"]["w"]) + params["enc"]["b"])
        losses = {"rec": tf.reduce_mean((tf.matmul(h, params["dec"][0]) - y) ** 2),
                  "l2": 0.1 * tf.reduce_sum(params["enc"]["w"] ** 2)}
    g = tape.gradient(losses, params)
    gz = tape.gradient(losses, params, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    og = tape.gradient(losses, params["enc"], output_gradients={"rec": tf.constant(2.0), "l2": tf.constant(-1.0)})
    return g, gz, og


@parity(modes=True, **TOL)
def test_constraints_and_assign_add_value_in_tape(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 10), constraint=lambda v: tf.clip_by_value(v, -0.4, 0.4))
    count = tf.Variable(0.0)
    opt = tf.keras.optimizers.legacy.Adam(0.2)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            c = count.assign_add(1.0)
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2) * c
        gw, gc = tape.gradient(loss, [w, count])
        opt.apply_gradients([(gw, w)])
        out.append((loss, gw, gc))
    return out, w, count


@parity(modes=True, **TOL)
def test_early_break_in_compiled_range_loop(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 11))

    @tf.function
    def fit(n, tol):
        last = tf.constant(0.0)
        steps = tf.constant(0)
        for i in tf.range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            g = tape.gradient(loss, w)
            if tf.norm(g) < tol:
                break
            w.assign_sub(0.2 * g)
            last = loss
            steps += 1
        return last, steps

    return fit(tf.constant(50), tf.constant(0.3)), w, fit(tf.constant(3), tf.constant(0.01)), w

@parity(modes=True, **TOL)
def test_decoupled_weight_decay_between_gradient_and_update(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 1))
    b = tf.Variable([0.2])
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for _ in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign(w * 0.9)
        opt.apply_gradients([(gw, w), (gb, b)])
        out.append(loss)
    return out, w, b


@parity(modes=True, **TOL)
def test_plain_sgd_with_assign_between(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 2))
    out = []
    for i in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        w.assign_add(tf.ones_like(w) * 0.01)
        w.assign_sub(0.1 * g)
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_gradient_applied_to_two_variables(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 3))
    shadow = tf.Variable(init_array((3, 1), 4))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    opt2 = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for i in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        opt2.apply_gradients([(g, shadow)])
        opt.apply_gradients([(g, w)])
        out.append(loss)
    return out, w, shadow


@parity(modes=True, **TOL)
def test_momentum_slot_reset_between(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 5))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    out = []
    for i in range(9):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        if i >= 5:
            opt.get_slot(w, "momentum").assign(tf.zeros_like(w))
        opt.apply_gradients([(g, w)])
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_swap_two_variables_values_every_step(tf):
    x, y = regression_data()
    a = tf.Variable(init_array((3, 1), 6))
    bb = tf.Variable(init_array((3, 1), 7))
    out = []
    for i in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, a) - y) ** 2) + tf.reduce_mean(tf.matmul(x, bb) ** 2)
        ga, gb = tape.gradient(loss, [a, bb])
        tmp = a.read_value()
        a.assign(bb)
        bb.assign(tmp)
        a.assign_sub(0.1 * ga)
        bb.assign_sub(0.1 * gb)
        out.append(loss)
    return out, a, bb


@parity(modes=True, **TOL)
def test_update_then_gradient_reused_next_step(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 8))
    prev = None
    out = []
    for i in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        if prev is not None and i % 3 == 0:
            out.append(tf.reduce_sum(g * prev))
        prev = g
        out.append(loss)
    return out, w


@parity(modes=True, **TOL)
def test_lookahead_slow_weights(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 9))
    slow = tf.Variable(w)
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for i in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        if i % 3 == 2:
            slow.assign_add(0.5 * (w - slow))
            w.assign(slow)
        out.append(loss)
    return out, w, slow

@parity(modes=True, **TOL)
def test_compiled_forward_eager_tape(tf):
    x, y = regression_data()

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(init_array((3, 4), 1))
            self.v = tf.Variable(init_array((4, 1), 2))

        @tf.function
        def __call__(self, x, training=False):
            h = tf.nn.relu(tf.matmul(x, self.w))
            if training:
                h = h * 0.5
            return tf.matmul(h, self.v)

    net = Net()
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for i in range(6):
        with tf.GradientTape() as tape:
            pred = net(x, training=i % 2 == 0)
            loss = tf.reduce_mean((pred - y) ** 2)
        g = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(g, net.trainable_variables))
        out.append((loss, g))
    return out, net.trainable_variables


@parity(modes=True, **TOL)
def test_variable_replaced_after_trace(tf):
    x, _ = regression_data()

    class Holder:
        pass

    h = Holder()
    h.w = tf.Variable(np.ones((3, 1), np.float32))

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.matmul(x, h.w))

    out = [f(x)]
    old = h.w
    h.w = tf.Variable(np.full((3, 1), 2.0, np.float32))
    out.append(f(x))
    old.assign(old * 3.0)
    out.append(f(x))
    out.append(f(x[:5]))
    return out


@parity(modes=True, **TOL)
def test_python_int_argument_retraces(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 3))
    traces = []

    @tf.function
    def step(k, scale):
        traces.append(k)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x[:k], w) - y[:k]) ** 2) * scale
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    out = [step(k, s) for k, s in [(4, 1.0), (4, 2.0), (6, 1.0), (4, 1.0), (8, 0.5)]]
    return out, w, traces, step.experimental_get_tracing_count()


@parity(modes=True, **TOL)
def test_keras_add_loss_and_regularizers_compiled(tf):
    x, y = regression_data(d=5)

    class Sparse(tf.keras.layers.Layer):
        def call(self, inputs):
            self.add_loss(0.01 * tf.reduce_mean(tf.abs(inputs)))
            return inputs

    inp = tf.keras.Input(shape=(5,))
    h = tf.keras.layers.Dense(4, activation="tanh", kernel_regularizer=tf.keras.regularizers.l2(0.05))(inp)
    h = Sparse()(h)
    o = tf.keras.layers.Dense(1)(h)
    model = tf.keras.Model(inp, o)
    rs = np.random.RandomState(1)
    model.set_weights([(rs.randn(*v.shape) * 0.5).astype(np.float32) for v in model.weights])
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = tf.reduce_mean((pred - y) ** 2)
            total = loss + tf.add_n(model.losses)
        g = tape.gradient(total, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, total

    return [step(x, y) for _ in range(3)], [v.numpy() for v in model.weights]


@parity(modes=True, **TOL)
def test_init_scope_variable_in_function(tf):
    x, y = regression_data()
    store = {}

    @tf.function
    def step(x):
        if "w" not in store:
            with tf.init_scope():
                store["w"] = tf.Variable(init_array((3, 1), 4))
                store["opt"] = tf.keras.optimizers.legacy.SGD(0.2)
        w = store["w"]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        store["opt"].apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    return [step(x) for _ in range(3)], store["w"]


@parity(modes=True, **TOL)
def test_jit_compile_and_reduce_retracing(tf):
    x, y = regression_data(n=12)
    w = tf.Variable(init_array((3, 1), 5))
    opt = tf.keras.optimizers.legacy.Adagrad(0.3)

    @tf.function(jit_compile=True, reduce_retracing=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.huber(y, tf.matmul(x, w), delta=0.5))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    out = [step(x[:n], y[:n]) for n in (4, 6, 8, 12, 6)]
    return out, w


@parity(modes=True, **TOL)
def test_gradient_reversal_strength_in_a_variable_compiled(tf):
    """Domain-adversarial step compiled: the reversal's grad_fn reads a non-trainable Variable
    that nothing else in the function reads, changed between epochs by ``assign``."""
    x, _ = regression_data()
    dom = (np.arange(8) % 2).astype(np.float32).reshape(8, 1)
    lam = tf.Variable(0.0, trainable=False)
    feat = tf.Variable(init_array((3, 4), 40))
    head = tf.Variable(init_array((4, 1), 41))
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.custom_gradient
    def reverse(h):
        return tf.identity(h), lambda dy: -lam * dy

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = tf.matmul(reverse(tf.tanh(tf.matmul(x, feat))), head)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=dom, logits=logits))
        grads = tape.gradient(loss, [feat, head])
        opt.apply_gradients(zip(grads, [feat, head]))
        return loss, grads[0]

    out = []
    for epoch in range(3):
        lam.assign(0.5 * epoch)
        out.append(step())
    return out, feat, head


@parity(modes=True, **TOL)
def test_minimize_inside_function_with_lazy_var_list(tf):
    x, y = regression_data()
    store = []

    def var_list():
        if not store:
            store.append(tf.Variable(init_array((3, 1), 2)))
        return store

    opt = tf.keras.optimizers.legacy.Adam(0.1)

    @tf.function
    def step():
        loss = lambda: tf.reduce_mean((tf.matmul(x, var_list()[0]) - y) ** 2)  # noqa: E731
        opt.minimize(loss, var_list)
        return loss()

    return [step() for _ in range(3)], store[0]


# (float16: XLA and TF may round a dot product's float16 result one ulp apart, about 1e-3 relative)
@parity(modes=True, rtol=2e-3, atol=1e-4)
def test_half_precision_variable_trained(tf):
    x, y = regression_data()
    w = tf.Variable(init_array((3, 1), 3).astype(np.float16))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            pred = tf.matmul(tf.cast(x, tf.float16), w)
            loss = tf.reduce_mean(tf.cast(pred, tf.float32) - y) ** 2
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, g))
    return out, w


@parity(modes=True, **TOL)
def test_metric_objects_in_compiled_eval_between_eager_steps(tf):
    x, y = regression_data(n=12)
    w = tf.Variable(init_array((3, 1), 4))
    opt = tf.keras.optimizers.legacy.RMSprop(0.05)
    mse = tf.keras.metrics.MeanSquaredError()
    acc = tf.keras.metrics.BinaryAccuracy(threshold=0.0)

    @tf.function
    def evaluate(a, b):
        p = tf.matmul(a, w)
        mse.update_state(b, p)
        acc.update_state(tf.cast(b > 0, tf.float32), p)

    out = []
    for step in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        evaluate(x[:6], y[:6])
        evaluate(x[6:], y[6:])
        out.append((loss, mse.result(), acc.result()))
        if step == 1:
            mse.reset_state()
    return out, w

@parity(modes=True)
def test_variable_made_on_first_call_from_an_updated_value(tf):
    w = tf.Variable([1.0, 2.0])
    store = {}

    @tf.function
    def f():
        w.assign(w * 3.0)
        if "m" not in store:
            store["m"] = tf.Variable(w * 2.0)
            store["c"] = tf.Variable(lambda: tf.ones([2]) * 7.0)
        store["m"].assign_add(w)
        return store["m"].read_value() + store["c"]

    return [f() for _ in range(3)], w, store["m"], store["c"]


@parity(modes=True)
def test_slots_made_inside_a_function_after_an_assign(tf):
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.legacy.Adagrad(0.5, initial_accumulator_value=0.2)

    @tf.function
    def f():
        w.assign(w * 2.0)
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(w ** 2)
        opt.apply_gradients([(t.gradient(loss, w), w)])
        return loss

    return [f() for _ in range(3)], w, [v.numpy() for v in opt.variables()[1:]]


# Keras models (tf_keras on the TF side, Keras 3 on JAX on tapejax's; see test_keras.py)

KTOL = dict(rtol=1e-4, atol=1e-5)


def _kdata(n=16, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _kmlp(tf, bn=False):
    layers = [tf.keras.Input(shape=(5,)), tf.keras.layers.Dense(6, activation="relu")]
    if bn:
        layers.append(tf.keras.layers.BatchNormalization())
    layers.append(tf.keras.layers.Dense(3))
    model = tf.keras.Sequential(layers)
    keras_init(model)
    return model

@parity(modes=True, **KTOL)
def test_custom_loop_then_fit_then_custom_loop(tf):
    x, y = _kdata()
    model = _kmlp(tf, bn=True)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        out.append(loss)
    model.compile(optimizer="sgd", loss=loss_fn, metrics=["accuracy"])
    hist = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    out.append([float(v) for v in hist.history["loss"]])
    out.append(model.evaluate(x, y, verbose=0))
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        out.append(loss)
    return out, [v.numpy() for v in model.variables], int(opt.iterations.numpy())


@parity(modes=True, **KTOL)
def test_subclassed_model_train_step_and_custom_metric(tf):
    x, y = _kdata()

    class M(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d1 = tf.keras.layers.Dense(4, activation="tanh")
            self.d2 = tf.keras.layers.Dense(3)
            self.tracker = tf.keras.metrics.Mean(name="loss")

        def call(self, x):
            return self.d2(self.d1(x))

        def train_step(self, data):
            xb, yb = data
            with tf.GradientTape() as tape:
                logits = self(xb, training=True)
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True))
                loss += 0.01 * tf.add_n([tf.reduce_sum(w ** 2) for w in self.trainable_weights])
            grads = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            self.tracker.update_state(loss)
            return {"loss": self.tracker.result()}

        @property
        def metrics(self):
            return [self.tracker]

    m = M()
    m(x[:1])
    rs = np.random.RandomState(1)
    for v in m.trainable_weights:
        v.assign((rs.randn(*v.shape) * 0.5).astype(np.float32))
    m.compile(optimizer="adam")
    h = m.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    return [float(v) for v in h.history["loss"]], [v.numpy() for v in m.trainable_weights]


@parity(modes=True, **KTOL)
def test_functional_model_two_losses_frozen_layer(tf):
    x, y = _kdata()
    inp = tf.keras.Input(shape=(5,))
    h = tf.keras.layers.Dense(4, activation="relu", name="shared")(inp)
    a = tf.keras.layers.Dense(3, name="cls")(h)
    b = tf.keras.layers.Dense(1, name="reg")(h)
    model = tf.keras.Model(inp, [a, b])
    keras_init(model)
    model.get_layer("shared").trainable = False
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            la, lb = model(x, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, la, from_logits=True))
            loss += tf.reduce_mean((lb - 1.0) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for i in range(3):
        out.append(step(x, y))
    model.get_layer("shared").trainable = True
    for i in range(3):
        with tf.GradientTape() as tape:
            la, lb = model(x, training=True)
            loss = tf.reduce_mean((lb - 1.0) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        out.append([g is None for g in grads])
        opt.apply_gradients([(g, v) for g, v in zip(grads, model.trainable_variables) if g is not None])
        out.append(loss)
    return out, [v.numpy() for v in model.weights], len(model.trainable_variables)


@parity(modes=True, **KTOL)
def test_tf_function_closure_over_python_float(tf):
    x, _ = _kdata()
    w = tf.Variable(np.ones((5, 1), np.float32))
    cfg = {"scale": 2.0}

    @tf.function
    def f(x):
        return tf.reduce_sum(tf.matmul(x, w)) * cfg["scale"]

    out = [f(x)]
    cfg["scale"] = 3.0
    out.append(f(x))                  # baked in at trace time
    out.append(f(x[:4]))              # new shape: retraced, sees 3.0
    w.assign(w * 2.0)
    out.append(f(x))
    return out

@parity(modes=True, **KTOL)
def test_wgan_gradient_penalty_with_keras_critic(tf):
    rs = np.random.RandomState(0)
    real = tf.constant(rs.randn(6, 4).astype(np.float32))
    z = tf.constant(rs.randn(6, 2).astype(np.float32))
    eps = tf.constant(rs.uniform(size=(6, 1)).astype(np.float32))
    critic = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(5, activation="tanh"),
                                  tf.keras.layers.Dense(1)])
    critic.set_weights([init_array(tuple(v.shape), 10 + i) for i, v in enumerate(critic.weights)])
    gen = tf.Variable(init_array((2, 4), 3))
    c_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.5)
    g_opt = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.5)

    def critic_loss():
        fake = tf.matmul(z, gen)
        inter = eps * real + (1 - eps) * fake
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(inter)
            c_inter = critic(inter, training=True)
        grads = gp_tape.gradient(c_inter, inter)
        gp = tf.reduce_mean((tf.norm(grads, axis=1) - 1.0) ** 2)
        return tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + 10.0 * gp, gp

    @tf.function
    def c_step():
        with tf.GradientTape() as tape:
            loss, gp = critic_loss()
        g = tape.gradient(loss, critic.trainable_variables)
        c_opt.apply_gradients(zip(g, critic.trainable_variables))
        return loss, gp

    out = []
    for i in range(3):
        out.append(c_step())
        with tf.GradientTape() as tape:
            loss, gp = critic_loss()
        g = tape.gradient(loss, critic.trainable_variables)
        c_opt.apply_gradients(zip(g, critic.trainable_variables))
        with tf.GradientTape() as tape:
            g_loss = -tf.reduce_mean(critic(tf.matmul(z, gen)))
        g_opt.apply_gradients([(tape.gradient(g_loss, gen), gen)])
        out.append((loss, gp, g_loss))
    return out, [v.numpy() for v in critic.weights], gen


@parity(modes=True, **KTOL)
def test_restore_into_objects_a_function_already_traced(tf):
    rs = np.random.RandomState(1)
    x = tf.constant(rs.randn(8, 3).astype(np.float32))
    y = tf.constant(rs.randn(8, 1).astype(np.float32))
    w = tf.Variable(init_array((3, 1), 4))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    ckpt = tf.train.Checkpoint(w=w, opt=opt)
    prefix = os.path.join(tempfile.mkdtemp(), "ck")

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    out = [step() for _ in range(2)]
    path = ckpt.write(prefix)
    out += [step() for _ in range(3)]
    ckpt.read(path).assert_consumed()
    out += [step() for _ in range(3)]
    return out, w, int(opt.iterations.numpy())


@parity(modes=True, **KTOL)
def test_ema_of_weights_for_evaluation(tf):
    rs = np.random.RandomState(2)
    x = tf.constant(rs.randn(8, 3).astype(np.float32))
    y = tf.constant(rs.randn(8, 1).astype(np.float32))
    w = tf.Variable(init_array((3, 1), 5))
    b = tf.Variable([0.0])
    ema = tf.train.ExponentialMovingAverage(0.5)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        ema.apply([w, b])
        return loss

    out = []
    for i in range(4):
        out.append(step())
        out.append(tf.reduce_mean((tf.matmul(x, ema.average(w)) + ema.average(b) - y) ** 2))
    return out, w, ema.average(w)


@parity(modes=True, **KTOL)
def test_hessian_vector_product_curvature_step(tf):
    rs = np.random.RandomState(3)
    x = tf.constant(rs.randn(8, 3).astype(np.float32))
    y = tf.constant(rs.randn(8, 1).astype(np.float32))
    w = tf.Variable(init_array((3, 1), 6))
    out = []
    for _ in range(3):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = tf.reduce_mean(tf.math.softplus(tf.matmul(x, w) - y) ** 2)
            g = inner.gradient(loss, w)
            gv = tf.reduce_sum(g * tf.stop_gradient(g))
        hv = outer.gradient(gv, w)
        step = tf.reduce_sum(g * g) / (tf.reduce_sum(g * hv) + 1e-6)
        w.assign_sub(step * g)
        out.append((loss, g, hv, step))
    return out, w
