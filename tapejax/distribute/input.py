"""Input for a strategy: ``experimental_distribute_dataset``, ``distribute_datasets_from_function``,
``tf.distribute.InputContext`` / ``InputOptions`` / ``InputReplicationMode``.

TF splits each global batch into one batch per replica.  Here the program is one SPMD program
over the strategy's devices, so a distributed dataset gives each **global** batch, placed for
it (``strategy.extended._place_input``: split over the devices along the batch dimension, see
``mirrored.py``); XLA then runs each device's part where it lies.  With one replica the
elements are the dataset's, as TF's.

``distribute_datasets_from_function`` calls the function once with an ``InputContext``
(``num_replicas_in_sync``, so ``get_per_replica_batch_size`` gives the per-replica batch);
each global batch is the next ``num_replicas_in_sync`` per-replica batches, as TF hands them to
the replicas in turn.  ``InputReplicationMode.PER_REPLICA`` calls it once per replica
(``input_pipeline_id`` = the replica) and a global batch takes one batch from each.

Inside a ``tapejax.function`` (``for x in dist_dataset``, ``iter`` there, or a
``DistributedIterator`` passed as an argument) the reads are ``tapejax.data``'s staged reads,
and each element is constrained to the same placement in the program.
"""
import collections
import enum
from typing import Any, Callable, List

from ..compile.signature import ArgRecord
from ..core import nest
from ..core.errors import OutOfRangeError
from ..data.dataset import Dataset
from ..data.optional import Optional as _Optional
from ..data.staged import stages
from ..ops.array import concat

__all__ = ["DistributedDataset", "DistributedIterator", "InputContext", "InputOptions", "InputReplicationMode",
           "distribute_dataset", "distribute_from_function"]


class InputReplicationMode(enum.Enum):
    """``tf.distribute.InputReplicationMode``: one input pipeline per worker (``PER_WORKER``, the
    default) or per replica (``PER_REPLICA``, ``distribute_datasets_from_function`` only)."""

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


class InputOptions(collections.namedtuple("InputOptions", [
        "experimental_fetch_to_device", "experimental_replication_mode", "experimental_place_dataset_on_device",
        "experimental_per_replica_buffer_size"])):
    """``tf.distribute.InputOptions``.  Here elements always go to the strategy's devices
    (``experimental_fetch_to_device``), the buffer size is ``tapejax.data``'s prefetch's, and
    ``experimental_replication_mode`` chooses how ``distribute_datasets_from_function`` calls
    its function."""

    def __new__(cls, experimental_fetch_to_device=None,
                experimental_replication_mode=InputReplicationMode.PER_WORKER,
                experimental_place_dataset_on_device=False, experimental_per_replica_buffer_size=1):
        if experimental_fetch_to_device is None:
            experimental_fetch_to_device = True
        if not isinstance(experimental_replication_mode, InputReplicationMode):
            raise TypeError("`experimental_replication_mode` must be a tf.distribute.InputReplicationMode; got "
                            f"{experimental_replication_mode!r}")
        return super().__new__(cls, experimental_fetch_to_device, experimental_replication_mode,
                               experimental_place_dataset_on_device, experimental_per_replica_buffer_size)


class InputContext:
    """``tf.distribute.InputContext``: what ``distribute_datasets_from_function``'s function is
    told (the number of replicas, of input pipelines, and which pipeline it makes)."""

    __slots__ = ["_num_input_pipelines", "_input_pipeline_id", "_num_replicas_in_sync"]

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self._num_input_pipelines = num_input_pipelines
        self._input_pipeline_id = input_pipeline_id
        self._num_replicas_in_sync = num_replicas_in_sync

    @property
    def num_replicas_in_sync(self) -> int:
        return self._num_replicas_in_sync

    @property
    def input_pipeline_id(self) -> int:
        return self._input_pipeline_id

    @property
    def num_input_pipelines(self) -> int:
        return self._num_input_pipelines

    def get_per_replica_batch_size(self, global_batch_size) -> int:
        """``global_batch_size // num_replicas_in_sync`` (ValueError when it does not divide)."""
        if global_batch_size % self._num_replicas_in_sync != 0:
            raise ValueError(f"The `global_batch_size` {global_batch_size!r} is not divisible by "
                             f"`num_replicas_in_sync` {self._num_replicas_in_sync!r} ")
        return global_batch_size // self._num_replicas_in_sync

    def __str__(self) -> str:
        return (f"tf.distribute.InputContext(input pipeline id {self.input_pipeline_id}, "
                f"total: {self.num_input_pipelines})")


