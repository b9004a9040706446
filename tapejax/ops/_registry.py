"""Helpers that turn rows of op tables into registered primitives and TF-named functions.

An op family module declares its ops as data (TF type name, public name,
pure JAX function) and calls ``unary_ops`` / ``binary_ops`` (or ``prim`` for
one op with a hand-written wrapper); the functions they make all go through
``_primitives.bind``, or through one of its fast paths, which give the same
values and record the same node (``tests/test_ops_fastpaths.py``):

* elementwise ops inline ``bind`` for one Tensor (of an allowed dtype), or two
  of one dtype: the jitted call, or, while tapes record, ``run_recorded``
  (deferred when it may be, see ``_lazy``; a ``Pending`` input is taken by its
  thunk, never computed here); binary ops defer two Tensors, pending Tensors
  or Variables of one dtype (or one and a cached number) without ``bind``
  (``_defer_binary``: the output aval first, so a bad op reads nothing);
* a Python number next to a float32/float64/bfloat16 Tensor becomes a cached
  device array of the Tensor's dtype (``scalar_constant``): TF's conversion,
  without JAX converting a Python scalar on every call;
* a unary op with a dtype list checks the dtype kind inside its jitted call
  (``kind_jit``), i.e. when JAX traces, not on every call; a refused dtype
  takes the checked path (TF's error);
* ``plain_jit`` ops (matmul, gather) check ranks and dtypes inside the jitted
  function, i.e. only when JAX traces a new input signature; inputs that fail
  the check (``NotPlain``) take the op's checked path, which raises TF's error;
* reductions bind an int ``axis`` into the jitted callable (``Primitive.fixed``),
  so the call passes arrays only.

``bind`` runs each op's pure function eagerly through ``jax.jit`` (static
keywords hashed by jit; see ``_primitives.Primitive``): one C++ dispatch per
eager op, whatever the function's size, so ``jax.custom_jvp`` conventions
(``_grads``) cost nothing extra.  Ops whose output shape depends on input
values are declared ``jit=False``.  Static parameters are keyword-only
(``fn(x, *, axis)``) and hashable (tuples).

Every public op function carries ``_tf_types``: the TF type names it binds
(read by ``tools/gen_ops_table.py`` and the coverage test).
"""
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define, record_simple, run_recorded
from ..core.caches import LRU
from ..core.errors import InvalidArgumentError
from ..core.state import _local
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..runtime.pending import _AVAL_PEEK, Pending, _Thunk, aval_for, can_defer, concrete, defer, defer_untaped

_Array = type(jnp.zeros(()))  # the concrete array type (``jax.Array`` is abstract)
_HAS_COMMITTED = hasattr(jnp.zeros(()), "_committed")   # what ``_lazy.concrete`` reads

_TENSORISH = (Tensor, Variable)


