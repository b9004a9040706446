"""Round fifteen (b): the TF differences earlier rounds of user programs left open, each as the
program that shows it, run under real TensorFlow 2.21 and under tapejax.

``TensorShape`` as TF 2.21 has it (``dims`` of ``Dimension``, ``TensorShape(None)``, ``merge_with``,
``is_compatible_with``, ``concatenate``, ``==`` with lists, ``bool`` of a scalar's shape); Variables
declaring a shape less specific than their value's (``shape=[None, 3]``, ``TensorShape(None)``:
their xfail waits for the ``core/variable.py`` change the round's report describes); a Python list
of bools as an index (a tuple of indices, not a mask: TF's classes eagerly and traced); Python
iteration over a traced tensor (OperatorNotAllowedInGraphError where AutoGraph does not convert
it); ``bucket_by_sequence_length``'s errors and boundaries; the gradient of a ``tf.while_loop``
eagerly, and traced without a bound (tapejax's documented limit); ``SaveOptions(
experimental_custom_gradients=...)`` in the saving process.
"""
import os
import tempfile

import numpy as np

from .harness import Raised, init_array, parity, raises, xfail_on_tapejax

# ---------------------------------------------------------------------------
# 3. TensorShape
# ---------------------------------------------------------------------------


@parity
def test_tensor_shape_dims_are_dimensions_and_indexing_gives_ints(tf):
    """``shape.dims`` is a list of ``Dimension`` (``.value``, ``==`` an int, arithmetic), ``shape[i]`` an
    int, ``shape[1:]`` a TensorShape; ``as_list`` / ``rank`` / ``ndims``; ``tf.compat.dimension_value``."""
    s = tf.zeros([2, 3, 4]).shape
    p = tf.TensorShape([None, 3])
    d = s.dims
    return ([type(x).__name__ for x in d], [x.value for x in d], d[0] == 2, int(d[1]), repr(d[2]),
            (d[0] * 2).value, (p.dims[0] + 1).value, [x.value for x in p.dims],
            s[1], s[-1], p[0], repr(s[1:]), type(s[1:]).__name__, s.as_list(), p.as_list(), s.rank, s.ndims,
            tf.compat.dimension_value(d[0]), tf.compat.dimension_value(s[0]),
            repr(tf.TensorShape(s.dims)), repr(tf.TensorShape(3)), [type(x).__name__ for x in s])


@parity
def test_tensor_shape_compatibility_merge_and_concatenate(tf):
    """``merge_with`` fills unknown sizes from the other shape and raises ValueError on a conflict;
    ``is_compatible_with`` / ``most_specific_compatible_shape`` / ``concatenate`` / ``+`` with lists and
    tuples; the rank asserts and ``with_rank``."""
    s = tf.TensorShape([2, 3, 4])
    p = tf.TensorShape([None, 3])
    return (repr(s.merge_with([2, None, 4])), raises(s.merge_with, [3, None, 4]), raises(s.merge_with, [3, None]),
            repr(p.merge_with([5, None])), s.is_compatible_with([2, None, 4]), s.is_compatible_with([2, 5, 4]),
            s.is_compatible_with(tf.TensorShape([None, None, None])), s.is_compatible_with([2, 3]),
            repr(s.most_specific_compatible_shape([2, 5, 4])), repr(s.concatenate([5])), repr(p + [4]),
            repr([4] + p), repr(p + (4,)), raises(s.assert_is_compatible_with, [2, None, 5]),
            raises(s.assert_has_rank, 2), repr(p.with_rank(2)), raises(p.with_rank, 3),
            raises(p.with_rank_at_most, 1), repr(p.with_rank_at_least(1)), raises(p.assert_is_fully_defined),
            p.is_fully_defined(), p.num_elements(), s.num_elements(),
            s.is_subtype_of(tf.TensorShape([2, None, 4])), tf.TensorShape([2, None, 4]).is_subtype_of(s))


