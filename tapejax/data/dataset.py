"""``tapejax.data.Dataset``: tf.data's API; each iteration builds a grain pipeline.

A Dataset is an immutable plan: each transformation returns a new Dataset holding its inputs,
its ``element_spec`` and its cardinality, all known when it is made (a ``map`` function is
traced then, as TF traces it).  ``iter(dataset)`` *builds* the plan into grain datasets
(``nodes`` for random access, ``streams`` and grain's own transformations past a stream-only
step) and wraps grain's iterator in an ``Iterator`` that packs each element into the
structure as tapejax Tensors.  Building per iteration is what gives TF's per-iteration
semantics: a ``shuffle`` with ``reshuffle_each_iteration`` draws a new order each time, a
``cache`` fills on the first complete pass and serves the later ones.

The methods here check their arguments (TF's exception classes, the argument named) and
compute the new spec and cardinality; the subclasses in ``sources`` and ``transforms`` build.
"""
import os
from typing import Any, Callable, Iterator as _PyIterator, Optional

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import constant
from ..core.tensor import Tensor
from . import _grain, args as A, iterator as _iterator
from .build import Build
from .options import Options
from .staged import stages
from .staged_for import dataset_for_stmt, staged_iter, staged_reduce, staged_single_element

#: The op seed under which datasets draw their seeds from ``tapejax.random``'s generator.
_DATA_SEED_STREAM = 0x7DA7A


#: The kinds of Dataset (sources and transformations) by class name, registered where each is
#: defined (``sources``, ``transforms``, imported by the package): the methods below make them.
KINDS: "dict[str, type]" = {}


def kind(cls: type) -> type:
    """Class decorator: register a Dataset kind in ``KINDS``."""
    KINDS[cls.__name__] = cls
    return cls


#: Functions the methods below call that live with the kinds (``loops``, ``pystreams``):
#: registered there by name, so that this module imports neither.
HELPERS: "dict[str, Callable[..., Any]]" = {}


