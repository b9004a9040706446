"""Round twenty-four (a), second part: point clouds, signed distances and meshes as TF-era 3D
research code writes them, each run under real TensorFlow 2.21 and under tapejax.

PointNet with ``reduce_max`` over tied points (duplicates, and a ReLU channel dead on every
point: the gradient shared among the ties as TF shares it), the Chamfer distance by broadcast
pairwise distances with tied minima and its ``sqrt`` form at a coincident point (NaN, as TF),
ICP with nearest neighbours by ``argmin`` (equidistant ties) and Kabsch's ``svd`` with the
reflection fixed, farthest-point sampling in a converted loop with ``argmax`` ties, k-NN by
``top_k`` with tied distances feeding an EdgeConv layer, a Sinkhorn earth-mover-like loss in
the log domain, a signed-distance network with the Eikonal loss (a gradient of a gradient, and
``tf.norm`` of a zero input gradient from dead ReLUs: NaN weights' gradients as in TF), mesh
Laplacian smoothing with a ``tf.SparseTensor``, face and vertex normals by ``unsorted_segment_sum``
with a degenerate face (and ``tf.linalg.cross``'s refusal to broadcast), PCA normals by ``eigh`` of
covariances with repeated eigenvalues, clouds of varying size through an ``input_signature`` with
``None`` points, voxel occupancy by ``scatter_nd`` and segment maxima with ties, and batched pose
refinement by ``batch_jacobian`` and ``lstsq``.
"""
import numpy as np

from .harness import init_array, parity, raises

TOL = dict(rtol=2e-4, atol=2e-5)


def pairwise_sq(tf, a, b):
    """``[..., n, m]`` squared distances by broadcasting, as most research code writes it."""
    d = a[..., :, None, :] - b[..., None, :, :]
    return tf.reduce_sum(tf.square(d), -1)


def _cloud(seed, n, scale=1.0):
    return (np.random.RandomState(seed).randn(n, 3) * scale).astype(np.float32)


# ---------------------------------------------------------------------------
# Point clouds
# ---------------------------------------------------------------------------


@parity(modes=True, x64=True, **TOL)
def test_pointnet_max_pool_over_repeated_points_and_a_dead_channel(tf):
    """A tiny PointNet (shared 3-8-8 MLP as matmuls, ``reduce_max`` over 6 points, a linear
    classifier) on two 4-point clouds padded to 6 by repeating points (the features gathered by
    the padding indices, as a sampler's repeat padding does), one ReLU channel's bias so negative
    that it is 0 on every point (a 6-way tie at 0); 3 SGD steps: losses, gradients w.r.t. the
    weights and the points (tied maxima share the gradient equally in TF), the ``argmax`` rows."""
    rs = np.random.RandomState(2501)
    x = tf.constant(rs.randn(2, 4, 3).astype(np.float32))
    pad = tf.constant([0, 1, 2, 3, 1, 0])
    w1 = tf.Variable(init_array((3, 8), 2502))
    b1v = np.zeros(8, np.float32)
    b1v[3] = -50.0
    b1 = tf.Variable(b1v)
    w2 = tf.Variable(init_array((8, 8), 2503))
    wc = tf.Variable(init_array((8, 3), 2504))
    labels = tf.constant([0, 2])
    vs = [w1, b1, w2, wc]
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
            h = tf.gather(tf.nn.relu(tf.matmul(h, w2)), pad, axis=1)
            feat = tf.reduce_max(h, axis=1)
            logits = tf.matmul(feat, wc)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        gs = tape.gradient(loss, vs)
        gx = tape.gradient(loss, x)
        del tape
        opt.apply_gradients(zip(gs, vs))
        out.append((loss, feat, gs, gx, tf.argmax(h, axis=1)))
    return out


