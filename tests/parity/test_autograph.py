"""AutoGraph in tf.function: the same converted programs under TensorFlow 2.21 and tapejax.

Values, gradients (a tape inside the function, and an outer tape around it), what runs as
Python, and TF's errors (class compared; messages are TF's own text, checked in
tests/test_autograph.py).
"""
import numpy as np

from .harness import parity, raises

# -- if / elif / else, conditional expressions, and / or / not ----------------------------------


@parity
def test_if_elif_else_on_a_tensor_values_and_gradients(tf):
    """Each branch of an if/elif/else on a tensor, and the gradient through the one taken."""
    @tf.function
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            if x > 2.0:
                y = x * x
            elif x > 0.0:
                y = 3.0 * x
            else:
                y = -x
        return y, t.gradient(y, x)

    return [f(tf.constant(v)) for v in (3.0, 1.0, -2.0)]


@parity
def test_conditional_expression_and_logical_operators(tf):
    """`a if c else b`, `and`, `or`, `not` and a chained comparison on tensors."""
    @tf.function
    def f(x, y):
        a = x > 0 and y > 0
        b = x > 0 or y > 0
        c = not x > 0
        d = x if x > y else y
        e = 0.0 < x < 2.0
        return a, b, c, d, e

    return f(tf.constant(1.0), tf.constant(-2.0)), f(tf.constant(-1.0), tf.constant(5.0))


@parity
def test_branch_returns_on_a_tensor(tf):
    """`return` in both branches of a tensor `if`."""
    @tf.function
    def f(x):
        if x > 0:
            return x * 10.0
        return -x

    return f(tf.constant(2.0)), f(tf.constant(-3.0))


@parity
def test_if_with_an_unused_branch_variable(tf):
    """A variable defined in one branch only is fine when nothing reads it afterwards."""
    @tf.function
    def f(x):
        y = x
        if x > 0:
            tmp = x * 2.0
            y = tmp + 1.0
        return y

    return f(tf.constant(1.0)), f(tf.constant(-1.0))


# -- loops ----------------------------------------------------------------------------------------


@parity
def test_while_on_a_tensor_with_maximum_iterations_and_its_gradient(tf):
    """A converted while with set_loop_options(maximum_iterations) differentiates on the tape."""
    @tf.function
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = x
            while y < 10.0:
                tf.autograph.experimental.set_loop_options(maximum_iterations=20)
                y = y * 1.5
        return y, t.gradient(y, x)

    return f(tf.constant(1.0)), f(tf.constant(20.0))


@parity
def test_for_over_tf_range_and_over_tensor_rows(tf):
    """`for i in tf.range(n)` (Python and tensor n) and `for row in tensor`."""
    @tf.function
    def f(x, n):
        s = tf.constant(0.0)
        for i in tf.range(n):
            s = s + tf.cast(i, tf.float32) * x
        r = tf.zeros([2])
        for row in tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]):
            r = r + row * x
        return s, r

    return f(tf.constant(2.0), 4), f(tf.constant(2.0), tf.constant(5)), f(tf.constant(1.0), tf.constant(0))


@parity
def test_gradient_through_a_range_loop_inside_the_function(tf):
    """x ** (n + 1) by a loop over tf.range(n), differentiated by a tape inside the function."""
    @tf.function
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = x
            for _ in tf.range(3):
                y = y * x
        return y, t.gradient(y, x)

    return f(tf.constant(1.5))


@parity
def test_break_and_continue_in_a_tensor_loop(tf):
    """break and continue inside a loop over tf.range on a tensor condition."""
    @tf.function
    def f(n):
        s = 0
        for i in tf.range(n):
            if i > 5:
                break
            if i % 2 == 0:
                continue
            s += i
        k = 0
        while k < n:
            k += 1
            if k * k > n:
                break
        return s, k

    return f(tf.constant(10)), f(tf.constant(3))


@parity
def test_unconditional_return_in_a_tensor_loop(tf):
    """A return as the loop body's last word: the loop stops at its first iteration."""
    @tf.function
    def f(n):
        for i in tf.range(n):
            return i * 7
        return -1

    return f(tf.constant(3))


@parity
def test_variable_first_defined_inside_the_loop(tf):
    """A loop variable first set inside the loop (TF stages one iteration to learn its type)."""
    @tf.function
    def f(n):
        for i in tf.range(n):
            y = tf.cast(i, tf.float32) * 2.0
        return y, i

    return f(tf.constant(3)), raises(f, tf.constant(0))


@parity
def test_python_loops_and_conditions_on_python_values_unroll(tf):
    """Python values keep Python control flow: the body runs at trace time, once per value."""
    calls = []

    @tf.function
    def f(x, flag):
        for i in range(3):
            calls.append(i)
            x = x * 2.0
        n = 0
        while n < 2:
            x += 1.0
            n += 1
        if flag:
            x = -x
        return x

    a = f(tf.constant(1.0), True)
    b = f(tf.constant(1.0), False)
    return a, b, list(calls)


