"""``tapejax/ops/indexing.py`` beyond parity: ``tf.slice`` with a ``begin`` known only when a
compiled step runs (a loop index), against ``jax.lax.dynamic_slice`` and its ``jax.vjp``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


def test_slice_with_a_loop_index_begin_inside_a_function_values_and_gradients():
    """``tf.slice(v, [i * 2, 1], [2, 2])`` in ``for i in tf.range(3)``: the values and the
    Variable's gradient are those of ``dynamic_slice`` (it raised a 'symbolic tensor as a Python
    value' error before)."""
    x = np.arange(24, dtype=np.float32).reshape(6, 4) / 10.0
    v = tf.Variable(x)

    @tf.function
    def f():
        with tf.GradientTape() as tape:
            tot = tf.constant(0.0)
            for i in tf.range(3):
                tot += tf.reduce_sum(tf.sin(tf.slice(v, [i * 2, 1], [2, 2])) * tf.cast(i + 1, tf.float32))
        return tot, tape.gradient(tot, v)

    def ref(a):
        return sum(jnp.sum(jnp.sin(jax.lax.dynamic_slice(a, (i * 2, 1), (2, 2)))) * (i + 1) for i in range(3))

    want, vjp = jax.vjp(ref, jnp.asarray(x))
    got, g = f()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), vjp(jnp.float32(1.0))[0], rtol=1e-6)


def test_slice_with_a_traced_begin_argument():
    """A ``begin`` passed as a function argument (a Tensor), the static path's values."""
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    f = tf.function(lambda b: tf.slice(x, b, [2, 3]))
    np.testing.assert_array_equal(f(tf.constant([1, 1])).numpy(), tf.slice(x, [1, 1], [2, 3]).numpy())
    assert f(tf.constant([0, 0])).shape == (2, 3)


def test_slice_with_a_traced_begin_size_minus_one():
    """-1 takes the rest of an axis whose ``begin`` is a Python int (the batch pattern
    ``tf.slice(x, [i * bs, 0], [bs, -1])``); on an axis whose ``begin`` is traced the size is
    unknown until run time, which XLA cannot compile: a ValueError naming ``size``."""
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    f = tf.function(lambda i: tf.slice(x, [i, 1], [2, -1]))
    np.testing.assert_array_equal(f(tf.constant(1)).numpy(), x.numpy()[1:3, 1:])
    g = tf.function(lambda i: tf.slice(x, [i, 0], [-1, 2]))
    with pytest.raises(ValueError, match="size"):
        g(tf.constant(1))


# -- slices whose start is a traced index (ops/indexing_traced.py) --------------------------

def _entries(fn):
    return list(fn._cache.values()) if hasattr(fn._cache, "values") else [fn._cache[k] for k in fn._cache]


def test_a_range_index_slice_is_proven_in_range_and_needs_no_check():
    """``xs[i * 3:(i + 1) * 3]`` over ``tf.range(4)`` of 12 rows: the range of ``i`` is known, so
    the program has no run-time check (no host sync); its values and the tape's gradient are
    those of ``dynamic_slice`` (``jax.vjp`` the oracle)."""
    x = np.arange(24, dtype=np.float32).reshape(12, 2) / 10.0
    v = tf.Variable(x)

    @tf.function
    def f():
        tot = tf.constant(0.0)
        for i in tf.range(4):
            tot += tf.reduce_sum(tf.sin(v[i * 3:(i + 1) * 3])) * tf.cast(i + 1, tf.float32)
        return tot

    def ref(a):
        return sum(jnp.sum(jnp.sin(jax.lax.dynamic_slice_in_dim(a, i * 3, 3))) * (i + 1) for i in range(4))

    with tf.GradientTape() as tape:
        y = f()
    want, vjp = jax.vjp(ref, jnp.asarray(x))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), vjp(jnp.float32(1.0))[0], rtol=1e-6)
    assert not any(e.checked for e in _entries(f))


@pytest.mark.parametrize("start", [0, 5, 8, -5, -12])
def test_an_argument_start_gives_pythons_slice_where_it_fits(start):
    """An integer argument's ``xs[i:i + 3]`` and ``xs[i:i + 4:2]``: Python's (TF's) slice, a negative
    start counting from the end; the range is unknown, so the program checks at run time."""
    xs = np.arange(12, dtype=np.float32)
    f = tf.function(lambda i: (tf.constant(xs)[i:i + 3], tf.constant(xs)[i:i + 4:2]))
    a, b = f(tf.constant(start))
    np.testing.assert_array_equal(a.numpy(), xs[start:start + 3])
    np.testing.assert_array_equal(b.numpy(), xs[start:start + 4:2])
    assert all(e.checked for e in _entries(f))


