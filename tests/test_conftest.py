"""The suite's own checks (``conftest.py``): the check that a test leaves its thread as it found
it reports each kind of leftover and puts it back (oracle: the state read after it)."""
import conftest
import tapejax as tf
from tapejax.core import state


def test_thread_leaks_reports_and_restores_a_tape_a_mode_and_a_name_scope():
    modes = conftest._global_modes()
    tape = tf.GradientTape()
    tape.__enter__()
    prev = tf.set_deferred_execution(not modes["deferred execution"])
    scope = tf.name_scope("left_open")
    scope.__enter__()
    leaks = conftest.thread_leaks(modes)
    assert leaks[0] == "1 tape(s) still recording"
    assert leaks[1] == "name scope 'left_open/' still open"
    assert leaks[2].startswith("global modes changed") and "deferred execution" in leaks[2]
    assert state.tapes() == [] and tf.deferred_execution() == prev
    assert conftest.thread_leaks(modes) == []
