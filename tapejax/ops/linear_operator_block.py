"""Operators made of blocks: ``LinearOperatorBlockDiag`` (a direct sum: products, solves and
determinants block by block), ``LinearOperatorBlockLowerTriangular`` (forward substitution).  As TF, ``matmul`` / ``solve`` of the block operators also take a
list of per-block arguments and then return a list."""

from typing import Any

from . import array as _a, linalg_more as _lm, math as _m
from .linear_operator import (
    CLASSES,
    LinearOperator,
    broadcast_shapes,
    check_dim,
    expand,
    non_singular_hint,
    to_param,
)


def _check_iterable(x, arg: str) -> list:
    if not hasattr(x, "__iter__") or isinstance(x, (str, bytes, dict)):
        raise TypeError(f"Expected argument `{arg}` to be a proper iterable; got {x!r}")
    return list(x)


def _same_dtype(operators, message):
    dtype = operators[0].dtype
    if any(o.dtype != dtype for o in operators):
        raise TypeError(message + "   ".join(str((o.name, o.dtype)) for o in operators))
    return dtype


def broadcast_batch(tensors):
    """TF's ``broadcast_matrix_batch_dims``: every tensor's batch dimensions broadcast to theirs."""
    batch = broadcast_shapes(*[tuple(t.shape[:-2]) for t in tensors])
    return [t if tuple(t.shape[:-2]) == tuple(batch) else _a.broadcast_to(t, list(batch) + list(t.shape[-2:]))
            for t in tensors]


def is_blockwise(block_dims, arg, split_dim) -> bool:
    """TF's ``arg_is_blockwise``: is ``arg`` a list with one argument per block?"""
    if not (isinstance(arg, (tuple, list)) and len(arg) == len(block_dims)):
        return False
    if not any(isinstance(x, (list, tuple)) for x in arg):
        return True
    dims = [to_param(x, "x").shape[split_dim] for x in arg]
    if all(b == d for b, d in zip(block_dims, dims)):
        return True
    if all(d == dims[0] for d in dims) and dims[0] >= sum(block_dims):
        return False
    raise ValueError("Input dimension does not match operator dimension.")


class _Blocks(LinearOperator):
    """What the block operators share: the diagonal blocks' dimensions, blockwise arguments."""

    _diagonal_operators: list

    def _block_range_dimensions(self):
        return [o.range_dimension for o in self._diagonal_operators]

    def _block_domain_dimensions(self):
        return [o.domain_dimension for o in self._diagonal_operators]

    def _blocks_of(self, x, block_dims, arg_dim, split_sizes, split_axis):
        """(list of per-block arguments, was the argument blockwise)."""
        if is_blockwise(block_dims, x, arg_dim):
            out = []
            for i, b in enumerate(x):
                if not isinstance(b, LinearOperator):
                    b = to_param(b, "x")
                    self._check_input_dtype(b)
                    check_dim(block_dims[i], b.shape[arg_dim])
                out.append(b)
            return out, True
        x = to_param(x, "x")
        self._check_input_dtype(x)
        check_dim(sum(block_dims), x.shape[arg_dim])
        return _a.split(x, split_sizes, axis=split_axis), False

    def _vec_call(self, method, x, adjoint):
        block_dims = self._vec_block_dims(method, adjoint)
        if is_blockwise(block_dims, x, -1):
            ys = method([expand(to_param(b, "x"), -1) for b in x], adjoint=adjoint)
            return [_a.squeeze(y, axis=-1) for y in ys]
        x = to_param(x, "x")
        self._check_input_dtype(x)
        check_dim(sum(block_dims), x.shape[-1])
        return _a.squeeze(method(expand(x, -1), adjoint=adjoint), axis=-1)

    def _vec_block_dims(self, method, adjoint):
        solving = method.__name__ == "solve"
        return self._block_range_dimensions() if (adjoint != solving) else self._block_domain_dimensions()

    def matvec(self, x, adjoint=False, name="matvec"):
        return self._vec_call(self.matmul, x, adjoint)

    def solvevec(self, rhs, adjoint=False, name="solve"):
        return self._vec_call(self.solve, rhs, adjoint)

    def _eigvals(self):
        vals = broadcast_batch([expand(o.eigvals(), -1) for o in self._diagonal_operators])
        return _a.squeeze(_a.concat(vals, axis=-2), axis=-1)

    def _shape(self):
        batch = broadcast_shapes(*[o.batch_shape for o in self._all_operators()])
        return tuple(batch) + (sum(self._block_range_dimensions()), sum(self._block_domain_dimensions()))

    def _all_operators(self):
        return self._diagonal_operators


