"""Time to the first training steps, a second process with the persistent compilation cache, peak RSS.

Run:  python benchmarks/bench_first_steps.py [--quick] [--parts first,cache,rss]

Every number comes from a fresh Python process (one per system and model, interleaved over
``--reps`` rounds; the table gives medians), so it includes what a user waits for after
``import``: tracing, compiling, the first dispatches.  Imports and building the model and data
are not timed (they are printed apart).  tapejax's sources are byte-compiled first, as
``pip install`` does (``compile_sources``).

* ``first``: the wall time of the first three training steps (each waits for its loss) of
  - ``jax.jit``: ``jax.jit(value_and_grad + optax)`` with donated parameters and state (the limit),
  - ``tapejax.function``: the TF2 step (GradientTape, a Keras optimizer) under ``tapejax.function``,
  - ``tapejax eager``: the same step, eager (deferred execution and predicted updates on),
  on the small MLP (32-64-64-1, batch 32, MSE, SGD) and the large one (784-512-512-10, batch 128,
  softmax cross-entropy, Adam).  Target: tapejax / jax.jit <= 1.2.
* ``cache``: the same first step in a second process that finds the first one's programs in
  JAX's persistent compilation cache (tapejax: ``TAPEJAX_COMPILATION_CACHE=dir``; jax.jit: JAX's
  own settings, the same thresholds), against the first process.  Target: time to the first
  step <= 0.3x the first process's.
* ``rss``: the peak resident memory (``ru_maxrss``) of a process that runs ``--rss-steps`` steps of
  the large MLP, and its growth over the process before the first step.  Every process imports
  tapejax (so the baselines match; the ``jax.jit, no tapejax import`` row shows what the import
  costs).  Target: tapejax <= jax.jit + 15%.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {
    "small": dict(sizes=[32, 64, 64, 1], batch=32, loss="mse", opt="sgd"),
    "large": dict(sizes=[784, 512, 512, 10], batch=128, loss="xent", opt="adam"),
}
KINDS = ("jax.jit", "tapejax.function", "tapejax eager")

# The child: one system, one model, in a fresh process.  It prints one JSON line.
_CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
kind, model, mode, steps, import_tj = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
import numpy as np
import jax, jax.numpy as jnp
import optax
if mode == "cache" and kind == "jax.jit":   # JAX's own persistent cache, tapejax's thresholds
    jax.config.update("jax_compilation_cache_dir", os.environ["BENCH_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
if import_tj or kind != "jax.jit":
    import tapejax as tf
t_import = time.perf_counter() - t0
spec = json.loads(os.environ["BENCH_MODEL"])
sizes, batch = spec["sizes"], spec["batch"]
rng = np.random.RandomState(0)
params = [((rng.randn(a, b) / np.sqrt(a)).astype("float32"), np.zeros(b, "float32"))
          for a, b in zip(sizes[:-1], sizes[1:])]
x = rng.randn(batch, sizes[0]).astype("float32")
if spec["loss"] == "xent":
    y = rng.randint(0, sizes[-1], size=batch).astype("int32")
else:
    y = rng.randn(batch, sizes[-1]).astype("float32")

if kind == "jax.jit":
    tx = optax.adam(1e-3, eps=1e-7) if spec["opt"] == "adam" else optax.sgd(0.01)
    p = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
    s = tx.init(p)
    xs, ys = jnp.asarray(x), jnp.asarray(y)

    def loss_fn(p, x, y):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        if spec["loss"] == "xent":
            return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h, y))
        return jnp.mean(jnp.square(h - y))

    def _step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    step_c = jax.jit(_step, donate_argnums=(0, 1))
    box = [p, s]

    def step():
        box[0], box[1], loss = step_c(box[0], box[1], xs, ys)
        return np.asarray(loss)
else:
    ws = [(tf.Variable(w), tf.Variable(b)) for w, b in params]
    variables = [v for pair in ws for v in pair]
    opt = tf.keras.optimizers.Adam(1e-3) if spec["opt"] == "adam" else tf.keras.optimizers.SGD(0.01)
    xs, ys = tf.constant(x), tf.constant(y)

    def body(x, y):
        with tf.GradientTape() as tape:
            h = x
            for i, (w, b) in enumerate(ws):
                h = tf.matmul(h, w) + b
                if i < len(ws) - 1:
                    h = tf.nn.relu(h)
            if spec["loss"] == "xent":
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
            else:
                loss = tf.reduce_mean(tf.square(h - y))
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss

    fn = tf.function(body) if kind == "tapejax.function" else body

    def step():
        return fn(xs, ys).numpy()

t_setup = time.perf_counter() - t0 - t_import
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for _ in range(steps):
    t1 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t1)
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(import_s=t_import, setup_s=t_setup, steps_s=times, rss0_kib=rss0, rss_kib=rss1)))
"""


def _child_path():
    """The children's PYTHONPATH: a PYTHONPATH given to the benchmark first (another tree's
    tapejax, for a before/after run), then this tree."""
    given = os.environ.get("PYTHONPATH")
    return (given + os.pathsep if given else "") + ROOT


def compile_sources():
    """Byte-compile the tapejax package the children import, as ``pip install`` does: with
    PYTHONDONTWRITEBYTECODE set (as on some CI machines) a source tree is otherwise compiled from
    source in every child, at import and at each module imported lazily during the first steps,
    while jax's installed modules load from their ``.pyc`` files."""
    import compileall
    for entry in _child_path().split(os.pathsep):
        pkg = os.path.join(entry, "tapejax")
        if os.path.isdir(pkg):
            compileall.compile_dir(pkg, quiet=1)
            return pkg
    return None


