"""More of ``tf.strings`` on host strings: regular-expression replacement, ``format``, the keyed
and legacy hash buckets, segment joins, n-grams and the Unicode conversions.

Strings are host values as in ``hostops`` (``bytes`` / NumPy object arrays of ``bytes``).

* ``regex_replace``: RE2's syntax as Python's ``re`` reads it (the common subset is the same;
  ``re`` also accepts look-arounds and back-references, which RE2 refuses), matching on the
  UTF-8 text, ``\\d`` / ``\\w`` / ``\\s`` / ``\\b`` ASCII classes as RE2's; the rewrite's
  ``\\0``..``\\9`` are the groups, ``\\\\`` a backslash.  A bad pattern
  is TF's InvalidArgumentError.
* ``format``: TF's summaries of each Tensor (``summarize`` elements at each end of a longer
  dimension, ``...`` between; floats in TF's shortest form among ``%.6g`` / ``%.9g`` (``%.15g`` /
  ``%.17g`` for float64) that reads back exactly; booleans 1 / 0; strings quoted).
* ``to_hash_bucket`` (TF's ``Hash64``) and ``to_hash_bucket_strong`` (SipHash-2-4 with the
  two-word key), both equal to TF's (``farmhash``).
* ``ngrams`` over the last axis of a dense string Tensor (TF's widths, padding and
  ``preserve_short_sequences``); ``unicode_decode`` / ``unicode_decode_with_offsets`` of one
  string give vectors, of a batch RaggedTensors (ragged rank = the batch's rank, as TF's; code
  points int32, byte offsets int64); ``unicode_split`` / ``unicode_split_with_offsets`` of one
  string give each character's bytes in the input's encoding (for a batch TF gives a RaggedTensor
  of strings, which tapejax cannot hold: split per element in a ``map`` before ``batch``);
  ``unicode_encode`` of a vector (or of the rows of a matrix), ``unicode_transcode`` elementwise;
  ``unicode_script`` (``unicode_scripts``: ICU's script codes, a recorded op).  Encodings:
  UTF-8, UTF-16-BE / -LE, UTF-32-BE / -LE; ``errors``: ``replace`` (TF's default, one
  ``replacement_char`` per maximal invalid subsequence, as ICU), ``ignore``, ``strict``
  (InvalidArgumentError); ``replace_control_characters`` replaces U+0000..U+001F.
"""
import codecs
import re
import threading
import types
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.modules import new_module
from ..core.tensor import Tensor
from ..ops.farmhash import siphash24, tf_hash64
from ..ops.unsupported import unsupported
from . import hostops
from .hostops import host_result, host_strings
from .hostvalues import numeric_result
from .unicode_scripts import unicode_script


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _rewriter(rewrite: str) -> Callable[["re.Match[str]"], str]:
    parts: List[Any] = []
    i = 0
    while i < len(rewrite):
        c = rewrite[i]
        if c == "\\" and i + 1 < len(rewrite):
            nxt = rewrite[i + 1]
            if nxt.isdigit():
                parts.append(int(nxt))
            else:
                parts.append(nxt)
            i += 2
            continue
        parts.append(c)
        i += 1

    def repl(m: "re.Match[str]") -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)
    return repl


def regex_replace(input: Any, pattern: Any, rewrite: Any, replace_global: bool = True,  # noqa: A002
                  name: Optional[str] = None) -> Any:
    """``tf.strings.regex_replace``: every match (the first only without ``replace_global``) of
    ``pattern`` replaced by ``rewrite``."""
    a = host_strings(input, "tf.strings.regex_replace", "input")
    pat = _text(host_strings(pattern, "tf.strings.regex_replace", "pattern").item())
    rw = _text(host_strings(rewrite, "tf.strings.regex_replace", "rewrite").item())
    try:
        rx = re.compile(pat, re.ASCII)   # (RE2's \d \w \s \b are ASCII classes)
    except re.error as e:
        raise InvalidArgumentError(None, None, f"Invalid pattern: {pat}, error: {e} (argument `pattern`)") from None
    repl = _rewriter(rw)
    count = 0 if replace_global else 1
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        out[i] = _bytes(rx.sub(repl, _text(v), count=count))
    return host_result(out)


