"""Eager GradientTape training steps: tapejax vs pure JAX (and TF / PyTorch when installed).

Run:  python benchmarks/bench_core.py [--quick]

All frameworks run in this one process on the same data; the table gives
medians of per-step wall time (µs) and ratios to pure JAX's jitted step.
Pure JAX and tapejax are timed first, in alternating blocks, before TF or
PyTorch is imported (their thread pools slow whatever runs after them on a
small machine); TF and PyTorch follow.

* mlp-small: MLP 32-64-64-1, batch 32, MSE, SGD (overhead-bound)
* mlp-large: MLP 784-512-512-10, batch 128, sparse softmax cross-entropy, SGD (compute-bound)
* nested-2nd: a second derivative by nested tapes, h = d/dW sum((d/dW sum(tanh(x @ W)))^2),
  W 256x256, x 1x256 (pure JAX: ``jax.jit(jax.value_and_grad(... jax.grad ...))``)

Each eager step is timed twice: with the update written by hand (``v.assign_sub(lr * g)``
per variable; PyTorch ``p.sub_(lr * g)``), and with the framework's SGD optimizer
(``tf.keras.optimizers.SGD(lr).apply_gradients``; PyTorch ``torch.optim.SGD`` with
``backward()``), the ``+SGD`` rows.  Both tapejax steps run once more with their predicted
updates off (``tapejax.set_speculative_updates(False)``, the "no pred." rows).
* first step: forward + gradient + update of mlp-small in a fresh process
  (tapejax vs plain eager JAX with jax.vjp vs pure JAX jit), i.e. compile latency
* cached gradient call: only `tape.gradient` on an already-compiled structure
* mlp-small against PyTorch once more, in alternating blocks in this process (PyTorch on one
  thread): the steadier ratio on a shared machine
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import tapejax as tj  # noqa: E402

LR = 0.01


def _params(sizes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        out.append((rng.normal(0, 1 / np.sqrt(a), (a, b)).astype(np.float32), np.zeros(b, np.float32)))
    return out


def _data(sizes, batch, classes, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    if classes:
        y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    else:
        y = rng.normal(size=(batch, sizes[-1])).astype(np.float32)
    return x, y


def timeit(step, n, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


# -- GradientTape eager: one program for tapejax and TensorFlow -----------------

def tape_step(tf, params, x, y, classes, optimizer=False):
    """The eager training step, written once against the module ``tf`` (tapejax or TF); the
    update by hand, or (``optimizer``) with ``tf.keras.optimizers.SGD``."""
    vs = [(tf.Variable(w), tf.Variable(b)) for w, b in params]
    flat = [v for pair in vs for v in pair]
    x, y = tf.constant(x), tf.constant(y)
    opt = tf.keras.optimizers.SGD(LR) if optimizer else None

    def step():
        with tf.GradientTape() as tape:
            h = x
            for i, (w, b) in enumerate(vs):
                h = tf.matmul(h, w) + b
                if i < len(vs) - 1:
                    h = tf.nn.relu(h)
            if classes:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
            else:
                loss = tf.reduce_mean(tf.square(h - y))
        grads = tape.gradient(loss, flat)
        if opt is not None:
            opt.apply_gradients(zip(grads, flat))
        else:
            for v, g in zip(flat, grads):
                v.assign_sub(LR * g)
        return loss.numpy()

    return step


# -- a second derivative by nested tapes -----------------------------------------

def _nested_data(seed=2):
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 1 / 16, (256, 256)).astype(np.float32),
            rng.normal(size=(1, 256)).astype(np.float32))


def nested_tape_step(tf, w0, x):
    """h = d/dW sum(g * g), g = d/dW sum(tanh(x @ W)), eager, written against the module ``tf``."""
    w = tf.Variable(w0)
    x = tf.constant(x)

    def step():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = tf.reduce_sum(tf.tanh(tf.matmul(x, w)))
            g = inner.gradient(y, w)
            z = tf.reduce_sum(g * g)
        h = outer.gradient(z, w)
        return h.numpy()

    return step


def jax_nested_step(w0, x):
    """The same with ``jax.value_and_grad`` (the tape computes ``z`` too), ``x`` an argument (not a
    constant XLA could fold into the program: tapejax passes it too)."""
    w, x = jnp.asarray(w0), jnp.asarray(x)

    def inner(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    hess = jax.jit(jax.value_and_grad(lambda w, x: jnp.sum(jnp.square(jax.grad(inner)(w, x)))))

    def step():
        return np.asarray(hess(w, x)[1])

    return step


# -- pure JAX ------------------------------------------------------------------

def _jax_loss(params, x, y, classes):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    if classes:
        lse = jax.nn.logsumexp(h, axis=-1)
        return jnp.mean(lse - jnp.take_along_axis(h, y[:, None], axis=-1)[:, 0])
    return jnp.mean(jnp.square(h - y))


def jax_step(params, x, y, classes):
    state = {"p": jax.tree_util.tree_map(jnp.asarray, params)}
    x, y = jnp.asarray(x), jnp.asarray(y)

    @jax.jit
    def update(p, x, y):
        loss, g = jax.value_and_grad(_jax_loss)(p, x, y, classes)
        return loss, jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g)

    def step():
        loss, state["p"] = update(state["p"], x, y)
        loss.block_until_ready()

    return step


# -- PyTorch eager (optional) -------------------------------------------------

def torch_step(params, x, y, classes, optimizer=False):
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    ps = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)) for w, b in params]
    flat = [p for pair in ps for p in pair]
    x = torch.tensor(x)
    y = torch.tensor(y).long() if classes else torch.tensor(y)

    opt = torch.optim.SGD(flat, lr=LR) if optimizer else None

    def step():
        h = x
        for i, (w, b) in enumerate(ps):
            h = h @ w + b
            if i < len(ps) - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y) if classes else torch.mean((h - y) ** 2)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            grads = torch.autograd.grad(loss, flat)
            with torch.no_grad():
                for p, g in zip(flat, grads):
                    p.sub_(LR * g)
        loss.item()

    return step


def _interleaved(steps, n, warmup, rounds=4):
    """Median µs/step of each step, measured in alternating blocks (drift hits all alike)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {k: [] for k in steps}
    per = max(n // rounds, 1)
    for _ in range(rounds):
        for k, step in steps.items():
            for _ in range(per):
                t0 = time.perf_counter()
                step()
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def bench_jax_side(name, sizes, batch, classes, n, warmup, rows):
    """Pure JAX and tapejax, interleaved, before TF or PyTorch is imported: their thread pools
    (PyTorch's OpenMP threads spin after each op) would slow every framework after them."""
    params = _params(sizes)
    x, y = _data(sizes, batch, classes)
    rows[name] = _interleaved({"pure JAX jit": jax_step(params, x, y, classes),
                               "tapejax eager": tape_step(tj, params, x, y, classes),
                               "tapejax eager+SGD": tape_step(tj, params, x, y, classes, True),
                               UNPREDICTED: _unpredicted(tape_step(tj, params, x, y, classes)),
                               UNPREDICTED + "+SGD": _unpredicted(tape_step(tj, params, x, y, classes, True))},
                              n, warmup)


UNPREDICTED = "tapejax, no pred."


def _unpredicted(step):
    """``step`` with tapejax's predicted updates off (``set_speculative_updates``): a manual
    step's updates then run in the next step's program, an optimizer's in its own."""
    def run():
        prev = tj.set_speculative_updates(False)
        try:
            return step()
        finally:
            tj.set_speculative_updates(prev)
    return run


def bench_nested(n, warmup, rows):
    """The nested-tape second derivative: pure JAX and tapejax (deferral and speculation as set,
    then both off), interleaved."""
    w0, x = _nested_data()
    rows[NESTED] = _interleaved({"pure JAX jit": jax_nested_step(w0, x),
                                 "tapejax eager": nested_tape_step(tj, w0, x),
                                 "tapejax, not deferred": _undeferred(nested_tape_step(tj, w0, x))}, n, warmup)


NESTED = "nested-2nd W 256x256 x 1x256"


def _undeferred(step):
    """``step`` with deferred execution off (every op dispatched when called)."""
    def run():
        prev = tj.set_deferred_execution(False)
        try:
            return step()
        finally:
            tj.set_deferred_execution(prev)
    return run


def bench_other_side(name, sizes, batch, classes, n, warmup, rows):
    params = _params(sizes)
    x, y = _data(sizes, batch, classes)
    try:
        import tensorflow
        for label, opt in (("TF eager", False), ("TF eager+SGD", True)):
            rows[name][label] = timeit(tape_step(tensorflow, params, x, y, classes, opt), max(n // 4, 10), warmup)
    except ImportError:
        pass
    try:
        for label, opt in (("PyTorch eager", False), ("PyTorch eager+SGD", True)):
            rows[name][label] = timeit(torch_step(params, x, y, classes, opt), max(n // 4, 10), warmup)
    except ImportError:
        pass


def bench_small_vs_torch(n, warmup):
    """mlp-small, tapejax and PyTorch in alternating blocks in this process (PyTorch on one
    thread, so that its thread pool does not slow what runs after it; run before TF is
    imported, whose thread pools would slow both): on a shared machine the
    ratio of the same blocks is steadier than two medians taken minutes apart.  None without
    PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        params = _params([32, 64, 64, 1])
        x, y = _data([32, 64, 64, 1], 32, False)
        steps = {"tapejax eager": tape_step(tj, params, x, y, False),
                 "PyTorch eager (1 thread)": torch_step(params, x, y, False),
                 "tapejax eager+SGD": tape_step(tj, params, x, y, False, True),
                 "PyTorch eager+SGD (1 thread)": torch_step(params, x, y, False, True)}
        return _interleaved(steps, n, warmup, rounds=8)
    finally:
        torch.set_num_threads(threads)


# -- first step in a fresh process ---------------------------------------------

_FIRST = r"""
import time, sys, numpy as np
t0 = time.perf_counter()
import jax, jax.numpy as jnp
sys.path.insert(0, {bench_dir!r})
import bench_core as b
params = b._params([32, 64, 64, 1]); x, y = b._data([32, 64, 64, 1], 32, False)
kind = {kind!r}
t_import = time.perf_counter()
if kind == "tapejax":
    import tapejax
    step = b.tape_step(tapejax, params, x, y, False)
    t1 = time.perf_counter(); step(); t2 = time.perf_counter()
elif kind == "jax-eager":
    p = jax.tree_util.tree_map(jnp.asarray, params); xj, yj = jnp.asarray(x), jnp.asarray(y)
    t1 = time.perf_counter()
    loss, vjp = jax.vjp(lambda p: b._jax_loss(p, xj, yj, False), p)
    (g,) = vjp(jnp.ones_like(loss))
    p = jax.tree_util.tree_map(lambda a, c: a - b.LR * c, p, g)
    jax.block_until_ready(p); t2 = time.perf_counter()
else:
    step = b.jax_step(params, x, y, False)
    t1 = time.perf_counter(); step(); t2 = time.perf_counter()
print((t2 - t1) * 1e3)
"""


def first_step(kind):
    code = _FIRST.format(bench_dir=os.path.dirname(os.path.abspath(__file__)), kind=kind)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def cached_gradient_call(n, warmup):
    """µs of one tape.gradient on a compiled 2-layer structure vs calling the jitted vjp directly."""
    params = _params([32, 64, 64, 1])
    x, y = _data([32, 64, 64, 1], 32, False)
    vs = [tj.Variable(a) for pair in params for a in pair]
    xt, yt = tj.constant(x), tj.constant(y)

    def record():
        tape = tj.GradientTape()
        with tape:
            h = xt
            for i in range(0, len(vs), 2):
                h = tj.matmul(h, vs[i]) + vs[i + 1]
                if i < len(vs) - 2:
                    h = tj.nn.relu(h)
            loss = tj.reduce_mean(tj.square(h - yt))
        return tape, loss

    times = []
    for k in range(warmup + n):
        tape, loss = record()
        t0 = time.perf_counter()
        g = tape.gradient(loss, vs)
        g[-1].value.block_until_ready()
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    tape_us = statistics.median(times) * 1e6
    p = jax.tree_util.tree_map(jnp.asarray, params)
    grad = jax.jit(jax.grad(lambda p, x, y: _jax_loss(p, x, y, False)))
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    direct_us = timeit(lambda: jax.block_until_ready(grad(p, xj, yj)), n, warmup)
    return tape_us, direct_us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    n_small, n_large = (100, 10) if args.quick else (400, 40)
    models = [("mlp-small 32-64-64-1 b32", [32, 64, 64, 1], 32, False, n_small, 20),
              ("mlp-large 784-512-512-10 b128", [784, 512, 512, 10], 128, True, n_large, 5)]
    rows = {}
    for m in models:
        bench_jax_side(*m, rows)
    bench_nested(n_large * 2, 5, rows)
    tape_us, direct_us = cached_gradient_call(200 if not args.quick else 50, 10)
    firsts = {k: first_step(k) for k in ("tapejax", "jax-eager", "jax-jit")}
    alternating = bench_small_vs_torch(2 * n_small, 20)   # before TF is imported (its threads)
    for m in models:
        bench_other_side(*m, rows)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPUs\n")
    print(f"{'model':32} {'framework':21} {'median µs/step':>15} {'× pure JAX':>11}")
    for model in [m[0] for m in models] + [NESTED]:
        base = rows[model]["pure JAX jit"]
        for label, us in rows[model].items():
            print(f"{model:32} {label:21} {us:15.1f} {us / base:11.2f}")
    print()
    for model, _, *_ in models:
        for suffix in ("", "+SGD"):
            print(f"{model}: tapejax eager{suffix} / {UNPREDICTED}{suffix} (updates not predicted) = "
                  f"{rows[model]['tapejax eager' + suffix] / rows[model][UNPREDICTED + suffix]:.3f}")
            for other in ("PyTorch eager", "TF eager"):
                if other + suffix in rows[model]:
                    ratio = rows[model]["tapejax eager" + suffix] / rows[model][other + suffix]
                    print(f"{model}: tapejax eager{suffix} / {other}{suffix} = {ratio:.3f}")
    if alternating:
        print()
        print("mlp-small, tapejax and PyTorch (1 thread) in alternating blocks, median µs/step: "
              + ", ".join(f"{k} {v:.1f}" for k, v in alternating.items()))
        for suffix in ("", "+SGD"):
            ratio = alternating["tapejax eager" + suffix] / alternating[f"PyTorch eager{suffix} (1 thread)"]
            print(f"  tapejax eager{suffix} / PyTorch eager{suffix} (1 thread) = {ratio:.3f}")
    print()
    print("first training step of mlp-small in a fresh process (ms): "
          + ", ".join(f"{k} {v:.0f}" for k, v in firsts.items())
          + f"; tapejax / eager JAX = {firsts['tapejax'] / firsts['jax-eager']:.2f}")
    print(f"one cached tape.gradient call: {tape_us:.1f} µs; the jitted jax.grad alone: {direct_us:.1f} µs; "
          f"overhead {tape_us - direct_us:.1f} µs")


if __name__ == "__main__":
    main()
