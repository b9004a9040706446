"""One trace for many sizes (tapejax/compile/polymorphism.py): input_signature None dims, reduce_retracing.

Oracles: the same function run eagerly for each size, and TF 2.21's tracing counts
(tests/parity/test_tracing.py).
"""
import numpy as np
import pytest

import tapejax as tf
from tapejax.compile import polymorphism
from tapejax.compile.signature import LeafSpec

F32 = np.dtype("float32")


def test_plan_shares_symbols_between_equal_sizes():
    import jax
    specs = [LeafSpec((None, 3), F32), LeafSpec((None,), F32), LeafSpec((2, None), F32)]
    ex = [jax.ShapeDtypeStruct(s, F32) for s in ((5, 3), (5,), (2, 7))]
    p = polymorphism.plan(specs, [False] * 3, example=ex)
    assert p.groups == (((0, 0), (1, 0)), ((2, 1),))
    assert p.avals[0].shape[0] is p.avals[1].shape[0]
    ok = [jax.ShapeDtypeStruct(s, F32) for s in ((9, 3), (9,), (2, 1))]
    broken = [jax.ShapeDtypeStruct(s, F32) for s in ((9, 3), (8,), (2, 1))]
    assert p.accepts(ok) and not p.accepts(broken)
    assert polymorphism.relax(specs[:1], [jax.ShapeDtypeStruct((4, 4), F32)]) == (LeafSpec((None, None), F32),)
    assert polymorphism.relax(specs[:1], [jax.ShapeDtypeStruct((4,), F32)]) is None
    with pytest.raises(ValueError, match="unknown rank"):
        polymorphism.plan([LeafSpec(None, F32)], [False])


def _train_step(w, opt):
    def step(x, y):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        opt.apply_gradients([(t.gradient(loss, w), w)])
        return loss, tf.shape(x)[0]
    return step


def test_one_trace_for_every_batch_size_equals_eager():
    sig = [tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)]
    we, wc = tf.Variable(np.ones((3, 1), "float32")), tf.Variable(np.ones((3, 1), "float32"))
    eager = _train_step(we, tf.optimizers.SGD(0.1, momentum=0.9))
    compiled = tf.function(_train_step(wc, tf.optimizers.SGD(0.1, momentum=0.9)), input_signature=sig)
    rng = np.random.RandomState(0)
    for n in (4, 1, 7, 4, 2):
        x, y = tf.constant(rng.randn(n, 3).astype("float32")), tf.constant(rng.randn(n, 1).astype("float32"))
        le, ne = eager(x, y)
        lc, nc = compiled(x, y)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-5)
        assert int(nc.numpy()) == int(ne.numpy()) == n
    np.testing.assert_allclose(wc.numpy(), we.numpy(), rtol=1e-5)
    # the optimizer creates its slots on the first call: TF traces twice, then never again
    assert compiled.experimental_get_tracing_count() == 2
    (entries,) = compiled._poly.values()
    assert [e.plan is not None for e in entries] == [True]


def test_body_that_needs_a_concrete_size_falls_back_to_a_trace_per_shape():
    runs = []

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(x):
        runs.append(1)
        n = int(x.shape[0])   # Python arithmetic on the size: needs it concrete
        return x * float(n)

    for n in (2, 3, 2):
        np.testing.assert_allclose(f(tf.ones([n])).numpy(), np.full(n, float(n)))
    # the symbolic attempt once, then one trace per shape (the documented fallback)
    assert len(runs) == 3 and f.experimental_get_tracing_count() == 3


def test_a_program_that_prints_is_traced_per_shape(capsys):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(x):
        tf.print("sum", tf.reduce_sum(x))
        return x + 1.0

    for n in (2, 3, 3):
        f(tf.ones([n]))
    assert capsys.readouterr().err == "sum 2\nsum 3\nsum 3\n"
    # symbolic trace (its program cannot be exported: it calls back into Python), then per shape
    assert f.experimental_get_tracing_count() == 3



