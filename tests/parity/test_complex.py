"""Complex gradients under TensorFlow and tapejax: TF's convention, not JAX's.

TF's gradient of a complex value is the conjugate of JAX's cotangent: ``d(c * z)/dz`` is
``conj(c)`` in TF and ``c`` from ``jax.vjp``.  tapejax follows TF everywhere a cotangent
crosses the API: ``tape.gradient`` (and its ``output_gradients``), ``jacobian``,
``batch_jacobian``, Variables, ``custom_gradient`` (the upstream gradient it sees and what it
returns), ``tf.test.compute_gradient``; a ``ForwardAccumulator``'s tangent is the plain
directional derivative in both.  Each case runs deferred and eager (``modes=True``).
"""
import numpy as np

from .harness import parity

Z = [1 + 2j, 3 - 1j]
C = [2 - 1j, 1 + 1j]


@parity(modes=True)
def test_holomorphic_product(tf):
    """d(z * c)/dz = conj(c); with output_gradients u: u * conj(c)."""
    z, c = tf.constant(Z, tf.complex64), tf.constant(C, tf.complex64)
    with tf.GradientTape(persistent=True) as t:
        t.watch(z)
        y = z * c
    return [t.gradient(y, z), t.gradient(y, z, output_gradients=tf.constant([1j, 2 + 1j], tf.complex64)),
            t.gradient(y, c)]


@parity(modes=True)
def test_non_holomorphic(tf):
    """|z| (real output): z / |z|; |z| * exp(z) (complex, neither holomorphic nor real)."""
    z = tf.constant(Z, tf.complex64)
    with tf.GradientTape(persistent=True) as t:
        t.watch(z)
        a = tf.abs(z)
        y = tf.cast(a, tf.complex64) * tf.exp(z)
        s = tf.reduce_sum(a * a)
    return [t.gradient(a, z), t.gradient(y, z), t.gradient(s, z)]


@parity(modes=True)
def test_jacobians(tf):
    """jacobian rows are conjugated gradients; batch_jacobian the same per example."""
    z = tf.constant(Z, tf.complex64)
    zb = tf.constant([Z, C], tf.complex64)
    with tf.GradientTape(persistent=True) as t:
        t.watch([z, zb])
        y = tf.exp(z) * tf.cast(tf.abs(z), tf.complex64)
        yb = zb * zb * tf.constant(C, tf.complex64)
        w = tf.constant([[1 - 1j, 2j], [0.5 + 0j, 1 + 1j]], tf.complex64)
        m = tf.linalg.matvec(w, z)
    return [t.jacobian(y, z), t.batch_jacobian(yb, zb), t.jacobian(m, z)]


@parity(modes=True)
def test_variable(tf):
    """A complex Variable's gradient through |v|^2 and c * v, and one SGD step with it."""
    v = tf.Variable(Z, dtype=tf.complex64)
    c = tf.constant(C, tf.complex64)
    with tf.GradientTape() as t:
        a = tf.abs(v)
        loss = tf.cast(tf.reduce_sum(a * a), tf.complex64) + tf.reduce_sum(v * c)
    g = t.gradient(loss, v)
    v.assign_sub(0.1 * g)
    return [g, v]


@parity(modes=True)
def test_custom_gradient(tf):
    """The grad_fn sees TF's upstream gradient (conj(c), where JAX's is c) and returns TF's
    gradient: conj(c) * (1 + 1j) (JAX's convention throughout would give conj(c) * (1 - 1j))."""

    @tf.custom_gradient
    def f(x):
        def grad(up):
            return up * tf.constant(1 + 1j, tf.complex64)
        return x * 2, grad

    z, c = tf.constant(Z, tf.complex64), tf.constant(C, tf.complex64)
    with tf.GradientTape() as t:
        t.watch(z)
        y = f(z) * c
    return t.gradient(y, z)


@parity(modes=True)
def test_forward_accumulator(tf):
    """The jvp is the directional derivative (no conjugate) in both."""
    z = tf.constant(Z, tf.complex64)
    with tf.autodiff.ForwardAccumulator(z, tf.constant([1 + 0j, 1j], tf.complex64)) as acc:
        y = tf.exp(z) * tf.cast(tf.abs(z), tf.complex64)
        h = z * z
    return [acc.jvp(y), acc.jvp(h)]


@parity(modes=True)
def test_nested_second_derivative(tf):
    """A second derivative through a complex function (the inner gradient conjugated)."""
    z = tf.constant(Z, tf.complex64)
    with tf.GradientTape() as outer:
        outer.watch(z)
        with tf.GradientTape() as inner:
            inner.watch(z)
            y = z * z * z
        g = inner.gradient(y, z)
    return [g, outer.gradient(g, z)]


@parity(rtol=1e-3, atol=1e-3)   # the numerical Jacobian: float32 differences
def test_compute_gradient_complex(tf):
    """The gradient checker counts a complex number as its (real, imaginary) pair: real 2n x 2m
    Jacobians, theoretical equal to numerical for holomorphic and non-holomorphic functions."""
    cg = tf.test.compute_gradient
    x = np.array([1 + 2j, -0.5 + 1j], np.complex64)
    return [cg(lambda v: v * v, [x]), cg(lambda v: tf.abs(v), [x]),
            cg(lambda v: tf.exp(v) * tf.constant([2 - 1j, 1j], tf.complex64), [x], delta=1e-3)]


@parity(modes=True)
def test_in_function(tf):
    """The same convention inside a compiled step (tf.function): gradient and update."""
    v = tf.Variable(Z, dtype=tf.complex64)
    c = tf.constant(C, tf.complex64)

    @tf.function
    def step():
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * v * c)
        g = t.gradient(loss, v)
        v.assign_sub(0.05 * g)
        return g

    return [step(), step(), v]
