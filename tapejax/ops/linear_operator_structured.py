"""``LinearOperatorLowRankUpdate`` (``L + U D V^H``: solves by the Woodbury identity, determinants
by the matrix determinant lemma, through the ``r x r`` capacitance ``D^-1 + V^H L^-1 U``; Cholesky
when the hints allow it), ``LinearOperatorToeplitz`` (products through a ``2n`` circulant
embedding, i.e. FFTs) and ``LinearOperatorTridiag`` (``tridiagonal_matmul`` / ``tridiagonal_solve``
in TF's three diagonal formats)."""
from typing import Any

from . import (
    array as _a,
    diagonals as _dg,
    indexing as _ix,
    layout as _lo,
    linalg as _l,
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
    conj,
    dense_solve_with_broadcast,
    expand,
    to_param,
    value_of,
)
from .linear_operator_circulant import LinearOperatorCirculant, to_complex


class LinearOperatorLowRankUpdate(LinearOperator):
    """``tf.linalg.LinearOperatorLowRankUpdate``: ``base_operator + u diag(diag_update) v^H`` (``v``
    defaults to ``u``, ``diag_update`` to ones)."""

    def __init__(self, base_operator, u, diag_update=None, v=None, is_diag_update_positive=None,
                 is_non_singular=None, is_self_adjoint=None, is_positive_definite=None, is_square=None,
                 name="LinearOperatorLowRankUpdate"):
        parameters = dict(base_operator=base_operator, u=u, diag_update=diag_update, v=v,
                          is_diag_update_positive=is_diag_update_positive, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, name=name)
        dtype = base_operator.dtype
        if diag_update is None:
            if is_diag_update_positive is False:
                raise ValueError("Default diagonal is the identity, which is positive.  However, user set "
                                 "'is_diag_update_positive' to False.")
            is_diag_update_positive = True
        self._use_cholesky = bool(base_operator.is_positive_definite and base_operator.is_self_adjoint
                                  and is_diag_update_positive and v is None)
        if base_operator.is_self_adjoint and v is None and not dtype.is_complex:
            if is_self_adjoint is False:
                raise ValueError("A = L + UDU^H, with L self-adjoint and D real diagonal.  Since UDU^H is "
                                 "self-adjoint, this must be a self-adjoint operator.")
            is_self_adjoint = True
        if self._use_cholesky:
            if is_positive_definite is False or is_self_adjoint is False or is_non_singular is False:
                raise ValueError("Arguments imply this is self-adjoint positive-definite operator.")
            is_positive_definite = True
            is_self_adjoint = True
        self._u = to_param(u, "u")
        self._v = self._u if v is None else to_param(v, "v")
        self._diag_update = None if diag_update is None else to_param(diag_update, "diag_update")
        self._base_operator = base_operator
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name)
        if self._diag_update is not None:
            self._diag_operator = CLASSES["Diag"](self._diag_update, is_positive_definite=is_diag_update_positive)
        else:
            self._diag_operator = CLASSES["Identity"](self._u.shape[-1], dtype=dtype)
        self._is_diag_update_positive = is_diag_update_positive
        uv = broadcast_shapes(self._u.shape, self._v.shape)
        batch = broadcast_shapes(base_operator.batch_shape, uv[:-2])
        if base_operator.domain_dimension != uv[-2]:
            raise ValueError(f"Dimensions {base_operator.domain_dimension} and {uv[-2]} are not compatible")
        if self._diag_update is not None:
            if uv[-1] != self._diag_update.shape[-1]:
                raise ValueError(f"Dimensions {uv[-1]} and {self._diag_update.shape[-1]} are not compatible")
            broadcast_shapes(batch, self._diag_update.shape[:-1])

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"base_operator": 0, "u": 2, "diag_update": 1, "v": 2}

    @property
    def u(self):
        return self._u

    @property
    def v(self):
        return self._v

    @property
    def is_diag_update_positive(self):
        return self._is_diag_update_positive

    @property
    def diag_update(self):
        return self._diag_update

    @property
    def diag_operator(self):
        return self._diag_operator

    @property
    def base_operator(self):
        return self._base_operator

    def _assert_self_adjoint(self):
        if self.u is self.v and self.diag_update is None:
            return self.base_operator.assert_self_adjoint()
        return super()._assert_self_adjoint()

    def _shape(self):
        batch = broadcast_shapes(self.base_operator.batch_shape, self.diag_operator.batch_shape,
                                 self.u.shape[:-2], self.v.shape[:-2])
        return tuple(batch) + tuple(self.base_operator.shape[-2:])

    def _uv(self):
        u = value_of(self.u)
        return u, (u if self.v is self.u else value_of(self.v))

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        u, v = self._uv()
        lead = self.base_operator.matmul(x, adjoint=adjoint, adjoint_arg=adjoint_arg)
        a, b = (u, v) if adjoint else (v, u)   # adjoint: L^H x + V D^H U^H x
        ah_x = _m.matmul(a, x, adjoint_a=True, adjoint_b=adjoint_arg)
        return _m.add(lead, _m.matmul(b, self.diag_operator.matmul(ah_x, adjoint=adjoint)))

    def _capacitance(self, u, v):
        """``D^-1 + V^H L^-1 U``."""
        vh_linv_u = _m.matmul(v, self.base_operator.solve(u), adjoint_a=True)
        return self.diag_operator.inverse().add_to_tensor(vh_linv_u)

    def _determinant(self):
        if self.is_positive_definite:
            return _m.exp(self.log_abs_determinant())
        u, v = self._uv()
        det_c = _l.det(self._capacitance(u, v))
        return _m.multiply(_m.multiply(det_c, self.diag_operator.determinant()), self.base_operator.determinant())

    def _diag_part(self):
        u, v = self._uv()
        product = _m.multiply(u, conj(v))
        if self.diag_update is not None:
            product = _m.multiply(product, expand(self.diag_update, -2))
        return _m.add(_r.reduce_sum(product, axis=-1), self.base_operator.diag_part())

    def _log_abs_determinant(self):
        u, v = self._uv()
        ld_d = self.diag_operator.log_abs_determinant()
        ld_l = self.base_operator.log_abs_determinant()
        cap = self._capacitance(u, v)
        if self._use_cholesky:
            d = _dg.diag_part(_l.cholesky(cap))
            ld_c = _m.multiply(_m.cast(2, d.dtype), _r.reduce_sum(_m.log(d), axis=-1))
        else:
            ld_c = _m.log(_m.abs(_l.det(cap)))
            if self.dtype.is_complex:
                ld_c = _m.cast(ld_c, self.dtype)
        return _m.add(_m.add(ld_c, ld_d), ld_l)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        if self.base_operator.is_non_singular is False:
            raise ValueError("Solve not implemented unless this is a perturbation of a non-singular LinearOperator.")
        base = self.base_operator
        if adjoint:
            v, u = self._uv()
            cap = self._capacitance(v, u)
        else:
            u, v = self._uv()
            cap = self._capacitance(u, v)
        linv_rhs = base.solve(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)
        vh_linv_rhs = _m.matmul(v, linv_rhs, adjoint_a=True)
        if self._use_cholesky:
            capinv = _l.cholesky_solve(_l.cholesky(cap), vh_linv_rhs)
        else:
            capinv = dense_solve_with_broadcast(cap, vh_linv_rhs, adjoint=adjoint)
        return _m.subtract(linv_rhs, base.solve(_m.matmul(u, capinv), adjoint=adjoint))


