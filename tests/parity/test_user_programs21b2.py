"""Round twenty-one (b) of realistic user programs, second half: audio, CTC and video programs
written from raw TF ops, as TF's simple-audio and video tutorials, keras.io's CTC OCR and speech
examples and research code write them, run under real TensorFlow 2.21 and under tapejax with
deferred execution and predicted updates on and off (``modes=True``).

Audio: the speech tutorial's spectrogram (a waveform padded by a ``tf.zeros`` concat, ``stft``,
``tf.abs``, a channel axis) into a small convolutional classifier with the gradient to the
waveform, log-mel features (``linear_to_mel_weight_matrix``, ``tensordot``, ``log(x + eps)``) and
MFCCs; a spectral-convergence plus log-magnitude loss optimising a waveform Variable that starts
silent in part (``tf.abs`` of a complex zero); ``frame`` / ``overlap_and_add`` and
``inverse_stft`` round trips with gradients; SpecAugment's time and frequency masks built from
``tf.sequence_mask`` and ``tf.range`` comparisons.  CTC: keras.io's OCR ``CTCLayer`` written with
``tf.nn.ctc_loss`` (batch-major logits, blank last, padded labels and their lengths) trained in a
compiled step, then greedy decoding to a dense ``-1``-padded batch; sparse labels, a repeated
label, a label longer than the frames allow, and beam search's top paths.  Video: per-frame
convolutions by folding time into the batch, frame differences, temporal attention pooling,
``tf.nn.conv3d`` with ``max_pool3d``, and clip-level classification by ``segment_mean`` over
clips of different lengths.  Also: ``stft`` with ``pad_end`` beside ``frame`` + ``rfft``,
Griffin-Lim, a CTC step compiled once for every batch, frame count and label width (tapejax
traced it once per shape before), and strict xfails for value-dependent shapes inside a
``tf.function`` (``segment_mean`` over ids passed in, CTC decoding).  Every number is drawn with
NumPy.
"""
import numpy as np

from .harness import init_array, parity, raises, xfail_on_tapejax

TOL = dict(rtol=2e-5, atol=2e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)
SPEC = dict(rtol=2e-4, atol=2e-5)   # FFTs: XLA's and TF's (Eigen / pocketfft) round differently


def _waves(seed, n=3, length=200):
    """Short 'utterances': chirps and tones of different lengths plus noise (float32)."""
    rs = np.random.RandomState(seed)
    t = np.arange(length) / 800.0
    out = []
    for k in range(n):
        w = np.sin(2 * np.pi * (60 + 40 * k) * t * (1 + t)) + 0.1 * rs.randn(length)
        out.append(w[:length - 30 * k].astype(np.float32))
    return out


# ---------------------------------------------------------------------------
# Audio
# ---------------------------------------------------------------------------

def _get_spectrogram(tf, waveform, length=200):
    """The simple-audio tutorial's ``get_spectrogram``: zero-pad to a fixed length, STFT, magnitude,
    a channel axis."""
    zero_padding = tf.zeros([length] - tf.shape(waveform), dtype=tf.float32)
    waveform = tf.cast(waveform, dtype=tf.float32)
    equal_length = tf.concat([waveform, zero_padding], 0)
    spectrogram = tf.signal.stft(equal_length, frame_length=31, frame_step=16)
    spectrogram = tf.abs(spectrogram)
    return spectrogram[..., tf.newaxis]


