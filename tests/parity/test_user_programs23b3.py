"""Round twenty-three (b) of realistic user programs, third part: the training recipes of keras.io's
TF-era vision examples and the research code, run under real TensorFlow 2.21 and under tapejax.

Mixup with the mixing weight from NumPy's Beta draw and ``CategoricalCrossentropy`` with label
smoothing, CutMix as keras.io maps it over ``Dataset.zip`` (``crop_to_bounding_box`` /
``pad_to_bounding_box``, the integer area ratio cast to the label weight), ``AdamW`` with decoupled
weight decay that excludes LayerNorm and bias Variables under a warm-up + cosine
``LearningRateSchedule`` subclass and ``tf.clip_by_global_norm``, gradient accumulation over
micro-batches in a compiled step, an EMA of the weights swapped in for evaluation, label
smoothing against its formula, a small ViT under ``fit`` (keras.io's ``Patches`` and
``PatchEncoder`` layers), and its ``data_augmentation`` (an adapted ``Normalization``, a bicubic
``Resizing``, random layers in inference).  The vision-transformer programs are in ``test_user_programs23b.py`` and
``test_user_programs23b2.py``.
"""
import math

import numpy as np

from .harness import init_array, keras_init, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)
KTOL = dict(rtol=2e-4, atol=2e-5)


def _images(seed, n=4, hw=8, c=3):
    return np.random.RandomState(seed).rand(n, hw, hw, c).astype(np.float32)


def _onehot(seed, n=4, k=3):
    return np.eye(k, dtype=np.float32)[np.random.RandomState(seed).randint(0, k, n)]


def _convnet_vars(tf, seed):
    return [tf.Variable(init_array((3, 3, 3, 4), seed, 0.3), name="conv_kernel"),
            tf.Variable(np.zeros(4, np.float32), name="conv_bias"),
            tf.Variable(np.ones(4, np.float32), name="layer_norm_gamma"),
            tf.Variable(np.zeros(4, np.float32), name="layer_norm_beta"),
            tf.Variable(init_array((4, 3), seed + 1), name="head_kernel"),
            tf.Variable(np.zeros(3, np.float32), name="head_bias")]


def _convnet(tf, ws, x):
    """conv 3x3 stride 2 -> GELU -> LayerNorm over channels -> global average pool -> head."""
    k, b, g, beta, hk, hb = ws
    h = tf.nn.gelu(tf.nn.conv2d(x, k, 2, "SAME") + b)
    mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
    h = (h - mean) / tf.sqrt(var + 1e-6) * g + beta
    return tf.matmul(tf.reduce_mean(h, axis=[1, 2]), hk) + hb


class _WarmUpCosine:
    """keras.io's ``WarmUpCosine`` (the ViT / MAE examples), made a subclass of the backend's
    ``LearningRateSchedule`` in ``_schedule``."""

    def __init__(self, learning_rate_base, total_steps, warmup_learning_rate, warmup_steps):
        self.learning_rate_base = learning_rate_base
        self.total_steps = total_steps
        self.warmup_learning_rate = warmup_learning_rate
        self.warmup_steps = warmup_steps
        self.pi = math.pi

    def lr(self, tf, step):
        cos_annealed_lr = tf.cos(self.pi * (tf.cast(step, tf.float32) - self.warmup_steps)
                                 / float(self.total_steps - self.warmup_steps))
        learning_rate = 0.5 * self.learning_rate_base * (1 + cos_annealed_lr)
        slope = (self.learning_rate_base - self.warmup_learning_rate) / self.warmup_steps
        warmup_rate = slope * tf.cast(step, tf.float32) + self.warmup_learning_rate
        learning_rate = tf.where(step < self.warmup_steps, warmup_rate, learning_rate)
        return tf.where(step > self.total_steps, 0.0, learning_rate, name="learning_rate")


def _schedule(tf, *args):
    class WarmUpCosine(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self):
            super().__init__()
            self.inner = _WarmUpCosine(*args)

        def __call__(self, step):
            return self.inner.lr(tf, step)

    return WarmUpCosine()


