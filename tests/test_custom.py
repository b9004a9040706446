"""tapejax._custom, _custom_gradient, _late: stop_gradient, custom_gradient, RegisterGradient /
gradient_override_map, new op types, tapejax.gradients.

Oracles: ``jax.vjp`` / ``jax.grad`` of the same pure function (with ``jax.custom_vjp``
where a custom rule is meant), or values derived by hand in the docstring.
"""
import gc
import itertools
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core import bind as _primitives, state as _state

_names = itertools.count()


def unique(prefix):
    return f"TestCustom_{prefix}_{next(_names)}"


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


# --------------------------------------------------------------------------
# stop_gradient
# --------------------------------------------------------------------------

def test_stop_gradient_is_a_cut_that_explain_names():
    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.stop_gradient(x) * 3.0
        z = x * tf.stop_gradient(x)
    assert t.gradient(y, x) is None
    close(t.gradient(z, x), 2.0)  # d/dx x*c = c = 2
    assert "StopGradient" in t.explain(y, x)
    assert "stop_gradient" in t.explain(y, x)


def test_stop_gradient_of_a_variable_does_not_watch_it():
    """TF runs StopGradient under ``stop_recording``, so ``tf.stop_gradient(var)`` reads the
    Variable unseen by the tapes: ``watched_variables()`` lists only the Variables read elsewhere
    (tapejax listed the stopped one too), eagerly and in a function; the gradients are unchanged
    (None for the stopped Variable, its value for the other factor).  Oracle: TF 2.21."""
    w, u = tf.Variable([1.0, 2.0]), tf.Variable([3.0, 4.0])
    with tf.GradientTape(persistent=True) as t:
        loss = tf.reduce_sum(tf.stop_gradient(w) * u) + tf.reduce_sum(tf.stop_gradient(u))
    assert t.watched_variables() == (u,)
    gw, gu = t.gradient(loss, [w, u])
    assert gw is None
    close(gu, [1.0, 2.0])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(tf.stop_gradient(w) * w)
    assert t.watched_variables() == (w,)
    close(t.gradient(loss, w), [1.0, 2.0])

    @tf.function
    def f():
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.stop_gradient(w) * 2.0) + tf.reduce_sum(u)
        return len(t.watched_variables()), t.gradient(loss, [w, u])

    n, (gw, gu) = f()
    assert int(n) == 1 and gw is None
    close(gu, [1.0, 1.0])


def test_stop_gradient_holds_under_jax_grad_and_jit():
    """Oracle: jax.grad of a * lax.stop_gradient(a)**2 is stop(a)**2 = 9 at 3."""
    def f(a):
        x = tf.Tensor(a)
        return (x * tf.stop_gradient(x) * tf.stop_gradient(x))._value
    want = jax.grad(lambda a: a * jax.lax.stop_gradient(a) ** 2)(3.0)
    close(jax.grad(f)(3.0), want)
    close(jax.jit(jax.grad(f))(3.0), 9.0)


def test_stop_gradient_inside_jitted_tape_program():
    """A tape inside jax.jit (as tapejax.function will run it): d/da [a^2 * stop(a)] = 2a*a = 8 at 2."""
    def step(a):
        x = tf.Tensor(a)
        with tf.GradientTape() as t:
            t.watch(x)
            y = x * x * tf.stop_gradient(x)
        return t.gradient(y, x)._value
    close(jax.jit(step)(jnp.float32(2.0)), 8.0)


def test_stop_gradient_converts_python_data_and_rejects_none():
    assert tf.stop_gradient(3.0).dtype == tf.float32
    assert tf.stop_gradient([1, 2]).dtype == tf.int32
    v = tf.Variable(1.5)
    close(tf.stop_gradient(v), 1.5)
    with pytest.raises(ValueError, match="input"):
        tf.stop_gradient(None)


