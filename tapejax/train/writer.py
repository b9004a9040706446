"""Writing checkpoints: tapejax's format on orbax-checkpoint (``Saver``; ``storage`` reads them).

A checkpoint is one orbax checkpoint directory (``prefix-N/``) of one item:

* the arrays: a PyTree (``ocp.args.PyTreeSave``).  The values this process
  holds whole (all of them in one process) are copied to host memory in one
  ``jax.device_get``; those up to ``PACK_MAX_BYTES`` are packed into one flat
  array per dtype (``PACKED-float32``), as TF writes every tensor into one data
  file, because orbax's cost is per array; larger ones are arrays keyed by TF's
  checkpoint keys (``model/dense/w/.ATTRIBUTES/VARIABLE_VALUE``).  Arrays
  spread over several processes are written by orbax shard by shard (zarr on
  TensorStore), each process its own shards.  orbax restores onto any
  sharding, and packed values are placed onto theirs, so a checkpoint saved by
  2 processes restores in 1 and the other way round.
* the graph item, JSON in orbax's step metadata (``_CHECKPOINT_METADATA``,
  ``custom_metadata``): the format's name and version, the object graph
  (``graph.SavedGraph``), each key's shape and dtype, and where each packed
  key lies.

That is format 3.  Format 2 (orbax items ``state``, one array per key, and
``graph``, JSON) still reads.

orbax writes into ``prefix-N.orbax-checkpoint-tmp`` and renames it when every
process has finished (the commit), so a save killed half way leaves the
previous checkpoints and the ``checkpoint`` state file untouched; nothing is
pickled.  Each ``Saver`` keeps one orbax ``Checkpointer`` for all its saves.
An async save (``CheckpointOptions(enable_async=True)``) returns once the
snapshot above is taken (host copies, so later updates cannot reach it); one
thread of ours runs the same orbax save and then the save's callbacks (the
``checkpoint`` state file, ``CheckpointManager``'s bookkeeping).  While it
writes, its threads are at the lowest priority (``SCHED_IDLE`` on Linux where
that can be undone, else nice 19): a training step on the same cores comes
first, and on cores kept busy the commit comes later.  The next
save, a restore (of any Checkpoint reading that path), ``sync()`` and
interpreter exit wait for it first.
"""
from __future__ import annotations

import atexit
import inspect
import logging
import os
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from . import graph as _g
from .trackable import value_kind

FORMAT = "tapejax-checkpoint"
VERSION = 3   # 3: small arrays packed by dtype (``snapshot``), one orbax item; 2 still reads


class _NoOcdbtMergeWarning(logging.Filter):
    """orbax 0.12 tries to merge per-process OCDBT files even for a checkpoint written without
    OCDBT, and warns on every save that there are none; tapejax writes without OCDBT on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skipping merge of OCDBT checkpoints" not in str(record.msg)


def orbax():
    """``orbax.checkpoint``, imported on first use (ImportError naming the extra if missing)."""
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:   # pragma: no cover - the test extra installs it
        raise ImportError("tapejax.train.Checkpoint stores checkpoints with orbax-checkpoint, which is not "
                          "installed: pip install 'tapejax[checkpoint]'") from e
    if not _FILTERED:
        _FILTERED.append(True)
        logging.getLogger("absl").addFilter(_NoOcdbtMergeWarning())
    return ocp


_FILTERED: list = []


class _Pending(NamedTuple):
    path: str
    thread: threading.Thread
    errors: list
    priority: "_Priority"


PACK_MAX_BYTES = 16 << 20   # arrays up to this size are written packed (see ``snapshot``)
_PACK_PREFIX = "PACKED-"     # (no TF key lacks a "/.": packs never collide with values)


class PackEntry(NamedTuple):
    """Where a packed value lies: the pack's key in the state tree and its first element."""

    pack: str
    offset: int


class Snapshot(NamedTuple):
    """What one save writes, taken before ``save()`` returns: the state tree (packs and
    arrays, host copies of every value this process can address) and the graph item."""

    state: dict
    meta: dict


