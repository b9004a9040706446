"""``tapejax.data``: tf.data's input pipelines, built on grain.

``tapejax.data.Dataset`` has TF's API (``from_tensor_slices``, ``map``, ``batch``, ``shuffle``,
``prefetch`` ...); elements are tapejax Tensors in TF's structures; a Python loop over a
dataset is the common use.  Importing this package needs nothing beyond tapejax; making a
Dataset needs grain (``pip install 'tapejax[data]'``).  See README.md here for the design.
"""
from types import SimpleNamespace

from . import fingerprint, loops, persist, pystreams, resample, sources, strings, transforms  # noqa: F401  (they register the Dataset kinds: dataset.KINDS)
from .args import AUTOTUNE, INFINITE as INFINITE_CARDINALITY, UNKNOWN as UNKNOWN_CARDINALITY
from .dataset import Dataset
from .iterator import Iterator
from .options import AutotuneOptions, OptimizationOptions, Options, ThreadingOptions
from .structure import DatasetSpec, NoneTensorSpec


def cardinality(dataset: Dataset):
    """``tf.data.experimental.cardinality``: ``dataset.cardinality()``."""
    return dataset.cardinality()


def _transformation(method: str):
    """A ``tf.data.experimental`` transformation: ``f(*args)`` returns ``lambda ds: ds.method(*args)``
    (for ``Dataset.apply``)."""
    def make(*args, **kwargs):
        return lambda dataset: getattr(dataset, method)(*args, **kwargs)
    make.__name__ = method
    make.__doc__ = f"``tf.data.experimental.{method}``: a transformation for ``apply`` (``Dataset.{method}``)."
    return make


def get_single_element(dataset: Dataset):
    """``tf.data.experimental.get_single_element``: ``dataset.get_single_element()``."""
    return dataset.get_single_element()


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False, buffer_output_elements=None,
                        prefetch_input_elements=None):
    """``tf.data.experimental.parallel_interleave``: ``interleave`` with ``cycle_length`` inner
    datasets read at once (in TF's deterministic order unless ``sloppy``)."""
    return lambda dataset: dataset.interleave(map_func, cycle_length, block_length, num_parallel_calls=cycle_length,
                                              deterministic=not sloppy)


def _save(dataset, path, compression=None, shard_func=None, checkpoint_args=None):
    """``tf.data.experimental.save``: ``dataset.save(...)``."""
    return dataset.save(path, compression, shard_func, checkpoint_args)


def _load(path, element_spec=None, compression=None, reader_func=None):
    """``tf.data.experimental.load``: ``Dataset.load(...)``."""
    return Dataset.load(path, element_spec, compression, reader_func)


#: ``tf.data.experimental``: the names TF 2 still keeps there.
experimental = SimpleNamespace(
    AUTOTUNE=AUTOTUNE, INFINITE_CARDINALITY=INFINITE_CARDINALITY, UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY,
    cardinality=cardinality, AutotuneOptions=AutotuneOptions, OptimizationOptions=OptimizationOptions,
    ThreadingOptions=ThreadingOptions, get_single_element=get_single_element,
    sample_from_datasets=Dataset.sample_from_datasets, choose_from_datasets=Dataset.choose_from_datasets,
    Counter=Dataset.counter, RandomDataset=Dataset.random, parallel_interleave=parallel_interleave,
    save=_save, load=_load,
    **{name: _transformation(method) for name, method in (
        ("scan", "scan"), ("take_while", "take_while"), ("unique", "unique"), ("ignore_errors", "ignore_errors"),
        ("group_by_window", "group_by_window"), ("bucket_by_sequence_length", "bucket_by_sequence_length"),
        ("enumerate_dataset", "enumerate"), ("unbatch", "unbatch"), ("rebatch", "rebatch"),
        ("snapshot", "snapshot"), ("rejection_resample", "rejection_resample"))})

__all__ = ["AUTOTUNE", "AutotuneOptions", "Dataset", "DatasetSpec", "INFINITE_CARDINALITY", "Iterator", "NoneTensorSpec",
           "OptimizationOptions", "Options", "ThreadingOptions", "UNKNOWN_CARDINALITY", "experimental"]
