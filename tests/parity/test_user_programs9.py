"""Round nine of realistic user programs, each run under real TensorFlow 2.21 and under tapejax;
the programs built of tf ops (and the cheap Keras ones) also with deferred execution and
predicted updates off (``modes=True``), the heavier Keras programs in the default mode only (to
keep the file's time).  This round goes where the earlier ones did not: Keras layers called one
by one in custom loops (a user-written RNN cell stacked with an ``LSTMCell`` in
``keras.layers.RNN``; ``Masking`` and ``Embedding(mask_zero=True)`` whose masks must reach the
RNN called next, forward, backward and bidirectional; causal dilated ``Conv1D``;
``Conv2DTranspose`` / ``UpSampling2D`` / ``ZeroPadding2D`` / ``Cropping2D``; Group and Layer
normalization beside BatchNormalization in a subclassed model; ``Attention(score_mode='concat')``
and ``AdditiveAttention`` with masks; ``PReLU`` / ``LeakyReLU`` with global pooling; weight
constraints applied by the optimizer; adapted ``Normalization`` with ``Discretization`` and
``CategoryEncoding``), the Keras losses not used before with sample weights, polynomial (cycling)
and inverse-time schedules past their horizon, complex Variables under SGD and Adam, and models
built of tf.nn / tf.math pieces whose gradients have conventions to get right: transposed
convolutions asked for the odd output size, ``max_pool_with_argmax`` unpooling, ``depth_to_space``
over a bilinear resize, GIoU and maxout at ``maximum`` / ``minimum`` ties, a CRF by ``scan``, a
rotation by ``expm``, per-row ``clip_by_norm``, a von Mises likelihood by ``bessel_i0e``, a GCN
over a ``SparseTensor`` with learned edge weights, a ragged bag of words, a survival model by
``cumprod``, a Plackett-Luce loss by ``cumulative_logsumexp``, a learned Cholesky factor, and
trainable soft labels.  Keras weights are set from NumPy on both sides (tf_keras on TF's side,
Keras 3 on JAX on tapejax's, see ``test_keras.py``).
"""
import numpy as np

from .harness import init_array, keras_init, parity

TOL = dict(rtol=2e-5, atol=2e-6)
KTOL = dict(rtol=1e-4, atol=1e-5)


def _set(model, seed):
    model.set_weights([init_array(tuple(v.shape), seed + i) for i, v in enumerate(model.weights)])


# ---------------------------------------------------------------------------
# Recurrent Keras layers
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_custom_cell_stacked_with_an_lstm_cell_in_keras_rnn(tf):
    """A user-written minimal-RNN cell (``add_weight`` in ``build``, ``call(inputs, states)`` with
    ``tf.*`` ops) stacked with an ``LSTMCell`` by ``StackedRNNCells`` in ``keras.layers.RNN``
    (returning the sequence and the final states), trained by a tape over its variables."""

    class MinimalCell(tf.keras.layers.Layer):
        def __init__(self, units, **kw):
            super().__init__(**kw)
            self.units = units
            self.state_size = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), name="w")
            self.u = self.add_weight(shape=(self.units, self.units), name="u")

        def call(self, inputs, states):
            h = tf.tanh(tf.matmul(inputs, self.w) + tf.matmul(states[0], self.u))
            return h, [h]

    rs = np.random.RandomState(1)
    x = rs.randn(3, 4, 2).astype(np.float32)
    y = rs.randn(3, 4, 2).astype(np.float32)
    rnn = tf.keras.layers.RNN(tf.keras.layers.StackedRNNCells([MinimalCell(3), tf.keras.layers.LSTMCell(2)]),
                              return_sequences=True, return_state=True)
    rnn(x)
    _set(rnn, 10)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            seq, *states = rnn(x)
            states = tf.nest.flatten(states)
            loss = tf.reduce_mean((seq - y) ** 2) + 0.1 * tf.reduce_mean(states[0] ** 2)
        grads = tape.gradient(loss, rnn.trainable_variables)
        opt.apply_gradients(zip(grads, rnn.trainable_variables))
        out.append((loss, [s.shape.as_list() for s in states], grads))
    return out, [v.numpy() for v in rnn.trainable_variables]


@parity(**KTOL)
def test_bidirectional_lstm_tagger_on_masked_padded_tokens(tf):
    """A sequence tagger: ``Embedding(mask_zero=True)`` into ``Bidirectional(LSTM,
    return_sequences=True)`` and a per-token Dense; the loss is averaged over the real tokens only
    (padding masked by hand), so the backward direction must skip the padding as the forward one
    does.  Outputs at real tokens and gradients are compared."""
    ids = np.array([[3, 1, 4, 0, 0], [2, 5, 1, 5, 0], [1, 2, 0, 0, 0]], np.int32)
    tags = np.array([[0, 1, 0, 0, 0], [1, 1, 0, 1, 0], [0, 1, 0, 0, 0]], np.int32)
    mask = (ids > 0).astype(np.float32)
    emb = tf.keras.layers.Embedding(6, 3, mask_zero=True)
    bi = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(2, return_sequences=True))
    head = tf.keras.layers.Dense(2)
    head(bi(emb(ids)))
    for i, layer in enumerate((emb, bi, head)):
        _set(layer, 20 + 10 * i)
    params = emb.trainable_variables + bi.trainable_variables + head.trainable_variables
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            logits = head(bi(emb(ids)))
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tags, logits)
            loss = tf.reduce_sum(ce * mask) / tf.reduce_sum(mask)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        real = tf.boolean_mask(logits, mask > 0)
        out.append((loss, real, [tf.convert_to_tensor(g) for g in grads]))
    return out


