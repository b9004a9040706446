"""TensorFlow's exception classes (``tf.errors``), so ``except`` clauses port.

TF raises ``InvalidArgumentError`` for bad shapes/dtypes met while running an
op; tapejax raises it for the same situations, before any state changes.
"""
from typing import Any


class OpError(Exception):
    """Base class of the errors raised while running an op (as ``tf.errors.OpError``)."""

    def __init__(self, node_def: Any = None, op: Any = None, message: str = "", *args: Any):
        # TF's signature is (node_def, op, message); allow OpError("msg") too.
        if message == "" and isinstance(node_def, str) and op is None:
            node_def, message = None, node_def
        super().__init__(message)
        self.message = message
        self.node_def = node_def
        self.op = op


class InvalidArgumentError(OpError):
    """An op got an argument of the wrong value, shape or dtype."""


class NumericsError(InvalidArgumentError, FloatingPointError):
    """A NaN or Inf found while ``tf.debugging.enable_check_numerics`` is on: TF's
    ``InvalidArgumentError``, and also JAX's ``FloatingPointError`` (what JAX's NaN/Inf checker
    raises, which finds the value)."""


def compiled_numerics_error(e: BaseException, program: str, op: "str | None" = None) -> NumericsError:
    """TF's error for a NaN or Inf that JAX's checker (``jax_debug_nans`` / ``jax_debug_infs``)
    found in a compiled ``program`` (a ``tapejax.function`` step, a gradient): JAX names the
    program or its primitive (``e.args``: the name and ``"nan"`` or ``"inf"``; or a message);
    ``op``: the TF op type whose output it was, when the caller knows it."""
    if len(e.args) >= 2:
        name, what = str(e.args[0]), str(e.args[1])
        found = f"{what} in the output of {name}"
    else:
        text = str(e.args[0]) if e.args else ""
        found = text.split("\n")[0].split(". Because")[0]   # (JAX's explanation of its re-run left out)
        if len(found) > 200:
            found = found[:200] + "..."
        what = "nan" if "nan" in found.lower() else "inf"
    kind = "NaN" if what == "nan" else "Inf"
    graph = program != "the gradient"
    head = "Graph execution error:\n\n" if graph else "\n\n"
    where = f'output of graph op "{op}" in {program}' if op else program
    hint = "; run it eagerly, tf.config.run_functions_eagerly(True), to name the op" if graph and not op else ""
    return NumericsError(None, None, (
        f"{head}!!! Detected Infinity or NaN in {where} !!!\n  (JAX's checker: {found}{hint})\n\n"
        f" : Tensor had {kind} values"))


class NotFoundError(OpError):
    """A requested entity was not found."""


class UnimplementedError(OpError):
    """The operation is not implemented."""


class FailedPreconditionError(OpError):
    """The system is not in a state to run the operation."""


class ResourceExhaustedError(OpError):
    """A resource (memory) ran out."""


class InternalError(OpError):
    """An internal invariant broke."""


class UnknownError(OpError):
    """An unknown error."""


class OutOfRangeError(OpError):
    """An iteration ran past the end (``tf.data`` iterators' ``get_next()``)."""


class DataLossError(OpError):
    """Data was lost or corrupted (``padded_batch`` asked to pad an element to a smaller size)."""


class OperatorNotAllowedInGraphError(TypeError):
    """A Python operation that needs a tensor's *value* (``bool``, ``int``,
    ``numpy()``) was used on a traced tensor inside ``tapejax.function`` (a TypeError, as
    TF's with AutoGraph off)."""


__all__ = [
    "OperatorNotAllowedInGraphError", "OpError", "InvalidArgumentError", "NumericsError", "compiled_numerics_error", "NotFoundError", "UnimplementedError",
    "FailedPreconditionError", "ResourceExhaustedError", "InternalError", "UnknownError", "OutOfRangeError",
    "DataLossError",
]
