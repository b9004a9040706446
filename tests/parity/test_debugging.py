"""tf.debugging under TensorFlow and tapejax: exception classes and messages, eager and compiled.

``err(fn)`` returns ``(class name, message)``: both must match.  TF's kernel
errors carry a ``{{function_node ...}}`` prefix and a `` name: `` suffix that
``_clean`` drops; a graph error's text is reduced to its last line (TF adds
the node's Python traceback).  Where tapejax deliberately words a message
differently (its tensors print as ``tapejax.Tensor(...)``; a compiled assert
has no graph node names) the case returns the class only.
"""
import re

import numpy as np

from .harness import parity


def _clean(msg):
    msg = re.sub(r"^\{\{function_node [^}]*\}\} ", "", msg)
    msg = re.sub(r" name: $", "", msg)
    if msg.startswith("Graph execution error:"):   # TF's compiled-step error: the kernel's line
        lines = [ln for ln in msg.splitlines() if ln.strip() and not ln.startswith((" ", "\t"))]
        msg = lines[-1]
    return msg.strip()


def err(fn, *args, message=True, **kwargs):
    """(class name, cleaned message) of what ``fn`` raises; ``("returned", None)`` if nothing."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the class and message are the result
        return (type(e).__name__, _clean(str(e)) if message else None)
    return ("returned", None)


@parity
def test_binary_asserts_eager(tf):
    """assert_equal / less / greater ... : TF's eager InvalidArgumentError messages, summarize, message."""
    x = tf.constant([1., 2., 3.])
    y = tf.constant([1., 2., 4.])
    d = tf.debugging
    return [err(d.assert_equal, x, x), err(d.assert_equal, x, y), err(d.assert_equal, x, y, message="my msg"),
            err(d.assert_equal, x, y, message="m", summarize=1), err(d.assert_less, x, y),
            err(d.assert_greater, x, y), err(d.assert_less_equal, y, x), err(d.assert_greater_equal, x, y),
            err(d.assert_none_equal, x, y), err(d.assert_equal, tf.constant([[1., 1.]]), 1.),
            err(d.assert_equal, tf.range(10), tf.range(10) + 1),
            err(d.assert_equal, tf.reshape(tf.range(6), (2, 3)), tf.reshape(tf.range(6), (2, 3)) * 2),
            err(d.assert_less, tf.constant([1, 2]), tf.constant([2, 3]))]


@parity
def test_binary_asserts_bad_operands(tf):
    """A shape or dtype mismatch raises the comparison op's InvalidArgumentError."""
    x = tf.constant([1., 2., 3.])
    return [err(tf.debugging.assert_equal, x, tf.constant([1., 2.]), message=False),
            err(tf.debugging.assert_equal, x, tf.constant([1, 2, 3]), message=False)]


@parity
def test_unary_asserts_eager(tf):
    """assert_positive / negative / non_negative / non_positive: TF's messages."""
    x = tf.constant([1., 2., 3.])
    d = tf.debugging
    return [err(d.assert_positive, x - 2.), err(d.assert_negative, x), err(d.assert_non_negative, x - 2.),
            err(d.assert_non_positive, x), err(d.assert_positive, x),
            err(d.assert_positive, tf.constant([-1., 2., 3., 4.]))]


@parity
def test_assert_near(tf):
    """assert_near: 10 eps default tolerances, explicit ones, NumPy's ValueError for ints."""
    x = tf.constant([1., 2., 3.])
    return [err(tf.debugging.assert_near, x, x + 1e-7), err(tf.debugging.assert_near, x, x + 1.0, message=False),
            err(tf.debugging.assert_near, x, tf.constant([1., 2., 4.]), rtol=0.5, atol=0.),
            err(tf.debugging.assert_near, tf.constant([1, 2]), tf.constant([1, 2]))]


@parity
def test_static_asserts(tf):
    """assert_rank / _at_least / _in, assert_type, assert_scalar, assert_integer: ValueError / TypeError."""
    x = tf.constant([1., 2., 3.])
    d = tf.debugging
    return [err(d.assert_rank, x, 1), err(d.assert_rank, x, 2), err(d.assert_rank, x, 2, message="hi"),
            err(d.assert_rank, x, tf.constant(2)), err(d.assert_rank, x, [1]),
            err(d.assert_rank_at_least, x, 2), err(d.assert_rank_in, x, [0, 2]),
            err(d.assert_type, x, tf.float32), err(d.assert_type, x, tf.int32),
            err(d.assert_type, x, tf.int32, message="mm"), err(d.assert_scalar, x),
            err(d.assert_integer, x, message=False), err(d.assert_integer, tf.constant([1]))]