@parity
def test_staged_loop_body_is_traced_once(tf):
    """A staged loop's body runs once at trace time, whatever the number of iterations."""
    calls = []

    @tf.function
    def f(n):
        s = 0.0
        for i in tf.range(n):
            calls.append(1)
            s += 1.0
        return s

    return f(tf.constant(5)), len(calls)


@parity
def test_shape_invariant_that_holds(tf):
    """set_loop_options(shape_invariants=...) with a loop variable that keeps its shape."""
    @tf.function
    def f(n):
        s = tf.zeros([2])
        i = 0
        while i < n:
            tf.autograph.experimental.set_loop_options(shape_invariants=[(s, tf.TensorShape([None]))])
            s = s + 1.0
            i += 1
        return s

    return f(tf.constant(3))


# -- recursive conversion ---------------------------------------------------------------------------


def _helper(x):
    if x > 0:
        return x * 10.0
    return x


class _Scale:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        if x > 0:
            x = x * self.k
        return x


@parity
def test_called_functions_lambdas_and_methods_are_converted(tf):
    """Functions, lambdas and methods called from a converted function are converted too."""
    m = _Scale(3.0)

    @tf.function
    def f(x):
        return _helper(x) + (lambda z: z if z > 0 else -z)(x) + m.apply(x)

    return f(tf.constant(2.0)), f(tf.constant(-2.0))


# -- gradients from outside --------------------------------------------------------------------------


