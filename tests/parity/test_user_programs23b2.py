"""Round twenty-three (b) of realistic user programs, second half: the blocks of modern vision models
as keras.io's TF-era examples (MLP-Mixer, ConvMixer, CCT, token learning) and the research code
write them, run under real TensorFlow 2.21 and under tapejax.

Keras' ``MultiHeadAttention`` over a 2-D token grid (``attention_axes=(1, 2)``) with a mask and
its attention dropout (training against inference), a pre-norm transformer block with
``LayerNormalization`` and GELU (exact and tanh), MLP-Mixer's token mixing by transposes,
ConvMixer's depthwise convolutions with residuals and batch norm, a ConvNeXt block (7x7 depthwise,
channel LayerNorm, layer scale, drop path by a NumPy keep mask), keras.io's ``StochasticDepth``
layer with a seeded mask (compared by what does not depend on the draw: tapejax's random streams
differ from TF's by design), squeeze-and-excitation, CCT's convolutional tokenizer and sequence
pooling, TokenLearner, and keras.io's ``LayerScale`` beside a window-attention layer that keeps its
index and mask in ``tf.Variable`` attributes, under ``fit``.  The training recipes are in
``test_user_programs23b3.py``.
"""
import numpy as np

from .harness import init_array, keras_init, parity
from .test_user_programs10a import _comparable_weights, _set_fused_moving_variances
from .test_user_programs23b import _window_partition

LOOSE = dict(rtol=1e-4, atol=1e-5)
KTOL = dict(rtol=2e-4, atol=2e-5)


def _set(layer, seed):
    layer.set_weights([init_array(tuple(v.shape), seed + i) for i, v in enumerate(layer.weights)])


def _images(seed, n=2, hw=8, c=3):
    return np.random.RandomState(seed).rand(n, hw, hw, c).astype(np.float32)


def _onehot(seed, n=2, k=3):
    return np.eye(k, dtype=np.float32)[np.random.RandomState(seed).randint(0, k, n)]


# ---------------------------------------------------------------------------
# Keras attention over token grids
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_multi_head_attention_over_a_2d_token_grid_with_attention_axes_and_a_mask(tf):
    """``MultiHeadAttention(num_heads=2, key_dim=2, attention_axes=(1, 2))`` on a (2, 2, 3, 4) grid
    of tokens, attending over both spatial axes at once, with an ``attention_mask`` of shape
    ``[B, 2, 3, 2, 3]`` hiding one key position, ``return_attention_scores=True``: the scores
    (zero at the hidden key), the outputs and the gradients wrt the grid and every kernel."""
    rs = np.random.RandomState(2401)
    grid = tf.Variable(rs.randn(2, 2, 3, 4).astype(np.float32))
    mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=2, attention_axes=(1, 2))
    mha(grid, grid)
    _set(mha, 2402)
    keys = np.ones((2, 2, 3), bool)
    keys[1, 1, 2] = False
    mask = np.broadcast_to(keys[:, None, None], (2, 2, 3, 2, 3))
    with tf.GradientTape() as tape:
        out, scores = mha(grid, grid, attention_mask=mask, return_attention_scores=True)
        loss = tf.reduce_sum(tf.tanh(out))
    g = tape.gradient(loss, [grid] + mha.trainable_variables)
    return out, scores, loss, g, [tuple(v.shape) for v in mha.trainable_variables]


@parity(**KTOL)
def test_attention_dropout_in_training_against_inference(tf):
    """``MultiHeadAttention(dropout=0.5)``: the returned scores are taken before the dropout, so they
    are the same in training and inference; inference output equals a ``dropout=0`` twin with the
    same weights; the training output differs from it (the draw itself is not compared: the
    random streams differ by design); ``training=False`` twice gives the same output."""
    tf.random.set_seed(2411)
    x = np.random.RandomState(2412).randn(2, 5, 4).astype(np.float32)
    drop = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.5)
    plain = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    drop(x, x)
    plain(x, x)
    _set(drop, 2413)
    _set(plain, 2413)
    o_train, s_train = drop(x, x, return_attention_scores=True, training=True)
    o_inf, s_inf = drop(x, x, return_attention_scores=True, training=False)
    o_inf2 = drop(x, x, training=False)
    o_plain = plain(x, x, training=True)
    return (s_inf, tf.reduce_max(tf.abs(s_train - s_inf)) < 1e-6, o_inf, o_plain,
            tf.reduce_max(tf.abs(o_inf - o_inf2)) == 0.0, tf.reduce_max(tf.abs(o_train - o_inf)) > 1e-3)


