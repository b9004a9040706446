"""Keras variables that are tapejax Variables: what tapes watch and ``tapejax.function`` threads.

Keras 3's JAX backend keeps a variable's value in ``JaxVariable._value`` and
has no tape: its own training loop threads ``trainable_variables`` through
``stateless_call`` by hand.  ``KerasVariable`` is both classes at once
(``class KerasVariable(keras.Variable, tapejax.Variable)``):

* for Keras it is a ``JaxVariable``: ``value`` (a property), ``assign``,
  ``path``, ``dtype`` strings, ``StatelessScope`` mappings, serialization all
  behave as Keras defines them (Keras's methods come first in the MRO);
* for tapejax it is a ``Variable``: ``_value`` is tapejax's property over the
  ``_val`` slot (so Keras's own ``self._value = x`` stores there), reads
  (``_read``) are recorded by every recording tape and auto-watched when
  trainable, ``tape.gradient(loss, model.trainable_variables)`` finds them by
  id, ``tapejax.function`` discovers, threads and donates them (ownership,
  pending updates and speculation are tapejax's own), and tapejax's optimizers
  and ``Checkpoint`` take them as they are.

``JaxVariable.__new__`` is redirected (``install``) so that every variable
Keras creates with ``backend.Variable(...)`` or ``keras.Variable(...)`` (the
class Keras exports, a ``JaxVariable`` subclass) is a ``KerasVariable``, a
subclass of it, so Keras's own ``isinstance`` checks hold.

Which side wins where they overlap, and why:

* inside a Keras ``StatelessScope`` (a layer call's op, Keras's own ``fit``),
  everything is Keras's: ``value``/``_read`` return the scope's value, ``assign``
  records a scope update, arithmetic is Keras's (no tape sees those tracers);
* outside it, arithmetic (``kernel ** 2``), ``assign_add``/``assign_sub`` and
  ``tf.*`` ops on the variable are tapejax's: recorded by tapes as TF records
  Keras-2 variables (a regularization term written by hand is differentiated),
  and ``v.assign_sub(lr * g)`` stays pending as any tapejax update;
* ``value`` stays Keras's property (Keras reads it everywhere), but tells a
  tracing ``tapejax.function`` that the variable is read (the collector then reads
  the storage, even inside a Keras scope); a variable not initialized yet (made
  inside a Keras scope: a sublayer built by its model's symbolic call) gives
  Keras's placeholder and is no state of the function; made while a function
  traces, it is one of the function's created Variables when Keras initializes it
  (``_deferred_initialize``), so a model first built inside a compiled step reads
  its new weights (and a restore waiting for them applies) as one built eagerly;
* ``assign`` casts to the variable's dtype as Keras does, then assigns through
  tapejax (so a compiled step writes it back) and returns the variable.
"""
from __future__ import annotations

import copy
import threading
from typing import Any

import jax
import jax.core
import numpy as np
from keras.src.backend import Variable as _BackendVariable
from keras.src.backend.common import global_state as _global_state
from keras.src.backend.common.variables import Variable as _KerasBase
from keras.src.backend.jax.core import JaxVariable
from keras.src.utils.naming import auto_name

from ..core import state as _state
from ..core.ownership import SLOT_GUARDS
from ..core.tensor import Lazy, Pending, Tensor, array_of
from ..core.variable import Variable

__all__ = ["AdoptedVariable", "KerasVariable", "as_keras_variable", "check_variable", "in_keras_scope", "install"]

_STORAGE: Any = Variable.__dict__["_value"]   # tapejax's value property (over the ``_val`` slot)
#: ``var``: the variable a tracing ``tapejax.function``'s collector is being told about (from
#: ``KerasVariable.value``): its ``_value`` is the storage, even inside a Keras scope, where
#: reading it would otherwise tell the collector again (a RecursionError)
_TOUCHING = threading.local()
_META: Any = Variable.__dict__["_meta"]


