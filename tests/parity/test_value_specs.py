"""What a compiled step takes besides tensors: a TensorArray as an argument and a result
(``compile/tensor_array_args.py``), ``TensorArraySpec``, ``tf.data.DatasetSpec`` /
``IteratorSpec`` (``data/structure.py``), ``tf.type_spec_from_value`` (``compile/type_spec.py``) and
these specs in ``input_signature``."""
import numpy as np

from .harness import parity, raises


def _ta(tf, values):
    return tf.TensorArray(tf.float32, size=len(values)).unstack(np.asarray(values, np.float32))


# ---------------------------------------------------------------------------
# a TensorArray through the function boundary
# ---------------------------------------------------------------------------

@parity(modes=True)
def test_tensor_array_argument_is_read_inside(tf):
    f = tf.function(lambda ta, i: (ta.stack() * 2.0, ta.read(i), ta.size()))
    return f(_ta(tf, [1.0, 2.0]), 1), f(_ta(tf, [5.0, 6.0]), 0)


@parity(deliberate="TF's eager TensorArray captured by a tf.function cannot be read at a symbolic index "
                   "(OperatorNotAllowedInGraphError); tapejax's argument is a buffer in the program",
        tapejax_expected=(14.0, 3.0))
def test_tensor_array_argument_in_a_loop_inside(tf):
    @tf.function
    def total(ta):
        s = tf.constant(0.0)
        for i in tf.range(ta.size()):
            s += ta.read(i) * tf.cast(i + 1, tf.float32)
        return s
    r = raises(lambda: (float(total(_ta(tf, [1.0, 2.0, 3.0]))), float(total(_ta(tf, [0.5, 0.5, 0.5])))))
    return r.value if hasattr(r, "value") else r.name


@parity(deliberate="TF keys an eager TensorArray argument by identity and keeps the values of its first "
                   "trace (a stale value); tapejax stacks it at each call",
        tapejax_expected=([1.0, 0.0], [1.0, 7.0]))
def test_tensor_array_written_between_calls(tf):
    f = tf.function(lambda ta: ta.stack())
    ta = tf.TensorArray(tf.float32, size=2).write(0, 1.0)
    first = f(ta).numpy().tolist()
    ta = ta.write(1, 7.0)
    return first, f(ta).numpy().tolist()


@parity(deliberate="TF cannot write an eager TensorArray argument in a tf.function (NotImplementedError) nor "
                   "return one to an eager caller (it gets a variant tensor); tapejax returns a TensorArray",
        tapejax_expected=([1.0, 0.0, 3.0], 3, [4.0, 5.0]))
def test_tensor_array_written_inside_and_returned(tf):
    f = tf.function(lambda ta: ta.write(2, 3.0))

    @tf.function
    def made():
        return tf.TensorArray(tf.float32, size=0, dynamic_size=True).write(0, 4.0).write(1, 5.0)

    def run():
        r = f(tf.TensorArray(tf.float32, size=3).write(0, 1.0))
        return r.stack().numpy().tolist(), int(r.size()), made().stack().numpy().tolist()
    out = raises(run)
    return out.value if hasattr(out, "value") else out.name


@parity
def test_tensor_array_argument_stacks_with_element_shape(tf):
    f = tf.function(lambda ta: tf.reduce_sum(ta.stack(), axis=0))
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[2]).unstack(np.arange(6, dtype=np.float32).reshape(3, 2))
    return f(ta), ta.element_shape.as_list()


# ---------------------------------------------------------------------------
# TensorArraySpec and tf.type_spec_from_value
# ---------------------------------------------------------------------------

@parity
def test_tensor_array_spec_record(tf):
    s = tf.TensorArraySpec([2], tf.float32)
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[2])
    return (repr(s), repr(tf.TensorArraySpec()), s == tf.TensorArraySpec([2]), hash(s) == hash(tf.TensorArraySpec([2])),
            s.is_compatible_with(tf.TensorArraySpec([None], tf.float32)), s.is_compatible_with(tf.TensorArraySpec([3])),
            s.is_compatible_with(tf.TensorArraySpec([2], tf.int32)), s.is_compatible_with(ta),
            repr(tf.TensorArraySpec.from_value(ta)), s.value_type is tf.TensorArray)


