"""Deferred restoration (``restore.py``) and the load status objects (``status.py``).

A restore made before the Variables exist is applied when each one appears (TF's deferred
restoration); the status objects report what is matched with TF's assertions and warnings.
Oracle: the saved values (a model built after the restore computes the saved model's output)
and TF 2.21's behaviour for the same programs (tests/parity/test_checkpoint.py runs them under TF).
"""
import gc
import logging
import weakref

import numpy as np
import pytest

import tapejax as tf
from tapejax.core.variable import CREATION_HOOKS
from tapejax.train import restore as _restore


class FlexibleDense(tf.Module):
    """TF's "Introduction to modules" guide: Variables created on the first call."""

    def __init__(self, out_features, name=None):
        super().__init__(name=name)
        self.is_built = False
        self.out_features = out_features

    def __call__(self, x):
        if not self.is_built:
            self.w = tf.Variable(tf.random.normal([x.shape[-1], self.out_features]), name="w")
            self.b = tf.Variable(tf.zeros([self.out_features]), name="b")
            self.is_built = True
        return tf.nn.relu(tf.matmul(x, self.w) + self.b)


class MySequentialModule(tf.Module):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.dense_1 = FlexibleDense(out_features=3)
        self.dense_2 = FlexibleDense(out_features=2)

    def __call__(self, x):
        return self.dense_2(self.dense_1(x))


X = tf.constant([[2.0, 2.0, 2.0]])


@pytest.fixture
def saved(tmp_path):
    """A built model with known weights, saved; returns (path, its output)."""
    m = MySequentialModule()
    m(X)
    for i, v in enumerate(m.variables):
        v.assign(np.linspace(-1, 1, int(np.prod(v.shape))).reshape(v.shape).astype("float32") * (i + 1))
    path = tf.train.Checkpoint(model=m).save(str(tmp_path / "ckpt"))
    return path, m(X).numpy()


@pytest.fixture(autouse=True)
def nothing_waits_after():
    yield
    gc.collect()


def test_guide_model_built_after_restore_gets_the_saved_values(saved):
    """The silent wrong answer of issue 24: the new model's Variables are created on its first
    call, after the restore; TF (and now tapejax) applies the restore when they are created."""
    path, want = saved
    new = MySequentialModule()
    status = tf.train.Checkpoint(model=new).restore(path)
    status.assert_existing_objects_matched()          # nothing built yet: nothing unmatched
    with pytest.raises(AssertionError, match=r"Unresolved object in checkpoint \(root\).model.dense_1"):
        status.assert_consumed()
    np.testing.assert_array_equal(new(X).numpy(), want)
    status.assert_consumed()


class OnesDense(FlexibleDense):
    """FlexibleDense with a constant initial value (tapejax.random needs a state_scope inside
    tapejax.function)."""

    def __call__(self, x):
        if not self.is_built:
            self.w = tf.Variable(tf.ones([x.shape[-1], self.out_features]), name="w")
            self.b = tf.Variable(tf.zeros([self.out_features]), name="b")
            self.is_built = True
        return tf.nn.relu(tf.matmul(x, self.w) + self.b)


def test_built_inside_a_compiled_step(saved):
    """A model built on the first call of a tapejax.function: the Variables are created while the
    function discovers its state, and the restored values are what the compiled program runs on."""
    path, want = saved
    new = MySequentialModule()
    new.dense_1, new.dense_2 = OnesDense(3), OnesDense(2)
    status = tf.train.Checkpoint(model=new).restore(path)
    f = tf.function(lambda x: new(x))
    np.testing.assert_array_equal(f(X).numpy(), want)
    np.testing.assert_array_equal(f(X).numpy(), want)
    status.assert_consumed()


def test_shape_mismatch_raises_when_the_variable_appears(saved):
    path, _ = saved
    new = MySequentialModule()
    new.dense_1.out_features = 4
    tf.train.Checkpoint(model=new).restore(path).expect_partial()
    with pytest.raises(ValueError, match=r"shape \(3, 3\) when attempting to restore variable with shape \(3, 4\)"):
        new(X)


