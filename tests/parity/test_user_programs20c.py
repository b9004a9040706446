"""Round twenty (c) of realistic user programs, first half: freezing and parameter-efficient
fine-tuning as TF's transfer-learning guide and the research code write them, run under real
TensorFlow 2.21 (tf_keras) and under tapejax (Keras 3 on JAX behind ``tf.keras``).

Freezing is where Keras's two switches meet TF's Variable rules: ``layer.trainable`` decides what
``trainable_variables`` lists (and, for BatchNormalization, puts the layer in inference mode),
``training=`` decides how a call computes, and a tape still watches a frozen layer's Variables
(tf_keras leaves them ``trainable=True`` tf.Variables).  The programs count the lists at each
phase, compare gradients with their None-ness, check that frozen weights stay put, and read the
optimizers' ``iterations`` and slots, including tf_keras' new optimizers' ``KeyError`` for a
Variable first met after they were built.  Parameter-efficient fine-tuning: LoRA on a frozen
kernel (its zero-initialised ``B`` gives ``A`` a zero gradient, not None), bottleneck adapters,
prompt tuning, BitFit, and a frozen embedding table grown by a trainable slice.  The optimizer
and knowledge-transfer programs are in ``test_user_programs20c2.py``.  Keras-heavy programs run in
the default mode only; the rest also with deferral and predicted updates off (``modes=True``).
"""
import numpy as np

from .harness import init_array, keras_init, parity, raises, xfail_on_tapejax

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _xy(n=8, d=4, seed=0, classes=None):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    if classes:
        return x, rs.randint(0, classes, size=n).astype(np.int32)
    return x, rs.randn(n, 1).astype(np.float32)


def _base(tf, seed, bn=True, name="base"):
    """A small 'pre-trained' feature extractor: Dense -> (BatchNorm) -> relu -> Dense(tanh)."""
    L = tf.keras.layers
    layers = [tf.keras.Input((4,)), L.Dense(5, name=f"{name}_dense1")]
    if bn:
        layers.append(L.BatchNormalization(name=f"{name}_bn"))
    layers += [L.Activation("relu"), L.Dense(3, activation="tanh", name=f"{name}_dense2")]
    base = tf.keras.Sequential(layers, name=name)
    keras_init(base, seed)
    return base


def _counts(model):
    return (len(model.trainable_weights), len(model.non_trainable_weights), len(model.trainable_variables),
            len(model.non_trainable_variables), len(model.weights))


# ---------------------------------------------------------------------------
# Keras freezing
# ---------------------------------------------------------------------------

@parity(**LOOSE)
def test_guide_two_phases_frozen_base_fit_then_unfrozen_and_recompiled_at_a_low_rate(tf):
    """The transfer-learning guide: ``base.trainable = False``, a functional model calling
    ``base(inputs, training=False)`` with a new head, compile + fit; then ``base.trainable = True``,
    recompiled with a 10x smaller rate (a new optimizer) and fit on, its BatchNorm layers set
    ``trainable = False`` again (inference mode in TF 2 whatever ``training`` says).  The counts at each phase, both
    histories, the optimizers' ``iterations``, the base's weights after phase one (unchanged) and
    its BatchNorm's moving statistics after phase two (unchanged)."""
    x, y = _xy(8, seed=2001)
    base = _base(tf, 2002)
    base.trainable = False
    inputs = tf.keras.Input((4,))
    outputs = tf.keras.layers.Dense(1, name="head")(base(inputs, training=False))
    model = tf.keras.Model(inputs, outputs)
    model.get_layer("head").set_weights([init_array((3, 1), 2003), np.zeros(1, np.float32)])
    before = [w.numpy() for w in base.weights]
    opt1 = tf.keras.optimizers.Adam(0.05)
    model.compile(optimizer=opt1, loss="mse")
    counts = [_counts(model), _counts(base)]
    order = [[w.numpy() for w in model.non_trainable_weights], [w.numpy() for w in model.trainable_weights]]
    h1 = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    after1 = [bool(np.array_equal(a, w.numpy())) for a, w in zip(before, base.weights)]
    base.trainable = True
    for layer in base.layers:   # (BatchNorm kept in inference mode by freezing it: see the xfail below)
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.trainable = False
    opt2 = tf.keras.optimizers.Adam(0.005)
    model.compile(optimizer=opt2, loss="mse")
    counts += [_counts(model), _counts(base)]
    order += [[w.numpy() for w in model.non_trainable_weights], [w.numpy() for w in model.trainable_weights]]
    h2 = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    bn = base.get_layer("base_bn")
    return (counts, order, h1.history["loss"], h2.history["loss"], after1, int(opt1.iterations), int(opt2.iterations),
            [bool(np.array_equal(a, b.numpy())) for a, b in zip(before[4:], [bn.moving_mean, bn.moving_variance])],
            [w.numpy() for w in model.weights])


