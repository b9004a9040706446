"""``tapejax.distribute`` on 4 CPU devices: ``MirroredStrategy()`` gives the losses and weights of
one device (the oracle: the same program under ``OneDeviceStrategy("/cpu:0")``), and its inputs
and Variables are really placed over the 4 devices.

JAX fixes the device count when it starts, so the programs run in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (as ``tests/test_multidevice.py``).
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from _env import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(r'''
    import json
    import jax
    import numpy as np
    import tapejax as tf
    from tapejax.core import variable as core_variable

    assert jax.device_count() == 4, jax.devices()
    GLOBAL = 16
    rs = np.random.RandomState(0)
    X = rs.randn(70, 5).astype("float32")    # 4 global batches of 16 and a last one of 6
    Y = rs.randint(0, 3, size=70).astype("int32")

    def placement(t):
        sh = t.value.sharding if hasattr(t, "value") and not callable(t.value) else t._value.sharding
        return [str(getattr(sh, "spec", "single")), len(sh.device_set)]

    def custom_loop(strategy, compiled):
        with strategy.scope():
            r = np.random.RandomState(1)
            w1 = tf.Variable((r.randn(5, 7) * 0.4).astype("float32"))
            b1 = tf.Variable(np.zeros(7, "float32"))
            w2 = tf.Variable((r.randn(7, 3) * 0.4).astype("float32"))
            params = [w1, b1, w2]
            opt = tf.keras.optimizers.Adam(0.05)
        dist = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL))
        made = []

        def train_step(xb, yb):
            if not made:   # a Variable created inside the step (first trace): placed like the others
                made.append(tf.Variable(3.0))
            with tf.GradientTape() as tape:
                logits = tf.matmul(tf.nn.relu(tf.matmul(xb, w1) + b1), w2)
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL)
                loss += tf.nn.scale_regularization_loss(0.01 * tf.nn.l2_loss(w1))
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            ctx = tf.distribute.get_replica_context()
            return loss, ctx.num_replicas_in_sync

        def dist_step(xb, yb):
            loss, n = strategy.run(train_step, args=(xb, yb))
            return strategy.reduce("SUM", loss, axis=None)

        step = tf.function(dist_step) if compiled else dist_step
        losses, batches = [], []
        for _ in range(2):
            for xb, yb in dist:
                batches.append(placement(xb) + placement(yb))
                losses.append(float(step(xb, yb).numpy()))
        return {"losses": losses, "vars": [p.numpy().tolist() for p in params], "batches": batches,
                "var_placement": [placement(v) for v in params + opt.variables() + made]}

    def keras_loop(strategy):
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(6, activation="relu"),
                                         tf.keras.layers.Dense(3)])
            r = np.random.RandomState(2)
            model.set_weights([(r.randn(*v.shape) * 0.5).astype("float32") for v in model.weights])
            loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
            opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
        dist = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL, drop_remainder=True))

        def train_step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_obj(yb, model(xb, training=True)), global_batch_size=GLOBAL)
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss

        @tf.function
        def epoch():   # the loop over the distributed dataset inside the compiled function
            total = tf.constant(0.0)
            for xb, yb in dist:
                total += strategy.reduce("SUM", strategy.run(train_step, args=(xb, yb)), axis=None)
            return total

        @tf.function
        def two_steps(it):
            a = strategy.run(train_step, args=next(it))
            b = strategy.run(train_step, args=next(it))
            return strategy.reduce("SUM", a, axis=None) + strategy.reduce("SUM", b, axis=None)

        it = iter(dist)
        out = [float(epoch().numpy()), float(two_steps(it).numpy()), float(two_steps(it).numpy())]
        return {"losses": out, "vars": [v.numpy().tolist() for v in model.trainable_variables],
                "var_placement": [placement(v) for v in model.trainable_variables]}

    def keras_fit(strategy):
        """compile / fit in the scope: TF's values (on several devices Keras's own trainer runs
        on the replicated Variables: not split, see tapejax/distribute/README.md)."""
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(4, activation="tanh"),
                                         tf.keras.layers.Dense(3)])
            r = np.random.RandomState(3)
            model.set_weights([(r.randn(*v.shape) * 0.5).astype("float32") for v in model.weights])
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            hist = model.fit(X, Y, batch_size=GLOBAL, epochs=2, shuffle=False, verbose=0)
        return {"losses": hist.history["loss"], "vars": [v.numpy().tolist() for v in model.trainable_variables]}

    def from_function(strategy, mode):
        contexts = []

        def dataset_fn(ctx):
            contexts.append([ctx.num_replicas_in_sync, ctx.input_pipeline_id, ctx.num_input_pipelines])
            b = ctx.get_per_replica_batch_size(8)
            ds = tf.data.Dataset.from_tensor_slices(np.arange(40, dtype="float32").reshape(20, 2))
            return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(b)

        opts = tf.distribute.InputOptions(experimental_replication_mode=mode)
        dist = strategy.distribute_datasets_from_function(dataset_fn, opts)
        elements = [e for e in dist]
        return {"contexts": contexts, "elements": [e.numpy().tolist() for e in elements],
                "placement": [placement(e) for e in elements]}

    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    four = tf.distribute.MirroredStrategy()
    results = {
        "replicas": [one.num_replicas_in_sync, four.num_replicas_in_sync, list(four.extended.worker_devices)],
        "mesh": [list(four.extended.mesh.axis_names), four.extended.mesh.size],
    }
    for label, s in (("one", one), ("four", four)):
        results[label + "_compiled"] = custom_loop(s, True)
        results[label + "_eager"] = custom_loop(s, False)
        results[label + "_keras"] = keras_loop(s)
        results[label + "_fit"] = keras_fit(s)
        results[label + "_per_worker"] = from_function(s, tf.distribute.InputReplicationMode.PER_WORKER)
        results[label + "_per_replica"] = from_function(s, tf.distribute.InputReplicationMode.PER_REPLICA)
    # a strategy on devices that are not JAX's default one: Variables and batches go there
    for label, s in (("cpu1", tf.distribute.OneDeviceStrategy("/cpu:1")),
                     ("two", tf.distribute.MirroredStrategy(["/cpu:2", "/cpu:3"]))):
        with s.scope():
            v = tf.Variable(np.ones((5, 3), "float32"))
        batch = next(iter(s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(X).batch(4))))
        step = tf.function(lambda b: s.run(lambda b: v.assign_add(tf.matmul(tf.transpose(b), b)[:, :3])
                                           .read_value(), args=(b,)))
        out = step(batch)
        results[label] = {"ids": [sorted(d.id for d in a.sharding.device_set)
                                  for a in (v._value, batch._value, out._value)],
                          "value": out.numpy().tolist(), "replicas": s.num_replicas_in_sync}
    results["hooks_left"] = len(core_variable.CREATION_HOOKS)
    print("RESULT" + json.dumps(results))
''')


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    env = subprocess_env("--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
                         PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = tmp_path_factory.mktemp("distribute") / "program.py"   # (a file: AutoGraph reads its source)
    script.write_text(SCRIPT)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=2e-5, atol=2e-6)


def test_mirrored_strategy_has_the_four_devices(results):
    assert results["replicas"][:2] == [1, 4]
    assert results["replicas"][2] == [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(4)]
    assert results["mesh"] == [["data"], 4]


@pytest.mark.parametrize("kind", ["compiled", "eager", "keras", "fit"])
def test_four_devices_give_one_devices_losses_and_weights(results, kind):
    one, four = results["one_" + kind], results["four_" + kind]
    _close(four["losses"], one["losses"])
    for a, b in zip(four["vars"], one["vars"]):
        _close(a, b)


@pytest.mark.parametrize("kind", ["compiled", "eager"])
def test_batches_are_split_over_the_devices(results, kind):
    # 4 batches of 16 split in 4 (P('data')); the last one of 6 does not split evenly: replicated
    batches = results["four_" + kind]["batches"]
    split, rest = ["P('data',)", 4, "P('data',)", 4], ["P()", 4, "P()", 4]
    assert batches == ([split] * 4 + [rest]) * 2, batches
    assert all(b == ["single", 1, "single", 1] for b in results["one_" + kind]["batches"])


@pytest.mark.parametrize("kind", ["compiled", "eager", "keras"])
def test_variables_and_optimizer_state_are_replicated(results, kind):
    """Variables created in the scope, the optimizer's slots (created in the first step) and a
    Variable created inside the step's first trace are replicated over the 4 devices."""
    assert all(p == ["P()", 4] for p in results["four_" + kind]["var_placement"]), results["four_" + kind]
    assert results["hooks_left"] == 0


