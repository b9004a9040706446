"""The bad-input catalogue: wrong calls across the public API, as data.

Each row is one wrong call, written once against a module argument ``tf``
(``tapejax`` or, for the spec check, TensorFlow 2.21):

* ``world(tf)``: a context manager building the objects the call touches
  (Variables, tapes, an optimizer, a tapejax.function ...) and a ``check``
  that makes a *valid* call afterwards, with its expected value;
* ``bad(tf, w)``: the wrong call;
* ``exc``: the exception class TF raises for it (matched by name along the
  MRO, so ``except tf.errors.InvalidArgumentError`` ports);
* ``words``: what the tapejax message must contain: the argument's name and
  the expected vs received type / shape / dtype / value;
* ``tf``: ``True`` when the same program runs under TensorFlow (the TF side
  asserts TF raises ``exc``); a callable ``(tf, w) -> None`` for a TF program
  that differs; or a string saying why TF has no equivalent (then ``exc`` is
  the class a TF user would expect, as the string says).

``tests/test_bad_inputs.py`` runs every row and asserts, besides the class
and message, that nothing changed: Variables (values, dtypes, shapes), the
tape (recorded nodes, tracked ids, watched variables, recording state, the
thread's tape stack), ``tapejax.cache_info()``, optimizer state and
tapejax.function trace counts, and that the world's valid ``check`` call
still gives the right answer afterwards.
"""
import contextlib
import os
import tempfile

import numpy as np

ROWS = []

X = np.array([1.0, 2.0, 3.0], np.float32)
V = np.array([0.5, -1.0, 2.0], np.float32)


class Row:
    __slots__ = ("id", "world", "bad", "exc", "words", "tf", "tf_exc", "note")

    def __init__(self, id, world, bad, exc, words, tf=True, tf_exc=None, note=""):
        self.id, self.world, self.bad, self.exc, self.words, self.tf, self.tf_exc, self.note = (
            id, world, bad, exc, tuple(words), tf, tf_exc or exc, note)

    def __repr__(self):
        return f"Row({self.id})"


def row(id, bad, exc, words, world=None, tf=True, tf_exc=None, note=""):
    """``tf_exc``: TF's class when it is an accident of TF's implementation and tapejax raises a
    clearer one (``note`` says why); the TF side asserts ``tf_exc``."""
    ROWS.append(Row(id, world or closed, bad, exc, words, tf, tf_exc, note))


class W:
    """The objects of one world (attributes set by the world builder)."""

    def __init__(self, tf):
        self.tf = tf
        self.vars = []
        self.tapes = []
        self.opt = None
        self.fn = None
        self.check = None      # () -> nested results of a valid call, run after the wrong call
        self.expect = None     # what check() must return (numpy values / None)


# ---------------------------------------------------------------------------
# worlds
# ---------------------------------------------------------------------------

def _base(tf, persistent):
    w = W(tf)
    w.x = tf.constant(X)
    w.v = tf.Variable(V, name="v")
    w.vi = tf.Variable([1, 2, 3], name="vi")
    w.vars = [w.v, w.vi]
    w.tape = tf.GradientTape(persistent=persistent)
    w.tapes = [w.tape]
    return w


def _grad_check(w):
    w.check = lambda: w.tape.gradient(w.y, [w.x, w.v])
    w.expect = [2 * X * V, X * X]


@contextlib.contextmanager
def closed(tf, persistent=False):
    """A used-once tape, exited: ``y = sum(x*x*v)``; check: d y/d[x, v]."""
    w = _base(tf, persistent)
    with w.tape:
        w.tape.watch(w.x)
        w.y = tf.reduce_sum(w.x * w.x * w.v)
    _grad_check(w)
    yield w


@contextlib.contextmanager
def closed_persistent(tf):
    with closed(tf, persistent=True) as w:
        yield w


@contextlib.contextmanager
def recording(tf):
    """The same tape, still recording while the wrong call runs (an op that fails must not be
    recorded); check after the block exits."""
    w = _base(tf, False)
    with w.tape:
        w.tape.watch(w.x)
        w.y = tf.reduce_sum(w.x * w.x * w.v)
        # operands for the wrong calls, recorded before the snapshot
        w.sq = w.x * w.x
        w.x2 = w.x[:2]
        w.xrow = tf.reshape(w.x, [1, 3])
        w.vrow = tf.reshape(w.v, [1, 3])
        w.xcol = tf.reshape(w.x, [3, 1])
        w.vicol = tf.reshape(w.vi, [3, 1])
        w.logits3 = tf.ones([2, 2, 3]) * w.x
        yield w
    _grad_check(w)


@contextlib.contextmanager
def nested(tf):
    """Outer and inner tapes both recording; check: inner d y/dx, outer d y/dv."""
    w = _base(tf, False)
    w.inner = tf.GradientTape()
    w.tapes = [w.tape, w.inner]
    with w.tape:
        with w.inner:
            w.inner.watch(w.x)
            w.y = tf.reduce_sum(w.x * w.x * w.v)
            yield w
    w.check = lambda: [w.inner.gradient(w.y, w.x), w.tape.gradient(w.y, w.v)]
    w.expect = [2 * X * V, X * X]


def _sgd(tf, lr=0.1, **kw):
    opts = getattr(getattr(tf, "keras", None), "optimizers", None)
    legacy = getattr(opts, "legacy", None)
    if legacy is not None:   # the Keras-2 optimizers on both sides (a new one refuses a Variable it was
        return legacy.SGD(learning_rate=lr, **kw)   # not built for: KeyError, tf_keras' rule)
    return tf.optimizers.SGD(learning_rate=lr, **kw)


@contextlib.contextmanager
def optimizer(tf):
    """SGD(0.1, momentum=0.9) after one step on v=[1,2] (slots exist); check: a 2nd step."""
    w = W(tf)
    w.v = tf.Variable([1.0, 2.0], name="v")
    w.u = tf.Variable([[1.0, 2.0], [3.0, 4.0]], name="u")
    w.vars = [w.v, w.u]
    w.opt = _sgd(tf, 0.1, momentum=0.9)
    w.opt.apply_gradients([(tf.constant([1.0, 1.0]), w.v)])
    # Keras momentum: m = 0.9 m - 0.1 g; v += m.  Step 1: m = -0.1 -> v = [0.9, 1.9];
    # step 2: m = -0.19 -> v = [0.71, 1.71], iterations 2.
    w.check = lambda: [w.opt.apply_gradients([(tf.constant([1.0, 1.0]), w.v)]) is not None and None,
                       w.v.numpy(), int(w.opt.iterations.numpy())]
    w.expect = [None, np.array([0.71, 1.71], np.float32), 2]
    yield w


@contextlib.contextmanager
def function(tf):
    """f = tf.function(x * v, input_signature=[TensorSpec([None], float32)]), called once."""
    w = W(tf)
    w.v = tf.Variable(2.0, name="v")
    w.vars = [w.v]
    w.fn = tf.function(lambda x: x * w.v, input_signature=[tf.TensorSpec([None], tf.float32)])
    w.fn(tf.constant([1.0, 2.0]))
    w.check = lambda: [w.fn(tf.constant([3.0, 4.0])), w.fn.experimental_get_tracing_count()]
    w.expect = [np.array([6.0, 8.0], np.float32), 1]
    yield w


