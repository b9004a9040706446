"""``Dataset.rejection_resample``: elements rejected or repeated so that their classes follow a
target distribution (TF 2's algorithm, NumPy's random bits).

TF builds it from other transformations; here it is one ``PyStream`` giving the same process:

* the class distribution ``p`` is ``initial_dist``, or estimated as the input streams by: counts
  start at 10 per class, grow by each batch of 32 class values, and every element of a batch
  sees the estimate after its whole batch (TF's ``batch(32).scan(...).unbatch()``);
* from ``p`` and the target ``t``: ratios ``r = t / (p + tiny)``, the mixing probability
  ``m = min(r)`` and the per-class acceptance ``a = (r - m) / (max(r) - m)``;
* each output element comes from the *original* input (probability ``m``) or from a
  *filtered* copy of it, which keeps an element of class ``c`` with probability ``a[c]``: two
  independent passes over the input, as TF's ``sample_from_datasets`` over the input and its
  filtered copy (``stop_on_empty_dataset=True``: the first to end ends the output);
* with ``initial_dist`` given, ``m == 1`` is the input with its classes (cardinality known),
  ``m == 0`` the filtered copy alone.

Elements are ``(class, element)`` pairs.  The draws (mixture choice, acceptance) are NumPy's
PCG64 seeded with the seed words and, without a ``seed``, the iteration number (a ``seed`` gives
the same output each iteration, as TF's).
"""
import itertools
import logging
from typing import Any, Callable, Iterator, List, Optional

import numpy as np

from ..compile.signature import TensorSpec
from ..core.errors import InvalidArgumentError, UnimplementedError
from ..core.tensor import Tensor
from . import args as A
from .build import Build
from .dataset import Dataset, _seed_list, helper, kind
from .functions import StructuredFunction
from .pystreams import Element, PyStream, read

_log = logging.getLogger("tapejax")
_BATCH, _SMOOTHING = 32, 10
_TINY = np.finfo(np.float32).tiny


def _dist(value: Any, name: str) -> np.ndarray:
    v = value.numpy() if isinstance(value, Tensor) else value
    a = np.asarray(v)
    if a.dtype.kind in "SUO":
        raise UnimplementedError(None, None, f"Cast string to float is not supported (argument `{name}`: {value!r}).")
    a = a.astype(np.float32)
    if a.ndim != 1:
        raise ValueError(f"Argument `{name}` must be a vector (shape [num_classes]); got shape {list(a.shape)}.")
    return a


