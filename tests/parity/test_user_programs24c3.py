"""Round twenty-four (c), third part: decompositions, kernels, margins and clustering written
in TF2 ops, each run under real TensorFlow 2.21 and under tapejax.

PCA by ``eigh`` of the covariance and by ``svd`` of the centred data with sklearn's sign
convention, gradients through both at repeated eigenvalues (the subspace's projector, TF's
safe reciprocal of eigenvalue gaps), null vectors from ``svd(full_matrices=True)`` of a matrix one
row or column away from square (a plane through 3 points, least-squares residuals: TF's SvdGrad
covers them), CCA by whitening with ``cholesky`` / ``triangular_solve`` and ``svd`` in float64,
LDA as a generalised eigenproblem, kernel ridge regression with hyperparameters fitted through
``cholesky_solve``, random Fourier features solved by ``lstsq``; linear SVMs by hinge and squared
hinge with points exactly on the margin (``maximum`` and ``relu`` at 0) and a kernel SVM's dual by
projected ascent (``clip_by_value`` at the box), Gaussian naive Bayes by segment sums with an
empty class and multinomial naive Bayes on ``SparseTensor`` counts, k-means with equidistant
points and an empty cluster in a converted ``while`` loop, mini-batch k-means from ``tf.data``
with Variable scatter updates, a DEC-style soft k-means trained by Adam, isotonic regression by
the min-max formula (``reduce_max`` / ``reduce_min`` ties), factor analysis by EM and lasso by
coordinate descent.  Noise is NumPy's, fed in.
"""
import numpy as np

from .harness import init_array, parity, raises

TOL = dict(rtol=2e-4, atol=2e-5)
LOOSE = dict(rtol=1e-3, atol=1e-4)

# ---------------------------------------------------------------------------
# PCA, CCA, LDA
# ---------------------------------------------------------------------------


def _flip_signs(tf, v):
    """sklearn's ``svd_flip``: each column's largest-magnitude entry made positive."""
    idx = tf.argmax(tf.abs(v), axis=0)
    signs = tf.sign(tf.gather(tf.transpose(v), idx, batch_dims=1))
    return v * signs[None, :]


@parity(**TOL)
def test_pca_by_eigh_and_by_svd_with_sign_flips_and_gradients(tf):
    """PCA of 12 points in 4-D two ways: ``eigh`` of the covariance (eigenvalues ascending,
    reversed by ``reverse``) and ``svd`` of the centred data (``s^2/(n-1)``), components sign-fixed
    as sklearn does; explained variance ratios, the reconstruction error with 2 components, and its
    gradient w.r.t. the data through each decomposition (they agree)."""
    rs = np.random.RandomState(2500)
    x = (rs.randn(12, 4) * np.array([3.0, 2.0, 1.0, 0.5])).astype(np.float32) @ init_array((4, 4), 2501, 1.0)
    X = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(X)
        xc = X - tf.reduce_mean(X, 0)
        cov = tf.matmul(xc, xc, transpose_a=True) / 11.0
        e, v = tf.linalg.eigh(cov)
        e, v = tf.reverse(e, [0]), _flip_signs(tf, tf.reverse(v, [1]))
        s, _, vs = tf.linalg.svd(xc)
        vs = _flip_signs(tf, vs)
        rec_e = tf.reduce_sum(tf.square(xc - tf.matmul(tf.matmul(xc, v[:, :2]), v[:, :2], transpose_b=True)))
        rec_s = tf.reduce_sum(tf.square(xc - tf.matmul(tf.matmul(xc, vs[:, :2]), vs[:, :2], transpose_b=True)))
    return (e, tf.square(s) / 11.0, e / tf.reduce_sum(e), v, vs, rec_e, rec_s,
            tape.gradient(rec_e, X), tape.gradient(rec_s, X))


