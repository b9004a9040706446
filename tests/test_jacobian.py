"""GradientTape.jacobian / batch_jacobian (oracle: jax.jacrev / jax.hessian of the same pure function)."""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


W1, B1, W2, X = _f32(4, 5), _f32(5), _f32(5, 3), _f32(2, 4)


def _mlp_jax(x, w1, b1, w2):
    return jnp.tanh(jnp.tanh(x @ w1 + b1) @ w2)


def _mlp_tf(x, w1, b1, w2):
    return tf.tanh(tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2))


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# --------------------------------------------------------------------------
# values against jax.jacrev
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"parallel_iterations": 4}, {"experimental_use_pfor": False}])
def test_mlp_jacobian_matches_jacrev(kw):
    x, w1, b1, w2 = (tf.constant(a) for a in (X, W1, B1, W2))
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, w1, b1, w2])
        y = _mlp_tf(x, w1, b1, w2)
    got = t.jacobian(y, [x, w1, b1, w2], **kw)
    want = jax.jit(jax.jacrev(_mlp_jax, argnums=(0, 1, 2, 3)))(X, W1, B1, W2)
    assert isinstance(got, list) and len(got) == 4
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == tf.float32
        _close(g, w)


@pytest.mark.parametrize("kw", [{}, {"parallel_iterations": 3}, {"experimental_use_pfor": False}])
def test_forward_mode_when_sources_are_smaller(kw):
    """A scalar source and a (6, 7) target: jacfwd path; same values as jacrev."""
    a = tf.constant(0.7)
    c = _f32(6, 7)
    with tf.GradientTape(persistent=True) as t:
        t.watch(a)
        y = tf.tanh(tf.constant(c) * a) * a
    got = t.jacobian(y, a, **kw)
    want = jax.jit(jax.jacrev(lambda s: jnp.tanh(c * s) * s))(jnp.float32(0.7))
    assert got.shape == (6, 7)
    _close(got, want)


