"""Threads: tapes are thread-local, concurrent trainings equal sequential ones, caches stay consistent.

Oracles: the same trainings run one after the other in one thread (results
must be bit-identical: XLA's CPU kernels are deterministic for a fixed
program and input, whichever thread launches them), ``jax.grad`` of the same
pure function, and the replay cache's own counters (every gradient call is
one lookup: hits + misses must equal the number of calls).  Barriers force
the threads to interleave inside each step (one thread records while the
others record, pause or compute gradients), so the interleaving is real,
not luck.
"""
import threading

import jax
import jax.numpy as jnp
import numpy as np

import tapejax as tf
from tapejax.core import caches as _lru, state as _state

N_THREADS = 4
STEPS = 8
TIMEOUT = 60


def _run_threads(target, n=N_THREADS):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(TIMEOUT)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    if errors:
        raise errors[0][1]


def _data(seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(16, 5)).astype(np.float32), rng.normal(size=(16, 1)).astype(np.float32),
            rng.normal(size=(5, 8)).astype(np.float32) * 0.3, rng.normal(size=(8, 1)).astype(np.float32) * 0.3)


class _Model(tf.Module):
    def __init__(self, seed):
        super().__init__()
        _, _, w1, w2 = _data(seed)
        self.w1 = tf.Variable(w1)
        self.b1 = tf.Variable(np.zeros(8, np.float32))
        self.w2 = tf.Variable(w2)

    def __call__(self, x):
        h = tf.tanh(tf.matmul(x, self.w1) + self.b1)
        return tf.matmul(h, self.w2)


def _eager_training(seed, barrier=None):
    x, y, _, _ = _data(seed)
    x, y = tf.constant(x), tf.constant(y)
    model = _Model(seed)
    opt = tf.optimizers.Adam(0.05)
    losses = []
    for _ in range(STEPS):
        if barrier is not None:
            barrier.wait(TIMEOUT)          # every thread is inside the same step
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
            if barrier is not None:
                barrier.wait(TIMEOUT)      # ... with its tape open while the others record
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(loss.numpy())
    return [v.numpy() for v in model.trainable_variables], np.array(losses)


def _function_training(seed, barrier=None):
    x, y, _, _ = _data(seed)
    x, y = tf.constant(x), tf.constant(y)
    model = _Model(seed)
    opt = tf.optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = []
    for _ in range(STEPS):
        if barrier is not None:
            barrier.wait(TIMEOUT)          # every thread is inside the same step
        loss = step(x, y)
        if barrier is not None:
            barrier.wait(TIMEOUT)          # (as many waits per step as the eager training)
        losses.append(loss.numpy())
    assert step.experimental_get_tracing_count() == 2   # the optimizer creates its slots: TF traces twice
    return [v.numpy() for v in model.trainable_variables], np.array(losses)


def test_concurrent_trainings_equal_sequential_ones_bit_for_bit():
    """4 eager (tape + Adam) and 4 tapejax.function (tape + SGD momentum) trainings, each with
    its own model, optimizer and tapes, in 8 threads stepping in lockstep."""
    kinds = [_eager_training] * N_THREADS + [_function_training] * N_THREADS
    n = len(kinds)
    alone = [kinds[i](100 + i) for i in range(n)]
    barrier = threading.Barrier(n)
    together = [None] * n

    def work(i):
        together[i] = kinds[i](100 + i, barrier)

    _run_threads(work, n)
    for i in range(n):
        (va, la), (vt, lt) = alone[i], together[i]
        np.testing.assert_array_equal(lt, la, err_msg=f"thread {i} losses")
        for a, t in zip(va, vt):
            np.testing.assert_array_equal(t, a, err_msg=f"thread {i} variables")
        assert la[-1] < la[0]          # it trained


def test_a_tape_never_records_another_threads_ops_on_a_shared_tensor():
    """Both threads watch the same tensor and compute on it at the same time."""
    x = tf.constant(np.array([1.0, 2.0, 3.0], np.float32))
    barrier = threading.Barrier(2)
    results = {}

    def work(i):
        with tf.GradientTape() as tape:
            tape.watch(x)
            barrier.wait(TIMEOUT)                      # both tapes open
            ys = []
            for k in range(20):                        # interleave op by op
                ys.append(x * float(i + 1) if k % 2 == 0 else tf.sin(x))
                if k % 5 == 0:
                    barrier.wait(TIMEOUT)
            y = tf.add_n(ys)
            barrier.wait(TIMEOUT)                      # both done recording, tapes still open
            n_nodes = len(tape._nodes)
        results[i] = (tape.gradient(y, x).numpy(), n_nodes)

    _run_threads(work, 2)
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    for i in range(2):
        want = jax.grad(lambda v: jnp.sum(sum(v * float(i + 1) if k % 2 == 0 else jnp.sin(v)
                                              for k in range(20))))(xv)
        np.testing.assert_allclose(results[i][0], want, rtol=1e-6)
        assert results[i][1] == 21, results[i][1]      # its 20 ops + add_n: nothing from the other


