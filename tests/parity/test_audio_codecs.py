"""``tf.audio``'s WAV codec (tapejax/data/audio_codecs.py, tapejax/ops/wav.py) against real
TensorFlow 2.21: WAV strings built here (mono, stereo, an 18-byte format chunk, a JUNK chunk
before ``fmt ``, a LIST chunk after it) decoded by both sides with every
``desired_channels`` / ``desired_samples``; each side's ``encode_wav`` read back by TF (rounding
at the half, clipping); each bad input's error class; ``element_spec`` of a decoding map; and TF's
simple-audio tutorial pipeline (file names -> read_file -> decode_wav -> a spectrogram -> batch)
feeding a classifier trained by a compiled step.
"""
import os
import struct

import numpy as np

from .data_helpers import L, softmax_classifier, spec, tmp
from .harness import parity, raises


def _wav(frames, rate=8000, fmt_size=16, before=b"", after_fmt=b"", fmt=1, bits=16, block=None, rate_bytes=None,
         extra_data=b""):
    """A WAV string of int16 ``frames`` ``[n, c]`` with optional chunks around the format chunk."""
    frames = np.asarray(frames, "<i2")
    ch = frames.shape[1]
    block = ch * bits // 8 if block is None else block
    fmt_body = struct.pack("<HHIIHH", fmt, ch, rate, rate * block if rate_bytes is None else rate_bytes, block, bits)
    fmt_body += b"\x00\x00" if fmt_size == 18 else b""
    data = frames.tobytes() + extra_data
    body = b"WAVE" + before + b"fmt " + struct.pack("<I", fmt_size) + fmt_body + after_fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _chunk(tag, payload):
    return tag + struct.pack("<I", len(payload)) + payload


STEREO = np.random.RandomState(0).randint(-32768, 32768, (7, 2))
MONO = np.array([[0], [1], [-1], [32767], [-32768], [16384]])


def _strings():
    return {"stereo": _wav(STEREO), "mono": _wav(MONO, rate=16000), "fmt18": _wav(STEREO, fmt_size=18),
            "junk": _wav(MONO, before=_chunk(b"JUNK", b"\x00" * 6)),
            "list": _wav(STEREO, after_fmt=_chunk(b"LIST", b"INFOabcd"))}


@parity
def test_decode_wav_strings(tf):
    """Each WAV string decoded: samples / 32768 as float32 ``[samples, channels]``, the int32 rate;
    chunks TF skips before and after ``fmt ``."""
    return [tuple(tf.audio.decode_wav(s)) for s in _strings().values()]   # (the named tuples' classes differ)


@parity
def test_decode_wav_desired_channels_and_samples(tf):
    """``desired_channels`` fewer (the first ones) or more (the last one repeated);
    ``desired_samples`` fewer (cropped) or more (zeros); both at once."""
    s, m = _strings()["stereo"], _strings()["mono"]
    out = [tf.audio.decode_wav(s, desired_channels=c) for c in (1, 2, 3)]
    out += [tf.audio.decode_wav(m, desired_channels=2), tf.audio.decode_wav(m, desired_channels=-1)]
    out += [tf.audio.decode_wav(s, desired_samples=n) for n in (3, 7, 10, -1)]
    out.append(tf.audio.decode_wav(m, desired_channels=3, desired_samples=9))
    return [(r.audio, r.sample_rate) for r in out]


@parity
def test_encode_wav_read_by_tf(tf):
    """Each side's ``encode_wav`` read back by TF: the same samples (rounding half away from zero,
    clipping to int16), the header's rate and channels; a float64 NumPy clip is accepted."""
    import tensorflow as real
    clip = np.array([[0.0, 0.5], [-1.0, 1.0], [2.0, -3.0], [-0.00002, 0.99999], [1 / 65536, -1 / 65536],
                     [3 / 65536, -3 / 65536]], np.float32)
    out = []
    for c, rate in ((clip, 8000), (clip[:, :1], 44100), (clip.astype(np.float64), 22050)):
        data = tf.audio.encode_wav(c, rate)
        raw = data.numpy() if hasattr(data, "numpy") else data
        out += [tuple(real.audio.decode_wav(raw)), len(raw), raw[:44]]
    return out


