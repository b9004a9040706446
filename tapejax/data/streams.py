"""The stream forms grain has no ready transformation for (``grain.IterDataset`` subclasses).

``from_generator``, ``unbatch``, ``repeat`` / ``take`` / ``skip`` / ``zip`` / ``concatenate`` /
``cache`` over a stream, and the ``Producer`` threads of a parallel ``interleave``.  ``repeat`` and ``concatenate`` take *factories*: each epoch builds its
input again, so a ``shuffle`` upstream draws a new order per epoch, as TF's iterators do.  An
iterator's ``get_state`` reports its position (grain's prefetch asks for it after each element).
Iterator checkpoints do not go through these iterators' ``set_state``: ``iterator.Iterator``
rebuilds the pipeline with the saved shuffle draws and reads up to the saved position.
"""
import collections
import concurrent.futures as _futures
import queue
import threading
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence

from ..core.errors import InvalidArgumentError
from . import nodes
from .nodes import Element, grain

Factory = Callable[[], Any]   # () -> a grain IterDataset


class _Iterator(grain.DatasetIterator):
    """Base of the iterators here: counts what it produced."""

    def __init__(self, parents: Sequence[Any] = ()):
        super().__init__(list(parents))
        self._produced = 0

    def get_state(self) -> Dict[str, Any]:
        return {"produced": self._produced}

    def set_state(self, state: Dict[str, Any]) -> None:
        raise NotImplementedError("a tapejax.data stream is restored by its Iterator (rebuilt with the saved "
                                  "shuffle draws, then read to the saved position), not through grain's set_state")


class _Stream(grain.IterDataset):
    def __init__(self, parents: Sequence[Any] = ()):
        super().__init__(list(parents))


# -- from_generator -----------------------------------------------------------

class Generator(_Stream):
    """``from_generator``: ``make()`` returns a Python iterator; ``convert`` checks and converts
    what it yields into an element."""

    def __init__(self, make: Callable[[], Iterator[Any]], convert: Callable[[Any], Element]):
        super().__init__()
        self._make, self._convert = make, convert

    def __iter__(self):
        return _GeneratorIterator(self._make(), self._convert)


class _GeneratorIterator(_Iterator):
    def __init__(self, it: Iterator[Any], convert: Callable[[Any], Element]):
        super().__init__()
        self._it, self._convert = it, convert

    def __next__(self) -> Element:
        value = next(self._it)
        self._produced += 1
        return self._convert(value)


# -- map(num_parallel_calls=N) over a stream ---------------------------------------

class ParallelMap(_Stream):
    """``map`` with ``threads`` workers over a stream: up to ``threads`` elements are computed at
    once; they come out in input order (``ordered``) or as they finish (``deterministic=False``)."""

    def __init__(self, parent: Any, fn: Callable[[Element], Element], threads: int, ordered: bool):
        super().__init__([parent])
        self._fn, self._threads, self._ordered = fn, threads, ordered

    def __iter__(self):
        return _ParallelMapIterator(self._parent.__iter__(), self._fn, self._threads, self._ordered)


class _ParallelMapIterator(_Iterator):
    def __init__(self, parent: Any, fn: Callable[[Element], Element], threads: int, ordered: bool):
        super().__init__([parent])
        self._fn, self._threads, self._ordered = fn, threads, ordered
        self._pool = _futures.ThreadPoolExecutor(threads, thread_name_prefix="tapejax-data-map")
        self._pending: Deque[Any] = collections.deque()
        self._ended = False

    def _fill(self) -> None:
        while not self._ended and len(self._pending) < self._threads:
            try:
                el = next(self._parent)
            except StopIteration:
                self._ended = True
                break
            self._pending.append(self._pool.submit(self._fn, el))

    def __next__(self) -> Element:
        self._fill()
        if not self._pending:
            self._pool.shutdown(wait=False)
            raise StopIteration
        if self._ordered:
            fut = self._pending.popleft()
        else:
            done, _ = _futures.wait(list(self._pending), return_when=_futures.FIRST_COMPLETED)
            fut = next(f for f in self._pending if f in done)   # (the earliest of those finished)
            self._pending.remove(fut)
        el = fut.result()
        self._produced += 1
        return el

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


# -- unbatch ------------------------------------------------------------------

class Unbatch(_Stream):
    def __init__(self, parent: Any):
        super().__init__([parent])

    def __iter__(self):
        return _UnbatchIterator(self._parent.__iter__())


class _UnbatchIterator(_Iterator):
    def __init__(self, parent: Any):
        super().__init__([parent])
        self._batch: Optional[Element] = None
        self._rows = 0
        self._pos = 0

    def __next__(self) -> Element:
        while self._batch is None or self._pos >= self._rows:
            batch = next(self._parent)
            sizes = {c.shape[0] for c in batch if c is not None}
            if len(sizes) > 1:
                a, b = sorted(sizes)[:2]
                raise InvalidArgumentError(
                    "`unbatch()` is only supported for datasets of elements whose components have a matching "
                    f"leading dimension. Encountered both {a} and {b}.")
            self._batch, self._rows, self._pos = batch, (sizes.pop() if sizes else 0), 0
        i = self._pos
        self._pos += 1
        self._produced += 1
        return tuple(None if c is None else c[i] for c in self._batch)


# -- repeat, take, skip, zip, concatenate -----------------------------------------

class Repeat(_Stream):
    """``count`` epochs (None: forever) of ``factory()``; stops early if an epoch is empty."""

    def __init__(self, factory: Factory, count: Optional[int]):
        super().__init__()
        self._factory, self._count = factory, count

    def __iter__(self):
        return _RepeatIterator(self._factory, self._count)


