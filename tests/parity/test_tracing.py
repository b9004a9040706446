"""tf.function's tracing semantics and tf.print, under TensorFlow 2.21 and tapejax.

When the Python body runs (once per new input signature; twice on a first call that creates
Variables), tracing counts with input_signature / reduce_retracing, run_functions_eagerly,
TF's retracing warning, get_concrete_function, and tf.print's text at run time.
"""
import io
import os
import sys
import tempfile

import numpy as np

from .harness import parity, raises, warned


@parity
def test_python_side_effects_run_once_per_new_signature(tf):
    """A body reading and assigning a Variable runs once per new signature, never on a hit."""
    v = tf.Variable(1.0)
    calls = []

    @tf.function
    def f(x, n):
        calls.append((tuple(x.shape), n))
        v.assign_add(tf.reduce_sum(x))
        return v * n

    outs = [f(tf.constant(1.0), 2), f(tf.constant(2.0), 2), f(tf.constant(2.0), 3), f(tf.constant([2.0]), 3)]
    return outs, calls, f.experimental_get_tracing_count(), v


@parity
def test_a_function_that_creates_variables_traces_twice_on_its_first_call(tf):
    """TF's rule: the first call of a function that creates Variables traces twice."""
    made = []
    calls = []

    @tf.function
    def f(x, k):
        calls.append(1)
        if not made:
            made.append(tf.Variable(tf.ones([2]) * 3.0))
        made[0].assign_add(x * k)
        return made[0] * 2.0

    a = f(tf.constant([1.0, 1.0]), 1.0)
    b = f(tf.constant([1.0, 2.0]), 1.0)
    counts = [len(calls), f.experimental_get_tracing_count()]
    c = f(tf.constant([1.0, 2.0]), 2.0)   # a new Python value: one more trace
    return a, b, c, counts, len(calls), f.experimental_get_tracing_count(), made[0]


@parity
def test_creating_variables_on_every_call_or_later_is_an_error(tf):
    """ValueError for a Variable created by every trace, or first created by a later trace."""
    @tf.function
    def every(x):
        v = tf.Variable(1.0)
        return v + x

    n = [0]

    @tf.function
    def later(x):
        n[0] += 1
        if n[0] > 1:
            tf.Variable(1.0)
        return x

    later(tf.constant(1.0))
    return raises(every, tf.constant(1.0)), raises(later, tf.constant([1.0]))


@parity
def test_input_signature_with_a_none_dimension_traces_once(tf):
    """One trace for every batch size; values for each."""
    sizes = []

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        sizes.append(1)
        return tf.reduce_sum(x * 2.0, 0), tf.shape(x)[0]

    outs = [f(tf.ones([n, 3]) * n) for n in (1, 2, 5)]
    return outs, len(sizes), f.experimental_get_tracing_count(), raises(f, tf.ones([2, 4]))


@parity
def test_reduce_retracing_generalises_sizes(tf):
    """reduce_retracing=True: the second size traces a general shape that serves the rest."""
    @tf.function(reduce_retracing=True)
    def f(x):
        return x * 2.0

    counts = []
    for n in (1, 2, 5, 7):
        f(tf.ones([n, 3]))
        counts.append(f.experimental_get_tracing_count())
    for n in (4, 5, 6):
        f(tf.ones([n]))
        counts.append(f.experimental_get_tracing_count())
    return counts, f(tf.ones([3, 3]) * 2.0)


@parity
def test_run_functions_eagerly_runs_plain_python(tf):
    """run_functions_eagerly(True): the body runs every call with concrete values; no trace."""
    seen = []

    @tf.function
    def f(x):
        if x > 0:
            seen.append(float(x.numpy()))
        return x * 2.0

    tf.config.run_functions_eagerly(True)
    try:
        flag = tf.config.functions_run_eagerly()
        outs = [f(tf.constant(1.0)), f(tf.constant(2.0)), f(tf.constant(-1.0))]
    finally:
        tf.config.run_functions_eagerly(False)
    return flag, tf.config.functions_run_eagerly(), outs, seen, f.experimental_get_tracing_count()


@parity
def test_frequent_retracing_logs_a_warning(tf):
    """TF's warning at the fifth call in ten that retraces (and not before)."""
    @tf.function
    def f(x):
        return x + 1.0

    _, four = warned(lambda: [f(tf.ones([n])) for n in range(1, 5)])
    _, fifth = warned(lambda: f(tf.ones([5])))
    return four, fifth, f.experimental_get_tracing_count()


