"""Iterator reads inside tapejax.function (``tapejax/data/staged.py``): one trace, a new element per
call (never the trace's element frozen in), the read-ahead for unknown sizes, the errors, the
iterator's position and checkpoint, tapes."""
import jax
import numpy as np
import pytest

import tapejax as tf

D = tf.data.Dataset


def test_one_trace_and_a_new_element_every_call():
    it = iter(D.from_tensor_slices(np.arange(6, dtype=np.float32)).batch(2, drop_remainder=True))
    traces = []

    @tf.function
    def f(it):
        traces.append(1)
        return tf.reduce_sum(next(it))

    assert [float(f(it)) for _ in range(3)] == [1.0, 5.0, 9.0]
    assert len(traces) == 1 and f.experimental_get_tracing_count() == 1
    with pytest.raises(tf.errors.OutOfRangeError):
        f(it)


def test_unknown_size_reads_ahead_without_losing_the_element():
    ds = D.from_tensor_slices(np.arange(7, dtype=np.float32)).batch(3)
    it = iter(ds)
    f = tf.function(lambda it: next(it) * 1.0)
    assert f(it).numpy().tolist() == [0.0, 1.0, 2.0]   # the element read ahead to key the call
    assert f(it).numpy().tolist() == [3.0, 4.0, 5.0]
    assert f(it).numpy().tolist() == [6.0]              # the short last batch: a second trace
    assert f.experimental_get_tracing_count() == 2
    it = iter(ds)
    g = tf.function(lambda: next(it) * 1.0)              # captured: shapes fixed at the trace
    assert g().numpy().tolist() == [0.0, 1.0, 2.0] and g().numpy().tolist() == [3.0, 4.0, 5.0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="drop_remainder=True"):
        g()


def test_iterators_of_one_spec_share_a_trace_and_are_not_kept_alive():
    import gc
    import weakref
    ds = D.from_tensor_slices(np.arange(4, dtype=np.int32)).batch(2, drop_remainder=True)
    f = tf.function(lambda it: tf.reduce_sum(next(it)))
    refs = []
    for _ in range(3):                                   # an epoch: a new iterator, the same program
        it = iter(ds)
        assert [int(f(it)), int(f(it))] == [1, 5]
        refs.append(weakref.ref(it))
        del it
    gc.collect()
    assert f.experimental_get_tracing_count() == 1
    assert all(r() is None for r in refs)


def test_string_components_are_refused_at_trace_time(tmp_path):
    (tmp_path / "lines.txt").write_text("a\nb\n")
    it = iter(tf.data.TextLineDataset(str(tmp_path / "lines.txt")))
    with pytest.raises(ValueError, match="numeric tensor components"):
        tf.function(lambda it: next(it))(it)


def test_checkpoint_saves_the_position_the_steps_reached(tmp_path):
    ds = D.from_tensor_slices(np.arange(10, dtype=np.int32))
    it = iter(ds)
    f = tf.function(lambda it: next(it))
    assert [int(f(it)) for _ in range(3)] == [0, 1, 2]
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ckpt"))
    assert int(f(it)) == 3
    fresh = iter(ds)
    tf.train.Checkpoint(iterator=fresh).restore(path)
    assert int(f(fresh)) == 3


def test_a_tape_inside_the_step_differentiates_through_the_element():
    w = tf.Variable(2.0)
    it = iter(D.from_tensor_slices(np.array([1.0, 3.0], np.float32)))

    @tf.function
    def grad(it):
        x = next(it)
        with tf.GradientTape() as tape:
            y = w * x * x
        return tape.gradient(y, w)

    assert [float(grad(it)) for _ in range(2)] == [1.0, 9.0]   # d(w x^2)/dw = x^2


def test_called_eagerly_under_a_tape_reads_in_python():
    """A function with a host callback called under a recording tape runs op by op: the read is an
    eager next(it), and the gradient reaches the Variable."""
    w = tf.Variable(2.0)
    it = iter(D.from_tensor_slices(np.array([1.0, 3.0], np.float32)))
    f = tf.function(lambda it: w * next(it))
    f(it)
    with tf.GradientTape() as tape:
        y = f(it)
    assert float(y) == 6.0 and float(tape.gradient(y, w)) == 3.0


