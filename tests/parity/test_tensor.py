"""Tensor / Variable objects: dtype inference, Python protocol, operators, repr, assign."""

import re

import numpy as np

from .harness import A, parity, raises


def _unprefix(s):
    """'<tf.Tensor: ...' / '<tapejax.Tensor: ...' -> '<Tensor: ...' (the module prefix may differ)."""
    return re.sub(r"\b(tf|tapejax)\.(Tensor|Variable)\b", r"\2", s)


def _dt(x):
    return x.dtype.name


# --------------------------------------------------------------------------
# constant / convert_to_tensor
# --------------------------------------------------------------------------

@parity(expected=(A(1.5), A(1, "int32"), A(True, "bool"), A([1.0, 2.5]), A([1, 2], "int32"),
                  A(1.0), A(np.zeros([0]))))
def test_constant_python_dtypes(tf):
    """tf.constant: float -> float32, int -> int32, bool -> bool, mixed list -> float32, [] -> float32."""
    return (tf.constant(1.5), tf.constant(1), tf.constant(True), tf.constant([1, 2.5]),
            tf.constant([1, 2]), tf.constant(np.float32(1)), tf.constant([]))


@parity(expected=(A(1.5), A(1, "int32"), A(True, "bool"), A([1.0, 2.5]), A([1.0, 2.0])))
def test_convert_to_tensor_python_dtypes(tf):
    """tf.convert_to_tensor infers like tf.constant; a list mixing a Tensor and a float works."""
    return (tf.convert_to_tensor(1.5), tf.convert_to_tensor(1), tf.convert_to_tensor(True),
            tf.convert_to_tensor([1, 2.5]), tf.convert_to_tensor([tf.constant(1.0), 2.0]))


@parity(x64=True, expected=(A([1.0, 2.0], "float64"), A([1, 2], "int64"), A([1.0, 2.0], "float64"),
                            A([1, 2], "int64"), A(2 ** 40, "int64"), A(2 ** 31, "int64")))
def test_constant_numpy_64bit_dtypes(tf):
    """numpy float64/int64 arrays keep 64-bit dtypes; Python ints beyond int32 become int64 (tapejax: x64 mode)."""
    return (tf.constant(np.array([1.0, 2.0])), tf.constant(np.array([1, 2])),
            tf.convert_to_tensor(np.array([1.0, 2.0])), tf.convert_to_tensor(np.array([1, 2])),
            tf.constant(2 ** 40), tf.constant(2 ** 31))


@parity(expected=(A(1.0), A(1.0), A([1], "int32"), A([1.5]), A(1.5, "float16"), A([[1.0, 1.0], [1.0, 1.0]])))
def test_constant_explicit_dtype(tf):
    """dtype= converts ints to float and numpy floats to int (truncating); shape= fills a scalar."""
    return (tf.constant(1, dtype=tf.float32), tf.convert_to_tensor(1, dtype=tf.float32),
            tf.constant(np.array([1.5]), dtype=tf.int32), tf.convert_to_tensor(np.array([1.5]), dtype=tf.float32),
            tf.constant(1.5, dtype="float16"), tf.constant(1.0, shape=[2, 2]))


@parity(x64=True, expected=A(1.5, "float64"))
def test_constant_float64_request(tf):
    """tf.constant(1.5, dtype=tf.float64) is float64 (tapejax: x64 mode)."""
    return tf.constant(1.5, dtype=tf.float64)


@parity(expected=(True, True, True))
def test_convert_variable_and_tensor_types(tf):
    """convert_to_tensor(Variable) is a Tensor; Variable arithmetic gives Tensors."""
    v = tf.Variable(1.0)
    return (isinstance(tf.convert_to_tensor(v), tf.Tensor), isinstance(v + 1.0, tf.Tensor),
            isinstance(tf.constant(1.0), tf.Tensor))


# --------------------------------------------------------------------------
# Tensor attributes and Python protocol
# --------------------------------------------------------------------------

