"""tapejax/ops/math.py: TF's dtype lists of the arithmetic ops on bool tensors (TF 2.21's classes)."""
import numpy as np
import pytest

import tapejax as tf


@pytest.mark.parametrize("name", ["add", "maximum", "minimum", "pow", "floordiv", "floormod"])
def test_arithmetic_of_two_bool_tensors_raises_invalid_argument_as_tf(name):
    """TF registers AddV2 / Maximum / Minimum / Pow / FloorDiv / FloorMod for number types only
    (tapejax computed jnp's logical or, max, ... of the bools)."""
    b, c = tf.constant([True, False]), tf.constant([True, True])
    with pytest.raises(tf.errors.InvalidArgumentError, match="bool"):
        getattr(tf.math, name)(b, c)
    with pytest.raises(tf.errors.InvalidArgumentError):
        b + c


def test_unary_arithmetic_add_n_and_truediv_of_bools_raise_as_tf():
    b = tf.constant([True, False])
    for fn in (tf.abs, tf.square, lambda x: tf.math.add_n([x, x])):
        with pytest.raises(tf.errors.InvalidArgumentError):
            fn(b)
    with pytest.raises(TypeError):
        tf.math.truediv(b, b)


def test_python_bool_next_to_a_number_tensor_converts_and_bool_products_stay_logical():
    """A Python bool next to an int / float tensor is converted to its dtype (TF); ``b * c`` of bool
    tensors is TF's logical and (Tensor.__mul__)."""
    assert (tf.constant([1, 2]) + True).numpy().tolist() == [2, 3]
    assert (tf.constant([1.0]) + True).numpy().tolist() == [2.0]
    assert tf.maximum(tf.constant([1, 2]), True).numpy().tolist() == [1, 2]
    assert (tf.constant([True, False]) * tf.constant([True, True])).numpy().tolist() == [True, False]


def _grad(fn, xs):
    x = tf.constant(xs)
    with tf.GradientTape() as t:
        t.watch(x)
        y = fn(x)
    return t.gradient(y, x).numpy()


def test_softsign_acosh_digamma_derivatives_at_domain_edges_are_tfs():
    """TF's registered gradients: softsign' = 1 / (1 + |x|)^2 is 0 at ±inf (JAX's quotient rule: NaN);
    acosh' = 1 / sinh(acosh x) is NaN below 1 and inf at 1 (JAX's was finite at x <= -1); digamma' =
    polygamma(1, x) is 0 at inf (JAX: NaN)."""
    import numpy as np
    inf, nan = np.inf, np.nan
    np.testing.assert_allclose(_grad(tf.math.softsign, [-inf, 0.0, 1.0, inf]), [0.0, 1.0, 0.25, 0.0])
    np.testing.assert_allclose(_grad(tf.math.acosh, [-2.0, 0.5, 1.0, 2.0, inf]), [nan, nan, inf, 3 ** -0.5, 0.0],
                               rtol=1e-6)
    np.testing.assert_allclose(_grad(tf.math.digamma, [1.0, inf]), [np.pi ** 2 / 6, 0.0], rtol=1e-5)