def test_forward_mode_two_sources_layout():
    """Forward path with two sources of different shapes: target.shape + source.shape each."""
    a = tf.constant(_f32(2))
    b = tf.constant(_f32(1, 2))
    c = _f32(3, 4, 2)
    with tf.GradientTape() as t:
        t.watch([a, b])
        y = tf.tanh(tf.constant(c) * a) * tf.reduce_sum(b * b)
    ga, gb = t.jacobian(y, (a, b))
    fa, fb = jax.jit(jax.jacrev(lambda p, q: jnp.tanh(c * p) * jnp.sum(q * q), argnums=(0, 1)))(
        jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    assert ga.shape == (3, 4, 2) + (2,) and gb.shape == (3, 4, 2) + (1, 2)
    _close(ga, fa)
    _close(gb, fb)


def test_structure_none_and_zero():
    x = tf.constant([1.0, 2.0, 3.0])
    z = tf.constant([[1.0, 2.0]])
    zi = tf.constant([1, 2])
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, zi])
        y = x * x
    got = t.jacobian(y, {"b": x, "a": (z, [zi])})
    assert list(got) == ["b", "a"] and got["a"][0] is None and got["a"][1][0] is None
    _close(got["b"], np.diag([2.0, 4.0, 6.0]))
    zero = t.jacobian(y, [z, zi], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    assert zero[0].shape == (3, 1, 2) and zero[0].dtype == tf.float32
    assert zero[1].shape == (3, 2) and zero[1].dtype == tf.int32
    assert not np.any(zero[0].numpy()) and not np.any(zero[1].numpy())


def test_target_is_source_and_untracked_target():
    x = tf.constant([1.0, 2.0])
    u = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
    _close(t.jacobian(x, x), np.eye(2))
    assert t.jacobian(u, u) is None  # never watched: TF gives None for jacobian (not identity)
    assert t.jacobian(tf.cast(x, tf.int32), x) is None


def test_variables_reads_are_summed():
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        a = v * 1.0
        v.assign([3.0, 5.0])
        y = a * v  # d/dv: first read at [1, 2] times second read at [3, 5], plus the reverse
    j = t.jacobian(y, v)
    _close(j, np.diag([3.0 + 1.0, 5.0 + 2.0]))


def test_dtypes_follow_source():
    h = tf.constant(1.5, tf.float16)
    with tf.GradientTape() as t:
        t.watch(h)
        y = tf.stack([h * h, h])
    j = t.jacobian(y, h)
    assert j.dtype == tf.float16
    _close(j, [3.0, 1.0], 1e-3)
    with jax.enable_x64(True):
        a = tf.constant(np.array([1.0, 2.0]))
        with tf.GradientTape() as t:
            t.watch(a)
            c = tf.cast(a, tf.float32)
            y = c * c
        j = t.jacobian(y, a)
        assert j.dtype == tf.float64
        _close(j, np.diag([2.0, 4.0]))


def test_empty_target_and_sources():
    e = tf.zeros([0])
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([e, x])
        y = e * 2.0
    assert t.jacobian(y, e).shape == (0, 0)
    assert t.jacobian(y, x) is None
    assert t.jacobian(y, x, unconnected_gradients="zero").shape == (0, 2)
    assert t.jacobian(y, []) == []


# --------------------------------------------------------------------------
# tape lifecycle and errors (raised before any state changes)
# --------------------------------------------------------------------------

def _tape(persistent=False):
    x = tf.constant([1.0, 2.0, 3.0])
    t = tf.GradientTape(persistent=persistent)
    with t:
        t.watch(x)
        y = x * x
    return t, x, y


def test_non_persistent_one_call_persistent_many():
    t, x, y = _tape()
    t.jacobian(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        t.jacobian(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        t.gradient(y, x)
    t, x, y = _tape()
    t.gradient(y, x)
    with pytest.raises(RuntimeError):
        t.batch_jacobian(tf.reshape(y, [3, 1]), tf.reshape(x, [3, 1]))
    t, x, y = _tape(persistent=True)
    for _ in range(3):
        _close(t.jacobian(y, x), np.diag([2.0, 4.0, 6.0]))
    with pytest.raises(RuntimeError, match="non-persistent"):
        tf.GradientTape().jacobian(x, x)


def test_inside_non_persistent_context_stops_recording():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        j = t.jacobian(y, x)
        assert not t._recording
    _close(j, np.diag([2.0, 4.0]))


@pytest.mark.parametrize("bad, exc", [
    (dict(unconnected_gradients="ZERO"), ValueError),
    (dict(unconnected_gradients=None), ValueError),
    (dict(experimental_use_pfor=False), RuntimeError),
    (dict(parallel_iterations=1), ValueError),
    (dict(parallel_iterations=0), ValueError),
    (dict(parallel_iterations=2.5), TypeError),
])
def test_bad_arguments_leave_the_tape_usable(bad, exc):
    t, x, y = _tape()
    with pytest.raises(exc):
        t.jacobian(y, x, **bad)
    _close(t.jacobian(y, x), np.diag([2.0, 4.0, 6.0]))


@pytest.mark.parametrize("which", ["target None", "target list", "target float", "sources None",
                                   "sources float", "sources ndarray"])
def test_not_tensors(which):
    """TF raises AttributeError (TypeError for sources=None); tapejax's error is both, naming the argument."""
    t, x, y = _tape()
    args = {"target None": (None, x), "target list": ([y], x), "target float": (3.0, x),
            "sources None": (y, None), "sources float": (y, 3.0),
            "sources ndarray": (y, np.ones(3, np.float32))}[which]
    with pytest.raises(TypeError, match="`" + which.split()[0] + "`") as e:
        t.jacobian(*args)
    assert isinstance(e.value, AttributeError)
    _close(t.jacobian(y, x), np.diag([2.0, 4.0, 6.0]))


def test_int_source_logs_like_gradient(tapejax_log):
    xi = tf.constant([1, 2])
    with tf.GradientTape() as t:
        t.watch(xi)
        y = xi * xi
    tapejax_log.clear()
    assert t.jacobian(y, xi) is None
    assert any("floating" in r.getMessage() for r in tapejax_log.records
               if r.levelno >= logging.WARNING)


# --------------------------------------------------------------------------
# compiled once, cached with gradient's cache
# --------------------------------------------------------------------------

def test_one_compile_per_structure(fresh_cache):
    w = tf.Variable(W1)
    for i in range(5):
        x = tf.constant(_f32(2, 4))
        with tf.GradientTape() as t:
            y = tf.tanh(tf.matmul(x, w))
        j = t.jacobian(y, w)
        _close(j, jax.jacrev(lambda m: jnp.tanh(x.numpy() @ m))(jnp.asarray(w.numpy())))
    info = tf.cache_info()
    assert info.misses == 1 and info.compiles == 1 and info.hits == 4


def test_jacobian_and_gradient_are_distinct_cache_entries(fresh_cache):
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    _close(t.gradient(y, x), [2.0, 4.0])
    _close(t.jacobian(y, x), np.diag([2.0, 4.0]))
    assert tf.cache_info().size == 2 and tf.cache_info().misses == 2


# --------------------------------------------------------------------------
# nesting: Hessians and third derivatives
# --------------------------------------------------------------------------

def _cubic_jax(a):
    return jnp.sum(jnp.tanh(a) * a * a)


def test_jacobian_of_gradient_is_hessian():
    a0 = _f32(4)
    x = tf.constant(a0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(tf.tanh(x) * x * x)
        g = inner.gradient(y, x)
    _close(outer.jacobian(g, x), jax.jit(jax.hessian(_cubic_jax))(a0), 1e-4)


def test_gradient_of_jacobian_and_third_order():
    a0 = _f32(3)
    x = tf.constant(a0)
    f = lambda a: a * a * a * a  # noqa: E731
    with tf.GradientTape() as t3:
        t3.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = x * x * x * x
            j = t1.jacobian(y, x)
        h = t2.jacobian(j, x)
    third = t3.jacobian(h, x)
    _close(j, jax.jacrev(f)(a0), 1e-4)
    _close(h, jax.jit(jax.jacrev(jax.jacrev(f)))(a0), 1e-4)
    assert third.shape == (3, 3, 3, 3)
    _close(third, jax.jit(jax.jacrev(jax.jacrev(jax.jacrev(f))))(a0), 1e-3)


def test_hessian_of_variable_and_persistent_inside_context():
    v = tf.Variable(_f32(3))
    with tf.GradientTape(persistent=True) as t:
        y = tf.reduce_sum(tf.tanh(v) * v * v)
        g = t.gradient(y, v)  # recorded on t itself (persistent, inside)
        h = t.jacobian(g, v)  # so is this
    _close(h, jax.jit(jax.hessian(_cubic_jax))(jnp.asarray(v.numpy())), 1e-4)
    third = t.jacobian(h, v)
    assert third.shape == (3, 3, 3)


# --------------------------------------------------------------------------
# batch_jacobian
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"parallel_iterations": 2}, {"experimental_use_pfor": False}])
def test_batch_jacobian_matches_per_example_jacrev(kw):
    xb = _f32(6, 4)
    x = tf.constant(xb)
    w1, b1, w2 = tf.constant(W1), tf.constant(B1), tf.constant(W2)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = _mlp_tf(x, w1, b1, w2)
    got = t.batch_jacobian(y, x, **kw)
    want = jax.jit(jax.vmap(jax.jacrev(lambda r: _mlp_jax(r, W1, B1, W2))))(xb)
    assert got.shape == (6, 3, 4)
    _close(got, want)


def test_batch_jacobian_higher_rank_and_dependent_examples():
    xb = _f32(2, 3, 2)
    x = tf.constant(xb)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.tanh(x) * 2.0
        m = tf.reshape(x, [2, 6])
        z = tf.matmul(m, tf.constant(np.ones((6, 2), np.float32))) * tf.reduce_sum(m)
    got = t.batch_jacobian(y, x)
    assert got.shape == (2, 3, 2, 3, 2)
    _close(got, jax.vmap(jax.jacrev(lambda r: jnp.tanh(r) * 2.0))(xb))
    # examples depend on each other: TF's value is sum_j dz[j, k] / dx[i, ...]
    fz = lambda a: (a.reshape(2, 6) @ np.ones((6, 2), np.float32)) * jnp.sum(a)  # noqa: E731
    full = jax.jit(jax.jacrev(fz))(xb)  # [2, 2, 2, 3, 2]: (j, k, i, ...)
    _close(t.batch_jacobian(z, x), jnp.einsum("jkimn->ikmn", full), 1e-4)


def test_gradient_of_batch_jacobian():
    """batch_jacobian under an outer tape is recorded there: d sum(bj) / dx."""
    xb = _f32(3, 2)
    x = tf.constant(xb)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.tanh(x) * x
        s = tf.reduce_sum(inner.batch_jacobian(y, x))
    bj = lambda a: jnp.sum(jax.vmap(jax.jacrev(lambda r: jnp.tanh(r) * r))(a))  # noqa: E731
    _close(outer.gradient(s, x), jax.jit(jax.grad(bj))(xb), 1e-4)


def test_batch_jacobian_unconnected_is_zeros_in_target_dtype():
    x = tf.constant(_f32(2, 2))
    with jax.enable_x64(True):
        z = tf.constant(np.ones((2, 5)))  # float64
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = x * x
        none = t.batch_jacobian(y, z)
        zero = t.batch_jacobian(y, z, unconnected_gradients="zero")
    assert none.shape == (2, 2, 5) and none.dtype == tf.float32
    assert zero.shape == (2, 2, 5) and zero.dtype == tf.float64
    assert not np.any(none.numpy()) and not np.any(zero.numpy())


def test_batch_jacobian_errors():
    x = tf.constant(_f32(2, 2))
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    with pytest.raises(ValueError, match="first dimension"):
        t.batch_jacobian(y, tf.ones([3, 2]))
    with pytest.raises(ValueError, match="rank at least 2"):
        t.batch_jacobian(tf.reduce_sum(y, axis=1), x)
    with pytest.raises(ValueError, match="rank at least 2"):
        t.batch_jacobian(y, tf.ones([2]))
    with pytest.raises((TypeError, AttributeError)):
        t.batch_jacobian(y, [x])
    with pytest.raises(RuntimeError, match="persistent=True"):
        t.batch_jacobian(y, x, experimental_use_pfor=False)
    _close(t.batch_jacobian(y, x), jax.vmap(jax.jacrev(lambda r: r * r))(x.numpy()))  # still usable


def test_batch_jacobian_empty_batch():
    """TF 2.21 raises ZeroDivisionError here (an accident); tapejax returns the empty result."""
    z = tf.ones([0, 2])
    with tf.GradientTape() as t:
        t.watch(z)
        y = tf.stack([z, z * 2.0], axis=1)  # [0, 2, 2]
    j = t.batch_jacobian(y, z)
    assert j.shape == (0, 2, 2, 2) and j.dtype == tf.float32


# --------------------------------------------------------------------------
# ops without a forward rule
# --------------------------------------------------------------------------

def test_custom_vjp_falls_back_to_reverse_mode():
    @jax.custom_vjp
    def cube(a):
        return a ** 3

    cube.defvjp(lambda a: (a ** 3, a), lambda a, g: (g * 3 * a * a,))
    prim = tf.Primitive("Issue6TestCube", cube)
    a = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(a)
        y = tf.bind(prim, a) * tf.ones([5])  # 1 source element < 5 targets: forward first
    _close(t.jacobian(y, a), np.full(5, 12.0))


def test_a_failed_first_trace_leaves_no_cache_entry():
    """A jacobian / batch_jacobian / jvp whose first trace raises (a custom gradient returning two
    gradients for one input) leaves no entry or miss in the cache; a valid call then works."""
    @tf.custom_gradient
    def bad(x):
        return x * 2.0, lambda g: (g, g)

    x = tf.constant([[1.0, 2.0]])
    tf.clear_cache()
    for call in ("jacobian", "batch_jacobian"):
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = bad(x)
        with pytest.raises(ValueError, match="gradients"):
            getattr(t, call)(y, x, experimental_use_pfor=False) if call == "jacobian" else t.batch_jacobian(y, x)
        info = tf.cache_info()
        assert info.size == 0 and info.misses == 0, (call, info)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * 3.0
    np.testing.assert_allclose(t.batch_jacobian(y, x).numpy(), [[[3.0, 0.0], [0.0, 3.0]]])
    assert tf.cache_info().size == 1


def test_sources_may_be_registered_jax_pytrees():
    """As for gradient: a jax.tree_util-registered dataclass of Variables among the sources gives
    its jacobians in that structure (it was NotATensorError)."""
    import dataclasses

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Lin:
        w: object
        b: object

    m = Lin(tf.Variable(W1), tf.Variable(B1))
    x = tf.constant(X)
    with tf.GradientTape() as t:
        y = tf.tanh(tf.matmul(x, m.w) + m.b)
    j = t.jacobian(y, m)
    assert isinstance(j, Lin)
    want = jax.jacrev(lambda w, b: jnp.tanh(X @ w + b), (0, 1))(W1, B1)
    np.testing.assert_allclose(j.w.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(j.b.numpy(), want[1], rtol=1e-5, atol=1e-6)


def test_non_persistent_tape_without_pfor_is_refused_eagerly_only():
    """TF refuses ``experimental_use_pfor=False`` on a non-persistent tape only when executing
    eagerly; inside a ``tf.function`` it computes (tapejax raised RuntimeError there too)."""
    x = tf.constant(X)

    @tf.function
    def both(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = _mlp_tf(x, W1, B1, W2)
        jac = t.jacobian(y, x, experimental_use_pfor=False)
        with tf.GradientTape() as t:
            t.watch(x)
            y = _mlp_tf(x, W1, B1, W2)
        return jac, t.batch_jacobian(y, x, experimental_use_pfor=False)

    jac, bjac = both(x)
    want = jax.jacrev(lambda x: _mlp_jax(x, W1, B1, W2))(jnp.asarray(X))
    _close(jac.numpy(), want)
    _close(bjac.numpy(), np.stack([want[i, :, i] for i in range(2)]))
    with tf.GradientTape() as t:
        t.watch(x)
        y = _mlp_tf(x, W1, B1, W2)
    with pytest.raises(RuntimeError, match="persistent=True"):
        t.jacobian(y, x, experimental_use_pfor=False)


@pytest.mark.parametrize("kind", ["jacobian", "batch_jacobian"])
def test_an_outer_tape_gives_none_for_a_value_the_jacobian_never_reads(kind):
    """A Jacobian w.r.t. ``x`` of ``f(x) = tanh(x W1 + b1) W2 + b2`` does not read ``b2`` (TF 2.21: its
    gradient through the Jacobian is ``None``, as the LNN's Hessian by ``batch_jacobian`` gives for
    a Lagrangian's additive terms); the other gradients are the oracle's (``jax.grad`` of
    ``jax.jacrev``), and the primal, which reads ``b2``, still connects it."""
    w1, b1, w2, b2, x = _f32(2, 5), _f32(5), _f32(5, 2), _f32(2), _f32(3, 2)
    ws = [tf.Variable(a) for a in (w1, b1, w2, b2)]
    xt = tf.constant(x)
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            inner.watch(xt)
            f = tf.matmul(tf.tanh(tf.matmul(xt, ws[0]) + ws[1]), ws[2]) + ws[3]
        jac = getattr(inner, kind)(f, xt)
        loss = tf.reduce_sum(jac ** 2)
        plain = tf.reduce_sum(f)
    g = outer.gradient(loss, ws)

    def jac_loss(w1, b1, w2):
        per_row = jax.vmap(jax.jacrev(lambda r: jnp.tanh(r @ w1 + b1) @ w2 + b2))(x)
        return jnp.sum(per_row ** 2)   # (the full jacobian's off-diagonal row blocks are zeros)

    assert g[3] is None
    for a, b in zip(g[:3], jax.grad(jac_loss, argnums=(0, 1, 2))(w1, b1, w2)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outer.gradient(plain, ws[3]).numpy(), np.full(2, 3.0))


def test_a_jvp_entry_that_pushes_a_custom_vjp_forward_falls_back_inside_a_function():
    """Forward-over-reverse through a ``custom_gradient`` inside ``tapejax.function``: the compiled
    jvp of the gradient meets a ``jax.custom_vjp``, which JAX reports only when the function is
    lowered (past ``Entry.call``'s check before the fix: TypeError "can't apply forward-mode
    autodiff"); the entry lowers itself under a trace and falls back to the double vjp (TF 2.21
    gives the HVP, below analytically)."""
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))

    w0 = np.array([0.3, -0.7, 1.1], np.float32)
    v0 = np.array([1.0, 0.5, -2.0], np.float32)
    w = tf.Variable(w0)

    @tf.function
    def hvp(v):
        with tf.autodiff.ForwardAccumulator(w, v) as acc:
            with tf.GradientTape() as t:
                y = tf.reduce_sum(log1pexp(w * 2.0) * w)
            g = t.gradient(y, w)
        return acc.jvp(g)

    s = 1 / (1 + np.exp(-2 * w0))
    _close(hvp(tf.constant(v0)), (4 * s * (1 - s) * w0 + 4 * s) * v0)
