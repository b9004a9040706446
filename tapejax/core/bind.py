"""THE op registry and the one entry point every op goes through: ``bind``.

A ``Primitive`` is data: a TF type name (``"AddV2"``, ``"MatMul"`` ...), a pure JAX function of
arrays and static keyword parameters, and whether TF differentiates it.  Running one is the
active executor's job (``executor.Executor.run``: eager, or deferred while plain tapes
record); ``bind`` only turns the call's arguments into operands:

1. positional arguments are operands: Tensors, Pending Tensors and Variables as they are (the
   executor reads a Variable as the op runs, and the tapes see the read), NumPy data copied
   now (``host_snapshot``: the op reads the data as it is when the op is called, as TF's
   does), another library's array (a TF EagerTensor, ``__array__``, DLPack) copied now with its
   own dtype, a list holding Tensors packed by the recorded Pack op, an object of a type with a
   registered conversion (``core.conversion``: an ``IndexedSlices`` is densified by its recorded
   op) converted, Python numbers left as numbers (JAX's weak typing gives TF's "a scalar takes
   the tensor's dtype");
2. static keyword parameters (axes, shapes, flags) are bound into the callable
   (``Primitive.bound``): they are part of the compiled replay's cache key, so hashable.

``bind1`` and ``bind2`` are the same entry for ops whose static parameters are already bound
(the op library's elementwise ops, reductions, matmul).  With no tape recording and plain
Tensor (or constant array) operands, all three call the jitted function at once, which is all
``EagerExecutor.run`` would do; anything else goes to the executor.  That is the one fast path,
and ``tests/test_ops_fastpaths.py`` checks it gives the executor's values and records.

Registered here too, because the core needs them: ``ReadVariableOp`` (a Variable read, as the
tape records it) and ``Pack`` (``convert_to_tensor`` of a list holding Tensors, ``tf.stack``).
"""
import functools
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .caches import Family
from .conversion import PEEK as _CONVERSION_PEEK, conversion_for
from .dtypes import _WIDE, require_representable
from .errors import InvalidArgumentError
from .executor import ACTIVE
from .state import _local
from .tensor import Pending, Tensor, _contains_tensor, _to_array, host_snapshot, is_foreign

_Array = type(jnp.zeros(()))   # the concrete array type

REGISTRY: "dict[str, Primitive]" = {}

#: Per op type: static parameter items -> the callable with them bound (bounded LRU).
_BOUND = Family("eager_jit_fixed", 256)


def _hashable(x: Any) -> Any:
    """A static parameter as a hashable value (lists and dicts become tuples)."""
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    try:
        hash(x)
    except TypeError:
        raise TypeError(f"static op parameter {x!r} is not hashable") from None
    return x


class Primitive:
    """One op type.  ``impl(*arrays, **static)`` is pure JAX.

    Eagerly an op runs ``impl`` through ``jax.jit`` with its static parameters bound
    (``bound``, one jitted callable per set of static values, cached): JAX's C++ dispatch with
    arrays only is faster than the Python dispatch of an eager ``jnp`` call, and about 20x
    faster for functions with a ``custom_jvp`` rule (TF's kink conventions).  Ops whose output
    shape depends on input values (``boolean_mask``, ``unique``) pass ``jit=False``.  The
    replay always traces ``impl`` itself.
    """

    __slots__ = ("name", "impl", "differentiable", "multiple_results", "nondiff_reason", "jit",
                 "_call0", "_bound", "__weakref__")

    #: Per output, per input: does the output depend on the input?  ``None`` (every op but a
    #: nested gradient's, ``autodiff.replay.GradientPrimitive``): each output on every input.
    #: A tape's slice follows it, so an output reached from no source gives those sources None.
    out_deps: "tuple[tuple[bool, ...], ...] | None" = None

    def __init__(self, name: str, impl: Callable[..., Any], differentiable: bool = True,
                 multiple_results: bool = False, nondiff_reason: Optional[str] = None, jit: bool = True):
        self.name = name
        self.impl = impl
        self.differentiable = differentiable
        self.multiple_results = multiple_results
        self.nondiff_reason = nondiff_reason or (None if differentiable else
                                                 f"op {name} has no gradient in TensorFlow")
        self.jit = jit
        self._call0 = jax.jit(impl) if jit else impl
        self._bound = _BOUND.new()

    def fixed(self, skey: tuple) -> Callable[..., Any]:
        """The callable with the static parameters ``skey`` (a tuple of items, hashable) bound:
        a call then passes arrays only, JAX's fastest dispatch (cached per ``skey``)."""
        if not skey:
            return self._call0
        fn = self._bound.get(skey)
        if fn is None:
            fn = functools.partial(self.impl, **dict(skey))
            fn = self._bound.setdefault(skey, jax.jit(fn) if self.jit else fn)
        return fn

    def bound(self, static: dict) -> "tuple[tuple, Callable[..., Any]]":
        """(``skey``, callable) for static parameters ``static``: ``skey`` the hashable items the
        tapes record, the callable ``impl`` with ``static`` bound (``fixed``).  An unhashable
        value (a list) is recorded as a tuple and bound as it is, not jitted: TypeError where
        the op is jitted (JAX hashes static values)."""
        if not static:
            return (), self._call0
        skey = tuple(static.items())
        try:
            return skey, self.fixed(skey)
        except TypeError:
            if self.jit:
                raise TypeError(f"the static parameters of op {self.name} must be hashable (tuples, "
                                f"not lists); got {static!r}") from None
            return _hashable(static), functools.partial(self.impl, **static)

    def __repr__(self) -> str:
        return f"Primitive({self.name!r})"


