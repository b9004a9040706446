"""tf.TensorArray (tapejax/compile/tensor_array.py) under TensorFlow and tapejax: eager values and
errors, gradients incl. None for unconnected elements, and the loops of tf.function (for over
tf.range, while with dynamic_size and maximum_iterations, nested loops, tf.while_loop, an RNN
trained for a few steps).  Every case runs with deferred execution on and off (modes=True)."""
import numpy as np

from .harness import parity, raises

X = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 4.0]], np.float32)


@parity(modes=True)
def test_eager_write_read_stack(tf):
    """Eager writes in place, unwritten rows stack as zeros, size, element_shape, dtype, concat."""
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[2])
    ta.write(0, tf.constant([1.0, 2.0]))
    ta = ta.write(2, [3.0, 4.0])
    b = tf.TensorArray(tf.float32, size=2, clear_after_read=False, infer_shape=False)
    b = b.write(0, [1.0]).write(1, [2.0, 3.0])
    return (ta.stack(), ta.size(), ta.element_shape.as_list(), ta.dtype == tf.float32, ta.read(2),
            b.concat(), b.read(0), b.read(0))


@parity(modes=True)
def test_eager_unstack_gather_scatter_split(tf):
    """unstack / gather / scatter / split with their values, eagerly."""
    x = tf.constant(X)
    a = tf.TensorArray(tf.float32, size=3, clear_after_read=False).unstack(x)
    s = tf.TensorArray(tf.float32, size=4, element_shape=[2]).scatter([3, 1], x[:2])
    sp = tf.TensorArray(tf.float32, size=2).split(tf.constant([1.0, 2.0, 3.0]), [1, 2])
    return a.gather([2, 0]), a.read(1), a.size(), s.stack(), sp.read(1), sp.size()


@parity(modes=True)
def test_eager_dynamic_size(tf):
    """dynamic_size grows on write; empty stacks with and without element_shape."""
    d = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for i in range(3):
        d = d.write(i, float(i) * 2.0)
    d.write(5, 1.0)
    e = tf.TensorArray(tf.float32, size=0, element_shape=[2])
    return d.size(), d.stack(), e.stack(), tf.TensorArray(tf.int32, size=0).stack()


@parity(modes=True)
def test_eager_errors(tf):
    """TF's eager error classes: dtype, index out of range, shape, cleared read, unknown-shape stack."""
    ta = tf.TensorArray(tf.float32, size=2, element_shape=[2])
    r = tf.TensorArray(tf.float32, size=2)
    r.write(0, 1.0)
    r.read(0)
    dyn = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    return (raises(ta.write, 0, tf.constant([1, 2])),
            raises(ta.write, 2, [1.0, 2.0]),
            raises(ta.write, -1, [1.0, 2.0]),
            raises(ta.read, 5),
            raises(ta.write, 0, [1.0, 2.0, 3.0]),
            raises(r.read, 0),
            raises(tf.TensorArray(tf.float32, size=2).stack),
            raises(tf.TensorArray(tf.float32, size=2).unstack, tf.zeros([3])),
            raises(tf.TensorArray(tf.float32, size=2).split, tf.zeros([3]), [1, 1]),
            raises(tf.TensorArray(tf.float32, size=1).grad, "x"),
            raises(dyn.read, 0))


@parity(modes=True)
def test_eager_gradients_and_none(tf):
    """The tape through write/read/stack/gather/concat/unstack/scatter eagerly; an unconnected
    element's gradient is None."""
    x = tf.constant(2.0)
    v = tf.constant([1.0, -1.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, v])
        a = tf.TensorArray(tf.float32, size=3, clear_after_read=False)
        a = a.write(0, x * x).write(1, 3.0 * x)
        s = a.stack()
        r1 = a.read(1)
        g = a.gather([0, 1])
        u = tf.TensorArray(tf.float32, size=3).unstack(v * x)
        su = u.stack()
        sc = tf.TensorArray(tf.float32, size=4).scatter([2, 0, 3], v * v)
        c = tf.TensorArray(tf.float32, size=2, infer_shape=False).write(0, [x, x]).write(1, [2.0 * x]).concat()
    return (t.gradient(s, x), t.gradient(r1, x), t.gradient(g, x), t.gradient(su, [x, v]),
            t.gradient(sc.stack(), v), t.gradient(c, x), t.gradient(a.read(2), x))


@parity(modes=True)
def test_function_for_over_range(tf):
    """A TensorArray filled in a for over tf.range inside tf.function (element shape learnt in the
    loop), its gradient by a tape inside and outside the function."""
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=4)
        for i in tf.range(4):
            y = x * tf.cast(i, tf.float32) + 1.0
            ta = ta.write(i, y * y)
        return ta.stack()

    @tf.function
    def inner(x):
        with tf.GradientTape() as t:
            t.watch(x)
            ta = tf.TensorArray(tf.float32, size=3, element_shape=[2])
            for i in tf.range(3):
                ta = ta.write(i, x * tf.cast(i + 1, tf.float32))
            loss = tf.reduce_sum(ta.stack() ** 2) + tf.reduce_sum(ta.read(1))
        return loss, t.gradient(loss, x)

    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    return y, t.gradient(y, x), inner(x)


