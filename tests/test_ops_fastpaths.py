"""The ops' fast paths (``tapejax/ops/_registry.py`` and ``core.bind.bind1``/``bind2``): cached
Python-number constants, the ``plain_jit`` calls that check shapes and dtypes when JAX traces,
and static parameters bound into the jitted call.  Oracle: the generic ``bind`` path (same values, same recorded node) and
TF's errors for the inputs the fast paths hand back to the checked path."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.bind import REGISTRY, bind, bind2
from tapejax.ops import _registry as R


def _nodes(fn, x):
    with tf.GradientTape() as t:
        t.watch(x)
        out = fn(x)
    return out, t._nodes


# -- Python numbers as cached constants -------------------------------------------

def test_scalar_constant_is_cached_per_value_and_dtype():
    a = R.scalar_constant(0.37, np.dtype(np.float32))
    assert isinstance(a, jax.Array) and a.dtype == np.float32 and float(a) == pytest.approx(0.37)
    assert R.scalar_constant(0.37, np.dtype(np.float32)) is a
    b = R.scalar_constant(0.37, np.dtype(jnp.bfloat16))
    assert b.dtype == jnp.bfloat16 and b is not a
    assert R.scalar_constant(2, np.dtype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("number, dtype", [
    (float("nan"), np.float32),                                        # no key
    (0.5, np.float16),                                                 # could overflow with a warning
    (3, np.int32), (2.5, np.int32),                                    # int tensors keep TF's checks
    (2 ** 40, np.float32), (True, np.float32),
])
def test_scalar_constant_leaves_other_numbers_alone(number, dtype):
    assert R.scalar_constant(number, np.dtype(dtype)) is number


def test_scalar_constants_are_bounded():
    cache = R._SCALARS
    old = cache.maxsize
    cache.resize(3)
    try:
        before = cache.evictions
        x = tf.constant([1.0, 2.0])
        for k in range(1, 11):
            np.testing.assert_allclose((x * (k + 0.5)).numpy(), [k + 0.5, 2 * (k + 0.5)])
            assert len(cache) <= 3
        assert cache.evictions - before >= 7
    finally:
        cache.resize(old)


def test_python_numbers_give_the_values_of_the_generic_path():
    x = tf.constant(np.array([1.5, -2.0, 3.25], np.float32))
    mul = REGISTRY["Mul"]
    for got, want in ((x * 0.1, bind(mul, x, 0.1)), (0.1 * x, bind(mul, 0.1, x)),
                      (x - 1, bind(REGISTRY["Sub"], x, 1)), (1 - x, bind(REGISTRY["Sub"], 1, x)),
                      (x / 3.0, bind(REGISTRY["RealDiv"], x, 3.0)),
                      (x ** 2, bind(REGISTRY["Pow"], x, 2))):
        assert got.dtype == want.dtype == tf.float32
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_zeros_are_cached_with_their_sign():
    """0.0 and -0.0 are equal keys: each zero is cached apart (``tf.maximum(x, 0.0)`` then takes
    the fast path), and -0.0 stays negative."""
    f32 = np.dtype(np.float32)
    pos, neg = R.scalar_constant(0.0, f32), R.scalar_constant(-0.0, f32)
    assert isinstance(pos, jax.Array) and isinstance(neg, jax.Array) and pos is not neg
    assert R.scalar_constant(0.0, f32) is pos and R.scalar_constant(-0.0, f32) is neg
    assert math.copysign(1, float(pos)) == 1 and math.copysign(1, float(neg)) == -1
    assert R.scalar_constant(0, f32).dtype == f32


def test_signed_zero_and_nan_keep_their_meaning():
    x = tf.constant([1.0, 2.0])
    assert all(math.copysign(1, v) == -1 for v in (x * -0.0).numpy())
    assert all(math.copysign(1, v) == 1 for v in (x * 0.0).numpy())
    assert np.isnan((x * float("nan")).numpy()).all()


def test_number_types_follow_the_tensor_dtype():
    assert (tf.constant([1, 2]) * 2).dtype == tf.int32
    with pytest.raises(TypeError):
        tf.constant([1, 2]) * 2.5
    h = tf.constant([1.0], dtype=tf.float16)
    assert (h * 1e10).dtype == tf.float16 and np.isinf((h * 1e10).numpy()).all()
    b = tf.constant([1.0], dtype=tf.bfloat16)
    assert (b * 0.1).dtype == tf.bfloat16


def test_gradients_through_python_numbers():
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(3.0 * x * x - 1 + tf.clip_by_value(x, 1.5, 2.5))
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [6.0, 13.0, 18.0])


def test_a_constant_first_made_while_a_function_traces_is_concrete():
    c = tf.constant([1.0, 2.0])
    factor = 0.123456789  # a number no other test uses, so the first conversion happens in the trace

    @tf.function
    def f(x):
        return x * factor + c * factor

    np.testing.assert_allclose(f(tf.constant([1.0, 1.0])).numpy(), [0.24691358, 0.37037037], rtol=1e-6)
    cached = R._SCALARS.get((factor, np.dtype(np.float32)))
    assert cached is not None and not isinstance(cached, jax.core.Tracer)
    np.testing.assert_allclose((c * factor).numpy(), [0.123456789, 0.24691358], rtol=1e-6)


def test_clip_by_value_with_python_bounds_matches_tensor_bounds():
    x = tf.constant(np.linspace(-1, 1, 9).astype(np.float32))
    lo, hi = tf.constant(-0.5), tf.constant(0.5)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a = tf.clip_by_value(x, -0.5, 0.5)
        b = tf.clip_by_value(x, lo, hi)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    # (a gather's gradient is IndexedSlices: compared densified)
    ga, gb = (tf.convert_to_tensor(t.gradient(o, x)) for o in (a, b))
    np.testing.assert_array_equal(ga.numpy(), gb.numpy())
    assert tf.clip_by_value(tf.constant([1, 5, 9]), 2, 6).numpy().tolist() == [2, 5, 6]


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "eager"])
def test_clip_by_value_of_a_pending_value_or_a_variable_converts_python_bounds(deferred):
    """A gradient clipped by Python numbers (``tf.clip_by_value(g, -1.0, 1.0)``) and a Variable
    clipped likewise take the bounds as cached constants of their dtype: the values and
    gradients of Tensor bounds."""
    v = tf.Variable(np.linspace(-2, 2, 9).astype(np.float32))
    lo, hi = tf.constant(-0.5), tf.constant(0.5)
    prev = tf.set_deferred_execution(deferred)
    try:
        with tf.GradientTape(persistent=True) as t:
            y = v * 3.0
            outs = [tf.clip_by_value(y, -0.5, 0.5), tf.clip_by_value(y, lo, hi),
                    tf.clip_by_value(v, -0.5, 0.5), tf.clip_by_value(v, lo, hi)]
        grads = [t.gradient(o, v) for o in outs]
    finally:
        tf.set_deferred_execution(prev)
    for a, b in ((0, 1), (2, 3)):
        np.testing.assert_array_equal(outs[a].numpy(), outs[b].numpy())
        np.testing.assert_array_equal(grads[a].numpy(), grads[b].numpy())
    assert R.constant_dtype(v) == np.float32 and R.constant_dtype(tf.Variable([1, 2])) == np.int32


def test_one_hot_default_values_are_numbers_cast_by_the_op(monkeypatch):
    """The default on / off values (1, 0) go to the op as numbers (no conversion per call) and
    come out in every dtype as TF's."""
    from tapejax.ops import array as A
    converted = []
    real = A.convert_to_tensor
    monkeypatch.setattr(A, "convert_to_tensor", lambda v, *a, **k: (converted.append(v), real(v, *a, **k))[1])
    lab = tf.constant([0, 2])
    for dtype in (tf.float32, tf.int32, tf.bool, tf.float16):
        a = tf.one_hot(lab, 3, dtype=dtype)
        assert a.dtype == dtype and a.numpy().tolist() == [[1, 0, 0], [0, 0, 1]]
    assert all(v is lab for v in converted)
    assert tf.one_hot([1], 2, on_value=5.0, off_value=-1.0).numpy().tolist() == [[-1.0, 5.0]]
    f = tf.function(lambda i: tf.one_hot(i, 4))
    assert f(tf.constant([3])).numpy().tolist() == [[0.0, 0.0, 0.0, 1.0]]


