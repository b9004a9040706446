"""AutoGraph conversions kept on disk, beside the persistent compilation cache.

Converting a function with malt costs tens of milliseconds (parsing, static analysis, a dozen
AST passes).  A second process that finds its programs in JAX's persistent cache
(``config.set_compilation_cache``, ``TAPEJAX_COMPILATION_CACHE``) would spend much of its time
to the first step converting again.  So while that cache is on, each conversion's generated
source and source map are written to ``<directory>/tapejax-autograph/<key>.json``, and a later
process loads the generated module from there instead of converting.

Conversion reads the function's source, and its namespace (globals and closure) in two places
only: the namer keeps generated names apart from the names the namespace has, and the directives
pass looks names up to find ``set_loop_options`` / ``set_element_type``.  While converting, the
namespace is wrapped in a ``Recording`` that notes each question and its answer (whether a name
is there; what a looked-up value is, as far as conversion can tell: a directive, a module by
name, or something else).  A stored conversion is used only when the current namespace answers
every one of its questions alike.  The key covers the rest: the source text, its file and first
line (the source map points there), the free variables, the conversion options and future
features, and the versions of Python and malt and of this format.  Lambdas are not stored (two
on one line share source and line).

An entry is written to a temporary file and renamed (a reader never sees half of one), read
defensively (anything unexpected is a miss), and never needed: without the cache, or on any
error, conversion runs as always.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import os
import re
import sys
import tempfile
import types
from typing import Any, Dict, List, Optional, Tuple

from malt.lang import directives
from malt.pyct import inspect_utils, loader, origin_info

from . import config

#: Bumped whenever what is stored, or the transformer's output for the same input, changes.
FORMAT = 1
SUBDIR = "tapejax-autograph"

_DIRECTIVES = {id(directives.set_loop_options): "set_loop_options",
               id(directives.set_element_type): "set_element_type"}


_DIST_INFO = re.compile(r"diastatic[-_.]malt-(.+)\.dist-info$", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def _malt_version() -> str:
    """malt's installed version, read once and only when a key is made (the cache is on).

    ``importlib.metadata.version`` scans every distribution on ``sys.path`` (10-30 ms here): it
    would run on every process's first ``tapejax.function`` call.  ``package_version`` reads
    malt's ``*.dist-info`` folder beside the package instead."""
    import malt
    return package_version(os.path.dirname(os.path.abspath(malt.__file__)))


def package_version(pkg: str) -> str:
    """The version of the distribution installed as the package folder ``pkg``, from the
    ``diastatic_malt-<version>.dist-info`` folders beside it (all of them, where an install left
    two); where there is none (a source checkout), the modification times of the package's
    modules, which a change to them moves."""
    try:
        found = sorted(m.group(1) for m in map(_DIST_INFO.match, os.listdir(os.path.dirname(pkg))) if m)
    except OSError:
        found = []
    if found:
        return "|".join(found)
    stamps = []
    for root, _dirs, files in os.walk(pkg):
        stamps.extend(os.stat(os.path.join(root, f)).st_mtime_ns for f in files if f.endswith(".py"))
    return f"mtime-{max(stamps, default=0)}-{len(stamps)}"


def _versions() -> Tuple[Any, ...]:
    """What every key holds: this format's, Python's and malt's versions."""
    return (FORMAT, sys.version, _malt_version())


def _kind(value: Any) -> str:
    """What the directives pass can tell about a looked-up value."""
    name = _DIRECTIVES.get(id(value))
    if name is not None:
        return "directive:" + name
    if inspect.ismodule(value):
        return "module:" + str(getattr(value, "__name__", ""))
    return "other"


class Recording(dict):
    """A namespace that notes the questions conversion asks of it (see the module docstring)."""

    def __init__(self, namespace: Dict[str, Any]):
        super().__init__(namespace)
        self.asked: Dict[str, str] = {}

    def __contains__(self, name: object) -> bool:
        present = dict.__contains__(self, name)
        if isinstance(name, str):
            self.asked.setdefault(name, _kind(dict.__getitem__(self, name)) if present else "absent")
        return present

    def __getitem__(self, name: str) -> Any:
        value = dict.__getitem__(self, name)
        self.asked[name] = _kind(value)
        return value


