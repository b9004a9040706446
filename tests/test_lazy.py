"""Deferred execution (``tapejax._lazy``): recorded ops run inside the compiled gradient.

The oracle for every value is the same program with deferral off (every op
dispatched when called) and, where it is short, the plain ``jax.numpy``
computation.  Predicted updates (``_speculate``) are off here, so that a
training loop's updates stay pending and the next gradient computes them; the
value scenarios run with them on too (``predict``), and ``test_speculate.py``
tests them.
"""
import copy
import pickle
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.autodiff import replay as _replay
from tapejax.core.tensor import Pending
from tapejax.runtime import speculate as _speculate, thunks as _thunks

RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 3)).astype(np.float32)
W = RNG.normal(size=(3, 2)).astype(np.float32)
B = RNG.normal(size=(2,)).astype(np.float32)


@pytest.fixture(autouse=True)
def no_predictions():
    prev = _speculate.set_speculative_updates(False)
    yield
    _speculate.set_speculative_updates(prev)


@pytest.fixture
def deferred():
    prev = tf.set_deferred_execution(True)
    yield
    tf.set_deferred_execution(prev)


def _step(x, w, b, out):
    """A small training step; ``out`` collects what the user reads."""
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.matmul(x, w) + b)
        loss = tf.reduce_mean(tf.square(h - 1.0))
    out["loss_type"] = type(loss)
    out["grads"] = tape.gradient(loss, [w, b])
    out["loss"] = loss.numpy()
    w.assign_sub(0.1 * out["grads"][0])
    b.assign_sub(0.1 * out["grads"][1])
    return out


def _run_steps(mode, n=3):
    prev = tf.set_deferred_execution(mode)
    try:
        x, w, b = tf.constant(X), tf.Variable(W), tf.Variable(B)
        outs = [_step(x, w, b, {}) for _ in range(n)]
        return outs, w.numpy(), b.numpy()
    finally:
        tf.set_deferred_execution(prev)


@pytest.mark.parametrize("predict", [False, True])
def test_training_steps_match_eager_execution(predict):
    _speculate.set_speculative_updates(predict)
    (lazy, w1, b1), (eager, w0, b0) = _run_steps(True, n=4), _run_steps(False, n=4)
    assert lazy[0]["loss_type"] is Pending and eager[0]["loss_type"] is tf.Tensor
    for k, (a, e) in enumerate(zip(lazy, eager)):
        np.testing.assert_allclose(a["loss"], e["loss"], rtol=1e-6)
        for ga, ge in zip(a["grads"], e["grads"]):
            # gradients are handed out as Pending (so `lr * g` stays pending): computed, except
            # where the step's updates were predicted (from step 3), which computes them on read
            assert type(ga) is Pending and type(ge) is tf.Tensor
            assert (ga._thunk.value is None) == (predict and k >= 2)
            np.testing.assert_allclose(ga.numpy(), ge.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w1, w0, rtol=1e-6)
    np.testing.assert_allclose(b1, b0, rtol=1e-6)
    # the jnp oracle for the first loss
    h = np.maximum(X @ W + B, 0)
    np.testing.assert_allclose(lazy[0]["loss"], np.mean((h - 1.0) ** 2), rtol=1e-5)


def test_pending_knows_shape_and_dtype_without_computing(deferred):
    x = tf.Variable(X)
    with tf.GradientTape():
        y = tf.matmul(x, tf.constant(W)) + tf.constant(B)
        s = tf.reduce_sum(y, axis=1)
    assert type(y) is Pending and type(s) is Pending
    assert y.shape == (4, 2) and y.dtype == tf.float32 and y.ndim == 2
    assert s.shape == (4,) and s._thunk.value is None and y._thunk.value is None
    np.testing.assert_allclose(s.numpy(), (X @ W + B).sum(1), rtol=1e-5)
    assert s._thunk.value is not None and s._thunk.args is None


@pytest.mark.parametrize("read", [
    lambda t: t.numpy(), lambda t: float(tf.reduce_sum(t)), lambda t: np.asarray(t),
    lambda t: jnp.asarray(t), lambda t: repr(t), lambda t: jax.jit(lambda a: a * 1)(t),
    lambda t: pickle.loads(pickle.dumps(t)).numpy(), lambda t: copy.deepcopy(t).numpy(),
    lambda t: (t > 0).numpy(), lambda t: t[0].numpy(),
])
def test_every_read_computes_the_value(deferred, read):
    x = tf.Variable(X)
    with tf.GradientTape():
        y = tf.exp(x) * 2.0
        assert type(y) is Pending
        read(y)  # inside the tape too
        assert y._thunk.value is not None
        np.testing.assert_allclose(y.numpy(), np.exp(X) * 2.0, rtol=1e-6)


def test_gradient_fills_the_pending_target_in_one_compiled_call(deferred, fresh_cache):
    x, w, b = tf.constant(X), tf.Variable(W), tf.Variable(B)
    for i in range(20):
        out = _step(x, w, b, {})
        assert out["loss_type"] is Pending
    info = tf.cache_info()
    # compiled twice: step 1's gradient, then (step 3) the steady step, the previous updates
    # and the gradient as one program; never again
    assert info.misses == 1 and info.compiles == 2 and info.hits == 19
    # the fused entry (forward and gradient) is the only one
    assert [k[0] for k in _replay_keys()] == ["fused"]
    # its arguments are the values the ops read: x, the two Variable reads and the constant 1.0;
    # not the Variables' values a second time as sources (their reads carry the perturbation)
    (entry,) = _replay._CACHE._data.values()
    assert [kind for kind, _, _ in entry.plan] == ["node"] * 4


def test_a_source_used_directly_is_still_an_argument(deferred):
    """A watched tensor used by an op, and a Variable that is also the target: their own values
    stay arguments of the compiled call (only a Variable used solely through reads drops it)."""
    x, w = tf.constant(X), tf.Variable(W)
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.matmul(x, w) * 2.0)
        gx, gw = tape.gradient(y, [x, w])
        (gww,) = tape.gradient([y, w], [w])
        np.testing.assert_allclose(gx.numpy(), np.tile(W.sum(1) * 2.0, (4, 1)), rtol=1e-5)
        np.testing.assert_allclose(gw.numpy(), np.tile(X.sum(0)[:, None] * 2.0, (1, 2)), rtol=1e-5)
        np.testing.assert_allclose(gww.numpy(), gw.numpy() + 1.0, rtol=1e-5)


def _replay_keys():
    from tapejax.autodiff import replay as _replay
    return list(_replay._CACHE._data)


def test_target_read_before_the_gradient_uses_the_saved_values(deferred, fresh_cache):
    x, w = tf.constant(X), tf.Variable(W)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.tanh(tf.matmul(x, w)))
    v = y.numpy()                 # computes y (and what it needs) eagerly
    g = tape.gradient(y, w)       # the saved-values backward
    assert [k[0] for k in _replay_keys()] == ["backward"]
    _, pull = jax.vjp(lambda a: jnp.sum(jnp.tanh(X @ a)), W)
    np.testing.assert_allclose(g.numpy(), pull(jnp.float32(1))[0], rtol=1e-5)
    np.testing.assert_allclose(v, np.tanh(X @ W).sum(), rtol=1e-5)


