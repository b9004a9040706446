"""What a checkpoint can hold: the trackable protocol.

A checkpoint saves an *object graph* (TF's word: the dependency graph of
trackable objects).  Every object in it is one of three kinds:

* a **value**: something that holds one array (a ``tapejax.Variable``).  It is
  saved under the attribute ``VARIABLE_VALUE`` of its node.
* a **trackable**: something with named children (a ``Module``, an optimizer,
  a ``Checkpoint``).  Children are listed in TF's order and under TF's names
  (a Module's attributes in assignment order; an optimizer's ``iter``, its
  hyperparameter Variables, ...), so checkpoint keys are the same as TF's for
  the same program (``model/dense_1/w/.ATTRIBUTES/VARIABLE_VALUE``).
  An optimizer also lists *slots* (per-Variable state, saved as TF's
  ``.OPTIMIZER_SLOT`` entries) and *groups* (state kept for a list of
  Variables at once, such as an optax state), and can make the state for a
  Variable on demand, which is how a restore creates slots that do not exist
  yet (as TF's Keras optimizers do).
* a **container**: a list, tuple or dict holding any of these (TF wraps
  those as ``ListWrapper`` / ``_DictWrapper``; its children are named
  ``"0"``, ``"1"`` ... or by the dict's keys).

Other kinds (Keras models, a user's own state holder) join through a small
protocol, either methods on the class or an adapter registered for it:

* trackables: ``_checkpoint_children() -> list of (name, child)``; optional
  ``_checkpoint_slots() -> list of SlotRef``, ``_checkpoint_groups() -> list
  of GroupRef``, ``_checkpoint_make_slot(variable, slot_name)`` and
  ``_checkpoint_make_group(variables)``; or ``register_trackable(cls, children=...)``.
* values: ``_checkpoint_read() -> array`` and ``_checkpoint_assign(array)``
  (with ``shape``, ``dtype`` and ``name`` attributes); or ``register_value(cls,
  read=..., assign=...)``.
* a trackable whose children can appear *after* a restore (a layer built on
  its first call) calls ``track(parent, name, child)`` when one appears: the
  restore waiting for that name is applied then (deferred restoration).
  ``tapejax.Module`` and ``Checkpoint`` do this in ``__setattr__``.

This module imports the object kinds it knows (Variable, Module, the
optimizers) and nothing of the checkpoint machinery but ``restore``'s hook.
"""
from __future__ import annotations

import contextvars
import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from ..core.ownership import slot_owner
from ..core.variable import Variable
from ..optimizers import Optimizer
from ..optimizers._ema import NewOptimizerState
from ..optimizers._optax import OptaxOptimizer
from ..optimizers.loss_scale import BaseLossScaleOptimizer
from .module import CHILD_HOOKS, Module

VARIABLE_VALUE = "VARIABLE_VALUE"


class SlotRef(NamedTuple):
    """One slot of an optimizer: ``slot`` is its state named ``name`` for ``variable`` (the
    Variable itself, or its ``value_id``)."""

    variable: Any
    name: str
    slot: Any


class GroupRef(NamedTuple):
    """State an optimizer keeps for several Variables at once (an optax state over a list of
    parameters): ``state`` (values) for ``variables`` (Variables or their ``value_id``)."""

    variables: tuple
    state: tuple


class TrackableKind(NamedTuple):
    """How to walk one class of trackable objects (``register_trackable``)."""

    children: Callable[[Any], list]
    slots: Optional[Callable[[Any], list]] = None
    groups: Optional[Callable[[Any], list]] = None
    make_slot: Optional[Callable[[Any, Any, str], Any]] = None
    make_group: Optional[Callable[[Any, Sequence[Any]], Sequence[Any]]] = None
    make_slots: Optional[Callable[[Any, Sequence[Any]], None]] = None   # all of several Variables' slots at once
    lookup: Optional[Callable[[Any, str], Any]] = None   # a child by a name ``children`` does not list


class ValueKind(NamedTuple):
    """How to read and assign one class of values (``register_value``)."""

    read: Callable[[Any], Any]
    assign: Callable[[Any, Any], None]


_TRACKABLES: dict[type, TrackableKind] = {}
_VALUES: dict[type, ValueKind] = {}


