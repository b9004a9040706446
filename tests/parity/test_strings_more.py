"""More of ``tf.strings``, ``tf.sparse``, ``tf.lookup`` and ``tf.config`` under TF and tapejax:
``unicode_script`` (ICU's script codes), ``unicode_decode_with_offsets`` /
``unicode_split_with_offsets`` (and a batch's RaggedTensor results), ``tf.sparse.cross`` /
``cross_hashed`` over string and integer features (string SparseTensors), the lookup table
``tf.lookup.experimental.DenseHashTable``, and ``tf.config.experimental``'s memory statistics.
Strings go in as TF string Tensors / tapejax NumPy bytes (``_s``) and come back as Python bytes
(``_py``)."""
import numpy as np

from .harness import parity, raises


def _s(tf, values):
    if tf.__name__.startswith("tensorflow"):
        return tf.constant(values)
    if isinstance(values, (bytes, str)):   # (not through NumPy's S dtype, which drops trailing NULs)
        out = np.empty((), object)
        out[()] = values.encode() if isinstance(values, str) else values
        return out
    return np.array([v.encode() if isinstance(v, str) else v for v in np.ravel(values)], object).reshape(np.shape(values))


def _py(x):
    """A string result as Python bytes / nested lists of bytes."""
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x, dtype=object).tolist() if isinstance(x, np.ndarray) else x


def _export(table):
    """A table's export as copies (TF's exported Tensors share the table's buckets: a later
    insert would show through)."""
    out = []
    for x in table.export():
        a = np.asarray(x.numpy() if hasattr(x, "numpy") else x)
        out.append(a.tolist() if a.dtype.kind == "O" else a.copy())
    return out


def _rt(r):
    """A RaggedTensor as (nested lists, ragged rank, static shape)."""
    return r.to_list(), r.ragged_rank, [None if d is None else int(d) for d in r.shape.as_list()]


# -- tf.strings ----------------------------------------------------------------------------------

@parity(x64=True)
def test_unicode_script(tf):
    """Latin, Cyrillic, Han, Hiragana, digits, Arabic, emoji (Common), a combining mark
    (Inherited), U+30FC (Common, where script extensions say Hira / Kana), an unassigned code
    point, out of range values; a matrix and a Python scalar; a wrong dtype and a non-number."""
    u = tf.strings.unicode_script
    text = [ord(c) for c in "aА字ひ1 ا"] + [0x1F600, 0x0300, 0x30FC, 0x0378, 0x1E900, 0x10FFFF, -1, 0x110000, 2**31 - 1]
    sample = list(range(0, 0x110000, 97))   # (a spread over every plane)
    return (u(tf.constant(text, tf.int32)), u(tf.constant([[65, 0x5D0], [0x0E01, 0x1100]])), u(65),
            u(tf.constant(sample)), raises(u, tf.constant([65], tf.int64)), raises(u, tf.constant([1.0])),
            raises(u, 1.5))


@parity(x64=True)
def test_unicode_decode_with_offsets(tf):
    """One string: code points and byte offsets in UTF-8 / UTF-16-BE / UTF-32-BE, invalid bytes
    replaced (one replacement per maximal invalid subsequence, as ICU), ignored, with another
    ``replacement_char``, control characters replaced; a batch (RaggedTensors, the batch's rank
    as the ragged rank); the errors."""
    d = tf.strings.unicode_decode_with_offsets
    bad = b"a\xffb\xe2\x98x\xf0\x80\x80\x80\xed\xa0\x80\xc3"
    out = [d(_s(tf, "héllo ☃"), "UTF-8"), d(_s(tf, bad), "UTF-8"), d(_s(tf, bad), "UTF-8", errors="ignore"),
           d(_s(tf, bad), "UTF-8", replacement_char=63), d(_s(tf, b"a\tb\nc\x01d\x7f"), "UTF-8", replace_control_characters=True),
           d(_s(tf, "hé☃😀".encode("utf-16-be")), "UTF-16-BE"), d(_s(tf, b"\x00a\xd8\x00\x00b\x00"), "UTF-16-BE"),
           d(_s(tf, "a😀".encode("utf-32-be") + b"\x00\x11\x00\x00"), "UTF-32-BE"), d(_s(tf, ""), "UTF-8")]
    batch = d(_s(tf, ["héllo".encode(), b"", b"ab\xffc"]), "UTF-8")
    matrix = d(_s(tf, [["a", "bc"], ["dé", "f"]]), "UTF-8")
    return (out, [_rt(r) for r in batch], [_rt(r) for r in matrix],
            _rt(tf.strings.unicode_decode(_s(tf, ["ab", "☃"]), "UTF-8")),
            raises(d, _s(tf, bad), "UTF-8", errors="strict"), raises(d, _s(tf, "ab"), "UTF-8", replacement_char=0x110000),
            raises(d, _s(tf, "ab"), "UTF-8", replacement_char=-1), raises(d, _s(tf, "ab"), "Latin-Nonsense"))


