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

An iterator **passed as an argument** is, as TF's, a resource handle: ``signature.arg_key`` asks
it for ``_tapejax_flatten`` (``flatten_argument``): the call is keyed by its ``IteratorSpec`` and
the shapes of the components the program reads, and its dynamic leaf is an int32 handle that the
callback looks up (a weak registry, so the function's cache keeps no iterator and no pipeline
thread alive).  A new ``iter(dataset)`` each epoch reuses the program (one trace, TF's count).
An iterator the body **captures** (a closure, a global) is read by a callback that holds it.

Shapes: the callback's results need static shapes.  For an argument, a component whose
``element_spec`` has ``None`` sizes (``batch`` without ``drop_remainder``) takes the shape of
the next element, read ahead when the call is keyed (kept by the iterator, not lost): the short
last batch keys a second trace, as TF's graph takes it.  For a captured iterator the element
read ahead at trace time fixes the shape, and an element of another shape at run time raises
InvalidArgumentError naming ``drop_remainder=True`` and the argument forms.  A step that reads
several elements reads the later ones with the first one's shapes (the same error if they
differ).  String and Dataset components cannot enter a compiled program (ValueError at trace
time).

The callback's cost, measured by ``benchmarks/bench_iterator_step.py`` against the same step
fed the batch as an argument (``for x, y in ds: step(x, y)``, still the fastest form): the
element goes device -> host -> device, and a program with a host callback gets copies of the
Variables it assigns (``compile/entries.py``: it may fail after its inputs were donated) and
waits for its callbacks.  On the shared 2-core CPU machine (an MLP 784-128-10 step, batches of
128, medians): argument 1.28-1.43 ms/step, inside 2.7-5.6 ms/step (2-4x; the machine's load
varies); TF 2.1-3.9 and 1.8-5.5 ms.  Feeding the batch as an argument stays the recommended
form for speed.  Not done: passing a pre-read element as program inputs when the step's first
read stands at the top level of the body (always executed), which would remove the callback
from the common case.

