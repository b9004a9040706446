"""The bad-input catalogue (issue #7): every wrong call in ``bad_inputs_table.ROWS``.

For each row, under tapejax:

* the call raises the row's class (TF's class; matched along the MRO by name),
  and the message names the argument and the expected vs received value;
* nothing changed: every Variable of the row's world (value, dtype, shape),
  every tape (recorded nodes, tracked ids, leaves, watched variables,
  recording / used flags), the thread's tape stack, ``tapejax.cache_info()``,
  the optimizer's variables and iterations, the function's trace count;
* afterwards the world's valid call (a gradient, an optimizer step, a
  function call, a restore, a jvp) still works and gives the right answer.

Under TensorFlow 2.21 (when it imports), the same program (or the row's TF
program) raises the row's class: the table is checked against the spec.
Rows for which TF has no equivalent say so (``tf=`` a reason) and skip there.
"""
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapejax  # noqa: E402
from tapejax.core import state as _state  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bad_inputs_table as T  # noqa: E402
from _env import subprocess_env

IDS = [r.id for r in T.ROWS]


def _mro_names(e):
    return {c.__name__ for c in type(e).__mro__}


def _arr(x):
    return None if x is None else np.asarray(x.numpy() if hasattr(x, "numpy") else x)


# ---------------------------------------------------------------------------
# snapshots (tapejax side)
# ---------------------------------------------------------------------------

def _var_state(v):
    return (v.dtype.name, tuple(v.shape), np.asarray(v._value).tobytes(), v._id)


def _tape_state(t):
    return {
        "nodes": [(n.prim.name, n.sig, n.refs, n.ids, n.n_out) for n in t._nodes],
        "codes": dict(t._codes),
        "leaves": t._n_leaves,
        "watched": tuple(v._id for v in t.watched_variables()),
        "recording": t._recording,
        "entered": t._entered,
        "used": t._used,
        "pauses": list(t._pauses),
        "cuts": dict(t._cuts),
    }


def snapshot(w):
    s = {
        "vars": [_var_state(v) for v in w.vars],
        "tapes": [_tape_state(t) for t in w.tapes],
        "stack": [id(t) for t in _state.tapes()],
        "cache": tapejax.cache_info(),
    }
    acc = getattr(w, "acc", None)
    if acc is not None:
        s["acc"] = _tape_state(acc._rec)
    if w.opt is not None:
        s["opt"] = ([_var_state(v) for v in w.opt.variables()], len(w.opt._slots),
                    np.asarray(w.opt.iterations._value).item())
    if w.fn is not None:
        s["traces"] = w.fn.experimental_get_tracing_count()
    return s


def _diff(before, after):
    out = []
    for k in before:
        if before[k] != after[k]:
            out.append(f"{k}: {before[k]!r}\n   -> {after[k]!r}")
    return out


def _same(got, want, where="check"):
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for i, (g, e) in enumerate(zip(got, want)):
            _same(g, e, f"{where}[{i}]")
    elif want is None:
        assert got is None, f"{where}: expected None, got {got!r}"
    elif isinstance(want, int):
        assert got == want, f"{where}: expected {want}, got {got}"
    else:
        g = _arr(got)
        assert g.dtype == want.dtype and g.shape == want.shape, f"{where}: {g!r} vs {want!r}"
        np.testing.assert_allclose(g, want, rtol=1e-6, err_msg=where)


# ---------------------------------------------------------------------------
# the tapejax side
# ---------------------------------------------------------------------------

