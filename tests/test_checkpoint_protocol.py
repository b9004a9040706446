"""The trackable protocol (``trackable.py``): other object kinds (a Keras-like layer that is not a
tapejax.Module, a foreign variable type) join checkpoints through methods or registered adapters,
deferred restoration included.  Oracle: the values saved."""
import numpy as np
import pytest

import tapejax as tf


class ForeignVariable:
    """A variable type tapejax does not know (as a Keras variable would be)."""

    def __init__(self, value):
        self.value = np.asarray(value, "float32")
        self.shape = self.value.shape
        self.dtype = self.value.dtype
        self.name = "foreign"

    def assign(self, x):
        self.value = np.asarray(x, "float32").reshape(self.shape)


class Layer:
    """A layer built on its first call, tracked through a registered adapter."""

    def __init__(self, units):
        self.units = units
        self.kernel = None
        self.extra = ForeignVariable([1.0, 2.0])

    def build(self, n):
        self.kernel = tf.Variable(np.zeros((n, self.units), "float32"), name="kernel")
        tf.train.track(self, "kernel", self.kernel)   # a child appeared: a waiting restore applies now

    def __call__(self, x):
        if self.kernel is None:
            self.build(x.shape[-1])
        return tf.matmul(x, self.kernel)


tf.train.register_trackable(Layer, children=lambda layer: [(n, v) for n, v in
                                                           (("kernel", layer.kernel), ("extra", layer.extra))
                                                           if v is not None])
tf.train.register_value(ForeignVariable, read=lambda v: v.value, assign=lambda v, x: v.assign(x))


class MethodState:
    """A trackable by methods (no registration)."""

    def __init__(self):
        self.step = tf.Variable(0, name="step")

    def _checkpoint_children(self):
        return [("step", self.step)]


def test_registered_kinds_save_under_tfs_names_and_restore_deferred(tmp_path):
    layer = Layer(2)
    layer(tf.ones([1, 3]))
    layer.kernel.assign(np.arange(6, dtype="float32").reshape(3, 2))
    layer.extra.assign([5.0, 6.0])
    state = MethodState()
    state.step.assign(7)
    path = tf.train.Checkpoint(layer=layer, state=state).save(str(tmp_path / "c"))
    assert {k for k, _ in tf.train.list_variables(path)} == {
        "_CHECKPOINTABLE_OBJECT_GRAPH", "layer/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "layer/extra/.ATTRIBUTES/VARIABLE_VALUE", "state/step/.ATTRIBUTES/VARIABLE_VALUE",
        "save_counter/.ATTRIBUTES/VARIABLE_VALUE"}

    fresh, fresh_state = Layer(2), MethodState()
    status = tf.train.Checkpoint(layer=fresh, state=fresh_state).restore(path)
    assert fresh.extra.value.tolist() == [5.0, 6.0] and int(fresh_state.step.numpy()) == 7
    with pytest.raises(AssertionError, match="kernel"):
        status.assert_consumed()
    out = fresh(tf.ones([1, 3]))          # built now: track() applies the waiting value
    np.testing.assert_array_equal(out.numpy(), [[6.0, 9.0]])
    status.assert_consumed()


def test_protocol_bad_input():
    with pytest.raises(TypeError, match="expects a class"):
        tf.train.register_trackable(Layer(1), children=lambda o: [])
    with pytest.raises(TypeError, match="children"):
        tf.train.register_trackable(MethodState, children=None)
    with pytest.raises(TypeError, match="callables"):
        tf.train.register_value(ForeignVariable, read=None, assign=None)
