"""Static shape values inside a trace (``core.tensor.StaticTensor``, ``core.executor.fold``): ops on
them are computed while tracing, but never an op that calls back into Python, and never one with a
traced operand; outside a trace ``tf.shape`` is a plain Tensor."""
import numpy as np

import tapejax as tf
from tapejax.core.tensor import StaticTensor, Tensor


def test_outside_a_trace_shape_is_a_plain_tensor():
    x = tf.zeros([2, 3])
    assert type(tf.shape(x)) is Tensor and type(tf.size(x)) is Tensor and type(tf.rank(x)) is Tensor


def test_inside_a_trace_shape_arithmetic_is_static():
    seen = []

    @tf.function
    def f(x):
        n = tf.shape(x)[0] * 2 - 1
        seen.append((type(n), int(n)))   # a Python int while tracing: folded
        return tf.zeros([n])

    assert f(tf.zeros([4, 2])).shape == (7,)
    assert seen == [(StaticTensor, 7)]


def test_a_numpy_function_on_a_shape_runs_at_every_call():
    calls = []

    def count(n):
        calls.append(int(n))
        return np.asarray(n * 10, np.int32)

    # (Tout with its shape: no probe call at trace time to learn it)
    f = tf.function(lambda x: tf.numpy_function(count, [tf.shape(x)[0]], tf.TensorSpec([], tf.int32)))
    assert [int(f(tf.zeros([3]))) for _ in range(3)] == [30, 30, 30]
    assert calls == [3, 3, 3]   # (not once at trace time)


def test_an_op_with_a_traced_operand_stays_in_the_program():
    w = tf.Variable(2)
    f = tf.function(lambda x: tf.shape(x)[0] * w)
    assert int(f(tf.zeros([5]))) == 10
    w.assign(3)
    assert int(f(tf.zeros([5]))) == 15
    assert f.experimental_get_tracing_count() == 1
