"""Error cases (notes/tf_facts.md): both backends must raise the same exception class.

Each case returns ``raises(...)`` results, so one case can check several
errors and a case that unexpectedly succeeds shows up as ``Returned(...)``.
``ok=`` lists a clearer class tapejax may raise instead where TF's class is an
accident of its implementation (e.g. AttributeError from ``float.dtype``).
"""

import numpy as np

from .harness import A, Raised, parity, raises

JAC = "GradientTape.jacobian"


def _square_tape(tf, persistent=False):
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=persistent)
    with t:
        t.watch(x)
        y = x * x
    return t, x, y


def _vec_tape(tf):
    x = tf.constant([1.0, 2.0, 3.0])
    t = tf.GradientTape()
    with t:
        t.watch(x)
        y = x * x
    return t, x, y


# --------------------------------------------------------------------------
# gradient() arguments
# --------------------------------------------------------------------------

@parity(expected=Raised("TypeError"))
def test_target_none_typeerror(tf):
    """gradient(None, x) raises TypeError."""
    t, x, y = _square_tape(tf)
    return raises(t.gradient, None, x)


@parity(expected=(Raised("TypeError"), Raised("TypeError")))
def test_sources_none_typeerror(tf):
    """sources=None or a None inside sources raises TypeError."""
    t, x, y = _square_tape(tf, persistent=True)
    return raises(t.gradient, y, None), raises(t.gradient, y, [x, None])


@parity(expected=(Raised("AttributeError"), Raised("AttributeError"), Raised("TypeError")))
def test_sources_not_tensors(tf):
    """sources a Python float / np.ndarray (AttributeError in TF; TypeError accepted) / a string (TypeError)."""
    t, x, y = _square_tape(tf, persistent=True)
    return (raises(t.gradient, y, 3.0, ok=("TypeError", "ValueError")),
            raises(t.gradient, y, np.array([1.0, 2.0]), ok=("TypeError", "ValueError")),
            raises(t.gradient, y, "abc", ok=("ValueError",)))


@parity(expected=(Raised("AttributeError"), Raised("AttributeError")))
def test_target_not_tensor(tf):
    """target a Python float / numpy array raises AttributeError in TF (TypeError accepted)."""
    t, x, y = _square_tape(tf, persistent=True)
    return (raises(t.gradient, 3.0, x, ok=("TypeError", "ValueError")),
            raises(t.gradient, np.array(3.0), x, ok=("TypeError", "ValueError")))


@parity(expected=tuple(Raised("ValueError") for _ in range(6)))
def test_unconnected_gradients_bad_values(tf):
    """Only 'none'/'zero' (lowercase) and the enum are accepted: 'ZERO', 'Zero', 'NONE', '', 1, None raise ValueError."""
    t, x, y = _square_tape(tf, persistent=True)
    return tuple(raises(t.gradient, y, x, unconnected_gradients=u) for u in ("ZERO", "Zero", "NONE", "", 1, None))


@parity(expected=Raised("ValueError"))
def test_output_gradients_none_inside_list(tf):
    """output_gradients=[None] raises ValueError."""
    t, x, y = _vec_tape(tf)
    return raises(t.gradient, y, x, output_gradients=[None])


@parity(expected=(Raised("ValueError"), Raised("ValueError")))
def test_output_gradients_none_for_one_of_two_targets(tf):
    """[c, None] / [None, c] for two distinct targets raise ValueError."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        y2 = x * 2.0
    c = tf.constant([1.0, 1.0, 1.0])
    return (raises(t.gradient, [y, y2], x, output_gradients=[c, None]),
            raises(t.gradient, [y, y2], x, output_gradients=[None, c]))


@parity(tf_skip="TF 2.21 aborts the process (Check failed: gradient_tensors[i] != Py_None)",
        expected=Raised("ValueError"))
def test_output_gradients_none_same_target_twice(tf):
    """[c, None] for targets [y, y]: TF aborts the whole process; tapejax must raise ValueError like the distinct case."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    return raises(t.gradient, [y, y], x, output_gradients=[tf.constant([1.0, 1.0, 1.0]), None])


