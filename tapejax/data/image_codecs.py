"""``tf.io``'s files and image codecs on host strings (``hostops``' conventions), with Pillow.

``read_file`` / ``write_file`` move a file's bytes; the decoders turn the encoded bytes of one
image (a ``bytes`` scalar, as a string component reaches a ``map`` function) into a uint8 (or
uint16) Tensor of TF's shape, ``[H, W, C]`` (a GIF ``[N, H, W, 3]``); the encoders turn a
concrete image Tensor or array into ``bytes``.  Like every host string op they run eagerly (in a
dataset function over string components, which then runs per element: ``hostfn``); a traced
argument gets ``TracedStringError``.  Pillow (the ``data`` extra) does every codec.

TF's ``DecodeImageV2`` rules, kept here: the format is sniffed from the magic bytes, not taken
from the op's name (``decode_png`` decodes a JPEG or a GIF's first frame, ``decode_gif`` a PNG as
one frame), except that BMP needs ``decode_bmp`` / ``decode_image`` and ``decode_bmp`` takes
nothing else; ``channels`` is checked first, then the format's own limits (GIF 0 or 3, BMP 0, 3
or 4, JPEG not 4).  JPEG pixels: Pillow's libjpeg-turbo decodes with the accurate integer DCT
and fancy upsampling, which is TF's ``dct_method="INTEGER_ACCURATE"`` bit for bit; TF's default
(the fast integer DCT with fancy upsampling) has no Pillow setting, so its pixels differ from TF's
by a few levels (at most 5 on the parity tests' images, 9 on noise at quality 95, about 1 on
average); ``fancy_upscaling=False`` is the fast DCT without it in both, equal again.  Pillow
differs from TF's libpng / BMP settings in three places, adjusted here: RGB to gray (libpng's
truncating fixed point), a 32-bit BMP's fourth byte (alpha for TF), the alpha TF gives a
1/2/4-bit PNG without transparency (its bit depth's maximum).  Not done: 16-bit colour PNGs at 16 bits (Pillow reads and
writes only 8 bits per colour channel; 16-bit grayscale works), WebP / JPEG XL input.
``decode_and_crop_jpeg`` decodes the whole image and crops it (TF decodes the window's rows and
columns only): equal pixels, except with 4:2:0 chroma, where TF's partial decode upsamples the
colour at the crop's right edge as at the image's, so the crop's last column can differ by up
to about 30 levels (both sides agree everywhere else, and everywhere for 4:4:4 files).

Under ``hostops.perturbed`` (``hostfn``'s spec inference) a decoded image is one pixel larger
each way (one channel more when ``channels=0``, one frame more for animations), so those
dimensions are unknown in a ``map``'s ``element_spec``, as TF's shape inference leaves them.
"""
import io as _io
import os
from typing import Any, Optional

import numpy as np
from jax.core import Tracer as _Tracer

from ..core import dtypes as _dtypes
from ..core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, UnimplementedError
from ..core.tensor import Tensor
from ..ops.image_color import convert_image_dtype
from .hostops import TracedStringError, host_strings, is_perturbed
from .hostvalues import numeric_result

_FORMATS = {"jpeg": "JPEG", "png": "PNG", "gif": "GIF", "bmp": "BMP"}
_UNKNOWN = "Unknown image file format. One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required."


def _pil() -> Any:
    """Pillow's ``Image`` module, or ImportError naming the extra."""
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError("tapejax's image codecs (tf.io.decode_png, encode_jpeg ...) need Pillow: "
                          "pip install 'tapejax[data]'") from e
    return Image


