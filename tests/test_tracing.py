"""Tracing a tapejax.function (tapejax/compile/tracing.py, retracing.py, config.py, concrete.py).

Oracles: the eager run of the same Python function, hand-derived values, TF 2.21's counts
(tests/parity/test_tracing.py runs the same programs under TF).
"""
import logging

import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.compile import tracing


def test_the_body_runs_once_and_variables_become_program_inputs():
    w, b, c = tf.Variable([1.0, 2.0]), tf.Variable(0.5), tf.Variable(3.0)
    runs = []

    @tf.function
    def step(x):
        runs.append(1)
        w.assign_sub(0.1 * x)
        return tf.reduce_sum(w * x) + b

    for _ in range(3):
        step(tf.constant([1.0, 1.0]))
    assert runs == [1] and step.experimental_get_tracing_count() == 1
    np.testing.assert_allclose(w.numpy(), [0.7, 1.7], rtol=1e-6)
    entry = next(iter(step._cache.values()))
    assert [v is w for v in entry.rw] == [True] and [v is b for v in entry.ro] == [True]
    assert c not in entry.ro   # untouched Variables are not inputs
    b.assign(10.0)   # a read Variable is read when the program runs
    np.testing.assert_allclose(step(tf.constant([1.0, 0.0])).numpy(), 0.6 + 10.0, rtol=1e-6)


def test_first_touch_inside_a_nested_trace_is_read_at_the_function_level():
    """A Variable first read inside a converted branch (a nested trace) is still an input of the
    program: later changes are seen, one trace."""
    v = tf.Variable(2.0)

    @tf.function
    def f(x):
        if x > 0:
            y = x * v
        else:
            y = x - v
        return y

    assert f(tf.constant(3.0)).numpy() == 6.0
    v.assign(5.0)
    assert f(tf.constant(3.0)).numpy() == 15.0 and f(tf.constant(-1.0)).numpy() == -6.0
    assert f.experimental_get_tracing_count() == 1


def test_assign_add_in_a_trace_reads_the_variable_at_run_time():
    """Regression: the update's old value must be the program's input, not a constant of the trace."""
    class Model:
        def __init__(self):
            self.v = tf.Variable(1.0)

        @tf.function
        def inc(self):
            self.v.assign_add(1.0)
            self.v.assign_sub(0.5)

    a, b = Model(), Model()
    for _ in range(3):
        b.inc()
    a.inc()
    assert (a.v.numpy(), b.v.numpy()) == (1.5, 2.5)


def test_a_returned_variable_is_its_value_at_call_time():
    v = tf.Variable(1.0)
    g = tf.function(lambda: v)
    assert g().numpy() == 1.0
    v.assign(4.0)
    assert g().numpy() == 4.0


def test_creating_variables_traces_twice_and_initial_values_come_from_the_trace():
    """TF's rule; initial values computed by ops (even from another Variable) are computed once."""
    w = tf.Variable([1.0, 2.0])
    made = []
    runs = []

    @tf.function
    def f(x):
        runs.append(1)
        if not made:
            made.append(tf.Variable(w * 2.0 + tf.ones([2])))
            made.append(tf.Variable(7.0))
        made[0].assign_add(x)
        return made[0] + made[1]

    np.testing.assert_allclose(f(tf.constant([1.0, 1.0])).numpy(), [11.0, 13.0])
    np.testing.assert_allclose(f(tf.constant([1.0, 1.0])).numpy(), [12.0, 14.0])
    assert len(runs) == 2 and f.experimental_get_tracing_count() == 2
    np.testing.assert_allclose(made[0].numpy(), [5.0, 7.0])
    assert not isinstance(made[0]._val, jax.core.Tracer)

    @tf.function
    def from_arg(x):
        return tf.Variable(x * 2.0) + 1.0

    with pytest.raises(ValueError, match="depends on the function's arguments"):
        from_arg(tf.constant(1.0))


def test_a_failed_trace_changes_no_variable_and_the_next_call_works():
    v = tf.Variable(1.0)
    fail = [True]

    @tf.function
    def f(x):
        v.assign(v + x)
        if fail[0]:
            raise RuntimeError("boom")
        return v * 1.0

    with pytest.raises(RuntimeError, match="boom"):
        f(tf.constant(2.0))
    assert v.numpy() == 1.0 and not isinstance(v._val, jax.core.Tracer)
    fail[0] = False
    assert f(tf.constant(2.0)).numpy() == 3.0


