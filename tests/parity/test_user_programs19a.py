"""Round nineteen (a) of realistic user programs, first half: recommender systems as TF-era code
writes them (raw ``tf`` ops on embedding-table Variables, custom ``GradientTape`` loops, some steps
under ``tf.function``), run under real TensorFlow 2.21 and under tapejax with deferred execution and
predicted updates on and off (``modes=True``; the Keras wide & deep model in the default mode only).

Recommenders are where a wrong sparse gradient is silent: a lookup's gradient is an
``IndexedSlices`` (one row per looked-up id, repeated ids repeated), and the optimizers apply it by
their sparse rules (Adagrad's accumulator and FTRL's at the touched rows only, repeated ids summed
first).  So every gradient is reported by ``_grad``: its type, its ``indices`` and ``dense_shape``
when it is an ``IndexedSlices``, and its dense value.  The programs: matrix factorisation by
``embedding_lookup`` / ``gather`` with biases and an L2 on the looked-up rows (repeated ids, the
table's last id), the sparse rules of SGD with momentum, Adagrad, Adam and FTRL on one batch with a
repeated id, two-tower retrieval with in-batch negatives, ``sampled_softmax_loss`` and ``nce_loss``
with the sampler's draws given from NumPy, factorisation machines, DCN cross layers,
``embedding_lookup_sparse`` under its three combiners, multi-hot bags as ``RaggedTensor`` s, BPR,
``top_k`` retrieval metrics with ties, clipping an ``IndexedSlices`` and a wide & deep Keras model
(``Embedding``, ``CategoryEncoding``, ``Hashing``, ``IntegerLookup``).  The graph networks are in
``test_user_programs19a2.py``.
"""
import numpy as np

