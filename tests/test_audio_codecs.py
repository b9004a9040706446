"""tapejax/data/audio_codecs.py and tapejax/ops/wav.py where TF is not the oracle (TF's values and
errors: tests/parity/test_audio_codecs.py): traced and Tensor inputs refused as the other host
string ops refuse them, the result's named fields, TF's dtype name in encode_wav's error, the
namespaces, the spec a decoding map's sample runs give, and ``tf.summary.audio``'s use of the
same encoder."""
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError
from tapejax.data.hostops import TracedStringError
from tapejax.ops.wav import parse_wav, wav_bytes

CLIP = np.array([[0.0, 0.25], [-0.5, 1.0], [0.75, -1.0]], np.float32)
WAV = tf.audio.encode_wav(CLIP, 16000)


def test_decode_wav_result_and_round_trip():
    """TF's named tuple (``audio``, ``sample_rate``); a round trip gives the clip within one int16
    step (1.0 is clamped to 32767 / 32768); ``parse_wav`` gives the int16 samples."""
    out = tf.audio.decode_wav(WAV)
    assert type(out).__name__ == "DecodeWav" and out._fields == ("audio", "sample_rate")
    assert out.audio.dtype == tf.float32 and out.sample_rate.dtype == tf.int32
    np.testing.assert_allclose(out.audio.numpy(), CLIP, atol=1 / 32768)
    assert int(out.sample_rate) == 16000
    clip = parse_wav(WAV)
    assert clip.samples.dtype == np.int16 and clip.samples.tolist() == [[0, 8192], [-16384, 32767], [24576, -32768]]
    assert clip.sample_rate == 16000 and wav_bytes(CLIP, 16000) == WAV


def test_traced_and_tensor_inputs_are_refused():
    @tf.function
    def encode(x):
        return tf.audio.encode_wav(x, 8000)

    with pytest.raises(TracedStringError, match="traced value"):
        encode(tf.constant(CLIP))
    with pytest.raises(TypeError, match="no string tensors"):
        tf.audio.decode_wav(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="must be strings"):
        tf.audio.decode_wav(3)


def test_encode_wav_dtype_error_names_tf_dtype():
    """A float16 Tensor: TF's InvalidArgumentError naming ``half`` (a float64 NumPy array is
    converted, as TF converts it); no channels with frames: TF's "audio is null"."""
    with pytest.raises(InvalidArgumentError, match="float tensor but is a half tensor"):
        tf.audio.encode_wav(tf.constant(CLIP.astype(np.float16)), 8000)
    assert tf.audio.encode_wav(CLIP.astype(np.float64), 8000) == tf.audio.encode_wav(CLIP, 8000)
    with pytest.raises(InvalidArgumentError, match="audio is null"):
        tf.audio.encode_wav(np.zeros((3, 0), np.float32), 8000)


def test_namespaces():
    import tapejax.audio
    assert tapejax.audio is tf.audio
    assert tf.audio.decode_wav.__module__ == "tapejax.data.audio_codecs"
    assert "audio" in tf.__all__


def test_decoding_map_spec_leaves_file_sizes_unknown(tmp_path):
    """A map that decodes: the samples (and the channels, unless desired) are unknown in its
    ``element_spec``; a desired size is known."""
    path = str(tmp_path / "a.wav")
    with open(path, "wb") as f:
        f.write(WAV)
    files = tf.data.Dataset.from_tensor_slices([path]).map(tf.io.read_file)
    audio, rate = files.map(lambda s: tf.audio.decode_wav(s)).element_spec
    assert audio.shape.as_list() == [None, None] and rate.shape.as_list() == []
    audio, _ = files.map(lambda s: tf.audio.decode_wav(s, desired_channels=1, desired_samples=5)).element_spec
    assert audio.shape.as_list() == [5, 1]
    (got, r), = list(files.map(lambda s: tf.audio.decode_wav(s, desired_samples=5)))
    np.testing.assert_allclose(got.numpy()[:3], CLIP, atol=1 / 32768)
    assert got.shape == (5, 2) and int(r) == 16000


def test_summary_audio_writes_the_same_bytes():
    """``tf.summary.audio``'s table holds ``encode_wav``'s bytes (one encoder, ``ops.wav``)."""
    from tapejax.compat._summary_data import wav_strings
    table = wav_strings(CLIP[None], 16000, 1)
    assert table.shape == (1, 2) and table[0, 0] == WAV and table[0, 1] == b""
