"""tf.RaggedTensor / tf.ragged where TF is not the oracle (TF's values and errors:
tests/parity/test_ragged_tensor.py, test_ragged_math.py): the pytree and tapejax.function
(arguments, results, the trace key), value-dependent ops refused inside a trace with a clear
error, static ones traced, gradients against ``jax.vjp`` of the same pure computation, and NumPy
oracles for random partitions."""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError
from tapejax.ops.ragged_partition import TracedRaggedError


def _random_ragged(nrows, seed=0, inner=()):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 4, size=nrows)
    vals = rng.normal(size=(int(lens.sum()),) + inner).astype(np.float32)
    return tf.RaggedTensor.from_row_lengths(vals, lens), vals, lens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reductions_and_to_tensor_against_numpy(seed):
    rt, vals, lens = _random_ragged(6, seed)
    splits = np.concatenate([[0], np.cumsum(lens)])
    rows = [vals[splits[i]:splits[i + 1]] for i in range(len(lens))]
    np.testing.assert_allclose(tf.reduce_sum(rt, axis=1).numpy(), [r.sum() for r in rows], rtol=1e-6)
    low = np.finfo(np.float32).min
    np.testing.assert_allclose(tf.reduce_max(rt, axis=1).numpy(), [r.max() if r.size else low for r in rows])
    dense = np.zeros((len(lens), max(lens.max(), 0)), np.float32)
    for i, r in enumerate(rows):
        dense[i, :len(r)] = r
    np.testing.assert_array_equal(rt.to_tensor().numpy(), dense)
    assert rt.to_list() == [r.tolist() for r in rows]


def test_gradient_matches_jax_vjp_of_the_segment_program():
    lens = np.array([2, 1, 3, 1, 2])
    vals = np.random.default_rng(3).normal(size=(int(lens.sum()), 2)).astype(np.float32)
    x = tf.constant(vals)
    with tf.GradientTape() as tape:
        tape.watch(x)
        r = tf.RaggedTensor.from_row_lengths(x, lens)
        y = tf.reduce_sum(tf.reduce_mean(r * r, axis=1) ** 2 * tf.constant([1.0, 2.0]))
    ids = np.repeat(np.arange(len(lens)), lens)

    def pure(v):
        s = jax.ops.segment_sum(v * v, ids, len(lens))
        c = jax.ops.segment_sum(jnp.ones_like(v), ids, len(lens))
        return jnp.sum((s / c) ** 2 * jnp.array([1.0, 2.0]))

    want = jax.grad(pure)(jnp.asarray(vals))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.asarray(want), rtol=1e-5)


def test_function_takes_and_returns_ragged_and_keys_on_shapes():
    @tf.function
    def f(r):
        return r * 2.0, tf.reduce_sum(r, axis=1)

    a = tf.ragged.constant([[1.0, 2.0], [3.0]])
    b = tf.ragged.constant([[5.0], [6.0, 7.0]])   # same nrows and number of values: no retrace
    out, s = f(a)
    assert isinstance(out, tf.RaggedTensor) and out.to_list() == [[2.0, 4.0], [6.0]]
    assert s.numpy().tolist() == [3.0, 3.0]
    assert f(b)[0].to_list() == [[10.0], [12.0, 14.0]]
    assert f.experimental_get_tracing_count() == 1
    f(tf.ragged.constant([[1.0], [2.0], [3.0]]))
    assert f.experimental_get_tracing_count() == 2


