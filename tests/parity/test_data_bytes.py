"""String components keep every byte, against real tf.data: binary records that end in zero
bytes (``FixedLengthRecordDataset``, with ``header_bytes`` / ``footer_bytes``, GZIP, parallel
reads), text lines that end in ``\\x00``, and ``from_list`` strings, through iteration,
``batch`` / ``padded_batch`` / ``unbatch`` / ``rebatch``, ``shuffle`` (the multiset: tapejax's
order is grain's), ``cache``, ``save`` / ``load``, ``snapshot``, ``zip`` / ``enumerate`` /
``unique`` / ``concatenate``, and an ``interleave`` reading the files ``list_files`` names; and a
program: a tiny CIFAR-10-style binary file (label byte + pixel bytes) decoded on the host and a
model trained on it.  NumPy's ``S`` values drop trailing NULs; these cases fail with them."""
import gzip
import os

import numpy as np

from .data_helpers import L, card, cifar_like_files, softmax_classifier, spec, tmp
from .harness import parity

#: records of 4 bytes, most ending in zeros (one all zeros), after a 3-byte header, before a
#: 2-byte footer.
RECORDS = [b"ab\x00\x00", b"\x00\x00\x00\x00", b"c\x00d\x00", b"efgh", b"\x01\x00\x00\x00", b"i\x00\x00j"]
HEADER, FOOTER = b"HDR", b"\x00\x00"
LINES = [b"ab\x00", b"\x00\x00", b"", b"x\x00y", b"z"]


def _record_files():
    d = tmp()
    plain = os.path.join(d, "r0.bin")
    with open(plain, "wb") as f:
        f.write(HEADER + b"".join(RECORDS) + FOOTER)
    second = os.path.join(d, "r1.bin")
    with open(second, "wb") as f:
        f.write(HEADER + b"".join(reversed(RECORDS)) + FOOTER)
    zipped = os.path.join(d, "r2.bin.gz")
    with gzip.open(zipped, "wb") as f:
        f.write(HEADER + b"".join(RECORDS[::2]) + FOOTER)
    return d, plain, second, zipped


def _records(tf, *names, **kw):
    return tf.data.FixedLengthRecordDataset(list(names), 4, header_bytes=3, footer_bytes=2, **kw)


def _as_bytes(x):
    """An element as the user gets it from iteration: TF's string tensor's value, tapejax's bytes."""
    return x.numpy() if hasattr(x, "numpy") else x


@parity
def test_fixed_length_records_ending_in_zeros(tf):
    _, plain, second, zipped = _record_files()
    ds = _records(tf, plain)
    it = [_as_bytes(x) for x in ds]
    return (L(ds), it, [type(x).__name__ for x in it], spec(ds.element_spec),
            L(_records(tf, zipped, compression_type="GZIP")),
            L(_records(tf, plain, second, num_parallel_reads=2)),
            L(tf.data.FixedLengthRecordDataset(plain, 5, header_bytes=4)),   # (the footer in the last record)
            L(ds.take(2).concatenate(ds.skip(4)).repeat(2)))


@parity
def test_records_batched_unbatched(tf):
    _, plain, _, _ = _record_files()
    ds = _records(tf, plain)
    batched = ds.batch(4)
    first = next(iter(batched.as_numpy_iterator()))
    return (L(batched), spec(batched.element_spec), str(first.dtype), [type(x).__name__ for x in first],
            L(ds.batch(4, drop_remainder=True)), spec(ds.batch(4, drop_remainder=True).element_spec),
            L(batched.unbatch()), L(ds.batch(2).batch(2)), L(ds.batch(2).batch(2).unbatch().unbatch()),
            L(ds.padded_batch(4)), L(ds.padded_batch(4, padding_values=b"\x00")),
            L(ds.batch(3).rebatch(2)), card(batched))


@parity(x64=True)
def test_records_zip_enumerate_unique(tf):
    _, plain, _, _ = _record_files()
    ds = _records(tf, plain)
    D = tf.data.Dataset
    doubled = ds.concatenate(ds)
    return (L(D.zip((ds, D.range(6)))), L(ds.enumerate(start=3)), L(doubled.unique()),
            L(D.zip((ds, ds.skip(1))).batch(2)),
            L(tf.data.experimental.from_list([b"a\x00", b"\x00", b"b"])),
            L(D.zip({"r": ds, "i": D.range(6)}).batch(3)))


@parity
def test_records_shuffled_with_seed(tf):
    """The multiset per epoch (tapejax's order is grain's, README), and the same order every
    epoch with ``reshuffle_each_iteration=False``."""
    _, plain, _, _ = _record_files()
    ds = _records(tf, plain)
    fixed = ds.shuffle(6, seed=7, reshuffle_each_iteration=False)
    streamed = ds.shuffle(3, seed=1).batch(2).unbatch()   # (a stream shuffle and batches of bytes)
    return (sorted(L(ds.shuffle(6, seed=3))), sorted(L(ds.repeat(2).shuffle(4, seed=5))),
            L(fixed) == L(fixed), sorted(L(fixed)), sorted(L(streamed)))


