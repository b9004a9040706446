"""Helpers that turn rows of op tables into registered primitives and TF-named functions.

An op family module declares its ops as data (TF type name, public name, pure JAX function)
and calls ``unary_ops`` / ``binary_ops`` (``_binary``, the binary ops' functions on this module's
checks) or ``prim`` for one op with a hand-written wrapper.
The functions they make check TF's argument rules (dtypes, the conversion of Python numbers)
and then run the op through the core's one entry point: ``bind``, or ``bind1``/``bind2`` where
the operands are already Tensors, pending Tensors or Variables and the static parameters are
bound into the callable (``Primitive.fixed``).  Both end in the active executor's ``run``
(``tapejax.core.executor``); ``tests/test_ops_fastpaths.py`` checks that each op gives
``bind``'s values and records.  What this module adds is TF's rules, cheaply:

* a Python number next to a float32/float64/bfloat16 Tensor becomes a cached device array of
  the Tensor's dtype (``scalar_constant``): TF's conversion, without JAX converting a Python
  scalar on every call;
* TF's dtype rule for binary ops reads dtypes without computing a pending value
  (``check_binary``);
* a unary op with a dtype list checks the dtype kind inside its jitted call (``kind_jit``),
  i.e. when JAX traces, not on every call; a refused dtype takes the checked path (TF's error);
* ``plain_jit`` ops (matmul, gather) check ranks and dtypes inside the jitted function, i.e.
  only when JAX traces a new input signature; inputs that fail the check (``NotPlain``) take
  the op's checked path, which raises TF's error;
* reductions bind an int ``axis`` into the jitted callable (``Primitive.fixed``), so the call
  passes arrays only.

Static parameters are keyword-only (``fn(x, *, axis)``) and hashable (tuples).  Ops whose output
values decide its shape are declared ``jit=False``.  Every public op function carries
``_tf_types``: the TF type names it binds (read by ``tools/gen_ops_table.py`` and the coverage
test).
"""
import math
import operator
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import bind, bind1, define, unary_entry
from ..core.caches import LRU
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, NotFoundError, OpError
from ..core.indexed_slices import IndexedSlices
from ..core.tensor import Lazy, Pending, Tensor, TensorShape, _contains_tensor
from ..core.variable import Variable

_Array = type(jnp.zeros(()))  # the concrete array type (``jax.Array`` is abstract)

_TENSORISH = (Tensor, Variable)


