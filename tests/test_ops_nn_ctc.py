"""tf.nn's CTC ops (tapejax.ops.nn_ctc) against hand oracles: the loss as the brute-force sum over
every alignment, its gradient by central differences of that sum (float64), the decoders and
ctc_unique_labels on hand-worked rows, and TF's errors.  TF parity: tests/parity/test_ops_nn_more.py."""
import itertools

import numpy as np
import pytest

import tapejax as tf

RNG = np.random.default_rng(5)


def _collapse(path, blank):
    out, prev = [], None
    for p in path:
        if p != prev and p != blank:
            out.append(p)
        prev = p
    return out


def brute_ctc(logits, label, blank):
    """-log sum over all paths of length T (logits [T, K]) that collapse to ``label``."""
    lp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    total = 0.0
    for path in itertools.product(range(logits.shape[1]), repeat=logits.shape[0]):
        if _collapse(path, blank) == list(label):
            total += np.exp(sum(lp[t, k] for t, k in enumerate(path)))
    return -np.log(total)


@pytest.mark.parametrize("blank", [0, 2, -1])
def test_ctc_loss_is_the_sum_over_alignments(blank):
    """Each batch entry's loss is -log of the summed probability of its alignments (logit_length
    frames), for the blank first, in the middle and last; labels with a repeat."""
    x = RNG.standard_normal((5, 2, 4))
    labels = np.array([[1, 1, 0], [3, 0, 0]]) if blank != -1 else np.array([[1, 1, 0], [2, 0, 0]])
    label_len, logit_len = np.array([2, 1]), np.array([5, 3])
    got = tf.nn.ctc_loss(labels, tf.constant(x, tf.float32), label_len, logit_len, blank_index=blank).numpy()
    b = blank % 4
    for i in range(2):
        want = brute_ctc(x[:logit_len[i], i], labels[i, :label_len[i]], b)
        np.testing.assert_allclose(got[i], want, rtol=1e-5)


def test_ctc_loss_gradient_is_the_numerical_one():
    """The gradient w.r.t. the logits equals central differences of the brute-force loss (float64),
    and is zero for frames beyond logit_length."""
    x = RNG.standard_normal((4, 1, 3))
    label = [1, 2]
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as t:
        t.watch(xt)
        loss = tf.nn.ctc_loss([label], xt, [2], [3])
    g = t.gradient(loss, xt).numpy()
    num = np.zeros_like(x)
    eps = 1e-6
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        num[idx] = (brute_ctc((x + d)[:3, 0], label, 0) - brute_ctc((x - d)[:3, 0], label, 0)) / (2 * eps)
    np.testing.assert_allclose(g, num, atol=2e-5)
    assert np.all(g[3] == 0.0)


def test_ctc_loss_errors():
    """Bad input raises naming the argument, before anything runs."""
    x = np.zeros((4, 2, 3), np.float32)
    with pytest.raises(ValueError, match="`labels`"):
        tf.nn.ctc_loss([1, 2], x, [1, 1], [4, 4])
    with pytest.raises(ValueError, match="`label_length`.*batch size 2"):
        tf.nn.ctc_loss([[1], [2]], x, [1, 1, 1], [4, 4])
    with pytest.raises(ValueError, match="`label_length`"):
        tf.nn.ctc_loss([[1], [2]], x, None, [4, 4])
    with pytest.raises(ValueError, match="`blank_index`.*got 3"):
        tf.nn.ctc_loss([[1], [2]], x, [1, 1], [4, 4], blank_index=3)
    with pytest.raises(TypeError, match="`labels`.*float32"):
        tf.nn.ctc_loss([[1.0], [2.0]], x, [1, 1], [4, 4])
    with pytest.raises(tf.errors.InvalidArgumentError, match="`logits`"):
        tf.nn.ctc_loss([[1], [2]], np.zeros((4, 2, 3), np.int32), [1, 1], [4, 4])
    with pytest.raises(TypeError, match="`unique`"):
        tf.nn.ctc_loss([[1], [2]], x, [1, 1], [4, 4], unique=3)


def test_ctc_loss_in_a_function_and_half():
    """Under tf.function the loss is the eager one; bfloat16 logits give a bfloat16 loss."""
    x = RNG.standard_normal((5, 2, 4)).astype(np.float32)
    args = ([[1, 2], [3, 3]], [2, 2], [5, 5])
    eager = tf.nn.ctc_loss(args[0], x, *args[1:])
    traced = tf.function(lambda v: tf.nn.ctc_loss(args[0], v, *args[1:]))(tf.constant(x))
    np.testing.assert_allclose(np.asarray(traced), eager.numpy(), rtol=1e-6)
    h = tf.nn.ctc_loss(args[0], tf.constant(x, tf.bfloat16), *args[1:])
    assert h.dtype == tf.bfloat16
    np.testing.assert_allclose(h.numpy().astype(np.float32), eager.numpy(), rtol=2e-2)


