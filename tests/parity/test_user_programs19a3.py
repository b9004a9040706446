"""Round nineteen (a) of realistic user programs, third part: the sparse corners of recommender and
graph training that ``test_user_programs19a.py`` and ``test_user_programs19a2.py`` leave out, under
real TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and off
(``modes=True``; the Keras-layer GCN in the default mode only).

``safe_embedding_lookup_sparse`` with pruned ids and a default id beside a wide part written as
``sparse_dense_matmul`` of a multi-hot SparseTensor; the remaining optimizers' sparse rules
(RMSprop centred with momentum, Adamax, Nadam, Adadelta, and the new Keras optimizers with
Nesterov momentum and AMSGrad) on a repeated id; ``IndexedSlices`` returned from a
``tf.function`` and clipped inside it; sharded tables (``embedding_lookup`` of a list of Variables),
``gather_nd`` of single-index rows and a hand-written sparse SGD by ``scatter_sub``; Keras's top-k
accuracy metrics over tied scores; a GCN whose normalisation is computed with ``tf.sparse`` ops
(``eye``, ``add``, ``reduce_sum``, ``map_values``) and edge dropout by ``tf.sparse.retain`` of a
NumPy mask; the ``tf.sparse.segment_*`` aggregators (``indices`` and ``segment_ids``,
``num_segments``); and a GCN written as a ``tf.keras.layers.Layer`` with ``add_weight``.
"""
import numpy as np

from .harness import init_array, parity
from .test_user_programs19a2 import DST, LOOSE, SRC, N, Y, _grad  # (the same graph)

X = init_array((N, 4), 2090, 1.0)


# ---------------------------------------------------------------------------
# Recommenders
# ---------------------------------------------------------------------------

@parity(modes=True, x64=True, **LOOSE)  # int64 ids: the IndexedSlices indices are int64
def test_safe_embedding_lookup_sparse_with_pruned_ids_and_a_sparse_wide_part(tf):
    """A feature column's lookup as TF-era code calls it: ``tf.nn.safe_embedding_lookup_sparse``
    over ids with a -1 (padding), a zero weight and an empty row (``default_id=0`` and None), and a
    wide linear part ``tf.sparse.sparse_dense_matmul(multi_hot, w)`` over the same ids as a
    multi-hot SparseTensor (``tf.sparse.to_indicator``); legacy Adagrad on both tables."""
    idx = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [3, 0], [3, 1], [3, 2]], np.int64)
    ids = tf.SparseTensor(idx, np.array([2, -1, 4, 2, 0, 3, 3], np.int64), [4, 3])
    wts = tf.SparseTensor(idx, np.array([1.0, 1.0, 0.0, 2.0, 0.5, 1.0, 1.5], np.float32), [4, 3])
    pos_ids = tf.SparseTensor(idx, np.array([2, 0, 4, 2, 0, 3, 3], np.int64), [4, 3])
    table = tf.Variable(init_array((5, 3), 2091))
    wide = tf.Variable(init_array((5, 1), 2092))
    w = tf.Variable(init_array((3, 1), 2093))
    y = np.array([[1.0], [0.0], [1.0], [0.0]], np.float32)
    multi_hot = tf.sparse.from_dense(tf.cast(tf.sparse.to_indicator(pos_ids, 5), tf.float32))
    opt = tf.keras.optimizers.legacy.Adagrad(0.3)
    out = []
    for k in range(3):
        with tf.GradientTape() as tape:
            bag = tf.nn.safe_embedding_lookup_sparse(table, ids, wts, combiner="sqrtn",
                                                     default_id=None if k == 1 else 0)
            z = tf.matmul(bag, w) + tf.sparse.sparse_dense_matmul(multi_hot, wide)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, z))
        g = tape.gradient(loss, [table, wide, w])
        opt.apply_gradients(zip(g, [table, wide, w]))
        out.append((bag, loss, [_grad(tf, x) for x in g]))
    return out, table, wide, w, multi_hot.indices, multi_hot.values