@parity(**TOL)
def test_chamfer_distance_with_tied_minima_fitted_in_a_function(tf):
    """The symmetric Chamfer distance between a predicted cloud (a Variable) and a target cloud
    with duplicated points (tied minima in ``reduce_min``), 3 Adam steps in a compiled step; then
    the "L1" Chamfer ``sqrt(min d)`` with one predicted point on a target point: ``sqrt``'s infinite
    derivative times a zero gives NaN in TF, and ``sqrt(d + 1e-12)`` is finite."""
    tgt0 = _cloud(2511, 6)
    tgt0[4] = tgt0[1]
    tgt = tf.constant(tgt0)
    pred = tf.Variable(_cloud(2512, 5, 0.8))
    opt = tf.keras.optimizers.Adam(0.05)

    def chamfer(p, q):
        d = pairwise_sq(tf, p, q)
        return tf.reduce_mean(tf.reduce_min(d, 1)) + tf.reduce_mean(tf.reduce_min(d, 0))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = chamfer(pred, tgt)
        g = tape.gradient(loss, pred)
        opt.apply_gradients([(g, pred)])
        return loss, g

    hist = [step() for _ in range(3)]
    p = tf.constant(np.concatenate([tgt0[:1], _cloud(2513, 3)]))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(p)
        d = pairwise_sq(tf, p, tgt)
        l1 = tf.reduce_mean(tf.sqrt(tf.reduce_min(d, 1)))
        l1_safe = tf.reduce_mean(tf.sqrt(tf.reduce_min(d, 1) + 1e-12))
    return hist, pred, l1, tape.gradient(l1, p), l1_safe, tape.gradient(l1_safe, p)


@parity(modes=True, x64=True, **TOL)
def test_icp_with_argmin_ties_and_kabsch_by_svd(tf):
    """Point-to-point ICP for 3 iterations: nearest neighbours by ``argmin`` of pairwise distances
    (the target holds two points equidistant from a source point: the lower index wins), the
    Kabsch rotation ``V diag(1, 1, det) U^T`` from ``svd`` of the cross-covariance (free of the
    singular vectors' signs), translation from the centroids; the matches, rotations, translations
    and mean errors; then the gradient of the error aligned to a noisy target w.r.t. the source
    through ``svd``."""
    src0 = _cloud(2521, 7)
    th = 0.3
    r_true = np.array([[np.cos(th), -np.sin(th), 0], [np.sin(th), np.cos(th), 0], [0, 0, 1]], np.float32)
    tgt0 = src0 @ r_true.T + np.array([0.2, -0.1, 0.05], np.float32)
    tgt0 = np.concatenate([tgt0, [src0[0] + [0.0, 0.0, 5.0], src0[0] - [0.0, 0.0, 5.0]]]).astype(np.float32)
    tgt = tf.constant(tgt0)

    def kabsch(a, b):
        ca, cb = tf.reduce_mean(a, 0), tf.reduce_mean(b, 0)
        h = tf.matmul(a - ca, b - cb, transpose_a=True)
        s, u, v = tf.linalg.svd(h)
        d = tf.sign(tf.linalg.det(tf.matmul(v, u, transpose_b=True)))
        r = tf.matmul(v * tf.stack([1.0, 1.0, d]), u, transpose_b=True)
        return r, cb - tf.linalg.matvec(r, ca)

    src = tf.constant(src0)
    cur = src
    hist = []
    for _ in range(3):
        idx = tf.argmin(pairwise_sq(tf, cur, tgt), axis=1)
        matched = tf.gather(tgt, idx)
        r, t = kabsch(src, matched)
        cur = tf.matmul(src, r, transpose_b=True) + t
        hist.append((idx, r, t, tf.reduce_mean(tf.norm(cur - matched, axis=-1))))
    tie = tf.argmin(pairwise_sq(tf, src[:1] + [0.0, 0.0, 0.0], tf.constant(tgt0[-2:])), axis=1)
    with tf.GradientTape() as tape:
        tape.watch(src)
        noisy = tgt0[:7] + _cloud(2522, 7, 0.05)
        r, t = kabsch(src, tf.constant(noisy))
        err = tf.reduce_sum(tf.square(tf.matmul(src, r, transpose_b=True) + t - noisy))
    return hist, tie, err, tape.gradient(err, src)


