"""``tf.io.gfile`` and ``tf.io.matching_files``: TF's file-system API on the local file system.

TF routes these through its C++ file systems (local files, ``gs://``, ``ram://``); tapejax has
the local one, on Python's ``os`` / ``shutil`` / ``glob``, with TF's behaviour where it differs
from Python's:

* Errors are TF's classes (``NotFoundError`` "<path>; No such file or directory",
  ``AlreadyExistsError``, ``FailedPreconditionError`` for a directory where a file is expected,
  ``PermissionDeniedError`` for reading a file opened for writing).
* ``GFile`` opens lazily: a missing file raises at the first read; a file opened for writing is
  created (truncated, or appended to with ``a``) at the first write, so ``GFile(p, "w")`` never
  written leaves ``p`` as it was.  Text mode reads give ``str``, binary mode ``bytes``; ``write``
  takes either.  Reading a closed file opens it again (TF's ``close`` only drops the buffer).
* ``mkdir`` of an existing directory does nothing; ``makedirs`` through a file is
  ``FailedPreconditionError``; ``rmtree`` of a file removes it; ``walk`` of a missing path
  yields nothing; ``copy`` and ``rename`` refuse an existing target unless ``overwrite``.
* Glob patterns are TF's (``GetMatchingPaths``): ``*`` and ``?`` within one path component
  (``**`` is ``*``), ``[...]`` / ``[^...]`` / ``[!...]`` classes, ``\\c`` escapes a character,
  names starting with a dot match.  ``glob`` gives each pattern's matches in the directory's
  order, pattern after pattern; ``matching_files`` sorts all of them (duplicates kept).
* Schemes other than local paths (``gs://``, ``s3://`` ...) raise ``UnimplementedError``
  naming the scheme.
"""
import glob as _glob
import os
import shutil
import sys
from typing import Any, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np

from ..core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnimplementedError,
)
from ..core.modules import new_module

#: Python's glob matches names that start with a dot with ``include_hidden`` (3.11+), as TF's.
_HIDDEN: "dict[str, Any]" = {"include_hidden": True} if sys.version_info >= (3, 11) else {}

_MODES = ("r", "w", "a", "r+", "w+", "a+")


def _path(path: Any, what: str = "path") -> str:
    """A local path from ``str`` / ``bytes`` / ``os.PathLike`` (TF's TypeError otherwise); a URL
    scheme other than ``file://`` is UnimplementedError."""
    if isinstance(path, bytes):
        path = path.decode("utf-8", "surrogateescape")
    elif isinstance(path, os.PathLike):
        path = os.fspath(path)
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
    if not isinstance(path, str):
        raise TypeError(f"Expected binary or unicode string, got {path!r} (argument `{what}`)")
    if path.startswith("file://"):
        return path[len("file://"):]
    scheme = path.split("://", 1)[0] if "://" in path else ""
    if scheme and scheme.isidentifier():
        raise UnimplementedError(None, None, f"File system scheme '{scheme}' not implemented (file: '{path}'): "
                                 "tapejax's tf.io.gfile reads local files only")
    return path


def _missing(path: str) -> NotFoundError:
    return NotFoundError(None, None, f"{path}; No such file or directory")


