"""The cost of runtime checks: the value-check mode and tf.debugging asserts, eager and compiled.

Run:  python benchmarks/bench_checks.py [--quick]

Each row times one program with the checks off and on, in the same process, the two timed in
turn within each round; the table gives the medians per call (µs) and the median of the
rounds' on/off ratios:

* ``gather eager``: an embedding lookup (256 ids into a 10,000 x 64 table) and a sum, eager;
  on: the ids are read on the host and range-checked before the gather;
* ``gather train step``: a ``tapejax.function`` step (lookup, loss, gradient, SGD update of the
  table); on: the program checks the ids and returns checkify's error, read after the step;
* ``assert in step``: the same step with ``tf.debugging.assert_less(loss, 1e9)`` inside (off:
  without it): the price of one functionalized assert;
* ``inv eager`` (64 x 64): on: one extra LU factorization on the device and a host read.

Numbers depend on the machine; run it next to your change and compare ratios, not absolutes.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

import tapejax as tf  # noqa: E402
from tapejax.ops import checks  # noqa: E402


def _time(fn, n):
    fn()   # warm (compiles)
    t0 = time.perf_counter()
    for _ in range(n):
        out = fn()
    np.asarray(out)   # wait for the last result
    return (time.perf_counter() - t0) / n * 1e6


def _pair(make, n, rounds):
    """Medians (off, on) and the median on/off ratio; ``make(on)`` builds the timed callable."""
    fns = {}
    for on in (False, True):
        checks.set_value_checks(on)
        fns[on] = make(on)
    offs, ons, ratios = [], [], []
    for _ in range(rounds):
        checks.set_value_checks(False)
        a = _time(fns[False], n)
        checks.set_value_checks(True)
        b = _time(fns[True], n)
        offs.append(a)
        ons.append(b)
        ratios.append(b / a)
    checks.set_value_checks(False)
    return statistics.median(offs), statistics.median(ons), statistics.median(ratios)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (20, 3) if args.quick else (100, 7)
    rng = np.random.default_rng(0)
    table0 = rng.normal(size=(10_000, 64)).astype(np.float32)
    ids = tf.constant(rng.integers(0, 10_000, size=256).astype(np.int32))

    def gather_eager(on):
        table = tf.constant(table0)
        return lambda: tf.reduce_sum(tf.gather(table, ids))

    def train_step(on, with_assert=None):
        table = tf.Variable(table0)

        @tf.function
        def step(i):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(tf.gather(table, i)))
            table.assign_sub(0.01 * tf.convert_to_tensor(t.gradient(loss, table)))
            if with_assert:
                tf.debugging.assert_less(loss, 1e9)
            return loss
        return lambda: step(ids)

    def assert_step(on):
        checks.set_value_checks(False)
        return train_step(on, with_assert=on)

    a64 = tf.constant(rng.normal(size=(64, 64)).astype(np.float32) + 8 * np.eye(64, dtype=np.float32))

    def inv_eager(on):
        return lambda: tf.linalg.inv(a64)

    rows = [("gather eager", gather_eager), ("gather train step", train_step), ("inv eager", inv_eager)]
    print(f"{'program':<22}{'off µs':>10}{'on µs':>10}{'on/off':>8}")
    for name, make in rows:
        off, on, r = _pair(make, n, rounds)
        print(f"{name:<22}{off:>10.1f}{on:>10.1f}{r:>8.2f}")
    # the assert row: value checks stay off; "on" is the step with the assert in it
    fns = {False: assert_step(False), True: assert_step(True)}
    offs, ons, ratios = [], [], []
    for _ in range(rounds):
        a, b = _time(fns[False], n), _time(fns[True], n)
        offs.append(a)
        ons.append(b)
        ratios.append(b / a)
    print(f"{'assert in step':<22}{statistics.median(offs):>10.1f}{statistics.median(ons):>10.1f}"
          f"{statistics.median(ratios):>8.2f}")


if __name__ == "__main__":
    main()
