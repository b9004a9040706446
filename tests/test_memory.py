"""Memory: long training loops stay flat, recorded state dies with its tape, every cache is bounded.

Oracles: ``tracemalloc`` (Python allocations, by line), the process RSS
(``/proc/self/statm``), ``sys.getallocatedblocks()``, weak references to the
recorded arrays / tapes / evicted compiled functions, and ``cache_stats()``
checked against each cache's own bound.  ``TAPEJAX_SOAK=1`` runs the long
variants (3,000 program structures instead of 48).
"""
import gc
import os
import sys
import tracemalloc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.autodiff import nodes as _nodes, replay as _replay
from tapejax.compile import control_flow as _control_flow
from tapejax.core import caches as _lru, state as _state
from tapejax.runtime import settle as _settle

SOAK = os.environ.get("TAPEJAX_SOAK", "") not in ("", "0")
N_STRUCTURES = 3000 if SOAK else 48
MB = 1 << 20


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _traced_growth(before, after):
    return sum(d.size_diff for d in after.compare_to(before, "filename"))


def _top(before, after, n=6):
    return "\n".join(str(d) for d in after.compare_to(before, "lineno")[:n])


# ---------------------------------------------------------------------------
# 10,000-step training loops
# ---------------------------------------------------------------------------

def _problem():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(8, 4)).astype(np.float32))
    y = tf.constant(rng.normal(size=(8, 1)).astype(np.float32))
    w = tf.Variable(rng.normal(size=(4, 1)).astype(np.float32) * 0.1)
    b = tf.Variable(np.zeros(1, np.float32))
    return x, y, w, b


def _soak(step, n_steps, traced_steps, warmup=300):
    """Run ``n_steps`` after warm-up; tracemalloc over the last ``traced_steps``; RSS over all."""
    for _ in range(warmup):
        step()
    gc.collect()
    rss0 = _rss()
    for _ in range(n_steps - traced_steps):
        step()
    gc.collect()
    tracemalloc.start()
    try:
        snap0 = tracemalloc.take_snapshot()
        for _ in range(traced_steps):
            step()
        gc.collect()
        snap1 = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    gc.collect()
    return _rss() - rss0, snap0, snap1


@pytest.fixture
def default_modes():
    """Deferral and predicted updates on (the defaults), whatever TAPEJAX_DEFERRED / _SPECULATE say."""
    prev = tf.set_deferred_execution(True), tf.set_speculative_updates(True)
    yield
    tf.set_deferred_execution(prev[0])
    tf.set_speculative_updates(prev[1])


def test_10000_eager_training_steps_keep_memory_flat(fresh_cache, default_modes):
    x, y, w, b = _problem()
    opt = tf.optimizers.Adam(0.01)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        g = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(g, [w, b]))
        return loss

    first = step().numpy()
    rss, s0, s1 = _soak(step, 10_000, traced_steps=1_000)
    growth = _traced_growth(s0, s1)
    assert growth < 64 * 1024, f"{growth} B of Python allocations kept over 1,000 steps:\n{_top(s0, s1)}"
    assert rss < 4 * MB, f"RSS grew {rss / MB:.1f} MB over 10,000 steps"
    assert step().numpy() < first                    # it trained
    # step 1's gradient, then (from step 3) the gradient with Adam's update predicted in it
    assert tf.cache_info().size == 1 and tf.cache_info().compiles == 2
    assert int(opt.iterations.numpy()) == 10_302


def test_10000_function_training_steps_keep_memory_flat():
    x, y, w, b = _problem()
    opt = tf.optimizers.SGD(0.01, momentum=0.9)

    @tf.function
    def train(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        g = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(g, [w, b]))
        return loss

    first = train(x, y).numpy()
    rss, s0, s1 = _soak(lambda: train(x, y), 10_000, traced_steps=10_000)
    growth = _traced_growth(s0, s1)
    assert growth < 64 * 1024, f"{growth} B of Python allocations kept over 10,000 steps:\n{_top(s0, s1)}"
    assert rss < 4 * MB, f"RSS grew {rss / MB:.1f} MB over 10,000 steps"
    assert train(x, y).numpy() < first
    assert train.experimental_get_tracing_count() == 2   # the optimizer creates its slots: TF traces twice


