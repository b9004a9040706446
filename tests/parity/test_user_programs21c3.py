"""Round twenty-one (c) of realistic user programs, third part: more neural rendering and the
Keras-packaged programs, beside ``test_user_programs21c.py`` (whose helpers they share), run
under real TensorFlow 2.21 and under tapejax (tape-level ones with deferred execution and
predicted updates on and off, ``modes=True``; the Keras ones in the default mode).

A Plenoxels-style voxel grid read by trilinear ``tf.gather``s (IndexedSlices gradients, a dense
one once a total-variation term reads the whole grid), IDR's sphere tracing with the
differentiable-intersection trick (``stop_gradient`` of the SDF and of the normal), keras.io's
NeRF ``keras.Model`` subclass with its own ``compile`` and ``train_step`` under ``fit`` on a
``tf.data`` dataset, a Hamiltonian network packaged as a Keras model whose ``call`` opens a
``GradientTape`` (a tapejax design limit: strict xfail), and the PINN tutorials' Keras model whose
``train_step`` returns ``{"loss": loss}`` (fit's history logged Keras 3's untouched loss tracker,
0, before ``tapejax/keras/trainer.py`` took tf_keras' rule), RNODE's kinetic and Jacobian
regularisers by ``batch_jacobian``, vjps and ``ForwardAccumulator`` (raw ops and a Keras model:
the output bias's ``None`` through a Jacobian or a JVP that an outer tape differentiates).  Last, a viscous Burgers PINN whose
``u_xx`` comes by forward-over-reverse (a ``ForwardAccumulator`` around an inner tape) and by
nested accumulators, and the same derivatives factored into a helper function, where TF 2.21's
gradient is wrong once the helper's accumulator is collected (compared with the true values).
"""
import numpy as np

from .harness import A, keras_init, parity, xfail_on_tapejax
from .test_user_programs21c import LOOSE, _dense_vars, _encode_position, _get_rays, _mlp, _pose, _volume_render


@parity(modes=True, **LOOSE)
def test_voxel_grid_radiance_field_by_trilinear_gathers_and_a_tv_regulariser(tf):
    """A Plenoxels-style radiance field: a 4^3 grid Variable of (density, rgb) read at ray samples
    by trilinear interpolation (``floor``, ``clip_by_value`` of the corner indices, ``tf.gather``
    of the flattened grid: IndexedSlices gradients with repeated rows), rendered in log space
    (``exp(-cumsum(sigma * delta, exclusive=True))``) beside keras.io's ``cumprod`` form, plus a
    total-variation term by slicing differences (the TV term makes the gradient dense; the
    photometric term alone gives IndexedSlices, which legacy Adam applies at the second step)."""
    rs = np.random.RandomState(2181)
    n, r, s = 4, 5, 6
    grid = tf.Variable(rs.uniform(-0.5, 1.0, (n * n * n, 4)).astype(np.float32))
    origins = np.tile([[0.2, 0.3, -0.5]], (r, 1)).astype(np.float32)
    dirs = np.concatenate([rs.uniform(-0.3, 0.3, (r, 2)), np.ones((r, 1))], 1).astype(np.float32)
    t_vals = np.tile(np.linspace(0.6, 3.2, s, dtype=np.float32), (r, 1))
    target = rs.uniform(0, 1, (r, 3)).astype(np.float32)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def trilinear(pts):
        g = tf.clip_by_value(pts, 0.0, n - 1.001)
        base = tf.floor(g)
        frac = g - base
        base = tf.cast(base, tf.int32)
        out = 0.0
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    idx = base + [dx, dy, dz]
                    flat = (idx[..., 0] * n + idx[..., 1]) * n + idx[..., 2]
                    wgt = tf.reduce_prod(tf.where(tf.constant([dx, dy, dz]) > 0, frac, 1.0 - frac), -1)
                    out += wgt[..., None] * tf.gather(grid, flat)
        return out

    def render():
        pts = (origins[:, None, :] + dirs[:, None, :] * t_vals[..., None]) * 1.2 + 1.0
        raw = trilinear(pts)
        sigma, rgb = tf.nn.softplus(raw[..., 0]), tf.sigmoid(raw[..., 1:])
        delta = tf.concat([t_vals[:, 1:] - t_vals[:, :-1], tf.fill([r, 1], 1e10)], -1)
        trans_log = tf.exp(-tf.math.cumsum(sigma * delta, axis=-1, exclusive=True))
        alpha = 1.0 - tf.exp(-sigma * delta)
        trans_prod = tf.math.cumprod(1.0 - alpha + 1e-10, axis=-1, exclusive=True)
        w = alpha * trans_log
        return tf.reduce_sum(w[..., None] * rgb, 1), trans_log, trans_prod

    def tv():
        g = tf.reshape(grid, [n, n, n, 4])
        return (tf.reduce_mean(tf.square(g[1:] - g[:-1])) + tf.reduce_mean(tf.square(g[:, 1:] - g[:, :-1]))
                + tf.reduce_mean(tf.square(g[:, :, 1:] - g[:, :, :-1])))

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            rgb, trans_log, trans_prod = render()
            photo = tf.reduce_mean(tf.square(rgb - target))
            loss = photo + 0.01 * tv()
        g, g_photo = tape.gradient(loss, grid), tape.gradient(photo, grid)
        opt.apply_gradients([(g_photo, grid)] if len(out) == 1 else [(g, grid)])
        out.append((loss, isinstance(g, tf.IndexedSlices), isinstance(g_photo, tf.IndexedSlices),
                    tf.convert_to_tensor(g), tf.convert_to_tensor(g_photo), trans_log, trans_prod))
    return out, grid


