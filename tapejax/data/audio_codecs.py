"""``tf.audio``: WAV decoding and encoding on host strings (``hostops``' conventions), with NumPy.

``decode_wav(contents)`` turns the bytes of one WAV file (a ``bytes`` scalar, as
``tf.io.read_file`` returns it or a string component reaches a ``map`` function) into
``(audio, sample_rate)``: float32 ``[samples, channels]`` and an int32 scalar.  ``encode_wav``
turns a concrete float ``[frames, channels]`` Tensor or array into the WAV ``bytes``.  Like every
host string op they run eagerly (per element in a dataset function: ``hostfn``); a traced
``contents`` gets ``TracedStringError``.

TF's rules (``core/kernels/decode_wav_op.cc``; the file layout's are ``ops.wav``'s): a sample
``s`` becomes ``s / 32768``; ``desired_channels`` takes the first channels, or repeats the last
one; ``desired_samples`` crops, or pads with zeros; ``encode_wav`` takes a 2-D float32 clip and
a positive scalar rate.  The errors are TF's ``InvalidArgumentError``s with its messages.

Under ``hostops.perturbed`` (``hostfn``'s spec inference) a decoded clip is one sample longer
(and one channel wider when ``desired_channels`` is not given), so those dimensions are unknown
in a ``map``'s ``element_spec``, as TF's shape inference leaves them.
"""
from typing import Any, NamedTuple, Optional

import numpy as np
from jax.core import Tracer as _Tracer

from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..ops.wav import parse_wav, wav_bytes
from .hostops import TracedStringError, host_strings, is_perturbed
from .hostvalues import numeric_result


class DecodeWav(NamedTuple):
    """``decode_wav``'s result, TF's named tuple: the clip and its sample rate."""
    audio: Tensor
    sample_rate: Tensor


def _error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(None, None, message)


def decode_wav(contents: Any, desired_channels: int = -1, desired_samples: int = -1,
               name: Optional[str] = None) -> DecodeWav:
    """``tf.audio.decode_wav``: ``(audio, sample_rate)`` of one 16-bit PCM WAV string; ``audio``
    float32 ``[samples, channels]`` in [-1, 1), ``sample_rate`` an int32 scalar."""
    a = host_strings(contents, "tf.audio.decode_wav", "contents")
    if a.ndim != 0:
        raise _error(f"contents must be scalar, got shape [{','.join(map(str, a.shape))}]")
    clip = parse_wav(bytes(a[()]))
    samples = clip.samples
    frames, channels = samples.shape
    out_channels = int(desired_channels) if int(desired_channels) > 0 else channels
    out_frames = int(desired_samples) if int(desired_samples) > 0 else frames
    if is_perturbed():   # (spec inference: the sizes a file sets are unknown)
        out_frames += int(desired_samples) <= 0
        out_channels += int(desired_channels) <= 0
    take = np.minimum(np.arange(out_channels), channels - 1)   # (the last channel repeated)
    audio = np.zeros((out_frames, out_channels), np.float32)
    n = min(frames, out_frames)
    audio[:n] = samples[:n][:, take].astype(np.float32) * np.float32(1.0 / 32768)
    return DecodeWav(numeric_result(audio), numeric_result(np.asarray(clip.sample_rate, np.int32)))


def encode_wav(audio: Any, sample_rate: Any, name: Optional[str] = None) -> bytes:
    """``tf.audio.encode_wav``: a float32 ``[frames, channels]`` clip as 16-bit PCM WAV bytes."""
    if isinstance(audio, Tensor) and isinstance(audio.value, _Tracer):
        raise TracedStringError("tf.audio.encode_wav: `audio` is a traced value (inside tapejax.function or another "
                                "JAX trace); encoding gives a string, and string ops run on the host: encode "
                                "concrete clips in eager code or a tf.data map function.")
    a = np.asarray(audio.numpy() if isinstance(audio, Tensor) else audio)
    if isinstance(audio, Tensor) and a.dtype != np.float32:
        kind = {"float64": "double", "float16": "half"}.get(a.dtype.name, a.dtype.name)   # (TF's names)
        raise _error(f"cannot compute EncodeWav as input #0(zero-based) was expected to be a float tensor but is "
                     f"a {kind} tensor")
    a = a.astype(np.float32)
    rate = np.asarray(sample_rate.numpy() if isinstance(sample_rate, Tensor) else sample_rate)
    if rate.ndim != 0:
        raise _error(f"Input sample_rate should be a scalar tensor, got {list(rate.shape)} instead.")
    if a.ndim != 2:
        raise _error(f"audio must be 2-dimensional{list(a.shape)}".replace(", ", ","))
    r = int(rate)
    if r <= 0 or r >= 2 ** 32:
        raise _error(f"sample_rate must be in (0, 2^32), got: {r % 2 ** 64}")
    if a.shape[1] == 0 and a.shape[0] > 0:
        raise _error("audio is null")
    if a.shape[1] == 0 or a.shape[1] >= 2 ** 16:
        raise _error(f"num_channels must be in (0, 2^16), got: {a.shape[1]}")
    return wav_bytes(a, r)


#: ``tf.audio``'s names.
AUDIO_OPS = {"decode_wav": decode_wav, "encode_wav": encode_wav}

__all__ = ["AUDIO_OPS", "DecodeWav", "decode_wav", "encode_wav"]