def dtype_of(x):
    """NumPy dtype of a Tensor/Variable; None for Python data."""
    if isinstance(x, _TENSORISH):
        return np.dtype(x._meta.dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return None


_PY_NUMBERS = (float, int)  # matched with ``type(v) in``: bool is not one of them
#: Python numbers used with a float32/float64/bfloat16 tensor, as device arrays of that dtype.
_SCALARS = LRU("scalar_constants", 4096)
_SCALAR_DTYPES = frozenset([np.dtype(np.float32), np.dtype(np.float64), np.dtype(jnp.bfloat16)])


def scalar_constant(number, dtype):
    """``number`` (a Python float or int used with a tensor of ``dtype``) as a cached device array of
    that dtype, or ``number`` itself where it is not cached.

    TF converts the number to the tensor's dtype, which is what JAX's weak typing computes too,
    but a Python scalar argument costs every jitted call a conversion (about 2 µs here); a
    cached array does not.  Only float32/float64/bfloat16 tensors (a number always converts
    to them, and float16 could overflow with a warning), nonzero finite-or-infinite numbers (0.0
    and -0.0 are equal keys, NaN matches nothing) and ints below 2**31 are cached.
    """
    kind = type(number)
    if (dtype in _SCALAR_DTYPES and number and number == number
            and (kind is float or (kind is int and -_INT_BOUND <= number < _INT_BOUND))):
        key = (number, dtype)
        a = _SCALARS.get(key)
        if a is None:
            with jax.ensure_compile_time_eval():  # a concrete array even while a function traces
                a = _SCALARS.setdefault(key, jnp.asarray(number, dtype))
        return a
    return number


_INT_BOUND = 2 ** 31


def check_binary(x, y, op_type):
    """TF's dtype rule for elementwise binary ops: both tensors share one dtype;
    a Python number takes the tensor's dtype (a float into an int tensor is a TypeError)."""
    if type(x) is Tensor and type(y) is Tensor and x._value.dtype == y._value.dtype:
        return  # the hot path: two tensors of one dtype
    dx = dtype_of(x) if isinstance(x, _TENSORISH) else None
    dy = dtype_of(y) if isinstance(y, _TENSORISH) else None
    if dx is not None and dy is not None:
        if dx != dy:
            raise InvalidArgumentError(
                None, None, f"cannot compute {op_type} as input #1(zero-based) was expected to be a "
                f"{dx.name} tensor but is a {dy.name} tensor [Op:{op_type}]")
        return
    d, other = (dx, y) if dx is not None else (dy, x)
    if d is not None and d.kind in "iub" and isinstance(other, float) and not float(other).is_integer():
        if op_type == "AddV2" and dx is not None:  # TF's tf.add / `t + 1.5` convert 1.5 to a float tensor
            raise InvalidArgumentError(
                None, None, f"cannot compute AddV2 as input #1(zero-based) was expected to be a {d.name} "
                f"tensor but is a float tensor [Op:AddV2]")
        raise TypeError(f"Cannot convert {other!r} to EagerTensor of dtype {d.name}")


class NotPlain(Exception):
    """Raised while a ``plain_jit`` callable traces inputs that need the op's full checks."""


def plain_jit(prim, guard):
    """``prim``'s function, jitted, for an op's fast path: ``guard(*arrays)`` (shapes and dtypes)
    runs only when JAX traces, i.e. once per input signature, and a False raises ``NotPlain``
    so that the caller takes its checked path (which raises TF's error, or handles the case)."""
    impl = prim.impl

    def plain(*arrays):
        if not guard(*arrays):
            raise NotPlain
        return impl(*arrays)

    plain.__name__ = f"{prim.name}_plain"
    return jax.jit(plain)


def call_plain2(prim, fn, a, b):
    """``bind(prim, a, b)`` through ``fn`` (a ``plain_jit`` of ``prim``) for two Tensors or
    Variables (Variables only while no ``tapejax.function`` traces: the caller checks).  Raises
    what ``fn`` raises before anything is read or recorded; then reads the Variables as ``bind``
    does (the tapes record each read, then the op)."""
    tapes = _local.tapes
    if tapes and can_defer(tapes):
        va = _operand(a)
        vb = _operand(b)
        if concrete((va, vb)):
            aval = aval_for(fn, (va, vb))  # raises what the call would, before anything is read
            if type(a) is Variable:
                a = a._read_deferred(tapes)
                va = _operand(a)
            if type(b) is Variable:
                b = b._read_deferred(tapes)
                vb = _operand(b)
            return defer(tapes, prim, fn, (), (a._id, b._id), (va, vb), aval)
    result = Tensor(fn(a._value, b._value))
    if tapes:
        if type(a) is Variable:
            a = a._read()
        if type(b) is Variable:
            b = b._read()
        record_simple(tapes, prim, (), (a._id, b._id), (a._value, b._value), result)
    return result


def call_one(prim, call, skey, x, v, op_type):
    """``bind(prim, x, **dict(skey))`` for one Tensor ``x`` (value ``v``) through ``call`` (the
    jitted callable with ``skey`` bound): JAX's complaint as TF's error, then ``bind``'s record.
    (The unary-op template inlines this body: it is the hottest path.)"""
    tapes = _local.tapes
    try:
        if tapes:
            return run_recorded(tapes, prim, call, skey, (x._id,), (v,))
        return Tensor(call(v))
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


#: Every op type the op library registered, in order (read by the coverage table and test).
DEFINED = []


def prim(op_type, fn, *, differentiable=True, multiple_results=False, jit=True, nondiff_reason=None):
    """Register ``fn`` (pure JAX; keyword-only parameters are static) as TF op ``op_type``."""
    DEFINED.append(op_type)
    return define(op_type, fn, differentiable=differentiable, multiple_results=multiple_results,
                  nondiff_reason=nondiff_reason, jit=jit)


def tf_types(*types):
    """Decorator: note the TF op types a hand-written public wrapper binds."""
    def deco(fn):
        fn._tf_types = types
        return fn
    return deco


def op_error(e, op_type):
    """A JAX shape/dtype complaint met while running ``op_type`` as TF's InvalidArgumentError
    (JAX's own tracer errors, and anything else, pass through unchanged)."""
    if type(e) in (TypeError, ValueError):
        return InvalidArgumentError(None, None, f"{e} [Op:{op_type}]")
    return e


# Kinds TF's kernels accept: "float" = floating or complex, "real" = floating only.
_KINDS = {"float": "fcV", "real": "fV", None: None}
_ALLOWED = {"float": "bfloat16, half, float, double, complex64, complex128",
            "real": "bfloat16, half, float, double"}


def check_float(x, op_type, kinds="float", arg="x"):
    """TF's kernel dtype list: an int/bool tensor (or Python int) is an InvalidArgumentError."""
    if type(x) is Tensor:
        k = x._value.dtype.kind
    elif isinstance(x, _TENSORISH):
        k = x._meta.dtype.kind
    elif isinstance(x, (bool, int)):
        k = "b" if isinstance(x, bool) else "i"
    elif isinstance(x, (np.ndarray, np.generic)):
        k = x.dtype.kind
    else:
        return
    if k not in _KINDS[kinds]:
        dt = dtype_of(x)
        name = dt.name if dt is not None else ("bool" if k == "b" else "int32")
        raise InvalidArgumentError(
            None, None, f"Value for attr 'T' of {name} is not in the list of allowed values: "
            f"{_ALLOWED[kinds]} (argument `{arg}` of {op_type})")


# One-input elementwise op.  The hot path (a Tensor) is ``call_one``'s body, inlined (a function
# call is a few percent of an elementwise op); anything else goes through ``bind``.  For an op
# with a dtype list, ``_call`` checks the dtype kind while JAX traces (``kind_jit``), i.e. once
# per input signature: a refused dtype raises ``NotPlain`` and takes the checked path.
_UNARY_TEMPLATE = """
def make(_prim, _t, _k, _kinds, _call):
    def op({arg}, name=None):
        if type({arg}) is Tensor:
            tapes = _local.tapes
            try:
                if tapes:
                    return run_recorded(tapes, _prim, _call, (), ({arg}._id,), ({arg}._value,))
                return Tensor(_call({arg}._value))
            except NotPlain:
                pass
            except (TypeError, ValueError) as e:
                raise op_error(e, _t) from e
        elif type({arg}) is Pending:
            v = {arg}._thunk
            if _k is None or v.aval.dtype.kind in _k:
                tapes = _local.tapes
                try:
                    if tapes:
                        return run_recorded(tapes, _prim, _call, (), ({arg}._id,), (v,))
                    r = defer_untaped(_call, (v,))
                    if r is not None:
                        return r
                except (TypeError, ValueError) as e:
                    raise op_error(e, _t) from e
        if _kinds is not None:
            check_float({arg}, _t, _kinds)
        try:
            return bind(_prim, {arg})
        except (TypeError, ValueError) as e:
            raise op_error(e, _t) from e
    return op
"""


def kind_jit(prim, kinds):
    """``prim``'s function, jitted, refusing (``NotPlain``, while JAX traces) an input whose
    dtype kind is not in ``kinds``: the dtype check of an op's fast path, paid once per input
    signature instead of on every call."""
    impl = prim.impl

    def checked(x):
        if x.dtype.kind not in kinds:
            raise NotPlain
        return impl(x)

    checked.__name__ = f"{prim.name}_kinds"
    return jax.jit(checked)


def unary_ops(namespace, table):
    """``table``: rows (public name, TF type, jax fn[, differentiable[, dtypes[, argument name]]]).

    ``dtypes``: None (any numeric), ``"float"`` (float/complex) or ``"real"``
    (float): other input dtypes raise InvalidArgumentError, as TF's kernels.
    """
    for row in table:
        name, op_type, fn = row[:3]
        differentiable = row[3] if len(row) > 3 else True
        kinds = row[4] if len(row) > 4 else None
        arg = row[5] if len(row) > 5 else "x"  # TF's argument name (``features`` for activations)
        p = prim(op_type, fn, differentiable=differentiable)
        ns = {"Tensor": Tensor, "Pending": Pending, "_local": _local, "run_recorded": run_recorded, "bind": bind,
              "check_float": check_float, "op_error": op_error, "NotPlain": NotPlain,
              "defer_untaped": defer_untaped}
        exec(_UNARY_TEMPLATE.format(arg=arg), ns)  # noqa: S102 - a fixed template
        call = p._call0 if kinds is None else kind_jit(p, _KINDS[kinds])
        op = ns["make"](p, op_type, _KINDS[kinds], kinds, call)
        op.__name__ = op.__qualname__ = name
        op.__doc__ = f"``tf.math.{name}`` (TF op type ``{op_type}``), elementwise."
        op._tf_types = (op_type,)
        namespace[name] = op


_OPERANDS = (Tensor, Pending, Variable)


#: ``Variable._read_deferred`` (an operand known to be a Variable by its type ``tx``/``ty``)
_READ_DEFERRED: Any = Variable._read_deferred


def _defer_binary(tapes, prim, op_type, kinds, call, x: Any, y: Any, tx, ty, converted):
    """A binary op's fast path while plain tapes record (``bind``'s deferred case, written
    out): two Tensors, pending Tensors or Variables of one dtype, or one of them and a Python
    number ``converted`` to a cached array (as ``x`` or ``y``).  None where the op needs
    ``bind`` (other operands, a mixed dtype: its error, an input that may not be deferred)."""
    if converted:
        if type(x) is _Array:
            vx, ix = x, 0
            vy, iy = _operand(y), y._id
        else:
            vx, ix = _operand(x), x._id
            vy, iy = y, 0
        if not concrete((vx, vy)):
            return None
        aval = None
    else:
        # ``_operand`` and ``concrete``, written out (the hottest path of a training step)
        gx, gy = _GET_OPERAND(tx), _GET_OPERAND(ty)
        if gx is None or gy is None:
            return None
        vx, vy = gx(x), gy(y)
        if _HAS_COMMITTED:
            t = type(vx)
            if t is not _Thunk and (t is not _Array or vx._committed):
                return None
            t = type(vy)
            if t is not _Thunk and (t is not _Array or vy._committed):
                return None
        elif not concrete((vx, vy)):   # pragma: no cover - a JAX without the attribute
            return None
        ax, ay = vx.aval, vy.aval
        if ax.dtype != ay.dtype:
            return None
        ix, iy = x._id, y._id
        aval = _AVAL_PEEK((call, ax, ay))
    if aval is None or kinds is not None:
        if kinds is not None:
            check_float(x, op_type, kinds, "x")
            check_float(y, op_type, kinds, "y")
        try:
            aval = aval_for(call, (vx, vy))  # raises what the call would, before a Variable is read
        except (TypeError, ValueError) as e:
            raise op_error(e, op_type) from e
    if tx is Variable:
        x = _READ_DEFERRED(x, tapes)
        vx, ix = _operand(x), x._id
    if ty is Variable:
        y = _READ_DEFERRED(y, tapes)
        vy, iy = _operand(y), y._id
    return defer(tapes, prim, call, (), (ix, iy), (vx, vy), aval)


#: An operand's array or thunk by its type (``_operand`` without the bare array).
_GET_OPERAND = {Tensor: operator.attrgetter("_value"), Pending: operator.attrgetter("_thunk"),
                Variable: operator.attrgetter("_val")}.get


def _operand(v):
    """An op's input as an array or thunk (a Variable's pending update stays a thunk: its
    ``_val``); None for what ``bind`` must convert."""
    t = type(v)
    if t is Tensor:
        return v._value
    if t is Pending:
        return v._thunk
    if t is Variable:
        return v._share()   # (a pending op's input: the buffer is no longer the Variable's alone)
    if t is _Array:
        return v
    return None


def _defer_untaped_binary(call, x, y):
    """A binary op no tape records with a pending input, deferred (``_lazy.defer_untaped``)."""
    vx, vy = _operand(x), _operand(y)
    if vx is None or vy is None:
        return None
    return defer_untaped(call, (vx, vy))


def binary_ops(namespace, table):
    """``table``: rows (public name, TF type, jax fn[, differentiable[, dtypes]])."""
    for row in table:
        name, op_type, fn = row[:3]
        differentiable = row[3] if len(row) > 3 else True
        kinds = row[4] if len(row) > 4 else None
        p = prim(op_type, fn, differentiable=differentiable)

        def op(x, y, name=None, _prim=p, _t=op_type, _kinds=kinds, _call=p._call0):
            tx, ty = type(x), type(y)
            # ``t * 2.0`` eagerly: the number as a cached array of the tensor's dtype (which passes
            # TF's dtype rule by construction: a float tensor and a number)
            c = None
            if ty in _PY_NUMBERS:
                if tx is Tensor and type(x._value) is _Array:
                    c = y = scalar_constant(y, x._value.dtype)
                elif tx is Pending:
                    c = y = scalar_constant(y, x._thunk.aval.dtype)
            elif tx in _PY_NUMBERS:
                if ty is Tensor and type(y._value) is _Array:
                    c = x = scalar_constant(x, y._value.dtype)
                elif ty is Pending:
                    c = x = scalar_constant(x, y._thunk.aval.dtype)
            tapes = _local.tapes
            if tapes and can_defer(tapes):
                r = _defer_binary(tapes, _prim, _t, _kinds, _call, x, y, tx, ty, type(c) is _Array)
                if r is not None:
                    return r
            if type(c) is not _Array:  # not converted: TF's dtype rule
                check_binary(x, y, _t)
            if _kinds is not None:
                check_float(x, _t, _kinds, "x")
                check_float(y, _t, _kinds, "y")
            try:
                if not _local.tapes:  # ``bind`` inlined: nothing records
                    if tx is Tensor:
                        if ty is Tensor:
                            return Tensor(_call(x._value, y._value))
                        if type(y) is _Array:
                            return Tensor(_call(x._value, y))
                    elif ty is Tensor and type(x) is _Array:
                        return Tensor(_call(x, y._value))
                    if tx is Pending or ty is Pending:   # on a pending value: stays pending
                        r = _defer_untaped_binary(_call, x, y)
                        if r is not None:
                            return r
                return bind(_prim, x, y)
            except (TypeError, ValueError) as e:
                raise op_error(e, _t) from e

        op.__name__ = op.__qualname__ = name
        op.__doc__ = f"``tf.math.{name}`` (TF op type ``{op_type}``), elementwise with broadcasting."
        op._tf_types = (op_type,)
        namespace[name] = op


def static_axis(axis):
    """An axis argument as a hashable static value (None, int or tuple of ints)."""
    if axis is None:
        return None
    if isinstance(axis, _TENSORISH):
        axis = np.asarray(axis._value).tolist()
    if isinstance(axis, (list, tuple, np.ndarray)):
        flat = np.asarray(axis).reshape(-1)
        if flat.size and flat.dtype.kind not in "iu":  # TF: the Tidx attr rejects the dtype
            raise InvalidArgumentError(None, None, f"Argument `axis` must be an int or a list of ints; "
                                       f"got {axis!r} (dtype {flat.dtype.name})")
        return tuple(int(a) for a in flat)
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"Argument `axis` must be an int or a list of ints; got {axis!r} of type "
                        f"{type(axis).__name__}")
    return int(axis)


def static_shape(shape):
    if isinstance(shape, _TENSORISH):
        shape = np.asarray(shape._value).tolist()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def static_dtype(dtype):
    return _dtypes.as_dtype(dtype).name
