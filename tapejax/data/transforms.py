"""The transformations: each knows its ``element_spec`` and cardinality (TF's rules, including
``INFINITE_CARDINALITY`` and ``UNKNOWN_CARDINALITY``) and builds itself on its input's build: a
random-access ``nodes.Node`` while the input is one, a stream otherwise."""
import itertools
from typing import Any, Callable, List, Optional, Tuple, cast

import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.tensor import Tensor
from ..ops.ragged_tensor import RaggedTensorSpec
from ..ops.sparse_tensor import SparseTensorSpec
from . import args as A, ragged_elements as _ragged, structure as S
from .build import Build
from .dataset import Dataset, kind
from .functions import StructuredFunction, host_context
from .hostfn import peek
from .hostvalues import batch_stack
from .options import Options, debug_mode

INF, UNK = A.INFINITE, A.UNKNOWN


def _nodes():
    from . import nodes
    return nodes


def _streams():
    from . import streams
    return streams


def _first_then(first: Any, make: Callable[[], Any]) -> Callable[[], Any]:
    """A factory giving ``first`` once, then ``make()`` each call (an epoch's fresh build)."""
    pending = [first]
    return lambda: pending.pop() if pending else make()


@kind
class Map(Dataset):
    """``map``: over random access a ``MapFn`` node (grain's read threads run ``num_parallel_calls``
    at once, in order); over a stream grain's ``map``, or ``streams.ParallelMap`` with workers."""

    def __init__(self, input: Dataset, fn: Callable[..., Any], num_parallel_calls: Optional[int],
                 deterministic: Optional[bool] = None):
        self._fn = StructuredFunction(fn, input.element_spec, "Dataset.map()", input._x64, lambda: peek(input))
        self._npc, self._deterministic = num_parallel_calls, deterministic
        super().__init__((input,), self._fn.output_spec, input._cardinality)

    def _build(self, ctx: Build, deferred: bool = False) -> Any:
        """The map's grain dataset; ``deferred`` (a ``batch`` follows that computes them): its
        elements may hold ops staged on host values (``StructuredFunction.call_deferred``)."""
        p = self._inputs[0]._build(ctx)
        nodes = _nodes()
        threads = ctx.threads(self._npc)
        self._fn.new_iteration()
        fn = self._fn.call_deferred if deferred else self._fn
        if isinstance(p, nodes.Node):
            return nodes.MapFn(p, fn, threads)
        if threads <= 1:
            return p.map(fn)
        ordered = self._deterministic if self._deterministic is not None else ctx.options.deterministic
        return _streams().ParallelMap(p, fn, threads, ordered is not False)


@kind
class Filter(Dataset):
    def __init__(self, input: Dataset, predicate: Callable[..., Any]):
        self._fn = StructuredFunction(predicate, input.element_spec, "Dataset.filter()", input._x64,
                                      lambda: peek(input))
        out = self._fn.output_spec
        if not (isinstance(out, TensorSpec) and out.dtype == _dtypes.bool and out.shape == ()):
            raise ValueError("Invalid `predicate`. `predicate` must return a `tf.bool` scalar tensor, but its return "
                             f"type is {out!r}.")
        super().__init__((input,), input.element_spec, UNK)

    def _build(self, ctx: Build) -> Any:
        fn = self._fn
        fn.new_iteration()
        return self._inputs[0]._build_stream(ctx).filter(lambda el: bool(fn(el)[0]))


def _batched_card(card: int, size: int, drop: bool) -> int:
    if card in (INF, UNK):
        return card
    return card // size if drop else -(-card // size)