@parity(x64=True)
def test_records_cache_save_load_snapshot(tf):
    d, plain, _, _ = _record_files()
    ds = _records(tf, plain)
    D = tf.data.Dataset
    mem = ds.cache()
    on_disk = ds.cache(os.path.join(d, "cache"))
    first_pass = (L(mem), L(on_disk))
    ds.save(os.path.join(d, "saved"))
    ds.batch(4).save(os.path.join(d, "saved_batches"), compression="GZIP")
    D.zip((ds, D.range(6))).save(os.path.join(d, "saved_pairs"))
    ragged = ds.batch(4)   # (batches of 4 and 2: the part's shapes differ)
    ragged.save(os.path.join(d, "saved_ragged"))
    snap = ds.snapshot(os.path.join(d, "snap"))
    return (first_pass, L(mem), L(on_disk),
            L(D.load(os.path.join(d, "saved"))), spec(D.load(os.path.join(d, "saved")).element_spec),
            L(D.load(os.path.join(d, "saved_batches"), compression="GZIP")),
            L(D.load(os.path.join(d, "saved_batches"), compression="GZIP").unbatch()),
            L(D.load(os.path.join(d, "saved_pairs"))), L(D.load(os.path.join(d, "saved_ragged"))),
            L(snap), L(snap))


@parity
def test_interleave_reads_listed_files(tf):
    """``interleave`` functions receive the names ``list_files`` gives; the records they read
    keep their zeros."""
    d, _, _, _ = _record_files()
    files = tf.data.Dataset.list_files(os.path.join(d, "r[01].bin"), shuffle=False)
    recs = files.interleave(lambda f: tf.data.FixedLengthRecordDataset(f, 4, header_bytes=3, footer_bytes=2),
                            cycle_length=2, block_length=2)
    flat = files.flat_map(lambda f: tf.data.FixedLengthRecordDataset(f, 4, header_bytes=3, footer_bytes=2))
    return L(recs), L(flat), L(tf.data.FixedLengthRecordDataset(files, 4, header_bytes=3, footer_bytes=2).batch(5))


def _lines_file():
    d = tmp()
    p = os.path.join(d, "lines.txt")
    with open(p, "wb") as f:
        f.write(b"\n".join(LINES) + b"\r\n")
    g = os.path.join(d, "lines.txt.gz")
    with gzip.open(g, "wb") as f:
        f.write(b"\n".join(LINES))
    return d, p, g


@parity
def test_text_lines_ending_in_nul(tf):
    d, p, g = _lines_file()
    T = tf.data.TextLineDataset
    ds = T(p)
    ds.save(os.path.join(d, "saved"))
    return (L(ds), [_as_bytes(x) for x in ds], L(T(g, compression_type="GZIP")), L(ds.batch(2)),
            L(ds.batch(2).unbatch()), L(ds.unique()), L(ds.cache()),
            L(tf.data.Dataset.load(os.path.join(d, "saved"))), sorted(L(ds.shuffle(5, seed=2))))


# -- a program: CIFAR-10's binary format, tiny ------------------------------------------------

H = W = 4
C = 3
RECORD = 1 + H * W * C   # label byte, then the pixels channel-major (CIFAR-10's layout)


def _decode(records):
    """A batch of records (an object array of bytes) as (labels int32, images float32 NHWC)."""
    raw = np.frombuffer(b"".join(records), np.uint8).reshape(len(records), RECORD)
    labels = raw[:, 0].astype(np.int32)
    images = raw[:, 1:].reshape(-1, C, H, W).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return labels, images


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_cifar_like_binary_records(tf):
    """Records read from two files, batched, decoded on the host and fed to a softmax classifier
    (a ``tf.function`` step) trained for two epochs; evaluated after each epoch on a saved,
    loaded and cached copy."""
    names = cifar_like_files(C, H, W)
    d = tmp()
    train = tf.data.FixedLengthRecordDataset(names, RECORD).batch(8)
    tf.data.FixedLengthRecordDataset(names, RECORD).save(os.path.join(d, "eval"))
    evaluation = tf.data.Dataset.load(os.path.join(d, "eval")).cache().batch(16)
    w, b, step = softmax_classifier(tf, H * W * C)

    def accuracy():
        right = total = 0
        for recs in evaluation.as_numpy_iterator():
            y, x = _decode(recs)
            pred = np.argmax((tf.matmul(tf.reshape(tf.constant(x), [-1, H * W * C]), w) + b).numpy(), axis=1)
            right += int(np.sum(pred == y))
            total += len(y)
        return right / total

    losses, accs, pixel_sums = [], [], []
    for _ in range(2):
        for recs in train.as_numpy_iterator():
            y, x = _decode(recs)
            pixel_sums.append(float(x.sum()))
            losses.append(float(step(tf.constant(x), tf.constant(y))))
        accs.append(accuracy())
    return losses, accs, pixel_sums, w.numpy(), b.numpy()
