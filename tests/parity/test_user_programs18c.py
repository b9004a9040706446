"""Round 18c: checkpoints, SavedModels and weight files exchanged between TensorFlow 2.21 and tapejax.

Each program runs for real in both systems: one writes files into the test's tmp directory, the
other reads them.  TF runs in this process (``TF_USE_LEGACY_KERAS=1``: ``tf.keras`` is tf_keras),
except Keras 3 on TF's backend, which needs a process of its own (this one's Keras 3 is on JAX,
``_keras3_tf``).  The TF side of a program is also the oracle: training continued from a
checkpoint in TF and in tapejax gives the same losses step by step.

TF -> tapejax: ``tf.train.Checkpoint`` files (``save`` / ``write`` / ``CheckpointManager``) of a
``tf.Module`` and Keras-2 optimizers restored into tapejax objects made before or after the
restore; ``list_variables`` / ``load_checkpoint``; status objects on mismatched structures.
tapejax -> TF: tapejax's checkpoints are its own format (``tapejax/train/README.md``, "A
checkpoint is a directory"), so TF's readers refuse them (the errors are asserted; ``format="tf"``
writes TF's format instead: ``test_checkpoint_tf_format.py``); its
``saved_model.save(..., format="tf")`` is a real TF SavedModel: called, served, fine-tuned in TF.
Keras weight files (``.weights.h5``) go both ways between Keras 3 on TF and on tapejax.
The second file, ``test_user_programs18c2.py``, has the round trips and the SavedModel programs.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
import tapejax  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
X = np.random.RandomState(0).randn(8, 3).astype("float32")
Y = np.random.RandomState(1).randn(8, 2).astype("float32")


# -- one program, written against either module ------------------------------------------------------
def make_model(tf, lazy=False):
    """Two dense layers in a list (built on the first call when ``lazy``: deferred restoration)."""
    class Dense(tf.Module):
        def __init__(self, i, o, seed):
            super().__init__()
            self.i, self.o, self.seed = i, o, seed
            if not lazy:
                self.build()

        def build(self):
            r = np.random.RandomState(self.seed)
            self.w = tf.Variable(r.randn(self.i, self.o).astype("float32") * 0.5, name="w")
            self.b = tf.Variable(np.zeros(self.o, "float32"), name="b")

        def __call__(self, x):
            if not hasattr(self, "w"):
                self.build()
            return tf.matmul(x, self.w) + self.b

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.layers = [Dense(3, 4, 0), Dense(4, 2, 1)]
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")

        def __call__(self, x):
            return self.layers[1](tf.tanh(self.layers[0](x)))

    return Model()


def train(tf, model, opt, n, x=X, y=Y):
    """``n`` steps of a mean-squared-error loop; the losses as floats."""
    out = []
    for _ in range(n):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(tf.constant(x)) - tf.constant(y)))
        vs = model.trainable_variables
        opt.apply_gradients(zip(t.gradient(loss, vs), vs))
        model.step.assign_add(1)
        out.append(float(loss.numpy()))
    return out


def values(model):
    return [np.asarray(v.numpy()) for v in model.trainable_variables]


def close(a, b, rtol=2e-5, atol=1e-6):
    for p, q in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(p), np.asarray(q), rtol=rtol, atol=atol)


def outcome(fn):
    """The class name of what ``fn()`` raised, or "ok"."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is the result
        return type(e).__name__
    return "ok"


