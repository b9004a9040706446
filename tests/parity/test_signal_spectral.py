"""``tf.signal``'s spectral layer under TensorFlow and tapejax: ``stft`` / ``inverse_stft``, the mel
matrix, MFCCs, ``dct`` / ``idct``, the MDCT, and a user's program (a log-mel spectrogram classifier
trained for a few steps, deferred, eager and inside ``tf.function``).  The FFTs, framing and
windows they are made of are in ``test_signal.py``.
"""
import numpy as np

from .harness import parity, raises
from .test_signal import AT, RNG, RT, XB, _loss

# -- stft, inverse_stft, mel, mfcc, dct -----------------------------------------------------------

AUDIO = (np.sin(np.arange(2 * 300, dtype=np.float64) * 0.07) + 0.3 * RNG.normal(size=600)).reshape(2, 300).astype(
    np.float32)


@parity(rtol=RT, atol=1e-3, modes=True)
def test_stft_and_inverse(tf):
    """stft with the default fft_length (a power of two), an explicit longer one, pad_end, no window,
    hamming; inverse_stft with inverse_stft_window_fn reconstructs the inside of the signal; gradients."""
    x = tf.constant(AUDIO)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        s1 = tf.signal.stft(x, 40, 16)
        s2 = tf.signal.stft(x, 40, 10, fft_length=100, pad_end=True)
        s3 = tf.signal.stft(x, 32, 32, window_fn=None)
        s4 = tf.signal.stft(x, 25, 8, window_fn=tf.signal.hamming_window)
        back = tf.signal.inverse_stft(s1, 40, 16, window_fn=tf.signal.inverse_stft_window_fn(16))
        back2 = tf.signal.inverse_stft(s2, 40, 10, fft_length=100)
        back3 = tf.signal.inverse_stft(s1, 40, 16, fft_length=32, window_fn=None)
        loss = tf.reduce_sum(tf.abs(s1)) + tf.reduce_sum(tf.abs(s2) ** 2) * 1e-3 + tf.reduce_sum(back * back2[:, :back.shape[1]])
    return [s1, s2, s3, s4, back, back2, back3, t.gradient(loss, x),
            t.gradient(tf.reduce_sum(tf.math.real(s4)), x)]


@parity(rtol=RT, atol=AT)
def test_inverse_stft_window_fn(tf):
    """inverse_stft_window_fn for hops that divide the frame and not, and a window with zeros."""
    out = [tf.signal.inverse_stft_window_fn(s)(40, tf.float32) for s in (10, 16, 40)]
    out.append(tf.signal.inverse_stft_window_fn(4, forward_window_fn=tf.signal.vorbis_window)(8, dtype=tf.float32))
    out.append(tf.signal.inverse_stft_window_fn(3, forward_window_fn=lambda n, dtype: tf.signal.hann_window(
        n, periodic=False, dtype=dtype))(9, tf.float32))
    return out


@parity
def test_stft_errors(tf):
    """A non-scalar frame_length (ValueError), a scalar signal (ValueError), int signals (ValueError from
    the window's dtype), a complex stft to inverse_stft of too low a rank (ValueError)."""
    x = tf.constant(AUDIO)
    return [raises(tf.signal.stft, x, [40], 16), raises(tf.signal.stft, tf.constant(1.0), 4, 2),
            raises(tf.signal.stft, tf.range(100), 16, 8), raises(tf.signal.inverse_stft, tf.zeros([5], tf.complex64), 8, 4),
            raises(tf.signal.inverse_stft, tf.zeros([3, 5], tf.complex64), 8, [4])]


@parity(rtol=RT, atol=AT)
def test_linear_to_mel_weight_matrix(tf):
    """The default matrix, a 16 kHz one with zero lower edge and Nyquist upper edge, few spectrogram bins
    (empty filters), float64 not needed: a sample_rate Tensor; TF's edge rows (DC row zero)."""
    m = tf.signal.linear_to_mel_weight_matrix
    return [m(), m(40, 257, 16000, 0.0, 8000.0), m(8, 9, 8000, 300.0, 3000.0), m(3, 65, tf.constant(16000.0), 20.0, 7600.0),
            m(num_mel_bins=64, num_spectrogram_bins=513, sample_rate=22050, lower_edge_hertz=80.0,
              upper_edge_hertz=7600.0)]


@parity(x64=True, rtol=1e-6, atol=1e-8)
def test_linear_to_mel_weight_matrix_float64(tf):
    """dtype=float64."""
    return tf.signal.linear_to_mel_weight_matrix(10, 33, 16000, 100.0, 7000.0, dtype=tf.float64)


