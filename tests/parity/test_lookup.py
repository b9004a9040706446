"""``tf.lookup`` tables, ``tf.strings.to_hash_bucket_fast`` and ``tf.fingerprint`` under TF and
tapejax.  String keys are host strings in tapejax: a direct lookup passes TF a string Tensor and
tapejax a NumPy array of bytes (``_s``); the pipelines are the same code on both sides."""
import os
import tempfile

import numpy as np

from .harness import parity, raises


def _s(tf, values):
    """String keys as each side holds them."""
    if tf.__name__.startswith("tensorflow"):
        return tf.constant(values)
    return np.array([v.encode() if isinstance(v, str) else v for v in np.ravel(values)], object).reshape(np.shape(values))


def _vocab():
    d = tempfile.mkdtemp(prefix="lookup_parity_")
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("emerson\nlake\npalmer\n")
    with open(os.path.join(d, "kv.tsv"), "w") as f:
        f.write("a\t1\nb\t2\nc\t3\n")
    return os.path.join(d, "vocab.txt"), os.path.join(d, "kv.tsv")


@parity(x64=True)
def test_static_hash_table_with_string_keys(tf):
    """Values, the default for a missing key, any shape, ``table[keys]``, size, export (sorted
    here: the order is each table's), string values, TF's errors."""
    init = tf.lookup.KeyValueTensorInitializer(["a", "b", "c"], [7, 8, 9])
    tab = tf.lookup.StaticHashTable(init, default_value=-1)
    keys, values = tab.export()
    vt = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["x", "y"], ["X", "Y"]), "?")
    sv = vt.lookup(_s(tf, ["y", "n"]))
    return (init.key_dtype.name, init.value_dtype.name, tab.key_dtype.name, tab.value_dtype.name,
            tab.lookup(_s(tf, ["a", "z", "c"])), tab.lookup(_s(tf, [["a"], ["b"]])), tab.lookup(_s(tf, "b")),
            tab[_s(tf, ["c"])], tab.size(), tab.default_value,
            sorted(zip(np.asarray(keys).tolist(), np.asarray(values).tolist())),
            [bytes(v) for v in np.asarray(getattr(sv, "numpy", lambda: sv)())],
            raises(tab.lookup, tf.constant([1])),
            raises(lambda: tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["a", "a"], [1, 2]), -1)),
            tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["a", "a"], [1, 1]), -1).size(),
            raises(tf.lookup.StaticHashTable, init, default_value="x"),
            raises(tf.lookup.StaticHashTable, init, default_value=-1.5))


@parity
def test_static_hash_table_with_integer_keys_eager_and_compiled(tf):
    """Integer keys: values and default eagerly and inside tf.function; a key of another dtype is
    TypeError."""
    tab = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer([1, 2, 3], [0.5, 1.5, 2.5]), 0.0)
    f = tf.function(lambda x: tab.lookup(x) * 2.0)
    empty = tf.lookup.KeyValueTensorInitializer(tf.constant([], tf.int32), tf.constant([], tf.float32))
    return (tab.lookup(tf.constant([3, 5, 1])), tab.lookup(tf.constant([[2], [7]])), f(tf.constant([1, 2, 9])),
            raises(tf.lookup.StaticHashTable, empty, -1.0), raises(tab.lookup, tf.constant([3.0])))


@parity(x64=True)
def test_text_file_initializers(tf):
    """Whole lines to line numbers, key and value columns, ``vocab_size``, a missing file,
    ``vocab_size`` larger than the file."""
    vocab, kv = _vocab()
    W, N = tf.lookup.TextFileIndex.WHOLE_LINE, tf.lookup.TextFileIndex.LINE_NUMBER
    words = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(vocab, tf.string, W, tf.int64, N), -1)
    pairs = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(kv, tf.string, 0, tf.int64, 1, delimiter="\t"), -1)
    two = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(vocab, tf.string, W, tf.int64, N, vocab_size=2), -1)
    return (W, N, words.lookup(_s(tf, ["lake", "x", "palmer"])), pairs.lookup(_s(tf, ["b", "c", "z"])), two.size(),
            two.lookup(_s(tf, ["palmer"])),
            raises(lambda: tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(vocab + ".none", tf.string, W,
                                                                                  tf.int64, N), -1)),
            raises(lambda: tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(vocab, tf.string, W, tf.int64, N,
                                                                                  vocab_size=5), -1)))


