"""tapejax.test: the user suite ports from TF, TestCase extras, device queries, the checker's edges."""
import os
import unittest

import jax
import numpy as np
import pytest

import tapejax as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_user_suite_is_tensorflow_code():
    """tests/test_user_gradient_checks.py with `import tensorflow as tf` passes under TensorFlow."""
    tensorflow = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    path = os.path.join(HERE, "test_user_gradient_checks.py")
    with open(path) as f:
        src = f.read()
    assert src.count("import tapejax as tf\n") == 1
    ns = {"__name__": "user_suite_under_tf"}
    exec(compile(src.replace("import tapejax as tf\n", "import tensorflow as tf\n"), path, "exec"), ns)
    assert ns["tf"] is tensorflow
    cases = [v for v in ns.values() if isinstance(v, type) and issubclass(v, tensorflow.test.TestCase)
             and v is not tensorflow.test.TestCase]
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
    result = unittest.TextTestRunner(verbosity=0, stream=open(os.devnull, "w")).run(suite)
    # (unittest also collects TF's own ``TestCase.test_session`` method, once per class)
    assert result.testsRun == 8 + len(cases) and result.wasSuccessful(), result.failures + result.errors


class _Case(tf.test.TestCase):
    def runTest(self):
        pass


def test_temp_dir_is_removed_after_the_test():
    tc = _Case()
    d = tc.get_temp_dir()
    assert os.path.isdir(d) and tc.get_temp_dir() == d
    tc.doCleanups()
    assert not os.path.exists(d)


def test_sessions_and_op_errors():
    tc = _Case()
    with tc.cached_session() as s:
        assert s is None
    with tc.assertRaisesOpError("Condition x == y"):
        tf.debugging.assert_equal(tf.constant(1.), tf.constant(2.))
    with pytest.raises(AssertionError, match="OpError not raised"):
        with tc.assertRaisesOpError("anything"):
            pass
    tc.assertLen([1, 2], 2)
    with pytest.raises(AssertionError):
        tc.assertEmpty([1])


def test_gpu_queries_follow_jax():
    has_gpu = any(d.platform in ("gpu", "cuda", "rocm") for d in jax.devices())
    assert tf.test.is_gpu_available() == has_gpu
    assert tf.test.gpu_device_name() == ("/device:GPU:0" if has_gpu else "")
    assert tf.test.is_built_with_xla()
    assert tf.test.is_built_with_gpu_support() == (tf.test.is_built_with_cuda() or tf.test.is_built_with_rocm())


def test_compute_gradient_edges():
    with pytest.raises(TypeError, match="must return one Tensor"):
        tf.test.compute_gradient(lambda x: (x, x * 2.), [tf.constant([1.])])
    t, n = tf.test.compute_gradient(lambda x: tf.zeros(2), [tf.constant([1., 2.])])   # unconnected: zeros
    np.testing.assert_array_equal(t[0], np.zeros((2, 2)))
    np.testing.assert_array_equal(n[0], np.zeros((2, 2)))
    # the oracle: jax.jacrev of the same function
    x = np.array([0.5, -1., 2.], np.float32)
    t, _ = tf.test.compute_gradient(lambda v: tf.tanh(v) * tf.reduce_sum(v), [x])
    np.testing.assert_allclose(t[0], jax.jacrev(lambda v: jax.numpy.tanh(v) * v.sum())(x), rtol=1e-6)
