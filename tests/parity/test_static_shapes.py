"""Shapes computed with ``tf.shape`` / ``tf.size`` / ``tf.rank`` inside a compiled function and used
where TF's graph needs them static (slice bounds, ``reshape`` / ``zeros`` / ``fill`` / ``tile`` /
``split`` / ``one_hot`` arguments, Python branches and ranges): TF folds the static shapes, tapejax
computes ops on those values while tracing (``core.tensor.StaticTensor``).  Before, each of these
raised OperatorNotAllowedInGraphError inside ``tapejax.function``.  Values, gradients and tracing
counts against TF, eagerly and compiled."""
import numpy as np

from .harness import parity

X = np.arange(24, dtype=np.float32).reshape(6, 4) / 10.0


def _shape_uses(tf, x):
    n = tf.shape(x)[0]
    half = x[:n // 2]
    flat = tf.reshape(x, [tf.shape(x)[0] * 2, -1])
    zeros = tf.zeros([tf.shape(x)[0], 3])
    ones = tf.fill(tf.shape(x), 1.0)
    tiled = tf.tile(x, [tf.shape(x)[0] // 3, 1])
    a, b = tf.split(x, [tf.shape(x)[0] // 2, tf.shape(x)[0] - tf.shape(x)[0] // 2])
    hot = tf.one_hot(tf.range(3), tf.shape(x)[1])
    idx = tf.range(tf.shape(x)[0])
    last = x[tf.shape(x)[0] - 1]
    per = tf.reshape(x, [tf.size(x)])[:tf.rank(x) * 3]
    cols = tf.unstack(tf.shape(x))[1]
    return (half, flat, zeros, ones, tiled, a, b, hot, idx, last, per, cols,
            tf.reduce_mean(x[:, :tf.shape(x)[1] - 1]))


@parity
def test_shape_values_as_static_arguments(tf):
    x = tf.constant(X)
    f = tf.function(lambda x: _shape_uses(tf, x))
    return _shape_uses(tf, x), f(x), f(x), f.experimental_get_tracing_count()


@parity(modes=True)
def test_gradient_through_a_slice_bounded_by_tf_shape(tf):
    """A tape inside the step and around it: the slice's bounds are constants to it."""
    w = tf.Variable(X)

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            y = w * x
            top = y[:tf.shape(y)[0] // 2]
            loss = tf.reduce_sum(tf.reshape(top, [tf.shape(top)[0] * tf.shape(top)[1]]) ** 2)
        return loss, t.gradient(loss, w)

    return step(tf.constant(X)), step(tf.constant(X * 2.0))


@parity
def test_python_branch_and_loop_on_a_static_shape(tf):
    """``if tf.shape(x)[0] > 4`` and ``for i in tf.range(tf.shape(x)[0])`` in a converted function."""
    @tf.function
    def f(x):
        if tf.shape(x)[0] > 4:
            y = x * 2.0
        else:
            y = x - 1.0
        s = tf.constant(0.0)
        for i in tf.range(tf.shape(x)[0]):
            s += tf.reduce_sum(y[i])
        return y, s

    return f(tf.constant(X)), f(tf.constant(X[:3]))


@parity
def test_dynamic_batch_with_an_input_signature(tf):
    """``input_signature`` with a None batch: one trace serves both batch sizes, and the reshape
    by ``tf.shape(x)[0]`` follows each call's batch."""
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def f(x):
        return tf.reshape(x, [tf.shape(x)[0], 2, 2])[:, 0]

    return f(tf.constant(X)), f(tf.constant(X[:2]))
