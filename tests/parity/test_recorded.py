"""``recorded.py``: TF's results recorded and read back exactly, used only while current, and a
recorded result that tapejax differs from sends the case to live TF.

Oracles: a normalised result read back is the same structure with the same types and bit-equal
arrays (checked by ``assert_same`` at zero tolerance, and by type); when a recording is current
is written out by hand (same source, same releases, or TensorFlow missing).
"""
from collections import namedtuple

import ml_dtypes
import numpy as np
import pytest

from . import harness, recorded
from .harness import A, Raised, Returned, _Arr, assert_same, normalize

Pair = namedtuple("Pair", "first second")


def _same_exactly(got, want):
    assert type(got) is type(want)
    assert_same(got, want, rtol=0, atol=0)
    if isinstance(want, (list, tuple)):
        for g, w in zip(got, want):
            _same_exactly(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same_exactly(got[k], want[k])
    elif isinstance(want, _Arr):
        assert got.value.dtype == want.value.dtype
        if want.value.dtype.kind == "O":
            assert got.value.tolist() == want.value.tolist()
        else:
            assert got.value.tobytes() == want.value.tobytes()
    elif isinstance(want, Raised):
        assert (got.message, got.ok, got.mro) == (want.message, want.ok, want.mro)


def test_every_kind_of_normalised_result_reads_back_exactly():
    strings = np.empty(2, dtype=object)
    strings[:] = [b"ab", b"\x00\xff"]
    result = normalize((
        None, True, 3, 2**70, -0.0, float("nan"), float("inf"), 1.5 + 2j, "s", b"\x00b",
        A([[1.0, -0.0], [np.nan, 3.0]]), A(7, "int64"), A(np.zeros((0, 3))),
        _Arr("bfloat16", (2,), np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)),
        _Arr("complex64", (1,), np.array([1 + 2j], np.complex64)),
        _Arr("string", (2,), strings),
        Raised("ValueError", "bad shape", ("TypeError",), ("ValueError", "Exception")),
        Returned([1.0]), Pair(A(1.0), [None]), {"b": 1, 2: (3,), "a": {"x": []}},
    ))
    back = recorded.decode(recorded.encode(result))
    _same_exactly(back, result)
    assert np.signbit(back[4]) and np.isnan(back[5])


def test_an_unsupported_value_is_not_recorded():
    with pytest.raises(recorded.NotRecorded):
        recorded.encode({1, 2})


@pytest.fixture
def record_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "RECORD_DIR", tmp_path)
    monkeypatch.setattr(recorded, "_FILES", {})
    monkeypatch.setattr(recorded, "_NEW", {})
    monkeypatch.setattr(recorded, "RAN_LIVE", set())
    monkeypatch.setattr(recorded, "LIVE", False)
    monkeypatch.setitem(recorded.RECORDING, "on", True)
    return tmp_path


def _case_a(tf):
    return tf.constant(1.0)


def _case_b(tf):
    return tf.constant(2.0)


def _reading(monkeypatch):
    monkeypatch.setitem(recorded.RECORDING, "on", False)
    monkeypatch.setattr(recorded, "_FILES", {})


def test_a_recording_run_writes_what_each_worker_ran_into_one_file(record_dir, monkeypatch):
    recorded.record(_case_a, normalize(np.float32(1.0)))
    assert recorded.flush() == [record_dir / "test_recorded.json.gz"]
    recorded.record(_case_b, normalize(np.float32(2.0)))   # (another worker of the same run)
    recorded.flush()
    _reading(monkeypatch)
    assert recorded.lookup(_case_a).value == 1.0 and recorded.lookup(_case_b).value == 2.0


