"""Round nineteen (a) of realistic user programs, second half: graph neural networks as TF-era code
writes them without a graph library (edge lists as NumPy arrays, ``tf.gather`` to the edges and the
segment ops back to the nodes, adjacency matrices as ``tf.sparse.SparseTensor`` s), run under real
TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and off
(``modes=True``; the Keras-layer GCN in the default mode only).

The segment ops are where a GNN's edge cases live: an isolated node is an empty segment (zero for
``unsorted_segment_sum`` / ``_mean`` and the sorted ``segment_*``, the dtype's lowest value for
``unsorted_segment_max``), two edges with one score are a tie (TF splits ``segment_max``'s
gradient among the tied entries), and a gather from a node-feature Variable gives an
``IndexedSlices``.  The programs: a two-layer GCN with a normalised adjacency (gradients to the
dense side and to the SparseTensor's values, ``adjoint_a``), GraphSAGE's mean and max-pool
aggregators over sorted and unsorted destination ids, GAT's edge softmax by
``unsorted_segment_max`` + ``exp`` + ``unsorted_segment_sum`` and by ``tf.sparse.softmax``,
edge-conditioned message passing by ``tensor_scatter_nd_add``, GIN with a learnable epsilon and
learnable edge weights in the SparseTensor, graph classification with segment readouts over a
batch of graphs (one empty), node classification with train / validation masks, link prediction
with NumPy negative edges, TransE and DistMult with a zero distance, label propagation in a
``tf.while_loop`` and APPNP trained through one (bounded by ``maximum_iterations``; unbounded, a
documented tapejax limit: xfail).  Recommenders are in ``test_user_programs19a.py``.
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

LOOSE = dict(rtol=1e-4, atol=1e-5)

# A 6-node graph: edges src -> dst, node 5 isolated (no in- or out-edges), node 0 with 3 in-edges.
SRC = np.array([1, 2, 3, 0, 2, 4, 3, 0], np.int32)
DST = np.array([0, 0, 0, 1, 1, 2, 4, 3], np.int32)
N = 6
X = init_array((N, 4), 1990, 1.0)
Y = np.array([0, 1, 1, 0, 2, 2], np.int32)


def _grad(tf, g):
    """A gradient as a user sees it: None, or (is IndexedSlices, indices, dense value)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return True, g.indices, tf.convert_to_tensor(g)
    return False, None, g


def _norm_adjacency():
    """``D^-1/2 (A + I) D^-1/2`` of the undirected graph as (indices int64, values float32), row-major."""
    a = np.eye(N, dtype=np.float32)
    a[SRC, DST] = 1.0
    a[DST, SRC] = 1.0
    d = 1.0 / np.sqrt(a.sum(1))
    a = a * d[:, None] * d[None, :]
    idx = np.argwhere(a != 0).astype(np.int64)
    return idx, a[a != 0].astype(np.float32)


# ---------------------------------------------------------------------------
# GCN, GraphSAGE, GAT, message passing, GIN
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_gcn_with_a_normalised_sparse_adjacency_and_a_train_mask(tf):
    """Kipf & Welling's two-layer GCN: ``A_hat @ relu(A_hat @ X W1) W2`` with ``A_hat`` a
    ``tf.sparse.SparseTensor`` and ``tf.sparse.sparse_dense_matmul``; the loss over the train nodes
    by ``tf.boolean_mask`` of logits and labels, an L2 on the first layer; Adam in a compiled step.
    The gradient with respect to the SparseTensor's values (a watched tensor) and the same product
    written with ``adjoint_a=True`` on the transposed adjacency are probed eagerly."""
    idx, vals = _norm_adjacency()
    w1 = tf.Variable(init_array((4, 5), 1991))
    w2 = tf.Variable(init_array((5, 3), 1992))
    a = tf.sparse.SparseTensor(idx, vals, [N, N])
    train = np.array([True, True, False, True, False, True])
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def forward(a, x):
        h = tf.nn.relu(tf.sparse.sparse_dense_matmul(a, tf.matmul(x, w1)))
        return tf.sparse.sparse_dense_matmul(a, tf.matmul(h, w2))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            logits = forward(a, x)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.boolean_mask(Y, train),
                                                                tf.boolean_mask(logits, train))
            loss = tf.reduce_mean(ce) + 5e-4 * tf.nn.l2_loss(w1)
        g = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(g, [w1, w2]))
        return loss, g

    out = [step(X) for _ in range(3)]
    v = tf.constant(vals)
    x = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([v, x])
        y = forward(tf.sparse.SparseTensor(idx, v, [N, N]), x)
        yt = tf.sparse.sparse_dense_matmul(tf.sparse.transpose(tf.sparse.SparseTensor(idx, v, [N, N])),
                                           tf.matmul(x, w1), adjoint_a=True)
        s = tf.reduce_sum(y * y)
        st = tf.reduce_sum(tf.sin(yt))
    probe = tape.gradient(s, [v, x]) + tape.gradient(st, [v, x])
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(y, 1, output_type=tf.int32), Y), tf.float32))
    return out, w1, w2, y, yt, probe, acc


