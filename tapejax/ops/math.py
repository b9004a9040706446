"""Elementwise math ops, cast, add_n and matmul (``tf.math``), declared as table rows; the Tensor and
Variable operators are registered here too (reductions and the rest of ``tf.math``: ``reduce``)."""

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import bind, bind2
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.indexed_slices import IndexedSlices
from ..core.tensor import Pending, StaticTensor, Tensor, register_operators
from ..core.variable import Variable
from . import _grads as G, affine as _affine
from ._binary import binary_operator, binary_ops
from ._registry import (
    BINARY_DISPATCH,
    NONE_OPERAND,
    OP_DISPATCH,
    NotPlain,
    check_binary,
    check_float,
    dispatch_of,
    dtype_of,
    list_operands,
    numpy_operands,
    op_error,
    plain_jit,
    prim,
    tf_types,
    unary_ops,
)
from .sparse_tensor import SparseTensor


def _truediv(x, y):
    return jnp.true_divide(x, y)


def _floordiv(x, y):
    # TF's float FloorDiv is floor(x / y): 1 // 0.1 is 10 (x / y rounds to 10), -inf // -1 is inf,
    # -1 // inf is -0 (jnp's fmod-based floor_divide gives 9, NaN and -1)
    return jnp.floor(x / y) if jnp.issubdtype(x.dtype, jnp.floating) else jnp.floor_divide(x, y)


@jax.custom_jvp
def _floormod(x, y):
    return jnp.mod(x, y)


@_floormod.defjvp
def _floormod_jvp(p, t):
    # TF's _FloorModGrad: (g, -g * floor_div(x, y)), its float floor_div being floor(x / y)
    x, y = p
    return _floormod(x, y), G._tan(t[0], x) - G._tan(t[1], y) * _floordiv(x, y)


def _log_sigmoid(x):
    return -jax.nn.softplus(-x)


def _tf_derivative(fn, d):
    """``fn`` with TF's registered derivative ``d(x, fn(x))`` where JAX's differs at a domain edge:
    softsign' at ±inf (JAX: NaN), acosh' below 1 (JAX: finite, TF: NaN), digamma' at inf (JAX: NaN)."""
    f = jax.custom_jvp(fn)

    @f.defjvp
    def jvp(p, t):
        (x,), (tx,) = p, t
        y = f(x)
        return y, d(x, y) * G._tan(tx, x)
    return f


_softsign = _tf_derivative(lambda x: x / (1 + G.tf_abs(x)), lambda x, y: 1 / jnp.square(1 + jnp.abs(x)))
_acosh = _tf_derivative(jnp.arccosh, lambda x, y: 1 / jnp.sinh(y))
def _digamma_at_poles(x):
    """digamma with TF's NaN at its poles, 0 and the negative integers (JAX 0.12 gives -inf at 0,
    0.10 NaN)."""
    return jnp.where((x <= 0) & (x == jnp.floor(x)), jnp.nan, jax.scipy.special.digamma(x))


_digamma = _tf_derivative(_digamma_at_poles,
                          lambda x, y: jnp.where(x == jnp.inf, 0, jax.scipy.special.polygamma(1, x)))
_lgamma = _tf_derivative(jax.scipy.special.gammaln, lambda x, y: _digamma_at_poles(x))   # (TF's: digamma)


