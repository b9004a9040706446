"""tapejax.data beyond what real tf.data can check (tests/parity/test_data.py does that): the
documented shuffle order, when dataset functions are traced, Variables and random ops inside
them, tapes, threads and 64-bit mode, cache fills, iteration inside a trace, Options, messages
that name the argument, and the ImportError naming the extra when grain is missing.
Oracles: hand-derived values and the README's formulas."""
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.data import _grain
from tapejax.data.dataset import Build

D = tf.data.Dataset


def ints(ds):
    return [int(v) for v in ds.as_numpy_iterator()]


# -- shuffle: the documented order ---------------------------------------------------

def test_shuffle_order_is_the_documented_window_permutation():
    """Window w of epoch e of iteration k: numpy's permutation seeded (seed, k, e, w)."""
    tf.random.set_seed(None)   # (the op seed's stream restarts, as in TF: earlier tests drew from it)
    ds = D.range(10).shuffle(4, seed=7)
    want = []
    for epoch in range(2):
        for w, size in enumerate((4, 4, 2)):
            want += list(np.random.default_rng([7, 0, epoch, w]).permutation(size) + 4 * w)
    assert ints(ds.repeat(2)) == want
    # a new iteration (reshuffle_each_iteration) is iteration 1
    second = list(np.random.default_rng([7, 1, 0, 0]).permutation(4))
    assert ints(ds.repeat(2))[:4] == second


def test_shuffle_reproducible_from_the_global_seed():
    tf.random.set_seed(5)
    a = ints(D.range(50).shuffle(50))
    tf.random.set_seed(5)
    b = ints(D.range(50).shuffle(50))
    tf.random.set_seed(None)
    assert a == b and sorted(a) == list(range(50)) and a != list(range(50))


def test_shuffle_of_a_stream_is_grains_window_shuffle():
    gen = D.from_generator(lambda: iter(range(12)), output_signature=tf.TensorSpec((), tf.int32))
    ds = gen.shuffle(4, seed=3).repeat(2)
    got = ints(ds)
    for i in range(0, 24, 4):      # every window of the stream holds the same four elements
        assert sorted(got[i:i + 4]) == list(range(i % 12, i % 12 + 4))
    assert got[:12] != got[12:]    # a new order in the second epoch


def test_from_generator_copies_an_array_it_refills_in_place():
    """A generator that refills and yields one array: each element keeps the values it had when
    it was yielded (they all ended as the last one: batches of repeated rows).  Oracle: TF 2.21
    (which copies unless the array happens to be 64-byte aligned, see
    tests/parity/test_user_programs7.py ``_unaligned``)."""
    def gen():
        buf, lab = np.zeros(2, np.float32), np.zeros((), np.int32)
        for i in range(5):
            buf[:] = i
            lab[...] = i
            yield buf, lab

    spec = (tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.int32))
    got = [(x.tolist(), y.tolist()) for x, y in D.from_generator(gen, output_signature=spec)
           .batch(2).prefetch(2).as_numpy_iterator()]
    assert got == [([[0.0, 0.0], [1.0, 1.0]], [0, 1]), ([[2.0, 2.0], [3.0, 3.0]], [2, 3]), ([[4.0, 4.0]], [4])]
    it = iter(D.from_generator(gen, output_signature=spec))
    first, second = next(it), next(it)
    assert first[0].numpy().tolist() == [0.0, 0.0] and second[0].numpy().tolist() == [1.0, 1.0]


# -- functions: tracing, Variables, random ops, tapes -------------------------------------

def test_map_is_traced_at_map_time_and_once_per_input_shape():
    calls = []

    def f(x):
        calls.append(tuple(x.shape))
        return x * 2.0

    ds = D.from_tensor_slices(np.ones((6, 3), np.float32)).map(f)
    assert len(calls) == 1                      # map(): the output spec, and the program
    assert [v.numpy().tolist() for v in ds][0] == [2.0, 2.0, 2.0]
    assert len(calls) == 1                      # (as TF: traced once)
    list(ds)
    assert len(calls) == 1
    batched = D.from_tensor_slices(np.ones((5, 3), np.float32)).batch(2).map(f)
    n = len(calls)
    list(batched)                               # shapes (2, 3) and (1, 3): two traces
    assert len(calls) == n + 2
    assert batched.element_spec.shape == (None, 3)


