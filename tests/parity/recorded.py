"""TensorFlow's results of the parity cases, recorded, so that a run need not run TF again.

Running a case under TensorFlow costs as much as running it under tapejax, and TF's result
depends only on the case's source, TensorFlow's (and tf_keras') release and NumPy's: a
recording made by one run is the oracle of the next ones while none of those changed.  So:

* ``TAPEJAX_PARITY_RECORD=1 python -m pytest tests/parity ...`` writes the result of each case
  TF runs (each case without a current recording) into ``recorded/<module>.json.gz``, one file
  per test module, merged under a file lock (each ``pytest-xdist`` worker writes what it ran);
  a run that is not recording names the modules whose cases ran TF live, to be recorded;
* any other run takes a case's TF result from its recording when the recording is *current*:
  made by the installed releases (``releases``) from the same source (``source_key``: the
  case's module, the other parity modules it uses, and the harness functions that make its
  inputs or shape its results; a change in any of them invalidates the module's recordings);
  otherwise TF runs, as before.  ``TAPEJAX_PARITY_LIVE=1`` always runs TF;
* a recorded result is only ever the first oracle: where tapejax differs from it, the harness
  runs the case under TF again (``harness.same_as_tf``), so a recording cannot make a case fail
  that live TF would pass, and a case passes only where tapejax agrees with a TF result.

Without TensorFlow installed, a current recording is still the oracle (the release check is
skipped: there is nothing to compare with), so a machine without TF checks every recorded case.

A result is stored as JSON: arrays as their dtype name, shape and raw bytes (base64), exceptions
by class name, message and class names, containers with their type (a namedtuple by module and
name).  ``FORMAT`` names the encoding and the meaning of a normalised result: change it when
``harness.normalize`` or the encoding changes.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import gzip
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

FORMAT = 1
RECORD_DIR = Path(__file__).parent / "recorded"

#: ``TAPEJAX_PARITY_RECORD=1``: results TF computes are written (``flush``).
RECORDING = {"on": os.environ.get("TAPEJAX_PARITY_RECORD", "") == "1"}
LIVE = os.environ.get("TAPEJAX_PARITY_LIVE", "") == "1"


class NotRecorded(Exception):
    """No current recording for a case (or one that cannot be read back)."""


# --------------------------------------------------------------------------
# What a recording depends on
# --------------------------------------------------------------------------

def releases() -> dict:
    """The releases TF's result depends on; None for one that is not installed."""
    out = {}
    for name, dists in (("tensorflow", ("tensorflow-cpu", "tensorflow")), ("tf_keras", ("tf_keras", "tf-keras")),
                        ("numpy", ("numpy",))):
        out[name] = None
        for d in dists:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                out[name] = importlib.metadata.version(d)
                break
    return out


#: Harness functions that make a case's inputs or shape its normalised result: their source is
#: part of every case's key (the rest of the harness, how results are compared, is not).
_HARNESS_INPUTS = ("A", "raises", "warned", "normalize", "init_array", "regression_data", "mlp_vars", "mlp",
                   "keras_init")

_KEYS: dict = {}


def _parity_package(module_name: str) -> str:
    return module_name.rsplit(".", 1)[0]


def source_key(case: Callable) -> str:
    """A digest of the source a case's TF result depends on: its module's file, the files of the
    other modules of the parity package its module uses (transitively), and ``_HARNESS_INPUTS``."""
    name = case.__module__
    key = _KEYS.get(name)
    if key is not None:
        return key
    package = _parity_package(name)
    harness = sys.modules[f"{package}.harness"]
    seen, todo, files = set(), [name], []
    while todo:
        mod_name = todo.pop()
        if mod_name in seen or mod_name == harness.__name__:
            continue
        seen.add(mod_name)
        mod = sys.modules[mod_name]
        files.append((mod_name, Path(mod.__file__).read_bytes()))
        for value in vars(mod).values():
            other = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
            if isinstance(other, str) and other.startswith(package + ".") and other not in seen:
                todo.append(other)
    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    for mod_name, data in sorted(files):
        h.update(mod_name.rsplit(".", 1)[1].encode() + b"\n" + data)
    for fn in _HARNESS_INPUTS:
        h.update(inspect.getsource(getattr(harness, fn)).encode())
    key = _KEYS[name] = h.hexdigest()[:20]
    return key


# --------------------------------------------------------------------------
# Encoding a normalised result
# --------------------------------------------------------------------------

def _np_dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))