@contextlib.contextmanager
def accumulator(tf):
    """ForwardAccumulator(x=[1,2], tangent [1,0]) around y = x*x*v (v=3); check: jvp(y) = [6, 0]."""
    w = W(tf)
    w.x = tf.constant([1.0, 2.0])
    w.v = tf.Variable(3.0, name="v")
    w.vars = [w.v]
    w.acc = tf.autodiff.ForwardAccumulator(w.x, tf.constant([1.0, 0.0]))
    with w.acc:
        w.y = w.x * w.x * w.v
    w.check = lambda: w.acc.jvp(w.y)
    w.expect = np.array([6.0, 0.0], np.float32)
    yield w


_TMP = []


def _tmpdir():
    if not _TMP:
        _TMP.append(tempfile.mkdtemp(prefix="tapejax-bad-inputs-"))
    return _TMP[0]


@contextlib.contextmanager
def checkpoint(tf):
    """v=[1,2] written to a checkpoint, then v=[5,6]; check: restoring gives [1,2] back."""
    w = W(tf)
    w.v = tf.Variable([1.0, 2.0], name="v")
    w.vars = [w.v]
    w.ckpt = tf.train.Checkpoint(v=w.v)
    d = tempfile.mkdtemp(dir=_tmpdir())
    w.path = w.ckpt.write(os.path.join(d, "ck"))
    # another checkpoint whose `v` has shape [3]
    w.path3 = tf.train.Checkpoint(v=tf.Variable([7.0, 8.0, 9.0])).write(os.path.join(d, "ck3"))
    w.missing = os.path.join(d, "no-such-ckpt")
    w.v.assign([5.0, 6.0])
    w.check = lambda: [w.ckpt.read(w.path) is not None and None, w.v.numpy()]
    w.expect = [None, np.array([1.0, 2.0], np.float32)]
    yield w


# ---------------------------------------------------------------------------
# rows: GradientTape.gradient arguments
# ---------------------------------------------------------------------------

row("gradient-target-str", lambda tf, w: w.tape.gradient("abc", w.x),
    "TypeError", ["`target`", "Tensor or Variable", "'abc'", "str"])
row("gradient-target-list-holds-float", lambda tf, w: w.tape.gradient([w.y, 2.0], w.x),
    "AttributeError", ["`target`", "element 1", "2.0", "float"])
row("gradient-target-dict-holds-ndarray", lambda tf, w: w.tape.gradient({"a": w.y, "b": np.ones(3)}, w.x),
    "AttributeError", ["`target`", "ndarray"])
row("gradient-sources-int", lambda tf, w: w.tape.gradient(w.y, 3),
    "AttributeError", ["`sources`", "Tensor or Variable", "3", "int"])
row("gradient-sources-list-holds-ndarray", lambda tf, w: w.tape.gradient(w.y, [w.x, np.ones(3, np.float32)]),
    "AttributeError", ["`sources`", "element 1", "ndarray"])
row("gradient-sources-dict-holds-str", lambda tf, w: w.tape.gradient(w.y, {"a": w.x, "b": "q"}),
    "TypeError", ["`sources`", "'q'", "str"])
row("gradient-sources-none-persistent", lambda tf, w: w.tape.gradient(w.y, [w.v, None]),
    "TypeError", ["`sources`", "None"], world=closed_persistent)
row("gradient-unconnected-zeros-typo", lambda tf, w: w.tape.gradient(w.y, w.x, unconnected_gradients="zeros"),
    "ValueError", ["unconnected_gradients", "'zeros'", "'none'", "'zero'"])
row("gradient-unconnected-bool", lambda tf, w: w.tape.gradient(w.y, w.x, unconnected_gradients=True),
    "ValueError", ["unconnected_gradients", "True", "'zero'"])
row("gradient-output-gradients-longer-shape",
    lambda tf, w: w.tape.gradient(w.sq, w.x, output_gradients=tf.constant([1.0, 2.0, 3.0, 4.0])),
    "InvalidArgumentError", ["output_gradients", "(4,)", "(3,)", "shape"], world=recording,
    note="called inside the block of a non-persistent tape: TF records nothing more afterwards, "
         "so the failed call must leave the tape recording")
row("gradient-output-gradients-bool",
    lambda tf, w: w.tape.gradient(w.y, w.x, output_gradients=tf.constant(True)),
    "InvalidArgumentError", ["output_gradients", "bool", "float32"])
row("gradient-output-gradients-float16",
    lambda tf, w: w.tape.gradient(w.y, w.x, output_gradients=tf.constant(1.0, tf.float16)),
    "InvalidArgumentError", ["output_gradients", "float16", "float32"])
row("gradient-output-gradients-second-of-two-wrong-shape",
    lambda tf, w: w.tape.gradient([w.y, w.sq], w.x,
                                  output_gradients=[tf.constant(1.0), tf.constant([[1.0, 1.0, 1.0]] * 2)]),
    "InvalidArgumentError", ["output_gradients[1]", "(2, 3)", "(3,)"], world=recording)
row("gradient-output-gradients-string",
    lambda tf, w: w.tape.gradient(w.y, w.x, output_gradients="abc"),
    "InvalidArgumentError", ["output_gradients[0]", "'abc'", "str", "float32"],
    note="TF converts 'abc' to a string tensor, which Mul rejects; tapejax names the argument")

# ---------------------------------------------------------------------------
# rows: tape lifecycle and nesting
# ---------------------------------------------------------------------------


def _second_gradient(tf, w):
    w.tape.gradient(w.y, w.x)
    w.tape.gradient(w.y, w.v)


def _second_batch_jacobian(tf, w):
    w.tape.gradient(w.y, w.x)
    w.tape.batch_jacobian(tf.reshape(w.y, [1, 1]), tf.reshape(w.x, [1, 3]))


@contextlib.contextmanager
def spent(tf):
    """A non-persistent tape whose one gradient was taken; check: that gradient was right."""
    with closed(tf) as w:
        w.first = w.tape.gradient(w.y, [w.x, w.v])
        w.check = lambda: w.first
        yield w


row("gradient-second-call-nonpersistent", lambda tf, w: w.tape.gradient(w.y, w.v),
    "RuntimeError", ["non-persistent", "one set of gradients"], world=spent)
row("batch-jacobian-after-gradient-nonpersistent",
    lambda tf, w: w.tape.batch_jacobian(tf.reshape(w.y, [1, 1]), tf.reshape(w.x, [1, 3])),
    "RuntimeError", ["non-persistent", "one set of gradients"], world=spent)
row("reset-after-exit-persistent", lambda tf, w: w.tape.reset(),
    "ValueError", ["not recording"], world=closed_persistent,
    note="the persistent tape keeps what it recorded: a later gradient still works")
