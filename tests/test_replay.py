"""The compiled replay: one compile per structure, leaves as arguments, bounded
cache, and recorded state released (oracles: cache counters, weakrefs, jax.grad)."""
import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.autodiff import gradient as _gradient, program as _program, replay as _replay
from tapejax.core.tensor import Pending
from tapejax.runtime import deferred as _deferred


def _step(w, b, x, y, lr=0.1):
    with tf.GradientTape() as tape:
        pred = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.square(pred - y))
    gw, gb = tape.gradient(loss, [w, b])
    w.assign_sub(lr * gw)
    b.assign_sub(lr * gb)
    return loss


@pytest.mark.parametrize("deferral", [False, True])
def test_100_training_steps_compile_once(fresh_cache, deferral):
    """One compile for 100 steps; with deferred execution the steady step (from step 3: the
    previous step's pending updates, computed inside this step's gradient) is a second program,
    compiled once too."""
    rng = np.random.default_rng(0)
    prev = tf.set_deferred_execution(deferral)
    try:
        w = tf.Variable(rng.normal(size=(3, 1)).astype(np.float32))
        b = tf.Variable(np.zeros(1, np.float32))
        for i in range(100):
            x = tf.constant(rng.normal(size=(8, 3)).astype(np.float32))
            y = tf.constant(rng.normal(size=(8, 1)).astype(np.float32))
            _step(w, b, x, y, lr=0.1 / (i + 1))  # a new Python float each step: no new compile
            if i == 2:
                assert tf.cache_info().compiles == 1 + deferral
    finally:
        tf.set_deferred_execution(prev)
    info = tf.cache_info()
    assert info.misses == 1 and info.compiles == 1 + deferral and info.hits == 99


def test_matches_pure_jax_training():
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(3, 1)).astype(np.float32)
    xs = rng.normal(size=(5, 8, 3)).astype(np.float32)
    ys = rng.normal(size=(5, 8, 1)).astype(np.float32)
    w, b = tf.Variable(w0), tf.Variable(np.zeros(1, np.float32))
    pw, pb = jnp.asarray(w0), jnp.zeros(1)
    loss_fn = lambda w, b, x, y: jnp.mean(jnp.square(x @ w + b - y))  # noqa: E731
    for x, y in zip(xs, ys):
        _step(w, b, tf.constant(x), tf.constant(y))
        gw, gb = jax.grad(loss_fn, argnums=(0, 1))(pw, pb, x, y)
        pw, pb = pw - 0.1 * gw, pb - 0.1 * gb
    np.testing.assert_allclose(w.numpy(), pw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), pb, rtol=1e-5, atol=1e-6)


def test_new_shape_retraces_the_same_entry(fresh_cache):
    w = tf.Variable(np.ones((3, 1), np.float32))
    b = tf.Variable(np.zeros(1, np.float32))
    for n in (4, 4, 6, 6):
        _step(w, b, tf.ones([n, 3]), tf.ones([n, 1]))
    info = tf.cache_info()
    assert info.misses == 1 and info.compiles == 2 and info.size == 1


def test_different_structures_are_different_entries(fresh_cache):
    x = tf.constant(2.0)
    for f in (lambda a: a * a, lambda a: a + a, lambda a: a * a):
        with tf.GradientTape() as t:
            t.watch(x)
            y = f(x)
        t.gradient(y, x)
    info = tf.cache_info()
    assert (info.misses, info.hits) == (2, 1)


def test_program_key_is_built_from_interned_node_signatures():
    x = tf.constant(2.0)
    keys = []
    for _ in range(2):
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.exp(x * 3.0)
        nodes = t._nodes
        assert all(isinstance(n.sig, int) for n in nodes)
        code = t._codes[x._id]
        sl, _ = _program.slice_tape(nodes, [code], [t._codes[y._id]])
        keys.append(_program.Program(nodes, sl, (code,), (((), "float32"),), (t._codes[y._id],), (False,)))
    assert keys[0] == keys[1] and hash(keys[0]) == hash(keys[1])
    assert "Program(nodes=2" in repr(keys[0])


def test_slice_replays_only_the_path_between_sources_and_targets():
    x, z = tf.constant(2.0), tf.constant(5.0)
    with tf.GradientTape() as t:
        t.watch([x, z])
        unrelated = tf.exp(z) * 4.0  # on the tape, not on the path
        y = x * x
        _ = unrelated
    sl, needed = _program.slice_tape(t._nodes, [t._codes[x._id]], [t._codes[y._id]])
    ops = [t._nodes[i].prim.name for i in sl]
    assert "Exp" not in ops and "Mul" in ops
    assert t._codes[z._id] not in needed


