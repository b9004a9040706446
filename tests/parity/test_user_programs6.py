"""Round six of realistic user programs, each run under real TensorFlow 2.21 and under tapejax
(the TF side's Keras is tf_keras, Keras 2; tapejax's is Keras 3 on JAX): Keras models built from
convolutions, attention, an LSTM encoder-decoder, lookup and hashing layers and custom layers, trained by
``fit`` on ``tf.data`` pipelines (``prefetch``, ``class_weight``, per-example weights in the
dataset, ``validation_split``, a callback that stops training) and then evaluated and predicted;
custom loops whose metrics live in compiled steps; the optimizer zoo fed dense and sparse
(``IndexedSlices``) gradients; learning-rate schedules with warmup and restarts; checkpoints
written mid-run (``CheckpointManager`` keeping N, restoring an older one) whose continuation
equals an uninterrupted run; ``tf.while_loop`` with shape invariants, ``TensorArray`` loops,
``tf.scan`` RNNs; ``TFRecord`` round trips feeding a model; SavedModels of trained modules
called through their signatures.  Random draws are made with numpy and fed in (tapejax's random
values differ from TF's by design).
"""
import os
import tempfile

import numpy as np

from .harness import init_array, keras_init, parity, regression_data, xfail_on_tapejax

TOL = dict(rtol=2e-5, atol=2e-6)
KTOL = dict(rtol=1e-4, atol=1e-5)