row("stop-recording-after-exit-persistent", lambda tf, w: w.tape.stop_recording().__enter__(),
    "ValueError", ["not recording"], world=closed_persistent)


def _reenter_outer(tf, w):
    with w.tape:
        pass


row("nested-reenter-outer-inside-inner", _reenter_outer, "ValueError", ["still recording", "re-enter"],
    world=nested, note="the stack keeps [outer, inner] and both keep recording")


def _reenter_inner(tf, w):
    with w.inner:
        pass


row("nested-reenter-inner", _reenter_inner, "ValueError", ["still recording", "re-enter"], world=nested)
row("watch-list-with-float", lambda tf, w: w.tape.watch([w.sq, 1.5]),
    "ValueError", ["1.5", "float", "Tensor or", "Variable"], world=recording,
    note="nothing of the list is watched when one element is bad")
row("watch-str", lambda tf, w: w.tape.watch("abc"), "ValueError", ["'abc'", "str", "Tensor"],
    world=recording)
row("watch-dict-with-list-of-ints", lambda tf, w: w.inner.watch({"a": w.v, "b": [1, 2]}),
    "ValueError", ["1", "int", "Tensor"], world=nested)

# ---------------------------------------------------------------------------
# rows: jacobian / batch_jacobian
# ---------------------------------------------------------------------------

row("jacobian-target-none", lambda tf, w: w.tape.jacobian(None, w.x),
    "TypeError", ["`target`", "None"], world=closed_persistent, tf_exc="AttributeError",
    note="TF: AttributeError ('NoneType' object has no attribute 'shape'); tapejax's class is both a "
         "TypeError (as gradient(None, x) in TF) and an AttributeError")
row("jacobian-sources-str", lambda tf, w: w.tape.jacobian(w.y, "abc"),
    "TypeError", ["`sources`", "'abc'", "str"], world=closed_persistent)
row("jacobian-unconnected-typo", lambda tf, w: w.tape.jacobian(w.y, w.x, unconnected_gradients="Zero"),
    "ValueError", ["unconnected_gradients", "'Zero'"], world=closed_persistent)
row("jacobian-no-pfor-nonpersistent", lambda tf, w: w.tape.jacobian(w.y, w.x, experimental_use_pfor=False),
    "RuntimeError", ["persistent=True", "experimental_use_pfor"])
row("batch-jacobian-batch-mismatch",
    lambda tf, w: w.tape.batch_jacobian(tf.reshape(w.x * w.x, [3, 1]), tf.reshape(w.x, [1, 3])),
    "ValueError", ["first dimension", "(3, 1)", "(1, 3)"], world=closed_persistent)
row("batch-jacobian-rank1-source",
    lambda tf, w: w.tape.batch_jacobian(tf.reshape(w.x * w.x, [3, 1]), w.x),
    "ValueError", ["rank at least 2", "(3,)"], world=closed_persistent)
row("batch-jacobian-two-sources",
    lambda tf, w: w.tape.batch_jacobian(tf.reshape(w.x * w.x, [3, 1]), [w.x, w.x]),
    "AttributeError", ["`source`", "one Tensor or Variable", "list"], world=closed_persistent)

# ---------------------------------------------------------------------------
# rows: ForwardAccumulator
# ---------------------------------------------------------------------------

row("forward-tangent-wrong-shape",
    lambda tf, w: tf.autodiff.ForwardAccumulator(w.x, tf.constant([1.0, 0.0, 0.0])),
    "ValueError", ["tangents", "(3,)", "(2,)"], world=accumulator, tf=lambda tf, w: _fwd_shape_tf(tf, w),
    note="TF accepts the tangent and fails at the first op with ValueError (Dimensions must be "
         "equal, 3 and 2); tapejax raises the same class when the accumulator is made")
row("forward-tangent-wrong-dtype",
    lambda tf, w: tf.autodiff.ForwardAccumulator(w.x, tf.constant([1, 0])),
    "ValueError", ["tangents", "int32", "float32"], world=accumulator)
def _fwd_shape_tf(tf, w):
    acc = tf.autodiff.ForwardAccumulator(w.x, tf.constant([1.0, 0.0, 0.0]))
    with acc:
        w.x * w.x


row("forward-structure-mismatch",
    lambda tf, w: tf.autodiff.ForwardAccumulator([w.x, w.v], [tf.constant([1.0, 0.0])]),
    "ValueError", ["same nested structure", "primals", "tangents"], world=accumulator)
row("forward-primal-not-tensor",
    lambda tf, w: tf.autodiff.ForwardAccumulator(np.ones(2, np.float32), np.ones(2, np.float32)),
    "AttributeError", ["`primals`", "ndarray"], world=accumulator)
row("forward-jvp-of-str", lambda tf, w: w.acc.jvp("abc"),
    "AttributeError", ["`primals`", "'abc'", "str"], world=accumulator)
row("forward-jvp-unconnected-typo", lambda tf, w: w.acc.jvp(w.y, unconnected_gradients="ZERO"),
    "ValueError", ["unconnected_gradients", "'ZERO'"], world=accumulator)


def _reenter_acc(tf, w):
    with w.acc:
        with w.acc:
            pass


row("forward-reenter", _reenter_acc, "ValueError", ["already recording"], world=accumulator)

# ---------------------------------------------------------------------------
# rows: custom_gradient
# ---------------------------------------------------------------------------



def _custom_world(grad_kind):
    @contextlib.contextmanager
    def world(tf):
        """A persistent tape recorded z = f(x) for a custom_gradient f whose grad_fn is wrong."""
        with closed(tf, persistent=True) as w:
            @tf.custom_gradient
            def f(a):
                def grad(dy):
                    if grad_kind == "two":
                        return dy, dy
                    return tf.ones([2, 2])     # wrong shape
                return a * 2.0, grad
            with w.tape:
                w.z = f(w.x * 1.0)
            yield w
    world.__name__ = f"custom_{grad_kind}"
    return world


row("custom-gradient-too-many-grads", lambda tf, w: w.tape.gradient(w.z, w.x), "ValueError",
    ["expected to return 1 gradients", "2"], world=_custom_world("two"))
row("custom-gradient-wrong-shape-grad", lambda tf, w: w.tape.gradient(w.z, w.x), "ValueError",
    ["grad_fn", "(2, 2)", "(3,)", "shape"], world=_custom_world("shape"),
    tf="TF returns the [2, 2] gradient for the [3] input unchecked; tapejax validates it, with the "
       "class TF uses for a wrong number of gradients (ValueError)")


def _cg_reads_variable(tf, w):
    @tf.custom_gradient
    def f(a):
        def grad(dy):                       # no `variables` keyword
            return dy * w.v
        return a * w.v, grad
    f(w.x)


row("custom-gradient-no-variables-kwarg", _cg_reads_variable, "TypeError", ["variables"], world=recording)


def _cg_not_pair(tf, w):
    @tf.custom_gradient
    def f(a):
        return a * 2.0
    f(w.x)