# -- format --------------------------------------------------------------------------------------

def _float(v: float, digits: "tuple[int, int]", dtype: Any) -> str:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    short = "%.*g" % (digits[0], v)
    if dtype(float(short)) == dtype(v):
        return short
    return "%.*g" % (digits[1], v)


def _scalar(v: Any, kind: str, dtype: Any) -> str:
    if kind == "b":
        return "1" if v else "0"
    if kind == "O":
        return '"' + _text(v) + '"'
    if kind == "c":
        return "?"
    if kind == "f":
        wide = np.dtype(dtype) == np.float64
        return _float(float(v), (15, 17) if wide else (6, 9), np.float64 if wide else np.float32)
    return str(int(v))


def _summary(a: np.ndarray, summarize: int) -> str:
    kind, dtype = a.dtype.kind, a.dtype
    if a.ndim == 0:
        return _scalar(a.item(), kind, dtype)
    nd = a.ndim

    def dim(x: np.ndarray, depth: int) -> str:
        n = x.shape[0]
        cut = summarize >= 0 and n > 2 * summarize
        idx: List[Any] = list(range(summarize)) + [None] + list(range(n - summarize, n)) if cut else list(range(n))
        if depth == nd - 1:
            items = ["..." if i is None else _scalar(x[i], kind, dtype) for i in idx]
            return "[" + " ".join(items) + "]"
        sep = "\n" * (nd - depth - 1) + " " * (depth + 1)
        items = ["..." if i is None else dim(x[i], depth + 1) for i in idx]
        return "[" + sep.join(items) + "]"
    return dim(a, 0)


def format(template: str, inputs: Any, placeholder: str = "{}", summarize: int = 3,  # noqa: A001
           name: Optional[str] = None) -> bytes:
    """``tf.strings.format``: ``template`` with each ``placeholder`` replaced by the summary of the
    next input (a Tensor, a number or host strings)."""
    values = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    pieces = template.split(placeholder)
    if len(pieces) - 1 != len(values):
        raise ValueError(f"The template expects {len(pieces) - 1} tensors, but the inputs only has {len(values)}. "
                         "Please ensure the number of placeholders in template matches inputs length.")
    out = [pieces[0]]
    for v, rest in zip(values, pieces[1:]):
        if isinstance(v, (bytes, str)) or (isinstance(v, np.ndarray) and v.dtype.kind in "OSU"):
            arr = host_strings(v, "tf.strings.format", "inputs")
        else:
            t = v if isinstance(v, Tensor) else convert_to_tensor(v)
            arr = np.asarray(t)
            if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16" or arr.dtype == np.float16:
                arr = arr.astype(np.float32)
        out.append(_summary(arr, int(summarize)))
        out.append(rest)
    return "".join(out).encode()


# -- hashing and joins ---------------------------------------------------------------------------

def _buckets(num_buckets: Any, op: str) -> int:
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < 1:
        raise InvalidArgumentError(None, None, f"{op}: Value for attr 'num_buckets' of {num_buckets} must be at least "
                                   "minimum 1 (argument `num_buckets`)")
    return int(num_buckets)


def _hash_buckets(input: Any, num_buckets: Any, op: str, fn: Callable[[bytes], int]) -> Tensor:  # noqa: A002
    n = _buckets(num_buckets, op)
    a = host_strings(input, op, "input")
    out = np.empty(a.shape, np.int64)
    for i, v in np.ndenumerate(a):
        out[i] = fn(v) % n
    return numeric_result(out.astype(_dtypes.storage_dtype(np.int64)))


def to_hash_bucket(string_tensor: Any, num_buckets: int, name: Optional[str] = None) -> Tensor:
    """``tf.strings.to_hash_bucket``: TF's legacy ``Hash64`` of each string, modulo ``num_buckets``."""
    return _hash_buckets(string_tensor, num_buckets, "tf.strings.to_hash_bucket", tf_hash64)


