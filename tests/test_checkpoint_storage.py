"""Storage (``storage.py``): the orbax layout, async saves, atomic commits under a killed
process, sharded Variables, and checkpoints of tapejax's first ``.npz`` format.

Oracles: the values saved (bit for bit), the committed/previous checkpoint after a SIGKILL,
the losses recorded when the ``.npz`` fixtures were written (tests/data/legacy_npz)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import optax
import pytest

import tapejax as tf
from _env import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(ROOT, "tests", "data", "legacy_npz")


def _run(script, *args, devices=None, timeout=240):
    env = subprocess_env(f"--xla_force_host_platform_device_count={devices}" if devices else "",
                         JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def _result(p):
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def _graph_item(path):
    return json.loads(open(os.path.join(path, "_CHECKPOINT_METADATA")).read())["custom_metadata"]


def test_layout_is_one_orbax_directory_with_a_json_graph(tmp_path):
    v = tf.Variable(np.arange(6, dtype="float32").reshape(2, 3), name="v")
    p = tf.train.Checkpoint(v=v).save(str(tmp_path / "ckpt"))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1"]
    # one orbax PyTree item; small arrays are packed, one flat array per dtype
    assert {"PACKED-float32", "PACKED-int32", "_METADATA", "_CHECKPOINT_METADATA"} <= set(os.listdir(p))
    assert "v" not in os.listdir(p)
    meta = _graph_item(p)   # (the graph item is orbax's custom step metadata)
    assert meta["format"] == "tapejax-checkpoint" and meta["version"] == 3
    assert meta["specs"]["v/.ATTRIBUTES/VARIABLE_VALUE"] == [[2, 3], "float32"]
    assert meta["graph"][0]["children"] == [["v", 1], ["save_counter", 2]]
    assert meta["graph"][1]["attributes"] == [["VARIABLE_VALUE", "v", "v/.ATTRIBUTES/VARIABLE_VALUE"]]
    assert meta["packed"] == {"v/.ATTRIBUTES/VARIABLE_VALUE": ["PACKED-float32", 0],
                              "save_counter/.ATTRIBUTES/VARIABLE_VALUE": ["PACKED-int32", 0]}


def test_a_checkpoint_of_no_values_holds_its_graph(tmp_path):
    class Empty(tf.Module):
        pass

    path = tf.train.Checkpoint(m=Empty()).write(str(tmp_path / "ck"))
    assert _graph_item(path)["specs"] == {}
    tf.train.Checkpoint(m=Empty()).read(path).assert_consumed()
    assert tf.train.list_variables(path)[0][0] == "_CHECKPOINTABLE_OBJECT_GRAPH"


def test_an_orbax_checkpoint_that_is_not_tapejax_s_is_refused(tmp_path):
    import orbax.checkpoint as ocp
    ocp.PyTreeCheckpointer().save(str(tmp_path / "other"), {"a": np.ones(3, "float32")})
    with pytest.raises(tf.errors.DataLossError, match="not a tapejax checkpoint"):
        tf.train.Checkpoint(v=tf.Variable(np.ones(3, "float32"))).restore(str(tmp_path / "other"))


def test_packed_and_separate_arrays_of_every_dtype_round_trip(tmp_path, monkeypatch):
    """Arrays over PACK_MAX_BYTES are their own orbax arrays, the others share a pack per dtype
    (offsets in the graph item); every value comes back bit for bit, by restore and by
    load_variable, scalars and empty arrays included."""
    from tapejax.train import writer
    monkeypatch.setattr(writer, "PACK_MAX_BYTES", 64)
    rng = np.random.RandomState(0)
    values = {"big": rng.randn(8, 5).astype("float32"), "small": rng.randn(3).astype("float32"),
              "scalar": np.float32(2.5), "empty": np.zeros((0, 4), "float32"),
              "ints": np.arange(5, dtype="int32"), "flags": np.array([True, False]),
              "half": rng.randn(4).astype(tf.bfloat16._np), "bigint": np.arange(40, dtype="int32"),
              "none": np.zeros((0, 3), "uint8")}   # (alone in its pack: orbax writes no empty array)
    src = {k: tf.Variable(v) for k, v in values.items()}
    path = tf.train.Checkpoint(**src).write(str(tmp_path / "ck"))
    meta = _graph_item(path)
    key = "{}/.ATTRIBUTES/VARIABLE_VALUE".format
    assert key("big") not in meta["packed"] and key("bigint") not in meta["packed"]
    assert meta["packed"][key("small")] == ["PACKED-float32", 0]
    assert meta["packed"][key("scalar")] == ["PACKED-float32", 3]
    assert meta["packed"][key("half")][0] == "PACKED-bfloat16"
    dst = {k: tf.Variable(np.zeros_like(v)) for k, v in values.items()}
    tf.train.Checkpoint(**dst).read(path).assert_consumed()
    for k, v in values.items():
        assert dst[k].dtype == src[k].dtype
        np.testing.assert_array_equal(dst[k].numpy(), v)
        np.testing.assert_array_equal(tf.train.load_variable(path, key(k)), v)


def test_checkpoints_of_format_version_2_still_restore():
    """A checkpoint of format version 2 (one orbax array per key, tests/data/orbax_v2, written at
    commit 782903f) restores: Variables, Adam's slots and iterations, a bfloat16 value, and
    training resumes with the losses recorded then."""
    sys.path.insert(0, LEGACY)
    try:
        import make_fixture as fx  # pyright: ignore[reportMissingImports]
    finally:
        sys.path.remove(LEGACY)
    d = os.path.join(ROOT, "tests", "data", "orbax_v2")
    expected = json.load(open(os.path.join(d, "expected.json")))
    path = tf.train.latest_checkpoint(d)
    assert path is not None and path == os.path.join(d, expected["path"])
    assert json.loads(open(os.path.join(path, "graph", "metadata")).read())["version"] == 2
    model, opt = fx.Net(), tf.optimizers.Adam(0.01)
    extra = tf.Variable(np.zeros(2, tf.bfloat16._np))
    tf.train.Checkpoint(model=model, optimizer=opt, extra=extra).restore(path).assert_consumed()
    assert int(opt.iterations.numpy()) == expected["iterations"]
    assert extra.numpy().astype("float32").tolist() == [1.5, -2.0]
    for v, want in zip(model.variables, expected["variables"]):
        np.testing.assert_array_equal(v.numpy(), np.asarray(want, "float32"))
    np.testing.assert_allclose(fx.train(model, opt, 3), expected["next_losses"], rtol=1e-6)


@pytest.mark.parametrize("name", ["nadam", "optax"])
def test_npz_checkpoints_of_the_first_format_still_restore(name):
    """Checkpoints written by tapejax's .npz format (commit a997b94) restore: same Variables,
    optimizer state (the legacy Nadam's slots and momentum cache, written when it was
    tf.optimizers.Nadam; an optax state), bfloat16 values; training
    resumes with the losses recorded when the fixture was written."""
    sys.path.insert(0, LEGACY)
    try:
        import make_fixture as fx  # pyright: ignore[reportMissingImports]  # the fixture's model and training loop (it writes nothing on import)
    finally:
        sys.path.remove(LEGACY)
    expected = json.load(open(os.path.join(LEGACY, "expected.json")))[name]
    path = tf.train.latest_checkpoint(os.path.join(LEGACY, name))
    assert path == os.path.join(LEGACY, expected["path"])
    model = fx.Net()
    opt = tf.optimizers.legacy.Nadam(0.01) if name == "nadam" else tf.optimizers.from_optax(optax.adam(0.01))
    extra = tf.Variable(np.zeros(2, tf.bfloat16._np))
    tf.train.Checkpoint(model=model, optimizer=opt, extra=extra).restore(path).assert_consumed()
    assert int(opt.iterations.numpy()) == expected["iterations"]
    assert extra.dtype == tf.bfloat16 and extra.numpy().astype("float32").tolist() == [1.5, -2.0]
    for v, want in zip(model.variables, expected["variables"]):
        np.testing.assert_array_equal(v.numpy(), np.asarray(want, "float32"))
    np.testing.assert_allclose(fx.train(model, opt, 3), expected["next_losses"], rtol=1e-6)
    keys = [k for k, _ in tf.train.list_variables(path)]
    assert "model/layers/0/w" in keys and "_CHECKPOINTABLE_OBJECT_GRAPH" in keys


def test_async_save_overlaps_training_and_saves_the_values_of_its_moment(tmp_path):
    """enable_async: save() returns after the values are copied off the devices; updating
    (donating) the Variables right after does not change what is written; sync() waits for the
    commit, after which the state file names it."""
    w = tf.Variable(np.ones((256, 256), "float32"))
    opt = tf.optimizers.SGD(0.1)
    ck = tf.train.Checkpoint(w=w, opt=opt)
    saved = w.numpy().copy()
    opts = tf.train.CheckpointOptions(enable_async=True)
    p = ck.save(str(tmp_path / "ckpt"), options=opts)
    for _ in range(3):   # the optimizer donates w's buffer when it owns it
        opt.apply_gradients([(tf.ones_like(w), w)])
    ck.sync()
    assert tf.train.latest_checkpoint(str(tmp_path)) == p
    np.testing.assert_array_equal(tf.train.load_variable(p, "w/.ATTRIBUTES/VARIABLE_VALUE"), saved)
    p2 = ck.save(str(tmp_path / "ckpt"), options=opts)
    p3 = ck.save(str(tmp_path / "ckpt"), options=opts)   # waits for p2 first
    ck.sync()
    assert (os.path.basename(p2), os.path.basename(p3)) == ("ckpt-2", "ckpt-3")
    np.testing.assert_array_equal(tf.train.load_variable(p3, "w/.ATTRIBUTES/VARIABLE_VALUE"), w.numpy())


def _hold_commits(monkeypatch):
    """Make orbax's commit (the rename of the temporary directory) wait for the returned event."""
    from orbax.checkpoint._src.path import atomicity
    release, reached = threading.Event(), threading.Event()
    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    def held(self, *a, **k):
        reached.set()
        assert release.wait(60)
        return finalize(self, *a, **k)

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", held)
    return release, reached