@parity(**KTOL)
def test_masking_layer_into_backward_simple_rnn_with_its_final_state(tf):
    """``Masking(0.0)`` over zero-padded feature frames into ``SimpleRNN(go_backwards=True,
    return_state=True)``; the head reads the final state; the masked frames must not move it."""
    rs = np.random.RandomState(3)
    x = rs.randn(3, 5, 2).astype(np.float32)
    x[0, 3:] = 0.0
    x[2, 1:] = 0.0
    y = rs.randn(3, 1).astype(np.float32)
    masking = tf.keras.layers.Masking(0.0)
    rnn = tf.keras.layers.SimpleRNN(3, go_backwards=True, return_state=True)
    head = tf.keras.layers.Dense(1)
    head(rnn(masking(x))[1])
    _set(rnn, 40)
    _set(head, 50)
    params = rnn.trainable_variables + head.trainable_variables
    opt = tf.keras.optimizers.legacy.SGD(0.2, momentum=0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            seq_out, state = rnn(masking(x))
            loss = tf.reduce_mean((head(state) - y) ** 2)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        out.append((loss, seq_out, state, grads))
    return out


# ---------------------------------------------------------------------------
# Convolutional Keras layers
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_wavenet_block_of_causal_dilated_conv1d_in_a_compiled_step(tf):
    """A WaveNet-style block: causal ``Conv1D`` with dilation 1 then 2, a gated ``tanh * sigmoid``
    unit, a 1x1 residual conv; next-step prediction trained by a compiled Adam step; the causal
    output at step t must not depend on inputs after t (the gradient of step 3's output is zero
    after step 3)."""
    rs = np.random.RandomState(5)
    x = rs.randn(2, 8, 1).astype(np.float32)
    c1 = tf.keras.layers.Conv1D(4, 2, dilation_rate=1, padding="causal")
    c2 = tf.keras.layers.Conv1D(4, 2, dilation_rate=2, padding="causal")
    gate = tf.keras.layers.Conv1D(4, 2, dilation_rate=2, padding="causal")
    res = tf.keras.layers.Conv1D(1, 1)

    def net(inp):
        h = c1(inp)
        z = tf.tanh(c2(h)) * tf.sigmoid(gate(h))
        return inp + res(z)

    net(x)
    for i, layer in enumerate((c1, c2, gate, res)):
        _set(layer, 60 + 5 * i)
    params = [v for layer in (c1, c2, gate, res) for v in layer.trainable_variables]
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def step(xb):
        with tf.GradientTape() as tape:
            pred = net(xb)[:, :-1]
            loss = tf.reduce_mean((pred - xb[:, 1:]) ** 2)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return loss, grads

    out = [step(x) for _ in range(3)]
    xc = tf.constant(x[:1])
    with tf.GradientTape() as tape:
        tape.watch(xc)
        o = net(xc)[0, 3, 0]
    return out, tape.gradient(o, xc), [v.numpy() for v in params]


@parity(**KTOL)
def test_convolutional_autoencoder_with_transposed_conv_and_upsampling(tf):
    """A tiny image autoencoder: a strided ``Conv2D`` ('same') encoder, a ``Conv2DTranspose``
    (strides 2, 'same') decoder shifted by ``ZeroPadding2D`` then ``Cropping2D``, and an
    ``UpSampling2D`` skip path of the code; reconstruction loss, SGD with momentum."""
    x = np.random.RandomState(6).rand(2, 8, 8, 1).astype(np.float32)
    enc = tf.keras.layers.Conv2D(2, 3, strides=2, padding="same", activation="relu")
    dec = tf.keras.layers.Conv2DTranspose(1, 3, strides=2, padding="same")
    up = tf.keras.layers.UpSampling2D(2)
    pad = tf.keras.layers.ZeroPadding2D(((1, 0), (0, 1)))
    crop = tf.keras.layers.Cropping2D(((0, 1), (1, 0)))

    def net(inp):
        h = enc(inp)
        return crop(pad(dec(h))) + tf.reduce_mean(up(h), axis=-1, keepdims=True), h

    net(x)
    _set(enc, 70)
    _set(dec, 75)
    params = enc.trainable_variables + dec.trainable_variables
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            rec, h = net(x)
            loss = tf.reduce_mean((rec - x) ** 2)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        out.append((loss, h.shape.as_list(), rec, grads))
    return out


@parity(modes=True, **TOL)
def test_tf_nn_transposed_conv_with_an_explicit_odd_output_shape(tf):
    """``tf.nn.conv2d_transpose`` and ``conv1d_transpose`` asked for the odd one of the two output
    sizes a stride-2 'SAME' transpose allows (7, not 8), the ``conv2d`` 'SAME' stride 2 forward
    it inverts (TF pads one more at the end), and a learned upsampler trained on that size."""
    rs = np.random.RandomState(7)
    lo = rs.randn(1, 4, 4, 2).astype(np.float32)
    hi = rs.randn(1, 7, 7, 1).astype(np.float32)
    seq = rs.randn(2, 4, 2).astype(np.float32)
    k = tf.Variable(init_array((3, 3, 1, 2), 8))
    k1 = tf.Variable(init_array((3, 1, 2), 9))
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            up = tf.nn.conv2d_transpose(lo, k, output_shape=[1, 7, 7, 1], strides=2, padding="SAME")
            loss = tf.reduce_mean((up - hi) ** 2)
            down = tf.nn.conv2d(up, k, strides=2, padding="SAME")
            up1 = tf.nn.conv1d_transpose(seq, k1, output_shape=[2, 7, 1], strides=2, padding="SAME")
            l1 = tf.reduce_sum(tf.sin(up1))
        g, gd, g1 = tape.gradient(loss, k), tape.gradient(down, k), tape.gradient(l1, k1)
        opt.apply_gradients([(g, k), (g1, k1)])
        out.append((loss, up, down, g, gd, up1, g1))
    return out


# (rtol 5e-4: GroupNormalization's statistics over two small groups, then two SGD steps; on an
# AVX-512 machine TF's oneDNN convolution and XLA's round differently enough to leave one
# gradient element 1.2e-4 apart, where other machines agree within 1e-4)
@parity(rtol=5e-4, atol=1e-5)
def test_normalization_zoo_in_a_subclassed_model_train_then_infer(tf):
    """A subclassed model of Conv2D, ``GroupNormalization`` (2 groups), ``LayerNormalization`` over
    two axes, pooling and ``BatchNormalization`` (momentum 0.5) on the pooled features; two tape
    steps with ``training=True`` (moving statistics updated), then ``training=False`` outputs.
    (BatchNormalization sits on 2-D features: tf_keras' fused kernel for 4-D inputs keeps an
    unbiased moving variance, Keras 3 a biased one, a definitional difference.)"""

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.conv = tf.keras.layers.Conv2D(4, 2, padding="same")
            self.gn = tf.keras.layers.GroupNormalization(groups=2)
            self.ln = tf.keras.layers.LayerNormalization(axis=[1, 2])
            self.bn = tf.keras.layers.BatchNormalization(momentum=0.5)
            self.head = tf.keras.layers.Dense(1)

        def call(self, inp, training=False):
            h = self.ln(tf.nn.relu(self.gn(self.conv(inp))))
            return self.head(self.bn(tf.reduce_mean(h, axis=[1, 2]), training=training))

    rs = np.random.RandomState(11)
    x = rs.randn(4, 3, 3, 2).astype(np.float32)
    y = rs.randn(4, 1).astype(np.float32)
    model = Net()
    model(x)
    keras_init(model, seed=12)
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append((loss, grads, model.bn.moving_mean.numpy(), model.bn.moving_variance.numpy()))
    out.append(model(x, training=False))
    return out


# ---------------------------------------------------------------------------
# Attention, pooling and activations
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_concat_and_additive_attention_layers_with_masks(tf):
    """``Attention(score_mode='concat', use_scale=True)`` and ``AdditiveAttention`` over a padded
    value sequence (value mask) returning their scores; a classifier on the pooled context
    trained two steps; scores at masked keys are zero."""
    rs = np.random.RandomState(13)
    q = rs.randn(2, 2, 3).astype(np.float32)
    v = rs.randn(2, 4, 3).astype(np.float32)
    vmask = np.array([[True, True, True, False], [True, True, False, False]])
    y = np.array([0, 1], np.int32)
    att = tf.keras.layers.Attention(use_scale=True, score_mode="concat")
    add = tf.keras.layers.AdditiveAttention()
    head = tf.keras.layers.Dense(2)
    c1 = att([q, v], mask=[None, vmask])
    c2 = add([q, v], mask=[None, vmask])
    head(tf.concat([c1, c2], -1))
    for layer, s in ((att, 1.5), (add, 0.7)):
        layer.set_weights([np.full(tuple(w.shape), s, np.float32) for w in layer.weights])
    _set(head, 80)
    params = att.trainable_variables + add.trainable_variables + head.trainable_variables
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            c1, s1 = att([q, v], mask=[None, vmask], return_attention_scores=True)
            c2, s2 = add([q, v], mask=[None, vmask], return_attention_scores=True)
            logits = head(tf.reduce_mean(tf.concat([c1, c2], -1), axis=1))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        out.append((loss, s1, s2, grads))
    return out


@parity(**KTOL)
def test_point_set_classifier_with_prelu_and_global_pooling(tf):
    """A DeepSets classifier: a shared ``Dense`` + ``PReLU`` (per-channel slopes) and
    ``LeakyReLU`` over each point, ``GlobalMaxPooling1D`` and ``GlobalAveragePooling1D`` readouts
    concatenated; a point duplicated in a set ties the max."""
    rs = np.random.RandomState(14)
    x = rs.randn(3, 5, 2).astype(np.float32)
    x[1, 4] = x[1, 2]
    y = np.array([0, 1, 1], np.int32)
    dense = tf.keras.layers.Dense(4)
    prelu = tf.keras.layers.PReLU(shared_axes=[1])
    leaky = tf.keras.layers.LeakyReLU(0.3)
    gmax, gavg = tf.keras.layers.GlobalMaxPooling1D(), tf.keras.layers.GlobalAveragePooling1D()
    head = tf.keras.layers.Dense(2)

    def net(inp):
        h = prelu(dense(inp))
        h2 = leaky(h)
        return head(tf.concat([gmax(h), gavg(h2)], -1))

    net(x)
    _set(dense, 90)
    prelu.set_weights([np.array([[0.1, -0.2, 0.3, 0.25]], np.float32)])
    _set(head, 95)
    params = dense.trainable_variables + prelu.trainable_variables + head.trainable_variables
    opt = tf.keras.optimizers.legacy.SGD(0.3)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, net(x)))
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        out.append((loss, grads))
    return out