@parity(modes=True, **LOOSE)
def test_graphsage_mean_and_max_pool_aggregators_with_an_isolated_node(tf):
    """GraphSAGE: neighbour features gathered to the edges (``tf.gather`` of a node-feature
    Variable: an ``IndexedSlices``), aggregated to the destinations by
    ``tf.math.unsorted_segment_mean`` (edges unsorted), by ``tf.math.segment_sum`` / a degree over
    the edges sorted by destination, and by ``unsorted_segment_max`` (max-pool, with a tie: nodes 1
    and 2 send node 0 the same pooled row); the isolated node's mean is 0 and its max the lowest
    float32, which the program replaces by 0 (``tf.where``).  Self and neighbour concatenated,
    l2-normalised; SGD, alternate eager and compiled steps."""
    feats = tf.Variable(X)
    ws = tf.Variable(init_array((8, 3), 1993))
    wp = tf.Variable(init_array((4, 4), 1994))
    order = np.argsort(DST, kind="stable")
    s_src, s_dst = SRC[order], DST[order]
    opt = tf.keras.optimizers.legacy.SGD(0.2)
    vs = [feats, ws, wp]

    def step(kind):
        with tf.GradientTape() as tape:
            if kind == "mean":
                agg = tf.math.unsorted_segment_mean(tf.gather(feats, SRC), DST, N)
            elif kind == "sorted":
                total = tf.math.segment_sum(tf.gather(feats, s_src), s_dst)
                deg = tf.math.segment_sum(tf.ones_like(s_dst, tf.float32), s_dst)
                agg = tf.pad(total / tf.maximum(deg, 1.0)[:, None], [[0, N - 5], [0, 0]])
            else:
                pooled = tf.nn.relu(tf.matmul(tf.gather(feats, SRC), wp))
                pooled = tf.where(tf.equal(SRC, 2)[:, None], tf.gather(pooled, [0])[0], pooled)
                agg = tf.math.unsorted_segment_max(pooled, DST, N)
                raw_min = tf.reduce_min(agg)
                agg = tf.where(agg < -1e30, 0.0, agg)
            h = tf.math.l2_normalize(tf.matmul(tf.concat([feats, agg], 1), ws), axis=1)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, 5.0 * h))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return (loss, agg, [_grad(tf, x) for x in g]) + ((raw_min,) if kind == "max" else ())

    compiled = tf.function(step)
    out = []
    for k, kind in enumerate(("mean", "sorted", "max", "mean", "sorted", "max")):
        out.append((compiled if k >= 3 else step)(kind))
    return out, vs


@parity(modes=True, **LOOSE)
def test_gat_edge_softmax_by_segment_max_and_by_sparse_softmax_with_tied_scores(tf):
    """One GAT head: ``e_ij = leaky_relu(a_src . Wh_j + a_dst . Wh_i, 0.2)``, the edge softmax over
    each node's in-edges by ``unsorted_segment_max`` (the stabiliser), ``exp`` and
    ``unsorted_segment_sum``, messages ``alpha * Wh_src`` summed to the destinations; the same
    softmax by ``tf.sparse.softmax`` on a SparseTensor of scores (rows = destinations).  Nodes 1, 2
    and 3 have equal features, so node 0's three in-edges tie at the max; the max itself also enters
    the loss (an attention-entropy bonus written with it), so its tie gradient is seen.  Adam,
    compiled step, then an eager one."""
    x = X.copy()
    x[2] = x[3] = x[1]
    w = tf.Variable(init_array((4, 3), 1995))
    a_src = tf.Variable(init_array((3,), 1996))
    a_dst = tf.Variable(init_array((3,), 1997))
    order = np.lexsort((SRC, DST))
    sp_idx = np.stack([DST[order], SRC[order]], 1).astype(np.int64)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    vs = [w, a_src, a_dst]

    def step(x):
        with tf.GradientTape() as tape:
            wh = tf.matmul(x, w)
            e = tf.nn.leaky_relu(tf.linalg.matvec(tf.gather(wh, SRC), a_src)
                                 + tf.linalg.matvec(tf.gather(wh, DST), a_dst), alpha=0.2)
            m = tf.math.unsorted_segment_max(e, DST, N)
            ex = tf.exp(e - tf.gather(m, DST))
            alpha = ex / tf.gather(tf.math.unsorted_segment_sum(ex, DST, N), DST)
            out = tf.math.unsorted_segment_sum(alpha[:, None] * tf.gather(wh, SRC), DST, N)
            sp = tf.sparse.softmax(tf.sparse.SparseTensor(sp_idx, tf.gather(e, order), [N, N]))
            out2 = tf.sparse.sparse_dense_matmul(sp, wh)
            m_edges = tf.reduce_sum(tf.gather(m, DST))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, out + out2)) + 0.01 * m_edges
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, e, alpha, sp.values, tf.where(m < -1e30, -1.0, m), g

    compiled = tf.function(step)
    return [compiled(x), compiled(x), step(x)], vs


