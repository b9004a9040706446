"""``tf.print``: TF's text for tensors, printed when the program runs.

Eagerly the text is written at once.  Inside a trace (``tapejax.function``,
a converted loop or branch) the values are handed to
``jax.debug.callback(..., ordered=True)``: the text is written each time the
compiled program runs, in program order, and ``tapejax.function`` waits for
its prints before returning (TF's ``tf.print`` is an op of the graph; Python's
``print`` runs once, while tracing).

Formatting follows TF's ``print_v2``: the first and last ``summarize`` entries
of each dimension (``-1`` or ``None``... ``None`` means 3, ``-1`` all), rows
on new lines indented by depth, no padding; floats with 6 significant digits
(9 when 6 do not give the float back; 15/17 for float64), bools as 1/0.
Python values print with ``str``; nested structures as Python prints them,
with each tensor as its text and dict keys sorted.
"""
import sys
from typing import Any, Callable, List

import jax
import jax.core
import numpy as np

from ..core import state as _state
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor

_Tracer = jax.core.Tracer


# ---------------------------------------------------------------------------
# TF's text for one tensor
# ---------------------------------------------------------------------------

def _element(x, kind: str, wide: bool) -> str:
    if kind == "b":
        return "1" if x else "0"
    if kind == "f":
        v = float(x)
        if wide:
            s = "%.15g" % v
            return s if float(s) == v else "%.17g" % v
        s = "%.6g" % v
        return s if np.float32(s) == np.float32(v) or v != v else "%.9g" % v
    if kind == "c":
        return f"({_element(x.real, 'f', wide)},{_element(x.imag, 'f', wide)})"
    if kind in "SU":
        return x.decode() if isinstance(x, bytes) else str(x)
    return str(int(x))


def _spacing(dim: int, ndim: int) -> str:
    if dim == ndim - 1:
        return " "
    return "\n" * (ndim - dim - 1) + " " * (dim + 1)


def format_tensor(a, summarize=3) -> str:
    """A tensor's text as TF's ``tf.print`` writes it."""
    a = np.asarray(a)
    wide = a.dtype == np.float64
    if a.dtype.kind == "f" and not wide or str(a.dtype) == "bfloat16":
        a = a.astype(np.float32)
    kind = a.dtype.kind
    ends = 3 if summarize is None else int(summarize)
    if a.ndim == 0:
        return _element(a[()], kind, wide)
    if ends < 0:
        ends = max(a.shape)
    out: List[str] = []

    def dim(d: int, index: tuple) -> None:
        if d == a.ndim:
            out.append(_element(a[index], kind, wide))
            return
        out.append("[")
        n = a.shape[d]
        for i in range(min(ends, n)):
            if i > 0:
                out.append(_spacing(d, a.ndim))
            dim(d + 1, index + (i,))
        if n > 2 * ends:
            out.append(_spacing(d, a.ndim))
            out.append("...")
        for i in range(max(ends, n - ends), n):
            out.append(_spacing(d, a.ndim))
            dim(d + 1, index + (i,))
        out.append("]")

    dim(0, ())
    return "".join(out)


# ---------------------------------------------------------------------------
# tf.print
# ---------------------------------------------------------------------------

