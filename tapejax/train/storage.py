"""Where checkpoints live: the readers of every format (``writer`` writes tapejax's, on orbax).

tapejax's format (see ``writer``): one orbax checkpoint directory per
checkpoint, its arrays one PyTree item (small ones packed by dtype), the graph
item (format, version, object graph, specs, packed offsets) JSON in orbax's
step metadata; format 2 (items ``state`` and ``graph``) still reads.

Reading (``open_checkpoint``)
-----------------------------
A path is, in this order: a tapejax checkpoint directory; a tapejax
SavedModel (its ``variables/`` checkpoint, named by the directory or by TF's
prefix ``DIR/variables/variables``, as TF restores a SavedModel's variables); a checkpoint written by TensorFlow (``path.index``, read by
``tf_format`` when TensorFlow is installed); tapejax's first format, one
``.npz`` file (read with ``allow_pickle=False``, its keys turned into an object
graph here); anything else is TF's NotFoundError (no such files) or
DataLossError (something that is not a checkpoint).  Every reader gives a
``CheckpointData``: the path, the ``SavedGraph``, the ``ValueSpec`` of every
key and ``read(targets)``, which reads only the keys asked for, each onto the
sharding asked for (orbax) or as a NumPy array.
"""
from __future__ import annotations

import json
import os
from typing import Any, NamedTuple, Optional, Protocol, Sequence

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import DataLossError, NotFoundError
from . import export_layout as _sm, graph as _g, tf_format
from .graph import SavedGraph, ValueSpec
from .writer import FORMAT, VERSION, PackEntry, Saver, orbax

_META_FILE = "_CHECKPOINT_METADATA"
_TMP_SUFFIX = ".orbax-checkpoint-tmp"


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
    """A tapejax checkpoint directory.  Format 3: one orbax PyTree item (small arrays packed),
    the graph item in orbax's step metadata; format 2: orbax items ``state`` (one array per key)
    and ``graph`` (JSON)."""

    def __init__(self, path: str):
        ocp = orbax()
        self.path = path
        self.composite = os.path.isdir(os.path.join(path, "graph"))   # (format 2)
        if self.composite:
            meta = _reader(True).restore(path, args=ocp.args.Composite(graph=ocp.args.JsonRestore()))["graph"]
        else:
            meta = _step_metadata(path).get("custom_metadata")
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
        restore = ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True)
        if self.composite:
            out = _reader(True).restore(self.path, args=ocp.args.Composite(state=restore))["state"]
        else:
            out = _reader(False).restore(self.path, args=restore)
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


_READERS: dict = {}


def _reader(composite: bool) -> Any:
    """One orbax Checkpointer per layout for every read (it holds no state between restores)."""
    if composite not in _READERS:
        ocp = orbax()
        _READERS[composite] = ocp.Checkpointer(ocp.CompositeCheckpointHandler() if composite
                                               else ocp.PyTreeCheckpointHandler())
    return _READERS[composite]


def _step_metadata(path: str) -> dict:
    """orbax's step metadata (``_CHECKPOINT_METADATA``, JSON), where format 3 keeps the graph item
    (``custom_metadata``); read directly, since ``Checkpointer.metadata`` also reads every array's."""
    try:
        with open(os.path.join(path, _META_FILE)) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise DataLossError(None, None, f"{path}: unreadable orbax checkpoint metadata ({e})") from None
    return meta if isinstance(meta, dict) else {}


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
    """A committed orbax checkpoint directory of format 3 (a PyTree item: ``_METADATA``) or 2
    (a ``graph`` item); ``OrbaxData`` checks it is tapejax's."""
    return os.path.isdir(path) and os.path.exists(os.path.join(path, _META_FILE)) \
        and (os.path.exists(os.path.join(path, "_METADATA")) or os.path.isdir(os.path.join(path, "graph")))


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
    sm_dir = os.path.dirname(os.path.dirname(path))
    if (os.path.basename(path) == "variables" and os.path.dirname(path) == _sm.variables_path(sm_dir)
            and _sm.is_saved_model(sm_dir)):   # TF's prefix of a SavedModel's variables: DIR/variables/variables
        return OrbaxData(_sm.variables_path(sm_dir))
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
