"""``Checkpoint`` (``tf.train.Checkpoint``) and ``latest_checkpoint``.

File format (documented, no pickle)
-----------------------------------
One NumPy ``.npz`` archive per checkpoint, read with ``allow_pickle=False``:

* one array per Variable, keyed by its *object path* from the checkpoint's
  root: ``"model/layers/0/w"`` (attributes of Modules in sorted order, list
  indices, dict keys), ``"optimizer/iter"``, ``"optimizer/learning_rate"``, the other
  hyperparameters that TF keeps in Variables (``"optimizer/beta_1"``, ``"optimizer/decay"`` ...),
  ``"optimizer/slots/<variable path>/<slot name>"`` (``m``, ``v`` ...),
  ``"optimizer/extra/<i>"`` (Nadam's momentum cache), ``"optimizer/optax/<i>"``
  (the leaves of an optax state), ``"save_counter"``;
* ``"__tapejax_checkpoint__"``: a 0-d unicode array holding JSON metadata
  (format name, version, dtypes of arrays NumPy cannot store natively, such
  as bfloat16, which are stored as same-size unsigned integers).

Writes are atomic: the archive is written to a temporary file in the same
directory, flushed and fsynced, then ``os.replace``-d over the target, so an
interrupted save leaves the previous checkpoint intact.  ``save`` also
writes TF's ``checkpoint`` state file, so ``latest_checkpoint(dir)`` works.

Restoring validates every value first (ValueError naming the variable, the
expected and the found shape/dtype) and only then assigns, so a bad file
changes nothing.  Values in the file with no object, and objects with no
value, are reported by the returned status (``assert_consumed``), as in TF.
Optimizer slots that do not exist yet are created on restore, so a fresh
optimizer resumes exactly where the saved one stopped.
"""
import json
import os
import tempfile
from typing import Any, Dict, Iterable

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import NotFoundError
from ..core.variable import Variable
from ..optimizers import Optimizer
from ..optimizers._optax import OptaxOptimizer
from .module import Module

_META = "__tapejax_checkpoint__"
_FORMAT = "tapejax-checkpoint"
_VERSION = 1


#: Other kinds of trackable objects, added by ``register_trackable``: (predicate, children) where
#: ``children(obj)`` lists (sub-path, Variable) pairs (``tapejax.keras``: a Keras model's variables
#: by their Keras paths).
_KINDS: list = []


def register_trackable(predicate, children):
    """Walk objects for which ``predicate(obj)`` holds as ``children(obj)``: (sub-path, Variable)."""
    _KINDS.append((predicate, children))


def _kind(x):
    return next((children for predicate, children in _KINDS if predicate(x)), None)


def _is_trackable(x):
    return isinstance(x, (Variable, Module, Optimizer, Checkpoint)) or (bool(_KINDS) and _kind(x) is not None)