@parity
def test_bad_input(tf):
    """Each bad input gets TF's exception class: a truncated or foreign header, 8- and 24-bit and
    float WAVs, a bad format size, bytes per frame or per second, no data chunk, two data chunks,
    an unknown chunk before ``fmt ``, an odd data size (TF reads past the last sample for another
    chunk); an encode of a 1-D clip, a bad rate, a matrix of rates."""
    good = _strings()["stereo"]
    bad = [b"", b"RIFF", good[:30], good[:-3], b"RIFX" + good[4:],
           _wav(STEREO, bits=8, block=2), _wav(STEREO, bits=24, block=6), _wav(STEREO, fmt=3),
           _wav(STEREO, fmt_size=20), _wav(STEREO, block=3), _wav(STEREO, rate_bytes=5),
           good.replace(b"data", b"dat_"), good + _chunk(b"data", b"\x00\x00\x00\x00"),
           _wav(MONO, before=_chunk(b"ABCD", b"")), _wav(MONO, extra_data=b"\x01")]
    out = [raises(lambda b=b: tf.audio.decode_wav(b)) for b in bad]
    clip = np.zeros((3, 2), np.float32)
    out += [raises(lambda: tf.audio.encode_wav(np.zeros(3, np.float32), 100)),
            raises(lambda: tf.audio.encode_wav(clip, -1)), raises(lambda: tf.audio.encode_wav(clip, 0)),
            raises(lambda: tf.audio.encode_wav(clip, [100, 200]))]
    return out


def _wav_files():
    d = tmp()
    paths, labels = [], []
    rng = np.random.RandomState(4)
    for i in range(6):
        t = np.arange(160) / 8000.0
        tone = 0.3 * np.sin(2 * np.pi * (400 + 600 * (i % 2)) * t) + 0.01 * rng.randn(160)
        path = os.path.join(d, f"clip{i}.wav")
        with open(path, "wb") as f:
            f.write(_wav((tone[:, None] * 32767).astype(np.int16)[: 120 + 8 * i]))
        paths.append(path)
        labels.append(i % 2)
    return paths, np.array(labels, np.int32)


@parity
def test_decoding_map_element_spec(tf):
    """``element_spec`` of maps that decode: samples and channels unknown unless desired, the
    rate a scalar."""
    paths, _ = _wav_files()
    files = tf.data.Dataset.from_tensor_slices(paths).map(tf.io.read_file)
    return [spec(files.map(lambda s: tf.audio.decode_wav(s)).element_spec),
            spec(files.map(lambda s: tf.audio.decode_wav(s, desired_channels=1)).element_spec),
            spec(files.map(lambda s: tf.audio.decode_wav(s, desired_channels=1, desired_samples=160)).element_spec)]


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_simple_audio_pipeline_trains(tf):
    """TF's simple-audio tutorial on tiny clips: file names and labels -> read_file -> decode_wav
    (one channel, padded to 160 samples) -> squeeze -> |stft| -> flattened, batched; a softmax
    classifier trained two epochs by a compiled step; the batches and the losses."""
    paths, labels = _wav_files()

    def load(path, label):
        audio, _ = tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1, desired_samples=160)
        spectrogram = tf.abs(tf.signal.stft(tf.squeeze(audio, axis=-1), frame_length=32, frame_step=16))
        return tf.reshape(spectrogram, [-1]), label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).map(load).batch(3)
    n_in = int(ds.element_spec[0].shape[-1])
    _, _, step = softmax_classifier(tf, n_in, n_classes=2, lr=0.1)
    losses = [step(x, y) for _ in range(2) for x, y in ds]
    return L(ds), losses