class PureResults(Primitive):
    """An op of several outputs computed by its jitted ``impl`` alone (a matrix decomposition): the
    deferred executor may leave it pending (``deferred_results``, as a nested gradient's op) rather
    than compute its pending inputs when it is called."""

    __slots__ = ()
    deferred_results = True


def define(name: str, impl: Callable[..., Any], *, differentiable: bool = True, multiple_results: bool = False,
           nondiff_reason: Optional[str] = None, jit: bool = True, pure_results: bool = False) -> Primitive:
    """Register a new op type; a name may be registered once (KeyError, as TF).

    ``impl(*arrays, **static)`` must be pure JAX; ``differentiable=False`` makes
    the op a cut for tapes (TF registers no gradient: its inputs get None);
    ``jit=False`` for ops whose output shape depends on input values;
    ``pure_results`` for a jitted op of several outputs that may stay pending (``PureResults``).
    """
    if name in REGISTRY:
        raise KeyError(f"Registering two ops with name '{name}'")
    if pure_results and not (jit and multiple_results):
        raise ValueError(f"op {name}: pure_results is for jitted ops of several outputs")
    cls = PureResults if pure_results else Primitive
    prim = cls(name, impl, differentiable, multiple_results, nondiff_reason, jit)
    REGISTRY[name] = prim
    return prim


def lookup(name: str) -> Primitive:
    try:
        return REGISTRY[name]
    except KeyError:
        raise LookupError(f"No op registered under the type name {name!r}") from None


_UNSEEN = object()


def operand(a: Any) -> Any:
    """One positional argument of ``bind`` as an operand (see the module docstring)."""
    t = type(a)
    if t is Tensor or t is Pending or t is _Array:
        return a
    if isinstance(a, np.ndarray):
        if a.dtype.kind in "OSU":
            raise TypeError(f"an op got host strings (a NumPy array of dtype {a.dtype}): tapejax has no string "
                            "tensors (XLA has no string type); strings (tf.strings results, a string SparseTensor's "
                            "values) stay on the host and only the host string ops (tf.strings, tf.sparse.to_dense / "
                            "from_dense / cross / cross_hashed, tf.lookup) take them")
        if a.dtype in _WIDE:   # (float64 / complex128: TF's dtype; never narrowed quietly)
            require_representable(a.dtype, "a NumPy operand")
        return host_snapshot(a)
    if isinstance(a, (list, tuple)):   # nested data, possibly holding Tensors
        return pack_nested(a) if _contains_tensor(a) else Tensor(_to_array(a, None, "value"))
    conv: Any = _CONVERSION_PEEK(t, _UNSEEN)
    if conv is _UNSEEN:
        conv = conversion_for(t)
    if conv is not None:   # a registered conversion (``tf.register_tensor_conversion_function``)
        out = conv(a)
        if out is not NotImplemented:
            return out
    if is_foreign(a):   # a TF EagerTensor, a PyTorch tensor ...: copied now, its dtype kept
        return _to_array(a, None, "value")
    return a   # a Tensor subclass, a Variable, a Python scalar, a tracer: as it is


#: What a ``FloatingPointError`` from an op becomes (JAX's NaN/Inf checker, turned on by
#: ``tf.debugging.enable_check_numerics``): ``NUMERICS_ERROR[0](prim, call, operands, error)``
#: gives the exception to raise (``tapejax.compat.debugging`` sets it: TF's error and message).
NUMERICS_ERROR: "list[Optional[Callable[..., BaseException]]]" = [None]


def _numerics_error(prim: "Primitive", call: Callable[..., Any], operands: tuple, e: FloatingPointError):
    make = NUMERICS_ERROR[0]
    return e if make is None else make(prim, call, operands, e)


#: Operand types ``operand`` returns as they are (checked for all arguments in one C call).
_AS_IS = frozenset({Tensor, Pending, _Array, float, int, bool})
#: Operands ``bind`` runs at once when no tape records (as ``bind1`` / ``bind2`` do).
_PLAIN = frozenset({Tensor, _Array})


