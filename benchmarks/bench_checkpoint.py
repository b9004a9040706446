"""Checkpoints: tapejax.train.Checkpoint (orbax) vs TF's tf.train.Checkpoint, in the same process.

Run:  python benchmarks/bench_checkpoint.py [--rounds N] [--async-rounds N] [--steps N]

The state is an MLP 784-512-512-10 with its Keras-2 Adam state after one step
(Variables, the m and v slots, counters and hyperparameters: 2.0M floats, 8 MB)
in each library.  Rounds alternate between the two, so load from other
processes hits both alike; the table gives medians (and the fastest round) of

* write:   ``Checkpoint.write(prefix)`` until the files are complete
* restore: ``Checkpoint.read(prefix)`` into the existing objects (values assigned)
* bytes:   the size of what one checkpoint puts on disk

(tapejax writes through orbax-checkpoint and TensorStore, which fsync every file
before the commit, so a committed checkpoint also survives a power loss; TF's
writer does not sync: about 3 ms of CPU and up to 15 ms of wall time of the
write for these 8 MB on the 2-core development VM.)

and the cost of an async save (``CheckpointOptions(enable_async=True)``) to
the training steps it overlaps with: per round, tapejax.function steps (batch
256) timed alone just before and just after the save, and the steps that start
while a save is written in the background (``save`` returns after copying the
values off the devices; the time of that call is reported too).  Two figures:
the median of the rounds' ratios (during / alone), and the ratio of the
medians of all steps during and all steps alone.  Target: a step during the
save <= 1.10x a step alone.  On a CPU-only machine the write's threads (run at
SCHED_IDLE, or nice 19) and the step share the same cores (and with anything else the machine
runs: the header gives the load average); on a GPU the step runs on the device
and the write on the host.
"""
import argparse
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402

import tapejax as tj  # noqa: E402

SIZES = [784, 512, 512, 10]


def _params(seed=0):
    rng = np.random.RandomState(seed)
    return [((rng.randn(a, b) / np.sqrt(a)).astype("float32"), np.zeros(b, "float32"))
            for a, b in zip(SIZES[:-1], SIZES[1:])]


def build(tf, legacy_adam):
    """Variables of an MLP and an Adam with slots (one step taken), in library ``tf``."""
    params = [(tf.Variable(w), tf.Variable(b)) for w, b in _params()]
    variables = [v for pair in params for v in pair]
    opt = legacy_adam(1e-3)
    rng = np.random.RandomState(1)
    x = tf.constant(rng.randn(256, 784).astype("float32"))
    y = tf.constant(rng.randint(0, 10, 256).astype("int32"))

    def step():
        with tf.GradientTape() as tape:
            h = x
            for i, (w, b) in enumerate(params):
                h = tf.matmul(h, w) + b
                if i < len(params) - 1:
                    h = tf.nn.relu(h)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    fn = tf.function(step)
    fn()
    return tf.train.Checkpoint(params=variables, optimizer=opt), fn


def _bytes(prefix):
    if os.path.isdir(prefix):
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(prefix) for f in fs)
    d, base = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith(base + "."))


