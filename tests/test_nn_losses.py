"""tapejax/ops/nn_losses.py: TF's cross-entropy kernels where a compiled step meets them (TF 2.21's
numbers; tests/parity/ compares whole programs with TF)."""
import numpy as np

import tapejax as tf


def test_sparse_softmax_cross_entropy_traces_once_on_shifted_symbolic_sizes():
    """A language model's eval step ``input_signature=[TensorSpec([None, None])]`` that shifts the
    tokens (``x[:, :-1]`` / ``x[:, 1:]``, sizes ``t - 1`` when traced with symbolic sizes) traces
    once for every batch shape, as TF's: the picked logit was read by ``take_along_axis``, which
    JAX cannot trace with the size ``t - 1`` (the function then traced once per shape)."""
    table = tf.constant(np.random.RandomState(0).randn(5, 5).astype(np.float32))
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def nll(x):
        traces.append(1)
        logits = tf.gather(table, x[:, :-1])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(x[:, 1:], logits)

    for shape in ((2, 4), (3, 6), (1, 2)):
        x = np.random.RandomState(sum(shape)).randint(0, 5, shape).astype(np.int32)
        logits = table.numpy()[x[:, :-1]]
        lse = np.log(np.exp(logits).sum(-1))
        want = lse - np.take_along_axis(logits, x[:, 1:, None], -1)[..., 0]
        np.testing.assert_allclose(nll(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    assert len(traces) == 1


def test_sparse_softmax_cross_entropy_at_infinite_logits_and_a_bad_label():
    """Other classes' ``-inf`` logits do not reach the picked one (loss finite, gradient
    ``softmax - onehot`` with 0 at the ``-inf`` class); a label out of range is a NaN loss (TF's GPU
    kernel); a NaN in another class's logit makes the log-sum-exp NaN, as TF's."""
    logits = tf.constant([[0.0, -np.inf, 1.0], [0.0, 1.0, 2.0], [np.nan, 1.0, 2.0]])
    labels = tf.constant([2, 3, 1])
    with tf.GradientTape() as t:
        t.watch(logits)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        first = loss[0]
    got = loss.numpy()
    np.testing.assert_allclose(got[0], np.log(1 + np.e) - 1.0, rtol=1e-6)
    assert np.isnan(got[1]) and np.isnan(got[2])
    g = t.gradient(first, logits).numpy()
    p = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    np.testing.assert_allclose(g[0], [p[0], 0.0, p[1] - 1.0], rtol=1e-6)
