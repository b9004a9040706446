"""Variable: creation, assign*, errors before state changes, and reads as tape events."""
import numpy as np
import pytest

import tapejax as tf


def test_creation_and_metadata():
    v = tf.Variable([1.0, 2.0])
    assert v.dtype == tf.float32 and v.shape == (2,) and v.trainable and v.name == "Variable:0"
    assert tf.Variable(1.0, name="w").name == "w:0"
    assert tf.Variable(1).dtype == tf.int32
    assert tf.Variable(1, dtype=tf.float32).numpy() == 1.0
    assert tf.Variable(lambda: tf.ones([2])).shape == (2,)
    assert tf.Variable(tf.constant(3.0)).numpy() == 3.0
    assert tf.Variable(v).numpy().tolist() == [1.0, 2.0]
    assert not tf.Variable(1.0, trainable=False).trainable
    with pytest.raises(ValueError):
        tf.Variable(None)
    with pytest.raises(TypeError):
        tf.Variable(1.5, dtype=tf.int32)
    assert repr(tf.Variable(1.5)) == "<tapejax.Variable 'Variable:0' shape=() dtype=float32, numpy=1.5>"


def test_assign_family():
    v = tf.Variable([1.0, 2.0])
    assert v.assign([3.0, 4.0]) is v
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])
    v.assign_add([1.0, 1.0])
    v.assign_sub(tf.constant([0.5, 0.5]))
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])
    assert v.assign([0.0, 0.0], read_value=False) is None
    v.assign([1, 2])  # Python ints into a float Variable convert
    v.assign(np.array([5.0, 6.0]))  # float64 NumPy data is cast, as TF
    np.testing.assert_array_equal(v.read_value().numpy(), [5.0, 6.0])


@pytest.mark.parametrize("op, value, exc", [
    ("assign", [1.0, 2.0, 3.0], ValueError),
    ("assign", 5.0, ValueError),
    ("assign", tf.constant([1, 2]), ValueError),
    ("assign_add", [1.0, 2.0, 3.0], tf.errors.InvalidArgumentError),
    ("assign_sub", 1.0, tf.errors.InvalidArgumentError),
])
def test_assign_errors_leave_the_value_unchanged(op, value, exc):
    v = tf.Variable([1.0, 2.0])
    with pytest.raises(exc):
        getattr(v, op)(value)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_assign_family_densifies_indexed_slices_as_tf():
    """TF converts an assign's value with ``convert_to_tensor``, so an embedding's ``IndexedSlices``
    gradient accumulates by ``assign_add`` (repeated rows summed), eagerly and in a function;
    another dtype is TF's ValueError, another dense shape its InvalidArgumentError."""
    emb = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    acc = tf.Variable(tf.zeros_like(emb))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(emb, [0, 2, 2]) ** 2)
    g = tape.gradient(loss, emb)
    assert isinstance(g, tf.IndexedSlices)
    acc.assign_add(g)
    acc.assign_sub(tf.IndexedSlices(tf.constant([[1.0, 1.0]]), tf.constant([1]), tf.constant([3, 2])))
    assert acc.numpy().tolist() == [[2.0, 4.0], [-1.0, -1.0], [20.0, 24.0]]

    @tf.function
    def twice(g):
        acc.assign(g)
        acc.assign_add(g)
        return acc.read_value()

    assert twice(g).numpy().tolist() == [[4.0, 8.0], [0.0, 0.0], [40.0, 48.0]]
    with pytest.raises(ValueError):
        tf.Variable(np.zeros((3, 2), np.int32)).assign_add(g)
    with pytest.raises(tf.errors.InvalidArgumentError):
        acc.assign_add(tf.IndexedSlices(tf.constant([[1.0, 1.0]]), tf.constant([1]), tf.constant([4, 2])))


def test_int_variable_assign_float_is_type_error():
    v = tf.Variable([1, 2])
    with pytest.raises(TypeError, match="Cannot convert"):
        v.assign([1.5, 2.0])


def test_operators_read_the_variable():
    v = tf.Variable([1.0, 2.0])
    m = tf.Variable([[1.0, 2.0]])
    for r in (v + 1, 1 + v, v * v, -v, v[0], m @ tf.ones([2, 1])):
        assert isinstance(r, tf.Tensor)
    np.testing.assert_array_equal((m @ tf.ones([2, 1])).numpy(), [[3.0]])
    assert isinstance(v == v, tf.Tensor)
    with pytest.raises(TypeError, match="unhashable"):
        hash(v)
    with pytest.raises(TypeError):
        len(v)


def test_reads_are_summed_each_at_its_value():
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        a = v * 1.0
        v.assign(5.0)
        b = v * v
        y = a + b
    assert t.gradient(y, v).numpy() == pytest.approx(1.0 + 2 * 5.0)


def test_assign_inside_tape_does_not_propagate():
    v = tf.Variable(1.0)
    u = tf.Variable(3.0)
    with tf.GradientTape() as t:
        v.assign(u * 2.0)
        y = v * 1.0
    gv, gu = t.gradient(y, [v, u])
    assert gv.numpy() == 1.0 and gu is None


