"""Dataset functions over string components and the host string ops, against real tf.data:
CIFAR-10's binary format decoded in a ``map`` (``tf.io.decode_raw``, slicing, reshape,
transpose, cast) and a model trained on it; text lines through ``tf.strings`` (split, length,
strip, lower / upper, regex_full_match, substr, join, to_number); ``tf.io.decode_csv`` over
``TextLineDataset`` lines; ``filter`` with a string predicate; element specs; bad input.  On
the main branch before this change every ``map`` / ``filter`` here raised TypeError."""
import os

from .data_helpers import L, cifar_like_files, fit_and_evaluate, spec, tmp
from .harness import parity, raises

C, H, W = 3, 4, 4
RECORD = 1 + C * H * W
TEXT = ["The quick brown fox", "  jumps over  ", "", "the LAZY dog 42", "a,b,,c"]
CSV = ["1,alpha,2.5", "2,,3.25", "3,gamma,", "4,\"de,lta\",1e3"]


def _text_file(lines):
    name = os.path.join(tmp(), "lines.txt")
    with open(name, "w") as f:
        f.write("\n".join(lines) + "\n")
    return name


def _parse(tf):
    def parse(record):
        raw = tf.io.decode_raw(record, tf.uint8)
        label = tf.cast(raw[0], tf.int32)
        image = tf.transpose(tf.reshape(raw[1:], [C, H, W]), [1, 2, 0])
        return tf.cast(image, tf.float32) / 255.0, label
    return parse


@parity
def test_cifar_records_decoded_in_map(tf):
    names = cifar_like_files(C, H, W, records=20, seed=1)
    ds = tf.data.FixedLengthRecordDataset(names, RECORD)
    raw = ds.map(lambda r: tf.io.decode_raw(r, tf.uint8))
    parsed = ds.map(_parse(tf))
    sliced = ds.map(lambda r: (tf.io.decode_raw(r, tf.uint8)[0], tf.io.decode_raw(tf.strings.substr(r, 1, RECORD - 1), tf.int16)))
    batched = ds.batch(6).map(lambda r: tf.io.decode_raw(r, tf.uint8))
    return (spec(raw.element_spec), spec(parsed.element_spec), spec(sliced.element_spec),
            spec(batched.element_spec), L(raw.take(3)), L(parsed.batch(7)), L(sliced.take(2)), L(batched.take(2)))


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_program_cifar_binary_pipeline_trains(tf):
    """CIFAR-10's reader as TF users write it: records -> decode_raw -> label and image -> batch,
    a softmax classifier trained by a compiled step, evaluated after each epoch."""
    names = cifar_like_files(C, H, W, records=20, seed=1)
    train = tf.data.FixedLengthRecordDataset(names, RECORD).map(_parse(tf)).batch(8)
    evaluation = tf.data.FixedLengthRecordDataset(names[:1], RECORD).map(_parse(tf)).cache().batch(16)
    return fit_and_evaluate(tf, train, evaluation, H * W * C)


@parity
def test_text_lines_through_string_ops(tf):
    lines = tf.data.TextLineDataset(_text_file(TEXT))
    words = lines.map(lambda line: tf.strings.split(line))
    commas = lines.map(lambda line: tf.strings.split(line, ","))
    feats = lines.map(lambda line: {"n": tf.strings.length(line), "low": tf.strings.lower(tf.strings.strip(line)),
                                    "up": tf.strings.upper(line), "digit": tf.strings.regex_full_match(line, ".*[0-9]+"),
                                    "head": tf.strings.substr(line, 0, 3),
                                    "tagged": tf.strings.join(["<", line, ">"], separator="|")})
    counts = lines.map(lambda line: tf.size(tf.strings.split(line))).batch(2)
    chars = lines.take(1).map(lambda line: tf.strings.bytes_split(line))
    numbers = tf.data.experimental.from_list(["1.5", "-2", "3e2"]).map(lambda s: tf.strings.to_number(s))
    ints = tf.data.experimental.from_list(["7", "-8"]).map(lambda s: tf.strings.to_number(s, tf.int32) * 2)
    return (spec(words.element_spec), spec(commas.element_spec), spec(feats.element_spec),
            spec(counts.element_spec), spec(chars.element_spec), L(words), L(commas), L(feats), L(counts), L(chars),
            L(numbers), L(ints))


