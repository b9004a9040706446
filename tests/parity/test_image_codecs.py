"""tf.io's files and image codecs (tapejax/data/image_codecs.py) against real TensorFlow 2.21:
PNG / JPEG files written by TF read by both sides, and each side's encodings read by TF (the
same pixels); GIF (animated) and BMP files (Pillow writes them: TF has no encoder); every option
(channels, dtype, ratio, dct_method, fancy_upscaling, compression, quality, expand_animations);
each bad input's error class; ``element_spec`` of decoding maps; and the usual TF program:
file names and labels -> read_file / decode_png / resize -> batch -> a softmax classifier trained
by a compiled step, with deferred execution on and off.

JPEG: tapejax decodes with Pillow's accurate integer DCT, which is TF's
``dct_method="INTEGER_ACCURATE"`` exactly; TF's default (the fast integer DCT) differs from it by
at most ``JPEG_TOL`` levels on these images (``test_jpeg_default_dct_within_tolerance``).
"""
import functools
import io
import os

import numpy as np

from .data_helpers import L, softmax_classifier, spec, tmp
from .harness import parity, raises

#: The largest difference (levels of 255) between TF's default JPEG decode (fast integer DCT)
#: and tapejax's (Pillow: accurate integer DCT) on the test images.
JPEG_TOL = 10      # found: at most 5 on these images (9 on noise at quality 95), mean about 1


def _smooth(h, w, c, seed):
    """A smooth random image (JPEG-friendly), uint8 ``[h, w, c]``."""
    rng = np.random.default_rng(seed)
    a = np.cumsum(np.cumsum(rng.normal(0, 6, (h, w, c)), 0), 1)
    return np.clip(a - a.min() + 20, 0, 255).astype(np.uint8)


def _noise(h, w, c, seed):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def _real_tf():
    import tensorflow
    return tensorflow


@functools.lru_cache(maxsize=None)
def _files():
    """Image files written by real TensorFlow (PNG, JPEG) and Pillow (GIF, BMP): name -> path."""
    real = _real_tf()
    from PIL import Image
    d = tmp()
    out = {}

    def put(name, data):
        out[name] = os.path.join(d, name)
        with open(out[name], "wb") as f:
            f.write(data)
    put("rgb.png", real.io.encode_png(_noise(5, 7, 3, 0)).numpy())
    put("rgba.png", real.io.encode_png(_noise(4, 6, 4, 1)).numpy())
    put("gray.png", real.io.encode_png(_noise(6, 5, 1, 2)).numpy())
    put("la.png", real.io.encode_png(_noise(3, 4, 2, 3)).numpy())
    put("gray16.png", real.io.encode_png((np.arange(30).reshape(5, 6, 1) * 2111).astype(np.uint16)).numpy())
    rgb = _noise(4, 5, 3, 7)
    palette = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)    # a 4-bit palette
    for name, im, kw in (("pal.png", palette, {}), ("pal_trns.png", palette, {"transparency": 2}),
                         ("bits.png", Image.fromarray(rgb[..., 0] > 127), {}),
                         ("gray_trns.png", Image.fromarray(rgb[..., 1]), {"transparency": 7})):
        b = io.BytesIO()
        im.save(b, "PNG", **kw)
        put(name, b.getvalue())
    put("rgb.jpg", real.io.encode_jpeg(_smooth(37, 53, 3, 4), quality=90).numpy())
    put("gray.jpg", real.io.encode_jpeg(_smooth(21, 18, 1, 5)).numpy())
    put("big.jpg", real.io.encode_jpeg(_smooth(64, 48, 3, 6), quality=75).numpy())
    frames = [Image.fromarray(_noise(4, 6, 3, 10 + i)) for i in range(3)]
    b = io.BytesIO()
    frames[0].save(b, "GIF", save_all=True, append_images=frames[1:])
    put("anim.gif", b.getvalue())
    b = io.BytesIO()
    Image.fromarray(_noise(5, 7, 3, 20)).save(b, "GIF")
    put("one.gif", b.getvalue())
    for name, mode, c in (("rgb.bmp", "RGB", 3), ("rgba.bmp", "RGBA", 4)):
        b = io.BytesIO()
        Image.fromarray(_noise(5, 7, c, 30 + c), mode).save(b, "BMP")
        put(name, b.getvalue())
    return out


def _read(tf, name):
    return tf.io.read_file(_files()[name])


