"""Round 15a: programs as a JAX user writes them, with pure JAX as the oracle.

tapejax's second user group brings its own JAX functions (``tapejax.op``), its
own arrays (jax and NumPy), optax, and wants a TF / PyTorch style tape over
them.  Each program here is written twice: once with tapejax's tape, once in
pure JAX (``jax.grad``, ``jax.value_and_grad``, ``jax.vjp``, ``jax.jvp``,
``jax.hessian``, ``jax.jacrev``, an optax update under ``jax.jit``), and the
two must give the same values and gradients.  Where they cannot agree by
design, the rule is TF's and is written next to the comparison:

- a source the target does not depend on through recorded ops has gradient
  ``None`` (pure JAX gives zeros); a source connected through an op whose
  gradient for it is structurally zero gets zeros, as from pure JAX;
- integer and bool outputs carry no gradient (``None``);
- for a real loss of complex inputs TF's gradient is the conjugate of
  ``jax.grad``'s.

Every program runs with deferred execution and predicted updates on
(tapejax's default) and off (the ``mode`` fixture), so that no answer depends
on the execution mode.
"""
import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tapejax as tf
import tapejax.numpy as tnp
from jax_users_common import close, mlp_apply, mode, params0  # noqa: F401  (mode: the autouse fixture)

RNG = np.random.default_rng(15)
X = RNG.normal(size=(8, 3)).astype(np.float32)
Y = RNG.normal(size=(8, 2)).astype(np.float32)


def to_vars(tree):
    return jax.tree_util.tree_map(tf.Variable, tree)


def mse(p, x, y):
    return jnp.mean((mlp_apply(p, x) - y) ** 2)


MLP = tf.op(mlp_apply)


# --- tapejax.op over user functions: pytrees, outputs, static arguments ---------------------

def test_mlp_pytree_of_variables_value_and_grad():
    """An MLP whose params are a nested dict of Variables, read inside one tapejax.op."""
    p = params0()
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(MLP(vs, X) - Y))
    grads = tape.gradient(loss, vs)
    want_l, want_g = jax.value_and_grad(mse)(p, X, Y)
    close(loss, want_l)
    close(grads, want_g)


class Linear(NamedTuple):
    w: object
    b: object


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Scaled:
    layers: list
    scale: float = dataclasses.field(metadata={"static": True}, default=2.0)


def _scaled_apply(m, x):
    for lin in m.layers:
        x = jnp.sin(x @ lin.w + lin.b)
    return m.scale * jnp.sum(x ** 2)


SCALED = tf.op(_scaled_apply)


def test_namedtuple_and_registered_dataclass_pytrees():
    """NamedTuples in a list in a registered dataclass with a static field: gradients in that structure."""
    r = np.random.default_rng(1)
    m = Scaled([Linear(r.normal(size=(3, 4)).astype(np.float32), np.ones(4, np.float32)),
                Linear(r.normal(size=(4, 2)).astype(np.float32), np.zeros(2, np.float32))], scale=0.5)
    mv = jax.tree_util.tree_map(tf.Variable, m)
    with tf.GradientTape() as tape:
        y = SCALED(mv, X)
    g = tape.gradient(y, mv)
    assert isinstance(g, Scaled) and g.scale == 0.5 and isinstance(g.layers[0], Linear)
    want_y, want_g = jax.value_and_grad(_scaled_apply)(m, X)
    close(y, want_y, rtol=1e-5)
    close(g.layers, want_g.layers, rtol=1e-4, atol=1e-5)


@tf.op
def _two_heads(x, y):
    return {"a": jnp.sin(x) * 2.0, "b": (jnp.cos(y), [y * y, y + 1.0])}


def test_several_outputs_and_unused_output():
    """A dict of outputs; the loss uses one: the other input gets zeros (connected through the op,
    as TF's ops whose gradient is zero for an input) and a Variable never read gets None."""
    x, y, unused = tf.Variable([0.1, 0.2]), tf.Variable([0.3, 0.4]), tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as tape:
        out = _two_heads(x, y)
        la = tf.reduce_sum(out["a"])
        lb = tf.reduce_sum(out["b"][1][0]) + tf.reduce_sum(out["b"][0])
    assert isinstance(out["b"], tuple) and isinstance(out["b"][1], list)
    def fa(x, y):
        return jnp.sum(_two_heads.__wrapped__(x, y)["a"])

    def fb(x, y):
        out = _two_heads.__wrapped__(x, y)
        return jnp.sum(out["b"][1][0]) + jnp.sum(out["b"][0])
    xa, ya = jnp.array([0.1, 0.2]), jnp.array([0.3, 0.4])
    close(tape.gradient(la, [x, y, unused]), list(jax.grad(fa, (0, 1))(xa, ya)) + [None])   # JAX: 0.0
    close(tape.gradient(lb, [x, y]), list(jax.grad(fb, (0, 1))(xa, ya)))
    close(tape.gradient([la, lb], x), jax.grad(lambda x: fa(x, ya) + fb(x, ya))(xa))


@tf.op
def _act(x, w, fn, name, k):
    h = fn(x @ w) * k
    return h if name == "plain" else jnp.log1p(h ** 2)


