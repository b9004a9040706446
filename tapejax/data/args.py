"""Argument checks shared by the Dataset methods: TF's exception classes, messages that name the
argument and say what was expected and what came."""
from typing import Any, Optional

import jax.core
import numpy as np

from ..core.errors import InvalidArgumentError, SymbolicNumpyError
from ..core.tensor import Tensor

#: ``tf.data.AUTOTUNE``: let the runtime choose a parallelism or buffer size.
AUTOTUNE = -1
#: ``tf.data.INFINITE_CARDINALITY`` / ``UNKNOWN_CARDINALITY``: what ``cardinality()`` returns.
INFINITE = -1
UNKNOWN = -2


def integer(value: Any, name: str) -> int:
    """``value`` as a Python int, as TF converts it to an int64 scalar (TypeError for a float or a
    string, ValueError for None, as TF's conversion)."""
    if isinstance(value, Tensor):
        if isinstance(value._value, jax.core.Tracer):   # (TF stages it; pipelines are built on the host here)
            raise SymbolicNumpyError(
                f"Argument `{name}` is a tensor known only when the tapejax.function runs, and tapejax builds a "
                "Dataset on the host from Python values: make the dataset outside the function, or pass "
                f"`{name}` as a Python int (each new value traces the function again).")
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, int, np.integer)):
        return int(value)
    if value is None:
        raise ValueError(f"Argument `{name}` must be an integer; got None (Attempt to convert a value (None) "
                         "with an unsupported type (<class 'NoneType'>) to a Tensor).")
    raise TypeError(f"Argument `{name}` must be an integer; got {value!r} of type {type(value).__name__} "
                    f"(Cannot convert {value!r} to EagerTensor of dtype int64).")


def positive(value: Any, name: str, what: str) -> int:
    """An integer argument that must be > 0 (InvalidArgumentError otherwise, as TF's kernels)."""
    n = integer(value, name)
    if n <= 0:
        raise InvalidArgumentError(None, None, f"{what}: `{name}` must be greater than zero; got {n}.")
    return n


def callable_arg(fn: Any, name: str = "func") -> Any:
    if not callable(fn):
        raise ValueError(f"Argument `{name}` must be a callable. Received {name}={fn!r} (of type {type(fn)})")
    return fn


def seed(value: Any, name: str = "seed") -> Optional[int]:
    if value is None:
        return None
    n = integer(value, name)
    if n < 0:
        raise ValueError(f"Argument `{name}` must be a non-negative integer or None; got {n}")
    return n
