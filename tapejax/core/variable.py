"""``Variable``: a mutable holder whose *reads* are what tapes watch.

Every use of a Variable as an op input is a read: a new Tensor holding the
current value, recorded by each recording tape that watches the Variable
(trainable float Variables are watched on their first read when the tape
watches accessed variables).  The replay adds the Variable's perturbation
to every read, so the reads' gradients are summed, each at the value that
was read.  ``assign*`` replace the value; they are not differentiable (TF).

How a Variable changes is the active executor's business (``executor.ACTIVE``):
``assign_add``/``assign_sub`` call ``Executor.update`` under ``UPDATE_LOCK`` (one re-entrant
lock: each read-modify-write is atomic, concurrent updates are never lost).  The eager
executor computes the new value at once; the deferred one keeps an update with a pending delta
(``v.assign_sub(lr * g)`` on a gradient) pending: the slot ``_val`` then holds a ``Lazy``,
``_value`` computes it (with every other pending update, in one program), ``_meta`` gives its
shape and dtype without computing it, and a read by a recording plain tape does not compute it
(``Executor.read_pending``: the read is a ``Pending`` Tensor on it, which the tape's gradient
computes inside its own program; see ``tapejax.runtime.updates``).

Two invariants, each checked in one place:

* A Variable holds a concrete array or a pending value computed outside any
  trace, never a tracer.  The value setter refuses a tracer (ValueError naming
  the Variable) unless a tapejax trace that binds Variables runs: a
  ``tapejax.function``'s discovery or trace (its collector puts every value
  back) or a ``traced_values`` block (a custom gradient's replay).  A pending
  update read while a trace runs is computed outside it (``runtime.thunks.force_many``
  under ``jax.core.eval_context``), so ``jax.jit``, control-flow bodies and
  ``tapejax.function`` see its concrete value.
* A buffer is donated only when its Variable owns it: ``_own`` is the current
  array when nothing else holds it (a compiled update's fresh output,
  ``_set_owned``, or a copy of host data).  Whatever hands the buffer out (a
  read, ``read_value()``, a pending op's input: ``_share``, ``__jax_array__``)
  or assigns another value clears it; ``owns_buffer()`` is what
  ``tapejax.function`` and the optimizers' ``Donating`` ask before donating
  (``ownership``).
"""
import threading
from typing import Any, Callable, ClassVar, Optional, Union
from weakref import ref as _wref

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from . import counters as _counters, distribution as _distribution, dtypes as _dtypes, state as _state, transfer
from .array_protocol import protocol as _protocol
from .conversion import conversion_for
from .convert import convert_to_tensor
from .creator import ScopedCreation
from .devices import device_name
from .errors import InvalidArgumentError
from .executor import ACTIVE
from .ownership import Loan
from .shape import shape_of
from .tensor import Lazy, Pending, ProtocolError, Tensor, _to_array, array_of, host_value, index_value
from .variable_shape import DECLARED, assign_shape_error, declare, declared, declared_shape, shape_changed

_Array = type(jnp.zeros(()))   # the concrete array type

# Jitted updates: JAX's C++ dispatch path, faster than eager jnp arithmetic.
_add = jax.jit(jnp.add)
_sub = jax.jit(jnp.subtract)

#: Makes each read-modify-write of a Variable (``assign_add``/``assign_sub``, eager or pending)
#: and the computing of pending updates atomic, as TF's resource variable updates are:
#: concurrent updates are never lost.  Re-entrant.
UPDATE_LOCK = threading.RLock()

#: Called with every new Variable at the end of ``Variable.__init__`` (a list that is empty
#: unless someone waits for Variables: ``tapejax.train``'s deferred restoration adds its hook
#: while a restore has values for objects that do not exist yet, and removes it after).
CREATION_HOOKS: "list[Callable[[Variable], None]]" = []

_Tracer = jax.core.Tracer
_BINDING = threading.local()   # ``depth``: ``traced_values`` blocks open on this thread


def _binding():
    """Whether a Variable may hold a tracer now: a ``tapejax.function`` traces (its collector
    restores every Variable it touched) or a ``traced_values`` block is open."""
    return _state._local.collector is not None or getattr(_BINDING, "depth", 0) > 0


