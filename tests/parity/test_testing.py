"""tf.test under TensorFlow and tapejax: compute_gradient's structure and values, TestCase's verdicts.

A TestCase assertion's result is ``err(...)``: the class (AssertionError, TypeError ...) and
the message where both build it the same way.
"""
import numpy as np

from .harness import parity
from .test_debugging import err


@parity
def test_compute_gradient_structure(tf):
    """(theoretical tuple, numerical tuple); 2-D (y_size, x_size) arrays in the argument's dtype."""
    cg = tf.test.compute_gradient
    return [cg(lambda x: x * x, [tf.constant([1., 2., 3.])]),
            cg(lambda x, y: x * y, [tf.constant([1., 2.]), tf.constant([3., 4.])]),
            cg(lambda x: tf.reduce_sum(x, axis=1), [tf.constant([[1., 2.], [3., 4.]])]),
            cg(lambda x: x * x, [np.array([1., 2.], np.float32)]), cg(lambda x: x * x, [[1., 2.]]),
            cg(lambda x: x * x * x, [tf.constant([1.])], delta=0.1), cg(lambda x: x * x, [tf.constant(3.)]),
            cg(lambda x, y: x * 2., [tf.constant([1.]), tf.constant([2.])]),
            cg(lambda x: x * x, [tf.Variable([1., 2.])]), cg(lambda x: x * x, [tf.constant([1., 2.], tf.float16)])]


@parity
def test_compute_gradient_errors(tf):
    """x not a list: ValueError; an integer argument: AssertionError."""
    cg = tf.test.compute_gradient
    return [err(cg, lambda x: x * x, tf.constant([1., 2.]), message=False),
            err(cg, lambda x: x * x, [tf.constant([1, 2])])]


def _case(tf):
    class Case(tf.test.TestCase):
        def runTest(self):
            pass
    return Case()


@parity
def test_testcase_assertions(tf):
    """assertAllClose (1e-6 for every dtype) and ...AccordingToType (1e-3 for float16), assertAllEqual,
    assertAllInRange, assertShapeEqual, assertDTypeEqual, nested structures."""
    tc = _case(tf)
    f16 = np.float16
    return [err(tc.assertAllClose, f16([1.0]), f16([1.001]), message=False),
            err(tc.assertAllClose, [1.0], [1.0 + 2e-6]),
            err(tc.assertAllClose, {"a": [1., 2.]}, {"a": tf.constant([1., 2.])}),
            err(tc.assertAllClose, [1., 2.], [1., 2.1], message=False),
            err(tc.assertAllClose, [1., 2.], [1., 2., 3.]),
            err(tc.assertAllClose, {"a": 1.}, [1.], message=False),
            err(tc.assertAllClose, (1., [2., 3.]), (1., [2., 3.])),
            err(tc.assertAllClose, [np.nan], [np.nan]),
            err(tc.assertAllCloseAccordingToType, f16([1.0]), f16([1.0009])),
            err(tc.assertAllCloseAccordingToType, np.float32([1.0]), np.float32([1.001]), message=False),
            err(tc.assertNotAllClose, [1.], [1.]),
            err(tc.assertAllEqual, [1, 2], tf.constant([1, 3]), message=False),
            err(tc.assertAllEqual, [np.nan, 1.], tf.constant([np.nan, 1.])),
            err(tc.assertAllInRange, tf.constant([1., 5.]), 0., 4.),
            err(tc.assertAllInRange, tf.constant([0., 4.]), 0., 4., open_lower_bound=True),
            err(tc.assertAllInRange, tf.constant([np.nan]), 0., 4.),
            err(tc.assertShapeEqual, np.zeros((2, 3)), tf.zeros((2, 4)), message=False),
            err(tc.assertShapeEqual, [1], tf.zeros((2, 4))),
            err(tc.assertDTypeEqual, tf.zeros((2,)), np.int32), err(tc.assertDTypeEqual, tf.zeros((2,)), np.float32),
            err(tc.assertAllGreater, tf.constant([1., 2.]), 1.), err(tc.assertAllLessEqual, tf.constant([1., 2.]), 2.),
            err(tc.assertNear, 1.0, 1.05, 0.01)]


@parity
def test_testcase_evaluate(tf):
    """evaluate: NumPy values of nested Tensors and Variables (0-d as NumPy scalars), None kept."""
    tc = _case(tf)
    out = tc.evaluate({"a": tf.constant(1.), "b": [tf.constant([1, 2])], "c": None})
    return [out, type(out["a"]).__name__, tc.evaluate(tf.Variable(2.)), err(tc.evaluate, [1.0, 2.0])]