def _kdata(n=16, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _hist(h, keys):
    return {k: [float(v) for v in h.history[k]] for k in keys}


# ---------------------------------------------------------------------------
# Keras models trained by fit on tf.data pipelines
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_functional_model_fit_on_a_mapped_prefetched_pipeline(tf):
    """A functional model (two Dense branches concatenated) compiled with ``"adam"`` and two metrics,
    fit on ``from_tensor_slices.map(standardise).batch(4).prefetch(AUTOTUNE)``, then evaluated
    with ``return_dict=True``."""
    x, y = _kdata(n=16)
    mean, std = x.mean(0), x.std(0) + 1e-3
    inp = tf.keras.Input((5,))
    a = tf.keras.layers.Dense(4, activation="tanh")(inp)
    b = tf.keras.layers.Dense(3, activation="relu")(inp)
    h = tf.keras.layers.Concatenate()([a, b])
    out = tf.keras.layers.Dense(3)(h)
    model = tf.keras.Model(inp, out)
    keras_init(model, 2)
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="acc"),
                           tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")])
    model.optimizer.learning_rate.assign(0.01)
    ds = (tf.data.Dataset.from_tensor_slices((x, y))
          .map(lambda f, l: ((f - mean) / std, l), num_parallel_calls=tf.data.AUTOTUNE)
          .batch(4).prefetch(tf.data.AUTOTUNE))
    h = model.fit(ds, epochs=2, verbose=0)
    # (Keras 3 orders the dict differently: compare the sorted items)
    ev = sorted(model.evaluate(ds, verbose=0, return_dict=True).items())
    return _hist(h, ["loss", "acc", "top2"]), ev, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_compile_with_an_optimizer_object_then_fit(tf):
    """The most common Keras spelling: ``compile(optimizer=tf.keras.optimizers.Adam(0.01))``, fit,
    and the optimizer object the user holds counts the steps."""
    x, y = _kdata(n=8)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
    keras_init(model, 3)
    opt = tf.keras.optimizers.Adam(0.01)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return _hist(h, ["loss"]), int(opt.iterations.numpy()), [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_small_cnn_with_pooling_trained_by_fit(tf):
    """A tiny image classifier: ``Conv2D`` (same padding) -> ``MaxPooling2D`` -> ``Conv2D``
    (valid) -> ``GlobalAveragePooling2D`` -> ``Dense``, fit for two epochs with SGD."""
    rs = np.random.RandomState(3)
    x = rs.randn(8, 6, 6, 2).astype(np.float32)
    y = rs.randint(0, 2, 8).astype(np.int32)
    model = tf.keras.Sequential([
        tf.keras.Input((6, 6, 2)),
        tf.keras.layers.Conv2D(3, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(2),
        tf.keras.layers.Conv2D(4, 2, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(2)])
    keras_init(model, 4)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.optimizer.learning_rate.assign(0.05)
    h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return _hist(h, ["loss", "accuracy"]), model.predict(x[:3], verbose=0), [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_integer_lookup_and_hashing_feed_embeddings_in_an_eager_loop(tf):
    """Raw category codes mapped by an adapted ``IntegerLookup`` (unknown codes to the OOV id 0)
    and hashed by ``Hashing(num_bins=)`` into two ``Embedding`` tables, summed, trained eagerly
    with the legacy Adam; the vocabulary comes back too."""
    rs = np.random.RandomState(24)
    codes = rs.choice([10, 20, 30, 40], size=(8, 3)).astype(np.int32)
    codes[0, 0] = 99
    y = rs.randn(8, 1).astype(np.float32)
    lookup = tf.keras.layers.IntegerLookup()
    lookup.adapt(np.array([10, 10, 20, 30, 30, 30, 40], np.int32))
    hashing = tf.keras.layers.Hashing(num_bins=5)
    ids, hashed = lookup(codes), hashing(codes)
    e1, e2 = tf.keras.layers.Embedding(5, 2), tf.keras.layers.Embedding(5, 2)
    e1(ids), e2(hashed)
    e1.set_weights([init_array((5, 2), 25)])
    e2.set_weights([init_array((5, 2), 26)])
    head = tf.Variable(init_array((2, 1), 27))
    params = e1.trainable_variables + e2.trainable_variables + [head]
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.reduce_mean(e1(ids) + e2(hashed), axis=1)
            loss = tf.reduce_mean((tf.matmul(h, head) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        losses.append(loss)
    return ([int(v) for v in lookup.get_vocabulary()], tf.cast(ids, tf.int32), tf.cast(hashed, tf.int32), losses,
            [p.numpy() for p in params])


@parity(**KTOL)
def test_class_weight_and_dataset_sample_weights_in_fit(tf):
    """``fit(class_weight={0: 1, 1: 3, 2: 0.5})`` on arrays, then ``fit`` on a dataset of
    ``(x, y, sample_weight)`` triples; weighted metrics compiled alongside."""
    x, y = _kdata(n=12)
    w = np.linspace(0.2, 2.0, 12).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    keras_init(model, 9)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=["accuracy"])
    h1 = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0, class_weight={0: 1.0, 1: 3.0, 2: 0.5})
    ds = tf.data.Dataset.from_tensor_slices((x, y, w)).batch(6)
    h2 = model.fit(ds, epochs=2, verbose=0)
    return _hist(h1, ["loss", "accuracy"]), _hist(h2, ["loss", "accuracy"]), [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_validation_split_and_a_callback_that_stops_training(tf):
    """``fit(validation_split=0.25)`` (the last quarter validates) with a callback that sets
    ``model.stop_training`` once the training loss falls under a threshold."""
    x, y = _kdata(n=16, seed=2)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    keras_init(model, 10)
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.learning_rate.assign(0.05)
    seen = []

    class StopUnder(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(epoch)
            if logs["loss"] < 1.0:
                self.model.stop_training = True

    h = model.fit(x, y, batch_size=4, epochs=20, shuffle=False, verbose=0, validation_split=0.25,
                  callbacks=[StopUnder()])
    return _hist(h, ["loss", "val_loss"]), seen, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_custom_layer_with_add_weight_and_a_transformer_block(tf):
    """A custom ``Layer`` (``build`` with ``add_weight``, a learned scale) after
    ``LayerNormalization`` and a residual ``Dense`` block, in a functional model fit with Adam."""

    class Scale(tf.keras.layers.Layer):
        def build(self, input_shape):
            self.s = self.add_weight(name="s", shape=(int(input_shape[-1]),), initializer="ones")

        def call(self, x):
            return x * self.s

    x, y = regression_data(n=12, d=4, seed=4)
    inp = tf.keras.Input((4,))
    h = tf.keras.layers.LayerNormalization()(inp)
    r = tf.keras.layers.Dense(4, activation="gelu")(h)
    h = tf.keras.layers.Add()([h, r])
    h = Scale()(h)
    out = tf.keras.layers.Dense(1)(h)
    model = tf.keras.Model(inp, out)
    keras_init(model, 11)
    model.compile(optimizer="adam", loss=tf.keras.losses.Huber(delta=0.5))
    model.optimizer.learning_rate.assign(0.02)
    h = model.fit(x, y, batch_size=6, epochs=3, shuffle=False, verbose=0)
    return _hist(h, ["loss"]), [v.numpy() for v in model.weights]


@parity(rtol=2e-4, atol=2e-5)
def test_multi_head_attention_classifier_in_a_custom_loop(tf):
    """``MultiHeadAttention`` self-attention over a short sequence with a residual and pooling,
    trained by a compiled custom step with SGD (the per-head attention scores are a second output)."""
    rs = np.random.RandomState(12)
    x = rs.randn(4, 5, 6).astype(np.float32)
    y = rs.randint(0, 2, 4).astype(np.int32)
    inp = tf.keras.Input((5, 6))
    mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    att, scores = mha(inp, inp, return_attention_scores=True)
    h = tf.keras.layers.GlobalAveragePooling1D()(att + inp)
    out = tf.keras.layers.Dense(2)(h)
    model = tf.keras.Model(inp, [out, scores])
    keras_init(model, 13)
    # (SGD, not Adam: the key bias's gradient is 0 up to rounding, softmax being shift-invariant;
    # Adam would scale that rounding noise up to full steps)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits, _ = model(xb, training=True)
            loss = loss_fn(yb, logits)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss

    losses = [step(x, y) for _ in range(2)]
    return losses, [v.numpy() for v in model.weights]


# ---------------------------------------------------------------------------
# Custom loops with metrics, schedules and clipping
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_compiled_train_and_test_steps_with_metrics_reset_each_epoch(tf):
    """The TF tutorial loop: ``Mean`` and ``SparseCategoricalAccuracy`` for train and test updated
    inside two ``tf.function`` steps over batched datasets, read with ``result()`` and reset with
    ``reset_state()`` at every epoch's end."""
    x, y = _kdata(n=12, seed=4)
    xt, yt = _kdata(n=6, seed=5)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(6, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    keras_init(model, 14)
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.02)
    train_loss, train_acc = tf.keras.metrics.Mean(), tf.keras.metrics.SparseCategoricalAccuracy()
    test_loss, test_acc = tf.keras.metrics.Mean(), tf.keras.metrics.SparseCategoricalAccuracy()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_obj(yb, logits)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        train_loss(loss)
        train_acc(yb, logits)

    @tf.function
    def test_step(xb, yb):
        logits = model(xb, training=False)
        test_loss(loss_obj(yb, logits))
        test_acc(yb, logits)

    train_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    test_ds = tf.data.Dataset.from_tensor_slices((xt, yt)).batch(4)
    log = []
    for _ in range(3):
        for m in (train_loss, train_acc, test_loss, test_acc):
            m.reset_state()
        for xb, yb in train_ds:
            train_step(xb, yb)
        for xb, yb in test_ds:
            test_step(xb, yb)
        log.append([float(m.result()) for m in (train_loss, train_acc, test_loss, test_acc)])
    return log, [v.numpy() for v in model.weights]


@parity(**TOL)
def test_cosine_decay_with_warmup_and_restarts_drive_adam(tf):
    """``CosineDecay(warmup_target=, warmup_steps=)`` and ``CosineDecayRestarts`` read at each step
    of a compiled loop (the optimizer's ``iterations`` is the step) and by hand; a
    ``ExponentialDecay(staircase=True)`` drives a second optimizer."""
    x, y = regression_data(n=8, seed=6)
    w1 = tf.Variable(init_array((3, 1), 1))
    w2 = tf.Variable(init_array((3, 1), 1))
    warm = tf.keras.optimizers.schedules.CosineDecay(0.0, decay_steps=6, warmup_target=0.2, warmup_steps=3,
                                                     alpha=0.1)
    restarts = tf.keras.optimizers.schedules.CosineDecayRestarts(0.1, first_decay_steps=2, t_mul=2.0, m_mul=0.5)
    stair = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5, staircase=True)
    o1 = tf.keras.optimizers.legacy.Adam(warm)
    o2 = tf.keras.optimizers.legacy.SGD(stair, momentum=0.5)

    @tf.function
    def step():
        with tf.GradientTape(persistent=True) as tape:
            l1 = tf.reduce_mean((tf.matmul(x, w1) - y) ** 2)
            l2 = tf.reduce_mean((tf.matmul(x, w2) - y) ** 2)
        o1.apply_gradients([(tape.gradient(l1, w1), w1)])
        o2.apply_gradients([(tape.gradient(l2, w2), w2)])
        return l1, l2

    out = [step() for _ in range(10)]
    lrs = [(warm(s), restarts(s), stair(s)) for s in range(12)]
    return out, lrs, w1, w2, int(o1.iterations.numpy())


@parity(**TOL)
def test_custom_schedule_subclass_with_inverse_sqrt_warmup(tf):
    """A ``LearningRateSchedule`` subclass (the Transformer's inverse-square-root warmup, written
    with ``tf.math.rsqrt`` and ``tf.minimum`` on a cast step), used by a Keras ``Adam`` with the
    paper's betas inside a compiled step; its ``get_config`` round-trips."""

    class Noam(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, d_model, warmup=4.0):
            self.d_model, self.warmup = float(d_model), warmup

        def __call__(self, step):
            step = tf.cast(step, tf.float32) + 1.0
            return tf.math.rsqrt(self.d_model) * tf.minimum(tf.math.rsqrt(step), step * self.warmup ** -1.5)

        def get_config(self):
            return {"d_model": self.d_model, "warmup": self.warmup}

    x, y = regression_data(n=8, seed=7)
    w = tf.Variable(init_array((3, 1), 2))
    sched = Noam(16)
    opt = tf.keras.optimizers.Adam(sched, beta_1=0.9, beta_2=0.98, epsilon=1e-9)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    out = [step() for _ in range(8)]
    return out, w, [sched(s) for s in range(8)], Noam(**sched.get_config())(3), int(opt.iterations.numpy())


@parity(**TOL)
def test_clip_by_global_norm_returns_the_norm_and_skips_a_spike(tf):
    """``tf.clip_by_global_norm`` inside a compiled step returns the pre-clip norm; the loop logs
    it, and an eager Python ``if`` on the tensor norm skips the update of a spiking batch."""
    x, y = regression_data(n=12, seed=8)
    y[6:9] *= 40.0
    w = tf.Variable(init_array((3, 1), 3))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    @tf.function
    def grads(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
        g = tape.gradient(loss, [w, b])
        clipped, norm = tf.clip_by_global_norm(g, 1.0)
        return loss, clipped, norm

    out = []
    for i in range(4):
        xb, yb = x[i * 3:i * 3 + 3], y[i * 3:i * 3 + 3]
        loss, clipped, norm = grads(xb, yb)
        skipped = bool(norm > 50.0)
        if not skipped:
            opt.apply_gradients(zip(clipped, [w, b]))
        out.append((loss, norm, skipped, tf.linalg.global_norm(clipped)))
    return out, w, b


# ---------------------------------------------------------------------------
# The optimizer zoo with dense and sparse gradients
# ---------------------------------------------------------------------------

_IDS = [np.array([0, 2, 2], np.int32), np.array([1, 2, 4], np.int32), np.array([0, 0, 3], np.int32)]


def _sparse_train(tf, opt, steps=3):
    """Three steps of an embedding table fed ``IndexedSlices`` gradients (a repeated id included)."""
    table = tf.Variable(init_array((5, 2), 5))
    for step_ids in _IDS[:steps]:
        with tf.GradientTape() as tape:
            e = tf.nn.embedding_lookup(table, step_ids)
            loss = tf.reduce_sum(tf.sin(e) * e)
        g = tape.gradient(loss, table)
        opt.apply_gradients([(g, table)])
    return type(g).__name__, table.numpy()


@parity(rtol=1e-4, atol=1e-5)
def test_legacy_optimizer_zoo_on_dense_gradients(tf):
    """Each legacy optimizer (nesterov SGD, AMSGrad, centered RMSprop with momentum, Nadam, Ftrl
    with l1/l2) trains its own copy of a small regressor for three
    eager steps."""
    k = tf.keras.optimizers.legacy
    x, y = regression_data(n=8, seed=9)
    out = []
    for opt in [k.SGD(0.1, momentum=0.9, nesterov=True), k.Adam(0.05, amsgrad=True),
                k.RMSprop(0.05, momentum=0.5, centered=True), k.Nadam(0.05),
                k.Ftrl(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01)]:
        w = tf.Variable(init_array((3, 1), 4))
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
        out.append((type(opt).__name__, loss, w.numpy()))
    return out


@parity(rtol=1e-4, atol=1e-5)
def test_legacy_optimizers_sparse_kernels_touch_only_the_looked_up_rows(tf):
    """``tf.nn.embedding_lookup`` gives ``IndexedSlices``; the legacy SGD with momentum, centered
    RMSprop, Adamax and Ftrl apply them with TF's sparse kernels, which leave the rows not looked up
    (and their momentum) as they are."""
    k = tf.keras.optimizers.legacy
    return [(type(o).__name__, _sparse_train(tf, o), [v.numpy() for v in o.variables()[1:]])
            for o in [k.SGD(0.1, momentum=0.9, nesterov=True), k.RMSprop(0.05, momentum=0.5, centered=True),
                      k.Adamax(0.05), k.Ftrl(0.1, l1_regularization_strength=0.01)]]


@parity(rtol=1e-4, atol=1e-5)
def test_keras_optimizer_zoo_on_dense_gradients_compiled(tf):
    """``tf.keras.optimizers`` (the new optimizers), each step compiled: their dense rules equal the
    legacy ones for these (TF's new Nadam gives NaN inside a tf.function: left out)."""
    k = tf.keras.optimizers
    x, y = regression_data(n=8, seed=9)
    out = []
    for opt in [k.SGD(0.1, momentum=0.9, nesterov=True), k.Adagrad(0.1), k.Adamax(0.05),
                k.Ftrl(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01)]:
        w = tf.Variable(init_array((3, 1), 4))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            return loss

        losses = [step() for _ in range(3)]
        out.append((type(opt).__name__, losses, w.numpy()))
    return out


@parity(rtol=1e-4, atol=1e-5)
def test_keras_embedding_layer_with_legacy_momentum_touches_only_the_looked_up_rows(tf):
    """A ``tf.keras.layers.Embedding`` trained by the legacy SGD with momentum: its gradient is
    ``IndexedSlices`` and the rows not looked up in a step stay where they are."""
    emb = tf.keras.layers.Embedding(5, 2)
    emb(_IDS[0])
    emb.set_weights([init_array((5, 2), 5)])
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    kinds = []
    for ids in _IDS:
        with tf.GradientTape() as tape:
            e = emb(ids)
            loss = tf.reduce_sum(tf.sin(e) * e)
        g = tape.gradient(loss, emb.trainable_variables)
        kinds.append(isinstance(g[0], tf.IndexedSlices))
        opt.apply_gradients(zip(g, emb.trainable_variables))
    return kinds, emb.weights[0].numpy()


@parity(rtol=1e-4, atol=1e-5)
def test_keras_sgd_rmsprop_adamax_ftrl_on_sparse_embedding_gradients(tf):
    """The new Keras SGD with momentum and Ftrl fed ``IndexedSlices``: the momentum of every row
    moves it, Ftrl's dense rule recomputes every row."""
    k = tf.keras.optimizers
    return [_sparse_train(tf, o, steps=2) for o in (k.SGD(0.1, momentum=0.9), k.Ftrl(0.1))]


@parity(rtol=1e-4, atol=1e-5)
def test_keras_nadam_on_dense_gradients_eagerly(tf):
    """The new Keras ``Nadam`` on a small regressor, eagerly."""
    x, y = regression_data(n=8, seed=9)
    opt = tf.keras.optimizers.Nadam(0.05)
    w = tf.Variable(init_array((3, 1), 4))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        out.append(loss)
    return out, w


@parity(rtol=1e-4, atol=1e-5)
def test_adamw_with_excluded_variables_and_ema(tf):
    """``AdamW(weight_decay=)`` with ``exclude_from_weight_decay(var_names=['bias'])`` and
    ``use_ema=True``: trained eagerly, then ``finalize_variable_values`` swaps in the averages."""
    x, y = regression_data(n=8, seed=10)
    w = tf.Variable(init_array((3, 1), 6), name="kernel")
    b = tf.Variable([0.5], name="bias")
    opt = tf.keras.optimizers.AdamW(0.05, weight_decay=0.1, use_ema=True, ema_momentum=0.5,
                                    ema_overwrite_frequency=None)
    opt.exclude_from_weight_decay(var_names=["bias"])
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        out.append((loss, w.numpy(), b.numpy()))
    opt.finalize_variable_values([w, b])
    return out, w, b


# ---------------------------------------------------------------------------
# Checkpoints mid-training
# ---------------------------------------------------------------------------

def _ck_parts(tf):
    x, y = regression_data(n=12, seed=11)
    vs = [tf.Variable(init_array((3, 4), 7), name="w1"), tf.Variable(np.zeros(4, np.float32), name="b1"),
          tf.Variable(init_array((4, 1), 8), name="w2")]
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(xb, vs[0]) + vs[1])
            loss = tf.reduce_mean((tf.matmul(h, vs[2]) - yb) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        step_var.assign_add(1)
        return loss

    return x, y, vs, opt, step_var, step


@parity(**TOL)
def test_manager_keeps_two_restores_an_older_one_and_continues_like_the_uninterrupted_run(tf):
    """A ``CheckpointManager(max_to_keep=2, step_counter=...)`` saves every second step of a compiled
    loop; only the last two files remain; a fresh model and optimizer restore the *older* kept
    checkpoint (``manager.checkpoints[0]``) and redo the steps after it: the losses and weights equal
    the uninterrupted run's."""
    d = tempfile.mkdtemp()
    x, y, vs, opt, step_var, step = _ck_parts(tf)
    ck = tf.train.Checkpoint(vs=vs, opt=opt, step=step_var)
    mgr = tf.train.CheckpointManager(ck, d, max_to_keep=2, step_counter=step_var, checkpoint_name="run")
    losses = []
    for i in range(8):
        losses.append(step(x[(i % 4) * 3:(i % 4) * 3 + 3], y[(i % 4) * 3:(i % 4) * 3 + 3]))
        if i % 2 == 1:
            mgr.save(check_interval=False)
    kept = [os.path.basename(p) for p in mgr.checkpoints]
    latest = os.path.basename(mgr.latest_checkpoint)
    final = [v.numpy() for v in vs]

    x, y, vs2, opt2, step2, step_fn2 = _ck_parts(tf)
    ck2 = tf.train.Checkpoint(vs=vs2, opt=opt2, step=step2)
    ck2.restore(mgr.checkpoints[0])
    start = int(step2.numpy())
    redo = [step_fn2(x[(i % 4) * 3:(i % 4) * 3 + 3], y[(i % 4) * 3:(i % 4) * 3 + 3]) for i in range(start, 8)]
    return kept, latest, start, losses[start:], redo, final, [v.numpy() for v in vs2], int(opt2.iterations.numpy())


@parity(**KTOL)
def test_keras_model_checkpointed_after_an_epoch_resumes_fit_like_an_uninterrupted_fit(tf):
    """``fit`` one epoch, ``tf.train.Checkpoint(model=, optimizer=).save``, a fresh compiled model
    restores it and fits the second epoch: its weights equal a model fit for two epochs at once."""
    x, y = _kdata(n=12, seed=8)

    def make():
        m = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(3)])
        keras_init(m, 15)
        m.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    whole = make()
    h_whole = whole.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    first = make()
    first.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).save(os.path.join(tempfile.mkdtemp(), "ck"))
    second = make()
    # (build the optimizer's slots first so the restore fills them at once)
    second.optimizer.build(second.trainable_variables) if hasattr(second.optimizer, "build") else None
    tf.train.Checkpoint(model=second, optimizer=second.optimizer).restore(path)
    h2 = second.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return (_hist(h_whole, ["loss"])["loss"][1], _hist(h2, ["loss"])["loss"][0],
            [v.numpy() for v in whole.weights], [v.numpy() for v in second.weights])


# ---------------------------------------------------------------------------
# Python control flow on tensors, while_loop, TensorArray, scan
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_early_stopping_on_a_tensor_loss_with_patience_and_best_weights(tf):
    """An eager loop with validation: a Python ``if`` on ``val < best - 1e-3`` (a tensor
    comparison), a patience counter, the best weights kept by ``assign`` into shadow Variables,
    and a ``break``; the best weights are put back at the end."""
    x, y = regression_data(n=10, seed=12)
    xv, yv = regression_data(n=6, seed=13)
    w = tf.Variable(init_array((3, 1), 9))
    best_w = tf.Variable(w)
    opt = tf.keras.optimizers.legacy.SGD(0.6)
    best, wait, log = float("inf"), 0, []
    for epoch in range(30):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        val = tf.reduce_mean((tf.matmul(xv, w) - yv) ** 2)
        if val < best - 1e-3:
            best, wait = float(val), 0
            best_w.assign(w)
        else:
            wait += 1
            if wait >= 2:
                break
        log.append(float(val))
    w.assign(best_w)
    return epoch, log, best, w


@parity(**TOL)
def test_gradient_accumulation_of_sparse_and_dense_gradients_in_variables(tf):
    """Accumulating ``IndexedSlices`` embedding gradients into a dense Variable (``convert_to_tensor``
    then ``assign_add``) next to a dense head's, over four micro-batches inside a compiled step;
    Adam applies the average every fourth micro-batch."""
    rs = np.random.RandomState(14)
    ids = rs.randint(0, 6, size=(8, 3)).astype(np.int32)
    y = rs.randn(8, 1).astype(np.float32)
    table = tf.Variable(init_array((6, 2), 10))
    head = tf.Variable(init_array((2, 1), 11))
    params = [table, head]
    acc = [tf.Variable(tf.zeros_like(p), trainable=False) for p in params]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def micro(idb, yb):
        with tf.GradientTape() as tape:
            e = tf.reduce_mean(tf.nn.embedding_lookup(table, idb), axis=1)
            loss = tf.reduce_mean((tf.matmul(e, head) - yb) ** 2)
        for a, g in zip(acc, tape.gradient(loss, params)):
            a.assign_add(tf.convert_to_tensor(g) / 4.0)
        return loss

    @tf.function
    def apply():
        opt.apply_gradients(zip([a.read_value() for a in acc], params))
        for a in acc:
            a.assign(tf.zeros_like(a))

    out = []
    for i in range(8):
        out.append(micro(ids[(i % 4) * 2:(i % 4) * 2 + 2], y[(i % 4) * 2:(i % 4) * 2 + 2]))
        if i % 4 == 3:
            apply()
    return out, table, head


@parity(**TOL)
def test_autograph_for_over_range_with_continue_and_if_on_tensors(tf):
    """A compiled training epoch: ``for i in tf.range(n)`` with ``if i % 3 == 2: continue`` (skip
    every third batch), an ``if`` on the loss tensor choosing a smaller step, and a counter of the
    steps taken; Python ``if`` on a static shape stays Python."""
    x, y = regression_data(n=12, seed=15)
    w = tf.Variable(init_array((3, 1), 12))

    @tf.function
    def epoch(xs, ys):
        taken = tf.constant(0)
        total = tf.constant(0.0)
        n = tf.shape(xs)[0] // 2
        for i in tf.range(n):
            if i % 3 == 2:
                continue
            xb, yb = xs[2 * i:2 * i + 2], tf.slice(ys, [2 * i, 0], [2, -1])   # (both bounds traced)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
            g = tape.gradient(loss, w)
            if loss > 1.0:
                w.assign_sub(0.02 * g)
            else:
                w.assign_sub(0.1 * g)
            if xs.shape[1] == 3:
                total += loss
            taken += 1
        return taken, total

    return [epoch(x, y) for _ in range(3)], w


@xfail_on_tapejax("a while_loop variable that grows (shape_invariants with a None dimension) cannot compile "
                   "in XLA's static shapes: tapejax ignores shape_invariants and raises ValueError (body must "
                   "return the shapes of loop_vars); documented in tapejax/compile/control_flow.py")
@parity(**TOL)
def test_while_loop_with_shape_invariants_grows_a_trajectory(tf):
    """``tf.while_loop`` whose state grows by ``concat`` (``shape_invariants`` with ``None`` rows):
    a damped oscillator is integrated until its energy falls below a threshold; the trajectory's
    length is data dependent; the gradient of the final position wrt the damping comes back."""
    damping = tf.Variable(0.3)

    @tf.function
    def simulate(x0):
        def cond(i, state, traj):
            return tf.logical_and(tf.reduce_sum(state ** 2) > 0.05, i < 40)

        def body(i, state, traj):
            pos, vel = state[0], state[1]
            vel = vel - 0.2 * (pos + damping * vel)
            pos = pos + 0.2 * vel
            new = tf.stack([pos, vel])
            return i + 1, new, tf.concat([traj, new[None]], axis=0)

        with tf.GradientTape() as tape:
            i, state, traj = tf.while_loop(
                cond, body, [tf.constant(0), x0, x0[None]],
                shape_invariants=[tf.TensorShape([]), tf.TensorShape([2]), tf.TensorShape([None, 2])])
            target = state[0]
        return i, traj, tape.gradient(target, damping)

    i, traj, g = simulate(tf.constant([1.0, 0.0]))
    return i, traj, g, traj.shape.rank


@parity(**TOL)
def test_dynamic_tensor_array_collects_a_beam_of_states_with_gradients(tf):
    """A ``TensorArray(dynamic_size=True, clear_after_read=False, element_shape=[2])`` written in
    a compiled Python ``for`` over ``tf.range(n)`` (``n`` a Python int: one trace per length), read back with ``gather`` and ``stack``; the loss
    over the gathered states trains the recurrence weights by SGD."""
    w = tf.Variable(init_array((2, 2), 13, scale=0.8))
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    @tf.function
    def step(h0, n):
        with tf.GradientTape() as tape:
            ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, clear_after_read=False,
                                element_shape=[2])
            h = h0
            for t in tf.range(n):
                h = tf.tanh(tf.linalg.matvec(w, h) + 0.1 * tf.cast(t, tf.float32))
                ta = ta.write(t, h)
            picked = ta.gather([0, n - 1])
            loss = tf.reduce_sum(picked ** 2) + 0.1 * tf.reduce_sum(ta.stack())
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss, ta.size(), picked

    out = [step(tf.constant([0.5, -0.5]), n) for n in (4, 6, 4)]
    return out, w


@parity(**TOL)
def test_elman_rnn_by_scan_trained_with_clipping(tf):
    """A hand-written Elman RNN over time-major inputs with ``tf.scan`` (the initializer the zero
    state), a readout of every step, MSE against targets, ``clip_by_global_norm`` and Adam, compiled."""
    rs = np.random.RandomState(16)
    xs = rs.randn(6, 3, 2).astype(np.float32)   # [time, batch, features]
    ys = np.cumsum(xs[..., :1], axis=0).astype(np.float32)
    wx = tf.Variable(init_array((2, 4), 14))
    wh = tf.Variable(init_array((4, 4), 15, scale=0.3))
    wo = tf.Variable(init_array((4, 1), 16))
    params = [wx, wh, wo]
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            hs = tf.scan(lambda h, x: tf.tanh(tf.matmul(x, wx) + tf.matmul(h, wh)), xs,
                         initializer=tf.zeros([3, 4]))
            pred = tf.einsum("tbh,ho->tbo", hs, wo)
            loss = tf.reduce_mean((pred - ys) ** 2)
        g, norm = tf.clip_by_global_norm(tape.gradient(loss, params), 0.5)
        opt.apply_gradients(zip(g, params))
        return loss, norm

    return [step() for _ in range(4)], params


# ---------------------------------------------------------------------------
# Data: TFRecord round trips, generators
# ---------------------------------------------------------------------------

def _write_records(tf, path, x, y):
    with tf.io.TFRecordWriter(path) as w:
        for xi, yi in zip(x, y):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=xi.tolist())),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)])),
                "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"ex%d" % int(yi)]))}))
            w.write(ex.SerializeToString())