def test_ops_no_tape_records_run_at_once(deferred):
    c = tf.constant(X)
    v = tf.Variable(W, trainable=False)
    with tf.GradientTape():
        a = tf.exp(c)                       # nothing watched
        b = tf.matmul(c, v)                 # a non-trainable Variable is not watched
        d = tf.cast(tf.constant(X) > 0, tf.float32)
    for t in (a, b, d):
        assert type(t) is tf.Tensor or t._thunk.value is not None


def test_a_variable_is_read_when_the_op_is_called(deferred):
    """The thunk holds the value read, as an eager op would have used it."""
    v = tf.Variable(W)
    with tf.GradientTape() as tape:
        y = v * 2.0
        v.assign(np.zeros_like(W))
        z = tf.reduce_sum(y)
    np.testing.assert_allclose(y.numpy(), W * 2.0)
    g = tape.gradient(z, v)
    np.testing.assert_allclose(g.numpy(), np.full_like(W, 2.0))


def test_errors_are_raised_when_the_op_is_called(deferred):
    x = tf.Variable(X)
    with tf.GradientTape() as tape:
        h = tf.exp(x)
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.matmul(h, tf.constant(X))       # (4,3) @ (4,3)
        with pytest.raises(tf.errors.InvalidArgumentError):
            h + tf.constant(W)                 # shapes do not broadcast
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.sqrt(tf.cast(h, tf.int32))      # TF's dtype list
    assert len(tape._nodes) == 2  # the read and exp


def test_long_pending_chain_is_computed_without_recursion(deferred):
    x = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = x
        for _ in range(3000):
            y = y * 1.0001
    assert type(y) is Pending
    np.testing.assert_allclose(y.numpy(), 1.0001 ** 3000, rtol=1e-3)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 1.0001 ** 3000, rtol=1e-3)


def test_persistent_tape_second_call_and_second_order(deferred):
    def run():
        x = tf.Variable(0.7)
        with tf.GradientTape() as outer:
            with tf.GradientTape(persistent=True) as inner:
                y = tf.sin(x) * x
            g1 = inner.gradient(y, x)
            g1b = inner.gradient(y, x)
        g2 = outer.gradient(g1, x)
        return y.numpy(), g1.numpy(), g1b.numpy(), g2.numpy()
    lazy = run()
    prev = tf.set_deferred_execution(False)
    try:
        eager = run()
    finally:
        tf.set_deferred_execution(prev)
    np.testing.assert_allclose(lazy, eager, rtol=1e-6)
    np.testing.assert_allclose(lazy[1], np.cos(0.7) * 0.7 + np.sin(0.7), rtol=1e-6)


def test_jacobian_and_intermediate_sources(deferred):
    x = tf.Variable(X)
    with tf.GradientTape(persistent=True) as tape:
        h = tf.tanh(x)
        y = tf.reduce_sum(h * h, axis=1)
    assert type(h) is Pending and h._thunk.value is None
    gh = tape.gradient(y, h)   # an intermediate source
    np.testing.assert_allclose(gh.numpy(), 2 * np.tanh(X), rtol=1e-5)
    j = tape.jacobian(y, x)
    want = jax.jacobian(lambda a: jnp.sum(jnp.tanh(a) ** 2, axis=1))(X)
    np.testing.assert_allclose(j.numpy(), want, rtol=1e-5, atol=1e-7)


def test_not_deferred_where_values_must_be_eager(deferred):
    x = tf.Variable(X)
    # under gradient_override_map
    with tf.GradientTape():
        with tf.gradient_override_map({"Exp": "Identity"}):
            assert type(tf.exp(x)) is tf.Tensor
    # with a forward accumulator on the stack
    with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)):
        with tf.GradientTape():
            assert type(tf.exp(x)) is tf.Tensor
    # an array committed to a device keeps its eager device checks
    c = tf.constant(jax.device_put(X, jax.devices()[0]))
    with tf.GradientTape() as tape:
        tape.watch(c)
        assert type(tf.exp(c)) is tf.Tensor
    # inside tapejax.function the values are traced
    seen = []

    @tf.function
    def f(a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            y = tf.exp(a)
            seen.append(type(y))
        return tape.gradient(y, a)
    np.testing.assert_allclose(f(tf.constant(X)).numpy(), np.exp(X), rtol=1e-6)
    assert seen and set(seen) == {tf.Tensor}
    # deferral off
    prev = tf.set_deferred_execution(False)
    try:
        with tf.GradientTape():
            assert type(tf.exp(x)) is tf.Tensor
    finally:
        tf.set_deferred_execution(prev)


def test_pending_used_outside_the_tape_and_in_other_threads(deferred):
    x = tf.Variable(X)
    with tf.GradientTape():
        y = tf.exp(x)
        z = y + 1.0
    w = tf.exp(z)     # no tape, on a pending value: stays pending; reading it computes z and y
    assert type(w) is Pending
    np.testing.assert_allclose(w.numpy(), np.exp(np.exp(X) + 1.0), rtol=1e-5)
    with tf.GradientTape():
        p = tf.sigmoid(x)
    got = []
    th = threading.Thread(target=lambda: got.append(p.numpy()))
    th.start()
    th.join()
    np.testing.assert_allclose(got[0], 1 / (1 + np.exp(-X)), rtol=1e-6)


# The two on/off settings share ``_state_mod.set_flag`` and ``_state_mod.env_flag``.
SETTINGS = [(tf.set_deferred_execution, tf.deferred_execution, "TAPEJAX_DEFERRED"),
            (tf.set_speculative_updates, tf.speculative_updates, "TAPEJAX_SPECULATE")]


@pytest.mark.parametrize("setter, getter, env", SETTINGS)
def test_settings_validate_and_return_the_previous_setting(setter, getter, env):
    prev = setter(True)
    try:
        assert setter(False) is True
        assert getter() is False
        with pytest.raises(TypeError, match="`enabled` must be a bool"):
            setter("yes")
        assert getter() is False
    finally:
        setter(prev)


@pytest.mark.parametrize("setter, getter, env", SETTINGS)
def test_environment_variables_turn_them_off(setter, getter, env):
    import os
    import subprocess
    import sys
    code = f"import tapejax as tf; print(tf.{getter.__name__}())"
    for val, want in (("0", "False"), ("1", "True"), ("off", "False")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, env: val}, timeout=120)
        assert out.stdout.strip() == want, out.stderr[-2000:]


def test_aval_cache_is_bounded_and_listed():
    stats = tf.cache_stats()
    assert "deferred_avals" in stats and stats["deferred_avals"].maxsize == _thunks._AVALS.maxsize


# -- gradients, untaped ops on pending values, and pending Variable updates ------------------

