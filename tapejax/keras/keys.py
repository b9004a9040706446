"""What identifies a Keras call op: its target, its key, the arguments split into arrays and Python
values.

``CallKey`` is the static parameter of the ``KerasCall`` ops (``calls``): the
target (a layer, model, metric or function, as a ``Target``), the arguments'
structure and Python values, the variables it reads (by id), the activation functions and
dropout rates its layers hold (``swappable``) and Keras's autocast state; ``split`` turns a
call's ``(args, kwargs)`` into the array operands and that static part (``_join`` / ``merge``
put them back).
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.core
import numpy as np
from keras.src import backend as _kbackend
from keras.src.backend.common.keras_tensor import KerasTensor

from ..core import state as _state
from ..core.tensor import Tensor
from ..core.variable import Variable
from .rnn_states import rnn_state_variables

__all__ = ["Args", "CallInfo", "CallKey", "State", "Target", "WithGenerator", "draws", "has_tensor", "join",
           "keep_alive", "layer_state", "mark_drawing", "merge", "split", "swappable", "swapped", "target_of"]

_Tracer = jax.core.Tracer
_DYNAMIC = (Tensor, Variable, jax.Array, np.ndarray, np.generic)


class Target:
    """A layer or function in an op key, compared by identity.

    A function, loss or regularizer is held strongly (often a temporary:
    ``tf.keras.losses.MeanSquaredError()(y, p)``, small).  A layer or model is
    held weakly, so that compiled caches never keep a model's weights alive;
    each recording tape keeps the layers it recorded alive instead
    (``_keep_alive``) until the tape goes, so a layer made on the fly
    (``tf.keras.layers.Flatten()(x)``) is still there when ``tape.gradient``
    replays it."""

    __slots__ = ("_ref", "_strong", "label", "__weakref__")

    def __init__(self, obj: Any, weak: bool) -> None:
        self._ref = weakref.ref(obj) if weak else None
        self._strong = None if weak else obj
        self.label = getattr(obj, "name", None) or getattr(obj, "__qualname__", type(obj).__name__)

    def get(self) -> Any:
        obj = self._strong if self._ref is None else self._ref()
        if obj is None:
            raise RuntimeError(f"The Keras layer '{self.label}' was deleted while a compiled step or a "
                               "pending value still refers to its recorded call; keep it alive until "
                               "the gradient or value is computed.")
        return obj

    def __repr__(self):
        return f"<{self.label}>"


_TARGETS: "weakref.WeakValueDictionary[int, Target]" = weakref.WeakValueDictionary()
_TARGET_LOCK = threading.Lock()


def target_of(obj: Any, weak: bool = False) -> Target:
    """The one ``Target`` of ``obj`` (stored on it, or by id for objects without attributes)."""
    tok = getattr(obj, "__dict__", {}).get("_tapejax_target")
    if tok is not None:
        return tok
    with _TARGET_LOCK:
        tok = _TARGETS.get(id(obj))
        if tok is not None and tok._ref is None and tok._strong is obj:
            return tok
        tok = Target(obj, weak)
        try:
            object.__setattr__(obj, "_tapejax_target", tok)
        except (AttributeError, TypeError):   # a function without __dict__, a builtin: by id
            _TARGETS[id(obj)] = tok
    return tok


#: recording tape -> {id: Keras object} for the layers it recorded calls of (see ``Target``).
_KEPT: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def keep_alive(obj: Any) -> None:
    for tape in _state._local.tapes:
        kept = _KEPT.get(tape)
        if kept is None:
            kept = _KEPT[tape] = {}
        kept[id(obj)] = obj


class CallKey(NamedTuple):
    """The static parameter of a Keras call op: everything its trace depends on."""

    caller: Callable[..., Any]   # caller(target, args, kwargs): the call itself
    target: Target
    in_tree: Any                 # jax PyTreeDef of (args, kwargs) with array leaves taken out
    static: tuple                # ((leaf position, Python value), ...)
    state: Optional[Callable[[Any], "State"]]   # the variables the call reads (None: a pure function)
    var_ids: tuple               # their ids (trainable first)
    autocast: Optional[str]      # Keras's autocast dtype at the call (it changes the trace)
    # One op of a call (``Group``): what it takes and gives of the whole call (None: all of it)
    mapped: Optional[tuple] = None   # positions (in var_ids) of the variables it maps
    stand_ins: Optional[tuple] = None   # per array argument: None (taken) or (shape, dtype) of zeros
    outputs: Optional[tuple] = None  # positions (in the call's flat results) it returns
    cut: Optional[tuple] = None      # positions (in the call's flat results) of outputs it takes as
    #                                  operands after the others: what it computes from them
    attrs: tuple = ()                # ``swappable``: the layers' activation functions at the call


class State(NamedTuple):
    """The Keras variables a stateful call maps in its ``StatelessScope``."""

    trainable: list              # differentiable inputs (read, watched when trainable)
    other: list                  # non-trainable state the call may update (written back after it)


def layer_state(layer) -> State:
    """A layer's variables, and the state Variables of the stateful RNNs in it: Keras 3 makes
    those untracked (``RNN._create_state_variables``), so they are in no variable list, yet the
    call reads and ``assign``s them (the state carried to the next batch, as TF's)."""
    other = list(layer.non_trainable_variables)
    other += [v for v in rnn_state_variables(layer) if all(v is not o for o in other)]
    return State(layer.trainable_variables, other)


class WithGenerator(NamedTuple):
    """A call's state (``inner``) and, last of ``other``, the Variable holding tapejax's global
    random key: the state of a call whose layers draw with ``seed=None`` (keras.io's
    ``StochasticDepth``: ``tf.random.uniform`` in a custom layer's ``call``).  The call's op takes
    the key as an operand and gives the advanced key as an update, as BatchNormalization's
    statistics, so its draws are the same in a gradient's replay and new at the next call."""

    inner: Callable[[Any], State]

    def __call__(self, obj) -> State:
        from ..ops.random import get_global_generator
        st = self.inner(obj)
        return State(st.trainable, list(st.other) + [get_global_generator()._variable()])


#: id -> Keras object whose call drew from the global random stream (planned ``WithGenerator``)
_DRAWING: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


def draws(obj) -> bool:
    return _DRAWING.get(id(obj)) is obj


def mark_drawing(obj) -> None:
    _DRAWING[id(obj)] = obj


#: Layer attributes a call reads as Python values and programs replace on a built model: guided
#: backprop's ``layer.activation = guided_relu``, a saliency tool's linear last layer, MC dropout's
#: ``layer.rate = 0.1`` at prediction.
_SWAPPABLE = ("activation", "recurrent_activation", "rate")


def swappable(layers: list) -> tuple:
    """``((position in layers, attribute, value), ...)`` of the ``_SWAPPABLE`` attributes of a
    layer tree, part of a call's key: TF's eager call reads them at each call, so a call after
    ``layer.activation = f`` (or after ``layer.rate.assign(0.0)`` of a rate held in a Variable) is
    another call (a plan, a compiled op of its own)."""
    out = []
    for i, lay in enumerate(layers):
        held = getattr(lay, "__dict__", {})
        for name in _SWAPPABLE:
            if name in held:
                value = _python_value(held[name])
                if value is not _UNKEYED:
                    out.append((i, name, value))
    return tuple(out)


_UNKEYED = object()


def _python_value(value: Any) -> Any:
    """``value`` as the call's key holds it: itself when hashable; a scalar held in a Variable or
    Tensor (``Dropout(tf.Variable(0.5))``) as its present Python number, which the trace then
    sees (TF's eager call reads the Variable at each call: an ``assign`` is another call);
    ``_UNKEYED`` for anything else (left as it is)."""
    if isinstance(value, (Variable, Tensor)) or isinstance(value, _kbackend.Variable):
        if tuple(value.shape) != ():
            return _UNKEYED
        # (a compiled call would keep this value for every later call, where TF's reads it each time)
        if _state._local.collector is None:
            try:
                return np.asarray(value).item()
            except jax.errors.JAXTypeError:   # (a tracer: Keras's own compiled loop)
                pass
        raise NotImplementedError(
            f"A Keras layer's attribute held in a {type(value).__name__} (such as Dropout(tf.Variable(0.5)).rate) is "
            "read as a Python number when the layer is called, so a compiled step (tapejax.function, Keras's fit) "
            "cannot call the layer: set the attribute to a Python number, or call the layer eagerly")
    try:
        hash(value)
    except TypeError:
        return _UNKEYED
    return value


@contextlib.contextmanager
def swapped(layers: list, attrs: tuple):
    """The layers' attributes as ``attrs`` recorded them, while a call's trace runs: a gradient
    replaying a call recorded before the program swapped an activation (or a pending value
    computed after it) computes what TF's tape recorded, not the layer's present call."""
    changed = [(layers[i], name, layers[i].__dict__[name], v) for i, name, v in attrs
               if layers[i].__dict__.get(name) is not v]
    for lay, name, _, v in changed:
        lay.__dict__[name] = v
    try:
        yield
    finally:
        for lay, name, now, _ in changed:
            lay.__dict__[name] = now


class CallInfo(NamedTuple):
    """What one key's trace produces."""

    out_tree: Any                # PyTreeDef of the call's outputs
    n_out: int
    updated: tuple               # positions (in the variables, trainable then not) the call updates
    loss_owners: tuple           # per collected loss: position of the owning layer (layer_tree)
    masked: tuple = ()           # positions (in the flat outputs) that carry a Keras mask (results last)


def join(dyn, key):
    tree, static = key.in_tree, key.static
    n = len(dyn) + len(static)
    leaves = [None] * n
    pos = dict(static)
    it = iter(dyn)
    for i in range(n):
        leaves[i] = pos[i] if i in pos else next(it)
    return jax.tree_util.tree_unflatten(tree, leaves)


def merge(dyn, static):
    n = len(dyn) + len(static)
    out = [None] * n
    pos = dict(static)
    it = iter(dyn)
    for i in range(n):
        out[i] = pos[i] if i in pos else next(it)
    return out


def _is_leaf(x):
    return isinstance(x, (Tensor, Variable, KerasTensor))


class Args(NamedTuple):
    dyn: list
    tree: Any
    static: tuple
    symbolic: bool     # a KerasTensor or a raw JAX tracer: Keras's own path


def split(args, kwargs, convert: Optional[Callable[[Any], Any]] = None) -> Args:
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_leaf)
    dyn = []
    static = []
    symbolic = False
    for i, x in enumerate(leaves):
        if isinstance(x, _DYNAMIC):
            if isinstance(x, (KerasTensor, _Tracer)):
                symbolic = True
            elif convert is not None and isinstance(x, (np.ndarray, np.generic)):
                x = convert(x)
            dyn.append(x)
        elif isinstance(x, KerasTensor):
            symbolic = True
            dyn.append(x)
        else:
            static.append((i, x))
    return Args(dyn, tree, tuple(static), symbolic)


def autocast() -> Optional[str]:
    scope = _kbackend.get_autocast_scope()
    return None if scope is None else scope.dtype


def has_tensor(args, kwargs) -> bool:
    """Does any argument hold a tapejax Tensor or Variable (a list or dict one level down too)?"""
    for x in args:
        if isinstance(x, (Tensor, Variable)):
            return True
        if isinstance(x, (list, tuple)) and any(isinstance(e, (Tensor, Variable)) for e in x):
            return True
    for x in kwargs.values():
        if isinstance(x, (Tensor, Variable)):
            return True
    return False
