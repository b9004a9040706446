"""``LinearOperatorKronecker``: ``A_1 ⊗ A_2 ⊗ ...`` never formed: each factor's own ``matmul`` /
``solve`` acts on its axis of the argument reshaped to ``[..., n_1, ..., n_F, k]``; the determinant
is ``prod det(A_i)^(N / n_i)``, the diagonal and eigenvalues the factors' outer products, and
``adjoint`` / ``inverse`` / ``cholesky`` are taken factor by factor, as TF."""
import numpy as np

from ..core.errors import InvalidArgumentError
from . import array as _a, linalg_more as _lm, math as _m
from .linear_operator import LinearOperator, broadcast_shapes, expand
from .linear_operator_block import _check_iterable


class LinearOperatorKronecker(LinearOperator):
    """``tf.linalg.LinearOperatorKronecker``: ``A_1 ⊗ A_2 ⊗ ...``, never formed: each factor acts on
    its own axis of the argument reshaped to ``[..., n_1, n_2, ..., k]``."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        parameters = dict(operators=operators, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        operators = _check_iterable(operators, "operators")
        if not operators:
            raise ValueError(f"Argument `operators` must be a list of >=1 operators. Received: {operators}.")
        self._operators = operators
        dtype = operators[0].dtype
        if any(o.dtype != dtype for o in operators):
            raise TypeError(f"Expected every operation in argument `operators` to have the same dtype. Received "
                            f"{[str((o.name, o.dtype)) for o in operators]}.")
        for attr, what, value in (("is_non_singular", "non-singular", is_non_singular),
                                  ("is_self_adjoint", "self-adjoint", is_self_adjoint),
                                  ("is_positive_definite", "positive-definite", is_positive_definite)):
            if all(getattr(o, attr) for o in operators) and value is False:
                raise ValueError(f"The Kronecker product of {what} operators is always {what}. Expected argument "
                                 f"`{attr}` to be True. Received: {value}.")
        hints = {a: (True if all(getattr(o, a) for o in operators) else v) for a, v in (
            ("is_non_singular", is_non_singular), ("is_self_adjoint", is_self_adjoint),
            ("is_positive_definite", is_positive_definite))}
        super().__init__(dtype=dtype, is_square=is_square, parameters=parameters,
                         name=name if name is not None else "_x_".join(o.name for o in operators), **hints)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"operators": [0] * len(self.operators)}

    @property
    def operators(self):
        return self._operators

    def _shape(self):
        batch = broadcast_shapes(*[o.batch_shape for o in self.operators])
        rows = int(np.prod([o.range_dimension for o in self.operators]))
        cols = int(np.prod([o.domain_dimension for o in self.operators]))
        return tuple(batch) + (rows, cols)

    def _factors(self, method, **kw):
        return LinearOperatorKronecker([getattr(o, method)() for o in self.operators], **kw)

    def _linop_adjoint(self):
        return self._factors("adjoint", is_non_singular=self.is_non_singular, is_self_adjoint=self.is_self_adjoint,
                             is_positive_definite=self.is_positive_definite, is_square=True)

    def _linop_cholesky(self):
        return self._factors("cholesky", is_non_singular=True, is_self_adjoint=None, is_square=True)

    def _linop_inverse(self):
        return self._factors("inverse", is_non_singular=self.is_non_singular, is_self_adjoint=self.is_self_adjoint,
                             is_positive_definite=self.is_positive_definite, is_square=True)

    def _apply(self, x, adjoint, adjoint_arg, solve):
        """Each factor's matmul (or solve) on its axis of ``x`` reshaped to ``[..., n_1, ..., n_F, k]``."""
        x = _lm.adjoint(x) if adjoint_arg else x
        ops = self.operators
        use_range = adjoint != solve   # the factor dimension the argument meets
        dims = [o.range_dimension if use_range else o.domain_dimension for o in ops]
        batch = list(x.shape[:-2])
        k = x.shape[-1]
        nb, nf = len(batch), len(ops)
        y = _a.reshape(x, batch + dims + [k])
        for i, o in enumerate(ops):
            # factor axis i to the front of the matrix dimensions, the others (and k) flattened after it
            perm = list(range(nb)) + [nb + i] + [nb + j for j in range(nf) if j != i] + [nb + nf]
            moved = _a.transpose(y, perm)
            lead = list(moved.shape[:nb])
            rest = list(moved.shape[nb + 1:])
            flat = _a.reshape(moved, lead + [moved.shape[nb], int(np.prod(rest))])
            out = o.solve(flat, adjoint=adjoint) if solve else o.matmul(flat, adjoint=adjoint)
            lead = list(out.shape[:-2])
            nb2 = len(lead)
            out = _a.reshape(out, lead + [out.shape[-2]] + rest)
            inv = [0] * (nf + 1)
            order = [i] + [j for j in range(nf) if j != i] + [nf]
            for pos, axis in enumerate(order):
                inv[axis] = pos
            y = _a.transpose(out, list(range(nb2)) + [nb2 + p for p in inv])
            nb = nb2
        out_dims = [o.domain_dimension if use_range else o.range_dimension for o in ops]
        return _a.reshape(y, list(y.shape[:nb]) + [int(np.prod(out_dims)), k])

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self._apply(x, adjoint, adjoint_arg, solve=False)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._apply(rhs, adjoint, adjoint_arg, solve=True)

    def _determinant(self):
        total = self.domain_dimension
        det = None
        for o in self.operators:
            term = _m.pow(o.determinant(), _m.cast(total / o.domain_dimension, o.dtype))
            det = term if det is None else _m.multiply(det, term)
        return det

    def _log_abs_determinant(self):
        total = self.domain_dimension
        out = None
        for o in self.operators:
            term = _m.multiply(o.log_abs_determinant(), _m.cast(total / o.domain_dimension, o.dtype))
            out = term if out is None else _m.add(out, term)
        return out

    def _trace(self):
        out = self.operators[0].trace()
        for o in self.operators[1:]:
            out = _m.multiply(out, o.trace())
        return out

    @staticmethod
    def _outer(vectors):
        out = vectors[0]
        for v in vectors[1:]:
            out = _m.multiply(expand(out, -1), expand(v, -2))
            out = _a.reshape(out, list(out.shape[:-2]) + [out.shape[-2] * out.shape[-1]])
        return out

    def _diag_part(self):
        out = self._outer([o.diag_part() for o in self.operators])
        want = tuple(self.batch_shape) + (min(self.range_dimension, self.domain_dimension),)
        if tuple(out.shape)[-1:] != want[-1:]:   # non-square factors: TF's set_shape complaint
            raise ValueError(f"Tensor's shape {tuple(out.shape)} is not compatible with supplied shape {want}.")
        return out

    def _eigvals(self):
        return self._outer([o.eigvals() for o in self.operators])

    def _to_dense(self):
        out = self.operators[0].to_dense()
        for o in self.operators[1:]:
            b = o.to_dense()
            prod = _m.multiply(expand(expand(out, -1), -3), expand(expand(b, -3), -2))   # [..., m1, m2, n1, n2]
            s = list(prod.shape)
            out = _a.reshape(prod, s[:-4] + [s[-4] * s[-3], s[-2] * s[-1]])
        return out

    def _require_square(self):
        if not all(o.is_square for o in self.operators):
            raise InvalidArgumentError(None, None, "All Kronecker factors must be square for the product to be "
                                       "invertible. Expected hint `is_square` to be True for every operator in "
                                       "argument `operators`.")

    def _assert_non_singular(self):
        self._require_square()
        for o in self.operators:
            o.assert_non_singular()

    def _assert_self_adjoint(self):
        self._require_square()
        for o in self.operators:
            o.assert_self_adjoint()


__all__ = ["LinearOperatorKronecker"]