row("custom-gradient-returns-no-grad-fn", _cg_not_pair, "TypeError", ["(output, grad_fn)"],
    world=recording, tf_exc="ValueError",
    note="TF unpacks the single output (a 3-vector) and fails with ValueError ('too many values to "
         "unpack'), an accident; tapejax's TypeError names the contract")

# ---------------------------------------------------------------------------
# rows: constant / convert_to_tensor
# ---------------------------------------------------------------------------

row("constant-dtype-name-typo", lambda tf, w: tf.constant(1.0, dtype="flaot32"),
    "TypeError", ["'flaot32'", "dtype"])
row("constant-dtype-int-object", lambda tf, w: tf.constant(1.0, dtype=7),
    "TypeError", ["7", "DType"])
row("constant-ragged-3-levels", lambda tf, w: tf.constant([[[1.0], [2.0]], [[3.0]]]),
    "ValueError", ["non-rectangular"])
row("constant-ragged-scalar-and-list", lambda tf, w: tf.constant([[1.0, 2.0], 3.0]),
    "ValueError", ["non-rectangular"])
row("constant-nan-to-int", lambda tf, w: tf.constant(float("nan"), dtype=tf.int32),
    "TypeError", ["nan", "int32"])
row("constant-bool-from-float", lambda tf, w: tf.constant(0.5, dtype=tf.bool),
    "TypeError", ["0.5", "bool"])
row("constant-shape-too-small", lambda tf, w: tf.constant([1.0, 2.0, 3.0, 4.0], shape=[3]),
    "TypeError", ["`shape`", "4 elements", "3 elements"])
row("convert-object", lambda tf, w: tf.convert_to_tensor(object()),
    "ValueError", ["object", "Tensor"])
row("convert-dict", lambda tf, w: tf.convert_to_tensor({"a": 1.0}),
    "ValueError", ["dict", "Tensor"])
row("convert-variable-wrong-dtype", lambda tf, w: tf.convert_to_tensor(w.v, dtype=tf.int32),
    "ValueError", ["int32", "float32"])
row("constant-float64-without-x64", lambda tf, w: tf.constant([1.0, 2.0], dtype=tf.float64),
    "TypeError", ["float64", "jax_enable_x64", "float32"],
    tf="TF holds float64 natively; JAX without x64 mode cannot, and tapejax never narrows silently: "
       "it raises TypeError (the class TF uses for a value it cannot convert to the requested dtype)")
row("convert-numpy-float64-without-x64", lambda tf, w: tf.convert_to_tensor(np.array([1.0, 2.0])),
    "TypeError", ["float64", "jax_enable_x64"],
    tf="TF keeps NumPy float64 as float64; without JAX's x64 mode tapejax raises TypeError (no silent float32)")
row("op-numpy-float64-without-x64", lambda tf, w: tf.reduce_sum(np.array([1.0, 2.0])),
    "TypeError", ["float64", "jax_enable_x64", "NumPy operand"],
    tf="TF's op gives float64 for NumPy float64 data; without JAX's x64 mode tapejax raises TypeError "
       "(it computed a float32 sum)")
row("matmul-numpy-float64-without-x64", lambda tf, w: tf.matmul(np.ones((2, 2)), np.ones((2, 2))),
    "TypeError", ["float64", "jax_enable_x64"],
    tf="TF's MatMul of NumPy float64 data is float64; without JAX's x64 mode tapejax raises TypeError")

# ---------------------------------------------------------------------------
# rows: Variable
# ---------------------------------------------------------------------------

row("variable-assign-2d-to-1d", lambda tf, w: w.v.assign([[1.0, 2.0, 3.0]]),
    "ValueError", ["v", "(3,)", "(1, 3)", "Shape mismatch"])
row("variable-assign-bool-tensor", lambda tf, w: w.v.assign(tf.constant([True, False, True])),
    "ValueError", ["float32", "bool"])
row("variable-assign-sub-int-tensor", lambda tf, w: w.v.assign_sub(tf.constant([1, 2, 3])),
    "ValueError", ["float32", "int32"])
row("variable-assign-add-float-to-int", lambda tf, w: w.vi.assign_add([0.5, 0.5, 0.5]),
    "TypeError", ["0.5", "int32"])
row("variable-assign-add-wrong-shape-in-tape", lambda tf, w: w.v.assign_add([[1.0, 2.0, 3.0]]),
    "InvalidArgumentError", ["[3]", "[1, 3]", "shapes must be equal"], world=recording)
row("variable-assign-none", lambda tf, w: w.v.assign(None),
    "ValueError", ["None", "Tensor"])
row("variable-name-int", lambda tf, w: tf.Variable(1.0, name=3),
    "ValueError", ["`name`", "3", "int", "string"])
row("variable-dtype-typo", lambda tf, w: tf.Variable(1.0, dtype="float23"),
    "TypeError", ["'float23'", "dtype"])
row("variable-shape-mismatch", lambda tf, w: tf.Variable([1.0, 2.0], shape=[3]),
    "ValueError", ["`shape`", "(2,)", "[3]"])
row("variable-constraint-not-callable", lambda tf, w: tf.Variable(1.0, constraint=5),
    "ValueError", ["`constraint`", "callable", "5"])
row("variable-float-plus-int-variable", lambda tf, w: w.v + w.vi,
    "InvalidArgumentError", ["float32", "int32", "AddV2"], world=recording,
    note="the int Variable's read is not recorded either (TF: no implicit promotion)")
row("variable-int-times-float", lambda tf, w: w.vi * 1.5,
    "TypeError", ["1.5", "int32"], world=recording)
row("variable-matmul-float-int", lambda tf, w: tf.matmul(w.vrow, w.vicol),
    "InvalidArgumentError", ["float32", "int32", "MatMul"], world=recording)

# ---------------------------------------------------------------------------
# rows: ops (run while the tape records: a failing op must record nothing)
# ---------------------------------------------------------------------------

M23 = np.arange(6, dtype=np.float32).reshape(2, 3)

row("op-subtract-shapes", lambda tf, w: tf.subtract(w.x, tf.constant(M23.T)),
    "InvalidArgumentError", ["(3,)", "(3, 2)", "Incompatible shapes"], world=recording)
row("op-matmul-inner-dims", lambda tf, w: tf.matmul(tf.constant(M23), w.xrow),
    "InvalidArgumentError", ["`a`", "[2, 3]", "`b`", "[1, 3]", "MatMul"], world=recording)
row("op-matmul-int-float", lambda tf, w: tf.matmul(tf.constant([[1, 2, 3]]), w.xcol),
    "InvalidArgumentError", ["int32", "float32", "MatMul"], world=recording)
row("op-concat-shapes", lambda tf, w: tf.concat([w.xrow, tf.constant(M23.T)], axis=0),
    "InvalidArgumentError", ["ConcatV2", "`values`", "[1, 3]", "[3, 2]"], world=recording)
row("op-concat-axis-out-of-range", lambda tf, w: tf.concat([w.x, w.x], axis=2),
    "InvalidArgumentError", ["axis", "2", "[-1, 1)"], world=recording)
