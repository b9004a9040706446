"""The execution seam: how an op runs, how a Variable changes, how a compiled program runs.

The core (``bind``, ``Variable``, the optimizers' updates and the gradient driver in
``tapejax.autodiff``) never decides *when* a value is computed: it hands the work to the
active ``Executor``.  There are two:

* ``EagerExecutor`` (here): an op runs when it is called, a Variable update is computed at
  once, a gradient program's results are plain Tensors.
* ``DeferredExecutor`` (``tapejax.runtime.deferred``): while plain tapes record, an op returns
  a ``Pending`` Tensor and runs later, inside the compiled gradient; ops on the gradients and
  Variable updates with them stay pending and run inside the next program, so a training step
  is one dispatch; speculation (``tapejax.runtime.speculate``) is a policy inside it.  Where
  it may not defer (a ``tapejax.function`` traces, a gradient override is active, another
  kind of tape records: ``core.state``'s ``_local.defers`` is False; an input is committed to a
  device) it does what the eager one does.

``install`` makes one active for every thread (``tapejax.set_deferred_execution`` calls it).
Both give the same values and record the same nodes; only the number of dispatches differs
(``tests/test_executor.py`` runs the same programs through both).

The operations (each a method of ``Executor``)
----------------------------------------------
``run(tapes, prim, call, skey, operands)``
    One op.  ``call`` is ``prim``'s function with its static parameters (``skey``, a tuple of
    items) bound, jitted unless ``prim.jit`` is False.  ``operands`` are Tensors, Pending
    Tensors, Variables (read as the op runs: each read is recorded by the tapes), constant
    arrays or Python scalars.  A bad op raises before any Variable is read or anything is
    recorded.  The op is offered to each of ``tapes`` (``record``), which may be empty.
    Inside a trace (a ``tapejax.function``'s, or JAX's around a Keras layer's call), an op on a
    ``StaticTensor`` (``tf.shape``'s value) whose operands are all concrete is computed at once (``fold``: TF's graph folds static shapes),
    unless it calls back into Python (``EFFECTFUL``).
``run1(tapes, prim, call, skey, x)``, ``run2(tapes, prim, call, x, y, skey=())``
    ``run`` for a one-output op on one operand, or on two (what ``bind`` calls for them, and
    ``bind1`` / ``bind2``: the ops of a training step's forward); the same contract, so an
    executor may specialise them (both do) and by default they call ``run``.
``read_pending(var, lazy, tapes)``
    A read of a Variable whose value is a pending update ``lazy``.
``update(var, op, delta, op_type)``
    ``var`` becomes ``op(value, delta)`` (``assign_add``/``assign_sub``); the caller holds the
    Variable's update lock.
``apply(update)``
    A compiled update of several Variables at once (an optimizer step, ``GroupUpdate``).
``gradient(entry, leaves, given)``
    A compiled gradient program (``tapejax.autodiff.replay``) on its leaves (arrays, or
    ``Lazy`` values the program may compute first) and cotangents: its gradients as Tensors,
    and the targets' values where the program computes them (``entry.fused``).
"""
from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence

import jax

from .errors import compiled_numerics_error
from .ownership import Donating, commit
from .state import _local
from .tensor import Lazy, Pending, StaticTensor, Tensor

_Array = type(jax.numpy.zeros(()))   # the concrete array type (``jax.Array`` is abstract)


class VariableLike(Protocol):
    """What the executors need of a Variable operand (``tapejax.core.variable.Variable``)."""

    _val: Any   # the value: an array, a tracer while a trace binds it, or a pending update (``Lazy``)
    @property
    def _peekable(self) -> bool:
        """Whether an op may use ``_val`` before the read (its class keeps ``_read``)."""
        ...

    @property
    def _value(self) -> Any:
        """The value (a pending update computed)."""
        ...

    def _read(self) -> Tensor:
        """A recorded read (the tapes see it; a ``tapejax.function`` discovers the Variable)."""
        ...

    def _read_deferred(self, tapes: list) -> Tensor:
        """``_read`` for an op being deferred: a pending update stays pending."""
        ...

    def _share(self) -> Any:
        """The value for a holder outside the Variable (its buffer is no longer its own)."""
        ...