def sniff(data: bytes) -> Optional[str]:
    """The image format of ``data`` from its magic bytes (TF's rule), or None."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"GIF8":
        return "gif"
    if data[:2] == b"BM":
        return "bmp"
    return None


def _scalar_string(value: Any, op: str, arg: str, what: str = "`contents` must be scalar but got shape") -> bytes:
    a = host_strings(value, op, arg)
    if a.ndim != 0:
        raise InvalidArgumentError(None, None, f"{what}[{','.join(map(str, a.shape))}]")
    return bytes(a[()])


# -- files

def read_file(filename: Any, name: Optional[str] = None) -> bytes:
    """``tf.io.read_file``: the whole file's bytes (a string value)."""
    path = _scalar_string(filename, "tf.io.read_file", "filename",
                          "Input filename tensor must be scalar, but had shape: ").decode("utf-8", "surrogateescape")
    if os.path.isdir(path):
        raise FailedPreconditionError(None, None, f"{path}; Is a directory")
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise NotFoundError(None, None, f"{path}; No such file or directory") from None


def write_file(filename: Any, contents: Any, name: Optional[str] = None) -> None:
    """``tf.io.write_file``: ``contents`` (one string) written to ``filename``, its directories made."""
    path = _scalar_string(filename, "tf.io.write_file", "filename",
                          "Input filename tensor must be scalar, but had shape: ").decode("utf-8", "surrogateescape")
    data = _scalar_string(contents, "tf.io.write_file", "contents", "Contents tensor must be scalar, but had shape: ")
    if os.path.isdir(path):
        raise FailedPreconditionError(None, None, f"{path}; Is a directory")
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# -- decoding

def _check_channels(channels: int) -> int:
    c = int(channels)
    if c not in (0, 1, 3, 4):
        raise InvalidArgumentError(None, None, f"`channels` must be 0, 1, 3 or 4 but got {c}")
    return c


def _check_dtype(dtype: Any) -> np.dtype:
    d = _dtypes.as_dtype(dtype)
    if d.name not in ("uint8", "uint16"):
        raise InvalidArgumentError(None, None, f"Value for attr 'dtype' of {d.name} is not in the list of allowed "
                                   "values: uint8, uint16")
    return np.dtype(d.name)


def _invalid(fmt: str, data: bytes) -> InvalidArgumentError:
    msg = {"png": "Invalid PNG. Failed to initialize decoder.",
           "jpeg": "jpeg::Uncompress failed. Invalid JPEG data or crop window.",
           "gif": f"Invalid GIF data (size {len(data)}), failed to decode it.",
           "bmp": f"Invalid BMP data (size {len(data)}), failed to decode it."}[fmt]
    return InvalidArgumentError(None, None, msg)


_NATIVE = {"1": 1, "L": 1, "P": 3, "RGB": 3, "LA": 2, "PA": 4, "RGBA": 4, "I;16": 1, "I;16B": 1, "I": 1, "CMYK": 3,
           "YCbCr": 3}
_MODE = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def _frame_pixels(im: Any, channels: int, fmt: str, want16: bool) -> np.ndarray:
    """One Pillow frame as ``[H, W, C]`` uint8, or uint16 when ``want16`` and it has 16 bits."""
    mode = im.mode
    if mode in ("I;16", "I;16B", "I"):                 # a 16-bit grayscale PNG
        a16 = np.asarray(im).astype(np.uint16)[..., None]
        if channels in (3, 4):
            a16 = np.repeat(a16, 3, axis=-1)
            if channels == 4:
                a16 = np.concatenate([a16, np.full(a16.shape[:-1] + (1,), 65535, np.uint16)], -1)
        return a16 if want16 else (a16 >> 8).astype(np.uint8)
    if mode == "P" and channels == 0 and "transparency" in im.info:
        c = 4
    else:
        c = channels or _NATIVE.get(mode, 3)
    if fmt == "gif" and channels == 0:
        c = 3
    if c == 1 and mode not in ("L", "LA", "1"):
        return _libpng_gray(np.asarray(im.convert("RGB")))
    if mode != _MODE[c]:
        im = im.convert(_MODE[c])
    a = np.asarray(im)
    if a.ndim == 2:
        a = a[..., None]
    return a


