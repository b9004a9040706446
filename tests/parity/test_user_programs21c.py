"""Round twenty-one (c) of realistic user programs, first half: neural rendering and
energy-conserving dynamics as keras.io's NeRF example and the TF-era research repositories write
them (raw ``tf`` ops and ``tf.keras`` layers, custom ``GradientTape`` loops, some steps under
``tf.function``), run under real TensorFlow 2.21 and under tapejax with deferred execution and
predicted updates on and off (``modes=True``).

Rendering: keras.io's NeRF (positional encoding by ``sin``/``cos`` of powers of two, rays from
``tf.meshgrid``, volume rendering by ``tf.math.cumprod(1 - alpha + 1e-10, exclusive=True)``, depth
maps, PSNR), the original NeRF's hierarchical sampling (a CDF by ``cumsum``, ``tf.searchsorted``
with ``side="right"``, ``tf.gather(..., batch_dims=1)``, ``stop_gradient`` on the fine samples),
SIREN with its sine initialisation fitted to values and image gradients (a Laplacian by nested
tapes), a Fourier-feature network of ``tf.keras`` layers and a soft rasteriser written by hand.
Dynamics: Hamiltonian neural networks (the time derivative from ``tape.gradient`` of H inside the
loss), Lagrangian networks (``batch_jacobian`` Hessians, ``pinv`` and ``solve``) and symplectic
leapfrog integrators unrolled in Python and in ``tf.while_loop``.  Neural ODEs and implicit layers
are in ``test_user_programs21c2.py``; a voxel-grid field, sphere tracing and the Keras-packaged
NeRF and HNN in ``test_user_programs21c3.py``.  Every number trained on is drawn with NumPy (tapejax's
stateless random stream is its own, by design: the programs that draw one compare its properties).
"""
import numpy as np

from .harness import init_array, keras_init, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _dense_vars(tf, dims, seed, scale=0.5):
    """Weights and zero biases of an MLP with layer sizes ``dims``."""
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        out += [tf.Variable(init_array((a, b), seed + i, scale)), tf.Variable(np.zeros(b, np.float32))]
    return out


def _mlp(tf, ws, x, act=None):
    """An MLP of weight pairs ``ws``; ``act`` (default tanh) between layers, linear output."""
    act = act or tf.tanh
    for i in range(0, len(ws) - 2, 2):
        x = act(tf.matmul(x, ws[i]) + ws[i + 1])
    return tf.matmul(x, ws[-2]) + ws[-1]


# ---------------------------------------------------------------------------
# Neural rendering
# ---------------------------------------------------------------------------

def _encode_position(tf, x, dims=3):
    positions = [x]
    for i in range(dims):
        for fn in (tf.sin, tf.cos):
            positions.append(fn(2.0 ** i * x))
    return tf.concat(positions, axis=-1)


def _get_rays(tf, height, width, focal, pose):
    i, j = tf.meshgrid(tf.range(width, dtype=tf.float32), tf.range(height, dtype=tf.float32), indexing="xy")
    directions = tf.stack([(i - width * 0.5) / focal, -(j - height * 0.5) / focal, -tf.ones_like(i)], axis=-1)
    ray_directions = tf.reduce_sum(directions[..., None, :] * pose[:3, :3], axis=-1)
    ray_origins = tf.broadcast_to(pose[:3, -1], tf.shape(ray_directions))
    return ray_origins, ray_directions


def _pose(seed):
    """A camera-to-world matrix: a rotation about y and a translation back along z."""
    a = 0.3 + 0.1 * seed
    rot = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    return np.concatenate([np.concatenate([rot, [[0.1], [-0.2], [2.5]]], 1), [[0, 0, 0, 1]]]).astype(np.float32)


