"""Round twenty-one (b) of realistic user programs, third part: the Keras layers sequence models
are built of, in custom ``GradientTape`` loops, run under real TensorFlow 2.21 and under tapejax
(tf_keras on TF's side, Keras 3 on JAX on tapejax's: see ``test_keras.py``; default mode only,
to keep the file's time).

Time series: the tutorial's windows by ``tf.keras.utils.timeseries_dataset_from_array`` mapped by
``split_window`` (tapejax gave a TF ``tf.data.Dataset`` there before), and the tutorial's autoregressive
``FeedBack`` model (an ``LSTMCell`` warmed up by ``RNN(cell, return_state=True)``, then called in
a Python loop on its own predictions, ``tf.stack`` + ``transpose``); ``RNN(LSTMCell,
return_sequences=True, return_state=True)`` with the final states carried to the next batch as
``initial_state`` and a ``go_backwards`` GRU; a ``stateful=True`` LSTM across batches and
``reset_states`` (tapejax started every batch from zero before); ``GRU(reset_after=False)``,
``SimpleRNN(unroll=True)``, ``Bidirectional`` with its own ``backward_layer``; ``Masking`` into a
``Bidirectional(GRU)``, and a causal dilated ``Conv1D`` into a masked ``LSTM`` and
``TimeDistributed(Dense)``.  Video: ``TimeDistributed(Conv2D)`` into a
``GRU``, and ``Conv3D`` beside ``ConvLSTM2D`` (a strict xfail for ``ConvLSTM2D``'s default
``recurrent_activation``, which Keras 3 changed).  keras.io's OCR model (``Conv2D``, ``Reshape``, ``Dense``, a bidirectional
``LSTM``) with its ``CTCLayer`` adding ``tf.nn.ctc_loss`` by ``add_loss``, greedy-decoded at
inference; ``tf.keras.backend.ctc_batch_cost`` / ``ctc_decode``, which Keras 3 does not have
(strict xfail).  The Keras data pipelines and seq2seq are in ``test_user_programs21b4.py``.
Every weight is set from NumPy.
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

KTOL = dict(rtol=2e-4, atol=2e-5)


def _set(layer, seed, scale=0.5):
    layer.set_weights([init_array(tuple(v.shape), seed + i, scale) for i, v in enumerate(layer.weights)])


def _series(seed, t=40, f=3):
    rs = np.random.RandomState(seed)
    k = np.arange(t, dtype=np.float64)
    cols = [np.sin(2 * np.pi * k / 12), np.cos(2 * np.pi * k / 7), np.cumsum(rs.randn(t)) * 0.3][:f]
    return (np.stack(cols, -1) + 0.1 * rs.randn(t, f)).astype(np.float32)


# ---------------------------------------------------------------------------
# Time series
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_timeseries_dataset_from_array_mapped_by_split_window_feeds_a_dense_model(tf):
    """The tutorial's ``make_dataset``: ``tf.keras.utils.timeseries_dataset_from_array`` (windows
    of 7, stride 2, batches of 4, no shuffle) over normalised data, ``map``ped by ``split_window``
    (``tf.stack`` of label columns, ``set_shape``); each batch's shapes, a Keras ``Dense`` model
    trained by Adam over two epochs of the dataset in a tape loop; the windows with ``targets``
    given (the target at each window's start, shifted by the user) as well."""
    raw = _series(5001, t=24)
    data = (raw - raw[:16].mean(0)) / raw[:16].std(0)

    def split_window(features):
        inputs = features[:, slice(0, 6), :]
        labels = features[:, slice(6, None), :]
        labels = tf.stack([labels[:, :, i] for i in (0, 2)], axis=-1)
        inputs.set_shape([None, 6, None])
        labels.set_shape([None, 1, None])
        return inputs, labels

    ds = tf.keras.utils.timeseries_dataset_from_array(data=data, targets=None, sequence_length=7,
                                                      sequence_stride=2, shuffle=False, batch_size=4)
    ds = ds.map(split_window)
    model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(5, activation="relu"),
                                 tf.keras.layers.Dense(2), tf.keras.layers.Reshape([1, 2])])
    model(np.zeros((1, 6, 3), np.float32))
    _set(model, 5002)
    opt = tf.keras.optimizers.Adam(0.02)
    out = []
    for _ in range(2):
        for x, y in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.keras.losses.mean_squared_error(y, model(x)))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables))
            out.append((x.shape.as_list(), y.shape.as_list(), loss))
    with_targets = tf.keras.utils.timeseries_dataset_from_array(data[:-3], data[3:, 0], sequence_length=3,
                                                                batch_size=5)
    pairs = [(a, b) for a, b in with_targets]
    return out, model.get_weights(), [(x, y) for x, y in ds.take(1)], pairs


