"""Transformations that are a Python loop over their inputs' elements (``PyStream``).

``flat_map``, ``interleave``, ``window``, ``group_by_window`` (and ``bucket_by_sequence_length``
on it), ``scan``, ``take_while``, ``unique``, ``ignore_errors``, ``rebatch``,
``choose_from_datasets`` and ``sample_from_datasets`` have no grain transformation that gives
TF's element order, so each is a generator over its inputs' streams (flat component tuples)
giving its own; ``build`` wraps it as a grain stream.  The loops are TF's kernels' rules written
in Python (``interleave``'s cycle of open iterators, ``group_by_window``'s per-key buffers ...).

A function that returns a Dataset (``flat_map``, ``interleave``, ``group_by_window``'s
``reduce_func``) runs eagerly per element on Tensors; at construction it runs once on zeros of
the input spec to learn the returned Dataset's ``element_spec`` (TF traces it there).  Functions
returning tensors (``scan``, ``take_while``'s predicate, ``key_func``) are ``StructuredFunction``
s: compiled per input shape, as ``map``'s.
"""
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InternalError, InvalidArgumentError
from ..core.tensor import Tensor
from . import args as A, structure as S
from .build import Build
from .dataset import Dataset, helper, kind
from .functions import StructuredFunction, host_context
from .structure import DatasetSpec

INF, UNK = A.INFINITE, A.UNKNOWN
Element = tuple



class PyStream(Dataset):
    """A transformation whose elements a Python generator gives (``_elements``)."""

    def _elements(self, ctx: Build) -> Iterator[Element]:
        raise NotImplementedError(type(self).__name__)   # every subclass defines it

    def _build(self, ctx: Build) -> Any:
        from . import streams
        return streams.Generator(lambda: self._elements(ctx), _same)


def _same(el: Element) -> Element:
    return el


def read(dataset: Dataset, ctx: Build) -> Iterator[Element]:
    """A stream of ``dataset``'s flat elements."""
    return dataset._build_stream(ctx).__iter__()


def read_new(dataset: Dataset) -> Iterator[Element]:
    """A stream of a dataset a user function made (its own build, with its own options)."""
    return read(dataset, Build(dataset.options()))


def to_user(spec: Any, comps: Sequence[Any]) -> Any:
    """A flat element as the user sees it: Tensors (Datasets and string components' host bytes as
    they are) in ``spec``'s structure."""
    return S.pack(spec, [c if c is None or isinstance(c, Dataset) or S.is_bytes(c)
                         else Tensor(jnp.asarray(c)) for c in comps])


def call(fn: Callable[..., Any], element: Any) -> Any:
    """``fn`` on an element, a tuple passed as separate arguments (TF's rule)."""
    return fn(*element) if type(element) is tuple else fn(element)


def _zeros(spec: Any, size: int) -> List[Any]:
    """Zeros of every component of ``spec`` (``size`` for unknown dimensions; a Dataset
    component: a dataset of one such element)."""
    out: List[Any] = []
    for s in S.flatten(spec):
        if isinstance(s, DatasetSpec):
            out.append(Elements([tuple(_zeros(s.element_spec, size))], s.element_spec, _dtypes.x64_enabled()))
        elif isinstance(s, TensorSpec):
            out.append(np.zeros(tuple(size if d is None else d for d in (s.shape or ())), s.dtype._np))
        else:
            out.append(None)
    return out


class DatasetFunction:
    """A user function from an element to a Dataset (``flat_map``, ``interleave``): run eagerly;
    ``element_spec`` from runs on zeros of the input spec (two sizes when a dimension is
    unknown: dimensions that differ become None)."""

    def __init__(self, fn: Callable[..., Any], input_spec: Any, x64: bool, name: str, arg: str = "map_func",
                 input: Optional[Dataset] = None):
        A.callable_arg(fn)
        self._fn, self._spec, self._x64, self._name, self._arg = fn, input_spec, x64, name, arg
        sample = _first_element(input) if input is not None and _has_strings(input_spec) else None
        out = self(*sample).element_spec if sample is not None else self.probe(1)
        unknown = any(isinstance(s, TensorSpec) and (s.shape is None or None in s.shape) for s in S.flatten(input_spec))
        if unknown and sample is None:
            other = self.probe(2)
            out = S.pack(out, [S.combine(a, b) or a for a, b in zip(S.flatten(out), S.flatten(other))])
        self.element_spec = out

    def probe(self, size: int) -> Any:
        return self(*_zeros(self._spec, size)).element_spec

    def __call__(self, *comps: Any) -> Dataset:
        with host_context(self._x64):
            out = call(self._fn, to_user(self._spec, comps))
        if not isinstance(out, Dataset):
            raise TypeError(f"The `{self._arg}` argument of {self._name} must return a `Dataset` object; got "
                            f"{type(out).__name__}: {out!r}.")
        return out


