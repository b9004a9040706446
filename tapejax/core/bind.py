"""THE op registry and the one entry point every op goes through: ``bind``.

A ``Primitive`` is data: a TF type name (``"AddV2"``, ``"MatMul"`` ...), a
pure JAX function of arrays and static keyword parameters, and whether TF
differentiates it.  ``bind(prim, *args, **static)``

1. unwraps its positional arguments (Tensors give their array, Variables are
   *read*, which tapes see; Python numbers stay Python numbers so JAX's weak
   typing gives TF's "scalar takes the tensor's dtype");
2. runs ``prim.impl`` eagerly (or on tracers inside ``jax.jit``), or, while
   plain tapes record a one-output op, defers it (``_lazy``: the result is a
   ``Pending`` Tensor whose value the compiled gradient computes; a
   ``Pending`` input is passed on as its thunk, not computed);
3. wraps the outputs as Tensors;
4. offers the op to each recording tape, which keeps it iff one of the
   inputs is tracked on that tape (O(inputs) set lookups; nothing at all when
   no tape records).  A deferred op no tape keeps runs at once.

Positional arguments are always array-likes; everything that shapes the
computation (axes, shapes, flags) is a static keyword and part of the
compiled replay's cache key, so it must be hashable.
"""
import functools

import jax
import numpy as np

from ..runtime.pending import Pending, _Thunk, can_defer, concrete, defer, force_all
from .caches import Family
from .state import _local
from .tensor import Tensor, convert_to_tensor, host_snapshot, is_foreign

REGISTRY = {}

#: Per op type: static keyword names -> the jitted eager callable (bounded LRU).
_EAGER_JIT = Family("eager_jit", 32)
#: Per op type: static parameter items -> the jitted eager callable with them bound (bounded LRU).
_EAGER_FIXED = Family("eager_jit_fixed", 64)


class Primitive:
    """One op type.  ``impl(*arrays, **static)`` is pure JAX.

    Eagerly, ``bind`` calls ``impl`` through ``jax.jit`` (one jitted object per
    set of static keyword names, static arguments hashed by jit): JAX's C++
    dispatch is faster than the Python dispatch of an eager ``jnp`` call, and
    about 20x faster for functions with a ``custom_jvp`` rule (TF's kink
    conventions).  Ops whose output shape depends on input values
    (``boolean_mask``, ``unique``) pass ``jit=False``.  The replay always
    traces ``impl`` itself.
    """

    __slots__ = ("name", "impl", "differentiable", "multiple_results", "nondiff_reason", "jit",
                 "_call0", "_calls", "_fixed", "__weakref__")

    def __init__(self, name, impl, differentiable=True, multiple_results=False, nondiff_reason=None,
                 jit=True):
        self.name = name
        self.impl = impl
        self.differentiable = differentiable
        self.multiple_results = multiple_results
        self.nondiff_reason = nondiff_reason or (None if differentiable else
                                                 f"op {name} has no gradient in TensorFlow")
        self.jit = jit
        self._call0 = jax.jit(impl) if jit else impl
        self._calls = _EAGER_JIT.new()
        self._fixed = _EAGER_FIXED.new()

    def fixed(self, skey):
        """The eager callable with the static parameters ``skey`` (a tuple of items) bound: a
        call then passes arrays only, JAX's fastest dispatch (cached per ``skey``)."""
        fn = self._fixed.get(skey)
        if fn is None:
            fn = functools.partial(self.impl, **dict(skey))
            fn = self._fixed.setdefault(skey, jax.jit(fn) if self.jit else fn)
        return fn

    def eager(self, static):
        """The callable ``bind`` uses for these static keyword names."""
        if not static:
            return self._call0
        names = tuple(static)
        fn = self._calls.get(names)
        if fn is None:
            fn = self._calls.setdefault(
                names, jax.jit(self.impl, static_argnames=names) if self.jit else self.impl)
        return fn

    def __repr__(self):
        return f"Primitive({self.name!r})"


def define(name, impl, *, differentiable=True, multiple_results=False, nondiff_reason=None, jit=True):
    """Register a new op type; a name may be registered once (KeyError, as TF).

    ``impl(*arrays, **static)`` must be pure JAX; ``differentiable=False`` makes
    the op a cut for tapes (TF registers no gradient: its inputs get None);
    ``jit=False`` for ops whose output shape depends on input values.
    """
    if name in REGISTRY:
        raise KeyError(f"Registering two ops with name '{name}'")
    prim = Primitive(name, impl, differentiable, multiple_results, nondiff_reason, jit)
    REGISTRY[name] = prim
    return prim