@xfail_on_tapejax("Keras 3 (tapejax's tf.keras) calls a functional model's layers with the outer call's "
                  "training flag, overriding the training=False given when the model was built "
                  "(keras-team/keras#20285, Keras 3 on TF too): the unfrozen base's BatchNorm updates its "
                  "moving statistics under fit, where tf_keras keeps them")
@parity(**LOOSE)
def test_guide_base_called_with_training_false_keeps_batchnorm_statistics_after_unfreezing(tf):
    """The guide's words as code: ``x = base_model(inputs, training=False)`` "so that the base model
    runs in inference mode, even after we unfreeze it"; phase two unfreezes everything (BatchNorm
    included) and fits: under tf_keras the moving statistics never change."""
    x, y = _xy(8, seed=2005)
    base = _base(tf, 2006)
    base.trainable = False
    inputs = tf.keras.Input((4,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="head")(base(inputs, training=False)))
    keras_init(model, 2007)
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.05), loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    base.trainable = True
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(0.01), loss="mse")
    h = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    bn = base.get_layer("base_bn")
    return h.history["loss"], bn.moving_mean.numpy(), bn.moving_variance.numpy()


@parity(**LOOSE)
def test_unfreezing_without_recompiling_under_run_eagerly_and_train_on_batch(tf):
    """The same rule where no trace hides it: ``compile(run_eagerly=True)`` with the base frozen,
    then ``base.trainable = True`` and ``fit`` / ``train_on_batch`` without a new compile: tf_keras
    sets each layer's ``trainable`` back to its compile-time value while they run (the base does
    not move) and restores it after (the lists count it)."""
    x, y = _xy(8, seed=2015)
    base = _base(tf, 2016, bn=False)
    base.trainable = False
    inputs = tf.keras.Input((4,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="head")(base(inputs)))
    keras_init(model, 2017)
    model.compile(optimizer=tf.keras.optimizers.legacy.Adam(0.05), loss="mse", run_eagerly=True)
    h1 = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    base.trainable = True
    frozen = [w.numpy() for w in base.weights]
    h2 = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    tob = model.train_on_batch(x[:4], y[:4])
    unchanged = [bool(np.array_equal(a, w.numpy())) for a, w in zip(frozen, base.weights)]
    return (h1.history["loss"], h2.history["loss"], tob, unchanged, _counts(model), base.trainable,
            int(model.optimizer.iterations), [w.numpy() for w in model.weights])


@parity(**LOOSE)
def test_recompiling_with_the_same_new_optimizer_after_unfreezing_raises_key_error_in_fit(tf):
    """A common slip: after ``base.trainable = True`` the program recompiles with the *same*
    ``tf.keras.optimizers.Adam`` instance; it was built for the head's Variables by the first
    ``fit``, so the second ``fit`` raises tf_keras' ``KeyError`` ("cannot recognize variable");
    a fresh optimizer then trains."""
    x, y = _xy(8, seed=2018)
    base = _base(tf, 2019, bn=False)
    base.trainable = False
    inputs = tf.keras.Input((4,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="head")(base(inputs)))
    keras_init(model, 2020)
    opt = tf.keras.optimizers.Adam(0.01)
    model.compile(optimizer=opt, loss="mse")
    h1 = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    base.trainable = True
    model.compile(optimizer=opt, loss="mse")
    failed = raises(model.fit, x, y, batch_size=8, epochs=1, verbose=0)
    counts = (int(opt.iterations), len(opt.variables))
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    h2 = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    return h1.history["loss"], failed, counts, h2.history["loss"], [w.numpy() for w in model.weights]