def _volume_render(tf, raw, t_vals, batch_shape):
    """keras.io's ``render_rgb_depth`` on raw network outputs ``[..., samples, 4]``."""
    rgb = tf.sigmoid(raw[..., :-1])
    sigma_a = tf.nn.relu(raw[..., -1])
    delta = t_vals[..., 1:] - t_vals[..., :-1]
    delta = tf.concat([delta, tf.broadcast_to([1e10], batch_shape + [1])], axis=-1)
    alpha = 1.0 - tf.exp(-sigma_a * delta)
    transmittance = tf.math.cumprod(1.0 - alpha + 1e-10, axis=-1, exclusive=True)
    weights = alpha * transmittance
    rgb = tf.reduce_sum(weights[..., None] * rgb, axis=-2)
    depth_map = tf.reduce_sum(weights * t_vals, axis=-1)
    return rgb, depth_map, weights


@parity(modes=True, **LOOSE)
def test_keras_io_nerf_rays_encoding_volume_rendering_and_psnr_trained_by_adam(tf):
    """keras.io's NeRF at 3x4 pixels and 5 samples a ray: rays by ``tf.meshgrid`` and the pose,
    stratified ``t`` values (``linspace`` plus NumPy jitter, eagerly; the seeded
    ``stateless_uniform`` jitter's properties checked), the positional encoding, a raw-weight
    MLP with a skip concat, keras.io's volume rendering (the ``1e10`` last delta, exclusive
    ``cumprod``), photometric MSE trained by Adam in a compiled step; PSNR by ``tf.image.psnr``
    and by ``-10 log10(mse)``; the depth maps and accumulated opacity are returned."""
    h, w, n, near, far = 3, 4, 5, 2.0, 6.0
    rs = np.random.RandomState(2101)
    images = rs.uniform(0, 1, (2, h, w, 3)).astype(np.float32)
    poses = np.stack([_pose(0), _pose(1)])
    jitter = rs.uniform(0, 1, (2, h, w, n)).astype(np.float32)
    d = 3 + 3 * 2 * 3
    ws = _dense_vars(tf, (d, 8, 8), 2102) + _dense_vars(tf, (8 + d, 4), 2104)
    opt = tf.keras.optimizers.legacy.Adam(0.01)

    def model(x):
        hidden = tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3])
        return tf.matmul(tf.concat([hidden, x], axis=-1), ws[4]) + ws[5]

    def rays_and_t(pose, jit):
        origins, dirs = _get_rays(tf, h, w, 1.5, pose)
        t_vals = tf.linspace(near, far, n) + jit * (far - near) / n
        points = origins[..., None, :] + dirs[..., None, :] * t_vals[..., None]
        return _encode_position(tf, tf.reshape(points, [-1, 3])), t_vals

    @tf.function
    def train_step(flat, t_vals, image):
        with tf.GradientTape() as tape:
            raw = tf.reshape(model(flat), [h, w, n, 4])
            rgb, depth, weights = _volume_render(tf, raw, t_vals, [h, w])
            loss = tf.reduce_mean(tf.square(image - rgb))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, tf.image.psnr(image, rgb, max_val=1.0), depth, tf.reduce_sum(weights, -1)

    out = []
    for k in range(4):
        flat, t_vals = rays_and_t(poses[k % 2], jitter[k % 2])
        loss, g, psnr, depth, acc = train_step(flat, t_vals, images[k % 2])
        out.append((loss, g, psnr, -10.0 * tf.math.log(loss) / tf.math.log(10.0), depth, acc, t_vals[0, 0]))
    u1 = tf.random.stateless_uniform([h, w, n], seed=[3, 7])
    u2 = tf.random.stateless_uniform([h, w, n], seed=[3, 7])
    props = (bool(tf.reduce_all(u1 == u2)), bool(tf.reduce_all((u1 >= 0) & (u1 < 1))), u1.dtype.name)
    return out, ws, props


def _sample_pdf(tf, bins, weights, u):
    """The original NeRF's ``sample_pdf``: inverse-transform sampling of piecewise-constant weights."""
    weights = weights + 1e-5
    pdf = weights / tf.reduce_sum(weights, -1, keepdims=True)
    cdf = tf.cumsum(pdf, -1)
    cdf = tf.concat([tf.zeros_like(cdf[..., :1]), cdf], -1)
    inds = tf.searchsorted(cdf, u, side="right")
    below = tf.maximum(0, inds - 1)
    above = tf.minimum(cdf.shape[-1] - 1, inds)
    inds_g = tf.stack([below, above], -1)
    cdf_g = tf.gather(cdf, inds_g, axis=-1, batch_dims=1)
    bins_g = tf.gather(bins, inds_g, axis=-1, batch_dims=1)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = tf.where(denom < 1e-5, tf.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0]), inds


