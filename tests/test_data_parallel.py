"""``map(num_parallel_calls=N)`` runs N calls at once (over random-access inputs and over
streams), in input order unless ``deterministic=False`` (the argument or ``Options``), and
``threading.private_threadpool_size`` caps the workers.  Oracles: a ``threading.Barrier`` that
only N concurrent calls can pass, and an Event that makes a later element finish first."""
import threading

import pytest

import tapejax as tf

D = tf.data.Dataset


def _meeting(n, timeout=10.0):
    """A map function (eager: it branches on the value) whose calls for x > 0 wait for n of them
    (``BrokenBarrierError`` after ``timeout`` seconds)."""
    barrier = threading.Barrier(n, timeout=timeout)

    def f(x):
        if x > 0:
            barrier.wait()
        return x * 2
    return f


STREAM = D.range(1, 9).filter(lambda x: x > 0)


@pytest.mark.parametrize("source", [STREAM, D.range(1, 9)], ids=["stream", "random-access"])
def test_n_calls_run_at_once_in_order(source):
    out = [int(v) for v in source.map(_meeting(2), num_parallel_calls=2)]
    assert out == [2, 4, 6, 8, 10, 12, 14, 16]


def test_autotune_runs_in_parallel_too():
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 2
    out = [int(v) for v in STREAM.map(_meeting(2), num_parallel_calls=tf.data.AUTOTUNE).with_options(opts)]
    assert out == [2, 4, 6, 8, 10, 12, 14, 16]


def test_private_threadpool_size_caps_the_workers():
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 1
    with pytest.raises(threading.BrokenBarrierError):   # one worker: the barrier for two never opens
        list(STREAM.map(_meeting(2, timeout=1.0), num_parallel_calls=2).with_options(opts))


def _first_waits():
    """Element 1 waits until element 2 has been computed: element 2 finishes first."""
    second_done = threading.Event()

    def f(x):
        if x == 1:
            second_done.wait(10)
        elif x == 2:
            second_done.set()
        return x
    return f


def _held_first(release):
    """Element 1 waits for ``release`` (set by the test once it has received another element)."""
    def f(x):
        if x == 1:
            release.wait(10)
        return x
    return f


def test_deterministic_false_gives_elements_as_they_finish():
    src = D.range(1, 3).filter(lambda x: x > 0)
    release = threading.Event()
    it = iter(src.map(_held_first(release), num_parallel_calls=2, deterministic=False))
    first = int(next(it))          # element 1 is still held: element 2 came first
    release.set()
    assert [first, int(next(it))] == [2, 1]
    ordered = [int(v) for v in src.map(_first_waits(), num_parallel_calls=2)]
    assert ordered == [1, 2]


def test_options_deterministic_false_too_and_the_argument_wins():
    src = D.range(1, 3).filter(lambda x: x > 0)
    opts = tf.data.Options()
    opts.deterministic = False
    release = threading.Event()
    it = iter(src.map(_held_first(release), num_parallel_calls=2).with_options(opts))
    first = int(next(it))
    release.set()
    assert [first, int(next(it))] == [2, 1]
    kept = src.map(_first_waits(), num_parallel_calls=2, deterministic=True).with_options(opts)
    assert [int(v) for v in kept] == [1, 2]


def test_an_error_comes_out_at_its_element():
    def f(x):
        if x == 3:
            raise tf.errors.InvalidArgumentError(None, None, "bad element")
        return x
    it = iter(STREAM.map(f, num_parallel_calls=2))
    assert [int(next(it)), int(next(it))] == [1, 2]
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad element"):
        next(it)
