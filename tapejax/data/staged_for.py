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

Shapes are static in the program: each component has the shape of ``element_spec``, or where the
spec leaves sizes unknown (``batch`` without ``drop_remainder``) that of the dataset's first
element (read at trace time from a throwaway iteration, in a thread of its own); an element of another shape (the short
last batch) is InvalidArgumentError when the step runs, naming ``drop_remainder=True``.  Outside
any trace the loop is Python's; inside another JAX trace it is ``iterator.py``'s ValueError.
"""
import concurrent.futures
import itertools
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import numpy as np

from ..compile.host import numpy_function
from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import structure as S
from .staged import _pack, _read, _Slot, _slots, stages

__all__ = ["dataset_for_stmt"]

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


def _open(dataset: Any) -> Callable[[], List[np.ndarray]]:
    def host() -> List[np.ndarray]:
        h = next(_HANDLES)
        _OPEN[h] = iter(dataset)
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
    from ..compile.autograph_ops import while_stmt  # (only reached while AutoGraph converts)
    spec = dataset.element_spec
    slots = _loop_slots(dataset)
    made: Any = numpy_function(_open(dataset), [], [TensorSpec((), _dtypes.int32)], stateful=True)
    handle = made[0]
    first = _read(spec, slots, _find_open, [handle], True, _close)
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
        nxt = _read(spec, slots, _find_open, [handle], True, _close)
        cur[:] = [nxt.has_value] + _leaves(nxt.value, slots)

    def get() -> tuple:
        return tuple(cur) + tuple(get_state())

    def put(values: tuple) -> None:
        cur[:] = list(values[:n + 1])
        set_state(tuple(values[n + 1:]))

    names = ("<dataset element present>",) + tuple(f"<dataset component {s.index}>" for s in slots)
    while_stmt(test, loop_body, get, put, names + tuple(symbol_names), opts)
    done: Any = numpy_function(_close, [handle], [TensorSpec((), _dtypes.bool)], stateful=True)
    del done


def _leaves(element: Any, slots: List[_Slot]) -> List[Tensor]:
    comps = S.flatten(element)
    return [comps[s.index] for s in slots]
