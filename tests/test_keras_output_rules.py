"""tapejax/keras/output_rules.py: tf_keras' rules for a model with a list of outputs under
compile / fit / evaluate (no target for an output with no loss, each output's loss logged,
``sample_weight`` keyed by output name, ``metrics_names`` and ``evaluate``'s order).  Oracles: TF 2.21 with tf_keras, printed in full."""
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras
import keras as K3  # noqa: E402

RS = np.random.RandomState(0)
X = RS.randn(8, 4).astype(np.float32)
Y = RS.randint(0, 3, 8).astype(np.int32)
T = RS.randn(8, 1).astype(np.float32)
LOSS, EVAL, MAE = 1.254887342453003, 1.127711534500122, (2.0745961666107178, 2.0263373851776123)


def two_heads():
    inp = keras.Input((4,), name="features")
    hid = keras.layers.Dense(5, activation="relu", name="hid")(inp)
    model = keras.Model(inp, [keras.layers.Dense(3, name="cls")(hid), keras.layers.Dense(1, name="reg")(hid)])
    rs = np.random.RandomState(1)
    model.set_weights([rs.randn(*w.shape).astype(np.float32) * 0.5 for w in model.get_weights()])
    return model


def _sce():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.mark.parametrize("loss, y", [
    (lambda: {"cls": _sce()}, {"cls": Y}),                  # the guide's dict naming one output
    (lambda: {"cls": _sce(), "reg": None}, {"cls": Y}),
    (lambda: {"cls": _sce(), "reg": None}, {"cls": Y, "reg": T}),
    (lambda: [_sce(), None], [Y, T]),
    (lambda: [_sce(), None], Y),                            # the guide's ``[None, loss]`` shape, one target
], ids=["dict-missing-key", "dict-none-one-target", "dict-none-both", "list-none-both", "list-none-one-array"])
def test_an_output_with_no_loss_needs_no_target_and_each_loss_is_logged(loss, y):
    """tf_keras takes the targets of the outputs with losses only, and logs ``cls_loss`` for a model
    of several outputs; Keras 3 raised KeyError (a target per output) or logged only ``loss``."""
    model = two_heads()
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=loss())
    hist = model.fit(X, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert sorted(hist.history) == ["cls_loss", "loss"]
    np.testing.assert_allclose([hist.history["loss"][0], hist.history["cls_loss"][0]], [LOSS, LOSS], rtol=1e-5)
    np.testing.assert_allclose(model.evaluate(X, y, verbose=0), [EVAL, EVAL], rtol=1e-5)


def test_a_metric_on_the_output_with_no_loss_and_one_on_the_other_with_a_missing_target():
    model = two_heads()
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss={"cls": _sce(), "reg": None}, metrics={"reg": "mae"})
    hist = model.fit(X, {"cls": Y, "reg": T}, batch_size=4, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose([hist.history[k][0] for k in ("loss", "cls_loss", "reg_mae")], [LOSS, LOSS, MAE[0]],
                               rtol=1e-5)
    np.testing.assert_allclose(model.evaluate(X, {"cls": Y, "reg": T}, verbose=0), [EVAL, EVAL, MAE[1]], rtol=1e-5)
    model = two_heads()
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss={"cls": _sce()}, metrics={"cls": "accuracy"})
    hist = model.fit(X, {"cls": Y}, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert sorted(hist.history) == ["cls_accuracy", "cls_loss", "loss"] and hist.history["cls_accuracy"] == [0.5]


def test_sample_weight_dict_keyed_by_output_name_for_a_list_of_outputs():
    """tf_keras takes ``sample_weight={"b": wb, "a": wa}`` for ``Model(inp, [a, b])`` (weights matched
    by output name); Keras 3 looked them up by position (KeyError: 0).  TF: evaluate
    ``[1.917092, 1.229592, 0.6875]``, fit's losses ``[1.917092, 1.494287]``."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    y = {"a": np.array([[1.0], [0.0], [2.0], [1.0]], np.float32),
         "b": np.array([[0.5], [1.0], [0.0], [-1.0]], np.float32)}
    inp = keras.Input((2,))
    model = keras.Model(inp, [keras.layers.Dense(1, name="a", kernel_initializer="ones")(inp),
                              keras.layers.Dense(1, name="b", kernel_initializer="zeros")(inp)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    sw = {"b": np.array([1.0, 0.5, 0.0, 2.0], np.float32), "a": np.array([0.0, 1.0, 2.0, 1.0], np.float32)}
    np.testing.assert_allclose(model.evaluate(x, y, sample_weight=sw, verbose=0), [1.917092, 1.229592, 0.6875],
                               rtol=1e-5)
    hist = model.fit(x, y, sample_weight=sw, batch_size=4, epochs=2, verbose=0)
    np.testing.assert_allclose(hist.history["loss"], [1.917092, 1.494287], rtol=1e-5)
    np.testing.assert_allclose(hist.history["b_loss"], [0.6875, 0.436194], rtol=1e-5)


def _with_metrics(optimizer):
    model = two_heads()
    model.compile(optimizer=optimizer, loss={"cls": _sce(), "reg": "mse"},
                  metrics={"cls": ["accuracy"], "reg": [keras.metrics.RootMeanSquaredError(name="rmse"), "mae"]},
                  weighted_metrics={"cls": [keras.metrics.SparseCategoricalAccuracy(name="wacc")], "reg": ["mse"]})
    return model


def test_metrics_names_and_evaluate_order_are_tf_keras_with_a_tapejax_optimizer():
    """tf_keras (TF 2.21): ``metrics_names`` is ``[]`` before the model meets data, then the loss,
    each output's loss, per output its metrics then its weighted ones, in compile's order;
    ``evaluate``'s list follows it.  Keras 3 lists ``compile_metrics`` and sorts the list by name,
    which a Keras 3 optimizer keeps."""
    model = _with_metrics(tf.keras.optimizers.SGD(0.1))
    assert model.metrics_names == []
    results = model.evaluate(X, {"cls": Y, "reg": T}, verbose=0)
    names = ["loss", "cls_loss", "reg_loss", "cls_accuracy", "cls_wacc", "reg_rmse", "reg_mae", "reg_mse"]
    assert model.metrics_names == names
    logs = model.evaluate(X, {"cls": Y, "reg": T}, verbose=0, return_dict=True)
    np.testing.assert_allclose(results, [logs[n] for n in names], rtol=1e-6)
    assert logs["reg_rmse"] ** 2 == pytest.approx(logs["reg_mse"], rel=1e-5)
    other = _with_metrics(K3.optimizers.SGD(0.1))
    other.evaluate(X, {"cls": Y, "reg": T}, verbose=0)
    assert other.metrics_names == ["loss", "compile_metrics", "cls_loss", "reg_loss"]