@parity(**TOL)
def test_tfrecord_round_trip_parsed_in_batches_feeds_a_compiled_step(tf):
    """Examples written with ``TFRecordWriter`` (two shards), read back by ``TFRecordDataset`` over
    the file list, batched *then* parsed with ``parse_example`` (the vectorised form), the int64
    label cast, and fed to a compiled softmax-regression step."""
    x, y = _kdata(n=12, d=4, seed=17)
    d = tempfile.mkdtemp()
    paths = [os.path.join(d, "part-%d.tfrecord" % i) for i in range(2)]
    _write_records(tf, paths[0], x[:6], y[:6])
    _write_records(tf, paths[1], x[6:], y[6:])
    spec = {"x": tf.io.FixedLenFeature([4], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64),
            "id": tf.io.FixedLenFeature([], tf.string)}
    ds = (tf.data.TFRecordDataset(paths).batch(4).map(lambda s: tf.io.parse_example(s, spec))
          .map(lambda f: (f["x"], tf.cast(f["y"], tf.int32))))
    w = tf.Variable(np.zeros((4, 3), np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.5)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, tf.matmul(xb, w)))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    losses = [step(xb, yb) for _ in range(2) for xb, yb in ds]
    first = next(iter(tf.data.TFRecordDataset(paths[1]).map(lambda s: tf.io.parse_single_example(s, spec))))
    # (tapejax has no string tensors: a bytes feature comes back as Python bytes; compared as such)
    ident = first["id"]
    ident = ident.numpy() if hasattr(ident, "numpy") else ident
    # (int64 is int32 in tapejax without JAX's x64 mode: README; the label is cast as the step does)
    return losses, w, ident, tf.cast(first["y"], tf.int32), ds.element_spec[0].shape.as_list()