@parity
def test_tensor_shape_equality_truth_and_text(tf):
    """``==`` with lists, tuples and shapes (``None`` sizes equal), against a string or ``None``; a
    scalar's shape is true (TF: a known rank); ``str`` / ``repr``; shapes as dict keys."""
    s = tf.TensorShape([2, 3])
    p = tf.TensorShape([None, 3])
    return (s == [2, 3], s == (2, 3), s == tf.TensorShape([2, 3]), s != [2, 4], s == "abc", s == None,  # noqa: E711
            p == [None, 3], p != tf.TensorShape([None, 3]), bool(tf.TensorShape([])), bool(s),
            str(s), repr(p), str(p), str(tf.TensorShape([3])), {s: 1}[tf.TensorShape([2, 3])],
            len(s), list(s), 3 in s, [None, 3] in [p])


@parity
def test_tensor_shape_refuses_what_is_no_dimension(tf):
    """A negative size is ValueError, a float or a string TypeError; a list of floats is no shape for
    ``==`` (False); a scalar integer tensor is a size."""
    return (raises(tf.TensorShape, [-1, 2]), raises(tf.TensorShape, [1.5]), raises(tf.TensorShape, ["a"]),
            raises(tf.TensorShape, "ab"), tf.TensorShape([2]) == [2.0],
            raises(tf.TensorShape([2]).is_compatible_with, [-1]), repr(tf.TensorShape([tf.constant(3)])))


@parity
def test_tensor_shape_of_unknown_rank(tf):
    """``TensorShape(None)``: rank / ndims / dims None; ``len``, iteration and ``as_list`` raise
    ValueError; indexing gives None, slicing an unknown shape; compatible with every shape, merged
    into the other, concatenated unknown; ``str`` '<unknown>'; equal only to itself; a TensorSpec of it."""
    u = tf.TensorShape(None)
    return (repr(u), str(u), u.rank, u.ndims, u.dims, raises(u.as_list), raises(len, u), raises(list, u),
            u[0], repr(u[1:]), repr(u[:2]), repr(u[-2:]), u == tf.TensorShape(None), u == [None],
            u.is_fully_defined(), u.num_elements(),
            u.is_compatible_with([1, 2]), tf.TensorShape([1, 2]).is_compatible_with(u), repr(u.merge_with([1, 2])),
            repr(tf.TensorShape([1, 2]).merge_with(u)), repr(u.concatenate([1, 2])),
            repr(tf.TensorShape([1]).concatenate(u)), bool(u), repr(tf.TensorSpec(u, tf.float32)))


@parity
def test_shapes_with_unknown_sizes_as_op_arguments(tf):
    """A TensorShape with an unknown size or rank cannot become a tensor (``convert_to_tensor``,
    ``tf.zeros``: ValueError); a known one can; ``set_shape`` and ``ensure_shape`` take
    ``TensorShape(None)`` as any shape; ``tf.TensorSpec(x.shape.dims)``."""
    x = tf.constant(init_array((2, 3), 10))
    u = tf.TensorShape(None)
    p = tf.TensorShape([None, 3])
    return (raises(tf.convert_to_tensor, p), raises(tf.convert_to_tensor, u), raises(tf.zeros, p), raises(tf.zeros, u),
            tf.convert_to_tensor(x.shape), tf.zeros(x.shape), raises(x.set_shape, u), tf.ensure_shape(x, u),
            tf.ensure_shape(x, p), raises(tf.ensure_shape, x, [None, 4]), repr(tf.TensorSpec(x.shape.dims)))


# ---------------------------------------------------------------------------
# 1. Variables with a declared shape
# ---------------------------------------------------------------------------

@parity
def test_variable_with_a_partly_known_shape_grows_by_assign(tf):
    """``tf.Variable(zeros[2, 3], shape=[None, 3])``: ``v.shape`` is (None, 3), its value (2, 3); an
    ``assign`` of a (4, 3) value changes the value's shape (``tf.shape(v)``, reads) and the gradient
    of a loss of it has the new shape; an incompatible assign is ValueError; ``assign_add`` of a
    value of another shape than the current one is InvalidArgumentError."""
    v = tf.Variable(tf.zeros([2, 3]), shape=[None, 3])
    before = (v.shape.as_list(), str(v.shape), v.numpy(), tf.shape(v))
    v.assign(tf.constant(init_array((4, 3), 1)))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v * v)
    g = tape.gradient(y, v)
    bad = raises(v.assign, tf.ones([4, 2]))
    v.assign_add(tf.ones([4, 3]))
    return (before, v.shape.as_list(), tf.shape(v), v.read_value(), g, bad,
            raises(v.assign_add, tf.ones([2, 3])), repr(v.get_shape()))


