"""``tf.linalg.LinearOperator``: a matrix known by its structure, and the protocol its subclasses keep.

TF's contract, kept here: a subclass gives ``_shape`` and ``_matmul`` (abstract: a subclass
missing either cannot be instantiated) and gets every other method from them (``to_dense`` is
``matmul`` of an identity, ``solve`` / ``determinant`` / ``eigvals`` / ``cond`` work on the dense
matrix); the structured operators (``linear_operator_*`` modules) override the private
``_solve``, ``_determinant``, ``_diag_part`` ... with their structure (a diagonal solve divides,
a circulant one uses FFTs).  The public methods check TF's rules first (hints, dtypes,
dimensions) with TF's exception classes, then call the private ones.

Every computation is made of tapejax ops (``tapejax.ops.math``, ``linalg`` ...): an operator
over Variables records reads and ops like any other code, so ``GradientTape`` differentiates
through its parameters, deferred execution keeps its ops pending, and ``tapejax.function``
traces it.  No op type is added.

The operators that the base's algebra builds (``matmul`` of two operators is a
``LinearOperatorComposition``, ``adjoint()`` a ``LinearOperatorAdjoint``, ``inverse()`` a
``LinearOperatorInversion``, ``cholesky()`` a ``LinearOperatorLowerTriangular``) live in
modules that import this one; they register their classes in ``CLASSES`` when imported (the
linalg namespace imports them all), which keeps the import graph acyclic.

TF's dispatch of ``tf.linalg`` functions to an operator's methods is ``linear_operator_dispatch``.
"""
import abc
from typing import Any, Dict, List, Optional

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor, TensorShape
from ..core.variable import Variable
from . import array as _a, diagonals as _dg, linalg as _l, linalg_more as _lm, math as _m, reduce as _r, special as _sp
from .checks import require

#: Operator classes the base class builds results from, registered by their modules.
CLASSES: Dict[str, type] = {}


# --------------------------------------------------------------------------
# helpers shared by the operator modules
# --------------------------------------------------------------------------

def to_param(value: Any, name: str, dtype: Any = None, dtype_hint: Any = None) -> Any:
    """A parameter as TF keeps it: a Variable stays a Variable (read at each use, so tapes see
    it), a Tensor stays, anything else becomes a Tensor."""
    if isinstance(value, (Tensor, Variable)):
        if dtype is not None and value.dtype != _dtypes.as_dtype(dtype):
            raise TypeError(f"Argument `{name}` must have dtype {_dtypes.as_dtype(dtype).name}; got "
                            f"{value.dtype.name}")
        return value
    return convert_to_tensor(value, dtype=dtype, dtype_hint=dtype_hint, name=name)


def shape_of(x: Any) -> TensorShape:
    return TensorShape(tuple(x.shape))


def broadcast_shapes(*shapes: Any) -> TensorShape:
    """The broadcast of batch shapes (ValueError, as TF, when they do not broadcast)."""
    try:
        return TensorShape(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"Incompatible shapes for broadcasting: {' and '.join(str(list(s)) for s in shapes)}"
                         ) from None


def check_dim(expected: Any, got: Any) -> None:
    """TF's ``Dimension.assert_is_compatible_with``."""
    if expected is not None and got is not None and int(expected) != int(got):
        raise ValueError(f"Dimensions {expected} and {got} are not compatible")


def assert_that(ok: Any, message: str) -> None:
    """TF's assert op: eager raises InvalidArgumentError now, traced is a functionalized check."""
    v = ok._value if isinstance(ok, (Tensor, Variable)) else jnp.asarray(ok)
    require(jnp.all(v), message)


def value_of(x: Any) -> Any:
    """A Tensor of ``x`` (a Variable is read)."""
    return convert_to_tensor(x)


def combine_hint(operator: Any, attr: str, provided: Optional[bool], message: str) -> Optional[bool]:
    """TF's ``use_operator_or_provided_hint_unless_contradicting``."""
    op_hint = getattr(operator, attr)
    if (op_hint is False and provided) or (op_hint and provided is False):
        raise ValueError(message)
    if op_hint or provided:
        return True
    if op_hint is False or provided is False:
        return False
    return None