@parity(**LOOSE)
def test_unfreezing_without_recompiling_keeps_the_compiled_trainable_state_under_fit(tf):
    """tf_keras' rule (the guide's "call compile() again"): ``fit`` after ``base.trainable = True``
    without a new ``compile`` trains with the train function made for the frozen model, so the
    base still does not move; the lists already say it is trainable.  ``evaluate`` after it, and
    a recompile with the same (legacy) optimizer then moves the base too."""
    x, y = _xy(8, seed=2011)
    base = _base(tf, 2012, bn=False)
    base.trainable = False
    inputs = tf.keras.Input((4,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="head")(base(inputs)))
    keras_init(model, 2013)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    base.trainable = True
    frozen = [w.numpy() for w in base.weights]
    h = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    moved_without = [bool(not np.array_equal(a, w.numpy())) for a, w in zip(frozen, base.weights)]
    ev = model.evaluate(x, y, verbose=0)
    model.compile(optimizer=opt, loss="mse")
    h2 = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    moved_with = [bool(not np.array_equal(a, w.numpy())) for a, w in zip(frozen, base.weights)]
    return (_counts(model), h.history["loss"], moved_without, ev, h2.history["loss"], moved_with,
            int(opt.iterations), [w.numpy() for w in model.weights])


@parity(modes=True, **LOOSE)
def test_one_layer_frozen_inside_a_sequential_trained_by_a_compiled_tape_step(tf):
    """``model.layers[1].trainable = False`` in a three-Dense Sequential: the step differentiates
    over ``model.trainable_variables`` (4 of 6), the tape still watches all six (tf_keras' frozen
    kernel is a trainable tf.Variable) and the frozen kernel's gradient asked for explicitly has
    values; the frozen layer does not move.  Legacy SGD with momentum: its slots only for the four."""
    x, y = _xy(6, seed=2021)
    L = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(5, activation="tanh", name="l0"),
                                 L.Dense(4, activation="tanh", name="l1"), L.Dense(1, name="l2")])
    keras_init(model, 2022)
    model.layers[1].trainable = False
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    frozen = model.layers[1]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables + [frozen.kernel])
        opt.apply_gradients(zip(grads[:-1], variables))
        return loss, grads, len(tape.watched_variables())

    before = frozen.kernel.numpy()
    out = [step(x, y) for _ in range(3)]
    return (out, _counts(model), bool(np.array_equal(before, frozen.kernel.numpy())), len(opt.variables()),
            int(opt.iterations), [opt.get_slot(v, "momentum") for v in model.trainable_variables],
            [w.numpy() for w in model.weights])


@parity(**LOOSE)
def test_frozen_batchnorm_runs_in_inference_mode_even_with_training_true(tf):
    """TF 2's BatchNormalization rule: ``bn.trainable = False`` makes ``training=True`` calls use
    and keep the moving statistics (and takes gamma/beta out of the trainable lists); the same layer
    trainable but called with ``training=False`` computes the same outputs and also leaves the
    statistics alone, yet its gamma/beta train; a trainable layer called with ``training=True``
    updates them.  Three copies of one model, three steps each."""
    x, y = _xy(8, seed=2031)
    L = tf.keras.layers

    def make():
        m = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(3, name="d"), L.BatchNormalization(name="bn"),
                                 L.Dense(1, name="out")])
        keras_init(m, 2032)
        return m

    frozen, inference, training = make(), make(), make()
    frozen.get_layer("bn").trainable = False
    out = {}
    for name, model, flag in (("frozen", frozen, True), ("inference", inference, False), ("training", training, True)):
        opt = tf.keras.optimizers.legacy.SGD(0.1)
        bn = model.get_layer("bn")
        rows = []
        for _ in range(3):
            with tf.GradientTape() as tape:
                pred = model(x, training=flag)
                loss = tf.reduce_mean(tf.square(pred - y))
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables + [bn.gamma, bn.moving_mean])
            opt.apply_gradients(zip(grads[:len(variables)], variables))
            rows.append((loss, pred, grads[len(variables):]))
        out[name] = (rows, _counts(model), _counts(bn), bn.moving_mean.numpy(), bn.moving_variance.numpy(),
                     [w.numpy() for w in model.non_trainable_weights], [w.numpy() for w in model.trainable_weights],
                     [w.numpy() for w in model.weights])
    return out