def _grads(deferral):
    prev = tf.set_deferred_execution(deferral)
    try:
        x, w, b = tf.constant(X), tf.Variable(W), tf.Variable(B)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b))
        return (w, b), tape.gradient(loss, [w, b])
    finally:
        tf.set_deferred_execution(prev)


def test_untaped_ops_on_a_gradient_stay_pending_and_compute_on_read(deferred):
    (w, b), (gw, gb) = _grads(True)
    _, (ew, eb) = _grads(False)
    assert type(ew) is tf.Tensor                  # deferral off: plain Tensors
    assert type(gw) is Pending and gw._thunk.value is not None
    s = tf.sqrt(tf.square(gw) * 2.0 + 1.0)       # untaped, on a pending value: stays pending
    assert type(s) is Pending and s._thunk.value is None
    assert s.shape == (3, 2) and s.dtype == tf.float32
    np.testing.assert_allclose(s.numpy(), np.sqrt(ew.numpy() ** 2 * 2.0 + 1.0), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):   # errors when the op is called
        gw + tf.constant(np.ones(4, np.float32))
    m = tf.reduce_sum(gw)                         # ops without the untaped rule compute their input
    np.testing.assert_allclose(m.numpy(), ew.numpy().sum(), rtol=1e-6)


@pytest.mark.parametrize("update", ["assign_sub", "assign_add"])
def test_pending_variable_updates_match_eager_updates(deferred, update):
    (w, b), (gw, gb) = _grads(True)
    (w0, b0), (ew, eb) = _grads(False)
    getattr(w, update)(0.1 * gw)
    getattr(b, update)(0.1 * gb)
    assert type(w._val) is _thunks.Thunk and type(b._val) is _thunks.Thunk   # pending updates
    assert w.shape == (3, 2) and w.dtype == tf.float32 and b.ndim == 1   # metadata: not computed
    assert type(w._val) is _thunks.Thunk
    getattr(w0, update)(0.1 * ew)
    getattr(b0, update)(0.1 * eb)
    np.testing.assert_allclose(w.numpy(), w0.numpy(), rtol=1e-6)
    assert type(b._val) is not _thunks.Thunk       # reading one computed every pending update
    np.testing.assert_allclose(b.numpy(), b0.numpy(), rtol=1e-6)


