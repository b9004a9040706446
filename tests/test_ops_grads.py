"""TF's gradient conventions (tapejax/ops/_grads.py) hold in every JAX transformation: the tape,
jax.grad, jax.jit, jax.jvp (forward mode), jax.vmap and second order agree."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.ops import _grads as G


def test_sqrt_where_is_finite_under_grad_jit_and_tape():
    f = lambda x: jnp.sum(jnp.where(x > 0, G.sqrt(x), 0.0))  # noqa: E731
    x = jnp.asarray([0.0, -1.0, 4.0])
    want = np.array([0.0, 0.0, 0.25])
    np.testing.assert_allclose(jax.grad(f)(x), want)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x), want)
    tx = tf.constant([0.0, -1.0, 4.0])
    with tf.GradientTape() as t:
        t.watch(tx)
        y = tf.reduce_sum(tf.where(tx > 0, tf.sqrt(tx), 0.0))
    np.testing.assert_allclose(t.gradient(y, tx).numpy(), want)


def test_scale_nz_forward_mode_vmap_and_second_order():
    """scale_nz is linear with its own transpose: jvp, vmap and hessians work and stay finite."""
    y, ty = jax.jvp(G.sqrt, (4.0,), (1.0,))
    assert float(ty) == pytest.approx(0.25)
    np.testing.assert_allclose(jax.vmap(jax.grad(G.rsqrt))(jnp.asarray([1.0, 4.0])), [-0.5, -0.0625])
    assert float(jax.grad(jax.grad(G.sqrt))(4.0)) == pytest.approx(-0.25 * 4.0 ** -1.5)
    h = jax.hessian(lambda x: jnp.sum(jnp.where(x > 0, G.sqrt(x), 0.0)))(jnp.asarray([0.0, -1.0, 4.0]))
    assert np.all(np.isfinite(h[:2]))
    assert float(jax.grad(G.sqrt)(0.0)) == np.inf          # sqrt'(0) is inf (TF)


@pytest.mark.parametrize("f,x,want", [
    (G.tf_abs, 0.0, 0.0), (lambda v: G.leaky_relu(v, 0.2), 0.0, 0.2), (G.selu, 0.0, 1.0507009873554805),
    (G.relu6, 0.0, 0.0), (G.relu6, 6.0, 0.0), (G.relu6, 3.0, 1.0), (G.relu, 0.0, 0.0), (G.relu, -1.0, 0.0),
    (G.relu, 2.0, 1.0),
])
def test_kinks_in_reverse_and_forward_mode(f, x, want):
    assert float(jax.grad(f)(x)) == pytest.approx(want)
    assert float(jax.jvp(f, (x,), (1.0,))[1]) == pytest.approx(want)
    assert float(jax.jit(jax.grad(f))(x)) == pytest.approx(want)


def test_maximum_minimum_ties_go_to_x_with_broadcasting_and_int_operands():
    gx, gy = jax.grad(lambda a, b: jnp.sum(G.maximum(a, b)), (0, 1))(jnp.asarray([1.0, 2.0]), 1.0)
    np.testing.assert_allclose(gx, [1.0, 1.0])
    assert float(gy) == 0.0
    gx = jax.grad(lambda a: jnp.sum(G.minimum(a, 1)))(jnp.asarray([1.0, 0.5, 2.0]))  # int operand: float0 tangent
    np.testing.assert_allclose(gx, [1.0, 1.0, 0.0])


def test_clip_by_value_bounds_inclusive_and_lo_wins():
    g = jax.grad(lambda x, lo, hi: jnp.sum(G.clip_by_value(x, lo, hi)), (0, 1, 2))
    gx, glo, ghi = g(jnp.asarray([0.0, 1.0, 2.0, -1.0, 3.0]), 0.0, 2.0)
    np.testing.assert_allclose(gx, [1, 1, 1, 0, 0])
    assert (float(glo), float(ghi)) == (1.0, 1.0)
    assert float(G.clip_by_value(0.5, 1.0, 0.2)) == 1.0   # lo > hi: lo (TF's order)


def test_masked_binary_rules():
    gx, gy = jax.grad(lambda x, y: jnp.sum(G.pow(x, y)), (0, 1))(jnp.asarray([0.0, -2.0]), jnp.asarray([2.0, 2.0]))
    np.testing.assert_allclose(gy, [0.0, 0.0])
    gx, gy = jax.grad(lambda x, y: jnp.sum(G.xlogy(x, y)), (0, 1))(jnp.asarray([0.0]), jnp.asarray([0.0]))
    assert (float(gx[0]), float(gy[0])) == (0.0, 0.0)
    gx, gy = jax.grad(lambda x, y: jnp.sum(G.divide_no_nan(x, y)), (0, 1))(jnp.asarray([1.0]), jnp.asarray([0.0]))
    assert (float(gx[0]), float(gy[0])) == (0.0, 0.0)


@pytest.mark.parametrize("f", [G.relu, G.relu6])
def test_relu_mask_multiplies_an_infinite_gradient_into_nan_as_tf(f):
    """TF's ReluGrad / Relu6Grad multiply the incoming gradient by the mask: ``sqrt(relu(x))``
    at ``x <= 0`` has gradient NaN in TF (inf * 0), eagerly and under jit (where XLA would turn
    a multiplication by a converted mask into a select); the tape's op and a tapejax.function too."""
    x = jnp.asarray([-1.0, 0.0, 3.0])
    g = lambda v: jnp.sum(G.sqrt(f(v)))  # noqa: E731
    for grad in (jax.grad(g), jax.jit(jax.grad(g))):
        out = np.asarray(grad(x))
        assert np.isnan(out[:2]).all() and np.isfinite(out[2])
    tfn = tf.nn.relu if f is G.relu else tf.nn.relu6
    tx = tf.constant([-1.0, 0.0, 3.0])

    def tape_grad(v):
        with tf.GradientTape() as t:
            t.watch(v)
            y = tf.reduce_sum(tf.sqrt(tfn(v)))
        return t.gradient(y, v)

    for out in (tape_grad(tx), tf.function(tape_grad)(tx)):
        out = out.numpy()
        assert np.isnan(out[:2]).all() and np.isfinite(out[2])


