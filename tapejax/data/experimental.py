"""``tf.data.experimental``: the names TF 2 keeps there, as tapejax has them.

Transformations for ``Dataset.apply`` (``scan``, ``unique``, ``assert_cardinality``,
``group_by_reducer``, ``map_and_batch``, ``shuffle_and_repeat``, ``copy_to_device`` ...) return
``lambda dataset: ...``; the rest are functions (``at``, ``from_list``, ``get_structure``,
``get_next_as_optional``), classes (``Optional``, ``Reducer``, ``CsvDataset``, the option
groups and enums) and constants (``AUTOTUNE``, ``SHARD_HINT``).  Most are one line over a
``Dataset`` method; the kinds of their own are in ``extras`` and the readers in ``readers``.

``enable_debug_mode()`` here means: datasets made afterwards run their functions (``map``,
``filter``, ``scan`` ...) eagerly per element, after the one trace that gives their spec (so a
``print`` or ``pdb.set_trace()`` runs per element), ``num_parallel_calls`` and ``interleave``
threads are one sequential loop, and ``prefetch`` computes nothing ahead (TF's rule: synchronous,
sequential, deterministic).  Call it before making the datasets, as TF says; it cannot be undone.
"""
from typing import Any, Callable, Optional as _Opt

import numpy as np

from . import (
               args as A,
               extras as _extras,
               parse_ragged as _parse_example,
               readers as _readers,
               structure as S,
               tfrecord as _tfrecord,
)
from .args import AUTOTUNE, INFINITE as INFINITE_CARDINALITY, UNKNOWN as UNKNOWN_CARDINALITY
from .dataset import KINDS, Dataset
from .extras import Reducer
from .iterator import Iterator, in_trace
from .optional import Optional
from .options import (
    AutoShardPolicy,
    AutotuneAlgorithm,
    AutotuneOptions,
    DistributeOptions,
    ExternalStatePolicy,
    OptimizationOptions,
    ThreadingOptions,
    toggle_debug_mode,
)

#: ``tf.data.experimental.SHARD_HINT``: a ``shard(num_shards=SHARD_HINT)`` placeholder for tf.distribute.
SHARD_HINT = -1

Transformation = Callable[[Dataset], Dataset]


def cardinality(dataset: Dataset):
    """``dataset.cardinality()``."""
    return dataset.cardinality()


def _method(method: str, name: str) -> Callable[..., Transformation]:
    """A transformation for ``apply``: ``f(*args)`` returns ``lambda ds: ds.method(*args)``."""
    def make(*args, **kwargs):
        return lambda dataset: getattr(dataset, method)(*args, **kwargs)
    make.__name__ = name
    make.__doc__ = f"``tf.data.experimental.{name}``: a transformation for ``apply`` (``Dataset.{method}``)."
    return make


scan, take_while, unique, ignore_errors = (_method(m, m) for m in ("scan", "take_while", "unique", "ignore_errors"))
group_by_window, bucket_by_sequence_length = _method("group_by_window", "group_by_window"), _method(
    "bucket_by_sequence_length", "bucket_by_sequence_length")
enumerate_dataset, unbatch, rebatch = (_method("enumerate", "enumerate_dataset"), _method("unbatch", "unbatch"),
                                       _method("rebatch", "rebatch"))
snapshot, rejection_resample = _method("snapshot", "snapshot"), _method("rejection_resample", "rejection_resample")
sample_from_datasets, choose_from_datasets = Dataset.sample_from_datasets, Dataset.choose_from_datasets
Counter, RandomDataset = Dataset.counter, Dataset.random


def get_single_element(dataset: Dataset):
    """``dataset.get_single_element()``."""
    return dataset.get_single_element()


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False, buffer_output_elements=None,
                        prefetch_input_elements=None) -> Transformation:
    """``interleave`` with ``cycle_length`` inner datasets read at once (TF's deterministic order
    unless ``sloppy``)."""
    return lambda dataset: dataset.interleave(map_func, cycle_length, block_length, num_parallel_calls=cycle_length,
                                              deterministic=not sloppy)


def save(dataset, path, compression=None, shard_func=None, checkpoint_args=None):
    """``dataset.save(...)``."""
    return dataset.save(path, compression, shard_func, checkpoint_args)


def load(path, element_spec=None, compression=None, reader_func=None):
    """``Dataset.load(...)``."""
    return Dataset.load(path, element_spec, compression, reader_func)


# -- new in this module -----------------------------------------------------------------

def assert_cardinality(expected_cardinality: Any) -> Transformation:
    """The dataset with cardinality ``expected_cardinality``; iterating raises FailedPreconditionError
    (TF's message) at the element where the real count proves different."""
    return lambda dataset: KINDS["AssertCardinality"](dataset, A.integer(expected_cardinality, "expected_cardinality"))