def test_stop_recording_pauses_this_tape_only():
    x = tf.constant(3.0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            with inner.stop_recording():
                y = x * x
    assert inner.gradient(y, x) is None
    close(outer.gradient(y, x), 6.0)


# --------------------------------------------------------------------------
# custom_gradient
# --------------------------------------------------------------------------

def _jax_log1pexp():
    @jax.custom_vjp
    def f(x):
        return jnp.log(1 + jnp.exp(x))

    def fwd(x):
        e = jnp.exp(x)
        return jnp.log(1 + e), e

    f.defvjp(fwd, lambda e, g: (g * (1 - 1 / (1 + e)),))
    return f


@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad


def test_custom_gradient_matches_jax_custom_vjp():
    xs = np.array([-3.0, 0.0, 0.5, 100.0], np.float32)
    x = tf.constant(xs)
    with tf.GradientTape() as t:
        t.watch(x)
        y = log1pexp(x)
    ct = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    got = t.gradient(y, x, output_gradients=tf.constant(ct))
    out, vjp = jax.vjp(_jax_log1pexp(), jnp.asarray(xs))
    close(y, out)
    close(got, vjp(jnp.asarray(ct))[0])
    assert np.isfinite(got.numpy()).all()


def test_custom_gradient_second_order_matches_jax():
    """Nested tapes differentiate grad_fn: jax.grad(jax.grad) of the custom_vjp is the oracle."""
    x = tf.constant(0.7)
    with tf.GradientTape() as t1:
        t1.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            y = log1pexp(x)
        g = t2.gradient(y, x)
    gg = t1.gradient(g, x)
    f = _jax_log1pexp()
    close(g, jax.grad(f)(0.7))
    close(gg, jax.grad(jax.grad(f))(0.7))


def test_custom_gradient_is_one_op_on_the_tape_and_f_runs_once():
    calls = []

    @tf.custom_gradient
    def f(x):
        calls.append(1)
        y = tf.exp(x) * 2.0
        return y, lambda dy: dy * 7.0
    x = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    assert len(calls) == 1
    names = [n.prim.name for n in t._nodes]
    assert names == ["CustomGradient:f"], names
    close(t.gradient(y, x), 7.0)


def test_custom_gradient_hits_the_replay_cache(fresh_cache):
    """Same structure, new values: one compile, then cache hits."""
    @tf.custom_gradient
    def sq(x):
        return x * x, lambda dy: dy * 2.0 * x
    for v in (1.0, 2.0, 3.0):
        x = tf.constant(v)
        with tf.GradientTape() as t:
            t.watch(x)
            y = sq(x)
        close(t.gradient(y, x), 2 * v)
    info = tf.cache_info()
    assert info.misses == 1 and info.hits == 2, info


def test_custom_gradient_none_input_is_cut_and_compiles_once(fresh_cache, deferral):
    """A grad_fn returning None for its mask input: the mask is unconnected (None) and ``z``'s
    gradient is ``mask`` (hand derivative of sum(z * mask) through grad_fn ``dy * mask``); the
    slice taken again without the cut edge is memoized, so new values compile nothing after the
    first call (one replay miss, then hits); ``explain`` says the path has a custom gradient."""
    @tf.custom_gradient
    def masked(z, mask):
        return z * mask, lambda dy: (dy * mask, None)
    for v in (1.0, 2.0, 3.0):
        z, m = tf.constant([v, 2.0 * v]), tf.constant([1.0, v])
        with tf.GradientTape(persistent=True) as t:
            t.watch([z, m])
            y = tf.reduce_sum(masked(z, m))
        gz, gm = t.gradient(y, [z, m])
        close(gz, [1.0, v])
        assert gm is None
        if v == 1.0:
            compiles = tf.cache_info().compiles
    info = tf.cache_info()
    assert info.compiles == compiles and info.misses == 1 and info.hits == 2, info
    assert "masked" in t.explain(y, m) and "grad_fn returns None" in t.explain(y, m)


def test_custom_gradient_with_variables_matches_hand_values():
    """y = x*v + w (w non-trainable): dx = 10*v = 30, dv = 25*x = 50; w gets nothing."""
    v = tf.Variable(3.0, name="v")
    w = tf.Variable(1.0, trainable=False)
    seen = {}

    @tf.custom_gradient
    def fv(x):
        def grad(dy, variables=None):
            seen["vars"] = [u.name for u in variables]
            return dy * v * 10.0, [dy * x * 25.0]
        return x * v + w, grad
    x = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = fv(x)
    gx, gv = t.gradient(y, [x, v])
    close(y, 7.0)
    close(gx, 30.0)
    close(gv, 50.0)
    assert seen["vars"] == ["v:0"]
    assert v in t.watched_variables()


def test_custom_gradient_variable_value_is_the_read_value_in_replay(fresh_cache):
    """grad_fn reads the Variable's value when the gradient runs: a cache hit after assign uses
    the new value (an argument of the compiled gradient, not a constant of it)."""
    v = tf.Variable(3.0)

    @tf.custom_gradient
    def fv(x):
        return x * v, lambda dy, variables=None: (dy * v, [dy * x])
    for val in (3.0, 5.0):
        v.assign(val)
        x = tf.constant(2.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = fv(x)
        gx, gv = t.gradient(y, [x, v])
        close(gx, val)
        close(gv, 2.0)
    assert tf.cache_info().hits == 1


def test_custom_gradient_variables_keyword_required():
    v = tf.Variable(3.0)

    @tf.custom_gradient
    def fv(x):
        return x * v, lambda dy: dy
    with pytest.raises(TypeError, match="variables"):
        fv(tf.constant(1.0))


def test_custom_gradient_variable_as_argument_is_an_input_not_a_variable():
    """A Variable passed as an argument is an input (one gradient per argument, no `variables`)."""
    v = tf.Variable(4.0)

    @tf.custom_gradient
    def f(a):
        return a * a, lambda dy: dy * 3.0
    with tf.GradientTape() as t:
        y = f(v)
    close(t.gradient(y, v), 3.0)


def test_custom_gradient_nested_structures_and_dict_output():
    """f({'a': a, 'b': b}) -> {'p': a*b, 's': a+b}; grad_fn gets one dict; y = 2p + 3s."""
    @tf.custom_gradient
    def f(d):
        a, b = d["a"], d["b"]

        def grad(dy):
            assert sorted(dy) == ["p", "s"]
            return {"a": dy["p"] * b + dy["s"], "b": dy["p"] * a + dy["s"]}
        return {"s": a + b, "p": a * b}, grad
    a, b = tf.constant(2.0), tf.constant(5.0)
    with tf.GradientTape() as t:
        t.watch([a, b])
        out = f({"a": a, "b": b})
        y = 2.0 * out["p"] + 3.0 * out["s"]
    assert list(out) == ["s", "p"]
    ga, gb = t.gradient(y, [a, b])
    close(ga, 2 * 5 + 3)
    close(gb, 2 * 2 + 3)


def test_custom_gradient_keyword_arguments_get_no_gradient():
    """Keyword arguments reach f; a tensor keyword gets no gradient (TF records only positional inputs)."""
    @tf.custom_gradient
    def f(x, scale=None, power=1):
        return x * scale, lambda dy: dy * scale * power
    x, s = tf.constant(2.0), tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, s])
        y = f(x, scale=s, power=10)
    close(y, 6.0)
    close(t.gradient(y, x), 30.0)
    assert t.gradient(y, s) is None


