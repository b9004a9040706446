"""Round twenty-one (b) of realistic user programs, first half: time-series forecasting and
recurrent training loops written from raw TF ops, as TF's time-series tutorial and research code
write them, run under real TensorFlow 2.21 and under tapejax with deferred execution and predicted
updates on and off (``modes=True``).

The tutorial's ``WindowGenerator`` (``split_window`` by ``tf.stack`` of slices and ``set_shape``),
its last-value and repeat baselines, a linear and a multi-step dense model behind a residual
wrapper, normalisation by the training split's mean and std and MAE; hand-written LSTM cells
(``tf.matmul`` + ``tf.split`` gates) unrolled in Python with clipping by global norm, a GRU cell
unrolled by ``tf.scan`` (gradients through the carried state, eager and compiled), a
``tf.while_loop`` decoder writing a ``TensorArray`` trained by teacher forcing and run free, a
stateful RNN trained by truncated BPTT with its state in a Variable carried between chunks, and
masking by hand (``tf.sequence_mask`` + ``tf.where`` keeping the state at padding, the backward
direction by ``tf.reverse_sequence``), a backward LSTM by ``tf.scan(reverse=True)`` with an
``(h, c)`` carry compiled for unknown sizes, and ``clip_by_global_norm`` over a None gradient.  The audio, CTC and video programs are in
``test_user_programs21b2.py``, the Keras-layer ones in ``test_user_programs21b3.py``.  Every
number is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-5, atol=2e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)


def _series(seed, t=40, f=3):
    """A multivariate series: two sines of different periods plus noise, and a random walk."""
    rs = np.random.RandomState(seed)
    k = np.arange(t, dtype=np.float64)
    cols = [np.sin(2 * np.pi * k / 12), np.cos(2 * np.pi * k / 7), np.cumsum(rs.randn(t)) * 0.3][:f]
    return (np.stack(cols, -1) + 0.1 * rs.randn(t, f)).astype(np.float32)


def _split_window(tf, features, input_width, label_width, shift, label_columns):
    """The tutorial's ``WindowGenerator.split_window``: inputs and labels sliced from one window."""
    total = input_width + shift
    label_start = total - label_width
    inputs = features[:, slice(0, input_width), :]
    labels = features[:, slice(label_start, None), :]
    labels = tf.stack([labels[:, :, c] for c in label_columns], axis=-1)
    inputs.set_shape([None, input_width, None])
    labels.set_shape([None, label_width, None])
    return inputs, labels


def _windows(data, total, stride=1):
    return np.stack([data[i:i + total] for i in range(0, len(data) - total + 1, stride)])


# ---------------------------------------------------------------------------
# The time-series tutorial
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_window_generator_baselines_and_a_linear_model_on_normalised_data(tf):
    """Train/val split, normalised by the training split's mean and std (``tf.math.reduce_std``);
    windows of 6 inputs and 1 label (column 0) by ``split_window`` over ``tf.stack``ed slices; the
    last-value baseline's MSE and MAE, a linear model (``tf.einsum`` over the features) trained by
    Adam on batches of windows (compiled step), its per-step losses, gradients, weights and MAE on
    the validation windows."""
    raw = _series(3001, t=36)
    train, val = raw[:26], raw[26:]
    mean, std = tf.reduce_mean(train, axis=0), tf.math.reduce_std(train, axis=0)
    train_n, val_n = (train - mean) / std, (val - mean) / std
    tw = tf.constant(_windows(train_n.numpy(), 7))
    vw = tf.constant(_windows(val_n.numpy(), 7))
    x, y = _split_window(tf, tw, 6, 1, 1, [0])
    vx, vy = _split_window(tf, vw, 6, 1, 1, [0])
    baseline = x[:, -1:, 0:1]
    base_mse = tf.reduce_mean(tf.square(baseline - y))
    base_mae = tf.reduce_mean(tf.abs(baseline - y))
    w = tf.Variable(init_array((3, 1), 3002))
    b = tf.Variable(tf.zeros([1]))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def model(x):
        return tf.einsum("btf,fo->bto", x[:, -1:, :], w) + b

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        g = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(g, [w, b]))
        return loss, g

    out = []
    for epoch in range(2):
        for i in range(0, 20, 8):
            out.append(step(x[i:i + 8], y[i:i + 8]))
    val_mae = tf.reduce_mean(tf.abs(model(vx) - vy))
    return (mean, std, x.shape.as_list(), y.shape.as_list(), base_mse, base_mae, out, w, b, val_mae,
            vx.shape.as_list())


