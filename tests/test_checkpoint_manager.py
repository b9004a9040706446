"""CheckpointManager and the state file (``manager.py``), and the readers (``reader.py``).

Oracle: TF 2.21's CheckpointManager on the same calls (tests/parity/test_checkpoint.py runs
the common ones under TF; here the ones that need a clock or the file system)."""
import os

import numpy as np
import pytest

import tapejax as tf
from tapejax.train import manager as _manager


class Clock:
    def __init__(self, t):
        self.t = t

    def time(self):
        return self.t


def test_keep_checkpoint_every_n_hours_preserves_and_forgets(tmp_path, monkeypatch):
    """TF's rule: a checkpoint leaving the active set is kept on disk (and dropped from the list)
    when it is at least n hours after the last preserved one."""
    clock = Clock(1_000_000.0)
    monkeypatch.setattr(_manager, "time", clock)
    ck = tf.train.Checkpoint(v=tf.Variable(1.0))
    m = tf.train.CheckpointManager(ck, str(tmp_path), max_to_keep=2, keep_checkpoint_every_n_hours=1)
    paths = []
    for minutes in (0, 30, 70, 80, 200):
        clock.t = 1_000_000.0 + 60 * minutes
        paths.append(m.save())
    # the manager started at t (last preserved: t - 1s).  ckpt-1 (t) and ckpt-2 (t+30min) leave
    # the active set less than an hour after the last preserved one: deleted; ckpt-3 (t+70min)
    # leaves it more than an hour after: kept on disk, and it is the new last preserved one
    assert m.checkpoints == [paths[3], paths[4]]
    on_disk = sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt-"))
    assert on_disk == ["ckpt-3", "ckpt-4", "ckpt-5"]
    st = tf.train.get_checkpoint_state(str(tmp_path))
    assert st.all_model_checkpoint_paths == [paths[3], paths[4]]
    assert st.all_model_checkpoint_timestamps == [1_000_000.0 + 60 * 80, 1_000_000.0 + 60 * 200]
    assert st.last_preserved_timestamp == 1_000_000.0 + 60 * 70
    again = tf.train.CheckpointManager(ck, str(tmp_path), max_to_keep=2, keep_checkpoint_every_n_hours=1)
    assert again.checkpoints == [paths[3], paths[4]] and again.latest_checkpoint == paths[4]


def test_max_to_keep_none_keeps_all_and_deletes_directories(tmp_path):
    ck = tf.train.Checkpoint(v=tf.Variable(1.0))
    m = tf.train.CheckpointManager(ck, str(tmp_path), max_to_keep=None)
    for _ in range(4):
        m.save()
    assert [os.path.basename(p) for p in m.checkpoints] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    small = tf.train.CheckpointManager(ck, str(tmp_path), max_to_keep=1)
    small.save()
    assert [os.path.basename(p) for p in small.checkpoints] == ["ckpt-5"]
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt")) == ["ckpt-5"]


def test_async_manager_saves_record_after_commit(tmp_path):
    w = tf.Variable(np.zeros((64, 64), "float32"))
    m = tf.train.CheckpointManager(tf.train.Checkpoint(w=w), str(tmp_path), max_to_keep=2)
    opts = tf.train.CheckpointOptions(enable_async=True)
    for i in range(4):
        w.assign(np.full((64, 64), float(i), "float32"))
        m.save(options=opts)
    m.sync()
    assert [os.path.basename(p) for p in m.checkpoints] == ["ckpt-3", "ckpt-4"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")
    assert float(tf.train.load_variable(str(tmp_path), "w/.ATTRIBUTES/VARIABLE_VALUE")[0, 0]) == 3.0


def test_bad_arguments():
    ck = tf.train.Checkpoint(v=tf.Variable(1.0))
    with pytest.raises(ValueError, match="positive integer"):
        tf.train.CheckpointManager(ck, "/tmp/x", max_to_keep=-1)
    with pytest.raises(TypeError, match="max_to_keep"):
        tf.train.CheckpointManager(ck, "/tmp/x", max_to_keep=2.5)
    with pytest.raises(TypeError, match="Checkpoint"):
        tf.train.CheckpointManager({"v": 1}, "/tmp/x", max_to_keep=2)
    m = tf.train.CheckpointManager(ck, "/tmp/x-never-written", max_to_keep=2)
    with pytest.raises(TypeError, match="checkpoint_number"):
        m.save(checkpoint_number=2.5)
    assert int(ck.save_counter.numpy()) == 0 and not os.path.exists("/tmp/x-never-written")


def test_reader(tmp_path):
    v = tf.Variable(np.arange(4, dtype="float32"), name="v")
    p = tf.train.Checkpoint(v=v, n=tf.Variable(3)).save(str(tmp_path / "c"))
    r = tf.train.load_checkpoint(str(tmp_path))   # a directory: its latest checkpoint
    assert r.has_tensor("v/.ATTRIBUTES/VARIABLE_VALUE") and not r.has_tensor("nope")
    assert r.get_variable_to_shape_map()["v/.ATTRIBUTES/VARIABLE_VALUE"] == [4]
    assert r.get_variable_to_dtype_map()["n/.ATTRIBUTES/VARIABLE_VALUE"] == tf.int32
    np.testing.assert_array_equal(r.get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE"), v.numpy())
    assert tf.train.load_variable(p, "n/.ATTRIBUTES/VARIABLE_VALUE:0") == 3
    with pytest.raises(tf.errors.NotFoundError, match="Key nope not found"):
        r.get_tensor("nope")
    with pytest.raises(tf.errors.NotFoundError, match="Failed to find any matching files"):
        tf.train.list_variables(str(tmp_path / "empty-dir-that-does-not-exist"))


def test_tensorflow_reads_a_tapejax_directory_state(tmp_path):
    """TF's own latest_checkpoint reads the state file tapejax writes."""
    realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    m = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(tmp_path), max_to_keep=3)
    m.save()
    p = m.save()
    assert realtf.train.latest_checkpoint(str(tmp_path)) == p
    assert realtf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == m.checkpoints