@parity(x64=True, **TOL)
def test_farthest_point_sampling_in_a_converted_loop_with_argmax_ties(tf):
    """Farthest-point sampling of 4 of 9 grid points (many tied distances: ``argmax`` takes the
    first) in a ``tf.function`` (``k`` a Python int) whose ``for i in tf.range(k)`` loop carries the running minimum
    distances and writes indices into a ``TensorArray``; the sampled points' gather gradient."""
    g = np.stack(np.meshgrid(np.arange(3.0), np.arange(3.0), indexing="ij"), -1).reshape(9, 2)
    pts = tf.constant(np.concatenate([g, np.zeros((9, 1))], -1).astype(np.float32))

    @tf.function
    def fps(p, k):
        n = tf.shape(p)[0]
        dist = tf.fill([n], 1e10)
        far = tf.constant(0, tf.int64)
        ta = tf.TensorArray(tf.int64, size=k)
        for i in tf.range(k):
            ta = ta.write(i, far)
            d = tf.reduce_sum(tf.square(p - p[far]), -1)
            dist = tf.minimum(dist, d)
            far = tf.argmax(dist, output_type=tf.int64)
        return ta.stack(), dist

    idx, dist = fps(pts, 4)
    with tf.GradientTape() as tape:
        tape.watch(pts)
        sel = tf.gather(pts, idx)
        loss = tf.reduce_sum(sel * tf.constant([[1.0, 2.0, 3.0]]))
    return idx, dist, sel, tape.gradient(loss, pts)


@parity(**TOL)
def test_knn_by_top_k_with_ties_into_an_edgeconv_layer(tf):
    """k-NN (k = 3, self included) on grid points by ``top_k`` of negated squared distances (ties
    broken towards the lower index, as TF's kernel does), an EdgeConv layer
    ``max_j relu(W [x_i, x_j - x_i])`` over the gathered neighbours, a global ``reduce_mean``
    regressed to a target; 3 SGD steps under ``tf.function``: indices, losses and gradients."""
    g = np.stack(np.meshgrid(np.arange(2.0), np.arange(3.0), indexing="ij"), -1).reshape(6, 2)
    pts = tf.constant(np.concatenate([g, 0.5 * g[:, :1] ** 2], -1).astype(np.float32))
    w = tf.Variable(init_array((6, 4), 2541))
    wo = tf.Variable(init_array((4, 1), 2542))
    opt = tf.keras.optimizers.SGD(0.05)
    _, idx = tf.math.top_k(-pairwise_sq(tf, pts, pts), k=3)

    @tf.function
    def step(p):
        with tf.GradientTape() as tape:
            tape.watch(p)
            nb = tf.gather(p, idx)                               # [6, 3, 3]
            ctr = tf.broadcast_to(p[:, None, :], tf.shape(nb))
            e = tf.nn.relu(tf.matmul(tf.concat([ctr, nb - ctr], -1), w))
            f = tf.reduce_max(e, axis=1)
            loss = tf.square(tf.reduce_mean(tf.matmul(f, wo)) - 1.0)
        gw, gwo, gp = tape.gradient(loss, [w, wo, p])
        opt.apply_gradients([(gw, w), (gwo, wo)])
        return loss, gw, gp

    return idx, [step(pts) for _ in range(3)], w


@parity(modes=True, **TOL)
def test_sinkhorn_earth_movers_loss_in_the_log_domain(tf):
    """An entropic earth-mover's loss between two 5-point clouds: 15 log-domain Sinkhorn
    iterations (``reduce_logsumexp`` of ``(f + g - C) / eps``) in a compiled ``for`` over
    ``tf.range``, the transport plan's cost; its gradient w.r.t. the predicted points by the tape
    through the loop, 2 SGD steps, and the plan's marginals."""
    a = tf.Variable(_cloud(2551, 5))
    b = tf.constant(_cloud(2552, 5) + 0.5)
    eps = 0.1
    logw = float(np.log(1.0 / 5))

    @tf.function
    def emd(p, q):
        c = pairwise_sq(tf, p, q)
        f = tf.zeros([5])
        g = tf.zeros([5])
        for _ in tf.range(15):
            f = -eps * tf.reduce_logsumexp((g[None, :] - c) / eps + logw, axis=1)
            g = -eps * tf.reduce_logsumexp((f[:, None] - c) / eps + logw, axis=0)
        plan = tf.exp((f[:, None] + g[None, :] - c) / eps + 2 * logw)
        return tf.reduce_sum(plan * c), plan

    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            cost, plan = emd(a, b)
        ga = tape.gradient(cost, a)
        a.assign_sub(0.2 * ga)
        out.append((cost, ga, tf.reduce_sum(plan, 0), tf.reduce_sum(plan, 1)))
    return out, a


