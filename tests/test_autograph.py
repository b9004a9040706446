"""AutoGraph in tapejax.function (tapejax/compile/autograph*.py).

Oracles: ``jax.vjp`` / plain NumPy of the same computation, TF 2.21's messages (quoted from
running TF; tests/parity/test_autograph.py runs the programs under TF), and the converted source.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.compile import autograph as ag


def test_to_code_shows_the_operators_and_to_graph_runs_eagerly():
    def f(x):
        if x > 0:
            y = x * x
        else:
            y = -x
        for i in tf.range(3):
            y = y + 1.0
        return y if y > 2.0 else 0.0 * y

    code = tf.autograph.to_code(f)
    assert code.startswith("def tf__f(x):")
    for op in ("ag__.if_stmt", "ag__.for_stmt", "ag__.if_exp", "ag__.converted_call"):
        assert op in code
    g = tf.autograph.to_graph(f)   # eagerly: concrete tensors take Python's branches
    assert g(tf.constant(2.0)).numpy() == 7.0 and g(tf.constant(-1.0)).numpy() == 4.0


def test_converted_while_equals_while_loop_in_values_and_gradients():
    """A converted `while` with maximum_iterations is the same program as tapejax.while_loop."""
    def converted(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y, i = x, 0
            while i < 6:
                tf.autograph.experimental.set_loop_options(maximum_iterations=6)
                y = tf.sin(y) + x
                i += 1
        return y, t.gradient(y, x)

    def functional(x):
        with tf.GradientTape() as t:
            t.watch(x)
            _, y = tf.while_loop(lambda i, y: i < 6, lambda i, y: (i + 1, tf.sin(y) + x),
                                 (tf.constant(0), x), maximum_iterations=6)
        return y, t.gradient(y, x)

    def pure(x):
        y = x
        for _ in range(6):
            y = jnp.sin(y) + x
        return y

    x = tf.constant([0.3, -1.2])
    a, b = tf.function(converted)(x), tf.function(functional)(x)
    want, vjp = jax.vjp(pure, x.numpy())
    for got in (a, b):
        np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(got[1].numpy(), vjp(np.ones(2, np.float32))[0], rtol=1e-5)


def test_range_loop_with_a_traced_bound():
    """`for i in tf.range(n)` with a traced n is a while loop; with set_loop_options(maximum_iterations)
    the tape differentiates it, without it the error says what to add."""
    @tf.function
    def f(x, n):
        with tf.GradientTape() as t:
            t.watch(x)
            y = x
            for _ in tf.range(n):
                tf.autograph.experimental.set_loop_options(maximum_iterations=8)
                y = y * x
        return y, t.gradient(y, x)

    y, g = f(tf.constant(1.5), tf.constant(3))
    assert (y.numpy(), g.numpy()) == pytest.approx((1.5 ** 4, 4 * 1.5 ** 3))
    y, g = f(tf.constant(1.5), tf.constant(0))
    assert (y.numpy(), g.numpy()) == (1.5, 1.0)

    @tf.function
    def h(x, n):
        with tf.GradientTape() as t:
            t.watch(x)
            y = x
            for _ in tf.range(n):
                y = y * x
        return t.gradient(y, x)

    with pytest.raises(ValueError, match="set_loop_options\\(maximum_iterations=N\\)"):
        h(tf.constant(1.5), tf.constant(3))
    assert f(tf.constant(2.0), tf.constant(2))[0].numpy() == 8.0   # forward mode is fine either way


def test_range_with_negative_and_traced_delta():
    @tf.function
    def f(a, b, d):
        s = 0
        for i in tf.range(a, b, d):
            s += i
        return s

    for a, b, d in ((10, 0, -3), (0, 10, 3), (0, 0, 1)):
        assert f(tf.constant(a), tf.constant(b), tf.constant(d)).numpy() == sum(range(a, b, d))


@pytest.mark.parametrize("use", ["stack", "times", "slice"])
def test_a_traced_range_used_as_a_tensor_says_why_it_cannot_compile(use):
    """``tf.range(n)`` with a traced ``n`` has a data-dependent length: only a converted ``for`` can
    iterate it; as a tensor (an op's operand, an operator, a slice) it raises ``TracedSizeError`` (a
    ValueError) naming the ``for`` loop and static sizes, not JAX's abstractification error."""
    @tf.function
    def f(n):
        r = tf.range(n)
        if use == "stack":
            return tf.stack([r, r])
        if use == "times":
            return r * 2
        return r[:-1]

    with pytest.raises(ValueError, match="data-dependent length.*`for` loop") as e:
        f(tf.constant(3))
    assert type(e.value).__name__ == "TracedSizeError"