def _time(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_io(libs, rounds, root):
    """Per round, each library writes then restores; the order of the libraries alternates."""
    results = {name: {"write": [], "restore": []} for name in libs}
    sizes = {}
    names = list(libs)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            ckpt = libs[name][0]
            prefix = os.path.join(root, f"{name}-{r}")
            results[name]["write"].append(_time(lambda: ckpt.write(prefix)))
            results[name]["restore"].append(_time(lambda: ckpt.read(prefix)))
            sizes[name] = _bytes(prefix)
    return results, sizes


class AsyncResult:
    def __init__(self):
        self.alone, self.during, self.ratios, self.blocking, self.commit = [], [], [], [], []


def bench_async(ckpt, step, rounds, root, steps=20):
    """Per round: steps alone (``steps`` before the save and ``steps`` after its commit), the
    steps that start while an async save is being written, save()'s blocking time and the time
    to the commit."""
    import tapejax as tf
    opts = tf.train.CheckpointOptions(enable_async=True)
    for _ in range(5):
        step().numpy()
    res = AsyncResult()
    for _ in range(rounds):
        before = [_time(lambda: step().numpy()) for _ in range(steps)]
        t0 = time.perf_counter()
        res.blocking.append(_time(lambda: ckpt.save(os.path.join(root, "async", "ckpt"), options=opts)))
        pending = ckpt._saver._pending
        during = []
        while pending is not None and pending.thread.is_alive():
            during.append(_time(lambda: step().numpy()))   # a step that started while the save was written
        ckpt.sync()
        res.commit.append(time.perf_counter() - t0)
        after = [_time(lambda: step().numpy()) for _ in range(steps)]
        if during:
            res.alone.extend(before + after)
            res.during.extend(during)
            res.ratios.append(statistics.median(during) / statistics.median(before + after))
    return res


def _header():
    import jax
    import orbax.checkpoint as ocp
    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv))
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(f"python {platform.python_version()}, jax {jax.__version__}, orbax-checkpoint {ocp.__version__}, "
          f"{os.cpu_count()} CPUs, nice {os.nice(0) if hasattr(os, 'nice') else '?'}, load average "
          f"{' '.join(f'{x:.2f}' for x in load)}, devices {jax.devices()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15, help="write/restore rounds")
    ap.add_argument("--async-rounds", type=int, default=21, help="async save rounds")
    ap.add_argument("--steps", type=int, default=20, help="steps timed alone before and after each async save")
    args = ap.parse_args()
    _header()
    libs = {"tapejax": build(tj, tj.keras.optimizers.legacy.Adam)}
    try:
        import tensorflow as tf
        libs["tf"] = build(tf, tf.keras.optimizers.legacy.Adam)
        print(f"tensorflow {tf.__version__}")
    except ImportError:
        print("TensorFlow is not installed: tapejax only")
    root = tempfile.mkdtemp(prefix="bench-ckpt-")
    try:
        io, sizes = bench_io(libs, args.rounds, root)
        print(f"MLP {'-'.join(map(str, SIZES))} + Adam state, {args.rounds} rounds, alternating "
              "(median / fastest, ms)")
        print(f"{'':10s}{'write':>18s}{'restore':>18s}{'bytes':>12s}")
        for name in libs:
            w, rd = io[name]["write"], io[name]["restore"]
            print(f"{name:10s}{statistics.median(w) * 1e3:9.1f} /{min(w) * 1e3:7.1f}"
                  f"{statistics.median(rd) * 1e3:10.1f} /{min(rd) * 1e3:7.1f}{sizes[name]:12d}")
        if "tf" in libs:
            for k in ("write", "restore"):
                print(f"ratio tapejax / tf {k}: {statistics.median(io['tapejax'][k]) / statistics.median(io['tf'][k]):.2f}x"
                      f" (fastest {min(io['tapejax'][k]) / min(io['tf'][k]):.2f}x)")
        r = bench_async(*libs["tapejax"], rounds=args.async_rounds, root=root, steps=args.steps)
        print(f"async save ({args.async_rounds} rounds): save() blocks {statistics.median(r.blocking) * 1e3:.1f} ms "
              f"(median), committed after {statistics.median(r.commit) * 1e3:.1f} ms")
        if not r.ratios:
            print("no step started while a save was written")
            return
        q = statistics.quantiles(r.ratios, n=4) if len(r.ratios) > 1 else [r.ratios[0]] * 3
        print(f"training step alone {statistics.median(r.alone) * 1e3:.2f} ms ({len(r.alone)} steps), during "
              f"the save {statistics.median(r.during) * 1e3:.2f} ms ({len(r.during)} steps)")
        print(f"step during / alone: median of {len(r.ratios)} rounds' ratios {statistics.median(r.ratios):.3f}x "
              f"(quartiles {q[0]:.3f}-{q[2]:.3f}); ratio of medians "
              f"{statistics.median(r.during) / statistics.median(r.alone):.3f}x; target <= 1.10x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