def dtype_of(x):
    """NumPy dtype of a Tensor/Variable (or an ``IndexedSlices``, densified by the op); None for
    Python data."""
    if isinstance(x, _TENSORISH):
        return np.dtype(x._meta.dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    if type(x) is IndexedSlices:
        return np.dtype(x.dtype._np)
    return None


_PY_NUMBERS = (float, int)  # matched with ``type(v) in``: bool is not one of them
#: Python numbers used with a float32/float64/bfloat16 tensor, as device arrays of that dtype.
_SCALARS = LRU("scalar_constants", 4096)
_SCALARS_PEEK = _SCALARS._data.get
_SCALAR_DTYPES = frozenset([np.dtype(np.float32), np.dtype(np.float64), np.dtype(jnp.bfloat16)])


def scalar_constant(number, dtype):
    """``number`` (a Python float or int used with a tensor of ``dtype``) as a cached device array of
    that dtype, or ``number`` itself where it is not cached.

    TF converts the number to the tensor's dtype, which is what JAX's weak typing computes too,
    but a Python scalar argument costs every jitted call a conversion (about 2 µs here); a
    cached array does not, and a tensor next to a cached constant takes the ops' fast path.
    Only float32/float64/bfloat16 tensors (a number always converts to them, and float16
    could overflow with a warning), finite-or-infinite numbers (a zero keyed with its sign:
    0.0 and -0.0 are equal keys; NaN matches nothing) and ints below 2**31 are cached.
    """
    kind = type(number)
    if (dtype in _SCALAR_DTYPES and number == number
            and (kind is float or (kind is int and -_INT_BOUND <= number < _INT_BOUND))):
        key = (number, dtype) if number else (kind, math.copysign(1.0, number), dtype)
        a = _SCALARS_PEEK(key)   # (a hit does not refresh recency, as the aval cache)
        if a is None:
            with jax.ensure_compile_time_eval():  # a concrete array even while a function traces
                a = _SCALARS.setdefault(key, jnp.asarray(number, dtype))
        return a
    return number


_INT_BOUND = 2 ** 31


def _fast_dtype(x):
    """An operand's dtype without computing it (None for Python data): a Tensor's, a pending
    Tensor's (its aval), a Variable's, a constant array's."""
    t = type(x)
    if t is Tensor:
        return x._value.dtype
    if t is Pending:
        return x._thunk.aval.dtype
    if t is Variable:
        return x._meta.dtype
    if t is _Array:
        return x.dtype
    return None


def constant_dtype(x):
    """The dtype a Python number next to ``x`` converts to as a cached constant
    (``scalar_constant``): a Tensor's holding a concrete array, a pending Tensor's, a Variable's
    whose value is concrete or pending; None elsewhere (inside a trace a number stays a number)."""
    t = type(x)
    if t is Tensor:
        v = x._value
        return v.dtype if type(v) is _Array else None
    if t is Pending:
        return x._thunk.aval.dtype
    if t is Variable and isinstance(x._val, _CONCRETE):
        return x._val.aval.dtype
    return None


#: TF's error (its conversion's) for None where an op wants a tensor: a None gradient in arithmetic.
NONE_OPERAND = "Attempt to convert a value (None) with an unsupported type (<class 'NoneType'>) to a Tensor."


def _staged_mismatch(op_type, dx, dy):
    """TF's error for two dtypes meeting in an op built inside a ``tf.function`` (the graph's
    op-definition check, a TypeError where the eager kernel's is an InvalidArgumentError)."""
    return TypeError(f"Input 'y' of '{op_type}' Op has type {dy} that does not match type {dx} of argument 'x'.")


def check_binary(x, y, op_type):
    """TF's dtype rule for elementwise binary ops: both tensors share one dtype;
    a Python number takes the tensor's dtype (a float into an int tensor is a TypeError).  Two
    tensors of different dtypes: InvalidArgumentError eagerly, TypeError inside a
    ``tapejax.function`` (TF's graph checks the op's dtypes when it is built)."""
    dx = _fast_dtype(x)
    if dx is not None and dx == _fast_dtype(y):
        return  # the hot path: two tensors (or a tensor and a converted number) of one dtype
    if x is None or y is None:   # (``w - lr * g`` with a None gradient)
        raise ValueError(NONE_OPERAND)
    dx = dtype_of(x) if isinstance(x, _TENSORISH) else None
    dy = dtype_of(y) if isinstance(y, _TENSORISH) else None
    if isinstance(x, (str, bytes)) or isinstance(y, (str, bytes)):
        _string_operand(x, y, dx, dy, op_type)
    if dx is not None and dy is not None:
        if dx != dy:
            if _state.traces_function():
                raise _staged_mismatch(op_type, dx.name, dy.name)
            raise InvalidArgumentError(
                None, None, f"cannot compute {op_type} as input #1(zero-based) was expected to be a "
                f"{dx.name} tensor but is a {dy.name} tensor [Op:{op_type}]")
        return
    d, other = (dx, y) if dx is not None else (dy, x)
    # (any Python float, 2.0 too: JAX would promote the int tensor to float32, where TF refuses)
    if d is not None and d.kind in "iub" and type(other) is float:
        if op_type == "AddV2" and dx is not None:  # TF's tf.add / `t + 1.5` convert 1.5 to a float tensor
            if _state.traces_function():
                raise _staged_mismatch(op_type, d.name, "float32")
            raise InvalidArgumentError(
                None, None, f"cannot compute AddV2 as input #1(zero-based) was expected to be a {d.name} "
                f"tensor but is a float tensor [Op:AddV2]")
        raise TypeError(f"Cannot convert {other!r} to EagerTensor of dtype {d.name}")
    # (a Python complex next to a real tensor: JAX would promote to complex64, where TF refuses)
    if d is not None and d.kind != "c" and type(other) is complex:
        if op_type == "AddV2" and dx is not None:  # `t + 1j` converts 1j to a complex128 tensor
            raise InvalidArgumentError(
                None, None, f"cannot compute AddV2 as input #1(zero-based) was expected to be a {d.name} "
                f"tensor but is a complex128 tensor [Op:AddV2]")
        raise TypeError(f"Cannot convert {other!r} to EagerTensor of dtype {d.name}")


def check_same_dtypes(ts, op_type):
    """TF's rule for an op of N inputs of one dtype (``Pack``, ``AddN``): input ``#i`` of another
    dtype than input 0 is an InvalidArgumentError (``clip_by_global_norm`` of float16 and float32
    gradients stacks their norms).  Returns ``ts``."""
    ds = [dtype_of(t) for t in ts]
    for i, d in enumerate(ds[1:], 1):
        if d is not None and ds[0] is not None and d != ds[0]:
            if _state.traces_function():   # (TF's graph: the op's definition refuses the list)
                raise TypeError(f"Tensors in list passed to 'values' of '{op_type}' Op have types "
                                f"[{', '.join('<NOT CONVERTIBLE TO TENSOR>' if x is None else x.name for x in ds)}] "
                                "that don't all match.")
            raise InvalidArgumentError(None, None, f"cannot compute {op_type} as input #{i}(zero-based) was expected "
                                       f"to be a {ds[0].name} tensor but is a {d.name} tensor [Op:{op_type}]")
    return ts


def _string_operand(x, y, dx, dy, op_type):
    """TF's errors for a Python string next to a tensor: ``t + "a"`` converts the string to a string
    tensor (InvalidArgumentError: dtypes differ), the other operators fail to convert it to the
    tensor's dtype (TypeError).  tapejax has no string tensors at all."""
    other, d = (y, dx) if dx is not None else (x, dy)
    name = d.name if d is not None else "float"
    if op_type == "AddV2" and d is not None:
        raise InvalidArgumentError(None, None, f"cannot compute AddV2 as input #1(zero-based) was expected to be a "
                                   f"{name} tensor but is a string tensor [Op:AddV2] (tapejax has no string "
                                   "tensors: keep strings in Python)")
    raise TypeError(f"Cannot convert {other!r} to EagerTensor of dtype {name} (tapejax has no string tensors: "
                    "keep strings in Python)")


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


#: Every op type the op library registered, in order (read by the coverage table and test).
DEFINED = []


def prim(op_type, fn, *, differentiable=True, multiple_results=False, jit=True, nondiff_reason=None,
         pure_results=False):
    """Register ``fn`` (pure JAX; keyword-only parameters are static) as TF op ``op_type``
    (``pure_results``: its outputs may stay pending, see ``core.bind.PureResults``)."""
    DEFINED.append(op_type)
    return define(op_type, fn, differentiable=differentiable, multiple_results=multiple_results,
                  nondiff_reason=nondiff_reason, jit=jit, pure_results=pure_results)


def registered(p):
    """A primitive the core registered itself (``Pack``), listed with the op library's."""
    DEFINED.append(p.name)
    return p


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
_KINDS = {"float": "fcV", "real": "fV", "real32": "f", "number": "iufcV", "signed": "ifcV", "bool": "b",
          None: None}
_ALLOWED = {"float": "bfloat16, half, float, double, complex64, complex128",
            "real": "bfloat16, half, float, double", "real32": "float, double",
            "number": "bfloat16, half, float, double, int8, int16, int32, int64, complex64, complex128",
            "signed": "bfloat16, half, float, double, int8, int16, int32, int64, complex64, complex128",
            "bool": "bool"}
#: Half-precision dtypes by TF's kernel-registry name.
_HALF = {np.dtype(np.float16): "half", np.dtype(_dtypes.bfloat16._np): "bfloat16"}


def no_half(x, op_type, arg, f16_error: "type[Exception]" = NotFoundError,
            bf16_error: "type[Exception]" = InvalidArgumentError,
            allowed: str = "float, double, complex64, complex128"):
    """An op TF registers no half-precision kernel for (nor has JAX one, or JAX's would differ):
    a float16 / bfloat16 ``x`` raises TF's error class for that dtype (float16: NotFoundError,
    "no kernel"; bfloat16: InvalidArgumentError, "not in the list of allowed values"; some ops'
    Python layers raise TypeError or ValueError first), naming the op and the argument, before
    anything runs, instead of JAX's NotImplementedError from inside the op."""
    d = dtype_of(x)
    if d is None:
        d = getattr(x, "dtype", None)
    name = _HALF.get(np.dtype(getattr(d, "_np", d))) if d is not None else None
    if name is None:
        return
    msg = (f"{op_type} has no {name} kernel (argument `{arg}` has dtype {name}; allowed: {allowed}): "
           f"cast it to float32 first [Op:{op_type}]")
    cls = f16_error if name == "half" else bf16_error
    raise cls(None, None, msg) if issubclass(cls, OpError) else cls(msg)


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
    elif x is None:   # (``tf.norm(g)``, ``tf.clip_by_norm(g, c)`` of a None gradient)
        raise ValueError(NONE_OPERAND)
    else:
        return
    if kinds == "real32" and k in "fV":   # (TF: no half kernel registered, NotFoundError for both)
        no_half(x, op_type, arg, bf16_error=NotFoundError, allowed=_ALLOWED[kinds])
    if k not in _KINDS[kinds]:
        dt = dtype_of(x)
        name = dt.name if dt is not None else ("bool" if k == "b" else "int32")
        raise InvalidArgumentError(
            None, None, f"Value for attr 'T' of {name} is not in the list of allowed values: "
            f"{_ALLOWED[kinds]} (argument `{arg}` of {op_type})")


def kind_jit(prim, kinds):
    """``prim``'s function, jitted, refusing (``NotPlain``, while JAX traces) an input whose
    dtype kind is not in ``kinds``: the dtype check of an op's fast path, paid once per input
    signature instead of on every call."""
    impl = prim.impl

    wide = kinds == _KINDS["real32"]   # (float32/float64 only: no half kernel)

    def checked(x):
        if x.dtype.kind not in kinds or wide and x.dtype.itemsize < 4:
            raise NotPlain
        return impl(x)

    checked.__name__ = f"{prim.name}_kinds"
    return jax.jit(checked)


#: The operands ``bind1``/``bind2`` take as they are (anything else goes through ``bind``).
_OPERANDS = frozenset([Tensor, Pending, Variable])
#: Such an operand's (or a constant array's) shape-and-dtype carrier by its exact type, read
#: without computing a pending value (a C call; an array's ``aval``, whose ``dtype`` is a plain
#: attribute where ``jax.Array.dtype`` is a Python property).
_META_OF = {Tensor: operator.attrgetter("_value.aval"), Pending: operator.attrgetter("_thunk.aval"),
            Variable: operator.attrgetter("_val.aval"), _Array: operator.attrgetter("aval")}.get


#: type -> ``fn(op, op_type, x)`` applying the unary op ``op`` (TF type ``op_type``) to ``x`` of that
#: type, which is not a Tensor (TF's dispatch for composite tensors: ``tf.abs(sparse_tensor)``);
#: filled by the type's module (``sparse_tensor``).  Only the slow path looks it up.
UNARY_DISPATCH: "dict[type, Callable[..., Any]]" = {}

#: type -> ``fn(op, op_type, x, y)`` applying the binary op ``op`` (TF type ``op_type``) when ``x``
#: or ``y`` is of that composite type (``tf.add(ragged, dense)``); filled by the type's module
#: (``ragged_math``).  Only the slow path (an operand that is no Tensor) looks it up.
BINARY_DISPATCH: "dict[type, Callable[..., Any]]" = {}

#: ``(op name, type)`` -> the function running that op (``tf.reduce_sum``, ``tf.gather``,
#: ``tf.concat``, ``tf.shape``, ``tf.cast`` ...) when its first tensor argument is of that composite
#: type, called with the op's own arguments (TF's dispatch for composite tensors); filled by the
#: type's module (``ragged_math``).  Looked up only where the argument is no Tensor.
OP_DISPATCH: "dict[tuple[str, type], Callable[..., Any]]" = {}


def dispatch_of(op_name, *args):
    """The ``OP_DISPATCH`` function for the first of ``args`` (or of an element of a list among
    them, as ``tf.concat``'s) whose type (or one of its base classes, for an argument not in a list)
    has one registered for ``op_name``, or None."""
    for a in args:
        t = type(a)
        if t in _OPERANDS:   # (the common case: a Tensor has no dispatch)
            continue
        if t is list or t is tuple or isinstance(a, (list, tuple)):
            if _OPERANDS.issuperset(map(type, a)):   # (a list of Tensors: one C loop)
                continue
            for e in a:
                te = type(e)
                if te not in _OPERANDS:
                    fn = OP_DISPATCH.get((op_name, te))
                    if fn is not None:
                        return fn
        else:
            for c in t.__mro__:   # (a subclass of a registered type dispatches too: LinearOperator's)
                fn = OP_DISPATCH.get((op_name, c))
                if fn is not None:
                    return fn
    return None


def _unary(p, op_type, kinds, call):
    """The TF-named function of a one-input elementwise op (``core.bind.unary_entry``: a plain
    Tensor with no tape recording runs ``call`` at once): a Tensor, pending Tensor or Variable
    goes to ``bind1`` through ``call`` (``kind_jit`` where the op has a dtype list: a refused
    dtype raises ``NotPlain`` when JAX traces, and takes the checked path); anything else (and
    a refused dtype) is checked (TF's error) and goes through ``bind``."""
    def checked(x):
        if type(x) in _OPERANDS:
            try:
                return bind1(p, call, (), x)
            except NotPlain:
                pass
            except (TypeError, ValueError) as e:
                raise op_error(e, op_type) from e
        if x is None:
            raise ValueError(NONE_OPERAND)
        dispatch = UNARY_DISPATCH.get(type(x))
        if dispatch is not None:
            return dispatch(op, op_type, x)
        if kinds is not None:
            check_float(x, op_type, kinds)
        if type(x) in _PY_NUMBERS and _dtypes.x64_enabled():   # (TF's float32 / int32 for a number)
            x = convert_to_tensor(x)
        try:
            return bind(p, x)
        except (TypeError, ValueError) as e:
            raise op_error(e, op_type) from e

    op = unary_entry(call, checked)
    return op


def unary_ops(namespace, table):
    """``table``: rows (public name, TF type, jax fn[, differentiable[, dtypes[, argument name]]]).

    ``dtypes``: None (any), ``"number"`` (any but bool), ``"float"`` (float/complex), ``"real"``
    (float) or ``"bool"``: other input dtypes raise InvalidArgumentError, as TF's kernels.
    """
    for row in table:
        name, op_type, fn = row[:3]
        differentiable = row[3] if len(row) > 3 else True
        kinds = row[4] if len(row) > 4 else None
        arg = row[5] if len(row) > 5 else "x"  # TF's argument name (``features`` for activations)
        p = prim(op_type, fn, differentiable=differentiable)
        call = p._call0 if kinds is None else kind_jit(p, _KINDS[kinds])
        op = _unary(p, op_type, kinds, call)
        if arg != "x":   # TF's keyword name for the input (``features``): the same function, renamed
            code = op.__code__
            op = types.FunctionType(code.replace(co_varnames=(arg,) + code.co_varnames[1:]), op.__globals__,
                                    name, op.__defaults__, op.__closure__)
        op.__name__ = op.__qualname__ = name
        op.__doc__ = f"``tf.math.{name}`` (TF op type ``{op_type}``), elementwise."
        op._tf_types = (op_type,)
        namespace[name] = op


def _number_operands(x, y):
    """``(x, y)`` with a Python number next to a concrete float32/float64/bfloat16 Tensor (or a
    pending one) as a cached device array of its dtype (``scalar_constant``: TF's conversion,
    without JAX converting a Python scalar on every call).  Inside a trace (a tracer) the number
    stays a number: a traced computation keeps it as a literal, as its fingerprint expects."""
    tx, ty = type(x), type(y)
    if ty in _PY_NUMBERS:
        if tx is Tensor and type(x._value) is _Array:
            y = scalar_constant(y, x._value.dtype)
        elif tx is Pending:
            y = scalar_constant(y, x._thunk.aval.dtype)
        elif tx is Variable and isinstance(x._val, _CONCRETE):   # (a concrete or pending value)
            y = scalar_constant(y, x._val.aval.dtype)
        elif isinstance(x, Pending):   # (a pending Variable slice)
            y = scalar_constant(y, x._thunk.aval.dtype)
    elif tx in _PY_NUMBERS:
        if ty is Tensor and type(y._value) is _Array:
            x = scalar_constant(x, y._value.dtype)
        elif ty is Pending:
            x = scalar_constant(x, y._thunk.aval.dtype)
        elif ty is Variable and isinstance(y._val, _CONCRETE):
            x = scalar_constant(x, y._val.aval.dtype)
        elif isinstance(y, Pending):
            x = scalar_constant(x, y._thunk.aval.dtype)
    return x, y


#: A Variable's value that is no tracer: a concrete array or a pending update (``Lazy``).
_CONCRETE = (_Array, Lazy)


_NUMPY_DATA = (np.ndarray, np.generic)
_ARRAY_DATA = (np.ndarray, np.generic, jax.Array)   # (``jax.Array`` holds JAX's tracers too)


def numpy_operands(x, y):
    """``(x, y)`` with a NumPy or JAX array (or tracer) next to a Tensor or Variable converted to
    its dtype, as TF converts it (``convert_to_tensor(y, dtype=x.dtype)``; JAX would promote):
    float64 statistics next to a float32 batch give float32, a float array next to an int tensor
    is truncated.  Only numbers (bool, string and complex data keep their dtype and errors)."""
    if isinstance(y, _ARRAY_DATA) and isinstance(x, _TENSORISH):
        return x, _as_dtype_of(y, x)
    if isinstance(x, _ARRAY_DATA) and isinstance(y, _TENSORISH):
        return _as_dtype_of(x, y), y
    return x, y


def list_operands(x, y, op_type):
    """``(x, y)`` with a (nested) list of Python numbers next to a Tensor or Variable converted to
    its dtype, as TF converts it (``convert_to_tensor`` with the tensor's dtype): ``h * [0.5, 2.0]``
    of a float16 ``h`` is float16 and ``x - [0.1]`` of a float64 ``x`` subtracts float64's 0.1,
    where the list alone became float32 and JAX promoted.  A list holding a float next to an
    integer tensor is TF's error, as a Python float is (``check_binary``)."""
    if isinstance(y, (list, tuple)) and isinstance(x, _TENSORISH):
        return x, _list_as_dtype_of(y, x, op_type, first=False)
    if isinstance(x, (list, tuple)) and isinstance(y, _TENSORISH):
        return _list_as_dtype_of(x, y, op_type, first=True), y
    return x, y


def _list_as_dtype_of(a, t, op_type, first):
    if _contains_tensor(a):
        return a
    try:
        arr = np.asarray(a)
    except ValueError:   # (ragged data: the op's own error)
        return a
    d = np.dtype(t._meta.dtype)
    if arr.dtype.kind not in "iuf" or _kind(d) not in "iufc":
        return a
    if arr.dtype.kind in "iu" and _kind(d) in "iu":   # (ints stay Python data: a static shape's arithmetic)
        return a
    if arr.dtype.kind == "f" and _kind(d) in "iu":
        if op_type == "AddV2" and not first:
            raise InvalidArgumentError(None, None, f"cannot compute AddV2 as input #1(zero-based) was expected "
                                       f"to be a {d.name} tensor but is a float tensor [Op:AddV2]")
        raise TypeError(f"Cannot convert {a!r} to EagerTensor of dtype {d.name}")
    return arr.astype(d)


def _as_dtype_of(a, t):
    a = a if isinstance(a, jax.Array) else np.asarray(a)   # (a JAX array is cast on its device)
    d = np.dtype(t._meta.dtype)
    if a.dtype == d or not isinstance(a.dtype, np.dtype) or _kind(a.dtype) not in "iuf" or _kind(d) not in "iufc":
        return a
    return a.astype(d)


def _kind(d):
    return "f" if d.kind == "V" and jnp.issubdtype(d, jnp.floating) else d.kind   # (bfloat16: "V")


def _shape(x):
    """A Tensor's, Variable's or array-like's shape (a pending value is not computed); an
    ``IndexedSlices``' dense shape."""
    if isinstance(x, _TENSORISH):
        return tuple(x._meta.shape)
    if type(x) is IndexedSlices and x._static_shape is not None:
        return x._static_shape
    if x is None:   # (TF converts the operand: ``tf.reshape(None, ...)``, ``tf.concat([t, None], 0)``)
        raise ValueError(NONE_OPERAND)
    if isinstance(x, (list, tuple)) and x and _contains_tensor(x):   # TF packs it: ``[x, [i]]`` of a traced i
        return (len(x),) + _shape(x[0])
    return tuple(np.shape(x))


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _norm_axis(axis, ndim, op_type, arg="axis"):
    a = int(axis)
    if not -ndim <= a < ndim:
        raise _bad(op_type, f"Expected argument `{arg}` in the range [{-ndim}, {ndim}), but got {a}")
    return a % ndim


def _call(p, op_type, *args, **static):
    """``bind``, with a JAX shape/dtype complaint as TF's error."""
    try:
        return bind(p, *args, **static)
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


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
    """A shape argument (ints, a list of them, a shape tensor, a known ``TensorShape``) as a tuple
    of ints; None in it is TF's ValueError (its conversion of the argument to a tensor)."""
    if isinstance(shape, TensorShape) and (shape.rank is None or any(d is None for d in shape)):
        raise ValueError(f"Cannot convert a partially known TensorShape {shape} to a Tensor.")   # (TF's)
    if isinstance(shape, _TENSORISH):
        shape = np.asarray(shape._value).tolist()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    if shape is None:
        raise ValueError(NONE_OPERAND)
    out = []
    for d in shape:
        if d is None:
            raise ValueError(NONE_OPERAND)
        dim = getattr(d, "_dim", None)   # ``tf.shape(x)[0]`` of a symbolic size (``ops.array.shape``)
        out.append(int(d) if dim is None else dim)
    return tuple(out)


def output_shape(shape, op_type):
    """``static_shape`` of the shape of a tensor an op makes (``tf.fill``, ``tf.zeros``, the random
    ops): a negative dimension is TF's InvalidArgumentError, before JAX sees it."""
    shape = static_shape(shape)
    for d in shape:
        if d < 0:
            raise _bad(op_type, f"Dimension {d} must be >= 0 (argument `shape` {list(shape)})")
    return shape


def static_dtype(dtype):
    return _dtypes.as_dtype(dtype).name