def test_cache_is_bounded_lru_with_evictions(fresh_cache):
    old = tf.cache_info().maxsize
    try:
        tf.set_cache_size(2)
        x = tf.constant(2.0)
        for k in range(4):
            with tf.GradientTape() as t:
                t.watch(x)
                y = x
                for _ in range(k + 1):
                    y = y * x
            t.gradient(y, x)
        info = tf.cache_info()
        assert info.size == 2 and info.evictions == 2 and info.maxsize == 2
        with pytest.raises(ValueError):
            tf.set_cache_size(0)
    finally:
        tf.set_cache_size(old)


def test_non_persistent_tape_releases_recorded_state_after_gradient(eager_ops):
    import sys
    x = tf.constant(np.ones(1000, np.float32))
    with tf.GradientTape() as t:
        t.watch(x)
        e = tf.exp(x * 2.0)
        y = tf.reduce_sum(e)
    import gc
    gc.collect()   # (cycles left by earlier tests' objects collected first: their timing varies)
    held = sys.getrefcount(e.value)  # the user's Tensor + the reduce_sum node's input
    t.gradient(y, x)
    gc.collect()   # (only the tape's own references count: a reference cycle elsewhere is the GC's)
    after = sys.getrefcount(e.value)  # (outside `assert`: pytest's rewrite holds temporaries)
    assert t._nodes == [] and t._codes == {}
    assert after == held - 1


def test_deferred_ops_are_released_after_gradient():
    """Deferred: the tape's nodes hold thunks; after the gradient the tape holds nothing, the
    target has its value and no inputs, and so has a pending tensor the user keeps (its value
    came back from the same program: ``gradient._held``), so nothing it needed stays alive."""
    import gc
    import weakref
    x = tf.constant(np.ones(1000, np.float32))
    with tf.GradientTape() as t:
        t.watch(x)
        m = x * 2.0
        e = tf.exp(m)
        y = tf.reduce_sum(e)
    assert type(m) is Pending and m._thunk.value is None
    mref = weakref.ref(m._thunk)
    del m
    t.gradient(y, x)
    assert t._nodes == [] and t._codes == {}
    assert y._thunk.value is not None and y._thunk.args is None   # filled by the gradient
    assert e._thunk.value is not None and e._thunk.args is None    # filled by the gradient too
    gc.collect()
    assert mref() is None
    np.testing.assert_allclose(e.numpy(), np.exp(2.0), rtol=1e-6)


def test_tape_is_garbage_collected_with_its_records():
    x = tf.constant(2.0)

    def run():
        t = tf.GradientTape(persistent=True)
        with t:
            t.watch(x)
            y = x * x
        t.gradient(y, x)
        return weakref.ref(t)

    ref = run()
    gc.collect()
    assert ref() is None


def test_tape_inside_exception_is_collected():
    x = tf.constant(2.0)
    ref = None
    try:
        with tf.GradientTape() as t:
            ref = weakref.ref(t)
            t.watch(x)
            _ = x * x
            raise KeyError("boom")
    except KeyError:
        pass
    del t
    gc.collect()
    assert ref() is None
    from tapejax.core import state as _state
    assert _state.tapes() == []


def test_no_tape_means_no_recording_and_the_stack_is_clean_after_errors():
    from tapejax.core import state as _state
    x = tf.constant(2.0)
    try:
        with tf.GradientTape():
            raise ValueError
    except ValueError:
        pass
    assert _state.tapes() == []
    _ = x * x


def test_gradient_works_under_jax_jit_tracers():
    def f(a):
        x = tf.constant(0.0) + a  # a Tensor around a tracer
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.reduce_sum(tf.exp(x) * x)
        return t.gradient(y, x).value

    a = jnp.array([0.5, 1.0])
    got = jax.jit(f)(a)
    want = jax.grad(lambda v: jnp.sum(jnp.exp(v) * v))(a)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_compiled_gradient_is_recorded_on_outer_tapes_as_one_op():
    x = tf.constant(1.5)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.exp(x) * x
        g = inner.gradient(y, x)
    assert outer._nodes[-1].prim.name == "SymbolicGradient"
    want = jax.grad(jax.grad(lambda v: jnp.exp(v) * v))(1.5)
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), want, rtol=1e-6)