def test_static_python_numbers_strings_and_callables():
    """Static arguments (a callable, a string, a float) select the computation; each is its own program."""
    w0 = RNG.normal(size=(3, 2)).astype(np.float32)
    w = tf.Variable(w0)
    for fn, name, k in ((jax.nn.relu, "plain", 1.0), (jnp.tanh, "log", 0.5), (jax.nn.gelu, "log", 2.0)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(_act(X, w, fn, name, k))
        ref = lambda w: jnp.sum(_act.__wrapped__(X, w, fn, name, k))  # noqa: E731,B023
        close(loss, ref(w0), rtol=1e-5)
        close(tape.gradient(loss, w), jax.grad(ref)(w0), rtol=1e-5, atol=1e-5)


@jax.jit
def _jitted_loss(p, x, y):
    return mse(p, x, y)


def test_function_that_is_already_jitted():
    """A ``jax.jit``-ed function wrapped as an op (eager jit on, and ``jit=False``)."""
    p = params0(seed=2)
    for f in (tf.op(_jitted_loss), tf.op(_jitted_loss, jit=False)):
        vs = to_vars(p)
        with tf.GradientTape() as tape:
            loss = f(vs, X, Y)
        close(loss, _jitted_loss(p, X, Y))
        close(tape.gradient(loss, vs), jax.grad(_jitted_loss)(p, X, Y), rtol=1e-5)


# --- control flow, custom rules, checkpoint, vmap inside the op ------------------------------

def _rnn(params, xs):
    def cell(h, x):
        h = jnp.tanh(x @ params["wx"] + h @ params["wh"])
        return h, jnp.sum(h)
    h, ys = jax.lax.scan(cell, jnp.zeros(params["wh"].shape[0]), xs)
    return h, ys


RNN = tf.op(_rnn)


def test_lax_scan_rnn():
    r = np.random.default_rng(3)
    p = {"wx": r.normal(size=(3, 4)).astype(np.float32) * 0.5, "wh": r.normal(size=(4, 4)).astype(np.float32) * 0.5}
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        h, ys = RNN(vs, X)
        loss = tf.reduce_sum(h) + tf.reduce_mean(ys)
    ref = lambda p: jnp.sum(_rnn(p, X)[0]) + jnp.mean(_rnn(p, X)[1])  # noqa: E731
    close(loss, ref(p))
    close(tape.gradient(loss, vs), jax.grad(ref)(p), rtol=1e-5, atol=1e-5)


def _loops(x, n):
    y = jax.lax.fori_loop(0, n, lambda i, c: jnp.sin(c) + 0.1 * i, x)
    z = jax.lax.cond(jnp.sum(y) > 0, lambda v: v * v, lambda v: -v, y)
    return z


LOOPS = tf.op(_loops)
_WHILE = tf.op(lambda x: jax.lax.while_loop(lambda c: jnp.sum(c) < 10.0, lambda c: c * 1.5, x))


def test_fori_loop_cond_and_while_loop():
    """fori_loop (static bounds) and cond differentiate as in JAX; while_loop has no reverse-mode rule
    in JAX, so its gradient raises JAX's error (the forward value is JAX's)."""
    for x0 in (np.array([0.3, 0.7], np.float32), np.array([-2.0, -1.0], np.float32)):
        x = tf.Variable(x0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(LOOPS(x, 4))
        ref = lambda x: jnp.sum(_loops(x, 4))  # noqa: E731
        close(loss, ref(x0))
        close(tape.gradient(loss, x), jax.grad(ref)(x0), rtol=1e-5)
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(_WHILE(x))
    close(y, jnp.sum(_WHILE.__wrapped__(jnp.array([1.0, 2.0]))))
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        jax.grad(lambda x: jnp.sum(_WHILE.__wrapped__(x)))(jnp.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        tape.gradient(y, x)   # (raised by the gradient call itself, in both modes)


@jax.custom_vjp
def clip_grad(x, bound):
    return x


clip_grad.defvjp(lambda x, bound: (x, bound), lambda bound, g: (jnp.clip(g, -bound, bound), None))


@jax.custom_jvp
def log1pexp(x):
    return jnp.log1p(jnp.exp(x))


log1pexp.defjvp(lambda p, t: (log1pexp(p[0]), t[0] * jax.nn.sigmoid(p[0])))

@jax.custom_vjp
def twice_cos(x):
    return jnp.sin(x)


twice_cos.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * 2.0,))

_CLIPPED = tf.op(lambda x, b: jnp.sum(clip_grad(x * x, b) * 3.0))
_TWICE_COS = tf.op(lambda x: jnp.sum(twice_cos(x) * x))
_SOFTPLUS = tf.op(log1pexp)


def test_custom_vjp_and_custom_jvp_rules_are_used():
    """The tape uses the user's rules: the clipped cotangent, a custom_vjp's rule differentiated
    again by a second tape, and the stable derivative at x=100 (the naive one is nan there), also
    under a second tape."""
    x0 = np.array([0.5, 2.0], np.float32)
    x = tf.Variable(x0)
    with tf.GradientTape() as tape:
        y = _CLIPPED(x, 0.5)
    close(tape.gradient(y, x), jax.grad(lambda x: jnp.sum(clip_grad(x * x, 0.5) * 3.0))(x0))
    close(y, 12.75)
    with tf.GradientTape() as t2:   # second order through a custom_vjp: JAX differentiates its bwd
        with tf.GradientTape() as t1:
            y = _TWICE_COS(x)
        g = t1.gradient(y, x)
    ref = lambda x: jnp.sum(twice_cos(x) * x)  # noqa: E731
    close(g, jax.grad(ref)(x0), rtol=1e-6)
    close(t2.gradient(g, x), jax.grad(lambda x: jnp.sum(jax.grad(ref)(x)))(x0), rtol=1e-5)
    z0 = np.array([100.0, -3.0], np.float32)
    z = tf.Variable(z0)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            s = tf.reduce_sum(_SOFTPLUS(z))
        g = t1.gradient(s, z)
    gref = jax.grad(lambda z: jnp.sum(log1pexp(z)))
    close(s, jnp.sum(log1pexp(z0)))
    close(g, gref(z0))
    assert np.isfinite(np.asarray(g)).all()
    close(t2.gradient(g, z), jax.grad(lambda z: jnp.sum(gref(z)))(z0), rtol=1e-5)


def test_checkpoint_and_vmap_inside_the_op():
    """``jax.checkpoint`` (remat) and a ``jax.vmap``-ed per-example loss as ops."""
    p = params0(seed=4)
    per_example = jax.vmap(lambda p, x, y: mse(p, x[None], y[None]), in_axes=(None, 0, 0))
    f = tf.op(jax.checkpoint(lambda p, x, y: jnp.max(per_example(p, x, y))))
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        losses = tf.op(per_example)(vs, X, Y)
        worst = f(vs, X, Y)
    close(losses, per_example(p, X, Y))
    close(tape.gradient(worst, vs), jax.grad(lambda p: jnp.max(per_example(p, X, Y)))(p), rtol=1e-5)


@tf.op
def _stats(x):
    return {"argmax": jnp.argmax(x), "count": jnp.sum(x > 0), "pos": x > 0, "max": jnp.max(x)}


def test_integer_and_bool_outputs_have_no_gradient():
    """Integer and bool outputs are constants (None, TF's rule); the float output's gradient is JAX's;
    an integer output used as an index still leaves the value path differentiable."""
    x0 = np.array([0.5, -1.0, 2.0, 0.1], np.float32)
    x = tf.Variable(x0)
    with tf.GradientTape(persistent=True) as tape:
        s = _stats(x)
        picked = tf.gather(x, s["argmax"]) * tf.cast(s["count"], tf.float32)
    assert s["argmax"].dtype == tf.int32 and s["pos"].dtype == tf.bool
    close(s, _stats.__wrapped__(x0))
    assert tape.gradient(s["argmax"], x) is None and tape.gradient(s["pos"], x) is None
    assert tape.gradient(s["count"], x) is None
    close(tape.gradient(s["max"], x), jax.grad(lambda x: jnp.max(x))(x0))
    g = tape.gradient(picked, x)   # TF's gather gradient is IndexedSlices
    assert isinstance(g, tf.IndexedSlices)
    close(tf.convert_to_tensor(g), jax.grad(lambda x: x[jnp.argmax(x)] * jnp.sum(x > 0))(x0))


_CPLX = tf.op(lambda z, w: jnp.sum(jnp.abs(z * w + 1j) ** 2))


def test_complex_inputs_gradient_is_conjugate_of_jax():
    """A real loss of complex inputs: TF's gradient is conj(jax.grad) (checked against TF too)."""
    z0 = np.array([1 + 2j, 3 - 1j], np.complex64)
    w0 = np.array([0.5 - 1j, 2 + 0.5j], np.complex64)
    z, w = tf.Variable(z0), tf.Variable(w0)
    with tf.GradientTape() as tape:
        y = _CPLX(z, w)
    gz, gw = tape.gradient(y, [z, w])
    jz, jw = jax.grad(_CPLX.__wrapped__, (0, 1))(z0, w0)
    close(y, _CPLX.__wrapped__(z0, w0), rtol=1e-5)
    close([gz, gw], [np.conj(jz), np.conj(jw)], rtol=1e-5)
    real_tf = pytest.importorskip("tensorflow")
    tz, tw = real_tf.Variable(z0), real_tf.Variable(w0)
    with real_tf.GradientTape() as t:
        ty = real_tf.reduce_sum(real_tf.abs(tz * tw + 1j) ** 2)
    close([gz, gw], [g.numpy() for g in t.gradient(ty, [tz, tw])], rtol=1e-5)


_INNER = tf.op(lambda x: jnp.sin(x) * x)


@tf.op
def _outer(x, a):
    y = _INNER(x)   # a tape op called inside another op, on JAX values: a Tensor back
    return {"sq": jnp.sum(jnp.asarray(y) ** 2), "t": _INNER(x * a) * 2.0, "eig": tnp.linalg.eigh(a * a.T)}


def test_ops_composed_of_ops_and_jax_result_namedtuples():
    """A library of ops used inside another op (Tensors returned from inside flatten to their
    values), and jax.numpy's NamedTuple results (eigh, slogdet) through tapejax.numpy."""
    x0 = np.array([0.3, 0.7], np.float32)
    a0 = np.array([[1.0, 0.2], [0.3, 2.0]], np.float32)
    x, a = tf.Variable(x0), tf.Variable(a0)
    with tf.GradientTape() as tape:
        out = _outer(x, a)
        eig = tnp.linalg.eigh(a @ tf.transpose(a))
        logdet = tnp.linalg.slogdet(a).logabsdet
        loss = (out["sq"] + tf.reduce_sum(out["t"]) + tf.reduce_sum(out["eig"].eigenvalues)
                + tf.reduce_sum(eig.eigenvalues ** 2) + logdet)
    assert type(eig).__name__ == "EighResult" and type(out["eig"]).__name__ == "EighResult"

    def ref(x, a):
        f = lambda v: jnp.sin(v) * v  # noqa: E731
        return (jnp.sum(f(x) ** 2) + jnp.sum(f(x * a) * 2.0) + jnp.sum(jnp.linalg.eigh(a * a.T).eigenvalues)
                + jnp.sum(jnp.linalg.eigh(a @ a.T).eigenvalues ** 2) + jnp.linalg.slogdet(a).logabsdet)
    close(loss, ref(x0, a0), rtol=1e-5)
    close(tape.gradient(loss, [x, a]), list(jax.grad(ref, (0, 1))(x0, a0)), rtol=1e-4, atol=1e-5)


# --- jax and NumPy arrays in, arrays out ------------------------------------------------------

def test_jax_and_numpy_arrays_straight_into_ops():
    """jax arrays, NumPy arrays and a device_put array as operands of tapejax ops next to Variables;
    a Variable made from a jax array; ``tape.watch`` on a converted jax array."""
    (dev,) = jax.devices()
    xj = jax.device_put(jnp.asarray(X), dev)
    w0 = jnp.asarray(RNG.normal(size=(3, 2)).astype(np.float32))
    w = tf.Variable(w0)
    assert w.dtype == tf.float32 and w.shape == (3, 2)
    with tf.GradientTape() as tape:
        xt = tf.convert_to_tensor(xj)
        tape.watch(xt)
        y = tf.matmul(xj, w) + np.float32(0.5) * tnp.sin(Y) + tf.reduce_sum(xt)
        loss = tf.reduce_sum(y * y)
    # (xt, the watched copy, is used only in the sum; the matmul takes the jax array itself)
    ref = lambda xj, w, xt: jnp.sum((xj @ w + 0.5 * jnp.sin(Y) + jnp.sum(xt)) ** 2)  # noqa: E731
    close(loss, ref(xj, w0, xj), rtol=1e-5)
    close(tape.gradient(loss, [xt, w]), list(jax.grad(ref, (2, 1))(xj, w0, xj)), rtol=1e-5)


def test_watching_a_raw_jax_array_is_a_clear_error():
    """A jax array has no identity the tape can follow (each op converts it anew): watching one is
    a ValueError that says what to do, as TF's for a NumPy array."""
    with tf.GradientTape() as tape:
        with pytest.raises(ValueError, match="convert_to_tensor"):
            tape.watch(jnp.ones(2))


def test_results_through_the_array_protocols():
    """``.numpy()``, ``np.asarray``, ``jnp.asarray`` and jnp functions on Tensors, Variables and op
    outputs (pending ones too) give the values, and jax.jit takes them as arguments."""
    v = tf.Variable(jnp.arange(3.0))
    with tf.GradientTape() as tape:
        y = MLP(to_vars(params0(seed=5)), X) * 2.0
        z = tf.reduce_sum(v * v)
    want = mlp_apply(params0(seed=5), X) * 2.0
    for conv in (lambda t: t.numpy(), np.asarray, jnp.asarray):
        got = conv(y)
        assert isinstance(got, (np.ndarray, jax.Array))
        close(got, want, rtol=1e-5)
    close(jnp.sin(y), jnp.sin(want), rtol=1e-5)
    jitted = jax.jit(lambda t: t * 3.0)(y)   # a Tensor is a pytree: jit gives a Tensor back
    assert isinstance(jitted, tf.Tensor)
    close(jitted, want * 3.0, rtol=1e-5)
    close(jnp.asarray(v) + np.asarray(v), 2 * jnp.arange(3.0))
    close(tape.gradient(z, v), 2 * jnp.arange(3.0))


# --- training loops -----------------------------------------------------------------------------

def _pure_jax_training(tx, p, steps, data):
    """The oracle: jax.jit(value_and_grad) + optax, the loop a JAX user writes."""
    @jax.jit
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(mse)(p, x, y)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    s, losses = tx.init(p), []
    for i in range(steps):
        p, s, loss = step(p, s, *data(i))
        losses.append(loss)
    return p, np.array(losses)


def _data(i):
    return X[(i % 2) * 4:(i % 2) * 4 + 4], Y[(i % 2) * 4:(i % 2) * 4 + 4]


def _tapejax_training(tx, p, steps, compiled):
    vs = to_vars(p)
    flat = jax.tree_util.tree_leaves(vs)
    opt = tf.optimizers.from_optax(tx)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(MLP(vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, flat), flat))
        return loss
    if compiled:
        step = tf.function(step)
    losses = [np.asarray(step(*data)) for data in map(_data, range(steps))]
    return vs, np.array(losses), opt


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
def test_mlp_trained_with_optax_adam_step_by_step(compiled):
    """from_optax(optax.adam) eagerly and inside tapejax.function vs the pure jax.jit + optax loop."""
    p = params0(seed=6)
    vs, losses, opt = _tapejax_training(optax.adam(0.05), p, 6, compiled)
    want_p, want_losses = _pure_jax_training(optax.adam(0.05), p, 6, _data)
    close(losses, want_losses, rtol=1e-5)
    close(vs, want_p, rtol=1e-4, atol=1e-5)
    assert int(opt.iterations.numpy()) == 6


