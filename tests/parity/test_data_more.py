"""tapejax.data's nested and Python-loop transformations against real tf.data: ``flat_map``,
``interleave`` (TF's cycle order), ``window``, ``group_by_window``, ``bucket_by_sequence_length``,
``scan``, ``reduce``, ``take_while``, ``unique``, ``shard``, ``rebatch``, ``ignore_errors``,
``get_single_element``, ``choose_from_datasets``, ``counter``, and the ``tf.data.experimental``
forms.  Element sequences are compared; ``sample_from_datasets`` and ``random`` draw other bits
than TF's, so their cases compare structure, counts and ranges.  int64 elements (``range``)
run with ``x64=True``."""
import numpy as np

from .data_helpers import L, card, spec
from .harness import parity, raises


@parity(x64=True)
def test_flat_map(tf):
    D = tf.data.Dataset
    a = D.range(5).flat_map(lambda x: D.range(x))
    b = D.from_tensor_slices(np.arange(12).reshape(4, 3)).flat_map(lambda r: D.from_tensor_slices(r * 2))
    return L(a), card(a), spec(a.element_spec), L(b), raises(D.range(3).flat_map, lambda x: x + 1, ok=("TypeError",))


@parity(x64=True)
def test_interleave_orders(tf):
    D = tf.data.Dataset
    f = lambda x: D.from_tensors(x).repeat(x)   # noqa: E731
    src = D.range(1, 8)
    return ([L(src.interleave(f, cycle_length=c, block_length=b)) for c, b in ((1, 1), (2, 1), (2, 2), (3, 2), (4, 3))],
            L(src.interleave(f, cycle_length=3, block_length=2, num_parallel_calls=2)),
            L(src.interleave(f, cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)),
            card(src.interleave(f, cycle_length=2)),
            raises(src.interleave, f, cycle_length=0), raises(src.interleave, f, cycle_length=2, block_length=0))


@parity(x64=True, modes=True)
def test_inner_datasets_mapping_functions_that_capture_the_outer_element(tf):
    """Inner datasets whose maps close over the outer element (one compiled program shared by
    all of them in tapejax, the captured value an argument): each inner dataset computes with its
    own captured values, a captured table included; the same function over float rows too."""
    D = tf.data.Dataset
    table = np.arange(5, dtype=np.int64) * 10

    def scaled(x):
        return x * 2 + 1

    def inner(i):
        rows = D.range(4).map(lambda x: x + i).map(scaled)
        return rows.map(lambda x: x + tf.gather(tf.constant(table), x % 5) * i)

    ints = D.range(7).interleave(inner, cycle_length=3, block_length=2)
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    floats = D.from_tensor_slices(rows).interleave(
        lambda r: D.from_tensor_slices(r).map(lambda v: v * tf.reduce_sum(r) + 0.5), cycle_length=2)
    return L(ints), L(floats), spec(floats.element_spec)


@parity(x64=True)
def test_window(tf):
    D = tf.data.Dataset
    r = D.range(10)
    flat = lambda w: w.batch(10)   # noqa: E731
    cases = [(3,), (3, 2), (3, 2, 2), (3, 2, 2, True), (4, 1, 1, True), (3, 5), (2, 4, 3)]
    out = [(L(r.window(*c).flat_map(flat)), card(r.window(*c))) for c in cases]
    pairs = D.zip((r, r.map(lambda x: x * 10))).window(3, drop_remainder=True)
    zipped = pairs.flat_map(lambda a, b: D.zip((a.batch(3), b.batch(3))))
    w = r.window(2)
    return (out, L(zipped), card(r.repeat().window(2)), raises(r.window, 0), raises(w.as_numpy_iterator),
            isinstance(w.element_spec, tf.data.DatasetSpec), spec(w.element_spec.element_spec))


@parity(x64=True)
def test_group_by_window(tf):
    D = tf.data.Dataset
    r = D.range(12)
    a = r.group_by_window(lambda x: x % 3, lambda k, w: w.batch(10), window_size=2)
    b = r.group_by_window(lambda x: (7 - x) % 4, lambda k, w: w.batch(10), window_size=5)
    c = r.group_by_window(lambda x: x % 2, lambda k, w: w.map(lambda v: v + 100 * k).batch(10),
                          window_size_func=lambda k: k + 2)
    return L(a), L(b), L(c), card(a), raises(r.group_by_window, lambda x: x % 2, lambda k, w: w)


ROWS = np.array([[1, 0, 0, 0], [1, 2, 3, 0], [1, 2, 0, 0], [4, 5, 6, 7], [1, 0, 0, 0], [3, 3, 3, 0]], np.int32)