@parity(modes=True, **SPEC)
def test_speech_tutorial_spectrogram_into_a_conv_classifier_with_the_waveform_gradient(tf):
    """Three utterances of different lengths padded by ``tf.zeros([L] - tf.shape(w))``, their STFT
    magnitudes (frame 31: fft length 32) stacked into a batch, normalised by the batch's mean and
    std, into ``conv2d`` + ReLU + global mean + dense; two Adam steps (the second compiled), and
    the gradient of the loss to the waveforms (zero in the padding's frames only where no frame
    overlaps real samples)."""
    waves = _waves(4001)
    labels = tf.constant([0, 1, 2])
    k = tf.Variable(init_array((3, 3, 1, 4), 4002))
    w = tf.Variable(init_array((4, 3), 4003))
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def forward(specs):
        m, v = tf.nn.moments(specs, axes=[0, 1, 2, 3])
        x = (specs - m) / tf.sqrt(v + 1e-6)
        h = tf.nn.relu(tf.nn.conv2d(x, k, strides=[1, 2, 2, 1], padding="SAME"))
        return tf.matmul(tf.reduce_mean(h, axis=[1, 2]), w)

    def step(waves):
        with tf.GradientTape() as tape:
            tape.watch(waves)
            specs = tf.stack([_get_spectrogram(tf, wv) for wv in waves])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, forward(specs)))
        g = tape.gradient(loss, [k, w] + list(waves))
        opt.apply_gradients(zip(g[:2], [k, w]))
        return specs, loss, g

    wt = [tf.constant(x) for x in waves]
    s1, l1, g1 = step(wt)
    s2, l2, g2 = tf.function(step)(wt)
    return s1.shape.as_list(), s1, l1, g1, l2, g2, k, w


@parity(modes=True, **SPEC)
def test_log_mel_spectrogram_and_mfccs_with_an_epsilon_and_their_gradients(tf):
    """Log-mel features as the TF docs write them: ``stft`` (frame 64, step 16, fft 64), magnitudes,
    ``tensordot`` with ``linear_to_mel_weight_matrix`` (12 bins, 20-380 Hz at 800 Hz) and
    ``set_shape``, ``log(mel + 1e-6)``, the first 5 MFCCs; a linear probe on the time-pooled MFCCs
    trained two SGD steps, the gradient to the waveforms, and the log-mel of a silent clip (the
    epsilon's floor, and its gradient through ``abs`` of complex zeros)."""
    waves = np.stack([w[:140] for w in _waves(4011)] + [np.zeros(140, np.float32)])
    x = tf.constant(waves)
    probe = tf.Variable(init_array((5, 2), 4012))
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    mel_matrix = tf.signal.linear_to_mel_weight_matrix(
        num_mel_bins=12, num_spectrogram_bins=33, sample_rate=800, lower_edge_hertz=20.0,
        upper_edge_hertz=380.0)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(x)
            stfts = tf.signal.stft(x, frame_length=64, frame_step=16, fft_length=64)
            mags = tf.abs(stfts)
            mel = tf.tensordot(mags, mel_matrix, 1)
            mel.set_shape(mags.shape[:-1].concatenate(mel_matrix.shape[-1:]))
            log_mel = tf.math.log(mel + 1e-6)
            mfccs = tf.signal.mfccs_from_log_mel_spectrograms(log_mel)[..., :5]
            logits = tf.matmul(tf.reduce_mean(mfccs, axis=1), probe)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits([0, 1, 0, 1], logits))
        g = tape.gradient(loss, [probe, x])
        opt.apply_gradients([(g[0], probe)])
        out.append((loss, g, log_mel[3, 0], mfccs))
    return mel_matrix, out, probe