# ---------------------------------------------------------------------------
# Constraints, schedules and optimizers on odd dtypes
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_keras_layer_constraints_applied_after_each_optimizer_step(tf):
    """``Dense(kernel_constraint=MaxNorm(0.6), bias_constraint=NonNeg())`` and an ``Embedding``
    with ``UnitNorm`` rows, trained by the Keras Adam in a custom loop: after each step the
    kernel's columns have norm at most 0.6, the bias is non-negative, looked-up rows unit norm."""
    ids = np.array([[0, 2], [1, 3], [2, 2]], np.int32)
    y = np.array([[1.0], [-1.0], [0.5]], np.float32)
    emb = tf.keras.layers.Embedding(4, 3, embeddings_constraint=tf.keras.constraints.UnitNorm(axis=1))
    dense = tf.keras.layers.Dense(1, kernel_constraint=tf.keras.constraints.MaxNorm(0.6),
                                  bias_constraint=tf.keras.constraints.NonNeg())
    dense(tf.reduce_mean(emb(ids), axis=1))
    _set(emb, 100)
    dense.set_weights([init_array((3, 1), 101, scale=1.0), np.array([0.05], np.float32)])
    params = emb.trainable_variables + dense.trainable_variables
    opt = tf.keras.optimizers.Adam(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((dense(tf.reduce_mean(emb(ids), axis=1)) - y) ** 2)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        out.append((loss, [v.numpy() for v in params]))
    return out


@parity(modes=True, **TOL)
def test_complex_filter_fitted_by_momentum_sgd_and_adam_on_complex_variables(tf):
    """System identification: a complex FIR filter (complex64 Variable) fitted to a complex
    signal by ``|y - h * x|^2``; the legacy SGD with momentum steps along TF's (conjugate)
    gradient convention, so the loss falls; the legacy Adam on a second copy follows TF's complex
    moments (``g * g``, not ``|g|^2``)."""
    rs = np.random.RandomState(15)
    xs = (rs.randn(6, 3) + 1j * rs.randn(6, 3)).astype(np.complex64)
    h_true = np.array([1 - 0.5j, 0.3j, -0.2 + 0.1j], np.complex64)
    ys = xs @ h_true
    h, h2 = tf.Variable(np.zeros(3, np.complex64)), tf.Variable(np.full(3, 0.1 + 0.1j, np.complex64))
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.5)
    opt2 = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            losses = []
            for v in (h, h2):
                r = ys - tf.linalg.matvec(tf.constant(xs), v)
                losses.append(tf.reduce_mean(tf.math.real(r * tf.math.conj(r))))
        g, g2 = tape.gradient(losses, [h, h2])
        opt.apply_gradients([(g, h)])
        opt2.apply_gradients([(g2, h2)])
        out.append((losses, g, g2))
    return out, h, h2


