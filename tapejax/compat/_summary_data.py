"""The host-side data of ``tf.summary`` values, in TF2's layouts (NumPy only).

* ``scalar_value``: float32, as TF's ``scalars`` plugin stores every scalar;
* ``histogram_buckets``: TF's ``[k, 3]`` float64 table (left edge, right
  edge, count): ``k`` equal-width buckets between the data's min and max,
  the last bucket closed, the last edge exactly the max; a single distinct
  value puts every element in the last bucket of zero width; empty data
  gives ``k`` rows of zeros (TensorBoard's ``summary_v2._buckets``);
* ``image_strings``: ``[width, height, png_1 ... png_n]`` for the first
  ``max_outputs`` images, converted to uint8 as TF's
  ``convert_image_dtype(..., saturate=True)`` does (floats scaled by 255.5
  and truncated; wider ints shifted) and PNG-encoded by tensorboardX;
* ``text_array``: a string or strings as a NumPy bytes array;
* ``wav_strings``: TensorBoard's ``[k, 2]`` audio table (WAV bytes, empty label) for the first
  ``max_outputs`` clips, each encoded as TF's ``EncodeWav`` (``ops.wav.wav_bytes``: 16-bit
  PCM, TF's rounding and 44-byte header).
"""
from typing import Any

import numpy as np

from ..ops.wav import wav_bytes

__all__ = ["scalar_value", "histogram_buckets", "image_strings", "text_array", "wav_strings"]


def scalar_value(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).reshape(())


def histogram_buckets(data: np.ndarray, k: int) -> np.ndarray:
    k = max(0, int(k))
    x = np.asarray(data, dtype=np.float64).reshape(-1)
    if x.size == 0 or k == 0:
        return np.zeros((k, 3), np.float64)
    lo, hi = x.min(), x.max()
    if hi - lo == 0:
        edges = np.full(k, hi)
        counts = np.zeros(k)
        counts[-1] = x.size
        return np.stack([edges, edges, counts], axis=1)
    width = (hi - lo) / k
    idx = np.minimum(np.floor((x - lo) / width).astype(np.int64), k - 1)
    counts = np.bincount(idx, minlength=k).astype(np.float64)
    edges = np.linspace(lo, hi, k + 1)
    edges[-1] = hi
    return np.stack([edges[:-1], edges[1:], counts], axis=1)


def _to_uint8(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.uint8:
        return a
    if a.dtype.kind == "f" or a.dtype.kind == "V":   # (bfloat16 is a void-kind NumPy type)
        scaled = np.asarray(a, np.float64) * 255.5
        return np.clip(scaled, 0, 255).astype(np.uint8)
    if a.dtype.kind == "b":
        return a.astype(np.uint8) * 255
    if a.dtype.kind in "iu":   # TF scales integer images by their range (a right shift)
        bits = np.iinfo(a.dtype).bits - (1 if a.dtype.kind == "i" else 0)
        shift = max(bits - 8, 0)
        return np.clip(a.astype(np.int64) >> shift, 0, 255).astype(np.uint8)
    raise TypeError(f"tf.summary.image: unsupported image dtype {a.dtype}")


def image_strings(data: np.ndarray, max_outputs: int) -> np.ndarray:
    from tensorboardX.summary import make_image  # PNG encoding (Pillow)
    a = np.asarray(data)
    h, w = a.shape[1], a.shape[2]
    imgs = _to_uint8(a[: max(0, max_outputs)])
    pngs = []
    for img in imgs:
        pngs.append(_png(make_image, img))
    return np.array([str(w).encode(), str(h).encode()] + pngs, dtype=object)


def _png(make_image: Any, img: np.ndarray) -> bytes:
    if img.shape[-1] == 1:
        import io

        from PIL import Image
        out = io.BytesIO()
        Image.fromarray(img[..., 0], mode="L").save(out, format="PNG")
        return out.getvalue()
    return make_image(img).encoded_image_string


def text_array(data: Any) -> np.ndarray:
    if isinstance(data, (str, bytes)):
        return np.array([data.encode() if isinstance(data, str) else data], dtype=object).reshape(())
    arr = np.asarray(data, dtype=object)
    flat = [s.encode() if isinstance(s, str) else s for s in arr.reshape(-1)]
    if not all(isinstance(s, bytes) for s in flat):
        raise TypeError(f"tf.summary.text: `data` must be a string or strings; got {data!r}")
    return np.array(flat, dtype=object).reshape(arr.shape)


def wav_strings(data: np.ndarray, rate: int, max_outputs: int) -> np.ndarray:
    clips = np.asarray(data)[:max_outputs]
    out = np.empty((clips.shape[0], 2), dtype=object)
    for i, clip in enumerate(clips):
        out[i, 0] = wav_bytes(np.asarray(clip), rate)
        out[i, 1] = b""
    return out