# ---------------------------------------------------------------------------
# recorded state dies with its tape (weak references)
# ---------------------------------------------------------------------------

def _big(seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=(256,)).astype(np.float32))


def _dead(*refs):
    gc.collect()
    return all(r() is None for r in refs)


# ---------------------------------------------------------------------------
# Unread pending values (issue #20, 8): bounded by their own step, not by the loop
# ---------------------------------------------------------------------------

N_PILE = 5000


def _pending_thunks():
    from tapejax.runtime.thunks import Thunk
    return sum(1 for o in gc.get_objects() if type(o) is Thunk and o.value is None)


def _live():
    arrays = jax.live_arrays()
    return len(arrays), sum(a.nbytes for a in arrays)


def _logging_loop():
    """A training loop (SGD on w 16x16) that keeps what it logs and never reads it: a metric
    computed inside the tape and one of the gradient (an untaped op on it), each appended to a
    list every step, and running sums ``tot = tot + loss`` inside and after the tape.  Returns
    (step function, the kept values)."""
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.normal(size=(16, 16)).astype(np.float32) * 0.05)
    x = tf.constant(rng.normal(size=(4, 16)).astype(np.float32))
    opt = tf.keras.optimizers.SGD(0.01)
    kept = {"maes": [], "gnorms": [], "inside": 0.0, "outside": 0.0}

    def step():
        with tf.GradientTape() as tape:
            h = tf.matmul(x, w)
            loss = tf.reduce_mean(h * h)
            kept["maes"].append(tf.reduce_mean(tf.abs(h - 1)))
            kept["inside"] = kept["inside"] + loss
        g = tape.gradient(loss, w)
        kept["gnorms"].append(tf.reduce_sum(g * g))
        opt.apply_gradients([(g, w)])
        kept["outside"] = kept["outside"] + loss

    return step, kept


def _logged(kept):
    return ([float(v) for v in kept["maes"][-3:]], [float(v) for v in kept["gnorms"][-3:]],
            float(kept["inside"]), float(kept["outside"]))


@pytest.mark.parametrize("speculate,n_steps", [(True, N_PILE), (False, 1000)])
def test_unread_pending_values_stay_bounded_over_5000_steps(speculate, n_steps):
    """TF computes a metric when it is called; deferred, an unread metric kept in a list held its
    step's graph (the step's weights: ~1 MB a step for w 512x512), and ``tot = tot + loss`` a
    chain as long as the loop.  Now each holds about two steps' graphs: over 5,000 steps the
    live arrays grow by one scalar per kept metric (as TF's), none for the running sums, and
    the pending thunks and tracked values stay a handful.  (Updates not predicted: the same
    loop, 1,000 steps, to keep the test short.)"""
    prev = tf.set_deferred_execution(True), tf.set_speculative_updates(speculate)
    try:
        step, kept = _logging_loop()
        for _ in range(200):
            step()
        gc.collect()
        n0, bytes0 = _live()
        steps = n_steps - 200
        for _ in range(steps):
            step()
        gc.collect()
        n1, bytes1 = _live()
        assert n1 - n0 <= 2 * steps + 16, (n0, n1)            # the two metrics' scalars
        assert bytes1 - bytes0 <= 2 * 4 * steps + 4096, (bytes0, bytes1)
        assert _pending_thunks() <= 16
        assert _settle.tracked_values() <= 16
        assert all(np.isfinite(_logged(kept)[2:]))
    finally:
        tf.set_deferred_execution(prev[0])
        tf.set_speculative_updates(prev[1])


