"""The execution invariants (issue #20, behaviours 6 and 7), each trigger tested.

6. A Variable holds a concrete array or a pending value computed outside any
   trace; nothing pending is forced inside a JAX trace.  Every trigger runs
   after a few eager steps (a manual ``assign_sub`` loop, SGD, Adam; step 3
   is the first that speculation predicts), in every execution mode; the
   oracle is the same program with deferral and speculation off, and the
   Variable must hold a concrete array afterwards (a later eager step works).
7. A buffer still in use is never donated: donation follows ownership the
   library tracks (``Variable.owns_buffer``), not reference counts.  The
   oracle is again the program run with deferral and speculation off (which
   never shares a buffer through a pending value).
"""
import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.tensor import Pending
from tapejax.runtime import thunks as _thunks

MODES = {"deferred+speculative": (True, True), "deferred": (True, False), "eager": (False, False)}


@contextlib.contextmanager
def _settings(deferral, speculation):
    prev_d = tf.set_deferred_execution(deferral)
    prev_s = tf.set_speculative_updates(speculation)
    try:
        yield
    finally:
        tf.set_deferred_execution(prev_d)
        tf.set_speculative_updates(prev_s)


@pytest.fixture(params=list(MODES))
def mode(request):
    with _settings(*MODES[request.param]):
        yield request.param


@pytest.fixture(params=["deferred+speculative", "deferred"])
def deferred_mode(request):
    """The modes that differ from the oracle (deferral and speculation off)."""
    with _settings(*MODES[request.param]):
        yield request.param


def _concrete(var):
    """The invariant: a concrete array, or a pending thunk whose value (if computed) is one."""
    v = var._val
    if type(v) is _thunks.Thunk:
        v = v.value
        if v is None:
            return True
    return type(v) is _thunks._Array


def _values(x):
    return jax.tree_util.tree_map(lambda t: np.asarray(t), x,
                                  is_leaf=lambda t: isinstance(t, (tf.Tensor, tf.Variable)))


X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0


def _train(kind, steps, w, x):
    """A few eager steps; returns the optimizer (or None) and the last gradient."""
    opt = {"assign": lambda: None, "sgd": lambda: tf.keras.optimizers.SGD(0.1),
           "adam": lambda: tf.keras.optimizers.Adam(0.1)}[kind]()
    g = None
    for _ in range(steps):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w))
        g = t.gradient(loss, w)
        if opt is None:
            w.assign_sub(0.1 * g)
        else:
            opt.apply_gradients([(g, w)])
    return opt, g


# -- behaviour 6: the triggers ------------------------------------------------------------

def _function(w, x, opt, g):
    return tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)))(x)


def _scan(w, x, opt, g):
    return tf.scan(lambda a, e: a + tf.reduce_sum(e * w[:, 0]), x, initializer=tf.constant(0.0))


def _foldl(w, x, opt, g):
    return tf.foldl(lambda a, e: a + tf.reduce_sum(e * w[:, 0]), x, initializer=tf.constant(0.0))


def _input_signature(w, x, opt, g):
    f = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)),
                    input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    return f(x)


def _under_tape(w, x, opt, g):
    f = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)))
    with tf.GradientTape() as t:
        y = f(x)
    return y, t.gradient(y, w)


def _gradients_inside(w, x, opt, g):
    @tf.function
    def f(x):
        return tf.gradients(tf.reduce_mean(tf.matmul(x, w)), [w])[0]
    return f(x)


def _optimizer_inside(w, x, opt, g):
    o = opt or tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w))
        o.apply_gradients([(t.gradient(loss, w), w)])
        return loss
    return step(x), step(x)


def _assign_inside(w, x, opt, g):
    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w))
        w.assign_sub(0.1 * t.gradient(loss, w))
        return loss
    return step(x)


def _closure_over_pending_product(w, x, opt, g):
    h = g * 0.5            # pending (deferral on): a gradient product no tape records
    return tf.function(lambda: tf.reduce_sum(h + w))()


def _closure_over_gradient(w, x, opt, g):
    return tf.function(lambda: tf.reduce_sum(g * w))()


def _variable_created_inside(w, x, opt, g):
    made = []

    @tf.function
    def f():
        if not made:
            made.append(tf.Variable(w * 2.0))
        return made[0].read_value()
    return f(), f()


