"""The Dataset kinds behind ``tf.data.experimental``'s own transformations: ``assert_cardinality``,
``group_by_reducer`` (with ``Reducer``), ``copy_to_device`` / ``prefetch_to_device``, and the
element lookup of ``at``.  ``experimental`` makes them; see there for the namespace.

* ``AssertCardinality`` gives its input's elements and checks their count as they stream: one
  more than the asserted count, or the end before it, raises TF's FailedPreconditionError with
  TF's message at that element.  Where the input's cardinality is known and equal, it is the
  input itself (random access kept).
* ``GroupByReducer`` keeps one state per key (``init_func(key)``, ``reduce_func(state, element)``)
  and gives ``finalize_func(state)`` per key at the end, in increasing key order (TF's ordered
  map).  The state's spec is found as TF finds it: ``reduce_func`` traced on the initial state's
  spec, dimensions that change relaxed to None, until it holds.
* ``CopyToDevice`` puts every component on a JAX device named the TF way (``"/gpu:0"``,
  ``"/job:localhost/replica:0/task:0/device:CPU:0"``); a device that is not here is TF's soft
  placement: JAX's default device.
"""
import re
from typing import Any, Callable, Dict, Iterator, List, Tuple

import jax
import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.devices import device_index, device_type
from ..core.errors import FailedPreconditionError, OutOfRangeError, UnimplementedError
from . import args as A, structure as S
from .build import Build
from .dataset import Dataset, kind
from .functions import StructuredFunction
from .pystreams import INF, UNK, Element, PyStream, int64_name, read, scalar_function, to_user


def _elements(n: int) -> str:
    return f"{n} element" if n == 1 else f"{n} elements"


@kind
class AssertCardinality(PyStream):
    def __init__(self, input: Dataset, cardinality: int):
        self._expected = cardinality
        super().__init__((input,), input.element_spec, cardinality)

    def _build(self, ctx: Build) -> Any:
        card = self._inputs[0]._cardinality
        if card == self._expected and card != UNK:
            return self._inputs[0]._build(ctx)
        return super()._build(ctx)

    def _expected_text(self) -> str:
        return "an infinite number of elements" if self._expected == INF else _elements(self._expected)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        n = 0
        for el in read(self._inputs[0], ctx):
            n += 1
            if self._expected != INF and n > self._expected:
                raise FailedPreconditionError(None, None, f"Input dataset was expected to contain "
                                              f"{self._expected_text()} but contained at least {_elements(n)}.")
            yield el
        if n != self._expected:
            raise FailedPreconditionError(None, None, f"Input dataset was expected to contain {self._expected_text()} "
                                          f"but contained only {_elements(n)}.")


class Reducer:
    """``tf.data.experimental.Reducer``: ``init_func(key) -> state``, ``reduce_func(state, element)
    -> state``, ``finalize_func(state) -> output`` (a tuple state is passed as separate arguments)."""

    def __init__(self, init_func: Callable[..., Any], reduce_func: Callable[..., Any],
                 finalize_func: Callable[..., Any]):
        # (checked where they are used, as TF: ``group_by_reducer``)
        self._init_func, self._reduce_func, self._finalize_func = init_func, reduce_func, finalize_func

    @property
    def init_func(self) -> Callable[..., Any]:
        return self._init_func

    @property
    def reduce_func(self) -> Callable[..., Any]:
        return self._reduce_func

    @property
    def finalize_func(self) -> Callable[..., Any]:
        return self._finalize_func


def _dtypes_of(spec: Any) -> List[Any]:
    return [getattr(s, "dtype", None) for s in S.flatten(spec)]


