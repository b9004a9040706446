"""tf.train under TensorFlow 2.21 and tapejax: deferred restoration, status objects, errors,
numbering, CheckpointManager; and a checkpoint written by TF restored into tapejax objects.

Each case writes its checkpoints into a fresh temporary directory and returns what a user
sees (values, exception classes, file names relative to the directory)."""
import os
import tempfile

import numpy as np
import pytest

from .harness import parity, raises

LEG = "keras.optimizers.legacy.Adam"


def _tmp():
    return tempfile.mkdtemp(prefix="parity-ckpt-")


def _ok(fn):
    """``raises`` for a status assertion: None when it passes (the status itself is not comparable)."""
    return raises(lambda: fn() and None)


def _guide_model(tf):
    class FlexibleDense(tf.Module):
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

    return MySequentialModule


@parity(modes=True)
def test_guide_restore_before_the_variables_exist(tf):
    """TF's "Introduction to modules": the new model's Variables are created on its first call,
    after the restore, and get the saved values (deferred restoration)."""
    Model = _guide_model(tf)
    x = tf.constant([[2.0, 2.0, 2.0]])
    m = Model()
    m(x)
    for i, v in enumerate(m.variables):
        v.assign(np.linspace(-1, 1, int(np.prod(v.shape))).reshape(tuple(v.shape)).astype("float32") * (i + 1))
    path = tf.train.Checkpoint(model=m).save(os.path.join(_tmp(), "my_checkpoint"))
    new = Model()
    status = tf.train.Checkpoint(model=new).restore(path)
    before = (_ok(status.assert_existing_objects_matched), _ok(status.assert_consumed))
    out = new(x)
    return m(x), out, before, _ok(status.assert_consumed)


@parity(x64=True)   # (save_counter is int64 in TF; in tapejax too with JAX's x64 mode)
def test_status_objects(tf):
    d = _tmp()
    path = tf.train.Checkpoint(a=tf.Variable(1.0), b=tf.Variable(2.0)).save(os.path.join(d, "two"))
    partial = tf.train.Checkpoint(a=tf.Variable(0.0)).restore(path)
    extra = tf.train.Checkpoint(a=tf.Variable(0.0), b=tf.Variable(0.0), c=tf.Variable(3.0)).restore(path)
    nothing = tf.train.Checkpoint(z=tf.Variable(0.0)).read(path)
    none = tf.train.Checkpoint(z=tf.Variable(0.0)).restore(None)
    out = [_ok(partial.assert_existing_objects_matched), _ok(partial.assert_consumed),
           _ok(partial.assert_nontrivial_match), _ok(extra.assert_existing_objects_matched),
           _ok(nothing.assert_nontrivial_match), _ok(none.assert_consumed),
           _ok(none.assert_existing_objects_matched)]
    for s in (partial, extra, nothing):
        s.expect_partial()
    late = tf.train.Checkpoint()
    status = late.restore(path)
    late.a = tf.Variable(0.0)
    out += [late.a, late.save_counter, _ok(status.assert_consumed)]
    late.b = tf.Variable(0.0)
    return out + [late.b, _ok(status.assert_consumed)]


@parity
def test_restore_errors(tf):
    """TF's classes: missing path NotFoundError, a directory DataLossError, shape ValueError,
    dtype InvalidArgumentError, a non-trackable object ValueError; nothing restored."""
    d = _tmp()
    a = tf.Variable([1.0, 2.0])
    path = tf.train.Checkpoint(a=a).save(os.path.join(d, "ckpt"))
    wrong_shape = tf.Variable([0.0, 0.0, 0.0])
    wrong_dtype = tf.Variable([0, 0])
    return [raises(tf.train.Checkpoint(a=a).restore, os.path.join(d, "nothere")),
            raises(tf.train.Checkpoint(a=a).read, os.path.join(d, "nothere")),
            raises(tf.train.Checkpoint(a=a).restore, d),
            raises(tf.train.Checkpoint(a=wrong_shape).restore, path), wrong_shape,
            raises(tf.train.Checkpoint(a=wrong_dtype).restore, path), wrong_dtype,
            raises(tf.train.Checkpoint, a=3), raises(tf.train.Checkpoint, a=None),
            raises(tf.train.Checkpoint, root=3),
            raises(tf.train.CheckpointManager, tf.train.Checkpoint(a=a), d, max_to_keep=0),
            raises(tf.train.CheckpointManager, tf.train.Checkpoint(a=a), d, max_to_keep=2, checkpoint_interval=2),
            raises(tf.train.load_variable, path, "nope"),
            raises(tf.train.list_variables, os.path.join(d, "none"))]