# ---------------------------------------------------------------------------
# Signed distances and meshes
# ---------------------------------------------------------------------------


@parity(**TOL)
def test_sdf_network_with_the_eikonal_loss_in_a_function(tf):
    """An implicit-surface MLP (3-16-16-1, softplus) fitted to a unit sphere: the surface term
    ``|f(x_s)|`` plus the Eikonal term ``(||grad_x f|| - 1)^2`` at free points, the input gradient
    from an inner tape (a gradient of a gradient for the weights); 3 Adam steps in a compiled
    step: losses, the gradient norms' mean, and the weights' gradients."""
    rs = np.random.RandomState(2561)
    surf = rs.randn(8, 3)
    surf = (surf / np.linalg.norm(surf, axis=-1, keepdims=True)).astype(np.float32)
    free = rs.uniform(-1.5, 1.5, (8, 3)).astype(np.float32)
    vs = [tf.Variable(init_array((3, 16), 2562)), tf.Variable(np.zeros(16, np.float32)),
          tf.Variable(init_array((16, 16), 2563, 0.3)), tf.Variable(np.zeros(16, np.float32)),
          tf.Variable(init_array((16, 1), 2564, 0.3)), tf.Variable([0.0])]
    opt = tf.keras.optimizers.Adam(0.01)

    def sdf(x):
        h = tf.nn.softplus(tf.matmul(x, vs[0]) + vs[1])
        h = tf.nn.softplus(tf.matmul(h, vs[2]) + vs[3])
        return tf.matmul(h, vs[4]) + vs[5]

    @tf.function
    def step(xs, xf):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                inner.watch(xf)
                ff = sdf(xf)
            gx = inner.gradient(ff, xf)
            gn = tf.norm(gx, axis=-1)
            eik = tf.reduce_mean(tf.square(gn - 1.0))
            loss = tf.reduce_mean(tf.abs(sdf(xs))) + 0.1 * eik
        gs = outer.gradient(loss, vs)
        opt.apply_gradients(zip(gs, vs))
        return loss, eik, tf.reduce_mean(gn), gs

    return [step(tf.constant(surf), tf.constant(free)) for _ in range(3)]


@parity(**TOL)
def test_eikonal_of_a_relu_sdf_at_points_where_every_unit_is_dead(tf):
    """A ReLU SDF network with points where every hidden unit is off, so the input gradient is
    exactly zero (the other point has live units): the Eikonal loss by ``tf.norm`` gives NaN weight gradients (``sqrt`` at 0 in the
    second-order chain, as in TF), by ``sqrt(sum + 1e-12)`` finite ones; both outer gradients, and
    ``tf.norm``'s and ``l2_normalize``'s own gradients at a zero vector."""
    w1 = tf.Variable([[1.0, -1.0, 0.5], [0.5, 1.0, -1.0], [0.0, 0.5, 1.0]])
    b1 = tf.Variable([-10.0, 0.5, 0.6])
    w2 = tf.Variable([[1.0], [-0.7], [0.4]])
    x = tf.constant([[0.1, 0.2, -0.3], [-5.0, -5.0, -5.0]])

    def f(x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)

    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = f(x)
        gx = inner.gradient(y, x)
        e_norm = tf.reduce_mean(tf.square(tf.norm(gx, axis=-1) - 1.0))
        e_safe = tf.reduce_mean(tf.square(tf.sqrt(tf.reduce_sum(tf.square(gx), -1) + 1e-12) - 1.0))
    g1 = outer.gradient(e_norm, [w1, b1, w2])
    g2 = outer.gradient(e_safe, [w1, b1, w2])
    z = tf.zeros([2, 3])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(z)
        n = tf.norm(z, axis=-1)
        u = tf.math.l2_normalize(z, axis=-1)
        lu = tf.reduce_sum(u * [1.0, 2.0, 3.0])
    return gx, e_norm, g1, e_safe, g2, tape.gradient(n, z), u, tape.gradient(lu, z)