def run_tapejax(r):
    """Run row ``r`` under tapejax; return the exception (all assertions made)."""
    log = logging.getLogger("tapejax")
    level = log.level
    log.setLevel(logging.ERROR)   # warnings of the valid calls (gradient inside a persistent block)
    try:
        with r.world(tapejax) as w:
            before = snapshot(w)
            try:
                r.bad(tapejax, w)
            except Exception as e:  # noqa: BLE001 - the row says which class
                err = e
            else:
                pytest.fail(f"{r.id}: no exception (expected {r.exc})")
            after = snapshot(w)
    finally:
        log.setLevel(level)
    assert r.exc in _mro_names(err), f"{r.id}: raised {type(err).__name__}: {err} (expected {r.exc})"
    msg = str(err).lower()
    missing = [word for word in r.words if word.lower() not in msg]
    assert not missing, f"{r.id}: message lacks {missing}: {err}"
    changed = _diff(before, after)
    assert not changed, f"{r.id}: the failed call changed state:\n" + "\n".join(changed)
    _same(w.check(), w.expect, f"{r.id}: valid call afterwards")
    return err


@pytest.mark.parametrize("r", T.ROWS, ids=IDS)
def test_tapejax(r):
    run_tapejax(r)


# ---------------------------------------------------------------------------
# the TensorFlow side: the table checked against the spec
# ---------------------------------------------------------------------------

def _load_tf():
    return pytest.importorskip("tensorflow", reason="TensorFlow is not installed: the TF check of "
                                                    "the bad-input table is skipped")


def run_tf(r, tf):
    with r.world(tf) as w:
        before = [_arr(v).tobytes() for v in w.vars]
        bad = r.bad if r.tf is True else r.tf
        try:
            bad(tf, w)
        except Exception as e:  # noqa: BLE001
            err = e
        else:
            err = None
        after = [_arr(v).tobytes() for v in w.vars]
    return err, before == after


TF_ROWS = [r for r in T.ROWS if not isinstance(r.tf, str)]


@pytest.mark.parametrize("r", TF_ROWS, ids=[r.id for r in TF_ROWS])
def test_tensorflow_agrees(r):
    tf = _load_tf()
    err, _ = run_tf(r, tf)   # TF may change state before failing (optimizer-grad-shape): not checked
    assert err is not None, f"{r.id}: TensorFlow raised nothing (the table says {r.tf_exc})"
    assert r.tf_exc in _mro_names(err), f"{r.id}: TF raised {type(err).__name__}: {err}"


def test_rows_without_a_tf_equivalent_say_why():
    """A row TF cannot run (float64 without x64 ...) carries the reason instead of a TF program."""
    rows = [r for r in T.ROWS if isinstance(r.tf, str)]
    assert rows and all(len(r.tf) > 20 for r in rows)


def test_table_size_and_ids():
    """At least 60 rows, unique ids, every row has words to look for."""
    assert len(T.ROWS) >= 60
    assert len(set(IDS)) == len(IDS)
    assert all(r.words for r in T.ROWS)
    assert all(r.tf is True or callable(r.tf) or (isinstance(r.tf, str) and r.tf) for r in T.ROWS)


# ---------------------------------------------------------------------------
# mixed devices: a subprocess with two CPU devices (JAX fixes the count at start)
# ---------------------------------------------------------------------------

_DEVICE_SCRIPT = r'''
import json, sys
sys.path.insert(0, {tests!r})
import jax
assert jax.device_count() >= 2, jax.devices()
import test_bad_inputs as M
out = {{}}
for r in M.T.DEVICE_ROWS:
    try:
        e = M.run_tapejax(r)
        out[r.id] = "ok: " + type(e).__name__ + ": " + str(e)[:200]
    except BaseException as e:  # noqa: BLE001
        out[r.id] = "FAIL: " + type(e).__name__ + ": " + str(e)
print("RESULT" + json.dumps(out))
'''


