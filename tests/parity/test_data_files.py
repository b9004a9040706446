"""tapejax.data's file-backed datasets and resampling against real tf.data: ``save`` / ``load``
(tapejax writes its own format; element values, structure, cardinality, compression rules,
shards and ``reader_func``, errors), ``snapshot`` (first complete pass writes, later passes
read; a pass stopped early writes nothing), ``list_files`` (order, shuffling, errors; names as
bytes), ``rejection_resample`` (structure, cardinality, class histogram of a long run against
``target_dist``), ``interleave(num_parallel_calls)`` (TF's order), ``fingerprint``; and two
programs: a model trained on a saved-and-loaded dataset, and a snapshot'ed pipeline over two
epochs.  Each case writes under its own temporary directory."""
import os

import numpy as np

from .data_helpers import L, card, spec, tmp
from .harness import parity, raises


def first(ds):
    """The first element, read (errors raised at iteration come out here)."""
    return next(iter(ds.as_numpy_iterator()))


# -- save / load -------------------------------------------------------------------------

@parity
def test_save_load_structure(tf):
    D = tf.data.Dataset
    d = tmp()
    ds = D.from_tensor_slices(({"a": np.arange(6, dtype=np.float32).reshape(3, 2)}, [1, 2, 3])).map(
        lambda x, y: (x, y * 2))
    returned = ds.save(os.path.join(d, "s"))
    back = D.load(os.path.join(d, "s"))
    rows = [(r[0]["a"].tolist(), int(r[1])) for r in back.as_numpy_iterator()]
    again = D.load(os.path.join(d, "s"), element_spec=ds.element_spec)
    return returned, rows, spec(back.element_spec), card(back), spec(again.element_spec), card(D.load(os.path.join(d, "s")))


@parity(x64=True)
def test_save_load_shards_and_reader(tf):
    D = tf.data.Dataset
    d = os.path.join(tmp(), "s")
    D.range(10).save(d, shard_func=lambda x: x % 3)
    one = D.load(d, reader_func=lambda shards: shards.interleave(lambda x: x, cycle_length=1))
    flat = D.load(d, reader_func=lambda shards: shards.flat_map(lambda x: x))
    return sorted(L(D.load(d))), card(D.load(d)), L(one), L(flat), card(flat)


@parity(x64=True)
def test_save_load_shapes_none_and_empty(tf):
    D = tf.data.Dataset
    d = tmp()
    D.range(1, 4).map(lambda x: tf.range(x)).save(os.path.join(d, "v"))
    D.range(0).save(os.path.join(d, "e"))
    D.range(3).save(os.path.join(d, "o"))
    D.range(5, 7).save(os.path.join(d, "o"))   # a second save to the same path replaces the first
    v, e = D.load(os.path.join(d, "v")), D.load(os.path.join(d, "e"))
    return (L(v), spec(v.element_spec), L(e), card(e), spec(e.element_spec), L(D.load(os.path.join(d, "o"))),
            card(D.range(3).filter(lambda x: x > 0).save(os.path.join(d, "f")) or D.load(os.path.join(d, "f"))))


@parity(x64=True)
def test_save_load_compression(tf):
    D = tf.data.Dataset
    d = tmp()
    out = []
    for written, read in (("GZIP", "GZIP"), ("GZIP", None), (None, "GZIP"), ("SNAPPY", None), ("SNAPPY", "SNAPPY"),
                          ("gzip", None), ("NONE", None), ("", None)):
        p = os.path.join(d, f"c{len(out)}")
        D.range(4).save(p, compression=written)
        loaded = D.load(p, compression=read)
        out.append((card(loaded), raises(L, loaded)))
    return out