def test_a_training_loop_slices_the_tape_once(fresh_cache, monkeypatch):
    """Same structure every step: the slice is memoized (one slice_tape call for 20 steps)."""
    calls = []
    real = _gradient.slice_tape
    monkeypatch.setattr(_gradient, "slice_tape", lambda *a: calls.append(1) or real(*a))
    w = tf.Variable(np.ones((3, 1), np.float32))
    b = tf.Variable(np.zeros(1, np.float32))
    for _ in range(20):
        _step(w, b, tf.ones([4, 3]), tf.ones([4, 1]))
    assert len(calls) == 1 and len(_replay._SLICES) == 1
    before = tf.cache_info().compiles      # 2: step 1, and the steady step (with the updates)
    _step(w, b, tf.ones([5, 3]), tf.ones([5, 1]))  # new input shapes: same slice, jit retraces
    info = tf.cache_info()
    assert len(calls) == 1 and info.misses == 1 and info.compiles == before + 1
    with tf.GradientTape() as t:  # a new structure: sliced once more
        y = tf.reduce_sum(w * 2.0)
    t.gradient(y, w)
    assert len(calls) == 2


# -- first-order gradients run over the saved forward values -----------------------

def _both_paths(program):
    """``program()`` -> (target(s), sources, kwargs) run twice: plain (the saved-values
    backward) and under an outer recording tape (the replay that nested tapes use)."""
    first = program()
    with tf.GradientTape():
        second = program()
    return first, second


def _grads(build, **kw):
    def run():
        tape, targets, sources = build()
        return tape.gradient(targets, sources, **kw)
    return run


def _case_intermediate_and_upstream():
    v = tf.Variable([[0.5, -1.0], [2.0, 0.3]])
    x = tf.constant([[1.0, 2.0], [3.0, -4.0]])
    with tf.GradientTape() as t:
        h = tf.nn.relu(tf.matmul(x, v))
        y = tf.reduce_sum(tf.tanh(h) * h)
    return t, y, [v, h]


def _case_targets_repeat_and_source_target():
    a = tf.constant([1.0, -2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(a)
        y = a * a
    return t, [y, y, a], [a]


def _case_read_is_target_and_reads_summed():
    v = tf.Variable(3.0)
    with tf.GradientTape() as t:
        r = v.read_value()
        y = v * v + tf.sin(v)
    return t, [r, y], [v]


def _case_multi_output_with_int_output():
    x = tf.constant([[3.0, 1.0, 2.0, 5.0], [0.5, 4.0, -1.0, 2.0]])
    with tf.GradientTape() as t:
        t.watch(x)
        vals, idx = tf.math.top_k(x * 2.0, k=2)
        y = tf.reduce_sum(vals * vals)
    return t, y, [x]


def _case_stop_gradient_and_override():
    @tf.custom_gradient
    def clip_grad(u):
        return tf.identity(u), lambda g: tf.clip_by_value(g, -0.5, 0.5)

    x = tf.constant([0.2, -1.5, 2.0])
    w = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(clip_grad(x * w) * 3.0 + tf.stop_gradient(x) * w)
    return t, y, [x, w]


@pytest.mark.parametrize("build", [_case_intermediate_and_upstream, _case_targets_repeat_and_source_target,
                                   _case_read_is_target_and_reads_summed,
                                   _case_multi_output_with_int_output, _case_stop_gradient_and_override])
def test_saved_values_backward_equals_the_replay(build):
    plain, nested = _both_paths(_grads(build))
    assert len(plain) == len(nested)
    for p, n in zip(plain, nested):
        assert (p is None) == (n is None)
        if p is not None:
            assert p.dtype == n.dtype and p.shape == n.shape
            np.testing.assert_allclose(p.numpy(), n.numpy(), rtol=1e-6, atol=1e-6)


def test_saved_values_backward_output_gradients_broadcast_and_oracle():
    x0 = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    x = tf.constant(x0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.exp(x) * x
    g = t.gradient(y, x, output_gradients=tf.constant([2.0, -1.0]))
    _, pull = jax.vjp(lambda a: jnp.exp(a) * a, jnp.asarray(x0))
    (want,) = pull(jnp.broadcast_to(jnp.asarray([2.0, -1.0]), (2, 2)))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)


def _dots_in_compiled_gradient(nested, monkeypatch):
    """Number of dot products XLA keeps in the compiled gradient of relu(x @ w) w.r.t. w."""
    tf.clear_cache()
    seen = []
    real = _gradient.gather_leaves
    monkeypatch.setattr(_gradient, "gather_leaves", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    x = tf.constant(np.ones((4, 3), np.float32))
    w = tf.Variable(np.full((3, 2), 0.5, np.float32))
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)))
    if nested:
        with tf.GradientTape():
            t.gradient(y, w)
    else:
        t.gradient(y, w)
    (entry,) = _replay._CACHE.values()
    (leaves,) = seen
    return entry.fn.lower(leaves, ()).compile().as_text().count(" dot(")