@parity(modes=True, **SPEC)
def test_spectral_convergence_and_log_magnitude_loss_optimise_a_waveform(tf):
    """A vocoder-style STFT loss on a waveform Variable: spectral convergence
    ``||S - S_hat||_F / ||S||_F`` plus the mean squared ``log1p``-magnitude distance (squared and
    ``log1p``, not the absolute distance of ``log(S + eps)``: at the bins where ``S == S_hat`` or
    ``S_hat ~ 0`` the kink of ``abs`` and ``1 / (S + eps)`` amplify FFT round-off, which XLA and TF
    do not share, past any tolerance), at two resolutions
    (frames 32/16 and 64/32, Hann and Hamming windows); the Variable starts as the target with its
    second half silenced (``tf.abs`` of complex-zero STFT bins: TF's gradient is zero there, not
    NaN); SGD with momentum optimises it four steps, half of them compiled (not Adam, whose
    ``g / sqrt(v)`` makes a full step of a gradient that is round-off, 1e-9 in one and 0 in the
    other)."""
    target = _waves(4021, n=1, length=160)[0]
    start = target.copy()
    start[80:] = 0.0
    y = tf.Variable(start)
    opt = tf.keras.optimizers.legacy.SGD(0.05, momentum=0.5)

    def stft_loss(pred, ref, n, hop, window):
        s = tf.abs(tf.signal.stft(ref, n, hop, window_fn=window))
        s_hat = tf.abs(tf.signal.stft(pred, n, hop, window_fn=window))
        sc = tf.norm(s - s_hat, ord="fro", axis=[-2, -1]) / tf.norm(s, ord="fro", axis=[-2, -1])
        mag = tf.reduce_mean(tf.square(tf.math.log1p(s) - tf.math.log1p(s_hat)))
        return sc, mag

    def step():
        with tf.GradientTape() as tape:
            sc1, m1 = stft_loss(y, target, 32, 16, tf.signal.hann_window)
            sc2, m2 = stft_loss(y, target, 64, 32, tf.signal.hamming_window)
            loss = sc1 + m1 + sc2 + m2
        g = tape.gradient(loss, y)
        opt.apply_gradients([(g, y)])
        return loss, sc1, m1, sc2, m2, g

    compiled = tf.function(step)
    out = [step(), compiled(), step(), compiled()]
    return out, y


@parity(modes=True, **SPEC)
def test_frame_overlap_and_add_and_inverse_stft_round_trips_with_gradients(tf):
    """Framing by ``tf.signal.frame`` (hop 8, frame 16, ``pad_end``), a periodic Hann window,
    ``overlap_and_add`` back divided by the summed squared window (the classic WOLA), and
    ``inverse_stft`` with ``inverse_stft_window_fn`` after ``stft``; a learnable per-bin gain
    (a spectral denoiser) trained by SGD through ``stft`` -> gain -> ``inverse_stft`` two steps,
    the reconstruction error inside the signal, and the gradients to the gain and the input."""
    rs = np.random.RandomState(4031)
    clean = np.sin(np.arange(96) * 0.3).astype(np.float32)
    noisy = tf.constant((clean + 0.3 * rs.randn(96)).astype(np.float32))
    frames = tf.signal.frame(noisy, 16, 8, pad_end=True)
    win = tf.signal.hann_window(16, periodic=True)
    ola = tf.signal.overlap_and_add(frames * win, 8)
    norm = tf.signal.overlap_and_add(tf.tile(win[None] ** 2, [tf.shape(frames)[0], 1]), 8)
    wola = tf.signal.overlap_and_add(frames * win * win, 8) / tf.maximum(norm, 1e-3)
    gain = tf.Variable(tf.ones([9]))
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    inv_win = tf.signal.inverse_stft_window_fn(4)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(noisy)
            spec = tf.signal.stft(noisy, 16, 4)
            masked = spec * tf.cast(tf.sigmoid(gain * 3.0), tf.complex64)
            rec = tf.signal.inverse_stft(masked, 16, 4, window_fn=inv_win)
            loss = tf.reduce_mean(tf.square(rec[16:80] - clean[16:80]))
        g = tape.gradient(loss, [gain, noisy])
        opt.apply_gradients([(g[0], gain)])
        out.append((loss, g, rec))
    return frames.shape.as_list(), ola, wola, out, gain