@parity(expected=(Raised("InvalidArgumentError"), Raised("InvalidArgumentError")))
def test_output_gradients_wrong_shape(tf):
    """A [2] or [2,3] cotangent for a [3] target fails with InvalidArgumentError."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return (raises(t.gradient, y, x, output_gradients=tf.constant([1.0, 2.0])),
            raises(t.gradient, y, x, output_gradients=tf.constant([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])))


@parity(expected=(Raised("InvalidArgumentError"),) * 3)
def test_output_gradients_wrong_dtype(tf):
    """float64 numpy / int tensor / Python int cotangents for a float32 target: InvalidArgumentError."""
    x = tf.constant([1.0, 2.0, 3.0])
    s = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        t.watch(s)
        y = x * x
        ys = s * s
    return (raises(t.gradient, y, x, output_gradients=np.array([3.0, 4.0, 5.0])),
            raises(t.gradient, y, x, output_gradients=tf.constant([1, 2, 3])),
            raises(t.gradient, ys, s, output_gradients=2))


@parity(x64=True, expected=Raised("InvalidArgumentError"))
def test_output_gradients_float64_tensor(tf):
    """A float64 tensor cotangent for a float32 target: InvalidArgumentError (tapejax: x64 mode)."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    return raises(t.gradient, y, x, output_gradients=tf.constant([1.0, 1.0, 1.0], tf.float64))


# --------------------------------------------------------------------------
# tape lifecycle (item 9)
# --------------------------------------------------------------------------

@parity(expected=Raised("RuntimeError"))
def test_second_gradient_nonpersistent(tf):
    """A second gradient() on a used non-persistent tape raises RuntimeError."""
    t, x, y = _square_tape(tf)
    t.gradient(y, x)
    return raises(t.gradient, y, x)


@parity(needs=JAC, expected=(Raised("RuntimeError"), Raised("RuntimeError")))
def test_jacobian_after_gradient_nonpersistent(tf):
    """jacobian() after gradient() (and gradient() after jacobian()) on a non-persistent tape: RuntimeError."""
    t, x, y = _square_tape(tf)
    t.gradient(y, x)
    t2, x2, y2 = _square_tape(tf)
    t2.jacobian(y2, x2)
    return raises(t.jacobian, y, x), raises(t2.gradient, y2, x2)


@parity(expected=Raised("RuntimeError"))
def test_gradient_on_never_entered_tape(tf):
    """gradient() on a tape that was never entered raises RuntimeError."""
    x = tf.constant(3.0)
    return raises(tf.GradientTape().gradient, x, x)


@parity(expected=(Raised("RuntimeError"), Raised("RuntimeError")))
def test_second_gradient_after_gradient_inside_block(tf):
    """After gradient() inside a non-persistent block, another gradient() (inside or after) raises RuntimeError."""
    x = tf.constant(3.0)
    t = tf.GradientTape()
    with t:
        t.watch(x)
        y = x * x
        t.gradient(y, x)
        y2 = x * x * x
        inside = raises(t.gradient, y2, x)
    return inside, raises(t.gradient, y2, x)


def _enter_stop_recording(t):
    with t.stop_recording():
        pass


@parity(expected=(Raised("RuntimeError"), Raised("ValueError"), Raised("ValueError")))
def test_stop_recording_errors(tf):
    """stop_recording(): never entered -> RuntimeError; after exit -> ValueError; nested -> ValueError."""
    x = tf.constant(3.0)
    never = raises(_enter_stop_recording, tf.GradientTape())
    t = tf.GradientTape()
    with t:
        t.watch(x)
    after = raises(_enter_stop_recording, t)
    t2 = tf.GradientTape()
    with t2:
        with t2.stop_recording():
            nested = raises(_enter_stop_recording, t2)
    return never, after, nested


@parity(expected=(Raised("ValueError"), Raised("ValueError")))
def test_reset_outside_block(tf):
    """reset() on a never-entered tape and after exit raises ValueError."""
    x = tf.constant(3.0)
    never = raises(tf.GradientTape().reset)
    t = tf.GradientTape()
    with t:
        t.watch(x)
    return never, raises(t.reset)


def _reenter(t):
    with t:
        pass


@parity(expected=(Raised("ValueError"), Raised("ValueError")))
def test_reenter_active_tape(tf):
    """`with t: with t:` raises ValueError (persistent or not)."""
    t = tf.GradientTape()
    with t:
        r1 = raises(_reenter, t)
    t2 = tf.GradientTape(persistent=True)
    with t2:
        r2 = raises(_reenter, t2)
    return r1, r2


@parity(expected=(Raised("ValueError"),) * 4)
def test_watch_non_tensor(tf):
    """watch() of np.ndarray, Python float, Python int or None raises ValueError."""
    t = tf.GradientTape()
    with t:
        return (raises(t.watch, np.array([1.0, 2.0])), raises(t.watch, 1.5),
                raises(t.watch, 3), raises(t.watch, None))