def _has_strings(spec: Any) -> bool:
    return any(getattr(getattr(s, "dtype", None), "name", None) == "string" for s in S.flatten(spec))


def _first_element(dataset: Dataset) -> Optional[Element]:
    """The input's first element (None when it has none): a function over string components (file
    names) is probed on it, as zeros (an empty name) are no file to open."""
    it = read_new(dataset)
    try:
        return next(it)
    except StopIteration:
        return None
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _check_spec(inner: Any, spec: Any, name: str) -> None:
    ok = S.same_structure(inner, spec) and all(
        S.combine(a, b) is not None and getattr(a, "dtype", None) == getattr(b, "dtype", None)
        for a, b in zip(S.flatten(inner), S.flatten(spec)))
    if not ok:
        raise InvalidArgumentError(None, None, f"{name}: a Dataset returned for one element has element_spec "
                                   f"{inner!r}, which does not match {spec!r}.")


# -- flat_map, interleave ------------------------------------------------------

@kind
class FlatMap(PyStream):
    def __init__(self, input: Dataset, fn: Callable[..., Any]):
        self._fn = DatasetFunction(fn, input.element_spec, input._x64, "Dataset.flat_map()", input=input)
        super().__init__((input,), self._fn.element_spec, UNK)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        for el in read(self._inputs[0], ctx):
            inner = self._fn(*el)
            _check_spec(inner.element_spec, self.element_spec, "Dataset.flat_map()")
            yield from read_new(inner)


@kind
class Interleave(PyStream):
    """TF's interleave: ``cycle_length`` open iterators visited in turn, ``block_length``
    elements from each; an exhausted one is closed and its slot refilled from the input when
    the cycle comes back to it.  With ``num_parallel_calls`` each open iterator is read ahead in
    its own thread (``streams.Producer``; at most ``num_parallel_calls`` computing at once), so the
    cycle's inner datasets are produced at the same time; the order stays TF's deterministic one,
    unless ``deterministic=False`` (or ``Options.deterministic = False``), where a slot whose next
    element is not ready yet is passed over for one that is."""

    def __init__(self, input: Dataset, fn: Callable[..., Any], cycle_length: int, block_length: int,
                 num_parallel_calls: Optional[int] = None, deterministic: Optional[bool] = None):
        self._fn = DatasetFunction(fn, input.element_spec, input._x64, "Dataset.interleave()", input=input)
        self._cycle, self._block = cycle_length, block_length
        self._npc, self._deterministic = num_parallel_calls, deterministic
        super().__init__((input,), self._fn.element_spec, UNK)

    def _open(self, el: Element, threads: int, permits: Any) -> Any:
        """The slot's iterator over ``map_func(el)``; with threads, a ``Producer`` that calls
        ``map_func`` and reads the dataset in its own thread."""
        def make() -> Iterator[Element]:
            inner = self._fn(*el)
            _check_spec(inner.element_spec, self.element_spec, "Dataset.interleave()")
            return read_new(inner)
        if threads <= 1:
            return make()
        from . import streams
        x64 = self._x64
        return streams.Producer(make, max(2, self._block), permits, lambda: host_context(x64))

    def _elements(self, ctx: Build) -> Iterator[Element]:
        import os
        import threading
        cycle = self._cycle if self._cycle != A.AUTOTUNE else (os.cpu_count() or 1)
        threads = ctx.threads(self._npc)
        ordered = (self._deterministic if self._deterministic is not None else ctx.options.deterministic) is not False
        permits = threading.Semaphore(max(threads, 1))
        source = read(self._inputs[0], ctx)
        slots: List[Any] = [None] * cycle
        index = block = n_open = 0
        end_of_input = False
        try:
            while not end_of_input or n_open > 0:
                it = slots[index]
                if it is not None:
                    if threads > 1 and not ordered and not it.ready():
                        index = self._ready_slot(slots, index)
                        it = slots[index]
                    try:
                        el = it.get() if threads > 1 else next(it)
                    except StopIteration:
                        slots[index] = None
                        n_open -= 1
                        index, block = (index + 1) % cycle, 0
                        continue
                    block += 1
                    if block == self._block:
                        index, block = (index + 1) % cycle, 0
                    yield el
                elif not end_of_input:
                    try:
                        el = next(source)
                    except StopIteration:
                        end_of_input = True
                        continue
                    slots[index] = self._open(el, threads, permits)
                    n_open += 1
                else:
                    index, block = (index + 1) % cycle, 0
        finally:
            for it in slots:
                if it is not None and threads > 1:
                    it.close()

    @staticmethod
    def _ready_slot(slots: List[Any], index: int) -> int:
        """``deterministic=False``: the first open slot from ``index`` on with an element ready
        (``index`` itself when none is)."""
        n = len(slots)
        for k in range(n):
            j = (index + k) % n
            if slots[j] is not None and slots[j].ready():
                return j
        return index