from .harness import init_array, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _grad(tf, g):
    """What a user sees of a gradient: None, or (is IndexedSlices, indices, dense_shape, dense value)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return True, g.indices, tf.cast(g.dense_shape, tf.int32), tf.convert_to_tensor(g)
    return False, None, None, g


def _grads(tf, gs):
    return [_grad(tf, g) for g in gs]


# ---------------------------------------------------------------------------
# Matrix factorisation and the sparse optimizer rules
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_matrix_factorisation_with_biases_and_l2_on_the_looked_up_rows(tf):
    """Explicit-feedback MF: ``r = <U[u], V[i]> + bu[u] + bi[i] + mu``, MSE plus an L2 on the
    looked-up rows only (not the tables); the batch repeats a user and reaches the item table's last
    row.  User rows by ``tf.nn.embedding_lookup``, items by ``tf.gather``; legacy SGD applies the
    ``IndexedSlices`` gradients; the third and fourth steps are compiled."""
    users = tf.Variable(init_array((5, 3), 1901))
    items = tf.Variable(init_array((6, 3), 1902))
    ub = tf.Variable(np.zeros(5, np.float32))
    ib = tf.Variable(np.zeros(6, np.float32))
    mu = tf.Variable(3.5)
    u = np.array([0, 2, 2, 4, 1], np.int32)
    i = np.array([5, 0, 3, 5, 5], np.int32)
    r = np.array([4.0, 3.0, 5.0, 1.0, 2.5], np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    vs = [users, items, ub, ib, mu]

    def step(u, i, r):
        with tf.GradientTape() as tape:
            pu, qi = tf.nn.embedding_lookup(users, u), tf.gather(items, i)
            pred = tf.reduce_sum(pu * qi, axis=1) + tf.gather(ub, u) + tf.gather(ib, i) + mu
            mse = tf.reduce_mean(tf.square(pred - r))
            reg = 0.01 * (tf.reduce_sum(tf.square(pu)) + tf.reduce_sum(tf.square(qi)))
            loss = mse + reg
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, mse, pred, _grads(tf, g)

    compiled = tf.function(step)
    out = [(compiled if k >= 2 else step)(u, i, r) for k in range(4)]
    rmse = tf.sqrt(tf.reduce_mean(tf.square(tf.reduce_sum(tf.gather(users, u) * tf.gather(items, i), 1)
                                            + tf.gather(ub, u) + tf.gather(ib, i) + mu - r)))
    return out, vs, rmse


@parity(modes=True, **LOOSE)
def test_sparse_rules_of_momentum_adagrad_adam_and_ftrl_on_a_repeated_id(tf):
    """One embedding table per optimizer (legacy SGD with momentum, Adagrad, Adam, FTRL with L1/L2,
    and tf.keras's new Adagrad and Ftrl), the same batch of ids with id 1 three times and id 4 (the
    last row) once; three steps each.  The sparse rules: Adagrad's and FTRL's accumulators move only
    at the touched rows with the repeated id's gradients summed first; legacy Adam decays its moments
    everywhere."""
    ids = np.array([1, 3, 1, 4, 1], np.int32)
    y = np.array([1.0, -1.0, 0.5, 2.0, 0.0], np.float32)
    w = np.array([0.5, -1.0, 2.0], np.float32)
    opts = [tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9), tf.keras.optimizers.legacy.Adagrad(0.3),
            tf.keras.optimizers.legacy.Adam(0.1), tf.keras.optimizers.legacy.Ftrl(
                0.3, l1_regularization_strength=0.01, l2_regularization_strength=0.1),
            tf.keras.optimizers.Adagrad(0.3), tf.keras.optimizers.Ftrl(0.3, l2_shrinkage_regularization_strength=0.05)]
    out = []
    for k, opt in enumerate(opts):
        table = tf.Variable(init_array((5, 3), 1910 + k))
        losses = []
        for _ in range(3):
            with tf.GradientTape() as tape:
                e = tf.nn.embedding_lookup(table, ids)
                loss = tf.reduce_sum(tf.square(tf.linalg.matvec(e, w) - y))
            g = tape.gradient(loss, table)
            opt.apply_gradients([(g, table)])
            losses.append(loss)
        out.append((losses, _grad(tf, g), table))
    return out


# ---------------------------------------------------------------------------
# Retrieval: two towers, sampled softmax, NCE, BPR, top-k metrics
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_two_tower_retrieval_with_in_batch_softmax_negatives(tf):
    """Two towers (query: user embedding + dense; candidate: item embedding + dense), L2-normalised,
    ``logits = q @ c^T / 0.1`` with the batch's other items as negatives and ``labels = eye(B)``
    (``softmax_cross_entropy_with_logits``); one item appears twice in the batch (a false negative,
    as the plain recipe leaves it).  Adam in a compiled step; eager recall@1 over the batch."""
    qt = tf.Variable(init_array((6, 4), 1920))
    ct = tf.Variable(init_array((7, 4), 1921))
    qw = tf.Variable(init_array((4, 3), 1922))
    cw = tf.Variable(init_array((4, 3), 1923))
    uid = np.array([0, 5, 2, 3], np.int32)
    iid = np.array([6, 1, 6, 4], np.int32)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    vs = [qt, ct, qw, cw]

    def towers(u, i):
        q = tf.math.l2_normalize(tf.matmul(tf.nn.embedding_lookup(qt, u), qw), axis=1)
        c = tf.math.l2_normalize(tf.matmul(tf.nn.embedding_lookup(ct, i), cw), axis=1)
        return q, c

    @tf.function
    def step(u, i):
        with tf.GradientTape() as tape:
            q, c = towers(u, i)
            logits = tf.matmul(q, c, transpose_b=True) / 0.1
            labels = tf.eye(tf.shape(logits)[0])
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels, logits))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, logits, _grads(tf, g)

    out = [step(uid, iid) for _ in range(3)]
    q, c = towers(uid, iid)
    hit = tf.equal(tf.argmax(tf.matmul(q, c, transpose_b=True), axis=1, output_type=tf.int32), tf.range(4))
    return out, vs, tf.reduce_mean(tf.cast(hit, tf.float32))


def _sampled(tf, ids, true_p, sampled_p, batch, num_true=1):
    """A sampler's ``sampled_values`` drawn by NumPy: ids (int64), expected counts (float32)."""
    return (tf.constant(np.array(ids, np.int64)), tf.constant(np.full((batch, num_true), true_p, np.float32)),
            tf.constant(np.array(sampled_p, np.float32)))


