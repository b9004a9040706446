"""An iterator read inside ``tapejax.function``: each call of the compiled step reads the next element.

TF's ``tf.data.Iterator`` is a resource: ``next(it)``, ``it.get_next()`` and
``it.get_next_as_optional()`` inside a ``tf.function`` are ops of the graph, so every call of the
function reads the next element (``for _ in range(3): step(it)`` trains on three batches).
Reading the element while the body traces and leaving it in the program would freeze the first
batch into every call, the worst kind of bug: a training loop that runs, with wrong numbers.

Design
------
The pipeline runs on the host (grain's threads), so an element has to cross into the compiled
program at each call.  Two ways were weighed:

* **A host callback** (chosen): the read is an ordered ``io_callback`` inside the program
  (through ``tapejax.numpy_function``'s machinery, ``compile/host.py``: ``stateful=True``, so it
  is never dropped or reordered).  It is correct wherever the read stands: under a
  ``tapejax.cond`` branch, in a ``while`` body (``while opt.has_value(): ...``), a variable
  number of times per call; the end of the data is TF's ``OutOfRangeError`` raised by the call;
  a checkpoint of the iterator sees the elements the steps read.
* Reading the element before the compiled call and passing it as an extra argument would avoid
  the callback's costs, but it needs every read to happen exactly once per call (not in a
  branch or loop body), which TF does not require.

The callback's cost, measured by ``benchmarks/bench_iterator_step.py`` against the same step
fed the batch as an argument (``for x, y in ds: step(x, y)``, still the fastest form): the
element goes device -> host -> device, and a program with a host callback gets copies of the
Variables it assigns (``compile/entries.py``: it may fail after its inputs were donated) and
waits for its callbacks.  On the shared 2-core CPU machine (an MLP 784-128-10 step, batches of
128): argument 1.29 ms/step, inside 2.66 ms/step (2.1x); TF 3.91 and 1.91 ms (TF's inside is
its faster form, and tapejax's inside is within 1.4x of it).  Feeding the batch as an argument
stays the recommended form for speed.

Shapes: the callback's results need static shapes.  A component whose ``element_spec`` has
``None`` sizes (``batch`` without ``drop_remainder``) takes the shape of the next element, read
ahead once at trace time (kept by the iterator, not lost); an element of another shape at run
time (the short last batch) raises InvalidArgumentError naming ``drop_remainder=True`` and the
argument-feeding alternative.  String and Dataset components cannot enter a compiled program
(ValueError at trace time).

Only ``tapejax.function`` traces stage reads: inside a dataset function, a raw ``jax.jit`` or
another JAX transformation, reading an iterator is the ValueError of ``iterator.py``.
"""
from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np

from ..compile.host import init_scope, numpy_function
from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes, state as _state
from ..core.errors import InvalidArgumentError, OutOfRangeError
from ..core.tensor import Tensor
from . import structure as S

__all__ = ["StagedOptional", "stages", "staged_next", "staged_optional"]


def stages() -> bool:
    """Whether the current trace is a ``tapejax.function``'s (or a body it traces), where an
    iterator read becomes a host callback of the program."""
    col = _state._local.collector
    return col is not None and getattr(col, "stages_host_calls", True)


class _Slot(NamedTuple):
    """One component of the element as the program receives it."""

    index: int                 # its position among the element's components
    shape: Tuple[int, ...]     # its static shape in the program
    dtype: Any                 # a tapejax DType


_NOT_STAGED = ("Iterator element components of kind {} cannot be read inside a tapejax.function: only "
               "numeric tensor components can enter a compiled program. Read the element in Python and "
               "pass its tensors to the step instead: `x = next(it); step(x)`.")


def _slots(iterator: Any) -> List[_Slot]:
    """The components the program reads, with static shapes (read ahead when the spec lacks them)."""
    specs = S.flatten(iterator.element_spec)
    ahead: Optional[tuple] = None
    out = []
    for i, spec in enumerate(specs):
        if isinstance(spec, S.NoneTensorSpec):
            continue
        if not isinstance(spec, TensorSpec) or S.is_string(spec):
            raise ValueError(_NOT_STAGED.format(repr(spec)))
        known = spec._shape
        if known is None or any(d is None for d in known):
            if ahead is None:
                with init_scope():   # the pipeline's own functions run eagerly, not in this trace
                    ahead = iterator._peek()
            if ahead is None:   # the iterator is at its end: any call raises, the shape is moot
                shape = tuple(0 if d is None else int(d) for d in (known or ()))
            else:
                shape = tuple(int(d) for d in np.shape(ahead[i]))
        else:
            shape = tuple(d for d in known if d is not None)   # (all known)
        out.append(_Slot(i, shape, spec.dtype))
    return out


def _host_arrays(iterator: Any, slots: List[_Slot], comps: tuple) -> List[np.ndarray]:
    arrays = []
    for s in slots:
        a = np.asarray(comps[s.index])
        if a.shape != s.shape:
            raise InvalidArgumentError(
                None, None, f"An element read by next(iterator) inside a tapejax.function has a component of "
                f"shape {a.shape}, but the compiled step was traced for shape {s.shape} (the spec "
                f"{iterator.element_spec!r} leaves sizes unknown; a short last batch?). Use "
                "`batch(..., drop_remainder=True)`, or read the element in Python and pass it as an "
                "argument: `for x, y in dataset: step(x, y)` (a new shape traces again).")
        arrays.append(a)
    return arrays


def _pack(iterator: Any, slots: List[_Slot], values: List[Any]) -> Any:
    comps: List[Any] = [None] * len(S.flatten(iterator.element_spec))
    for s, v in zip(slots, values):
        comps[s.index] = v if isinstance(v, Tensor) else Tensor(v)
    return S.pack(iterator.element_spec, comps)


def _tout(slots: List[_Slot]) -> List[TensorSpec]:
    return [TensorSpec(s.shape, s.dtype) for s in slots]


def staged_next(iterator: Any) -> Any:
    """``next(iterator)`` / ``get_next()`` in a ``tapejax.function`` trace: the element as tracers of
    a host callback that reads the next element at each call (OutOfRangeError at the end)."""
    slots = _slots(iterator)

    def read() -> List[np.ndarray]:
        try:
            comps = iterator._next_components()
        except StopIteration:
            raise OutOfRangeError(None, None, "End of sequence") from None
        iterator._position += 1
        return _host_arrays(iterator, slots, comps)

    out = numpy_function(read, [], _tout(slots), stateful=True) if slots else []
    return _pack(iterator, slots, list(out))


class StagedOptional(NamedTuple):
    """What ``get_next_as_optional`` reads in a trace: the flag and the element (zeros when empty)."""

    has_value: Tensor
    value: Any


def staged_optional(iterator: Any) -> StagedOptional:
    """``get_next_as_optional()`` in a ``tapejax.function`` trace: a bool flag and the element (zeros
    after the end), read by one host callback per call."""
    slots = _slots(iterator)

    def read() -> List[np.ndarray]:
        try:
            comps = iterator._next_components()
        except StopIteration:
            return [np.asarray(False)] + [np.zeros(s.shape, s.dtype._np) for s in slots]
        iterator._position += 1
        return [np.asarray(True)] + _host_arrays(iterator, slots, comps)

    read_out: Any = numpy_function(read, [], [TensorSpec((), _dtypes.bool)] + _tout(slots), stateful=True)
    out = list(read_out)
    return StagedOptional(out[0], _pack(iterator, slots, out[1:]))
