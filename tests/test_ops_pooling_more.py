"""max_pool_with_argmax, isotonic_regression and with_space_to_batch (tapejax.ops.pooling_more)
against hand oracles: a loop over windows with TF's index formula, pool-adjacent-violators and a
brute-force least-squares check, the dilated op.  TF parity: tests/parity/test_ops_nn_more.py."""
import itertools

import numpy as np
import pytest

import tapejax as tf

RNG = np.random.default_rng(4)


def loop_pool(x, k, s):
    """VALID max pool with TF's flattened argmax (batch included), by loops; first maximum wins."""
    b, h, w, c = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    val, idx = np.zeros((b, oh, ow, c), x.dtype), np.zeros((b, oh, ow, c), np.int64)
    for n, i, j, ch in itertools.product(range(b), range(oh), range(ow), range(c)):
        best = None
        for di, dj in itertools.product(range(k), range(k)):
            y, xx = i * s + di, j * s + dj
            if best is None or x[n, y, xx, ch] > best[0]:
                best = (x[n, y, xx, ch], ((n * h + y) * w + xx) * c + ch)
        assert best is not None
        val[n, i, j, ch], idx[n, i, j, ch] = best
    return val, idx


def test_max_pool_with_argmax_by_loops():
    """Values and indices equal the loop's; without the batch the index drops b*h*w*c; the gradient
    puts each output's cotangent at its argmax (summed where windows share it)."""
    x = np.round(RNG.standard_normal((2, 5, 5, 2)), 1).astype(np.float32)   # (rounded: ties occur)
    v, i = tf.nn.max_pool_with_argmax(x, 2, 1, "VALID", include_batch_in_index=True)
    want_v, want_i = loop_pool(x, 2, 1)
    np.testing.assert_array_equal(v.numpy(), want_v)
    np.testing.assert_array_equal(i.numpy(), want_i)
    _, i2 = tf.nn.max_pool_with_argmax(x, 2, 1, "VALID")
    np.testing.assert_array_equal(i2.numpy(), want_i % (5 * 5 * 2))
    xt = tf.constant(x)
    ct = RNG.standard_normal(want_v.shape).astype(np.float32)
    with tf.GradientTape() as t:
        t.watch(xt)
        out = tf.nn.max_pool_with_argmax(xt, 2, 1, "VALID")[0]
    g = t.gradient(out, xt, output_gradients=tf.constant(ct)).numpy().reshape(-1)
    want = np.zeros(x.size, np.float32)
    np.add.at(want, want_i.reshape(-1), ct.reshape(-1))
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_max_pool_with_argmax_errors():
    x = np.zeros((1, 3, 3, 1), np.float32)
    with pytest.raises(ValueError, match="`padding`"):
        tf.nn.max_pool_with_argmax(x, 2, 1, "FULL")
    with pytest.raises(ValueError, match="`input`"):
        tf.nn.max_pool_with_argmax(x[0], 2, 1, "VALID")
    with pytest.raises(TypeError, match="`output_dtype`"):
        tf.nn.max_pool_with_argmax(x, 2, 1, "VALID", output_dtype=tf.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ksize"):
        tf.nn.max_pool_with_argmax(x, 4, 1, "VALID")
    with pytest.raises(tf.errors.InvalidArgumentError, match="`input`"):
        tf.nn.max_pool_with_argmax(np.zeros((1, 3, 3, 1), np.int32), 2, 1, "VALID")


def brute_isotonic(row):
    """Least-squares non-increasing fit by checking every partition into blocks (small rows)."""
    n, best = len(row), None
    for cuts in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        means = [np.mean(row[a:b]) for a, b in zip(bounds, bounds[1:])]
        if all(m1 >= m2 for m1, m2 in zip(means, means[1:])):
            fit = np.concatenate([np.full(b - a, m) for a, b, m in zip(bounds, bounds[1:], means)])
            err = np.sum((fit - row) ** 2)
            if best is None or err < best[0] - 1e-12:
                best = (err, fit)
    assert best is not None
    return best[1]


def test_isotonic_regression_is_the_least_squares_fit():
    """The output is the best non-increasing fit (every block partition tried), non-decreasing with
    decreasing=False; the gradient averages the cotangent over each block."""
    x = np.round(RNG.standard_normal((4, 6)), 1).astype(np.float32)
    xt = tf.constant(x)
    ct = RNG.standard_normal((4, 6)).astype(np.float32)
    with tf.GradientTape() as t:
        t.watch(xt)
        y, seg = tf.nn.isotonic_regression(xt)
    g = t.gradient(y, xt, output_gradients=tf.constant(ct)).numpy()
    for r in range(4):
        np.testing.assert_allclose(y.numpy()[r], brute_isotonic(x[r].astype(np.float64)), rtol=1e-5, atol=1e-6)
        s = seg.numpy()[r]
        for k in set(s.tolist()):
            np.testing.assert_allclose(g[r][s == k], ct[r][s == k].mean(), rtol=1e-5)
    up, _ = tf.nn.isotonic_regression(xt, decreasing=False)
    np.testing.assert_allclose(up.numpy()[0], -brute_isotonic(-x[0].astype(np.float64)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="`inputs`"):
        tf.nn.isotonic_regression(3.0)


def test_with_space_to_batch_is_the_dilated_op():
    """SAME and VALID, rates [2, 3]: the result equals tf.nn.convolution with dilations; rate 1 calls
    the op as it is; bad arguments raise naming them."""
    x = tf.constant(RNG.standard_normal((2, 9, 7, 3)).astype(np.float32))
    w = tf.constant(RNG.standard_normal((3, 2, 3, 2)).astype(np.float32))
    for pad in ("SAME", "VALID"):
        got = tf.nn.with_space_to_batch(x, [2, 3], pad, lambda inp, n, p: tf.nn.convolution(inp, w, padding=p),
                                        filter_shape=[3, 2])
        want = tf.nn.convolution(x, w, padding=pad, dilations=[2, 3])
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="`filter_shape`"):
        tf.nn.with_space_to_batch(x, [2, 2], "SAME", lambda inp, n, p: inp)
    with pytest.raises(ValueError, match="`dilation_rate`"):
        tf.nn.with_space_to_batch(x, [0, 2], "VALID", lambda inp, n, p: inp)
    with pytest.raises(ValueError, match="`spatial_dims`"):
        tf.nn.with_space_to_batch(x, [2, 2], "VALID", lambda inp, n, p: inp, spatial_dims=[2, 1])


def test_fractional_pool_sequences_follow_tf_rules():
    """Random sequences: n_out = floor(n_in / ratio) steps, each k or k + 1, summing to n_in; pseudo-random:
    ceil(alpha * (i + u)) - 1 for one u in [0, max_u); an op seed repeats after set_seed."""
    x = RNG.standard_normal((1, 23, 17, 1)).astype(np.float32)
    for _ in range(5):
        _, r, c = tf.nn.fractional_max_pool(x, [1.0, 1.7, 1.3, 1.0])
        for seq, n_in, ratio in ((r.numpy(), 23, 1.7), (c.numpy(), 17, 1.3)):
            n_out = int(np.floor(n_in / ratio))
            assert len(seq) == n_out + 1 and seq[0] == 0 and seq[-1] == n_in
            assert set(np.diff(seq).tolist()) <= {n_in // n_out, n_in // n_out + 1}
        _, r, _ = tf.nn.fractional_avg_pool(x, [1.0, 1.7, 1.3, 1.0], pseudo_random=True)
        seq, alpha, k = r.numpy(), 23 / 13, 23 // 13
        max_u = min((k + 2) / alpha - 1, (23 + 1 - k) / alpha - 12)
        us = [u for u in np.linspace(0, max_u, 2001) if all(
            int(np.ceil(alpha * (i + u))) - 1 == seq[i] for i in range(1, 13))]
        assert us and seq[-1] == 23, seq
    tf.random.set_seed(3)
    a = tf.nn.fractional_max_pool(x, [1.0, 1.7, 1.3, 1.0], seed=4)[1].numpy()
    tf.random.set_seed(3)
    b = tf.nn.fractional_max_pool(x, [1.0, 1.7, 1.3, 1.0], seed=4)[1].numpy()
    np.testing.assert_array_equal(a, b)
    tf.random.set_seed(None)


def test_fractional_pool_gradients():
    """Max: each output's cotangent lands on its region's maximum; avg: spread evenly over the region
    (overlapping regions share the boundary row/column)."""
    x = RNG.standard_normal((1, 9, 7, 2)).astype(np.float32)
    for kind, f in (("max", tf.nn.fractional_max_pool), ("avg", tf.nn.fractional_avg_pool)):
        xt = tf.constant(x)
        with tf.GradientTape() as t:
            t.watch(xt)
            out, rows, cols = f(xt, [1.0, 1.5, 1.4, 1.0], overlapping=True)
        ct = RNG.standard_normal(tuple(out.shape)).astype(np.float32)
        g = t.gradient(out, xt, output_gradients=tf.constant(ct)).numpy()
        r, c = rows.numpy(), cols.numpy()
        want = np.zeros_like(x)
        for i in range(len(r) - 1):
            for j in range(len(c) - 1):
                r1, c1 = min(r[i + 1] + 1, 9), min(c[j + 1] + 1, 7)
                for ch in range(2):
                    win = x[0, r[i]:r1, c[j]:c1, ch]
                    if kind == "max":
                        a, b = np.unravel_index(np.argmax(win), win.shape)
                        want[0, r[i] + a, c[j] + b, ch] += ct[0, i, j, ch]
                    else:
                        want[0, r[i]:r1, c[j]:c1, ch] += ct[0, i, j, ch] / win.size
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_fractional_pool_errors():
    x = np.zeros((1, 4, 4, 1), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`pooling_ratio`"):
        tf.nn.fractional_max_pool(x, [1.0, 0.5, 2.0, 1.0])
    with pytest.raises(ValueError, match="`pooling_ratio`"):
        tf.nn.fractional_avg_pool(x, [2.0, 2.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="`value`"):
        tf.nn.fractional_avg_pool(x[0], [1.0, 2.0, 2.0, 1.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="too large"):
        tf.nn.fractional_max_pool(x, [1.0, 5.0, 2.0, 1.0])


def test_fractional_pool_in_a_function():
    """With an op seed the pooling runs inside tf.function (its regions fixed for the trace) and equals
    the pooling over the sequences it returns."""
    x = tf.constant(RNG.standard_normal((1, 7, 6, 1)).astype(np.float32))
    out, rows, cols = tf.function(lambda v: tf.nn.fractional_avg_pool(v, [1.0, 1.4, 1.5, 1.0], seed=9))(x)
    r, c = rows.numpy(), cols.numpy()
    xv = x.numpy()
    want = [[xv[0, r[i]:r[i + 1], c[j]:c[j + 1], 0].mean() for j in range(len(c) - 1)] for i in range(len(r) - 1)]
    np.testing.assert_allclose(out.numpy()[0, :, :, 0], want, rtol=1e-5)