@parity(expected=([2, 2], [], (2, 2), 2, "int", 2, True, True, 2, 0))
def test_tensor_shape(tf):
    """shape.as_list(), tuple(shape), shape[0] is int, rank, == tuple/list, len(shape), ndim."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    s = tf.constant(1.0)
    return (t.shape.as_list(), s.shape.as_list(), tuple(t.shape), t.shape[0], type(t.shape[0]).__name__,
            t.shape.rank, t.shape == (2, 2), t.shape == [2, 2], len(t.shape), s.shape.rank)


@parity(expected=(2, 0))
def test_tensor_ndim(tf):
    """Tensor.ndim is the rank."""
    return tf.constant([[1.0, 2.0], [3.0, 4.0]]).ndim, tf.constant(1.0).ndim


@parity(expected=("float32", "int32", "bool", True, True, True, True, "tf.float32", "<dtype: 'float32'>"))
def test_tensor_dtype(tf):
    """dtype.name, comparisons with tf.float32 / 'float32' / np.float32, repr and str of a dtype."""
    t = tf.constant(1.0)
    return (t.dtype.name, tf.constant(1).dtype.name, tf.constant(True).dtype.name,
            t.dtype == tf.float32, t.dtype == "float32", t.dtype == np.float32, t.dtype.is_floating,
            repr(t.dtype), str(t.dtype))


@parity(expected=("<Tensor: shape=(), dtype=float32, numpy=1.5>",
                  "Tensor(1.5, shape=(), dtype=float32)",
                  "<Tensor: shape=(2,), dtype=int32, numpy=array([1, 2], dtype=int32)>",
                  "<Tensor: shape=(2, 2), dtype=float32, numpy=\narray([[1., 2.],\n       [3., 4.]], dtype=float32)>",
                  "Tensor(\n[[1. 2.]\n [3. 4.]], shape=(2, 2), dtype=float32)"))
def test_tensor_repr_str(tf):
    """repr / str of Tensors match TF's format (up to the 'tf.'/'tapejax.' prefix)."""
    m = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return tuple(_unprefix(s) for s in (repr(tf.constant(1.5)), str(tf.constant(1.5)), repr(tf.constant([1, 2])),
                                        repr(m), str(m)))


@parity(expected=(True, False, True, 2, 2.5, 2, "1.50", "ndarray", "float32", "float32"))
def test_tensor_python_protocol(tf):
    """bool/len/float/int/format/numpy() of Tensors."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return (bool(tf.constant(1.0)), bool(tf.constant(0.0)), bool(tf.constant([1.0])), len(t),
            float(tf.constant(2.5)), int(tf.constant(2.5)), f"{tf.constant(1.5):.2f}",
            type(t.numpy()).__name__, t.numpy().dtype.name, np.asarray(t).dtype.name)


@parity(expected=[A(1.0), A(2.0)])
def test_tensor_iteration(tf):
    """Iterating a vector Tensor yields scalar Tensors."""
    return list(tf.constant([1.0, 2.0]))


@parity(expected=(A([1.0, 2.0]), A(2.0), A([2.0, 4.0]), A([3.0, 4.0]), A([[[1.0], [2.0]], [[3.0], [4.0]]]),
                  A([[3.0, 4.0], [1.0, 2.0]]), A([3.0, 4.0]), A(2.0), A([3.0, 4.0]), A(2.0), A([[2.0], [4.0]])))
def test_tensor_getitem(tf):
    """__getitem__: ints, tuples, slices, ellipsis/None, negative, int Tensor, Python list (= tuple!), bool mask."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return (t[0], t[0, 1], t[:, 1], t[-1], t[..., None], t[::-1], t[tf.constant(1)], t[[0, 1]], t[t > 2.0],
            t[0][1], t[:, 1:])


@parity(expected=(A([[True, True], [True, True]], "bool"), A([[False, True], [False, False]], "bool"),
                  A([[True, True], [False, False]], "bool"), A([[True, False], [True, True]], "bool"),
                  A([[True, False], [False, False]], "bool"), A([[False, True], [True, True]], "bool"),
                  A([[False, False], [True, True]], "bool"), A([[True, True], [False, False]], "bool"),
                  False, True))
def test_tensor_comparisons_elementwise(tf):
    """==, !=, <, >=, >, <= are elementwise bool Tensors in TF2; == None is False; `t in [t]` is True."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return (t == t, t == 2.0, t == [1.0, 2.0], t != 2.0, t < 2.0, t >= 2, t > 2.0, t <= 2.0,
            t == None, t in [t])  # noqa: E711


@parity(expected=A(False, "bool"))
def test_tensor_eq_incompatible_shapes(tf):
    """== between incompatible shapes gives a scalar False Tensor, no error."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return t == tf.constant([1.0, 2.0, 3.0])


