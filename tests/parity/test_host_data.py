"""Host data is read when the op is called (issue #20, behaviour 4).

TF converts a NumPy operand to a tensor when the op runs: ``loss = reduce_sum(w * buf)``
followed by ``buf[:] = 7`` still has ``loss == 10``, and the gradient uses the old ``buf``
too.  tapejax snapshots mutable host data on every path that can keep it for later (``bind``,
the ops' fast paths, a pending op, a tape node, ``convert_to_tensor``/``constant``/
``Variable``, ``assign``, ``output_gradients``), with deferral on and off (the ``execution``
fixture runs every case in both modes; TF runs once).

An op's operand comes from ``_unaligned``: TF itself reads a NumPy operand that happens to be
64-byte aligned in place (``w * buf`` then gives the gradient ``[7, 7, 7, 7]``: an accident of
its zero-copy conversion that depends on where malloc put the array); tapejax always reads the
value at call time, which is TF's result for every other buffer (``test_aligned_buffer``
checks both sides of that deliberate difference).  The conversions get aligned buffers, which
TF copies and JAX (``jnp.asarray``, ``device_put``) would read in place.
"""
import numpy as np
import pytest

from .harness import A, parity

N_BIG = 1 << 18


@pytest.fixture(autouse=True, params=["deferred", "eager"])
def execution(request):
    """Every case with deferred execution on and off (the TF side is cached: it runs once)."""
    import tapejax
    prev = tapejax.set_deferred_execution(request.param == "deferred")
    yield request.param
    tapejax.set_deferred_execution(prev)


def _unaligned(n, fill=1.0):
    """A float32 buffer of ``n`` ones that is never 64-byte aligned (TF copies it)."""
    raw = np.empty(n + 1, np.float32)
    if raw.ctypes.data % 64 == 60:   # then raw[1:] would be aligned
        raw = np.empty(n + 2, np.float32)[1:]
    buf = raw[1:]
    assert buf.ctypes.data % 64 != 0
    buf[:] = fill
    return buf


def _aligned(n, fill=1.0):
    """A float32 buffer of ``n`` ones at a 64-byte boundary (TF reads it in place)."""
    raw = np.empty(n * 4 + 64, np.uint8)
    off = -raw.ctypes.data % 64
    buf = raw[off:off + n * 4].view(np.float32)
    buf[:] = fill
    return buf


@parity(expected=(10.0, A([1.0, 1.0, 1.0, 1.0])))
def test_binary_op_reads_the_buffer_when_called(tf):
    """The issue's program: the loss and the gradient use the buffer as it was at the call."""
    buf = _unaligned(4)
    w = tf.Variable(np.full(4, 2.5, np.float32))
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * buf)
    buf[:] = 7
    g = t.gradient(loss, w)
    return float(loss), g


@parity(expected=(10.0, 10.0, 10.0, A([3.0, 3.0, 3.0, 3.0])))
def test_every_operand_position_and_op(tf):
    """NumPy on the left of an operator, as a matmul operand, through ``tf.multiply``."""
    buf = _unaligned(4)
    w = tf.Variable(np.full(4, 2.5, np.float32))
    with tf.GradientTape() as t:
        a = tf.reduce_sum(buf * w)
        b = tf.reduce_sum(tf.matmul(tf.reshape(w, [1, 4]), buf.reshape(4, 1)))
        c = tf.reduce_sum(tf.multiply(w, buf))
    buf[:] = 7
    g = t.gradient([a, b, c], w)
    return float(a), float(b), float(c), g


@parity(expected=(A([6.0, 6.0]), 4.0))
def test_a_loader_refilling_one_buffer(tf):
    """A data loader that refills one batch buffer: every step's loss and gradient see that
    step's batch, also a metric computed on it and read after the loop."""
    buf = _unaligned(2)
    w = tf.Variable([1.0, 1.0])
    total = tf.zeros([2])
    metrics = []
    for step in range(3):
        buf[:] = step + 1.0
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(w * buf)
            metrics.append(tf.reduce_mean(w * buf))
        total = total + t.gradient(loss, w)
    buf[:] = 100.0
    return total, float(sum(float(m) for m in metrics) * 2.0 / 3.0)


@parity(expected=(1.0, 1.0, 1.0, 1.0, 1.0))
def test_conversions_copy_the_buffer(tf):
    """``constant``, ``convert_to_tensor``, ``Variable``, ``assign`` and an op with no tape take
    the buffer's value at the call (1 MiB: JAX would read it later, asynchronously)."""
    big = _aligned(N_BIG)          # TF copies it in these conversions; JAX would not
    c = tf.constant(big)
    d = tf.convert_to_tensor(big)
    v = tf.Variable(big)
    u = tf.Variable(tf.zeros([N_BIG]))
    u.assign(big)
    s = tf.reduce_sum(tf.ones([N_BIG]) * big)
    big[:] = 7
    return float(c[0]), float(d[-1]), float(v[1]), float(u[2]), float(s) / N_BIG


@parity(expected=(A([2.0, 2.0, 2.0]), A([3.0, 3.0, 3.0])))
def test_assign_add_and_output_gradients(tf):
    """A pending update with a NumPy delta, and a NumPy ``output_gradients``, changed after."""
    buf = _aligned(3)
    v = tf.Variable(tf.zeros([3]))
    with tf.GradientTape() as t:
        y = v * 3.0
    g = t.gradient(y, v, output_gradients=buf)
    v.assign_add(g * 0.0)          # a pending update (deferral on) ...
    v.assign_add(buf)              # ... then a NumPy delta
    v.assign_add(buf)
    buf[:] = 7
    return v, g


@parity(expected=(10.0, A([7.0, 7.0, 7.0, 7.0])), tapejax_expected=(10.0, A([1.0, 1.0, 1.0, 1.0])),
        deliberate="TF reads a 64-byte aligned NumPy buffer in place in the gradient; tapejax "
                   "reads host data when the op is called, for every buffer")
def test_aligned_buffer(tf):
    """The issue's program with an aligned buffer: TF's gradient sees the later write."""
    buf = _aligned(4)
    w = tf.Variable(np.full(4, 2.5, np.float32))
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * buf)
    buf[:] = 7
    return float(loss), t.gradient(loss, w)
