"""``tf.strings``' text ops on host strings (``tapejax.data.hostops_text``) under TF and tapejax:
regex_replace, format, the hash buckets, unsorted_segment_join, ngrams, the Unicode conversions;
directly (TF given string Tensors, tapejax NumPy bytes: ``_s``) and inside dataset maps (the same
code on both sides)."""
import numpy as np

from .harness import parity, raises


def _s(tf, values):
    if tf.__name__.startswith("tensorflow"):
        return tf.constant(values)
    return np.array([v.encode() if isinstance(v, str) else v for v in np.ravel(values)], object).reshape(np.shape(values))


def _py(x):
    """A string result as Python bytes / nested lists of bytes."""
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x, dtype=object).tolist() if isinstance(x, np.ndarray) else x


@parity
def test_regex_replace(tf):
    """Classes, groups in the rewrite (``\\1``, ``\\0``), first match only, empty matches, UTF-8
    text, a bad pattern."""
    rr = tf.strings.regex_replace
    return (_py(rr(_s(tf, ["Hello, World!", "a.b"]), r"[^a-z ]", "")), _py(rr(_s(tf, "aaa"), "a", "b", replace_global=False)),
            _py(rr(_s(tf, "john smith"), r"(\w+) (\w+)", r"\2 \1")), _py(rr(_s(tf, "abc"), "", "-")),
            _py(rr(_s(tf, "abc"), "b", r"[\0]")), _py(rr(_s(tf, "héllo wörld"), "ö|é", "_")),
            _py(rr(_s(tf, [["x1y22", "3"]]), r"\d+", "#")), raises(rr, _s(tf, "x"), "(", "y"))


@parity(x64=True)
def test_format_summaries(tf):
    """Scalars, vectors, summarized vectors and matrices, 3-D, booleans, float32 / float64 digits,
    nan / inf, strings, ``placeholder``, ``summarize=-1``, a count mismatch."""
    F = tf.strings.format
    return [_py(v) for v in (
        F("x={} y={}", (tf.constant(3), tf.constant([1.5, 2.0]))), F("{}", tf.range(10)),
        F("{}", tf.range(10), summarize=2), F("{}", tf.range(10), summarize=-1), F("{}", tf.range(6)),
        F("{}", tf.range(7)), F("{}", tf.reshape(tf.range(6), [2, 3])), F("{}", tf.reshape(tf.range(100), [10, 10]), summarize=2),
        F("{}", tf.reshape(tf.range(8), [2, 2, 2])), F("{}", tf.reshape(tf.range(7), [7, 1])),
        F("{}", tf.constant([True, False])), F("{}", tf.constant([1 / 3, -2.5e-7, 1e10, 123456789.0, float("nan"), float("inf"), -float("inf")])),
        F("{}", tf.constant([1 / 3], tf.float64)), F("v: {}", tf.constant(0.1) + tf.constant(0.2)),
        F("{}", tf.constant([], tf.float32)), F("{}", tf.constant([1.5], tf.float16)),
        F("a%sb", tf.constant(1), placeholder="%s"), F("{} and {}", [_s(tf, ["a", "b"]), _s(tf, "hi")]))] + [
        raises(F, "{} {}", tf.constant(1))]


@parity(x64=True)
def test_hash_buckets_and_segment_joins(tf):
    """to_hash_bucket (TF's Hash64) and to_hash_bucket_strong (SipHash) over strings of many
    lengths; unsorted_segment_join of vectors and matrices; their errors."""
    words = ["", "a", "hello", "x" * 7, "y" * 8, "z" * 9, "w" * 64, "v" * 100]
    return (tf.strings.to_hash_bucket(_s(tf, words), 1000), tf.strings.to_hash_bucket_strong(_s(tf, words), 977, [1, 2]),
            tf.strings.to_hash_bucket_strong(_s(tf, "token"), 10, [123456789, 987654321]),
            _py(tf.strings.unsorted_segment_join(_s(tf, ["a", "b", "c", "d"]), [1, 0, 1, 3], 4, separator=",")),
            _py(tf.strings.unsorted_segment_join(_s(tf, [["a", "b"], ["c", "d"], ["e", "f"]]), [1, 0, 1], 2)),
            raises(tf.strings.to_hash_bucket, _s(tf, ["a"]), 0),
            raises(tf.strings.to_hash_bucket_strong, _s(tf, ["a"]), 3, [1]))


@parity
def test_ngrams(tf):
    """Widths, several widths (a tuple of widths, not a range), separators, padding (both pads,
    one pad, ``padding_width``), short sequences preserved or not, matrices row by row."""
    ng = tf.strings.ngrams
    d = _s(tf, ["a", "b", "c", "d"])
    return [_py(v) for v in (
        ng(d, 2), ng(d, (1, 3), separator="_"), ng(_s(tf, ["a", "b"]), 3, pad_values=("<s>", "</s>"), padding_width=1),
        ng(d, 3, pad_values="#"), ng(d, (2, 3), pad_values=("L", "R")), ng(_s(tf, ["a", "b"]), 3),
        ng(_s(tf, ["a", "b"]), 3, preserve_short_sequences=True), ng(_s(tf, [["a", "b", "c"], ["d", "e", "f"]]), 2))]


@parity
def test_unicode_conversions(tf):
    """Decoding and splitting one string (with invalid bytes replaced, ignored, or strict), encoding
    code points and rows of them, transcoding to UTF-16-BE and back."""
    bad = b"ab\xffc\xc3"
    return (tf.strings.unicode_decode(_s(tf, "héllo ☃"), "UTF-8"), _py(tf.strings.unicode_split(_s(tf, "héllo"), "UTF-8")),
            tf.strings.unicode_decode(_s(tf, bad), "UTF-8"), tf.strings.unicode_decode(_s(tf, bad), "UTF-8", errors="ignore"),
            tf.strings.unicode_decode(_s(tf, bad), "UTF-8", replacement_char=63),
            raises(tf.strings.unicode_decode, _s(tf, bad), "UTF-8", errors="strict"),
            _py(tf.strings.unicode_encode(tf.constant([104, 233, 9731]), "UTF-8")),
            _py(tf.strings.unicode_encode(tf.constant([[104, 105], [233, 33]]), "UTF-8")),
            _py(tf.strings.unicode_transcode(_s(tf, ["héllo", "x"]), "UTF-8", "UTF-16-BE")),
            _py(tf.strings.unicode_transcode(tf.strings.unicode_transcode(_s(tf, "☃ ok"), "UTF-8", "UTF-32-BE"),
                                             "UTF-32-BE", "UTF-8")))


@parity
def test_a_text_cleaning_pipeline(tf):
    """A dataset map lower-cases, strips punctuation, splits, hashes tokens to buckets and counts
    characters, as a text model's input pipeline does; the same code on both sides."""
    lines = ["Hello, World!", "  Tapejax: TF's tape, on JAX.  ", "ünïcode wörds"]
    ds = tf.data.Dataset.from_tensor_slices(lines).map(
        lambda s: tf.strings.regex_replace(tf.strings.lower(tf.strings.strip(s)), r"[^\w\s]", "")).map(
        lambda s: (tf.strings.to_hash_bucket_fast(tf.strings.split(s), 50),
                   tf.size(tf.strings.unicode_split(s, "UTF-8")),
                   tf.strings.to_hash_bucket_strong(s, 13, [7, 11])))
    return [tuple(np.asarray(v).tolist() for v in e) for e in ds.as_numpy_iterator()]
