"""A realistic TF2 script using the namespaces together, under TensorFlow and tapejax.

A small classifier trained for a few compiled steps on the CPU (``tf.device``), with a
finite-loss assert and a shape assert in the step, a metric kept across steps, an evaluation
between steps, summaries of the loss, the weights' histogram and the accuracy, and a
``tf.test.TestCase`` check of the result.  Returned: the losses, accuracies, final weights and
every summary TensorBoard reads back.  Run with deferred execution on and off (``modes``).
"""
import tempfile

import numpy as np

from .harness import parity
from .test_debugging import err
from .test_summary import read_events


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_training_script_with_summaries_and_asserts(tf):
    rng = np.random.RandomState(0)
    x = rng.randn(64, 5).astype(np.float32)
    y = (x @ rng.randn(5, 3)).argmax(1).astype(np.int32)
    logdir = tempfile.mkdtemp(prefix="namespaces_program")
    writer = tf.summary.create_file_writer(logdir)
    with tf.device("/CPU:0"):
        w = tf.Variable(rng.randn(5, 3).astype(np.float32) * 0.1)
        b = tf.Variable(np.zeros(3, np.float32))
    step = tf.Variable(0, dtype=tf.int64)
    opt = tf.keras.optimizers.SGD(0.5)

    @tf.function
    def train(xb, yb):
        tf.debugging.assert_shapes([(xb, ("N", 5)), (yb, ("N",))])
        with tf.GradientTape() as tape:
            logits = tf.matmul(xb, w) + b
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits))
        tf.debugging.assert_all_finite(loss, "loss")
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        tf.summary.scalar("loss", loss, step=step)
        tf.summary.histogram("w", w, step=step, buckets=5)
        step.assign_add(1)
        return loss

    def accuracy():
        pred = tf.argmax(tf.matmul(x, w) + b, axis=1, output_type=tf.int32)
        return tf.reduce_mean(tf.cast(tf.equal(pred, y), tf.float32))

    losses, accs = [], []
    with writer.as_default():
        for epoch in range(3):
            for i in range(0, 64, 16):
                losses.append(train(x[i:i + 16], y[i:i + 16]))
            accs.append(accuracy())
            tf.summary.scalar("accuracy", accs[-1], step=step)
    writer.flush()

    class Check(tf.test.TestCase):
        def runTest(self):
            pass

    check = Check()
    check.assertAllInRange(tf.stack(accs), 0., 1.)
    bad = err(train, x[:4, :4], y[:4], message=False)   # assert_shapes: ValueError at trace time
    return losses, accs, w, b, int(check.evaluate(step)), bad, read_events(logdir)