@parity(modes=True, **LOOSE)
def test_new_optimizer_meeting_the_unfrozen_base_raises_key_error_and_legacy_makes_its_slots(tf):
    """Phase one trains the head of a frozen-base functional model with tf_keras' new Adam in a
    compiled step; phase two unfreezes the base and hands the same optimizer the longer list:
    tf_keras raises ``KeyError`` (it was built for the head only), eagerly and in a new trace.  The
    program then follows the message's advice: a legacy Adam, which makes the base's slots at its
    first update and counts on; a second new Adam ``build``-t for the full list first."""
    x, y = _xy(6, seed=2041)
    base = _base(tf, 2042, bn=False)
    base.trainable = False
    inputs = tf.keras.Input((4,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="head")(base(inputs)))
    keras_init(model, 2043)

    def make_step(opt):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            opt.apply_gradients(zip(grads, variables))
            return loss
        return step

    adam = tf.keras.optimizers.Adam(0.05)
    step = tf.function(make_step(adam))
    out = [step(x, y), step(x, y)]
    base.trainable = True
    out.append(raises(tf.function(make_step(adam)), x, y))
    out.append(raises(make_step(adam), x, y))
    out.append((int(adam.iterations), len(adam.variables)))
    legacy = tf.keras.optimizers.legacy.Adam(0.05)
    legacy_step = tf.function(make_step(legacy))
    out.append([legacy_step(x, y) for _ in range(2)])
    fresh = tf.keras.optimizers.Adam(0.01)
    fresh.build(model.trainable_variables)
    out.append((len(fresh.variables), int(fresh.iterations)))
    out.append([make_step(fresh)(x, y) for _ in range(2)])
    return (out, int(legacy.iterations), len(legacy.variables()), int(fresh.iterations),
            [legacy.get_slot(v, "m") for v in model.trainable_variables], [w.numpy() for w in model.weights])


@parity(modes=True, **LOOSE)
def test_one_step_function_for_a_fully_frozen_model_applies_an_empty_list(tf):
    """Linear probing's last phase, written with the training step reused: ``model.trainable =
    False`` leaves ``model.trainable_variables`` empty, so the step's ``tape.gradient`` gives ``[]``
    and ``apply_gradients(zip([], []))`` is tf_keras' no-op (the new optimizer returns its
    ``iterations`` unchanged, the legacy one ``None``); the weights do not move and the losses are
    the frozen model's."""
    x, y = _xy(6, seed=2045)
    model = _base(tf, 2046, bn=False)
    new, legacy = tf.keras.optimizers.Adam(0.05), tf.keras.optimizers.legacy.SGD(0.1)

    def step(opt):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)[:, :1] - y))
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, grads, opt.apply_gradients(zip(grads, model.trainable_variables))

    out = [step(new)[:2], step(legacy)[:2]]
    model.trainable = False
    before = model.get_weights()
    frozen_new, frozen_legacy = step(new), step(legacy)
    out += [(frozen_new[0], frozen_new[1], int(frozen_new[2])), (frozen_legacy[:2], frozen_legacy[2] is None)]
    return (out, int(new.iterations), int(legacy.iterations), len(model.trainable_variables),
            [bool(np.array_equal(a, b)) for a, b in zip(before, model.get_weights())])