class Lazy(tf.Module):
    def __init__(self):
        super().__init__()
        self.built = False

    def __call__(self, x):
        if not self.built:
            self.w = tf.Variable(np.arange(6, dtype="float32").reshape(3, 2) * 0.1 + 1, name="w")
            self.built = True
        return tf.matmul(x, self.w)


def _steps(model, opt, n, x=tf.constant([[1.0, 2.0, 3.0]])):
    out = []
    for _ in range(n):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(model(x)))
        opt.apply_gradients(zip(t.gradient(loss, [model.w]), [model.w]))
        out.append(float(loss.numpy()))
    return out


@pytest.fixture
def trained(tmp_path):
    m, opt = Lazy(), tf.optimizers.Adam(0.1)
    _steps(m, opt, 3)
    path = tf.train.Checkpoint(model=m, opt=opt).save(str(tmp_path / "c"))
    return path, _steps(m, opt, 2), [s.numpy() for s in opt.variables()]


def test_optimizer_slots_follow_a_variable_created_later(trained):
    """The optimizer is matched at restore time, the Variable later: its slots are created and
    restored when the Variable appears (TF's Keras optimizers create slots on restore)."""
    path, want, _ = trained
    m, opt = Lazy(), tf.optimizers.Adam(0.1)
    status = tf.train.Checkpoint(model=m, opt=opt).restore(path)
    assert len(opt.variables()) == 1 and int(opt.iterations.numpy()) == 3
    np.testing.assert_allclose(_steps(m, opt, 2), want, rtol=1e-6)
    status.assert_consumed()


def test_optimizer_attached_after_the_restore(trained):
    """A new optimizer (tf_keras' ``tf.keras.optimizers.Adam``) gets its iterations when tracked and
    its state when its first update builds it (the lists of its checkpoint, by position)."""
    path, want, _ = trained
    m = Lazy()
    m(tf.constant([[1.0, 2.0, 3.0]]))
    ck = tf.train.Checkpoint(model=m)
    status = ck.restore(path)
    opt = tf.optimizers.Adam(0.1)
    ck.opt = opt                  # tracked now: its iterations are restored, its state waits
    assert int(opt.iterations.numpy()) == 3 and len(opt.variables()) == 1
    status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match="Unresolved object in checkpoint"):
        status.assert_consumed()
    np.testing.assert_allclose(_steps(m, opt, 2), want, rtol=1e-6)
    status.assert_consumed()


def test_legacy_optimizer_attached_after_the_restore(tmp_path):
    """A legacy optimizer's slots are made by the restore itself, for the Variables already matched."""
    m, opt = Lazy(), tf.optimizers.legacy.Adam(0.1)
    _steps(m, opt, 3)
    path = tf.train.Checkpoint(model=m, opt=opt).save(str(tmp_path / "c"))
    want = _steps(m, opt, 2)
    m = Lazy()
    m(tf.constant([[1.0, 2.0, 3.0]]))
    ck = tf.train.Checkpoint(model=m)
    status = ck.restore(path)
    opt = tf.optimizers.legacy.Adam(0.1)
    ck.opt = opt                  # tracked now: its Variables and the slots of model.w are restored
    assert int(opt.iterations.numpy()) == 3 and len(opt.variables()) == 3
    status.assert_consumed()
    np.testing.assert_allclose(_steps(m, opt, 2), want, rtol=1e-6)


def test_variables_added_to_a_list_are_restored_at_the_next_sweep(tmp_path):
    """A list append has no hook (tapejax keeps the user's list object): the Variable is
    restored when the next Variable is created, a Module attribute is set, a status is
    checked or a checkpoint is saved."""
    path = tf.train.Checkpoint(vs=[tf.Variable(1.0), tf.Variable(2.0)]).save(str(tmp_path / "c"))
    vs = []
    status = tf.train.Checkpoint(vs=vs).restore(path)
    vs.append(tf.Variable(0.0))
    vs.append(tf.Variable(0.0))            # creating it restores vs[0]
    assert float(vs[0].numpy()) == 1.0
    status.assert_consumed()               # checking sweeps first: vs[1] too
    assert [float(v.numpy()) for v in vs] == [1.0, 2.0]


