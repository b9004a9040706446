"""A TensorArray through a tapejax.function's boundary (``compile/tensor_array_args.py``): one trace
per TensorArraySpec and buffer shape, its values read at each call, results as eager TensorArrays,
gradients to the elements through a recorded call, and ``TensorArraySpec``."""
import numpy as np
import pytest

import tapejax as tf


def _ta(values, **kw):
    return tf.TensorArray(tf.float32, size=len(values), **kw).unstack(np.asarray(values, np.float32))


def test_arrays_of_one_spec_and_size_share_a_trace():
    f = tf.function(lambda ta: ta.stack() * 2.0)
    assert f(_ta([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
    assert f(_ta([3.0, 4.0])).numpy().tolist() == [6.0, 8.0]
    assert f.experimental_get_tracing_count() == 1
    f(_ta([1.0, 2.0, 3.0]))                 # another size: another buffer shape
    assert f.experimental_get_tracing_count() == 2


def test_unwritten_elements_enter_as_zeros_and_writes_in_place_are_seen():
    f = tf.function(lambda ta: ta.stack())
    ta = tf.TensorArray(tf.float32, size=3)
    ta.write(1, 5.0)
    assert f(ta).numpy().tolist() == [0.0, 5.0, 0.0]
    ta.write(2, 6.0)                         # eager writes are in place (TF's eager rule)
    assert f(ta).numpy().tolist() == [0.0, 5.0, 6.0]
    assert f.experimental_get_tracing_count() == 1


def test_an_array_with_no_shape_and_nothing_written_has_no_buffer():
    f = tf.function(lambda ta: ta.size())
    assert int(f(tf.TensorArray(tf.float32, size=4))) == 4


def test_a_returned_array_is_an_eager_list():
    @tf.function
    def fill():
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        for i in tf.range(3):
            ta = ta.write(i, tf.cast(i, tf.float32) * 2.0)
        return ta

    out = fill()
    assert isinstance(out, tf.TensorArray)
    assert out.stack().numpy().tolist() == [0.0, 2.0, 4.0] and int(out.size()) == 3
    out.write(3, 9.0)                        # eager again: dynamic, in place
    assert out.stack().numpy().tolist() == [0.0, 2.0, 4.0, 9.0]
    assert float(out.read(1)) == 2.0


def test_passed_through_and_returned():
    f = tf.function(lambda ta: ta.write(0, ta.read(1) + 1.0))
    out = f(_ta([0.0, 4.0]))
    assert out.stack().numpy().tolist() == [5.0, 4.0]


def test_gradient_reaches_the_elements_through_a_recorded_call():
    """d/dw of sum((k w)^2, k = 1, 2) = 2 w (1 + 4) = 10 w."""
    w = tf.Variable(3.0)
    f = tf.function(lambda ta: tf.reduce_sum(ta.stack() ** 2))
    with tf.GradientTape() as tape:
        ta = tf.TensorArray(tf.float32, size=2, clear_after_read=False)
        ta.write(0, w * 1.0)
        ta.write(1, w * 2.0)
        y = f(ta)
    assert float(y) == 45.0 and float(tape.gradient(y, w)) == 30.0


def test_tensor_array_spec_in_input_signature_checks_its_argument():
    f = tf.function(lambda ta: ta.stack(), input_signature=[tf.TensorArraySpec([2], tf.float32)])
    ok = tf.TensorArray(tf.float32, size=1, element_shape=[2]).unstack(np.ones((1, 2), np.float32))
    assert f(ok).numpy().tolist() == [[1.0, 1.0]]
    with pytest.raises(TypeError, match="not compatible with TensorArraySpec"):
        f(tf.TensorArray(tf.int32, size=1, element_shape=[2]))
    with pytest.raises(TypeError, match="not compatible"):
        f(tf.constant([1.0, 2.0]))


def test_type_spec_from_value_of_a_variable_is_a_type_error():
    with pytest.raises(TypeError, match="Could not build a TypeSpec"):
        tf.type_spec_from_value(tf.Variable(1.0))
    with pytest.raises(TypeError, match="argument `element_shape`"):
        tf.TensorArraySpec(element_shape=3)


def test_get_concrete_function_refuses_a_tensor_array_plainly():
    f = tf.function(lambda ta: ta.stack())
    with pytest.raises(ValueError, match="call the tapejax.function itself"):
        f.get_concrete_function(_ta([1.0, 2.0]))
    it = iter(tf.data.Dataset.from_tensor_slices(np.arange(3, dtype=np.float32)))
    g = tf.function(lambda it: next(it))
    with pytest.raises(ValueError, match="call the tapejax.function itself"):
        g.get_concrete_function(it)
    assert float(g(it)) == 0.0                # nothing was read
