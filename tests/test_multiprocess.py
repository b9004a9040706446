"""Training across processes: 2 processes on this machine (``jax.distributed.initialize`` with the
coordinator on localhost, gloo CPU collectives, 2 CPU devices each), the README's several-hosts
recipe as written, and sharded checkpoints across process counts.

Each process runs the same script: a data-parallel ``tapejax.function`` step over the 4 global
devices (the batch split over the mesh axis ``"data"``, each process feeding its half with
``jax.make_array_from_process_local_data``), with the first layer's weight sharded over the
devices (``variable_specs``, its Adam slots sharded like it), for 20 steps.  Oracle: the same
20 steps in this (single-device) process.  Then the 2 processes save one checkpoint (each
writing its shards) that this process restores, and restore the checkpoint this process saved.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejax as tf
from _env import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20

COMMON = textwrap.dedent("""
    import numpy as np
    import tapejax as tf

    rng = np.random.RandomState(0)
    X = rng.randn(20, 16, 6).astype("float32")           # 20 steps of a global batch of 16
    Y = (X @ rng.randn(6, 1)).astype("float32")

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            r = np.random.RandomState(1)
            self.w1 = tf.Variable(r.randn(8, 6).astype("float32").T.copy() * 0.4, name="w1")   # (6, 8)
            self.b1 = tf.Variable(np.zeros(8, "float32"), name="b1")
            self.w2 = tf.Variable(r.randn(8, 1).astype("float32") * 0.4, name="w2")

        def __call__(self, x):
            return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1) + self.b1), self.w2)

    def make_step(model, opt, **mesh_args):
        def step(x, y):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return tf.function(step, **mesh_args)
""")

# jax.distributed.initialize must run before anything starts JAX's backend (importing tapejax does)
WORKER = textwrap.dedent("""
    import json, sys
    import jax
    pid, port, directory = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
""") + COMMON + textwrap.dedent("""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    assert jax.device_count() == 4 and jax.local_device_count() == 2, jax.devices()

    mesh = Mesh(np.array(jax.devices()), ("data",))
    specs = lambda v: P(None, "data") if v.name.startswith("w1") else None   # noqa: E731
    batch = NamedSharding(mesh, P("data"))

    def local(a):   # this process's half of the global batch, as one global array
        half = a.shape[0] // 2
        return tf.convert_to_tensor(jax.make_array_from_process_local_data(batch, a[pid * half:(pid + 1) * half]))

    def value(v):   # a replicated or sharded global Variable, gathered
        from jax.experimental import multihost_utils
        a = v.value().value
        if a.sharding.is_fully_replicated:
            return np.asarray(a.addressable_data(0)).tolist()
        return np.asarray(multihost_utils.process_allgather(a, tiled=True)).tolist()

    model, opt = MLP(), tf.optimizers.Adam(0.05)
    step = make_step(model, opt, mesh=mesh, in_specs=P("data"), variable_specs=specs)
    losses = [float(np.asarray(step(local(X[i]), local(Y[i])).value.addressable_data(0))) for i in range(20)]
    out = {"losses": losses, "vars": [value(v) for v in model.variables],
           "w1_sharding": [list(model.w1.value().value.sharding.spec), len(model.w1.value().value.sharding.device_set)],
           "m_sharding": list(opt.get_slot(model.w1, "m").value().value.sharding.spec),
           "traces": step.experimental_get_tracing_count()}
    # both processes save one checkpoint (each writes its own shards) ...
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    out["saved"] = ckpt.save(directory + "/two/ckpt")
    # an async save (orbax's AsyncCheckpointer copies the shards off the devices first): a step
    # taken while it is written does not change what it writes
    out["saved_async"] = ckpt.save(directory + "/two/ckpt", options=tf.train.CheckpointOptions(enable_async=True))
    step(local(X[1]), local(Y[1]))
    ckpt.sync()
    # ... and restore the one the single process saved, onto their sharded Variables
    model2, opt2 = MLP(), tf.optimizers.Adam(0.05)
    step2 = make_step(model2, opt2, mesh=mesh, in_specs=P("data"), variable_specs=specs)
    status = tf.train.Checkpoint(model=model2, optimizer=opt2).restore(directory + "/one/ckpt-1")
    out["restored_iterations"] = int(np.asarray(opt2.iterations.value().value.addressable_data(0)))
    out["restored_vars"] = [value(v) for v in model2.variables]
    out["next_loss"] = float(np.asarray(step2(local(X[0]), local(Y[0])).value.addressable_data(0)))
    status.assert_consumed()
    out["restored_w1_sharding"] = list(model2.w1.value().value.sharding.spec)
    print("RESULT" + json.dumps(out), flush=True)
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("multiprocess"))
    ns: dict = {}
    exec(COMMON, ns)
    # the single-process oracle: the same 20 steps on one device, a checkpoint, one more step
    model, opt = ns["MLP"](), tf.optimizers.Adam(0.05)
    step = ns["make_step"](model, opt)
    X, Y = ns["X"], ns["Y"]
    losses = [float(step(tf.constant(X[i]), tf.constant(Y[i])).numpy()) for i in range(STEPS)]
    tf.train.Checkpoint(model=model, optimizer=opt).save(directory + "/one/ckpt")
    one = {"losses": losses, "vars": [v.numpy().tolist() for v in model.variables],
           "next_loss": float(step(tf.constant(X[0]), tf.constant(Y[0])).numpy())}

    port = _free_port()
    env = subprocess_env("--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
                         PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(i), str(port), directory], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT) for i in range(2)]
    outs = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, stdout[-2000:] + stderr[-5000:]
        outs.append(json.loads([ln for ln in stdout.splitlines() if ln.startswith("RESULT")][-1][6:]))
    return one, outs, directory, ns