def to_hash_bucket_strong(input: Any, num_buckets: int, key: Sequence[int], name: Optional[str] = None) -> Tensor:  # noqa: A002
    """``tf.strings.to_hash_bucket_strong``: SipHash-2-4 under ``key`` (two integers)."""
    k = list(key)
    if len(k) != 2:
        raise InvalidArgumentError(None, None, f"Key must have 2 elements, got {len(k)} (argument `key`)")
    words = (int(k[0]), int(k[1]))
    return _hash_buckets(input, num_buckets, "tf.strings.to_hash_bucket_strong", lambda s: siphash24(words, s))


def unsorted_segment_join(inputs: Any, segment_ids: Any, num_segments: Any, separator: str = "",
                          name: Optional[str] = None) -> Any:
    """``tf.strings.unsorted_segment_join``: the strings of each segment joined in input order
    (an empty segment gives ``b""``)."""
    a = host_strings(inputs, "tf.strings.unsorted_segment_join", "inputs")
    ids = np.asarray(segment_ids)
    n = int(np.asarray(num_segments))
    if ids.shape != a.shape[:ids.ndim]:
        raise InvalidArgumentError(None, None, f"segment_ids.shape = {list(ids.shape)} does not prefix "
                                   f"inputs.shape = {list(a.shape)} (argument `segment_ids`)")
    inner = a.shape[ids.ndim:]
    rows = a.reshape((-1,) + inner)
    groups: List[List[Any]] = [[] for _ in range(n)]
    for k, s in enumerate(ids.reshape(-1).tolist()):
        if s >= n:
            raise InvalidArgumentError(None, None, f"segment_ids[{k}] = {s} is out of range [0, {n})")
        if s >= 0:
            groups[s].append(rows[k])
    sep = separator.encode() if isinstance(separator, str) else bytes(separator)
    out = np.empty((n,) + inner, object)
    for s, members in enumerate(groups):
        if not inner:
            out[s] = sep.join(members)
            continue
        for idx in np.ndindex(*inner):
            out[(s,) + idx] = sep.join(m[idx] for m in members)
    return host_result(out)


def ngrams(data: Any, ngram_width: Any, separator: str = " ", pad_values: Any = None, padding_width: Any = None,
           preserve_short_sequences: bool = False, name: Optional[str] = None) -> Any:
    """``tf.strings.ngrams`` over the last axis (see the module docstring)."""
    a = host_strings(data, "tf.strings.ngrams", "data")
    if a.ndim == 0:
        raise ValueError("Data must have rank>0 (argument `data`)")
    widths = [int(w) for w in (ngram_width if isinstance(ngram_width, (list, tuple)) else [ngram_width])]
    if any(w < 1 for w in widths):
        raise InvalidArgumentError(None, None, f"ngram_width must be > 0, got {widths} (argument `ngram_width`)")
    sep = separator.encode()
    if pad_values is None:
        left = right = b""
        pad = 0
    else:
        if isinstance(pad_values, (list, tuple)):
            if len(pad_values) != 2:
                raise ValueError("pad_values must be a string, tuple or list of length 2 (argument `pad_values`)")
            left, right = (p.encode() if isinstance(p, str) else p for p in pad_values)
        else:
            left = right = pad_values.encode() if isinstance(pad_values, str) else pad_values
        if padding_width is not None and int(padding_width) < 1:
            raise ValueError("padding_width must be greater than 0 (argument `padding_width`)")
        pad = -1 if padding_width is None else int(padding_width)
    rows = a.reshape(-1, a.shape[-1])
    result = []
    for row in rows:
        seq = list(row)
        grams: List[bytes] = []
        for w in widths:
            p = (w - 1 if pad == -1 else min(pad, w - 1)) if pad_values is not None else 0
            padded = [left] * p + seq + [right] * p
            grams += [sep.join(padded[i:i + w]) for i in range(len(padded) - w + 1)]
        if not grams and preserve_short_sequences and seq:
            grams = [sep.join([left] * (1 if pad_values is not None else 0) + seq
                              + [right] * (1 if pad_values is not None else 0))]
        result.append(grams)
    count = len(result[0]) if result else 0
    out = np.empty((len(result), count), object)
    for k, g in enumerate(result):
        out[k, :] = g
    return host_result(out.reshape(a.shape[:-1] + (count,)))