@parity
def test_tensor_array_spec_bad_arguments(tf):
    return raises(tf.TensorArraySpec.from_value, tf.constant(1.0)), raises(tf.TensorArraySpec, "x")


@parity
def test_type_spec_from_value(tf):
    ta = tf.TensorArray(tf.float32, size=2, dynamic_size=True)
    return (repr(tf.type_spec_from_value(tf.constant([1.0, 2.0]))), repr(tf.type_spec_from_value([1, 2])),
            repr(tf.type_spec_from_value(3.0)), repr(tf.type_spec_from_value(np.zeros((2, 3), np.float32))),
            repr(tf.type_spec_from_value(ta)), raises(tf.type_spec_from_value, object()))


@parity(x64=True)
def test_dataset_and_iterator_specs(tf):
    ds = tf.data.Dataset.range(3).batch(2)
    it = iter(ds)
    d = tf.data.DatasetSpec(ds.element_spec)
    i = tf.data.IteratorSpec(ds.element_spec)
    return (repr(d), repr(i), repr(tf.type_spec_from_value(ds)), repr(tf.type_spec_from_value(it)),
            d == ds._type_spec, i == it._type_spec, hash(i) == hash(it._type_spec), repr(d.element_spec),
            repr(i._element_spec), d.is_compatible_with(ds._type_spec), i.is_compatible_with(it._type_spec),
            d.is_compatible_with(tf.data.DatasetSpec(tf.TensorSpec([None], tf.float32))),
            repr(tf.data.DatasetSpec.from_value(ds)), repr(tf.data.experimental.get_structure(it)))


@parity
def test_get_structure_of_a_tensor_array_is_a_type_error(tf):
    return raises(tf.data.experimental.get_structure, tf.TensorArray(tf.float32, size=2))


# ---------------------------------------------------------------------------
# the specs in input_signature
# ---------------------------------------------------------------------------

@parity(modes=True)
def test_iterator_spec_in_input_signature(tf):
    ds = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype=np.int32))
    f = tf.function(lambda it: next(it) + 1, input_signature=[tf.data.IteratorSpec(tf.TensorSpec([], tf.int32))])
    it = iter(ds)
    return [int(f(it)) for _ in range(3)], int(next(it))


@parity
def test_dataset_spec_in_input_signature(tf):
    f = tf.function(lambda d: d.cardinality(), input_signature=[tf.data.DatasetSpec(tf.TensorSpec([], tf.int32))])
    return int(f(tf.data.Dataset.from_tensor_slices(np.arange(4, dtype=np.int32))))


@parity
def test_arguments_a_value_spec_does_not_bind(tf):
    """An iterator of other dtypes: InvalidArgumentError (TF: when read); any Dataset binds a DatasetSpec
    (TF checks nothing more); a tensor: TypeError."""
    ds = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype=np.int32))
    f = tf.function(lambda it: next(it), input_signature=[tf.data.IteratorSpec(tf.TensorSpec([], tf.float32))])
    g = tf.function(lambda d: d.cardinality(), input_signature=[tf.data.DatasetSpec(tf.TensorSpec([], tf.float32))])
    return raises(f, iter(ds)), raises(lambda: int(g(ds))), raises(f, tf.constant(1.0)), raises(g, tf.constant(1.0))


@parity(deliberate="TF cannot bind an eager TensorArray to a TensorArraySpec (ValueError: the signature "
                   "'specifies 0 arguments'); tapejax passes its stacked buffer",
        tapejax_expected=[3, 2])
def test_tensor_array_spec_in_input_signature(tf):
    f = tf.function(lambda ta: ta.stack(), input_signature=[tf.TensorArraySpec([2], tf.float32)])
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[2]).unstack(np.ones((3, 2), np.float32))
    r = raises(lambda: list(f(ta).shape))
    return r.value if hasattr(r, "value") else r.name