@parity(x64=True)
def test_save_load_errors(tf):
    D = tf.data.Dataset
    d = tmp()
    D.range(3).save(os.path.join(d, "s"))
    missing = os.path.join(d, "missing")
    wrong = D.load(os.path.join(d, "s"), element_spec=tf.TensorSpec([], tf.int32))
    return (raises(D.load, missing), raises(D.load, missing, element_spec=tf.TensorSpec([], tf.int64)), raises(first, wrong), spec(wrong.element_spec),
            raises(D.range(3).save, 5), raises(D.range(3).save, os.path.join(d, "x"), shard_func=5),
            raises(D.range(3).save, os.path.join(d, "y"), shard_func=lambda x: 1.0),
            raises(D.range(3).save, os.path.join(d, "z"), checkpoint_args=5),
            raises(D.load, os.path.join(d, "s"), compression=5), raises(D.load, os.path.join(d, "s"), reader_func=5),
            tf.data.experimental.save is not None, tf.data.experimental.load is not None)


@parity(x64=True)
def test_experimental_save_load(tf):
    d = os.path.join(tmp(), "s")
    tf.data.experimental.save(tf.data.Dataset.range(4), d)
    back = tf.data.experimental.load(d)
    return L(back), card(back), spec(back.element_spec)


# -- snapshot ----------------------------------------------------------------------------

@parity(x64=True)
def test_snapshot_writes_then_reads(tf):
    D = tf.data.Dataset
    d = tmp()
    calls = []

    def f(x):
        calls.append(int(x))
        return x * 10
    ds = D.range(6).map(lambda x: tf.py_function(f, [x], tf.int64)).snapshot(d)
    it = iter(ds)
    head = [int(next(it)) for _ in range(3)]   # a pass stopped early: nothing kept
    del it
    calls.clear()
    second = L(ds)
    n_second = len(calls)
    calls.clear()
    third = L(ds)
    shuffled = D.range(8).shuffle(8, seed=1).snapshot(os.path.join(d, "sh"))
    plain = D.range(4).snapshot(os.path.join(d, "r"))
    first_pass = L(plain)
    return (head, second, n_second, third, len(calls), L(shuffled) == L(shuffled), sorted(L(shuffled)),
            first_pass, L(D.range(4).snapshot(os.path.join(d, "r"))), card(ds),
            card(D.range(3).repeat().snapshot(d)), card(D.range(3).filter(lambda x: x > 0).snapshot(d)))


@parity(x64=True)
def test_snapshot_errors(tf):
    D = tf.data.Dataset
    r = D.range(3)
    d = tmp()
    return (raises(r.snapshot, 5), raises(r.snapshot, d, compression=5), raises(r.snapshot, d, reader_func=5),
            raises(r.snapshot, d, shard_func=5))


# -- list_files --------------------------------------------------------------------------

def _files():
    d = tmp()
    for name in ("b.txt", "a.txt", "c.txt", "d.csv"):
        open(os.path.join(d, name), "w").close()
    return d


def _names(ds, d):
    return [os.path.relpath(f.decode(), d) for f in ds.as_numpy_iterator()]


@parity
def test_list_files(tf):
    D = tf.data.Dataset
    d = _files()
    plain = D.list_files(os.path.join(d, "*.txt"), shuffle=False)
    several = D.list_files([os.path.join(d, "c*"), os.path.join(d, "*.csv"), os.path.join(d, "a.txt")], shuffle=False)
    shuffled = D.list_files(os.path.join(d, "*"), seed=3)
    one = next(iter(plain))
    return (_names(plain, d), spec(plain.element_spec), card(plain), _names(several, d),
            sorted(_names(shuffled, d)), card(shuffled), isinstance(first(plain), bytes),
            os.path.relpath(bytes(one.numpy() if hasattr(one, "numpy") else one).decode(), d),
            _names(D.list_files(os.path.join(d, "[ab].txt"), shuffle=False), d),
            _names(D.list_files(os.path.join(d, "?.t*"), shuffle=False), d),
            _names(D.list_files([os.path.join(d, "a.txt")] * 2, shuffle=False), d),
            _names(D.list_files(os.path.join(d, "*.txt"), shuffle=False).batch(2).unbatch(), d),
            raises(D.list_files, os.path.join(d, "*.zzz")), raises(D.list_files, []), raises(D.list_files, 5),
            raises(D.list_files, os.path.join(d, "*"), seed="x"))