class LinearOperatorBlockDiag(_Blocks):
    """``tf.linalg.LinearOperatorBlockDiag``: the direct sum ``diag(A_1, A_2, ...)``."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=True, name=None):
        parameters = dict(operators=operators, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        operators = _check_iterable(operators, "operators")
        if not operators:
            raise ValueError(f"Expected a non-empty list of operators. Found: {operators}")
        self._operators = operators
        self._diagonal_operators = operators
        dtype = _same_dtype(operators, "Expected all operators to have the same dtype.  Found ")
        for attr, what, value in (("is_non_singular", "non-singular", is_non_singular),
                                  ("is_self_adjoint", "self-adjoint", is_self_adjoint),
                                  ("is_positive_definite", "positive definite", is_positive_definite)):
            if all(getattr(o, attr) for o in operators) and value is False:
                raise ValueError(f"The direct sum of {what} operators is always {what}.")
        hints = {a: (True if all(getattr(o, a) for o in operators) else v) for a, v in (
            ("is_non_singular", is_non_singular), ("is_self_adjoint", is_self_adjoint),
            ("is_positive_definite", is_positive_definite))}
        super().__init__(dtype=dtype, is_square=is_square, parameters=parameters,
                         name=name if name is not None else "_ds_".join(o.name for o in operators), **hints)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"operators": [0] * len(self.operators)}

    @property
    def operators(self):
        return self._operators

    def _linop_adjoint(self):
        return LinearOperatorBlockDiag([o.adjoint() for o in self.operators], is_non_singular=self.is_non_singular,
                                       is_self_adjoint=self.is_self_adjoint,
                                       is_positive_definite=self.is_positive_definite, is_square=True)

    def _linop_cholesky(self):
        return LinearOperatorBlockDiag([o.cholesky() for o in self.operators], is_non_singular=True,
                                       is_self_adjoint=None, is_square=True)

    def _linop_inverse(self):
        return LinearOperatorBlockDiag([o.inverse() for o in self.operators], is_non_singular=self.is_non_singular,
                                       is_self_adjoint=self.is_self_adjoint,
                                       is_positive_definite=self.is_positive_definite, is_square=True)

    def _blockwise_pair(self, left: Any, right: Any, verb: str) -> None:
        if len(left.operators) != len(right.operators):
            raise ValueError(f"Can not efficiently {verb} when number of blocks differ.")
        for o1, o2 in zip(left.operators, right.operators):
            if o2.range_dimension != o1.domain_dimension:
                raise ValueError(f"Blocks are incompatible. Expected `x` to have dimension {o1.domain_dimension} "
                                 f"but got {o2.range_dimension}.")

    def matmul(self, x, adjoint=False, adjoint_arg=False, name="matmul"):
        if isinstance(x, LinearOperator):
            left: Any = self.adjoint() if adjoint else self
            right: Any = x.adjoint() if adjoint_arg else x
            if right.range_dimension != left.domain_dimension:
                raise ValueError(f"Operators are incompatible. Expected `x` to have dimension "
                                 f"{left.domain_dimension} but got {right.range_dimension}.")
            if isinstance(x, LinearOperatorBlockDiag):
                self._blockwise_pair(left, right, "multiply two `LinearOperatorBlockDiag`s together")
                return LinearOperatorBlockDiag([o1.matmul(o2) for o1, o2 in zip(left.operators, right.operators)],
                                               is_non_singular=non_singular_hint(left, right), is_square=True)
            return self._linop_matmul(left, right)
        return self._apply(x, adjoint, adjoint_arg, solve=False)

    def solve(self, rhs, adjoint=False, adjoint_arg=False, name="solve"):
        if self.is_non_singular is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to be singular.")
        if self.is_square is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to not be "
                                      "square.")
        if isinstance(rhs, LinearOperator):
            left: Any = self.adjoint() if adjoint else self
            right: Any = rhs.adjoint() if adjoint_arg else rhs
            if right.range_dimension != left.domain_dimension:
                raise ValueError(f"Operators are incompatible. Expected `x` to have dimension "
                                 f"{left.domain_dimension} but got {right.range_dimension}.")
            if isinstance(right, LinearOperatorBlockDiag):
                self._blockwise_pair(left, right, "solve `LinearOperatorBlockDiag`")
                return LinearOperatorBlockDiag([o1.solve(o2) for o1, o2 in zip(left.operators, right.operators)],
                                               is_non_singular=non_singular_hint(left, right), is_square=True)
            return self._linop_solve(left, right)
        return self._apply(rhs, adjoint, adjoint_arg, solve=True)

    def _apply(self, x, adjoint, adjoint_arg, solve):
        arg_dim = -1 if adjoint_arg else -2
        if solve:
            dims = self._block_domain_dimensions() if adjoint else self._block_range_dimensions()
        else:
            dims = self._block_range_dimensions() if adjoint else self._block_domain_dimensions()
        parts, blockwise = self._blocks_of(x, dims, arg_dim, dims, arg_dim)
        outs = [(o.solve if solve else o.matmul)(p, adjoint=adjoint, adjoint_arg=adjoint_arg)
                for o, p in zip(self.operators, parts)]
        if blockwise:
            return outs
        return _a.concat(broadcast_batch(outs), axis=-2)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self._apply(x, adjoint, adjoint_arg, solve=False)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._apply(rhs, adjoint, adjoint_arg, solve=True)

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

    def _require_square_blocks(self, what):
        if not all(o.is_square for o in self.operators):
            raise NotImplementedError(f"`{what}` not implemented for an operator whose blocks are not square.")

    def _diag_part(self):
        self._require_square_blocks("diag_part")
        parts = broadcast_batch([expand(o.diag_part(), -1) for o in self.operators])
        return _a.squeeze(_a.concat(parts, axis=-2), axis=-1)

    def _trace(self):
        self._require_square_blocks("trace")
        result = self.operators[0].trace()
        for o in self.operators[1:]:
            result = _m.add(result, o.trace())
        return result

    def _to_dense(self):
        blocks = broadcast_batch([o.to_dense() for o in self.operators])
        n = self.domain_dimension
        rows, col = [], 0
        for b in blocks:
            lead = list(b.shape[:-1])
            w = b.shape[-1]
            rows.append(_a.concat([_a.zeros(lead + [col], dtype=b.dtype), b,
                                   _a.zeros(lead + [n - col - w], dtype=b.dtype)], axis=-1))
            col += w
        return _a.concat(rows, axis=-2)

    def _assert_non_singular(self):
        for o in self.operators:
            o.assert_non_singular()

    def _assert_self_adjoint(self):
        for o in self.operators:
            o.assert_self_adjoint()

    def _assert_positive_definite(self):
        for o in self.operators:
            o.assert_positive_definite()

    def _eigvals(self):
        self._require_square_blocks("eigvals")
        return super()._eigvals()


class LinearOperatorBlockLowerTriangular(_Blocks):
    """``tf.linalg.LinearOperatorBlockLowerTriangular``: ``operators[i]`` is block row ``i``
    (``i + 1`` operators, the last on the diagonal)."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorBlockLowerTriangular"):
        parameters = dict(operators=operators, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                          is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        operators = [_check_iterable(row, "operators") for row in _check_iterable(operators, "operators")]
        if not operators:
            raise ValueError(f"Argument `operators` must be a list of >=1 operators. Received: {operators}.")
        self._operators = operators
        self._diagonal_operators = [row[-1] for row in operators]
        dtype = operators[0][0].dtype
        for i, row in enumerate(operators):
            if any(o.dtype != dtype for o in row):
                raise TypeError(f"Expected all operators to have the same dtype.  Found "
                                f"{[str((o.name, o.dtype)) for o in row]} in row {i} and {dtype!r} in row 0.")
        diag = self._diagonal_operators
        if all(o.is_non_singular for o in diag):
            if is_non_singular is False:
                raise ValueError(f"A blockwise lower-triangular operator with non-singular operators on the main "
                                 f"diagonal is always non-singular. Expected argument `is_non_singular` to be True. "
                                 f"Received: {is_non_singular}.")
            is_non_singular = True
        elif any(o.is_non_singular is False for o in diag):
            if is_non_singular is True:
                raise ValueError(f"A blockwise lower-triangular operator with a singular operator on the main "
                                 f"diagonal is always singular. Expected argument `is_non_singular` to be True. "
                                 f"Received: {is_non_singular}.")
            is_non_singular = False
        for i, row in enumerate(operators):
            if len(row) != i + 1:
                raise ValueError(f"Argument `operators[{i}]` must contain `{i + 1}` blocks. Received: {len(row)} "
                                 f"blocks.")
        for i in range(1, len(operators)):
            for j in range(i):
                op, above, right = operators[i][j], operators[i - 1][j], operators[i][j + 1]
                if op.domain_dimension != above.domain_dimension:
                    raise ValueError(f"Argument `operators[{i}][{j}].domain_dimension` ({op.domain_dimension}) must "
                                     f"be the same as `operators[{i-1}][{j}].domain_dimension` "
                                     f"({above.domain_dimension}).")
                if op.range_dimension != right.range_dimension:
                    raise ValueError(f"Argument `operators[{i}][{j}].range_dimension` ({op.range_dimension}) must "
                                     f"be the same as `operators[{i}][{j + 1}].range_dimension` "
                                     f"({right.range_dimension}).")
        if is_square is False:
            raise ValueError(f"`LinearOperatorBlockLowerTriangular` must be square. Expected argument `is_square` "
                             f"to be True. Received: {is_square}.")
        for i, o in enumerate(diag):
            if o.is_square is False:
                raise ValueError(f"Matrices on the diagonal (the final elements of each row-partition in the "
                                 f"`operators` list) must be square. Expected argument `operators[{i}][-1].is_square` "
                                 f"to be True. Received: {o.is_square}.")
        super().__init__(dtype=dtype, is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                         is_positive_definite=is_positive_definite, is_square=True, parameters=parameters, name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"operators": [[0] * len(row) for row in self.operators]}

    @property
    def operators(self):
        return self._operators

    def _all_operators(self):
        return [o for row in self.operators for o in row]

    def _linop_inverse(self):
        """The inverse, block lower-triangular too (off-diagonal blocks as dense matrices)."""
        ops = self.operators
        if len(ops) == 1:
            return LinearOperatorBlockLowerTriangular([[ops[0][0].inverse()]], is_non_singular=self.is_non_singular,
                                                      is_self_adjoint=self.is_self_adjoint,
                                                      is_positive_definite=self.is_positive_definite, is_square=True)
        upper: Any = LinearOperatorBlockLowerTriangular(ops[:-1]).inverse()
        bottom = ops[-1]
        br_inv = bottom[-1].inverse()
        row = []
        for i in range(len(ops) - 1):
            acc = None
            for j in range(i, len(ops) - 1):
                term = bottom[j].matmul(upper.operators[j][i]).to_dense()
                acc = term if acc is None else _m.add(acc, term)
            row.append(CLASSES["FullMatrix"](_m.negative(br_inv.matmul(acc))))
        row.append(br_inv)
        return LinearOperatorBlockLowerTriangular(upper.operators + [row], is_non_singular=self.is_non_singular,
                                                  is_self_adjoint=self.is_self_adjoint,
                                                  is_positive_definite=self.is_positive_definite, is_square=True)

    def matmul(self, x, adjoint=False, adjoint_arg=False, name="matmul"):
        if isinstance(x, LinearOperator):
            return super().matmul(x, adjoint=adjoint, adjoint_arg=adjoint_arg)
        return self._matmul(x, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        arg_dim = -1 if adjoint_arg else -2
        dims = self._block_range_dimensions() if adjoint else self._block_domain_dimensions()
        xs, blockwise = self._blocks_of(x, dims, arg_dim, self._block_domain_dimensions(), arg_dim)
        ops, n = self.operators, len(self.operators)
        outs = []
        if adjoint:
            for i in range(n):
                r = ops[i][i].matmul(xs[i], adjoint=True, adjoint_arg=adjoint_arg)
                for j in range(i + 1, n):
                    r = _m.add(r, ops[j][i].matmul(xs[j], adjoint=True, adjoint_arg=adjoint_arg))
                outs.append(r)
        else:
            for row in ops:
                r = row[0].matmul(xs[0], adjoint_arg=adjoint_arg)
                for j, o in enumerate(row[1:]):
                    r = _m.add(r, o.matmul(xs[j + 1], adjoint_arg=adjoint_arg))
                outs.append(r)
        if blockwise:
            return outs
        return _a.concat(broadcast_batch(outs), axis=-2)

    def solve(self, rhs, adjoint=False, adjoint_arg=False, name="solve"):
        if self.is_non_singular is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to be singular.")
        if isinstance(rhs, LinearOperator):
            return super().solve(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)
        dims = self._block_domain_dimensions() if adjoint else self._block_range_dimensions()
        arg_dim = -1 if adjoint_arg else -2
        if is_blockwise(dims, rhs, arg_dim):
            ys, blockwise = self._blocks_of(rhs, dims, arg_dim, dims, arg_dim)
            ys = [_lm.adjoint(y) for y in ys] if adjoint_arg else ys
        else:
            rhs = to_param(rhs, "rhs")
            self._check_input_dtype(rhs)
            check_dim(sum(dims), rhs.shape[arg_dim])
            rhs = _lm.adjoint(rhs) if adjoint_arg else rhs
            ys, blockwise = _a.split(rhs, self._block_domain_dimensions(), axis=-2), False
        ops, n = self.operators, len(self.operators)
        sol = []
        if adjoint:
            for i in reversed(range(n)):
                y = ys[i]
                for j in reversed(range(i + 1, n)):
                    y = _m.subtract(y, ops[j][i].matmul(sol[n - 1 - j], adjoint=True))
                sol.append(self._diagonal_operators[i].solve(y, adjoint=True))
            sol.reverse()
        else:
            for row, y in zip(ops, ys):
                for i, o in enumerate(row[:-1]):
                    y = _m.subtract(y, o.matmul(sol[i]))
                sol.append(row[-1].solve(y))
        if blockwise:
            return sol
        return _a.concat(broadcast_batch(sol), axis=-2)

    def _determinant(self):
        if all(o.is_positive_definite for o in self._diagonal_operators):
            return _m.exp(self._log_abs_determinant())
        result = self._diagonal_operators[0].determinant()
        for o in self._diagonal_operators[1:]:
            result = _m.multiply(result, o.determinant())
        return result

    def _log_abs_determinant(self):
        result = self._diagonal_operators[0].log_abs_determinant()
        for o in self._diagonal_operators[1:]:
            result = _m.add(result, o.log_abs_determinant())
        return result

    def _diag_part(self):
        parts = broadcast_batch([expand(o.diag_part(), -1) for o in self._diagonal_operators])
        return _a.squeeze(_a.concat(parts, axis=-2), axis=-1)

    def _trace(self):
        result = self._diagonal_operators[0].trace()
        for o in self._diagonal_operators[1:]:
            result = _m.add(result, o.trace())
        return result

    def _to_dense(self):
        n = self.domain_dimension
        rows = []
        for row in self.operators:
            blocks = broadcast_batch([o.to_dense() for o in row])
            lead = list(blocks[0].shape[:-1])
            width = sum(b.shape[-1] for b in blocks)
            rows.append(_a.concat(blocks + [_a.zeros(lead + [n - width], dtype=self.dtype)], axis=-1))
        return _a.concat(broadcast_batch(rows), axis=-2)

    def _assert_non_singular(self):
        for o in self._diagonal_operators:
            o.assert_non_singular()


__all__ = ["LinearOperatorBlockDiag", "LinearOperatorBlockLowerTriangular"]