@parity(modes=True, **LOOSE)
def test_nerf_hierarchical_sampling_by_searchsorted_and_batched_gather(tf):
    """Coarse-to-fine NeRF on 6 rays: the coarse network's weights define a piecewise-constant
    PDF over the mid-points of its samples; fine samples by inverse transform (``cumsum`` CDF,
    ``searchsorted(side="right")`` of sorted NumPy uniforms including exact bin edges 0 and 1,
    ``gather(batch_dims=1)``, a ``where`` on tiny denominators) under ``stop_gradient``, merged by
    ``tf.sort``; both networks trained on coarse + fine photometric losses.  The gradient of
    the fine samples themselves w.r.t. the coarse weights (without the stop) is returned too."""
    rs = np.random.RandomState(2111)
    r, nc, nf = 6, 4, 5
    origins = rs.randn(r, 3).astype(np.float32) * 0.1
    dirs = rs.randn(r, 3).astype(np.float32)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    target = rs.uniform(0, 1, (r, 3)).astype(np.float32)
    z_coarse = np.tile(np.linspace(1.0, 3.0, nc, dtype=np.float32), (r, 1)) + rs.uniform(0, 0.3, (r, nc)).astype(
        np.float32)
    u = np.sort(rs.uniform(0, 1, (r, nf)).astype(np.float32), axis=-1)
    u[0, 0], u[1, -1] = 0.0, 1.0
    coarse, fine = _dense_vars(tf, (3, 6, 4), 2112), _dense_vars(tf, (3, 6, 4), 2114)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def render(ws, z):
        pts = origins[:, None, :] + dirs[:, None, :] * z[..., None]
        raw = tf.reshape(_mlp(tf, ws, tf.reshape(pts, [-1, 3]), tf.nn.relu), [r, -1, 4])
        return _volume_render(tf, raw, z, [r])

    def step(compiled_sort):
        with tf.GradientTape(persistent=True) as tape:
            rgb_c, _, w_c = render(coarse, z_coarse)
            mids = 0.5 * (z_coarse[..., 1:] + z_coarse[..., :-1])
            samples, inds = _sample_pdf(tf, mids, w_c[..., 1:-1], u)
            z_fine = tf.sort(tf.concat([z_coarse, tf.stop_gradient(samples)], -1), -1)
            rgb_f, depth_f, _ = render(fine, z_fine)
            loss = tf.reduce_mean(tf.square(rgb_c - target)) + tf.reduce_mean(tf.square(rgb_f - target))
            s_total = tf.reduce_sum(samples)
        g = tape.gradient(loss, coarse + fine)
        g_samples = tape.gradient(s_total, coarse)
        opt.apply_gradients(zip(g, coarse + fine))
        return loss, g, g_samples, samples, inds, z_fine, depth_f

    return [step(k) for k in range(3)], coarse, fine


