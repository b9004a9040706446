"""``tapejax.data.Iterator``: grain's iterator, its elements packed as tapejax Tensors.

One ``iter(dataset)`` builds the dataset's grain pipeline once (``Dataset._build_output``) and
reads it.  Each element's components become Tensors on the default device (already moved
there by a final ``prefetch``'s thread, else here) and are packed into ``element_spec``'s
structure.  ``as_numpy_iterator`` reads the same pipeline and gives NumPy values.

While GradientTapes record on the reading thread, reading pauses them (``stop_recording``): a
dataset's functions are not part of the user's gradient, as in TF.  Making an iterator
inside a trace (``for x in dataset`` in a ``tapejax.function``) raises ValueError: its elements
would become constants of the compiled program.  An iterator made outside and read inside a
``tapejax.function`` (``next(it)``, ``get_next``, ``get_next_as_optional``) reads the next element
at each call (``staged.py``: a host callback); inside any other trace reading raises ValueError.

**Checkpointing** (``tf.train.Checkpoint(iterator=it)``): an iterator is a trackable with one
child value, ``ITERATOR_STATE`` (an int64 vector): a format word, a fingerprint of the plan,
the number of elements given so far and the iteration number of each random transformation
(``shuffle``, ``sample_from_datasets``, ``random``) (``build.Build``).
Everything else is a function of the plan, so a restore rebuilds the pipeline with those draws
and moves it to the position: with grain's ``set_state`` (``next_index``) when the output
stream reads random-access nodes directly (sources, shuffle, map, batch, take/skip, repeat,
zip, concatenate, enumerate, cache, then prefetch: no element is computed), else by computing
and dropping that many elements (past a ``filter``, ``unbatch``, an inner ``prefetch``).  A
pipeline with ``from_generator`` cannot be saved: TF's FailedPreconditionError at ``save``.
"""
import contextlib
import logging
import zlib
from typing import Any, Callable, List

import jax
import numpy as np

from ..compile.signature import TensorSpec
from ..core import state as _state
from ..core.errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError
from ..core.tensor import Tensor, TensorShape
from . import ragged_elements as _ragged, sparse_elements as _sparse, structure as S
from .build import Build
from .optional import Optional, from_element, from_flag
from .staged import flatten_argument, staged_next, staged_optional, stages

_log = logging.getLogger("tapejax")

try:   # JAX's own test: no trace (jit, vmap, grad, eval_shape ...) is running on this thread
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX without it: only tapejax.function's trace is seen
    def _trace_state_clean() -> bool:
        return True

_IN_TRACE = ("Iterating over a tapejax.data.Dataset inside a JAX trace other than tapejax.function's (jax.jit, "
             "jax.vmap, a dataset function ...) is not supported: its elements would be frozen into the compiled "
             "program as constants. Iterate in Python and call the compiled step on each element: `for x, y in "
             "dataset: train_step(x, y)`; or iterate inside a tapejax.function, where `for x in dataset`, "
             "`iter(dataset)`, `reduce` and `next(it)` read the data at each call.")
_IN_OTHER_TRACE = ("Reading a tapejax.data iterator inside a JAX trace other than tapejax.function's (jax.jit, a "
                   "dataset function, jax.vmap ...) is not supported: its element would be frozen into the "
                   "program as a constant. Read it in a tapejax.function (each call reads the next element), or "
                   "read it in Python and pass the element as an argument.")


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
        return tuple(c if c is None or (not move and isinstance(c, jax.Array)) or S.is_bytes(c) else _put(c, device)
                     for c in element)
    move = jax.default_backend() != "cpu"   # (a single CPU device: a jax.Array is where it must be)
    return put


_WARNED: set = set()


def _deprecated(name: str) -> None:
    """TF's deprecation notice, logged once per property."""
    if name in _WARNED:
        return
    _WARNED.add(name)
    _log.warning("Iterator.%s is deprecated and will be removed in a future version (TF's notice). Instructions "
                 "for updating: use `iterator.element_spec`.", name)


def output_device(dataset: Any) -> Any:
    """The device a ``copy_to_device`` / ``prefetch_to_device`` at the end of the plan names (through
    ``prefetch`` and ``with_options``), else None (the default device)."""
    d = dataset
    while True:
        target = getattr(d, "target_device", None)
        if target is not None:
            return target
        if type(d).__name__ not in ("Prefetch", "WithOptions") or len(d._inputs) != 1:
            return None
        d = d._inputs[0]


_STATE_FORMAT = 0x7D17   # the first word of a saved state (its layout's version)


def _plan(dataset: Any) -> List[Any]:
    """The plan's datasets, depth first from ``dataset`` (each once)."""
    out: List[Any] = []
    seen: set = set()
    stack = [dataset]
    while stack:
        d = stack.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        out.append(d)
        stack.extend(reversed(d._inputs))
    return out


