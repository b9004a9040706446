"""``tf.image`` under TensorFlow and tapejax: values (3-D images and 4-D batches; float32, float16
and uint8), gradients with every input watched (``vg``: None where TF gives None), bad input
(error classes), the random ops' rules (the generators differ, so the cases compare what TF
promises: shapes, dtypes, reproducibility, that a flip or crop is one of the allowed results), and a
training program fed by a ``tf.data`` pipeline that maps an augmentation function, with deferral
on and off.

TF defines no gradient for ``ResizeArea``, ``AdjustContrastv2``, ``AdjustHue`` and
``AdjustSaturation`` (LookupError); tapejax gives the exact one, checked against ``jax.vjp`` in
tests/test_ops_image.py, so here those ops compare values only."""
import numpy as np

from .harness import parity, raises
from .test_ops_library import vg

RNG = np.random.default_rng(7)
IMG = RNG.uniform(0, 1, (6, 7, 3)).astype(np.float32)
BATCH = RNG.uniform(0, 1, (2, 9, 8, 3)).astype(np.float32)
U8 = RNG.integers(0, 256, (5, 6, 3)).astype(np.uint8)
OTHER = np.clip(BATCH + RNG.normal(0, 0.1, BATCH.shape), 0, 1).astype(np.float32)
METHODS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic")


def _resized(tf, x, sizes, **kw):
    return [tf.image.resize(x, s, m, **kw) for m in METHODS for s in sizes]


@parity(rtol=1e-4, atol=2e-5)
def test_resize_every_method_up_and_down(tf):
    """Each method (TF 2's half-pixel centers) on a 3-D float image, a 4-D batch and a uint8 image
    (float32 out, nearest keeps uint8), up, down and mixed; antialias; preserve_aspect_ratio."""
    img, batch, u8 = tf.constant(IMG), tf.constant(BATCH), tf.constant(U8)
    return (_resized(tf, img, [(3, 4), (11, 13)]), _resized(tf, batch, [(4, 17)]),
            _resized(tf, u8, [(3, 9)]), _resized(tf, batch, [(4, 3), (12, 5)], antialias=True),
            tf.image.resize(batch, (4, 20), preserve_aspect_ratio=True),
            tf.image.resize(img, [12, 12], tf.image.ResizeMethod.BICUBIC, preserve_aspect_ratio=True),
            tf.image.resize(tf.constant(IMG.astype(np.float16)), (4, 4)))


@parity(rtol=1e-4, atol=2e-5)
def test_resize_gradients(tf):
    """d sum(resize) / d images for the methods TF differentiates, with and without antialias."""
    out = []
    for m in ("bilinear", "nearest", "bicubic", "lanczos3", "gaussian", "mitchellcubic"):
        out.append(vg(tf, lambda x, m=m: tf.image.resize(x * x, (5, 11), m), BATCH))
        out.append(vg(tf, lambda x, m=m: tf.image.resize(x, (4, 3), m, antialias=True), IMG))
    return out


@parity(rtol=1e-4, atol=2e-5)
def test_resize_with_pad_crop_or_pad_and_boxes(tf):
    """resize_with_pad, resize_with_crop_or_pad (crop and pad), central_crop, crop_to_bounding_box,
    pad_to_bounding_box (3-D and 4-D, with tensor offsets), values and gradients."""
    img, batch = tf.constant(IMG), tf.constant(BATCH)
    return (tf.image.resize_with_pad(img, 10, 4), tf.image.resize_with_pad(batch, 5, 12, "nearest"),
            tf.image.resize_with_crop_or_pad(img, 4, 11), tf.image.resize_with_crop_or_pad(batch, 12, 3),
            tf.image.central_crop(img, 0.5), tf.image.central_crop(batch, 0.7), tf.image.central_crop(img, 1.0),
            tf.image.crop_to_bounding_box(img, 1, 2, 3, 4), tf.image.crop_to_bounding_box(batch, tf.constant(2), 1, 5, 5),
            tf.image.pad_to_bounding_box(img, 1, 2, 9, 10), tf.image.pad_to_bounding_box(tf.constant(U8), 0, 3, 5, 9),
            vg(tf, lambda x: tf.image.resize_with_pad(x, 7, 7), BATCH),
            vg(tf, lambda x: tf.image.resize_with_crop_or_pad(x, 4, 10) * 2.0, IMG),
            vg(tf, lambda x: tf.image.central_crop(x, 0.6) ** 2, BATCH))


