"""core/shape.py: ``TensorShape`` and ``Dimension`` (oracle: TF 2.21's ``tensor_shape``; the parity
programs of ``tests/parity/test_tf_mismatches15.py`` check the same against real TF)."""
import copy
import pickle

import numpy as np
import pytest

import tapejax as tf
from tapejax.core.shape import UNKNOWN_RANK, Dimension, shape_of


def test_dims_are_dimensions_and_indexing_gives_ints():
    s = tf.zeros([2, 3, 4]).shape
    d = s.dims
    assert [type(x).__name__ for x in d] == ["Dimension"] * 3 and [x.value for x in d] == [2, 3, 4]
    assert d[0] == 2 and int(d[1]) == 3 and repr(d[2]) == "Dimension(4)" and str(d[2]) == "4"
    assert (d[0] * 2).value == 4 and (d[0] + 1).value == 3 and (5 - d[0]).value == 3
    assert s[1] == 3 and type(s[1]) is int and s[-1] == 4 and repr(s[1:]) == "TensorShape([3, 4])"
    assert [type(x) for x in s] == [int, int, int] and s.rank == s.ndims == 3
    p = tf.TensorShape([None, 3])
    assert p[0] is None and [x.value for x in p.dims] == [None, 3] and str(p.dims[0]) == "?"
    assert (p.dims[0] + 1).value is None and (p.dims[0] == 3) is None
    assert tf.compat.dimension_value(d[0]) == 2 and tf.compat.dimension_value(s[0]) == 2
    assert repr(tf.compat.dimension_at_index(s, 1)) == "Dimension(3)"
    assert repr(tf.compat.dimension_at_index(tf.TensorShape(None), 1)) == "Dimension(None)"
    assert isinstance(tf.compat.v1.Dimension(3), Dimension)


def test_construction_converts_sizes():
    """Dimensions, NumPy ints and a single int become ints (TF's ``as_dimension``); the shape of a
    shape is itself; a Dimension refuses floats and negative sizes."""
    s = tf.TensorShape([Dimension(2), np.int64(3), None])
    assert [type(x) for x in s[:2]] == [int, int] and s.as_list() == [2, 3, None]
    assert tf.TensorShape(3).as_list() == [3] and tf.TensorShape(s) == s
    assert tf.TensorShape((2, 3)) == [2, 3] and shape_of((2, 3)) == (2, 3)
    assert type(shape_of((2,))) is tf.TensorShape
    with pytest.raises(TypeError):
        Dimension(1.5)
    with pytest.raises(ValueError):
        Dimension(-1)


def test_merge_compatibility_and_rank_checks():
    s = tf.TensorShape([2, 3, 4])
    p = tf.TensorShape([None, 3])
    assert s.merge_with([2, None, 4]) == [2, 3, 4] and p.merge_with([5, None]).as_list() == [5, 3]
    for other in ([3, None, 4], [3, None]):
        with pytest.raises(ValueError, match="are not compatible"):
            s.merge_with(other)
    assert s.is_compatible_with([2, None, 4]) and not s.is_compatible_with([2, 5, 4])
    assert not s.is_compatible_with([2, 3]) and s.is_compatible_with(tf.TensorShape(None))
    assert s.most_specific_compatible_shape([2, 5, 4]).as_list() == [2, None, 4]
    assert s.most_specific_compatible_shape([2, 5]) == tf.TensorShape(None)
    with pytest.raises(ValueError, match="are incompatible"):
        s.assert_is_compatible_with([2, None, 5])
    with pytest.raises(ValueError, match="must have rank 2"):
        s.assert_has_rank(2)
    with pytest.raises(ValueError, match="must have the same rank"):
        s.assert_same_rank([1, 2])
    assert p.with_rank(2) is p and tf.TensorShape(None).with_rank(2).as_list() == [None, None]
    with pytest.raises(ValueError, match="must have rank 3"):
        p.with_rank(3)
    with pytest.raises(ValueError, match="at most 1"):
        p.with_rank_at_most(1)
    with pytest.raises(ValueError, match="at least 3"):
        p.with_rank_at_least(3)
    with pytest.raises(ValueError, match="not fully defined"):
        p.assert_is_fully_defined()
    assert not p.is_fully_defined() and p.num_elements() is None and s.num_elements() == 24
    assert s.is_subtype_of(tf.TensorShape([2, None, 4])) and not tf.TensorShape([2, None, 4]).is_subtype_of(s)
    assert s.is_subtype_of(tf.TensorShape(None)) and not s.is_subtype_of([2, 3, 4])