def test_custom_gradient_wrong_count_message_shows_expected_and_got():
    @tf.custom_gradient
    def f(x, y):
        return x * y, lambda dy: dy
    a, b = tf.constant(1.0), tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch([a, b])
        z = f(a, b)
    with pytest.raises(ValueError, match=r"expected to return 2 gradients, but returned 1"):
        t.gradient(z, [a, b])


def test_custom_gradient_wrong_shape_message_shows_expected_and_got():
    @tf.custom_gradient
    def f(x):
        return x * 2.0, lambda dy: tf.ones([3])
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        t.gradient(y, x)


def test_custom_gradient_bad_return_of_f():
    @tf.custom_gradient
    def f(x):
        return x * 2.0
    with pytest.raises(TypeError, match=r"\(output, grad_fn\)"):
        f(tf.constant(1.0))


def test_custom_gradient_under_jax_grad_and_jit_uses_grad_fn():
    """No tape: the op is a jax.custom_vjp, so jax.grad honours grad_fn (7, not 2x)."""
    @tf.custom_gradient
    def f(x):
        return x * x, lambda dy: dy * 7.0

    def g(a):
        return f(tf.Tensor(a))._value
    close(jax.grad(g)(3.0), 7.0)
    close(jax.jit(jax.grad(g))(3.0), 7.0)
    close(jax.jit(g)(3.0), 9.0)


def test_custom_gradient_inside_jitted_tape_program():
    """A tape recorded inside jax.jit: gradient of log1pexp(x)*x = sigmoid(x)*x + log1pexp(x)."""
    def step(a):
        x = tf.Tensor(a)
        with tf.GradientTape() as t:
            t.watch(x)
            y = log1pexp(x) * x
        return t.gradient(y, x)._value
    f = _jax_log1pexp()
    want = jax.grad(lambda a: f(a) * a)(0.5)
    close(jax.jit(step)(jnp.float32(0.5)), want)


def test_custom_gradient_in_tapejax_function_with_a_tape():
    """Inside tapejax.function (compiled): d/dx [log1pexp(x) * x] against jax.grad of the custom_vjp."""
    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = log1pexp(x) * x
        return t.gradient(y, x)
    f = _jax_log1pexp()
    for v in (0.5, -1.0):
        close(step(tf.constant(v)), jax.grad(lambda a: f(a) * a)(v))
    assert step.experimental_get_tracing_count() == 1


def test_custom_gradient_as_method_decorator():
    class Layer:
        scale = 4.0

        @tf.custom_gradient
        def __call__(self, x):
            return x * self.scale, lambda dy: dy * 100.0
    x = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = Layer()(x)
    close(y, 4.0)
    close(t.gradient(y, x), 100.0)


def test_custom_gradient_integer_input_gets_no_gradient():
    @tf.custom_gradient
    def f(x, n):
        return x * tf.cast(n, tf.float32), lambda dy: (dy * 2.0, None)
    x = tf.constant(1.0)
    n = tf.constant(3)
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x, n)
    close(t.gradient(y, x), 2.0)


# --------------------------------------------------------------------------
# custom_gradient and Python state (issue #20): f at the call, grad_fn at gradient()
# --------------------------------------------------------------------------

@pytest.fixture(params=[True, False], ids=["deferred", "eager"])
def deferral(request):
    prev = tf.set_deferred_execution(request.param)
    yield request.param
    tf.set_deferred_execution(prev)


def _rev_loop(lams, sched, rev):
    x = tf.Variable(1.0)
    out = []
    for lam in lams:
        sched["lam"] = lam
        with tf.GradientTape() as t:
            y = rev(x) * 1.0
        out.append(float(t.gradient(y, x)))
    return out


def test_custom_gradient_changing_python_scalar_compiles_once(fresh_cache, deferral):
    """Gradient reversal with lambda from a schedule: -lambda each step (by hand), and the
    scalar is an argument of the compiled gradient, so 5 steps compile once."""
    sched = {"lam": 0.0}

    @tf.custom_gradient
    def rev(x):
        return tf.identity(x), lambda dy: -sched["lam"] * dy
    lams = [0.0, 0.5, 1.5, 3.0, 3.0]
    assert _rev_loop(lams, sched, rev) == [-lam for lam in lams]
    info = tf.cache_info()
    assert info.compiles == 1 and info.misses == 1, info


def test_custom_gradient_rebound_closure_tensor_compiles_once(fresh_cache, deferral):
    """f and grad_fn close over a Tensor the loop rebinds: y = c*x, dy/dx = 10c with the
    current c (by hand), one compile for the loop."""
    c = tf.constant(1.0)

    @tf.custom_gradient
    def f(x):
        return x * c, lambda dy: dy * c * 10.0
    x = tf.Variable(2.0)
    for step in range(4):
        c = tf.constant(float(step + 2))
        with tf.GradientTape() as t:
            y = f(x) + 0.0
        g = t.gradient(y, x)
        close(y, 2.0 * (step + 2))
        close(g, 10.0 * (step + 2))
    info = tf.cache_info()
    assert info.compiles == 1 and info.misses == 1, info


