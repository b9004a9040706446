"""tf.RaggedTensor and tf.ragged against real TF: the factories and their validation errors, the
attributes, to_tensor / to_list / numpy, indexing, RaggedTensorSpec, tf.ragged's constant,
range, stack, concat, boolean_mask, map_flat_values and segment-id helpers.  A RaggedTensor is
compared through ``parts`` (its rows, dtype, shape with None for ragged dimensions, ragged rank,
row partitions as int32: tapejax holds int64 as int32 without JAX's 64-bit mode)."""
import numpy as np

from .harness import parity, raises


def parts(tf, rt):
    """A RaggedTensor as comparable values."""
    return (rt.to_list(), rt.dtype.name, rt.shape.as_list(), rt.ragged_rank,
            [tf.cast(s, tf.int32) for s in rt.nested_row_splits], rt.flat_values)


def _rt(tf):
    return tf.RaggedTensor.from_row_splits([1.0, 2.0, 3.0, 4.0, 5.0], [0, 2, 2, 5])


@parity
def test_factories(tf):
    """from_row_splits / row_lengths / value_rowids (with and without nrows) / row_starts /
    row_limits / nested forms give the same rows."""
    v = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])
    return (parts(tf, tf.RaggedTensor.from_row_splits(v, [0, 2, 2, 5])),
            parts(tf, tf.RaggedTensor.from_row_lengths(v, [2, 0, 3])),
            parts(tf, tf.RaggedTensor.from_value_rowids(v, [0, 0, 2, 2, 2])),
            parts(tf, tf.RaggedTensor.from_value_rowids(v, [0, 0, 2, 2, 2], nrows=5)),
            parts(tf, tf.RaggedTensor.from_row_starts(v, [0, 2, 2])),
            parts(tf, tf.RaggedTensor.from_row_limits(v, [2, 2, 5])),
            parts(tf, tf.RaggedTensor.from_nested_row_splits(v, [[0, 2, 3], [0, 2, 2, 5]])),
            parts(tf, tf.RaggedTensor.from_nested_row_lengths(v, [[1, 2], [2, 0, 3]])),
            parts(tf, tf.RaggedTensor.from_nested_value_rowids(v, [[0, 1, 1], [0, 0, 2, 2, 2]])),
            parts(tf, tf.RaggedTensor.from_row_splits(tf.constant([[1, 2], [3, 4], [5, 6]]), [0, 1, 3])),
            parts(tf, tf.RaggedTensor.from_row_splits(v, [0, 2, 2, 5], validate=False)))


@parity
def test_factory_validation(tf):
    """validate=True: TF's InvalidArgumentError for bad splits / lengths / row ids; ValueError for
    ranks, dtypes and nrows; the private constructor."""
    v = [1.0, 2.0]
    return (raises(tf.RaggedTensor.from_row_splits, v, [1, 2]),
            raises(tf.RaggedTensor.from_row_splits, v, [0, 2, 1]),
            raises(tf.RaggedTensor.from_row_splits, v, [0, 1]),
            raises(tf.RaggedTensor.from_row_splits, v, [[0, 1]]),
            raises(tf.RaggedTensor.from_row_splits, v, [0.0, 2.0]),
            raises(tf.RaggedTensor.from_row_lengths, v, [1, -1, 2]),
            raises(tf.RaggedTensor.from_row_lengths, v, [1, 2]),
            raises(tf.RaggedTensor.from_value_rowids, [1.0, 2.0, 3.0], [0, 2, 0]),
            raises(tf.RaggedTensor.from_value_rowids, [1.0, 2.0, 3.0], [0, 0, 2], nrows=2),
            raises(tf.RaggedTensor.from_row_starts, v, [1, 2]),
            raises(tf.RaggedTensor.from_row_limits, v, [2, 1]),
            raises(tf.RaggedTensor, v, None))


