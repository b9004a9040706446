"""tapejax/ops/math.py: TF's dtype lists of the arithmetic ops on bool tensors (TF 2.21's classes)."""
import pytest

import tapejax as tf


@pytest.mark.parametrize("name", ["add", "maximum", "minimum", "pow", "floordiv", "floormod"])
def test_arithmetic_of_two_bool_tensors_raises_invalid_argument_as_tf(name):
    """TF registers AddV2 / Maximum / Minimum / Pow / FloorDiv / FloorMod for number types only
    (tapejax computed jnp's logical or, max, ... of the bools)."""
    b, c = tf.constant([True, False]), tf.constant([True, True])
    with pytest.raises(tf.errors.InvalidArgumentError, match="bool"):
        getattr(tf.math, name)(b, c)
    with pytest.raises(tf.errors.InvalidArgumentError):
        b + c


def test_unary_arithmetic_add_n_and_truediv_of_bools_raise_as_tf():
    b = tf.constant([True, False])
    for fn in (tf.abs, tf.square, lambda x: tf.math.add_n([x, x])):
        with pytest.raises(tf.errors.InvalidArgumentError):
            fn(b)
    with pytest.raises(TypeError):
        tf.math.truediv(b, b)


def test_python_bool_next_to_a_number_tensor_converts_and_bool_products_stay_logical():
    """A Python bool next to an int / float tensor is converted to its dtype (TF); ``b * c`` of bool
    tensors is TF's logical and (Tensor.__mul__)."""
    assert (tf.constant([1, 2]) + True).numpy().tolist() == [2, 3]
    assert (tf.constant([1.0]) + True).numpy().tolist() == [2.0]
    assert tf.maximum(tf.constant([1, 2]), True).numpy().tolist() == [1, 2]
    assert (tf.constant([True, False]) * tf.constant([True, True])).numpy().tolist() == [True, False]


def _grad(fn, xs):
    x = tf.constant(xs)
    with tf.GradientTape() as t:
        t.watch(x)
        y = fn(x)
    return t.gradient(y, x).numpy()


def test_softsign_acosh_digamma_derivatives_at_domain_edges_are_tfs():
    """TF's registered gradients: softsign' = 1 / (1 + |x|)^2 is 0 at ±inf (JAX's quotient rule: NaN);
    acosh' = 1 / sinh(acosh x) is NaN below 1 and inf at 1 (JAX's was finite at x <= -1); digamma' =
    polygamma(1, x) is 0 at inf (JAX: NaN)."""
    import numpy as np
    inf, nan = np.inf, np.nan
    np.testing.assert_allclose(_grad(tf.math.softsign, [-inf, 0.0, 1.0, inf]), [0.0, 1.0, 0.25, 0.0])
    np.testing.assert_allclose(_grad(tf.math.acosh, [-2.0, 0.5, 1.0, 2.0, inf]), [nan, nan, inf, 3 ** -0.5, 0.0],
                               rtol=1e-6)
    np.testing.assert_allclose(_grad(tf.math.digamma, [1.0, inf]), [np.pi ** 2 / 6, 0.0], rtol=1e-5)