def test_map_filling_a_dynamic_tensor_array_in_a_loop_runs_eagerly():
    """TF converts ``for i in tf.range(3): ta = ta.write(i, ...)`` in a map function; here the
    unconverted trace cannot grow the array (TracedSizeError), so the function runs eagerly per
    element: TF's values and spec (``[None]``)."""
    def f(x):
        ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        for i in tf.range(3):
            ta = ta.write(i, x + i)
        return ta.stack()

    ds = D.from_tensor_slices(np.array([0, 1], np.int32)).map(f)
    assert ds.element_spec.shape.as_list() == [None]
    assert [v.tolist() for v in ds.as_numpy_iterator()] == [[0, 1, 2], [1, 2, 3]]


def test_range_output_type_may_be_floating():
    """TF's RangeDataset casts its int64 values to any real ``output_type``; the arguments stay
    integers (a float step is TypeError in TF as here)."""
    ds = D.range(1, 6, 2, output_type=tf.float32)
    assert ds.element_spec.dtype == tf.float32 and int(ds.cardinality()) == 3
    assert [float(v) for v in ds] == [1.0, 3.0, 5.0]
    assert D.range(3, output_type=tf.float16).batch(3).get_single_element().numpy().tolist() == [0.0, 1.0, 2.0]
    assert D.range(2, output_type=tf.bfloat16).element_spec.dtype == tf.bfloat16
    with pytest.raises(TypeError):
        D.range(0, 1, 0.5, output_type=tf.float32)


def test_map_reads_a_variable_when_each_element_is_computed():
    v = tf.Variable(1.0)
    ds = D.from_tensor_slices(np.arange(3, dtype=np.float32)).map(lambda x: x * v)
    assert [float(t) for t in ds] == [0.0, 1.0, 2.0]
    v.assign(10.0)
    assert [float(t) for t in ds] == [0.0, 10.0, 20.0]


def test_map_may_not_assign_or_create_variables():
    v = tf.Variable(0.0)
    r = D.range(3)
    with pytest.raises(ValueError, match="assigns a Variable"):
        r.map(lambda x: v.assign_add(1.0))
    with pytest.raises(ValueError, match="creates a Variable"):
        r.map(lambda x: tf.Variable(1.0) * 2.0)
    assert float(v) == 0.0


def test_random_ops_in_map_draw_per_element():
    vals = [float(t) for t in D.range(8).map(lambda x: tf.random.uniform([]))]
    assert len(set(vals)) == 8


def test_tapes_do_not_record_the_pipeline():
    c = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(c)
        ds = D.from_tensor_slices(np.ones(4, np.float32)).map(lambda x: x * c)
        total = tf.add_n(list(ds))
        direct = c * 2.0
    assert float(total) == 12.0
    assert tape.gradient(total, c) is None
    assert float(tape.gradient(direct, c)) == 2.0


def test_next_inside_a_custom_gradient_forward_and_a_forward_accumulator():
    """The recorders there are not tapes (a custom gradient's Variable watcher, an accumulator):
    they see nothing of the element's production, as tapes do not.  TF 2.21's numbers: the
    forward 4.0 and the user's gradient 3.0; the accumulator's jvp of ``x * element`` is 0."""
    it = iter(D.from_tensor_slices(np.arange(6, dtype=np.float32)).batch(2))
    x = tf.constant(2.0)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(1.0)) as acc:
        y = x * next(it)[0]
    assert float(acc.jvp(y)) == 0.0

    @tf.custom_gradient
    def f(x):
        return x * next(it)[0], lambda dy: dy * 3.0

    with tf.GradientTape() as tape:
        tape.watch(x)
        z = f(x)
    assert (float(z), float(tape.gradient(z, x))) == (4.0, 3.0)