def _while_and_cond(w, x, opt, g):
    @tf.function
    def f(x):
        _, a = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + tf.reduce_sum(w)),
                             [tf.constant(0), tf.constant(0.0)])
        return tf.cond(a > 0, lambda: a * tf.reduce_sum(w), lambda: a)
    return f(x)


def _jax_jit_reading(w, x, opt, g):
    return jax.jit(lambda xx: tf.reduce_mean(tf.matmul(xx, w))._value)(jnp.asarray(X))


TRIGGERS = {f.__name__.lstrip("_"): f for f in (
    _function, _scan, _foldl, _input_signature, _under_tape, _gradients_inside, _optimizer_inside,
    _assign_inside, _closure_over_pending_product, _closure_over_gradient, _variable_created_inside,
    _while_and_cond, _jax_jit_reading)}
# Step 3 of a manual loop: with speculation the update was predicted (the gradient itself is
# still pending), without it the Variable holds a pending update.  (tests/parity/test_execution.py
# runs the triggers after other loops: steps 1 and 2, SGD and Adam, against TF.)
LOOPS = [("assign", 3)]

_ORACLE = {}


def _run_trigger(trigger, kind, steps):
    w = tf.Variable(tf.ones([3, 2]))
    x = tf.constant(X)
    opt, g = _train(kind, steps, w, x)
    out = _values(TRIGGERS[trigger](w, x, opt, g))
    assert _concrete(w), f"{trigger}: the Variable holds {type(w._val).__name__}"
    _train(kind, 1, w, x)   # training goes on (a tracer left in w would raise here)
    assert _concrete(w)
    return out, w.numpy()


@pytest.mark.parametrize("kind,steps", LOOPS, ids=[f"{k}{n}" for k, n in LOOPS])
@pytest.mark.parametrize("trigger", list(TRIGGERS))
def test_no_pending_value_is_forced_inside_a_trace(deferred_mode, trigger, kind, steps):
    """Oracle: the same program with deferral and speculation off."""
    key = (trigger, kind, steps)
    if key not in _ORACLE:
        with _settings(False, False):
            _ORACLE[key] = _run_trigger(trigger, kind, steps)
    got = _run_trigger(trigger, kind, steps)
    want = _ORACLE[key]
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)


def test_a_pending_value_forced_inside_a_trace_is_computed_outside_it(mode):
    """The pending thunk a trace needs gets a concrete value (``jax.core.eval_context``), and
    keeps it after the trace: reading it again outside gives the same array object."""
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    h = t.gradient(loss, w) * 0.5
    assert tf.function(lambda: tf.reduce_sum(h))().numpy() == 3.0
    if type(h) is Pending:
        assert type(h._thunk.value) is _thunks._Array
    np.testing.assert_array_equal(h.numpy(), [1.0, 2.0])


def test_a_variable_refuses_a_tracer_outside_tapejax_traces(mode):
    """``jax.jit`` assigning (or creating) a Variable would leak its tracer: a clear
    ValueError naming the Variable, raised before anything changes."""
    w = tf.Variable([1.0, 2.0], name="w")
    with pytest.raises(ValueError, match="Variable 'w:0' cannot hold a traced value"):
        jax.jit(lambda a: w.assign(a)._value)(jnp.ones(2))
    with pytest.raises(ValueError, match="cannot hold a traced value"):
        jax.jit(lambda a: tf.Variable(a)._value)(jnp.ones(2))
    with pytest.raises(ValueError, match="cannot hold a traced value"):
        jax.grad(lambda a: (w.assign_add(a), jnp.sum(a))[1])(jnp.ones(2))
    assert _concrete(w)
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    w.assign_add([1.0, 1.0])   # still usable
    np.testing.assert_array_equal(w.numpy(), [2.0, 3.0])


def test_traced_values_binds_and_restores():
    """The one way a tracer enters a Variable outside ``tapejax.function``: inside the block
    only, the Variable's own value (and its ownership) put back after, even on an error."""
    from tapejax.core.variable import traced_values
    w = tf.Variable([1.0, 2.0])
    before = w._val
    assert w.owns_buffer()

    def f(a):
        with traced_values([w], [a]):
            assert isinstance(w._value, jax.core.Tracer)
            w.assign(a * 2.0)            # allowed inside the block
            return w._value
    np.testing.assert_array_equal(jax.jit(f)(jnp.ones(2)), [2.0, 2.0])
    assert w._val is before and w.owns_buffer()
    with pytest.raises(RuntimeError), traced_values([w], [jnp.zeros(2)]):
        raise RuntimeError
    assert w._val is before


