"""Training steps: ``tapejax.function`` and the eager tape vs pure JAX, in the same process.

Run:  python benchmarks/bench_training.py [--quick] [--no-eager] [--only NAMES] [--timer wall|thread]

Pure JAX is ``jax.jit(step, donate_argnums=...)`` over ``jax.value_and_grad``
+ optax with donated parameters and optimizer state.  tapejax is the TF2
training step (GradientTape, Keras optimizer) under ``tapejax.function``, and
the same step eager (no ``tapejax.function``; deferral and predicted updates as
set, on by default) unless ``--no-eager``; the warm-up waits for the predicted programs
tapejax compiles in the background, so the eager column is the steady step.
All run the same model on the same data; rounds alternate between them
so that load from other processes hits all alike.  The table gives medians
of per-step wall time (µs, each round times ``steps`` calls and waits for
the last result) and the ratios tapejax / pure JAX; the ratio of the fastest
rounds is printed too (on a shared machine it is the steadier number).

* mlp-large-adam: MLP 784-512-512-10, batch 128, softmax cross-entropy, Adam
* mlp-small-sgd:  MLP 32-64-64-1, batch 32, MSE, SGD
* linreg-seed003: seed 003's linear regression (200 points), 500 steps per round
* linreg-1000: the same on 1,000 points
* nested-2nd: a second derivative by nested tapes inside the function, W 256x256, x 1x256:
  h = d/dW sum((d/dW sum(tanh(x @ W)))^2), returned (pure JAX: ``jax.jit(jax.grad(... jax.grad ...))``)
* mlp-wide-adam: MLP 784-4096-4096-10, batch 1024, Adam: a size where an accelerator matters; on
  by default where JAX's default backend is not the CPU, else with ``--wide`` (slow on a small CPU)

Targets (issue #25): tapejax.function <= 1.05x pure JAX on every row; eager <= 3x on
mlp-small, <= 1.2x on mlp-large, <= 4x on nested-2nd.
"""
import argparse
import os
import statistics
import time
from typing import NamedTuple, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import tapejax as tf  # noqa: E402


def _params(sizes, seed=0):
    rng = np.random.RandomState(seed)
    return [((rng.randn(a, b) / np.sqrt(a)).astype("float32"), np.zeros(b, "float32"))
            for a, b in zip(sizes[:-1], sizes[1:])]


# -- tapejax -------------------------------------------------------------------

def _maybe_function(compiled):
    return tf.function if compiled else (lambda f: f)


def tapejax_mlp(sizes, optimizer, loss_kind, compiled=True):
    ws = [(tf.Variable(w), tf.Variable(b)) for w, b in _params(sizes)]
    variables = [v for pair in ws for v in pair]

    @_maybe_function(compiled)
    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for i, (w, b) in enumerate(ws):
                h = tf.matmul(h, w) + b
                if i < len(ws) - 1:
                    h = tf.nn.relu(h)
            if loss_kind == "xent":
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
            else:
                loss = tf.reduce_mean(tf.square(h - y))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    return step


def tapejax_linreg(lr=0.05, compiled=True):
    m = tf.Variable(0.)
    b = tf.Variable(0.)

    @_maybe_function(compiled)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m * x + b - y))
        gm, gb = tape.gradient(loss, [m, b])
        m.assign_sub(gm * lr)
        b.assign_sub(gb * lr)
        return loss

    return step


def tapejax_nested(w0, compiled=True):
    w = tf.Variable(w0)

    @_maybe_function(compiled)
    def step(x):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = tf.reduce_sum(tf.tanh(tf.matmul(x, w)))
            g = inner.gradient(y, w)
            z = tf.reduce_sum(g * g)
        return outer.gradient(z, w)

    return step


# -- pure JAX ----------------------------------------------------------------------

def jax_nested(w0):
    w = jnp.asarray(w0)

    def inner(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    hess = jax.jit(jax.grad(lambda w, x: jnp.sum(jnp.square(jax.grad(inner)(w, x)))))

    def step(x):
        return hess(w, x)

    return step


def _forward(params, x):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    return h


def jax_mlp(sizes, tx, loss_kind):
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in _params(sizes)]
    state = tx.init(params)

    def loss_fn(p, x, y):
        out = _forward(p, x)
        if loss_kind == "xent":
            return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(out, y))
        return jnp.mean(jnp.square(out - y))

    def _step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    step_c = jax.jit(_step, donate_argnums=(0, 1))
    box = [params, state]

    def step(x, y):
        box[0], box[1], loss = step_c(box[0], box[1], x, y)
        return loss

    return step