@parity
def test_assert_shapes(tf):
    """assert_shapes: symbols shared across tensors, explicit sizes, '...', scalars as [1], messages."""
    x = tf.constant([1., 2., 3.])
    d = tf.debugging
    return [err(d.assert_shapes, [(x, ("N",)), (tf.zeros((3, 2)), ("N", "D"))]),
            err(d.assert_shapes, [(x, ("N",)), (tf.zeros((4, 2)), ("N", "D"))]),
            err(d.assert_shapes, [(x, ("N", "D"))]), err(d.assert_shapes, [(x, (4,))]),
            err(d.assert_shapes, [(x, ())]), err(d.assert_shapes, [(tf.constant(1.), ())]),
            err(d.assert_shapes, [(tf.zeros((2, 3, 4)), ("...", 4)), (tf.zeros((5, 4)), (5, "..."))]),
            err(d.assert_shapes, [(tf.zeros((2, 3, 4)), (..., "N", 4)), (tf.zeros((3,)), ("N",))]),
            err(d.assert_shapes, [(tf.zeros((2, 3, 4)), ("*", 4)), (tf.zeros((2, 5)), ("*", 5))]),
            err(d.assert_shapes, [(tf.zeros((2, 3, 4)), (4, ...))]),
            err(d.assert_shapes, [(x, (4,))], message="mmm"),
            err(d.assert_shapes, [(tf.zeros((3, 1)), ("N", 1)), (tf.zeros((3, 5)), ("N", "D"))]),
            err(d.assert_shapes, [(x, None), (x, (".",))])]


@parity
def test_check_numerics_eager(tf):
    """check_numerics / assert_all_finite: the input back, or NaN / Inf / both; ints refused."""
    d = tf.debugging
    x = tf.constant([1., 2.])
    return [d.check_numerics(x, "ok"), d.assert_all_finite(x, "ok"),
            err(d.check_numerics, tf.constant([1., np.nan]), "cn msg", message=False),
            err(d.check_numerics, tf.constant([1., np.inf]), "cn msg", message=False),
            err(d.check_numerics, tf.constant([np.inf, np.nan]), "cn msg", message=False),
            err(d.assert_all_finite, tf.constant([np.nan]), "af", message=False),
            err(d.check_numerics, tf.constant([1]), "int", message=False)]


@parity
def test_assert_op(tf):
    """tf.debugging.Assert: False raises with the summarized data; True passes."""
    x = tf.constant([1., 2., 3., 4.])
    return [err(tf.debugging.Assert, True, [x]), err(tf.debugging.Assert, False, [x, "hello"]),
            err(tf.debugging.Assert, False, [x], summarize=2)]


@parity(modes=True)
def test_asserts_in_function_raise_after_the_step(tf):
    """Inside tf.function a failed assert raises InvalidArgumentError; the step's Variable updates,
    before and after the assert, are kept (TF runs the step's stateful ops, then fails)."""
    v = tf.Variable(0.)

    @tf.function
    def step(a, b):
        v.assign_add(1.)
        tf.debugging.assert_equal(a, b)
        v.assign_add(10.)
        return a + b

    ok = step(tf.constant([1., 2.]), tf.constant([1., 2.]))
    after_ok = v.numpy()
    bad = err(step, tf.constant([1., 2.]), tf.constant([1., 3.]), message=False)
    return ok, after_ok, bad, v.numpy()


@parity
def test_asserts_in_function_classes(tf):
    """Compiled: value asserts and check_numerics raise InvalidArgumentError; static ones raise
    ValueError at trace time."""
    @tf.function
    def less(x):
        tf.debugging.assert_less(x, 2.)
        return x

    @tf.function
    def near(x):
        tf.debugging.assert_near(x, 1.)
        return x

    @tf.function
    def numerics(x):
        return tf.debugging.check_numerics(x, "cn") * 2.

    @tf.function
    def rank(x):
        tf.debugging.assert_rank(x, 2)
        return x

    @tf.function
    def positive(x):
        tf.debugging.assert_positive(x)
        return x

    return [less(tf.constant([1., 1.5])), err(less, tf.constant([1., 3.]), message=False),
            err(near, tf.constant([1., 3.]), message=False), numerics(tf.constant([1., 2.])),
            err(numerics, tf.constant([1., np.nan]), message=False), err(rank, tf.constant([1., 3.]), message=False),
            err(positive, tf.constant([-1., 3.]), message=False)]


@parity
def test_check_numerics_in_function_message(tf):
    """A compiled check_numerics names the message and NaN / Inf as TF's kernel does."""
    @tf.function
    def f(x):
        return tf.debugging.check_numerics(x, "step loss")

    return [err(f, tf.constant([1., np.nan])), err(f, tf.constant([np.inf, 1.])),
            err(f, tf.constant([np.inf, np.nan]))]