def test_static_ops_trace_and_value_dependent_ones_refuse():
    @tf.function
    def static(v, s):
        r = tf.RaggedTensor.from_row_splits(v, s)
        return (tf.reduce_mean(r, axis=1), r.to_tensor(shape=[2, 3]), r.row_lengths(), r.value_rowids(),
                tf.ragged.map_flat_values(tf.exp, r).flat_values)

    m, d, lengths, ids, e = static(tf.constant([1.0, 2.0, 3.0]), tf.constant([0, 2, 3]))
    assert m.numpy().tolist() == [1.5, 3.0] and d.numpy().tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]
    assert lengths.numpy().tolist() == [2, 1] and ids.numpy().tolist() == [0, 0, 1]
    for op in (lambda r: r.to_tensor(), lambda r: r[0], lambda r: r[1:], lambda r: tf.gather(r, [1]),
               lambda r: r.to_list()):
        @tf.function
        def dyn(v, s, op=op):
            return op(tf.RaggedTensor.from_row_splits(v, s))

        with pytest.raises(TracedRaggedError, match="unknown inside a tapejax.function trace"):
            dyn(tf.constant([1.0, 2.0, 3.0]), tf.constant([0, 2, 3]))


def test_pytree_round_trip():
    rt = tf.RaggedTensor.from_tensor([[1, 2], [3, 4]])
    leaves, tree = jax.tree_util.tree_flatten(rt)
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.to_list() == rt.to_list() and back.shape.as_list() == [2, 2]
    nested = tf.ragged.constant([[[1], [2, 3]], [[4]]])
    assert len(jax.tree_util.tree_leaves(nested)) == 3


def test_bad_arguments_name_the_argument():
    with pytest.raises(InvalidArgumentError, match="row_splits"):
        tf.RaggedTensor.from_row_splits([1.0, 2.0], [0, 3])
    with pytest.raises(InvalidArgumentError, match="row_lengths"):
        tf.RaggedTensor.from_row_lengths([1.0, 2.0], [1, -1, 2])
    with pytest.raises(ValueError, match="nrows"):
        tf.RaggedTensor.from_value_rowids([1.0, 2.0, 3.0], [0, 0, 2], nrows=2)
    with pytest.raises(ValueError, match="lengths"):
        tf.RaggedTensor.from_tensor([[1, 2]], lengths=[1], padding=0)
    with pytest.raises(ValueError, match="values"):
        tf.RaggedTensor.from_row_splits(1.0, [0, 1])
    with pytest.raises(InvalidArgumentError, match="identical ragged splits"):
        _ = tf.ragged.constant([[1.0], [2.0, 3.0]]) + tf.ragged.constant([[1.0, 2.0], [3.0]])
    with pytest.raises(InvalidArgumentError, match="deltas"):
        tf.ragged.range([1], [2], 0)
    with pytest.raises(ValueError, match="convert"):
        tf.convert_to_tensor(tf.ragged.constant([[1]]))


def test_validate_false_skips_the_checks():
    rt = tf.RaggedTensor.from_row_splits([1.0, 2.0, 3.0], [0, 1, 3], validate=False)
    assert rt.to_list() == [[1.0], [2.0, 3.0]]


def test_sparse_dispatch_is_unchanged():
    sp = tf.SparseTensor([[0, 1]], [-2.0], [2, 2])
    assert tf.abs(sp).values.numpy().tolist() == [2.0]
    assert tf.cast(sp, tf.int32).values.dtype == tf.int32


def test_ragged_namespace_is_an_importable_module():
    ragged_mod = importlib.import_module("tapejax.ragged")
    assert ragged_mod is tf.ragged and ragged_mod.constant is tf.ragged.constant
    assert not hasattr(tf.ragged, "RaggedTensor") and not hasattr(tf.ragged, "no_such_name")   # (as TF's)


def test_input_signature_with_a_ragged_tensor_spec():
    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.float32)])
    def f(r):
        return tf.reduce_sum(r, axis=1)

    assert f(tf.ragged.constant([[1.0, 2.0], [3.0]])).numpy().tolist() == [3.0, 3.0]
    assert f(tf.ragged.constant([[1.0], [], [2.0]])).numpy().tolist() == [1.0, 0.0, 2.0]
    with pytest.raises(TypeError, match="not compatible with RaggedTensorSpec"):
        f(tf.ragged.constant([[1, 2]]))   # (int32: the spec's dtype is float32)
    with pytest.raises(TypeError, match="not compatible with RaggedTensorSpec"):
        f(tf.constant([[1.0]]))
