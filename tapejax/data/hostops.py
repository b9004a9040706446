"""``tf.strings``' basic ops on host strings (tapejax has no string tensors).

A string value is a Python ``bytes`` (rank 0) or a NumPy object array of ``bytes`` (``str`` and
``S`` / ``U`` arrays, lists of them, are accepted and encoded as UTF-8), as string components of
``tapejax.data`` elements are (``structure.string_value``).  A string result has that form; a
numeric one (``length``, ``to_number``, ``regex_full_match``) is a tapejax Tensor.  The ops run
on the host, eagerly: in a dataset function over string components (which therefore runs
eagerly per element: ``hostfn``), or anywhere in eager code.  A Tensor argument cannot be a
string (``TypeError``); one holding a traced value (inside ``tapejax.function``) gets a
``TypeError`` saying where string ops run instead.

``to_hash_bucket_fast`` is TF's FarmHash bucketing (``farmhash``).

``split`` and ``bytes_split`` give a 1-D object array for a scalar string; for a batch TF gives a
``RaggedTensor`` of strings, which tapejax cannot hold (a RaggedTensor's values are a Tensor, and
there are no string tensors): split per element (in a ``map`` before ``batch``) instead
(``TypeError`` says so).
"""
import builtins
import contextlib
import re
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import jax
import numpy as np
from jax.core import Tracer as _Tracer

from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..ops.farmhash import fingerprint64
from . import structure as S
from .hostvalues import numeric_result

_WHERE = ("string ops run on the host, on Python bytes (and NumPy object arrays of bytes): call it in a "
          "tf.data map / filter function (which then runs eagerly per element) or in eager code, before the "
          "compiled step, and pass the step the numeric Tensors it gives")


class TracedStringError(TypeError):
    """A string op given a traced value (inside ``tapejax.function`` or a dataset function being
    compiled): string ops are host ops.  A dataset function raising it runs eagerly instead."""


_local = threading.local()


@contextlib.contextmanager
def perturbed() -> Iterator[None]:
    """While active (``hostfn``'s spec inference), the ops whose output length follows the data
    (``split``, ``bytes_split``, ``decode_raw``) give one element more: the dimensions that follow
    from them change, and become unknown in the spec, as in TF's shape inference."""
    _local.perturb = True
    try:
        yield
    finally:
        _local.perturb = False


def is_perturbed() -> bool:
    return getattr(_local, "perturb", False)


def host_strings(value: Any, op: str, arg: str) -> np.ndarray:
    """``value`` as an object array of ``bytes`` (rank 0 for one string); TypeError for a Tensor
    (tapejax has no string tensors) or a value that is not strings."""
    if isinstance(value, Tensor) or isinstance(value, jax.Array):
        inner = value.value if isinstance(value, Tensor) else value
        if isinstance(inner, _Tracer):
            raise TracedStringError(f"{op}: `{arg}` is a traced value (inside tapejax.function or another JAX trace), "
                            f"not a string: {_WHERE}.")
        raise TypeError(f"{op}: `{arg}` must be strings (Python bytes / str, or a NumPy array of them); got a "
                        f"Tensor of dtype {np.dtype(inner.dtype).name} (tapejax has no string tensors).")
    try:
        out = S.string_value(value)
    except TypeError:
        raise TypeError(f"{op}: `{arg}` must be strings (Python bytes / str, or a NumPy array of them); got "
                        f"{value!r}.") from None
    if isinstance(out, bytes):
        scalar = np.empty((), object)
        scalar[()] = out
        return scalar
    return out


def host_result(a: np.ndarray) -> Any:
    """An object array of ``bytes`` as a string value: ``bytes`` at rank 0."""
    return a[()] if a.ndim == 0 else a


def _map_strings(fn: Callable[[bytes], bytes], a: np.ndarray) -> Any:
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        out[i] = fn(v)
    return host_result(out)