@parity
def test_filter_on_a_string_predicate(tf):
    lines = tf.data.TextLineDataset(_text_file(TEXT))
    long = lines.filter(lambda line: tf.strings.length(line) > 4)
    digits = lines.filter(lambda line: tf.strings.regex_full_match(line, ".*[0-9].*"))
    return spec(long.element_spec), L(long), L(digits), L(long.map(lambda line: tf.strings.length(line)))


@parity
def test_decode_csv_over_text_lines(tf):
    lines = tf.data.TextLineDataset(_text_file(CSV))
    rows = lines.map(lambda line: tf.io.decode_csv(line, [[0], ["none"], [-1.0]]))
    picked = lines.map(lambda line: tf.io.decode_csv(line, [[0], [0.0]], select_cols=[0, 2], na_value=""))
    batched = lines.batch(3).map(lambda recs: tf.io.decode_csv(recs, [[0], [""], [0.0]]))
    return (spec(rows.element_spec), spec(picked.element_spec), spec(batched.element_spec), L(rows), L(picked),
            L(batched))


@parity
def test_string_ops_eagerly(tf):
    return ([v.numpy() if hasattr(v, "numpy") else v for v in (
        tf.io.decode_raw(b"\x01\x02\x03\x04", tf.uint8), tf.io.decode_raw([b"abcd", b"efgh"], tf.int16),
        tf.io.decode_raw([b"abcd", b"efgh"], tf.int16, little_endian=False),
        tf.io.decode_raw([b"ab", b"abcd"], tf.uint8, fixed_length=3), tf.io.decode_raw(b"abcdefgh", tf.float32),
        tf.strings.length([b"ab", b"", b"h\xc3\xa9"]), tf.strings.length(b"h\xc3\xa9", unit="UTF8_CHAR"),
        tf.strings.split(b" a  b c "), tf.strings.split(b"a b c", maxsplit=1), tf.strings.strip([b" x ", b"y\n"]),
        tf.strings.substr(b"hello", -3, 2), tf.strings.join([[b"a", b"c"], [b"b", b"d"]]),
        tf.strings.reduce_join([b"a", b"b"], separator=","), tf.strings.as_string(tf.constant([1.5, 2.0])),
        tf.strings.as_string(tf.constant([3, -4])), tf.strings.as_string(tf.constant(1.25), precision=1))]
        + [list(map(lambda t: t.numpy() if hasattr(t, "numpy") else t, tf.io.decode_csv([b"1,a,2.5", b"3,,"], [[0], ["x"], [0.0]])))])


@parity
def test_string_ops_bad_input(tf):
    lines = tf.data.TextLineDataset(_text_file(["ab", "abc"]))
    odd = lines.map(lambda r: tf.io.decode_raw(r, tf.int16))
    bad_csv = lines.map(lambda r: tf.io.decode_csv(r, [[0]]))
    return (raises(tf.io.decode_raw, b"abc", tf.int32), raises(tf.io.decode_raw, [b"abcd", b"abcdefgh"], tf.int32),
            raises(tf.io.decode_csv, b"1,2", [[0]]), raises(tf.io.decode_csv, b"x", [[0]]),
            raises(tf.io.decode_csv, b",", [[0], [0]]), raises(tf.strings.to_number, b"x"),
            raises(tf.strings.to_number, b"1.5", tf.int32), raises(tf.strings.substr, b"hello", 7, 2),
            raises(L, odd), raises(L, bad_csv))


