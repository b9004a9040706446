"""Restoring: matching a saved object graph to live objects, now or when they appear.

A ``Restoration`` (TF's ``_CheckpointRestoreCoordinator``) walks the saved
graph and the live objects together, breadth first from the root, matching
children by name.  Each pass (``restore_into``) has two phases:

1. *plan*, with no side effect: bind saved nodes to live objects, list the
   values to assign, the optimizer slots and groups to create (a slot is made
   when both its Variable and its optimizer are matched, as TF's Keras
   optimizers do), and the saved children that have no live object yet;
   check every value's shape and dtype against the checkpoint.  A mismatch
   raises here (ValueError for a shape, InvalidArgumentError for a dtype, as
   TF), so a bad checkpoint changes nothing.
2. *apply*: create the slots, read all planned values in one storage read
   (each onto its Variable's sharding), assign them, and register the
   missing children as **deferred**.

Deferred restoration (TF's ``_deferred_dependencies``): a saved child with no
live object waits on its nearest live trackable ancestor (the *anchor*, held
weakly) with the names leading to it.  When the anchor gets an attribute of
that name (``trackable.track``, called by ``Module.__setattr__`` and
``Checkpoint.__setattr__``), the wait is resolved and that subtree restored
at once: a model whose Variables are created on its first call gets the
checkpoint's values when they are created, before they are used.  A child
added to a list or dict attribute later (``self.layers.append(...)``) has no
such signal: waits are also swept when a Variable is created
(``core.variable.CREATION_HOOKS``, installed only while something waits),
when a status is checked, and before a save.

A Variable created while a ``tapejax.function`` discovers its Variables (a
layer built inside a compiled step) is restored in that pass too: the value
is also recorded where the discovery puts Variables back when it ends.
"""
from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import Any, NamedTuple, Optional

import jax
import jax.core
import numpy as np

from ..core import state as _state
from ..core.errors import InvalidArgumentError
from ..core.variable import CREATION_HOOKS, Variable
from ..core.variable_shape import declared
from ..optimizers._ema import BUILD_HOOKS
from . import module as _module, trackable as _tr
from .graph import GroupEntry, SavedGraph, slots_from_lists
from .storage import CheckpointData, ReadTarget, np_dtype

_log = logging.getLogger("tapejax")
_Tracer = jax.core.Tracer


class _Wait(NamedTuple):
    """A saved subtree waiting for a live object: ``path`` (child names) below the anchor."""

    path: tuple[str, ...]
    node: int
    restoration: "Restoration"


class _Anchor:
    __slots__ = ("ref", "waits")

    def __init__(self, ref: Any):
        self.ref = ref
        self.waits: list[_Wait] = []


_LOCK = threading.RLock()
_WAITING: dict[int, _Anchor] = {}
_SWEEPING = threading.local()


def waiting() -> bool:
    """Whether some restore waits for objects that do not exist yet."""
    return bool(_WAITING)


def _on_variable_created(var: Variable) -> None:
    sweep()


def _on_optimizer_built(opt: Any) -> None:
    """A new optimizer made its state (its lists are complete).  Inside a ``tapejax.function``'s
    trace the state waits for the trace's end, as ``child_added`` (the function announces the
    Variables it made, which sweeps), so the call that follows reads the restored values."""
    if _state._local.collector is None:
        sweep()


def _update_hook() -> None:
    """Install the hooks (Variable creation, Module attributes) while something waits, and only then."""
    if _WAITING and _on_variable_created not in CREATION_HOOKS:
        CREATION_HOOKS.append(_on_variable_created)
        BUILD_HOOKS.append(_on_optimizer_built)   # (an optimizer's lists complete: its state waits by position)
        _module.CHILD_HOOKS.append(child_added)
    elif not _WAITING and _on_variable_created in CREATION_HOOKS:
        CREATION_HOOKS.remove(_on_variable_created)
        BUILD_HOOKS.remove(_on_optimizer_built)
        _module.CHILD_HOOKS.remove(child_added)


def _anchor_ref(obj: Any) -> Any:
    key = id(obj)

    def gone(_ref: Any, key: int = key) -> None:
        try:
            with _LOCK:
                _WAITING.pop(key, None)
                _update_hook()
        except TypeError:   # (interpreter shutdown: the module's globals are gone)
            pass

    try:
        return weakref.ref(obj, gone)
    except TypeError:   # an object without weak references: held (a rare third-party kind)
        return lambda: obj