def test_async_save_returns_with_its_snapshot_before_the_write_is_committed(tmp_path, monkeypatch):
    """save() returns while the commit is still held back (the write runs in the background);
    the values it writes are those of the moment save() was called, whatever is assigned after."""
    release, reached = _hold_commits(monkeypatch)
    w = tf.Variable(np.full((64, 64), 1.0, "float32"))
    ck = tf.train.Checkpoint(w=w)
    p = ck.save(str(tmp_path / "ckpt"), options=tf.train.CheckpointOptions(enable_async=True))
    assert reached.wait(60)   # the writer got as far as the commit, after save() returned
    assert not os.path.exists(p) and tf.train.latest_checkpoint(str(tmp_path)) is None
    w.assign(np.full((64, 64), 7.0, "float32"))
    release.set()
    ck.sync()
    assert tf.train.latest_checkpoint(str(tmp_path)) == p
    assert float(tf.train.load_variable(p, "w/.ATTRIBUTES/VARIABLE_VALUE").max()) == 1.0


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler") or not os.path.isdir("/proc/self/task"),
                    reason="thread scheduling policies are Linux's")
def test_an_async_save_is_written_at_the_lowest_priority_and_gives_it_back(tmp_path, monkeypatch):
    """While an async save is written its thread runs under SCHED_IDLE (nice 19 where leaving
    SCHED_IDLE is not permitted); afterwards TensorStore's shared threads, which synchronous
    saves and restores use too, are back at the main thread's policy and nice."""
    from orbax.checkpoint._src.path import atomicity

    from tapejax.train import writer
    seen, recorded = {}, threading.Event()
    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    def record(self, *a, **k):   # (runs in the thread that writes: the commit)
        seen["policy"] = os.sched_getscheduler(0)
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        recorded.set()
        return finalize(self, *a, **k)

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", record)
    ck = tf.train.Checkpoint(w=tf.Variable(np.ones((64, 64), "float32")))
    ck.write(str(tmp_path / "sync"))   # (TensorStore's threads exist now)
    recorded.clear()
    ck.save(str(tmp_path / "ckpt"), options=tf.train.CheckpointOptions(enable_async=True))
    assert recorded.wait(60)   # (before sync(), which would give the priority back at once)
    ck.sync()
    if writer._IDLE_PROBE[0]:
        assert seen["policy"] == os.SCHED_IDLE
    else:
        assert seen["nice"] == 19
        return
    main_nice = os.getpriority(os.PRIO_PROCESS, 0)
    workers = writer._pool_workers()   # (threads that end meanwhile are skipped)
    assert workers
    for tid in workers:
        try:
            policy, nice = os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)
        except OSError:   # ended since the scan
            continue
        assert policy == os.SCHED_OTHER
        assert nice == main_nice


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler") or not os.path.isdir("/proc/self/task"),
                    reason="thread scheduling policies are Linux's")
