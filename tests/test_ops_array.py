"""``tapejax/ops/array.py`` beyond parity: ``tf.reshape`` and ``tf.shape`` of a tensor whose size
is symbolic (Keras 3's symbolic call of a layer builds a functional model with a batch of
``None``; an exported signature's ``None``).

keras.io's VQ-VAE quantiser flattens by ``tf.reshape(x, [-1, d])`` and restores by
``tf.reshape(q, tf.shape(x))``: in a functional model both raised (an ``int()`` of the symbolic
size, then a shape tensor whose value only the program knows).  ``tf.shape`` of such a tensor
keeps its dimensions for ``reshape``.  (The trainer itself is compared with TF in
``tests/parity/test_user_programs19c2.py``.)  And TF's ``-1`` of an empty tensor's reshape.
"""
import numpy as np
import pytest

import tapejax as tf


class _FlattenAndBack(tf.keras.layers.Layer):
    def call(self, x):
        flat = tf.reshape(x, [-1, 2])
        return tf.reshape(flat * 2.0, tf.shape(x)), flat


def test_reshape_to_minus_one_and_back_by_tf_shape_in_a_functional_model():
    inp = tf.keras.Input((3, 2))
    out, flat = _FlattenAndBack()(inp)
    assert tuple(out.shape) == (None, 3, 2)
    assert tuple(flat.shape) == (None, 2)
    model = tf.keras.Model(inp, [out, flat])
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    y, f = model(x)
    np.testing.assert_array_equal(np.asarray(y), 2.0 * x)
    np.testing.assert_array_equal(np.asarray(f), x.reshape(-1, 2))


def test_reshape_by_tf_shape_under_a_polymorphic_signature():
    @tf.function(input_signature=[tf.TensorSpec([None, 4])])
    def f(x):
        return tf.reshape(tf.reshape(x, [-1, 2]) + 1.0, tf.shape(x))

    for n in (1, 3):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        np.testing.assert_array_equal(np.asarray(f(x)), x + 1.0)


class _Patches(tf.keras.layers.Layer):
    """keras.io's ViT ``Patches`` reshape: ``batch_size = tf.shape(x)[0]``."""

    def call(self, x):
        batch_size = tf.shape(x)[0]
        return tf.reshape(x, [batch_size, -1, 2])


def test_one_dimension_of_a_symbolic_shape_in_a_reshape_list():
    inp = tf.keras.Input((4, 3, 2))
    out = _Patches()(inp)
    assert tuple(out.shape) == (None, 12, 2)
    x = np.arange(48, dtype=np.float32).reshape(2, 4, 3, 2)
    np.testing.assert_array_equal(np.asarray(tf.keras.Model(inp, out)(x)), x.reshape(2, 12, 2))


def test_batch_size_from_tf_shape_under_a_polymorphic_signature():
    @tf.function(input_signature=[tf.TensorSpec([None, 4])])
    def f(x):
        n = tf.shape(x)[0]
        return tf.reshape(x, [n, 2, 2]), tf.zeros([n, 3]), tf.shape(x)[1:]

    for n in (1, 3):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        y, z, rest = f(x)
        np.testing.assert_array_equal(np.asarray(y), x.reshape(n, 2, 2))
        assert np.asarray(z).shape == (n, 3)
        np.testing.assert_array_equal(np.asarray(rest), [4])


def test_reshape_infers_minus_one_from_the_nonzero_sizes_of_an_empty_tensor():
    """TF 2.21's rule when the requested shape has a 0: ``-1`` is the product of the input's nonzero
    sizes over the requested nonzero ones (DP-SGD's ``tf.reshape(jac, [n, -1])`` of an empty
    Poisson batch); tapejax refused it ("does not fit")."""
    cases = {((0, 3, 1), (0, -1)): (0, 3), ((0, 3), (-1, 0)): (3, 0), ((0, 4, 6), (3, -1, 0)): (3, 8, 0),
             ((0, 5), (2, -1, 0)): (2, 2, 0), ((0, 3), (-1, 3)): (0, 3)}
    for (src, shape), want in cases.items():
        assert tuple(tf.reshape(tf.zeros(src), shape).shape) == want
    with pytest.raises(tf.errors.InvalidArgumentError, match="6 values"):
        tf.reshape(tf.zeros([2, 3]), [0, -1])


def test_concat_converts_a_list_with_the_tensors_dtype_as_tf():
    """``tf.concat([h, [0.1]], 0)`` of a float16 ``h`` converts the list as float16 (tapejax made it
    float32 and the result float32), a float64 one keeps float64's exact 0.1 (TF 2.21); and
    ``tf.matmul`` of a float16 matrix and a nested list is float16."""
    import jax

    h = tf.constant([1.0, 2.0], tf.float16)
    r = tf.concat([h, [0.1]], 0)
    assert r.dtype == tf.float16
    np.testing.assert_array_equal(r.numpy(), np.float16([1.0, 2.0, 0.1]))
    assert tf.matmul(tf.reshape(h, [1, 2]), [[0.1], [0.2]]).dtype == tf.float16
    with jax.enable_x64(True):
        r = tf.concat([tf.constant([1.0], tf.float64), [0.1]], 0)
        np.testing.assert_array_equal(r.numpy(), [1.0, 0.1])


def test_stack_converts_a_list_with_the_tensors_dtype_and_refuses_mixed_tensors_as_tf():
    """``tf.stack([h, [0.1, 0.2]])`` of a float16 ``h`` is float16 (tapejax made it float32); a
    float16 and a float32 tensor are TF's InvalidArgumentError naming input #1 (tapejax promoted)."""
    h = tf.constant([1.0, 2.0], tf.float16)
    r = tf.stack([h, [0.1, 0.2]])
    assert r.dtype == tf.float16
    np.testing.assert_array_equal(r.numpy(), np.float16([[1.0, 2.0], [0.1, 0.2]]))
    assert tf.stack([[1, 2], h]).dtype == tf.float16
    assert tf.stack([[1, 2], [3, 4]]).dtype == tf.int32
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Pack as input #1.*float16.*float32"):
        tf.stack([h, tf.constant([1.0, 2.0])])