def jax_linreg(lr=0.05):
    box = [(jnp.float32(0.), jnp.float32(0.))]

    def loss_fn(p, x, y):
        return jnp.mean(jnp.square(p[0] * x + p[1] - y))

    def _step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return (p[0] - g[0] * lr, p[1] - g[1] * lr), loss

    step_c = jax.jit(_step, donate_argnums=(0,))

    def step(x, y):
        box[0], loss = step_c(box[0], x, y)
        return loss

    return step


# -- timing ----------------------------------------------------------------------------

#: The clock of a round: wall time, or with ``--timer thread`` this thread's CPU time
#: (``time.thread_time``), steadier on a loaded machine: it counts the Python and dispatch work of
#: the calling thread (what separates tapejax.function from jax.jit), and XLA's work only where it
#: runs on that thread.
TIMER = [time.perf_counter]


def _round(step, args, steps):
    clock = TIMER[0]
    start = clock()
    for _ in range(steps):
        out = step(*args)
    jax.block_until_ready(out.value if hasattr(out, "value") else out)
    return (clock() - start) / steps * 1e6


def _wait_compiles():
    """Wait for the predicted programs tapejax compiles in the background: the eager column times
    the steady step (a fresh process's first steps are ``bench_first_steps.py``'s)."""
    if not os.path.isdir(os.path.join(os.path.dirname(tf.__file__), "runtime")):
        return   # (an older tapejax, run for comparison: no background compiles)
    from tapejax.runtime import prediction
    prediction.wait_compiles()


class Row(NamedTuple):
    name: str
    jax_us: float           # median µs/step, pure JAX
    fn_us: float            # tapejax.function
    fn_ratio: float
    fn_min_ratio: float     # ratio of the fastest rounds
    eager_us: Optional[float]
    eager_ratio: Optional[float]
    eager_min_ratio: Optional[float]
    fn_target: float
    eager_target: float


