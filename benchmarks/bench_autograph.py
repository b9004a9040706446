"""AutoGraph and tracing: converted Python control flow vs the functional form, and new sizes.

Run:  python benchmarks/bench_autograph.py [--quick]

1. Steps with a converted ``while`` against the same step written with
   ``tapejax.while_loop`` (both under ``tapejax.function``; target <= 1.05x):

   * newton:   Newton's square root over a batch, ``while`` on a tensor condition
               (``and`` of two tensors, lazy as TF: a ``cond`` in the loop test);
   * inner-gd: a training step whose loss runs 8 inner steps of a ``while`` with
               ``set_loop_options(maximum_iterations=8)`` (a masked scan the tape
               differentiates), then an SGD update.

   Rounds alternate between the two forms; the table gives medians of per-call
   wall time (µs; each round times ``steps`` calls and waits for the last result)
   and the ratio converted / functional, and the ratio of the fastest rounds.

2. ``input_signature=[TensorSpec([None, 784]), ...]``: the cost of the first call
   with a new batch size when the body is traced once with a symbolic size and
   the exported program compiled per size, against a trace per size (the same
   function called without a signature), and the steady per-call time of both.
"""
import argparse
import logging
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import tapejax as tf  # noqa: E402

# -- 1. converted while vs while_loop -------------------------------------------------------------

def newton_pair():
    @tf.function
    def converted(x):
        y = x
        i = 0
        while tf.reduce_max(tf.abs(y * y - x)) > 1e-4 and i < 50:
            y = 0.5 * (y + x / y)
            i += 1
        return y, i

    @tf.function
    def functional(x):
        def cond(y, i):
            return tf.logical_and(tf.reduce_max(tf.abs(y * y - x)) > 1e-4, i < 50)
        return tf.while_loop(cond, lambda y, i: (0.5 * (y + x / y), i + 1), (x, tf.constant(0)))

    x = tf.constant(np.random.RandomState(0).uniform(1.0, 100.0, size=4096).astype("float32"))
    return converted, functional, (x,)


def inner_gd_pair():
    rng = np.random.RandomState(1)
    w0 = (rng.randn(64, 64) / 8).astype("float32")
    x = tf.constant(rng.randn(256, 64).astype("float32"))
    y = tf.constant(rng.randn(256, 64).astype("float32"))

    def make(kind):
        w = tf.Variable(w0)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as t:
                h = tf.matmul(x, w)
                if kind == "converted":
                    i = tf.constant(0)
                    while i < 8:
                        tf.autograph.experimental.set_loop_options(maximum_iterations=8)
                        h = h - 0.1 * (h - y)
                        i += 1
                else:
                    _, h = tf.while_loop(lambda i, h: i < 8, lambda i, h: (i + 1, h - 0.1 * (h - y)),
                                         (tf.constant(0), h), maximum_iterations=8)
                loss = tf.reduce_mean(tf.square(h - y))
            w.assign_sub(0.01 * t.gradient(loss, w))
            return loss

        return step

    return make("converted"), make("functional"), (x, y)


def _round(fn, args, steps):
    out = None
    t0 = time.perf_counter()
    for _ in range(steps):
        out = fn(*args)
    jax.block_until_ready(jax.tree_util.tree_map(lambda t: t.value if hasattr(t, "value") else t, out))
    return (time.perf_counter() - t0) / steps * 1e6


def compare(name, pair, rounds, steps):
    conv, func, args = pair
    for f in (conv, func):   # compile both first
        for _ in range(3):
            _round(f, args, 1)
    a, b = [], []
    for _ in range(rounds):
        a.append(_round(conv, args, steps))
        b.append(_round(func, args, steps))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{name:10s} converted {ma:9.1f} µs   while_loop {mb:9.1f} µs   ratio {ma / mb:5.3f}   "
          f"fastest-round ratio {min(a) / min(b):5.3f}")
    return ma / mb


# -- 2. a new batch size: symbolic trace + per-size compile vs a trace per size -----------------------

def new_sizes(sizes, quick):
    logging.getLogger("tapejax").setLevel(logging.ERROR)   # (the per-shape variant retraces on purpose)
    rng = np.random.RandomState(2)

    def make(signature):
        w1 = tf.Variable((rng.randn(784, 256) / 28).astype("float32"))
        w2 = tf.Variable((rng.randn(256, 10) / 16).astype("float32"))
        opt = tf.optimizers.SGD(0.1)

        def step(x, y):
            with tf.GradientTape() as t:
                logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            opt.apply_gradients(zip(t.gradient(loss, [w1, w2]), [w1, w2]))
            return loss

        sig = [tf.TensorSpec([None, 784], tf.float32), tf.TensorSpec([None], tf.int32)] if signature else None
        return tf.function(step, input_signature=sig)

    data = {n: (tf.constant(rng.randn(n, 784).astype("float32")), tf.constant(rng.randint(0, 10, n).astype("int32")))
            for n in sizes}
    rows = {}
    for label, signature in (("symbolic", True), ("per-shape", False)):
        f = make(signature)
        first = []
        for n in sizes:
            t0 = time.perf_counter()
            f(*data[n]).numpy()
            first.append((time.perf_counter() - t0) * 1e3)
        steady = statistics.median(_round(f, data[sizes[0]], 20 if quick else 100) for _ in range(5))
        rows[label] = (first, steady, f.experimental_get_tracing_count())
    for label, (first, steady, count) in rows.items():
        print(f"{label:9s} traces {count}   first call per new size (ms) "
              + " ".join(f"{t:7.1f}" for t in first)
              + f"   later sizes mean {statistics.mean(first[1:]):7.1f} ms   steady call {steady:8.1f} µs")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    rounds, steps = (5, 20) if a.quick else (15, 100)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; medians of {rounds} rounds x {steps} calls")
    compare("newton", newton_pair(), rounds, steps)
    compare("inner-gd", inner_gd_pair(), rounds, steps)
    print()
    new_sizes([64, 96, 128, 200, 256] if not a.quick else [64, 96, 128], a.quick)


if __name__ == "__main__":
    main()
