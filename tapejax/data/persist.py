"""``Dataset.save`` / ``Dataset.load`` and ``Dataset.snapshot``: datasets written to a directory.

The format is tapejax's own (TF's snapshot files, protobuf records, are not read or written):

```
path/
  tapejax-dataset.json       {"format": "tapejax.data.save", "version": 2, "element_spec": ...,
                              "cardinality": n, "compression": "GZIP" | "SNAPPY" | "",
                              "run": "run-<hex>", "shards": [{"index": s, "parts": [[file, count], ...]}]}
  run-<hex>/shard-00000000-part-00000.npz   ...
```

Each part holds up to ``PART`` elements of one shard as NumPy arrays (``np.savez``, read back with
``allow_pickle=False``): component ``k`` is one stacked array ``c{k}`` when every element of the
part has the same shape, else one array ``c{k}/{i}`` per element; a None component stores nothing.
A string component (version 2) is two arrays, ``c{k}.bytes`` (its values' bytes concatenated,
uint8) and ``c{k}.len`` (their lengths, int64, the stacked shape), or ``c{k}/{i}.bytes`` /
``c{k}/{i}.len`` per element, so that every byte survives; version 1 saves (strings as ``S``
arrays, trailing NUL bytes already lost) still load.
The JSON names the element structure (dicts, tuples, namedtuples, ``TensorSpec`` s with dtype
names), so ``load`` recovers ``element_spec`` and cardinality without being told.  A write goes
to a fresh ``run-*`` directory and the JSON is replaced last (``os.replace``): a save that stops
half-way leaves the previous save readable, and the older run directories are removed after.

``compression``: ``"GZIP"`` writes deflate-compressed parts (``np.savez_compressed``); TF's other
names (``"SNAPPY"``; anything else means none, case-sensitive as TF) are written uncompressed, but
the name is recorded and, as in TF, reading with a compression other than the one written fails
with ``DataLossError`` when the elements are read.

``snapshot(path)`` writes its input's elements under ``path/<fingerprint of the input>/`` during
the first iteration that runs to the end, and every later iteration (of this or an equal
pipeline, in this process or another) reads them from there; an iteration stopped early
writes nothing that is read later (its run directory is removed).
"""
import collections
import json
import os
import shutil
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import DataLossError, InvalidArgumentError, NotFoundError
from . import args as A, structure as S
from .build import Build
from .dataset import Dataset, helper, kind
from .functions import StructuredFunction
from .pystreams import Element, Elements, PyStream, read
from .structure import DatasetSpec, NoneTensorSpec

META = "tapejax-dataset.json"
FORMAT = "tapejax.data.save"
#: 2: string components as bytes and lengths (every byte kept); 1 (still read): as ``S`` arrays.
VERSION = 2
PART = 1024   # elements per part file


# -- arguments --------------------------------------------------------------------

def path_arg(path: Any, name: str = "path") -> str:
    if isinstance(path, bytes):
        path = path.decode()
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"Argument `{name}` must be a string (a directory path); got {path!r} of type "
                        f"{type(path).__name__} (Cannot convert {path!r} to EagerTensor of dtype string).")
    return os.fspath(path)


def compression_arg(compression: Any, default: Optional[str] = None) -> str:
    """TF's compression names: ``"GZIP"`` and ``"SNAPPY"`` (case-sensitive); anything else, None
    included, is no compression (``""``)."""
    if compression is None:
        compression = default or ""
    if not isinstance(compression, str):
        raise TypeError(f"Expected string for argument 'compression' not {compression!r} (got "
                        f"{type(compression).__name__}).")
    return compression if compression in ("GZIP", "SNAPPY") else ""


def function_arg(fn: Any, name: str) -> Any:
    if fn is not None and not callable(fn):
        raise ValueError(f"Argument `{name}` must be a callable. Received {name}={fn!r} (of type {type(fn)})")
    return fn


# -- the element structure as JSON -----------------------------------------------------

