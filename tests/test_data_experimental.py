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