def _numeric(fn: Callable[[bytes], Any], a: np.ndarray, dtype: Any) -> Tensor:
    out = np.empty(a.shape, dtype)
    for i, v in np.ndenumerate(a):
        out[i] = fn(v)
    return numeric_result(out)


def length(input: Any, name: Optional[str] = None, unit: str = "BYTE") -> Tensor:
    """``tf.strings.length``: bytes per string (``unit="UTF8_CHAR"``: characters), int32."""
    a = host_strings(input, "tf.strings.length", "input")
    if unit not in ("BYTE", "UTF8_CHAR"):
        raise ValueError(f"tf.strings.length: `unit` must be 'BYTE' or 'UTF8_CHAR'; got {unit!r}.")
    count = len if unit == "BYTE" else (lambda v: len(v.decode("utf-8", "replace")))
    return _numeric(count, a, np.int32)


def _one_string_only(a: np.ndarray, op: str) -> bytes:
    if a.ndim != 0:
        raise TypeError(f"{op}: a batch of strings (shape {a.shape}) gives a RaggedTensor of strings in TF, which "
                        "tapejax cannot hold (no string tensors): call it on one string at a time (in a Dataset.map "
                        "before batch, or a Python loop).")
    return bytes(a[()])


def split(input: Any, sep: Any = None, maxsplit: int = -1, name: Optional[str] = None) -> np.ndarray:
    """``tf.strings.split`` of one string: a 1-D object array of its parts (whitespace runs when
    ``sep`` is None, empty parts dropped; else at each ``sep``, empty parts kept)."""
    s = _one_string_only(host_strings(input, "tf.strings.split", "input"), "tf.strings.split")
    if sep is not None:
        sep = S.string_value(sep)
        if sep == b"":
            raise InvalidArgumentError(None, None, "tf.strings.split: `sep` must not be empty.")
    parts = s.split(sep, maxsplit) + ([b""] if is_perturbed() else [])
    return S.string_value(np.asarray(parts + [b""], dtype=object)[:-1])


def bytes_split(input: Any, name: Optional[str] = None) -> np.ndarray:
    """``tf.strings.bytes_split`` of one string: a 1-D object array of its bytes."""
    s = _one_string_only(host_strings(input, "tf.strings.bytes_split", "input"), "tf.strings.bytes_split")
    out = np.empty(len(s) + is_perturbed(), object)
    for i in range(len(out)):
        out[i] = s[i:i + 1]
    return out


_INT = re.compile(rb"\s*[+-]?\d+\s*")
_NUMBER_TYPES = ("float32", "float64", "int32", "int64")


def to_number(string_tensor: Any, out_type: Any = _dtypes.float32, name: Optional[str] = None) -> Tensor:
    """``tf.strings.to_number``: each string parsed as ``out_type`` (float32, float64, int32,
    int64); InvalidArgumentError for one that is not a number of that type."""
    a = host_strings(string_tensor, "tf.strings.to_number", "string_tensor")
    dt = _dtypes.as_dtype(out_type)
    if dt.name not in _NUMBER_TYPES:
        raise TypeError(f"tf.strings.to_number: `out_type` must be one of {', '.join(_NUMBER_TYPES)}; got "
                        f"{dt.name}.")
    np_dt = np.dtype(dt.name)

    def parse(v: bytes) -> Any:
        try:
            if np_dt.kind == "i":
                if not _INT.fullmatch(v):
                    raise ValueError(v)
                x = int(v)
                info = np.iinfo(np_dt)
                if not info.min <= x <= info.max:
                    raise ValueError(v)
                return x
            if b"_" in v or not v.strip():
                raise ValueError(v)
            return float(v)
        except ValueError:
            raise InvalidArgumentError(None, None, "StringToNumberOp could not correctly convert string: "
                                       + v.decode("latin-1")) from None
    return _numeric(parse, a, _dtypes.storage_dtype(np_dt, "out_type"))


