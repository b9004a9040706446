"""The Python-loop transformations over flat elements: ``scan``, ``take_while``, ``unique``,
``ignore_errors``, ``rebatch``, ``choose_from_datasets``, ``sample_from_datasets``, ``random``,
and ``Dataset.reduce``.  Each is a ``pystreams.PyStream`` (a generator giving TF's element order)
or, for ``random``, a random-access node; see ``pystreams`` for the shared pieces.
"""
import itertools
import logging
from typing import Any, Callable, Iterator, List, Optional, Sequence

import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError, OpError
from ..core.tensor import Tensor
from . import structure as S
from .build import Build
from .dataset import Dataset, helper, kind
from .functions import StructuredFunction
from .pystreams import INF, UNK, Element, PyStream, int64_name, read, scalar_function, to_user

_log = logging.getLogger("tapejax")


# -- scan, take_while, unique, ignore_errors, rebatch ------------------------------------

@kind
class Scan(PyStream):
    def __init__(self, input: Dataset, initial_state: Any, scan_func: Callable[..., Any]):
        comps = [S.to_component(c) for c in S.flatten(initial_state)]
        self._state_spec = S.pack(initial_state, [S.spec_of(c) for c in comps])
        self._init = tuple(comps)
        spec = (self._state_spec, input.element_spec)
        self._fn = StructuredFunction(scan_func, spec, "Dataset.scan()", input._x64)
        out = self._fn.output_spec
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError("The scan function must return a pair comprising the new state and the output value; "
                            f"got {out!r}.")
        new_state = out[0]
        if not S.same_structure(new_state, self._state_spec) or any(
                getattr(a, "dtype", None) != getattr(b, "dtype", None)
                for a, b in zip(S.flatten(new_state), S.flatten(self._state_spec))):
            raise TypeError(f"The element types for the new state must match the initial state. Expected "
                            f"{self._state_spec!r}; got {new_state!r}.")
        self._n_state = len(S.flatten(self._state_spec))
        super().__init__((input,), out[1], input._cardinality)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        state = self._init
        for el in read(self._inputs[0], ctx):
            out = self._fn(tuple(state) + tuple(el))
            state, value = out[:self._n_state], out[self._n_state:]
            yield value


@kind
class TakeWhile(PyStream):
    def __init__(self, input: Dataset, predicate: Callable[..., Any]):
        self._fn = scalar_function(predicate, input.element_spec, input._x64, "Dataset.take_while()",
                                    "predicate", "bool")
        super().__init__((input,), input.element_spec, UNK if input._cardinality != 0 else 0)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        for el in read(self._inputs[0], ctx):
            if not bool(np.asarray(self._fn(el)[0])):
                return
            yield el


@kind
class Unique(PyStream):
    def __init__(self, input: Dataset):
        spec = input.element_spec
        if not isinstance(spec, TensorSpec) or spec.dtype.name not in ("int32", "int64", "string"):
            what = spec.dtype if isinstance(spec, TensorSpec) else spec
            raise TypeError(f"`tf.data.Dataset.unique` does not support type {what} -- only `tf.int32`, `tf.int64`, "
                            "and `tf.string` are supported.")
        if spec.shape is not None and len(spec.shape) != 0:
            raise TypeError("`tf.data.Dataset.unique` only supports elements that are scalars; got elements of "
                            f"shape {spec.shape}.")
        super().__init__((input,), spec, UNK if input._cardinality != INF else INF)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        seen: set = set()
        for el in read(self._inputs[0], ctx):
            if isinstance(el[0], bytes):   # a string (every byte counts: not via NumPy ``S``)
                key: Any = el[0]
            else:
                v = np.asarray(el[0])
                if v.ndim != 0:
                    raise InvalidArgumentError(None, None, f"unique: expected a scalar element; got shape {v.shape}.")
                key = v.item()
            if key not in seen:
                seen.add(key)
                yield el


@kind
class IgnoreErrors(PyStream):
    def __init__(self, input: Dataset, log_warning: bool):
        self._log = log_warning
        super().__init__((input,), input.element_spec, UNK if input._cardinality != INF else INF)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        from . import nodes
        p = self._inputs[0]._build(ctx)
        if isinstance(p, nodes.Node):   # random access: element by element, a failed one skipped
            for i in range(len(p)):
                try:
                    el = p.get(i)
                except _ERRORS as e:
                    self._warn(e)
                    continue
                yield el
            return
        it = nodes.to_iter(p).__iter__()
        while True:
            before = _position(it)
            try:
                el = next(it)
            except StopIteration:
                return
            except _ERRORS as e:   # an element that failed: dropped
                self._warn(e)
                if before is not None and _position(it) == before:
                    return   # a stream that cannot move past its error (README: Not done)
                continue
            yield el

    def _warn(self, e: BaseException) -> None:
        if self._log:
            _log.warning("Error raised with error message %s", e)


