"""The parity harness's own rules: ``same_as_tf`` re-runs TF where tapejax differs from it, and
each TF run starts with TF's scalar cache empty.

Oracle: the outcomes written out by hand for each combination of tapejax's result, TF's first
result and TF's second.
"""
import numpy as np
import pytest

from .harness import _run_tf, same_as_tf


def _rerun(value, calls):
    def rerun():
        calls.append(1)
        if isinstance(value, BaseException):
            raise value
        return value
    return rerun


def test_agreement_does_not_run_tf_again():
    calls = []
    same_as_tf([np.float32(1.0)], [np.float32(1.0)], _rerun([np.float32(5.0)], calls), 1e-5, 1e-6)
    assert calls == []


def test_a_difference_tf_gives_again_fails_with_the_first_difference():
    calls = []
    with pytest.raises(AssertionError, match="tapejax vs TF") as e:
        same_as_tf([np.float32(1.0)], [np.float32(2.0)], _rerun([np.float32(2.0)], calls), 1e-5, 1e-6)
    assert calls == [1] and "again" not in str(e.value)


def test_tf_changing_its_result_to_tapejaxs_passes_with_a_warning():
    with pytest.warns(UserWarning, match="two different results"):
        same_as_tf([np.float32(1.0)], [np.float32(1.01)], _rerun([np.float32(1.0)], []), 1e-5, 1e-6)


def test_tf_changing_its_result_to_a_third_value_fails():
    with pytest.raises(AssertionError, match="tapejax vs TF run again"):
        same_as_tf([np.float32(1.0)], [np.float32(2.0)], _rerun([np.float32(3.0)], []), 1e-5, 1e-6)


def test_tf_failing_the_second_time_leaves_the_first_difference():
    with pytest.raises(AssertionError, match="tapejax vs TF") as e:
        same_as_tf([np.float32(1.0)], [np.float32(2.0)], _rerun(RuntimeError("boom"), []), 1e-5, 1e-6)
    assert "again" not in str(e.value)


def test_none_against_a_value_is_checked_the_same_way():
    with pytest.raises(AssertionError):
        same_as_tf([None], [np.float32(2.0)], _rerun([np.float32(2.0)], []), 1e-5, 1e-6)


def test_a_tf_run_does_not_see_an_earlier_runs_negative_zero():
    """TF's scalar cache would hand ``-0.0`` (converted by an earlier program) to a later
    program's ``0.0``: the harness empties it before each TF run (oracle: IEEE, 0**-1 is +inf)."""
    tf = pytest.importorskip("tensorflow")
    x = tf.constant([1.0])
    _run_tf(lambda tf: tf.multiply(-0.0, x), "harness-negative-zero")
    got = _run_tf(lambda tf: tf.pow(0.0, tf.constant([-1.0, 3.0])), "harness-positive-zero")
    assert got.value.tolist() == [np.inf, 0.0] and not np.signbit(got.value[1])


def test_a_tf_run_does_not_see_an_earlier_runs_global_seed():
    """An op-seeded draw depends on TF's global seed, which a case may set: each TF run starts
    with none, as a fresh process (oracle: the same draw run first)."""
    pytest.importorskip("tensorflow")

    def draw(tf):
        return tf.random.uniform([3], seed=3)
    first = _run_tf(draw, "harness-draw-first")
    _run_tf(lambda tf: tf.random.set_seed(1), "harness-sets-a-seed")
    again = _run_tf(draw, "harness-draw-again")
    assert first.value.tolist() == again.value.tolist()
