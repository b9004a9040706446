"""Round twenty-four (c), second part: ranking losses, sparse transforms and iterative
solvers written in TF2 ops, each run under real TensorFlow 2.21 and under tapejax.

Ranking: pairwise logistic (RankNet) losses with tied labels masked, ListNet, ApproxNDCG with
sigmoid ranks, LambdaRank weights from ``argsort`` (ties among scores and labels: TF's
``argsort`` keeps tied entries in index order in both directions), Spearman's and Kendall's
rank correlations with average ranks for ties, ROC AUC by Mann-Whitney.  Sparse transforms:
sparsemax and 1.5-entmax written by hand (``sort``, ``cumsum``, the support threshold) in a
soft decision tree and a NODE-style oblivious tree.  Iterative solvers: NMF by multiplicative
updates (Frobenius and KL), ISTA / FISTA sparse coding and LISTA trained through its unrolled
iterations, Sinkhorn optimal transport in the log domain with gradients through the iterations
(unrolled eagerly, and to a tolerance in ``tf.function`` with ``set_loop_options``'s bound).
Noise is NumPy's, fed in.
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-4, atol=2e-5)
LOOSE = dict(rtol=1e-3, atol=1e-4)

# ---------------------------------------------------------------------------
# Ranking
# ---------------------------------------------------------------------------

LABELS = np.array([[2.0, 1.0, 0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 1.0, 3.0, 1.0, 0.0]], np.float32)


@parity(modes=True, **TOL)
def test_pairwise_logistic_ranknet_with_tied_labels_masked(tf):
    """RankNet on 2 queries of 6 documents with tied labels: the pair mask ``labels_i >
    labels_j``, ``softplus(-(s_i - s_j))`` summed over the mask and normalised by its count; a
    linear scorer with some documents sharing features (tied scores); 4 Adam steps: losses and
    gradients."""
    rs = np.random.RandomState(2450)
    feats = rs.randn(2, 6, 3).astype(np.float32)
    feats[0, 4] = feats[0, 2]  # two documents with the same features and label
    w = tf.Variable(init_array((3,), 2451, 0.3))
    opt = tf.keras.optimizers.Adam(0.05)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            s = tf.linalg.matvec(tf.constant(feats), w)
            diff = s[:, :, None] - s[:, None, :]
            mask = tf.cast(LABELS[:, :, None] > LABELS[:, None, :], tf.float32)
            loss = tf.reduce_sum(mask * tf.nn.softplus(-diff)) / tf.reduce_sum(mask)
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, g))
    return out, w


@parity(modes=True, **TOL)
def test_listnet_and_approx_ndcg_in_a_compiled_step(tf):
    """ListNet (softmax cross-entropy between ``softmax(labels)`` and the scores) plus ApproxNDCG
    (each rank ``1 + sum_j sigmoid((s_j - s_i)/T)``, the gain ``2^l - 1`` over ``log2(1 + rank)``,
    the ideal DCG from labels sorted by ``tf.sort(DESCENDING)``) on a 2-layer scorer in a
    ``tf.function`` with Adam; 4 steps: both losses, the approximate ranks and gradients."""
    rs = np.random.RandomState(2452)
    feats = rs.randn(2, 6, 4).astype(np.float32)
    w1 = tf.Variable(init_array((4, 5), 2453))
    w2 = tf.Variable(init_array((5,), 2454))
    opt = tf.keras.optimizers.Adam(0.05)
    labels = tf.constant(LABELS)

    def approx_ndcg(s, y, temp=0.5):
        pair = tf.sigmoid((s[:, None, :] - s[:, :, None]) / temp)
        ranks = 0.5 + tf.reduce_sum(pair, -1)  # the diagonal adds 0.5
        gains = tf.pow(2.0, y) - 1.0
        dcg = tf.reduce_sum(gains / (tf.math.log(1.0 + ranks) / np.log(2.0)), -1)
        ideal = tf.sort(y, direction="DESCENDING")
        pos = tf.range(1, 7, dtype=tf.float32)
        idcg = tf.reduce_sum((tf.pow(2.0, ideal) - 1.0) / (tf.math.log(1.0 + pos) / np.log(2.0)), -1)
        return 1.0 - tf.reduce_mean(dcg / idcg), ranks

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            s = tf.linalg.matvec(tf.nn.relu(tf.matmul(feats, w1)), w2)
            listnet = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(labels), s))
            andcg, ranks = approx_ndcg(s, labels)
            loss = listnet + andcg
        g = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(g, [w1, w2]))
        return listnet, andcg, ranks, g

    return [step() for _ in range(4)]


@parity(modes=True, **TOL)
def test_lambdarank_weights_from_argsort_with_tied_scores(tf):
    """LambdaRank: the current ranks from ``argsort(argsort(-s))`` with tied scores (TF's argsort
    puts tied entries in index order), ``|delta NDCG|`` of swapping each pair from those ranks,
    the lambda-weighted pairwise loss with the weights under ``stop_gradient``; 3 SGD steps on a
    scorer whose weights start at zero (every score tied): ranks, weights' sums, losses, gradients;
    and ``argsort`` of ties in both directions and with ``stable=True``."""
    rs = np.random.RandomState(2455)
    feats = rs.randn(6, 3).astype(np.float32)
    y = tf.constant(LABELS[0])
    w = tf.Variable(np.zeros(3, np.float32))
    gains = tf.pow(2.0, y) - 1.0
    ideal = tf.reduce_sum(tf.sort(gains, direction="DESCENDING") / (tf.math.log(tf.range(2.0, 8.0)) / np.log(2.0)))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            s = tf.linalg.matvec(tf.constant(feats), w)
            order = tf.argsort(-s)
            ranks = tf.argsort(order)
            disc = 1.0 / (tf.math.log(tf.cast(ranks, tf.float32) + 2.0) / np.log(2.0))
            delta = tf.abs((gains[:, None] - gains[None, :]) * (disc[:, None] - disc[None, :])) / ideal
            mask = tf.cast(y[:, None] > y[None, :], tf.float32)
            lam = tf.stop_gradient(delta * mask)
            loss = tf.reduce_sum(lam * tf.nn.softplus(-(s[:, None] - s[None, :])))
        g = tape.gradient(loss, w)
        w.assign_sub(0.3 * g)
        out.append((ranks, tf.reduce_sum(lam), loss, g))
    tied = tf.constant([1.0, 3.0, 1.0, 2.0, 3.0, 1.0])
    return (out, tf.argsort(tied), tf.argsort(tied, direction="DESCENDING"),
            tf.argsort(tied, stable=True), tf.argsort(tied, direction="DESCENDING", stable=True),
            tf.argsort(tf.constant([2, 0, 2, 1, 0]), direction="DESCENDING"))


@parity(**TOL)
def test_spearman_kendall_and_auc_with_average_ranks_for_ties(tf):
    """Rank statistics with ties, as users port them from SciPy: average ranks by comparing every
    pair (``sum(x_j < x_i) + (sum(x_j == x_i) + 1) / 2``), Spearman's rho as the Pearson correlation
    of the ranks, Kendall's tau-b from ``sign`` of pairwise differences, ROC AUC by Mann-Whitney's U
    from the average ranks; and a smooth (sigmoid) rank surrogate's gradient w.r.t. the scores."""
    x = tf.constant([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 0.5])
    y = tf.constant([2.0, 1.0, 4.0, 4.0, 6.0, 3.0, 7.0, 0.0])
    lab = tf.constant([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0])

    def avg_rank(v):
        less = tf.reduce_sum(tf.cast(v[None, :] < v[:, None], tf.float32), 1)
        eq = tf.reduce_sum(tf.cast(tf.equal(v[None, :], v[:, None]), tf.float32), 1)
        return less + (eq + 1.0) / 2.0

    def pearson(a, b):
        a = a - tf.reduce_mean(a)
        b = b - tf.reduce_mean(b)
        return tf.reduce_sum(a * b) / tf.sqrt(tf.reduce_sum(a * a) * tf.reduce_sum(b * b))

    rx, ry = avg_rank(x), avg_rank(y)
    sx = tf.sign(x[:, None] - x[None, :])
    sy = tf.sign(y[:, None] - y[None, :])
    tau_b = tf.reduce_sum(sx * sy) / tf.sqrt(tf.reduce_sum(tf.abs(sx)) * tf.reduce_sum(tf.abs(sy)))
    npos = tf.reduce_sum(lab)
    u = tf.reduce_sum(rx * lab) - npos * (npos + 1.0) / 2.0
    auc = u / (npos * (8.0 - npos))
    with tf.GradientTape() as tape:
        tape.watch(x)
        soft_rank = 1.0 + tf.reduce_sum(tf.sigmoid((x[:, None] - x[None, :]) / 0.1), 1) - 0.5
        rho_soft = pearson(soft_rank, ry)
    g = tape.gradient(rho_soft, x)
    gs = None
    with tf.GradientTape() as tape2:
        tape2.watch(x)
        hard = tf.reduce_sum(tf.sign(x[:, None] - x[None, :]))
    gs = tape2.gradient(hard, x)
    return rx, ry, pearson(rx, ry), tau_b, auc, rho_soft, g, gs


