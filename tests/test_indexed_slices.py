"""``core/indexed_slices.py`` and ``core/conversion.py``: the ``IndexedSlices`` class, its dense
conversion (a recorded op: gradients flow through it), TF's conversion registry (oracles: NumPy's
dense sums, ``jax.grad``, TF's documented rules)."""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core import conversion as _conversion, indexed_slices as _slices


def _g():
    return tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([2, 0, 2]),
                            tf.constant([3, 2]))


def test_attributes_and_dense_value():
    g = _g()
    assert g.dtype == tf.float32 and g.shape.as_list() == [3, 2] and g._static_shape == (3, 2)
    assert g.device == g.values.device and g.consumers() == []
    dense = np.zeros((3, 2), np.float32)
    np.add.at(dense, [2, 0, 2], [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(tf.convert_to_tensor(g).numpy(), dense)
    np.testing.assert_array_equal(tf.convert_to_tensor(-g).numpy(), -dense)
    assert "IndexedSlices(indices=" in repr(g) and str(g) == repr(g)


def test_arguments_are_kept_as_given_and_dense_shape_made_on_demand():
    raw = tf.IndexedSlices([[1.0, 2.0]], [0], [3, 2])
    assert raw.values == [[1.0, 2.0]] and raw.indices == [0] and raw.dense_shape == [3, 2]
    np.testing.assert_array_equal(tf.convert_to_tensor(raw).numpy(), [[1, 2], [0, 0], [0, 0]])
    made = _slices.IndexedSlices._of(tf.ones([1, 2]), tf.constant([1]), (4, 2))
    ds = made.dense_shape
    assert ds.dtype == tf.int32 and ds.numpy().tolist() == [4, 2] and made.dense_shape is ds
    no_shape = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]))
    assert no_shape.dense_shape is None and no_shape.shape.as_list() == [None, 2]


def test_conversion_errors_are_tfs():
    with pytest.raises(ValueError, match="without dense_shape"):
        tf.convert_to_tensor(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])))
    with pytest.raises(ValueError, match="Incompatible tensor conversion requested to `dtype` int32"):
        tf.convert_to_tensor(_g(), dtype=tf.int32)
    for bad in (lambda g: g * 2, lambda g: 2 * g, lambda g: g + g, len):
        with pytest.raises(TypeError):
            bad(_g())
    with pytest.raises(AttributeError, match="eager"):
        _g().name


def test_index_out_of_range_is_dropped_and_large_ones_warn(monkeypatch, tapejax_log):
    g = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([0, -1, 5]), tf.constant([3, 2]))
    np.testing.assert_array_equal(tf.convert_to_tensor(g).numpy(), [[1, 1], [0, 0], [0, 0]])
    monkeypatch.setattr(_slices, "LARGE_SPARSE_NUM_ELEMENTS", 6)
    tf.convert_to_tensor(g)
    assert "Converting sparse IndexedSlices to a dense Tensor with 6 elements" in tapejax_log.text


def test_every_op_densifies_it():
    g = _g()
    d = tf.convert_to_tensor(g)
    for op in (tf.math.square, tf.reduce_sum, tf.nn.relu, lambda x: tf.reshape(x, [-1]),
               lambda x: tf.multiply(x, 3.0), lambda x: tf.matmul(x, tf.ones([2, 2])),
               lambda x: tf.concat([x, x], 0), lambda x: tf.add_n([x, x])):
        np.testing.assert_allclose(op(g).numpy(), op(d).numpy())


def test_gradient_flows_through_the_conversion():
    """d/dx sum(dense(IndexedSlices(x * 2, idx))**2): the conversion is a recorded op."""
    x0 = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    x = tf.Variable(x0)
    idx = np.array([1, 1], np.int32)
    with tf.GradientTape() as t:
        s = tf.IndexedSlices(x * 2.0, tf.constant(idx), tf.constant([3, 2]))
        y = tf.reduce_sum(tf.square(tf.convert_to_tensor(s)))

    def f(x):
        return jnp.sum(jnp.square(jnp.zeros((3, 2)).at[idx].add(x * 2.0)))
    np.testing.assert_allclose(t.gradient(y, x).numpy(), jax.grad(f)(x0), rtol=1e-6)


