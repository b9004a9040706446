"""tapejax.autodiff.ForwardAccumulator (oracle: jax.jvp of the same pure function; TF 2.21's rules)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf

FA = tf.autodiff.ForwardAccumulator
RNG = np.random.default_rng(1)


def _f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


W, B, XV = _f32(4, 3), _f32(3), _f32(2, 4)


def _layer_jax(x, w, b):
    return jnp.tanh(x @ w + b)


def _f_jax(a):
    return jnp.sum(jnp.tanh(a) * a * a)


def _f_tf(a):
    return tf.reduce_sum(tf.tanh(a) * a * a)


def test_namespace():
    from tapejax.autodiff import ForwardAccumulator
    assert ForwardAccumulator is FA and tf.autodiff.GradientTape is tf.GradientTape


def test_jvp_matches_jax_jvp_structured_primals():
    x, w, b = tf.constant(XV), tf.constant(W), tf.constant(B)
    tx, tw, tb = _f32(2, 4), _f32(4, 3), _f32(3)
    with FA({"w": w, "x": x, "b": b}, {"x": tf.constant(tx), "b": tf.constant(tb), "w": tf.constant(tw)}) as acc:
        y = tf.tanh(tf.matmul(x, w) + b)
        s = tf.reduce_sum(y)
    out, want = jax.jvp(_layer_jax, (XV, W, B), (tx, tw, tb))
    got = acc.jvp({"s": s, "y": [y, (y,)]})
    assert list(got) == ["s", "y"] and isinstance(got["y"], list) and isinstance(got["y"][1], tuple)
    _close(got["y"][0], want)
    _close(got["y"][1][0], want)
    _close(got["s"], np.sum(want), 1e-4)
    _close(y, out)


def test_primal_tangent_unconnected_and_after_block():
    x = tf.constant([1.0, 2.0, 3.0])
    v = tf.constant([1.0, 0.0, 0.5])
    acc = FA(x, v)
    assert acc.jvp(x) is v  # even before entering
    with acc:
        y = x * x
        k = tf.constant([1, 2]) * 2
    z = y * 2.0  # after the block: not recorded
    _close(acc.jvp(y), [2.0, 0.0, 3.0])
    assert acc.jvp(z) is None and acc.jvp(k) is None and acc.jvp(tf.constant(1.0)) is None
    zero = acc.jvp([z, k], unconnected_gradients="zero")
    assert zero[0].shape == (3,) and zero[0].dtype == tf.float32 and not np.any(zero[0].numpy())
    assert zero[1].dtype == tf.int32 and zero[1].shape == (2,)
    assert acc.jvp([]) == []


def test_reentering_continues_recording():
    x = tf.constant([1.0, 2.0])
    acc = FA(x, tf.constant([1.0, 1.0]))
    with acc:
        y = x * x
    with acc:
        z = x * 3.0
    _close(acc.jvp(y), [2.0, 4.0])
    _close(acc.jvp(z), [3.0, 3.0])
    with pytest.raises(ValueError, match="already recording"):
        with acc:
            with acc:
                pass


def test_variable_primal_every_read_carries_the_tangent():
    w = tf.Variable([1.0, 2.0, 3.0])
    u = tf.Variable(2.0)
    v = tf.constant([1.0, 0.0, 0.5])
    with FA(w, v) as acc:
        y = w * u
        w.assign([5.0, 5.0, 5.0])
        z = w * w
    _close(acc.jvp(y), [2.0, 0.0, 1.0])
    _close(acc.jvp(z), [10.0, 0.0, 5.0])
    assert acc.jvp(u) is None
    _close(acc.jvp(w), v)


def test_broadcast_tangent_and_python_float_tangent():
    x = tf.constant([1.0, 2.0, 3.0])
    with FA(x, tf.constant(2.0)) as acc:
        y = x * x
    _close(acc.jvp(y), [4.0, 8.0, 12.0])
    assert acc.jvp(x).shape == ()  # TF returns the tangent as given
    w = tf.Variable(2.0)
    with FA(w, 1.0) as acc:
        y = w * w
    _close(acc.jvp(y), 4.0)


def test_int_primal_and_float16():
    xi = tf.constant([1, 2])
    with FA(xi, tf.constant([1, 1])) as acc:
        y = xi * xi
    assert acc.jvp(y) is None
    assert acc.jvp(xi).dtype == tf.int32
    h = tf.constant(1.0, tf.float16)
    with FA(h, tf.constant(2.0, tf.float16)) as acc:
        y = h * h * h
    assert acc.jvp(y).dtype == tf.float16
    _close(acc.jvp(y), 6.0, 1e-3)


@pytest.mark.parametrize("primals, tangents, exc", [
    ("x", "short", ValueError),          # shape (3,) vs (2,)
    ("x", "int", ValueError),            # dtype int32 vs float32
    ("x", None, ValueError),
    ("x", [1.0, 0.0, 0.0], ValueError),  # a list is a structure of 3, not one tangent
    ("xx", "vv", ValueError),            # the same primal twice
    ("pair", "one", ValueError),         # structures differ
    (3.0, 1.0, AttributeError),
    (None, None, AttributeError),
])
def test_constructor_errors(primals, tangents, exc):
    x = tf.constant([1.0, 2.0, 3.0])
    v = tf.constant([1.0, 0.0, 0.0])
    env = {"x": x, "short": tf.constant([1.0, 2.0]), "int": tf.constant([1, 2, 3]), "xx": [x, x],
           "vv": [v, v], "pair": [x, v], "one": [v]}
    p = env.get(primals, primals) if isinstance(primals, str) else primals
    t = env.get(tangents, tangents) if isinstance(tangents, str) else tangents
    with pytest.raises(exc) as e:
        FA(p, t)
    assert str(e.value)


def test_jvp_argument_errors():
    x = tf.constant([1.0, 2.0])
    with FA(x, x) as acc:
        y = x * x
    with pytest.raises(ValueError):
        acc.jvp(y, unconnected_gradients="ZERO")
    for bad in (None, 3.0, np.ones(2)):
        with pytest.raises((AttributeError, TypeError)):
            acc.jvp(bad)
    _close(acc.jvp(y), [2.0, 8.0])


def test_own_jvps_are_not_recorded():
    x = tf.constant([1.0, 2.0])
    with FA(x, tf.constant([1.0, 1.0])) as acc:
        y = x * x
        j = acc.jvp(y)
        jj = acc.jvp(j)
    _close(j, [2.0, 4.0])
    assert jj is None


# --------------------------------------------------------------------------
# Hessian-vector products, both ways (oracle: jax.jvp(jax.grad(f)))
# --------------------------------------------------------------------------

A0, V0 = _f32(4), _f32(4)
HVP = jax.jit(lambda a, v: jax.jvp(jax.grad(_f_jax), (a,), (v,))[1])(A0, V0)


def test_forward_over_backward_hvp():
    x, v = tf.constant(A0), tf.constant(V0)
    with FA(x, v) as acc:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = _f_tf(x)
        g = tape.gradient(y, x)
    _close(g, jax.grad(_f_jax)(A0), 1e-4)
    _close(acc.jvp(g), HVP, 1e-4)


@pytest.mark.parametrize("jvp_inside", [True, False])
def test_backward_over_forward_hvp(jvp_inside):
    x, v = tf.constant(A0), tf.constant(V0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        with FA(x, v) as acc:
            y = _f_tf(x)
        if jvp_inside:
            j = acc.jvp(y)
    if not jvp_inside:  # TF: the tape saw the JVP computation while the ops ran
        j = acc.jvp(y)
    _close(j, np.dot(jax.grad(_f_jax)(A0), V0), 1e-4)
    _close(tape.gradient(j, x), HVP, 1e-4)


def test_hvp_with_variables_both_ways():
    w = tf.Variable(A0)
    v = tf.constant(V0)
    with FA(w, v) as acc:
        with tf.GradientTape() as tape:
            y = _f_tf(w)
        g = tape.gradient(y, w)
    _close(acc.jvp(g), HVP, 1e-4)
    with tf.GradientTape() as tape:
        with FA(w, v) as acc:
            y = _f_tf(w)
    _close(tape.gradient(acc.jvp(y), w), HVP, 1e-4)


def test_gradient_with_respect_to_the_tangent():
    x, v = tf.constant(A0), tf.constant(V0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, v])
        with FA(x, v) as acc:
            y = _f_tf(x)
        j = acc.jvp(y)
    gx, gv = tape.gradient(j, [x, v])
    _close(gx, HVP, 1e-4)
    _close(gv, jax.grad(_f_jax)(A0), 1e-4)  # j = grad . v is linear in v


def test_forward_over_forward():
    x, v = tf.constant(A0), tf.constant(V0)
    with FA(x, v) as outer:
        with FA(x, v) as inner:
            y = _f_tf(x)
    second = outer.jvp(inner.jvp(y))  # v^T H v
    _close(second, np.dot(HVP, V0), 1e-4)


def test_stack_order_decides_who_sees_the_jvp():
    """As TF: an accumulator used before a tape, or a tape entered inside it, does not see the JVP."""
    x, v = tf.constant(A0), tf.constant(V0)
    with FA(x, v) as acc:
        y = _f_tf(x)
    with tf.GradientTape() as t:
        t.watch(x)
        j = acc.jvp(y)
    assert t.gradient(j, x) is None
    with FA(x, v) as acc:
        with tf.GradientTape() as t:
            t.watch(x)
            y = _f_tf(x)
    j = acc.jvp(y)
    assert t.gradient(j, x) is None


def test_forward_over_jacobian():
    a0 = _f32(3)
    v0 = _f32(3)
    x, v = tf.constant(a0), tf.constant(v0)
    f = lambda a: jnp.tanh(a) * a  # noqa: E731
    with FA(x, v) as acc:
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.tanh(x) * x
        jac = t.jacobian(y, x)
    want = jax.jit(lambda a: jax.jvp(jax.jacrev(f), (a,), (v0,))[1])(a0)
    _close(acc.jvp(jac), want, 1e-4)


# --------------------------------------------------------------------------
# compiled once; ops without a forward rule
# --------------------------------------------------------------------------

def test_one_compile_per_structure(fresh_cache):
    w = tf.Variable(W)
    for _ in range(4):
        x = tf.constant(_f32(2, 4))
        t = _f32(4, 3)
        with FA(w, tf.constant(t)) as acc:
            y = tf.tanh(tf.matmul(x, w))
        _close(acc.jvp(y), jax.jvp(lambda m: jnp.tanh(x.numpy() @ m), (W,), (t,))[1])
    info = tf.cache_info()
    assert info.misses == 1 and info.compiles == 1 and info.hits == 3


def test_custom_vjp_op_is_pushed_forward_by_transposition():
    @jax.custom_vjp
    def cube(a):
        return a ** 3

    cube.defvjp(lambda a: (a ** 3, a), lambda a, g: (g * 3 * a * a,))
    prim = tf.Primitive("Issue6ForwardCube", cube)
    x = tf.constant([1.0, 2.0])
    with FA(x, tf.constant([1.0, 0.5])) as acc:
        y = tf.bind(prim, x) * 2.0
    _close(acc.jvp(y), [6.0, 12.0])


def test_through_and_inside_tapejax_function():
    """A compiled tapejax.function call is one recorded op; an HVP inside one compiles too."""
    f = tf.function(lambda a: _f_tf(a))
    x, v = tf.constant(A0), tf.constant(V0)
    with FA(x, v) as acc:
        y = f(x)
    _close(acc.jvp(y), np.dot(jax.grad(_f_jax)(A0), V0), 1e-4)

    w = tf.Variable(A0)

    @tf.function
    def hvp(t):
        with FA(w, t) as acc:
            with tf.GradientTape() as tape:
                y = _f_tf(w)
            g = tape.gradient(y, w)
        return acc.jvp(g)

    _close(hvp(v), HVP, 1e-4)
    _close(hvp(v), HVP, 1e-4)


def test_primals_may_be_a_registered_jax_pytree_with_static_leaves():
    """Primals as a JAX pytree of Variables with a function field (an equinox model) and tangents in
    that structure with None at the function, as ``eqx.partition`` gives: flattened as tape sources
    are (was NotATensorError: tf.nest took the pytree for one leaf)."""
    import dataclasses

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Lin:
        w: object
        act: object

    w = tf.Variable([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(Lin(w, jnp.tanh), Lin(jnp.array([1.0, 0.5]), None)) as acc:
        y = tf.reduce_sum(w * w)
    np.testing.assert_allclose(acc.jvp(y).numpy(), 2 * 1.0 + 4 * 0.5)



def test_a_tape_around_the_accumulator_gives_none_for_a_value_the_tangent_never_reads():
    """``tape(acc(f))`` with ``f = tanh(z W1 + b1) W2 + b2``: the jvp does not read ``b2`` (TF's per-op
    JVP of the last add is the tangent of its other operand), so TF 2.21's gradient for it is
    ``None``; the others are ``d(jvp)/dw`` (oracle: ``jax.grad`` of ``jax.jvp``).  The primal itself
    still reads ``b2``."""
    w1, b1, w2, b2, z, v = _f32(2, 5), _f32(5), _f32(5, 1), _f32(1), _f32(4, 2), _f32(4, 2)
    ws = [tf.Variable(a) for a in (w1, b1, w2, b2)]
    zt = tf.constant(z)
    with tf.GradientTape(persistent=True) as tape:
        with FA(zt, tf.constant(v)) as acc:
            f = tf.matmul(tf.tanh(tf.matmul(zt, ws[0]) + ws[1]), ws[2]) + ws[3]
        loss = tf.reduce_sum(acc.jvp(f) ** 2)
        plain = tf.reduce_sum(f)
    g = tape.gradient(loss, ws)

    def jvp_loss(w1, b1, w2):
        return jnp.sum(jax.jvp(lambda x: jnp.tanh(x @ w1 + b1) @ w2 + b2, (z,), (v,))[1] ** 2)

    assert g[3] is None
    for a, b in zip(g[:3], jax.grad(jvp_loss, argnums=(0, 1, 2))(w1, b1, w2)):
        _close(a, b, 1e-4)
    _close(tape.gradient(plain, ws[3]), np.full(1, 4.0), 1e-6)


# --------------------------------------------------------------------------
# custom_gradient under an accumulator: f's ops, as TF (values from TF 2.21)
# --------------------------------------------------------------------------

X3, V3 = np.array([0.3, -0.7, 1.1], np.float32), np.array([1.0, 0.5, -2.0], np.float32)


def _with_grad(forward, grad):
    @tf.custom_gradient
    def f(x):
        return forward(x), grad
    return f


@pytest.mark.parametrize("deferred", [True, False])
def test_a_custom_gradient_is_pushed_forward_through_its_forward_ops(deferred):
    """TF's accumulators see ``f``'s ops and keep the JVP they give: ``x * x`` whose ``grad_fn``
    says ``3 dy`` has the JVP ``2 x v`` (before the fix tapejax transposed ``grad_fn``: ``3 v``), a
    gradient-reversal layer (identity forward, ``-dy`` backward) ``+v``, eagerly and with the
    accumulator inside a ``tapejax.function``; a forward ``round`` (no JVP in TF) falls back to
    ``grad_fn`` (a straight-through estimator: ``v``), and so does a function called under the
    accumulator (one op to it: TF's ``3 v``)."""
    prev = tf.set_deferred_execution(deferred)
    try:
        sq = _with_grad(lambda x: x * x, lambda dy: 3.0 * dy)
        grl = _with_grad(tf.identity, lambda dy: -dy)
        ste = _with_grad(tf.round, lambda dy: dy)
        x, v = tf.constant(X3), tf.constant(V3)
        with FA(x, v) as acc:
            ys = [sq(x), grl(x) * 2.0, ste(x)]
            y_fn = tf.function(sq)(x)
        _close(acc.jvp(ys[0]), 2 * X3 * V3)
        _close(acc.jvp(ys[1]), 2 * V3)
        _close(acc.jvp(ys[2]), V3)
        _close(acc.jvp(y_fn), 3 * V3)

        @tf.function
        def inside(x, v):
            with FA(x, v) as acc:
                y = sq(x)
            return acc.jvp(y)

        _close(inside(x, v), 2 * X3 * V3)
    finally:
        tf.set_deferred_execution(prev)


def test_forward_over_reverse_through_a_custom_gradient_keeps_grad_fn_for_the_gradient():
    """An HVP around a ``custom_gradient`` whose ``grad_fn`` is not ``f``'s derivative: the loss's JVP
    follows ``f`` (``x * x``), the gradient is ``grad_fn``'s (``3 dy``, constant), so its JVP is None
    (TF 2.21: -4.5, [3, 3, 3], None)."""
    sq = _with_grad(lambda x: x * x, lambda dy: 3.0 * dy)
    x = tf.constant(X3)
    with FA(x, tf.constant(V3)) as acc:
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.reduce_sum(sq(x))
        g = t.gradient(y, x)
    _close(acc.jvp(y), np.sum(2 * X3 * V3))
    _close(g, np.full(3, 3.0))
    assert acc.jvp(g) is None


def test_sign_pushes_no_tangent_forward_as_in_tf():
    """TF pushes ``Sign`` forward by transposing its gradient, zeros that do not depend on ``dy``:
    its JVP is None (zeros with ``'zero'``), while the tape's gradient through it is zeros; a sum
    with another path keeps that path's tangent (TF 2.21: None, [0, 0, 0], v)."""
    x = tf.constant(X3)
    with FA(x, tf.constant(V3)) as acc:
        s = tf.sign(x)
        y = s + x
    assert acc.jvp(s) is None
    _close(acc.jvp(s, unconnected_gradients="zero"), np.zeros(3))
    _close(acc.jvp(y), V3)
    with tf.GradientTape() as t:
        t.watch(x)
        s2 = tf.sign(x)
    _close(t.gradient(s2, x), np.zeros(3))