@parity
def test_string_slices_and_tensors(tf):
    """``from_tensor_slices`` / ``from_tensors`` over Python strings, bytes, NumPy string arrays
    and dicts mixing strings and numbers (on the main branch before this change: TypeError)."""
    import numpy as np
    names = tf.data.Dataset.from_tensor_slices(["a.txt", "bb.txt", "ccc.txt"])
    pairs = tf.data.Dataset.from_tensor_slices((np.array(["x", "yy", "zzz"]), [1, 2, 3]))
    rows = tf.data.Dataset.from_tensor_slices([[b"a", b"b"], [b"c", b"d"]])
    feats = tf.data.Dataset.from_tensor_slices({"text": np.array([b"p", b"qq"], dtype=object),
                                                "w": np.array([0.5, 1.5], np.float32)})
    one = tf.data.Dataset.from_tensors(("hello", [b"u", b"v"]))
    lengths = pairs.map(lambda s, n: tf.strings.length(s) + n)
    return (spec(names.element_spec), spec(pairs.element_spec), spec(rows.element_spec), spec(feats.element_spec),
            spec(one.element_spec), spec(lengths.element_spec), L(names), L(pairs), L(rows), L(feats), L(one),
            L(lengths), L(pairs.batch(2)), L(names.repeat(2).skip(2).take(3)),
            L(tf.data.Dataset.zip((names, pairs)).take(2)))


@parity
def test_file_names_interleaved_into_readers(tf):
    """The common input pipeline: a list of file names -> ``interleave`` of ``TextLineDataset`` s
    -> string ops -> batch."""
    files = []
    for k in range(3):
        name = os.path.join(tmp(), f"part{k}.txt")
        with open(name, "w") as f:
            f.write("\n".join(f"{k} line {i}" for i in range(4 + k)) + "\n")
        files.append(name)
    lines = tf.data.Dataset.from_tensor_slices(files).interleave(lambda f: tf.data.TextLineDataset(f), cycle_length=2,
                                                                   block_length=2)
    words = lines.map(lambda line: tf.size(tf.strings.split(line))).batch(4)
    return spec(lines.element_spec), L(lines), L(words)


@parity
def test_string_slices_bad_input(tf):
    return (raises(lambda: tf.data.Dataset.from_tensor_slices("abc")),
            raises(lambda: tf.data.Dataset.from_tensor_slices((["a", "b"], [1, 2, 3]))),
            raises(lambda: tf.data.Dataset.from_tensor_slices(["a", 1])))


@parity
def test_tf_string_names_string_data(tf):
    """``tf.string`` where TF programs write it: ``FixedLenFeature`` s of a TFRecord pipeline,
    ``from_generator`` 's ``output_signature`` / ``output_types``, ``CsvDataset`` defaults (on the
    main branch before this change ``tf.string`` raised UnsupportedError)."""
    path = os.path.join(tmp(), "items.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(5):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"item{i}".encode()])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i + 0.5]))})).SerializeToString())
    features = {"name": tf.io.FixedLenFeature([], tf.string), "x": tf.io.FixedLenFeature([2], tf.float32)}
    parsed = tf.data.TFRecordDataset([path]).map(lambda r: tf.io.parse_single_example(r, features)).batch(2)
    gen = tf.data.Dataset.from_generator(lambda: iter([("a", 1), ("bc", 2)]),
                                         output_signature=(tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int32)))
    typed = tf.data.Dataset.from_generator(lambda: iter([[b"x", b"y"]]), output_types=tf.string, output_shapes=[2])
    csv = os.path.join(tmp(), "rows.csv")
    with open(csv, "w") as f:
        f.write("1,a\n2,b\n")
    rows = tf.data.experimental.CsvDataset(csv, [tf.int32, tf.string])
    return (tf.string.name, tf.as_dtype("string").name, tf.dtypes.string == tf.string, tf.string.is_numeric if hasattr(
        tf.string, "is_numeric") else None, spec(parsed.element_spec), L(parsed), spec(gen.element_spec), L(gen),
        spec(typed.element_spec), L(typed), spec(rows.element_spec), L(rows),
        raises(lambda: L(tf.data.Dataset.from_generator(lambda: iter([1.5]), output_signature=tf.TensorSpec(
            [], tf.string)))))