def test_equality_operators_on_a_symbolic_size_keep_one_trace():
    """``x % 2 == 0`` on a [None] argument (TF's guide's next_collatz): ``==`` / ``!=`` decide broadcasting
    from known sizes only, so the symbolic trace serves every length (it fell back per shape)."""
    @tf.function(input_signature=(tf.TensorSpec(shape=[None], dtype=tf.int32),))
    def next_collatz(x):
        return tf.where(x % 2 == 0, x // 2, 3 * x + 1) + tf.cast(x != 7, tf.int32)

    assert next_collatz(tf.constant([1, 2])).numpy().tolist() == [5, 2]
    assert next_collatz(tf.constant([5, 6, 7])).numpy().tolist() == [17, 4, 22]
    assert next_collatz.experimental_get_tracing_count() == 1
    assert (tf.ones([2, 3]) == tf.ones([4])).numpy().tolist() is False   # (known sizes: TF2's scalar False)

def test_sizes_that_stop_being_equal_get_their_own_program():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32)])
    def f(x, y):
        return tf.reduce_sum(x) + 10.0 * tf.reduce_sum(y)

    assert f(tf.ones([3]), tf.ones([3])).numpy() == 33.0
    assert f(tf.ones([4]), tf.ones([4])).numpy() == 44.0
    assert f.experimental_get_tracing_count() == 1
    assert f(tf.ones([2]), tf.ones([5])).numpy() == 52.0   # the shared size is broken: a new trace
    assert f(tf.ones([6]), tf.ones([1])).numpy() == 16.0
    assert f.experimental_get_tracing_count() == 2


def test_reduce_retracing_counts_as_tf():
    @tf.function(reduce_retracing=True)
    def f(x):
        return x * 2.0

    counts = []
    for shape in ((1, 3), (2, 3), (5, 3), (7, 3), (4,), (5,), (6,)):
        np.testing.assert_allclose(f(tf.ones(shape)).numpy(), np.full(shape, 2.0))
        counts.append(f.experimental_get_tracing_count())
    assert counts == [1, 2, 2, 2, 3, 3, 3]   # TF 2.21: the same (a new rank: one more)


def test_symbolic_sizes_show_as_none_in_the_static_shape():
    """Inside a symbolic trace ``x.shape`` lists, prints and counts a ``None`` size as TF's
    ``[None, 3]``; indexing still gives the size that reshapes can use."""
    seen = []

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        s = x.shape
        seen.append((s.as_list(), repr(s), str(s), s.is_fully_defined(), s.num_elements()))
        return tf.reduce_sum(x, axis=1)

    for n in (2, 5):
        np.testing.assert_allclose(f(tf.ones([n, 3])).numpy(), np.full(n, 3.0))
    assert seen == [([None, 3], "TensorShape([None, 3])", "(None, 3)", False, None)]


def test_reduce_retracing_traces_a_new_python_value_at_its_own_shapes():
    """TF 2.21: a new Python argument has no common supertype with the earlier traces, so its
    first call traces its concrete shapes; its second size relaxes (tests/parity/test_user_programs12b.py)."""
    seen = []

    @tf.function(reduce_retracing=True)
    def f(x, flag):
        seen.append((x.shape.as_list(), flag))
        return x * 2.0 if flag else x

    for n, flag in [(4, True), (6, True), (2, True), (4, False), (6, False), (3, False)]:
        f(tf.ones([n, 3]), flag)
    assert seen == [([4, 3], True), ([None, 3], True), ([4, 3], False), ([None, 3], False)]


def test_a_concrete_function_refuses_a_mismatch_with_tf_s_class_and_a_type_error():
    """TF's graph raises InvalidArgumentError for a wrong dtype (and a shape its ops cannot take);
    tapejax's refusal is that class and a TypeError."""
    f = tf.function(lambda x: x * 2.0)
    cf = f.get_concrete_function(tf.TensorSpec([None, 3], tf.float32))
    for bad in (tf.ones([2, 4]), tf.ones([2, 3], tf.int32)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="must match"):
            cf(bad)
        with pytest.raises(TypeError):
            cf(bad)


