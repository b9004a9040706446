"""``compile.entries``: the steady calls of a ``tapejax.function`` (``steady_call`` after the key
lookup, ``tensors_call`` for a call of Tensors only) give the general call's results.

Oracles: the same function run with the steady calls turned off (``fast_ready`` a no-op: every
call takes ``run_entry``, the general path), compared by values, buffer ownership, tracing
counts and the programs XLA compiles (JAX's compile log, ``tests/xla_compiles.py``); NumPy for
the values of a step.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.compile import entries
from xla_compiles import TRANSFERS, compiles


def _entry(fn):
    return next(iter(fn._cache.values()))


def _slow_only(monkeypatch):
    monkeypatch.setattr(entries, "fast_ready", lambda entry: None)


def _step(v, w):
    """A step that assigns two Variables and reads a third's value through ``w``'s update."""
    @tf.function
    def step(x, y, scale=2.0):
        v.assign_add(tf.reduce_sum(x) * scale)
        w.assign(w * 0.5 + y)
        return v + tf.reduce_mean(y), w.read_value() * 3.0
    return step


CALLS = {
    "tensors": lambda step, x, y: step(x, y),                # ``tensors_call`` (defaults left out)
    "all given": lambda step, x, y: step(x, y, 2.0),         # a Python argument: the key lookup
    "keywords": lambda step, x, y: step(x, y=y, scale=2.0),  # keywords: the key lookup
}


def _run(kind, calls):
    v, w = tf.Variable(1.0), tf.Variable(np.zeros(3, np.float32))
    step = _step(v, w)
    outs, owns = [], []
    with compiles() as names:
        for i in range(calls):
            x = tf.constant(np.full(2, i, np.float32))
            y = tf.constant(np.arange(3, dtype=np.float32) + i)
            outs.append([o.numpy() for o in CALLS[kind](step, x, y)])
            owns.append((v.owns_buffer(), w.owns_buffer()))
    return step, outs, owns, [v.numpy(), w.numpy()], names


@pytest.mark.parametrize("kind", sorted(CALLS))
def test_steady_calls_equal_the_general_call(kind, monkeypatch):
    _run(kind, 1)   # (a process's first Python-float argument compiles its conversion once: not counted)
    step, outs, owns, state, names = _run(kind, 5)
    assert _entry(step).fast and (step._hot is not None) is (kind == "tensors")
    _slow_only(monkeypatch)
    step_s, outs_s, owns_s, state_s, names_s = _run(kind, 5)
    assert not _entry(step_s).fast and step_s._hot is None
    np.testing.assert_equal(outs, outs_s)
    np.testing.assert_equal(state, state_s)
    assert owns == owns_s and owns[-1] == (True, True)   # (``ownership.write_back``'s records)
    assert [n for n in names if n not in TRANSFERS] == [n for n in names_s if n not in TRANSFERS] == ["jit(prog)"]
    assert step.experimental_get_tracing_count() == step_s.experimental_get_tracing_count() == 1
    # NumPy: v += 2 * sum(x) per call; w = w / 2 + y
    v, w = 1.0, np.zeros(3, np.float32)
    for i in range(5):
        v += 2.0 * 2 * i
        w = w * 0.5 + np.arange(3, dtype=np.float32) + i
    np.testing.assert_allclose(state[0], v)
    np.testing.assert_allclose(state[1], w)


def test_a_call_of_new_shapes_leaves_the_steady_call_for_the_key_lookup():
    v = tf.Variable(0.0)

    @tf.function
    def f(x):
        v.assign_add(tf.reduce_sum(x))
        return x * 2.0

    xs = [tf.constant(np.full(2 + i % 2, i, np.float32)) for i in range(8)]
    with compiles() as names:
        for i, x in enumerate(xs):   # alternating sizes: two entries, each the steady call of its own
            out = f(x)
            np.testing.assert_array_equal(out.numpy(), np.full(2 + i % 2, 2.0 * i, np.float32))
    assert f.experimental_get_tracing_count() == 2
    assert names == ["jit(prog)", "jit(prog)"]
    assert v.numpy() == sum((2 + i % 2) * i for i in range(8))


def test_a_weak_typed_tensor_keys_as_the_general_call_does(monkeypatch):
    """A weak-typed value has its own key (JAX's aval equality): the steady call of a strong one
    does not take it, so both paths trace the same times."""
    strong = tf.constant(np.float32(1.0))
    weak = tf.convert_to_tensor(jnp.asarray(1.0))   # a Python float's weak type
    assert weak._value.weak_type and not strong._value.weak_type
    counts = []
    for slow in (False, True):
        if slow:
            _slow_only(monkeypatch)
        v = tf.Variable(0.0)

        @tf.function
        def f(x):
            v.assign_add(x)
            return v * 1.0

        for x in (strong, strong, strong, weak, weak, strong):
            f(x)
        counts.append((f.experimental_get_tracing_count(), float(v.numpy()), f._hot is not None))
    assert counts[0] == (2, 6.0, True) and counts[1] == (2, 6.0, False)


@pytest.mark.parametrize("default", ["list", "tensor"])
def test_defaults_that_are_not_python_scalars_keep_the_key_lookup(default, monkeypatch):
    """A mutable default is keyed by its value at each call (it may change between calls), a
    Tensor default is a leaf: a call leaving those out takes the key lookup, as the general one."""
    results = []
    for slow in (False, True):
        if slow:
            _slow_only(monkeypatch)
        v = tf.Variable(0.0)
        opts = [1.0]
        bias = tf.constant(10.0)

        def with_list(x, opts=opts):
            v.assign_add(x * opts[0])
            return v * 1.0

        def with_tensor(x, bias=bias):
            v.assign_add(x + bias)
            return v * 1.0

        f = tf.function(with_list if default == "list" else with_tensor)

        outs = []
        for i in range(4):
            if i == 2:
                opts[0] = 3.0   # a new value: a new key, a new trace
            outs.append(float(f(tf.constant(1.0)).numpy()))
        results.append((outs, f.experimental_get_tracing_count(), f._hot))
    (a, ta, hot_a), (b, tb, hot_b) = results
    assert a == b == ([1.0, 2.0, 5.0, 8.0] if default == "list" else [11.0, 22.0, 33.0, 44.0])
    assert ta == tb == (2 if default == "list" else 1) and hot_a is None and hot_b is None


def test_a_tensor_holding_a_tracer_takes_the_general_call_and_changes_no_variable():
    """Called from inside ``jax.jit`` on a Tensor of a tracer, the steady call declines: the general
    call refuses to put the tracer in a Variable (ValueError naming it), which keeps its value."""
    v = tf.Variable(1.0, name="count")

    @tf.function
    def step(x):
        v.assign_add(x)
        return v * 1.0

    for _ in range(3):
        step(tf.constant(1.0))
    assert step._hot is not None
    with pytest.raises(ValueError, match="count"):
        jax.jit(lambda a: step(tf.constant(a))._value)(jnp.float32(1.0))
    assert float(v.numpy()) == 4.0 and type(v._value) is type(jnp.zeros(()))
    assert float(step(tf.constant(1.0)).numpy()) == 5.0


def test_a_function_called_under_a_tape_and_outside_compiles_one_program():
    """Under a recording tape a function that assigns no Variable is one recorded op running the
    same program (its Tensors and the Variables it reads as arguments) as the call outside."""
    w = tf.Variable(np.array([1.0, 2.0], np.float32))

    @tf.function
    def f(x):
        return tf.reduce_sum(x * w)

    x = tf.constant(np.array([3.0, 4.0], np.float32))
    with compiles() as names:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        for _ in range(3):
            assert float(f(x).numpy()) == 11.0
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [1.0, 2.0])
    assert float(y.numpy()) == 11.0
    assert names.count("jit(prog)") == 1 and f.experimental_get_tracing_count() == 1


def test_a_decorated_method_takes_the_steady_call_of_its_own_instance(monkeypatch):
    """Each instance keys its own entry (TF: a method is a function per instance); the steady call
    of one instance never runs for another."""
    class Model:
        def __init__(self, k):
            self.v = tf.Variable(float(k))

        @tf.function
        def step(self, x):
            self.v.assign_add(x * 2.0)
            return self.v * 1.0

    results = []
    for slow in (False, True):
        if slow:
            _slow_only(monkeypatch)
        a, b = Model(1), Model(100)
        outs = []
        with compiles() as names:
            for i in range(6):
                m = a if i % 3 else b
                outs.append(float(m.step(tf.constant(float(i))).numpy()))
        hot = Model.step._hot_bound
        results.append((outs, a.v.numpy(), b.v.numpy(), a.step.experimental_get_tracing_count(),
                        b.step.experimental_get_tracing_count(), [n for n in names if n not in TRANSFERS],
                        sorted(k is a or k is b for k, _ in hot.values()), a.v.owns_buffer()))
    fast, slow = results
    assert fast[:6] == slow[:6]
    assert fast[0] == [100.0, 3.0, 7.0, 106.0, 15.0, 25.0] and fast[3:5] == (1, 1)
    assert fast[5] == ["jit(prog)", "jit(prog)"]
    assert fast[6] == [True, True] and slow[6] == [] and fast[7] and slow[7]


def test_an_evicted_entry_is_released_though_its_steady_call_was_the_latest():
    """The steady call a Function keeps (``_hot``) is dropped when the cache changes, so an
    evicted specialisation's program is released as before."""
    import gc
    import weakref

    v = tf.Variable(0.0)

    @tf.function
    def f(x):
        v.assign_add(tf.reduce_sum(x))
        return x * 2.0

    f._cache.resize(2)
    for _ in range(3):   # the third call runs the steady call, which the Function then keeps
        f(tf.ones(1))
    assert f._hot is not None
    ref = weakref.ref(_entry(f).jitted)
    f(tf.ones(2))        # two new shapes, one call each: the first entry is evicted
    f(tf.ones(3))
    assert len(f._cache) == 2 and f._cache.evictions == 1 and f._hot is None
    gc.collect()
    assert ref() is None, "an evicted specialisation must release its program"
    assert float(v.numpy()) == 3.0 + 2.0 + 3.0


def _keras_step():
    """A Keras model trained by a TF2 step: its variables are ``KerasVariable``s (a registered
    subclass, ``ownership.SLOT_GUARDS``), the optimizer's slots plain Variables."""
    keras = tf.keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    rng = np.random.RandomState(0)
    model.set_weights([rng.randn(*w.shape).astype(np.float32) for w in model.get_weights()])
    opt = keras.optimizers.Adam(0.1)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return model, step


def test_a_keras_models_step_takes_the_steady_call_with_the_general_calls_results(monkeypatch):
    x = tf.constant(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))
    y = tf.constant(np.arange(5, dtype=np.float32).reshape(5, 1))
    results = []
    for slow in (False, True):
        if slow:
            _slow_only(monkeypatch)
        model, step = _keras_step()
        with compiles() as names:
            losses = [float(step(x, y).numpy()) for _ in range(5)]
        entry = _entry(step)
        assert entry.fast is not slow and (entry.guards != ()) is not slow
        # (the step's programs: the first model's build may compile JAX's own small ones, cached after)
        results.append((losses, [w.numpy() for w in model.weights], [w.owns_buffer() for w in model.weights],
                        names.count("jit(prog)"), step.experimental_get_tracing_count()))
    fast, slow = results
    assert fast[0] == slow[0] and fast[2:] == slow[2:]
    np.testing.assert_equal(fast[1], slow[1])
    assert all(fast[2]) and fast[3] == 1   # (one program; traced as often either way)


def test_inside_a_keras_stateless_scope_the_steady_call_declines():
    """Inside a Keras ``StatelessScope`` a Keras variable's value is the scope's: the steady call
    (which reads the slots) declines and the general call reads what Keras gives there."""
    import keras

    v = keras.Variable(np.float32(1.0))

    @tf.function
    def f(x):
        return v * x

    one = tf.constant(2.0)
    for _ in range(3):
        assert float(f(one).numpy()) == 2.0
    entry = _entry(f)
    assert entry.fast and entry.steady([one._value]) is not entries.SLOW
    with keras.StatelessScope(state_mapping=[(v, np.float32(5.0))]):
        assert entry.steady([one._value]) is entries.SLOW
        assert float(f(one).numpy()) == 10.0
    assert float(f(one).numpy()) == 2.0
