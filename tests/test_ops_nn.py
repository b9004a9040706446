"""tapejax/ops/nn.py: TF's activation kernels at edge points (TF 2.21's numbers;
tests/parity/test_edge_points.py compares the whole sweep with TF)."""
import numpy as np

import tapejax as tf


def test_elu_selects_on_x_below_zero_as_tfs_kernel():
    """TF's Elu / EluGrad select on ``x < 0`` (``activations < 0``): at NaN the value is NaN and the
    gradient 1 (selecting on ``x > 0`` gave expm1'(NaN) = NaN), -0.0 stays -0.0, elu'(0) = 1 and
    elu'(-inf) = 0."""
    x = tf.constant([np.nan, -0.0, 0.0, -np.inf, -1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.nn.elu(x)
    np.testing.assert_array_equal(y.numpy(), [np.nan, -0.0, 0.0, -1.0, np.expm1(np.float32(-1.0)), 2.0])
    assert np.signbit(y.numpy()[1])
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [1.0, 1.0, 1.0, 0.0, np.exp(-1.0), 1.0], rtol=1e-6)
