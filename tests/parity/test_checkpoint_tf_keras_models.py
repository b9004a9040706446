"""tf_keras models' weights, as TF 2.21 writes them (``tf.train.Checkpoint(model=...)`` and
TF-format ``model.save_weights(prefix)``), loaded into the same model built with tapejax's
``tf.keras`` (Keras 3 on JAX): the names are tf_keras' (``layer_with_weights-N``, the layers'
attribute names), found by ``tapejax/keras/hooks.py``'s ``tf_keras_lookup``; ``load_weights`` of a
TF-format prefix returns the load status, as tf_keras'.  Oracle: the TF model's outputs and weights.
"""
import numpy as np
import pytest

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
import tapejax  # noqa: E402

from .test_user_programs18c import close, outcome  # noqa: E402

RNG = np.random.RandomState(0)
X = RNG.randn(4, 6, 5).astype("float32")
IDS = RNG.randint(1, 12, (4, 6))


def _functional(k):
    inp = k.Input((6, 5))
    h = k.layers.Conv1D(4, 3, padding="same", activation="relu")(inp)
    h = k.layers.BatchNormalization()(h)
    h = k.layers.Dropout(0.2)(h)
    h = k.layers.LayerNormalization()(h)
    h = k.layers.Bidirectional(k.layers.GRU(3, return_sequences=True))(h)
    h = k.layers.MultiHeadAttention(num_heads=2, key_dim=2)(h, h)
    h = k.layers.GlobalAveragePooling1D()(h)
    return k.Model(inp, k.layers.Dense(2)(h))


def _sequential(k):
    return k.Sequential([k.Input((6,), dtype="int32"), k.layers.Embedding(12, 4, mask_zero=True),
                         k.layers.LSTM(5), k.layers.Dense(3, activation="tanh"), k.layers.Dense(1)])


def _nested(k):
    inner = k.Sequential([k.Input((5,)), k.layers.Dense(4), k.layers.Dense(3)])
    inp = k.Input((6, 5))
    h = k.layers.TimeDistributed(inner)(inp)
    return k.Model(inp, k.layers.Dense(1)(k.layers.Flatten()(h)))


MODELS = {"functional": (_functional, X), "sequential": (_sequential, IDS), "nested": (_nested, X)}


def _trained_tf_model(make, x):
    m = make(realtf.keras)
    m(x)
    r = np.random.RandomState(1)
    for v in m.weights:   # weights far from any initialiser, moving variances positive
        v.assign(np.abs(r.randn(*v.shape)).astype(v.dtype.as_numpy_dtype) * 0.3 + 0.1)
    return m


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("how", ["checkpoint", "save_weights"])
def test_tf_keras_weights_load_into_tapejax_keras(name, how, tmp_path):
    make, x = MODELS[name]
    tm = _trained_tf_model(make, x)
    want = tm(x, training=False).numpy()
    jm = make(tapejax.keras)
    if how == "checkpoint":
        path = realtf.train.Checkpoint(model=tm).write(str(tmp_path / "ckpt"))
        status = tapejax.train.Checkpoint(model=jm).read(path)
    else:
        tm.save_weights(str(tmp_path / "weights"))
        status = jm.load_weights(str(tmp_path / "weights"))
    status.assert_consumed()
    close([np.asarray(w.numpy()) for w in jm.weights], [w.numpy() for w in tm.weights], rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(jm(x, training=False)), want, rtol=1e-4, atol=1e-5)


def test_save_weights_of_a_compiled_model_restores_the_weights_not_the_optimizer(tmp_path):
    """tf_keras saves a compiled model's optimizer with its weights; a tapejax model compiled with a
    Keras 3 optimizer gets the weights, and the optimizer's values stay unrestored (TF's status:
    ``assert_consumed`` raises, ``assert_existing_objects_matched`` passes)."""
    tm = _sequential(realtf.keras)
    tm.compile(optimizer="adam", loss="mse")
    tm.fit(IDS, np.ones((4, 1), "float32"), verbose=0)
    tm.save_weights(str(tmp_path / "weights"))
    jm = _sequential(tapejax.keras)
    status = jm.load_weights(str(tmp_path / "weights"))
    assert outcome(status.assert_existing_objects_matched) == "ok"
    assert outcome(status.assert_consumed) == "AssertionError"
    status.expect_partial()
    np.testing.assert_allclose(np.asarray(jm(IDS)), tm(IDS).numpy(), rtol=1e-4, atol=1e-5)


def test_load_weights_errors_and_keras_files(tmp_path):
    """``by_name`` / ``skip_mismatch`` with TF-format weights: tf_keras' NotImplementedError; a shape
    mismatch: ValueError with nothing changed; Keras's own ``.weights.h5`` still loads."""
    tm = _trained_tf_model(_sequential, IDS)
    tm.save_weights(str(tmp_path / "weights"))
    jm = _sequential(tapejax.keras)
    with pytest.raises(NotImplementedError):
        jm.load_weights(str(tmp_path / "weights"), skip_mismatch=True)
    wrong = tapejax.keras.Sequential([tapejax.keras.Input((6,), dtype="int32"), tapejax.keras.layers.Embedding(12, 5),
                                      tapejax.keras.layers.LSTM(5), tapejax.keras.layers.Dense(3),
                                      tapejax.keras.layers.Dense(1)])
    before = [np.asarray(w.numpy()) for w in wrong.weights]
    with pytest.raises(ValueError, match="incompatible tensor with shape"):
        wrong.load_weights(str(tmp_path / "weights"))
    close([np.asarray(w.numpy()) for w in wrong.weights], before, rtol=0, atol=0)
    jm.load_weights(str(tmp_path / "weights"))
    jm.save_weights(str(tmp_path / "k.weights.h5"))
    again = _sequential(tapejax.keras)
    assert again.load_weights(str(tmp_path / "k.weights.h5")) is None
    close([np.asarray(w.numpy()) for w in again.weights], [w.numpy() for w in tm.weights], rtol=0, atol=0)


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop", "adagrad", "sgd"])
def test_a_compiled_tf_keras_model_resumes_fit_in_tapejax(optimizer, tmp_path):
    """The tutorial's resume: tf_keras trains a compiled model one epoch and ``save_weights`` (the
    optimizer's state too); the same model compiled in tapejax (Keras 3's optimizer of that name)
    ``load_weights`` and ``fit`` two more epochs: TF's losses, weights and iterations, the
    optimizer's state restored when ``fit`` builds it (the lists by position).  Plain SGD: TF's
    unused ``momentums`` stay unrestored (``tapejax/train/README.md``, "Known gaps")."""
    x = RNG.randn(32, 5).astype("float32")
    y = RNG.randn(32, 1).astype("float32")

    def build(k):
        m = k.Sequential([k.Input((5,)), k.layers.Dense(8, activation="tanh"), k.layers.Dense(1)])
        m.compile(optimizer=optimizer, loss="mse")
        return m

    tm = build(realtf.keras)
    tm.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    tm.save_weights(str(tmp_path / "weights"))
    want = tm.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False).history["loss"]
    jm = build(tapejax.keras)
    status = jm.load_weights(str(tmp_path / "weights"))
    got = jm.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False).history["loss"]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    close([np.asarray(w.numpy()) for w in jm.weights], [w.numpy() for w in tm.weights], rtol=1e-4, atol=1e-5)
    assert int(np.asarray(jm.optimizer.iterations.numpy())) == int(tm.optimizer.iterations.numpy()) == 12
    assert outcome(status.assert_consumed) == ("AssertionError" if optimizer == "sgd" else "ok")
