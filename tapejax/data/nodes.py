"""The grain datasets a ``tapejax.data.Dataset`` builds each time it is iterated.

Random access first.  While a pipeline is sources, ``shuffle``, ``take`` / ``skip``, ``repeat``,
``zip``, ``concatenate``, ``enumerate``, ``map``, ``batch`` and ``cache`` it builds
``grain.MapDataset`` s (the ``Node`` subclasses here): element ``i`` is computed from its index,
and an index past the length is the same position in a later epoch (grain's convention, so
``shuffle`` draws a new order per epoch).  Nodes whose elements are rows of arrays can also
``gather`` a whole index vector at once: ``batch`` over them is one NumPy ``take`` per
component instead of a Python loop over rows, which is what makes
``from_tensor_slices(...).shuffle(...).batch(...)`` fast.

Past a node that needs a stream (``filter``, ``unbatch``, ``from_generator``, ``prefetch``), the
pipeline becomes a ``grain.IterDataset``: ``to_iter`` converts with grain's
``to_iter_dataset`` (its thread pool runs ``map(num_parallel_calls=...)`` in parallel, in
order), then grain's own ``map`` / ``filter`` / ``batch``, ``WindowShuffleIterDataset`` and
``ThreadPrefetchIterDataset``, and the small iterators below for what grain has no stream
form of.  Elements are flat tuples of components (``structure``).
"""
import json
import math
import os
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.errors import DataLossError, InvalidArgumentError
from . import ragged_elements as _ragged, sparse_elements as _sparse, structure as S
from ._grain import require

grain = require()
_WindowShuffleIter = grain.experimental.WindowShuffleIterDataset
_ThreadPrefetchIter = grain.experimental.ThreadPrefetchIterDataset

INF = sys.maxsize
Element = Tuple[Any, ...]


# ---------------------------------------------------------------------------
# batching helpers
# ---------------------------------------------------------------------------

def stack(elements: Sequence[Element]) -> Element:
    """``batch``: the elements' components stacked on a new leading axis (TF's error for
    components whose shapes differ)."""
    out = []
    first = elements[0]
    for k in range(len(first)):
        if first[k] is None:
            out.append(None)
            continue
        comps = [e[k] for e in elements]
        if isinstance(comps[0], _sparse.SparseValue):
            out.append(_sparse.stack(comps, k))
            continue
        if isinstance(comps[0], _ragged.RaggedValue):
            out.append(_ragged.stack(comps, k))
            continue
        try:
            out.append(S.stack_strings(comps) if S.is_bytes(comps[0]) else np.stack(comps))
        except ValueError:
            shape0 = S.string_shape(comps[0])
            bad = next(i for i, c in enumerate(comps) if S.string_shape(c) != shape0)
            raise InvalidArgumentError(
                f"Cannot batch tensors with different shapes in component {k}: first element had shape "
                f"{list(shape0)} and element {bad} had shape {list(S.string_shape(comps[bad]))}. Use "
                "padded_batch to pad them to a common shape.") from None
    return tuple(out)


class Padding:
    """``padded_batch``'s per-component target shapes (None: the batch's longest) and values."""

    def __init__(self, shapes: Sequence[Optional[Tuple[Optional[int], ...]]], values: Sequence[Any]):
        self.shapes = list(shapes)
        self.values = list(values)

    def __call__(self, elements: Sequence[Element]) -> Element:
        out = []
        for k, (shape, value) in enumerate(zip(self.shapes, self.values)):
            comps = [elements[i][k] for i in range(len(elements))]
            if comps[0] is None:
                out.append(None)
                continue
            strings = S.is_bytes(comps[0])
            comps = [np.asarray(c, dtype=object if strings else None) for c in comps]
            longest = np.max([c.shape for c in comps], axis=0) if comps[0].ndim else ()
            target = tuple(int(m) if d is None else d for d, m in zip(shape or longest, longest)) \
                if comps[0].ndim else ()
            batch = np.full((len(comps),) + target, value, comps[0].dtype)
            for i, c in enumerate(comps):
                if any(n > t for n, t in zip(c.shape, target)):
                    raise DataLossError(None, None, f"Attempted to pad to a smaller size than the input element: "
                                        f"component {k} has shape {list(c.shape)}, padded_shapes asks for "
                                        f"{list(target)}.")
                batch[(i,) + tuple(slice(0, n) for n in c.shape)] = c if c.ndim else c[()]
            out.append(batch)
        return tuple(out)


