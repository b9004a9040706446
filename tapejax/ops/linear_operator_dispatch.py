"""TF's dispatch of ``tf.linalg.matmul`` / ``solve`` / ``adjoint`` / ``cholesky`` / ``diag_part`` /
``det`` / ``inv`` / ``logdet`` / ``trace`` (and ``tf.matmul``) to a ``LinearOperator`` argument's
methods: ``DISPATCH`` holds the functions the namespaces bind in place of the plain ops (a
Tensor argument runs the op as before); ``tf.matmul`` itself finds the operator through the ops'
registry (``OP_DISPATCH``), off its fast path."""
import functools
from typing import Any, Callable

from . import diagonals as _dg, linalg as _l, linalg_more as _lm, math as _m
from ._registry import OP_DISPATCH
from .linear_operator import LinearOperator

# --------------------------------------------------------------------------

def _dispatch(fn: Callable[..., Any], on_operator: Callable[..., Any], nargs: int = 1) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if any(isinstance(a, LinearOperator) for a in args[:nargs]) or any(
                isinstance(kwargs.get(k), LinearOperator) for k in _FIRST_ARGS):
            return on_operator(*args, **kwargs)
        return fn(*args, **kwargs)
    return wrapper


_FIRST_ARGS = ("a", "b", "matrix", "rhs", "input", "x")


def _op_matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
               b_is_sparse=False, output_type=None, name=None):
    if transpose_a or transpose_b:
        raise ValueError("Transposing not supported at this time.")
    if a_is_sparse or b_is_sparse:
        raise ValueError("Sparse methods not supported at this time.")
    if not isinstance(a, LinearOperator):   # (b^H a^H)^H = a b
        return _lm.adjoint(b.matmul(a, adjoint=not adjoint_b, adjoint_arg=not adjoint_a))
    return a.matmul(b, adjoint=adjoint_a, adjoint_arg=adjoint_b)


def _op_solve(matrix, rhs, adjoint=False, name=None):
    if not isinstance(matrix, LinearOperator):
        raise ValueError("Passing in `matrix` as a Tensor and `rhs` as a LinearOperator is not supported.")
    return matrix.solve(rhs, adjoint=adjoint)


def _op_inv(input, adjoint=False, name=None):   # noqa: A002
    inv = input.inverse()
    return inv.adjoint() if adjoint else inv


def _op_logdet(matrix, name=None):
    if matrix.is_positive_definite and matrix.is_self_adjoint:
        return matrix.log_abs_determinant()
    raise ValueError("Expected matrix to be self-adjoint positive definite.")


# ``tf.matmul`` keeps its fast path: the op consults ``OP_DISPATCH`` only where an argument is no
# Tensor (a wrapper here would put one more Python call on every product)
OP_DISPATCH[("MatMul", LinearOperator)] = _op_matmul


#: name in tf.linalg (and tf.matmul) -> the function that dispatches an operator argument to its method.
DISPATCH = {
    "matmul": _m.matmul,
    "solve": _dispatch(_l.solve, _op_solve, 2),
    "adjoint": _dispatch(_lm.adjoint, lambda matrix, name=None: matrix.adjoint()),
    "cholesky": _dispatch(_l.cholesky, lambda input, name=None: input.cholesky()),
    "diag_part": _dispatch(_dg.diag_part, lambda input, name="diag_part", k=0, padding_value=0,
                           align="RIGHT_LEFT": input.diag_part()),
    "det": _dispatch(_l.det, lambda input, name=None: input.determinant()),
    "inv": _dispatch(_l.inv, _op_inv),
    "logdet": _dispatch(_l.logdet, _op_logdet),
    "trace": _dispatch(_l.trace, lambda x, name=None: x.trace()),
}

__all__ = ["DISPATCH"]