@parity
def test_attributes(tf):
    """values / flat_values / row_splits / ragged_rank / shape / nrows / row_lengths /
    value_rowids / row_starts / row_limits / bounding_shape / nested_row_lengths."""
    rt = _rt(tf)
    nested = tf.RaggedTensor.from_nested_row_lengths([1, 2, 3, 4, 5], [[1, 2], [2, 0, 3]])
    return (rt.values, rt.flat_values, tf.cast(rt.row_splits, tf.int32), rt.ragged_rank, rt.shape.as_list(),
            rt.dtype.name, tf.cast(rt.nrows(), tf.int32), rt.nrows(out_type=tf.int32),
            tf.cast(rt.row_lengths(), tf.int32), tf.cast(rt.value_rowids(), tf.int32),
            tf.cast(rt.row_starts(), tf.int32), tf.cast(rt.row_limits(), tf.int32),
            tf.cast(rt.bounding_shape(), tf.int32), tf.cast(rt.bounding_shape(axis=1), tf.int32),
            nested.ragged_rank, nested.shape.as_list(), tf.cast(nested.bounding_shape(), tf.int32),
            [tf.cast(x, tf.int32) for x in nested.nested_row_lengths()], parts(tf, nested.values),
            tf.cast(nested.row_lengths(axis=2), tf.int32).to_list(), tf.is_tensor(rt), isinstance(rt, tf.RaggedTensor),
            isinstance(rt, tf.Tensor), len(rt.nested_row_splits), nested.flat_values)


@parity
def test_to_tensor_to_list_numpy(tf):
    """to_tensor (default_value, shape cropping and padding, nested), to_list, numpy's object rows."""
    rt = _rt(tf)
    nested = tf.ragged.constant([[[1, 2], [3]], [[4]]])
    arr = rt.numpy()
    return (rt.to_tensor(), rt.to_tensor(default_value=-1.0), rt.to_tensor(shape=[2, 2]),
            rt.to_tensor(shape=[4, 4], default_value=9.0), rt.to_tensor(shape=[None, 4]), nested.to_tensor(),
            nested.to_tensor(shape=[3, 1, 3]), rt.to_list(), nested.to_list(), arr.dtype.name, len(arr),
            [a.tolist() for a in arr], raises(rt.to_tensor, shape=[3]))


@parity
def test_from_tensor(tf):
    """from_tensor: uniform rows, lengths (clipped), padding (trailing, inner dims), ragged_rank 2,
    and TF's argument errors."""
    d = tf.constant([[1, 2, 0], [3, 0, 0], [0, 0, 0]])
    d3 = tf.constant([[[1, 1], [2, 2], [0, 0]], [[3, 3], [0, 0], [0, 0]]])
    return (parts(tf, tf.RaggedTensor.from_tensor(d)), parts(tf, tf.RaggedTensor.from_tensor(d, lengths=[1, 3, 0])),
            parts(tf, tf.RaggedTensor.from_tensor(d, lengths=[1, 4, 2])),
            parts(tf, tf.RaggedTensor.from_tensor(d, padding=0)),
            parts(tf, tf.RaggedTensor.from_tensor(d3, padding=[0, 0])),
            parts(tf, tf.RaggedTensor.from_tensor(d3, ragged_rank=2)),
            parts(tf, tf.RaggedTensor.from_tensor(d, row_splits_dtype=tf.int32)),
            raises(tf.RaggedTensor.from_tensor, d, lengths=[1, 3, 0], padding=0),
            raises(tf.RaggedTensor.from_tensor, d, ragged_rank=2))


@parity
def test_getitem(tf):
    """A row, a negative row, a row's entry, row slices (stepped), rt[:, :k], rt[1:, 1:], and TF's
    errors: out-of-bounds rows, an int into the ragged dimension."""
    rt = _rt(tf)
    nested = tf.ragged.constant([[[1, 2], [3]], [[4]], []])
    inner = tf.ragged.constant([[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]], ragged_rank=1)
    return (rt[0], rt[-1], rt[2, 1], parts(tf, rt[1:]), parts(tf, rt[::2]), parts(tf, rt[:, :2]),
            parts(tf, rt[1:, 1:]), parts(tf, rt[:, -1:]), parts(tf, nested[0]), parts(tf, nested[:, :1]),
            inner[1], parts(tf, inner[:, :, 1:]), raises(lambda: rt[5]), raises(lambda: rt[:, 0]))