# ---------------------------------------------------------------------------
# Sparsemax / entmax trees
# ---------------------------------------------------------------------------


def sparsemax(tf, z):
    """Sparsemax along the last axis, by sort and cumsum (Martins & Astudillo)."""
    k = z.shape[-1]
    zs = tf.sort(z, axis=-1, direction="DESCENDING")
    rng = tf.range(1, k + 1, dtype=z.dtype)
    cs = tf.cumsum(zs, axis=-1)
    support = tf.cast(1.0 + rng * zs > cs, z.dtype)
    kz = tf.reduce_sum(support, -1, keepdims=True)
    tau = (tf.reduce_sum(support * zs, -1, keepdims=True) - 1.0) / kz
    return tf.maximum(z - tau, 0.0)


def entmax15(tf, z):
    """1.5-entmax along the last axis by the sort-based exact algorithm (Peters et al.)."""
    k = z.shape[-1]
    z = z / 2.0
    zs = tf.sort(z, axis=-1, direction="DESCENDING")
    rng = tf.range(1, k + 1, dtype=z.dtype)
    mean = tf.cumsum(zs, axis=-1) / rng
    mean_sq = tf.cumsum(tf.square(zs), axis=-1) / rng
    ss = rng * (mean_sq - tf.square(mean))
    delta = (1.0 - ss) / rng
    tau = mean - tf.sqrt(tf.maximum(delta, 0.0))
    support = tf.reduce_sum(tf.cast(tau <= zs, tf.int32), -1, keepdims=True)
    tau_star = tf.gather(tau, support - 1, batch_dims=1)
    return tf.square(tf.maximum(z - tau_star, 0.0))


