"""Input pipelines: tapejax.data against real tf.data, and a training loop fed by tapejax.data
against the same loop fed by pre-made arrays, in the same process.

Run:  python benchmarks/bench_data.py [--quick]

Data: 60,000 x 784 float32 rows and int32 labels (MNIST's size), in memory.

* pipeline: ``from_tensor_slices((x, y)).shuffle(10_000).batch(128).prefetch(AUTOTUNE)``, one
  full epoch (469 batches) per round, tapejax and TF alternating; batches per second, median
  over rounds, and the ratio tapejax / TF (target >= 1).
* training: an MLP 784-128-10 (softmax cross-entropy, SGD) trained with ``GradientTape`` and a
  tapejax optimizer, eagerly and as a ``tapejax.function`` step; each round runs 100 steps fed
  by the pipeline above, then 100 steps fed by pre-made Tensors of the same shapes (3x as many
  rounds as the pipeline table); median time per step and the ratio pipeline / pre-made
  (target <= 1.10), also as the median of each round's own ratio (the two halves of a round
  see about the same machine load).

* interleave: ``range(8).interleave(inner, cycle_length=4)`` where each inner dataset is 25
  elements that each sleep 1 ms (I/O-like work), in a ``map``'s ``numpy_function`` or in a
  ``from_generator``: wall time per pass with ``num_parallel_calls=4`` against without
  (sequential), tapejax and TF.

Rounds alternate between the contenders so that load from other processes hits both alike;
the ratio of the fastest rounds is printed too (on a shared machine it is the steadier one).
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import tapejax as tf  # noqa: E402

N, D, BATCH, BUFFER = 60_000, 784, 128, 10_000


def data():
    rng = np.random.default_rng(0)
    return rng.random((N, D), dtype=np.float32), rng.integers(0, 10, N).astype(np.int32)


def epoch_rate(ds, block):
    t = time.perf_counter()
    n = 0
    last = None
    for last in ds:
        n += 1
    block(last)
    return n / (time.perf_counter() - t)


def bench_pipeline(x, y, rounds):
    import tensorflow as real_tf
    ours = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(BUFFER).batch(BATCH).prefetch(tf.data.AUTOTUNE)
    theirs = real_tf.data.Dataset.from_tensor_slices((x, y)).shuffle(BUFFER).batch(BATCH).prefetch(
        real_tf.data.AUTOTUNE)
    epoch_rate(ours, lambda e: jax.block_until_ready(e[0].value))   # warm-up (threads, first permutation)
    epoch_rate(theirs, lambda e: e[0].numpy())
    a, b = [], []
    for _ in range(rounds):
        a.append(epoch_rate(ours, lambda e: jax.block_until_ready(e[0].value)))
        b.append(epoch_rate(theirs, lambda e: e[0].numpy()))
    return a, b


def mlp(compiled):
    rng = np.random.default_rng(1)
    w1 = tf.Variable((rng.standard_normal((D, 128)) / np.sqrt(D)).astype(np.float32))
    b1 = tf.Variable(np.zeros(128, np.float32))
    w2 = tf.Variable((rng.standard_normal((128, 10)) / np.sqrt(128)).astype(np.float32))
    b2 = tf.Variable(np.zeros(10, np.float32))
    params = [w1, b1, w2, b2]
    opt = tf.optimizers.SGD(learning_rate=0.1)

    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(xb, w1) + b1), w2) + b2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    return tf.function(step) if compiled else step


def per_step(step, batches, steps):
    t = time.perf_counter()
    loss = None
    for i, (xb, yb) in enumerate(batches):
        if i == steps:
            break
        loss = step(xb, yb)
    assert loss is not None
    jax.block_until_ready(loss.value)
    return (time.perf_counter() - t) / steps * 1e6


def bench_training(x, y, compiled, rounds, steps):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(BUFFER).batch(BATCH).prefetch(tf.data.AUTOTUNE)
    premade = [(tf.constant(x[i * BATCH:(i + 1) * BATCH]), tf.constant(y[i * BATCH:(i + 1) * BATCH]))
               for i in range(steps)]
    step = mlp(compiled)
    per_step(step, ds.repeat(), 20)          # warm-up: compiles, threads
    per_step(step, premade, 20)
    fed, pre = [], []
    for _ in range(rounds):
        fed.append(per_step(step, ds.repeat(), steps))
        pre.append(per_step(step, premade, steps))
    return fed, pre


def _sleep_1ms(v):
    time.sleep(0.001)
    return v


def interleave_pipeline(lib, parallel, inner_kind):
    """An interleave over 8 inner datasets of 25 elements, each element costing a 1 ms sleep: in
    the inner dataset's ``map`` (a ``numpy_function``), or in its ``from_generator``."""
    D = lib.data.Dataset

    def mapped(k):
        return D.range(25).map(lambda v: lib.numpy_function(_sleep_1ms, [v + k * 100], v.dtype))

    def generated(k):
        def gen():
            for i in range(25):
                time.sleep(0.001)
                yield i
        return D.from_generator(gen, output_signature=lib.TensorSpec((), lib.int32))
    npc = 4 if parallel else None
    return D.range(8).interleave(mapped if inner_kind == "map" else generated, cycle_length=4, num_parallel_calls=npc)