@parity(modes=True, **LOOSE)
def test_sparse_rules_of_rmsprop_adamax_nadam_adadelta_and_the_new_optimizers(tf):
    """The sparse updates of the optimizers round 19a's first file leaves out, one table each, on a
    batch with id 2 three times and the last row once, three steps: legacy RMSprop (centred, with
    momentum), Adamax, Nadam, Adadelta; the new tf.keras SGD (Nesterov), Adam (AMSGrad), RMSprop,
    Adamax and Nadam."""
    ids = np.array([2, 0, 2, 5, 2], np.int32)
    y = np.array([1.0, -1.0, 0.5, 2.0, 0.0], np.float32)
    w = np.array([0.5, -1.0], np.float32)
    k = tf.keras.optimizers
    opts = [k.legacy.RMSprop(0.05, momentum=0.5, centered=True), k.legacy.Adamax(0.1), k.legacy.Nadam(0.05),
            k.legacy.Adadelta(1.0), k.SGD(0.05, momentum=0.9, nesterov=True), k.Adam(0.05, amsgrad=True),
            k.RMSprop(0.05), k.Adamax(0.1), k.Nadam(0.05)]
    out = []
    for j, opt in enumerate(opts):
        table = tf.Variable(init_array((6, 2), 2100 + j))
        losses = []
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.linalg.matvec(tf.gather(table, ids), w) - y))
            opt.apply_gradients([(tape.gradient(loss, table), table)])
            losses.append(loss)
        out.append((losses, table))
    return out


@parity(modes=True, **LOOSE)
def test_indexed_slices_returned_from_a_function_and_clipped_inside_it(tf):
    """A compiled step that returns the raw gradients (an ``IndexedSlices`` from ``gather`` on the
    table, a dense one for the tower) and the table's gradient clipped inside the function by
    ``tf.clip_by_norm``; the caller inspects the types, ``indices`` and ``dense_shape``, sums two
    steps' slices by ``tf.concat`` of values and indices (gradient accumulation as TF-era code
    writes it) and applies the accumulated slices with legacy SGD."""
    table = tf.Variable(init_array((5, 2), 2110, 2.0))
    w = tf.Variable(init_array((2, 1), 2111))
    batches = [(np.array([4, 1, 4], np.int32), np.array([[1.0], [0.0], [2.0]], np.float32)),
               (np.array([0, 1], np.int32), np.array([[0.5], [-1.0]], np.float32))]
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def grads(ids, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(tf.gather(table, ids), w) - y))
        gt, gw = tape.gradient(loss, [table, w])
        return loss, gt, gw, tf.clip_by_norm(gt, 1.0)

    out, acc = [], []
    for ids, y in batches:
        loss, gt, gw, clipped = grads(ids, y)
        acc.append(gt)
        out.append((loss, isinstance(gt, tf.IndexedSlices), isinstance(clipped, tf.IndexedSlices), gt.indices,
                    tf.cast(gt.dense_shape, tf.int32), gt.values, tf.convert_to_tensor(clipped), gw))
    total = tf.IndexedSlices(tf.concat([g.values for g in acc], 0), tf.concat([g.indices for g in acc], 0),
                             acc[0].dense_shape)
    opt.apply_gradients([(total, table)])
    return out, tf.convert_to_tensor(total), table