@parity
def test_get_concrete_function(tf):
    """A concrete function: its input signature (named after the parameter), a call, no new trace
    for an input_signature function."""
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        return tf.reduce_sum(x, 0)

    f(tf.ones([2, 3]))
    cf = f.get_concrete_function()
    args, kwargs = cf.structured_input_signature
    sig = [(s.shape.as_list(), s.dtype.name, s.name) for s in args]

    @tf.function
    def g(x, k):
        return x * k

    cg = g.get_concrete_function(tf.TensorSpec([2], tf.float32), 3.0)
    return (sig, kwargs, cf(tf.ones([4, 3])), f.experimental_get_tracing_count(),
            cg(tf.constant([1.0, 2.0])), g.experimental_get_tracing_count())


# -- tf.print ----------------------------------------------------------------------------------------


def _printed(tf, program):
    """Run ``program(path)`` and return what tf.print wrote to ``file://path``."""
    fd, path = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    try:
        program("file://" + path)
        with open(path) as fh:
            return fh.read()
    finally:
        os.remove(path)


@parity
def test_tf_print_inside_a_function_prints_at_run_time_each_call(tf):
    """Every call prints, in program order, values of that call (Python's print runs once)."""
    traced = io.StringIO()

    def program(out):
        @tf.function
        def step(x):
            print("tracing", file=traced)
            tf.print("step", x, output_stream=out)
            y = x * 2.0
            tf.print("y =", y, [y, 1], {"b": y, "a": 1}, output_stream=out)
            return y

        for v in (1.0, 2.5, -3.0):
            step(tf.constant(v))

    return _printed(tf, program), traced.getvalue()


@parity
def test_tf_print_in_a_converted_loop_prints_every_iteration(tf):
    """tf.print inside a staged loop and a staged branch prints at every iteration taken."""
    def program(out):
        @tf.function
        def f(n):
            s = 0
            for i in tf.range(n):
                if i % 2 == 0:
                    tf.print("even", i, output_stream=out)
                s += i
            tf.print("sum", s, output_stream=out)
            return s

        f(tf.constant(5))
        f(tf.constant(2))

    return _printed(tf, program)


@parity
def test_tf_print_formats_as_tensorflow(tf):
    """Floats (6 or 9 digits, float64 15 or 17), bools, summarize, rows, sep/end, eagerly and compiled."""
    def values():
        return [tf.constant(1 / 3), tf.constant(0.1), tf.constant([True, False]),
                tf.constant([1e10, 1e-5, 123456789.0, -0.0, 2.5]),
                tf.reshape(tf.range(100), [10, 10]), tf.reshape(tf.range(8), [2, 2, 2]),
                tf.constant([float("nan"), float("inf")]), tf.range(10)]

    def program(out):
        for v in values():
            tf.print(v, output_stream=out)
        tf.print(tf.reshape(tf.range(100), [10, 10]), summarize=-1, output_stream=out)
        tf.print(tf.range(10), summarize=1, output_stream=out)
        tf.print("a", 1, 2.5, None, [1, 2], (3, 4), sep="|", end="!\n", output_stream=out)

        @tf.function
        def f(xs):
            for v in xs:
                tf.print(v, output_stream=out)

        f(values())

    return _printed(tf, program)


@parity(x64=True)
def test_tf_print_float64(tf):
    """float64 with 15 or 17 significant digits."""
    def program(out):
        tf.print(tf.constant(1 / 3, tf.float64), tf.constant([0.1, 2.0], tf.float64), output_stream=out)

    return _printed(tf, program)


@parity
def test_tf_print_bad_output_stream(tf):
    """An output_stream that is no stream, file or logging function: ValueError."""
    return raises(tf.print, tf.constant(1.0), output_stream="stdout")


def test_tf_print_goes_to_stderr_by_default(capsys):
    """Default stream (TF's too): standard error, at run time."""
    import tapejax as tj

    @tj.function
    def f(x):
        tj.print("value", x)
        return x

    f(tj.constant(3.0))
    f(tj.constant(4.0))
    err = capsys.readouterr().err
    assert err == "value 3\nvalue 4\n"
    tj.print(tj.constant([1.5, 2.0]), output_stream=sys.stdout)
    assert capsys.readouterr().out == "[1.5 2]\n"