def test_mlp_trained_with_clipping_and_adamw_schedule_in_function():
    tx = lambda: optax.chain(optax.clip_by_global_norm(0.5),  # noqa: E731
                             optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 8), weight_decay=1e-2))
    p = params0(seed=7)
    vs, losses, _ = _tapejax_training(tx(), p, 6, True)
    want_p, want_losses = _pure_jax_training(tx(), p, 6, _data)
    close(losses, want_losses, rtol=1e-5)
    close(vs, want_p, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, make", [
    ("MultiSteps", lambda: optax.MultiSteps(optax.adam(0.05), every_k_schedule=2)),
    ("masked", lambda: optax.masked(optax.adam(0.05), {"l0": {"w": True, "b": False},
                                                       "l1": {"w": False, "b": True}})),
    ("inject_hyperparams", lambda: optax.inject_hyperparams(optax.sgd)(
        learning_rate=optax.linear_schedule(0.1, 0.01, 4), momentum=0.9)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_optax_wrappers_through_the_bridge(name, make):
    """optax's wrappers whose state is not shaped like the parameters: the bridge gives the pure
    optax trajectory.  The bridge hands optax the parameters as the list of apply_gradients'
    variables, so a mask written for the user's dict is a clear error naming that list, and the
    same mask as a list (the dict's leaves in order) gives the pure optax result."""
    p = params0(seed=8)
    vs = to_vars(p)
    tx = make()
    opt = tf.optimizers.from_optax(tx)
    if name == "masked":
        with pytest.raises(ValueError, match="as a list in the order of"):
            opt.apply_gradients(zip(jax.tree_util.tree_leaves(vs), jax.tree_util.tree_leaves(vs)))
        opt = tf.optimizers.from_optax(optax.masked(optax.adam(0.05), [False, True, True, False]))
    flat_v = jax.tree_util.tree_leaves(vs)
    for i in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(MLP(vs, _data(i)[0]) - _data(i)[1]))
        opt.apply_gradients(zip(tape.gradient(loss, flat_v), flat_v))
    want_p, _ = _pure_jax_training(make(), p, 5, _data)
    close(vs, want_p, rtol=1e-4, atol=1e-5)


def test_inject_hyperparams_rate_changed_mid_training():
    """The learning rate of an ``optax.inject_hyperparams`` transformation changed between steps,
    as a JAX user changes ``state.hyperparams``: through ``opt.optax_state(variables)``."""
    make = lambda: optax.inject_hyperparams(optax.adam)(learning_rate=0.05)  # noqa: E731
    p = params0(seed=22)
    vs = to_vars(p)
    flat = jax.tree_util.tree_leaves(vs)
    opt, tx = tf.optimizers.from_optax(make()), make()
    state, ref_p = tx.init(p), p
    for i in range(6):
        if i == 3:
            opt.optax_state(flat).hyperparams["learning_rate"].assign(0.005)
            state.hyperparams["learning_rate"] = jnp.asarray(0.005)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(MLP(vs, _data(i)[0]) - _data(i)[1]))
        opt.apply_gradients(zip(tape.gradient(loss, flat), flat))
        upd, state = tx.update(jax.grad(mse)(ref_p, *_data(i)), state, ref_p)
        ref_p = optax.apply_updates(ref_p, upd)
    close(vs, ref_p, rtol=1e-4, atol=1e-5)