@parity
def test_bucket_by_sequence_length(tf):
    D = tf.data.Dataset
    ds = D.from_tensor_slices(ROWS).map(lambda x: x[:tf.reduce_sum(tf.cast(x > 0, tf.int32))])
    length = lambda x: tf.shape(x)[0]   # noqa: E731
    a = ds.bucket_by_sequence_length(length, [2, 4], [2, 2, 2])
    b = ds.bucket_by_sequence_length(length, [2, 5], [2, 2, 2], pad_to_bucket_boundary=True)
    c = ds.bucket_by_sequence_length(length, [2, 4], [2, 2, 2], drop_remainder=True, padding_values=-1)
    return L(a), L(b), L(c), raises(ds.bucket_by_sequence_length, length, [2, 4], [2, 2])


@parity(x64=True)
def test_scan_and_reduce(tf):
    D = tf.data.Dataset
    r = D.range(10)
    s = r.scan(tf.constant(0, tf.int64), lambda st, x: (st + x, st * 2))
    t = D.zip((r, r)).scan((tf.constant(0, tf.int64), tf.constant(1.0)), lambda st, e: ((st[0] + e[0], st[1] * 2.0), st[1]))
    total = D.zip((r, r)).reduce(tf.constant(0, tf.int64), lambda st, e: st + e[0] + e[1])
    pair = r.reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), lambda st, x: (st[0] + x, st[1] + 1))
    return (L(s), card(s), L(t), total, pair,
            raises(r.scan, tf.constant(0, tf.int64), lambda st, x: (tf.cast(st, tf.float32), x)),
            raises(r.reduce, tf.constant(0, tf.int64), lambda st, x: tf.cast(st, tf.float32)))


@parity(x64=True)
def test_take_while_unique_shard(tf):
    D = tf.data.Dataset
    r = D.range(10)
    u = D.from_tensor_slices([1, 2, 1, 3, 2, 5])
    return (L(r.take_while(lambda x: x < 4)), card(r.take_while(lambda x: x < 4)), L(u.unique()), card(u.unique()),
            raises(D.from_tensor_slices([1.0, 2.0]).unique), L(r.shard(3, 1)), card(r.shard(3, 1)),
            card(r.shard(3, 0)), card(r.repeat().shard(3, 1)), L(r.filter(lambda x: x > 2).shard(2, 1)),
            raises(r.shard, 3, 3), raises(r.shard, 0, 0))


@parity(x64=True)
def test_rebatch(tf):
    D = tf.data.Dataset
    r = D.range(10)
    return (L(r.batch(4).rebatch(3)), L(r.batch(4).rebatch([2, 3])), L(r.batch(4).rebatch(3, drop_remainder=True)),
            spec(r.batch(4).rebatch(3, drop_remainder=True).element_spec), spec(r.batch(4).rebatch(3).element_spec),
            card(r.batch(4).rebatch(3)))


@parity(x64=True)
def test_get_single_element(tf):
    D = tf.data.Dataset
    return (D.range(5, 6).get_single_element(), D.from_tensors((1, 2.0)).get_single_element(),
            raises(D.range(0).get_single_element), raises(D.range(2).get_single_element),
            tf.data.experimental.get_single_element(D.range(3, 4)))


@parity(x64=True)
def test_choose_from_datasets(tf):
    D = tf.data.Dataset
    dss = [D.range(3), D.range(10, 13)]
    ch = D.from_tensor_slices(tf.constant([0, 1, 1, 0, 0, 0, 1, 1], tf.int64))
    return (L(D.choose_from_datasets(dss, ch)), L(D.choose_from_datasets(dss, ch, stop_on_empty_dataset=False)),
            card(D.choose_from_datasets(dss, ch)), raises(D.choose_from_datasets, dss, D.range(3).map(lambda x: 1.0)))


@parity(x64=True)
def test_sample_from_datasets_structure(tf):
    D = tf.data.Dataset
    dss = [D.range(3), D.range(10, 13)]
    s = D.sample_from_datasets(dss, seed=1)
    w = D.sample_from_datasets(dss, weights=[0.0, 1.0], seed=2)
    stop = L(D.sample_from_datasets([D.range(3), D.range(10, 20)], seed=3, stop_on_empty_dataset=True))
    inf = D.sample_from_datasets([D.range(3).repeat(), D.range(5).repeat()], seed=1)
    return (spec(s.element_spec), card(s), sorted(L(s)), L(w), card(inf), len(L(inf.take(7))),
            set(stop) <= set(range(3)) | set(range(10, 20)), sum(v < 3 for v in stop) <= 3,
            raises(D.sample_from_datasets, dss, weights=[1.0]))


