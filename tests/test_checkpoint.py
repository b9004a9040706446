"""tapejax.train.Checkpoint: round trips of Variables, Modules and optimizers; atomic writes;
errors that name the variable and change nothing; TF's save/write/latest_checkpoint naming."""
import json
import os

import numpy as np
import pytest

import tapejax as tf


class Dense(tf.Module):
    def __init__(self, i, o, name=None):
        super().__init__(name=name)
        rng = np.random.RandomState(i * 10 + o)
        self.w = tf.Variable(rng.randn(i, o).astype("float32"), name="w")
        self.b = tf.Variable(np.zeros(o, "float32"), name="b")

    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b


class Net(tf.Module):
    def __init__(self):
        super().__init__()
        self.layers = [Dense(3, 4), Dense(4, 1)]

    def __call__(self, x):
        return self.layers[1](tf.nn.relu(self.layers[0](x)))


X = tf.constant(np.random.RandomState(0).randn(8, 3).astype("float32"))
Y = tf.constant(np.random.RandomState(1).randn(8, 1).astype("float32"))


def _train(model, opt, steps):
    @tf.function
    def step():
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(X) - Y))
        opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return [float(step().numpy()) for _ in range(steps)]


@pytest.mark.parametrize("make_opt", [lambda: tf.optimizers.Nadam(0.01),   # slots + an extra variable
                                      lambda: tf.optimizers.from_optax(__import__("optax").adam(0.01))])
def test_resume_training_exactly(tmp_path, make_opt):
    """Train 3 steps, save, train 3 more; a fresh model+optimizer restored from the save gives the same 3."""
    model, opt = Net(), make_opt()
    _train(model, opt, 3)
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    assert path == str(tmp_path / "ckpt-1")
    want = _train(model, opt, 3)

    model2, opt2 = Net(), make_opt()
    status = tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path)
    status.assert_consumed()
    assert int(opt2.iterations.numpy()) == 3
    got = _train(model2, opt2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for a, b in zip(model.variables, model2.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_format_is_plain_npz_with_object_paths(tmp_path):
    model, opt = Net(), tf.optimizers.Adam(0.01)
    _train(model, opt, 1)
    prefix = tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "w"))
    assert prefix == str(tmp_path / "w")
    with np.load(str(tmp_path / "w.npz"), allow_pickle=False) as z:
        keys = set(z.files)
        meta = json.loads(str(z["__tapejax_checkpoint__"]))
        np.testing.assert_array_equal(z["model/layers/0/w"], model.layers[0].w.numpy())
    assert meta["format"] == "tapejax-checkpoint" and meta["version"] == 1
    assert {"model/layers/0/w", "model/layers/1/b", "optimizer/iter", "optimizer/learning_rate",
            "optimizer/beta_1", "optimizer/beta_2", "optimizer/decay",
            "optimizer/slots/model/layers/0/w/m", "optimizer/slots/model/layers/1/b/v",
            "save_counter"} <= keys


def test_hyperparameters_set_during_training_are_restored(tmp_path):
    """beta_1 lives in a Variable (as in TF): a value set during training is saved, and the
    restored optimizer continues with it."""
    model, opt = Net(), tf.optimizers.Adam(0.01)
    _train(model, opt, 2)
    opt.beta_1 = 0.5
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    want = _train(model, opt, 2)
    model2, opt2 = Net(), tf.optimizers.Adam(0.01)
    tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path).assert_consumed()
    assert float(opt2.beta_1.numpy()) == 0.5
    np.testing.assert_allclose(_train(model2, opt2, 2), want, rtol=1e-6)


def test_save_numbering_and_latest_checkpoint(tmp_path):
    v = tf.Variable([1.0, 2.0])
    ck = tf.train.Checkpoint(v=v)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    p1 = ck.save(str(tmp_path / "ckpt"))
    v.assign([3.0, 4.0])
    p2 = ck.save(str(tmp_path / "ckpt"))
    assert (p1, p2) == (str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2"))
    assert tf.train.latest_checkpoint(str(tmp_path)) == p2
    assert int(ck.save_counter.numpy()) == 2
    ck.restore(p1)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    ck.restore(p2 + ".npz")
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])


