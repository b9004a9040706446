"""tapejax.Module: the same variables / submodules / names, in the same order, as tf.Module."""
import numpy as np
import pytest

import tapejax


def _build(tf):
    class Dense(tf.Module):
        def __init__(self, i, o, name=None):
            super().__init__(name=name)
            with self.name_scope:
                self.w = tf.Variable(tf.ones([i, o]), name="w")
                self.b = tf.Variable(tf.zeros([o]), name="b", trainable=False)

        @tf.Module.with_name_scope
        def __call__(self, x):
            return tf.matmul(x, self.w) + self.b

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            self.z = tf.Variable(1.0, name="z")
            self.layers = [Dense(2, 3), Dense(3, 1, name="out")]
            self.d = {"b": Dense(1, 1, name="db"), "a": (tf.Variable(2.0, name="tup"),)}
            self.alias = self.layers[0]

    class CamelCaseThing(tf.Module):
        pass

    m = MLP()
    with tf.name_scope("outer"):
        scoped = tf.Variable(1.0, name="q")
        inner = Dense(1, 1)
    return {
        "name": (m.name, m.name_scope.name, CamelCaseThing().name),
        "variables": [v.name for v in m.variables],
        "trainable": [v.name for v in m.trainable_variables],
        "non_trainable": [v.name for v in m.non_trainable_variables],
        "submodules": [s.name for s in m.submodules],
        "scoped": (scoped.name, inner.w.name, inner.name_scope.name, tf.Variable(1.0).name),
        "call": m.layers[0](tf.ones([1, 2])).numpy().tolist(),
    }


# Printed by TensorFlow 2.21 for the same program (tests/test_module.py::test_matches_tensorflow reruns it).
EXPECTED = {
    "name": ("mlp", "mlp/", "camel_case_thing"),
    "variables": ["tup:0", "z:0", "dense/b:0", "dense/w:0", "db/b:0", "db/w:0", "out/b:0", "out/w:0"],
    "trainable": ["tup:0", "z:0", "dense/w:0", "db/w:0", "out/w:0"],
    "non_trainable": ["dense/b:0", "db/b:0", "out/b:0"],
    "submodules": ["dense", "db", "out"],
    "scoped": ("outer/q:0", "outer/dense/w:0", "outer/dense/", "Variable:0"),
    "call": [[2.0, 2.0, 2.0]],
}


def test_matches_expected():
    assert _build(tapejax) == EXPECTED


def test_matches_tensorflow():
    tensorflow = pytest.importorskip("tensorflow")
    assert _build(tensorflow) == EXPECTED


def test_invalid_name():
    with pytest.raises(ValueError, match="not a valid module name"):
        tapejax.Module(name="bad name")


def test_cycles_and_shared_variables_listed_once():
    a = tapejax.Module(name="a")
    b = tapejax.Module(name="b")
    v = tapejax.Variable(1.0, name="v")
    a.child, b.parent = b, a
    a.v = b.v = v
    assert a.variables == (v,)
    assert a.submodules == (b,)


def test_training_a_module_with_an_optimizer_in_a_function():
    tf = tapejax

    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[0.0], [0.0]], name="w")
            self.b = tf.Variable([0.0], name="b")

        def __call__(self, x):
            return tf.matmul(x, self.w) + self.b

    model = Linear()
    opt = tf.optimizers.SGD(0.1)
    x = tf.constant([[1.0, 2.0], [2.0, 1.0], [0.0, 1.0]])
    y = tf.constant([[5.0], [4.0], [2.0]])

    @tf.function
    def step():
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for _ in range(300):
        loss = step()
    assert loss.numpy() < 1e-3
    np.testing.assert_allclose(model.w.numpy().ravel(), [1.0, 2.0], atol=0.05)
    assert [v.name for v in model.trainable_variables] == ["b:0", "w:0"]   # sorted attribute order
