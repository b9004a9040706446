"""Sparse gradients: an embedding step with IndexedSlices against the same step made dense.

Run:  python benchmarks/bench_sparse.py [--quick]

The model: a 100,000 x 64 float32 embedding table, 256 ids a step, their rows summed into a
64 x 1 projection, a squared error; the optimizer updates the table and the projection.

* ``sparse``: the tape's gradient of the table is ``tf.IndexedSlices`` (256 rows), the optimizer
  applies it as tf_keras' sparse rule: SGD adds the rows in place (the table's buffer donated);
  Keras-2's sparse Adam decays ``m`` and ``v`` over the whole table (as TF's), so only the
  gradient is sparse there;
* ``dense``: the same step with the gradient densified (``tf.convert_to_tensor``) before the
  optimizer: what tapejax computed before ``IndexedSlices`` (a 25.6 MB gradient each step).

Modes: ``eager`` (the default: deferred execution and predicted updates on), ``eager (no
deferral)`` (``set_deferred_execution(False)``), ``compiled`` (the step is a ``tapejax.function``).
``jax`` times a hand-written ``jax.jit`` step (the rows' gradient by ``jax.value_and_grad``, the
scatter donated) as the floor.  Each row gives the median ms per step of several rounds (the two
variants timed in turn within each round) and the median of the rounds' dense/sparse ratios.
Numbers depend on the machine; compare ratios, not absolutes.
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

ROWS, DIM, BATCH = 100_000, 64, 256


def _data(seed=0, n_batches=8):
    rng = np.random.default_rng(seed)
    table0 = (rng.normal(size=(ROWS, DIM)) * 0.01).astype(np.float32)
    w0 = (rng.normal(size=(DIM, 1)) * 0.1).astype(np.float32)
    ids = [rng.integers(0, ROWS, size=BATCH).astype(np.int32) for _ in range(n_batches)]
    ys = [rng.normal(size=(BATCH, 1)).astype(np.float32) for _ in range(n_batches)]
    return table0, w0, ids, ys


def _make_step(opt_name, sparse, compiled, data):
    table0, w0, ids, ys = data
    table = tf.Variable(table0, name="table")
    w = tf.Variable(w0, name="w")
    opt = tf.keras.optimizers.legacy.SGD(0.1) if opt_name == "SGD" else tf.keras.optimizers.legacy.Adam(1e-3)
    batches = [(tf.constant(i), tf.constant(y)) for i, y in zip(ids, ys)]

    def step(i, y):
        with tf.GradientTape() as t:
            emb = tf.nn.embedding_lookup(table, i)
            loss = tf.reduce_mean(tf.square(tf.matmul(emb, w) - y))
        g_table, g_w = t.gradient(loss, [table, w])
        if not sparse:
            g_table = tf.convert_to_tensor(g_table)
        opt.apply_gradients([(g_table, table), (g_w, w)])
        return loss

    fn = tf.function(step) if compiled else step
    state = {"k": 0}

    def run():
        k = state["k"] = (state["k"] + 1) % len(batches)
        return fn(*batches[k])

    def sync(out):
        np.asarray(out)
        jax.block_until_ready(table._value)   # (the update in flight: no read, no hand-out)

    return run, sync


def _jax_step(data):
    table0, w0, ids, ys = data
    state = {"table": jnp.asarray(table0), "w": jnp.asarray(w0), "k": 0}
    batches = [(jnp.asarray(i), jnp.asarray(y)) for i, y in zip(ids, ys)]

    def loss_fn(rows, w, y):
        return jnp.mean(jnp.square(rows @ w - y))

    @jax.jit
    def _grads(table, w, i, y):
        rows = table[i]
        loss, (g_rows, g_w) = jax.value_and_grad(loss_fn, argnums=(0, 1))(rows, w, y)
        return loss, g_rows, g_w

    update = jax.jit(lambda table, w, i, g_rows, g_w: (table.at[i].add(-0.1 * g_rows), w - 0.1 * g_w),
                     donate_argnums=(0, 1))

    def run():
        k = state["k"] = (state["k"] + 1) % len(batches)
        i, y = batches[k]
        loss, g_rows, g_w = _grads(state["table"], state["w"], i, y)
        state["table"], state["w"] = update(state["table"], state["w"], i, g_rows, g_w)
        return loss

    def sync(out):
        jax.block_until_ready((out, state["table"]))

    return run, sync


def _time(pair, n):
    run, sync = pair
    sync(run())   # warm (compiles; a Keras optimizer makes its slots)
    sync(run())
    t0 = time.perf_counter()
    out = None
    for _ in range(n):
        out = run()
    sync(out)
    return (time.perf_counter() - t0) / n * 1e3


MODES = (("eager", True, False), ("eager (no deferral)", False, False), ("compiled", True, True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (5, 3) if args.quick else (20, 5)
    data = _data()
    print(f"embedding {ROWS:,} x {DIM}, {BATCH} ids a step; ms per step (median of {rounds} rounds of {n})")
    print(f"{'optimizer':9} {'mode':20} {'sparse':>9} {'dense':>9} {'dense/sparse':>13}")
    prev = tf.set_deferred_execution(True)
    try:
        for opt_name in ("SGD", "Adam"):
            for mode, deferred, compiled in MODES:
                tf.set_deferred_execution(deferred)
                pairs = {sp: _make_step(opt_name, sp, compiled, data) for sp in (True, False)}
                sparse_ms, dense_ms, ratios = [], [], []
                for _ in range(rounds):
                    a = _time(pairs[True], n)
                    b = _time(pairs[False], n)
                    sparse_ms.append(a)
                    dense_ms.append(b)
                    ratios.append(b / a)
                print(f"{opt_name:9} {mode:20} {statistics.median(sparse_ms):9.3f} {statistics.median(dense_ms):9.3f} "
                      f"{statistics.median(ratios):12.1f}x")
    finally:
        tf.set_deferred_execution(prev)
    jx = [_time(_jax_step(data), n) for _ in range(rounds)]
    print(f"{'SGD':9} {'jax.jit (floor)':20} {statistics.median(jx):9.3f}")


if __name__ == "__main__":
    main()
