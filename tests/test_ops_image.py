"""tapejax-only checks of ``tf.image`` (tapejax/ops/image_*.py); TF parity is tests/parity/test_image.py.

Oracles: ``jax.vjp`` of the same pure function (the gradients TF does not define: ResizeArea,
AdjustContrastv2, AdjustHue, AdjustSaturation), hand-derived weights, and the random ops' seed rules
(tapejax.random's: an op seed repeats after ``set_seed``, a stateless seed always).  Also: the ops
record on tapes and run inside ``tapejax.function``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.ops import image_color, image_resize

RNG = np.random.default_rng(1)
IMG = RNG.uniform(0, 1, (5, 6, 3)).astype(np.float32)
BATCH = RNG.uniform(0, 1, (3, 6, 5, 3)).astype(np.float32)


def _grad(f, x):
    x = tf.constant(x)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(f(x) * tf.range(1.0, 4.0))
    return np.asarray(t.gradient(y, x))


@pytest.mark.parametrize("fn,pure", [
    (lambda x: tf.image.adjust_contrast(x, 1.7), lambda x: image_color._contrast(x, jnp.float32(1.7))),
    (lambda x: tf.image.adjust_hue(x, 0.3), lambda x: image_color._hue(x, jnp.float32(0.3))),
    (lambda x: tf.image.adjust_saturation(x, 1.4), lambda x: image_color._saturation(x, jnp.float32(1.4))),
    (lambda x: tf.image.resize(x, (3, 4), "area"), lambda x: image_resize._resize_sep(
        x[None], size=(3, 4), kernel="area", antialias=False)[0]),
])
def test_gradients_tf_does_not_define_are_jax_vjp(fn, pure):
    """TF raises LookupError for these; tapejax gives the exact gradient (the pure function's vjp)."""
    got = _grad(fn, IMG)
    _, vjp = jax.vjp(pure, jnp.asarray(IMG))
    ct = jnp.broadcast_to(jnp.arange(1.0, 4.0, dtype=jnp.float32), pure(jnp.asarray(IMG)).shape)
    np.testing.assert_allclose(got, vjp(ct)[0], rtol=1e-5, atol=1e-6)


def test_resize_weights_are_tfs_kernels():
    """Identity at equal size (bilinear/bicubic), rows summing to 1, area's box average, and the
    nearest index rule min(floor((i + 0.5) * in / out), in - 1)."""
    for k in ("triangle", "keyscubic", "lanczos3", "mitchellcubic"):
        w = image_resize.scale_weights(7, 7, k, False)
        np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(image_resize.scale_weights(5, 5, "triangle", False), np.eye(5), atol=1e-7)
    np.testing.assert_allclose(image_resize.bicubic_weights(5, 5), np.eye(5), atol=1e-7)
    np.testing.assert_allclose(image_resize.area_weights(4, 2), [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    np.testing.assert_array_equal(image_resize._nearest_index(5, 3), [0, 2, 4])
    assert str(tf.image.ResizeMethod.BILINEAR) == "bilinear" and tf.image.ResizeMethod.AREA == "area"


def test_convert_image_dtype_matches_hand_rules():
    """uint8 -> float is x / 255; float -> uint8 is x * 255.5 truncated (saturated on request);
    int16 -> uint8 floor-divides by 256 (of the int16 scale 32768/128)."""
    u = np.array([[[0, 128, 255]]], np.uint8)
    np.testing.assert_allclose(tf.image.convert_image_dtype(u, tf.float32).numpy(), u / 255.0, rtol=1e-6)
    f = np.array([[[0.0, 0.5, 1.2]]], np.float32)
    np.testing.assert_array_equal(tf.image.convert_image_dtype(f, tf.uint8, saturate=True).numpy(), [[[0, 127, 255]]])
    i = np.array([[[256, 32767, -512]]], np.int16)
    np.testing.assert_array_equal(tf.image.convert_image_dtype(i, tf.int8).numpy(), [[[1, 127, -2]]])
    assert tf.image.convert_image_dtype(tf.constant(IMG), tf.float32).dtype == tf.float32


def test_image_ops_record_on_a_tape_and_run_in_a_function():
    """A chain of image ops inside tapejax.function gives the eager values and gradients."""
    def chain(x):
        y = tf.image.resize(tf.image.flip_left_right(x), (8, 7), "bicubic")
        y = tf.image.adjust_brightness(tf.image.central_crop(y, 0.75), 0.1)
        return tf.reduce_sum(tf.image.per_image_standardization(y) ** 2) + tf.reduce_sum(tf.image.total_variation(y))

    def value_and_grad(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = chain(x)
        return y, t.gradient(y, x)

    x = tf.constant(BATCH)
    eager = value_and_grad(x)
    compiled = tf.function(value_and_grad)(x)
    for a, b in zip(eager, compiled):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_random_ops_follow_tapejax_seed_rules():
    """An op seed repeats after set_seed (rule 4), successive calls differ; a stateless seed always
    repeats and another seed differs; 4-D flips decide per image (both outcomes in a big batch)."""
    x = tf.constant(RNG.uniform(0, 1, (64, 4, 4, 1)).astype(np.float32))
    tf.random.set_seed(3)
    a1, a2 = tf.image.random_flip_left_right(x, seed=9), tf.image.random_flip_left_right(x, seed=9)
    tf.random.set_seed(3)
    b1 = tf.image.random_flip_left_right(x, seed=9)
    np.testing.assert_array_equal(a1.numpy(), b1.numpy())
    assert not np.array_equal(a1.numpy(), a2.numpy())
    flipped = np.all(a1.numpy() == x.numpy()[:, :, ::-1], axis=(1, 2, 3))
    kept = np.all(a1.numpy() == x.numpy(), axis=(1, 2, 3))
    assert np.all(flipped | kept) and 10 < flipped.sum() < 54
    s = [tf.image.stateless_random_brightness(IMG, 0.5, seed).numpy() for seed in ([1, 2], [1, 2], [2, 1])]
    np.testing.assert_array_equal(s[0], s[1])
    assert not np.array_equal(s[0], s[2])


def test_random_crop_offsets_are_uniform():
    """Over many stateless seeds every valid offset of a 1-D crop occurs, each about equally often."""
    v = tf.constant(np.arange(6, dtype=np.float32))
    firsts = [int(tf.image.stateless_random_crop(v, [3], seed=[i, 0]).numpy()[0]) for i in range(400)]
    counts = np.bincount(firsts, minlength=4)
    assert counts.shape == (4,) and counts.min() > 60, counts


def test_random_ops_in_a_dataset_map_differ_per_element_and_repeat_with_seed():
    """tf.data's map over random_brightness on the global stream: elements differ from each other,
    and set_seed makes the epoch repeat (tapejax.random's rules inside a dataset function)."""
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((4, 2, 2, 3), np.float32))
    ds = ds.map(lambda im: tf.image.random_brightness(im, 0.5))
    tf.random.set_seed(4)
    first = [e.numpy()[0, 0, 0] for e in ds]
    tf.random.set_seed(4)
    second = [e.numpy()[0, 0, 0] for e in ds]
    np.testing.assert_array_equal(first, second)
    assert len({float(v) for v in first}) == 4
    assert all(abs(float(v)) <= 0.5 for v in first)


def test_hsv_to_rgb_has_no_gradient_and_says_why():
    x = tf.constant(IMG)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.image.hsv_to_rgb(x)
    assert t.gradient(y, x) is None


def test_tensor_offsets_are_read_from_the_host():
    """A crop's offsets may be scalar tensors (TF's eager kernels read them too); a float one is refused."""
    got = tf.image.crop_to_bounding_box(IMG, tf.constant(1), tf.constant(2), 2, 3).numpy()
    np.testing.assert_array_equal(got, IMG[1:3, 2:5])
    with pytest.raises(ValueError, match="offset_height"):
        tf.image.crop_to_bounding_box(IMG, tf.constant(1.0), 0, 2, 2)
    with pytest.raises(TypeError, match="target_width"):
        tf.image.pad_to_bounding_box(IMG, 0, 0, 9, 9.5)


def test_total_variation_of_flat_regions_has_tfs_zero_gradient():
    """TF's total_variation is ``sum(abs(diff))`` with abs'(0) = sign(0) = 0: a flat image's gradient
    is 0 and a tie between neighbours adds nothing (jnp.abs's derivative at 0 is 1, which gave a
    flat 3x3 image the gradient [[-2, -1, 0], [-1, 0, 1], [0, 1, 2]]).  Oracle: the hand sum of
    sign(diff) per pixel."""
    img = np.ones((1, 3, 3, 1), np.float32)
    img[0, 0, 0] = 2.0                       # one pixel above its two neighbours; the rest tie
    x = tf.constant(img)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(tf.image.total_variation(x))
    want = np.zeros((1, 3, 3, 1), np.float32)
    want[0, 0, 0] = 2.0
    want[0, 0, 1] = want[0, 1, 0] = -1.0
    assert float(y) == 2.0
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), want)