def _bytes(name):
    with open(_files()[name], "rb") as f:
        return f.read()


@parity
def test_png_files_written_by_tf(tf):
    """TF's PNGs read and decoded: every channels value, uint16, both namespaces, decode_image;
    palette, 1-bit and tRNS PNGs (TF's alpha for a low-bit PNG without transparency is the bit
    depth's maximum, 15 for 4 bits, and tapejax gives it too)."""
    out = []
    for name in ("rgb.png", "rgba.png", "gray.png", "la.png"):
        data = _read(tf, name)
        out += [tf.io.decode_png(data, channels=c) for c in (0, 1, 3, 4)]
        out += [tf.image.decode_png(data, dtype=tf.uint16), tf.io.decode_image(data)]
    for name in ("pal.png", "pal_trns.png", "bits.png", "gray_trns.png"):      # written by Pillow
        data = _read(tf, name)
        out += [tf.io.decode_png(data, channels=c) for c in (0, 1, 3, 4)]
    g16 = _read(tf, "gray16.png")
    out += [tf.io.decode_png(g16, dtype=tf.uint16), tf.io.decode_png(g16), tf.io.decode_png(g16, channels=3, dtype=tf.uint16),
            tf.io.decode_image(g16, dtype=tf.uint16)]
    return out


@parity
def test_png_encoded_by_each_side_decodes_in_tf(tf):
    """Each side's encode_png (every compression, 1 to 4 channels, a batch, 16-bit gray) gives
    bytes that TF decodes to the image; and each side decodes its own bytes to it too."""
    real = _real_tf()
    imgs = [_noise(5, 7, 3, 0), _noise(4, 6, 4, 1), _noise(6, 5, 1, 2), _noise(3, 4, 2, 3)]
    out = []
    for img in imgs:
        for level in (-1, 0, 9):
            data = tf.io.encode_png(tf.constant(img), compression=level)
            out += [real.io.decode_png(data).numpy(), tf.io.decode_png(data)]
    batch = tf.io.encode_png(np.stack([imgs[0], imgs[0][::-1]]))
    out += [real.io.decode_png(batch[1]).numpy(), list(np.shape(batch))]
    g16 = (np.arange(30).reshape(5, 6, 1) * 2111).astype(np.uint16)
    out.append(real.io.decode_png(tf.image.encode_png(g16), dtype=real.uint16).numpy())
    return out


@parity
def test_jpeg_accurate_dct_and_no_fancy_upscaling_are_exact(tf):
    """JPEGs written by TF: dct_method='INTEGER_ACCURATE' and fancy_upscaling=False decode to TF's
    pixels exactly; channels 0/1/3; a grayscale JPEG; decode_png / decode_image of a JPEG (TF
    sniffs the format), extract_jpeg_shape and is_jpeg."""
    out = []
    for name in ("rgb.jpg", "gray.jpg", "big.jpg"):
        data = _read(tf, name)
        out += [tf.io.decode_jpeg(data, channels=c, dct_method="INTEGER_ACCURATE") for c in (0, 1, 3)]
        out += [tf.io.decode_jpeg(data, fancy_upscaling=False), tf.image.decode_jpeg(data, dct_method="INTEGER_FAST",
                                                                                    fancy_upscaling=False),
                tf.io.extract_jpeg_shape(data), tf.image.extract_jpeg_shape(data),
                tf.io.is_jpeg(data), tf.image.is_jpeg(data)]
    out.append(tf.io.is_jpeg(_read(tf, "rgb.png")))
    return out


@parity(x64=True)
def test_extract_jpeg_shape_int64(tf):
    return tf.io.extract_jpeg_shape(_read(tf, "rgb.jpg"), output_type=tf.int64)


@parity(atol=JPEG_TOL, rtol=0)
def test_jpeg_default_dct_within_tolerance(tf):
    """TF's default JPEG decode (fast integer DCT) against tapejax's (accurate): within JPEG_TOL;
    ``ratio`` 2, 4 and 8 (DCT scaling) likewise; decode_image and decode_png of a JPEG."""
    out = []
    for name in ("rgb.jpg", "gray.jpg", "big.jpg"):
        data = _read(tf, name)
        for img in (tf.io.decode_jpeg(data), tf.io.decode_jpeg(data, channels=3), tf.io.decode_jpeg(data, ratio=2),
                    tf.io.decode_jpeg(data, ratio=4), tf.io.decode_image(data), tf.io.decode_png(data, channels=1)):
            out.append(tf.cast(img, tf.float32))      # floats: the harness compares integers exactly
    out.append(tf.cast(tf.io.decode_jpeg(_read(tf, "big.jpg"), ratio=8), tf.float32))
    return out


