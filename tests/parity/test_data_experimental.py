"""tf.data's iterator extras, ``tf.experimental.Optional``, ``tf.data.experimental``'s functions and
the file readers (``TextLineDataset``, ``FixedLengthRecordDataset``, ``CsvDataset``,
``make_csv_dataset``) against real tf.data: values, specs, cardinalities, error classes (at
construction and while iterating), and a model trained from CSV rows read with an Optional loop,
with deferral on and off."""
import gzip
import os
import zlib

import numpy as np

from .data_helpers import L, card, spec, tmp
from .harness import parity, raises

# -- Iterator and Optional -------------------------------------------------------------------

@parity(x64=True)
def test_optional_loop_and_iterator_properties(tf):
    it = iter(tf.data.Dataset.range(5).batch(2))
    opt = it.get_next_as_optional()
    total, seen = 0, []
    while opt.has_value():
        total += tf.reduce_sum(opt.get_value())
        seen.append(opt.get_value())
        opt = it.get_next_as_optional()
    it2 = iter(tf.data.Dataset.from_tensor_slices(({"a": [1, 2]}, [2.0, 3.0])))
    shapes = {k: v.as_list() for k, v in it2.output_shapes[0].items()}, it2.output_shapes[1].as_list()
    types = {k: v.name for k, v in it2.output_types[0].items()}, it2.output_types[1].name
    return (total, seen, opt.has_value(), raises(opt.get_value), spec(opt.element_spec), spec(it2.element_spec),
            shapes, types, it2.output_classes[1] is type(tf.constant(1.0)) or it2.output_classes[1] is tf.Tensor,
            it2.next(), it2.next(), raises(it2.next), raises(it2.get_next),
            tf.data.experimental.get_next_as_optional(iter(tf.data.Dataset.range(3))).get_value())


@parity
def test_optional_from_value_and_empty(tf):
    O = tf.experimental.Optional
    f = O.from_value((1, {"a": 2.0}))
    e = O.empty(tf.TensorSpec([2], tf.float32))
    return (f.has_value(), f.get_value(), spec(f.element_spec), e.has_value(), raises(e.get_value),
            spec(e.element_spec), spec(O.from_value(np.ones([2, 3], np.float32)).element_spec),
            raises(O.from_value, None), raises(O), tf.data.experimental.Optional is O)


@parity(x64=True)
def test_numpy_iterator(tf):
    it = tf.data.Dataset.range(3).as_numpy_iterator()
    return isinstance(it, tf.data.NumpyIterator), next(it), it.next(), list(it)


# -- tf.data.experimental ---------------------------------------------------------------------

@parity(x64=True)
def test_assert_cardinality(tf):
    E, D = tf.data.experimental, tf.data.Dataset
    short = D.range(2).filter(lambda x: True).apply(E.assert_cardinality(3))
    it = iter(short)
    head = [next(it), next(it)]
    return (L(D.range(5).apply(E.assert_cardinality(5))), card(D.range(5).filter(lambda x: True).apply(
        E.assert_cardinality(3))), raises(L, D.range(5).filter(lambda x: True).apply(E.assert_cardinality(3))),
        head, raises(next, it), raises(L, D.range(5).apply(E.assert_cardinality(E.INFINITE_CARDINALITY))),
        raises(L, D.range(5).repeat().apply(E.assert_cardinality(3)).take(5)),
        raises(D.range(5).apply, E.assert_cardinality(1.5)), L(D.from_tensor_slices([1, 2, 3]).apply(E.assert_cardinality(3))
                                            .map(lambda x: x * 2)))


@parity(x64=True)
def test_from_list_and_at(tf):
    E, D = tf.data.experimental, tf.data.Dataset
    pairs = E.from_list([(1, "a"), (2, "b")])
    mapped = D.range(10).map(lambda x: (x, {"b": x * 2}))
    return (L(pairs), spec(pairs.element_spec), card(pairs), spec(E.from_list([[1, 2], [3]]).element_spec),
            L(E.from_list([{"a": 1.5}, {"a": 2.5}])), raises(E.from_list, []), raises(E.from_list, [1, (1, 2)]),
            raises(E.from_list, 5), raises(E.from_list, [1, 2.5], ok=("TypeError",)),
            E.at(D.range(10), 3), E.at(mapped, 2), raises(E.at, D.range(10), 10), raises(E.at, D.range(10), -1),
            raises(E.at, D.range(10).filter(lambda x: x > 2), 1))