# ---------------------------------------------------------------------------
# Mixup, CutMix, label smoothing
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_mixup_with_a_numpy_beta_weight_and_label_smoothed_crossentropy(tf):
    """keras.io's mixup: two shuffled copies of a batch mixed as ``x1 * l + x2 * (1 - l)`` with ``l``
    of shape ``(B, 1, 1, 1)`` drawn from NumPy's ``Beta(0.2, 0.2)``, the labels by ``l`` reshaped
    to ``(B, 1)``; ``CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)`` on a small conv
    net, three Adam steps (the last two compiled) with a new Beta draw each."""
    images, labels = _images(2501), _onehot(2502)
    perm = np.random.RandomState(2503).permutation(4)
    lams = [np.random.RandomState(2504 + i).beta(0.2, 0.2, 4).astype(np.float32) for i in range(3)]
    ws = _convnet_vars(tf, 2507)
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def step(x, y, lam):
        x_l = tf.reshape(lam, (-1, 1, 1, 1))
        y_l = tf.reshape(lam, (-1, 1))
        x_mix = x * x_l + tf.gather(x, perm) * (1 - x_l)
        y_mix = y * y_l + tf.gather(y, perm) * (1 - y_l)
        with tf.GradientTape() as tape:
            loss = loss_fn(y_mix, _convnet(tf, ws, x_mix))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, y_mix

    compiled = tf.function(step)
    out = [(compiled if i else step)(images, labels, lam) for i, lam in enumerate(lams)]
    return out, ws


@parity(x64=True, **KTOL)
def test_cutmix_mapped_over_zipped_datasets_with_crop_and_pad_to_bounding_box(tf):
    """keras.io's CutMix over ``Dataset.zip`` of two shuffled copies: ``get_box`` from a NumPy
    ``lambda`` and box centre (``tf.cast(IMG_SIZE * sqrt(1 - lambda), tf.int32)``, clipped bounds,
    ``if target_h == 0: target_h += 1`` converted by AutoGraph), the patch of the second image by
    ``crop_to_bounding_box`` + ``pad_to_bounding_box`` pasted over the first, the label weight
    ``1 - (w * h) / (IMG_SIZE * IMG_SIZE)`` (an integer division made float, then cast); a
    ``Dense`` head trained on the mixed batches by a tape loop."""
    IMG = 8
    rs = np.random.RandomState(2511)
    x1, x2 = _images(2512), _images(2513)
    y1, y2 = _onehot(2514), _onehot(2515)
    lam = rs.beta(1.0, 1.0, 4).astype(np.float32)
    lam[1] = 0.999   # a box of width 0: the ``target_h += 1`` branch
    cx, cy = rs.randint(0, IMG, 4).astype(np.int32), rs.randint(0, IMG, 4).astype(np.int32)

    def get_box(lambda_value, cut_x, cut_y):
        cut_rat = tf.math.sqrt(1.0 - lambda_value)
        cut_w = tf.cast(IMG * cut_rat, tf.int32)
        cut_h = tf.cast(IMG * cut_rat, tf.int32)
        boundaryx1 = tf.clip_by_value(cut_x - cut_w // 2, 0, IMG)
        boundaryy1 = tf.clip_by_value(cut_y - cut_h // 2, 0, IMG)
        bbx2 = tf.clip_by_value(cut_x + cut_w // 2, 0, IMG)
        bby2 = tf.clip_by_value(cut_y + cut_h // 2, 0, IMG)
        target_h = bby2 - boundaryy1
        if target_h == 0:
            target_h += 1
        target_w = bbx2 - boundaryx1
        if target_w == 0:
            target_w += 1
        return boundaryx1, boundaryy1, target_h, target_w

    def cutmix(one, two):
        (image1, label1), (image2, label2, lambda_value, cut_x, cut_y) = one, two
        bx, by, th, tw = get_box(lambda_value, cut_x, cut_y)
        crop2 = tf.image.crop_to_bounding_box(image2, by, bx, th, tw)
        image2 = tf.image.pad_to_bounding_box(crop2, by, bx, IMG, IMG)
        crop1 = tf.image.crop_to_bounding_box(image1, by, bx, th, tw)
        img1 = tf.image.pad_to_bounding_box(crop1, by, bx, IMG, IMG)
        image = image1 - img1 + image2
        lambda_value = 1 - (tw * th) / (IMG * IMG)
        lambda_value = tf.cast(lambda_value, tf.float32)
        return image, lambda_value * label1 + (1 - lambda_value) * label2

    ds = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices((x1, y1)),
                              tf.data.Dataset.from_tensor_slices((x2, y2, lam, cx, cy))))
    ds = ds.map(cutmix).batch(2)
    model = tf.keras.Sequential([tf.keras.Input((IMG, IMG, 3)), tf.keras.layers.Conv2D(4, 3, strides=2),
                                 tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(3)])
    keras_init(model, 2516)
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for images, labels in ds:
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((images, labels, loss, g))
    return out, [np.array(w) for w in model.weights]


@parity(**LOOSE)
def test_label_smoothing_against_its_formula_with_sample_weights(tf):
    """``CategoricalCrossentropy(label_smoothing=0.2, from_logits=True)`` equals the cross-entropy
    against ``y * (1 - 0.2) + 0.2 / K``; with ``reduction="none"``, with a ``sample_weight`` (one
    sample weighted 0), and ``BinaryCrossentropy(label_smoothing=0.2)`` against ``y * 0.8 + 0.1``;
    gradients wrt the logits, including at a saturated logit."""
    logits = tf.constant([[2.0, -1.0, 0.5], [30.0, -30.0, 0.0], [0.1, 0.2, 0.3]])
    y = tf.constant(np.eye(3, dtype=np.float32)[[0, 1, 2]])
    cce = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2)
    per = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2, reduction="none")
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.2)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        a = cce(y, logits)
        b = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y * 0.8 + 0.2 / 3, logits))
        c = per(y, logits)
        d = cce(y, logits, sample_weight=tf.constant([1.0, 0.0, 2.0]))
        e = bce(y, logits)
        f = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y * 0.8 + 0.1, logits))
    return a, b, c, d, e, f, [tape.gradient(t, logits) for t in (a, b, d, e, f)]


