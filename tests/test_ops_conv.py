"""tapejax/ops/conv.py: max_pool3d's gradient at tied maxima, TF 2.21's MaxPool3DGrad (every
element equal to its window's maximum gets the window's gradient; MaxPool's 2-D and 1-D gradient
goes to the first maximum only, ops/nn.py)."""
import jax
import jax.numpy as jnp
import numpy as np

import tapejax as tf
from tapejax.ops import conv


def _pool_grad(x, *args):
    x = tf.constant(x)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.nn.max_pool3d(x, *args)
    return y.numpy(), t.gradient(y, x).numpy()


def test_max_pool3d_gives_every_tied_maximum_the_gradient_as_tf():
    """One 2x2x2 window holding two 1s: TF gives both the gradient (JAX's select_and_scatter gave it
    to the first only); with SAME padding the zero windows' ties all get it (TF's numbers)."""
    x = np.zeros((1, 3, 3, 3, 1), np.float32)
    x[0, 0, 0, 0, 0] = x[0, 1, 1, 1, 0] = 1.0
    y, g = _pool_grad(x, 2, 2, "VALID")
    assert y.ravel().tolist() == [1.0]
    assert np.flatnonzero(g).tolist() == [0, 13] and g.sum() == 2.0
    _, g = _pool_grad(x, 2, 2, "SAME")
    assert g.ravel().astype(int).tolist() == [1, 0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                1, 1, 1, 1, 1, 1]


def test_max_pool3d_without_ties_and_in_forward_mode():
    """Without ties the gradient is the usual one-per-window routing; the rule's tangent is linear
    (jax.jvp and jax.grad of the JAX function agree)."""
    x = np.random.RandomState(0).randn(1, 4, 4, 4, 2).astype(np.float32)
    y, g = _pool_grad(x, 2, 2, "SAME")
    assert g.sum() == y.size and set(np.unique(g)) == {0.0, 1.0}
    f = lambda u: conv._max_pool3d(u, ksize=(2, 2, 2), strides=(2, 2, 2), padding="SAME", nchw=False)  # noqa: E731
    t = jnp.asarray(np.random.RandomState(1).randn(*x.shape).astype(np.float32))
    _, ty = jax.jvp(f, (jnp.asarray(x),), (t,))
    np.testing.assert_allclose(float(jnp.sum(ty)), float(jnp.sum(jax.grad(lambda u: jnp.sum(f(u)))(jnp.asarray(x)) * t)),
                               rtol=1e-5)


def test_dilation2d_routes_a_ties_gradient_to_its_first_window_position_as_tf():
    """TF's Dilation2D backprops keep the first maximum of ``x + w`` in (row, column) order: on a
    flat image with a zero 2x2 filter (every candidate tied) each output's gradient goes to its own
    pixel (the window's first position) and the filter's to its [0, 0] tap (TF 2.21: input
    gradient all 1, filter gradient [[9, 0], [0, 0]]); jnp.max shared it among the ties."""
    x = tf.constant(np.ones((1, 3, 3, 1), np.float32))
    w = tf.constant(np.zeros((2, 2, 1), np.float32))
    with tf.GradientTape() as t:
        t.watch([x, w])
        y = tf.reduce_sum(tf.nn.dilation2d(x, w, [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]))
    gx, gw = t.gradient(y, [x, w])
    np.testing.assert_array_equal(gx.numpy(), np.ones((1, 3, 3, 1)))
    np.testing.assert_array_equal(gw.numpy()[..., 0], [[9.0, 0.0], [0.0, 0.0]])