def strip(input: Any, name: Optional[str] = None) -> Any:
    """``tf.strings.strip``: leading and trailing ASCII whitespace removed."""
    return _map_strings(bytes.strip, host_strings(input, "tf.strings.strip", "input"))


def _case(op: str, ascii_fn: Callable[[bytes], bytes], text_fn: Callable[[str], str]) -> Callable[..., Any]:
    def convert(input: Any, encoding: str = "", name: Optional[str] = None) -> Any:
        a = host_strings(input, f"tf.strings.{op}", "input")
        if encoding == "":
            return _map_strings(ascii_fn, a)
        if encoding.lower().replace("-", "") != "utf8":
            raise InvalidArgumentError(None, None, f"tf.strings.{op}: `encoding` must be '' or 'utf-8'; got "
                                       f"{encoding!r}.")
        return _map_strings(lambda v: text_fn(v.decode("utf-8")).encode("utf-8"), a)
    convert.__name__ = op
    convert.__doc__ = f"``tf.strings.{op}``: ASCII letters only, or Unicode with ``encoding='utf-8'``."
    return convert


lower = _case("lower", bytes.lower, str.lower)
upper = _case("upper", bytes.upper, str.upper)


def regex_full_match(input: Any, pattern: Any, name: Optional[str] = None) -> Tensor:
    """``tf.strings.regex_full_match``: whether each whole string matches ``pattern`` (Python's
    ``re`` syntax, which agrees with TF's RE2 on the common forms), bool."""
    a = host_strings(input, "tf.strings.regex_full_match", "input")
    p = S.string_value(pattern)
    try:
        rx = re.compile(p)
    except re.error as e:
        raise InvalidArgumentError(None, None, f"Invalid pattern: {p.decode('latin-1')}, error: {e}") from None
    return _numeric(lambda v: rx.fullmatch(v) is not None, a, np.bool_)


def substr(input: Any, pos: Any, len: Any, name: Optional[str] = None, unit: str = "BYTE") -> Any:
    """``tf.strings.substr`` with scalar ``pos`` / ``len``: ``len`` bytes from ``pos`` (from the
    end when negative); InvalidArgumentError when ``pos`` is outside a string."""
    a = host_strings(input, "tf.strings.substr", "input")
    if unit != "BYTE":
        raise InvalidArgumentError(None, None, "tf.strings.substr: tapejax supports unit='BYTE' only.")
    p, n = int(np.asarray(getattr(pos, "value", pos))), int(np.asarray(getattr(len, "value", len)))
    flat = list(a.reshape(-1))

    def one(i: int, v: bytes) -> bytes:
        size = builtins.len(v)
        start = p + size if p < 0 else p
        if not 0 <= start <= size:
            raise InvalidArgumentError(None, None, f"pos {p} out of range for string b'{v.decode('latin-1')}' at "
                                       f"index {i}")
        return v[start:start + max(n, 0)]
    out = np.empty(builtins.len(flat), object)
    for i, v in enumerate(flat):
        out[i] = one(i, v)
    return host_result(out.reshape(a.shape))


def join(inputs: Sequence[Any], separator: Any = "", name: Optional[str] = None) -> Any:
    """``tf.strings.join``: the strings of ``inputs`` (a list of equally shaped string values,
    scalars broadcast) joined element-wise with ``separator``."""
    if isinstance(inputs, (bytes, str, np.ndarray)) or not isinstance(inputs, (list, tuple)):
        raise TypeError(f"tf.strings.join: `inputs` must be a list of strings or string arrays; got {inputs!r}.")
    arrays = [host_strings(x, "tf.strings.join", f"inputs[{i}]") for i, x in enumerate(inputs)]
    sep = S.string_value(separator)
    try:
        parts = np.broadcast_arrays(*arrays) if arrays else []
    except ValueError:
        raise InvalidArgumentError(None, None, "tf.strings.join: the inputs' shapes do not match: "
                                   f"{[x.shape for x in arrays]}.") from None
    shape = parts[0].shape if parts else ()
    out = np.empty(shape, object)
    for i in np.ndindex(*shape):
        out[i] = sep.join(p[i] for p in parts)
    return host_result(out)