def _libpng_gray(rgb: np.ndarray) -> np.ndarray:
    """libpng's RGB to gray as TF asks for it (``png_set_rgb_to_gray`` with 0.299 / 0.587 in
    15-bit fixed point, truncated): Pillow's ``convert("L")`` rounds, one level above it at times."""
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    return ((9797 * r + 19234 * g + 3737 * b) >> 15).astype(np.uint8)[..., None]


def _png_is_16bit_colour(data: bytes) -> bool:
    """Whether a PNG's IHDR says 16 bits per sample and a colour type with colour (2, 6)."""
    return len(data) > 25 and data[24] == 16 and data[25] in (2, 6)


def _decode(data: bytes, op: str, channels: int, dtype: np.dtype = np.dtype(np.uint8), animated: bool = False,
            jpeg: Optional[dict] = None) -> np.ndarray:
    """The pixels of ``data`` under TF's ``DecodeImageV2`` rules for ``op`` (the module docstring):
    ``[H, W, C]``, or ``[N, H, W, C]`` when ``animated`` (GIF frames; one frame for other formats)."""
    fmt = sniff(data)
    if fmt is None:
        raise InvalidArgumentError(None, None, _UNKNOWN)
    if op == "DecodeBmp" and fmt != "bmp":
        raise InvalidArgumentError(None, None, f"Trying to decode {_FORMATS[fmt]} format using DecodeBmp op. Use "
                                   f"`decode_{fmt}` or `decode_image` instead.")
    if fmt == "bmp" and op not in ("DecodeBmp", "DecodeImage"):
        raise InvalidArgumentError(None, None, "Trying to decode BMP format using a wrong op. Use `decode_bmp` or "
                                   f"`decode_image` instead. Op used: {op}")
    if fmt == "gif" and channels not in (0, 3):
        raise InvalidArgumentError(None, None, f"channels must be 0 or 3 for GIF, got {channels}")
    if fmt == "bmp" and channels not in (0, 3, 4):
        raise InvalidArgumentError(None, None, f"`channels` must be 0, 3 or 4 for BMP, but got {channels}")
    if fmt == "jpeg" and channels == 4:
        raise InvalidArgumentError(None, None, "JPEG does not support 4 channels")
    want16 = dtype == np.uint16
    if fmt == "png" and want16 and _png_is_16bit_colour(data):
        raise UnimplementedError(None, None, f"{op}: 16-bit colour PNGs decode at 16 bits only under TensorFlow "
                                 "(Pillow reads 8 bits per colour channel); decode with dtype=tf.uint8.")
    Image = _pil()
    try:
        im = Image.open(_io.BytesIO(data))
        if fmt == "jpeg":
            _jpeg_setup(im, channels, **(jpeg or _JPEG_DEFAULTS))
        if fmt == "bmp":
            _bmp_alpha(im)
        frames = []
        n = getattr(im, "n_frames", 1) if fmt == "gif" else 1
        if n > 1 and not animated and op != "DecodeImage":
            raise InvalidArgumentError(None, None, f"Got {n} frames, but animated gifs can only be decoded by "
                                       "tf.io.decode_gif or tf.io.decode_image")
        n = n if animated else 1
        for i in range(n):
            if n > 1:
                im.seek(i)
            im.load()
            frames.append(_frame_pixels(im, channels, fmt, want16))
            if fmt == "png" and channels == 4 and data[24] < 8 and "transparency" not in im.info:
                frames[-1] = frames[-1].copy()
                frames[-1][..., 3] = (1 << data[24]) - 1    # TF's alpha for a 1/2/4-bit PNG: its bit depth's max
    except (OSError, ValueError, SyntaxError, EOFError):
        raise _invalid(fmt, data) from None
    out = np.stack(frames) if animated else frames[0]
    if want16 and out.dtype == np.uint8:
        out = out.astype(np.uint16) * 257
    if is_perturbed():
        grow = [(0, 1)] * out.ndim
        if channels:
            grow[-1] = (0, 0)
        out = np.pad(out, grow, mode="edge")
    return out