@parity(expected=(A([2.0, 3.0]), A([2.0, 3.0]), A([-1.0, 0.0]), A([1.0, 0.0]), A([2.0, 4.0]), A([2.0, 4.0]),
                  A([0.5, 1.0]), A([2.0, 1.0]), A([1.0, 4.0]), A([2.0, 4.0]), A([1.0, 1.4142135]), A([-1.0, -2.0]),
                  A([1.0, 2.0]), A([2.0, 4.0]), A([2.0, 3.0]), A([1.0, 2.0])))
def test_tensor_arithmetic_operators(tf):
    """+ - * / ** with scalars on either side, unary -, abs, lists and numpy float64 operands keep float32."""
    a = tf.constant([1.0, 2.0])
    return (a + 1, 1 + a, a - 2.0, 2.0 - a, a * 2, 2.0 * a, a / 2.0, 2.0 / a, a ** 2, 2 ** a, a ** 0.5, -a,
            abs(-a), a + [1, 2], a + np.array([1.0, 1.0]), a * True)


@parity(expected=(A([[7.0, 10.0], [15.0, 22.0]]), A([[3.0], [7.0]]), A([[3.0]])))
def test_tensor_matmul_operator(tf):
    """@ between matrices, with a nested list, and Variable @ Tensor."""
    m = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return m @ m, m @ [[1.0], [1.0]], tf.Variable([[1.0, 2.0]]) @ tf.constant([[1.0], [1.0]])


@parity(expected=(A([2, 3], "int32"), A([0, 1], "int32"), A([1, 4], "int32"), A([0.0, 1.0]), A([1.0, 0.5]),
                  A([True, False], "bool"), A([False, True], "bool")))