class GFile:
    """``tf.io.gfile.GFile(name, mode="r")``: a file object with TF's lazy opening (see the
    module docstring).  ``mode``: ``r``, ``w``, ``a``, ``r+``, ``w+``, ``a+``, each with ``b``
    for bytes."""

    def __init__(self, name: Any, mode: str = "r", encoding: str = "utf-8"):
        if not isinstance(mode, str) or mode.replace("b", "") not in _MODES:
            raise InvalidArgumentError(None, None, "mode is not 'r' or 'w' or 'a' or 'r+' or 'w+' or 'a+' "
                                       f"(argument `mode`, got {mode!r})")
        self._name = name
        self._path = _path(name, "name")
        self._mode = mode
        self._encoding = encoding
        self._binary = "b" in mode
        base = mode.replace("b", "")
        self._readable = base in ("r", "r+", "a+", "w+")
        self._writable = base in ("a", "w", "r+", "a+", "w+")
        self._append = "a" in base
        self._reader: Any = None
        self._writer: Any = None

    @property
    def name(self) -> Any:
        return self._name

    @property
    def mode(self) -> str:
        return self._mode

    def _open(self, allowed: bool, what: str, mode: str) -> Any:
        """The file opened with ``mode`` at its first use (TF's lazy opening), with TF's errors."""
        if not allowed:
            raise PermissionDeniedError(None, None, f"File isn't open for {what}")
        if os.path.isdir(self._path):
            raise FailedPreconditionError(None, None, f"{self._path}; Is a directory")
        try:
            return open(self._path, mode)
        except FileNotFoundError:
            raise _missing(self._path) from None

    def _read_file(self) -> Any:
        if self._reader is None:
            self._reader = self._open(self._readable, "reading", "rb")
        return self._reader

    def _write_file(self) -> Any:
        if self._writer is None:
            self._writer = self._open(self._writable, "writing", "ab" if self._append else "wb")
        return self._writer

    def _value(self, data: bytes) -> Any:
        return data if self._binary else data.decode(self._encoding)

    def size(self) -> int:
        """The file's length in bytes."""
        return stat(self._path).length

    def write(self, file_content: Any) -> None:
        """Append ``file_content`` (``str`` or ``bytes``)."""
        if isinstance(file_content, str):
            data = file_content.encode(self._encoding)
        elif isinstance(file_content, (bytes, bytearray, memoryview)):
            data = bytes(file_content)
        else:
            raise TypeError(f"Expected binary or unicode string, got {file_content!r} (argument `file_content`)")
        self._write_file().write(data)

    def read(self, n: int = -1) -> Any:
        """``n`` bytes from the current position (all of the rest with -1)."""
        f = self._read_file()
        return self._value(f.read() if n is None or n < 0 else f.read(n))

    def readline(self) -> Any:
        """The next line with its newline; empty at the end."""
        return self._value(self._read_file().readline())

    def readlines(self) -> List[Any]:
        return [self._value(line) for line in self._read_file().readlines()]

    def seek(self, offset: Optional[int] = None, whence: int = 0, position: Optional[int] = None) -> None:
        """Move the read position: ``whence`` 0 (start), 1 (current), 2 (end)."""
        f = self._read_file()
        if offset is None and position is None:
            raise TypeError("seek(): offset argument required")
        if offset is not None and position is not None:
            raise TypeError("seek(): offset and position may not be set simultaneously.")
        if whence not in (0, 1, 2):
            raise InvalidArgumentError(None, None, f"Invalid whence argument: {whence}. Valid values are 0, 1, or 2.")
        target = int(offset if offset is not None else position)   # pyright: ignore[reportArgumentType]
        f.seek(target, whence)

    def tell(self) -> int:
        """The read position (the bytes written so far, for a write-only file)."""
        if self._readable:
            return self._read_file().tell()
        return self._write_file().tell()

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def seekable(self) -> bool:
        return True

    def __enter__(self) -> "GFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def next(self) -> Any:
        return self.__next__()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class FileStatistics(NamedTuple):
    """``tf.io.gfile.stat``'s record."""
    length: int
    mtime_nsec: int
    is_directory: bool


def exists(path: Any) -> bool:
    """Whether ``path`` (a file or a directory) exists."""
    return os.path.exists(_path(path))


def isdir(path: Any) -> bool:
    return os.path.isdir(_path(path))


def listdir(path: Any) -> List[str]:
    """The names in directory ``path`` (the directory's order); NotFoundError if it is not one."""
    p = _path(path)
    if not os.path.isdir(p):
        raise NotFoundError(None, None, f"Could not find directory {p}")
    return os.listdir(p)


def mkdir(path: Any) -> None:
    """Make directory ``path`` (its parent must exist; an existing directory is left as it is)."""
    p = _path(path)
    if os.path.isdir(p):
        return
    parent = os.path.dirname(os.path.normpath(p))
    if parent and not os.path.isdir(parent):
        raise _missing(p)
    try:
        os.mkdir(p)
    except FileExistsError:
        raise AlreadyExistsError(None, None, f"{p}; File exists") from None


def makedirs(path: Any) -> None:
    """Make directory ``path`` and its missing parents."""
    p = _path(path)
    head = os.path.normpath(p)
    while head and not os.path.exists(head):
        head = os.path.dirname(head)
    if head and not os.path.isdir(head):
        raise FailedPreconditionError(None, None, f"{head} is not a directory")
    os.makedirs(p, exist_ok=True)


def remove(path: Any) -> None:
    """Remove file ``path`` (a directory: FailedPreconditionError)."""
    p = _path(path)
    if os.path.isdir(p):
        raise FailedPreconditionError(None, None, f"{p}; Is a directory")
    try:
        os.remove(p)
    except FileNotFoundError:
        raise _missing(p) from None


def rmtree(path: Any) -> None:
    """Remove directory ``path`` and everything under it (a file: just it)."""
    p = _path(path)
    if not os.path.lexists(p):
        raise NotFoundError(None, None, f"{p} not found")
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    else:
        os.remove(p)


def _refuse_existing(dst: str, overwrite: bool) -> None:
    if not overwrite and os.path.exists(dst):
        raise AlreadyExistsError(None, None, "file already exists")


def copy(src: Any, dst: Any, overwrite: bool = False) -> None:
    """Copy file ``src`` to ``dst``."""
    s, d = _path(src, "src"), _path(dst, "dst")
    _refuse_existing(d, overwrite)
    if not os.path.exists(s):
        raise _missing(s)
    if os.path.isdir(s):
        raise FailedPreconditionError(None, None, f"{s}; Is a directory")
    try:
        shutil.copyfile(s, d)
    except FileNotFoundError:
        raise _missing(d) from None


