"""tapejax/keras/rnn_states.py where TF is not the oracle (TF's values under the loops:
tests/parity/test_keras_stateful_loops.py): the state Variables are listed only for the model whose
Keras loop runs, only while it runs, and never among its weights."""
import numpy as np
import pytest

import tapejax as tf

pytest.importorskip("keras")


def _model():
    inp = tf.keras.Input(shape=(3, 2), batch_size=2)
    return tf.keras.Model(inp, tf.keras.layers.Dense(1)(tf.keras.layers.GRU(3, stateful=True)(inp)))


def test_states_listed_only_while_the_models_loop_runs():
    from tapejax.keras import rnn_states
    model, other = _model(), _model()
    states = rnn_states.rnn_state_variables(model)
    assert len(states) == 1 and tuple(states[0].shape) == (2, 3)
    base = list(model.non_trainable_variables)
    assert all(s is not v for s in states for v in base)
    seen = {}

    class Peek(tf.keras.callbacks.Callback):
        def on_predict_batch_end(self, batch, logs=None):
            seen["model"] = list(model.non_trainable_variables)
            seen["other"] = list(other.non_trainable_variables)

    model.predict(np.zeros((2, 3, 2), np.float32), batch_size=2, verbose=0, callbacks=[Peek()])
    assert any(v is states[0] for v in seen["model"]) and len(seen["model"]) == len(base) + 1
    assert all(v is not s for v in seen["other"] for s in rnn_states.rnn_state_variables(other))
    assert [id(v) for v in model.non_trainable_variables] == [id(v) for v in base]
    assert len(model.get_weights()) == len(model.weights)


def test_a_model_without_stateful_layers_is_untouched():
    from tapejax.keras import rnn_states
    inp = tf.keras.Input(shape=(3, 2))
    model = tf.keras.Model(inp, tf.keras.layers.GRU(3)(inp))
    assert rnn_states.rnn_state_variables(model) == []
    out = model.predict(np.ones((4, 3, 2), np.float32), batch_size=2, verbose=0)
    np.testing.assert_allclose(out[:2], out[2:], rtol=1e-6)   # (no state: equal inputs, equal outputs)