class _RepeatIterator(_Iterator):
    def __init__(self, factory: Factory, count: Optional[int]):
        super().__init__()
        self._factory, self._count = factory, count
        self._epoch = 0
        self._it: Any = None
        self._in_epoch = 0

    def __next__(self) -> Element:
        while True:
            if self._it is None:
                if self._count is not None and self._epoch >= self._count:
                    raise StopIteration
                self._it = self._factory().__iter__()
                self._in_epoch = 0
            try:
                el = next(self._it)
            except StopIteration:
                self._it = None
                self._epoch += 1
                if self._in_epoch == 0:   # an empty epoch: every later one is empty too
                    raise
                continue
            self._in_epoch += 1
            self._produced += 1
            return el


class Take(_Stream):
    def __init__(self, parent: Any, count: int):
        super().__init__([parent])
        self._count = count

    def __iter__(self):
        return _TakeIterator(self._parent.__iter__(), self._count)


class _TakeIterator(_Iterator):
    def __init__(self, parent: Any, count: int):
        super().__init__([parent])
        self._count = count

    def __next__(self) -> Element:
        if 0 <= self._count <= self._produced:
            raise StopIteration
        el = next(self._parent)
        self._produced += 1
        return el


class Skip(_Stream):
    def __init__(self, parent: Any, count: int):
        super().__init__([parent])
        self._count = count

    def __iter__(self):
        return _SkipIterator(self._parent.__iter__(), self._count)


class _SkipIterator(_Iterator):
    def __init__(self, parent: Any, count: int):
        super().__init__([parent])
        self._count = count
        self._skipped = False

    def __next__(self) -> Element:
        if not self._skipped:
            self._skipped = True
            if self._count < 0:       # skip(-1): everything
                for _ in self._parent:
                    pass
            for _ in range(self._count):
                next(self._parent)
        el = next(self._parent)
        self._produced += 1
        return el


class Zip(_Stream):
    def __init__(self, parents: Sequence[Any]):
        super().__init__(list(parents))

    def __iter__(self):
        return _ZipIterator([p.__iter__() for p in self.parents])


class _ZipIterator(_Iterator):
    def __init__(self, parents: List[Any]):
        super().__init__(parents)

    def __next__(self) -> Element:
        out: Element = ()
        for p in self._parents:
            out += next(p)
        self._produced += 1
        return out


class Concatenate(_Stream):
    def __init__(self, first: Factory, second: Factory):
        super().__init__()
        self._first, self._second = first, second

    def __iter__(self):
        return _ConcatenateIterator(self._first, self._second)


class _ConcatenateIterator(_Iterator):
    def __init__(self, first: Factory, second: Factory):
        super().__init__()
        self._it = first().__iter__()
        self._second: Optional[Factory] = second

    def __next__(self) -> Element:
        while True:
            try:
                el = next(self._it)
            except StopIteration:
                second = self._second
                if second is None:
                    raise
                self._it, self._second = second().__iter__(), None
                continue
            self._produced += 1
            return el


# -- cache ----------------------------------------------------------------------

class CacheFill(_Stream):
    """``cache`` on its first pass over a stream: records the elements and hands them to the
    store when the stream ends (a pass left unfinished keeps nothing)."""

    def __init__(self, parent: Any, store: nodes.CacheStore):
        super().__init__([parent])
        self._store = store

    def __iter__(self):
        return _CacheFillIterator(self._parent.__iter__(), self._store)


class _CacheFillIterator(_Iterator):
    def __init__(self, parent: Any, store: nodes.CacheStore):
        super().__init__([parent])
        self._store = store
        self._elements: List[Element] = []

    def __next__(self) -> Element:
        try:
            el = next(self._parent)
        except StopIteration:
            if self._store.elements is None:
                self._store.elements = self._elements
            raise
        self._elements.append(el)
        self._produced += 1
        return el


def shuffle(parent: Any, window: int, seed: int) -> Any:
    """grain's window shuffle of a stream: ``window`` elements are read, then given in the order
    of grain's ``index_shuffle`` with ``seed + window_index``."""
    return _WindowShuffleIter(parent, window_size=window, seed=seed)


def prefetch(parent: Any, size: int) -> Any:
    """grain's ``ThreadPrefetchIterDataset``: a thread computes up to ``size`` elements ahead."""
    return _ThreadPrefetchIter(parent, prefetch_buffer_size=size)


_WindowShuffleIter = nodes._WindowShuffleIter
_ThreadPrefetchIter = nodes._ThreadPrefetchIter


# -- interleave(num_parallel_calls=N): inner iterators read ahead in threads ----------

_END = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class Producer:
    """Opens a Python iterator (``make()``) and reads it ahead in a daemon thread into a queue of
    ``capacity`` elements;
    ``permits`` (a semaphore shared by one interleave's producers) caps how many compute an
    element at once (``num_parallel_calls``).  ``get()`` gives the next element (StopIteration at
    the end, the iterator's own exception where it raised); ``close()`` stops the thread."""

    def __init__(self, make: Callable[[], Iterator[Element]], capacity: int, permits: "threading.Semaphore",
                 context: Callable[[], Any]):
        self._make, self._permits, self._context = make, permits, context
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=capacity)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tapejax-data-interleave", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            with self._context():
                with self._permits:
                    it = self._make()
                while not self._stop.is_set():
                    with self._permits:
                        try:
                            el = next(it)
                        except StopIteration:
                            self._put(_END)
                            return
                    if not self._put(el):
                        return
        except BaseException as e:  # noqa: BLE001 - handed to the reader, raised there
            self._put(_Failed(e))

    def ready(self) -> bool:
        """Whether ``get()`` would not wait."""
        return not self._queue.empty()

    def get(self) -> Element:
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)   # (asked again: still the end)
            raise StopIteration
        if isinstance(item, _Failed):
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()
