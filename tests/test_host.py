"""tapejax/compile/host.py: py_function / numpy_function as host callbacks in a compiled step (how
result shapes are found, what runs when), init_scope.  TF parity: tests/parity/test_host_functions.py."""
import jax
import numpy as np
import pytest

import tapejax as tf


def test_result_shapes_come_from_one_trace_time_call_on_zeros():
    seen = []

    def f(a):
        seen.append(np.asarray(a.numpy()).copy())
        return a[:2] * 2.0
    step = tf.function(lambda v: tf.py_function(f, [v], tf.float32))
    out = step(tf.constant([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(out.numpy(), [2.0, 4.0])
    assert len(seen) == 2 and not seen[0].any()            # the probe (zeros), then the run
    step(tf.constant([5.0, 6.0, 7.0]))
    assert len(seen) == 3                                  # no new trace: one call per run
    np.testing.assert_allclose(seen[-1], [5.0, 6.0, 7.0])


def test_full_tensor_spec_skips_the_probe_and_a_wrong_shape_is_tfs_error():
    seen = []

    def f(a):
        seen.append(1)
        return a if a.numpy()[0] < 5 else tf.concat([a, a], 0)
    spec = tf.TensorSpec([3], tf.float32)
    step = tf.function(lambda v: tf.py_function(f, [v], spec))
    np.testing.assert_allclose(step(tf.constant([1.0, 2.0, 3.0])).numpy(), [1.0, 2.0, 3.0])
    assert seen == [1]
    with pytest.raises(tf.errors.InvalidArgumentError, match="has shape \\(6,\\).*expects \\(3,\\)"):
        step(tf.constant([9.0, 2.0, 3.0]))


def test_decorator_form_and_missing_tout():
    @tf.py_function(Tout=tf.float32)
    def double(a):
        return a * 2.0
    np.testing.assert_allclose(double(tf.constant([1.0])).numpy(), [2.0])
    with pytest.raises(TypeError, match="Tout"):
        tf.py_function(lambda a: a, [tf.constant(1.0)])


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_values_and_gradient(dtype):
    """EagerPyFunc in half precision: the same values and gradient as float32 (half rounding)."""
    def run(dt):
        @tf.function
        def step(v):
            with tf.GradientTape() as t:
                t.watch(v)
                y = tf.py_function(lambda a: a * a, [v], dt)
                loss = tf.reduce_sum(y)
            return y, t.gradient(loss, v)
        return step(tf.cast(tf.constant([0.5, 1.5, -2.0]), dt))
    y, g = run(dtype)
    y32, g32 = run(tf.float32)
    assert y.dtype == dtype and g.dtype == dtype
    np.testing.assert_allclose(np.asarray(y.numpy(), np.float32), y32.numpy(), rtol=1e-2)
    np.testing.assert_allclose(np.asarray(g.numpy(), np.float32), g32.numpy(), rtol=1e-2)


def test_stateful_call_is_kept_when_its_result_is_unused():
    calls = []

    def log(a):
        calls.append(float(a.numpy()))
        return a

    @tf.function
    def step(v):
        tf.py_function(log, [v], tf.float32)
        return v + 1.0
    step(tf.constant(1.0))
    step(tf.constant(2.0))
    assert calls[-2:] == [1.0, 2.0]


def test_init_scope_creates_concrete_values_inside_a_trace():
    kinds = []

    @tf.function
    def f(x):
        with tf.init_scope():
            c = tf.constant(2.0) * 3.0
            kinds.append(isinstance(c._value, jax.core.Tracer))
        return x * c
    np.testing.assert_allclose(f(tf.constant(1.0)).numpy(), 6.0)
    assert kinds == [False]


def test_steps_after_a_failed_host_callback_run_as_before():
    """A py_function that raises fails its step with TF's class, and the steps after it run: the
    same function on good input, and dataset reads whose OutOfRangeError ends each epoch (a loop's
    normal end).  On a GPU, JAX kept the failed program's effect token and failed every later
    program with host callbacks, and its barrier at exit (``host._forget_failed_tokens``)."""
    def f(x):
        if float(np.asarray(x)) > 0.5:
            raise ValueError("too big")
        return x
    step = tf.function(lambda v: tf.py_function(f, [v], tf.TensorSpec([], tf.float32)) + 1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="too big"):
        step(tf.constant(1.0))
    assert float(step(tf.constant(0.25))) == 1.25

    read = tf.function(lambda it: it.get_next() * 2)
    for _ in range(2):
        it, got = iter(tf.data.Dataset.range(3)), []
        while True:
            try:
                got.append(int(read(it)))
            except tf.errors.OutOfRangeError:
                break
        assert got == [0, 2, 4]
    with pytest.raises(tf.errors.InvalidArgumentError, match="too big"):
        step(tf.constant(2.0))
    jax.effects_barrier()   # (nothing left failed behind)