# ---------------------------------------------------------------------------
# Likelihoods, special functions and sparse / ragged inputs
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_von_mises_likelihood_with_bessel_i0e_learns_mean_and_concentration(tf):
    """Circular data fitted by a von Mises likelihood: ``log I0(k)`` as ``log(bessel_i0e(k)) + k``
    with ``k = softplus(raw)``; the mean direction parametrised by ``atan2`` of two Variables;
    Adam learns both."""
    angles = np.array([0.3, 0.5, 0.1, 0.7, 0.4, 0.2], np.float32)
    a = tf.Variable(1.0)
    b = tf.Variable(0.2)
    raw = tf.Variable(0.5)
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            mu = tf.math.atan2(b, a)
            k = tf.nn.softplus(raw)
            log_i0 = tf.math.log(tf.math.bessel_i0e(k)) + k
            nll = tf.reduce_mean(-k * tf.cos(angles - mu) + log_i0 + np.log(2 * np.pi))
        grads = tape.gradient(nll, [a, b, raw])
        opt.apply_gradients(zip(grads, [a, b, raw]))
        out.append((nll, mu, k, grads))
    return out


@parity(modes=True, **TOL)
def test_gcn_with_learned_edge_weights_through_sparse_dense_matmul(tf):
    """A graph convolution ``A_w @ X @ W`` whose sparse adjacency has learned edge weights
    (``SparseTensor`` values from a Variable through ``softplus``): gradients reach both the
    weight matrix and the edge Variable."""
    indices = np.array([[0, 1], [1, 0], [1, 2], [2, 1], [2, 3], [3, 0]], np.int64)
    feats = np.random.RandomState(16).randn(4, 3).astype(np.float32)
    target = np.array([[1.0], [0.0], [-1.0], [0.5]], np.float32)
    edge = tf.Variable(np.linspace(-0.5, 0.5, 6).astype(np.float32))
    w = tf.Variable(init_array((3, 1), 17))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            adj = tf.sparse.SparseTensor(indices, tf.nn.softplus(edge), [4, 4])
            h = tf.sparse.sparse_dense_matmul(adj, tf.matmul(feats, w))
            loss = tf.reduce_mean((h - target) ** 2)
        grads = tape.gradient(loss, [edge, w])
        opt.apply_gradients(zip(grads, [edge, w]))
        out.append((loss, grads))
    return out


