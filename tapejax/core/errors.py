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


class DataLossError(OpError):
    """Unrecoverable data loss or corruption (a file that is not what it should be)."""


class OperatorNotAllowedInGraphError(TypeError):
    """A Python operation that needs a tensor's *value* (``bool``, ``int``,
    ``numpy()``) was used on a traced tensor inside ``tapejax.function`` (a TypeError, as
    TF's with AutoGraph off)."""


__all__ = [
    "OperatorNotAllowedInGraphError", "OpError", "InvalidArgumentError", "NotFoundError", "UnimplementedError",
    "FailedPreconditionError", "ResourceExhaustedError", "InternalError", "UnknownError", "DataLossError",
]