# ---------------------------------------------------------------------------
# Transformer, Mixer and convolutional blocks
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_pre_norm_transformer_block_with_layer_norm_and_gelu_exact_and_tanh(tf):
    """keras.io's ViT block as a ``Layer`` subclass: ``x + MHA(LN(x))`` then ``x + MLP(LN(x))`` whose
    hidden ``Dense`` uses ``tf.nn.gelu`` (exact) in one block and ``gelu(approximate=True)`` in the
    other; the two GELUs differ slightly and the program logs by how much.  Three compiled SGD
    steps: losses, gradients of every weight, the weights after.  (Not Adam: the key projection's
    bias gets a gradient of round-off only, softmax being shift-invariant, which Adam's ``m /
    sqrt(v)`` turns into steps of full size in both libraries, differently.)"""
    rs = np.random.RandomState(2421)
    x = rs.randn(2, 5, 8).astype(np.float32)
    y = rs.randn(2, 5, 8).astype(np.float32)

    class Block(tf.keras.layers.Layer):
        def __init__(self, approximate):
            super().__init__()
            self.ln1 = tf.keras.layers.LayerNormalization(epsilon=1e-6)
            self.att = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
            self.ln2 = tf.keras.layers.LayerNormalization(epsilon=1e-6)
            self.fc1 = tf.keras.layers.Dense(16, activation=lambda u: tf.nn.gelu(u, approximate=approximate))
            self.fc2 = tf.keras.layers.Dense(8)

        def call(self, x):
            h = self.ln1(x)
            x = x + self.att(h, h)
            return x + self.fc2(self.fc1(self.ln2(x)))

    blocks = [Block(False), Block(True)]
    for i, b in enumerate(blocks):
        b(x)
        _set(b, 2422 + 20 * i)
    ws = blocks[0].trainable_variables + blocks[1].trainable_variables
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = blocks[1](blocks[0](x))
            loss = tf.reduce_mean(tf.square(h - y))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g

    u = tf.constant(np.linspace(-4, 4, 9, dtype=np.float32))
    gelu_gap = tf.reduce_max(tf.abs(tf.nn.gelu(u) - tf.nn.gelu(u, approximate=True)))
    out = [step(x, y) for _ in range(3)]
    return out, ws, gelu_gap, tf.keras.activations.gelu(u)


@parity(**LOOSE)
def test_mlp_mixer_token_and_channel_mixing_by_transposes(tf):
    """MLP-Mixer as keras.io writes it: patches ``(B, 16, 8)``, a token-mixing MLP applied to the
    transposed tokens ``(B, 8, 16)`` and transposed back, a channel-mixing MLP, each after a
    LayerNorm and with a residual; global average pooling over tokens and a head.  Two eager and
    two compiled SGD-momentum steps: losses, gradients, Variables."""
    rs = np.random.RandomState(2431)
    tokens = rs.randn(2, 16, 8).astype(np.float32)
    y = np.array([0, 2], np.int32)
    names = [("t1", (16, 8)), ("t2", (8, 16)), ("c1", (8, 12)), ("c2", (12, 8)), ("head", (8, 3))]
    ws = {n: tf.Variable(init_array(s, 2432 + i), name=n) for i, (n, s) in enumerate(names)}
    ln = {n: (tf.Variable(np.ones(8, np.float32)), tf.Variable(np.zeros(8, np.float32))) for n in ("a", "b")}
    params = list(ws.values()) + [v for pair in ln.values() for v in pair]
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    def norm(x, key):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) / tf.sqrt(var + 1e-6) * ln[key][0] + ln[key][1]

    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.transpose(norm(x, "a"), [0, 2, 1])
            h = tf.matmul(tf.nn.gelu(tf.matmul(h, ws["t1"])), ws["t2"])
            x = x + tf.transpose(h, [0, 2, 1])
            x = x + tf.matmul(tf.nn.gelu(tf.matmul(norm(x, "b"), ws["c1"])), ws["c2"])
            logits = tf.matmul(tf.reduce_mean(x, axis=1), ws["head"])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, g

    compiled = tf.function(step)
    out = [(compiled if k >= 2 else step)(tokens, y) for k in range(4)]
    return out, params