@parity(x64=True)
def test_save_write_numbering_and_keys(tf):
    import collections
    d = _tmp()
    P = collections.namedtuple("P", "a b")
    m = tf.Module()
    m.layers = [tf.Variable(1.0)]
    m.p = P(tf.Variable(3.0), tf.Variable(4.0))
    m.d = {"x/y": tf.Variable(5.0), "a.b": tf.Variable(6.0)}
    ck = tf.train.Checkpoint(model=m, step=tf.Variable(7))
    w = ck.write(os.path.join(d, "w"))
    counter_after_write = ck.save_counter
    paths = [os.path.basename(ck.save(os.path.join(d, "ckpt"))) for _ in range(3)]
    keys = sorted(k for k, _ in tf.train.list_variables(os.path.join(d, "ckpt-3")))
    with open(os.path.join(d, "checkpoint")) as f:
        state = f.read()
    return (os.path.basename(w), counter_after_write, paths, ck.save_counter, keys,
            os.path.basename(tf.train.latest_checkpoint(d)), state,
            tf.train.load_variable(d, "model/d/x.Sy/.ATTRIBUTES/VARIABLE_VALUE"),
            tf.train.load_variable(d, "step/.ATTRIBUTES/VARIABLE_VALUE"))


@parity(x64=True)
def test_checkpoint_manager(tf):
    d = _tmp()
    v = tf.Variable(1.0)
    step = tf.Variable(0)
    ck = tf.train.Checkpoint(v=v, step=step)
    m = tf.train.CheckpointManager(ck, os.path.join(d, "m"), max_to_keep=2)
    out = [m.latest_checkpoint, m.checkpoints]
    for i in range(3):
        v.assign(float(i))
        out.append(os.path.basename(m.save()))
    names = lambda ps: [os.path.relpath(p, d) for p in ps]   # noqa: E731
    out += [names(m.checkpoints), os.path.relpath(m.latest_checkpoint, d), ck.save_counter,
            raises(tf.train.list_variables, os.path.join(d, "m", "ckpt-1")),
            os.path.basename(m.save(checkpoint_number=10)), names(m.checkpoints), ck.save_counter]
    again = tf.train.CheckpointManager(ck, os.path.join(d, "m"), max_to_keep=3)
    out += [names(again.checkpoints), os.path.relpath(again.latest_checkpoint, d)]
    named = tf.train.CheckpointManager(ck, os.path.join(d, "n"), max_to_keep=None, checkpoint_name="model")
    out.append(os.path.basename(named.save()))
    every = tf.train.CheckpointManager(ck, os.path.join(d, "i"), max_to_keep=5, step_counter=step,
                                       checkpoint_interval=3)
    for i in range(8):
        step.assign(i)
        p = every.save()
        out.append(None if p is None else os.path.basename(p))
    out.append([os.path.basename(p) if p else None for p in (every.save(check_interval=False),
                                                            every.save(check_interval=False))])
    v.assign(-1.0)
    out += [os.path.basename(every.restore_or_initialize()), v]
    return out


