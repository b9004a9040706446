"""TensorFlow's exception classes (``tf.errors``), so ``except`` clauses port.

TF raises ``InvalidArgumentError`` for bad shapes/dtypes met while running an
op; tapejax raises it for the same situations, before any state changes.  Each
class carries TF's canonical ``error_code`` (``tf.errors.NOT_FOUND`` ...), the
codes of ``tensorflow/core/protobuf/error_codes.proto``.
"""
from typing import Any

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED = 6, 7, 8, 9, 10
OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED = 11, 12, 13, 14, 15, 16


class OpError(Exception):
    """Base class of the errors raised while running an op (as ``tf.errors.OpError``)."""

    error_code: "int | None" = None

    def __init__(self, node_def: Any = None, op: Any = None, message: str = "", *args: Any):
        # TF's signature is (node_def, op, message); allow OpError("msg") too.  The base class
        # takes TF's fourth argument, the error code.
        if message == "" and isinstance(node_def, str) and op is None:
            node_def, message = None, node_def
        if type(self) is OpError and args and isinstance(args[0], int):
            self.error_code = args[0]
        super().__init__(message)
        self.message = message
        self.node_def = node_def
        self.op = op

    @property
    def experimental_payloads(self) -> dict:
        """TF's error payloads (none: tapejax's errors carry only the message)."""
        return {}


class InvalidArgumentError(OpError):
    """An op got an argument of the wrong value, shape or dtype."""

    error_code = INVALID_ARGUMENT


class NumericsError(InvalidArgumentError, FloatingPointError):
    """A NaN or Inf found while ``tf.debugging.enable_check_numerics`` is on: TF's
    ``InvalidArgumentError``, and also JAX's ``FloatingPointError`` (what JAX's NaN/Inf checker
    raises, which finds the value)."""


class ConcreteInputError(InvalidArgumentError, TypeError):
    """A ``ConcreteFunction`` called with a Tensor its spec does not accept.  TF runs its graph
    anyway: a wrong dtype is an ``InvalidArgumentError``, and so is a wrong shape that an op of
    the graph cannot take; a compiled XLA program takes only the shapes it was traced for, so
    tapejax refuses every mismatch up front, with TF's class and tapejax's first one,
    ``TypeError``."""

    def __init__(self, message: str):
        super().__init__(None, None, message)


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

    error_code = NOT_FOUND


class UnimplementedError(OpError):
    """The operation is not implemented."""

    error_code = UNIMPLEMENTED


class FailedPreconditionError(OpError):
    """The system is not in a state to run the operation."""

    error_code = FAILED_PRECONDITION


class ResourceExhaustedError(OpError):
    """A resource (memory) ran out."""

    error_code = RESOURCE_EXHAUSTED


class InternalError(OpError):
    """An internal invariant broke."""

    error_code = INTERNAL


class UnknownError(OpError):
    """An unknown error."""

    error_code = UNKNOWN


class OutOfRangeError(OpError):
    """An iteration ran past the end (``tf.data`` iterators' ``get_next()``)."""

    error_code = OUT_OF_RANGE


class DataLossError(OpError):
    """Data was lost or corrupted (``padded_batch`` asked to pad an element to a smaller size)."""

    error_code = DATA_LOSS


class CancelledError(OpError):
    """An operation was cancelled."""

    error_code = CANCELLED


class DeadlineExceededError(OpError):
    """A deadline expired before the operation could complete."""

    error_code = DEADLINE_EXCEEDED


class AlreadyExistsError(OpError):
    """An entity to be created exists already (``tf.io.gfile.copy`` onto an existing file)."""

    error_code = ALREADY_EXISTS


class PermissionDeniedError(OpError):
    """The caller may not run the operation (reading a file opened for writing)."""

    error_code = PERMISSION_DENIED


class UnauthenticatedError(OpError):
    """The request lacks valid credentials."""

    error_code = UNAUTHENTICATED


class AbortedError(OpError):
    """An operation was aborted (a concurrency conflict)."""

    error_code = ABORTED


class UnavailableError(OpError):
    """A service is not available at the moment."""

    error_code = UNAVAILABLE


class OperatorNotAllowedInGraphError(TypeError):
    """A Python operation that needs a tensor's *value* (``bool``, ``int``,
    ``numpy()``) was used on a traced tensor inside ``tapejax.function`` (a TypeError, as
    TF's with AutoGraph off)."""


class SymbolicNumpyError(OperatorNotAllowedInGraphError, AttributeError):
    """``numpy()`` of a traced tensor: TF's symbolic tensor has no ``numpy`` (an AttributeError
    there), so ``except AttributeError`` written for TF catches it."""


class SymbolicArrayError(OperatorNotAllowedInGraphError, NotImplementedError):
    """``np.asarray`` / ``np.array`` of a traced tensor: TF's NotImplementedError ("Cannot convert a
    symbolic tf.Tensor to a numpy array")."""

class InaccessibleTensorError(ValueError):
    """A traced tensor used outside the loop or branch body (or the trace) that made it, e.g. one
    appended to a Python list inside ``for i in tf.range(n)`` (TF's internal
    ``errors_impl.InaccessibleTensorError``, a ValueError; not in ``tf.errors``)."""


__all__ = [
    "ABORTED", "ALREADY_EXISTS", "AbortedError", "AlreadyExistsError", "CANCELLED", "CancelledError", "DATA_LOSS",
    "DEADLINE_EXCEEDED", "DataLossError", "DeadlineExceededError", "FAILED_PRECONDITION", "FailedPreconditionError",
    "INTERNAL", "INVALID_ARGUMENT", "InternalError", "InvalidArgumentError", "NOT_FOUND", "NotFoundError", "NumericsError",
    "OK", "OUT_OF_RANGE", "OpError", "OperatorNotAllowedInGraphError", "OutOfRangeError", "PERMISSION_DENIED",
    "PermissionDeniedError", "RESOURCE_EXHAUSTED", "ResourceExhaustedError", "UNAUTHENTICATED", "UNAVAILABLE",
    "UNIMPLEMENTED", "UNKNOWN", "UnauthenticatedError", "UnavailableError", "UnimplementedError", "UnknownError",
    "compiled_numerics_error",
]