def snapshot(live: _g.LiveGraph) -> Snapshot:
    """Copy ``live``'s values to host memory and lay them out for orbax.

    Every value this process can address whole (all of them in one process) comes to the
    host in one ``jax.device_get``; those of at most ``PACK_MAX_BYTES`` are packed into one
    flat array per dtype (``PACKED-float32``), with each key's offset in the graph item, as
    TF puts every tensor into one data file with an index: orbax's cost is per array (a
    TensorStore, its directory and metadata files), which for a model's many small arrays
    is most of a save.  Larger ones are their own arrays, copied.  Arrays spread over
    several processes stay ``jax.Array``s, written shard by shard by each process.  The
    packs and copies are new memory, so later updates (donated buffers) cannot reach them.
    """
    import jax

    values: dict[str, Any] = {}
    for key, obj in live.values.items():
        kind = value_kind(obj)
        assert kind is not None   # (the graph holds values only under VARIABLE_VALUE)
        values[key] = kind.read(obj)   # (a pending update is computed now)
    local = [k for k, v in values.items() if not (isinstance(v, jax.Array) and not v.is_fully_addressable)]
    host = dict(zip(local, jax.device_get([values[k] for k in local])))   # (transfers started together)
    specs, packed, groups = {}, {}, {}
    state: dict[str, Any] = {}
    for key, value in values.items():
        specs[key] = [[int(d) for d in value.shape], np.dtype(value.dtype).name]
        a = host.get(key)
        if a is None:
            state[key] = value   # (several processes: each writes its shards)
        elif a.nbytes <= PACK_MAX_BYTES:
            groups.setdefault(np.dtype(a.dtype).name, []).append((key, a))
        else:
            state[key] = np.array(a, copy=True)
    for dname, items in groups.items():
        pack, offset = _PACK_PREFIX + dname, 0
        for key, a in items:
            packed[key] = [pack, offset]
            offset += int(a.size)
        state[pack] = np.concatenate([np.ravel(a) for _, a in items]) if len(items) > 1 \
            else np.array(np.ravel(items[0][1]), copy=True)
        if not offset:   # (orbax refuses empty arrays: a pack of empty values holds one unused 0)
            state[pack] = np.zeros((1,), state[pack].dtype)
    if not state:   # (nor an empty tree: a checkpoint of no values has an unused pack)
        state[_PACK_PREFIX + "float32"] = np.zeros((1,), np.float32)
    meta = {"format": FORMAT, "version": VERSION, "graph": live.graph.to_json(), "specs": specs,
            "packed": packed}
    return Snapshot(state, meta)


def _type_handlers(ocp: Any) -> Any:
    """orbax's handlers, but NumPy arrays are written without the defensive deep copy: ours
    are the snapshot's own (a second 8 MB copy per save for the benchmark's MLP).  orbax before
    0.12.6 has no such option (its NumpyHandler takes no ``deepcopy_host_arrays``): its default."""
    th = ocp.type_handlers
    takes = "deepcopy_host_arrays" in inspect.signature(th.NumpyHandler).parameters
    numpy_handler = th.NumpyHandler(deepcopy_host_arrays=False) if takes else th.NumpyHandler()
    return th.create_type_handler_registry(
        (int, th.ScalarHandler()), (float, th.ScalarHandler()), (bytes, th.ScalarHandler()),
        (np.number, th.ScalarHandler()), (np.ndarray, numpy_handler),
        (jax_array_type(), th.ArrayHandler()), (str, th.StringHandler()))


def jax_array_type() -> Any:
    import jax
    return jax.Array