# -- Unicode -------------------------------------------------------------------------------------

_CODECS = {"UTF-8": "utf-8", "UTF-16-BE": "utf-16-be", "UTF-32-BE": "utf-32-be", "UTF-16-LE": "utf-16-le",
           "UTF-32-LE": "utf-32-le"}
_ERRORS = ("replace", "ignore", "strict")


def _codec(encoding: str, arg: str) -> str:
    c = _CODECS.get(str(encoding).upper())
    if c is None:
        raise InvalidArgumentError(None, None, f"Could not create converter for input encoding: {encoding} (argument "
                                   f"`{arg}`; tapejax knows {sorted(_CODECS)})")
    return c


def _check_errors(errors: str) -> None:
    if errors not in _ERRORS:
        raise ValueError(f"errors must be one of {_ERRORS}, got {errors!r} (argument `errors`)")


_LOCAL = threading.local()


def _dispatch(e: UnicodeError) -> "tuple[str, int]":
    if not isinstance(e, UnicodeDecodeError):
        raise e
    return _LOCAL.handler(e)


codecs.register_error("tapejax.unicode_decode", _dispatch)


def _with_handler(b: bytes, codec: str, handler: Callable[[UnicodeDecodeError], "tuple[str, int]"]) -> str:
    """``b`` decoded with ``handler`` as the error handler (a registered handler that calls the
    thread's current one)."""
    prev = getattr(_LOCAL, "handler", None)
    _LOCAL.handler = handler
    try:
        return b.decode(codec, "tapejax.unicode_decode")
    finally:
        _LOCAL.handler = prev


def _check_replacement(replacement_char: Any) -> int:
    r = int(replacement_char)
    if not 0 <= r <= 0x10FFFF:
        raise InvalidArgumentError(None, None, f"replacement_char out of unicode codepoint range: {r} (argument "
                                   "`replacement_char`)")
    return r


def _decode_offsets(b: bytes, codec: str, errors: str, replacement_char: int,
                    control: bool) -> "tuple[List[int], List[int]]":
    """The code points of ``b`` and the byte offset where each starts.  Invalid bytes as ICU
    (and Python) cut them: one replacement per maximal invalid subsequence."""
    bad: List["tuple[int, int]"] = []

    def on_error(e: UnicodeDecodeError) -> "tuple[str, int]":
        if errors == "strict":
            raise InvalidArgumentError(None, None, f"Invalid formatting on input string: {e}")
        bad.append((e.start, e.end))
        return ("\ufffd" if errors == "replace" else "", e.end)

    text = _with_handler(b, codec, on_error)
    points: List[int] = []
    offsets: List[int] = []
    pos = k = 0
    width = {"utf-8": 0, "utf-16-be": 2, "utf-16-le": 2, "utf-32-be": 4, "utf-32-le": 4}[codec]
    for ch in text:
        while k < len(bad) and bad[k][0] == pos and errors == "ignore":
            pos = bad[k][1]
            k += 1
        offsets.append(pos)
        if k < len(bad) and bad[k][0] == pos:
            points.append(replacement_char)
            pos = bad[k][1]
            k += 1
            continue
        p = ord(ch)
        points.append(replacement_char if control and p < 0x20 else p)
        pos += len(ch.encode("utf-8")) if not width else (4 if width == 2 and p > 0xFFFF else width)
    return points, offsets


def _decode(b: bytes, codec: str, errors: str, replacement_char: int, control: bool) -> List[int]:
    return _decode_offsets(b, codec, errors, replacement_char, control)[0]


def _one(input: Any, op: str) -> bytes:  # noqa: A002
    a = host_strings(input, op, "input")
    if a.ndim != 0:
        raise TypeError(f"{op}: a batch of strings (shape {a.shape}) gives a RaggedTensor of strings in TF, which "
                        "tapejax does not have (no string tensors): split each string in a dataset map before batch, "
                        "or use tf.strings.unicode_decode, whose batch result is a RaggedTensor of code points")
    return a.item()


def _decode_args(errors: str, replacement_char: Any, input_encoding: str) -> "tuple[str, int]":
    _check_errors(errors)
    return _codec(input_encoding, "input_encoding"), _check_replacement(replacement_char)