def test_a_traced_range_in_unconverted_code_says_why_it_cannot_compile():
    @tf.function(autograph=False)
    def f(n):
        return tf.range(n) * 2

    with pytest.raises(ValueError, match="tf.range with `limit` known only when the compiled step runs"):
        f(tf.constant(3))
    assert f.python_function(tf.constant(3)).numpy().tolist() == [0, 2, 4]   # (eager: a plain range)


def test_error_names_the_user_line_and_keeps_tf_text():
    @tf.function
    def f(x):
        if x > 0:
            y = x * 2
        return y

    with pytest.raises(ValueError) as ei:
        f(tf.constant(1.0))
    msg = str(ei.value)
    assert msg.startswith("in user code:")
    assert 'test_autograph.py", line' in msg and "in f  *" in msg and "if x > 0:" in msg
    assert "ValueError: 'y' must also be initialized in the else branch" in msg
    assert "tapejax/compile" not in msg   # library frames are left out, as TF leaves out its own


def test_library_errors_keep_their_class_through_converted_code():
    @tf.function
    def f(x):
        if tf.reduce_sum(x) > 0:
            x = tf.reshape(x, [3, 3])
        return x

    with pytest.raises(tf.errors.InvalidArgumentError) as ei:
        f(tf.constant([1.0, 2.0]))
    assert "in user code:" in str(ei.value.message) and "tf.reshape(x, [3, 3])" in str(ei.value)


def test_do_not_convert_autograph_false_and_concretization_errors():
    @tf.autograph.experimental.do_not_convert
    def nc(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="do_not_convert"):
        tf.function(lambda x: nc(x))(tf.constant(1.0))
    with pytest.raises(TypeError, match="tapejax.cond"):
        tf.function(nc.__wrapped__, autograph=False)(tf.constant(1.0))
    assert nc(tf.constant(-2.0)).numpy() == 2.0   # eagerly it is plain Python


def test_recursive_conversion_of_functions_methods_lambdas_and_partials():
    import functools

    def helper(x, k):
        if x > 0:
            return x * k
        return -x

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.k = 3.0

        def __call__(self, x):
            while x < 10.0:
                tf.autograph.experimental.set_loop_options(maximum_iterations=50)
                x = x * self.k
            return x

    m = Model()

    @tf.function
    def f(x):
        part = functools.partial(helper, k=5.0)
        return part(x) + m(x) + (lambda z: z if z > 1.0 else 0.0 * z)(x)

    assert f(tf.constant(2.0)).numpy() == 10.0 + 18.0 + 2.0
    assert f(tf.constant(0.5)).numpy() == 2.5 + 13.5 + 0.0


def test_jax_arrays_and_variables_as_conditions():
    v = tf.Variable(2.0)

    @tf.function
    def f(x):
        z = jnp.asarray(x._value) * 2.0   # a raw JAX tracer in user code
        if z > 1.0:
            r = x + 1.0
        else:
            r = x - 1.0
        if v > 1.0:
            r = r * v
        return r

    assert f(tf.constant(1.0)).numpy() == 4.0
    v.assign(0.5)
    assert f(tf.constant(0.0)).numpy() == -1.0


def test_optional_features():
    F = tf.autograph.experimental.Feature

    @tf.function(experimental_autograph_options=F.EQUALITY_OPERATORS)
    def eq(x):
        if x == 0:
            return tf.constant(1)
        return tf.constant(2)

    assert (eq(tf.constant(0)).numpy(), eq(tf.constant(3)).numpy()) == (1, 2)

    @tf.function(experimental_autograph_options=F.ASSERT_STATEMENTS)
    def check(x):
        assert x > 0, "x must be positive"
        return x

    assert check(tf.constant(1.0)).numpy() == 1.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="x must be positive"):
        check(tf.constant(-1.0))