class _Text:
    """A tensor's text inside a printed Python structure (``str`` of a list uses ``repr``)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _is_tensor(x) -> bool:
    return isinstance(x, (Tensor, jax.Array, _Tracer)) or hasattr(x, "_read")


def _split(x, leaves: List[Any]):
    """The structure with tensors replaced by their index in ``leaves`` (dicts by sorted key)."""
    if _is_tensor(x):
        leaves.append(convert_to_tensor(x)._value)
        return ("T", len(leaves) - 1)
    if isinstance(x, list):
        return ("L", [_split(v, leaves) for v in x])
    if isinstance(x, tuple):
        return ("U", type(x), [_split(v, leaves) for v in x])
    if isinstance(x, dict):
        return ("D", [(k, _split(x[k], leaves)) for k in sorted(x)])
    if isinstance(x, np.ndarray):
        leaves.append(x)
        return ("T", len(leaves) - 1)
    return ("P", x)


def _join(node, texts):
    tag = node[0]
    if tag == "T":
        return _Text(texts[node[1]])
    if tag == "L":
        return [_join(v, texts) for v in node[1]]
    if tag == "U":
        vals = [_join(v, texts) for v in node[2]]
        return node[1](*vals) if hasattr(node[1], "_fields") else node[1](vals)
    if tag == "D":
        return {k: _join(v, texts) for k, v in node[1]}
    return node[1]


def _render(nodes, values, summarize, sep, end) -> str:
    texts = [format_tensor(v, summarize) for v in values]
    parts = []
    for node in nodes:
        if node[0] == "T":
            parts.append(texts[node[1]])
        else:
            parts.append(str(_join(node, texts)))
    return sep.join(parts) + end


def _writer(output_stream) -> Callable[[str], Any]:
    """Where the text goes; sys.stdout / sys.stderr are looked up when writing (so a redirection
    in force then is honoured)."""
    if output_stream is None or output_stream is sys.stderr or output_stream is sys.__stderr__:
        return _to_stderr
    if output_stream is sys.stdout or output_stream is sys.__stdout__:
        return _to_stdout
    if isinstance(output_stream, str):
        if not output_stream.startswith("file://"):
            raise ValueError(f"Unsupported output stream, logging level, or file. {output_stream!r} (argument "
                             "`output_stream`): a string must be 'file://<path>'.")
        path = output_stream[len("file://"):]

        def to_file(s: str) -> None:
            with open(path, "a") as f:
                f.write(s)
        return to_file
    write = getattr(output_stream, "write", None)
    if write is not None:
        return write
    if callable(output_stream) and getattr(output_stream, "__module__", "").split(".")[0] in (
            "logging", "absl", "tensorflow", "tapejax"):
        log = output_stream
        return lambda s: log(s.rstrip("\n"))
    raise ValueError(f"Unsupported output stream, logging level, or file. {output_stream!r}. Supported "
                     "streams are sys.stdout, sys.stderr, a file-like object, a logging function, or "
                     "'file://<path>' (argument `output_stream`).")


def _to_stderr(s: str) -> None:
    sys.stderr.write(s)
    sys.stderr.flush()


def _to_stdout(s: str) -> None:
    sys.stdout.write(s)
    sys.stdout.flush()


def print_(*inputs, output_stream=None, summarize=3, sep=" ", end="\n", name=None):
    """``tf.print``: print Tensors, Variables and nested structures of them (at run time
    inside a trace)."""
    for arg, value in (("sep", sep), ("end", end)):
        if not isinstance(value, str):
            raise TypeError(f"tf.print: argument `{arg}` must be a string; got {value!r} of type "
                            f"{type(value).__name__}")
    if summarize is not None and (isinstance(summarize, bool) or not isinstance(summarize, (int, np.integer))):
        raise TypeError(f"Expected int for argument 'summarize' not {summarize!r}.")
    write = _writer(output_stream)
    leaves: List[Any] = []
    nodes = [_split(x, leaves) for x in inputs]
    # inside a trace the print is staged even with no traced value (Python values only: TF's
    # ``tf.print("fizz")`` in a branch, ``tf.print(x)`` of a Python argument): an op of the program
    if _state.tracing() or any(isinstance(v, _Tracer) for v in leaves):
        def emit(*values):
            write(_render(nodes, [np.asarray(v) for v in values], summarize, sep, end))
        jax.debug.callback(emit, *leaves, ordered=True)
        return None
    write(_render(nodes, [np.asarray(v) for v in leaves], summarize, sep, end))
    return None


def python_print(objects, kwargs) -> None:
    """Python's ``print`` of ``objects`` with tensors as NumPy values, when the program runs
    (AutoGraph's ``print`` with ``Feature.BUILTIN_FUNCTIONS``, TF's ``py_func`` print)."""
    leaves: List[Any] = []
    slots: List[Any] = []
    for o in objects:
        if _is_tensor(o):
            leaves.append(convert_to_tensor(o)._value)
            slots.append(("T", len(leaves) - 1))
        else:
            slots.append(("P", o))
    file = kwargs.get("file")

    def emit(*values):
        vals = [np.asarray(values[x]) if tag == "T" else x for tag, x in slots]
        print(*vals, sep=kwargs.get("sep", " "), end=kwargs.get("end", "\n"),
              file=file if file is not None else sys.stdout, flush=kwargs.get("flush", False))

    jax.debug.callback(emit, *leaves, ordered=True)


__all__ = ["format_tensor", "print_", "python_print"]
