"""tf.SparseTensor / tf.sparse where TF is not the oracle (TF's values and errors:
tests/parity/test_sparse_tensor.py): the shape rule (a static dense shape, part of a
tapejax.function's trace key; unknown only when computed in a trace, with a clear error), the
pytree, value-dependent ops refused inside a trace, dense equivalents as oracles (NumPy, and
``jax.vjp`` of the dense computation for gradients), and SparseTensor dataset components."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError
from tapejax.ops.sparse_tensor import TracedSparseError

RNG = np.random.default_rng(0)


def _random_sparse(shape, n, seed=0):
    rng = np.random.default_rng(seed)
    flat = rng.choice(int(np.prod(shape)), size=n, replace=False)
    ind = np.stack(np.unravel_index(flat, shape), axis=1)
    vals = rng.normal(size=n).astype(np.float32)
    dense = np.zeros(shape, np.float32)
    dense[tuple(ind.T)] = vals
    return tf.SparseTensor(ind, vals, shape), dense


def test_dense_shape_is_static_and_spec_matches():
    sp, _ = _random_sparse((4, 5), 6)
    assert sp.shape.as_list() == [4, 5] and sp.get_shape() == sp.shape
    assert sp._type_spec == tf.SparseTensorSpec([4, 5], tf.float32)
    assert tf.SparseTensorSpec.from_value(sp).is_compatible_with(tf.SparseTensorSpec([None, 5], tf.float32))
    assert not tf.SparseTensorSpec([3, 5]).is_compatible_with(sp)
    assert tf.SparseTensorSpec([2], tf.int32).value_type is tf.SparseTensor
    assert {tf.SparseTensorSpec([2]): 1}[tf.SparseTensorSpec([2])] == 1
    # a dense shape given as a Tensor is read once, at construction
    sp2 = tf.SparseTensor([[0]], [1.0], tf.constant([3]))
    assert sp2.shape.as_list() == [3]


@pytest.mark.parametrize("shape,n", [((4, 5), 6), ((3, 2, 4), 9), ((7,), 3), ((2, 3), 0)])
def test_ops_against_dense_numpy(shape, n):
    sp, dense = _random_sparse(shape, n, seed=n)
    sp = tf.sparse.reorder(sp)
    np.testing.assert_allclose(tf.sparse.to_dense(sp).numpy(), dense)
    np.testing.assert_allclose(tf.sparse.reduce_sum(sp, axis=0).numpy(), dense.sum(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.reshape(sp, [-1])).numpy(), dense.reshape(-1))
    np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.transpose(sp)).numpy(), dense.T)
    np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.add(sp, sp)).numpy(), 2 * dense, rtol=1e-6)
    np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.from_dense(dense)).numpy(), dense)
    np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.concat(0, [sp, sp])).numpy(),
                               np.concatenate([dense, dense]))
    np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.expand_dims(sp, 1)).numpy(), dense[:, None])
    if len(shape) == 2:
        b = RNG.normal(size=(shape[1], 3)).astype(np.float32)
        np.testing.assert_allclose(tf.sparse.sparse_dense_matmul(sp, b).numpy(), dense @ b, rtol=1e-5, atol=1e-6)
        start, size = [1, 1], [2, 3]
        np.testing.assert_allclose(tf.sparse.to_dense(tf.sparse.slice(sp, start, size)).numpy(), dense[1:3, 1:4])


def test_gradients_match_jax_vjp_of_the_dense_program():
    """sparse_dense_matmul's gradients wrt values and b are jax.vjp's of scatter-then-matmul."""
    ind = np.array([[0, 1], [1, 0], [2, 2], [0, 3]])
    vals = np.float32([1.0, -2.0, 0.5, 3.0])
    b = RNG.normal(size=(4, 2)).astype(np.float32)

    def dense_program(v, bb):
        a = jnp.zeros((3, 4)).at[tuple(ind.T)].set(v)
        return jnp.sum(jnp.tanh(a @ bb))

    _, vjp = jax.vjp(dense_program, vals, b)
    want_v, want_b = vjp(jnp.float32(1.0))
    v, bv = tf.Variable(vals), tf.Variable(b)
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.tanh(tf.sparse.sparse_dense_matmul(tf.SparseTensor(ind, v * 1.0, [3, 4]), bv)))
    gv, gb = t.gradient(y, [v, bv])
    np.testing.assert_allclose(gv.numpy(), want_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-5, atol=1e-6)


def test_function_keys_on_dense_shape_and_entry_count():
    """A SparseTensor argument: its dense shape and parts' shapes are the trace key, its values dynamic."""
    f = tf.function(lambda sp: tf.sparse.reduce_sum(sp, axis=1))
    a = tf.SparseTensor([[0, 1], [2, 0]], [1.0, 2.0], [3, 4])
    np.testing.assert_allclose(f(a).numpy(), [1.0, 0.0, 2.0])
    np.testing.assert_allclose(f(tf.SparseTensor([[1, 1], [2, 3]], [5.0, 6.0], [3, 4])).numpy(), [0.0, 5.0, 6.0])
    assert f.experimental_get_tracing_count() == 1
    f(tf.SparseTensor([[0, 1], [2, 0]], [1.0, 2.0], [3, 5]))   # another dense shape
    f(tf.SparseTensor([[0, 1]], [1.0], [3, 4]))                # another number of entries
    assert f.experimental_get_tracing_count() == 3