# (public name, TF type, pure JAX fn[, differentiable[, accepted dtypes]])
_UNARY = [
    ("negative", "Neg", jnp.negative, True, "signed"),
    ("square", "Square", jnp.square, True, "number"),
    ("sqrt", "Sqrt", G.sqrt, True, "float"),
    ("rsqrt", "Rsqrt", G.rsqrt, True, "float"),
    ("reciprocal", "Reciprocal", G.reciprocal, True, "float"),
    ("exp", "Exp", jnp.exp, True, "float"),
    ("expm1", "Expm1", G.expm1, True, "float"),
    ("log", "Log", jnp.log, True, "float"),
    ("log1p", "Log1p", jnp.log1p, True, "float"),
    ("log_sigmoid", "LogSigmoid", _log_sigmoid, True, "real"),
    ("sin", "Sin", jnp.sin, True, "float"),
    ("cos", "Cos", jnp.cos, True, "float"),
    ("tan", "Tan", jnp.tan, True, "float"),
    ("asin", "Asin", jnp.arcsin, True, "float"),
    ("acos", "Acos", jnp.arccos, True, "float"),
    ("atan", "Atan", jnp.arctan, True, "float"),
    ("sinh", "Sinh", jnp.sinh, True, "float"),
    ("cosh", "Cosh", jnp.cosh, True, "float"),
    ("tanh", "Tanh", jnp.tanh, True, "float"),
    ("asinh", "Asinh", jnp.arcsinh, True, "float"),
    ("acosh", "Acosh", _acosh, True, "float"),
    ("atanh", "Atanh", jnp.arctanh, True, "float"),
    ("sigmoid", "Sigmoid", jax.nn.sigmoid, True, "float"),
    ("softplus", "Softplus", jax.nn.softplus, True, "real", "features"),
    ("softsign", "Softsign", _softsign, True, "real", "features"),
    ("erf", "Erf", jax.scipy.special.erf, True, "real"),
    ("erfc", "Erfc", jax.scipy.special.erfc, True, "real"),
    ("lgamma", "Lgamma", _lgamma, True, "real"),
    ("digamma", "Digamma", _digamma, True, "real"),
    ("abs", "Abs", G.tf_abs, True, "signed"),
    ("sign", "Sign", jnp.sign, True, "signed"),
    # TF registers no gradient for these: the tape gives None (TF_SEMANTICS 3).
    ("floor", "Floor", jnp.floor, False, "real"),
    ("ceil", "Ceil", jnp.ceil, False, "real"),
    ("round", "Round", jnp.round, False, "number"),
    ("is_nan", "IsNan", jnp.isnan, False, "real"),
    ("is_inf", "IsInf", jnp.isinf, False, "real"),
    ("is_finite", "IsFinite", jnp.isfinite, False, "real"),
    ("logical_not", "LogicalNot", jnp.logical_not, False, "bool"),
]

_BINARY = [
    ("add", "AddV2", jnp.add),
    ("subtract", "Sub", jnp.subtract),
    ("multiply", "Mul", jnp.multiply),
    ("_realdiv", "RealDiv", _truediv),
    ("pow", "Pow", G.pow),
    ("maximum", "Maximum", G.maximum),
    ("minimum", "Minimum", G.minimum),
    ("squared_difference", "SquaredDifference", lambda x, y: jnp.square(x - y)),
    ("atan2", "Atan2", jnp.arctan2, True, "real"),
    ("divide_no_nan", "DivNoNan", G.divide_no_nan, True, "float"),
    ("multiply_no_nan", "MulNoNan", G.multiply_no_nan, True, "float"),
    ("xlogy", "Xlogy", G.xlogy, True, "float"),
    ("xdivy", "Xdivy", G.xdivy, True, "float"),
    ("floordiv", "FloorDiv", _floordiv, False),
    ("floormod", "FloorMod", _floormod),
    ("less", "Less", jnp.less, False),
    ("less_equal", "LessEqual", jnp.less_equal, False),
    ("greater", "Greater", jnp.greater, False),
    ("greater_equal", "GreaterEqual", jnp.greater_equal, False),
    ("equal", "Equal", jnp.equal, False),
    ("not_equal", "NotEqual", jnp.not_equal, False),
    ("logical_and", "LogicalAnd", jnp.logical_and, False),
    ("logical_or", "LogicalOr", jnp.logical_or, False),
    ("logical_xor", "LogicalXor", jnp.logical_xor, False),
]

_ns = {}
unary_ops(_ns, _UNARY)
binary_ops(_ns, _BINARY)
_pow_elementwise = _ns["pow"]  # wrapped by ``pow`` below


