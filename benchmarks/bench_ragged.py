"""RaggedTensor: an embedding-bag training step, ragged against the same step padded with a mask.

Run:  python benchmarks/bench_ragged.py [--quick]

The model: a 10,000 x 32 float32 embedding table, 64 bags of 1..20 ids a step (the bag lengths
vary per step), each bag's rows averaged, a 32 x 1 projection, a squared error; SGD on both.

* ``ragged``: ``reduce_mean(RaggedTensor.from_row_lengths(tf.gather(table, ids), lengths), axis=1)``
  (``validate=True``, TF's default: the lengths are read on the host to check them, as TF's eager
  asserts read them);
* ``ragged (validate=False)``: the same without the check;
* ``padded``: the ids padded to the longest bag (host NumPy, as a user pads) and
  ``reduce_sum(gather * mask) / lengths``.

Modes: ``eager`` (deferred execution on) and ``eager (no deferral)``.  ``jax`` is a hand-written
``jax.jit`` step with ``jax.ops.segment_sum`` (its shapes vary with the number of ids, so it
compiles once per distinct size, as the tapejax steps do).  Each row gives the median ms per step
over rounds; compare ratios, not absolutes.
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

ROWS, DIM, BAGS = 10_000, 32, 64


def _data(n_batches=6, seed=0):
    rng = np.random.default_rng(seed)
    table0 = (rng.normal(size=(ROWS, DIM)) * 0.1).astype(np.float32)
    w0 = (rng.normal(size=(DIM, 1)) * 0.1).astype(np.float32)
    batches = []
    for _ in range(n_batches):
        lens = rng.integers(1, 21, size=BAGS).astype(np.int32)
        ids = rng.integers(0, ROWS, size=int(lens.sum())).astype(np.int32)
        y = rng.normal(size=(BAGS, 1)).astype(np.float32)
        padded = np.zeros((BAGS, int(lens.max())), np.int32)
        mask = np.zeros((BAGS, int(lens.max())), np.float32)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        for b, (s, n) in enumerate(zip(starts, lens)):
            padded[b, :n] = ids[s:s + n]
            mask[b, :n] = 1.0
        batches.append((ids, lens, y, padded, mask))
    return table0, w0, batches


def _make_step(kind, data):
    table0, w0, raw = data
    table, w = tf.Variable(table0), tf.Variable(w0)
    batches = [tuple(tf.constant(a) for a in b) for b in raw]

    def step(ids, lens, y, padded, mask):
        with tf.GradientTape() as tape:
            if kind == "padded":
                rows = tf.gather(table, padded) * mask[:, :, None]
                pooled = tf.reduce_sum(rows, axis=1) / tf.reduce_sum(mask, axis=1, keepdims=True)
            else:
                bag = tf.RaggedTensor.from_row_lengths(tf.gather(table, ids), lens, validate=kind == "ragged")
                pooled = tf.reduce_mean(bag, axis=1)
            loss = tf.reduce_mean((tf.matmul(pooled, w) - y) ** 2)
        gt, gw = tape.gradient(loss, [table, w])
        table.assign_sub(0.1 * tf.convert_to_tensor(gt))
        w.assign_sub(0.1 * gw)
        return loss

    state = {"k": 0}

    def run():
        k = state["k"] = (state["k"] + 1) % len(batches)
        return step(*batches[k])

    def sync(out):
        np.asarray(out)
        jax.block_until_ready(table._value)

    return run, sync


def _jax_step(data):
    table0, w0, raw = data
    state = {"table": jnp.asarray(table0), "w": jnp.asarray(w0), "k": 0}
    batches = [(jnp.asarray(ids), jnp.asarray(np.repeat(np.arange(BAGS), lens)), jnp.asarray(lens), jnp.asarray(y))
               for ids, lens, y, _, _ in raw]

    @jax.jit
    def update(table, w, ids, seg, lens, y):
        def loss_fn(table, w):
            pooled = jax.ops.segment_sum(table[ids], seg, BAGS) / lens[:, None].astype(jnp.float32)
            return jnp.mean((pooled @ w - y) ** 2)
        loss, (gt, gw) = jax.value_and_grad(loss_fn, argnums=(0, 1))(table, w)
        return loss, table - 0.1 * gt, w - 0.1 * gw

    def run():
        k = state["k"] = (state["k"] + 1) % len(batches)
        loss, state["table"], state["w"] = update(state["table"], state["w"], *batches[k])
        return loss

    def sync(out):
        jax.block_until_ready((out, state["table"]))

    return run, sync


def _time(pair, n):
    run, sync = pair
    for _ in range(7):   # warm: every batch's sizes compiled
        sync(run())
    t0 = time.perf_counter()
    out = None
    for _ in range(n):
        out = run()
    sync(out)
    return (time.perf_counter() - t0) / n * 1e3


KINDS = ("ragged", "ragged (validate=False)", "padded")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (6, 3) if args.quick else (24, 5)
    data = _data()
    print(f"embedding {ROWS:,} x {DIM}, {BAGS} bags of 1..20 ids; ms per step (median of {rounds} rounds of {n})")
    print(f"{'mode':20} " + " ".join(f"{k:>24}" for k in KINDS) + f" {'ragged/padded':>14}")
    prev = tf.set_deferred_execution(True)
    try:
        for mode, deferred in (("eager", True), ("eager (no deferral)", False)):
            tf.set_deferred_execution(deferred)
            pairs = {k: _make_step(k, data) for k in KINDS}
            ms = {k: [] for k in KINDS}
            ratios = []
            for _ in range(rounds):
                for k in KINDS:
                    ms[k].append(_time(pairs[k], n))
                ratios.append(ms["ragged"][-1] / ms["padded"][-1])
            print(f"{mode:20} " + " ".join(f"{statistics.median(ms[k]):24.3f}" for k in KINDS)
                  + f" {statistics.median(ratios):13.2f}x")
    finally:
        tf.set_deferred_execution(prev)
    jx = [_time(_jax_step(data), n) for _ in range(rounds)]
    print(f"{'jax.jit segment_sum':20} {statistics.median(jx):24.3f}")


if __name__ == "__main__":
    main()