# -- TF -> tapejax: tf.Module + Keras-2 optimizers ---------------------------------------------------
OPTIMIZERS = {"Adam": dict(learning_rate=0.05), "SGD": dict(learning_rate=0.1, momentum=0.9),
              "RMSprop": dict(learning_rate=0.01, momentum=0.5, centered=True),
              "Adagrad": dict(learning_rate=0.1), "Nadam": dict(learning_rate=0.05)}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_tf_checkpoint_of_module_and_legacy_optimizer_resumes_in_tapejax(name, tmp_path):
    """TF trains 3 steps with ``tf.keras.optimizers.legacy.<name>`` and ``save``s model and
    optimizer; tapejax restores into the same structure made before the restore and both continue
    3 steps: the same losses step by step, the same slots and ``iterations`` (the slots carried over)."""
    tm, topt = make_model(realtf), getattr(realtf.keras.optimizers.legacy, name)(**OPTIMIZERS[name])
    train(realtf, tm, topt, 3)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))
    want = train(realtf, tm, topt, 3)

    jm, jopt = make_model(tapejax), getattr(tapejax.keras.optimizers.legacy, name)(**OPTIMIZERS[name])
    status = tapejax.train.Checkpoint(model=jm, optimizer=jopt).restore(path)
    assert int(jm.step.numpy()) == 3 and int(jopt.iterations.numpy()) == 3
    got = train(tapejax, jm, jopt, 3)
    status.assert_consumed()   # (every saved value found its object: slots made by the restore)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    close(values(jm), values(tm))
    for slot in topt.get_slot_names():
        close([jopt.get_slot(v, slot) for v in jm.trainable_variables],
              [topt.get_slot(v, slot) for v in tm.trainable_variables])
    assert int(jopt.iterations.numpy()) == int(topt.iterations.numpy()) == 6


def test_tf_checkpoint_restored_before_the_variables_exist(tmp_path):
    """Deferred restoration: the tapejax model is built lazily on its first call and the optimizer's
    slots appear at its first ``apply_gradients``, both after ``restore``; TF's program does the
    same from the same file.  Statuses before and after the first step, and the resumed losses."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.legacy.Adam(0.05)
    train(realtf, tm, topt, 2)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))

    def resume(tf):
        m, opt = make_model(tf, lazy=True), tf.keras.optimizers.legacy.Adam(0.05)
        status = tf.train.Checkpoint(model=m, optimizer=opt).restore(path)
        before = outcome(status.assert_consumed)
        losses = train(tf, m, opt, 3)
        return before, outcome(status.assert_consumed), losses, values(m)

    want, got = resume(realtf), resume(tapejax)
    assert got[:2] == want[:2] == ("AssertionError", "ok")
    np.testing.assert_allclose(got[2], want[2], rtol=2e-5)
    close(got[3], want[3])


def test_objects_attached_to_the_checkpoint_after_the_restore(tmp_path):
    """An empty ``Checkpoint()`` restores TF's file, then ``ckpt.model = ...`` and
    ``ckpt.optimizer = ...`` are assigned: each is restored at the assignment, in TF and tapejax."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    train(realtf, tm, topt, 2)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))

    def resume(tf):
        ck = tf.train.Checkpoint()
        status = ck.restore(path)
        ck.model = make_model(tf)
        restored = values(ck.model)
        ck.optimizer = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
        losses = train(tf, ck.model, ck.optimizer, 2)
        return restored, losses, int(ck.save_counter.numpy()), outcome(status.assert_consumed)

    want, got = resume(realtf), resume(tapejax)
    close(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=2e-5)
    assert got[2:] == want[2:] == (1, "ok")


def test_write_read_and_checkpoint_manager(tmp_path):
    """TF's ``write`` (no numbering, no state file) read by tapejax's ``read``; TF's
    ``CheckpointManager`` (``max_to_keep=2``) seen by tapejax's manager over the same directory:
    the same checkpoints and latest, ``restore_or_initialize``; tapejax's next ``save`` is
    numbered on, and TF's ``latest_checkpoint`` reads tapejax's state file."""
    tm = make_model(realtf)
    w = realtf.train.Checkpoint(model=tm).write(str(tmp_path / "w" / "weights"))
    jm = make_model(tapejax)
    for v in jm.trainable_variables:
        v.assign(v * 0)
    tapejax.train.Checkpoint(model=jm).read(w).assert_consumed()
    close(values(jm), values(tm))

    d = str(tmp_path / "m")
    tck = realtf.train.Checkpoint(model=tm)
    tman = realtf.train.CheckpointManager(tck, d, max_to_keep=2)
    for i in range(3):
        tm.step.assign(i + 10)
        tman.save()
    jm = make_model(tapejax)
    jck = tapejax.train.Checkpoint(model=jm)
    jman = tapejax.train.CheckpointManager(jck, d, max_to_keep=2)
    assert jman.checkpoints == tman.checkpoints and jman.latest_checkpoint == tman.latest_checkpoint
    assert jman.restore_or_initialize() == tman.latest_checkpoint
    assert int(jm.step.numpy()) == 12 and int(jck.save_counter.numpy()) == 3
    new = jman.save()
    assert os.path.basename(new) == "ckpt-4" and realtf.train.latest_checkpoint(d) == new
    assert [os.path.basename(p) for p in jman.checkpoints] == ["ckpt-3", "ckpt-4"]
    assert sorted(os.listdir(d)) == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index", "ckpt-4"]