def pow(x, y, name=None):  # noqa: A001  (TF's name)
    """``tf.pow``: ``x ** y`` with broadcasting; integer ``x`` to a negative integer power is an
    InvalidArgumentError, as TF (checked on the host for Python/NumPy exponents and concrete tensors)."""
    dx = dtype_of(x)
    if dx is not None and dx.kind in "iu":
        yv = getattr(y, "_value", y)
        if not isinstance(yv, jax.core.Tracer) and np.issubdtype(np.asarray(yv).dtype, np.integer) \
                and np.any(np.asarray(yv) < 0):
            raise InvalidArgumentError(None, None, "Integers to negative integer powers are not allowed "
                                       "(argument `y`) [Op:Pow]")
    return _pow_elementwise(x, y)


pow._tf_types = ("Pow",)
_ns["pow"] = pow
# The table's ops by name: bound explicitly so that readers, ``from .math import ...`` and
# the checkers see them (``tests/test_ops_coverage.py`` checks these against the tables).
negative = _ns["negative"]
square = _ns["square"]
sqrt = _ns["sqrt"]
rsqrt = _ns["rsqrt"]
reciprocal = _ns["reciprocal"]
exp = _ns["exp"]
expm1 = _ns["expm1"]
log = _ns["log"]
log1p = _ns["log1p"]
log_sigmoid = _ns["log_sigmoid"]
sin = _ns["sin"]
cos = _ns["cos"]
tan = _ns["tan"]
asin = _ns["asin"]
acos = _ns["acos"]
atan = _ns["atan"]
sinh = _ns["sinh"]
cosh = _ns["cosh"]
tanh = _ns["tanh"]
asinh = _ns["asinh"]
acosh = _ns["acosh"]
atanh = _ns["atanh"]
sigmoid = _ns["sigmoid"]
softplus = _ns["softplus"]
softsign = _ns["softsign"]
erf = _ns["erf"]
erfc = _ns["erfc"]
lgamma = _ns["lgamma"]
digamma = _ns["digamma"]
abs = _ns["abs"]
sign = _ns["sign"]
floor = _ns["floor"]
ceil = _ns["ceil"]
round = _ns["round"]
is_nan = _ns["is_nan"]
is_inf = _ns["is_inf"]
is_finite = _ns["is_finite"]
logical_not = _ns["logical_not"]
add = _ns["add"]
subtract = _ns["subtract"]
multiply = _ns["multiply"]
maximum = _ns["maximum"]
minimum = _ns["minimum"]
squared_difference = _ns["squared_difference"]
atan2 = _ns["atan2"]
divide_no_nan = _ns["divide_no_nan"]
multiply_no_nan = _ns["multiply_no_nan"]
xlogy = _ns["xlogy"]
xdivy = _ns["xdivy"]
floordiv = _ns["floordiv"]
floormod = _ns["floormod"]
less = _ns["less"]
less_equal = _ns["less_equal"]
greater = _ns["greater"]
greater_equal = _ns["greater_equal"]
equal = _ns["equal"]
not_equal = _ns["not_equal"]
logical_and = _ns["logical_and"]
logical_or = _ns["logical_or"]
logical_xor = _ns["logical_xor"]
mod = floormod


def _cast(x, *, dtype):
    target = np.dtype(dtype)
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and target.kind != "c":
        x = jnp.real(x)   # TF casts a complex number's real part
    if jnp.issubdtype(x.dtype, jnp.floating) and target.kind in "iu":
        return _float_to_int(x, target)
    return x.astype(target)