def test_waiting_for_an_async_save_gives_its_writer_full_priority(tmp_path, monkeypatch):
    """On cores kept busy an idle-priority write could take long: once someone waits for it
    (sync, the next save, a restore of its path, exit), it is written at full priority."""
    from tapejax.train import writer
    release, reached = _hold_commits(monkeypatch)
    ck = tf.train.Checkpoint(w=tf.Variable(np.ones((64, 64), "float32")))
    ck.save(str(tmp_path / "ckpt"), options=tf.train.CheckpointOptions(enable_async=True))
    assert reached.wait(60)
    if not writer._IDLE_PROBE[0]:   # (no permission to leave SCHED_IDLE: nice 19 for good)
        release.set()
        ck.sync()
        return
    tid = next(t.native_id for t in threading.enumerate() if t.name == "tapejax-checkpoint-commit")
    assert tid is not None
    assert os.sched_getscheduler(tid) == os.SCHED_IDLE
    waiter = threading.Thread(target=ck.sync)
    waiter.start()
    for _ in range(600):   # (the wait gives the priority back before it joins the writer)
        if os.sched_getscheduler(tid) == os.SCHED_OTHER:
            break
        threading.Event().wait(0.01)
    policy = os.sched_getscheduler(tid)
    release.set()
    waiter.join(60)
    assert policy == os.SCHED_OTHER
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")