# -- rejection_resample ------------------------------------------------------------------

LABELS = np.random.default_rng(0).choice(3, size=6000, p=[0.7, 0.2, 0.1]).astype(np.int32)


def _histogram(ds):
    classes = [int(c) for c, _ in ds.as_numpy_iterator()]
    return np.bincount(classes, minlength=3) / len(classes), len(classes)


@parity
def test_rejection_resample_distribution(tf):
    """A long run's class histogram is within 0.03 of target_dist (estimated and given initial_dist)."""
    D = tf.data.Dataset
    ds = D.from_tensor_slices((np.arange(len(LABELS), dtype=np.float32), LABELS))
    target = np.array([0.2, 0.3, 0.5], np.float32)
    est, n_est = _histogram(ds.rejection_resample(lambda x, y: y, target, seed=1))
    given, n_given = _histogram(ds.rejection_resample(lambda x, y: y, target, initial_dist=[0.7, 0.2, 0.1], seed=1))
    pairs_ok = all(int(c) == int(e[1]) for c, e in ds.rejection_resample(lambda x, y: y, target, seed=2)
                   .take(50).as_numpy_iterator())
    return (bool(np.abs(est - target).max() < 0.03), bool(np.abs(given - target).max() < 0.03),
            bool(1000 < n_est < 6000), bool(1000 < n_given < 6000), pairs_ok)


@parity(x64=True)
def test_rejection_resample_structure(tf):
    D = tf.data.Dataset
    ys = D.from_tensor_slices(LABELS[:300])
    pairs = D.from_tensor_slices((np.arange(300, dtype=np.float32), LABELS[:300]))
    keep = ys.rejection_resample(lambda y: y, [0.7, 0.2, 0.1], initial_dist=[0.7, 0.2, 0.1])
    only = ys.rejection_resample(lambda y: y, [0.0, 0.0, 1.0], initial_dist=[0.7, 0.2, 0.1], seed=3)
    dicts = D.from_tensor_slices({"y": LABELS[:300]}).rejection_resample(lambda d: d["y"], [0.5, 0.3, 0.2], seed=1)
    seeded = pairs.rejection_resample(lambda x, y: y, [1 / 3] * 3, seed=5)
    wide = ys.rejection_resample(lambda y: tf.cast(y, tf.int64), [0.5, 0.5, 0.0])
    return (spec(pairs.rejection_resample(lambda x, y: y, [0.5, 0.3, 0.2]).element_spec),
            card(pairs.rejection_resample(lambda x, y: y, [0.5, 0.3, 0.2])),
            spec(keep.element_spec), card(keep), L(keep)[:5], spec(only.element_spec), card(only),
            sorted(set(int(c) for c, _ in only.as_numpy_iterator())), spec(dicts.element_spec),
            spec(wide.element_spec), L(seeded) == L(seeded),
            tf.data.experimental.rejection_resample is not None)


@parity
def test_rejection_resample_errors(tf):
    D = tf.data.Dataset
    ys = D.from_tensor_slices(LABELS[:100])
    return (raises(ys.rejection_resample, lambda y: tf.cast(y, tf.float32), [0.5, 0.5, 0.0]),
            raises(ys.rejection_resample, 5, [0.5, 0.5, 0.0]),
            raises(ys.rejection_resample, lambda y: y, [[0.5, 0.5, 0.0]]),
            raises(ys.rejection_resample, lambda y: y, [0.5, 0.5, 0.0], initial_dist=[0.5, 0.5]),
            raises(ys.rejection_resample, lambda y: y, ["a"]),
            raises(ys.rejection_resample, lambda y: y, [0.5, 0.5, 0.0], seed="x"),
            raises(L, ys.rejection_resample(lambda y: y + 5, [0.5, 0.5, 0.0])))


# -- interleave(num_parallel_calls), fingerprint ------------------------------------------

