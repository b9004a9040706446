"""tf.signal: tapejax vs TensorFlow (eager) and vs the same computation in pure JAX under
``jax.jit``, in one process.

Run:  python benchmarks/bench_signal.py [--quick]

Rows: a log-mel spectrogram (``stft`` of 16 signals x 16000 samples, frames of 400 every 160,
``fft_length`` 512, ``|.|``, a 40-band mel matrix, ``log``), and a training step of a log-mel
classifier over it (a tape, the gradients of a learnable pre-emphasis and a dense layer).
Columns: median ms per call of TF, tapejax, and ``jax.jit`` of the pure JAX function, with the
ratios tapejax / TF and tapejax / jit (the median over rounds of each round's ratio).
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import tapejax as tj  # noqa: E402


def _sync(x):
    for v in jax.tree_util.tree_leaves(x, is_leaf=lambda v: hasattr(v, "numpy")):
        np.asarray(v.numpy() if hasattr(v, "numpy") else v)


def _time(fn, n):
    _sync(fn())
    t = time.perf_counter()
    for _ in range(n):
        _sync(fn())
    return (time.perf_counter() - t) / n * 1e3


R = np.random.default_rng(0)
AUDIO = R.normal(size=(16, 16000)).astype(np.float32)
LABELS = R.integers(0, 4, 16).astype(np.int32)
W0 = R.normal(scale=0.1, size=(40, 4)).astype(np.float32)


def _program(tf):
    mel = tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 8000.0)
    x, y = tf.constant(AUDIO), tf.constant(LABELS)
    pre, w = tf.Variable(0.9), tf.Variable(W0)

    def logmel(sig):
        spec = tf.abs(tf.signal.stft(sig, 400, 160, fft_length=512))
        return tf.math.log(tf.tensordot(spec, mel, 1) + 1e-6)

    def step():
        with tf.GradientTape() as t:
            feats = tf.reduce_mean(logmel(x[:, 1:] - pre * x[:, :-1]), axis=1)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(feats, w)))
        return t.gradient(loss, [pre, w])

    return {"log-mel 16 x 16000": lambda: logmel(x), "train step (tape)": step}


def _jax_program():
    mel = tj.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 8000.0).numpy()
    window = tj.signal.hann_window(400).numpy()
    x, y, w0 = jnp.asarray(AUDIO), jnp.asarray(LABELS), jnp.asarray(W0)
    idx = np.arange(1 + (x.shape[1] - 1 - 400) // 160)[:, None] * 160 + np.arange(400)[None, :]
    idx0 = np.arange(1 + (x.shape[1] - 400) // 160)[:, None] * 160 + np.arange(400)[None, :]

    def logmel(sig, ix):
        spec = jnp.abs(jnp.fft.rfft(sig[:, ix] * window, n=512))
        return jnp.log(spec @ mel + 1e-6)

    def loss(pre, w):
        feats = jnp.mean(logmel(x[:, 1:] - pre * x[:, :-1], idx), axis=1)
        logp = jax.nn.log_softmax(feats @ w)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    jit_logmel = jax.jit(lambda s: logmel(s, idx0))
    jit_step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    pre = jnp.asarray(0.9)
    return {"log-mel 16 x 16000": lambda: jit_logmel(x), "train step (tape)": lambda: jit_step(pre, w0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (5, 3) if args.quick else (20, 5)
    import tensorflow as tf
    progs = {"TF": _program(tf), "tapejax": _program(tj), "jit": _jax_program()}
    print(f"{'case':22} {'TF ms':>8} {'tapejax ms':>11} {'jit ms':>8} {'tj/TF':>7} {'tj/jit':>7}")
    for case in progs["TF"]:
        t = {k: [] for k in progs}
        for _ in range(rounds):
            for k in progs:
                t[k].append(_time(progs[k][case], n))
        r_tf = statistics.median(a / b for a, b in zip(t["tapejax"], t["TF"]))
        r_jit = statistics.median(a / b for a, b in zip(t["tapejax"], t["jit"]))
        med = {k: statistics.median(v) for k, v in t.items()}
        print(f"{case:22} {med['TF']:8.2f} {med['tapejax']:11.2f} {med['jit']:8.2f} {r_tf:7.2f} {r_jit:7.2f}")


if __name__ == "__main__":
    main()