# ---------------------------------------------------------------------------
# Optimisation: AdamW exclusions, warm-up cosine, global-norm clipping, accumulation, EMA
# ---------------------------------------------------------------------------

@parity(**LOOSE)
def test_adamw_excluding_norm_and_bias_under_warmup_cosine_with_global_norm_clipping(tf):
    """``tf.keras.optimizers.AdamW(learning_rate=WarmUpCosine(...), weight_decay=0.1)`` with
    ``exclude_from_weight_decay(var_names=["layer_norm", "bias"])`` on named Variables, gradients
    clipped by ``tf.clip_by_global_norm(grads, 0.5)`` (the norm logged: above the bound at first),
    six steps of a custom loop (warm-up for two, cosine to ``total_steps = 5``, zero after): the
    schedule's rates at each ``optimizer.iterations``, losses, norms and Variables; a twin without
    exclusions shows which Variables decay.  The decayed-but-untrained kernel of a head whose
    gradient is zero moves only by decay."""
    images, labels = _images(2521), _onehot(2522)
    sched = _schedule(tf, 0.05, 5, 0.0, 2)
    out = []
    for exclude in (True, False):
        ws = _convnet_vars(tf, 2523)
        opt = tf.keras.optimizers.AdamW(learning_rate=sched, weight_decay=0.1)
        if exclude:
            opt.exclude_from_weight_decay(var_names=["layer_norm", "bias"])
        rows = []
        for _ in range(6):
            lr = sched(opt.iterations)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels, _convnet(tf, ws, images)))
            grads = tape.gradient(loss, ws)
            clipped, norm = tf.clip_by_global_norm(grads, 0.5)
            opt.apply_gradients(zip(clipped, ws))
            rows.append((lr, loss, norm))
        out.append((rows, ws, int(opt.iterations)))
    return out, [sched(s) for s in range(7)]


