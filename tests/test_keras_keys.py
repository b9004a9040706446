"""tapejax/keras/keys.py: call targets, keys and argument splitting."""
import gc

import numpy as np

import tapejax as tf
from tapejax.keras import keys

keras = tf.keras


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
