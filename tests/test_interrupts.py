"""Interrupts and exceptions in the middle of a step: Variables end fully updated or untouched.

Oracles: a snapshot of every Variable (model, optimizer slots, iterations)
taken before the step ("untouched"), and the same step run on a fresh copy
without interruption ("fully updated").  Interrupts are injected
deterministically: a constraint or a host callback that raises at the k-th
variable for every k, a Variable whose k-th write during the commit raises
a real SIGINT (``signal.raise_signal``), and a gradient that is invalid only
for the 3rd variable.  One test runs the same SIGINT injection with the
commit guard disabled and sees a half-updated state, so the injection does
land inside the commit window.
"""
import contextlib
import signal
import threading

import jax
import numpy as np
import optax
import pytest

import tapejax as tf
from tapejax.core import ownership as _ownership

N_VARS = 4
SHAPES = [(3,), (2, 2), (), (5,)]


def _init(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def _grads(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


OPTIMIZERS = {
    "sgd": lambda: tf.optimizers.SGD(0.1),
    "momentum": lambda: tf.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: tf.optimizers.Adam(0.01),
    "optax_adam": lambda: tf.optimizers.from_optax(optax.adam(0.01)),
}


def _snapshot(variables):
    return [np.array(v.numpy(), copy=True) for v in variables]


def _all_state(opt, variables):
    return list(variables) + [w for w in opt.variables()]


def _assert_state(variables, expected, what):
    assert len(variables) == len(expected)
    for i, (v, e) in enumerate(zip(variables, expected)):
        assert not v._value.is_deleted(), f"{what}: variable {i} holds a deleted (donated) buffer"
        np.testing.assert_array_equal(v.numpy(), e, err_msg=f"{what}: variable {i} ({v.name})")


def _restore(state, snap):
    for v, x in zip(state, snap):
        v.assign(x)


def _setup(make_opt, var_cls=tf.Variable, constraint=None):
    """(variables, optimizer, all state, state before step 1, state after an uninterrupted step 1)."""
    vs = [var_cls(x, constraint=constraint) for x in _init()]
    opt = make_opt()
    opt.apply_gradients(zip([tf.constant(g) for g in _grads(0)], vs))   # slots exist from here
    state = _all_state(opt, vs)
    before = _snapshot(state)
    opt.apply_gradients(zip([tf.constant(g) for g in _grads(1)], vs))
    ref = _snapshot(state)
    _restore(state, before)
    return vs, opt, state, before, ref


def _step(opt, vs, grads=None):
    grads = [tf.constant(g) for g in _grads(1)] if grads is None else grads
    opt.apply_gradients(zip(grads, vs))


# ---------------------------------------------------------------------------
# eager optimizers: validation before the first write
# ---------------------------------------------------------------------------

BAD_THIRD = {
    "wrong_shape": lambda g: np.ones((7,), np.float32),
    "string": lambda g: "not a gradient",
    "object": lambda g: object(),
    "ragged": lambda g: [[1.0], [1.0, 2.0]],
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_invalid_gradient_for_the_third_variable_changes_nothing(name):
    vs, opt, state, before, ref = _setup(OPTIMIZERS[name])
    for bad in sorted(BAD_THIRD):
        grads = [tf.constant(g) for g in _grads(1)]
        grads[2] = BAD_THIRD[bad](grads[2])
        with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
            _step(opt, vs, grads)
        _assert_state(state, before, f"{name}/{bad}")
    _step(opt, vs)   # still usable, and gives the uninterrupted result
    _assert_state(state, ref, f"{name} after")


def test_duplicate_variable_is_refused_before_any_write():
    vs = [tf.Variable(x) for x in _init()]
    opt = tf.optimizers.SGD(0.1)
    before = _snapshot(vs)
    g = [tf.constant(x) for x in _grads()]
    with pytest.raises(ValueError, match="more than once"):
        opt.apply_gradients(zip(g + [g[0]], vs + [vs[0]]))
    _assert_state(vs, before, "duplicate")


# ---------------------------------------------------------------------------
# eager optimizers: an exception / KeyboardInterrupt at the k-th variable's update
# ---------------------------------------------------------------------------

class _Raiser:
    """A constraint that raises ``exc`` on the k-th call (0-based) after arming."""

    def __init__(self, k, exc):
        self.k, self.exc, self.calls, self.armed = k, exc, 0, False

    def __call__(self, w):
        if self.armed:
            if self.calls == self.k:
                self.calls += 1
                raise self.exc("injected at variable %d" % self.k)
            self.calls += 1
        return tf.clip_by_value(w, -1.0, 1.0)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError])
@pytest.mark.parametrize("name", ["sgd", "adam", "optax_adam"])
def test_exception_in_the_kth_update_leaves_all_untouched(name, exc):
    raiser = _Raiser(-1, exc)
    vs, opt, state, before, ref = _setup(OPTIMIZERS[name], constraint=raiser)
    for k in range(N_VARS):
        raiser.k, raiser.calls, raiser.armed = k, 0, True
        with pytest.raises(exc, match="injected"):
            _step(opt, vs)
        raiser.armed = False
        _assert_state(state, before, f"{name} k={k}")
    _step(opt, vs)
    _assert_state(state, ref, f"{name} after")


class _SigintVar(tf.Variable):
    """A Variable whose k-th write after arming raises a real SIGINT (inside the commit)."""

    arm = None   # [k, writes so far] or None

    @property
    def _value(self):
        return tf.Variable._value.__get__(self)

    @_value.setter
    def _value(self, x):
        arm = _SigintVar.arm
        if arm is not None:
            if arm[1] == arm[0]:
                signal.raise_signal(signal.SIGINT)   # the handler runs at the next bytecode
            arm[1] += 1
        tf.Variable._value.__set__(self, x)


@pytest.fixture
def sigint_default():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals need the main thread")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    _SigintVar.arm = None
    signal.signal(signal.SIGINT, old)


def _sigint_step(vs, opt, k):
    _SigintVar.arm = [k, 0]
    try:
        _step(opt, vs)
    except KeyboardInterrupt:
        return True
    finally:
        _SigintVar.arm = None
    return False


@pytest.mark.parametrize("name", ["sgd", "adam", "optax_adam"])
def test_real_sigint_inside_the_commit_is_delivered_after_it(name, sigint_default):
    vs, opt, state, before, ref = _setup(OPTIMIZERS[name], var_cls=_SigintVar)
    for k in range(N_VARS):
        assert _sigint_step(vs, opt, k), "the SIGINT must still reach the caller"
        _assert_state(state, ref, f"{name} SIGINT at write {k}")
        _restore(state, before)


def test_without_the_guard_the_same_sigint_splits_the_commit(sigint_default, monkeypatch):
    """The injection lands inside the commit: with the guard off, the step is half-applied."""
    vs, opt, state, before, ref = _setup(OPTIMIZERS["sgd"], var_cls=_SigintVar)
    monkeypatch.setattr(_ownership, "deferred_interrupts", contextlib.nullcontext)
    assert _sigint_step(vs, opt, 2)
    # writes 0 and 1 were done; the interrupt hit write 2; write 3 never ran, and the old
    # values of 2 and 3 had been donated to the compiled update: those Variables are broken
    np.testing.assert_array_equal(state[0].numpy(), ref[0])
    np.testing.assert_array_equal(state[1].numpy(), ref[1])
    assert state[2]._value.is_deleted() and state[3]._value.is_deleted()


def test_sigint_in_a_non_main_thread_commit_is_not_intercepted():
    """Elsewhere than the main thread the guard changes no handler (signal.signal would raise)."""
    handlers = []

    def work():
        with _ownership.deferred_interrupts() as d:
            handlers.append(d._old)
    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert handlers == [None]


def test_guard_restores_the_handler_and_leaves_ignored_sigint_alone(sigint_default):
    with _ownership.deferred_interrupts():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with _ownership.deferred_interrupts():
        signal.raise_signal(signal.SIGINT)   # ignored, as the user asked
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_guard_delivers_a_held_sigint_once_at_the_end(sigint_default):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _ownership.deferred_interrupts():
            signal.raise_signal(signal.SIGINT)
            done.append("rest of the block ran")
    assert done == ["rest of the block ran"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------------------
# single-Variable writes validate before writing
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
@pytest.mark.parametrize("value", [np.ones((4,), np.float32), "x", np.ones((3,), np.int32)])
def test_a_rejected_assign_leaves_the_variable_untouched(method, value):
    v = tf.Variable(np.arange(3, dtype=np.float32))
    before = v._value
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        getattr(v, method)(tf.constant(value) if not isinstance(value, str) else value)
    assert v._value is before


# ---------------------------------------------------------------------------
# tapejax.function: nothing is written unless the whole step ran
# ---------------------------------------------------------------------------

def _fn_vars():
    return [tf.Variable(x) for x in _init()]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError])