def test_first_order_gradient_does_not_recompute_the_forward(monkeypatch, fresh_cache, eager_ops):
    """The saved-values backward reuses the eager forward: the compiled gradient of
    relu(x @ w) keeps one dot (x^T @ g); the replay (used under an outer tape) keeps two."""
    assert _dots_in_compiled_gradient(False, monkeypatch) == 1
    assert _dots_in_compiled_gradient(True, monkeypatch) == 2


def test_deferred_forward_runs_once_inside_the_gradient(monkeypatch, fresh_cache):
    """Deferred execution: the forward product never ran eagerly; the fused gradient computes it
    (two dots: x @ w and x^T @ g), i.e. the forward still runs once per step."""
    assert _deferred.deferred_execution()
    assert _dots_in_compiled_gradient(False, monkeypatch) == 2


def test_resolve_late_keys_custom_nodes_by_their_traced_backward(fresh_cache):
    """``Program.late`` lists the slice's custom-gradient nodes.  ``resolve_late`` leaves a
    program without them as it is; with them, a new value read by grad_fn (k) is a new
    argument of an equal Program, and a grad_fn computing something else (sq) is a new
    Program.  Oracle for the values: hand derivatives (k * cos x; 2 * 1 * cos x)."""
    s = {"k": 2.0, "sq": False}

    @tf.custom_gradient
    def f(u):
        return u * 1.0, lambda g: g * g * 2.0 if s["sq"] else g * s["k"]
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a = tf.sin(x)
        y = tf.reduce_sum(f(a))
    nodes, codes = t._nodes, t._codes
    src, aval = (codes[x._id],), (((2,), x._value.dtype),)

    def program(target):
        sl, _ = _program.slice_tape(nodes, list(src), [codes[target._id]])
        return _program.Program(nodes, sl, src, aval, (codes[target._id],), (False,))
    plain = program(a)
    assert plain.late == ()
    assert _replay.resolve_late(nodes, plain, False) == (nodes, plain, False)
    custom = program(y)
    assert len(custom.late) == 1 and nodes[custom.late[0]].prim.name == "CustomGradient:f"
    n2, p2, cut = _replay.resolve_late(nodes, custom, False)
    assert not cut   # (grad_fn returns a gradient for its input)
    s["k"] = 5.0
    n5, p5, _ = _replay.resolve_late(nodes, custom, False)
    s["sq"] = True
    _, psq, _ = _replay.resolve_late(nodes, custom, False)
    assert p2 == p5 and hash(p2) == hash(p5) and p2 != custom and psq != p2
    late2, late5 = n2[custom.late[0]], n5[custom.late[0]]
    assert late2.sig == late5.sig and len(late2.vals) > len(nodes[custom.late[0]].vals)
    assert any(np.asarray(u).shape == () and float(np.asarray(u)) == 5.0 for u in late5.vals)
    s["sq"] = False
    np.testing.assert_allclose(t.gradient(y, x).numpy(), 5.0 * np.cos([1.0, 2.0]), rtol=1e-6)
    s["sq"] = True
    np.testing.assert_allclose(t.gradient(y, x).numpy(), 2.0 * np.cos([1.0, 2.0]), rtol=1e-6)


# -- typed records and registries (issue #20) -----------------------------------------------------

