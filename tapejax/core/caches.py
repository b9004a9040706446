"""Bounded LRU caches: every cache in tapejax is one of these, and ``cache_stats()`` lists them.

An ``LRU`` maps keys to values, keeps at most ``maxsize`` entries and drops
the least recently used one when a new entry would exceed that, counting
the drop in ``evictions``.  A lookup that hits moves the entry to the
most-recent end (one C-level ``OrderedDict.move_to_end``).  Inserting and
evicting take a lock, so concurrent threads never lose an entry or see the
size over its bound; a lookup racing an eviction is a miss, never an error.

Caches live either once per process (``LRU(name, maxsize)``) or once per
object (a ``Family``: one ``LRU`` per ``tapejax.function``, optimizer, op
...).  ``stats()`` reports, by cache name, ``CacheStats(size, maxsize,
evictions, instances)``: for a family, ``size`` is the largest member's size
and ``evictions`` the sum over the members alive and gone.
"""
import collections
import threading
import weakref
from typing import Any, Dict, Hashable, List, NamedTuple, Optional, Tuple, Union


class CacheStats(NamedTuple):
    """One cache's (or cache family's) numbers, as ``tapejax.cache_stats()`` reports them."""

    size: int
    maxsize: int
    evictions: int
    instances: int


_MISSING = object()
_REGISTRY: Dict[str, Union["LRU", "Family"]] = {}


class LRU:
    """A bounded mapping with least-recently-used eviction."""

    __slots__ = ("name", "maxsize", "evictions", "_data", "_lock", "_family", "__weakref__")

    def __init__(self, name: str, maxsize: int, *, family: Optional["Family"] = None, register: bool = True):
        _check_size(maxsize)
        self.name = name
        self.maxsize = maxsize
        self.evictions = 0
        self._data: "collections.OrderedDict[Hashable, Any]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self._family = family
        if register and family is None:
            _REGISTRY[name] = self

    def get(self, key: Hashable, default: Any = None) -> Any:
        data = self._data
        value = data.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            data.move_to_end(key)
        except KeyError:   # evicted by another thread in between: still a valid value to use
            pass
        return value

    def __getitem__(self, key: Hashable) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def __len__(self) -> int:
        with self._lock:   # (not between another thread's insert and its eviction)
            return len(self._data)

    def __iter__(self):
        return iter(list(self._data))

    def keys(self) -> List[Any]:
        return list(self._data.keys())

    def values(self) -> List[Any]:
        return list(self._data.values())

    def items(self) -> List[Tuple[Any, Any]]:
        return list(self._data.items())

    def setdefault(self, key: Hashable, value: Any) -> Any:
        """The value stored under ``key``; ``value`` is stored first when there is none."""
        with self._lock:
            old = self._data.get(key, _MISSING)
            if old is not _MISSING:
                self._data.move_to_end(key)
                return old
            self._data[key] = value
            self._evict()
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            self._evict()

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            return self._data.pop(key, default)

    def _evict(self) -> int:
        data = self._data
        n = 0
        while len(data) > self.maxsize:
            data.popitem(last=False)
            n += 1
        if n:
            self.evictions += n
            if self._family is not None:
                self._family._add_evictions(n)
        return n

    def resize(self, maxsize: int) -> int:
        """Change the bound (evicting the oldest entries when it shrinks)."""
        _check_size(maxsize)
        with self._lock:
            self.maxsize = maxsize
            return self._evict()

    def clear(self) -> None:
        """Drop every entry (not counted as evictions) and zero the eviction counter."""
        with self._lock:
            self._data.clear()
            self.evictions = 0

    def stats(self) -> CacheStats:
        return CacheStats(len(self._data), self.maxsize, self.evictions, 1)

    def __repr__(self):
        return f"LRU({self.name!r}, size={len(self._data)}, maxsize={self.maxsize})"


class Family:
    """One bounded LRU per object (per function, per optimizer ...), reported together."""

    def __init__(self, name: str, maxsize: int):
        _check_size(maxsize)
        self.name = name
        self.maxsize = maxsize
        self._members = weakref.WeakSet()
        self._evictions = 0
        self._lock = threading.Lock()
        _REGISTRY[name] = self

    def new(self) -> LRU:
        lru = LRU(self.name, self.maxsize, family=self)
        with self._lock:
            self._members.add(lru)
        return lru

    def _add_evictions(self, n: int) -> None:
        with self._lock:
            self._evictions += n

    def stats(self) -> CacheStats:
        with self._lock:
            members = list(self._members)
            evictions = self._evictions
        size = max((len(m) for m in members), default=0)
        return CacheStats(size, self.maxsize, evictions, len(members))

    def clear(self) -> None:
        with self._lock:
            members = list(self._members)
            self._evictions = 0
        for m in members:
            m.clear()


def _check_size(maxsize: Any) -> None:
    if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
        raise ValueError(f"maxsize must be a positive int; got {maxsize!r}")


def stats() -> Dict[str, CacheStats]:
    """``{cache name: CacheStats(size, maxsize, evictions, instances)}`` for every cache in tapejax."""
    return {name: c.stats() for name, c in sorted(_REGISTRY.items())}


def clear_all() -> None:
    for c in list(_REGISTRY.values()):
        c.clear()
