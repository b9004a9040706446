"""tapejax.data's file-backed datasets where TF is not the oracle: string components (host
bytes), the on-disk format's guarantees (atomic saves, refusals), snapshot's runs, and
``interleave(num_parallel_calls)`` really running inner datasets at once (counted, not timed).
TF parity of the same features: tests/parity/test_data_files.py."""
import gc
import json
import os
import threading
import time

import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.dtypes import x64_enabled
from tapejax.core.errors import DataLossError, InvalidArgumentError, NotFoundError

D = tf.data.Dataset


def _files(tmp_path, n=3):
    for k in range(n):
        np.save(tmp_path / f"part{k}.npy", np.arange(k * 10, k * 10 + 3, dtype=np.float32))
    return str(tmp_path / "part*.npy")


# -- string components -----------------------------------------------------------------

def test_list_files_feeds_interleave_with_bytes(tmp_path):
    files = D.list_files(_files(tmp_path), shuffle=False)
    names = list(files)
    assert all(type(f) is bytes for f in names)   # host bytes (Python ``bytes``), not Tensors
    assert [os.path.basename(f.decode()) for f in names] == ["part0.npy", "part1.npy", "part2.npy"]
    assert files.element_spec.dtype.name == "string" and files.element_spec.shape == ()
    seen = []

    def read(f):
        seen.append(type(f))
        return D.from_tensor_slices(np.load(f.decode()))
    rows = files.interleave(read, cycle_length=2, num_parallel_calls=2)
    assert [float(x) for x in rows] == [0, 10, 1, 11, 2, 12, 20, 21, 22]
    assert set(seen) == {bytes}


def test_string_components_batch_save_and_snapshot(tmp_path):
    files = D.list_files(_files(tmp_path), shuffle=False)
    batch = next(iter(files.batch(2)))
    assert isinstance(batch, np.ndarray) and batch.dtype == object and batch.shape == (2,)
    assert all(type(b) is bytes for b in batch)
    files.save(str(tmp_path / "saved"))
    back = D.load(str(tmp_path / "saved"))
    assert back.element_spec == files.element_spec
    assert list(back.as_numpy_iterator()) == list(files.as_numpy_iterator())
    snap = files.snapshot(str(tmp_path / "snap"))
    assert list(snap.as_numpy_iterator()) == list(snap.as_numpy_iterator()) == list(files.as_numpy_iterator())


def _strings():
    return tf.data.experimental.from_list([b"ab\x00\x00", b"\x00", b"c"])


def test_string_values_keep_trailing_nuls_in_structure_helpers():
    from tapejax.data import structure as S
    rows = [b"a\x00", b"", b"\x00\x00"]
    batch = S.stack_strings(rows)
    assert batch.dtype == object and batch.tolist() == rows
    assert S.stack_strings([batch, batch]).tolist() == [rows, rows]
    data, lengths = S.encode_strings(batch)
    assert data.dtype == np.uint8 and lengths.tolist() == [2, 0, 2]
    assert S.decode_strings(data, lengths).tolist() == rows
    assert S.decode_strings(*S.encode_strings(b"x\x00")) == b"x\x00"
    assert type(S.string_value(np.bytes_(b"q"))) is bytes
    assert S.string_value([["a", b"b\x00"]]).tolist() == [[b"a", b"b\x00"]]
    with pytest.raises(TypeError, match="bytes or str"):
        S.string_value([1, 2])


def test_string_cache_file_keeps_bytes_and_reads_version_1(tmp_path):
    path = str(tmp_path / "c")
    ds = _strings().cache(path)
    assert list(ds) == list(ds) == [b"ab\x00\x00", b"\x00", b"c"]   # (written, then read back)
    old = str(tmp_path / "old")   # a version 1 cache file: strings as ``S`` arrays
    np.savez(old + ".tapejax-cache.npz", **{"0/0": np.asarray(b"zz"), "__meta__": np.asarray(json.dumps(
        {"format": "tapejax-data-cache", "version": 1, "dtypes": [["bytes2"]]}))})
    assert list(tf.data.experimental.from_list([b"??"]).cache(old)) == [b"zz"]


