"""tapejax.debugging and ops.checks: what the parity suite cannot see.

Oracles: TF's messages written out (checked against TF in tests/parity/test_debugging.py),
hand-derived values, and JAX's own behaviour for the default (unchecked) mode.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError
from tapejax.ops import checks


@pytest.fixture
def value_checks():
    prev = checks.set_value_checks(True)
    yield
    checks.set_value_checks(prev)


def _entries(fn):
    return list(fn._cache.values()) if hasattr(fn._cache, "values") else [fn._cache[k] for k in fn._cache]


def test_assert_near_eager_message_names_tapejax_tensors():
    with pytest.raises(InvalidArgumentError) as e:
        tf.debugging.assert_near(tf.constant([1., 2.]), tf.constant([1., 3.]))
    assert str(e.value).startswith("Expected 'tapejax.Tensor(False, shape=(), dtype=bool)' to be true.")
    assert "rtol = tapejax.Tensor(1.1920929e-06, shape=(), dtype=float32)" in str(e.value)


def test_compiled_assert_message_and_one_trace():
    @tf.function
    def f(a, b):
        tf.debugging.assert_equal(a, b, message="batch")
        return a * 2.

    assert f(tf.constant([1., 2., 3., 4.]), tf.constant([1., 2., 3., 4.])).numpy().tolist() == [2., 4., 6., 8.]
    with pytest.raises(InvalidArgumentError) as e:
        f(tf.constant([1., 2., 3., 4.]), tf.constant([1., 5., 3., 4.]))
    assert str(e.value) == ("assertion failed: [batch] [Condition x == y did not hold element-wise:] "
                            "[x (shape=(4,) dtype=float32) = ] [1 2 3...] [y (shape=(4,) dtype=float32) = ] "
                            "[1 5 3...]")
    assert f.experimental_get_tracing_count() == 1   # the checkified retrace is not counted
    assert all(e.checked for e in _entries(f))


def test_function_without_checks_is_not_checkified():
    @tf.function
    def f(a):
        return a + 1.

    f(tf.constant(1.))
    assert not any(e.checked for e in _entries(f))


@pytest.mark.parametrize("deferred", [True, False])
def test_failed_assert_keeps_the_steps_updates(deferred):
    prev = tf.set_deferred_execution(deferred)
    try:
        w = tf.Variable([1., 1.])
        opt = tf.optimizers.SGD(0.5)

        @tf.function
        def step(x):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(w * x)
            opt.apply_gradients([(t.gradient(loss, w), w)])
            tf.debugging.assert_less(loss, 10.)
            return loss

        step(tf.constant([1., 2.]))
        np.testing.assert_allclose(w.numpy(), [0.5, 0.])
        with pytest.raises(InvalidArgumentError):
            step(tf.constant([100., 0.]))
        np.testing.assert_allclose(w.numpy(), [-49.5, 0.])   # updated, then raised (as TF)
        assert opt.iterations.numpy() == 2
    finally:
        tf.set_deferred_execution(prev)


def test_check_inside_cond_and_scan_bodies_of_a_function():
    @tf.function
    def f(x):
        y = tf.cond(x[0] > 0., lambda: tf.debugging.check_numerics(x, "pos"), lambda: x)
        return tf.scan(lambda acc, e: tf.debugging.check_numerics(acc + e, "scan"), y, initializer=0.)

    np.testing.assert_allclose(f(tf.constant([1., 2.])).numpy(), [1., 3.])
    with pytest.raises(InvalidArgumentError, match="pos : Tensor had NaN values"):
        f(tf.constant([1., np.nan]))
    with pytest.raises(InvalidArgumentError, match="scan : Tensor had Inf values"):
        f(tf.constant([-1., np.inf]))


def test_function_with_checks_under_a_tape_runs_op_by_op():
    x = tf.Variable(2.)

    @tf.function
    def f():
        tf.debugging.assert_positive(x)
        return x * x

    with tf.GradientTape() as t:
        y = f()
    assert t.gradient(y, x).numpy() == 4.0
    x.assign(-1.)
    with tf.GradientTape():
        with pytest.raises(InvalidArgumentError, match="Condition x > 0 did not hold"):
            f()


def test_check_numerics_passes_the_gradient():
    x = tf.constant([1., 4.])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(tf.debugging.check_numerics(tf.sqrt(x), "ok"))
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [0.5, 0.25])


def test_raw_jax_jit_needs_checkify():
    """A check met by a plain jax.jit is JAX's rule: wrap the function in checkify."""
    def f(a):
        tf.debugging.assert_less(tf.constant(a), 2.)
        return a

    with pytest.raises(ValueError, match="checkify"):
        jax.jit(f)(jnp.ones(2))
    err, _ = jax.jit(jax.experimental.checkify.checkify(f))(jnp.full(2, 3.))
    with pytest.raises(InvalidArgumentError, match="Condition x < y"):
        checks.raise_if_failed(err)