def test_builtin_print_with_the_feature_prints_values_at_run_time(capsys):
    F = tf.autograph.experimental.Feature

    @tf.function(experimental_autograph_options=(F.BUILTIN_FUNCTIONS,))
    def f(x):
        print("x is", x)
        return x

    f(tf.constant(1.5))
    f(tf.constant(2.5))
    assert capsys.readouterr().out == "x is 1.5\nx is 2.5\n"

    @tf.function
    def g(x):   # without it, Python's print runs while tracing (TF's default)
        print("tracing", type(x).__name__)
        return x

    g(tf.constant(1.0))
    g(tf.constant(2.0))
    assert capsys.readouterr().out == "tracing Tensor\n"


def test_converted_code_called_from_a_host_callback_runs_as_python():
    """A lambda defined in converted code and run by jax.debug.callback sees concrete values:
    its control flow is Python's (only the branch taken runs)."""
    seen = []

    def check(i, x):
        if int(x) == 3 and i == 1:
            seen.append("three")

    @tf.function
    def f(x):
        for i in range(2):
            jax.debug.callback(lambda val, i=i: check(i, val), x._value)
        return x

    f(tf.constant(1.0))
    f(tf.constant(3.0))
    jax.effects_barrier()
    assert seen == ["three"]


def test_without_malt_functions_run_unconverted_and_the_api_names_the_extra(monkeypatch):
    monkeypatch.setattr(ag, "_MISSING", True)

    @tf.function
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TypeError, match=r"pip install tapejax\[autograph\]"):
        f(tf.constant(1.0))
    with pytest.raises(ImportError, match=r"tapejax\[autograph\]"):
        tf.autograph.to_code(lambda x: x)
    with pytest.raises(ImportError, match=r"tapejax\[autograph\]"):
        tf.autograph.experimental.Feature
    assert tf.autograph.experimental.do_not_convert(abs)(-2) == 2


def test_code_without_source_runs_as_is():
    ns = {}
    exec("def g(x):\n    return x * 2.0\n", {"tf": tf}, ns)   # no source file: AutoGraph cannot read it

    @tf.function
    def f(x):
        return ns["g"](x)

    assert f(tf.constant(2.0)).numpy() == 4.0