@pytest.mark.parametrize("start,got", [(10, 2), (12, 0), (-2, 0), (-13, 2)])
def test_a_start_past_the_end_is_an_error_at_run_time(start, got):
    """TF's ``xs[i:i + 3]`` is shorter there (Python's slice: ``got`` elements, a size known only at
    run time); tapejax's keeps its compiled size, so the step raises InvalidArgumentError naming
    the start and both sizes."""
    xs = np.arange(12, dtype=np.float32)
    assert len(xs[start:start + 3]) == got   # (the oracle: Python's slice, which TF follows)
    f = tf.function(lambda i: tf.constant(xs)[i:i + 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"s = {start} of dimension 0 .* has {got} elements"):
        f(tf.constant(start))


@pytest.mark.parametrize("key", ["prefix", "suffix", "two"])
def test_a_slice_whose_size_is_data_dependent_is_a_value_error(key):
    """``xs[:i]``, ``xs[i:]``, ``xs[i:j]``: the size is known only at run time; a ValueError that
    says what to write instead."""
    xs = tf.constant(np.arange(12, dtype=np.float32))
    fn = {"prefix": lambda i, j: xs[:i], "suffix": lambda i, j: xs[i:], "two": lambda i, j: xs[i:j]}[key]
    with pytest.raises(ValueError, match=r"tf\.slice\(x, \[start\], \[size\]\)"):
        tf.function(fn)(tf.constant(2), tf.constant(5))


def test_a_float_bound_is_a_type_error():
    xs = tf.constant(np.arange(12, dtype=np.float32))
    with pytest.raises(TypeError, match="valid indices"):
        tf.function(lambda i: xs[i:tf.cast(i, tf.float32)])(tf.constant(2))


def test_sliced_assign_at_a_traced_start():
    """``v[i * 2:i * 2 + 2, 1].assign`` / ``v[...].assign_add`` updates that window (NumPy the oracle)."""
    v = tf.Variable(np.zeros((6, 2), np.float32))

    @tf.function
    def f(k):
        v[k * 2:k * 2 + 2, 1].assign(tf.ones([2]) * 5.0)
        v[k * 2:k * 2 + 2].assign_add(tf.ones([2, 2]))

    f(tf.constant(1))
    f(tf.constant(2))
    want = np.zeros((6, 2), np.float32)
    for k in (1, 2):
        want[k * 2:k * 2 + 2, 1] = 5.0
        want[k * 2:k * 2 + 2] += 1.0
    np.testing.assert_array_equal(v.numpy(), want)


def test_slice_bounds_that_are_an_integer_variable_inside_a_function():
    """MoCo's queue update ``queue[ptr:ptr + 2].assign(k)`` with ``ptr`` a Variable, in a compiled
    step: the Variable as a bound is its read, and ``ptr + 2`` keeps the read's linear form, so
    the size is 2 (a TypeError 'valid indices' for the bare Variable bound before, then a
    TracedSizeError); ``tf.slice`` at ``[ptr, 0]``, bounds after ``ptr.assign`` (a new read) and
    ``2 + ptr`` / ``ptr * 1`` too.  Oracle: TF 2.21 (values below)."""
    x = tf.Variable(np.arange(6, dtype=np.float32).reshape(6, 1))
    p = tf.Variable(2)

    @tf.function
    def f():
        x[p:p + 2].assign(tf.zeros([2, 1]))
        a = tf.slice(x, [p, 0], [3, 1])
        p.assign(3)
        return x[p], a, x[p - 1:p + 1], x[p * 1 - 1:2 + p]

    got = [t.numpy().ravel().tolist() for t in f()]
    assert got == [[0.0], [0.0, 0.0, 4.0], [0.0, 0.0], [0.0, 0.0, 4.0]]
    assert x.numpy().ravel().tolist() == [0.0, 1.0, 0.0, 0.0, 4.0, 5.0]
    p.assign(1)
    assert [t.numpy().ravel().tolist() for t in f()][1] == [0.0, 0.0, 0.0]
    assert x.numpy().ravel().tolist() == [0.0, 0.0, 0.0, 0.0, 4.0, 5.0]


def test_slice_with_a_traced_begin_is_checked_in_the_value_check_mode():
    """TF's kernel rejects ``tf.slice(x, [i], [3])`` with ``i`` past ``dim - 3`` (InvalidArgumentError,
    TF's message); ``dynamic_slice`` clamps, so the check is made in the value-check mode only."""
    xs = tf.constant(np.arange(12, dtype=np.float32))
    plain = tf.function(lambda i: tf.slice(xs, [i], [3]))
    np.testing.assert_array_equal(plain(tf.constant(9)).numpy(), [9.0, 10.0, 11.0])
    assert not any(e.checked for e in _entries(plain))
    tf.debugging.enable_value_checks()
    try:
        checked = tf.function(lambda i: tf.slice(xs, [i], [3]))
        np.testing.assert_array_equal(checked(tf.constant(9)).numpy(), [9.0, 10.0, 11.0])
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Expected size\[0\] in \[0, 2\], but got 3"):
            checked(tf.constant(10))
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Expected begin\[0\] in \[0, 12\], but got -1"):
            checked(tf.constant(-1))
    finally:
        tf.debugging.disable_value_checks()


def test_an_eager_scan_checks_its_bodys_slices():
    """``tf.scan`` run eagerly traces its body: a slice by the element is checked by the op itself
    (values of the Python loop; past the end InvalidArgumentError, not JAX's staging error)."""
    x = np.arange(12, dtype=np.float32)
    xs = tf.constant(x)
    out = tf.scan(lambda acc, i: acc + tf.reduce_sum(xs[i * 3:(i + 1) * 3]), tf.range(4), initializer=tf.constant(0.0))
    np.testing.assert_allclose(out.numpy(), np.cumsum([x[k * 3:(k + 1) * 3].sum() for k in range(4)]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="s = 12"):
        tf.scan(lambda acc, i: acc + tf.reduce_sum(xs[i * 3:(i + 1) * 3]), tf.range(5), initializer=tf.constant(0.0))


def test_gather_nd_out_of_range_index_gives_the_fill_not_the_clamped_last_row():
    """``gather_nd`` with an index past the end: NaN (JAX's fill, as ``gather``'s; TF's CPU kernel
    raises), never the value of the last row, which plain JAX indexing clamps to (a silently
    wrong number).  The gradient of a filled entry is dropped.  Oracle: ``jnp`` fill mode."""
    p = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    got = tf.gather_nd(p, [[3, 0], [1, 1], [0, 2]])
    assert np.isnan(got.numpy()[[0, 2]]).all() and got.numpy()[1] == 4.0
    rows = tf.gather_nd(p, [[5], [0]])
    assert np.isnan(rows.numpy()[0]).all() and rows.numpy()[1].tolist() == [1.0, 2.0]
    with tf.GradientTape() as tape:
        tape.watch(p)
        g2 = tf.gather_nd(p, [[3, 0], [1, 1]])
        y = tf.reduce_sum(tf.where(tf.math.is_nan(g2), 0.0, g2))
    want = jax.grad(lambda a: jnp.nansum(a.at[jnp.array([3, 1]), jnp.array([0, 1])].get(mode="fill")))(
        jnp.asarray(p.numpy()))
    np.testing.assert_array_equal(tape.gradient(y, p).numpy(), want)


def test_numpy_bool_array_and_python_bool_as_the_whole_index_are_masks():
    """TF's ``__getitem__`` applies ``boolean_mask`` when the whole index is a bool tensor, a NumPy
    bool array or a Python bool (``errs[np.isfinite(x).all(1)]``): tapejax raised TypeError for the
    NumPy array; a scalar mask is ``boolean_mask``'s ValueError (tapejax expanded it to ``[1, ...]``).
    In a tuple they stay TF's TypeError.  The gradient through the mask scatters back, on a
    Variable too.  Oracle: TF 2.21."""
    m = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(m[np.array([True, False, True])].numpy(), [[1.0, 2.0], [5.0, 6.0]])
    np.testing.assert_array_equal(m[np.array([[True, False], [True, True], [False, False]])].numpy(),
                                  [1.0, 3.0, 4.0])
    with pytest.raises(ValueError):
        m[np.array([True, False])]
    with pytest.raises(ValueError, match="scalar"):
        m[True]
    with pytest.raises(ValueError, match="scalar"):
        tf.boolean_mask(m, True)
    with pytest.raises(TypeError):
        m[np.array([True, False, True]), 0]
    with pytest.raises(TypeError):
        m[np.bool_(True)]
    v = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v[np.array([True, False, True])] ** 2)
    np.testing.assert_allclose(tape.gradient(loss, v).numpy(), [2.0, 0.0, 6.0])


def test_python_bools_in_an_index_follow_tfs_begin_vector():
    """TF 2.21: a Python list / tuple of bools is a tuple of indices, not a mask; TF stacks the slice's
    begin (an index, a slice's start, 0 for ``:`` / ``...`` / ``None``) into one tensor whose first
    entry decides its dtype: all bools are refused by StridedSlice (InvalidArgumentError eagerly,
    TypeError traced), a bool then an int is TypeError eagerly (an int traced), an int first makes
    each bool an int.  A NumPy bool array, a bool tensor and ``tf.boolean_mask`` mask."""
    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    v = tf.Variable(x)
    for f in (lambda: x[[True, False, True]], lambda: v[[True, False, True]], lambda: x[True, False],
              lambda: v[[True, False, True]].assign(tf.zeros([2, 2]))):
        with pytest.raises(tf.errors.InvalidArgumentError, match="Index' of bool"):
            f()
    for f in (lambda: x[True, 0], lambda: x[True, :], lambda: v[True, 0]):
        with pytest.raises(TypeError, match="to EagerTensor of dtype bool"):
            f()
    assert x[0, True].numpy() == 2.0 and x[1:, True].numpy().tolist() == [4.0, 6.0]
    assert x[..., True].numpy().tolist() == [2.0, 4.0, 6.0] and x[None, True].numpy().tolist() == [[3.0, 4.0]]
    v[0, True].assign(9.0)
    assert v.numpy()[0, 1] == 9.0
    with pytest.raises(TypeError, match="valid indices"):
        x[np.bool_(True), 0]
    mask = [True, False, True]
    for m in (np.array(mask), tf.constant(mask)):
        assert x[m].numpy().tolist() == [[1.0, 2.0], [5.0, 6.0]]
    assert tf.boolean_mask(x, mask).numpy().tolist() == [[1.0, 2.0], [5.0, 6.0]]
    with pytest.raises(TypeError, match="DataType bool"):
        tf.function(lambda a: a[[True, False, True]])(x)
    assert tf.function(lambda a: a[True, 0])(x).numpy() == 3.0


def test_gather_nd_of_single_index_rows_gives_indexed_slices_as_tf():
    """TF's ``_GatherNdGrad``: for indices of shape ``[n, 1]`` the params' gradient is
    ``IndexedSlices(grad, squeeze(indices, -1))`` (a Variable's and a watched tensor's); other
    index shapes give a dense ``scatter_nd``.  tapejax's was dense for all."""
    v = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.gather_nd(v, [[2], [0], [2]]) ** 2)
    g = t.gradient(y, v)
    assert isinstance(g, tf.IndexedSlices) and g.indices.numpy().tolist() == [2, 0, 2]
    np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), [[0, 2], [0, 0], [16, 20], [0, 0]])
    x = tf.constant(np.ones((3, 2), np.float32))
    with tf.GradientTape() as t:
        t.watch(x)
        y1 = tf.reduce_sum(tf.gather_nd(x, [[1]]))
        y2 = tf.reduce_sum(tf.gather_nd(x, [[1, 0], [2, 1]]))
    assert isinstance(t.gradient(y1, x), tf.IndexedSlices)
    with tf.GradientTape() as t:
        t.watch(x)
        y2 = tf.reduce_sum(tf.gather_nd(x, [[1, 0], [2, 1]]))
    assert not isinstance(t.gradient(y2, x), tf.IndexedSlices)


def test_a_tensor_index_into_an_empty_axis_is_traced_and_refused_eagerly():
    """``b[j - 1]`` in a ``for j in tf.range(1, tf.size(b) + 1)`` that runs no time for an empty ``b``:
    TF's graph only fails such an index when it runs (the loop gives its initial value); JAX refused
    it while tracing (IndexError).  Eagerly TF's StridedSlice is InvalidArgumentError (was IndexError)."""
    @tf.function
    def total(b):
        s = tf.constant(0)
        for j in tf.range(1, tf.size(b) + 1):
            s += b[j - 1] * j
        return s

    assert total(tf.constant([], tf.int32)).numpy() == 0
    assert total(tf.constant([3, 4], tf.int32)).numpy() == 11
    m = tf.zeros([2, 0, 3])
    assert tf.function(lambda x, i: x[:, i])(m, tf.constant(0)).shape == (2, 3)   # (the padded axis' zeros)
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of bounds"):
        tf.constant([], tf.int32)[tf.constant(0)]