def _tracer_error(var):
    name = getattr(var, "_name", None)   # (not set yet while ``__init__`` takes ``initial_value``)
    what = f"Variable '{name}'" if name else "A Variable (argument `initial_value`)"
    return ValueError(
        f"{what} cannot hold a traced value: a Variable holds a concrete array, and "
        "a JAX transformation (jax.jit, jax.grad, jax.vmap ...) that assigns or creates it would leak "
        "its tracer. Assign and create Variables eagerly or inside tapejax.function (which threads "
        "them through the compiled program as state), or return the new value from the transformed "
        "function and assign it outside.")


class traced_values:
    """``variables`` hold ``values`` (tracers of the trace running now) inside the block; their
    own values are put back when it ends.  The only way a tracer enters a Variable outside
    ``tapejax.function`` (whose collector does the same for the Variables it touches)."""

    __slots__ = ("_vars", "_vals", "_saved")

    def __init__(self, variables, values):
        self._vars = list(variables)
        self._vals = list(values)
        self._saved: Optional[list] = None

    def __enter__(self):
        self._saved = [v._state() for v in self._vars]
        _BINDING.depth = getattr(_BINDING, "depth", 0) + 1
        for v, x in zip(self._vars, self._vals):
            v._val = x
        return self

    def __exit__(self, *exc):
        assert self._saved is not None  # set by __enter__
        for v, st in zip(self._vars, self._saved):
            v._restore(st)
        _BINDING.depth -= 1
        return False


def announce(var: "Variable") -> None:
    """Run the ``CREATION_HOOKS`` for ``var``, which now holds its initial value (at the end of
    ``Variable.__init__``, or, for one a ``tapejax.function`` created while tracing, when the
    function has given it its value)."""
    for hook in tuple(CREATION_HOOKS):
        hook(var)