@parity
def test_pad_to_cardinality(tf):
    E, D = tf.data.experimental, tf.data.Dataset
    ds = D.from_tensor_slices({"a": [[1, 2]], "b": [1.5]}).apply(E.pad_to_cardinality(3))
    return (L(ds), spec(ds.element_spec), card(ds), raises(D.range(3).apply, E.pad_to_cardinality(4)),
            raises(D.from_tensor_slices({"a": [1, 2]}).apply, E.pad_to_cardinality(1)),
            raises(D.from_tensor_slices({"a": [1, 2]}).filter(lambda d: True).apply, E.pad_to_cardinality(4)),
            L(D.from_tensor_slices({"a": [1]}).apply(E.pad_to_cardinality(2, mask_key="real"))))


@parity(x64=True)
def test_map_and_batch_shuffle_and_repeat_get_structure(tf):
    E, D = tf.data.experimental, tf.data.Dataset
    ds = D.range(7)
    mb = ds.apply(E.map_and_batch(lambda x: x * 2, 3))
    sr = ds.apply(E.shuffle_and_repeat(3, count=2, seed=1))
    return (L(mb), spec(mb.element_spec), card(mb),
            L(ds.apply(E.map_and_batch(lambda x: x * 2, 3, drop_remainder=True))),
            spec(ds.apply(E.map_and_batch(lambda x: (x, x), 3, drop_remainder=True)).element_spec),
            L(ds.apply(E.map_and_batch(lambda x: x * 2, 3, num_parallel_batches=2))),
            raises(E.map_and_batch, lambda x: x, 3, num_parallel_batches=2, num_parallel_calls=2),
            raises(lambda: ds.apply(E.map_and_batch(lambda x: x, 0))),
            card(sr), sorted(L(sr)), card(ds.apply(E.shuffle_and_repeat(3))), raises(ds.apply, E.shuffle_and_repeat(0)),
            spec(E.get_structure(ds)), spec(E.get_structure(iter(ds))), raises(E.get_structure, 5),
            spec(E.get_structure(tf.experimental.Optional.from_value(1.0))))


@parity(x64=True)
def test_group_by_reducer(tf):
    E, D = tf.data.experimental, tf.data.Dataset
    ds = D.range(7)
    total = E.Reducer(lambda k: np.int64(0), lambda s, x: s + x, lambda s: s)
    keyed = E.Reducer(init_func=lambda k: (k, np.int64(0)), reduce_func=lambda s, x: (s[0], s[1] + x),
                      finalize_func=lambda k, s: {"k": k, "n": s})
    growing = E.Reducer(lambda k: np.zeros([1], np.int64), lambda s, x: tf.concat([s, [x]], 0), lambda s: s)
    pairs = D.range(3).map(lambda x: (x, x)).apply(E.group_by_reducer(
        lambda x, y: x % 2, E.Reducer(lambda k: np.int64(0), lambda s, e: s + e[0] + e[1], lambda s: s)))
    bad_type = E.Reducer(lambda k: np.int64(0), lambda s, e: tf.cast(s + e, tf.float32), lambda s: s)
    return (L(ds.apply(E.group_by_reducer(lambda x: x % 2, total))),
            L(ds.apply(E.group_by_reducer(lambda x: -1 - x % 2, total))),
            L(ds.apply(E.group_by_reducer(lambda x: 2 - x % 3, keyed))),
            card(ds.apply(E.group_by_reducer(lambda x: x % 2, total))),
            spec(ds.apply(E.group_by_reducer(lambda x: x % 2, growing)).element_spec),
            L(ds.apply(E.group_by_reducer(lambda x: x % 2, growing))), L(pairs),
            raises(ds.apply, E.group_by_reducer(lambda x: x % 2, bad_type)),
            raises(ds.apply, E.group_by_reducer(lambda x: tf.cast(x % 2, tf.int32), total)),
            raises(ds.apply, E.group_by_reducer(lambda x: x, E.Reducer(lambda k: np.int64(0), lambda s, e: s + e, 3))))


