"""tapejax.function: compiled steps with Variables as state; equal to eager; TF's tracing rules."""
import gc

import jax
import numpy as np
import pytest

import tapejax as tf


def _data(n=16, d=3, seed=0):
    rng = np.random.RandomState(seed)
    return (tf.constant(rng.randn(n, d).astype("float32")),
            tf.constant(rng.randn(n, 1).astype("float32")))


def _make_step(w, b):
    def step(x, y, lr):
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.square(pred - y))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        return loss
    return step


def test_compiled_training_equals_eager_and_traces_once():
    x, y = _data()
    we, be = tf.Variable(np.ones((3, 1), "float32")), tf.Variable(0.5)
    wc, bc = tf.Variable(np.ones((3, 1), "float32")), tf.Variable(0.5)
    eager = _make_step(we, be)
    compiled = tf.function(_make_step(wc, bc))
    for _ in range(100):
        le = eager(x, y, 0.1)
        lc = compiled(x, y, 0.1)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wc.numpy(), we.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bc.numpy(), be.numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.experimental_get_tracing_count() == 1
    # a new shape retraces; the same shape again does not
    x2, y2 = _data(n=8)
    compiled(x2, y2, 0.1)
    assert compiled.experimental_get_tracing_count() == 2
    compiled(x, y, 0.1)
    compiled(x2, y2, 0.1)
    assert compiled.experimental_get_tracing_count() == 2


def test_python_arguments_key_by_value_as_tf():
    traces = []

    @tf.function
    def h(x, n):
        traces.append(n)
        return x * n

    h(tf.constant(1.0), 2)
    h(tf.constant(2.0), 2)      # same shape, same Python value: no trace
    h(tf.constant(2.0), 3)      # new Python value: trace
    out = h(tf.constant([2.0]), 3)  # new shape: trace
    assert h.experimental_get_tracing_count() == 3   # TF 2.21 gives 3 for the same calls
    np.testing.assert_array_equal(out.numpy(), [6.0])
    # side effects run at trace time only, once per new signature (TF prints the same)
    assert traces == [2, 3, 3]


def test_numpy_and_kwargs_and_structures():
    @tf.function
    def f(d, scale=1.0, *, offset):
        return {"s": (d["a"] + d["b"]) * scale + offset, "n": d["a"].shape[0]}

    out = f({"a": np.ones(3, "float32"), "b": tf.constant([1.0, 2.0, 3.0])}, scale=2.0, offset=1.0)
    np.testing.assert_array_equal(out["s"].numpy(), [5.0, 7.0, 9.0])
    assert out["n"] == 3   # a Python value returned as is
    f({"a": np.zeros(3, "float32"), "b": tf.constant([1.0, 2.0, 3.0])}, scale=2.0, offset=1.0)
    assert f.experimental_get_tracing_count() == 1


def test_returns_none_tuple_and_variables():
    v = tf.Variable(3.0)

    @tf.function
    def f():
        v.assign_add(1.0)

    @tf.function
    def g(x):
        return x, v

    assert f() is None
    assert v.numpy() == 4.0
    a, b = g(tf.constant(1.0))
    assert a.numpy() == 1.0 and b.numpy() == 4.0