row("op-concat-dtypes", lambda tf, w: tf.concat([w.x, tf.constant([1, 2])], axis=0),
    "InvalidArgumentError", ["float32", "int32", "ConcatV2", "`values`"], world=recording)
row("op-reduce-sum-bad-axis", lambda tf, w: tf.reduce_sum(w.x, axis=1),
    "InvalidArgumentError", ["axis 1", "dimension 1"], world=recording)
row("op-reduce-mean-float-axis", lambda tf, w: tf.reduce_mean(w.x, axis=0.5),
    "TypeError", ["`axis`", "0.5", "int"], world=recording)
row("op-reduce-sum-float-axis-list", lambda tf, w: tf.reduce_sum(w.x, axis=[0.5]),
    "InvalidArgumentError", ["`axis`", "0.5", "int"], world=recording)
row("op-reshape-wrong-size", lambda tf, w: tf.reshape(w.x, [2, 2]),
    "InvalidArgumentError", ["3 values", "[2, 2]", "`shape`"], world=recording)
row("op-reshape-two-unknown", lambda tf, w: tf.reshape(w.x, [-1, -1]),
    "InvalidArgumentError", ["-1", "only one", "[-1, -1]", "`shape`"], world=recording)
row("op-transpose-bad-perm", lambda tf, w: tf.transpose(tf.constant(M23), perm=[0, 0]),
    "InvalidArgumentError", ["`perm`", "[0, 0]", "permutation of [0, 1]"], world=recording)
row("op-stack-shapes", lambda tf, w: tf.stack([w.x, w.x2]),
    "InvalidArgumentError", ["Pack", "`values`", "(3,)", "(2,)"], world=recording)
row("op-split-uneven", lambda tf, w: tf.split(w.x, 2),
    "InvalidArgumentError", ["3", "2", "split"], world=recording)
row("op-gather-float-indices", lambda tf, w: tf.gather(w.x, tf.constant([0.0, 1.0])),
    "InvalidArgumentError", ["indices", "float32", "int32"], world=recording)
row("op-tile-multiples-length", lambda tf, w: tf.tile(w.x, [2, 2]),
    "InvalidArgumentError", ["multiples", "2", "1"], world=recording)
row("op-squeeze-non-one-axis", lambda tf, w: tf.squeeze(w.x, axis=0),
    "InvalidArgumentError", ["squeeze", "3", "dimension"], world=recording)
row("op-expand-dims-axis", lambda tf, w: tf.expand_dims(w.x, axis=3),
    "InvalidArgumentError", ["`axis`", "3", "[-2, 2)"], world=recording)
row("op-sqrt-int", lambda tf, w: tf.sqrt(tf.constant([4, 9])),
    "InvalidArgumentError", ["int32", "allowed values", "x"], world=recording)
row("op-softmax-int", lambda tf, w: tf.nn.softmax(tf.constant([1, 2])),
    "InvalidArgumentError", ["int32", "allowed values"], world=recording)
row("op-cast-bad-dtype", lambda tf, w: tf.cast(w.x, "floot"),
    "TypeError", ["'floot'", "dtype"], world=recording)
row("op-one-hot-float-indices", lambda tf, w: tf.one_hot(w.x, 3),
    "InvalidArgumentError", ["indices", "float32"], world=recording)
row("op-reshape-none-shape", lambda tf, w: tf.reshape(w.x, None),
    "ValueError", ["None", "unsupported type"], world=recording)
row("op-reshape-none-tensor", lambda tf, w: tf.reshape(None, [3]),
    "ValueError", ["None", "unsupported type"], world=recording)
row("op-concat-none-value", lambda tf, w: tf.concat([w.x, None], axis=0),
    "ValueError", ["None", "unsupported type"], world=recording)
row("op-stack-none-value", lambda tf, w: tf.stack([w.x, None]),
    "ValueError", ["None", "unsupported type"], world=recording)
row("op-zeros-none-dim", lambda tf, w: tf.zeros([None, 2]),
    "ValueError", ["None", "unsupported type"], world=recording)
row("op-ones-none-shape", lambda tf, w: tf.ones(None),
    "ValueError", ["None", "unsupported type"], world=recording)
row("op-fill-negative-dim", lambda tf, w: tf.fill([-1, 2], 1.0),
    "InvalidArgumentError", ["Dimension -1", ">= 0", "`shape`", "[-1, 2]"], world=recording)
row("op-eye-negative-rows", lambda tf, w: tf.eye(-1),
    "InvalidArgumentError", ["Dimension -1", ">= 0"], world=recording)
row("op-random-normal-negative-dim", lambda tf, w: tf.random.normal([-1]),
    "InvalidArgumentError", ["Dimension -1", ">= 0", "RandomStandardNormal"], world=recording)
row("op-random-uniform-negative-dim", lambda tf, w: tf.random.uniform([2, -3]),
    "InvalidArgumentError", ["Dimension -3", ">= 0", "RandomUniform"], world=recording)
row("op-argmax-axis-out-of-range", lambda tf, w: tf.argmax(tf.constant(M23), axis=2),
    "InvalidArgumentError", ["`axis`", "[-2, 2)", "got 2"], world=recording)
row("op-transpose-string-perm", lambda tf, w: tf.transpose(tf.constant(M23), "ab"),
    "InvalidArgumentError", ["`perm`", "string", "int32, int64"], world=recording)
row("op-range-zero-delta", lambda tf, w: tf.range(0, 10, 0),
    "InvalidArgumentError", ["delta", "0"], world=recording)
row("op-range-inf-limit", lambda tf, w: tf.range(0.0, float("inf")),
    "InvalidArgumentError", ["`limit`", "inf", "finite"], world=recording)
row("op-zeros-negative-dim", lambda tf, w: tf.zeros([2, -3]),
    "InvalidArgumentError", ["`shape`", "-3", ">= 0"], world=recording)
row("op-sparse-xent-labels-rank-3d-logits",
    lambda tf, w: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant([0, 1]),
                                                                  logits=w.logits3),
    "ValueError", ["labels", "logits", "rank", "received 1", "received 3"], world=recording)
row("op-softmax-xent-shapes",
    lambda tf, w: tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant([[0.0, 1.0]]),
                                                           logits=w.xrow),
    "InvalidArgumentError", ["labels", "logits", "[1, 2]", "[1, 3]"], world=recording)
row("op-where-shapes", lambda tf, w: tf.where(tf.constant([True, False]), w.x, w.x),
    "InvalidArgumentError", ["(2,)", "(3,)", "SelectV2"], world=recording)
row("op-getitem-out-of-range-variable", lambda tf, w: w.v[7],
    "InvalidArgumentError", ["7", "out of bounds", "3"], world=recording)

# ---------------------------------------------------------------------------
# rows: tapejax.function
# ---------------------------------------------------------------------------

row("function-signature-not-a-list",
    lambda tf, w: tf.function(lambda x: x, input_signature=tf.TensorSpec([None], tf.float32)),
    "TypeError", ["input_signature", "TensorSpec", "list or tuple"], world=function)