def test_shape_and_dtype_checks_do_not_compute_a_pending_value(deferred):
    """The argument checks of an optimizer update, a jacobian and an explanation read a pending
    value's shape and dtype, never its value (a computed value would split the step's program)."""
    (w, b), (gw, gb) = _grads(True)
    w.assign_sub(0.5 * gw)                        # pending update: w holds a thunk
    assert isinstance(w._val, _thunks.Thunk) and w._val.value is None
    opt = tf.keras.optimizers.SGD(0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        opt.apply_gradients([(gb, w)])            # the wrong gradient's shape: TF's error, first
    assert w._val.value is None                   # ... and the pending update is still pending
    x = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.tanh(x), axis=1)
    assert type(y) is Pending and y._thunk.value is None
    assert "never watched" not in tape.explain(y, x)
    assert y._thunk.value is None
    jac = tape.jacobian(y, x)
    want = jax.jacrev(lambda a: jnp.tanh(a).sum(1))(jnp.asarray(X))
    np.testing.assert_allclose(jac.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("op", [
    lambda h: tf.unstack(h, axis=1),
    lambda h: tf.split(h, [1, 1], axis=1),
    lambda h: list(tf.math.top_k(tf.transpose(h), k=2)),
    lambda h: list(tf.nn.moments(h, axes=[0])),
    lambda h: list(tf.nn.max_pool_with_argmax(tf.reshape(h, [1, 4, 2, 1]), 2, 2, "VALID")),
    lambda h: list(tf.image.image_gradients(tf.reshape(h, [1, 4, 2, 1]))),
], ids=["unstack", "split", "top_k", "moments", "max_pool_with_argmax", "image_gradients"])
def test_pure_ops_of_several_outputs_stay_pending(op):
    """A recorded op of several outputs computed by its jitted function alone stays pending with
    its inputs (computed inside the gradient's program), and gives the eager values and gradients."""
    def run(deferral):
        prev = tf.set_deferred_execution(deferral)
        try:
            w = tf.Variable(W)
            with tf.GradientTape() as tape:
                h = tf.tanh(tf.matmul(tf.constant(X), w))
                outs = op(h)
                pending = type(h) is Pending and h._thunk.value is None and all(
                    type(o) is Pending for o in outs)
                loss = tf.add_n([tf.reduce_sum(tf.square(tf.cast(o, tf.float32))) for o in outs])
            return pending, [o.numpy() for o in outs], tape.gradient(loss, w).numpy()
        finally:
            tf.set_deferred_execution(prev)
    pending, vals, grad = run(True)
    _, want_vals, want_grad = run(False)
    assert pending
    for v, e in zip(vals, want_vals):
        np.testing.assert_allclose(v, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


def test_pending_updates_keep_tf_errors_and_snapshot_semantics(deferred):
    (w, b), (gw, gb) = _grads(True)
    before = w.numpy()
    with pytest.raises(tf.errors.InvalidArgumentError, match="shapes must be equal"):
        w.assign_sub(0.1 * gb)                    # another shape: the eager path's error
    with pytest.raises(ValueError, match="dtype"):
        w.assign_sub(tf.cast(gw, tf.float16) * 2.0)
    np.testing.assert_array_equal(w.numpy(), before)
    d = 0.5 * gw
    w.assign_sub(d)                               # pending: old value and delta as they are now
    w.assign_sub(d)                               # a second update computes the first one first
    np.testing.assert_allclose(w.numpy(), before - 2 * 0.5 * gw.numpy(), rtol=1e-6)
    held = w.read_value()
    w.assign_add(d)
    np.testing.assert_allclose(held.numpy(), before - gw.numpy(), rtol=1e-6)   # a read is a snapshot
    np.testing.assert_allclose(w.numpy(), before - 0.5 * gw.numpy(), rtol=1e-6)


def test_repeated_step_computes_its_updates_inside_its_gradient(deferred, monkeypatch):
    """A training loop's updates (`v.assign_sub(lr * g)`) stay pending when the next step's tape
    reads the Variables: that step's gradient computes them in its own compiled program (one
    dispatch per step), from the second time the structure is seen; values equal the eager loop."""
    _run_steps(True, n=2)
    _thunks._FLUSH.clear()
    _thunks._SEEN.clear()
    calls = {"op_by_op": 0, "program": 0, "force_many": 0}
    real_eager, real_program, real_force = _thunks._run_op_by_op, _thunks._program, _thunks.force_many

    def count(name, real):
        def wrapped(*args):
            calls[name] += 1
            return real(*args)
        return wrapped

    monkeypatch.setattr(_thunks, "_run_op_by_op", count("op_by_op", real_eager))
    monkeypatch.setattr(_thunks, "_program", count("program", real_program))
    monkeypatch.setattr(_thunks, "force_many", count("force_many", real_force))
    x, w, b = tf.constant(X), tf.Variable(W), tf.Variable(B)
    lazy, per_step = [], []
    for _ in range(5):
        before = dict(calls)
        lazy.append(_step(x, w, b, {}))
        per_step.append({k: calls[k] - before[k] for k in calls})
        assert type(w._val) is _thunks.Thunk and w._val.value is None   # this step's update: pending
    w1, b1 = w.numpy(), b.numpy()
    (eager, w0, b0) = _run_steps(False, n=5)
    np.testing.assert_allclose(w1, w0, rtol=1e-5)
    np.testing.assert_allclose(b1, b0, rtol=1e-5)
    for a, e in zip(lazy, eager):
        np.testing.assert_allclose(a["loss"], e["loss"], rtol=1e-5)
    # step 1 has nothing pending; step 2 sees the structure first (its updates run op by op);
    # steps 3-5 compute the previous updates inside the gradient's program: nothing else runs
    assert per_step[0] == {"op_by_op": 0, "program": 0, "force_many": 0}
    assert per_step[1]["op_by_op"] == 1 and per_step[1]["program"] == 0
    assert per_step[2] == {"op_by_op": 0, "program": 1, "force_many": 0}
    assert per_step[3] == per_step[4] == {"op_by_op": 0, "program": 0, "force_many": 0}
    composite = [k for k in _thunks._FLUSH._data if isinstance(k[0], _replay.Backward)]
    assert len(composite) == 1
    entry, spec, slots = composite[0]
    assert len(spec) == 2                         # one node per update (`lr * g` fused into it)
    assert sorted(s for s in slots if s >= 0) == [0, 1]


def test_clear_cache_drops_the_programs_that_hold_a_gradient(deferred):
    """A program of pending updates and a gradient keys on the gradient's compiled entry:
    ``clear_cache`` drops it with the replays (nothing keeps the old entries alive)."""
    import gc
    import sys
    tf.clear_cache()
    _run_steps(True, n=4)
    (entry,) = [k[0] for k in _thunks._FLUSH._data if isinstance(k[0], _replay.Backward)]
    assert sys.getrefcount(entry) > 2
    tf.clear_cache()
    gc.collect()
    assert len(_thunks._FLUSH) == 0 and len(_thunks._SEEN) == 0
    assert sys.getrefcount(entry) == 2            # `entry` and getrefcount's argument: no cache


def _pending_update(w, x):
    """Leave an update of ``w`` pending (``w.assign_sub(0.1 * g)``, ``g`` a gradient)."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
    w.assign_sub(0.1 * tape.gradient(loss, w))


def _scenario(name, x, w, b):
    """A program reading Variables with pending updates under a tape; what it returns is
    compared between deferral on and off (None kept)."""
    out = []
    if name == "read_then_numpy":          # the value read is the one the gradient uses
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(w * w)
            out.append(w.numpy())
            w.assign_sub(tf.ones_like(w))
        out.append(tape.gradient(y, w))
    elif name == "read_then_update":       # a second update before the gradient
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.matmul(x, w)) + tf.reduce_sum(b * b)
            w.assign_sub(tf.ones_like(w))
            w.assign_add(0.5 * tf.ones_like(w))
        out.extend(tape.gradient(y, [w, b]))
        out.append(y)
    elif name == "persistent":
        with tf.GradientTape(persistent=True) as tape:
            y = tf.reduce_sum(tf.matmul(x, w) * b)
            z = tf.reduce_sum(w * w)
        out.extend(tape.gradient(y, [w, b]))
        out.append(tape.gradient(z, w))
        out.extend(tape.gradient([y, z], [w, b]))
    elif name == "second_order":
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                y = tf.reduce_sum(w * w * w) + tf.reduce_sum(b)
            g = inner.gradient(y, w)
            s = tf.reduce_sum(g * g)
        out.append(g)
        out.extend(outer.gradient(s, [w, b]))
    elif name == "not_watched":
        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
            tape.watch(b)
            y = tf.reduce_sum(tf.matmul(x, w)) * tf.reduce_sum(b)
        out.extend(tape.gradient(y, [w, b]))
        out.append(tape.gradient(y, w, unconnected_gradients="zero"))
    elif name == "unconnected":            # a read the gradient does not use
        with tf.GradientTape() as tape:
            u = w + 1.0
            y = tf.reduce_sum(b * b)
        out.extend(tape.gradient(y, [w, b]))
        out.append(u)
    elif name == "variable_not_read":      # the gradient does not read `w`: its update waits
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(b * b)
        out.append(tape.gradient(y, b))
    out.extend([w, b])
    return [None if v is None else np.array(v) for v in out]


@pytest.mark.parametrize("name", ["read_then_numpy", "read_then_update", "persistent",
                                  "second_order", "not_watched", "unconnected",
                                  "variable_not_read"])
@pytest.mark.parametrize("predict", [False, True])
def test_reads_of_pending_updates_under_a_tape_match_eager(name, predict):
    """A Variable whose update is pending, read by a recording tape: the read stays pending
    and the gradient computes it; every value equals deferral off (the oracle), on repeats too
    (where the structure repeats, compiled programs run instead of single ops).  With
    predictions on, the update is predicted from the third repeat on (the values must not
    change)."""
    _speculate.set_speculative_updates(predict)
    results = {}
    for mode in (False, True):
        prev = tf.set_deferred_execution(mode)
        try:
            x, w, b = tf.constant(X), tf.Variable(W), tf.Variable(B)
            runs = []
            for k in range(4):
                _pending_update(w, x)
                if mode:
                    pending = type(w._val) is _thunks.Thunk and w._val.value is None
                    assert pending != (predict and k >= 2)
                runs.append(_scenario(name, x, w, b))
            results[mode] = runs
        finally:
            tf.set_deferred_execution(prev)
    for lazy, eager in zip(results[True], results[False]):
        assert [v is None for v in lazy] == [v is None for v in eager]
        for a, e in zip(lazy, eager):
            if e is not None:
                np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_a_pending_read_is_a_snapshot(deferred):
    """The value a tape read is the Variable's value at the read, also when the read's update
    is still pending and the Variable changes before the gradient (TF reads are snapshots)."""
    x, w = tf.constant(X), tf.Variable(W)
    _pending_update(w, x)
    with tf.GradientTape() as tape:
        r = w.read_value()
        y = tf.reduce_sum(r * r)
    assert type(r) is Pending and r._thunk is w._val and r._thunk.value is None
    w.assign(tf.zeros_like(w))                     # replaces the pending update
    g = tape.gradient(y, w)
    np.testing.assert_allclose(g.numpy(), 2 * r.numpy(), rtol=1e-6)
    assert np.abs(r.numpy()).sum() > 0
    np.testing.assert_array_equal(w.numpy(), np.zeros_like(W))


def test_a_walk_racing_another_thread_needs_no_retry(deferred):
    """A node another thread computes while this one walks the graph: its ``args`` were read
    once, so the walk goes on with them (the node is computed here once more, from the inputs
    it had: the first value stays); a node found computed (``args`` None) is an input."""
    a = jnp.arange(3.0, dtype=jnp.float32)
    inner = _thunks.Thunk(jnp.sin, (a,), a.aval)
    first = jnp.sin(a) + 0.0

    class Racy(tuple):
        def __iter__(self):   # the other thread finishes ``inner`` now
            inner.set(first)
            return tuple.__iter__(self)

    inner.args = Racy((a,))
    outer = _thunks.Thunk(jnp.cos, (inner,), a.aval)
    _thunks.force_many([outer])
    np.testing.assert_allclose(outer.value, np.cos(np.sin(np.arange(3.0))), rtol=1e-6)
    assert inner.value is first and inner.args is None
    done = _thunks.Thunk(jnp.sin, (a,), a.aval)
    done.set(jnp.zeros(3))
    for walk in (_thunks._walk, _thunks._walk_deep):   # found computed: an input, not a node
        w = walk([_thunks.Thunk(jnp.cos, (done,), a.aval)])
        assert len(w.order) == 1 and w.inputs[0] is done.value
    order = [_thunks.Thunk(jnp.sin, (a,), a.aval)]
    order[0].set(jnp.zeros(3))                     # computed meanwhile: not run again
    _thunks._run_op_by_op(order)
    np.testing.assert_array_equal(order[0].value, np.zeros(3))


def test_a_delta_read_after_its_update_keeps_its_value(deferred):
    (w, b), (gw, gb) = _grads(True)
    before = w.numpy()
    for _ in range(3):
        d = gw * 0.5
        w.assign_sub(d)                           # `d`'s op runs inside the update
        assert d._thunk.value is None
        np.testing.assert_allclose(d.numpy(), gw.numpy() * 0.5, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), before - 3 * 0.5 * gw.numpy(), rtol=1e-5)


def _dag(n):
    """A pending graph with shared nodes, an input used twice and computed thunks as inputs."""
    a, c = jnp.float32(2.0), _thunks.valued(jnp.float32(3.0))
    nodes = [_thunks.Thunk(jnp.add, (a, c), a.aval)]
    for i in range(1, n):
        prev, other = nodes[-1], nodes[i // 2]
        nodes.append(_thunks.Thunk(jnp.multiply if i % 2 else jnp.subtract, (prev, other if i % 3 else a),
                                  a.aval))
    return nodes


def test_the_recursive_walk_and_the_deep_walk_agree(deferred, monkeypatch):
    """``_walk`` (recursive, for shallow graphs) against ``_walk_deep`` (the explicit stack), the
    oracle; past ``_DEPTH`` the deep walk takes over, and the values are the same."""
    nodes = _dag(40)
    roots = [nodes[-1], nodes[20], nodes[-1]]
    fast, deep = _thunks._walk(roots), _thunks._walk_deep(roots)
    for field in ("order", "spec", "inputs"):
        assert getattr(fast, field) == getattr(deep, field)
    assert len(fast.inputs) == 2                            # `a` passed once
    expected = [float(n.force()) for n in _dag(40)]
    monkeypatch.setattr(_thunks, "_DEPTH", 5)
    with pytest.raises(_thunks._Deep):
        _thunks._walk(roots)
    _thunks.force_many(roots)
    assert [float(n.value) for n in (nodes[-1], nodes[20])] == [expected[-1], expected[20]]


def test_a_forced_program_gives_every_node_its_value(deferred):
    """Which values a forced program returns is a rule of the graph (all of them), not of who
    refers to the nodes: a kept intermediate has its value, and so has a dead one (freed with
    it); the second time the structure runs as one compiled program."""
    import weakref
    _, (gw, _) = _grads(True)
    _thunks._FLUSH.clear()
    _thunks._SEEN.clear()
    for _ in range(2):
        kept = gw * 3.0
        dead = kept + 1.0
        dead_thunk = weakref.ref(dead._thunk)
        root = dead * 2.0
        del dead
        np.testing.assert_allclose(root.numpy(), (gw.numpy() * 3.0 + 1.0) * 2.0, rtol=1e-6)
        assert kept._thunk.value is not None and kept._thunk.args is None
        assert root._thunk.args is None           # nothing of the graph is held any more
        assert dead_thunk() is None
    assert [len(key) for key in _thunks._FLUSH._data] == [3]   # one program: the three nodes


def test_large_pending_graphs_run_op_by_op(deferred, monkeypatch):
    _, (gw, _) = _grads(True)
    monkeypatch.setattr(_thunks, "_FLUSH_MAX", 8)
    before = len(_thunks._FLUSH)
    for _ in range(2):
        y = gw
        for _ in range(20):
            y = y * 1.5
        np.testing.assert_allclose(y.numpy(), gw.numpy() * 1.5 ** 20, rtol=1e-5)
    assert len(_thunks._FLUSH) == before


@pytest.mark.parametrize("deferral", [True, False])
def test_concurrent_updates_are_never_lost(deferral):
    """Updates from 4 threads, pending or eager: each read-modify-write is atomic (TF's
    resource variables lock theirs), so all 200 land."""
    (w, b), (gw, gb) = _grads(deferral)
    prev = tf.set_deferred_execution(deferral)
    start = w.numpy()
    errors = []

    def work():
        try:
            for _ in range(50):
                w.assign_sub(0.001 * gw)
                w.numpy()
        except Exception as e:   # pragma: no cover - the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        tf.set_deferred_execution(prev)
    assert not errors
    np.testing.assert_allclose(w.numpy(), start - 200 * 0.001 * gw.numpy(), rtol=1e-4)


def test_a_dropped_variable_with_a_pending_update_is_released(deferred):
    import gc
    import weakref
    (w, b), (gw, gb) = _grads(True)
    w.assign_sub(0.1 * gw)
    assert type(w._val) is _thunks.Thunk
    ref = weakref.ref(w)
    del w
    gc.collect()
    assert ref() is None
    b.assign_sub(0.1 * gb)
    np.testing.assert_allclose(b.numpy(), B - 0.1 * gb.numpy(), rtol=1e-6)   # the others still compute


def test_a_pending_update_knows_the_computed_value_s_type(deferred):
    """The pending value's aval is the one the update computes, also for a Variable holding a
    weakly typed value (``jnp.asarray(2.0)``: the update's result is strongly typed)."""
    for init in (jnp.asarray(2.0), np.float32(2.0)):
        v = tf.Variable(init)
        with tf.GradientTape() as tape:
            y = v * v
        v.assign_sub(tape.gradient(y, v) * 0.25)
        pending = v._val.aval
        assert type(v._val) is _thunks.Thunk
        np.testing.assert_allclose(v.numpy(), 1.0)
        assert v._value.aval == pending and not pending.weak_type


def _classifier_data(seed, n):
    """A batch of ``n`` 5-feature rows, their labels among 4 classes and a 5x4 weight, drawn by NumPy."""
    rng = np.random.default_rng(seed)
    xs, ys = rng.normal(size=(n, 5)).astype(np.float32), rng.integers(0, 4, n).astype(np.int32)
    return xs, ys, rng.normal(size=(5, 4)).astype(np.float32)


def _metric_step(x, y, w, opt, keep_logits=True):
    """A Keras-style step: the metric is computed from the logits after the gradient (or, without
    ``keep_logits``, the logits are no name's value when the gradient is taken)."""
    with tf.GradientTape() as tape:
        if not keep_logits:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=tf.nn.relu(tf.matmul(x, w)) * 2.0))
        else:
            logits = tf.nn.relu(tf.matmul(x, w)) * 2.0
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    grads = tape.gradient(loss, [w])
    opt.apply_gradients(zip(grads, [w]))
    if not keep_logits:
        return loss.numpy(), None, False
    computed = type(logits) is Pending and logits._thunk.value is not None   # before anything reads it
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32))
    return loss.numpy(), (acc.numpy(), logits.numpy()), computed