def in_keras_scope() -> bool:
    """True inside a Keras ``StatelessScope`` or ``SymbolicScope`` (a stateless call, ``fit``'s
    traced step, functional-model construction): Keras code runs as Keras defines it there."""
    scopes = _global_state.GLOBAL_STATE_TRACKER   # (Keras's thread-local scopes: ``clear_session`` makes a new one)
    return (getattr(scopes, "stateless_scope", None) is not None
            or getattr(scopes, "symbolic_scope", None) is not None)


def sweep_restore() -> None:
    """Sweep a waiting checkpoint restore's waits now, unless inside a Keras scope or a
    ``tapejax.function``'s trace (``hooks._sweep_after_layer_build``, ``calls.call_stateful``)."""
    from ..train import restore
    if restore.waiting() and not in_keras_scope() and _state._local.collector is None:
        restore.sweep()


def _keras_op(name):
    """An operator that is Keras's inside a Keras scope and tapejax's (recorded) outside."""
    keras_fn = getattr(_KerasBase, name)

    def op(self, *args):
        if in_keras_scope():
            return keras_fn(self, *args)
        return getattr(Variable, name)(self, *args)   # (installed on Variable by tapejax.ops)

    op.__name__ = name
    op.__qualname__ = f"KerasVariable.{name}"
    return op


