"""Round twenty-three (c): normalizing flows written by hand in TF2 (raw tf ops, no TensorFlow
Probability), each run under real TensorFlow 2.21 and under tapejax (the variational programs are
in ``test_user_programs23c3.py``, the estimators and densities in ``23c2``).

keras.io's RealNVP as a ``tf.keras.Model`` with a custom ``train_step`` under ``fit`` and as a raw
compiled loop checked against its inverse, MAF with MADE's masks multiplied into kernel Variables
(and its sequential inverse), Glow's ActNorm with data-dependent initialisation and the
invertible 1x1 convolution by ``slogdet`` and by an LU parameterisation from ``tf.linalg.lu``,
planar and radial flows fitted by reverse KL, a rational-quadratic spline coupling (neural spline
flows: ``searchsorted`` bins), FFJORD's continuous flow by RK4 with Hutchinson's and the exact trace.  Noise is NumPy's, fed in (tapejax's random ops follow TF's seed
rules on JAX keys, so their values differ from TF's).  Losses per step, gradients with their
None-ness, log-determinants and the Variables after a few steps are compared.
"""
import numpy as np

from .harness import init_array, parity, raises

TOL = dict(rtol=2e-4, atol=2e-5)
LOOSE = dict(rtol=1e-3, atol=1e-4)
LOG2PI = float(np.log(2 * np.pi))


def _std_normal_logp(tf, z):
    return tf.reduce_sum(-0.5 * tf.square(z) - 0.5 * LOG2PI, axis=-1)


def _moons(n, seed):
    """A tiny two-moons-like float32 data set."""
    rs = np.random.RandomState(seed)
    t = rs.uniform(0, np.pi, n)
    side = rs.rand(n) > 0.5
    x = np.stack([np.cos(t) + side * 1.0, np.sin(t) * np.where(side, -1, 1) + side * 0.5], -1)
    return (x + 0.1 * rs.randn(n, 2)).astype(np.float32)


def _init_trainable(model, seed):
    """``keras_init`` on the trainable weights only (tf_keras lists a subclassed model's metric
    trackers among its ``weights``, Keras 3 does not)."""
    rs = np.random.RandomState(seed)
    for v in model.trainable_weights:
        v.assign(np.asarray(rs.randn(*v.shape) * 0.5, np.float32))


def _dense_vars(tf, dims, seed, scale=0.5):
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        out += [tf.Variable(init_array((a, b), seed + i, scale)), tf.Variable(np.zeros(b, np.float32))]
    return out


def _mlp(tf, vs, x, act=None, last=None):
    act = act or tf.nn.relu
    n = len(vs) // 2
    for i in range(n):
        x = tf.matmul(x, vs[2 * i]) + vs[2 * i + 1]
        x = act(x) if i < n - 1 else (last(x) if last else x)
    return x


# ---------------------------------------------------------------------------
# Normalizing flows
# ---------------------------------------------------------------------------

