"""tapejax.data against real tf.data: element structures, shapes, dtypes, values where TF's are
deterministic (no shuffle, or a shuffle whose order does not show), counts, remainders,
repeat/take interplay, cardinality (INFINITE and UNKNOWN included), and TF's exception classes.

int64 components (``range``, ``enumerate``, ``cardinality``) exist in tapejax only in JAX's 64-bit
mode: those cases run with ``x64=True`` or compare Python ints."""
import numpy as np

from .data_helpers import card, spec
from .harness import parity, raises

X = np.arange(30, dtype=np.float32).reshape(10, 3)
Y = np.arange(10, dtype=np.int32)


def ints(ds):
    return [int(v) for v in ds.as_numpy_iterator()]


# ---------------------------------------------------------------------------
# structure, shapes, dtypes, remainders
# ---------------------------------------------------------------------------

@parity
def test_slices_batch_keeps_the_remainder(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    return spec(ds.element_spec), card(ds), list(ds)


@parity
def test_slices_batch_drop_remainder(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4, drop_remainder=True)
    return spec(ds.element_spec), card(ds), list(ds)


@parity
def test_dict_elements(tf):
    ds = tf.data.Dataset.from_tensor_slices({"b": Y, "a": X})
    batched = ds.batch(3)
    return spec(ds.element_spec), spec(batched.element_spec), list(batched), list(ds.take(2))


@parity
def test_python_data_dtypes_and_lists_are_tensors(tf):
    a = tf.data.Dataset.from_tensor_slices([[1, 2], [3, 4]])
    b = tf.data.Dataset.from_tensor_slices(([1.5, 2.5], [True, False]))
    c = tf.data.Dataset.from_tensors([1, 2, 3])
    return spec(a.element_spec), spec(b.element_spec), spec(c.element_spec), list(a), list(b), list(c)


@parity(x64=True)
def test_range_forms(tf):
    D = tf.data.Dataset
    return (ints(D.range(5)), ints(D.range(2, 10, 3)), ints(D.range(5, 1, -2)), ints(D.range(5, 2)),
            spec(D.range(3).element_spec), spec(D.range(3, output_type=tf.int32).element_spec),
            list(D.range(4).batch(3)))


@parity
def test_map_runs_tapejax_ops_on_structures(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    m = ds.map(lambda x, y: {"s": tf.reduce_sum(x * 2.0), "y": tf.cast(y, tf.float32) + 1.0, "x": x})
    lst = ds.map(lambda x, y: [y, x])            # a top-level list is a tuple of components
    return spec(m.element_spec), list(m.batch(4)), spec(lst.element_spec), list(lst.take(2))


@parity
def test_map_after_batch_has_unknown_batch_dimension(tf):
    b = tf.data.Dataset.from_tensor_slices(X).batch(4)
    s = b.map(lambda v: tf.reduce_sum(v, axis=1))
    r = b.map(lambda v: tf.reshape(v, [-1, 3, 1]))     # (no symbolic form: traced at two sizes)
    k = b.map(lambda v: (v[:, :2], tf.matmul(v, tf.ones([3, 5]))))
    return spec(s.element_spec), spec(r.element_spec), spec(k.element_spec), list(s), list(r)


@parity
def test_map_with_python_control_flow_on_values(tf):
    """AutoGraph in TF; eager per element in tapejax: the same values."""
    def f(v):
        if tf.reduce_sum(v) > 20.0:
            return v * -1.0
        return v
    ds = tf.data.Dataset.from_tensor_slices(X).map(f)
    return spec(ds.element_spec)[1], list(ds)


@parity
def test_map_returns_python_constants(tf):
    ds = tf.data.Dataset.from_tensor_slices(Y).map(lambda y: (y, 2.0, np.int32(7)))
    return spec(ds.element_spec), list(ds.take(2))


@parity
def test_filter(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).filter(lambda x, y: y % 3 == 0)
    return spec(ds.element_spec), card(ds), list(ds), list(ds.batch(2))


@parity
def test_padded_batch(tf):
    ds = tf.data.Dataset.from_tensor_slices(Y[1:6]).map(lambda n: tf.range(n))
    plain = ds.padded_batch(2)
    shaped = ds.padded_batch(2, padded_shapes=[6], padding_values=-1, drop_remainder=True)
    return (spec(plain.element_spec), list(plain), spec(shaped.element_spec), list(shaped), card(plain),
            card(shaped))


@parity
def test_padded_batch_of_tuples(tf):
    ds = tf.data.Dataset.from_tensor_slices(Y[1:5]).map(lambda n: (tf.ones([n, 2]), n))
    pb = ds.padded_batch(3, padded_shapes=([None, 2], []), padding_values=(0.5, 0))
    return spec(pb.element_spec), list(pb)


@parity
def test_unbatch(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    u = ds.unbatch()
    fixed = tf.data.Dataset.from_tensor_slices(X).batch(2, drop_remainder=True).unbatch()
    d = tf.data.Dataset.from_tensors({"a": [1, 2], "b": [[1.0, 2.0], [3.0, 4.0]]}).unbatch()
    return spec(u.element_spec), list(u), card(u), card(fixed), list(d)


@parity(x64=True)
def test_enumerate(tf):
    ds = tf.data.Dataset.from_tensor_slices(Y[:3]).enumerate(start=10)
    return spec(ds.element_spec), list(ds), card(ds)


@parity
def test_zip(tf):
    a = tf.data.Dataset.from_tensor_slices(X)
    b = tf.data.Dataset.from_tensor_slices(Y[:4])
    nested = tf.data.Dataset.zip((a, (b, a)))
    named = tf.data.Dataset.zip({"y": b, "x": a})
    args = tf.data.Dataset.zip(a, b)
    return (spec(nested.element_spec), list(nested), spec(named.element_spec), list(named), card(nested),
            list(args))


@parity
def test_concatenate(tf):
    a = tf.data.Dataset.from_tensor_slices(X[:2])
    b = tf.data.Dataset.from_tensors(np.zeros((4, 3), np.float32))
    c = a.batch(2).concatenate(b)      # shapes (None, 3) and (4, 3): (None, 3)
    return spec(c.element_spec), list(c), card(c), list(a.concatenate(a))


@parity
def test_prefetch_and_cache_keep_the_elements(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).map(lambda x, y: (x + 1.0, y)).cache().batch(3)
    p = ds.prefetch(tf.data.AUTOTUNE)
    return list(p), list(p), list(ds.prefetch(0)), card(p), spec(p.element_spec)


@parity
def test_from_generator(tf):
    def gen():
        for i in range(4):
            yield np.arange(i, dtype=np.float32), i
    ds = tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec(shape=(None,), dtype=tf.float32), tf.TensorSpec((), tf.int32)))
    casts = tf.data.Dataset.from_generator(lambda: iter([1.5, 2.0]), output_signature=tf.TensorSpec((), tf.int32))
    return spec(ds.element_spec), list(ds), card(ds), list(ds.padded_batch(2)), list(casts)


@parity
def test_as_numpy_iterator(tf):
    ds = tf.data.Dataset.from_tensor_slices((X[:2], Y[:2]))
    out = list(ds.as_numpy_iterator())
    return out, [type(v).__name__ for v in out[0]], list(ds.batch(2).as_numpy_iterator())


# ---------------------------------------------------------------------------
# counts: repeat / take / skip interplay and cardinality
# ---------------------------------------------------------------------------

@parity
def test_repeat_take_skip_interplay(tf):
    D = tf.data.Dataset
    r = D.from_tensor_slices(Y[:3])
    return [ints(r.take(2).repeat(2)), ints(r.repeat(2).take(4)), ints(r.skip(1).repeat(2)),
            ints(r.repeat(2).skip(4)), ints(r.repeat().take(7)), ints(r.repeat(0)), ints(r.take(-1)),
            ints(r.skip(-1)), ints(r.take(0)), ints(r.repeat(3).batch(4).unbatch()),
            ints(r.batch(2).repeat(2).unbatch()), ints(r.filter(lambda v: v > 0).repeat(2)),
            ints(r.repeat().skip(2).take(3)), ints(r.shuffle(1).repeat(2))]


@parity
def test_cardinality(tf):
    D = tf.data.Dataset
    r = D.from_tensor_slices(Y)
    unk = r.filter(lambda v: True)
    inf = r.repeat()
    gen = D.from_generator(lambda: iter([1]), output_signature=tf.TensorSpec((), tf.int32))
    cases = [r, unk, inf, inf.take(5), inf.skip(5), r.take(3), r.skip(3), r.skip(20), r.batch(3),
             r.batch(3, drop_remainder=True), r.batch(3).unbatch(), gen, D.zip((r, r.take(3))),
             D.zip((inf, r.take(3))), D.zip((unk, r)), r.concatenate(r), inf.concatenate(r), unk.concatenate(r),
             unk.concatenate(inf), r.shuffle(3), r.cache(), r.prefetch(2), r.map(lambda v: v), r.padded_batch(4),
             unk.repeat(), unk.repeat(0), r.take(0).repeat(), r.repeat(0), inf.batch(3), unk.batch(3),
             inf.take(0), D.from_tensor_slices(np.zeros((0, 3), np.float32)), inf.filter(lambda v: True),
             unk.take(3), r.enumerate(), D.from_tensors(1)]
    return [card(d) for d in cases], tf.data.INFINITE_CARDINALITY, tf.data.UNKNOWN_CARDINALITY


@parity
def test_len(tf):
    r = tf.data.Dataset.from_tensor_slices(Y)
    return len(r), len(r.batch(3)), raises(len, r.repeat()), raises(len, r.filter(lambda v: True))


# ---------------------------------------------------------------------------
# shuffle: what does not depend on the order
# ---------------------------------------------------------------------------

@parity
def test_shuffle_keeps_every_element_once_per_epoch(tf):
    ds = tf.data.Dataset.from_tensor_slices(Y).shuffle(4, seed=3).repeat(3)
    got = ints(ds)
    epochs = [sorted(got[i * 10:(i + 1) * 10]) for i in range(3)]
    whole = tf.data.Dataset.from_tensor_slices(Y).shuffle(100)
    return epochs, sorted(ints(whole)), ints(tf.data.Dataset.from_tensor_slices(Y).shuffle(1)), card(ds)


@parity
def test_shuffle_seed_and_reshuffle(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(64)).shuffle(64, seed=7, reshuffle_each_iteration=False)
    re = tf.data.Dataset.from_tensor_slices(np.arange(64)).shuffle(64, seed=7)
    first, again = ints(ds), ints(ds)
    r1, r2 = ints(re), ints(re)
    return first == again, first != sorted(first), r1 != r2, sorted(r1) == sorted(r2) == list(range(64))


@parity
def test_shuffle_then_batch_is_a_permutation_in_batches(tf):
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(5, seed=1).batch(4)
    batches = list(ds)
    ys = sorted(int(v) for _, y in batches for v in y.numpy())
    rows_match = all(bool(np.array_equal(x.numpy(), X[y.numpy()])) for x, y in batches)
    return [tuple(x.shape) for x, _ in batches], ys, rows_match


# ---------------------------------------------------------------------------
# bad input: TF's exception classes
# ---------------------------------------------------------------------------

@parity
def test_bad_arguments(tf):
    D = tf.data.Dataset
    r = D.from_tensor_slices(Y)
    return [raises(r.batch, 0), raises(r.batch, -1), raises(r.batch, 1.5), raises(r.batch, None),
            raises(r.shuffle, 0), raises(r.shuffle, -1), raises(r.shuffle, 1.5), raises(r.prefetch, -5),
            raises(r.take, 1.5), raises(r.repeat, 1.5), raises(r.padded_batch, 0),
            raises(r.map, 3), raises(r.filter, None), raises(r.map, lambda v: v, num_parallel_calls=0),
            raises(r.map, lambda v: v, num_parallel_calls=2.5), raises(r.enumerate, 1.5), raises(r.cache, 3),
            raises(D.range), raises(D.range, 1, 2, 3, 4), raises(D.range, 3.5), raises(D.range, 2, 10, 0)]


@parity
def test_bad_structures(tf):
    D = tf.data.Dataset
    r = D.from_tensor_slices(Y)
    ragged = r.take(3).map(lambda n: tf.range(n))
    return [raises(r.map, lambda v: object()), raises(r.map, lambda v: {v}),
            raises(r.filter, lambda v: v), raises(r.filter, lambda v: tf.stack([v > 1, v > 2])),
            raises(D.from_tensor_slices, (np.zeros(3, np.float32), np.zeros(4, np.float32))), raises(D.from_tensor_slices, 3),
            raises(D.from_tensor_slices, ()), raises(D.from_tensor_slices, [[1, 2], [3]]),
            raises(r.unbatch), raises(r.concatenate, D.from_tensor_slices(X)),
            raises(r.concatenate, D.zip((r, r))), raises(D.zip, (r, 3)),
            raises(D.from_generator, lambda: iter([1])), raises(D.from_generator, 3),
            raises(D.from_generator, lambda: iter([1]), output_signature=3),
            raises(ragged.padded_batch, 2, padded_shapes=[2, 2]),
            raises(ragged.padded_batch, 2, padding_values=1.5)]


@parity
def test_errors_while_iterating(tf):
    D = tf.data.Dataset
    ragged = D.from_tensor_slices(Y[1:4]).map(lambda n: tf.range(n))
    it = iter(D.from_tensor_slices(Y[:1]))
    first = it.get_next()
    gen = D.from_generator(lambda: iter([[1, 2], [3]]), output_signature=tf.TensorSpec((2,), tf.int32))
    gen_struct = D.from_generator(lambda: iter([1]), output_signature=(tf.TensorSpec((), tf.int32),) * 2)
    gen_type = D.from_generator(lambda: iter(["a"]), output_signature=tf.TensorSpec((), tf.int32))
    return [first, raises(it.get_next), raises(list, ragged.batch(2)),
            raises(list, ragged.padded_batch(2, padded_shapes=[1])), raises(list, gen), raises(list, gen_struct),
            raises(list, gen_type)]


@parity
def test_iterating_inside_a_function_without_autograph(tf):
    """Without AutoGraph the `for x in dataset` idiom reads on and on: both raise ValueError after
    32 reads in the trace (TF's threshold)."""
    ds = tf.data.Dataset.from_tensor_slices(X).batch(2)

    @tf.function(autograph=False)
    def total():
        s = tf.zeros([3])
        for b in ds:
            s = s + tf.reduce_sum(b, axis=0)
        return s
    return raises(total)


# ---------------------------------------------------------------------------
# a user's program: training fed by a pipeline, evaluation between epochs
# ---------------------------------------------------------------------------

@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_training_loop_fed_by_a_pipeline(tf):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [0.0]], np.float32) + 0.1).astype(np.float32)
    train = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 0.5, b)).batch(16).prefetch(2)
    test = tf.data.Dataset.from_tensor_slices((x[:32], y[:32])).map(lambda a, b: (a * 0.5, b)).batch(32)
    w1 = tf.Variable(rng.normal(size=(4, 8)).astype(np.float32) * 0.3)
    b1 = tf.Variable(np.zeros(8, np.float32))
    w2 = tf.Variable(rng.normal(size=(8, 1)).astype(np.float32) * 0.3)
    params = [w1, b1, w2]

    def model(a):
        return tf.matmul(tf.nn.relu(tf.matmul(a, w1) + b1), w2)

    evals, losses = [], []
    for epoch in range(3):
        for a, b in train:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(a) - b))
            for p, g in zip(params, tape.gradient(loss, params)):
                p.assign_sub(0.05 * g)
            losses.append(loss)
        for a, b in test:
            evals.append(tf.reduce_mean(tf.square(model(a) - b)))
    return losses[-1], evals, w2.numpy()


@parity
def test_dataset_elements_are_constants_to_a_tape(tf):
    """A pipeline is not recorded: an element computed from a watched tensor has no gradient."""
    c = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(c)
        ds = tf.data.Dataset.from_tensor_slices(np.ones(4, np.float32)).map(lambda x: x * c)
        total = tf.add_n(list(ds))
        direct = c * 2.0
    return total, tape.gradient(total, c), tape.gradient(direct, c)


@parity
def test_file_cache_written_by_a_complete_pass(tf):
    """``cache(filename)``: an unfinished pass keeps nothing (the next pass computes again), a
    complete one writes the file, and a dataset over another source with the same filename reads
    the file, not its source."""
    import os
    import tempfile
    f = os.path.join(tempfile.mkdtemp(prefix="parity-cache-"), "c")
    ds = tf.data.Dataset.from_tensor_slices(X).map(lambda v: v * 10.0).cache(f)
    it = iter(ds)
    first = next(it)
    del it
    full = list(ds.as_numpy_iterator())
    other = list(tf.data.Dataset.from_tensor_slices(X[:2]).cache(f).as_numpy_iterator())
    return first, full, other