@parity(modes=True, **LOOSE)
def test_sharded_tables_gather_nd_rows_and_manual_sparse_sgd_by_scatter_sub(tf):
    """TF1-era partitioned tables: the item table as two Variable shards looked up by
    ``tf.nn.embedding_lookup([shard0, shard1], ids)`` (TF2's div strategy: each shard gets an
    ``IndexedSlices`` of its own rows) with ``max_norm``, the user table by
    ``tf.gather_nd(users, uid[:, None])`` (an ``IndexedSlices`` too, TF's ``_GatherNdGrad``); the
    update is written by hand as TF-era code did: ``var.scatter_sub(tf.IndexedSlices(lr * g.values,
    g.indices))`` (a repeated id subtracted twice), and the two batches' user gradients summed by
    ``tf.add_n`` first (densified)."""
    shards = [tf.Variable(init_array((3, 2), 2150)), tf.Variable(init_array((2, 2), 2151))]
    users = tf.Variable(init_array((4, 2), 2152))
    batches = [(np.array([0, 3, 3], np.int32), np.array([4, 1, 0], np.int32), np.array([1.0, 0.0, 1.0], np.float32)),
               (np.array([2, 0], np.int32), np.array([3, 4], np.int32), np.array([0.0, 1.0], np.float32))]
    out, user_grads = [], []
    for uid, iid, y in batches:
        with tf.GradientTape() as tape:
            u = tf.gather_nd(users, uid[:, None])
            v = tf.nn.embedding_lookup(shards, iid, max_norm=1.0)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, tf.reduce_sum(u * v, 1)))
        gu, g0, g1 = tape.gradient(loss, [users] + shards)
        for var, g in ((shards[0], g0), (shards[1], g1)):
            var.scatter_sub(tf.IndexedSlices(0.5 * g.values, g.indices))
        user_grads.append(gu)
        out.append((loss, v, [_grad(tf, x) for x in (gu, g0, g1)]))
    total = tf.add_n(user_grads)
    users.assign_sub(0.5 * total)
    return out, _grad(tf, total), shards, users


@parity(modes=True)
def test_retrieval_eval_with_keras_top_k_metrics_and_tied_scores(tf):
    """Retrieval evaluation over candidate scores with ties: tf.keras's
    ``SparseTopKCategoricalAccuracy`` (k 1 and 2) and ``TopKCategoricalAccuracy`` updated over two
    batches (a tie at the k-th score counts as a hit, TF's ``in_top_k``), beside ``tf.math.in_top_k``
    and a hand-written hit rate from ``tf.math.top_k`` (ties to the lower index: a miss)."""
    y = [np.array([2, 0, 1]), np.array([1, 1])]
    p = [np.array([[0.2, 0.4, 0.4], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8]], np.float32),
         np.array([[0.5, 0.5, 0.0], [0.1, 0.6, 0.3]], np.float32)]
    m1 = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=1)
    m2 = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2)
    m3 = tf.keras.metrics.TopKCategoricalAccuracy(k=1)
    out = []
    for yy, pp in zip(y, p):
        m1.update_state(yy, pp)
        m2.update_state(yy, pp)
        m3.update_state(tf.one_hot(yy, 3), pp)
        top = tf.math.top_k(pp, k=1).indices[:, 0]
        out.append((m1.result(), m2.result(), m3.result(), tf.math.in_top_k(yy, pp, 1),
                    tf.reduce_mean(tf.cast(tf.equal(top, yy), tf.float32))))
    return out


# ---------------------------------------------------------------------------
# Graph networks
# ---------------------------------------------------------------------------

@parity(modes=True, x64=True, **LOOSE)  # a SparseTensor's indices are int64
def test_gcn_normalised_by_tf_sparse_ops_with_edge_dropout_by_retain(tf):
    """The GCN normalisation computed with TF's sparse ops: ``A + I`` by ``tf.sparse.add`` of the
    edge SparseTensor (``tf.sparse.reorder``-ed) and ``tf.sparse.eye``, degrees by
    ``tf.sparse.reduce_sum(axis=1)``, ``D^-1/2 A D^-1/2`` by ``tf.sparse.map_values`` with the
    gathered row and column scales; edge dropout per step by ``tf.sparse.retain`` with a NumPy keep
    mask; a one-layer GCN trained by legacy Adam."""
    rs = np.random.RandomState(2120)
    idx = np.stack([np.r_[SRC, DST], np.r_[DST, SRC]], 1).astype(np.int64)
    a = tf.sparse.reorder(tf.SparseTensor(idx, np.ones(len(idx), np.float32), [N, N]))
    w = tf.Variable(init_array((4, 3), 2121))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        keep = rs.rand(len(idx)) > 0.25
        ad = tf.sparse.add(tf.sparse.retain(a, keep), tf.sparse.eye(N))
        deg = tf.sparse.reduce_sum(ad, axis=1)
        d = tf.math.rsqrt(deg)
        rows, cols = ad.indices[:, 0], ad.indices[:, 1]
        an = tf.sparse.map_values(tf.multiply, ad, tf.gather(d, rows) * tf.gather(d, cols))
        with tf.GradientTape() as tape:
            logits = tf.sparse.sparse_dense_matmul(an, tf.matmul(X, w))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, logits))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((keep, ad.indices, ad.values, deg, an.values, loss, g))
    return out, w