def register_trackable(cls: type, *, children: Callable[[Any], list], slots=None, groups=None,
                       make_slot=None, make_group=None, lookup=None) -> None:
    """Make instances of ``cls`` (and its subclasses) checkpointable as trackables.

    ``children(obj)`` returns ``[(name, child), ...]`` in the order TF would
    list them; ``lookup(obj, name)`` may find a child a checkpoint names that
    ``children`` does not list (another writer's names; None if none); the others
    are the optional optimizer parts described in the module docstring.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_trackable expects a class; got {cls!r}")
    if not callable(children):
        raise TypeError(f"register_trackable: `children` must be a callable obj -> [(name, child)]; "
                        f"got {children!r}")
    if lookup is not None and not callable(lookup):
        raise TypeError(f"register_trackable: `lookup` must be a callable (obj, name) -> child or None; "
                        f"got {lookup!r}")
    _TRACKABLES[cls] = TrackableKind(children, slots, groups, make_slot, make_group, lookup=lookup)


def register_value(cls: type, *, read: Callable[[Any], Any], assign: Callable[[Any, Any], None]) -> None:
    """Make instances of ``cls`` checkpointable as values: ``read(obj)`` gives the array to
    save, ``assign(obj, array)`` restores one (instances need ``shape`` and ``dtype``)."""
    if not isinstance(cls, type):
        raise TypeError(f"register_value expects a class; got {cls!r}")
    if not (callable(read) and callable(assign)):
        raise TypeError("register_value: `read` and `assign` must be callables")
    _VALUES[cls] = ValueKind(read, assign)


def _lookup(table: dict, obj: Any):
    for klass in type(obj).__mro__:
        kind = table.get(klass)
        if kind is not None:
            return kind
    return None


# -- values -------------------------------------------------------------------------------
def _var_assign(var: Variable, value: Any) -> None:
    var.assign(value)


_VALUES[Variable] = ValueKind(lambda v: v._value, _var_assign)


def value_kind(obj: Any) -> Optional[ValueKind]:
    """The ValueKind of ``obj``, or None when it is not a value."""
    if type(obj) is Variable:
        return _VALUES[Variable]
    kind = _lookup(_VALUES, obj)
    if kind is None and hasattr(type(obj), "_checkpoint_read") and hasattr(type(obj), "_checkpoint_assign"):
        kind = ValueKind(lambda o: o._checkpoint_read(), lambda o, x: o._checkpoint_assign(x))
    return kind


def is_value(obj: Any) -> bool:
    return value_kind(obj) is not None


def value_id(obj: Any) -> int:
    """The identity a slot refers to its Variable by (a Variable's ``_id``; ``id`` otherwise)."""
    return obj._id if isinstance(obj, Variable) else id(obj)


def value_name(obj: Any) -> str:
    """TF's ``full_name`` of a value: its name without the ``:0``."""
    name = getattr(obj, "name", None)
    return name.split(":")[0] if isinstance(name, str) else type(obj).__name__


def value_spec(obj: Any) -> tuple[tuple, np.dtype]:
    """(shape, dtype) of a value, without computing anything pending."""
    if isinstance(obj, Variable):
        meta = obj._meta
        return tuple(meta.shape), np.dtype(meta.dtype)
    dtype = getattr(obj, "dtype", None)
    dtype = getattr(dtype, "_np", None) or getattr(dtype, "as_numpy_dtype", None) or dtype
    return tuple(int(d) for d in obj.shape), np.dtype(dtype)


# -- trackables ---------------------------------------------------------------------------
def _module_children(m: Module) -> list:
    ignored = Module._TF_MODULE_IGNORED_PROPERTIES
    return [(k, v) for k, v in vars(m).items()
            if k not in ignored and k != "_name" and holds_trackable(v)]


def _short_name(var: Variable) -> str:
    return var.name.split(":")[0].rsplit("/", 1)[-1]


def _optimizer_children(opt: Optimizer) -> list:
    named = dict(opt._hyper)   # beta_1, decay, momentum ...: Variables, as tf_keras keeps them
    if opt._lr_var is not None and opt._lr_sched is None:
        named["learning_rate"] = opt._lr_var
    for extra in getattr(opt, "_extra", ()):   # Nadam's momentum_cache
        named[_short_name(extra)] = extra
    if isinstance(opt, OptaxOptimizer):
        named = {}
    return [("iter", opt.iterations)] + sorted(named.items())


def _new_optimizer_trained(opt: Any) -> list:
    """The Variables a new optimizer made state for, in build order."""
    out = []
    for slots in opt._slots.values():
        owner = next((slot_owner(s) for s in slots.values()), None)
        if owner is not None:
            out.append(owner)
    return out


def _new_optimizer_children(opt: Any) -> list:
    """tf_keras' new optimizers' layout (TF 2.11+, ``tf_keras/src/optimizers/optimizer.py``), so
    that keys are TF's (``optimizer/_iterations``, ``optimizer/_variables/1``): ``_variables``
    (the iteration count, then the state in build order), ``_iterations``, ``_learning_rate``,
    the moving averages, one list per kind of state in build order (``_momentums``,
    ``_velocities``: ``_TF_SLOT_LISTS``), Nadam's ``_u_product``.  The hyperparameters are not
    saved (tf_keras keeps them as Python floats).  A restore matches the lists by position, as
    tf_keras does (``graph.slots_from_lists`` drops the ``_variables`` index), waiting for an
    optimizer not built yet (``_ema.BUILD_HOOKS``); ``_legacy_lookup`` still finds a legacy
    layout's ``iter`` and hyperparameters (tapejax wrote those before)."""
    lr = opt._lr_var if opt._lr_sched is None else None
    extra = list(getattr(opt, "_extra", ()))
    state = [w for w in opt._weights if w is not opt.iterations and not any(w is e for e in extra)]
    out = [("_variables", [opt.iterations] + state), ("_iterations", opt.iterations)]
    if lr is not None:
        out.append(("_learning_rate", lr))
    trained = _new_optimizer_trained(opt)
    for list_name, slot_name in _state_lists(opt):
        out.append((list_name, [opt._slots[v._id][slot_name] for v in trained
                                if slot_name in opt._slots[v._id]]))
    if TF_LAYOUT.get():   # (a TF-format checkpoint: the lists TF builds that this optimizer does not keep)
        for list_name in getattr(type(opt), "_TF_ALWAYS_LISTS", ()):
            if not any(n == list_name for n, _ in out):
                out.append((list_name, list(UnreadState(opt))))
    out += [("_" + _short_name(e), e) for e in extra]   # Nadam's _u_product
    return out


def _state_lists(opt: Any) -> list:
    """``[(tf_keras' list name, slot name)]`` of the state ``opt`` keeps (the first list name of a
    slot: tf_keras' own; later ones are Keras 3's, read only)."""
    names, seen, out = opt._slot_names(), set(), []
    for list_name, slot_name in [("_model_variables_moving_average", "average"), *type(opt)._TF_SLOT_LISTS.items()]:
        if slot_name in names and slot_name not in seen:
            seen.add(slot_name)
            out.append((list_name, slot_name))
    return out


def _legacy_lookup(opt: Optimizer, name: str) -> Any:
    for n, child in _optimizer_children(opt):
        if n == name:
            return child
    return None


def _new_optimizer_lookup(opt: Any, name: str) -> Any:
    """A name a new optimizer's children do not list: a legacy layout's (``_legacy_lookup``), or
    a state list tf_keras keeps for this class that this configuration never reads (plain
    ``SGD``'s ``momentums``, each the last ``-lr * g``): ``UnreadState``, which takes the saved
    values and drops them, so that ``assert_consumed`` passes as TF's does."""
    slot = type(opt)._TF_SLOT_LISTS.get(name)
    if slot is not None and slot not in opt._slot_names():
        return UnreadState(opt)
    return _legacy_lookup(opt, name)


class UnreadState(tuple):
    """The entries of a state list an optimizer does not keep (``_new_optimizer_lookup``): entry
    ``i`` takes the state of the ``i``-th Variable the optimizer was built for.  A container
    (a tuple, empty before the build), so that a restore waits inside the optimizer for its
    entries, as for the lists it keeps."""

    def __new__(cls, opt: Any) -> "UnreadState":
        return super().__new__(cls, [UnreadValue(v) for v in opt.__dict__.get("_built_variables") or ()])


#: Set while a checkpoint in TF's format is laid out (``Checkpoint.write(..., format="tf")``):
#: new optimizers then also list the state TF builds and they do not keep, as zeros.
TF_LAYOUT: "contextvars.ContextVar[bool]" = contextvars.ContextVar("tapejax_tf_layout", default=False)


class UnreadValue:
    """A saved value read and dropped: it has its Variable's shape and dtype (a mismatch still
    raises before anything is restored); written (``TF_LAYOUT``) as zeros."""

    def __init__(self, var: Any):
        self.shape, self.dtype = tuple(var.shape), np.dtype(var.dtype.as_numpy_dtype)

    def _checkpoint_read(self) -> Any:
        return np.zeros(self.shape, self.dtype)

    def _checkpoint_assign(self, value: Any) -> None:
        pass


def _new_optimizer_make_slot(opt: Any, var: Any, slot_name: str) -> Any:
    """A slot named by a Keras 3 checkpoint's list (``_momentums``, ``graph.slots_from_lists``) or
    by tapejax's name (``m``: a legacy layout's ``.OPTIMIZER_SLOT``)."""
    if slot_name == "_model_variables_moving_average":
        slot_name = "average"
    return _optimizer_make_slot(opt, var, type(opt)._TF_SLOT_LISTS.get(slot_name, slot_name))


def _optimizer_slots(opt: Optimizer) -> list:
    out = []
    for name in opt._slot_names():   # TF's order: slot name by slot name, then the Variables
        for vid, slots in opt._slots.items():
            if name in slots:
                out.append(SlotRef(vid, name, slots[name]))
    return out


def _optimizer_make_slot(opt: Optimizer, var: Any, slot_name: str) -> Any:
    if not isinstance(var, Variable) or slot_name not in opt._slot_names():
        return None
    opt._create_slots([var])
    return opt._slots[var._id].get(slot_name)


def _optimizer_make_slots(opt: Optimizer, variables: Sequence[Any]) -> None:
    opt._create_slots([v for v in variables if isinstance(v, Variable)])   # (in the order training made them)


def _optax_groups(opt: OptaxOptimizer) -> list:
    return [GroupRef(tuple(key), tuple(svars)) for key, (svars, _) in opt._groups.items()]


def _optax_make_group(opt: OptaxOptimizer, variables: Sequence[Any]) -> Sequence[Any]:
    return opt._state_for(list(variables))[0]


def _loss_scale_children(opt: BaseLossScaleOptimizer) -> list:
    """A LossScaleOptimizer is its inner optimizer to a checkpoint (TF's ``DelegatingTrackableMixin``),
    plus the dynamic scale's ``loss_scale`` node (``current_loss_scale``, ``good_steps``)."""
    out = _inner_kind(opt).children(opt.inner_optimizer)
    return out + [("loss_scale", opt._loss_scale)] if opt.dynamic else out


_TRACKABLES[Module] = TrackableKind(_module_children)
_TRACKABLES[Optimizer] = TrackableKind(_optimizer_children, _optimizer_slots, None, _optimizer_make_slot,
                                       None, _optimizer_make_slots)
_TRACKABLES[NewOptimizerState] = TrackableKind(_new_optimizer_children, None, None, _new_optimizer_make_slot,
                                               None, _optimizer_make_slots, _new_optimizer_lookup)


def _inner_kind(opt: BaseLossScaleOptimizer) -> TrackableKind:
    return _TRACKABLES[NewOptimizerState if isinstance(opt.inner_optimizer, NewOptimizerState) else Optimizer]


def _inner_slots(opt: BaseLossScaleOptimizer) -> list:
    slots_of = _inner_kind(opt).slots
    return [] if slots_of is None else slots_of(opt.inner_optimizer)


def _inner_lookup(opt: BaseLossScaleOptimizer, name: str) -> Any:
    find = _inner_kind(opt).lookup
    return None if find is None else find(opt.inner_optimizer, name)


_TRACKABLES[BaseLossScaleOptimizer] = TrackableKind(
    _loss_scale_children, _inner_slots, None,
    lambda o, v, n: _inner_kind(o).make_slot(o.inner_optimizer, v, n), None,   # pyright: ignore[reportOptionalCall]
    lambda o, vs: _optimizer_make_slots(o.inner_optimizer, vs), _inner_lookup)
_TRACKABLES[OptaxOptimizer] = TrackableKind(_optimizer_children, None, _optax_groups, None, _optax_make_group)


def trackable_kind(obj: Any) -> Optional[TrackableKind]:
    """The TrackableKind of ``obj``, or None when it is not a trackable."""
    kind = _lookup(_TRACKABLES, obj)
    if kind is None and hasattr(type(obj), "_checkpoint_children"):
        t = type(obj)
        kind = TrackableKind(
            lambda o: list(o._checkpoint_children()),
            (lambda o: list(o._checkpoint_slots())) if hasattr(t, "_checkpoint_slots") else None,
            (lambda o: list(o._checkpoint_groups())) if hasattr(t, "_checkpoint_groups") else None,
            (lambda o, v, n: o._checkpoint_make_slot(v, n)) if hasattr(t, "_checkpoint_make_slot") else None,
            (lambda o, vs: o._checkpoint_make_group(vs)) if hasattr(t, "_checkpoint_make_group") else None)
    return kind


def is_container(obj: Any) -> bool:
    return isinstance(obj, (list, tuple, dict))


def is_trackable(obj: Any) -> bool:
    return is_value(obj) or trackable_kind(obj) is not None


def holds_trackable(obj: Any, _seen: Optional[set] = None) -> bool:
    """A trackable, or a container holding one at any depth."""
    if is_container(obj):
        seen = _seen if _seen is not None else set()
        if id(obj) in seen:
            return False
        seen.add(id(obj))
        items = obj.values() if isinstance(obj, dict) else obj
        return any(holds_trackable(x, seen) for x in items)
    return is_trackable(obj)


def children(obj: Any) -> list:
    """``[(name, child)]`` of a trackable or container, in TF's order (empty for a value)."""
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items() if holds_trackable(v)]
    fields = getattr(obj, "_fields", None) if isinstance(obj, tuple) else None
    if fields is not None:   # a namedtuple: by field name (TF)
        return [(f, v) for f, v in zip(fields, obj) if holds_trackable(v)]
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj) if holds_trackable(v)]
    kind = trackable_kind(obj)
    return [] if kind is None else kind.children(obj)