def test_variables_read_only_are_not_donated_and_assigned_are_written_back():
    w = tf.Variable([1.0, 2.0])
    c = tf.Variable([10.0, 10.0])

    @tf.function
    def step():
        w.assign(w * 2.0 + c)
        return tf.reduce_sum(w)

    held = w.read_value()        # a Tensor that aliases w's buffer must survive donation
    assert step().numpy() == 26.0
    np.testing.assert_array_equal(held.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(w.numpy(), [12.0, 14.0])
    np.testing.assert_array_equal(c.numpy(), [10.0, 10.0])
    # two Variables sharing one buffer
    a = tf.Variable([1.0])
    b = tf.Variable(a)

    @tf.function
    def both():
        a.assign_add([1.0])
        b.assign_add([2.0])

    both()
    assert a.numpy()[0] == 2.0 and b.numpy()[0] == 3.0


def test_variable_created_on_first_call_only():
    class Model:
        v = None

    m = Model()

    @tf.function
    def g(x):
        if m.v is None:
            m.v = tf.Variable(2.0)
        m.v.assign_add(1.0)
        return m.v * x

    assert g(tf.constant(3.0)).numpy() == 9.0
    assert g(tf.constant(3.0)).numpy() == 12.0
    assert m.v.numpy() == 4.0

    @tf.function
    def every_call():
        v = tf.Variable(1.0)
        return v + 1.0

    with pytest.raises(ValueError, match="singleton tf.Variables created on the first call"):
        every_call()

    calls = [0]

    @tf.function
    def later(x):
        calls[0] += 1
        if calls[0] > 1:   # only when retracing for the new shape (one trace per signature)
            tf.Variable(1.0)
        return x

    later(tf.constant(1.0))
    with pytest.raises(ValueError, match="non-first call"):
        later(tf.constant([1.0]))

    @tf.function
    def from_arg(x):
        return tf.Variable(x) * 2.0

    with pytest.raises(ValueError, match="depends on the function's arguments"):
        from_arg(tf.constant(1.0))


def test_python_control_flow_on_tensor_names_the_fix():
    @tf.function(autograph=False)
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="tapejax.cond") as ei:
        f(tf.constant(1.0))
    assert isinstance(ei.value, TypeError)

    @tf.function(autograph=False)
    def g(x):
        return float(x) * 2

    with pytest.raises(TypeError, match="tapejax.while_loop"):
        g(tf.constant(1.0))
    # converted (the default), float(x) is a cast, as TF's AutoGraph
    assert tf.function(g.python_function)(tf.constant(1)).dtype == tf.float32


def test_error_in_trace_changes_no_state():
    v = tf.Variable(1.0)

    @tf.function(autograph=False)
    def f(x):
        v.assign(5.0)
        if x > 0:
            return x
        return x

    with pytest.raises(TypeError):
        f(tf.constant(1.0))
    assert v.numpy() == 1.0


def test_input_signature():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def s(x):
        return x * 2.0

    np.testing.assert_array_equal(s(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(s([1.0, 2.0, 3.0]).numpy(), [2.0, 4.0, 6.0])
    with pytest.raises(TypeError, match="Can not cast"):
        s(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="Can not cast"):
        s(tf.constant([[1.0, 2.0]]))
    with pytest.raises(TypeError, match="input_signature has 1"):
        s(tf.constant([1.0]), tf.constant([1.0]))
    with pytest.raises(TypeError, match="TensorSpec"):
        tf.function(lambda x: x, input_signature=[3])
    with pytest.raises(TypeError, match="not a callable"):
        tf.function(5)


def test_decorated_method_and_nested_functions():
    class Model:
        def __init__(self):
            self.w = tf.Variable([[2.0]])

        @tf.function
        def __call__(self, x):
            return inner(tf.matmul(x, self.w))

    @tf.function
    def inner(z):
        return z + 1.0

    m1, m2 = Model(), Model()
    m2.w.assign([[3.0]])
    assert m1(tf.constant([[1.0]])).numpy()[0, 0] == 3.0
    assert m2(tf.constant([[1.0]])).numpy()[0, 0] == 4.0
    assert Model.__call__.experimental_get_tracing_count() == 2  # one per instance


def test_compiled_function_under_outer_tape_is_one_recorded_op():
    v = tf.Variable(3.0)
    traces = []

    def f(x):
        traces.append(1)
        return tf.tanh(x * v) * v, {"k": x * x}

    cf = tf.function(f)
    x = tf.constant(0.7)
    results = []
    for fn in (f, cf, cf, cf):
        with tf.GradientTape(persistent=True) as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y, d = fn(x)
                z = y + d["k"]
            gx, gv = t1.gradient(z, [x, v])
        results.append((z.numpy(), gx.numpy(), gv.numpy(), t2.gradient(gx, x).numpy()))
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=1e-6)
    assert len(traces) == 1 + 1                  # eager call, then one trace, then cache hits
    assert cf.experimental_get_tracing_count() == 1
    with tf.GradientTape() as t:
        t.watch(x)
        cf(x)
    assert [n.prim.name for n in t._nodes if n.prim.name.startswith("PartitionedCall")] == ["PartitionedCall[f]"]


def test_function_that_assigns_under_outer_tape_runs_op_by_op():
    v = tf.Variable(3.0)
    w = tf.Variable(1.0)

    @tf.function
    def f(x):
        w.assign_add(1.0)
        return x * v

    x = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    gx, gv = t.gradient(y, [x, v])
    assert (y.numpy(), gx.numpy(), gv.numpy(), w.numpy()) == (6.0, 3.0, 2.0, 2.0)


def test_higher_order_gradients_inside_function_equal_eager():
    def f(x):
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = x * x * x
            g = t1.gradient(y, x)
        return g, t2.gradient(g, x)

    x = tf.constant(1.5)
    ge = f(x)
    gc_ = tf.function(f)(x)
    for a, b in zip(ge, gc_):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gc_[1].numpy(), 9.0)


