"""custom_gradient reads Python state when TensorFlow does (issue #20, behaviours 3 and 5).

TF runs the forward ``f`` when the decorated function is called and its
``grad_fn`` when ``tape.gradient`` runs, each seeing the Python state of that
moment (a dict entry, a rebound closure variable, a new constant each step).
A compiled replay cached by structure must not freeze the first trace's state.
``tf.shape`` and random ops work inside ``f``; the random numbers are drawn
once, at the call, and the gradient neither draws new ones for ``f``'s values
nor advances the global stream.  Every case runs with deferred execution on
(the loss value then comes out of the compiled replay) and off.
"""

import numpy as np
import pytest

from .harness import A, parity


@pytest.fixture(autouse=True, params=[True, False], ids=["deferred", "eager"])
def deferral(request):
    import tapejax
    prev = tapejax.set_deferred_execution(request.param)
    yield request.param
    tapejax.set_deferred_execution(prev)


@parity(expected=[A(-0.0), A(-1.5), A(-3.0)])
def test_gradient_reversal_reads_the_current_lambda(tf):
    """grad_fn reads a schedule entry: each step's gradient uses that step's lambda."""
    sched = {"lam": 0.0}

    @tf.custom_gradient
    def rev(x):
        return tf.identity(x), lambda dy: -sched["lam"] * dy
    x = tf.Variable(1.0)
    out = []
    for lam in [0.0, 1.5, 3.0]:
        sched["lam"] = lam
        with tf.GradientTape() as t:
            y = rev(x) * 1.0
        out.append(t.gradient(y, x))
    return out


@parity(expected=[(A(2.0), A(2.0)), (A(4.0), A(2.0)), (A(6.0), A(2.0))])
def test_forward_reads_the_current_state(tf):
    """f reads s["k"]: the value of y (computed by the replay when deferred) is this step's."""
    s = {"k": 1.0}

    @tf.custom_gradient
    def f(x):
        return x * s["k"], lambda dy: dy
    x = tf.Variable(1.0)
    out = []
    for k in [1.0, 2.0, 3.0]:
        s["k"] = k
        with tf.GradientTape() as t:
            y = f(x) * 2.0
        out.append((y, t.gradient(y, x)))
    return out


@parity(expected=[(A(4.0), A(20.0)), (A(6.0), A(60.0)), (A(8.0), A(120.0))])
def test_closure_rebound_each_step_is_the_current_one(tf):
    """f and grad_fn close over a Tensor and a numpy scalar that the loop rebinds every step."""
    c = tf.constant(1.0)
    d = np.float32(1.0)

    @tf.custom_gradient
    def f(x):
        return x * c, lambda dy: dy * c * d
    x = tf.Variable(2.0)
    out = []
    for step in range(3):
        c = tf.constant(float(step + 2))
        d = np.float32(10.0 * (step + 1))
        with tf.GradientTape() as t:
            y = f(x) + 0.0
        out.append((y, t.gradient(y, x)))
    return out


@parity(expected=(A(6.0), A(10.0), A(-2.0)))
def test_state_changed_between_call_and_gradient(tf):
    """f's value and what grad_fn closes over are the call's (k = 2); what grad_fn reads
    itself is read at each gradient call (lam = 5, then -1)."""
    s = {"k": 2.0, "lam": 1.0}

    @tf.custom_gradient
    def f(x):
        k = s["k"]
        return x * k, lambda dy: dy * s["lam"] * k
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as t:
        y = f(x) * 1.0
    s["k"] = 7.0
    s["lam"] = 5.0
    g1 = t.gradient(y, x)
    s["lam"] = -1.0
    g2 = t.gradient(y, x)
    return y, g1, g2


@parity(expected=[(A(12.0), A(12.0)), (A(24.0), A(24.0))])
def test_second_order_through_grad_fn_reads_the_current_state(tf):
    """Nested tapes differentiate grad_fn = dy * a * 3x^2: second derivative a * 6x, a per step."""
    s = {"a": 1.0}

    @tf.custom_gradient
    def cube(x):
        return x ** 3, lambda dy: dy * s["a"] * 3.0 * x ** 2
    x = tf.Variable(2.0)
    out = []
    for a in [1.0, 2.0]:
        s["a"] = a
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                y = cube(x) * 1.0
            g = t1.gradient(y, x)
        out.append((g, t2.gradient(g, x)))
    return out


@parity(expected=(A(0.9), A([2.0, 2.0]), A([1.0, 1.0])), rtol=1e-6)
def test_shape_and_random_inside_the_forward(tf):
    """tf.shape in f and grad_fn (reshape to [n, 1] and back); a straight-through estimator
    drawing tf.random.uniform in f."""
    @tf.custom_gradient
    def f(x):
        y = tf.reshape(x, [tf.shape(x)[0], 1])
        return y, lambda dy: tf.reshape(dy, tf.shape(x)) * 2.0

    @tf.custom_gradient
    def ste(x):
        r = tf.random.uniform(x.shape)
        return tf.cast(x > r, tf.float32), lambda dy: dy
    x = tf.Variable([0.2, 0.7])
    with tf.GradientTape(persistent=True) as t:
        y = tf.reduce_sum(f(x))
        z = tf.reduce_sum(ste(x))
    return y, t.gradient(y, x), t.gradient(z, x)