def test_tensor_int_and_bool_operators(tf):
    """int32 + int, //, ** keep int32; float // and %; ~ and & on bool Tensors."""
    a = tf.constant([1.0, 2.0])
    ai = tf.constant([1, 2])
    return (ai + 1, ai // 2, ai ** 2, a // 2.0, a % 1.5, ~(a > 1.0), (a > 1.0) & (a < 3.0))


@parity(x64=True, expected=(A([1.0, 1.0], "float64"), A([0.5, 1.0], "float64")))
def test_int_truediv_is_float64(tf):
    """int32 / int32 and int32 / 2 give float64 (tapejax: x64 mode)."""
    ai = tf.constant([1, 2])
    return ai / ai, ai / 2


# --------------------------------------------------------------------------
# Variable
# --------------------------------------------------------------------------

@parity(expected=("int32", "float32", "bool", A(1.0), A([1.0, 1.0]), A([1.0, 2.0]), A(3.0), True, True))
def test_variable_construction(tf):
    """Variable dtypes from Python values, dtype=, a callable, a Tensor, a Variable; trainable by default."""
    return (_dt(tf.Variable(1)), _dt(tf.Variable(1.5)), _dt(tf.Variable(True)), tf.Variable(1, dtype=tf.float32),
            tf.Variable(lambda: tf.constant([1.0, 1.0])), tf.Variable(tf.constant([1.0, 2.0])),
            tf.Variable(tf.Variable(3.0)), tf.Variable(1.0).trainable, tf.Variable(1).trainable)


@parity(x64=True, expected=("int64", A([1, 2], "int64"), "float64"))
def test_variable_from_numpy_64bit(tf):
    """Variable(np.array([1, 2])) is int64, from float64 numpy float64 (tapejax: x64 mode)."""
    v = tf.Variable(np.array([1, 2], dtype=np.int64))
    return _dt(v), v, _dt(tf.Variable(np.array([1.0, 2.0])))


@parity(expected=("Variable:0", "Variable:0", "w:0", "w:0"))
def test_variable_default_names(tf):
    """Unnamed Variables are all 'Variable:0'; name='w' gives 'w:0' (not uniquified in eager)."""
    return tf.Variable(1.0).name, tf.Variable(2.0).name, tf.Variable(1.0, name="w").name, \
        tf.Variable(1.0, name="w").name


@parity(expected=("<Variable 'Variable:0' shape=(2,) dtype=float32, numpy=array([1., 2.], dtype=float32)>",
                  "<Variable 'Variable:0' shape=() dtype=float32, numpy=1.5>",
                  "<Variable 'Variable:0' shape=(2,) dtype=float32, numpy=array([1., 2.], dtype=float32)>"))
def test_variable_repr(tf):
    """repr/str of a Variable match TF's format (up to the 'tf.'/'tapejax.' prefix)."""
    v = tf.Variable([1.0, 2.0])
    return _unprefix(repr(v)), _unprefix(repr(tf.Variable(1.5))), _unprefix(str(v))


@parity(expected=([2], "float32", True, A([1.0, 2.0]), True, True, False))
def test_variable_attributes(tf):
    """Variable shape/dtype/trainable/numpy(); read_value() and value() are Tensors; a Variable is not a Tensor."""
    v = tf.Variable([1.0, 2.0])
    return (v.shape.as_list(), v.dtype.name, v.trainable, v.numpy(), isinstance(v.read_value(), tf.Tensor),
            isinstance(v.value(), tf.Tensor), isinstance(v, tf.Tensor))


@parity(expected=(A([3.0, 4.0]), A([4.0, 6.0]), A([3.5, 5.5]), A([3.5, 5.5]), True, A([7.0, 11.0]), None,
                  A([0.0, 0.0])))
def test_variable_assign_family(tf):
    """assign/assign_add/assign_sub update in place and return the new value (a Variable); read_value=False returns None."""
    v = tf.Variable([1.0, 2.0])
    r1 = v.assign([3.0, 4.0])
    r1v = tf.convert_to_tensor(r1)
    r2 = v.assign_add(tf.constant([1.0, 2.0]))
    r2v = tf.convert_to_tensor(r2)
    r3 = v.assign_sub([0.5, 0.5])
    r3v = tf.convert_to_tensor(r3)
    after = v.read_value()
    is_var = isinstance(r3, tf.Variable)
    doubled = v.assign_add([0.0, 0.0]) * 2.0
    none = v.assign([0.0, 0.0], read_value=False)
    return r1v, r2v, r3v, after, is_var, doubled, none, v.read_value()


@parity(expected=(A([3.0, 4.0]), A([3.0, 3.0]), A([5.0, 2.0])))
def test_variable_assign_conversions_and_chaining(tf):
    """assign accepts Python ints and float64 numpy for float32; chained assign().assign_add(); sliced assign."""
    v = tf.Variable([1.0, 2.0])
    v.assign([3, 4])
    a = v.read_value()
    v.assign(np.array([3.0, 4.0]))
    w = tf.Variable([0.0, 0.0])
    w.assign([1.0, 1.0]).assign_add([2.0, 2.0])
    u = tf.Variable([1.0, 2.0])
    u[0].assign(5.0)
    return a, w.read_value(), u.read_value()


@parity(expected=(A([2.0, 3.0]), A([2.0, 3.0]), A([1.0, 4.0]), A([-1.0, -2.0]), A(1.0), A([True, True], "bool"),
                  A([True, False], "bool"), True, True, True))
def test_variable_operators(tf):
    """Variable operators give Tensors: v + 1, 1 + v, v * v, -v, v[0], ==."""
    v = tf.Variable([1.0, 2.0])
    return (v + 1, 1 + v, v * v, -v, v[0], v == v, v == 1.0, isinstance(v + 1, tf.Tensor),
            isinstance(-v, tf.Tensor), isinstance(v[0], tf.Tensor))


@parity(expected=(A(5, "int32"), A(3, "int32")))
def test_int_variable_assign(tf):
    """int32 Variables assign and assign_add with Python ints."""
    v = tf.Variable(1)
    v.assign(5)
    a = v.read_value()
    v.assign_sub(2)
    return a, v.read_value()


@parity
def test_updates_with_gradients_and_ops_on_them(tf):
    """Variable updates whose delta is computed from gradients (tapejax keeps these pending and
    computes them together): the values over three steps, a value read in between, the updated
    Variable returned (None with read_value=False), ops on the gradients, and the errors for a
    delta of another shape or dtype, which leave the Variable unchanged."""
    from .harness import raises
    w, b = tf.Variable([[1.0, -2.0], [0.5, 3.0]]), tf.Variable([0.25, -0.5])
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    seen = []
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b))
        gw, gb = tape.gradient(loss, [w, b])
        r = w.assign_sub(0.1 * gw)
        none = b.assign_add(-0.1 * gb, read_value=False)
        held = w.read_value()
        b.assign_sub(tf.sqrt(tf.square(gb)) * 0.01)
        seen.append((loss, held, tf.convert_to_tensor(r), none, tf.exp(-tf.abs(gw)) * 2.0 + 1.0))
    bad_shape = raises(w.assign_sub, 0.1 * gb)
    bad_dtype = raises(w.assign_sub, tf.cast(gw, tf.float16) * 2.0)
    return seen, bad_shape, bad_dtype, w.read_value(), b.read_value()