def bind(prim: Primitive, *args: Any, **static: Any) -> Any:
    """Run ``prim`` on ``args`` with static parameters ``static`` (the active executor runs it
    and offers it to every recording tape); a Tensor, or a tuple of them."""
    skey, call = prim.bound(static) if static else ((), prim._call0)
    try:
        if not _local.tapes and _PLAIN.issuperset(map(type, args)):
            # nothing records, Tensors and constant arrays: what the eager executor does (``bind1``)
            out = call(*[a._value if type(a) is Tensor else a for a in args])
            return tuple([Tensor(o) for o in out]) if prim.multiple_results else Tensor(out)
    except FloatingPointError as e:
        raise _numerics_error(prim, call, args, e) from None
    operands = args if _AS_IS.issuperset(map(type, args)) else tuple([operand(a) for a in args])
    try:
        if not prim.multiple_results:   # (the executor's entries for one and two operands)
            n = len(operands)
            if n == 1:
                return ACTIVE.executor.run1(_local.tapes, prim, call, skey, operands[0])
            if n == 2:
                return ACTIVE.executor.run2(_local.tapes, prim, call, operands[0], operands[1], skey)
        return ACTIVE.executor.run(_local.tapes, prim, call, skey, operands)
    except FloatingPointError as e:
        raise _numerics_error(prim, call, operands, e) from None


def bind1(prim: Primitive, call: Callable[..., Any], skey: tuple, x: Any) -> Tensor:
    """``bind`` for a one-output op on one operand, ``call`` being ``prim.fixed(skey)`` (or a
    checked variant of it, see ``tapejax.ops._registry``)."""
    tapes = _local.tapes
    try:
        if not tapes and type(x) is Tensor:   # nothing records: what the eager executor does
            return Tensor(call(x._value))
        return ACTIVE.executor.run1(tapes, prim, call, skey, x)
    except FloatingPointError as e:
        raise _numerics_error(prim, call, (x,), e) from None


def unary_entry(call: Callable[..., Any], checked: Callable[[Any], Any]) -> Callable[..., Any]:
    """The public function of a one-operand op (``tf.tanh``): ``bind1``'s fast path written into
    it (no tape recording and a plain Tensor: the jitted ``call`` at once, one Python call per
    op), and ``checked(x)``, the op library's path (dtype lists, composite tensors, TF's errors,
    then ``bind1``), for anything else and for a call the fast path could not finish (``checked``
    raises its error)."""
    def op(x, name=None):
        if not _local.tapes and type(x) is Tensor:
            try:
                return Tensor(call(x._value))
            except Exception:   # (a refused dtype, a JAX complaint, a NaN check: ``checked`` says what)
                pass
        return checked(x)
    return op


def bind2(prim: Primitive, call: Callable[..., Any], x: Any, y: Any) -> Tensor:
    """``bind`` for a one-output op with no static parameters on two operands (Tensors,
    Pending Tensors, Variables or constant arrays), ``call`` being ``prim``'s jitted function
    (or a checked variant of it)."""
    tapes = _local.tapes
    try:
        if not tapes:   # nothing records: plain Tensors and arrays run now, as the eager executor would
            tx, ty = type(x), type(y)
            if tx is Tensor:
                if ty is Tensor:
                    return Tensor(call(x._value, y._value))
                if ty is _Array:
                    return Tensor(call(x._value, y))
            elif tx is _Array and ty is Tensor:
                return Tensor(call(x, y._value))
        return ACTIVE.executor.run2(tapes, prim, call, x, y)
    except FloatingPointError as e:
        raise _numerics_error(prim, call, (x, y), e) from None


def with_id(value: Any, id_: int) -> Tensor:
    """A Tensor view of ``value`` that tapes see as the tensor ``id_``."""
    t = Tensor.__new__(Tensor)
    t._value = value
    t._id = id_
    return t


# The read of a Variable: recorded by tapes as a node whose replay is
# "the value that was read + the Variable's perturbation".
READ = Primitive("ReadVariableOp", lambda v: v, jit=False)

#: ``tf.stack``'s op, and what ``convert_to_tensor`` records for a list holding Tensors.
PACK = define("Pack", lambda *xs, axis: jnp.stack(xs, axis=axis))


def pack_nested(value: "list | tuple") -> Tensor:
    """A (nested) list holding Tensors as one Tensor: a recorded Pack per level, as TF's
    conversion does (the numbers in it take the first Tensor's dtype)."""
    items = [(pack_nested(v) if isinstance(v, (list, tuple)) else v) for v in value]
    dtype = next((np.dtype(x._meta.dtype) for x in items if _is_tensor_like(x)), None)
    items = [x if _is_tensor_like(x) else Tensor(_to_array(x, dtype, "value")) for x in items]
    shapes = {tuple(x._meta.shape) for x in items}
    if len(shapes) > 1:
        raise InvalidArgumentError(None, None, f"Shapes of all inputs must match (argument `values`): got "
                                   f"{sorted(shapes)} [Op:Pack]")
    return bind(PACK, *items, axis=0)


def _is_tensor_like(x: Any) -> bool:
    return isinstance(x, Tensor) or hasattr(x, "_read")