@parity(modes=True, **LOOSE)
def test_gradients_over_trainable_variables_re_read_after_each_toggle(tf):
    """A research loop that re-reads ``model.trainable_variables`` each step while it toggles which
    block trains (alternating "train the encoder" / "train the decoder" steps, one legacy RMSprop):
    the list's length, the gradients (None for a block outside the loss's path: the decoder's
    gradient of an encoder-only auxiliary loss), and every weight."""
    x, y = _xy(6, seed=2051)
    L = tf.keras.layers
    enc = L.Dense(3, activation="tanh", name="enc")
    dec = L.Dense(1, name="dec")
    model = tf.keras.Sequential([tf.keras.Input((4,)), enc, dec])
    keras_init(model, 2052)
    opt = tf.keras.optimizers.legacy.RMSprop(0.02)
    out = []
    for i in range(4):
        enc.trainable, dec.trainable = i % 2 == 0, i % 2 == 1
        with tf.GradientTape() as tape:
            h = enc(x)
            aux = 0.1 * tf.reduce_mean(tf.square(h))
            loss = tf.reduce_mean(tf.square(dec(h) - y)) + aux
        variables = model.trainable_variables
        g = tape.gradient(loss, variables)
        opt.apply_gradients(zip(g, variables))
        with tf.GradientTape() as tape2:
            aux2 = 0.1 * tf.reduce_mean(tf.square(enc(x)))
        g_aux = tape2.gradient(aux2, [enc.kernel, dec.kernel])
        out.append((len(variables), loss, g, [gi is None for gi in g_aux]))
    return out, int(opt.iterations), [w.numpy() for w in model.weights]


# ---------------------------------------------------------------------------
# Parameter-efficient fine-tuning
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_lora_on_a_frozen_dense_kernel_with_a_zero_initialised_b(tf):
    """LoRA: a frozen pre-trained ``Dense`` kernel ``W`` used as ``x @ (W + A @ B * alpha / r)``
    with ``A`` random and ``B`` zeros; the first step's gradient to ``A`` is zeros (not None: it is
    on the path, multiplied by ``B = 0``), ``B``'s is not; compiled Adam steps; at the end the
    adapter is merged into the kernel (``W.assign(W + A @ B * scale)``) and the merged layer's
    output equals the adapted one.  ``W`` is read through the layer, whose ``trainable`` is False."""
    x, y = _xy(6, seed=2061)
    dense = tf.keras.layers.Dense(3, name="pretrained")
    dense.build((None, 4))
    dense.set_weights([init_array((4, 3), 2062), init_array((3,), 2063)])
    dense.trainable = False
    head = tf.Variable(init_array((3, 1), 2064), name="head")
    r, alpha = 2, 4.0
    lora_a = tf.Variable(init_array((4, r), 2065, scale=0.1), name="lora_A")
    lora_b = tf.Variable(tf.zeros((r, 3)), name="lora_B")
    opt = tf.keras.optimizers.Adam(0.05)
    trainable = [lora_a, lora_b, head]

    def adapted(x):
        w = dense.kernel + tf.matmul(lora_a, lora_b) * (alpha / r)
        return tf.nn.relu(tf.matmul(x, w) + dense.bias)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(adapted(x), head) - y))
        grads = tape.gradient(loss, trainable + [dense.kernel])
        opt.apply_gradients(zip(grads[:3], trainable))
        return loss, grads

    out = [step(x, y) for _ in range(3)]
    first_a = out[0][1][0]
    kernel0 = dense.kernel.numpy()
    pred = adapted(x)
    dense.kernel.assign(dense.kernel + tf.matmul(lora_a, lora_b) * (alpha / r))
    merged = tf.nn.relu(dense(x))
    return (out, first_a is None, float(tf.reduce_max(tf.abs(first_a))), len(dense.trainable_weights),
            kernel0, pred, merged, lora_a, lora_b, head, int(opt.iterations))