# -- plain_jit: checks when JAX traces ---------------------------------------------

def test_matmul_fast_path_hands_bad_ranks_and_dtypes_to_the_checked_path():
    m = tf.constant(np.ones((2, 2), np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="ndims must be >= 2"):
        tf.matmul(tf.constant([1.0, 2.0]), m)
    with pytest.raises(tf.errors.InvalidArgumentError, match="int32"):
        tf.matmul(tf.constant([[1, 2], [3, 4]]), m)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Matrix size-incompatible"):
        tf.matmul(tf.constant(np.ones((2, 3), np.float32)), m)
    np.testing.assert_array_equal(tf.matmul(m, m).numpy(), np.full((2, 2), 2.0))  # still fine after


def test_gather_fast_path_hands_bad_indices_to_the_checked_path():
    x = tf.constant([1.0, 2.0, 3.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Tindices"):
        tf.gather(x, tf.constant([0.0, 1.0]))
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.gather(tf.constant(1.0), tf.constant([0]))
    assert tf.gather(x, tf.constant([2, 0])).numpy().tolist() == [3.0, 1.0]


def test_plain_jit_guard_runs_only_when_tracing():
    calls = []
    p = tf.define_op("TestOnlyPlainGuard", lambda a, b: a + b)

    def guard(a, b):
        calls.append((a.shape, b.shape))
        return a.shape == b.shape

    fn = R.plain_jit(p, guard)
    x = tf.constant([1.0, 2.0])
    for _ in range(3):
        assert bind2(p, fn, x, x).numpy().tolist() == [2.0, 4.0]
    assert calls == [((2,), (2,))]
    with pytest.raises(R.NotPlain):
        bind2(p, fn, x, tf.constant(1.0))


def test_kind_jit_checks_the_dtype_only_when_tracing():
    traced = []
    p = tf.define_op("TestOnlyKindGuard", lambda a: traced.append(a.dtype) or a * 2)
    fn = R.kind_jit(p, "f")
    for _ in range(3):
        assert fn(jnp.asarray([1.0, 2.0])).tolist() == [2.0, 4.0]
    assert traced == [np.dtype(np.float32)]         # one trace for three calls
    with pytest.raises(R.NotPlain):
        fn(jnp.asarray([1, 2]))
    assert len(traced) == 1                         # refused before the op's function ran


@pytest.mark.parametrize("recording", [False, True])
def test_unary_fast_path_refuses_other_dtypes_with_tfs_error(recording):
    """exp's dtype list (float, complex) is checked in the jitted call: an int Tensor still gets
    TF's InvalidArgumentError; floats of every width and complex pass, with or without a tape."""
    import contextlib
    with (tf.GradientTape() if recording else contextlib.nullcontext()) as t:
        x = tf.constant([0.0])
        if recording:
            t.watch(x)
        with pytest.raises(tf.errors.InvalidArgumentError, match="allowed values"):
            tf.exp(tf.constant([1, 2]))
        for dt in (tf.float16, tf.bfloat16, tf.float32, tf.complex64):
            np.testing.assert_allclose(np.asarray(tf.exp(tf.cast(x, dt)).numpy(), np.complex64), [1.0])
    if recording:
        names = [n.prim.name for n in t._nodes]   # the int call recorded nothing; nor the float32
        assert names == ["Cast", "Exp", "Cast", "Exp", "Exp", "Cast", "Exp"]   # cast (x itself, as TF)


# -- recorded nodes: the fast paths record what bind records -------------------------

@pytest.mark.parametrize("case", ["reduce_sum_axis", "reduce_mean_keepdims", "gather", "scalar_mul",
                                  "clip", "matmul"])
def test_fast_paths_record_binds_node(case):
    x = tf.constant(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    idx = tf.constant([1, 0])
    fast, slow = {
        "reduce_sum_axis": (lambda t: tf.reduce_sum(t, axis=1),
                            lambda t: bind(REGISTRY["Sum"], t, axis=1, keepdims=False)),
        "reduce_mean_keepdims": (lambda t: tf.reduce_mean(t, axis=-1, keepdims=True),
                                 lambda t: bind(REGISTRY["Mean"], t, axis=-1, keepdims=True)),
        "gather": (lambda t: tf.gather(t, idx), lambda t: bind(REGISTRY["GatherV2"], t, idx)),
        "scalar_mul": (lambda t: t * 0.5, lambda t: bind(REGISTRY["Mul"], t, 0.5)),
        "clip": (lambda t: tf.clip_by_value(t, 0.0, 1.0),
                 lambda t: bind(REGISTRY["ClipByValue"], t, 0.0, 1.0)),
        "matmul": (lambda t: tf.matmul(t, t), lambda t: bind(REGISTRY["MatMul"], t, t)),
    }[case]
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a, b = fast(x), slow(x)
    na, nb = t._nodes
    assert (na.prim, na.static, na.refs, na.sig) == (nb.prim, nb.static, nb.refs, nb.sig)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    # (a gather's gradient is IndexedSlices: compared densified)
    ga, gb = (tf.convert_to_tensor(t.gradient(o, x)) for o in (a, b))
    np.testing.assert_array_equal(ga.numpy(), gb.numpy())


@pytest.mark.parametrize("case", ["tensors", "pending_and_tensor", "number_left", "pending_number",
                                  "variable", "variable_left"])
def test_binary_deferred_fast_path_records_binds_node(case):
    """Binary ops while plain tapes record (``bind2`` through the deferred executor): bind's node,
    values and gradient."""
    x = tf.constant(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    y = tf.constant(np.array([1.5, -2.0], np.float32))
    v = tf.Variable(np.array([0.75, 3.0], np.float32))
    mul, sub = REGISTRY["Mul"], REGISTRY["Sub"]
    fast, slow = {
        "tensors": (lambda t: t - y, lambda t: bind(sub, t, y)),
        "pending_and_tensor": (lambda t: tf.exp(t) * y, lambda t: bind(mul, tf.exp(t), y)),
        "number_left": (lambda t: 3.0 - t, lambda t: bind(sub, 3.0, t)),
        "pending_number": (lambda t: tf.exp(t) * 0.5, lambda t: bind(mul, tf.exp(t), 0.5)),
        "variable": (lambda t: t * v, lambda t: bind(mul, t, v)),
        "variable_left": (lambda t: v - t, lambda t: bind(sub, v, t)),
    }[case]
    tapes = []
    prev = tf.set_deferred_execution(True)   # (whatever TAPEJAX_DEFERRED says)
    try:
        for fn in (fast, slow):
            with tf.GradientTape(persistent=True) as t:
                t.watch(x)
                out = fn(x)
            tapes.append((t, out))
    finally:
        tf.set_deferred_execution(prev)
    (ta, a), (tb, b) = tapes
    assert type(a).__name__ == "Pending"   # deferred (bind keeps a raw Python number eager)
    assert [(n.prim, n.static, n.refs, n.sig) for n in ta._nodes] == \
        [(n.prim, n.static, n.refs, n.sig) for n in tb._nodes]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    for src in (x, v):
        ga, gb = ta.gradient(a, src), tb.gradient(b, src)
        assert (ga is None) == (gb is None)
        if ga is not None:
            np.testing.assert_array_equal(ga.numpy(), gb.numpy())


def test_binary_deferred_fast_path_errors_before_reading():
    """A bad broadcast or dtype mix raises TF's error and reads and records nothing."""
    v = tf.Variable(np.ones(3, np.float32))
    with tf.GradientTape() as t:
        with pytest.raises(tf.errors.InvalidArgumentError, match="Op:Mul"):
            tf.constant(np.ones(2, np.float32)) * v
        with pytest.raises(tf.errors.InvalidArgumentError, match="int32"):
            v + tf.constant([1, 2, 3])
        with pytest.raises(TypeError):
            tf.constant([1, 2]) * 0.5
    assert t._nodes == [] and t.watched_variables() == ()


def test_fast_paths_respect_gradient_override_map():
    @tf.RegisterGradient("TestOnlyFastPathDoubleSum")
    def _double(op, grad):
        return [2.0 * tf.ones_like(op.inputs[0]) * grad[..., None]]

    x = tf.constant(np.ones((2, 3), np.float32))
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.gradient_override_map({"Sum": "TestOnlyFastPathDoubleSum"}):
            y = tf.reduce_sum(x, axis=1)
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), np.full((2, 3), 2.0))


def test_fixed_static_callables_are_cached_and_bounded():
    p = REGISTRY["Sum"]
    key = (("axis", 0), ("keepdims", True))
    assert p.fixed(key) is p.fixed(key)
    assert tf.cache_stats()["eager_jit_fixed"].maxsize == 256   # (every op with static parameters runs through them)


def test_static_axis_fast_path_errors_match_the_checked_path():
    x = tf.constant([1.0, 2.0])
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.reduce_sum(x, axis=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="allowed values"):
        tf.reduce_logsumexp(tf.constant([1, 2]), axis=0)


def test_matmul_fast_path_reads_variables_as_bind_does():
    x = tf.constant(np.array([[1.0, 2.0]], np.float32))
    w = tf.Variable(np.array([[0.5], [-1.0]], np.float32))
    frozen = tf.Variable(np.array([[2.0], [3.0]], np.float32), trainable=False)
    with tf.GradientTape(persistent=True) as t:
        a = tf.matmul(x, w)
        b = bind(REGISTRY["MatMul"], x, w)
        c = tf.matmul(x, frozen)
    names = [n.prim.name for n in t._nodes]
    assert names == ["ReadVariableOp", "MatMul", "ReadVariableOp", "MatMul"]
    from tapejax.autodiff.nodes import OUT
    assert t._nodes[1].refs == (None, 0 * OUT) and t._nodes[3].refs == (None, 2 * OUT)  # their reads
    assert t._nodes[1].static == t._nodes[3].static == ()
    assert t.watched_variables() == (w,)
    np.testing.assert_array_equal(t.gradient(a, w).numpy(), t.gradient(b, w).numpy())
    assert t.gradient(c, frozen) is None
    with pytest.raises(tf.errors.InvalidArgumentError):  # nothing read or recorded first
        with tf.GradientTape() as t2:
            tf.matmul(tf.constant([[1, 2]]), w)
    assert t2._nodes == [] and t2.watched_variables() == ()


def test_matmul_with_a_variable_inside_a_function_sees_its_updates():
    x = tf.constant(np.ones((1, 2), np.float32))
    w = tf.Variable(np.ones((2, 1), np.float32))
    f = tf.function(lambda: tf.matmul(x, w))
    assert f().numpy().item() == 2.0
    w.assign_add(tf.ones((2, 1)))
    assert f().numpy().item() == 4.0


# -- a NumPy operand: the fast paths hand it to ``bind``, which snapshots it (issue #20, 4) ------

@pytest.mark.parametrize("deferred", [True, False])
@pytest.mark.parametrize("fn", [lambda x, a: x * a, lambda x, a: a * x, lambda x, a: tf.add(x, a),
                                lambda x, a: tf.matmul(x, a), lambda x, a: tf.maximum(a, x)])
def test_a_numpy_operand_gives_binds_values_and_node_from_its_value_at_the_call(fn, deferred):
    prev = tf.set_deferred_execution(deferred)
    try:
        x = tf.constant(np.arange(4.0, dtype=np.float32).reshape(2, 2))
        buf = np.full((2, 2), 3.0, np.float32)
        out, nodes = _nodes(lambda t: fn(t, buf), x)
        buf[:] = 100.0
        with tf.GradientTape() as t:
            t.watch(x)
            ref = fn(x, np.full((2, 2), 3.0, np.float32))
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        (node,) = nodes
        # the constant input (id 0): the snapshot, or (deferred) the snapshot on the device
        (kept,) = [np.asarray(v) for v, i in zip(node.vals, node.ids) if i == 0]
        assert isinstance(node.vals[node.ids.index(0)], np.ndarray) is not deferred
        assert not np.shares_memory(kept, buf) and (kept == 3.0).all()
        assert node.prim is t._nodes[0].prim
    finally:
        tf.set_deferred_execution(prev)


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "eager"])
@pytest.mark.parametrize("case", ["unary_tensor", "unary_pending", "unary_variable", "binary_variable",
                                  "binary_pending_variable", "three_operands"])
def test_executor_single_and_pair_entries_match_run(deferred, case):
    """``Executor.run1`` / ``run2`` (what ``bind1`` / ``bind2`` call) give ``run``'s values, nodes and
    gradients in both executors, for each kind of operand."""
    from tapejax.core.executor import ACTIVE, EAGER
    x = tf.constant(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    v = tf.Variable(np.array([[0.75, 3.0], [-1.0, 0.5]], np.float32))
    tanh, mul, clip = REGISTRY["Tanh"], REGISTRY["Mul"], REGISTRY["ClipByValue"]
    ex = lambda: ACTIVE.executor   # noqa: E731
    fast, slow = {
        "unary_tensor": (lambda t, ts: ex().run1(ts, tanh, tanh.fixed(()), (), t),
                         lambda t, ts: ex().run(ts, tanh, tanh.fixed(()), (), (t,))),
        "unary_pending": (lambda t, ts: ex().run1(ts, tanh, tanh.fixed(()), (), tf.exp(t)),
                          lambda t, ts: ex().run(ts, tanh, tanh.fixed(()), (), (tf.exp(t),))),
        "unary_variable": (lambda t, ts: ex().run1(ts, tanh, tanh.fixed(()), (), v) * t,
                           lambda t, ts: ex().run(ts, tanh, tanh.fixed(()), (), (v,)) * t),
        "binary_variable": (lambda t, ts: ex().run2(ts, mul, mul.fixed(()), t, v),
                            lambda t, ts: ex().run(ts, mul, mul.fixed(()), (), (t, v))),
        "binary_pending_variable": (lambda t, ts: ex().run2(ts, mul, mul.fixed(()), v, tf.exp(t)),
                                    lambda t, ts: ex().run(ts, mul, mul.fixed(()), (), (v, tf.exp(t)))),
        "three_operands": (lambda t, ts: bind(clip, t * v, tf.exp(t) * 0.0, v),   # (``run``'s one pass)
                           lambda t, ts: EAGER.run(ts, clip, clip.fixed(()), (), (t * v, tf.exp(t) * 0.0, v))),
    }[case]
    from tapejax.core.state import tapes as _tapes
    runs = []
    prev = tf.set_deferred_execution(deferred)
    try:
        for fn in (fast, slow):
            with tf.GradientTape(persistent=True) as t:
                t.watch(x)
                out = fn(x, _tapes())
            runs.append((t, out))
    finally:
        tf.set_deferred_execution(prev)
    (ta, a), (tb, b) = runs
    assert (type(a).__name__ == "Pending") == deferred
    assert [(n.prim, n.static, n.refs, n.sig) for n in ta._nodes] == \
        [(n.prim, n.static, n.refs, n.sig) for n in tb._nodes]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    for src in (x, v):
        ga, gb = ta.gradient(a, src), tb.gradient(b, src)
        assert (ga is None) == (gb is None)
        if ga is not None:
            np.testing.assert_allclose(ga.numpy(), gb.numpy(), rtol=1e-6)


# -- no tape: the op's own call, nothing in between ----------------------------------

@pytest.mark.parametrize("case", ["concat", "transpose", "softmax", "split", "array_operand"])
def test_bind_with_no_tape_gives_the_executors_values(case):
    """``bind`` with no tape recording and Tensor / constant-array operands calls the jitted op at
    once; the executor's path (a tape that watches nothing) gives the same values, dtypes and
    result structure (a tuple for an op of several outputs)."""
    from tapejax.core.executor import EAGER
    x = tf.constant(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    fn = {"concat": lambda: tf.concat([x, x * 2.0], 0), "transpose": lambda: tf.transpose(x),
          "softmax": lambda: tf.nn.softmax(x), "split": lambda: tf.split(x, 2, axis=1),
          "array_operand": lambda: bind(REGISTRY["ConcatV2"], x, jnp.ones((1, 2), jnp.float32), axis=0)}[case]
    calls = []

    def spy(entry):
        real = getattr(EAGER, entry)

        def run(tapes, prim, *args):
            calls.append(prim.name)
            return real(tapes, prim, *args)
        return run

    for entry in ("run", "run1", "run2"):
        setattr(EAGER, entry, spy(entry))
    try:
        fast = fn()
        assert calls == []
        prev = tf.set_deferred_execution(False)
        try:
            with tf.GradientTape():   # (records nothing: no watched input)
                slow = fn()
        finally:
            tf.set_deferred_execution(prev)
    finally:
        for entry in ("run", "run1", "run2"):
            delattr(EAGER, entry)
    assert type(fast) is type(slow) and calls
    many = isinstance(fast, (list, tuple))
    for a, b in zip(fast if many else [fast], slow if many else [slow]):
        assert type(a) is tf.Tensor and a.dtype == b.dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_unary_entry_hands_what_its_call_refuses_to_the_checked_path():
    from tapejax.core.bind import unary_entry
    seen = []

    def checked(x):
        seen.append(x)
        return "checked"

    def call(a):
        if a.dtype != np.float32:
            raise R.NotPlain
        return a * 2

    op = unary_entry(call, checked)
    x = tf.constant([1.0, 2.0])
    out = op(x)
    assert type(out) is tf.Tensor and out.numpy().tolist() == [2.0, 4.0] and seen == []
    i = tf.constant([1, 2])
    assert op(i) == "checked" and seen == [i]           # refused by the call: the checked path
    assert op([1.0]) == "checked"                        # not a Tensor
    with tf.GradientTape() as t:                         # a tape records: the checked path (``bind1``)
        t.watch(x)
        assert op(x) == "checked"
    assert len(seen) == 3


@pytest.mark.parametrize("mode", ["no_tape", "deferred", "eager"])
def test_binary_fast_path_hands_two_dtypes_to_tfs_error(mode):
    """A binary op's fast path checks one dtype when JAX traces (``plain_jit``): two dtypes raise
    TF's InvalidArgumentError in every mode, after which the same op still runs."""
    import contextlib
    f, i = tf.constant([1.0, 2.0]), tf.constant([1, 2])
    prev = tf.set_deferred_execution(mode == "deferred")
    try:
        with (contextlib.nullcontext() if mode == "no_tape" else tf.GradientTape()) as t:
            if t is not None:
                t.watch(f)
            for fn in (lambda: tf.add(f, i), lambda: f + i, lambda: tf.multiply(i, f), lambda: tf.maximum(f, i)):
                with pytest.raises(tf.errors.InvalidArgumentError, match="int32"):
                    fn()
            y = f + f
        if t is not None:
            assert t.gradient(y, f).numpy().tolist() == [2.0, 2.0]
    finally:
        tf.set_deferred_execution(prev)


def test_tensor_operators_run_the_binary_ops_body():
    """``a + b`` is one Python call: the forward operators are the binary op's own function (its
    traced-integer check written in), not a wrapper around it."""
    for name, op in (("__add__", tf.add), ("__sub__", tf.subtract), ("__mul__", tf.multiply),
                     ("__floordiv__", tf.math.floordiv), ("__mod__", tf.math.floormod)):
        assert getattr(tf.Tensor, name).__code__ is op.__code__, name
    x = tf.constant([1.0, 2.0])
    assert (x + 1.0).numpy().tolist() == [2.0, 3.0] and (x * x).numpy().tolist() == [1.0, 4.0]


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "eager"])
def test_a_variable_next_to_a_number_takes_the_tensors_path(deferred):
    """``v * 2.0`` converts the number to the Variable's dtype as ``t * 2.0`` does (a cached
    constant), so it takes the same fast path: the values, dtypes, recorded nodes and gradients
    of the generic path (``bind`` with the number as it is)."""
    v = tf.Variable(np.array([0.5, -1.0, 2.0], np.float32))
    prev = tf.set_deferred_execution(deferred)
    try:
        runs = []
        for fast in (True, False):
            with tf.GradientTape() as t:
                if fast:
                    out = [v * 2.0, 3.0 - v, v + 1, tf.maximum(v, 0.25)]
                else:
                    out = [bind(REGISTRY["Mul"], v, 2.0), bind(REGISTRY["Sub"], 3.0, v), bind(REGISTRY["AddV2"], v, 1),
                           bind(REGISTRY["Maximum"], v, 0.25)]
                loss = tf.add_n([tf.reduce_sum(o) for o in out])
            runs.append((out, [n.prim.name for n in t._nodes], t.gradient(loss, v)))
    finally:
        tf.set_deferred_execution(prev)
    (fa, na, ga), (fb, nb, gb) = runs
    assert na == nb
    for a, b in zip(fa, fb):
        assert a.dtype == b.dtype == tf.float32
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(ga.numpy(), gb.numpy())
    with pytest.raises(TypeError):   # an int Variable keeps TF's dtype rule (its error, as for a Tensor)
        tf.Variable([1, 2]) * 0.5


def test_an_op_on_a_variable_with_no_tape_keeps_its_buffer_its_own():
    """With no tape, ``v * x`` reads the Variable's buffer without handing it out (the op keeps
    none of it), so the next update may still donate it; an op whose result is that very buffer
    hands it out, and the next update leaves that result readable."""
    v = tf.Variable(np.ones(3, np.float32))
    opt = tf.keras.optimizers.SGD(0.5)
    for _ in range(2):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * v)
        opt.apply_gradients([(t.gradient(loss, v), v)])
    assert v._own is v._val
    x = tf.constant([1.0, 2.0, 3.0])
    y, z = v * x, tf.tanh(v)
    assert v._own is v._val
    np.testing.assert_allclose(y.numpy(), [0.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(z.numpy(), np.tanh(v.numpy()))
    ident = tf.define_op("TestOnlyForwardingIdentity", lambda a: a, jit=False)   # (gives its input back)
    same = R.bind1(ident, ident.fixed(()), (), v)
    assert same._value is v._val and v._own is None
    v.assign_add([1.0, 1.0, 1.0])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(v * v)
    opt.apply_gradients([(t.gradient(loss, v), v)])
    np.testing.assert_allclose(same.numpy(), [0.0, 0.0, 0.0], atol=1e-6)   # not donated away


def test_a_list_holding_a_traced_tensor_has_its_shape_without_numpy():
    """``_shape`` of a nested list that holds Tensors is read off the structure (TF packs such a list):
    ``tf.concat([x, [i]], 0)`` and ``tf.concat([[i], [i]], 0)`` of a traced ``i`` work in a function (they
    raised SymbolicArrayError: NumPy was asked for the traced value); eagerly they give the same.
    Oracle: TF 2.21 ([0, 0, 3], [3, 3])."""
    assert R._shape([tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])]) == (2, 2)

    @tf.function
    def grow(x, i):
        return tf.concat([x, [tf.cast(i, tf.float32)]], 0), tf.concat([[i], [i]], 0)

    for f in (grow, grow.python_function):
        a, b = f(tf.zeros([2]), tf.constant(3))
        assert a.numpy().tolist() == [0.0, 0.0, 3.0] and b.numpy().tolist() == [3, 3]


