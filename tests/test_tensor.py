"""Tensor, TensorShape, DType, constant / convert_to_tensor (oracle: TF 2.21's rules,
see notes/tf_facts.md; the parity suite checks the same against real TF)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


@pytest.mark.parametrize("value, dtype", [
    (1.5, "float32"), (1, "int32"), (True, "bool"), ([1, 2.5], "float32"), ([1, 2], "int32"),
    ([], "float32"), (np.float32(1), "float32"), (np.array([1, 2], np.int16), "int16"),
])
def test_constant_dtypes(value, dtype):
    assert tf.constant(value).dtype.name == dtype
    assert tf.convert_to_tensor(value).dtype == dtype


def test_numpy_int64_is_int32_without_x64_and_float64_is_an_error():
    assert tf.constant(np.array([1, 2])).dtype == tf.int32
    with pytest.raises(TypeError, match="jax_enable_x64"):
        tf.constant(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="jax_enable_x64"):
        tf.constant(1.0, dtype=tf.float64)
    with pytest.raises(TypeError, match="does not fit"):
        tf.constant(2**40)


def test_float64_with_x64():
    with jax.enable_x64(True):
        t = tf.constant(np.array([1.0, 2.0]))
        assert t.dtype == tf.float64
        assert tf.constant(2**40).dtype == tf.int64


def test_dtype_argument_rules():
    assert tf.constant(1, dtype=tf.float32).numpy() == 1.0
    with pytest.raises(TypeError, match="Cannot convert 1.5 to EagerTensor of dtype int32"):
        tf.constant(1.5, dtype=tf.int32)
    with pytest.raises(TypeError):
        tf.constant(1.0, dtype=tf.int32)
    assert tf.constant(np.array([1.7]), dtype=tf.int32).numpy().tolist() == [1]  # numpy is cast
    with pytest.raises(TypeError, match="Expected tensor"):
        tf.constant(tf.constant(1.5), dtype=tf.int32)
    with pytest.raises(ValueError, match="Tensor conversion requested dtype int32"):
        tf.convert_to_tensor(tf.constant(1.5), dtype=tf.int32)
    with pytest.raises(ValueError, match="None"):
        tf.convert_to_tensor(None)
    with pytest.raises(TypeError, match="string"):
        tf.constant("abc")


def test_constant_shape_fill_and_reshape():
    np.testing.assert_array_equal(tf.constant(1.0, shape=[2, 2]).numpy(), np.ones((2, 2)))
    assert tf.constant([1.0, 2.0, 3.0, 4.0], shape=(2, 2)).shape == (2, 2)
    with pytest.raises(TypeError, match="unsupported shape"):
        tf.constant([1.0, 2.0, 3.0], shape=[2])


def test_convert_list_holding_tensors_packs():
    x = tf.constant(1.0)
    t = tf.convert_to_tensor([x, 2.0])
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    assert t.dtype == tf.float32


def test_shape_dtype_ndim_and_repr():
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    assert t.shape == (2, 2) and t.shape == [2, 2] and t.shape.as_list() == [2, 2]
    assert t.shape.rank == 2 and t.shape.num_elements() == 4 and isinstance(t.shape[0], int)
    assert repr(t.shape) == "TensorShape([2, 2])" and str(t.shape) == "(2, 2)"
    assert t.dtype == tf.float32 and t.dtype == "float32" and t.dtype == np.float32
    assert repr(t.dtype) == "tf.float32" and str(t.dtype) == "<dtype: 'float32'>"
    assert t.ndim == 2
    assert repr(tf.constant(1.5)) == "<tapejax.Tensor: shape=(), dtype=float32, numpy=1.5>"
    assert "numpy=\narray([[1., 2.]," in repr(t)
    assert str(tf.constant(1.5)) == "tapejax.Tensor(1.5, shape=(), dtype=float32)"
    assert f"{tf.constant(1.5):.2f}" == "1.50"


def test_python_protocols():
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    assert len(t) == 2
    with pytest.raises(TypeError, match="Scalar tensor has no"):
        len(tf.constant(1.0))
    with pytest.raises(TypeError, match="unhashable"):
        hash(t)
    assert {t.ref(): 1}[t.ref()] == 1 and t.ref().deref() is t
    with pytest.raises(ValueError):
        bool(t)
    assert bool(tf.constant([1.0]))
    assert int(tf.constant(2.5)) == 2 and float(tf.constant(2.5)) == 2.5
    rows = list(t)
    np.testing.assert_array_equal(rows[1].numpy(), [3.0, 4.0])
    with pytest.raises(TypeError, match="scalar"):
        iter(tf.constant(1.0))


def test_operators_match_numpy():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([[0.5, -1.0], [2.0, 3.0]], np.float32)
    ta, tb = tf.constant(a), tf.constant(b)
    cases = {
        "+": (ta + tb, a + b), "-": (ta - tb, a - b), "*": (ta * tb, a * b), "/": (ta / tb, a / b),
        "**": (ta ** 2.0, a ** 2), "@": (ta @ tb, a @ b), "neg": (-ta, -a), "radd": (1.0 + ta, 1 + a),
        "rsub": (1.0 - ta, 1 - a), "rtruediv": (1.0 / ta, 1 / a), "rpow": (2.0 ** ta, 2 ** a),
        "abs": (abs(tb), np.abs(b)), "<": (ta < tb, a < b), ">=": (ta >= tb, a >= b),
        "==": (ta == tb, a == b), "!=": (ta != tb, a != b), "//": (ta // 2.0, a // 2), "%": (ta % 1.5, a % 1.5),
    }
    for name, (got, want) in cases.items():
        assert isinstance(got, tf.Tensor), name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, err_msg=name)
    assert (ta == None) is False and (ta != None) is True  # noqa: E711


def test_binary_dtype_rules():
    a = tf.constant([1.0, 2.0])
    ai = tf.constant([1, 2])
    assert (a + 1).dtype == tf.float32 and (1 + a).dtype == tf.float32
    with pytest.raises(tf.errors.InvalidArgumentError, match="AddV2"):
        a + ai
    with pytest.raises(tf.errors.InvalidArgumentError, match="ndims must be >= 2"):
        a @ a


def test_getitem_basic():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = tf.constant(x)
    for key in [0, -1, (0, 1), (slice(None), 1), (Ellipsis, None), (slice(None, None, -1),),
                (1, slice(0, 2), slice(None, None, 2))]:
        np.testing.assert_array_equal(t[key].numpy(), x[key])
    np.testing.assert_array_equal(t[tf.constant(1)].numpy(), x[1])


def test_tensor_is_a_pytree_and_an_array():
    t = tf.constant([1.0, 2.0])
    out = jax.jit(lambda a: a * 2)(t)
    assert isinstance(out, tf.Tensor)
    np.testing.assert_array_equal(out.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(jnp.asarray(t), [1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    assert jax.tree_util.tree_leaves({"a": t})[0] is t.value


@pytest.mark.parametrize("make", [lambda: tf.constant([1.0, 2.0]), lambda: tf.Variable([1.0, 2.0]),
                                  lambda: tf.constant([1.0, 2.0]) * 1.0],
                         ids=["tensor", "variable", "pending"])
def test_numpy_is_a_writable_copy_and_asarray_a_read_only_view(make):
    """TF's ``numpy()`` copies, so ``w = v.numpy(); w[mask] = 0; v.assign(w)`` works and leaves
    ``v`` alone until the assign (it raised "assignment destination is read-only");
    ``np.array(t)`` is a copy too, ``np.asarray(t)`` a read-only view of a Tensor, as TF's, and of a
    Variable a writable copy (TF's reads it; ``tests/test_variable.py``).  Oracle: TF 2.21."""
    t = make()
    a = t.numpy()
    a[0] = 9.0
    a *= 2.0
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    b = np.array(t)
    b += 1.0
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    assert np.asarray(t).flags.writeable == isinstance(t, tf.Variable)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    s = tf.reduce_sum(t).numpy()
    assert isinstance(s, np.float32) and s == 3.0


def test_dtype_objects():
    assert tf.as_dtype("float32") is tf.float32 and tf.as_dtype(np.int32) is tf.int32
    assert tf.as_dtype(float) is tf.float32 and tf.as_dtype(bool) is tf.bool
    assert tf.bfloat16.is_floating and tf.int32.is_integer and not tf.float32.is_integer
    assert tf.float32.as_numpy_dtype is np.float32 and tf.float16.size == 2
    with pytest.raises(TypeError):
        tf.as_dtype("float128x")


def test_set_shape_checks_compatibility_as_tf():
    """``Tensor.set_shape`` (the tf.data / py_function idiom): a compatible shape is a no-op
    (``None`` sizes, TensorShape, ``None``), an incompatible one ValueError, a non-shape
    TypeError; in a function and on a pending value too, which it does not compute."""
    x = tf.constant([1.0, 2.0, 3.0])
    for ok in ([3], [None], None, tf.TensorShape([3]), 3):
        assert x.set_shape(ok) is None
    for bad in ([4], [3, 1], []):
        with pytest.raises(ValueError, match="not compatible with supplied shape"):
            x.set_shape(bad)
    with pytest.raises(TypeError, match="to a shape"):
        x.set_shape("a")

    @tf.function
    def f(a):
        a.set_shape([None, 2])
        return a * 2.0

    assert f(tf.zeros([3, 2])).shape == [3, 2]
    with pytest.raises(ValueError):
        f(tf.zeros([3, 3]))
    w = tf.Variable([[1.0, 2.0]])
    with tf.GradientTape() as tape:
        y = tf.matmul(w, w, transpose_b=True)
        y.set_shape([1, None])
    assert float(tape.gradient(y, w)[0, 1]) == 4.0


def test_a_python_complex_next_to_a_real_tensor_is_tf_error():
    """``t * 1j`` on a float or int tensor is TF's TypeError (``t + 1j`` and ``tf.add``:
    InvalidArgumentError, 1j made a complex128 tensor); tapejax promoted to complex64 as JAX does.
    A complex tensor takes the number.  Oracle: TF 2.21."""
    f, i, v = tf.constant([1.0, 2.0]), tf.constant([1, 2]), tf.Variable([1.0, 2.0])
    for fn in (lambda: f * 1j, lambda: 1j * f, lambda: f - 1j, lambda: f / 1j, lambda: i * 1j, lambda: v * 1j,
               lambda: 1j + f, lambda: tf.multiply(f, 1j), lambda: f ** 1j):
        with pytest.raises(TypeError):
            fn()
    for fn in (lambda: f + 1j, lambda: i + 1j, lambda: v + 1j, lambda: tf.add(f, 1j)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="complex128"):
            fn()
    c = tf.constant([1 + 1j, 2], tf.complex64)
    np.testing.assert_array_equal((c * 1j).numpy(), [-1 + 1j, 2j])


def test_format_of_a_tensor_is_numpys():
    """TF's ``__format__`` formats the NumPy value: ``f"{acc}"`` of a vector is '[1.5 2. ]' (tapejax
    gave ``str(t)``, 'tapejax.Tensor(...)'), a spec on a vector is NumPy's TypeError (tapejax: a
    ValueError from str's format), a scalar formats as its Python number; a pending value too.
    Oracle: TF 2.21."""
    assert f"{tf.constant([1.5, 2.0])}" == "[1.5 2. ]"
    assert f"{tf.constant([[1, 2], [3, 4]])}" == "[[1 2]\n [3 4]]"
    assert f"{tf.constant(0.1)}" == "0.10000000149011612" and f"{tf.constant(0.1):.3f}" == "0.100"
    assert f"{tf.constant(3):05d}" == "00003"
    with pytest.raises(TypeError):
        format(tf.constant([1.5]), ".1f")
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape():
        p = w * 2.0
        assert f"{p}" == "[2. 4.]" and f"{tf.reduce_sum(p):.1f}" == "6.0"


def test_tensor_shape_plus_a_list_concatenates():
    """TF's ``TensorShape.__add__`` is ``concatenate``: ``tf.reshape(x, x.shape[:-1] + [2, 3])`` (tapejax's
    tuple ``+`` took no list: TypeError) gives a TensorShape, and so does a list or tuple on the left;
    ``concatenate`` exists.  Oracle: TF 2.21."""
    x = tf.zeros([4, 6])
    s = x.shape[:-1] + [2, 3]
    assert isinstance(s, tf.TensorShape) and s.as_list() == [4, 2, 3]
    assert tf.reshape(x, s).shape == (4, 2, 3)
    assert (x.shape + (1,)).as_list() == [4, 6, 1] and isinstance(x.shape + (1,), tf.TensorShape)
    assert ([1] + x.shape).as_list() == [1, 4, 6] and ((2,) + x.shape).as_list() == [2, 4, 6]
    assert x.shape.concatenate(tf.TensorShape([None])).as_list() == [4, 6, None]


def test_format_spec_on_a_traced_tensor_is_a_type_error():
    """Inside ``tf.function`` TF's symbolic tensor formats as ``object`` does: ``f"{loss}"`` is its
    ``str``, ``f"{loss:.3f}"`` a TypeError (tapejax raised str's ValueError).  Oracle: TF 2.21."""
    seen = []

    @tf.function
    def f(x):
        seen.append(f"{x}")
        return f"{x:.3f}"

    with pytest.raises(TypeError):
        f(tf.constant(1.0))
    assert seen and "Tensor" in seen[0]


def test_numpy_and_asarray_of_a_traced_tensor_raise_tf_classes():
    """Inside ``tf.function`` TF's ``x.numpy()`` is an AttributeError (a symbolic tensor has no
    ``numpy``) and ``np.asarray(x)`` a NotImplementedError; tapejax raised OperatorNotAllowedInGraphError
    (a TypeError) for both.  Both stay OperatorNotAllowedInGraphErrors too.  Oracle: TF 2.21."""
    caught = []

    @tf.function
    def f(x):
        for fn, cls in ((lambda: x.numpy(), AttributeError), (lambda: np.asarray(x), NotImplementedError),
                        (lambda: np.array(x), NotImplementedError)):
            try:
                fn()
            except cls as e:
                caught.append(isinstance(e, tf.errors.OperatorNotAllowedInGraphError))
        return x * 2.0

    assert float(f(tf.constant(1.5))) == 3.0 and caught == [True, True, True]


def test_iterating_a_traced_tensor_is_refused_where_autograph_does_not_convert_it():
    """TF 2.21: Python iteration over a symbolic tensor (``list(t)``, ``a, b = t``, ``enumerate``, a
    comprehension, a ``for`` in unconverted code) is OperatorNotAllowedInGraphError (a TypeError);
    AutoGraph's converted ``for r in t`` is a loop, and an eager tensor iterates."""
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])

    def loop(a):
        s = tf.constant(0.0)
        for r in a:
            s += tf.reduce_sum(r)
        return s

    def unpack(a):
        p, q = a
        return p - q

    assert [r.numpy().tolist() for r in x] == [[1.0, 2.0], [3.0, 4.0]] and unpack(x).numpy().tolist() == [-2.0, -2.0]
    assert float(tf.function(loop)(x)) == 10.0
    for f in (tf.function(loop, autograph=False), tf.function(unpack), tf.function(lambda a: list(a)),
              tf.function(lambda a: [i for i, _ in enumerate(a)])):
        with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="Iterating over a symbolic"):
            f(x)
    with pytest.raises(TypeError, match="scalar"):
        iter(tf.constant(1.0))