class IteratorState:
    """The value a checkpoint saves for an ``Iterator`` (its child ``ITERATOR_STATE``): an int64
    vector ``[format, fingerprint, position, draw of each random transformation]`` (-1: not built)."""

    dtype = np.dtype(np.int64)

    def __init__(self, iterator: "Iterator"):
        self._iterator = iterator
        self.name = "ITERATOR_STATE"

    @property
    def shape(self) -> tuple:
        return (3 + len(self._iterator._random),)

    def _checkpoint_read(self) -> np.ndarray:
        return self._iterator._state_vector()

    def _checkpoint_assign(self, value: Any) -> None:
        self._iterator._restore(np.asarray(value))


class Iterator:
    """``tf.data.Iterator``: ``next(it)`` gives the next element (StopIteration at the end),
    ``get_next()`` raises ``tf.errors.OutOfRangeError`` there instead.  A trackable: a
    ``tf.train.Checkpoint(iterator=it)`` saves its position and restores it."""

    def __init__(self, dataset: Any, numpy: bool = False):
        if in_trace():
            raise ValueError(_IN_TRACE)
        self._dataset = dataset
        self._spec = dataset.element_spec
        self._numpy = numpy
        device = output_device(dataset) or jax.config.jax_default_device  # pyright: ignore[reportAttributeAccessIssue]
        self._move = jax.default_backend() != "cpu" or device is not None
        self._device = device or jax.devices()[0]
        plan = _plan(dataset)
        kinds = [type(d).__name__ for d in plan]
        # the random transformations (shuffle, sample_from_datasets, random): their draws are saved
        self._random = [d for d in plan if hasattr(d, "_iterations")]
        self._generator = "Generator" in kinds
        self._fingerprint = zlib.crc32(" ".join(kinds).encode()) & 0x7FFFFFFF
        self._state_value = IteratorState(self)
        self._position = 0
        self._ahead: List[tuple] = []   # an element read ahead (``_peek``), given next
        self._handle: Any = None        # as a tapejax.function argument (``staged.flatten_argument``)
        self._arg_slots: Any = None
        self._build(Build(dataset.options()))

    def _build(self, ctx: Build) -> None:
        d = self._dataset
        self._ctx = ctx
        # a final prefetch's thread moves elements to the device; on the CPU device there is
        # nothing to move (a gathered batch is a jax.Array there already), so no stage is added
        move = not self._numpy and self._move
        self._it = d._build_output(ctx, _device_put(self._device, d._x64) if move else None).__iter__()

    # -- checkpointing ---------------------------------------------------------
    def _checkpoint_children(self) -> list:
        return [("ITERATOR_STATE", self._state_value)]

    def _state_vector(self) -> np.ndarray:
        if self._generator:
            raise FailedPreconditionError(None, None, "Cannot save the state of an iterator over "
                                          "Dataset.from_generator: PyFunc is stateful (its Python generator's "
                                          "position cannot be saved; TF refuses it too).")
        draws = [self._ctx.draws.get(id(s), -1) for s in self._random]
        return np.asarray([_STATE_FORMAT, self._fingerprint, self._position] + draws, np.int64)

    def _restore(self, state: np.ndarray) -> None:
        if state.ndim != 1 or len(state) < 3 or int(state[0]) != _STATE_FORMAT:
            raise InvalidArgumentError(None, None, "The checkpoint's ITERATOR_STATE is not a tapejax.data iterator "
                                       f"state (got {state!r}).")
        if int(state[1]) != self._fingerprint or len(state) != 3 + len(self._random):
            raise InvalidArgumentError(None, None, "The checkpoint's iterator was saved from a different "
                                       "input pipeline than this iterator's (its transformations differ).")
        if self._generator:
            raise FailedPreconditionError(None, None, "Cannot restore an iterator over Dataset.from_generator: "
                                          "PyFunc is stateful.")
        position = int(state[2])
        ctx = Build(self._dataset.options())
        for s, k in zip(self._random, state[3:].tolist()):
            if k >= 0:
                ctx.draws[id(s)] = int(k)
        self.close()
        self._build(ctx)
        self._position = 0
        self._ahead = []
        if position and ctx.output_random_access:
            self._it.set_state({"next_index": position})   # grain's position: nothing is computed
            self._position = position
            return
        for _ in range(position):   # a stream: the elements before the position are computed again
            try:
                self._next_components()
            except StopIteration:
                break
            self._position += 1

    @property
    def element_spec(self) -> Any:
        return self._spec

    def _tapejax_flatten(self) -> Any:
        """As a ``tapejax.function`` argument: keyed by its ``IteratorSpec``, passed as a handle
        that the step's reads use (``staged.flatten_argument``)."""
        if self._numpy:
            raise ValueError("A NumpyIterator (as_numpy_iterator()) cannot be passed to a tapejax.function: "
                             "pass iter(dataset) instead.")
        return flatten_argument(self)

    @property
    def _type_spec(self) -> S.IteratorSpec:
        """TF's ``IteratorSpec`` of this iterator (``tf.type_spec_from_value`` reads it)."""
        return S.IteratorSpec(self._spec)

    def __iter__(self) -> "Iterator":
        return self

    def _peek(self) -> Any:
        """The next element's components without consuming it (None at the end)."""
        if not self._ahead:
            try:
                self._ahead.append(self._next_components())
            except StopIteration:
                return None
        return self._ahead[0]

    def _next_components(self) -> tuple:
        if self._ahead:
            return self._ahead.pop()
        tapes = _state.tapes()
        if not tapes:
            return next(self._it)
        with contextlib.ExitStack() as stack:
            for tape in reversed(list(tapes)):   # a tape pauses (its record says so); other recorders see nothing
                pause = getattr(tape, "stop_recording", None)
                if pause is not None:
                    stack.enter_context(pause())
            stack.enter_context(_state.swap(tapes=()))
            return next(self._it)

    def __next__(self) -> Any:
        if in_trace():
            if stages() and not self._numpy:   # a tapejax.function: each call reads the next element
                return staged_next(self)
            if stages():
                raise ValueError("A NumpyIterator (as_numpy_iterator()) gives NumPy values and cannot be read inside "
                                 "a tapejax.function: read iter(dataset) there (each call reads the next element).")
            raise ValueError(_IN_OTHER_TRACE)
        comps = self._next_components()
        self._position += 1
        if self._numpy:
            return S.pack(self._spec, [S.numpy_value(c) for c in comps])
        return S.pack(self._spec, [self._tensor(c) for c in comps])

    def _tensor(self, c: Any) -> Any:
        if c is None or hasattr(type(c), "_build_stream"):   # (a window's components are Datasets)
            return c
        if S.is_bytes(c):   # a string component stays host bytes (``strings``)
            return c
        if isinstance(c, _sparse.SparseValue):
            return _sparse.to_sparse(c)
        if isinstance(c, _ragged.RaggedValue):
            return _ragged.to_ragged(c)
        if self._move or not isinstance(c, jax.Array):
            c = _put(c, self._device)
        return Tensor(c)

    def get_next(self) -> Any:
        """The next element; ``tf.errors.OutOfRangeError`` after the last."""
        try:
            return self.__next__()
        except StopIteration:
            raise OutOfRangeError(None, None, "End of sequence") from None

    def next(self) -> Any:
        """``next(iterator)`` (TF's Python 2 spelling): StopIteration after the last element."""
        return self.__next__()

    def get_next_as_optional(self) -> Optional:
        """The next element as a ``tf.experimental.Optional``: empty after the last element (where
        ``get_next`` raises), so ``while opt.has_value():`` loops end without an exception."""
        if in_trace() and stages():
            read = staged_optional(self)
            return from_flag(read.has_value, read.value, self._spec)
        try:
            element = self.__next__()
        except StopIteration:
            return Optional.empty(self._spec)
        return from_element(element, self._spec)

    # TF 1's properties, deprecated in TF 2 (TF logs a warning; ``element_spec`` replaces them)
    @property
    def output_shapes(self) -> Any:
        """Each component's ``TensorShape`` in the element's structure (deprecated: ``element_spec``)."""
        _deprecated("output_shapes")
        return S.map_structure(lambda s: s.shape if isinstance(s, TensorSpec) else TensorShape([]), self._spec)

    @property
    def output_types(self) -> Any:
        """Each component's dtype in the element's structure (deprecated: ``element_spec``)."""
        _deprecated("output_types")
        return S.map_structure(lambda s: s.dtype if isinstance(s, TensorSpec) else s, self._spec)

    @property
    def output_classes(self) -> Any:
        """Each component's Python class in the element's structure (deprecated: ``element_spec``)."""
        _deprecated("output_classes")
        return S.map_structure(lambda s: Tensor if isinstance(s, TensorSpec) else type(s), self._spec)

    def close(self) -> None:
        """Stop the pipeline's threads now (they also stop when the iterator is collected)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class NumpyIterator(Iterator):
    """``tf.data.NumpyIterator``: what ``Dataset.as_numpy_iterator()`` gives: the elements as NumPy
    values (an ndarray per component, a NumPy scalar at rank 0, ``bytes`` for a string)."""

    def __init__(self, dataset: Any):
        super().__init__(dataset, numpy=True)

    def __repr__(self) -> str:
        return f"NumpyIterator(element_spec={self._spec!r})"