def test_equality_truth_hash_and_text():
    s = tf.TensorShape([2, 3])
    p = tf.TensorShape([None, 3])
    assert s == [2, 3] and s == (2, 3) and s != [2, 4] and not (s == "ab") and not (s == None)  # noqa: E711
    assert p == [None, 3] and not (p != tf.TensorShape([None, 3]))
    assert bool(tf.TensorShape([])) and bool(s)   # TF: any known rank is true
    assert {s: 1}[tf.TensorShape([2, 3])] == 1
    assert str(s) == "(2, 3)" and str(tf.TensorShape([3])) == "(3,)" and repr(p) == "TensorShape([None, 3])"
    assert (p + [4]).as_list() == [None, 3, 4] and ([4] + p).as_list() == [4, None, 3]
    assert np.zeros(s).shape == (2, 3)


def test_unknown_rank():
    u = tf.TensorShape(None)
    assert u is UNKNOWN_RANK and type(u).__name__ == "TensorShape" and isinstance(u, tf.TensorShape)
    assert u.rank is None and u.ndims is None and u.dims is None and not u
    assert repr(u) == "TensorShape(None)" and str(u) == "<unknown>"
    for f, match in ((u.as_list, "as_list"), (lambda: len(u), "length"), (lambda: list(u), "iterate")):
        with pytest.raises(ValueError, match=match):
            f()
    assert u[0] is None and u[1:] is u and u[-2:] is u and u[:2].as_list() == [None, None]
    assert u[1:3].as_list() == [None, None]
    assert u == tf.TensorShape(None) and u != [None] and u == None  # noqa: E711 (TF's as_shape(None))
    assert not u.is_fully_defined() and u.num_elements() is None
    assert u.is_compatible_with([1, 2]) and u.merge_with([1, 2]).as_list() == [1, 2]
    assert tf.TensorShape([1]).merge_with(u).as_list() == [1]
    assert u.concatenate([1]) is u and tf.TensorShape([1]).concatenate(u) is u and [1] + u is u
    assert pickle.loads(pickle.dumps(u)) is u and copy.deepcopy(u) is u
    assert copy.deepcopy(tf.TensorShape([2, None])) == [2, None]
    assert tf.TensorSpec(u, tf.float32) == tf.TensorSpec(None, tf.float32)
    assert tf.TensorSpec(tf.TensorShape([None, 3])) == tf.TensorSpec([None, 3])


def test_construction_refuses_what_tf_cannot_make_a_dimension():
    """TF 2.21's ``as_dimension``: a negative size is ValueError, a float or a string TypeError (a
    shape equal to such a list is no shape: ``==`` is False, ``is_compatible_with`` raises); a scalar
    integer tensor is a size."""
    for dims, error in (([-1, 2], ValueError), ((-1, 2), ValueError), ([1.5], TypeError), ([2.0], TypeError),
                        (["a"], TypeError), ("ab", TypeError), ([np.float32(2)], TypeError)):
        with pytest.raises(error):
            tf.TensorShape(dims)
    assert not (tf.TensorShape([2]) == [2.0])
    with pytest.raises(ValueError, match="must be >= 0"):
        tf.TensorShape([2]).is_compatible_with([-1])
    assert tf.TensorShape([tf.constant(3)]).as_list() == [3]
    f = tf.function(lambda a: tf.reshape(a, tf.TensorShape([a.shape[0], 4])),
                    input_signature=[tf.TensorSpec([None, 2, 2], tf.float32)])
    assert f(tf.zeros([3, 2, 2])).shape == (3, 4) and f(tf.zeros([5, 2, 2])).shape == (5, 4)


def test_a_symbolic_size_reads_as_none_as_in_tf():
    """Under ``TensorSpec([None, 3])`` TF's static shape has an unknown first size: indexing,
    ``as_list`` and ``dims`` give None, so ``if x.shape[0] is None:`` takes the same branch as in TF
    (the program is traced once, symbolically); the shape itself still holds the size, and a
    body that needs it as a number (``int(x.shape[0])``) is traced per concrete shape."""
    seen = []

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        seen.append((x.shape[0], x.shape[-1], x.shape.as_list(), [d.value for d in x.shape.dims]))
        if x.shape[0] is None:
            return tf.reduce_sum(x, 0)
        return tf.reduce_mean(x, 0)

    np.testing.assert_allclose(f(tf.ones([5, 3])).numpy(), [5.0] * 3)
    np.testing.assert_allclose(f(tf.ones([2, 3])).numpy(), [2.0] * 3)
    assert seen == [(None, 3, [None, 3], [None, 3])] and f.experimental_get_tracing_count() == 1

    g = tf.function(lambda x: tf.reshape(x, [int(x.shape[0]) * 3]),
                    input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    assert g(tf.ones([2, 3])).shape == (6,) and g(tf.ones([4, 3])).shape == (12,)
