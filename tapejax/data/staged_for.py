"""``for element in dataset:`` inside a ``tapejax.function``: a staged loop over a new iteration per call.

TF's AutoGraph converts ``for x in dataset`` in a ``tf.function`` into a loop of the graph that
makes a new iterator at each call and reads it to the end (or to a ``break``).  tapejax's
AutoGraph operators (``compile/autograph_ops.for_stmt``) hand a converted ``for`` over an object
whose type has ``_tapejax_for_stmt`` to it; ``Dataset`` points it here.

The loop is built from ``staged.py``'s reads: a host callback makes the iterator (``iter(dataset)``
on the host, kept in a table under an int32 handle), each iteration reads the next element with
``get_next_as_optional``'s callback, and a converted ``while`` (``autograph_ops.while_stmt``)
carries the flag, the element and the loop's own variables; the iterator is dropped when its
end is read, when a read fails, and by a last callback after the loop (a ``break``).  So every call iterates the dataset again, in TF's order
(a new shuffle per iteration, as ``iter(dataset)`` in Python), and ``break`` ends the loop.

The same reads serve ``iter(dataset)`` made inside the step (``staged_iter``: a new iterator at
each call, the previous call's closed when the site opens again), ``Dataset.reduce`` (a staged
loop whose state is the reduction's) and ``get_single_element`` (one callback that iterates anew
and checks there is exactly one element).

Shapes are static in the program: each component has the shape of ``element_spec``, or where the
spec leaves sizes unknown (``batch`` without ``drop_remainder``) that of the dataset's first
element (read at trace time from a throwaway iteration, in a thread of its own); an element of another shape (the short
last batch) is InvalidArgumentError when the step runs, naming ``drop_remainder=True``.  Outside
any trace the loop is Python's; inside another JAX trace it is ``iterator.py``'s ValueError.
"""
import concurrent.futures
import itertools
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import numpy as np

from ..compile.host import numpy_function
from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from .staged import TracedIterator, _host_arrays, _pack, _Slot, _slots, _staged_loop, _tout, stages

__all__ = ["dataset_for_stmt", "staged_iter", "staged_reduce", "staged_single_element"]

#: Iterators made by running steps, by handle (strong references: a loop's iterator lives from the
#: callback that makes it to its end, its ``break`` or the end of the step).
_OPEN: Dict[int, Any] = {}
_HANDLES = itertools.count(1)


def _find_open(handle: Any) -> Any:
    iterator = _OPEN.get(int(handle))
    if iterator is None:   # pragma: no cover - only a failed step leaves a loop without its iterator
        raise InvalidArgumentError(None, None, "The dataset loop's iterator was closed.")
    return iterator


def _loop_slots(dataset: Any) -> List[_Slot]:
    """The components' static shapes: the spec's, or the first element's where sizes are unknown."""
    class _Probe:   # what ``staged._slots`` asks of an iterator: the spec and a read-ahead
        element_spec = dataset.element_spec

        @staticmethod
        def _peek() -> Optional[tuple]:
            # in a thread of its own: no trace there (JAX's trace state is per thread)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(_first, dataset, jax.enable_x64.value).result()
    return _slots(_Probe())


def _first(dataset: Any, x64: bool) -> Optional[tuple]:
    with jax.enable_x64(x64):
        it = iter(dataset)
        try:
            return it._next_components()
        except StopIteration:
            return None
        finally:
            it.close()


class _Site:
    """An ``iter(dataset)`` in a step's program: the handle of the iterator its last call made.
    That iterator is closed when the next call opens the site again, or when the program (whose
    callback holds the site) is freed, which JAX's caches of traced programs may put off."""

    def __init__(self) -> None:
        self.handles: List[int] = []
        weakref.finalize(self, _close_all, self.handles)


def _close_all(handles: List[int]) -> None:
    while handles:
        _close(handles.pop())


def _open(dataset: Any, site: Optional[_Site] = None) -> Callable[[], List[np.ndarray]]:
    """The callback that makes a new iterator of ``dataset`` at each call (with ``site``: after
    closing the one the previous call made there, so each site keeps at most one open)."""
    def host() -> List[np.ndarray]:
        if site is not None:
            _close_all(site.handles)
        h = next(_HANDLES)
        _OPEN[h] = iter(dataset)
        if site is not None:
            site.handles.append(h)
        return [np.asarray(h, np.int32)]
    return host


def _close(handle: Any) -> List[np.ndarray]:
    it = _OPEN.pop(int(handle), None)
    if it is not None:
        it.close()
    return [np.asarray(True)]