def _float_to_int(x, target):
    """TF's CPU cast of floats to integers (C's conversion on x86, as Eigen's kernel does): a value
    out of range, or NaN, becomes the type's minimum for 32 and 64 bits; narrower types convert
    through int32 and keep the low bits; uint32 wraps negative values from int32 and gives 2**31
    out of range.  (JAX saturates and maps NaN to 0.)"""
    if x.dtype.itemsize < 4:
        x = x.astype(jnp.float32)   # (exactly: the bounds below do not fit a half float)
    if target.kind == "i" and target.itemsize >= 4:
        bound = float(2 ** (8 * target.itemsize - 1))
        ok = (x >= -bound) & (x < bound)
        return jnp.where(ok, jnp.trunc(jnp.where(ok, x, 0)).astype(target), np.iinfo(target).min)
    if target.itemsize < 4:
        return _float_to_int(x, np.dtype(np.int32)).astype(target)
    wide = np.dtype(np.int64) if target.itemsize == 8 else np.dtype(np.int32)
    top = float(2 ** (8 * target.itemsize))
    ok = (x > -float(2 ** (8 * wide.itemsize - 1)) - 1) & (x < top)
    safe = jnp.trunc(jnp.where(ok, x, 0))
    value = jnp.where(safe < 0, safe.astype(wide).astype(target), jnp.maximum(safe, 0).astype(target))
    return jnp.where(ok, value, np.array(2 ** (8 * target.itemsize - 1), target))


_CAST = prim("Cast", _cast)


@tf_types("Cast")
def cast(x, dtype, name=None):
    """``tf.cast``: convert to ``dtype`` (float -> int truncates toward zero).  An
    ``IndexedSlices`` stays one (its values cast), as in TF."""
    if type(x) is IndexedSlices:
        return x._with_values(cast(x.values, dtype))
    if type(x) is SparseTensor:   # (its values cast, as TF's)
        return x.with_values(cast(x.values, dtype))
    dispatch = OP_DISPATCH.get(("Cast", type(x)))   # a composite tensor (ragged_math)
    if dispatch is not None:
        return dispatch(x, dtype)
    if x is None:   # (a None gradient cast for mixed precision: TF's conversion error)
        raise ValueError(NONE_OPERAND)
    target = _dtypes.as_dtype(dtype)
    store = _dtypes.storage_dtype(target._np, "cast")
    if isinstance(x, (np.ndarray, np.generic)) and np.dtype(x.dtype) in _dtypes._WIDE and not _dtypes.x64_enabled():
        # a float64 / complex128 NumPy constant cast to a dtype JAX holds (the Transformer
        # tutorial's ``tf.cast(np_encoding, tf.float32)``): cast on the host, as TF's Cast rounds
        # it (round to nearest; toward zero to an integer; a complex value's real part to a real)
        x = np.asarray(x)
        if x.dtype.kind == "c" and store.kind != "c":
            x = np.real(x)
        with np.errstate(over="ignore", invalid="ignore"):   # (TF's Cast warns of neither)
            return convert_to_tensor(x.astype(store))
    if type(x) in _PY_SCALARS and _state._local.collector is not None:
        # a Python number cast while a function traces (``tf.cast(len(xs), bool)``): a static
        # value, as TF's ``constant_value`` folds the Cast of a constant (so a conditional on it
        # is known while tracing: ``compile.autograph_ops.if_stmt``)
        with jax.ensure_compile_time_eval():   # (concrete: not staged into the trace)
            x = StaticTensor(convert_to_tensor(x)._value)
    elif type(x) is float:
        # TF converts a Python float to float32 before the Cast, as it does a list: ``tf.cast(0.1,
        # tf.float64)`` is 0.10000000149011612 (JAX's weak typing kept 0.1)
        x = convert_to_tensor(x)
    if (type(x) is Tensor or type(x) is Variable) and x.dtype == target:
        # TF's ``cast`` gives a Tensor or resource Variable of the dtype back as it is (no op): a
        # Variable cast to its own dtype is that Variable, and a later ``assign`` shows through
        return x
    src = dtype_of(x)
    if src is not None and src == store:
        return bind(_IDENTITY, x)
    return bind(_CAST, x, dtype=store.name)


_PY_SCALARS = frozenset({bool, int, float})


_IDENTITY = prim("Identity", lambda x: x)