# ---------------------------------------------------------------------------
# random access
# ---------------------------------------------------------------------------

class Node(grain.MapDataset):
    """A random-access node: ``get(i)`` (``i`` past the length: the same position in a later
    epoch) and, where ``can_gather``, ``gather(indices)`` giving the batched components."""

    can_gather = False
    threads = 0          # the worker threads a ``map(num_parallel_calls=...)`` here asks for

    def __init__(self, parents: Sequence[Any], length: int):
        super().__init__(list(parents))
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self.get(int(index))

    def get(self, i: int) -> Element:
        raise NotImplementedError   # every subclass defines it

    def gather(self, idx: np.ndarray) -> Element:
        return stack([self.get(int(i)) for i in idx])

    def segment_threads(self) -> int:
        """The most worker threads any map in this random-access segment asks for."""
        return max([self.threads] + [p.segment_threads() for p in self.parents if isinstance(p, Node)])


class Slices(Node):
    """``from_tensor_slices``: row ``i`` of every component.  ``gather`` reads rows on the device
    (one compiled ``take`` over the components' ``jax.Array`` s): a batch is made where it is
    used, without a host copy and a transfer."""

    can_gather = True

    def __init__(self, arrays: Element, device_arrays: Element, n: int, x64: bool):
        super().__init__((), n)
        self._arrays, self._device_arrays, self._x64 = arrays, device_arrays, x64

    def get(self, i: int) -> Element:
        i %= self._length
        return tuple(None if a is None else a[i] for a in self._arrays)

    def gather(self, idx: np.ndarray) -> Element:
        idx = (idx % self._length).astype(np.int32 if self._length < 2**31 else np.int64)
        arrays = self._device_arrays
        strings = [k for k, a in enumerate(arrays) if S.is_bytes(a)]   # (host bytes: taken on the host)
        if strings:
            arrays = tuple(None if k in strings else a for k, a in enumerate(arrays))
        if jax.enable_x64.value != self._x64:
            with jax.enable_x64(self._x64):
                out = _take(arrays, idx)
        else:
            out = _take(arrays, idx)
        if strings:
            out = tuple(np.take(self._arrays[k], idx, axis=0) if k in strings else a for k, a in enumerate(out))
        return out


@jax.jit
def _take(arrays: Element, idx: Any) -> Element:
    return tuple(None if a is None else jnp.take(a, idx, axis=0, mode="clip") for a in arrays)


class Tensors(Node):
    """``from_tensors``: one element."""

    can_gather = True

    def __init__(self, arrays: Element):
        super().__init__((), 1)
        self._arrays = arrays

    def get(self, i: int) -> Element:
        return self._arrays

    def gather(self, idx: np.ndarray) -> Element:
        return tuple(None if a is None else np.repeat(a[None], len(idx), axis=0) for a in self._arrays)


class Arange(Node):
    """``range`` (``length`` INF: ``enumerate``'s counter): ``start + i * step``."""

    can_gather = True

    def __init__(self, start: int, step: int, length: int, dtype: np.dtype):
        super().__init__((), length)
        self._start, self._step, self._dtype = start, step, np.dtype(dtype)

    def get(self, i: int) -> Element:
        return (self._dtype.type(self._start + (i % self._length) * self._step),)

    def gather(self, idx: np.ndarray) -> Element:
        return ((self._start + (idx % self._length) * self._step).astype(self._dtype),)


class RandomInts(Node):
    """``Dataset.random``: element ``i`` is value ``i % 1024`` of block ``i // 1024``, drawn by
    NumPy's PCG64 seeded with ``(*seed, block)``: non-negative, below 2**32 (2**31 in int32)."""

    _BLOCK = 1024

    def __init__(self, seed: Sequence[int], dtype: np.dtype):
        super().__init__((), INF)
        self._seed, self._dtype = list(seed), np.dtype(dtype)
        self._high = 2**32 if self._dtype.itemsize == 8 else 2**31
        self._blocks: Dict[int, np.ndarray] = {}

    def _values(self, b: int) -> np.ndarray:
        v = self._blocks.get(b)
        if v is None:
            if len(self._blocks) > 8:
                self._blocks.clear()
            v = self._blocks[b] = np.random.default_rng(self._seed + [b]).integers(
                0, self._high, self._BLOCK, dtype=np.int64).astype(self._dtype)
        return v

    def get(self, i: int) -> Element:
        b, k = divmod(i, self._BLOCK)
        return (self._values(b)[k],)