def test_value_checks_are_off_by_default():
    """Default: JAX's semantics: a negative index wraps, an index past the end gives NaN (JAX's
    fill), ids past num_segments are dropped, a singular inverse is inf/NaN."""
    assert not checks.value_checks_enabled()
    assert tf.gather([1., 2., 3.], [-1]).numpy().tolist() == [3.]
    assert np.isnan(tf.gather([1., 2., 3.], [7]).numpy()).all()
    assert tf.math.unsorted_segment_sum([1., 2.], [0, 5], 2).numpy().tolist() == [1., 0.]
    assert not np.isfinite(tf.linalg.inv(tf.constant([[1., 2.], [2., 4.]])).numpy()).all()


@pytest.mark.parametrize("deferred", [True, False])
def test_value_checks_with_pending_indices(value_checks, deferred):
    prev = tf.set_deferred_execution(deferred)
    try:
        table = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))
        with tf.GradientTape() as t:
            ids = tf.cast(tf.constant([1., 3.]) * tf.reduce_sum(table) / 15., tf.int32)
            with pytest.raises(InvalidArgumentError, match=r"indices\[1\] = 3 is not in \[0, 3\)"):
                tf.gather(table, ids)
            rows = tf.gather(table, [0, 2])
            loss = tf.reduce_sum(rows)
        np.testing.assert_allclose(tf.convert_to_tensor(t.gradient(loss, table)).numpy(), [[1, 1], [0, 0], [1, 1]])
    finally:
        tf.set_deferred_execution(prev)


def test_value_checks_turned_on_later_do_not_change_a_traced_function(value_checks):
    checks.set_value_checks(False)

    @tf.function
    def f(p, i):
        return tf.gather(p, i)

    p = tf.constant([1., 2., 3.])
    assert np.isnan(f(p, tf.constant([5])).numpy()).all()   # traced unchecked
    checks.set_value_checks(True)
    assert np.isnan(f(p, tf.constant([5])).numpy()).all()   # the cached program is kept (as TF's graph)
    with pytest.raises(InvalidArgumentError):
        f(p, tf.constant([5, 1]))                              # a new trace checks


def test_enable_check_numerics_uses_jax_nan_and_inf_checks():
    assert not jax.config.jax_debug_nans
    tf.debugging.enable_check_numerics()
    try:
        assert jax.config.jax_debug_nans and jax.config.jax_debug_infs and checks.value_checks_enabled()
        with pytest.raises(FloatingPointError, match='op "Log"'):
            tf.math.log(tf.constant(-1.))
        with pytest.raises(FloatingPointError):
            tf.function(lambda a: tf.math.log(a) * 2.)(tf.constant(0.))
    finally:
        tf.debugging.disable_check_numerics()
    assert not jax.config.jax_debug_nans and not jax.config.jax_debug_infs
    assert not checks.value_checks_enabled()
    assert np.isnan(tf.math.log(tf.constant(-1.)).numpy())


def test_render_of_traced_values():
    assert checks.render("a[{i_at}] = {v}", {"i_at": np.array([1, 0]), "v": np.array(5)}) == "a[1,0] = 5"
    assert checks.render("{x_more}", {"x_more": np.array([1.5, 2.])}) == "[1.5 2...]"
    assert checks.render("{k_numerics}", {"k_numerics": np.array(2)}) == "Inf and NaN"
    assert checks.summarize(np.arange(5), 3) == "[0 1 2...]"


# -- enable_check_numerics: TF's error class and eager message (strings from TF 2.21, run) ----------

_TF_LOG_MESSAGE = (
    '\n\n!!! Detected Infinity or NaN in output 0 of eagerly-executing op "Log" (# of outputs: 1) !!!\n'
    "  dtype: <dtype: 'float32'>\n  shape: (2,)\n  # of -Inf elements: 1\n\n"
    "  Input tensor: tf.Tensor([1. 0.], shape=(2,), dtype=float32)\n\n : Tensor had -Inf values")
_TF_MUL_MESSAGE = (
    '\n\n!!! Detected Infinity or NaN in output 0 of eagerly-executing op "Mul" (# of outputs: 1) !!!\n'
    "  dtype: <dtype: 'float32'>\n  shape: (4,)\n  # of -Inf elements: 1\n  # of +Inf elements: 1\n"
    "  # of +NaN elements: 1\n\n  Input tensors (2):\n"
    "         0: tf.Tensor([ inf -inf  nan   1.], shape=(4,), dtype=float32)\n"
    "         1: tf.Tensor(1.0, shape=(), dtype=float32)\n\n : Tensor had -Inf, +Inf, and NaN values")


@pytest.fixture
def check_numerics_on():
    tf.debugging.enable_check_numerics()
    try:
        yield
    finally:
        tf.debugging.disable_check_numerics()


def _tf_message(e: BaseException) -> str:
    """TF's message without its eager prefix and suffix (``{{function_node ...}} `` / `` name: ``)."""
    text = str(e)
    if text.startswith("{{function_node"):
        text = text[text.index("}} ") + 3:]
    return text.split(" [Op:CheckNumericsV2]")[0]


