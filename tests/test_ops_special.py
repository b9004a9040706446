"""tapejax/ops/special.py: ``tf.math.angle``'s gradient, TF 2.21's numbers (its complex gradient
``-g / (imag + i real)``; None for a real input)."""
import numpy as np
import pytest

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


def test_ndtri_and_bessel_i1e_derivatives_at_their_edges_are_tfs():
    """ndtri' = sqrt(2 pi) exp(ndtri(x)^2 / 2) is inf at 0 and 1 (JAX's read 0), also through erfcinv
    (inf at 0 and 2); bessel_i1e' is 0.5 at 0 and NaN at NaN (JAX's read 0.5)."""
    def grad(fn, xs):
        x = tf.constant(xs)
        with tf.GradientTape() as t:
            t.watch(x)
            y = fn(x)
        return t.gradient(y, x).numpy()

    np.testing.assert_allclose(grad(tf.math.ndtri, [0.0, 0.5, 1.0]), [np.inf, np.sqrt(2 * np.pi), np.inf], rtol=1e-6)
    np.testing.assert_allclose(grad(tf.math.erfcinv, [0.0, 1.0, 2.0]), [-np.inf, -np.sqrt(np.pi) / 2, -np.inf],
                               rtol=1e-6)
    np.testing.assert_allclose(grad(tf.math.bessel_i1e, [0.0, np.nan]), [0.5, np.nan])


def test_fresnel_integrals_values_gradients_and_dtypes_are_tfs():
    """``tf.math.special.fresnel_cos`` / ``fresnel_sin`` (not in ``tf.math``): TF 2.21's values, its
    gradients ``cos`` / ``sin(pi x^2 / 2)``, and its errors: NotFoundError for half dtypes (no
    kernel), InvalidArgumentError for an integer."""
    x = tf.constant([0.5, -1.2, 2.0, 0.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.math.special.fresnel_cos(x) + 2.0 * tf.math.special.fresnel_sin(x)
    np.testing.assert_allclose(y.numpy(), [0.62180907, -1.9622395, 1.1750848, 0.0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [1.6892464, 0.90360206, 1.0000004, 1.0], rtol=1e-6)
    assert not hasattr(tf.math, "fresnel_cos")
    for dt, err in [(tf.float16, tf.errors.NotFoundError), (tf.bfloat16, tf.errors.NotFoundError),
                    (tf.int32, tf.errors.InvalidArgumentError)]:
        with pytest.raises(err):
            tf.math.special.fresnel_sin(tf.constant([1], dt))


def test_complex_of_python_floats_is_complex64_in_x64_mode_and_ints_are_tfs_type_error():
    """TF converts ``tf.complex(0.1, 0.2)``'s parts to float32 tensors, so complex64 (tapejax gave
    complex128 under x64); a list beside a float64 part takes float64; int parts are TypeError."""
    import jax

    with jax.enable_x64(True):
        assert tf.complex(0.1, 0.2).dtype == tf.complex64
        assert tf.complex(tf.constant([1.0], tf.float64), [2.0]).dtype == tf.complex128
    assert tf.complex(0.5, tf.constant([1.0])).dtype == tf.complex64
    with pytest.raises(TypeError, match="int32 int32"):
        tf.complex(1, 2)