def non_singular_hint(a: Any, b: Any) -> Optional[bool]:
    if a.is_non_singular is False or b.is_non_singular is False:
        return False
    return a.is_non_singular and b.is_non_singular


def commuting_self_adjoint_hint(a: Any, b: Any) -> Optional[bool]:
    if a.is_self_adjoint and b.is_self_adjoint:
        return True
    if (a.is_self_adjoint is True and b.is_self_adjoint is False) or (
            a.is_self_adjoint is False and b.is_self_adjoint is True):
        return False
    return None


def commuting_positive_definite_hint(a: Any, b: Any) -> Optional[bool]:
    if (a.is_positive_definite is True and a.is_self_adjoint is True and b.is_positive_definite is True
            and b.is_self_adjoint is True):
        return True
    return None


def square_hint(a: Any, b: Any) -> Optional[bool]:
    """Whether ``a @ b`` is square, as TF's ``property_hint_util.is_square``."""
    if a.is_square and b.is_square:
        return True
    if a.is_square is False and b.is_square is False:
        return a.range_dimension == b.domain_dimension
    if a.is_square != b.is_square and a.is_square is not None and b.is_square is not None:
        return False
    return None


def is_adjoint_pair(x: Any, y: Any) -> bool:
    """Whether ``y`` is known to be ``x``'s adjoint (by identity, not by value), as TF."""
    if x is y:
        if x.is_self_adjoint is False:
            return False
        if x.is_self_adjoint:
            return True
    return x.H is y or y.H is x


def is_aat_form(operators: List[Any]) -> bool:
    if not operators:
        raise ValueError("AAT form is undefined for empty operators")
    if len(operators) % 2:
        return False
    return all(is_adjoint_pair(operators[i], operators[-1 - i]) for i in range(len(operators) // 2))


def expand(x: Any, axis: int) -> Tensor:
    return _a.expand_dims(x, axis)


def conj(x: Any) -> Any:
    return _sp.conj(x) if x.dtype.is_complex else x


def dense_solve_with_broadcast(matrix: Any, rhs: Any, adjoint: bool = False) -> Tensor:
    """``solve`` with the batch dimensions of ``matrix`` and ``rhs`` broadcast."""
    batch = broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])
    matrix = _a.broadcast_to(matrix, list(batch) + list(matrix.shape[-2:]))
    rhs = _a.broadcast_to(rhs, list(batch) + list(rhs.shape[-2:]))
    return _l.solve(matrix, rhs, adjoint=adjoint)


# --------------------------------------------------------------------------
# the base class
# --------------------------------------------------------------------------