_SINW = tf.op(lambda p: jnp.sum(jnp.sin(p["w"]) * p["w"]))


def _sinw(w):
    return jnp.sum(jnp.sin(w) * w)


def test_variable_updated_between_reads_and_read_through_protocols_mid_training():
    """A Variable read by an op, assigned, read again on the same tape: both reads count (TF's rule;
    pure JAX: f(w) + f(w + 1)).  Then each step of an optax loop the Variable is read through
    ``jnp.asarray`` / ``np.asarray`` / ``tree_map(np.asarray)``: the updated (possibly predicted)
    value every time.  ``jnp.sin(variable)`` is JAX's ValueError (a Variable is a pytree leaf, not
    an array: JAX no longer calls ``__jax_array__`` there); ``jnp.sin(jnp.asarray(v))`` works."""
    v = tf.Variable([0.5, 1.0])
    with tf.GradientTape() as tape:
        y1 = _SINW({"w": v})
        v.assign_add([1.0, 1.0])
        y = y1 + _SINW({"w": v})
    close(tape.gradient(y, v), jax.grad(_sinw)(jnp.array([0.5, 1.0])) + jax.grad(_sinw)(jnp.array([1.5, 2.0])),
          rtol=1e-6)
    w = tf.Variable([1.0, 2.0])
    opt, tx = tf.optimizers.from_optax(optax.adam(0.1)), optax.adam(0.1)
    p = jnp.array([1.0, 2.0])
    state = tx.init(p)
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = _SINW({"w": w})
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        upd, state = tx.update(jax.grad(_sinw)(p), state, p)
        p = optax.apply_updates(p, upd)
        close([jnp.asarray(w), np.asarray(w), jax.tree_util.tree_map(np.asarray, {"w": w})["w"]], [p, p, p], rtol=1e-5)
    close(jnp.sin(jnp.asarray(w)), jnp.sin(p), rtol=1e-5)
    with pytest.raises(ValueError, match="__jax_array__"):
        jnp.sin(w)