# ---------------------------------------------------------------------------
# distributed datasets and iterators
# ---------------------------------------------------------------------------

class DistributedDataset:
    """``tf.distribute.DistributedDataset``: iterate it (``for x in dist_ds``, ``iter``) for
    the global batches placed on the strategy's devices; ``element_spec`` is the global
    batches' (TF's with one replica; TF's per-replica specs otherwise)."""

    def __init__(self, strategy: Any, dataset: Dataset):
        self._strategy = strategy
        self._dataset = dataset

    @property
    def element_spec(self) -> Any:
        return self._dataset.element_spec

    def __iter__(self) -> Any:
        if stages():   # inside a tapejax.function: tapejax.data's staged iterator, placed in the program
            return _TracedPlaced(iter(self._dataset), self._strategy.extended._place_traced)
        return DistributedIterator(self._strategy, iter(self._dataset))

    def _tapejax_for_stmt(self, extra_test: Any, body: Any, get_state: Any, set_state: Any, symbol_names: Any,
                          opts: Any) -> None:
        """``for x in dist_dataset`` converted inside a ``tapejax.function``: the dataset's staged
        loop, each element placed for the program."""
        place = self._strategy.extended._place_traced
        self._dataset._tapejax_for_stmt(extra_test, lambda element: body(place(element)), get_state, set_state,
                                        symbol_names, opts)

    def __repr__(self) -> str:
        return f"<tapejax.distribute.DistributedDataset element_spec={self.element_spec!r}>"


class DistributedIterator:
    """``tf.distribute.DistributedIterator``: ``next(it)`` (StopIteration at the end),
    ``get_next()`` (``OutOfRangeError`` there) and ``get_next_as_optional()`` give the next
    global batch placed on the strategy's devices.  Passed to a ``tapejax.function`` it is read
    inside the program, as a ``tf.data`` iterator is."""

    def __init__(self, strategy: Any, iterator: Any):
        self._strategy = strategy
        self._iterator = iterator

    @property
    def element_spec(self) -> Any:
        return self._iterator.element_spec

    def __iter__(self) -> "DistributedIterator":
        return self

    def __next__(self) -> Any:
        return self._strategy.extended._place_input(next(self._iterator))

    def next(self) -> Any:
        return self.__next__()

    def get_next(self) -> Any:
        try:
            return self.__next__()
        except StopIteration:
            raise OutOfRangeError(None, None, "End of sequence") from None

    def get_next_as_optional(self) -> Any:
        try:
            return _Optional.from_value(self.__next__())
        except StopIteration:
            return _Optional.empty(self.element_spec)

    def _tapejax_flatten(self) -> Any:
        """As a ``tapejax.function`` argument: the ``tf.data`` iterator's handle, its reads placed
        for the program."""
        key, record, leaves = self._iterator._tapejax_flatten()
        ext = self._strategy.extended
        return ("tf.distribute.DistributedIterator", ext._placement_key(), key), _PlacedArg(record, ext), leaves

    def __repr__(self) -> str:
        return f"<tapejax.distribute.DistributedIterator element_spec={self.element_spec!r}>"