@parity
def test_nested_input_signature_dict_and_tuple_of_specs(tf):
    """An ``input_signature`` holding a dict with a tuple of specs (tf.data's dict elements): the
    argument keeps its structure, one trace serves every size of the None dimension, a list where
    the spec has a tuple, missing or extra keys and a short tuple are TypeErrors (it raised
    'input_signature must be a list or tuple of TensorSpec' before)."""
    traces = []

    @tf.function(input_signature=[{"a": tf.TensorSpec([None], tf.float32),
                                   "b": (tf.TensorSpec([], tf.int32), tf.TensorSpec([2], tf.float32))}])
    def f(d):
        traces.append((type(d).__name__, type(d["b"]).__name__))
        return d["a"] * 2.0, d["b"][0] + 1, d["b"][1]

    out = [f({"a": [1.0, 2.0], "b": (3, tf.constant([1.0, 2.0]))}),
           f({"b": (3, [1.0, 2.0]), "a": tf.constant([1.0, 2.0, 3.0])})]
    bad = [{"b": [3, [1.0, 2.0]], "a": [1.0]}, {"a": [1.0]}, {"a": [1.0], "b": (1, [1.0, 2.0]), "c": 1},
           {"a": [1.0], "b": (1,)}, [1.0], {"a": [1.0], "b": (1, [1.0, 2.0, 3.0])}]
    out += [raises(f, b) for b in bad]
    return out, traces, f.experimental_get_tracing_count()


@parity
def test_reduce_retracing_after_a_rank_change_keeps_the_other_arguments_relaxed(tf):
    """``reduce_retracing=True``: after sizes 4, 8, 12, 2 (two traces), a target of a new rank
    gives one more trace in which the features stay ``(None, 3)`` and a later size reuses it (it
    relaxed every leaf to unknown sizes, whose matmul against a (3, 1) weight could not trace
    symbolically, and traced each size again)."""
    x = np.arange(36, dtype=np.float32).reshape(12, 3) / 10.0
    y = np.ones((12, 1), np.float32)
    w = tf.Variable(np.ones((3, 1), np.float32))

    @tf.function(reduce_retracing=True)
    def loss_of(xb, yb):
        return tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)

    out = [loss_of(x[:n], y[:n]) for n in (4, 8, 12, 2)]
    counts = [loss_of.experimental_get_tracing_count()]
    out += [loss_of(x[:4], y[:4, 0]), loss_of(x[:5], y[:5, 0])]
    counts.append(loss_of.experimental_get_tracing_count())
    return out, counts


@parity
def test_a_decorated_method_is_a_function_per_instance(tf):
    """``@tf.function`` on a method: each instance has its own first call (where its optimizer
    makes its slots: a second instance's first call raised 'Creating variables on a non-first
    call' before) and its own tracing count."""
    class Lin(tf.Module):
        def __init__(self, w0):
            super().__init__()
            self.w = tf.Variable([w0])
            self.opt = tf.keras.optimizers.legacy.Adam(0.1)

        @tf.function
        def step(self, x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum((self.w * x - 1.0) ** 2)
            self.opt.apply_gradients([(tape.gradient(loss, self.w), self.w)])
            return loss

    a, b = Lin(0.5), Lin(-0.5)
    x = tf.constant([2.0])
    out = [a.step(x), b.step(x), a.step(x), b.step(x)]
    return out, a.w, b.w, a.step.experimental_get_tracing_count(), b.step.experimental_get_tracing_count()


@parity
def test_positional_keyword_and_default_calls_share_a_trace(tf):
    """TF binds a call to the function's signature with its defaults: ``f(x, y)``,
    ``f(x=x, y=y)``, ``f(x, y=y)`` and ``f(x, y, 2.0)`` (the default given) are one trace; another
    Python value of ``scale`` is a new one (each was a separate trace before)."""
    @tf.function
    def f(x, y, scale=2.0):
        return x * scale + y

    x, y = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
    out = [f(x, y), f(x=x, y=y), f(x, y=y), f(x, y, 2.0), f(x, y, scale=2.0)]
    counts = [f.experimental_get_tracing_count()]
    out += [f(x, y, 3.0), f(x, y, scale=3.0), f(x, y)]
    counts.append(f.experimental_get_tracing_count())
    return out, counts