@pytest.mark.parametrize("recording", [False, True])
def test_a_none_operand_is_tfs_conversion_error(recording):
    """None as an operand of a binary or unary op, a reduction, tf.norm or tf.clip_by_norm (a None
    gradient in ``w - lr * g``, ``accum + g``, gradient clipping) raises TF's ValueError ("Attempt to
    convert a value (None)"), not an InvalidArgumentError from JAX's complaint (nor a TypeError).
    Oracle: TF 2.21."""
    x, v = tf.constant([1.0, 2.0]), tf.Variable([1.0, 2.0])
    cases = [lambda: x + None, lambda: None * x, lambda: v - None, lambda: x > None,
             lambda: tf.maximum(x, None), lambda: tf.square(None), lambda: tf.matmul(x[None], None),
             lambda: tf.reduce_sum(None), lambda: tf.reduce_mean(None), lambda: tf.norm(None),
             lambda: tf.clip_by_norm(None, 1.0), lambda: tf.cast(None, tf.float16)]
    with tf.GradientTape() as t:
        if not recording:
            t._pop()   # (no tape recording: the fast paths' first branch)
        for fn in cases:
            with pytest.raises(ValueError, match=r"Attempt to convert a value \(None\)") as e:
                fn()
            assert not isinstance(e.value, tf.errors.InvalidArgumentError)