@pytest.mark.parametrize("predict", [False, True])
def test_an_intermediate_the_user_holds_comes_back_from_the_gradient(fresh_cache, predict, monkeypatch):
    """The logits a metric reads after ``tape.gradient`` are returned by the gradient's own
    program (the forward is not computed again: nothing it needs is pending); the loop still
    compiles its gradient once per structure, and every number equals the undeferred loop's."""
    runs = []
    real = _thunks._run_op_by_op
    monkeypatch.setattr(_thunks, "_run_op_by_op", lambda order: (runs.append(len(order)), real(order))[1])
    xs, ys, w0 = _classifier_data(3, 16)
    results = {}
    prev = _speculate.set_speculative_updates(predict)
    try:
        for deferral in (True, False):
            before = tf.set_deferred_execution(deferral)
            try:
                x, y, w = tf.constant(xs), tf.constant(ys), tf.Variable(w0)
                opt = tf.keras.optimizers.SGD(0.1)
                results[deferral] = [_metric_step(x, y, w, opt) for _ in range(8)]
            finally:
                tf.set_deferred_execution(before)
            if deferral:
                info = tf.cache_info()
    finally:
        _speculate.set_speculative_updates(prev)
    assert all(c for *_, c in results[True])
    assert info.misses == 1 and info.compiles <= 2
    # the metric's own ops are the only pending graph computed apart: never the forward's ops
    assert max(runs) <= 4
    for (la, (aa, ga), _), (lb, (ab, gb), _) in zip(results[True], results[False]):
        np.testing.assert_allclose(la, lb, rtol=1e-5)
        np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-6)
        assert aa == ab