_ERRORS = (OpError, ValueError, ArithmeticError)


def _position(it: Any) -> Any:
    try:
        return it.get_state()
    except Exception:  # noqa: BLE001 - an iterator without a state: no progress check
        return None


@kind
class Rebatch(PyStream):
    """``rebatch``: the input's batches cut again into batches of ``sizes`` (cycled)."""

    def __init__(self, input: Dataset, sizes: List[int], drop: bool):
        for s in S.flatten(input.element_spec):
            if isinstance(s, TensorSpec) and (s.shape is None or len(s.shape) == 0):
                raise ValueError("`rebatch` needs a batched input (every component of rank >= 1); got "
                                 f"{input.element_spec!r}.")
        self._sizes, self._drop = sizes, drop
        known = sizes[0] if drop and len(set(sizes)) == 1 else None
        spec = S.map_structure(lambda s: s if not isinstance(s, TensorSpec) else
                               TensorSpec((known,) + tuple(s.shape or ())[1:], s.dtype), input.element_spec)
        super().__init__((input,), spec, UNK if input._cardinality != INF else INF)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        rows: List[Element] = []
        k = 0
        for batch in read(self._inputs[0], ctx):
            n = next((np.shape(c)[0] for c in batch if c is not None), 0)
            rows.extend(tuple(None if c is None else c[i] for c in batch) for i in range(n))
            while len(rows) >= self._sizes[k % len(self._sizes)]:
                size = self._sizes[k % len(self._sizes)]
                yield _stack(rows[:size])
                rows, k = rows[size:], k + 1
        while rows:
            size = self._sizes[k % len(self._sizes)]
            if len(rows) < size and self._drop:
                return
            yield _stack(rows[:size])
            rows, k = rows[size:], k + 1


def _stack(rows: List[Element]) -> Element:
    from . import nodes
    return nodes.stack(rows)


# -- choose_from_datasets, sample_from_datasets ---------------------------------------------

def common_spec(datasets: Sequence[Dataset], what: str) -> Any:
    spec = datasets[0].element_spec
    for d in datasets[1:]:
        other = d.element_spec
        specs = [S.combine(a, b) for a, b in zip(S.flatten(spec), S.flatten(other))]
        if not S.same_structure(spec, other) or any(s is None for s in specs):
            raise TypeError(f"Invalid `datasets`. `datasets` must have compatible element specs in {what}: "
                            f"{datasets[0].element_spec!r} vs. {other!r}.")
        spec = S.pack(spec, specs)
    return spec


@kind
class Choose(PyStream):
    def __init__(self, datasets: Sequence[Dataset], choices: Dataset, stop_on_empty: bool):
        self._stop = stop_on_empty
        self._n = len(datasets)
        super().__init__(tuple(datasets) + (choices,), common_spec(datasets, "choose_from_datasets"), UNK)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        its: List[Optional[Iterator[Element]]] = [read(d, ctx) for d in self._inputs[:self._n]]
        for choice in read(self._inputs[-1], ctx):
            i = int(np.asarray(choice[0]))
            if not 0 <= i < self._n:
                raise InvalidArgumentError(None, None, f"choose_from_datasets: `choice_dataset` gave {i}; it must be "
                                           f"in [0, {self._n}) (one of the {self._n} datasets).")
            it = its[i]
            if it is None:
                continue
            try:
                yield next(it)
            except StopIteration:
                its[i] = None
                if self._stop:
                    return


@kind
class Sample(PyStream):
    """``sample_from_datasets``: each element from a dataset drawn with ``weights`` (NumPy's
    PCG64 seeded with the seed words and the iteration number, not TF's generator); an exhausted
    dataset ends the stream (``stop_on_empty_dataset``) or leaves the draw."""

    def __init__(self, datasets: Sequence[Dataset], weights: Optional[List[float]], seed: List[int],
                 stop_on_empty: bool, rerandomize: bool):
        self._weights = np.asarray(weights if weights is not None else [1.0] * len(datasets), np.float64)
        self._seed, self._stop, self._rerandomize = seed, stop_on_empty, rerandomize
        self._iterations = itertools.count()
        cards = [d._cardinality for d in datasets]
        card = INF if all(c == INF for c in cards) else UNK
        super().__init__(tuple(datasets), common_spec(datasets, "sample_from_datasets"), card)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        k, _ = ctx.draw(self, lambda: next(self._iterations) if self._rerandomize else 0)
        rng = np.random.default_rng(self._seed + [k])
        its: List[Optional[Iterator[Element]]] = [read(d, ctx) for d in self._inputs]
        w = self._weights.copy()
        while w.sum() > 0:
            i = int(rng.choice(len(w), p=w / w.sum()))
            it = its[i]
            assert it is not None
            try:
                yield next(it)
            except StopIteration:
                if self._stop:
                    return
                its[i], w[i] = None, 0.0


