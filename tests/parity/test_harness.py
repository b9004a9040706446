"""The parity harness's own rules: ``same_as_tf`` re-runs TF where tapejax differs from it.

Oracle: the outcomes written out by hand for each combination of tapejax's result, TF's first
result and TF's second.
"""
import numpy as np
import pytest

from .harness import same_as_tf


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