def _grid_mesh():
    """A 3x3 vertex grid, 8 triangles, its unique edges."""
    v = np.stack(np.meshgrid(np.arange(3.0), np.arange(3.0), indexing="ij"), -1).reshape(9, 2)
    faces = []
    for i in range(2):
        for j in range(2):
            a, b, c, d = 3 * i + j, 3 * i + j + 1, 3 * (i + 1) + j, 3 * (i + 1) + j + 1
            faces += [[a, b, d], [a, d, c]]
    faces = np.array(faces, np.int32)
    edges = set()
    for f in faces:
        for k in range(3):
            a, b = sorted((f[k], f[(k + 1) % 3]))
            edges.add((a, b))
    return v.astype(np.float32), faces, np.array(sorted(edges), np.int64)


@parity(modes=True, **TOL)
def test_mesh_laplacian_smoothing_with_a_sparse_matrix(tf):
    """A noisy 3x3 grid mesh denoised by 3 SGD steps on ``||V - V_noisy||^2 + lam ||L V||^2`` with
    the uniform Laplacian ``L = I - D^-1 A`` as a ``tf.SparseTensor`` (``tf.sparse.reorder``ed, used
    by ``sparse_dense_matmul``), plus an edge-length term by ``tf.gather`` of the edge ends: losses,
    the vertices' gradients and the final vertices."""
    v2, faces, edges = _grid_mesh()
    rs = np.random.RandomState(2581)
    noisy = np.concatenate([v2, np.zeros((9, 1), np.float32)], -1) + rs.randn(9, 3).astype(np.float32) * 0.1
    both = np.concatenate([edges, edges[:, ::-1]])
    deg = np.bincount(both[:, 0], minlength=9).astype(np.float32)
    idx = np.concatenate([both, np.stack([np.arange(9)] * 2, -1)])
    val = np.concatenate([-1.0 / deg[both[:, 0]], np.ones(9)]).astype(np.float32)
    lap = tf.sparse.reorder(tf.SparseTensor(idx, val, [9, 9]))
    verts = tf.Variable(noisy)
    target = tf.constant(noisy)
    opt = tf.keras.optimizers.SGD(0.2)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            lv = tf.sparse.sparse_dense_matmul(lap, verts)
            el = tf.norm(tf.gather(verts, edges[:, 0]) - tf.gather(verts, edges[:, 1]), axis=-1)
            loss = (tf.reduce_sum(tf.square(verts - target)) + 2.0 * tf.reduce_sum(tf.square(lv))
                    + 0.1 * tf.reduce_sum(tf.square(el - 1.0)))
        g = tape.gradient(loss, verts)
        opt.apply_gradients([(g, verts)])
        out.append((loss, g))
    return out, verts, tf.sparse.to_dense(lap)