@parity(**KTOL)
def test_gzip_tfrecords_feed_keras_fit(tf):
    """GZIP-compressed TFRecords (``TFRecordOptions``) parsed per example, shuffled with a buffer
    of one (order kept), batched and fed to ``fit``; then ``evaluate`` on the same files."""
    x, y = _kdata(n=8, seed=18)
    path = os.path.join(tempfile.mkdtemp(), "data.tfrecord.gz")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        for xi, yi in zip(x, y):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=xi.tolist())),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)]))}))
            w.write(ex.SerializeToString())
    spec = {"x": tf.io.FixedLenFeature([5], tf.float32), "y": tf.io.FixedLenFeature([1], tf.int64)}

    def parse(s):
        f = tf.io.parse_single_example(s, spec)
        return f["x"], f["y"]

    ds = tf.data.TFRecordDataset(path, compression_type="GZIP").map(parse).shuffle(1).batch(4)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
    keras_init(model, 16)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(ds, epochs=2, verbose=0)
    return _hist(h, ["loss"]), model.evaluate(ds, verbose=0), [v.numpy() for v in model.weights]


@parity(**TOL)
def test_from_generator_of_variable_length_sequences_padded_into_a_masked_mean(tf):
    """A Python generator of variable-length float sequences (``output_signature`` with ``None``
    length) is ``padded_batch``-ed with a -1 padding value; a compiled step masks the padding,
    averages each sequence and regresses the sequence length."""
    lengths = [3, 1, 4, 2, 5, 2]
    rs = np.random.RandomState(19)
    seqs = [rs.randn(n).astype(np.float32) for n in lengths]

    def gen():
        for s in seqs:
            yield s, np.float32(len(s))

    ds = tf.data.Dataset.from_generator(gen, output_signature=(tf.TensorSpec([None], tf.float32),
                                                               tf.TensorSpec([], tf.float32)))
    ds = ds.padded_batch(3, padding_values=(-1.0, 0.0))
    a = tf.Variable([0.5, 1.0])

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            mask = tf.cast(tf.not_equal(xb, -1.0), tf.float32)
            n = tf.reduce_sum(mask, axis=1)
            mean = tf.reduce_sum(xb * mask, axis=1) / n
            pred = a[0] * mean + a[1] * n
            loss = tf.reduce_mean((pred - yb) ** 2)
        a.assign_sub(0.01 * tape.gradient(loss, a))
        return loss, tf.shape(xb)

    return [step(xb, yb) for _ in range(2) for xb, yb in ds], a