@parity(x64=True)
def test_counter_and_random_structure(tf):
    D = tf.data.Dataset
    c = D.counter(3, 2)
    rnd = D.random(seed=1)
    a, b, other = L(rnd.take(50)), L(D.random(seed=1).take(50)), L(D.random(seed=2).take(50))
    return (L(c.take(4)), spec(c.element_spec), card(D.counter()), spec(rnd.element_spec), card(rnd),
            a == b, a != other, all(0 <= v < 2**32 for v in a), len(set(a)) > 45)


@parity
def test_ignore_errors(tf):
    D = tf.data.Dataset
    ds = D.from_tensor_slices([1.0, 2.0, 0.0, 4.0]).map(lambda x: tf.debugging.check_numerics(1.0 / x, "bad"))
    return L(ds.ignore_errors()), L(ds.ignore_errors(log_warning=True).batch(2))


@parity(x64=True)
def test_experimental_transformations(tf):
    D, E = tf.data.Dataset, tf.data.experimental
    r = D.range(8)
    return (L(r.apply(E.scan(tf.constant(0, tf.int64), lambda s, x: (s + x, s)))),
            L(r.apply(E.take_while(lambda x: x < 3))), L(D.from_tensor_slices([3, 3, 1]).apply(E.unique())),
            L(r.apply(E.group_by_window(lambda x: x % 2, lambda k, w: w.batch(4), window_size=4))),
            L(r.batch(3).apply(E.unbatch())), L(r.apply(E.enumerate_dataset(start=2)).take(2)),
            L(E.Counter(1, 3).take(3)), L(E.choose_from_datasets([r, r.skip(4)], D.range(2).repeat(2))),
            L(r.apply(E.parallel_interleave(lambda x: D.range(x), cycle_length=2))))


@parity(x64=True)
def test_parallel_map_keeps_the_order(tf):
    D = tf.data.Dataset
    src = D.range(40).filter(lambda x: x % 3 != 0)
    return (L(src.map(lambda x: x * x, num_parallel_calls=4)),
            L(D.range(40).map(lambda x: x + 1, num_parallel_calls=tf.data.AUTOTUNE).batch(7)),
            L(src.map(lambda x: (x, x * 2), num_parallel_calls=3, deterministic=True).batch(5)))


@parity(modes=True)
def test_training_fed_by_an_interleaved_mapped_pipeline_with_an_evaluation_function(tf):
    """A user's program: a linear model whose weights start from ``tf.zeros`` and host constants,
    trained for a few eager tape steps on batches from an ``interleave`` of mapped inner datasets
    (each closing over its outer element), a running-mean metric kept in a Variable, and a
    compiled evaluation function called between the eager steps."""
    D = tf.data.Dataset
    feats = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(8, 3)

    def inner(row):
        return D.range(3).map(lambda k: (row * (tf.cast(k, tf.float32) + 1.0),
                                         tf.reduce_sum(row) * 2.0 + tf.cast(k, tf.float32)))

    ds = D.from_tensor_slices(feats).interleave(inner, cycle_length=2).batch(4)
    w = tf.Variable(tf.zeros([3, 1]))
    b = tf.Variable(tf.constant(np.float32(0.5)))
    total, count = tf.Variable(0.0), tf.Variable(0.0)

    @tf.function
    def evaluate(x, y):
        return tf.reduce_mean(tf.square(tf.matmul(x, w)[:, 0] + b - y))

    losses, evals = [], []
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)[:, 0] + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.05 * gw)
        b.assign_sub(0.05 * gb)
        total.assign_add(loss)
        count.assign_add(1.0)
        losses.append(loss)
        evals.append(evaluate(x, y))
    return losses, evals, w, b, total / count


@parity(x64=True, modes=True)
def test_op_seeded_random_ops_in_dataset_functions_draw_per_element(tf):
    """An op-seeded random op in a ``map`` / ``filter`` function is a kernel whose counter advances
    per call (TF): every element draws anew, an iteration repeats the previous one's values, two
    ops with one seed draw alike, and another seed draws otherwise.  (The values are tapejax's own
    stream: the comparison is of these properties.)"""
    D = tf.data.Dataset
    tf.random.set_seed(5)

    def make():
        return D.range(6).map(lambda v: (v, tf.random.uniform([], seed=1), tf.random.uniform([], seed=1),
                                          tf.random.uniform([3], seed=2)))

    def rows(ds):
        return [(int(v), float(a), float(b), tuple(np.asarray(c).round(6).tolist())) for v, a, b, c in ds]

    ds = make()
    first, again, other = rows(ds), rows(ds), rows(make())
    kept = D.range(40).filter(lambda v: tf.random.uniform([], seed=3) < 0.5)
    k1, k2 = L(kept), L(kept)
    return (first == again, first == other, len({r[1] for r in first}), all(r[1] == r[2] for r in first),
            len({r[3] for r in first}), all(r[1] != r[3][0] for r in first),
            k1 == k2, 0 < len(k1) < 40)
