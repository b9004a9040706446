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