@kind
class Batch(Dataset):
    """``batch`` (``padding`` None) and ``padded_batch`` (``padding``: (padded_shapes, padding_values))."""

    def __init__(self, input: Dataset, size: int, drop: bool, padding: Optional[Tuple[Any, Any]],
                 ragged: bool = False):
        self._size, self._drop = size, drop
        specs: List[S.Spec] = S.flatten(input.element_spec)
        if padding is not None and any(isinstance(s, SparseTensorSpec) for s in specs):
            raise TypeError("Dataset.padded_batch() does not support SparseTensor components (TF's rule); use batch().")
        if padding is not None and any(isinstance(s, RaggedTensorSpec) for s in specs):
            raise TypeError("`padded_batch` is only supported for datasets that produce tensor elements but type spec "
                            "of elements in the input dataset is not a subclass of TensorSpec (a RaggedTensor "
                            "component); use ragged_batch() or batch().")
        self._padding = None if padding is None else _padding(input.element_spec, specs, *padding)
        #: ``ragged_batch``: per component, the ragged rank its dense elements become (None: dense)
        self._ragged = [_ragged.ragged_rank_of(s) for s in specs] if ragged else None
        if self._ragged is not None:
            specs = [_ragged.as_ragged_spec(s, r) for s, r in zip(specs, self._ragged)]
        if self._padding is not None:
            specs = [S.with_shape(s, shape) for s, shape in zip(specs, self._padding.shapes)]
        spec = S.pack(input.element_spec, [S.batched(s, size if drop else None) for s in specs])
        super().__init__((input,), spec, _batched_card(input._cardinality, size, drop))

    def _build(self, ctx: Build) -> Any:
        nodes = _nodes()
        m = self._inputs[0]
        if self._ragged is not None:
            stack = _ragged.RaggedStack(self._ragged, nodes.stack)
            p = m._build(ctx)
            if isinstance(p, nodes.Node):
                return nodes.Batch(p, self._size, self._drop, stack)
            return p.batch(self._size, drop_remainder=self._drop, batch_fn=stack)
        if self._padding is None and type(m) is Map and m._fn.eager:
            # an eager map's ops staged on host values run once per batch (``hostvalues``)
            p = m._build(ctx, deferred=True)
            fn = m._fn

            def stack(elements: Any) -> Any:
                with host_context(fn._x64):
                    return batch_stack(elements, nodes.stack)
            if isinstance(p, nodes.Node):
                return nodes.Batch(p, self._size, self._drop, stack)
            return p.batch(self._size, drop_remainder=self._drop, batch_fn=stack)
        p = m._build(ctx)
        if isinstance(p, nodes.Node):   # (SparseTensor components: no gather, ``sparse_elements.stack``)
            sparse = any(isinstance(s, (SparseTensorSpec, RaggedTensorSpec)) for s in S.flatten(m.element_spec))
            return nodes.Batch(p, self._size, self._drop, self._padding or (nodes.stack if sparse else None))
        return p.batch(self._size, drop_remainder=self._drop, batch_fn=self._padding or nodes.stack)


def _padding(element_spec: Any, specs: List[S.Spec], padded_shapes: Any, padding_values: Any) -> Any:
    """``padded_batch``'s arguments checked against the element structure (TF's errors)."""
    nodes = _nodes()
    if padded_shapes is None:
        shapes: List[Any] = [None if isinstance(s, S.NoneTensorSpec) else s.shape for s in specs]
    else:
        given = _up_to(element_spec, padded_shapes, "padded_shapes")
        shapes = []
        for s, g in zip(specs, given):
            if isinstance(s, S.NoneTensorSpec):
                shapes.append(None)
                continue
            g = tuple(None if d is None or (isinstance(d, (int, np.integer)) and d < 0) else int(d)
                      for d in (g.numpy().tolist() if isinstance(g, Tensor) else g))
            if s.shape is not None and (len(g) != len(s.shape) or any(
                    a is not None and b is not None and a < b for a, b in zip(g, s.shape))):
                raise ValueError(f"The padded shape {g} is not compatible with the shape {s.shape} of the "
                                 "corresponding input component.")
            shapes.append(g)
    if padding_values is None:
        values: List[Any] = [False if s.dtype == _dtypes.bool else b"" if s.dtype.name == "string" else 0
                             for s in specs if not isinstance(s, S.NoneTensorSpec)]
        values = [None if isinstance(s, S.NoneTensorSpec) else values.pop(0) for s in specs]
    else:
        values = []
        for s, v in zip(specs, _up_to(element_spec, padding_values, "padding_values")):
            if isinstance(s, S.NoneTensorSpec):
                values.append(None)
                continue
            if s.dtype.name == "string" and isinstance(v, (bytes, str)):
                values.append(S.string_value(v))
                continue
            a = np.asarray(v.numpy() if isinstance(v, Tensor) else v)
            kind_ok = (a.dtype == s.dtype._np or (isinstance(v, (int, bool)) and s.dtype.is_integer)
                       or (isinstance(v, (int, float)) and not isinstance(v, bool) and s.dtype.is_floating))
            if a.ndim != 0 or not kind_ok:
                raise TypeError(f"Invalid `padding_values`. `padding_values` values type {_dtypes.as_dtype(a.dtype)} "
                                f"does not match type {s.dtype} of the corresponding input component "
                                "(a scalar of the component's dtype is expected).")
            values.append(a.astype(s.dtype._np)[()])
    return nodes.Padding(shapes, values)