@tf_types("Identity")
def identity(input, name=None):
    """``tf.identity``: the same value as a new tensor (the tape sees a distinct tensor).  An
    ``IndexedSlices`` stays one, as in TF."""
    if type(input) is IndexedSlices:
        return input._with_values(identity(input.values))
    if type(input) is SparseTensor:
        return input.with_values(identity(input.values))
    dispatch = OP_DISPATCH.get(("Identity", type(input)))   # a composite tensor (ragged_math)
    if dispatch is not None:
        return dispatch(input)
    if input is None:
        raise ValueError(NONE_OPERAND)
    return bind(_IDENTITY, input)


@tf_types("RealDiv")
def divide(x, y, name=None):
    """``tf.divide`` / ``tf.math.truediv``: integer inputs give floats (int32 -> float64, as TF)."""
    dispatch = BINARY_DISPATCH.get(type(x)) or BINARY_DISPATCH.get(type(y))   # a composite tensor
    if dispatch is not None:
        return dispatch(divide, "RealDiv", x, y)
    check_binary(x, y, "RealDiv")
    d = dtype_of(x) or dtype_of(y)
    if d is not None and d.kind == "b":
        raise TypeError("Invalid dtype bool in __truediv__: TF divides number types only")
    if d is not None and d.kind in "iu":
        to = np.float32 if d.itemsize <= 2 else np.float64
        x, y = cast(x, to), cast(y, to)
    return _ns["_realdiv"](x, y)


truediv = divide


