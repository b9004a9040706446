"""Slices whose bounds are a traced loop index inside a compiled step (``xs[i * 3:(i + 1) * 3]``,
``xs[i:i + k]``, ``x[..., 2 * i:2 * i + 2]``) in converted ``for`` loops over ``tf.range``,
``tf.while_loop`` bodies, converted ``while`` loops, ``tf.scan`` and integer arguments: values and
gradients, with a tape inside the function and around its call (``ops.affine``,
``ops.indexing_traced``)."""
import numpy as np

from .harness import parity

TOL = dict(rtol=1e-5, atol=1e-5)


def _xs(tf):
    return tf.Variable(np.arange(24, dtype=np.float32).reshape(12, 2) / 10.0, name="xs")


@parity(**TOL)
def test_chunks_of_a_range_index_with_a_tape_inside(tf):
    """``xs[i * 3:(i + 1) * 3]`` in ``for i in tf.range(4)``, the tape inside the function."""
    xs = _xs(tf)

    @tf.function
    def f():
        with tf.GradientTape() as tape:
            tot = tf.constant(0.0)
            for i in tf.range(4):
                tot += tf.reduce_sum(tf.sin(xs[i * 3:(i + 1) * 3])) * tf.cast(i + 1, tf.float32)
        return tot, tape.gradient(tot, xs)

    return f()


@parity(**TOL)
def test_offsets_strides_and_trailing_axes_with_a_tape_around_the_call(tf):
    """``xs[i:i + 3]``, ``xs[2 * i:2 * i + 2, 1]``, ``xs[..., 1][i * 2:i * 2 + 4:2]``, ``i`` written as
    ``3 * i - 2 * i``, and ``x[..., i * 2:(i + 1) * 2]`` on the last axis; the tape around the
    compiled call."""
    xs = _xs(tf)

    @tf.function
    def f():
        tot = tf.constant(0.0)
        for i in tf.range(5):
            tot += tf.reduce_sum(xs[i:i + 3] ** 2) + tf.reduce_sum(xs[2 * i:2 * i + 2, 1])
            tot += tf.reduce_sum(xs[..., 1][i * 2:i * 2 + 4:2]) + tf.reduce_sum(xs[3 * i - 2 * i:i + 2])
            tot += tf.reduce_sum(tf.transpose(xs)[..., i * 2:(i + 1) * 2] * 0.5)
        return tot

    with tf.GradientTape() as tape:
        y = f()
    return y, tape.gradient(y, xs)


@parity(**TOL)
def test_while_loop_body_slices_by_its_counter(tf):
    """``tf.while_loop`` whose body slices by its counter (checked at run time: its range is not
    known while tracing), differentiated by a tape around the call."""
    xs = _xs(tf)

    @tf.function
    def f():
        def body(i, acc):
            return i + 1, acc + tf.reduce_sum(xs[i * 3:(i + 1) * 3] * 2.0)
        return tf.while_loop(lambda i, acc: i < 4, body, [tf.constant(0), tf.constant(0.0)],
                             maximum_iterations=4)[1]

    with tf.GradientTape() as tape:
        y = f()
    return y, tape.gradient(y, xs)


@parity(**TOL)
def test_converted_while_scan_and_break(tf):
    """A converted ``while i < 4`` loop, ``tf.scan`` over ``tf.range(4)``, and a ``for`` over
    ``tf.range`` that ``break``s on a tensor condition, each slicing by its index."""
    xs = _xs(tf)

    @tf.function
    def f():
        i = tf.constant(0)
        a = tf.constant(0.0)
        while i < 4:
            a += tf.reduce_sum(xs[i * 3:i * 3 + 3, :1])
            i += 1
        b = tf.scan(lambda acc, j: acc + tf.reduce_sum(xs[j * 3:(j + 1) * 3]), tf.range(4),
                    initializer=tf.constant(0.0))
        c = tf.constant(0.0)
        for k in tf.range(6):
            if tf.reduce_sum(xs[k * 2:k * 2 + 2]) > 1.5:
                break
            c += tf.reduce_sum(xs[k * 2:k * 2 + 2])
        return a, b, c

    return f()


@parity(**TOL)
def test_modulo_nested_loops_and_a_shape_derived_batch(tf):
    """``xs[(i % 4) * 2:(i % 4) * 2 + 2]`` (the same expression twice), a nested loop's
    ``xs[i + j:i + j + 1]``, and ``tf.slice`` / a slice with ``bs = tf.shape(xs)[0] // 4``."""
    xs = _xs(tf)

    @tf.function
    def f():
        tot = tf.constant(0.0)
        bs = tf.shape(xs)[0] // 4
        for i in tf.range(8):
            tot += tf.reduce_sum(xs[(i % 4) * 2:(i % 4) * 2 + 2]) * tf.cast(i, tf.float32)
            for j in tf.range(3):
                tot += tf.reduce_sum(xs[i + j:i + j + 1])
            if i < 4:
                tot += tf.reduce_sum(xs[i * bs:(i + 1) * bs]) + tf.reduce_sum(tf.slice(xs, [i * bs, 0], [bs, -1]))
        return tot

    with tf.GradientTape() as tape:
        y = f()
    return y, tape.gradient(y, xs)


@parity(**TOL)
def test_integer_argument_bounds_and_negative_starts(tf):
    """An integer argument as the start: in range, and negative (counted from the end, TF's
    rule): ``xs[i:i + 3]`` and ``xs[i - 3:i]``."""
    xs = _xs(tf)

    @tf.function
    def f(i):
        return xs[i:i + 3], xs[i - 3:i]

    return [f(tf.constant(k)) for k in (3, 9, -4, -5)]


@parity(**TOL)
def test_sliced_assign_by_a_loop_index(tf):
    """``v[i * 2:i * 2 + 2, 1].assign(...)`` and ``v[i * 2:i * 2 + 2].assign(v[...] + 1)`` in a
    compiled loop."""
    v = tf.Variable(np.zeros((6, 2), np.float32))

    @tf.function
    def f():
        for i in tf.range(3):
            v[i * 2:i * 2 + 2, 1].assign(tf.cast(i + 1, tf.float32) * tf.ones([2]))
            v[i * 2:i * 2 + 2].assign(v[i * 2:i * 2 + 2] + 1.0)
        return v.read_value()

    return f(), v