@parity(modes=True, **LOOSE)
def test_edge_conditioned_message_passing_by_tensor_scatter_nd_add(tf):
    """An MPNN: messages ``relu([h_src, h_dst, edge_feat] @ Wm)`` on the edges (``tf.gather`` of the
    node states), summed into the destinations by ``tf.tensor_scatter_nd_add(zeros, dst[:, None],
    msg)`` (node 0 receives three), the update ``tanh(h @ Ws + agg @ Wa)``, two rounds, a sum
    readout; Adam in a compiled step, gradients of the weights and of the input node features (a
    watched constant)."""
    ef = init_array((len(SRC), 2), 1998)
    wm = tf.Variable(init_array((10, 4), 1999))
    ws = tf.Variable(init_array((4, 4), 2000))
    wa = tf.Variable(init_array((4, 4), 2001))
    target = np.array([[1.0, -0.5, 0.2, 0.0]], np.float32)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    vs = [wm, ws, wa]

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            h = x
            for _ in range(2):
                msg = tf.nn.relu(tf.matmul(tf.concat([tf.gather(h, SRC), tf.gather(h, DST), ef], 1), wm))
                agg = tf.tensor_scatter_nd_add(tf.zeros_like(h), DST[:, None], msg)
                h = tf.tanh(tf.matmul(h, ws) + tf.matmul(agg, wa))
            loss = tf.reduce_sum(tf.square(tf.reduce_sum(h, 0, keepdims=True) - target))
        g = tape.gradient(loss, vs + [x])
        opt.apply_gradients(zip(g[:3], vs))
        return loss, h, g

    return [step(tf.constant(X)) for _ in range(3)], vs


@parity(modes=True, **LOOSE)
def test_gin_with_learnable_epsilon_and_edge_weights_in_the_sparse_adjacency(tf):
    """GIN: ``MLP((1 + eps) h + A h)`` with ``A`` a SparseTensor whose values are a trainable
    edge-weight Variable (so the weights get a gradient through ``sparse_dense_matmul``), a
    learnable ``eps``; a graph-level readout by ``reduce_sum`` and a regression loss; SGD with
    momentum, eager steps."""
    order = np.lexsort((SRC, DST))
    idx = np.stack([DST[order], SRC[order]], 1).astype(np.int64)
    ew = tf.Variable(np.ones(len(SRC), np.float32))
    eps = tf.Variable(0.0)
    w1 = tf.Variable(init_array((4, 4), 2002))
    w2 = tf.Variable(init_array((4, 1), 2003))
    opt = tf.keras.optimizers.legacy.SGD(0.02, momentum=0.9)
    vs = [ew, eps, w1, w2]
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            a = tf.sparse.SparseTensor(idx, ew, [N, N])
            h = (1.0 + eps) * X + tf.sparse.sparse_dense_matmul(a, X)
            h = tf.matmul(tf.nn.relu(tf.matmul(h, w1)), w2)
            loss = tf.square(tf.reduce_sum(h) - 3.0)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        out.append((loss, [_grad(tf, x) for x in g]))
    return out, vs


