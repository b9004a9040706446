"""tapejax-only checks of tf.data.experimental's pieces that have no TF oracle in-process:
``enable_debug_mode`` (global in TF too; restored here), ``Optional``'s argument checks, where
``copy_to_device`` leaves elements, and ``Options``' enum fields merging."""
import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.data import options as _options

E = tf.data.experimental


def test_debug_mode_runs_map_functions_eagerly_per_element_without_threads():
    calls = []

    def f(x):
        calls.append(type(x.value).__name__)   # a concrete array when eager, a tracer when traced
        return x * 2
    try:
        E.enable_debug_mode()
        ds = tf.data.Dataset.range(4).map(f, num_parallel_calls=4).prefetch(2)
        traced = len(calls)
        out = [int(v) for v in ds]
    finally:
        _options.toggle_debug_mode(False)
    assert out == [0, 2, 4, 6]
    assert len(calls) == traced + 4 and all("Tracer" not in c for c in calls[traced:])


def test_debug_mode_is_refused_inside_a_trace():
    @tf.function
    def g():
        E.enable_debug_mode()
        return tf.constant(1)
    with pytest.raises(ValueError, match="only supported in eager mode"):
        g()
    assert not _options.debug_mode()


def test_optional_arguments_are_checked():
    with pytest.raises(TypeError, match="element_spec"):
        tf.experimental.Optional.empty(3)
    with pytest.raises(TypeError, match="from_value"):
        tf.experimental.Optional(1, None)
    o = tf.experimental.Optional.from_value({"a": np.ones(2, np.float32)})
    assert repr(o).startswith("<Optional (has a value)")


def test_copy_to_device_leaves_elements_on_the_named_device():
    cpu = jax.devices("cpu")[0]
    ds = tf.data.Dataset.range(3).apply(E.prefetch_to_device("/job:localhost/replica:0/task:0/device:CPU:0"))
    assert all(t.value.devices() == {cpu} for t in ds)
    with pytest.raises(TypeError, match="target_device"):
        tf.data.Dataset.range(3).apply(E.copy_to_device(3))


def test_options_enum_fields_merge_and_default():
    a, b = tf.data.Options(), tf.data.Options()
    assert a.experimental_distribute.auto_shard_policy is E.AutoShardPolicy.AUTO
    a.experimental_distribute.auto_shard_policy = E.AutoShardPolicy.FILE
    b.experimental_distribute.num_devices = 2
    merged = a.merge(b)
    assert merged.experimental_distribute.auto_shard_policy is E.AutoShardPolicy.FILE
    assert merged.experimental_distribute.num_devices == 2
    with pytest.raises(TypeError, match="ExternalStatePolicy"):
        a.experimental_external_state_policy = 1


def test_an_optional_is_a_pytree_of_its_flag_and_value():
    """``data/optional.py``: an Optional flattens to ``has_value()`` and its value's components (zeros
    of the spec when empty) and unflattens to one with the same spec; a converted ``while`` can carry
    it, and an empty one of an unknown shape is a ValueError naming the spec."""
    o = tf.experimental.Optional.from_value({"b": np.ones(2, np.float32), "a": np.float32(3)})
    leaves, tree = jax.tree_util.tree_flatten(o)
    assert [np.asarray(x._value).tolist() for x in leaves] == [True, 3.0, [1.0, 1.0]]
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.element_spec == o.element_spec and bool(back.has_value())
    np.testing.assert_array_equal(back.get_value()["b"].numpy(), [1.0, 1.0])
    empty = tf.experimental.Optional.empty(tf.TensorSpec([2], tf.float32))
    leaves = jax.tree_util.tree_leaves(empty)
    assert [np.asarray(x._value).tolist() for x in leaves] == [False, [0.0, 0.0]]
    with pytest.raises(ValueError, match="not fully defined"):
        jax.tree_util.tree_leaves(tf.experimental.Optional.empty(tf.TensorSpec([None], tf.float32)))

    @tf.function
    def first_above(ds_iter, limit):
        opt = ds_iter.get_next_as_optional()
        while opt.has_value() and opt.get_value() <= limit:
            opt = ds_iter.get_next_as_optional()
        return opt.has_value(), opt.get_value()

    found, value = first_above(iter(tf.data.Dataset.from_tensor_slices([1.0, 4.0, 9.0, 2.0])), tf.constant(3.0))
    assert bool(found) and float(value) == 4.0


def test_a_function_returns_and_takes_an_optional():
    """An Optional returned by a ``tapejax.function`` holds the program's values (its flag and value
    are outputs, ``signature.TreeOut``), and one passed in is read by a ``tf.cond`` (TF's 4.0, 5.0, 6.0)."""
    @tf.function
    def make(x):
        return tf.experimental.Optional.from_value(x * 2.0)

    @tf.function
    def use(o):
        return tf.cond(o.has_value(), lambda: o.get_value() + 1.0, lambda: tf.constant(0.0))

    o = make(tf.constant(2.0))
    assert bool(o.has_value().numpy()) and float(o.get_value().numpy()) == 4.0
    assert float(use(o)) == 5.0 and float(use(tf.experimental.Optional.from_value(tf.constant(5.0)))) == 6.0