# ---------------------------------------------------------------------------
# Probabilistic models with numpy noise, policy gradients
# ---------------------------------------------------------------------------

@parity(rtol=1e-4, atol=1e-5)
def test_keras_vae_subclass_with_add_loss_and_noise_as_an_input(tf):
    """A ``tf.keras.Model`` subclass VAE: the encoder gives mean and log-variance, the
    reparameterised sample uses noise passed in as an input (drawn with numpy), the KL term goes
    through ``self.add_loss``; a custom loop adds ``sum(model.losses)`` to the reconstruction."""
    rs = np.random.RandomState(20)
    x = rs.rand(6, 4).astype(np.float32)
    noise = [rs.randn(6, 2).astype(np.float32) for _ in range(2)]

    class VAE(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.enc = tf.keras.layers.Dense(4, activation="relu")
            self.mu = tf.keras.layers.Dense(2)
            self.logvar = tf.keras.layers.Dense(2)
            self.dec = tf.keras.layers.Dense(4, activation="sigmoid")

        def call(self, inputs):
            xb, eps = inputs
            h = self.enc(xb)
            mu, logvar = self.mu(h), self.logvar(h)
            z = mu + tf.exp(0.5 * logvar) * eps
            self.add_loss(-0.5 * tf.reduce_mean(tf.reduce_sum(1 + logvar - mu ** 2 - tf.exp(logvar), axis=1)))
            return self.dec(z)

    model = VAE()
    model((x, noise[0]))
    keras_init(model, 17)
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    out = []
    for eps in noise:
        with tf.GradientTape() as tape:
            recon = model((x, eps))
            rec = tf.reduce_mean(tf.reduce_sum(tf.keras.losses.binary_crossentropy(x[..., None], recon[..., None]),
                                               axis=1))
            kl = tf.add_n(model.losses)
            loss = rec + kl
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        out.append((rec, kl, len(model.losses)))
    return out, [v.numpy() for v in model.weights]


@parity(**TOL)
def test_reinforce_with_gumbel_max_actions_and_a_baseline(tf):
    """REINFORCE on a contextual bandit: actions by Gumbel-max over the policy logits with numpy
    Gumbel noise (so both sides pick the same actions), rewards from a table, a moving-average
    baseline in a Variable, the ``-log pi(a) * advantage`` loss by ``sparse_softmax_cross_entropy``,
    compiled."""
    rs = np.random.RandomState(21)
    ctx = rs.randn(10, 6, 3).astype(np.float32)
    gumbel = rs.gumbel(size=(10, 6, 4)).astype(np.float32)
    reward_table = rs.randn(3, 4).astype(np.float32)
    w = tf.Variable(np.zeros((3, 4), np.float32))
    baseline = tf.Variable(0.0, trainable=False)
    opt = tf.keras.optimizers.legacy.Adam(0.1)

    @tf.function
    def step(c, g):
        logits = tf.matmul(c, w)
        actions = tf.argmax(logits + g, axis=1, output_type=tf.int32)
        rewards = tf.reduce_sum(tf.matmul(c, reward_table) * tf.one_hot(actions, 4), axis=1)
        adv = rewards - baseline
        with tf.GradientTape() as tape:
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(actions, tf.matmul(c, w))
            loss = tf.reduce_mean(nll * adv)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        baseline.assign(0.9 * baseline + 0.1 * tf.reduce_mean(rewards))
        return tf.reduce_mean(rewards), actions

    out = [step(ctx[i], gumbel[i]) for i in range(10)]
    return out, w, baseline


@parity(**TOL)
def test_stateless_categorical_is_a_pure_function_of_its_seed(tf):
    """``tf.random.stateless_categorical`` as a policy's sampler: the same seed gives the same
    actions, a near-deterministic policy picks its arg-max, the shape is ``[batch, num_samples]``:
    properties both sides share (their draws differ by design)."""
    logits = tf.constant([[0.0, 1.0, 0.5], [2.0, 0.0, 0.0]])
    a1 = tf.random.stateless_categorical(logits, 5, seed=[3, 4])
    a2 = tf.random.stateless_categorical(logits, 5, seed=[3, 4])
    sure = tf.random.stateless_categorical([[0.0, 60.0, 0.0]], 8, seed=[1, 2])
    # (int64 in TF; int32 in tapejax without JAX's x64 mode, as the README says: cast)
    return bool(tf.reduce_all(a1 == a2)), tf.cast(sure, tf.int32), a1.shape.as_list()


# ---------------------------------------------------------------------------
# tf.Module trees and SavedModels
# ---------------------------------------------------------------------------

def _regressor_module(tf):
    class Linear(tf.Module):
        def __init__(self, din, dout, seed, name=None):
            super().__init__(name=name)
            self.w = tf.Variable(init_array((din, dout), seed), name="w")
            self.b = tf.Variable(np.zeros(dout, np.float32), name="b")

        def __call__(self, x):
            return tf.matmul(x, self.w) + self.b

    class Regressor(tf.Module):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.l1 = Linear(3, 4, 18, name="l1")
            self.l2 = Linear(4, 1, 19, name="l2")
            self.steps = tf.Variable(0, trainable=False, name="steps")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return self.l2(tf.nn.relu(self.l1(x)))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def features(self, x):
            return {"hidden": tf.nn.relu(self.l1(x)), "n": tf.shape(x)[0]}

    return Regressor


@parity(**TOL)
def test_trained_module_saved_then_loaded_and_called_through_signatures(tf):
    """A ``tf.Module`` tree trained with ``trainable_variables`` (the step counter is not one),
    ``tf.saved_model.save`` with a serving signature and a second named one, loaded back: the
    signatures (keyword inputs, dict outputs), the restored ``__call__`` and the restored
    Variables give the trained model's values."""
    x, y = regression_data(n=8, seed=22)
    m = _regressor_module(tf)()
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
        m.steps.assign_add(1)
    names = [v.name for v in m.trainable_variables]
    path = os.path.join(tempfile.mkdtemp(), "model")
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__.get_concrete_function(),
                                             "features": m.features.get_concrete_function()})
    loaded = tf.saved_model.load(path)
    serve = loaded.signatures["serving_default"]
    feats = loaded.signatures["features"]
    out = serve(x=tf.constant(x[:3]))
    f = feats(x=tf.constant(x[:2]))
    return (names, loss, sorted(loaded.signatures.keys()), list(out.keys()), out["output_0"],
            sorted(f.keys()), f["hidden"], f["n"], loaded(tf.constant(x[3:])), m(x[3:]), loaded.steps,
            loaded.l1.w, loaded.l2.b)


