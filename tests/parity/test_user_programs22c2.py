"""Round twenty-two (c) of realistic user programs, second half: metrics and preprocessing layers, as
TF's guides ("Training and evaluation with the built-in methods", "Working with preprocessing
layers", "Classify structured data using Keras preprocessing layers") and the keras.io examples
write them, run under real TensorFlow 2.21 (tf_keras) and under tapejax (Keras 3 on JAX behind
``tf.keras``).

Metrics: a ``Metric`` subclass with ``add_weight`` / ``update_state(y_true, y_pred,
sample_weight)`` / ``result`` / ``reset_state`` under ``fit`` and standalone; the stateful metrics
a custom loop updates batch by batch (``AUC``, ``Precision`` / ``Recall`` with several thresholds,
``MeanIoU``, ``TopKCategoricalAccuracy``, ``F1Score``) with their results and resets; metric
strings against objects in ``compile``.  Preprocessing on tabular data: ``Normalization.adapt``
on an array and on a dataset, ``StringLookup`` / ``IntegerLookup`` with OOV indices and their
output modes, ``CategoryEncoding``, ``Discretization``, ``Hashing`` and a feature cross by hand,
and the structured-data guide's model on a dict of features under ``fit`` and ``predict``.
Keras programs run in the default mode only.
"""
import numpy as np

from .harness import keras_init, parity, xfail_on_tapejax
from .test_user_programs22c import KTOL, _cls, _ev, _hist, _weights


def _functional(tf, seed, d=4, classes=3, activation=None):
    inp = tf.keras.Input((d,))
    out = tf.keras.layers.Dense(classes, activation=activation)(tf.keras.layers.Dense(6, activation="relu")(inp))
    model = tf.keras.Model(inp, out)
    keras_init(model, seed)
    return model


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------

