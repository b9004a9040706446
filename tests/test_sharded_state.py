"""Optimizer state sharded like its Variables (``optimizers/_base.place_like``, ``core.ownership.slot_owner``;
``tapejax.function``'s ``variable_specs``): a fully-sharded MLP over 4 CPU devices trains like the
replicated one, and every slot (Keras Adam's ``m``/``v``, an optax state's ``mu``/``nu``) has its
Variable's sharding, so no device holds a whole parameter or its state.

JAX fixes the device count when it starts: the check runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``.  Oracle: the replicated run."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from _env import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(r'''
    import json
    import jax, numpy as np, optax
    from jax.sharding import Mesh, PartitionSpec as P
    import tapejax as tf

    assert jax.device_count() == 4
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rng = np.random.RandomState(0)
    X = rng.randn(8, 32, 16).astype("float32")
    Y = rng.randn(8, 32, 4).astype("float32")

    def build(make_opt, specs):
        r = np.random.RandomState(1)
        ws = [tf.Variable(r.randn(a, b).astype("float32") * 0.3, name=f"w{i}")
              for i, (a, b) in enumerate([(16, 64), (64, 64), (64, 4)])]
        bs = [tf.Variable(np.zeros(b, "float32"), name=f"b{i}") for i, b in enumerate([64, 64, 4])]
        vs = ws + bs
        opt = make_opt()

        def step(x, y):
            with tf.GradientTape() as t:
                h = x
                for i, (w, b) in enumerate(zip(ws, bs)):
                    h = tf.matmul(h, w) + b
                    if i < 2:
                        h = tf.nn.relu(h)
                loss = tf.reduce_mean(tf.square(h - y))
            opt.apply_gradients(zip(t.gradient(loss, vs), vs))
            return loss

        fn = tf.function(step, mesh=mesh, in_specs=P("data"), variable_specs=specs)
        losses = [float(fn(tf.constant(X[i]), tf.constant(Y[i])).numpy()) for i in range(8)]
        return losses, vs, opt

    def fsdp(v):   # every parameter split over the 4 devices along its first axis divisible by 4
        for axis, n in enumerate(v.shape):
            if n % 4 == 0:
                return P(*([None] * axis + ["data"]))
        return None

    out = {}
    for name, make in (("adam", lambda: tf.optimizers.Adam(0.01)),
                       ("optax", lambda: tf.optimizers.from_optax(optax.adam(0.01)))):
        rep_losses, rep_vars, _ = build(make, None)
        sh_losses, sh_vars, opt = build(make, fsdp)
        state = [s for s in opt.variables() if s.shape != ()]
        per_device = max(sum(int(np.prod(sh.data.shape)) * 4 for sh in v.value().value.addressable_shards
                             if sh.device == jax.devices()[0]) for v in sh_vars + state)
        out[name] = {
            "losses": [rep_losses, sh_losses],
            "max_diff": max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(rep_vars, sh_vars)),
            "params_sharded": all(not v.value().value.sharding.is_fully_replicated for v in sh_vars),
            "state_specs": sorted({str(s.value().value.sharding.spec) for s in state}),
            "state_like_params": all(
                any(s.shape == v.shape and s.value().value.sharding == v.value().value.sharding for v in sh_vars)
                for s in state),
            "bytes_on_device0": per_device,
            "largest_param_bytes": max(int(np.prod(v.shape)) * 4 for v in sh_vars),
        }
    print("RESULT" + json.dumps(out))
''')


def test_fully_sharded_training_equals_replicated_and_state_follows_parameters():
    env = subprocess_env("--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
                         PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    results = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1][len("RESULT"):])
    for name, r in results.items():
        np.testing.assert_allclose(r["losses"][1], r["losses"][0], rtol=1e-5, err_msg=name)
        assert r["max_diff"] < 1e-5, name
        assert r["params_sharded"], name
        assert r["state_like_params"], (name, r["state_specs"])
        assert r["state_specs"] == ["P('data',)"], name   # (each parameter's first axis: 16, 64, 4 ...)
        # device 0 holds a quarter of each parameter and slot, not the whole of any
        assert r["bytes_on_device0"] * 4 <= r["largest_param_bytes"], name