class LinearOperator(abc.ABC):
    """``tf.linalg.LinearOperator``: subclass it with ``_shape`` and ``_matmul`` (TF's protocol)."""

    def __init__(self, dtype, graph_parents=None, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None, name=None, parameters=None):
        if is_positive_definite:
            if is_non_singular is False:
                raise ValueError("A positive definite matrix is always non-singular.")
            is_non_singular = True
        if is_non_singular:
            if is_square is False:
                raise ValueError("A non-singular matrix is always square.")
            is_square = True
        if is_self_adjoint:
            if is_square is False:
                raise ValueError("A self-adjoint matrix is always square.")
            is_square = True
        self._is_square_set_or_implied_by_hints = is_square
        self._graph_parents = list(graph_parents or [])
        self._dtype = _dtypes.as_dtype(dtype).base_dtype if dtype else dtype
        self._is_non_singular = is_non_singular
        self._is_self_adjoint = is_self_adjoint
        self._is_positive_definite = is_positive_definite
        self._parameters = dict(parameters) if parameters is not None else {}
        self._name = name or type(self).__name__

    # ---- properties -------------------------------------------------------
    @property
    def parameters(self) -> dict:
        return dict(self._parameters)

    @property
    def dtype(self):
        return self._dtype

    @property
    def name(self) -> str:
        return self._name

    @property
    def graph_parents(self) -> list:
        return self._graph_parents

    @property
    def is_non_singular(self) -> Optional[bool]:
        return self._is_non_singular

    @property
    def is_self_adjoint(self) -> Optional[bool]:
        return self._is_self_adjoint

    @property
    def is_positive_definite(self) -> Optional[bool]:
        return self._is_positive_definite

    @property
    def is_square(self) -> Optional[bool]:
        auto = self.domain_dimension == self.range_dimension
        if self._is_square_set_or_implied_by_hints is False and auto:
            raise ValueError("User set is_square hint to False, but the operator was square.")
        if self._is_square_set_or_implied_by_hints is None:
            return auto
        return self._is_square_set_or_implied_by_hints

    @abc.abstractmethod
    def _shape(self):
        raise NotImplementedError("_shape is not implemented.")

    @property
    def shape(self) -> TensorShape:
        return TensorShape(tuple(self._shape()))

    def shape_tensor(self, name="shape_tensor") -> Tensor:
        return convert_to_tensor(np.asarray(list(self.shape), np.int32))

    @property
    def batch_shape(self) -> TensorShape:
        return self.shape[:-2]

    def batch_shape_tensor(self, name="batch_shape_tensor") -> Tensor:
        return convert_to_tensor(np.asarray(list(self.batch_shape), np.int32))

    @property
    def tensor_rank(self) -> int:
        return len(self.shape)

    def tensor_rank_tensor(self, name="tensor_rank_tensor") -> Tensor:
        return convert_to_tensor(self.tensor_rank)

    @property
    def domain_dimension(self) -> int:
        return int(tuple(self.shape)[-1])

    def domain_dimension_tensor(self, name="domain_dimension_tensor") -> Tensor:
        return convert_to_tensor(self.domain_dimension)

    @property
    def range_dimension(self) -> int:
        return int(tuple(self.shape)[-2])

    def range_dimension_tensor(self, name="range_dimension_tensor") -> Tensor:
        return convert_to_tensor(self.range_dimension)

    @property
    def variables(self) -> tuple:
        """The Variables among the operator's parameters (and its operators'), as ``tf.Module``."""
        out: List[Variable] = []
        seen = set()

        def walk(v):
            if isinstance(v, Variable):
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
            elif isinstance(v, LinearOperator):
                for k in sorted(vars(v)):
                    if k != "_parameters":
                        walk(vars(v)[k])
            elif isinstance(v, (list, tuple)):
                for e in v:
                    walk(e)
            elif isinstance(v, dict):
                for k in sorted(v, key=str):
                    walk(v[k])

        walk(self)
        return tuple(out)

    @property
    def trainable_variables(self) -> tuple:
        return tuple(v for v in self.variables if v.trainable)

    # ---- asserts ----------------------------------------------------------
    def _max_condition_number_to_be_non_singular(self) -> float:
        eps = np.finfo(self.dtype.as_numpy_dtype).eps
        return 1.0 / (max(100.0, float(self.range_dimension), float(self.domain_dimension)) * eps)

    def _assert_non_singular(self):
        if self._can_use_cholesky():
            return self.assert_positive_definite()
        s = _l.svd(self.to_dense(), compute_uv=False)
        cond = _m.divide(_r.reduce_max(s, axis=-1), _r.reduce_min(s, axis=-1))
        assert_that(_m.less(cond, self._max_condition_number_to_be_non_singular()),
                    "Singular matrix up to precision epsilon.")

    def assert_non_singular(self, name="assert_non_singular"):
        return self._assert_non_singular()

    def _assert_positive_definite(self):
        if self.is_self_adjoint:
            d = _dg.diag_part(_l.cholesky(self.to_dense()))
            assert_that(_m.greater(_sp.real(d) if d.dtype.is_complex else d, 0),
                        "Matrix was not positive definite.")
            return None
        raise NotImplementedError("assert_positive_definite is not implemented.")

    def assert_positive_definite(self, name="assert_positive_definite"):
        return self._assert_positive_definite()

    def _assert_self_adjoint(self):
        dense = self.to_dense()
        assert_that(_m.equal(dense, _lm.adjoint(dense)), "Matrix was not equal to its adjoint.")

    def assert_self_adjoint(self, name="assert_self_adjoint"):
        return self._assert_self_adjoint()

    def _check_input_dtype(self, arg) -> None:
        if arg.dtype.base_dtype != self.dtype:
            raise TypeError(f"Expected argument to have dtype {self.dtype!r}.  Found: {arg.dtype!r} in tensor "
                            f"{arg!r}")

    # ---- products and solves ----------------------------------------------
    @abc.abstractmethod
    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        raise NotImplementedError("_matmul is not implemented.")

    def matmul(self, x, adjoint=False, adjoint_arg=False, name="matmul"):
        """``self @ x`` (``adjoint``: ``self^H @ x``; ``adjoint_arg``: ``self @ x^H``); an operator
        ``x`` gives an operator."""
        if isinstance(x, LinearOperator):
            left = self.adjoint() if adjoint else self
            right = x.adjoint() if adjoint_arg else x
            if right.range_dimension != left.domain_dimension:
                raise ValueError(f"Operators are incompatible. Expected `x` to have dimension "
                                 f"{left.domain_dimension} but got {right.range_dimension}.")
            return self._linop_matmul(left, right)
        x = to_param(x, "x")
        self._check_input_dtype(x)
        check_dim(self.shape[-2 if adjoint else -1], x.shape[-1 if adjoint_arg else -2])
        return self._matmul(x, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _linop_matmul(self, left, right):
        if getattr(right, "_ones_diag", False) and not hasattr(right, "multiplier"):
            return left
        if getattr(right, "_zeros_diag", False):
            if not right.is_square or not left.is_square:
                raise ValueError("Matmul with non-square `LinearOperator`s or non-square `LinearOperatorZeros` "
                                 "not supported at this time.")
            return right
        return CLASSES["Composition"]([left, right], **_product_hints(left, right))

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        """``tensor @ operator`` = ``(operator^H @ tensor^H)^H``, as TF's dispatch of ``matmul``."""
        return _lm.adjoint(self.matmul(other, adjoint=True, adjoint_arg=True))

    def _matvec(self, x, adjoint=False):
        return _a.squeeze(self.matmul(expand(x, -1), adjoint=adjoint), axis=-1)

    def matvec(self, x, adjoint=False, name="matvec"):
        x = to_param(x, "x")
        self._check_input_dtype(x)
        check_dim(self.shape[-2 if adjoint else -1], x.shape[-1])
        return self._matvec(x, adjoint=adjoint)

    def _dense_solve(self, rhs, adjoint=False, adjoint_arg=False):
        if self.is_square is False:
            raise NotImplementedError("Solve is not yet implemented for non-square operators.")
        rhs = _lm.adjoint(rhs) if adjoint_arg else rhs
        if self._can_use_cholesky():
            return _l.cholesky_solve(_l.cholesky(self.to_dense()), rhs)
        return dense_solve_with_broadcast(self.to_dense(), rhs, adjoint=adjoint)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._dense_solve(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def solve(self, rhs, adjoint=False, adjoint_arg=False, name="solve"):
        """``X`` with ``self @ X = rhs`` (``adjoint``: ``self^H``; ``adjoint_arg``: ``rhs^H``)."""
        if self.is_non_singular is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to be singular.")
        if self.is_square is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to not be "
                                      "square.")
        if isinstance(rhs, LinearOperator):
            left = self.adjoint() if adjoint else self
            right = rhs.adjoint() if adjoint_arg else rhs
            if right.range_dimension != left.domain_dimension:
                raise ValueError(f"Operators are incompatible. Expected `rhs` to have dimension "
                                 f"{left.domain_dimension} but got {right.range_dimension}.")
            return self._linop_solve(left, right)
        rhs = to_param(rhs, "rhs")
        self._check_input_dtype(rhs)
        check_dim(self.shape[-1 if adjoint else -2], rhs.shape[-1 if adjoint_arg else -2])
        return self._solve(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _linop_solve(self, left, right):
        if getattr(right, "_ones_diag", False) and not hasattr(right, "multiplier"):
            return left.inverse()
        return CLASSES["Composition"]([CLASSES["Inversion"](left), right], **_product_hints(left, right))

    def _solvevec(self, rhs, adjoint=False):
        return _a.squeeze(self.solve(expand(rhs, -1), adjoint=adjoint), axis=-1)

    def solvevec(self, rhs, adjoint=False, name="solve"):
        rhs = to_param(rhs, "rhs")
        self._check_input_dtype(rhs)
        check_dim(self.shape[-1 if adjoint else -2], rhs.shape[-1])
        return self._solvevec(rhs, adjoint=adjoint)

    # ---- determinants -----------------------------------------------------
    def _determinant(self):
        if self._can_use_cholesky():
            return _m.exp(self.log_abs_determinant())
        return _l.det(self.to_dense())

    def determinant(self, name="det"):
        if self.is_square is False:
            raise NotImplementedError("Determinant not implemented for an operator that is expected to not be "
                                      "square.")
        return self._determinant()

    def _log_abs_determinant(self):
        if self._can_use_cholesky():
            d = _dg.diag_part(_l.cholesky(self.to_dense()))
            return _m.multiply(2.0, _r.reduce_sum(_m.log(d), axis=-1)) if not d.dtype.is_complex else \
                _m.multiply(_m.cast(2.0, d.dtype), _r.reduce_sum(_m.log(d), axis=-1))
        return _l.slogdet(self.to_dense())[1]

    def log_abs_determinant(self, name="log_abs_det"):
        if self.is_square is False:
            raise NotImplementedError("Determinant not implemented for an operator that is expected to not be "
                                      "square.")
        return self._log_abs_determinant()

    # ---- derived operators ------------------------------------------------
    def adjoint(self, name: str = "adjoint") -> "LinearOperator":
        """The operator's adjoint (the operator itself when it is hinted self-adjoint)."""
        if self.is_self_adjoint is True:
            return self
        return self._linop_adjoint()

    H = property(adjoint, None)

    def _linop_adjoint(self) -> "LinearOperator":
        return CLASSES["Adjoint"](self, is_non_singular=self.is_non_singular, is_self_adjoint=self.is_self_adjoint,
                                  is_positive_definite=self.is_positive_definite, is_square=self.is_square)

    def inverse(self, name: str = "inverse") -> "LinearOperator":
        if self.is_square is False:
            raise ValueError("Cannot take the Inverse: This operator represents a non square matrix.")
        if self.is_non_singular is False:
            raise ValueError("Cannot take the Inverse: This operator represents a singular matrix.")
        return self._linop_inverse()

    def _linop_inverse(self) -> "LinearOperator":
        return CLASSES["Inversion"](self, is_non_singular=self.is_non_singular,
                                    is_self_adjoint=self.is_self_adjoint,
                                    is_positive_definite=self.is_positive_definite, is_square=self.is_square)

    def cholesky(self, name: str = "cholesky") -> "LinearOperator":
        if not self._can_use_cholesky():
            raise ValueError("Cannot take the Cholesky decomposition: Not a positive definite self adjoint matrix.")
        return self._linop_cholesky()

    def _linop_cholesky(self) -> "LinearOperator":
        return CLASSES["LowerTriangular"](_l.cholesky(self.to_dense()), is_non_singular=True,
                                          is_self_adjoint=False, is_square=True)

    # ---- dense views ------------------------------------------------------
    def _to_dense(self):
        eye = _a.eye(self.domain_dimension, batch_shape=list(self.batch_shape), dtype=self.dtype)
        return self.matmul(eye)

    def to_dense(self, name="to_dense"):
        return self._to_dense()

    def _diag_part(self):
        return _dg.diag_part(self.to_dense())

    def diag_part(self, name="diag_part"):
        return self._diag_part()

    def _trace(self):
        return _r.reduce_sum(self.diag_part(), axis=-1)

    def trace(self, name="trace"):
        return self._trace()

    def _add_to_tensor(self, x):
        return _m.add(self.to_dense(), x)

    def add_to_tensor(self, x, name="add_to_tensor"):
        x = to_param(x, "x")
        self._check_input_dtype(x)
        return self._add_to_tensor(x)

    def _eigvals(self):
        return _l.eigvalsh(self.to_dense())

    def eigvals(self, name="eigvals"):
        if not self.is_self_adjoint:
            raise NotImplementedError("Only self-adjoint matrices are supported.")
        return self._eigvals()

    def _cond(self):
        if not self.is_self_adjoint:
            vals = _l.svd(self.to_dense(), compute_uv=False)
        else:
            vals = _m.abs(self._eigvals())
        return _m.divide(_r.reduce_max(vals, axis=-1), _r.reduce_min(vals, axis=-1))

    def cond(self, name="cond"):
        return self._cond()

    def _can_use_cholesky(self) -> bool:
        return bool(self.is_self_adjoint and self.is_positive_definite)

    # ---- batch slicing -----------------------------------------------------
    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        """Parameter name -> its number of non-batch dimensions (TF's protocol for ``op[...]``)."""
        return {}

    def __getitem__(self, slices) -> "LinearOperator":
        """``op[i]``, ``op[:, 1:]`` ...: the operator over a slice of the batch dimensions (each
        parameter broadcast to the batch shape and sliced), as TF's ``batch_slice``."""
        slices = slices if isinstance(slices, tuple) else (slices,)
        batch = tuple(self.batch_shape)
        if any(s is Ellipsis for s in slices):
            i = next(k for k, s in enumerate(slices) if s is Ellipsis)
            slices = slices[:i] + (slice(None),) * (len(batch) - len(slices) + 1) + slices[i + 1:]
        if len(slices) > len(batch):
            raise ValueError(f"Too many slices for the batch shape {list(batch)} of {self.name}: got {len(slices)} "
                             f"(only batch dimensions can be sliced)")
        params = dict(self.parameters)
        for name, nd in self._experimental_parameter_ndims_to_matrix_ndims.items():
            params[name] = _slice_param(params.get(name), nd, batch, slices)
        return self._sliced(params, batch, slices)

    def _sliced(self, params: dict, batch: tuple, slices: tuple) -> "LinearOperator":
        return type(self)(**params)

    def __repr__(self) -> str:
        return (f"<tf.linalg.{type(self).__name__} '{self.name}' shape={list(self.shape)} "
                f"dtype={self.dtype.name if self.dtype else None}>")


def _slice_param(value: Any, nd: Any, batch: tuple, slices: tuple) -> Any:
    """One parameter of a batch-sliced operator (``nd``: its non-batch rank, or a structure of them)."""
    if value is None:
        return None
    if isinstance(nd, (list, tuple)):
        return type(value)(_slice_param(v, n, batch, slices) for v, n in zip(value, nd))
    if isinstance(value, LinearOperator):
        if tuple(value.batch_shape) != batch:
            raise NotImplementedError(f"Slicing an operator whose operand {value.name} has batch shape "
                                      f"{list(value.batch_shape)}, not the operator's {list(batch)}, is not supported")
        return value[slices]
    t = convert_to_tensor(value)
    event = list(t.shape[len(t.shape) - nd:]) if nd else []
    return _a.broadcast_to(t, list(batch) + event)[slices]


def _product_hints(left: LinearOperator, right: LinearOperator) -> dict:
    """TF's hints for ``left @ right`` (and ``left^-1 @ right``)."""
    is_square = square_hint(left, right)
    hints: Dict[str, Optional[bool]] = {"is_non_singular": None, "is_self_adjoint": None,
                                        "is_positive_definite": None, "is_square": is_square}
    if is_square:
        hints["is_non_singular"] = non_singular_hint(left, right)
    elif is_square is False:
        hints.update(is_non_singular=False, is_self_adjoint=False, is_positive_definite=False)
    return hints


__all__ = ["CLASSES", "LinearOperator"]