@parity(x64=True)
def test_unicode_split_with_offsets(tf):
    """Each character's UTF-8 bytes and where it starts in the input: UTF-8, UTF-16-BE (offsets
    count the input's bytes), replaced and ignored invalid bytes, an empty string."""
    sp = tf.strings.unicode_split_with_offsets
    cases = [sp(_s(tf, "héllo"), "UTF-8"), sp(_s(tf, b"a\xffb\xc3"), "UTF-8"),
             sp(_s(tf, b"a\xffb\xc3"), "UTF-8", replacement_char=63), sp(_s(tf, b"a\xffb\xc3"), "UTF-8", errors="ignore"),
             sp(_s(tf, "☃x".encode("utf-16-be")), "UTF-16-BE"), sp(_s(tf, ""), "UTF-8")]
    return [(_py(c), o) for c, o in cases] + [raises(sp, _s(tf, b"\xff"), "UTF-8", errors="strict")]


@parity
def test_unicode_script_of_decoded_text_in_a_dataset_map(tf):
    """A text pipeline keeps the Latin characters of each line: decode, script codes, mask."""
    lines = ["héllo мир", "日本 abc"]

    def latin(s):
        cps = tf.strings.unicode_decode(s, "UTF-8")
        return tf.boolean_mask(cps, tf.equal(tf.strings.unicode_script(cps), 25))
    ds = tf.data.Dataset.from_tensor_slices(lines).map(latin)
    return [e.tolist() for e in ds.as_numpy_iterator()]


# -- tf.lookup.experimental.DenseHashTable -------------------------------------------------------

@parity(x64=True)
def test_dense_hash_table_buckets(tf):
    """Insert, update, erase, insert again (a deleted bucket reused: the key stands twice, as in
    TF), growth past the load factor; lookup, size and export bucket for bucket; int64 keys
    (large and negative), vector keys and values, int32 keys, string keys, bool values."""
    D = tf.lookup.experimental.DenseHashTable
    k64 = lambda v: tf.constant(v, tf.int64)  # noqa: E731
    t = D(tf.int64, tf.float32, default_value=-1.0, empty_key=0, deleted_key=-1, initial_num_buckets=8)
    out = [t.size(), t.key_dtype.name, t.value_dtype.name, t.name]
    t.insert(k64([1, 9, 17, 2]), tf.constant([1., 2., 3., 4.]))
    out += [_export(t), t.size()]
    t.erase(k64([9, 100]))
    out += [_export(t), t.size()]
    t.insert(k64([17, 25]), [5., 6.])
    out += [_export(t), t.size(), t.lookup(k64([17, 25, 9, 1])), t.lookup(k64([[17], [2]])), t.lookup(k64(25))]
    t.insert_or_assign(k64([3, 4, 5, 2**40, -3]), [7., 8., 9., 10., 11.])
    out += [_export(t), t.size(), t.lookup(k64([2**40, -3, 4]))]
    t.remove(k64([2**40]))
    out += [t.size(), t.lookup(k64([2**40]))]
    tv = D(tf.int64, tf.float32, default_value=[-1., -1.], empty_key=[0, 0], deleted_key=[-1, -1], initial_num_buckets=4)
    tv.insert(k64([[1, 2], [3, 4]]), [[1., 2.], [3., 4.]])
    out += [_export(tv), tv.lookup(k64([[1, 2], [5, 6]])), tv.lookup(k64([[[3, 4]]]))]
    t32 = D(tf.int32, tf.float32, default_value=-1., empty_key=0, deleted_key=-1, initial_num_buckets=4)
    t32.insert([5, -7], [1., 2.])
    tb = D(tf.int64, tf.bool, default_value=False, empty_key=0, deleted_key=-1, initial_num_buckets=4)
    tb.insert(k64([3]), [True])
    ts = D(tf.string, tf.float32, default_value=-1., empty_key="", deleted_key="$", initial_num_buckets=8)
    ts.insert(_s(tf, ["a", "bb", "hello", "x"]), [1., 2., 3., 4.])
    ts.erase(_s(tf, ["bb"]))
    out += [_export(t32), t32.lookup([-7, 5, 6]), tb.lookup(k64([3, 4])), _export(ts),
            ts.lookup(_s(tf, ["a", "bb", "zz"])), ts.size()]
    return out