def _up_to(element_spec: Any, value: Any, name: str) -> List[Any]:
    """``value``'s parts at the element structure's components (a single value for all of them)."""
    if not S.is_structure(element_spec):
        return [value]
    if not S.is_structure(value):
        return [value] * len(S.flatten(element_spec))
    shallow = _shallow(element_spec, value)
    if not S.same_structure(S.map_structure(lambda _: 0, element_spec), shallow):
        raise ValueError(f"`{name}` {value!r} does not match the structure of the elements {element_spec!r}.")
    return [leaf.value for leaf in S.flatten(shallow)]


def _shallow(template: Any, value: Any) -> Any:
    """``value`` cut at ``template``'s components (a component's own value may be a list or tuple)."""
    if isinstance(template, dict):
        return {k: _shallow(template[k], value[k]) for k in template} if isinstance(value, dict) else value
    if isinstance(template, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(template):
            return value
        return tuple(_shallow(t, v) for t, v in zip(template, value))
    return _Leaf(value)


class _Leaf:
    """A component's value inside ``_shallow``'s result (so its own tuple is not structure)."""

    def __init__(self, value: Any):
        self.value = value


@kind
class Unbatch(Dataset):
    def __init__(self, input: Dataset):
        specs = S.flatten(input.element_spec)
        for s in specs:
            if isinstance(s, TensorSpec) and s.shape is not None and len(s.shape) == 0:
                raise ValueError("Cannot unbatch an input with scalar components.")
            if isinstance(s, SparseTensorSpec) and s.dims is not None and len(s.dims) == 0:
                raise ValueError("Cannot unbatch an input with scalar components.")
            if isinstance(s, RaggedTensorSpec) and s.shape is not None and len(s.shape) == 0:
                raise ValueError("Cannot unbatch an input with scalar components.")
        leading = {s.shape[0] for s in specs if isinstance(s, TensorSpec) and s.shape is not None}
        size = next(iter(leading)) if len(leading) == 1 else None
        card = input._cardinality
        if card == UNK or size is None or any(isinstance(s, TensorSpec) and s.shape is None for s in specs):
            card = UNK if card != INF else INF
        elif card != INF:
            card = card * cast(int, size)
        super().__init__((input,), S.map_structure(S.unbatched, input.element_spec), card)

    def _build(self, ctx: Build) -> Any:
        return _streams().Unbatch(self._inputs[0]._build_stream(ctx))


@kind
class Shuffle(Dataset):
    def __init__(self, input: Dataset, buffer_size: int, seed: List[int], reshuffle: bool):
        self._size, self._seed, self._reshuffle = buffer_size, seed, reshuffle
        self._iterations = itertools.count()
        super().__init__((input,), input.element_spec, input._cardinality)

    def _build(self, ctx: Build) -> Any:
        k, rebuild = ctx.draw(self, lambda: next(self._iterations) if self._reshuffle else 0)
        # a stream ``repeat`` rebuilds its input per epoch: a new order each time unless fixed
        seed = self._seed + ([k] if rebuild == 0 or not self._reshuffle else [k, rebuild])
        p = self._inputs[0]._build(ctx)
        nodes = _nodes()
        if isinstance(p, nodes.Node):
            window = len(p) if self._size == UNK else self._size
            return nodes.Shuffle(p, window, seed, self._reshuffle)
        word = int(np.random.SeedSequence(seed).generate_state(1)[0]) & 0x3FFFFFFF
        return _streams().shuffle(nodes.to_iter(p), nodes.INF if self._size == UNK else self._size, word)


def _repeat_card(card: int, count: Optional[int]) -> int:
    if count == 0 or card == 0:
        return 0
    if count is None or card == INF:
        return INF
    if card == UNK:
        return UNK
    return card * count


@kind
class Repeat(Dataset):
    def __init__(self, input: Dataset, count: Optional[int]):
        self._count = count
        super().__init__((input,), input.element_spec, _repeat_card(input._cardinality, count))

    def _build(self, ctx: Build) -> Any:
        src = self._inputs[0]
        p = src._build(ctx)
        nodes = _nodes()
        if isinstance(p, nodes.Node):
            return nodes.Repeat(p, self._count)
        return _streams().Repeat(_first_then(p, lambda: src._build_stream(ctx)), self._count)


@kind
class Take(Dataset):
    def __init__(self, input: Dataset, count: int):
        card = input._cardinality
        self._count = count
        if count < 0:
            out = card
        elif card == INF:
            out = count
        elif card == UNK:
            out = 0 if count == 0 else UNK
        else:
            out = min(count, card)
        super().__init__((input,), input.element_spec, out)

    def _build(self, ctx: Build) -> Any:
        p = self._inputs[0]._build(ctx)
        nodes = _nodes()
        if isinstance(p, nodes.Node):
            return nodes.Take(p, self._count)
        return _streams().Take(p, self._count)


@kind
class Skip(Dataset):
    def __init__(self, input: Dataset, count: int):
        card = input._cardinality
        self._count = count
        if card in (INF, UNK):
            out = card
        elif count < 0:
            out = 0
        else:
            out = max(card - count, 0)
        super().__init__((input,), input.element_spec, out)

    def _build(self, ctx: Build) -> Any:
        p = self._inputs[0]._build(ctx)
        nodes = _nodes()
        if isinstance(p, nodes.Node):
            return nodes.Skip(p, self._count)
        return _streams().Skip(p, self._count)


@kind
class Shard(Dataset):
    def __init__(self, input: Dataset, num: int, index: int):
        self._num, self._index = num, index
        n = input._cardinality
        card = n if n in (INF, UNK) else n // num + (1 if n % num > index else 0)
        super().__init__((input,), input.element_spec, card)

    def _build(self, ctx: Build) -> Any:
        p = self._inputs[0]._build(ctx)
        nodes = _nodes()
        if isinstance(p, nodes.Node):
            return nodes.Shard(p, self._num, self._index)
        num, index = self._num, self._index
        return p.filter(_ShardPick(num, index))


class _ShardPick:
    """The stream form of ``shard``: keeps every ``num``-th element from ``index``."""

    def __init__(self, num: int, index: int):
        self._num, self._index, self._k = num, index, -1

    def __call__(self, el: Any) -> bool:
        self._k += 1
        return self._k % self._num == self._index


@kind
class Cache(Dataset):
    def __init__(self, input: Dataset, filename: str = ""):
        self._store = _nodes().FileCacheStore(filename) if filename else _nodes().CacheStore()
        super().__init__((input,), input.element_spec, input._cardinality)

    def _build(self, ctx: Build) -> Any:
        nodes = _nodes()
        if self._store.elements is not None:
            return nodes.ListSource(self._store.elements)
        p = self._inputs[0]._build(ctx)
        if isinstance(p, nodes.Node):
            return nodes.CacheFill(p, self._store)
        return _streams().CacheFill(p, self._store)


def _prefetch_size(size: int, ctx: Build) -> int:
    if debug_mode():   # (``enable_debug_mode``: no background thread)
        return 0
    if size != A.AUTOTUNE:
        return size
    return 1 if ctx.options.autotune.enabled is False else 2


@kind
class Prefetch(Dataset):
    def __init__(self, input: Dataset, size: int):
        self._size = size
        super().__init__((input,), input.element_spec, input._cardinality)

    def _build(self, ctx: Build) -> Any:
        p = self._inputs[0]._build_stream(ctx)
        n = _prefetch_size(self._size, ctx)
        return _streams().prefetch(p, n) if n > 0 else p

    def _build_output(self, ctx: Build, to_device: Optional[Callable[[Any], Any]]) -> Any:
        p = self._inputs[0]._build_stream(ctx)
        n = _prefetch_size(self._size, ctx)
        if n <= 0:
            return p
        return _streams().prefetch(p if to_device is None else p.map(to_device), n)


@kind
class Concatenate(Dataset):
    def __init__(self, input: Dataset, other: Dataset):
        a, b = input.element_spec, other.element_spec
        specs = [S.combine(x, y) for x, y in zip(S.flatten(a), S.flatten(b))]
        if not S.same_structure(a, b) or any(s is None for s in specs):
            raise TypeError(f"Incompatible dataset elements:\n  {a!r} vs.\n  {b!r}")
        ca, cb = input._cardinality, other._cardinality
        card = INF if INF in (ca, cb) else UNK if UNK in (ca, cb) else ca + cb
        super().__init__((input, other), S.pack(a, specs), card)

    def _build(self, ctx: Build) -> Any:
        da, db = self._inputs
        a, b = da._build(ctx), db._build(ctx)
        nodes = _nodes()
        if isinstance(a, nodes.Node) and isinstance(b, nodes.Node):
            return nodes.Concatenate(a, b)
        return _streams().Concatenate(_first_then(nodes.to_iter(a), lambda: da._build_stream(ctx)),
                                      _first_then(nodes.to_iter(b), lambda: db._build_stream(ctx)))


@kind
class WithOptions(Dataset):
    def __init__(self, input: Dataset, options: Options):
        self._own_options = options
        super().__init__((input,), input.element_spec, input._cardinality)

    def _build(self, ctx: Build) -> Any:
        return self._inputs[0]._build(ctx)

    def _build_output(self, ctx: Build, to_device: Optional[Callable[[Any], Any]]) -> Any:
        return self._inputs[0]._build_output(ctx, to_device)