@parity
def test_variable_of_unknown_rank_takes_a_value_of_any_rank(tf):
    """``shape=tf.TensorShape(None)``: ``v.shape`` is unknown (rank None), an assign of a vector to a
    scalar Variable works, and the tape's gradient has the vector's shape."""
    v = tf.Variable(3.0, shape=tf.TensorShape(None))
    r0 = (v.shape.rank, str(v.shape), v.numpy())
    v.assign([1.0, 2.0])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v * v)
    return r0, v.shape.rank, v.numpy(), tape.gradient(y, v)


@parity
def test_a_checkpoint_restores_another_size_into_a_declared_shape(tf):
    """A (4, 3) value saved from a ``shape=[None, 3]`` Variable restores into another such Variable
    holding (1, 3); into a plain (1, 3) Variable it is ValueError."""
    d = tempfile.mkdtemp(prefix="parity-vs-")
    v = tf.Variable(tf.zeros([2, 3]), shape=[None, 3])
    v.assign(tf.constant(init_array((4, 3), 2)))
    path = tf.train.Checkpoint(v=v).save(os.path.join(d, "c"))
    w = tf.Variable(tf.zeros([1, 3]), shape=[None, 3])
    tf.train.Checkpoint(v=w).restore(path)
    plain = tf.Variable(tf.zeros([1, 3]))
    return w.numpy(), w.shape.as_list(), raises(lambda: tf.train.Checkpoint(v=plain).restore(path))


@parity
def test_a_function_reads_a_variable_whose_shape_changed(tf):
    """A ``tf.function`` reading a ``shape=[None, 3]`` Variable, called, then the Variable grown by an
    eager assign and the function called again: TF's one graph serves both sizes."""
    v = tf.Variable(tf.ones([2, 3]), shape=[None, 3])

    @tf.function
    def total():
        return tf.reduce_sum(v), tf.shape(v)

    first = total()
    v.assign(tf.ones([5, 3]))
    return first, total()


@parity
def test_variable_shape_arguments_that_already_agree(tf):
    """A ``shape`` incompatible with the initial value is ValueError; a full ``shape`` equal to it and
    ``validate_shape=False`` without ``shape`` keep the value's shape, and an assign of another shape
    to those is ValueError."""
    a = tf.Variable(tf.zeros([2, 3]), validate_shape=False)
    b = tf.Variable(tf.zeros([2, 3]), shape=[2, 3])
    return (raises(tf.Variable, tf.zeros([2, 3]), shape=[None, 4]), raises(tf.Variable, tf.zeros([2, 3]), shape=[3, 2]),
            raises(tf.Variable, tf.zeros([2, 3]), shape=[None]), a.shape.as_list(), b.shape.as_list(),
            raises(a.assign, tf.ones([4])), raises(b.assign, tf.ones([4, 3])))


@parity
def test_variable_validate_shape_false_still_checks_the_shape_argument(tf):
    """TF 2: ``validate_shape=False`` with a ``shape`` the value does not fit is still ValueError, and
    with ``shape=[None, 3]`` the Variable declares it."""
    return (raises(tf.Variable, tf.zeros([2, 3]), validate_shape=False, shape=[5]),
            tf.Variable(tf.zeros([2, 3]), validate_shape=False, shape=[None, 3]).shape.as_list())


# ---------------------------------------------------------------------------
# 2. A Python list of bools as an index
# ---------------------------------------------------------------------------