@parity
def test_jpeg_encoded_by_each_side_decodes_in_tf(tf):
    """Each side's encode_jpeg (quality, grayscale, progressive, optimize_size, no chroma
    downsampling, density, format) gives bytes TF decodes to the same pixels (libjpeg-turbo's
    tables and encoder on both sides)."""
    real = _real_tf()
    rgb, gray = _smooth(37, 53, 3, 4), _smooth(21, 18, 1, 5)
    out = []
    for kw in ({}, {"quality": 10}, {"quality": 100}, {"progressive": True}, {"optimize_size": True},
               {"chroma_downsampling": False}, {"density_unit": "cm", "x_density": 100, "y_density": 50},
               {"format": "rgb"}):
        data = tf.io.encode_jpeg(rgb, **kw)
        out.append(real.io.decode_jpeg(data, dct_method="INTEGER_ACCURATE").numpy())
    for kw in ({}, {"format": "grayscale", "quality": 50}):
        out.append(real.io.decode_jpeg(tf.image.encode_jpeg(gray, **kw)).numpy())
    return out


@parity
def test_gif_and_bmp(tf):
    """GIFs (animated and one frame) and BMPs (RGB, RGBA): decode_gif, decode_bmp (channels),
    decode_image (expand_animations, channels), decode_png / decode_jpeg of a GIF (its first
    frame) and decode_gif of a PNG (one frame)."""
    anim, one, bmp3, bmp4 = (_read(tf, n) for n in ("anim.gif", "one.gif", "rgb.bmp", "rgba.bmp"))
    return (tf.io.decode_gif(anim), tf.image.decode_gif(one), tf.io.decode_image(anim),
            tf.io.decode_image(anim, expand_animations=False), tf.io.decode_image(one, channels=3),
            tf.io.decode_png(one), tf.io.decode_jpeg(one, channels=3), tf.io.decode_gif(_read(tf, "rgb.png")),
            tf.io.decode_gif(_read(tf, "rgba.png")),
            tf.io.decode_bmp(bmp3), tf.io.decode_bmp(bmp3, channels=4), tf.image.decode_bmp(bmp4),
            tf.io.decode_bmp(bmp4, channels=3), tf.io.decode_image(bmp3), tf.io.decode_image(bmp4, channels=3))


@parity
def test_decode_image_dtypes(tf):
    """decode_image's ``dtype`` converts as convert_image_dtype (floats in [0, 1], wider integers
    scaled)."""
    data = _read(tf, "rgb.png")
    return [tf.io.decode_image(data, dtype=d) for d in (tf.float32, tf.uint16, tf.int32, tf.float16, tf.int16)]


@parity
def test_read_and_write_file(tf):
    """write_file makes the directories; read_file gives the bytes back (as a string value)."""
    d = tmp()
    name = os.path.join(d, "a", "b", "c.bin")
    tf.io.write_file(name, b"\x00\x01hello\xff")
    tf.io.write_file(os.path.join(d, "t.txt"), "text")
    one = tf.io.read_file(name)
    return (one.numpy() if hasattr(one, "numpy") else one,
            L(tf.data.Dataset.from_tensor_slices([name, os.path.join(d, "t.txt")]).map(tf.io.read_file)))


@parity
def test_decoding_map_element_specs(tf):
    """``element_spec`` of maps that decode: unknown height and width, channels known when given,
    unknown rank for decode_image with animations, a GIF's frames unknown."""
    png = tf.data.Dataset.from_tensor_slices([_files()["rgb.png"], _files()["gray.png"]]).map(tf.io.read_file)
    fns = [lambda s: tf.io.decode_png(s, channels=3), lambda s: tf.io.decode_png(s), lambda s: tf.io.decode_image(s),
           lambda s: tf.io.decode_image(s, expand_animations=False), lambda s: tf.io.decode_gif(s),
           lambda s: tf.io.decode_jpeg(s), lambda s: tf.io.decode_image(s, channels=3, dtype=tf.float32),
           lambda s: tf.io.decode_image(s, channels=3, expand_animations=False, dtype=tf.float32),
           lambda s: tf.io.is_jpeg(s), lambda s: tf.image.resize(tf.io.decode_png(s, channels=3), [4, 4])]
    return [spec(png.map(f).element_spec) for f in fns] + [spec(png.map(lambda s: tf.io.encode_png(
        tf.io.decode_png(s))).element_spec)]