@parity
def test_flips_transpose_rot90(tf):
    """The deterministic geometry on 3-D, 4-D and uint8 images, and the gradient of each."""
    img, batch, u8 = tf.constant(IMG), tf.constant(BATCH), tf.constant(U8)
    vals = [f(x) for x in (img, batch, u8) for f in (tf.image.flip_left_right, tf.image.flip_up_down,
                                                      tf.image.transpose)]
    vals += [tf.image.rot90(x, k) for x in (img, batch) for k in (0, 1, 2, 3, -1, 5)]
    vals.append(tf.image.rot90(u8, tf.constant(3)))
    grads = [vg(tf, lambda x, f=f: f(x) * tf.range(3, dtype=tf.float32), BATCH)
             for f in (tf.image.flip_left_right, tf.image.flip_up_down, tf.image.transpose,
                       lambda x: tf.image.rot90(x, 1), lambda x: tf.image.rot90(x, 2))]
    return vals, grads


@parity
def test_geometry_bad_input(tf):
    """TF's classes: ValueError for bad ranks and Python-int arguments, InvalidArgumentError for
    tensor arguments that fail TF's runtime checks."""
    img, flat = tf.constant(IMG), tf.zeros([4, 4])
    five = tf.zeros([1, 2, 3, 4, 3])
    return [raises(f) for f in (
        lambda: tf.image.flip_left_right(flat), lambda: tf.image.flip_up_down(five),
        lambda: tf.image.transpose(flat), lambda: tf.image.rot90(five),
        lambda: tf.image.crop_to_bounding_box(img, -1, 0, 2, 2), lambda: tf.image.crop_to_bounding_box(img, 0, 0, 0, 2),
        lambda: tf.image.crop_to_bounding_box(img, 0, 5, 2, 3),
        lambda: tf.image.crop_to_bounding_box(img, tf.constant(5), 0, 2, 2),
        lambda: tf.image.pad_to_bounding_box(img, 0, -1, 9, 9), lambda: tf.image.pad_to_bounding_box(img, 4, 0, 8, 9),
        lambda: tf.image.pad_to_bounding_box(img, tf.constant(4), 0, 8, 9),
        lambda: tf.image.resize_with_crop_or_pad(img, 0, 3), lambda: tf.image.resize_with_crop_or_pad(flat, 2, 3),
        lambda: tf.image.central_crop(img, 0.0), lambda: tf.image.central_crop(img, 1.5),
        lambda: tf.image.central_crop(flat, 0.5),
        lambda: tf.image.resize(flat, (2, 2)), lambda: tf.image.resize(img, (2,)),
        lambda: tf.image.resize(img, (2.5, 2)), lambda: tf.image.resize(img, (2, 2), "cubic"),
        lambda: tf.image.resize(img, (0, 2)), lambda: tf.image.resize_with_pad(img, 0, 4),
        lambda: tf.image.random_crop(img, [7, 2, 3]), lambda: tf.image.random_crop(img, [2, 2]),
        lambda: tf.image.extract_patches(img, [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID"),
        lambda: tf.image.extract_patches(tf.constant(BATCH), [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "FULL"))]


@parity
def test_convert_image_dtype(tf):
    """TF's scaling rules between integer ranges and [0, 1) floats, with and without saturation."""
    f = tf.constant(np.array([[[0.0, 0.25, 0.5], [0.999, 1.0, 1.7]], [[-0.3, 0.1, 0.9], [0.6, 0.4, 2.0]]],
                             np.float32))
    u8, i16 = tf.constant(U8), tf.constant(np.array([[[-32768, -5, 0], [7, 300, 32767]]], np.int16))
    c = tf.image.convert_image_dtype
    return ([c(f, d, saturate=True) for d in (tf.uint8, tf.int8, tf.int16, tf.uint16, tf.float16, tf.float32)]
            + [c(tf.clip_by_value(f, 0.0, 0.99), d) for d in (tf.uint8, tf.int16, tf.int32)]
            + [c(u8, d) for d in (tf.float32, tf.float16, tf.int16, tf.int32, tf.uint16, tf.uint8, tf.int8)]
            + [c(i16, d) for d in (tf.uint8, tf.int8, tf.float32, tf.int32)]
            + [c(i16, tf.uint8, saturate=True), c(u8, tf.int8, saturate=True),
               raises(c, f, tf.bool), raises(c, f, tf.complex64)])


def _colors(tf, x):
    img = tf.constant(x)
    return [tf.image.adjust_brightness(img, 0.2), tf.image.adjust_brightness(img, -0.4),
            tf.image.adjust_contrast(img, 1.8), tf.image.adjust_contrast(img, 0.3),
            tf.image.adjust_gamma(img, 2.2, 1.1), tf.image.adjust_gamma(img, 0.5),
            tf.image.adjust_hue(img, 0.3), tf.image.adjust_hue(img, -0.85),
            tf.image.adjust_saturation(img, 1.7), tf.image.adjust_saturation(img, 0.2),
            tf.image.rgb_to_grayscale(img), tf.image.per_image_standardization(img)]


@parity(rtol=1e-4, atol=2e-5)
def test_color_adjustments(tf):
    """adjust_* on float32 3-D and 4-D images and on uint8 (converted, adjusted, converted back
    with TF's saturation rules), grayscale and standardization, and the color spaces."""
    gray = np.full((2, 2, 3), 0.4, np.float32)
    img = tf.constant(IMG)
    spaces = [tf.image.rgb_to_hsv(img), tf.image.hsv_to_rgb(img), tf.image.rgb_to_yuv(img),
              tf.image.yuv_to_rgb(img), tf.image.rgb_to_yiq(img), tf.image.yiq_to_rgb(img),
              tf.image.rgb_to_hsv(tf.constant(gray)), tf.image.hsv_to_rgb(tf.image.rgb_to_hsv(img)),
              tf.image.grayscale_to_rgb(tf.constant(U8[..., :1])), tf.image.rgb_to_grayscale(tf.constant(BATCH)),
              tf.image.adjust_brightness(tf.constant(IMG.astype(np.float16)), 0.25),
              tf.image.adjust_brightness(img, tf.constant(0.1))]
    return _colors(tf, IMG), _colors(tf, BATCH), _colors(tf, U8), spaces


@parity(rtol=1e-4, atol=2e-5)
def test_color_gradients(tf):
    """Gradients where TF defines them: brightness (image and delta), gamma, rgb_to_hsv, the YUV/YIQ
    matrices, grayscale, standardization; hsv_to_rgb has none (None)."""
    x = IMG * 0.8 + 0.1
    return [vg(tf, lambda a, d: tf.image.adjust_brightness(a, d), x, 0.1),
            vg(tf, lambda a: tf.image.adjust_gamma(a, 2.0, 0.5), x),
            vg(tf, tf.image.rgb_to_hsv, x), vg(tf, tf.image.hsv_to_rgb, x),
            vg(tf, tf.image.rgb_to_yuv, x), vg(tf, tf.image.yiq_to_rgb, x),
            vg(tf, tf.image.rgb_to_grayscale, x), vg(tf, lambda a: tf.image.per_image_standardization(a) ** 2, BATCH)]


@parity
def test_standardization_gradient_of_a_constant_image_and_at_the_minimum_stddev(tf):
    """A constant image (its deviations 0: TF's abs and sqrt conventions keep the gradient
    finite) and one whose stddev is exactly ``1/sqrt(n)`` (a tie of TF's maximum: the gradient
    goes through the stddev)."""
    w = tf.constant([[[[1.0], [2.0]], [[3.0], [5.0]]]])
    return [vg(tf, lambda a: tf.reduce_sum(tf.image.per_image_standardization(a) * w), img)
            for img in ([[[[3.0], [3.0]], [[3.0], [3.0]]]], [[[[0.0], [1.0]], [[0.0], [1.0]]]])]


@parity
def test_color_bad_input(tf):
    """Bad channels, ranks, dtypes and ranges: TF's classes."""
    img, two = tf.constant(IMG), tf.zeros([4, 5, 2])
    return [raises(f) for f in (
        lambda: tf.image.adjust_hue(img, 1.5), lambda: tf.image.adjust_hue(two, 0.1),
        lambda: tf.image.adjust_saturation(two, 1.2), lambda: tf.image.rgb_to_hsv(two),
        lambda: tf.image.rgb_to_hsv(tf.constant(U8)), lambda: tf.image.rgb_to_grayscale(two),
        lambda: tf.image.rgb_to_yuv(two), lambda: tf.image.adjust_contrast(tf.zeros([4, 5]), 2.0),
        lambda: tf.image.adjust_gamma(img, -1.0), lambda: tf.image.grayscale_to_rgb(img),
        lambda: tf.image.per_image_standardization(tf.zeros([3, 3])),
        lambda: tf.image.random_brightness(img, -1.0), lambda: tf.image.random_contrast(img, 0.5, 0.2),
        lambda: tf.image.random_contrast(img, -0.5, 0.2), lambda: tf.image.random_saturation(img, 0.5, 0.5),
        lambda: tf.image.random_hue(img, 0.6), lambda: tf.image.random_hue(img, -0.1),
        lambda: tf.image.stateless_random_hue(img, 0.7, [1, 2]),
        lambda: tf.image.stateless_random_brightness(img, -0.1, [1, 2]))]


@parity(rtol=1e-4, atol=1e-4)
def test_measures_values_and_gradients(tf):
    """total_variation (3-D and 4-D), image_gradients, sobel_edges, psnr (float and uint8 with
    max_val 255), ssim (map, broadcast batch, uint8), ssim_multiscale; gradients of each."""
    a, b = tf.constant(BATCH), tf.constant(OTHER)
    au, bu = (tf.constant((x * 255).astype(np.uint8)) for x in (BATCH, OTHER))
    vals = [tf.image.total_variation(tf.constant(IMG)), tf.image.total_variation(a), list(tf.image.image_gradients(a)),
            tf.image.sobel_edges(a), tf.image.psnr(a, b, 1.0), tf.image.psnr(au, bu, 255),
            tf.image.ssim(a, b, 1.0, filter_size=5), tf.image.ssim(au, bu, 255, filter_size=3, filter_sigma=0.8),
            tf.image.ssim(a, b, 1.0, filter_size=4, return_index_map=True),
            tf.image.ssim(a[:1], b, 1.0, filter_size=3, k1=0.02, k2=0.05),
            tf.image.ssim_multiscale(a, b, 1.0, power_factors=(0.3, 0.7), filter_size=3)]
    grads = [vg(tf, tf.image.total_variation, BATCH), vg(tf, lambda x: tf.image.image_gradients(x)[1] ** 2, BATCH),
             vg(tf, tf.image.sobel_edges, BATCH), vg(tf, lambda x, y: tf.image.psnr(x, y, 1.0), BATCH, OTHER),
             vg(tf, lambda x, y: tf.image.ssim(x, y, 1.0, filter_size=5), BATCH, OTHER),
             vg(tf, lambda x, y: tf.image.ssim_multiscale(x, y, 1.0, (0.4, 0.6), filter_size=3), BATCH, OTHER)]
    return vals, grads


@parity(rtol=1e-4, atol=1e-5)
def test_ssim_multiscale_five_scales(tf):
    """The default five scales (TF's weights) on 176 x 170 images (odd sizes padded symmetrically)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (1, 176, 170, 1)).astype(np.float32)
    y = np.clip(x + rng.normal(0, 0.2, x.shape), 0, 1).astype(np.float32)
    return tf.image.ssim_multiscale(tf.constant(x), tf.constant(y), 1.0)


@parity
def test_measures_bad_input(tf):
    """Incompatible shapes and ranks, windows larger than the image: TF's classes."""
    a = tf.constant(BATCH)
    return [raises(f) for f in (
        lambda: tf.image.total_variation(tf.zeros([3, 3])), lambda: tf.image.image_gradients(tf.constant(IMG)),
        lambda: tf.image.psnr(a, tf.zeros([2, 9, 8, 2]), 1.0), lambda: tf.image.ssim(a, tf.zeros([2, 9, 7, 3]), 1.0),
        lambda: tf.image.ssim(a, a, 1.0), lambda: tf.image.ssim(a, tf.zeros([3, 9, 8, 3]), 1.0, filter_size=3),
        lambda: tf.image.ssim_multiscale(a, a, 1.0, filter_size=3))]


@parity
def test_extract_patches(tf):
    """extract_patches: VALID and SAME, strides and rates, float and uint8; its gradient."""
    a = tf.constant(BATCH)
    return (tf.image.extract_patches(a, [1, 3, 2, 1], [1, 2, 3, 1], [1, 2, 1, 1], "SAME"),
            tf.image.extract_patches(a, [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID"),
            tf.image.extract_patches(tf.constant(U8[None]), [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "VALID"),
            vg(tf, lambda x: tf.image.extract_patches(x, [1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 2, 1], "SAME") ** 2,
               BATCH))


def _flipped_one_way(tf, out, x, flip):
    """Per image of ``out``: whether it equals ``x`` or ``flip(x)`` (one of the two)."""
    same = tf.reduce_all(tf.equal(out, x), axis=[-3, -2, -1])
    fl = tf.reduce_all(tf.equal(out, flip(x)), axis=[-3, -2, -1])
    return tf.reduce_all(tf.logical_or(same, fl))


@parity
def test_random_geometry_rules(tf):
    """Random and stateless flips give the image or its flip (per image of a batch); a stateless op
    repeats with its seed; random crops are windows of the input with the asked size and dtype."""
    tf.random.set_seed(5)
    img, batch = tf.constant(IMG), tf.constant(BATCH)
    out = []
    for f, g in ((tf.image.random_flip_left_right, tf.image.flip_left_right),
                 (tf.image.random_flip_up_down, tf.image.flip_up_down)):
        out += [_flipped_one_way(tf, f(img), img, g), _flipped_one_way(tf, f(batch, seed=3), batch, g)]
    for f, g in ((tf.image.stateless_random_flip_left_right, tf.image.flip_left_right),
                 (tf.image.stateless_random_flip_up_down, tf.image.flip_up_down)):
        r1, r2 = f(batch, seed=[4, 2]), f(batch, seed=tf.constant([4, 2]))
        out += [_flipped_one_way(tf, r1, batch, g), tf.reduce_all(tf.equal(r1, r2))]
    crop = tf.image.random_crop(tf.constant(U8), [3, 4, 3], seed=1)
    s1 = tf.image.stateless_random_crop(batch, [2, 5, 5, 3], seed=[1, 9])
    s2 = tf.image.stateless_random_crop(batch, [2, 5, 5, 3], seed=[1, 9])
    patches = tf.image.extract_patches(tf.constant(U8[None].astype(np.float32)), [1, 3, 4, 1], [1, 1, 1, 1],
                                       [1, 1, 1, 1], "VALID")
    window = tf.reduce_any(tf.reduce_all(tf.equal(tf.reshape(patches, [-1, 36]),
                                                  tf.reshape(tf.cast(crop, tf.float32), [1, 36])), axis=1))
    return out, tuple(crop.shape), crop.dtype.name, window, tuple(s1.shape), tf.reduce_all(tf.equal(s1, s2))


@parity
def test_random_color_rules(tf):
    """The random adjustments stay in TF's ranges (brightness within max_delta, a stateless op
    repeats with its seed, hue and saturation keep the shape and dtype)."""
    img = tf.constant(IMG)
    d = tf.image.random_brightness(img, 0.2, seed=4) - img
    s1 = tf.image.stateless_random_brightness(img, 0.3, [7, 1])
    s2 = tf.image.stateless_random_brightness(img, 0.3, [7, 1])
    c1 = tf.image.stateless_random_contrast(img, 0.2, 0.9, [3, 3])
    c2 = tf.image.stateless_random_contrast(img, 0.2, 0.9, [3, 3])
    spread = tf.reduce_max(c1) - tf.reduce_min(c1) < tf.reduce_max(img) - tf.reduce_min(img)
    u8 = tf.image.random_saturation(tf.constant(U8), 0.5, 1.5, seed=2)
    h = tf.image.stateless_random_hue(img, 0.2, [5, 5])
    h2 = tf.image.random_hue(img, 0.1)
    sat = tf.image.stateless_random_saturation(img, 0.5, 1.5, [1, 1])
    constant_shift = tf.reduce_max(d) - tf.reduce_min(d) < 1e-5
    return (constant_shift, tf.reduce_max(tf.abs(d)) <= 0.2, tf.reduce_all(tf.equal(s1, s2)),
            tf.reduce_all(tf.equal(c1, c2)), spread, u8.dtype.name, tuple(u8.shape), tuple(h.shape), h2.dtype.name,
            tuple(sat.shape), tuple(tf.image.random_contrast(img, 0.9, 1.1).shape))


def _augment(tf, image, seed):
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = tf.image.stateless_random_crop(image, [10, 10, 3], seed=seed)
    image = tf.image.stateless_random_flip_left_right(image, seed=seed)
    image = tf.image.stateless_random_brightness(image, 0.1, seed=seed)
    image = tf.image.resize(image, [8, 8])
    return tf.image.per_image_standardization(image)


def _deterministic(tf, image):
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = tf.image.central_crop(image, 0.84)
    image = tf.image.flip_left_right(tf.image.adjust_brightness(image, 0.05))
    image = tf.image.resize(image, [8, 8], "bicubic")
    return tf.image.per_image_standardization(image)


def _train(tf, ds, steps):
    rng = np.random.default_rng(11)
    k = tf.Variable(rng.normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32))
    w = tf.Variable(rng.normal(0, 0.3, (4, 1)).astype(np.float32))
    losses = []
    for x, y in ds.take(steps):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME"))
            pred = tf.matmul(tf.reduce_mean(h, axis=[1, 2]), w)[:, 0]
            loss = tf.reduce_mean(tf.square(pred - y))
        gk, gw = tape.gradient(loss, [k, w])
        k.assign_sub(0.1 * gk)
        w.assign_sub(0.1 * gw)
        losses.append(loss)
    return losses, k


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_conv_model_trained_from_an_augmenting_pipeline(tf):
    """A user's program: uint8 images through a ``tf.data`` pipeline that maps augmentation (seeded
    stateless crop, flip and brightness, resize, standardization; a seed per element from
    ``Dataset.random``-free ``zip`` with a counter) and, separately, a deterministic preprocessing
    (central crop, flip, brightness, bicubic resize); a tiny conv model trained a few steps on
    each.  The deterministic run's losses and weights are compared with TF's; the augmented run,
    whose values depend on the generator, is checked for what TF promises: shapes, finite losses,
    and the same losses when the pipeline runs again with the same seeds."""
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (12, 12, 12, 3)).astype(np.uint8)
    labels = rng.uniform(-1, 1, 12).astype(np.float32)
    D = tf.data.Dataset
    base = D.from_tensor_slices((images, labels))
    det = base.map(lambda im, y: (_deterministic(tf, im), y)).batch(4)
    det_losses, det_k = _train(tf, det, 3)

    def augmented():
        seeds = D.range(12).map(lambda i: tf.stack([tf.cast(i, tf.int32), tf.constant(17)]))
        return D.zip((base, seeds)).map(lambda pair, s: (_augment(tf, pair[0], s), pair[1])).batch(4)
    aug_losses, _ = _train(tf, augmented(), 3)
    again, _ = _train(tf, augmented(), 3)
    first = next(iter(augmented()))[0]
    finite = all(bool(np.isfinite(float(v))) for v in aug_losses)
    same = all(float(a) == float(b) for a, b in zip(aug_losses, again))
    return det_losses, det_k, tuple(first.shape), first.dtype.name, finite, same
