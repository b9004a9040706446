"""``tapejax.optimizers.loss_scale`` beyond parity: the staged skip (one compiled update, no host
read, one trace), the guard against the inner optimizer's own pure update, errors before any
state changes, and the other libraries' optimizers.

(Values against tf_keras: ``tests/parity/test_mixed_precision.py``.)
"""
import itertools
import logging

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax._src.array import ArrayImpl

import tapejax as tf
from tapejax import optimizers
from tapejax.optimizers import loss_scale
from xla_compiles import TRANSFERS, compiles

LSO = loss_scale.BaseLossScaleOptimizer


def _tf_update(finite, scale, counter, growth):
    """TF's ``_DynamicLossScaleState.update``, transcribed in Python floats."""
    if not finite:
        return max(scale / 2.0, 1.0), 0
    if counter + 1 >= growth:
        doubled = scale * 2.0   # (taken when finite as a float32)
        return (doubled if doubled <= float(np.finfo(np.float32).max) else scale), 0
    return scale, counter + 1


def test_the_namespace_gives_this_class():
    assert tf.keras.mixed_precision.LossScaleOptimizer is LSO
    assert "LossScaleOptimizer" in dir(tf.keras.mixed_precision)
    assert tf.keras.mixed_precision.set_global_policy is not None   # the rest is Keras 3's module


@pytest.mark.parametrize("growth", [1, 3])
def test_dynamic_rule_is_tfs_update(growth):
    for finite, scale, counter in itertools.product((True, False), (1.0, 3.0, 2.0 ** 15, 2.0 ** 127),
                                                    (0, 1, 2)):
        got = loss_scale.dynamic_rule(jnp.asarray(finite), jnp.float32(scale), jnp.int32(counter), growth)
        want = _tf_update(finite, scale, counter, growth)
        assert (float(got[0]), int(got[1])) == want, (finite, scale, counter)
        assert got[0].dtype == jnp.float32 and got[1].dtype == jnp.int32
    huge = loss_scale.dynamic_rule(jnp.asarray(True), jnp.float32(2.0), jnp.int32(5), 2 ** 40)
    assert (float(huge[0]), int(huge[1])) == (2.0, 6)   # (TF's int64 counter: growth beyond int32)


@pytest.mark.parametrize("bad", [None, np.nan, np.inf])
def test_the_guard_is_the_inner_update_or_the_old_state(bad):
    """The guarded pure update against the inner optimizer's own ``_pure_update``: the same new
    values when every gradient is finite; the old ones (and ``it + 1``) otherwise; a sparse
    gradient's values are checked."""
    inner = optimizers.legacy.Adam(0.1)
    guard = loss_scale.Guard(tf.Variable(8.0), tf.Variable(0), 2)
    rs = np.random.RandomState(0)
    var = [jnp.asarray(rs.randn(3).astype(np.float32)), jnp.asarray(rs.randn(4, 2).astype(np.float32))]
    slots = [tuple(jnp.asarray(rs.rand(*v.shape).astype(np.float32)) for _ in range(2)) for v in var]
    grads = [jnp.asarray(rs.randn(3).astype(np.float32)),
             (jnp.asarray(rs.randn(2, 2).astype(np.float32)), jnp.asarray([1, 3]))]
    if bad is not None:
        grads[1] = (grads[1][0].at[1, 0].set(bad), grads[1][1])
    it, lr, hyp = jnp.int32(4), jnp.float32(0.1), [jnp.float32(0.9), jnp.float32(0.999), jnp.float32(0.0)]
    nv, ns, ne, it1 = guard.wrap(inner._pure_update)(var, slots, [jnp.float32(8.0), jnp.int32(1)], grads, it,
                                                     lr, hyp)
    want_v, want_s, _, want_it = inner._pure_update(var, slots, [], grads, it, lr, hyp)
    if bad is not None:
        want_v, want_s = var, slots
    for a, b in zip(nv + [x for s in ns for x in s], list(want_v) + [x for s in want_s for x in s]):
        np.testing.assert_array_equal(a, b)
    assert int(it1) == int(want_it) == 5
    assert (float(ne[0]), int(ne[1])) == _tf_update(bad is None, 8.0, 1, 2)


def _loop(opt, w, steps, blowup=(), compiled=False):
    x = tf.constant(np.random.RandomState(1).randn(6, 3).astype(np.float32))

    def step(k):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, w) ** 2) * k
            scaled = opt.get_scaled_loss(loss)
        opt.apply_gradients(zip(opt.get_unscaled_gradients(tape.gradient(scaled, [w])), [w]))
    if compiled:
        step = tf.function(step)
    ks = [tf.constant(np.inf if s in blowup else 1.0) for s in range(steps)]
    for k in ks:
        step(k)
    return step