@parity(**KTOL)
def test_convmixer_depthwise_conv_residual_and_batch_norm_in_a_tape_loop(tf):
    """keras.io's ConvMixer: a patch stem ``Conv2D(8, 2, strides=2)`` + GELU + BatchNorm, then a
    block ``x + BN(gelu(DepthwiseConv2D(3, padding="same")(x)))`` and a pointwise ``Conv2D(8, 1)``
    + GELU + BN, global average pooling and a softmax head, trained by a tape loop (two eager
    steps, one compiled) with Adam; the weights after (the moving variances but those of the
    batch norms on 4-D inputs, where tf_keras' fused kernel keeps an unbiased variance and Keras 3
    a biased one: ``test_user_programs10a.py``), inference outputs with those set equal."""
    images = _images(2441, n=4)
    y = _onehot(2442, n=4)
    L = tf.keras.layers
    inputs = L.Input((8, 8, 3))
    x = L.BatchNormalization()(L.Activation("gelu")(L.Conv2D(8, 2, strides=2)(inputs)))
    x0 = x
    x = L.BatchNormalization()(L.Activation("gelu")(L.DepthwiseConv2D(3, padding="same")(x)))
    x = L.Add()([x, x0])
    x = L.BatchNormalization()(L.Activation("gelu")(L.Conv2D(8, 1)(x)))
    outputs = L.Dense(3, activation="softmax")(L.GlobalAvgPool2D()(x))
    model = tf.keras.Model(inputs, outputs)
    keras_init(model, 2443)
    loss_fn = tf.keras.losses.CategoricalCrossentropy()
    opt = tf.keras.optimizers.Adam(0.01)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, g

    compiled = tf.function(step)
    out = [(compiled if k == 2 else step)(images, y) for k in range(3)]
    weights = _comparable_weights(tf, model)
    _set_fused_moving_variances(tf, model, 2444)
    return out, weights, model(images, training=False)


@parity(modes=True, **LOOSE)
def test_convnext_block_depthwise_7x7_channel_layer_norm_layer_scale_and_drop_path(tf):
    """A ConvNeXt block by hand: ``tf.nn.depthwise_conv2d`` with a 7x7 kernel (``SAME`` on an 8x8
    map), LayerNorm over channels, pointwise ``4C`` MLP with GELU, a layer-scale Variable
    ``gamma`` (init 0.1) and drop path with a per-sample keep mask given from NumPy (kept samples
    scaled by ``1 / keep_prob``, dropped ones pass only the residual: their block gradients are
    zeros).  Adam with an eager and a compiled step."""
    rs = np.random.RandomState(2451)
    x = rs.randn(3, 8, 8, 4).astype(np.float32)
    target = rs.randn(3, 8, 8, 4).astype(np.float32)
    dw = tf.Variable(init_array((7, 7, 4, 1), 2452, 0.2))
    ln_g, ln_b = tf.Variable(np.ones(4, np.float32)), tf.Variable(np.zeros(4, np.float32))
    pw1, pw2 = tf.Variable(init_array((4, 16), 2453)), tf.Variable(init_array((16, 4), 2454))
    gamma = tf.Variable(np.full(4, 0.1, np.float32))
    ws = [dw, ln_g, ln_b, pw1, pw2, gamma]
    keep_prob = 0.75
    masks = [np.array([1, 0, 1], np.float32), np.array([0, 1, 1], np.float32)]
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def step(x, keep):
        with tf.GradientTape() as tape:
            h = tf.nn.depthwise_conv2d(x, dw, strides=[1, 1, 1, 1], padding="SAME")
            mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
            h = (h - mean) / tf.sqrt(var + 1e-6) * ln_g + ln_b
            h = tf.matmul(tf.nn.gelu(tf.matmul(h, pw1)), pw2) * gamma
            h = h / keep_prob * tf.reshape(keep, [-1, 1, 1, 1])
            y = x + h
            loss = tf.reduce_mean(tf.square(y - target))
        g = tape.gradient(loss, ws + [x])
        opt.apply_gradients(zip(g[:-1], ws))
        return loss, g[:-1], g[-1] is None

    out = [step(tf.constant(x), masks[0]), tf.function(step)(tf.constant(x), masks[1])]
    return out, ws


