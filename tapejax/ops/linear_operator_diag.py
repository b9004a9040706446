"""Operators whose structure makes every method cheap: ``LinearOperatorDiag`` (products multiply,
solves divide), ``LinearOperatorIdentity`` / ``LinearOperatorScaledIdentity`` (no matrix at all),
and ``LinearOperatorZeros``.  TF's hint rules and its algebra between them
(``Diag @ Diag`` is a ``Diag``, ``Identity.inverse()`` is itself ...)."""
from typing import Any, Dict

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import (
    array as _a,
    diagonals as _dg,
    linalg_more as _lm,
    math as _m,
    reduce as _r,
    special as _sp,
)
from .linear_operator import (
    CLASSES,
    LinearOperator,
    assert_that,
    broadcast_shapes,
    commuting_positive_definite_hint,
    commuting_self_adjoint_hint,
    conj,
    expand,
    non_singular_hint,
    to_param,
    value_of,
)


class LinearOperatorDiag(LinearOperator):
    """``tf.linalg.LinearOperatorDiag``: ``diag(d)`` for ``d`` of shape ``[..., N]``."""

    def __init__(self, diag, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorDiag"):
        parameters = dict(diag=diag, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        self._diag = to_param(diag, "diag")
        self._check_diag(self._diag)
        if not self._diag.dtype.is_complex:
            if is_self_adjoint is False:
                raise ValueError("A real diagonal operator is always self adjoint.")
            is_self_adjoint = True
        if is_square is False:
            raise ValueError("Only square diagonal operators currently supported.")
        super().__init__(dtype=self._diag.dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=True, parameters=parameters,
                         name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"diag": 1}

    def _check_diag(self, diag):
        if len(diag.shape) < 1:
            raise ValueError(f"Argument diag must have at least 1 dimension.  Found: {diag}")

    @property
    def diag(self):
        return self._diag

    def _shape(self):
        s = tuple(self._diag.shape)
        return s + s[-1:]

    def _linop_inverse(self):
        return LinearOperatorDiag(_m.divide(_m.cast(1.0, self.dtype), self.diag),
                                  is_non_singular=self.is_non_singular, is_self_adjoint=self.is_self_adjoint,
                                  is_positive_definite=self.is_positive_definite, is_square=True)

    def _linop_matmul(self, left, right):
        hints: Dict[str, Any] = dict(is_non_singular=non_singular_hint(left, right),
                                     is_self_adjoint=commuting_self_adjoint_hint(left, right))
        if isinstance(right, LinearOperatorDiag):
            return LinearOperatorDiag(_m.multiply(left.diag, right.diag),
                                      is_positive_definite=commuting_positive_definite_hint(left, right),
                                      is_square=True, **hints)
        if isinstance(right, LinearOperatorScaledIdentity):
            return LinearOperatorDiag(_m.multiply(left.diag, right.multiplier),
                                      is_positive_definite=commuting_positive_definite_hint(left, right),
                                      is_square=True, **hints)
        if isinstance(right, CLASSES["LowerTriangular"]):
            return CLASSES["LowerTriangular"](_m.multiply(expand(left.diag, -1), right.to_dense()),
                                              is_positive_definite=None, is_square=True, **hints)
        return super()._linop_matmul(left, right)

    def _linop_solve(self, left, right):
        hints: Dict[str, Any] = dict(is_non_singular=non_singular_hint(left, right),
                                     is_self_adjoint=commuting_self_adjoint_hint(left, right))
        if isinstance(right, LinearOperatorDiag):
            return LinearOperatorDiag(_m.divide(right.diag, left.diag),
                                      is_positive_definite=commuting_positive_definite_hint(left, right),
                                      is_square=True, **hints)
        if isinstance(right, LinearOperatorScaledIdentity):
            return LinearOperatorDiag(_m.divide(right.multiplier, left.diag),
                                      is_positive_definite=commuting_positive_definite_hint(left, right),
                                      is_square=True, **hints)
        if isinstance(right, CLASSES["LowerTriangular"]):
            return CLASSES["LowerTriangular"](_m.divide(right.to_dense(), expand(left.diag, -1)),
                                              is_positive_definite=None, is_square=True, **hints)
        return super()._linop_solve(left, right)

    def _assert_non_singular(self):
        assert_that(_m.greater(_m.abs(self._diag), 0), "Singular operator:  Diagonal contained zero values.")

    def _assert_positive_definite(self):
        if self.dtype.is_complex:
            msg = ("Diagonal operator had diagonal entries with non-positive real part, thus was not positive "
                   "definite.")
        else:
            msg = "Real diagonal operator had non-positive diagonal entries, thus was not positive definite."
        d = _sp.real(self._diag) if self.dtype.is_complex else self._diag
        assert_that(_m.greater(d, 0), msg)

    def _assert_self_adjoint(self):
        if self.dtype.is_complex:
            assert_that(_m.equal(_sp.imag(self._diag), 0),
                        "This diagonal operator contained non-zero imaginary values.   Thus it was not self-adjoint.")

    def _linop_adjoint(self):
        return LinearOperatorDiag(conj(value_of(self.diag)), is_non_singular=self.is_non_singular,
                                  is_self_adjoint=self.is_self_adjoint, is_positive_definite=self.is_positive_definite,
                                  is_square=True)

    def _linop_cholesky(self):
        return LinearOperatorDiag(_m.sqrt(self.diag), is_non_singular=True, is_self_adjoint=True,
                                  is_positive_definite=True, is_square=True)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        d = conj(value_of(self._diag)) if adjoint else self._diag
        x = _lm.adjoint(x) if adjoint_arg else x
        return _m.multiply(expand(d, -1), x)

    def _matvec(self, x, adjoint=False):
        d = conj(value_of(self._diag)) if adjoint else self._diag
        return _m.multiply(d, x)

    def _determinant(self):
        return _r.reduce_prod(self._diag, axis=-1)

    def _log_abs_determinant(self):
        ld = _r.reduce_sum(_m.log(_m.abs(self._diag)), axis=-1)
        return _m.cast(ld, self.dtype) if self.dtype.is_complex else ld

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        d = conj(value_of(self._diag)) if adjoint else self._diag
        rhs = _lm.adjoint(rhs) if adjoint_arg else rhs
        return _m.multiply(rhs, expand(_m.divide(_m.cast(1.0, self.dtype), d), -1))

    def _to_dense(self):
        return _dg.diag(self._diag)

    def _diag_part(self):
        return value_of(self.diag)

    def _add_to_tensor(self, x):
        return _lm.set_diag(x, _m.add(self._diag, _dg.diag_part(x)))

    def _eigvals(self):
        return value_of(self.diag)

    def _cond(self):
        a = _m.abs(self.diag)
        return _m.divide(_r.reduce_max(a, axis=-1), _r.reduce_min(a, axis=-1))


# --------------------------------------------------------------------------
# identities and zeros
# --------------------------------------------------------------------------

def _static_int(value, arg: str) -> int:
    """``num_rows`` / ``num_columns``: a non-negative integer scalar (TF's checks and classes)."""
    if isinstance(value, (Tensor, Variable)):
        is_int, arr = value.dtype.is_integer, np.asarray(value.numpy())
    else:
        arr = np.asarray(value)
        is_int = np.issubdtype(arr.dtype, np.integer)
    if not is_int:
        raise TypeError(f"Argument {arg} must be integer type.  Found: {value}")
    if arr.ndim != 0:
        raise ValueError(f"Argument {arg} must be a 0-D Tensor.  Found: {arr}")
    if arr < 0:
        raise ValueError(f"Argument {arg} must be non-negative.  Found: {arr}")
    return int(arr)


def _static_batch_shape(value):
    if value is None:
        return None
    arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"Argument batch_shape must be integer type.  Found: {value}")
    if arr.ndim != 1:
        raise ValueError(f"Argument batch_shape must be a 1-D Tensor.  Found: {arr}")
    if np.any(arr < 0):
        raise ValueError(f"Argument batch_shape must be non-negative.  Found:{arr}")
    return tuple(int(d) for d in arr)


def _broadcast_to_batch(x, batch):
    """``x`` broadcast against the operator's batch shape (``x + zeros(batch + [1, 1])``, as TF)."""
    if batch is None:
        return x
    special = tuple(batch) + (1, 1)
    if tuple(broadcast_shapes(tuple(x.shape), special)) == tuple(x.shape):
        return x
    return _m.add(x, _a.zeros(list(special), dtype=x.dtype))


class _BaseIdentity(LinearOperator):
    _num_rows_static: int

    def _min_matrix_dim(self) -> int:
        return min(self.domain_dimension, self.range_dimension)

    def _ones_diag(self):
        return _a.ones(list(self.batch_shape) + [self._min_matrix_dim()], dtype=self.dtype)


class LinearOperatorIdentity(_BaseIdentity):
    """``tf.linalg.LinearOperatorIdentity``: ``I`` of size ``num_rows``, batched by ``batch_shape``."""

    def __init__(self, num_rows, batch_shape=None, dtype=None, is_non_singular=True, is_self_adjoint=True,
                 is_positive_definite=True, is_square=True, assert_proper_shapes=False,
                 name="LinearOperatorIdentity"):
        parameters = dict(num_rows=num_rows, batch_shape=batch_shape, dtype=dtype, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, assert_proper_shapes=assert_proper_shapes, name=name)
        dtype = _dtypes.as_dtype(dtype or _dtypes.float32)
        self._assert_proper_shapes = assert_proper_shapes
        if not is_self_adjoint:
            raise ValueError("An identity operator is always self adjoint.")
        if not is_non_singular:
            raise ValueError("An identity operator is always non-singular.")
        if not is_positive_definite:
            raise ValueError("An identity operator is always positive-definite.")
        if not is_square:
            raise ValueError("An identity operator is always square.")
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name)
        self._num_rows_static = _static_int(num_rows, "num_rows")
        self._batch_shape_static = _static_batch_shape(batch_shape)

    def _sliced(self, params, batch, slices):
        if params.get("batch_shape") is not None:
            params["batch_shape"] = list(np.ones(batch, np.int8)[slices].shape)
        return type(self)(**params)

    def _shape(self):
        return tuple(self._batch_shape_static or ()) + (self._num_rows_static, self._num_rows_static)

    def _linop_adjoint(self):
        return self

    def _linop_cholesky(self):
        return LinearOperatorIdentity(self._num_rows_static, batch_shape=self.batch_shape, dtype=self.dtype)

    def _linop_inverse(self):
        return self

    def _linop_matmul(self, left, right):
        return right

    def _linop_solve(self, left, right):
        return right

    def _assert_non_singular(self):
        return None

    def _assert_positive_definite(self):
        return None

    def _assert_self_adjoint(self):
        return None

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _lm.adjoint(x) if adjoint_arg else x
        return _broadcast_to_batch(x, self._batch_shape_static)

    def _determinant(self):
        return _a.ones(list(self.batch_shape), dtype=self.dtype)

    def _log_abs_determinant(self):
        return _a.zeros(list(self.batch_shape), dtype=self.dtype)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._matmul(rhs, adjoint_arg=adjoint_arg)

    def _trace(self):
        return _m.multiply(_m.cast(self._min_matrix_dim(), self.dtype), _a.ones(list(self.batch_shape),
                                                                                dtype=self.dtype))

    def _diag_part(self):
        return self._ones_diag()

    def add_to_tensor(self, mat, name="add_to_tensor"):
        mat = convert_to_tensor(mat)
        return _lm.set_diag(mat, _m.add(_m.cast(1, mat.dtype), _dg.diag_part(mat)))

    def _eigvals(self):
        return self._ones_diag()

    def _cond(self):
        return _a.ones(list(self.batch_shape), dtype=self.dtype)


