"""Host values in dataset functions (``tapejax/data/hostvalues.py``): host op results stay NumPy,
ops on them are staged and run as one program per element, or per batch when ``batch`` follows.

The oracle is the op-by-op path (``set_host_values(False)``: every host op result a Tensor,
every op run at once, what tapejax did before) and hand-made NumPy values; the behaviour is
asserted through ``hostvalues.Counts`` (programs compiled, program runs, staged ops, forced
values), never timers."""
import os
import tempfile

import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError
from tapejax.data import hostvalues as hv

H, W, C = 4, 5, 3
FEATURES = {"image": tf.io.FixedLenFeature([], "string"), "label": tf.io.FixedLenFeature([], tf.int64)}


@pytest.fixture(autouse=True)
def _host_values_on():
    prev = hv.set_host_values(True)
    yield
    hv.set_host_values(prev)


def _records(n=10, sizes=None):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (sizes[i] if sizes else H * W * C,), dtype=np.uint8) for i in range(n)]
    labels = rng.integers(0, 10, n)
    path = os.path.join(tempfile.mkdtemp(prefix="tapejax-hostvalues-"), "x.tfrecord")
    t = tf.train
    with tf.io.TFRecordWriter(path) as w:
        for img, y in zip(images, labels):
            w.write(t.Example(features=t.Features(feature={
                "image": t.Feature(bytes_list=t.BytesList(value=[img.tobytes()])),
                "label": t.Feature(int64_list=t.Int64List(value=[int(y)]))})).SerializeToString())
    return path, images, labels


def _parse(r):
    e = tf.io.parse_single_example(r, FEATURES)
    return tf.reshape(tf.io.decode_raw(e["image"], tf.uint8), [H, W, C]), e["label"]


def _both(make):
    """The elements of ``make()`` with host values on, and on the op-by-op path."""
    on = [tuple(np.asarray(c) for c in el) for el in make()]
    prev = hv.set_host_values(False)
    try:
        off = [tuple(np.asarray(c) for c in el) for el in make()]
    finally:
        hv.set_host_values(prev)
    return on, off


def _assert_same(on, off):
    assert len(on) == len(off)
    for a, b in zip(on, off):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)


def _counts():
    c = hv.Counts
    return c.compiles, c.batch_runs, c.staged, c.forced, c.op_runs


def test_tfrecord_map_batch_one_program_per_batch_no_transfers():
    path, images, labels = _records(10)
    ds = tf.data.TFRecordDataset(path).map(_parse).batch(4)
    list(ds)   # warm: the batch programs (4 and the short last batch of 2) are compiled
    c0 = _counts()
    batches = list(ds)
    c1 = _counts()
    assert c1[0] == c0[0]                 # no new compile on the second pass
    assert c1[1] - c0[1] == 3             # the reshape run once per batch (jax.vmap)
    assert c1[2] - c0[2] == 10            # one staged op (the reshape) per element
    assert c1[3] == c0[3]                 # nothing moved to the device element by element
    assert c1[4] == c0[4]                 # and no op run for one element
    got_x = np.concatenate([np.asarray(x) for x, _ in batches])
    got_y = np.concatenate([np.asarray(y) for _, y in batches])
    np.testing.assert_array_equal(got_x, np.stack(images).reshape(10, H, W, C))
    np.testing.assert_array_equal(got_y, labels)
    assert batches[0][0].dtype == tf.uint8 and batches[0][1].dtype == tf.int32   # (int64 without x64)
    assert batches[0][0].shape == (4, H, W, C) and batches[-1][0].shape == (2, H, W, C)


def test_tfrecord_values_equal_op_by_op():
    path, _, _ = _records(9)
    def cast(r):
        x, y = _parse(r)
        return tf.cast(x, tf.float32) / 255.0 + 1, y * 2
    for make in (lambda: tf.data.TFRecordDataset(path).map(cast).batch(4),
                 lambda: tf.data.TFRecordDataset(path).map(cast),
                 lambda: tf.data.TFRecordDataset(path).map(cast, num_parallel_calls=3).batch(2, drop_remainder=True),
                 lambda: tf.data.TFRecordDataset(path).map(cast).batch(4).unbatch().batch(3)):
        _assert_same(*_both(make))


def test_unbatched_map_one_program_per_element():
    path, images, _ = _records(5)
    ds = tf.data.TFRecordDataset(path).map(_parse)
    list(ds)
    c0 = _counts()
    out = list(ds)
    c1 = _counts()
    assert c1[0] == c0[0] and c1[1] == c0[1] and c1[4] - c0[4] == 5   # the reshape per element
    assert c1[3] == c0[3]                 # the leaf went to the device with the reshape's call
    np.testing.assert_array_equal(np.asarray(out[3][0]), images[3].reshape(H, W, C))
    assert isinstance(out[3][0], tf.Tensor)