def test_variable_creator_scope_is_per_thread_and_subclasses_are_made_directly():
    """TF: creator scopes are the creating thread's; only ``tf.Variable(...)`` calls go through them."""
    import threading

    seen = []

    def creator(next_creator, **kwargs):
        seen.append(kwargs["name"])
        return next_creator(**kwargs)

    class MyVar(tf.Variable):
        pass
    other = []
    with tf.variable_creator_scope(creator):
        t = threading.Thread(target=lambda: other.append(tf.Variable(1.0, name="elsewhere")))
        t.start()
        t.join()
        tf.Variable(1.0, name="here")
        MyVar(2.0, name="sub")
    tf.Variable(3.0, name="after")
    assert seen == ["here"] and other[0].numpy() == 1.0


def test_asarray_of_a_variable_is_a_writable_copy():
    """TF's ``Variable.__array__`` is ``np.asarray(self.numpy())``: a pruning script's
    ``k = np.asarray(v); k[np.abs(k) < t] = 0; v.assign(k)`` edits its own copy (tapejax gave a
    read-only view of the buffer: "assignment destination is read-only"), also with a pending
    update on the Variable.  Oracle: TF 2.21."""
    v = tf.Variable([0.1, -0.9, 0.3])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * v)
    v.assign_sub(0.25 * tape.gradient(loss, v))
    k = np.asarray(v)
    k[np.abs(k) < 0.2] = 0.0
    np.testing.assert_allclose(v.numpy(), [0.05, -0.45, 0.15], rtol=1e-6)
    v.assign(k)
    np.testing.assert_allclose(v.numpy(), [0.0, -0.45, 0.0], rtol=1e-6)
    assert np.asarray(v, dtype=np.float64).flags.writeable


def test_synchronization_and_aggregation_attributes_as_tf():
    """TF's Variables guide: the modes given to ``tf.Variable`` read back (AUTO / NONE by default), an
    ON_READ Variable is not trainable unless asked, and a deep copy keeps them."""
    import copy

    r = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.MEAN)
    v = tf.Variable(1.0)
    s = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ, trainable=True)
    assert (r.synchronization, r.aggregation, r.trainable) == (
        tf.VariableSynchronization.ON_READ, tf.VariableAggregation.MEAN, False)
    assert (v.synchronization, v.aggregation, v.trainable) == (
        tf.VariableSynchronization.AUTO, tf.VariableAggregation.NONE, True)
    assert s.trainable and copy.deepcopy(r).aggregation is tf.VariableAggregation.MEAN


def test_a_tensor_or_variable_initial_value_of_another_dtype_is_tf_s_value_error():
    """TF casts host data to ``dtype`` but refuses a Tensor or Variable of another dtype (ValueError);
    the same dtype, or a cast first, is accepted."""
    a = tf.Variable([2.0, 3.0])
    for init in (a, tf.constant([1.0, 2.0]), tf.constant([1, 2])):
        with pytest.raises(ValueError, match="conversion requested dtype"):
            tf.Variable(init, dtype=tf.float16 if init.dtype == tf.float32 else tf.float32)
    assert tf.Variable(np.array([1.0], np.float32), dtype=tf.float16).dtype == tf.float16
    assert tf.Variable(tf.cast(a, tf.float16)).dtype == tf.float16
    assert tf.Variable(a * 1.0, dtype=tf.float32).dtype == tf.float32


def test_in_place_operators_raise_as_tf():
    """``v += 1`` (``-=``, ``*=``, ``/=``, ``**=``) raises RuntimeError naming the assign to use, as TF 2.21's
    Variables do (Python's fallback rebound ``v`` to a Tensor, silently dropping it from training);
    ``//=`` rebinds, as TF's.  Installed with the Variable operators, by ``tapejax/ops/math.py``."""
    v = tf.Variable(2.0)
    w = v
    for stmt, fix in (("w += 1.0", "assign_add"), ("w -= 1.0", "assign_sub"), ("w *= 2.0", "assign(var * value)"),
                      ("w /= 2.0", "assign(var / value)"), ("w **= 2.0", "assign(var ** value)")):
        with pytest.raises(RuntimeError, match="with `tf.Variable`s is not supported") as e:
            exec(stmt, {}, {"w": w})
        assert fix in str(e.value)
    assert float(v) == 2.0
    w //= 1.0
    assert isinstance(w, tf.Tensor) and not isinstance(w, tf.Variable)


def test_jax_array_on_the_left_of_a_variable_is_a_recorded_read():
    """``jax_array @ variable`` reads the Variable through the Tensor operator (TF's rule for a
    NumPy array on the left), so the tape watches it; it was JAX's product, gradient None."""
    import jax.numpy as jnp
    x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    w = tf.Variable([[0.5], [-1.0]])
    with tf.GradientTape() as tape:
        y = x @ w
        loss = tf.reduce_sum(jnp.ones((2, 1)) * y)
    assert isinstance(y, tf.Tensor)
    np.testing.assert_allclose(tape.gradient(loss, w), [[4.0], [6.0]])
    np.testing.assert_allclose(jnp.asarray(w), [[0.5], [-1.0]])