def test_a_tape_does_not_see_ops_a_thread_runs_while_it_records():
    """Another thread with no tape computes on the watched tensor while this tape records."""
    x = tf.constant(2.0)
    go, done = threading.Event(), threading.Event()
    other = {}

    def background(_):
        assert go.wait(TIMEOUT)
        assert _state.tapes() == []                    # the stack is per thread
        other["y"] = tf.exp(x) * x                     # not recorded anywhere
        done.set()

    th = threading.Thread(target=background, args=(0,))
    th.start()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        mine = x * x
        go.set()
        assert done.wait(TIMEOUT)
        n = len(tape._nodes)
    th.join(TIMEOUT)
    assert n == 1
    assert tape.gradient(other["y"], x) is None        # unconnected: never recorded on this tape
    assert tape.gradient(mine, x).numpy() == 4.0


def test_nested_tapes_and_stop_recording_per_thread():
    """Each thread: an outer and an inner tape (2nd order) and a stop_recording block, with the
    threads in different phases at the same time (thread i pauses while thread j records)."""
    barrier = threading.Barrier(N_THREADS)
    out = [None] * N_THREADS

    def work(i):
        x = tf.constant(float(i + 1))
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = x ** 3
                barrier.wait(TIMEOUT)
                if i % 2 == 0:
                    with inner.stop_recording():
                        barrier.wait(TIMEOUT)          # paused while odd threads record
                        z = y * 100.0                  # constant to inner
                        barrier.wait(TIMEOUT)
                else:
                    barrier.wait(TIMEOUT)
                    z = y * 100.0                      # recorded on inner
                    barrier.wait(TIMEOUT)
                assert len(_state.tapes()) == 2
                t = y + z
            dy = inner.gradient(t, x)                  # 3x^2 (+ 300 x^2 when z is recorded)
            barrier.wait(TIMEOUT)
        d2 = outer.gradient(dy, x)
        assert _state.tapes() == []
        out[i] = (dy.numpy(), d2.numpy())

    _run_threads(work)
    for i in range(N_THREADS):
        x = float(i + 1)
        c = 3.0 if i % 2 == 0 else 303.0
        np.testing.assert_allclose(out[i], (c * x * x, 2 * c * x), rtol=1e-6)


def test_replay_cache_and_counters_stay_consistent_under_concurrent_use(fresh_cache):
    """Threads compute gradients of many structures through a small LRU: evictions race with
    hits and inserts.  No exception, every gradient right, no lost count or entry."""
    old = tf.cache_info().maxsize
    tf.set_cache_size(4)
    calls_per_thread = 25
    barrier = threading.Barrier(N_THREADS)
    wrong = []
    try:
        def work(i):
            rng = np.random.default_rng(i)
            barrier.wait(TIMEOUT)
            for c in range(calls_per_thread):
                depth = int(rng.integers(1, 9))        # 8 structures, 4 slots: constant churn
                v = float(rng.uniform(0.5, 1.5))
                x = tf.constant(v)
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = x
                    for _ in range(depth):
                        y = y * x
                g = tape.gradient(y, x).numpy()
                want = (depth + 1) * np.float32(v) ** depth
                if not np.isclose(g, want, rtol=1e-5):
                    wrong.append((i, c, depth, g, want))
                if c % 6 == 0:
                    barrier.wait(TIMEOUT)

        _run_threads(work)
        info = tf.cache_info()
        assert not wrong, wrong[:3]
        assert info.hits + info.misses == N_THREADS * calls_per_thread
        assert info.size <= 4 and info.maxsize == 4
        assert info.misses == info.size + info.evictions      # every miss inserted; none lost
        assert info.evictions > 0
        stats = tf.cache_stats()
        for name, st in stats.items():
            assert st.size <= st.maxsize, (name, st)
        assert stats["replay"].evictions == info.evictions
    finally:
        tf.set_cache_size(old)


def test_lru_under_concurrent_inserts_and_lookups_never_exceeds_its_bound():
    lru = _lru.LRU("test-threads", 50, register=False)
    barrier = threading.Barrier(N_THREADS)
    seen_over = []

    def work(i):
        barrier.wait(TIMEOUT)
        for k in range(3000):
            key = (i, k % 97)
            if lru.get(key) is None:
                lru.setdefault(key, k)
            if len(lru) > 50:
                seen_over.append(len(lru))

    _run_threads(work)
    assert not seen_over
    assert len(lru) <= 50
    # every insert is either still there or was evicted: nothing lost, nothing double-counted
    inserts = lru.evictions + len(lru)
    assert inserts >= 50 and lru.evictions > 0


def test_the_same_tape_object_is_not_shared_by_a_thread_that_did_not_enter_it():
    """A tape entered in one thread records nothing that another thread computes, even
    when the other thread is handed the tape object and the watched tensor."""
    x = tf.constant(3.0)
    box = {}
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)

        def other():
            box["y"] = x * x
            box["stack"] = list(_state.tapes())

        th = threading.Thread(target=other)
        th.start()
        th.join(TIMEOUT)
        z = x + 1.0
    assert box["stack"] == []
    assert tape.gradient(box["y"], x) is None
    assert tape.gradient(z, x).numpy() == 1.0
