"""Where checkpoints live: tapejax's format on orbax-checkpoint, and the readers of every format.

Writing (``Saver``)
-------------------
A checkpoint is one orbax checkpoint directory (``prefix-N/``) with two items:

* ``state``: a PyTree (``ocp.args.PyTreeSave``) of arrays.  The values this
  process holds whole (all of them in one process) are copied to host memory
  in one ``jax.device_get``; those up to ``PACK_MAX_BYTES`` are packed into one
  flat array per dtype (``PACKED-float32``), as TF writes every tensor into one
  data file, because orbax's cost is per array; larger ones are arrays keyed by
  TF's checkpoint keys (``model/dense/w/.ATTRIBUTES/VARIABLE_VALUE``).  Arrays
  spread over several processes are written by orbax shard by shard (zarr on
  TensorStore), each process its own shards.  orbax restores onto any
  sharding, and packed values are placed onto theirs, so a checkpoint saved by
  2 processes restores in 1 and the other way round.
* ``graph``: JSON (``ocp.args.JsonSave``): the format's name and version, the
  object graph (``graph.SavedGraph``), each key's shape and dtype, and where
  each packed key lies (format 3; format 2, one array per key, still reads).

orbax writes into ``prefix-N.orbax-checkpoint-tmp`` and renames it when every
process has finished (the commit), so a save killed half way leaves the
previous checkpoints and the ``checkpoint`` state file untouched; nothing is
pickled.  Each ``Saver`` keeps one orbax ``Checkpointer`` for all its saves.
An async save (``CheckpointOptions(enable_async=True)``) returns once the
snapshot above is taken (host copies, so later updates cannot reach it); one
thread of ours, at nice 19 on Linux (so a training step on the same cores
comes first), runs the same orbax save and then the save's callbacks (the
``checkpoint`` state file, ``CheckpointManager``'s bookkeeping).  The next
save, a restore (of any Checkpoint reading that path), ``sync()`` and
interpreter exit wait for it first.

Reading (``open_checkpoint``)
-----------------------------
A path is, in this order: a tapejax checkpoint directory; a tapejax
SavedModel (its ``variables/`` checkpoint, as TF restores a SavedModel's
variables); a checkpoint written by TensorFlow (``path.index``, read by
``tf_format`` when TensorFlow is installed); tapejax's first format, one
``.npz`` file (read with ``allow_pickle=False``, its keys turned into an object
graph here); anything else is TF's NotFoundError (no such files) or
DataLossError (something that is not a checkpoint).  Every reader gives a
``CheckpointData``: the path, the ``SavedGraph``, the ``ValueSpec`` of every
key and ``read(targets)``, which reads only the keys asked for, each onto the
sharding asked for (orbax) or as a NumPy array.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import DataLossError, NotFoundError
from . import export_layout as _sm, graph as _g, tf_format
from .graph import SavedGraph, ValueSpec
from .trackable import value_kind

FORMAT = "tapejax-checkpoint"
VERSION = 3   # 3: small arrays packed by dtype (``snapshot``); 2 still reads
_META_FILE = "_CHECKPOINT_METADATA"
_TMP_SUFFIX = ".orbax-checkpoint-tmp"


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


class ReadTarget(NamedTuple):
    """One array to read: its key, and the sharding to read it onto (None: a NumPy array)."""

    key: str
    sharding: Any = None


class CheckpointData(Protocol):
    path: str
    graph: SavedGraph
    specs: dict[str, ValueSpec]

    def read(self, targets: Sequence[ReadTarget]) -> list[Any]: ...


def np_dtype(name: str) -> np.dtype:
    return np.dtype(_dtypes.as_dtype(name)._np) if name == "bfloat16" else np.dtype(name)


# -- tapejax's format on orbax --------------------------------------------------------------
class OrbaxData:
    """A tapejax checkpoint directory (format 2: one array per key; 3: small arrays packed)."""

    def __init__(self, path: str):
        ocp = orbax()
        self.path = path
        meta = _reader().restore(path, args=ocp.args.Composite(graph=ocp.args.JsonRestore()))["graph"]
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataLossError(None, None, f"{path} is an orbax checkpoint but not a tapejax checkpoint (no "
                                f"{FORMAT!r} graph item)")
        if int(meta.get("version", 0)) > VERSION:
            raise DataLossError(None, None, f"{path}: tapejax checkpoint format version {meta.get('version')} "
                                f"is newer than this tapejax reads ({VERSION})")
        self.graph = SavedGraph.from_json(meta["graph"])
        self.specs = {k: ValueSpec(tuple(s), str(d)) for k, (s, d) in meta["specs"].items()}
        self.packed = {k: PackEntry(str(p), int(o)) for k, (p, o) in meta.get("packed", {}).items()}

    def read(self, targets: Sequence[ReadTarget]) -> list[Any]:
        """The values of ``targets``, in one orbax restore: the packs holding any of them (read
        whole, as NumPy, then cut) and the other keys, each read onto its sharding by orbax."""
        if not targets:
            return []
        import jax
        ocp = orbax()
        item: dict[str, Any] = {}
        args: dict[str, Any] = {}
        for t in targets:
            entry = self.packed.get(t.key)
            if entry is not None:
                item[entry.pack] = 0
                args[entry.pack] = ocp.RestoreArgs(restore_type=np.ndarray)
                continue
            spec = self.specs[t.key]
            if t.sharding is None:
                item[t.key] = 0
                args[t.key] = ocp.RestoreArgs(restore_type=np.ndarray)
            else:
                item[t.key] = jax.ShapeDtypeStruct(spec.shape, np_dtype(spec.dtype), sharding=t.sharding)
                args[t.key] = ocp.ArrayRestoreArgs(sharding=t.sharding, global_shape=spec.shape,
                                                   dtype=np_dtype(spec.dtype))
        out = _reader().restore(self.path, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True)))["state"]
        return [self._value(out, t) for t in targets]

    def _value(self, out: dict, t: ReadTarget) -> Any:
        entry = self.packed.get(t.key)
        if entry is None:
            return out[t.key]
        spec = self.specs[t.key]
        size = int(np.prod(spec.shape, dtype=np.int64))
        a = out[entry.pack][entry.offset:entry.offset + size].reshape(spec.shape)
        if t.sharding is None:
            return a
        import jax
        if t.sharding.is_fully_addressable:
            return jax.device_put(a, t.sharding)
        return jax.make_array_from_callback(tuple(spec.shape), t.sharding, lambda index: a[index])


_READER: list = []


def _reader() -> Any:
    """One orbax Checkpointer for every read (it holds no state between restores)."""
    if not _READER:
        ocp = orbax()
        _READER.append(ocp.Checkpointer(ocp.CompositeCheckpointHandler()))
    return _READER[0]


class _Pending(NamedTuple):
    path: str
    thread: threading.Thread
    errors: list


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
    meta = {"format": FORMAT, "version": VERSION, "graph": live.graph.to_json(), "specs": specs,
            "packed": packed}
    return Snapshot(state, meta)


def _type_handlers(ocp: Any) -> Any:
    """orbax's handlers, but NumPy arrays are written without the defensive deep copy: ours
    are the snapshot's own (a second 8 MB copy per save for the benchmark's MLP)."""
    th = ocp.type_handlers
    return th.create_type_handler_registry(
        (int, th.ScalarHandler()), (float, th.ScalarHandler()), (bytes, th.ScalarHandler()),
        (np.number, th.ScalarHandler()), (np.ndarray, th.NumpyHandler(deepcopy_host_arrays=False)),
        (jax_array_type(), th.ArrayHandler()), (str, th.StringHandler()))


def jax_array_type() -> Any:
    import jax
    return jax.Array


class Saver:
    """Writes a Checkpoint's saves through orbax, synchronously or asynchronously.

    One orbax ``Checkpointer`` per Saver, reused by every save.  An async save takes the
    snapshot (``snapshot``) in the caller's thread, then one thread of ours (at nice 19)
    runs the same synchronous orbax save as a sync save, and the callbacks after the commit.
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
            # (restoring reads any layout)
            return ocp.CompositeCheckpointHandler(state=ocp.PyTreeCheckpointHandler(
                use_ocdbt=False, use_compression=False, type_handler_registry=_type_handlers(ocp)),
                graph=ocp.JsonCheckpointHandler())

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
        items: dict[str, Any] = {"graph": ocp.args.JsonSave(snap.meta)}
        if snap.state:   # (orbax refuses an empty tree: a checkpoint of no values has the graph only)
            items["state"] = ocp.args.PyTreeSave(snap.state)
        args = ocp.args.Composite(**items)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        force = os.path.exists(path)
        if not use_async:
            self._checkpointer(False).save(path, args=args, force=force)
            for cb in callbacks:
                cb()
            return
        _wait_at_exit()
        errors: list = []
        if jax.process_count() > 1:
            ckptr: Any = self._checkpointer(True)
            ckptr.save(path, args=args, force=force)

            def finish():
                _background_priority()
                try:
                    ckptr.wait_until_finished()
                    for cb in callbacks:
                        cb()
                except BaseException as e:  # noqa: BLE001 - raised again by sync()
                    errors.append(e)
        else:
            ckptr = self._checkpointer(False)

            def finish():
                _background_priority()   # (threads started from here inherit it)
                try:
                    ckptr.save(path, args=args, force=force)
                    for cb in callbacks:
                        cb()
                except BaseException as e:  # noqa: BLE001 - raised again by sync()
                    errors.append(e)
                _background_priority()   # (TensorStore's workers, started on first use)

        thread = threading.Thread(target=finish, name="tapejax-checkpoint-commit")
        self._pending = _Pending(os.path.abspath(path), thread, errors)
        thread.start()

    def sync(self) -> None:
        """Wait for an async save to be committed; raise what it raised."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
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


def _background_priority() -> None:
    """Lower the scheduling priority of the threads writing an async save (TensorStore's
    ``ts_pool_worker`` threads, orbax's ``async_save`` thread, our commit thread) to nice 19, so
    that on a machine whose cores also run the training step, the step gets the CPU first and
    the write uses what is left (Linux; elsewhere nothing changes)."""
    if not hasattr(os, "setpriority") or not os.path.isdir("/proc/self/task"):
        return
    tids = {t.native_id for t in threading.enumerate()
            if t.name in ("async_save", "tapejax-checkpoint-commit") and t.native_id is not None}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == "ts_pool_worker":
                    tids.add(int(tid))
        for tid in tids:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
    except OSError:   # a thread that ended meanwhile, or no permission: leave it
        pass


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


# -- tapejax's first format: one .npz --------------------------------------------------------
_NPZ_META = "__tapejax_checkpoint__"
_NPZ_EXTRA = {0: "momentum_cache"}   # format 1 kept optimizer state beyond slots only for Nadam


class NpzData:
    """A checkpoint written by tapejax's first format (``prefix.npz``).

    Its keys are object paths (``model/layers/0/w``, ``optimizer/iter``,
    ``optimizer/slots/<variable path>/<slot>``, ``optimizer/extra/<i>``,
    ``optimizer/optax/<group>/<i>``, ``save_counter``); they are turned into
    the same object graph as the current format's, so restoring matches
    objects the same way (and defers the same way).
    """

    def __init__(self, path: str, fname: str):
        self.path = path
        with np.load(fname, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        if _NPZ_META not in data:
            raise DataLossError(None, None, f"{fname} is not a tapejax checkpoint (no {_NPZ_META!r} entry)")
        meta = json.loads(str(data.pop(_NPZ_META)))
        if meta.get("format") != FORMAT or int(meta.get("version", 0)) != 1:
            raise DataLossError(None, None, f"{fname}: unsupported checkpoint format {meta.get('format')!r} "
                                f"version {meta.get('version')!r}")
        for key, dname in meta.get("dtypes", {}).items():
            if key in data:
                data[key] = data[key].view(np_dtype(dname))
        self._data = data
        self.specs = {k: ValueSpec(tuple(a.shape), a.dtype.name) for k, a in data.items()}
        self.graph = _npz_graph(list(data), meta)

    def read(self, targets: Sequence[ReadTarget]) -> list[Any]:
        return [self._data[t.key] for t in targets]


def _npz_graph(keys: list, meta: dict) -> SavedGraph:
    nodes = [_g.SavedNode()]

    def node_at(parts: Sequence[str]) -> int:
        i = 0
        for p in parts:
            for c in nodes[i].children:
                if c.name == p:
                    i = c.node
                    break
            else:
                nodes.append(_g.SavedNode())
                nodes[i].children.append(_g.ChildRef(p, len(nodes) - 1))
                i = len(nodes) - 1
        return i

    def leaf(parts: Sequence[str], key: str) -> int:
        i = node_at(parts)
        nodes[i].attributes.append(_g.Attribute("VARIABLE_VALUE", parts[-1], key))
        return i

    opts = sorted({k[:-len("/iter")] for k in keys if k.endswith("/iter")}, key=len, reverse=True)

    def owner(k: str) -> Optional[str]:
        return next((o for o in opts if k.startswith(o + "/")), None)

    state_keys = []
    for k in keys:
        o = owner(k)
        rest = k[len(o) + 1:] if o is not None else ""
        if o is not None and rest.split("/")[0] in ("slots", "optax"):
            state_keys.append((o, rest, k))
        elif o is not None and rest.startswith("extra/"):
            leaf(o.split("/") + [_NPZ_EXTRA.get(int(rest.split("/")[1]), rest)], k)
        else:
            leaf(k.split("/"), k)
    groups: dict = {}
    for o, rest, k in state_keys:
        onode = node_at(o.split("/"))
        parts = rest.split("/")
        if parts[0] == "slots":
            vnode = _g.find(_g.SavedGraph(nodes), tuple(parts[1:-1]))
            if vnode is None:
                continue
            snode = len(nodes)
            nodes.append(_g.SavedNode([], [_g.Attribute("VARIABLE_VALUE", parts[-1], k)]))
            nodes[onode].slots.append(_g.SlotEntry(vnode, parts[-1], snode))
        else:   # optax/<group>/<i>
            groups.setdefault((o, int(parts[1])), []).append((int(parts[2]), k))
    for (o, gi), items in sorted(groups.items()):
        vpaths = meta.get("optax_groups", {}).get(o, [])
        vnodes = [_g.find(_g.SavedGraph(nodes), tuple(p.split("/"))) for p in (vpaths[gi] if gi < len(vpaths) else [])]
        if not vnodes or any(v is None for v in vnodes):
            continue
        state = []
        for _, k in sorted(items):
            nodes.append(_g.SavedNode([], [_g.Attribute("VARIABLE_VALUE", k.rsplit("/", 1)[-1], k)]))
            state.append(len(nodes) - 1)
        nodes[node_at(o.split("/"))].groups.append(_g.GroupEntry(tuple(v for v in vnodes if v is not None),
                                                                 tuple(state)))
    return SavedGraph(nodes)


# -- finding the format ---------------------------------------------------------------------
def is_tapejax_checkpoint(path: str) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, _META_FILE)) \
        and os.path.isdir(os.path.join(path, "graph"))


def checkpoint_exists(path: str) -> bool:
    """Whether ``path`` names a checkpoint of any format (``latest_checkpoint``'s check)."""
    return (is_tapejax_checkpoint(path) or os.path.exists(path + ".index")
            or os.path.exists(path if path.endswith(".npz") else path + ".npz"))


def open_checkpoint(path: str) -> CheckpointData:
    """The CheckpointData at ``path`` (see the module docstring for the order of formats)."""
    path = os.fspath(path)
    Saver.wait_for(path)   # (an async save still writing it)
    if is_tapejax_checkpoint(path):
        return OrbaxData(path)
    if _sm.is_saved_model(path):
        return OrbaxData(_sm.variables_path(path))
    if os.path.exists(path + ".index"):
        return tf_format.TFData(path)
    fname = path if path.endswith(".npz") else path + ".npz"
    if os.path.isfile(fname):
        return NpzData(path[:-4] if path.endswith(".npz") else path, fname)
    if os.path.isdir(path):
        raise DataLossError(None, None, f"Unable to open table file {path}: it is a directory that is not a "
                            "checkpoint (a checkpoint is the prefix returned by save() or write(), such as "
                            "'path/to/ckpt-1')")
    if os.path.exists(path):
        raise DataLossError(None, None, f"Unable to open table file {path}: not a checkpoint (perhaps your file "
                            "is in a different format)")
    raise NotFoundError(None, None, f"Unsuccessful TensorSliceReader constructor: Failed to find any matching "
                        f"files for {path}")


__all__ = ["FORMAT", "VERSION", "ReadTarget", "CheckpointData", "OrbaxData", "NpzData", "Saver",
           "open_checkpoint", "checkpoint_exists", "is_tapejax_checkpoint", "np_dtype", "orbax"]
