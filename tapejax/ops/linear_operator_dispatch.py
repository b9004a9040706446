"""TF's dispatch of ``tf.linalg.matmul`` / ``solve`` / ``adjoint`` / ``cholesky`` / ``diag_part`` /
``det`` / ``inv`` / ``logdet`` / ``trace`` (and ``tf.matmul``) to a ``LinearOperator`` argument's
methods: ``DISPATCH`` holds the functions the namespaces bind in place of the plain ops (a
Tensor argument runs the op as before)."""
import functools
from typing import Any, Callable

import numpy as np

from ..core.tensor import Pending, Tensor
from ..core.variable import Variable
from . import diagonals as _dg, linalg as _l, linalg_more as _lm, math as _m
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


#: Argument types that are never operators: ``tf.matmul`` on them skips the (ABC) instance checks.
_PLAIN = frozenset({Tensor, Pending, Variable, np.ndarray, list, tuple, float, int})


@functools.wraps(_m.matmul)
def matmul(a, b, *args, **kwargs):
    """``tf.linalg.matmul`` / ``tf.matmul``; an operator argument is dispatched to its ``matmul`` (TF's
    dispatch), anything else runs the op."""
    if (type(a) in _PLAIN and type(b) in _PLAIN) or not (isinstance(a, LinearOperator)
                                                          or isinstance(b, LinearOperator)):
        return _m.matmul(a, b, *args, **kwargs)
    return _op_matmul(a, b, *args, **kwargs)


#: name in tf.linalg (and tf.matmul) -> the function that dispatches an operator argument to its method.
DISPATCH = {
    "matmul": matmul,
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

__all__ = ["DISPATCH", "matmul"]