# -- counter, random ----------------------------------------------------------

@kind
class RandomInts(Dataset):
    """``Dataset.random``: non-negative int64 values below 2**32 (TF's range; 2**31 without JAX's
    64-bit mode), block ``b`` of 1024 from NumPy's PCG64 seeded with the seed words, the
    iteration number and ``b`` (TF's values differ: same range and dtype, not the same bits)."""

    def __init__(self, seed: List[int], rerandomize: bool):
        self._seed, self._rerandomize = seed, rerandomize
        self._iterations = itertools.count()
        store = _dtypes.storage_dtype(np.dtype(np.int64), "random")
        self._dtype = np.dtype(store)
        super().__init__((), TensorSpec((), _dtypes.as_dtype(store)), INF)

    def _build(self, ctx: Build) -> Any:
        from . import nodes
        k, _ = ctx.draw(self, lambda: next(self._iterations) if self._rerandomize else 0)
        return nodes.RandomInts(self._seed + [k], self._dtype)


@helper
def check_choices(datasets: Any, choices: Any) -> List[Dataset]:
    """``choose_from_datasets``' arguments (TF's errors)."""
    ds = list(datasets) if isinstance(datasets, (list, tuple)) else None
    if not ds or not all(isinstance(d, Dataset) for d in ds):
        raise TypeError(f"Invalid `datasets`. `datasets` should be a non-empty list of `tf.data.Dataset` "
                        f"objects; got {datasets!r}.")
    spec = getattr(choices, "element_spec", None)
    if not isinstance(choices, Dataset) or not (isinstance(spec, TensorSpec) and spec.shape == ()
                                                 and spec.dtype.name in ("int64", int64_name(choices._x64))):
        raise TypeError("Invalid `choice_dataset`. Elements of `choice_dataset` must be scalar `tf.int64` "
                        f"tensors; got {spec!r}.")
    return ds


@helper
def check_weights(datasets: Any, weights: Any) -> "tuple[List[Dataset], Optional[List[float]]]":
    """``sample_from_datasets``' arguments (TF's errors)."""
    ds = list(datasets) if isinstance(datasets, (list, tuple)) else None
    if not ds or not all(isinstance(d, Dataset) for d in ds):
        raise ValueError(f"Invalid `datasets`. `datasets` should be a non-empty list of `tf.data.Dataset` "
                         f"objects; got {datasets!r}.")
    if weights is None:
        return ds, None
    w = np.asarray(weights.numpy() if isinstance(weights, Tensor) else weights, np.float64).reshape(-1)
    if len(w) != len(ds):
        raise ValueError(f"Invalid `weights`. The shape of `weights` should be compatible with `[len(datasets)]` "
                         f"but is {list(w.shape)}.")
    if (w < 0).any() or w.sum() <= 0:
        raise InvalidArgumentError(None, None, "sample_from_datasets: `weights` must be non-negative with a "
                                   f"positive sum; got {w.tolist()}.")
    return ds, w.tolist()


@helper
def reduce(dataset: Dataset, initial_state: Any, reduce_func: Callable[..., Any]) -> Any:
    """``Dataset.reduce``: ``reduce_func(state, element)`` over the elements (compiled per shape)."""
    comps = [S.to_component(c) for c in S.flatten(initial_state)]
    state_spec = S.pack(initial_state, [S.spec_of(c) for c in comps])
    fn = StructuredFunction(reduce_func, (state_spec, dataset.element_spec), "Dataset.reduce()", dataset._x64)
    out = fn.output_spec
    if type(out) is list:
        out = tuple(out)
    if not S.same_structure(out, state_spec) or any(
            getattr(a, "dtype", None) != getattr(b, "dtype", None) for a, b in zip(S.flatten(out), S.flatten(state_spec))):
        raise TypeError(f"The element types for the new state must match the initial state. Expected "
                        f"{state_spec!r}; got {out!r}.")
    state = tuple(comps)
    from .iterator import _IN_TRACE, in_trace
    if in_trace():
        raise ValueError(_IN_TRACE)
    for el in read(dataset, Build(dataset.options())):
        state = fn(tuple(state) + tuple(el))
    return to_user(state_spec, list(state))


