"""TF's checks on converted control flow, with TF's messages.

From ``tensorflow/python/autograph/operators/control_flow.py`` (the rules; the
code is tapejax's): a condition is a boolean scalar; a loop variable is
defined (not ``None``, not undefined) before a staged loop and keeps its
nested structure, dtype and shape (or conforms with its shape invariant);
both branches of a staged ``if`` define each variable read afterwards, with
the same structure and dtype.  XLA adds one rule TF does not have: a loop
variable keeps its shape even under an invariant, and both branches give one
shape (ValueErrors naming the variable).  ``autograph_ops`` calls these while
the branches and loop bodies trace.
"""
from __future__ import annotations

from typing import Any, List, Tuple

import jax
import jax.core
import numpy as np
from malt.operators.variables import Undefined, UndefinedReturnValue

from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops import array as _array

_Tracer = jax.core.Tracer
LEGAL_LOOP_TYPES = "Tensor, int, float, bool or a list, tuple or dict thereof"


def is_tensor(x) -> bool:
    return isinstance(x, (Tensor, Variable, jax.Array, _Tracer))


def verify_condition(cond, tag: str) -> Tensor:
    """A boolean scalar tensor (a size-1 shape is reshaped), TF's ValueError otherwise."""
    hint = "to check for None, use `is not None`"
    c = convert_to_tensor(cond)
    if np.dtype(c._value.dtype) != np.bool_:
        raise ValueError(f"condition of {tag} expected to be `tf.bool` scalar, got {c!r}; to use as "
                         f"boolean Tensor, use `tf.cast`; {hint}")
    if c._value.ndim > 0:
        if int(np.prod(c._value.shape)) > 1:
            raise ValueError(f"condition of {tag} expected to be `tf.bool` scalar, got {c!r}; {hint}")
        c = convert_to_tensor(_array.reshape(c, ()))
    return c


def _as_tensor_like(v):
    return convert_to_tensor(v) if isinstance(v, (bool, int, float, str, np.ndarray, np.generic)) else v


def _structure(x):
    return jax.tree_util.tree_structure(x, is_leaf=lambda v: not isinstance(v, (list, tuple, dict)))


def _leaves(x):
    return jax.tree_util.tree_leaves(x, is_leaf=lambda v: not isinstance(v, (list, tuple, dict)))


def _shape(x) -> Tuple[Any, ...]:
    return tuple(getattr(x, "_value", x).shape)


def _dtype_name(x) -> str:
    return np.dtype(getattr(x, "_value", x).dtype).name


def _is_subshape(left, right) -> bool:
    if right is None:
        return True
    right = tuple(right)
    return len(left) == len(right) and all(r is None or l == r for l, r in zip(left, right))


def verify_loop_init_vars(init_vars, symbol_names, first_iter_vars=None, extra_message=None) -> None:
    if not symbol_names:
        return
    if first_iter_vars is None:
        first_iter_vars = (None,) * len(symbol_names)
    for name, val, fi_val in zip(symbol_names, init_vars, first_iter_vars):
        if isinstance(val, UndefinedReturnValue):
            if fi_val:
                raise ValueError(f"the return value from a TensorFlow loop may only be a {LEGAL_LOOP_TYPES}; "
                                 f"got {type(fi_val)}")
            raise NotImplementedError("a return statement cannot be placed inside this TensorFlow loop; "
                                      "this may happen if a return statement depends on a static Python "
                                      "condition such as a hyperparameter")
        msg = None
        if val is None:
            msg = f"'{name}' is not allowed to be None before the loop"
        elif isinstance(val, Undefined):
            msg = f"'{name}' must be defined before the loop"
            if extra_message:
                msg += "\n" + extra_message
        if msg is not None:
            raise ValueError(msg)