@parity(modes=True, **LOOSE)
def test_multi_step_dense_and_residual_wrapper_with_repeat_baseline(tf):
    """Multi-step forecasting: 8 inputs, 4 labels of every feature; the repeat baseline (the last
    input repeated by ``tf.tile``), a multi-step dense model (flatten, dense, reshape to
    ``[batch, 4, features]`` as the tutorial's ``Reshape([OUT_STEPS, num_features])``) and the
    tutorial's ``ResidualWrapper`` (the model predicts the change from the last input; its output
    layer starts at zeros); two SGD steps each, the metrics per label step."""
    raw = _series(3011, t=30)
    mean, std = raw[:20].mean(0), raw[:20].std(0)
    data = tf.constant((raw - mean) / std)
    win = tf.stack([data[i:i + 12] for i in range(0, 18, 2)])
    x, y = _split_window(tf, win, 8, 4, 4, [0, 1, 2])
    repeat = tf.tile(x[:, -1:, :], [1, 4, 1])
    w1 = tf.Variable(init_array((8 * 3, 6), 3012))
    w2 = tf.Variable(init_array((6, 4 * 3), 3013))
    r1 = tf.Variable(init_array((8 * 3, 6), 3014))
    r2 = tf.Variable(tf.zeros([6, 4 * 3]))
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def dense(x, a, c):
        flat = tf.reshape(x, [-1, 8 * 3])
        return tf.reshape(tf.matmul(tf.nn.relu(tf.matmul(flat, a)), c), [-1, 4, 3])

    def residual(x):
        return x[:, -1:, :] + dense(x, r1, r2)

    out = [tf.reduce_mean(tf.abs(repeat - y), axis=[0, 2])]
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            l1 = tf.reduce_mean(tf.square(dense(x, w1, w2) - y))
            l2 = tf.reduce_mean(tf.square(residual(x) - y))
        g1, g2 = tape.gradient(l1, [w1, w2]), tape.gradient(l2, [r1, r2])
        none = tape.gradient(l2, [w1, w2])
        opt.apply_gradients(zip(g1 + g2, [w1, w2, r1, r2]))
        out.append((l1, l2, g1, g2, none))
    maes = [tf.reduce_mean(tf.abs(m - y), axis=[0, 2]) for m in (dense(x, w1, w2), residual(x))]
    return out, maes, [w1, w2, r1, r2]


# ---------------------------------------------------------------------------
# Hand-written recurrent cells
# ---------------------------------------------------------------------------

def _lstm_vars(tf, d, h, seed):
    return [tf.Variable(init_array((d, 4 * h), seed)), tf.Variable(init_array((h, 4 * h), seed + 1)),
            tf.Variable(np.concatenate([np.zeros(h), np.ones(h), np.zeros(2 * h)]).astype(np.float32))]