class LinearOperatorScaledIdentity(_BaseIdentity):
    """``tf.linalg.LinearOperatorScaledIdentity``: ``multiplier * I`` (``multiplier`` of shape
    ``batch_shape``)."""

    def __init__(self, num_rows, multiplier, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=True, assert_proper_shapes=False, name="LinearOperatorScaledIdentity"):
        parameters = dict(num_rows=num_rows, multiplier=multiplier, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, assert_proper_shapes=assert_proper_shapes, name=name)
        self._assert_proper_shapes = assert_proper_shapes
        self._multiplier = to_param(multiplier, "multiplier")
        if not self._multiplier.dtype.is_complex:
            if is_self_adjoint is False:
                raise ValueError("A real diagonal operator is always self adjoint.")
            is_self_adjoint = True
        if not is_square:
            raise ValueError("A ScaledIdentity operator is always square.")
        super().__init__(dtype=self._multiplier.dtype, is_non_singular=is_non_singular,
                         is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                         is_square=is_square, parameters=parameters, name=name)
        self._num_rows_static = _static_int(num_rows, "num_rows")

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"multiplier": 0}

    @property
    def multiplier(self):
        return self._multiplier

    def _shape(self):
        return tuple(self._multiplier.shape) + (self._num_rows_static, self._num_rows_static)

    def _assert_non_singular(self):
        assert_that(_m.greater(_m.abs(self.multiplier), 0), "LinearOperator was singular")

    def _assert_positive_definite(self):
        m = _sp.real(self.multiplier) if self.dtype.is_complex else self.multiplier
        assert_that(_m.greater(m, 0), "LinearOperator was not positive definite.")

    def _assert_self_adjoint(self):
        if self.dtype.is_complex:
            assert_that(_m.equal(_sp.imag(self.multiplier), 0), "LinearOperator was not self-adjoint")

    def _multiplier_matrix(self, conjugate=False):
        m = expand(expand(self.multiplier, -1), -1)
        return conj(m) if conjugate else m

    def _linop_adjoint(self):
        return LinearOperatorScaledIdentity(self._num_rows_static, conj(value_of(self.multiplier)),
                                            is_non_singular=self.is_non_singular,
                                            is_self_adjoint=self.is_self_adjoint,
                                            is_positive_definite=self.is_positive_definite, is_square=True)

    def _linop_cholesky(self):
        return LinearOperatorScaledIdentity(self._num_rows_static, _m.sqrt(self.multiplier), is_non_singular=True,
                                            is_self_adjoint=True, is_positive_definite=True, is_square=True)

    def _linop_inverse(self):
        return LinearOperatorScaledIdentity(self._num_rows_static,
                                            _m.divide(_m.cast(1.0, self.dtype), self.multiplier),
                                            is_non_singular=self.is_non_singular, is_self_adjoint=True,
                                            is_positive_definite=self.is_positive_definite, is_square=True)

    def _linop_matmul(self, left, right):
        if isinstance(right, LinearOperatorScaledIdentity):
            return LinearOperatorScaledIdentity(left.domain_dimension,
                                                _m.multiply(left.multiplier, right.multiplier), is_square=True)
        if isinstance(right, LinearOperatorDiag):
            return LinearOperatorDiag(_m.multiply(right.diag, left.multiplier), is_square=True)
        return super()._linop_matmul(left, right)

    def _linop_solve(self, left, right):
        if isinstance(right, LinearOperatorScaledIdentity):
            return LinearOperatorScaledIdentity(left.domain_dimension,
                                                _m.divide(right.multiplier, left.multiplier), is_square=True)
        if isinstance(right, LinearOperatorDiag):
            return LinearOperatorDiag(_m.divide(right.diag, left.multiplier), is_square=True)
        return super()._linop_solve(left, right)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _lm.adjoint(x) if adjoint_arg else x
        return _m.multiply(x, self._multiplier_matrix(conjugate=adjoint))

    def _determinant(self):
        return _m.pow(self.multiplier, _m.cast(self._num_rows_static, self.dtype))

    def _log_abs_determinant(self):
        log_abs = _m.log(_m.abs(self.multiplier))   # in the real dtype, as TF
        return _m.multiply(_m.cast(self._num_rows_static, log_abs.dtype), log_abs)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _lm.adjoint(rhs) if adjoint_arg else rhs
        return _m.divide(rhs, self._multiplier_matrix(conjugate=adjoint))

    def _trace(self):
        ones = _a.ones(list(self.batch_shape), dtype=self.dtype)
        return _m.multiply(_m.multiply(self.multiplier, _m.cast(self._min_matrix_dim(), self.dtype)), ones)

    def _diag_part(self):
        return _m.multiply(self._ones_diag(), expand(self.multiplier, -1))

    def add_to_tensor(self, mat, name="add_to_tensor"):
        mat = convert_to_tensor(mat)
        return _lm.set_diag(mat, _m.add(expand(self.multiplier, -1), _dg.diag_part(mat)))

    def _eigvals(self):
        return _m.multiply(self._ones_diag(), expand(self.multiplier, -1))

    def _cond(self):
        return _where_nan(self._multiplier, self.dtype)