# ---------------------------------------------------------------------------
# Graph-level and node-level tasks
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_graph_classification_with_segment_readouts_and_an_empty_graph(tf):
    """A batch of graphs as one disconnected graph with a sorted ``graph_id`` per node; graph 2 of 4
    has no nodes.  Readouts: ``tf.math.segment_mean`` and ``segment_max`` (empty segment: 0 in
    TF's sorted ops) and ``unsorted_segment_sum`` with ``num_segments=4``; the concatenation
    classified by softmax cross-entropy; ``SparseCategoricalAccuracy``; SGD with momentum in a
    compiled step."""
    gid = np.array([0, 0, 1, 1, 1, 3], np.int32)
    labels = np.array([1, 0, 1, 0], np.int32)
    w = tf.Variable(init_array((4, 4), 2004))
    wc = tf.Variable(init_array((12, 2), 2005))
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
    acc = tf.keras.metrics.SparseCategoricalAccuracy()

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w))
            r = tf.concat([tf.math.segment_mean(h, gid), tf.math.segment_max(h, gid),
                           tf.math.unsorted_segment_sum(h, gid, 4)], 1)
            logits = tf.matmul(r, wc)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        g = tape.gradient(loss, [w, wc])
        opt.apply_gradients(zip(g, [w, wc]))
        acc.update_state(labels, logits)
        return loss, r, g

    out = [step(tf.constant(X)) for _ in range(3)]
    return out, w, wc, acc.result()


@parity(modes=True, **LOOSE)
def test_node_classification_with_train_and_validation_masks(tf):
    """Semi-supervised node classification: a one-layer propagation (row-normalised adjacency as a
    dense matrix) and a linear head; the train loss by ``tf.boolean_mask`` (3 labelled nodes), the
    validation accuracy by ``SparseCategoricalAccuracy`` with the mask as ``sample_weight``, the
    test loss over an empty mask (``reduce_mean`` of nothing: NaN, as TF's); early-stopping state
    kept in Python from ``float(val_loss)``."""
    a = np.eye(N, dtype=np.float32)
    a[DST, SRC] = 1.0
    a = a / a.sum(1, keepdims=True)
    train = np.array([1, 0, 1, 0, 1, 0], bool)
    val = ~train
    empty = np.zeros(N, bool)
    w = tf.Variable(init_array((4, 3), 2006))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    best, wait, out = np.inf, 0, []
    for _ in range(4):
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.matmul(a, X), w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.boolean_mask(Y, train), tf.boolean_mask(logits, train)))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        acc = tf.keras.metrics.SparseCategoricalAccuracy()
        acc.update_state(Y, logits, sample_weight=tf.cast(val, tf.float32))
        val_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.boolean_mask(Y, val), tf.boolean_mask(logits, val)))
        test_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.boolean_mask(Y, empty), tf.boolean_mask(logits, empty)))
        if float(val_loss) < best:
            best, wait = float(val_loss), 0
        else:
            wait += 1
        out.append((loss, acc.result(), val_loss, tf.math.is_nan(test_loss), tf.shape(tf.boolean_mask(logits, empty))))
    return out, w, best, wait


@parity(modes=True, **LOOSE)
def test_link_prediction_with_numpy_negative_edges_and_hits_at_k(tf):
    """Link prediction: a node-embedding table, dot-product decoder, positives the graph's edges and
    negatives drawn by NumPy (rejecting edges); ``sigmoid_cross_entropy_with_logits`` over both; the
    table is gathered at four index arrays in one step (one ``IndexedSlices`` with all of them);
    legacy Adagrad; ``tf.keras.metrics.AUC`` and Hits@3 by ``top_k`` over each source's scores."""
    rs = np.random.RandomState(2007)
    emb = tf.Variable(init_array((N, 3), 2008))
    edges = set(zip(SRC.tolist(), DST.tolist()))
    opt = tf.keras.optimizers.legacy.Adagrad(0.3)
    auc = tf.keras.metrics.AUC(num_thresholds=50)

    def negatives(k):
        out = []
        while len(out) < k:
            s, d = rs.randint(N), rs.randint(N)
            if s != d and (s, d) not in edges:
                out.append((s, d))
        return np.array(out, np.int32)

    out = []
    for k in range(3):
        neg = negatives(len(SRC))
        with tf.GradientTape() as tape:
            pos_s = tf.reduce_sum(tf.gather(emb, SRC) * tf.gather(emb, DST), 1)
            neg_s = tf.reduce_sum(tf.gather(emb, neg[:, 0]) * tf.gather(emb, neg[:, 1]), 1)
            logits = tf.concat([pos_s, neg_s], 0)
            labels = tf.concat([tf.ones_like(pos_s), tf.zeros_like(neg_s)], 0)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))
        g = tape.gradient(loss, emb)
        opt.apply_gradients([(g, emb)])
        auc.update_state(labels, tf.sigmoid(logits))
        out.append((neg, loss, _grad(tf, g), auc.result()))
    scores = tf.matmul(emb, emb, transpose_b=True) - 1e9 * tf.eye(N)
    top = tf.math.top_k(scores, k=3).indices
    hits = [float(np.mean([d in top.numpy()[s] for s, d in zip(SRC, DST)]))]
    return out, emb, top, hits