@parity(**TOL)
def test_loaded_module_fine_tuned_with_a_tape(tf):
    """A SavedModel's restored function is differentiable: a tape over ``loaded(x)`` gives the
    gradients of its restored Variables, which an optimizer updates; the original is untouched."""
    x, y = regression_data(n=8, seed=23)
    m = _regressor_module(tf)()
    path = os.path.join(tempfile.mkdtemp(), "model")
    tf.saved_model.save(m, path)
    loaded = tf.saved_model.load(path)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    # (a loaded object is no tf.Module: no trainable_variables; its Variables are attributes)
    vs = [loaded.l1.w, loaded.l1.b, loaded.l2.w, loaded.l2.b]
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((loaded(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        losses.append(loss)
    return losses, [v.numpy() for v in vs], m.l1.w


@xfail_on_tapejax("a dynamic_size TensorArray filled by a compiled loop that stops early has a data-dependent "
                   "length: XLA gives it the loop's bound (40) and stack() raises InvalidArgumentError "
                   "(tapejax/compile/tensor_array_loop.py; TF returns the 12 written rows)")
@parity(**TOL)
def test_bounded_while_loop_records_a_trajectory_in_a_tensor_array(tf):
    """The compilable form of the growing trajectory: a ``tf.while_loop`` with
    ``maximum_iterations`` writing each state into a ``TensorArray(dynamic_size=True)``; the
    number of steps is data dependent, ``stack()`` gives the trajectory, and the gradient of the
    final position wrt the damping flows through the loop."""
    damping = tf.Variable(0.3)

    @tf.function
    def simulate(x0):
        def cond(i, state, ta):
            return tf.reduce_sum(state ** 2) > 0.05

        def body(i, state, ta):
            pos, vel = state[0], state[1]
            vel = vel - 0.2 * (pos + damping * vel)
            pos = pos + 0.2 * vel
            new = tf.stack([pos, vel])
            return i + 1, new, ta.write(i, new)

        with tf.GradientTape() as tape:
            ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[2])
            i, state, ta = tf.while_loop(cond, body, [tf.constant(0), x0, ta], maximum_iterations=40)
            target = state[0]
        return i, ta.stack(), tape.gradient(target, damping)

    return simulate(tf.constant([1.0, 0.0])), simulate(tf.constant([0.3, 0.1]))


@parity(**KTOL)
def test_keras_model_fit_then_exported_as_a_saved_model_and_served(tf):
    """A Keras model trained by ``fit`` and saved with ``tf.saved_model.save`` (no signatures given):
    the loaded object's ``serving_default`` takes the named input and gives the predictions, and the
    loaded call equals ``predict``."""
    x, y = _kdata(n=8, seed=28)
    model = tf.keras.Sequential([tf.keras.Input((5,), name="features"), tf.keras.layers.Dense(4, activation="relu"),
                                 tf.keras.layers.Dense(3)])
    keras_init(model, 29)
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "export")
    tf.saved_model.save(model, path)
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](features=tf.constant(x[:3]))
    # (the output's key is the last layer's name in tf_keras, output_0 in Keras 3: its value is compared)
    return list(served.values())[0], loaded(tf.constant(x[3:])), model.predict(x[3:], verbose=0)


