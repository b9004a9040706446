"""``tapejax.data``: tf.data's input pipelines, built on grain.

``tapejax.data.Dataset`` has TF's API (``from_tensor_slices``, ``map``, ``batch``, ``shuffle``,
``prefetch`` ...); elements are tapejax Tensors in TF's structures; a Python loop over a
dataset is the common use.  Importing this package needs nothing beyond tapejax; making a
Dataset needs grain (``pip install 'tapejax[data]'``).  See README.md here for the design.
"""
from . import (  # noqa: F401
               experimental,
               extras,
               fingerprint,
               loops,
               persist,
               pystreams,
               readers,
               resample,
               sources,
               strings,  # (they register the Dataset kinds: dataset.KINDS)
               tfrecord,
               transforms,
)
from .args import AUTOTUNE, INFINITE as INFINITE_CARDINALITY, UNKNOWN as UNKNOWN_CARDINALITY
from .dataset import Dataset
from .iterator import Iterator, NumpyIterator
from .options import AutotuneOptions, OptimizationOptions, Options, ThreadingOptions
from .readers import FixedLengthRecordDataset, TextLineDataset
from .structure import DatasetSpec, IteratorSpec, NoneTensorSpec
from .tfrecord import TFRecordDataset

__all__ = ["AUTOTUNE", "AutotuneOptions", "Dataset", "DatasetSpec", "FixedLengthRecordDataset", "INFINITE_CARDINALITY",
           "Iterator", "IteratorSpec", "NoneTensorSpec", "NumpyIterator", "OptimizationOptions", "Options",
           "TFRecordDataset", "TextLineDataset", "ThreadingOptions", "UNKNOWN_CARDINALITY", "experimental"]
