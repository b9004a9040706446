"""tapejax.distribute beyond what one TF process can show (TF parity: tests/parity/test_distribute.py;
several devices: tests/test_distribute_multidevice.py): modes are per thread, scopes unwind on
errors, the strategies take jax.Device objects and expose their mesh, inputs and Variables stay
where they are on JAX's default device (nothing moved: the deferred executor keeps ops pending).
Oracles: TF's documented context rules, and the same step without a strategy."""
import threading

import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.core import distribution as modes


def test_modes_are_per_thread():
    s = tf.distribute.MirroredStrategy()
    seen = {}
    entered, leave = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        seen["other"] = (tf.distribute.has_strategy(), tf.distribute.get_replica_context() is not None)
        leave.set()

    t = threading.Thread(target=other)
    t.start()
    with s.scope():
        entered.set()
        leave.wait(10)
        seen["here"] = tf.distribute.has_strategy()
    t.join()
    assert seen == {"here": True, "other": (False, True)}


def test_scope_and_run_unwind_after_an_error():
    s = tf.distribute.MirroredStrategy()

    def boom():
        raise KeyError("x")

    with pytest.raises(KeyError):
        s.run(boom)
    with pytest.raises(ZeroDivisionError):
        with s.scope():
            1 / 0
    assert modes.modes() == [] and not tf.distribute.has_strategy()


def test_modes_exit_in_order():
    s = tf.distribute.MirroredStrategy()
    scope = s.scope()
    scope.__enter__()
    ctx = tf.distribute.ReplicaContext(s, 0)
    ctx.__enter__()
    with pytest.raises(RuntimeError, match="out of order"):
        scope.__exit__(None, None, None)
    ctx.__exit__(None, None, None)
    scope.__exit__(None, None, None)
    assert modes.modes() == []


def test_devices_as_jax_devices_and_the_mesh():
    d = jax.devices()[0]
    s = tf.distribute.MirroredStrategy(devices=[d])
    kind = {"cpu": "CPU", "tpu": "TPU"}.get(d.platform, "GPU")
    assert s.num_replicas_in_sync == 1 and s.extended.worker_devices == (
        f"/job:localhost/replica:0/task:0/device:{kind}:0",)
    assert s.extended.mesh.axis_names == ("data",) and list(s.extended.mesh.devices.flat) == [d]
    assert tf.distribute.OneDeviceStrategy(d).extended.worker_devices == s.extended.worker_devices
    with pytest.raises(ValueError, match="names no device type"):
        tf.distribute.OneDeviceStrategy("/job:localhost")
    with pytest.raises(TypeError, match="cross_device_ops"):
        tf.distribute.MirroredStrategy(cross_device_ops="nccl")


def test_one_default_device_moves_nothing():
    """On JAX's default device a strategy places nothing: a Variable keeps its (uncommitted)
    buffer, a distributed batch is the dataset's own Tensor, so deferred execution is unchanged
    and a step gives the values of the same step without a strategy."""
    x = np.arange(12, dtype=np.float32).reshape(6, 2)

    def train(strategy):
        with strategy.scope():
            w = tf.Variable(np.ones((2, 1), np.float32))
        ds = tf.data.Dataset.from_tensor_slices(x).batch(3)
        out = []
        for xb in strategy.experimental_distribute_dataset(ds):
            def step(b):
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(tf.reduce_sum(tf.matmul(b, w), axis=1), global_batch_size=3)
                w.assign_sub(0.01 * tape.gradient(loss, w))
                return loss
            out.append(strategy.reduce("SUM", strategy.run(step, args=(xb,)), axis=None).numpy())
        committed = getattr(w.value().value, "committed", None)
        return out, w.numpy(), committed

    got = train(tf.distribute.MirroredStrategy())
    want = train(tf.distribute.get_strategy())
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])
    assert got[2] == want[2]


def test_created_in_scope_is_weak():
    import gc
    import weakref

    from tapejax.distribute import context
    s = tf.distribute.MirroredStrategy()
    with s.scope():
        v = tf.Variable(1.0)
    assert s.extended.variable_created_in_scope(v)
    ref = weakref.ref(v)
    n = len(context._created_in)
    del v
    gc.collect()
    assert ref() is None and len(context._created_in) == n - 1


def test_sum_on_read_variable_of_a_mirrored_strategy_is_updated_only_in_a_replica_context():
    """TF 2.21: an ON_READ Variable with SUM aggregation made in a MirroredStrategy's scope (a
    SyncOnReadVariable) raises ValueError on ``assign_add`` / ``assign_sub`` outside
    ``strategy.run`` (eagerly, in the scope, in a function); ``assign`` works, and so do the
    MEAN and ONLY_FIRST_REPLICA Variables and a OneDeviceStrategy's (a plain Variable)."""
    sync, agg = tf.VariableSynchronization.ON_READ, tf.VariableAggregation
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        total = tf.Variable(1.0, synchronization=sync, aggregation=agg.SUM)
        mean = tf.Variable(1.0, synchronization=sync, aggregation=agg.MEAN)
    with pytest.raises(ValueError, match="cross-replica context"):
        total.assign_add(2.0)
    with strategy.scope(), pytest.raises(ValueError, match="cross-replica context"):
        total.assign_sub(2.0)
    with pytest.raises(ValueError, match="cross-replica context"):
        tf.function(lambda: total.assign_add(1.0))()
    assert float(total.assign(3.0).numpy()) == 3.0 and float(mean.assign_add(2.0).numpy()) == 3.0
    strategy.run(lambda: total.assign_add(1.0))
    tf.function(lambda: strategy.run(lambda: total.assign_add(1.0)))()
    assert float(total.numpy()) == 5.0
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        plain = tf.Variable(1.0, synchronization=sync, aggregation=agg.SUM)
    assert float(plain.assign_add(1.0).numpy()) == 2.0