@parity(modes=True, **LOOSE)
def test_sphere_tracing_with_a_differentiable_intersection_as_idr_writes_it(tf):
    """IDR-style rendering of a learned SDF (a sphere radius Variable plus a small MLP
    correction): sphere tracing finds each ray's hit ``t*`` without a tape (12 steps, a Python
    loop over tensors); inside the tape the hit point is made differentiable by
    ``t = t* - (sdf(x(t*)) - sg(sdf(x(t*)))) / sg(n . d)`` with the normal ``n`` from an inner tape
    on the point; the shading ``max(n . l, 0)`` (normals by a second tape inside the outer one)
    is fitted to a target; the gradients w.r.t. the radius, the MLP and the hit depths."""
    rs = np.random.RandomState(2191)
    radius = tf.Variable(0.8)
    ws = _dense_vars(tf, (3, 6, 1), 2192, scale=0.1)
    origins = np.tile([[0.0, 0.0, -3.0]], (4, 1)).astype(np.float32)
    dirs = np.concatenate([rs.uniform(-0.15, 0.15, (4, 2)), np.ones((4, 1))], 1).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    light = np.array([0.3, 0.5, -0.8], np.float32) / np.linalg.norm([0.3, 0.5, -0.8])
    target = rs.uniform(0.3, 0.9, 4).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def sdf(x):
        return tf.norm(x, axis=-1) - radius + tf.squeeze(_mlp(tf, ws, x), -1)

    def normal(x):
        with tf.GradientTape() as t:
            t.watch(x)
            d = sdf(x)
        return tf.math.l2_normalize(t.gradient(d, x), axis=-1)

    def trace():
        t = tf.zeros([4])
        for _ in range(12):
            t = t + sdf(origins + dirs * t[:, None])
        return t

    out = []
    for _ in range(3):
        t_star = tf.stop_gradient(trace())
        with tf.GradientTape() as tape:
            x_star = origins + dirs * t_star[:, None]
            d_star = sdf(x_star)
            n_star = tf.stop_gradient(normal(x_star))
            t = t_star - (d_star - tf.stop_gradient(d_star)) / tf.reduce_sum(n_star * dirs, -1)
            x = origins + dirs * t[:, None]
            shade = tf.nn.relu(tf.reduce_sum(normal(x) * light, -1))
            loss = tf.reduce_mean(tf.square(shade - target)) + tf.reduce_mean(tf.square(t - 2.3))
        g = tape.gradient(loss, [radius] + ws)
        opt.apply_gradients(zip(g, [radius] + ws))
        out.append((loss, g, t_star, shade, d_star))
    return out, radius, ws