def from_list(elements: Any, name: _Opt[str] = None) -> Dataset:
    """One element per item of the list ``elements`` (each a structure of tensor-likes; strings
    become string components).  Items must share a structure and dtypes; shapes that differ
    become None."""
    return _readers.from_list(elements)


def at(dataset: Dataset, index: Any) -> Any:
    """Element ``index`` of ``dataset`` by random access: OutOfRangeError outside ``[0,
    cardinality)``, UnimplementedError where the pipeline reads a stream (after ``filter`` ...)."""
    return _extras.element_at(dataset, index)


def pad_to_cardinality(cardinality: Any, mask_key: str = "valid") -> Transformation:
    """Dict elements padded with zero elements up to ``cardinality``; ``mask_key`` says which are real."""
    target = A.integer(cardinality, "cardinality")

    def apply(dataset: Dataset) -> Dataset:
        card = dataset._cardinality
        if card < 0:
            raise ValueError("The dataset passed into `pad_to_cardinality` must have a known cardinalty, but has "
                             f"cardinality {card}")
        if card > target:
            raise ValueError("The dataset passed into `pad_to_cardinality` must have a cardinalty less than the "
                             f"target cardinality ({target}), but has cardinality {card}")
        spec = dataset.element_spec
        if not isinstance(spec, dict):
            raise ValueError("`pad_to_cardinality` requires its input dataset to be a dictionary.")
        filler: "dict[str, Any]" = {k: np.zeros(tuple(s.shape), S.host_dtype(s)) for k, s in spec.items()}
        filler[mask_key] = np.False_
        out = dataset.map(lambda d: {**d, mask_key: True})
        return out.concatenate(Dataset.from_tensors(filler).repeat(target - card))
    return apply


def shuffle_and_repeat(buffer_size: Any, count: Any = None, seed: _Opt[int] = None) -> Transformation:
    """``shuffle(buffer_size, seed).repeat(count)``: a new order each epoch."""
    return lambda dataset: dataset.shuffle(buffer_size, seed).repeat(count)


def dense_to_ragged_batch(batch_size: Any, drop_remainder: bool = False, row_splits_dtype: Any = None) -> Transformation:
    """``Dataset.ragged_batch(batch_size, drop_remainder, row_splits_dtype)`` as a transformation."""
    if row_splits_dtype is None:
        return lambda dataset: dataset.ragged_batch(batch_size, drop_remainder)
    return lambda dataset: dataset.ragged_batch(batch_size, drop_remainder, row_splits_dtype)


def map_and_batch(map_func: Callable[..., Any], batch_size: Any, num_parallel_batches: Any = None,
                  drop_remainder: bool = False, num_parallel_calls: Any = None) -> Transformation:
    """``map(map_func, num_parallel_calls).batch(batch_size, drop_remainder)``."""
    if num_parallel_batches is not None and num_parallel_calls is not None:
        raise ValueError("`map_and_batch` allows only one of `num_parallel_batches` and `num_parallel_calls` to be "
                         f"set, but `num_parallel_batches` was set to {num_parallel_batches} and `num_parallel_calls` "
                         f"as set to {num_parallel_calls}.")
    if num_parallel_batches is not None:
        num_parallel_calls = A.integer(num_parallel_batches, "num_parallel_batches") * A.integer(batch_size, "batch_size")
    return lambda dataset: dataset.map(map_func, num_parallel_calls).batch(batch_size, drop_remainder)


def get_structure(dataset_or_iterator: Any) -> Any:
    """The ``element_spec`` of a Dataset, Iterator or Optional."""
    try:
        return dataset_or_iterator.element_spec
    except AttributeError:
        raise TypeError("Invalid `dataset_or_iterator`. `dataset_or_iterator` must be a `tf.data.Dataset` or "
                        f"tf.data.Iterator object, but got {type(dataset_or_iterator)}.") from None


def get_next_as_optional(iterator: Iterator) -> Optional:
    """``iterator.get_next_as_optional()``."""
    return iterator.get_next_as_optional()


def group_by_reducer(key_func: Callable[..., Any], reducer: Reducer) -> Transformation:
    """Elements reduced per key (``reducer``'s three functions): one output per key, by key."""
    A.callable_arg(key_func)
    return lambda dataset: KINDS["GroupByReducer"](dataset, key_func, reducer)


def enable_debug_mode() -> None:
    """Datasets made from now on run their functions eagerly, sequentially, with nothing computed
    ahead (see the module docstring)."""
    if in_trace():
        raise ValueError("`enable_debug_mode() is only supported in eager mode.")
    toggle_debug_mode(True)


