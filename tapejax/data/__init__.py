"""``tapejax.data``: tf.data's input pipelines, built on grain.

``tapejax.data.Dataset`` has TF's API (``from_tensor_slices``, ``map``, ``batch``, ``shuffle``,
``prefetch`` ...); elements are tapejax Tensors in TF's structures; a Python loop over a
dataset is the common use.  Importing this package needs nothing beyond tapejax; making a
Dataset needs grain (``pip install 'tapejax[data]'``).  See README.md here for the design.
"""
from types import SimpleNamespace

from . import sources, transforms  # noqa: F401  (they register the Dataset kinds: dataset.KINDS)
from .args import AUTOTUNE, INFINITE as INFINITE_CARDINALITY, UNKNOWN as UNKNOWN_CARDINALITY
from .dataset import Dataset
from .iterator import Iterator
from .options import AutotuneOptions, OptimizationOptions, Options, ThreadingOptions
from .structure import NoneTensorSpec


def cardinality(dataset: Dataset):
    """``tf.data.experimental.cardinality``: ``dataset.cardinality()``."""
    return dataset.cardinality()


#: ``tf.data.experimental``: the names TF 2 still keeps there.
experimental = SimpleNamespace(AUTOTUNE=AUTOTUNE, INFINITE_CARDINALITY=INFINITE_CARDINALITY,
                               UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY, cardinality=cardinality,
                               AutotuneOptions=AutotuneOptions, OptimizationOptions=OptimizationOptions,
                               ThreadingOptions=ThreadingOptions)

__all__ = ["AUTOTUNE", "AutotuneOptions", "Dataset", "INFINITE_CARDINALITY", "Iterator", "NoneTensorSpec",
           "OptimizationOptions", "Options", "ThreadingOptions", "UNKNOWN_CARDINALITY", "experimental"]