@parity(x64=True)
def test_static_vocabulary_table_buckets_unknown_keys_as_tf(tf):
    """Known words get their line numbers, unknown ones TF's FarmHash buckets after the
    vocabulary; integer keys hash their decimal form, eagerly and inside tf.function; size counts
    the buckets; TF's errors."""
    vocab, _ = _vocab()
    table = tf.lookup.StaticVocabularyTable(tf.lookup.TextFileInitializer(
        vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
        num_oov_buckets=7)
    words = ["lake", "foo", "bar", "emerson", "", "a much longer unknown word of more than thirty-two bytes",
             "x" * 100, "tokenization", "palmer"]
    ints = tf.lookup.StaticVocabularyTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant([10, 20], tf.int64), tf.constant([0, 1], tf.int64)), 5)
    keys = tf.constant([20, 30, 40, -7, 123456789], tf.int64)
    return (table.lookup(_s(tf, words)), table.size(), ints.lookup(keys), tf.function(ints.lookup)(keys),
            ints.size(), raises(tf.lookup.StaticVocabularyTable, None, 0),
            raises(table.lookup, tf.constant([1])))


@parity(x64=True)
def test_hash_buckets_and_fingerprints(tf):
    """``to_hash_bucket_fast`` over strings of every length class, scalar and batch; ``fingerprint``
    of strings (rank 1 and 2), numbers and booleans; their errors."""
    words = ["", "a", "ab", "abc", "abcd", "hello world", "x" * 16, "y" * 17, "z" * 33, "w" * 64, "v" * 65, "u" * 300]
    return (tf.strings.to_hash_bucket_fast(_s(tf, words), 1000), tf.strings.to_hash_bucket_fast(_s(tf, "token"), 7),
            tf.fingerprint(_s(tf, ["ab", "c"])), tf.fingerprint(_s(tf, [["ab", "c"], ["d", "e"]])),
            tf.fingerprint(tf.constant([[1, 2], [3, 4]])), tf.fingerprint(tf.constant([1.5, 2.0])),
            tf.fingerprint(tf.constant([[True, False]])),
            raises(tf.strings.to_hash_bucket_fast, _s(tf, ["a"]), 0),
            raises(tf.fingerprint, tf.constant(3)), raises(tf.fingerprint, tf.constant([1]), method="md5"))


@parity
def test_a_text_pipeline_trains_on_vocabulary_ids(tf):
    """Lines split into tokens, looked up in a vocabulary with OOV buckets inside ``map``, padded,
    embedded and averaged; a few steps of training give TF's losses and embedding."""
    vocab, _ = _vocab()
    table = tf.lookup.StaticVocabularyTable(tf.lookup.TextFileInitializer(
        vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), 2)
    lines = ["emerson lake", "palmer", "lake lake unknown", "carl palmer emerson"]
    labels = [1.0, 0.0, 1.0, 0.0]
    ds = tf.data.Dataset.from_tensor_slices((lines, labels)).map(
        lambda s, y: (tf.cast(table.lookup(tf.strings.split(s)), tf.int32), y)).padded_batch(2, padding_values=(0, 0.0))
    emb = tf.Variable(np.linspace(-1, 1, 5 * 3).reshape(5, 3).astype(np.float32))
    w = tf.Variable(np.array([[0.5], [-0.3], [0.2]], np.float32))
    opt = tf.keras.optimizers.SGD(0.5)
    losses = []
    for _ in range(2):
        for ids, y in ds:
            with tf.GradientTape() as tape:
                h = tf.reduce_mean(tf.gather(emb, ids), axis=1)
                loss = tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(h, w), 1) - y))
            grads = tape.gradient(loss, [emb, w])
            opt.apply_gradients(zip(grads, [emb, w]))
            losses.append(loss)
    return losses, emb, w


@parity(x64=True)
def test_mutable_hash_table(tf):
    """insert / lookup / remove / size / export, a value of another dtype refused."""
    m = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=-1)
    m.insert(_s(tf, ["a", "b", "c"]), tf.constant([1, 2, 3], tf.int64))
    first = m.lookup(_s(tf, ["a", "q", "c"]))
    m.remove(_s(tf, ["a"]))
    m.insert(_s(tf, ["c"]), tf.constant([30], tf.int64))
    keys, values = m.export()
    return (first, m.lookup(_s(tf, ["a", "b", "c"])), m.size(),
            sorted(zip(np.asarray(keys).tolist(), np.asarray(values).tolist())),
            raises(m.insert, _s(tf, ["z"]), tf.constant([1.0])))