@parity(**LOOSE)
def test_keras_io_realnvp_model_with_custom_train_step_under_fit(tf):
    """keras.io's RealNVP at 2-D: coupling layers of Dense stacks (``tanh`` last for ``s``, linear
    for ``t``, L2-regularised kernels), alternating masks, ``__call__(x, training)`` running the
    couplings forwards (density direction) or backwards, ``log_loss`` by the standard normal's
    log-density plus the summed log-determinants, a custom ``train_step`` / ``test_step`` with a
    ``Mean`` tracker; fit for two epochs with validation.  Losses per epoch, a round trip's error,
    the log-determinant at two points and the weights."""
    x = _moons(16, 2301)
    reg = 0.01

    def coupling(d, h):
        inp = tf.keras.layers.Input(shape=(d,))
        t = tf.keras.layers.Dense(h, activation="relu", kernel_regularizer=tf.keras.regularizers.l2(reg))(inp)
        t = tf.keras.layers.Dense(d, activation="linear", kernel_regularizer=tf.keras.regularizers.l2(reg))(t)
        s = tf.keras.layers.Dense(h, activation="relu", kernel_regularizer=tf.keras.regularizers.l2(reg))(inp)
        s = tf.keras.layers.Dense(d, activation="tanh", kernel_regularizer=tf.keras.regularizers.l2(reg))(s)
        return tf.keras.Model(inputs=inp, outputs=[s, t])

    class RealNVP(tf.keras.Model):
        def __init__(self, num_coupling_layers):
            super().__init__()
            self.num_coupling_layers = num_coupling_layers
            self.masks = np.array([[0, 1], [1, 0]] * (num_coupling_layers // 2), dtype="float32")
            self.loss_tracker = tf.keras.metrics.Mean(name="loss")
            self.layers_list = [coupling(2, 6) for _ in range(num_coupling_layers)]

        @property
        def metrics(self):
            return [self.loss_tracker]

        def call(self, x, training=True):
            log_det_inv = 0
            direction = 1
            if training:
                direction = -1
            for i in range(self.num_coupling_layers)[::direction]:
                x_masked = x * self.masks[i]
                reversed_mask = 1 - self.masks[i]
                s, t = self.layers_list[i](x_masked)
                s *= reversed_mask
                t *= reversed_mask
                gate = (direction - 1) / 2
                x = (reversed_mask * (x * tf.exp(direction * s) + direction * t * tf.exp(gate * s))
                     + x_masked)
                log_det_inv += gate * tf.reduce_sum(s, [1])
            return x, log_det_inv

        def log_loss(self, x):
            y, logdet = self(x)
            return -tf.reduce_mean(_std_normal_logp(tf, y) + logdet)

        def train_step(self, data):
            with tf.GradientTape() as tape:
                loss = self.log_loss(data)
            g = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(g, self.trainable_variables))
            self.loss_tracker.update_state(loss)
            return {"loss": self.loss_tracker.result()}

        def test_step(self, data):
            self.loss_tracker.update_state(self.log_loss(data))
            return {"loss": self.loss_tracker.result()}

    model = RealNVP(num_coupling_layers=2)
    model(x[:2])
    _init_trainable(model, seed=2302)
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.01))
    h = model.fit(x, batch_size=8, epochs=2, verbose=0, validation_split=0.25, shuffle=False)
    z, logdet = model(x[:4])
    back, inv_logdet = model(z, training=False)
    hist = {k: [float(v) for v in h.history[k]] for k in ("loss", "val_loss")}
    return (hist, z, logdet, inv_logdet, float(np.max(np.abs(back.numpy() - x[:4]))) < 1e-4,
            model.trainable_weights, len(model.losses))


@parity(modes=True, **TOL)
def test_realnvp_raw_loop_tanh_bounded_scales_and_inverse_against_forward(tf):
    """RealNVP written with raw Variables: 3 affine couplings with alternating masks on 4-D data,
    scales bounded by ``scale * tanh(s)`` with a learned per-layer ``scale`` Variable, the
    log-det as the masked scales' sum; 4 Adam steps in a compiled step (NLL, gradients),
    then the inverse (eager) checked against the forward, and the forward log-det against
    ``slogdet`` of the ``batch_jacobian``."""
    x = np.random.RandomState(2303).randn(6, 4).astype(np.float32) * [1.0, 0.5, 2.0, 1.0]
    x = x.astype(np.float32)
    masks = [tf.constant(m, tf.float32) for m in ([1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0])]
    nets = [_dense_vars(tf, (4, 8, 8), 2310 + 3 * i, 0.3) for i in range(3)]
    scales = [tf.Variable(1.0, name=f"scale{i}") for i in range(3)]
    vs = [v for n in nets for v in n] + scales
    opt = tf.keras.optimizers.Adam(0.02)

    def st(i, xm):
        h = _mlp(tf, nets[i], xm, act=tf.nn.leaky_relu)
        s, t = tf.split(h, 2, axis=-1)
        return scales[i] * tf.tanh(s), t

    def forward(x):
        ld = tf.zeros(tf.shape(x)[:1])
        for i, m in enumerate(masks):
            s, t = st(i, x * m)
            s4 = s * (1 - m)
            t4 = t * (1 - m)
            x = x * m + (x * tf.exp(s4) + t4) * (1 - m)
            ld += tf.reduce_sum(s4, -1)
        return x, ld

    def inverse(z):
        for i in reversed(range(3)):
            m = masks[i]
            s, t = st(i, z * m)
            s4 = s * (1 - m)
            t4 = t * (1 - m)
            z = z * m + (z - t4) * tf.exp(-s4) * (1 - m)
        return z

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            z, ld = forward(x)
            nll = -tf.reduce_mean(_std_normal_logp(tf, z) + ld)
        g = tape.gradient(nll, vs)
        opt.apply_gradients(zip(g, vs))
        return nll, g

    hist = [step(tf.constant(x)) for _ in range(4)]
    z, ld = forward(tf.constant(x))
    xt = tf.constant(x[:3])
    with tf.GradientTape() as t:
        t.watch(xt)
        zj, _ = forward(xt)
    jac = t.batch_jacobian(zj, xt)
    sign, logabs = tf.linalg.slogdet(jac)
    return hist, z, ld, inverse(z), sign, logabs - ld[:3], [v.numpy() for v in scales]


