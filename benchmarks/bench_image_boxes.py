"""tf.image's box ops: tapejax vs TensorFlow (eager) and vs the same pure JAX function under
``jax.jit``, in one process.

Run:  python benchmarks/bench_image_boxes.py [--quick]

Rows: ``non_max_suppression`` (1000 random boxes, 100 kept; tapejax reads the count to cut the
output, as TF's eager op returns its length), ``non_max_suppression_padded`` (a batch of 8 x 1000,
fixed shape), ``combined_non_max_suppression`` (8 images x 1000 boxes x 10 classes),
``crop_and_resize`` (8 x 64 x 64 x 16 features, 64 boxes to 7 x 7) and its value-and-gradient step
(a tape, d/d image and d/d boxes).  Columns: median ms per call of TF, tapejax, and ``jax.jit`` of
tapejax's own kernel (the floor for the same algorithm), with the ratios tapejax / TF and
tapejax / jit (the median over rounds of each round's ratio).  The jit column's inputs are device
arrays made once, as tapejax's Tensors are.
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
from tapejax.ops import image_boxes, image_nms  # noqa: E402


def _sync(x):
    leaves = jax.tree_util.tree_leaves(x, is_leaf=lambda v: hasattr(v, "numpy"))
    for v in leaves:
        np.asarray(v.numpy() if hasattr(v, "numpy") else v)


def _time(fn, n):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        _sync(fn())
    return (time.perf_counter() - t) / n * 1e3


def _cases(tf):
    r = np.random.default_rng(0)
    b = r.uniform(0, 1, (1000, 4)).astype(np.float32)
    s = r.uniform(0, 1, 1000).astype(np.float32)
    bb, sb = r.uniform(0, 1, (8, 1000, 4)).astype(np.float32), r.uniform(0, 1, (8, 1000)).astype(np.float32)
    cb, cs = r.uniform(0, 1, (8, 1000, 1, 4)).astype(np.float32), r.uniform(0, 1, (8, 1000, 10)).astype(np.float32)
    img = r.uniform(0, 1, (8, 64, 64, 16)).astype(np.float32)
    rois = np.sort(r.uniform(0, 1, (64, 2, 2)), axis=1).transpose(0, 2, 1).reshape(64, 4)[:, [0, 2, 1, 3]]
    rois = rois.astype(np.float32)
    ind = r.integers(0, 8, 64).astype(np.int32)
    tb, ts, tbb, tsb, tcb, tcs, timg, trois, tind = (tf.constant(v) for v in (b, s, bb, sb, cb, cs, img, rois, ind))
    b, s, bb, sb, cb, cs, img, rois, ind = (jnp.asarray(v) for v in (b, s, bb, sb, cb, cs, img, rois, ind))

    def step():
        with tf.GradientTape() as t:
            t.watch([timg, trois])
            y = tf.reduce_sum(tf.image.crop_and_resize(timg, trois, tind, [7, 7]) ** 2)
        return t.gradient(y, [timg, trois])

    jit_crop = jax.jit(lambda i, b, n: image_boxes._crop_and_resize(i, b, n, crop_size=(7, 7), method="bilinear",
                                                                    extrapolation_value=0.0))
    jit_step = jax.jit(jax.grad(lambda i, b: jnp.sum(jit_crop(i, b, ind) ** 2), argnums=(0, 1)))
    jit_nms = jax.jit(lambda b, s: image_nms._nms(b, s, k=100, iou_threshold=0.5, score_threshold=float("-inf"),
                                                  soft_nms_sigma=0.0))
    jit_pad = jax.jit(lambda b, s: image_nms._padded(b, s, k=100, iou_threshold=0.5, score_threshold=float("-inf"),
                                                     tile_size=512))
    jit_comb = jax.jit(lambda b, s: image_nms._combined(b, s, per_class=20, per_batch=100, total=100,
                                                        pad_per_class=False, clip=True, iou_threshold=0.5,
                                                        score_threshold=float("-inf")))
    return {
        "non_max_suppression 1000 -> 100": (lambda: tf.image.non_max_suppression(tb, ts, 100, 0.5),
                                            lambda: jit_nms(b, s)),
        "nms_padded 8 x 1000 -> 100": (lambda: tf.image.non_max_suppression_padded(
            tbb, tsb, 100, 0.5, pad_to_max_output_size=True), lambda: jit_pad(bb, sb)),
        "combined_nms 8 x 1000 x 10": (lambda: tf.image.combined_non_max_suppression(tcb, tcs, 20, 100),
                                       lambda: jit_comb(cb, cs)),
        "crop_and_resize 64 boxes 7x7": (lambda: tf.image.crop_and_resize(timg, trois, tind, [7, 7]),
                                         lambda: jit_crop(img, rois, ind)),
        "crop_and_resize value+grad": (step, lambda: jit_step(img, rois)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds, n = (3, 3) if args.quick else (5, 10)
    import tensorflow as tf
    tfc, tjc = _cases(tf), _cases(tj)
    print(f"{'case':34s} {'TF ms':>8s} {'tapejax':>8s} {'jit':>8s} {'tj/TF':>7s} {'tj/jit':>7s}")
    for name in tjc:
        rows = []
        for _ in range(rounds):
            a, b, c = _time(tfc[name][0], n), _time(tjc[name][0], n), _time(tjc[name][1], n)
            rows.append((a, b, c))
        med = [statistics.median(r[k] for r in rows) for k in range(3)]
        r1 = statistics.median(r[1] / r[0] for r in rows)
        r2 = statistics.median(r[1] / r[2] for r in rows)
        print(f"{name:34s} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.2f} {r1:7.2f} {r2:7.2f}")


if __name__ == "__main__":
    main()
