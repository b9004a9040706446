"""Round twenty-three (c): normalizing flows and variational inference written by hand in TF2 (raw
tf ops, no TensorFlow Probability), each run under real TensorFlow 2.21 and under tapejax.

keras.io's RealNVP as a ``tf.keras.Model`` with a custom ``train_step`` under ``fit`` and as a raw
compiled loop checked against its inverse, MAF with MADE's masks multiplied into kernel Variables
(and its sequential inverse), Glow's ActNorm with data-dependent initialisation and the
invertible 1x1 convolution by ``slogdet`` and by an LU parameterisation from ``tf.linalg.lu``,
planar and radial flows fitted by reverse KL; a VAE with the closed-form Gaussian KL, the IWAE
bound by ``reduce_logsumexp`` over K samples, beta-VAE annealing by a callback assigning a
Variable, a mixture-of-Gaussians prior, a Bernoulli likelihood from logits, free bits.  Noise
is NumPy's, fed in (tapejax's random ops follow TF's seed rules on JAX keys, so their values
differ from TF's).  Losses per step, gradients with their None-ness, log-determinants and the
Variables after a few steps are compared.
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

    model = RealNVP(num_coupling_layers=4)
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
    unnormalised ring density by reverse KL on fixed NumPy base samples; 4 Adam steps: the KL,
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
    for _ in range(4):
        with tf.GradientTape() as tape:
            zk, lds = run(tf.constant(z0))
            log_q = _std_normal_logp(tf, tf.constant(z0)) - tf.add_n(lds)
            kl = tf.reduce_mean(log_q - target_logp(zk))
        g = tape.gradient(kl, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((kl, g))
    zk, lds = run(tf.constant(z0))
    return hist, zk, [tf.reduce_mean(ld) for ld in lds]


# ---------------------------------------------------------------------------
# Variational inference
# ---------------------------------------------------------------------------

def _vae_data(n, d, seed):
    rs = np.random.RandomState(seed)
    return (rs.randn(n, 2) @ rs.randn(2, d)).astype(np.float32)


@parity(modes=True, **TOL)
def test_gaussian_vae_closed_form_kl_in_a_compiled_step(tf):
    """A Gaussian VAE (encoder to mean and log-variance, decoder with a learned output
    log-scale) on 6-D data: the reparameterised sample with NumPy noise, the closed-form KL
    ``-0.5 sum(1 + logvar - mu^2 - exp(logvar))``, the Gaussian log-likelihood; 4 Adam steps in a
    compiled step: the ELBO, KL and reconstruction per step, all gradients, the Variables."""
    x = _vae_data(8, 6, 2360)
    eps = np.random.RandomState(2361).randn(4, 8, 2).astype(np.float32)
    enc = _dense_vars(tf, (6, 8, 4), 2362, 0.4)
    dec = _dense_vars(tf, (2, 8, 6), 2364, 0.4)
    out_log_scale = tf.Variable(np.zeros(6, np.float32))
    vs = enc + dec + [out_log_scale]
    opt = tf.keras.optimizers.Adam(0.01)

    @tf.function
    def step(x, e):
        with tf.GradientTape() as tape:
            mu, logvar = tf.split(_mlp(tf, enc, x, act=tf.nn.elu), 2, -1)
            z = mu + tf.exp(0.5 * logvar) * e
            xr = _mlp(tf, dec, z, act=tf.nn.elu)
            rec = tf.reduce_sum(-0.5 * tf.square((x - xr) / tf.exp(out_log_scale)) - out_log_scale
                                - 0.5 * LOG2PI, -1)
            kl = -0.5 * tf.reduce_sum(1 + logvar - tf.square(mu) - tf.exp(logvar), -1)
            elbo = tf.reduce_mean(rec - kl)
            loss = -elbo
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return elbo, tf.reduce_mean(kl), tf.reduce_mean(rec), g

    hist = [step(tf.constant(x), tf.constant(eps[i])) for i in range(4)]
    return hist, vs


@parity(modes=True, **TOL)
def test_iwae_bound_by_reduce_logsumexp_over_k_samples(tf):
    """The IWAE bound with K = 5 importance samples on 4-D data: ``log w = log p(x|z) + log p(z) -
    log q(z|x)`` for [K, B] samples, the bound ``mean(logsumexp(log w, 0) - log K)`` against the ELBO
    (mean of ``log w``), the normalised importance weights by ``softmax`` over K; 3 Adam steps on the
    IWAE bound: its value, gradients, and the effective sample size per example at the end."""
    x = _vae_data(6, 4, 2370)
    k = 5
    eps = np.random.RandomState(2371).randn(4, k, 6, 2).astype(np.float32)
    enc = _dense_vars(tf, (4, 6, 4), 2372, 0.4)
    dec = _dense_vars(tf, (2, 6, 4), 2374, 0.4)
    vs = enc + dec
    opt = tf.keras.optimizers.Adam(0.02)

    def log_weights(x, e):
        mu, log_sd = tf.split(_mlp(tf, enc, x, act=tf.tanh), 2, -1)
        z = mu + tf.exp(log_sd) * e                          # [K, B, 2]
        log_q = tf.reduce_sum(-0.5 * tf.square(e) - log_sd - 0.5 * LOG2PI, -1)
        log_pz = _std_normal_logp(tf, z)
        xr = _mlp(tf, dec, tf.reshape(z, [-1, 2]), act=tf.tanh)
        xr = tf.reshape(xr, [k, -1, 4])
        log_px = tf.reduce_sum(-0.5 * tf.square(x - xr) - 0.5 * LOG2PI, -1)
        return log_px + log_pz - log_q

    hist = []
    for i in range(3):
        with tf.GradientTape() as tape:
            lw = log_weights(tf.constant(x), tf.constant(eps[i]))
            iwae = tf.reduce_mean(tf.reduce_logsumexp(lw, axis=0) - np.log(k))
            elbo = tf.reduce_mean(lw)
            loss = -iwae
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((iwae, elbo, g))
    lw = log_weights(tf.constant(x), tf.constant(eps[3]))
    wn = tf.nn.softmax(lw, axis=0)
    ess = 1.0 / tf.reduce_sum(tf.square(wn), 0)
    return hist, wn, ess


@parity(**LOOSE)
def test_beta_vae_keras_model_with_annealing_callback_assigning_beta(tf):
    """A beta-VAE as a ``tf.keras.Model`` with a non-trainable ``beta`` Variable read in its custom
    ``train_step``; a ``Callback`` assigns the linear warm-up (then cyclical) schedule in
    ``on_train_batch_begin``; the noise is the data's last columns (fed through ``fit``, split
    off in ``train_step``); three ``Mean`` trackers (total, reconstruction, KL).  Fit 3 epochs:
    the history, the beta values seen, the weights."""
    x = _vae_data(8, 4, 2380)
    eps = np.random.RandomState(2381).randn(8, 2).astype(np.float32)
    data = np.concatenate([x, eps], -1)

    class BetaVAE(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.enc = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh"), tf.keras.layers.Dense(4)])
            self.dec = tf.keras.Sequential([tf.keras.layers.Dense(6, activation="tanh"), tf.keras.layers.Dense(4)])
            self.beta = tf.Variable(0.0, trainable=False)
            self.trackers = [tf.keras.metrics.Mean(name=n) for n in ("loss", "rec", "kl")]

        @property
        def metrics(self):
            return self.trackers

        def call(self, x):
            mu, logvar = tf.split(self.enc(x), 2, -1)
            return self.dec(mu)

        def train_step(self, data):
            x, e = data[:, :4], data[:, 4:]
            with tf.GradientTape() as tape:
                mu, logvar = tf.split(self.enc(x), 2, -1)
                z = mu + tf.exp(0.5 * logvar) * e
                rec = tf.reduce_mean(tf.reduce_sum(tf.square(x - self.dec(z)), -1))
                kl = tf.reduce_mean(-0.5 * tf.reduce_sum(1 + logvar - tf.square(mu) - tf.exp(logvar), -1))
                loss = rec + self.beta * kl
            g = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(g, self.trainable_variables))
            for t, v in zip(self.trackers, (loss, rec, kl)):
                t.update_state(v)
            return {t.name: t.result() for t in self.trackers}

    seen = []

    class Anneal(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            it = int(self.model.optimizer.iterations.numpy())
            beta = min(1.0, it / 4.0) if it < 4 else 0.5 * (1 + np.cos(np.pi * (it % 2)))
            self.model.beta.assign(beta)
            seen.append(float(self.model.beta.numpy()))

    model = BetaVAE()
    model(x[:1])
    _init_trainable(model, seed=2382)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.02))
    h = model.fit(data, batch_size=4, epochs=3, shuffle=False, verbose=0, callbacks=[Anneal()])
    return ({k: [float(v) for v in h.history[k]] for k in ("loss", "rec", "kl")}, seen,
            model.trainable_weights, model.beta)


@parity(modes=True, **TOL)
def test_vae_with_a_learned_mixture_of_gaussians_prior(tf):
    """A VAE whose prior is a learned 3-component Gaussian mixture in 2-D (logits, means,
    softplus scales as Variables): ``log p(z)`` by ``reduce_logsumexp`` over components, the KL
    estimated by one sample as ``log q(z|x) - log p(z)``; 3 Adam steps eager: the ELBO, the
    prior's gradients and the mixture weights; then the prior's responsibilities of two codes."""
    x = _vae_data(8, 4, 2390)
    eps = np.random.RandomState(2391).randn(3, 8, 2).astype(np.float32)
    enc = _dense_vars(tf, (4, 6, 4), 2392, 0.4)
    dec = _dense_vars(tf, (2, 6, 4), 2394, 0.4)
    logits = tf.Variable(np.zeros(3, np.float32))
    means = tf.Variable(init_array((3, 2), 2396, 1.5))
    raw_scales = tf.Variable(np.full((3, 2), 0.5, np.float32))
    prior = [logits, means, raw_scales]
    vs = enc + dec + prior
    opt = tf.keras.optimizers.Adam(0.02)

    def log_prior(z):
        sc = tf.nn.softplus(raw_scales)
        comp = tf.reduce_sum(-0.5 * tf.square((z[:, None, :] - means) / sc) - tf.math.log(sc) - 0.5 * LOG2PI, -1)
        return tf.reduce_logsumexp(tf.nn.log_softmax(logits) + comp, -1), comp

    hist = []
    for i in range(3):
        with tf.GradientTape() as tape:
            mu, log_sd = tf.split(_mlp(tf, enc, x), 2, -1)
            z = mu + tf.exp(log_sd) * eps[i]
            log_q = tf.reduce_sum(-0.5 * tf.square(eps[i]) - log_sd - 0.5 * LOG2PI, -1)
            lp, _ = log_prior(z)
            rec = tf.reduce_sum(-0.5 * tf.square(x - _mlp(tf, dec, z)), -1)
            elbo = tf.reduce_mean(rec + lp - log_q)
            loss = -elbo
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        hist.append((elbo, g[-3:]))
    _, comp = log_prior(tf.constant([[0.0, 0.0], [1.0, -1.0]]))
    return hist, tf.nn.softmax(logits), tf.nn.softmax(tf.nn.log_softmax(logits) + comp, -1), prior


@parity(modes=True, **TOL)
def test_bernoulli_vae_from_logits_with_keras_dense_layers(tf):
    """A VAE on binary 8-D data with ``tf.keras.layers.Dense`` encoder and decoder called in a raw
    compiled loop: the reconstruction term by ``sigmoid_cross_entropy_with_logits`` summed over
    pixels, the closed-form KL; 3 Adam steps: the negative ELBO, the gradients, the decoded
    probabilities of the means and the layers' weights."""
    rs = np.random.RandomState(2400)
    x = (rs.rand(6, 8) < np.linspace(0.1, 0.9, 8)).astype(np.float32)
    eps = rs.randn(3, 6, 2).astype(np.float32)
    enc1, enc2 = tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(4)
    dec1, dec2 = tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(8)
    enc2(enc1(x))
    dec2(dec1(eps[0]))
    layers = [enc1, enc2, dec1, dec2]
    for i, layer in enumerate(layers):
        layer.set_weights([init_array(w.shape, 2401 + i, 0.5) for w in layer.get_weights()])
    vs = [v for layer in layers for v in layer.trainable_variables]
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def step(x, e):
        with tf.GradientTape() as tape:
            mu, logvar = tf.split(enc2(enc1(x)), 2, -1)
            z = mu + tf.exp(0.5 * logvar) * e
            logits = dec2(dec1(z))
            rec = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits), -1)
            kl = -0.5 * tf.reduce_sum(1 + logvar - tf.square(mu) - tf.exp(logvar), -1)
            loss = tf.reduce_mean(rec + kl)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, g

    hist = [step(tf.constant(x), tf.constant(eps[i])) for i in range(3)]
    mu, _ = tf.split(enc2(enc1(x)), 2, -1)
    return hist, tf.sigmoid(dec2(dec1(mu))), [layer.get_weights() for layer in layers]


