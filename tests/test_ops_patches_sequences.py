"""extract_volume_patches and sobol_sample (tapejax.ops.patches_sequences) against hand oracles: a
loop over windows in TF's layout, the van der Corput sequence (the Sobol sequence's first
dimension) and the second dimension's known points.  TF parity: tests/parity/test_ops_nn_more.py."""
import itertools

import numpy as np
import pytest

import tapejax as tf

RNG = np.random.default_rng(6)


def loop_patches(x, k, s, pad):
    b, dims, d = x.shape[0], x.shape[1:4], x.shape[4]
    outs, starts = [], []
    for n, kk, ss in zip(dims, k, s):
        if pad == "VALID":
            o = (n - kk) // ss + 1
            starts.append([i * ss for i in range(o)])
        else:
            o = -(-n // ss)
            before = max((o - 1) * ss + kk - n, 0) // 2
            starts.append([i * ss - before for i in range(o)])
        outs.append(o)
    out = np.zeros((b, *outs, int(np.prod(k)) * d), x.dtype)
    for i, j, m in itertools.product(*(range(o) for o in outs)):
        patch = []
        for a, c, e in itertools.product(*(range(kk) for kk in k)):
            p, r, q = starts[0][i] + a, starts[1][j] + c, starts[2][m] + e
            inside = 0 <= p < dims[0] and 0 <= r < dims[1] and 0 <= q < dims[2]
            patch.append(x[:, p, r, q, :] if inside else np.zeros((b, d), x.dtype))
        out[:, i, j, m, :] = np.concatenate(patch, axis=1)
    return out


@pytest.mark.parametrize("k,s,pad", [((2, 2, 2), (2, 2, 2), "VALID"), ((3, 2, 2), (2, 1, 3), "SAME"),
                                     ((1, 3, 2), (1, 2, 1), "SAME")])
def test_extract_volume_patches_by_loops(k, s, pad):
    """The patches equal the loop's; the gradient is the scatter-add of the cotangent (each input gets
    the sum over the patch entries that hold it)."""
    x = RNG.standard_normal((2, 5, 4, 6, 3)).astype(np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as t:
        t.watch(xt)
        p = tf.extract_volume_patches(xt, [1, *k, 1], [1, *s, 1], pad)
    np.testing.assert_array_equal(p.numpy(), loop_patches(x, k, s, pad))
    # the gradient of sum(patches) counts how many patch entries each input appears in
    counts = loop_patches(np.ones_like(x), k, s, pad)   # (ones where inside)
    g = t.gradient(p, xt).numpy()
    assert g.sum() == pytest.approx(counts.sum())
    assert g.min() >= 0 and g.max() <= np.prod(k)


def test_extract_volume_patches_errors():
    x = np.zeros((1, 3, 3, 3, 1), np.float32)
    with pytest.raises(tf.errors.UnimplementedError, match="`ksizes`"):
        tf.extract_volume_patches(x, [2, 2, 2, 2, 1], [1, 1, 1, 1, 1], "VALID")
    with pytest.raises(ValueError, match="`strides`"):
        tf.extract_volume_patches(x, [1, 2, 2, 2, 1], [1, 1, 1, 1], "VALID")
    with pytest.raises(ValueError, match="`padding`"):
        tf.extract_volume_patches(x, [1, 2, 2, 2, 1], [1, 1, 1, 1, 1], "FULL")
    with pytest.raises(tf.errors.InvalidArgumentError, match="`input`"):
        tf.extract_volume_patches(x[0], [1, 2, 2, 2, 1], [1, 1, 1, 1, 1], "VALID")
    # (TF: a window larger than the input under VALID gives no patches)
    assert tf.extract_volume_patches(x, [1, 4, 2, 2, 1], [1, 1, 1, 1, 1], "VALID").shape == (1, 0, 2, 2, 16)


def test_sobol_sample_by_hand():
    """Dimension 1 is van der Corput's sequence in base 2 from its second point (1/2, 3/4, 1/4, 3/8, ...);
    dimension 2 of the first points is 1/2, 1/4, 3/4, 3/8; skip starts further on; float32 by default."""
    pts = tf.math.sobol_sample(2, 7)
    assert pts.dtype == tf.float32 and pts.shape == (7, 2)
    np.testing.assert_array_equal(pts.numpy()[:, 0], [0.5, 0.75, 0.25, 0.375, 0.875, 0.625, 0.125])
    np.testing.assert_array_equal(pts.numpy()[:4, 1], [0.5, 0.25, 0.75, 0.375])
    np.testing.assert_array_equal(tf.math.sobol_sample(2, 3, skip=4).numpy(), pts.numpy()[4:])


def test_sobol_sample_errors():
    with pytest.raises(tf.errors.InvalidArgumentError, match="`dim`"):
        tf.math.sobol_sample(0, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`num_results`"):
        tf.math.sobol_sample(2, 0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`skip`"):
        tf.math.sobol_sample(2, 3, skip=-1)
    with pytest.raises(TypeError, match="`dtype`"):
        tf.math.sobol_sample(2, 3, dtype=tf.int32)


@pytest.mark.parametrize("max_index,rounds", [(0, 4), (1, 4), (9, 4), (300, 8), (70000, 4)])
def test_random_index_shuffle_is_a_bijection(max_index, rounds):
    """For each seed the map is a permutation of [0, max_index], different seeds give different ones,
    and the compiled op gives the eager values."""
    idx = np.arange(max_index + 1, dtype=np.int32)
    perms = [tf.random_index_shuffle(idx, np.array(s, np.int32), np.int32(max_index), rounds=rounds).numpy()
             for s in ([1, 2, 3], [3, 2, 1])]
    for p in perms:
        assert sorted(p.tolist()) == idx.tolist()
    if max_index > 8:
        assert not np.array_equal(perms[0], perms[1]) and not np.array_equal(perms[0], idx)
    f = tf.function(lambda i: tf.random_index_shuffle(i, [1, 2, 3], max_index, rounds=rounds))
    np.testing.assert_array_equal(np.asarray(f(tf.constant(idx))), perms[0])


def test_random_index_shuffle_errors():
    with pytest.raises(tf.errors.InvalidArgumentError, match="`rounds`"):
        tf.random_index_shuffle(1, [1, 2, 3], 5, rounds=3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`seed`"):
        tf.random_index_shuffle(1, [1, 2], 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`index`"):
        tf.random_index_shuffle([[1]], [1, 2, 3], 5)
    with pytest.raises(TypeError, match="`index`"):
        tf.random_index_shuffle(1.0, [1, 2, 3], 5)