@parity(**TOL)
def test_sparsemax_and_entmax_by_hand_values_ties_and_gradients(tf):
    """Sparsemax and 1.5-entmax by hand on rows with ties at the support's edge, a row of equal
    entries, and a one-hot-producing row: the values (rows summing to 1, exact zeros), and the
    Jacobian-vector products by the tape (sparsemax's gradient ``v - mean_S(v)`` on the support)."""
    z = tf.constant([[1.0, 0.5, 0.5, -1.0], [0.3, 0.3, 0.3, 0.3], [3.0, 0.0, -1.0, 0.2],
                     [0.6, 0.1, 0.6, 0.0]])
    v = tf.constant([[1.0, -2.0, 0.5, 3.0], [0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0],
                     [-1.0, 2.0, 0.0, 1.0]])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(z)
        sm = sparsemax(tf, z)
        em = entmax15(tf, z)
        lsm = tf.reduce_sum(sm * v)
        lem = tf.reduce_sum(em * v)
    return sm, em, tf.reduce_sum(sm, -1), tf.reduce_sum(em, -1), tape.gradient(lsm, z), tape.gradient(lem, z)


@parity(modes=True, **LOOSE)
def test_soft_decision_tree_with_sparsemax_routing(tf):
    """A depth-2 soft decision tree: each inner node routes by ``sigmoid`` of a linear split,
    leaf probabilities as products of path probabilities, the leaves' class distributions by
    sparsemax of leaf logits (exact zeros), the NLL with ``log(p + 1e-6)``; 5 Adam steps in a
    compiled step: losses, gradients (a leaf logit with no gradient through a sparsemax zero)."""
    rs = np.random.RandomState(2460)
    x = rs.randn(10, 2).astype(np.float32)
    y = (x[:, 0] * x[:, 1] > 0).astype(np.int32) + (x[:, 0] > 1.0).astype(np.int32)
    wn = tf.Variable(init_array((2, 3), 2461, 1.0))
    bn = tf.Variable(np.zeros(3, np.float32))
    leaves = tf.Variable(init_array((4, 3), 2462, 1.5))
    opt = tf.keras.optimizers.Adam(0.1)
    vs = [wn, bn, leaves]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            d = tf.sigmoid(tf.matmul(x, wn) + bn)          # [N, 3] nodes: root, left, right
            p_leaf = tf.stack([d[:, 0] * d[:, 1], d[:, 0] * (1 - d[:, 1]),
                               (1 - d[:, 0]) * d[:, 2], (1 - d[:, 0]) * (1 - d[:, 2])], 1)
            dist = sparsemax(tf, leaves)                   # [4, 3]
            p = tf.matmul(p_leaf, dist)
            nll = -tf.reduce_mean(tf.math.log(tf.gather(p, y[:, None], batch_dims=1)[:, 0] + 1e-6))
        g = tape.gradient(nll, vs)
        opt.apply_gradients(zip(g, vs))
        return nll, g, dist

    return [step() for _ in range(5)]