def test_an_intermediate_nobody_holds_is_not_returned(deferred, fresh_cache):
    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(size=(8, 5)).astype(np.float32))
    y = tf.constant(rng.integers(0, 4, 8).astype(np.int32))
    w = tf.Variable(rng.normal(size=(5, 4)).astype(np.float32))
    opt = tf.keras.optimizers.SGD(0.1)
    for _ in range(3):
        _metric_step(x, y, w, opt, keep_logits=False)
    assert [type(k).__name__ for k in _replay_keys()] == ["EntryKey"]   # the plain fused form
    for _ in range(3):
        _metric_step(x, y, w, opt)
    keys = _replay_keys()
    assert [type(k).__name__ for k in keys] == ["EntryKey", "HeldKey"]
    assert len(keys[1].codes) == 1   # the logits alone (the ops before them are not held)


def _second_derivative(w, x):
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(tf.tanh(tf.matmul(x, w)))
        g = inner.gradient(y, w)
        pending = type(g) is Pending and g._thunk.value is None
        z = tf.reduce_sum(g * g)
    h = outer.gradient(z, w)
    return g, z, h, pending


@pytest.mark.parametrize("size", [4, 160])   # (a small g comes back with the gradient, a large one not)
def test_an_inner_gradient_under_an_outer_tape_runs_inside_the_outer_gradient(deferred, size, monkeypatch):
    """A nested ``tape.gradient`` is left pending (its op: ``replay.GradientPrimitive``) and the outer
    gradient computes it in its own program: no op runs on its own in the steady state (nothing is
    forced apart), and every value equals ``jax.grad`` of ``jax.grad`` and the undeferred run."""
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=(size, size)).astype(np.float32) / size
    x0 = rng.normal(size=(2, size)).astype(np.float32)
    w, x = tf.Variable(w0), tf.constant(x0)
    for _ in range(3):
        _second_derivative(w, x)
    forced = []
    real = _thunks._force_many
    monkeypatch.setattr(_thunks, "_force_many", lambda roots: (forced.append(len(roots)), real(roots))[1])
    g, z, h, pending = _second_derivative(w, x)
    assert pending and forced == []
    inner = lambda a: jnp.sum(jnp.tanh(x0 @ a))  # noqa: E731
    gj = jax.grad(inner)(w0)
    zj, hj = jax.value_and_grad(lambda a: jnp.sum(jnp.square(jax.grad(inner)(a))))(w0)
    scale = np.abs(hj).max()
    np.testing.assert_allclose(h.numpy(), hj, rtol=2e-4, atol=1e-6 * scale)
    np.testing.assert_allclose(z.numpy(), zj, rtol=2e-4)
    assert forced == []
    np.testing.assert_allclose(g.numpy(), gj, rtol=2e-4, atol=1e-6)   # (a large g is computed now)
    prev = tf.set_deferred_execution(False)
    try:
        ge, ze, he, pe = _second_derivative(w, x)
    finally:
        tf.set_deferred_execution(prev)
    assert not pe
    for a, b in ((g, ge), (z, ze), (h, he)):
        # (atol on the values' scale: a GPU's fused sums round otherwise in the two modes)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=1e-5 * float(np.abs(b.numpy()).max()))


def _readout_program(steps=3):
    """A few-step linear-algebra loop on NumPy data (a least-squares readout solved in the loss, a
    QR factor, a triangular solve; the readout of ``tests/parity/test_user_programs5.py``): the
    losses and gradients it returns are read after the loop, as a script prints them."""
    rs = np.random.RandomState(28)
    x, y = rs.randn(13, 7).astype(np.float32), rs.randn(13, 1).astype(np.float32)
    w = tf.Variable(np.random.RandomState(34).randn(7, 6).astype(np.float32))
    out, kinds = [], []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            phi = tf.tanh(tf.matmul(x[:9], w))
            beta = tf.linalg.lstsq(phi, y[:9], l2_regularizer=0.1)
            r = tf.linalg.qr(tf.tanh(tf.matmul(x[9:], w)))[1]
            z = tf.linalg.triangular_solve(r[:, :4] + 2.0 * tf.eye(4), tf.ones([4, 1]), lower=False)
            loss = tf.reduce_mean((tf.matmul(tf.tanh(tf.matmul(x[9:], w)), beta) - y[9:]) ** 2) \
                + 0.01 * tf.reduce_sum(z ** 2)
        kinds.append([type(t) is Pending and t._thunk.value is None for t in (beta, r, loss)])   # none ran yet
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        out.append((loss, g))
    return out, w, kinds