def test_the_program_jaxpr_has_no_variable_placeholders():
    v = tf.Variable(1.0)

    @tf.function
    def f(x):
        return x * v

    f(tf.constant(2.0))
    entry = next(iter(f._cache.values()))
    text = str(entry.jitted.trace(v._value, jax.numpy.float32(1.0)).jaxpr)   # (*rw, *ro, *dyn)
    assert tracing.VARIABLE_READ.name not in text


def test_retracing_warning_once_five_of_ten_calls_trace(caplog):
    caplog.set_level(logging.WARNING, logger="tapejax")

    @tf.function
    def f(x):
        return x + 1.0

    for n in range(1, 5):
        f(tf.ones([n]))
    assert not caplog.records
    f(tf.ones([5]))
    assert len(caplog.records) == 1 and "5 out of the last 5 calls" in caplog.text
    for _ in range(20):   # hits push the tracing calls out of the last ten
        f(tf.ones([5]))
    f(tf.ones([6]))
    assert len(caplog.records) == 1
    for n in range(7, 20):
        f(tf.ones([n]))
    assert len(caplog.records) == 2   # at most twice per function, as TF


def test_run_functions_eagerly_and_bad_input():
    @tf.function
    def f(x):
        return float(x.numpy()) * 2   # only possible eagerly

    tf.config.run_functions_eagerly(True)
    try:
        assert tf.config.functions_run_eagerly() is True
        assert f(tf.constant(2.0)) == 4.0
    finally:
        tf.config.run_functions_eagerly(False)
    assert tf.config.functions_run_eagerly() is False
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        f(tf.constant(2.0))


def test_get_concrete_function_specs_names_and_reuse():
    @tf.function
    def f(x, k):
        return x * k

    cf = f.get_concrete_function(tf.TensorSpec([None, 2], tf.float32), 3.0)
    (spec, k), kwargs = cf.structured_input_signature
    assert (spec.shape.as_list(), spec.name, k, kwargs) == ([None, 2], "x", 3.0, {})
    assert repr(cf.structured_outputs) == "TensorSpec(shape=(None, 2), dtype=tf.float32, name=None)"
    np.testing.assert_allclose(cf(tf.ones([4, 2])).numpy(), np.full((4, 2), 3.0))
    n = f.experimental_get_tracing_count()
    f(tf.ones([7, 2]), 3.0)   # the concrete function's program serves the call
    assert f.experimental_get_tracing_count() == n == 1
    with pytest.raises(TypeError, match="must match"):
        cf(tf.ones([4, 3]))
    with pytest.raises(ValueError, match="unknown rank"):
        f.get_concrete_function(tf.TensorSpec(None, tf.float32), 1.0)
    assert "Input Parameters" in cf.pretty_printed_signature()



def test_get_concrete_function_of_a_traced_call_reuses_its_trace():
    """TF: ``get_concrete_function(tf.constant(3.0))`` after a call on another float32 scalar is the
    trace that call made (no new trace); a new dtype still traces."""
    traced = []

    @tf.function
    def my_relu(x):
        traced.append(x.dtype.name)
        return tf.maximum(0.0, x)

    my_relu(tf.constant(5.5))
    cf = my_relu.get_concrete_function(tf.constant(3.0))
    assert cf(tf.constant(-7.0)).numpy() == 0.0
    assert (traced, my_relu.experimental_get_tracing_count()) == (["float32"], 1)
    my_relu.get_concrete_function(tf.TensorSpec([], tf.float16))
    assert (traced, my_relu.experimental_get_tracing_count()) == (["float32", "float16"], 2)

def test_nested_functions_inline_and_methods_convert():
    @tf.function
    def inner(z):
        if z > 0:
            return z
        return -z

    @tf.function
    def outer(x):
        return inner(x) + inner(-x)

    assert outer(tf.constant(2.0)).numpy() == 4.0
    assert inner.experimental_get_tracing_count() == 0   # inlined into the caller's trace