# -- behaviour 7: ownership and donation ----------------------------------------------------

OPTIMIZERS = {"sgd": lambda: tf.keras.optimizers.SGD(0.1),
              "momentum": lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
              "adam": lambda: tf.keras.optimizers.Adam(0.1),
              "assign": lambda: None}


def _update(opt, g, w):
    if opt is None:
        w.assign_sub(0.1 * g)
    else:
        opt.apply_gradients([(g, w)])


def _metric_kept(kind, persistent, function_steps):
    """In-tape ``logits`` and ``read_value()`` kept for a metric, read after later updates."""
    w = tf.Variable(tf.ones([3, 2]))
    x = tf.constant(X)
    opt = OPTIMIZERS[kind]()
    kept = []

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w))
        _update(opt, t.gradient(loss, w), w)
        return loss

    for _ in range(5):
        with tf.GradientTape(persistent=persistent) as t:
            logits = tf.matmul(x, w)
            r = w.read_value()
            loss = tf.reduce_mean(logits)
        _update(opt, t.gradient(loss, w), w)
        kept.append((logits, r))
        if function_steps:
            step(x)
    return [np.asarray(tf.reduce_sum(k)) for k, _ in kept] + [r.numpy() for _, r in kept] + [w.numpy()]


METRIC_CASES = [("momentum", False, False), ("adam", True, False), ("assign", True, True)]


@pytest.mark.parametrize("kind,persistent,function_steps", METRIC_CASES,
                         ids=[f"{k}-{'persistent' if p else 'tape'}{'-function' if f else ''}"
                              for k, p, f in METRIC_CASES])
def test_metric_kept_in_the_tape_survives_later_updates(deferred_mode, kind, persistent, function_steps):
    got = _metric_kept(kind, persistent, function_steps)
    with _settings(False, False):
        want = _metric_kept(kind, persistent, function_steps)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize("final", ["function", "optimizer"])
def test_a_read_sharing_a_pending_update_survives_donation(mode, final):
    """The read and the Variable share the buffer through ONE holder (the pending update's
    thunk, which the next gradient computes): reference counts on the array miss it."""
    w = tf.Variable(tf.ones([3]))
    opt = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    w.assign_sub(0.1 * t.gradient(loss, w))      # pending (deferral on)
    with tf.GradientTape() as t:
        r = w.read_value()                       # a Pending on the update's thunk
        loss = tf.reduce_sum(w * w)
    g = t.gradient(loss, w)                      # computes the update in its program

    @tf.function
    def double():
        w.assign(w * 2.0)

    for _ in range(2):
        if final == "function":
            double()
        else:
            opt.apply_gradients([(g, w)])
    np.testing.assert_allclose(r.numpy(), [0.8, 0.8, 0.8])
    want = [3.2] * 3 if final == "function" else [0.8 - 2 * 0.16] * 3
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-6)


def test_a_pending_op_on_a_variable_survives_its_update(mode):
    """``g * w`` with ``g`` pending and no tape: the product's thunk holds ``w``'s buffer."""
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    for _ in range(3):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(w * w)
        g = t.gradient(loss, w)
        before = w.numpy()
        h = g * w
        opt.apply_gradients([(g, w)])
        np.testing.assert_allclose(h.numpy(), 2 * before * before)


def test_ownership_follows_reads_and_updates():
    """Oracle: the flags the donation masks come from, and the buffers actually consumed."""
    w = tf.Variable([1.0, 2.0])                 # copied from host data: its own
    assert w.owns_buffer()
    v = tf.Variable(jnp.ones(2))                # the caller's array: shared
    assert not v.owns_buffer()
    u = tf.Variable(w)                          # w's buffer, read: shared by both
    assert not u.owns_buffer() and not w.owns_buffer()
    w.assign_add([1.0, 1.0])                    # a fresh result
    assert w.owns_buffer()
    r = w.read_value()
    assert not w.owns_buffer()
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    old_r = r._value
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
    assert not old_r.is_deleted()               # shared: passed undonated
    assert w.owns_buffer()                      # the update's output is w's alone
    slot = opt.get_slot(w, "momentum")
    assert slot.owns_buffer()
    old_w, old_slot = w._val, slot._val
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
    assert old_w.is_deleted() and old_slot.is_deleted()   # owned: donated
    np.testing.assert_allclose(r.numpy(), [2.0, 3.0])