def test_a_few_step_linalg_loop_compiles_only_the_step_and_its_prediction(fresh_cache):
    """Deferral compiles, beyond the per-op programs the same loop compiles with deferral off:
    the step's program (forward and gradient), the pending update's op, and the predicted step
    (third step, ``runtime.speculate``): 3 programs.  NumPy operands and a QR factor stay pending
    (the whole forward waits for the gradient: before, each op on NumPy data ran at once, computing
    its pending inputs, which the third step then compiled as programs of their own), and reading
    the predicted step's gradient runs the step's compiled program again (before: a program of
    its own).  Oracle: XLA's compile log (``xla_compiles``); values: the loop with deferral off."""
    from xla_compiles import TRANSFERS, compiles

    prev_d, prev_p = tf.set_deferred_execution(False), _speculate.set_speculative_updates(True)
    try:
        out, w, _ = _readout_program()
        want = [(loss.numpy(), g.numpy()) for loss, g in out], w.numpy()
        tf.clear_cache()   # (the per-op programs stay compiled: JAX's own caches)
        tf.set_deferred_execution(True)
        with compiles() as names:
            out, w, kinds = _readout_program()
        with compiles() as read_names:
            got = [(loss.numpy(), g.numpy()) for loss, g in out], w.numpy()
    finally:
        tf.set_deferred_execution(prev_d)
        _speculate.set_speculative_updates(prev_p)
    assert kinds == [[True] * 3] * 3
    assert len([n for n in names if n not in TRANSFERS]) == 3, names
    assert read_names == []
    for (l1, g1), (l0, g0) in zip(got[0], want[0]):
        np.testing.assert_allclose(l1, l0, rtol=1e-5)
        np.testing.assert_allclose(g1, g0, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_an_intermediate_first_held_after_steps_that_held_none_comes_back_within_the_wait(deferred, fresh_cache):
    """``_held`` looks at every value of the slice only now and then once its looks find the same
    thing (``HELD_WAIT_MAX``): logits first held after steps that held nothing are computed when
    read meanwhile (the same values as the undeferred loop's), and come back from the gradient's
    program within ``HELD_WAIT_MAX`` + 1 steps; from then on, on every step."""
    from tapejax.autodiff import gradient as _gradient
    xs, ys, w0 = _classifier_data(5, 8)
    runs = {}
    for deferral in (True, False):
        before = tf.set_deferred_execution(deferral)
        try:
            x, y, w = tf.constant(xs), tf.constant(ys), tf.Variable(w0)
            opt = tf.keras.optimizers.SGD(0.1)
            out = [_metric_step(x, y, w, opt, keep_logits=False) for _ in range(40)]
            out += [_metric_step(x, y, w, opt) for _ in range(2 * _gradient.HELD_WAIT_MAX + 4)]
            runs[deferral] = out
        finally:
            tf.set_deferred_execution(before)
    held = runs[True][40:]
    first = next(i for i, (_, _, computed) in enumerate(held) if computed)
    assert first <= _gradient.HELD_WAIT_MAX
    assert all(computed for _, _, computed in held[first:])
    for (la, metric_a, _), (lb, metric_b, _) in zip(runs[True], runs[False]):
        np.testing.assert_allclose(la, lb, rtol=1e-5)
        if metric_a is not None:
            np.testing.assert_allclose(metric_a[1], metric_b[1], rtol=1e-5, atol=1e-6)
            assert metric_a[0] == metric_b[0]


@pytest.mark.parametrize("other", ["tensor", "array", "pending", "variable", "number"])
def test_an_untaped_pair_on_a_gradient_stays_pending_as_run_leaves_it(other):
    """``lr * g`` and the like with no tape (``DeferredExecutor.run2``'s untaped case, written out)
    leave the same pending value as ``run``'s general case: one untaped thunk on the gradient's,
    the same value as the eager product."""
    from tapejax.core.bind import REGISTRY
    from tapejax.runtime.deferred import DEFERRED
    mul = REGISTRY["Mul"]
    w = tf.Variable([1.0, -2.0, 3.0])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w * w)
    g = t.gradient(loss, w)
    assert type(g) is Pending
    y = {"tensor": tf.constant([0.5, 0.25, 2.0]), "array": jnp.asarray([0.5, 0.25, 2.0]),
         "pending": g * 2.0, "variable": tf.Variable([0.5, 0.25, 2.0]), "number": 0.5}[other]
    fast = DEFERRED.run2((), mul, mul.fixed(()), g, y)
    slow = DEFERRED.run((), mul, mul.fixed(()), (), (g, y))
    assert type(fast) is type(slow)
    if other != "number":   # (a Python number: the op library gives it as a constant array)
        assert type(fast) is Pending and type(fast._thunk.args[0]) is _thunks.Thunk
    expect = np.asarray(g.numpy()) * np.asarray(y.numpy() if hasattr(y, "numpy") else y)
    np.testing.assert_allclose(fast.numpy(), expect)
    np.testing.assert_allclose(slow.numpy(), expect)


def _accuracy_step(x, y, w, opt, read):
    """A step with its accuracy computed inside the tape (``argmax``, ``equal`` and ``cast`` have
    no gradient: no tape keeps them), read at the point ``read`` says, or kept unread."""
    with tf.GradientTape() as tape:
        logits = tf.matmul(x, w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32))
        early = float(acc.numpy()) if read == "in_tape" else None
    grads = tape.gradient(loss, [w])
    late = float(acc.numpy()) if read == "after_gradient" else None
    opt.apply_gradients(zip(grads, [w]))
    if read == "after_update":   # (w has changed: the accuracy is still the step's own)
        late = float(acc.numpy())
    return float(loss.numpy()), early, late, acc


def test_a_metric_inside_the_tape_does_not_compute_the_forward_apart(fresh_cache, monkeypatch):
    """Ops no tape keeps on pending inputs (an accuracy's ``argmax`` on the logits) stay pending:
    the forward is computed by the gradient's program alone (no op runs on its own, no graph is
    forced before the gradient), and the accuracy, read inside the tape, after the gradient,
    after the update or never (kept in a list), equals the undeferred loop's."""
    xs, ys, w0 = _classifier_data(7, 16)
    reads = ["none", "after_gradient", "after_update", "none", "in_tape", "after_update"] * 3
    runs = {}
    for deferral in (True, False):
        before = tf.set_deferred_execution(deferral)
        try:
            x, y, w = tf.constant(xs), tf.constant(ys), tf.Variable(w0)
            opt = tf.keras.optimizers.SGD(0.5)
            for r in reads[:4]:   # (warm: the structures compile)
                _accuracy_step(x, y, w, opt, r)
            by_op = []
            real = _thunks._run_op_by_op
            monkeypatch.setattr(_thunks, "_run_op_by_op", lambda order: (by_op.append(len(order)), real(order))[1])
            out = [_accuracy_step(x, y, w, opt, r) for r in reads]
            monkeypatch.setattr(_thunks, "_run_op_by_op", real)
            kept = [o[3] for o in out]
            runs[deferral] = ([o[:3] for o in out], [float(a.numpy()) for a in kept], by_op)
        finally:
            tf.set_deferred_execution(before)
    (da, ka, by_op), (db, kb, _) = runs[True], runs[False]
    assert len(by_op) <= reads.count("in_tape")   # (a read inside the tape computes what it needs)
    for (la, ea, xa), (lb, eb, xb) in zip(da, db):
        np.testing.assert_allclose(la, lb, rtol=1e-5)
        assert ea == eb and xa == xb
    assert ka == kb