class KerasVariable(_BackendVariable, Variable):
    """A Keras 3 variable (JAX backend) that is also a ``tapejax.Variable``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # tapejax's slots first: Keras's __init__ stores the value through ``_value``
        self._val = None   # pyright: ignore[reportAttributeAccessIssue]  (None until initialized)
        self._own = None
        self._lent = None
        self._id = _state.next_id()
        self._sharding = None
        self._constraint = None
        if len(args) < 8 and kwargs.get("name") is None:   # Keras names it after the class: "variable"
            kwargs["name"] = auto_name("Variable")
        col = _state._local.collector
        if col is None:
            _BackendVariable.__init__(self, *args, **kwargs)
            return
        # created while a tapejax.function traces (a Keras optimizer's slots on the first step):
        # the initial value is computed now, concretely, as tapejax's own optimizers do
        with jax.ensure_compile_time_eval():
            _BackendVariable.__init__(self, *args, **kwargs)
        if self._val is not None:
            col.created(self)

    def _deferred_initialize(self):
        """Keras initializes a variable created inside a ``StatelessScope`` when the scope ends;
        that may be inside a trace (a layer built by its first call, which tapejax traces to
        plan its ops): the initial value is computed concretely, as at creation."""
        with jax.ensure_compile_time_eval():
            super()._deferred_initialize()
        col = _state._local.collector
        if col is not None and self._val is not None:   # made while a tapejax.function traces: as in
            col.created(self)   # ``__init__``, the function gives it its value and announces it

    # -- trainable: Keras's view and the tape's ---------------------------------------
    @property
    def trainable(self):   # pyright: ignore[reportIncompatibleVariableOverride]  (Keras's property)
        """Keras's view: False once its layer is frozen (``layer.trainable = False``), which lists
        it among the ``non_trainable_variables``.  Tapes watch by ``_trainable``, the value the
        variable was created with, as TF's tape watches by ``tf.Variable.trainable``, which
        freezing a tf_keras layer (or a TF-backed Keras 3 one) leaves as it was: a gradient asked
        for a frozen kernel explicitly has a value, as in TF, not None."""
        return self.__dict__.get("_keras_trainable", self._trainable)

    @trainable.setter
    def trainable(self, value):
        self.__dict__["_keras_trainable"] = bool(value)

    # -- reads ---------------------------------------------------------------------
    @property
    def value(self):   # pyright: ignore[reportIncompatibleMethodOverride]  (Keras's property)
        """Keras's value: the ``StatelessScope``'s inside one, a placeholder for a variable not
        initialized yet (a symbolic build), autocast applied."""
        scope = getattr(_global_state.GLOBAL_STATE_TRACKER, "stateless_scope", None)
        if scope is not None:
            v = scope.state_mapping.get(id(self))
            if v is not None:
                return self._maybe_autocast(v)
        init = getattr(self, "_initializer")
        if self._val is None and init is not None:   # not initialized yet (created in a Keras scope):
            return self._maybe_autocast(init(self._shape, dtype=self._dtype))   # Keras's placeholder
        col = _state._local.collector
        if col is not None and getattr(_TOUCHING, "var", None) is not self:
            # a tapejax.function traces: the variable is part of its state.  The collector reads
            # ``_value``, which inside a Keras scope is this property: it reads the storage then
            prev, _TOUCHING.var = getattr(_TOUCHING, "var", None), self
            try:
                col.touch(self, False)
            finally:
                _TOUCHING.var = prev
        self._own = None   # the buffer is handed out
        self._lent = None
        return self._maybe_autocast(_STORAGE.fget(self))   # (a pending update is computed)

    @property
    def _value(self):   # pyright: ignore[reportIncompatibleVariableOverride]
        """tapejax's storage; inside a Keras scope the value Keras gives there (so tapejax ops in a
        layer's ``call`` see the scope's tracers)."""
        if in_keras_scope() and getattr(_TOUCHING, "var", None) is not self:
            return self.value
        return _STORAGE.fget(self)

    @_value.setter
    def _value(self, value):
        _STORAGE.fset(self, value)

    @property
    def _peekable(self):   # pyright: ignore[reportIncompatibleVariableOverride]
        """Outside a Keras scope the read is tapejax's (an executor may compute an op from the
        storage before recording it); inside one, the scope's value: read first."""
        return not in_keras_scope()

    def _read(self):
        if in_keras_scope():   # inside a Keras stateless call or a symbolic build: Keras's value
            return Tensor(self.value)   # (the scope's, or a placeholder), which no tape records
        return Variable._read(self)

    @property
    def _meta(self):   # pyright: ignore[reportIncompatibleVariableOverride]
        if in_keras_scope():   # the shape and dtype of the value Keras gives there
            return jax.typeof(self.value)
        return _META.fget(self)

    def _read_deferred(self, tapes):
        if in_keras_scope():
            return Tensor(self.value)
        return Variable._read_deferred(self, tapes)

    def __jax_array__(self):
        return self.value

    def numpy(self):
        """A host copy of the value (the device buffer stays this variable's own)."""
        return np.array(self._maybe_autocast(self._value))

    def __array__(self, dtype=None, copy=None):
        # a writable copy, as a TF Variable's (``Variable.__array__``)
        return array_of(self._maybe_autocast(self._value), dtype, True)

    # -- writes --------------------------------------------------------------------
    def _storage_dtype(self):
        v = self._val
        return np.dtype(v.aval.dtype if isinstance(v, Lazy) else v.dtype)

    def _keras_cast(self, value):
        """``value`` as an array of this variable's dtype (Keras casts what it assigns).  A
        Variable is read as a read (``_read``): a tracing ``tapejax.function`` then takes it as an
        input (not its value at trace time as a constant) and its buffer is no longer its own
        alone (this variable shares it: it must not be donated by the other's update)."""
        if isinstance(value, Variable):
            value = value._read()._value
        elif isinstance(value, Tensor):
            value = value._value
        return self._convert_to_tensor(value, dtype=self._storage_dtype())

    def assign(self, value, use_locking=None, name=None, read_value=True):   # pyright: ignore[reportIncompatibleMethodOverride]
        """Keras's ``assign`` (a scope update inside a ``StatelessScope``); outside one, the value is
        cast to the variable's dtype (as Keras does) and assigned as tapejax assigns."""
        if getattr(_global_state.GLOBAL_STATE_TRACKER, "stateless_scope", None) is not None:
            return _KerasBase.assign(self, value)
        if self._val is None:   # purged by Keras's fit (``_purge_model_variables``): put back
            _KerasBase.assign(self, value)
            return self if read_value else None
        new = self._keras_cast(value)
        if tuple(new.shape) != tuple(self._shape):
            raise ValueError(
                "The shape of the target variable and the shape of the target value in "
                f"`variable.assign(value)` must match. variable.shape={self._shape}, Received: "
                f"value.shape={tuple(new.shape)}. Target variable: {self.path}")
        if self._layout is not None:
            from keras.src.backend.jax import distribution_lib
            new = distribution_lib.distribute_tensor(new, self._layout)
        Variable.assign(self, new)
        return self if read_value else None

    def _update(self, delta, keras_update, tj_update):
        if getattr(_global_state.GLOBAL_STATE_TRACKER, "stateless_scope", None) is not None:
            return keras_update(self, delta)   # ``self.assign(self + delta)``: a scope update
        if not ((type(delta) is Tensor or type(delta) is Pending)
                and np.dtype(delta._meta.dtype) == self._storage_dtype()
                and tuple(delta._meta.shape) == tuple(self._shape)):
            delta = self._keras_cast(delta)   # Keras's cast (a Python number, another dtype)
            if tuple(delta.shape) != tuple(self._shape):   # and broadcast (``self + delta``)
                try:
                    delta = jax.numpy.broadcast_to(delta, self._shape)
                except ValueError:
                    raise ValueError(
                        "The shape of the target variable and the shape of the target value in "
                        f"`variable.assign(value)` must match. variable.shape={self._shape}, Received: "
                        f"value.shape={tuple(delta.shape)}. Target variable: {self.path}") from None
        tj_update(self, delta)   # tapejax's update: a pending delta keeps it pending
        return self

    def assign_add(self, value, use_locking=None, name=None, read_value=True):   # pyright: ignore[reportIncompatibleMethodOverride]
        out = self._update(value, _KerasBase.assign_add, Variable.assign_add)
        return out if read_value else None

    def assign_sub(self, value, use_locking=None, name=None, read_value=True):   # pyright: ignore[reportIncompatibleMethodOverride]
        out = self._update(value, _KerasBase.assign_sub, Variable.assign_sub)
        return out if read_value else None

    # -- copies --------------------------------------------------------------------
    def __deepcopy__(self, memo):
        """A new variable with its own identity (tapes watch it apart) and a copy of the value."""
        if _state._local.collector is not None or isinstance(self._val, jax.core.Tracer):
            raise NotImplementedError("copy.deepcopy of a Variable is only available in eager "
                                      "mode, not inside tapejax.function (as in TF)")
        new = KerasVariable.__new__(KerasVariable)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = copy.deepcopy(v, memo)
        new._val = None   # pyright: ignore[reportAttributeAccessIssue]
        new._own = None
        new._lent = None
        new._id = _state.next_id()
        new._sharding = self._sharding
        new._name = self._name
        new._trainable = self._trainable
        new._constraint = self._constraint
        if self._val is not None:
            new._value = jax.numpy.array(self._value, copy=True)
        return new


