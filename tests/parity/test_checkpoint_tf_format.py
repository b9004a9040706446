"""tapejax -> TF: ``Checkpoint.save(..., format="tf")`` / ``write(..., format="tf")`` write
TensorFlow's tensor bundle (``train/tf_format.write``), which TF 2.21 reads.

Each program trains in tapejax, saves in TF's format, and a fresh TF model and optimizer
restore it (``assert_consumed``) and train on; the oracle is TF trained the same number of
steps without the interruption, and tapejax itself training on.  Also: the keys are those of
TF's own checkpoint of the same program (``list_variables``), TF's ``latest_checkpoint``
finds the numbered save, an int64 Variable and the counters reach TF as int64, and tapejax
reads its TF-format checkpoint back (as any TF checkpoint).  TF runs in this process
(``TF_USE_LEGACY_KERAS=1``: ``tf.keras`` is tf_keras).
"""
import numpy as np
import pytest

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
import tapejax  # noqa: E402

from .test_user_programs18c import close, make_model, outcome, train, values  # noqa: E402

OPTIMIZERS = {
    "new-SGD": lambda tf: tf.keras.optimizers.SGD(0.1, momentum=0.9),
    "new-SGD-plain": lambda tf: tf.keras.optimizers.SGD(0.1),
    "new-Adam": lambda tf: tf.keras.optimizers.Adam(0.05),
    "new-RMSprop": lambda tf: tf.keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "new-Adagrad": lambda tf: tf.keras.optimizers.Adagrad(0.1),
    "new-Ftrl": lambda tf: tf.keras.optimizers.Ftrl(0.1),
    "legacy-Adam": lambda tf: tf.keras.optimizers.legacy.Adam(0.05),
    "legacy-SGD": lambda tf: tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    "legacy-RMSprop": lambda tf: tf.keras.optimizers.legacy.RMSprop(0.01, momentum=0.5, centered=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_tapejax_checkpoint_in_tf_format_resumes_in_tf(name, tmp_path):
    """tapejax trains 3 steps and saves model and optimizer in TF's format; TF restores into a
    fresh model and optimizer (everything consumed once its optimizer is built) and trains 3
    more: the losses and Variables of TF trained 6 steps straight, and of tapejax going on."""
    make = OPTIMIZERS[name]
    jm, jopt = make_model(tapejax), make(tapejax)
    train(tapejax, jm, jopt, 3)
    path = tapejax.train.Checkpoint(model=jm, optimizer=jopt).save(str(tmp_path / "ckpt"), format="tf")
    assert realtf.train.latest_checkpoint(str(tmp_path)) == path

    tm, topt = make_model(realtf), make(realtf)
    status = realtf.train.Checkpoint(model=tm, optimizer=topt).restore(path)
    resumed = train(realtf, tm, topt, 3)
    assert outcome(status.assert_consumed) == "ok"
    assert int(topt.iterations.numpy()) == 6 and int(tm.step.numpy()) == 6

    sm, sopt = make_model(realtf), make(realtf)
    straight = train(realtf, sm, sopt, 6)[3:]
    np.testing.assert_allclose(resumed, straight, rtol=2e-5)
    close(values(tm), values(sm))
    np.testing.assert_allclose(train(tapejax, jm, jopt, 3), resumed, rtol=2e-5)
    close(values(jm), values(tm))


def test_keys_and_dtypes_are_tfs(tmp_path):
    """The same program saved by TF and by tapejax in TF's format lists the same keys, shapes
    and dtypes (the int64 ``step``, ``save_counter`` and ``iter`` included, which tapejax holds
    as int32 without JAX's 64-bit mode)."""
    def save(tf, **kw):
        m, opt = make_model(tf), tf.keras.optimizers.legacy.Adam(0.05)
        train(tf, m, opt, 1)
        return tf.train.Checkpoint(model=m, optimizer=opt).save(str(tmp_path / tf.__name__ / "ckpt"), **kw)

    theirs, ours = save(realtf), save(tapejax, format="tf")
    assert realtf.train.list_variables(ours) == realtf.train.list_variables(theirs)
    rt, rj = realtf.train.load_checkpoint(theirs), realtf.train.load_checkpoint(ours)
    assert rj.get_variable_to_dtype_map() == rt.get_variable_to_dtype_map()
    assert rj.get_tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE") == 1


def test_tapejax_reads_its_tf_format_checkpoint(tmp_path):
    """A TF-format checkpoint written by tapejax restores in tapejax too (``write``, no state
    file): values, the optimizer's slots, and the int64 counters narrowed back."""
    m, opt = make_model(tapejax), tapejax.keras.optimizers.Adam(0.05)
    train(tapejax, m, opt, 2)
    path = tapejax.train.Checkpoint(model=m, optimizer=opt).write(str(tmp_path / "w"), format="tf")
    m2, opt2 = make_model(tapejax), tapejax.keras.optimizers.Adam(0.05)
    status = tapejax.train.Checkpoint(model=m2, optimizer=opt2).read(path)
    np.testing.assert_allclose(train(tapejax, m2, opt2, 2), train(tapejax, m, opt, 2), rtol=1e-6)
    status.assert_consumed()
    close(values(m2), values(m))
    assert int(opt2.iterations.numpy()) == 4 and int(m2.step.numpy()) == 4