def _lstm_step(tf, ws, x, h, c):
    z = tf.matmul(x, ws[0]) + tf.matmul(h, ws[1]) + ws[2]
    i, f, g, o = tf.split(z, 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
    return tf.sigmoid(o) * tf.tanh(c), c


@parity(modes=True, **LOOSE)
def test_lstm_cell_by_matmul_and_split_unrolled_in_python_with_global_norm_clipping(tf):
    """A forecasting LSTM from raw ops: gates by one ``tf.matmul`` and ``tf.split`` (forget bias 1),
    unrolled over 6 steps in a Python loop, a dense head on the last ``h``; gradients clipped by
    ``tf.clip_by_global_norm`` at a norm the first step exceeds (the returned global norm is the
    unclipped one), Adam, three steps (the last compiled); the gradient of a head that does not
    use the cell state at the last step still reaches the state weights through earlier steps."""
    raw = _series(3021, t=26, f=2)
    win = tf.constant(_windows(raw, 7, stride=3))
    x, y = win[:, :6, :], win[:, 6, :1]
    ws = _lstm_vars(tf, 2, 4, 3022)
    head = tf.Variable(init_array((4, 1), 3024, scale=2.0))
    params = ws + [head]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def step(x, y):
        with tf.GradientTape() as tape:
            h = c = tf.zeros([tf.shape(x)[0], 4])
            for t in range(6):
                h, c = _lstm_step(tf, ws, x[:, t, :], h, c)
            loss = tf.reduce_mean(tf.square(tf.matmul(h, head) - y)) * 10.0
        g = tape.gradient(loss, params)
        clipped, norm = tf.clip_by_global_norm(g, 0.5)
        opt.apply_gradients(zip(clipped, params))
        return loss, norm, g, clipped, tf.linalg.global_norm(clipped)

    compiled = tf.function(step)
    out = [step(x, y), step(x, y), compiled(x, y)]
    return out, params


@parity(modes=True, **LOOSE)
def test_gru_cell_unrolled_by_scan_with_gradients_through_the_carried_state(tf):
    """A GRU cell (reset gate applied before the recurrent matmul, Keras' ``reset_after=False``) run
    by ``tf.scan`` over a time-major batch; the loss reads every step's output and the final state,
    and the gradient w.r.t. the initial state (a watched tensor) and the inputs comes back, eager
    and compiled; one SGD step between them."""
    rs = np.random.RandomState(3031)
    xs = tf.constant(rs.randn(5, 3, 2).astype(np.float32))
    h0 = tf.constant(rs.randn(3, 4).astype(np.float32) * 0.3)
    wz, wr, wh = (tf.Variable(init_array((2 + 4, 4), 3032 + k)) for k in range(3))
    bias = tf.Variable(tf.zeros([3, 4]))
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    def cell(h, x):
        hx = tf.concat([x, h], -1)
        z = tf.sigmoid(tf.matmul(hx, wz) + bias[0])
        r = tf.sigmoid(tf.matmul(hx, wr) + bias[1])
        cand = tf.tanh(tf.matmul(tf.concat([x, r * h], -1), wh) + bias[2])
        return z * h + (1.0 - z) * cand

    def step(xs, h0):
        with tf.GradientTape() as tape:
            tape.watch([xs, h0])
            hs = tf.scan(cell, xs, initializer=h0)
            loss = tf.reduce_mean(tf.square(hs)) + tf.reduce_sum(hs[-1] * 0.5)
        params = [wz, wr, wh, bias]
        g = tape.gradient(loss, params + [xs, h0])
        opt.apply_gradients(zip(g[:4], params))
        return hs, loss, g

    compiled = tf.function(step)
    return step(xs, h0), compiled(xs, h0), step(xs, h0), [wz, wr, wh, bias]


@parity(modes=True, **LOOSE)
def test_while_loop_decoder_trained_by_teacher_forcing_and_run_free(tf):
    """A seq2seq forecaster's decoder: an RNN cell run by ``tf.while_loop`` writing a
    ``TensorArray``, fed the true previous value (teacher forcing) while training and its own
    previous prediction at inference (free running: the predictions ``stack``ed and
    ``transpose``d to batch-major; ``maximum_iterations`` bounds the loop, as tapejax needs in a
    compiled step: README); compiled training step with its gradients, the free-running
    forecast's error before and after three steps, and the gradient of a free-running loss (it
    flows through the fed-back predictions)."""
    raw = _series(3041, t=24, f=1)
    win = tf.constant(_windows(raw, 9, stride=3))
    ctx, target = win[:, :4, :], win[:, 4:, :]
    wx = tf.Variable(init_array((1, 5), 3042))
    wh = tf.Variable(init_array((5, 5), 3043, scale=0.3))
    wo = tf.Variable(init_array((5, 1), 3044))
    opt = tf.keras.optimizers.legacy.Adam(0.03)
    params = [wx, wh, wo]

    def cell(x, h):
        h = tf.tanh(tf.matmul(x, wx) + tf.matmul(h, wh))
        return h, tf.matmul(h, wo)

    def encode(ctx):
        h = tf.zeros([tf.shape(ctx)[0], 5])
        for t in range(4):
            h, _ = cell(ctx[:, t, :], h)
        return h

    def decode(ctx, target, teacher):
        h, prev = encode(ctx), ctx[:, -1, :]
        ta = tf.TensorArray(tf.float32, size=5)

        def body(t, h, prev, ta):
            h, y = cell(prev, h)
            nxt = target[:, t, :] if teacher else y
            return t + 1, h, nxt, ta.write(t, y)

        _, _, _, ta = tf.while_loop(lambda t, *_: t < 5, body, (tf.constant(0), h, prev, ta),
                                    maximum_iterations=5)
        return tf.transpose(ta.stack(), [1, 0, 2])

    @tf.function
    def train(ctx, target):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(decode(ctx, target, True) - target))
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, g

    free0 = decode(ctx, target, False)
    out = [train(ctx, target) for _ in range(3)]
    with tf.GradientTape() as tape:
        free = decode(ctx, target, False)
        free_loss = tf.reduce_mean(tf.abs(free - target))
    return free0, out, free, free_loss, tape.gradient(free_loss, params), params