@parity(**TOL)
def test_ragged_bag_of_words_mean_embedding_with_adagrad(tf):
    """Variable-length documents as a ``RaggedTensor`` of token ids: the embedding table gathered
    ragged, averaged over each document, a logistic head; the table's gradient (repeated ids
    across and within documents) fed to the legacy Adagrad."""
    docs = tf.ragged.constant([[1, 2, 2], [0], [3, 1, 4, 1]])
    labels = np.array([1.0, 0.0, 1.0], np.float32)
    table = tf.Variable(init_array((5, 2), 18))
    w = tf.Variable(init_array((2,), 19))
    opt = tf.keras.optimizers.legacy.Adagrad(0.3)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            vecs = tf.reduce_mean(tf.gather(table, docs), axis=1)
            logits = tf.linalg.matvec(vecs, w)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))
        g_table, g_w = tape.gradient(loss, [table, w])
        opt.apply_gradients([(g_table, table), (g_w, w)])
        out.append((loss, tf.convert_to_tensor(g_table), g_w))
    return out, table, w


@parity(**TOL)
def test_discrete_time_survival_model_by_exclusive_cumprod(tf):
    """A discrete-time survival model: per-interval hazards ``sigmoid(x @ w + b_t)``, survival
    to interval t by ``cumprod(1 - h, exclusive=True)``, the likelihood of an event at t or of
    censoring after it; Adam on the weights and the per-interval baselines."""
    rs = np.random.RandomState(21)
    x = rs.randn(5, 2).astype(np.float32)
    t_obs = np.array([0, 2, 3, 1, 3], np.int32)
    event = np.array([1.0, 1.0, 0.0, 1.0, 1.0], np.float32)
    w = tf.Variable(init_array((2, 1), 22))
    base = tf.Variable(np.linspace(-1.0, 0.5, 4).astype(np.float32))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    onehot = np.eye(4, dtype=np.float32)[t_obs]
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.sigmoid(tf.matmul(x, w) + base)
            surv = tf.math.cumprod(1.0 - h, axis=1, exclusive=True)
            h_t = tf.reduce_sum(h * onehot, 1)
            s_t = tf.reduce_sum(surv * onehot, 1)
            ll = event * tf.math.log(h_t * s_t) + (1 - event) * tf.math.log(s_t * (1 - h_t))
            loss = -tf.reduce_mean(ll)
        grads = tape.gradient(loss, [w, base])
        opt.apply_gradients(zip(grads, [w, base]))
        out.append((loss, surv, grads))
    return out


# ---------------------------------------------------------------------------
# Keras losses, preprocessing layers and schedules
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_keras_loss_zoo_gradients_with_sample_weights(tf):
    """The Keras losses the earlier rounds did not use, each called on a prediction Variable with
    per-example ``sample_weight``: LogCosh, Poisson, KLDivergence, CosineSimilarity,
    SquaredHinge, CategoricalHinge and BinaryFocalCrossentropy from logits; values and
    gradients, then one SGD step on the sum."""
    rs = np.random.RandomState(30)
    y_pos = rs.rand(4, 3).astype(np.float32) + 0.1
    y_sign = np.sign(rs.randn(4, 3)).astype(np.float32)
    y_bin = (rs.rand(4, 3) > 0.5).astype(np.float32)
    y_onehot = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    sw = np.array([1.0, 0.5, 2.0, 0.0], np.float32)
    p = tf.Variable(rs.rand(4, 3).astype(np.float32) + 0.2)
    k = tf.keras.losses
    cases = [(k.LogCosh(), y_pos), (k.Poisson(), y_pos), (k.KLDivergence(), y_onehot + 0.1),
             (k.CosineSimilarity(axis=-1), y_sign), (k.SquaredHinge(), y_bin), (k.CategoricalHinge(), y_onehot),
             (k.BinaryFocalCrossentropy(gamma=2.0, from_logits=True), y_bin)]
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            losses = [fn(y, p, sample_weight=sw) for fn, y in cases]
            total = tf.add_n(losses)
        out.append((losses, [tape.gradient(v, p) for v in losses]))
        opt.apply_gradients([(tape.gradient(total, p), p)])
    return out, p