def test_string_save_of_version_1_still_loads(tmp_path):
    d = tmp_path / "saved"
    _strings().batch(2).save(str(d))
    meta = json.loads((d / "tapejax-dataset.json").read_text())
    assert meta["version"] == 2
    part = d / meta["shards"][0]["parts"][0][0]
    with np.load(part) as f:
        assert sorted(f.files) == ["c0/0.bytes", "c0/0.len", "c0/1.bytes", "c0/1.len"]   # (shapes 2 and 1)
    np.savez(str(part), **{"c0/0": np.asarray([b"ab", b""]), "c0/1": np.asarray([b"c"])})   # version 1's form
    meta["version"] = 1
    (d / "tapejax-dataset.json").write_text(json.dumps(meta))
    got = list(D.load(str(d)).as_numpy_iterator())
    assert [g.tolist() for g in got] == [[b"ab", b""], [b"c"]] and all(g.dtype == object for g in got)
    meta["version"] = 3
    (d / "tapejax-dataset.json").write_text(json.dumps(meta))
    with pytest.raises(DataLossError, match="version 3"):
        D.load(str(d))


def test_string_padding_values(tmp_path):
    ds = _strings()
    assert [b.tolist() for b in ds.padded_batch(2, padding_values="-").as_numpy_iterator()] == [
        [b"ab\x00\x00", b"\x00"], [b"c"]]
    with pytest.raises(TypeError, match="padding_values"):
        ds.padded_batch(2, padding_values=0)


def test_map_over_strings_gets_host_bytes(tmp_path):
    """(TF's oracle: tests/parity/test_data_strings.py.)  A map over file names gets each name as
    ``bytes``; a string output stays a string component; filter takes a string predicate."""
    files = D.list_files(_files(tmp_path), shuffle=False)
    names = files.map(lambda f: f)
    assert names.element_spec.dtype.name == "string" and names.element_spec.shape == ()
    assert all(isinstance(n, bytes) for n in names)
    assert len(list(files.filter(lambda f: tf.strings.regex_full_match(f, b".*part0.*")))) == 1


def test_list_files_shuffles_each_iteration_with_seed(tmp_path):
    files = D.list_files(_files(tmp_path, 6), seed=7)
    orders = {tuple(files.as_numpy_iterator()) for _ in range(6)}
    assert len(orders) > 1 and all(sorted(o) == sorted(next(iter(orders))) for o in orders)


# -- save / load ---------------------------------------------------------------------

def test_save_is_all_or_nothing(tmp_path):
    path = str(tmp_path / "s")
    D.range(3).save(path)

    def gen():
        yield 1
        raise ValueError("boom")
    bad = D.from_generator(gen, output_signature=tf.TensorSpec((), tf.int32))
    with pytest.raises(ValueError, match="boom"):
        bad.save(path)
    assert [int(x) for x in D.load(path)] == [0, 1, 2]   # the earlier save is intact
    assert len([n for n in os.listdir(path) if n.startswith("run-")]) == 1


def test_save_parts_and_mixed_shapes(tmp_path, monkeypatch):
    from tapejax.data import persist
    monkeypatch.setattr(persist, "PART", 4)
    ds = D.range(1, 11).map(lambda x: tf.ones([x % 3 + 1]) * tf.cast(x, tf.float32))
    ds.save(str(tmp_path / "s"))
    meta = json.loads((tmp_path / "s" / "tapejax-dataset.json").read_text())
    assert [n for _, n in meta["shards"][0]["parts"]] == [4, 4, 2]
    back = D.load(str(tmp_path / "s"))
    assert [x.tolist() for x in back.as_numpy_iterator()] == [x.tolist() for x in ds.as_numpy_iterator()]
    assert back.element_spec.shape.as_list() == [None]