def helper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: register a function in ``HELPERS``."""
    HELPERS[fn.__name__] = fn
    return fn


class Dataset:
    """``tf.data.Dataset``: a pipeline of elements (Tensors in tuples and dicts), built on grain.

    Make one with ``from_tensor_slices``, ``from_tensors``, ``range``, ``from_generator`` or
    ``zip``; transform it with ``map``, ``filter``, ``batch``, ``shuffle`` ...; iterate it in a
    Python loop (``for x, y in dataset:``).  See the package README for how it maps to grain.
    """

    def __init__(self, inputs: tuple, element_spec: Any, cardinality: int):
        self._inputs = tuple(inputs)
        self._element_spec = element_spec
        self._cardinality = cardinality
        self._x64 = _dtypes.x64_enabled()

    # -- what it is ------------------------------------------------------------
    @property
    def element_spec(self) -> Any:
        """The structure of an element, a ``TensorSpec`` per component (None: unknown size)."""
        return self._element_spec

    @property
    def _type_spec(self) -> Any:
        """TF's ``DatasetSpec`` of this dataset (``tf.type_spec_from_value`` reads it)."""
        from .structure import DatasetSpec
        return DatasetSpec(self._element_spec)

    def cardinality(self) -> Tensor:
        """The number of elements as a scalar int64 Tensor (int32 without JAX's x64 mode), or
        ``INFINITE_CARDINALITY`` (-1) / ``UNKNOWN_CARDINALITY`` (-2)."""
        return constant(np.int64(self._cardinality))

    def __len__(self) -> int:
        if self._cardinality == A.INFINITE:
            raise TypeError("The dataset is infinite.")
        if self._cardinality == A.UNKNOWN:
            raise TypeError("The dataset length is unknown.")
        return self._cardinality

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} element_spec={self._element_spec!r}>"

    def options(self) -> Options:
        """The options of this dataset and its inputs, merged (later settings win)."""
        merged = Options()
        for d in self._inputs:
            merged = merged.merge(d.options())
        own = getattr(self, "_own_options", None)
        return merged if own is None else merged.merge(own)

    # -- iteration -------------------------------------------------------------
    def __iter__(self) -> Any:
        if stages():   # in a tapejax.function: a new iterator at each call (``staged_for``)
            return staged_iter(self)
        return _iterator.Iterator(self)

    def _tapejax_for_stmt(self, extra_test: Any, body: Any, get_state: Any, set_state: Any, symbol_names: Any,
                          opts: Any) -> None:
        """AutoGraph's converted ``for x in dataset`` in a ``tapejax.function``: a staged loop over
        a new iteration at each call (``staged_for.py``)."""
        dataset_for_stmt(self, extra_test, body, get_state, set_state, symbol_names, opts)

    def as_numpy_iterator(self) -> _PyIterator[Any]:
        """The elements as NumPy values (an ndarray per component, a NumPy scalar at rank 0)."""
        from .structure import DatasetSpec, flatten
        for s in flatten(self._element_spec):
            if isinstance(s, DatasetSpec):
                raise TypeError("Dataset.as_numpy_iterator() is not supported for datasets that produce values of "
                                f"type {s!r} (elements that are Datasets: iterate each one).")
        return _iterator.NumpyIterator(self)

    def _build(self, ctx: Build) -> Any:
        """The grain dataset for one iteration (a ``nodes.Node`` or a grain ``IterDataset``)."""
        raise NotImplementedError(type(self).__name__)   # every subclass defines it

    def _build_stream(self, ctx: Build) -> Any:
        from . import nodes
        p = self._build(ctx)
        ctx.output_random_access = isinstance(p, nodes.Node)   # (the outermost call finishes last)
        return nodes.to_iter(p)

    def _build_output(self, ctx: Build, to_device: Optional[Callable[[Any], Any]]) -> Any:
        """The stream the Iterator reads; ``prefetch`` at the end also moves elements to the
        device there (``to_device``), off the consumer's thread."""
        return self._build_stream(ctx)

    # -- sources -----------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors: Any, name: Optional[str] = None) -> "Dataset":
        """One element per row of ``tensors`` (every component sliced along its first axis)."""
        _grain.require()
        return KINDS["TensorSlices"](tensors)

    @staticmethod
    def from_tensors(tensors: Any, name: Optional[str] = None) -> "Dataset":
        """One element: ``tensors``."""
        _grain.require()
        return KINDS["Tensors"](tensors)

    @staticmethod
    def range(*args: Any, output_type: Any = _dtypes.int64, name: Optional[str] = None) -> "Dataset":
        """``range(stop)``, ``range(start, stop[, step])``: int64 scalars (int32 without x64)."""
        _grain.require()
        return KINDS["Range"](args, output_type)

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any = None, output_shapes: Any = None,
                       args: Any = None, output_signature: Any = None, name: Optional[str] = None) -> "Dataset":
        """The elements ``generator(*args)`` yields, converted to ``output_signature``."""
        _grain.require()
        return KINDS["Generator"](generator, output_types, output_shapes, args, output_signature)

    @staticmethod
    def zip(*datasets: Any, name: Optional[str] = None) -> "Dataset":
        """Elements of several datasets side by side, in their (nested) structure."""
        _grain.require()
        if len(datasets) == 1 and not isinstance(datasets[0], Dataset):
            datasets = datasets[0]
        return KINDS["Zip"](datasets)

    # -- transformations -----------------------------------------------------------
    def map(self, map_func: Callable[..., Any], num_parallel_calls: Optional[int] = None,
            deterministic: Optional[bool] = None, name: Optional[str] = None) -> "Dataset":
        """``map_func`` on every element (a tuple element is passed as separate arguments); it runs
        tapejax ops, compiled once per input shape (``functions``)."""
        A.callable_arg(map_func)
        if num_parallel_calls is not None:
            num_parallel_calls = A.integer(num_parallel_calls, "num_parallel_calls")
            if num_parallel_calls <= 0 and num_parallel_calls != A.AUTOTUNE:
                raise A.InvalidArgumentError(None, None, "map: `num_parallel_calls` must be greater than zero "
                                             f"or tf.data.AUTOTUNE (-1); got {num_parallel_calls}.")
        return KINDS["Map"](self, map_func, num_parallel_calls, None if deterministic is None else bool(deterministic))

    def filter(self, predicate: Callable[..., Any], name: Optional[str] = None) -> "Dataset":
        """The elements for which ``predicate`` returns a scalar ``True``."""
        A.callable_arg(predicate)
        return KINDS["Filter"](self, predicate)

    def batch(self, batch_size: Any, drop_remainder: bool = False, num_parallel_calls: Optional[int] = None,
              deterministic: Optional[bool] = None, name: Optional[str] = None) -> "Dataset":
        """Consecutive elements stacked on a new first axis; the last, shorter batch is kept unless
        ``drop_remainder``."""
        size = A.positive(batch_size, "batch_size", "batch")
        return KINDS["Batch"](self, size, bool(drop_remainder), None)

    def padded_batch(self, batch_size: Any, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False, name: Optional[str] = None) -> "Dataset":
        """``batch`` for components of different shapes: each padded to ``padded_shapes`` (None or
        an unknown dimension: the batch's longest) with ``padding_values`` (default 0)."""
        size = A.positive(batch_size, "batch_size", "padded_batch")
        return KINDS["Batch"](self, size, bool(drop_remainder), (padded_shapes, padding_values))

    def ragged_batch(self, batch_size: Any, drop_remainder: bool = False, row_splits_dtype: Any = _dtypes.int64,
                     name: Optional[str] = None) -> "Dataset":
        """``batch`` where components whose shapes vary become RaggedTensors (a dense component with
        unknown dimensions: ragged up to its last unknown one; a RaggedTensor: one more ragged
        dimension); fully known dense components are stacked, as TF's."""
        size = A.positive(batch_size, "batch_size", "ragged_batch")
        if _dtypes.as_dtype(row_splits_dtype).name not in ("int32", "int64"):
            raise ValueError(f"row_splits_dtype must be int32 or int64; got {_dtypes.as_dtype(row_splits_dtype).name} "
                             "(argument `row_splits_dtype` of ragged_batch)")
        return KINDS["Batch"](self, size, bool(drop_remainder), None, ragged=True)

    def unbatch(self, name: Optional[str] = None) -> "Dataset":
        """Each element split along its first axis into elements."""
        return KINDS["Unbatch"](self)

    def shuffle(self, buffer_size: Any, seed: Optional[int] = None, reshuffle_each_iteration: Optional[bool] = None,
                name: Optional[str] = None) -> "Dataset":
        """The elements in a random order, mixed within windows of ``buffer_size`` (grain's
        order, not TF's: see the README); a new order each iteration unless
        ``reshuffle_each_iteration=False``."""
        size = A.integer(buffer_size, "buffer_size")
        if size <= 0 and size != A.UNKNOWN:
            raise A.InvalidArgumentError(None, None, "shuffle: `buffer_size` must be greater than zero or "
                                         f"UNKNOWN_CARDINALITY (-2, the whole dataset); got {size}.")
        op_seed = A.seed(seed)
        return KINDS["Shuffle"](self, size, _seed_list(op_seed),
                                   True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration))

    def repeat(self, count: Any = None, name: Optional[str] = None) -> "Dataset":
        """The elements ``count`` times over (None or negative: forever)."""
        n = None if count is None else A.integer(count, "count")
        return KINDS["Repeat"](self, None if n is None or n < 0 else n)

    def take(self, count: Any, name: Optional[str] = None) -> "Dataset":
        """The first ``count`` elements (-1: all)."""
        return KINDS["Take"](self, A.integer(count, "count"))

    def skip(self, count: Any, name: Optional[str] = None) -> "Dataset":
        """All but the first ``count`` elements (-1: none left)."""
        return KINDS["Skip"](self, A.integer(count, "count"))

    def cache(self, filename: str = "", name: Optional[str] = None) -> "Dataset":
        """The elements of the first complete iteration, kept in memory (or written to the file
        ``filename`` + ``.tapejax-cache.npz``, which later iterations and other processes read)
        and served afterwards."""
        if not isinstance(filename, (str, os.PathLike)):
            raise TypeError(f"Argument `filename` must be a string; got {filename!r} of type "
                            f"{type(filename).__name__} (Cannot convert {filename!r} to EagerTensor of dtype string).")
        return KINDS["Cache"](self, os.fspath(filename))

    def prefetch(self, buffer_size: Any, name: Optional[str] = None) -> "Dataset":
        """Up to ``buffer_size`` elements computed ahead in a background thread (``AUTOTUNE``: 2);
        last in a pipeline, they are also moved to the device there."""
        size = A.AUTOTUNE if buffer_size is None else A.integer(buffer_size, "buffer_size")
        if size < A.AUTOTUNE:
            raise A.InvalidArgumentError(None, None, "prefetch: `buffer_size` must be >= 0 or set buffer_size to "
                                         f"be -1 for auto-tuning; got {size}.")
        return KINDS["Prefetch"](self, size)

    def concatenate(self, dataset: "Dataset", name: Optional[str] = None) -> "Dataset":
        """This dataset's elements, then ``dataset``'s (same structure and dtypes)."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"Argument `dataset` must be a tapejax.data.Dataset; got {dataset!r} of type "
                            f"{type(dataset).__name__}")
        return KINDS["Concatenate"](self, dataset)

    def enumerate(self, start: Any = 0, name: Optional[str] = None) -> "Dataset":
        """``(index, element)`` pairs, the index an int64 scalar from ``start``."""
        return KINDS["Zip"]((KINDS["Range"].counter(A.integer(start, "start")), self))

    # -- nested datasets and Python-loop transformations (``pystreams``) ------------------
    def flat_map(self, map_func: Callable[..., Any], name: Optional[str] = None) -> "Dataset":
        """The elements of the Datasets ``map_func`` returns for each element, one after another."""
        return KINDS["FlatMap"](self, map_func)

    def interleave(self, map_func: Callable[..., Any], cycle_length: Any = None, block_length: Any = None,
                   num_parallel_calls: Optional[int] = None, deterministic: Optional[bool] = None,
                   name: Optional[str] = None) -> "Dataset":
        """The Datasets ``map_func`` returns, ``cycle_length`` at a time, ``block_length`` elements
        from each in turn (TF's order; ``cycle_length`` None or AUTOTUNE: the CPU count).  With
        ``num_parallel_calls`` the open datasets are read ahead in threads (that many computing at
        once), in the same order unless ``deterministic=False``."""
        cycle = A.AUTOTUNE if cycle_length is None else A.integer(cycle_length, "cycle_length")
        if cycle <= 0 and cycle != A.AUTOTUNE:
            raise A.InvalidArgumentError(None, None, "interleave: `cycle_length` must be greater than zero or "
                                         f"tf.data.AUTOTUNE (-1); got {cycle}.")
        block = 1 if block_length is None else A.positive(block_length, "block_length", "interleave")
        npc = None
        if num_parallel_calls is not None:
            npc = A.integer(num_parallel_calls, "num_parallel_calls")
            if npc <= 0 and npc != A.AUTOTUNE:
                raise A.InvalidArgumentError(None, None, "interleave: `num_parallel_calls` must be greater than "
                                             f"zero or tf.data.AUTOTUNE (-1); got {npc}.")
        return KINDS["Interleave"](self, map_func, cycle, block, npc,
                                   None if deterministic is None else bool(deterministic))

    def window(self, size: Any, shift: Any = None, stride: Any = 1, drop_remainder: bool = False,
               name: Optional[str] = None) -> "Dataset":
        """Windows of ``size`` elements every ``shift`` (default ``size``), taking every
        ``stride``-th: each an element of Datasets (one per component, in the structure)."""
        n = A.positive(size, "size", "window")
        sh = n if shift is None else A.positive(shift, "shift", "window")
        st = A.positive(stride, "stride", "window")
        return KINDS["Window"](self, n, sh, st, bool(drop_remainder))

    def group_by_window(self, key_func: Callable[..., Any], reduce_func: Callable[..., Any],
                        window_size: Any = None, window_size_func: Optional[Callable[..., Any]] = None,
                        name: Optional[str] = None) -> "Dataset":
        """Elements grouped by ``key_func`` (an int64 scalar); each full window of a key (and each
        group left at the end) becomes ``reduce_func(key, window_dataset)``'s elements."""
        if (window_size is None) == (window_size_func is None):
            raise ValueError("Either the `window_size` argument or the `window_size_func` argument must be "
                             "specified (exactly one of them).")
        size = None if window_size is None else A.positive(window_size, "window_size", "group_by_window")
        return KINDS["GroupByWindow"](self, A.callable_arg(key_func, "key_func"),
                                      A.callable_arg(reduce_func, "reduce_func"), size, window_size_func)

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any], bucket_boundaries: Any,
                                  bucket_batch_sizes: Any, padded_shapes: Any = None, padding_values: Any = None,
                                  pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                                  drop_remainder: bool = False, name: Optional[str] = None) -> "Dataset":
        """Elements batched by length bucket (``group_by_window``, TF's recipe): bucket ``i`` holds
        lengths in ``[boundaries[i-1], boundaries[i])`` and is padded-batched by ``bucket_batch_sizes[i]``."""
        return HELPERS["bucket_by_sequence_length"](self, element_length_func, bucket_boundaries, bucket_batch_sizes,
                                         padded_shapes, padding_values, pad_to_bucket_boundary, no_padding,
                                         drop_remainder)

    def scan(self, initial_state: Any, scan_func: Callable[..., Any], name: Optional[str] = None) -> "Dataset":
        """``scan_func(state, element) -> (new_state, output)`` over the elements: the outputs."""
        return KINDS["Scan"](self, initial_state, A.callable_arg(scan_func, "scan_func"))

    def reduce(self, initial_state: Any, reduce_func: Callable[..., Any], name: Optional[str] = None) -> Any:
        """``reduce_func(state, element) -> new_state`` over every element: the last state."""
        fn = A.callable_arg(reduce_func, "reduce_func")
        if stages():   # in a tapejax.function: the whole reduction at each call
            return staged_reduce(self, initial_state, fn)
        return HELPERS["reduce"](self, initial_state, fn)

    def take_while(self, predicate: Callable[..., Any], name: Optional[str] = None) -> "Dataset":
        """The elements up to the first one for which ``predicate`` is False."""
        return KINDS["TakeWhile"](self, A.callable_arg(predicate, "predicate"))

    def unique(self, name: Optional[str] = None) -> "Dataset":
        """Each distinct element once, where it first came (scalar int32 / int64 / string elements)."""
        return KINDS["Unique"](self)

    def ignore_errors(self, log_warning: bool = False, name: Optional[str] = None) -> "Dataset":
        """The elements whose computation raised no error (the others dropped, logged with
        ``log_warning``)."""
        return KINDS["IgnoreErrors"](self, bool(log_warning))

    def rebatch(self, batch_size: Any, drop_remainder: bool = False, name: Optional[str] = None) -> "Dataset":
        """The batched input's rows in batches of ``batch_size`` (a list of sizes: cycled)."""
        sizes = batch_size if isinstance(batch_size, (list, tuple)) else [batch_size]
        if isinstance(batch_size, Tensor):
            sizes = np.asarray(batch_size.numpy()).reshape(-1).tolist()
        if not sizes:
            raise A.InvalidArgumentError(None, None, "rebatch: `batch_size` must hold at least one size; got [].")
        return KINDS["Rebatch"](self, [A.positive(b, "batch_size", "rebatch") for b in sizes], bool(drop_remainder))

    def shard(self, num_shards: Any, index: Any, name: Optional[str] = None) -> "Dataset":
        """Every ``num_shards``-th element from ``index``."""
        n = A.positive(num_shards, "num_shards", "shard")
        i = A.integer(index, "index")
        if not 0 <= i < n:
            raise A.InvalidArgumentError(None, None, f"shard: `index` must be between 0 and {n - 1} "
                                         f"(num_shards={n}); got {i}.")
        return KINDS["Shard"](self, n, i)

    def get_single_element(self, name: Optional[str] = None) -> Any:
        """The dataset's only element (InvalidArgumentError when it has none or more than one)."""
        if stages():   # in a tapejax.function: read at each call
            return staged_single_element(self)
        it = iter(self)
        try:
            element = next(it)
        except StopIteration:
            raise A.InvalidArgumentError(None, None, "Dataset was empty.") from None
        try:
            next(it)
        except StopIteration:
            return element
        finally:
            it.close()
        raise A.InvalidArgumentError(None, None, "Dataset had more than one element.")

    @staticmethod
    def choose_from_datasets(datasets: Any, choice_dataset: "Dataset", stop_on_empty_dataset: bool = True,
                             name: Optional[str] = None) -> "Dataset":
        """Element ``k`` from ``datasets[choice_k]`` (``choice_dataset``: int64 scalars)."""
        return KINDS["Choose"](HELPERS["check_choices"](datasets, choice_dataset), choice_dataset, bool(stop_on_empty_dataset))

    @staticmethod
    def sample_from_datasets(datasets: Any, weights: Any = None, seed: Optional[int] = None,
                             stop_on_empty_dataset: bool = False, rerandomize_each_iteration: Optional[bool] = None,
                             name: Optional[str] = None) -> "Dataset":
        """Elements drawn at random from ``datasets`` with ``weights`` (default: equal)."""
        ds, w = HELPERS["check_weights"](datasets, weights)
        return KINDS["Sample"](ds, w, _seed_list(A.seed(seed)), bool(stop_on_empty_dataset),
                               True if rerandomize_each_iteration is None else bool(rerandomize_each_iteration))

    @staticmethod
    def counter(start: Any = 0, step: Any = 1, dtype: Any = _dtypes.int64, name: Optional[str] = None) -> "Dataset":
        """``start, start + step, ...`` forever."""
        _grain.require()
        a, b = A.integer(start, "start"), A.integer(step, "step")
        return KINDS["Range"]((a, a + b, b), dtype, counter=True)

    @staticmethod
    def random(seed: Optional[int] = None, rerandomize_each_iteration: Optional[bool] = None,
               name: Optional[str] = None) -> "Dataset":
        """Random non-negative int64 scalars forever (grain/NumPy's bits, not TF's: see the README)."""
        _grain.require()
        return KINDS["RandomInts"](_seed_list(A.seed(seed)), bool(rerandomize_each_iteration))

    # -- files: save / load, snapshot, list_files (``persist``, ``strings``) ----------------
    def save(self, path: Any, compression: Optional[str] = None, shard_func: Optional[Callable[..., Any]] = None,
             checkpoint_args: Optional[dict] = None) -> None:
        """Write every element under the directory ``path`` (tapejax's format: NumPy parts and a
        JSON description, not TF's snapshot files); ``load`` reads it back.  ``compression``:
        ``"GZIP"`` compresses; ``shard_func(element)`` (an int64 scalar) picks each element's
        shard file.  ``checkpoint_args`` is accepted (a dict) but the write is not resumable: it
        is all or nothing."""
        HELPERS["save"](self, path, compression, shard_func, checkpoint_args)

    @staticmethod
    def load(path: Any, element_spec: Any = None, compression: Optional[str] = None,
             reader_func: Optional[Callable[["Dataset"], "Dataset"]] = None, wait: bool = False) -> "Dataset":
        """The dataset ``save`` wrote under ``path``: ``element_spec`` and cardinality recovered from
        it; ``compression`` must be the one it was written with (else DataLossError when read);
        ``reader_func(shards)`` gets a Dataset of the shard Datasets (default: interleaved, as TF).
        NotFoundError when ``path`` holds no save."""
        _grain.require()
        return HELPERS["load"](path, element_spec, compression, reader_func)

    def snapshot(self, path: Any, compression: Optional[str] = "AUTO",
                 reader_func: Optional[Callable[["Dataset"], "Dataset"]] = None,
                 shard_func: Optional[Callable[..., Any]] = None, name: Optional[str] = None) -> "Dataset":
        """This dataset, written under ``path/<fingerprint>`` by the first iteration that runs to the
        end and read from there by every later one (an iteration stopped early writes nothing)."""
        return HELPERS["snapshot"](self, path, compression, reader_func, shard_func)

    def fingerprint(self) -> Tensor:
        """A hash of the dataset's plan (sources, transformations, arguments, functions' code):
        a uint64 scalar (uint32, its low bits, without JAX's 64-bit mode)."""
        return HELPERS["fingerprint_tensor"](self)

    @staticmethod
    def list_files(file_pattern: Any, shuffle: Optional[bool] = None, seed: Optional[int] = None,
                   name: Optional[str] = None) -> "Dataset":
        """The files matching the glob pattern(s) as scalar string elements (NumPy bytes: tapejax
        has no string tensors), sorted, shuffled unless ``shuffle`` is False; InvalidArgumentError
        when nothing matches."""
        _grain.require()
        return HELPERS["list_files"](file_pattern, shuffle, seed)

    def rejection_resample(self, class_func: Callable[..., Any], target_dist: Any, initial_dist: Any = None,
                           seed: Optional[int] = None, name: Optional[str] = None) -> "Dataset":
        """``(class, element)`` pairs whose classes follow ``target_dist``: elements rejected or
        repeated (TF's mixture of the input and a rejection-sampled copy of it); ``initial_dist``
        None: the class distribution is estimated as the elements stream by."""
        return HELPERS["rejection_resample"](self, class_func, target_dist, initial_dist, seed)

    def apply(self, transformation_func: Callable[["Dataset"], "Dataset"]) -> "Dataset":
        """``transformation_func(self)``, which must return a Dataset."""
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise TypeError(f"`transformation_func` must return a Dataset; got {type(out).__name__}")
        return out

    def with_options(self, options: Options, name: Optional[str] = None) -> "Dataset":
        """This dataset with ``options`` merged into its ``options()``."""
        if not isinstance(options, Options):
            raise TypeError(f"Argument `options` must be a tapejax.data.Options; got {options!r}")
        return KINDS["WithOptions"](self, options)


def _seed_list(op_seed: Optional[int]) -> list:
    """The seed words of a random transformation: the op seed (with the global seed when one is
    set, as TF combines them); without an op seed, the global seed and a counter (reproducible
    from ``tapejax.random.set_seed``), else fresh OS entropy."""
    from ..ops.random import get_global_generator
    gen = get_global_generator()
    g = gen.global_seed
    if op_seed is not None:
        return [op_seed] if g is None else [g, op_seed]
    if g is not None:   # the generator's own op-seed stream, which ``set_seed`` restarts
        key = np.asarray(gen.next_key(_DATA_SEED_STREAM)).ravel()
        return [int(w) for w in key.tolist()]
    entropy = np.random.SeedSequence().entropy
    assert isinstance(entropy, int)   # (drawn from the OS when no entropy is given)
    return [entropy]


