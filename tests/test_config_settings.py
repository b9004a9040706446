"""``tapejax.compat.config_settings``: ``tf.config``'s settings JAX fixes at start or has no switch
for.  Oracle: TF 2.21's values, read back in a fresh TF process (written here), and JAX's own
configuration where a setting maps onto it."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


@pytest.fixture
def restore():
    precision = jax.config.jax_default_matmul_precision  # pyright: ignore[reportAttributeAccessIssue]
    jax.config.update("jax_default_matmul_precision", None)   # (JAX's default, whatever the environment set)
    yield
    jax.config.update("jax_default_matmul_precision", precision)


def test_tensor_float_32_is_jax_default_matmul_precision(restore):
    """Enabled by default (TF's); False sets JAX's ``highest`` precision (traced programs then use
    it) and True restores the default."""
    assert tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    assert not tf.config.experimental.tensor_float_32_execution_enabled()
    assert jax.config.jax_default_matmul_precision == "highest"  # pyright: ignore[reportAttributeAccessIssue]
    text = jax.jit(lambda a, b: a @ b).lower(jnp.ones((2, 2)), jnp.ones((2, 2))).as_text()
    assert "HIGHEST" in text or "highest" in text
    np.testing.assert_allclose(np.asarray(tf.ones([2, 2]) @ tf.ones([2, 2])), 2 * np.ones((2, 2)))
    tf.config.experimental.enable_tensor_float_32_execution(True)
    assert tf.config.experimental.tensor_float_32_execution_enabled()
    assert jax.config.jax_default_matmul_precision is None  # pyright: ignore[reportAttributeAccessIssue]


def test_kept_settings_read_back_as_tf_gives_them():
    """threading, optimizer and device-policy settings keep TF's values (TF 2.21: 0 threads by
    default, ``get_jit`` ``''`` then ``'autoclustering'`` for True, Grappler's two default options
    beside the ones set, policy ``silent``, synchronous execution True)."""
    from tapejax.compat import config_settings as cs
    saved = (dict(cs._THREADS), list(cs._JIT), dict(cs._OPTIONS), list(cs._POLICY), list(cs._SYNC))
    try:
        assert tf.config.threading.get_intra_op_parallelism_threads() == 0
        tf.config.threading.set_intra_op_parallelism_threads(3)
        tf.config.threading.set_inter_op_parallelism_threads(2)
        assert (tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads()) == (3, 2)
        with pytest.raises(TypeError, match="num_threads"):
            tf.config.threading.set_intra_op_parallelism_threads("a")
        assert tf.config.optimizer.get_jit() == ""
        for value, want in ((True, "autoclustering"), (False, ""), ("autoclustering", "autoclustering"), ("bogus", "")):
            tf.config.optimizer.set_jit(value)
            assert tf.config.optimizer.get_jit() == want
        assert tf.config.optimizer.get_experimental_options() == {"disable_model_pruning": False,
                                                                 "disable_meta_optimizer": False}
        tf.config.optimizer.set_experimental_options({"layout_optimizer": False, "constant_folding": True})
        assert tf.config.optimizer.get_experimental_options() == {
            "layout_optimizer": False, "constant_folding": True, "disable_model_pruning": False,
            "disable_meta_optimizer": False}
        with pytest.raises(TypeError, match="options"):
            tf.config.optimizer.set_experimental_options([("a", 1)])
        assert tf.config.experimental.get_device_policy() == "silent"
        tf.config.experimental.set_device_policy("warn")
        assert tf.config.experimental.get_device_policy() == "warn"
        with pytest.raises(ValueError, match="device_policy"):
            tf.config.experimental.set_device_policy("bogus")
        assert tf.config.experimental.get_synchronous_execution() is True
        tf.config.experimental.set_synchronous_execution(False)
        assert tf.config.experimental.get_synchronous_execution() is False
    finally:
        cs._THREADS.update(saved[0])
        cs._JIT[:], cs._POLICY[:], cs._SYNC[:] = saved[1], saved[3], saved[4]
        cs._OPTIONS.clear()
        cs._OPTIONS.update(saved[2])


def test_logical_device_configuration_accepts_the_devices_as_they_are():
    """None until set; one configuration without a memory limit is kept; several, or a memory
    limit, is TF's RuntimeError after start naming JAX's flags; a device that is not here is
    ValueError; the experimental virtual-device names are the same functions."""
    from tapejax.compat import config_settings as cs
    cpu = tf.config.list_physical_devices("CPU")[0]
    cs.LOGICAL.pop(cpu, None)
    try:
        assert tf.config.get_logical_device_configuration(cpu) is None
        conf = tf.config.LogicalDeviceConfiguration()
        assert conf == (None, None, None) and conf.memory_limit is None
        tf.config.set_logical_device_configuration(cpu, [conf])
        assert tf.config.get_logical_device_configuration(cpu) == [conf]
        assert tf.config.experimental.get_virtual_device_configuration(cpu) == [conf]
        with pytest.raises(RuntimeError, match="xla_force_host_platform_device_count"):
            tf.config.set_logical_device_configuration(cpu, [conf, conf])
        with pytest.raises(RuntimeError, match="cannot be modified"):
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration(memory_limit=100)])
        with pytest.raises(ValueError, match="LogicalDeviceConfiguration"):
            tf.config.set_logical_device_configuration(cpu, [object()])
        with pytest.raises(ValueError, match="Unrecognized device"):
            tf.config.set_logical_device_configuration(tf.config.PhysicalDevice("/physical_device:GPU:7", "GPU"), [conf])
        assert tf.config.get_logical_device_configuration(cpu) == [conf]
    finally:
        cs.LOGICAL.pop(cpu, None)


def test_op_determinism_and_the_old_eager_names(caplog):
    """``enable_op_determinism`` is recorded (nothing logged on the CPU, where XLA is
    deterministic); ``experimental_functions_run_eagerly`` / ``experimental_run_functions_eagerly``
    are TF's older names of the function switch."""
    from tapejax.compat import config_settings as cs
    saved = cs._DETERMINISM[0]
    try:
        with caplog.at_level("WARNING", logger="tapejax"):
            tf.config.experimental.enable_op_determinism()
        assert cs.op_determinism_enabled()
        assert not [r for r in caplog.records if "deterministic" in r.getMessage()] or jax.default_backend() == "gpu"
    finally:
        cs._DETERMINISM[0] = saved
    assert tf.config.experimental_functions_run_eagerly() is False
    tf.config.experimental_run_functions_eagerly(True)
    try:
        assert tf.config.functions_run_eagerly() is True
    finally:
        tf.config.run_functions_eagerly(False)
