"""tapejax.data's nested and Python-loop transformations beyond what real tf.data can check
(tests/parity/test_data_more.py does that): the documented draws of ``random`` and
``sample_from_datasets`` (NumPy's PCG64 on the seed words), their reproducibility and
per-iteration redraws, int32 ``random`` without JAX's 64-bit mode, checkpoints of these
pipelines, ``ignore_errors`` over a stream, and bad arguments.  Oracles: hand-derived values and
the documented formulas."""
import jax
import numpy as np
import pytest

import tapejax as tf

D = tf.data.Dataset


def ints(ds):
    return [int(v) for v in ds.as_numpy_iterator()]


def test_random_is_the_documented_pcg64_blocks():
    with jax.enable_x64(True):
        got = ints(D.random(seed=5).take(3))
        want = np.random.default_rng([5, 0, 0]).integers(0, 2**32, 1024, dtype=np.int64)[:3].tolist()
    assert got == want


def test_random_without_x64_is_int32_below_2_31():
    ds = D.random(seed=1)
    assert ds.element_spec.dtype == tf.int32
    vals = ints(ds.take(200))
    assert all(0 <= v < 2**31 for v in vals) and len(set(vals)) > 190


def test_random_rerandomizes_each_iteration_only_when_asked():
    fixed = D.random(seed=3)
    assert ints(fixed.take(5)) == ints(fixed.take(5))
    again = D.random(seed=3, rerandomize_each_iteration=True)
    assert ints(again.take(5)) != ints(again.take(5))


def test_sample_from_datasets_is_reproducible_and_respects_weights():
    a, b = D.from_tensors(0).repeat(), D.from_tensors(1).repeat()
    s = D.sample_from_datasets([a, b], weights=[0.9, 0.1], seed=4, rerandomize_each_iteration=False)
    first, second = ints(s.take(400)), ints(s.take(400))
    assert first == second
    assert 300 < first.count(0) < 395
    rng = np.random.default_rng([4, 0])
    assert first[:20] == [int(rng.choice(2, p=[0.9, 0.1])) for _ in range(20)]


def test_checkpoint_of_nested_pipelines(tmp_path):
    ds = (D.range(1, 9).interleave(lambda x: D.from_tensors(x).repeat(x), cycle_length=3, block_length=2)
          .window(4, 3).flat_map(lambda w: w.batch(4)))
    it = iter(ds)
    [next(it) for _ in range(5)]
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    want = [v.numpy().tolist() for v in it]
    fresh = iter(ds)
    tf.train.Checkpoint(iterator=fresh).restore(path)
    assert [v.numpy().tolist() for v in fresh] == want


def test_checkpoint_of_sample_from_datasets(tmp_path):
    ds = D.sample_from_datasets([D.range(10), D.range(100, 110)], seed=9)
    it = iter(ds)
    [next(it) for _ in range(6)]
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "c"))
    want = [int(v) for v in it]
    it2 = iter(ds)            # a second iteration draws another order ...
    tf.train.Checkpoint(iterator=it2).restore(path)
    assert [int(v) for v in it2] == want   # ... but restored, it resumes the saved one


def test_ignore_errors_over_a_stream():
    def gen():
        yield 1.0
        yield 0.0
        yield 2.0
    ds = D.from_generator(gen, output_signature=tf.TensorSpec((), tf.float32)).map(
        lambda x: tf.debugging.check_numerics(1.0 / x, "bad"))
    assert [float(v) for v in ds.ignore_errors()] == [1.0, 0.5]