class Saver:
    """Writes a Checkpoint's saves through orbax, synchronously or asynchronously.

    One orbax ``Checkpointer`` per Saver, reused by every save.  An async save takes the
    snapshot (``snapshot``) in the caller's thread, then one thread of ours (at the lowest
    priority while it writes: ``_Background``) runs the same synchronous orbax save as a sync
    save, and the callbacks after the commit.
    Arrays spread over several processes (a multi-process program) are written by orbax's
    ``AsyncCheckpointer`` instead, which copies them off the devices before returning.
    """

    _ALL: "weakref.WeakSet[Saver]" = weakref.WeakSet()

    def __init__(self):
        self._sync = None
        self._async = None
        self._pending: Optional[_Pending] = None
        self._lock = threading.Lock()
        Saver._ALL.add(self)

    def _checkpointer(self, use_async: bool):
        ocp = orbax()

        def handler():
            # zarr arrays, without OCDBT's single-database layer and without zstd (float weights
            # barely compress): less CPU per save, taken from training during an async save
            # (restoring reads any layout); one item (a Composite of two costs a fifth more)
            return ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_compression=False,
                                               type_handler_registry=_type_handlers(ocp))

        if use_async:
            if self._async is None:
                self._async = ocp.AsyncCheckpointer(handler())
            return self._async
        if self._sync is None:
            self._sync = ocp.Checkpointer(handler())
        return self._sync

    def write(self, path: str, live: _g.LiveGraph, use_async: bool = False,
              callbacks: Sequence[Callable[[], None]] = ()) -> None:
        """Save ``live``'s values and graph to the directory ``path`` (replacing one that is
        there); run ``callbacks`` once it is committed (in a thread after an async save)."""
        self.sync()
        ocp = orbax()
        import jax

        snap = snapshot(live)
        args = ocp.args.PyTreeSave(snap.state)
        meta = snap.meta
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        force = os.path.exists(path)
        if not use_async:
            self._checkpointer(False).save(path, args=args, force=force, custom_metadata=meta)
            for cb in callbacks:
                cb()
            return
        _wait_at_exit()
        errors: list = []
        if jax.process_count() > 1:
            ckptr: Any = self._checkpointer(True)
            ckptr.save(path, args=args, force=force, custom_metadata=meta)

            def write():
                ckptr.wait_until_finished()
        else:
            ckptr = self._checkpointer(False)

            def write():
                ckptr.save(path, args=args, force=force, custom_metadata=meta)

        priority = _Priority()

        def finish():
            try:
                priority.lower()
                try:
                    write()
                finally:
                    priority.restore()
                for cb in callbacks:
                    cb()
            except BaseException as e:  # noqa: BLE001 - raised again by sync()
                errors.append(e)

        thread = threading.Thread(target=finish, name="tapejax-checkpoint-commit")
        self._pending = _Pending(os.path.abspath(path), thread, errors, priority)
        thread.start()

    def sync(self) -> None:
        """Wait for an async save to be committed; raise what it raised."""
        with self._lock:
            pending = self._pending
            if pending is not None and pending.thread is threading.current_thread():
                return   # (a callback of that save, run after its commit: nothing to wait for)
            self._pending = None
        if pending is not None:
            pending.priority.restore()   # (waited for now: written at full speed)
            pending.thread.join()
            if pending.errors:
                raise pending.errors[0]

    @classmethod
    def sync_all(cls) -> None:
        for saver in list(cls._ALL):
            try:
                saver.sync()
            except Exception:  # noqa: BLE001 - at exit: orbax logs it
                pass

    @classmethod
    def wait_for(cls, path: str) -> None:
        """Wait for an async save (of any Checkpoint) writing ``path`` to be committed: a
        restore of a path being written reads the whole checkpoint."""
        path = os.path.abspath(path)
        for saver in list(cls._ALL):
            pending = saver._pending
            if pending is not None and pending.path == path:
                saver.sync()