@parity(modes=True, **TOL)
def test_specaugment_time_and_frequency_masks_from_sequence_mask_and_range(tf):
    """SpecAugment on a batch of log-mel spectrograms: a frequency mask per example from
    ``tf.range`` comparisons against NumPy-drawn starts and widths, a time mask from two
    ``tf.sequence_mask``s (``mask(t0 + w) & ~mask(t0)``), applied by ``tf.where`` with the
    spectrogram's mean as the fill; the masked inputs, a classifier's loss, the gradient to the
    inputs (zero under the masks) and to the weights, eager and compiled."""
    rs = np.random.RandomState(4041)
    spec = tf.constant(rs.randn(3, 10, 8).astype(np.float32))
    f0, fw = tf.constant([1, 4, 0]), tf.constant([2, 3, 0])
    t0, tw = tf.constant([2, 0, 7]), tf.constant([3, 2, 3])
    w = tf.Variable(init_array((8, 2), 4042))

    def augment(x):
        freq = tf.range(8)[None, None, :]
        fmask = (freq >= f0[:, None, None]) & (freq < (f0 + fw)[:, None, None])
        tmask = tf.sequence_mask(t0 + tw, 10) & tf.logical_not(tf.sequence_mask(t0, 10))
        masked = fmask | tmask[:, :, None]
        fill = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
        return tf.where(masked, fill * tf.ones_like(x), x), masked

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            aug, masked = augment(x)
            logits = tf.matmul(tf.reduce_max(aug, axis=1), w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits([0, 1, 1], logits))
        gx, gw = tape.gradient(loss, [x, w])
        return aug, masked, loss, gx, gw

    return step(spec), tf.function(step)(spec)


@parity(modes=True, **SPEC)
def test_griffin_lim_phase_recovery_and_a_magnitude_phase_resynthesis_gradient(tf):
    """Griffin-Lim as vocoder baselines write it: random initial phases (NumPy), three rounds of
    ``inverse_stft`` of ``|S| * angles`` then ``stft`` and ``angles = S / max(1e-8, |S|)`` (complex
    division by a cast magnitude), the spectral convergence per round; and the gradient of a
    loss on the resynthesis ``inverse_stft(complex(|S| cos(phi), |S| sin(phi)))`` (``tf.math.angle``)
    to a stereo batch of waveforms."""
    rs = np.random.RandomState(4151)
    x = tf.constant(rs.randn(64).astype(np.float32))
    inv = tf.signal.inverse_stft_window_fn(4)
    mag = tf.abs(tf.signal.stft(x, 16, 4))
    angles = tf.exp(tf.complex(tf.zeros_like(mag), tf.constant(rs.uniform(0, 2 * np.pi, mag.shape)
                                                                 .astype(np.float32))))
    errors = []
    for _ in range(3):
        y = tf.signal.inverse_stft(tf.cast(mag, tf.complex64) * angles, 16, 4, window_fn=inv)
        s = tf.signal.stft(y, 16, 4)
        errors.append(tf.norm(tf.abs(s) - mag) / tf.norm(mag))
        angles = s / tf.cast(tf.maximum(1e-8, tf.abs(s)), tf.complex64)
    stereo = tf.constant(rs.randn(2, 64).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(stereo)
        spec = tf.signal.stft(stereo, 16, 8, window_fn=tf.signal.hann_window)
        m, phi = tf.abs(spec), tf.math.angle(spec)
        rec = tf.signal.inverse_stft(tf.complex(m * tf.cos(phi), m * tf.sin(phi)), 16, 8,
                                     window_fn=tf.signal.inverse_stft_window_fn(8))
        loss = tf.reduce_sum(rec[:, 8:-8] ** 2)
    return y, errors, rec, tape.gradient(loss, stereo)


# ---------------------------------------------------------------------------
# CTC
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_ocr_ctc_layer_with_padded_labels_trained_then_greedy_decoded(tf):
    """keras.io's OCR ``CTCLayer`` as a function: ``tf.nn.ctc_loss`` on batch-major softmax inputs
    (``logits_time_major=False``), blank the last class (``blank_index=-1``), labels padded with
    the blank to a fixed width and their true ``label_length``, all frames valid; a per-column
    model (dense over image columns, then a bidirectional-free GRU-less projection) trained by
    Adam in a compiled step; then ``ctc_greedy_decoder`` on time-major logits and the decoded
    ``SparseTensor`` made dense with ``-1`` padding, as ``keras.backend.ctc_decode`` returns it."""
    rs = np.random.RandomState(4051)
    images = tf.constant(rs.randn(3, 8, 5).astype(np.float32))   # [batch, width (time), height]
    labels = tf.constant([[1, 2, 0, 4], [3, 3, 4, 4], [2, 4, 4, 4]], tf.int32)   # 4 pads (the blank)
    label_length = tf.constant([3, 2, 1])
    logit_length = tf.fill([3], 8)
    w1 = tf.Variable(init_array((5, 6), 4052))
    w2 = tf.Variable(init_array((6, 5), 4053))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def logits_of(x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)

    @tf.function
    def train(x):
        with tf.GradientTape() as tape:
            logits = logits_of(x)
            per = tf.nn.ctc_loss(labels, logits, label_length, logit_length,
                                 logits_time_major=False, blank_index=-1)
            loss = tf.reduce_mean(per)
        g = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(g, [w1, w2]))
        return per, g

    out = [train(images) for _ in range(3)]
    with tf.GradientTape() as tape:
        logits = logits_of(images)
        tape.watch(logits)
        per = tf.nn.ctc_loss(labels, logits, label_length, logit_length, logits_time_major=False,
                             blank_index=-1)
    g_logits = tape.gradient(per, logits)
    decoded, neg_sum = tf.nn.ctc_greedy_decoder(tf.transpose(logits, [1, 0, 2]), logit_length,
                                                blank_index=-1)
    dense = tf.sparse.to_dense(decoded[0], default_value=-1)
    return (out, per, g_logits, neg_sum, tf.cast(decoded[0].indices, tf.int32),   # (int64 in TF: int32
            tf.cast(decoded[0].values, tf.int32), tf.cast(dense, tf.int32), w1, w2)  # without x64)