def test_no_python_tape_cost_on_cache_hits():
    w = tf.Variable(np.ones((3, 1), "float32"))
    b = tf.Variable(0.0)
    step = tf.function(_make_step(w, b))
    x, y = _data()
    step(x, y, 0.1)
    before = tf.cache_info()
    for _ in range(5):
        step(x, y, 0.1)
    after = tf.cache_info()
    # no recording, no replay lookup: the tape ran only while tracing
    assert (after.hits, after.misses, after.compiles) == (before.hits, before.misses, before.compiles)


def test_function_does_not_keep_arguments_alive():
    @tf.function
    def f(x):
        return x + 1.0

    big = tf.constant(np.ones(1000, "float32"))
    import weakref
    ref = weakref.ref(big)
    f(big)
    del big
    gc.collect()
    assert ref() is None


def test_mesh_arguments_need_a_mesh():
    with pytest.raises(ValueError, match="need a mesh"):
        tf.function(lambda x: x, in_specs=jax.sharding.PartitionSpec("data"))


def test_objects_key_by_identity_not_equality():
    class Model:
        def __init__(self):
            self.v = tf.Variable(1.0)

        def __eq__(self, other):      # equal models must still keep their own Variables
            return isinstance(other, Model)

        def __hash__(self):
            return 0

        @tf.function
        def inc(self):
            self.v.assign_add(1.0)

    a, b = Model(), Model()
    a.inc()
    b.inc()
    b.inc()
    assert (a.v.numpy(), b.v.numpy()) == (2.0, 3.0)


