"""``tf.ragged_fill_empty_rows`` and ``tf.ragged_fill_empty_rows_grad`` (TF's raw pair) under TF 2.21
and tapejax: filled rows, unsorted row ids, an empty input, integer values, gradients to the values
and the default through a tape and by the gradient op, and TF's errors; and
``tf.ragged.stack_dynamic_partitions`` of vectors, matrices and RaggedTensors, empty partitions,
its gradient and its errors."""
from .harness import parity, raises


def _fill(tf, ids, values, nrows, default):
    """The four results, the int64 ones as int32 (as tapejax holds them without 64-bit mode), and
    the result type's field names."""
    r = tf.ragged_fill_empty_rows(tf.constant(ids, tf.int64), values, tf.constant(nrows, tf.int64), default)
    return (tf.cast(r.output_value_rowids, tf.int32), r.output_values, r.empty_row_indicator,
            tf.cast(r.reverse_index_map, tf.int32), list(r._fields))


@parity
def test_rows_filled_in_order(tf):
    """Rows 1, 3 and 5 of 6 get the default; unsorted ids are ordered stably; an empty input is all
    defaults; integer values."""
    return (_fill(tf, [0, 0, 2, 2, 4], tf.constant([1., 2., 3., 4., 5.]), 6, tf.constant(-1.)),
            _fill(tf, [2, 0], tf.constant([1., 2.]), 3, tf.constant(0.)),
            _fill(tf, [], tf.constant([], tf.float32), 2, tf.constant(9.)),
            _fill(tf, [1, 1], tf.constant([4, 5]), 3, tf.constant(7)))


@parity
def test_gradients_to_values_and_default(tf):
    """A weighted sum of the filled values: the tape's gradients to ``values`` and ``default_value``,
    and the gradient op's on the same reverse map."""
    x, d = tf.Variable([1., 2., 3.]), tf.Variable(-1.)
    with tf.GradientTape() as tape:
        out = _fill(tf, [0, 2, 2], x, 4, d)
        loss = tf.reduce_sum(out[1] * tf.range(1., 6.))
    grads = tf.ragged_fill_empty_rows_grad(tf.cast(out[3], tf.int64), tf.range(1., 6.))
    return tape.gradient(loss, [x, d]), tuple(grads), list(grads._fields)


@parity
def test_errors(tf):
    """Row ids out of range, negative or at ``nrows``; matrix values; a default of another dtype;
    a matrix gradient: InvalidArgumentError."""
    return (raises(_fill, tf, [5], tf.constant([1.]), 3, tf.constant(0.)),
            raises(_fill, tf, [-1], tf.constant([1.]), 3, tf.constant(0.)),
            raises(_fill, tf, [0, 1], tf.constant([1., 2.]), 1, tf.constant(0.)),
            raises(_fill, tf, [1], tf.constant([[1., 2.]]), 3, tf.constant(0.)),
            raises(_fill, tf, [1], tf.constant([1.]), 3, tf.constant(0)),
            raises(tf.ragged_fill_empty_rows_grad, tf.constant([0, 2], tf.int64), tf.constant([[1., 2.], [3., 4.]])))


@parity
def test_stack_dynamic_partitions(tf):
    """Rows of a matrix and of a RaggedTensor stacked by partition (empty partitions are empty
    rows), the row splits' dtype, and the gradient of a weighted sum to the partitioned Variable."""
    m = tf.ragged.stack_dynamic_partitions(tf.constant([[1., 2.], [3., 4.], [5., 6.]]), tf.constant([1, 0, 1]), 3)
    r = tf.ragged.stack_dynamic_partitions(tf.ragged.constant([[1.], [2., 3.]]), [1, 0], 2)
    x = tf.Variable([1., 2., 3., 4.])
    with tf.GradientTape() as tape:
        p = tf.ragged.stack_dynamic_partitions(x, [2, 0, 2, 0], 4)
        loss = tf.reduce_sum(p.flat_values * tf.constant([1., 2., 3., 4.]))
    return (m.to_list(), m.row_splits, m.row_splits.dtype.name, r.to_list(), p.to_list(),
            tf.convert_to_tensor(tape.gradient(loss, x)))


@parity
def test_stack_dynamic_partitions_errors(tf):
    """A partition at ``num_partitions`` is InvalidArgumentError; partitions of another length or
    rank ValueError."""
    f = tf.ragged.stack_dynamic_partitions
    return (raises(f, tf.constant([1., 2.]), [0, 4], 3), raises(f, tf.constant([1., 2.]), [0], 3),
            raises(f, tf.constant([1., 2.]), [[0, 1]], 3))
