"""``core.transfer``: device arrays made without a compile until their shape is common.

Oracle: JAX's own compile log (``jax.log_compiles``) counts the XLA compiles; values are
compared with NumPy's.
"""
import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.core import transfer
from xla_compiles import compiles


def test_to_device_compiles_only_once_a_shape_is_common():
    shape = (3, 41)   # (a shape no other test makes)
    with compiles() as names:
        for i in range(transfer.COMPILE_AFTER):
            a = np.full(shape, i, np.float32)
            out = transfer.to_device(a)
            np.testing.assert_array_equal(np.asarray(out), a)
            assert not out.committed
    assert names == []
    with compiles() as names:
        for i in range(3):
            out = transfer.to_device(np.full(shape, i, np.float32))
            np.testing.assert_array_equal(np.asarray(out), np.full(shape, i, np.float32))
            assert not out.committed
    assert names == ["jit(_put)"]


def test_copy_is_a_new_buffer_with_the_same_placement():
    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4) + 0.5)
    dev = jax.device_put(np.ones((2, 5), np.float32), jax.devices()[-1])
    for _ in range(transfer.COMPILE_AFTER + 2):   # both paths
        for src in (x, dev):
            c = transfer.copy(src)
            assert c is not src
            assert c.unsafe_buffer_pointer() != src.unsafe_buffer_pointer()
            assert c.sharding == src.sharding and c.committed == src.committed
            np.testing.assert_array_equal(np.asarray(c), np.asarray(src))
    keep = np.asarray(x).copy()
    c = transfer.copy(x)
    x.delete()   # (what a donation does to the original)
    np.testing.assert_array_equal(np.asarray(c), keep)


@pytest.mark.parametrize("dtype,value", [(np.float32, 0), (np.int32, 1), (np.float32, 0.1), (np.bool_, True)])
def test_filled_values(dtype, value):
    shape = (2, 7, 3)
    with compiles() as names:
        first = [transfer.filled(shape, dtype, value) for _ in range(transfer.COMPILE_AFTER)]
    assert names == []
    later = transfer.filled(shape, dtype, value)
    want = np.full(shape, value, dtype)
    for out in first + [later]:
        assert out.dtype == want.dtype and out.shape == shape
        np.testing.assert_array_equal(np.asarray(out), want)


def test_a_large_fill_is_compiled_at_once(monkeypatch):
    monkeypatch.setattr(transfer, "_HOST_FILL_MAX_BYTES", 64)
    with compiles() as names:
        out = transfer.filled((5, 9), np.float32, 0)
    assert names == ["jit(_full)"]
    np.testing.assert_array_equal(np.asarray(out), np.zeros((5, 9), np.float32))


def test_seen_shapes_are_a_bounded_cache():
    assert tf.cache_stats()["transfer_shapes"].maxsize == 4096


def test_a_first_compiled_adam_step_compiles_one_program():
    """Setup and the first call of a compiled step make each Variable, constant, optimizer slot and
    first-call copy without a compile of its own: the step's program is the only one."""
    transfer._SEEN.clear()   # (what earlier tests in this process made: a common shape compiles its copy)
    rng = np.random.RandomState(0)
    w0, x0 = rng.randn(29, 13).astype(np.float32), rng.randn(6, 29).astype(np.float32)
    with compiles() as setup:
        w = tf.Variable(w0)
        b = tf.Variable(np.zeros(13, np.float32))
        x = tf.constant(x0)
    assert setup == []
    opt = tf.keras.optimizers.Adam(0.01)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss

    with compiles() as names:
        first = float(step(x))
    assert len(names) == 1, names
    # the oracle: the same step in NumPy (Keras's Adam: bias correction in the step size)
    h = x0 @ w0
    np.testing.assert_allclose(first, np.mean(h ** 2), rtol=1e-5)
    dh = 2 * h / h.size
    lr_t = 0.01 * np.sqrt(1 - 0.999) / (1 - 0.9)
    for var, g, old in ((w, x0.T @ dh, w0), (b, dh.sum(0), np.zeros(13, np.float32))):
        m, v = 0.1 * g, 0.001 * g ** 2
        np.testing.assert_allclose(var.numpy(), old - lr_t * m / (np.sqrt(v) + 1e-7), rtol=1e-4, atol=1e-6)
    with compiles() as names:
        step(x)
    assert names == []


@pytest.mark.parametrize("made_before", [0, transfer.COMPILE_AFTER])
def test_host_data_converted_in_a_trace_is_a_concrete_constant(made_before):
    """A NumPy array converted while a function traces is a concrete array (TF embeds it as a
    constant), before and after its shape is common; it was a tracer (``device_put`` / the
    compiled identity staged into the trace), so ``tf.boolean_mask`` with a NumPy mask and
    ``tf.math.segment_sum`` with NumPy ids inside ``tf.function`` raised
    OperatorNotAllowedInGraphError (TF 2.21: [1., 3.] and [3., 0., 3.])."""
    shape = (7, 1, 3)   # (a shape no other test makes)
    for _ in range(made_before):
        transfer.to_device(np.zeros(shape, np.int32))
    seen = []
    jax.jit(lambda x: seen.append(transfer.to_device(np.ones(shape, np.int32))) or x)(1.0)
    assert not isinstance(seen[0], jax.core.Tracer)
    np.testing.assert_array_equal(np.asarray(seen[0]), np.ones(shape, np.int32))

    mask, ids = np.array([True, False, True]), np.array([0, 0, 2], np.int32)
    step = tf.function(lambda x: (tf.boolean_mask(x, mask), tf.math.segment_sum(x, ids)))
    for _ in range(made_before + 1):
        masked, summed = step(tf.constant([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(masked.numpy(), [1.0, 3.0])
    np.testing.assert_array_equal(summed.numpy(), [3.0, 0.0, 3.0])
