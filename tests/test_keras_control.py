"""tapejax/keras/control.py: ``keras.ops``' control flow on tapejax values is Keras's TensorFlow
backend's, over tapejax's ``cond`` / ``while_loop`` / ``switch_case`` / ``map_fn`` /
``vectorized_map`` (on the tape); on JAX arrays and inside Keras scopes it is Keras's own."""
import jax
import jax.numpy as jnp
import numpy as np

import tapejax as tf

tf.keras.layers   # noqa: B018  (loads the integration)
import keras as K3  # noqa: E402
from keras.src.backend.common.stateless_scope import StatelessScope  # noqa: E402


def _grad(fn, value):
    x = tf.constant(value)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y, tape.gradient(y, x)


def test_cond_on_a_tensor_and_on_a_python_predicate():
    y, g = _grad(lambda x: K3.ops.cond(x > 0, lambda: x * x, lambda: -x), 3.0)
    assert (float(y), float(g)) == (9.0, 6.0)
    y, g = _grad(lambda x: K3.ops.cond(False, lambda: x * x, lambda: -x), 3.0)
    assert (float(y), float(g)) == (-3.0, -1.0)


def test_loops_are_differentiated_by_the_tape_eagerly_and_compiled():
    def f(x):
        a = K3.ops.fori_loop(0, 3, lambda i, acc: acc * x, tf.constant(1.0))   # x^3
        _, b = K3.ops.while_loop(lambda i, t: i < 2, lambda i, t: (i + 1, t + x), (0, x), maximum_iterations=2)  # 3x
        return a + b
    for fn in (f, tf.function(f)):
        y, g = _grad(fn, 2.0)
        assert (float(y), float(g)) == (14.0, 15.0)


def test_switch_map_and_vectorized_map():
    def f(x):
        rows = tf.reshape(x, (2, 1))
        s = K3.ops.switch(5, [lambda a: a, lambda a: a * 3.0], tf.reduce_sum(x))   # clipped to the last branch
        m = tf.reduce_sum(K3.ops.map(lambda r: r * r, rows))
        v = tf.reduce_sum(K3.ops.vectorized_map(lambda r: r * 2.0, rows))
        return s + m + v
    y, g = _grad(f, np.array([1.0, 2.0], np.float32))
    np.testing.assert_allclose(float(y), 9.0 + 5.0 + 6.0)
    np.testing.assert_allclose(g.numpy(), [3.0 + 2.0 + 2.0, 3.0 + 4.0 + 2.0])


def test_jax_arrays_and_keras_scopes_get_keras_own():
    out = K3.ops.cond(jnp.asarray(True), lambda: jnp.ones(()), lambda: jnp.zeros(()))
    assert isinstance(out, jax.Array) and not isinstance(out, tf.Tensor)
    with StatelessScope():
        out = K3.ops.fori_loop(0, 2, lambda i, a: a + 1.0, jnp.zeros(()))
    assert isinstance(out, jax.Array) and float(out) == 2.0


def test_custom_gradient_is_tf_custom_gradient_on_tensors_and_keras_own_on_jax_values():
    @K3.ops.custom_gradient
    def clip_grad(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return K3.ops.clip(upstream, -0.5, 0.5)
        return x, grad

    def f(v):
        return tf.reduce_sum(clip_grad(v * v) * 2.0)

    for fn in (f, tf.function(f)):
        _, g = _grad(fn, np.array([1.0, -2.0, 3.0], np.float32))
        np.testing.assert_allclose(g.numpy(), [1.0, -2.0, 3.0])   # 2 * v * clip(2, -0.5, 0.5)
    assert float(jax.grad(lambda v: clip_grad(v * 3.0))(jnp.asarray(1.0))) == 1.5   # JAX: Keras's own