def _ragged(rows: List[List[int]], outer: "tuple[int, ...]", dtype: Any) -> Any:
    """Rows of numbers (one per string of a batch of shape ``outer``) as a RaggedTensor of
    ragged rank ``len(outer)`` (TF's: the batch's dimensions are row partitions too)."""
    from ..ops.ragged_tensor import RaggedTensor

    store = _dtypes.storage_dtype(np.int64)
    flat = np.fromiter((p for r in rows for p in r), dtype, sum(len(r) for r in rows))
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows], dtype=np.int64)])
    out = RaggedTensor.from_row_splits(convert_to_tensor(flat.astype(_dtypes.storage_dtype(dtype))),
                                       convert_to_tensor(splits.astype(store), _dtypes.int64), validate=False)
    for j in range(len(outer) - 2, -1, -1):   # (the batch's own dimensions: uniform rows, as TF's shape shows)
        out = RaggedTensor.from_uniform_row_length(out, outer[j + 1], nrows=int(np.prod(outer[:j + 1])))
    return out


def _decode_all(input: Any, op: str, codec: str, errors: str, replacement_char: int,  # noqa: A002
                control: bool) -> "tuple[np.ndarray, List[List[int]], List[List[int]]]":
    a = host_strings(input, op, "input")
    decoded = [_decode_offsets(v, codec, errors, replacement_char, control) for v in a.reshape(-1)]
    return a, [d[0] for d in decoded], [d[1] for d in decoded]


def unicode_decode(input: Any, input_encoding: str, errors: str = "replace", replacement_char: int = 65533,  # noqa: A002
                   replace_control_characters: bool = False, name: Optional[str] = None) -> Any:
    """``tf.strings.unicode_decode``: the code points (int32) of one string (a vector), or of each
    string of a batch (a RaggedTensor whose ragged rank is the batch's rank)."""
    codec, rc = _decode_args(errors, replacement_char, input_encoding)
    a, pts, _ = _decode_all(input, "tf.strings.unicode_decode", codec, errors, rc, replace_control_characters)
    if a.ndim == 0:
        return numeric_result(np.asarray(pts[0], np.int32))
    return _ragged(pts, a.shape, np.int32)


def unicode_decode_with_offsets(input: Any, input_encoding: str, errors: str = "replace",  # noqa: A002
                                replacement_char: int = 65533, replace_control_characters: bool = False,
                                name: Optional[str] = None) -> Any:
    """``tf.strings.unicode_decode_with_offsets``: ``(code points, offsets)``, each character's
    code point (int32) and the byte offset where it starts (int64), as ``unicode_decode``: vectors
    for one string, RaggedTensors for a batch."""
    codec, rc = _decode_args(errors, replacement_char, input_encoding)
    a, pts, offs = _decode_all(input, "tf.strings.unicode_decode_with_offsets", codec, errors, rc,
                               replace_control_characters)
    if a.ndim == 0:
        return (numeric_result(np.asarray(pts[0], np.int32)),
                numeric_result(np.asarray(offs[0], np.int64).astype(_dtypes.storage_dtype(np.int64))))
    return _ragged(pts, a.shape, np.int32), _ragged(offs, a.shape, np.int64)


def _pieces(points: List[int], codec: str) -> np.ndarray:
    """Each code point encoded in the input's encoding (TF's ``unicode_split``)."""
    out = np.empty(len(points), object)
    out[:] = [chr(p).encode(codec, "surrogatepass") for p in points]
    return out


def unicode_split(input: Any, input_encoding: str, errors: str = "replace", replacement_char: int = 65533,  # noqa: A002
                  name: Optional[str] = None) -> Any:
    """``tf.strings.unicode_split`` of one string: each character's bytes (in ``input_encoding``)."""
    codec, rc = _decode_args(errors, replacement_char, input_encoding)
    b = _one(input, "tf.strings.unicode_split")
    return _pieces(_decode(b, codec, errors, rc, False), codec)