def child(kind, model, mode="first", steps=3, import_tj=True, env=None):
    """Run one fresh process; its JSON record."""
    e = dict(os.environ)
    e["BENCH_MODEL"] = json.dumps(MODELS[model])
    e["PYTHONPATH"] = _child_path()
    e.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if env:
        e.update(env)
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, model, mode, str(steps), "1" if import_tj else "0"],
                         capture_output=True, text=True, env=e)
    if out.returncode:
        raise RuntimeError(f"{kind} {model} {mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_steps(reps):
    rows = {}
    for r in range(reps):
        order = KINDS if r % 2 == 0 else tuple(reversed(KINDS))   # interleaved: drift hits all alike
        for model in MODELS:
            for kind in order:
                rows.setdefault((model, kind), []).append(child(kind, model))
    print("## first three training steps in a fresh process (ms; medians of %d processes)" % reps)
    print(f"| {'model':6s} | {'system':17s} | {'step 1':>8s} | {'step 2':>8s} | {'step 3':>8s} | {'3 steps':>8s} "
          f"| {'× jax.jit':>9s} | {'import s':>8s} |")
    print("|--------|-------------------|----------|----------|----------|----------|-----------|----------|")
    for model in MODELS:
        base = statistics.median([sum(d["steps_s"]) for d in rows[(model, "jax.jit")]])
        for kind in KINDS:
            ds = rows[(model, kind)]
            per = [statistics.median([d["steps_s"][i] for d in ds]) * 1e3 for i in range(3)]
            tot = statistics.median([sum(d["steps_s"]) for d in ds])
            imp = statistics.median([d["import_s"] for d in ds])
            print(f"| {model:6s} | {kind:17s} | {per[0]:8.0f} | {per[1]:8.0f} | {per[2]:8.0f} | {tot * 1e3:8.0f} "
                  f"| {tot / base:9.2f} | {imp:8.2f} |")
    print("target: tapejax / jax.jit <= 1.2\n")


def cache_runs(reps):
    rows = {}
    for _ in range(reps):
        for model in MODELS:
            for kind in KINDS:
                with tempfile.TemporaryDirectory(prefix="tapejax-cache-") as d:
                    env = {"BENCH_CACHE_DIR": d, "TAPEJAX_COMPILATION_CACHE": d}
                    cold = child(kind, model, "cache", env=env)
                    warm = child(kind, model, "cache", env=env)
                rows.setdefault((model, kind), []).append((cold, warm))
    print("## a second process with the persistent compilation cache (ms; medians of %d pairs)" % reps)
    print(f"| {'model':6s} | {'system':17s} | {'1st step, cold':>14s} | {'1st step, warm':>14s} | {'warm/cold':>9s} "
          f"| {'3 steps cold':>12s} | {'3 steps warm':>12s} |")
    print("|--------|-------------------|----------------|----------------|-----------|--------------|--------------|")
    for model in MODELS:
        for kind in KINDS:
            pairs = rows[(model, kind)]
            c1 = statistics.median([c["steps_s"][0] for c, _ in pairs]) * 1e3
            w1 = statistics.median([w["steps_s"][0] for _, w in pairs]) * 1e3
            c3 = statistics.median([sum(c["steps_s"]) for c, _ in pairs]) * 1e3
            w3 = statistics.median([sum(w["steps_s"]) for _, w in pairs]) * 1e3
            print(f"| {model:6s} | {kind:17s} | {c1:14.0f} | {w1:14.0f} | {w1 / c1:9.2f} | {c3:12.0f} | {w3:12.0f} |")
    print("target: warm / cold <= 0.3 (time to the first step)\n")


def rss_runs(reps, steps):
    rows = {}
    kinds = [(k, True) for k in KINDS] + [("jax.jit", False)]
    for _ in range(reps):
        for kind, imp in kinds:
            rows.setdefault((kind, imp), []).append(child(kind, "large", "rss", steps=steps, import_tj=imp))
    base = statistics.median([d["rss_kib"] for d in rows[("jax.jit", True)]])
    base_growth = statistics.median([d["rss_kib"] - d["rss0_kib"] for d in rows[("jax.jit", True)]])
    print(f"## peak RSS of {steps} steps of the large MLP (MiB; medians of {reps} processes)")
    print(f"| {'system':32s} | {'peak RSS':>8s} | {'× jax.jit':>9s} | {'growth in the loop':>18s} |")
    print("|----------------------------------|----------|-----------|--------------------|")
    for kind, imp in kinds:
        ds = rows[(kind, imp)]
        peak = statistics.median([d["rss_kib"] for d in ds])
        growth = statistics.median([d["rss_kib"] - d["rss0_kib"] for d in ds])
        label = kind if imp else kind + ", no tapejax import"
        print(f"| {label:32s} | {peak / 1024:8.0f} | {peak / base:9.2f} | {growth / 1024:18.0f} |")
    print(f"target: tapejax <= jax.jit + 15% (jax.jit's loop grows by {base_growth / 1024:.0f} MiB)\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one process per cell")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--parts", default="first,cache,rss")
    ap.add_argument("--rss-steps", type=int, default=100)
    a = ap.parse_args(argv)
    reps = a.reps or (1 if a.quick else 3)
    import jax
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
          f"byte-compiled {compile_sources()} first\n")
    parts = a.parts.split(",")
    if "first" in parts:
        first_steps(reps)
    if "cache" in parts:
        cache_runs(reps)
    if "rss" in parts:
        rss_runs(reps, 20 if a.quick else a.rss_steps)


if __name__ == "__main__":
    main()
