"""tapejax/compile/tensor_array.py: one trace per signature, the loop form (a pytree carried by
while_loop / scan), dynamic_size bounds and their errors, run-time index checks; oracles are NumPy
values and jax.vjp of the same pure function."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.compile import tensor_array_loop as ta_mod
from tapejax.core.errors import InvalidArgumentError


def test_one_trace_per_signature():
    traces = []

    @tf.function
    def f(x):
        traces.append(1)
        ta = tf.TensorArray(tf.float32, size=3)
        for i in tf.range(3):
            ta = ta.write(i, x * tf.cast(i, tf.float32))
        return ta.stack()

    for v in ([1.0, 2.0], [3.0, 4.0], [5.0, 6.0]):
        out = f(tf.constant(v))
        np.testing.assert_allclose(out.numpy(), np.outer([0, 1, 2], v))
    assert len(traces) == 1
    assert f.experimental_get_tracing_count() == 1
    f(tf.constant([1.0, 2.0, 3.0]))   # a new shape: one more trace
    assert f.experimental_get_tracing_count() == 2


def test_loop_gradient_matches_jax_vjp():
    def pure(x):
        buf = jnp.zeros((4,) + x.shape, x.dtype)
        for i in range(4):
            buf = buf.at[i].set(jnp.sin(x) * (i + 1.0))
        return jnp.sum(buf ** 2)

    @tf.function
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            ta = tf.TensorArray(tf.float32, size=4)
            for i in tf.range(4):
                ta = ta.write(i, tf.sin(x) * tf.cast(i + 1, tf.float32))
            loss = tf.reduce_sum(ta.stack() ** 2)
        return loss, t.gradient(loss, x)

    x = np.array([0.3, -1.2], np.float32)
    loss, g = f(tf.constant(x))
    want, vjp = jax.vjp(pure, jnp.asarray(x))
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), vjp(jnp.float32(1.0))[0], rtol=1e-6)


def test_pytree_roundtrip_and_loop_form():
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[2])
    ta.write(1, [1.0, 2.0])
    leaves, tree = jax.tree_util.tree_flatten(ta, is_leaf=lambda x: isinstance(x, tf.Tensor))
    assert len(leaves) == 1   # the one written element (eager list form)
    back = jax.tree_util.tree_unflatten(tree, leaves)
    np.testing.assert_allclose(back.stack().numpy(), [[0, 0], [1, 2], [0, 0]])
    loop = ta_mod.enter_loop(ta, None)
    assert loop._buf is not None and tuple(loop._buf.shape) == (3, 2)
    np.testing.assert_allclose(loop.stack().numpy(), [[0, 0], [1, 2], [0, 0]])


def test_eager_while_loop_with_tensor_array():
    ta = tf.TensorArray(tf.float32, size=3)
    _, out = tf.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t.write(i, tf.cast(i, tf.float32) * 2.0)),
                           (tf.constant(0), ta))
    np.testing.assert_allclose(out.stack().numpy(), [0.0, 2.0, 4.0])


def test_dynamic_size_needs_a_bound():
    @tf.function
    def f(n):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        i = tf.constant(0)
        while i < n:
            ta = ta.write(i, 1.0)
            i += 1
        return ta.stack()

    with pytest.raises(ValueError, match="maximum_iterations"):
        f(tf.constant(3))


def test_dynamic_size_filled_partially_is_a_run_time_error():
    @tf.function
    def f(n):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        i = tf.constant(0)
        while i < n:
            tf.autograph.experimental.set_loop_options(maximum_iterations=4)
            ta = ta.write(i, tf.cast(i, tf.float32))
            i += 1
        return ta.stack(), ta.size()

    out, size = f(tf.constant(4))
    np.testing.assert_allclose(out.numpy(), [0, 1, 2, 3])
    assert int(size.numpy()) == 4
    with pytest.raises(InvalidArgumentError, match="has 2 elements"):
        f(tf.constant(2))


def test_traced_write_to_an_empty_dynamic_array_outside_a_loop_is_a_traced_size_error():
    """No loop grew the array, so no row can hold an index known only at run time: TracedSizeError
    (a ValueError) at trace time, which a dataset function answers by running eagerly. The same
    write in a converted loop (the array grown by its bound) gives the rows."""
    from tapejax.ops.indexing_traced import TracedSizeError

    def once(x):
        ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        return ta.write(x, x).stack()   # (unconverted, at an index known only at run time)

    def fill(x):
        ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        for i in tf.range(3):
            ta = ta.write(i, x + i)
        return ta.stack()

    with pytest.raises(TracedSizeError, match="no rows yet"):
        tf.function(once, autograph=False)(tf.constant(1))
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):   # (TF: Python cannot iterate the range)
        tf.function(fill, autograph=False)(tf.constant(1))
    assert tf.function(fill)(tf.constant(1)).numpy().tolist() == [1, 2, 3]


def test_traced_index_out_of_range_is_checked():
    @tf.function
    def f(i):
        ta = tf.TensorArray(tf.float32, size=2)
        return ta.write(i, 1.0).stack()

    np.testing.assert_allclose(f(tf.constant(1)).numpy(), [0.0, 1.0])
    with pytest.raises(InvalidArgumentError, match="index"):
        f(tf.constant(5))


def test_traced_write_is_functional_eager_write_in_place():
    ta = tf.TensorArray(tf.float32, size=2)
    assert ta.write(0, 1.0) is ta

    @tf.function
    def f():
        a = tf.TensorArray(tf.float32, size=2, element_shape=[])
        a.write(0, 5.0)          # discarded, as in TF's graph
        return a.stack()

    np.testing.assert_allclose(f().numpy(), [0.0, 0.0])


def test_scan_carries_a_tensor_array():
    def fn(acc, x):
        i, ta = acc
        return i + 1, ta.write(i, x * 2.0)

    @tf.function
    def f(xs):
        _, ta = tf.foldl(fn, xs, initializer=(tf.constant(0), tf.TensorArray(tf.float32, size=3)))
        return ta.stack()

    np.testing.assert_allclose(f(tf.constant([1.0, 2.0, 3.0])).numpy(), [2.0, 4.0, 6.0])


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="Size must be declared"):
        tf.TensorArray(tf.float32)
    with pytest.raises(ValueError, match="handles"):
        tf.TensorArray(tf.float32, size=1, handle=object())


def test_a_tensor_array_sized_by_a_symbolic_dimension_is_traced_once():
    """``tf.TensorArray(size=tf.shape(x)[0])`` under a ``None`` signature (the guide's ``dynamic_rnn``):
    the size is the trace's symbolic size, so the function is traced once for every length (it fell
    back to a trace per shape: 'size must be known'); values and the Variable's gradient as NumPy /
    ``jax.grad`` of the same recurrence."""
    w0 = np.full((3, 2), 0.2, np.float32)
    w = tf.Variable(w0)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def states(x):
        out = tf.TensorArray(tf.float32, size=tf.shape(x)[0])
        h = tf.zeros([2])
        for t in tf.range(tf.shape(x)[0]):
            h = tf.tanh(tf.linalg.matvec(w, x[t], transpose_a=True) + h)
            out = out.write(t, h)
        return out.stack()

    def ref(wv, x):
        h, hs = jnp.zeros(2), []
        for t in range(x.shape[0]):
            h = jnp.tanh(x[t] @ wv + h)
            hs.append(h)
        return jnp.stack(hs)

    for n in (4, 1, 6):
        x = np.random.RandomState(n).randn(n, 3).astype(np.float32)
        with tf.GradientTape() as tape:
            hs = states(tf.constant(x))
            loss = tf.reduce_sum(hs)
        np.testing.assert_allclose(hs.numpy(), ref(w0, x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tape.gradient(loss, w).numpy(), jax.grad(lambda v: ref(v, x).sum())(w0),
                                   rtol=1e-5, atol=1e-6)
    assert states.experimental_get_tracing_count() == 1


def test_an_array_written_in_one_branch_of_a_staged_if_reads_zeros_in_the_other():
    """``tensor_array_loop.match_branches``: the branch that leaves the array unwritten gets a
    buffer of zeros of the element shape the other wrote (TF's unwritten rows), so both branches
    return one structure; the written branch's values and gradient are kept."""
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=3)
        if tf.reduce_sum(x) > 0:
            ta = ta.write(2, x * 2.0)
        return ta.stack()

    x = tf.constant([1.0, 2.0])
    np.testing.assert_array_equal(f(x).numpy(), [[0, 0], [0, 0], [2, 4]])
    np.testing.assert_array_equal(f(-x).numpy(), np.zeros((3, 2)))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(f(x))
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 2.0])