def test_len_of_a_traced_tensor_is_tfs_type_error_and_a_traced_scalar_refuses_iteration_as_symbolic():
    """TF 2.21: ``len(t)`` of a symbolic tensor in unconverted code is TypeError (AutoGraph's converted
    ``len`` gives the length); iterating a traced scalar is OperatorNotAllowedInGraphError first."""
    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with pytest.raises(TypeError, match="len is not well defined for a symbolic Tensor"):
        tf.function(lambda a: len(a), autograph=False)(x)
    assert int(tf.function(lambda a: len(a))(x)) == 3 and len(x) == 3
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        tf.function(lambda a: list(a[0, 0]))(x)


def test_shapes_of_unknown_sizes_as_arguments():
    """TF 2.21: a TensorShape with an unknown size (or rank) cannot become a tensor (ValueError, as
    an argument of ``tf.zeros`` too); ``set_shape`` / ``ensure_shape`` take ``TensorShape(None)`` as any
    shape; a TensorSpec takes ``x.shape.dims``."""
    x = tf.zeros([2, 3])
    u = tf.TensorShape(None)
    for s in (tf.TensorShape([None, 3]), u):
        for f in (tf.convert_to_tensor, tf.zeros):
            with pytest.raises(ValueError, match="Cannot convert a partially known TensorShape"):
                f(s)
    assert tf.convert_to_tensor(x.shape).numpy().tolist() == [2, 3] and tf.zeros(x.shape).shape == (2, 3)
    x.set_shape(u)
    assert tf.ensure_shape(x, u) is x and tf.ensure_shape(x, tf.TensorShape([None, 3])) is x
    assert tf.TensorSpec(x.shape.dims) == tf.TensorSpec([2, 3])