class _Dense:
    """A layer as a JAX user writes one around the tape: Variables as attributes, the math in JAX."""

    def __init__(self, w):
        self.w = tf.Variable(w)
        self.closed = tf.op(lambda x: jnp.tanh(x @ jnp.asarray(self.w)))   # reads self.w: not allowed
        self.apply = tf.op(lambda w, x: jnp.tanh(x @ w))

    def __call__(self, x):
        return self.apply(self.w, x)


def test_layer_closing_over_its_variable_vs_passing_it():
    """An op whose function closes over a Variable is a clear error (a jitted op would keep the
    value of its first call); the same layer passing the Variable follows its updates and its
    gradient is JAX's."""
    w0 = RNG.normal(size=(3, 2)).astype(np.float32)
    layer = _Dense(w0)
    with pytest.raises(ValueError, match="not one of its arguments"):
        layer.closed(X)
    ref = lambda w: jnp.sum(jnp.tanh(X @ w) ** 2)  # noqa: E731
    w = jnp.asarray(w0)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(X) ** 2)
        close(loss, ref(w), rtol=1e-5)
        layer.w.assign_sub(0.1 * tape.gradient(loss, layer.w))
        w = w - 0.1 * jax.grad(ref)(w)
    close(layer.w, w, rtol=1e-5, atol=1e-6)


def _as_arrays(tree):
    """Tensors and Variables in ``tree`` as jax arrays (a Tensor is a JAX pytree node: a plain
    ``tree_map(jnp.asarray, tree)`` maps its array and gives a Tensor back)."""
    return jax.tree_util.tree_map(jnp.asarray, tree, is_leaf=lambda x: isinstance(x, (tf.Tensor, tf.Variable)))


def test_tape_gradients_into_pure_optax():
    """The tape's gradients fed to optax directly (no bridge): converted with tree_map(jnp.asarray,
    is_leaf=Tensor), the loop is pure JAX's.  Given as Tensors, optax's tree_map meets a Tensor node
    where its state has an array: JAX's pytree structure ValueError (not a wrong number)."""
    p = params0(seed=24)
    vs = to_vars(p)
    tx = optax.adam(0.05)
    state, ref_state, ref_p = tx.init(_as_arrays(vs)), tx.init(p), p
    for i in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(MLP(vs, _data(i)[0]) - _data(i)[1]))
        grads = tape.gradient(loss, vs)
        if i == 0:
            assert isinstance(jax.tree_util.tree_map(jnp.asarray, grads)["l0"]["w"], tf.Tensor)
            with pytest.raises(ValueError, match="pytree structure"):
                tx.update(grads, state, _as_arrays(vs))
        upd, state = tx.update(_as_arrays(grads), state, _as_arrays(vs))
        jax.tree_util.tree_map(lambda v, u: v.assign_add(u), vs, upd)
        ref_upd, ref_state = tx.update(jax.grad(mse)(ref_p, *_data(i)), ref_state, ref_p)
        ref_p = optax.apply_updates(ref_p, ref_upd)
    close(vs, ref_p, rtol=1e-5, atol=1e-6)


def test_pytorch_style_sgd_loop_with_tree_map_updates():
    """``loss.backward(); p -= lr * p.grad`` written with a tape per step and jax.tree_util.tree_map;
    the jax arrays the Variables were made from are the user's still (never donated or changed)."""
    p = jax.tree_util.tree_map(jnp.asarray, params0(seed=9))
    vs = to_vars(p)
    ref_p = p
    for i in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(MLP(vs, X) - Y))
        grads = tape.gradient(loss, vs)
        jax.tree_util.tree_map(lambda v, g: v.assign_sub(0.1 * g), vs, grads,
                               is_leaf=lambda x: isinstance(x, (tf.Tensor, tf.Variable)))
        ref_loss, ref_g = jax.value_and_grad(mse)(ref_p, X, Y)
        ref_p = jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, ref_p, ref_g)
        close(loss, ref_loss, rtol=1e-5)
    close(vs, ref_p, rtol=1e-5, atol=1e-6)
    assert not any(a.is_deleted() for a in jax.tree_util.tree_leaves(p))
    close(p, params0(seed=9))


# --- higher order -------------------------------------------------------------------------------

W3 = RNG.normal(size=(3, 3)).astype(np.float32)


def _energy(x):
    return jnp.sum(jnp.tanh(W3 @ x) ** 2) / 2 + jnp.sum(x ** 4) / 4


ENERGY = tf.op(_energy)
X3 = np.array([0.3, -0.5, 0.8], np.float32)


def test_hessian_vector_product_by_nested_tapes():
    v0 = np.array([1.0, 0.5, -2.0], np.float32)
    x = tf.Variable(X3)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            e = ENERGY(x)
        g = inner.gradient(e, x)
        gv = tf.reduce_sum(g * v0)
    hvp = outer.gradient(gv, x)
    want = jax.jvp(jax.grad(_energy), (X3,), (v0,))[1]
    close(hvp, want, rtol=1e-5, atol=1e-5)
    # forward over backward, and backward over forward
    with tf.autodiff.ForwardAccumulator(x, tf.constant(v0)) as acc:
        with tf.GradientTape() as tape:
            e = ENERGY(x)
        g = tape.gradient(e, x)
    close(acc.jvp(g), want, rtol=1e-5, atol=1e-5)
    with tf.GradientTape() as tape:
        with tf.autodiff.ForwardAccumulator(x, tf.constant(v0)) as acc:
            e = ENERGY(x)
        d = acc.jvp(e)
    close(tape.gradient(d, x), want, rtol=1e-5, atol=1e-5)


def test_full_hessian_jacobian_of_gradient():
    x = tf.Variable(X3)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            e = ENERGY(x)
        g = inner.gradient(e, x)
    close(outer.jacobian(g, x), jax.hessian(_energy)(X3), rtol=1e-5, atol=1e-5)


def test_jacobian_and_batch_jacobian_vs_jacrev():
    p = params0(sizes=(3, 4, 2), seed=10)
    vs = to_vars(p)
    xt = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(xt)
        y = MLP(vs, xt)
    close(tape.jacobian(y, vs["l0"]["w"]), jax.jacrev(lambda w: mlp_apply({**p, "l0": {**p["l0"], "w": w}}, X))(
        p["l0"]["w"]), rtol=1e-5, atol=1e-6)
    per_row = jax.vmap(jax.jacrev(lambda x: mlp_apply(p, x[None])[0]))
    close(tape.batch_jacobian(y, xt), per_row(X), rtol=1e-5, atol=1e-6)
    close(tape.jacobian(y, xt), jax.jacrev(lambda x: mlp_apply(p, x))(X), rtol=1e-5, atol=1e-6)