def copy_to_device(target_device: Any, source_device: str = "/cpu:0") -> Transformation:
    """The elements put on the JAX device TF's name ``target_device`` names (``"/gpu:0"``; one that
    is not here: the default device, TF's soft placement)."""
    def apply(dataset: Dataset) -> Dataset:   # (the names are parsed here, as TF)
        _extras.resolve_device(source_device, "source_device")
        return KINDS["CopyToDevice"](dataset, _extras.resolve_device(target_device, "target_device"))
    return apply


def prefetch_to_device(device: Any, buffer_size: Any = None) -> Transformation:
    """``copy_to_device(device)`` then ``prefetch(buffer_size)`` (default AUTOTUNE)."""
    copy = copy_to_device(device)
    return lambda dataset: copy(dataset).prefetch(AUTOTUNE if buffer_size is None else buffer_size)


CsvDataset, make_csv_dataset = _readers.CsvDataset, _readers.make_csv_dataset
TFRecordWriter = _tfrecord.DatasetWriter


def parse_example_dataset(features: Any, num_parallel_calls: Any = 1, deterministic: Any = None) -> Transformation:
    """A ``map`` parsing batches of serialized ``tf.train.Example``s (``tf.io.parse_example``) into
    a dict of features (for ``apply``)."""
    if features is None:
        raise ValueError("Argument `features` is required, but not specified.")

    def apply(dataset: Dataset) -> Dataset:
        return dataset.map(lambda serialized: _parse_example.parse_example(serialized, features),
                           num_parallel_calls=num_parallel_calls, deterministic=deterministic)
    return apply


def make_batched_features_dataset(file_pattern: Any, batch_size: Any, features: Any, reader: Any = None,
                                  label_key: _Opt[str] = None, reader_args: Any = None, num_epochs: Any = None,
                                  shuffle: bool = True, shuffle_buffer_size: Any = 10000, shuffle_seed: Any = None,
                                  prefetch_buffer_size: Any = None, reader_num_threads: Any = None,
                                  parser_num_threads: Any = None, sloppy_ordering: bool = False,
                                  drop_final_batch: bool = False) -> Dataset:
    """TF's recipe: the files matching ``file_pattern`` (shuffled unless ``shuffle=False``), read by
    ``reader`` (``TFRecordDataset``) ``reader_num_threads`` at a time, records shuffled and
    repeated ``num_epochs`` times (None: forever, batches then all full), batched, parsed with
    ``parse_example`` (``features``), ``label_key``'s feature split off as ``(features, label)``,
    prefetched."""
    if label_key is not None and label_key not in features:
        raise ValueError(f"The `label_key` provided ({label_key}) must be one of the `features` keys.")
    read = _tfrecord.TFRecordDataset if reader is None else reader
    args = list(reader_args or [])
    threads = 1 if reader_num_threads is None else reader_num_threads
    ds = Dataset.list_files(file_pattern, shuffle=shuffle, seed=shuffle_seed)
    ds = ds.interleave(lambda name: read(name, *args), cycle_length=threads if threads != AUTOTUNE else None,
                       block_length=1, num_parallel_calls=None if threads == 1 else threads,
                       deterministic=not sloppy_ordering)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer_size, shuffle_seed)
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    ds = ds.batch(batch_size, drop_remainder=drop_final_batch or num_epochs is None)
    ds = ds.apply(parse_example_dataset(features, num_parallel_calls=2 if parser_num_threads is None
                                        else parser_num_threads))
    if label_key is not None:
        ds = ds.map(lambda x: ({k: v for k, v in x.items() if k != label_key}, x[label_key]))
    return ds.prefetch(AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)

__all__ = [
    "AUTOTUNE", "AutoShardPolicy", "AutotuneAlgorithm", "AutotuneOptions", "Counter", "CsvDataset",
    "DistributeOptions", "ExternalStatePolicy", "INFINITE_CARDINALITY", "OptimizationOptions", "Optional",
    "RandomDataset", "Reducer", "SHARD_HINT", "TFRecordWriter", "ThreadingOptions", "UNKNOWN_CARDINALITY", "assert_cardinality", "at",
    "bucket_by_sequence_length", "cardinality", "choose_from_datasets", "copy_to_device", "dense_to_ragged_batch", "enable_debug_mode",
    "enumerate_dataset", "from_list", "get_next_as_optional", "get_single_element", "get_structure",
    "group_by_reducer", "group_by_window", "ignore_errors", "load", "make_batched_features_dataset",
    "make_csv_dataset", "map_and_batch",
    "pad_to_cardinality", "parallel_interleave", "parse_example_dataset", "prefetch_to_device", "rebatch", "rejection_resample",
    "sample_from_datasets", "save", "scan", "shuffle_and_repeat", "snapshot", "take_while", "unbatch", "unique",
]