def test_unread_metrics_inside_the_tape_stay_bounded(deferred):
    """An accuracy computed inside the tape and kept in a list, never read, does not keep each
    step's graph alive: what ``settle`` tracks stays bounded."""
    from tapejax.runtime import settle as _settle
    rng = np.random.default_rng(8)
    x = tf.constant(rng.normal(size=(8, 5)).astype(np.float32))
    y = tf.constant(rng.integers(0, 4, 8).astype(np.int32))
    w = tf.Variable(rng.normal(size=(5, 4)).astype(np.float32))
    opt = tf.keras.optimizers.SGD(0.1)
    kept = []
    for _ in range(300):
        kept.append(_accuracy_step(x, y, w, opt, "none")[3])
        assert _settle.tracked_values() <= 16
    assert all(0.0 <= float(a.numpy()) <= 1.0 for a in kept[-3:])


def _stacked_step(x, y, w, opt, kept):
    """A step whose layers are slices of one stacked Variable (``w[0]``, ``w[1][:, :4]``); the
    first layer's slice is kept (``kept``) and read by the caller later, or never."""
    with tf.GradientTape() as tape:
        first = w[0]
        h = tf.nn.relu(tf.matmul(x, first))
        logits = tf.matmul(h, w[1][:, :4]) * 0.5
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    grads = tape.gradient(loss, [w])
    opt.apply_gradients(zip(grads, [w]))
    kept.append(first)
    return float(loss.numpy())


def test_a_variable_slice_read_in_the_tape_stays_in_the_step(monkeypatch):
    """``w[i]`` under a recording tape is a pending slice (``PendingSlice``): the slices and the
    ops on them stay in the gradient's program (no op runs on its own), the values equal the
    undeferred loop's, a slice kept and read after the update has the step's value, and one kept
    and never read does not keep every step's graph alive."""
    from tapejax.ops.indexing import PendingSlice, VariableSlice
    from tapejax.runtime import settle as _settle
    rng = np.random.default_rng(11)
    xs, ys = rng.normal(size=(8, 5)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int32)
    w0 = rng.normal(size=(2, 5, 5)).astype(np.float32)
    out = {}
    for deferral in (True, False):
        before = tf.set_deferred_execution(deferral)
        try:
            x, y, w = tf.constant(xs), tf.constant(ys), tf.Variable(w0)
            opt = tf.keras.optimizers.SGD(0.2)
            kept = []
            losses = [_stacked_step(x, y, w, opt, kept) for _ in range(3)]   # (warm)
            by_op = []
            real = _thunks._run_op_by_op
            monkeypatch.setattr(_thunks, "_run_op_by_op", lambda order: (by_op.append(len(order)), real(order))[1])
            for _ in range(200):
                losses.append(_stacked_step(x, y, w, opt, kept))
                assert _settle.tracked_values() <= 16
            monkeypatch.setattr(_thunks, "_run_op_by_op", real)
            kinds = {type(k) for k in kept}
            out[deferral] = (losses, [k.numpy() for k in kept[-3:]], w.numpy(), by_op, kinds)
        finally:
            tf.set_deferred_execution(before)
    (la, ka, wa, by_op, kinds), (lb, kb, wb, _, kinds_b) = out[True], out[False]
    assert kinds == {PendingSlice} and kinds_b == {VariableSlice}
    assert by_op == []
    np.testing.assert_allclose(la, lb, rtol=1e-5)
    np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-6)
    for a, b in zip(ka, kb):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("how", ["assign", "assign_add", "assign_sub"])
def test_a_pending_slice_assigns_as_a_variable_slice_does(deferred, how):
    """``v[1:3].assign(...)`` on a slice taken under a tape (a pending slice) or of a Variable
    whose update is pending updates that part of the Variable and returns it, as the concrete
    slice does (TF's sliced assign); the slice read before keeps the value it read."""
    from tapejax.ops.indexing import PendingSlice
    v = tf.Variable([1.0, 2.0, 3.0, 4.0])
    with tf.GradientTape() as tape:
        s = v[1:3]
        loss = tf.reduce_sum(s * s) * 0.25
    assert type(s) is PendingSlice
    g = tape.gradient(loss, v)
    v.assign_sub(0.5 * g)   # (pending: computed with the slice's own program)
    out = getattr(v[1:3], how)([10.0, 20.0])
    assert out is v
    want = {"assign": [10.0, 20.0], "assign_add": [11.5, 22.25], "assign_sub": [-8.5, -17.75]}[how]
    np.testing.assert_allclose(v.numpy(), [1.0, *want, 4.0])
    np.testing.assert_allclose(s.numpy(), [2.0, 3.0])
    np.testing.assert_allclose(g.numpy(), [0.0, 1.0, 1.5, 0.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="sliced l-value shape"):
        s.assign([1.0, 2.0, 3.0])


def test_slices_of_a_variable_as_operands_of_an_op_of_many_inputs_stay_pending(monkeypatch):
    """``tf.concat([w[0], w[1] * 2.0, w[2]], 0)`` under a tape: the slices are operands of an op
    of three inputs (``_small_n``), which stays pending; the gradient equals the undeferred one."""
    w0 = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    grads = {}
    for deferral in (True, False):
        before = tf.set_deferred_execution(deferral)
        try:
            w = tf.Variable(w0)
            by_op = []
            real = _thunks._run_op_by_op
            monkeypatch.setattr(_thunks, "_run_op_by_op", lambda order: (by_op.append(len(order)), real(order))[1])
            with tf.GradientTape() as tape:
                h = tf.concat([w[0], w[1] * 2.0, w[2]], 0)
                loss = tf.reduce_sum(h * h)
            pending = type(h) is Pending
            grads[deferral] = tape.gradient(loss, w).numpy()
            monkeypatch.setattr(_thunks, "_run_op_by_op", real)
        finally:
            tf.set_deferred_execution(before)
        if deferral:
            assert pending and by_op == []
    np.testing.assert_allclose(grads[True], grads[False])
    np.testing.assert_allclose(grads[True][1], 8.0 * w0[1])