@parity
def test_outer_tape_through_a_function_with_converted_control_flow(tf):
    """A GradientTape around the call differentiates through converted `if` and `for`."""
    @tf.function
    def f(x):
        y = x
        for row in tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]):
            y = y * (row + 1.0)
        if tf.reduce_sum(y) > 0:
            y = y * 2.0
        else:
            y = -y
        return y

    x = tf.constant([1.0, -2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    x2 = tf.constant([-1.0, -2.0])
    with tf.GradientTape() as t2:
        t2.watch(x2)
        y2 = f(x2)
    return y, t.gradient(y, x), y2, t2.gradient(y2, x2)


@parity
def test_nested_tapes_through_a_converted_loop(tf):
    """Second derivative of x ** 4 (a loop over tf.range) by nested tapes inside the function."""
    @tf.function
    def f(x):
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = x
                for _ in tf.range(3):
                    y = y * x
            g = t1.gradient(y, x)
        return g, t2.gradient(g, x)

    return f(tf.constant(1.5))


# -- TF's errors ----------------------------------------------------------------------------------------


@parity
def test_variable_defined_in_one_branch_only(tf):
    """ValueError naming the variable (TF: 'y' must also be initialized in the else branch)."""
    @tf.function
    def f(x):
        if x > 0:
            y = x * 2
        return y

    return raises(f, tf.constant(1.0))


@parity
def test_branches_give_different_dtypes(tf):
    """TypeError: 'y' has dtype int32 in the main branch, but dtype float32 in the else branch."""
    @tf.function
    def f(x):
        if x > 0:
            y = 1
        else:
            y = 2.0
        return y

    return raises(f, tf.constant(1.0))


@parity
def test_return_in_one_branch_only(tf):
    """ValueError: the else branch must also have a return statement."""
    @tf.function
    def f(x):
        if x > 0:
            return x
        x = x + 1

    return raises(f, tf.constant(1.0))


@parity
def test_loop_variable_changes_dtype(tf):
    """TypeError: 's' has dtype int32 before the loop, but dtype float32 after one iteration."""
    @tf.function
    def f(n):
        s = tf.constant(0)
        i = 0
        while i < n:
            s = tf.cast(s, tf.float32) + 1.0
            i += 1
        return s

    return raises(f, tf.constant(3))


@parity
def test_loop_variable_changes_shape(tf):
    """ValueError: 's' has shape (1,) before the loop, but shape (2,) after one iteration."""
    @tf.function
    def f(n):
        s = tf.zeros([1])
        i = 0
        while i < n:
            s = tf.concat([s, [1.0]], 0)
            i += 1
        return s

    return raises(f, tf.constant(3))


@parity
def test_loop_variable_breaks_its_shape_invariant(tf):
    """ValueError: 's' has shape (2,) before the loop, which does not conform with the invariant."""
    @tf.function
    def f(n):
        s = tf.zeros([2])
        i = 0
        while i < n:
            tf.autograph.experimental.set_loop_options(shape_invariants=[(s, tf.TensorShape([3]))])
            s = s + 1.0
            i += 1
        return s

    return raises(f, tf.constant(3))


@parity
def test_loop_variable_changes_structure(tf):
    """TypeError: 's' does not have the same nested structure after one iteration."""
    @tf.function
    def f(n):
        s = (tf.constant(0.0), tf.constant(1.0))
        i = 0
        while i < n:
            s = [s[0] + 1.0, s[1]]
            i += 1
        return s

    return raises(f, tf.constant(3))


@parity
def test_conditions_must_be_boolean_scalars(tf):
    """ValueError for a float condition (if, while) and for a boolean vector."""
    @tf.function
    def f(x):
        if x:
            y = 1.0
        else:
            y = 2.0
        return y

    @tf.function
    def g(x):
        while x:
            x = x - 1
        return x

    return raises(f, tf.constant(1.0)), raises(f, tf.constant([True, False])), raises(g, tf.constant(3))


@parity
def test_conditional_return_in_a_tensor_loop_is_not_supported(tf):
    """NotImplementedError: a return statement cannot be placed inside this TensorFlow loop."""
    @tf.function
    def f(x):
        while x < 100.0:
            x = x * 2.0
            if x > 50.0:
                return x
        return x

    return raises(f, tf.constant(1.0))


@parity
def test_tensor_break_in_a_python_loop(tf):
    """NotImplementedError: break on a tensor condition inside a Python for loop."""
    @tf.function
    def f(x):
        for _ in range(5):
            if x > 3.0:
                break
            x = x + 1.0
        return x

    @tf.function
    def g(x):
        n = 0
        while n < 3:
            n = n + x
        return n

    return raises(f, tf.constant(1.0)), raises(g, tf.constant(1))


@parity
def test_do_not_convert_and_autograph_false_keep_python_control_flow(tf):
    """OperatorNotAllowedInGraphError (a TypeError) for `if` on a tensor in unconverted code."""
    @tf.autograph.experimental.do_not_convert
    def nc(x):
        if x > 0:
            return x
        return -x

    @tf.function
    def uses(x):
        return nc(x)

    def plain(x):
        if x > 0:
            return x
        return -x

    return (raises(uses, tf.constant(2.0), ok=("TypeError",)),
            raises(tf.function(plain, autograph=False), tf.constant(2.0), ok=("TypeError",)))


@parity
def test_error_in_converted_code_keeps_its_class(tf):
    """An error raised by user code inside a converted function keeps its class."""
    @tf.function
    def f(x):
        if x > 0:
            raise KeyError("no such key")
        return x

    return raises(f, tf.constant(1.0))


# -- deliberate differences: XLA's static shapes -----------------------------------------------------


_XLA = ("XLA compiles static shapes: a loop variable that really changes shape (allowed in TF under a "
        "shape invariant) and branches that give different shapes are ValueErrors naming the variable")


@parity(tapejax_expected={"grow": "ValueError", "branches": "ValueError"}, deliberate=_XLA)
def test_shapes_that_change_under_an_invariant_or_between_branches(tf):
    """TF: [0 1 1 1] and a (2,)/(3,) conditional; tapejax: ValueError for both (XLA's shapes)."""
    @tf.function
    def grow(n):
        s = tf.zeros([1])
        i = 0
        while i < n:
            tf.autograph.experimental.set_loop_options(shape_invariants=[(s, tf.TensorShape([None]))])
            s = tf.concat([s, [1.0]], 0)
            i += 1
        return s

    @tf.function
    def branches(x):
        if x > 0:
            y = tf.zeros([2])
        else:
            y = tf.zeros([3])
        return y

    def cls(fn, *a):
        try:
            fn(*a)
        except Exception as e:  # noqa: BLE001
            return type(e).__name__
        return "returned"

    return {"grow": cls(grow, tf.constant(3)), "branches": cls(branches, tf.constant(1.0))}


def test_tf_runs_what_tapejax_refuses():
    """The TF side of the deliberate difference above: TF runs both programs."""
    import pytest
    tf = pytest.importorskip("tensorflow")

    @tf.function
    def grow(n):
        s = tf.zeros([1])
        i = 0
        while i < n:
            tf.autograph.experimental.set_loop_options(shape_invariants=[(s, tf.TensorShape([None]))])
            s = tf.concat([s, [1.0]], 0)
            i += 1
        return s

    np.testing.assert_array_equal(grow(tf.constant(3)).numpy(), [0.0, 1.0, 1.0, 1.0])


# -- a realistic program --------------------------------------------------------------------------------

_XS = np.random.RandomState(7).randn(6, 16, 4).astype("float32")
_YS = np.random.RandomState(8).randint(0, 3, size=(6, 16)).astype("int32")


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_training_with_converted_control_flow_a_metric_and_evaluations(tf):
    """A model trained for six steps: gradient clipping by a converted `if`, a `while` that warms the
    learning rate up, an evaluation between steps counting right answers in a converted loop, a
    best-loss metric kept eagerly; deferred execution on and off."""
    rng = np.random.RandomState(3)
    w1 = tf.Variable(rng.randn(4, 8).astype("float32") * 0.5)
    w2 = tf.Variable(rng.randn(8, 3).astype("float32") * 0.5)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    best = tf.Variable(1e9)
    seen = tf.Variable(0)

    def logits(x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)

    @tf.function
    def train_step(x, y, step):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits(x)))
        grads = tape.gradient(loss, [w1, w2])
        clipped = []
        for g in grads:                       # a Python loop over a list: unrolled
            n = tf.norm(g)
            if n > 1.0:                       # a tensor condition: a staged cond
                g = g / n
            clipped.append(g)
        scale = tf.constant(1.0)
        k = tf.constant(0)
        while k < step:                       # warm-up factor min(1, 0.5 * 1.5 ** step)
            tf.autograph.experimental.set_loop_options(maximum_iterations=10)
            scale = scale * 1.5
            k += 1
        scale = tf.minimum(scale * 0.5, 1.0)
        opt.apply_gradients(zip([g * scale for g in clipped], [w1, w2]))
        return loss, scale

    @tf.function
    def evaluate(x, y):
        pred = tf.argmax(logits(x), axis=1, output_type=tf.int32)
        right = 0
        for i in tf.range(tf.shape(x)[0]):
            if pred[i] == y[i]:
                right += 1
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits(x)))
        return loss, right

    history = []
    for step in range(6):
        loss, scale = train_step(tf.constant(_XS[step]), tf.constant(_YS[step]), tf.constant(step))
        history.append((loss, scale))
        if step % 2 == 1:
            el, right = evaluate(tf.constant(_XS[0]), tf.constant(_YS[0]))
            if el < best:
                best.assign(el)
            seen.assign_add(right)
    return history, best, seen, w1, w2, train_step.experimental_get_tracing_count()