@pytest.mark.parametrize("speculate", [True, False])
def test_logged_values_match_eager_execution(speculate):
    """The values the bounded loop logs are the eager loop's (the oracle: deferral off)."""
    prev = tf.set_speculative_updates(speculate)
    try:
        got = {}
        for deferred in (True, False):
            tf.set_deferred_execution(deferred)
            step, kept = _logging_loop()
            for _ in range(40):
                step()
            got[deferred] = _logged(kept)
        for a, b in zip(got[True], got[False]):
            np.testing.assert_allclose(a, b, rtol=1e-5)
    finally:
        tf.set_deferred_execution(True)
        tf.set_speculative_updates(prev)


def test_persistent_tape_keeps_records_until_deleted_then_releases_them():
    x = _big()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        h = tf.exp(x * 0.5)
        y = tf.reduce_sum(h * h)
    ref_h, ref_tape = weakref.ref(h._value), weakref.ref(tape)
    del h
    for _ in range(3):                               # used several times: still holds its records
        tape.gradient(y, x)
    tape.jacobian(y, x)
    assert not _dead(ref_h), "a persistent tape must keep its records while it lives"
    del tape, y
    assert _dead(ref_h, ref_tape)


def test_nested_tapes_release_everything_after_use():
    x = _big()

    def run():
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                h = tf.sin(x) * x
                y = tf.reduce_sum(h)
            g = inner.gradient(y, x)                     # recorded on outer (2nd order)
            gsum = tf.reduce_sum(g * g)
        refs = [weakref.ref(h._value), weakref.ref(g._value)]
        d2 = outer.gradient(gsum, x)
        # both non-persistent tapes have released their records, though the objects live
        assert inner._nodes == [] and outer._nodes == [] and outer._codes == {}
        return refs, weakref.ref(inner), weakref.ref(outer), d2

    refs, r_in, r_out, d2 = run()
    assert d2.shape == (256,)
    assert _dead(*refs, r_in, r_out)
    assert _state.tapes() == []


@pytest.mark.parametrize("persistent", [False, True])
def test_exception_inside_nested_tapes_leaves_no_recorded_state_alive(persistent):
    x = _big()
    refs = []

    def run():
        with tf.GradientTape(persistent=persistent) as outer:
            outer.watch(x)
            h0 = tf.exp(x)
            with tf.GradientTape(persistent=persistent) as inner:
                inner.watch(x)
                h1 = tf.tanh(h0) * x
                refs.extend([weakref.ref(h0._value), weakref.ref(h1._value), weakref.ref(inner),
                             weakref.ref(outer)])
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run()
    assert _state.tapes() == []                      # both popped by the exception
    assert _dead(*refs)