def peek(x: Any) -> Any:
    """An operand's array (or ``Lazy``, or Python scalar) without reading it: a Tensor's value, a
    Pending Tensor's thunk, a Variable's current value or pending update."""
    t = type(x)
    if t is Tensor:
        return x._value
    if t is Pending:
        return x._thunk
    if t is _Array:
        return x
    if isinstance(x, Tensor):   # a subclass (a Variable's slice)
        return x._thunk if isinstance(x, Pending) else x._value
    return x._val if hasattr(x, "_read") else x


def is_variable(x: Any) -> bool:
    """Whether an operand is a Variable (read as the op runs), by its protocol (``VariableLike``)."""
    return not isinstance(x, Tensor) and hasattr(x, "_read")


def _override_for(name: str, mappings: Sequence[dict]) -> Optional[str]:
    """The gradient ``gradient_override_map`` names for op type ``name`` on this thread."""
    for mapping in reversed(mappings):
        if name in mapping:
            return mapping[name]
    return None


def record(tapes: Sequence[Any], prim: Any, skey: tuple, ids: tuple, vals: tuple, result: Any) -> None:
    """Offer one op (static parameters ``skey``; input ids and values; its result, a Tensor or a
    tuple of them) to every recording tape, with this thread's gradient override for it.  Each
    tape keeps it iff an input is tracked there (``GradientTape._record_simple``)."""
    ov = _local.overrides
    if ov or prim.multiple_results:
        grad_type = _override_for(prim.name, ov) if ov else None
        static = dict(skey)
        for tape in tapes:
            tape._record_op(prim, static, grad_type, ids, vals, result)
    else:
        for tape in tapes:
            tape._record_simple(prim, skey, ids, vals, result)


def computed(vals: Sequence[Any]) -> list:
    """``vals`` with every ``Lazy`` replaced by its value (each computed with what it needs)."""
    return [v.force() if isinstance(v, Lazy) else v for v in vals]


class GroupUpdate(NamedTuple):
    """A compiled update of several Variables (an optimizer step), for ``Executor.apply``.

    ``state``: the Variables it writes (the updated ones first, then slots and counters);
    ``constrained``: those with a ``constraint`` to run after the update; ``fn``: the update,
    ``fn._f(values, grads, *extra) -> new values``, donating what the Variables own;
    ``grads``: the gradient Tensors as the user passed them (the updated Variables' order);
    ``extra``: the other inputs (a learning rate, hyperparameter values); ``values``: the
    gradients' arrays where the caller has them already (converted), else None."""

    state: Sequence[Any]
    constrained: Sequence[Any]
    fn: Donating
    grads: Sequence[Tensor]
    extra: tuple
    values: Optional[Sequence[Any]] = None


class GradientEntry(Protocol):
    """What ``Executor.gradient`` runs (``tapejax.autodiff.replay``'s compiled entries)."""

    fn: Callable[..., Any]    # jitted: (leaves, cotangents) -> gradients, or (gradients, values) if fused
    raw: Optional[Callable[..., Any]]   # the same, not jitted (fused only)
    fused: bool
    n_grads: int