@parity(**KTOL)
def test_feedback_model_of_the_tutorial_predicts_autoregressively_with_an_lstm_cell(tf):
    """The tutorial's ``FeedBack`` model: ``warmup`` runs ``RNN(LSTMCell(5), return_state=True)``
    over the inputs and a ``Dense`` gives the first prediction; then for each further step the
    cell is called on the last prediction with the carried ``[h, c]`` state, the predictions are
    ``tf.stack``ed and ``transpose``d to ``[batch, time, features]``; two Adam steps with its
    gradients, the forecast before and after."""
    raw = _series(5011, t=30)
    win = np.stack([raw[i:i + 10] for i in range(0, 20, 4)])
    inputs, labels = tf.constant(win[:, :6]), tf.constant(win[:, 6:])

    class FeedBack(tf.keras.Model):
        def __init__(self, units, out_steps):
            super().__init__()
            self.out_steps = out_steps
            self.units = units
            self.lstm_cell = tf.keras.layers.LSTMCell(units)
            self.lstm_rnn = tf.keras.layers.RNN(self.lstm_cell, return_state=True)
            self.dense = tf.keras.layers.Dense(3)

        def warmup(self, inputs):
            x, *state = self.lstm_rnn(inputs)
            prediction = self.dense(x)
            return prediction, state

        def call(self, inputs, training=None):
            predictions = []
            prediction, state = self.warmup(inputs)
            predictions.append(prediction)
            for n in range(1, self.out_steps):
                x = prediction
                x, state = self.lstm_cell(x, states=state, training=training)
                prediction = self.dense(x)
                predictions.append(prediction)
            predictions = tf.stack(predictions)
            predictions = tf.transpose(predictions, [1, 0, 2])
            return predictions

    model = FeedBack(5, 4)
    before = model(inputs)
    _set(model, 5012)
    before = model(inputs)
    opt = tf.keras.optimizers.Adam(0.02)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            pred = model(inputs, training=True)
            loss = tf.reduce_mean(tf.square(pred - labels))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((loss, g))
    mae = tf.reduce_mean(tf.abs(model(inputs) - labels))
    return before, out, mae, [tuple(v.shape) for v in model.trainable_variables]


@parity(**KTOL)
def test_rnn_of_an_lstm_cell_carries_its_final_states_to_the_next_batch(tf):
    """Stateful training by hand: ``RNN(LSTMCell(4), return_sequences=True, return_state=True)`` over
    consecutive chunks of two long series, each chunk's final ``[h, c]`` passed as the next
    chunk's ``initial_state`` through ``tf.stop_gradient`` (truncated BPTT), a per-step ``Dense``
    head; the losses, gradients (including none to the carried state) and states per chunk, and
    a ``GRU(go_backwards=True, return_sequences=True)`` over the same chunk (outputs in reversed
    time, as both Kerases give them)."""
    raw = _series(5021, t=25, f=2)
    series = np.stack([raw[:-1], raw[1:] * 0.5])   # two series of 24 steps
    rnn = tf.keras.layers.RNN(tf.keras.layers.LSTMCell(4), return_sequences=True, return_state=True)
    head = tf.keras.layers.Dense(2)
    back = tf.keras.layers.GRU(3, go_backwards=True, return_sequences=True)
    x0 = tf.constant(series[:, :6])
    head(rnn(x0)[0])
    back(x0)
    _set(rnn, 5022)
    _set(head, 5025)
    _set(back, 5027)
    params = rnn.trainable_variables + head.trainable_variables
    opt = tf.keras.optimizers.SGD(0.1)
    state = None
    out = []
    for k in range(0, 18, 6):
        x, y = tf.constant(series[:, k:k + 6]), tf.constant(series[:, k + 1:k + 7])
        with tf.GradientTape() as tape:
            init = None if state is None else [tf.stop_gradient(s) for s in state]
            if init is not None:
                tape.watch(init)
            seq, h, c = rnn(x, initial_state=init)
            loss = tf.reduce_mean(tf.square(head(seq) - y))
        g = tape.gradient(loss, params + (init or []))
        opt.apply_gradients(zip(g[:len(params)], params))
        state = [h, c]
        out.append((loss, g, h, c))
    return out, back(x0), rnn.get_weights()