@parity(modes=True, **LOOSE)
def test_node_oblivious_tree_with_entmax_feature_selection(tf):
    """A NODE-style oblivious tree of depth 2 on 4 features: each level picks a feature by
    1.5-entmax over feature logits, compares it with a learned threshold through
    ``sigmoid``-like ``entmoid`` (``(0.5 * clip(x, -2, 2) + 1)^2 / 4`` pieces by ``tf.where``),
    the 4 leaves' responses by the outer product of the level choices; MSE, 3 eager Adam steps:
    losses, gradients and the feature weights."""
    rs = np.random.RandomState(2465)
    x = rs.randn(12, 4).astype(np.float32)
    y = (np.where(x[:, 1] > 0, 1.0, -1.0) + 0.5 * (x[:, 3] > 0.3)).astype(np.float32)
    sel = tf.Variable(init_array((2, 4), 2466, 1.0))
    thr = tf.Variable(np.zeros(2, np.float32))
    log_t = tf.Variable(np.zeros(2, np.float32))
    resp = tf.Variable(init_array((4,), 2467, 0.5))
    vs = [sel, thr, log_t, resp]
    opt = tf.keras.optimizers.Adam(0.1)

    def entmoid(t):
        t = tf.clip_by_value(t, -2.0, 2.0)
        pos = 1.0 - tf.square(2.0 - t) / 8.0
        neg = tf.square(t + 2.0) / 8.0
        return tf.where(t >= 0.0, pos, neg)

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            fw = entmax15(tf, sel)                       # [2, 4]
            f = tf.matmul(x, fw, transpose_b=True)       # [N, 2]
            c = entmoid((f - thr) * tf.exp(-log_t))      # [N, 2]
            b = tf.stack([c, 1.0 - c], -1)               # [N, 2, 2]
            leaf_w = tf.reshape(b[:, 0, :, None] * b[:, 1, None, :], [-1, 4])
            pred = tf.linalg.matvec(leaf_w, resp)
            loss = tf.reduce_mean(tf.square(pred - y))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        out.append((loss, g))
    return out, fw


# ---------------------------------------------------------------------------
# NMF, sparse coding, Sinkhorn
# ---------------------------------------------------------------------------


@parity(modes=True, **LOOSE)
def test_nmf_multiplicative_updates_frobenius_and_kl(tf):
    """NMF of a 6x5 nonnegative matrix with an exact zero row, rank 2, by Lee & Seung's
    multiplicative updates held in Variables and ``assign``ed: 8 Frobenius updates (with 1e-9 in
    the denominators) then 6 KL-divergence updates; the objectives after each update (KL by
    ``xlogy`` so zero entries give 0), the factors, and the zero row's factor staying 0."""
    rs = np.random.RandomState(2470)
    v = np.abs(rs.randn(6, 5)).astype(np.float32)
    v[2] = 0.0
    V = tf.constant(v)
    W = tf.Variable(np.abs(init_array((6, 2), 2471, 1.0)) + 0.1)
    H = tf.Variable(np.abs(init_array((2, 5), 2472, 1.0)) + 0.1)
    fro, kl = [], []
    for _ in range(8):
        H.assign(H * tf.matmul(W, V, transpose_a=True) / (tf.matmul(tf.matmul(W, W, transpose_a=True), H) + 1e-9))
        W.assign(W * tf.matmul(V, H, transpose_b=True) / (tf.matmul(W, tf.matmul(H, H, transpose_b=True)) + 1e-9))
        fro.append(tf.reduce_sum(tf.square(V - tf.matmul(W, H))))
    ones = tf.ones_like(V)
    for _ in range(6):
        WH = tf.matmul(W, H) + 1e-9
        H.assign(H * tf.matmul(W, V / WH, transpose_a=True) / (tf.matmul(W, ones, transpose_a=True) + 1e-9))
        WH = tf.matmul(W, H) + 1e-9
        W.assign(W * tf.matmul(V / WH, H, transpose_b=True) / (tf.matmul(ones, H, transpose_b=True) + 1e-9))
        WH = tf.matmul(W, H)
        kl.append(tf.reduce_sum(tf.math.xlogy(V, V / (WH + 1e-9)) - V + WH))
    return fro, kl, W, H