class Executor:
    """The interface (see the module docstring); ``EagerExecutor`` and ``DeferredExecutor``
    implement it."""

    name = "executor"

    def run(self, tapes: list, prim: Any, call: Callable[..., Any], skey: tuple, operands: tuple) -> Any:
        raise NotImplementedError   # pragma: no cover - abstract

    def run1(self, tapes: list, prim: Any, call: Callable[..., Any], skey: tuple, x: Any) -> Any:
        """``run`` for a one-output op on one operand (``core.bind.bind1``); an executor may
        specialise it, with ``run``'s contract."""
        return self.run(tapes, prim, call, skey, (x,))

    def run2(self, tapes: list, prim: Any, call: Callable[..., Any], x: Any, y: Any, skey: tuple = ()) -> Any:
        """``run`` for a one-output op on two operands (``core.bind.bind2``: no static parameters);
        an executor may specialise it, with ``run``'s contract."""
        return self.run(tapes, prim, call, skey, (x, y))

    def read_pending(self, var: VariableLike, lazy: Lazy, tapes: list) -> Tensor:
        raise NotImplementedError   # pragma: no cover - abstract

    def update(self, var: Any, op: Callable[..., Any], delta: Any, op_type: str) -> None:
        raise NotImplementedError   # pragma: no cover - abstract

    def apply(self, update: GroupUpdate) -> None:
        raise NotImplementedError   # pragma: no cover - abstract

    def gradient(self, entry: GradientEntry, leaves: Sequence[Any], given: tuple) -> tuple:
        raise NotImplementedError   # pragma: no cover - abstract

    def __repr__(self) -> str:
        return f"<tapejax {self.name} executor>"


#: Primitives that may not be computed while tracing even on constant operands: they call back
#: into Python (``numpy_function``, ``tf.print``) at every run of the program.  Filled where
#: they are defined (``compile.host``, ``ops.printing``).
EFFECTFUL: "set[Any]" = set()

_CONCRETE = type(jax.numpy.zeros(()))


def fold(prim: Any, call: Callable[..., Any], operands: tuple) -> Any:
    """An op on a ``StaticTensor`` inside a trace, computed now when every operand is concrete
    (a ``StaticTensor``, a Tensor holding an array, an array or a Python number) and the op may
    run at trace time: its results as ``StaticTensor``s; None otherwise (the op is staged)."""
    if prim in EFFECTFUL or not prim.jit:
        return None
    vals = []
    for x in operands:
        v = x._value if isinstance(x, Tensor) and type(x) is not Pending else x
        if not (type(v) is _CONCRETE or isinstance(v, (bool, int, float, complex))):
            return None
        vals.append(v)
    with jax.ensure_compile_time_eval():
        out = call(*vals)
    if prim.multiple_results:
        return tuple([StaticTensor(o) for o in out])
    return StaticTensor(out)