@parity(modes=True, **TOL)
def test_free_bits_by_tf_maximum_on_per_dimension_kl(tf):
    """Amortised inference with free bits on a 4-D latent: the batch-mean KL per latent dimension
    floored by ``tf.maximum(kl_d, lambda)`` (the gradient of floored dimensions is zero, checked
    on the encoder's output kernel), against the plain KL; 3 SGD steps: both losses, the
    per-dimension KLs, which dimensions are floored, the gradients."""
    x = _vae_data(8, 5, 2410)
    eps = np.random.RandomState(2411).randn(3, 8, 4).astype(np.float32)
    enc = _dense_vars(tf, (5, 6, 8), 2412, 0.3)
    dec = _dense_vars(tf, (4, 6, 5), 2414, 0.4)
    vs = enc + dec
    lam = 0.25

    hist = []
    for i in range(3):
        with tf.GradientTape(persistent=True) as tape:
            mu, logvar = tf.split(_mlp(tf, enc, x, act=tf.tanh), 2, -1)
            z = mu + tf.exp(0.5 * logvar) * eps[i]
            rec = tf.reduce_mean(tf.reduce_sum(tf.square(x - _mlp(tf, dec, z, act=tf.tanh)), -1))
            kl_d = tf.reduce_mean(-0.5 * (1 + logvar - tf.square(mu) - tf.exp(logvar)), 0)
            kl_fb = tf.reduce_sum(tf.maximum(kl_d, lam))
            loss = rec + kl_fb
            plain = rec + tf.reduce_sum(kl_d)
        g = tape.gradient(loss, vs)
        g_plain = tape.gradient(plain, vs)
        g_kl = tape.gradient(kl_fb, enc[2])
        del tape
        for v, gi in zip(vs, g):
            v.assign_sub(0.05 * gi)
        hist.append((loss, plain, kl_d, kl_d < lam, g, g_plain, g_kl))
    return hist
