"""Keras's bicubic resize with TF's kernel: ``Resizing(interpolation="bicubic")``, ``keras.ops.image.resize``.

Keras 3's JAX backend resizes by ``jax.image.resize``, whose cubic kernel treats the taps that fall
outside the image otherwise than TF's ``ResizeBicubic`` (which drops them and renormalises, and
reads Keys' kernel from a 1024-entry table): the border pixels differ by about 1e-4 relative from
what tf_keras' ``Resizing`` and Keras 3 on TensorFlow give.  Bilinear, nearest and Lanczos agree.
Here a bicubic resize without antialiasing, cropping or padding, channels last, is TF's
(``ops.image_resize.bicubic_weights``, the separable product in float32); anything else is
Keras's own.
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..ops.image_resize import bicubic_weights

__all__ = ["install"]

_ORIG: dict = {}


def _resize(images, size, interpolation="bilinear", antialias=False, crop_to_aspect_ratio=False,
            pad_to_aspect_ratio=False, fill_mode="constant", fill_value=0.0, data_format=None) -> Any:
    from keras.src import backend
    rank = len(getattr(images, "shape", ()))
    if (interpolation != "bicubic" or antialias or crop_to_aspect_ratio or pad_to_aspect_ratio
            or rank not in (3, 4) or backend.standardize_data_format(data_format) != "channels_last"
            or len(tuple(size)) != 2):
        return _ORIG["resize"](images, size, interpolation=interpolation, antialias=antialias,
                               crop_to_aspect_ratio=crop_to_aspect_ratio, pad_to_aspect_ratio=pad_to_aspect_ratio,
                               fill_mode=fill_mode, fill_value=fill_value, data_format=data_format)
    h, w = (int(d) for d in size)
    x = jnp.asarray(images)
    x4 = x[None] if rank == 3 else x
    out = jnp.einsum("oh,bhwc,pw->bopc", jnp.asarray(bicubic_weights(x4.shape[1], h)), x4.astype(jnp.float32),
                     jnp.asarray(bicubic_weights(x4.shape[2], w)))
    if jnp.issubdtype(x.dtype, jnp.floating):
        out = out.astype(x.dtype)
    return out[0] if rank == 3 else out


def install() -> None:
    """Put ``_resize`` in place of Keras's JAX backend ``image.resize`` (once)."""
    from keras.src.backend.jax import image
    if "resize" in _ORIG:
        return
    _ORIG["resize"] = image.resize
    image.resize = _resize
