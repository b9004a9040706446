"""Sparse gradients (``autodiff/sparse.py``, ``ops.indexing.sparse_read``, the sparse rules of the
optimizers): the compiled gradient never makes the dense gradient, the Variable keeps its buffer
and the optimizer updates it in place, in every execution mode; values against ``jax.vjp`` /
``jax.grad`` of the same pure function and against the densified result."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.autodiff import program as _program, replay as _replay
from tapejax.autodiff.sparse import tf_backward_order

SHAPE = (97, 3)   # a shape no intermediate of these programs has but the dense gradient

MODES = [(True, True), (True, False), (False, False)]   # (deferral, speculation)


@pytest.fixture(params=MODES, ids=["deferred+speculate", "deferred", "eager"])
def mode(request):
    d, s = request.param
    prev = tf.set_deferred_execution(d), tf.set_speculative_updates(s)
    yield request.param
    tf.set_speculative_updates(prev[1])
    tf.set_deferred_execution(prev[0])


def _table():
    return tf.Variable(np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 100.0, name="table")


def _loss_fn(table, w, ids):
    return jnp.sum(jnp.tanh(table[ids] @ w))


def _jax_grad(table, w, ids):
    return jax.grad(_loss_fn)(jnp.asarray(table), jnp.asarray(w), jnp.asarray(ids))


def _dense_shapes(fn, *args):
    """Every intermediate's shape in ``fn``'s jaxpr (nested jaxprs included)."""
    shapes = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            for v in eqn.outvars:
                shapes.add(tuple(v.aval.shape))
            for p in eqn.params.values():
                inner = getattr(p, "jaxpr", None)
                if inner is not None:
                    walk(getattr(inner, "jaxpr", inner))
    closed = jax.make_jaxpr(fn)(*args)
    walk(closed.jaxpr)
    return shapes, [tuple(v.aval.shape) for v in closed.jaxpr.invars]


def test_gradient_values_and_type_match_jax(mode):
    table = _table()
    w = tf.Variable(np.ones((3, 1), np.float32) * 0.1)
    ids = np.array([5, 0, 5, 96, 3], np.int32)
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(tf.tanh(tf.matmul(tf.gather(table, ids), w)))
    g_table, g_w = t.gradient(loss, [table, w])
    assert type(g_table) is tf.IndexedSlices and isinstance(g_w, tf.Tensor)
    assert g_table.indices.numpy().tolist() == ids.tolist()
    assert tuple(g_table.values.shape) == (5, 3) and tuple(g_table.dense_shape.numpy()) == SHAPE
    want = _jax_grad(table.numpy(), w.numpy(), ids)
    np.testing.assert_allclose(tf.convert_to_tensor(g_table).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("form", ["backward", "fused"])
def test_compiled_gradient_never_makes_the_dense_gradient(fresh_cache, form):
    """The compiled call's program has no intermediate of the table's shape, and the table is
    none of its inputs: only the rows, indices and the gradient's pieces move."""
    prev = tf.set_deferred_execution(form == "fused")
    try:
        table = _table()
        with tf.GradientTape(persistent=True) as t:
            loss = tf.reduce_sum(tf.square(tf.gather(table, [4, 4, 7])))
        g = t.gradient(loss, table)
        assert type(g) is tf.IndexedSlices
    finally:
        tf.set_deferred_execution(prev)
    (entry,) = list(_replay._CACHE._data.values())
    (plan,) = list(_replay._SLICES._data.values())
    assert entry.fused == (form == "fused")
    leaves = _program.gather_leaves(t._nodes, plan.program, entry.gather, [None])
    shapes, ins = _dense_shapes(entry.fn, leaves, ())
    assert SHAPE not in shapes and SHAPE not in ins
    assert (3, 3) in ins   # the rows the gather read


def test_table_buffer_is_kept_and_updated_in_place(mode):
    """An eager gather on a Variable reads its rows only, so the optimizer donates the table: the
    same buffer every step (XLA scatters into it)."""
    table = _table()
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    ptrs = []
    for step in range(4):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(tf.gather(table, [step, 3, 3])))
        opt.apply_gradients([(t.gradient(loss, table), table)])
        ptrs.append(table._value.unsafe_buffer_pointer())
        assert table.owns_buffer()
    assert len(set(ptrs[1:])) == 1


