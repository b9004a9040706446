"""``Checkpoint`` (``tf.train.Checkpoint``) and ``CheckpointOptions``.

``Checkpoint(model=..., optimizer=...)`` is the root of an object graph
(``graph``); with ``root=obj`` the object itself is the root and the keyword
objects hang from it, as in TF.  Objects given later as attributes
(``ckpt.step = tf.Variable(0)``) join the graph, and a restore waiting for
them is applied then.

* ``write(prefix)`` saves to ``prefix`` (an orbax checkpoint directory, see
  ``storage``) and returns it; ``save(prefix)`` increments ``save_counter`` and
  writes ``prefix-N``, then records it in the directory's ``checkpoint`` state
  file (``manager``), so ``latest_checkpoint(dir)`` finds it.
* ``read(path)`` / ``restore(path)`` match the saved graph to the live
  objects (``restore``) and return a status (``status``); ``restore`` also
  creates ``save_counter`` and accepts a SavedModel directory.  Values are
  assigned at once where their objects exist and when they appear otherwise.
* ``CheckpointOptions(enable_async=True)``: ``save``/``write`` return once the
  values are copied off the devices; ``sync()`` (or the next save, a restore,
  interpreter exit) waits for the commit.

``save_counter`` is created on the first ``save``, ``restore`` or access (as
TF), so a checkpoint written by ``write`` alone has none.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from ..core.errors import NotFoundError
from ..core.variable import Variable, counter as _counter
from . import (
    graph as _g,
    restore as _restore,
    storage as _storage,
    tf_format as _tf_format,
    trackable as _tr,
    writer as _writer,
)
from .state_file import update_checkpoint_state
from .status import CheckpointLoadStatus, InitializationOnlyStatus


class CheckpointOptions:
    """Options for ``save``/``write``/``restore`` (``tf.train.CheckpointOptions``).

    ``enable_async`` (or TF's older ``experimental_enable_async_checkpoint``):
    save in the background.  ``experimental_write_callbacks``: callables run
    after each write is committed (with the path when they take one
    argument).  ``experimental_skip_slot_variables``: restore no optimizer
    slots.  ``experimental_io_device`` and ``experimental_sharding_callback``
    are accepted and have no effect (orbax decides where and how to write).
    """

    def __init__(self, experimental_io_device: Optional[str] = None,
                 experimental_enable_async_checkpoint: bool = False,
                 experimental_write_callbacks: Optional[Sequence[Callable]] = None,
                 enable_async: bool = False, experimental_skip_slot_variables: bool = False,
                 experimental_sharding_callback: Any = None):
        if experimental_write_callbacks is not None:
            for cb in experimental_write_callbacks:
                if not callable(cb):
                    raise TypeError(f"experimental_write_callbacks must be callables; got {cb!r}")
        self.experimental_io_device = experimental_io_device
        self.experimental_enable_async_checkpoint = bool(experimental_enable_async_checkpoint or enable_async)
        self.enable_async = self.experimental_enable_async_checkpoint
        self.experimental_write_callbacks = (None if experimental_write_callbacks is None
                                             else list(experimental_write_callbacks))
        self.experimental_skip_slot_variables = bool(experimental_skip_slot_variables)
        self.experimental_sharding_callback = experimental_sharding_callback


def _check_options(options: Any) -> CheckpointOptions:
    if options is None:
        return CheckpointOptions()
    if not isinstance(options, CheckpointOptions):
        raise TypeError(f"`options` must be a tapejax.train.CheckpointOptions; got {options!r}")
    return options


def _check_format(format: Any) -> str:
    if format not in ("tapejax", "tf"):
        raise ValueError(f"`format` must be 'tapejax' (tapejax's checkpoint directory) or 'tf' (TensorFlow's "
                         f"tensor bundle); got {format!r}")
    return format


def _callback(cb: Callable, path: str) -> Callable[[], None]:
    import inspect
    try:
        n = len(inspect.signature(cb).parameters)
    except (TypeError, ValueError):
        n = 1
    if n not in (0, 1):
        raise AssertionError(f"Callback functions for checkpoint are required to have 0 or 1 parameters, but "
                             f"this has {n} parameters: {cb}")
    return (lambda: cb()) if n == 0 else (lambda: cb(path))


def _path(value: Any, what: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"`{what}` must be a string or os.PathLike path; got {value!r} of type "
                        f"{type(value).__name__}")
    return value


def _not_trackable(what: str, value: Any, kinds: str) -> ValueError:
    """TF's ValueError for an object a Checkpoint cannot track.  The object's repr is guarded (a
    flax nnx ``State`` of Variables fails in its own repr); a JAX pytree of Variables (an equinox
    model, an nnx ``State``) gets the recipe that makes it a dict of them."""
    try:
        shown = repr(value)
    except Exception:   # (a user's repr may raise anything)
        shown = f"<{type(value).__name__} object>"
    if len(shown) > 300:
        shown = shown[:300] + "..."
    hint = ""
    leaves = jax.tree_util.tree_leaves(value, is_leaf=lambda x: isinstance(x, Variable))
    if any(isinstance(x, Variable) for x in leaves):
        hint = (" A JAX pytree of Variables (a flax or equinox model) is not trackable: pass a dict of its "
                "Variables, {jax.tree_util.keystr(path): v for path, v in jax.tree_util.tree_leaves_with_path("
                "model, is_leaf=lambda x: isinstance(x, tf.Variable)) if isinstance(v, tf.Variable)}.")
    return ValueError(f"`Checkpoint` was expecting {what} to be a trackable object ({kinds}), got {shown}.{hint}")


class Checkpoint:
    """Saves and restores Variables, Modules and optimizers (``tf.train.Checkpoint``)."""

    def __init__(self, root: Any = None, **kwargs: Any):
        objects = {}
        for name, value in kwargs.items():
            if not (_tr.is_trackable(value) or _tr.is_container(value)):
                raise _not_trackable(name, value, "a Variable, tapejax.Module, optimizer or Checkpoint, or a "
                                     "list, tuple or dict of them")
            objects[name] = value
        if root is not None and not _tr.is_trackable(root):
            raise _not_trackable("root", root, "a Variable, tapejax.Module, optimizer or Checkpoint")
        object.__setattr__(self, "_objects", objects)
        object.__setattr__(self, "_root", root)
        object.__setattr__(self, "_save_counter", None)   # (Optional[Variable]: made on first use)
        object.__setattr__(self, "_saver", None)          # (Optional[writer.Saver])
        object.__setattr__(self, "_options", None)

    def __getattr__(self, name: str) -> Any:
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(f"'Checkpoint' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or not (_tr.is_trackable(value) or _tr.is_container(value)):
            object.__setattr__(self, name, value)   # a plain attribute: not saved (as TF)
            return
        self._objects[name] = value
        _tr.track(self, name, value)

    # -- the graph --------------------------------------------------------------------------
    def _checkpoint_children(self) -> list:
        out = []
        if self._root is not None:
            out.extend(_tr.children(self._root))
            if _tr.is_value(self._root):
                out = []
        out.extend(self._objects.items())
        if self._save_counter is not None:
            out.append(("save_counter", self._save_counter))
        return out

    def _checkpoint_lookup(self, name: str) -> Any:
        if name in self._objects:
            return self._objects[name]
        if name == "save_counter":
            return self._save_counter
        return None if self._root is None else _tr.lookup(self._root, name)

    def _checkpoint_anchor(self, name: str) -> Any:
        """Where a restore waits for the child ``name``: the root object for its own attributes."""
        if self._root is not None and name not in self._objects and name != "save_counter":
            return self._root
        return self

    @property
    def save_counter(self) -> Variable:
        """The number of ``save`` calls (an int64 Variable in TF; int32 without JAX's x64 mode)."""
        if self._save_counter is None:
            counter = _counter("save_counter")
            object.__setattr__(self, "_save_counter", counter)
            _tr.track(self, "save_counter", counter)
            return counter
        return self._save_counter

    # -- writing ----------------------------------------------------------------------------
    def _write(self, file_prefix: Any, options: Any = None, callbacks: Sequence[Callable[[], None]] = (),
               format: str = "tapejax") -> str:
        path = _path(file_prefix, "file_prefix")
        opts = _check_options(options)
        _restore.sweep()   # values waiting for objects that now exist are restored before saving
        token = _tr.TF_LAYOUT.set(format == "tf")
        try:
            live = _g.build(self)
        finally:
            _tr.TF_LAYOUT.reset(token)
        if format == "tf":   # TF's tensor bundle, synchronously (``tf_format.write``)
            self.sync()
            _tf_format.write(path, live)
            for cb in list(callbacks) + [_callback(cb, path) for cb in (opts.experimental_write_callbacks or ())]:
                cb()
            return path
        saver = self._saver
        if saver is None:
            saver = _writer.Saver()
            object.__setattr__(self, "_saver", saver)
        cbs = list(callbacks) + [_callback(cb, path) for cb in (opts.experimental_write_callbacks or ())]
        saver.write(path, live, use_async=opts.enable_async, callbacks=cbs)
        return path

    def write(self, file_prefix: Any, options: Any = None, *, format: str = "tapejax") -> str:
        """Save every value to ``file_prefix`` (no numbering, no state file); returns it.
        ``format="tf"`` (tapejax's own keyword) writes TensorFlow's tensor bundle
        (``file_prefix.index`` / ``.data-*``), which TF's ``Checkpoint.restore`` reads."""
        return self._write(file_prefix, options, format=_check_format(format))

    def save(self, file_prefix: Any, options: Any = None, *, format: str = "tapejax") -> str:
        """Save to ``file_prefix-N`` (N = ``save_counter`` + 1) and record it as the latest
        checkpoint; ``format`` as ``write``'s."""
        prefix = _path(file_prefix, "file_prefix")
        _check_options(options)
        _check_format(format)
        counter = self.save_counter
        number = int(counter.numpy()) + 1
        counter.assign(np.asarray(number, counter.dtype._np))
        path = f"{prefix}-{number}"

        def record() -> None:
            update_checkpoint_state(os.path.dirname(path) or ".", path)

        try:
            return self._write(path, options, callbacks=[record], format=format)
        except BaseException:
            counter.assign(np.asarray(number - 1, counter.dtype._np))
            raise

    def sync(self) -> None:
        """Wait for an async save to be committed (raises what it raised)."""
        if self._saver is not None:
            self._saver.sync()

    # -- reading ----------------------------------------------------------------------------
    def read(self, save_path: Any, options: Any = None) -> CheckpointLoadStatus:
        """Restore what the checkpoint at ``save_path`` has for this object graph; returns a status."""
        path = _path(save_path, "save_path")
        _check_options(options)
        self.sync()
        data = _storage.open_checkpoint(path)
        restoration = _restore.Restoration(data, skip_slots=_check_options(options).experimental_skip_slot_variables)
        try:
            restoration.restore_into(0, self, self, ())
        except BaseException:
            restoration.report.expect_partial = True   # nothing was restored: no warnings about it
            raise
        return CheckpointLoadStatus(restoration, self)

    def restore(self, save_path: Any, options: Any = None) -> Any:
        """``read``, with TF's error for a missing path; also creates ``save_counter`` (restored
        from the checkpoint when it has one).  ``restore(None)`` restores nothing."""
        if save_path is None:
            return InitializationOnlyStatus(self)
        path = _path(save_path, "save_path")
        try:
            status = self.read(path, options)
        except NotFoundError as e:
            raise NotFoundError(None, None, f"Error when restoring from checkpoint or SavedModel at {path}: "
                                f"{e.message}\nPlease double-check that the path is correct. You may be "
                                "missing the checkpoint suffix (e.g. the '-1' in 'path/to/ckpt-1').") from None
        self.save_counter   # (created now: restored by the wait on "save_counter")
        return status

    def __repr__(self) -> str:
        return f"<tapejax.train.Checkpoint {sorted(self._objects)}>"


__all__ = ["Checkpoint", "CheckpointOptions"]