row("function-signature-holds-int", lambda tf, w: tf.function(lambda x: x, input_signature=[3])(w.v),
    "TypeError", ["input_signature", "3", "TensorSpec"], world=function)
row("function-call-wrong-dtype", lambda tf, w: w.fn(tf.constant([1, 2])),
    "TypeError", ["int32", "float32", "argument 0"], world=function)
row("function-call-wrong-rank", lambda tf, w: w.fn(tf.constant([[1.0, 2.0]])),
    "TypeError", ["(1, 2)", "(None,)", "argument 0"], world=function)
row("function-call-too-many-args", lambda tf, w: w.fn(tf.constant([1.0]), tf.constant([2.0])),
    "TypeError", ["input_signature", "1", "2"], world=function)
row("function-call-str", lambda tf, w: w.fn("abc"),
    "TypeError", ["argument 0", "'abc'", "float32"], world=function)
row("function-call-python-float-for-vector", lambda tf, w: w.fn(1.5),
    "TypeError", ["argument 0", "()", "(None,)"], world=function)
row("function-not-callable", lambda tf, w: tf.function(5),
    "TypeError", ["5", "callable"], world=function)


def _autograph_one_branch(tf, w):
    @tf.function
    def f(x):
        if x > 0:
            y = x * w.v
        return y
    return f(tf.constant(1.0))


def _autograph_loop_dtype(tf, w):
    @tf.function
    def f(n):
        s = tf.constant(0)
        i = 0
        while i < n:
            s = tf.cast(s, tf.float32) * w.v
            i += 1
        return s
    return f(tf.constant(3))


def _autograph_float_condition(tf, w):
    @tf.function
    def f(x):
        while x:
            x = x - 1.0
        return x
    return f(tf.constant(3.0))


row("function-autograph-variable-in-one-branch", _autograph_one_branch,
    "ValueError", ["'y'", "else branch", "if x > 0"], world=function)
row("function-autograph-loop-variable-dtype", _autograph_loop_dtype,
    "TypeError", ["'s'", "int32", "float32", "before the loop"], world=function)
row("function-autograph-float-condition", _autograph_float_condition,
    "ValueError", ["condition of while loop", "tf.bool", "float32"], world=function)
row("function-concrete-unknown-rank",
    lambda tf, w: tf.function(lambda x: x * w.v).get_concrete_function(tf.TensorSpec(None, tf.float32)),
    "ValueError", ["TensorSpec", "unknown rank"], world=function,
    tf="TF traces a graph of unknown rank; XLA compiles a program only for known ranks")
row("tensorspec-shape-str", lambda tf, w: tf.TensorSpec("ab", tf.float32),
    "TypeError", ["shape", "'ab'"], world=function)
row("print-summarize-str", lambda tf, w: tf.print(w.v, summarize="a"),
    "TypeError", ["summarize", "'a'"], world=function)
row("print-sep-int", lambda tf, w: tf.print(w.v, sep=1),
    "TypeError", ["sep", "1", "string"], world=function, tf_exc="AttributeError",
    note="TF fails inside with AttributeError ('int' object has no attribute 'join')")
row("print-output-stream-str", lambda tf, w: tf.print(w.v, output_stream="stdout"),
    "ValueError", ["output_stream", "'stdout'"], world=function)
# ---------------------------------------------------------------------------
# rows: optimizers
# ---------------------------------------------------------------------------

row("optimizer-all-grads-none", lambda tf, w: w.opt.apply_gradients([(None, w.v), (None, w.u)]),
    "ValueError", ["No gradients provided", "v:0", "u:0"], world=optimizer)
row("optimizer-not-pairs", lambda tf, w: w.opt.apply_gradients([tf.constant([1.0, 1.0]), w.v]),
    "TypeError", ["grads_and_vars", "pairs"], world=optimizer, tf_exc="AttributeError",
    note="TF fails inside with AttributeError ('EagerTensor' object has no attribute '_unique_id')")
row("optimizer-triples", lambda tf, w: w.opt.apply_gradients([(tf.constant([1.0, 1.0]), w.v, w.u)]),
    "TypeError", ["grads_and_vars", "pairs"], world=optimizer, tf_exc="ValueError",
    note="TF fails unpacking with ValueError ('too many values to unpack')")
row("optimizer-non-variable", lambda tf, w: w.opt.apply_gradients([(tf.constant([1.0, 1.0]), w.v),
                                                                   (tf.constant([1.0, 1.0]), tf.constant([1.0, 2.0]))]),
    "TypeError", ["Variable", "Tensor"], world=optimizer, tf_exc="AttributeError",
    note="the valid first pair must not be applied either; TF fails inside with AttributeError "
         "('EagerTensor' object has no attribute '_unique_id')")
row("optimizer-grad-shape", lambda tf, w: w.opt.apply_gradients([(tf.constant([1.0, 1.0]), w.v),
                                                                 (tf.constant([1.0, 1.0]), w.u)]),
    "InvalidArgumentError", ["u", "(2, 2)", "(2,)", "shape"], world=optimizer,
    note="TF updates v, then fails on u (half-updated); tapejax validates every pair first")
row("optimizer-grad-dtype", lambda tf, w: w.opt.apply_gradients([(tf.constant([1, 1]), w.v)]),
    "InvalidArgumentError", ["v", "int32", "float32"], world=optimizer)
row("optimizer-duplicate-variable", lambda tf, w: w.opt.apply_gradients([(tf.constant([1.0, 1.0]), w.v),
                                                                         (tf.constant([1.0, 1.0]), w.v)]),
    "ValueError", ["v", "more than once"], world=optimizer,
    tf="TF applies both updates one after the other (no error; the result depends on the order); "
       "tapejax's compiled update takes each Variable once and asks for the summed gradient (ValueError)")
row("optimizer-lr-string", lambda tf, w: _sgd(tf, "fast"),
    "ValueError", ["learning_rate", "'fast'"], world=optimizer, tf=lambda tf, w: _lr_tf(tf, w, "fast"),
    note="TF accepts it and fails at the first apply_gradients (ValueError: Unknown initializer: "
         "'fast'); tapejax fails when the optimizer is made, with the same class")
row("optimizer-lr-none", lambda tf, w: _sgd(tf, None),
    "TypeError", ["learning_rate", "None"], world=optimizer, tf=lambda tf, w: _lr_tf(tf, w, None),
    note="TF accepts it and fails at the first apply_gradients (TypeError); tapejax at construction")
row("optimizer-set-lr-string", lambda tf, w: setattr(w.opt, "learning_rate", "fast"),
    "ValueError", ["learning_rate", "'fast'"], world=optimizer)
def _lr_tf(tf, w, lr):
    _sgd(tf, lr).apply_gradients([(tf.constant([1.0, 1.0]), tf.Variable([1.0, 2.0]))])


row("optimizer-negative-clipnorm", lambda tf, w: _sgd(tf, 0.1, clipnorm=-1.0),
    "ValueError", ["clipnorm", ">= 0", "-1.0"], world=optimizer)