def reduce_join(inputs: Any, axis: Any = None, keepdims: bool = False, separator: Any = "",
                name: Optional[str] = None) -> Any:
    """``tf.strings.reduce_join``: strings joined along ``axis`` (all axes when None)."""
    a = host_strings(inputs, "tf.strings.reduce_join", "inputs")
    sep = S.string_value(separator)
    axes = tuple(range(a.ndim)) if axis is None else tuple(int(x) % max(a.ndim, 1) for x in np.atleast_1d(axis))
    moved = np.moveaxis(a, axes, tuple(range(a.ndim - builtins.len(axes), a.ndim)))
    lead = moved.shape[:a.ndim - builtins.len(axes)]
    flat = moved.reshape(lead + (-1,))
    out = np.empty(lead, object)
    for i in np.ndindex(*lead):
        out[i] = sep.join(flat[i])
    if keepdims:
        out = np.expand_dims(out, axes)
    return host_result(out)


def as_string(input: Any, precision: int = -1, scientific: bool = False, shortest: bool = False, width: int = -1,
              fill: str = "", name: Optional[str] = None) -> Any:
    """``tf.strings.as_string`` / ``tf.as_string``: numbers and bools formatted as TF does (floats
    ``%f``-style, six digits unless ``precision``)."""
    if isinstance(input, Tensor) and isinstance(input.value, _Tracer):
        raise TracedStringError(f"tf.strings.as_string: `input` is a traced value (inside tapejax.function or another JAX "
                        f"trace): {_WHERE}.")
    a = np.asarray(input.numpy() if isinstance(input, Tensor) else input)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"tf.strings.as_string: `input` must be numbers or bools; got dtype {a.dtype.name}.")
    spec = "%" + ("0" if fill == "0" else "") + (str(width) if width > -1 else "")
    if a.dtype.kind == "f":
        spec += (f".{precision}" if precision > -1 else "") + ("e" if scientific else "g" if shortest else "f")
    elif a.dtype.kind in "iu":
        spec += "d"

    def fmt(v: Any) -> bytes:
        if a.dtype.kind == "b":
            return b"true" if v else b"false"
        return (spec % v).encode()
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        out[i] = fmt(v)
    return host_result(out)


#: ``tf.strings``: these ops; every other TF name raises ``UnsupportedError`` naming integer ids.
def to_hash_bucket_fast(input: Any, num_buckets: int, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """``tf.strings.to_hash_bucket_fast``: ``Fingerprint64(s) % num_buckets`` of each string (an
    int64 Tensor, as tapejax holds int64)."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < 1:
        raise InvalidArgumentError(None, None, f"Value for attr 'num_buckets' of {num_buckets} must be at least "
                                   "minimum 1 (argument `num_buckets`)")
    a = host_strings(input, "tf.strings.to_hash_bucket_fast", "input")
    n = int(num_buckets)
    out = np.empty(a.shape, np.int64)
    for i, v in np.ndenumerate(a):
        out[i] = fingerprint64(v) % n
    return numeric_result(out.astype(_dtypes.storage_dtype(np.int64)))


OPS = {"as_string": as_string, "bytes_split": bytes_split, "join": join, "length": length, "lower": lower,
       "reduce_join": reduce_join, "regex_full_match": regex_full_match, "split": split, "strip": strip,
       "substr": substr, "to_hash_bucket_fast": to_hash_bucket_fast, "to_number": to_number, "upper": upper}



__all__ = ["OPS", "TracedStringError", "as_string", "is_perturbed", "perturbed", "bytes_split", "host_result", "host_strings", "join", "length", "lower",
           "reduce_join", "regex_full_match", "split", "strip", "substr", "to_hash_bucket_fast", "to_number",
           "upper"]
