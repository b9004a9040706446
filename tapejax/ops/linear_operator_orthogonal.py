"""Orthogonal operators: ``LinearOperatorHouseholder`` (the reflection ``I - 2 v v^H / |v|^2``,
self-adjoint and its own inverse) and ``LinearOperatorPermutation`` (a gather of rows; its solve
gathers by the inverse permutation)."""
import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from . import (
    array as _a,
    diagonals as _dg,
    indexing as _ix,
    linalg_more as _lm,
    math as _m,
    reduce as _r,
    sorting as _so,
)
from .checks import traced
from .linear_operator import LinearOperator, broadcast_shapes, conj, expand, to_param, value_of


class LinearOperatorHouseholder(LinearOperator):
    """``tf.linalg.LinearOperatorHouseholder``: ``I - 2 v v^H / |v|^2`` (self-adjoint, its own inverse)."""

    def __init__(self, reflection_axis, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorHouseholder"):
        parameters = dict(reflection_axis=reflection_axis, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, name=name)
        self._reflection_axis = to_param(reflection_axis, "reflection_axis")
        if len(self._reflection_axis.shape) < 1:
            raise ValueError(f"Argument reflection_axis must have at least 1 dimension.  Found: "
                             f"{self._reflection_axis}")
        if is_self_adjoint is False:
            raise ValueError("A Householder operator is always self adjoint.")
        if is_positive_definite is True:
            raise ValueError("A Householder operator is always non-positive definite.")
        if is_square is False:
            raise ValueError("A Householder operator is always square.")
        super().__init__(dtype=self._reflection_axis.dtype, is_non_singular=is_non_singular, is_self_adjoint=True,
                         is_positive_definite=False, is_square=True, parameters=parameters, name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"reflection_axis": 1}

    @property
    def reflection_axis(self):
        return self._reflection_axis

    def _shape(self):
        s = tuple(self._reflection_axis.shape)
        return s + s[-1:]

    def _assert_non_singular(self):
        return None

    def _assert_positive_definite(self):
        raise InvalidArgumentError(None, None, "Householder operators are always non-positive definite.")

    def _assert_self_adjoint(self):
        return None

    def _linop_adjoint(self):
        return self

    def _linop_inverse(self):
        return self

    def _unit(self):
        return expand(_r.l2_normalize(self.reflection_axis, axis=-1), -1)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _lm.adjoint(x) if adjoint_arg else x
        mat = self._unit()
        return _m.subtract(x, _m.multiply(_m.multiply(_m.cast(2, self.dtype), mat),
                                          _m.matmul(mat, x, adjoint_a=True)))

    def _trace(self):
        return _m.multiply(_m.cast(self.domain_dimension - 2, self.dtype),
                           _a.ones(list(self.batch_shape), dtype=self.dtype))

    def _determinant(self):
        return _m.negative(_a.ones(list(self.batch_shape), dtype=self.dtype))

    def _log_abs_determinant(self):
        return _a.zeros(list(self.batch_shape), dtype=self.dtype)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._matmul(rhs, adjoint, adjoint_arg)

    def _to_dense(self):
        mat = self._unit()
        matrix = _m.multiply(_m.cast(-2, self.dtype), _m.matmul(mat, mat, adjoint_b=True))
        return _lm.set_diag(matrix, _m.add(_m.cast(1, self.dtype), _dg.diag_part(matrix)))

    def _diag_part(self):
        u = _r.l2_normalize(self.reflection_axis, axis=-1)
        return _m.subtract(_m.cast(1, self.dtype), _m.multiply(_m.multiply(_m.cast(2, self.dtype), u), conj(u)))

    def _eigvals(self):
        batch = list(self.batch_shape)
        n = self.domain_dimension
        return _a.concat([_m.negative(_a.ones(batch + [1], dtype=self.dtype)),
                          _a.ones(batch + [n - 1], dtype=self.dtype)], axis=-1)

    def _cond(self):
        return _a.ones(list(self.batch_shape), dtype=self.dtype)


class LinearOperatorPermutation(LinearOperator):
    """``tf.linalg.LinearOperatorPermutation``: row ``i`` of ``P @ x`` is row ``perm[i]`` of ``x``."""

    def __init__(self, perm, dtype=_dtypes.float32, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None, name="LinearOperatorPermutation"):
        parameters = dict(perm=perm, dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        self._perm = to_param(perm, "perm")
        if len(self._perm.shape) < 1:
            raise ValueError(f"Argument `perm` must have at least 1 dimension. Received: {self._perm}.")
        if not self._perm.dtype.is_integer:
            raise TypeError(f"Argument `perm` must be integer dtype. Received: {self._perm}.")
        static = np.asarray(value_of(self._perm).numpy()) if not _is_traced(self._perm) else None
        if static is not None and np.any(np.sort(static, axis=-1) != np.arange(static.shape[-1])):
            raise ValueError(f"Argument `perm` must be a vector of unique integers from 0 to "
                             f"{static.shape[-1] - 1}.")
        if is_non_singular is False:
            raise ValueError(f"A Permutation operator is always non-singular. Expected argument `is_non_singular` "
                             f"to be True. Received: {is_non_singular}.")
        if is_square is False:
            raise ValueError(f"A Permutation operator is always square. Expected argument `is_square` to be True. "
                             f"Received: {is_square}.")
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=True, parameters=parameters,
                         name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"perm": 1}

    @property
    def perm(self):
        return self._perm

    def _shape(self):
        s = tuple(self._perm.shape)
        return s + s[-1:]

    def _assert_non_singular(self):
        return None

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        perm = value_of(self.perm)
        if adjoint and not self.is_self_adjoint:
            perm = _so.argsort(perm, axis=-1)
        x = _lm.adjoint(x) if adjoint_arg else x
        batch = tuple(broadcast_shapes(tuple(x.shape)[:-1], tuple(perm.shape)))
        k = x.shape[-1]
        x = _a.broadcast_to(x, list(batch) + [k])
        perm = _a.broadcast_to(perm, list(batch))
        m = x.shape[-2]
        y = _ix.gather(_a.reshape(x, [-1, m, k]), _a.reshape(perm, [-1, m]), axis=-2, batch_dims=1)
        return _a.reshape(y, list(batch) + [k])

    def _log_abs_determinant(self):
        return _a.zeros(list(self.batch_shape), dtype=self.dtype)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._matmul(rhs, adjoint=not adjoint, adjoint_arg=adjoint_arg)

    def _to_dense(self):
        perm = value_of(self.perm)
        n = self.domain_dimension
        return _m.cast(_m.equal(_a.range(0, n, dtype=perm.dtype), expand(perm, -1)), self.dtype)

    def _diag_part(self):
        perm = value_of(self.perm)
        return _m.cast(_m.equal(_a.range(0, self.domain_dimension, dtype=perm.dtype), perm), self.dtype)

    def _cond(self):
        return _a.ones(list(self.batch_shape), dtype=self.dtype)


def _is_traced(x) -> bool:
    return traced(x._value)


__all__ = ["LinearOperatorHouseholder", "LinearOperatorPermutation"]
