"""A few-step linear-algebra loop, deferred against eager: wall time, CPU time and XLA compiles.

Run:  python benchmarks/bench_few_step_linalg.py [--reps 3] [--steps 3]

The program is the least-squares readout of
``tests/parity/test_user_programs5.py::test_least_squares_readout_solved_inside_the_loss``
(``tf.linalg.lstsq`` with an L2 regulariser, a QR factor and a triangular solve in the loss,
NumPy data, ``assign_sub`` updates, the losses and gradients read after the loop).  Each number
comes from a fresh Python process (one per mode and background-compile setting, interleaved
over ``--reps`` rounds; the table gives medians), timed from the first step to the last read,
including the wait for a predicted program compiling in the background (a process waits for
it when it exits).  ``compiles`` counts XLA's backend compiles (``jax.monitoring``) in that
span.  ``background off`` is the test suite's setting (``tests/conftest.py``).  The children
import ``tapejax`` as ``python -c`` does (the current directory first): to compare two trees, run
it from elsewhere with ``PYTHONPATH=<tree>``.

Issue #20 (3 steps, background off): deferred 2.59 s wall, 32 compiles before the change, 1.67 s
and 17 compiles after; eager 1.52 s, 34 compiles.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import json, os, sys, time
import jax
import numpy as np
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: compiles.append(secs) if name == "/jax/core/compile/backend_compile_duration" else None)
import tapejax as tf
from tapejax.runtime import prediction, speculate
speculate.set_background_compile(os.environ["BG"] == "1")
rs = np.random.RandomState(28)
x, y = rs.randn(10, 2).astype(np.float32), rs.randn(10, 1).astype(np.float32)
w0 = np.random.RandomState(34).randn(2, 4).astype(np.float32)
t0, c0, n0 = time.perf_counter(), time.process_time(), len(compiles)
w = tf.Variable(w0)
out = []
for _ in range(int(os.environ["STEPS"])):
    with tf.GradientTape() as tape:
        phi = tf.tanh(tf.matmul(x[:7], w))
        beta = tf.linalg.lstsq(phi, y[:7], l2_regularizer=0.1)
        q, r = tf.linalg.qr(tf.tanh(tf.matmul(x[7:], w)) + 0.0 * tf.eye(3, 4))
        z = tf.linalg.triangular_solve(r[:3, :3] + 2.0 * tf.eye(3), tf.ones([3, 1]), lower=False)
        loss = tf.reduce_mean((tf.matmul(tf.tanh(tf.matmul(x[7:], w)), beta) - y[7:]) ** 2) + 0.01 * tf.reduce_sum(z ** 2)
    g = tape.gradient(loss, w)
    w.assign_sub(0.1 * g)
    out.append((loss, g))
vals = [(float(l.numpy()), g.numpy().tolist()) for l, g in out]
prediction.wait_compiles()
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "compiles": len(compiles) - n0, "compile_s": sum(compiles[n0:]), "last_loss": vals[-1][0]}))
"""


def _run(deferred, bg, steps):
    env = dict(os.environ, TAPEJAX_DEFERRED="1" if deferred else "0", BG="1" if bg else "0", STEPS=str(steps))
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    configs = [(d, bg) for bg in (False, True) for d in (True, False)]
    runs = {c: [] for c in configs}
    for _ in range(args.reps):
        for c in configs:
            runs[c].append(_run(*c, args.steps))
    print(f"{'mode':<10}{'background':<12}{'wall s':>8}{'cpu s':>8}{'compiles':>10}{'compile s':>11}")
    for (d, bg), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "compiles", "compile_s")}
        print(f"{'deferred' if d else 'eager':<10}{'on' if bg else 'off':<12}{med['wall']:>8.2f}{med['cpu']:>8.2f}"
              f"{med['compiles']:>10.0f}{med['compile_s']:>11.2f}")
    losses = {round(r["last_loss"], 5) for rs in runs.values() for r in rs}
    assert len(losses) == 1, f"the modes disagree: {losses}"


if __name__ == "__main__":
    main()