# --------------------------------------------------------------------------
# constants, tensors, variables
# --------------------------------------------------------------------------

@parity(expected=(Raised("TypeError"),) * 4)
def test_constant_conflicting_dtype(tf):
    """tf.constant(1.5 / 1.0 / [1.5, 2.] , dtype=int32) and convert_to_tensor(1.5, dtype=int32): TypeError."""
    return (raises(tf.constant, 1.5, dtype=tf.int32), raises(tf.constant, 1.0, dtype=tf.int32),
            raises(tf.constant, [1.5, 2.0], dtype=tf.int32), raises(tf.convert_to_tensor, 1.5, dtype=tf.int32))


@parity(expected=(Raised("TypeError"), Raised("ValueError"), Raised("ValueError")))
def test_tensor_conversion_dtype_conflict(tf):
    """A float32 Tensor: constant(t, dtype=int32) TypeError; convert_to_tensor(t, dtype=int32/float64) ValueError."""
    t = tf.constant(1.5)
    return (raises(tf.constant, t, dtype=tf.int32), raises(tf.convert_to_tensor, t, dtype=tf.int32),
            raises(tf.convert_to_tensor, t, dtype=tf.float64))


@parity(expected=(Raised("ValueError"), Raised("ValueError")))
def test_convert_bad_python_values(tf):
    """convert_to_tensor(None) and a ragged nested list raise ValueError."""
    return raises(tf.convert_to_tensor, None), raises(tf.convert_to_tensor, [[1, 2], [3]])


@parity(expected=(Raised("ValueError"), Raised("TypeError"), Raised("TypeError"), Raised("TypeError"),
                  Raised("TypeError")))