# Outside a Keras scope the value is tapejax's storage, as a Variable's: a compiled step's fast path
# may read and write it (``core.ownership.SLOT_GUARDS``); inside one it is the scope's.
SLOT_GUARDS[KerasVariable] = lambda: not in_keras_scope()


for _name in ("__getitem__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__",
              "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__abs__", "__invert__",
              "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__"):
    setattr(KerasVariable, _name, _keras_op(_name))
del _name


def _new(cls, *args, **kwargs):
    """``keras.Variable(...)`` (Keras's ``backend.Variable``, a ``JaxVariable``) makes a
    ``KerasVariable``, a subclass of both, so Keras's own ``isinstance`` checks hold."""
    return object.__new__(KerasVariable if cls is _BackendVariable or cls is JaxVariable else cls)


def as_keras_variable(value: Any) -> Any:
    """A plain tapejax Variable set as a Keras layer's attribute (TF's guides: ``self.w =
    tf.Variable(5.0)`` in a Model's ``__init__`` or a Layer's ``build``) becomes a ``KerasVariable``
    of its value, dtype, name, trainability and constraint, so Keras tracks it (``trainable_variables``,
    ``fit``, checkpoints) and a layer call reads it as an input, as tf_keras tracks tf.Variables
    (a plain one is a constant to Keras: no gradient).  The plain Variable becomes an alias of the new
    one (``AdoptedVariable``): a program that keeps it (``shared = tf.Variable(...)``; ``a.w = shared``;
    ``b.w = shared``: weight tying) reads, assigns, watches and checkpoints the one variable the
    layers hold, as TF's one object.  Left as it is while a ``tapejax.function`` traces."""
    if type(value) is AdoptedVariable:
        return _TARGET.__get__(value)
    if type(value) is not Variable or _state._local.collector is not None:
        return value
    name = value.name.split(":")[0].rsplit("/", 1)[-1]
    val = value._value   # (an initializer: inside a Keras scope, a model's first call, Keras defers it)
    new = KerasVariable(initializer=lambda shape, dtype=None: val, shape=tuple(val.shape), dtype=value.dtype.name,
                        trainable=value.trainable, name=name)
    new._constraint = value._constraint   # pyright: ignore[reportAttributeAccessIssue]  (None in its __init__)
    value.__class__ = AdoptedVariable
    _TARGET.__set__(value, new)
    return new