@parity(modes=True, **LOOSE)
def test_ctc_with_sparse_labels_a_repeat_a_too_long_label_and_varying_logit_lengths(tf):
    """``tf.nn.ctc_loss`` given ``tf.sparse.from_dense`` labels (``label_length=None``), blank 0,
    time-major logits with per-row ``logit_length``: a repeated label (``a a`` needs a blank
    between: 3 frames) and one that fits exactly; a third row whose label is longer than its
    frames allow: with dense labels TF gives its loss and gradient, with sparse labels (TF's
    ``CTCLoss`` kernel) it raises ``InvalidArgumentError``; the gradient to the logits (zero past
    each row's length) and the loss of the unique-label form (``ctc_unique_labels``)."""
    rs = np.random.RandomState(4061)
    logits = tf.constant(rs.randn(5, 3, 4).astype(np.float32))
    dense = tf.constant([[2, 2, 0], [1, 3, 0], [1, 2, 3]], tf.int32)
    sparse = tf.sparse.from_dense(dense)
    sparse2 = tf.sparse.from_dense(dense[:2])
    logit_length = tf.constant([5, 3, 2])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        per = tf.nn.ctc_loss(sparse2, logits[:, :2], None, logit_length[:2], logits_time_major=True,
                             blank_index=0)
        per_dense = tf.nn.ctc_loss(dense, logits, tf.constant([2, 2, 3]), logit_length, blank_index=0)
        per_unique = tf.nn.ctc_loss(dense, logits, tf.constant([2, 2, 3]), logit_length,
                                    unique=tf.nn.ctc_unique_labels(dense), blank_index=0)
        feasible = tf.reduce_sum(per)
    too_long = raises(tf.nn.ctc_loss, sparse, logits, None, logit_length, blank_index=0)
    return (tf.cast(sparse.indices, tf.int32), per, per_dense, per_unique, tape.gradient(feasible, logits),
            tape.gradient(per_dense[2], logits), tape.gradient(per_unique, logits), too_long)


