"""``tapejax/ops/affine.py``: the linear forms a traced loop index carries, checked against the same
integer arithmetic in Python (the oracle), and the traced values against the program's results."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.tensor import StaticTensor, Tensor
from tapejax.ops import affine


def _traced(fn, lo=None, hi=None):
    """``fn(i)`` on a traced int32 index ``i`` (with range ``[lo, hi]``) inside ``jax.make_jaxpr``;
    what it returns is read out while the trace runs."""
    box = []

    def run(v):
        box.append(fn(affine.index(v, lo, hi)))
        return v

    jax.make_jaxpr(run)(jnp.int32(0))
    return box[0]


def _form(x):
    assert type(x) is affine.AffineTensor, type(x)
    return x._form


def test_differences_of_offsets_are_constants():
    """``(i + 1) * 3 - i * 3 == 3``, ``i + k - i == k``, ``-(2 - i) - i == -2``, ``3 * i - i * 3 == 0``."""
    def fn(i):
        return [(i + 1) * 3 - i * 3, i + 7 - i, -(2 - i) - i, 3 * i - i * 3, (2 * i + 2) - 2 * i]
    got = _traced(fn)
    assert [_form(x).constant() for x in got] == [3, 7, -2, 0, 2]


def test_forms_of_different_indices_do_not_cancel():
    """``i - j`` has two symbols; ``i * j`` (no static factor) and ``tf.add`` give plain Tensors."""
    box = []

    def run(a, b):
        i, j = affine.index(a), affine.index(b)
        box.extend([i - j, i * j, tf.add(i, 1), (i + j) - j])
        return a

    jax.make_jaxpr(run)(jnp.int32(0), jnp.int32(0))
    d, prod, added, back = box
    assert _form(d).constant() is None and len(_form(d).terms) == 2
    assert type(prod) is Tensor and type(added) is Tensor
    assert _form(back).constant() is None and len(_form(back).terms) == 1   # (i + j) - j: i alone


@pytest.mark.parametrize("lo,hi", [(0, 3), (-5, 2)])
def test_bounds_follow_the_arithmetic(lo, hi):
    """A form's range is what Python computes over every index in ``[lo, hi]``: exactly for linear
    forms and ``//`` (floor is monotone); ``[0, c - 1]`` for ``% c``."""
    exact = [lambda i: 3 * i - 2, lambda i: -(i * 2) + 5, lambda i: (i + 1) * 4 - i, lambda i: i // 2,
             lambda i: (2 * i + 1) // 3, lambda i: (i * 6 + 3) % 3]
    for e in exact:
        want = [e(k) for k in range(lo, hi + 1)]
        assert _form(_traced(e, lo, hi)).bounds() == (min(want), max(want))
    assert _form(_traced(lambda i: i % 4, lo, hi)).bounds() == (0, 3)
    assert _form(_traced(lambda i: i * 2)).bounds() is None   # (no range given)


def test_divisible_floordiv_and_mod_stay_linear():
    """``(4 * i + 6) // 2 == 2 * i + 3`` and ``(6 * i + 4) % 3 == 1`` (Python's floor rules)."""
    half, rem = _traced(lambda i: [(4 * i + 6) // 2, (6 * i + 4) % 3])
    i_sym = next(iter(_form(half).terms))
    assert _form(half).terms == {i_sym: 2} and _form(half).b == 3
    assert _form(rem).constant() == 1


def test_an_expression_written_twice_is_one_symbol():
    """``(i % 4) * 2`` and ``(i % 4) * 2 + 2``: the two ``i % 4`` are one symbol, so the
    difference is 2; ``i // 3`` and ``i // 2`` are different symbols."""
    a, b, c, d = _traced(lambda i: [(i % 4) * 2, (i % 4) * 2 + 2, i // 3, i // 2])
    assert _form(b).plus(_form(a), -1).constant() == 2
    assert _form(c).plus(_form(d), -1).constant() is None
    assert _form(a).bounds() == (0, 6)


def test_values_are_the_ops_values():
    """The traced results are the ops' values: the same expressions in a compiled function and
    in Python ints."""
    @tf.function
    def f(i):
        return [(i + 1) * 3 - i * 3, 3 * i - 2, (2 * i + 1) // 3, i % 4, -(i - 7)]

    for k in (-5, 0, 4, 11):
        got = [int(t.numpy()) for t in f(tf.constant(k))]
        assert got == [3, 3 * k - 2, (2 * k + 1) // 3, k % 4, -(k - 7)]


def test_static_ints():
    """What counts as known while tracing: Python and NumPy ints, StaticTensors and concrete
    integer scalars; not bools, floats or traced values."""
    assert affine.static_int(3) == 3 and affine.static_int(np.int64(4)) == 4
    assert affine.static_int(StaticTensor(jnp.int32(5))) == 5
    assert affine.static_int(tf.constant(6)) == 6
    assert affine.static_int(True) is None and affine.static_int(2.0) is None
    assert affine.static_int(tf.constant([1, 2])) is None and affine.static_int(tf.constant(1.0)) is None


def test_only_traced_integer_scalars_become_indices():
    """``index`` wraps a traced integer scalar; a concrete one, a float or a vector stays a Tensor;
    flattening an index gives a plain Tensor (its form lives only in its trace)."""
    assert type(affine.index(jnp.int32(3))) is Tensor
    box = []

    def run(a, f, v):
        box.extend([affine.index(a), affine.index(f), affine.index(v)])
        leaves, tree = jax.tree_util.tree_flatten(box[0])
        box.append(jax.tree_util.tree_unflatten(tree, leaves))
        return a

    jax.make_jaxpr(run)(jnp.int32(0), jnp.float32(0), jnp.zeros(3, jnp.int32))
    assert [type(b) for b in box] == [affine.AffineTensor, Tensor, Tensor, Tensor]


def test_a_traced_integer_from_any_op_gets_a_form_under_the_operators():
    """A Variable's value (not a loop index) read in a compiled step: ``start + 3 - start`` is known
    to be 3, so ``v[start:start + 3]`` reads and assigns a static-size window (TF's values); an
    eager integer stays a plain Tensor."""
    v = tf.Variable(np.arange(9, dtype=np.float32))
    ptr = tf.Variable(2)
    seen = []

    @tf.function
    def window():
        start = ptr.read_value()
        seen.append((type(start + 3).__name__, affine.form_of(start + 3 - start).constant()))
        v[start:start + 3].assign(-v[start:start + 3])
        ptr.assign(tf.math.floormod(start + 3, 9))
        return v[start:start + 3]

    np.testing.assert_allclose(window().numpy(), [-2.0, -3.0, -4.0])
    np.testing.assert_allclose(window().numpy(), [-5.0, -6.0, -7.0])
    assert seen == [("AffineTensor", 3)]
    assert type(tf.constant(3) + 1) is Tensor