def test_strategies_on_other_devices_put_everything_there(results):
    """OneDeviceStrategy('/cpu:1') and MirroredStrategy(['/cpu:2', '/cpu:3']): the Variable, the
    batch and the step's result live on those devices; the value is NumPy's."""
    x = np.random.RandomState(0).randn(70, 5).astype(np.float32)[:4]
    want = np.ones((5, 3)) + (x.T @ x)[:, :3]
    assert results["cpu1"]["ids"] == [[1], [1], [1]] and results["cpu1"]["replicas"] == 1
    assert results["two"]["ids"] == [[2, 3], [2, 3], [2, 3]] and results["two"]["replicas"] == 2
    _close(results["cpu1"]["value"], want)
    _close(results["two"]["value"], want)


def test_datasets_from_function_make_global_batches(results):
    """PER_WORKER: one pipeline; a global batch is the next 4 per-replica batches of 2.
    PER_REPLICA: one pipeline per replica (input_pipeline_id 0..3); a global batch takes a
    batch of each.  On one device each element is the per-replica batch of 8."""
    pw, pr = results["four_per_worker"], results["four_per_replica"]
    assert pw["contexts"] == [[4, 0, 1]]
    rows = np.arange(40, dtype=float).reshape(20, 2)
    assert pw["elements"] == [rows[0:8].tolist(), rows[8:16].tolist(), rows[16:20].tolist()]
    assert pr["contexts"] == [[4, i, 4] for i in range(4)]
    shards = [rows[i::4] for i in range(4)]   # replica i's pipeline: rows i, i+4, ... in batches of 2
    want = [np.concatenate([s[2 * k:2 * k + 2] for s in shards]).tolist() for k in range(3)]
    assert pr["elements"] == want
    assert pw["placement"] == [["P('data',)", 4]] * 3 and pr["placement"] == [["P('data',)", 4]] * 3
    one = results["one_per_worker"]
    assert one["contexts"] == [[1, 0, 1]] and one["elements"] == [rows[0:8].tolist(), rows[8:16].tolist(),
                                                                   rows[16:20].tolist()]