@pytest.mark.parametrize("case", ["log", "mul"])
def test_check_numerics_eager_error_is_tfs(check_numerics_on, case):
    def program(tf_):
        if case == "log":
            return tf_.math.log(tf_.constant([1.0, 0.0]))
        return tf_.multiply(tf_.constant([np.inf, -np.inf, np.nan, 1.0]), tf_.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        program(tf)
    assert isinstance(e.value, FloatingPointError)   # JAX's class too (what its checker raises)
    want = _TF_LOG_MESSAGE if case == "log" else _TF_MUL_MESSAGE
    assert _tf_message(e.value) == want
    assert str(e.value).endswith("[Op:CheckNumericsV2]")
    tf_real = pytest.importorskip("tensorflow")
    tf_real.debugging.enable_check_numerics()
    try:
        with pytest.raises(tf_real.errors.InvalidArgumentError) as te:
            program(tf_real)
    finally:
        tf_real.debugging.disable_check_numerics()
    assert _tf_message(te.value) == want


def test_check_numerics_sqrt_of_negative_and_recorded_op(check_numerics_on):
    x = tf.Variable(-1.0)
    with tf.GradientTape():
        with pytest.raises(tf.errors.InvalidArgumentError, match='(?s)op "Sqrt".*# of \\+NaN elements: 1.*Tensor had NaN'):
            tf.sqrt(x)


def test_check_numerics_constant_holding_nan_is_allowed(check_numerics_on):
    """TF checks op outputs; a constant holding NaN is made (its first op raises)."""
    c = tf.constant([np.nan, 1.0])
    assert np.isnan(c.numpy()[0])
    with pytest.raises(tf.errors.InvalidArgumentError, match='op "AddV2"'):
        c + 1.0


def test_check_numerics_in_function_and_gradient(check_numerics_on):
    f = tf.function(lambda a: tf.math.log(a) * 2.)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match='(?s)Graph execution error:.*graph op "Log".*Tensor had Inf values'):
        f(tf.constant([1.0, 0.0]))
    g = tf.function(lambda b: tf.sqrt(b) + 1.)   # (JAX finds it only in the whole program)
    with pytest.raises(tf.errors.InvalidArgumentError, match="(?s)Graph execution error:.*Tensor had NaN values"):
        g(tf.constant([-1.0, 1.0]))
    assert f(tf.constant([1.0, 2.0])).numpy()[0] == 0.0
    x = tf.Variable(0.0)
    with tf.GradientTape() as t:
        y = tf.sqrt(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Tensor had Inf values"):
        t.gradient(y, x)


def test_check_numerics_idempotent_and_restores_execution_mode():
    from tapejax.core.executor import active
    before = active()
    tf.debugging.enable_check_numerics()
    tf.debugging.enable_check_numerics()
    try:
        assert active().name == "eager"
    finally:
        tf.debugging.disable_check_numerics()
    assert active() is before
    tf.debugging.disable_check_numerics()   # not on: nothing to do
    assert not jax.config.jax_debug_nans
    assert np.isinf(tf.math.log(tf.constant(0.)).numpy())


def _outcome(fn):
    """(result or exception class name, message) of ``fn()`` with TF's class names and tensor text."""
    try:
        r = fn()
    except Exception as e:   # noqa: BLE001 - the outcome is what is compared
        return type(e).__name__, str(e).replace("tapejax.core.tensor.Tensor", "EagerTensor").replace(
            "tensorflow.python.framework.ops.EagerTensor", "EagerTensor")
    return "ok", repr(r)


def _proper_iterable_cases(tf_):
    return [lambda v=v: tf_.debugging.assert_proper_iterable(v)
            for v in ([1, 2], (1,), "abc", b"x", np.zeros(2), tf_.constant([1.]), 3, {1: 2})]


def _same_float_cases(tf_):
    c = tf_.constant
    args = [([c(1.), c(2.)],), ([c(1.), c(2., tf_.float16)],), ([c(1)],), (None, tf_.float16),
            ([c(1.)], tf_.float16), ([], None), ([c(1.)], tf_.int32), (None, None)]
    return [lambda a=a: tf_.debugging.assert_same_float_dtype(*a) for a in args]


@pytest.mark.parametrize("cases", [_proper_iterable_cases, _same_float_cases])
def test_argument_asserts_match_tf(cases):
    tf_real = pytest.importorskip("tensorflow")
    ours = [_outcome(f) for f in cases(tf)]
    theirs = [_outcome(f) for f in cases(tf_real)]
    assert ours == theirs


def test_traceback_filtering_and_log_device_placement():
    assert tf.debugging.is_traceback_filtering_enabled()
    tf.debugging.disable_traceback_filtering()
    try:
        assert not tf.debugging.is_traceback_filtering_enabled()
        assert jax.config.jax_traceback_filtering == "off"
    finally:
        tf.debugging.enable_traceback_filtering()
    assert tf.debugging.is_traceback_filtering_enabled()
    assert tf.debugging.get_log_device_placement() is False
    tf.debugging.set_log_device_placement(True)
    try:
        assert tf.debugging.get_log_device_placement() is True
        with pytest.raises(TypeError, match="`enabled` must be a bool"):
            tf.debugging.set_log_device_placement("x")
        assert tf.debugging.get_log_device_placement() is True   # unchanged by the bad call
    finally:
        tf.debugging.set_log_device_placement(False)