def _soft_threshold(tf, x, lam):
    return tf.sign(x) * tf.maximum(tf.abs(x) - lam, 0.0)


@parity(**LOOSE)
def test_ista_and_fista_sparse_coding_in_a_converted_loop(tf):
    """Sparse coding of 3 signals over a fixed 6x10 dictionary: ISTA and FISTA (momentum
    ``(t_k - 1)/t_{k+1}``) with the step ``1/L``, ``L`` the largest singular value of ``D`` squared
    (by ``tf.linalg.svd``), 40 iterations in ``tf.function`` for-loops over ``tf.range``; the codes, the
    objectives, the number of nonzeros, and the soft-threshold's gradient at exactly ``|x| = lam``
    and at 0."""
    rs = np.random.RandomState(2480)
    D = rs.randn(6, 10).astype(np.float32)
    D /= np.linalg.norm(D, axis=0, keepdims=True)
    codes = np.zeros((10, 3), np.float32)
    codes[[1, 4, 7], [0, 1, 2]] = [1.5, -2.0, 1.0]
    X = tf.constant(D @ codes)
    Dt = tf.constant(D)
    lam = 0.1
    L = tf.square(tf.linalg.svd(Dt, compute_uv=False)[0])

    def objective(z):
        return 0.5 * tf.reduce_sum(tf.square(X - tf.matmul(Dt, z))) + lam * tf.reduce_sum(tf.abs(z))

    @tf.function
    def ista():
        z = tf.zeros([10, 3])
        for _ in tf.range(40):
            z = _soft_threshold(tf, z - tf.matmul(Dt, tf.matmul(Dt, z) - X, transpose_a=True) / L, lam / L)
        return z

    @tf.function
    def fista():
        z = tf.zeros([10, 3])
        yk = z
        t = tf.constant(1.0)
        for _ in tf.range(40):
            z_new = _soft_threshold(tf, yk - tf.matmul(Dt, tf.matmul(Dt, yk) - X, transpose_a=True) / L, lam / L)
            t_new = (1.0 + tf.sqrt(1.0 + 4.0 * t * t)) / 2.0
            yk = z_new + ((t - 1.0) / t_new) * (z_new - z)
            z, t = z_new, t_new
        return z

    zi, zf = ista(), fista()
    pts = tf.constant([0.1, -0.1, 0.0, 0.3, -0.05])
    with tf.GradientTape() as tape:
        tape.watch(pts)
        st = _soft_threshold(tf, pts, 0.1)
    return (L, zi, zf, objective(zi), objective(zf),
            tf.cast(tf.math.count_nonzero(zi, 0), tf.int32), st, tape.gradient(st, pts))


@parity(modes=True, **LOOSE)
def test_lista_trained_through_its_unrolled_iterations(tf):
    """LISTA: 3 unrolled iterations ``z = soft(W_e x + S z, theta)`` with learned ``W_e``, ``S`` and
    per-iteration thresholds, initialised from ISTA's matrices, trained by Adam for 4 steps in a
    compiled step to match the codes of a sparse-coding target; gradients reach every
    iteration's threshold, the loss per step."""
    rs = np.random.RandomState(2485)
    D = rs.randn(5, 8).astype(np.float32)
    D /= np.linalg.norm(D, axis=0, keepdims=True)
    codes = (rs.rand(8, 6) < 0.25) * rs.randn(8, 6)
    X = (D @ codes).T.astype(np.float32)            # [6, 5]
    Z = codes.T.astype(np.float32)                  # [6, 8]
    L = np.float32(np.linalg.norm(D, 2) ** 2)
    We = tf.Variable((D.T / L).astype(np.float32))
    S = tf.Variable((np.eye(8) - D.T @ D / L).astype(np.float32))
    theta = tf.Variable(np.full(3, 0.05, np.float32))
    opt = tf.keras.optimizers.Adam(0.01)
    vs = [We, S, theta]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            b = tf.matmul(X, We, transpose_b=True)
            z = _soft_threshold(tf, b, theta[0])
            for k in range(1, 3):
                z = _soft_threshold(tf, b + tf.matmul(z, S, transpose_b=True), theta[k])
            loss = tf.reduce_mean(tf.reduce_sum(tf.square(z - Z), 1))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, g[2], tf.norm(g[0]), tf.norm(g[1])

    return [step() for _ in range(4)], theta