def test_function_donates_only_owned_buffers():
    w = tf.Variable([1.0, 2.0])

    @tf.function
    def step():
        w.assign(w * 2.0)

    step()                                      # (first call: the buffer went through a trace)
    assert w.owns_buffer()
    old = w._val
    step()
    assert old.is_deleted()                     # owned: donated, no copy
    kept = w.read_value()
    step()
    np.testing.assert_array_equal(kept.numpy(), [4.0, 8.0])
    np.testing.assert_array_equal(w.numpy(), [8.0, 16.0])


def test_function_passing_a_value_through_does_not_own_it():
    """An assigned Variable whose new value is an input (another Variable's buffer, or its
    own on a path that does not change it), an output or another Variable's new value does
    not own it (JAX may return such an array as it is)."""
    from tapejax.core.ownership import fresh_outputs
    x, y, z = jnp.ones(1), jnp.ones(1), jnp.ones(1)
    assert fresh_outputs([x], [x, y, z, z], [y]) == [False, False, False, False]
    assert fresh_outputs([x], [y, z]) == [True, True]
    a = tf.Variable([1.0, 2.0])
    b = tf.Variable([5.0, 6.0])

    @tf.function
    def copy_b():
        a.assign(b)
        return a.read_value()

    for _ in range(3):
        out = copy_b()
        assert not (a.owns_buffer() and (a._val is b._val or a._val is out._value))
    np.testing.assert_array_equal(b.numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(out.numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(a.numpy(), [5.0, 6.0])


# -- buffers lent to a step's pending ops (``core.ownership.Loan``) ---------------------------
# A deferred step's forward reads each Variable as a loan to its pending ops and tapes; once
# they are done with it (the tape released by its gradient, the ops computed or dropped) the
# buffer is the Variable's again and the optimizer's update donates it, as a hand-written
# ``jax.jit`` step donates its parameters.  Every holder the loan does not list must keep it.

_X = np.random.default_rng(3).normal(size=(64, 40)).astype(np.float32)   # 64 x 40 -> 40 x 300
_W = (np.random.default_rng(4).normal(size=(40, 300)) / 7).astype(np.float32)


def _loan_step(w, opt, keep=None, persistent=False, inside=False, read=False, aux=False):
    """One Adam step of a model whose intermediate ``h`` (64 x 300 floats: more than a fused
    gradient returns) the caller may keep; returns (loss, what was kept)."""
    kept = {}

    def forward():
        h = tf.tanh(tf.matmul(tf.constant(_X), w))
        if keep:
            kept["h"] = h
        return tf.reduce_mean(tf.square(h))

    with tf.GradientTape(persistent=persistent) as tape:
        loss = forward()
        if aux:
            kept["aux"] = tf.reduce_sum(w * 2.0)          # recorded, outside the loss's slice
        if read:
            kept["read"] = w.read_value()
        if inside:   # the update while the tape still records
            opt.apply_gradients([(tape.gradient(loss, w), w)])
    if not inside:
        opt.apply_gradients([(tape.gradient(loss, w), w)])
    if persistent:
        kept["tape"] = tape
    return loss, kept


@pytest.mark.parametrize("hold", ["nothing", "intermediate", "persistent", "inside", "read", "aux"])
def test_a_buffer_lent_to_a_step_is_donated_only_when_its_holders_are_done(hold):
    """Deferral on, predictions off (the optimizer's own update runs): the step's lent buffer is
    donated by the next update exactly when nothing listed still holds it, and every value kept
    matches the same program with deferral off."""
    opts = dict(keep=hold == "intermediate", persistent=hold == "persistent", inside=hold == "inside",
                read=hold == "read", aux=hold == "aux")

    def run(deferral):
        with _settings(deferral, False):
            w = tf.Variable(_W)
            opt = tf.keras.optimizers.Adam(0.05)
            losses, donated, kept_vals = [], [], []
            for _ in range(4):
                old = w._val
                loss, kept = _loan_step(w, opt, **opts)
                donated.append(old.is_deleted())
                losses.append(float(loss.numpy()))
                kept_vals.append({k: v.numpy() for k, v in kept.items() if k != "tape"})
                if "tape" in kept:
                    kept_vals[-1]["tape"] = kept["tape"].gradient(loss, w).numpy()   # (still usable)
                del kept
            return losses, donated, kept_vals, w.numpy()

    losses, donated, kept, final = run(True)
    want_losses, _, want_kept, want_final = run(False)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    # (atol: a GPU's fused sums round otherwise in the two modes)
    np.testing.assert_allclose(final, want_final, rtol=1e-5, atol=1e-5)
    for got, want in zip(kept, want_kept):
        assert got.keys() == want.keys()
        for k in got:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    # the first step's buffer is the caller's copy (owned); from then on a buffer comes back
    # only where nothing holds it when the update runs
    # (``inside``: a non-persistent tape's gradient stops it recording and releases it, as TF's)
    free = hold in ("nothing", "inside")
    assert all(donated[1:]) if free else not any(donated[1:]), donated


def test_a_lent_buffer_captured_by_a_prediction_is_never_donated():
    """A predicted step's gradients recompute from the call's inputs (a capture no loan lists):
    the buffers lent before it stay where they are, and reading a gradient after the updates
    recomputes it from them."""
    with _settings(True, True):
        w = tf.Variable(np.ones((4, 3), np.float32))
        x = tf.constant(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
        opt = tf.keras.optimizers.SGD(0.1)
        grads = []
        for _ in range(6):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
            g = tape.gradient(loss, w)
            opt.apply_gradients([(g, w)])
            grads.append(g)
        got = [g.numpy() for g in grads]   # each recomputed, or computed, after the later updates
    with _settings(False, False):
        w = tf.Variable(np.ones((4, 3), np.float32))
        opt = tf.keras.optimizers.SGD(0.1)
        want = []
        for _ in range(6):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
            g = tape.gradient(loss, w)
            opt.apply_gradients([(g, w)])
            want.append(g.numpy())
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_a_lent_buffer_held_by_a_predicted_recompute_survives_another_update():
    """A predicted step whose gradients are then not applied: a compiled function assigns the
    Variable instead (it would donate a buffer it owns), and the gradient is read afterwards,
    recomputed from the call's inputs, the lent buffer among them."""
    def run(deferral, speculation):
        with _settings(deferral, speculation):
            w = tf.Variable(np.ones((4, 3), np.float32))
            x = tf.constant(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
            opt = tf.keras.optimizers.SGD(0.1)

            @tf.function
            def bump():
                w.assign(w * 2.0)

            for _ in range(2):   # (the optimizer's own updates: w owns its buffer; the third step predicts)
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
                opt.apply_gradients([(tape.gradient(loss, w), w)])
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
            g = tape.gradient(loss, w)
            bump()
            bump()
            return g.numpy(), w.numpy()
    got = run(True, True)
    want = run(False, False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_nested_tapes_keep_the_buffers_their_inner_gradients_hold():
    """An inner gradient recorded by an outer tape holds the leaves of its call, the lent buffer
    among them: the updates between keep it."""
    def run(deferral):
        with _settings(deferral, False):
            w = tf.Variable(_W[:, :8])
            opt = tf.keras.optimizers.Adam(0.05)
            out = []
            for _ in range(3):
                with tf.GradientTape() as outer:
                    with tf.GradientTape() as inner:
                        y = tf.reduce_sum(tf.tanh(tf.matmul(tf.constant(_X), w)))
                    g = inner.gradient(y, w)
                    z = tf.reduce_sum(g * g)
                hz = outer.gradient(z, w)
                opt.apply_gradients([(hz, w)])
                out.append((g.numpy(), float(z.numpy())))
            return out, w.numpy()
    got, gw = run(True)
    want, ww = run(False)
    np.testing.assert_allclose(gw, ww, rtol=1e-4, atol=1e-5)
    for (a, b), (c, d) in zip(got, want):
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, d, rtol=1e-4)