def test_forward_accumulator_vs_jvp():
    p = params0(seed=11)
    vs = to_vars(p)
    tangents = jax.tree_util.tree_map(lambda a: np.full_like(a, 0.1), p)
    flat_v = jax.tree_util.tree_leaves(vs)
    with tf.autodiff.ForwardAccumulator(flat_v, jax.tree_util.tree_leaves(tangents)) as acc:
        y = MLP(vs, X)
    want_y, want_t = jax.jvp(lambda p: mlp_apply(p, X), (p,), (tangents,))
    close(y, want_y, rtol=1e-5)
    close(acc.jvp(y), want_t, rtol=1e-5, atol=1e-6)


def test_third_derivative():
    f = tf.op(lambda x: jnp.sin(x) * jnp.exp(x / 2))
    x0 = np.float32(0.7)
    x = tf.Variable(x0)
    with tf.GradientTape() as t3:
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                y = f(x)
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    g = f.__wrapped__
    close([d1, d2, d3], [jax.grad(g)(x0), jax.grad(jax.grad(g))(x0), jax.grad(jax.grad(jax.grad(g)))(x0)],
          rtol=1e-5, atol=1e-6)


# --- randomness ------------------------------------------------------------------------------------

@tf.op
def _dropout(key, x, rate):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


@pytest.mark.parametrize("make_key", [jax.random.PRNGKey, jax.random.key], ids=["raw_key", "typed_key"])
def test_dropout_from_a_jax_random_key(make_key):
    """A key (raw uint32 array or typed key array) is an array leaf of the op: split per step, the
    masks and gradients are pure JAX's; the key itself has no gradient."""
    key = make_key(0)
    p = params0(seed=12)
    vs = to_vars(p)
    for _ in range(2):
        key, sub = jax.random.split(key)
        with tf.GradientTape() as tape:
            h = _dropout(sub, MLP(vs, X), 0.5)
            loss = tf.reduce_sum(h * h)
        ref = lambda p: jnp.sum(_dropout.__wrapped__(sub, mlp_apply(p, X), 0.5) ** 2)  # noqa: E731,B023
        close(loss, ref(p), rtol=1e-5)
        close(tape.gradient(loss, vs), jax.grad(ref)(p), rtol=1e-5, atol=1e-6)


def test_compiled_training_step_with_dropout_key_argument():
    """A tapejax.function step taking a fresh typed key each step (dropout inside), with
    from_optax(adamw), against the jax.jit(value_and_grad) + optax step given the same keys."""
    p = params0(seed=23)
    vs = to_vars(p)
    flat = jax.tree_util.tree_leaves(vs)
    opt, tx = tf.optimizers.from_optax(optax.adamw(0.02)), optax.adamw(0.02)

    @tf.function
    def step(key, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(_dropout(key, MLP(vs, x), 0.3) - y))
        opt.apply_gradients(zip(tape.gradient(loss, flat), flat))
        return loss

    @jax.jit
    def ref_step(p, s, key, x, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((_dropout.__wrapped__(key, mlp_apply(p, x), 0.3) - y) ** 2))(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    key, state, traces = jax.random.key(7), tx.init(p), []
    for i in range(4):
        key, sub = jax.random.split(key)
        loss = step(sub, *_data(i))
        p, state, want = ref_step(p, state, sub, *_data(i))
        close(loss, want, rtol=1e-5)
        traces.append(step.experimental_get_tracing_count())
    close(vs, p, rtol=1e-4, atol=1e-5)
    assert traces == [traces[0]] * 4   # (the first call creates the optimizer's state: 2 traces, as TF)


# --- PyTorch style ----------------------------------------------------------------------------------

def test_persistent_tape_stop_gradient_and_stop_recording():
    """Several losses from one persistent tape; stop_gradient inside and outside the op; a value
    computed under stop_recording is a constant; unconnected sources are None (zeros in JAX)."""
    p = params0(seed=13)
    vs = to_vars(p)
    scale = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        out = MLP(vs, X)
        l1 = tf.reduce_mean(tf.square(out - Y))
        l2 = tf.reduce_sum(tf.stop_gradient(out) * scale)
        with tape.stop_recording():
            l3_const = tf.reduce_sum(out) * scale
        l3 = l3_const * tf.reduce_sum(out)
    want1 = jax.grad(mse)(p, X, Y)
    close(tape.gradient(l1, vs), want1, rtol=1e-5)
    close(tape.gradient(l1, scale), None)               # pure JAX: 0.0
    close(tape.gradient(l2, [vs["l0"]["w"], scale]),
          [None, jnp.sum(mlp_apply(p, X))], rtol=1e-5)   # pure JAX: zeros for w (stop_gradient)
    c = jax.lax.stop_gradient(jnp.sum(mlp_apply(p, X)) * 2.0)
    close(tape.gradient(l3, vs), jax.grad(lambda p: c * jnp.sum(mlp_apply(p, X)))(p), rtol=1e-5)
    assert tape.gradient(l3, scale) is None
    assert "inside tape.stop_recording()" in tape.explain(l3_const, scale)
    assert "cut at op StopGradient" in tape.explain(l2, vs["l0"]["w"])


def test_custom_gradient_around_jax_code_in_eager_mode():
    """tapejax.custom_gradient wrapping a tapejax.op: the user's gradient replaces JAX's, as
    jax.custom_vjp does in the oracle."""
    inner = tf.op(lambda x: jnp.sum(jnp.sin(x) ** 2))

    @tf.custom_gradient
    def noisy_free(x):
        y = inner(x)
        def grad(dy):
            return dy * tf.clip_by_value(tnp.sin(2.0 * x), -0.5, 0.5)
        return y, grad

    @jax.custom_vjp
    def ref(x):
        return jnp.sum(jnp.sin(x) ** 2)
    ref.defvjp(lambda x: (ref(x), x), lambda x, dy: (dy * jnp.clip(jnp.sin(2.0 * x), -0.5, 0.5),))
    x0 = np.array([0.2, 0.9, 1.5], np.float32)
    x = tf.Variable(x0)
    with tf.GradientTape() as tape:
        y = noisy_free(x) * 3.0
    close(y, ref(x0) * 3.0, rtol=1e-6)
    close(tape.gradient(y, x), jax.grad(lambda x: ref(x) * 3.0)(x0), rtol=1e-5)

    # the gradient function written with jax.vjp of the user's function, on the raw arrays
    fn = lambda x: jnp.sum(jnp.sin(x) ** 2)  # noqa: E731

    @tf.custom_gradient
    def halved(x):
        y, vjp = jax.vjp(fn, jnp.asarray(x))
        return y, lambda dy: vjp(jnp.asarray(dy))[0] * 0.5
    with tf.GradientTape() as tape:
        y = halved(x) * 2.0
    close(y, fn(x0) * 2.0, rtol=1e-6)
    close(tape.gradient(y, x), jax.grad(fn)(x0), rtol=1e-5)


def test_explain_names_why_a_gradient_is_none():
    """tape.explain answers for the usual JAX-user mistakes: a jax array not converted and watched,
    an integer output, a Variable never read, a value from before the tape, a Tensor mapped by
    jax.tree_util.tree_map (which maps its raw array: the result is a new Tensor)."""
    p = params0(seed=14)
    vs = to_vars(p)
    other = tf.Variable(1.0)
    xt = tf.constant(X)
    before = tf.reduce_sum(vs["l0"]["w"])
    with tf.GradientTape(persistent=True) as tape:
        y = MLP(vs, X)
        idx = _stats(tf.reshape(y, [-1]))["argmax"]
        loss = tf.reduce_sum(y) + before
        mapped = jax.tree_util.tree_map(jnp.tanh, {"y": y})["y"]   # maps y's raw array: a new Tensor
    assert tape.gradient(loss, xt) is None
    assert "never watched" in tape.explain(loss, xt) and "tape.watch" in tape.explain(loss, xt)
    assert tape.gradient(idx, vs["l0"]["w"]) is None
    why_int = tape.explain(idx, vs["l0"]["w"])
    assert f"cut at op {_stats.primitive.name}" in why_int and "returns int32" in why_int, why_int
    assert "never read" in tape.explain(loss, other)
    assert tape.explain(loss, vs["l0"]["w"]).startswith("Connected")
    assert "computed before the tape started recording" in tape.explain(before, vs["l0"]["w"])
    assert tape.gradient(mapped, vs["l0"]["w"]) is None   # pure JAX would differentiate the tanh
    assert "jax.tree_util.tree_map" in tape.explain(mapped, vs["l0"]["w"])


# --- devices ------------------------------------------------------------------------------------------

def test_single_cpu_device_placement():
    """On this machine: a device_put array and a committed Variable go through an op; the result
    lives on the one device and the gradient matches."""
    (dev,) = jax.devices()
    xd = jax.device_put(X, dev)
    p = params0(seed=15)
    vs = jax.tree_util.tree_map(lambda a: tf.Variable(jax.device_put(a, dev)), p)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(MLP(vs, xd) - Y))
    assert jnp.asarray(loss).devices() == {dev}
    close(tape.gradient(loss, vs), jax.grad(mse)(p, X, Y), rtol=1e-5)