@parity
def test_with_values_and_dtype(tf):
    """with_values / with_flat_values / with_row_splits_dtype, and their errors."""
    rt = _rt(tf)
    nested = tf.ragged.constant([[[1, 2], [3]], [[4]]])
    return (parts(tf, rt.with_values(rt.values * 2.0)), parts(tf, nested.with_flat_values(nested.flat_values + 1)),
            parts(tf, rt.with_row_splits_dtype(tf.int32)), rt.with_row_splits_dtype(tf.int32).row_splits.dtype.name,
            raises(rt.with_values, tf.constant([1.0, 2.0])))


@parity
def test_spec(tf):
    """RaggedTensorSpec: from a value, equality, compatibility, ragged_rank defaults and errors."""
    rt = _rt(tf)
    spec = tf.type_spec_from_value(rt) if hasattr(tf, "type_spec_from_value") else rt._type_spec
    s2 = tf.RaggedTensorSpec([None, None], tf.float32)
    s3 = tf.RaggedTensorSpec([2, None, 4], tf.int32, ragged_rank=1)
    return (spec.shape.as_list(), spec.dtype.name, spec.ragged_rank, spec.row_splits_dtype.name,
            spec == tf.RaggedTensorSpec([3, None], tf.float32), s2.is_compatible_with(rt),
            s3.is_compatible_with(rt), s3.ragged_rank, s3.shape.as_list(), spec.value_type is tf.RaggedTensor,
            raises(tf.RaggedTensorSpec, [2, None], tf.float32, ragged_rank=2),
            raises(tf.RaggedTensorSpec, None, tf.float32))


@parity
def test_constant(tf):
    """tf.ragged.constant: depths, ragged_rank, inner_shape, dtype, empty lists, dense results for
    ragged_rank 0, and TF's errors."""
    return (parts(tf, tf.ragged.constant([[1, 2], [3]])), parts(tf, tf.ragged.constant([[1.5], [], [2.5, 3.5]])),
            parts(tf, tf.ragged.constant([[[1, 2], [3]], [[4]]])),
            parts(tf, tf.ragged.constant([[[1, 2]], [[3, 4], [5, 6]]], ragged_rank=1)),
            parts(tf, tf.ragged.constant([[[1, 2]], [[3, 4], [5, 6]]], inner_shape=(2,))),
            parts(tf, tf.ragged.constant([[1, 2], [3]], dtype=tf.float32)),
            parts(tf, tf.ragged.constant([[True], [False, True]])),
            parts(tf, tf.ragged.constant([[]])), parts(tf, tf.ragged.constant([[], [1]])),
            tf.ragged.constant([]), tf.ragged.constant([1, 2]), tf.ragged.constant(3),
            parts(tf, tf.ragged.constant([[1, 2], [3]], row_splits_dtype=tf.int32)),
            raises(tf.ragged.constant, [[1, 2], [3, [4]]]),
            raises(tf.ragged.constant, [[1, 2], [3]], ragged_rank=2))


@parity
def test_range_segment_ids(tf):
    """tf.ragged.range (vectors, scalars broadcast, one argument, floats, delta 0), and the
    row_splits / segment_ids conversions."""
    return (parts(tf, tf.ragged.range([1, 2], [4, 3])), parts(tf, tf.ragged.range(3)),
            parts(tf, tf.ragged.range([0, 5], 10, [3, 2])), parts(tf, tf.ragged.range([3, 0])),
            parts(tf, tf.ragged.range([0.0, 1.0], [1.0, 2.0], 0.5)),
            raises(tf.ragged.range, [1, 2], [3, 4], 0),
            tf.cast(tf.ragged.row_splits_to_segment_ids([0, 2, 2, 4]), tf.int32),
            tf.cast(tf.ragged.segment_ids_to_row_splits([0, 0, 2]), tf.int32),
            tf.cast(tf.ragged.segment_ids_to_row_splits([0, 1], num_segments=4), tf.int32))