def _dropout_case(tf, nested):
    tf.random.set_seed(5)

    @tf.custom_gradient
    def drop(x):
        mask = tf.cast(tf.random.uniform(x.shape) > 0.5, tf.float32)
        return x * mask, lambda dy: dy * mask * 3.0
    x = tf.Variable(tf.range(1.0, 33.0))
    if nested:
        with tf.GradientTape() as outer:  # noqa: F841 - it records the inner gradient
            with tf.GradientTape() as t:
                y = drop(x) * 1.0
            g = t.gradient(y, x)
    else:
        with tf.GradientTape() as t:
            y = drop(x) * 1.0
        g = t.gradient(y, x)
    after = tf.random.uniform([4])
    tf.random.set_seed(5)
    drop(x)
    again = tf.random.uniform([4])
    mask = y / x
    # g is 3 * the mask of the forward; the mask has ones and zeros; the gradient drew nothing.
    return (bool(tf.reduce_all(g == 3.0 * mask)), bool(tf.reduce_any(mask > 0)), bool(tf.reduce_any(mask == 0)),
            bool(tf.reduce_all(after == again)))


@parity(expected=(True, True, True, True))
def test_random_mask_is_drawn_once_at_the_call(tf):
    """A dropout-style mask drawn in f: grad_fn uses the forward's mask, and the gradient does
    not advance the global random stream."""
    return _dropout_case(tf, nested=False)


@parity(expected=(True, True, True, True))
def test_random_mask_is_drawn_once_at_the_call_nested(tf):
    """The same with an outer tape recording the gradient (tapejax then runs f again on the
    inputs, with the call's random state)."""
    return _dropout_case(tf, nested=True)


@parity(expected=[(A(6.0), A(5.0), A(10.0)), (A(0.0), A(2.0), A(4.0))])
def test_grad_fn_reads_variables_at_gradient_time(tf):
    """grad_fn reads the Variable f used: as it is when the gradient runs (assigned after the
    call), as TF; the step's update then feeds the next call."""
    v = tf.Variable(3.0)

    @tf.custom_gradient
    def fv(x):
        return x * v, lambda dy, variables=None: (dy * v, [dy * x * v])
    x = tf.constant(2.0)
    out = []
    for _ in range(2):
        with tf.GradientTape() as t:
            t.watch(x)
            y = fv(x) * 1.0
        v.assign_add(2.0)
        gx, gv = t.gradient(y, [x, v])
        out.append((y, gx, gv))
        v.assign_sub(0.5 * gv)
    return out


# -- nested tapes: the outer tape differentiates through the custom op's outputs ----------------
# TF records the custom op on every tape, so an outer tape differentiating an inner gradient
# reaches the op's inputs through its outputs too (the upstream dy depends on them), by grad_fn.

def _penalised_fit(tf, grad_fn_of):
    """An inner tape's gradient, squared, added to the loss and differentiated by an outer tape;
    the model's output goes through a custom op whose grad_fn is ``grad_fn_of(step)``."""
    x = tf.constant(np.array([[0.98, -0.8], [0.01, -0.2]], np.float32))
    y = tf.constant(np.array([[-0.01], [0.2]], np.float32))
    w = tf.Variable(np.array([[0.17], [0.48]], np.float32))
    state = {"step": 0}

    @tf.custom_gradient
    def op(t):
        return t * 1.0, grad_fn_of(state)
    out = []
    for step in range(2):
        state["step"] = step
        with tf.GradientTape() as tape:
            with tf.GradientTape() as inner:
                loss = tf.reduce_mean(tf.square(op(tf.matmul(x, w)) - y))
            penalty = inner.gradient(loss, w)
            total = loss + tf.reduce_sum(tf.square(penalty))
        out.append((total, penalty, tape.gradient(total, w)))
    return out


_FIT_IDENTITY = (A(0.15785606), A([[-0.206195], [0.22478001]]), A([[-0.9556498], [0.8546194]]))


@parity(expected=[_FIT_IDENTITY, _FIT_IDENTITY])
def test_nested_identity_gradient_reaches_the_output_path(tf):
    """Identity grad_fn: the outer derivative is the plain one (the regression: the path through
    the op's output was dropped, [-0.206, 0.225])."""
    return _penalised_fit(tf, lambda state: (lambda dy: dy))


@parity
def test_nested_scaled_gradient(tf):
    """grad_fn = dy * 0.5: the outer derivative goes through grad_fn twice (the penalty's and
    the output's path)."""
    return _penalised_fit(tf, lambda state: (lambda dy: dy * 0.5))


@parity
def test_nested_gradient_reads_python_state(tf):
    """grad_fn = dy * b with b read at gradient time (0.5 then 2.0)."""
    s = {"b": 0.5}

    def grad_fn_of(state):
        s["b"] = [0.5, 2.0][state["step"]]
        return lambda dy: dy * s["b"]
    return _penalised_fit(tf, grad_fn_of)


@parity
def test_persistent_tape_gradient_of_gradient_through_custom_op(tf):
    """A persistent tape takes the gradient inside its block, then the gradient of it; grad_fn
    closes over f's output (custom exp) and the upstream gradient depends on that output."""
    @tf.custom_gradient
    def my_exp(x):
        y = tf.exp(x)
        return y, lambda dy: dy * y
    x = tf.Variable([0.3, -0.7])
    with tf.GradientTape(persistent=True) as t:
        y = my_exp(x)
        loss = tf.reduce_sum(y * y + tf.sin(y))
        g = t.gradient(loss, x)
        gsum = tf.reduce_sum(g * g)
    h = t.gradient(g, x)
    h2 = t.gradient(gsum, x)
    return loss, g, h, h2


@parity
def test_hessian_through_log1pexp(tf):
    """tf.hessians-like second order through the log1pexp custom gradient (grad_fn closes over
    e = exp(x) computed in f): the diagonal by gradient, the full matrix by jacobian."""
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return tf.math.log(1 + e), grad
    x = tf.Variable([0.5, -1.0, 2.0])
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            y = log1pexp(x)
            f = tf.reduce_sum(y * y) + tf.reduce_sum(y * x)
        g = inner.gradient(f, x)
    return g, outer.gradient(g, x), outer.jacobian(g, x)