def test_exception_at_the_kth_assign_inside_a_function_leaves_all_untouched(exc):
    vs = _fn_vars()

    @tf.function
    def step(scale, k):
        for i, v in enumerate(vs):
            if i == k:
                raise exc("injected at assign %d" % k)
            v.assign_sub(scale * tf.ones_like(v))

    step(tf.constant(0.5), -1)                 # compiled and run once
    before = _snapshot(vs)
    for k in range(N_VARS):
        with pytest.raises(exc, match="injected"):
            step(tf.constant(0.5), k)          # a new Python value: a new trace, raising mid-loop
        _assert_state(vs, before, f"k={k}")
    step(tf.constant(0.5), -1)                 # still usable: a cache hit
    _assert_state(vs, [b - 0.5 for b in before], "after")


def test_an_invalid_value_for_the_third_assign_in_a_function_changes_nothing():
    vs = _fn_vars()

    @tf.function
    def step(bad):
        for i, v in enumerate(vs):
            v.assign_sub(bad if i == 2 else tf.ones_like(v))

    before = _snapshot(vs)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        step(tf.ones((7,)))
    _assert_state(vs, before, "bad third value")


def test_optimizer_step_inside_a_function_raising_mid_update_changes_nothing():
    vs = _fn_vars()
    opt = tf.optimizers.Adam(0.01)

    @tf.function
    def step(gs, k):
        opt.apply_gradients(zip(gs, vs))
        if k:
            raise KeyboardInterrupt("injected after the update was traced")

    gs = [tf.constant(g) for g in _grads(0)]
    step(gs, False)
    state = _all_state(opt, vs)
    before = _snapshot(state)
    with pytest.raises(KeyboardInterrupt):
        step(gs, True)
    _assert_state(state, before, "adam in function")


