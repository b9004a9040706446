"""``tapejax.data.Iterator``: grain's iterator, its elements packed as tapejax Tensors.

One ``iter(dataset)`` builds the dataset's grain pipeline once (``Dataset._build_output``) and
reads it.  Each element's components become Tensors on the default device (already moved
there by a final ``prefetch``'s thread, else here) and are packed into ``element_spec``'s
structure.  ``as_numpy_iterator`` reads the same pipeline and gives NumPy values.

While GradientTapes record on the reading thread, reading pauses them (``stop_recording``): a
dataset's functions are not part of the user's gradient, as in TF.  Iterating inside
``tapejax.function`` (or any JAX trace) raises ValueError: the elements would become constants
of the compiled program.  Iterate in Python and call the compiled step per element instead.
"""
import contextlib
from typing import Any, Callable, List, Optional

import jax

from ..core import state as _state
from ..core.errors import OutOfRangeError
from ..core.tensor import Tensor
from . import structure as S
from .build import Build

try:   # JAX's own test: no trace (jit, vmap, grad, eval_shape ...) is running on this thread
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX without it: only tapejax.function's trace is seen
    def _trace_state_clean() -> bool:
        return True

_IN_TRACE = ("Iterating over a tapejax.data.Dataset inside tapejax.function (or another JAX trace) is not "
             "supported: its elements would be frozen into the compiled program as constants. Iterate in Python "
             "and call the compiled step on each element: `for x, y in dataset: train_step(x, y)`.")


def in_trace() -> bool:
    return _state._local.collector is not None or not _trace_state_clean()


def _put(c: Any, device: Any) -> Any:
    """One component onto ``device``.  A pipeline's arrays are its own and never written again
    (sources are private copies, batches fresh), so JAX may use their memory in place."""
    return jax.device_put(c, device, may_alias=True)


def _device_put(device: Any, x64: bool) -> Callable[[tuple], tuple]:
    """The conversion a final ``prefetch`` runs in its thread: components onto ``device`` (with
    the 64-bit mode the dataset was made in: a worker thread has its own)."""
    def put(element: tuple) -> tuple:
        if jax.enable_x64.value != x64:
            with jax.enable_x64(x64):
                return put(element)
        return tuple(c if c is None or (not move and isinstance(c, jax.Array)) else _put(c, device) for c in element)
    move = jax.default_backend() != "cpu"   # (a single CPU device: a jax.Array is where it must be)
    return put


class Iterator:
    """``tf.data.Iterator``: ``next(it)`` gives the next element (StopIteration at the end),
    ``get_next()`` raises ``tf.errors.OutOfRangeError`` there instead."""

    def __init__(self, dataset: Any, numpy: bool = False):
        if in_trace():
            raise ValueError(_IN_TRACE)
        self._spec = dataset.element_spec
        self._numpy = numpy
        device = jax.config.jax_default_device  # pyright: ignore[reportAttributeAccessIssue]
        self._move = jax.default_backend() != "cpu" or device is not None
        device = self._device = device or jax.devices()[0]
        ctx = Build(dataset.options())
        self._it = dataset._build_output(ctx, None if numpy else _device_put(device, dataset._x64)).__iter__()

    @property
    def element_spec(self) -> Any:
        return self._spec

    def __iter__(self) -> "Iterator":
        return self

    def _next_components(self) -> tuple:
        tapes: List[Any] = _state.tapes()
        if not tapes:
            return next(self._it)
        with contextlib.ExitStack() as stack:
            for tape in reversed(list(tapes)):
                stack.enter_context(tape.stop_recording())
            return next(self._it)

    def __next__(self) -> Any:
        if in_trace():
            raise ValueError(_IN_TRACE)
        comps = self._next_components()
        if self._numpy:
            return S.pack(self._spec, [S.numpy_value(c) for c in comps])
        return S.pack(self._spec, [self._tensor(c) for c in comps])

    def _tensor(self, c: Any) -> Optional[Tensor]:
        if c is None:
            return None
        if self._move or not isinstance(c, jax.Array):
            c = _put(c, self._device)
        return Tensor(c)

    def get_next(self) -> Any:
        """The next element; ``tf.errors.OutOfRangeError`` after the last."""
        try:
            return self.__next__()
        except StopIteration:
            raise OutOfRangeError(None, None, "End of sequence") from None

    def close(self) -> None:
        """Stop the pipeline's threads now (they also stop when the iterator is collected)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