def unicode_split_with_offsets(input: Any, input_encoding: str, errors: str = "replace",  # noqa: A002
                               replacement_char: int = 65533, name: Optional[str] = None) -> Any:
    """``tf.strings.unicode_split_with_offsets`` of one string: ``(characters, offsets)``, each
    character's bytes (in ``input_encoding``) and the byte offset (int64) where it starts."""
    codec, rc = _decode_args(errors, replacement_char, input_encoding)
    b = _one(input, "tf.strings.unicode_split_with_offsets")
    pts, offs = _decode_offsets(b, codec, errors, rc, False)
    return _pieces(pts, codec), numeric_result(np.asarray(offs, np.int64).astype(_dtypes.storage_dtype(np.int64)))


def _encode(points: Sequence[int], codec: str, errors: str, replacement_char: int) -> bytes:
    chars = []
    for p in points:
        if 0 <= p <= 0x10FFFF and not 0xD800 <= p <= 0xDFFF:
            chars.append(chr(p))
        elif errors == "strict":
            raise InvalidArgumentError(None, None, f"Invalid code point {p}")
        elif errors == "replace":
            chars.append(chr(replacement_char))
    return "".join(chars).encode(codec)


def unicode_encode(input: Any, output_encoding: str, errors: str = "replace", replacement_char: int = 65533,  # noqa: A002
                   name: Optional[str] = None) -> Any:
    """``tf.strings.unicode_encode``: a vector of code points as one string (a matrix: one per
    row)."""
    _check_errors(errors)
    codec = _codec(output_encoding, "output_encoding")
    pts = np.asarray(input if not isinstance(input, Tensor) else input.numpy())
    if pts.dtype.kind not in "iu":
        raise TypeError(f"tf.strings.unicode_encode: `input` must be int32 code points; got {pts.dtype} (argument "
                        "`input`)")
    if pts.ndim == 0:
        raise ValueError("Rank of input must be at least 1 (argument `input`)")
    rows = pts.reshape(-1, pts.shape[-1]) if pts.shape[-1] else pts.reshape(-1, 0)
    out = np.empty(rows.shape[0], object)
    out[:] = [_encode(r.tolist(), codec, errors, replacement_char) for r in rows]
    return host_result(out.reshape(pts.shape[:-1]))


def unicode_transcode(input: Any, input_encoding: str, output_encoding: str, errors: str = "replace",  # noqa: A002
                      replacement_char: int = 65533, replace_control_characters: bool = False,
                      name: Optional[str] = None) -> Any:
    """``tf.strings.unicode_transcode``: each string from one encoding to another."""
    src, rc = _decode_args(errors, replacement_char, input_encoding)
    dst = _codec(output_encoding, "output_encoding")
    a = host_strings(input, "tf.strings.unicode_transcode", "input")
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        out[i] = _encode(_decode(v, src, errors, rc, replace_control_characters), dst, errors, rc)
    return host_result(out)


def _namespace() -> types.ModuleType:
    mod = new_module("tapejax.strings", "``tf.strings``: host string ops (tapejax.data.hostops, hostops_text); TF's "
                     "other names raise ``UnsupportedError``.", {**hostops.OPS, **OPS})

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported("strings", name)

    mod.__dict__["__getattr__"] = __getattr__
    return mod


OPS = {"format": format, "ngrams": ngrams, "regex_replace": regex_replace, "to_hash_bucket": to_hash_bucket,
       "to_hash_bucket_strong": to_hash_bucket_strong, "unicode_decode": unicode_decode, "unicode_encode": unicode_encode,
       "unicode_decode_with_offsets": unicode_decode_with_offsets, "unicode_script": unicode_script,
       "unicode_split": unicode_split, "unicode_split_with_offsets": unicode_split_with_offsets,
       "unicode_transcode": unicode_transcode,
       "unsorted_segment_join": unsorted_segment_join}

#: ``tf.strings``: ``hostops``' ops and these.
strings = _namespace()

__all__ = ["OPS", "format", "ngrams", "regex_replace", "to_hash_bucket", "to_hash_bucket_strong", "unicode_decode",
           "unicode_decode_with_offsets", "unicode_encode", "unicode_script", "unicode_split",
           "unicode_split_with_offsets", "unicode_transcode", "unsorted_segment_join", "strings"]