@parity(x64=True)
def test_devices_options_and_constants(tf):
    E, D = tf.data.experimental, tf.data.Dataset
    o = tf.data.Options()
    before = int(o.experimental_distribute.auto_shard_policy)
    o.experimental_distribute.auto_shard_policy = E.AutoShardPolicy.DATA
    o.experimental_external_state_policy = E.ExternalStatePolicy.FAIL
    o.autotune.autotune_algorithm = E.AutotuneAlgorithm.GRADIENT_DESCENT
    ds = D.range(3).with_options(o)
    got = ds.options()
    return (L(D.range(3).apply(E.copy_to_device("/cpu:0"))), L(D.range(3).apply(E.prefetch_to_device("/gpu:0"))),
            [t.device.endswith("CPU:0") for t in D.range(3).apply(E.copy_to_device("/cpu:0"))],
            card(D.range(3).apply(E.copy_to_device("/cpu:0"))), raises(D.range(3).apply, E.copy_to_device("/xpu:0")),
            before, int(got.experimental_distribute.auto_shard_policy), got.experimental_external_state_policy.value,
            got.autotune.autotune_algorithm.value,
            raises(setattr, tf.data.Options().experimental_distribute, "auto_shard_policy", 3),
            [int(p) for p in E.AutoShardPolicy], [p.value for p in E.AutotuneAlgorithm],
            [p.value for p in E.ExternalStatePolicy], E.SHARD_HINT)


# -- file readers -------------------------------------------------------------------------------

def _files():
    d = tmp()
    p1 = os.path.join(d, "a.txt")
    with open(p1, "wb") as f:
        f.write(b"h1,h2\n1,2\n3,4\r\n\n5,6")
    p2 = os.path.join(d, "b.txt.gz")
    with open(p2, "wb") as f:
        f.write(gzip.compress(b"x\ny\n"))
    p3 = os.path.join(d, "c.z")
    with open(p3, "wb") as f:
        f.write(zlib.compress(b"z1\nz2"))
    p4 = os.path.join(d, "f.bin")
    with open(p4, "wb") as f:
        f.write(b"HDabcdefghijFT")
    return d, p1, p2, p3, p4


@parity
def test_text_line_dataset(tf):
    d, p1, p2, p3, _ = _files()
    T = tf.data.TextLineDataset
    return (L(T(p1)), spec(T(p1).element_spec), card(T(p1)), L(T([p1, p1]).skip(1)),
            L(T(p2, compression_type="GZIP")), L(T(p3, compression_type="ZLIB")),
            raises(lambda: L(T(p1, compression_type="BAD"))), raises(L, T(os.path.join(d, "missing"))),
            raises(T, 3), L(T(tf.data.Dataset.list_files(os.path.join(d, "a.*")))),
            L(T([p1, p3], num_parallel_reads=2)), L(T(np.array([p1]))))


@parity
def test_fixed_length_record_dataset(tf):
    _, _, _, _, p4 = _files()
    F = tf.data.FixedLengthRecordDataset
    return (L(F(p4, 5, header_bytes=2, footer_bytes=2)), L(F([p4, p4], 7)), spec(F(p4, 3).element_spec),
            raises(L, F(p4, 3, header_bytes=2, footer_bytes=2)), raises(L, F(p4, 20)),
            raises(lambda: L(F(p4, 0))))


def _csv():
    d = tmp()
    p = os.path.join(d, "a.csv")
    with open(p, "w") as f:
        f.write('x,y,name,z\n1,2.5,"a,b",7\n3,,c,8\n,4.5,"q""r",9\n')
    p2 = os.path.join(d, "b.csv")
    with open(p2, "w") as f:
        f.write("1;2\n3;4\n")
    return p, p2