def test_input_signature_of_a_method_describes_the_arguments_after_self():
    """TF: @tf.function(input_signature=[...]) on a method binds the signature to the arguments
    after self, with TF's TypeError for a call that does not match."""
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def scale(self, x):
            return x * self.w

    m = M()
    np.testing.assert_array_equal(m.scale(tf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(m.scale([3.0]).numpy(), [6.0])
    with pytest.raises(TypeError):
        m.scale(tf.constant([1, 2]))
    with pytest.raises(TypeError):
        m.scale(tf.constant([1.0]), tf.constant([1.0]))


# -- the steady call's fast path (``compile.entries.run_fast``) ---------------------------------

def _entry(fn):
    return next(iter(fn._cache.values()))


def _slow_only(monkeypatch):
    """Calls never take the fast path (the oracle: ``run_entry``'s values and records)."""
    from tapejax.compile import entries
    monkeypatch.setattr(entries, "fast_ready", lambda entry: None)


def _pass_through_step(v, w, keep):
    """A step whose new values are fresh (``v``), an argument passed through (``w``), and one also
    returned as an output (``keep``)."""
    @tf.function
    def step(x):
        v.assign_add(x * 2.0)
        w.assign(x)
        keep.assign(v * 3.0)
        return keep.read_value(), v + 1.0
    return step


def _fresh_step(v, w, keep):
    """A step whose every new value is a buffer the program makes."""
    @tf.function
    def step(x):
        v.assign_add(x * 2.0)
        w.assign(x + 0.0)
        keep.assign(v * 3.0)
        return v + 1.0
    return step


@pytest.mark.parametrize("make, fast", [(_fresh_step, True), (_pass_through_step, False)])
def test_steady_call_values_and_buffer_ownership_equal_the_slow_path(make, fast, monkeypatch):
    records = []
    for slow in (False, True):
        if slow:
            _slow_only(monkeypatch)
        v, w, keep = tf.Variable([1.0, 2.0]), tf.Variable([0.0, 0.0]), tf.Variable([0.0, 0.0])
        step = make(v, w, keep)
        outs, owns = [], []
        for k in range(4):
            outs.append(step(tf.constant([float(k), 0.5])))
            owns.append((v.owns_buffer(), w.owns_buffer(), keep.owns_buffer()))
        assert _entry(step).fast is (fast and not slow)
        assert step.experimental_get_tracing_count() == 1
        # every returned Tensor is still alive (never donated by a later call)
        records.append((jax.tree_util.tree_map(np.asarray, outs), owns,
                        [v.numpy(), w.numpy(), keep.numpy()]))
    (oa, wa, va), (ob, wb, vb) = records
    assert wa == wb   # the same ownership records (``ownership.write_back``'s)
    for a, b in zip(jax.tree_util.tree_leaves(oa) + va, jax.tree_util.tree_leaves(ob) + vb):
        np.testing.assert_array_equal(a, b)


def test_steady_call_of_a_training_step_equals_the_slow_path(monkeypatch):
    results = []
    for fast in (True, False):
        if not fast:
            _slow_only(monkeypatch)
        w = tf.Variable(np.ones((3, 1), "float32"))
        b = tf.Variable(0.0)
        opt = tf.keras.optimizers.Adam(0.1)
        x, y = _data()

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return loss

        losses = [step(x, y).numpy() for _ in range(5)]
        assert _entry(step).fast is fast
        results.append((losses, w.numpy(), b.numpy(), [s.numpy() for s in opt.variables()]))
    (la, wa, ba, sa), (lb, wb, bb, sb) = results
    np.testing.assert_array_equal(la, lb)
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ba, bb)
    for a, c in zip(sa, sb):
        np.testing.assert_array_equal(a, c)


def test_fast_path_reads_a_variable_that_does_not_own_its_value_through_the_slow_path():
    """A Variable whose buffer was handed out (a kept read) is copied before donation, as always:
    the kept Tensor survives the call."""
    v = tf.Variable([1.0, 2.0])

    @tf.function
    def step(x):
        v.assign_add(x)

    for _ in range(3):
        step(tf.constant([1.0, 1.0]))
    assert _entry(step).fast and v.owns_buffer()
    kept = v.read_value()   # hands the buffer out
    assert not v.owns_buffer()
    step(tf.constant([1.0, 1.0]))
    np.testing.assert_array_equal(kept.numpy(), [4.0, 5.0])
    np.testing.assert_array_equal(v.numpy(), [5.0, 6.0])
    v.assign_add(tf.constant([1.0, 1.0]))   # a pending or eager update: read again by the next call
    step(tf.constant([1.0, 1.0]))
    np.testing.assert_array_equal(v.numpy(), [7.0, 8.0])


def test_fast_path_is_not_taken_for_variable_subclasses_or_callbacks():
    class MyVariable(tf.Variable):
        pass

    v = MyVariable(1.0)

    @tf.function
    def step(x):
        v.assign_add(x)
        return v.read_value()

    @tf.function
    def printing(x):
        tf.print(x)
        return x + 1.0

    for _ in range(3):
        step(tf.constant(1.0))
        printing(tf.constant(1.0))
    assert not _entry(step).fast and not _entry(printing).fast
    assert v.numpy() == 4.0


@pytest.mark.parametrize("kind", ["tensors", "keyed"])
def test_interrupt_the_moment_the_compiled_call_returns_is_raised_after_the_write_back(kind):
    """A KeyboardInterrupt raised right after the fast path's compiled call has returned (from a
    profile hook on the C call that stored its result, i.e. as a real Ctrl-C arriving then is
    delivered): every assigned Variable holds its new value, alive, and the interrupt is raised.
    Both steady calls: a call of Tensors only (``entries.tensors_call``) and one with a Python
    argument (``entries.steady_call``, after the key lookup)."""
    import signal
    import sys

    vs = [tf.Variable(np.full((3,), float(i), "float32")) for i in range(3)]

    @tf.function
    def step(x, scale=1.0):
        for v in vs:
            v.assign_add(x * scale * tf.ones_like(v))

    def call():
        return step(tf.constant(1.0)) if kind == "tensors" else step(tf.constant(1.0), 1.0)

    for _ in range(3):
        call()
    entry = _entry(step)
    assert entry.fast and (step._hot is not None) is (kind == "tensors")
    before = [v.numpy() for v in vs]
    code = (entry.hot[1] if kind == "tensors" else entry.steady).__code__

    def hook(frame, event, arg):
        if event == "c_return" and frame.f_code is code and getattr(arg, "__name__", "") == "extend":
            sys.setprofile(None)
            raise KeyboardInterrupt   # what the SIGINT handler raises at this point

    old = signal.getsignal(signal.SIGINT)
    sys.setprofile(hook)
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        sys.setprofile(None)
        signal.signal(signal.SIGINT, old)
    for v, b in zip(vs, before):
        assert not v._value.is_deleted()
        np.testing.assert_array_equal(v.numpy(), b + 1.0)
    call()   # and the next call runs
    for v, b in zip(vs, before):
        np.testing.assert_array_equal(v.numpy(), b + 2.0)
    assert step.experimental_get_tracing_count() == 1


def test_python_numbers_returned_by_a_function_are_tensors_as_in_tf():
    """TF's function outputs: a Python bool / int / float or a NumPy value becomes a constant
    Tensor (int32, float32, bool); None and strings stay; under a tape and the steady call too."""
    @tf.function
    def f(x):
        return x * 2.0, True, 3, 2.5, np.float32(1.5), None, "tag", [1, {"k": False}]

    for _ in range(2):   # the first call and the steady call
        y, b, i, fl, npv, none, s, rest = f(tf.constant(1.0))
        assert [type(v).__name__ for v in (b, i, fl, npv, rest[0], rest[1]["k"])] == ["Tensor"] * 6
        assert [v.dtype.name for v in (b, i, fl, npv, rest[0])] == ["bool", "int32", "float32", "float32", "int32"]
        assert (bool(b), int(i), float(fl), none, s) == (True, 3, 2.5, None, "tag")
    x = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y, b = f(x)[:2]
    assert isinstance(b, tf.Tensor) and float(tape.gradient(y, x)) == 2.0


def test_a_python_list_appended_in_a_staged_loop_is_tf_s_inaccessible_tensor_error():
    """TF's performance guide: ``acc.append(i * 2)`` inside ``for i in tf.range(n)`` leaks the loop
    body's tensors; TF raises InaccessibleTensorError (a ValueError) when the function traces; a
    value of a JAX trace around the function stays a usable constant."""
    from tapejax.core.errors import InaccessibleTensorError

    @tf.function
    def with_list(n):
        acc = []
        for i in tf.range(n):
            acc.append(i * 2)
        return tf.stack(acc)

    with pytest.raises(InaccessibleTensorError, match="cannot be accessed"):
        with_list(tf.constant(3))
    assert issubclass(InaccessibleTensorError, ValueError)

    def outer(y):
        @tf.function
        def h(z):
            return z + tf.constant(y)
        return h(tf.constant(1.0))._value

    assert float(jax.jit(outer)(2.0)) == 3.0


def test_a_checked_function_under_a_tape_is_one_op_and_still_checks():
    """A function whose program holds run-time checks (a TensorArray written at ``tf.range``'s index,
    ``check_numerics``) called under a tape is recorded as its one traced program, as TF records the
    call: the Python body does not run again, the gradient is the op-by-op one, a failed check
    raises InvalidArgumentError."""
    traced = []

    @tf.function
    def f(x):
        traced.append(1)
        ta = tf.TensorArray(tf.float32, size=3)
        s = tf.zeros([2])
        for i in tf.range(3):
            s = tf.tanh(x[i] + 0.5 * s)
            ta = ta.write(i, s)
        return tf.debugging.check_numerics(tf.math.log(tf.reduce_sum(ta.stack() ** 2)), "log")

    x = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2) / 6.0)
    f(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    g = tape.gradient(y, x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y2 = f.python_function(x)
    np.testing.assert_allclose(g.numpy(), tape.gradient(y2, x).numpy(), rtol=1e-5)
    assert len(traced) == 2   # (the one trace, then the eager python_function)
    with tf.GradientTape() as tape:
        z = tf.zeros([3, 2])
        tape.watch(z)
        with pytest.raises(tf.errors.InvalidArgumentError):
            f(z)


def test_typed_prng_key_outputs_are_jax_key_arrays():
    """``key, loss = step(key, x)``: a typed key (``jax.random.key``) the function returns comes
    back as the JAX key array, not a Tensor (which has no dtype for it: jax.random.key_data of it
    was TypeError "Cannot convert value key<fry> to a tapejax DType"), on the traced call and the
    steady ones, alone or in a structure; the keys and values are pure JAX's."""
    draw = tf.op(lambda k, x: (jax.random.split(k)[0], x * jax.random.normal(jax.random.split(k)[1], x.shape)))

    @tf.function
    def step(key, x):
        key, y = draw(key, x)
        return key, tf.reduce_sum(y)
    only_key = tf.function(lambda key: draw(key, tf.ones([2]))[0])
    key, want_key = jax.random.key(0), jax.random.key(0)
    for _ in range(5):
        key, s = step(key, tf.constant([1.0, 2.0]))
        want_key, y = draw.__wrapped__(want_key, jax.numpy.array([1.0, 2.0]))
        assert isinstance(key, jax.Array) and jax.numpy.issubdtype(key.dtype, jax.dtypes.prng_key)
        np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(want_key))
        np.testing.assert_allclose(float(s), float(y.sum()), rtol=1e-6)
        np.testing.assert_array_equal(jax.random.key_data(only_key(key)),
                                      jax.random.key_data(jax.random.split(key)[0]))


def test_typed_prng_key_arguments_are_jax_key_arrays_in_the_body():
    """A typed key argument reaches the body as the JAX key array, as in ``jax.jit``, so the body
    calls ``jax.random`` on it (it was a Tensor there: ``jax.random.split(key)`` raised TypeError
    "Cannot convert value key<fry> to a tapejax DType"); in a structure too; one trace for all
    keys, and the keys and values are jax.jit's."""
    seen = []

    @tf.function
    def step(key, state):
        seen.append(type(key))
        key, sub = jax.random.split(key)
        return key, state["x"] + jax.random.normal(sub, (2,)) + jax.random.uniform(state["k"], (2,))

    def pure(key, state):
        key, sub = jax.random.split(key)
        return key, state["x"] + jax.random.normal(sub, (2,)) + jax.random.uniform(state["k"], (2,))
    ref = jax.jit(pure)
    key = want = jax.random.key(1)
    for i in range(3):
        state = {"x": np.array([1.0, 2.0], np.float32), "k": jax.random.key(10 + i)}
        key, y = step(key, state)
        want, y_want = ref(want, state)
        np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(want))
        np.testing.assert_allclose(np.asarray(y), np.asarray(y_want), rtol=1e-6)
    assert step.experimental_get_tracing_count() == 1
    assert not issubclass(seen[0], tf.Tensor)