@parity
def test_a_list_of_bools_is_a_tuple_of_indices_not_a_mask(tf):
    """``t[[True, False, True]]`` is ``t[True, False, True]`` (TF stacks the bools as the slice's begin:
    StridedSlice refuses a bool index, InvalidArgumentError) for a Tensor and a Variable, and its
    sliced assign; a bool then an int cannot be converted (TypeError); an int first makes the bools
    ints; a NumPy bool array or a bool tensor is a mask; ``tf.boolean_mask`` is the way."""
    x = tf.constant(init_array((3, 2), 5))
    v = tf.Variable(x)
    m = [True, False, True]
    return (raises(lambda: x[m]), raises(lambda: v[m]), raises(lambda: v[m].assign(tf.zeros([2, 2]))),
            raises(lambda: x[(True, False)]), raises(lambda: tf.constant([1, 2, 3])[[True]]),
            raises(lambda: x[True, 0]), raises(lambda: x[True, :]), x[0, True], x[1:, True], x[..., True],
            x[None, True], v[0, True], raises(lambda: x[np.bool_(True), 0]), raises(lambda: x[True]),
            x[np.array(m)], v[np.array(m)], x[tf.constant(m)], tf.boolean_mask(x, m), tf.boolean_mask(v, m))


@parity
def test_a_list_of_bools_as_an_index_inside_a_function(tf):
    """Traced, the all-bool begin is a TypeError (the op's dtype check) and a bool before an int is
    an int (``a[True, 0]`` is ``a[1, 0]``)."""
    x = tf.constant(init_array((3, 2), 6))
    f = tf.function(lambda a: a[[True, False, True]])
    g = tf.function(lambda a: a[True, 0])
    h = tf.function(lambda a: a[True, False])
    return raises(f, x), g(x), raises(h, x)


# ---------------------------------------------------------------------------
# 4. Python iteration over a traced tensor
# ---------------------------------------------------------------------------


@parity
def test_iterating_a_traced_tensor_outside_autograph_is_refused(tf):
    """In a ``tf.function`` a converted ``for r in x`` is a loop; ``autograph=False``, ``list(x)``,
    ``a, b, c = x``, a comprehension, ``enumerate`` / ``zip`` loops, ``*x`` and ``sum(x)`` iterate in
    Python: OperatorNotAllowedInGraphError (a TypeError).  ``range(len(x))`` loops and iteration
    of an eager tensor work."""
    x = tf.constant(init_array((3, 2), 7))

    def loop(a):
        s = tf.constant(0.0)
        for r in a:
            s += tf.reduce_sum(r * r)
        return s

    def unpack(a):
        p, q, r = a
        return p + r

    def enum(a):
        s = tf.constant(0.0)
        for i, r in enumerate(a):
            s += tf.cast(i, tf.float32) * tf.reduce_sum(r)
        return s

    def by_index(a):
        s = tf.constant(0.0)
        for i in range(len(a)):
            s += a[i, 0]
        return s

    fns = [tf.function(loop, autograph=False), tf.function(lambda a: list(a)), tf.function(unpack),
           tf.function(unpack, autograph=False), tf.function(lambda a: tf.stack([r * 2 for r in a])),
           tf.function(enum), tf.function(lambda a: tf.add(*a[:2])), tf.function(lambda a: sum(a)),
           tf.function(lambda a: next(iter(a)))]
    return (tf.function(loop)(x), tf.function(by_index)(x), [raises(f, x) for f in fns],
            [r for r in x], unpack(x))