def _where_nan(multiplier, dtype):
    """TF's ``cond`` of a scaled identity: NaN where the multiplier is 0, else 1."""
    ones = _m.multiply(_m.cast(1.0, dtype), _a.ones_like(multiplier))
    return _r.where(_m.equal(multiplier, 0), _m.multiply(_m.cast(np.nan, dtype), ones), ones)


class LinearOperatorZeros(LinearOperator):
    """``tf.linalg.LinearOperatorZeros``: the ``num_rows x num_columns`` zero matrix."""

    def __init__(self, num_rows, num_columns=None, batch_shape=None, dtype=None, is_non_singular=False,
                 is_self_adjoint=True, is_positive_definite=False, is_square=True, assert_proper_shapes=False,
                 name="LinearOperatorZeros"):
        parameters = dict(num_rows=num_rows, num_columns=num_columns, batch_shape=batch_shape, dtype=dtype,
                          is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square,
                          assert_proper_shapes=assert_proper_shapes, name=name)
        dtype = _dtypes.as_dtype(dtype or _dtypes.float32)
        self._assert_proper_shapes = assert_proper_shapes
        if not is_self_adjoint and is_square:
            raise ValueError("A zero operator is always self adjoint.")
        if is_non_singular:
            raise ValueError("A zero operator is always singular.")
        if is_positive_definite:
            raise ValueError("A zero operator is always not positive-definite.")
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name)
        self._num_rows_static = _static_int(num_rows, "num_rows")
        self._num_columns_static = _static_int(num_rows if num_columns is None else num_columns, "num_columns")
        if is_square and self._num_rows_static != self._num_columns_static:
            raise ValueError(f"LinearOperatorZeros initialized as is_square=True, but got "
                             f"num_rows({self._num_rows_static}) != num_columns({self._num_columns_static})")
        self._batch_shape_static = _static_batch_shape(batch_shape)

    def _sliced(self, params, batch, slices):
        if params.get("batch_shape") is not None:
            params["batch_shape"] = list(np.ones(batch, np.int8)[slices].shape)
        return type(self)(**params)

    def _shape(self):
        return tuple(self._batch_shape_static or ()) + (self._num_rows_static, self._num_columns_static)

    def _assert_non_singular(self):
        raise InvalidArgumentError(None, None, "Zero operators are always non-invertible.")

    def _assert_positive_definite(self):
        raise InvalidArgumentError(None, None, "Zero operators are always non-positive definite.")

    def _assert_self_adjoint(self):
        return None

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        s = list(x.shape)
        if self.is_square:
            out = s[:-2] + [s[-1], s[-2]] if adjoint_arg else s
        else:
            n = self._num_columns_static if adjoint else self._num_rows_static
            out = s[:-2] + [n, s[-2] if adjoint_arg else s[-1]]
        return _broadcast_to_batch(_a.zeros(out, dtype=x.dtype), self._batch_shape_static)

    def _linop_matmul(self, left, right):
        if not left.is_square or not right.is_square:
            raise ValueError("Matmul with non-square `LinearOperator`s or non-square `LinearOperatorZeros` not "
                             "supported at this time.")
        return left

    def _determinant(self):
        return _a.zeros(list(self.batch_shape), dtype=self.dtype)

    def _trace(self):
        return _a.zeros(list(self.batch_shape), dtype=self.dtype)

    def _zeros_diag(self):
        return _a.zeros(list(self.batch_shape) + [min(self.domain_dimension, self.range_dimension)],
                        dtype=self.dtype)

    def _diag_part(self):
        return self._zeros_diag()

    def add_to_tensor(self, mat, name="add_to_tensor"):
        return _broadcast_to_batch(convert_to_tensor(mat), self._batch_shape_static)

    def _eigvals(self):
        return self._zeros_diag()


CLASSES.update(Diag=LinearOperatorDiag, Identity=LinearOperatorIdentity,
               ScaledIdentity=LinearOperatorScaledIdentity, Zeros=LinearOperatorZeros)

__all__ = ["LinearOperatorDiag", "LinearOperatorIdentity", "LinearOperatorScaledIdentity", "LinearOperatorZeros"]