@parity(modes=True, **LOOSE)
def test_ctc_beam_search_top_paths_against_greedy_decoding(tf):
    """Inference for a speech model: ``ctc_beam_search_decoder`` (beam 4, top 3 paths; blank the
    last class) and ``ctc_greedy_decoder`` (merged and not) on log-softmax frames of two
    utterances of different lengths; each path's indices, values and dense shape, the paths' log
    probabilities, and the greedy negative sums."""
    rs = np.random.RandomState(4071)
    logits = rs.randn(6, 2, 4).astype(np.float32) * 2.0
    logits[1, 0, 1] = logits[2, 0, 1] = 5.0   # a repeat the greedy decoder merges
    x = tf.nn.log_softmax(tf.constant(logits))
    lengths = tf.constant([6, 4])
    paths, log_probs = tf.nn.ctc_beam_search_decoder(x, lengths, beam_width=4, top_paths=3)
    greedy, neg = tf.nn.ctc_greedy_decoder(x, lengths)
    raw, neg_raw = tf.nn.ctc_greedy_decoder(x, lengths, merge_repeated=False)
    def i32(t):   # (int64 in TF: int32 without x64)
        return tf.cast(t, tf.int32)

    parts = [(i32(p.indices), i32(p.values), i32(p.dense_shape), i32(tf.sparse.to_dense(p, default_value=-1)))
             for p in paths]
    return (parts, log_probs, i32(greedy[0].values), i32(greedy[0].dense_shape), neg,
            i32(tf.sparse.to_dense(raw[0], default_value=-1)), neg_raw)


# ---------------------------------------------------------------------------
# Video
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_per_frame_conv_frame_differences_and_temporal_attention_pooling(tf):
    """A video classifier from raw ops: clips ``[B, T, H, W, C]`` folded to ``[B*T, H, W, C]`` for a
    shared ``conv2d``, unfolded, a motion stream from frame differences (``x[:, 1:] - x[:, :-1]``,
    one frame fewer), temporal attention pooling (a learned query, ``softmax`` over time), two
    Adam steps in a compiled step; the attention weights, losses and gradients."""
    rs = np.random.RandomState(4081)
    clips = tf.constant(rs.randn(2, 4, 6, 6, 1).astype(np.float32))
    k = tf.Variable(init_array((3, 3, 1, 3), 4082))
    km = tf.Variable(init_array((3, 3, 1, 3), 4083))
    q = tf.Variable(init_array((6,), 4084))
    wc = tf.Variable(init_array((6, 2), 4085))
    params = [k, km, q, wc]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def features(x, kernel):
        b, t = tf.shape(x)[0], tf.shape(x)[1]
        flat = tf.reshape(x, tf.concat([[b * t], tf.shape(x)[2:]], 0))
        h = tf.nn.relu(tf.nn.conv2d(flat, kernel, 1, "VALID"))
        return tf.reshape(tf.reduce_mean(h, axis=[1, 2]), [b, t, 3])

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            app = features(x, k)[:, 1:]
            mot = features(x[:, 1:] - x[:, :-1], km)
            feats = tf.concat([app, mot], -1)
            att = tf.nn.softmax(tf.einsum("btd,d->bt", feats, q), axis=1)
            pooled = tf.reduce_sum(feats * att[..., None], axis=1)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(pooled, wc)))
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, att, g

    return [step(clips, tf.constant([1, 0])) for _ in range(2)], params


@parity(modes=True, **LOOSE)
def test_conv3d_and_max_pool3d_clip_classifier_with_momentum(tf):
    """A C3D-style block from raw ops: ``tf.nn.conv3d`` (3x3x3, SAME, stride 1), ReLU,
    ``tf.nn.max_pool3d`` (1x2x2), a second ``conv3d`` with a temporal stride of 2 (VALID), global
    average pooling and a dense head; SGD with momentum, two eager steps and one compiled."""
    rs = np.random.RandomState(4091)
    clips = tf.constant(rs.randn(2, 4, 6, 6, 2).astype(np.float32))
    k1 = tf.Variable(init_array((3, 3, 3, 2, 3), 4092, scale=0.3))
    k2 = tf.Variable(init_array((2, 2, 2, 3, 4), 4093, scale=0.3))
    wc = tf.Variable(init_array((4, 3), 4094))
    params = [k1, k2, wc]
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv3d(x, k1, [1, 1, 1, 1, 1], "SAME"))
            h = tf.nn.max_pool3d(h, [1, 1, 2, 2, 1], [1, 1, 2, 2, 1], "VALID")
            h = tf.nn.relu(tf.nn.conv3d(h, k2, [1, 2, 1, 1, 1], "VALID"))
            logits = tf.matmul(tf.reduce_mean(h, axis=[1, 2, 3]), wc)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return h.shape.as_list(), loss, g

    y = tf.constant([2, 0])
    return step(clips, y), step(clips, y), tf.function(step)(clips, y), params