def _is_trackable_tree(x):
    """A trackable, or a list/tuple/dict of them (TF wraps those as trackable containers)."""
    if isinstance(x, dict):
        return all(_is_trackable_tree(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(_is_trackable_tree(v) for v in x)
    return _is_trackable(x)


def _file_of(prefix):
    prefix = os.fspath(prefix)
    return prefix if prefix.endswith(".npz") else prefix + ".npz"


class _Graph:
    """Variables (path -> Variable) and optimizers (path -> optimizer) reachable from the root objects."""

    def __init__(self, objects):
        self.vars = {}
        self.opts = []
        self._seen = set()
        self._var_path = {}
        for name in sorted(objects):
            self._struct(objects[name], name)

    def _walk(self, obj, path):
        if isinstance(obj, Variable):
            if obj._id not in self._var_path:
                self._var_path[obj._id] = path
                self.vars[path] = obj
            return
        if id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        if isinstance(obj, Optimizer):
            self.opts.append((path, obj))
        elif isinstance(obj, Module):
            attrs = vars(obj)
            for key in sorted(attrs):
                if key in Module._TF_MODULE_IGNORED_PROPERTIES or key == "_name":
                    continue
                self._struct(attrs[key], f"{path}/{key}")
        elif isinstance(obj, Checkpoint):
            for key in sorted(obj._objects):
                self._struct(obj._objects[key], f"{path}/{key}")
        else:
            children = _kind(obj)
            if children is not None:
                for sub, var in children(obj):
                    self._walk(var, f"{path}/{sub}")

    def _struct(self, x, path):
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                self._struct(x[k], f"{path}/{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                self._struct(v, f"{path}/{i}")
        elif _is_trackable(x):
            self._walk(x, path)

    def var_path(self, var):
        return self._var_path.get(var._id)

    def optimizer_entries(self, path, opt, create_from=None):
        """(key, Variable) for the optimizer's state; ``create_from`` (keys in a file) creates missing slots."""
        out = [(f"{path}/iter", opt.iterations)]
        if isinstance(opt, OptaxOptimizer):
            return out + self._optax_entries(path, opt, create_from)
        if opt._lr_var is not None and opt._lr_sched is None:
            out.append((f"{path}/learning_rate", opt._lr_var))
        for name in sorted(opt._hyper):   # beta_1, decay, momentum ... (Variables, as in TF)
            out.append((f"{path}/{name}", opt._hyper[name]))
        if create_from is not None:
            want = []
            for vpath, var in self.vars.items():
                if var._id not in opt._slots and any(
                        k.startswith(f"{path}/slots/{vpath}/") for k in create_from):
                    want.append(var)
            if want:
                opt._create_slots(want)
        for i, e in enumerate(getattr(opt, "_extra", [])):
            out.append((f"{path}/extra/{i}", e))
        for vid, slots in opt._slots.items():
            var = next((v for v in self.vars.values() if v._id == vid), None)
            vpath = self.var_path(var) if var is not None else None
            if vpath is None:
                continue   # a slot of a variable outside this checkpoint
            for sname, svar in slots.items():
                out.append((f"{path}/slots/{vpath}/{sname}", svar))
        return out

    def _optax_entries(self, path, opt, create_from):
        out = []
        if create_from is not None and not opt._groups:
            groups = create_from.get("optax_groups", {}).get(path, [])
            for gpaths in groups:
                if all(p in self.vars for p in gpaths):
                    opt._state_for([self.vars[p] for p in gpaths])
        for gi, (key, (svars, _)) in enumerate(opt._groups.items()):
            for i, s in enumerate(svars):
                out.append((f"{path}/optax/{gi}/{i}", s))
        return out

    def optax_groups(self):
        groups = {}
        for path, opt in self.opts:
            if isinstance(opt, OptaxOptimizer):
                gl = []
                for key in opt._groups:
                    vpaths = []
                    for vid in key:
                        var = next((v for v in self.vars.values() if v._id == vid), None)
                        vpaths.append(self.var_path(var) if var is not None else f"<unsaved {vid}>")
                    gl.append(vpaths)
                groups[path] = gl
        return groups


class _CreateFrom(list):
    """Keys of a file plus its metadata (passed to optimizer_entries to create missing state)."""

    def __init__(self, keys: Iterable[str], meta: Dict[str, Any]):
        super().__init__(keys)
        self.meta = meta

    def get(self, k: str, default: Any = None) -> Any:
        return self.meta.get(k, default)


class CheckpointLoadStatus:
    """What a restore matched (``tf.train.Checkpoint.restore``'s status)."""

    def __init__(self, path, unmatched_objects, unused_keys):
        self.save_path = path
        self.unmatched_objects = unmatched_objects   # (key, Variable) with no value in the file
        self.unused_keys = unused_keys               # values in the file with no object

    def assert_consumed(self):
        """Raise AssertionError unless every object got a value and every value was used."""
        if self.unmatched_objects:
            names = [f"{k} ({v.name}, shape {tuple(v.shape)})" for k, v in self.unmatched_objects]
            raise AssertionError(f"Found {len(names)} Python objects that were not bound to checkpointed "
                                 f"values in {self.save_path}, likely due to changes in the Python "
                                 f"program: {names}")
        if self.unused_keys:
            raise AssertionError(f"Unresolved values in the checkpoint {self.save_path}: "
                                 f"{sorted(self.unused_keys)}")
        return self

    def assert_existing_objects_matched(self):
        if self.unmatched_objects:
            return self.assert_consumed()
        return self

    def assert_nontrivial_match(self):
        return self

    def expect_partial(self):
        return self


class Checkpoint:
    """Save and restore Variables, Modules and optimizers (``tf.train.Checkpoint(**objects)``).

    ``save(prefix)`` writes ``prefix-N.npz`` (N counts saves) and returns
    ``"prefix-N"``; ``write(prefix)`` writes ``prefix.npz`` and returns
    ``prefix``; ``restore(path)`` / ``read(path)`` load it back (``path``
    with or without ``.npz``).  See the module docstring for the format.
    """

    def __init__(self, root=None, **kwargs):
        objects = dict(kwargs)
        if root is not None:
            objects["root"] = root
        for k, v in objects.items():
            if not _is_trackable_tree(v):
                raise ValueError(f"`Checkpoint` was expecting {k} to be a trackable object (a Variable, "
                                 f"tapejax.Module, optimizer or Checkpoint, or a list/dict of them), "
                                 f"got {v!r}.")
        self._objects = objects
        self._save_counter = Variable(np.zeros((), np.int32 if not _dtypes.x64_enabled() else np.int64),
                                      trainable=False, name="save_counter")

    def __getattr__(self, name):
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(name)

    @property
    def save_counter(self):
        return self._save_counter

    # -- writing ----------------------------------------------------------------
    def _entries(self, create_from=None):
        graph = _Graph(self._objects)
        entries = list(graph.vars.items())
        for path, opt in graph.opts:
            entries.extend(graph.optimizer_entries(path, opt, create_from))
        entries.append(("save_counter", self._save_counter))
        return graph, entries

    def write(self, file_prefix, options=None):
        """Write every value to ``file_prefix``(.npz) atomically; returns ``file_prefix``."""
        graph, entries = self._entries()
        arrays = {}
        dtypes = {}
        for key, var in entries:
            a = np.asarray(var._value)
            if a.dtype.kind == "V" or a.dtype.name not in np.sctypeDict:
                dtypes[key] = a.dtype.name
                a = a.view(np.dtype(f"u{a.dtype.itemsize}"))
            arrays[key] = a
        meta = {"format": _FORMAT, "version": _VERSION, "dtypes": dtypes, "optax_groups": graph.optax_groups()}
        arrays[_META] = np.array(json.dumps(meta))
        _atomic_savez(_file_of(file_prefix), arrays)
        return os.fspath(file_prefix)

    def save(self, file_prefix, options=None):
        """Write ``file_prefix-N`` (N = the save counter + 1); record it as the latest checkpoint."""
        n = int(np.asarray(self._save_counter._value)) + 1
        self._save_counter.assign(np.asarray(n, self._save_counter.dtype._np))
        path = f"{os.fspath(file_prefix)}-{n}"
        try:
            self.write(path)
        except BaseException:
            self._save_counter.assign(np.asarray(n - 1, self._save_counter.dtype._np))
            raise
        _write_state(os.path.dirname(path) or ".", os.path.basename(path))
        return path

    # -- reading -----------------------------------------------------------------
    def read(self, save_path, options=None):
        """Restore from ``save_path`` (all values validated before any is assigned); returns a status."""
        fname = _file_of(save_path)
        if not os.path.exists(fname):
            raise NotFoundError(None, None, f"Error when restoring from checkpoint {save_path}: no file "
                                f"{fname}. You may be missing the checkpoint suffix (e.g. the '-1' in "
                                "'path/to/ckpt-1').")
        with np.load(fname, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        if _META not in data:
            raise ValueError(f"{fname} is not a tapejax checkpoint (no {_META!r} entry)")
        meta = json.loads(str(data.pop(_META)))
        if meta.get("format") != _FORMAT or meta.get("version", 0) > _VERSION:
            raise ValueError(f"{fname}: unsupported checkpoint format {meta.get('format')!r} version "
                             f"{meta.get('version')!r} (this tapejax reads {_FORMAT!r} version {_VERSION})")
        for key, dname in meta.get("dtypes", {}).items():
            if key in data:
                data[key] = data[key].view(np.dtype(_dtypes.as_dtype(dname)._np))
        create_from = _CreateFrom(data.keys(), meta)
        _, entries = self._entries(create_from)
        problems, plan, unmatched = [], [], []
        for key, var in entries:
            if key not in data:
                if key != "save_counter":
                    unmatched.append((key, var))
                continue
            a = data[key]
            want_shape, want_dtype = tuple(var._value.shape), np.dtype(var._value.dtype)
            if tuple(a.shape) != want_shape:
                problems.append(f"{key} (variable {var.name}): expected shape {want_shape}, the checkpoint "
                                f"has shape {tuple(a.shape)}")
            elif a.dtype != want_dtype:
                problems.append(f"{key} (variable {var.name}): expected dtype {want_dtype.name}, the "
                                f"checkpoint has dtype {a.dtype.name}")
            else:
                plan.append((var, a))
        if problems:
            raise ValueError(f"Cannot restore {save_path}: {len(problems)} value(s) do not match the "
                             "objects (nothing was restored):\n  " + "\n  ".join(problems))
        for var, a in plan:
            var.assign(a)
        used = {k for k, _ in entries}
        return CheckpointLoadStatus(save_path, unmatched, [k for k in data if k not in used])

    def restore(self, save_path, options=None):
        """``read`` (``save_path`` as returned by ``save``)."""
        if save_path is None:
            return CheckpointLoadStatus(None, [], [])
        return self.read(save_path, options)


def _atomic_write(path, write, mode, suffix=""):
    """Write ``path`` all or nothing: ``write(file)`` fills a temporary file in the same
    directory, which is fsynced and then renamed over ``path`` (an interrupted save
    leaves the previous file intact)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=d)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _atomic_savez(fname, arrays):
    _atomic_write(fname, lambda f: np.savez(f, **arrays), "wb", suffix=".npz")


def _write_state(directory, latest):
    text = f'model_checkpoint_path: "{latest}"\nall_model_checkpoint_paths: "{latest}"\n'
    _atomic_write(os.path.join(directory, "checkpoint"), lambda f: f.write(text), "w")


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The path of the latest checkpoint written by ``Checkpoint.save`` in ``checkpoint_dir`` (or None)."""
    state = os.path.join(checkpoint_dir, latest_filename or "checkpoint")
    if not os.path.exists(state):
        return None
    with open(state) as f:
        for line in f:
            if line.startswith("model_checkpoint_path:"):
                name = line.split(":", 1)[1].strip().strip('"')
                path = name if os.path.isabs(name) else os.path.join(checkpoint_dir, name)
                return path if os.path.exists(_file_of(path)) else None
    return None


__all__ = ["Checkpoint", "CheckpointLoadStatus", "latest_checkpoint"]