class Variable(metaclass=ScopedCreation):
    """A mutable tensor (``tf.Variable``)."""

    __slots__ = ("_val", "_own", "_lent", "_id", "_trainable", "_name", "_sharding", "_constraint", "_sync",
                 "__weakref__")
    __array_priority__ = 100
    _SCOPED_ROOT: ClassVar[bool] = True   # calls run the creator scopes (``core.creator``)
    _unnamed = 0
    # the value: an array (a tracer while a trace binds this Variable) or a pending update
    _val: Union[jax.Array, Lazy]

    # The operators, installed on the class by ``tapejax.ops`` (``ops/math.py``: arithmetic,
    # comparisons and logic; ``ops/array.py``: ``[]``) so that each goes through the op registry
    # and its one recording entry point.  Declared here for readers and type checkers.
    __getitem__: ClassVar[Callable[[Any, Any], Tensor]]
    __add__: ClassVar[Callable[[Any, Any], Tensor]]
    __radd__: ClassVar[Callable[[Any, Any], Tensor]]
    __sub__: ClassVar[Callable[[Any, Any], Tensor]]
    __rsub__: ClassVar[Callable[[Any, Any], Tensor]]
    __mul__: ClassVar[Callable[[Any, Any], Tensor]]
    __rmul__: ClassVar[Callable[[Any, Any], Tensor]]
    __truediv__: ClassVar[Callable[[Any, Any], Tensor]]
    __rtruediv__: ClassVar[Callable[[Any, Any], Tensor]]
    __floordiv__: ClassVar[Callable[[Any, Any], Tensor]]
    __rfloordiv__: ClassVar[Callable[[Any, Any], Tensor]]
    __mod__: ClassVar[Callable[[Any, Any], Tensor]]
    __rmod__: ClassVar[Callable[[Any, Any], Tensor]]
    __pow__: ClassVar[Callable[[Any, Any], Tensor]]
    __rpow__: ClassVar[Callable[[Any, Any], Tensor]]
    __matmul__: ClassVar[Callable[[Any, Any], Tensor]]
    __rmatmul__: ClassVar[Callable[[Any, Any], Tensor]]
    __lt__: ClassVar[Callable[[Any, Any], Tensor]]
    __le__: ClassVar[Callable[[Any, Any], Tensor]]
    __gt__: ClassVar[Callable[[Any, Any], Tensor]]
    __ge__: ClassVar[Callable[[Any, Any], Tensor]]
    __and__: ClassVar[Callable[[Any, Any], Tensor]]
    __rand__: ClassVar[Callable[[Any, Any], Tensor]]
    __or__: ClassVar[Callable[[Any, Any], Tensor]]
    __ror__: ClassVar[Callable[[Any, Any], Tensor]]
    __xor__: ClassVar[Callable[[Any, Any], Tensor]]
    __rxor__: ClassVar[Callable[[Any, Any], Tensor]]
    __neg__: ClassVar[Callable[[Any], Tensor]]
    __pos__: ClassVar[Callable[[Any], Tensor]]
    __abs__: ClassVar[Callable[[Any], Tensor]]
    __invert__: ClassVar[Callable[[Any], Tensor]]
    # ``==`` / ``!=`` are elementwise; against None (or an unbroadcastable shape) a Python bool
    __eq__: ClassVar[Callable[[Any, Any], Any]]
    __ne__: ClassVar[Callable[[Any, Any], Any]]
    # TF's sparse reads and scatter updates, installed by ``tapejax.ops.scatter``
    # (``register_methods``): they take IndexedSlices or index tensors, update the Variable in place
    # where it owns its buffer, and return it.
    sparse_read: ClassVar[Callable[..., Tensor]]
    gather_nd: ClassVar[Callable[..., Tensor]]
    count_up_to: ClassVar[Callable[..., Tensor]]
    scatter_add: ClassVar[Callable[..., Any]]
    scatter_sub: ClassVar[Callable[..., Any]]
    scatter_mul: ClassVar[Callable[..., Any]]
    scatter_div: ClassVar[Callable[..., Any]]
    scatter_max: ClassVar[Callable[..., Any]]
    scatter_min: ClassVar[Callable[..., Any]]
    scatter_update: ClassVar[Callable[..., Any]]
    batch_scatter_update: ClassVar[Callable[..., Any]]
    scatter_nd_add: ClassVar[Callable[..., Any]]
    scatter_nd_sub: ClassVar[Callable[..., Any]]
    scatter_nd_update: ClassVar[Callable[..., Any]]
    scatter_nd_max: ClassVar[Callable[..., Any]]
    scatter_nd_min: ClassVar[Callable[..., Any]]

    @property
    def initial_value(self):
        """TF 2's eager Variables keep no initial value: RuntimeError, as TF's."""
        raise RuntimeError("This property is not supported when eager execution is enabled.")

    #: Whether an executor may compute an op from ``_val`` before the read is recorded (so a bad op
    #: reads nothing); False for a subclass with its own ``_read`` (``__init_subclass__``), whose
    #: read decides the value (a Keras variable in a Keras scope): it is read first.
    _peekable: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_read" in cls.__dict__ and "_peekable" not in cls.__dict__:
            cls._peekable = False

    def __init__(self, initial_value=None, trainable=None, validate_shape=True, caching_device=None,
                 name=None, variable_def=None, dtype=None, import_scope=None, constraint=None,
                 synchronization=None, aggregation=None, shape=None, experimental_enable_variable_lifting=True):
        if name is not None and not isinstance(name, str):
            raise ValueError(f"Argument `name` of tf.Variable must be a string; got {name!r} of type "
                             f"{type(name).__name__}")
        if initial_value is None:
            raise ValueError("The `initial_value` arg (`None`) must be specified as a `Tensor` or a "
                             "Python callable returning a `Tensor`.")
        if callable(initial_value) and not isinstance(initial_value, (Tensor, Variable)):
            initial_value = initial_value()
        want = None if dtype is None else _dtypes.as_dtype(dtype)
        if isinstance(initial_value, (Tensor, Variable)):
            t = convert_to_tensor(initial_value)
            value = t._value
            if want is not None and t.dtype != want:   # TF casts no Tensor's or Variable's dtype here
                _dtypes.require_representable(want._np, "initial_value")   # (float64 without x64 first)
                raise ValueError(f"initial_value: Tensor conversion requested dtype {want.name} for a {t.dtype.name} value")
            fresh = False   # (the Tensor holds it too)
            requested = None
        else:
            value = _to_array(initial_value, None if want is None else want._np, "initial_value")
            fresh = value is not initial_value and type(value) is _Array   # a new buffer from host data
            requested = want._np if want is not None else (   # (NumPy int64 data: TF's int64)
                initial_value.dtype if isinstance(initial_value, (np.ndarray, np.generic)) else None)
        # ``shape=[None, 3]`` declares a shape ``assign`` may change (TF 2: whatever ``validate_shape``)
        declared_as = declared_shape(shape, tuple(value.shape))
        if isinstance(value, _Tracer) and _state._local.collector is None:
            raise _tracer_error(self)   # (only a tapejax.function's discovery takes one, to refuse it)
        self._value = value
        self._own, self._id = (value if fresh else None), _state.next_id()
        if requested is not None and not _dtypes.x64_enabled():
            _counters.note(self, requested)   # (int64 data held as int32: TF's dtype for TF's checkpoints)
        if declared_as is not None:
            declare(self, declared_as)
        # TF: an ON_READ Variable is not trainable by default (properties: ops/utilities.py)
        self._trainable = getattr(synchronization, "name", None) != "ON_READ" if trainable is None else bool(trainable)
        self._sync, self._sharding = (synchronization, aggregation), None
        if name is None:
            self._name = "Variable:0"
        else:
            self._name = name if ":" in name else f"{name}:0"
        if _state._local.name_scope:  # inside tapejax.name_scope / a Module's name_scope
            self._name = _state._local.name_scope + self._name
        if constraint is not None and not callable(constraint):
            raise ValueError(f"The `constraint` argument must be a callable; got {constraint!r}")
        self._constraint = constraint  # applied by optimizers after each update, as in TF
        if _state._local.collector is not None:  # created while a tapejax.function traces
            # (the function gives it its initial value when its trace ends, then ``announce``s it)
            _state._local.collector.created(self)
        elif CREATION_HOOKS:   # (empty unless a checkpoint restore waits for Variables: ``train.restore``)
            announce(self)

    # -- the read ----------------------------------------------------------
    def _read(self):
        if _state._local.collector is not None:  # a tapejax.function is tracing
            _state._local.collector.touch(self, False)
        tapes = _state._local.tapes
        v = self._val
        if v is self._own:   # the buffer is handed out: no longer this Variable's alone
            self._own = None
        self._lent = None
        if isinstance(v, _Array):   # (the common case first: an exact type is one compare)
            t = Tensor(v)
        elif isinstance(v, Lazy):   # a pending update: the executor decides whether it stays so
            t = Tensor(v.value) if v.value is not None else ACTIVE.executor.read_pending(self, v, tapes)
        else:   # a tracer (a trace binds this Variable)
            t = Tensor(v)
        if tapes:
            for tape in tapes:
                tape._record_read(self, t)
        return t

    def _read_deferred(self, tapes):
        """``_read`` for an op being deferred (``runtime.deferred``: no ``tapejax.function``
        traces), so only the read itself is left: a pending update stays pending.  An owned
        buffer is lent (``ownership.Loan``) to the recording tapes, and by the caller
        (``_lend``) to the pending op that takes it."""
        v = self._val
        if v is self._own and v is not None:
            self._own = None
            self._lent = Loan(v)
        if isinstance(v, _Array):   # (the common case first: an exact type is one compare)
            t = Tensor(v)
            loan = self._lent
            if loan is not None and loan.buffer() is v:
                for tape in tapes:
                    tape._record_read(self, t)
                    loan.holders.append(_wref(tape))   # (``Loan.lend``, written out: once per read)
                return t
        elif isinstance(v, Lazy):
            t = Tensor(v.value) if v.value is not None else Pending(v)
        else:   # a tracer (a trace binds this Variable)
            t = Tensor(v)
        for tape in tapes:
            tape._record_read(self, t)
        return t

    def _lend(self, holder):
        """``holder`` (a pending op) took the buffer a deferred read lent: list it on the loan."""
        loan = self._lent
        if loan is not None and loan.buffer() is self._val:
            loan.holders.append(_wref(holder))   # (``Loan.lend``)

    @property
    def _value(self) -> jax.Array:
        """The value (an update still pending is computed, with every other pending update)."""
        v = self._val
        if isinstance(v, _Array):   # (the common case first: an exact type is one compare)
            return v
        if isinstance(v, Lazy):
            return v.value if v.value is not None else v.force()
        return v   # a tracer (a trace binds this Variable)

    @_value.setter
    def _value(self, value):
        # The one check of the invariant: a tracer only while a tapejax trace that binds
        # Variables runs (``tapejax.function``'s discovery and trace, a custom gradient's replay:
        # ``traced_values``), which puts the old value back when it ends.
        if type(value) is not _Array and isinstance(value, _Tracer) and not _binding():
            raise _tracer_error(self)
        self._val = value
        self._own = None   # a value from outside: others may hold it
        self._lent = None

    # -- ownership (donation) ----------------------------------------------------
    # ``_own`` is the current buffer when this Variable alone holds it: a fresh result of a
    # library update (``_set_owned``) or an initial value copied from host data.  Whatever
    # hands the buffer out (a read, ``_share``, ``__jax_array__``) clears it, and so does any
    # other assignment; only an owned buffer may be donated (``owns_buffer``).
    def _share(self):
        """The current value (array or pending update's thunk) for a holder outside this
        Variable (a pending op's inputs): the buffer is then no longer this Variable's alone."""
        self._own = None
        self._lent = None
        return self._val

    def owns_buffer(self):
        """Whether the current value is a buffer only this Variable holds (it may be donated): its
        own, or lent to a step's pending ops that are all done with it (``ownership.Loan``)."""
        v = self._val
        if v is None:
            return False
        if v is self._own:
            return True
        loan = self._lent
        if loan is not None and loan.buffer() is v and loan.settled():
            self._own = v   # (given back)
            self._lent = None
            return True
        return False

    def _set_owned(self, value):
        """Take ``value``, a fresh buffer nothing else holds (a compiled update's output that is
        none of its inputs), as this Variable's own."""
        self._value = value
        if type(value) is _Array:
            self._own = value

    def _state(self):
        """(value, owned buffer): what ``_restore`` puts back (a trace that swapped values)."""
        return self._val, self._own

    def _restore(self, state):
        self._val, self._own = state
        self._lent = None

    @property
    def _meta(self) -> Any:
        v = self._val
        return v.aval if isinstance(v, Lazy) else v

    def read_value(self):
        """The current value as a Tensor (a recorded read)."""
        return self._read()

    def value(self):
        return self._read()

    # -- mutation ----------------------------------------------------------
    def _new_value(self, value, op):
        """The new value as an array of this Variable's dtype and shape (TF's errors otherwise)."""
        if _state._local.collector is not None:  # a tapejax.function is tracing
            _state._local.collector.touch(self, True)
        want = np.dtype(self._value.dtype)
        if isinstance(value, (Tensor, Variable)) or conversion_for(type(value)) is not None:
            new = convert_to_tensor(value)._value   # (a registered conversion: IndexedSlices densified, as TF)
            if new.dtype != want:
                raise ValueError(f"Tensor conversion requested dtype {want.name} for Tensor with "
                                 f"dtype {np.dtype(new.dtype).name}: {value!r}")
        else:
            new = _to_array(value, want, "value")
        if tuple(new.shape) != tuple(self._value.shape):
            if op == "assign":   # (a declared shape such as [None, 3] takes a compatible value)
                err = assign_shape_error(self._name, declared(self), tuple(self._value.shape), tuple(new.shape))
                if err is None:
                    shape_changed(self)   # (compiled programs traced at the old shape are dropped)
                    return new
                raise err
            raise InvalidArgumentError(
                None, None, f"Cannot update variable with shape {list(self._value.shape)} using a "
                f"Tensor with shape {list(new.shape)}, shapes must be equal. [Op:{op}]")
        return new

    def assign(self, value, use_locking=None, name=None, read_value=True):
        new = self._new_value(value, "assign")
        old = self._value
        if (not isinstance(new, jax.core.Tracer) and not isinstance(old, jax.core.Tracer)
                and old.committed and new.sharding != old.sharding):
            new = jax.device_put(new, old.sharding)  # a Variable stays where it lives (TF)
        if (type(new) is _Array and not isinstance(value, (Tensor, Variable, jax.Array))
                and new is not value):
            self._set_owned(new)   # a copy of host data (NumPy, Python numbers): this Variable's alone
        else:
            self._value = new
        return self if read_value else None

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        if _distribution.SUM_ON_READ and id(self) in _distribution.SUM_ON_READ:
            _distribution.check_sum_on_read_update("assign_add")
        with UPDATE_LOCK:
            ACTIVE.executor.update(self, _add, delta, "AssignAddVariableOp")
        return self if read_value else None

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        if _distribution.SUM_ON_READ and id(self) in _distribution.SUM_ON_READ:
            _distribution.check_sum_on_read_update("assign_sub")
        with UPDATE_LOCK:
            ACTIVE.executor.update(self, _sub, delta, "AssignSubVariableOp")
        return self if read_value else None

    def _delta(self, delta, op):
        """``_new_value`` for an update; the common case (a Tensor of this dtype and shape,
        eagerly) without its conversions."""
        if (type(delta) is Tensor or type(delta) is Pending) and _state._local.collector is None:
            new, old = delta._value, self._value
            if new.dtype == old.dtype and new.shape == old.shape:
                return new
        return self._new_value(delta, op)

    # -- metadata ----------------------------------------------------------
    @property
    def dtype(self):
        return _dtypes.as_dtype(self._meta.dtype)

    @property
    def shape(self):
        if DECLARED:   # (a Variable made with shape=[None, 3]: core.variable_shape)
            d = DECLARED.get(id(self))
            if d is not None:
                return d
        return shape_of(self._meta.shape)

    def get_shape(self):
        return self.shape

    @property
    def ndim(self):
        return len(self._meta.shape)

    @property
    def constraint(self):
        return self._constraint

    @property
    def trainable(self):
        return self._trainable

    @property
    def name(self):
        return self._name

    @property
    def device(self):
        try:
            return device_name(next(iter(self._value.devices())))  # TF's name
        except Exception:
            return ""

    def numpy(self):
        return host_value(self._value)

    def __array__(self, dtype=None, copy=None):
        # TF's ``np.asarray(self.numpy())``: the caller's own writable copy, never a view of the buffer
        return array_of(self._value, dtype, True)

    @_protocol
    def __jax_array__(self):   # (hidden from jax.Array's operators: ``array_protocol``)
        if _state._local.collector is not None:  # a tapejax.function is tracing (jnp.f(variable))
            _state._local.collector.touch(self, False)
        v = self._value
        self._own = None   # handed out
        self._lent = None
        return v

    def ref(self):
        from .tensor import _Ref
        return _Ref(self)

    # -- copies (TF's resource variables) ---------------------------------------
    def __copy__(self):
        """``copy.copy(v)`` is ``v`` itself, as in TF: a shallow copy shares the Variable."""
        return self

    def __deepcopy__(self, memo):
        """``copy.deepcopy(v)``: a new Variable with its own identity (tapes watch it apart
        from ``v``), holding a copy of the current value, with ``v``'s name, trainability,
        constraint and placement (TF).  Copies made in one ``deepcopy`` call share ``memo``, so
        a structure holding ``v`` twice gets one new Variable."""
        if _state.tracing() or _state._local.collector is not None:   # any JAX trace
            raise NotImplementedError("copy.deepcopy of a Variable is only available in eager "
                                      "mode, not inside tapejax.function (as in TF)")
        value = self._value   # computes a pending update first
        # its own buffer: an update donating the original's buffer must not delete the copy's
        value = transfer.copy(value)   # (with the original's placement)
        new = Variable.__new__(Variable)
        new._value = value
        new._id = _state.next_id()
        new._trainable, new._name, new._sync = self._trainable, self._name, getattr(self, "_sync", None)
        new._sharding = self._sharding
        new._constraint = self._constraint
        shape = declared(self)
        if shape is not None:
            declare(new, shape)
        memo[id(self)] = new
        return new

    experimental_ref = ref

    def __hash__(self):
        raise TypeError("Variable is unhashable. Instead, use variable.ref() as the key.")

    def __bool__(self):
        return bool(self._value)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        return index_value(self._value)

    def __round__(self, ndigits=None):
        raise ProtocolError(f"round() of a tapejax Variable is not defined (TF raises here too): use "
                            f"tf.round(v), or round(float(v)) for a Python number; got {self!r}")

    def __iter__(self):
        return iter(self._read())

    def __repr__(self):
        try:
            val = np.asarray(self._value)
        except Exception:
            return f"<tapejax.Variable '{self._name}' shape={self.shape} dtype={self.dtype.name}>"
        text = repr(val.item()) if val.ndim == 0 else repr(val)
        return (f"<tapejax.Variable '{self._name}' shape={self.shape} "
                f"dtype={self.dtype.name}, numpy={text}>")


def counter(name: str) -> Variable:
    """A non-trainable scalar int64 counter at 0 (TF's step counters: ``save_counter``, an
    optimizer's ``iterations``); int32 without JAX's 64-bit mode, noted (``core.counters``)."""
    return Variable(np.zeros((), np.int64), trainable=False, name=name)
