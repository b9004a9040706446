"""tapejax/keras/resizing.py: Keras's bicubic resize is TF's ``ResizeBicubic`` (tapejax's
``tf.image.resize``, checked against TF in tests/parity/test_image.py), its other modes Keras's."""
import numpy as np

import tapejax as tf

keras = tf.keras
X = (np.random.RandomState(0).rand(2, 8, 8, 3) * 255).astype(np.float32)


def test_bicubic_resizing_layer_and_op_are_tfs_at_the_border_too():
    want = tf.image.resize(X, (12, 12), method="bicubic").numpy()
    got = keras.layers.Resizing(12, 12, interpolation="bicubic")(X).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(keras.ops.image.resize(X[0], (5, 5), interpolation="bicubic").numpy(),
                               tf.image.resize(X[0], (5, 5), method="bicubic").numpy(), rtol=1e-6, atol=1e-4)
    # (before: 129.3726 at the first pixel, TF's 129.3554)
    assert abs(float(got[0, 0, 0, 0]) - float(want[0, 0, 0, 0])) < 1e-3


def test_bicubic_gradient_is_the_ops():
    x = tf.constant(X[:1])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        a = tf.reduce_sum(tf.sin(keras.layers.Resizing(5, 6, interpolation="bicubic")(x)))
        b = tf.reduce_sum(tf.sin(tf.image.resize(x, (5, 6), method="bicubic")))
    np.testing.assert_allclose(tape.gradient(a, x).numpy(), tape.gradient(b, x).numpy(), rtol=1e-4, atol=1e-5)


def test_other_modes_and_cropping_stay_keras_own():
    np.testing.assert_allclose(keras.layers.Resizing(5, 5)(X).numpy(), tf.image.resize(X, (5, 5)).numpy(),
                               rtol=1e-5, atol=1e-3)
    cropped = keras.layers.Resizing(4, 6, interpolation="bicubic", crop_to_aspect_ratio=True)(X)
    assert tuple(cropped.shape) == (2, 4, 6, 3)
    ints = keras.layers.Resizing(4, 4, interpolation="bicubic")(X.astype(np.uint8))
    assert ints.dtype == tf.uint8                     # (Keras's rounding and saturating cast after)