@parity(modes=True, **LOOSE)
def test_sinkhorn_log_domain_with_gradients_through_the_iterations(tf):
    """Entropic OT between 5 and 4 weighted points in 2-D: the cost ``||x - y||^2``, 10 log-domain
    Sinkhorn iterations by ``reduce_logsumexp`` in a Python loop under the tape, the plan, the
    transport cost, and its gradient w.r.t. the source points (against the envelope-theorem
    gradient ``2 sum_j P_ij (x_i - y_j)``); 2 steps moving the source points by SGD."""
    rs = np.random.RandomState(2490)
    xs = tf.Variable(rs.randn(5, 2).astype(np.float32))
    ys = tf.constant((rs.randn(4, 2) + 1.0).astype(np.float32))
    a = tf.constant(np.full(5, 0.2, np.float32))
    b = tf.constant(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    eps = 0.5
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            C = tf.reduce_sum(tf.square(xs[:, None, :] - ys[None, :, :]), -1)
            f = tf.zeros([5])
            g = tf.zeros([4])
            for _ in range(10):
                f = eps * tf.math.log(a) - eps * tf.reduce_logsumexp((g[None, :] - C) / eps, 1)
                g = eps * tf.math.log(b) - eps * tf.reduce_logsumexp((f[:, None] - C) / eps, 0)
            P = tf.exp((f[:, None] + g[None, :] - C) / eps)
            cost = tf.reduce_sum(P * C)
        grad = tape.gradient(cost, xs)
        env = 2.0 * tf.reduce_sum(P[:, :, None] * (xs[:, None, :] - ys[None, :, :]), 1)
        out.append((cost, tf.reduce_sum(P, 1), tf.reduce_sum(P, 0), grad, env))
        xs.assign_sub(0.5 * grad)
    return out, xs


@parity(**LOOSE)
def test_sinkhorn_to_a_tolerance_in_a_compiled_step_with_a_loop_bound(tf):
    """Sinkhorn iterated to a tolerance inside ``tf.function``: a converted ``while err > 1e-4``
    whose first statement is ``set_loop_options(maximum_iterations=200)`` (so the tape can
    differentiate it: TF keeps each iteration's values, tapejax runs a masked scan of 200 steps),
    the number of iterations taken, the cost, and its gradient w.r.t. the source points through
    every iteration; two SGD steps on the points."""
    rs = np.random.RandomState(2495)
    xs = tf.Variable(rs.randn(4, 2).astype(np.float32))
    ys = tf.constant((rs.randn(3, 2) + 1.0).astype(np.float32))
    a = tf.fill([4], 0.25)
    b = tf.constant([0.2, 0.3, 0.5])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            C = tf.reduce_sum(tf.square(xs[:, None] - ys[None]), -1)
            f = tf.zeros([4])
            g = tf.zeros([3])
            err = tf.constant(1.0)
            it = tf.constant(0)
            while err > 1e-4:
                tf.autograph.experimental.set_loop_options(maximum_iterations=200)
                f_new = 0.5 * tf.math.log(a) - 0.5 * tf.reduce_logsumexp((g[None] - C) / 0.5, 1)
                g = 0.5 * tf.math.log(b) - 0.5 * tf.reduce_logsumexp((f_new[:, None] - C) / 0.5, 0)
                err = tf.reduce_max(tf.abs(f_new - f))
                f = f_new
                it += 1
            P = tf.exp((f[:, None] + g[None] - C) / 0.5)
            cost = tf.reduce_sum(P * C)
        grad = tape.gradient(cost, xs)
        xs.assign_sub(0.2 * grad)
        return cost, it, grad

    return step(), step(), xs
