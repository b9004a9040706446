"""TensorFlow's exception classes (``tf.errors``), so ``except`` clauses port.

TF raises ``InvalidArgumentError`` for bad shapes/dtypes met while running an
op; tapejax raises it for the same situations, before any state changes.
"""


class OpError(Exception):
    """Base class of the errors raised while running an op (as ``tf.errors.OpError``)."""

    def __init__(self, node_def=None, op=None, message="", *args):
        # TF's signature is (node_def, op, message); allow OpError("msg") too.
        if message == "" and isinstance(node_def, str) and op is None:
            node_def, message = None, node_def
        super().__init__(message)
        self.message = message
        self.node_def = node_def
        self.op = op


def _make(name, doc):
    return type(name, (OpError,), {"__doc__": doc})


InvalidArgumentError = _make("InvalidArgumentError", "An op got an argument of the wrong value, shape or dtype.")
NotFoundError = _make("NotFoundError", "A requested entity was not found.")
UnimplementedError = _make("UnimplementedError", "The operation is not implemented.")
FailedPreconditionError = _make("FailedPreconditionError", "The system is not in a state to run the operation.")
ResourceExhaustedError = _make("ResourceExhaustedError", "A resource (memory) ran out.")
InternalError = _make("InternalError", "An internal invariant broke.")
UnknownError = _make("UnknownError", "An unknown error.")



class OperatorNotAllowedInGraphError(TypeError):
    """A Python operation that needs a tensor's *value* (``bool``, ``int``,
    ``numpy()``) was used on a traced tensor inside ``tapejax.function`` (a TypeError, as
    TF's with AutoGraph off)."""


__all__ = [
    "OperatorNotAllowedInGraphError", "OpError", "InvalidArgumentError", "NotFoundError", "UnimplementedError",
    "FailedPreconditionError", "ResourceExhaustedError", "InternalError", "UnknownError",
]
