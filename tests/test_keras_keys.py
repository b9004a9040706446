"""tapejax/keras/keys.py: call targets, keys and argument splitting."""
import gc
import types

import numpy as np
import pytest

import tapejax as tf

keras = tf.keras
keras.layers   # Keras loaded (and put on the tape) first: importing keys first would import Keras halfway

from tapejax.keras import keys  # noqa: E402


def test_split_and_join_round_trip_arrays_and_python_values():
    t = tf.constant([1.0, 2.0])
    a = np.ones((2, 2), np.float32)
    args, kwargs = ([t, {"b": a, "k": 3}], "s"), {"training": True, "mask": None}
    sp = keys.split(args, kwargs)
    assert sp.dyn[0] is t and sp.dyn[1] is a and not sp.symbolic
    assert [v for _, v in sp.static] == [3, "s", True]   # (None is structure, not a leaf)
    back = keys.join(sp.dyn, keys.CallKey(None, None, sp.tree, sp.static, None, (), None))
    assert back[0][0][0] is t and back[0][0][1]["k"] == 3 and back[1] == kwargs
    assert keys.split((keras.KerasTensor((2, 3)),), {}).symbolic


def test_targets_are_one_per_object_layers_weak_functions_strong():
    layer = keras.layers.Dense(2)
    tok = keys.target_of(layer, weak=True)
    assert keys.target_of(layer, weak=True) is tok and tok.get() is layer
    fn = keras.activations.relu
    ftok = keys.target_of(fn)
    assert ftok.get() is fn and ftok._ref is None
    del layer
    gc.collect()
    try:
        tok.get()
        raise AssertionError("a deleted layer's target must say so")
    except RuntimeError as e:
        assert "deleted" in str(e)


def test_has_tensor_looks_one_level_into_lists():
    t = tf.constant(1.0)
    assert keys.has_tensor((1, [2, t]), {}) and keys.has_tensor((), {"x": t})
    assert not keys.has_tensor((np.ones(2), [1.0]), {"x": 2})


def _stateful_and_plain(cls):
    """A stateful RNN layer (batch 2) and a plain one with the same weights."""
    inp = keras.Input(batch_shape=(2, 3, 2))
    rnn = cls(3, stateful=True, return_sequences=True)
    model = keras.Model(inp, rnn(inp))
    plain = cls(3, return_sequences=True)
    plain(np.zeros((2, 3, 2), np.float32))
    rs = np.random.RandomState(0)
    ws = [rs.randn(*w.shape).astype(np.float32) * 0.5 for w in rnn.get_weights()]
    rnn.set_weights(ws)
    plain.set_weights(ws)
    return model, rnn, plain


def test_a_stateful_rnns_untracked_state_variables_are_the_calls_state():
    """Keras 3 keeps a stateful RNN's states in untracked Variables (in no variable list); a
    top-level call reads them and writes the new states back, eagerly, in a tape and in a
    ``tapejax.function``, so chunks give what one call over the whole sequence gives (TF's
    ``stateful=True``); ``reset_states`` zeroes them.  tapejax's op took the states as constants
    (zeros) before, and every chunk started from zero."""
    x = np.random.RandomState(1).randn(2, 9, 2).astype(np.float32)
    for cls in (keras.layers.LSTM, keras.layers.GRU):
        model, rnn, plain = _stateful_and_plain(cls)
        assert any(v is rnn.states[0] for v in keys.layer_state(model).other)
        whole = plain(x).numpy()
        step = tf.function(lambda c: model(c))
        with tf.GradientTape() as tape:
            first = model(x[:, :3])
            loss = tf.reduce_sum(first)
        assert tape.gradient(loss, rnn.trainable_variables)[0] is not None
        chunks = [first, model(x[:, 3:6]), step(x[:, 6:])]
        np.testing.assert_allclose(np.concatenate([c.numpy() for c in chunks], 1), whole, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(rnn.states[0]), whole[:, -1], rtol=1e-5, atol=1e-6)
        rnn.reset_states()
        assert not np.asarray(rnn.states[0]).any()
        np.testing.assert_allclose(step(x[:, :3]).numpy(), whole[:, :3], rtol=1e-5, atol=1e-6)


def test_swappable_attributes_are_in_the_key_and_swapped_puts_the_recorded_ones_back():
    model = keras.Sequential([keras.layers.Dense(2, activation="relu"), keras.layers.Dense(1)])
    model.build((None, 3))
    layers = model._flatten_layers(include_self=True)
    attrs = keys.swappable(layers)
    relu = model.layers[0].activation
    assert [(name, v) for _, name, v in attrs][0] == ("activation", relu)
    model.layers[0].activation = keras.activations.tanh
    assert keys.swappable(layers) != attrs
    with keys.swapped(layers, attrs):
        assert model.layers[0].activation is relu
    assert model.layers[0].activation is keras.activations.tanh
    assert keys.swappable([object()]) == ()
    drop = keras.layers.Dropout(0.5)
    assert keys.swappable([drop]) == ((0, "rate", 0.5),)
    drop.rate = 0.1
    with keys.swapped([drop], ((0, "rate", 0.5),)):
        assert drop.rate == 0.5
    assert drop.rate == 0.1
    drop.rate = [0.1]   # (an unhashable value: left out of the key, as before)
    assert keys.swappable([drop]) == ()


def test_a_scalar_attribute_held_in_a_variable_is_keyed_by_its_present_value():
    """TF's eager Dropout reads a rate held in a tf.Variable at each call: the key holds the
    Variable's present value (an assign is another call); a compiled call cannot read it each time,
    so it raises rather than keep the first value."""
    drop = keras.layers.Dropout(tf.Variable(0.5), seed=1)
    assert keys.swappable([drop]) == ((0, "rate", 0.5),)
    x = tf.ones((2, 4))
    assert sorted(set(np.asarray(drop(x, training=True)).ravel())) == [0.0, 2.0]
    drop.rate.assign(0.0)
    assert keys.swappable([drop]) == ((0, "rate", 0.0),)
    assert set(np.asarray(drop(x, training=True)).ravel()) == {1.0}
    assert keys.swappable([types.SimpleNamespace(rate=tf.Variable(np.zeros(2, np.float32)))]) == ()   # (not a scalar)
    fresh = keras.layers.Dropout(tf.Variable(0.5))
    with pytest.raises(NotImplementedError, match="Dropout"):
        tf.function(lambda x: fresh(x, training=True))(x)