@parity(modes=True, x64=True, **LOOSE)  # int64 ids: their IndexedSlices indices are int64
def test_sampled_softmax_item_prediction_with_accidental_hits(tf):
    """Next-item prediction with ``tf.nn.sampled_softmax_loss`` over a 12-item output table: the
    negatives ``[2, 7, 9, 2]`` (id 2 drawn twice, and it is one row's label) given as
    ``sampled_values``; with ``remove_accidental_hits`` on (training) and off (a probe).  The output
    table's gradient is an ``IndexedSlices`` over labels and samples; Adagrad applies it; the full
    softmax loss is the eval metric."""
    out_w = tf.Variable(init_array((12, 4), 1930))
    out_b = tf.Variable(np.zeros(12, np.float32))
    hid = tf.Variable(init_array((5, 4), 1931))
    ctx = np.array([0, 1, 2, 3, 4], np.int32)
    labels = np.array([[2], [5], [11], [0], [2]], np.int64)
    sv = _sampled(tf, [2, 7, 9, 2], 0.3, [0.3, 0.2, 0.25, 0.3], 5)
    opt = tf.keras.optimizers.legacy.Adagrad(0.5)
    vs = [out_w, out_b, hid]

    def step(remove):
        with tf.GradientTape() as tape:
            h = tf.gather(hid, ctx)
            losses = tf.nn.sampled_softmax_loss(out_w, out_b, labels, h, num_sampled=4, num_classes=12,
                                                sampled_values=sv, remove_accidental_hits=remove)
            loss = tf.reduce_mean(losses)
        return losses, tape.gradient(loss, vs)

    out = []
    for k in range(3):
        probe, gp = step(False)
        losses, g = step(True)
        opt.apply_gradients(zip(g, vs))
        full = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels[:, 0], tf.matmul(tf.gather(hid, ctx), out_w, transpose_b=True) + out_b)
        out.append((losses, probe, _grads(tf, g), _grad(tf, gp[0]), tf.reduce_mean(full)))
    return out, vs


@parity(modes=True, x64=True, **LOOSE)  # int64 ids: their IndexedSlices indices are int64
def test_nce_loss_word2vec_style_with_two_true_items_compiled(tf):
    """Item2vec by ``tf.nn.nce_loss`` (num_true 2: two co-occurring items per anchor) with fixed
    negatives drawn by NumPy, remove_accidental_hits on; the anchor table (``embedding_lookup``) and
    the NCE table both get ``IndexedSlices``; legacy SGD in a compiled step; the cosine neighbours'
    ``top_k`` of item 0 afterwards."""
    emb = tf.Variable(init_array((8, 3), 1940))
    nce_w = tf.Variable(init_array((8, 3), 1941))
    nce_b = tf.Variable(np.zeros(8, np.float32))
    anchors = np.array([0, 3, 5], np.int32)
    pos = np.array([[1, 2], [4, 0], [6, 7]], np.int64)
    sv = _sampled(tf, [2, 5, 6], 0.4, [0.4, 0.3, 0.2], 3, num_true=2)
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    vs = [emb, nce_w, nce_b]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            e = tf.nn.embedding_lookup(emb, anchors)
            losses = tf.nn.nce_loss(nce_w, nce_b, pos, e, num_sampled=3, num_classes=8, num_true=2,
                                    sampled_values=sv, remove_accidental_hits=True)
            loss = tf.reduce_mean(losses)
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return losses, _grads(tf, g)

    out = [step() for _ in range(3)]
    n = tf.math.l2_normalize(emb, axis=1)
    sims = tf.linalg.matvec(n, n[0])
    top = tf.math.top_k(sims, k=3)
    return out, vs, top.values, top.indices