@parity(modes=True, **LOOSE)
def test_clip_classification_by_segment_mean_over_clips_of_different_lengths(tf):
    """Sequence-to-one classification over variable-length clips: all frames' features
    concatenated, a clip id per frame, frame embeddings pooled by ``tf.math.segment_mean``
    (sorted ids) and by ``unsorted_segment_mean`` over a shuffled order (an empty clip id in
    between gets zeros), a linear classifier trained by Adam three steps (one compiled); the
    pooled features and the gradients."""
    rs = np.random.RandomState(4101)
    lengths = [3, 1, 4]
    frames = tf.constant(rs.randn(sum(lengths), 5).astype(np.float32))
    ids = tf.constant(np.repeat(np.arange(3), lengths).astype(np.int32))
    perm = rs.permutation(sum(lengths))
    shuffled = tf.gather(frames, perm)
    ids_gap = tf.gather(ids * 2, perm)   # clip ids 0, 2, 4: 1 and 3 are empty
    we = tf.Variable(init_array((5, 4), 4102))
    wc = tf.Variable(init_array((4, 2), 4103))
    y = tf.constant([1, 0, 1])
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def step(frames, shuffled):
        with tf.GradientTape() as tape:
            emb = tf.nn.relu(tf.matmul(frames, we))
            pooled = tf.math.segment_mean(emb, ids)
            pooled_u = tf.math.unsorted_segment_mean(tf.nn.relu(tf.matmul(shuffled, we)), ids_gap, 5)
            logits = tf.matmul(pooled, wc)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            loss2 = tf.reduce_sum(tf.square(pooled_u))
        g = tape.gradient([loss, loss2], [we, wc])
        opt.apply_gradients(zip(g, [we, wc]))
        return loss, pooled, pooled_u, g

    return step(frames, shuffled), tf.function(step)(frames, shuffled), step(frames, shuffled), we, wc