class _Background:
    """The scheduling priority of the threads writing an async save, lowered while it is written.

    The threads are ours (the writer, and the threads orbax starts from it, which inherit its
    priority), orbax's ``async_save`` thread and TensorStore's shared ``ts_pool_worker``
    threads.  Where the change can be undone (Linux, and the permission to leave ``SCHED_IDLE``
    again, probed once), they run under ``SCHED_IDLE`` -- the write gets a core only when
    nothing else wants it, so a training step on the same cores is barely slowed -- and go back
    to the main thread's priority when the write is done or waited for (``_Priority``; later
    synchronous saves and restores use the same TensorStore threads).  Otherwise (no
    permission) they get nice 19 for good; elsewhere nothing changes.
    """

    def __init__(self):
        self.idle = False
        self.nice = 0
        self.writer = threading.get_native_id()
        self.idle_before: set = set()   # (threads idle already: not ours to change back)
        if not (hasattr(os, "setpriority") and os.path.isdir("/proc/self/task")):
            return
        try:
            self.nice = os.getpriority(os.PRIO_PROCESS, threading.main_thread().native_id or 0)
        except OSError:
            return
        self.idle = _idle_reversible()
        if self.idle:
            self.idle_before = _idle_threads()
        self._set(lower=True)

    def _threads(self) -> set:
        tids = {self.writer}
        tids |= {t.native_id for t in threading.enumerate() if t.name == "async_save" and t.native_id is not None}
        tids |= _pool_workers()
        return tids

    def _set(self, lower: bool) -> None:
        # (going back: also the threads orbax started from the writer, which inherited SCHED_IDLE)
        for tid in self._threads() if lower else self._threads() | (_idle_threads() - self.idle_before):
            try:
                if lower and self.idle:
                    os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                elif lower:
                    os.setpriority(os.PRIO_PROCESS, tid, 19)
                else:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                    os.setpriority(os.PRIO_PROCESS, tid, self.nice)
            except OSError:   # a thread that ended meanwhile, or no permission: leave it
                pass

    def restore(self) -> None:
        if self.idle:
            self._set(lower=False)


class _Priority:
    """An async save's priority: lowered by its thread when it starts writing, given back when
    the write is done or as soon as someone waits for it (``sync``, the next save, a restore of
    its path, interpreter exit), so on cores that training keeps busy the write proceeds in
    their idle time, and a wait for it is short."""

    def __init__(self):
        self._lock = threading.Lock()
        self._background: Optional[_Background] = None
        self._done = False

    def lower(self) -> None:
        with self._lock:
            if not self._done:
                self._background = _Background()

    def restore(self) -> None:
        with self._lock:
            self._done = True
            if self._background is not None:
                self._background.restore()
                self._background = None


def _pool_workers() -> set:
    """TensorStore's worker threads.  A thread that ends between the listing and the read of
    its name is skipped, and the scan goes on to the others."""
    out = set()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == "ts_pool_worker":
                    out.add(int(tid))
        except OSError:   # ended meanwhile
            pass
    return out


def _idle_threads() -> set:
    out = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                if os.sched_getscheduler(int(tid)) == os.SCHED_IDLE:
                    out.add(int(tid))
            except OSError:   # ended meanwhile
                pass
    except OSError:
        pass
    return out


_IDLE_PROBE: list = []


def _idle_reversible() -> bool:
    """Whether a thread may enter ``SCHED_IDLE`` and leave it again (tried once, on the calling
    thread: a writer thread, which stays idle if it may not leave)."""
    if not _IDLE_PROBE:
        ok = False
        if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
            try:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
                ok = True
            except OSError:
                pass
        _IDLE_PROBE.append(ok)
    return _IDLE_PROBE[0]


_EXIT_HOOK: list = []


def _wait_at_exit() -> None:
    """Make interpreter exit wait for async saves: before ``concurrent.futures`` refuses new work
    (its exit hook runs when the main thread ends, before non-daemon threads are joined), so the
    hook goes in the same list, after it, and runs first."""
    if _EXIT_HOOK:
        return
    _EXIT_HOOK.append(True)
    import concurrent.futures.thread  # noqa: F401  (registers its own hook first)
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(Saver.sync_all)
    atexit.register(Saver.sync_all)


__all__ = ["FORMAT", "VERSION", "PACK_MAX_BYTES", "PackEntry", "Snapshot", "snapshot", "Saver", "orbax"]
