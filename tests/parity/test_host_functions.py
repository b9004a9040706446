"""tf.py_function, tf.numpy_function and tf.init_scope (tapejax/compile/host.py) under TensorFlow and
tapejax: values, gradients (py_function's is the tape's gradient of the Python function, numpy_function
has none), run-time calls inside a tf.function, TF's error classes."""
import numpy as np

from .harness import parity, raises

X = np.array([1.0, 2.0, 3.0], np.float32)


@parity(modes=True)
def test_py_function_eager_and_in_function(tf):
    """Eager: called now, differentiable by the tape; in a function: run on every call with that
    call's values, its gradient through the tape inside the function."""
    x = tf.constant(X)

    def f(a):
        return a * a + tf.sin(a)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.py_function(f, [x], tf.float32)
    g_eager = t.gradient(y, x)

    @tf.function
    def step(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            out = tf.py_function(f, [v], tf.float32)
            loss = tf.reduce_sum(out * 2.0)
        return out, tape.gradient(loss, v)
    two = tf.py_function(lambda a, b: (a + b, a * b), [x, 2.0], [tf.float32, tf.float32])
    none = tf.py_function(lambda: None, [], [])
    return y, g_eager, step(x), step(x * 2.0), two, none


@parity(modes=True)
def test_py_function_reads_python_state_at_run_time(tf):
    """Each run of the compiled step calls the Python function with the run's values and sees the
    Python state of that moment (the trace-time shape probe is not counted: only results)."""
    scale = [2.0]

    def f(a):
        return a * scale[0]
    step = tf.function(lambda v: tf.py_function(f, [v], tf.float32) + 1.0)
    first = step(tf.constant(X))
    scale[0] = 10.0
    second = step(tf.constant(X))
    return first, second


@parity(modes=True)
def test_numpy_function_values_and_no_gradient(tf):
    x = tf.constant(X)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.numpy_function(lambda a: np.sinh(a), [x], tf.float32)
        z = y * x
    grads = t.gradient(z, x)

    @tf.function
    def h(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            s = tf.numpy_function(lambda a: (a * 3.0).astype(np.float32), [v], tf.float32, stateful=False)
            loss = tf.reduce_sum(s)
        return s, tape.gradient(loss, v)
    return y, grads, h(x), tf.numpy_function(lambda a: a.sum(), [x], tf.float32)


@parity
def test_py_function_errors(tf):
    """TF's classes: func not callable ValueError, an exception in func (ValueError ->
    InvalidArgumentError, RuntimeError -> UnknownError, StopIteration -> OutOfRangeError),
    a result of another dtype InvalidArgumentError; eagerly and in a function at run time."""
    x = tf.constant(X)

    def fails(kind):
        def f(a):
            if kind == "value":
                raise ValueError("bad value")
            if kind == "runtime":
                raise RuntimeError("boom")
            raise StopIteration("done")
        return f

    def at_run_time(a):
        if a.numpy()[0] > 5.0:
            raise ValueError("too big")
        return a * 2.0
    fn = tf.function(lambda v: tf.py_function(at_run_time, [v], tf.float32))
    ok = fn(x)
    return (raises(tf.py_function, 3, [x], tf.float32),
            raises(tf.py_function, fails("value"), [x], tf.float32),
            raises(tf.py_function, fails("runtime"), [x], tf.float32),
            raises(tf.py_function, fails("stop"), [x], tf.float32),
            raises(tf.py_function, lambda a: tf.constant([1, 2, 3]), [x], tf.float32),
            ok, raises(fn, tf.constant([10.0, 1.0, 1.0])))


@parity(modes=True)
def test_init_scope_runs_eagerly_and_pauses_the_tape(tf):
    """In a function the block is eager (a Variable made there lazily is a plain Variable, the
    function uses it); a tape records nothing in the block."""
    holder = {}
    flags = []

    @tf.function
    def f(x):
        with tf.init_scope():
            flags.append(tf.executing_eagerly())
            if "v" not in holder:
                holder["v"] = tf.Variable(tf.constant([1.0, 2.0, 3.0]) * 2.0)
        flags.append(tf.executing_eagerly())
        return x * holder["v"]
    out = f(tf.constant(X))
    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with tf.init_scope():
            y = x * x
        z = x * 3.0
    return out, holder["v"], flags[:2], t.gradient(y, x), t.gradient(z, x)


@parity(modes=True)
def test_init_scope_reads_variables_as_they_are_outside_the_function(tf):
    """A Variable the function assigned (or read) before the block reads there as it was before
    the call (TF's eager context); after the block the function sees its own values again."""
    v = tf.Variable(1.0)
    w = tf.Variable(10.0)
    seen = []

    @tf.function
    def f():
        v.assign(v + 4.0)
        r = w * 2.0
        with tf.init_scope():
            seen.append((v.numpy(), w.numpy()))
        w.assign_add(1.0)
        return v.read_value(), r

    return f(), seen, v, w


@parity(modes=True)
def test_host_functions_in_a_function_under_an_outer_tape(tf):
    """A compiled function holding a py_function / numpy_function, called under an eager tape:
    py_function's gradient flows through it, numpy_function's is None; float16 results."""
    x = tf.constant([1.0, 2.0])
    f = tf.function(lambda v: tf.py_function(lambda a: a * a, [v], tf.float32) * 3.0)
    g = tf.function(lambda v: tf.numpy_function(lambda a: a * a, [v], tf.float32) * 3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = f(x)
        z = g(x)
    h = tf.function(lambda v: tf.numpy_function(lambda a: (a * a).astype(np.float16), [v], tf.float16))
    return y, t.gradient(y, x), z, t.gradient(z, x), h(tf.constant([1.5, 2.0], tf.float16))


@parity(modes=True)
def test_host_functions_in_dataset_map_with_int64_elements(tf):
    """The tf.data idiom: ``map`` a ``numpy_function`` (and a ``py_function``) over ``Dataset.range``,
    whose elements are int64 in TF (int32 storage in tapejax without x64); ``Tout=tf.int64`` is
    what TF code writes.  Each element gets the function's own result, called once per element."""
    calls = []

    def double(x):
        calls.append(int(x))
        return x * 2

    ds = tf.data.Dataset.range(6).map(lambda x: tf.numpy_function(double, [x], tf.int64))
    ds = ds.map(lambda y: (y, tf.py_function(lambda v: tf.cast(v, tf.float32) / 4.0, [y], tf.float32)))
    calls.clear()   # (TF calls nothing at map() time; tapejax traces once: only iteration is compared)
    out = [(int(a), float(b)) for a, b in ds]
    return out, calls
