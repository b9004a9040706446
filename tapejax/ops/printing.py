"""``tf.print``: prints values the way TF does (``[0 0.6]``, ``[[2 2], [2 2]]``)."""
import sys

import numpy as np

from ..core.tensor import Tensor


def _fmt_array(a) -> str:
    a = np.asarray(a)
    if a.dtype.kind == "f" or a.dtype.kind == "V" or str(a.dtype) == "bfloat16":
        a = a.astype(np.float64) if str(a.dtype) == "bfloat16" else a
        text = np.array2string(a, separator=" ", formatter={"float_kind": lambda v: f"{float(v):g}"},
                               threshold=1000)
    else:
        text = np.array2string(a, separator=" ", threshold=1000)
    return text.replace("\n", "\n ")


def _fmt(x):
    if isinstance(x, Tensor) or hasattr(x, "_read"):
        return _fmt_array(x._value)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt(v)}" for k, v in sorted(x.items())) + "}"
    if isinstance(x, np.ndarray):
        return _fmt_array(x)
    return str(x)


def print_(*inputs, output_stream=None, summarize=3, sep=" ", end="\n", name=None):
    """``tf.print``: print Tensors, Variables and nested structures of them."""
    stream = output_stream if output_stream is not None and hasattr(output_stream, "write") else sys.stderr
    stream.write(sep.join(_fmt(x) for x in inputs) + end)