# --- more of what JAX users write -------------------------------------------------------------------

_SAMPLE = tf.op(lambda key, x: (jax.random.split(key)[0], x * jax.random.normal(jax.random.split(key)[1], x.shape)))


def test_key_threaded_through_ops_and_a_compiled_step():
    """``key, y = f(key, x)``: a typed key out of an op comes back as a JAX key array, goes on to the
    next op and into a tapejax.function, which may return it too (``key, h = step(key, h)``), and
    everything matches the pure JAX chain."""
    x0 = np.array([1.0, -2.0, 0.5], np.float32)
    x = tf.Variable(x0)
    step = tf.function(lambda key, h: _SAMPLE(key, h)[1] * 2.0)
    with tf.GradientTape() as tape:
        k, y = _SAMPLE(jax.random.key(3), x)
        k, y = _SAMPLE(k, y)
        z = step(k, y)
        loss = tf.reduce_sum(z)

    def ref(x):
        k, y = _SAMPLE.__wrapped__(jax.random.key(3), x)
        k, y = _SAMPLE.__wrapped__(k, y)
        return jnp.sum(_SAMPLE.__wrapped__(k, y)[1] * 2.0), k
    (want, want_k), g = jax.value_and_grad(ref, has_aux=True)(x0)
    assert jnp.issubdtype(k.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(k), jax.random.key_data(want_k))
    close(loss, want, rtol=1e-5)
    close(tape.gradient(loss, x), g, rtol=1e-5)
    # a compiled step that returns the key: threaded as through jax.jit
    jit_step, ref_step = tf.function(lambda key, h: _SAMPLE(key, h)), jax.jit(_SAMPLE.__wrapped__)
    key, ref_key, h, ref_h = jax.random.key(4), jax.random.key(4), tf.constant(x0), x0
    for _ in range(3):
        key, h = jit_step(key, h)
        ref_key, ref_h = ref_step(ref_key, ref_h)
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(ref_key))
    close(h, ref_h, rtol=1e-5)


@tf.op
def _masked_xent(params, x, labels, mask):
    logits = mlp_apply(params, x)
    per = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return jnp.sum(jnp.where(mask, per, 0.0)) / jnp.maximum(jnp.sum(mask), 1)


def test_cross_entropy_with_integer_labels_and_bool_mask():
    """Integer labels and a bool mask as op inputs next to the params; watched, they get None
    (TF's rule for integer and bool sources; jax.grad refuses them)."""
    p = params0(seed=16)
    vs = to_vars(p)
    labels = np.array([0, 1, 1, 0, 1, 0, 0, 1], np.int32)
    mask = np.array([True, True, False, True, True, True, False, True])
    lt, mt = tf.constant(labels), tf.constant(mask)
    with tf.GradientTape() as tape:
        tape.watch([lt, mt])
        loss = _masked_xent(vs, X, lt, mt)
    gv, gl, gm = tape.gradient(loss, [vs, lt, mt])
    want, want_g = jax.value_and_grad(_masked_xent.__wrapped__)(p, X, labels, mask)
    close(loss, want, rtol=1e-5)
    close(gv, want_g, rtol=1e-5, atol=1e-6)
    assert gl is None and gm is None


def test_vjp_with_output_gradients_and_unconnected_zero():
    """``jax.vjp`` with a cotangent pytree is ``tape.gradient(outputs, sources, output_gradients)``
    (one cotangent per flattened output, in tf.nest order); ``unconnected_gradients='zero'`` gives
    pure JAX's zeros for a Variable the outputs do not use."""
    x0, y0 = np.array([0.1, 0.2], np.float32), np.array([0.3, 0.4], np.float32)
    x, y, unused = tf.Variable(x0), tf.Variable(y0), tf.Variable([1.0, 1.0, 1.0])
    with tf.GradientTape() as tape:
        out = _two_heads(x, y)
    ct = {"a": np.array([1.0, -1.0], np.float32),
          "b": (np.array([2.0, 0.5], np.float32), [np.array([0.1, 3.0], np.float32), np.array([1.0, 1.0], np.float32)])}
    got = tape.gradient(out, [x, y, unused], output_gradients=tf.nest.flatten(ct),
                        unconnected_gradients="zero")
    _, vjp = jax.vjp(_two_heads.__wrapped__, x0, y0)
    close(got, list(vjp(ct)) + [np.zeros(3, np.float32)], rtol=1e-6)