def test_reading_in_a_dataset_function_is_refused():
    it = iter(D.range(3))
    with pytest.raises(ValueError, match="other than tapejax.function"):
        list(D.range(2).map(lambda v: v + next(it)))


def test_optional_inside_a_while_loop_reads_until_empty():
    it = iter(D.from_tensor_slices(np.arange(1, 5, dtype=np.float32)))

    @tf.function
    def total(it):
        s = tf.constant(0.0)
        n = tf.constant(0)
        while n < 10:
            opt = it.get_next_as_optional()
            if not opt.has_value():
                break
            s += opt.get_value()
            n += 1
        return s, n

    s, n = total(it)
    assert float(s) == 10.0 and int(n) == 4


def test_jit_trace_still_refuses():
    it = iter(D.range(3))
    with pytest.raises(ValueError):
        jax.jit(lambda: it.get_next_as_optional().has_value()._value)()


def test_for_over_a_dataset_leaves_no_iterator_open():
    from tapejax.data import staged_for
    ds = D.from_tensor_slices(np.arange(6, dtype=np.int32))

    @tf.function
    def first_over(limit):
        found = tf.constant(-1)
        for v in ds:
            if v > limit:
                found = v
                break
        return found

    before = set(staged_for._OPEN)   # (an iter(dataset) site of another test may keep one open)
    assert [int(first_over(tf.constant(k))) for k in (2, 4, 9)] == [3, 5, -1]
    assert set(staged_for._OPEN) <= before


def test_for_over_a_dataset_eagerly_is_a_python_loop():
    from tapejax.data.staged_for import dataset_for_stmt
    seen = []
    dataset_for_stmt(D.range(3), None, lambda v: seen.append(int(v)), lambda: (), lambda s: None, (), {})
    assert seen == [0, 1, 2]


def test_a_failed_read_in_a_dataset_loop_drops_its_iterator():
    from tapejax.data import staged_for
    ds = D.from_tensor_slices(np.arange(7, dtype=np.float32)).batch(3)

    @tf.function
    def total():
        s = tf.constant(0.0)
        for b in ds:
            s += tf.reduce_sum(b)
        return s

    before = set(staged_for._OPEN)
    with pytest.raises(tf.errors.InvalidArgumentError, match="drop_remainder=True"):
        total()
    assert set(staged_for._OPEN) <= before


def test_a_numpy_iterator_inside_the_step_names_iter():
    it = D.range(3).as_numpy_iterator()
    with pytest.raises(ValueError, match=r"read iter\(dataset\) there"):
        tf.function(lambda: tf.constant(next(it)))()


def test_iterators_made_in_a_step_stay_bounded():
    """``next(iter(ds))`` leaves its iterator open at the end of the call: the next call closes it
    when it opens its own (at most one per site); a ``reduce`` or a ``for`` closes its own."""
    from tapejax.data import staged_for
    ds = D.range(100)
    first = tf.function(lambda: next(iter(ds)))
    total = tf.function(lambda: ds.reduce(tf.constant(0), lambda s, x: s + tf.cast(x, tf.int32)))
    before = len(staged_for._OPEN)
    for _ in range(20):
        assert int(first()) == 0
        assert int(total()) == 4950
    assert len(staged_for._OPEN) - before <= 1


def test_reduce_in_a_step_whose_state_changes_dtype_is_a_type_error():
    ds = D.range(3)
    f = tf.function(lambda: ds.reduce(tf.constant(0), lambda s, x: tf.cast(s, tf.float32) + 1.0))
    with pytest.raises(TypeError, match="must match the initial state"):
        f()


def test_a_traced_count_for_a_dataset_made_in_the_step_names_the_argument():
    """``ds.take(n)`` / ``Dataset.range(n)`` with ``n`` an argument of the step (TF stages them): the
    error names the argument and the two ways out; a Python int works (it keys the trace)."""
    ds = D.from_tensor_slices(np.arange(5, dtype=np.float32))

    @tf.function
    def first(n):
        s = tf.constant(0.0)
        for v in ds.take(n):
            s += v
        return s

    @tf.function
    def total(n):
        return D.range(n).reduce(0, lambda a, b: a + b)

    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="Argument `count` is a tensor known only"):
        first(tf.constant(2))
    with pytest.raises(AttributeError, match="Argument `stop`"):
        total(tf.constant(4))
    assert float(first(2)) == 1.0 and float(first(4)) == 6.0