def _w():
    return tf.Variable(np.random.RandomState(2).randn(3, 2).astype(np.float32) * 0.1)


@pytest.mark.parametrize("deferred", [True, False])
def test_eager_steps_are_one_compiled_update_reused(deferred):
    """Finite and skipped steps alike run the inner optimizer's one cached update, which also
    holds the scale and counter: nothing compiles after the first steps."""
    prev = tf.set_deferred_execution(deferred)
    try:
        inner = optimizers.legacy.Adam(0.01)
        opt = LSO(inner, dynamic_growth_steps=2)
        w = _w()
        _loop(opt, w, 3, blowup=(1,))
        with compiles() as names:
            _loop(opt, w, 4, blowup=(0, 2))
    finally:
        tf.set_deferred_execution(prev)
    assert [n for n in names if n not in TRANSFERS] == []
    ((state, fn),) = inner._updates.values()
    # one program at most in JAX's C++ cache of the update (a ``jax.clear_caches()`` elsewhere on
    # the worker can empty it: CI saw 0 once; the compiles above are the check that nothing compiles)
    assert fn._cache_size() <= 1
    assert state[-3:] == (opt._loss_scale.current_loss_scale, opt.dynamic_counter, inner.iterations)
    assert int(opt.iterations.numpy()) == 7


def test_a_step_reads_no_device_value_on_the_host(monkeypatch):
    """The skip is decided on the device: no array's value is read on the host during steps (a
    spy on JAX's host read, checked to catch ``float(opt.loss_scale)``)."""
    opt = LSO(optimizers.legacy.SGD(0.1, momentum=0.9), dynamic_growth_steps=2)
    w = _w()
    _loop(opt, w, 2, blowup=(0,))
    reads = []
    host_value = ArrayImpl._value
    monkeypatch.setattr(ArrayImpl, "_value", property(lambda self: reads.append(1) or host_value.fget(self)))
    _loop(opt, w, 4, blowup=(1, 2))
    assert reads == []
    float(opt.loss_scale)   # the spy's control: reading the scale is a host read
    assert reads


def test_compiled_step_traces_once_and_matches_eager_steps():
    """Inside ``tapejax.function`` the skip is staged (finite and overflowing steps share one
    trace); the values equal the eager loop's."""
    runs = []
    for compiled in (False, True):
        opt = LSO(optimizers.Adam(0.05), initial_scale=4.0, dynamic_growth_steps=2)
        w = _w()
        step = _loop(opt, w, 6, blowup=(0, 3), compiled=compiled)
        runs.append((w.numpy(), float(opt.loss_scale), int(opt.dynamic_counter.numpy()),
                     int(opt.iterations.numpy()), [v.numpy() for v in opt.variables()[1:]]))
        if compiled:
            assert step.experimental_get_tracing_count() == 2   # (discovery, then the step: one structure)
    eager, comp = runs
    np.testing.assert_allclose(comp[0], eager[0], rtol=1e-6)
    assert comp[1:4] == eager[1:4] == (4.0, 0, 6)
    for a, b in zip(comp[4], eager[4]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("kwargs, error, named", [
    (dict(initial_scale="a"), ValueError, "initial_scale"),
    (dict(initial_scale=[1.0]), TypeError, "initial_scale"),
    (dict(dynamic_growth_steps="a"), ValueError, "dynamic_growth_steps"),
    (dict(dynamic="yes"), TypeError, "dynamic"),
    (dict(dynamic=False), ValueError, "initial_scale"),
    (dict(dynamic=False, initial_scale=2, dynamic_growth_steps=4), ValueError, "dynamic_growth_steps"),
])
def test_bad_arguments_change_nothing(kwargs, error, named):
    """TF's error classes, naming the argument, raised before the inner optimizer is marked as
    wrapped (TF marks it first): wrapping it afterwards works."""
    inner = optimizers.legacy.SGD(0.1)
    with pytest.raises(error, match=named):
        LSO(inner, **kwargs)
    assert not getattr(inner, "_is_wrapped_by_loss_scale_optimizer", False)
    assert LSO(inner).inner_optimizer is inner


def test_the_classes_check_their_inner_optimizers_kind():
    with pytest.raises(TypeError, match="LossScaleOptimizerV3"):
        loss_scale.LossScaleOptimizer(optimizers.Adam())
    with pytest.raises(TypeError, match="legacy"):
        loss_scale.LossScaleOptimizerV3(optimizers.legacy.Adam())
    with pytest.raises(TypeError, match="optax"):
        LSO(optimizers.from_optax(optax.sgd(0.1)))
    assert isinstance(LSO(optimizers.Adam()), loss_scale.LossScaleOptimizerV3)
    assert isinstance(LSO(optimizers.AdamW()), loss_scale.LossScaleOptimizerV3)
    assert type(LSO(optimizers.legacy.Adam())) is loss_scale.LossScaleOptimizer
    assert isinstance(LSO(optimizers.legacy.Adam()), optimizers.Optimizer)


def test_a_keras3_optimizer_gets_keras3s_loss_scale_optimizer():
    """``model.compile`` takes Keras 3 optimizers: the namespace's class wraps those with Keras 3's
    own ``LossScaleOptimizer`` (its arguments)."""
    keras = pytest.importorskip("keras")
    LossScale = tf.keras.mixed_precision.LossScaleOptimizer
    opt = LossScale(keras.optimizers.SGD(0.1), initial_scale=64.0)
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer) and opt.initial_scale == 64.0