def test_plans_are_leaf_records_and_the_backward_reads_saved_inputs_once_per_code():
    """``build_replay``/``build_backward`` return ``Built(fn, plan)`` with ``Leaf`` records: the
    replay reads the watched source itself and the value the Variable read; the backward reads
    the recorded inputs of its op nodes, one per code.  Their functions give d(v*x + x)/d(x, v)
    = (v + 1, x)."""
    prev = tf.set_deferred_execution(False)
    try:
        x = tf.constant(3.0)
        v = tf.Variable(2.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = v * x + x
    finally:
        tf.set_deferred_execution(prev)
    nodes, codes = t._nodes, t._codes
    src = (codes[x._id], codes[v._id])
    sl, _ = _program.slice_tape(nodes, list(src), [codes[y._id]])
    assert [nodes[i].prim.name for i in sl] == ["ReadVariableOp", "Mul", "AddV2"]
    avals = (((), x._value.dtype), ((), v._value.dtype))
    program = _program.Program(nodes, sl, src, avals, (codes[y._id],), (False,))
    Leaf = _program.Leaf

    replay, rplan = _program.build_replay(nodes, program, _replay.resolve_impl)
    assert rplan == (Leaf("src", 0, 0), Leaf("node", 0, 0))
    rleaves = _program.gather_leaves(nodes, program, rplan, [x._value, None])
    eps0 = (jnp.zeros(()), jnp.zeros(()))
    (out,) = replay(eps0, rleaves)
    np.testing.assert_allclose(out, 9.0)
    g_replay = jax.grad(lambda e: replay(e, rleaves)[0])(eps0)

    built = _program.build_backward(nodes, program, _replay.resolve_impl)
    assert isinstance(built, _program.Built)
    assert built.plan == (Leaf("node", 1, 0), Leaf("node", 1, 1), Leaf("node", 2, 0))
    assert [kind for kind, _, _ in built.plan] == ["node"] * 3   # still unpacks as a triple
    grads = built.fn(_program.gather_leaves(nodes, program, built.plan, [None, None]), ())
    np.testing.assert_allclose([float(g) for g in grads], [3.0, 3.0])
    np.testing.assert_allclose([float(g) for g in g_replay], [3.0, 3.0])


def test_program_key_parts_are_named_and_entry_keys_equal_plain_pairs():
    x = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.exp(x)
    code, tcode = t._codes[x._id], t._codes[y._id]
    sl, _ = _program.slice_tape(t._nodes, [code], [tcode])
    p = _program.Program(t._nodes, sl, (code,), (((), "float32"),), (tcode,), (True,))
    assert p.key.slice == sl and p.key.sigs == tuple(t._nodes[i].sig for i in sl)
    assert (p.key.src_codes, p.key.tgt_codes, p.key.ct_given) == ((code,), (tcode,), (True,))
    # other compiled forms key the same cache with (kind, program): typed or plain, one key
    assert p.backward_key == ("backward", p) and hash(p.fused_key) == hash(("fused", p))
    assert p.backward_key.program is p and p.fused_key.kind == "fused"


def test_impl_rule_registry_chooses_the_replayed_function(fresh_cache):
    """A rule registered with ``_replay.register_impl_rule`` decides what the replay runs for a
    node (here: x**3 for an op whose eager function is x**2), before the default (the op's own
    function); the gradient registry's rule is registered the same way."""
    prim = tf.Primitive("TestReplay_SquareRule", lambda a: a * a)   # not a registered op type
    assert "gradient_registry" in _replay._IMPL_RULES

    def cube_rule(node):
        return (lambda a: a * a * a) if node.prim is prim else None

    x = tf.constant(2.0)
    try:
        _replay.register_impl_rule("test_cube", cube_rule)
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.bind(prim, x)
        np.testing.assert_allclose(y.numpy(), 4.0)   # the eager value is the op's own
        np.testing.assert_allclose(t.gradient(y, x).numpy(), jax.grad(lambda a: a ** 3)(2.0))
        # registering the name again replaces its rule
        _replay.register_impl_rule("test_cube", lambda node: None)
        tf.clear_cache()
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.bind(prim, x)
        np.testing.assert_allclose(t.gradient(y, x).numpy(), 4.0)
    finally:
        _replay._IMPL_RULES.pop("test_cube", None)
        tf.clear_cache()


def test_gradient_tape_runs_the_gradient_driver(monkeypatch):
    """``GradientTape.gradient`` runs ``autodiff.gradient.gradient``, which the tape module imports
    (no driver handed over at import time)."""
    from tapejax.autodiff import gradient as _gradient_mod
    calls = []
    real = _gradient_mod.gradient

    def driver(tape, targets, sources, cts, mode):
        calls.append(len(sources))
        return real(tape, targets, sources, cts, mode)

    monkeypatch.setattr(_gradient_mod, "gradient", driver)
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    np.testing.assert_allclose(t.gradient(y, x).numpy(), 6.0)
    assert calls == [1]