class _Boom(RuntimeError):
    pass


def _callback_step(vs, fail_at):
    """A compiled step that assigns every variable, with a host callback between assigns."""

    def check(i, x):
        if int(x) == fail_at[0] and i == fail_at[1]:
            raise _Boom("callback failed")

    @tf.function
    def step(x):
        for i, v in enumerate(vs):
            v.assign_add(x * tf.ones_like(v))
            jax.debug.callback(lambda val, i=i: check(i, val), x._value)
        return x

    return step


def test_runtime_error_inside_a_compiled_step_leaves_variables_untouched_and_alive():
    """Regression: a host callback raising at run time used to leave the assigned Variables
    holding donated (deleted) buffers: 'Array has been deleted' on the next read."""
    for k in range(N_VARS):
        vs = _fn_vars()
        step = _callback_step(vs, fail_at=(3, k))
        step(tf.constant(1.0))                 # compiled, run: a cache hit from now on
        before = _snapshot(vs)
        with pytest.raises(Exception, match="callback failed|CpuCallback|INTERNAL"):
            step(tf.constant(3.0))
        _assert_state(vs, before, f"callback failing after assign {k}")
        step(tf.constant(1.0))
        _assert_state(vs, [b + 1.0 for b in before], f"k={k} after")


def test_sigint_delivered_during_a_compiled_call_is_raised_after_the_write_back(sigint_default):
    """A real SIGINT arriving while the compiled step runs (from a host callback inside it)."""
    vs = _fn_vars()
    fire = [False]

    def maybe_interrupt(x):
        if fire[0]:
            signal.raise_signal(signal.SIGINT)

    @tf.function
    def step(x):
        for v in vs:
            v.assign_add(x * tf.ones_like(v))
        jax.debug.callback(maybe_interrupt, x._value)
        return x

    step(tf.constant(1.0))
    before = _snapshot(vs)
    fire[0] = True
    try:
        with pytest.raises(KeyboardInterrupt):
            step(tf.constant(2.0))
    finally:
        fire[0] = False
    # held while the step ran, delivered after the write-back: every Variable updated
    _assert_state(vs, [b + 2.0 for b in before], "SIGINT during the call")


def test_real_sigint_inside_the_function_write_back_is_delivered_after_it(sigint_default):
    for k in range(N_VARS):
        vs = [_SigintVar(x) for x in _init()]

        @tf.function
        def step(x):
            for v in vs:
                v.assign_add(x * tf.ones_like(v))

        step(tf.constant(1.0))
        before = _snapshot(vs)
        _SigintVar.arm = [k, 0]
        try:
            with pytest.raises(KeyboardInterrupt):
                step(tf.constant(1.0))
        finally:
            _SigintVar.arm = None
        _assert_state(vs, [b + 1.0 for b in before], f"SIGINT at write-back {k}")