@parity(modes=True, **LOOSE)
def test_keras_io_stochastic_depth_layer_with_a_seeded_keep_mask(tf):
    """keras.io's (CCT) ``StochasticDepth`` layer: ``floor(keep_prob + uniform(shape))`` with
    ``shape = (tf.shape(x)[0],) + (1,) * (len(tf.shape(x)) - 1)``, ``x / keep_prob * mask`` in
    training and identity in inference.  Under ``tf.random.set_seed`` the draws differ between TF
    and tapejax by design, so the program compares what holds for any draw: each sample is all
    zeros or all ``x / keep_prob``, the gradient equals ``mask / keep_prob`` per sample, between
    20 and 44 of 64 samples are kept, inference is the identity; in a compiled residual step
    ``x + drop_path(2x)`` the same holds per call (the gradient's mask is the forward's) and two
    calls draw different masks."""
    tf.random.set_seed(2461)

    class StochasticDepth(tf.keras.layers.Layer):
        def __init__(self, drop_prop, **kwargs):
            super().__init__(**kwargs)
            self.drop_prob = drop_prop

        def call(self, x, training=None):
            if training:
                keep_prob = 1 - self.drop_prob
                shape = (tf.shape(x)[0],) + (1,) * (len(tf.shape(x)) - 1)
                random_tensor = keep_prob + tf.random.uniform(shape, 0, 1)
                random_tensor = tf.floor(random_tensor)
                return (x / keep_prob) * random_tensor
            return x

    x = tf.constant(np.random.RandomState(2462).rand(64, 3, 2).astype(np.float32) + 0.5)
    layer = StochasticDepth(0.5)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    g = tape.gradient(y, x)
    kept = tf.reduce_all(tf.abs(y - x / 0.5) < 1e-5, axis=[1, 2])
    dropped = tf.reduce_all(y == 0.0, axis=[1, 2])
    n_kept = tf.reduce_sum(tf.cast(kept, tf.int32))
    g_ok = tf.reduce_all(tf.where(kept[:, None, None], tf.abs(g - 2.0) < 1e-6, g == 0.0))

    @tf.function
    def residual(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x + layer(2.0 * x, training=True)
        g = tape.gradient(y, x)
        kept = tf.reduce_all(tf.abs(y - 5.0 * x) < 1e-4, axis=[1, 2])
        consistent = tf.reduce_all(tf.where(kept[:, None, None], tf.abs(g - 5.0) < 1e-5, g == 1.0))
        return kept, consistent, tf.reduce_all(kept | tf.reduce_all(y == x, axis=[1, 2]))

    (k1, c1, a1), (k2, c2, a2) = residual(x), residual(x)
    return (tf.reduce_all(kept != dropped), (n_kept >= 20) & (n_kept <= 44), g_ok,
            tf.reduce_all(layer(x, training=False) == x), layer(x) is x or bool(tf.reduce_all(layer(x) == x)),
            c1 & c2 & a1 & a2, tf.reduce_any(k1 != k2))


@parity(**KTOL)
def test_squeeze_and_excitation_by_keras_layers_and_by_hand(tf):
    """Squeeze-and-excitation as the research code writes it: ``GlobalAveragePooling2D`` ->
    ``Reshape((1, 1, C))`` -> ``Dense(C // r, relu)`` -> ``Dense(C, sigmoid)`` -> ``Multiply`` with the
    input, inside a functional model after a ``Conv2D``; the same by hand (``reduce_mean`` with
    ``keepdims`` and the layers' kernels) gives the same outputs; gradients of the model's weights
    and of the input image, a compiled SGD step."""
    images = _images(2471)
    y = np.random.RandomState(2472).randn(2, 1).astype(np.float32)
    L = tf.keras.layers
    inputs = L.Input((8, 8, 3))
    feat = L.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    s = L.Reshape((1, 1, 8))(L.GlobalAveragePooling2D()(feat))
    s = L.Dense(2, activation="relu")(s)
    s = L.Dense(8, activation="sigmoid")(s)
    scaled = L.Multiply()([feat, s])
    model = tf.keras.Model(inputs, [L.Dense(1)(L.GlobalAveragePooling2D()(scaled)), scaled, feat])
    keras_init(model, 2473)
    k1, b1, k2, b2 = [w for layer in model.layers if isinstance(layer, L.Dense) for w in layer.weights][:4]
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            pred, _, _ = model(x)
            loss = tf.reduce_mean(tf.square(pred - y))
        g = tape.gradient(loss, model.trainable_variables + [x])
        opt.apply_gradients(zip(g[:-1], model.trainable_variables))
        return loss, g

    _, scaled0, feat0 = model(images)
    squeeze = tf.reduce_mean(feat0, axis=[1, 2], keepdims=True)
    excite = tf.sigmoid(tf.matmul(tf.nn.relu(tf.matmul(squeeze, k1) + b1), k2) + b2)
    by_hand = feat0 * excite
    out = step(tf.constant(images), y)
    return scaled0, tf.reduce_max(tf.abs(by_hand - scaled0)) < 1e-5, out, [np.array(w) for w in model.weights]


# ---------------------------------------------------------------------------
# Convolutional tokenizers and token pooling: CCT, TokenLearner
# ---------------------------------------------------------------------------

@parity(**LOOSE)
def test_cct_conv_tokenizer_and_sequence_pooling(tf):
    """keras.io's Compact Convolutional Transformer: a tokenizer ``conv2d`` + ReLU + ``max_pool2d``
    (3x3, stride 2, SAME) reshaped to a sequence, then sequence pooling instead of a class token:
    ``softmax(Dense(1)(x), axis=1)``, ``tf.matmul(weights, x, transpose_a=True)`` squeezed, a head
    and ``CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)``.  Three steps (the last
    two compiled): the pooling weights, losses, gradients, Variables."""
    images, y = _images(2481), _onehot(2482)
    conv = tf.Variable(init_array((3, 3, 3, 8), 2483, 0.3))
    att = tf.Variable(init_array((8, 1), 2484))
    head = tf.Variable(init_array((8, 3), 2485))
    ws = [conv, att, head]
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, conv, 1, "SAME"))
            h = tf.nn.max_pool2d(h, 3, 2, "SAME")
            seq = tf.reshape(h, [-1, h.shape[1] * h.shape[2], 8])
            weights = tf.nn.softmax(tf.matmul(seq, att), axis=1)
            pooled = tf.squeeze(tf.matmul(weights, seq, transpose_a=True), -2)
            loss = loss_fn(y, tf.matmul(pooled, head))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, weights

    compiled = tf.function(step)
    return [(compiled if k else step)(images, y) for k in range(3)], ws


