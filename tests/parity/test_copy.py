"""Copies of Tensors, Variables and Modules (``copy.copy`` / ``copy.deepcopy``) against TF.

TF's rules: a Tensor is immutable, so both copies are the tensor itself (it stays on the
tape); ``copy.copy(variable)`` is the Variable itself, ``copy.deepcopy(variable)`` a new
Variable with its own identity and a snapshot of the value; a deep-copied Module holds such
new Variables (a DQN target network), a shallow copy shares them.
"""
import copy

import numpy as np

from .harness import A, parity, raises


def _q_module(tf):
    class Q(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[0.5], [-0.3]])

        def __call__(self, x):
            return tf.matmul(x, self.w)

    return Q()


@parity(modes=True, expected=(A([[-2.02], [-4.04]]), 2, False, True))
def test_dqn_target_network_is_a_new_variable(tf):
    """The issue's DQN case: the target copy's reads are not reads of q.w."""
    q = _q_module(tf)
    target = copy.deepcopy(q)
    x = tf.constant([[1., 2.]])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum((q(x) - (1 + 0.9 * target(x))) ** 2)
    g = t.gradient(loss, q.w)
    return g, len(t.watched_variables()), target.w is q.w, copy.copy(q).w is q.w


@parity(modes=True)
def test_variable_copy_and_deepcopy(tf):
    """copy.copy(v) is v (reads summed with v's); deepcopy is apart; the copy keeps the value
    it had, keeps name/trainable, and memo keeps shared references shared."""
    v = tf.Variable(2.0, name="w")
    c, d = copy.copy(v), copy.deepcopy(v)
    with tf.GradientTape() as t:
        y = v * c * d
    grads = t.gradient(y, [v, c, d])
    v.assign(5.0)
    nt = tf.Variable([1., 2.], trainable=False)
    dn = copy.deepcopy(nt)
    pair = copy.deepcopy([v, v])
    return (grads, c is v, d is v, d.name, d.trainable, d, v, dn.trainable, dn,
            pair[0] is pair[1], pair[0] is v, pair[0])


@parity(modes=True)
def test_deepcopy_keeps_updates_apart(tf):
    """Training the original leaves the deep copy as it was (and vice versa)."""
    q = _q_module(tf)
    target = copy.deepcopy(q)
    x = tf.constant([[1., 2.]])
    opt = tf.keras.optimizers.SGD(0.1)
    for _ in range(3):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(q(x) ** 2)
        opt.apply_gradients(zip(t.gradient(loss, [q.w]), [q.w]))
    target.w.assign_add(tf.ones([2, 1]))
    return q.w, target.w


@parity(modes=True)
def test_tensor_copies_stay_on_the_tape(tf):
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = copy.copy(y)
        w = copy.deepcopy({"y": y})["y"]
        out = z + w
    return t.gradient(out, x), t.gradient(w, x), z is y, w is y, copy.deepcopy(x) is x


@parity(modes=True)
def test_deepcopy_of_variable_after_pending_update(tf):
    """A deep copy taken right after an update (pending under deferral) holds the new value."""
    w = tf.Variable(np.ones(3, np.float32))
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    w.assign_sub(0.25 * t.gradient(loss, w))
    d = copy.deepcopy(w)
    w.assign_sub(tf.ones(3))
    return d, w


@parity(modes=True)
def test_deepcopy_inside_a_compiled_function_raises(tf):
    """TF: deepcopy of a Variable needs eager execution (NotImplementedError), and a failed
    call leaves the Variable as it was."""
    v = tf.Variable(1.0)

    @tf.function
    def f():
        copy.deepcopy(v)
        return v + 1.0

    return raises(f), v


@parity
def test_deepcopy_of_a_tensor_inside_a_function_is_a_type_error(tf):
    """Inside tf.function a tensor is symbolic: ``copy.deepcopy`` fails (TypeError, it cannot be
    pickled) while ``copy.copy`` gives the tensor; eagerly both give the tensor."""
    x = tf.constant([1.0, 2.0])
    deep = tf.function(lambda t: copy.deepcopy({"y": t * 2}))
    shallow = tf.function(lambda t: copy.copy(t * 2))
    return raises(deep, x), shallow(x), copy.deepcopy(x * 3)
