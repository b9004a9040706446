"""The op registry and bind: ops as data, recording iff an input is tracked."""
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core import bind as _primitives

CUBE = tf.define_op("TestOnlyCube", lambda x: x ** 3)


def test_define_once_and_lookup():
    assert _primitives.lookup("TestOnlyCube") is CUBE
    with pytest.raises(KeyError, match="Registering two ops with name 'TestOnlyCube'"):
        tf.define_op("TestOnlyCube", lambda x: x)
    with pytest.raises(LookupError):
        _primitives.lookup("NoSuchOpType")


def test_user_op_records_and_differentiates_through_jax():
    x = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.bind(CUBE, x)
    assert y.numpy() == 8.0 and t.gradient(y, x).numpy() == 12.0


def test_bind_records_only_when_an_input_is_tracked():
    x, c = tf.constant(2.0), tf.constant(3.0)
    with tf.GradientTape() as t:
        _ = c * c          # untracked: not recorded
        t.watch(x)
        _ = x * c          # tracked
    assert [n.prim.name for n in t._nodes] == ["Mul"]


def test_static_params_go_to_the_key_and_python_scalars_stay_weak():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(x, axis=[0]) * 2
    node = t._nodes[0]
    assert node.static == (("axis", (0,)), ("keepdims", False))
    assert y.dtype == tf.float32  # the Python 2 took the tensor's dtype
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), np.full((2, 2), 2.0))


def test_multiple_results_primitive():
    p = tf.define_op("TestOnlySplit2", lambda x: (x[:1] * 2.0, x[1:] * 3.0), multiple_results=True)
    x = tf.constant([1.0, 1.0])
    with tf.GradientTape() as t:
        t.watch(x)
        a, b = tf.bind(p, x)
        y = tf.reduce_sum(a) + tf.reduce_sum(b) * 10.0
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [2.0, 30.0])


def test_non_differentiable_primitive_gives_none():
    p = tf.define_op("TestOnlyRoundish", jnp.round, differentiable=False)
    x = tf.constant(2.4)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.bind(p, x) * x
    assert t.gradient(y, x).numpy() == 2.0  # only the direct path


def test_inlined_fast_paths_equal_bind():
    """Elementwise ops and matmul skip ``bind``'s generic handling on their hot paths: the values
    are bind's, and a recorded node has the same signature (same cache key) as bind's."""
    import numpy as np

    from tapejax.core.bind import REGISTRY, bind
    x = tf.constant(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    for op, name, args in ((tf.exp, "Exp", (x,)), (tf.abs, "Abs", (x,)), (tf.add, "AddV2", (x, x)),
                           (tf.matmul, "MatMul", (x, x))):
        fast, slow = op(*args), bind(REGISTRY[name], *args)
        np.testing.assert_array_equal(fast.numpy(), slow.numpy())
        assert fast._id != slow._id
        with tf.GradientTape() as t:
            t.watch(x)
            op(*args)
            bind(REGISTRY[name], *args)
        a, b = t._nodes
        assert (a.prim, a.static, a.refs) == (b.prim, b.static, b.refs) and a.sig == b.sig


# -- host data is read when the op is called (issue #20, 4) ----------------------

def _aligned(n, dtype=np.float32):
    """A buffer at a 64-byte boundary: the kind XLA's CPU client reads in place."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 64, np.uint8)
    off = -raw.ctypes.data % 64
    return raw[off:off + n * itemsize].view(dtype)


@pytest.mark.parametrize("n", [4, 1 << 16])
def test_host_snapshot_is_a_private_copy_and_large_ones_are_aligned(n):
    from tapejax.core.tensor import host_snapshot
    a = np.arange(n, dtype=np.float64)[::-1]          # strided: the copy is contiguous
    s = host_snapshot(a)
    assert not np.shares_memory(s, a) and s.dtype == a.dtype and s.flags.c_contiguous
    np.testing.assert_array_equal(s, a)
    c = host_snapshot(a, np.float32)                   # the conversion is the one copy
    assert c.dtype == np.float32 and not np.shares_memory(c, a)
    np.testing.assert_array_equal(c, a.astype(np.float32))
    if n * 4 >= 1 << 14:
        assert s.ctypes.data % 64 == 0 and c.ctypes.data % 64 == 0
    jx = jnp.asarray(c)                                # JAX reads an aligned snapshot in place:
    a[:] = -1                                          # no second copy, and nobody else writes it
    np.testing.assert_array_equal(np.asarray(jx), np.arange(n, dtype=np.float32)[::-1])


@pytest.mark.parametrize("deferred", [True, False])
def test_bind_snapshots_numpy_operands_for_the_op_and_the_tape(deferred):
    """The op runs on a copy (JAX would read an aligned buffer later, asynchronously), and the
    tape's node keeps that copy, not the user's buffer."""
    prev = tf.set_deferred_execution(deferred)
    try:
        buf = _aligned(1 << 16)
        buf[:] = 1.0
        w = tf.Variable(tf.ones([1 << 16]))
        with tf.GradientTape() as t:
            y = tf.bind(_primitives.lookup("Mul"), w, buf)
            loss = tf.reduce_sum(y)
        node, = [n for n in t._nodes if n.prim.name == "Mul"]
        # the constant input (id 0): the snapshot, or (deferred) the snapshot on the device
        kept = [np.asarray(v) for v, i in zip(node.vals, node.ids) if i == 0]
        assert isinstance(node.vals[node.ids.index(0)], np.ndarray) is not deferred
        assert len(kept) == 1 and not np.shares_memory(kept[0], buf)
        buf[:] = 7.0
        assert float(loss) == 1 << 16
        np.testing.assert_array_equal(t.gradient(loss, w).numpy(), np.ones(1 << 16, np.float32))
        assert float(y[0]) == 1.0
    finally:
        tf.set_deferred_execution(prev)


def test_conversions_do_not_share_host_memory():
    buf = _aligned(1 << 16)
    buf[:] = 3.0
    made = [make(buf) for make in (tf.constant, tf.convert_to_tensor, lambda b: tf.Variable(b),
                                   lambda b: tf.Variable(tf.zeros([1 << 16])).assign(b))]
    buf[:] = 7.0
    for t in made:
        np.testing.assert_array_equal(np.asarray(t), np.full(1 << 16, 3.0, np.float32))
    data = bytearray(np.ones(8, np.float32).tobytes())   # another host buffer, seen through NumPy
    t = tf.constant(np.frombuffer(data, np.float32))
    np.frombuffer(data, np.float32)[:] = 5.0
    np.testing.assert_array_equal(t.numpy(), np.ones(8, np.float32))