def _answers(namespace: Dict[str, Any], asked: Dict[str, str]) -> bool:
    """Whether ``namespace`` answers the recorded questions as the converted one did."""
    for name, kind in asked.items():
        if name in namespace:
            if _kind(namespace[name]) != kind:
                return False
        elif kind != "absent":
            return False
    return True


def directory() -> Optional[str]:
    """Where conversions are kept now (None: the compilation cache is off)."""
    base = config.get_compilation_cache()
    return None if base is None else os.path.join(base, SUBDIR)


def key(fn: types.FunctionType, options_key: Any, future_features: Tuple[str, ...]) -> Optional[str]:
    """The entry's file name for converting ``fn`` (None: not stored)."""
    code = getattr(fn, "__code__", None)
    if code is None or fn.__name__ == "<lambda>":
        return None
    try:
        source = inspect_utils.getimmediatesource(fn)
        filename = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    if not source or not filename:
        return None
    options = sorted((k, repr(sorted(map(str, v)) if isinstance(v, (set, frozenset)) else v))
                     for k, v in vars(options_key).items())
    parts = (_versions(), options, tuple(future_features), os.path.abspath(filename),
             code.co_firstlineno, fn.__name__, code.co_freevars, source)
    return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()


@dataclasses.dataclass
class Stored:
    """A conversion as kept on disk."""

    source: str                 # the generated module
    outer: str                  # its factory function's name
    asked: Dict[str, str]       # the namespace's answers (``Recording``)
    source_map: List[list]      # [generated line, file, line, column, function, code line, comment]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Stored":
        d = json.loads(text)
        out = cls(str(d["source"]), str(d["outer"]), {str(k): str(v) for k, v in d["asked"].items()},
                  [list(r) for r in d["source_map"]])
        if not all(len(r) == 7 for r in out.source_map):
            raise ValueError("a source map row of another shape")
        return out


def load(path: str, namespace: Dict[str, Any]) -> Optional[Tuple[types.ModuleType, Any, Dict[Any, Any]]]:
    """(generated module, its unbound factory, source map) from the entry at ``path``, when there is
    one that ``namespace`` answers alike; None otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            stored = Stored.from_json(f.read())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not _answers(namespace, stored.asked):
        return None
    try:
        module, file_name = loader.load_source(stored.source, delete_on_exit=True)
        unbound = getattr(module, stored.outer)()
    except Exception:  # noqa: BLE001 - a stored module that does not load is a miss
        return None
    source_map = {
        origin_info.LineLocation(file_name, int(line)): origin_info.OriginInfo(
            origin_info.Location(fname, int(lno), int(col)), fn_name, code_line, comment)
        for line, fname, lno, col, fn_name, code_line, comment in stored.source_map}
    return module, unbound, source_map


def save(path: str, module: types.ModuleType, source_map: Dict[Any, Any], asked: Dict[str, str]) -> None:
    """Keep a conversion just made (its module, as ``loader.load_source`` wrote it)."""
    try:
        with open(str(module.__file__), encoding="utf-8") as f:
            source = f.read()
        outer = [n for n, v in vars(module).items()
                 if isinstance(v, types.FunctionType) and v.__module__ == module.__name__]
        if len(outer) != 1:
            return
        rows = [[loc.lineno, info.loc.filename, info.loc.lineno, info.loc.col_offset, info.function_name,
                 info.source_code_line, info.comment] for loc, info in source_map.items()]
        text = Stored(source, outer[0], dict(asked), rows).to_json()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, TypeError, ValueError):
        pass   # (a cache that cannot be written is no cache)


__all__ = ["FORMAT", "Recording", "SUBDIR", "Stored", "directory", "key", "load", "save"]