def test_ctc_unique_labels_by_hand():
    """TF's docstring example and a row of one value."""
    y, idx = tf.nn.ctc_unique_labels([[3, 4, 4, 3], [7, 7, 7, 7]])
    assert y.numpy().tolist() == [[3, 4, 0, 0], [7, 0, 0, 0]]
    assert idx.numpy().tolist() == [[0, 1, 1, 0], [0, 0, 0, 0]] and idx.dtype == tf.int32
    with pytest.raises(ValueError, match="`labels`"):
        tf.nn.ctc_unique_labels([1, 2])


def test_ctc_greedy_decoder_by_hand():
    """A B B * B * B (blank last) decodes to A B B B merged and A B B B B unmerged; the second entry
    stops at its sequence length; neg_sum_logits is minus the sum of each frame's best logit."""
    a, b, blank = 0, 1, 2
    path = [a, b, b, blank, b, blank, b]
    x = np.full((7, 2, 3), -1.0, np.float32)
    for t, k in enumerate(path):
        x[t, 0, k] = 2.0 + t
        x[t, 1, k] = 1.0
    (d,), neg = tf.nn.ctc_greedy_decoder(x, [7, 3])
    assert isinstance(d, tf.sparse.SparseTensor)   # TF's type, so tf.sparse.to_dense(decoded[0]) works
    assert tf.sparse.to_dense(d, default_value=-1).numpy().tolist() == [[a, b, b, b], [a, b, -1, -1]]
    assert d.dense_shape.numpy().tolist() == [2, 4]
    assert d.indices.numpy().tolist() == [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1]]
    np.testing.assert_allclose(neg.numpy(), [[-sum(2.0 + t for t in range(7))], [-3.0]])
    (d2,), _ = tf.nn.ctc_greedy_decoder(x, [7, 3], merge_repeated=False)
    assert tf.sparse.to_dense(d2).numpy()[0].tolist() == [a, b, b, b, b]


def test_ctc_greedy_decoder_errors():
    x = np.zeros((3, 2, 4), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="sequence_length"):
        tf.nn.ctc_greedy_decoder(x, [3])
    with pytest.raises(tf.errors.InvalidArgumentError, match="must not exceed"):
        tf.nn.ctc_greedy_decoder(x, [3, 4])
    with pytest.raises(tf.errors.InvalidArgumentError, match="blank_index"):
        tf.nn.ctc_greedy_decoder(x, [3, 3], blank_index=4)
    with pytest.raises(ValueError, match="`inputs`"):
        tf.nn.ctc_greedy_decoder(x[0], [3, 3])


def test_ctc_beam_search_decoder_by_hand():
    """Uniform frames over 3 classes (blank last), 3 frames: "0" and "1" each have 6 of the 27 paths,
    "01" has 5 (01-, 011, 001, 0-1, -01); a two-frame case worked by hand: P("0") = .6*.7 + .6*.1
    + .1*.1 = 0.49."""
    d, lp = tf.nn.ctc_beam_search_decoder(np.zeros((3, 1, 3), np.float32), [3], beam_width=10, top_paths=3)
    np.testing.assert_allclose(lp.numpy()[0], np.log([6 / 27, 6 / 27, 5 / 27]), rtol=1e-5)
    assert sorted(tf.sparse.to_dense(p).numpy().tolist() for p in d[:2]) == [[[0]], [[1]]]
    assert tf.sparse.to_dense(d[2]).numpy().tolist() == [[0, 1]]
    x = np.log(np.array([[[0.6, 0.3, 0.1]], [[0.1, 0.2, 0.7]]], np.float32)) + 5.0
    d, lp = tf.nn.ctc_beam_search_decoder(x, [2], beam_width=5, top_paths=1)
    np.testing.assert_allclose(lp.numpy(), [[np.log(0.49)]], rtol=1e-5)
    assert tf.sparse.to_dense(d[0]).numpy().tolist() == [[0]]


