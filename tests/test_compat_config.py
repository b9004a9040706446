"""tf.config and tf.device: placement on a second device, names, parsing, threads.

JAX fixes its device count when it starts, so placement runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (two CPU devices).  Oracle:
``jax.Array.devices()`` of the values themselves.
"""
import json
import os
import subprocess
import sys
import textwrap
import threading
from types import SimpleNamespace

import jax
import pytest

import tapejax as tf
from _env import subprocess_env
from tapejax.compat import device as devmod
from tapejax.core import devices as names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(r'''
    import json
    import jax
    import tapejax as tf

    out = {"physical": [list(d) for d in tf.config.list_physical_devices()],
           "logical": [list(d) for d in tf.config.list_logical_devices("CPU")]}
    with tf.device("CPU:1"):
        x = tf.constant([1., 2.])
        v = tf.Variable([3., 4.])
        y = x * 2. + v
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * v)
        g = t.gradient(loss, v)
        with tf.device("/job:localhost"):          # a scope naming no device keeps the outer one
            inner = tf.ones(2)
        with tf.device(None):                       # None clears it
            cleared = tf.ones(2)
    outside = tf.ones(2) + 1.
    out["in_scope"] = [x.device, v.device, y.device, g.device, inner.device, cleared.device]
    out["jax"] = [x.value.devices().pop().id, y.value.devices().pop().id, tf.convert_to_tensor(v).value.devices().pop().id]
    out["outside"] = outside.device
    out["values"] = [y.numpy().tolist(), g.numpy().tolist()]
    print(json.dumps(out))
''')


def test_scope_places_tensors_variables_and_results_on_a_second_device():
    env = subprocess_env("--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
                         PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu1 = "/job:localhost/replica:0/task:0/device:CPU:1"
    cpu0 = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert out["physical"] == [["/physical_device:CPU:0", "CPU"], ["/physical_device:CPU:1", "CPU"]]
    assert out["logical"] == [["/device:CPU:0", "CPU"], ["/device:CPU:1", "CPU"]]
    assert out["in_scope"] == [cpu1, cpu1, cpu1, cpu1, cpu1, cpu0]
    assert out["jax"] == [1, 1, 1]
    assert out["outside"] == cpu0
    assert out["values"] == [[5., 8.], [6., 8.]]


def test_device_names_from_jax_platforms():
    gpu = SimpleNamespace(platform="cuda")
    assert names.device_type(gpu) == "GPU"
    assert names.device_type(SimpleNamespace(platform="rocm")) == "GPU"
    assert names.device_type(SimpleNamespace(platform="tpu")) == "TPU"
    d = tf.constant(1.).value.devices().pop()
    kind = {"cpu": "CPU", "tpu": "TPU"}.get(d.platform, "GPU")   # (the default backend's)
    assert names.device_name(d) == f"/job:localhost/replica:0/task:0/device:{kind}:0"


def test_parse_follows_tfs_device_spec():
    p = devmod.parse
    assert p("/job:localhost/replica:0/task:0/device:GPU:1") == devmod.DeviceSpec("localhost", 0, 0, "GPU", 1)
    assert p("gpu:*") == devmod.DeviceSpec(device_type="GPU")
    assert p("/device:XPU:0").device_type == "XPU"   # TF accepts any type in the device:T:i form
    with pytest.raises(ValueError, match="Multiple device types"):
        p("/CPU:0/GPU:0")
    outer = p("/GPU:0")
    assert p("/job:localhost").merged_into(outer) == devmod.DeviceSpec("localhost", None, None, "GPU", 0)


def test_scopes_are_per_thread():
    seen = {}
    entered = threading.Event()
    release = threading.Event()

    def other():
        entered.wait(10)
        seen["other"] = list(devmod._LOCAL.specs)
        release.set()

    th = threading.Thread(target=other)
    th.start()
    with tf.device("/GPU:0"):
        entered.set()
        release.wait(10)
        seen["main"] = list(devmod._LOCAL.specs)
    th.join()
    assert seen["other"] == [] and len(seen["main"]) == 1
    assert devmod._LOCAL.specs == []


def test_a_failed_scope_changes_nothing():
    tf.config.set_soft_device_placement(False)
    try:
        with pytest.raises(tf.errors.InvalidArgumentError, match="Could not satisfy device specification"):
            with tf.device("/GPU:3"):
                pass
    finally:
        tf.config.set_soft_device_placement(True)
    assert devmod._LOCAL.specs == []
    assert tf.constant(1.).device == names.device_name(jax.devices()[0])


def test_function_called_in_a_scope():
    @tf.function
    def f(a):
        with tf.device("/CPU:0"):   # accepted inside a trace
            return a * 2.

    with tf.device("/CPU:0"):
        assert f(tf.constant(2.)).numpy() == 4.