@parity(x64=True)
def test_interleave_parallel(tf):
    D = tf.data.Dataset
    f = lambda x: D.range(x * 10, x * 10 + x).map(lambda v: v * 2)   # noqa: E731
    src = D.range(1, 9)
    out = [L(src.interleave(f, cycle_length=c, block_length=b, num_parallel_calls=n))
           for c, b, n in ((2, 1, 2), (3, 2, 3), (4, 3, 2), (8, 1, tf.data.AUTOTUNE))]
    loose = L(src.interleave(f, cycle_length=4, num_parallel_calls=4, deterministic=False))
    opts = tf.data.Options()
    opts.deterministic = False
    optioned = L(src.interleave(f, cycle_length=3, num_parallel_calls=3).with_options(opts))
    exp = L(src.apply(tf.data.experimental.parallel_interleave(f, cycle_length=3, block_length=2)))
    bad = D.range(3).interleave(lambda x: D.range(x).map(lambda v: tf.debugging.check_numerics(
        tf.cast(1, tf.float32) / tf.cast(v - 1, tf.float32), "bad")), cycle_length=2, num_parallel_calls=2)
    return out, sorted(loose), sorted(optioned), exp, raises(L, bad)


@parity(x64=True)
def test_fingerprint(tf):
    D = tf.data.Dataset
    a = D.range(5).map(lambda x: x * 2).batch(2)
    b = D.range(5).map(lambda x: x * 2).batch(2)
    fp = a.fingerprint()
    return (fp.dtype.name, fp.shape.as_list() if hasattr(fp.shape, "as_list") else list(fp.shape),
            int(fp.numpy()) == int(b.fingerprint().numpy()),
            int(fp.numpy()) == int(D.range(6).map(lambda x: x * 2).batch(2).fingerprint().numpy()),
            int(fp.numpy()) == int(D.range(5).map(lambda x: x * 3).batch(2).fingerprint().numpy()),
            int(fp.numpy()) == int(D.range(5).map(lambda x: x * 2).batch(3).fingerprint().numpy()))


# -- programs ----------------------------------------------------------------------------

X = np.random.default_rng(1).normal(size=(64, 3)).astype(np.float32)
Y = (X @ np.array([1.5, -2.0, 0.5], np.float32) + 0.3).astype(np.float32)


def _train(tf, ds, epochs, after_epoch=lambda: None):
    w = tf.Variable(tf.zeros([3]))
    b = tf.Variable(0.0)
    losses = []
    for _ in range(epochs):
        for xb, yb in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.linalg.matvec(xb, w) + b - yb) ** 2)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            losses.append(float(loss))
        after_epoch()
    return w.numpy(), float(b.numpy()), losses


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_train_on_saved_dataset(tf):
    """Save (GZIP, 2 shards) the training set, load it back and train on it; the same numbers as
    training on the original."""
    D = tf.data.Dataset
    d = os.path.join(tmp(), "train")
    D.from_tensor_slices((X, Y)).save(d, compression="GZIP")
    loaded = D.load(d, compression="GZIP").batch(16)
    direct = D.from_tensor_slices((X, Y)).batch(16)
    w, b, losses = _train(tf, loaded, 3)
    w2, b2, _ = _train(tf, direct, 3)
    return w, b, losses, bool(np.allclose(w, w2)), card(D.load(d, compression="GZIP"))


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_snapshot_two_epochs(tf):
    """A preprocessing pipeline snapshot'ed: epoch 1 computes and writes, epoch 2 reads (its
    preprocessing does not run); the trained numbers match TF's."""
    D = tf.data.Dataset
    d = tmp()
    seen = []
    per_epoch = []

    def note(i):
        seen.append(int(i))
        return i
    ds = (D.from_tensor_slices((np.arange(64), X, Y))
          .map(lambda i, x, y: (tf.py_function(note, [i], i.dtype), x * 2.0, y))
          .snapshot(d).map(lambda i, x, y: (x, y)).batch(16))
    start = len(seen)   # (tapejax runs a map function once when map() is called: README)
    w, b, losses = _train(tf, ds, 2, lambda: per_epoch.append(len(seen)))
    return w, b, losses, per_epoch[1] - per_epoch[0], sorted(set(seen[start:])) == list(range(64))