def _mixing(p: np.ndarray, t: np.ndarray) -> "tuple[np.ndarray, float]":
    """TF's acceptance probabilities and probability of the original: ``(a, m)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = t / (p + _TINY)
        m = r.min()
        return ((r - m) / (r.max() - m)).astype(np.float32), float(m)


@kind
class RejectionResample(PyStream):
    def __init__(self, input: Dataset, class_func: Callable[..., Any], target: np.ndarray,
                 initial: Optional[np.ndarray], seed: List[int], rerandomize: bool, static_m: Optional[float]):
        self._cls = StructuredFunction(class_func, input.element_spec, "Dataset.rejection_resample()", input._x64)
        out = self._cls.output_spec
        if not isinstance(out, TensorSpec):
            raise ValueError("Invalid `class_func`. `class_func` must return a scalar integer tensor (the class); "
                             f"its return type is {out!r}.")
        if not out.dtype.is_integer or out.dtype.is_unsigned and out.dtype.name != "uint8":
            raise TypeError(f"Value passed to parameter 'indices' has DataType {out.dtype.name} not in list of allowed "
                            "values: uint8, int8, int32, int64 (`class_func` must return an integer class).")
        if out.shape != ():
            raise ValueError("Invalid `class_func`. `class_func` must return a scalar integer tensor (the class); "
                             f"its return type is {out!r}.")
        self._target, self._initial, self._seed, self._static_m = target, initial, seed, static_m
        self._rerandomize = rerandomize
        self._iterations = itertools.count()
        card = input._cardinality if static_m == 1 else A.UNKNOWN
        super().__init__((input,), (out, input.element_spec), card)

    # -- the pieces ---------------------------------------------------------------------
    def _classes(self, chunk: List[Element]) -> np.ndarray:
        n = len(self._target)
        out = np.asarray([int(np.asarray(self._cls(el)[0])) for el in chunk], np.int64)
        bad = out[(out < 0) | (out >= n)]
        if len(bad):
            raise InvalidArgumentError(None, None, f"rejection_resample: `class_func` returned class {int(bad[0])}, "
                                       f"outside [0, {n}) (len(target_dist) = {n}).")
        return out

    def _chunks(self, ctx: Build) -> Iterator["tuple[List[Element], np.ndarray, np.ndarray]"]:
        """The input in batches of 32: elements, their classes, and the class distribution each
        of them sees (given, or the running estimate after the batch)."""
        counts = np.full(len(self._target), _SMOOTHING, np.int64)
        source = read(self._inputs[0], ctx)
        while True:
            chunk = list(itertools.islice(source, _BATCH))
            if not chunk:
                return
            classes = self._classes(chunk)
            if self._initial is not None:
                p = self._initial
            else:
                counts = counts + np.bincount(classes, minlength=len(self._target))
                p = (counts / counts.sum()).astype(np.float32)
            yield chunk, classes, p

    def _original(self, ctx: Build) -> Iterator[Element]:
        for chunk, classes, _ in self._chunks(ctx):
            for el, c in zip(chunk, classes):
                yield (self._class_value(c),) + tuple(el)

    def _filtered(self, ctx: Build, rng: np.random.Generator) -> Iterator[Element]:
        warned = False
        for chunk, classes, p in self._chunks(ctx):
            a, _ = _mixing(p, self._target)
            rejected = float(np.sum((1 - a) * p))
            if rejected >= 0.5 and not warned:
                _log.warning("Proportion of examples rejected by sampler is high: %s %s %s", rejected, p, a)
                warned = True
            for el, c in zip(chunk, classes):
                if rng.random(dtype=np.float32) < a[c]:
                    yield (self._class_value(c),) + tuple(el)

    def _weights(self, ctx: Build) -> Iterator[float]:
        """The probability of taking the original, per output element."""
        if self._initial is not None:
            m = _mixing(self._initial, self._target)[1]
            while True:
                yield m
        for _, _, p in self._chunks(ctx):
            m = _mixing(p, self._target)[1]
            for _ in range(_BATCH):
                yield m

    def _class_value(self, c: np.integer) -> np.ndarray:
        spec = self.element_spec[0]
        return np.asarray(c, spec.dtype._np)

    def _elements(self, ctx: Build) -> Iterator[Element]:
        k, _ = ctx.draw(self, lambda: next(self._iterations) if self._rerandomize else 0)
        rng = np.random.default_rng(self._seed + [k])
        if self._static_m == 1:
            yield from self._original(ctx)
            return
        filtered = self._filtered(ctx, np.random.default_rng(self._seed + [k, 1]))
        if self._static_m == 0:
            yield from filtered
            return
        original = self._original(ctx)
        for m in self._weights(ctx):
            src = original if rng.random() < m else filtered
            try:
                yield next(src)
            except StopIteration:
                return


@helper
def rejection_resample(dataset: Dataset, class_func: Any, target_dist: Any, initial_dist: Any, seed: Any) -> Dataset:
    A.callable_arg(class_func)
    target = _dist(target_dist, "target_dist")
    initial = None if initial_dist is None else _dist(initial_dist, "initial_dist")
    op_seed = A.seed(seed)
    static_m = None
    if initial is not None:
        if initial.shape != target.shape:
            raise InvalidArgumentError(None, None, f"Incompatible shapes: `initial_dist` has shape {list(initial.shape)} "
                                       f"and `target_dist` {list(target.shape)}.")
        with np.errstate(divide="ignore", invalid="ignore"):
            static_m = float(np.min(target / initial))
    return RejectionResample(dataset, class_func, target, initial, _seed_list(op_seed), op_seed is None, static_m)
