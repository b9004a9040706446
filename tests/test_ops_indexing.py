"""``tapejax/ops/indexing.py`` beyond parity: ``tf.slice`` with a ``begin`` known only when a
compiled step runs (a loop index), against ``jax.lax.dynamic_slice`` and its ``jax.vjp``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


def test_slice_with_a_loop_index_begin_inside_a_function_values_and_gradients():
    """``tf.slice(v, [i * 2, 1], [2, 2])`` in ``for i in tf.range(3)``: the values and the
    Variable's gradient are those of ``dynamic_slice`` (it raised a 'symbolic tensor as a Python
    value' error before)."""
    x = np.arange(24, dtype=np.float32).reshape(6, 4) / 10.0
    v = tf.Variable(x)

    @tf.function
    def f():
        with tf.GradientTape() as tape:
            tot = tf.constant(0.0)
            for i in tf.range(3):
                tot += tf.reduce_sum(tf.sin(tf.slice(v, [i * 2, 1], [2, 2])) * tf.cast(i + 1, tf.float32))
        return tot, tape.gradient(tot, v)

    def ref(a):
        return sum(jnp.sum(jnp.sin(jax.lax.dynamic_slice(a, (i * 2, 1), (2, 2)))) * (i + 1) for i in range(3))

    want, vjp = jax.vjp(ref, jnp.asarray(x))
    got, g = f()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), vjp(jnp.float32(1.0))[0], rtol=1e-6)


def test_slice_with_a_traced_begin_argument():
    """A ``begin`` passed as a function argument (a Tensor), the static path's values."""
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    f = tf.function(lambda b: tf.slice(x, b, [2, 3]))
    np.testing.assert_array_equal(f(tf.constant([1, 1])).numpy(), tf.slice(x, [1, 1], [2, 3]).numpy())
    assert f(tf.constant([0, 0])).shape == (2, 3)


def test_slice_with_a_traced_begin_size_minus_one():
    """-1 takes the rest of an axis whose ``begin`` is a Python int (the batch pattern
    ``tf.slice(x, [i * bs, 0], [bs, -1])``); on an axis whose ``begin`` is traced the size is
    unknown until run time, which XLA cannot compile: a ValueError naming ``size``."""
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    f = tf.function(lambda i: tf.slice(x, [i, 1], [2, -1]))
    np.testing.assert_array_equal(f(tf.constant(1)).numpy(), x.numpy()[1:3, 1:])
    g = tf.function(lambda i: tf.slice(x, [i, 0], [-1, 2]))
    with pytest.raises(ValueError, match="size"):
        g(tf.constant(1))


def test_gather_nd_out_of_range_index_gives_the_fill_not_the_clamped_last_row():
    """``gather_nd`` with an index past the end: NaN (JAX's fill, as ``gather``'s; TF's CPU kernel
    raises), never the value of the last row, which plain JAX indexing clamps to (a silently
    wrong number).  The gradient of a filled entry is dropped.  Oracle: ``jnp`` fill mode."""
    p = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    got = tf.gather_nd(p, [[3, 0], [1, 1], [0, 2]])
    assert np.isnan(got.numpy()[[0, 2]]).all() and got.numpy()[1] == 4.0
    rows = tf.gather_nd(p, [[5], [0]])
    assert np.isnan(rows.numpy()[0]).all() and rows.numpy()[1].tolist() == [1.0, 2.0]
    with tf.GradientTape() as tape:
        tape.watch(p)
        g2 = tf.gather_nd(p, [[3, 0], [1, 1]])
        y = tf.reduce_sum(tf.where(tf.math.is_nan(g2), 0.0, g2))
    want = jax.grad(lambda a: jnp.nansum(a.at[jnp.array([3, 1]), jnp.array([0, 1])].get(mode="fill")))(
        jnp.asarray(p.numpy()))
    np.testing.assert_array_equal(tape.gradient(y, p).numpy(), want)
