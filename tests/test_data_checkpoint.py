"""Iterator checkpoints beyond what real tf.data can check (tests/parity/test_data_checkpoint.py
does that): how a restore reaches its position (grain's ``set_state``: no element computed
again for a random-access pipeline; the elements recomputed past a stream step), the saved
value's layout and key, a state from another pipeline refused, deferred restoration, and
``from_generator``.  Oracles: hand-derived element values and counts."""
import os

import numpy as np
import pytest

import tapejax as tf

D = tf.data.Dataset


def _counting(calls):
    """A map function that runs eagerly (Python branches on a tensor value) and counts calls."""
    def f(x):
        calls.append(int(x))
        if x > -1:
            return x * 2
        return x
    return f


def test_random_access_restore_computes_no_earlier_element(tmp_path):
    calls: list = []
    ds = D.range(100).map(_counting(calls)).batch(5).prefetch(1)
    it = iter(ds)
    for _ in range(10):
        next(it)
    ckpt = tf.train.Checkpoint(iterator=it)
    path = ckpt.save(str(tmp_path / "c"))
    fresh = iter(ds)
    calls.clear()
    tf.train.Checkpoint(iterator=fresh).restore(path)
    assert calls == []                       # grain's set_state: nothing recomputed
    assert next(fresh).numpy().tolist() == [100, 102, 104, 106, 108]
    assert min(calls) >= 50                  # only the batch read (and what prefetch read ahead)


def test_stream_restore_recomputes_the_elements_before_the_position(tmp_path):
    calls: list = []
    ds = D.range(30).filter(lambda x: x % 2 == 0).map(_counting(calls))
    it = iter(ds)
    for _ in range(4):
        next(it)
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    calls.clear()
    tf.train.Checkpoint(iterator=it).restore(path)
    assert calls == [0, 2, 4, 6]             # replayed to the position
    assert int(next(it)) == 16


def test_state_value_layout_and_key(tmp_path):
    ds = D.range(10).shuffle(4, seed=1).shuffle(3, seed=2).batch(2)
    it = iter(ds)
    next(it)
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    names = dict(tf.train.list_variables(path))
    assert names["iterator/ITERATOR_STATE/.ATTRIBUTES/VARIABLE_VALUE"] == [5]   # format, plan, position, 2 draws
    state = tf.train.load_variable(path, "iterator/ITERATOR_STATE/.ATTRIBUTES/VARIABLE_VALUE")
    assert np.asarray(state)[2] == 1


def test_a_state_from_another_pipeline_is_refused(tmp_path):
    it = iter(D.range(10).map(lambda x: x + 1))
    next(it)
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    other = iter(D.range(10).filter(lambda x: x > 2))
    with pytest.raises(tf.errors.InvalidArgumentError, match="different input pipeline"):
        tf.train.Checkpoint(iterator=other).restore(path)
    assert int(next(other)) == 3             # left where it was


def test_deferred_restore_when_the_iterator_is_attached_later(tmp_path):
    ds = D.range(20).shuffle(20, seed=3)
    it = iter(ds)
    [next(it) for _ in range(7)]
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    want = [int(v) for v in it]
    ckpt = tf.train.Checkpoint()
    ckpt.restore(path)
    ckpt.iterator = iter(ds)                 # restored on assignment (TF's deferred restoration)
    assert [int(v) for v in ckpt.iterator] == want


def test_as_numpy_iterator_is_checkpointable(tmp_path):
    it = D.range(6).batch(4).as_numpy_iterator()
    next(it)
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    assert next(it).tolist() == [4, 5]
    tf.train.Checkpoint(iterator=it).restore(path)
    assert next(it).tolist() == [4, 5]


def test_from_generator_refused_at_save_and_at_restore(tmp_path):
    it = iter(D.from_generator(lambda: iter(range(3)), output_signature=tf.TensorSpec((), tf.int32)))
    next(it)
    ckpt = tf.train.Checkpoint(iterator=it)
    with pytest.raises(tf.errors.FailedPreconditionError, match="from_generator"):
        ckpt.save(str(tmp_path / "c"))
    assert not any(p.startswith("c-") for p in os.listdir(tmp_path))
    assert int(next(it)) == 1