def _add_n(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


_ADD_N = prim("AddN", _add_n)


@tf_types("AddN")
def add_n(inputs, name=None):
    """``tf.math.add_n``: elementwise sum of equally shaped tensors (no broadcasting)."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError("Inputs must be an iterable of at least one Tensor/IndexedSlices with the "
                         "same dtype and shape.")
    ts = [convert_to_tensor(x) if not isinstance(x, (Tensor, Variable)) else x for x in inputs]
    shape0, dt0 = tuple(ts[0].shape), ts[0].dtype
    check_float(ts[0], "AddN", "number", "inputs")
    for i, t in enumerate(ts[1:], 1):
        if tuple(t.shape) != shape0:
            raise InvalidArgumentError(None, None, f"Inputs to operation AddN must have the same size "
                                       f"and shape: inputs[0] has shape {shape0}, inputs[{i}] has "
                                       f"shape {tuple(t.shape)} [Op:AddN]")
        if t.dtype != dt0:
            raise InvalidArgumentError(None, None, f"AddN: inputs[{i}] has dtype {t.dtype.name}, "
                                       f"expected {dt0.name} [Op:AddN]")
    return bind(_ADD_N, *ts)


def _matmul(a, b, *, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False):
    if transpose_a:
        a = jnp.swapaxes(a, -1, -2)
    if adjoint_a:
        a = jnp.conj(jnp.swapaxes(a, -1, -2))
    if transpose_b:
        b = jnp.swapaxes(b, -1, -2)
    if adjoint_b:
        b = jnp.conj(jnp.swapaxes(b, -1, -2))
    return jnp.matmul(a, b)


_MATMUL = prim("MatMul", _matmul)
_MATMUL_PLAIN = plain_jit(_MATMUL, lambda a, b: a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype
                          and a.dtype != jnp.bool_)


@tf_types("MatMul")
def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, output_type=None, name=None):
    """``tf.linalg.matmul``: (batched) matrix product; both inputs rank >= 2."""
    ta, tb = type(a), type(b)
    if ((ta is Tensor or ta is Variable or ta is Pending) and (tb is Tensor or tb is Variable or tb is Pending)
            and not (transpose_a or transpose_b or adjoint_a or adjoint_b)):
        try:  # the fast path: the plain product; ranks and dtypes are checked when JAX traces
            return bind2(_MATMUL, _MATMUL_PLAIN, a, b)
        except NotPlain:
            pass  # the checks below raise TF's error
        except (TypeError, ValueError) as e:
            raise _matmul_error(e, a, b) from e
    dispatch = dispatch_of("MatMul", a, b)   # an operator argument (``LinearOperator``): its method, as TF
    if dispatch is not None:
        return dispatch(a, b, transpose_a=transpose_a, transpose_b=transpose_b, adjoint_a=adjoint_a,
                        adjoint_b=adjoint_b, a_is_sparse=a_is_sparse, b_is_sparse=b_is_sparse,
                        output_type=output_type, name=name)
    a, b = list_operands(*numpy_operands(a, b), "MatMul")   # (NumPy weights or lists: the batch's dtype, as TF's)
    check_binary(a, b, "MatMul")
    check_float(a, "MatMul", "number", "a")   # (TF has no bool kernel)
    for arg, v in (("a", a), ("b", b)):
        nd = v._meta.ndim if isinstance(v, (Tensor, Variable)) else np.ndim(v)   # (not computing a pending one)
        if nd < 2:
            raise InvalidArgumentError(None, None, f"In[{0 if arg == 'a' else 1}] ndims must be >= 2: "
                                       f"matmul argument `{arg}` has rank {nd}")
    # Only the flags that are set are static parameters (the plain product has none: the fast path).
    flags = {k: True for k, v in (("transpose_a", transpose_a), ("transpose_b", transpose_b),
                                  ("adjoint_a", adjoint_a), ("adjoint_b", adjoint_b)) if v}
    try:
        return bind(_MATMUL, a, b, **flags)
    except (TypeError, ValueError) as e:
        raise _matmul_error(e, a, b) from e


def _matmul_error(e, a, b):
    """JAX's complaint, with both operands' shapes named (TF: ``Matrix size-incompatible``); a
    dtype refused for precision (``PrecisionError``) as it is."""
    if isinstance(e, _dtypes.PrecisionError):
        return e
    sa, sb = (list(np.shape(getattr(v, "_value", v))) for v in (a, b))
    return op_error(type(e)(f"Matrix size-incompatible: In[0] (argument `a`): {sa}, In[1] (argument "
                            f"`b`): {sb}: {e}"), "MatMul")


# -- operators ----------------------------------------------------------------

def _swap(fn):
    return lambda a, b: fn(b, a)


def _broadcastable(a, b):
    sa = a._meta.shape if isinstance(a, (Tensor, Variable)) else np.shape(a)
    sb = b._meta.shape if isinstance(b, (Tensor, Variable)) else np.shape(b)
    try:
        np.broadcast_shapes(sa, sb)
    except ValueError:
        return False
    except TypeError:   # a symbolic size (a trace for a None size): only known sizes can disagree
        return all(not (isinstance(x, int) and isinstance(y, int)) or x == y or 1 in (x, y)
                   for x, y in zip(reversed(tuple(sa)), reversed(tuple(sb))))
    return True


def _eq(a, b):
    """``==``: elementwise; None gives False, incompatible shapes a scalar False (TF2); a string is
    TF's TypeError."""
    if b is None:
        return False
    if isinstance(b, (str, bytes)):
        check_binary(a, b, "Equal")
    if not _broadcastable(a, b):
        return Tensor(jnp.asarray(False))
    return equal(a, b)


def _ne(a, b):
    if b is None:
        return True
    if isinstance(b, (str, bytes)):
        check_binary(a, b, "NotEqual")
    if not _broadcastable(a, b):
        return Tensor(jnp.asarray(True))
    return not_equal(a, b)


def _matmul_operator(a, b):
    """``a @ b``: a right operand that defines its own product with tensors (a
    ``tf.linalg.LinearOperator``, its ``_linop_matmul``) gets it through ``__rmatmul__``, as TF's
    dispatch gives it the product."""
    if type(b) is not Tensor and hasattr(type(b), "_linop_matmul"):
        return NotImplemented
    return matmul(a, b)


_OPERATORS = {
    "__add__": add, "__radd__": _swap(add),
    "__sub__": subtract, "__rsub__": _swap(subtract),
    "__mul__": multiply, "__rmul__": _swap(multiply),
    "__truediv__": divide, "__rtruediv__": _swap(divide),
    "__floordiv__": floordiv, "__rfloordiv__": _swap(floordiv),
    "__mod__": floormod, "__rmod__": _swap(floormod),
    "__pow__": pow, "__rpow__": _swap(pow),
    "__matmul__": _matmul_operator, "__rmatmul__": _swap(matmul),
    "__neg__": negative, "__abs__": abs,
    "__pos__": lambda a: a,
    "__lt__": less, "__le__": less_equal,
    "__gt__": greater, "__ge__": greater_equal,
    "__eq__": _eq, "__ne__": _ne,
}   # (``&``, ``|``, ``^``, ``~``: ``ops.bitwise``, logical on bool tensors, bitwise on integers)

# A Tensor's operators give a traced integer scalar a linear form (``ops.affine``): a binary op's
# forward operator has the check written into its body, the others are wrapped.
_FORWARD = {"__add__": add, "__sub__": subtract, "__mul__": multiply, "__floordiv__": floordiv, "__mod__": floormod}
register_operators(Tensor, {k: (binary_operator(f, _affine.lift(k)) if _FORWARD.get(k) is f else
                                _affine.lifted(k, f) if k in _affine.FORM_OPERATORS else f)
                            for k, f in _OPERATORS.items()})
register_operators(Variable, {**_OPERATORS, **{k: _affine.variable_operator(getattr(Tensor, k), _OPERATORS[k])
                                               for k in _affine.FORM_OPERATORS if k not in _affine.UNARY}})


def _no_in_place(op, fix):
    def operator(self, other):
        raise RuntimeError(f"`var {op}= value` with `tf.Variable`s is not supported. Use `{fix}` to modify "
                           f"the variable, or `out = var {op} value` if you need to get a new output Tensor.")
    operator.__name__ = f"in_place_{op}"
    return operator


# As TF's: a Variable's ``+=`` (``-=``, ``*=``, ``/=``, ``**=``) raises, where Python would silently rebind
# the name to a new Tensor (the Variable then no longer trained); ``//=``, ``%=``, ``@=`` rebind, as in TF.
for _op, _dunder, _fix in (("+", "__iadd__", "var.assign_add(value)"), ("-", "__isub__", "var.assign_sub(value)"),
                           ("*", "__imul__", "var.assign(var * value)"), ("/", "__itruediv__", "var.assign(var / value)"),
                           ("**", "__ipow__", "var.assign(var ** value)")):
    setattr(Variable, _dunder, _no_in_place(_op, _fix))

def _polyval(x, *coeffs):
    out = jnp.zeros_like(x) if not coeffs else coeffs[0] + jnp.zeros_like(x)
    for c in coeffs[1:]:
        out = out * x + c
    return out


_POLYVAL = prim("Polyval", _polyval)


@tf_types("Polyval")
def polyval(coeffs, x, name=None):
    """``tf.math.polyval``: ``coeffs[0] * x**(n-1) + ... + coeffs[n-1]`` (Horner)."""
    if not isinstance(coeffs, (list, tuple)):
        raise ValueError(f"Argument coeffs must be list type found {type(coeffs)}.")
    return bind(_POLYVAL, x, *coeffs)


__all__ = [
    "negative", "square", "sqrt", "rsqrt", "reciprocal", "exp", "expm1", "log", "log1p", "log_sigmoid", "sin",
    "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "softplus",
    "softsign", "erf", "erfc", "lgamma", "digamma", "abs", "sign", "floor", "ceil", "round", "is_nan", "is_inf",
    "is_finite", "logical_not", "add", "subtract", "multiply", "pow", "maximum", "minimum", "squared_difference",
    "atan2", "divide_no_nan", "multiply_no_nan", "xlogy", "xdivy", "floordiv", "floormod", "less", "less_equal",
    "greater", "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "logical_xor", "mod", "cast",
    "identity", "divide", "truediv", "add_n", "matmul", "polyval",
]