@parity(modes=True, rtol=3e-4, atol=3e-4)
def test_siren_sine_init_fitted_to_values_and_gradients_with_a_laplacian(tf):
    """SIREN (Sitzmann et al.): sine layers ``sin(omega_0 (x W + b))`` with ``omega_0 = 30`` and the
    paper's initialisation (first layer ``U(-1/n, 1/n)``, hidden ``U(+-sqrt(6/n)/omega_0)``, NumPy
    draws), fitted on a 4x4 coordinate grid (``tf.linspace`` + ``tf.meshgrid``) to an image's
    values and its spatial gradients (an inner tape on the coordinates inside the loss); the
    Laplacian by a second ``batch_jacobian``'s trace is logged.  Adam, eager then compiled."""
    rs = np.random.RandomState(2121)
    lin = np.linspace(-1.0, 1.0, 4).astype(np.float32)
    coords_np = np.stack(np.meshgrid(lin, lin, indexing="ij"), -1).reshape(-1, 2)
    img = np.sin(2 * coords_np[:, :1]) * np.cos(3 * coords_np[:, 1:])
    img_grad = np.concatenate([2 * np.cos(2 * coords_np[:, :1]) * np.cos(3 * coords_np[:, 1:]),
                               -3 * np.sin(2 * coords_np[:, :1]) * np.sin(3 * coords_np[:, 1:])], 1)
    img, img_grad = img.astype(np.float32), img_grad.astype(np.float32)
    w0, dims = 30.0, (2, 8, 8, 1)
    ws = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        bound = 1.0 / a if i == 0 else np.sqrt(6.0 / a) / w0
        ws += [tf.Variable(rs.uniform(-bound, bound, (a, b)).astype(np.float32)),
               tf.Variable(rs.uniform(-1 / np.sqrt(a), 1 / np.sqrt(a), b).astype(np.float32))]
    opt = tf.keras.optimizers.legacy.Adam(1e-3)

    def siren(x):
        for i in range(0, len(ws) - 2, 2):
            x = tf.sin(w0 * (tf.matmul(x, ws[i]) + ws[i + 1]))
        return tf.matmul(x, ws[-2]) + ws[-1]

    def step(x):
        with tf.GradientTape() as tape:
            with tf.GradientTape(persistent=True) as t2:
                t2.watch(x)
                with tf.GradientTape() as t1:
                    t1.watch(x)
                    y = siren(x)
                gy = t1.gradient(y, x)
            lap = tf.linalg.trace(t2.batch_jacobian(gy, x))
            loss = tf.reduce_mean(tf.square(y - img)) + 0.1 * tf.reduce_mean(tf.square(gy - img_grad))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, lap

    compiled = tf.function(step)
    coords = tf.constant(coords_np)
    return [(step if k < 2 else compiled)(coords) for k in range(4)], ws


@parity(rtol=2e-4, atol=2e-5)
def test_fourier_feature_network_of_keras_dense_layers(tf):
    """Fourier features (Tancik et al.): ``gamma(v) = [cos(2 pi v B), sin(2 pi v B)]`` with a fixed
    Gaussian ``B`` (scale 3, NumPy), a ``tf.keras.Sequential`` of ReLU ``Dense`` layers on top,
    fitted to a 1-D signal by Adam in a compiled tape step; the same network without the mapping
    trains beside it; the gradient of the output w.r.t. the input coordinate is logged."""
    rs = np.random.RandomState(2131)
    x = np.linspace(0, 1, 8, dtype=np.float32)[:, None]
    y = np.sin(12 * x) + 0.5 * np.sign(np.sin(5 * x)).astype(np.float32)
    b = (3.0 * rs.randn(1, 4)).astype(np.float32)

    def make(d):
        m = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(1)])
        m.build((None, d))
        keras_init(m, seed=int(rs.randint(1000)))
        return m

    ff, plain = make(8), make(1)
    opt_ff, opt_plain = tf.keras.optimizers.Adam(0.02), tf.keras.optimizers.Adam(0.02)

    def gamma(v):
        proj = 2.0 * np.pi * tf.matmul(v, b)
        return tf.concat([tf.cos(proj), tf.sin(proj)], -1)

    @tf.function
    def step(v):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(v)
            p_ff, p_plain = ff(gamma(v)), plain(v)
            l_ff, l_plain = tf.reduce_mean((p_ff - y) ** 2), tf.reduce_mean((p_plain - y) ** 2)
        dx = tape.gradient(p_ff, v)
        g_ff, g_plain = tape.gradient(l_ff, ff.trainable_variables), tape.gradient(l_plain, plain.trainable_variables)
        opt_ff.apply_gradients(zip(g_ff, ff.trainable_variables))
        opt_plain.apply_gradients(zip(g_plain, plain.trainable_variables))
        return l_ff, l_plain, dx, g_ff

    out = [step(tf.constant(x)) for _ in range(4)]
    return out, [v.numpy() for v in ff.weights], [v.numpy() for v in plain.weights]