@parity(**KTOL)
def test_masking_into_a_bidirectional_gru_over_zero_padded_sensor_sequences(tf):
    """Sensor sequences of lengths 5, 3, 2 padded with zero rows: ``Masking(mask_value=0.)`` into
    ``Bidirectional(GRU(3, return_sequences=True))`` (padded steps give zeros), then a second
    ``GRU`` whose final state is each row's last real step, a sigmoid head trained by a binary
    cross-entropy two Adam steps; the gradient of the loss to the padded input rows is zero."""
    rs = np.random.RandomState(5031)
    lengths = [5, 3, 2]
    x_np = np.zeros((3, 5, 2), np.float32)
    for i, n in enumerate(lengths):
        x_np[i, :n] = rs.randn(n, 2) + 0.5
    x = tf.constant(x_np)
    y = tf.constant([[1.0], [0.0], [1.0]])
    inp = tf.keras.Input((5, 2))
    m = tf.keras.layers.Masking(mask_value=0.0)(inp)
    seq = tf.keras.layers.Bidirectional(tf.keras.layers.GRU(3, return_sequences=True))(m)
    last = tf.keras.layers.GRU(2)(seq)
    outp = tf.keras.layers.Dense(1, activation="sigmoid")(last)
    model = tf.keras.Model(inp, [outp, seq])
    _set(model, 5032)
    opt = tf.keras.optimizers.Adam(0.05)
    bce = tf.keras.losses.BinaryCrossentropy()
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(x)
            p, s = model(x, training=True)
            loss = bce(y, p)
        g = tape.gradient(loss, model.trainable_variables + [x])
        opt.apply_gradients(zip(g[:-1], model.trainable_variables))
        out.append((loss, p, s, g))
    return out


# ---------------------------------------------------------------------------
# Video
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_time_distributed_conv2d_into_a_gru_video_classifier(tf):
    """The video tutorial's frame-level CNN + RNN: ``TimeDistributed(Conv2D)`` and
    ``TimeDistributed(GlobalAveragePooling2D)`` over ``[batch, frames, h, w, c]`` clips, a ``GRU``
    over the frame features and a softmax head; SparseCategoricalCrossentropy, two Adam steps, a
    compiled prediction afterwards."""
    rs = np.random.RandomState(5041)
    clips = tf.constant(rs.randn(2, 3, 6, 6, 1).astype(np.float32))
    y = tf.constant([2, 0])
    model = tf.keras.Sequential([
        tf.keras.Input((3, 6, 6, 1)),
        tf.keras.layers.TimeDistributed(tf.keras.layers.Conv2D(4, 3, activation="relu")),
        tf.keras.layers.TimeDistributed(tf.keras.layers.GlobalAveragePooling2D()),
        tf.keras.layers.GRU(5),
        tf.keras.layers.Dense(3)])
    _set(model, 5042)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.02)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(clips, training=True))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((loss, g))
    return out, tf.function(lambda v: model(v, training=False))(clips)


