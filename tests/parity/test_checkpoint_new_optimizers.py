"""Checkpoints of tf_keras' new optimizers (``tf.keras.optimizers.Adam`` ... in TF 2.11+, not
``.legacy``) between TensorFlow 2.21 and tapejax.

tf_keras' new optimizers save ``_iterations``, ``_learning_rate`` and their state in lists
(``_momentums``, ``_velocities``, indexed again in ``_variables``) that a restore matches by
position, in the order the optimizer builds its state (its first ``apply_gradients``): before
that, the state waits (``assert_consumed`` fails, ``assert_existing_objects_matched`` passes);
hyperparameters are Python floats and not saved.  tapejax's ``tf.keras.optimizers`` save the
same layout and restore TF's (``tapejax/train/trackable.py``, ``graph.slots_from_lists``); a
Keras 3 optimizer's checkpoint (which also lists ``_trainable_variables``) is matched by Variable.

TF runs in this process (``TF_USE_LEGACY_KERAS=1``: ``tf.keras`` is tf_keras) and is the oracle:
a checkpoint TF writes is resumed in TF and in tapejax, and the losses, Variables, iterations and
status outcomes are compared step by step.  Keras 3 on TF's backend runs in a subprocess.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
import tapejax  # noqa: E402

from .test_user_programs18c import ROOT, X, Y, close, make_model, outcome, train, values  # noqa: E402

NEW = {
    "SGD": dict(learning_rate=0.1, momentum=0.9),
    "SGD-nesterov": dict(learning_rate=0.1, momentum=0.5, nesterov=True),
    "RMSprop": dict(learning_rate=0.01, momentum=0.5, centered=True),
    "RMSprop-plain": dict(learning_rate=0.01),
    "Adam": dict(learning_rate=0.05),
    "Adam-amsgrad": dict(learning_rate=0.05, amsgrad=True),
    "Adam-ema": dict(learning_rate=0.05, use_ema=True, ema_momentum=0.5),
    "AdamW": dict(learning_rate=0.05, weight_decay=0.1),
    "Adamax": dict(learning_rate=0.05),
    "Adagrad": dict(learning_rate=0.1),
    "Adadelta": dict(learning_rate=1.0),
    "Ftrl": dict(learning_rate=0.1),
    "Nadam": dict(learning_rate=0.05),
    "Lion": dict(learning_rate=0.01),
    "Adafactor": dict(learning_rate=0.1),
}


def _opt(tf, name):
    return getattr(tf.keras.optimizers, name.split("-")[0])(**NEW[name])


@pytest.mark.parametrize("name", sorted(NEW))
def test_tf_checkpoint_of_a_new_optimizer_resumes_in_tapejax(name, tmp_path):
    """TF trains 3 steps and saves model and optimizer; a fresh model and optimizer in TF and in
    tapejax restore it and train 3 more: the same losses, Variables and iterations, the optimizer's
    state made by the first update and consumed then (``assert_consumed`` fails before it)."""
    tm, topt = make_model(realtf), _opt(realtf, name)
    train(realtf, tm, topt, 3)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))
    uninterrupted = train(realtf, tm, topt, 3), values(tm)

    def resume(tf):
        m, opt = make_model(tf), _opt(tf, name)
        status = tf.train.Checkpoint(model=m, optimizer=opt).restore(path)
        before = (outcome(status.assert_existing_objects_matched), outcome(status.assert_consumed),
                  int(opt.iterations.numpy()))
        losses = train(tf, m, opt, 3)
        return before, losses, values(m), int(opt.iterations.numpy()), outcome(status.assert_consumed)

    want, got = resume(realtf), resume(tapejax)
    assert got[0] == want[0] == ("ok", "AssertionError", 3)
    np.testing.assert_allclose(got[1], uninterrupted[0], rtol=2e-5)   # as if never interrupted
    close(got[2], uninterrupted[1])
    assert got[3:] == want[3:] == (6, "ok")
    if name == "Nadam":
        # Deliberate: tf_keras' Nadam counts the updates of its ``_u_product`` in a Python int
        # (``_u_product_counter``) that a restore does not bring back: it restarts at 1, so each
        # resumed step multiplies the restored product once per Variable until the count catches
        # up with ``iterations``, and TF's resumed losses leave its uninterrupted ones.
        assert not np.allclose(want[1], uninterrupted[0], rtol=2e-5)
        return
    np.testing.assert_allclose(got[1], want[1], rtol=2e-5)
    close(got[2], want[2])


def test_plain_sgd_state_of_tf_is_read_and_dropped(tmp_path):
    """tf_keras' SGD without momentum keeps ``momentums`` (the last ``-lr * g``, never read);
    tapejax's keeps nothing there (one buffer less per Variable; ``tapejax/train/README.md``):
    a restore reads those entries and drops them (``trackable.UnreadState``), so the training
    resumes exactly and ``assert_consumed`` passes, as TF's; only ``opt.variables`` differs."""
    tm, topt = make_model(realtf), realtf.keras.optimizers.SGD(0.1)
    train(realtf, tm, topt, 2)
    path = realtf.train.Checkpoint(model=tm, optimizer=topt).save(str(tmp_path / "ckpt"))

    def resume(tf):
        m, opt = make_model(tf), tf.keras.optimizers.SGD(0.1)
        status = tf.train.Checkpoint(model=m, optimizer=opt).restore(path)
        losses = train(tf, m, opt, 2)
        return (losses, values(m), int(opt.iterations.numpy()), len(opt.variables),
                outcome(status.assert_existing_objects_matched), outcome(status.assert_consumed))

    want, got = resume(realtf), resume(tapejax)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    close(got[1], want[1])
    assert want[2:] == (4, 1 + 4, "ok", "ok") and got[2:] == (4, 1, "ok", "ok")