@parity(**KTOL)
def test_adapted_normalization_and_bucketised_one_hot_features_feed_a_regressor(tf):
    """Tabular preprocessing: ``Normalization`` adapted on the training columns, a third column
    bucketised by ``Discretization(bin_boundaries=...)`` and one-hot encoded by
    ``CategoryEncoding``; the concatenated features feed a Dense regressor trained eagerly."""
    rs = np.random.RandomState(31)
    num = (rs.randn(8, 2) * np.array([3.0, 0.5]) + np.array([10.0, -1.0])).astype(np.float32)
    age = np.array([[5.0], [17.0], [30.0], [45.0], [61.0], [12.0], [70.0], [29.0]], np.float32)
    y = rs.randn(8, 1).astype(np.float32)
    norm = tf.keras.layers.Normalization()
    norm.adapt(num)
    disc = tf.keras.layers.Discretization(bin_boundaries=[18.0, 30.0, 60.0])
    onehot = tf.keras.layers.CategoryEncoding(num_tokens=4, output_mode="one_hot")
    dense = tf.keras.layers.Dense(1)

    def features(a, b):
        return tf.concat([norm(a), tf.cast(onehot(tf.reshape(disc(b), [-1])), tf.float32)], axis=1)

    feats = features(num, age)
    dense(feats)
    _set(dense, 32)
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = [tf.convert_to_tensor(norm.mean), tf.convert_to_tensor(norm.variance), feats]
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((dense(features(num, age)) - y) ** 2)
        grads = tape.gradient(loss, dense.trainable_variables)
        opt.apply_gradients(zip(grads, dense.trainable_variables))
        out.append((loss, grads))
    return out


@parity(modes=True, **TOL)
def test_polynomial_cycle_and_inverse_time_staircase_schedules_past_their_horizon(tf):
    """``PolynomialDecay(cycle=True, power=0.5)`` run past ``decay_steps`` (the horizon restarts at
    the next multiple) drives the legacy centered RMSprop; ``InverseTimeDecay(staircase=True)``
    drives the legacy Adagrad; the schedules' values at each step and both trajectories."""
    x, y = np.random.RandomState(33).randn(6, 2).astype(np.float32), np.ones((6, 1), np.float32)
    s = tf.keras.optimizers.schedules
    poly = s.PolynomialDecay(0.1, decay_steps=2, end_learning_rate=0.01, power=0.5, cycle=True)
    inv = s.InverseTimeDecay(0.2, decay_steps=2, decay_rate=0.5, staircase=True)
    w1, w2 = tf.Variable(init_array((2, 1), 34)), tf.Variable(init_array((2, 1), 35))
    o1 = tf.keras.optimizers.legacy.RMSprop(poly, centered=True, momentum=0.3)
    o2 = tf.keras.optimizers.legacy.Adagrad(inv)
    out = []
    for step in range(6):
        with tf.GradientTape() as tape:
            l1 = tf.reduce_mean((tf.matmul(x, w1) - y) ** 2)
            l2 = tf.reduce_mean(tf.abs(tf.matmul(x, w2) - y))
        g1, g2 = tape.gradient([l1, l2], [w1, w2])
        o1.apply_gradients([(g1, w1)])
        o2.apply_gradients([(g2, w2)])
        out.append((poly(step), inv(step), l1, l2))
    return out, w1, w2


# ---------------------------------------------------------------------------
# tf.nn and tf.math in models
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_segnet_unpooling_by_max_pool_argmax_and_scatter_nd(tf):
    """SegNet-style decoding: ``max_pool_with_argmax`` (indices including the batch) remembers
    where each max came from, ``scatter_nd`` puts the pooled (then convolved) values back there;
    the reconstruction loss's gradient reaches the filter and the input through both paths."""
    rs = np.random.RandomState(36)
    img = rs.randn(2, 4, 4, 1).astype(np.float32)
    target = rs.randn(2, 4, 4, 1).astype(np.float32)
    k = tf.Variable(init_array((1, 1, 1, 1), 37) + 1.0)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        x = tf.constant(img)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            pooled, argmax = tf.nn.max_pool_with_argmax(x, 2, 2, "VALID", include_batch_in_index=True)
            feat = tf.nn.conv2d(pooled, k, 1, "SAME")
            flat = tf.scatter_nd(tf.reshape(argmax, [-1, 1]), tf.reshape(feat, [-1]), [2 * 4 * 4 * 1])
            rec = tf.reshape(flat, [2, 4, 4, 1])
            loss = tf.reduce_mean((rec - target) ** 2)
        gk, gx = tape.gradient(loss, k), tape.gradient(loss, x)
        opt.apply_gradients([(gk, k)])
        out.append((loss, tf.cast(argmax, tf.int32), rec, gk, gx))
    return out


@parity(modes=True, **TOL)
def test_sub_pixel_super_resolution_by_depth_to_space_over_a_bilinear_base(tf):
    """ESPCN-style super-resolution: a conv predicts 4 sub-pixel channels, ``depth_to_space(2)``
    rearranges them into a 2x image added to a bilinear ``tf.image.resize`` of the input; the
    L1 loss's gradients reach the filter and the low-resolution image."""
    rs = np.random.RandomState(38)
    lo = rs.rand(1, 3, 3, 1).astype(np.float32)
    hi = rs.rand(1, 6, 6, 1).astype(np.float32)
    k = tf.Variable(init_array((3, 3, 1, 4), 39))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        x = tf.constant(lo)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            base = tf.image.resize(x, [6, 6], method="bilinear")
            sr = base + tf.nn.depth_to_space(tf.nn.conv2d(x, k, 1, "SAME"), 2)
            loss = tf.reduce_mean(tf.abs(sr - hi))
        gk, gx = tape.gradient(loss, k), tape.gradient(loss, x)
        opt.apply_gradients([(gk, k)])
        out.append((loss, sr, gk, gx))
    return out


