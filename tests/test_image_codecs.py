"""tapejax/data/image_codecs.py where TF is not the oracle (TF's values and errors:
tests/parity/test_image_codecs.py): traced and Tensor inputs refused as decode_raw refuses them,
the ImportError naming the extra without Pillow, the 16-bit colour PNGs Pillow cannot hold,
the namespaces, and the spec a decoding map's sample runs give."""
import sys

import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError, UnimplementedError
from tapejax.data import image_codecs
from tapejax.data.hostops import TracedStringError

IMG = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
PNG = tf.io.encode_png(IMG)


def test_traced_values_are_refused_with_the_way_out():
    @tf.function
    def decode(x):
        return tf.io.decode_png(x)

    @tf.function
    def encode(x):
        return tf.io.encode_png(x)

    with pytest.raises(TracedStringError, match="traced value.*tf.data map"):
        decode(tf.constant([1, 2], tf.uint8))
    with pytest.raises(TracedStringError, match="traced value"):
        encode(tf.constant(IMG))


def test_tensor_contents_are_refused_as_decode_raw_refuses_them():
    for op in (tf.io.decode_png, tf.io.decode_jpeg, tf.io.decode_image, tf.io.decode_gif, tf.io.decode_bmp,
               tf.io.is_jpeg, tf.io.extract_jpeg_shape, tf.io.read_file):
        with pytest.raises(TypeError, match="no string tensors"):
            op(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="must be strings"):
        tf.io.decode_png(3)


def test_encoders_take_concrete_tensors_and_batches():
    """A concrete Tensor encodes; a batch gives an object array of bytes, one image each."""
    one = tf.io.encode_png(tf.constant(IMG))
    assert isinstance(one, bytes) and one == PNG
    batch = tf.io.encode_png(np.stack([IMG, IMG[::-1]]))
    assert batch.shape == (2,) and batch.dtype == object
    np.testing.assert_array_equal(tf.io.decode_png(batch[1]).numpy(), IMG[::-1])
    assert isinstance(tf.io.encode_jpeg(tf.constant(IMG)), bytes)


def test_sixteen_bit_colour_pngs_are_unimplemented():
    """Pillow holds 8 bits per colour channel: encoding or decoding at 16 bits says so, before
    writing anything; 16-bit gray round-trips."""
    with pytest.raises(UnimplementedError, match="16-bit"):
        tf.io.encode_png(np.zeros((2, 2, 3), np.uint16))
    gray = (np.arange(12).reshape(3, 4, 1) * 5000).astype(np.uint16)
    np.testing.assert_array_equal(tf.io.decode_png(tf.io.encode_png(gray), dtype=tf.uint16).numpy(), gray)
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(IMG).save(buf, "PNG")
    colour16 = bytearray(buf.getvalue())
    colour16[24] = 16                                       # IHDR bit depth 16, colour type RGB
    with pytest.raises(UnimplementedError, match="16-bit colour"):
        tf.io.decode_png(bytes(colour16), dtype=tf.uint16)


def test_missing_pillow_raises_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"tapejax\[data\]"):
        tf.io.decode_png(PNG)
    with pytest.raises(ImportError, match=r"tapejax\[data\]"):
        tf.io.encode_png(IMG)


def test_namespaces():
    import importlib
    assert importlib.import_module("tapejax.image") is tf.image and tf.image.decode_jpeg is tf.io.decode_jpeg
    assert tf.image.resize is tf.image.resize and hasattr(tf.image, "convert_image_dtype")
    assert not hasattr(tf.image, "read_file") and tf.io.write_file is image_codecs.write_file


def test_sniff():
    assert image_codecs.sniff(PNG) == "png" and image_codecs.sniff(tf.io.encode_jpeg(IMG)) == "jpeg"
    assert image_codecs.sniff(b"GIF89a") == "gif" and image_codecs.sniff(b"BM") == "bmp"
    assert image_codecs.sniff(b"RIFF") is None
    with pytest.raises(InvalidArgumentError, match="Unknown image file format"):
        tf.io.decode_image(b"RIFF....WEBP")


def test_decoding_map_spec_comes_from_sample_runs():
    """Same-sized images still give unknown height and width (the perturbed run); the known
    channels stay; a later resize fixes the shape."""
    ds = tf.data.Dataset.from_tensor_slices(np.array([PNG, PNG], dtype=object))
    assert ds.map(lambda s: tf.io.decode_png(s, channels=3)).element_spec.shape == (None, None, 3)
    assert ds.map(tf.io.decode_png).element_spec.shape == (None, None, None)
    assert ds.map(tf.io.decode_gif).element_spec.shape == (None, None, None, 3)
    assert ds.map(tf.io.decode_image).element_spec.shape is None
    resized = ds.map(lambda s: tf.image.resize(tf.io.decode_png(s, channels=3), [4, 4]))
    assert resized.element_spec.shape == (4, 4, 3)
    assert [x.shape for x in resized.batch(2)] == [(2, 4, 4, 3)]