def test_tensor_python_protocol_errors(tf):
    """bool(2x2) ValueError; len(scalar), hash(t), float(2x2), iter(scalar) TypeError."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    s = tf.constant(1.0)
    return (raises(bool, t), raises(len, s), raises(hash, t), raises(float, t), raises(iter, s))


@parity(expected=(Raised("InvalidArgumentError"), Raised("TypeError"), Raised("TypeError")))
def test_getitem_errors(tf):
    """t[5] out of range InvalidArgumentError; t[np.array([0,1])] and t[1.0] TypeError."""
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return (raises(lambda: t[5]), raises(lambda: t[np.array([0, 1])]), raises(lambda: t[1.0]))


@parity(expected=(Raised("InvalidArgumentError"),) * 3)
def test_operator_dtype_mismatch(tf):
    """No implicit promotion: int32 + 1.5, float32 + int32, float32 > int32 all InvalidArgumentError."""
    a = tf.constant([1.0, 2.0])
    ai = tf.constant([1, 2])
    return raises(lambda: ai + 1.5), raises(lambda: a + ai), raises(lambda: a > ai)


@parity
def test_an_integral_python_float_with_an_int_tensor_is_refused_too(tf):
    """``ids * 2.0``, ``ids - 1.0``, ``2.0 * ids``, ``ids == 1.0``, ``tf.maximum(ids, 0.0)``,
    ``ids + 1.0``: TF refuses every Python float next to an int tensor (TypeError, AddV2's
    InvalidArgumentError); tapejax let an integral one through and JAX promoted the result to
    float32.  A NumPy int scalar and an int with a float tensor still convert."""
    ids = tf.constant([1, 2])
    x = tf.constant([1.0, 2.0])
    return (raises(lambda: ids * 2.0), raises(lambda: ids - 1.0), raises(lambda: 2.0 * ids),
            raises(lambda: ids == 1.0), raises(tf.maximum, ids, 0.0), raises(lambda: ids + 1.0),
            raises(lambda: ids // 2.0), ids * 2, x * 2, x + np.int32(1), ids + np.int32(1))


@parity(x64=True, expected=(Raised("InvalidArgumentError"), Raised("InvalidArgumentError")))
def test_operator_float64_mismatch(tf):
    """float32 + float64 and float64 * float32 raise InvalidArgumentError (tapejax: x64 mode)."""
    a = tf.constant([1.0, 2.0])
    d = tf.constant([1.0, 1.0], tf.float64)
    return raises(lambda: a + d), raises(lambda: d * a)


@parity(expected=(Raised("InvalidArgumentError"),) * 3)
def test_op_errors(tf):
    """1-D @ 1-D, matrix @ vector, int ** negative int raise InvalidArgumentError."""
    a = tf.constant([1.0, 2.0])
    m = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    ai = tf.constant([1, 2])
    return raises(lambda: a @ a), raises(lambda: m @ a), raises(lambda: ai ** -1)


@parity(expected=(Raised("InvalidArgumentError"), Raised("InvalidArgumentError")))
def test_broadcast_incompatible(tf):
    """Incompatible shapes in add / multiply raise InvalidArgumentError."""
    a = tf.constant([1.0, 2.0, 3.0])
    b = tf.constant([1.0, 2.0])
    return raises(tf.add, a, b), raises(tf.multiply, a, b)


@parity(expected=(Raised("ValueError"), Raised("ValueError")))
def test_variable_assign_wrong_shape(tf):
    """assign of a [3] value or a scalar to a [2] Variable raises ValueError (no broadcasting)."""
    v = tf.Variable([1.0, 2.0])
    return raises(v.assign, [1.0, 2.0, 3.0]), raises(v.assign, 5.0)


@parity(expected=(Raised("ValueError"), Raised("TypeError"), Raised("ValueError")))
def test_variable_assign_wrong_dtype(tf):
    """assign an int32 Tensor to float32: ValueError; [1.5] to int32: TypeError; assign_add an int Tensor: ValueError."""
    v = tf.Variable([1.0, 2.0])
    vi = tf.Variable([1, 2])
    return (raises(v.assign, tf.constant([1, 2])), raises(vi.assign, [1.5, 2.0]),
            raises(v.assign_add, tf.constant([1, 2])))


@parity(x64=True, expected=Raised("ValueError"))
def test_variable_assign_float64_tensor(tf):
    """assign a float64 Tensor to a float32 Variable: ValueError (tapejax: x64 mode)."""
    v = tf.Variable([1.0, 2.0])
    return raises(v.assign, tf.constant([1.0, 2.0], tf.float64))


@parity(expected=(Raised("InvalidArgumentError"),) * 3)
def test_variable_assign_add_wrong_shape(tf):
    """assign_add([3]) on a [2] Variable, assign_add(1.) and assign_sub(1.) (no broadcasting): InvalidArgumentError."""
    v = tf.Variable([1.0, 2.0])
    return raises(v.assign_add, [1.0, 2.0, 3.0]), raises(v.assign_add, 1.0), raises(v.assign_sub, 1.0)


@parity(expected=(Raised("TypeError"), Raised("ValueError"), Raised("TypeError"), Raised("ValueError")))
def test_variable_construction_and_protocol_errors(tf):
    """Variable(1.5, dtype=int32) TypeError; Variable(None) ValueError; hash(v) TypeError; bool(2-vector v) ValueError."""
    v = tf.Variable([1.0, 2.0])
    return (raises(tf.Variable, 1.5, dtype=tf.int32), raises(tf.Variable, None), raises(hash, v), raises(bool, v))


@parity(expected=(Raised("ValueError"), Raised("ValueError"), Raised("ValueError")))
def test_sparse_softmax_ce_label_shape(tf):
    """sparse_softmax_cross_entropy_with_logits: labels of rank 2 or 0, or wrong batch size, raise ValueError."""
    logits = tf.constant([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    f = tf.nn.sparse_softmax_cross_entropy_with_logits
    return (raises(f, labels=tf.constant([[0], [2]]), logits=logits),
            raises(f, labels=tf.constant(0), logits=logits),
            raises(f, labels=tf.constant([0, 1, 2]), logits=logits))


@parity(expected=("InvalidArgumentError", "InvalidArgumentError"),
        tapejax_expected=(A([2.407606, np.nan]), A([2.407606, np.nan])),
        deliberate="an out-of-range label gives a NaN loss, as TF does on GPU: raising as TF's CPU "
                   "kernel does would need a host sync of the labels on every call")
def test_sparse_softmax_ce_out_of_range_labels(tf):
    """Out-of-range labels (3, -1): TF's CPU kernel raises InvalidArgumentError; tapejax gives NaN."""
    logits = tf.constant([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    out = []
    for labels in ([0, 3], [0, -1]):
        try:
            out.append(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant(labels), logits=logits))
        except tf.errors.InvalidArgumentError:
            out.append("InvalidArgumentError")
    return tuple(out)


@parity(expected=Raised("InvalidArgumentError"))
def test_sparse_softmax_ce_float_labels(tf):
    """Float labels raise InvalidArgumentError (a TypeError subclass is accepted too)."""
    logits = tf.constant([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    return raises(tf.nn.sparse_softmax_cross_entropy_with_logits, labels=tf.constant([0.0, 1.0]),
                  logits=logits, ok=("TypeError",))