@parity(**LOOSE)
def test_token_learner_spatial_attention_maps_and_einsum_pooling(tf):
    """keras.io's TokenLearner: a LayerNorm of the feature map, a small conv stack to ``S = 3``
    attention maps, ``sigmoid``, reshaped to ``(B, S, HW)`` by transposes, and the learned tokens
    ``einsum("...si,...id->...sd", maps, features)``; a loss on the tokens, gradients of the convs,
    the LayerNorm and the input map, two Adam steps (one compiled)."""
    rs = np.random.RandomState(2491)
    fmap = tf.constant(rs.randn(2, 4, 4, 4).astype(np.float32))
    target = rs.randn(2, 3, 4).astype(np.float32)
    c1 = tf.Variable(init_array((3, 3, 4, 4), 2492, 0.3))
    c2 = tf.Variable(init_array((3, 3, 4, 3), 2493, 0.3))
    g_, b_ = tf.Variable(np.ones(4, np.float32)), tf.Variable(np.zeros(4, np.float32))
    ws = [c1, c2, g_, b_]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def step(fmap):
        with tf.GradientTape() as tape:
            tape.watch(fmap)
            mean, var = tf.nn.moments(fmap, axes=[-1], keepdims=True)
            x = (fmap - mean) * tf.math.rsqrt(var + 1e-6) * g_ + b_
            a = tf.nn.gelu(tf.nn.conv2d(x, c1, 1, "SAME"))
            a = tf.sigmoid(tf.nn.conv2d(a, c2, 1, "SAME"))
            maps = tf.transpose(tf.reshape(a, [-1, 16, 3]), [0, 2, 1])
            feats = tf.reshape(x, [-1, 16, 4])
            tokens = tf.einsum("...si,...id->...sd", maps, feats)
            loss = tf.reduce_mean(tf.square(tokens - target))
        g = tape.gradient(loss, ws + [fmap])
        opt.apply_gradients(zip(g[:-1], ws))
        return loss, g, maps

    return [step(fmap), tf.function(step)(fmap)], ws