def test_custom_gradient_nested_penalty_compiles_once(fresh_cache, deferral):
    """An outer tape differentiates an inner gradient through a custom op whose grad_fn scales
    by b (read at gradient time, new each step): the outer derivative reaches w through the
    op's output (by grad_fn, as TF), and the steady loop compiles nothing after its first step.
    Oracle: jax.grad of jax.grad with the op as b*t + (1-b)*stop_gradient(t) (value t,
    derivative b at every order, as TF differentiates it by grad_fn)."""
    xv = np.array([[0.98, -0.8], [0.01, -0.2]], np.float32)
    yv = np.array([[-0.01], [0.2]], np.float32)
    wv = np.array([[0.17], [0.48]], np.float32)
    s = {"b": 0.5}

    @tf.custom_gradient
    def op(t):
        return t * 1.0, lambda dy: dy * s["b"]

    def oracle(b):
        def jop(t):
            return b * t + (1.0 - b) * jax.lax.stop_gradient(t)

        def loss(w):
            return jnp.mean(jnp.square(jop(xv @ w) - yv))

        def total(w):
            return loss(w) + jnp.sum(jnp.square(jax.grad(loss)(w)))
        return jax.grad(total)(wv)

    x, y, w = tf.constant(xv), tf.constant(yv), tf.Variable(wv)
    misses = None
    for step, b in enumerate((0.5, 2.0, -1.0)):
        s["b"] = b
        with tf.GradientTape() as tape:
            with tf.GradientTape() as inner:
                loss = tf.reduce_mean(tf.square(op(tf.matmul(x, w)) - y))
            total = loss + tf.reduce_sum(tf.square(inner.gradient(loss, w)))
        close(tape.gradient(total, w), oracle(b))
        if step == 0:
            misses = tf.cache_info().misses
    info = tf.cache_info()
    assert info.misses == misses, info


def test_custom_gradient_new_grad_fn_structure_compiles_again(fresh_cache, deferral):
    """A Python branch in grad_fn changes what it computes: a new compile for the new branch,
    a cache hit when the old branch comes back.  Oracle: jax.grad of the same rules."""
    mode = {"sin": False}

    @tf.custom_gradient
    def f(x):
        return x * 1.0, lambda dy: tf.sin(dy * x) if mode["sin"] else dy * 3.0
    x = tf.Variable(0.5)
    want = {False: 3.0, True: float(jnp.sin(0.5))}
    for m in (False, True, False, True):
        mode["sin"] = m
        with tf.GradientTape() as t:
            y = f(x) * 1.0
        close(t.gradient(y, x), want[m])
    info = tf.cache_info()
    assert info.misses == 2 and info.hits == 2, info


def test_custom_gradient_forward_value_is_the_calls(fresh_cache, deferral):
    """f reads k at the call; k changes before gradient(): y is the call's (deferred: the replay
    computes y), and a steady loop compiles once."""
    s = {"k": 1.0}

    @tf.custom_gradient
    def f(x):
        return x * s["k"], lambda dy: dy
    x = tf.Variable(1.0)
    for k in (1.0, 2.0, 3.0):
        s["k"] = k
        with tf.GradientTape() as t:
            y = f(x) * 2.0
        s["k"] = 100.0
        close(t.gradient(y, x), 2.0)
        close(y, 2.0 * k)
    assert tf.cache_info().compiles == 1


def test_custom_gradient_second_order_reads_state_and_compiles_once(fresh_cache):
    """Nested tapes: f = x^3 with grad_fn dy * a * 3x^2: first derivative 3a x^2, second 6a x
    (by hand), a per step; steps after the first compile nothing."""
    s = {"a": 1.0}

    @tf.custom_gradient
    def cube(x):
        return x ** 3, lambda dy: dy * s["a"] * 3.0 * x ** 2
    x = tf.Variable(2.0)
    for step, a in enumerate((1.0, 2.0, -1.0)):
        s["a"] = a
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                y = cube(x) * 1.0
            g = t1.gradient(y, x)
        close(g, 12.0 * a)
        close(t2.gradient(g, x), 12.0 * a)
        if step == 0:
            first = tf.cache_info().compiles
    assert tf.cache_info().compiles == first


def test_custom_gradient_tape_keeps_grad_fn_alive_until_released():
    """The tape holds each call's grad_fn (TF's tape does too) and nothing else keeps it: an
    object only grad_fn refers to dies with the tape (the node's signature, interned for the
    first call of a structure, refers to it weakly)."""
    class Payload:
        scale = 2.0

    @tf.custom_gradient
    def f(x):
        p = Payload()
        refs.append(weakref.ref(p))
        return x * 1.0, lambda dy: dy * p.scale
    refs = []
    x = tf.Variable(1.0)
    for _ in range(2):
        with tf.GradientTape(persistent=True) as t:
            y = f(x) * 1.0
        assert refs[-1]() is not None
        close(t.gradient(y, x), 2.0)
        close(t.gradient(y, x), 2.0)
        del t, y
        gc.collect()
        assert all(r() is None for r in refs)


def test_custom_gradient_shape_and_random_inside_f(deferral):
    """tf.shape in f and grad_fn; a dropout mask drawn in f is the one grad_fn uses (g = 3 *
    mask = 3 * y / x) and the gradient draws nothing from the global stream."""
    @tf.custom_gradient
    def col(x):
        return tf.reshape(x, [tf.shape(x)[0], 1]), lambda dy: tf.reshape(dy, tf.shape(x)) * 2.0

    @tf.custom_gradient
    def drop(x):
        mask = tf.cast(tf.random.uniform(x.shape) > 0.5, tf.float32)
        return x * mask, lambda dy: dy * mask * 3.0
    x = tf.Variable(tf.range(1.0, 17.0))
    tf.random.set_seed(3)
    with tf.GradientTape(persistent=True) as t:
        c = tf.reduce_sum(col(x))
        y = drop(x) * 1.0
    close(t.gradient(c, x), np.full(16, 2.0))
    g = t.gradient(y, x)
    after = tf.random.uniform([3]).numpy()
    mask = (y / x).numpy()
    close(g, 3.0 * mask)
    assert 0 < mask.sum() < 16
    tf.random.set_seed(3)
    drop(x)
    np.testing.assert_array_equal(tf.random.uniform([3]).numpy(), after)