def test_a_step_that_grows_a_variable_of_declared_shape_traces_again_at_each_new_shape():
    """A compiled step that gives a Variable of declared shape ``[None, 2]`` a longer value
    (``buf.assign(tf.concat([buf, x], 0))``) writes it back and drops its program, so the next
    call traces at the new shape (it ran the old program on the longer buffer: an XLA operand
    type mismatch); a step that keeps the shape keeps its program and its steady call."""
    buf = tf.Variable(tf.zeros([0, 2]), shape=tf.TensorShape([None, 2]), trainable=False)
    keep = tf.Variable(tf.zeros([1, 2]), shape=tf.TensorShape([None, 2]))

    @tf.function
    def grow(x):
        buf.assign(tf.concat([buf, x], 0))
        return tf.shape(buf)

    @tf.function
    def same(x):
        keep.assign(keep + x)
        return tf.reduce_sum(keep)

    rows = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    shapes = [grow(tf.constant([r])).numpy().tolist() for r in rows]
    assert shapes == [[1, 2], [2, 2], [3, 2]]
    np.testing.assert_array_equal(buf.numpy(), np.array(rows, np.float32))
    assert buf.shape.as_list() == [None, 2] and grow.experimental_get_tracing_count() == 3   # (TF: the declared shape)
    for _ in range(4):
        total = same(tf.constant([[1.0, 1.0]]))
    assert total.numpy() == 8.0 and same.experimental_get_tracing_count() == 1