@parity(modes=True, **LOOSE)
def test_bpr_with_numpy_negative_sampling_and_adagrad(tf):
    """Bayesian personalised ranking: for each (user, positive item) a negative drawn by NumPy
    (rejecting the user's positives), ``-mean(log_sigmoid(x_ui - x_uj))`` plus an L2 on the looked-up
    rows; the item table is gathered twice in one step (positive and negative rows: one gradient
    with both index sets); Adagrad; alternate eager and compiled steps; AUC on the batch."""
    rs = np.random.RandomState(1950)
    users = tf.Variable(init_array((4, 3), 1951))
    items = tf.Variable(init_array((6, 3), 1952))
    pos_of = {0: [1, 2], 1: [0], 2: [5, 3], 3: [2]}
    u = np.array([0, 0, 1, 2, 2, 3], np.int32)
    i = np.array([1, 2, 0, 5, 3, 2], np.int32)
    opt = tf.keras.optimizers.legacy.Adagrad(0.2)

    def negatives():
        out = []
        for uu in u:
            j = rs.randint(6)
            while j in pos_of[int(uu)]:
                j = rs.randint(6)
            out.append(j)
        return np.array(out, np.int32)

    def step(u, i, j):
        with tf.GradientTape() as tape:
            pu = tf.gather(users, u)
            qi, qj = tf.gather(items, i), tf.gather(items, j)
            x = tf.reduce_sum(pu * qi, 1) - tf.reduce_sum(pu * qj, 1)
            loss = -tf.reduce_mean(tf.math.log_sigmoid(x)) + 0.01 * tf.add_n(
                [tf.nn.l2_loss(pu), tf.nn.l2_loss(qi), tf.nn.l2_loss(qj)])
        g = tape.gradient(loss, [users, items])
        opt.apply_gradients(zip(g, [users, items]))
        return loss, tf.reduce_mean(tf.cast(x > 0, tf.float32)), _grads(tf, g)

    compiled = tf.function(step)
    out = []
    for k in range(4):
        j = negatives()
        out.append((j, (compiled if k % 2 else step)(u, i, j)))
    return out, users, items


@parity(modes=True)
def test_top_k_retrieval_metrics_with_ties(tf):
    """Offline retrieval metrics over a score matrix with ties: ``tf.math.top_k`` (ties go to the
    lower index), recall@k and precision@k from the hits of the top-k ids, ``in_top_k`` (which
    counts a tie at the boundary as in), MRR of the first relevant item and the excluded-seen-items
    trick (``scores + mask * -1e9``); k = 1, 2, 3."""
    scores = tf.constant([[0.5, 0.9, 0.9, 0.1, 0.9], [0.2, 0.2, 0.2, 0.2, 0.2], [1.0, -1.0, 0.3, 0.3, 2.0]])
    relevant = tf.constant([[0, 0, 1, 1, 0], [0, 0, 0, 0, 1], [1, 0, 0, 1, 0]], tf.float32)
    seen = tf.constant([[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]], tf.float32)
    targets = tf.constant([2, 4, 3])
    out = []
    for k in (1, 2, 3):
        for s in (scores, scores + seen * -1e9):
            vals, idx = tf.math.top_k(s, k=k)
            hits = tf.gather(relevant, idx, batch_dims=1)
            recall = tf.reduce_sum(hits, 1) / tf.reduce_sum(relevant, 1)
            precision = tf.reduce_mean(hits, 1)
            out.append((vals, idx, recall, precision, tf.math.in_top_k(targets, s, k)))
    ranks = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
    rel_sorted = tf.gather(relevant, ranks, batch_dims=1)
    first = tf.argmax(rel_sorted, axis=1, output_type=tf.int32)
    mrr = tf.reduce_mean(1.0 / tf.cast(first + 1, tf.float32))
    return out, ranks, first, mrr