@parity
def test_len_and_scalars_in_a_function(tf):
    """Converted ``len(x)`` is the static length, or ``tf.shape(x)[0]`` for a size an ``input_signature``
    leaves unknown; unconverted, ``len`` of a symbolic tensor is TypeError; iterating a traced scalar is
    OperatorNotAllowedInGraphError (symbolic first), an eager scalar TypeError."""
    x = tf.constant(init_array((3, 2), 9))

    def length(a):
        return len(a)

    def scalar_items(a):
        return list(a[0, 0])

    sig = tf.function(length, input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    return (tf.function(length)(x), sig(x), sig(tf.zeros([5, 2])), raises(tf.function(length, autograph=False), x),
            raises(tf.function(scalar_items), x), raises(scalar_items, x), len(x))


@parity
def test_scan_bodies_iterate_eagerly(tf):
    """``tf.scan`` / ``tf.foldl`` called eagerly run their body as Python: ``sum(row) * len(row)`` of an
    element works.  (In a ``tf.function`` the body's iteration is OperatorNotAllowedInGraphError and its
    ``len`` TypeError: checked by ``tests/test_tensor.py`` alone, because TF's failed trace of ``scan``
    leaves TF's variable-scope stack broken for the rest of the process, "Improper nesting of
    variable_scope", which failed later TF programs in the same test worker.)"""
    x = tf.constant(init_array((3, 2), 11))

    def step(acc, row):
        return acc + sum(row) * len(row)

    zero = tf.constant(0.0)
    return tf.scan(step, x, initializer=zero), tf.foldl(step, x, initializer=zero)


@xfail_on_tapejax("tapejax.data does not AutoGraph-convert a dataset function (it traces it, or runs it eagerly "
                  "where it cannot be one program: tapejax/data/functions.py), so a `for c in row` there is Python "
                  "iteration, which must work; tapejax refuses iterating a traced tensor only while a "
                  "tapejax.function traces (core/state.traces_function), so `a, b = row` works too, where TF's "
                  "converted map function refuses it")
@parity
def test_iterating_an_element_in_a_dataset_map_is_refused(tf):
    """TF: a ``Dataset.map`` function that unpacks its element (``a, b = row``) fails when ``map`` traces
    it (OperatorNotAllowedInGraphError); a ``for c in row`` loop there is converted and works."""
    ds = tf.data.Dataset.from_tensor_slices(init_array((3, 2), 8))

    def total(row):
        s = 0.0
        for c in row:
            s += c
        return s

    def pair(row):
        a, b = row
        return a + b

    return [float(e) for e in ds.map(total)], raises(ds.map, pair)


# ---------------------------------------------------------------------------
# 5. bucket_by_sequence_length
# ---------------------------------------------------------------------------

def _rows(tf, rows):
    return tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=tf.TensorSpec([None], tf.int32))


def _drain(ds):
    out = []
    it = iter(ds)
    while True:
        try:
            e = next(it)
        except StopIteration:
            return out
        except Exception as ex:  # noqa: BLE001 - the class is the result
            return out + [Raised(type(ex).__name__)]
        out.append(e.numpy().tolist())


@parity
def test_bucket_padding_to_the_boundary_of_a_too_long_element(tf):
    """``pad_to_bucket_boundary=True`` and an element as long as the last boundary: the batches before
    it come, then TF's InternalError (the assertion fails in the window's function); without
    padding to the boundary the long element is batched alone."""
    rows = [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [1, 2]]
    length = lambda x: tf.shape(x)[0]  # noqa: E731
    padded = _rows(tf, rows).bucket_by_sequence_length(length, [3, 5], [2, 2, 2], pad_to_bucket_boundary=True)
    plain = _rows(tf, rows).bucket_by_sequence_length(length, [3, 5], [2, 2, 2])
    exp = _rows(tf, rows).apply(tf.data.experimental.bucket_by_sequence_length(length, [3, 5], [2, 2, 2],
                                                                                pad_to_bucket_boundary=True))
    wide = _rows(tf, rows).bucket_by_sequence_length(length, [3, 8], [2, 2, 2], pad_to_bucket_boundary=True)
    return _drain(padded), _drain(plain), _drain(exp), _drain(wide)


@parity
def test_bucket_boundaries_and_sizes_as_tf_takes_them(tf):
    """TF checks neither the boundaries' order (an element goes to the first bucket whose range holds
    it) nor the batch sizes when the dataset is made (a size 0 fails at iteration, as a window size);
    a length that is not int32 is TypeError when the dataset is made."""
    ds = tf.data.Dataset.range(6)
    n = lambda x: tf.cast(x, tf.int32)  # noqa: E731
    return (_drain(ds.bucket_by_sequence_length(n, [3, 2], [2, 2, 2])),
            _drain(ds.bucket_by_sequence_length(n, [3], [2, 0])),
            raises(ds.bucket_by_sequence_length, lambda x: tf.cast(x, tf.float32), [3], [2, 2]))


