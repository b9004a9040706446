"""Reads of a Variable that a staged loop or branch assigns, under a tape (TF's rules).

Inside ``tf.function``, a ``for``/``while`` on tensors or an ``if`` on a tensor becomes one op;
a Variable it assigns is carried through it.  TF's tape still sees every read of the Variable
as a read of the Variable: an assignment is not differentiated, and ``d(loss)/dv`` sums the
derivatives at every read, before and after each assignment, in every iteration.  Each case
runs deferred and eager (``modes=True``); TF's reverse-mode loops need a static trip count in
tapejax (``maximum_iterations``).
"""
import numpy as np

from .harness import parity


@parity(modes=True)
def test_for_range_assign_add(tf):
    """acc += v * w; v += 1, three times: d/dv counts the three reads (3w), d/dw = v0+v1+v2."""
    v, w = tf.Variable(1.0), tf.Variable(2.0)

    @tf.function
    def step(n):
        with tf.GradientTape() as t:
            acc = tf.constant(0.0)
            for _ in tf.range(n):
                tf.autograph.experimental.set_loop_options(maximum_iterations=5)
                acc = acc + v * w
                v.assign_add(1.0)
        return acc, t.gradient(acc, [v, w])

    return [step(tf.constant(3)), v, step(tf.constant(2)), v]


@parity(modes=True)
def test_while_assign_then_read(tf):
    """Reads before and after an assignment in the same iteration, and across iterations."""
    w = tf.Variable(2.0)

    @tf.function
    def step(n):
        with tf.GradientTape() as t:
            acc = tf.constant(0.0)
            i = tf.constant(0)
            while i < n:
                tf.autograph.experimental.set_loop_options(maximum_iterations=4)
                acc = acc + w * w * tf.cast(i + 1, tf.float32)
                w.assign(w * 0.5)
                acc = acc + 3.0 * w
                i += 1
        return acc, t.gradient(acc, w)

    return [step(tf.constant(3)), w]


@parity(modes=True)
def test_if_assign_then_read(tf):
    """A branch assigns v, then reads it: the read is v's (d/dv = x), the value the new one."""
    v = tf.Variable([1.0, 2.0])

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            t.watch(x)
            if tf.reduce_sum(x) > 0:
                v.assign(v * 3.0)
                y = tf.reduce_sum(v * x)
            else:
                y = tf.reduce_sum(v * x * 2.0)
        return y, t.gradient(y, [v, x])

    return [step(tf.constant([1.0, 1.0])), v, step(tf.constant([-1.0, -1.0])), v]


@parity(modes=True)
def test_tape_around_function(tf):
    """The tape is outside the compiled function that loops: the same sum over reads."""
    v, w = tf.Variable(1.0), tf.Variable(2.0)

    @tf.function
    def f(n):
        acc = tf.constant(0.0)
        for _ in tf.range(n):
            tf.autograph.experimental.set_loop_options(maximum_iterations=5)
            acc = acc + v * w * w
            v.assign_add(0.5)
        return acc

    with tf.GradientTape() as t:
        acc = f(tf.constant(3))
    return [acc, t.gradient(acc, [v, w]), v]


@parity(modes=True)
def test_infinite_and_integer_state(tf):
    """A best-so-far Variable starting at inf and an int counter, assigned in the loop: values
    exact (no arithmetic on the carried value), the gradient of the loss unaffected."""
    best, count, w = tf.Variable(np.inf), tf.Variable(0), tf.Variable(1.5)

    @tf.function
    def step(xs):
        with tf.GradientTape() as t:
            loss = tf.constant(0.0)
            for x in xs:
                term = (w * x - 1.0) ** 2
                loss = loss + term
                best.assign(tf.minimum(best, term))
                count.assign_add(1)
                loss = loss + 0.0 * best
        return loss, t.gradient(loss, w)

    return [step(tf.constant([1.0, 2.0, 0.5])), best, count]


@parity(modes=True)
def test_optimizer_step_in_loop(tf):
    """Several SGD steps inside one compiled loop, each with its own tape."""
    w = tf.Variable([0.5, -0.3])
    x = tf.constant([[1.0, 2.0], [0.5, -1.0]])
    y = tf.constant([1.0, 0.0])
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train(n):
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum((tf.linalg.matvec(x, w) - y) ** 2)
            opt.apply_gradients([(t.gradient(loss, w), w)])
        return loss

    return [train(tf.constant(4)), w]


@parity(modes=True)
def test_nested_loops_and_branch(tf):
    """A loop in a loop and a branch in the outer loop, all assigning v (static trip counts)."""
    v, w = tf.Variable(1.0), tf.Variable(2.0)

    @tf.function
    def step():
        with tf.GradientTape() as t:
            acc = tf.constant(0.0)
            for _ in tf.range(2):
                acc = acc + v * w
                for _ in tf.range(3):
                    acc = acc + v * v
                    v.assign(v * 0.5 + w)
                if acc > 5.0:
                    v.assign_sub(w)
                    acc = acc + v
        return acc, t.gradient(acc, [v, w])

    return [step(), v]


@parity(modes=True)
def test_foldl_assigns(tf):
    """tf.foldl whose fn assigns the Variable it reads: each read counted."""
    x = tf.constant([1.0, 2.0, 3.0])
    u = tf.Variable(0.5)

    @tf.function
    def step():
        with tf.GradientTape() as t:
            def fn(a, e):
                u.assign(u * e)
                return a + u * u
            r = tf.foldl(fn, x, initializer=tf.constant(0.0))
        return r, t.gradient(r, u)

    return [step(), u]