def _py_for(dataset: Any, extra_test: Any, body: Callable[[Any], None]) -> None:
    for x in dataset:
        if extra_test is not None and not extra_test():
            break
        body(x)


def dataset_for_stmt(dataset: Any, extra_test: Any, body: Callable[[Any], None], get_state: Callable[[], tuple],
                     set_state: Callable[[tuple], None], symbol_names: Tuple[str, ...], opts: Dict[str, Any]) -> None:
    """AutoGraph's ``for_stmt`` over a Dataset (see the module docstring)."""
    if not stages():
        _py_for(dataset, extra_test, body)   # eagerly: Python's loop (another trace: iter() refuses)
        return
    slots = _loop_slots(dataset)
    made: Any = numpy_function(_open(dataset), [], [TensorSpec((), _dtypes.int32)], stateful=True)
    handle = made[0]
    _staged_loop(dataset.element_spec, slots, _find_open, handle, _close, extra_test, body, get_state, set_state,
                 symbol_names, opts)
    done: Any = numpy_function(_close, [handle], [TensorSpec((), _dtypes.bool)], stateful=True)
    del done




def staged_iter(dataset: Any) -> TracedIterator:
    """``iter(dataset)`` inside a ``tapejax.function``: each call makes a new iterator (TF's
    ``iter`` in a graph), read by ``next`` / ``get_next`` / ``get_next_as_optional`` as host
    callbacks; ``next(iter(dataset))`` is the first element at every call.  An iterator read to
    its end is closed then; one left open is closed when the next call opens this site again, or
    when the program is dropped (``_Site``)."""
    slots = _loop_slots(dataset)
    made: Any = numpy_function(_open(dataset, _Site()), [], [TensorSpec((), _dtypes.int32)], stateful=True)
    return TracedIterator(dataset.element_spec, slots, made[0], find=_find_open, done=_close)


def staged_single_element(dataset: Any) -> Any:
    """``get_single_element()`` inside a ``tapejax.function``: one host callback per call iterates
    the dataset anew and gives its only element (TF's InvalidArgumentError when it has none or
    more than one, raised by the call)."""
    spec = dataset.element_spec
    slots = _loop_slots(dataset)

    def host() -> List[np.ndarray]:
        it = iter(dataset)
        try:
            try:
                comps = it._next_components()
            except StopIteration:
                raise InvalidArgumentError(None, None, "Dataset was empty.") from None
            try:
                it._next_components()
            except StopIteration:
                return [np.asarray(True)] + _host_arrays(it, slots, comps)
            raise InvalidArgumentError(None, None, "Dataset had more than one element.")
        finally:
            it.close()

    got: Any = numpy_function(host, [], _tout(slots), stateful=True)
    return _pack(spec, slots, list(got)[1:])


def staged_reduce(dataset: Any, initial_state: Any, reduce_func: Callable[..., Any]) -> Any:
    """``Dataset.reduce`` inside a ``tapejax.function``: a staged loop over a new iteration per
    call (``dataset_for_stmt``), ``reduce_func`` traced in the step (so it reads Variables when the
    step runs, as TF's graph).  The state keeps its structure, dtypes and shapes (TypeError /
    the loop's error naming it otherwise)."""
    from ..core import nest
    from ..core.convert import convert_to_tensor
    leaves = [convert_to_tensor(v) for v in nest.flatten(initial_state)]
    state: List[Any] = [nest.pack_sequence_as(initial_state, leaves)]

    def body(element: Any) -> None:
        new = reduce_func(state[0], element)
        if isinstance(new, list):
            new = tuple(new)
        flat = [convert_to_tensor(v) for v in nest.flatten(new)]
        old = nest.flatten(state[0])
        if len(flat) != len(old) or any(a.dtype != b.dtype for a, b in zip(flat, old)):
            raise TypeError("The element types for the new state must match the initial state. Expected "
                            f"{[(tuple(b.shape), b.dtype.name) for b in old]}; got "
                            f"{[(tuple(a.shape), a.dtype.name) for a in flat]}.")
        state[0] = nest.pack_sequence_as(state[0], flat)

    def get_state() -> tuple:
        return tuple(nest.flatten(state[0]))

    def set_state(values: tuple) -> None:
        state[0] = nest.pack_sequence_as(state[0], list(values))

    names = tuple(f"<reduce state {i}>" for i in range(len(leaves)))
    dataset_for_stmt(dataset, None, body, get_state, set_state, names, {})
    return state[0]