def test_restore_matches_the_state_by_build_order(tmp_path):
    """TF's rule, kept: the lists are matched by position, so a program that builds its optimizer
    with the Variables in another order gets the state of other Variables (here the shapes agree:
    the two Variables are both [2]), and TF's and tapejax's numbers agree on that too.  The
    learning rate is restored (0.1 over the constructor's 0.5); the hyperparameters are not."""
    def program(tf, order):
        class M(tf.Module):
            def __init__(self):
                super().__init__()
                self.a = tf.Variable(np.array([1.0, -2.0], "float32"))
                self.b = tf.Variable(np.array([0.5, 3.0], "float32"))

        def step(m, opt, vs):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(m.a * 2.0 - m.b)) + tf.reduce_sum(m.b ** 4)
            opt.apply_gradients(zip(t.gradient(loss, vs), vs))
            return float(loss.numpy())
        return M, step

    M, step = program(realtf, True)
    m, opt = M(), realtf.keras.optimizers.Adam(0.1, beta_1=0.5)
    for _ in range(3):
        step(m, opt, [m.a, m.b])
    path = realtf.train.Checkpoint(m=m, opt=opt).save(str(tmp_path / "ckpt"))

    def resume(tf, swapped):
        M, step = program(tf, swapped)
        m, opt = M(), tf.keras.optimizers.Adam(0.5)
        tf.train.Checkpoint(m=m, opt=opt).restore(path)
        lr, beta_1 = float(opt.learning_rate.numpy()), float(opt.beta_1)
        vs = [m.b, m.a] if swapped else [m.a, m.b]
        return lr, beta_1, len(opt.variables), [step(m, opt, vs) for _ in range(3)]

    for swapped in (False, True):
        want, got = resume(realtf, swapped), resume(tapejax, swapped)
        assert got[:3] == pytest.approx(want[:3]) and want[:3] == pytest.approx((0.1, 0.9, 1))
        np.testing.assert_allclose(got[3], want[3], rtol=2e-5)
    assert resume(realtf, True)[3] != pytest.approx(resume(realtf, False)[3])   # (the order matters)