@parity(modes=True, **LOOSE)
def test_gradient_accumulation_over_micro_batches_matches_the_full_batch(tf):
    """Gradient accumulation as the research code writes it: non-trainable accumulator Variables,
    a compiled ``micro_step`` that ``assign_add``s each micro-batch's gradient of the loss divided
    by the number of micro-batches, an ``apply`` that steps SGD on the accumulators and zeroes
    them; two accumulated steps of two micro-batches equal two full-batch steps of a twin model
    (same data), and the accumulators are zero after."""
    images, labels = _images(2531), _onehot(2532)
    ws, twin = _convnet_vars(tf, 2533), _convnet_vars(tf, 2533)
    accum = [tf.Variable(tf.zeros_like(v), trainable=False) for v in ws]
    opt, opt2 = tf.keras.optimizers.legacy.SGD(0.5), tf.keras.optimizers.legacy.SGD(0.5)
    n_micro = 2

    @tf.function
    def micro_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, _convnet(tf, ws, x))) / n_micro
        for a, g in zip(accum, tape.gradient(loss, ws)):
            a.assign_add(g)
        return loss

    def apply():
        opt.apply_gradients(zip([tf.identity(a) for a in accum], ws))
        for a in accum:
            a.assign(tf.zeros_like(a))

    out = []
    for _ in range(2):
        losses = [micro_step(images[i:i + 2], labels[i:i + 2]) for i in (0, 2)]
        acc = [tf.identity(a) for a in accum]
        apply()
        with tf.GradientTape() as tape:
            full = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels, _convnet(tf, twin, images)))
        g = tape.gradient(full, twin)
        opt2.apply_gradients(zip(g, twin))
        out.append((losses, tf.add_n(losses), full, acc, g))
    return out, ws, twin, accum


@parity(**LOOSE)
def test_ema_of_weights_swapped_in_for_evaluation(tf):
    """``tf.train.ExponentialMovingAverage(decay=0.9)`` applied after each Adam step (its
    ``num_updates`` unset), evaluation with the averages swapped in (the weights backed up,
    ``assign(ema.average(v))``, evaluated, restored): the averages, the evaluation losses with and
    without them, and the raw weights restored exactly."""
    images, labels = _images(2541), _onehot(2542)
    ws = _convnet_vars(tf, 2543)
    ema = tf.train.ExponentialMovingAverage(decay=0.9)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def loss_of(x, y):
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, _convnet(tf, ws, x)))

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = loss_of(images, labels)
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        ema.apply(ws)
        backup = [tf.identity(v) for v in ws]
        for v in ws:
            v.assign(ema.average(v))
        ema_loss = loss_of(images, labels)
        for v, b in zip(ws, backup):
            v.assign(b)
        out.append((loss, ema_loss, loss_of(images, labels), [tf.identity(ema.average(v)) for v in ws]))
    return out, ws