def encode(x: Any) -> Any:
    from .harness import Raised, Returned, _Arr
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return {"int": str(x)}
    if isinstance(x, float):
        return {"float": float.hex(x)}
    if isinstance(x, complex):
        return {"complex": [float.hex(x.real), float.hex(x.imag)]}
    if isinstance(x, bytes):
        return {"bytes": base64.b64encode(x).decode()}
    if isinstance(x, _Arr):
        v = x.value
        if v.dtype.kind == "O":
            body = {"objects": [encode(e.item() if isinstance(e, np.generic) else e) for e in v.ravel().tolist()]}
        else:
            body = {"bytes": base64.b64encode(np.ascontiguousarray(v).tobytes()).decode(), "np": v.dtype.name}
        return {"array": x.dtype, "shape": list(x.shape), "value_shape": list(v.shape), **body}
    if isinstance(x, Raised):
        return {"raised": x.name, "message": x.message, "ok": list(x.ok), "mro": list(x.mro)}
    if isinstance(x, Returned):
        return {"returned": encode(x.value)}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        t = type(x)
        return {"namedtuple": [t.__module__, t.__qualname__], "items": [encode(v) for v in x]}
    if isinstance(x, (list, tuple)):
        return {type(x).__name__: [encode(v) for v in x]} if type(x) in (list, tuple) else _unsupported(x)
    if isinstance(x, dict) and type(x) is dict:
        return {"dict": [[encode(k), encode(v)] for k, v in x.items()]}
    return _unsupported(x)


def _unsupported(x):
    raise NotRecorded(f"a result of type {type(x).__name__} is not recorded")


def decode(d: Any) -> Any:
    from .harness import Raised, Returned, _Arr
    if d is None or isinstance(d, (bool, str)):
        return d
    if "int" in d:
        return int(d["int"])
    if "float" in d:
        return float.fromhex(d["float"])
    if "complex" in d:
        return complex(float.fromhex(d["complex"][0]), float.fromhex(d["complex"][1]))
    if "array" in d:
        shape = tuple(d["value_shape"])
        if "objects" in d:
            flat = [decode(e) for e in d["objects"]]
            v = np.empty(len(flat), dtype=object)
            v[:] = flat
            v = v.reshape(shape)
        else:
            v = np.frombuffer(base64.b64decode(d["bytes"]), dtype=_np_dtype(d["np"])).reshape(shape).copy()
        return _Arr(d["array"], tuple(d["shape"]), v)
    if "bytes" in d:
        return base64.b64decode(d["bytes"])
    if "raised" in d:
        return Raised(d["raised"], d["message"], tuple(d["ok"]), tuple(d["mro"]))
    if "returned" in d:
        return Returned(decode(d["returned"]))
    if "namedtuple" in d:
        mod_name, qualname = d["namedtuple"]
        try:
            t: Any = importlib.import_module(mod_name)
            for part in qualname.split("."):
                t = getattr(t, part)
        except (ImportError, AttributeError):
            raise NotRecorded(f"the namedtuple {mod_name}.{qualname} is gone") from None
        return t(*(decode(v) for v in d["items"]))
    if "list" in d:
        return [decode(v) for v in d["list"]]
    if "tuple" in d:
        return tuple(decode(v) for v in d["tuple"])
    if "dict" in d:
        return {decode(k): decode(v) for k, v in d["dict"]}
    raise NotRecorded(f"an unknown record {sorted(d)}")


# --------------------------------------------------------------------------
# Reading and writing
# --------------------------------------------------------------------------

_FILES: dict = {}
_NEW: dict = {}   # module -> {qualname: encoded}, written at the end of a recording run


def _path(module: str) -> Path:
    return RECORD_DIR / f"{module.rsplit('.', 1)[1]}.json.gz"


def _read(path: Path) -> Optional[dict]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def lookup(case: Callable) -> Any:
    """The current recording of ``case``'s normalised TF result; ``NotRecorded`` when there is none."""
    if LIVE:
        raise NotRecorded("recordings are not read in this run (TAPEJAX_PARITY_LIVE=1)")
    module = case.__module__
    if module not in _FILES:
        _FILES[module] = _read(_path(module))
    data = _FILES[module]
    if data is None:
        raise NotRecorded(f"{module} has no recording")
    if data.get("format") != FORMAT or data.get("source") != source_key(case):
        raise NotRecorded(f"{module}'s recording is of another source")
    wanted = releases()
    if wanted["tensorflow"] is not None and data.get("releases") != wanted:
        raise NotRecorded(f"{module}'s recording is of other releases ({data.get('releases')} vs {wanted})")
    entry = data["cases"].get(case.__qualname__)
    if entry is None:
        raise NotRecorded(f"{case.__qualname__} is not recorded")
    return decode(entry)