class ListSource(Node):
    """A completed ``cache``: the stored elements."""

    def __init__(self, elements: List[Element]):
        super().__init__((), len(elements))
        self._elements = elements

    def get(self, i: int) -> Element:
        return self._elements[i % self._length]


class _Remap(Node):
    """A node whose element ``i`` is its parent's element ``source(i)``."""

    def __init__(self, parent: Node, length: int):
        super().__init__((parent,), length)
        self._p = parent
        self.can_gather = parent.can_gather

    def get(self, i: int) -> Element:
        return self._p.get(int(self.sources(np.asarray([i]))[0]))

    def gather(self, idx: np.ndarray) -> Element:
        return self._p.gather(self.sources(idx))

    def sources(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError   # every subclass defines it


class Take(_Remap):
    def __init__(self, parent: Node, count: int):
        n = len(parent)
        super().__init__(parent, n if count < 0 else min(count, n))
        self._n = n

    def sources(self, idx: np.ndarray) -> np.ndarray:
        m = self._length
        if self._n == INF:      # an infinite parent restarts with each epoch of the take
            return idx % m
        return (idx // m) * self._n + idx % m


class Skip(_Remap):
    def __init__(self, parent: Node, count: int):
        n = len(parent)
        count = n if count < 0 else count
        super().__init__(parent, n if n == INF else max(n - count, 0))
        self._n, self._count = n, min(count, n)

    def sources(self, idx: np.ndarray) -> np.ndarray:
        if self._n == INF:
            return idx + self._count
        m = self._length
        return (idx // m) * self._n + self._count + idx % m


class Shard(_Remap):
    """``shard(num_shards, index)``: the parent's elements ``index, index + num_shards, ...``."""

    def __init__(self, parent: "Node", num: int, index: int):
        n = len(parent)
        super().__init__(parent, INF if n == INF else n // num + (1 if n % num > index else 0))
        self._n, self._num, self._index = n, num, index

    def sources(self, idx: np.ndarray) -> np.ndarray:
        if self._n == INF:
            return idx * self._num + self._index
        e, j = idx // self._length, idx % self._length
        return e * self._n + j * self._num + self._index


class Repeat(_Remap):
    """Index ``i`` is passed through: the parent reads epoch ``i // len(parent)`` from it."""

    def __init__(self, parent: Node, count: Optional[int]):
        n = len(parent)
        super().__init__(parent, 0 if n == 0 else (INF if count is None or n == INF else n * count))

    def get(self, i: int) -> Element:
        return self._p.get(i)

    def sources(self, idx: np.ndarray) -> np.ndarray:
        return idx


class Shuffle(_Remap):
    """``shuffle(buffer_size)`` with random access: the parent's positions are cut into windows
    of ``buffer_size`` and each window is permuted (one window when ``buffer_size`` covers the
    dataset: a global shuffle).  Window ``w`` of epoch ``e`` uses NumPy's PCG64 permutation
    seeded with ``(seed, e, w)`` (``e`` is 0 in every epoch when the order must not change)."""

    def __init__(self, parent: Node, window: int, seed: Sequence[int], reshuffle: bool):
        super().__init__(parent, len(parent))
        self._n = len(parent)
        self._window = max(1, min(window, self._n)) if self._n else 1
        self._seed = list(seed)
        self._reshuffle = reshuffle
        self._perms: Dict[Tuple[int, int], np.ndarray] = {}

    def _perm(self, epoch: int, w: int) -> np.ndarray:
        key = (epoch if self._reshuffle else 0, w)
        p = self._perms.get(key)
        if p is None:
            size = min(self._window, self._n - w * self._window)
            p = np.random.default_rng(self._seed + [key[0], w]).permutation(size)
            if len(self._perms) > 8:
                self._perms.clear()
            self._perms[key] = p
        return p

    def sources(self, idx: np.ndarray) -> np.ndarray:
        n, size = self._n, self._window
        first, last = int(idx[0]), int(idx[-1])
        if first <= last and last - first == len(idx) - 1:   # a run of positions (a batch's): slices
            e0, j0 = (0, first) if n == INF else divmod(first, n)
            if (n == INF or last < (e0 + 1) * n) and j0 // size == (j0 + len(idx) - 1) // size:
                w, k = divmod(j0, size)
                return self._perm(e0, w)[k:k + len(idx)] + (w * size + (0 if n == INF else e0 * n))
        epoch, j = (np.zeros_like(idx), idx) if n == INF else (idx // n, idx % n)
        w, k = j // size, j % size
        out = np.empty_like(idx)
        for e, win in set(zip(epoch.tolist(), w.tolist())):
            sel = (epoch == e) & (w == win)
            out[sel] = self._perm(e, win)[k[sel]] + win * size
        return out if n == INF else out + epoch * n


class Concatenate(Node):
    def __init__(self, a: Node, b: Node):
        na, nb = len(a), len(b)
        super().__init__((a, b), INF if INF in (na, nb) else na + nb)
        self._a, self._b, self._na, self._nb = a, b, na, nb
        self.can_gather = a.can_gather and b.can_gather

    def get(self, i: int) -> Element:
        if self._na == INF:
            return self._a.get(i)
        if self._nb == INF and i >= self._na:
            return self._b.get(i - self._na)
        e, j = divmod(i, self._length)
        return self._a.get(e * self._na + j) if j < self._na else self._b.get(e * self._nb + j - self._na)

    def gather(self, idx: np.ndarray) -> Element:
        if self._na == INF or self._length == 0:
            return self._a.gather(idx)
        if self._nb == INF:
            e, j = np.zeros_like(idx), idx
        else:
            e, j = idx // self._length, idx % self._length
        first = j < self._na
        if first.all():
            return self._a.gather(e * self._na + j)
        if not first.any():
            return self._b.gather(e * self._nb + j - self._na)
        ga = self._a.gather((e * self._na + j)[first])
        gb = self._b.gather((e * self._nb + j - self._na)[~first])
        out = []
        for ca, cb in zip(ga, gb):
            if ca is None:
                out.append(None)
                continue
            c = np.empty((len(idx),) + ca.shape[1:], ca.dtype)
            c[first], c[~first] = np.asarray(ca), np.asarray(cb)
            out.append(c)
        return tuple(out)


class Zip(Node):
    """``zip`` (and ``enumerate``): the parents' components side by side; as long as the
    shortest; an infinite parent restarts with each epoch of the zip."""

    def __init__(self, parents: Sequence[Node]):
        lengths = [len(p) for p in parents]
        super().__init__(parents, min(lengths))
        self._ps, self._ns = list(parents), lengths
        self.can_gather = all(p.can_gather for p in parents)

    def _split(self, i):
        m = self._length
        return (0, i) if m == INF else (i // m, i % m)

    def get(self, i: int) -> Element:
        e, j = self._split(i)
        out: Tuple[Any, ...] = ()
        for p, n in zip(self._ps, self._ns):
            out += p.get(j if n == INF else e * n + j)
        return out

    def gather(self, idx: np.ndarray) -> Element:
        e, j = self._split(idx)
        out: Tuple[Any, ...] = ()
        for p, n in zip(self._ps, self._ns):
            out += p.gather(j if n == INF else e * n + j)
        return out


class Batch(Node):
    """``batch`` / ``padded_batch``: ``batch_fn`` over consecutive elements; one ``gather`` when
    the parent can and no padding is asked for."""

    def __init__(self, parent: Node, size: int, drop: bool, batch_fn: Optional[Callable[[Sequence[Element]], Element]]):
        n = len(parent)
        super().__init__((parent,), INF if n == INF else (n // size if drop else math.ceil(n / size)))
        self._p, self._n, self._size, self._fn = parent, n, size, batch_fn

    def get(self, i: int) -> Element:
        if self._n == INF:
            start, stop = i * self._size, (i + 1) * self._size
        else:
            e, k = divmod(i, self._length)
            start = e * self._n + k * self._size
            stop = e * self._n + min(self._n, (k + 1) * self._size)
        if self._fn is None and self._p.can_gather:
            return self._p.gather(np.arange(start, stop))
        elements = [self._p.get(j) for j in range(start, stop)]
        return (self._fn or stack)(elements)


class MapFn(Node):
    """``map``: the structured function on each element (``threads`` workers asked for)."""

    def __init__(self, parent: Node, fn: Callable[[Element], Element], threads: int):
        super().__init__((parent,), len(parent))
        self._p, self._fn = parent, fn
        self.threads = threads

    def get(self, i: int) -> Element:
        return self._fn(self._p.get(i))


class CacheStore:
    """What a ``cache`` keeps: the elements of its first complete pass (a pass left unfinished
    is thrown away, as TF's)."""

    def __init__(self):
        self.elements: Optional[List[Element]] = None


class FileCacheStore(CacheStore):
    """``cache(filename)``: the elements of the first complete pass, written to one file
    (``filename + ".tapejax-cache.npz"``: NumPy's format, no pickle, written to a temporary file
    and renamed, so a pass left unfinished or a crash leaves no file) and read from it by every
    later iteration, in this process or another, as TF's file cache."""

    SUFFIX = ".tapejax-cache.npz"

    def __init__(self, filename: str):
        self.path = filename + self.SUFFIX
        self._elements: Optional[List[Element]] = None

    @property   # pyright: ignore[reportIncompatibleVariableOverride]
    def elements(self) -> Optional[List[Element]]:
        if self._elements is None and os.path.exists(self.path):
            self._elements = _read_cache(self.path)
        return self._elements

    @elements.setter
    def elements(self, value: Optional[List[Element]]) -> None:
        self._elements = value
        if value is not None and not os.path.exists(self.path):
            _write_cache(self.path, value)


def _write_cache(path: str, elements: List[Element]) -> None:
    arrays: Dict[str, Any] = {}   # (Any: np.savez's **kwds would match its own keywords)
    dtypes: List[List[Optional[str]]] = []
    for i, el in enumerate(elements):
        row: List[Optional[str]] = []
        for k, c in enumerate(el):
            if c is None:
                row.append(None)
                continue
            if S.is_bytes(c):   # (every byte: lengths and the bytes, not an ``S`` array)
                row.append("string")
                arrays[f"{i}/{k}/bytes"], arrays[f"{i}/{k}/len"] = S.encode_strings(c)
                continue
            a = np.asarray(c)
            row.append(a.dtype.name)
            if a.dtype.kind == "V" or a.dtype.name == "bfloat16":   # (NumPy cannot store it natively)
                a = a.view(f"u{a.dtype.itemsize}")
            arrays[f"{i}/{k}"] = a
        dtypes.append(row)
    arrays["__meta__"] = np.asarray(json.dumps({"format": "tapejax-data-cache", "version": 2, "dtypes": dtypes}))
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-cache-", suffix=".npz", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_cache(path: str) -> List[Element]:
    with np.load(path, allow_pickle=False) as f:
        try:
            meta = json.loads(str(f["__meta__"]))
        except (KeyError, ValueError):
            raise DataLossError(None, None, f"{path} is not a tapejax.data cache file") from None
        out: List[Element] = []
        for i, row in enumerate(meta["dtypes"]):
            el = []
            for k, name in enumerate(row):
                if name is None:
                    el.append(None)
                    continue
                if name == "string":
                    el.append(S.decode_strings(f[f"{i}/{k}/bytes"], f[f"{i}/{k}/len"]))
                    continue
                a = f[f"{i}/{k}"]
                if a.dtype.kind == "S":   # (a version 1 cache: strings were ``S`` arrays)
                    el.append(S.string_value(a))
                    continue
                want = jnp.dtype(name)
                el.append(a.view(want) if a.dtype != want else a)
            out.append(tuple(el))
    return out


class CacheFill(Node):
    """``cache`` on its first pass over a random-access parent: records elements by index and
    hands the store the list once every index was computed in this pass."""

    def __init__(self, parent: Node, store: CacheStore):
        super().__init__((parent,), len(parent))
        self._p, self._store = parent, store
        self._seen: Dict[int, Element] = {}

    def get(self, i: int) -> Element:
        if self._length == INF:
            return self._p.get(i)
        k = i % self._length
        el = self._seen.get(k)
        if el is None:
            el = self._seen[k] = self._p.get(k)
            if len(self._seen) == self._length and self._store.elements is None:
                self._store.elements = [self._seen[j] for j in range(self._length)]
        return el


def to_iter(ds: Any) -> Any:
    """A stream over ``ds``: a random-access node goes through grain's ``to_iter_dataset``,
    with the worker threads its maps ask for (0: computed when asked for, in order)."""
    if isinstance(ds, grain.MapDataset):
        threads = ds.segment_threads() if isinstance(ds, Node) else 0
        return ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads))
    return ds