def test_softmax_xent_logits_gradient_is_tfs_softmax_minus_labels_for_unnormalised_labels():
    """TF's SoftmaxCrossEntropyWithLogits kernel gives the logits ``softmax - labels``, also where the
    labels do not sum to 1 (multi-hot labels): the exact ``sum(labels) * softmax - labels`` was
    tapejax's before.  The labels get ``-log_softmax``; the tape, jax.grad, jit and jvp agree, and
    the logits' second derivative is the softmax Jacobian's (TF's numbers, 2.21)."""
    lb = np.array([[0.0, 0.0, 0.5], [0.0, 1.0, 1.0]], np.float32)
    lg = np.array([[1e4, 1e4, -1e4], [1.0, 2.0, 0.5]], np.float32)
    want_z = np.array([[0.5, 0.5, -0.5], [0.2312239, -0.3714683, -0.8597556]], np.float32)
    f = lambda a, z: jnp.sum(G.softmax_xent(a, z, -1))  # noqa: E731
    for grad in (jax.grad(f, (0, 1)), jax.jit(jax.grad(f, (0, 1)))):
        ga, gz = grad(jnp.asarray(lb), jnp.asarray(lg))
        np.testing.assert_allclose(gz, want_z, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ga, -jax.nn.log_softmax(lg), rtol=1e-5)
    _, tangent = jax.jvp(lambda z: G.softmax_xent(jnp.asarray(lb), z, -1), (jnp.asarray(lg),), (jnp.ones_like(lg),))
    np.testing.assert_allclose(tangent, want_z.sum(-1), rtol=1e-5, atol=1e-5)
    a, z = tf.constant(lb), tf.constant(lg)
    with tf.GradientTape() as t:
        t.watch(z)
        y = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(labels=a, logits=z))
    np.testing.assert_allclose(t.gradient(y, z).numpy(), want_z, rtol=1e-5, atol=1e-6)
    hz = jax.hessian(lambda z: G.softmax_xent(jnp.asarray(lb[1]), z, -1))(jnp.asarray(lg[1]))
    s = jax.nn.softmax(lg[1])
    np.testing.assert_allclose(hz, np.diag(s) - np.outer(s, s), rtol=1e-5, atol=1e-6)


def test_xlogy_xdivy_second_derivative_at_zero_is_tfs_zero():
    """TF's _XLogyGrad / _XDivyGrad take d/dx as xlogy(x != 0, y) / xdivy(x != 0, y), whose own
    derivative in y is 0 where x = 0; ``where(x == 0, 0, log y)`` gave NaN (0 * inf) at x = y = 0."""
    x = jnp.asarray([0.0, 1.0, 2.0])
    f = lambda u: jnp.sum(jax.grad(lambda v: jnp.sum(G.xlogy(v, v)))(u))  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(x), [0.0, 1.0, 0.5], rtol=1e-6)
    g = lambda u: jnp.sum(jax.grad(lambda v: jnp.sum(G.xdivy(v, v * 0.0 + 2.0)))(u))  # noqa: E731
    np.testing.assert_allclose(jax.grad(g)(x), [0.0, 0.0, 0.0])
    h = jax.hessian(lambda v: G.xlogy(v[0], v[1]))(jnp.asarray([0.0, 0.0]))
    assert np.isfinite(np.asarray(h)).all()


def test_tensor_scatter_nd_update_gradient_reaches_overwritten_duplicates_as_tfs():
    """TF's ``_TensorScatterUpdateGrad``: every update gets ``gather_nd(g, indices)``, also one
    overwritten by a later duplicate index (a YOLO target with two objects in one grid cell; JAX's
    own rule gives it zero), and the tensor gets ``g`` with zeros where any update is written.
    (TF 2.21's numbers.)"""
    base = tf.Variable(tf.zeros([2, 3, 3]))
    upd = tf.Variable([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]])
    idx = tf.constant([[0, 1], [1, 2], [0, 1]])
    w = tf.reshape(tf.range(18, dtype=tf.float32), [2, 3, 3])
    with tf.GradientTape(persistent=True) as t:
        out = tf.tensor_scatter_nd_update(base, idx, upd)
        s = tf.reduce_sum(out * w)
    gb, gu = t.gradient(s, [base, upd])
    np.testing.assert_array_equal(out.numpy()[0, 1], [7., 8., 9.])
    np.testing.assert_array_equal(gu.numpy(), [[3., 4., 5.], [15., 16., 17.], [3., 4., 5.]])
    np.testing.assert_array_equal(gb.numpy(), np.where([[[1], [0], [1]], [[1], [1], [0]]], w.numpy(), 0.0))
    with tf.autodiff.ForwardAccumulator(upd, tf.ones_like(upd)) as acc:
        out = tf.tensor_scatter_nd_update(base, idx, upd)
    np.testing.assert_array_equal(acc.jvp(out).numpy()[0, 1], [2., 2., 2.])   # (TF's jvp: the vjp transposed)
    ints = tf.tensor_scatter_nd_update(tf.zeros([3], tf.int32), [[1], [1]], [4, 5])
    assert ints.dtype == tf.int32 and ints.numpy().tolist() == [0, 5, 0]
