"""The operators that hold a matrix or other operators: ``LinearOperatorFullMatrix``,
``LinearOperatorLowerTriangular``, ``LinearOperatorAdjoint``, ``LinearOperatorInversion`` and
``LinearOperatorComposition`` (TF's hint rules, products and solves delegated to the operands).

The base class builds these (``adjoint()``, ``inverse()``, ``cholesky()``, ``a.matmul(b)``): they
register themselves in ``linear_operator.CLASSES`` when this module is imported."""
from ..core import dtypes as _dtypes
from . import array as _a, diagonals as _dg, linalg as _l, linalg_more as _lm, math as _m, reduce as _r
from .linear_operator import (
    CLASSES,
    LinearOperator,
    assert_that,
    broadcast_shapes,
    combine_hint,
    commuting_self_adjoint_hint,
    conj,
    expand,
    is_aat_form,
    non_singular_hint,
    to_param,
)

_FULL_MATRIX_DTYPES = (_dtypes.float16, _dtypes.float32, _dtypes.float64, _dtypes.complex64, _dtypes.complex128)



def _kept_hints(operator, what: str, *given):
    """The four hints of an operator's adjoint or inverse, which has each hint exactly when the
    operator does (TF's ValueError when a given hint contradicts the operator's)."""
    return tuple(combine_hint(operator, hint, value, f"An operator is {word} if and only if its {what} is {word}.")
                 for hint, word, value in zip(("is_square", "is_non_singular", "is_self_adjoint", "is_positive_definite"),
                                              ("square", "non-singular", "self-adjoint", "positive-definite"), given))