def test_a_recording_of_another_source_is_not_used_and_is_replaced(record_dir, monkeypatch):
    recorded.record(_case_a, normalize(np.float32(1.0)))
    recorded.flush()
    monkeypatch.setitem(recorded._KEYS, __name__, "another source")
    _reading(monkeypatch)
    with pytest.raises(recorded.NotRecorded, match="another source"):
        recorded.lookup(_case_a)
    monkeypatch.setitem(recorded.RECORDING, "on", True)
    recorded.record(_case_b, normalize(np.float32(2.0)))
    recorded.flush()
    _reading(monkeypatch)
    assert recorded.lookup(_case_b).value == 2.0
    with pytest.raises(recorded.NotRecorded, match="not recorded"):
        recorded.lookup(_case_a)   # (the old source's entries went with it)


def test_a_recording_of_other_releases_is_used_only_where_tensorflow_is_missing(record_dir, monkeypatch):
    recorded.record(_case_a, normalize(np.float32(1.0)))
    recorded.flush()
    _reading(monkeypatch)
    other = dict(recorded.releases(), tensorflow="2.0.0")
    monkeypatch.setattr(recorded, "releases", lambda: other)
    with pytest.raises(recorded.NotRecorded, match="other releases"):
        recorded.lookup(_case_a)
    missing = dict(other, tensorflow=None)
    monkeypatch.setattr(recorded, "releases", lambda: missing)
    assert recorded.lookup(_case_a).value == 1.0


def test_the_source_key_follows_the_module_and_the_harness_inputs(monkeypatch):
    key = recorded.source_key(_case_a)
    assert recorded.source_key(_case_b) == key   # (one key per module)
    monkeypatch.setattr(recorded, "_KEYS", {})
    monkeypatch.setattr(recorded, "_HARNESS_INPUTS", recorded._HARNESS_INPUTS[:-1])
    assert recorded.source_key(_case_a) != key


def test_a_parity_case_runs_on_its_recording_without_tensorflow(record_dir, monkeypatch):
    """The [tf] and [tapejax] items of a recorded case run no TF program (``load_tf`` refuses);
    where tapejax differs from the recording, TF runs live, and tapejax passes only if it agrees
    with what TF gives then."""
    case = harness.parity(_case_b)
    recorded.record(_case_b, normalize(np.float32(2.0)))
    recorded.flush()
    _reading(monkeypatch)
    monkeypatch.setattr(harness, "_TF_RESULTS", {})

    calls = []

    def no_tf():
        calls.append(1)
        raise RuntimeError("no TF here")
    monkeypatch.setattr(harness, "load_tf", no_tf)
    case("tf")
    case("tapejax")
    assert calls == []
    monkeypatch.setitem(recorded.RECORDING, "on", True)
    recorded.record(_case_b, normalize(np.float32(5.0)))   # a recording tapejax differs from
    recorded.flush()
    _reading(monkeypatch)
    with pytest.raises(AssertionError, match="tapejax vs TF"):
        case("tapejax")   # (TF could not run again: the difference from the recording stands)
    assert calls == [1]


def test_a_subprocess_side_is_recorded_read_back_and_run_again_where_it_differs(record_dir, tmp_path, monkeypatch):
    """``SideRun``: a recording run writes TF's JSON; the next run reads it without running TF; a
    comparison that fails on it is decided by a live run; an edited source makes it stale."""
    src = tmp_path / "programs.py"
    src.write_text("A = 1\n")
    runs = []

    def run():
        runs.append(1)
        return {"p": [1.0, 2.0]}
    side = recorded.SideRun("parity.test_side", [src], run)
    assert side.get() == {"p": [1.0, 2.0]} and runs == [1]   # (recording run: live, written)
    _reading(monkeypatch)
    again = recorded.SideRun("parity.test_side", [src], run)
    assert again.get() == {"p": [1.0, 2.0]} and runs == [1] and again.recorded
    seen = []

    def compare(tf):
        seen.append(tf)
        assert tf["p"][0] == 1.0
    again.check(compare)
    assert runs == [1]
    live = {"p": [3.0]}
    differs = recorded.SideRun("parity.test_side", [src], lambda: runs.append(2) or live)

    def only_live(tf):
        assert tf is live, "tapejax differs from the recording"
    differs.check(only_live)
    assert runs == [1, 2]
    src.write_text("A = 2\n")
    assert recorded.SideRun("parity.test_side", [src], run).current() is None