@parity(modes=True, **TOL)
def test_maf_made_masked_kernels_density_and_sequential_inverse(tf):
    """MAF with one MADE per flow on 3-D data: MADE's degree-based masks (hidden degrees fixed)
    multiplied into kernel Variables, outputs ``mu`` and ``alpha`` (``tanh``-clipped),
    ``u = (x - mu) exp(-alpha)`` and the log-det ``-sum alpha``, a reversal permutation between
    two flows; the masked kernels' gradients are zero where the mask is (checked), 3 SGD steps
    compiled; sampling by the sequential D-step inverse checked against the forward."""
    d, h = 3, 6
    x = (np.random.RandomState(2320).randn(8, d) @ np.array([[1, 0.5, 0], [0, 1, 0.8], [0, 0, 1]])).astype(
        np.float32)
    deg_in = np.arange(1, d + 1)
    deg_h = np.array([1, 2, 1, 2, 1, 2])
    m1 = (deg_h[None, :] >= deg_in[:, None]).astype(np.float32)
    m2 = (deg_in[None, :] > deg_h[:, None]).astype(np.float32)
    made = [[tf.Variable(init_array((d, h), 2321 + 4 * k, 0.5)), tf.Variable(np.zeros(h, np.float32)),
             tf.Variable(init_array((h, 2 * d), 2322 + 4 * k, 0.3)), tf.Variable(np.zeros(2 * d, np.float32))]
            for k in range(2)]
    vs = made[0] + made[1]

    def made_out(k, x):
        w1, b1, w2, b2 = made[k]
        hid = tf.nn.relu(tf.matmul(x, w1 * m1) + b1)
        out = tf.matmul(hid, w2 * np.concatenate([m2, m2], 1)) + b2
        mu, a = tf.split(out, 2, -1)
        return mu, tf.tanh(a)

    def forward(x):
        ld = 0.0
        for k in range(2):
            mu, a = made_out(k, x)
            x = (x - mu) * tf.exp(-a)
            ld += -tf.reduce_sum(a, -1)
            x = tf.reverse(x, [-1])
        return x, ld

    def inverse(u):
        for k in reversed(range(2)):
            u = tf.reverse(u, [-1])
            x = tf.zeros_like(u)
            for _ in range(d):
                mu, a = made_out(k, x)
                x = u * tf.exp(a) + mu
            u = x
        return u

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            u, ld = forward(x)
            nll = -tf.reduce_mean(_std_normal_logp(tf, u) + ld)
        g = tape.gradient(nll, vs)
        for v, gi in zip(vs, g):
            v.assign_sub(0.05 * gi)
        return nll, g

    hist = [step(tf.constant(x)) for _ in range(3)]
    masked_zero = [float(tf.reduce_max(tf.abs(hist[0][1][i] * (1 - m)))) for i, m in
                   ((0, m1), (2, np.concatenate([m2, m2], 1)), (4, m1))]
    u = tf.constant(np.random.RandomState(2329).randn(4, d).astype(np.float32))
    xs = inverse(u)
    u_back, ld = forward(xs)
    return hist, masked_zero, xs, u_back, ld