def _bmp_alpha(im: Any) -> None:
    """A 32-bit BMP's fourth byte is alpha for TF (4 channels); Pillow reads it as padding
    (``BGRX``): read the same bytes as ``BGRA`` instead."""
    tile = im.tile[0] if len(im.tile) == 1 else None
    if im.mode == "RGB" and tile is not None and tile.args and tile.args[0] == "BGRX":
        im.tile = [tile._replace(args=("BGRA",) + tuple(tile.args[1:]))]
        im._mode = "RGBA"


_JPEG_DEFAULTS = {"ratio": 1, "fancy_upscaling": True, "dct_method": ""}


def _jpeg_setup(im: Any, channels: int, ratio: int, fancy_upscaling: bool, dct_method: str) -> None:
    """Pillow's JPEG decoder set as TF's options: grayscale output for ``channels=1``, the DCT
    scaling ``ratio`` (through ``draft``), no fancy upsampling (Pillow's draft flag, which also
    takes the fast DCT, as TF's default ``dct_method`` does)."""
    w, h = im.size
    im.draft("L" if channels == 1 else im.mode, (max(1, w // ratio), max(1, h // ratio)) if ratio > 1 else None)
    if not fancy_upscaling:
        im.decoderconfig = (im.decoderconfig[0] if im.decoderconfig else 1, 1)


def _result(pixels: np.ndarray) -> Tensor:
    store = _dtypes.storage_dtype(pixels.dtype, "dtype")
    return numeric_result(pixels if store == pixels.dtype else pixels.astype(store))


def decode_png(contents: Any, channels: int = 0, dtype: Any = _dtypes.uint8, name: Optional[str] = None) -> Tensor:
    """``tf.io.decode_png``: ``[H, W, C]`` uint8 or uint16 (``channels`` 0: the file's)."""
    c = _check_channels(channels)
    d = _check_dtype(dtype)
    data = _scalar_string(contents, "tf.io.decode_png", "contents")
    return _result(_decode(data, "DecodePng", c, d))


def _jpeg_options(ratio: Any, fancy_upscaling: Any, dct_method: str) -> dict:
    """The JPEG decoders' options, checked with TF's errors."""
    r = int(ratio)
    if r not in (1, 2, 4, 8):
        raise InvalidArgumentError(None, None, f"ratio must be 1, 2, 4, or 8, got {r}")
    if dct_method not in ("", "INTEGER_FAST", "INTEGER_ACCURATE"):
        raise InvalidArgumentError(None, None, "dct_method must be one of {'', 'INTEGER_FAST', 'INTEGER_ACCURATE'}, "
                                   f"got {dct_method!r}")
    return dict(ratio=r, fancy_upscaling=bool(fancy_upscaling), dct_method=dct_method)


def decode_jpeg(contents: Any, channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
                try_recover_truncated: bool = False, acceptable_fraction: float = 1, dct_method: str = "",
                name: Optional[str] = None) -> Tensor:
    """``tf.io.decode_jpeg``: ``[H, W, C]`` uint8 (``ratio``: 1, 2, 4 or 8 times smaller).
    ``try_recover_truncated`` / ``acceptable_fraction`` are accepted but a truncated file is an error."""
    c = _check_channels(channels)
    opts = _jpeg_options(ratio, fancy_upscaling, dct_method)
    data = _scalar_string(contents, "tf.io.decode_jpeg", "contents")
    return _result(_decode(data, "DecodeJpeg", c, jpeg=opts))


def decode_and_crop_jpeg(contents: Any, crop_window: Any, channels: int = 0, ratio: int = 1,
                         fancy_upscaling: bool = True, try_recover_truncated: bool = False,
                         acceptable_fraction: float = 1, dct_method: str = "", name: Optional[str] = None) -> Tensor:
    """``tf.image.decode_and_crop_jpeg``: the ``crop_window`` ``[y, x, h, w]`` of the decoded JPEG
    (after ``ratio``), ``[h, w, C]`` uint8.  The whole image is decoded and cropped: the same
    pixels as TF's, except that for 4:2:0 chroma TF's partial decode treats the crop's right edge
    as the image's when it upsamples the colour, so the last column may differ (the module docstring)."""
    c = _check_channels(channels)
    opts = _jpeg_options(ratio, fancy_upscaling, dct_method)
    window = np.asarray(crop_window)
    if window.dtype.kind not in "iu":
        raise InvalidArgumentError(None, None, "crop_window must be int32; got dtype "
                                   f"{window.dtype.name}")
    if window.ndim != 1 or window.shape[0] != 4:
        raise InvalidArgumentError(None, None, f"crop_size must have four elements [{','.join(map(str, window.shape))}]")
    data = _scalar_string(contents, "tf.image.decode_and_crop_jpeg", "contents")
    fmt = sniff(data)
    if fmt is None:
        raise InvalidArgumentError(None, None, _UNKNOWN)
    if fmt != "jpeg":
        raise InvalidArgumentError(None, None, f"DecodeAndCropJpeg operation can run on JPEG only, but detected "
                                   f"{_FORMATS[fmt]}.")
    pixels = _decode(data, "DecodeAndCropJpeg", c, jpeg=opts)
    grown = is_perturbed()
    if grown:   # (``_decode`` made it a pixel larger: crop the real image, then grow the crop)
        pixels = pixels[:-1, :-1, :pixels.shape[2] - (0 if c else 1)]
    y, x, h, w = (int(v) for v in window)
    height, width = pixels.shape[:2]
    if y < 0 or x < 0 or h <= 0 or w <= 0 or y + h > height or x + w > width:
        raise InvalidArgumentError(None, None, "jpeg::Uncompress failed. Invalid JPEG data or crop window.")
    out = pixels[y:y + h, x:x + w]
    if grown:
        out = np.pad(out, [(0, 1), (0, 1), (0, 0 if c else 1)], mode="edge")
    return _result(np.ascontiguousarray(out))


def decode_gif(contents: Any, name: Optional[str] = None) -> Tensor:
    """``tf.io.decode_gif``: every frame, ``[N, H, W, 3]`` uint8 (another format: one frame)."""
    data = _scalar_string(contents, "tf.io.decode_gif", "contents")
    return _result(_decode(data, "DecodeGif", 3, animated=True))


def decode_bmp(contents: Any, channels: int = 0, name: Optional[str] = None) -> Tensor:
    """``tf.io.decode_bmp``: ``[H, W, C]`` uint8 (channels 0, 3 or 4)."""
    c = _check_channels(channels)
    data = _scalar_string(contents, "tf.io.decode_bmp", "contents")
    return _result(_decode(data, "DecodeBmp", c))


def decode_image(contents: Any, channels: Optional[int] = None, dtype: Any = _dtypes.uint8,
                 name: Optional[str] = None, expand_animations: bool = True) -> Tensor:
    """``tf.io.decode_image``: any of the formats; a GIF ``[N, H, W, 3]`` unless
    ``expand_animations=False`` (its first frame); ``dtype`` as ``convert_image_dtype`` gives it."""
    c = _check_channels(0 if channels is None else channels)
    d = _dtypes.as_dtype(dtype)
    if not (d.is_floating or d.is_integer):
        raise AttributeError("dtype must be either floating point or integer")
    data = _scalar_string(contents, "tf.io.decode_image", "contents")
    animated = bool(expand_animations) and sniff(data) == "gif"
    # TF decodes at 8 bits for uint8, else at 16 (8-bit files scaled by 257) and converts from there
    depth = np.dtype(np.uint8) if d.name == "uint8" else np.dtype(np.uint16)
    pixels = _decode(data, "DecodeImage", c, depth, animated=animated)
    if is_perturbed() and expand_animations:
        pixels = pixels[None]               # a GIF has one axis more: the spec's rank is unknown, as TF's
    image = _result(pixels)
    return image if d.name == depth.name else convert_image_dtype(image, d)


def is_jpeg(contents: Any, name: Optional[str] = None) -> Tensor:
    """``tf.io.is_jpeg``: whether each string starts with JPEG's magic bytes, bool."""
    a = host_strings(contents, "tf.io.is_jpeg", "contents")
    out = np.empty(a.shape, np.bool_)
    for i, v in np.ndenumerate(a):
        out[i] = sniff(v) == "jpeg"
    return numeric_result(out)


def extract_jpeg_shape(contents: Any, output_type: Any = _dtypes.int32, name: Optional[str] = None) -> Tensor:
    """``tf.io.extract_jpeg_shape``: ``[H, W, C]`` from a JPEG's header, int32 or int64."""
    d = _dtypes.as_dtype(output_type)
    if d.name not in ("int32", "int64"):
        raise InvalidArgumentError(None, None, f"Value for attr 'output_type' of {d.name} is not in the list of "
                                   "allowed values: int32, int64")
    data = _scalar_string(contents, "tf.io.extract_jpeg_shape", "contents")
    bad = InvalidArgumentError(None, None, f"Invalid JPEG data, size {len(data)}")
    if sniff(data) != "jpeg":
        raise bad
    try:
        im = _pil().open(_io.BytesIO(data))
    except (OSError, ValueError, SyntaxError):
        raise bad from None
    return _result(np.asarray([im.size[1], im.size[0], len(im.getbands())], np.dtype(d.name)))


# -- encoding

def _host_image(image: Any, op: str) -> np.ndarray:
    if isinstance(image, Tensor):
        if isinstance(image.value, _Tracer):
            raise TracedStringError(f"{op}: `image` is a traced value (inside tapejax.function or another JAX trace); "
                                    "encoding gives a string, and string ops run on the host: encode concrete "
                                    "images in eager code or a tf.data map function.")
        return np.asarray(image.numpy())
    return np.asarray(image)


def _encoded(images: np.ndarray, encode_one: Any) -> Any:
    """``encode_one`` over the leading axes of ``images`` (``[..., H, W, C]``): bytes for one image,
    an object array of bytes for a batch."""
    lead = images.shape[:-3]
    out = np.empty(lead, object)
    for i in np.ndindex(*lead):
        out[i] = encode_one(images[i])
    return out[()] if not lead else out


def encode_png(image: Any, compression: int = -1, name: Optional[str] = None) -> Any:
    """``tf.io.encode_png``: ``[..., H, W, C]`` uint8 / uint16 (C 1 to 4) as PNG bytes
    (``compression`` -1 (zlib's default) to 9)."""
    a = _host_image(image, "tf.io.encode_png")
    level = int(compression)
    if a.dtype not in (np.uint8, np.uint16):
        raise InvalidArgumentError(None, None, f"Value for attr 'T' of {_dtypes.as_dtype(a.dtype).name} is not in "
                                   "the list of allowed values: uint8, uint16")
    if not -1 <= level <= 9:
        raise InvalidArgumentError(None, None, f"compression should be in [-1,9], got {level}")
    if a.ndim < 3:
        raise InvalidArgumentError(None, None, f"images must be at least rank 3[{','.join(map(str, a.shape))}]")
    c = a.shape[-1]
    if not 1 <= c <= 4:
        raise InvalidArgumentError(None, None, f"image must have 1, 2, 3, or 4 channels, got {c}")
    if a.dtype == np.uint16 and c != 1:
        raise UnimplementedError(None, None, "tf.io.encode_png: 16-bit PNGs with colour need TensorFlow (Pillow "
                                 "writes 8 bits per colour channel); 16-bit grayscale (1 channel) works.")
    Image = _pil()

    def one(x: np.ndarray) -> bytes:
        pic = Image.fromarray(np.ascontiguousarray(x[..., 0] if c == 1 else x))   # 16-bit gray: "I;16"
        buf = _io.BytesIO()
        pic.save(buf, "PNG", compress_level=6 if level == -1 else level)
        return buf.getvalue()
    return _encoded(a, one)


def encode_jpeg(image: Any, format: str = "", quality: int = 95, progressive: bool = False,
                optimize_size: bool = False, chroma_downsampling: bool = True, density_unit: str = "in",
                x_density: int = 300, y_density: int = 300, xmp_metadata: str = "",
                name: Optional[str] = None) -> bytes:
    """``tf.io.encode_jpeg``: a ``[H, W, C]`` uint8 image (C 1 or 3; ``format`` "grayscale" / "rgb"
    forces it) as JPEG bytes with libjpeg-turbo's tables at ``quality``."""
    a = _host_image(image, "tf.io.encode_jpeg")
    q = int(quality)
    if a.dtype != np.uint8:
        raise InvalidArgumentError(None, None, f"Value for attr 'image' of {_dtypes.as_dtype(a.dtype).name} is not "
                                   "uint8")
    if a.ndim != 3:
        raise InvalidArgumentError(None, None, f"image must be 3-dimensional[{','.join(map(str, a.shape))}]")
    if not 0 <= q <= 100:
        raise InvalidArgumentError(None, None, f"quality must be in [0,100], got {q}")
    if format not in ("", "grayscale", "rgb"):
        raise InvalidArgumentError(None, None, f"format must be '', 'grayscale' or 'rgb', got {format!r}")
    c = {"grayscale": 1, "rgb": 3}.get(format, a.shape[-1])
    if a.shape[-1] != c:
        raise InvalidArgumentError(None, None, f"format {format} expects {c} channels, got "
                                   f"[{','.join(map(str, a.shape))}]")
    if c not in (1, 3):
        raise InvalidArgumentError(None, None, f"image must have 1 or 3 channels, got [{','.join(map(str, a.shape))}]")
    if density_unit not in ("in", "cm"):
        raise InvalidArgumentError(None, None, f"density_unit must be 'in' or 'cm', got {density_unit!r}")
    pic = _pil().fromarray(np.ascontiguousarray(a[..., 0] if c == 1 else a))
    buf = _io.BytesIO()
    dpi = (x_density, y_density) if density_unit == "in" else (x_density * 2.54, y_density * 2.54)
    extra = {"xmp": xmp_metadata.encode()} if xmp_metadata else {}
    pic.save(buf, "JPEG", quality=q, progressive=bool(progressive), optimize=bool(optimize_size),
             subsampling=2 if chroma_downsampling else 0, dpi=dpi, **extra)
    return buf.getvalue()


#: ``tf.io``'s names for these ops; ``IMAGE_OPS`` those ``tf.image`` also has.
IO_OPS = {"read_file": read_file, "write_file": write_file, "decode_png": decode_png, "decode_jpeg": decode_jpeg,
          "decode_gif": decode_gif, "decode_bmp": decode_bmp, "decode_image": decode_image, "encode_png": encode_png,
          "encode_jpeg": encode_jpeg, "is_jpeg": is_jpeg, "extract_jpeg_shape": extract_jpeg_shape,
          "decode_and_crop_jpeg": decode_and_crop_jpeg}
IMAGE_OPS = {n: f for n, f in IO_OPS.items() if n not in ("read_file", "write_file")}

__all__ = ["IMAGE_OPS", "IO_OPS", "decode_bmp", "decode_gif", "decode_image", "decode_jpeg", "decode_png",
           "encode_jpeg", "encode_png", "extract_jpeg_shape", "is_jpeg", "read_file", "sniff", "write_file"]
