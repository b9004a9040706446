"""tapejax/ops/special.py: ``tf.math.angle``'s gradient, TF 2.21's numbers (its complex gradient
``-g / (imag + i real)``; None for a real input)."""
import numpy as np

import tapejax as tf


def test_angle_of_complex_has_tfs_gradient_and_of_real_none():
    """The complex gradient was None (the op was registered as not differentiable, TF's real path)."""
    z = tf.constant([1.0 + 2.0j, -3.0 + 0.5j, -2.0 + 0.0j, 0.5j], tf.complex64)
    r = tf.constant([1.0, -2.0, 0.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([z, r])
        a = tf.reduce_sum(tf.math.angle(z) * [1.0, 3.0, 4.0, 5.0])
        b = tf.reduce_sum(tf.math.angle(r))
    np.testing.assert_allclose(t.gradient(a, z).numpy(), [-0.4 + 0.2j, -0.16216217 - 0.972973j, -2.0j, -10.0],
                               rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), np.pi)
    assert t.gradient(b, r) is None