@parity
def test_bad_input(tf):
    """Each bad input gets TF's exception class."""
    png, jpg, gif, bmp = (_bytes(n) for n in ("rgb.png", "rgb.jpg", "anim.gif", "rgb.bmp"))
    img = _noise(5, 7, 3, 0)
    return (raises(tf.io.read_file, "/nonexistent/x.png"), raises(tf.io.read_file, tmp()),
            raises(tf.io.read_file, ["a", "b"]), raises(tf.io.write_file, tmp(), b"x"),
            raises(tf.io.write_file, os.path.join(tmp(), "x"), [b"a"]),
            raises(tf.io.decode_png, b"garbage"), raises(tf.io.decode_png, png, channels=2),
            raises(tf.io.decode_png, png, channels=5), raises(tf.io.decode_png, png, dtype=tf.float32),
            raises(tf.io.decode_png, [png, png]), raises(tf.io.decode_png, png[:40]),
            raises(tf.io.decode_png, b"\x89PNG\r\n\x1a\ngarbage"), raises(tf.io.decode_png, bmp),
            raises(tf.io.decode_png, gif), raises(tf.io.decode_jpeg, gif),
            raises(tf.io.decode_jpeg, bmp), raises(tf.io.decode_jpeg, jpg[:40]),
            raises(tf.io.decode_jpeg, jpg, channels=4), raises(tf.io.decode_jpeg, jpg, ratio=3),
            raises(tf.io.decode_jpeg, jpg, dct_method="bad"), raises(tf.io.decode_gif, bmp),
            raises(tf.io.decode_gif, gif[:13]), raises(tf.io.decode_bmp, png), raises(tf.io.decode_bmp, jpg),
            raises(tf.io.decode_bmp, gif), raises(tf.io.decode_bmp, bmp, channels=1),
            raises(tf.io.decode_bmp, bmp, channels=2), raises(tf.io.decode_image, b"garbage"),
            raises(tf.io.decode_image, png, channels=2), raises(tf.io.decode_image, gif, channels=1),
            raises(tf.io.decode_image, gif, channels=4), raises(tf.io.decode_image, png, dtype=tf.bool),
            raises(tf.io.extract_jpeg_shape, png), raises(tf.io.extract_jpeg_shape, jpg, output_type=tf.float32),
            raises(tf.io.encode_png, img, compression=10), raises(tf.io.encode_png, img.astype(np.float32)),
            raises(tf.io.encode_png, img[0]), raises(tf.io.encode_png, np.zeros((2, 2, 5), np.uint8)),
            raises(tf.io.encode_jpeg, img, quality=101), raises(tf.io.encode_jpeg, img[..., :2]),
            raises(tf.io.encode_jpeg, img[0]), raises(tf.io.encode_jpeg, img, format="grayscale"),
            raises(tf.io.encode_jpeg, img[..., :1], format="rgb"))


@parity
def test_bad_file_in_a_map(tf):
    """A file that is not a PNG, read and decoded in a map: the error comes when it is read."""
    d = tmp()
    for n, data in (("a.png", _bytes("rgb.png")), ("b.png", b"not an image")):
        with open(os.path.join(d, n), "wb") as f:
            f.write(data)
    ds = tf.data.Dataset.from_tensor_slices([os.path.join(d, "a.png"), os.path.join(d, "b.png")]).map(
        lambda p: tf.io.decode_png(tf.io.read_file(p), channels=3))
    names = tf.data.Dataset.from_tensor_slices([os.path.join(d, "nope.png")])
    return raises(L, ds), raises(lambda: L(names.map(tf.io.read_file))), L(ds.take(1))


