"""core/variable_shape.py: a Variable's declared shape (oracle: TF 2.21's ``tf.Variable(..., shape=...)``;
``core.variable`` is to call these, see the round-15b report; the parity programs of
``tests/parity/test_tf_mismatches15.py`` check Variables against real TF)."""
import pytest

import tapejax as tf
from tapejax.core.variable_shape import assign_shape_error, declared_shape


def test_declared_shape_is_kept_only_when_less_specific_than_the_value():
    assert declared_shape(None, (2, 3)) is None
    assert declared_shape([2, 3], (2, 3)) is None and declared_shape(tf.TensorShape([2, 3]), (2, 3)) is None
    assert declared_shape([None, 3], (2, 3)).as_list() == [None, 3]
    assert declared_shape((None, 3), (2, 3)).as_list() == [None, 3]
    assert declared_shape(tf.TensorShape(None), ()).rank is None
    for shape in ([None, 4], [3, 2], [None], [5]):
        with pytest.raises(ValueError, match=r"not compatible with the explicitly supplied `shape` argument \(\["):
            declared_shape(shape, (2, 3))


def test_assign_shape_error_follows_the_declared_shape():
    assert assign_shape_error("v:0", None, (2, 3), (2, 3)) is None
    err = assign_shape_error("v:0", None, (2, 3), (4,))
    assert isinstance(err, ValueError) and "variable shape (2, 3), and the assigned value shape (4,)" in str(err)
    p = tf.TensorShape([None, 3])
    assert assign_shape_error("v:0", p, (2, 3), (4, 3)) is None and assign_shape_error("v:0", p, (2, 3), (0, 3)) is None
    err = assign_shape_error("v:0", p, (2, 3), (4, 2))
    assert "variable shape (None, 3), and the assigned value shape (4, 2)" in str(err)
    assert assign_shape_error("v:0", tf.TensorShape(None), (), (5, 2)) is None


def test_declare_records_a_shape_until_the_variable_goes():
    import gc

    from tapejax.core.variable_shape import DECLARED, declare, declared
    v = tf.Variable([1.0, 2.0])
    assert declared(v) is None
    declare(v, tf.TensorShape([None]))
    assert declared(v).as_list() == [None] and declared(tf.Variable(1.0)) is None
    key = id(v)
    del v
    gc.collect()
    assert key not in DECLARED