def encode_spec(spec: Any) -> Any:
    if isinstance(spec, dict):
        for k in spec:
            if not isinstance(k, str):
                raise TypeError(f"Dataset.save: element dict keys must be strings; got {k!r}.")
        return {"dict": [[k, encode_spec(v)] for k, v in spec.items()]}
    if isinstance(spec, tuple) and hasattr(type(spec), "_fields"):
        return {"namedtuple": type(spec).__name__, "fields": list(getattr(type(spec), "_fields")),
                "items": [encode_spec(v) for v in spec]}
    if isinstance(spec, tuple):
        return {"tuple": [encode_spec(v) for v in spec]}
    if isinstance(spec, NoneTensorSpec):
        return {"none": True}
    if isinstance(spec, DatasetSpec):
        raise TypeError("Dataset.save / snapshot: elements that are Datasets (from `window`) cannot be written "
                        "(tapejax's format holds tensors): flatten them first, e.g. with `flat_map`.")
    shape = None if spec.shape is None else [d for d in tuple(spec.shape)]
    return {"shape": shape, "dtype": spec.dtype.name}


def decode_spec(obj: Any) -> Any:
    if "dict" in obj:
        return {k: decode_spec(v) for k, v in obj["dict"]}
    if "namedtuple" in obj:
        cls = collections.namedtuple(obj["namedtuple"], obj["fields"])  # type: ignore[misc]
        return cls(*[decode_spec(v) for v in obj["items"]])
    if "tuple" in obj:
        return tuple(decode_spec(v) for v in obj["tuple"])
    if obj.get("none"):
        return NoneTensorSpec()
    from .strings import string_spec
    if obj["dtype"] == "string":
        return string_spec(obj["shape"])
    dtype = _dtypes.storage_dtype(np.dtype(_np_name(obj["dtype"])), "Dataset.load")
    return TensorSpec(obj["shape"], _dtypes.as_dtype(dtype))


def _np_name(name: str) -> Any:
    import jax.numpy as jnp
    return jnp.dtype(name)   # (knows bfloat16)


# -- parts ------------------------------------------------------------------------------