@parity(rtol=RT, atol=AT)
def test_mel_matrix_gradient_in_sample_rate(tf):
    """TF differentiates the matrix in sample_rate and the edge frequencies (Tensors)."""
    sr, lo, hi = tf.constant(16000.0), tf.constant(100.0), tf.constant(7000.0)
    with tf.GradientTape() as t:
        t.watch([sr, lo, hi])
        m = tf.signal.linear_to_mel_weight_matrix(6, 33, sr, lo, hi)
        loss = _loss(tf, m)
    return [m, t.gradient(loss, [sr, lo, hi])]


@parity
def test_mel_matrix_errors(tf):
    """TF's ValueErrors: non-positive mel bins, a negative lower edge, lower >= upper, a non-positive
    sample rate, an upper edge above Nyquist, an int dtype."""
    m = tf.signal.linear_to_mel_weight_matrix
    return [raises(m, 0), raises(m, 20, 129, 8000, -1.0), raises(m, 20, 129, 8000, 500.0, 400.0),
            raises(m, 20, 129, 0, 125.0, 3800.0), raises(m, 20, 129, 8000, 125.0, 4100.0),
            raises(m, 20, 129, 8000, 125.0, 3800.0, tf.int32)]


@parity(rtol=RT, atol=AT, modes=True)
def test_dct_idct(tf):
    """dct / idct of types 1-4, unnormalised and ortho (not type 1), n cropping and padding; round trips;
    gradients."""
    x = tf.constant(XB)
    out = []
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        for k in (1, 2, 3, 4):
            out += [tf.signal.dct(x, type=k), tf.signal.idct(x, type=k), tf.signal.dct(x, type=k, n=4),
                    tf.signal.dct(x, type=k, n=9)]
            if k != 1:
                out += [tf.signal.dct(x, type=k, norm="ortho"), tf.signal.idct(tf.signal.dct(x, type=k, norm="ortho"),
                                                                               type=k, norm="ortho")]
        loss = tf.add_n([_loss(tf, o) for o in out])
    return out + [t.gradient(loss, x), t.gradient(_loss(tf, tf.signal.dct(x, type=1)), x)]


@parity(x64=True, rtol=1e-6, atol=1e-6)
def test_dct_float64(tf):
    """float64 DCTs."""
    x = tf.constant(XB.astype(np.float64))
    return [tf.signal.dct(x, type=k) for k in (1, 2, 3, 4)] + [tf.signal.idct(x, norm="ortho")]


@parity
def test_dct_errors(tf):
    """axis other than -1 (NotImplementedError), n < 1, type 5, ortho type 1, type 1 of one sample, an
    unknown norm, an int input (ValueError)."""
    x = tf.constant(XB)
    d = tf.signal.dct
    return [raises(d, x, axis=0), raises(d, x, n=0), raises(d, x, type=5), raises(d, x, type=1, norm="ortho"),
            raises(d, tf.zeros([3, 1]), type=1), raises(d, x, norm="forward"), raises(d, tf.constant([1, 2, 3])),
            raises(tf.signal.idct, x, type=0)]


@parity(rtol=RT, atol=AT)
def test_mfccs(tf):
    """mfccs_from_log_mel_spectrograms of a log-mel spectrogram, with its gradient; no mel bins (ValueError)."""
    x = tf.constant(AUDIO)
    with tf.GradientTape() as t:
        t.watch(x)
        mag = tf.abs(tf.signal.stft(x, 64, 32))
        mel = tf.tensordot(mag, tf.signal.linear_to_mel_weight_matrix(16, 33, 8000, 60.0, 3800.0), 1)
        mfcc = tf.signal.mfccs_from_log_mel_spectrograms(tf.math.log(mel + 1e-6))[..., :8]
        loss = tf.reduce_sum(mfcc * mfcc)
    return [mfcc, t.gradient(loss, x), raises(tf.signal.mfccs_from_log_mel_spectrograms, tf.zeros([2, 0]))]


@parity(rtol=RT, atol=1e-3)
def test_mdct(tf):
    """mdct / inverse_mdct (vorbis window, none, ortho): the pair reconstructs the inside of the signal."""
    x = tf.constant(AUDIO[:, :256])
    m = tf.signal.mdct(x, 16)
    with tf.GradientTape() as t:
        t.watch(x)
        mo = tf.signal.mdct(x, 32, norm="ortho", window_fn=None, pad_end=True)
        loss = tf.reduce_sum(mo * mo)
    return [m, tf.signal.inverse_mdct(m), mo, tf.signal.inverse_mdct(mo, norm="ortho", window_fn=None),
            t.gradient(loss, x), raises(tf.signal.mdct, x, 10)]