@parity(modes=True, **LOOSE)
def test_transe_and_distmult_with_a_zero_distance(tf):
    """Knowledge-graph embeddings: TransE's ``||h + r - t||`` by ``tf.norm`` (L2, and L1 by
    ``ord=1``) with a margin ranking loss against corrupted tails, where one positive triple starts
    exact (``h + r == t``: the L2 norm's gradient at 0 is NaN in TF, the program reports it and
    trains with L1, whose ``sign(0)`` is 0), the entities renormalised by ``assign(l2_normalize)``
    after each step; DistMult's ``sum(h * r * t)`` with a sigmoid loss on the same triples.  SGD;
    the entity gradients are ``IndexedSlices``."""
    ent0 = init_array((5, 3), 2009)
    rel0 = init_array((2, 3), 2010)
    ent0[1] = ent0[0] + rel0[0]
    ent = tf.Variable(ent0)
    rel = tf.Variable(rel0)
    h, r, t = np.array([0, 2, 3], np.int32), np.array([0, 1, 0], np.int32), np.array([1, 4, 2], np.int32)
    t_neg = np.array([3, 0, 4], np.int32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for ord_ in ("euclidean", 1, 1):
        with tf.GradientTape() as tape:
            eh, er = tf.gather(ent, h), tf.gather(rel, r)
            pos = tf.norm(eh + er - tf.gather(ent, t), ord=ord_, axis=1)
            neg = tf.norm(eh + er - tf.gather(ent, t_neg), ord=ord_, axis=1)
            loss = tf.reduce_sum(tf.nn.relu(1.0 + pos - neg))
        ge, gr = tape.gradient(loss, [ent, rel])
        nan = tf.reduce_any(tf.math.is_nan(tf.convert_to_tensor(ge)))
        if ord_ == 1:
            opt.apply_gradients([(ge, ent), (gr, rel)])
            ent.assign(tf.math.l2_normalize(ent, axis=1))
        out.append((pos, neg, loss, nan, _grad(tf, gr), tf.where(tf.math.is_nan(tf.convert_to_tensor(ge)), -9.0,
                                                                 tf.convert_to_tensor(ge))))
    ent2 = tf.Variable(ent0)
    for _ in range(2):
        with tf.GradientTape() as tape:
            s = tf.reduce_sum(tf.gather(ent2, np.r_[h, h]) * tf.gather(rel, np.r_[r, r])
                              * tf.gather(ent2, np.r_[t, t_neg]), 1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(np.r_[np.ones(3), np.zeros(3)]
                                                                          .astype(np.float32), s))
        g = tape.gradient(loss, ent2)
        opt.apply_gradients([(g, ent2)])
        out.append((s, loss, _grad(tf, g)))
    return out, ent, rel, ent2


@parity(modes=True, **LOOSE)
def test_label_propagation_by_sparse_dense_matmul_in_a_while_loop(tf):
    """Zhou et al.'s label spreading ``F <- alpha S F + (1 - alpha) Y0`` with ``S`` the symmetric
    normalised adjacency as a SparseTensor, iterated by ``tf.while_loop`` inside ``tf.function``
    until the change is below a tolerance or 50 steps (the loop count returned), and by a Python loop
    eagerly; labelled nodes clamped by ``tf.where`` in a second variant; predictions by argmax."""
    idx, vals = _norm_adjacency()
    s = tf.sparse.SparseTensor(idx, vals, [N, N])
    y0 = np.zeros((N, 3), np.float32)
    y0[[0, 3, 4], [0, 0, 2]] = 1.0
    labelled = np.array([1, 0, 0, 1, 1, 0], bool)[:, None]

    @tf.function
    def spread(y0, clamp):
        def body(i, f, delta):
            nf = 0.8 * tf.sparse.sparse_dense_matmul(s, f) + 0.2 * y0
            if clamp:
                nf = tf.where(labelled, y0, nf)
            return i + 1, nf, tf.reduce_max(tf.abs(nf - f))

        return tf.while_loop(lambda i, f, d: tf.logical_and(i < 50, d > 1e-4), body,
                             (tf.constant(0), y0, tf.constant(1.0)))

    out = []
    for clamp in (False, True):
        i, f, d = spread(tf.constant(y0), clamp)
        out.append((i, f, tf.argmax(f, 1, output_type=tf.int32)))
    f = tf.constant(y0)
    for _ in range(10):
        f = 0.8 * tf.sparse.sparse_dense_matmul(s, f) + 0.2 * y0
    out.append(f)
    return out


def _appnp(tf, bounded):
    """APPNP (predict, then propagate): ``H <- 0.9 S H + 0.1 H0`` for ``k`` steps in a
    ``tf.while_loop`` inside a compiled training step, ``k`` a tensor argument (3, 3, then 5);
    legacy Adam on the prediction weights; an eager Python-loop step for comparison."""
    idx, vals = _norm_adjacency()
    s = tf.sparse.SparseTensor(idx, vals, [N, N])
    w = tf.Variable(init_array((4, 3), 2011))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    bound = dict(maximum_iterations=8) if bounded else {}

    @tf.function
    def step(k):
        with tf.GradientTape() as tape:
            h0 = tf.matmul(X, w)
            _, h = tf.while_loop(lambda i, h: i < k,
                                 lambda i, h: (i + 1, 0.9 * tf.sparse.sparse_dense_matmul(s, h) + 0.1 * h0),
                                 (tf.constant(0), h0), **bound)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, h))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return loss, g

    out = [step(tf.constant(k)) for k in (3, 3, 5)]
    with tf.GradientTape() as tape:
        h0 = tf.matmul(X, w)
        h = h0
        for _ in range(3):
            h = 0.9 * tf.sparse.sparse_dense_matmul(s, h) + 0.1 * h0
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, h))
    return out, (loss, tape.gradient(loss, w)), w