def _true_positives_metric(tf):
    class CategoricalTruePositives(tf.keras.metrics.Metric):
        """The built-in-methods guide's metric: how many samples were classified correctly."""

        def __init__(self, name="categorical_true_positives", **kwargs):
            super().__init__(name=name, **kwargs)
            self.true_positives = self.add_weight(name="ctp", initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            y_pred = tf.reshape(tf.argmax(y_pred, axis=1), shape=(-1, 1))
            values = tf.cast(tf.cast(y_true, "int32") == tf.cast(y_pred, "int32"), "float32")
            if sample_weight is not None:
                values = tf.multiply(values, tf.reshape(tf.cast(sample_weight, "float32"), shape=(-1, 1)))
            self.true_positives.assign_add(tf.reduce_sum(values))

        def result(self):
            return self.true_positives

        def reset_state(self):
            self.true_positives.assign(0.0)

    return CategoricalTruePositives


@parity(**KTOL)
def test_guide_categorical_true_positives_metric_under_fit_and_standalone(tf):
    """The guide's ``CategoricalTruePositives`` (one ``add_weight`` counter) in ``compile(metrics=)``
    beside a built-in one: its per-epoch values (reset at each epoch, summed over the batches), its
    ``val_`` value, ``evaluate``; then standalone: ``update_state`` with a ``sample_weight``,
    ``result()``, ``reset_state()``."""
    x, y = _cls(16, seed=2401)
    y = y[:, None]
    xv, yv = _cls(8, seed=2402)
    CTP = _true_positives_metric(tf)
    model = _functional(tf, 2403)
    model.compile(optimizer=tf.keras.optimizers.RMSprop(0.02),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[CTP(), "sparse_categorical_accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, validation_data=(xv, yv[:, None]), verbose=0)
    ev = _ev(model, xv, yv[:, None])
    m = CTP()
    logits = model.predict(xv, verbose=0)
    m.update_state(yv[:, None], logits[:4])
    first = float(m.result())
    m.update_state(yv[:, None][4:], logits[4:], sample_weight=np.array([0.5, 1.0, 2.0, 0.0], np.float32))
    second = float(m.result())
    m.reset_state()
    return _hist(h), ev, first, second, float(m.result()), [v.name.split("/")[-1].split(":")[0] for v in m.variables]


@parity(**KTOL)
def test_a_custom_metric_per_output_on_a_dataset_of_weighted_dict_triples(tf):
    """A two-input, two-output model fed by a ``tf.data`` dataset of ``(inputs, targets,
    sample_weights)`` triples, each a dict by name; the guide's ``CategoricalTruePositives`` as a
    weighted metric of one output and ``AUC`` of the other (a sigmoid head); validation on another
    dataset; the metric objects' own ``result()`` after ``evaluate`` (its last run's state) and
    ``predict`` on a dataset of dicts with a short last batch."""
    rs = np.random.RandomState(2405)
    n = 14
    feats = {"num": rs.randn(n, 3).astype(np.float32), "aux": rs.randn(n, 2).astype(np.float32)}
    targets = {"kind": rs.randint(0, 3, size=(n, 1)).astype(np.int32),
               "flag": (rs.rand(n, 1) > 0.5).astype(np.float32)}
    weights = {"kind": np.linspace(0.5, 1.5, n).astype(np.float32), "flag": np.ones(n, np.float32)}
    L = tf.keras.layers
    num_in, aux_in = tf.keras.Input((3,), name="num"), tf.keras.Input((2,), name="aux")
    h = L.Dense(5, activation="tanh")(L.concatenate([num_in, aux_in]))
    model = tf.keras.Model({"num": num_in, "aux": aux_in},
                           [L.Dense(3, name="kind")(h), L.Dense(1, activation="sigmoid", name="flag")(h)])
    keras_init(model, 2406)
    ctp, auc = _true_positives_metric(tf)(), tf.keras.metrics.AUC(num_thresholds=9, name="auc")
    model.compile(optimizer=tf.keras.optimizers.Adam(0.03),
                  loss={"kind": tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        "flag": "binary_crossentropy"},
                  metrics={"flag": [auc]}, weighted_metrics={"kind": [ctp]})
    ds = tf.data.Dataset.from_tensor_slices((feats, targets, weights)).batch(4)
    val = tf.data.Dataset.from_tensor_slices(({k: v[:6] for k, v in feats.items()},
                                              {k: v[:6] for k, v in targets.items()})).batch(3)
    h = model.fit(ds, validation_data=val, epochs=2, verbose=0)
    ev = sorted(model.evaluate(ds, verbose=0, return_dict=True).items())
    pred = model.predict(tf.data.Dataset.from_tensor_slices(feats).batch(4), verbose=0)
    return _hist(h), ev, float(ctp.result()), float(auc.result()), pred, _weights(model)


@parity(**KTOL)
def test_auc_precision_recall_with_thresholds_in_a_custom_evaluation_loop(tf):
    """A custom loop over batches updating ``AUC(num_thresholds=11)`` (ROC), ``AUC(curve="PR",
    summation_method="minoring")``, ``Precision(thresholds=[0.3, 0.5, 0.7])``, ``Recall(top_k=2)``
    and ``Precision(class_id=1)`` on sigmoid probabilities with per-sample weights; the results
    after each batch, then after ``reset_state``."""
    rs = np.random.RandomState(2411)
    probs = rs.rand(12, 3).astype(np.float32)
    labels = (rs.rand(12, 3) > 0.5).astype(np.float32)
    w = rs.rand(12).astype(np.float32)
    M = tf.keras.metrics
    metrics = [M.AUC(num_thresholds=11), M.AUC(curve="PR", summation_method="minoring", num_thresholds=11),
               M.Precision(thresholds=[0.3, 0.5, 0.7]), M.Recall(top_k=2), M.Precision(class_id=1)]
    out = []
    for i in range(0, 12, 4):
        for m in metrics:
            m.update_state(labels[i:i + 4], probs[i:i + 4], sample_weight=w[i:i + 4])
        out.append([np.asarray(m.result()) for m in metrics])
    for m in metrics:
        m.reset_state()
    return out, [np.asarray(m.result()) for m in metrics]


@parity(**KTOL)
def test_mean_iou_top_k_and_f1_score_standalone_and_reset(tf):
    """``MeanIoU(num_classes=3)`` on integer labels and predictions (its confusion matrix read back
    by ``total_cm``: float32 in tf_keras, an integer Variable in Keras 3, so compared as float32), ``TopKCategoricalAccuracy(k=2)`` on one-hot labels, ``F1Score(average=
    "macro", threshold=0.5)`` and ``F1Score(average=None)`` (the per-class vector), updated twice,
    read and reset."""
    rs = np.random.RandomState(2421)
    y_int = rs.randint(0, 3, size=(2, 6))
    p_int = rs.randint(0, 3, size=(2, 6))
    onehot = np.eye(3, dtype=np.float32)[rs.randint(0, 3, size=(2, 5))]
    scores = rs.rand(2, 5, 3).astype(np.float32)
    M = tf.keras.metrics
    iou, topk = M.MeanIoU(num_classes=3), M.TopKCategoricalAccuracy(k=2)
    f1_macro, f1_each = M.F1Score(average="macro", threshold=0.5), M.F1Score(average=None)
    out = []
    for i in range(2):
        iou.update_state(y_int[i], p_int[i])
        topk.update_state(onehot[i], scores[i])
        f1_macro.update_state(onehot[i], scores[i])
        f1_each.update_state(onehot[i], scores[i])
        out.append((float(iou.result()), np.asarray(iou.total_cm, np.float32), float(topk.result()), float(f1_macro.result()),
                    np.asarray(f1_each.result())))
    for m in (iou, topk, f1_macro, f1_each):
        m.reset_state()
    return out, float(iou.result()), float(topk.result()), float(f1_macro.result())


@parity(**KTOL)
def test_metric_strings_resolve_against_the_loss_like_metric_objects(tf):
    """``compile(metrics=["accuracy", "mse"])`` with a sparse categorical loss and with a binary
    one (``"accuracy"`` becomes sparse categorical or binary accuracy by the loss and shapes)
    gives the same numbers as the explicit ``SparseCategoricalAccuracy`` / ``BinaryAccuracy``
    objects; the histories side by side."""
    x, y = _cls(12, seed=2431)
    yb = (y > 0).astype(np.float32)[:, None]
    out = []
    for metrics in (["accuracy"], [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")]):
        model = _functional(tf, 2432)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=metrics)
        out.append(_hist(model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)))
    for metrics in (["accuracy", "mse"], [tf.keras.metrics.BinaryAccuracy(name="accuracy"),
                                          tf.keras.metrics.MeanSquaredError(name="mse")]):
        model = _functional(tf, 2433, classes=1, activation="sigmoid")
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="binary_crossentropy", metrics=metrics)
        out.append(_hist(model.fit(x, yb, batch_size=4, epochs=2, shuffle=False, verbose=0)))
        out.append(_ev(model, x, yb))
    return out


@parity(**KTOL)
def test_metrics_names_after_fit_list_each_compiled_metric(tf):
    """``model.metrics_names`` before ``fit`` (empty: no metric has met data) and after it (the
    loss, then each compiled metric's name; Keras 3 lists ``compile_metrics``), which pairs with
    ``evaluate``'s list."""
    x, y = _cls(8, seed=2441)
    model = _functional(tf, 2442)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")])
    before = list(model.metrics_names)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return before, list(model.metrics_names), model.evaluate(x, y, verbose=0)


@parity(**KTOL)
def test_evaluate_list_of_two_outputs_pairs_with_metrics_names(tf):
    """A two-output model with per-output ``metrics`` and ``weighted_metrics``: ``evaluate``'s list
    is the total loss, each output's loss, then per output its metrics and its weighted metrics
    (in ``compile``'s order, not by name), as ``metrics_names`` lists them; the guide's
    ``dict(zip(model.metrics_names, results))``."""
    rs = np.random.RandomState(2445)
    x = rs.randn(12, 4).astype(np.float32)
    y = rs.randint(0, 3, size=12).astype(np.int32)
    t = rs.randn(12, 1).astype(np.float32)
    w = np.linspace(0.5, 1.5, 12).astype(np.float32)
    inp = tf.keras.Input((4,), name="features")
    hid = tf.keras.layers.Dense(5, activation="relu")(inp)
    model = tf.keras.Model(inp, [tf.keras.layers.Dense(3, name="cls")(hid), tf.keras.layers.Dense(1, name="reg")(hid)])
    keras_init(model, 2446)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.02),
                  loss={"cls": tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), "reg": "mse"},
                  metrics={"cls": ["accuracy"], "reg": [tf.keras.metrics.RootMeanSquaredError(name="rmse"), "mae"]},
                  weighted_metrics={"cls": [tf.keras.metrics.SparseCategoricalAccuracy(name="wacc")], "reg": ["mse"]})
    model.fit(x, {"cls": y, "reg": t}, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
    results = model.evaluate(x, {"cls": y, "reg": t}, sample_weight=w, batch_size=6, verbose=0)
    return list(model.metrics_names), results, sorted(dict(zip(model.metrics_names, results)).items())


@parity(**KTOL)
def test_a_custom_callback_reads_batch_logs_epoch_logs_and_weights(tf):
    """The "Writing your own callbacks" guide: a ``Callback`` recording ``on_train_batch_end``'s
    logs (running means over the epoch's batches so far), ``on_test_batch_end``'s and
    ``on_epoch_end``'s, the kernel's norm read from ``self.model`` at each epoch's end, and the
    hooks' order (``on_train_begin``, ``on_epoch_begin``, ``on_test_begin`` ...)."""
    x, y = _cls(12, seed=2451)
    xv, yv = _cls(8, seed=2452)
    model = _functional(tf, 2453)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

    class Recorder(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.events, self.batches, self.tests, self.epochs = [], [], [], []

        def on_train_begin(self, logs=None):
            self.events.append("train_begin")

        def on_epoch_begin(self, epoch, logs=None):
            self.events.append(("epoch_begin", epoch))

        def on_test_begin(self, logs=None):
            self.events.append("test_begin")

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append((batch, sorted((k, float(v)) for k, v in logs.items())))

        def on_test_batch_end(self, batch, logs=None):
            self.tests.append((batch, sorted((k, float(v)) for k, v in logs.items())))

        def on_epoch_end(self, epoch, logs=None):
            kernel = self.model.layers[1].kernel
            self.epochs.append((epoch, sorted((k, float(v)) for k, v in logs.items()),
                                float(np.linalg.norm(np.asarray(kernel.numpy())))))
            self.events.append(("epoch_end", epoch))

        def on_train_end(self, logs=None):
            self.events.append("train_end")

    rec = Recorder()
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, validation_data=(xv, yv), validation_batch_size=4,
              callbacks=[rec], verbose=0)
    return rec.events, rec.batches, rec.tests, rec.epochs


# ---------------------------------------------------------------------------
# Preprocessing layers on structured data
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_normalization_adapted_on_an_array_and_on_a_dataset_then_inverted(tf):
    """``Normalization()`` adapted on a NumPy array and another on a batched ``tf.data`` dataset of
    the same rows (equal ``mean`` / ``variance``), ``Normalization(axis=None)`` (one mean for
    all), an inverting layer built from the adapted statistics (flattened: Keras 3 refuses the
    adapted ``(1, 3)`` shape back for one axis) mapping normalised values back, and a regression model with the
    adapted layer first, trained by ``fit``."""
    rs = np.random.RandomState(2461)
    x = (rs.randn(20, 3) * [1.0, 5.0, 0.1] + [0.0, 10.0, -2.0]).astype(np.float32)
    y = rs.randn(20, 1).astype(np.float32)
    L = tf.keras.layers
    a = L.Normalization()
    a.adapt(x)
    b = L.Normalization()
    b.adapt(tf.data.Dataset.from_tensor_slices(x).batch(6))
    c = L.Normalization(axis=None)
    c.adapt(x)
    inv = L.Normalization(mean=np.asarray(a.mean).ravel(), variance=np.asarray(a.variance).ravel(), invert=True)
    z = a(x[:4])
    inp = tf.keras.Input((3,))
    out = L.Dense(1)(L.Dense(4, activation="tanh")(a(inp)))
    model = tf.keras.Model(inp, out)
    model.layers[2].set_weights([np.full((3, 4), 0.3, np.float32), np.zeros(4, np.float32)])
    model.layers[3].set_weights([np.full((4, 1), 0.2, np.float32), np.zeros(1, np.float32)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse")
    h = model.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    return (np.asarray(a.mean), np.asarray(a.variance), np.asarray(b.mean), np.asarray(b.variance),
            np.asarray(c(x[:2])), z, inv(z), _hist(h), model.predict(x[:3], verbose=0))


@parity(**KTOL)
def test_string_lookup_with_two_oov_indices_a_mask_and_its_output_modes(tf):
    """``StringLookup(num_oov_indices=2, mask_token="")`` adapted on a column (vocabulary by
    frequency), ``get_vocabulary()``, ``vocabulary_size()``, the indices of known, unknown (hashed
    to one of the two OOV slots) and mask tokens; then fixed vocabularies in ``one_hot``,
    ``multi_hot`` and ``count`` modes (float32, as tf_keras gives them), and an inverse lookup
    (TF's string tensor; tapejax's NumPy bytes, having no string tensors)."""
    L = tf.keras.layers
    column = np.array(["b", "a", "c", "a", "b", "a", "d"])
    lookup = L.StringLookup(num_oov_indices=2, mask_token="")
    lookup.adapt(column)
    ids = lookup(np.array([["a", "zz", ""], ["d", "yy", "b"]]))
    vocab = ["a", "b", "c"]
    one_hot = L.StringLookup(vocabulary=vocab, output_mode="one_hot")(np.array(["a", "c", "q"]))
    multi = L.StringLookup(vocabulary=vocab, output_mode="multi_hot")(np.array([["a", "a", "q"], ["c", "b", "b"]]))
    count = L.StringLookup(vocabulary=vocab, output_mode="count")(np.array([["a", "a", "q"], ["c", "b", "b"]]))
    back = L.StringLookup(vocabulary=vocab, invert=True)(np.array([[1, 3, 0]]))
    return (lookup.get_vocabulary(), lookup.vocabulary_size(), np.asarray(ids).astype(np.int64),
            one_hot, multi, count, [s for s in np.asarray(back).ravel()])


@parity(**KTOL)
def test_integer_lookup_adapted_on_a_dataset_with_max_tokens_and_multi_hot(tf):
    """``IntegerLookup(max_tokens=4, num_oov_indices=1)`` adapted on a batched dataset (the most
    frequent three values kept), its vocabulary, ids of seen and unseen values, and
    ``IntegerLookup(output_mode="multi_hot")`` on rows of several values; ``mask_token=0``."""
    L = tf.keras.layers
    values = np.array([7, 3, 7, 9, 3, 7, 11, 12, 9, 7], np.int64)
    lookup = L.IntegerLookup(max_tokens=4, num_oov_indices=1)
    lookup.adapt(tf.data.Dataset.from_tensor_slices(values).batch(3))
    ids = lookup(np.array([7, 9, 11, 3, 100], np.int64))
    multi = L.IntegerLookup(vocabulary=[7, 3, 9], output_mode="multi_hot")(np.array([[7, 9, 5], [3, 3, 3]], np.int64))
    masked = L.IntegerLookup(vocabulary=[7, 3, 9], mask_token=0)(np.array([[7, 0, 5]], np.int64))
    return ([int(v) for v in lookup.get_vocabulary()], np.asarray(ids).astype(np.int64), multi,
            np.asarray(masked).astype(np.int64), L.IntegerLookup(vocabulary=[7, 3, 9], mask_token=0).vocabulary_size())


@parity(**KTOL)
def test_category_encoding_discretization_with_boundaries_and_adapted_bins(tf):
    """``CategoryEncoding(num_tokens=5)`` in ``one_hot``, ``multi_hot`` and ``count`` mode (the
    latter with ``count_weights``), ``Discretization(bin_boundaries=[...])`` on ages with values on
    the boundaries, and ``Discretization(num_bins=4)`` adapted on a column (its learned
    boundaries and the bins)."""
    L = tf.keras.layers
    ids = np.array([[0, 1, 1], [4, 2, 2]], np.int32)
    one = L.CategoryEncoding(num_tokens=5, output_mode="one_hot")(np.array([3, 0, 4], np.int32))
    multi = L.CategoryEncoding(num_tokens=5, output_mode="multi_hot")(ids)
    count = L.CategoryEncoding(num_tokens=5, output_mode="count")(
        ids, count_weights=np.array([[0.5, 1.0, 2.0], [1.0, 0.25, 0.25]], np.float32))
    ages = np.array([[12.0], [18.0], [25.0], [40.0], [65.0], [90.0]], np.float32)
    fixed = L.Discretization(bin_boundaries=[18.0, 40.0, 65.0])(ages)
    column = np.arange(1, 17, dtype=np.float32)[:, None]
    learned = L.Discretization(num_bins=4)
    learned.adapt(column)
    return (np.asarray(one), np.asarray(multi), np.asarray(count), np.asarray(fixed).astype(np.int64),
            [float(b) for b in learned.bin_boundaries], np.asarray(learned(column)).astype(np.int64))


@parity(**KTOL)
def test_hashing_and_a_feature_cross_by_hand_into_one_hot(tf):
    """``Hashing(num_bins=8)`` and ``Hashing(num_bins=8, salt=133)`` of string and integer columns
    (TF's FarmHash), and a feature cross as the old ``CategoryCrossing`` made it: the two columns
    joined by ``tf.strings.join`` with ``"_X_"``, hashed into 16 bins and one-hot encoded by
    ``CategoryEncoding``."""
    L = tf.keras.layers
    city = np.array([["paris"], ["tokyo"], ["lima"], ["paris"]])
    size = np.array([[3], [1], [3], [2]], np.int64)
    h = L.Hashing(num_bins=8)(city)
    salted = L.Hashing(num_bins=8, salt=133)(city)
    hi = L.Hashing(num_bins=8)(size)
    crossed = tf.strings.join([city, tf.strings.as_string(size)], separator="_X_")
    bins = L.Hashing(num_bins=16)(crossed)
    encoded = L.CategoryEncoding(num_tokens=16, output_mode="one_hot")(bins)
    return (np.asarray(h).astype(np.int64), np.asarray(salted).astype(np.int64), np.asarray(hi).astype(np.int64),
            [s for s in np.asarray(crossed).ravel()], np.asarray(bins).astype(np.int64), np.asarray(encoded))


def _pets(n=16, seed=2481):
    """A tiny table as the structured-data guide's PetFinder columns: numeric, integer categorical,
    string categorical, and a binary target."""
    rs = np.random.RandomState(seed)
    return ({"age": rs.randint(1, 40, size=n).astype(np.float32),
             "fee": (rs.rand(n) * 100).astype(np.float32),
             "photo": rs.randint(0, 4, size=n).astype(np.int64),
             "color": rs.choice(["Black", "Brown", "White", "Golden"], size=n)},
            rs.randint(0, 2, size=n).astype(np.float32))


@parity(**KTOL)
def test_structured_data_model_on_encoded_features_from_a_mapped_dataset(tf):
    """keras.io's structured-data classifier with the encoding in the input pipeline: numeric
    columns normalised by adapted ``Normalization`` layers inside the model, the categorical ones
    (``IntegerLookup`` / ``StringLookup`` in ``one_hot`` mode, adapted on the column) applied
    eagerly to the column arrays; a dict of ``Input``s, ``concatenate``, ``Dense`` + ``Dropout(0)``
    + sigmoid head, ``fit`` on a batched dataset of ``(dict, label)``, ``evaluate``, ``predict``
    on a dict of two rows; the trained weights and the adapted statistics (a ``Normalization``'s
    ``count`` weight is the rows seen in tf_keras, 0 in Keras 3, which keeps no count)."""
    feats, target = _pets()
    L = tf.keras.layers
    photo_lookup = L.IntegerLookup(output_mode="one_hot")
    photo_lookup.adapt(feats["photo"])
    color_lookup = L.StringLookup(output_mode="one_hot")
    color_lookup.adapt(feats["color"])

    def encode(f):
        return {"age": f["age"][:, None], "fee": f["fee"][:, None],
                "photo": np.asarray(photo_lookup(f["photo"])), "color": np.asarray(color_lookup(f["color"]))}

    enc = encode(feats)
    inputs = {k: tf.keras.Input((v.shape[1],), name=k) for k, v in enc.items()}
    parts, norms = [], []
    for k in ("age", "fee"):
        norm = L.Normalization()
        norm.adapt(enc[k])
        parts.append(norm(inputs[k]))
        norms.append(norm)
    parts += [inputs["photo"], inputs["color"]]
    x = L.concatenate(parts)
    x = L.Dropout(0.0)(L.Dense(6, activation="relu")(x))
    model = tf.keras.Model(inputs, L.Dense(1, activation="sigmoid")(x))
    rs = np.random.RandomState(2482)
    for layer in model.layers:
        if isinstance(layer, L.Dense):
            layer.set_weights([(rs.randn(*w.shape) * 0.4).astype(np.float32) for w in layer.get_weights()])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.03), loss="binary_crossentropy", metrics=["accuracy"])
    ds = tf.data.Dataset.from_tensor_slices((enc, target[:, None])).batch(4)
    h = model.fit(ds, epochs=3, verbose=0)
    sample = encode({k: v[:2] for k, v in feats.items()})
    return (_hist(h), _ev(model, ds), model.predict(sample, verbose=0), [int(v) for v in photo_lookup.get_vocabulary()],
            color_lookup.get_vocabulary(), [np.asarray(v.numpy()) for v in model.trainable_weights],
            [(np.asarray(n.mean), np.asarray(n.variance)) for n in norms])


@xfail_on_tapejax("a StringLookup / IntegerLookup inside a model's traced call: they run TensorFlow in "
                  "their call, eagerly on host values only (tapejax/keras/README.md, Known limits); TF runs "
                  "them in its graph")
@parity(**KTOL)
def test_structured_data_guide_model_with_lookup_layers_inside_the_model(tf):
    """TF's "Classify structured data using Keras preprocessing layers" guide: the lookup and
    encoding layers inside the model (a string ``Input`` through an adapted ``StringLookup`` in
    ``one_hot`` mode beside a normalised numeric ``Input``), ``fit`` on a dataset of dicts and
    ``predict`` on a dict of raw features."""
    feats, target = _pets(seed=2491)
    L = tf.keras.layers
    age_in = tf.keras.Input((1,), name="age")
    color_in = tf.keras.Input((1,), name="color", dtype="string")
    norm = L.Normalization()
    norm.adapt(feats["age"][:, None])
    lookup = L.StringLookup(output_mode="one_hot")
    lookup.adapt(feats["color"])
    x = L.concatenate([norm(age_in), lookup(color_in)])
    model = tf.keras.Model({"age": age_in, "color": color_in}, L.Dense(1, activation="sigmoid")(x))
    model.layers[-1].set_weights([np.full((6, 1), 0.2, np.float32), np.zeros(1, np.float32)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.03), loss="binary_crossentropy")
    raw = {"age": feats["age"][:, None], "color": feats["color"][:, None]}
    h = model.fit(tf.data.Dataset.from_tensor_slices((raw, target[:, None])).batch(4), epochs=2, verbose=0)
    return _hist(h), model.predict({"age": raw["age"][:2], "color": raw["color"][:2]}, verbose=0)