def _register(anchor: Any, wait: _Wait) -> None:
    with _LOCK:
        entry = _WAITING.get(id(anchor))
        if entry is None or entry.ref() is not anchor:
            entry = _WAITING[id(anchor)] = _Anchor(_anchor_ref(anchor))
        entry.waits.append(wait)
        _update_hook()


def _walk(obj: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if obj is None:
            return None
        obj = _tr.lookup(obj, name)
    return obj


def _resolve(anchor_id: int, first: Optional[str]) -> None:
    """Apply the waits of one anchor whose object now exists (those under ``first`` only,
    unless None)."""
    with _LOCK:
        entry = _WAITING.get(anchor_id)
        if entry is None:
            return
        anchor = entry.ref()
        if anchor is None:
            return
        ready = []
        for w in list(entry.waits):
            if first is not None and w.path[0] != first:
                continue
            if w.node in w.restoration.matched:
                entry.waits.remove(w)
                continue
            obj = _walk(anchor, w.path)
            if obj is not None:
                entry.waits.remove(w)
                ready.append((w, obj))
        if not entry.waits:
            _WAITING.pop(anchor_id, None)
        _update_hook()
    for w, obj in ready:
        if w.node not in w.restoration.matched:
            w.restoration.restore_into(w.node, obj, anchor, w.path)


def child_added(parent: Any, name: str, child: Any) -> None:
    """``parent`` has a new child ``name`` (``trackable.track``).  While a ``tapejax.function``
    traces, the Variables it creates get their initial values when the trace ends: the wait is
    resolved then (the function ``announce``s them, which sweeps)."""
    if id(parent) in _WAITING and _state._local.collector is None:
        _resolve(id(parent), name)


def sweep() -> None:
    """Try every wait (a child appeared without a ``track`` call: a list append)."""
    if getattr(_SWEEPING, "on", False) or not _WAITING:
        return
    _SWEEPING.on = True
    try:
        for anchor_id in list(_WAITING):
            _resolve(anchor_id, None)
    finally:
        _SWEEPING.on = False


# -- the restoration ------------------------------------------------------------------------
class _Report:
    """What the deletion warning needs (shared with the Restoration, never referencing it)."""

    def __init__(self, graph: SavedGraph, matched: set, unused: dict):
        self.graph = graph
        self.matched = matched
        self.unused = unused
        self.expect_partial = False


def _warn_unrestored(report: _Report) -> None:
    """TF's warning when a restore's coordinator is deleted with values left unrestored."""
    if report.expect_partial:
        return
    names = None
    unused_nodes = []
    for i, node in enumerate(report.graph.nodes):
        if node.attributes and i not in report.matched:
            names = names or report.graph.node_names()
            unused_nodes.append(names.get(i, str(i)))
    if not unused_nodes and not report.unused:
        return
    names = names or report.graph.node_names()
    _log.warning("Detecting that an object or model or tf.train.Checkpoint is being deleted with unrestored "
                 "values. See the following logs for the specific values in question. To silence these "
                 "warnings, use `status.expect_partial()`.")
    for n in unused_nodes:
        _log.warning("Value in checkpoint could not be found in the restored object: %s", n)
    for i, attrs in report.unused.items():
        for a in attrs:
            _log.warning("An attribute in the restored object could not be found in the checkpoint. "
                         "Object: %s, attribute: %s", names.get(i, str(i)), a)


class _Plan:
    def __init__(self):
        self.binds: dict[int, Any] = {}
        self.values: list[tuple[int, Any, str]] = []        # (node, value object, key)
        self.slots: list[tuple[Any, Any, str, int]] = []    # (optimizer, variable, slot name, slot node)
        self.later_slots: list[tuple[int, Any, str, int]] = []   # (optimizer node, variable, name, slot node)
        self.groups: list[tuple[int, GroupEntry]] = []      # (optimizer node, group)
        self.waits: list[tuple[Any, _Wait]] = []
        self.unused: dict[int, list[str]] = {}



def _declares(obj: Any, shape: Any) -> bool:
    """Whether ``obj`` is a Variable whose declared shape (``tf.Variable(..., shape=[None, 3])``:
    ``core.variable_shape``) takes a value of ``shape``: TF restores such a value into it."""
    d = declared(obj)
    return d is not None and d.is_compatible_with(tuple(shape))

class Restoration:
    """One restore of one checkpoint into one object graph (see the module docstring)."""

    def __init__(self, data: CheckpointData, skip_slots: bool = False):
        self.data = data
        self.path = data.path
        self.graph = slots_from_lists(data.graph)   # (tf_keras' new optimizers' state as slots)
        self.matched: set[int] = set()
        self.unused: dict[int, list[str]] = {}
        self._bound: dict[int, Any] = {}     # node -> weak reference (or a holder) to its object
        self._slot_waits: dict[int, list[tuple[int, str, int]]] = collections.defaultdict(list)
        self._opt_waits: dict[int, list[tuple[Any, str, int]]] = collections.defaultdict(list)
        self._groups: list[tuple[int, GroupEntry]] = []
        for i, node in enumerate(self.graph.nodes):
            for s in () if skip_slots else node.slots:
                self._slot_waits[s.variable].append((i, s.name, s.slot))
            for g in node.groups:
                self._groups.append((i, g))
        self.report = _Report(self.graph, self.matched, self.unused)
        weakref.finalize(self, _warn_unrestored, self.report)
        self._lock = threading.RLock()

    # -- bindings ----------------------------------------------------------------------------
    def bound(self, node: int, plan: Optional[_Plan] = None) -> Any:
        if plan is not None and node in plan.binds:
            return plan.binds[node]
        ref = self._bound.get(node)
        return None if ref is None else ref()

    def bound_objects(self) -> list:
        return [o for o in (r() for r in self._bound.values()) if o is not None]

    def _bind(self, plan: _Plan, node: int, obj: Any) -> bool:
        """Bind ``node`` to ``obj`` in ``plan``; False when it was bound already."""
        current = self.bound(node, plan)
        if current is None and node not in self.matched and node not in plan.binds:
            plan.binds[node] = obj
            return True
        if current is not None and current is not obj:
            _log.warning("Inconsistent references when loading the checkpoint into this object graph. For "
                         "example, in the saved checkpoint object, `model.layer.weight` and "
                         "`model.layer_copy.weight` reference the same variable, while in the current object "
                         "these are two different variables. The referenced variables are:(%r and %r).",
                         current, obj)
        return False

    # -- one pass ------------------------------------------------------------------------------
    def restore_into(self, node: int, obj: Any, anchor: Any, path: tuple[str, ...]) -> None:
        """Restore the saved subtree at ``node`` into ``obj`` (reached from ``anchor`` by
        ``path``): plan and check everything, then apply."""
        with self._lock:
            plan = _Plan()
            if not self._bind(plan, node, obj):
                return
            self._plan(plan, node, obj, anchor, path)
            targets = self._check(plan)
            self._apply(plan, targets)

    def _plan(self, plan: _Plan, node: int, obj: Any, anchor: Any, path: tuple[str, ...]) -> None:
        nodes = self.graph.nodes
        queue = collections.deque([(node, obj, anchor, path)])
        while queue:
            n, o, anchor, path = queue.popleft()
            saved = nodes[n]
            is_value = _tr.is_value(o)
            if saved.attributes:
                if is_value:
                    for a in saved.attributes:
                        if a.name == _tr.VARIABLE_VALUE:
                            plan.values.append((n, o, a.key))
                        else:
                            plan.unused.setdefault(n, []).append(a.name)
                else:
                    plan.unused.setdefault(n, []).extend(a.name for a in saved.attributes)
            if is_value:
                for opt_node, name, slot_node in self._slot_waits.get(n, ()):
                    opt = self.bound(opt_node, plan)
                    if opt is None:
                        plan.later_slots.append((opt_node, o, name, slot_node))
                    else:
                        plan.slots.append((opt, o, name, slot_node))
                continue
            if not _tr.is_container(o):
                anchor, path = o, ()
            for c in saved.children:
                if c.node in self.matched or c.node in plan.binds:
                    continue
                live = _tr.lookup(o, c.name)
                if live is None:
                    if nodes[c.node].has_values():
                        a = anchor
                        anchor_for = getattr(anchor, "_checkpoint_anchor", None)
                        if anchor_for is not None and not path:
                            a = anchor_for(c.name)
                        plan.waits.append((a, _Wait(path + (c.name,), c.node, self)))
                    continue
                if self._bind(plan, c.node, live):
                    queue.append((c.node, live, anchor, path + (c.name,)))
            kind = _tr.trackable_kind(o)
            if kind is not None and kind.make_slot is not None:
                for var, name, slot_node in self._opt_waits.get(n, ()):
                    plan.slots.append((o, var, name, slot_node))
        later = []
        for opt_node, var, name, slot_node in plan.later_slots:   # an optimizer matched later in this pass
            opt = self.bound(opt_node, plan)
            if opt is not None:
                plan.slots.append((opt, var, name, slot_node))
            else:
                later.append((opt_node, var, name, slot_node))
        plan.later_slots = later
        for opt_node, group in self._groups:
            opt = self.bound(opt_node, plan)
            if opt is None or any(self.bound(v, plan) is None for v in group.variables):
                continue
            if any(s in self.matched for s in group.state):
                continue
            if opt_node in plan.binds or any(v in plan.binds for v in group.variables):
                plan.groups.append((opt_node, group))

    def _check(self, plan: _Plan) -> list[tuple[int, Any, str]]:
        """Shapes and dtypes of everything ``plan`` assigns, against the checkpoint (raises on a
        mismatch, before anything changes); returns the values to read."""
        specs = self.data.specs
        problems = []
        values = list(plan.values)
        for opt, var, name, slot_node in plan.slots:   # a slot has its Variable's shape and dtype
            key = self._key(slot_node)
            if key is not None:
                values.append((slot_node, var, key))
        for n, obj, key in values:
            if key not in specs:
                problems.append((ValueError, f"the checkpoint {self.path} has no value {key!r}"))
                continue
            saved = specs[key]
            shape, dtype = _tr.value_spec(obj)
            if tuple(saved.shape) != tuple(shape) and not _declares(obj, saved.shape):
                problems.append((ValueError, f"Received incompatible tensor with shape {tuple(saved.shape)} "
                                 f"when attempting to restore variable with shape {tuple(shape)} and name "
                                 f"{getattr(obj, 'name', obj)} (checkpoint key {key})"))
            elif np_dtype(saved.dtype) != dtype and not _int_narrowing(np_dtype(saved.dtype), dtype):
                problems.append((InvalidArgumentError, f"tensor_name = {key}; expected dtype {dtype.name} does "
                                 f"not equal original dtype {saved.dtype} (variable "
                                 f"{getattr(obj, 'name', obj)})"))
        if problems:
            cls = problems[0][0]
            msg = "\n".join(p[1] for p in problems)
            if len(problems) > 1:
                msg = f"{len(problems)} values of {self.path} do not match the objects:\n{msg}"
            msg += "\nNothing was restored."
            raise cls(None, None, msg) if cls is InvalidArgumentError else cls(msg)
        return plan.values

    def _key(self, node: int) -> Optional[str]:
        for a in self.graph.nodes[node].attributes:
            if a.name == _tr.VARIABLE_VALUE:
                return a.key
        return None

    def _apply(self, plan: _Plan, values: list) -> None:
        values = list(values)
        for n, obj in plan.binds.items():
            self._bound[n] = _ref(obj)
            self.matched.add(n)
        for n, names in plan.unused.items():
            self.unused.setdefault(n, []).extend(names)
        for opt_node, var, name, slot_node in plan.later_slots:
            self._opt_waits[opt_node].append((var, name, slot_node))
        # slots and groups: made now (their Variables and optimizer are matched), in the order the
        # checkpoint lists them (the order training made them: opt.variables() comes out the same)
        order = {s.slot: k for node in self.graph.nodes for k, s in enumerate(node.slots)}
        plan.slots.sort(key=lambda item: order.get(item[3], 0))
        batches: dict[int, tuple[Any, list]] = {}
        for opt, var, _, _ in plan.slots:
            vs = batches.setdefault(id(opt), (opt, []))[1]
            if all(v is not var for v in vs):
                vs.append(var)
        for opt, vs in batches.values():
            kind = _tr.trackable_kind(opt)
            if kind is not None and kind.make_slots is not None:
                kind.make_slots(opt, vs)
        for opt, var, name, slot_node in plan.slots:
            kind = _tr.trackable_kind(opt)
            slot = None if kind is None or kind.make_slot is None else kind.make_slot(opt, var, name)
            self._forget_opt_wait(var, name, slot_node)
            if slot is None or slot_node in self.matched:
                continue
            self._bound[slot_node] = _ref(slot)
            self.matched.add(slot_node)
            key = self._key(slot_node)
            if key is not None:
                values.append((slot_node, slot, key))
        for opt_node, group in plan.groups:
            opt = self.bound(opt_node)
            kind = _tr.trackable_kind(opt)
            if kind is None or kind.make_group is None:
                continue
            state = list(kind.make_group(opt, [self.bound(v) for v in group.variables]))
            if len(state) != len(group.state):
                self.unused.setdefault(opt_node, []).append(f"state of a group of {len(group.variables)} "
                                                            "Variables (a different optimizer structure)")
                continue
            grouped = [(s_node, s, self._key(s_node)) for s_node, s in zip(group.state, state)]
            for s_node, s, key in grouped:
                if key is None:
                    continue
                saved, (shape, _) = self.data.specs.get(key), _tr.value_spec(s)
                if saved is None or tuple(saved.shape) != tuple(shape):
                    self.unused.setdefault(s_node, []).append(_tr.VARIABLE_VALUE)
                    continue
                self._bound[s_node] = _ref(s)
                self.matched.add(s_node)
                values.append((s_node, s, key))
        self._assign(values)
        for anchor, wait in plan.waits:
            if wait.node not in self.matched:
                _register(anchor, wait)

    def _forget_opt_wait(self, var: Any, name: str, slot_node: int) -> None:
        for waits in self._opt_waits.values():
            for w in list(waits):
                if w[0] is var and w[2] == slot_node:
                    waits.remove(w)

    def _assign(self, values: list) -> None:
        if not values:
            return
        targets = []
        for _, obj, key in values:
            spec = self.data.specs[key]
            _, dtype = _tr.value_spec(obj)
            sharding = _target_sharding(obj) if np_dtype(spec.dtype) == dtype else None
            targets.append(ReadTarget(key, sharding))
        with jax.ensure_compile_time_eval():
            arrays = self.data.read(targets)
            for (_, obj, key), a in zip(values, arrays):
                _, dtype = _tr.value_spec(obj)
                if getattr(a, "dtype", dtype) != dtype:
                    a = np.asarray(a)
                    if a.dtype.kind in "iu" and np.dtype(dtype).kind in "iu" and not _tr.fits(a, dtype):
                        raise InvalidArgumentError(None, None, f"{key}: the value {a} does not fit the dtype "
                                                   f"{np.dtype(dtype).name} of {getattr(obj, 'name', obj)} "
                                                   "(enable JAX's x64 mode to restore int64 values)")
                    a = a.astype(dtype)
                _assign_value(obj, a)


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _int_narrowing(saved: np.dtype, want: np.dtype) -> bool:
    """int64 saved (TF's counters) into int32 (tapejax without x64): allowed when values fit."""
    return saved.kind in "iu" and want.kind in "iu" and want.itemsize < saved.itemsize


def _target_sharding(obj: Any) -> Any:
    """The sharding to read a value onto: a Variable's own when its value is committed to
    devices (a sharded or placed Variable); otherwise None (read to host, then assigned)."""
    if not isinstance(obj, Variable):
        return None
    val = obj._value
    if isinstance(val, jax.Array) and not isinstance(val, _Tracer) and getattr(val, "committed", False):
        return val.sharding
    return None


def _assign_value(obj: Any, value: Any) -> None:
    kind = _tr.value_kind(obj)
    assert kind is not None
    col = _state._local.collector
    if col is None or not isinstance(obj, Variable):
        kind.assign(obj, value)
        return
    # A tapejax.function's discovery pass is running (a layer built inside a compiled step):
    # it puts every Variable it saw back when it ends, so the restored value goes there too.
    orig = getattr(col, "orig", None)
    kind.assign(obj, value)
    if orig is not None and obj._id in orig:
        orig[obj._id] = (obj, obj._state())


__all__ = ["Restoration", "child_added", "sweep", "waiting"]
