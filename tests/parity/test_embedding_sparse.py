"""``tf.nn.embedding_lookup_sparse`` / ``safe_embedding_lookup_sparse`` under TF and tapejax:
values and gradients for every combiner, weighted and not, ``max_norm``, sharded tables, the
safe variant's pruning and empty rows, errors, and a small recommender trained a few steps."""
import numpy as np

from .harness import parity, raises


def _ids(tf, ids, dtype="int64"):
    return tf.sparse.SparseTensor([[0, 0], [0, 1], [2, 0], [3, 2]], tf.constant(ids, getattr(tf, dtype)), [5, 4])


@parity
def test_embedding_lookup_sparse_combiners_and_gradients(tf):
    """sum / mean / sqrtn, with and without weights: values (rows up to the last id, an empty row
    zero) and the table's gradient; the weights' gradient too."""
    params = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    sp = _ids(tf, [1, 3, 5, 2])
    wv = tf.Variable([2.0, 0.5, 1.0, -1.0])
    out = []
    for comb in ("sum", "mean", "sqrtn"):
        with tf.GradientTape() as t:
            w = tf.sparse.SparseTensor(sp.indices, wv * 1.0, sp.dense_shape)
            y = tf.nn.embedding_lookup_sparse(params, sp, None, combiner=comb)
            yw = tf.nn.embedding_lookup_sparse(params, sp, w, combiner=comb)
            loss = tf.reduce_sum(y * y) + tf.reduce_sum(yw * tf.constant([1.0, -2.0]))
        gp, gw = t.gradient(loss, [params, wv])
        out.append((y, yw, tf.convert_to_tensor(gp), gw))
    return out


@parity
def test_embedding_lookup_sparse_options_and_errors(tf):
    """The default combiner (mean), ``max_norm``, a table split in two shards, and TF's errors."""
    params = tf.constant(np.arange(12, dtype=np.float32).reshape(6, 2))
    sp = _ids(tf, [1, 3, 5, 2])
    return (tf.nn.embedding_lookup_sparse(params, sp, None), tf.nn.embedding_lookup_sparse(params, sp, None, max_norm=1.0),
            tf.nn.embedding_lookup_sparse([params[:3], params[3:]], sp, None),
            raises(tf.nn.embedding_lookup_sparse, params, sp, None, combiner="max"),
            raises(tf.nn.embedding_lookup_sparse, params, tf.constant([[1]]), None))


@parity
def test_safe_embedding_lookup_sparse(tf):
    """Negative ids and non-positive weights dropped, empty rows zero or ``default_id``'s row, a
    rank-3 id tensor, and gradients through the kept entries."""
    params = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    sp = _ids(tf, [1, -1, 5, 2])
    w = tf.sparse.SparseTensor(sp.indices, [2.0, 0.5, 0.0, 1.0], sp.dense_shape)
    sp3 = tf.sparse.reshape(tf.sparse.SparseTensor([[0, 0], [0, 1], [1, 0]], tf.constant([1, 2, 3], tf.int64), [2, 2]),
                            [1, 2, 2])
    with tf.GradientTape() as t:
        a = tf.nn.safe_embedding_lookup_sparse(params, sp, w, combiner="mean")
        b = tf.nn.safe_embedding_lookup_sparse(params, sp, None, default_id=4, combiner="sqrtn")
        loss = tf.reduce_sum(a * a) + tf.reduce_sum(b)
    return (a, b, tf.nn.safe_embedding_lookup_sparse(params, sp3), tf.nn.safe_embedding_lookup_sparse(params, sp3, combiner="sum"),
            tf.convert_to_tensor(t.gradient(loss, params)))


@parity(atol=1e-5)
def test_a_bag_of_features_recommender_trains_as_tf(tf):
    """Users' item histories (a SparseTensor of ids with weights) pooled by
    ``safe_embedding_lookup_sparse``, a dot product with the target item's embedding, logistic
    loss, Adam for a few steps: TF's losses and tables."""
    rng = np.random.RandomState(0)
    items = tf.Variable(rng.randn(8, 4).astype(np.float32) * 0.3)
    hist = tf.sparse.SparseTensor([[0, 0], [0, 1], [1, 0], [2, 0], [2, 1], [2, 2], [3, 1]],
                                  tf.constant([1, 2, 3, 4, 5, 1, 7], tf.int64), [4, 3])
    weights = tf.sparse.SparseTensor(hist.indices, [1.0, 0.5, 1.0, 2.0, 1.0, 0.25, 1.0], hist.dense_shape)
    target = tf.constant([2, 6, 1, 0])
    label = tf.constant([1.0, 0.0, 1.0, 0.0])
    opt = tf.keras.optimizers.Adam(0.05)
    losses = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            user = tf.nn.safe_embedding_lookup_sparse(items, hist, weights, combiner="sqrtn")
            logit = tf.reduce_sum(user * tf.gather(items, target), axis=1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logit))
        g = tape.gradient(loss, items)
        opt.apply_gradients([(g, items)])
        losses.append(loss)
    return losses, items