def test_mixed_devices():
    """Ops on Tensors committed to different devices: InvalidArgumentError naming the devices,
    nothing recorded or changed (the same checks as every row), in a 2-device subprocess."""
    import json
    import subprocess
    tests = os.path.dirname(os.path.abspath(__file__))
    env = subprocess_env("--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
                         PYTHONPATH=os.pathsep.join([os.path.dirname(tests), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT.format(tests=tests)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=os.path.dirname(tests))
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(line[0][len("RESULT"):])
    assert sorted(out) == sorted(r.id for r in T.DEVICE_ROWS)
    failed = {k: v for k, v in out.items() if not v.startswith("ok")}
    assert not failed, failed


# ---------------------------------------------------------------------------
# not errors in TF, so not rows: what tapejax does instead
# ---------------------------------------------------------------------------

def test_watch_int_warns_and_tracks_nothing(tapejax_log):
    """watch(int tensor) is not an error in TF: it logs a WARNING and the tensor is not tracked."""
    x = tapejax.constant([1, 2])
    with tapejax.GradientTape() as t:
        t.watch(x)
        y = x * 2
    assert any("must be floating" in r.getMessage() for r in tapejax_log.records)
    assert t._codes == {} and t._nodes == [] and t.watched_variables() == ()
    assert t.gradient(y, x) is None


def test_gradient_after_reset_is_none():
    """reset() inside the block forgets ops and watches (TF: [None]); re-watching records again."""
    x = tapejax.constant(3.0)
    with tapejax.GradientTape() as t:
        t.watch(x)
        y = x * x
        t.reset()
        z = x * 3.0
    assert t.gradient([y, z], [x]) == [None]


_NAN_CASES = {
    "sqrt(-1)": (lambda tf: tf.sqrt(tf.constant(-1.0)), np.float32(np.nan)),
    "log(0)": (lambda tf: tf.math.log(tf.constant(0.0)), np.float32(-np.inf)),
    "1/0": (lambda tf: tf.constant(1.0) / tf.constant(0.0), np.float32(np.inf)),
    "nan+1": (lambda tf: tf.constant(np.float32(np.nan)) + 1.0, np.float32(np.nan)),
    "reduce_max([nan, 1])": (lambda tf: tf.reduce_max(tf.constant([np.nan, 1.0], np.float32)), None),
    "clip_by_value(nan)": (lambda tf: tf.clip_by_value(tf.constant([np.nan], np.float32), 0.0, 1.0), None),
}


def _sqrt_grad_at_0(tf):
    x = tf.constant(0.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.sqrt(x)
    return t.gradient(y, x)


@pytest.mark.parametrize("name", [*_NAN_CASES, "sqrt'(0)"])
def test_nan_and_inf_propagate_like_tf(name):
    """NaN/inf inputs raise nothing (tapejax has no tf.debugging.check_numerics): they propagate
    as in TF.  Oracle: TF when it imports, else IEEE arithmetic (numpy)."""
    fn, want = (_sqrt_grad_at_0, np.float32(np.inf)) if name == "sqrt'(0)" else _NAN_CASES[name]
    got = np.asarray(fn(tapejax).numpy())
    try:
        tf = _load_tf()
    except pytest.skip.Exception:
        tf = None
    if tf is not None:
        want = np.asarray(fn(tf).numpy())
    if want is None:
        pytest.skip("no numpy oracle for this case without TensorFlow")
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.asarray(want).dtype


def test_gather_out_of_range_is_not_checked_on_device():
    """Documented difference (tapejax/ops/array.py): TF's CPU kernel raises InvalidArgumentError for
    an out-of-range gather index; tapejax does not check indices on the device (that would need a
    host sync per call), the gathered value is JAX's fill (NaN for floats) and nothing is raised."""
    out = tapejax.gather(tapejax.constant([1.0, 2.0, 3.0]), [0, 5]).numpy()
    assert out[0] == 1.0 and np.isnan(out[1])


def _assign_then_raise(tf, w):
    w.v.assign([9.0, 9.0, 9.0])
    raise ValueError("`v` expected (3,) got (3,)")


def _record_then_raise(tf, w):
    w.x * 5.0
    raise ValueError("`x` expected got")


@pytest.mark.parametrize("bad,world", [(_assign_then_raise, T.closed), (_record_then_raise, T.recording)])
def test_the_state_check_catches_a_change(bad, world):
    """The checker itself: a call that changes a Variable or records an op before raising fails it."""
    r = T.Row("meta", world, bad, "ValueError", ["expected"])
    with pytest.raises(AssertionError, match="changed state"):
        run_tapejax(r)