@pytest.mark.parametrize("name", ["Adam", "RMSprop", "Nadam", "SGD", "Adam-ema"])
def test_checkpoint_keys_are_tfs(name, tmp_path):
    """The same program saved by TF and by tapejax lists the same keys and shapes
    (``optimizer/_iterations``, ``optimizer/_variables/N``, model Variables by their paths)."""
    def keys(tf):
        m, opt = make_model(tf), _opt(tf, name)
        train(tf, m, opt, 1)
        path = tf.train.Checkpoint(model=m, optimizer=opt).write(str(tmp_path / tf.__name__ / "c"))
        return {k: tuple(s) for k, s in tf.train.list_variables(path) if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}

    assert keys(tapejax) == keys(realtf)


def test_tapejax_checkpoint_of_a_new_optimizer_resumes_in_tapejax_after_a_compiled_first_step(tmp_path):
    """tapejax to tapejax, the state waiting for an optimizer built inside a ``tf.function``'s first
    trace: the restored state is in place for that first call (TF's numbers)."""
    def run(tf):
        m, opt = make_model(tf), tf.keras.optimizers.Adam(0.05)
        train(tf, m, opt, 2)
        path = tf.train.Checkpoint(model=m, optimizer=opt).save(str(tmp_path / tf.__name__ / "ckpt"))
        want = train(tf, m, opt, 2)
        m2, opt2 = make_model(tf), tf.keras.optimizers.Adam(0.05)
        tf.train.Checkpoint(model=m2, optimizer=opt2).restore(path)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(m2(x) - y))
            vs = m2.trainable_variables
            opt2.apply_gradients(zip(t.gradient(loss, vs), vs))
            return loss

        return want, [float(step(tf.constant(X), tf.constant(Y)).numpy()) for _ in range(2)]

    in_tf, in_tapejax = run(realtf), run(tapejax)
    for want, got in (in_tf, in_tapejax):
        np.testing.assert_allclose(got, want, rtol=2e-5)
    np.testing.assert_allclose(in_tapejax[1], in_tf[1], rtol=2e-5)


_KERAS3_TF = textwrap.dedent("""
    import os, sys
    os.environ.pop("TF_USE_LEGACY_KERAS", None)
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, tensorflow as tf, keras
    a = tf.Variable(np.array([1.0, -2.0], "float32")); b = tf.Variable(np.array([[0.5, 3.0]], "float32"))
    opt = keras.optimizers.Adam(0.1)
    for _ in range(3):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(a * 2.0 - b)) + tf.reduce_sum(b ** 4)
        opt.apply_gradients(zip(t.gradient(loss, [b, a]), [b, a]))
    tf.train.Checkpoint(a=a, b=b, opt=opt).save(sys.argv[1])
    np.savez(sys.argv[2], a=a.numpy(), b=b.numpy(), mb=opt.variables[2].numpy(), ma=opt.variables[4].numpy())
""")


def test_a_keras3_optimizer_checkpoint_is_matched_by_variable(tmp_path):
    """Keras 3 on TF's backend saves ``_trainable_variables`` next to its lists: tapejax matches the
    state to the Variables they name, whatever order its own optimizer builds them in."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    subprocess.run([sys.executable, "-c", _KERAS3_TF, str(tmp_path / "ckpt"), str(tmp_path / "want.npz")],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=300)
    want = np.load(tmp_path / "want.npz")
    a, b = tapejax.Variable(np.zeros(2, "float32")), tapejax.Variable(np.zeros((1, 2), "float32"))
    opt = tapejax.keras.optimizers.Adam(0.5)
    opt.build([a, b])   # (the other order than Keras's [b, a])
    status = tapejax.train.Checkpoint(a=a, b=b, opt=opt).restore(str(tmp_path / "ckpt-1"))
    status.assert_consumed()
    np.testing.assert_array_equal(a.numpy(), want["a"])
    np.testing.assert_array_equal(opt.get_slot(a, "m").numpy(), want["ma"])
    np.testing.assert_array_equal(opt.get_slot(b, "m").numpy(), want["mb"])
    assert int(opt.iterations.numpy()) == 3 and float(opt.learning_rate.numpy()) == pytest.approx(0.1)