@parity(rtol=2e-4, atol=2e-5)
def test_keras_io_nerf_model_subclass_train_step_under_fit_on_a_dataset(tf):
    """keras.io's NeRF training wiring: a functional ``tf.keras`` model (Dense ReLU layers with the
    encoded input concatenated back in: ``layers.concatenate``), wrapped by a ``keras.Model``
    subclass whose ``compile(optimizer, loss_fn)`` override keeps its own loss and PSNR ``Mean``
    trackers (listed by the ``metrics`` property) and whose ``train_step`` renders under a tape;
    ``fit`` over a ``tf.data`` dataset of (image, (rays, t_vals)) for two epochs, then the
    rendered image of the trained model (``predict`` on the rays)."""
    h, w, n = 2, 3, 4
    rs = np.random.RandomState(2201)
    images = rs.uniform(0, 1, (2, h, w, 3)).astype(np.float32)
    flats, tvals = [], []
    for k in range(2):
        origins, dirs = _get_rays(tf, h, w, 1.2, _pose(k))
        t_vals = tf.linspace(2.0, 5.0, n) + rs.uniform(0, 0.5, (h, w, n)).astype(np.float32)
        pts = origins[..., None, :] + dirs[..., None, :] * t_vals[..., None]
        flats.append(_encode_position(tf, tf.reshape(pts, [-1, 3]), 2).numpy())
        tvals.append(t_vals.numpy())
    flats, tvals = np.stack(flats), np.stack(tvals)
    layers = tf.keras.layers
    inputs = tf.keras.Input(shape=(h * w * n, 15))
    x = layers.Dense(8, activation="relu")(inputs)
    x = layers.concatenate([x, inputs], axis=-1)
    outputs = layers.Dense(4)(x)
    nerf_model = tf.keras.Model(inputs=inputs, outputs=outputs)
    keras_init(nerf_model, seed=2202)

    def render_rgb_depth(model, rays_flat, t_vals):
        raw = tf.reshape(model(rays_flat), (-1, h, w, n, 4))
        rgb, depth, _ = _volume_render(tf, raw, t_vals, [tf.shape(raw)[0], h, w])
        return rgb, depth

    class NeRF(tf.keras.Model):
        def __init__(self, nerf_model):
            super().__init__()
            self.nerf_model = nerf_model

        def compile(self, optimizer, loss_fn):
            super().compile()
            self.optimizer = optimizer
            self.loss_fn = loss_fn
            self.loss_tracker = tf.keras.metrics.Mean(name="loss")
            self.psnr_metric = tf.keras.metrics.Mean(name="psnr")

        def train_step(self, inputs):
            images, (rays_flat, t_vals) = inputs
            with tf.GradientTape() as tape:
                rgb, _ = render_rgb_depth(self.nerf_model, rays_flat, t_vals)
                loss = self.loss_fn(images, rgb)
            trainable_variables = self.nerf_model.trainable_variables
            gradients = tape.gradient(loss, trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, trainable_variables))
            self.loss_tracker.update_state(loss)
            self.psnr_metric.update_state(tf.image.psnr(images, rgb, max_val=1.0))
            return {"loss": self.loss_tracker.result(), "psnr": self.psnr_metric.result()}

        @property
        def metrics(self):
            return [self.loss_tracker, self.psnr_metric]

    model = NeRF(nerf_model)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss_fn=tf.keras.losses.MeanSquaredError())
    ds = tf.data.Dataset.from_tensor_slices((images, (flats, tvals))).batch(1)
    hist = model.fit(ds, epochs=2, verbose=0)
    rgb, depth = render_rgb_depth(nerf_model, flats, tvals)
    return ({k: [round(float(v), 5) for v in vs] for k, vs in sorted(hist.history.items())},
            [v.numpy() for v in nerf_model.weights], rgb, depth)


@xfail_on_tapejax("a GradientTape inside a Keras layer's ``call``: a top-level Keras call is one tape "
                  "op whose ``call`` runs on JAX arrays inside Keras's StatelessScope, where no tapejax "
                  "tape records (tapejax/keras/README.md, 'a top-level call is one op'): ``tape.watch`` "
                  "of the input raises ValueError (NotATensorError after ``tf.convert_to_tensor``); "
                  "TF's Keras runs ``call`` on Tensors a tape follows")
