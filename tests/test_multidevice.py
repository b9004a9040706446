"""tapejax.function on several devices: a data-parallel step on 4 CPU devices.

JAX fixes the device count when it starts, so the check runs in a subprocess
with ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` set before JAX is
imported.  Oracle: the same step, same data, on one device.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from _env import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(r'''
    import json
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import tapejax as tf
    from tapejax.compile.sharding import MeshPlan

    assert jax.device_count() == 4, jax.devices()
    rng = np.random.RandomState(0)
    X = rng.randn(10, 32, 8).astype("float32")
    Y = rng.randint(0, 3, size=(10, 32)).astype("int32")
    mesh = Mesh(np.array(jax.devices()), ("data",))

    def build(mesh):
        r = np.random.RandomState(1)
        w1 = tf.Variable(r.randn(8, 16).astype("float32") * 0.3, name="w1")
        b1 = tf.Variable(np.zeros(16, "float32"), name="b1")
        w2 = tf.Variable(r.randn(16, 3).astype("float32") * 0.3, name="w2")
        opt = tf.optimizers.Adam(0.01)
        vars_ = [w1, b1, w2]

        def step(x, y):
            with tf.GradientTape() as t:
                logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            opt.apply_gradients(zip(t.gradient(loss, vars_), vars_))
            return loss

        if mesh is None:
            fn = tf.function(step)
        else:
            fn = tf.function(step, mesh=mesh, in_specs=P("data"))
        return fn, vars_, opt

    results = {}
    for label, m in (("one", None), ("four", mesh)):
        fn, vars_, opt = build(m)
        losses = [float(fn(tf.constant(X[i]), tf.constant(Y[i])).numpy()) for i in range(10)]
        results[label] = {
            "losses": losses,
            "vars": [v.numpy().tolist() for v in vars_],
            "traces": fn.experimental_get_tracing_count(),
            "replicated": all(v.value().value.sharding.is_fully_replicated and
                              len(v.value().value.sharding.device_set) == (4 if m is not None else 1)
                              for v in vars_ + opt.variables()),
        }
    # the batch really is split: a sharded input's shards live on 4 devices
    fn, vars_, opt = build(mesh)
    x = tf.constant(X[0])
    fn(x, tf.constant(Y[0]))
    entry = next(iter(fn._cache.values()))
    sh = MeshPlan.place_inputs([x.value], entry.in_shardings)[0].sharding
    results["input_sharding"] = [list(sh.spec), len(sh.device_set)]
    # a Variable with its own spec keeps it across steps
    w = tf.Variable(np.ones((8, 4), "float32"), name="w")
    g = tf.function(lambda: w.assign(w * 2.0), mesh=mesh, variable_specs=lambda v: P(None, "data"))
    g(); g()
    results["w_spec"] = [list(w.value().value.sharding.spec), w.numpy().tolist()[0][0]]
    # eager assign keeps a Variable on its device, whatever device the new value is on
    d0, d1 = jax.devices()[:2]
    v = tf.Variable(jax.device_put(np.ones(3, "float32"), d1))
    v.assign(jax.device_put(np.full(3, 2.0, "float32"), d0))
    v.assign(v + 1.0)
    results["assign_device"] = [str(list(v.value().value.devices())[0]) == str(d1), v.numpy().tolist()]
    print("RESULT" + json.dumps(results))
''')


@pytest.fixture(scope="module")
def results():
    env = subprocess_env("--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
                         PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_four_devices_equal_one_device(results):
    import numpy as np
    np.testing.assert_allclose(results["four"]["losses"], results["one"]["losses"], rtol=1e-5, atol=1e-6)
    for a, b in zip(results["four"]["vars"], results["one"]["vars"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_variables_stay_replicated_and_one_trace(results):
    assert results["four"]["replicated"] and results["one"]["replicated"]
    # Adam creates its slots on the first call: two traces, as TF 2.21
    assert results["four"]["traces"] == 2 and results["one"]["traces"] == 2


def test_batch_is_sharded_and_variable_specs_kept(results):
    assert results["input_sharding"] == [["data"], 4]
    assert results["w_spec"] == [[None, "data"], 4.0]


def test_eager_assign_keeps_the_variable_on_its_device(results):
    """TF keeps a Variable on its device: assigning a value from another device moves the value."""
    assert results["assign_device"] == [True, [3.0, 3.0, 3.0]]