row("optimizer-unknown-kwarg", lambda tf, w: _sgd(tf, 0.1, clip=1.0),
    "TypeError", ["clip", "Allowed"], world=optimizer)
row("optimizer-momentum-string", lambda tf, w: _sgd(tf, 0.1, momentum="high"),
    "TypeError", ["momentum", "'high'"], world=optimizer)


def _lso(tf, *args, **kwargs):
    return tf.keras.mixed_precision.LossScaleOptimizer(*args, **kwargs)


# (tf_keras marks the inner optimizer as wrapped before it converts the scale arguments; tapejax
# checks every argument first, so the optimizer can still be wrapped afterwards)
row("loss-scale-not-an-optimizer", lambda tf, w: _lso(tf, 3),
    "TypeError", ["inner_optimizer", "3"], world=optimizer)
row("loss-scale-dynamic-string", lambda tf, w: _lso(tf, w.opt, "dynamic"),
    "TypeError", ["dynamic", "bool", "'dynamic'"], world=optimizer)
row("loss-scale-initial-scale-string", lambda tf, w: _lso(tf, w.opt, initial_scale="a"),
    "ValueError", ["initial_scale", "'a'"], world=optimizer)
row("loss-scale-growth-steps-string", lambda tf, w: _lso(tf, w.opt, dynamic_growth_steps="a"),
    "ValueError", ["dynamic_growth_steps", "'a'"], world=optimizer)
row("loss-scale-fixed-without-scale", lambda tf, w: _lso(tf, w.opt, dynamic=False),
    "ValueError", ["initial_scale", "dynamic"], world=optimizer)
row("loss-scale-fixed-with-growth-steps",
    lambda tf, w: _lso(tf, w.opt, dynamic=False, initial_scale=8, dynamic_growth_steps=3),
    "ValueError", ["dynamic_growth_steps", "3"], world=optimizer)

# ---------------------------------------------------------------------------
# rows: Checkpoint
# ---------------------------------------------------------------------------

row("checkpoint-restore-missing", lambda tf, w: w.ckpt.restore(w.missing),
    "NotFoundError", ["no-such-ckpt"], world=checkpoint)
row("checkpoint-read-shape-mismatch", lambda tf, w: w.ckpt.read(w.path3),
    "ValueError", ["v", "(2,)", "(3,)"], world=checkpoint)
row("checkpoint-non-trackable", lambda tf, w: tf.train.Checkpoint(v=w.v, lr=0.5),
    "ValueError", ["lr", "trackable", "0.5"], world=checkpoint)

# ---------------------------------------------------------------------------
# rows: tapejax.data (made while the tape records: a pipeline records nothing)
# ---------------------------------------------------------------------------

def _ds(tf):
    return tf.data.Dataset.from_tensor_slices(np.arange(6, dtype=np.int32))


row("data-batch-size-zero", lambda tf, w: _ds(tf).batch(0),
    "InvalidArgumentError", ["`batch_size`", "greater than zero", "got 0"], world=recording)
row("data-batch-size-negative", lambda tf, w: _ds(tf).batch(-4),
    "InvalidArgumentError", ["`batch_size`", "got -4"], world=recording)
row("data-batch-size-float", lambda tf, w: _ds(tf).batch(1.5),
    "TypeError", ["`batch_size`", "1.5", "float"], world=recording)
row("data-shuffle-buffer-zero", lambda tf, w: _ds(tf).shuffle(0),
    "InvalidArgumentError", ["`buffer_size`", "got 0"], world=recording)
row("data-prefetch-buffer-negative", lambda tf, w: _ds(tf).prefetch(-5),
    "InvalidArgumentError", ["`buffer_size`", "got -5"], world=recording)
row("data-map-not-callable", lambda tf, w: _ds(tf).map(3),
    "ValueError", ["`func`", "3"], world=recording)
row("data-map-returns-object", lambda tf, w: _ds(tf).map(lambda v: object()),
    "TypeError", ["Unsupported return value", "Dataset.map()", "object"], world=recording)
row("data-filter-not-bool", lambda tf, w: _ds(tf).filter(lambda v: v * 2),
    "ValueError", ["`predicate`", "tf.bool", "int"], world=recording)
row("data-slices-mismatch", lambda tf, w: tf.data.Dataset.from_tensor_slices((np.zeros(3, np.float32),
                                                                            np.zeros(4, np.float32))),
    "ValueError", ["Dimensions 3 and 4"], world=recording)
row("data-concatenate-dtypes", lambda tf, w: _ds(tf).concatenate(tf.data.Dataset.from_tensor_slices(X)),
    "TypeError", ["Incompatible dataset elements", "int32", "float32"], world=recording)
# rows: tf.debugging, tf.device / tf.config, tf.summary, tf.test (TF's messages)
# ---------------------------------------------------------------------------

row("assert-equal-shapes", lambda tf, w: tf.debugging.assert_equal(w.x, tf.constant([1., 2.])),
    "InvalidArgumentError", ["(3,)", "(2,)", "Equal"])
row("assert-equal-dtypes", lambda tf, w: tf.debugging.assert_equal(w.x, tf.constant([1, 2, 3])),
    "InvalidArgumentError", ["float32", "int32", "Equal"])
row("assert-rank-list", lambda tf, w: tf.debugging.assert_rank(w.x, [1]),
    "ValueError", ["Rank must be a scalar"])
row("assert-shapes-ellipsis-not-first", lambda tf, w: tf.debugging.assert_shapes([(w.x, ("N", ...))]),
    "ValueError", ["index 1", "only allowed as the first entry"])
row("check-numerics-int", lambda tf, w: tf.debugging.check_numerics(w.vi, "m"),
    "InvalidArgumentError", ["int32", "bfloat16, half, float, double"])
row("device-unknown-type", lambda tf, w: tf.device("/XPU:0").__enter__(),
    "ValueError", ["XPU", "/XPU:0"])
row("device-not-a-string", lambda tf, w: tf.device(0).__enter__(),
    "ValueError", ["string device name", "int", "(0)"])
def _op_on_other_task(tf, w):
    with tf.device("/task:3/CPU:0"):   # TF raises at the first op, tapejax when the scope is entered
        return w.x + 1.


row("device-other-task", _op_on_other_task, "InvalidArgumentError", ["task:3", "unknown device"])
row("soft-placement-not-bool", lambda tf, w: tf.config.set_soft_device_placement("x"),
    "TypeError", ["enabled", "'x'"])
row("memory-growth-cpu", lambda tf, w: tf.config.experimental.set_memory_growth(
    tf.config.list_physical_devices("CPU")[0], True), "ValueError", ["memory growth", "non-GPU"])
row("memory-growth-unknown-device", lambda tf, w: tf.config.experimental.set_memory_growth("gpu0", True),
    "ValueError", ["Unrecognized device", "'gpu0'"])