def _value_checks(tf, fn):
    """Run ``fn`` with tapejax's value-check mode on (TF's CPU kernels always check)."""
    on = getattr(tf.debugging, "enable_value_checks", None)
    if on is not None:
        on()
    try:
        return fn()
    finally:
        if on is not None:
            tf.debugging.disable_value_checks()


@parity
def test_value_checks_eager(tf):
    """Value-check mode: gather, embedding_lookup, unsorted_segment_sum, inv, solve raise TF's
    InvalidArgumentError with TF's message (negative segment ids are dropped, as TF)."""
    def run():
        v = tf.Variable([1., 2., 3.])
        a = tf.constant([[1., 2.], [2., 4.]])
        return [err(tf.gather, [1., 2., 3.], [-1]), err(tf.gather, tf.constant([1., 2., 3.]), tf.constant([0, 3])),
                err(tf.gather, [1., 2., 3.], [[0, 1], [5, 1]]), err(tf.gather, [[1., 2., 3.]], [[0, 7]], axis=1),
                err(tf.gather, [[1., 2., 3.]], [[0, 7]], batch_dims=1), err(tf.gather, [1., 2., 3.], 5),
                err(tf.gather, v, [4]), err(tf.nn.embedding_lookup, v, [4]), tf.gather(v, [2, 0]),
                err(tf.math.unsorted_segment_sum, [1., 2., 3.], [0, 5, 1], 3),
                tf.math.unsorted_segment_sum([1., 2., 3.], [0, -1, 1], 3),
                err(tf.math.unsorted_segment_sum, [[1., 2.], [3., 4.]], [[0, 3], [1, 1]], 3),
                err(tf.linalg.inv, a), err(tf.linalg.inv, tf.stack([tf.eye(2), a])),
                err(tf.linalg.solve, a, tf.ones((2, 1))), tf.linalg.inv(tf.constant([[2., 0.], [0., 4.]]))]
    return _value_checks(tf, run)


@parity(modes=True)
def test_value_checks_det_gradient(tf):
    """Value-check mode: det of a singular matrix is fine, its gradient raises (TF inverts the matrix);
    at a regular matrix the gradient is TF's."""
    def grad(m):
        with tf.GradientTape() as t:
            t.watch(m)
            d = tf.linalg.det(m)
        return t.gradient(d, m)

    def run():
        a = tf.constant([[1., 2.], [2., 4.]])
        return [tf.abs(tf.linalg.det(a)), err(grad, a), grad(tf.constant([[2., 1.], [1., 3.]]))]
    return _value_checks(tf, run)


@parity
def test_value_checks_compiled(tf):
    """Value-check mode inside tf.function: the same errors, raised when the step runs."""
    def run():
        @tf.function
        def gather(p, i):
            return tf.gather(p, i)

        @tf.function
        def seg(d, i):
            return tf.math.unsorted_segment_sum(d, i, 2)

        @tf.function
        def inv(a):
            return tf.linalg.inv(a)

        @tf.function
        def det_grad(a):
            with tf.GradientTape() as t:
                t.watch(a)
                d = tf.linalg.det(a)
            return t.gradient(d, a)

        p = tf.constant([1., 2., 3.])
        sing = tf.constant([[1., 2.], [2., 4.]])
        return [gather(p, tf.constant([2])), err(gather, p, tf.constant([3])),
                err(gather, p, tf.constant([[1, 2], [0, -4]])), err(seg, tf.constant([1., 2.]), tf.constant([0, 2])),
                err(inv, sing), err(det_grad, sing), det_grad(tf.constant([[2., 1.], [1., 3.]]))]
    return _value_checks(tf, run)


@parity
def test_value_checks_integer_division_by_zero(tf):
    """Value-check mode: an integer floordiv / floormod / truncatediv / truncatemod by zero raises TF's
    InvalidArgumentError (operators, Python divisors and compiled steps too); float division gives inf."""
    def run():
        a, z = tf.constant([7, -7]), tf.constant([2, 0])

        @tf.function
        def fdiv(x, y):
            return x // y

        return [err(tf.math.floordiv, a, z), err(tf.math.floormod, a, z), err(lambda: a // z),
                err(lambda: a % 0), err(tf.truncatediv, a, z), err(tf.truncatemod, a, z),
                a // tf.constant([2, -2]), tf.math.floormod(a, 3), tf.constant([1.0]) // tf.constant([0.0]),
                err(fdiv, a, z), fdiv(a, tf.constant([3, 3]))]
    return _value_checks(tf, run)