#: The modules of the cases whose TF results were computed (not read from a recording) this run.
RAN_LIVE: set = set()


def record(case: Callable, result: Any) -> None:
    """Note that ``case``'s TF result was computed; in a recording run, keep it to be written by
    ``flush``."""
    RAN_LIVE.add(case.__module__)
    if not RECORDING["on"]:
        return
    try:
        encoded = encode(result)
    except NotRecorded:
        return
    _NEW.setdefault(case.__module__, {})[case.__qualname__] = (source_key(case), encoded)


def flush() -> list:
    """Write the results kept by ``record``, merged into each module's file under a lock (other
    workers of the same run write theirs too); a file of another source or other releases is
    replaced.  Returns the files written."""
    written = []
    if not _NEW:
        return written
    RECORD_DIR.mkdir(exist_ok=True)
    rel = releases()
    with open(RECORD_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for module, cases in sorted(_NEW.items()):
            path = _path(module)
            source = next(iter(cases.values()))[0]
            data = _read(path)
            if data is None or data.get("format") != FORMAT or data.get("source") != source or data.get("releases") != rel:
                data = {"format": FORMAT, "source": source, "releases": rel, "cases": {}}
            data["cases"].update({q: e for q, (_k, e) in cases.items()})
            data["cases"] = dict(sorted(data["cases"].items()))
            tmp = path.with_suffix(".tmp")
            with gzip.GzipFile(tmp, "wb", mtime=0) as f:
                f.write(json.dumps(data, sort_keys=False, separators=(",", ":")).encode())
            os.replace(tmp, path)
            written.append(path)
    _NEW.clear()
    return written


# --------------------------------------------------------------------------
# A whole TF side run in a subprocess (Keras 3 on TF, tf.distribute on 4 devices)
# --------------------------------------------------------------------------

class SideRun:
    """TF's side of a comparison whose TF programs run in a subprocess, giving JSON: read from
    ``recorded/<module's name>.json.gz`` while current (the same ``sources`` files, the same releases and
    ``extra`` distributions), else run by ``run()`` (and written in a recording run).  ``check``
    runs a comparison on it and, where the comparison fails on a recording, on a live run."""

    def __init__(self, module: str, sources: list, run: Callable[[], Any], extra: tuple = ()):
        self.module, self.name, self.run, self.extra = module, module.rsplit(".", 1)[-1], run, extra
        h = hashlib.sha256(f"format {FORMAT}\n".encode())
        for path in sorted(str(p) for p in sources):
            h.update(Path(path).name.encode() + b"\n" + Path(path).read_bytes())
        self.source = h.hexdigest()[:20]
        self._live: Any = None
        self.recorded = False

    def _releases(self) -> dict:
        out = releases()
        for dist in self.extra:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = None
        return out

    def _path(self) -> Path:
        return RECORD_DIR / f"{self.name}.json.gz"

    def current(self) -> Optional[dict]:
        """The current recording (``{"result": ...}``), or None."""
        if LIVE:
            return None
        data, rel = _read(self._path()), self._releases()
        if (data is not None and data.get("format") == FORMAT and data.get("source") == self.source
                and (rel["tensorflow"] is None or data.get("releases") == rel)):
            return data
        return None

    def get(self) -> Any:
        """The recorded result when current, else a live run's."""
        data = self.current()
        if data is not None:
            self.recorded = True
            return data["result"]
        return self.live()

    def live(self) -> Any:
        """A live run's result (once; written in a recording run)."""
        if self._live is None:
            self._live = self.run()
            if RECORDING["on"]:
                RECORD_DIR.mkdir(exist_ok=True)
                data = {"format": FORMAT, "source": self.source, "releases": self._releases(),
                        "result": self._live}
                tmp = self._path().with_suffix(".tmp")
                with gzip.GzipFile(tmp, "wb", mtime=0) as f:
                    f.write(json.dumps(data, separators=(",", ":")).encode())
                os.replace(tmp, self._path())
            else:
                RAN_LIVE.add(self.module)
        return self._live

    def check(self, compare: Callable[[Any], None]) -> None:
        """``compare(tf_result)``; where it fails on the recording, ``compare`` of a live run
        decides (a recording never fails what live TF passes)."""
        want = self.get()
        try:
            compare(want)
        except AssertionError:
            if not self.recorded or self._live is not None:
                raise
            compare(self.live())
