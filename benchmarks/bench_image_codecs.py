"""Image files through tf.data: tapejax (Pillow, per element on the host) against real tf.data,
in the same process.

Run:  python benchmarks/bench_image_codecs.py [--quick]

Data: 256 PNGs (and the same images as JPEGs, quality 90) of 96 x 128 x 3 noise-and-gradient
pixels in a temporary folder, with int labels.

* pipeline: ``from_tensor_slices((paths, labels)).map(read_file -> decode -> resize [64, 64] /
  255).batch(32)``, one pass per round, tapejax and TF alternating; images per second, median
  over rounds, and the ratio tapejax / TF (higher is better).  TF's map runs single-threaded
  here (no ``num_parallel_calls``) as tapejax's host functions do.  tapejax keeps the decoded
  pixels and the labels NumPy (no transfer per image); the resize runs per image with its own
  program, the ``/ 255`` once per batch (``tapejax/data/hostvalues.py``); the decode and the
  resize are most of the time.
* decode: one decode of one PNG / JPEG, eagerly, median over calls (microseconds).
"""
import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import tapejax as tf  # noqa: E402

N, H, W = 256, 96, 128


def folder():
    from PIL import Image
    rng = np.random.default_rng(0)
    d = tempfile.mkdtemp(prefix="bench-images-")
    pngs, jpgs = [], []
    ramp = np.linspace(0, 200, W, dtype=np.float32)[None, :, None]
    for i in range(N):
        img = np.clip(ramp + rng.normal(0, 20, (H, W, 3)), 0, 255).astype(np.uint8)
        pngs.append(os.path.join(d, f"{i}.png"))
        jpgs.append(os.path.join(d, f"{i}.jpg"))
        Image.fromarray(img).save(pngs[-1])
        Image.fromarray(img).save(jpgs[-1], quality=90)
    return pngs, jpgs, (np.arange(N) % 10).astype(np.int32)


def pipeline(lib, paths, labels, decode):
    def load(p, y):
        image = decode(lib)(lib.io.read_file(p), channels=3)
        return lib.image.resize(image, [64, 64]) / 255.0, y
    return lib.data.Dataset.from_tensor_slices((paths, labels)).map(load).batch(32)


def rate(ds):
    t = time.perf_counter()
    n = 0
    for x, _ in ds:
        n += int(x.shape[0])
    np.asarray(x)
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    import tensorflow as real
    rounds = 3 if args.quick else 7
    pngs, jpgs, labels = folder()
    print(f"{'pipeline':<10} {'tapejax img/s':>14} {'TF img/s':>10} {'ratio':>7}")
    for kind, paths, decode in (("png", pngs, lambda m: m.io.decode_png), ("jpeg", jpgs, lambda m: m.io.decode_jpeg)):
        ours, theirs = pipeline(tf, paths, labels, decode), pipeline(real, paths, labels, decode)
        a, b = [], []
        for _ in range(rounds):
            a.append(rate(ours))
            b.append(rate(theirs))
        print(f"{kind:<10} {statistics.median(a):>14.0f} {statistics.median(b):>10.0f} "
              f"{statistics.median(a) / statistics.median(b):>7.2f}")
    print(f"\n{'decode':<10} {'tapejax us':>14} {'TF us':>10} {'ratio':>7}")
    for kind, path, fn in (("png", pngs[0], "decode_png"), ("jpeg", jpgs[0], "decode_jpeg")):
        with open(path, "rb") as f:
            data = f.read()
        times = {}
        for name, lib in (("tapejax", tf), ("tf", real)):
            op = getattr(lib.io, fn)
            ts = []
            for _ in range(50 if args.quick else 200):
                t = time.perf_counter()
                np.asarray(op(data, channels=3))
                ts.append(time.perf_counter() - t)
            times[name] = statistics.median(ts) * 1e6
        print(f"{kind:<10} {times['tapejax']:>14.0f} {times['tf']:>10.0f} {times['tf'] / times['tapejax']:>7.2f}")


if __name__ == "__main__":
    main()