def _conv3d_and_conv_lstm(tf, **conv_lstm_kwargs):
    rs = np.random.RandomState(5051)
    clips = tf.constant(rs.randn(2, 4, 5, 5, 2).astype(np.float32))
    inp = tf.keras.Input((4, 5, 5, 2))
    a = tf.keras.layers.Conv3D(3, (2, 3, 3), padding="same", activation="relu")(inp)
    a = tf.keras.layers.MaxPooling3D((2, 2, 2))(a)
    a = tf.keras.layers.GlobalAveragePooling3D()(a)
    conv_lstm = tf.keras.layers.ConvLSTM2D(2, 3, padding="same", **conv_lstm_kwargs)
    b = tf.keras.layers.GlobalAveragePooling2D()(conv_lstm(inp))
    outp = tf.keras.layers.Dense(2)(tf.keras.layers.Concatenate()([a, b]))
    model = tf.keras.Model(inp, outp)
    _set(model, 5052, scale=0.3)
    seq_layer = tf.keras.layers.ConvLSTM2D(2, 3, padding="same", return_sequences=True, **conv_lstm_kwargs)
    seq_layer(clips)
    seq_layer.set_weights(conv_lstm.get_weights())
    opt = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        logits = model(clips)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits([1, 0], logits))
    g = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(g, model.trainable_variables))
    return logits, loss, g, model(clips), seq_layer(clips)


@parity(**KTOL)
def test_conv3d_beside_a_conv_lstm2d_on_short_clips(tf):
    """Two spatio-temporal encoders of the same clips: ``Conv3D`` + ``MaxPooling3D`` +
    ``GlobalAveragePooling3D``, and ``ConvLSTM2D(recurrent_activation="sigmoid")`` (given: the two
    Kerases' defaults differ, see the next program) + ``GlobalAveragePooling2D``; their features
    concatenated into a head; one SGD step with every gradient, and the ConvLSTM's sequence output
    on the same weights."""
    return _conv3d_and_conv_lstm(tf, recurrent_activation="sigmoid")


@xfail_on_tapejax("tapejax's tf.keras is Keras 3 (README): its ConvLSTM2D's default recurrent_activation is "
                  "'sigmoid', tf_keras' is 'hard_sigmoid' (0.2 x + 0.5 clipped), so the default layer computes "
                  "other gates")
@parity(**KTOL)
def test_conv_lstm2d_with_its_default_recurrent_activation(tf):
    """The program above as the video tutorials write it, with ``ConvLSTM2D``'s defaults."""
    return _conv3d_and_conv_lstm(tf)


# ---------------------------------------------------------------------------
# CTC with Keras layers
# ---------------------------------------------------------------------------