def test_converted_loops_keep_structures_and_python_numbers():
    @tf.function
    def f(xs):
        acc = {"sum": 0.0, "pair": (tf.constant(0), tf.constant(1))}
        for x in xs:
            acc = {"sum": acc["sum"] + x, "pair": (acc["pair"][1], acc["pair"][0] + acc["pair"][1])}
        return acc

    out = f(tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert out["sum"].numpy() == 15.0 and [p.numpy() for p in out["pair"]] == [5, 8]


def test_for_loop_registry_hands_a_type_to_its_own_loop():
    """TF's hook (malt's for_loop_registry): a registered iterable type runs its own loop."""
    from malt.operators.control_flow import for_loop_registry

    class Batches:
        def __init__(self, n):
            self.n = n

    def batches_loop(iter_, extra_test, body, get_state, set_state, symbol_names, opts):
        for i in range(iter_.n):   # (a real handler would stage it)
            body(tf.constant(float(i)))

    for_loop_registry.register(Batches, batches_loop)

    @tf.function
    def f(b):
        s = tf.constant(0.0)
        for x in b:
            s += x
        return s

    assert f(Batches(4)).numpy() == 6.0


def test_a_conditional_known_while_tracing_whose_branches_differ_in_shape_runs_its_branch():
    """A staged ``if`` whose predicate is a constant of the trace (``tf.cast`` of a Python number
    folds, as TF's ``constant_value``) and whose branches give a variable different shapes: both
    branches run once at trace time (TF's staging), then the selected one again, whose values the
    function returns.  On a traced predicate the same branches are TF's shape error (a ValueError
    naming the variable): XLA's conditionals have one shape."""
    runs = []

    @tf.function
    def f(n):
        xs = tf.range(n)
        if not tf.cast(len(xs), bool):
            runs.append("main")
            xs = tf.constant([5])
        else:
            runs.append("else")
        return xs

    np.testing.assert_array_equal(f(0).numpy(), [5])
    assert runs == ["main", "else", "main"]
    np.testing.assert_array_equal(f(2).numpy(), [0, 1])
    assert runs[3:] == ["main", "else", "else"]

    @tf.function
    def g(x):
        s = tf.constant([1.0])
        if x > 0:
            s = tf.constant([1.0, 2.0])
        return tf.reduce_sum(s)

    with pytest.raises(ValueError, match="'s' has shape"):
        g(tf.constant(1.0))


def test_cast_of_a_python_number_while_tracing_is_a_static_value():
    """``tf.cast(3.7, tf.int32)`` inside a ``tapejax.function`` is a ``StaticTensor`` (ops on it
    fold while tracing), with the eager cast's value and dtype; outside a trace a plain Tensor."""
    from tapejax.core.tensor import StaticTensor
    seen = []

    @tf.function
    def f():
        a, b, c = tf.cast(3.7, tf.int32), tf.cast(2, tf.bool), tf.cast(-1, tf.float32)
        seen.extend([type(a), type(b), type(c), type(tf.logical_not(b))])
        return a, b, c

    got = [t.numpy() for t in f()]
    assert seen == [StaticTensor] * 4
    want = [tf.cast(3.7, tf.int32), tf.cast(2, tf.bool), tf.cast(-1, tf.float32)]
    assert [type(w) for w in want] == [tf.Tensor] * 3
    for g, w in zip(got, want):
        assert g.dtype == w.numpy().dtype and g == w.numpy()


def test_converted_len_of_a_size_the_signature_leaves_unknown_is_a_tensor():
    """TF's converted ``len(x)``: the static length as an int, else ``tf.shape(x)[0]`` (a tensor), not
    the trace's symbolic size (an ``input_signature`` with None)."""
    f = tf.function(lambda a: len(a), input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    for n in (3, 5):
        r = f(tf.zeros([n, 2]))
        assert isinstance(r, tf.Tensor) and int(r) == n
    assert int(tf.function(lambda a: len(a))(tf.zeros([4, 2]))) == 4


def _rnn_over_a_symbolic_size_traces() -> int:
    """A new ``tapejax.function`` looping ``for t in tf.range(tf.shape(x)[1])`` under
    ``input_signature=[TensorSpec([None, None, 3])]``, differentiated by a tape for two shapes
    (each gradient checked against ``jax.grad`` of the same loop); its tracing count."""
    w0 = np.full((3, 4), 0.1, np.float32)
    w = tf.Variable(w0)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32)])
    def last(x):
        h = tf.zeros([tf.shape(x)[0], 4])
        for t in tf.range(tf.shape(x)[1]):
            h = tf.tanh(tf.matmul(x[:, t], w) + h)
        return h

    def ref(wv, x):
        h = jnp.zeros((x.shape[0], 4))
        for t in range(x.shape[1]):
            h = jnp.tanh(x[:, t] @ wv + h)
        return jnp.sum(h ** 2)

    for shape in ((2, 5, 3), (3, 2, 3)):
        x = np.random.RandomState(sum(shape)).randn(*shape).astype(np.float32)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(last(tf.constant(x)) ** 2)
        np.testing.assert_allclose(tape.gradient(loss, w).numpy(), jax.grad(ref)(w0, x), rtol=1e-5, atol=1e-6)
    return last.experimental_get_tracing_count()


def test_a_for_over_the_range_of_a_symbolic_size_is_a_scan_that_differentiates():
    """The size is symbolic in the one trace, and the range is a tensor of that length, so the loop
    is a scan (it was a while of traced length: the tape's gradient raised
    UnboundedWhileGradientError; TF's works); one trace for two shapes, ``jax.grad``'s gradient."""
    assert _rnn_over_a_symbolic_size_traces() == 1


def test_two_functions_with_the_same_loop_over_a_symbolic_size_each_trace_once():
    """Two ``tapejax.function`` objects whose symbolic traces give the same loop body (the same
    jaxpr text, ``d0`` in both) each keep their own body: the second's scan does not reuse the
    first's, whose ``d0`` is another trace's size (it failed the carry check, and the function
    fell back to a trace per shape: 3 traces where TF makes one).  Oracle: ``jax.grad``."""
    assert [_rnn_over_a_symbolic_size_traces(), _rnn_over_a_symbolic_size_traces()] == [1, 1]