# -- a user's program: a spectrogram classifier -----------------------------------------------------

def _audio_batch(seed, n=8, length=256):
    """Two classes of noisy tones (low vs high pitch), as float32 [n, length], and int32 labels."""
    r = np.random.default_rng(seed)
    labels = r.integers(0, 2, size=n).astype(np.int32)
    f = np.where(labels == 0, r.uniform(0.05, 0.12, n), r.uniform(0.3, 0.45, n))
    t = np.arange(length)
    x = np.sin(2 * np.pi * f[:, None] * t[None, :] + r.uniform(0, 6, n)[:, None]) + 0.3 * r.normal(size=(n, length))
    return x.astype(np.float32), labels


def _classifier(tf):
    """Variables of a tiny log-mel classifier: a learnable pre-emphasis, a dense layer over 12 mel bands."""
    r = np.random.default_rng(3)
    return {"pre": tf.Variable(0.5), "w": tf.Variable(r.normal(scale=0.1, size=(12, 2)).astype(np.float32)),
            "b": tf.Variable(np.zeros(2, np.float32))}


def _logits(tf, v, x):
    emphasized = x[:, 1:] - v["pre"] * x[:, :-1]
    spec = tf.abs(tf.signal.stft(emphasized, frame_length=64, frame_step=32, window_fn=tf.signal.hann_window))
    mel = tf.tensordot(spec, tf.signal.linear_to_mel_weight_matrix(12, 33, 8000, 50.0, 4000.0), 1)
    feats = tf.reduce_mean(tf.math.log(mel + 1e-3), axis=1)
    return tf.matmul(feats, v["w"]) + v["b"]


def _xent(tf, logits, labels):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _train(tf, step_fn, steps=5):
    v = _classifier(tf)
    losses, accuracies = [], []
    xe, ye = _audio_batch(99)
    for i in range(steps):
        x, y = _audio_batch(i)
        losses.append(step_fn(v, tf.constant(x), tf.constant(y)))
        pred = tf.argmax(_logits(tf, v, tf.constant(xe)), axis=1, output_type=tf.int32)   # evaluation between steps
        accuracies.append(tf.reduce_mean(tf.cast(tf.equal(pred, tf.constant(ye)), tf.float32)))
    return losses, accuracies, [v["pre"], v["w"], v["b"]]


def _eager_step(tf):
    def step(v, x, y):
        with tf.GradientTape() as t:
            loss = _xent(tf, _logits(tf, v, x), y)
        grads = t.gradient(loss, [v["pre"], v["w"], v["b"]])
        for var, g in zip([v["pre"], v["w"], v["b"]], grads):
            var.assign_sub(0.5 * g)
        return loss
    return step


@parity(rtol=1e-3, atol=1e-4, modes=True)
def test_spectrogram_classifier_trains(tf):
    """stft -> |.| -> mel matrix -> log -> dense, with a learnable pre-emphasis, trained 5 SGD steps with
    an evaluation after each: the same losses, accuracies and weights (deferred and eager)."""
    return _train(tf, _eager_step(tf))


@parity(rtol=1e-3, atol=1e-4, modes=True)
def test_spectrogram_classifier_trains_in_function(tf):
    """The same training step inside tf.function (compiled once, then reused)."""
    return _train(tf, tf.function(_eager_step(tf)))


@parity(rtol=RT, atol=AT, modes=True)
def test_log_mel_features_in_a_dataset_map(tf):
    """Signal preprocessing in a tf.data map (stft with pad_end -> |.| -> mel -> log), batched, then one
    training step of a dense layer on each batch."""
    audio = np.random.default_rng(11).normal(size=(6, 200)).astype(np.float32)
    mel = tf.signal.linear_to_mel_weight_matrix(8, 33, 8000, 50.0, 4000.0)

    def features(x, y):
        spec = tf.abs(tf.signal.stft(x, 64, 32, pad_end=True))
        return tf.math.log(tf.tensordot(spec, mel, 1) + 1e-3), y

    ds = tf.data.Dataset.from_tensor_slices((audio, np.arange(6, dtype=np.int32) % 2)).map(features).batch(4)
    w = tf.Variable(np.full((8, 2), 0.1, np.float32))
    out = []
    for feats, labels in ds:
        with tf.GradientTape() as t:
            logits = tf.matmul(tf.reduce_mean(feats, axis=1), w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        w.assign_sub(0.1 * t.gradient(loss, w))
        out.append((feats, labels, loss))
    return out, w