@parity(modes=True, **LOOSE)
def test_bottleneck_adapters_between_frozen_layers_of_a_subclassed_model(tf):
    """Houlsby-style adapters: a subclassed model whose frozen Dense blocks each get a residual
    bottleneck ``h + up(relu(down(h)))`` (``up`` zero-initialised, so the adapted model starts equal
    to the frozen one); only the adapters and the head train (counts by layer), by a compiled step
    with gradient norms logged per adapter."""
    x, labels = _xy(8, seed=2071, classes=3)
    L = tf.keras.layers

    class Adapter(tf.keras.layers.Layer):
        def __init__(self, dim, bottleneck, **kw):
            super().__init__(**kw)
            self.down = L.Dense(bottleneck, activation="relu", name="down")
            self.up = L.Dense(dim, kernel_initializer="zeros", name="up")

        def call(self, h):
            return h + self.up(self.down(h))

    class AdaptedNet(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.block1 = L.Dense(5, activation="tanh", name="block1")
            self.adapter1 = Adapter(5, 2, name="adapter1")
            self.block2 = L.Dense(4, activation="tanh", name="block2")
            self.adapter2 = Adapter(4, 2, name="adapter2")
            self.head = L.Dense(3, name="head")

        def call(self, x):
            return self.head(self.adapter2(self.block2(self.adapter1(self.block1(x)))))

    model = AdaptedNet()
    model(x)
    for blk, seed in ((model.block1, 2072), (model.block2, 2073)):
        blk.set_weights([init_array(w.shape, seed) for w in blk.weights])
        blk.trainable = False
    for ad, seed in ((model.adapter1, 2074), (model.adapter2, 2075)):
        ad.down.set_weights([init_array(w.shape, seed) for w in ad.down.weights])
    model.head.set_weights([init_array((4, 3), 2076), np.zeros(3, np.float32)])
    frozen_out = model.head(model.block2(model.block1(x)))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function
    def step(x, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss, [tf.linalg.global_norm(grads[i:i + 4]) for i in (0, 4)], grads

    start = model(x)
    out = [step(x, labels) for _ in range(3)]
    return (frozen_out, start, out, _counts(model), [len(layer.trainable_weights) for layer in model.layers],
            [w.numpy() for w in model.block1.weights + model.block2.weights])


@parity(modes=True, **LOOSE)
def test_prompt_tuning_concatenates_a_trainable_prefix_to_frozen_token_embeddings(tf):
    """Prompt tuning: a frozen ``Embedding`` table gives the tokens' vectors, a trainable
    ``prompt`` Variable (``P`` vectors) is tiled over the batch and concatenated in front, mean
    pooled into a frozen linear classifier.  The gradient reaches only the prompt (the table's
    explicitly requested gradient is an IndexedSlices in TF, compared densified), Adam in a
    compiled step; the table and classifier never move."""
    rs = np.random.RandomState(2081)
    ids = rs.randint(0, 7, size=(4, 5)).astype(np.int32)
    labels = np.array([0, 1, 1, 0], np.int32)
    emb = tf.keras.layers.Embedding(7, 3, name="tokens")
    emb.build((None,))
    emb.set_weights([init_array((7, 3), 2082)])
    emb.trainable = False
    clf = tf.Variable(init_array((3, 2), 2083), trainable=False, name="classifier")
    prompt = tf.Variable(init_array((2, 3), 2084, scale=0.1), name="prompt")
    opt = tf.keras.optimizers.Adam(0.1)

    @tf.function
    def step(ids, labels):
        with tf.GradientTape() as tape:
            tokens = emb(ids)
            batch = tf.shape(ids)[0]
            prefix = tf.tile(prompt[None], [batch, 1, 1])
            seq = tf.concat([prefix, tokens], axis=1)
            logits = tf.matmul(tf.reduce_mean(seq, axis=1), clf)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        g_prompt, g_table, g_clf = tape.gradient(loss, [prompt, emb.embeddings, clf])
        opt.apply_gradients([(g_prompt, prompt)])
        return loss, g_prompt, tf.convert_to_tensor(g_table), g_clf is None, tf.shape(seq)

    table = emb.embeddings.numpy()
    out = [step(ids, labels) for _ in range(3)]
    return out, prompt, bool(np.array_equal(table, emb.embeddings.numpy())), clf, int(opt.iterations)


@parity(modes=True, **LOOSE)
def test_bitfit_trains_only_the_biases_picked_by_name(tf):
    """BitFit: ``[v for v in model.trainable_variables if "bias" in v.name]`` (3 of 6; the names
    differ between Keras versions, the selection not), a compiled SGD step on them; the kernels'
    gradients are computed too (values, asked for) but not applied."""
    x, labels = _xy(8, seed=2091, classes=2)
    L = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(4, activation="relu", name="h1"),
                                 L.Dense(3, activation="relu", name="h2"), L.Dense(2, name="logits")])
    keras_init(model, 2092)
    biases = [v for v in model.trainable_variables if "bias" in v.name]
    kernels = [v for v in model.trainable_variables if "kernel" in v.name]
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.5, momentum=0.5)   # (plain SGD: tf_keras keeps an unread ``m`` per
    # Variable that tapejax does not, ``tapejax/train/README.md``'s known gaps: the slot count would differ)

    @tf.function
    def step(x, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        g_b, g_k = tape.gradient(loss, [biases, kernels])
        opt.apply_gradients(zip(g_b, biases))
        return loss, g_b, g_k

    kernels0 = [k.numpy() for k in kernels]
    out = [step(x, labels) for _ in range(3)]
    return (len(biases), len(kernels), out, [bool(np.array_equal(a, k.numpy())) for a, k in zip(kernels0, kernels)],
            biases, len(opt.variables), int(opt.iterations))


@parity(modes=True, **LOOSE)
def test_frozen_embedding_table_grown_by_a_trainable_new_token_slice(tf):
    """Adding tokens to a pre-trained vocabulary: the old rows stay a frozen constant-like
    Variable (``trainable=False``), the new rows a trainable Variable, the table is
    ``tf.concat([old, new], 0)`` and looked up by ``tf.gather`` (ids hit old and new rows, one
    new row twice, one never); the new rows' gradient (dense, through the concat) and the old
    Variable's None; legacy Adagrad in a compiled step."""
    ids = np.array([[0, 5, 6], [5, 2, 1], [3, 5, 0]], np.int32)
    y = np.array([[1.0], [-1.0], [0.5]], np.float32)
    old = tf.Variable(init_array((5, 3), 2101), trainable=False, name="old_rows")
    new = tf.Variable(init_array((3, 3), 2102, scale=0.05), name="new_rows")
    w = tf.Variable(init_array((3, 1), 2103), name="w")
    opt = tf.keras.optimizers.legacy.Adagrad(0.2)

    @tf.function
    def step(ids, y):
        with tf.GradientTape() as tape:
            table = tf.concat([old, new], axis=0)
            vecs = tf.gather(table, ids)
            loss = tf.reduce_mean(tf.square(tf.matmul(tf.reduce_mean(vecs, axis=1), w) - y))
        g_new, g_w, g_old = tape.gradient(loss, [new, w, old])
        opt.apply_gradients([(g_new, new), (g_w, w)])
        return loss, tf.convert_to_tensor(g_new), g_w, g_old is None, len(tape.watched_variables())

    out = [step(ids, y) for _ in range(3)]
    return out, old, new, w, [opt.get_slot(v, "accumulator") for v in (new, w)]


@parity(modes=True, **LOOSE)
def test_recompute_grad_around_a_frozen_block_and_a_trainable_adapter(tf):
    """Gradient checkpointing during fine-tuning: ``tf.recompute_grad`` wraps a block whose frozen
    weights (``trainable=False`` Variables read inside) and trainable adapter weights are captured
    (the wrapped function gets them through ``variables=``, TF's rule for Variables in a
    recomputed function); the adapter's gradients equal those of the plain block."""
    x, y = _xy(6, seed=2111)
    w_frozen = tf.Variable(init_array((4, 4), 2112), trainable=False)
    a_down = tf.Variable(init_array((4, 2), 2113))
    a_up = tf.Variable(init_array((2, 4), 2114, scale=0.1))
    head = tf.Variable(init_array((4, 1), 2115))

    def block(h):
        h = tf.tanh(tf.matmul(h, w_frozen))
        return h + tf.matmul(tf.nn.relu(tf.matmul(h, a_down)), a_up)

    recomputed = tf.recompute_grad(block)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for fn in (recomputed, block, recomputed):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(fn(tf.constant(x)), head) - y))
        grads = tape.gradient(loss, [a_down, a_up, head, w_frozen])
        out.append((loss, grads[:3], grads[3] is None))
    opt.apply_gradients(zip(out[-1][1], [a_down, a_up, head]))
    return out, a_down, a_up, head