def test_dense_shape_computed_in_a_trace_is_unknown_with_a_clear_error():
    @tf.function
    def f(n):
        sp = tf.SparseTensor([[0, 0]], [1.0], tf.stack([n, 2]))
        assert sp.shape.as_list() == [None, None]
        return tf.sparse.to_dense(sp)

    with pytest.raises(ValueError, match="dense_shape was computed inside a tapejax.function trace"):
        f(tf.constant(3))


@pytest.mark.parametrize("op", [
    lambda sp: tf.sparse.retain(sp, [True, False]), lambda sp: tf.sparse.slice(sp, [0, 0], [1, 1]),
    lambda sp: tf.sparse.fill_empty_rows(sp, 0.0), lambda sp: tf.sparse.add(sp, sp),
    lambda sp: tf.sparse.reduce_sum(sp, 1, output_is_sparse=True), lambda sp: tf.sparse.from_dense(tf.sparse.to_dense(sp))])
def test_value_dependent_ops_refuse_inside_a_trace(op):
    f = tf.function(op)
    with pytest.raises(TracedSparseError, match="tapejax.function trace"):
        f(tf.SparseTensor([[0, 1], [2, 0]], [1.0, 2.0], [3, 4]))


def test_static_size_ops_run_inside_a_trace():
    sp = tf.SparseTensor([[2, 0], [0, 1]], [1.0, 2.0], [3, 4])
    f = tf.function(lambda s: (tf.sparse.reorder(s), tf.sparse.concat(0, [s, s]), tf.sparse.softmax(s),
                               tf.sparse.reshape(s, [4, 3]), s * 2.0))
    r, c, sm, rs, m = f(sp)
    np.testing.assert_array_equal(r.indices.numpy(), [[0, 1], [2, 0]])
    assert c.shape.as_list() == [6, 4] and rs.shape.as_list() == [4, 3]
    np.testing.assert_allclose(m.values.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(sm.values.numpy(), [1.0, 1.0])


def test_pytree_round_trip():
    sp = tf.SparseTensor([[0, 1]], [2.0], [2, 3])
    leaves, tree = jax.tree_util.tree_flatten(sp)
    assert len(leaves) == 2
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(back, tf.SparseTensor) and back.shape.as_list() == [2, 3]


def test_bad_arguments():
    sp = tf.SparseTensor([[0, 1]], [2.0], [2, 3])
    with pytest.raises(TypeError, match="sp_input"):
        tf.sparse.to_dense(tf.ones([2]))
    with pytest.raises(InvalidArgumentError, match="axis 2 is out of range"):
        tf.sparse.reduce_sum(sp, axis=2)
    with pytest.raises(InvalidArgumentError, match="permutation"):
        tf.sparse.transpose(sp, [0, 0])
    with pytest.raises(ValueError, match="new_values"):
        sp.with_values([1.0, 2.0])
    with pytest.raises(TypeError, match="SparseTensor' and 'SparseTensor"):
        _ = sp * sp
    with pytest.raises(InvalidArgumentError, match="out of bounds"):
        tf.sparse.to_indicator(tf.SparseTensor([[0, 0]], [5], [1, 1]), 3)


def test_dataset_components():
    """from_tensors of a SparseTensor, batching (TF's rule: stacked, max dense shape), ranks that
    differ, as_numpy_iterator densifying (as TF 2.21), a map densifying."""
    a = tf.SparseTensor([[0]], [1], [2])
    b = tf.SparseTensor([[1], [3]], [2, 3], [4])
    ds = tf.data.Dataset.from_tensors(a).concatenate(tf.data.Dataset.from_tensors(b))
    assert ds.element_spec == tf.SparseTensorSpec([None], tf.int32)
    batch = next(iter(ds.batch(2)))
    assert isinstance(batch, tf.SparseTensor) and batch.shape.as_list() == [2, 4]
    np.testing.assert_array_equal(batch.indices.numpy(), [[0, 0], [1, 1], [1, 3]])
    np.testing.assert_array_equal(list(ds.as_numpy_iterator())[1], [0, 2, 0, 3])
    dense = ds.batch(2).map(tf.sparse.to_dense)
    assert dense.element_spec.shape.as_list() == [None, None]
    np.testing.assert_array_equal(next(iter(dense)).numpy(), [[1, 0, 0, 0], [0, 2, 0, 3]])
    mixed = tf.data.Dataset.from_tensors(a).concatenate(tf.data.Dataset.from_tensors(tf.SparseTensor([[0, 0]], [1], [1, 1])))
    with pytest.raises(Exception):
        next(iter(mixed.batch(2)))


def test_padded_batch_of_sparse_components_is_refused():
    ds = tf.data.Dataset.from_tensors(tf.SparseTensor([[0]], [1], [2]))
    with pytest.raises(TypeError, match="padded_batch"):
        ds.padded_batch(2)


def test_var_len_spec_dimensions_are_unknown_and_int64_range_checked():
    """A VarLenFeature's spec is [None] even when the samples agree (hostops.perturbed), and an
    int64 value outside int32 without x64 is InvalidArgumentError (tapejax's int64 rule)."""
    ex = tf.train.Example(features=tf.train.Features(feature={
        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))})).SerializeToString()
    feats = {"ids": tf.io.VarLenFeature(tf.int64)}
    ds = tf.data.Dataset.from_tensors(ex).repeat(2).map(lambda s: tf.io.parse_single_example(s, feats))
    assert ds.element_spec["ids"] == tf.SparseTensorSpec([None], tf.int32)
    big = tf.train.Example(features=tf.train.Features(feature={
        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[2 ** 40]))})).SerializeToString()
    with pytest.raises(InvalidArgumentError, match="64-bit mode"):
        tf.io.parse_single_example(big, feats)


