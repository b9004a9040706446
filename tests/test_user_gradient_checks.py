"""A user's gradient-check suite, as written for TensorFlow, running on tapejax.

The only line that differs from the TensorFlow original is the import below
(``import tensorflow as tf``); ``tests/test_compat_test.py`` runs this very file
under TensorFlow to show that it is TF code.  pytest collects the
``tf.test.TestCase`` classes as unittest cases.
"""
import numpy as np

import tapejax as tf


def dense(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + b)


class DenseLayerGradientTest(tf.test.TestCase):

    def setUp(self):
        rng = np.random.RandomState(42)
        self.x = rng.randn(3, 4).astype(np.float32)
        self.w = rng.randn(4, 2).astype(np.float32)
        self.b = np.array([0.5, -0.25], np.float32)

    def test_gradient_wrt_weights_matches_finite_differences(self):
        theoretical, numerical = tf.test.compute_gradient(lambda w: dense(self.x, w, self.b), [self.w])
        self.assertAllClose(theoretical, numerical, rtol=1e-2, atol=1e-2)

    def test_gradient_wrt_every_argument(self):
        theoretical, numerical = tf.test.compute_gradient(dense, [self.x, self.w, self.b])
        self.assertLen(theoretical, 3)
        for t, n, arg in zip(theoretical, numerical, (self.x, self.w, self.b)):
            self.assertEqual(t.shape, (6, arg.size))   # rows: output elements, columns: argument elements
            self.assertAllClose(t, n, rtol=1e-2, atol=1e-2)

    def test_forward_values(self):
        expected = np.maximum(self.x @ self.w + self.b, 0.)
        self.assertAllClose(dense(self.x, self.w, self.b), expected)
        self.assertAllGreaterEqual(dense(self.x, self.w, self.b), 0.)


class LossGradientTest(tf.test.TestCase):

    def test_softmax_cross_entropy(self):
        labels = tf.constant([[0., 1., 0.], [1., 0., 0.]])

        def loss(logits):
            return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))

        logits = np.array([[1., 2., 0.5], [0.1, -1., 2.]], np.float32)
        theoretical, numerical = tf.test.compute_gradient(loss, [logits])
        self.assertAllClose(theoretical, numerical, rtol=1e-2, atol=1e-3)
        expected = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True) - labels.numpy()) / 2.
        self.assertAllClose(theoretical[0].reshape(2, 3), expected, rtol=1e-5, atol=1e-6)

    def test_compiled_loss_has_the_same_gradient(self):
        @tf.function
        def loss(w):
            return tf.reduce_sum(tf.square(tf.sin(w)))

        w = np.array([0.3, -1.2, 2.], np.float32)
        theoretical, numerical = tf.test.compute_gradient(loss, [w])
        self.assertAllClose(theoretical[0], [np.sin(2 * w)], rtol=1e-5)
        self.assertAllClose(theoretical, numerical, rtol=1e-2, atol=1e-2)

    def test_custom_gradient_is_used(self):
        @tf.custom_gradient
        def clip_grad(x):
            def grad(dy):
                return tf.clip_by_value(dy, -0.1, 0.1)
            return tf.identity(x), grad

        theoretical, _ = tf.test.compute_gradient(lambda x: clip_grad(x) * 3., [np.array([1., 2.], np.float32)])
        self.assertAllClose(theoretical[0], [[0.1, 0.], [0., 0.1]])


class TapeTest(tf.test.TestCase):

    def test_second_derivative(self):
        x = tf.constant(2.)
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = x ** 3
            dy = inner.gradient(y, x)
        self.assertAllClose(self.evaluate([dy, outer.gradient(dy, x)]), [12., 12.])

    def test_variables_and_dtypes(self):
        v = tf.Variable([1., 2.])
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * v)
        g = t.gradient(loss, v)
        self.assertDTypeEqual(g, np.float32)
        self.assertShapeEqual(np.zeros(2), g)
        self.assertAllEqual(g, [2., 4.])
        self.assertAllInRange(g, 0., 4.)