def _ocr_model(tf, width=8, height=6, classes=5):
    """keras.io's OCR model, tiny: the image transposed to ``[width, height]``, a conv, a reshape
    to ``[width, features]`` (time = image columns), a dense, a bidirectional LSTM and a softmax
    over the characters plus the blank."""
    image = tf.keras.Input((width, height, 1), name="image")
    x = tf.keras.layers.Conv2D(2, 3, padding="same", activation="relu")(image)
    x = tf.keras.layers.MaxPooling2D((1, 2))(x)
    x = tf.keras.layers.Reshape((width, (height // 2) * 2))(x)
    x = tf.keras.layers.Dense(4, activation="relu")(x)
    x = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(3, return_sequences=True))(x)
    return tf.keras.Model(image, tf.keras.layers.Dense(classes + 1, activation="softmax")(x))


@parity(**KTOL)
def test_ocr_model_with_a_ctc_layer_adding_its_loss_and_greedy_decoding(tf):
    """keras.io's OCR ``CTCLayer`` ported to ``tf.nn.ctc_loss``: a layer that computes the loss
    from the labels and the softmax outputs (``log`` of them as logits, batch-major, blank last,
    ``label_length`` of the unpadded labels, every frame valid), ``add_loss``es it and returns the
    predictions; a custom loop trains on ``sum(model.losses)`` two Adam steps; inference decodes
    by ``ctc_greedy_decoder`` and ``sparse.to_dense(..., -1)``."""
    rs = np.random.RandomState(5061)
    images = tf.constant(rs.rand(2, 8, 6, 1).astype(np.float32))
    labels = tf.constant([[0, 2, 1], [3, 3, 5]], tf.int32)   # 5: padding (the blank)
    label_length = tf.constant([3, 2])

    class CTCLayer(tf.keras.layers.Layer):
        def call(self, y_true, y_pred, label_length):
            logit_length = tf.fill([tf.shape(y_pred)[0]], tf.shape(y_pred)[1])
            loss = tf.nn.ctc_loss(y_true, tf.math.log(y_pred + 1e-7), label_length, logit_length,
                                  logits_time_major=False, blank_index=-1)
            self.add_loss(tf.reduce_mean(loss))
            return y_pred

    ocr = _ocr_model(tf)
    _set(ocr, 5062)
    ctc = CTCLayer()
    opt = tf.keras.optimizers.Adam(0.02)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            preds = ctc(labels, ocr(images, training=True), label_length)
            loss = tf.add_n(ctc.losses)
        g = tape.gradient(loss, ocr.trainable_variables)
        opt.apply_gradients(zip(g, ocr.trainable_variables))
        out.append((loss, preds, g))
    preds = ocr(images)
    decoded, _ = tf.nn.ctc_greedy_decoder(tf.transpose(tf.math.log(preds + 1e-7), [1, 0, 2]),
                                          tf.fill([2], 8), blank_index=-1)
    return out, preds, tf.cast(tf.sparse.to_dense(decoded[0], default_value=-1), tf.int32)


@parity(**KTOL)
def test_keras_backend_ctc_batch_cost_and_ctc_decode_of_the_ocr_example(tf):
    """keras.io's TF-era OCR example as written: ``tf.keras.backend.ctc_batch_cost(y_true, y_pred,
    input_length, label_length)`` (column vectors of lengths) in the ``CTCLayer`` and
    ``tf.keras.backend.ctc_decode(pred, input_length, greedy=True)[0][0]`` at inference."""
    rs = np.random.RandomState(5071)
    preds = tf.nn.softmax(tf.constant(rs.randn(2, 6, 4).astype(np.float32)))
    labels = tf.constant([[1, 2], [0, 0]])
    with tf.GradientTape() as tape:
        tape.watch(preds)
        loss = tf.keras.backend.ctc_batch_cost(labels, preds, tf.constant([[6], [5]]), tf.constant([[2], [1]]))
    decoded = tf.keras.backend.ctc_decode(preds, input_length=np.array([6, 5]), greedy=True)[0][0]
    return loss, tape.gradient(loss, preds), tf.cast(decoded, tf.int32)


# ---------------------------------------------------------------------------
# More recurrent Keras layers
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_stateful_lstm_keeps_its_state_across_batches_until_reset(tf):
    """A stateful forecaster: ``LSTM(3, stateful=True, return_sequences=True)`` on a fixed batch of 2
    (``Input(batch_shape=...)``), fed consecutive chunks of two series; the layer's state
    (``layer.states``) carries over between calls and training steps, ``model.reset_states()``
    (tf_keras'; Keras 3 has no such method, tapejax adds it) zeroes it; the predictions of one
    chunk with and without the carried state, and four SGD steps' losses and gradients (the last
    two compiled: the state Variables are threaded through the step)."""
    raw = _series(5081, t=21, f=2)
    series = np.stack([raw[:-1], raw[1:] * 0.5])
    inp = tf.keras.Input(batch_shape=(2, 4, 2))
    lstm = tf.keras.layers.LSTM(3, stateful=True, return_sequences=True)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(2)(lstm(inp)))
    _set(model, 5082)
    opt = tf.keras.optimizers.SGD(0.1)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, g

    compiled = tf.function(step)
    out = []
    for k in range(0, 16, 4):
        x, y = tf.constant(series[:, k:k + 4]), tf.constant(series[:, k + 1:k + 5])
        loss, g = (compiled if k >= 8 else step)(x, y)
        out.append((loss, g, [tf.convert_to_tensor(s) for s in lstm.states]))
    carried = model(tf.constant(series[:, 12:16]))
    model.reset_states()
    fresh = model(tf.constant(series[:, 12:16]))
    return out, carried, fresh, [tf.convert_to_tensor(s) for s in lstm.states]


@parity(**KTOL)
def test_gru_variants_simple_rnn_unrolled_and_a_bidirectional_with_its_own_backward_layer(tf):
    """The recurrent layers' options a tutorial sweeps: ``GRU(reset_after=False)`` beside the default
    ``reset_after=True`` (their own weight shapes), ``SimpleRNN(unroll=True, return_state=True)``,
    and ``Bidirectional(LSTM, backward_layer=GRU(go_backwards=True), merge_mode='ave')``; outputs and
    gradients of a loss over all of them to the layers' weights and the input."""
    rs = np.random.RandomState(5091)
    x = tf.constant(rs.randn(2, 5, 3).astype(np.float32))
    layers = [tf.keras.layers.GRU(3, reset_after=False, return_sequences=True),
              tf.keras.layers.GRU(3, return_sequences=True),
              tf.keras.layers.SimpleRNN(3, unroll=True, return_state=True),
              tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(3, return_sequences=True),
                                            backward_layer=tf.keras.layers.GRU(3, go_backwards=True,
                                                                               return_sequences=True),
                                            merge_mode="ave")]
    for i, layer in enumerate(layers):
        layer(x)
        _set(layer, 5092 + 10 * i)
    params = [v for layer in layers for v in layer.trainable_variables]
    with tf.GradientTape() as tape:
        tape.watch(x)
        a, b, (c, c_state), d = (layer(x) for layer in layers)
        loss = (tf.reduce_sum(a ** 2) + tf.reduce_sum(b * a) + tf.reduce_sum(c * c_state)
                + tf.reduce_sum(tf.sin(d)))
    g = tape.gradient(loss, params + [x])
    return [tuple(v.shape) for v in params], a, b, c, c_state, d, loss, g