@parity(modes=True, **TOL)
def test_giou_box_regression_starting_from_boxes_that_share_edges(tf):
    """Box regression by the generalised IoU loss: predicted boxes decoded from anchors by
    ``exp`` of size offsets, intersection and enclosure by ``tf.maximum`` / ``tf.minimum``; the
    first step starts at the anchors, some of whose edges coincide with the ground truth (TF's
    tie rule for max/min sends the whole gradient to the first argument)."""
    anchors = np.array([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 4.0], [0.0, 1.0, 2.0, 2.0]], np.float32)
    gt = np.array([[0.0, 0.5, 2.0, 2.5], [1.0, 1.0, 3.5, 4.0], [0.5, 1.0, 2.0, 3.0]], np.float32)
    offsets = tf.Variable(np.zeros((3, 4), np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            cx = (anchors[:, 0] + anchors[:, 2]) / 2 + offsets[:, 0]
            cy = (anchors[:, 1] + anchors[:, 3]) / 2 + offsets[:, 1]
            w = (anchors[:, 2] - anchors[:, 0]) * tf.exp(offsets[:, 2])
            h = (anchors[:, 3] - anchors[:, 1]) * tf.exp(offsets[:, 3])
            x1, y1, x2, y2 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
            iw = tf.maximum(tf.minimum(x2, gt[:, 2]) - tf.maximum(x1, gt[:, 0]), 0.0)
            ih = tf.maximum(tf.minimum(y2, gt[:, 3]) - tf.maximum(y1, gt[:, 1]), 0.0)
            inter = iw * ih
            union = w * h + (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1]) - inter
            enclose = ((tf.maximum(x2, gt[:, 2]) - tf.minimum(x1, gt[:, 0]))
                       * (tf.maximum(y2, gt[:, 3]) - tf.minimum(y1, gt[:, 1])))
            giou = inter / union - (enclose - union) / enclose
            loss = tf.reduce_mean(1.0 - giou)
        g = tape.gradient(loss, offsets)
        opt.apply_gradients([(g, offsets)])
        out.append((loss, giou, g))
    return out, offsets


@parity(modes=True, **TOL)
def test_maxout_units_by_tf_maximum_from_a_tied_initialisation(tf):
    """A maxout layer ``maximum(x @ w1 + b1, x @ w2 + b2)`` whose two pieces start equal (both
    copied from one initialiser, a common bug): at the tie TF sends the whole gradient to the
    first piece, so the pieces separate after one step; ``reduce_max`` over stacked pieces splits
    it instead.  Both versions trained side by side."""
    x, y = np.random.RandomState(40).randn(6, 2).astype(np.float32), np.ones((6, 1), np.float32)
    w0 = init_array((2, 3), 41)
    a = [tf.Variable(w0), tf.Variable(np.zeros(3, np.float32)), tf.Variable(w0), tf.Variable(np.zeros(3, np.float32))]
    b = [tf.Variable(w0), tf.Variable(w0)]
    head = tf.Variable(init_array((3, 1), 42))
    opt = tf.keras.optimizers.legacy.SGD(0.2)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h1 = tf.maximum(tf.matmul(x, a[0]) + a[1], tf.matmul(x, a[2]) + a[3])
            h2 = tf.reduce_max(tf.stack([tf.matmul(x, b[0]), tf.matmul(x, b[1])]), axis=0)
            loss = tf.reduce_mean((tf.matmul(h1, head) - y) ** 2) + tf.reduce_mean((tf.matmul(h2, head) - y) ** 2)
        grads = tape.gradient(loss, a + b + [head])
        opt.apply_gradients(zip(grads, a + b + [head]))
        out.append((loss, grads))
    return out


@parity(modes=True, **TOL)
def test_linear_chain_crf_negative_log_likelihood_by_scan(tf):
    """A linear-chain CRF tagger: emissions from a linear layer, the log partition function by the
    forward algorithm (``tf.scan`` with ``reduce_logsumexp``), the gold path's score by
    ``gather_nd``; the NLL trains the emission weights and the transition matrix with Adam."""
    rs = np.random.RandomState(43)
    x = rs.randn(5, 3).astype(np.float32)
    tags = np.array([0, 2, 1, 1, 0], np.int32)
    w = tf.Variable(init_array((3, 3), 44))
    trans = tf.Variable(init_array((3, 3), 45))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            em = tf.matmul(x, w)

            def forward(alpha, e):
                return tf.reduce_logsumexp(alpha[:, None] + trans, axis=0) + e

            alphas = tf.scan(forward, em[1:], initializer=em[0])
            log_z = tf.reduce_logsumexp(alphas[-1])
            gold = (tf.reduce_sum(tf.gather_nd(em, np.stack([np.arange(5), tags], 1)))
                    + tf.reduce_sum(tf.gather_nd(trans, np.stack([tags[:-1], tags[1:]], 1))))
            nll = log_z - gold
        grads = tape.gradient(nll, [w, trans])
        opt.apply_gradients(zip(grads, [w, trans]))
        out.append((nll, alphas, grads))
    return out


@parity(**TOL)
def test_rotation_fitted_through_expm_of_a_skew_symmetric_matrix(tf):
    """Point-cloud alignment on SO(3): the rotation is ``expm(A - A^T)`` of a free Variable;
    the squared alignment error's gradient goes through ``tf.linalg.expm``; Adam steps."""
    rs = np.random.RandomState(46)
    pts = rs.randn(6, 3).astype(np.float32)
    true = np.array([[0.0, -0.4, 0.2], [0.4, 0.0, -0.1], [-0.2, 0.1, 0.0]], np.float32)
    from scipy.linalg import expm
    target = pts @ expm(true).T.astype(np.float32)
    a = tf.Variable(init_array((3, 3), 47, scale=0.1))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            rot = tf.linalg.expm(a - tf.transpose(a))
            loss = tf.reduce_mean((tf.matmul(pts, rot, transpose_b=True) - target) ** 2)
        g = tape.gradient(loss, a)
        opt.apply_gradients([(g, a)])
        out.append((loss, rot, g))
    return out


@parity(modes=True, **TOL)
def test_per_row_clip_by_norm_with_axes_then_momentum(tf):
    """Per-row gradient clipping: ``clip_by_norm(g, 0.05, axes=[1])`` bounds each row of a weight
    gradient separately, a bias gradient is ``clip_by_value``-d, then the legacy momentum SGD."""
    x, y = np.random.RandomState(48).randn(8, 3).astype(np.float32), np.ones((8, 2), np.float32)
    w = tf.Variable(init_array((3, 2), 49))
    b = tf.Variable([0.3, -0.2])
    opt = tf.keras.optimizers.legacy.SGD(0.5, momentum=0.9)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        cw = tf.clip_by_norm(gw, 0.05, axes=[1])
        cb = tf.clip_by_value(gb, -0.1, 0.1)
        opt.apply_gradients([(cw, w), (cb, b)])
        out.append((loss, gw, cw, cb))
    return out, w, b


@parity(modes=True, **TOL)
def test_listwise_plackett_luce_ranking_loss_by_reverse_cumulative_logsumexp(tf):
    """Learning to rank with the Plackett-Luce (ListMLE) loss: scores of each list gathered in the
    relevance order (``gather`` with ``batch_dims=1``), the log normaliser of each position by a
    reverse ``cumulative_logsumexp``; padding items masked by a large negative score."""
    rs = np.random.RandomState(50)
    feats = rs.randn(2, 4, 3).astype(np.float32)
    order = np.array([[2, 0, 3, 1], [1, 3, 0, 2]], np.int32)
    valid = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.float32)
    w = tf.Variable(init_array((3,), 51))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            scores = tf.linalg.matvec(feats, w)
            s = tf.gather(scores, order, batch_dims=1)
            m = tf.gather(valid, order, batch_dims=1)
            s = s * m - 1e4 * (1.0 - m)
            norm = tf.math.cumulative_logsumexp(s, axis=1, reverse=True)
            loss = tf.reduce_mean(tf.reduce_sum((norm - s) * m, axis=1))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        out.append((loss, norm, g))
    return out, w