# -- datasets of datasets: window, group_by_window -------------------------------------

@kind
class Elements(Dataset):
    """A dataset of elements already computed (a window, a group): random access over them."""

    def __init__(self, elements: List[Element], spec: Any, x64: bool):
        self._list = elements
        super().__init__((), spec, len(elements))
        self._x64 = x64

    def _build(self, ctx: Build) -> Any:
        from . import nodes
        return nodes.ListSource(self._list)


@kind
class Window(PyStream):
    def __init__(self, input: Dataset, size: int, shift: int, stride: int, drop: bool):
        self._size, self._shift, self._stride, self._drop = size, shift, stride, drop
        n = input._cardinality
        if n in (INF, UNK):
            card = n
        elif drop:
            rest = n - ((size - 1) * stride + 1)
            card = 0 if rest < 0 else rest // shift + 1
        else:
            card = n // shift + (1 if n % shift else 0)
        super().__init__((input,), S.map_structure(DatasetSpec, input.element_spec), card)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        spec = self._inputs[0].element_spec
        specs = S.flatten(spec)
        source = read(self._inputs[0], ctx)
        need = (self._size - 1) * self._stride + 1
        buf: List[Element] = []
        ended = False
        while True:
            while not ended and len(buf) < need:
                try:
                    buf.append(next(source))
                except StopIteration:
                    ended = True
            rows = buf[0:need:self._stride]
            if not rows or (self._drop and len(rows) < self._size):
                return
            yield tuple(Elements([(r[k],) for r in rows], s, self._x64) for k, s in enumerate(specs))
            drop = self._shift
            while drop > len(buf) and not ended:   # a shift past what was read: skip input elements
                try:
                    buf.append(next(source))
                except StopIteration:
                    ended = True
            buf = buf[drop:]
            if ended and not buf:
                return


def scalar_function(fn: Callable[..., Any], spec: Any, x64: bool, name: str, arg: str, what: str) -> StructuredFunction:
    f = StructuredFunction(fn, spec, name, x64)
    out = f.output_spec
    if not (isinstance(out, TensorSpec) and out.shape == () and out.dtype.name == what):
        raise ValueError(f"Invalid `{arg}`. `{arg}` must return a `tf.{what}` scalar tensor, but its return type "
                         f"is {out!r}.")
    return f


def int64_name(x64: bool) -> str:
    return "int64" if x64 else "int32"


@kind
class GroupByWindow(PyStream):
    """Elements grouped by ``key_func``; a group's window is handed to ``reduce_func`` when it
    holds ``window_size`` elements, and the groups left at the end in increasing key order (TF's)."""

    def __init__(self, input: Dataset, key_func: Callable[..., Any], reduce_func: Callable[..., Any],
                 window_size: Optional[int], window_size_func: Optional[Callable[..., Any]]):
        x64, spec = input._x64, input.element_spec
        key_spec = TensorSpec((), _dtypes.as_dtype(int64_name(x64)))
        self._key = scalar_function(key_func, spec, x64, "group_by_window()", "key_func", int64_name(x64))
        self._size_fn = None if window_size_func is None else scalar_function(
            window_size_func, key_spec, x64, "group_by_window()", "window_size_func", int64_name(x64))
        self._size = window_size
        self._reduce = DatasetFunction(reduce_func, (key_spec, DatasetSpec(spec)), x64, "group_by_window()",
                                       "reduce_func")
        super().__init__((input,), self._reduce.element_spec, INF if input._cardinality == INF else UNK)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        spec = self._inputs[0].element_spec
        groups: Dict[int, List[Element]] = {}
        sizes: Dict[int, int] = {}
        dtype = np.dtype(int64_name(self._x64))
        for el in read(self._inputs[0], ctx):
            key = int(np.asarray(self._key(el)[0]))
            if key not in sizes:
                sizes[key] = self._window_size(key, dtype)
            group = groups.setdefault(key, [])
            group.append(el)
            if len(group) == sizes[key]:
                del groups[key]
                yield from self._flush(key, group, spec, dtype)
        for key in sorted(groups):   # the groups left at the end: by key (TF's ordered map)
            yield from self._flush(key, groups[key], spec, dtype)

    def _window_size(self, key: int, dtype: np.dtype) -> int:
        if self._size_fn is None:
            return int(self._size or 0)
        size = int(np.asarray(self._size_fn((dtype.type(key),))[0]))
        if size <= 0:
            raise InvalidArgumentError(None, None, f"group_by_window: `window_size_func` returned {size} for key "
                                       f"{key}; the window size must be greater than zero.")
        return size

    def _flush(self, key: int, group: List[Element], spec: Any, dtype: np.dtype) -> Iterator[Element]:
        window = Elements(group, spec, self._x64)
        out = self._reduce(dtype.type(key), window)
        _check_spec(out.element_spec, self.element_spec, "group_by_window()")
        yield from read_new(out)