@parity(rtol=2e-4, atol=2e-5)
def test_hnn_keras_model_with_a_tape_inside_call_trained_by_fit(tf):
    """An HNN as the TF-era repositories package it: a ``tf.keras.Model`` subclass whose ``call``
    opens a ``GradientTape`` on its input, evaluates the energy MLP (``Dense`` layers) and returns
    the symplectic field ``(dH/dp, -dH/dq)``; ``compile(Adam, "mse")`` and ``fit`` on (state,
    derivative) pairs for three epochs of two batches, then ``evaluate`` and the learned field and
    energy on held-out states (second derivatives through Keras' own train step)."""
    rs = np.random.RandomState(2211)
    x = rs.randn(8, 2).astype(np.float32)
    dxdt = np.stack([x[:, 1], -x[:, 0]], 1).astype(np.float32)

    class HNN(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.h1 = tf.keras.layers.Dense(8, activation="tanh")
            self.out = tf.keras.layers.Dense(1)

        def energy(self, x):
            return self.out(self.h1(x))

        def call(self, x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                energy = self.energy(x)
            dh = tape.gradient(energy, x)
            return tf.concat([dh[:, 1:], -dh[:, :1]], axis=1)

    model = HNN()
    model.build((None, 2))
    keras_init(model, seed=2212)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.02), loss="mse")
    hist = model.fit(x, dxdt, batch_size=4, epochs=3, shuffle=False, verbose=0)
    test = rs.randn(3, 2).astype(np.float32)
    return ([round(v, 5) for v in hist.history["loss"]], round(float(model.evaluate(x, dxdt, verbose=0)), 5),
            model(tf.constant(test)), model.energy(test), [v.numpy() for v in model.weights])


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_burgers_pinn_with_forward_over_reverse_and_forward_over_forward_derivatives(tf):
    """A viscous Burgers PINN ``u_t + u u_x - (0.01/pi) u_xx = 0``: ``u_x`` and ``u_t`` from an inner
    tape, ``u_xx`` two ways, forward-over-reverse (a ``ForwardAccumulator`` with tangent ``e_x``
    around the inner tape's gradient) and forward-over-forward (nested accumulators); the residual
    plus an initial-condition loss ``u(x, 0) = -sin(pi x)`` trained by Adam through the
    accumulators; the two ``u_xx`` agree.  The accumulators are written inline in the step, alive
    until ``tape.gradient``: moved into a helper function, TF 2.21 gives a wrong parameter gradient
    (``test_forward_over_reverse_in_a_helper_whose_accumulator_is_collected`` below)."""
    rs = np.random.RandomState(2301)
    xt = tf.constant(np.stack([rs.uniform(-1, 1, 6), rs.uniform(0, 1, 6)], 1).astype(np.float32))
    x0 = np.stack([np.linspace(-1, 1, 5), np.zeros(5)], 1).astype(np.float32)
    u0 = -np.sin(np.pi * x0[:, :1]).astype(np.float32)
    ws = _dense_vars(tf, (2, 8, 1), 2302)
    opt = tf.keras.optimizers.legacy.Adam(0.01)
    ex = tf.constant(np.tile([[1.0, 0.0]], (6, 1)).astype(np.float32))

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            with tf.autodiff.ForwardAccumulator(xt, ex) as acc:
                with tf.GradientTape() as t:
                    t.watch(xt)
                    u = _mlp(tf, ws, xt)
                du = t.gradient(u, xt)
            u_x, u_t, u_xx = du[:, :1], du[:, 1:], acc.jvp(du)[:, :1]
            with tf.autodiff.ForwardAccumulator(xt, ex) as outer:
                with tf.autodiff.ForwardAccumulator(xt, ex) as inner:
                    u2 = _mlp(tf, ws, xt)
                u_x_fwd = inner.jvp(u2)
            u_xx_fwd = outer.jvp(u_x_fwd)
            residual = u_t + u * u_x - 0.01 / np.pi * u_xx
            loss = tf.reduce_mean(tf.square(residual)) + tf.reduce_mean(tf.square(_mlp(tf, ws, x0) - u0))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        out.append((loss, g, u_xx, u_xx_fwd, u_x - u_x_fwd))
    return out, ws