@parity(needs=LEG, rtol=2e-6, atol=1e-7)
def test_optimizer_state_restored_into_a_model_built_later(tf):
    """Keras-2 Adam: training resumes exactly from a checkpoint restored before the model is built
    and before the first apply_gradients (slots are created when their Variable appears)."""
    class Lazy(tf.Module):
        def __init__(self):
            super().__init__()
            self.built = False

        def __call__(self, x):
            if not self.built:
                self.w = tf.Variable(np.arange(6, dtype="float32").reshape(3, 2) * 0.1 + 1, name="w")
                self.built = True
            return tf.matmul(x, self.w)

    x = tf.constant([[1.0, 2.0, 3.0]])

    def steps(m, opt, n):
        out = []
        for _ in range(n):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(m(x)))
            opt.apply_gradients(zip(t.gradient(loss, [m.w]), [m.w]))
            out.append(loss)
        return out

    m, opt = Lazy(), tf.keras.optimizers.legacy.Adam(0.1)
    steps(m, opt, 3)
    path = tf.train.Checkpoint(model=m, opt=opt).save(os.path.join(_tmp(), "c"))
    m2, opt2 = Lazy(), tf.keras.optimizers.legacy.Adam(0.1)
    tf.train.Checkpoint(model=m2, opt=opt2).restore(path).expect_partial()
    resumed = steps(m2, opt2, 2)
    return resumed, m2.w, opt2.get_slot(m2.w, "m"), opt2.get_slot(m2.w, "v"), int(opt2.iterations.numpy())


# -- a checkpoint written by TensorFlow, restored by tapejax ---------------------------------------
def _mlp(tf):
    class Dense(tf.Module):
        def __init__(self, o, name=None):
            super().__init__(name=name)
            self.o = o
            self.built = False

        def __call__(self, x):
            if not self.built:
                r = np.random.RandomState(self.o)
                self.w = tf.Variable(r.randn(x.shape[-1], self.o).astype("float32") * 0.5, name="w")
                self.b = tf.Variable(np.zeros(self.o, "float32"), name="b")
                self.built = True
            return tf.matmul(x, self.w) + self.b

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            self.layers = [Dense(8), Dense(1)]

        def __call__(self, x):
            return self.layers[1](tf.nn.relu(self.layers[0](x)))

    return MLP


def _fit(tf, model, opt, x, y, n):
    losses = []
    for _ in range(n):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(tf.constant(x)) - tf.constant(y)))
        opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
        losses.append(float(loss.numpy()))
    return losses


@pytest.mark.parametrize("mode", ["tapejax", "tapejax-eager"])
def test_tf_trained_checkpoint_restores_into_tapejax(mode, tmp_path):
    """Train an MLP with Keras-2 Adam in TensorFlow, save with tf.train.CheckpointManager; restore
    the latest checkpoint into the same program written against tapejax (built lazily, after the
    restore): same predictions, and training resumes with TF's next losses."""
    realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    import tapejax
    rng = np.random.RandomState(0)
    x = rng.randn(32, 5).astype("float32")
    y = (x @ rng.randn(5, 1)).astype("float32")
    model, opt = _mlp(realtf)(), realtf.keras.optimizers.legacy.Adam(0.05)
    _fit(realtf, model, opt, x, y, 10)
    manager = realtf.train.CheckpointManager(realtf.train.Checkpoint(model=model, optimizer=opt),
                                             str(tmp_path), max_to_keep=1)
    manager.save()
    want_pred = model(realtf.constant(x)).numpy()
    want_next = _fit(realtf, model, opt, x, y, 3)

    prev = (tapejax.set_deferred_execution(mode == "tapejax"), tapejax.set_speculative_updates(mode == "tapejax"))
    try:
        tj_model, tj_opt = _mlp(tapejax)(), tapejax.keras.optimizers.legacy.Adam(0.05)
        ckpt = tapejax.train.Checkpoint(model=tj_model, optimizer=tj_opt)
        status = ckpt.restore(tapejax.train.latest_checkpoint(str(tmp_path)))
        pred = tj_model(tapejax.constant(x)).numpy()
        status.assert_consumed()
        assert int(tj_opt.iterations.numpy()) == 10 and int(ckpt.save_counter.numpy()) == 1
        got_next = _fit(tapejax, tj_model, tj_opt, x, y, 3)
    finally:
        tapejax.set_deferred_execution(prev[0])
        tapejax.set_speculative_updates(prev[1])
    np.testing.assert_allclose(pred, want_pred, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_next, want_next, rtol=1e-5)
    assert tapejax.train.list_variables(str(tmp_path)) == realtf.train.list_variables(str(tmp_path))
    key = "model/layers/0/w/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"
    np.testing.assert_array_equal(tapejax.train.load_variable(str(tmp_path), key),
                                  realtf.train.load_variable(str(tmp_path), key))
