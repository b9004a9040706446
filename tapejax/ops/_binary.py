"""Binary elementwise ops: ``binary_ops`` builds each op's function (and ``binary_operator`` the
Tensor operator of one) from a table row, with TF's dtype rules written into it.

An op's function takes the common case first: two Tensors, pending Tensors or Variables of one
dtype (a Python number next to one converted by ``_registry._number_operands``) go to
``bind2`` through the op's jitted function, whose guard (``plain_jit``: run where JAX traces,
once per input signature) refuses two dtypes and the dtypes TF's kernels of the op do not take
(bool for arithmetic and ordering, anything but bool for the logical ops).  Anything else takes
the checked path: NumPy and JAX data converted as TF converts them, composite tensors'
dispatch, TF's errors (``check_binary``, ``check_float``, ``_check_bool_rule``), then ``bind``.
The integer divisions check their divisor in the value-check mode (``checks``).
"""
from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from ..core.bind import Primitive, bind, bind2
from ..core.convert import convert_to_tensor
from ..core.errors import InternalError, InvalidArgumentError
from ..core.tensor import Pending, Tensor
from ..core.variable import Variable
from ._registry import (
    _ARRAY_DATA,
    _META_OF,
    _PY_NUMBERS,
    _TENSORISH,
    BINARY_DISPATCH,
    NotPlain,
    _Array,
    _number_operands,
    check_binary,
    check_float,
    dtype_of,
    list_operands,
    numpy_operands,
    op_error,
    plain_jit,
    prim,
)
from .checks import VALUE_CHECKS, require


def binary_ops(namespace, table):
    """``table``: rows (public name, TF type, jax fn[, differentiable[, dtypes]]).

    Two Tensors, pending Tensors or Variables of one dtype (or one of them and a Python number,
    converted by ``_number_operands``) go to ``bind2``; anything else (nested data, NumPy arrays,
    numbers next to other dtypes) through ``bind``.  TF's dtype rule (``check_binary``) and dtype
    list (``check_float``) are checked first."""
    for row in table:
        name, op_type, fn = row[:3]
        differentiable = row[3] if len(row) > 3 else True
        kinds = row[4] if len(row) > 4 else None
        spec = BinarySpec(namespace, name, op_type, prim(op_type, fn, differentiable=differentiable), kinds)
        op = _binary(spec, None)
        _BINARY_SPECS[op] = spec
        namespace[name] = op


class BinarySpec(NamedTuple):
    """What ``binary_ops`` builds a binary op's function from."""
    namespace: dict
    name: str
    op_type: str
    prim: Primitive
    kinds: Any   # the dtype list (a ``_KINDS`` key's set), or None


_BINARY_SPECS: "dict[Callable[..., Any], BinarySpec]" = {}
#: What a binary op's fast path gives ``bind2`` (the types ``_META_OF`` knows).
_BIND2 = frozenset([Tensor, Pending, Variable, _Array])


def _one_dtype(x, y):
    return x.dtype == y.dtype


_BOOL = np.dtype(np.bool_)


def _one_number_dtype(x, y):
    return x.dtype == y.dtype and x.dtype != _BOOL


def _both_bool(x, y):
    return x.dtype == _BOOL and y.dtype == _BOOL


#: The binary ops TF defines on bool tensors only (the others of ``binary_ops`` with no dtype
#: list take any dtype but bool, except ``BOOL_TOO``).
BOOL_ONLY = frozenset(["LogicalAnd", "LogicalOr", "LogicalXor"])
#: ``Mul`` too: TF's ``*`` operator multiplies bool tensors (as a logical and) while its
#: ``tf.multiply`` has no bool kernel; tapejax's op is both, and keeps the operator's answer.
BOOL_TOO = frozenset(["Equal", "NotEqual", "Mul"])


def _check_bool_rule(x, y, op_type):
    """TF's kernels of ``op_type`` on bool: none for arithmetic and ordering (InvalidArgumentError,
    "not in the list of allowed values"), the only ones for the logical ops (InvalidArgumentError,
    "expected to be a bool tensor").  (Two operands of one dtype: ``check_binary`` has run.)"""
    if op_type in BOOL_TOO:
        return
    for i, v in enumerate((x, y)):
        d = dtype_of(v) if isinstance(v, _TENSORISH) else None
        if d is None:
            continue
        if op_type in BOOL_ONLY:
            if d.kind != "b":
                raise InvalidArgumentError(
                    None, None, f"cannot compute {op_type} as input #{i}(zero-based) was expected to be a bool "
                    f"tensor but is a {d.name} tensor [Op:{op_type}]")
        elif d.kind == "b":
            raise InvalidArgumentError(
                None, None, f"Value for attr 'T' of bool is not in the list of allowed values (argument "
                f"`{'xy'[i]}` of {op_type}): TF has no {op_type} kernel for bool tensors [Op:{op_type}]")


