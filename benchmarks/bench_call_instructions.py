"""The steady call's cost in instructions: ``tapejax.function`` vs ``jax.jit``, counted by callgrind.

Run:  python benchmarks/bench_call_instructions.py [--calls N] [--rows linreg,mlp,nested,method]

Wall time of a ~20 µs step is too noisy on a shared machine to show a few hundred nanoseconds;
the instructions the calling thread executes per step are not.  The script runs itself under
``valgrind --tool=callgrind`` (instrumentation off until the steps, one counter per thread),
calls each step ``--calls`` times between two dumps, twice per case, and prints the calling
thread's instructions per call (the Python around the program, JAX's C++ dispatch, and XLA's
work where it runs on that thread), and tapejax / jax.jit.  The rows are ``bench_training.py``'s
small ones (the same models and steps), plus the linear regression written as a decorated
method.  Needs valgrind (``apt-get install valgrind``); ``PYTHONPATH`` picks the tapejax tree.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _cases(rows):
    """name -> zero-argument step (built and warmed up)."""
    sys.path.insert(0, HERE)
    import jax.numpy as jnp
    import numpy as np
    import optax
    from bench_training import jax_linreg, jax_mlp, jax_nested, tapejax_linreg, tapejax_mlp, tapejax_nested

    import tapejax as tf

    rng = np.random.RandomState(0)
    cases = {}

    def add(name, tj, jx, data):
        at, aj = [tf.constant(a) for a in data], [jnp.asarray(a) for a in data]
        cases["jax.jit " + name] = lambda: jx(*aj)
        cases["tapejax " + name] = lambda: tj(*at)

    xl = rng.uniform(-1, 1, 200).astype("float32")
    yl = (3 * xl + 2).astype("float32")
    if "linreg" in rows:
        add("linreg 200", tapejax_linreg(), jax_linreg(), [xl, yl])
    if "mlp" in rows:
        add("MLP 32-64-64-1", tapejax_mlp([32, 64, 64, 1], tf.keras.optimizers.SGD(0.01), "mse"),
            jax_mlp([32, 64, 64, 1], optax.sgd(0.01), "mse"),
            [rng.randn(32, 32).astype("float32"), rng.randn(32, 1).astype("float32")])
    if "nested" in rows:
        w0 = (rng.randn(256, 256) / 16).astype("float32")
        add("nested 2nd derivative", tapejax_nested(w0), jax_nested(w0), [rng.randn(1, 256).astype("float32")])
    if "method" in rows:
        class Linear(tf.Module):
            def __init__(self):
                super().__init__()
                self.m, self.b = tf.Variable(0.0), tf.Variable(0.0)

            @tf.function
            def step(self, x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(self.m * x + self.b - y))
                gm, gb = tape.gradient(loss, [self.m, self.b])
                self.m.assign_sub(gm * 0.05)
                self.b.assign_sub(gb * 0.05)
                return loss

        model, x, y = Linear(), tf.constant(xl), tf.constant(yl)
        cases["tapejax linreg 200, a method"] = lambda: model.step(x, y)
    for f in cases.values():
        for _ in range(20):
            f()
    return cases


def _child(calls, rows):
    """Inside valgrind: each case's steps between two dumps named after it."""
    cases = _cases(rows)
    pid = str(os.getpid())

    def ctl(*a):
        subprocess.run(["callgrind_control", *a, pid], stdout=subprocess.DEVNULL, check=True)

    ctl("-i", "on")
    for name, f in list(cases.items()) * 2:
        ctl("-d", "before " + name)
        for _ in range(calls):
            f()
        ctl("-d", "after " + name)
    ctl("-i", "off")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rows", default="linreg,mlp,nested,method")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    rows = a.rows.split(",")
    if a.child:
        return _child(a.calls, rows)
    with tempfile.TemporaryDirectory(prefix="tapejax-callgrind-") as d:
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--instr-atstart=no",
               f"--callgrind-out-file={d}/cg.out", sys.executable, os.path.abspath(__file__), "--child",
               f"--calls={a.calls}", f"--rows={a.rows}"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        counts = {}
        for path in glob.glob(os.path.join(d, "cg.out.*-01")):   # the calling (main) thread's
            text = open(path).read()
            trigger = re.search(r"^desc: Trigger: Client Request: (.*)$|^desc: Trigger: dump (.*)$", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if trigger and total:
                counts.setdefault((trigger.group(1) or trigger.group(2)).strip(), []).append(int(total.group(1)))
    per = {}
    for key, vals in counts.items():
        if key.startswith("after "):
            name = key[len("after "):]
            per[name] = min(vals) / a.calls   # (each "after" dump holds the calls since "before")
    import tapejax
    print(f"calling thread's instructions per call (callgrind, {a.calls} calls, min of 2); "
          f"tapejax from {os.path.dirname(tapejax.__file__)}")
    print(f"| {'case':34s} | {'jax.jit':>9s} | {'tapejax':>9s} | {'ratio':>6s} |")
    print(f"|{'-' * 36}|{'-' * 11}|{'-' * 11}|{'-' * 8}|")
    for name, n in per.items():
        if not name.startswith("tapejax "):
            continue
        row = name[len("tapejax "):]
        base = per.get("jax.jit " + row, per.get("jax.jit " + row.split(",")[0]))
        ratio = f"{n / base:6.2f}" if base else "     -"
        print(f"| {row:34s} | {base or 0:9.0f} | {n:9.0f} | {ratio} |")


if __name__ == "__main__":
    main()
