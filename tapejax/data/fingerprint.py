"""``Dataset.fingerprint()``: a 64-bit hash of a dataset's plan, stable across processes.

TF hashes the dataset's graph: two datasets built the same way (same sources, same
transformations and arguments, same functions) have the same fingerprint, and ``snapshot``
keys its directory by it.  Here the plan is hashed: for each dataset, depth first, its kind
(class name) and its own attributes: numbers, strings, NumPy / JAX arrays (dtype, shape and
bytes), nested lists / tuples / dicts, and the user functions its transformations hold, each
by its code (bytecode, constants, names, nested code objects) and the values its closure
captures and its defaults (hashed by the same rules).  An object of another kind captured by a
function is hashed by its identity (``id``), so it never matches across processes; an
attribute of another kind on a dataset (a lock, a counter, a cache store) is run-time state and
is left out.
"""
import hashlib
import types
from typing import Any, Callable, List, Set

import jax
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import constant
from ..core.tensor import Tensor
from .dataset import Dataset, helper

#: Dataset attributes that are not part of what it computes (run-time state, derived values).
_SKIP = {"_inputs", "_element_spec", "_iterations", "_store", "_device_arrays", "_own_options",
         "_x64", "_dir", "_lock"}


def fingerprint(dataset: Any) -> int:
    """The plan's hash as an unsigned 64-bit integer."""
    h = hashlib.blake2b(digest_size=8)
    _Hasher(h.update).dataset(dataset)
    return int.from_bytes(h.digest(), "little")


@helper
def fingerprint_tensor(dataset: Dataset) -> Tensor:
    """``Dataset.fingerprint()``: uint64 (its low 32 bits as uint32 without JAX's 64-bit mode)."""
    h = fingerprint(dataset)
    return constant(np.uint64(h) if _dtypes.x64_enabled() else np.uint32(h & 0xFFFFFFFF))


class _Hasher:
    def __init__(self, update: Callable[[bytes], None]):
        self._u = update
        self._seen: Set[int] = set()

    def tag(self, s: str) -> None:
        self._u(s.encode() + b"\0")

    def dataset(self, d: Any) -> None:
        self.tag("dataset:" + type(d).__name__)
        for name in sorted(vars(d)):
            if name in _SKIP:
                continue
            self.tag(name)
            self.value(getattr(d, name), attribute=True)
        for x in d._inputs:
            self.dataset(x)

    def value(self, v: Any, attribute: bool = False) -> None:
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes, np.generic)):
            self.tag(f"{type(v).__name__}:{v!r}")
        elif isinstance(v, Tensor):
            self.value(np.asarray(v.numpy()))
        elif isinstance(v, (np.ndarray, jax.Array)):
            a = np.asarray(v)
            self.tag(f"array:{a.dtype.str}:{a.shape}")
            self._u(np.ascontiguousarray(a).tobytes() if a.dtype.kind != "O" else repr(a.tolist()).encode())
        elif isinstance(v, (list, tuple)):
            self.tag(f"{type(v).__name__}:{len(v)}")
            for x in v:
                self.value(x, attribute)
        elif isinstance(v, dict):
            self.tag(f"dict:{len(v)}")
            for k in sorted(v, key=repr):
                self.tag(repr(k))
                self.value(v[k], attribute)
        elif isinstance(v, Dataset):
            self.dataset(v)
        elif hasattr(v, "_fn") and callable(getattr(v, "_fn")):   # a StructuredFunction / DatasetFunction
            self.function(v._fn)
        elif isinstance(v, (types.FunctionType, types.MethodType)):
            self.function(v)
        elif hasattr(v, "dtype") and hasattr(v, "shape") and hasattr(v, "name") and not callable(v):   # a spec
            self.tag(repr(v))
        elif isinstance(v, type):
            self.tag(f"type:{v.__module__}.{v.__qualname__}")
        elif not attribute:
            self.tag(f"object:{type(v).__qualname__}:{id(v)}")

    def function(self, fn: Any) -> None:
        if isinstance(fn, types.MethodType):
            self.value(fn.__self__)
            fn = fn.__func__
        if not isinstance(fn, types.FunctionType):   # a callable object: its class and state
            self.tag(f"callable:{type(fn).__qualname__}")
            if id(fn) in self._seen:
                return
            self._seen.add(id(fn))
            self.value(getattr(fn, "__dict__", {}))
            return
        self.code(fn.__code__)
        self.value(fn.__defaults__)
        if fn.__closure__ and id(fn) not in self._seen:
            self._seen.add(id(fn))
            for cell in fn.__closure__:
                try:
                    self.value(cell.cell_contents)
                except ValueError:   # an empty cell
                    self.tag("empty-cell")

    def code(self, code: types.CodeType) -> None:
        self.tag(f"code:{code.co_name}")
        self._u(code.co_code)
        self.tag(repr(code.co_names))
        consts: List[Any] = []
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                self.code(c)
            else:
                consts.append(c)
        self.tag(repr(consts))