@parity(modes=True, **TOL)
def test_glow_actnorm_data_dependent_init_and_invertible_1x1_conv_by_slogdet(tf):
    """Glow's step on a [2, 3, 3, 4] batch: ActNorm whose ``loc`` and ``log_scale`` Variables are
    assigned from the first batch's moments (eagerly, guarded by an ``initialized`` Variable),
    the invertible 1x1 convolution ``conv2d`` with a kernel from a Variable ``W`` (orthogonal init
    by NumPy's QR), its log-det ``H * W * slogdet(W)[1]``, an affine coupling; 3 Adam steps in a
    compiled step (NLL in bits per dim, the log-dets, gradients), the ActNorm statistics after
    init, then the inverse by ``tf.linalg.inv`` against the input."""
    rs = np.random.RandomState(2330)
    x = (rs.randn(2, 3, 3, 4) * [0.5, 2.0, 1.0, 0.3] + [1.0, -1.0, 0.0, 2.0]).astype(np.float32)
    c = 4
    loc = tf.Variable(np.zeros((1, 1, 1, c), np.float32), name="loc")
    log_scale = tf.Variable(np.zeros((1, 1, 1, c), np.float32), name="log_scale")
    initialized = tf.Variable(False, trainable=False)
    w = tf.Variable(np.linalg.qr(rs.randn(c, c))[0].astype(np.float32), name="w")
    nn_vs = _dense_vars(tf, (2, 6, 4), 2331, 0.3)
    vs = [loc, log_scale, w] + nn_vs
    opt = tf.keras.optimizers.Adam(0.01)

    def actnorm(x):
        if not initialized:
            mean, var = tf.nn.moments(x, axes=[0, 1, 2], keepdims=True)
            loc.assign(-mean)
            log_scale.assign(tf.math.log(1.0 / (tf.sqrt(var) + 1e-6)))
            initialized.assign(True)
        hw = tf.cast(tf.shape(x)[1] * tf.shape(x)[2], tf.float32)
        return (x + loc) * tf.exp(log_scale), hw * tf.reduce_sum(log_scale)

    def forward(x):
        y, ld1 = actnorm(x)
        y = tf.nn.conv2d(y, tf.reshape(w, [1, 1, c, c]), strides=1, padding="SAME")
        ld2 = 9.0 * tf.linalg.slogdet(w)[1]
        ya, yb = tf.split(y, 2, axis=-1)
        s, t = tf.split(_mlp(tf, nn_vs, ya, act=tf.nn.relu), 2, axis=-1)
        scale = tf.sigmoid(s + 2.0)
        yb = (yb + t) * scale
        ld3 = tf.reduce_sum(tf.math.log(scale), axis=[1, 2, 3])
        return tf.concat([ya, yb], -1), ld1 + ld2 + ld3

    def inverse(z):
        za, zb = tf.split(z, 2, axis=-1)
        s, t = tf.split(_mlp(tf, nn_vs, za, act=tf.nn.relu), 2, axis=-1)
        zb = zb / tf.sigmoid(s + 2.0) - t
        y = tf.nn.conv2d(tf.concat([za, zb], -1), tf.reshape(tf.linalg.inv(w), [1, 1, c, c]), 1, "SAME")
        return y * tf.exp(-log_scale) - loc

    forward(tf.constant(x))  # data-dependent init
    after_init = (tf.identity(loc), tf.identity(log_scale), bool(initialized.numpy()))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            z, ld = forward(x)
            ll = tf.reduce_sum(-0.5 * tf.square(z) - 0.5 * LOG2PI, axis=[1, 2, 3]) + ld
            bpd = -tf.reduce_mean(ll) / (36.0 * np.log(2.0))
        g = tape.gradient(bpd, vs)
        opt.apply_gradients(zip(g, vs))
        return bpd, ld, g

    hist = [step(tf.constant(x)) for _ in range(3)]
    z, ld = forward(tf.constant(x))
    return after_init, hist, ld, inverse(z), tf.linalg.det(w)


