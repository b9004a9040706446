"""Per-op eager overhead: tapejax ops vs the bare jax.numpy call, in one process.

Run:  python benchmarks/bench_ops.py [--quick]

For each op the table gives the median time per call (µs) of

* ``jnp``: the bare ``jax.numpy`` / ``jax.nn`` / ``lax`` call on jax Arrays (the floor);
* ``no tape``: the tapejax op on Tensors with no tape active;
* ``recording``: the tapejax op inside a ``GradientTape`` that watches its input, so every call
  records a node (a fresh tape every ``BLOCK`` calls), with deferral off: every op is dispatched
  when it is called, as the ``jnp`` call is;
* ``deferred``: the same with deferred execution on (the default, ``tapejax.runtime.deferred``): the op is
  recorded and its value computed later, inside the compiled gradient, so this is the cost of the
  call alone (what a training step's forward pays per op), not a like-for-like ratio;

and the ratios to ``jnp`` (the median over rounds of each round's ratio: the columns are timed
in turn within a round, so a round's ratio is taken under one load).  Targets (issue #3):
``no tape`` <= 1.15x and ``recording`` <= 1.5x.
Inputs are small (8x8 float32) so the numbers measure dispatch overhead, not arithmetic.  The
random rows draw from the global stream; their ``jnp`` column is what a JAX user writes for a
stateful draw (``key, sub = jax.random.split(key)``, then the draw from ``sub``).
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import tapejax as tf  # noqa: E402

BLOCK = 200
TARGET_NO_TAPE = 1.15
TARGET_RECORDING = 1.5


def _cases():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(8, 8)).astype(np.float32)
    b = rng.normal(size=(8, 8)).astype(np.float32)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    ta, tb = tf.constant(a), tf.constant(b)
    idx = jnp.asarray([0, 3, 5], jnp.int32)
    tidx = tf.constant([0, 3, 5])
    key = [jax.random.PRNGKey(0)]

    def draw(f):   # what a JAX user writes for one stateful draw: split the key, draw from the sub-key
        def call():
            key[0], sub = jax.random.split(key[0])
            return f(sub)
        return call

    # name: (bare jnp call, tapejax call, tapejax inputs to watch)
    return {
        "add": (lambda: jnp.add(ja, jb), lambda x: tf.add(x, tb)),
        "a + b (operator)": (lambda: ja + jb, lambda x: x + tb),
        "multiply": (lambda: jnp.multiply(ja, jb), lambda x: tf.multiply(x, tb)),
        "exp": (lambda: jnp.exp(ja), lambda x: tf.exp(x)),
        "tanh": (lambda: jnp.tanh(ja), lambda x: tf.tanh(x)),
        "sqrt (TF NaN rule)": (lambda: jnp.sqrt(ja), lambda x: tf.sqrt(x)),
        "abs (TF kink rule)": (lambda: jnp.abs(ja), lambda x: tf.abs(x)),
        "maximum (TF tie rule)": (lambda: jnp.maximum(ja, jb), lambda x: tf.maximum(x, tb)),
        "relu": (lambda: jax.nn.relu(ja), lambda x: tf.nn.relu(x)),
        "sigmoid": (lambda: jax.nn.sigmoid(ja), lambda x: tf.sigmoid(x)),
        "reduce_sum(axis=1)": (lambda: jnp.sum(ja, axis=1), lambda x: tf.reduce_sum(x, axis=1)),
        "reduce_max": (lambda: jnp.max(ja), lambda x: tf.reduce_max(x)),
        "matmul": (lambda: jnp.matmul(ja, jb), lambda x: tf.matmul(x, tb)),
        "softmax": (lambda: jax.nn.softmax(ja, axis=-1), lambda x: tf.nn.softmax(x)),
        "reshape": (lambda: jnp.reshape(ja, (4, 16)), lambda x: tf.reshape(x, [4, 16])),
        "transpose": (lambda: jnp.transpose(ja), lambda x: tf.transpose(x)),
        "concat": (lambda: jnp.concatenate([ja, jb], axis=0), lambda x: tf.concat([x, tb], 0)),
        "gather": (lambda: jnp.take(ja, idx, axis=0), lambda x: tf.gather(x, tidx)),
        "clip_by_value": (lambda: jnp.clip(ja, -0.5, 0.5), lambda x: tf.clip_by_value(x, -0.5, 0.5)),
        "random.uniform": (draw(lambda k: jax.random.uniform(k, (8, 8))), lambda x: tf.random.uniform([8, 8])),
        "nn.dropout(0.5)": (draw(lambda k: jnp.where(jax.random.bernoulli(k, 0.5, ja.shape), ja / 0.5, 0.0)),
                            lambda x: tf.nn.dropout(x, 0.5)),
    }, ta


def _per_call(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def _recording(op, x, n, deferred=False):
    prev = tf.set_deferred_execution(deferred)
    try:
        return _recording_time(op, x, n)
    finally:
        tf.set_deferred_execution(prev)


def _recording_time(op, x, n):
    t = 0.0
    done = 0
    while done < n:
        k = min(BLOCK, n - done)
        with tf.GradientTape() as tape:
            tape.watch(x)
            t0 = time.perf_counter()
            for _ in range(k):
                op(x)
            t += time.perf_counter() - t0
        done += k
    return t / n * 1e6


def run(n, repeats):
    cases, x = _cases()
    rows = []
    for name, (bare, op) in cases.items():
        for _ in range(3):  # warm up every path (eager jit caches)
            jax.block_until_ready(bare())
            op(x)
        for deferred in (False, True):
            _recording(op, x, 3, deferred)
        ts_b, ts_t, ts_r, ts_d = [], [], [], []
        for _ in range(repeats):  # interleaved, so drift hits all alike
            ts_b.append(_per_call(bare, n))
            ts_t.append(_per_call(lambda: op(x), n))
            ts_r.append(_recording(op, x, n))
            ts_d.append(_recording(op, x, n, deferred=True))
        b, t, r, d = (statistics.median(v) for v in (ts_b, ts_t, ts_r, ts_d))
        # ratios: the median of each round's ratio (a round's four timings share the machine's
        # load of that moment, so drift between rounds cancels)
        ratios = [statistics.median([v / w for v, w in zip(ts, ts_b)]) for ts in (ts_t, ts_r, ts_d)]
        rows.append((name, b, t, r, d, *ratios))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    args = ap.parse_args()
    n, repeats = (300, 3) if args.quick else (2000, 7)
    rows = run(n, repeats)
    print(f"per-op eager time, median of {repeats} x {n} calls, 8x8 float32 ({jax.devices()[0].platform})")
    print(f"{'op':24s} {'jnp µs':>8s} {'no tape µs':>11s} {'recording µs':>13s} {'deferred µs':>12s} "
          f"{'no tape x':>10s} {'recording x':>12s} {'deferred x':>11s}")
    for name, b, t, r, d, xt, xr, xd in rows:
        flag = ("" if xt <= TARGET_NO_TAPE else " !no-tape") + ("" if xr <= TARGET_RECORDING else " !recording")
        print(f"{name:24s} {b:8.2f} {t:11.2f} {r:13.2f} {d:12.2f} {xt:10.2f} {xr:12.2f} {xd:11.2f}{flag}")
    gt, gr, gd = (statistics.geometric_mean([r[k] for r in rows]) for k in (5, 6, 7))
    print(f"{'geometric mean':24s} {'':8s} {'':11s} {'':13s} {'':12s} {gt:10.2f} {gr:12.2f} {gd:11.2f}")
    print(f"targets: no tape <= {TARGET_NO_TAPE}x, recording <= {TARGET_RECORDING}x")


if __name__ == "__main__":
    main()