def test_eager_scan_bodies_iterate_as_python_and_function_bodies_refuse():
    """TF 2.21 runs ``tf.scan`` / ``tf.foldl`` called eagerly as Python, so their bodies iterate and
    take ``len`` of an element (tapejax traces them: the trace is no tapejax.function,
    ``state.traces_function``); inside a ``tf.function`` the same body is refused."""
    x = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))

    def step(acc, row):
        return acc + sum(row) * len(row)

    assert tf.scan(step, x, initializer=tf.constant(0.0)).numpy().tolist() == [2.0, 12.0, 30.0]
    assert float(tf.foldl(step, x, initializer=tf.constant(0.0))) == 30.0
    with pytest.raises(TypeError):   # (len first: TF's TypeError; iteration: OperatorNotAllowedInGraphError)
        tf.function(lambda a: tf.scan(step, a, initializer=tf.constant(0.0)))(x)
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        tf.function(lambda a: tf.foldl(lambda acc, row: acc + sum(row), a, initializer=tf.constant(0.0)))(x)


def test_jax_array_on_the_left_defers_to_the_tensor_operator():
    """TF's rule for ``np_array OP tensor`` (NumPy defers to the Tensor: the op is the Tensor's,
    recorded) holds for a ``jax.Array`` or a JAX tracer on the left.  JAX's operators took the
    Tensor's ``__jax_array__`` first and computed a jax.Array no tape saw: the gradient was None.
    ``jnp.asarray`` and jnp functions still get the array."""
    a = jnp.array([2.0, 3.0])
    x = tf.constant([1.0, 4.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        outs = [a + x, a - x, a * x, a / x, a ** x, a > x, a == x, a // x, a % x]
        loss = tf.add_n([tf.reduce_sum(o) for o in outs[:5]])
    assert all(isinstance(o, tf.Tensor) for o in outs)
    assert outs[5].dtype == tf.bool and outs[6].dtype == tf.bool

    def pure(x):
        return sum(jnp.sum(o) for o in (a + x, a - x, a * x, a / x, a ** x))
    np.testing.assert_allclose(tape.gradient(loss, x), jax.grad(pure)(jnp.array([1.0, 4.0])), rtol=1e-6)
    np.testing.assert_array_equal(outs[7], np.array([2.0, 3.0]) // np.array([1.0, 4.0]))
    assert isinstance(jnp.asarray(x), jax.Array) and isinstance(jnp.sin(x), jax.Array)
    assert type(tf.Tensor.__jax_array__(x)) is type(jnp.asarray(x))
    # a tracer on the left (a JAX user's jax.jit over tapejax code): the Tensor's op, on the tracer
    got = jax.jit(lambda t: jnp.asarray(jnp.ones(2) * tf.convert_to_tensor(t) + t))(jnp.array([1.0, 2.0]))
    np.testing.assert_allclose(got, [2.0, 4.0])


def test_a_pytree_function_that_returns_no_array_gives_its_value_not_a_tensor():
    """A Tensor is a pytree node whose leaf is its array: rebuilt from a JAX array (or tracer) it is
    a Tensor, from anything else that thing.  ``jax.device_get(t)`` gave a Tensor holding a NumPy
    array (a ``tapejax.function`` called on it raised AttributeError: no ``aval``), and
    ``tree_map(lambda a: a.shape, t)`` a Tensor holding a tuple; now NumPy data and the tuple."""
    t = tf.constant([1.0, 2.0])
    host = jax.device_get(t)
    assert type(host) is np.ndarray and host.tolist() == [1.0, 2.0]
    assert jax.tree_util.tree_map(lambda a: a.shape, {"t": t}) == {"t": (2,)}
    assert jax.tree_util.tree_map(lambda a: None, [t]) == [None]
    assert jax.eval_shape(lambda a: a * 2, t) == jax.ShapeDtypeStruct((2,), jnp.float32)
    doubled = jax.tree_util.tree_map(lambda a: a * 2, t)
    assert type(doubled) is tf.Tensor and doubled.numpy().tolist() == [2.0, 4.0]
    assert type(jax.jit(lambda a: a + 1)(t)) is tf.Tensor
    np.testing.assert_allclose(tf.function(lambda a: a * 2.0)(host), [2.0, 4.0])


def test_a_typed_prng_key_is_no_tensor_or_variable_with_a_clear_type_error():
    """``tf.Variable`` / ``tf.constant`` of a typed key array (``jax.random.key``, what an nnx model's
    ``Rngs`` hold, met by ``tree_map(tf.Variable, nnx.state(model))``) is a TypeError that names the
    argument and says what to do (it was NumPy's "Cannot interpret 'key<fry>' as a data type")."""
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="initial_value is a JAX PRNG key array"):
        tf.Variable(key)
    with pytest.raises(TypeError, match="value is a JAX PRNG key array.*key_data"):
        tf.constant(key)
    assert tf.constant(jax.random.key_data(key)).dtype == tf.uint32