@parity(modes=True, **TOL)
def test_glow_invertible_1x1_conv_lu_parameterisation_from_tf_linalg_lu(tf):
    """Glow's LU-decomposed 1x1 convolution: ``tf.linalg.lu`` of a NumPy rotation gives the fixed
    permutation (``tf.gather`` of the identity's rows) and the initial strict-lower ``L``,
    strict-upper ``U`` and ``log|s|`` Variables (``band_part`` / ``diag_part``), the sign fixed;
    ``W = P L (U + diag(sign exp(log_s)))`` rebuilt each call, its log-det ``sum(log_s) * H*W``
    against ``slogdet``; 3 Adam steps on a Gaussian NLL of a [2, 2, 2, 3] batch; W after init
    against the rotation and ``lu_reconstruct``; a log-det by ``lu`` of W itself has no gradient
    (TF registers none for Lu: LookupError)."""
    c = 3
    rs = np.random.RandomState(2340)
    w0 = np.linalg.qr(rs.randn(c, c))[0].astype(np.float32)
    x = (rs.randn(2, 2, 2, c) * [2.0, 0.5, 1.0]).astype(np.float32)
    lu, perm = tf.linalg.lu(tf.constant(w0))
    p = tf.gather(tf.eye(c), perm)
    lower0 = tf.linalg.band_part(lu, -1, 0) - tf.linalg.diag(tf.linalg.diag_part(lu))
    upper0 = tf.linalg.band_part(lu, 0, -1) - tf.linalg.diag(tf.linalg.diag_part(lu))
    s0 = tf.linalg.diag_part(lu)
    sign_s = tf.sign(s0)
    lower = tf.Variable(lower0, name="lower")
    upper = tf.Variable(upper0, name="upper")
    log_s = tf.Variable(tf.math.log(tf.abs(s0)), name="log_s")
    vs = [lower, upper, log_s]
    lmask = np.tril(np.ones((c, c), np.float32), -1)
    opt = tf.keras.optimizers.Adam(0.05)

    def weight():
        l_ = lower * lmask + tf.eye(c)
        u_ = upper * lmask.T + tf.linalg.diag(sign_s * tf.exp(log_s))
        return tf.matmul(tf.transpose(p), tf.matmul(l_, u_))

    def nll():
        wt = weight()
        y = tf.nn.conv2d(tf.constant(x), tf.reshape(wt, [1, 1, c, c]), 1, "VALID")
        ld = 4.0 * tf.reduce_sum(log_s)
        ll = tf.reduce_sum(-0.5 * tf.square(y) - 0.5 * LOG2PI, [1, 2, 3]) + ld
        return -tf.reduce_mean(ll), ld, 4.0 * tf.linalg.slogdet(wt)[1]

    w_init = weight()
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss, ld, ld_ref = nll()
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((loss, ld, ld_ref, g))
    # the log-det by ``lu`` of the weight itself: TF has no gradient for Lu (LookupError)
    with tf.GradientTape() as tape:
        lu_w, _ = tf.linalg.lu(weight())
        ld_lu = tf.reduce_sum(tf.math.log(tf.abs(tf.linalg.diag_part(lu_w))))
    no_grad = raises(tape.gradient, ld_lu, vs)
    return perm, w_init - w0, tf.linalg.lu_reconstruct(lu, perm), hist, weight(), ld_lu, no_grad