def test_a_restore_right_after_an_async_save_waits_for_its_commit(tmp_path, monkeypatch):
    """Restoring the path an async save is writing, through the same Checkpoint or another
    object, waits for the commit and reads the whole checkpoint."""
    release, _ = _hold_commits(monkeypatch)
    w = tf.Variable(np.arange(12, dtype="float32").reshape(3, 4))
    ck = tf.train.Checkpoint(w=w)
    opts = tf.train.CheckpointOptions(enable_async=True)
    p = ck.save(str(tmp_path / "ckpt"), options=opts)
    threading.Timer(0.2, release.set).start()   # (the restore below is already waiting then)
    w2 = tf.Variable(np.zeros((3, 4), "float32"))
    tf.train.Checkpoint(w=w2).restore(p).assert_consumed()
    np.testing.assert_array_equal(w2.numpy(), w.numpy())
    p2 = ck.save(str(tmp_path / "ckpt"), options=opts)   # (commits at once: the event is set)
    w.assign(np.zeros((3, 4), "float32"))
    ck.read(p2).assert_consumed()
    np.testing.assert_array_equal(w.numpy(), np.arange(12, dtype="float32").reshape(3, 4))


def test_a_callback_of_an_async_save_reads_the_committed_checkpoint(tmp_path):
    """experimental_write_callbacks run after the commit (in the writer's thread for an async
    save): reading the checkpoint there, or syncing, does not wait for itself."""
    w = tf.Variable(np.full((4, 4), 2.0, "float32"))
    ck = tf.train.Checkpoint(w=w)
    seen, done = [], threading.Event()

    def check(path):
        try:
            ck.sync()
            seen.append(float(tf.train.load_variable(path, "w/.ATTRIBUTES/VARIABLE_VALUE").sum()))
        finally:
            done.set()

    opts = tf.train.CheckpointOptions(enable_async=True, experimental_write_callbacks=[check])
    ck.save(str(tmp_path / "ckpt"), options=opts)
    assert done.wait(60)   # (the main thread waits for nothing before the callback has run)
    ck.sync()
    assert seen == [32.0]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_failed_commit_keeps_the_previous_checkpoint_and_the_next_save_works(tmp_path, monkeypatch, use_async):
    """The same Checkpoint (its orbax Checkpointer reused) saves, fails at the commit (raised by
    save() or by sync()), then saves again: the failed save is no checkpoint, the state file
    named the previous one until the next save committed."""
    from orbax.checkpoint._src.path import atomicity
    w = tf.Variable(np.full((32, 32), 1.0, "float32"))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=w), str(tmp_path), max_to_keep=3)
    opts = tf.train.CheckpointOptions(enable_async=use_async)
    first = manager.save(options=opts)
    manager.sync()
    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    def fail(self, *a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", fail)
    w.assign(np.full((32, 32), 2.0, "float32"))
    with pytest.raises(OSError, match="disk full"):
        manager.save(options=opts)
        manager.sync()
    assert tf.train.latest_checkpoint(str(tmp_path)) == first
    assert not os.path.exists(tmp_path / "ckpt-2")
    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", finalize)
    w.assign(np.full((32, 32), 3.0, "float32"))
    again = manager.save(options=opts)
    manager.sync()
    assert tf.train.latest_checkpoint(str(tmp_path)) == again
    assert float(tf.train.load_variable(again, "w/.ATTRIBUTES/VARIABLE_VALUE").max()) == 3.0
    assert float(tf.train.load_variable(first, "w/.ATTRIBUTES/VARIABLE_VALUE").max()) == 1.0


@pytest.mark.skipif(sys.version_info[:3] in ((3, 12, 0), (3, 12, 1)),
                    reason="CPython 3.12.0 and 3.12.1 refuse new threads at interpreter exit, even from "
                           "non-daemon threads (fixed in 3.12.2): orbax's write cannot finish there")
def test_async_save_is_finished_at_interpreter_exit(tmp_path):
    p = _run("""
        import sys, numpy as np, tapejax as tf
        w = tf.Variable(np.full((512, 512), 3.0, "float32"))
        ck = tf.train.Checkpoint(w=w)
        ck.save(sys.argv[1] + "/ckpt", options=tf.train.CheckpointOptions(enable_async=True))
        print("RESULT{}")   # exits at once: the write and the state file must still complete
    """, tmp_path)
    _result(p)
    path = tf.train.latest_checkpoint(str(tmp_path))
    assert path == str(tmp_path / "ckpt-1")
    assert float(tf.train.load_variable(path, "w/.ATTRIBUTES/VARIABLE_VALUE").sum()) == 3.0 * 512 * 512


KILLED = """
    import os, signal, sys, numpy as np, tapejax as tf
    directory, where = sys.argv[1], sys.argv[2]
    w = tf.Variable(np.full((1024, 1024), 1.0, "float32"))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=w), directory, max_to_keep=3)
    manager.save()                       # ckpt-1: committed
    w.assign(np.full((1024, 1024), 2.0, "float32"))
    if where == "before-rename":         # every byte written, the commit (rename) not done
        from orbax.checkpoint._src.path import atomicity
        atomicity.AtomicRenameTemporaryPath.finalize = lambda self: os.kill(os.getpid(), signal.SIGKILL)
        manager.save()
    else:                                # killed by the parent while the async write runs
        print("SAVING", flush=True)
        manager.save(options=tf.train.CheckpointOptions(enable_async=True))
        manager.sync()
    print("SAVED", flush=True)
"""


@pytest.mark.parametrize("where", ["before-rename", "during-async-write"])
def test_a_killed_save_leaves_the_previous_checkpoint_intact(tmp_path, where):
    """SIGKILL in the middle of a save: the directory still says ckpt-1 is the latest, ckpt-1
    restores exactly, the half-written save is no checkpoint, and saving again works."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [sys.executable, "-c", textwrap.dedent(KILLED), str(tmp_path), where]
    if where == "before-rename":
        p = subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)
        assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    else:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("SAVING"):
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=240)
    latest = tf.train.latest_checkpoint(str(tmp_path))
    w = tf.Variable(np.zeros((1024, 1024), "float32"))
    ck = tf.train.Checkpoint(w=w)
    if latest == str(tmp_path / "ckpt-2"):   # (the async write may have won the race: then it is whole)
        ck.restore(latest).assert_consumed()
        assert float(w.numpy().min()) == float(w.numpy().max()) == 2.0
        return
    assert latest == str(tmp_path / "ckpt-1")
    ck.restore(latest).assert_consumed()
    assert float(w.numpy().min()) == float(w.numpy().max()) == 1.0
    with pytest.raises((tf.errors.NotFoundError, tf.errors.DataLossError)):
        tf.train.Checkpoint(w=w).restore(str(tmp_path / "ckpt-2"))
    manager = tf.train.CheckpointManager(ck, str(tmp_path), max_to_keep=3)
    assert manager.checkpoints == [str(tmp_path / "ckpt-1")]
    w.assign(np.full((1024, 1024), 5.0, "float32"))
    again = manager.save()
    assert again == str(tmp_path / "ckpt-2") and tf.train.latest_checkpoint(str(tmp_path)) == again
    assert float(tf.train.load_variable(again, "w/.ATTRIBUTES/VARIABLE_VALUE").max()) == 5.0


SHARDED = """
    import json, sys, numpy as np, jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import tapejax as tf
    from tapejax.train import writer
    d = sys.argv[1]
    writer.PACK_MAX_BYTES = int(sys.argv[2])   # (0: every value its own orbax array)
    mesh = Mesh(np.array(jax.devices()), ("x",))
    a = np.arange(32, dtype="float32").reshape(8, 4)
    w = tf.Variable(jax.device_put(a, NamedSharding(mesh, P("x", None))), name="w")
    b = tf.Variable(jax.device_put(a[0], NamedSharding(mesh, P())), name="b")
    opt = tf.optimizers.Adam(0.1)
    opt.apply_gradients([(tf.ones_like(w), w), (tf.ones_like(b), b)])
    path = tf.train.Checkpoint(w=w, b=b, opt=opt).save(d + "/ckpt")
    m_slot = opt.get_slot(w, "m")
    out = {"slot_spec": list(m_slot.value().value.sharding.spec)}
    # restore onto another sharding and another mesh (2 of the 4 devices): orbax reshards
    mesh2 = Mesh(np.array(jax.devices()[:2]), ("y",))
    w2 = tf.Variable(jax.device_put(np.zeros((8, 4), "float32"), NamedSharding(mesh2, P(None, "y"))), name="w")
    b2 = tf.Variable(np.zeros(4, "float32"), name="b")
    opt2 = tf.optimizers.Adam(0.1)
    opt2.build([w2, b2])   # (tf_keras' new optimizers: the state is made by the first update or build)
    tf.train.Checkpoint(w=w2, b=b2, opt=opt2).restore(path).assert_consumed()
    sh = w2.value().value.sharding
    out["w_equal"] = bool(np.array_equal(w2.numpy(), w.numpy()))
    out["w_spec"] = [list(sh.spec), len(sh.device_set)]
    out["m_equal"] = bool(np.array_equal(opt2.get_slot(w2, "m").numpy(), m_slot.numpy()))
    out["m2_spec"] = [list(opt2.get_slot(w2, "m").value().value.sharding.spec),
                      len(opt2.get_slot(w2, "m").value().value.sharding.device_set)]
    print("RESULT" + json.dumps(out))
"""


@pytest.mark.parametrize("pack_max", [1 << 20, 0])
def test_sharded_variables_save_and_restore_onto_another_sharding(tmp_path, pack_max):
    """A Variable sharded over 4 devices is saved (packed with the others, or as its own array);
    it restores onto another sharding on another mesh, and its optimizer slots (sharded like
    it) follow it."""
    r = _result(_run(SHARDED, tmp_path, pack_max, devices=4))
    assert r["slot_spec"] == ["x", None]
    assert r["w_equal"] and r["w_spec"] == [[None, "y"], 2]
    assert r["m_equal"] and r["m2_spec"] == [[None, "y"], 2]


def test_a_tf_checkpoint_without_tensorflow_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "ckpt-1.index").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(ImportError, match=r"tapejax\[tf\]"):
        tf.train.Checkpoint(v=tf.Variable(1.0)).restore(str(tmp_path / "ckpt-1"))


def test_orbax_before_0_12_6_saves_with_its_default_numpy_handler(tmp_path, monkeypatch):
    """orbax 0.11 to 0.12.5 has no ``NumpyHandler(deepcopy_host_arrays=...)``: a save still
    works there, with that release's handler (it was a TypeError on every save)."""
    import orbax.checkpoint as ocp
    real = ocp.type_handlers.NumpyHandler
    made = []

    class OldNumpyHandler(real):   # the old signature: no deepcopy_host_arrays
        def __init__(self, metadata_key=None):
            made.append(metadata_key)
            super().__init__(metadata_key=metadata_key)
    monkeypatch.setattr(ocp.type_handlers, "NumpyHandler", OldNumpyHandler)
    v = tf.Variable([1.0, 2.0])
    path = tf.train.Checkpoint(v=v).save(str(tmp_path / "ckpt"))
    v.assign([0.0, 0.0])
    tf.train.Checkpoint(v=v).restore(path)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    assert made and set(made) == {None}   # (the save wrote arrays through the old handler)