@parity
def test_stack_concat(tf):
    """tf.concat of RaggedTensors along axis 0 and 1, tf.ragged.stack along 0 and 1, a dense
    operand converted, and TF's error for different row counts along axis 1."""
    a = _rt(tf)
    b = tf.ragged.constant([[9.0], [8.0, 7.0], []])
    n = tf.ragged.constant([[[1], [2, 3]], [[4]]])
    return (parts(tf, tf.concat([a, b], axis=0)), parts(tf, tf.concat([a, b], axis=1)),
            parts(tf, tf.concat([a, b], axis=-1)), parts(tf, tf.ragged.stack([a, b])),
            parts(tf, tf.ragged.stack([a, b], axis=1)), parts(tf, tf.concat([n, n], axis=0)),
            parts(tf, tf.concat([a, tf.constant([[1.0, 2.0]])], axis=0)),
            raises(tf.concat, [a, tf.ragged.constant([[1.0]])], axis=1))


@parity
def test_boolean_mask_map_flat_values(tf):
    """boolean_mask with a dense mask of rank 1 and 2, a ragged mask; map_flat_values with one and
    two RaggedTensors and TF's error for different partitions."""
    rt = _rt(tf)
    mask = tf.ragged.constant([[True, False], [], [False, True, True]])
    other = tf.RaggedTensor.from_row_splits([1.0, 2.0, 3.0, 4.0, 5.0], [0, 1, 2, 5])
    return (parts(tf, tf.ragged.boolean_mask(rt, mask)), parts(tf, tf.ragged.boolean_mask(rt, [True, False, True])),
            parts(tf, tf.ragged.boolean_mask(tf.constant([[1, 2], [3, 4]]), tf.constant([[True, False], [True, True]]))),
            tf.ragged.boolean_mask(tf.constant([1, 2, 3]), [True, False, True]),
            parts(tf, tf.ragged.map_flat_values(tf.square, rt)),
            parts(tf, tf.ragged.map_flat_values(tf.add, rt, rt)),
            parts(tf, tf.ragged.map_flat_values(tf.multiply, rt, 3.0)),
            raises(tf.ragged.map_flat_values, tf.add, rt, other))


@parity
def test_repr_and_misc(tf):
    """repr names the type and rows; len / iteration give rows; bool() refuses; convert_to_tensor
    refuses (ValueError)."""
    rt = tf.ragged.constant([[1, 2], [3]])
    r = repr(rt)
    return (r.startswith("<tf.RaggedTensor [[1, 2], [3]]"), [x for x in rt.to_list()],
            raises(tf.convert_to_tensor, rt), raises(bool, rt), np.asarray([1]).tolist())


@parity
def test_merge_dims_uniform_and_sparse(tf):
    """merge_dims over ragged and uniform axes, from_uniform_row_length (shape, uniform_row_length,
    its error), to_sparse (nested, inner dims) and from_sparse (its rank and right-ragged errors)."""
    n = tf.ragged.constant([[[1, 2], [3]], [[4]], []])
    r = tf.ragged.constant([[1.0, 2.0], [], [3.0]])
    i = tf.RaggedTensor.from_row_lengths(tf.constant([[1, 2], [3, 4], [5, 6]]), [1, 2])
    u = tf.RaggedTensor.from_uniform_row_length([1, 2, 3, 4, 5, 6], 2)

    def sp(s):
        return tf.cast(s.indices, tf.int32), s.values, tf.cast(s.dense_shape, tf.int32)
    return (parts(tf, n.merge_dims(0, 1)), parts(tf, n.merge_dims(1, 2)), n.merge_dims(0, 2), n.merge_dims(0, -1),
            r.merge_dims(0, 1), r.uniform_row_length is None, parts(tf, i.merge_dims(1, 2)), i.merge_dims(0, 2),
            parts(tf, u), u.shape.as_list(), tf.cast(u.uniform_row_length, tf.int32),
            raises(tf.RaggedTensor.from_uniform_row_length, [1, 2, 3], 2), sp(n.to_sparse()), sp(r.to_sparse()),
            sp(i.to_sparse()),
            parts(tf, tf.RaggedTensor.from_sparse(tf.SparseTensor([[0, 0], [0, 1], [2, 0]], [1.0, 2.0, 3.0], [3, 4]))),
            raises(tf.RaggedTensor.from_sparse, tf.SparseTensor([[0, 0], [0, 2], [2, 0]], [1.0, 2.0, 3.0], [3, 4])),
            raises(tf.RaggedTensor.from_sparse, tf.SparseTensor([[0, 0, 0]], [1.0], [3, 4, 1])))