row("compilation-cache-not-a-path", lambda tf, w: tf.config.set_compilation_cache(3),
    "TypeError", ["directory", "path", "3", "int"],
    tf="TF has no persistent compilation cache setting (tapejax's, on JAX's); TypeError as for any wrong type")
row("compilation-cache-a-file", lambda tf, w: tf.config.set_compilation_cache(__file__),
    "ValueError", ["directory", "must be a directory", "bad_inputs_table.py"],
    tf="TF has no persistent compilation cache setting (tapejax's, on JAX's); ValueError as for a bad value")
row("summary-writer-no-logdir", lambda tf, w: tf.summary.create_file_writer(None),
    "ValueError", ["logdir", "None"])
row("compute-gradient-x-not-a-list", lambda tf, w: tf.test.compute_gradient(lambda a: a * a, w.x),
    "ValueError", ["`x`", "list or tuple", "Tensor"])
row("compute-gradient-int-argument", lambda tf, w: tf.test.compute_gradient(lambda a: a * a, [w.vi]),
    "AssertionError", ["unsupported type int32", "argument 0"])

# ---------------------------------------------------------------------------
# rows: ops on mixed devices (run in a subprocess with two CPU devices, see
# test_bad_inputs.test_mixed_devices).  TF places every op itself and copies
# operands between devices; tapejax leaves placement to JAX, which refuses
# arrays committed to different devices.  What a user gets: TF's class for an
# op that cannot run on its inputs (InvalidArgumentError), the op's name and
# the devices in the message, nothing recorded, nothing changed.
# ---------------------------------------------------------------------------

# -- tf.image's box ops (tapejax/ops/image_boxes.py, image_nms.py, image_sample.py) -----------------------

_IMG = np.linspace(0.0, 1.0, 2 * 4 * 4 * 1, dtype=np.float32).reshape(2, 4, 4, 1)
_BOXES = np.array([[0.0, 0.0, 1.0, 1.0], [0.2, 0.1, 0.9, 0.7]], np.float32)
_BOXES3 = np.array([[0.0, 0.0, 1.0, 1.0], [0.2, 0.1, 0.9, 0.7], [0.5, 0.5, 0.6, 0.6]], np.float32)
row("crop-and-resize-box-index-past-batch",
    lambda tf, w: tf.image.crop_and_resize(_IMG, _BOXES, [0, 2], [2, 2]),
    "OutOfRangeError", ["box_index", "box_indices", "batch_size 2"], world=recording)
row("crop-and-resize-method-bicubic", lambda tf, w: tf.image.crop_and_resize(_IMG, _BOXES, [0, 1], [2, 2], "bicubic"),
    "InvalidArgumentError", ["method", "bicubic", "bilinear", "nearest"], world=recording)
row("nms-iou-threshold-above-one",
    lambda tf, w: tf.image.non_max_suppression(_BOXES3, w.x, 1, iou_threshold=1.5),
    "InvalidArgumentError", ["iou_threshold", "[0, 1]", "1.5"], world=recording)
row("nms-negative-max-output-size", lambda tf, w: tf.image.non_max_suppression(_BOXES, [0.5, 0.4], -1),
    "InvalidArgumentError", ["max_output_size", "non-negative"], world=recording)
row("combined-nms-max-total-size-zero",
    lambda tf, w: tf.image.combined_non_max_suppression(_BOXES[None, :, None], [[[0.5], [0.4]]], 1, 0),
    "InvalidArgumentError", ["max_total_size", "> 0"], world=recording)
row("draw-bounding-boxes-two-channels",
    lambda tf, w: tf.image.draw_bounding_boxes(tf.zeros([1, 4, 4, 2]), [[[0.1, 0.1, 0.5, 0.5]]], [[1.0, 0.0]]),
    "InvalidArgumentError", ["Channel depth", "1 (GRY), 3 (RGB), or 4 (RGBA)", "2"], world=recording)
row("sample-distorted-bounding-box-area-above-one",
    lambda tf, w: tf.image.sample_distorted_bounding_box([4, 4, 1], [[[0.1, 0.1, 0.5, 0.5]]], seed=1,
                                                         area_range=[0.5, 1.5]),
    "InvalidArgumentError", ["Area range", "1.0", "1.5"], world=recording)


# tf.distribute and its loss helpers
_LOSSES = [1.0, 2.0, 3.0]
row("compute-average-loss-float-batch-size",
    lambda tf, w: tf.nn.compute_average_loss(_LOSSES, global_batch_size=4.0),
    "TypeError", ["global_batch_size", "integer", "float32"])
row("compute-average-loss-negative-batch-size",
    lambda tf, w: tf.nn.compute_average_loss(_LOSSES, global_batch_size=-2),
    "InvalidArgumentError", ["global_batch_size", "non-negative", "-2"])
row("compute-average-loss-scalar-loss", lambda tf, w: tf.nn.compute_average_loss(1.0),
    "ValueError", ["per_example_loss", "at least rank 1", "rank 0"])
row("strategy-run-args-not-a-sequence",
    lambda tf, w: tf.distribute.MirroredStrategy().run(lambda v: v, args=w.x),
    "ValueError", ["positional args", "list or tuple"])
row("strategy-reduce-unknown-op",
    lambda tf, w: tf.distribute.get_strategy().reduce("MAX", w.x, axis=None),
    "ValueError", ["MAX", "ReduceOp"])
row("one-device-strategy-device-not-a-string", lambda tf, w: tf.distribute.OneDeviceStrategy(3),
    "TypeError", ["`device`", "device name", "int"], tf_exc="AttributeError",
    note="TF splits the argument as a string (AttributeError: 'int' object has no attribute 'split')")

DEVICE_ROWS = []
_NO_TF_DEVICES = ("TF copies operands between devices itself (and has one CPU device here); "
                  "tapejax raises InvalidArgumentError naming the devices")


@contextlib.contextmanager
def two_devices(tf):
    """A persistent tape, recording, with x committed to device 0 and b = [1, 1, 1] on device 1."""
    import jax
    d0, d1 = jax.devices()[:2]
    w = _base(tf, True)
    w.x = tf.Tensor(jax.device_put(X, d0))
    w.b = tf.Tensor(jax.device_put(np.ones(3, np.float32), d1))
    with w.tape:
        w.tape.watch(w.x)
        w.y = tf.reduce_sum(w.x * w.x * w.v)
        w.xrow = tf.reshape(w.x, [1, 3])
        w.bcol = tf.reshape(w.b, [3, 1])
        w.x2 = w.x * 2.0
        yield w
    _grad_check(w)


def device_row(id, bad, words):
    DEVICE_ROWS.append(Row(id, two_devices, bad, "InvalidArgumentError", words, _NO_TF_DEVICES))


device_row("devices-add", lambda tf, w: w.x + w.b, ["device", "Op:AddV2"])
device_row("devices-matmul", lambda tf, w: tf.matmul(w.xrow, w.bcol), ["device", "Op:MatMul", "[1, 3]", "[3, 1]"])
device_row("devices-concat", lambda tf, w: tf.concat([w.x, w.b], axis=0), ["device", "Op:ConcatV2"])