def compare(name, make_tj, make_jax, args_tj, args_jax, steps, rounds, target, eager_target, make_eager=None):
    """Rounds alternate jax.jit, tapejax.function, tapejax eager (when ``make_eager``)."""
    steps_by = {"jax": make_jax(), "fn": make_tj()}
    args_by = {"jax": args_jax, "fn": args_tj}
    if make_eager is not None:
        steps_by["eager"], args_by["eager"] = make_eager(), args_tj
    for _ in range(3):                       # compile and warm up all
        for k, step in steps_by.items():
            _round(step, args_by[k], 5)
    _wait_compiles()                         # the eager step's predicted program (compiled in the background)
    for k, step in steps_by.items():
        _round(step, args_by[k], 5)
    times = {k: [] for k in steps_by}
    for _ in range(rounds):                  # alternate: load hits all alike
        for k, step in steps_by.items():
            times[k].append(_round(step, args_by[k], steps))
    med = {k: statistics.median(v) for k, v in times.items()}
    eager = "eager" in med
    return Row(name, med["jax"], med["fn"], med["fn"] / med["jax"], min(times["fn"]) / min(times["jax"]),
               med["eager"] if eager else None, med["eager"] / med["jax"] if eager else None,
               min(times["eager"]) / min(times["jax"]) if eager else None, target, eager_target)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    p.add_argument("--no-eager", action="store_true", help="leave out the eager tapejax column")
    p.add_argument("--only", default="", help="comma-separated substrings: run only the matching rows")
    p.add_argument("--timer", choices=("wall", "thread"), default="wall",
                   help="wall time (default) or this thread's CPU time (steadier on a loaded machine)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 15, 3 with --quick)")
    p.add_argument("--wide", action="store_true",
                   help="add the batch-1024, 4096-wide MLP row (default where the backend is not the CPU)")
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 15)
    TIMER[0] = time.thread_time if args.timer == "thread" else time.perf_counter
    eager = not args.no_eager
    rng = np.random.RandomState(0)
    rows = []
    only = [o.strip().lower() for o in args.only.split(",") if o.strip()]

    def add(name, make_tj, make_jax, args_tj, args_jax, steps, eager_target):
        if only and not any(o in name.lower() for o in only):
            return
        rows.append(compare(name, lambda: make_tj(True), make_jax, args_tj, args_jax, steps, rounds, 1.05,
                            eager_target, (lambda: make_tj(False)) if eager else None))

    x = rng.randn(128, 784).astype("float32")
    y = rng.randint(0, 10, size=128).astype("int32")
    add("MLP 784-512-512-10 b128 Adam",
        lambda c: tapejax_mlp([784, 512, 512, 10], tf.keras.optimizers.Adam(1e-3), "xent", c),
        lambda: jax_mlp([784, 512, 512, 10], optax.adam(1e-3, eps=1e-7), "xent"),
        (tf.constant(x), tf.constant(y)), (jnp.asarray(x), jnp.asarray(y)),
        steps=20 if args.quick else 50, eager_target=1.2)

    x = rng.randn(32, 32).astype("float32")
    y = rng.randn(32, 1).astype("float32")
    add("MLP 32-64-64-1 b32 SGD",
        lambda c: tapejax_mlp([32, 64, 64, 1], tf.keras.optimizers.SGD(0.01), "mse", c),
        lambda: jax_mlp([32, 64, 64, 1], optax.sgd(0.01), "mse"),
        (tf.constant(x), tf.constant(y)), (jnp.asarray(x), jnp.asarray(y)),
        steps=200 if args.quick else 500, eager_target=3.0)

    xl = rng.uniform(-1, 1, 200).astype("float32")
    yl = (3 * xl + 2 + 0.1 * rng.randn(200)).astype("float32")
    add("linreg seed 003, 500 steps",
        lambda c: tapejax_linreg(compiled=c), jax_linreg,
        (tf.constant(xl), tf.constant(yl)), (jnp.asarray(xl), jnp.asarray(yl)),
        steps=500, eager_target=float("nan"))

    xl = rng.uniform(-1, 1, 1000).astype("float32")
    yl = (3 * xl + 2 + 0.1 * rng.randn(1000)).astype("float32")
    add("linreg 1,000 points, 500 steps",
        lambda c: tapejax_linreg(compiled=c), jax_linreg,
        (tf.constant(xl), tf.constant(yl)), (jnp.asarray(xl), jnp.asarray(yl)),
        steps=500, eager_target=float("nan"))

    w0 = (rng.randn(256, 256) / 16).astype("float32")
    xn = rng.randn(1, 256).astype("float32")
    add("nested-tape 2nd derivative W256", lambda c: tapejax_nested(w0, c), lambda: jax_nested(w0),
        (tf.constant(xn),), (jnp.asarray(xn),), steps=20 if args.quick else 50, eager_target=4.0)

    if args.wide or jax.default_backend() != "cpu":
        x = rng.randn(1024, 784).astype("float32")
        y = rng.randint(0, 10, size=1024).astype("int32")
        add("MLP 784-4096-4096-10 b1024 Adam",
            lambda c: tapejax_mlp([784, 4096, 4096, 10], tf.keras.optimizers.Adam(1e-3), "xent", c),
            lambda: jax_mlp([784, 4096, 4096, 10], optax.adam(1e-3, eps=1e-7), "xent"),
            (tf.constant(x), tf.constant(y)), (jnp.asarray(x), jnp.asarray(y)),
            steps=10 if args.quick else 30, eager_target=1.2)

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
          f"medians of {rounds} alternating rounds ({args.timer} time); tapejax from {os.path.dirname(tf.__file__)}")
    print(f"| {'case':30s} | {'pure JAX us/step':>16s} | {'tapejax.function us/step':>24s} | {'ratio':>6s} "
          f"| target  | ratio of minima | {'eager us/step':>13s} | {'ratio':>6s} | target  | ratio of minima |")
    print(f"|{'-' * 32}|{'-' * 18}|{'-' * 26}|{'-' * 8}|---------|-----------------|{'-' * 15}|{'-' * 8}"
          f"|---------|-----------------|")
    for r in rows:
        line = (f"| {r.name:30s} | {r.jax_us:16.1f} | {r.fn_us:24.1f} | {r.fn_ratio:6.2f} | <= {r.fn_target:.2f} "
                f"| {r.fn_min_ratio:15.2f} |")
        if r.eager_us is not None:
            tgt = "   -   " if r.eager_target != r.eager_target else f"<= {r.eager_target:.2f}"
            line += (f" {r.eager_us:13.1f} | {r.eager_ratio:6.2f} | {tgt} | {r.eager_min_ratio:15.2f} |")
        else:
            line += f" {'-':>13s} | {'-':>6s} |    -    | {'-':>15s} |"
        print(line)
    return rows


if __name__ == "__main__":
    main()