def test_a_variable_of_declared_shape_assigned_another_shape_makes_its_functions_trace_again():
    """A function reading (or assigning) a Variable made with ``shape=[None, 3]`` drops its programs
    when an ``assign`` gives the Variable another shape: the next call traces again and sees the
    new shape (its program had the old one baked in: ``tf.shape(v)`` would be stale); a function
    that does not read it keeps its program."""
    v = tf.Variable(tf.ones([2, 3]), shape=[None, 3])
    other = tf.Variable(1.0)

    @tf.function
    def total():
        return tf.reduce_sum(v), tf.shape(v)

    @tf.function
    def unrelated(x):
        return x * other

    assert [t.numpy().tolist() for t in total()] == [6.0, [2, 3]]
    unrelated(tf.constant(2.0))
    v.assign(tf.ones([5, 3]))
    assert [t.numpy().tolist() for t in total()] == [15.0, [5, 3]]
    unrelated(tf.constant(2.0))
    assert total.experimental_get_tracing_count() == 2
    assert unrelated.experimental_get_tracing_count() == 1
    v.assign(tf.zeros([5, 3]))   # (the same shape: the program stays)
    assert total()[0].numpy() == 0.0 and total.experimental_get_tracing_count() == 2


def test_a_dict_argument_keeps_the_callers_key_order_in_the_body():
    """TF's function body sees a dict argument in the caller's key order (its values, ``items()``
    and a ``concat`` of them in that order); tapejax gave the keys sorted (the template's order).
    A call with another order reuses the trace, as in TF, whose body ran once."""
    seen = []

    @tf.function
    def step(batch, extra):
        seen.append((list(batch), list(extra["nested"])))
        return tf.concat(list(batch.values()), -1), {k: v * 2 for k, v in batch.items()}

    batch = {"z": tf.constant([1.0]), "mask": tf.constant([2.0]), "a": tf.constant([3.0])}
    joined, doubled = step(batch, {"nested": {"y": 1, "b": tf.constant(0.0)}})
    assert seen == [(["z", "mask", "a"], ["y", "b"])]
    assert joined.numpy().tolist() == [1.0, 2.0, 3.0]
    assert list(doubled) == ["z", "mask", "a"] and doubled["mask"].numpy().tolist() == [4.0]
    joined, _ = step({"a": tf.constant([3.0]), "z": tf.constant([1.0]), "mask": tf.constant([2.0])},
                     {"nested": {"y": 1, "b": tf.constant(0.0)}})
    assert step.experimental_get_tracing_count() == 1 and joined.numpy().tolist() == [1.0, 2.0, 3.0]


