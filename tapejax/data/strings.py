"""String components (``list_files``' file names, the readers' lines and records, strings given
to ``from_tensor_slices`` / ``from_tensors``): host bytes, never device arrays.

tapejax has no string tensors (XLA has no string type; ``tapejax.constant("a")`` raises
TypeError naming integer ids as the way out).  tf.data pipelines still carry strings, file names
first of all, so a data element may have *string components*: their spec is a ``TensorSpec``
whose dtype is ``STRING`` (``name == "string"``, as TF's ``tf.string``; ``as_numpy_dtype`` is
``object``, as TF's), and their values are a Python ``bytes`` (rank 0) or a NumPy object array of
``bytes`` (after ``batch``), kept on the host (``structure``: ``string_value``,
``stack_strings``).  Never NumPy ``S`` values: those drop trailing NUL bytes, and a binary record
(``FixedLengthRecordDataset``) may end in zeros.  Iterating gives them as they are (``bytes``:
``.decode()``, ``open(f)``, ``np.frombuffer(r, np.uint8)`` work), as does
``as_numpy_iterator`` (TF's form there).  Transformations that move elements (``shuffle``,
``take``, ``skip``, ``repeat``, ``batch``, ``padded_batch`` (padding ``b""``), ``unbatch``,
``rebatch``, ``zip``, ``enumerate``, ``shard``, ``concatenate``, ``cache``, ``prefetch``,
``unique``, ``save`` / ``load``, ``snapshot``) carry every byte; the functions of
``interleave`` / ``flat_map`` / ``group_by_window``'s ``reduce_func`` (run eagerly in Python)
receive them as ``bytes``, and so do ``map`` / ``filter`` / key functions, which then run eagerly
per element with the host string ops (``hostfn``, ``hostops``, ``decode``).
"""
import os
from typing import Any, List

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from .dataset import Dataset, helper
from .gfile import match_paths
from .structure import STRING, StringDType, is_string, string_spec

__all__ = ["STRING", "StringDType", "is_string", "list_files", "string_spec"]


def _patterns(file_pattern: Any) -> List[str]:
    if isinstance(file_pattern, Tensor):
        raise TypeError("list_files: `file_pattern` must be a string or a list of strings (tapejax has no string "
                        "tensors); got a Tensor.")
    values = list(np.asarray(file_pattern, dtype=object).reshape(-1)) if isinstance(
        file_pattern, (list, tuple, np.ndarray)) else [file_pattern]
    out = []
    for v in values:
        if isinstance(v, bytes):
            v = v.decode()
        if not isinstance(v, (str, os.PathLike)):
            raise TypeError(f"Argument `file_pattern` must be a string or a list of strings; got {file_pattern!r} "
                            f"(Cannot convert {v!r} to EagerTensor of dtype string).")
        out.append(os.fspath(v))
    return out



@helper
def list_files(file_pattern: Any, shuffle: Any, seed: Any) -> Dataset:
    """``Dataset.list_files``: the names of the files matching the glob pattern(s), sorted, each
    once per match, as scalar string components; shuffled over all of them (a new order per
    iteration) unless ``shuffle`` is False.  No match: InvalidArgumentError (TF's assertion,
    raised when the dataset is made)."""
    patterns = _patterns(file_pattern)
    from . import args as A
    A.seed(seed)
    names: List[str] = []
    for p in patterns:
        names.extend(match_paths(p))
    if not names:
        raise InvalidArgumentError(None, None, "No files matched pattern: " + ", ".join(patterns))
    names.sort()
    from .pystreams import Elements
    spec = string_spec(())
    ds: Dataset = Elements([(os.fsencode(n),) for n in names], spec, _dtypes.x64_enabled())
    if shuffle is None or shuffle:
        ds = ds.shuffle(max(len(names), 1), seed=seed)
    return ds
