"""TFRecord reading and Example parsing: tapejax.data against real tf.data, in the same process.

Run:  python benchmarks/bench_tfrecord.py [--quick]

Data: 4,096 ``tf.train.Example``s (a 32x32x3 uint8 image as raw bytes, an int64 label) in one
TFRecord file, plain and GZIP.  Per pipeline, one pass per round, tapejax and TF alternating;
records per second, median over rounds, and the ratio tapejax / TF:

* ``TFRecordDataset(f)``: the records alone (framing and CRC checks);
* ``TFRecordDataset(f, "GZIP")``: the same, inflated;
* ``.map(parse_single_example + decode_raw).batch(64)``: per-record parsing (tapejax runs the
  map eagerly per element on the host, string inputs; the parsed features stay NumPy and the
  ``reshape`` is staged and run once per batch: ``tapejax/data/hostvalues.py``);
* ``.batch(64).map(parse_example + decode_raw)``: batched parsing (the faster form in both).
"""
import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import tapejax as tf  # noqa: E402

N, H, W, C, BATCH = 4096, 32, 32, 3, 64


def write(real_tf, d):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (N, H, W, C), dtype=np.uint8)
    labels = rng.integers(0, 10, N)
    paths = {"": os.path.join(d, "data.tfrecord"), "GZIP": os.path.join(d, "data.tfrecord.gz")}
    for comp, path in paths.items():
        with tf.io.TFRecordWriter(path, comp) as w:
            for img, y in zip(images, labels):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)]))})).SerializeToString())
    return paths


def pipelines(lib, paths):
    string = "string"
    F = {"image": lib.io.FixedLenFeature([], string), "label": lib.io.FixedLenFeature([], lib.int64)}

    def one(r):
        e = lib.io.parse_single_example(r, F)
        return lib.reshape(lib.io.decode_raw(e["image"], lib.uint8), [H, W, C]), e["label"]

    def many(r):
        e = lib.io.parse_example(r, F)
        return lib.reshape(lib.io.decode_raw(e["image"], lib.uint8), [-1, H, W, C]), e["label"]
    T = lib.data.TFRecordDataset
    return {"TFRecordDataset(f)": (T(paths[""]), 1),
            "TFRecordDataset(f, 'GZIP')": (T(paths["GZIP"], "GZIP"), 1),
            "map(parse_single_example).batch(64)": (T(paths[""]).map(one).batch(BATCH), BATCH),
            "batch(64).map(parse_example)": (T(paths[""]).batch(BATCH).map(many), BATCH)}


def rate(ds, per):
    t = time.perf_counter()
    n = sum(1 for _ in ds)
    return n * per / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    rounds = 3 if ap.parse_args().quick else 7
    import tensorflow as real_tf
    d = tempfile.mkdtemp(prefix="bench-tfrecord-")
    paths = write(real_tf, d)
    ours, theirs = pipelines(tf, paths), pipelines(real_tf, paths)
    print(f"{N} Examples ({H}x{W}x{C} uint8 image bytes, int64 label), {os.cpu_count()} CPUs; {rounds} rounds")
    print()
    print("| pipeline | tapejax.data records/s | tf.data records/s | ratio of medians |")
    print("| --- | --- | --- | --- |")
    for name in ours:
        (a_ds, a_per), (b_ds, b_per) = ours[name], theirs[name]
        rate(a_ds, a_per), rate(b_ds, b_per)   # warm-up (specs, traces, threads)
        a, b = [], []
        for _ in range(rounds):
            a.append(rate(a_ds, a_per))
            b.append(rate(b_ds, b_per))
        print(f"| {name} | {statistics.median(a):.0f} | {statistics.median(b):.0f} | "
              f"{statistics.median(a) / statistics.median(b):.2f}x |")


if __name__ == "__main__":
    main()
