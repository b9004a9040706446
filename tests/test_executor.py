"""The execution seam (``tapejax/core/executor.py``): one interface, two executors.

Oracle: the eager executor.  The same programs run through both give the same values, the
same recorded nodes and the same gradients; the deferred one only changes when values are
computed (fewer dispatches), and does what the eager one does wherever it may not defer.
"""
import numpy as np
import pytest

import tapejax as tf
from tapejax.core import executor as ex
from tapejax.core.tensor import Pending
from tapejax.runtime import deferred


@pytest.fixture
def restore_executor():
    prev = ex.active()
    yield
    ex.install(prev)


def test_set_deferred_execution_installs_one_executor_or_the_other(restore_executor):
    prev = tf.set_deferred_execution(False)
    assert ex.active() is ex.EAGER and not tf.deferred_execution()
    assert tf.set_deferred_execution(True) is False
    assert ex.active() is deferred.DEFERRED and tf.deferred_execution()
    tf.set_deferred_execution(prev)


def test_install_refuses_what_is_not_an_executor(restore_executor):
    before = ex.active()
    with pytest.raises(TypeError, match="Executor"):
        ex.install(object())
    assert ex.active() is before
    with pytest.raises(TypeError, match="enabled"):
        tf.set_deferred_execution("yes")
    assert ex.active() is before


def _mlp_step(seed=0):
    """A small model's step with every op family the executors handle: matmul with Variables,
    bias add, relu, a reduction, a Python number, a gather; the loss, the tape's nodes, the
    gradients and the updated Variables."""
    rng = np.random.default_rng(seed)
    w1 = tf.Variable(rng.normal(size=(4, 8)).astype(np.float32))
    b1 = tf.Variable(np.zeros(8, np.float32))
    w2 = tf.Variable(rng.normal(size=(8, 1)).astype(np.float32))
    x = tf.constant(rng.normal(size=(5, 4)).astype(np.float32))
    y = tf.constant(rng.normal(size=(5, 1)).astype(np.float32))
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
            pred = tf.matmul(h, w2)
            loss = tf.reduce_mean(tf.square(pred - y)) + 0.01 * tf.reduce_sum(tf.gather(w1, [0, 2]))
        nodes = [(n.prim.name, n.static, n.refs) for n in tape._nodes]
        grads = tape.gradient(loss, [w1, b1, w2])
        for v, g in zip([w1, b1, w2], grads):
            v.assign_sub(0.1 * g)
        losses.append(loss)
    return ([float(t) for t in losses], nodes, [g.numpy() for g in grads],
            [v.numpy() for v in (w1, b1, w2)], type(losses[0]))


def test_both_executors_give_the_same_values_nodes_and_gradients(restore_executor):
    ex.install(ex.EAGER)
    eager = _mlp_step()
    ex.install(deferred.DEFERRED)
    lazy = _mlp_step()
    assert eager[4] is tf.Tensor and lazy[4] is Pending   # the deferred one left the forward pending
    np.testing.assert_allclose(eager[0], lazy[0], rtol=1e-6)
    assert eager[1] == lazy[1]
    for a, b in zip(eager[2] + eager[3], lazy[2] + lazy[3]):
        # (one fused program and several small ones may round differently: float32 ulps of the largest entries)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("executor", ["eager", "deferred"])
def test_a_bad_op_raises_before_reading_or_recording(restore_executor, executor):
    ex.install(ex.EAGER if executor == "eager" else deferred.DEFERRED)
    v = tf.Variable(np.ones(3, np.float32))
    with tf.GradientTape() as t:
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.matmul(tf.constant(np.ones((2, 2), np.float32)), v[None, :] * 1.0)
        n = len(t._nodes)
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.constant(np.ones(2, np.float32)) * v
    assert len(t._nodes) == n
    assert t.watched_variables() == (v,)   # (read by the slice above, not by the failed op)


def test_the_eager_executor_computes_a_value_left_pending_by_the_deferred_one(restore_executor):
    ex.install(deferred.DEFERRED)
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.exp(x)
    assert type(y) is Pending and y._thunk.value is None
    ex.install(ex.EAGER)
    with tf.GradientTape() as t2:
        t2.watch(y)
        z = y * 2.0
    assert type(z) is tf.Tensor
    np.testing.assert_allclose(z.numpy(), 2 * np.exp([1.0, 2.0]), rtol=1e-6)
    np.testing.assert_allclose(t2.gradient(z, y).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(t.gradient(y, x).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_the_deferred_executor_runs_eagerly_where_it_may_not_defer(restore_executor):
    ex.install(deferred.DEFERRED)
    x = tf.constant([0.5, 1.5])
    # a gradient override is active
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.gradient_override_map({"Exp": "Identity"}):
            y = tf.exp(x)
    assert type(y) is tf.Tensor
    # another kind of recorder is on the stack (a forward accumulator's)
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 0.0])) as acc:
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.sin(x)
    assert type(y) is tf.Tensor
    np.testing.assert_allclose(acc.jvp(y).numpy(), [np.cos(0.5), 0.0], rtol=1e-6)
    # a tapejax.function traces
    kinds = []

    @tf.function
    def f(a):
        with tf.GradientTape() as tt:
            tt.watch(a)
            b = tf.exp(a)
        kinds.append(type(b))
        return tt.gradient(b, a)

    np.testing.assert_allclose(f(x).numpy(), np.exp([0.5, 1.5]), rtol=1e-6)
    assert kinds and all(k is tf.Tensor for k in kinds)


def test_an_untaped_op_on_a_pending_value_stays_pending_only_when_deferring(restore_executor):
    ex.install(deferred.DEFERRED)
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    g = t.gradient(loss, w)
    step = 0.5 * g
    assert type(step) is Pending   # ``lr * g``: joins the update's program
    w.assign_sub(step)
    assert w._val is not None and not isinstance(w._val, type(np.zeros(1)))
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
    ex.install(ex.EAGER)
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w + w)
    g = t.gradient(loss, w)
    assert type(g) is tf.Tensor and type(0.5 * g) is tf.Tensor


@pytest.mark.parametrize("executor", ["eager", "deferred"])
def test_group_updates_commit_every_variable_and_run_constraints(restore_executor, executor):
    ex.install(ex.EAGER if executor == "eager" else deferred.DEFERRED)
    a = tf.Variable([1.0, -2.0], constraint=lambda v: tf.maximum(v, 0.0))
    b = tf.Variable([3.0])
    opt = tf.keras.optimizers.SGD(0.5)
    for _ in range(2):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(a) + tf.reduce_sum(b * b)
        opt.apply_gradients(zip(t.gradient(loss, [a, b]), [a, b]))
    np.testing.assert_allclose(a.numpy(), [0.0, 0.0])   # 1 - 0.5 - 0.5; -2 clipped at 0
    np.testing.assert_allclose(b.numpy(), [0.0])        # 3 - 0.5 * 6
    assert int(opt.iterations.numpy()) == 2


def test_ops_offer_themselves_to_every_recording_tape_through_record(restore_executor):
    ex.install(ex.EAGER)
    x = tf.constant(2.0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = x * x * x
        counts = (len(inner._nodes), len(outer._nodes))
        g = inner.gradient(y, x)
    assert counts == (2, 2)   # each op on both tapes (a non-persistent tape frees them after)
    assert float(g) == 12.0 and float(outer.gradient(g, x)) == 12.0
