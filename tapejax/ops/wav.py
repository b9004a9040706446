"""WAV's 16-bit PCM layout as TensorFlow reads and writes it (``core/lib/wav/wav_io.cc``), in NumPy.

``parse_wav`` reads one WAV string into int16 samples ``[frames, channels]`` and the sample
rate with TF's rules and ``InvalidArgumentError`` messages: only 16-bit PCM (format code 1); the
chunks TF skips before ``fmt `` (JUNK, bext, iXML, qlty, mext, levl, link, axml), any other an
error; a ``fmt `` chunk of 16 or 18 bytes; the header's bytes per frame and per second checked;
chunks after it skipped until the one ``data`` chunk (two are an error).  ``wav_bytes`` writes
TF's 44-byte header and stores ``x`` as ``round(x * 32768)`` (half away from zero, the product
in float32) clamped to int16.  ``tf.audio`` (``tapejax.data.audio_codecs``) and
``tf.summary.audio`` (``tapejax.compat``) both use them.
"""
import struct
from typing import NamedTuple, Optional

import numpy as np

from ..core.errors import InvalidArgumentError

#: Chunks TF skips between ``WAVE`` and ``fmt ``.
_SKIPPED_BEFORE_FORMAT = frozenset({b"JUNK", b"bext", b"iXML", b"qlty", b"mext", b"levl", b"link", b"axml"})
_INT32_MAX = 2 ** 31 - 1


class WavClip(NamedTuple):
    """A decoded WAV file: int16 samples ``[frames, channels]`` and the sample rate."""
    samples: np.ndarray
    sample_rate: int


class _Reader:
    """Reads a WAV string front to back with TF's bounds checks (its error messages)."""

    def __init__(self, data: bytes):
        self.data, self.offset = data, 0

    def skip(self, n: int) -> None:
        end = self.offset + n
        if end > len(self.data):
            raise _error("Data too short when trying to read string")
        self.offset = end

    def text(self, n: int = 4) -> bytes:
        start = self.offset
        self.skip(n)
        return self.data[start:self.offset]

    def expect(self, text: bytes) -> None:
        start = self.offset
        self.skip(len(text))
        found = self.data[start:self.offset]
        if found != text:
            raise _error(f"Header mismatch: Expected {text.decode()} but found {found.decode('latin-1')}")

    def value(self, fmt: str) -> int:
        start = self.offset
        self.skip(struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.data, start)[0]


def _error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(None, None, message)


def parse_wav(data: bytes) -> WavClip:
    """The samples and rate of a 16-bit PCM WAV string (TF's ``DecodeLin16WaveAsFloatVector``)."""
    r = _Reader(data)
    r.expect(b"RIFF")
    r.value("<I")
    r.expect(b"WAVE")
    found = r.text()
    while found != b"fmt ":
        if found not in _SKIPPED_BEFORE_FORMAT:
            raise _error(f"Unexpected field {found.decode('latin-1')}")
        r.skip(r.value("<I"))
        found = r.text()
    format_size = r.value("<I")
    if format_size not in (16, 18):
        raise _error(f"Bad format chunk size for WAV: Expected 16 or 18, but got{format_size}")
    audio_format = r.value("<H")
    if audio_format != 1:
        raise _error(f"Bad audio format for WAV: Expected 1 (PCM), but got{audio_format}")
    channels = r.value("<H")
    if channels < 1:
        raise _error(f"Bad number of channels for WAV: Expected at least 1, but got {channels}")
    rate = r.value("<I")
    bytes_per_second = r.value("<I")
    bytes_per_frame = r.value("<H")
    bits = r.value("<H")
    if bits != 16:
        raise _error(f"Can only read 16-bit WAV files, but received {bits}")
    expected_frame = (bits * channels + 7) // 8
    if bytes_per_frame != expected_frame:
        raise _error(f"Bad bytes per sample in WAV header: Expected {expected_frame} but got {bytes_per_frame}")
    if bytes_per_second != bytes_per_frame * rate:
        raise _error(f"Bad bytes per second in WAV header: Expected {bytes_per_frame * rate} but got "
                     f"{bytes_per_second} (sample_rate={rate}, bytes_per_sample={bytes_per_frame})")
    if format_size == 18:
        r.offset += 2
    samples: Optional[np.ndarray] = None
    while r.offset < len(data):
        chunk = r.text()
        size = r.value("<I")
        if size > _INT32_MAX:
            raise _error(f"WAV data chunk '{chunk.decode('latin-1')}' is too large: {size} bytes, but the limit "
                         f"is {_INT32_MAX}")
        if chunk == b"data":
            if samples is not None:
                raise _error("More than one data chunk found in WAV")
            frames = size // bytes_per_frame
            start = r.offset
            r.skip(2 * frames * channels)
            samples = np.frombuffer(data, "<i2", frames * channels, start).reshape(frames, channels)
        else:
            r.offset += size
    if samples is None:
        raise _error("No data chunk found in WAV")
    return WavClip(samples, rate)


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """One float ``[frames, channels]`` clip as TF's 16-bit PCM WAV bytes (``EncodeAudioAsS16LEWav``)."""
    x = (np.asarray(audio, np.float32) * np.float32(32768.0)).astype(np.float64)   # (float32 product, as TF)
    pcm = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), -32768, 32767).astype("<i2")   # roundf, clamped
    channels = int(audio.shape[1])
    data = pcm.tobytes()
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(data), b"WAVE", b"fmt ", 16, 1, channels,
                         sample_rate, sample_rate * channels * 2, channels * 2, 16, b"data", len(data))
    return header + data


__all__ = ["WavClip", "parse_wav", "wav_bytes"]
