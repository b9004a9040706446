"""Round twenty-one (b) of realistic user programs, fourth part: Keras sequence models fed by
``tf.data`` pipelines, and keras.io's seq2seq, run under real TensorFlow 2.21 and under tapejax
(tf_keras on TF's side, Keras 3 on JAX on tapejax's; default mode only, to keep the file's time).

The course-style ``windowed_dataset`` (``window`` + ``flat_map``) training a forecaster on a
``Huber`` loss; the simple-audio tutorial's pipeline (``map`` to spectrograms, ``Normalization.adapt``
on a dataset, ``Resizing``, the tutorial's CNN); keras.io's character-level seq2seq (encoder
states into the decoder, separate inference models decoding greedily); keras.io's CTC speech
recognition (transcripts through ``unicode_split`` and ``StringLookup`` in a ``tf.data`` map,
``pow(|stft|, 0.5)`` standardised per example, a bidirectional GRU on ``tf.nn.ctc_loss``), and
its decoding to text by ``StringLookup(invert=True)`` then ``.numpy()`` (a strict xfail: no string tensors).
Every weight is set from NumPy.
"""
import numpy as np

from .harness import parity, xfail_on_tapejax
from .test_user_programs21b3 import KTOL, _series, _set


@parity(**KTOL)
def test_windowed_dataset_by_window_and_flat_map_trains_a_forecaster_with_huber(tf):
    """The course-style ``windowed_dataset``: ``from_tensor_slices(series).window(size + 1, shift=1,
    drop_remainder=True)``, ``flat_map(lambda w: w.batch(size + 1))``, ``map`` to
    ``(w[:-1], w[-1:])``, ``batch(4)`` (no shuffle); a ``Dense`` forecaster over the window trained
    by SGD with momentum on ``tf.keras.losses.Huber()`` over two epochs, the MAE metric per epoch
    and a forecast made by sliding the window over the series with ``model.predict``-free calls."""
    series = _series(5111, t=20, f=1)[:, 0]
    window_size = 4
    ds = tf.data.Dataset.from_tensor_slices(series)
    ds = ds.window(window_size + 1, shift=1, drop_remainder=True)
    ds = ds.flat_map(lambda w: w.batch(window_size + 1))
    ds = ds.map(lambda w: (w[:-1], w[-1:]))
    ds = ds.batch(4).prefetch(1)
    model = tf.keras.Sequential([tf.keras.Input((window_size,)), tf.keras.layers.Dense(6, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    _set(model, 5112)
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    huber = tf.keras.losses.Huber()
    mae = tf.keras.metrics.MeanAbsoluteError()
    out = []
    for _ in range(2):
        mae.reset_state()
        for x, y in ds:
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                loss = huber(y, pred)
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables))
            mae.update_state(y, pred)
            out.append(loss)
        out.append(mae.result())
    forecast = [model(series[t:t + window_size][None])[0, 0] for t in range(len(series) - window_size)]
    return out, tf.stack(forecast), model.get_weights(), [x.shape.as_list() for x, _ in ds]


@parity(**KTOL)
def test_simple_audio_tutorial_pipeline_with_resizing_and_an_adapted_normalization(tf):
    """The simple-audio tutorial's pipeline on six tiny 'clips': ``from_tensor_slices((waves,
    labels))`` mapped to spectrograms (``stft`` of the zero-padded wave, ``abs``, a channel axis),
    batched; ``Normalization().adapt`` on the spectrograms (``ds.map(lambda s, l: s)``), then the
    tutorial's model: ``Resizing(8, 8)``, the adapted ``Normalization``, two ``Conv2D``,
    ``MaxPooling2D``, ``Flatten``, ``Dense``, a logits ``Dense`` (the Dropouts left out: random);
    two Adam steps per batch in a custom loop, the adapted mean and variance, and the predicted
    labels by ``tf.argmax``."""
    rs = np.random.RandomState(5121)
    t = np.arange(120) / 400.0
    waves = np.stack([np.sin(2 * np.pi * (30 + 25 * (i % 3)) * t) * (np.arange(120) < 80 + 8 * i)
                      + 0.05 * rs.randn(120) for i in range(6)]).astype(np.float32)
    labels = np.array([0, 1, 2, 0, 1, 2], np.int64)

    def get_spectrogram(waveform):
        zero_padding = tf.zeros([128] - tf.shape(waveform), dtype=tf.float32)
        equal_length = tf.concat([tf.cast(waveform, tf.float32), zero_padding], 0)
        spectrogram = tf.abs(tf.signal.stft(equal_length, frame_length=32, frame_step=16))
        return spectrogram[..., tf.newaxis]

    ds = tf.data.Dataset.from_tensor_slices((waves, labels))
    spec_ds = ds.map(lambda audio, label: (get_spectrogram(audio), label)).batch(3)
    norm_layer = tf.keras.layers.Normalization()
    norm_layer.adapt(data=spec_ds.map(map_func=lambda spec, label: spec))
    model = tf.keras.Sequential([
        tf.keras.Input((7, 17, 1)),
        tf.keras.layers.Resizing(8, 8),
        norm_layer,
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(8, activation="relu"),
        tf.keras.layers.Dense(3)])
    for i, layer in enumerate(model.layers[2:]):
        _set(layer, 5122 + 10 * i, scale=0.3)
    opt = tf.keras.optimizers.Adam(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    out = []
    for spec, label in spec_ds:
        for _ in range(2):
            with tf.GradientTape() as tape:
                loss = loss_fn(label, model(spec, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables))
            out.append((loss, g))
    preds = [tf.argmax(model(spec), axis=-1) for spec, _ in spec_ds]
    return (np.asarray(norm_layer.mean), np.asarray(norm_layer.variance), out,
            [tf.cast(p, tf.int32) for p in preds])


@parity(**KTOL)
def test_seq2seq_encoder_states_into_a_decoder_and_separate_inference_models(tf):
    """keras.io's character-level seq2seq, tiny: an encoder ``LSTM(return_state=True)`` whose ``[h, c]``
    are the decoder ``LSTM(return_sequences=True, return_state=True)``'s ``initial_state``, trained
    by teacher forcing (one-hot targets shifted by one) two Adam steps; then the inference models
    built from the same layers (``Model(encoder_inputs, encoder_states)`` and a decoder model taking
    the states as ``Input``s) decode greedily for three steps, feeding back the argmax one-hot."""
    rs = np.random.RandomState(5131)
    n_tok = 4
    enc_in = np.eye(n_tok, dtype=np.float32)[rs.randint(0, n_tok, (2, 5))]
    dec_tokens = rs.randint(0, n_tok, (2, 4))
    dec_in = np.eye(n_tok, dtype=np.float32)[dec_tokens]
    dec_target = np.eye(n_tok, dtype=np.float32)[np.concatenate([dec_tokens[:, 1:], [[0], [0]]], 1)]

    encoder_inputs = tf.keras.Input(shape=(None, n_tok))
    encoder = tf.keras.layers.LSTM(5, return_state=True)
    _, state_h, state_c = encoder(encoder_inputs)
    encoder_states = [state_h, state_c]
    decoder_inputs = tf.keras.Input(shape=(None, n_tok))
    decoder_lstm = tf.keras.layers.LSTM(5, return_sequences=True, return_state=True)
    decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
    decoder_dense = tf.keras.layers.Dense(n_tok, activation="softmax")
    decoder_outputs = decoder_dense(decoder_outputs)
    model = tf.keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)
    _set(model, 5132)
    opt = tf.keras.optimizers.Adam(0.05)
    cce = tf.keras.losses.CategoricalCrossentropy()
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = cce(dec_target, model([enc_in, dec_in], training=True))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((loss, g))

    encoder_model = tf.keras.Model(encoder_inputs, encoder_states)
    state_inputs = [tf.keras.Input(shape=(5,)), tf.keras.Input(shape=(5,))]
    d_out, d_h, d_c = decoder_lstm(decoder_inputs, initial_state=state_inputs)
    decoder_model = tf.keras.Model([decoder_inputs] + state_inputs, [decoder_dense(d_out), d_h, d_c])
    states = encoder_model(enc_in)
    target = np.zeros((2, 1, n_tok), np.float32)
    target[:, 0, 0] = 1.0
    decoded = []
    for _ in range(3):
        probs, h, c = decoder_model([target] + list(states))
        token = tf.argmax(probs[:, -1, :], axis=-1)
        decoded.append(tf.cast(token, tf.int32))
        target = tf.one_hot(token, n_tok)[:, None, :]
        states = [h, c]
    return out, [tf.convert_to_tensor(s) for s in encoder_model(enc_in)], decoded, probs


@parity(**KTOL)
def test_keras_io_asr_pipeline_string_lookup_labels_spectrogram_and_decoded_text(tf):
    """keras.io's CTC speech recognition, tiny: transcripts split by ``tf.strings.unicode_split``
    and mapped by ``StringLookup(vocabulary=..., oov_token="")`` in a ``tf.data`` map with the
    audio's ``stft(frame_length=32, frame_step=16, fft_length=48)``, ``tf.pow(|S|, 0.5)`` and its
    per-example standardisation (``reduce_mean`` / ``reduce_std`` over time, ``+ 1e-10``),
    ``padded_batch``; a per-frame ``Dense`` + ``Bidirectional(GRU)`` + softmax model trained two
    steps on ``tf.nn.ctc_loss`` (labels padded with 0, the blank the last class); the greedy
    decoder's ids (the text they spell is the next program's)."""
    rs = np.random.RandomState(5141)
    vocab = list("abc ")
    texts = ["ab", "c a", "ba"]
    waves = [(np.sin(np.arange(n) * (0.3 + 0.2 * i)) + 0.1 * rs.randn(n)).astype(np.float32)
             for i, n in enumerate((96, 112, 80))]
    char_to_num = tf.keras.layers.StringLookup(vocabulary=vocab, oov_token="")

    def encode(wav, label):
        spectrogram = tf.signal.stft(wav, frame_length=32, frame_step=16, fft_length=48)
        spectrogram = tf.pow(tf.abs(spectrogram), 0.5)
        means = tf.math.reduce_mean(spectrogram, 1, keepdims=True)
        stddevs = tf.math.reduce_std(spectrogram, 1, keepdims=True)
        spectrogram = (spectrogram - means) / (stddevs + 1e-10)
        label = char_to_num(tf.strings.unicode_split(label, input_encoding="UTF-8"))
        return spectrogram, label

    ds = tf.data.Dataset.from_generator(lambda: iter(zip(waves, texts)), output_signature=(
        tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.string)))
    ds = ds.map(encode).padded_batch(3)
    (spec, labels), = list(ds)
    n_classes = len(char_to_num.get_vocabulary()) + 1
    inp = tf.keras.Input((None, 25))
    h = tf.keras.layers.Dense(6, activation="relu")(inp)
    h = tf.keras.layers.Bidirectional(tf.keras.layers.GRU(4, return_sequences=True))(h)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(n_classes, activation="softmax")(h))
    _set(model, 5142)
    opt = tf.keras.optimizers.Adam(0.02)
    label_length = tf.reduce_sum(tf.cast(labels > 0, tf.int32), axis=1)
    frames = tf.fill([3], tf.shape(spec)[1])
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            probs = model(spec, training=True)
            loss = tf.reduce_mean(tf.nn.ctc_loss(labels, tf.math.log(probs + 1e-7), label_length, frames,
                                                 logits_time_major=False, blank_index=-1))
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((loss, g))
    probs = model(spec)
    decoded, _ = tf.nn.ctc_greedy_decoder(tf.transpose(tf.math.log(probs + 1e-7), [1, 0, 2]), frames,
                                          blank_index=-1)
    dense = tf.cast(tf.sparse.to_dense(decoded[0], default_value=0), tf.int32)
    return char_to_num.get_vocabulary(), spec, tf.cast(labels, tf.int32), out, dense


@xfail_on_tapejax("no string tensors (README): StringLookup(invert=True) gives NumPy bytes and tf.strings' "
                  "results are host bytes, which have no .numpy()")
@parity(**KTOL)
def test_keras_io_asr_decoding_ids_to_text_by_an_inverted_string_lookup(tf):
    """keras.io's ``decode_batch_predictions``: ``StringLookup(..., invert=True)`` maps decoded ids
    back to characters and ``tf.strings.reduce_join(...).numpy().decode("utf-8")`` makes the text."""
    char_to_num = tf.keras.layers.StringLookup(vocabulary=list("abc "), oov_token="")
    num_to_char = tf.keras.layers.StringLookup(vocabulary=char_to_num.get_vocabulary(), oov_token="",
                                               invert=True)
    dense = tf.constant([[1, 2, 0], [3, 4, 1]], tf.int64)
    return [tf.strings.reduce_join(num_to_char(row)).numpy().decode("utf-8") for row in dense]