@parity(**TOL)
def test_face_and_vertex_normals_with_a_degenerate_face(tf):
    """Face normals by ``tf.linalg.cross`` of edge vectors and ``l2_normalize`` (one face collapsed
    to a line: a zero normal), area-weighted vertex normals by ``tf.math.unsorted_segment_sum`` over
    the faces' corners, and a normal-consistency loss ``1 - <n_f, n_g>`` over face pairs sharing an
    edge; gradients w.r.t. the vertices; ``tf.linalg.cross`` of the normals with one up vector
    raises (TF's kernel does not broadcast) and works once the vector is broadcast."""
    v2, faces, _ = _grid_mesh()
    rs = np.random.RandomState(2591)
    v0 = np.concatenate([v2, rs.randn(9, 1).astype(np.float32) * 0.2], -1)
    v0[[0, 4, 8], 2] = 0.0                 # the diagonal 0-4-8 flat and straight: face [0, 4, 8] degenerate
    faces = np.concatenate([faces, [[0, 4, 8]]]).astype(np.int32)
    pairs = np.array([[0, 1], [1, 2], [2, 3], [4, 5], [5, 6], [6, 7], [0, 8], [3, 8]], np.int32)
    v = tf.constant(v0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(v)
        tri = tf.gather(v, faces)
        cr = tf.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        fn = tf.math.l2_normalize(cr, axis=-1)
        vn = tf.math.unsorted_segment_sum(tf.repeat(cr, 3, axis=0), tf.reshape(faces, [-1]), 9)
        vn = tf.math.l2_normalize(vn, axis=-1)
        cons = tf.reduce_mean(1.0 - tf.reduce_sum(tf.gather(fn, pairs[:, 0]) * tf.gather(fn, pairs[:, 1]), -1))
        lv = tf.reduce_sum(vn * [0.3, -0.2, 1.0])
    tilt_bad = raises(tf.linalg.cross, fn, tf.constant([0.0, 0.0, 1.0]))      # TF's kernel does not broadcast
    tilt = tf.linalg.cross(fn, tf.broadcast_to([0.0, 0.0, 1.0], tf.shape(fn)))
    return fn, cons, tape.gradient(cons, v), vn, tape.gradient(lv, v), tilt_bad, tilt


@parity(**TOL)
def test_pca_normals_by_eigh_with_repeated_eigenvalues(tf):
    """Normals from neighbourhood covariances by ``tf.linalg.eigh``: a square patch (two equal
    in-plane eigenvalues, a zero normal one), a cross-shaped one and a generic one; the eigenvalues,
    the surface variation ``l_min / sum(l)`` and its gradient w.r.t. the points (eigenvalue
    gradients are defined at repeated values), the sign-free ``n n^T`` of the generic patch and its
    gradient (distinct eigenvalues)."""
    sq = np.array([[1, 1, 0], [1, -1, 0], [-1, 1, 0], [-1, -1, 0]], np.float32)
    cross_ = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0]], np.float32)
    gen = _cloud(2601, 4) * np.array([1.0, 0.6, 0.1], np.float32)
    p = tf.constant(np.stack([sq, cross_, gen]))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(p)
        c = p - tf.reduce_mean(p, 1, keepdims=True)
        cov = tf.matmul(c, c, transpose_a=True) / 4.0
        e, v = tf.linalg.eigh(cov)
        var = e[:, 0] / tf.reduce_sum(e, -1)
        n = v[2, :, 0]
        nn = n[:, None] * n[None, :]
        l_nn = tf.reduce_sum(nn * tf.constant(init_array((3, 3), 2602)))
        ev = tf.linalg.eigvalsh(cov)
        l_ev = tf.reduce_sum(ev * [1.0, 2.0, 3.0])
    return (e, var, tape.gradient(var, p), nn, tape.gradient(l_nn, p), ev, tape.gradient(l_ev, p))


@parity(**TOL)
def test_chamfer_over_clouds_of_varying_size_through_an_input_signature(tf):
    """A compiled Chamfer-and-normalisation step with ``input_signature=[TensorSpec([None, 3])] * 2``
    over clouds of 5, 7 and 5 points: centring by ``reduce_mean``, scaling by the largest norm
    (``tf.shape`` used as ``tf.cast(tf.shape(p)[0], tf.float32)`` for the mean), a learnable
    per-axis scale Variable updated by SGD; the trace count (1, as TF), losses and gradients."""
    traces = []
    scale = tf.Variable([1.0, 1.0, 1.0])
    spec = tf.TensorSpec([None, 3], tf.float32)

    @tf.function(input_signature=[spec, spec])
    def step(p, q):
        traces.append(1)
        with tf.GradientTape() as tape:
            pc = (p - tf.reduce_mean(p, 0)) * scale
            pc = pc / tf.reduce_max(tf.norm(pc, axis=-1))
            qc = q - tf.reduce_sum(q, 0) / tf.cast(tf.shape(q)[0], tf.float32)
            qc = qc / tf.reduce_max(tf.norm(qc, axis=-1))
            d = pairwise_sq(tf, pc, qc)
            loss = tf.reduce_mean(tf.reduce_min(d, 1)) + tf.reduce_mean(tf.reduce_min(d, 0))
        g = tape.gradient(loss, scale)
        scale.assign_sub(0.1 * g)
        return loss, g

    out = [step(tf.constant(_cloud(2611 + n, n)), tf.constant(_cloud(2621 + n, n + 1))) for n in (5, 7, 5)]
    return out, scale, len(traces)