class EagerExecutor(Executor):
    """Every op runs when it is called (``tapejax.set_deferred_execution(False)``)."""

    name = "eager"

    def run(self, tapes, prim, call, skey, operands):
        vals = []
        ids = []
        for x in operands:   # the common case first: Tensors and constant arrays
            t = type(x)
            if t is Tensor:
                vals.append(x._value)
                ids.append(x._id)
            elif t is _Array:
                vals.append(x)
                ids.append(0)
            else:
                return self._run_any(tapes, prim, call, skey, operands)
        out = call(*vals)
        if prim.multiple_results:
            result = tuple([Tensor(o) for o in out])
        else:
            result = Tensor(out)
            if tapes and not _local.overrides:   # ``record``'s common case, written out (a recorded op's hot path)
                ids_t, vals_t = tuple(ids), tuple(vals)
                for tape in tapes:
                    tape._record_simple(prim, skey, ids_t, vals_t, result)
                return result
        if tapes:
            record(tapes, prim, skey, tuple(ids), tuple(vals), result)
        return result

    # ``run`` for ``bind1`` / ``bind2`` (one-output ops), its common case written out
    def run1(self, tapes, prim, call, skey, x):
        if type(x) is not Tensor:
            return self.run(tapes, prim, call, skey, (x,))
        v = x._value
        result = Tensor(call(v))
        if tapes:
            if _local.overrides:
                record(tapes, prim, skey, (x._id,), (v,), result)
            else:
                ids, vals = (x._id,), (v,)
                for tape in tapes:
                    tape._record_simple(prim, skey, ids, vals, result)
        return result

    def run2(self, tapes, prim, call, x, y, skey=()):
        if type(x) is not Tensor or type(y) is not Tensor:
            return self.run(tapes, prim, call, skey, (x, y))
        vx, vy = x._value, y._value
        result = Tensor(call(vx, vy))
        if tapes:
            if _local.overrides:
                record(tapes, prim, skey, (x._id, y._id), (vx, vy), result)
            else:
                ids, vals = (x._id, y._id), (vx, vy)
                for tape in tapes:
                    tape._record_simple(prim, skey, ids, vals, result)
        return result

    def _run_any(self, tapes, prim, call, skey, operands):
        """``run`` for any operands: pending ones computed, Variables read after the op ran (so a
        bad op reads nothing); while a ``tapejax.function`` traces, read first: the read is what
        makes the Variable an input of the program (its value a tracer), which the op must see;
        and read first a Variable whose read is its own (``Variable._peekable`` False: a Keras
        variable inside a Keras scope reads the scope's value, not its storage)."""
        if any([type(x) is StaticTensor for x in operands]):   # (made only inside a trace)
            folded = fold(prim, call, operands)
            if folded is not None:
                return folded
        if _local.collector is not None:
            operands = tuple([x._read() if is_variable(x) else x for x in operands])
        elif any([not x._peekable for x in operands if is_variable(x)]):
            operands = tuple([x._read() if is_variable(x) else x for x in operands])
        vals = [peek(x) for x in operands]
        for v in vals:
            if isinstance(v, Lazy):   # a pending input (made while deferral was on): computed now
                if not tapes and prim.jit and not prim.multiple_results and not any(
                        [is_variable(x) for x in operands]):
                    staged = v.stage(call, vals)   # (or staged: ``Lazy.stage``)
                    if staged is not None:
                        return Pending(staged)
                vals = computed(vals)
                break
        out = call(*vals)   # raises before any read or record
        result = tuple([Tensor(o) for o in out]) if prim.multiple_results else Tensor(out)
        ids = []
        for k, x in enumerate(operands):
            t = type(x)
            if t is Tensor or t is Pending:
                ids.append(x._id)
            elif t is _Array:
                ids.append(0)
            elif is_variable(x):   # the read the tapes see (and a tapejax.function discovers)
                r = x._read()
                ids.append(r._id)
                vals[k] = r._value
            else:
                ids.append(x._id if isinstance(x, Tensor) else 0)
        if tapes:
            record(tapes, prim, skey, tuple(ids), tuple(vals), result)
        return result

    def read_pending(self, var, lazy, tapes):
        return Tensor(var._value)

    def update(self, var, op, delta, op_type):
        d = var._delta(delta, op_type)   # first: a tracing function's collector sees the assign before the read
        var._set_owned(op(var._value, d))   # (a new array)

    def apply(self, update):
        grads = update.values if update.values is not None else [g._value for g in update.grads]
        fn, extra = update.fn, update.extra
        commit(update.state, update.constrained, lambda vals, shared: fn(vals, shared, grads, *extra))

    def gradient(self, entry, leaves, given):
        try:
            out = entry.fn(tuple(computed(leaves)), given)
        except FloatingPointError as e:   # JAX's NaN/Inf checker (tf.debugging.enable_check_numerics)
            raise compiled_numerics_error(e, "the gradient") from None
        if entry.fused:
            grads, values = out
            return tuple([Tensor(g) for g in grads]), values
        return tuple([Tensor(g) for g in out]), None


EAGER = EagerExecutor()


class _Active:
    """The executor every op uses (one for all threads, as the deferral setting)."""

    __slots__ = ("executor",)

    def __init__(self):
        self.executor: Executor = EAGER


ACTIVE = _Active()


def install(executor: Executor) -> Executor:
    """Make ``executor`` the active one; returns the one it replaces."""
    if not isinstance(executor, Executor):
        raise TypeError(f"Argument `executor` must be a tapejax Executor; got {executor!r}")
    prev = ACTIVE.executor
    ACTIVE.executor = executor
    return prev


def active() -> Executor:
    """The active executor."""
    return ACTIVE.executor