class LinearOperatorToeplitz(LinearOperator):
    """``tf.linalg.LinearOperatorToeplitz``: first column ``col``, first row ``row`` (``row[0]`` is
    ignored: the diagonal is ``col[0]``)."""

    def __init__(self, col, row, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorToeplitz"):
        parameters = dict(col=col, row=row, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        self._row = to_param(row, "row")
        self._col = to_param(col, "col")
        for arg, t in (("row", self._row), ("col", self._col)):
            if len(t.shape) < 1:
                raise ValueError(f"Argument {arg} must have at least 1 dimension.  Found: {t}")
        if self._row.shape[-1] != self._col.shape[-1]:
            raise ValueError("Expected square matrix, got row and col with mismatched dimensions.")
        if is_square is False:
            raise ValueError("Only square Toeplitz operators currently supported.")
        super().__init__(dtype=self._row.dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=True, parameters=parameters,
                         name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"col": 1, "row": 1}

    @property
    def col(self):
        return self._col

    @property
    def row(self):
        return self._row

    def _shape(self):
        s = tuple(broadcast_shapes(self.row.shape, self.col.shape))
        return s + s[-1:]

    def _assert_self_adjoint(self):
        assert_that(_m.equal(self.row, self.col), "row and col are not the same, and so this operator is not "
                    "self-adjoint.")

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _lm.adjoint(x) if adjoint_arg else x
        expanded = _a.concat([x, _a.zeros_like(x)], axis=-2)
        col, row = _broadcast_all([value_of(self.col), value_of(self.row)])
        circ_col = _a.concat([col, _a.zeros_like(col[..., 0:1]), _a.reverse(row[..., 1:], axis=[-1])], axis=-1)
        circulant = LinearOperatorCirculant(_lo.fftnd(to_complex(circ_col), axes=[-1]), input_output_dtype=row.dtype)
        result: Any = circulant.matmul(expanded, adjoint=adjoint)
        return _m.cast(result[..., :self.domain_dimension, :], self.dtype)

    def _trace(self):
        return _m.multiply(_m.cast(self.domain_dimension, self.dtype), self.col[..., 0])

    def _diag_part(self):
        return _m.multiply(self.col[..., 0:1], _a.ones([self.domain_dimension], dtype=self.dtype))

    def _to_dense(self):
        row, col = value_of(self.row), value_of(self.col)
        shape = list(broadcast_shapes(row.shape, col.shape))
        n = row.shape[-1]
        row, col = _a.broadcast_to(row, shape), _a.broadcast_to(col, shape)
        elements = _a.concat([_a.reverse(col, axis=[-1]), row[..., 1:]], axis=-1)
        idx = [[(j + n - 1 - i) % (2 * n - 1) for j in range(n)] for i in range(n)]
        return _ix.gather(elements, idx, axis=-1)


_FORMATS = ("compact", "matrix", "sequence")


class LinearOperatorTridiag(LinearOperator):
    """``tf.linalg.LinearOperatorTridiag``: a tridiagonal matrix in ``compact`` (``[..., 3, N]``:
    superdiagonal, diagonal, subdiagonal), ``matrix`` or ``sequence`` format."""

    def __init__(self, diagonals, diagonals_format="compact", is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None, name="LinearOperatorTridiag"):
        parameters = dict(diagonals=diagonals, diagonals_format=diagonals_format, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, name=name)
        if diagonals_format not in _FORMATS:
            raise ValueError(f"Argument `diagonals_format` must be one of compact, matrix, or sequence. Received : "
                             f"{diagonals_format}.")
        if diagonals_format == "sequence":
            self._diagonals = [to_param(d, f"diag_{i}") for i, d in enumerate(diagonals)]
            dtype = self._diagonals[0].dtype
        else:
            self._diagonals = to_param(diagonals, "diagonals")
            dtype = self._diagonals.dtype
        self._diagonals_format = diagonals_format
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=is_square, parameters=parameters,
                         name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"diagonals": [1, 1, 1] if self.diagonals_format == "sequence" else 2}

    @property
    def diagonals(self) -> Any:
        return self._diagonals

    @property
    def diagonals_format(self):
        return self._diagonals_format

    def _shape(self):
        d: Any = self.diagonals
        if self.diagonals_format == "matrix":
            return tuple(d.shape)
        if self.diagonals_format == "compact":
            s = tuple(d.shape[:-2]) + (d.shape[-1],)
        else:
            s = tuple(broadcast_shapes(d[0].shape[:-1], d[1].shape[:-1], d[2].shape[:-1])) + (d[1].shape[-1],)
        return s + s[-1:]

    def _parts(self, diagonals):
        """(superdiagonal, diagonal, subdiagonal) of ``diagonals`` in this operator's format."""
        if self.diagonals_format == "sequence":
            return [value_of(d) for d in diagonals]
        if self.diagonals_format == "compact":
            return _a.unstack(diagonals, axis=-2)
        m = value_of(diagonals)
        sup = _a.pad(_dg.diag_part(m, k=1), [[0, 0]] * (len(m.shape) - 2) + [[0, 1]])
        sub = _a.pad(_dg.diag_part(m, k=-1), [[0, 0]] * (len(m.shape) - 2) + [[1, 0]])
        return [sup, _dg.diag_part(m), sub]

    def _assert_self_adjoint(self):
        diag_msg = "This tridiagonal operator contained non-zero imaginary values on the diagonal."
        off_msg = "This tridiagonal operator has non-conjugate subdiagonal and superdiagonal."
        if self.diagonals_format == "matrix":
            assert_that(_m.equal(self.diagonals, _lm.adjoint(self.diagonals)), "Matrix was not equal to its adjoint.")
            return None
        sup, diag, sub = self._parts(self.diagonals)
        if self.dtype.is_complex:
            assert_that(_m.equal(_sp.imag(diag), 0), diag_msg)
        sub = _a.roll(sub, shift=-1, axis=-1)
        assert_that(_m.equal(conj(sub[..., :-1]), sup[..., :-1]), off_msg)
        return None

    def _adjoint_diagonals(self, diagonals):
        if self.diagonals_format == "matrix":
            return _lm.adjoint(diagonals)
        sup, diag, sub = [conj(p) for p in self._parts(diagonals)]
        new = [_a.roll(sub, shift=-1, axis=-1), diag, _a.roll(sup, shift=1, axis=-1)]
        return new if self.diagonals_format == "sequence" else _a.stack(new, axis=-2)

    def _compact(self, diagonals):
        if self.diagonals_format == "compact":
            return diagonals
        return _a.stack(list(self._parts(diagonals)) if self.diagonals_format == "matrix"
                        else list(_broadcast_all(self._parts(diagonals))), axis=-2)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        d = self._adjoint_diagonals(self.diagonals) if adjoint else self.diagonals
        x = _lm.adjoint(x) if adjoint_arg else x
        if self.diagonals_format == "matrix":
            return _m.matmul(_dg.band_part(d, 1, 1), x)
        return _lm.tridiagonal_matmul(d, x, diagonals_format=self.diagonals_format)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        d = self._adjoint_diagonals(self.diagonals) if adjoint else self.diagonals
        rhs = _lm.adjoint(rhs) if adjoint_arg else rhs
        compact: Any = self._compact(d)
        batch = list(broadcast_shapes(compact.shape[:-2], rhs.shape[:-2]))
        rhs = _a.broadcast_to(rhs, batch + list(rhs.shape[-2:]))
        compact = _a.broadcast_to(compact, batch + list(compact.shape[-2:]))
        return _lm.tridiagonal_solve(compact, rhs, diagonals_format="compact")

    def _diag_part(self):
        if self.diagonals_format == "matrix":
            return _dg.diag_part(self.diagonals)
        if self.diagonals_format == "sequence":
            return _a.broadcast_to(self.diagonals[1], list(self.shape[:-1]))
        return self.diagonals[..., 1, :]

    def _to_dense(self):
        if self.diagonals_format == "matrix":
            return value_of(self.diagonals)
        d = self.diagonals if self.diagonals_format == "compact" else _a.stack(
            list(_broadcast_all([value_of(x) for x in self.diagonals])), axis=-2)
        band: Any = (-1, 1)
        return _dg.diag(d, k=band, num_rows=-1, num_cols=-1, align="LEFT_RIGHT", padding_value=0)


def _broadcast_all(tensors):
    shape = list(broadcast_shapes(*[t.shape for t in tensors]))
    return [_a.broadcast_to(t, shape) for t in tensors]


__all__ = ["LinearOperatorLowRankUpdate", "LinearOperatorToeplitz", "LinearOperatorTridiag"]