def test_images_decode_resize_scale_equal_eager(tmp_path):
    from PIL import Image
    rng = np.random.default_rng(1)
    paths = []
    for i in range(6):
        p = str(tmp_path / f"{i}.png")
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(p)
        paths.append(p)
    labels = np.arange(6, dtype=np.int32)

    def load(p, y):
        image = tf.io.decode_png(tf.io.read_file(p), channels=3)
        return tf.image.resize(image, [8, 8]) / 255.0, y
    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).map(load).batch(4)
    got = np.concatenate([np.asarray(x) for x, _ in ds])
    want = np.stack([np.asarray(tf.image.resize(tf.io.decode_png(tf.io.read_file(p), channels=3), [8, 8]) / 255.0)
                     for p in paths])
    assert got.dtype == np.float32
    # (the pipeline runs on the host, the eager ops on the default device: on a GPU, XLA divides
    # by a constant as a product with its inverse, one unit in the last place off)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
    _assert_same(*_both(lambda: ds))


def test_values_inside_the_function_are_readable():
    """``numpy()``, Python control flow, shapes and dtypes of host values inside the function."""
    path, images, _ = _records(6)
    seen = []

    def fn(r):
        x, y = _parse(r)
        assert x.shape == (H, W, C) and x.dtype == tf.uint8
        seen.append(int(x.numpy()[0, 0, 0]))          # forces the staged reshape
        if tf.reduce_sum(tf.cast(x, tf.int32)) > 0:   # Python control flow on a staged value
            x = x + 1
        return x, y
    out = [np.asarray(x) for x, _ in tf.data.TFRecordDataset(path).map(fn).batch(3)]
    want = np.stack(images).reshape(6, H, W, C) + 1
    np.testing.assert_array_equal(np.concatenate(out), want.astype(np.uint8))
    assert seen[-6:] == [int(i[0]) for i in images]


def test_op_error_raised_at_the_op_with_the_eager_class():
    path, _, _ = _records(3)
    def bad_reshape(r):
        x, _ = _parse(r)
        return tf.reshape(x, [7])
    for enabled in (True, False):
        hv.set_host_values(enabled)
        with pytest.raises(InvalidArgumentError, match="Input to reshape"):
            tf.data.TFRecordDataset(path).map(bad_reshape)

    def bad_matmul(r):
        x, _ = _parse(r)
        return tf.matmul(tf.cast(x[0], tf.float32), tf.ones([2, 2]))
    errors = []
    for enabled in (True, False):
        hv.set_host_values(enabled)
        with pytest.raises(Exception) as e:
            tf.data.TFRecordDataset(path).map(bad_matmul)
        errors.append(type(e.value))
    assert errors[0] is errors[1]


def test_error_at_the_element_that_fails():
    """A record whose image has another length: decode_raw + reshape fails at that element
    (TF's InvalidArgumentError), after the elements before it."""
    path, _, _ = _records(5, sizes=[60, 60, 60, 61, 60])
    it = iter(tf.data.TFRecordDataset(path).map(_parse))
    for _ in range(3):
        next(it)
    with pytest.raises(InvalidArgumentError, match="Input to reshape"):
        next(it)


def test_shapes_that_differ_in_a_batch_keep_tfs_error():
    path, _, _ = _records(4, sizes=[6, 6, 9, 6])
    def fn(r):
        e = tf.io.parse_single_example(r, FEATURES)
        return tf.cast(tf.io.decode_raw(e["image"], tf.uint8), tf.float32) * 2.0
    for enabled in (True, False):
        hv.set_host_values(enabled)
        it = iter(tf.data.TFRecordDataset(path).map(fn).batch(4))
        with pytest.raises(InvalidArgumentError, match="Cannot batch tensors with different shapes"):
            next(it)


def test_elements_whose_graphs_differ_are_computed_one_by_one():
    """Python control flow on a value picks other ops for some elements: the batch computes
    those elements one by one and the values are the op-by-op path's."""
    path, _, _ = _records(8)
    def fn(r):
        x, y = _parse(r)
        if int(y) % 2:
            return tf.cast(x, tf.float32) * 3.0, y
        return tf.cast(x, tf.float32) - 1.0, y
    _assert_same(*_both(lambda: tf.data.TFRecordDataset(path).map(fn).batch(4)))


def test_py_function_and_numpy_function_on_host_values():
    path, _, _ = _records(5)
    def fn(r):
        x, y = _parse(r)
        s = tf.numpy_function(lambda a: (a.astype(np.int64).sum() % 7).astype(np.int32), [x], tf.int32)
        p = tf.py_function(lambda a: a * 2, [tf.cast(x, tf.int32)], tf.int32)
        return s, p, y
    _assert_same(*_both(lambda: tf.data.TFRecordDataset(path).map(fn).batch(2)))


def test_seeded_random_ops_keep_tfs_per_element_order():
    path, _, _ = _records(6)
    def fn(r):
        x, y = _parse(r)
        noise = tf.random.uniform([H, W, C], seed=3)
        return tf.cast(x, tf.float32) + noise, tf.random.uniform([], 0, 100, tf.int32, seed=5)
    tf.random.set_seed(1)
    on, off = _both(lambda: tf.data.TFRecordDataset(path).map(fn).batch(4))
    _assert_same(on, off)
    assert not np.array_equal(on[0][0][0], on[0][0][1] - (on[0][0][1] - on[0][0][0]) + 1)   # (values vary)
    tf.random.set_seed(None)