def test_list_variables_and_load_checkpoint_of_tf_files(tmp_path):
    """tapejax's ``list_variables`` / ``load_variable`` / ``load_checkpoint`` on TF's files (a
    prefix and a directory) give TF's keys, shapes, dtypes and values, slots included."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.legacy.Adam(0.05)
    train(realtf, tm, topt, 1)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))
    assert tapejax.train.list_variables(path) == realtf.train.list_variables(path)
    assert tapejax.train.list_variables(str(tmp_path)) == realtf.train.list_variables(str(tmp_path))
    jr, tr = tapejax.train.load_checkpoint(path), realtf.train.load_checkpoint(path)
    assert jr.get_variable_to_shape_map() == tr.get_variable_to_shape_map()
    assert ({k: np.dtype(v.as_numpy_dtype).name for k, v in jr.get_variable_to_dtype_map().items()}
            == {k: np.dtype(v.as_numpy_dtype).name for k, v in tr.get_variable_to_dtype_map().items()})
    for key in tr.get_variable_to_shape_map():
        if key != "_CHECKPOINTABLE_OBJECT_GRAPH":
            np.testing.assert_array_equal(jr.get_tensor(key), tr.get_tensor(key))
            np.testing.assert_array_equal(tapejax.train.load_variable(path, key), realtf.train.load_variable(path, key))
    slot = "model/layers/0/w/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"
    assert jr.has_tensor(slot) and not jr.has_tensor("nope")
    assert outcome(lambda: jr.get_tensor("nope")) == outcome(lambda: tr.get_tensor("nope")) == "NotFoundError"


def test_status_assertions_on_mismatched_structures(tmp_path):
    """TF's file (model + optimizer + step) restored into smaller, larger and misshapen structures:
    the same assertion outcomes (AssertionError classes), ``expect_partial``, a shape mismatch's
    ValueError; the matched values restored in both."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.legacy.Adam(0.05)
    train(realtf, tm, topt, 1)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))

    def statuses(tf):
        m = make_model(tf)
        only_model = tf.train.Checkpoint(model=m).restore(path)
        out = [outcome(only_model.assert_consumed), outcome(only_model.assert_existing_objects_matched),
               outcome(only_model.assert_nontrivial_match), outcome(only_model.expect_partial)]
        m2 = make_model(tf)
        m2.extra = tf.Variable(5.0)
        extra = tf.train.Checkpoint(model=m2, optimizer=tf.keras.optimizers.legacy.Adam(0.05)).restore(path)
        out += [outcome(extra.assert_existing_objects_matched), outcome(extra.assert_consumed), float(m2.extra.numpy())]
        other = tf.train.Checkpoint(elsewhere=make_model(tf)).restore(path)
        out += [outcome(other.assert_existing_objects_matched), outcome(other.assert_nontrivial_match)]
        other.expect_partial()
        bad = make_model(tf)
        bad.layers[0].w = tf.Variable(np.zeros((3, 5), "float32"))
        out.append(outcome(lambda: tf.train.Checkpoint(model=bad).restore(path)))
        return out, values(m)

    want, got = statuses(realtf), statuses(tapejax)
    assert got[0] == want[0]
    close(got[1], want[1])