def test_parallel_map_keeps_the_order():
    x = np.arange(200, dtype=np.float32)
    seq = D.from_tensor_slices(x).map(lambda v: v * v)
    par = D.from_tensor_slices(x).map(lambda v: v * v, num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
    assert [float(t) for t in par] == [float(t) for t in seq] == list(x * x)


def test_worker_threads_keep_64_bit_mode():
    with jax.enable_x64(True):
        ds = D.range(5).map(lambda v: v * 2, num_parallel_calls=2).prefetch(2)
        got = list(ds)
    assert all(t.dtype == tf.int64 for t in got) and [int(t) for t in got] == [0, 2, 4, 6, 8]


def test_iterating_inside_a_jax_trace_is_refused():
    ds = D.range(3)

    def f(x):
        for v in ds:
            x = x + v
        return x
    with pytest.raises(ValueError, match="other than tapejax.function's"):
        jax.jit(f)(0)
    it = iter(ds)
    with pytest.raises(ValueError, match="other than tapejax.function"):
        jax.jit(lambda: next(it)._value)()
    first = tf.function(lambda: next(iter(ds)))   # a new iterator at each call: its first element
    assert [int(first()) for _ in range(2)] == [0, 0]
    f = tf.function(lambda: next(it))   # made outside, read inside: the next element at each call
    assert [int(f()) for _ in range(3)] == [0, 1, 2]


# -- cache, None components, generators, options ---------------------------------------------

def test_cache_keeps_only_a_complete_first_pass():
    ds = D.range(20).shuffle(20, seed=1).cache()
    partial = []
    for v in ds:                 # an unfinished pass is not kept
        partial.append(int(v))
        if len(partial) == 3:
            break
    full = ints(ds)
    assert ints(ds) == full and ints(ds) == full
    assert partial != full[:3] or sorted(full) == list(range(20))


def test_file_cache_is_written_by_a_complete_pass_and_read_by_later_ones(tmp_path):
    """``cache(filename)``: a pass left unfinished writes nothing; a complete one writes the file,
    which a dataset over another source with the same filename reads (TF's rule), and another
    process too; bfloat16 and structured elements round-trip."""
    f = str(tmp_path / "c")
    ds = D.range(5).map(lambda v: v * 10).cache(f)
    it = iter(ds)
    next(it)
    del it
    assert not (tmp_path / "c.tapejax-cache.npz").exists()      # an unfinished pass keeps nothing
    assert ints(ds) == [0, 10, 20, 30, 40]
    assert (tmp_path / "c.tapejax-cache.npz").exists()
    assert ints(D.range(3).cache(f)) == [0, 10, 20, 30, 40]    # the file, not the new source
    g = str(tmp_path / "s")
    structured = D.from_tensor_slices(({"a": np.array([1.0, 2.0], np.float32)},
                                       np.array([1.5, -2.0], jax.numpy.bfloat16))).cache(g)
    first = list(structured.as_numpy_iterator())
    again = list(D.from_tensor_slices(({"a": np.zeros(2, np.float32)},
                                       np.zeros(2, jax.numpy.bfloat16))).cache(g).as_numpy_iterator())
    assert [(e[0]["a"], e[1]) for e in again] == [(e[0]["a"], e[1]) for e in first]
    assert again[1][1].dtype == jax.numpy.bfloat16 and float(again[1][1]) == -2.0
    code = f"import tapejax as tf; print([int(v) for v in tf.data.Dataset.range(1).cache({f!r})])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)})
    assert out.stdout.strip().splitlines()[-1] == "[0, 10, 20, 30, 40]", out.stderr[-2000:]


def test_none_components_and_generator_args():
    ds = D.from_tensor_slices((np.arange(3, dtype=np.int32), None))
    assert isinstance(ds.element_spec[1], tf.data.NoneTensorSpec)
    assert [(int(a), b) for a, b in ds] == [(0, None), (1, None), (2, None)]
    gen = D.from_generator(lambda n: iter(range(int(n))), args=(3,), output_signature=tf.TensorSpec((), tf.int32))
    assert ints(gen) == [0, 1, 2]


def test_options():
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 3
    opts.deterministic = True
    ds = D.range(3).with_options(opts).map(lambda v: v + 1)
    merged = ds.options()
    assert merged.threading.private_threadpool_size == 3 and merged.deterministic is True
    assert Build(merged).threads(tf.data.AUTOTUNE) <= 3
    off = tf.data.Options()
    off.autotune.enabled = False
    assert Build(off).threads(tf.data.AUTOTUNE) == 1
    with pytest.raises(AttributeError, match="Cannot set the property"):
        opts.no_such_option = 1
    with pytest.raises(TypeError, match="deterministic"):
        opts.deterministic = 3


@pytest.mark.parametrize("call, words", [
    (lambda r: r.batch(0), ["`batch_size`", "greater than zero", "got 0"]),
    (lambda r: r.batch(-3), ["`batch_size`", "got -3"]),
    (lambda r: r.batch(1.5), ["`batch_size`", "1.5", "float"]),
    (lambda r: r.padded_batch(0), ["`batch_size`", "got 0"]),
    (lambda r: r.shuffle(0), ["`buffer_size`", "got 0"]),
    (lambda r: r.prefetch(-5), ["`buffer_size`", "got -5"]),
    (lambda r: r.take(1.5), ["`count`", "1.5"]),
    (lambda r: r.map(3), ["`func`", "3"]),
    (lambda r: r.map(lambda v: v, num_parallel_calls=0), ["`num_parallel_calls`", "got 0"]),
    (lambda r: r.map(lambda v: object()), ["Unsupported return value", "Dataset.map()", "object"]),
    (lambda r: r.filter(lambda v: v), ["`predicate`", "tf.bool", "int"]),
    (lambda r: r.concatenate(3), ["`dataset`", "int"]),
    (lambda r: D.from_tensor_slices((np.zeros(3, np.float32), np.zeros(4, np.float32))), ["3", "4"]),
])
def test_messages_name_the_argument(call, words):
    with pytest.raises(Exception) as e:
        call(D.range(10))
    msg = str(e.value)
    assert all(w in msg for w in words), msg


# -- grain is optional ------------------------------------------------------------------

def test_missing_grain_raises_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "grain", None)
    monkeypatch.setattr(_grain, "_GRAIN", None)
    with pytest.raises(ImportError, match=r"tapejax\[data\]"):
        D.range(3)
    with pytest.raises(ImportError, match=r"tapejax\[data\]"):
        D.from_tensor_slices([1, 2])