def test_a_kept_read_is_not_overwritten(mode):
    """A read the user keeps takes the buffer from the Variable: the next update is not in place."""
    table = _table()
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(tf.gather(table, [1]))
    opt.apply_gradients([(t.gradient(loss, table), table)])
    kept = table.read_value()
    before = kept.numpy().copy()
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(tf.gather(table, [1]))
    opt.apply_gradients([(t.gradient(loss, table), table)])
    np.testing.assert_array_equal(kept.numpy(), before)
    assert table.numpy()[1, 0] == pytest.approx(before[1, 0] - 0.1)


@pytest.mark.parametrize("name", ["SGD", "Adam", "Adagrad", "RMSprop", "Adamax", "Nadam", "Ftrl", "Adadelta"])
def test_training_is_the_same_in_every_mode_and_compiled(name):
    """Five sparse steps give the same table eagerly (each mode) and inside tapejax.function."""
    results = []
    for deferred, speculate, compiled in [(True, True, False), (True, False, False), (False, False, False),
                                          (True, True, True)]:
        prev = tf.set_deferred_execution(deferred), tf.set_speculative_updates(speculate)
        try:
            table = _table()
            opt = getattr(tf.keras.optimizers.legacy, name)(0.05)

            def step(ids):
                with tf.GradientTape() as t:
                    loss = tf.reduce_sum(tf.square(tf.nn.embedding_lookup(table, ids)))
                opt.apply_gradients([(t.gradient(loss, table), table)])
                return loss

            fn = tf.function(step) if compiled else step
            for k in range(5):
                fn(tf.constant([k, 2, 2, 50]))
            results.append(table.numpy())
        finally:
            tf.set_speculative_updates(prev[1])
            tf.set_deferred_execution(prev[0])
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=1e-6, atol=1e-7)


def test_plain_sgd_step_equals_the_dense_update():
    """SGD without momentum: the sparse update is the dense one (rows summed)."""
    a, b = _table(), _table()
    ids = tf.constant([1, 1, 9])
    for v, dense in ((a, False), (b, True)):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(tf.gather(v, ids)))
        g = t.gradient(loss, v)
        tf.keras.optimizers.legacy.SGD(0.1).apply_gradients([(tf.convert_to_tensor(g) if dense else g, v)])
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_second_order_through_a_sparse_read_matches_jax(mode):
    """d/dtable of sum(grad**2) where grad is the table's IndexedSlices gradient (nested tapes)."""
    table = _table()
    ids = np.array([2, 7, 2], np.int32)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = tf.reduce_sum(tf.sin(tf.gather(table, ids)))
        g = t1.gradient(y, table)
        s = tf.reduce_sum(tf.square(tf.convert_to_tensor(g)))
    h = t2.gradient(s, table)

    def inner(tb):
        return jnp.sum(jnp.square(jax.grad(lambda x: jnp.sum(jnp.sin(x[ids])))(tb)))
    want = jax.grad(inner)(jnp.asarray(table.numpy()))
    assert type(g) is tf.IndexedSlices and type(h) is tf.IndexedSlices
    np.testing.assert_allclose(tf.convert_to_tensor(h).numpy(), want, rtol=1e-5, atol=1e-6)


def test_jacobian_and_forward_mode_through_a_sparse_read(mode):
    """A ResourceGather's jacobian and jvp: the Variable's perturbation gathered at the indices."""
    table = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))
    ids = np.array([3, 0, 3], np.int32)
    with tf.GradientTape() as t:
        e = tf.gather(table, ids) * 2.0
    jac = t.jacobian(e, table)
    want = jax.jacobian(lambda x: x[ids] * 2.0)(jnp.asarray(table.numpy()))
    np.testing.assert_allclose(jac.numpy(), want)
    tangent = np.ones((4, 2), np.float32)
    with tf.autodiff.ForwardAccumulator(table, tf.constant(tangent)) as acc:
        e = tf.gather(table, ids) * 2.0
    np.testing.assert_allclose(acc.jvp(e).numpy(), np.full((3, 2), 2.0))