def test_tf_checkpoint_with_the_new_keras2_adam_resumes_in_tapejax(tmp_path):
    """As the legacy program, with ``tf.keras.optimizers.Adam`` (tf_keras' new optimizer)."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.Adam(0.05)
    train(realtf, tm, topt, 3)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))
    want = train(realtf, tm, topt, 3)
    jm, jopt = make_model(tapejax), tapejax.keras.optimizers.Adam(0.05)
    status = tapejax.train.Checkpoint(model=jm, optimizer=jopt).restore(path)
    got = train(tapejax, jm, jopt, 3)
    status.assert_consumed()
    np.testing.assert_allclose(got, want, rtol=2e-5)


def test_tf_keras_model_checkpoint_into_tapejax_keras(tmp_path):
    """A tf_keras (Keras 2) model in TF's ``tf.train.Checkpoint`` is keyed by TF's object graph
    (``model/layer_with_weights-0/kernel``); tapejax's Keras models are Keras 3 models that answer
    those names too (``keras.hooks.tf_keras_lookup``): the weights restore and every value is used."""
    tk = realtf.keras.Sequential([realtf.keras.Input((3,)), realtf.keras.layers.Dense(2)])
    path = realtf.train.Checkpoint(model=tk).save(str(tmp_path / "ckpt"))
    assert "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE" in dict(realtf.train.list_variables(path))
    jk = tapejax.keras.Sequential([tapejax.keras.Input((3,)), tapejax.keras.layers.Dense(2)])
    status = tapejax.train.Checkpoint(model=jk).restore(path)
    status.assert_consumed()
    close([w.numpy() for w in jk.weights], [w.numpy() for w in tk.weights], rtol=0, atol=0)


def test_restored_into_variables_first_made_inside_a_function(tmp_path):
    """The model is built inside the first call of a ``tf.function`` training step, after the
    restore (TF restores Variables created in a function's first trace): the resumed losses and
    the optimizer's iterations are TF's."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.legacy.Adam(0.05)
    train(realtf, tm, topt, 2)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))

    def resume(tf):
        m, opt = make_model(tf, lazy=True), tf.keras.optimizers.legacy.Adam(0.05)
        tf.train.Checkpoint(model=m, optimizer=opt).restore(path)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(m(x) - y))
            vs = m.trainable_variables
            opt.apply_gradients(zip(t.gradient(loss, vs), vs))
            return loss

        losses = [float(step(tf.constant(X), tf.constant(Y)).numpy()) for _ in range(3)]
        return losses, int(opt.iterations.numpy()), values(m)

    want, got = resume(realtf), resume(tapejax)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    assert got[1] == want[1] == 5
    close(got[2], want[2])