@parity(**TOL)
def test_voxel_occupancy_by_scatter_nd_with_duplicate_points(tf):
    """A 4x4x4 occupancy grid from points quantised by ``floor`` (several in one voxel, one outside
    the grid dropped by a mask and ``boolean_mask``): counts by ``tf.scatter_nd`` (duplicates
    summed), per-voxel feature sums and maxima by ``unsorted_segment_sum`` / ``unsorted_segment_max``
    over flattened voxel ids (empty voxels at the dtype's lowest value, replaced by 0), and the
    gradient of a loss on the pooled features w.r.t. the point features (tied maxima share it)."""
    rs = np.random.RandomState(2631)
    pts = rs.uniform(0, 4, (10, 3)).astype(np.float32)
    pts[3] = np.floor(pts[1]) + 0.5
    pts[1] = np.floor(pts[1]) + 0.25
    pts[7] = [4.5, 1.0, 1.0]
    feats0 = rs.randn(10, 2).astype(np.float32)
    feats0[3] = feats0[1]
    feats = tf.constant(feats0)
    p = tf.constant(pts)
    vox = tf.cast(tf.floor(p), tf.int32)
    inside = tf.reduce_all((vox >= 0) & (vox < 4), axis=-1)
    vin = tf.boolean_mask(vox, inside)
    counts = tf.scatter_nd(vin, tf.ones_like(vin[:, 0]), [4, 4, 4])
    ids = vin[:, 0] * 16 + vin[:, 1] * 4 + vin[:, 2]
    with tf.GradientTape() as tape:
        tape.watch(feats)
        f = tf.boolean_mask(feats, inside)
        s = tf.math.unsorted_segment_sum(f, ids, 64)
        m = tf.math.unsorted_segment_max(f, ids, 64)
        m = tf.where(m < -1e30, tf.zeros_like(m), m)
        loss = tf.reduce_sum(s * 0.5 + m * tf.constant([1.0, -2.0]))
    return counts, tf.reduce_sum(counts), s, m, tape.gradient(loss, feats)


@parity(modes=True, **TOL)
def test_batched_pose_refinement_by_batch_jacobian_and_lstsq(tf):
    """Per-point-set rigid alignment of 3 small batches by 2 Gauss-Newton steps: the residuals'
    Jacobian w.r.t. a [3, 6] pose batch by ``tape.batch_jacobian`` (rotation by Rodrigues' formula at
    0 first), the step by ``tf.linalg.lstsq`` with ``l2_regularizer`` (damped least squares,
    ``fast=True``): costs per step and final poses."""
    from .test_user_programs24a import rodrigues

    rs = np.random.RandomState(2641)
    src = tf.constant(rs.randn(3, 4, 3).astype(np.float32))
    true = (rs.randn(3, 6) * 0.2).astype(np.float32)
    tgt = tf.linalg.matvec(rodrigues(tf, tf.constant(true[:, None, :3])), src) + true[:, None, 3:]
    tgt = tgt + rs.randn(3, 4, 3).astype(np.float32) * 0.01
    pose = tf.zeros([3, 6])
    hist = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(pose)
            moved = tf.linalg.matvec(rodrigues(tf, pose[:, None, :3]), src) + pose[:, None, 3:]
            res = tf.reshape(moved - tgt, [3, 12])
        j = tape.batch_jacobian(res, pose)                      # [3, 12, 6]
        dx = tf.linalg.lstsq(j, -res[..., None], l2_regularizer=1e-3)[..., 0]
        pose = pose + dx
        hist.append(tf.reduce_sum(tf.square(res), -1))
    return hist, pose