@parity(modes=True, **TOL)
def test_planar_and_radial_flows_fitted_to_a_ring_by_reverse_kl(tf):
    """Two planar flows (``u_hat`` by Rezende's invertibility fix with ``-1 + softplus``, log-det
    ``log|1 + u_hat . psi|``) and two radial flows (``alpha`` by ``softplus``, ``beta`` kept above
    ``-alpha``, log-det ``(d-1) log(1 + beta h) + log(1 + beta h + beta h' r)``) fitted to an
    unnormalised ring density by reverse KL on fixed NumPy base samples; 3 Adam steps: the KL,
    gradients (the radial centre's included), and the per-flow log-dets at the end."""
    rs = np.random.RandomState(2350)
    z0 = rs.randn(16, 2).astype(np.float32)
    planar = [(tf.Variable(init_array((2,), 2351 + i, 1.0)), tf.Variable(init_array((2,), 2353 + i, 1.0)),
               tf.Variable(0.1 * i)) for i in range(2)]
    radial = [(tf.Variable(init_array((2,), 2355 + i, 0.5)), tf.Variable(0.5), tf.Variable(0.3 - 0.6 * i))
              for i in range(2)]
    vs = [v for p in planar + radial for v in p]
    opt = tf.keras.optimizers.Adam(0.05)

    def planar_f(z, u, w, b):
        wu = tf.reduce_sum(w * u)
        u_hat = u + (-1.0 + tf.nn.softplus(wu) - wu) * w / tf.reduce_sum(tf.square(w))
        a = tf.linalg.matvec(z, w) + b
        psi = (1 - tf.square(tf.tanh(a)))[:, None] * w
        ld = tf.math.log(tf.abs(1.0 + tf.linalg.matvec(psi, u_hat)))
        return z + u_hat * tf.tanh(a)[:, None], ld

    def radial_f(z, zc, a_raw, b_raw):
        alpha = tf.nn.softplus(a_raw)
        beta = -alpha + tf.nn.softplus(b_raw)
        diff = z - zc
        r = tf.norm(diff, axis=-1)
        hh = 1.0 / (alpha + r)
        ld = tf.math.log(1 + beta * hh) + tf.math.log(1 + beta * hh - beta * r * tf.square(hh))
        return z + (beta * hh)[:, None] * diff, ld

    def target_logp(z):
        r = tf.norm(z, axis=-1)
        return -0.5 * tf.square((r - 2.0) / 0.4)

    def run(z):
        lds = []
        for p in planar:
            z, ld = planar_f(z, *p)
            lds.append(ld)
        for p in radial:
            z, ld = radial_f(z, *p)
            lds.append(ld)
        return z, lds

    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            zk, lds = run(tf.constant(z0))
            log_q = _std_normal_logp(tf, tf.constant(z0)) - tf.add_n(lds)
            kl = tf.reduce_mean(log_q - target_logp(zk))
        g = tape.gradient(kl, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((kl, g))
    zk, lds = run(tf.constant(z0))
    return hist, zk, [tf.reduce_mean(ld) for ld in lds]


def _rq_spline(tf, x, w_logits, h_logits, d_raw, bound=3.0):
    """Durkan et al.'s rational-quadratic spline on ``[-bound, bound]`` (``x`` inside): ``x`` [N],
    the bin parameters [N, K], [N, K], [N, K - 1]; the output and ``log |dy/dx|``."""
    k = w_logits.shape[-1]
    w = 1e-3 + (1 - 1e-3 * k) * tf.nn.softmax(w_logits, -1)
    h = 1e-3 + (1 - 1e-3 * k) * tf.nn.softmax(h_logits, -1)
    zeros = tf.zeros_like(w[:, :1])
    xk = 2 * bound * tf.concat([zeros, tf.math.cumsum(w, -1)], -1) - bound
    yk = 2 * bound * tf.concat([zeros, tf.math.cumsum(h, -1)], -1) - bound
    ones = tf.ones_like(zeros)
    d = tf.concat([ones, 1e-3 + tf.nn.softplus(d_raw), ones], -1)
    idx = tf.clip_by_value(tf.searchsorted(xk, x[:, None], side="right") - 1, 0, k - 1)

    def at(t, shift=0):
        return tf.gather(t[:, shift:], idx, batch_dims=1)[:, 0]

    x0, y0 = at(xk), at(yk)
    bw, bh = at(xk, 1) - x0, at(yk, 1) - y0
    delta = bh / bw
    d0, d1 = at(d), at(d, 1)
    th = (x - x0) / bw
    tt = th * (1 - th)
    den = delta + (d0 + d1 - 2 * delta) * tt
    y = y0 + bh * (delta * tf.square(th) + d0 * tt) / den
    dnum = tf.square(delta) * (d1 * tf.square(th) + 2 * delta * tt + d0 * tf.square(1 - th))
    return y, tf.math.log(dnum) - 2 * tf.math.log(den)


@parity(modes=True, **TOL)
def test_neural_spline_flow_rational_quadratic_coupling_by_searchsorted(tf):
    """A neural spline flow on 2-D data: two rational-quadratic spline couplings (4 bins on
    ``[-3, 3]``, widths and heights by ``softmax`` floored at 1e-3, interior derivatives by
    ``softplus``), the bin by ``tf.searchsorted(side="right")`` and the bin's parameters by
    ``tf.gather(batch_dims=1)``; 3 Adam steps in a compiled step (NLL, gradients), the bin indices,
    and one spline's log-derivative against its ``tape.gradient``."""
    x = np.clip(_moons(10, 2360) - [0.5, 0.25], -2.5, 2.5).astype(np.float32)
    nets = [_dense_vars(tf, (1, 8, 11), 2361 + 2 * i, 0.4) for i in range(2)]
    vs = nets[0] + nets[1]
    opt = tf.keras.optimizers.Adam(0.02)

    def forward(x):
        ld = tf.zeros(tf.shape(x)[:1])
        for i in range(2):
            cond, tr = (x[:, :1], x[:, 1]) if i == 0 else (x[:, 1:], x[:, 0])
            p = _mlp(tf, nets[i], cond, act=tf.tanh)
            y, l = _rq_spline(tf, tr, p[:, :4], p[:, 4:8], p[:, 8:])
            x = tf.stack([x[:, 0], y], -1) if i == 0 else tf.stack([y, x[:, 1]], -1)
            ld += l
        return x, ld

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            z, ld = forward(x)
            nll = -tf.reduce_mean(_std_normal_logp(tf, z) + ld)
        g = tape.gradient(nll, vs)
        opt.apply_gradients(zip(g, vs))
        return nll, g

    hist = [step(tf.constant(x)) for _ in range(3)]
    z, ld = forward(tf.constant(x))
    xt = tf.constant(x[:4])
    p = _mlp(tf, nets[0], xt[:, :1], act=tf.tanh)
    with tf.GradientTape() as t:
        t.watch(xt)
        y, l = _rq_spline(tf, xt[:, 1], p[:, :4], p[:, 4:8], p[:, 8:])
    dy = t.gradient(y, xt)
    w = tf.nn.softmax(p[:, :4], -1)
    knots = 6.0 * tf.concat([tf.zeros_like(w[:, :1]), tf.math.cumsum(w, -1)], -1) - 3.0
    bins = tf.searchsorted(knots, xt[:, 1:], side="right") - 1
    return hist, z, ld, dy[:, 1] - tf.exp(l), dy[:, 0], bins


@parity(modes=True, **TOL)
def test_ffjord_continuous_flow_hutchinson_and_exact_trace_by_rk4(tf):
    """FFJORD on 2-D data: the dynamics an MLP of ``(z, t)``, the log-density change integrated with
    the state by 2 RK4 steps, the divergence once by Hutchinson's estimator (a vector-Jacobian
    product ``tape.gradient(sum(f * e), z)`` with fixed NumPy probes) and once exactly as the
    trace of the ``batch_jacobian``; the final states, log-density changes, the NLL and its
    gradients w.r.t. the dynamics' Variables for both."""
    ws = _dense_vars(tf, (3, 8, 2), 40, 0.4)
    x = np.random.RandomState(2).randn(5, 2).astype(np.float32)
    e = np.random.RandomState(3).randn(5, 2).astype(np.float32)

    def f(t, z):
        tz = tf.concat([z, tf.fill([tf.shape(z)[0], 1], t)], -1)
        return _mlp(tf, ws, tz, act=tf.tanh)

    def aug(t, z, exact):
        with tf.GradientTape(persistent=True) as g:
            g.watch(z)
            dz = f(t, z)
            ef = tf.reduce_sum(dz * e)
        if exact:
            tr = tf.linalg.trace(g.batch_jacobian(dz, z))
        else:
            tr = tf.reduce_sum(g.gradient(ef, z) * e, -1)
        return dz, -tr

    def integrate(z, exact, n=2):
        dt = 1.0 / n
        lp = tf.zeros(tf.shape(z)[:1])
        for i in range(n):
            t = i * dt
            k1, l1 = aug(t, z, exact)
            k2, l2 = aug(t + dt / 2, z + dt / 2 * k1, exact)
            k3, l3 = aug(t + dt / 2, z + dt / 2 * k2, exact)
            k4, l4 = aug(t + dt, z + dt * k3, exact)
            z = z + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            lp = lp + dt / 6 * (l1 + 2 * l2 + 2 * l3 + l4)
        return z, lp

    out = []
    for exact in (False, True):
        with tf.GradientTape() as t:
            z, dlp = integrate(tf.constant(x), exact)
            nll = -tf.reduce_mean(tf.reduce_sum(-0.5 * tf.square(z) - 0.5 * LOG2PI, -1) - dlp)
        out.append((z, dlp, nll, t.gradient(nll, ws)))
    return out