@parity(**TOL)
def test_full_covariance_gaussian_with_a_learned_cholesky_factor(tf):
    """A full-covariance Gaussian fitted by maximum likelihood: the Cholesky factor is
    ``set_diag(band_part(M, -1, 0), softplus(diag_part(M)))``, the NLL uses
    ``triangular_solve`` and the log of the diagonal; Adam on the mean and ``M``."""
    rs = np.random.RandomState(52)
    data = (rs.randn(10, 3) @ np.array([[1.0, 0, 0], [0.5, 0.8, 0], [-0.3, 0.2, 0.6]])).astype(np.float32)
    mu = tf.Variable(np.zeros(3, np.float32))
    m = tf.Variable(init_array((3, 3), 53))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            chol = tf.linalg.set_diag(tf.linalg.band_part(m, -1, 0), tf.nn.softplus(tf.linalg.diag_part(m)))
            z = tf.linalg.triangular_solve(chol, tf.transpose(data - mu), lower=True)
            nll = (0.5 * tf.reduce_mean(tf.reduce_sum(z ** 2, axis=0))
                   + tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol))))
        grads = tape.gradient(nll, [mu, m])
        opt.apply_gradients(zip(grads, [mu, m]))
        out.append((nll, chol, grads))
    return out


@parity(modes=True, **TOL)
def test_weighted_sigmoid_cross_entropy_with_trainable_soft_labels(tf):
    """Label refinement: soft labels held in a Variable (through ``sigmoid``) are trained with the
    classifier; ``weighted_cross_entropy_with_logits`` (``pos_weight`` 3) and the plain
    ``sigmoid_cross_entropy_with_logits`` both give gradients to the labels and the logits."""
    rs = np.random.RandomState(54)
    x = rs.randn(6, 2).astype(np.float32)
    w = tf.Variable(init_array((2, 1), 55))
    raw = tf.Variable(rs.randn(6, 1).astype(np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.3)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            labels = tf.sigmoid(raw)
            l1 = tf.reduce_mean(tf.nn.weighted_cross_entropy_with_logits(labels, logits, pos_weight=3.0))
            l2 = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
            loss = l1 + l2 + 0.1 * tf.reduce_mean((labels - 0.5) ** 2)
        grads = tape.gradient(loss, [w, raw])
        opt.apply_gradients(zip(grads, [w, raw]))
        out.append((l1, l2, grads))
    return out