def test_model_compile_takes_it_and_keeps_it_unwrapped():
    """tf_keras' LossScaleOptimizer given to ``model.compile`` is the model's optimizer as it is
    (not wrapped again under mixed_float16), and fit steps its inner optimizer."""
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1, dtype="float32")])
        opt = LSO(optimizers.Adam())
        model.compile(optimizer=opt, loss="mse")
        assert model.optimizer is opt
        model.fit(np.ones((4, 2), np.float32), np.ones((4, 1), np.float32), batch_size=2, verbose=0)
        assert int(opt.iterations.numpy()) == 2
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_forgetting_to_scale_or_unscale_warns(tapejax_log):
    w = tf.Variable([1.0])
    opt = LSO(optimizers.legacy.SGD(0.1))
    opt.apply_gradients([(tf.constant([1.0]), w)])
    opt.get_scaled_loss(tf.constant(1.0))
    opt.apply_gradients([(tf.constant([1.0]), w)])
    opt.get_unscaled_gradients([tf.constant([1.0])])
    opt.apply_gradients([(tf.constant([1.0]), w)])
    msgs = [r.getMessage() for r in tapejax_log.records if r.levelno == logging.WARNING]
    assert len(msgs) == 2
    assert "get_scaled_loss() and LossScaleOptimizer.get_unscaled_gradients()" in msgs[0]
    assert "You forgot to call LossScaleOptimizer.get_unscaled_gradients()" in msgs[1]


def test_attributes_forward_to_the_inner_optimizer():
    inner = optimizers.legacy.SGD(0.1, momentum=0.5, clipnorm=1.0)
    opt = LSO(inner)
    assert opt.momentum is inner.momentum and "momentum" in dir(opt)
    opt.momentum = 0.25
    opt.lr = 0.5
    opt.clipnorm = 2.0
    assert float(inner.momentum.numpy()) == 0.25 and float(inner.learning_rate.numpy()) == 0.5
    assert inner.clipnorm == 2.0 and opt.name == inner.name
    opt.my_note = 1   # an attribute of its own
    assert opt.my_note == 1 and not hasattr(inner, "my_note")
    w = tf.Variable([1.0, 2.0])
    opt.get_scaled_loss(tf.constant(1.0))
    opt.apply_gradients(zip(opt.get_unscaled_gradients([tf.constant([1.0, 1.0])]), [w]))
    assert opt.get_slot(w, "momentum") is inner.get_slot(w, "momentum")
    assert opt.variables() == inner.variables() and opt.get_slot_names() == ["momentum"]


def test_scaling_ops_are_differentiated_like_tfs_mul():
    """``ScaleLoss`` and ``UnscaleGradients`` are recorded ops: a tape differentiates through them
    (oracle: ``jax.grad`` of the same pure function), float16 values cast the scale first."""
    import jax
    opt = LSO(optimizers.legacy.SGD(0.1), initial_scale=4.0)
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        (u, none, half) = opt.get_unscaled_gradients([x * 3.0, None, tf.cast(x, tf.float16)])
        y = tf.reduce_sum(u * u) + tf.reduce_sum(opt.get_scaled_loss(x * x))
    want = jax.grad(lambda v: jnp.sum((v * 3.0 / 4.0) ** 2) + jnp.sum(v * v * 4.0))(jnp.asarray([1.0, 2.0]))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, rtol=1e-6)
    assert none is None and half.dtype == tf.float16
    np.testing.assert_array_equal(half.numpy(), np.float16([0.25, 0.5]))