class LinearOperatorFullMatrix(LinearOperator):
    """``tf.linalg.LinearOperatorFullMatrix``: a dense ``[..., M, N]`` matrix."""

    def __init__(self, matrix, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorFullMatrix"):
        parameters = dict(matrix=matrix, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        self._matrix = to_param(matrix, "matrix")
        if self._matrix.dtype not in _FULL_MATRIX_DTYPES:
            raise TypeError(f"Argument `matrix` must have dtype in "
                            f"[{', '.join('tf.' + d.name for d in _FULL_MATRIX_DTYPES)}]. "
                            f"Received: {self._matrix.dtype!r}.")
        if len(self._matrix.shape) < 2:
            raise ValueError(f"Argument `matrix` must have at least 2 dimensions. Received: {self._matrix}.")
        super().__init__(dtype=self._matrix.dtype, is_non_singular=is_non_singular,
                         is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                         is_square=is_square, parameters=parameters, name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"matrix": 2}

    @property
    def matrix(self):
        return self._matrix

    def _shape(self):
        return tuple(self._matrix.shape)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return _m.matmul(self._matrix, x, adjoint_a=adjoint, adjoint_b=adjoint_arg)

    def _to_dense(self):
        return _m.identity(self._matrix)


class LinearOperatorLowerTriangular(LinearOperator):
    """``tf.linalg.LinearOperatorLowerTriangular``: the lower triangle of ``tril`` (the rest is
    ignored); solves are triangular solves, the determinant the diagonal's product."""

    def __init__(self, tril, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorLowerTriangular"):
        parameters = dict(tril=tril, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        if is_square is False:
            raise ValueError("Only square lower triangular operators supported at this time.")
        self._tril = to_param(tril, "tril")
        if len(self._tril.shape) < 2:
            raise ValueError(f"Argument tril must have at least 2 dimensions.  Found: {self._tril}")
        super().__init__(dtype=self._tril.dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=True, parameters=parameters,
                         name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"tril": 2}

    @property
    def tril(self):
        return self._tril

    def _get_tril(self):
        return _dg.band_part(self._tril, -1, 0)

    def _get_diag(self):
        return _dg.diag_part(self._tril)

    def _shape(self):
        return tuple(self._tril.shape)

    def _assert_non_singular(self):
        assert_that(_m.greater(_m.abs(self._get_diag()), 0), "Singular operator:  Diagonal contained zero values.")

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return _m.matmul(self._get_tril(), x, adjoint_a=adjoint, adjoint_b=adjoint_arg)

    def _linop_matmul(self, left, right):
        if hasattr(right, "_check_diag"):   # a diagonal operator
            return LinearOperatorLowerTriangular(
                _m.multiply(left.to_dense(), right.diag), is_non_singular=non_singular_hint(right, left),
                is_self_adjoint=commuting_self_adjoint_hint(right, left), is_positive_definite=None,
                is_square=True)
        return super()._linop_matmul(left, right)

    def _determinant(self):
        return _r.reduce_prod(self._get_diag(), axis=-1)

    def _log_abs_determinant(self):
        return _r.reduce_sum(_m.log(_m.abs(self._get_diag())), axis=-1)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _lm.adjoint(rhs) if adjoint_arg else rhs
        tril = self._get_tril()
        if tuple(tril.shape[:-2]) != tuple(rhs.shape[:-2]):
            batch = broadcast_shapes(tril.shape[:-2], rhs.shape[:-2])
            tril = _broadcast_batch(tril, batch)
            rhs = _broadcast_batch(rhs, batch)
        return _l.triangular_solve(tril, rhs, lower=True, adjoint=adjoint)

    def _to_dense(self):
        return self._get_tril()

    def _eigvals(self):
        return self._get_diag()


def _broadcast_batch(x, batch):
    return _a.broadcast_to(x, list(batch) + list(x.shape[-2:]))


class LinearOperatorAdjoint(LinearOperator):
    """``tf.linalg.LinearOperatorAdjoint``: ``operator^H``, computed by the operator's own methods."""

    def __init__(self, operator, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        parameters = dict(operator=operator, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        self._operator = operator
        is_square, is_non_singular, is_self_adjoint, is_positive_definite = _kept_hints(
            operator, "adjoint", is_square, is_non_singular, is_self_adjoint, is_positive_definite)
        super().__init__(dtype=operator.dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name if name is not None else operator.name + "_adjoint")

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"operator": 0}

    @property
    def operator(self):
        return self._operator

    def _linop_adjoint(self):
        return self.operator

    def _assert_non_singular(self):
        return self.operator.assert_non_singular()

    def _assert_positive_definite(self):
        return self.operator.assert_positive_definite()

    def _assert_self_adjoint(self):
        return self.operator.assert_self_adjoint()

    def _shape(self):
        s = tuple(self.operator.shape)
        return s[:-2] + (s[-1], s[-2])

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self.operator.matmul(x, adjoint=not adjoint, adjoint_arg=adjoint_arg)

    def _matvec(self, x, adjoint=False):
        return self.operator.matvec(x, adjoint=not adjoint)

    def _determinant(self):
        if self.is_self_adjoint:
            return self.operator.determinant()
        return conj(self.operator.determinant())

    def _log_abs_determinant(self):
        return self.operator.log_abs_determinant()

    def _trace(self):
        if self.is_self_adjoint:
            return self.operator.trace()
        return conj(self.operator.trace())

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self.operator.solve(rhs, adjoint=not adjoint, adjoint_arg=adjoint_arg)

    def _solvevec(self, rhs, adjoint=False):
        return self.operator.solvevec(rhs, adjoint=not adjoint)

    def _to_dense(self):
        if self.is_self_adjoint:
            return self.operator.to_dense()
        return _lm.adjoint(self.operator.to_dense())

    def _eigvals(self):
        vals = self.operator.eigvals()
        return vals if self.operator.is_self_adjoint else conj(vals)

    def _cond(self):
        return self.operator.cond()


class LinearOperatorInversion(LinearOperator):
    """``tf.linalg.LinearOperatorInversion``: ``operator^-1`` (its matmul is the operator's solve)."""

    def __init__(self, operator, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        parameters = dict(operator=operator, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        self._operator = operator
        if operator.is_non_singular is False or is_non_singular is False:
            raise ValueError(f"Argument `is_non_singular` or argument `operator` must have supplied hint "
                             f"`is_non_singular` equal to `True` or `None`. Found `operator.is_non_singular`: "
                             f"{operator.is_non_singular}, `is_non_singular`: {is_non_singular}.")
        if operator.is_square is False or is_square is False:
            raise ValueError(f"Argument `is_square` or argument `operator` must have supplied hint `is_square` "
                             f"equal to `True` or `None`. Found `operator.is_square`: {operator.is_square}, "
                             f"`is_square`: {is_square}.")
        is_square, is_non_singular, is_self_adjoint, is_positive_definite = _kept_hints(
            operator, "inverse", is_square, is_non_singular, is_self_adjoint, is_positive_definite)
        super().__init__(dtype=operator.dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name if name is not None else operator.name + "_inv")

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"operator": 0}

    @property
    def operator(self):
        return self._operator

    def _linop_inverse(self):
        return self.operator

    def _linop_solve(self, left, right):
        return left.operator.matmul(right)

    def _assert_non_singular(self):
        return self.operator.assert_non_singular()

    def _assert_positive_definite(self):
        return self.operator.assert_positive_definite()

    def _assert_self_adjoint(self):
        return self.operator.assert_self_adjoint()

    def _shape(self):
        return tuple(self.operator.shape)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self.operator.solve(x, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _determinant(self):
        return _m.divide(_m.cast(1.0, self.dtype), self.operator.determinant())

    def _log_abs_determinant(self):
        return _m.negative(self.operator.log_abs_determinant())

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self.operator.matmul(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _eigvals(self):
        vals = self.operator.eigvals()
        return _m.divide(_m.cast(1.0, vals.dtype), vals)

    def _cond(self):
        return self.operator.cond()


class LinearOperatorComposition(LinearOperator):
    """``tf.linalg.LinearOperatorComposition``: ``operators[0] @ operators[1] @ ...``, applied one
    operator at a time (solves in the reverse order)."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        parameters = dict(operators=operators, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        if not hasattr(operators, "__iter__") or isinstance(operators, (str, bytes, dict)):
            raise TypeError(f"Expected argument `operators` to be a proper iterable; got {operators!r}")
        operators = list(operators)
        if not operators:
            raise ValueError(f"Expected a non-empty list of operators. Found: {operators}")
        self._operators = operators
        dtype = operators[0].dtype
        if any(o.dtype != dtype for o in operators):
            raise TypeError("Expected all operators to have the same dtype.  Found "
                            + "   ".join(str((o.name, o.dtype)) for o in operators))
        if all(o.is_non_singular for o in operators):
            if is_non_singular is False:
                raise ValueError("The composition of non-singular operators is always non-singular.")
            is_non_singular = True
        aat = is_aat_form(operators)
        if (len(operators) == 1 and operators[0].is_self_adjoint) or aat:
            if is_self_adjoint is False:
                raise ValueError("The composition was determined to be self-adjoint but user provided incorrect "
                                 "`False` hint.")
            is_self_adjoint = True
        if aat:
            if is_square is False:
                raise ValueError("The composition was determined have the form A @ A.H, hence it must be square. "
                                 "The user provided an incorrect `False` hint.")
            is_square = True
            if is_non_singular:
                if is_positive_definite is False:
                    raise ValueError("The composition was determined to be non-singular and have the form A @ A.H, "
                                     "hence it must be positive-definite. The user provided an incorrect `False` "
                                     "hint.")
                is_positive_definite = True
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name if name is not None else "_o_".join(o.name for o in operators))

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"operators": [0] * len(self.operators)}

    @property
    def operators(self):
        return self._operators

    def _shape(self):
        ops = self.operators
        dom = ops[0].domain_dimension
        for o in ops[1:]:
            if dom != o.range_dimension:
                raise ValueError(f"Dimensions {dom} and {o.range_dimension} are not compatible")
            dom = o.domain_dimension
        batch = broadcast_shapes(*[o.batch_shape for o in ops])
        return tuple(batch) + (ops[0].range_dimension, ops[-1].domain_dimension)

    def _linop_cholesky(self):
        ops = self.operators
        if len(ops) == 2 and is_aat_form(ops) and isinstance(ops[0], LinearOperatorLowerTriangular):
            left = ops[0]
            if left.is_positive_definite:
                return left
            sign = expand(_m.sign(left.diag_part()), -2)
            return LinearOperatorLowerTriangular(_m.divide(left.tril, sign), is_non_singular=left.is_non_singular,
                                                 is_self_adjoint=left.is_self_adjoint,
                                                 is_positive_definite=True if left.is_positive_definite else None,
                                                 is_square=True)
        return LinearOperatorLowerTriangular(_l.cholesky(self.to_dense()), is_non_singular=True,
                                             is_self_adjoint=False, is_square=True)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        order = list(self.operators) if adjoint else list(reversed(self.operators))
        result = order[0].matmul(x, adjoint=adjoint, adjoint_arg=adjoint_arg)
        for o in order[1:]:
            result = o.matmul(result, adjoint=adjoint)
        return result

    def _determinant(self):
        result = self.operators[0].determinant()
        for o in self.operators[1:]:
            result = _m.multiply(result, o.determinant())
        return result

    def _log_abs_determinant(self):
        result = self.operators[0].log_abs_determinant()
        for o in self.operators[1:]:
            result = _m.add(result, o.log_abs_determinant())
        return result

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        order = list(reversed(self.operators)) if adjoint else list(self.operators)
        solution = order[0].solve(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)
        for o in order[1:]:
            solution = o.solve(solution, adjoint=adjoint)
        return solution

    def _assert_non_singular(self):
        if all(o.is_square for o in self.operators):
            for o in self.operators:
                o.assert_non_singular()
            return None
        return super()._assert_non_singular()


CLASSES.update(FullMatrix=LinearOperatorFullMatrix, LowerTriangular=LinearOperatorLowerTriangular,
               Adjoint=LinearOperatorAdjoint, Inversion=LinearOperatorInversion,
               Composition=LinearOperatorComposition)

__all__ = ["LinearOperatorAdjoint", "LinearOperatorComposition", "LinearOperatorFullMatrix",
           "LinearOperatorInversion", "LinearOperatorLowerTriangular"]