@parity
def test_a_manual_training_loop_whose_updates_are_predicted(tf):
    """A manual loop (tapejax predicts its `assign_sub` updates into the gradient's program from
    step 3 and returns the gradients uncomputed): every loss, a gradient read at step 6 (tapejax
    recomputes it), an update with another learning rate at step 8 and one with another
    Variable's gradient at step 9 (neither matches a prediction), the final values."""
    w1, b1 = tf.Variable([[0.5, -1.0], [1.5, 0.25]]), tf.Variable([0.1, -0.2])
    w2, b2 = tf.Variable([[1.0], [-0.5]]), tf.Variable([0.3])
    x = tf.constant([[1.0, 2.0], [-1.0, 0.5], [0.25, 3.0]])
    y = tf.constant([[1.0], [0.0], [2.0]])
    losses, read = [], None
    for step in range(10):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
            loss = tf.reduce_mean(tf.square(tf.matmul(h, w2) + b2 - y))
        grads = tape.gradient(loss, [w1, b1, w2, b2])
        lr = 0.05 if step == 7 else 0.1
        if step == 8:
            grads[1], grads[3] = grads[1] * 0.0 + tf.reduce_sum(grads[3]), grads[3]
        for v, g in zip([w1, b1, w2, b2], grads):
            v.assign_sub(lr * g)
        if step == 5:
            read = grads[0]
        losses.append(loss)
    return losses, read, w1, b1, w2, b2


@parity
def test_tapes_reading_variables_right_after_their_updates(tf):
    """Each step's tape reads Variables updated by the step before (tapejax computes those
    updates inside the gradient's program): five steps' losses and gradients; then, under one
    tape, a read, an assign and a second read (both reads count, each at its own value), a
    persistent tape's two calls and a second derivative through nested tapes."""
    w, b = tf.Variable([[0.5, -1.0], [1.5, 0.25]]), tf.Variable([0.1, -0.2])
    x = tf.constant([[1.0, 2.0], [-1.0, 0.5], [0.25, 3.0]])
    seen = []
    for step in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.nn.relu(tf.matmul(x, w) + b) - 1.0))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        seen.append((loss, gw, gb))
    with tf.GradientTape() as tape:
        first = tf.reduce_sum(w * w)
        w.assign_sub(0.5 * tf.ones_like(w))
        second = tf.reduce_sum(w * 3.0)
        y = first + second
    g_two_reads = tape.gradient(y, w)
    w.assign_sub(0.1 * g_two_reads)
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(tf.matmul(x, w) * b)
        z = tf.reduce_sum(w * w * w)
    persistent = tape.gradient(y, [w, b]), tape.gradient(z, w)
    b.assign_sub(0.1 * persistent[0][1])
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(w * w * w) + tf.reduce_sum(b * b)
        g = inner.gradient(y, [w, b])
        s = tf.reduce_sum(g[0] * g[0]) + tf.reduce_sum(g[1])
    return seen, g_two_reads, first, second, persistent, g, outer.gradient(s, [w, b]), w, b


@parity
def test_empty_constants_take_any_dtype(tf):
    """``tf.constant([], tf.int32)`` / ``[[]]`` with an integer or boolean dtype is an empty
    tensor of it (an empty list is no float data to refuse); a float into an int still raises."""
    return (tf.constant([], tf.int32), tf.constant([[]], tf.bool), tf.constant([], tf.uint8),
            tf.constant([[], []], tf.int32), raises(tf.constant, [1.5], tf.int32))


@parity()
def test_cast_of_a_float64_numpy_constant_to_a_narrower_dtype(tf):
    """``tf.cast`` of a float64 / complex128 NumPy array (the Transformer tutorial's
    ``tf.cast(positional_encoding, tf.float32)``): rounded to float32 and bfloat16, truncated
    toward zero to int32, the real part to a real dtype, overflow to inf, nonzero to True."""
    a = np.array([0.5, -1.7, 2.9, 1e40, 1.0 / 3.0])
    c = np.array([1 + 2j, -0.5 - 1j])
    return (tf.cast(a, tf.float32), tf.cast(a[:3], tf.int32), tf.cast(np.float64(2.5), tf.float32),
            tf.cast(a, tf.bool), tf.cast(a[:3], tf.bfloat16), tf.cast(c, tf.float32), tf.cast(c, tf.complex64))
