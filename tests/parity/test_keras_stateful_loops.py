"""Stateful recurrent layers under Keras's own loops (``tapejax/keras/rnn_states.py``), under real
TensorFlow 2.21 (tf_keras) and tapejax (Keras 3 on JAX): ``predict`` and ``evaluate`` carry the
states from batch to batch and from call to call, as TF's do, ``reset_states`` starts again from
zeros, and ``fit`` trains from the carried states (a string optimizer and a tf.keras one).
Every weight is set from NumPy.
"""
import numpy as np

from .harness import init_array, parity

KTOL = dict(rtol=2e-4, atol=2e-5)
X = np.random.RandomState(0).randn(6, 3, 2).astype(np.float32)
Y = np.random.RandomState(1).randn(6, 1).astype(np.float32)


def _model(tf, layer="LSTM"):
    inp = tf.keras.Input(shape=(3, 2), batch_size=2)
    h = getattr(tf.keras.layers, layer)(3, stateful=True)(inp)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(1)(h))
    model.set_weights([init_array(tuple(w.shape), 40 + i, 0.5) for i, w in enumerate(model.get_weights())])
    return model


@parity(**KTOL)
def test_predict_and_evaluate_carry_states(tf):
    """``predict`` twice over three batches (the second call starts from the first's last
    states), ``reset_states`` and ``predict`` again (as the first), ``evaluate`` (its loss from the
    carried states), and the number of weights (the states are not among them)."""
    model = _model(tf)
    model.compile(loss="mse")
    p1 = model.predict(X, batch_size=2, verbose=0)
    p2 = model.predict(X, batch_size=2, verbose=0)
    model.reset_states()
    p3 = model.predict(X, batch_size=2, verbose=0)
    loss = model.evaluate(X, Y, batch_size=2, verbose=0)
    return p1, p2, p3, loss, len(model.get_weights())


@parity(**KTOL)
def test_gru_predict_on_batch_carries_states(tf):
    """A stateful GRU: ``predict_on_batch`` three times on one batch, each from the last states."""
    model = _model(tf, "GRU")
    return [model.predict_on_batch(X[:2]) for _ in range(3)]


@parity(**KTOL)
def test_fit_trains_from_carried_states(tf):
    """``fit`` (no shuffling, two epochs of three batches, ``reset_states`` between epochs by a
    callback as TF's stateful examples do) with a string optimizer and with a tf.keras one: the
    losses, the weights, and a prediction after."""
    out = []
    for opt in ("sgd", tf.keras.optimizers.Adam(0.01)):
        model = _model(tf)
        model.compile(optimizer=opt, loss="mse")
        reset = tf.keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: model.reset_states())
        hist = model.fit(X, Y, batch_size=2, epochs=2, shuffle=False, verbose=0, callbacks=[reset])
        out += [hist.history["loss"], [w for w in model.get_weights()], model.predict(X[:2], batch_size=2, verbose=0)]
    return out
