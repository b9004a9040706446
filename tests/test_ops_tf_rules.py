"""``ops.tf_rules.with_tf_rules``: a plain JAX function's values unchanged, its derivatives TF's at
kinks and ties.  Oracles: TF's rules by hand (TF_SEMANTICS 11 and 12; TF 2.21 gives these
numbers) and the JAX function itself for the values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tapejax.ops.tf_rules import with_tf_rules

X = jnp.array([0.0, 1.0, 0.5, -2.0])
Y = jnp.array([0.0, 1.0, 0.2, 3.0])

CASES = {
    # name: (f(x, y) -> scalar, TF's d/dx, JAX's d/dx where it differs)
    "abs at 0": (lambda x, y: jnp.sum(jnp.abs(x - y)), [0.0, 0.0, 1.0, -1.0], [1.0, 1.0, 1.0, -1.0]),
    "maximum tie to x": (lambda x, y: jnp.sum(jnp.maximum(x, y)), [1.0, 1.0, 1.0, 0.0], [0.5, 0.5, 1.0, 0.0]),
    "minimum tie to x": (lambda x, y: jnp.sum(jnp.minimum(x, y)), [1.0, 1.0, 0.0, 1.0], [0.5, 0.5, 0.0, 1.0]),
    "maximum(y, x): tie to y": (lambda x, y: jnp.sum(jnp.maximum(y, x)), [0.0, 0.0, 1.0, 0.0], [0.5, 0.5, 1.0, 0.0]),
    "clip bounds inclusive": (lambda x, y: jnp.sum(jnp.clip(x, 0.0, 1.0)), [1.0, 1.0, 1.0, 0.0], [0.5, 0.5, 1.0, 0.0]),
    "clip upper only": (lambda x, y: jnp.sum(jnp.clip(x, None, 0.5)), [1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.5, 1.0]),
    "sqrt under where": (lambda x, y: jnp.sum(jnp.where(x > 0, jnp.sqrt(x), 0.0)),
                         [0.0, 0.5, 0.5 / np.sqrt(0.5), 0.0], [np.nan, 0.5, 0.5 / np.sqrt(0.5), np.nan]),
    "pow d/dx": (lambda x, y: jnp.sum(jnp.power(jnp.abs(x) + 1.0, y)), None, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_are_the_functions_and_derivatives_tfs(name):
    f, tf_grad, jax_grad = CASES[name]
    g = with_tf_rules(f)
    np.testing.assert_allclose(jax.jit(g)(X, Y), jax.jit(f)(X, Y), rtol=1e-6)
    got = jax.grad(g)(X, Y)
    if tf_grad is None:   # no kink: JAX's derivative
        np.testing.assert_allclose(got, jax.grad(f)(X, Y), rtol=1e-6)
        return
    np.testing.assert_allclose(got, tf_grad, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(X, Y), jax_grad, rtol=1e-6)   # (what it corrects)


def test_pow_derivative_in_the_exponent_is_zero_at_a_zero_base():
    """TF: d(x**y)/dy = x**y * log(x) where x > 0, else 0 (older JAX: NaN at x = 0)."""
    f = lambda x, y: jnp.sum(jnp.power(x, y))   # noqa: E731
    x, y = jnp.array([0.0, 2.0]), jnp.array([2.0, 3.0])
    np.testing.assert_allclose(jax.grad(with_tf_rules(f), 1)(x, y), [0.0, 8.0 * np.log(2.0)], rtol=1e-6)


def test_nested_jit_custom_jvp_loops_and_pytrees():
    """A jitted inner function's equations get TF's rules; ``jax.nn.relu`` (a custom_jvp) keeps its
    own; a ``lax.scan`` body keeps JAX's; the output pytree and second derivatives survive."""
    inner = jax.jit(lambda a: jnp.abs(a))

    def f(x):
        body = lambda c, a: (c + jnp.abs(a), None)   # noqa: E731
        s, _ = jax.lax.scan(body, 0.0, x)
        return {"inner": jnp.sum(inner(x)), "relu": jnp.sum(jax.nn.relu(x)), "scan": s}

    x = jnp.array([0.0, -1.0, 2.0])
    g = with_tf_rules(f)
    assert jax.tree_util.tree_structure(g(x)) == jax.tree_util.tree_structure(f(x))
    np.testing.assert_allclose(jax.grad(lambda v: g(v)["inner"])(x), [0.0, -1.0, 1.0])
    np.testing.assert_allclose(jax.grad(lambda v: g(v)["relu"])(x), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(jax.grad(lambda v: g(v)["scan"])(x), [1.0, -1.0, 1.0])   # (JAX's, inside the loop)
    h = with_tf_rules(lambda v: jnp.sum(jnp.maximum(v, 0.0) ** 3))
    np.testing.assert_allclose(jax.grad(jax.grad(h))(2.0), 12.0)


def test_float16_attention_logits_compile_on_cpu():
    """``jax.nn.dot_product_attention`` on float16 asks ``dot_general`` for the F16_F16_F32
    algorithm, which XLA's CPU refuses when the traced program compiles (Keras 3's
    ``MultiHeadAttention`` under ``mixed_float16``): on CPU it is evaluated with the default
    precision, float16 values and gradients as the float32 computation's within float16's
    tolerance."""
    rs = np.random.RandomState(0)
    q, k, v = (jnp.asarray(rs.randn(2, 3, 2, 4), jnp.float16) for _ in range(3))

    def f(q, k, v):
        return jnp.sum(jax.nn.dot_product_attention(q, k, v) ** 2)

    fn = with_tf_rules(f)
    got = jax.jit(jax.value_and_grad(fn, argnums=(0, 1, 2)))(q, k, v)
    want = jax.value_and_grad(f, argnums=(0, 1, 2))(*(a.astype(jnp.float32) for a in (q, k, v)))
    assert got[0].dtype == jnp.float16 and all(g.dtype == jnp.float16 for g in got[1])
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g, np.float32), w, rtol=2e-2, atol=2e-2)