Only ``tapejax.function`` traces stage reads: inside a dataset function, a raw ``jax.jit`` or
another JAX transformation, reading an iterator is the ValueError of ``iterator.py``.
"""
import contextlib
import itertools
import weakref
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import jax.numpy as jnp
import numpy as np

from ..compile.host import init_scope, numpy_function
from ..compile.signature import ArgRecord, TensorSpec
from ..core import dtypes as _dtypes, state as _state
from ..core.errors import InvalidArgumentError, OutOfRangeError
from ..core.tensor import Tensor
from . import structure as S
from .optional import from_flag

__all__ = ["IteratorArg", "StagedOptional", "TracedIterator", "flatten_argument", "stages", "staged_next",
           "staged_optional"]


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
                None, None, f"An element read inside a tapejax.function (next(iterator), or a `for` over a dataset) "
                f"has a component of "
                f"shape {a.shape}, but the compiled step was traced for shape {s.shape} (the spec "
                f"{iterator.element_spec!r} leaves sizes unknown; a short last batch?). Use "
                "`batch(..., drop_remainder=True)`, or read the element in Python and pass it as an "
                "argument: `for x, y in dataset: step(x, y)` (a new shape traces again).")
        arrays.append(a)
    return arrays


def _pack(spec: Any, slots: List[_Slot], values: List[Any]) -> Any:
    comps: List[Any] = [None] * len(S.flatten(spec))
    for s, v in zip(slots, values):
        comps[s.index] = v if isinstance(v, Tensor) else Tensor(v)
    return S.pack(spec, comps)


def _tout(slots: List[_Slot]) -> List[TensorSpec]:
    return [TensorSpec((), _dtypes.bool)] + [TensorSpec(s.shape, s.dtype) for s in slots]


class StagedOptional(NamedTuple):
    """What one read gives in a trace: the flag (False after the end) and the element (zeros then)."""

    has_value: Tensor
    value: Any


def _read(spec: Any, slots: List[_Slot], find: Callable[..., Any], operands: List[Any], optional: bool,
          done: Optional[Callable[..., Any]] = None) -> StagedOptional:
    """One read as a host callback: ``find(*operands)`` gives the iterator on the host; the flag is
    always an output, so a read happens at each call even for an element of only None components.
    ``done(*operands)`` runs on the host when the read ends the iteration (its end, or an error)."""
    def host(*ops: Any) -> List[np.ndarray]:
        iterator = find(*ops)
        try:
            try:
                comps = iterator._next_components()
            except StopIteration:
                if done is not None:
                    done(*ops)
                if not optional:
                    raise OutOfRangeError(None, None, "End of sequence") from None
                return [np.asarray(False)] + [np.zeros(s.shape, s.dtype._np) for s in slots]
            iterator._position += 1
            return [np.asarray(True)] + _host_arrays(iterator, slots, comps)
        except Exception:
            if done is not None:
                done(*ops)
            raise

    got: Any = numpy_function(host, operands, _tout(slots), stateful=True)
    out = list(got)
    return StagedOptional(out[0], _pack(spec, slots, out[1:]))


def staged_next(iterator: Any) -> Any:
    """``next(iterator)`` / ``get_next()`` on an iterator the trace captured: the element as tracers
    of a host callback that reads the next element at each call (OutOfRangeError at the end)."""
    return _read(iterator.element_spec, _slots(iterator), lambda: iterator, [], False).value


def staged_optional(iterator: Any) -> StagedOptional:
    """``get_next_as_optional()`` on an iterator the trace captured: a bool flag and the element
    (zeros after the end), read by one host callback per call."""
    return _read(iterator.element_spec, _slots(iterator), lambda: iterator, [], True)


# ---------------------------------------------------------------------------
# An iterator passed as an argument: a handle, keyed by its IteratorSpec
# ---------------------------------------------------------------------------

_LIVE: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_NEXT_HANDLE = itertools.count(1)


def _find(handle: Any) -> Any:
    iterator = _LIVE.get(int(handle))
    if iterator is None:   # pragma: no cover - the caller holds the iterator while the step runs
        raise InvalidArgumentError(None, None, "The iterator passed to this tapejax.function step no longer exists.")
    return iterator


class IteratorArg(ArgRecord):
    """An iterator argument in a function's template: its element spec and the static shapes of
    the components the program reads; one dynamic leaf, the iterator's handle (an int32 scalar)."""

    def __init__(self, spec: Any, slots: Tuple[_Slot, ...]):
        self.spec = spec
        self.slots = slots

    def fill(self, it: Iterator[Any]) -> "TracedIterator":
        return TracedIterator(self.spec, list(self.slots), next(it))


def flatten_argument(iterator: Any) -> Tuple[Any, IteratorArg, List[Tensor]]:
    """``signature``'s view of an iterator argument: the cache key (its ``IteratorSpec`` and the
    shapes of the next element's components), the template record and the handle.  A component
    with unknown sizes takes the next element's shape (read ahead now, outside any trace), so a
    short last batch keys a new trace, as a batch fed as an argument does."""
    slots = iterator._arg_slots
    if slots is None:
        slots = tuple(_slots(iterator))
        known = all(not (t._shape is None or None in t._shape) for t in S.flatten(iterator.element_spec)
                    if isinstance(t, TensorSpec))
        if known:
            iterator._arg_slots = slots   # (fully known: the same for every call)
    handle = iterator._handle
    if handle is None:
        h = next(_NEXT_HANDLE)
        _LIVE[h] = iterator
        handle = iterator._handle = Tensor(jnp.asarray(h, jnp.int32))
    key = ("tapejax.data.Iterator", repr(iterator.element_spec), tuple(s.shape for s in slots))
    return key, IteratorArg(iterator.element_spec, slots), [handle]


#: TF's limit on ``get_next`` calls in one trace (``iterator_ops.GET_NEXT_CALL_ERROR_THRESHOLD``):
#: more means a Python ``for`` over the iterator (AutoGraph off), which no read would end.
_READS_IN_ONE_TRACE = 32
_MANY_READS = ("An unusually high number of `tf.data.Iterator.get_next()` calls was detected. This suggests that "
               "the `for elem in dataset: ...` idiom is used within tf.function with AutoGraph disabled. This "
               "idiom is only supported when AutoGraph is enabled.")