def test_custom_gradient_shape_inside_tapejax_function():
    """tf.shape of a traced input inside f, in a compiled step: its value is known."""
    @tf.custom_gradient
    def col(x):
        return tf.reshape(x, [tf.shape(x)[0], 1]), lambda dy: tf.reshape(dy, tf.shape(x)) * 2.0
    x = tf.Variable([0.2, 0.7])

    @tf.function
    def step():
        with tf.GradientTape() as t:
            y = tf.reduce_sum(col(x))
        return y, t.gradient(y, x)
    y, g = step()
    close(y, 0.9)
    close(g, [2.0, 2.0])


def test_lifted_literal_evaluation_matches_eval_jaxpr():
    """The evaluator with top-level literals as arguments gives jax.core.eval_jaxpr's values
    (literals, a custom_jvp with a sub-jaxpr, a pjit), and equal structures with different
    literals have one fingerprint."""
    from tapejax.autodiff.late import eval_lifted as _eval_lifted, fingerprint as _fingerprint, literals as _literals

    def fn(a, k):
        return jax.nn.relu(a) * k + jax.jit(jnp.sin)(a) - 2.0

    x = jnp.array([-1.0, 0.5, 2.0])
    c1, c2 = jax.make_jaxpr(lambda a: fn(a, 3.0))(x), jax.make_jaxpr(lambda a: fn(a, 5.0))(x)
    assert _fingerprint(c1.jaxpr) == _fingerprint(c2.jaxpr)
    for c, k in ((c1, 3.0), (c2, 5.0)):
        got = _eval_lifted(c.jaxpr, c.consts, _literals(c.jaxpr), [x])
        close(got[0], jax.core.eval_jaxpr(c.jaxpr, c.consts, x)[0])
        close(got[0], fn(x, k))
    c3 = jax.make_jaxpr(lambda a: fn(a, 3.0) * a)(x)
    assert _fingerprint(c3.jaxpr) != _fingerprint(c1.jaxpr)


# --------------------------------------------------------------------------
# RegisterGradient / gradient_override_map
# --------------------------------------------------------------------------

def test_register_gradient_twice_and_builtin_names_raise_key_error():
    name = unique("Twice")
    tf.RegisterGradient(name)(lambda op, g: g)
    with pytest.raises(KeyError, match="Registering two gradient"):
        tf.RegisterGradient(name)(lambda op, g: g)
    for builtin in ("Identity", "Mul"):
        with pytest.raises(KeyError, match="Registering two gradient"):
            tf.RegisterGradient(builtin)(lambda op, g: g)
    with pytest.raises(TypeError, match="op_type must be a string"):
        tf.RegisterGradient(None)
    nondiff = unique("NonDiff")
    tf.define_op(nondiff, jnp.floor, differentiable=False)
    with pytest.raises(KeyError, match="differentiable=False"):
        tf.RegisterGradient(nondiff)(lambda op, g: g)


def test_seed4_identity_custom_grad_eager_and_compat():
    """Seed 004: {'Identity': 'CustomGrad'} with 5*grad; the map reached both ways."""
    name = unique("CustomGrad")

    @tf.RegisterGradient(name)
    def _const_mul_grad(unused_op, grad):
        return 5.0 * grad
    inp = tf.Variable([1.0, 2.0])
    for ctx in (tf.gradient_override_map, tf.compat.v1.get_default_graph().gradient_override_map):
        with tf.GradientTape() as t:
            with ctx({"Identity": name}):
                output = tf.identity(inp, name="Identity")
        close(output, [1.0, 2.0])
        close(t.gradient(output, inp), [5.0, 5.0])