@parity(**KTOL)
def test_save_weights_to_a_checkpoint_prefix_and_load_into_a_fresh_model(tf):
    """``model.save_weights(prefix)`` in TF's checkpoint format (tapejax's: a checkpoint with the
    model as its root, where Keras 3 raises ValueError), ``tf.train.latest_checkpoint`` finds it,
    a fresh model ``load_weights`` it and predicts alike."""
    x, _ = _kdata(n=4, seed=30)
    d = tempfile.mkdtemp()

    def make(seed):
        m = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
        keras_init(m, seed)
        return m

    a = make(31)
    a.save_weights(os.path.join(d, "my_checkpoint"))
    b = make(32)
    b.load_weights(tf.train.latest_checkpoint(d))
    return b(x), a(x)


@parity(**KTOL)
def test_lstm_encoder_decoder_with_initial_state_and_time_distributed_head(tf):
    """A seq2seq model: an ``LSTM(return_state=True)`` encoder whose ``[h, c]`` is the
    ``initial_state`` of an ``LSTM(return_sequences=True)`` decoder, a ``TimeDistributed(Dense)``
    head; teacher-forced MSE trained by three compiled steps with the legacy RMSprop."""
    rs = np.random.RandomState(33)
    enc_x = rs.randn(3, 4, 2).astype(np.float32)
    dec_x = rs.randn(3, 3, 2).astype(np.float32)
    target = rs.randn(3, 3, 2).astype(np.float32)
    enc_in, dec_in = tf.keras.Input((4, 2)), tf.keras.Input((3, 2))
    _, h, c = tf.keras.layers.LSTM(3, return_state=True)(enc_in)
    seq = tf.keras.layers.LSTM(3, return_sequences=True)(dec_in, initial_state=[h, c])
    out = tf.keras.layers.TimeDistributed(tf.keras.layers.Dense(2))(seq)
    model = tf.keras.Model([enc_in, dec_in], out)
    keras_init(model, 34)
    opt = tf.keras.optimizers.legacy.RMSprop(0.01)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model([enc_x, dec_x], training=True) - target) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return [step() for _ in range(3)], [v.numpy() for v in model.weights]
