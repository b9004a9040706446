"""What the JAX users' program files share (``test_jax_users_programs.py``, round 15a, and
``test_jax_users_programs2.py``, round 16c): the execution-mode fixture, the pytree comparison
against the pure-JAX oracle, and the MLP both rounds train."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


@pytest.fixture(params=["deferred", "eager"], autouse=True)
def mode(request):
    """Deferred execution and predicted updates both on (the default) or both off."""
    on = request.param == "deferred"
    prev = tf.set_deferred_execution(on), tf.set_speculative_updates(on)
    yield request.param
    tf.set_speculative_updates(prev[1])
    tf.set_deferred_execution(prev[0])


def close(got, want, rtol=1e-5, atol=1e-6):
    """Pytrees equal leaf by leaf (Tensors through ``np.asarray``); None only where the oracle says None
    (a flat list of Python numbers is one array)."""
    if isinstance(want, list) and want and all(isinstance(w, (int, float)) for w in want):
        want = np.asarray(want, np.float32)
    g_leaves, g_tree = jax.tree_util.tree_flatten(
        got, is_leaf=lambda x: x is None or isinstance(x, (tf.Tensor, tf.Variable)))
    w_leaves, w_tree = jax.tree_util.tree_flatten(want, is_leaf=lambda x: x is None)
    assert g_tree == w_tree, (g_tree, w_tree)
    for g, w in zip(g_leaves, w_leaves):
        if w is None:
            assert g is None, g
            continue
        assert g is not None
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def params0(sizes=(3, 5, 2), seed=0):
    r = np.random.default_rng(seed)
    return {f"l{i}": {"w": (r.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32),
                      "b": np.zeros(b, np.float32)}
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))}


def mlp_apply(p, x):
    n = len(p)
    for i in range(n):
        x = x @ p[f"l{i}"]["w"] + p[f"l{i}"]["b"]
        if i < n - 1:
            x = jnp.tanh(x)
    return x