@parity(modes=True, **LOOSE)
def test_truncated_bptt_with_the_state_carried_between_chunks_in_a_variable(tf):
    """A stateful RNN trained by truncated backpropagation: a long series cut into chunks of 4
    steps, the hidden state kept in a non-trainable Variable, read at the start of each chunk
    (its gradient is None: the Variable is not trained) and ``assign``ed the chunk's last state
    after the step; a second model carries it by ``tf.stop_gradient`` of a Python variable
    instead; both compiled, the state reset between epochs."""
    raw = _series(3051, t=33, f=1)[:, 0]
    xs, ys = raw[:-1].reshape(2, 16, 1), raw[1:].reshape(2, 16, 1)
    w = tf.Variable(init_array((1 + 3, 3), 3052))
    wo = tf.Variable(init_array((3, 1), 3053))
    w2 = tf.Variable(w)
    wo2 = tf.Variable(wo)
    state = tf.Variable(tf.zeros([2, 3]), trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    opt2 = tf.keras.optimizers.legacy.SGD(0.1)

    def run(x, h, w, wo):
        preds = []
        for t in range(4):
            h = tf.tanh(tf.matmul(tf.concat([x[:, t, :], h], -1), w))
            preds.append(tf.matmul(h, wo))
        return tf.stack(preds, 1), h

    @tf.function
    def chunk_step(x, y):
        with tf.GradientTape() as tape:
            pred, h = run(x, state, w, wo)
            loss = tf.reduce_mean(tf.square(pred - y))
        g = tape.gradient(loss, [w, wo, state])
        opt.apply_gradients(zip(g[:2], [w, wo]))
        state.assign(h)
        return loss, g[0], g[2] is None

    @tf.function
    def chunk_step2(x, y, h0):
        with tf.GradientTape() as tape:
            pred, h = run(x, tf.stop_gradient(h0), w2, wo2)
            loss = tf.reduce_mean(tf.square(pred - y))
        g = tape.gradient(loss, [w2, wo2])
        opt2.apply_gradients(zip(g, [w2, wo2]))
        return loss, h

    out = []
    for epoch in range(2):
        state.assign(tf.zeros([2, 3]))
        h = tf.zeros([2, 3])
        for k in range(0, 16, 4):
            x, y = tf.constant(xs[:, k:k + 4]), tf.constant(ys[:, k:k + 4])
            r1 = chunk_step(x, y)
            l2, h = chunk_step2(x, y, h)
            out.append((r1, l2, tf.identity(state), h))
    return out, w, wo, w2, wo2


@parity(modes=True, **LOOSE)
def test_masking_by_hand_keeps_the_state_at_padding_and_a_reversed_direction(tf):
    """Variable-length sensor sequences padded with zeros: a tanh RNN whose update is
    ``tf.where(mask_t, new_h, h)`` (the state frozen after each row's end, outputs zeroed there),
    the backward direction by ``tf.reverse_sequence`` on the real lengths (the padding stays at
    the end), both finals concatenated into a classifier trained two steps; the gradient at the
    padded inputs is zero, and the per-row losses weighted by the mask."""
    rs = np.random.RandomState(3061)
    lengths = np.array([5, 2, 4, 1], np.int32)
    x_np = rs.randn(4, 5, 2).astype(np.float32) * (np.arange(5)[None, :, None] < lengths[:, None, None])
    x = tf.constant(x_np)
    labels = tf.constant([0, 1, 1, 0])
    wf, wb = tf.Variable(init_array((2 + 3, 3), 3062)), tf.Variable(init_array((2 + 3, 3), 3063))
    wc = tf.Variable(init_array((6, 2), 3064))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    mask = tf.sequence_mask(lengths, 5)

    def rnn(x, w):
        h, outs = tf.zeros([4, 3]), []
        for t in range(5):
            new = tf.tanh(tf.matmul(tf.concat([x[:, t], h], -1), w))
            m = mask[:, t:t + 1]
            h = tf.where(m, new, h)
            outs.append(tf.where(m, new, tf.zeros_like(new)))
        return tf.stack(outs, 1), h

    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(x)
            seq_f, hf = rnn(x, wf)
            rev = tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)
            seq_b, hb = rnn(rev, wb)
            logits = tf.matmul(tf.concat([hf, hb], -1), wc)
            per = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            seq_pen = tf.reduce_sum(tf.square(seq_f) * tf.cast(mask, tf.float32)[..., None]) * 0.01
            loss = tf.reduce_mean(per) + seq_pen
        g = tape.gradient(loss, [wf, wb, wc, x])
        opt.apply_gradients(zip(g[:3], [wf, wb, wc]))
        out.append((loss, per, seq_f, seq_b, hf, hb, g, tf.reduce_all(tf.equal(tf.boolean_mask(
            g[3], tf.logical_not(mask)), 0.0))))
    return out, wf, wb, wc


