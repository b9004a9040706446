"""An iterator read inside the compiled step (``tapejax/data/staged.py``) against the batch fed as an
argument, tapejax and TF, in the same process.

Run:  python benchmarks/bench_iterator_step.py [--quick]

Data: 8,192 x 784 float32 rows and int32 labels, ``from_tensor_slices((x, y)).shuffle(8192)
.batch(128, drop_remainder=True).repeat().prefetch(AUTOTUNE)``.  Step: an MLP 784-128-10
(softmax cross-entropy, plain SGD on four Variables) under ``GradientTape``, compiled.

* ``argument``:  ``x, y = next(it); step(x, y)``   (the element read in Python)
* ``inside``:    ``step_it(it)`` whose body does ``x, y = next(it)``   (a host callback in tapejax,
  TF's IteratorGetNext op in TF)

Each round runs STEPS steps of each form, the forms alternating; the median time per step and
the ratio inside / argument (the callback's cost: device -> host -> device for the batch, copies of
the assigned Variables, a wait for the callback), with TF's own ratio beside it.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import tapejax  # noqa: E402

N, D, H, C, BATCH = 8192, 784, 128, 10, 128


def make(tf, x, y):
    rng = np.random.default_rng(1)
    w1 = tf.Variable(rng.normal(0, 0.05, (D, H)).astype(np.float32))
    b1 = tf.Variable(np.zeros(H, np.float32))
    w2 = tf.Variable(rng.normal(0, 0.05, (H, C)).astype(np.float32))
    b2 = tf.Variable(np.zeros(C, np.float32))
    params = [w1, b1, w2, b2]

    def loss_and_update(xb, yb):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(xb, w1) + b1)
            logits = tf.matmul(h, w2) + b2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits))
        for p, g in zip(params, tape.gradient(loss, params)):
            p.assign_sub(0.1 * g)
        return loss

    step = tf.function(loss_and_update)

    @tf.function
    def step_it(it):
        xb, yb = next(it)
        return loss_and_update(xb, yb)

    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N, seed=0).batch(BATCH, drop_remainder=True)
          .repeat().prefetch(tf.data.AUTOTUNE))
    return step, step_it, iter(ds)


def per_step(run, steps):
    t = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = run()
    float(loss)   # the last step's result: every step has run
    return (time.perf_counter() - t) / steps


def bench(tf, x, y, rounds, steps):
    step, step_it, it = make(tf, x, y)

    def argument():
        xb, yb = next(it)
        return step(xb, yb)

    def inside():
        return step_it(it)

    per_step(argument, 3)
    per_step(inside, 3)   # compile both
    a, b = [], []
    for _ in range(rounds):
        a.append(per_step(argument, steps))
        b.append(per_step(inside, steps))
    return statistics.median(a), statistics.median(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds, steps = (3, 30) if args.quick else (7, 100)
    rng = np.random.default_rng(0)
    x, y = rng.random((N, D), dtype=np.float32), rng.integers(0, C, N).astype(np.int32)
    import tensorflow as real_tf
    print(f"{'':10} {'argument ms/step':>17} {'inside ms/step':>15} {'inside/argument':>16}")
    for name, mod in (("tapejax", tapejax), ("tf", real_tf)):
        a, b = bench(mod, x, y, rounds, steps)
        print(f"{name:10} {a * 1e3:17.3f} {b * 1e3:15.3f} {b / a:16.2f}")


if __name__ == "__main__":
    main()