def rename(src: Any, dst: Any, overwrite: bool = False) -> None:
    """Rename (move) ``src`` to ``dst``."""
    s, d = _path(src, "src"), _path(dst, "dst")
    _refuse_existing(d, overwrite)
    if not os.path.lexists(s):
        raise _missing(s)
    try:
        os.replace(s, d)
    except FileNotFoundError:
        raise _missing(d) from None
    except IsADirectoryError:
        raise FailedPreconditionError(None, None, f"{d}; Is a directory") from None


def stat(path: Any) -> FileStatistics:
    """``length``, ``mtime_nsec`` and ``is_directory`` of ``path``."""
    p = _path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise _missing(p) from None
    return FileStatistics(int(st.st_size), int(st.st_mtime_ns), os.path.isdir(p))


def walk(top: Any, topdown: bool = True, onerror: Any = None) -> Iterator[Tuple[str, List[str], List[str]]]:
    """``(directory, subdirectories, files)`` for ``top`` and every directory under it; a missing
    ``top`` yields nothing."""
    t = _path(top, "top")
    if not os.path.isdir(t):
        return
    for entry in os.walk(t, topdown=topdown, onerror=onerror):
        yield entry


def join(path: Any, *paths: Any) -> str:
    """``os.path.join`` of the parts (``str`` or ``bytes``-free ``PathLike``)."""
    return os.path.join(os.fspath(path), *[os.fspath(p) for p in paths])


def get_registered_schemes() -> List[str]:
    """The schemes tapejax's ``gfile`` reads: the local file system (``''`` and ``file``)."""
    return ["", "file"]


def _python_pattern(pattern: str) -> str:
    """TF's glob syntax in Python's: ``\\c`` becomes ``[c]``, ``[^`` becomes ``[!``."""
    out = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            out.append(nxt if in_class or nxt not in "*?[]" else f"[{nxt}]")
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append("[")
            if i + 1 < n and pattern[i + 1] == "^":
                out.append("!")
                i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append("]")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def match_paths(pattern: Any) -> List[str]:
    """The paths matching one pattern in TF's syntax, in the directory's order
    (``Dataset.list_files`` and the file readers match with it too)."""
    p = _path(pattern, "pattern")
    return _glob.glob(_python_pattern(p), **_HIDDEN)


def glob(pattern: Any) -> List[str]:
    """The paths matching ``pattern`` (one pattern, or an iterable of them; TF's syntax, see the
    module docstring), each pattern's in the directory's order."""
    if isinstance(pattern, (str, bytes, os.PathLike)):
        return match_paths(pattern)
    if not isinstance(pattern, Iterable):
        raise TypeError(f"Expected binary or unicode string, got {pattern!r} (argument `pattern`)")
    return [m for p in pattern for m in match_paths(p)]


def matching_files(pattern: Any, name: Optional[str] = None) -> np.ndarray:
    """``tf.io.matching_files``: the paths matching ``pattern`` (a string or a vector of them), all
    patterns' matches sorted (duplicates kept), as a string vector (NumPy bytes, tapejax's string
    values)."""
    if hasattr(pattern, "numpy") and not isinstance(pattern, np.ndarray):
        pattern = pattern.numpy()
    arr = np.asarray(pattern, dtype=object)
    if arr.ndim > 1:
        raise InvalidArgumentError(None, None, "Input patterns tensor must be scalar or vector, but had shape: "
                                   f"{list(arr.shape)} (argument `pattern`)")
    patterns = [arr.item()] if arr.ndim == 0 else list(arr)
    for p in patterns:
        if not isinstance(p, (str, bytes)):
            raise TypeError(f"Cannot convert {p!r} to EagerTensor of dtype string (argument `pattern`)")
    found = sorted(os.fsencode(m) for p in patterns for m in match_paths(p))
    out = np.empty(len(found), dtype=object)
    out[:] = found
    return out


gfile = new_module(
    "tapejax.io.gfile", "``tf.io.gfile``: TF's file API on the local file system (tapejax.data.gfile).",
    {"GFile": GFile, "copy": copy, "exists": exists, "get_registered_schemes": get_registered_schemes,
     "glob": glob, "isdir": isdir, "join": join, "listdir": listdir, "makedirs": makedirs, "mkdir": mkdir,
     "remove": remove, "rename": rename, "rmtree": rmtree, "stat": stat, "walk": walk})

__all__ = ["FileStatistics", "GFile", "copy", "exists", "get_registered_schemes", "gfile", "glob", "isdir", "join",
           "listdir", "makedirs", "match_paths", "matching_files", "mkdir", "remove", "rename", "rmtree", "stat", "walk"]
