"""Other libraries' arrays as op arguments and in ``convert_to_tensor`` (``core/tensor.py``
``is_foreign`` / ``foreign_array``, ``core/bind.py`` ``unwrap``): a TF EagerTensor, an object with
``__array__``, an object with DLPack only.  Oracle: the same values as NumPy arrays (their dtype
kept, as for a NumPy array), and TF's own result where TF computes the same thing."""
import jax
import numpy as np
import pytest

import tapejax as tf


class ArrayLike:
    """Exposes ``__array__`` only (pandas, xarray, a PyTorch CPU tensor ...)."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


class DLPackOnly:
    """Exposes DLPack only (CuPy, a PyTorch GPU tensor ...): shares its producer's buffer."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "bool", "int32"])
def test_array_like_keeps_its_dtype(dtype):
    a = np.array([1, 0, 3]).astype(dtype)
    t = tf.convert_to_tensor(ArrayLike(a))
    assert t.dtype == dtype and np.array_equal(t.numpy(), a)
    assert tf.constant(ArrayLike(a)).dtype == dtype


def test_array_like_float64_follows_the_x64_rule():
    with pytest.raises(TypeError, match="jax_enable_x64"):
        tf.convert_to_tensor(ArrayLike(np.array([1.0, 2.0])))
    with jax.enable_x64(True):
        assert tf.convert_to_tensor(ArrayLike(np.array([1.0, 2.0]))).dtype == tf.float64


def test_array_like_and_dlpack_are_read_when_the_op_is_called():
    """TF reads host data at call time: a later change to the producer's buffer changes nothing."""
    buf = np.array([1.0, 2.0, 3.0], np.float32)
    a = tf.convert_to_tensor(ArrayLike(buf))
    b = tf.add(ArrayLike(buf), 1.0)
    c = tf.convert_to_tensor(DLPackOnly(buf))
    d = tf.multiply(DLPackOnly(buf), 2.0)
    buf[:] = 7.0
    np.testing.assert_array_equal(a.numpy(), [1, 2, 3])
    np.testing.assert_array_equal(b.numpy(), [2, 3, 4])
    np.testing.assert_array_equal(c.numpy(), [1, 2, 3])
    np.testing.assert_array_equal(d.numpy(), [2, 4, 6])
    assert c.dtype == tf.float32


def test_array_like_operands_are_constants_on_the_tape():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(x * ArrayLike(np.array([3.0, 4.0], np.float32)))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 4.0])


@pytest.fixture(scope="module")
def real_tf():
    return pytest.importorskip("tensorflow", reason="TensorFlow is not installed")


def test_eager_tensors_convert_with_tf_dtypes(real_tf):
    for value, dtype in [([1.5, 2.0], "float32"), ([1, 2], "int32"), ([True, False], "bool")]:
        e = real_tf.constant(value, dtype=dtype)
        t = tf.convert_to_tensor(e)
        assert t.dtype == dtype and np.array_equal(t.numpy(), e.numpy())
    assert tf.convert_to_tensor(real_tf.constant([1, 2], real_tf.uint8)).dtype == tf.uint8
    # int64 without x64: the int32 stand-in (as for a NumPy int64 array); float64: x64's rule
    assert tf.convert_to_tensor(real_tf.constant([1, 2], real_tf.int64)).dtype == tf.int32
    with pytest.raises(TypeError, match="jax_enable_x64"):
        tf.convert_to_tensor(real_tf.constant([1.0], real_tf.float64))


def test_ops_take_eager_tensors(real_tf):
    """tapejax ops on TF EagerTensors give TF's own answers (so a tf.data pipeline feeds a loop)."""
    e = real_tf.constant([[1.0, -2.0], [3.0, 4.0]])
    w = real_tf.constant([[0.5], [-1.0]])
    np.testing.assert_allclose(tf.matmul(e, w).numpy(), real_tf.matmul(e, w).numpy())
    np.testing.assert_allclose(tf.nn.relu(e).numpy(), real_tf.nn.relu(e).numpy())
    np.testing.assert_allclose(tf.reduce_mean(e).numpy(), real_tf.reduce_mean(e).numpy())
    np.testing.assert_allclose((tf.constant(2.0) * e).numpy(), (2.0 * e).numpy())
    assert tf.concat([e, e], 0).shape == (4, 2)
    v = tf.Variable(e)
    v.assign(real_tf.zeros([2, 2]))
    np.testing.assert_array_equal(v.numpy(), np.zeros((2, 2), np.float32))


def test_a_tf_data_pipeline_feeds_a_tapejax_training_loop(real_tf):
    """Batches of a real tf.data pipeline train a tapejax model: the same loss as feeding the
    batches' NumPy values."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)
    ds = real_tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def train(batches):
        w = tf.Variable(np.zeros((3, 1), np.float32))
        for xb, yb in batches:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(xb, w) - yb))
            w.assign_sub(0.1 * tape.gradient(loss, w))
        return w.numpy(), float(loss)

    w_tf, loss_tf = train(ds)
    w_np, loss_np = train((xb.numpy(), yb.numpy()) for xb, yb in ds)
    np.testing.assert_allclose(w_tf, w_np, rtol=1e-6)
    assert loss_tf == pytest.approx(loss_np, rel=1e-6)


def test_a_variable_is_not_taken_for_another_librarys_array():
    """A Variable has ``__array__`` too, but an op reads it (the tape sees the read), never
    converts it to a constant."""
    w = tf.Variable(np.ones((2, 1), np.float32))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.matmul(np.ones((3, 2), np.float32), w) * 2.0)
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), [[6.0], [6.0]])