def test_mismatch_names_variable_expected_and_got_and_changes_nothing(tmp_path):
    a, b = tf.Variable([1.0, 2.0], name="a"), tf.Variable(5.0, name="b")
    path = tf.train.Checkpoint(a=a, b=b).save(str(tmp_path / "ckpt"))
    a2, b2 = tf.Variable([0.0, 0.0, 0.0], name="a"), tf.Variable(0.0, name="b")
    with pytest.raises(ValueError, match=r"a \(variable a:0\): expected shape \(3,\), the checkpoint has shape \(2,\)"):
        tf.train.Checkpoint(a=a2, b=b2).restore(path)
    assert b2.numpy() == 0.0     # validated first: nothing assigned
    i = tf.Variable([1, 2], name="a")
    with pytest.raises(ValueError, match="expected dtype int32, the checkpoint has dtype float32"):
        tf.train.Checkpoint(a=i).restore(path)


def test_missing_and_unused_values_reported_by_status(tmp_path):
    path = tf.train.Checkpoint(a=tf.Variable(1.0)).save(str(tmp_path / "ckpt"))
    extra = tf.Variable(7.0, name="extra")
    status = tf.train.Checkpoint(a=tf.Variable(0.0), extra=extra).restore(path)
    with pytest.raises(AssertionError, match="extra"):
        status.assert_consumed()
    status.expect_partial()
    assert extra.numpy() == 7.0
    status2 = tf.train.Checkpoint(z=tf.Variable(0.0)).restore(path)
    with pytest.raises(AssertionError):
        status2.assert_consumed()


def test_lists_and_dicts_of_variables(tmp_path):
    vs = [tf.Variable(1.0), tf.Variable([2.0, 3.0])]
    d = {"x": tf.Variable(4.0)}
    p = tf.train.Checkpoint(vs=vs, d=d).write(str(tmp_path / "c"))
    with np.load(p + ".npz", allow_pickle=False) as z:
        assert {"vs/0", "vs/1", "d/x"} <= set(z.files)
    vs2 = [tf.Variable(0.0), tf.Variable([0.0, 0.0])]
    d2 = {"x": tf.Variable(0.0)}
    tf.train.Checkpoint(vs=vs2, d=d2).read(p).assert_consumed()
    assert (vs2[0].numpy(), vs2[1].numpy().tolist(), d2["x"].numpy()) == (1.0, [2.0, 3.0], 4.0)
    with pytest.raises(ValueError, match="trackable"):
        tf.train.Checkpoint(vs=[tf.Variable(1.0), "nope"])


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="expecting v to be a trackable object"):
        tf.train.Checkpoint(v=3)
    with pytest.raises(tf.errors.NotFoundError, match="checkpoint suffix"):
        tf.train.Checkpoint(v=tf.Variable(1.0)).restore(str(tmp_path / "nope-1"))
    np.savez(str(tmp_path / "plain.npz"), x=np.ones(2))
    with pytest.raises(ValueError, match="not a tapejax checkpoint"):
        tf.train.Checkpoint(v=tf.Variable(1.0)).restore(str(tmp_path / "plain"))


def test_interrupted_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    v = tf.Variable([1.0, 2.0])
    ck = tf.train.Checkpoint(v=v)
    ck.write(str(tmp_path / "w"))
    before = (tmp_path / "w.npz").read_bytes()
    v.assign([9.0, 9.0])

    def boom(f, **arrays):
        f.write(b"partial garbage")
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        ck.write(str(tmp_path / "w"))
    with pytest.raises(KeyboardInterrupt):
        ck.save(str(tmp_path / "ckpt"))
    monkeypatch.undo()
    assert (tmp_path / "w.npz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["w.npz"]        # no temp files left behind
    assert int(ck.save_counter.numpy()) == 0
    ck.read(str(tmp_path / "w"))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_bfloat16_round_trip(tmp_path):
    v = tf.Variable(np.array([1.5, -2.0], dtype=tf.bfloat16._np))
    ck = tf.train.Checkpoint(v=v)
    p = ck.write(str(tmp_path / "b"))
    v.assign(np.zeros(2, tf.bfloat16._np))
    ck.read(p)
    assert v.dtype == tf.bfloat16
    np.testing.assert_array_equal(v.numpy().astype("float32"), [1.5, -2.0])