@pytest.mark.parametrize("deferred", [True, False])
def test_a_jax_array_operand_takes_the_tensors_dtype_as_tf_converts_it(deferred):
    """TF converts a JAX array next to a Tensor as NumPy data, to the Tensor's dtype (checked with
    real TF: ``tf.constant([1.], tf.float16) * jnp.array([1.0001], jnp.float32)`` is float16 [1.],
    an int32 Tensor times a float32 array is int32); tapejax let JAX promote (float32 [1.0001],
    int32 -> float32), on either side, in ``tf.matmul`` and under ``jax.jit`` (a tracer) too.  A
    bfloat16 Tensor takes a NumPy float32 scalar as bfloat16 (it was float32: bfloat16's NumPy
    kind is "V")."""
    prev = tf.set_deferred_execution(deferred)
    try:
        h = tf.constant([1.0, 2.0], tf.float16)
        a32 = jnp.array([1.0001, 3.0], jnp.float32)
        for got in (h * a32, a32 * h, tf.multiply(h, a32), tf.add(a32, h) - h):
            assert got.dtype == tf.float16
        np.testing.assert_array_equal(h * a32, np.array([1.0, 6.0], np.float16))
        i = tf.constant([1, 2])
        for got in (i * jnp.array([2.5, 1.5]), jnp.array([2.5, 1.5]) * i):
            assert got.dtype == tf.int32 and got.numpy().tolist() == [2, 2]
        mm = tf.matmul(tf.constant([[1.0]], tf.float16), jnp.array([[2.5]], jnp.float32))
        assert mm.dtype == tf.float16 and mm.numpy().tolist() == [[2.5]]
        traced = jax.jit(lambda a: jnp.asarray(h * a).astype(jnp.float32))(a32)
        np.testing.assert_array_equal(traced, [1.0, 6.0])
        bf = tf.constant([1.0], tf.bfloat16)
        assert (bf * np.float32(2.5)).dtype == tf.bfloat16 and (bf * jnp.float32(2.5)).dtype == tf.bfloat16
        x = tf.constant([1.0, 2.0])
        with tf.GradientTape() as tape:   # (the converted array is a constant; the Tensor's gradient)
            tape.watch(x)
            y = tf.reduce_sum(jnp.array([3.0, 4.0], jnp.float16) * x)
        assert tape.gradient(y, x).numpy().tolist() == [3.0, 4.0]
    finally:
        tf.set_deferred_execution(prev)