@parity(rtol=2e-4, atol=2e-5)
def test_keras_pinn_train_step_with_nested_tapes_on_the_inputs_under_fit(tf):
    """The TF2 PINN tutorials' Keras wiring for a 1-D Poisson problem ``-u'' = pi^2 sin(pi x)``,
    ``u(0) = u(1) = 0``: a ``tf.keras.Sequential`` of tanh ``Dense`` layers inside a ``keras.Model``
    subclass whose ``train_step`` takes ``u_x`` and ``u_xx`` by two nested tapes watching the
    collocation points (the Keras call is inside both), adds the boundary loss and applies Adam;
    ``fit`` on collocation batches for three epochs, then the residual and ``u`` on a test grid."""
    x_col = np.linspace(0.05, 0.95, 8, dtype=np.float32)[:, None]
    x_bc = np.array([[0.0], [1.0]], np.float32)
    net = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(8, activation="tanh"),
                               tf.keras.layers.Dense(1)])
    net.build((None, 1))
    keras_init(net, seed=2321)

    def residual(x):
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                u = net(x)
            u_x = t1.gradient(u, x)
        u_xx = t2.gradient(u_x, x)
        return -u_xx - np.pi ** 2 * tf.sin(np.pi * x), u_x

    class PINN(tf.keras.Model):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def call(self, x):
            return self.net(x)

        def train_step(self, data):
            x = data
            with tf.GradientTape() as tape:
                r, _ = residual(x)
                loss = tf.reduce_mean(tf.square(r)) + 10.0 * tf.reduce_mean(tf.square(self.net(x_bc)))
            grads = tape.gradient(loss, self.net.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.net.trainable_variables))
            return {"loss": loss}

    model = PINN(net)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
    hist = model.fit(x_col, epochs=3, batch_size=4, shuffle=False, verbose=0)
    x_test = tf.constant(np.linspace(0, 1, 5, dtype=np.float32)[:, None])
    r, u_x = residual(x_test)
    return [round(v, 4) for v in hist.history["loss"]], r, u_x, net(x_test), [v.numpy() for v in net.weights]


@parity(modes=True, **LOOSE)
def test_rnode_jacobian_frobenius_and_kinetic_regularisers_by_three_estimators(tf):
    """RNODE (Finlay et al.): a neural ODE's kinetic energy ``|f|^2`` and Jacobian Frobenius norm
    ``|df/dz|_F^2`` regularisers, the latter exactly by ``batch_jacobian`` and by Hutchinson with
    ``eps^T J`` from an inner tape's vjp and ``J eps`` from a ``ForwardAccumulator``, summed over two
    Euler steps; each regulariser's parameter gradient is logged with its None-ness, also for the
    first step's terms alone (the output bias is added after the state's last use: no first-step
    Jacobian reads it, so TF gives None there; the second step's reads it through the state) and
    SGD trains the task loss plus both regularisers."""
    ws = _dense_vars(tf, (2, 6, 2), 2331)
    rs = np.random.RandomState(2332)
    z0 = tf.constant(rs.randn(5, 2).astype(np.float32))
    target = rs.randn(5, 2).astype(np.float32)
    eps = rs.choice([-1.0, 1.0], size=(2, 5, 2)).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    out = []
    for k in range(2):
        with tf.GradientTape(persistent=True) as tape:
            z, kinetic, frob, frob_vjp, frob_jvp, firsts = z0, 0.0, 0.0, 0.0, 0.0, []
            for _ in range(2):
                with tf.GradientTape(persistent=True) as inner:
                    inner.watch(z)
                    with tf.autodiff.ForwardAccumulator(z, eps[k]) as acc:
                        f = _mlp(tf, ws, z)
                    jv = acc.jvp(f)
                    proj = tf.reduce_sum(f * eps[k])
                jac = inner.batch_jacobian(f, z)
                vj = inner.gradient(proj, z)
                kinetic += tf.reduce_mean(tf.reduce_sum(f ** 2, 1)) / 2
                frob += tf.reduce_mean(tf.reduce_sum(jac ** 2, [1, 2])) / 2
                frob_vjp += tf.reduce_mean(tf.reduce_sum(vj ** 2, 1)) / 2
                frob_jvp += tf.reduce_mean(tf.reduce_sum(jv ** 2, 1)) / 2
                firsts = firsts or [frob, frob_vjp, frob_jvp]
                z = z + 0.5 * f
            task = tf.reduce_mean(tf.square(z - target))
            loss = task + 0.1 * kinetic + 0.1 * frob_vjp
        regs = [tape.gradient(r, ws) for r in [frob, frob_vjp, frob_jvp] + firsts]
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        out.append((task, kinetic, frob, frob_vjp, frob_jvp, g, regs, [[x is None for x in r] for r in regs]))
    return out, ws