# ---------------------------------------------------------------------------
# Feature interactions: FM, DCN, sparse features, bags
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_factorisation_machine_sum_square_minus_square_sum_with_ftrl(tf):
    """A field-aware-free FM for CTR: 3 categorical fields sharing one feature table (offsets per
    field), ``0.5 * sum((sum_f v)^2 - sum_f v^2)`` as the pairwise term, a linear term by
    ``gather`` of a weight column, ``sigmoid_cross_entropy_with_logits``; legacy FTRL on the linear
    table and legacy Adam on the factors; metrics: ``tf.keras.metrics.AUC`` and ``BinaryAccuracy``."""
    v = tf.Variable(init_array((9, 3), 1960))
    lin = tf.Variable(np.zeros((9, 1), np.float32))
    b = tf.Variable(0.0)
    x = np.array([[0, 3, 6], [1, 3, 8], [2, 4, 6], [0, 5, 7], [0, 3, 6]], np.int32)
    y = np.array([1.0, 0.0, 1.0, 0.0, 1.0], np.float32)
    ftrl = tf.keras.optimizers.legacy.Ftrl(0.2, l1_regularization_strength=0.001)
    adam = tf.keras.optimizers.legacy.Adam(0.05)
    auc, acc = tf.keras.metrics.AUC(num_thresholds=20), tf.keras.metrics.BinaryAccuracy()

    def logits_of(x):
        e = tf.gather(v, x)
        pair = 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(e, 1)) - tf.reduce_sum(tf.square(e), 1), 1)
        return tf.reduce_sum(tf.gather(lin, x)[..., 0], 1) + pair + b

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z = logits_of(x)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, z))
        gv, gl, gb = tape.gradient(loss, [v, lin, b])
        adam.apply_gradients([(gv, v), (gb, b)])
        ftrl.apply_gradients([(gl, lin)])
        auc.update_state(y, tf.sigmoid(z))
        acc.update_state(y, tf.sigmoid(z))
        out.append((loss, _grads(tf, [gv, gl, gb]), auc.result(), acc.result()))
    return out, v, lin, b


@parity(modes=True, **LOOSE)
def test_dcn_cross_layers_over_concatenated_embeddings(tf):
    """Deep & Cross: two categorical embeddings and a dense feature concatenated into ``x0``, two
    cross layers ``x_{l+1} = x0 * (x_l @ w_l + b_l) + x_l`` (DCN-v2's matrix form) beside a ReLU deep
    tower, a logit from both; legacy Adam in a compiled step."""
    e1 = tf.Variable(init_array((4, 2), 1970))
    e2 = tf.Variable(init_array((3, 2), 1971))
    cw = [tf.Variable(init_array((5, 5), 1972 + k, 0.3)) for k in range(2)]
    cb = [tf.Variable(np.zeros(5, np.float32)) for _ in range(2)]
    dw = tf.Variable(init_array((5, 3), 1975))
    ow = tf.Variable(init_array((8, 1), 1976))
    vs = [e1, e2, dw, ow] + cw + cb
    f1, f2 = np.array([0, 3, 3, 1], np.int32), np.array([2, 2, 0, 1], np.int32)
    dense = np.array([[0.5], [-1.0], [2.0], [0.0]], np.float32)
    y = np.array([[1.0], [0.0], [1.0], [0.0]], np.float32)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def step(f1, f2, dense, y):
        with tf.GradientTape() as tape:
            x0 = tf.concat([tf.gather(e1, f1), tf.gather(e2, f2), dense], axis=1)
            x = x0
            for w, b in zip(cw, cb):
                x = x0 * (tf.matmul(x, w) + b) + x
            deep = tf.nn.relu(tf.matmul(x0, dw))
            z = tf.matmul(tf.concat([x, deep], 1), ow)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, z))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, _grads(tf, g)

    return [step(f1, f2, dense, y) for _ in range(3)], vs