def test_registered_gradient_receives_op():
    """op.type/name/inputs/outputs/get_attr, on a test-local op y = a * b * scale (scale static);
    the registered rule is twice the true one: oracle 2 * jax.vjp."""
    op_type, name = unique("ScaledMul"), unique("ScaledMulTwice")
    scaled_mul = tf.define_op(op_type, lambda a, b, scale: a * b * scale)
    seen = {}

    @tf.RegisterGradient(name)
    def _g(op, grad):
        a, b = op.inputs
        scale = op.get_attr("scale")
        seen.update(type=op.type, name=op.name, n_in=len(op.inputs), n_out=len(op.outputs),
                    scale=scale, T=op.get_attr("T"), out_shape=tuple(op.outputs[0].shape))
        return grad * b * scale * 2.0, grad * a * scale * 2.0
    a = tf.constant([1.0, 2.0])
    b = tf.constant([0.5, -1.0])
    with tf.GradientTape() as t:
        t.watch([a, b])
        with tf.gradient_override_map({op_type: name}):
            y = tf.bind(scaled_mul, a, b, scale=3.0)
        loss = tf.reduce_sum(y * y)
    ga, gb = t.gradient(loss, [a, b])
    _, vjp = jax.vjp(lambda p, q: jnp.sum((p * q * 3.0) ** 2), jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    wa, wb = vjp(1.0)
    close(ga, 2 * wa)
    close(gb, 2 * wb)
    assert seen == dict(type=op_type, name=op_type, n_in=2, n_out=1, scale=3.0, T=tf.float32, out_shape=(2,))


def test_registered_gradient_on_a_builtin_matmul_matches_jax():
    """Overriding a built-in op type (MatMul) with its true rule reproduces jax.vjp."""
    name = unique("MatMulRule")
    calls = []

    @tf.RegisterGradient(name)
    def _rule(op, g):
        calls.append(op.type)
        return tf.matmul(g, op.inputs[1], transpose_b=True), tf.matmul(op.inputs[0], g, transpose_a=True)
    a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    b = tf.constant([[0.5, -1.0], [2.0, 0.0]])
    with tf.GradientTape() as t:
        t.watch([a, b])
        with tf.gradient_override_map({"MatMul": name}):
            y = tf.matmul(a, b)
        loss = tf.reduce_sum(tf.sin(y))
    ga, gb = t.gradient(loss, [a, b])
    _, vjp = jax.vjp(lambda p, q: jnp.sum(jnp.sin(p @ q)), jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    wa, wb = vjp(1.0)
    close(ga, wa)
    close(gb, wb)
    assert calls == ["MatMul"]  # traced once, by the compiled replay


def test_registered_gradient_get_attr_unknown_and_wrong_returns():
    bad_attr, two, shape = unique("BadAttr"), unique("Two"), unique("Shape")
    tf.RegisterGradient(bad_attr)(lambda op, g: g * op.get_attr("nope"))
    tf.RegisterGradient(two)(lambda op, g: (g, g))
    tf.RegisterGradient(shape)(lambda op, g: tf.ones([5]))
    x = tf.constant([1.0, 2.0])
    for name, err, pat in ((bad_attr, ValueError, "no attr named 'nope'"),
                           (two, ValueError, r"Num gradients 2 .* num inputs 1"),
                           (shape, ValueError, r"shape \(5,\).*shape \(2,\)")):
        with tf.GradientTape() as t:
            t.watch(x)
            with tf.gradient_override_map({"Identity": name}):
                y = tf.identity(x)
        with pytest.raises(err, match=pat):
            t.gradient(y, x)


def test_identity_gradient_on_a_two_input_op_is_an_error():
    x = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.gradient_override_map({"Mul": "Identity"}):
            y = x * x
    with pytest.raises(ValueError, match=r"Num gradients 1 .* num inputs 2"):
        t.gradient(y, x)


def test_override_unknown_name_is_lookup_error_at_gradient_time():
    name = unique("Later")
    x = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with tf.gradient_override_map({"Identity": name}):
            y = tf.identity(x)
    with pytest.raises(LookupError, match="No gradient defined for operation"):
        t.gradient(y, x)
    tf.RegisterGradient(name)(lambda op, g: g * 3.0)  # registering afterwards works, as in TF
    close(t.gradient(y, x), 3.0)


def test_override_map_validation_nesting_and_restore():
    with pytest.raises(TypeError, match="mapping strings to strings"):
        with tf.gradient_override_map({"Identity": 3}):
            pass
    three, seven = unique("Three"), unique("Seven")
    tf.RegisterGradient(three)(lambda op, g: g * 3.0)
    tf.RegisterGradient(seven)(lambda op, g: g * 7.0)
    x = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with tf.gradient_override_map({"Identity": three}):
            a = tf.identity(x)
            with tf.gradient_override_map({"Identity": seven}):
                b = tf.identity(x)
            c = tf.identity(x)
        d = tf.identity(x)
    assert [t.gradient(v, x).numpy() for v in (a, b, c, d)] == [3.0, 7.0, 3.0, 1.0]
    with pytest.raises(RuntimeError):
        with tf.gradient_override_map({"Identity": three}):
            raise RuntimeError("boom")
    assert _state._local.overrides == ()


def test_gradient_override_map_is_per_thread():
    """A map entered on one thread does not apply to ops another thread records meanwhile."""
    import threading
    name = unique("Nine")
    tf.RegisterGradient(name)(lambda op, g: g * 9.0)
    inside, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        inside.wait(10)
        x = tf.constant(1.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.identity(x)
        seen["other"] = t.gradient(y, x).numpy()
        done.set()

    th = threading.Thread(target=other)
    th.start()
    x = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.gradient_override_map({"Identity": name}):
            inside.set()
            done.wait(10)
            y = tf.identity(x)
    th.join()
    assert seen["other"] == 1.0 and t.gradient(y, x).numpy() == 9.0


def test_override_makes_a_non_differentiable_op_a_straight_through_estimator():
    """A test-local op type with TF's Floor semantics (not differentiable): None, then 1 with 'Identity'."""
    name = unique("FloorLike")
    floor_like = _primitives.define(name, jnp.floor, differentiable=False)
    x = tf.constant([0.5, 1.7, -2.2])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        plain = _primitives.bind(floor_like, x)
        with tf.gradient_override_map({name: "Identity"}):
            ste = _primitives.bind(floor_like, x)
        loss = tf.reduce_mean(ste) * 3.0
    assert t.gradient(plain, x) is None
    assert name in t.explain(plain, x)
    close(ste, [0.0, 1.0, -3.0])
    close(t.gradient(loss, x), [1.0, 1.0, 1.0])


@pytest.mark.parametrize("op_name", ["floor", "round", "sign"])
def test_builtin_straight_through_estimators(op_name):
    """{'Floor'|'Round'|'Sign': 'Identity'}: the forward is the op's, the gradient the identity's."""
    op = getattr(tf, op_name)
    x = tf.constant([0.4, -1.6, 2.5])
    tf_type = {"floor": "Floor", "round": "Round", "sign": "Sign"}[op_name]
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.gradient_override_map({tf_type: "Identity"}):
            y = op(x)
        loss = tf.reduce_sum(y * tf.constant([1.0, 2.0, 3.0]))
    close(y, getattr(jnp, op_name)(jnp.asarray([0.4, -1.6, 2.5])))
    close(t.gradient(loss, x), [1.0, 2.0, 3.0])


def test_override_holds_inside_jit_and_second_order():
    """Override inside a jitted tape program, and a registered gradient differentiated again:
    grad := grad * 3 x^2 for identity -> second derivative 6x = 12 at 2."""
    name = unique("Cubic")
    tf.RegisterGradient(name)(lambda op, g: g * 3.0 * op.inputs[0] * op.inputs[0])

    def step(a):
        x = tf.Tensor(a)
        with tf.GradientTape() as t:
            t.watch(x)
            with tf.gradient_override_map({"Identity": name}):
                y = tf.identity(x)
        return t.gradient(y, x)._value
    close(jax.jit(step)(jnp.float32(2.0)), 12.0)
    x = tf.constant(2.0)
    with tf.GradientTape() as t1:
        t1.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.gradient_override_map({"Identity": name}):
                y = tf.identity(x)
        g = t2.gradient(y, x)
    close(g, 12.0)
    close(t1.gradient(g, x), 12.0)


# --------------------------------------------------------------------------
# new op types
# --------------------------------------------------------------------------

def test_new_op_type_with_registered_gradient():
    """define_op + RegisterGradient under the op's own type: the registered rule is used."""
    name = unique("Cube")
    cube = tf.define_op(name, lambda x: x ** 3)
    x = tf.constant(2.0)

    def grad_of_cube():
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.bind(cube, x)
        return t.gradient(y, x)
    close(grad_of_cube(), 12.0)  # no registered gradient yet: JAX differentiates the forward
    tf.RegisterGradient(name)(lambda op, g: g * 100.0)
    close(grad_of_cube(), 100.0)  # the registration replaces compiled replays that used JAX's


def test_new_op_type_without_any_gradient_is_lookup_error():
    name = unique("HostSin")

    def host_sin(x):
        return jax.pure_callback(lambda a: np.sin(a).astype(a.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    op = tf.define_op(name, host_sin)
    x = tf.constant(0.5)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.bind(op, x)
    close(y, np.sin(0.5))
    with pytest.raises(LookupError, match=rf"No gradient defined for operation '{name}'"):
        t.gradient(y, x)
    tf.RegisterGradient(name)(lambda op, g: g * tf.cos(op.inputs[0]))
    close(t.gradient(y, x), np.cos(0.5))


def test_real_errors_of_a_new_op_are_not_turned_into_lookup_errors():
    """Only a forward JAX cannot *differentiate* is "No gradient defined"; other errors pass through."""
    state = {"broken": False}

    def fwd(x):
        if state["broken"]:
            raise ZeroDivisionError("bug in the forward")
        return x * 2.0
    op = tf.define_op(unique("Broken"), fwd)
    x = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.bind(op, x)
    state["broken"] = True
    with pytest.raises(ZeroDivisionError):
        t.gradient(y, x)


# --------------------------------------------------------------------------
# tapejax.gradients and compat.v1
# --------------------------------------------------------------------------

def test_gradients_eager_runtime_error_points_to_gradient_tape():
    x = tf.constant(1.0)
    with pytest.raises(RuntimeError, match="GradientTape"):
        tf.gradients(x * 2.0, x)
    with pytest.raises(RuntimeError, match="eager"):
        tf.compat.v1.gradients([x], [x], unconnected_gradients="ZERO")


def test_gradients_inside_function_matches_jax_grad():
    """Graph mode: d/dw sum((x w)^2) against jax.grad; grad_ys weights; list of one for one x."""
    x = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
    w = tf.Variable([0.5, -0.25])

    @tf.function
    def grads(xt):
        y = tf.reduce_sum(tf.square(tf.matmul(xt, tf.reshape(w, [2, 1]))))
        return tf.gradients(y, w), tf.gradients(y * 1.0, [w], grad_ys=[tf.constant(3.0)])
    (g,), (g3,) = grads(tf.constant(x))
    want = jax.grad(lambda v: jnp.sum((jnp.asarray(x) @ v.reshape(2, 1)) ** 2))(jnp.asarray([0.5, -0.25]))
    close(g, want)
    close(g3, 3 * want)


def test_gradients_stop_gradients_partials_and_higher_order():
    """a = 0, b = 2a: partials [1, 1], totals [3, 1]; d3/da3 of a^3 at 1 by chained gradients = 6."""
    @tf.function
    def partials():
        a = tf.constant(0.0)
        b = 2.0 * a
        return (tf.gradients(a + b, [a, b], stop_gradients=[a, b]), tf.gradients(a + b, [a, b]),
                tf.gradients(b, a, stop_gradients=[b]))
    p, t, none = partials()
    assert [float(v) for v in p] == [1.0, 1.0]
    assert [float(v) for v in t] == [3.0, 1.0]
    assert none == [None]

    @tf.function
    def third():
        a = tf.constant(1.0)
        g1 = tf.gradients(a * a * a, a)[0]
        g2 = tf.gradients(g1, a)[0]
        return g1, g2, tf.gradients(g2, a)[0]
    close(third(), [3.0, 6.0, 6.0])


def test_gradients_integer_and_unconnected_and_bad_arguments():
    @tf.function
    def f():
        x = tf.constant([1.0, 2.0])
        n = tf.constant(3)
        y = x * tf.cast(n, tf.float32)
        other = tf.constant(5.0)
        out = (tf.gradients(y, n), tf.gradients(y, other), tf.gradients(y, other, unconnected_gradients="zero"))
        errors = []
        for call in (lambda: tf.gradients(y, x, grad_ys=[None, None]),
                     lambda: tf.gradients(y, x, unconnected_gradients="ZERO"),
                     lambda: tf.gradients(y, x, grad_ys=tf.constant([1.0, 2.0, 3.0]))):
            try:
                call()
            except ValueError as e:
                errors.append(str(e))
        return out, errors
    (gn, go, gz), errors = f()
    assert gn == [None] and go == [None]
    close(gz[0], 0.0)
    assert "Passed 2 grad_ys for 1 ys" in errors[0]
    assert "unconnected_gradients" in errors[1]
    assert "shape (3,)" in errors[2] and "shape (2,)" in errors[2]


def test_gradients_under_an_eager_tape_calling_a_function():
    """A tapejax.function called under a recording tape runs op by op, in graph mode too."""
    w = tf.Variable(3.0)

    @tf.function
    def inner():
        y = w * w
        return tf.gradients(y, w)[0]
    with tf.GradientTape() as t:
        g = inner()
    close(g, 6.0)
    close(t.gradient(g, w), 2.0)


def test_graph_mode_context_directly_and_jit():
    """graph_mode is what tapejax.function enters; under jax.jit it works on tracers."""
    from tapejax.autodiff.custom import graph_mode

    def f(a):
        with graph_mode():
            x = tf.Tensor(a)
            return tf.gradients(tf.sin(x) * x, x)[0]._value
    close(jax.jit(f)(0.3), jax.grad(lambda v: jnp.sin(v) * v)(0.3))


def test_compat_v1_namespace():
    import tapejax.compat.v1 as v1
    assert v1 is tf.compat.v1
    assert v1.get_default_graph() is v1.get_default_graph()
    assert v1.RegisterGradient is tf.RegisterGradient
    assert v1.stop_gradient is tf.stop_gradient and v1.custom_gradient is tf.custom_gradient


# --------------------------------------------------------------------------
# typed records (issue #20)
# --------------------------------------------------------------------------

def test_skeletons_are_typed_records_that_rebuild_the_structure():
    """``_skeleton`` describes a structure with ``_Struct``/``_Const`` records (hashable, part of
    the cache key) and ``_build`` rebuilds it from the leaves in order; containers of different
    types, and a kept value equal to the leaf marker, stay distinct."""
    import collections

    from tapejax.autodiff.custom_gradient import _LEAF, _build, _Const, _skeleton, _Struct
    Pair = collections.namedtuple("Pair", "a b")
    x = {"z": [1.0, (2.0, 3.0)], "a": Pair(4.0, 5.0)}
    skel = _skeleton(x)
    assert isinstance(skel, _Struct) and skel.kind == "dict" and skel.keys == ("z", "a")
    assert hash(skel) == hash(_skeleton(x)) and skel == _skeleton(x)
    leaves = iter(range(5))
    assert _build(skel, leaves) == {"z": [2, (3, 4)], "a": Pair(0, 1)}   # children in sorted key order
    assert _skeleton([1.0]) != _skeleton((1.0,)) != _skeleton(Pair(1.0, 2.0))
    kept = _skeleton(["*", 2, tf.constant(1.0)], consts=True)
    assert kept.children == (_Const("*"), _Const(2), _LEAF) and _Const("*") != _LEAF
    assert _build(kept, iter(["leaf"])) == ["*", 2, "leaf"]


def test_second_registration_names_where_the_first_was():
    name = unique("Where")

    def first(op, g):
        return g

    tf.RegisterGradient(name)(first)
    where = f"{first.__code__.co_filename}:{first.__code__.co_firstlineno}"
    with pytest.raises(KeyError, match="Previous registration was in " + where.replace(".", r"\.")):
        tf.RegisterGradient(name)(lambda op, g: g)


# --------------------------------------------------------------------------
# no_gradient (TF's NotDifferentiable)
# --------------------------------------------------------------------------

def test_no_gradient_makes_a_defined_op_type_not_differentiable():
    """Oracle: TF's registry (run): after tf.no_gradient(t) a tape gives None through ops of
    type t, while other paths keep their gradient."""
    name = unique("Sq")
    sq = tf.define_op(name, lambda x: x * x)
    x = tf.constant(3.0)

    def grads():
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = tf.bind(sq, x)
            z = y + 2.0 * x
        return t.gradient(y, x), t.gradient(z, x)
    g, gz = grads()
    close(g, 6.0)
    close(gz, 8.0)
    tf.no_gradient(name)
    g, gz = grads()
    assert g is None
    close(gz, 2.0)


def test_no_gradient_registry_errors_are_tfs():
    """TF 2.21 (run): a non-string TypeError, a second registration or a built-in type KeyError."""
    with pytest.raises(TypeError, match="op_type must be a string"):
        tf.no_gradient(3)
    with pytest.raises(KeyError, match="Registering two gradient with name 'Log'"):
        tf.no_gradient("Log")
    name = unique("NoGrad")
    tf.no_gradient(name)
    with pytest.raises(KeyError, match=f"Registering two gradient with name '{name}'"):
        tf.no_gradient(name)
    with pytest.raises(KeyError, match=f"Registering two gradient with name '{name}'"):
        tf.RegisterGradient(name)(lambda op, g: g)


def test_no_gradient_name_in_override_map_passes_no_gradient():
    """TF 2.21 (run): an op mapped to a no_gradient name is skipped by the graph gradient: None
    when it is the only path, the other paths' gradient otherwise."""
    name = unique("NoG")
    tf.no_gradient(name)

    @tf.function
    def f(x):
        with tf.gradient_override_map({"Square": name}):
            y = tf.square(x)
        return tf.gradients(y, x)[0], tf.gradients(y + x, x)[0]
    only, other = f(tf.constant(3.0))
    assert only is None
    close(other, 1.0)