@parity(modes=True, **LOOSE)
def test_soft_rasteriser_of_two_triangles_with_depth_aggregation(tf):
    """A SoftRas-style differentiable rasteriser by hand: per-pixel signed edge distances of two
    triangles (Variable vertices), coverage ``prod sigmoid(d / sigma)``, soft z-buffer weights
    ``D exp(z / gamma)`` normalised with a background term, the rendered colours and silhouette
    fitted to a target image by SGD; vertex, depth and colour gradients are compared."""
    rs = np.random.RandomState(2141)
    lin = np.linspace(-1, 1, 5).astype(np.float32)
    pix = np.stack(np.meshgrid(lin, lin, indexing="xy"), -1).reshape(-1, 2)
    verts = tf.Variable(np.array([[[-0.8, -0.6], [0.7, -0.5], [0.0, 0.8]],
                                  [[-0.2, -0.9], [0.9, 0.3], [-0.6, 0.5]]], np.float32))
    depth = tf.Variable([0.3, 0.6])
    colors = tf.Variable(rs.uniform(0, 1, (2, 3)).astype(np.float32))
    target = rs.uniform(0, 1, (25, 3)).astype(np.float32)
    target_sil = (rs.uniform(0, 1, 25) > 0.4).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def render(sigma=0.05, gamma=0.1):
        v0, v1 = verts, tf.roll(verts, shift=-1, axis=1)
        e = v1 - v0
        rel = pix[None, :, None, :] - v0[:, None, :, :]
        cross = e[:, None, :, 0] * rel[..., 1] - e[:, None, :, 1] * rel[..., 0]
        dist = cross / tf.norm(e, axis=-1)[:, None, :]
        cover = tf.reduce_prod(tf.sigmoid(dist / sigma), axis=-1)
        logits = tf.concat([tf.transpose(cover * 0 + depth[:, None]) / gamma, tf.fill([25, 1], 0.01 / gamma)], 1)
        w = tf.transpose(cover) * tf.exp(logits[:, :2] - tf.reduce_max(logits, 1, keepdims=True))
        w_bg = tf.exp(logits[:, 2:] - tf.reduce_max(logits, 1, keepdims=True))
        w_all = tf.concat([w, w_bg], 1) / tf.reduce_sum(tf.concat([w, w_bg], 1), 1, keepdims=True)
        rgb = tf.matmul(w_all[:, :2], colors) + w_all[:, 2:] * 1.0
        sil = 1.0 - tf.reduce_prod(1.0 - tf.transpose(cover), axis=1)
        return rgb, sil

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            rgb, sil = render()
            loss = tf.reduce_mean(tf.square(rgb - target)) + tf.reduce_mean(tf.square(sil - target_sil))
        g = tape.gradient(loss, [verts, depth, colors])
        opt.apply_gradients(zip(g, [verts, depth, colors]))
        out.append((loss, g, sil))
    return out, verts, depth, colors


# ---------------------------------------------------------------------------
# Energy-conserving dynamics
# ---------------------------------------------------------------------------

def _spring_data(seed, n=6):
    """States ``(q, p)`` of a unit mass-spring and their true time derivatives ``(p, -q)``."""
    rs = np.random.RandomState(seed)
    x = rs.randn(n, 2).astype(np.float32)
    return x, np.stack([x[:, 1], -x[:, 0]], 1).astype(np.float32)