def test_gather_reads_a_pending_update_and_a_dense_gradient_mixes(mode):
    """A Variable with a pending update (``assign_sub`` of a gradient) gathered next step; the
    gather's scattered rows and a dense use sum to the dense gradient."""
    table = _table()
    for k in range(3):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.gather(table, [k, 4]) ** 2) + tf.reduce_sum(table * 0.5)
        g = t.gradient(loss, table)
        assert isinstance(g, tf.Tensor)
        table.assign_sub(0.1 * g)
    t0 = _table().numpy()
    for k in range(3):
        d = np.full(SHAPE, 0.5, np.float32)
        for r in (k, 4):
            d[r] += 2 * t0[r]
        t0 = t0 - 0.1 * d
    np.testing.assert_allclose(table.numpy(), t0, rtol=1e-5)


def test_fallbacks_use_the_plain_gather():
    """Under gradient_override_map, and inside tapejax.function, a gather of a Variable is the
    plain gather of its read (a ReadVariableOp and a GatherV2 on the tape): still IndexedSlices."""
    table = _table()
    with tf.GradientTape() as t:
        with tf.compat.v1.get_default_graph().gradient_override_map({"Sin": "Cos"}):
            y = tf.reduce_sum(tf.gather(table, [1, 2]))
    assert [n.prim.name for n in t._nodes] == ["ReadVariableOp", "GatherV2", "Sum"]
    assert type(t.gradient(y, table)) is tf.IndexedSlices
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.gather(table, [1, 2]))
    assert [n.prim.name for n in t._nodes] == ["ResourceGather", "Sum"]


def test_tf_backward_order_is_breadth_first_from_the_targets():
    """TF's tape runs an op once all uses of its outputs ran, the newest ready op last: for
    ``(a + b) + c`` the pieces come as c's, a's, b's."""
    table = _table()
    with tf.GradientTape() as t:
        a = tf.reduce_sum(tf.gather(table, [0]))
        b = tf.reduce_sum(tf.gather(table, [1, 2]))
        c = tf.reduce_sum(tf.gather(table, [2]))
        y = (a + b) + c
    tgt = t._codes[y._id]
    rank = tf_backward_order(t._nodes, [tgt])
    gathers = [i for i, n in enumerate(t._nodes) if n.prim.name == "ResourceGather"]
    assert sorted(gathers, key=rank.get) == [gathers[2], gathers[0], gathers[1]]
    assert t.gradient(y, table).indices.numpy().tolist() == [2, 0, 1, 2]


def test_constraint_and_bad_slices_raise_before_any_change():
    """TF's errors for a sparse update: a constraint (RuntimeError), values of another dtype or
    row shape (InvalidArgumentError); nothing is updated, not even ``iterations``."""
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    v = tf.Variable(np.ones((4, 2), np.float32), constraint=lambda x: x)
    u = tf.Variable(np.ones((4, 2), np.float32))
    good = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([0, 1]), tf.constant([4, 2]))
    with pytest.raises(RuntimeError, match="constraint"):
        opt.apply_gradients([(good, v)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="updates.shape"):
        opt.apply_gradients([(tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 1]), tf.constant([4, 3])), u)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="dtype"):
        opt.apply_gradients([(tf.IndexedSlices(tf.ones([2, 2], tf.float16), tf.constant([0, 1])), u)])
    assert int(opt.iterations.numpy()) == 0 and not opt.variables()[1:]
    np.testing.assert_array_equal(u.numpy(), np.ones((4, 2)))
    opt.apply_gradients([(good, u)])   # the next valid call works
    assert int(opt.iterations.numpy()) == 1


def test_out_of_range_rows_are_dropped_by_sparse_updates():
    """An index outside the table is skipped by the sparse rules (TF's GPU kernels; the CPU
    kernels raise), so no other row is touched (JAX would wrap a negative index)."""
    for name in ("SGD", "Adagrad", "Adamax"):
        v = tf.Variable(np.ones((4, 2), np.float32))
        g = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([-1, 4, 2]), tf.constant([4, 2]))
        getattr(tf.keras.optimizers.legacy, name)(0.1).apply_gradients([(g, v)])
        changed = np.any(v.numpy() != 1.0, axis=1)
        assert changed.tolist() == [False, False, True, False], name


def test_optax_optimizer_densifies():
    """``from_optax`` has no sparse rule: it applies the densified gradient."""
    import optax
    v = tf.Variable(np.ones((4, 2), np.float32))
    g = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([1, 1]), tf.constant([4, 2]))
    tf.optimizers.from_optax(optax.sgd(0.5)).apply_gradients([(g, v)])
    np.testing.assert_allclose(v.numpy(), [[1, 1], [0, 0], [1, 1], [1, 1]])