# ---------------------------------------------------------------------------
# A small ViT under fit
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_small_vit_of_keras_io_under_fit_with_adamw_and_label_smoothing(tf):
    """keras.io's ``vit_classifier`` at tiny size: ``Patches`` (``extract_patches`` in a ``Layer``),
    ``PatchEncoder`` (a ``Dense`` projection plus an ``Embedding`` of ``tf.range`` positions), one
    transformer block (LayerNorm, ``MultiHeadAttention``, ``Add``, an MLP with ``tf.nn.gelu``),
    ``Flatten`` and a head; compiled with ``AdamW`` and ``CategoricalCrossentropy(from_logits=True,
    label_smoothing=0.1)`` and accuracy / top-2 metrics, ``fit`` for two epochs of two batches,
    then ``evaluate``.  The weights after are compared but the key projection's bias: softmax is
    shift-invariant, so its gradient is round-off, which Adam's ``m / sqrt(v)`` turns into steps
    of full size, different in each library."""
    x, y = _images(2551, n=8), _onehot(2552, n=8)
    L = tf.keras.layers

    class Patches(L.Layer):
        def __init__(self, patch_size):
            super().__init__()
            self.patch_size = patch_size

        def call(self, images):
            batch_size = tf.shape(images)[0]
            patches = tf.image.extract_patches(images=images, sizes=[1, self.patch_size, self.patch_size, 1],
                                               strides=[1, self.patch_size, self.patch_size, 1],
                                               rates=[1, 1, 1, 1], padding="VALID")
            return tf.reshape(patches, [batch_size, -1, patches.shape[-1]])

    class PatchEncoder(L.Layer):
        def __init__(self, num_patches, projection_dim):
            super().__init__()
            self.num_patches = num_patches
            self.projection = L.Dense(units=projection_dim)
            self.position_embedding = L.Embedding(input_dim=num_patches, output_dim=projection_dim)

        def call(self, patch):
            positions = tf.range(start=0, limit=self.num_patches, delta=1)
            return self.projection(patch) + self.position_embedding(positions)

    inputs = L.Input(shape=(8, 8, 3))
    encoded = PatchEncoder(16, 8)(Patches(2)(inputs))
    x1 = L.LayerNormalization(epsilon=1e-6)(encoded)
    mha = L.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.0)
    attention_output = mha(x1, x1)
    x2 = L.Add()([attention_output, encoded])
    x3 = L.LayerNormalization(epsilon=1e-6)(x2)
    x3 = L.Dense(8, activation=tf.nn.gelu)(L.Dense(16, activation=tf.nn.gelu)(x3))
    encoded = L.Add()([x3, x2])
    rep = L.Flatten()(L.LayerNormalization(epsilon=1e-6)(encoded))
    model = tf.keras.Model(inputs=inputs, outputs=L.Dense(3)(rep))
    keras_init(model, 2553)
    model.compile(optimizer=tf.keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.01),
                  loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1),
                  metrics=[tf.keras.metrics.CategoricalAccuracy(name="accuracy"),
                           tf.keras.metrics.TopKCategoricalAccuracy(2, name="top-2-accuracy")])
    h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    ev = model.evaluate(x, y, verbose=0, return_dict=True)
    return ({k: [float(v) for v in vals] for k, vals in sorted(h.history.items())},
            {k: float(v) for k, v in sorted(ev.items())},
            [np.array(w) for w in model.weights if w is not mha.weights[3]], mha.weights[3].shape[-1],
            [tuple(w.shape) for w in model.weights])


@parity(**KTOL)
def test_vit_data_augmentation_adapted_and_resized_at_inference(tf):
    """keras.io's ViT ``data_augmentation``: ``Normalization`` adapted on the training images (its
    mean and variance), ``Resizing`` (bicubic here, as the research code's pipelines use), and the
    random ``RandomFlip`` / ``RandomRotation`` / ``RandomZoom``, which are the identity in inference
    (``training=False``): the augmented batch, its gradient wrt the images through a loss, and
    ``CenterCrop`` + ``Rescaling`` of the resized images."""
    x = (np.random.RandomState(2561).rand(4, 8, 8, 3) * 255).astype(np.float32)
    L = tf.keras.layers
    norm = L.Normalization()
    aug = tf.keras.Sequential([norm, L.Resizing(12, 12, interpolation="bicubic"), L.RandomFlip("horizontal"),
                               L.RandomRotation(factor=0.02), L.RandomZoom(height_factor=0.2, width_factor=0.2)])
    norm.adapt(x)
    images = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(images)
        y = aug(images, training=False)
        loss = tf.reduce_mean(tf.square(y))
    crop = L.Rescaling(1.0 / 4)(L.CenterCrop(6, 6)(y))
    return np.asarray(norm.mean), np.asarray(norm.variance), y, loss, tape.gradient(loss, images), crop