def test_two_processes_train_like_one(runs):
    one, outs, _, _ = runs
    for out in outs:
        np.testing.assert_allclose(out["losses"], one["losses"], rtol=1e-5, atol=1e-6)
        for a, b in zip(out["vars"], one["vars"]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert out["traces"] == 2   # TF's count: the first call creates Adam's slots, so it traces twice


def test_parameters_and_optimizer_state_are_sharded(runs):
    _, outs, _, _ = runs
    for out in outs:
        assert out["w1_sharding"] == [[None, "data"], 4]
        assert out["m_sharding"] == [None, "data"]


def test_checkpoint_saved_by_two_processes_restores_in_one(runs):
    one, outs, directory, ns = runs
    assert outs[0]["saved"] == outs[1]["saved"] == directory + "/two/ckpt-1"
    model, opt = ns["MLP"](), tf.optimizers.Adam(0.05)
    status = tf.train.Checkpoint(model=model, optimizer=opt).restore(directory + "/two/ckpt-1")
    status.assert_existing_objects_matched()   # (the optimizer's state: made by its first update)
    assert int(opt.iterations.numpy()) == STEPS
    for v, want in zip(model.variables, outs[0]["vars"]):
        np.testing.assert_array_equal(v.numpy(), np.asarray(want, "float32"))
    step = ns["make_step"](model, opt)
    loss = float(step(tf.constant(ns["X"][0]), tf.constant(ns["Y"][0])).numpy())
    np.testing.assert_allclose(loss, one["next_loss"], rtol=1e-5)
    status.assert_consumed()


def test_async_checkpoint_saved_by_two_processes_holds_the_values_of_its_moment(runs):
    _, outs, directory, ns = runs
    assert outs[0]["saved_async"] == outs[1]["saved_async"] == directory + "/two/ckpt-2"
    assert tf.train.latest_checkpoint(directory + "/two") == directory + "/two/ckpt-2"
    model, opt = ns["MLP"](), tf.optimizers.Adam(0.05)
    opt.build(model.trainable_variables)   # (its state made now, in the saving steps' order)
    tf.train.Checkpoint(model=model, optimizer=opt).restore(directory + "/two/ckpt-2").assert_consumed()
    assert int(opt.iterations.numpy()) == STEPS
    for v, want in zip(model.variables, outs[0]["vars"]):
        np.testing.assert_array_equal(v.numpy(), np.asarray(want, "float32"))


def test_checkpoint_saved_by_one_process_restores_in_two(runs):
    one, outs, _, _ = runs
    for out in outs:
        assert out["restored_iterations"] == STEPS
        for a, b in zip(out["restored_vars"], one["vars"]):
            np.testing.assert_array_equal(np.asarray(a, "float32"), np.asarray(b, "float32"))
        np.testing.assert_allclose(out["next_loss"], one["next_loss"], rtol=1e-5)
        assert out["restored_w1_sharding"] == [None, "data"]