@parity(modes=True, **LOOSE)
def test_sparse_segment_aggregators_over_edges(tf):
    """Neighbour aggregation by the ``tf.sparse.segment_*`` ops: ``data`` the node-feature
    Variable, ``indices`` the edges' sources, ``segment_ids`` their sorted destinations, with
    ``num_segments`` covering the isolated node (sum, mean, sqrt_n), and without it (the output
    ends at the last destination); the gradients w.r.t. the features; legacy SGD on the mean
    variant."""
    order = np.argsort(DST, kind="stable")
    src, dst = SRC[order], DST[order]
    feats = tf.Variable(X)
    wv = tf.Variable(init_array((4, 3), 2130))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for op in (tf.sparse.segment_sum, tf.sparse.segment_mean, tf.sparse.segment_sqrt_n):
        for n in (N, None):
            with tf.GradientTape() as tape:
                agg = op(feats, src, dst, num_segments=n) if n else op(feats, src, dst)
                loss = tf.reduce_sum(tf.sin(tf.matmul(agg, wv)))
            g = tape.gradient(loss, [feats, wv])
            out.append((agg, loss, [_grad(tf, x) for x in g]))
    for _ in range(2):
        with tf.GradientTape() as tape:
            agg = tf.sparse.segment_mean(feats, src, dst, num_segments=N)
            logits = tf.matmul(tf.concat([feats[:, :2], agg[:, 2:]], 1), wv)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, logits))
        g = tape.gradient(loss, [feats, wv])
        opt.apply_gradients(zip(g, [feats, wv]))
        out.append((loss, [_grad(tf, x) for x in g]))
    return out, feats, wv


@parity(**LOOSE)
def test_gcn_as_a_keras_layer_with_add_weight_in_a_tape_loop(tf):
    """A GCN layer written as a ``tf.keras.layers.Layer``: ``build`` makes the kernel and bias by
    ``add_weight``, ``call(x)`` multiplies by the layer's normalised adjacency (a dense constant
    kept on the layer) and applies an activation; two layers in a ``tf.keras.Sequential``, weights
    set from NumPy, trained by a tape loop with tf.keras's Adam (one step compiled), the model's
    ``losses`` (an ``activity_regularizer``) added to the loss."""
    a = np.eye(N, dtype=np.float32)
    a[SRC, DST] = a[DST, SRC] = 1.0
    d = 1.0 / np.sqrt(a.sum(1))
    a_hat = (a * d[:, None] * d[None, :]).astype(np.float32)

    class GraphConv(tf.keras.layers.Layer):
        def __init__(self, units, activation=None, **kw):
            super().__init__(**kw)
            self.units, self.activation = units, tf.keras.activations.get(activation)

        def build(self, input_shape):
            self.kernel = self.add_weight(name="kernel", shape=(int(input_shape[-1]), self.units))
            self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

        def call(self, x):
            return self.activation(tf.matmul(a_hat, tf.matmul(x, self.kernel)) + self.bias)

    model = tf.keras.Sequential([GraphConv(5, "relu", activity_regularizer=tf.keras.regularizers.L2(0.01)),
                                 GraphConv(3)])
    model(X)
    model.set_weights([init_array(tuple(v.shape), 2140 + j) for j, v in enumerate(model.weights)])
    opt = tf.keras.optimizers.Adam(0.05)

    def step(x):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(Y, logits))
            loss = ce + tf.add_n(model.losses)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, ce, g

    compiled = tf.function(step)
    out = [(compiled if k == 2 else step)(tf.constant(X)) for k in range(3)]
    return out, [v.numpy() for v in model.weights], model(X)
