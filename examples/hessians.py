"""TF2's Hessian recipes, unchanged, on tapejax: they all give the same matrix.

Run:  python examples/hessians.py

The function is f(x) = sum(tanh(W x) ** 2) / 2 + sum(x ** 4) / 4 for a
3-vector x.  The recipes are the ones TF's guides use:

1. nested tapes: the gradient of each component of the gradient (a loop);
2. the jacobian of a gradient (one call, the usual TF2 recipe);
3. forward-over-backward: a ForwardAccumulator over a GradientTape, one
   Hessian-vector product per basis vector (the columns of the Hessian);
4. backward-over-forward: a GradientTape over a ForwardAccumulator;
5. ``tf.hessians`` (TF1's graph-mode helper) inside ``tf.function``.

``jax.hessian`` of the same pure function is printed last as the oracle.
The recipes are plain TF2 code: with ``import tensorflow as tf`` instead of
tapejax this file prints the same matrix under TensorFlow.
"""
import jax
import jax.numpy as jnp
import numpy as np

import tapejax as tf

W = np.array([[0.5, -1.0, 0.3], [0.2, 0.4, -0.6]], np.float32)
X0 = np.array([0.3, -0.7, 1.1], np.float32)


def f(x):
    h = tf.tanh(tf.reshape(tf.matmul(tf.constant(W), tf.reshape(x, [3, 1])), [2]))
    return tf.reduce_sum(h * h) / 2.0 + tf.reduce_sum(x * x * x * x) / 4.0


def f_jax(x):
    return jnp.sum(jnp.tanh(W @ x) ** 2) / 2.0 + jnp.sum(x ** 4) / 4.0


def nested_tapes(x):
    """Recipe 1: outer tape over the inner gradient, one gradient per component."""
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            y = f(x)
        g = inner.gradient(y, x)
        parts = [g[i] for i in range(3)]
    return tf.stack([outer.gradient(p, x) for p in parts])


def jacobian_of_gradient(x):
    """Recipe 2: ``outer.jacobian(inner.gradient(y, x), x)``."""
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = f(x)
        g = inner.gradient(y, x)
    return outer.jacobian(g, x)


def forward_over_backward(x):
    """Recipe 3: Hessian-vector products H e_i with a ForwardAccumulator outside."""
    cols = []
    for i in range(3):
        e = tf.constant(np.eye(3, dtype=np.float32)[i])
        with tf.autodiff.ForwardAccumulator(x, e) as acc:
            with tf.GradientTape() as tape:
                y = f(x)
            g = tape.gradient(y, x)
        cols.append(acc.jvp(g))
    return tf.stack(cols, axis=1)


def backward_over_forward(x):
    """Recipe 4: the gradient of a JVP, d(grad f . e_i)/dx, a GradientTape outside."""
    rows = []
    for i in range(3):
        e = tf.constant(np.eye(3, dtype=np.float32)[i])
        with tf.GradientTape() as tape:
            with tf.autodiff.ForwardAccumulator(x, e) as acc:
                y = f(x)
        rows.append(tape.gradient(acc.jvp(y), x))
    return tf.stack(rows)


@tf.function
def compiled_hessians(x):
    """Recipe 5: ``tf.hessians`` (graph mode, so inside ``tf.function``): one compiled step."""
    return tf.hessians(f(x), x)[0]


def main():
    x = tf.Variable(X0)
    oracle = np.asarray(jax.hessian(f_jax)(X0))
    np.set_printoptions(precision=5, suppress=True)
    for name, recipe in [("nested tapes", nested_tapes), ("jacobian of gradient", jacobian_of_gradient),
                         ("forward-over-backward", forward_over_backward),
                         ("backward-over-forward", backward_over_forward),
                         ("tf.hessians in tf.function", compiled_hessians)]:
        h = recipe(x).numpy()
        err = float(np.max(np.abs(h - oracle)))
        print(f"{name}  (max |diff| vs jax.hessian: {err:.2e})\n{h}\n")
        assert h.shape == (3, 3) and err < 1e-4, name
    print(f"jax.hessian (oracle)\n{oracle}")


if __name__ == "__main__":
    main()