@parity(x64=True)
def test_dense_hash_table_in_a_dataset_map(tf):
    """Ids looked up in a dataset map (the table captured by the function), then updated."""
    t = tf.lookup.experimental.DenseHashTable(tf.int64, tf.int64, default_value=0, empty_key=-1, deleted_key=-2)
    t.insert(tf.constant([10, 20, 30], tf.int64), tf.constant([1, 2, 3], tf.int64))
    ds = tf.data.Dataset.from_tensor_slices(tf.constant([[10, 99], [30, 20]], tf.int64)).map(lambda k: t.lookup(k))
    first = [e.tolist() for e in ds.as_numpy_iterator()]
    t.insert(tf.constant([99], tf.int64), tf.constant([9], tf.int64))
    return first, [e.tolist() for e in ds.as_numpy_iterator()]


@parity(x64=True)
def test_dense_hash_table_errors(tf):
    """TF's errors: empty / deleted keys equal, of other shapes, used as keys; a bad bucket count;
    shapes of keys and values that do not fit; keys of another dtype; key / value dtypes with
    no kernel."""
    D = tf.lookup.experimental.DenseHashTable
    k64 = lambda v: tf.constant(v, tf.int64)  # noqa: E731
    t = D(tf.int64, tf.float32, default_value=-1.0, empty_key=0, deleted_key=-1, initial_num_buckets=4)
    t.insert(k64([1]), [1.])
    return [raises(D, tf.int64, tf.float32, default_value=-1.0, empty_key=0, deleted_key=0),
            raises(D, tf.int64, tf.float32, default_value=-1.0, empty_key=0, deleted_key=[-1, -2]),
            raises(D, tf.int64, tf.float32, default_value=[[1.]], empty_key=0, deleted_key=-1),
            raises(D, tf.int64, tf.float32, default_value=1., empty_key=[[0]], deleted_key=[[-1]]),
            raises(D, tf.int64, tf.float32, default_value=1., empty_key=0, deleted_key=-1, initial_num_buckets=12),
            raises(D, tf.int64, tf.float32, default_value=1., empty_key=0, deleted_key=-1, initial_num_buckets=2),
            raises(D, tf.int64, tf.float32, default_value="x", empty_key=0, deleted_key=-1),
            raises(D, tf.float32, tf.float32, default_value=1., empty_key=0., deleted_key=-1.),
            raises(D, tf.int64, tf.string, default_value="", empty_key=0, deleted_key=-1),
            raises(t.insert, k64([0]), [1.]), raises(t.insert, k64([-1]), [1.]), raises(t.lookup, k64([0])),
            raises(t.erase, k64([-1])), raises(t.insert, k64([1, 2]), [1.]), raises(t.insert, k64([[1]]), [1.]),
            raises(t.lookup, k64([[1, 2]])), raises(t.lookup, tf.constant([1], tf.int32)),
            raises(t.insert, k64([1]), tf.constant([1], tf.int32)), raises(t.erase, tf.constant([1], tf.int32)),
            t.size(), t.lookup(k64([1]))]


# -- tf.config.experimental ----------------------------------------------------------------------

@parity
def test_memory_info_and_usage(tf):
    """get_memory_info / get_memory_usage: the CPU has no allocator statistics (TF's ValueError
    with its default allocator), an unknown device, a name without an index, a lower-case type
    and a number are TF's errors."""
    e = tf.config.experimental
    return [raises(f, d) for f in (e.get_memory_info, e.get_memory_usage)
            for d in ("CPU:0", "/device:CPU:0", "GPU:0", "CPU:1", "bogus", "CPU", "cpu:0")] + [
        raises(e.get_memory_info, 3)]


# -- tf.sparse.cross / cross_hashed over strings --------------------------------------------------

def _sp(x):
    """A SparseTensor as (indices, values, dense_shape), string values as Python bytes."""
    return x.indices, _py(x.values) if x.dtype.name == "string" else x.values, x.dense_shape