def lookup(name):
    try:
        return REGISTRY[name]
    except KeyError:
        raise LookupError(f"No op registered under the type name {name!r}") from None


def _override_for(name, mappings):
    """The gradient ``gradient_override_map`` names for op type ``name`` on this thread."""
    for mapping in reversed(mappings):
        if name in mapping:
            return mapping[name]
    return None


def unwrap(a):
    """(value, id) of one op argument; id 0 for untracked constants.  A NumPy array is copied
    now (``host_snapshot``): the op, its tape node and its pending thunk read the data as it
    was when the op was called, as TF's do."""
    if type(a) is Tensor:
        return a._value, a._id
    if isinstance(a, np.ndarray):
        return host_snapshot(a), 0
    read = getattr(a, "_read", None)
    if read is not None:
        t = read()
        return t._value, t._id
    if isinstance(a, Tensor):
        return a._value, a._id
    if isinstance(a, (list, tuple)):  # nested data (possibly holding Tensors)
        t = convert_to_tensor(a)
        return t._value, t._id
    if is_foreign(a):  # a TF EagerTensor, a PyTorch tensor ...: copied now, its dtype kept
        return convert_to_tensor(a)._value, 0
    return a, 0  # Python scalars and arrays are constants; JAX converts them


def bind(prim, *args, **static):
    """Run ``prim`` on ``args`` and record it on every tape that tracks an input."""
    tapes = _local.tapes
    if not tapes:  # nothing records: values only
        return _run(prim, static, [a._value if type(a) is Tensor else unwrap(a)[0] for a in args])
    vals = []
    ids = []
    pending = False
    for a in args:
        ta = type(a)
        if ta is Tensor:
            vals.append(a._value)
            ids.append(a._id)
        elif ta is Pending:  # a recorded op's result, not computed yet: its thunk is the value
            vals.append(a._thunk)
            ids.append(a._id)
            pending = True
        else:
            v, i = unwrap(a)
            vals.append(v)
            ids.append(i)
    simple = not (prim.multiple_results or _local.overrides)
    if simple:
        skey = tuple(static.items()) if static else ()
        ids, vals = tuple(ids), tuple(vals)
        if prim.jit and can_defer(tapes) and concrete(vals):
            try:
                call = prim.fixed(skey) if skey else prim._call0
            except TypeError:  # an unhashable static value: run it now
                pass
            else:
                return defer(tapes, prim, call, skey, ids, vals)
    if pending:
        vals = tuple(force_all(vals))
    result = _run(prim, static, vals)
    if simple:
        for tape in tapes:
            tape._record_simple(prim, skey, ids, vals, result)
    else:
        _record(tapes, prim, static, ids, vals, result)
    return result


def run_recorded(tapes, prim, call, skey, ids, vals):
    """An op's fast path while ``tapes`` record: ``call(*vals)`` (``call``: ``prim``'s jitted
    function with ``skey`` bound; ``vals`` arrays or thunks) deferred when it may be (``_lazy``),
    else run now; recorded as ``bind`` records it."""
    if can_defer(tapes) and concrete(vals):
        return defer(tapes, prim, call, skey, ids, vals)
    for v in vals:
        if type(v) is _Thunk:
            vals = tuple(force_all(vals))
            break
    result = Tensor(call(*vals))
    record_simple(tapes, prim, skey, ids, vals, result)
    return result


def record_simple(tapes, prim, skey, ids, vals, result):
    """Record a one-output op (static parameters as the items tuple ``skey``; ``ids`` and
    ``vals`` tuples) on ``tapes``: what ``bind`` records, for the ops' own fast paths."""
    if _local.overrides:
        _record(tapes, prim, dict(skey), ids, vals, result)
    else:
        for tape in tapes:
            tape._record_simple(prim, skey, ids, vals, result)


def _run(prim, static, vals):
    out = (prim.eager(static) if static else prim._call0)(*vals, **static)
    if prim.multiple_results:
        return tuple(Tensor(o) for o in out)
    return Tensor(out)


def _record(tapes, prim, static, ids, vals, result):
    """Offer the op to every recording tape, with this thread's gradient override for it."""
    ov = _local.overrides
    grad_type = _override_for(prim.name, ov) if ov else None
    for tape in tapes:
        tape._record_op(prim, static, grad_type, ids, vals, result)


def with_id(value, id_):
    """A Tensor view of ``value`` that tapes see as the tensor ``id_``."""
    t = Tensor.__new__(Tensor)
    t._value = value
    t._id = id_
    return t


# The read of a Variable: recorded by tapes as a node whose replay is
# "the value that was read + the Variable's perturbation".
READ = Primitive("ReadVariableOp", lambda v: v, jit=False)
