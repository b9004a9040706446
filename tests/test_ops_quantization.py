"""tapejax/ops/quantization.py: ``tf.quantization``'s fake quantisers and
``quantize_and_dequantize``, values and gradients, against TF 2.21 (the numbers written here are
TF's; the sweeps compare with TF itself when it is importable).  ``tf.quantization`` was missing
from tapejax: quantization-aware training programs failed with AttributeError."""
import os

import numpy as np
import pytest

import tapejax as tf

X = np.array([-2.0, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 2.0, 3.0], np.float32)
W = np.arange(9, dtype=np.float32)


def _vars_case(mod, mn, mx, **kw):
    x, a, b = mod.Variable(X), mod.Variable(mn), mod.Variable(mx)
    with mod.GradientTape() as t:
        y = mod.quantization.fake_quant_with_min_max_vars(x, a, b, **kw)
        loss = mod.reduce_sum(y * W)
    return [y.numpy()] + [g.numpy() for g in t.gradient(loss, [x, a, b])]


def test_fake_quant_vars_nudges_the_range_and_gives_min_and_max_the_outside_gradients():
    """Range [-1, -0.5] (4 bits): nudged to [-0.5, 0]; min gets the weights below, max above."""
    y, gx, gmin, gmax = _vars_case(tf, -1.0, -0.5, num_bits=4)
    np.testing.assert_allclose(y, [-0.5, -0.5, -0.5, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(gx, [0, 0, 2, 3, 0, 0, 0, 0, 0])
    assert (gmin, gmax) == (1.0, 30.0)
    y, gx, gmin, gmax = _vars_case(tf, 0.5, 2.0, num_bits=4)
    np.testing.assert_allclose(y, [0, 0, 0, 0, 0.3, 0.5, 1, 1.5, 1.5], atol=1e-6)
    assert (gmin, gmax) == (3.0, 15.0)


def test_fake_quant_vars_at_a_zero_range_gives_zeros_and_passes_the_gradient():
    """TF's special case min == max == 0: outputs 0, the input's gradient passes everywhere."""
    y, gx, gmin, gmax = _vars_case(tf, 0.0, 0.0)
    np.testing.assert_array_equal(y, np.zeros(9))
    np.testing.assert_array_equal(gx, W)
    assert (gmin, gmax) == (0.0, 0.0)


def test_fake_quant_per_channel_and_args_and_their_gradient_functions():
    xx = tf.Variable([[-2.0, 0.3, 3.0], [0.1, -0.25, 0.6]])
    a, b = tf.Variable([-1.0, 0.0, 0.2]), tf.Variable([1.0, 0.5, 0.7])
    with tf.GradientTape() as t:
        y = tf.quantization.fake_quant_with_min_max_vars_per_channel(xx, a, b, num_bits=3, narrow_range=True)
        loss = tf.reduce_sum(y * [[1.0, 2, 3], [4, 5, 6]])
    np.testing.assert_allclose(y.numpy(), [[-1, 1 / 3, 0.5], [0, 0, 0.5]], rtol=1e-6)
    gx, ga, gb = t.gradient(loss, [xx, a, b])
    np.testing.assert_array_equal(gx.numpy(), [[0, 2, 0], [4, 0, 0]])
    np.testing.assert_array_equal(ga.numpy(), [1, 5, 0])
    np.testing.assert_array_equal(gb.numpy(), [0, 0, 9])
    with tf.GradientTape() as t:
        y = tf.quantization.fake_quant_with_min_max_args(xx, -1.0, 0.5, num_bits=3)
    np.testing.assert_allclose(y.numpy(), [[-1.0714285, 0.21428572, 0.42857143], [0, -0.21428572, 0.42857143]],
                               rtol=1e-6)
    np.testing.assert_array_equal(t.gradient(y, xx).numpy(), [[0, 1, 0], [1, 1, 0]])
    g = tf.quantization.fake_quant_with_min_max_args_gradient(tf.ones([2, 3]), xx, -1.0, 0.5)
    np.testing.assert_array_equal(g.numpy(), [[0, 1, 0], [1, 1, 0]])


def test_fake_quant_argument_errors_are_tfs():
    with pytest.raises(tf.errors.InvalidArgumentError, match="min has to be smaller than max"):
        tf.quantization.fake_quant_with_min_max_args(X, 1.0, -1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_bits must be between 2 and 16"):
        tf.quantization.fake_quant_with_min_max_vars(X, -1.0, 1.0, num_bits=17)


def test_quantize_and_dequantize_v2_gradient_uses_the_given_range_and_the_old_op_passes_all():
    """V4's gradient masks by the arguments even with ``range_given=False``; min/max get zeros.
    The deprecated op passes the whole gradient and gives the range None."""
    xv, mn, mx = tf.Variable([-2.0, -0.3, 0.0, 0.7, 1.9]), tf.Variable(-1.0), tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as t:
        y = tf.quantization.quantize_and_dequantize_v2(xv, mn, mx, range_given=False, num_bits=3)
        y2 = tf.quantization.quantize_and_dequantize(xv, mn, mx, range_given=False, num_bits=3)
    np.testing.assert_allclose(y.numpy(), [-1.9, 0, 0, 0.6333333, 1.9], rtol=1e-6)
    np.testing.assert_allclose(y2.numpy(), y.numpy())
    gx, gmn, gmx = t.gradient(y, [xv, mn, mx])
    np.testing.assert_array_equal(gx.numpy(), [0, 1, 1, 1, 0])
    assert (float(gmn), float(gmx)) == (0.0, 0.0)
    gx2, gmn2, gmx2 = t.gradient(y2, [xv, mn, mx])
    np.testing.assert_array_equal(gx2.numpy(), np.ones(5))
    assert gmn2 is None and gmx2 is None


def test_quantize_and_dequantize_v2_rounding_ranges_and_axis():
    q = tf.quantization.quantize_and_dequantize_v2
    v = tf.constant([0.5, 1.5, 2.5, -0.5, -2.5])
    np.testing.assert_allclose(q(v, -4.0, 4.0, range_given=True, num_bits=4).numpy(),
                               [0.5714286, 1.7142859, 2.2857144, -0.5714286, -2.2857144], rtol=1e-6)
    np.testing.assert_allclose(q(tf.constant([0.3, 0.7]), 0.5, 1.0, range_given=True, signed_input=False,
                                 num_bits=2).numpy(), [1 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(q(tf.constant([-0.3, 0.7]), -1.0, 1.0, range_given=True, narrow_range=True,
                                 num_bits=2).numpy(), [0, 1])
    x = tf.constant([[0.5, 1.5, -0.7], [2.5, -0.5, 0.1]])
    np.testing.assert_allclose(q(x, tf.zeros([2]), tf.zeros([2]), num_bits=4, axis=0).numpy(),
                               [[0.42857143, 1.5, -0.64285713], [2.5, -0.35714287, 0.0]], rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid range"):
        q(x, 1.0, -1.0, range_given=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_min must be a scalar"):
        q(x, tf.zeros([2]), tf.ones([2]), range_given=True, axis=0)


def _sweep(mod, seed):
    rs = np.random.RandomState(seed)
    x = (rs.randn(4, 3) * 2).astype(np.float32)
    out = []
    for nb, nr in ((8, False), (4, True), (2, False)):
        lo, hi = float(-abs(rs.randn())), float(abs(rs.randn()) + 0.1)
        xv, a, b = mod.Variable(x), mod.Variable(lo), mod.Variable(hi)
        pa, pb = mod.Variable(rs.randn(3).astype(np.float32) - 1.0), mod.Variable(rs.rand(3).astype(np.float32))
        w = rs.randn(4, 3).astype(np.float32)
        with mod.GradientTape() as t:
            ys = [mod.quantization.fake_quant_with_min_max_vars(xv, a, b, num_bits=nb, narrow_range=nr),
                  mod.quantization.fake_quant_with_min_max_vars_per_channel(xv, pa, pb, num_bits=nb, narrow_range=nr),
                  mod.quantization.fake_quant_with_min_max_args(xv, lo, hi, num_bits=nb, narrow_range=nr)]
            for mode in ("HALF_TO_EVEN", "HALF_UP"):
                for signed in (True, False):
                    ys.append(mod.quantization.quantize_and_dequantize_v2(
                        xv, a, b, signed_input=signed, num_bits=nb, range_given=True, round_mode=mode,
                        narrow_range=nr))
                    ys.append(mod.quantization.quantize_and_dequantize_v2(
                        xv, a, b, signed_input=signed, num_bits=nb, round_mode=mode, narrow_range=nr))
            loss = mod.add_n([mod.reduce_sum(y * w) for y in ys])
        out.append([y.numpy() for y in ys] + [g.numpy() for g in t.gradient(loss, [xv, a, b, pa, pb])])
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_sweep_matches_tensorflow(seed):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    real = pytest.importorskip("tensorflow")
    for got, want in zip(_sweep(tf, seed), _sweep(real, seed)):
        for i, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed} item {i}")


def test_dtypes_are_tfs():
    """float64 runs ``quantize_and_dequantize_v2`` in float64; TF's CPU has no half kernel
    (NotFoundError); the fake quantisers take float32 only (args: a conversion ValueError)."""
    import jax

    with jax.enable_x64(True):
        _float64_cases()


def _float64_cases():
    x = tf.constant([0.3, -0.77, 1.5], tf.float64)
    y = tf.quantization.quantize_and_dequantize_v2(x, -1.0, 1.0, range_given=True, num_bits=4)
    assert y.dtype == tf.float64
    np.testing.assert_allclose(y.numpy(), [2 / 7, -5 / 7, 1.0], rtol=1e-12)
    with pytest.raises(tf.errors.NotFoundError):
        tf.quantization.quantize_and_dequantize_v2(tf.cast(x, tf.float16), -1.0, 1.0, range_given=True)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.quantization.quantize_and_dequantize_v2(tf.constant([1, 2]), -1, 1)
    with pytest.raises(ValueError):
        tf.quantization.fake_quant_with_min_max_args(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="double|float64"):
        tf.quantization.fake_quant_with_min_max_vars(x, -1.0, 1.0)