@parity(modes=True, **LOOSE)
def test_lstm_by_reverse_scan_with_a_tuple_carry_and_per_step_losses(tf):
    """A backward LSTM by ``tf.scan(..., reverse=True)`` whose carry is the ``(h, c)`` tuple: the outputs
    come back in input order (the scan runs from the end), per-step losses are weighted by a
    ``sequence_mask``, and the gradient reaches the weights, the inputs and the initial ``c`` (a
    watched tensor); compiled with an ``input_signature`` of unknown batch and time, and eagerly."""
    rs = np.random.RandomState(3071)
    xs = tf.constant(rs.randn(6, 2, 3).astype(np.float32))   # time-major
    c0 = tf.constant(rs.randn(2, 4).astype(np.float32) * 0.2)
    ws = _lstm_vars(tf, 3, 4, 3072)
    weights = tf.constant(np.arange(1, 7, dtype=np.float32)[:, None] / 6.0)

    def run(xs, c0):
        with tf.GradientTape() as tape:
            tape.watch([xs, c0])

            def step(carry, x):
                h, c = carry
                return _lstm_step(tf, ws, x, h, c)

            hs, cs = tf.scan(step, xs, initializer=(tf.zeros_like(c0), c0), reverse=True)
            mask = tf.transpose(tf.sequence_mask([6, 4], 6))
            per_step = tf.reduce_sum(tf.square(hs), -1) * tf.cast(mask, tf.float32) * weights
            loss = tf.reduce_sum(per_step) + tf.reduce_sum(cs[0])
        return hs, cs[0], per_step, tape.gradient(loss, ws + [xs, c0])

    spec = tf.TensorSpec([None, None, 3], tf.float32)
    compiled = tf.function(run, input_signature=[spec, tf.TensorSpec([None, 4], tf.float32)])
    return run(xs, c0), compiled(xs, c0)


@parity(modes=True, **TOL)
def test_clip_by_global_norm_with_a_none_gradient_and_clip_by_norm_per_tensor(tf):
    """The gradient list of an RNN with an unused bias (None) clipped by ``tf.clip_by_global_norm``
    (TF skips the None and keeps it in place), beside per-tensor ``tf.clip_by_norm`` and
    ``tf.clip_by_value``, at a norm under and over the threshold; the applied SGD update."""
    rs = np.random.RandomState(3081)
    x = tf.constant(rs.randn(3, 4, 2).astype(np.float32))
    w = tf.Variable(init_array((2 + 3, 3), 3082, scale=1.5))
    unused = tf.Variable(tf.zeros([3]))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for clip in (100.0, 0.3):
        with tf.GradientTape() as tape:
            h = tf.zeros([3, 3])
            for t in range(4):
                h = tf.tanh(tf.matmul(tf.concat([x[:, t], h], -1), w))
            loss = tf.reduce_sum(h ** 2)
        g = tape.gradient(loss, [w, unused])
        clipped, norm = tf.clip_by_global_norm(g, clip)
        opt.apply_gradients([(clipped[0], w)])
        out.append((norm, clipped[0], clipped[1] is None, tf.clip_by_norm(g[0], clip),
                    tf.clip_by_value(g[0], -clip / 10, clip / 10)))
    return out, w