def binary_operator(op: Callable[..., Any], lift: Callable[[Tensor, Any], Any]) -> Callable[..., Any]:
    """The Tensor operator (``__add__`` ...) of the binary op ``op`` (made by ``binary_ops``):
    the op's function itself, that first gives ``lift(x, y)`` the call when ``x`` is a Tensor whose
    value is no concrete array (a trace's; ``lift`` returns None where it does not take it, see
    ``ops.affine``).  Written into the op's body, not wrapped around it: every ``a + b`` runs it."""
    return _binary(_BINARY_SPECS[op], lift)


def _binary(spec: BinarySpec, lift: "Callable[[Tensor, Any], Any] | None") -> Callable[..., Any]:
    namespace, name, op_type, p, kinds = spec

    # the fast path's function: the op, refusing (``NotPlain``, when JAX traces) two dtypes, or
    # the dtype TF's kernels of the op do not take (bool, or any but bool)
    guard = _both_bool if op_type in BOOL_ONLY else _one_dtype if op_type in BOOL_TOO else _one_number_dtype
    plain = plain_jit(p, guard) if kinds is None else None

    def op(x, y, name=None, _prim=p, _t=op_type, _kinds=kinds, _call=p._call0, _plain=plain, _name=name,
           _lift=lift):
        tx, ty = type(x), type(y)
        if _lift is not None and tx is Tensor and type(x._value) is not _Array:
            r = _lift(x, y)
            if r is not None:
                return r
        if tx in _PY_NUMBERS or ty in _PY_NUMBERS:
            if tx in _PY_NUMBERS and ty in _PY_NUMBERS:   # (two numbers: the first takes TF's dtype,
                x = convert_to_tensor(x)                    # float32 / int32, also in JAX's x64 mode)
            x, y = _number_operands(x, y)
            tx, ty = type(x), type(y)
        if _plain is not None and tx in _BIND2 and ty in _BIND2:
            try:   # the common case first: operands ``bind2`` takes, no dtype list (one dtype: ``_plain``)
                return bind2(_prim, _plain, x, y)
            except NotPlain:
                pass   # two dtypes: TF's error below
            except (TypeError, ValueError) as e:
                raise op_error(e, _t) from e
        gx, gy = _META_OF(tx), _META_OF(ty)
        if gx is None or gy is None or tx is _Array or ty is _Array:   # (NumPy or JAX array data)
            if isinstance(x, _ARRAY_DATA) or isinstance(y, _ARRAY_DATA):
                x, y = numpy_operands(x, y)
            elif tx is list or ty is list or tx is tuple or ty is tuple:
                x, y = list_operands(x, y, _t)
            dispatch = BINARY_DISPATCH.get(tx) or BINARY_DISPATCH.get(ty)
            if dispatch is not None:
                return dispatch(namespace[_name], _t, x, y)
        if gx is None or gy is None or gx(x).dtype != gy(y).dtype:
            check_binary(x, y, _t)   # TF's dtype rule (its error), or Python data for ``bind``
        if _kinds is not None:
            check_float(x, _t, _kinds, "x")
            check_float(y, _t, _kinds, "y")
        else:
            _check_bool_rule(x, y, _t)
        try:
            if gx is not None and gy is not None:
                return bind2(_prim, _call, x, y)
            return bind(_prim, x, y)
        except (TypeError, ValueError) as e:
            raise op_error(e, _t) from e

    fn: Callable[..., Any] = _divisor_checked(op, op_type) if op_type in INT_DIVISIONS else op
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``tf.math.{name}`` (TF op type ``{op_type}``), elementwise with broadcasting."
    fn._tf_types = (op_type,)  # type: ignore[attr-defined]
    return fn


#: The integer divisions TF's CPU kernels refuse a zero divisor in (XLA gives a value).
INT_DIVISIONS = frozenset(["FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"])


def _divisor_checked(op, op_type):
    """``op`` with the value-check mode's check of an integer divisor (``checks``: off by
    default, one list read per call): TF's InvalidArgumentError for a zero, where XLA computes
    a value (-1, or the dividend); TF's truncating ones report it as an InternalError."""
    def checked(x, y, name=None):
        if VALUE_CHECKS[0]:
            d = dtype_of(y) if isinstance(y, _TENSORISH) else None
            kind = d.kind if d is not None else ("i" if type(y) is int else None)
            dx = dtype_of(x) if isinstance(x, _TENSORISH) else None
            if kind in ("i", "u") and (dx is None or dx.kind in "iu"):
                value = y._value if isinstance(y, _TENSORISH) else np.asarray(y)
                try:   # (traced: a check the compiled step raises after it ran, with TF's message)
                    require(jnp.all(value != 0), "Integer division by zero")
                except InvalidArgumentError as e:
                    if op_type.startswith("Truncate"):   # (TF's kernel reports it as an internal error)
                        raise InternalError(None, None, "Unexpected error in binary operator (only integer "
                                            f"div and mod should have errors) [Op:{op_type}]") from e
                    raise InvalidArgumentError(None, None, f"Integer division by zero [Op:{op_type}]") from e
        return op(x, y, name)
    return checked


__all__ = ["BOOL_ONLY", "BOOL_TOO", "INT_DIVISIONS", "BinarySpec", "binary_operator", "binary_ops"]
