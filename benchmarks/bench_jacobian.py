"""Jacobians: tapejax's tape.jacobian / batch_jacobian vs TF's and jax.jacrev, in one process.

Run:  python benchmarks/bench_jacobian.py [--quick]

Each case times a whole eager step (record the layer on a tape, then ask for
the jacobian) on the same data in every framework; the table gives medians of
wall time per step (µs) and ratios to the jitted pure-JAX version.

* jacobian 256->256: y = tanh(x @ W + b), x [1, 256], W [256, 256];
  d y / d x, shape [1, 256, 1, 256];
* batch_jacobian b64: the same layer on x [64, 256]; per-example
  jacobians, shape [64, 256, 256];
* hessian 64 (jacobian of a gradient): loss = sum(tanh(x @ W) ** 2) with
  x [1, 64], W [64, 64]; nested tapes, shape [1, 64, 1, 64].

Frameworks: tapejax (eager tape; the jacobian is one compiled call, cached by
structure), TF eager (``tf.GradientTape``, when TensorFlow is importable),
PyTorch eager (``torch.func.jacrev`` / ``vmap`` / ``grad``, when importable),
``jax.jacrev`` eager (not jitted: op-by-op dispatch) and ``jax.jit(jax.jacrev)``
(the floor: one compiled call, no tape at all).
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import tapejax as tj  # noqa: E402

try:
    import tensorflow as tf_real  # noqa: E402
except ImportError:  # pragma: no cover - TF is optional here
    tf_real = None
try:
    import torch  # noqa: E402
except ImportError:  # pragma: no cover - PyTorch is optional here
    torch = None


def timeit(step, n, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _data(d, batch, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 1 / np.sqrt(d), (d, d)).astype(np.float32)
    b = rng.normal(0, 0.1, (d,)).astype(np.float32)
    x = rng.normal(size=(batch, d)).astype(np.float32)
    return x, w, b


# -- the three programs, written once for tapejax and TF (same API) ---------

def tape_jacobian(tf, x, w, b):
    x, w, b = tf.constant(x), tf.constant(w), tf.constant(b)

    def step():
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.tanh(tf.matmul(x, w) + b)
        return t.jacobian(y, x)

    return step


def tape_batch_jacobian(tf, x, w, b):
    x, w, b = tf.constant(x), tf.constant(w), tf.constant(b)

    def step():
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.tanh(tf.matmul(x, w) + b)
        return t.batch_jacobian(y, x)

    return step


def tape_hessian(tf, x, w, b):
    x, w = tf.constant(x), tf.constant(w)

    def step():
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                h = tf.tanh(tf.matmul(x, w))
                loss = tf.reduce_sum(h * h)
            g = inner.gradient(loss, x)
        return outer.jacobian(g, x)

    return step


# -- pure JAX ------------------------------------------------------------------

def _layer(x, w, b):
    return jnp.tanh(x @ w + b)


def _loss(x, w):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * h)


def jax_fns(case, jit):
    if case == "jacobian":
        f = jax.jacrev(_layer)
    elif case == "batch_jacobian":
        f = jax.vmap(jax.jacrev(lambda r, w, b: _layer(r, w, b)), in_axes=(0, None, None))
    else:
        f = jax.jacrev(jax.grad(_loss))
    return jax.jit(f) if jit else f


def jax_step(case, x, w, b, jit):
    f = jax_fns(case, jit)
    x, w, b = jnp.asarray(x), jnp.asarray(w), jnp.asarray(b)
    if case == "hessian":
        return lambda: f(x, w).block_until_ready()
    return lambda: f(x, w, b).block_until_ready()


def torch_step(case, x, w, b):
    """PyTorch eager with ``torch.func`` (its fastest eager jacobians) on the same layer."""
    x, w, b = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    fn = torch.func
    if case == "jacobian":
        jac = fn.jacrev(lambda r: torch.tanh(r @ w + b))
    elif case == "batch_jacobian":
        jac = fn.vmap(fn.jacrev(lambda r: torch.tanh(r @ w + b)))
    else:
        jac = fn.jacrev(fn.grad(lambda r: torch.sum(torch.tanh(r @ w) ** 2)))
    return lambda: jac(x)


def _block_tj(step):
    return lambda: step()._value.block_until_ready()


def _block_tf(step):
    return lambda: step().numpy()


CASES = [
    ("jacobian 256->256", "jacobian", tape_jacobian, 256, 1),
    ("batch_jacobian b64 256->256", "batch_jacobian", tape_batch_jacobian, 256, 64),
    ("hessian 64 (jacobian of gradient)", "hessian", tape_hessian, 64, 1),
]


def check(case, x, w, b, got):
    want = np.asarray(jax_fns(case, True)(*((x, w) if case == "hessian" else (x, w, b))))
    got = np.asarray(got)
    assert got.shape == want.shape, (case, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args(argv)
    n, warmup = (10, 3) if args.quick else (50, 5)
    table = []
    for name, case, program, d, batch in CASES:
        x, w, b = _data(d, batch)
        rows = {}
        step = program(tj, x, w, b)
        check(case, x, w, b, step().numpy())  # same values as the oracle before timing
        rows["tapejax eager"] = timeit(_block_tj(step), n, warmup)
        if tf_real is not None:
            tf_step = program(tf_real, x, w, b)
            check(case, x, w, b, tf_step().numpy())
            rows["TF eager"] = timeit(_block_tf(tf_step), max(n // 5, 3), 2)
        if torch is not None:
            t_step = torch_step(case, x, w, b)
            check(case, x, w, b, t_step().numpy())
            rows["PyTorch eager"] = timeit(t_step, max(n // 5, 3), 2)
        rows["jax.jacrev eager"] = timeit(jax_step(case, x, w, b, False), max(n // 5, 3), 1)
        rows["jax.jit(jacrev)"] = timeit(jax_step(case, x, w, b, True), n, warmup)
        table.append((name, rows))
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPUs"
          + (f", TensorFlow {tf_real.__version__}" if tf_real is not None else ", TensorFlow not installed")
          + (f", PyTorch {torch.__version__}" if torch is not None else ", PyTorch not installed"))
    print(f"median µs per step (record + jacobian); n={n}\n")
    print(f"{'case':36} {'framework':18} {'median µs':>11} {'× jax.jit':>10}")
    for name, rows in table:
        base = rows["jax.jit(jacrev)"]
        for label, us in rows.items():
            print(f"{name:36} {label:18} {us:11.1f} {us / base:10.2f}")
    print()
    for name, rows in table:
        parts = [f"tapejax / {k} = {rows['tapejax eager'] / v:.3f}" for k, v in rows.items() if k != "tapejax eager"]
        print(f"{name}: " + "; ".join(parts))
    info = tj.cache_info()
    print(f"\ntapejax compiled-replay cache after all steps: {info.misses} structures compiled "
          f"({info.compiles} traces), {info.hits} cache hits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
