"""tapejax/keras/data_adapter.py: ``fit`` / ``evaluate`` / ``predict`` take a ``tapejax.data.Dataset``
as TF's Keras takes a ``tf.data.Dataset`` (oracle: the same model fed the same batches as arrays)."""
import numpy as np
import pytest

import tapejax as tf

RS = np.random.RandomState(0)
X = RS.randn(12, 5).astype(np.float32)
Y = RS.randint(0, 3, size=12).astype(np.int32)


def _model():
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
    model.set_weights([np.linspace(-0.5, 0.5, 15, dtype=np.float32).reshape(5, 3), np.zeros(3, np.float32)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def test_fit_evaluate_predict_on_a_dataset_equal_the_same_batches_as_arrays():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    a, b = _model(), _model()
    ha = a.fit(ds, epochs=2, verbose=0, validation_data=ds)
    hb = b.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0, validation_data=(X, Y))
    for k in ("loss", "accuracy", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(ha.history[k], hb.history[k], rtol=1e-6)
    np.testing.assert_allclose(a.evaluate(ds, verbose=0), b.evaluate(X, Y, batch_size=4, verbose=0), rtol=1e-6)
    np.testing.assert_allclose(a.predict(ds.map(lambda x, y: x), verbose=0), b.predict(X, verbose=0), rtol=1e-6)
    for wa, wb in zip(a.weights, b.weights):
        np.testing.assert_allclose(wa.numpy(), wb.numpy(), rtol=1e-6)


def test_infinite_dataset_with_steps_per_epoch_and_class_weight_as_sample_weight():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    a, b = _model(), _model()
    ha = a.fit(ds.repeat(), steps_per_epoch=3, epochs=2, verbose=0, class_weight={0: 2.0, 2: 0.5})
    sw = np.array([{0: 2.0, 2: 0.5}.get(int(c), 1.0) for c in Y], np.float32)
    hb = b.fit(X, Y, sample_weight=sw, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(ha.history["loss"], hb.history["loss"], rtol=1e-6)


def test_targets_beside_a_dataset_are_refused_as_tf_refuses_them():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    model = _model()
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(ValueError, match="`y` should not be passed"):
        model.fit(ds, Y, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="sample_weights"):
        model.fit(ds, sample_weight=np.ones(12, np.float32), epochs=1, verbose=0)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, model.weights))