def pass_time(ds):
    t = time.perf_counter()
    n = sum(1 for _ in ds)
    assert n == 200, n
    return time.perf_counter() - t


def bench_interleave(rounds):
    import tensorflow as real_tf
    rows = []
    for kind in ("map", "from_generator"):
        for name, lib in (("tapejax.data", tf), ("tf.data", real_tf)):
            seq, par = interleave_pipeline(lib, False, kind), interleave_pipeline(lib, True, kind)
            pass_time(seq)   # warm-up (traces, threads)
            pass_time(par)
            a, b = [], []
            for _ in range(rounds):
                a.append(pass_time(seq))
                b.append(pass_time(par))
            rows.append((name, kind, statistics.median(a), statistics.median(b)))
    print("| interleave, 8 inner x 25 elements, 1 ms sleep each, cycle_length=4 | inner dataset | sequential "
          "ms/pass | num_parallel_calls=4 ms/pass | speed-up |")
    print("| --- | --- | --- | --- | --- |")
    for name, kind, a, b in rows:
        print(f"| {name} | {kind} | {a * 1e3:.0f} | {b * 1e3:.0f} | {a / b:.2f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--interleave", action="store_true", help="only the interleave table")
    ns = ap.parse_args()
    rounds = 3 if ns.quick else 7
    if ns.interleave:
        bench_interleave(rounds)
        return
    steps = 100
    x, y = data()
    print(f"device: {jax.devices()[0].platform}, {os.cpu_count()} CPUs; {N} x {D} float32 rows, batch {BATCH}, "
          f"shuffle buffer {BUFFER}; {rounds} rounds")
    print()
    a, b = bench_pipeline(x, y, rounds)
    print("| pipeline | tapejax.data batches/s | tf.data batches/s | ratio of medians | median of paired ratios |"
          " ratio (best) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(f"| shuffle(10k).batch(128).prefetch | {statistics.median(a):.0f} | {statistics.median(b):.0f} | "
          f"{statistics.median(a) / statistics.median(b):.2f}x | "
          f"{statistics.median(p / q for p, q in zip(a, b)):.2f}x | {max(a) / max(b):.2f}x |")
    print()
    print("| training loop (MLP 784-128-10, SGD) | fed by tapejax.data µs/step | pre-made Tensors µs/step | "
          "ratio of medians | median of paired ratios | ratio (best) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for compiled in (False, True):
        fed, pre = bench_training(x, y, compiled, 3 * rounds, steps)
        name = "tapejax.function step" if compiled else "eager GradientTape step"
        print(f"| {name} | {statistics.median(fed):.0f} | {statistics.median(pre):.0f} | "
              f"{statistics.median(fed) / statistics.median(pre):.3f}x | "
              f"{statistics.median(p / q for p, q in zip(fed, pre)):.3f}x | {min(fed) / min(pre):.3f}x |")
    print()
    bench_interleave(rounds)


if __name__ == "__main__":
    main()