def test_from_tensor_slices_of_a_sparse_tensor_gives_its_rows():
    sp = tf.SparseTensor([[0, 1], [2, 0], [2, 2]], [1.0, 2.0, 3.0], [3, 3])
    ds = tf.data.Dataset.from_tensor_slices((sp, tf.range(3)))
    assert ds.element_spec[0] == tf.SparseTensorSpec([3], tf.float32) and ds.cardinality().numpy() == 3
    rows = [tf.sparse.to_dense(r).numpy() for r, _ in ds]
    np.testing.assert_array_equal(rows, tf.sparse.to_dense(sp).numpy())
    with pytest.raises(ValueError, match="scalar component"):
        tf.data.Dataset.from_tensor_slices(tf.SparseTensor(np.zeros((0, 0)), [], []))


def test_no_implicit_densifying_and_is_tensor():
    sp = tf.SparseTensor([[0, 1]], [1.0], [2, 2])
    assert tf.is_tensor(sp)
    with pytest.raises(ValueError, match="not densified implicitly.*tf.sparse.to_dense"):
        tf.convert_to_tensor(sp)
    with pytest.raises(ValueError, match="not densified implicitly"):
        tf.exp(sp)   # (f(0) != 0: TF does not dispatch it for a SparseTensor)
    assert isinstance(tf.identity(sp), tf.SparseTensor) and isinstance(tf.abs(sp), tf.SparseTensor)
    np.testing.assert_array_equal(tf.shape(sp).numpy(), [2, 2])


def test_input_signature_with_a_sparse_tensor_spec():
    """A SparseTensorSpec in input_signature checks its argument (TypeError otherwise; TF does not
    check the dense shape of an eager SparseTensor there) and the call is keyed by the dense shape."""
    f = tf.function(lambda sp: tf.sparse.reduce_sum(sp, axis=1),
                    input_signature=[tf.SparseTensorSpec([None, 4], tf.float32)])
    np.testing.assert_allclose(f(tf.SparseTensor([[0, 1]], [2.0], [2, 4])).numpy(), [2.0, 0.0])
    np.testing.assert_allclose(f(tf.SparseTensor([[2, 1]], [2.0], [3, 4])).numpy(), [0.0, 0.0, 2.0])
    with pytest.raises(TypeError, match="argument 0"):
        f(tf.ones([2, 4]))
    with pytest.raises(TypeError, match="argument 0"):
        f(tf.SparseTensor([[0, 1]], [2.0], [3, 5]))


def test_reshape_beyond_int32_needs_x64():
    """Without x64 the indices are int32: a reshape whose flat index overflows them is refused."""
    sp = tf.SparseTensor([[0, 1]], [1.0], [2 ** 16, 2 ** 16])
    if jax.config.jax_enable_x64:   # int64 indices: it reshapes
        np.testing.assert_array_equal(tf.sparse.reshape(sp, [-1]).indices.numpy(), [[1]])
        return
    with pytest.raises(InvalidArgumentError, match="64-bit mode"):
        tf.sparse.reshape(sp, [-1])