def test_tapejax_imports_without_grain():
    code = textwrap.dedent("""
        import sys
        sys.modules["grain"] = None
        import tapejax as tf
        assert tf.data.AUTOTUNE == -1
        try:
            tf.data.Dataset.range(3)
        except ImportError as e:
            print("IMPORTERROR", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert "IMPORTERROR" in out.stdout and "tapejax[data]" in out.stdout, out.stderr[-2000:]


def test_inner_datasets_of_an_interleave_share_one_compiled_map_program():
    """Each input element's inner dataset maps a function closing over that element: the traces
    are the same program with another captured value, compiled once (the captured value is an
    argument, so each inner dataset still gets its own values)."""
    import logging

    def g(x):
        return x * 2 + 1

    def inner(i):
        return D.range(4).map(lambda x: x + i).map(g)

    messages = []

    class Catch(logging.Handler):
        def emit(self, record):
            if "Compiling" in record.getMessage():
                messages.append(record.getMessage())

    handler = Catch()
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles(True):
            ds = D.range(8).interleave(inner, cycle_length=3)
            got = [int(v) for v in ds]
    finally:
        logging.getLogger("jax").removeHandler(handler)
    want = []
    blocks = [[(x + i) * 2 + 1 for x in range(4)] for i in range(8)]
    for start in range(0, 8, 3):   # TF's interleave order: cycles of 3 inputs, one element each
        group = blocks[start:start + 3]
        for k in range(4):
            want += [b[k] for b in group]
    assert got == want
    # the two map programs (x + i, g), compiled once each for all eight inner datasets (the
    # element programs: ``data.functions.shared_program``; a trace per function was ``_pure``)
    assert len([m for m in messages if "element_program" in m or "_pure" in m]) == 2, messages