@parity(modes=True, **SPEC)
def test_stft_with_pad_end_rfft_of_hand_framed_audio_and_multichannel_frames(tf):
    """Three ways to a spectrogram of a stereo batch ``[batch, channels, samples]``: ``stft`` with
    ``pad_end=True`` and an explicit longer ``fft_length``; frames by ``tf.signal.frame(...,
    pad_end=True, pad_value=0.)``, a Hann window and ``tf.signal.rfft``; and frames taken along
    ``axis=-2`` of a ``[batch, samples, channels]`` layout; the gradient of a power-spectrum loss
    to the waveform from each (equal for the first two)."""
    rs = np.random.RandomState(4111)
    x = tf.constant(rs.randn(2, 2, 50).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        s1 = tf.signal.stft(x, 16, 6, fft_length=32, pad_end=True)
        frames = tf.signal.frame(x, 16, 6, pad_end=True, pad_value=0.0)
        s2 = tf.signal.rfft(frames * tf.signal.hann_window(16), fft_length=[32])
        f3 = tf.signal.frame(tf.transpose(x, [0, 2, 1]), 16, 6, axis=-2)
        p1 = tf.reduce_mean(tf.square(tf.abs(s1)))
        p2 = tf.reduce_mean(tf.math.real(s2 * tf.math.conj(s2)))
        p3 = tf.reduce_sum(f3[:, :, ::2] ** 2)
    return (s1.shape.as_list(), frames.shape.as_list(), f3.shape.as_list(), tf.abs(s1), tf.abs(s2), p1, p2,
            [tape.gradient(p, x) for p in (p1, p2, p3)])


@parity(modes=True, **LOOSE)
def test_ctc_in_a_step_compiled_for_any_batch_and_length_with_blank_zero(tf):
    """A speech model's training step compiled once with ``input_signature`` of unknown batch, frames
    and label width: ``tf.nn.ctc_loss`` with blank 0 (labels 1..3, padded with 0), batch-major
    logits, ``logit_length`` from a frame mask's sum; two batches of different shapes go through
    the one trace (a Python counter counts traces, as TF), and the per-example losses, gradients and
    weights come back."""
    rs = np.random.RandomState(4121)
    w = tf.Variable(init_array((3, 4), 4122))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32), tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None, None], tf.float32)])
    def step(feats, labels, frame_mask):
        traces.append(1)
        with tf.GradientTape() as tape:
            logits = tf.einsum("btf,fc->btc", feats, w)
            label_length = tf.reduce_sum(tf.cast(labels > 0, tf.int32), axis=1)
            logit_length = tf.cast(tf.reduce_sum(frame_mask, axis=1), tf.int32)
            per = tf.nn.ctc_loss(labels, logits, label_length, logit_length, logits_time_major=False,
                                 blank_index=0)
            loss = tf.reduce_mean(per / tf.cast(label_length, tf.float32))
        g = tape.gradient(loss, w)
        opt.apply_gradients([(g, w)])
        return per, g

    b1 = (rs.randn(2, 6, 3).astype(np.float32), np.array([[1, 2, 0], [3, 0, 0]], np.int32),
          np.array([[1] * 6, [1] * 4 + [0] * 2], np.float32))
    b2 = (rs.randn(3, 5, 3).astype(np.float32), np.array([[2, 2], [1, 3], [3, 0]], np.int32),
          np.array([[1] * 5, [1] * 5, [1] * 3 + [0] * 2], np.float32))
    out = [step(*b1), step(*b2), step(*b1)]
    return out, len(traces), w


@xfail_on_tapejax("static shapes (README: XLA compiles static shapes): segment_mean's number of rows is a value of "
                  "its ids, which inside a tapejax.function are a traced argument (TF's graph gives [None, 4])")
@parity(**LOOSE)
def test_clip_pooling_step_compiled_with_the_clip_ids_as_an_argument(tf):
    """The segment-pooled clip classifier's step compiled with the frames' clip ids passed in (a
    batch of clips per call, as a ``tf.data`` pipeline gives them): ``segment_mean`` then has as
    many rows as the largest id says."""
    rs = np.random.RandomState(4131)
    we = tf.Variable(init_array((5, 4), 4132))

    @tf.function
    def step(frames, ids):
        with tf.GradientTape() as tape:
            pooled = tf.math.segment_mean(tf.nn.relu(tf.matmul(frames, we)), ids)
            loss = tf.reduce_sum(tf.square(pooled))
        return pooled, tape.gradient(loss, we)

    return (step(rs.randn(6, 5).astype(np.float32), tf.constant([0, 0, 1, 2, 2, 2])),
            step(rs.randn(6, 5).astype(np.float32), tf.constant([0, 1, 1, 1, 1, 3])))


@xfail_on_tapejax("static shapes (README: XLA compiles static shapes): the decoded SparseTensor's number of "
                  "values is a value of the logits, so tapejax's decoders run on host values, not in a trace")
@parity(**LOOSE)
def test_greedy_ctc_decoding_inside_a_compiled_inference_function(tf):
    """Inference compiled as one ``tf.function``: the model's logits, ``ctc_greedy_decoder`` and
    ``sparse.to_dense(..., -1)`` inside it."""
    rs = np.random.RandomState(4141)
    w = tf.Variable(init_array((3, 4), 4142))

    @tf.function
    def decode(feats, lengths):
        logits = tf.transpose(tf.einsum("btf,fc->btc", feats, w), [1, 0, 2])
        decoded, neg = tf.nn.ctc_greedy_decoder(logits, lengths)
        return tf.cast(tf.sparse.to_dense(decoded[0], default_value=-1), tf.int32), neg

    return decode(rs.randn(2, 6, 3).astype(np.float32), tf.constant([6, 4]))