def test_digamma_and_lgammas_gradient_are_nan_at_the_poles_as_tfs():
    """TF's digamma is NaN at 0 (either sign) and the negative integers, and lgamma's gradient is
    digamma: the same under every JAX (0.12's digamma gives -inf at 0, 0.10's NaN)."""
    import numpy as np
    x = [0.0, -0.0, -1.0, -2.0, 0.5, -0.5]
    want = [np.nan, np.nan, np.nan, np.nan, -1.9635108, 0.03648998]
    np.testing.assert_allclose(tf.math.digamma(tf.constant(x)).numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(_grad(tf.math.lgamma, x), want, rtol=1e-5)


def test_float_floordiv_is_tfs_floor_of_the_quotient_and_floormod_grad_uses_it():
    """TF's float FloorDiv is floor(x / y): 1 // 0.1 is 10 (Python's and jnp's: 9), -inf // -1 is inf
    (jnp: NaN), -1 // inf is -0 (jnp: -1); FloorMod's y-gradient is -floor_div(x, y) with that
    floor_div (0 at x = -1, y = inf)."""
    import numpy as np
    x, y = tf.constant([1.0, -np.inf, -1.0, 7.0]), tf.constant([0.1, -1.0, np.inf, -2.0])
    got = tf.math.floordiv(x, y).numpy()
    np.testing.assert_array_equal(got, [10.0, np.inf, -0.0, -4.0])
    assert np.signbit(got[2])
    assert (tf.constant([7, -7]) // 2).numpy().tolist() == [3, -4]
    with tf.GradientTape() as t:
        t.watch(y)
        m = tf.math.floormod(tf.constant([-1.0, 7.0]), y[2:])
    np.testing.assert_array_equal(t.gradient(m, y).numpy(), [0.0, 0.0, 0.0, 4.0])


def test_cast_to_the_own_dtype_gives_the_tensor_or_variable_itself():
    """TF's ``tf.cast`` returns a Tensor or resource Variable already of the dtype as it is (no op):
    a Variable "snapshotted" by ``tf.cast(v, v.dtype)`` follows a later ``assign`` (tf_keras'
    ``MeanIoU``: ``tf.cast(metric.total_cm, tf.float32)`` then ``reset_state()`` reads zeros), and
    the gradient with respect to the cast is the one with respect to the source."""
    v = tf.Variable([1.0, 2.0])
    snap = tf.cast(v, tf.float32)
    other = tf.cast(v, tf.float16)
    v.assign([5.0, 6.0])
    assert snap is v and np.array_equal(snap.numpy(), [5.0, 6.0])
    assert type(other) is not type(v) and np.array_equal(other.numpy(), [1.0, 2.0])
    x = tf.constant([3.0])
    assert tf.cast(x, tf.float32) is x and tf.cast(x, tf.int32) is not x
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    assert np.array_equal(t.gradient(y, tf.cast(x, tf.float32)).numpy(), [6.0])


def test_mixed_dtypes_are_a_type_error_inside_a_function_and_invalid_argument_eagerly():
    """TF 2.21: ``float32 * float64`` (and ``int32 + 1.5``) is the eager kernel's
    InvalidArgumentError, but inside a ``tf.function`` the graph's op-definition check, a
    TypeError ("Input 'y' of 'Mul' Op has type float64 that does not match type float32 of
    argument 'x'."); so is ``clip_by_global_norm``'s Pack of mixed dtypes."""
    import jax
    with jax.enable_x64(True):
        a, b = tf.constant([1.0]), tf.constant([2.0], tf.float64)
        with pytest.raises(tf.errors.InvalidArgumentError):
            a * b
        with pytest.raises(TypeError, match="Input 'y' of 'Mul' Op has type float64 that does not match type float32"):
            tf.function(lambda x, y: x * y)(a, b)
        with pytest.raises(TypeError, match="'AddV2' Op"):
            tf.function(lambda x: x + 1.5)(tf.constant([1]))
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.constant([1]) + 1.5
        with pytest.raises(TypeError, match="Pack"):
            tf.function(lambda x, y: tf.clip_by_global_norm([x, y], 1.0))(a, b)
        assert tf.function(lambda x, y: x * y)(a, tf.constant([3.0])).numpy().tolist() == [3.0]


def test_expm1_gradient_is_exp_as_tf_not_expm1_plus_one():
    """TF's Expm1Grad multiplies by ``exp(x)``; JAX's rule ``expm1(x) + 1`` cancels for x << 0:
    0 at -40 and 4e-4 off at -10 in float32.  Oracle: ``np.exp`` (TF 2.21 gives the same)."""
    x = tf.constant([-40.0, -10.0, -1e-3, 0.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.math.expm1(x)
    np.testing.assert_allclose(t.gradient(y, x).numpy(), np.exp(x.numpy().astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), np.expm1(x.numpy().astype(np.float64)), rtol=1e-6)
@pytest.mark.parametrize("deferred", [True, False])
def test_cast_of_a_python_float_goes_through_float32_as_tf(deferred):
    """``tf.cast`` converts a Python float with TF's default dtype (float32) before the Cast, so
    ``tf.cast(0.1, tf.float64)`` is ``float64(float32(0.1))`` = 0.10000000149011612 (TF 2.21; a
    list was already rounded so, a lone float kept JAX's exact weak-typed 0.1); eagerly and inside
    a function; a NumPy float64 scalar and ``tf.constant(0.1, tf.float64)`` stay exact, as TF."""
    import jax

    prev = tf.set_deferred_execution(deferred)
    try:
        with jax.enable_x64(True):
            f32 = float(np.float32(0.1))
            assert tf.cast(0.1, tf.float64).numpy() == f32
            assert tf.cast(1e-8, tf.float64).numpy() == float(np.float32(1e-8))
            np.testing.assert_array_equal(tf.cast([0.1, 0.2], tf.float64).numpy(), np.float32([0.1, 0.2]).astype(np.float64))
            assert tf.function(lambda: tf.cast(0.1, tf.float64))().numpy() == f32
            assert tf.cast(np.float64(0.1), tf.float64).numpy() == 0.1
            assert tf.constant(0.1, tf.float64).numpy() == 0.1
            assert tf.cast(3.7, tf.int32).numpy() == 3
            assert tf.cast(0.1, tf.float32).dtype == tf.float32
    finally:
        tf.set_deferred_execution(prev)


def test_a_list_next_to_a_tensor_takes_the_tensors_dtype_as_tf():
    """TF converts a list operand of a binary op with the other operand's dtype: ``h * [0.1, 0.3]``
    of a float16 ``h`` is float16 (tapejax converted the list alone to float32 and JAX promoted:
    float32), a bfloat16 one stays bfloat16, a float64 one subtracts float64's exact 0.1; an int
    list next to a float tensor is converted, a float list next to an int tensor is TF's error
    (InvalidArgumentError for ``t + [...]``, TypeError otherwise).  TF 2.21's values."""
    import jax

    h = tf.constant([1.0, 2.0], tf.float16)
    r = tf.multiply(h, [0.1, 0.3])
    assert r.dtype == tf.float16
    np.testing.assert_array_equal(r.numpy(), np.float16([0.0999755859375, 0.60009765625]))
    r = [0.1, 0.2] - h
    assert r.dtype == tf.float16
    np.testing.assert_array_equal(r.numpy(), np.float16([-0.89990234375, -1.7998046875]))
    assert (tf.constant([1.0, 2.0], tf.bfloat16) - [0.1, 0.2]).dtype == tf.bfloat16
    assert tf.maximum(h, [[0.5, 3.0]]).dtype == tf.float16
    np.testing.assert_array_equal((tf.constant([1.0, 2.0]) * [1, 2]).numpy(), [1.0, 4.0])
    i = tf.constant([1, 2])
    with pytest.raises(tf.errors.InvalidArgumentError):
        i + [0.5, 1.0]
    with pytest.raises(TypeError):
        tf.multiply(i, [0.5, 1.0])
    with pytest.raises(TypeError):
        [0.5, 1.0] + i
    with jax.enable_x64(True):
        r = tf.constant([1.0, 2.0], tf.float64) - [0.1, 0.2]
        np.testing.assert_array_equal(r.numpy(), [0.9, 1.8])


def test_ops_on_python_numbers_alone_take_tfs_dtypes_in_jaxs_x64_mode():
    """A Python float alone is float32 and an int int32 in TF, so ``tf.math.log(2.0)`` and
    ``tf.add(0.1, 0.2)`` are float32 also in JAX's x64 mode (tapejax gave JAX's weak-typed
    float64, which a float32 tensor then refused); ``tf.abs(-3)`` is int32."""
    import jax

    with jax.enable_x64(True):
        r = tf.math.log(2.0)
        assert r.dtype == tf.float32 and r.numpy() == np.log(np.float32(2.0))
        r = tf.add(0.1, 0.2)
        assert r.dtype == tf.float32 and r.numpy() == np.float32(0.1) + np.float32(0.2)
        assert tf.abs(-3).dtype == tf.int32
        assert (tf.constant([1.0, 2.0]) + 0.5 * tf.math.log(2 * np.pi)).dtype == tf.float32
        assert tf.function(lambda: tf.exp(0.1))().dtype == tf.float32