@parity(**TOL)
def test_pca_gradients_at_repeated_eigenvalues(tf):
    """A covariance with an exactly repeated eigenvalue (isotropic in a 2-D subspace): the
    projector onto that eigenspace is well defined, and TF's ``eigh`` gradient (a safe reciprocal
    of the eigenvalue gaps, 0 where they tie) gives it a finite gradient; the same for the
    singular subspace of the tied singular values by ``svd``, the eigenvalues' gradient, and
    ``eigvalsh``'s.  (At ties broken by rounding, ``1/gap`` is ~1e7 and neither side's value
    means anything, so the tie is exact here.)"""
    # eigenvalues 2, 2 (exactly: the two decoupled diagonal entries), 3 and 5
    a = np.array([[2.0, 0.0, 0.0, 0.0], [0.0, 4.0, 1.0, 0.0], [0.0, 1.0, 4.0, 0.0], [0.0, 0.0, 0.0, 2.0]], np.float32)
    wts = tf.constant(init_array((4, 4), 2506, 1.0))
    A = tf.constant(a)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(A)
        e, v = tf.linalg.eigh(A)
        mid = v[:, 0:2]
        proj = tf.matmul(mid, mid, transpose_b=True)
        l_proj = tf.reduce_sum(proj * wts)
        l_e = tf.reduce_sum(e * tf.constant([1.0, -1.0, 2.0, 0.5]))
        l_ev = tf.reduce_sum(tf.linalg.eigvalsh(A) ** 2)
        s, u, _ = tf.linalg.svd(A)
        top = u[:, 2:]
        l_svd = tf.reduce_sum(tf.matmul(top, top, transpose_b=True) * wts) + tf.reduce_sum(s)
    return (e, proj, tape.gradient(l_proj, A), tape.gradient(l_e, A), tape.gradient(l_ev, A),
            tape.gradient(l_svd, A))


@parity(**TOL)
def test_null_vectors_of_the_full_svd_plane_fit_and_least_squares_residuals(tf):
    """The extra singular vector of ``svd(full_matrices=True)`` as a null vector: the plane
    ``n . [x, 1] = 0`` through 3 points in 3-D is the last column of ``v`` of the 3x4 homogeneous
    system (normalised so its last entry is 1, sign-free); the direction orthogonal to the column
    space of a 4x3 design is the last column of ``u``, whose projector gives the least-squares
    residual (against ``lstsq``'s).  Gradients of both w.r.t. the points and the design (TF's
    SvdGrad covers one extra row or column)."""
    pts = tf.constant([[1.0, 0.0, 0.5], [0.0, 1.0, 0.2], [0.3, 0.4, 1.0]])
    X = tf.constant([[1.0, 0.2, -0.5], [1.0, 1.5, 0.3], [1.0, -0.7, 0.8], [1.0, 0.4, 2.0]])
    y = tf.constant([[0.5], [1.0], [-0.3], [2.0]])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([pts, X])
        A = tf.concat([pts, tf.ones([3, 1])], 1)
        _, _, v = tf.linalg.svd(A, full_matrices=True)
        plane = v[:, 3] / v[3, 3]
        h = tf.reduce_sum(plane * tf.constant([0.3, -1.0, 2.0, 0.5]))
        _, u, _ = tf.linalg.svd(X, full_matrices=True)
        q = u[:, 3:]
        resid = tf.matmul(q, tf.matmul(q, y, transpose_a=True))
        rss = tf.reduce_sum(tf.square(resid))
        rss_ls = tf.reduce_sum(tf.square(y - tf.matmul(X, tf.linalg.lstsq(X, y))))
    return (plane, tf.linalg.matvec(A, plane), rss, rss - rss_ls, tape.gradient(h, pts),
            tape.gradient(rss, X), tape.gradient(rss_ls, X))


@parity(x64=True, **TOL)
def test_cca_by_whitening_and_svd_in_float64(tf):
    """CCA between 2-D and 3-D views of 15 samples in float64: regularised covariances, whitening
    by ``cholesky`` and ``triangular_solve``, canonical correlations as singular values of the
    whitened cross-covariance, the first pair of canonical directions (signs fixed); and the
    gradient of the sum of correlations w.r.t. both views (the deep-CCA objective)."""
    rs = np.random.RandomState(2510)
    z = rs.randn(15, 1)
    xa = np.concatenate([z + 0.3 * rs.randn(15, 1), rs.randn(15, 1)], 1)
    xb = np.concatenate([-z + 0.5 * rs.randn(15, 1), rs.randn(15, 2)], 1)
    A, B = tf.constant(xa), tf.constant(xb)
    with tf.GradientTape() as tape:
        tape.watch([A, B])
        ac = A - tf.reduce_mean(A, 0)
        bc = B - tf.reduce_mean(B, 0)
        saa = tf.matmul(ac, ac, transpose_a=True) / 14.0 + 1e-3 * tf.eye(2, dtype=tf.float64)
        sbb = tf.matmul(bc, bc, transpose_a=True) / 14.0 + 1e-3 * tf.eye(3, dtype=tf.float64)
        sab = tf.matmul(ac, bc, transpose_a=True) / 14.0
        la, lb = tf.linalg.cholesky(saa), tf.linalg.cholesky(sbb)
        t1 = tf.linalg.triangular_solve(la, sab, lower=True)
        t = tf.transpose(tf.linalg.triangular_solve(lb, tf.transpose(t1), lower=True))
        s, u, v = tf.linalg.svd(t)
        corr = tf.reduce_sum(s)
    wa = tf.linalg.triangular_solve(la, u, lower=True, adjoint=True)
    ga, gb = tape.gradient(corr, [A, B])
    return s, _flip_signs(tf, wa)[:, 0], ga, gb