@parity(modes=True)
def test_function_unwritten_elements_connected(tf):
    """Inside tf.function an unwritten element reads as zeros and its gradient is zeros (TF's
    graph TensorList), where eagerly it is None."""
    @tf.function
    def f(x):
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            a = tf.TensorArray(tf.float32, size=3)
            a = a.write(0, x * x)
            a = a.write(1, 3.0 * x)
            r1, r2 = a.read(1), a.read(2)
        return r2, t.gradient(r1, x), t.gradient(r2, x), a.size()
    return f(tf.constant(2.0))


@parity(modes=True)
def test_function_while_dynamic_size(tf):
    """A while loop with dynamic_size and set_loop_options(maximum_iterations), gather / size /
    concat after it; tf.while_loop with a TensorArray loop variable."""
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        i = tf.constant(0)
        while i < 4:
            tf.autograph.experimental.set_loop_options(maximum_iterations=4)
            ta = ta.write(i, x * tf.cast(i, tf.float32))
            i += 1
        return ta.stack(), ta.size(), ta.gather([3, 1]), ta.concat()

    @tf.function
    def g(x):
        ta = tf.TensorArray(tf.float32, size=3)
        _, ta = tf.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t.write(i, x[i] * 2.0)),
                              (tf.constant(0), ta))
        return ta.stack()

    return f(tf.constant([1.0, 2.0])), g(tf.constant([1.0, 2.0, 3.0]))


@parity(modes=True)
def test_function_nested_loops_and_unstack(tf):
    """Nested for loops writing one TensorArray; unstack of an input read in a loop."""
    @tf.function
    def f(x):
        src = tf.TensorArray(tf.float32, size=3).unstack(x)
        out = tf.TensorArray(tf.float32, size=6, element_shape=[2])
        for i in tf.range(3):
            row = src.read(i)
            for j in tf.range(2):
                out = out.write(i * 2 + j, row * tf.cast(j + 1, tf.float32))
        return out.stack()
    return f(tf.constant(X))


@parity(modes=True)
def test_function_errors(tf):
    """Inside tf.function: a wrong dtype (InvalidArgumentError), a wrong element shape (ValueError),
    a constant index out of range (InvalidArgumentError)."""
    @tf.function
    def bad_dtype():
        return tf.TensorArray(tf.float32, size=2).write(0, tf.constant(1)).stack()

    @tf.function
    def bad_shape():
        return tf.TensorArray(tf.float32, size=2, element_shape=[3]).write(0, [1.0, 2.0]).stack()

    @tf.function
    def bad_index():
        return tf.TensorArray(tf.float32, size=2).write(5, 1.0).stack()

    return raises(bad_dtype), raises(bad_shape), raises(bad_index)


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_rnn_trained_with_tensor_array(tf):
    """An RNN cell unrolled over time in tf.function, its outputs kept in a TensorArray, trained
    three steps with a GradientTape and SGD; losses and final weights."""
    W = tf.Variable([[0.5, -0.2], [0.1, 0.3]])
    U = tf.Variable([[0.2, -0.1]])
    V = tf.Variable([[0.3], [-0.4]])
    opt = tf.keras.optimizers.SGD(0.1)
    xs = tf.constant([[1.0], [0.5], [-1.0], [2.0], [0.25]])
    ys = tf.constant([[0.1], [0.2], [-0.3], [0.4], [0.0]])

    @tf.function
    def step(xs, ys):
        with tf.GradientTape() as t:
            h = tf.zeros([1, 2])
            outs = tf.TensorArray(tf.float32, size=5)
            for k in tf.range(5):
                h = tf.tanh(tf.matmul(h, W) + tf.matmul(xs[k][None], U))
                outs = outs.write(k, tf.matmul(h, V)[0])
            pred = outs.stack()
            loss = tf.reduce_mean((pred - ys) ** 2)
        grads = t.gradient(loss, [W, U, V])
        opt.apply_gradients(zip(grads, [W, U, V]))
        return loss

    losses = [step(xs, ys) for _ in range(3)]
    return losses, W, U, V


@parity
def test_gather_and_scatter_with_a_list_holding_a_traced_index(tf):
    """``ta.gather([0, n - 1])`` and ``ta.scatter([i, i + 1], rows)`` inside a compiled function:
    the Python list holding a traced scalar is packed into one index tensor, as TF packs it."""
    @tf.function
    def f(n, i):
        ta = tf.TensorArray(tf.float32, size=5, element_shape=[2])
        ta = ta.unstack(tf.reshape(tf.range(10, dtype=tf.float32), [5, 2]))
        ta = ta.scatter([i, i + 1], tf.constant([[-1.0, -2.0], [-3.0, -4.0]]))
        return ta.gather([0, n - 1]), ta.gather((i, 4)), ta.stack()

    return f(tf.constant(3), tf.constant(1)), f(tf.constant(5), tf.constant(3))
