"""Host string ops and string-input dataset functions where TF is not the oracle (TF's values:
tests/parity/test_data_strings.py): traced values refused with the way out, Tensors refused,
batched splits refused (TF's result is ragged), the spec inference's rules, key functions."""
import numpy as np
import pytest

import tapejax as tf
from tapejax.data.hostops import TracedStringError
from tapejax.ops.unsupported import UnsupportedError

D = tf.data.Dataset


def test_string_ops_on_a_traced_value_name_the_alternative():
    @tf.function
    def f(x):
        return tf.io.decode_raw(x, tf.uint8)

    with pytest.raises(TracedStringError, match="traced value.*tf.data map"):
        f(tf.constant([1, 2]))

    @tf.function
    def g(x):
        return tf.strings.as_string(x)

    with pytest.raises(TypeError, match="traced value"):
        g(tf.constant(1.0))


def test_string_ops_refuse_tensors_and_non_strings():
    with pytest.raises(TypeError, match="no string tensors"):
        tf.strings.length(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="must be strings"):
        tf.strings.upper(5)
    with pytest.raises(TypeError, match="RaggedTensor"):
        tf.strings.split([b"a b", b"c"])
    with pytest.raises(TypeError, match="out_type"):
        tf.strings.to_number(b"1", tf.bool)
    with pytest.raises(UnsupportedError, match="integer ids"):
        tf.strings.unicode_normalize   # noqa: B018 - the attribute access raises (not a TF name either)


def test_str_and_unicode_arrays_are_utf8_bytes():
    assert tf.strings.upper("é a") == "é A".encode()
    assert tf.strings.upper("é", encoding="utf-8") == "É".encode()
    assert tf.strings.length(np.array(["ab", "c"])).numpy().tolist() == [2, 1]


def test_map_over_strings_runs_eagerly_and_infers_the_spec():
    ds = tf.data.experimental.from_list([b"\x01\x02\x03\x04", b"\x05\x06\x07\x08"])
    raw = ds.map(lambda r: tf.io.decode_raw(r, tf.uint8))
    assert raw._fn.eager and "string components" in raw._fn.eager_reason
    assert raw.element_spec.shape == (None,)
    fixed = ds.map(lambda r: tf.reshape(tf.io.decode_raw(r, tf.uint8), [2, 2]))
    assert fixed.element_spec.shape == (2, 2)
    assert [x.tolist() for x in fixed.as_numpy_iterator()] == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    batched = ds.batch(2).map(lambda r: tf.io.decode_raw(r, tf.uint8)[:, :2])
    assert batched.element_spec.shape == (None, 2)


def test_map_over_strings_mixed_with_numbers_and_string_outputs():
    ds = D.zip((tf.data.experimental.from_list([b"a", b"bb"]), D.range(2)))
    out = ds.map(lambda s, i: (tf.strings.join([s, tf.strings.as_string(i)]), tf.strings.length(s) + tf.cast(i, tf.int32)))
    assert [out_i for out_i in out.as_numpy_iterator()] == [(b"a0", 1), (b"bb1", 3)]
    assert out.element_spec[0].dtype.name == "string"


def test_numeric_function_with_a_string_output_runs_eagerly():
    out = D.range(3).map(lambda i: tf.strings.as_string(i))
    assert out._fn.eager
    assert list(out.as_numpy_iterator()) == [b"0", b"1", b"2"]


def test_key_function_over_strings():
    ds = tf.data.experimental.from_list([b"a", b"bb", b"cc", b"d"])
    grouped = ds.group_by_window(lambda s: tf.cast(tf.strings.length(s), tf.int64),
                                 lambda k, w: w.batch(4), window_size=4)
    assert sorted(b.tolist() for b in grouped.as_numpy_iterator()) == [[b"a", b"d"], [b"bb", b"cc"]]


def test_spec_inference_reads_no_shuffle_draw():
    ds = tf.data.experimental.from_list([b"ab", b"cd", b"ef"]).shuffle(3, seed=1)
    before = list(ds.as_numpy_iterator())
    ds2 = tf.data.experimental.from_list([b"ab", b"cd", b"ef"]).shuffle(3, seed=1)
    mapped = ds2.map(lambda s: tf.strings.upper(s))
    assert list(mapped.as_numpy_iterator()) == [s.upper() for s in before]


def test_decode_raw_and_csv_arguments():
    with pytest.raises(tf.errors.InvalidArgumentError, match="multiple"):
        tf.io.decode_raw(b"abcd", tf.int32, fixed_length=3)
    with pytest.raises(TypeError, match="out_type"):
        tf.io.decode_raw(b"ab", tf.uint32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="field_delim"):
        tf.io.decode_csv(b"1", [[0]], field_delim=";;")
    assert tf.io.decode_raw([], tf.uint8).shape == (0, 0)