def _storable(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" or a.dtype.name == "bfloat16" else a


def _write_strings(arrays: Dict[str, Any], key: str, comps: List[Any]) -> None:
    """String components as ``key.bytes`` / ``key.len`` (stacked when their shapes agree), or per
    element ``key/i.bytes`` / ``key/i.len``: every byte kept (``structure.encode_strings``)."""
    shape = S.string_shape(comps[0])
    if all(S.string_shape(c) == shape for c in comps):
        arrays[f"{key}.bytes"], arrays[f"{key}.len"] = S.encode_strings(S.stack_strings(comps))
    else:
        for i, c in enumerate(comps):
            arrays[f"{key}/{i}.bytes"], arrays[f"{key}/{i}.len"] = S.encode_strings(c)


def write_part(path: str, elements: List[Element], compression: str) -> None:
    arrays: Dict[str, Any] = {}
    for k in range(len(elements[0])):
        if elements[0][k] is None:
            continue
        if S.is_bytes(elements[0][k]):
            _write_strings(arrays, f"c{k}", [el[k] for el in elements])
            continue
        comps = [np.asarray(el[k]) for el in elements]
        if all(c.shape == comps[0].shape and c.dtype == comps[0].dtype for c in comps):
            arrays[f"c{k}"] = _storable(np.stack(comps))
        else:
            for i, c in enumerate(comps):
                arrays[f"c{k}/{i}"] = _storable(c)
    with open(path, "wb") as f:
        (np.savez_compressed if compression == "GZIP" else np.savez)(f, **arrays)


def read_part(path: str, count: int, specs: List[Any]) -> Iterator[Element]:
    try:
        f = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise NotFoundError(None, None, f"Dataset.load: the part file {path} is missing.") from None
    except (ValueError, OSError) as e:
        raise DataLossError(None, None, f"Dataset.load: {path} is not a tapejax.data part file ({e}).") from None
    with f:
        columns: List[Any] = []
        for k, s in enumerate(specs):
            if isinstance(s, NoneTensorSpec):
                columns.append(None)
            elif f"c{k}.len" in f.files:
                columns.append(S.decode_strings(f[f"c{k}.bytes"], f[f"c{k}.len"]))
            elif f"c{k}/0.len" in f.files:
                columns.append([S.decode_strings(f[f"c{k}/{i}.bytes"], f[f"c{k}/{i}.len"]) for i in range(count)])
            elif f"c{k}" in f.files:
                columns.append(_typed(f[f"c{k}"], s))
            else:
                columns.append([_typed(f[f"c{k}/{i}"], s) for i in range(count)])
    for i in range(count):
        yield tuple(None if col is None else col[i] for col in columns)


def _typed(a: np.ndarray, spec: Any) -> np.ndarray:
    if getattr(spec.dtype, "name", None) == "string":
        return S.string_value(a)   # (a version 1 save: strings were ``S`` arrays)
    want = np.dtype(spec.dtype._np)
    if a.dtype == want:
        return a
    if a.dtype.itemsize == want.itemsize and a.dtype.kind == "u" and want.kind not in "iu":
        return a.view(want)   # (bfloat16 stored as its bits)
    return a.astype(want)


# -- writing ----------------------------------------------------------------------------

class Writer:
    """Writes elements into a new run directory under ``directory``, shard by shard, in parts;
    ``finish`` writes the JSON (the save is then visible), ``abort`` removes the run."""

    def __init__(self, directory: str, spec: Any, compression: str, shard_of: Optional[Callable[[Element], int]]):
        self._dir, self._compression, self._shard_of = directory, compression, shard_of
        self._spec_json = encode_spec(spec)
        os.makedirs(directory, exist_ok=True)
        self._run = f"run-{uuid.uuid4().hex}"
        os.makedirs(os.path.join(directory, self._run))
        self._buffers: Dict[int, List[Element]] = {}
        self._parts: Dict[int, List[Tuple[str, int]]] = {}
        self._count = 0

    def add(self, el: Element) -> None:
        s = 0 if self._shard_of is None else self._shard_of(el)
        buf = self._buffers.setdefault(s, [])
        buf.append(el)
        self._count += 1
        if len(buf) >= PART:
            self._flush(s)

    def _flush(self, s: int) -> None:
        buf = self._buffers.pop(s, [])
        if not buf:
            return
        parts = self._parts.setdefault(s, [])
        name = f"shard-{s:08d}-part-{len(parts):05d}.npz"
        write_part(os.path.join(self._dir, self._run, name), buf, self._compression)
        parts.append((f"{self._run}/{name}", len(buf)))

    def finish(self) -> None:
        for s in list(self._buffers):
            self._flush(s)
        meta = {"format": FORMAT, "version": VERSION, "element_spec": self._spec_json, "cardinality": self._count,
                "compression": self._compression, "run": self._run,
                "shards": [{"index": s, "parts": [list(p) for p in self._parts[s]]} for s in sorted(self._parts)]}
        tmp = os.path.join(self._dir, f".{META}.{self._run}")
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, os.path.join(self._dir, META))
        for name in os.listdir(self._dir):   # older runs
            if name.startswith("run-") and name != self._run:
                shutil.rmtree(os.path.join(self._dir, name), ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(os.path.join(self._dir, self._run), ignore_errors=True)


def _shard_function(shard_func: Optional[Callable[..., Any]], spec: Any, x64: bool) -> Optional[Callable]:
    if shard_func is None:
        return None
    fn = StructuredFunction(shard_func, spec, "Dataset.save()", x64)
    out = fn.output_spec
    if not (isinstance(out, TensorSpec) and out.shape == () and out.dtype.is_integer):
        raise InvalidArgumentError(None, None, f"`shard_func` must return a scalar int64; its return type is {out!r}.")

    def shard_of(el: Element) -> int:
        s = int(np.asarray(fn(el)[0]))
        if s < 0:
            raise InvalidArgumentError(None, None, f"`shard_func` must return a non-negative shard index; got {s}.")
        return s
    return shard_of


@helper
def save(dataset: Dataset, path: Any, compression: Any, shard_func: Any, checkpoint_args: Any) -> None:
    """``Dataset.save``: every element written under ``path`` (see the module docstring)."""
    path = path_arg(path)
    compression = compression_arg(compression)
    function_arg(shard_func, "shard_func")
    if checkpoint_args is not None and not isinstance(checkpoint_args, dict):
        raise TypeError(f"Argument `checkpoint_args` must be a dict of CheckpointManager arguments; got "
                        f"{checkpoint_args!r} of type {type(checkpoint_args).__name__}.")
    if dataset._cardinality == A.INFINITE:
        raise InvalidArgumentError(None, None, "Dataset.save: the dataset is infinite (cardinality "
                                   "INFINITE_CARDINALITY); take a finite part first, e.g. `dataset.take(n)`.")
    encode_spec(dataset.element_spec)   # (refused before anything is written)
    shard_of = _shard_function(shard_func, dataset.element_spec, dataset._x64)
    from .iterator import _IN_TRACE, in_trace
    if in_trace():
        raise ValueError(_IN_TRACE)
    writer = Writer(path, dataset.element_spec, compression, shard_of)
    try:
        for el in read(dataset, Build(dataset.options())):
            writer.add(el)
    except BaseException:
        writer.abort()
        raise
    writer.finish()


# -- reading -----------------------------------------------------------------------------

def read_meta(path: str) -> Optional[dict]:
    """The save's JSON, None when there is none."""
    f = os.path.join(path, META)
    if not os.path.isfile(f):
        return None
    try:
        with open(f) as fh:
            meta = json.load(fh)
    except ValueError:
        raise DataLossError(None, None, f"{f} is not a tapejax.data save description.") from None
    if meta.get("format") != FORMAT:
        raise DataLossError(None, None, f"{f} is not a tapejax.data save description.")
    if int(meta.get("version", 1)) > VERSION:
        raise DataLossError(None, None, f"{f} is a tapejax.data save of format version {meta['version']}; this "
                            f"tapejax reads versions up to {VERSION} (a newer tapejax wrote it).")
    return meta


@kind
class Shard(PyStream):
    """One shard of a save: its parts' elements in order."""

    def __init__(self, path: str, parts: List[Tuple[str, int]], spec: Any, written: str, wanted: str):
        self._path, self._parts, self._written, self._wanted = path, parts, written, wanted
        super().__init__((), spec, sum(int(n) for _, n in parts))

    def _elements(self, ctx: Build) -> Iterator[Element]:
        if self._written != self._wanted:
            raise DataLossError(None, None, f"Dataset.load: the data in {self._path} was written with compression "
                                f"{self._written or 'None'!r} and is read with {self._wanted or 'None'!r} (pass "
                                "the compression it was saved with).")
        specs = S.flatten(self.element_spec)
        for name, n in self._parts:
            yield from read_part(os.path.join(self._path, name), int(n), specs)


def _default_reader(datasets: Dataset) -> Dataset:
    """TF's default ``reader_func``: the shards interleaved, as many at once as there are CPUs."""
    return datasets.interleave(lambda x: x, cycle_length=os.cpu_count() or 1, num_parallel_calls=A.AUTOTUNE)


def reader_output(path: str, meta: dict, spec: Any, compression: str, reader_func: Any, x64: bool) -> Dataset:
    shards = [Shard(path, [(p[0], p[1]) for p in sh["parts"]], spec, meta["compression"], compression)
              for sh in meta["shards"]]
    if not shards:
        return Elements([], spec, x64)
    datasets = Elements([(d,) for d in shards], DatasetSpec(spec), x64)
    out = (reader_func or _default_reader)(datasets)
    if not isinstance(out, Dataset):
        raise TypeError(f"`reader_func` must return a Dataset; got {out!r} of type {type(out).__name__}.")
    return out


@kind
class Load(Dataset):
    """``Dataset.load``: the saved elements through ``reader_func`` (TF's default: the shards
    interleaved); ``element_spec`` and cardinality from the save's JSON."""

    def __init__(self, path: str, element_spec: Any, compression: str, reader_func: Any, x64: bool):
        meta = read_meta(path)
        if meta is None:
            raise NotFoundError(None, None, f"Could not find metadata file [{path}] (no tapejax.data save there: "
                                f"{os.path.join(path, META)} is missing).")
        self._saved_spec = decode_spec(meta["element_spec"])
        spec = self._saved_spec if element_spec is None else element_spec
        self._reader = reader_output(path, meta, spec, compression, reader_func, x64)
        super().__init__((), spec, int(meta["cardinality"]))
        self._x64 = x64

    def _build(self, ctx: Build) -> Any:
        _check_given(self._saved_spec, self._element_spec)
        return self._reader._build(ctx)


def _check_given(saved: Any, given: Any) -> None:
    a, b = S.flatten(saved), S.flatten(given)
    if len(a) != len(b):
        raise InvalidArgumentError(None, None, f"Dataset.load: `element_spec` has {len(b)} components; the saved "
                                   f"elements have {len(a)} ({saved!r}).")
    for k, (x, y) in enumerate(zip(a, b)):
        if getattr(x, "dtype", None) != getattr(y, "dtype", None):
            raise InvalidArgumentError(None, None, f"Data type mismatch at component {k}: expected "
                                       f"{getattr(y.dtype, 'name', None)} but got {getattr(x.dtype, 'name', None)} "
                                       "(Dataset.load's `element_spec` differs from the saved elements').")


@helper
def load(path: Any, element_spec: Any, compression: Any, reader_func: Any) -> Dataset:
    path = path_arg(path)
    compression = compression_arg(compression)
    function_arg(reader_func, "reader_func")
    return Load(path, element_spec, compression, reader_func, _dtypes.x64_enabled())


# -- snapshot ----------------------------------------------------------------------------

@kind
class Snapshot(PyStream):
    """``snapshot``: the first complete iteration writes under ``path/<fingerprint>``; later ones
    (of any equal pipeline) read from there."""

    def __init__(self, input: Dataset, path: str, compression: str, reader_func: Any, shard_func: Any):
        from .fingerprint import fingerprint
        encode_spec(input.element_spec)
        self._path, self._compression, self._reader_func = path, compression, reader_func
        self._dir = os.path.join(path, str(fingerprint(input)))
        self._shard_of = _shard_function(shard_func, input.element_spec, input._x64)
        super().__init__((input,), input.element_spec, input._cardinality)

    def _build(self, ctx: Build) -> Any:
        meta = read_meta(self._dir)
        if meta is not None:
            return reader_output(self._dir, meta, self.element_spec, meta["compression"], self._reader_func,
                                 self._x64)._build(ctx)
        return super()._build(ctx)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        writer = Writer(self._dir, self.element_spec, self._compression, self._shard_of)
        done = False
        try:
            for el in read(self._inputs[0], ctx):
                writer.add(el)
                yield el
            writer.finish()
            done = True
        finally:
            if not done:   # an iteration stopped early: its run is not kept
                writer.abort()


@helper
def snapshot(dataset: Dataset, path: Any, compression: Any, reader_func: Any, shard_func: Any) -> Dataset:
    path = path_arg(path)
    if not isinstance(compression, str) and compression is not None:
        raise TypeError(f"Expected string for argument 'compression' not {compression!r} (got "
                        f"{type(compression).__name__}).")
    function_arg(reader_func, "reader_func")
    function_arg(shard_func, "shard_func")
    comp = compression_arg("" if compression in (None, "AUTO") else compression)
    return Snapshot(dataset, path, comp, reader_func, shard_func)