def test_pytree_through_jit_and_function():
    g = _g()
    leaves, tree = jax.tree_util.tree_flatten(g)
    assert len(leaves) == 2
    out = jax.jit(lambda s: jax.tree_util.tree_map(lambda a: a * 2, s))(g)
    assert type(out) is tf.IndexedSlices and out._static_shape == (3, 2)
    np.testing.assert_array_equal(np.asarray(out.values), g.values.numpy() * 2)
    traces = []

    @tf.function
    def f(s):
        traces.append(1)
        return tf.IndexedSlices(s.values * 2.0, s.indices, s.dense_shape)

    r = f(g)
    r2 = f(tf.IndexedSlices(tf.ones([3, 2]), tf.constant([0, 1, 1]), tf.constant([3, 2])))
    assert type(r) is tf.IndexedSlices and len(traces) == 1   # values and indices are dynamic
    np.testing.assert_array_equal(r.values.numpy(), g.values.numpy() * 2)
    assert r2.indices.numpy().tolist() == [0, 1, 1] and r2.shape.as_list() == [3, 2]


def test_keep_slices_ops():
    g = _g()
    for out in (tf.identity(g), tf.cast(g, tf.float16), tf.clip_by_value(g, 0.0, 2.0), tf.clip_by_norm(g, 1.0),
                tf.clip_by_global_norm([g], 1.0)[0][0]):
        assert type(out) is tf.IndexedSlices and out.indices is g.indices
    assert tf.cast(g, tf.float16).dtype == tf.float16
    np.testing.assert_allclose(tf.linalg.global_norm([g]).numpy(), np.sqrt(91.0), rtol=1e-6)
    assert tf.is_tensor(g) and not isinstance(g, tf.Tensor)


class _Celsius:
    """A user's class converted through the registry."""

    def __init__(self, v):
        self.v = v


def test_register_tensor_conversion_function():
    calls = []

    def conv(value, dtype=None, name=None, as_ref=False):
        calls.append(dtype)
        return tf.constant(value.v)   # (ignores the dtype asked for)

    tf.register_tensor_conversion_function(_Celsius, conv)
    try:
        assert tf.convert_to_tensor(_Celsius([1.0, 2.0])).numpy().tolist() == [1.0, 2.0]
        assert (tf.math.square(_Celsius([3.0])).numpy() == [9.0]).all()   # an op takes it too
        assert tf.add(_Celsius([1.0]), 1.0).numpy().tolist() == [2.0]
        with pytest.raises(RuntimeError, match="incompatible dtype"):   # TF: the result must have the dtype asked
            tf.convert_to_tensor(_Celsius([1.0]), dtype=tf.int32)
        assert calls[-1] == tf.int32
    finally:
        _conversion._ENTRIES[:] = [e for e in _conversion._ENTRIES if e.base is not _Celsius]
        _conversion._BY_TYPE.clear()


def test_register_priority_and_not_implemented():
    class A:
        pass

    class B(A):
        pass

    tf.register_tensor_conversion_function(A, lambda v, dtype=None, name=None, as_ref=False: tf.constant(1.0), 200)
    tf.register_tensor_conversion_function(B, lambda v, dtype=None, name=None, as_ref=False: NotImplemented, 10)
    try:
        assert tf.convert_to_tensor(B()).numpy() == 1.0   # B's declines, A's converts
    finally:
        _conversion._ENTRIES[:] = [e for e in _conversion._ENTRIES if e.base not in (A, B)]
        _conversion._BY_TYPE.clear()


@pytest.mark.parametrize("bad", [int, float, list, np.ndarray, "not a type"])
def test_register_refuses_tfs_own_types(bad):
    with pytest.raises(TypeError):
        tf.register_tensor_conversion_function(bad, lambda *a, **k: None)


def test_unregistered_types_pay_one_lookup():
    """An operand type is resolved once (cached), also when no conversion exists for it; Python
    numbers and Tensors, which no conversion may be registered for, are not looked up at all."""
    _conversion._BY_TYPE.clear()
    assert float(tf.math.square(np.float32(2.0))) == 4.0
    assert _conversion._BY_TYPE.get(np.float32, "missing") is None
    tf.math.square(2.0)
    tf.math.square(tf.constant(2.0))
    assert float not in _conversion._BY_TYPE and tf.Tensor not in _conversion._BY_TYPE


def test_warning_logger_is_tapejax():
    assert _slices._log is logging.getLogger("tapejax")


def test_jax_conversion_is_the_dense_tensor_with_repeated_rows_summed():
    """``jnp.asarray(g)`` (how Keras 3's optimizers on JAX take a tape's gradient) is the dense
    tensor, as TF converts an IndexedSlices where a dense tensor is needed."""
    g = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([2, 0, 2]),
                         tf.constant([4, 2]))
    np.testing.assert_array_equal(np.asarray(jnp.asarray(g)), [[3.0, 4.0], [0.0, 0.0], [6.0, 8.0], [0.0, 0.0]])
