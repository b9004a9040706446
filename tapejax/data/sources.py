"""The datasets that start a pipeline: ``from_tensor_slices``, ``from_tensors``, ``range``,
``from_generator``, ``zip`` (and ``enumerate``'s counter).

Their data is copied when the dataset is made (``structure.to_component``: a later change to a
NumPy buffer changes no element, as TF's constants), in the dtypes tapejax Tensors have.
"""
import math
from typing import Any, Callable, List

import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InternalError, InvalidArgumentError
from . import args as A, structure as S
from .build import Build
from .dataset import Dataset, kind
from .ragged_elements import RaggedValue
from .sparse_elements import SparseValue


def _components(tensors: Any, what: str, device: bool = False) -> List[Any]:
    comps = [S.to_component(c, device) for c in S.flatten(tensors)]
    if all(c is None for c in comps):
        if tensors == () or tensors == {}:
            raise ValueError(f"Invalid `element`. `element` should not be empty (got {tensors!r} in {what}).")
        raise InvalidArgumentError(None, None, f"{what}: `tensors` has no tensor component (got {tensors!r}).")
    return comps


@kind
class TensorSlices(Dataset):
    def __init__(self, tensors: Any):
        comps = _components(tensors, "from_tensor_slices", device=True)
        n = None
        for c in comps:
            if c is None:
                continue
            sparse = isinstance(c, SparseValue)   # (a SparseTensor: its rows are ``c[i]``)
            if (len(c.dense_shape) if sparse else len(c.shape) if isinstance(c, RaggedValue) else np.ndim(c)) == 0:
                raise ValueError(f"from_tensor_slices: `tensors` has a scalar component {c!r}: unbatching a tensor "
                                 "is only supported for rank >= 1.")
            if n is not None and c.shape[0] != n:
                raise ValueError(f"from_tensor_slices: the components of `tensors` must have the same first "
                                 f"dimension: Dimensions {n} and {c.shape[0]} are not compatible.")
            n = c.shape[0]
        assert n is not None
        self._device_arrays = tuple(comps)
        self._arrays = tuple(None if c is None else c if isinstance(c, (SparseValue, RaggedValue)) else np.asarray(c)
                             for c in comps)
        spec = S.pack(tensors, [S.unbatched(S.spec_of(c)) for c in comps])
        super().__init__((), spec, n)

    def _build(self, ctx: Build) -> Any:
        from . import nodes
        return nodes.Slices(self._arrays, self._device_arrays, self._cardinality, self._x64)


@kind
class Tensors(Dataset):
    def __init__(self, tensors: Any):
        comps = _components(tensors, "from_tensors")
        self._arrays = tuple(comps)
        super().__init__((), S.pack(tensors, [S.spec_of(c) for c in comps]), 1)

    def _build(self, ctx: Build) -> Any:
        from . import nodes
        return nodes.Tensors(self._arrays)


@kind
class Range(Dataset):
    def __init__(self, args: tuple, output_type: Any, counter: bool = False):
        if not 1 <= len(args) <= 3:
            raise ValueError(f"Invalid `args`. The length of `args` should be between 1 and 3 but was {len(args)}.")
        vals = [A.integer(a, name) for a, name in zip(args, ("start", "stop", "step") if len(args) > 1 else ("stop",))]
        start, stop, step = (0, vals[0], 1) if len(vals) == 1 else (vals + [1])[:3]
        if step == 0:
            raise InvalidArgumentError(None, None, "range: `step` must be a non-zero integer; got 0.")
        dtype = _dtypes.as_dtype(output_type)
        if not (dtype.is_integer or dtype.is_floating):   # TF: the int64 values cast to any real type
            raise TypeError(f"range: `output_type` must be an integer or floating dtype; got {dtype.name}")
        self._counter = counter
        n = A.INFINITE if counter else max(0, math.ceil((stop - start) / step))
        store = _dtypes.storage_dtype(dtype._np, "range")
        last = start if counter or n == 0 else start + (n - 1) * step
        info = np.iinfo(store) if dtype.is_integer else None
        if info is not None and not (info.min <= start <= info.max and info.min <= last <= info.max):
            raise TypeError(f"range({start}, {stop}, {step}) does not fit in {store.name} and JAX's 64-bit mode is "
                            "off: call jax.config.update('jax_enable_x64', True) to hold int64.")
        self._start, self._step, self._dtype = start, step, store
        super().__init__((), TensorSpec((), _dtypes.as_dtype(store)), n)

    def _build(self, ctx: Build) -> Any:
        from . import nodes
        return nodes.Arange(self._start, self._step, nodes.INF if self._counter else self._cardinality, self._dtype)


def _signature(output_types: Any, output_shapes: Any, output_signature: Any) -> Any:
    if output_signature is not None:
        if output_types is not None or output_shapes is not None:
            raise TypeError("from_generator: give either `output_signature` or `output_types` (and "
                            "`output_shapes`), not both.")

        def spec(s: Any) -> TensorSpec:
            if isinstance(s, TensorSpec):
                return TensorSpec(s.shape, _held_dtype(s.dtype, "output_signature"))
            if hasattr(s, "shape") and hasattr(s, "dtype") and type(s).__name__ == "TensorSpec":   # TF's
                dims = None if s.shape.rank is None else s.shape.as_list()
                return spec(TensorSpec(dims, s.dtype.name))
            raise TypeError("`output_signature` must contain objects that are subclass of `tf.TypeSpec` but found "
                            f"{type(s)} which is not.")
        return S.map_structure(spec, output_signature)
    if output_types is None:
        raise TypeError("To specify the output signature you need to provide either the `output_signature` "
                        "argument or the `output_types` argument.")
    types = S.flatten(output_types)
    shapes = [None] * len(types) if output_shapes is None else S.flatten(output_shapes)
    if len(shapes) != len(types):
        raise ValueError(f"from_generator: `output_shapes` {output_shapes!r} does not match the structure of "
                         f"`output_types` {output_types!r}.")
    specs = [TensorSpec(None if s is None else list(s), _held_dtype(_dtypes.as_dtype(t), "output_types"))
             for t, s in zip(types, shapes)]
    return S.pack(output_types, specs)