def lookup(obj: Any, name: str) -> Any:
    """The child ``name`` of ``obj`` now (a container too, even an empty one, so that a
    restore can wait inside it), or None.  A kind may answer itself (``_checkpoint_lookup``)."""
    own = getattr(type(obj), "_checkpoint_lookup", None)
    if own is not None:
        return own(obj, name)
    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k) == name:
                return v
        return None
    fields = getattr(obj, "_fields", None) if isinstance(obj, tuple) else None
    if fields is not None:
        return getattr(obj, name, None) if name in fields else None
    if isinstance(obj, (list, tuple)):
        if name.isdigit() and int(name) < len(obj):
            return obj[int(name)]
        return None
    if isinstance(obj, Module):
        value = vars(obj).get(name)
        return value if value is not None and (is_container(value) or is_trackable(value)) else None
    for n, child in children(obj):
        if n == name:
            return child
    kind = trackable_kind(obj)
    return None if kind is None or kind.lookup is None else kind.lookup(obj, name)


def slots(obj: Any) -> list:
    kind = trackable_kind(obj)
    return [] if kind is None or kind.slots is None else kind.slots(obj)


def groups(obj: Any) -> list:
    kind = trackable_kind(obj)
    return [] if kind is None or kind.groups is None else kind.groups(obj)


def track(parent: Any, name: str, child: Any) -> None:
    """Report that ``parent`` now has ``child`` under ``name``: a restore waiting for it is
    applied now (TF's deferred restoration).  ``Module`` and ``Checkpoint`` call this from
    ``__setattr__``; other trackable kinds call it when a child appears."""
    for hook in tuple(CHILD_HOOKS):
        hook(parent, name, child)


def fits(value: np.ndarray, dtype: np.dtype) -> bool:
    """Whether integer ``value`` survives a cast to ``dtype`` (int64 in a TF checkpoint into an
    int32 Variable of tapejax without x64)."""
    info = np.iinfo(dtype)
    return value.size == 0 or (int(value.min()) >= info.min and int(value.max()) <= info.max)


def numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


__all__ = ["VARIABLE_VALUE", "SlotRef", "GroupRef", "TrackableKind", "ValueKind", "register_trackable",
           "register_value", "track", "children", "lookup", "slots", "groups", "is_value", "is_trackable",
           "is_container", "holds_trackable", "value_kind", "trackable_kind", "value_id", "value_name",
           "value_spec"]