@parity(x64=True, **TOL)
def test_lda_as_a_generalised_eigenproblem(tf):
    """Fisher LDA on 3 classes in 3-D (float64): class means by ``unsorted_segment_mean``, the
    within- and between-class scatters, ``S_b w = lambda S_w w`` reduced to ``eigh`` by the
    Cholesky factor of ``S_w``; the discriminant eigenvalues (the last one 0 up to rounding: two
    non-zero for 3 classes), the projected class means, and the Fisher ratio's gradient w.r.t. the
    first direction."""
    rs = np.random.RandomState(2515)
    means = np.array([[0.0, 0.0, 0.0], [2.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    y = np.repeat([0, 1, 2], 5).astype(np.int32)
    x = means[y] + rs.randn(15, 3) * 0.6
    X = tf.constant(x)
    mu = tf.math.unsorted_segment_mean(X, y, 3)
    m = tf.reduce_mean(X, 0)
    d = X - tf.gather(mu, y)
    sw = tf.matmul(d, d, transpose_a=True)
    dm = (mu - m) * 5.0 ** 0.5
    sb = tf.matmul(dm, dm, transpose_a=True)
    L = tf.linalg.cholesky(sw)
    li = tf.linalg.triangular_solve(L, tf.eye(3, dtype=tf.float64), lower=True)
    e, v = tf.linalg.eigh(tf.matmul(tf.matmul(li, sb), li, transpose_b=True))
    w = tf.linalg.triangular_solve(L, v, lower=True, adjoint=True)
    w = _flip_signs(tf, tf.reverse(w, [1]))
    w1 = tf.Variable(w[:, 0])
    with tf.GradientTape() as tape:
        ratio = tf.reduce_sum(w1 * tf.linalg.matvec(sb, w1)) / tf.reduce_sum(w1 * tf.linalg.matvec(sw, w1))
    return tf.reverse(e, [0])[:2], tf.matmul(mu, w[:, :2]), ratio, tape.gradient(ratio, w1)


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@parity(modes=True, **LOOSE)
def test_kernel_ridge_hyperparameters_by_adam_through_cholesky_solve(tf):
    """Kernel ridge regression with an RBF kernel: the fit by ``cholesky`` / ``cholesky_solve``
    of ``K + lambda I``, the validation MSE on held-out points as the loss of the log length scale
    and log lambda, 5 Adam steps on both; the closed-form leave-one-out residuals ``alpha_i /
    (K + lambda I)^-1_ii``; losses, gradients, hyperparameters."""
    rs = np.random.RandomState(2520)
    xtr = np.sort(rs.uniform(-2, 2, (10, 1)), 0).astype(np.float32)
    ytr = (np.sin(2 * xtr[:, 0]) + 0.1 * rs.randn(10)).astype(np.float32)
    xva = rs.uniform(-2, 2, (6, 1)).astype(np.float32)
    yva = np.sin(2 * xva[:, 0]).astype(np.float32)
    log_ls = tf.Variable(0.0)
    log_lam = tf.Variable(-1.0)
    opt = tf.keras.optimizers.Adam(0.1)

    def rbf(a, b, ls):
        d = tf.reduce_sum(tf.square(a[:, None, :] - b[None, :, :]), -1)
        return tf.exp(-0.5 * d / tf.square(ls))

    out = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            ls, lam = tf.exp(log_ls), tf.exp(log_lam)
            K = rbf(xtr, xtr, ls) + lam * tf.eye(10)
            L = tf.linalg.cholesky(K)
            alpha = tf.linalg.cholesky_solve(L, ytr[:, None])
            pred = tf.matmul(rbf(xva, xtr, ls), alpha)[:, 0]
            loss = tf.reduce_mean(tf.square(pred - yva))
        g = tape.gradient(loss, [log_ls, log_lam])
        opt.apply_gradients(zip(g, [log_ls, log_lam]))
        kinv = tf.linalg.cholesky_solve(L, tf.eye(10))
        loo = alpha[:, 0] / tf.linalg.diag_part(kinv)
        out.append((loss, g, tf.reduce_mean(tf.square(loo))))
    return out, log_ls, log_lam


@parity(**LOOSE)
def test_random_fourier_features_ridge_by_lstsq(tf):
    """Random Fourier features for an RBF kernel (NumPy's ``W ~ N(0, 1/ls^2)``, ``b ~ U(0, 2 pi)``),
    ``z(x) = sqrt(2/D) cos(x W + b)``; the ridge solution by ``tf.linalg.lstsq(Z, y,
    l2_regularizer=0.1)`` and by the normal equations, the kernel approximation error against the
    exact RBF Gram matrix, and the gradient of the training MSE w.r.t. the targets through
    ``lstsq``."""
    rs = np.random.RandomState(2525)
    x = rs.uniform(-1, 1, (12, 2)).astype(np.float32)
    y = (np.sin(3 * x[:, 0]) * np.cos(2 * x[:, 1]))[:, None].astype(np.float32)
    W = (rs.randn(2, 20) / 0.7).astype(np.float32)
    b = rs.uniform(0, 2 * np.pi, 20).astype(np.float32)
    Y = tf.constant(y)
    Z = np.sqrt(2.0 / 20) * tf.cos(tf.matmul(x, W) + b)
    with tf.GradientTape() as tape:
        tape.watch(Y)
        beta = tf.linalg.lstsq(Z, Y, l2_regularizer=0.1)
        mse = tf.reduce_mean(tf.square(tf.matmul(Z, beta) - Y))
    beta_ne = tf.linalg.solve(tf.matmul(Z, Z, transpose_a=True) + 0.1 * tf.eye(20), tf.matmul(Z, Y, transpose_a=True))
    d = tf.reduce_sum(tf.square(x[:, None, :] - x[None, :, :]), -1)
    exact = tf.exp(-0.5 * d / 0.49)
    approx = tf.matmul(Z, Z, transpose_b=True)
    return beta, beta - beta_ne, mse, tape.gradient(mse, Y), tf.reduce_max(tf.abs(exact - approx))


# ---------------------------------------------------------------------------
# SVMs, naive Bayes
# ---------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_linear_svm_hinge_and_squared_hinge_with_points_on_the_margin(tf):
    """A linear SVM on 8 points, two of them exactly on the margin at the start (``y f = 1``):
    the hinge by ``maximum(0, 1 - y f)`` (TF sends the tie's gradient to the first argument, so
    those points give 0), by ``relu`` (0 at 0), and Keras's ``Hinge`` / ``SquaredHinge`` losses;
    3 Pegasos-style SGD steps with L2: losses, the three gradients, weights."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [-2.0, -0.5],
                  [0.5, 0.5], [-0.3, 0.2]], np.float32)
    y = np.array([1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0], np.float32)
    w = tf.Variable([1.0, 0.0])   # points 0 and 3 sit on the margin
    b = tf.Variable(0.0)
    hinge, sq = tf.keras.losses.Hinge(), tf.keras.losses.SquaredHinge()
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            f = tf.linalg.matvec(x, w) + b
            l_max = tf.reduce_mean(tf.maximum(0.0, 1.0 - y * f)) + 0.05 * tf.reduce_sum(tf.square(w))
            l_relu = tf.reduce_mean(tf.nn.relu(1.0 - y * f))
            l_k = hinge(y, f) + sq(y, f)
        g_max = tape.gradient(l_max, [w, b])
        g_relu = tape.gradient(l_relu, [w, b])
        g_k = tape.gradient(l_k, [w, b])
        del tape
        w.assign_sub(0.2 * g_max[0])
        b.assign_sub(0.2 * g_max[1])
        out.append((l_max, l_relu, l_k, g_max, g_relu, g_k))
    return out, w, b


@parity(**TOL)
def test_gaussian_naive_bayes_with_an_empty_class(tf):
    """Gaussian naive Bayes for 4 classes where class 3 has no training points: counts, means and
    variances by ``unsorted_segment_sum`` (the empty class's mean 0 by ``divide_no_nan``), sklearn's
    ``var_smoothing``, log priors with ``log(0) = -inf``, the joint log-likelihoods, ``log_softmax``
    over classes with a ``-inf`` column, probabilities, and predictions."""
    rs = np.random.RandomState(2530)
    y = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0], np.int32)
    x = (rs.randn(10, 2) + np.array([[0, 0], [2, 0], [0, 2]])[y]).astype(np.float32)
    X = tf.constant(x)
    n = tf.math.unsorted_segment_sum(tf.ones([10]), y, 4)
    mean = tf.math.divide_no_nan(tf.math.unsorted_segment_sum(X, y, 4), n[:, None])
    sq = tf.math.unsorted_segment_sum(tf.square(X - tf.gather(mean, y)), y, 4)
    var = tf.math.divide_no_nan(sq, n[:, None]) + 1e-9 * tf.reduce_max(tf.math.reduce_variance(X, 0))
    log_prior = tf.math.log(n / 10.0)
    xq = tf.constant([[0.1, 0.2], [2.1, -0.3], [0.0, 2.5]])
    jll = log_prior[None, :] - 0.5 * tf.reduce_sum(
        tf.math.log(2 * np.pi * var)[None] + tf.square(xq[:, None, :] - mean[None]) / var[None], -1)
    logp = tf.nn.log_softmax(jll)
    return n, mean, var, log_prior, jll, logp, tf.exp(logp), tf.cast(tf.argmax(jll, 1), tf.int32)


# ---------------------------------------------------------------------------
# Clustering, isotonic regression
# ---------------------------------------------------------------------------


@parity(**TOL)
def test_kmeans_lloyd_with_ties_and_an_empty_cluster_in_a_while_loop(tf):
    """Lloyd's k-means in a ``tf.function`` ``while`` loop until the centres stop moving: a point
    exactly equidistant from two centres (``argmin`` takes the first), a centre no point chooses
    (kept where its count is 0 by ``tf.where``), the iteration count, inertia and assignments;
    and k-means++ seeding from NumPy uniforms by ``cumsum`` and ``searchsorted``."""
    x = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [5.0, 5.0], [5.0, 6.0], [6.0, 5.0],
                  [2.5, 2.5], [0.5, 0.5]], np.float32)
    init = np.array([[0.0, 0.0], [5.0, 5.0], [20.0, 20.0]], np.float32)  # [2.5,2.5] ties 0 and 1
    X = tf.constant(x)

    @tf.function
    def lloyd(c):
        it = tf.constant(0)
        shift = tf.constant(1.0)
        a = tf.zeros([8], tf.int64)
        while shift > 1e-6 and it < 20:
            d = tf.reduce_sum(tf.square(X[:, None, :] - c[None, :, :]), -1)
            a = tf.argmin(d, 1)
            cnt = tf.math.unsorted_segment_sum(tf.ones([8]), a, 3)
            s = tf.math.unsorted_segment_sum(X, a, 3)
            new = tf.where(cnt[:, None] > 0, s / tf.maximum(cnt, 1.0)[:, None], c)
            shift = tf.reduce_max(tf.abs(new - c))
            c = new
            it += 1
        inertia = tf.reduce_sum(tf.reduce_min(tf.reduce_sum(tf.square(X[:, None, :] - c[None, :, :]), -1), 1))
        return c, tf.cast(a, tf.int32), it, inertia

    first = lloyd(tf.constant(init))
    # k-means++: the first centre is point 0, the next drawn proportionally to D^2
    u = np.array([0.37, 0.81], np.float32)
    centres = [X[0]]
    for k in range(2):
        d2 = tf.reduce_min(tf.stack([tf.reduce_sum(tf.square(X - c), 1) for c in centres]), 0)
        cdf = tf.cumsum(d2) / tf.reduce_sum(d2)
        idx = tf.searchsorted(cdf, tf.constant([u[k]]))[0]
        centres.append(tf.gather(X, idx))
    second = lloyd(tf.stack(centres))
    return first, second, tf.stack(centres)


@parity(modes=True, **LOOSE)
def test_dec_style_soft_kmeans_with_student_t_assignments(tf):
    """Soft k-means as in DEC: Student-t soft assignments ``q_ij ∝ (1 + ||x_i - mu_j||^2)^-1``,
    the sharpened target ``p ∝ q^2 / f_j`` held by ``stop_gradient``, ``KL(P || Q)`` minimised over
    the centres and a linear embedding by 4 Adam steps in a compiled step; and the soft-min
    (temperature) k-means objective's gradient by the tape against the weighted means."""
    rs = np.random.RandomState(2540)
    x = np.concatenate([rs.randn(5, 3) * 0.3, rs.randn(5, 3) * 0.3 + 2.0]).astype(np.float32)
    emb = tf.Variable(init_array((3, 2), 2541, 0.7))
    mu = tf.Variable(init_array((2, 2), 2542, 1.0))
    opt = tf.keras.optimizers.Adam(0.05)
    vs = [emb, mu]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            z = tf.matmul(x, emb)
            d = tf.reduce_sum(tf.square(z[:, None, :] - mu[None]), -1)
            q = 1.0 / (1.0 + d)
            q = q / tf.reduce_sum(q, 1, keepdims=True)
            p = tf.square(q) / tf.reduce_sum(q, 0)
            p = tf.stop_gradient(p / tf.reduce_sum(p, 1, keepdims=True))
            kl = tf.reduce_sum(p * tf.math.log(p / q))
        g = tape.gradient(kl, vs)
        opt.apply_gradients(zip(g, vs))
        return kl, g, q

    hist = [step() for _ in range(4)]
    c = tf.constant([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    with tf.GradientTape() as tape:
        tape.watch(c)
        d = tf.reduce_sum(tf.square(x[:, None, :] - c[None]), -1)
        soft = -0.5 * tf.reduce_sum(tf.reduce_logsumexp(-d / 0.5, 1))
    r = tf.nn.softmax(-d / 0.5, 1)
    closed = tf.matmul(r, x, transpose_a=True) - tf.reduce_sum(r, 0)[:, None] * c
    return hist, soft, tape.gradient(soft, c), -closed


@parity(**TOL)
def test_isotonic_regression_by_the_min_max_formula_with_ties(tf):
    """Isotonic regression (weighted, nondecreasing) by the min-max formula
    ``f_k = max_{i<=k} min_{j>=k} mean(y[i..j])`` from ``cumsum``s, masked with large constants:
    the fit (pooled blocks give tied values), its gradient w.r.t. ``y`` (``reduce_max`` /
    ``reduce_min`` split the gradient between tied maxima, as TF does), against the pool-adjacent
    block means; and a projection of a Variable onto monotone sequences after each SGD step."""
    y = tf.constant([1.0, 3.0, 2.0, 2.0, 5.0, 4.0, 4.0, 6.0])
    w = tf.constant([1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0])

    def isotonic(y, w):
        n = 8
        cw = tf.concat([[0.0], tf.cumsum(w)], 0)
        cy = tf.concat([[0.0], tf.cumsum(w * y)], 0)
        ii = tf.range(n)[:, None]
        jj = tf.range(n)[None, :]
        means = (tf.gather(cy, jj + 1) - tf.gather(cy, ii)) / (tf.gather(cw, jj + 1) - tf.gather(cw, ii) + 1e-12)
        valid = ii <= jj
        means = tf.where(valid, means, 1e9)
        # mins[i, k] = min_{j >= k} means[i, j]
        kk = tf.range(n)[None, :, None]
        mins = tf.reduce_min(tf.where(jj[:, None, :] >= kk, means[:, None, :], 1e9), -1)
        mins = tf.where(valid, mins, -1e9)
        return tf.reduce_max(mins, 0)

    with tf.GradientTape() as tape:
        tape.watch(y)
        f = isotonic(y, w)
        loss = tf.reduce_sum(f * tf.range(1.0, 9.0))
    g = tape.gradient(loss, y)
    v = tf.Variable([0.0, 0.5, 0.2, 0.9, 0.1, 1.0, 1.2, 1.1])
    hist = []
    for _ in range(3):
        with tf.GradientTape() as t2:
            l2 = tf.reduce_sum(tf.square(v - tf.range(0.0, 8.0) * 0.3))
        v.assign_sub(0.2 * t2.gradient(l2, v))
        v.assign(isotonic(v, tf.ones([8])))
        hist.append((l2, tf.identity(v)))
    return f, g, hist


# ---------------------------------------------------------------------------
# Factor analysis, lasso
# ---------------------------------------------------------------------------


@parity(x64=True, **TOL)
def test_factor_analysis_by_em_in_float64(tf):
    """Factor analysis with 2 factors on 5-D data by EM, as sklearn's older solver: the E-step's
    ``beta = W^T (W W^T + Psi)^-1`` by ``tf.linalg.inv``, the M-step's new loadings by ``solve``,
    ``Psi`` the clipped diagonal; 6 iterations in float64: log-likelihoods by ``slogdet``, the
    loadings' invariant ``W W^T``, ``Psi``; and ``cholesky`` of a non-positive-definite matrix
    raising TF's ``InvalidArgumentError``."""
    rs = np.random.RandomState(2550)
    wtrue = rs.randn(5, 2)
    z = rs.randn(30, 2)
    x = z @ wtrue.T + rs.randn(30, 5) * np.sqrt([0.1, 0.2, 0.3, 0.1, 0.5])
    X = tf.constant(x - x.mean(0))
    S = tf.matmul(X, X, transpose_a=True) / 30.0
    W = tf.constant(rs.randn(5, 2) * 0.5)
    psi = tf.linalg.diag_part(S)
    lls = []
    for _ in range(6):
        sigma = tf.matmul(W, W, transpose_b=True) + tf.linalg.diag(psi)
        sign, logdet = tf.linalg.slogdet(sigma)
        lls.append(-0.5 * 30 * (5 * np.log(2 * np.pi) + logdet + tf.linalg.trace(tf.linalg.solve(sigma, S))))
        beta = tf.matmul(W, tf.linalg.inv(sigma), transpose_a=True)                 # [2, 5]
        ezz = tf.eye(2, dtype=tf.float64) - tf.matmul(beta, W) + tf.matmul(tf.matmul(beta, S), beta, transpose_b=True)
        W = tf.transpose(tf.linalg.solve(ezz, tf.matmul(beta, S)))
        psi = tf.maximum(tf.linalg.diag_part(S - tf.matmul(W, tf.matmul(beta, S))), 1e-6)
    bad = tf.constant([[1.0, 2.0], [2.0, 1.0]], tf.float64)
    return lls, tf.matmul(W, W, transpose_b=True), psi, raises(lambda: tf.linalg.cholesky(bad).numpy())


@parity(**TOL)
def test_lasso_by_coordinate_descent_in_a_converted_loop(tf):
    """Lasso by cyclic coordinate descent in ``tf.function``: a ``for`` over ``tf.range`` of sweeps
    with an inner Python loop over 4 coordinates, each update a soft threshold of the partial
    residual's correlation, written into the coefficient vector by
    ``tensor_scatter_nd_update``; the coefficients (some exactly 0), the objective, and a
    dual-gap-like KKT check ``|X^T r / n| <= lambda`` on the zero coefficients."""
    rs = np.random.RandomState(2560)
    x = rs.randn(20, 4).astype(np.float32)
    y = (x @ np.array([1.5, 0.0, -0.7, 0.0], np.float32) + 0.1 * rs.randn(20)).astype(np.float32)
    X, Y = tf.constant(x), tf.constant(y)
    lam = 0.2
    col_sq = tf.reduce_sum(tf.square(X), 0) / 20.0

    @tf.function
    def fit():
        beta = tf.zeros([4])
        for _ in tf.range(15):
            for j in range(4):
                r = Y - tf.linalg.matvec(X, beta) + X[:, j] * beta[j]
                rho = tf.reduce_sum(X[:, j] * r) / 20.0
                bj = tf.sign(rho) * tf.maximum(tf.abs(rho) - lam, 0.0) / col_sq[j]
                beta = tf.tensor_scatter_nd_update(beta, [[j]], [bj])
        return beta

    beta = fit()
    r = Y - tf.linalg.matvec(X, beta)
    obj = 0.5 * tf.reduce_mean(tf.square(r)) + lam * tf.reduce_sum(tf.abs(beta))
    kkt = tf.abs(tf.linalg.matvec(X, r, transpose_a=True) / 20.0)
    return beta, obj, kkt, tf.equal(beta, 0.0)


@parity(modes=True, **TOL)
def test_minibatch_kmeans_from_a_dataset_with_variable_scatter_updates(tf):
    """Sculley's mini-batch k-means fed by ``tf.data`` (shuffle-free batches of 4 from 12 points):
    per-centre counts in an int Variable updated by ``scatter_nd_add``, each centre moved by the
    per-sample rate ``1/count`` through ``Variable.scatter_nd_update`` of the touched rows (the
    last write wins for a centre hit twice in a batch, as a loop over the batch would not), and
    a tied point assigned by ``argmin`` to the lower index; centres, counts, and the inertia."""
    rs = np.random.RandomState(2570)
    x = np.concatenate([rs.randn(6, 2) * 0.3, rs.randn(6, 2) * 0.3 + 3.0]).astype(np.float32)
    x[5] = [1.5, 1.5]   # equidistant from the two starting centres
    centres = tf.Variable(np.array([[0.0, 0.0], [3.0, 3.0]], np.float32))
    counts = tf.Variable(np.zeros(2, np.int32))
    ds = tf.data.Dataset.from_tensor_slices(x).batch(4)
    hist = []
    for batch in ds:
        d = tf.reduce_sum(tf.square(batch[:, None, :] - centres[None]), -1)
        a = tf.argmin(d, 1, output_type=tf.int32)
        counts.scatter_nd_add(a[:, None], tf.ones_like(a))
        eta = 1.0 / tf.cast(tf.gather(counts, a), tf.float32)
        c = tf.gather(centres, a)
        new = (1.0 - eta[:, None]) * c + eta[:, None] * batch
        centres.scatter_nd_update(a[:, None], new)
        hist.append((a, tf.identity(counts), tf.identity(centres)))
    inertia = tf.reduce_sum(tf.reduce_min(tf.reduce_sum(tf.square(x[:, None] - centres[None]), -1), 1))
    return hist, inertia


@parity(**TOL)
def test_multinomial_naive_bayes_on_sparse_counts(tf):
    """Multinomial naive Bayes for bag-of-words counts held as a ``tf.SparseTensor``: per-class
    feature counts by ``sparse_dense_matmul`` of the transposed one-hot labels, Laplace smoothing,
    log-probabilities, the joint log-likelihood of sparse test documents (a document with no
    words gets the log prior), ``log_softmax`` posteriors and predictions."""
    counts = np.array([[2, 0, 1, 0, 0], [0, 3, 0, 1, 0], [1, 0, 2, 0, 0], [0, 1, 0, 2, 1],
                       [3, 0, 0, 0, 0], [0, 0, 0, 1, 2]], np.float32)
    y = np.array([0, 1, 0, 1, 0, 2], np.int32)
    X = tf.sparse.from_dense(tf.constant(counts))
    onehot = tf.one_hot(y, 3)
    fc = tf.transpose(tf.sparse.sparse_dense_matmul(tf.sparse.transpose(X), onehot))     # [3, 5]
    smoothed = fc + 1.0
    log_prob = tf.math.log(smoothed) - tf.math.log(tf.reduce_sum(smoothed, 1, keepdims=True))
    log_prior = tf.math.log(tf.reduce_sum(onehot, 0) / 6.0)
    test = tf.sparse.SparseTensor(indices=[[0, 0], [0, 2], [1, 3], [1, 4]], values=[1.0, 2.0, 1.0, 1.0],
                                  dense_shape=[3, 5])
    jll = tf.sparse.sparse_dense_matmul(test, log_prob, adjoint_b=True) + log_prior
    post = tf.nn.log_softmax(jll)
    return fc, log_prob, log_prior, jll, tf.exp(post), tf.argmax(jll, 1, output_type=tf.int32)


@parity(modes=True, **TOL)
def test_kernel_svm_dual_by_projected_gradient_ascent(tf):
    """A soft-margin kernel SVM in the dual: ``max sum(a) - 1/2 a^T Q a`` with ``Q = yy^T K`` (RBF),
    projected gradient ascent with ``clip_by_value(a, 0, C)`` (the gradient by the tape, box
    constraints active for some ``a``), 8 steps; the dual objective, the number at each bound,
    the bias from the free support vectors, and the decision values."""
    rs = np.random.RandomState(2580)
    x = np.concatenate([rs.randn(5, 2) + 1.0, rs.randn(5, 2) - 1.0]).astype(np.float32)
    y = np.array([1.0] * 5 + [-1.0] * 5, np.float32)
    d = np.sum((x[:, None] - x[None]) ** 2, -1)
    Q = tf.constant((y[:, None] * y[None]) * np.exp(-0.5 * d).astype(np.float32))
    a = tf.Variable(np.full(10, 0.1, np.float32))
    C = 1.0
    hist = []
    for _ in range(8):
        with tf.GradientTape() as tape:
            dual = tf.reduce_sum(a) - 0.5 * tf.reduce_sum(a * tf.linalg.matvec(Q, a))
        g = tape.gradient(dual, a)
        a.assign(tf.clip_by_value(a + 0.3 * g, 0.0, C))
        hist.append((dual, tf.reduce_sum(tf.cast(tf.equal(a, 0.0), tf.int32)),
                     tf.reduce_sum(tf.cast(tf.equal(a, C), tf.int32))))
    free = tf.logical_and(a > 0.0, a < C)
    f_no_b = tf.linalg.matvec(Q * y[None, :] * y[:, None], a * y)
    b = tf.reduce_sum(tf.where(free, y - f_no_b, 0.0)) / tf.maximum(tf.reduce_sum(tf.cast(free, tf.float32)), 1.0)
    return hist, a, b, f_no_b + b