def _held_dtype(dtype: Any, what: str) -> Any:
    """The dtype a generator's component is held in: ``tf.string`` as host bytes, a numeric one as
    JAX holds it (int64 as int32 without x64)."""
    if S.is_string(TensorSpec((), dtype)):
        return S.STRING
    return _dtypes.as_dtype(_dtypes.storage_dtype(dtype._np, what))


@kind
class Generator(Dataset):
    def __init__(self, generator: Callable[..., Any], output_types: Any, output_shapes: Any, args: Any,
                 output_signature: Any):
        if not callable(generator):
            raise TypeError(f"`generator` must be a Python callable; got {generator!r}.")
        spec = _signature(output_types, output_shapes, output_signature)
        self._generator = generator
        self._args = () if args is None else tuple(np.asarray(S.to_component(a)) for a in S.flatten(tuple(args)))
        self._specs: List[TensorSpec] = S.flatten(spec)
        super().__init__((), spec, A.UNKNOWN)

    def _convert(self, value: Any) -> tuple:
        spec = self._element_spec
        if type(value) is list and isinstance(spec, tuple):
            value = tuple(value)
        if not S.same_structure(value, spec) or (S.is_structure(spec) and not S.is_structure(value)):
            raise InvalidArgumentError(None, None, "`generator` yielded an element that did not match the expected "
                                       f"structure. The expected structure was {S.describe(spec)}, but the "
                                       f"yielded element was {value!r}.")
        out = []
        for v, s in zip(S.flatten(value), self._specs):
            if S.is_string(s):
                out.append(self._string(v, s))
                continue
            dtype = s.dtype._np
            try:
                # a copy, as TF's: a generator may yield one array it refills in place
                a = np.array(v.numpy() if hasattr(v, "numpy") else v, dtype=dtype)
            except (TypeError, ValueError):
                raise InvalidArgumentError(None, None, "`generator` yielded an element that could not be converted "
                                           f"to the expected type. The expected type was {s.dtype.name}, but the "
                                           f"yielded element was {v!r}.") from None
            if not S.shape_fits(a.shape, s):
                raise InvalidArgumentError(None, None, f"`generator` yielded an element of shape {a.shape} where an "
                                           f"element of shape {tuple(s.shape or ())} was expected.")
            out.append(a)
        return tuple(out)

    @staticmethod
    def _string(v: Any, s: TensorSpec) -> Any:
        """A yielded string value (``str`` / ``bytes`` / arrays of them) as a string component."""
        v = v.numpy() if hasattr(v, "numpy") else v
        try:
            value = S.string_value(v)
        except (TypeError, ValueError):   # (TF's class and words for a value that is not a string)
            bad = next((x for x in np.asarray(v, dtype=object).flat if not isinstance(x, (str, bytes))), v)
            raise InternalError(None, None, f"Unsupported object type {type(bad).__name__}: `generator` yielded "
                                f"{v!r} where a string was expected.") from None
        shape = S.string_shape(value)
        if not S.shape_fits(shape, s):
            raise InvalidArgumentError(None, None, f"`generator` yielded an element of shape {shape} where an "
                                       f"element of shape {tuple(s.shape or ())} was expected.")
        return value

    def _build(self, ctx: Build) -> Any:
        from . import streams
        return streams.Generator(lambda: iter(self._generator(*self._args)), self._convert)


@kind
class Zip(Dataset):
    def __init__(self, datasets: Any):
        if type(datasets) is list:
            datasets = tuple(datasets)
        leaves = S.flatten(datasets)
        for d in leaves:
            if not isinstance(d, Dataset):
                raise TypeError("Invalid input to `zip`. Inputs are expected to be (nested) structures of "
                                f"`tf.data.Dataset` objects but encountered object of type {type(d)}.")
        if not leaves or datasets == ():
            raise InvalidArgumentError(None, None, "zip: `datasets` must hold at least one dataset; got an empty "
                                       "structure.")
        cards = [d._cardinality for d in leaves]
        if A.UNKNOWN in cards:
            card = A.UNKNOWN
        else:
            finite = [c for c in cards if c != A.INFINITE]
            card = min(finite) if finite else A.INFINITE
        self._datasets: List[Dataset] = leaves
        super().__init__(tuple(leaves), S.map_structure(lambda d: d.element_spec, datasets), card)

    def _build(self, ctx: Build) -> Any:
        from . import nodes, streams
        parts = [d._build(ctx) for d in self._datasets]
        if all(isinstance(p, nodes.Node) for p in parts):
            return nodes.Zip(parts)
        return streams.Zip([nodes.to_iter(p) for p in parts])


def _counter(start: int) -> Range:
    """``enumerate``'s index: ``start, start + 1, ...`` forever."""
    return Range((start, start + 1), _dtypes.int64, counter=True)


Range.counter = staticmethod(_counter)