def test_a_method_with_an_input_signature_leaves_out_the_instance():
    """TF's rule: a method's input_signature describes the arguments after ``self``."""
    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[2.0], [3.0]])

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def serve(self, x):
            return tf.matmul(x, self.w)

    m = Model()
    np.testing.assert_allclose(m.serve(tf.ones([4, 2])).numpy(), np.full((4, 1), 5.0))
    np.testing.assert_allclose(m.serve(tf.ones([1, 2])).numpy(), [[5.0]])
    assert m.serve.experimental_get_tracing_count() == 1
    cf = m.serve.get_concrete_function()
    np.testing.assert_allclose(cf(tf.ones([3, 2])).numpy(), np.full((3, 1), 5.0))
    (spec,), kwargs = cf.structured_input_signature   # TF's: the instance left out
    assert (spec.shape.as_list(), spec.name, kwargs) == ([None, 2], "x", {})
    assert "Model" not in cf.pretty_printed_signature()
    with pytest.raises(TypeError, match="Can not cast"):
        m.serve(tf.ones([2, 3]))
    x = tf.ones([2, 2])
    with tf.GradientTape() as t:   # called under a tape: one recorded op, differentiable
        y = tf.reduce_sum(m.serve(x))
    np.testing.assert_allclose(t.gradient(y, m.w).numpy(), [[2.0], [2.0]])


def test_input_signature_casts_numpy_arrays_to_the_spec_dtype_but_not_tensors():
    """TF 2.21 binds a NumPy array of another numeric dtype by casting it to the spec's (float64
    data into a float32 step, floats truncated into an int32 spec); a Tensor of another dtype is
    refused ('Can not cast')."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(x):
        return x * 2.0

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def g(x):
        return x + 1

    r = f(np.array([1.5, 2.0]))
    assert r.dtype == tf.float32 and r.numpy().tolist() == [3.0, 4.0]
    assert f(np.array([1, 2], np.int64)).numpy().tolist() == [2.0, 4.0]
    assert g(np.array([1.5, 2.9])).numpy().tolist() == [2, 3]
    assert f.experimental_get_tracing_count() == 1
    with pytest.raises(TypeError, match="Can not cast"):
        f(tf.constant([1.0, 2.0], tf.float16))


def test_a_concrete_function_refuses_another_value_of_a_traced_python_argument():
    """TF's guide: ``pow.get_concrete_function(a=TensorSpec([]), b=2)`` squares; ``b=2`` again is accepted,
    ``b=3`` (by keyword or position) is TF's TypeError, not a silent square."""
    @tf.function
    def pow(a, b):
        return a ** b

    square = pow.get_concrete_function(a=tf.TensorSpec([], tf.float32), b=2)
    assert square(tf.constant(10.0)).numpy() == 100.0 == square(tf.constant(10.0), b=2).numpy()
    for call in (lambda: square(tf.constant(10.0), b=3), lambda: square(tf.constant(10.0), 3)):
        with pytest.raises(TypeError, match="Can not cast 3"):
            call()


def test_connected_inputs_skip_stop_gradient_and_unused_reads():
    """``tracing.connected_inputs``: an input used only under ``stop_gradient`` (inside a jitted
    sub-jaxpr, as tapejax's ops are) or not used by an output is unconnected; so, recorded as one op
    under a tape, a compiled call gives such a Variable ``None`` as TF's function call (it gave 0.0),
    and a Variable another output reaches still gets a zero (TF's rule for a call: per op)."""
    from tapejax.compile import tracing

    def body(a, b, c, d):
        _ = c * 2.0
        return a + jax.jit(jax.lax.stop_gradient)(b * a), d

    closed = jax.make_jaxpr(body)(*[1.0] * 4)
    assert tracing.connected_inputs(closed.jaxpr, 1) == (True, False, False, False)
    assert tracing.connected_inputs(closed.jaxpr, 2) == (True, False, False, True)
    d, e, a = tf.Variable(5.0), tf.Variable(6.0), tf.Variable(1.0)

    @tf.function
    def f(x):
        _ = e * 2.0
        return x * a + tf.stop_gradient(d * x), x * d

    with tf.GradientTape(persistent=True) as tape:
        y, z = f(tf.constant(1.0))
    ga, gd, ge = tape.gradient(y, [a, d, e])
    assert ga.numpy() == 1.0 and gd.numpy() == 0.0 and ge is None
    assert tape.gradient(y, e, unconnected_gradients="zero").numpy() == 0.0
    assert len(tape.watched_variables()) == 3

    @tf.function
    def target_only(x):
        return x + tf.stop_gradient(d * x)

    with tf.GradientTape() as tape:
        y = target_only(tf.constant(1.0))
    assert tape.gradient(y, d) is None