@parity(modes=True, x64=True, **LOOSE)  # int64 ids: their IndexedSlices indices are int64
def test_embedding_lookup_sparse_bags_under_three_combiners(tf):
    """Multivalent features as a ``tf.SparseTensor`` of ids (row 0: ids 1, 1, 4; row 1: id 0; row 2:
    ids 2 and 4; row 3: id 3) with a weights SparseTensor; ``tf.nn.embedding_lookup_sparse`` with
    combiners mean, sqrtn and sum, weighted and unweighted, feeding a linear scorer; the table's
    gradient (an ``IndexedSlices``) per combiner; legacy Adagrad trains on the sqrtn bags."""
    table = tf.Variable(init_array((5, 3), 1980))
    w = tf.Variable(init_array((3,), 1981))
    idx = np.array([[0, 0], [0, 1], [0, 2], [1, 0], [2, 0], [2, 1], [3, 0]], np.int64)
    ids = tf.SparseTensor(idx, np.array([1, 1, 4, 0, 2, 4, 3], np.int64), [4, 3])
    wts = tf.SparseTensor(idx, np.array([1.0, 0.5, 2.0, 1.0, 0.3, 0.7, 3.0], np.float32), [4, 3])
    y = np.array([1.0, -1.0, 0.5, 0.0], np.float32)
    out = []
    for comb in ("mean", "sqrtn", "sum"):
        for weights in (None, wts):
            with tf.GradientTape() as tape:
                bag = tf.nn.embedding_lookup_sparse(table, ids, weights, combiner=comb)
                loss = tf.reduce_sum(tf.square(tf.linalg.matvec(bag, w) - y))
            g = tape.gradient(loss, [table, w])
            out.append((bag, loss, _grads(tf, g)))
    opt = tf.keras.optimizers.legacy.Adagrad(0.3)
    for _ in range(2):
        with tf.GradientTape() as tape:
            bag = tf.nn.embedding_lookup_sparse(table, ids, wts, combiner="sqrtn")
            loss = tf.reduce_sum(tf.square(tf.linalg.matvec(bag, w) - y))
        opt.apply_gradients(zip(tape.gradient(loss, [table, w]), [table, w]))
        out.append(loss)
    return out, table, w


@parity(modes=True, **LOOSE)
def test_multi_hot_bags_as_ragged_tensors_mean_pooled(tf):
    """A user's history as a ``tf.RaggedTensor`` of item ids (rows of 3, 1 and 2 ids, one repeated),
    embedded by ``tf.ragged.map_flat_values(tf.nn.embedding_lookup, table, ids)`` and by
    ``tf.gather(table, ids)``, mean-pooled by ``reduce_mean(axis=1)``; the pooled vector scores a
    target item; legacy SGD with momentum on the table."""
    table = tf.Variable(init_array((6, 3), 1990))
    hist = tf.ragged.constant([[1, 4, 1], [5], [0, 2]])
    target = np.array([2, 5, 3], np.int32)
    y = np.array([1.0, 0.0, 1.0], np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.2, momentum=0.5)
    out = []
    for k in range(3):
        with tf.GradientTape() as tape:
            if k % 2:
                e = tf.gather(table, hist)
            else:
                e = tf.ragged.map_flat_values(tf.nn.embedding_lookup, table, hist)
            pooled = tf.reduce_mean(e, axis=1)
            z = tf.reduce_sum(pooled * tf.gather(table, target), 1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, z))
        g = tape.gradient(loss, table)
        opt.apply_gradients([(g, table)])
        out.append((pooled, loss, _grad(tf, g)))
    return out, table


