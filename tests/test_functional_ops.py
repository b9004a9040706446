"""tapejax/compile/functional_ops.py beyond the parity cases (tests/parity/test_functional_ops.py):
recompute_grad really recomputes, map_fn unrolls into one compiled program."""
import numpy as np

import tapejax as tf


def test_recompute_grad_runs_f_again_at_gradient_time():
    calls = []

    def f(a):
        calls.append(1)
        return tf.sin(a) * 2.0

    x = tf.constant([0.5, 1.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.recompute_grad(f)(x)
    assert len(calls) == 1
    g = t.gradient(y, x)
    assert len(calls) == 2
    np.testing.assert_allclose(g.numpy(), 2.0 * np.cos([0.5, 1.0]), rtol=1e-6)


def test_map_fn_in_a_function_traces_once_and_matches_eager():
    traces = []

    @tf.function
    def f(v):
        traces.append(1)
        return tf.map_fn(lambda r: tf.reduce_sum(r * r), v)
    x = tf.constant(np.arange(6.0, dtype=np.float32).reshape(3, 2))
    np.testing.assert_allclose(f(x).numpy(), [1.0, 13.0, 41.0])
    np.testing.assert_allclose(f(x + 1.0).numpy(), [5.0, 25.0, 61.0])
    assert len(traces) == 1