class _PlacedArg(ArgRecord):
    """A ``DistributedIterator`` argument in a function's template: the iterator's own record,
    its traced reads placed for the program."""

    def __init__(self, record: ArgRecord, extended: Any):
        self.record = record
        self.extended = extended

    def fill(self, it) -> "_TracedPlaced":
        return _TracedPlaced(self.record.fill(it), self.extended._place_traced)


class _TracedPlaced:
    """A staged iterator inside a trace whose elements are placed for the program."""

    def __init__(self, traced: Any, place: Callable[[Any], Any]):
        self._traced = traced
        self._place = place

    @property
    def element_spec(self) -> Any:
        return self._traced.element_spec

    def __iter__(self) -> "_TracedPlaced":
        return self

    def __next__(self) -> Any:
        return self._place(next(self._traced))

    def next(self) -> Any:
        return self.__next__()

    def get_next(self) -> Any:
        return self._place(self._traced.get_next())

    def get_next_as_optional(self) -> Any:
        return self._traced.get_next_as_optional()   # (its value is read under a condition: not constrained)

    def _tapejax_for_stmt(self, extra_test: Any, body: Any, get_state: Any, set_state: Any, symbol_names: Any,
                          opts: Any) -> None:
        self._traced._tapejax_for_stmt(extra_test, lambda element: body(self._place(element)), get_state, set_state,
                                       symbol_names, opts)


# ---------------------------------------------------------------------------
# the strategies' entry points
# ---------------------------------------------------------------------------

def _check_dataset(dataset: Any, what: str) -> None:
    if not isinstance(dataset, Dataset):
        raise TypeError(f"{what} must be a tf.data.Dataset (tapejax.data.Dataset); got {dataset!r} of type "
                        f"{type(dataset).__name__}")


def _check_options(options: Any) -> InputOptions:
    if options is None:
        return InputOptions()
    if not isinstance(options, InputOptions):
        raise TypeError(f"`options` must be a tf.distribute.InputOptions; got {options!r}")
    return options


def distribute_dataset(strategy: Any, dataset: Any, options: Any) -> DistributedDataset:
    """``strategy.experimental_distribute_dataset(dataset, options)``: ``dataset``'s elements
    are the global batches."""
    opts = _check_options(options)
    if opts.experimental_replication_mode is InputReplicationMode.PER_REPLICA:
        raise NotImplementedError("InputReplicationMode.PER_REPLICA is only supported in "
                                  "`distribute_datasets_from_function`.")
    _check_dataset(dataset, "`dataset`")
    return DistributedDataset(strategy, dataset)


def distribute_from_function(strategy: Any, dataset_fn: Any, options: Any) -> DistributedDataset:
    """``strategy.distribute_datasets_from_function(dataset_fn, options)`` (see the module
    docstring)."""
    opts = _check_options(options)
    if not callable(dataset_fn):
        raise TypeError(f"`dataset_fn` must be callable (an InputContext -> a tf.data.Dataset); got {dataset_fn!r}")
    n = strategy.num_replicas_in_sync
    if opts.experimental_replication_mode is InputReplicationMode.PER_REPLICA and n > 1:
        datasets: List[Any] = []
        for i in range(n):
            ds = dataset_fn(InputContext(num_input_pipelines=n, input_pipeline_id=i, num_replicas_in_sync=n))
            _check_dataset(ds, "`dataset_fn`'s result")
            datasets.append(ds)
        joined = Dataset.zip(tuple(datasets)).map(_concat_replicas)
        return DistributedDataset(strategy, joined)
    ds = dataset_fn(InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=n))
    _check_dataset(ds, "`dataset_fn`'s result")
    return DistributedDataset(strategy, strategy.extended._global_batches(ds))


def _concat_replicas(*elements: Any) -> Any:
    """One element of each replica's dataset, concatenated along the batch dimension."""
    flat = [nest.flatten(e) for e in elements]
    return nest.pack_sequence_as(elements[0], [concat(list(parts), 0) for parts in zip(*flat)])
