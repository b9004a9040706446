"""Where checkpoints live: tapejax's format on orbax-checkpoint, and the readers of every format.

Writing (``Saver``)
-------------------
A checkpoint is one orbax checkpoint directory (``prefix-N/``) with two items:

* ``state``: a PyTree (``ocp.args.PyTreeSave``) of every array, a flat dict
  keyed by TF's checkpoint keys (``model/dense/w/.ATTRIBUTES/VARIABLE_VALUE``).
  orbax writes each ``jax.Array`` shard by shard (zarr on TensorStore), each
  process its own shards, and restores onto any sharding, so a checkpoint
  saved by 2 processes restores in 1 and the other way round.
* ``graph``: JSON (``ocp.args.JsonSave``): the format's name and version, the
  object graph (``graph.SavedGraph``) and each key's shape and dtype.

orbax writes into ``prefix-N.orbax-checkpoint-tmp`` and renames it when every
process has finished (the commit), so a save killed half way leaves the
previous checkpoints and the ``checkpoint`` state file untouched; nothing is
pickled.  An async save (``CheckpointOptions(enable_async=True)``) returns
once the arrays are copied to host memory; orbax writes them in threads (at
nice 19 on Linux, so a training step on the same cores comes first), and
a thread of ours waits for the commit and then runs the save's callbacks
(the ``checkpoint`` state file, ``CheckpointManager``'s bookkeeping).  The next
save, a restore, ``sync()`` and interpreter exit wait for it first.

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
VERSION = 2
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
    """A tapejax checkpoint directory."""

    def __init__(self, path: str):
        ocp = orbax()
        self.path = path
        meta = self._checkpointer().restore(path, args=ocp.args.Composite(graph=ocp.args.JsonRestore()))["graph"]
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataLossError(None, None, f"{path} is an orbax checkpoint but not a tapejax checkpoint (no "
                                f"{FORMAT!r} graph item)")
        if int(meta.get("version", 0)) > VERSION:
            raise DataLossError(None, None, f"{path}: tapejax checkpoint format version {meta.get('version')} "
                                f"is newer than this tapejax reads ({VERSION})")
        self.graph = SavedGraph.from_json(meta["graph"])
        self.specs = {k: ValueSpec(tuple(s), str(d)) for k, (s, d) in meta["specs"].items()}

    @staticmethod
    def _checkpointer():
        ocp = orbax()
        return ocp.Checkpointer(ocp.CompositeCheckpointHandler())

    def read(self, targets: Sequence[ReadTarget]) -> list[Any]:
        if not targets:
            return []
        import jax
        ocp = orbax()
        item, args = {}, {}
        for t in targets:
            spec = self.specs[t.key]
            if t.sharding is None:
                item[t.key] = 0
                args[t.key] = ocp.RestoreArgs(restore_type=np.ndarray)
            else:
                item[t.key] = jax.ShapeDtypeStruct(spec.shape, np_dtype(spec.dtype), sharding=t.sharding)
                args[t.key] = ocp.ArrayRestoreArgs(sharding=t.sharding, global_shape=spec.shape,
                                                   dtype=np_dtype(spec.dtype))
        out = self._checkpointer().restore(self.path, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True)))["state"]
        return [out[t.key] for t in targets]


class _Pending(NamedTuple):
    thread: threading.Thread
    errors: list


class Saver:
    """Writes a Checkpoint's saves through orbax, synchronously or asynchronously."""

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
            # barely compress): a third of the default's write time for the MLP of
            # benchmarks/bench_checkpoint.py, and less CPU taken from training during an async
            # save (restoring reads any layout)
            return ocp.CompositeCheckpointHandler(state=ocp.PyTreeCheckpointHandler(use_ocdbt=False,
                                                                                    use_compression=False),
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
        state = {}
        specs = {}
        import jax

        several = jax.process_count() > 1
        for key, obj in live.values.items():
            kind = value_kind(obj)
            assert kind is not None   # (the graph holds values only under VARIABLE_VALUE)
            value = kind.read(obj)   # (a pending update is computed now)
            if several and isinstance(value, jax.Array) and value.is_fully_addressable:
                # a Variable no multi-process program placed (an unused hyperparameter): the same
                # value in every process, written once from host memory by process 0
                value = np.asarray(value)
            state[key] = value
            specs[key] = [list(int(d) for d in value.shape), np.dtype(value.dtype).name]
        meta = {"format": FORMAT, "version": VERSION, "graph": live.graph.to_json(), "specs": specs}
        items: dict[str, Any] = {"graph": ocp.args.JsonSave(meta)}
        if state:   # (orbax refuses an empty tree: a checkpoint of no values has the graph only)
            items["state"] = ocp.args.PyTreeSave(state)
        args = ocp.args.Composite(**items)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        force = os.path.exists(path)
        ckptr: Any = self._checkpointer(use_async)
        if use_async:
            _wait_at_exit()
        ckptr.save(path, args=args, force=force)
        if not use_async:
            for cb in callbacks:
                cb()
            return
        errors: list = []

        def finish():
            try:
                ckptr.wait_until_finished()
                for cb in callbacks:
                    cb()
            except BaseException as e:  # noqa: BLE001 - raised again by sync()
                errors.append(e)

        thread = threading.Thread(target=finish, name="tapejax-checkpoint-commit")
        thread.start()
        self._pending = _Pending(thread, errors)
        _background_priority()

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