def test_load_refuses_what_it_cannot_read(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tapejax-dataset.json").write_text("{not json")
    with pytest.raises(DataLossError):
        D.load(str(tmp_path / "bad"))
    with pytest.raises(NotFoundError, match="Could not find"):
        D.load(str(tmp_path / "none"))
    with pytest.raises(TypeError, match="window"):
        D.range(4).window(2).save(str(tmp_path / "w"))
    with pytest.raises(InvalidArgumentError, match="infinite"):
        D.range(2).repeat().save(str(tmp_path / "inf"))
    assert not (tmp_path / "w").exists() and not (tmp_path / "inf").exists()
    D.range(2).save(str(tmp_path / "r"))
    with pytest.raises(TypeError, match="reader_func"):
        D.load(str(tmp_path / "r"), reader_func=lambda d: 5)  # pyright: ignore[reportArgumentType]


def test_save_load_without_x64_and_bfloat16(tmp_path):
    assert not x64_enabled()
    D.range(4).save(str(tmp_path / "i"))
    back = D.load(str(tmp_path / "i"))
    assert back.element_spec.dtype.name == "int32" and [int(x) for x in back] == [0, 1, 2, 3]
    x = tf.cast(tf.constant([[1.5, 2.0], [3.0, -1.0]]), tf.bfloat16)
    D.from_tensor_slices(x).save(str(tmp_path / "b"))
    rows = D.load(str(tmp_path / "b"))
    assert rows.element_spec.dtype.name == "bfloat16"
    assert [r.numpy().astype(np.float32).tolist() for r in rows] == [[1.5, 2.0], [3.0, -1.0]]


# -- snapshot ----------------------------------------------------------------------------

def test_snapshot_partial_pass_keeps_nothing_and_equal_plans_share(tmp_path):
    calls = []

    def note(x):
        calls.append(int(x))
        return x

    def pipeline():
        return D.range(5).map(lambda x: tf.py_function(note, [x], x.dtype)).snapshot(str(tmp_path))
    ds = pipeline()
    it = iter(ds)
    next(it)
    del it
    root = [os.path.join(tmp_path, d) for d in os.listdir(tmp_path)]
    assert len(root) == 1 and "tapejax-dataset.json" not in os.listdir(root[0])   # not finalized: not read
    assert [int(x) for x in ds] == [0, 1, 2, 3, 4]
    calls.clear()
    other = pipeline()   # an equal plan (same code and captured values): reads the snapshot
    made = list(calls)   # (map() runs its function once when called: README)
    assert [int(x) for x in other] == [0, 1, 2, 3, 4] and calls == made
    different = D.range(5).map(lambda x: x * 2).snapshot(str(tmp_path))
    assert [int(x) for x in different] == [0, 2, 4, 6, 8]
    assert len(os.listdir(tmp_path)) == 2


def test_fingerprint_dtype_follows_x64():
    assert D.range(3).fingerprint().dtype.name == "uint32"
    with jax.enable_x64(True):
        assert D.range(3).fingerprint().dtype.name == "uint64"
    k = 3
    assert D.range(3).map(lambda x: x + k).fingerprint().numpy() != D.range(3).map(lambda x: x + 4).fingerprint().numpy()


# -- interleave(num_parallel_calls) ------------------------------------------------------

class _Concurrency:
    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.most = 0

    def inner(self, k):
        def gen():
            for i in range(4):
                with self.lock:
                    self.now += 1
                    self.most = max(self.most, self.now)
                time.sleep(0.005)
                with self.lock:
                    self.now -= 1
                yield i
        return D.from_generator(gen, output_signature=tf.TensorSpec((), tf.int32))


@pytest.mark.parametrize("npc, most", [(None, 1), (1, 1), (3, 3)])
def test_interleave_runs_inner_datasets_at_once(npc, most):
    c = _Concurrency()
    ds = D.range(6).interleave(c.inner, cycle_length=3, num_parallel_calls=npc)
    assert [int(x) for x in ds] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3] * 2
    assert c.most == most if npc != 3 else c.most >= 2


def test_interleave_parallel_error_and_early_stop():
    def inner(k):
        def gen():
            yield 1
            if int(k) == 1:
                raise InvalidArgumentError(None, None, "inner failed")
            yield 2
        return D.from_generator(gen, output_signature=tf.TensorSpec((), tf.int32))
    with pytest.raises(InvalidArgumentError, match="inner failed"):
        list(D.range(3).interleave(inner, cycle_length=3, num_parallel_calls=3))
    before = threading.active_count()
    it = iter(D.range(50).interleave(lambda k: D.range(1000), cycle_length=4, num_parallel_calls=4))
    next(it)
    it.close()
    del it
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        gc.collect()   # (the pipeline's generator closes its producer threads when collected)
        time.sleep(0.05)
    assert threading.active_count() <= before