def test_ctc_beam_search_decoder_errors():
    x = np.zeros((3, 2, 4), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`top_paths`"):
        tf.nn.ctc_beam_search_decoder(x, [3, 3], beam_width=2, top_paths=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`beam_width`"):
        tf.nn.ctc_beam_search_decoder(x, [3, 3], beam_width=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Less leaves"):
        tf.nn.ctc_beam_search_decoder(np.zeros((1, 1, 2), np.float32), [1], beam_width=5, top_paths=3)


def test_ctc_loss_of_an_infeasible_label_and_its_gradient_are_tfs():
    """TF's dense CTC renormalises each step of its forward and backward recursions and uses
    ``log(1e-307)`` for log 0 in its initial and final states: a label that cannot fit its frames
    (``[1, 1, 2]`` needs 4 frames, has 3) costs about 709, finite, with TF's gradient (``softmax -
    posterior``); an empty label and the blank at 0, last (batch-major) and in the middle.  Before,
    optax's recursion gave 706.97 where TF gives 707.84 (round 17c's CTC program).  Oracle: TF 2.21
    (gradient of ``sum(loss * [1, 2, 3])``)."""
    x = np.random.RandomState(7).randn(4, 3, 3).astype(np.float32)
    labels = np.array([[1, 1, 2], [2, 1, 0], [1, 0, 0]], np.int32)
    want = {(0, True): [708.83813, 0.9722645, 3.9586272], (-1, False): [709.4042, 2.26165, 1.3629565],
            (1, True): [708.8381, 2.6197095, 3.7046394]}
    for (blank, time_major), losses in want.items():
        xt = tf.constant(x if time_major else x.transpose(1, 0, 2))
        with tf.GradientTape() as t:
            t.watch(xt)
            loss = tf.nn.ctc_loss(labels, xt, [3, 2, 0], [3, 4, 2], logits_time_major=time_major, blank_index=blank)
            total = tf.reduce_sum(loss * [1.0, 2.0, 3.0])
        g = t.gradient(total, xt).numpy()
        np.testing.assert_allclose(loss.numpy(), losses, rtol=1e-6)
        if blank == 0:
            np.testing.assert_allclose(g[0].ravel(), [-0.0638513, 0.00307576, 0.0607575, -0.43223953, 0.3070361,
                                                       0.12520343, -2.2390194, 0.13173261, 2.1072867],
                                       rtol=1e-5, atol=1e-7)
            assert not g[3, 0].any() and not g[2:, 2].any()   # (beyond logit_length: zero)


def test_ctc_loss_of_sparse_labels_follows_tfs_ctcloss_kernel():
    """Sparse labels (TF's CTCLoss kernel): ``blank_index`` is required (ValueError), a label longer
    than its frames is an InvalidArgumentError, one whose repeats leave no path costs ``inf`` with
    the softmax as its gradient (dense labels cost about 709 there), a row's values are taken in
    column order with the gaps of ``from_dense`` closed (``[0, 1, 0]`` with blank 2 is the label
    ``[1]``).  tapejax raised for any SparseTensor before.  Oracle: TF 2.21 (gradient of
    ``sum(loss * [1, 2])``)."""
    x = tf.constant(np.random.RandomState(0).randn(3, 2, 4).astype(np.float32))
    sp = tf.sparse.from_dense

    def run(labels, frames, blank):
        with tf.GradientTape() as t:
            t.watch(x)
            loss = tf.nn.ctc_loss(sp(np.array(labels, np.int32)), x, None, np.array(frames, np.int32),
                                  blank_index=blank)
            total = tf.reduce_sum(loss * [1.0, 2.0])
        return loss.numpy(), t.gradient(total, x).numpy()

    loss, g = run([[1, 1, 2, 0], [2, 3, 0, 0]], [3, 2], 0)
    assert np.isinf(loss[0])
    np.testing.assert_allclose(loss[1], 2.8763497, rtol=1e-6)
    np.testing.assert_allclose(g[:, 0], tf.nn.softmax(x).numpy()[:, 0], rtol=1e-6)
    assert not g[2, 1].any()
    np.testing.assert_allclose(run([[1, 2, 0], [2, 2, 0]], [3, 3], -1)[0], [3.4448414, 3.5909092], rtol=1e-6)
    np.testing.assert_allclose(run([[1, 2, 0], [0, 1, 0]], [3, 2], 2)[0], [6.640635, 2.7909257], rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Not enough time"):
        run([[1, 2, 3, 1], [2, 3, 0, 0]], [3, 3], 0)
    with pytest.raises(ValueError, match="blank_index"):
        tf.nn.ctc_loss(sp(np.array([[1, 2]], np.int32)), x[:, :1], None, [3])


def test_ctc_loss_in_a_function_with_unknown_batch_frames_and_label_width_traces_once():
    """A step compiled with ``input_signature`` of ``None`` batch, frames and label width traces once
    for batches of every shape, as TF (the transition matrix is built from index comparisons, not
    NumPy, so the label width may be symbolic; tapejax traced once per shape before, with a
    retracing warning), and gives the eager losses and gradients, repeated labels included."""
    rs = np.random.RandomState(3)
    w = tf.Variable(rs.randn(3, 4).astype(np.float32))
    traces = []

    def step(feats, labels):
        traces.append(1)
        with tf.GradientTape() as tape:
            logits = tf.einsum("btf,fc->btc", feats, w)
            per = tf.nn.ctc_loss(labels, logits, tf.reduce_sum(tf.cast(labels > 0, tf.int32), axis=1),
                                 tf.fill([tf.shape(feats)[0]], tf.shape(feats)[1]), logits_time_major=False,
                                 blank_index=0)
        return per, tape.gradient(per, w)

    compiled = tf.function(step, input_signature=[tf.TensorSpec([None, None, 3], tf.float32),
                                                  tf.TensorSpec([None, None], tf.int32)])
    batches = [(rs.randn(2, 6, 3).astype(np.float32), np.array([[1, 1, 2], [3, 0, 0]], np.int32)),
               (rs.randn(3, 5, 3).astype(np.float32), np.array([[2, 2], [1, 3], [3, 0]], np.int32)),
               (rs.randn(1, 4, 3).astype(np.float32), np.array([[1, 2, 3, 1]], np.int32))]
    for feats, labels in batches:
        got, want = compiled(feats, labels), step(feats, labels)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert len(traces) == 1 + len(batches)   # one trace, and the eager runs