@parity(**KTOL)
def test_causal_conv1d_into_an_lstm_forecaster_with_time_distributed_dense_over_a_mask(tf):
    """A WaveNet-flavoured forecaster: ``Conv1D(padding='causal', dilation_rate=2)`` into ``LSTM(
    return_sequences=True)`` into ``TimeDistributed(Dense)``, with a ``Masking`` layer after the
    convolution hiding the rows a zero ``pad`` flags (the LSTM carries its state through them);
    the per-step MAE over the real steps by ``tf.keras.metrics.MeanAbsoluteError`` with a sample
    weight, two Adam steps."""
    rs = np.random.RandomState(5101)
    x_np = rs.randn(2, 6, 2).astype(np.float32)
    y = tf.constant(rs.randn(2, 6, 1).astype(np.float32))
    keep = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], np.float32)
    inp = tf.keras.Input((6, 2))
    pad = tf.keras.Input((6, 1))
    h = tf.keras.layers.Conv1D(3, 2, padding="causal", dilation_rate=2, activation="relu")(inp)
    h = tf.keras.layers.Masking(0.0)(tf.keras.layers.Multiply()([h, pad]))
    h = tf.keras.layers.LSTM(3, return_sequences=True)(h)
    model = tf.keras.Model([inp, pad], tf.keras.layers.TimeDistributed(tf.keras.layers.Dense(1))(h))
    _set(model, 5102)
    opt = tf.keras.optimizers.Adam(0.03)
    mae = tf.keras.metrics.MeanAbsoluteError()
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            pred = model([x_np, keep[..., None]], training=True)
            loss = tf.reduce_sum(tf.abs(pred - y)[..., 0] * keep) / tf.reduce_sum(keep)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        mae.update_state(y, pred, sample_weight=keep[..., None])
        out.append((loss, pred, g, mae.result()))
    return out