def test_complex_output_of_a_real_input():
    """An FFT inside the op: complex outputs, a real loss, real Variables: JAX's gradient."""
    f = tf.op(lambda x: jnp.fft.rfft(x * jnp.hanning(x.shape[0])))
    x0 = RNG.normal(size=16).astype(np.float32)
    x = tf.Variable(x0)
    with tf.GradientTape() as tape:
        spec = f(x)
        power = tf.reduce_sum(tf.abs(spec) ** 2)
    assert spec.dtype == tf.complex64
    ref = lambda x: jnp.sum(jnp.abs(f.__wrapped__(x)) ** 2)  # noqa: E731
    close(power, ref(x0), rtol=1e-5)
    close(tape.gradient(power, x), jax.grad(ref)(x0), rtol=1e-4, atol=1e-5)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def scale_grad(x, s):
    return x


scale_grad.defvjp(lambda x, s: (x, None), lambda s, _, g: (g * s,))


def test_custom_rules_with_nondiff_argnums_and_in_forward_mode():
    """A custom_vjp with a static ``nondiff_argnums`` argument (passed to the op as a Python number),
    and a ForwardAccumulator over a custom_jvp op: the user's jvp rule, as jax.jvp uses it."""
    f = tf.op(lambda x, s: jnp.sum(scale_grad(jnp.sin(x), s) ** 2))
    x0 = np.array([0.3, 1.2], np.float32)
    x = tf.Variable(x0)
    with tf.GradientTape() as tape:
        y = f(x, 10.0)
    close(tape.gradient(y, x), jax.grad(f.__wrapped__)(x0, 10.0), rtol=1e-5)
    z0 = np.array([100.0, -3.0, 0.5], np.float32)
    z = tf.Variable(z0)
    t0 = np.array([1.0, 2.0, -1.0], np.float32)
    with tf.autodiff.ForwardAccumulator(z, tf.constant(t0)) as acc:
        s = _SOFTPLUS(z)
    close(acc.jvp(s), jax.jvp(log1pexp, (z0,), (t0,))[1], rtol=1e-6)


@functools.partial(tf.op, jit=False)
def _loss_with_aux(p, x, y):
    pred = mlp_apply(p, x)
    loss = jnp.mean((pred - y) ** 2)
    return loss, {"n": x.shape[0], "scale": 0.5, "err": jnp.max(jnp.abs(pred - y))}


def test_aux_outputs_with_python_numbers():
    """The ``has_aux`` pattern: (loss, metrics) where metrics hold Python numbers, run unjitted
    (``jit=False``): every output is a Tensor, the gradient is value_and_grad(has_aux=True)'s."""
    p = params0(seed=17)
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        loss, aux = _loss_with_aux(vs, X, Y)
    (want, want_aux), want_g = jax.value_and_grad(_loss_with_aux.__wrapped__, has_aux=True)(p, X, Y)
    assert aux["n"].dtype == tf.int32 and aux["scale"].dtype == tf.float32
    close([loss, aux], [want, want_aux], rtol=1e-5)
    close(tape.gradient(loss, vs), want_g, rtol=1e-5)


def test_float64_numpy_input_is_a_clear_error():
    """A float64 NumPy array (``np.random``'s default) into an op without x64 mode: pure JAX narrows
    it to float32 silently, tapejax refuses with a TypeError that says what to do (DESIGN:
    tapejax never narrows a float silently); cast, and the result is pure JAX's."""
    x64 = np.random.default_rng(0).normal(size=(8, 3))
    p = params0(seed=18)
    with pytest.raises(TypeError, match="float64.*64-bit mode"):
        MLP(to_vars(p), x64)
    close(MLP(to_vars(p), x64.astype(np.float32)), mlp_apply(p, x64), rtol=1e-5)


def test_jax_transformations_over_tapejax_code():
    """The other direction: jax.jit(jax.grad(f)) over a function written with tapejax ops,
    tapejax.numpy and a tapejax.op, as pure JAX's (Tensors unwrap through ``jnp.asarray``)."""
    p = params0(seed=19)

    def with_tapejax(x):
        h = MLP(p, x)
        return jnp.asarray(tf.reduce_mean(tf.square(h - Y)) + tnp.sum(tnp.sin(x)) * 0.1)

    def pure(x):
        return jnp.mean((mlp_apply(p, x) - Y) ** 2) + jnp.sum(jnp.sin(x)) * 0.1
    close(jax.jit(jax.grad(with_tapejax))(X), jax.grad(pure)(X), rtol=1e-5, atol=1e-6)
    close(jax.vmap(jax.grad(with_tapejax))(np.stack([X, -X])), jax.vmap(jax.grad(pure))(np.stack([X, -X])),
          rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_over_microbatches():
    """PyTorch-style accumulation: per-microbatch tapes, gradients summed with tree_map, one
    optax step; the same as one jax.grad of the mean over the batch."""
    p = params0(seed=20)
    vs = to_vars(p)
    flat = jax.tree_util.tree_leaves(vs)
    opt = tf.optimizers.from_optax(optax.sgd(0.1, momentum=0.9))
    tx = optax.sgd(0.1, momentum=0.9)
    state, ref_p = tx.init(p), p
    for _ in range(2):
        acc = None
        for i in range(4):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(MLP(vs, X[2 * i:2 * i + 2]) - Y[2 * i:2 * i + 2])) / 4
            g = tape.gradient(loss, flat)
            acc = g if acc is None else [a + b for a, b in zip(acc, g)]
        opt.apply_gradients(zip(acc, flat))
        upd, state = tx.update(jax.grad(mse)(ref_p, X, Y), state, ref_p)
        ref_p = optax.apply_updates(ref_p, upd)
    close(vs, ref_p, rtol=1e-5, atol=1e-6)


def test_multi_transform_with_list_labels():
    """optax.multi_transform through the bridge: labels as the list of apply_gradients' variables
    (the bridge's parameter structure) give the dict-labelled pure optax result."""
    p = params0(seed=21)
    vs = to_vars(p)
    flat = jax.tree_util.tree_leaves(vs)
    labels = jax.tree_util.tree_map(lambda a: "bias" if a.ndim == 1 else "weight", p)
    make = lambda lab: optax.multi_transform({"bias": optax.sgd(0.5), "weight": optax.adam(0.05)}, lab)  # noqa: E731
    opt = tf.optimizers.from_optax(make(jax.tree_util.tree_leaves(labels)))
    for i in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(MLP(vs, _data(i)[0]) - _data(i)[1]))
        opt.apply_gradients(zip(tape.gradient(loss, flat), flat))
    want_p, _ = _pure_jax_training(make(labels), p, 3, _data)
    close(vs, want_p, rtol=1e-5, atol=1e-6)