@parity(modes=True, **LOOSE)
def test_clipping_indexed_slices_by_norm_and_by_global_norm(tf):
    """Gradient clipping in a recommender step: the table's ``IndexedSlices`` gradient clipped by
    ``tf.clip_by_norm`` (TF keeps the type) and the mix of it with the dense tower's gradients by
    ``tf.clip_by_global_norm`` (TF keeps each type too), clip thresholds below and above the norm;
    ``tf.linalg.global_norm`` of the mix; SGD applies the clipped gradients."""
    table = tf.Variable(init_array((5, 3), 2000, 2.0))
    w = tf.Variable(init_array((3, 2), 2001))
    ids = np.array([4, 0, 4], np.int32)
    y = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for clip in (0.5, 100.0):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(tf.gather(table, ids), w) - y))
        gt, gw = tape.gradient(loss, [table, w])
        one = tf.clip_by_norm(gt, clip)
        (ct, cw), norm = tf.clip_by_global_norm([gt, gw], clip)
        opt.apply_gradients([(ct, table), (cw, w)])
        out.append((loss, _grad(tf, one), _grads(tf, [ct, cw]), norm, tf.linalg.global_norm([gt, gw])))
    return out, table, w


# ---------------------------------------------------------------------------
# Wide & deep with Keras preprocessing layers (default mode only: heavy)
# ---------------------------------------------------------------------------

@parity(**LOOSE)
def test_wide_and_deep_with_keras_embedding_hashing_lookup_and_category_encoding(tf):
    """Wide & deep: a string feature hashed by ``tf.keras.layers.Hashing(num_bins=7)`` (TF's
    farmhash values) into an ``Embedding``, an integer feature by ``IntegerLookup`` (a vocabulary,
    one OOV index for unseen ids) into another ``Embedding``, a multi-hot wide part by
    ``CategoryEncoding(output_mode="multi_hot")``; a Dense deep tower and a Dense wide layer summed
    into a logit.  A tape loop with legacy-free Adam over ``trainable_variables``; the embedding
    gradients are ``IndexedSlices`` in TF; accuracy metric."""
    hashing = tf.keras.layers.Hashing(num_bins=7)
    lookup = tf.keras.layers.IntegerLookup(vocabulary=[10, 20, 30, 40])
    cat = tf.keras.layers.CategoryEncoding(num_tokens=5, output_mode="multi_hot")
    e_city = tf.keras.layers.Embedding(7, 3)
    e_item = tf.keras.layers.Embedding(5, 3)
    deep = tf.keras.layers.Dense(4, activation="relu")
    head = tf.keras.layers.Dense(1)
    wide = tf.keras.layers.Dense(1, use_bias=False)
    city = np.array(["paris", "tokyo", "lima", "paris", "oslo"])  # strings stay NumPy (tapejax has no string tensors)
    item = tf.constant([20, 99, 10, 40, 20])
    tags = tf.constant([[0, 1], [2, 2], [4, 0], [3, 1], [1, 1]])
    y = tf.constant([[1.0], [0.0], [1.0], [0.0], [1.0]])
    h, ix, mh = hashing(city), lookup(item), cat(tags)
    layers = [e_city, e_item, deep, head, wide]

    def model(h, ix, mh):
        x = tf.concat([e_city(h), e_item(ix)], axis=1)
        return head(deep(x)) + wide(mh)

    model(h, ix, mh)
    for k, layer in enumerate(layers):
        layer.set_weights([init_array(tuple(v.shape), 2010 + 7 * k + j) for j, v in enumerate(layer.weights)])
    vs = [v for layer in layers for v in layer.trainable_variables]
    opt = tf.keras.optimizers.Adam(0.05)
    acc = tf.keras.metrics.BinaryAccuracy(threshold=0.0)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z = model(h, ix, mh)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, z))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        acc.update_state(y, z)
        out.append((loss, [tf.convert_to_tensor(x) for x in g], acc.result()))
    ids = [tf.cast(t, tf.int32) for t in (h, ix)]  # int64 in TF, int32 in tapejax without x64 (README)
    return ids, mh, out, vs, [isinstance(x, tf.IndexedSlices) for x in g[:2]]