@parity(x64=True)
def test_sparse_cross_of_strings_and_integers(tf):
    """String and integer SparseTensors with several features per row, dense string / integer /
    float / bool inputs (the SparseTensors cross first, whatever the list's order, as TF's op),
    a separator, a row with no feature (no cross), large and negative ints;
    cross_hashed of the same inputs."""
    st = tf.sparse.SparseTensor([[0, 0], [1, 0], [1, 1]], ["a", "b", "c"], [2, 2])
    si = tf.sparse.SparseTensor([[0, 0], [1, 0]], tf.constant([7, 8], tf.int64), [2, 1])
    gap = tf.sparse.SparseTensor([[1, 0]], ["only"], [2, 1])
    d = _s(tf, [["x"], ["y"]])
    di = tf.constant([[1, 2], [3, 4]])
    c, h = tf.sparse.cross, tf.sparse.cross_hashed
    return [_sp(x) for x in (
        c([st, d]), c([d, st]), c([di, si, st]), c([st, si], separator="#"), c([st, gap]),
        c([st, tf.constant([[1.5], [-2.7]])]), c([st, tf.constant([[True], [False]])]),
        c([st, tf.constant([[-3], [2**40]], tf.int64)]), c([st]), c([d, di]),
        c([st, tf.sparse.SparseTensor([[0, 0]], [1.5], [2, 1])]),
        h([st, d, si], num_buckets=100), h([d, st]), h([st, gap, di], num_buckets=7, hash_key=5))] + [
        _py(tf.sparse.to_dense(c([st, d, di]))), list(tf.sparse.to_dense(c([st, si])).shape)]


@parity(x64=True)
def test_string_sparse_tensors_and_cross_errors(tf):
    """A string SparseTensor: dtype, to_dense (``b""`` or a given default; unordered indices are
    TF's error), from_dense of strings; cross's errors: not a list, a Python list input, a dense
    vector, batch sizes that differ, a rank-3 SparseTensor, a separator that is no string."""
    st = tf.sparse.SparseTensor([[0, 0], [1, 0], [1, 1]], ["a", "b", "c"], [2, 2])
    d = _s(tf, [["x"], ["y"]])
    c = tf.sparse.cross
    fd = tf.sparse.from_dense(_s(tf, [["a", ""], ["", "b"]]))
    return [st.dtype.name, _py(tf.sparse.to_dense(st)), _py(tf.sparse.to_dense(st, default_value="z")),
            _sp(fd), _py(tf.sparse.to_dense(fd)),
            raises(tf.sparse.to_dense, tf.sparse.SparseTensor([[1, 0], [0, 0]], ["q", "r"], [2, 1])),
            raises(tf.sparse.to_dense, st, default_value=5),
            raises(c, st), raises(c, [st, [["x"], ["y"]]]), raises(c, [st, _s(tf, ["x", "y"])]),
            raises(c, [st, _s(tf, [["x"]])]), raises(c, [st, tf.sparse.SparseTensor([[0, 0]], ["q"], [3, 1])]),
            raises(c, [st, tf.sparse.SparseTensor([[0, 0, 0]], ["q"], [2, 1, 1])]), raises(c, [st, d], separator=5),
            raises(tf.sparse.cross_hashed, [st, _s(tf, ["x", "y"])], num_buckets=5)]


@parity(x64=True)
def test_ragged_cross_hashed(tf):
    """tf.ragged.cross_hashed keeps the inputs' order (unlike tf.sparse's): RaggedTensors, dense
    integer / string inputs and SparseTensors; a rank-3 RaggedTensor is TF's ValueError."""
    r = tf.ragged.constant([[1, 2], [3]], tf.int64)
    d = tf.constant([[7], [8]], tf.int64)
    st = tf.sparse.SparseTensor([[0, 0], [1, 0]], tf.constant([5, 6], tf.int64), [2, 1])
    strs = tf.sparse.SparseTensor([[0, 0], [0, 1], [1, 0]], ["a", "b", "c"], [2, 2])
    h = tf.ragged.cross_hashed
    return [_rt(x) for x in (h([r, d], num_buckets=100), h([d, r], num_buckets=100), h([st, r], num_buckets=100),
                             h([r, st], num_buckets=100), h([strs, d], num_buckets=100), h([r, _s(tf, [["x"], ["y"]])]),
                             h([tf.ragged.constant([[1, 2], [3]], tf.int32), d], num_buckets=9, hash_key=3))] + [
        raises(h, [tf.ragged.constant([[[1], [2]], [[3]]], tf.int64), d], num_buckets=100)]