def test_hyperparameters_and_an_earlier_checkpoint(tmp_path):
    """TF changes Adam's learning rate mid-training and keeps every checkpoint of a manager;
    tapejax restores the first one (``manager.checkpoints[0]``) into an Adam made with another
    rate: the saved rate, iterations and ``get_checkpoint_state`` are TF's, and training resumes
    as TF's from that checkpoint."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.legacy.Adam(0.05)
    man = realtf.train.CheckpointManager(realtf.train.Checkpoint(model=tm, optimizer=topt), str(tmp_path), None)
    train(realtf, tm, topt, 2)
    topt.learning_rate = 0.01
    first = man.save()
    train(realtf, tm, topt, 2)
    man.save()

    def resume(tf):
        m, opt = make_model(tf), tf.keras.optimizers.legacy.Adam(0.3)
        tf.train.Checkpoint(model=m, optimizer=opt).restore(first).assert_existing_objects_matched()
        state = tf.train.get_checkpoint_state(str(tmp_path))
        return (float(opt.learning_rate.numpy()), int(opt.iterations.numpy()), train(tf, m, opt, 2),
                os.path.basename(state.model_checkpoint_path), [os.path.basename(p) for p in state.all_model_checkpoint_paths])

    want, got = resume(realtf), resume(tapejax)
    assert got[0] == pytest.approx(want[0]) and got[1] == want[1] == 2 and got[3:] == want[3:]
    np.testing.assert_allclose(got[2], want[2], rtol=2e-5)


def test_saved_model_variables_restore_into_a_lazily_built_model(tmp_path):
    """TF's SavedModel of the model: its ``variables/variables`` prefix is a checkpoint; tapejax
    lists it as TF does and restores it into a model built after the restore."""
    tm = make_model(realtf)
    tm.call = realtf.function(lambda x: tm(x), input_signature=[realtf.TensorSpec([None, 3], realtf.float32)])
    realtf.saved_model.save(tm, str(tmp_path / "sm"))
    prefix = str(tmp_path / "sm" / "variables" / "variables")
    assert tapejax.train.list_variables(prefix) == realtf.train.list_variables(prefix)
    jm = make_model(tapejax, lazy=True)
    status = tapejax.train.Checkpoint(jm).read(prefix)
    out = jm(tapejax.constant(X))
    status.assert_existing_objects_matched()
    close([out], [tm(realtf.constant(X))])


# -- tapejax -> TF: checkpoints ----------------------------------------------------------------------
def test_tapejax_checkpoint_is_its_own_format_tf_refuses_it(tmp_path):
    """tapejax writes its own format (a directory per checkpoint, orbax): TF's readers refuse it
    (load_checkpoint / list_variables: ValueError, restore: DataLossError), TF's
    ``latest_checkpoint`` reads its state file (both documented in tapejax/train/README.md)."""
    jm = make_model(tapejax)
    path = tapejax.train.Checkpoint(model=jm).save(str(tmp_path / "ckpt"))
    assert os.path.isdir(path) and realtf.train.latest_checkpoint(str(tmp_path)) == path
    assert outcome(lambda: realtf.train.load_checkpoint(path)) == "ValueError"
    assert outcome(lambda: realtf.train.list_variables(path)) == "ValueError"
    tm = make_model(realtf)
    assert outcome(lambda: realtf.train.Checkpoint(model=tm).restore(path)) == "DataLossError"
    assert tapejax.train.list_variables(path) == sorted(tapejax.train.list_variables(path))


# -- Keras 3 weight files, Keras 3 on TF's backend in its own process ---------------------------------
KERAS3_TF = textwrap.dedent("""
    import json, os, sys
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ["TF_USE_LEGACY_KERAS"] = "0"
    import numpy as np, keras
    d = sys.argv[1]
    x, y = np.load(os.path.join(d, "x.npy")), np.load(os.path.join(d, "y.npy"))
    def model():
        m = keras.Sequential([keras.Input((3,), name="features"), keras.layers.Dense(8, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(2)])
        m.compile(keras.optimizers.Adam(0.01), "mse")
        return m
    out = {}
    # a tapejax file: loaded here
    m = model()
    m.load_weights(os.path.join(d, "tapejax.weights.h5"))
    out["from_tapejax"] = m.predict(x, verbose=0).tolist()
    # trained here, saved for tapejax (optimizer state too), and trained on
    keras.utils.set_random_seed(3)
    m = model()
    m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    m.save_weights(os.path.join(d, "tf.weights.h5"))
    out["pred"] = m.predict(x, verbose=0).tolist()
    out["more"] = m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    out["after"] = [w.tolist() for w in m.get_weights()]
    print("RESULT" + json.dumps(out))
""")


def keras3_model(keras):
    m = keras.Sequential([keras.Input((3,), name="features"), keras.layers.Dense(8, activation="relu"),
                          keras.layers.BatchNormalization(), keras.layers.Dense(2)])
    m.compile(keras.optimizers.Adam(0.01), "mse")
    return m


def test_keras3_weight_files_both_ways(tmp_path):
    """``save_weights("x.weights.h5")``: a file written by tapejax's Keras loads in Keras 3 on TF
    (the same predictions), and one written there after 2 epochs of ``fit`` (Adam's state in it)
    loads into tapejax's model compiled alike: the same predictions, and 2 more epochs give TF's
    losses and weights (the optimizer's state and iterations carried over)."""
    import keras  # (Keras 3 on JAX in this process: tapejax's)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    mine = keras3_model(keras)
    keras.utils.set_random_seed(5)
    mine.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    mine.save_weights(str(tmp_path / "tapejax.weights.h5"))
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, "-c", KERAS3_TF, str(tmp_path)], capture_output=True, text=True,
                       timeout=240, env=env, cwd="/")
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1][6:])
    np.testing.assert_allclose(r["from_tapejax"], mine.predict(X, verbose=0), rtol=1e-5, atol=1e-6)

    theirs = keras3_model(keras)
    theirs.build((None, 3))
    theirs.optimizer.build(theirs.trainable_variables)
    theirs.load_weights(str(tmp_path / "tf.weights.h5"))
    np.testing.assert_allclose(theirs.predict(X, verbose=0), r["pred"], rtol=1e-5, atol=1e-6)
    more = theirs.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(more, r["more"], rtol=1e-4)
    close(theirs.get_weights(), r["after"], rtol=1e-4, atol=1e-5)