def _image_folder():
    """Twelve PNGs of three sizes in a folder, written by Pillow, and their labels (0 to 2)."""
    from PIL import Image
    d = tmp()
    paths, labels = [], []
    for i in range(12):
        h, w = ((9, 11), (12, 8), (10, 10))[i % 3]
        label = i % 3
        img = _noise(h, w, 3, 100 + i)
        img[..., label] = np.maximum(img[..., label], 180)      # the class shows in one channel
        paths.append(os.path.join(d, f"img_{i:02d}.png"))
        labels.append(label)
        Image.fromarray(img).save(paths[-1])
    return paths, labels


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_png_folder_trains(tf):
    """The usual TF input pipeline: (paths, labels) -> read_file -> decode_png -> resize -> / 255
    -> batch, a softmax classifier trained two epochs by a compiled step."""
    paths, labels = _image_folder()
    size = 8

    def load(path, label):
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        return tf.image.resize(image, [size, size]) / 255.0, label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).map(load).batch(4)
    w, b, step = softmax_classifier(tf, size * size * 3, n_classes=3, lr=0.1)
    losses = []
    for _ in range(2):
        for x, y in ds:
            losses.append(float(step(x, y)))
    return spec(ds.element_spec), losses, w.numpy(), b.numpy()


def _jpeg_444(h, w, seed):
    """A JPEG written by TF without chroma subsampling (4:4:4), from a smooth image."""
    return _real_tf().io.encode_jpeg(_smooth(h, w, 3, seed), quality=90, chroma_downsampling=False).numpy()


@parity
def test_decode_and_crop_jpeg(tf):
    """``decode_and_crop_jpeg`` gives the window of the decoded image: every window of a 4:4:4
    JPEG exactly (both DCTs within the decoders' own tolerance), with ``ratio``, channels, the
    window as a list or a Tensor; a 4:2:0 JPEG's windows but their last column (where TF's
    partial decode upsamples the colour as at an image edge: the module docstring)."""
    data = _jpeg_444(29, 41, 11)
    out = []
    for win in ([0, 0, 29, 41], [3, 5, 10, 17], [13, 17, 16, 24], [28, 40, 1, 1]):
        out += [tf.image.decode_and_crop_jpeg(data, win, dct_method="INTEGER_ACCURATE"),
                tf.io.decode_and_crop_jpeg(data, tf.constant(win), channels=1, dct_method="INTEGER_ACCURATE")]
    out.append(tf.image.decode_and_crop_jpeg(data, [1, 2, 7, 9], ratio=2, dct_method="INTEGER_ACCURATE"))
    sub = _read(tf, "rgb.jpg")   # 4:2:0, 37 x 53
    for win in ([0, 0, 37, 53], [4, 6, 20, 30], [11, 3, 9, 13]):
        out.append(np.asarray(tf.image.decode_and_crop_jpeg(sub, win, dct_method="INTEGER_ACCURATE"))[:, :-1])
    return out


@parity
def test_decode_and_crop_jpeg_bad_input(tf):
    data = _jpeg_444(9, 11, 12)
    out = [raises(tf.image.decode_and_crop_jpeg, data, win) for win in
           ([0, 0, 10, 11], [0, 0, 9, 12], [0, 0, 0, 5], [-1, 0, 3, 3], [2, 2, 3])]
    out.append(raises(tf.image.decode_and_crop_jpeg, _bytes("rgb.png"), [0, 0, 2, 2]))
    out.append(raises(tf.image.decode_and_crop_jpeg, data, [0, 0, 2, 2], ratio=3))
    out.append(raises(tf.image.decode_and_crop_jpeg, data, [0, 0, 2, 2], channels=4))
    return out


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_inception_style_crops_train(tf):
    """ImageNet preprocessing as TF's model garden writes it: ``extract_jpeg_shape`` gives the
    image's size, a crop window is computed from it (here a fixed central fraction, so both
    sides crop alike), ``decode_and_crop_jpeg`` decodes only that window, then resize and
    flip; a classifier trained on the batches."""
    images = [_jpeg_444(24 + 4 * i, 30 - 2 * i, 40 + i) for i in range(6)]
    labels = [i % 3 for i in range(6)]

    def load(image_bytes, label):
        shape = tf.image.extract_jpeg_shape(image_bytes)
        h, w = shape[0], shape[1]
        ch, cw = h * 3 // 4, w * 3 // 4
        window = tf.stack([(h - ch) // 2, (w - cw) // 2, ch, cw])
        image = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3, dct_method="INTEGER_ACCURATE")
        image = tf.image.resize(image, [8, 8]) / 255.0
        return tf.image.flip_left_right(image), label

    ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(load).batch(3)
    w, b, step = softmax_classifier(tf, 8 * 8 * 3, n_classes=3, lr=0.1)
    losses = [float(step(x, y)) for _ in range(2) for x, y in ds]
    return spec(ds.element_spec), losses, w.numpy(), b.numpy()