class TracedIterator:
    """An iterator argument inside the trace: reads are host callbacks on its handle, so the
    program serves every iterator of the same spec (one trace, as TF's ``IteratorSpec``).  Also
    what ``iter(dataset)`` gives inside the trace (``staged_for.staged_iter``: a handle to a new
    iterator made at each call)."""

    def __init__(self, spec: Any, slots: List[_Slot], handle: Tensor, find: Callable[..., Any] = _find,
                 done: Optional[Callable[..., Any]] = None):
        self._spec = spec
        self._slots = slots
        self._handle = handle
        self._find = find   # handle -> the iterator on the host
        self._done = done   # (``staged_for``'s per-call iterators: closed at their end)
        self._reads = 0

    @property
    def element_spec(self) -> Any:
        return self._spec

    @property
    def _type_spec(self) -> Any:
        return S.IteratorSpec(self._spec)

    def __iter__(self) -> "TracedIterator":
        return self

    def __next__(self) -> Any:
        self._reads += 1
        if self._reads > _READS_IN_ONE_TRACE:   # (a Python ``for``: the read never ends the loop)
            raise ValueError(_MANY_READS)
        return _read(self._spec, self._slots, self._find, [self._handle], False, self._done).value

    def next(self) -> Any:
        return self.__next__()

    def get_next(self) -> Any:
        return self.__next__()

    def _tapejax_for_stmt(self, extra_test: Any, body: Any, get_state: Any, set_state: Any, symbol_names: Any,
                          opts: Any) -> None:
        """AutoGraph's converted ``for x in iterator``: a staged loop reading it on to its end (or
        a ``break``), as TF's."""
        _staged_loop(self._spec, self._slots, self._find, self._handle, self._done, extra_test, body, get_state,
                     set_state, symbol_names, opts)

    def get_next_as_optional(self) -> Any:
        read = _read(self._spec, self._slots, self._find, [self._handle], True, self._done)
        return from_flag(read.has_value, read.value, self._spec)

    def __repr__(self) -> str:
        return f"<tapejax.data.Iterator (traced) element_spec={self._spec!r}>"


def _staged_loop(spec: Any, slots: List[_Slot], find: Callable[..., Any], handle: Any, done: Any, extra_test: Any,
                 body: Callable[[Any], None], get_state: Callable[[], tuple], set_state: Callable[[tuple], None],
                 symbol_names: Tuple[str, ...], opts: Dict[str, Any]) -> None:
    """A converted ``while`` carrying the read's flag, the element and the loop's variables; each
    iteration reads the next element by a host callback."""
    from ..compile.autograph_ops import while_stmt  # (only reached while AutoGraph converts)
    first = _read(spec, slots, find, [handle], True, done)
    n = len(slots)
    cur: List[Any] = [first.has_value] + _leaves(first.value, slots)

    def test() -> Any:
        if extra_test is None:
            return cur[0]
        more = extra_test()
        from ..ops import math as _math
        return _math.logical_and(cur[0], more)

    def loop_body() -> None:
        body(_pack(spec, slots, cur[1:]))
        nxt = _read(spec, slots, find, [handle], True, done)
        cur[:] = [nxt.has_value] + _leaves(nxt.value, slots)

    def get() -> tuple:
        return tuple(cur) + tuple(get_state())

    def put(values: tuple) -> None:
        cur[:] = list(values[:n + 1])
        set_state(tuple(values[n + 1:]))

    names = ("<dataset element present>",) + tuple(f"<dataset component {s.index}>" for s in slots)
    with _outside_tapes():
        while_stmt(test, loop_body, get, put, names + tuple(symbol_names), opts)


@contextlib.contextmanager
def _outside_tapes() -> Iterator[None]:
    """The tapes recording around a dataset loop do not record it: TF's AutoGraph makes the loop a
    ``ReduceDataset`` op, which has no gradient, so a gradient through it is None (tapes made in
    the loop's body record as usual: a training step per element works)."""
    with contextlib.ExitStack() as stack:
        for tape in list(_state.tapes()):
            pause = getattr(tape, "stop_recording", None)
            if pause is not None and getattr(tape, "_recording", False):
                stack.enter_context(pause())
        yield


def _leaves(element: Any, slots: List[_Slot]) -> List[Tensor]:
    comps = S.flatten(element)
    return [comps[s.index] for s in slots]