def test_nested_containers_built_later(tmp_path):
    class Blocks(tf.Module):
        def __init__(self):
            super().__init__()
            self.blocks = {"a": [FlexibleDense(2), FlexibleDense(1)]}

        def __call__(self, x):
            for b in self.blocks["a"]:
                x = b(x)
            return x

    m = Blocks()
    want = m(X).numpy()
    path = tf.train.Checkpoint(m=m).save(str(tmp_path / "c"))
    m2 = Blocks()
    status = tf.train.Checkpoint(m=m2).restore(path)
    np.testing.assert_array_equal(m2(X).numpy(), want)
    status.assert_consumed()


def _hooked() -> bool:
    return _restore._on_variable_created in CREATION_HOOKS


def test_waits_end_with_their_objects_and_hooks_are_removed(saved):
    """A restore waiting on a model keeps no reference to it: when the model goes, its waits
    go, and the Variable-creation hook is installed exactly while something waits (no cost
    when nothing does).  (Another test's restore may still wait on an object it keeps: the
    check is on this restore's anchors, and on the hook matching ``waiting()``.)"""
    path, _ = saved
    before = set(_restore._WAITING)
    new = MySequentialModule()
    status = tf.train.Checkpoint(model=new).restore(path).expect_partial()
    mine = set(_restore._WAITING) - before
    assert mine and _restore.waiting() and _hooked()
    alive = weakref.ref(new)
    del new, status
    gc.collect()
    assert alive() is None
    assert not mine & set(_restore._WAITING)
    assert _hooked() == _restore.waiting()
    if not before:   # (alone in its process, as in ``pytest tests/test_checkpoint_deferred.py``)
        assert not _restore.waiting() and not _hooked()


def test_status_assertions(tmp_path):
    path = tf.train.Checkpoint(a=tf.Variable(1.0), b=tf.Variable(2.0)).save(str(tmp_path / "two"))
    status = tf.train.Checkpoint(a=tf.Variable(0.0)).restore(path)
    status.assert_existing_objects_matched().assert_nontrivial_match()
    with pytest.raises(AssertionError, match=r"Unresolved object in checkpoint \(root\).b"):
        status.assert_consumed()
    extra = tf.Variable(7.0, name="extra")
    status = tf.train.Checkpoint(a=tf.Variable(0.0), b=tf.Variable(0.0), extra=extra).restore(path)
    with pytest.raises(AssertionError, match="Found 1 Python objects that were not bound to checkpointed values"
                                             ".*extra"):
        status.assert_existing_objects_matched()
    assert float(extra.numpy()) == 7.0
    status = tf.train.Checkpoint(z=tf.Variable(0.0)).read(path)   # (restore() would match save_counter)
    with pytest.raises(AssertionError, match="Nothing except the root object matched"):
        status.assert_nontrivial_match()
    status.expect_partial()


def test_write_without_save_counter_is_reported_as_tf_does(tmp_path):
    """TF's quirk, kept: write() before any save() has no save_counter, and restore() creates
    one, which then has no value in the checkpoint."""
    p = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / "w"))
    status = tf.train.Checkpoint(v=tf.Variable(0.0)).restore(p)
    with pytest.raises(AssertionError, match="save_counter"):
        status.assert_existing_objects_matched()
    tf.train.Checkpoint(v=tf.Variable(0.0)).read(p).assert_consumed()   # read() creates none


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "tapejax" and r.levelno == logging.WARNING]


def test_forgotten_partial_restore_warns_unless_expect_partial(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tapejax")
    path = tf.train.Checkpoint(a=tf.Variable(1.0), b=tf.Variable(2.0)).save(str(tmp_path / "two"))
    status = tf.train.Checkpoint(a=tf.Variable(0.0)).restore(path)
    del status
    gc.collect()
    msgs = _warnings(caplog)
    assert any("deleted with unrestored values" in m for m in msgs)
    assert "Value in checkpoint could not be found in the restored object: (root).b" in msgs
    caplog.clear()
    status = tf.train.Checkpoint(a=tf.Variable(0.0)).restore(path).expect_partial()
    del status
    gc.collect()
    assert _warnings(caplog) == []
