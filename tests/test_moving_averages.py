"""``tf.train.ExponentialMovingAverage`` (tapejax/train/moving_averages.py): its shadows' names.

TF 2.21 makes a shadow's name unique in the process (its slot creator opens a default-named
variable scope, whose counts live in the eager graph), and ignores the current ``name_scope``
(the Variable's name already holds it).  The expected names below are TF's, run in one fresh
process; values are compared with TF in ``tests/parity/test_train_more.py``.  Each test uses
Variable names no other test averages, since the counts are the process's.
"""
import pytest

import tapejax as tf
from tapejax.train import moving_averages


def test_two_variables_of_one_name_get_distinct_shadows():
    """TF: ``v/ExponentialMovingAverage`` and ``..._1``; a second EMA object continues the count
    (``_2``), a name of its own starts afresh; a Variable never averaged gets the plain name."""
    a, b = tf.Variable(1.0, name="ma_dup"), tf.Variable(2.0, name="ma_dup")
    c = tf.Variable(3.0, name="ma_other")
    e1 = tf.train.ExponentialMovingAverage(0.9)
    e1.apply([a, b, c])
    assert [e1.average_name(x) for x in (a, b, c)] == [
        "ma_dup/ExponentialMovingAverage", "ma_dup/ExponentialMovingAverage_1", "ma_other/ExponentialMovingAverage"]
    assert e1.average(b).name == "ma_dup/ExponentialMovingAverage_1:0"
    e2 = tf.train.ExponentialMovingAverage(0.9)
    e2.apply([a, c])
    assert [e2.average_name(x) for x in (a, c)] == [
        "ma_dup/ExponentialMovingAverage_2", "ma_other/ExponentialMovingAverage_1"]
    e3 = tf.train.ExponentialMovingAverage(0.9, name="ema")
    e3.apply([a])
    assert e3.average_name(a) == "ma_dup/ema"
    assert e1.average_name(tf.Variable(1.0, name="ma_dup")) == "ma_dup/ExponentialMovingAverage"


def test_shadow_made_in_a_name_scope_or_a_function_is_prefixed_once():
    """TF: a Variable made in ``name_scope('outer')`` is ``outer/v``; its shadow ``outer/v/Exponential
    MovingAverage`` (tapejax gave ``outer/outer/v/...``); a first apply inside a compiled step
    continues the process's count."""
    with tf.name_scope("ma_outer"):
        f = tf.Variable(1.0, name="ma_scoped")
        ema = tf.train.ExponentialMovingAverage(0.9)
        ema.apply([f])
    assert ema.average(f).name == "ma_outer/ma_scoped/ExponentialMovingAverage:0"
    g = tf.Variable(1.0, name="ma_scoped")
    tf.train.ExponentialMovingAverage(0.9).apply([g])
    e5 = tf.train.ExponentialMovingAverage(0.9)

    @tf.function
    def step():
        e5.apply([g])

    step()
    assert e5.average_name(g) == "ma_scoped/ExponentialMovingAverage_1"
    assert float(e5.average(g)) == pytest.approx(1.0)


def test_unique_scope_takes_the_first_free_suffix():
    """TF's ``_get_unique_variable_scope``: the first ``_<n>`` not yet opened, so a suffixed name
    opened before (``ma_v/E_1``) is skipped: TF gives ``ma_v/E`` then ``ma_v/E_2``."""
    names = [moving_averages._unique_scope("ma_u/E") for _ in range(3)]
    assert names == ["ma_u/E", "ma_u/E_1", "ma_u/E_2"]
    assert moving_averages._unique_scope("ma_v/E_1") == "ma_v/E_1"
    assert [moving_averages._unique_scope("ma_v/E") for _ in range(2)] == ["ma_v/E", "ma_v/E_2"]