@parity(modes=True, **LOOSE)
def test_hamiltonian_nn_time_derivative_from_an_inner_tape_trained_eager_and_compiled(tf):
    """Greydanus et al.'s HNN: ``H = mlp(q, p)``; inside the loss an inner tape gives ``dH/dx``
    and the symplectic field ``(dH/dp, -dH/dq)``, fitted to a spring's true derivatives (so the
    parameter gradient is a second derivative).  The baseline network predicting the field
    directly trains beside it on one persistent tape; an unused 'dissipation' Variable gets
    ``None`` and zeros by ``unconnected_gradients``.  Adam, alternating eager and compiled; the
    learned energy's drift along the data is logged."""
    hnn, base = _dense_vars(tf, (2, 8, 1), 2151), _dense_vars(tf, (2, 8, 2), 2153)
    damp = tf.Variable(0.0)
    opt = tf.keras.optimizers.legacy.Adam(0.01)

    def field(x):
        with tf.GradientTape() as t:
            t.watch(x)
            energy = _mlp(tf, hnn, x)
        dh = t.gradient(energy, x)
        return tf.concat([dh[:, 1:], -dh[:, :1]], 1), energy

    def step(x, dxdt):
        with tf.GradientTape(persistent=True) as tape:
            pred, energy = field(x)
            loss = tf.reduce_mean(tf.square(pred - dxdt))
            loss_base = tf.reduce_mean(tf.square(_mlp(tf, base, x) - dxdt))
        g = tape.gradient(loss, hnn)
        g_base = tape.gradient(loss_base, base)
        none = tape.gradient(loss, damp)
        zero = tape.gradient(loss, [damp, base[0]], unconnected_gradients=tf.UnconnectedGradients.ZERO)
        del tape
        opt.apply_gradients(zip(g + g_base, hnn + base))
        return loss, loss_base, g, g_base, none is None, zero, tf.math.reduce_std(energy)

    compiled = tf.function(step)
    return [(compiled if k % 2 else step)(*map(tf.constant, _spring_data(2155 + k))) for k in range(4)], hnn, base


@parity(modes=True, rtol=3e-4, atol=3e-5)
def test_lagrangian_nn_accelerations_by_batch_jacobian_hessians_pinv_and_solve(tf):
    """Cranmer et al.'s LNN for a 2-DoF system: ``L(q, qdot)`` is a kinetic term plus a softplus
    MLP; nested persistent tapes give ``dL/dq``, ``dL/dqdot`` and, by ``batch_jacobian``, the
    Hessian ``d2L/dqdot2`` and the mixed ``d2L/dq dqdot``; accelerations
    ``qddot = H^-1 (dL/dq - M qdot)`` by ``tf.linalg.pinv`` and by ``tf.linalg.solve`` agree and
    are fitted to a coupled oscillator's by SGD (third-order derivatives of the MLP)."""
    rs = np.random.RandomState(2161)
    q = rs.randn(5, 2).astype(np.float32)
    qd = rs.randn(5, 2).astype(np.float32)
    stiff = np.array([[2.0, -0.5], [-0.5, 1.0]], np.float32)
    qdd_true = -q @ stiff
    ws = _dense_vars(tf, (4, 6, 1), 2162, scale=0.3)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    def accelerations(q, qd):
        with tf.GradientTape(persistent=True) as t2:
            t2.watch([q, qd])
            with tf.GradientTape(persistent=True) as t1:
                t1.watch([q, qd])
                state = tf.concat([q, qd], 1)
                lag = 0.5 * tf.reduce_sum(qd ** 2, 1) + tf.squeeze(_mlp(tf, ws, state, tf.nn.softplus), 1)
            dl_dq, dl_dqd = t1.gradient(lag, q), t1.gradient(lag, qd)
        hess = t2.batch_jacobian(dl_dqd, qd)
        mixed = t2.batch_jacobian(dl_dqd, q)
        rhs = dl_dq - tf.squeeze(tf.matmul(mixed, qd[..., None]), -1)
        by_pinv = tf.squeeze(tf.matmul(tf.linalg.pinv(hess), rhs[..., None]), -1)
        by_solve = tf.squeeze(tf.linalg.solve(hess, rhs[..., None]), -1)
        return by_pinv, by_solve, hess

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            by_pinv, by_solve, hess = accelerations(tf.constant(q), tf.constant(qd))
            loss = tf.reduce_mean(tf.square(by_solve - qdd_true))
            loss_pinv = tf.reduce_mean(tf.square(by_pinv - qdd_true))
        g, g_pinv = tape.gradient([loss, loss_pinv], [ws, ws])
        opt.apply_gradients(zip(g, ws))
        out.append((loss, loss_pinv, g, g_pinv, hess))
    return out, ws


def _leapfrog_step(tf, q, p, dt, grad_v):
    p = p - 0.5 * dt * grad_v(q)
    q = q + dt * p
    return q, p - 0.5 * dt * grad_v(q)


