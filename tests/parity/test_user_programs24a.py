"""Round twenty-four (a): geometry and 3D vision as TF-era research code writes it (TF
Graphics-style helpers by hand, raw tf ops), each run under real TensorFlow 2.21 and under
tapejax: rotations and cameras (the point clouds, signed distances and meshes are in
``test_user_programs24a2.py``, the image-space programs in ``24a3``).

Rodrigues' formula with the angle at 0 (the Taylor branch behind a double ``tf.where``, and the
naive and half-guarded versions whose gradients are NaN), the ``so(3)`` log map with ``acos`` at
its limit, quaternions from ``l2_normalize`` of a zero vector, slerp between equal quaternions,
Euler angles by ``atan2`` at gimbal lock, the 6-D representation by Gram-Schmidt fitted by Adam
under ``tf.function``, chordal and Karcher rotation averaging by ``svd``, pinhole projection with
pose refinement by Gauss-Newton (``tape.jacobian`` + ``tf.linalg.solve``), Levenberg-Marquardt
bundle adjustment by ``cholesky_solve`` with host-side accept / reject, a pose fitted by Adam with
points behind the camera masked, depth from disparity by ``divide_no_nan``, Markley's quaternion
average by ``eigh``'s top eigenvector (tied zero eigenvalues), and Gauss-Newton with early stopping
in a converted ``while`` loop.  Values, NaNs and None-ness of the gradients are compared.
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-4, atol=2e-5)


# ---------------------------------------------------------------------------
# Helpers as a user writes them (module argument ``tf``)
# ---------------------------------------------------------------------------


def hat(tf, w):
    """The skew-symmetric matrix of ``w`` [..., 3] -> [..., 3, 3]."""
    wx, wy, wz = tf.unstack(w, axis=-1)
    z = tf.zeros_like(wx)
    k = tf.stack([z, -wz, wy, wz, z, -wx, -wy, wx, z], axis=-1)
    return tf.reshape(k, tf.concat([tf.shape(w)[:-1], [3, 3]], 0))


def vee(tf, m):
    return tf.stack([m[..., 2, 1], m[..., 0, 2], m[..., 1, 0]], axis=-1)


def rodrigues(tf, w):
    """Axis-angle -> rotation matrix, safe at 0: the angle only behind a double ``tf.where``."""
    t2 = tf.reduce_sum(tf.square(w), -1)[..., None, None]
    small = t2 < 1e-8
    t2s = tf.where(small, tf.ones_like(t2), t2)
    ts = tf.sqrt(t2s)
    a = tf.where(small, 1.0 - t2 / 6.0, tf.sin(ts) / ts)
    b = tf.where(small, 0.5 - t2 / 24.0, (1.0 - tf.cos(ts)) / t2s)
    k = hat(tf, w)
    eye = tf.eye(3, batch_shape=tf.shape(w)[:-1])
    return eye + a * k + b * tf.matmul(k, k)


def so3_log(tf, r):
    """Rotation matrix -> axis-angle, with the ``acos`` input itself guarded at the identity."""
    c = (tf.linalg.trace(r) - 1.0) / 2.0
    c = tf.clip_by_value(c, -1.0, 1.0)
    small = c > 1.0 - 1e-6
    cs = tf.where(small, tf.zeros_like(c), c)
    theta = tf.acos(cs)
    f = tf.where(small, 0.5 + tf.zeros_like(c), theta / (2.0 * tf.sin(theta)))
    return f[..., None] * vee(tf, r - tf.linalg.matrix_transpose(r))


def project(tf, pts, fx=2.0, fy=2.0, cx=0.1, cy=-0.1):
    x, y, z = tf.unstack(pts, axis=-1)
    return tf.stack([fx * x / z + cx, fy * y / z + cy], -1)


def _axis_angles(seed, n, scale=1.0):
    return (np.random.RandomState(seed).randn(n, 3) * scale).astype(np.float32)


# ---------------------------------------------------------------------------
# Rotations
# ---------------------------------------------------------------------------


@parity(**TOL)
def test_rodrigues_at_zero_angle_safe_naive_and_single_where(tf):
    """Rodrigues' formula over a batch holding a zero, a tiny and three ordinary rotations: the
    safe double-``where`` form (value and finite gradient at 0, the Taylor branch's), the naive
    ``w / norm(w)`` form (NaN values and gradients at 0) and a single ``tf.where`` guard around the
    naive form (values fine, the gradient at 0 NaN: the trap)."""
    w0 = np.concatenate([np.zeros((1, 3)), [[1e-5, -2e-5, 1e-5]], _axis_angles(2401, 3)]).astype(np.float32)
    w = tf.constant(w0)
    p = tf.constant(init_array((5, 3), 2402, 1.0))

    def naive(w):
        theta = tf.norm(w, axis=-1)[..., None, None]
        k = hat(tf, w / theta[..., 0])
        return tf.eye(3, batch_shape=[5]) + tf.sin(theta) * k + (1 - tf.cos(theta)) * tf.matmul(k, k)

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(w)
        r_safe = rodrigues(tf, w)
        r_naive = naive(w)
        small = tf.reduce_sum(tf.square(w), -1)[..., None, None] < 1e-8
        r_where = tf.where(small, tf.eye(3, batch_shape=[5]) + hat(tf, w), r_naive)
        ls = tf.reduce_sum(tf.linalg.matvec(r_safe, p) * p[::-1])
        ln = tf.reduce_sum(tf.linalg.matvec(r_naive, p) * p[::-1])
        lw = tf.reduce_sum(tf.linalg.matvec(r_where, p) * p[::-1])
    out = [r_safe, ls, tape.gradient(ls, w), r_naive[1:], tape.gradient(ln, w),
           r_where, tape.gradient(lw, w)]
    orth = tf.matmul(r_safe, r_safe, transpose_a=True) - tf.eye(3)
    return out, tf.reduce_max(tf.abs(orth))


@parity(**TOL)
def test_so3_log_of_exp_round_trip_and_the_acos_trap(tf):
    """``log(exp(w))`` for w = 0, a small and two ordinary rotations: the guarded log map (acos's
    input replaced near 1 before ``acos``) gives w back with a finite Jacobian at 0 (the identity);
    guarding only the ratio ``theta / 2 sin(theta)`` leaves ``acos'(1) = -inf`` times a zero
    cotangent in the gradient: NaN, as TF gives; the clip's gradient at its bound too."""
    w0 = np.concatenate([np.zeros((1, 3)), [[0.0, 1e-4, 0.0]], _axis_angles(2411, 2, 0.7)]).astype(np.float32)
    w = tf.constant(w0)

    def half_guarded(r):
        c = tf.clip_by_value((tf.linalg.trace(r) - 1.0) / 2.0, -1.0, 1.0)
        theta = tf.acos(c)
        small = c > 1.0 - 1e-6
        f = tf.where(small, 0.5 + tf.zeros_like(c), theta / (2.0 * tf.sin(tf.where(small, tf.ones_like(theta), theta))))
        return f[..., None] * vee(tf, r - tf.linalg.matrix_transpose(r))

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(w)
        r = rodrigues(tf, w)
        back = so3_log(tf, r)
        bad = half_guarded(r)
        c = tf.clip_by_value((tf.linalg.trace(r) - 1.0) / 2.0, -1.0, 1.0)
        l_bad = tf.reduce_sum(bad * [1.0, 2.0, 3.0])
        l_clip = tf.reduce_sum(c)
    jac = tape.batch_jacobian(back, w)
    g_bad = tape.gradient(l_bad, w)
    g_clip = tape.gradient(l_clip, w)
    return back, jac, bad, g_bad, c, g_clip


@parity(modes=True, **TOL)
def test_quaternions_from_l2_normalize_with_a_zero_row_fitted_by_adam(tf):
    """Raw quaternions (one exactly zero) normalised by ``tf.math.l2_normalize`` (its epsilon gives
    the zero row a finite gradient) turned into rotation matrices, fitted by 3 eager Adam steps to
    rotate points onto targets; also ``tf.norm`` of the zero row (NaN gradient in TF), and the
    angle between quaternions ``2 acos(|<q1, q2>|)`` with the dot clipped below 1."""
    rs = np.random.RandomState(2421)
    raw0 = rs.randn(4, 4).astype(np.float32)
    raw0[2] = 0.0
    q = tf.Variable(raw0)
    pts = tf.constant(rs.randn(4, 6, 3).astype(np.float32))
    tgt = tf.constant(rs.randn(4, 6, 3).astype(np.float32))
    opt = tf.keras.optimizers.Adam(0.05)

    def quat_to_mat(qn):
        w, x, y, z = tf.unstack(qn, axis=-1)
        m = [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
             2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
             2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]
        return tf.reshape(tf.stack(m, -1), [-1, 3, 3])

    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            qn = tf.math.l2_normalize(q, axis=-1)
            r = quat_to_mat(qn)
            loss = tf.reduce_mean(tf.square(tf.matmul(pts, r, transpose_b=True) - tgt))
            nrm = tf.reduce_sum(tf.norm(q, axis=-1))
            dot = tf.abs(tf.reduce_sum(qn[:-1] * qn[1:], -1))
            ang = 2.0 * tf.acos(tf.minimum(dot, 1.0 - 1e-6))
            l_ang = tf.reduce_sum(ang)
        g = tape.gradient(loss, q)
        g_norm = tape.gradient(nrm, q)
        g_ang = tape.gradient(l_ang, q)
        del tape
        opt.apply_gradients([(g, q)])
        out.append((loss, g, g_norm, ang, g_ang))
    return out, q


@parity(**TOL)
def test_slerp_between_equal_quaternions_and_euler_angles_at_gimbal_lock(tf):
    """Slerp with the ``sin(omega)`` guard (``omega = acos(dot)`` replaced near 1 by a lerp):
    equal, opposite-sign and distinct quaternion pairs, its gradient w.r.t. both ends and ``t``;
    then ZYX Euler angles from rotation matrices by ``atan2``, one at gimbal lock (``atan2(0, 0)``:
    TF's gradient is NaN there) and ``asin`` of a clipped ``-r20`` at 1."""
    rs = np.random.RandomState(2431)
    q1 = rs.randn(3, 4).astype(np.float32)
    q1 /= np.linalg.norm(q1, axis=-1, keepdims=True)
    q2 = q1.copy()
    q2[1] = -q1[1]
    q2[2] = rs.randn(4)
    q2[2] /= np.linalg.norm(q2[2])
    a, b = tf.constant(q1), tf.constant(q2)
    t = tf.constant([0.3, 0.5, 0.8])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([a, b, t])
        d = tf.reduce_sum(a * b, -1)
        b2 = tf.where((d < 0)[:, None], -b, b)
        d = tf.abs(d)
        near = d > 1.0 - 1e-6
        ds = tf.where(near, tf.zeros_like(d), d)
        om = tf.acos(ds)
        so = tf.sin(om)
        wa = tf.where(near, 1.0 - t, tf.sin((1.0 - t) * om) / so)
        wb = tf.where(near, t, tf.sin(t * om) / so)
        q = wa[:, None] * a + wb[:, None] * b2
        ls = tf.reduce_sum(q * [0.1, 0.2, -0.3, 0.4])
    gs = tape.gradient(ls, [a, b, t])

    r0 = np.stack([np.eye(3), [[0, 0, 1], [0, 1, 0], [-1, 0, 0]]]).astype(np.float32)
    r = tf.constant(r0)
    with tf.GradientTape() as tape2:
        tape2.watch(r)
        yaw = tf.atan2(r[:, 1, 0], r[:, 0, 0])
        pitch = tf.asin(tf.clip_by_value(-r[:, 2, 0], -1.0, 1.0))
        roll = tf.atan2(r[:, 2, 1], r[:, 2, 2])
        eul = tf.stack([yaw, pitch, roll], -1)
        le = tf.reduce_sum(eul * [1.0, 2.0, 3.0])
    return q, ls, gs, eul, tape2.gradient(le, r)


@parity(**TOL)
def test_six_d_rotation_by_gram_schmidt_fitted_by_adam_in_a_function(tf):
    """Zhou et al.'s 6-D rotation: two columns Gram-Schmidt-orthonormalised, the third by
    ``tf.linalg.cross``; 4 Adam steps in a compiled step fitting 3 rotations to targets by the
    geodesic loss ``acos(clip((tr(R^T T) - 1) / 2, -1 + 1e-6, 1 - 1e-6))``, one starting exactly at
    its target (the clip's bound); also Gram-Schmidt of parallel columns (a zero vector normalised)."""
    rs = np.random.RandomState(2441)
    tw = _axis_angles(2442, 3, 0.8)
    x0 = rs.randn(3, 6).astype(np.float32)
    x = tf.Variable(x0)
    tgt = rodrigues(tf, tf.constant(tw))
    opt = tf.keras.optimizers.Adam(0.05)

    def six_d(x):
        a1, a2 = x[:, :3], x[:, 3:]
        b1 = tf.math.l2_normalize(a1, -1)
        b2 = tf.math.l2_normalize(a2 - tf.reduce_sum(b1 * a2, -1, keepdims=True) * b1, -1)
        b3 = tf.linalg.cross(b1, b2)
        return tf.stack([b1, b2, b3], -1)

    x0b = x0.copy()
    x0b[0] = np.concatenate([tgt.numpy()[0][:, 0], tgt.numpy()[0][:, 1]])
    x.assign(x0b)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            r = six_d(x)
            c = (tf.linalg.trace(tf.matmul(r, tgt, transpose_a=True)) - 1.0) / 2.0
            ang = tf.acos(tf.clip_by_value(c, -1.0 + 1e-6, 1.0 - 1e-6))
            loss = tf.reduce_mean(ang)
        g = tape.gradient(loss, x)
        opt.apply_gradients([(g, x)])
        return loss, ang, g

    hist = [step() for _ in range(4)]
    par = tf.constant([[1.0, 0.0, 0.0, 2.0, 0.0, 0.0]])
    with tf.GradientTape() as tape:
        tape.watch(par)
        rp = six_d(par)
        lp = tf.reduce_sum(rp * tf.reshape(tf.range(9.0), [1, 3, 3]))
    return hist, x, rp, tape.gradient(lp, par)


@parity(modes=True, **TOL)
def test_chordal_and_karcher_rotation_averaging(tf):
    """Rotation averaging of 5 noisy copies of one rotation: the chordal L2 mean by projecting the
    summed matrices onto SO(3) with ``svd`` (``U diag(1, 1, det(U V^T)) V^T``, sign-free) and its
    gradient w.r.t. the input axis-angles; then 2 Karcher-mean iterations ``R <- R exp(mean log(R^T
    R_i))`` starting from the first rotation, with the residual angles per iteration."""
    base = np.array([0.3, -0.5, 0.8], np.float32)
    w = tf.constant(base + 0.1 * _axis_angles(2451, 5))
    with tf.GradientTape() as tape:
        tape.watch(w)
        rs_ = rodrigues(tf, w)
        m = tf.reduce_sum(rs_, 0)
        s, u, v = tf.linalg.svd(m)
        d = tf.linalg.det(tf.matmul(u, v, transpose_b=True))
        r_mean = tf.matmul(u * tf.stack([1.0, 1.0, d]), v, transpose_b=True)
        loss = tf.reduce_sum(r_mean * tf.constant(init_array((3, 3), 2452)))
    g = tape.gradient(loss, w)
    r = rs_[0]
    hist = []
    for _ in range(2):
        rel = so3_log(tf, tf.matmul(r[None], rs_, transpose_a=True))
        step = tf.reduce_mean(rel, 0)
        r = tf.matmul(r, rodrigues(tf, step))
        hist.append(tf.norm(rel, axis=-1))
    return s, r_mean, g, r, hist, so3_log(tf, tf.matmul(r, r_mean, transpose_a=True))


# ---------------------------------------------------------------------------
# Cameras, poses, bundle adjustment
# ---------------------------------------------------------------------------


def _scene(seed, n=8):
    rs = np.random.RandomState(seed)
    pts = np.concatenate([rs.uniform(-1, 1, (n, 2)), rs.uniform(3, 5, (n, 1))], -1).astype(np.float32)
    return rs, pts


@parity(modes=True, **TOL)
def test_pose_refinement_by_gauss_newton_with_tape_jacobian(tf):
    """A camera pose (axis-angle, translation) refined by 4 Gauss-Newton steps on the reprojection
    residuals of 8 points: the residual Jacobian [16, 6] by ``tape.jacobian``, the normal equations
    solved by ``tf.linalg.solve``; costs per step, the step norms and the final pose; the start is the
    identity rotation (Rodrigues' Taylor branch)."""
    rs, pts = _scene(2461)
    true = np.array([0.05, -0.1, 0.08, 0.1, -0.05, 0.2], np.float32)
    r_true = rodrigues(tf, tf.constant(true[:3]))
    obs = project(tf, tf.linalg.matvec(r_true, tf.constant(pts)) + true[3:])
    obs = obs + rs.randn(8, 2).astype(np.float32) * 0.01
    pose = tf.zeros([6])
    hist = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            tape.watch(pose)
            cam = tf.linalg.matvec(rodrigues(tf, pose[:3]), tf.constant(pts)) + pose[3:]
            res = tf.reshape(project(tf, cam) - obs, [-1])
        j = tape.jacobian(res, pose)
        jtj = tf.matmul(j, j, transpose_a=True)
        dx = tf.linalg.solve(jtj, -tf.linalg.matvec(j, res, transpose_a=True)[:, None])[:, 0]
        pose = pose + dx
        hist.append((tf.reduce_sum(tf.square(res)), tf.norm(dx)))
    return hist, pose


@parity(modes=True, rtol=5e-4, atol=5e-5)
def test_levenberg_marquardt_bundle_adjustment_with_host_accept_reject(tf):
    """Two-view bundle adjustment: the first camera fixed at the identity, the second's pose and 5
    points' depths-perturbed positions free (21 parameters); 4 Levenberg-Marquardt iterations with
    ``(J^T J + lam diag(J^T J)) dx = -J^T r`` by ``cholesky`` / ``cholesky_solve``, the step
    accepted or rejected on the host by comparing the new cost (``float``), ``lam`` scaled by 10."""
    rs, pts = _scene(2471, 5)
    pose2 = np.array([0.02, 0.1, -0.03, -0.5, 0.02, 0.1], np.float32)

    def residuals(params):
        p2 = params[:6]
        x = tf.reshape(params[6:], [5, 3])
        o1 = project(tf, x)
        o2 = project(tf, tf.linalg.matvec(rodrigues(tf, p2[:3]), x) + p2[3:])
        return tf.reshape(tf.concat([o1, o2], 0), [-1])

    truth = tf.constant(np.concatenate([pose2, pts.reshape(-1)]))
    obs = residuals(truth) + rs.randn(20).astype(np.float32) * 0.005
    start = np.concatenate([np.zeros(6, np.float32), (pts + rs.randn(5, 3) * 0.05).reshape(-1)]).astype(np.float32)
    params = tf.constant(start)
    lam = 1e-2

    def cost(p):
        return tf.reduce_sum(tf.square(residuals(p) - obs))

    hist = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            tape.watch(params)
            r = residuals(params) - obs
        j = tape.jacobian(r, params)
        jtj = tf.matmul(j, j, transpose_a=True)
        a = jtj + lam * tf.linalg.diag(tf.linalg.diag_part(jtj)) + 1e-6 * tf.eye(21)
        chol = tf.linalg.cholesky(a)
        dx = tf.linalg.cholesky_solve(chol, -tf.linalg.matvec(j, r, transpose_a=True)[:, None])[:, 0]
        new, old = cost(params + dx), tf.reduce_sum(tf.square(r))
        accepted = float(new) < float(old)
        if accepted:
            params, lam = params + dx, lam / 10.0
        else:
            lam = lam * 10.0
        hist.append((old, new, accepted, lam))
    return hist, params[:6]


@parity(modes=True, **TOL)
def test_pose_by_adam_with_points_behind_the_camera_masked(tf):
    """A pose fitted by Adam in a compiled step, the projection of points with ``z <= 0.1``
    masked: a single ``tf.where`` after ``x / z`` (one point exactly at ``z = 0``: NaN gradient, as
    TF gives) against the safe form dividing by ``where(valid, z, 1)``; 3 steps of the safe one."""
    rs, pts = _scene(2481, 6)
    pts[2, 2] = 0.0
    pts[4, 2] = -1.0
    obs = tf.constant(rs.randn(6, 2).astype(np.float32) * 0.3)
    pose = tf.Variable(np.zeros(6, np.float32))
    opt = tf.keras.optimizers.Adam(0.02)
    p = tf.constant(pts)

    def masked_loss(safe):
        cam = tf.linalg.matvec(rodrigues(tf, pose[:3]), p) + pose[3:]
        z = cam[:, 2]
        valid = z > 0.1
        zs = tf.where(valid, z, tf.ones_like(z)) if safe else z
        uv = 2.0 * cam[:, :2] / zs[:, None]
        err = tf.where(valid[:, None], uv - obs, tf.zeros_like(uv))
        return tf.reduce_sum(tf.square(err)) / tf.reduce_sum(tf.cast(valid, tf.float32))

    with tf.GradientTape(persistent=True) as tape:
        l_naive = masked_loss(False)
        l_safe = masked_loss(True)
    g_naive = tape.gradient(l_naive, pose)
    g_safe = tape.gradient(l_safe, pose)
    del tape

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = masked_loss(True)
        g = tape.gradient(loss, pose)
        opt.apply_gradients([(g, pose)])
        return loss, g

    return l_naive, g_naive, l_safe, g_safe, [step() for _ in range(3)], pose


@parity(modes=True, **TOL)
def test_depth_from_disparity_with_invalid_pixels(tf):
    """Stereo depth ``f B / d`` from a predicted disparity map (softplus of a 3x3 ``conv2d``), the
    ground-truth disparity 0 at invalid pixels: ``tf.math.divide_no_nan`` for depth, a masked L1 in
    depth and an inverse-depth smoothness term by finite differences, 3 SGD steps; gradients of
    ``divide_no_nan`` and ``reciprocal_no_nan`` at exact zeros too."""
    rs = np.random.RandomState(2491)
    img = rs.rand(1, 5, 6, 1).astype(np.float32)
    gt = rs.uniform(0.5, 2.0, (1, 5, 6, 1)).astype(np.float32)
    gt[0, 0, :2] = 0.0
    gt[0, 3, 4] = 0.0
    k = tf.Variable(init_array((3, 3, 1, 1), 2492))
    b = tf.Variable([0.2])
    fb = 1.5
    opt = tf.keras.optimizers.SGD(0.1)
    gtd = tf.math.divide_no_nan(fb, tf.constant(gt))
    valid = tf.cast(gt > 0, tf.float32)
    hist = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            disp = tf.nn.softplus(tf.nn.conv2d(img, k, 1, "SAME") + b)
            depth = tf.math.divide_no_nan(fb, disp)
            l1 = tf.reduce_sum(valid * tf.abs(depth - gtd)) / tf.reduce_sum(valid)
            inv = 1.0 / depth
            smooth = tf.reduce_mean(tf.abs(inv[:, 1:] - inv[:, :-1])) + tf.reduce_mean(tf.abs(inv[:, :, 1:] - inv[:, :, :-1]))
            loss = l1 + 0.1 * smooth
        gk, gb = tape.gradient(loss, [k, b])
        opt.apply_gradients([(gk, k), (gb, b)])
        hist.append((loss, l1, smooth, gk, gb))
    d = tf.constant([[0.0, 0.5, 2.0, 0.0]])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(d)
        dn = tf.math.divide_no_nan(fb * tf.ones_like(d), d)
        rn = tf.math.reciprocal_no_nan(d)
    return hist, dn, tape.gradient(dn, d), rn, tape.gradient(rn, d)


@parity(modes=True, **TOL)
def test_quaternion_averaging_by_the_top_eigenvector_of_eigh(tf):
    """Markley's quaternion average: the top eigenvector of ``sum w_i q_i q_i^T`` by ``tf.linalg.eigh``
    (sign-free as ``q q^T``), for noisy copies with sign flips and for 3 identical quaternions (the
    other three eigenvalues tied at 0: TF's safe reciprocal gives those pairs no gradient); the
    averages' outer products, eigenvalues, and the gradients w.r.t. the inputs and weights; 2 SGD
    steps on the weights towards a target rotation."""
    rs = np.random.RandomState(2481)
    base = np.array([0.8, 0.2, -0.4, 0.4], np.float32)
    base /= np.linalg.norm(base)
    qs = base + rs.randn(4, 4).astype(np.float32) * 0.1
    qs /= np.linalg.norm(qs, axis=-1, keepdims=True)
    qs[1] *= -1.0
    same = np.stack([base] * 3)
    target = tf.constant(np.outer(base, base) + 0.01 * init_array((4, 4), 2482))
    wts = tf.Variable([1.0, 0.5, 2.0, 1.0])
    out = []
    for q0 in (qs, same):
        q = tf.constant(q0)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(q)
            m = tf.einsum("n,ni,nj->ij", wts[:q0.shape[0]], q, q)
            e, v = tf.linalg.eigh(m)
            top = v[:, -1]
            outer = top[:, None] * top[None, :]
            loss = tf.reduce_sum(tf.square(outer - target))
        out.append((e, outer, loss, tape.gradient(loss, q), tape.gradient(loss, wts)))
        del tape
    for _ in range(2):
        with tf.GradientTape() as tape:
            m = tf.einsum("n,ni,nj->ij", wts, tf.constant(qs), tf.constant(qs))
            top = tf.linalg.eigh(m)[1][:, -1]
            loss = tf.reduce_sum(tf.square(top[:, None] * top[None, :] - target))
        g = tape.gradient(loss, wts)
        wts.assign_sub(0.5 * g)
        out.append((loss, g))
    return out, wts


@parity(**TOL)
def test_gauss_newton_with_early_stopping_in_a_converted_while_loop(tf):
    """Pose refinement inside one ``tf.function``: a converted ``while cost > 1e-8 and i < 10`` loop
    whose body takes the residual Jacobian by ``tape.jacobian`` and a damped ``tf.linalg.solve`` step;
    the iteration count, final cost and pose for a well-posed start and for a start already at the
    optimum (zero iterations, the loop's values passed through)."""
    rs, pts = _scene(2491, 6)
    true = np.array([0.03, -0.05, 0.02, 0.05, 0.02, -0.1], np.float32)
    p = tf.constant(pts)
    obs = project(tf, tf.linalg.matvec(rodrigues(tf, tf.constant(true[:3])), p) + true[3:])

    def residual(pose):
        return tf.reshape(project(tf, tf.linalg.matvec(rodrigues(tf, pose[:3]), p) + pose[3:]) - obs, [-1])

    @tf.function
    def refine(pose):
        i = tf.constant(0)
        cost = tf.reduce_sum(tf.square(residual(pose)))
        while cost > 1e-8 and i < 10:
            with tf.GradientTape() as tape:
                tape.watch(pose)
                r = residual(pose)
            j = tape.jacobian(r, pose)
            a = tf.matmul(j, j, transpose_a=True) + 1e-6 * tf.eye(6)
            pose = pose + tf.linalg.solve(a, -tf.linalg.matvec(j, r, transpose_a=True)[:, None])[:, 0]
            cost = tf.reduce_sum(tf.square(residual(pose)))
            i += 1
        return i, cost, pose

    return refine(tf.zeros([6])), refine(tf.constant(true))