@parity
def test_csv_dataset(tf):
    p, p2 = _csv()
    C = tf.data.experimental.CsvDataset
    full = C(p, [[-1], [-1.0], ["z"], [0]], header=True)
    return (L(full), spec(full.element_spec), card(full),
            L(C(p, [[0], [0.0]], header=True, select_cols=[0, 3])),
            L(C(p, [[0], [0.0]], header=True, exclude_cols=[1, 2])),
            L(C(p, [[0], [0.0], [""], [0]], header=True, na_value="3")),
            L(C(p2, [[0], [0]], field_delim=";")),
            L(C(p2, [[0], [0]], field_delim=";").map(lambda a, b: a + b)),
            raises(L, C(p, [tf.int32, tf.float32, [""], [0]], header=True)),
            raises(L, C(p, [[0], [0.0], [""], [0]])),
            raises(L, C(p, [[0], [0.0], [""]], header=True)),
            raises(L, C(p, [[0], [0.0], [""], [0], [0]], header=True)),
            raises(lambda: L(C(p, [[0], [0.0]], header=True, select_cols=[3, 0]))),
            raises(lambda: L(C(p, [[0], [0.0]], header=True, select_cols=[0]))),
            raises(lambda: L(C(p2, [[0], [0]], field_delim=";;"))),
            raises(lambda: L(C(p2, [[True], [0]], field_delim=";"))),
            raises(lambda: C(p2, [[[0, 1]], [0]], field_delim=";")),
            raises(lambda: L(C(p2, [[0], [0]], select_cols=[0, 5], field_delim=";"))))


@parity
def test_make_csv_dataset(tf):
    p, _ = _csv()
    M = tf.data.experimental.make_csv_dataset
    ds = M(p, 2, label_name="z", num_epochs=1, shuffle=False)
    rows = [({k: v.numpy().tolist() if hasattr(v, "numpy") else v.tolist() for k, v in f.items()}, lab)
            for f, lab in ds]
    forever = M(p, 2, select_columns=["x", "z"], shuffle=False)
    return (rows, spec(ds.element_spec), spec(forever.element_spec), L(forever.take(2)),
            sorted(v for r in L(M(p, 3, select_columns=["x", "y"], num_epochs=2, shuffle_seed=3)) for v in r["x"].tolist()),
            raises(M, p, 2, label_name="w"), raises(M, p, 2, select_columns=["w"]),
            raises(M, p, 2, header=False))


# -- a user's program ---------------------------------------------------------------------------

@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_training_from_csv_rows_with_an_optional_loop(tf):
    """CSV rows (a numeric label, a text column kept on the host) batched, a linear model trained
    with an ``Optional`` loop over each epoch and evaluated between epochs."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.25
    p = os.path.join(tmp(), "train.csv")
    with open(p, "w") as f:
        f.write("a,b,c,tag,y\n")
        for r, t in zip(x, y):
            f.write(f"{r[0]:.6f},{r[1]:.6f},{r[2]:.6f},row,{t:.6f}\n")
    ds = tf.data.experimental.CsvDataset(p, [[0.0]] * 3 + [[""], [0.0]], header=True).batch(8)
    w = tf.Variable(np.zeros([3, 1], np.float32))
    b = tf.Variable(np.zeros([1], np.float32))
    losses, evals = [], []
    for _ in range(3):
        it = iter(ds)
        opt = it.get_next_as_optional()
        while opt.has_value():
            a, bb, c, tag, lab = opt.get_value()
            feats = tf.stack([a, bb, c], axis=1)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(feats, w)[:, 0] + b - lab))
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            losses.append(loss)
            opt = it.get_next_as_optional()
        evals.append(tf.add_n([tf.reduce_sum(tf.square(tf.matmul(tf.stack(r[:3], axis=1), w)[:, 0] + b - r[4]))
                               for r in ds]))
    return losses[-1], evals, w.numpy(), b.numpy()