#: The value slot of a plain Variable: an ``AdoptedVariable`` keeps its KerasVariable there instead.
_TARGET: Any = Variable.__dict__["_val"]


class AdoptedVariable(Variable):
    """A plain Variable after a Keras layer adopted it (``as_keras_variable``): every attribute read,
    written or called is the KerasVariable's the layer holds (its value, id, ``assign``, ``_read``,
    and ``__class__``, so ``isinstance(shared, keras.Variable)`` holds), so the program's own
    reference and the layers' are one variable, as in TF.  (The operators, found on the type, are
    ``Variable``'s, and read through those attributes.)"""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        return getattr(_TARGET.__get__(self), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(_TARGET.__get__(self), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(_TARGET.__get__(self), name)


def install() -> None:
    """Make every variable Keras creates from now on a ``KerasVariable``, and a plain tapejax
    Variable set on a layer one (idempotent)."""
    if JaxVariable.__dict__.get("__new__") is not None:
        return
    JaxVariable.__new__ = _new   # pyright: ignore[reportAttributeAccessIssue]  (inherited by backend.Variable)
    from keras.src.layers.layer import Layer
    hook = Layer._setattr_hook

    def _setattr_hook(self: Any, name: str, value: Any) -> Any:
        return hook(self, name, as_keras_variable(value))
    Layer._setattr_hook = _setattr_hook   # pyright: ignore[reportAttributeAccessIssue]
    build = Layer._maybe_build

    def _maybe_build(self: Any, call_spec: Any) -> Any:
        # a build run inside a call's trace (a sublayer built by its model's first call) computes
        # concrete values (``tf.Variable(tf.zeros([n]))`` in a user's ``build``), as eagerly
        with jax.ensure_compile_time_eval():
            return build(self, call_spec)
    Layer._maybe_build = _maybe_build   # pyright: ignore[reportAttributeAccessIssue]


def check_variable(var: Any, what: str) -> None:
    """A Keras variable tapejax cannot track (made before ``tapejax.keras`` was loaded, or under
    another Keras backend): TypeError naming it, before anything runs."""
    if isinstance(var, Variable):
        return
    path = getattr(var, "path", None) or getattr(var, "name", repr(var))
    backend = type(var).__module__
    if isinstance(var, JaxVariable):
        raise TypeError(
            f"{what}: Keras variable '{path}' was created before tapejax.keras was loaded, so no "
            "tape can watch it. Access tapejax.keras (e.g. tapejax.keras.layers) before building "
            "Keras models or variables.")
    raise TypeError(
        f"{what}: '{path}' is a variable of another Keras backend ({backend}); tapejax runs Keras "
        "on the JAX backend only: build the model with tapejax.keras (KERAS_BACKEND=jax).")