@parity(modes=True, **LOOSE)
def test_appnp_propagation_in_a_bounded_while_loop_trained_compiled(tf):
    """APPNP (``_appnp``) with ``maximum_iterations=8`` on the propagation loop: tapejax runs it as
    a masked scan, which the tape differentiates."""
    return _appnp(tf, bounded=True)


@xfail_on_tapejax("documented limit (README, autodiff): XLA's while loop is not reverse-mode differentiable; "
                  "a tf.while_loop of traced length in a tapejax.function needs maximum_iterations for a "
                  "gradient (UnboundedWhileGradientError names the fix); TF differentiates it")
@parity(**LOOSE)
def test_appnp_propagation_in_an_unbounded_while_loop_trained_compiled(tf):
    """APPNP (``_appnp``) as TF-era code writes it, without ``maximum_iterations``."""
    return _appnp(tf, bounded=False)


@xfail_on_tapejax("design limit (tapejax/ops/indexing.py boolean_mask, README's static shapes): inside a "
                  "tapejax.function a mask or a segment count known only when the step runs gives a result "
                  "whose size XLA cannot know while tracing (OperatorNotAllowedInGraphError); TF's graph has "
                  "dynamic shapes. A mask closed over as NumPy data, or a weighted mean, compiles")
@parity(**LOOSE)
def test_kipf_style_step_with_the_mask_and_the_graph_count_as_step_arguments(tf):
    """Kipf's TF GCN feeds the train mask to the step (a placeholder then, a ``tf.function``
    argument now) and ``tf.boolean_mask``s the logits with it; a graph batch's readout takes
    ``num_segments=tf.reduce_max(graph_id) + 1`` inside the step."""
    w = tf.Variable(init_array((4, 3), 2012))
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def step(mask, gid):
        with tf.GradientTape() as tape:
            logits = tf.matmul(X, w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.boolean_mask(Y, mask), tf.boolean_mask(logits, mask)))
            pooled = tf.math.unsorted_segment_mean(logits, gid, tf.reduce_max(gid) + 1)
            loss += 0.1 * tf.reduce_sum(tf.square(pooled))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return loss, pooled

    return [step(tf.constant([True, True, False, True, False, True]), tf.constant([0, 0, 1, 1, 1, 2])),
            step(tf.constant([False, True, True, True, False, False]), tf.constant([0, 1, 1, 1, 1, 1]))], w