@parity(rtol=2e-4, atol=2e-5)
def test_keras_dynamics_jacobian_regulariser_and_forward_mode_none_for_the_output_bias(tf):
    """The same regularisers with the dynamics a ``tf.keras.Sequential`` (tanh ``Dense`` layers): the
    exact Frobenius norm by ``batch_jacobian`` and the forward-mode estimate through the Keras call,
    each regulariser's gradient over ``model.trainable_variables`` (``None`` for the last
    ``Dense``'s bias, which no Jacobian reads) and Adam on the sum, in a tape loop."""
    model = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh"), tf.keras.layers.Dense(2)])
    model.build((None, 2))
    keras_init(model, seed=2341)
    rs = np.random.RandomState(2342)
    z = tf.constant(rs.randn(4, 2).astype(np.float32))
    eps = tf.constant(rs.choice([-1.0, 1.0], size=(4, 2)).astype(np.float32))
    opt = tf.keras.optimizers.Adam(0.02)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            with tf.GradientTape() as inner:
                inner.watch(z)
                with tf.autodiff.ForwardAccumulator(z, eps) as acc:
                    f = model(z)
                jv = acc.jvp(f)
            jac = inner.batch_jacobian(f, z)
            frob = tf.reduce_mean(tf.reduce_sum(jac ** 2, [1, 2]))
            frob_jvp = tf.reduce_mean(tf.reduce_sum(jv ** 2, 1))
            loss = tf.reduce_mean(tf.square(z + f)) + 0.1 * frob
        g_frob, g_jvp = tape.gradient(frob, model.trainable_variables), tape.gradient(frob_jvp, model.trainable_variables)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((loss, frob, frob_jvp, g, g_frob, g_jvp))
    return out, [v.numpy() for v in model.weights]


_HELPER_GRAD = [[-0.014638, 0.012361, -0.058291, 0.059486, 0.014207, 0.009591, 0.04652, -0.009094],
                [-0.199243, 0.156147, -0.694121, -0.296282, -0.115708, 0.051173, 0.336904, -0.198894]]


@parity(modes=True, tf_skip="TF 2.21 gives this program a wrong gradient: once the helper returns and its "
                "ForwardAccumulator is collected, the outer tape's gradient through the accumulator's "
                "recorded ops changes (w1's first entry -0.028846 instead of -0.014638; the same program "
                "with the accumulator kept alive, in float32 and float64, and central differences in "
                "float64 give the expected values)",
        expected=(A(0.1572029), A(_HELPER_GRAD)), **LOOSE)
def test_forward_over_reverse_in_a_helper_whose_accumulator_is_collected(tf):
    """The Burgers residual's derivatives computed in a helper function, as a PINN repository
    factors them: ``u_xx`` by a ``ForwardAccumulator`` around an inner tape, returned with ``u``
    and ``du``; the parameter gradient of the residual loss by the outer tape after the helper
    (and its accumulator) is gone.  The expected values are the true gradient (see ``tf_skip``)."""
    rs = np.random.RandomState(2301)
    xt = tf.constant(np.stack([rs.uniform(-1, 1, 6), rs.uniform(0, 1, 6)], 1).astype(np.float32))
    ex = tf.constant(np.tile([[1.0, 0.0]], (6, 1)).astype(np.float32))
    ws = _dense_vars(tf, (2, 8, 1), 2302)

    def derivatives(pts):
        with tf.autodiff.ForwardAccumulator(pts, ex) as acc:
            with tf.GradientTape() as t:
                t.watch(pts)
                u = _mlp(tf, ws, pts)
            du = t.gradient(u, pts)
        return u, du, acc.jvp(du)[:, :1]

    with tf.GradientTape() as tape:
        u, du, u_xx = derivatives(xt)
        loss = tf.reduce_mean(tf.square(du[:, 1:] + u * du[:, :1] - 0.01 / np.pi * u_xx))
    return loss, tape.gradient(loss, ws[0])