@parity(modes=True, **LOOSE)
def test_symplectic_leapfrog_unrolled_and_in_a_while_loop_fits_a_pendulum(tf):
    """A pendulum ``V(q) = k (1 - cos q)`` integrated by leapfrog for 8 steps, unrolled in Python
    and in ``tf.while_loop`` with a ``TensorArray`` trajectory (compiled, with ``maximum_iterations``:
    tapejax's documented limit on differentiating an unbounded compiled loop), the stiffness ``k`` and
    the initial momentum fitted to an observed trajectory through the integration by Adam;
    the energy drift of each trajectory (bounded for a symplectic scheme) is logged."""
    obs = np.array([0.9 * np.cos(0.8 * t) for t in np.arange(1, 9) * 0.25], np.float32)
    k = tf.Variable(0.5)
    p0 = tf.Variable(0.2)
    q0 = tf.constant(0.9)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def grad_v(q):
        return k * tf.sin(q)

    def energy(q, p):
        return 0.5 * p ** 2 + k * (1 - tf.cos(q))

    def unrolled():
        q, p, qs = q0, tf.identity(p0), []
        for _ in range(8):
            q, p = _leapfrog_step(tf, q, p, 0.25, grad_v)
            qs.append(q)
        return tf.stack(qs), energy(q, p) - energy(q0, p0)

    @tf.function
    def looped():
        def body(i, q, p, ta):
            q, p = _leapfrog_step(tf, q, p, 0.25, grad_v)
            return i + 1, q, p, ta.write(i, q)
        _, q, p, ta = tf.while_loop(lambda i, *_: i < 8, body,
                                    [tf.constant(0), q0, tf.identity(p0), tf.TensorArray(tf.float32, 8)],
                                    maximum_iterations=8)
        return ta.stack(), energy(q, p) - energy(q0, p0)

    @tf.function
    def looped_step():
        with tf.GradientTape() as tape:
            qs, drift = looped()
            loss = tf.reduce_mean(tf.square(qs - obs))
        g = tape.gradient(loss, [k, p0])
        return loss, g, drift

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            qs, drift = unrolled()
            loss = tf.reduce_mean(tf.square(qs - obs))
        g = tape.gradient(loss, [k, p0])
        loss_l, g_l, drift_l = looped_step()
        opt.apply_gradients(zip(g, [k, p0]))
        out.append((loss, g, drift, loss_l, g_l, drift_l, qs))
    return out, k, p0


@parity(modes=True, **LOOSE)
def test_hnn_rollout_by_leapfrog_with_the_learned_energy_gradient_inside_the_tape(tf):
    """Rollout training of an HNN: the learned ``H``'s gradients drive 4 leapfrog steps (an inner
    tape on the state at every half step, all inside the outer parameter tape), the rolled-out
    positions fitted to a spring's; the gradient w.r.t. the initial state is taken too (persistent
    outer tape, watched constant).  RMSprop, eager; the last step compiled."""
    hnn = _dense_vars(tf, (2, 6, 1), 2171)
    opt = tf.keras.optimizers.legacy.RMSprop(0.01)
    x0 = np.array([[1.0, 0.0], [0.0, 0.7], [-0.5, 0.5]], np.float32)
    ts = np.arange(1, 5) * 0.3
    target_q = np.stack([x0[:, 0] * np.cos(t) + x0[:, 1] * np.sin(t) for t in ts], 0).astype(np.float32)

    def dh(q, p):
        with tf.GradientTape() as t:
            t.watch([q, p])
            energy = tf.reduce_sum(_mlp(tf, hnn, tf.stack([q, p], 1)))
        return t.gradient(energy, [q, p])

    def step(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            q, p, qs = x[:, 0], x[:, 1], []
            for _ in range(4):
                p = p - 0.15 * dh(q, p)[0]
                q = q + 0.3 * dh(q, p)[1]
                p = p - 0.15 * dh(q, p)[0]
                qs.append(q)
            loss = tf.reduce_mean(tf.square(tf.stack(qs) - target_q))
        g = tape.gradient(loss, hnn)
        g_x = tape.gradient(loss, x)
        opt.apply_gradients(zip(g, hnn))
        return loss, g, g_x

    compiled = tf.function(step)
    x = tf.constant(x0)
    return [(compiled if k == 2 else step)(x) for k in range(3)], hnn