# ---------------------------------------------------------------------------
# 6. The gradient of a while loop
# ---------------------------------------------------------------------------


@parity
def test_eager_while_loop_gradients_need_no_bound(tf):
    """Eagerly ``tf.while_loop`` runs in Python under the tape: the gradient of ``x**3`` by a counted
    loop, and of a loop whose trip count depends on a Variable's value (doubling to past 100)."""
    x = tf.constant(1.5)
    v = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (tf.constant(0), tf.constant(1.0)))[1]
        n, z = tf.while_loop(lambda i, z: z < 100.0, lambda i, z: (i + 1, z * v), (tf.constant(0), tf.constant(1.0)))
    return y, tape.gradient(y, x), n, z, tape.gradient(z, v)


@parity
def test_bounded_while_loop_gradient_in_a_function(tf):
    """With ``maximum_iterations`` (and with ``set_loop_options``) the traced loop's gradient is TF's."""
    @tf.function
    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (tf.constant(0), tf.constant(1.0)),
                              maximum_iterations=10)[1]
        return y, tape.gradient(y, x)

    @tf.function
    def g(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.constant(1.0)
            while y < 10.0:
                tf.autograph.experimental.set_loop_options(maximum_iterations=20)
                y = y * x
        return y, tape.gradient(y, x)

    return f(tf.constant(1.5)), g(tf.constant(1.5))


_BOUND = ("reverse mode through a staged while loop needs a static bound (tapejax/compile/control_flow.py: "
          "JAX's while loop is not reverse-differentiable): the tape raises UnboundedWhileGradientError, a "
          "ValueError naming `maximum_iterations=N`, at the gradient call")


@parity(tapejax_expected=(Raised("ValueError"), Raised("ValueError"), Raised("ValueError")), deliberate=_BOUND)
def test_unbounded_while_loop_gradient_in_a_function(tf):
    """TF differentiates a traced ``tf.while_loop`` with no ``maximum_iterations``, with the tape inside
    the function, outside it, and by ``jacobian``; tapejax names the bound it needs."""
    def loop(x):
        return tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (tf.constant(0), tf.constant(1.0)))[1]

    @tf.function
    def inside(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loop(x)
        return tape.gradient(y, x)

    fwd = tf.function(loop)

    def outside(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fwd(x)
        return tape.gradient(y, x)

    @tf.function
    def jac(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loop(x)
        return tape.jacobian(y, x)

    x = tf.constant(1.5)
    return raises(inside, x), raises(outside, x), raises(jac, x)


# ---------------------------------------------------------------------------
# 7. SaveOptions(experimental_custom_gradients=...)
# ---------------------------------------------------------------------------


@parity
def test_save_options_custom_gradients_in_the_saving_process(tf):
    """A Module whose signature function uses a ``tf.custom_gradient`` (gradient x100), saved with
    ``experimental_custom_gradients`` True and False and loaded in the same process: TF finds the
    custom gradient in its registry either way, so both loaded functions differentiate with it
    (loaded in a new process, TF's False would refuse the call under a tape)."""
    @tf.custom_gradient
    def scaled(x):
        def grad(dy):
            return dy * 100.0
        return x * x, grad

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.v = tf.Variable(3.0)

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def f(self, x):
            return scaled(x) + scaled(self.v)

    out = []
    for keep in (True, False):
        opts = tf.saved_model.SaveOptions(experimental_custom_gradients=keep)
        d = os.path.join(tempfile.mkdtemp(prefix="parity-sm-"), "m")
        tf.saved_model.save(M(), d, options=opts)
        loaded = tf.saved_model.load(d)
        x = tf.constant(2.0)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loaded.f(x)
        out.append((opts.experimental_custom_gradients, y, tape.gradient(y, [x, loaded.v])))
    return out, tf.saved_model.SaveOptions().experimental_custom_gradients
