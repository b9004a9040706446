"""tf.map_fn, tf.vectorized_map, tf.switch_case, tf.case, tf.grad_pass_through and tf.recompute_grad
(tapejax/compile/functional_ops.py) under TensorFlow and tapejax: values, gradients, errors,
eagerly and inside a tf.function (a traced index or predicate)."""
import numpy as np

from .harness import parity, raises

M = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)


@parity(modes=True)
def test_map_fn_and_vectorized_map(tf):
    """map_fn over a tensor and a tuple, with a dtype change (fn_output_signature), of length 0,
    its errors; vectorized_map with a different output structure; gradients through both, eagerly
    and in a function."""
    x = tf.constant(M)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a = tf.map_fn(lambda r: r * r, x)
        b = tf.map_fn(lambda p: (p[0] * p[1], p[0]), (x, x + 1.0))
        c = tf.vectorized_map(lambda r: {"s": tf.reduce_sum(r), "p": r[0] * r[1]}, x)
        loss = tf.reduce_sum(a) + tf.reduce_sum(b[0]) + tf.reduce_sum(c["s"]) + tf.reduce_sum(c["p"])
    ints = tf.map_fn(lambda r: tf.cast(r, tf.int32), tf.constant([1.5, 2.5]), fn_output_signature=tf.int32)

    @tf.function
    def f(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.reduce_sum(tf.map_fn(lambda r: tf.exp(r) * 2.0, v))
        return y, tape.gradient(y, v)
    return (a, b, c, t.gradient(loss, x), ints, tf.map_fn(lambda r: r, tf.zeros([0, 3])), f(x),
            raises(tf.map_fn, lambda r: tf.cast(r, tf.int32), tf.constant([1.5, 2.5])),
            raises(tf.map_fn, lambda p: p[0], (tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0, 5.0]))),
            raises(tf.map_fn, lambda r: r, tf.constant(1.0)))


@parity(modes=True)
def test_switch_case(tf):
    """A list, a dict and (index, fn) pairs; an index out of range runs the default (else the last
    branch); a traced index inside a function, with gradients; its errors."""
    x = tf.constant(3.0)
    fns = [lambda: x * 1.0, lambda: x * x, lambda: x * x * x]

    @tf.function
    def f(i, v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.switch_case(i, [lambda: v * 1.0, lambda: v * v, lambda: v * v * v], default=lambda: v * 0.0)
        return y, tape.gradient(y, v)
    return (tf.switch_case(tf.constant(1), fns), tf.switch_case(tf.constant(7), fns),
            tf.switch_case(tf.constant(-1), {1: fns[0], 0: fns[1]}, default=lambda: x - 1.0),
            tf.switch_case(tf.constant(1), [(1, fns[2]), (0, fns[0])]), raises(tf.switch_case, 1, fns),
            f(tf.constant(0), x), f(tf.constant(2), x), f(tf.constant(5), x),
            raises(tf.switch_case, tf.constant(1.0), fns), raises(tf.switch_case, tf.constant(0), {1: fns[0], 3: fns[1]}))


@parity(modes=True)
def test_case(tf):
    """The first true predicate's fn, the default, no default and nothing true (TF's error, eagerly
    and in a function); traced predicates inside a function (with gradients)."""
    x = tf.constant(2.0)

    @tf.function
    def f(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.case([(v > 5.0, lambda: v * 10.0), (v > 1.0, lambda: v * v)], default=lambda: -v)
        return y, tape.gradient(y, v)

    @tf.function
    def g(v):
        return tf.case([(v > 5.0, lambda: v * 10.0), (v > 1.0, lambda: v * v)])
    return (tf.case([(x > 5, lambda: 1.0), (x > 1, lambda: 2.0)], default=lambda: 3.0),
            tf.case([(x > 5, lambda: 1.0), (x > 3, lambda: 2.0)], default=lambda: 3.0),
            tf.case([(x > 1, lambda: 1.0), (x > 0, lambda: 2.0)]),
            raises(tf.case, [(x > 5, lambda: 1.0), (x > 10, lambda: 2.0)]),
            f(tf.constant(2.0)), f(tf.constant(7.0)), f(tf.constant(0.5)), g(tf.constant(3.0)), g(tf.constant(7.0)), raises(g, tf.constant(0.0)),
            raises(tf.case, [(x, lambda: 1.0)], ok=("TypeError",)))  # (TF: an AttributeError by accident)


@parity
def test_grad_pass_through(tf):
    """The value is f's, the gradient the upstream one (identity), through an assignment-like
    function too."""
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.grad_pass_through(lambda v: tf.round(v * 3.3))(x)
        z = tf.reduce_sum(y * tf.constant([2.0, 5.0]))
    return y, t.gradient(z, x)


@parity(modes=True)
def test_recompute_grad(tf):
    """recompute_grad(f): f's values and gradients (inputs and a Variable f reads; two outputs),
    eagerly and inside a function."""
    v = tf.Variable(3.0)

    def f(a):
        return tf.sin(a) * v, a * a

    g = tf.recompute_grad(f)
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = g(x)
        loss = tf.reduce_sum(y[0]) + tf.reduce_sum(y[1] * 2.0)

    @tf.function
    def step(a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            out = tf.reduce_sum(tf.recompute_grad(lambda b: tf.exp(b) * v)(a))
        return out, tape.gradient(out, [a, v])
    return y, t.gradient(loss, [x, v]), step(x)