def test_nondeterministic_parallel_map_same_elements():
    path, images, _ = _records(12)
    ds = tf.data.TFRecordDataset(path).map(_parse, num_parallel_calls=4, deterministic=False).batch(5)
    got = np.concatenate([np.asarray(x) for x, _ in ds])
    want = np.stack(images).reshape(12, H, W, C)
    assert sorted(map(bytes, got.reshape(12, -1))) == sorted(map(bytes, want.reshape(12, -1)))


def test_scalars_that_differ_per_element_fall_back_per_element():
    """A Python scalar that differs between elements cannot be shared by the batch's program
    (stacking it would change its weak type): the elements are computed one by one."""
    path, _, labels = _records(6)
    def fn(r):
        x, y = _parse(r)
        return tf.cast(x, tf.float32) * float(int(y) + 1)
    _assert_same(*_both(lambda: tf.data.TFRecordDataset(path).map(fn).batch(3)))


def test_outside_dataset_functions_host_ops_give_tensors():
    x = tf.io.decode_raw(b"\x01\x02\x03", tf.uint8)
    assert type(x) is tf.Tensor
    with hv.host_values():
        y = tf.io.decode_raw(b"\x01\x02\x03", tf.uint8)
        assert isinstance(y._thunk, hv.HostValue)
        z = tf.reshape(y, [3, 1]) * 2
        assert isinstance(z._thunk, hv.HostValue)
        np.testing.assert_array_equal(z.numpy(), [[2], [4], [6]])
    hv.set_host_values(False)
    with hv.host_values():
        assert type(tf.io.decode_raw(b"\x01", tf.uint8)) is tf.Tensor


def test_ops_with_a_variable_or_a_recording_tape_are_not_staged():
    v = tf.Variable([1, 2, 3], dtype=tf.int32)
    with hv.host_values():
        y = tf.io.decode_raw(b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00", tf.int32)
        staged = hv.Counts.staged
        z = y + v
        assert hv.Counts.staged == staged and type(z) is tf.Tensor
        np.testing.assert_array_equal(z.numpy(), [2, 4, 6])
        f = tf.cast(y, tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(f)
            g = f * 2.0
        assert not isinstance(getattr(g, "_thunk", None), hv.HostValue)
        np.testing.assert_array_equal(tape.gradient(g, f).numpy(), [2.0, 2.0, 2.0])


def test_set_host_values_checks_its_argument():
    with pytest.raises(TypeError, match="enabled"):
        hv.set_host_values("yes")


def test_only_ops_exact_under_vmap_run_once_per_batch():
    """Elementwise ops and shape ops run once per batch; a reduction (which may round otherwise at
    the batch's shape) runs element by element; the values are the op-by-op path's."""
    path, _, _ = _records(8)
    def fn(r):
        x, _ = _parse(r)
        f = tf.cast(x, tf.float32) / 7.0          # elementwise: batched
        return tf.reduce_sum(f, axis=0), f        # a reduction: per element
    ds = tf.data.TFRecordDataset(path).map(fn).batch(4)
    list(ds)
    c0 = _counts()
    list(ds)
    c1 = _counts()
    assert c1[1] - c0[1] == 3 * 2                 # reshape, cast and divide, once per batch
    assert c1[4] - c0[4] == 8                     # the reduction, once per element
    _assert_same(*_both(lambda: ds))


def test_other_transformations_after_a_host_map_equal_op_by_op():
    """padded_batch (not deferred), filter, cache, shuffle + batch, zip and as_numpy_iterator over
    a host map's NumPy components: the op-by-op path's elements."""
    path, _, _ = _records(7, sizes=[6, 9, 3, 6, 12, 3, 6])
    def fn(r):
        e = tf.io.parse_single_example(r, FEATURES)
        return tf.cast(tf.io.decode_raw(e["image"], tf.uint8), tf.int32) * 2, e["label"]
    T = tf.data.TFRecordDataset
    makes = [lambda: T(path).map(fn).padded_batch(3),
             lambda: T(path).map(fn).filter(lambda x, y: tf.reduce_sum(x) > 200).padded_batch(2),
             lambda: T(path).map(fn).cache().padded_batch(4),
             lambda: tf.data.Dataset.zip((T(path).map(fn), T(path).map(lambda r: tf.strings.length(r)))).map(
                 lambda a, b: (tf.reduce_sum(a[0]) + b, a[1])).shuffle(4, seed=2).batch(3)]
    for make in makes:
        _assert_same(*_both(make))
    on = list(T(path).map(fn).as_numpy_iterator())
    prev = hv.set_host_values(False)
    try:
        off = list(T(path).map(fn).as_numpy_iterator())
    finally:
        hv.set_host_values(prev)
    for (a, b), (c, d) in zip(on, off):
        assert type(a) is type(c) and type(b) is type(d)
        np.testing.assert_array_equal(a, c)
        assert b == d