@pytest.mark.parametrize("call, error, words", [
    (lambda: D.range(3).window(2, shift=0), tf.errors.InvalidArgumentError, "shift"),
    (lambda: D.range(3).window(2, stride=-1), tf.errors.InvalidArgumentError, "stride"),
    (lambda: D.range(3).interleave(lambda x: D.range(x), block_length=0), tf.errors.InvalidArgumentError,
     "block_length"),
    (lambda: D.range(3).group_by_window(lambda x: x, lambda k, w: w), ValueError, "window_size"),
    (lambda: D.range(3).group_by_window(lambda x: 1.0, lambda k, w: w, 2), ValueError, "key_func"),
    (lambda: D.range(3).take_while(lambda x: x), ValueError, "predicate"),
    (lambda: D.range(3).rebatch(2), ValueError, "batched"),
    (lambda: D.range(3).batch(2).rebatch(0), tf.errors.InvalidArgumentError, "batch_size"),
    (lambda: D.range(3).shard(2, -1), tf.errors.InvalidArgumentError, "index"),
    (lambda: D.sample_from_datasets([]), ValueError, "datasets"),
    (lambda: D.sample_from_datasets([D.range(2)], weights=[-1.0]), tf.errors.InvalidArgumentError, "weights"),
    (lambda: D.choose_from_datasets([1], D.range(2)), TypeError, "datasets"),
    (lambda: D.range(3).scan(0, lambda s, x: s), TypeError, "pair"),
    (lambda: D.range(3).map(lambda x: (x, x)).unique(), TypeError, "unique"),
])
def test_bad_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_choose_from_datasets_out_of_range_choice():
    ds = D.choose_from_datasets([D.range(2)], D.from_tensor_slices(np.array([0, 3], np.int32)))
    it = iter(ds)
    assert int(next(it)) == 0
    with pytest.raises(tf.errors.InvalidArgumentError, match="choice_dataset"):
        next(it)


ROWS = np.array([[1, 2, 0, 0], [3, 0, 0, 0], [4, 5, 6, 0]], np.int32)


@pytest.mark.parametrize("fn, want", [
    # a slice whose stop is a value of the element: its size is known only per element
    (lambda x: x[:tf.reduce_sum(tf.cast(x > 0, tf.int32))], [r[r > 0] for r in ROWS]),
    # tf.slice from a traced begin to the end (size -1)
    (lambda x: tf.slice(x, [tf.reduce_sum(tf.cast(x > 4, tf.int32))], [-1]),
     [r[int((r > 4).sum()):] for r in ROWS]),
])
def test_map_with_a_slice_of_per_element_size_runs_eagerly(fn, want):
    # XLA compiles static shapes, so such a function cannot be one traced program; as TF's
    # dynamic shapes, each element gets its own size (the function runs eagerly per element)
    got = [e.tolist() for e in D.from_tensor_slices(ROWS).map(fn).as_numpy_iterator()]
    assert got == [w.tolist() for w in want]


def test_bucket_by_sequence_length_as_tf_takes_its_arguments():
    """TF 2.21: an element as long as the last boundary with ``pad_to_bucket_boundary=True`` fails at
    its batch (InternalError: the assertion fails in the window's function) after the batches before
    it; the boundaries need not be sorted (an element goes to the first bucket whose range holds
    it); a batch size of 0 fails at iteration (a window size), not when the dataset is made; a
    length that is not int32 is TypeError when the dataset is made."""
    rows = [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [1, 2]]
    ds = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=tf.TensorSpec([None], tf.int32))
    it = iter(ds.bucket_by_sequence_length(lambda x: tf.shape(x)[0], [3, 5], [2, 2, 2], pad_to_bucket_boundary=True))
    assert [next(it).numpy().tolist() for _ in range(3)] == [[[1, 0], [1, 2]], [[1, 2]], [[1, 2, 3, 0]]]
    with pytest.raises(tf.errors.InternalError, match="pad_to_bucket_boundary"):
        next(it)
    n = tf.data.Dataset.range(6)
    length = lambda x: tf.cast(x, tf.int32)  # noqa: E731
    got = [b.numpy().tolist() for b in n.bucket_by_sequence_length(length, [3, 2], [2, 2, 2])]
    assert got == [[0, 1], [3, 4], [2], [5]]
    zero = n.bucket_by_sequence_length(length, [3], [2, 0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="greater than zero"):
        list(zero)
    with pytest.raises(TypeError, match="int32"):
        n.bucket_by_sequence_length(lambda x: tf.cast(x, tf.float32), [3], [2, 2])
