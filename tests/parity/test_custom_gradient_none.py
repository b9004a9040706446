"""``tf.custom_gradient`` whose ``grad_fn`` returns None for an input (issue #20; TF_SEMANTICS.md
items 3 and 13): no gradient flows to that input through the op, so the tape gives None for a
source reached only that way (zeros with ``unconnected_gradients='zero'``), another path's
gradient where one exists, and a custom gradient further up that path is never called.  Eager
and deferred tapes, persistent tapes, jacobians, Variables (``variables=``), nested tapes,
``tf.function`` (tape and ``tf.gradients``) and a training loop.
"""

from .harness import parity


def _masked(tf):
    @tf.custom_gradient
    def masked(z, mask):
        def grad(dy):
            return dy * mask, None

        return z * mask, grad
    return masked


def _consts(tf):
    return tf.constant([1.0, 2.0]), tf.constant([1.0, 0.0])


@parity
def test_none_input_other_path_and_zero_modes(tf):
    """None for ``m`` at the tape; with ``'zero'`` or the enum, zeros; with another path to ``m``
    (``m * m``), that path's gradient alone; the op's other input keeps its gradient."""
    masked = _masked(tf)
    z, m = _consts(tf)
    with tf.GradientTape(persistent=True) as t:
        t.watch([z, m])
        y = tf.reduce_sum(masked(z, m))
        y2 = y + tf.reduce_sum(m * m)
    return (t.gradient(y, [z, m]),
            t.gradient(y, [z, m], unconnected_gradients="zero"),
            t.gradient(y, m, unconnected_gradients=tf.UnconnectedGradients.ZERO),
            t.gradient(y2, [z, m]))


@parity
def test_none_input_computed_upstream_and_as_an_intermediate_source(tf):
    """The cut input is computed from a watched ``s`` (``m = 2 s``): None for ``s`` and for the
    intermediate ``m`` itself; the output ``y`` as a source still gets ones; ``[y, m]`` as targets
    of ``m`` is 1 (a target that is its source)."""
    masked = _masked(tf)
    z, s = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([z, s])
        m = s * 2.0
        y = masked(z, m)
        loss = tf.reduce_sum(y)
    return t.gradient(loss, [z, s, m, y]), t.gradient([loss, m], m)


@parity
def test_all_none_op_and_same_input_twice(tf):
    """A ``grad_fn`` returning None for its only input: None even through later ops; the same
    tensor passed as both inputs with gradients ``(dy * b, None)``: the first edge's gradient."""
    @tf.custom_gradient
    def nograd(x):
        return x * x, lambda dy: None

    @tf.custom_gradient
    def two(a, b):
        return a * b, lambda dy: (dy * b, None)

    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y1 = tf.multiply(nograd(x), 3.0) + 1.0
        y2 = two(x, x)
    return t.gradient(y1, x), t.gradient(y2, x), t.gradient([y1, y2], x)


@parity
def test_jacobian_and_batch_jacobian_of_a_none_input(tf):
    """``jacobian``: None for the cut input (zeros of target + source shape with 'zero'), the
    other input's block as usual; ``batch_jacobian``: zeros for the cut input even with 'none'."""
    masked = _masked(tf)
    z, m = tf.constant([[1.0, 2.0]]), tf.constant([[1.0, 0.0]])
    with tf.GradientTape(persistent=True) as t:
        t.watch([z, m])
        y = masked(z, m)
    return (t.jacobian(y, [z, m]), t.jacobian(y, m, unconnected_gradients="zero"),
            t.batch_jacobian(y, z), t.batch_jacobian(y, m),
            t.batch_jacobian(y, m, unconnected_gradients="zero"))


@parity
def test_variable_gradient_none_from_grad_fn(tf):
    """``grad_fn(dy, variables=...)`` returning None for one of two Variables: None for it, the
    other's gradient as returned; zeros with 'zero'; with another read of it outside the op, that
    read's gradient alone."""
    v, u = tf.Variable(3.0), tf.Variable(1.0)

    @tf.custom_gradient
    def f(a):
        def grad(dy, variables=None):
            return dy * v * u, [None, dy * 2.0]

        return a * v * u, grad

    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = f(x)
        y2 = y + v * v
    return (t.gradient(y, [x, v, u]), t.gradient(y, [v, u], unconnected_gradients="zero"),
            t.gradient(y2, [x, v, u]))


@parity(modes=True)
def test_none_input_inside_tf_function(tf):
    """Inside ``tf.function``: a tape's gradient of the cut input is None (tested as a Python
    bool at trace time), a Variable's too, and ``tf.gradients`` agrees."""
    masked = _masked(tf)
    v = tf.Variable(2.0)

    @tf.custom_gradient
    def scaled(a):
        def grad(dy, variables=None):
            return dy * v, [None]

        return a * v, grad

    @tf.function
    def step(z, m):
        with tf.GradientTape() as t:
            t.watch([z, m])
            y = tf.reduce_sum(masked(z, m)) + scaled(tf.reduce_sum(z))
        gz, gm, gv = t.gradient(y, [z, m, v])
        graph = tf.gradients(y, [z, m, v])
        return gz, gm is None, gv is None, graph[0], graph[1] is None, graph[2] is None

    z, m = _consts(tf)
    return step(z, m), step(z * 2.0, m)


@parity
def test_grad_fn_upstream_of_a_cut_is_not_called(tf):
    """``down`` returns None for the input ``up`` feeds: TF never calls ``up``'s grad_fn, and ``x``
    (reached only through it) gets None; ``w``, reached through ``up`` on another path, gets
    ``up``'s gradient, and then ``up``'s grad_fn runs."""
    calls = []

    @tf.custom_gradient
    def up(a):
        def grad(dy):
            calls.append("up")
            return dy * 2.0

        return a * 2.0, grad

    @tf.custom_gradient
    def down(a, b):
        def grad(dy):
            calls.append("down")
            return dy, None

        return a + b, grad

    x, z, w = tf.constant(2.0), tf.constant([1.0, 2.0]), tf.constant(5.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, z, w])
        y = down(z, up(x))
        y2 = tf.reduce_sum(down(z, w)) + up(w)
    first = t.gradient(y, [x, z])
    calls_first = list(calls)
    second = t.gradient(y2, [w, z])
    return first, calls_first, second, sorted(calls[len(calls_first):])


@parity
def test_nested_tapes_over_a_none_input(tf):
    """The inner gradient is None for the cut input; the outer tape differentiates the inner
    gradient of ``z`` (``dy * mask``): None for ``z``, ones for ``mask``."""
    masked = _masked(tf)
    z, m = _consts(tf)
    with tf.GradientTape() as outer:
        outer.watch([z, m])
        with tf.GradientTape() as inner:
            inner.watch([z, m])
            y = tf.reduce_sum(masked(z, m))
        gz, gm = inner.gradient(y, [z, m])
    return gz, gm, outer.gradient(gz, [z, m])


@parity(modes=True)
def test_training_loop_with_a_none_input_gradient(tf):
    """Four eager SGD steps through a custom op whose mask gets None: the mask's gradient is None
    at every step (deferred and predicted updates included), the weights train as TF's."""
    masked = _masked(tf)
    w = tf.Variable([[0.5], [-0.3]])
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    mk = tf.constant([[1.0], [0.5]])
    out = []
    for _ in range(4):
        with tf.GradientTape() as t:
            t.watch(mk)
            loss = tf.reduce_sum(tf.square(masked(tf.matmul(x, w), mk)))
        gw, gm = t.gradient(loss, [w, mk])
        w.assign_sub(0.01 * gw)
        out.append((loss, gm is None))
    return out, w