def _verify_single_loop_var(name, init, entry, exit_, invariant) -> None:
    if exit_ is None:
        raise ValueError(f"'{name}' is None at the end of the iteration.")
    init, entry, exit_ = _as_tensor_like(init), _as_tensor_like(entry), _as_tensor_like(exit_)
    if not (is_tensor(entry) and is_tensor(exit_)):
        return
    if _dtype_name(entry) != _dtype_name(exit_):
        raise TypeError(f"'{name}' has dtype {_dtype_name(entry)} before the loop, but dtype "
                        f"{_dtype_name(exit_)} after one iteration")
    es, xs = _shape(entry), _shape(exit_)
    if invariant is None:
        if not _is_subshape(xs, es):
            raise ValueError(f"'{name}' has shape {es} before the loop, but shape {xs} after one iteration. "
                             "Use tf.autograph.experimental.set_loop_options to set shape invariants.")
        return
    inv = None if invariant is None else tuple(invariant)
    if is_tensor(init) and not _is_subshape(_shape(init), inv):
        raise ValueError(f"'{name}' has shape {_shape(init)} before the loop, which does not conform with "
                         f"the shape invariant {inv}.")
    if not _is_subshape(xs, inv):
        raise ValueError(f"'{name}' has shape {xs} after one iteration, which does not conform with the "
                         f"shape invariant {inv}.")
    if xs != es:   # TF allows it; an XLA loop keeps its shapes
        raise ValueError(f"'{name}' has shape {es} before the loop but shape {xs} after one iteration. The "
                         f"shape invariant {inv} allows it in TensorFlow, but tapejax compiles loops with XLA, "
                         "whose loop variables keep their shapes: pad it to a fixed size (and keep a length), "
                         "or build the result with tapejax.scan.")


def _is_shape(x) -> bool:
    return isinstance(x, (list, tuple)) and all(d is None or isinstance(d, int) for d in x)


def verify_loop_vars(init_vars, entry_vars, exit_vars, symbol_names, invariants) -> None:
    """TF's ``verify_tf_loop_vars``: each loop variable keeps its structure, dtype and shape
    (or conforms with its shape invariant)."""
    for i, name in enumerate(symbol_names):
        init, entry, exit_ = init_vars[i], entry_vars[i], exit_vars[i]
        n = len(_leaves(entry))
        if _structure(entry) != _structure(exit_) and not (n == 1 and len(_leaves(exit_)) == 1):
            raise TypeError(f"'{name}' does not have the same nested structure after one iteration.\n\n"
                            f"The two structures don't have the same nested structure: {entry!r} and "
                            f"{exit_!r}.")
        inv = invariants[i]
        if inv is None:
            invs: List[Any] = [None] * n
        elif n == 1 and _is_shape(inv):
            invs = [inv]
        else:
            invs = jax.tree_util.tree_leaves(inv, is_leaf=_is_shape)
        for a, b, c, d in zip(_leaves(init), _leaves(entry), _leaves(exit_), invs):
            _verify_single_loop_var(name, a, b, c, d)


class BranchShapeError(ValueError):
    """A variable has one shape in the main branch of a staged conditional and another in the
    else branch: TF gives it an unknown shape; XLA's conditionals need one.  Internal: ``if_stmt``
    runs the selected branch where the predicate is known while tracing, else raises the
    user's ValueError."""


def verify_single_cond_var(name, body_var, orelse_var) -> None:
    if body_var is None:
        raise ValueError(f"'{name}' is None at the end of the main branch.")
    if orelse_var is None:
        raise ValueError(f"'{name}' is None at the end of the else branch.")
    body_var, orelse_var = _as_tensor_like(body_var), _as_tensor_like(orelse_var)
    if not (is_tensor(body_var) and is_tensor(orelse_var)):
        return
    if _dtype_name(body_var) != _dtype_name(orelse_var):
        raise TypeError(f"'{name}' has dtype {_dtype_name(body_var)} in the main branch, but dtype "
                        f"{_dtype_name(orelse_var)} in the else branch")
    if _shape(body_var) != _shape(orelse_var):   # TF allows it (an unknown shape); XLA does not
        raise BranchShapeError(f"'{name}' has shape {_shape(body_var)} in the main branch, but shape "
                         f"{_shape(orelse_var)} in the else branch: tapejax compiles with XLA, whose "
                         "conditionals give one shape whichever branch runs.")


def verify_branch_vars(vars_, symbol_names, branch) -> None:
    for name, v in zip(symbol_names, vars_):
        if isinstance(v, Undefined):
            raise ValueError(f"'{name}' must also be initialized in the {branch} branch")
        if isinstance(v, UndefinedReturnValue):
            raise ValueError(f"the {branch} branch must also have a return statement.")


def verify_cond_vars(body_vars, orelse_vars, symbol_names) -> None:
    for name, b, o in zip(symbol_names, body_vars, orelse_vars):
        if _structure(b) != _structure(o):
            raise TypeError(f"'{name}' must have the same nested structure in the main and else branches:"
                            f"\n\nThe two structures don't have the same nested structure: {b!r} and {o!r}.")
        for x, y in zip(_leaves(b), _leaves(o)):
            verify_single_cond_var(name, x, y)


__all__ = ["LEGAL_LOOP_TYPES", "BranchShapeError", "is_tensor", "verify_branch_vars", "verify_cond_vars", "verify_condition",
           "verify_loop_init_vars", "verify_loop_vars", "verify_single_cond_var"]