@helper
def bucket_by_sequence_length(dataset: Dataset, element_length_func: Callable[..., Any], bucket_boundaries: Any,
                              bucket_batch_sizes: Any, padded_shapes: Any, padding_values: Any,
                              pad_to_bucket_boundary: bool, no_padding: bool, drop_remainder: bool) -> Dataset:
    """TF's recipe on ``group_by_window``: the key is the bucket of the element's length, the
    window size its bucket's batch size, each window padded-batched."""
    A.callable_arg(element_length_func, "element_length_func")
    bounds = [A.integer(b, "bucket_boundaries") for b in bucket_boundaries]
    sizes = [A.integer(b, "bucket_batch_sizes") for b in bucket_batch_sizes]   # (0: group_by_window's error)
    if len(sizes) != len(bounds) + 1:
        raise ValueError("len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1 (got "
                         f"{len(sizes)} and {len(bounds)}).")
    x64 = dataset._x64
    key_dtype = np.dtype(int64_name(x64))

    # TF's bucket: the first ``i`` with ``lows[i] <= length < highs[i]`` (boundaries need not be sorted)
    lows = np.asarray([np.iinfo(np.int32).min] + bounds, np.int32)
    highs = np.asarray(bounds + [np.iinfo(np.int32).max], np.int32)

    def key(*element: Any) -> Tensor:
        length = element_length_func(*element)
        v = jnp.asarray(length.value if isinstance(length, Tensor) else
                        np.int32(length) if isinstance(length, int) else length)
        if v.dtype != np.int32:   # (TF compares it with int32 boundaries)
            raise TypeError(f"Input 'y' of 'LessEqual' Op has type {_dtypes.as_dtype(v.dtype).name} that does not "
                            "match type int32 of argument 'x'.")
        return Tensor(jnp.argmax((lows <= v) & (v < highs)).astype(key_dtype))

    def window_size(bucket: Any) -> Tensor:
        return Tensor(jnp.asarray(sizes, key_dtype)[bucket.value])

    def batch(bucket: Any, window: Dataset) -> Dataset:
        b = int(np.asarray(bucket.numpy() if isinstance(bucket, Tensor) else bucket))
        if no_padding:
            return window.batch(sizes[b], drop_remainder=drop_remainder)
        filler = None
        if pad_to_bucket_boundary:
            if b >= len(bounds):
                # TF: the assertion fails inside the window's reduce function, and the iterator reports
                # its INVALID_ARGUMENT as an InternalError
                raise InternalError(None, None, "Got error code INVALID_ARGUMENT and message: {assertion failed: "
                                    "[When pad_to_bucket_boundary=True, elements must have length < "
                                    f"max(bucket_boundaries).] (max(bucket_boundaries) is {max(bounds)})}}")
            filler = bounds[b] - 1
        shapes = padded_shapes if padded_shapes is not None else S.map_structure(
            lambda s: None if s.shape is None else list(s.shape), window.element_spec)
        shapes = _fill(shapes, window.element_spec, filler)
        return window.padded_batch(sizes[b], shapes, padding_values, drop_remainder=drop_remainder)

    return dataset.group_by_window(key, batch, window_size_func=window_size)


def _fill(shapes: Any, spec: Any, filler: Optional[int]) -> Any:
    """``padded_shapes`` with unknown dimensions replaced by ``filler`` (None: kept unknown)."""
    if isinstance(spec, dict):
        return {k: _fill(shapes[k], spec[k], filler) for k in spec}
    if isinstance(spec, tuple):
        return tuple(_fill(a, b, filler) for a, b in zip(shapes, spec))
    if shapes is None:
        return None
    dims = shapes.numpy().tolist() if isinstance(shapes, Tensor) else list(shapes)
    return [filler if d is None or (isinstance(d, int) and d < 0) else d for d in dims]