# -- Variables assigned in converted control flow -----------------------------------------------------


@parity(modes=True)
def test_variables_assigned_in_converted_branches_and_loops(tf):
    """assign / assign_add under a tensor `if` and in a tensor `for` (TF's stateful control flow)."""
    v = tf.Variable(1.0)
    c = tf.Variable(0)

    @tf.function
    def f(x):
        if x > 0:
            v.assign_add(x)
            c.assign_add(1)
        for _ in tf.range(3):
            v.assign(v * 2.0)
        return v * 1.0

    return f(tf.constant(1.0)), v.numpy(), f(tf.constant(-1.0)), v, c, f.experimental_get_tracing_count()


@parity(modes=True)
def test_training_loop_inside_a_function(tf):
    """Three optimizer steps in a `for` over tf.range inside the function (the optimizer creates its
    iteration counter inside the loop on the first call)."""
    w = tf.Variable([[1.0], [2.0]])
    x = tf.constant([[1.0, 1.0]])
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def train(n):
        for _ in tf.range(n):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
            opt.apply_gradients([(t.gradient(loss, w), w)])
        return loss

    first = train(tf.constant(3)), w.numpy(), int(opt.iterations.numpy())   # (int64 in TF: x64 mode here)
    return first, train(tf.constant(2)), w, int(opt.iterations.numpy()), train.experimental_get_tracing_count()


@parity
def test_assignments_in_a_loop_are_not_differentiated(tf):
    """d(u after the loop)/dx is None and d/du is 1: an assignment cuts the tape, as in TF."""
    u = tf.Variable(2.0)

    @tf.function
    def g(x):
        with tf.GradientTape() as t:
            t.watch(x)
            for _ in tf.range(2):
                u.assign(u * x)
            y = u * 1.0
        return y, t.gradient(y, [x, u])

    return g(tf.constant(3.0))


@parity
def test_conditional_on_a_value_known_while_tracing_with_branches_of_other_shapes(tf):
    """``if not tf.cast(len(xs), bool): xs = tf.constant([0])`` (the DeepDream tutorial's guard) and
    a conditional expression on ``tf.cast(len(xs) > 1, bool)``: the branches give ``xs`` different
    shapes, and the predicate is a constant of the trace (TF's cond gives an unknown shape; the
    value is the selected branch's), for both predicate values."""
    @tf.function
    def f(x, n):
        xs = tf.range(n)
        if not tf.cast(len(xs), bool):
            xs = tf.constant([0])
        y = xs if tf.cast(len(xs) > 1, bool) else tf.constant([7, 8, 9])
        return tf.reduce_sum(tf.cast(xs, tf.float32)) * x, y

    return f(tf.constant(2.0), 0), f(tf.constant(2.0), 3)