@pytest.mark.parametrize("reduce_retracing", [False, True])
def test_typed_prng_key_arguments(reduce_retracing):
    """A typed key (``jax.random.key``) as an argument of a tapejax.function: keyed by its abstract
    value like any array (a key has no NumPy dtype: the signature, the shape-free key and the
    relaxed specs all raised TypeError "Cannot interpret 'key<fry>' as a data type"); with
    reduce_retracing a second size shares the relaxed trace."""
    import jax
    noise = tf.op(lambda k, x: x + jax.random.normal(k, x.shape))

    @tf.function(reduce_retracing=reduce_retracing)
    def step(key, x):
        return noise(key, x) * 2.0
    for n in (2, 3, 4):
        k = jax.random.key(n)
        np.testing.assert_allclose(step(k, tf.ones([n])).numpy(), 2 * (1 + jax.random.normal(k, (n,))), rtol=1e-6)
    assert step.experimental_get_tracing_count() == (2 if reduce_retracing else 3)


def test_a_shifted_token_step_with_an_embedding_gradient_traces_once():
    """A language model's step over ``x[:, :-1]`` / ``x[:, 1:]`` with ``input_signature=[TensorSpec(
    [None, None])]``: the gather's cotangent of size ``[b, t - 1, d]`` is reshaped into
    IndexedSlices rows ``b*t - b``, which JAX could not prove >= 0 (each size is >= 1, so
    ``b*t >= b``: the plan's scope says so), and the function traced once per batch shape; TF
    traces twice (its Variable-creating first trace, then one for all shapes)."""
    emb = tf.Variable(np.random.RandomState(0).randn(6, 3).astype(np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def step(x):
        traces.append(1)
        with tf.GradientTape() as tape:
            h = tf.gather(emb, x[:, :-1])
            loss = tf.reduce_mean(tf.reduce_sum(h, -1) * tf.cast(x[:, 1:], tf.float32))
        g = tape.gradient(loss, emb)
        opt.apply_gradients([(g, emb)])
        return loss

    for shape in ((2, 5), (3, 4), (1, 2), (2, 5)):
        x = np.random.RandomState(sum(shape)).randint(0, 6, shape).astype(np.int32)
        before = emb.numpy()
        want = np.mean(before[x[:, :-1]].sum(-1) * x[:, 1:])
        np.testing.assert_allclose(step(tf.constant(x)).numpy(), want, rtol=1e-5)
    assert len(traces) == 2
    p = polymorphism.plan([LeafSpec((None, None), F32)], [False])
    assert len(p.groups) == 2


def test_a_none_dimension_of_size_zero_is_traced_for_its_own_shape():
    """JAX's symbolic sizes are >= 1: an empty batch under ``input_signature=[TensorSpec([None])]``
    failed the exported program's shape check (ValueError 'Expected value >= 1'); it is now traced
    for its own shape (TF: the same trace; the values agree, the count is one more)."""
    import jax
    p = polymorphism.plan([LeafSpec((None,), F32)], [False], example=[jax.ShapeDtypeStruct((3,), F32)])
    assert not p.accepts([jax.ShapeDtypeStruct((0,), F32)])
    assert polymorphism.has_empty([LeafSpec((None, 2), F32)], [jax.ShapeDtypeStruct((0, 2), F32)])
    assert not polymorphism.has_empty([LeafSpec((0, None), F32)], [jax.ShapeDtypeStruct((0, 2), F32)])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def total(x):
        return tf.reduce_sum(x * 2.0)

    assert [float(total(tf.constant(v, tf.float32))) for v in ([1.0, 2.0], [], [3.0])] == [6.0, 0.0, 6.0]
    assert total.experimental_get_tracing_count() == 2


def test_a_concrete_function_of_a_none_signature_takes_an_empty_batch():
    """``get_concrete_function(TensorSpec([None, 2]))`` called with a ``[0, 2]`` batch: TF runs its one
    graph; the symbolic program refused the size (ConcreteInputError); it now runs a program traced
    for the empty shape once (compile/concrete.py), the values TF's."""
    @tf.function
    def rows(x):
        return tf.reduce_sum(x, 1) + 1.0

    c = rows.get_concrete_function(tf.TensorSpec([None, 2], tf.float32))
    np.testing.assert_allclose(c(tf.ones([3, 2])).numpy(), [3.0, 3.0, 3.0])
    assert c(tf.zeros([0, 2])).shape == (0,)
    assert c(tf.zeros([0, 2])).shape == (0,) and rows.experimental_get_tracing_count() == 2
    np.testing.assert_allclose(c(tf.ones([1, 2])).numpy(), [3.0])