@parity(**KTOL)
def test_keras_io_layer_scale_and_window_attention_layers_under_fit(tf):
    """Two layers as keras.io's ConvNeXt and Swin examples write them, in a functional model under
    ``compile("sgd")`` / ``fit``: ``LayerScale`` (``add_weight`` of a constant ``init_values * ones``)
    after ``DepthwiseConv2D(7, padding="same")`` + ``LayerNormalization`` + pointwise ``Dense`` layers
    with GELU, and a window attention over 2x2 windows whose ``build`` keeps its relative position
    index and a mask in ``tf.Variable(..., trainable=False)`` attributes beside an ``add_weight``
    bias table read by ``tf.gather``.  Two epochs of two batches: the history, ``evaluate``, the
    trainable weights after, and the non-trainable ones (both Kerases track the ``tf.Variable``
    attributes as weights) unchanged."""
    rs = np.random.RandomState(2501)
    x = rs.randn(4, 4, 4, 4).astype(np.float32)
    y = rs.randn(4, 1).astype(np.float32)
    L = tf.keras.layers

    class LayerScale(L.Layer):
        def __init__(self, init_values, projection_dim, **kwargs):
            super().__init__(**kwargs)
            self.init_values = init_values
            self.projection_dim = projection_dim

        def build(self, input_shape):
            self.gamma = self.add_weight(shape=(self.projection_dim,),
                                         initializer=tf.keras.initializers.Constant(self.init_values))

        def call(self, x):
            return x * self.gamma

    class WindowAttention(L.Layer):
        def __init__(self, dim, heads, **kwargs):
            super().__init__(**kwargs)
            self.dim, self.heads = dim, heads
            self.qkv = L.Dense(3 * dim, use_bias=False)
            self.proj = L.Dense(dim)

        def build(self, input_shape):
            self.relative_position_bias_table = self.add_weight(shape=(9, self.heads), initializer="zeros",
                                                                trainable=True)
            coords = np.stack(np.meshgrid(np.arange(2), np.arange(2), indexing="ij")).reshape(2, -1)
            rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + 1
            index = (rel[..., 0] * 3 + rel[..., 1]).astype(np.int32)
            self.relative_position_index = tf.Variable(initial_value=tf.convert_to_tensor(index), trainable=False)
            mask = np.zeros((4, 4), np.float32)
            mask[:2, 2:] = mask[2:, :2] = -100.0
            self.attn_mask = tf.Variable(initial_value=tf.convert_to_tensor(mask), trainable=False)

        def call(self, x):
            n, c = x.shape[1], self.dim
            qkv = tf.transpose(tf.reshape(self.qkv(x), [-1, n, 3, self.heads, c // self.heads]), [2, 0, 3, 1, 4])
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = tf.matmul(q * (c // self.heads) ** -0.5, k, transpose_b=True)
            bias = tf.gather(self.relative_position_bias_table, tf.reshape(self.relative_position_index, [-1]))
            attn = attn + tf.transpose(tf.reshape(bias, [n, n, -1]), [2, 0, 1]) + self.attn_mask
            out = tf.matmul(tf.nn.softmax(attn, axis=-1), v)
            return self.proj(tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [-1, n, c]))

    class Windows(L.Layer):
        def call(self, x):
            return _window_partition(tf, x, 2)

    class Merge(L.Layer):
        def call(self, windows):
            return tf.reshape(windows, [-1, 16, 4])

    inputs = L.Input((4, 4, 4))
    h = L.DepthwiseConv2D(7, padding="same")(inputs)
    h = L.LayerNormalization(epsilon=1e-6)(h)
    h = L.Dense(8, activation="gelu")(h)
    h = LayerScale(0.1, 4)(L.Dense(4)(h))
    h = L.Add()([inputs, h])
    windows = Windows()(h)
    windows = L.Add()([windows, WindowAttention(4, 2)(windows)])
    pooled = L.GlobalAveragePooling1D()(Merge()(windows))
    model = tf.keras.Model(inputs, L.Dense(1)(pooled))
    rsw = np.random.RandomState(2502)
    for w in model.trainable_weights:
        w.assign((rsw.randn(*w.shape) * 0.3).astype(np.float32))
    fixed = sorted((tuple(w.shape), np.array(w).tolist()) for w in model.non_trainable_weights)
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    hist = model.fit(x, y, batch_size=2, epochs=2, shuffle=False, verbose=0)
    ev = model.evaluate(x, y, verbose=0, return_dict=True)
    return ({k: [float(v) for v in vals] for k, vals in sorted(hist.history.items())},
            {k: float(v) for k, v in sorted(ev.items())}, [np.array(w) for w in model.trainable_weights],
            fixed == sorted((tuple(w.shape), np.array(w).tolist()) for w in model.non_trainable_weights),
            len(fixed))