def test_exception_inside_the_inner_tape_leaves_the_outer_recording_correctly():
    x = tf.constant(3.0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        try:
            with tf.GradientTape() as inner:
                inner.watch(x)
                _ = x * x
                raise ValueError("inner failed")
        except ValueError:
            pass
        assert _state.tapes() == [outer]
        y = x * x * x
    assert outer.gradient(y, x).numpy() == 27.0


def test_exception_inside_stop_recording_resumes_recording():
    x = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        try:
            with tape.stop_recording():
                assert _state.tapes() == []
                raise KeyError("paused")
        except KeyError:
            pass
        assert _state.tapes() == [tape]
        y = x * x
    assert tape.gradient(y, x).numpy() == 4.0


def test_exception_after_gradient_on_a_persistent_tape_releases_on_delete():
    x = _big()
    refs = []

    def run():
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            h = tf.square(x)
            refs.extend([weakref.ref(h._value), weakref.ref(tape)])
            tape.gradient(tf.reduce_sum(h), x)       # inside the block: recorded on itself
            raise RuntimeError("after gradient")

    with pytest.raises(RuntimeError):
        run()
    assert _dead(*refs)


def test_compiled_replay_cache_holds_no_recorded_values(fresh_cache):
    x = _big()
    w = tf.Variable(np.ones(256, np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        h = tf.exp(x) * w
        y = tf.reduce_sum(h)
    ref_h = weakref.ref(h._value)
    tape.gradient(y, [x, w])
    assert tf.cache_info().size == 1
    del h, y, tape
    assert _dead(ref_h), "the cached compiled gradient must take values as arguments, not hold them"


def test_failed_function_trace_leaves_no_tracer_and_no_entry():
    v = tf.Variable(np.ones(3, np.float32))

    @tf.function
    def f(x):
        v.assign_add(x)
        raise RuntimeError("trace failed")

    with pytest.raises(RuntimeError):
        f(tf.ones(3))
    assert isinstance(v._value, type(jnp.ones(1))) and not v._value.is_deleted()
    np.testing.assert_array_equal(v.numpy(), np.ones(3))
    assert len(f._cache) == 0
    assert _state._local.collector is None and _state.tapes() == []


# ---------------------------------------------------------------------------
# every cache is bounded
# ---------------------------------------------------------------------------

_GLOBAL = {"replay": 8, "slices": 16, "signatures": 16, "control_flow": 3, "op_output_trees": 4, "jax_op_functions": 2,
           "custom_checked": 2, "scalar_constants": 4, "deferred_avals": 4, "deferred_programs": 2,
           "deferred_structures": 2, "fused_updates": 2, "speculation_tracks": 2, "speculative_programs": 2,
           "speculative_regradients": 2, "transfer_shapes": 2}
try:   # tapejax.keras (the keras extra) adds its call-plan cache once Keras is loaded: load it, so the
    tf.keras.layers   # noqa: B018   set of caches does not depend on which tests ran before
    _GLOBAL["keras_call_plans"] = 2
except ImportError:
    pass
try:   # tapejax.data (the data extra) adds the shared element programs of dataset functions
    tf.data.Dataset   # noqa: B018
    _GLOBAL["data_element_programs"] = 2
    # (and host values' per-element and per-batch op programs and avals, Example parse configs)
    _GLOBAL.update({"data_host_value_leaf_avals": 2, "data_host_value_ops": 2, "data_host_value_batched_ops": 2,
                    "data_parse_example_configs": 2})
except ImportError:
    pass


@pytest.fixture
def small_caches():
    """Every process-wide cache shrunk (restored afterwards), so a test overflows each many times;
    the replay cache's counters start at 0 (``tf.clear_cache``: earlier tests' misses are not
    counted)."""
    lrus = {name: c for name, c in _lru._REGISTRY.items() if isinstance(c, _lru.LRU)}
    assert set(_GLOBAL) == set(lrus), "a new global cache: give it a bound here"
    old = {name: c.maxsize for name, c in lrus.items()}
    tf.clear_cache()
    for name, c in lrus.items():
        c.clear()
        c.resize(_GLOBAL[name])
    yield lrus
    for name, c in lrus.items():
        c.clear()
        c.resize(old[name])
    tf.clear_cache()


def test_every_cache_is_listed_and_bounded():
    stats = tf.cache_stats()
    assert set(stats) == set(_GLOBAL) | {"function", "optimizer_updates", "eager_jit_fixed"}
    for name, st in stats.items():
        assert isinstance(st.maxsize, int) and st.maxsize >= 1, name
        assert 0 <= st.size <= st.maxsize, (name, st)
    info = tf.cache_info()   # the replay cache's own view keeps its fields
    assert info._fields == ("hits", "misses", "compiles", "evictions", "size", "maxsize")
    assert (info.size, info.maxsize, info.evictions) == (stats["replay"].size, stats["replay"].maxsize,
                                                         stats["replay"].evictions)


_UNARY = [tf.sin, tf.tanh, lambda v: v * v, lambda v: tf.exp(-v), tf.sigmoid]


def _structure(i):
    """The i-th program: a chain of unary ops (the base-5 digits of i)."""
    ops, n = [], i
    while True:
        ops.append(_UNARY[n % len(_UNARY)])
        n //= len(_UNARY)
        if n == 0:
            return ops


def _record(x, i, prefix=0):
    """Record structure ``i`` after ``prefix`` dead-end nodes: the chain then sits at other tape
    positions, so its nodes' signatures (their wiring) are new, at no new eager compile."""
    for _ in range(prefix):
        _ = x * 1.0
    y = x
    for op in _structure(i):
        y = op(y)
    return y


def test_many_distinct_structures_keep_every_cache_bounded_and_memory_flat(small_caches):
    x = tf.constant(np.linspace(0.1, 0.9, 5).astype(np.float32))

    def run(i):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = _record(x, 25 + i // 20, prefix=i % 20)
        return tape.gradient(y, x)

    fn_refs = []
    third = N_STRUCTURES // 3
    marks = []
    for i in range(N_STRUCTURES):
        run(i)
        if i == 0:
            fn_refs.append(weakref.ref(next(iter(_replay._CACHE.values())).fn))
        if i % third == third - 1:
            gc.collect()
            marks.append((sys.getallocatedblocks(), _rss()))
        if i % 25 == 0:
            for name, st in tf.cache_stats().items():
                assert st.size <= st.maxsize, (i, name, st)
    stats = tf.cache_stats()
    for name in ("replay", "slices", "signatures"):
        assert stats[name].size == stats[name].maxsize, (name, stats[name])
        assert stats[name].evictions > 0, (name, stats[name])
    # each structure compiled once (twice would give 96), and all but 8 evicted.  (The fixture
    # resets the counters: without it, a full-suite worker counted the misses of the tests run
    # since the last reset too: 49, 50 and 56 were seen.)
    info = tf.cache_info()
    assert info.misses == N_STRUCTURES, info
    assert info.evictions == info.misses - 8, info
    assert _dead(*fn_refs), "an evicted compiled replay (its jax.jit object) must be released"
    # memory: the last third of the structures adds (almost) nothing over the second third
    (b1, r1), (b2, r2) = marks[1], marks[2]
    assert b2 - b1 < 2_000, f"{b2 - b1} Python memory blocks kept over {third} new structures"
    assert r2 - r1 < 8 * MB, f"RSS grew {(r2 - r1) / MB:.1f} MB over {third} new structures"
    # a structure seen long ago is simply compiled again, with the right gradient
    xv = x.numpy()
    want = jax.grad(lambda v: jnp.sum(jnp.tanh(jnp.sin(jnp.sin(v)))))(xv)   # 25: digits 0, 0, 1
    np.testing.assert_allclose(run(3).numpy(), want, rtol=1e-6)


def test_control_flow_ops_are_bounded_and_evicted_ones_released(small_caches):
    @tf.function
    def f(x, k):
        return tf.cond(x > 0.0, lambda: x * float(k), lambda: x - float(k))

    _nodes._SIGS.resize(4)   # the traces' graph-mode tape interns the ops' signatures too
    refs = []
    for k in range(8):                                # 8 distinct branch jaxprs, bound 3
        assert f(tf.constant(2.0), k).numpy() == 2.0 * k
        refs.append(weakref.ref(next(reversed(_control_flow._PRIMS.values()))))
    st = tf.cache_stats()["control_flow"]
    assert st.size == 3 and st.evictions == 5
    del f
    # the oldest ops were evicted from every bounded table that names them: released
    assert _dead(*refs[:4])


def test_op_output_trees_are_bounded_and_found_again_after_eviction(small_caches):
    @tf.op
    def scaled(d, k):
        return {"a": d["x"] * k, "b": (d["x"] + k,)}

    x = tf.constant(np.ones(2, np.float32))
    for k in range(10):                                # 10 static values, bound 4
        out = scaled({"x": x}, float(k))
        assert set(out) == {"a", "b"} and out["a"].numpy()[0] == k
    st = tf.cache_stats()["op_output_trees"]
    assert st.size == 4 and st.evictions == 6
    out = scaled({"x": x}, 0.0)                        # evicted, but JAX still has the compiled op
    assert isinstance(out["b"], tuple) and out["b"][0].numpy()[0] == 1.0


def test_eager_jit_per_op_is_bounded_and_evicted_jit_objects_are_released():
    prim = tf.define_op("SoakStaticValues", lambda x, *, k: x * float(k))
    prim._bound.resize(3)
    x = tf.constant(1.0)
    refs = []
    for i in range(7):                                 # 7 distinct static values
        assert tf.bind(prim, x, k=i + 1).numpy() == i + 1
        refs.append(weakref.ref(prim._bound.get((("k", i + 1),))))
    assert len(prim._bound) == 3 and prim._bound.evictions == 4
    assert _dead(*refs[:4]), "an evicted eager jax.jit object must be released"
    assert all(r() is not None for r in refs[4:])
    assert tf.cache_stats()["eager_jit_fixed"].evictions >= 4


def test_function_specialisations_are_bounded_and_evicted_ones_released():
    v = tf.Variable(np.zeros(2, np.float32))

    class Arg:                                       # keyed by identity: the entry holds it
        def __init__(self, k):
            self.k = k

    @tf.function
    def f(x, arg):
        v.assign_add(x * float(arg.k))
        return v.read_value()

    f._cache.resize(3)
    arg_refs, jit_refs = [], []
    for k in range(7):
        a = Arg(k)
        f(tf.ones(2), a)
        arg_refs.append(weakref.ref(a))
        jit_refs.append(weakref.ref(f._cache.values()[-1].jitted))
        del a
    assert len(f._cache) == 3 and f._cache.evictions == 4
    assert _dead(*arg_refs[:4], *jit_refs[:4]), "an evicted specialisation must release its objects"
    np.testing.assert_array_equal(v.numpy(), np.full(2, 21.0))
    st = tf.cache_stats()["function"]
    assert st.maxsize == 256 and st.evictions >= 4


def test_optimizer_update_cache_is_bounded_and_evicted_updates_released():
    opt = tf.keras.optimizers.legacy.SGD(0.1)   # (a new one refuses Variables it was not built for)
    opt._updates.resize(2)
    vs = [tf.Variable(np.ones(2, np.float32)) for _ in range(5)]
    refs = []
    for v in vs:                                     # 5 distinct variable lists, bound 2
        opt.apply_gradients([(tf.ones(2), v)])
        refs.append(weakref.ref(opt._updates.values()[-1][1]))
    assert len(opt._updates) == 2 and opt._updates.evictions == 3
    assert _dead(*refs[:3])
    for v in vs:
        np.testing.assert_allclose(v.numpy(), np.full(2, 0.9))
    opt.apply_gradients([(tf.ones(2), vs[0])])       # evicted: compiled again, same rule
    np.testing.assert_allclose(vs[0].numpy(), np.full(2, 0.8))


def test_checked_impls_of_user_op_types_are_bounded(small_caches):
    from tapejax.autodiff import custom as _custom
    refs = []
    for i in range(5):
        prim = tf.define_op(f"SoakUserOp{i}", lambda x: x * 3.0)
        x = tf.constant(2.0)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.bind(prim, x)
        assert tape.gradient(y, x).numpy() == 3.0
        refs.append(prim)
    st = tf.cache_stats()["custom_checked"]
    assert st.size == 2 and st.evictions == 3
    assert len(_custom._CHECKED) == 2


def test_signature_eviction_never_gives_a_wrong_hit(small_caches):
    """Evicted signatures get fresh ints when seen again: the cache misses, never mixes programs."""
    x = tf.constant(1.5)
    seen = {}
    for rnd in range(2):
        for i in range(12):                          # 12 structures, 48 signatures, 16 slots
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = _record(x, 625 + i, prefix=i)
            g = float(tape.gradient(y, x).numpy())
            if rnd == 0:
                seen[i] = g
            else:
                assert g == seen[i], i
    assert tf.cache_stats()["signatures"].evictions > 0
    assert _nodes._SIGS.maxsize == 16 and len(_nodes._SIGS) <= 16