def test_keyword_arguments_reach_the_body_sorted_by_name_as_in_tf():
    """TF's function body gets ``**kwargs`` sorted by name (a dict argument keeps its order)."""
    seen = []

    @tf.function
    def f(**kw):
        seen.append(list(kw))
        return tf.stack(list(kw.values()))

    assert f(z=tf.constant(1.0), a=tf.constant(2.0)).numpy().tolist() == [2.0, 1.0]
    assert seen == [["a", "z"]]


def test_an_input_signatures_dict_gives_the_body_the_specs_key_order():
    """With a dict in ``input_signature`` (or ``get_concrete_function``'s specs) TF's body sees the
    spec's key order, whatever the call's; tapejax gave sorted keys."""
    seen = []
    spec = {"z": tf.TensorSpec([], tf.float32), "a": tf.TensorSpec([], tf.float32)}

    @tf.function(input_signature=[spec])
    def f(d):
        seen.append(list(d))
        return tf.stack(list(d.values()))

    assert f({"a": tf.constant(2.0), "z": tf.constant(1.0)}).numpy().tolist() == [1.0, 2.0]

    @tf.function
    def g(d):
        seen.append(list(d))
        return tf.stack(list(d.values()))

    g.get_concrete_function(spec)
    assert g({"a": tf.constant(2.0), "z": tf.constant(1.0)}).numpy().tolist() == [1.0, 2.0]
    assert seen == [["z", "a"], ["z", "a"]]