@kind
class GroupByReducer(PyStream):
    def __init__(self, input: Dataset, key_func: Callable[..., Any], reducer: Reducer):
        if not isinstance(reducer, Reducer):
            raise TypeError("Invalid `reducer`. `reducer` must be a tf.data.experimental.Reducer; got "
                            f"{reducer!r} of type {type(reducer).__name__}.")
        for fn in (reducer.init_func, reducer.reduce_func, reducer.finalize_func):
            A.callable_arg(fn)
        x64, spec = input._x64, input.element_spec
        int64 = int64_name(x64)
        self._key = scalar_function(key_func, spec, x64, "group_by_reducer()", "key_func", int64)
        key_spec = TensorSpec((), _dtypes.as_dtype(int64))
        self._init = StructuredFunction(reducer.init_func, key_spec, "group_by_reducer() init_func", x64)
        state = self._init.output_spec
        for _ in range(8):   # relax the state's shape until reduce_func keeps it (TF's fixpoint)
            fn = StructuredFunction(reducer.reduce_func, (state, spec), "group_by_reducer() reduce_func", x64)
            new = fn.output_spec
            if not S.same_structure(new, state):
                raise TypeError("Invalid `reducer`. The structure of the new state "
                                f"{new!r} does not match the structure of the old state {state!r}.")
            if _dtypes_of(new) != _dtypes_of(state):
                raise TypeError("Invalid `reducer`. The element types for the new state "
                                f"{S.describe(new)} do not match the element types of the old state "
                                f"{S.describe(state)}.")
            relaxed = S.pack(state, [S.combine(a, b) for a, b in zip(S.flatten(state), S.flatten(new))])
            if relaxed == state:
                break
            state = relaxed
        self._reduce = fn
        self._n_state = len(S.flatten(state))
        self._finalize = StructuredFunction(reducer.finalize_func, state, "group_by_reducer() finalize_func", x64)
        self._int64 = np.dtype(int64)
        super().__init__((input,), self._finalize.output_spec, UNK)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        states: Dict[int, Tuple[Any, ...]] = {}
        for el in read(self._inputs[0], ctx):
            key = int(np.asarray(self._key(el)[0]))
            state = states.get(key)
            if state is None:
                state = self._init((self._int64.type(key),))
            states[key] = self._reduce(tuple(state) + tuple(el))[:self._n_state]
        for key in sorted(states):
            yield self._finalize(tuple(states[key]))


# -- devices ----------------------------------------------------------------------------

_DEVICE = re.compile(r"^(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?([A-Za-z]+)(?::(\d+|\*))?$")
_TYPES = ("CPU", "GPU", "TPU")


def resolve_device(name: Any, arg: str) -> Any:
    """The JAX device a TF device name gives (``"/gpu:0"``, ``"/cpu:0"``, a full name); one that is
    not here: JAX's default device (TF's soft placement).  ValueError for a name TF cannot parse."""
    if isinstance(name, bytes):
        name = name.decode()
    if not isinstance(name, str):
        raise TypeError(f"Argument `{arg}` must be a device name string (e.g. '/gpu:0'); got {name!r} of type "
                        f"{type(name).__name__}.")
    m = _DEVICE.match(name.strip())
    if m is None or m.group(1).upper() not in _TYPES:
        raise ValueError(f"Unknown attribute '{(m.group(1) if m else name).lower()}' is encountered while parsing "
                         f"the device spec: '{name}'.")
    kind_, index = m.group(1).upper(), int(m.group(2)) if m.group(2) not in (None, "*") else 0
    for backend in ("cpu", None):
        try:
            devices = jax.local_devices(backend=backend)
        except RuntimeError:
            continue
        for d in devices:
            if device_type(d) == kind_ and device_index(d) == index:
                return d
    return jax.local_devices()[0]


@kind
class CopyToDevice(Dataset):
    def __init__(self, input: Dataset, device: Any):
        self._device = device
        super().__init__((input,), input.element_spec, UNK)

    @property
    def target_device(self) -> Any:
        """The device the Iterator leaves the elements on (``iterator.output_device``)."""
        return self._device

    def _build(self, ctx: Build) -> Any:
        device = self._device

        def put(el: Element) -> Element:
            return tuple(jax.device_put(c, device) if S.is_array(c) and not S.is_bytes(c) else c
                         for c in el)
        return self._inputs[0]._build_stream(ctx).map(put)


def element_at(dataset: Dataset, index: Any) -> Any:
    """``tf.data.experimental.at``: element ``index`` read by random access (TF's errors: out of range,
    or a dataset without random access)."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"Argument `dataset` must be a tf.data.Dataset; got {type(dataset).__name__}.")
    i = A.integer(index, "index")
    from . import nodes
    p = dataset._build(Build(dataset.options()))
    if not isinstance(p, nodes.Node):
        raise UnimplementedError(None, None, "Random access is not implemented for dataset "
                                 f"{type(_stream_step(dataset)).__name__} (tapejax.data: its pipeline reads a "
                                 "stream there).")
    n = dataset._cardinality
    if i < 0 or (n >= 0 and i >= n):
        raise OutOfRangeError(None, None, f"Index out of range [0, {n}):{i}")
    return to_user(dataset.element_spec, p.get(i))


def _stream_step(dataset: Dataset) -> Dataset:
    """The first dataset down the plan that builds a stream (what blocks random access)."""
    from . import nodes
    for d in dataset._inputs:
        if not isinstance(d._build(Build(d.options())), nodes.Node):
            return _stream_step(d)
    return dataset


__all__ = ["Reducer", "element_at", "resolve_device"]
