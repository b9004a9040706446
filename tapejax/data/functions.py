"""User functions over elements (``map``, ``filter``): traced like TF's, run one element at a time.

TF traces a ``Dataset.map`` function once, when ``map()`` is called, to learn its output
structure, and then runs the graph per element.  Here:

1. **At ``map()`` time** the function runs under ``jax.eval_shape`` on the input spec: its
   output structure and specs become the new ``element_spec``, and a bad return value raises
   there, as in TF.  A dimension the spec leaves unknown (``None``, after ``batch``) is a
   symbolic dimension (``jax.export.symbolic_shape``); when an op cannot take one, the function
   is traced at two concrete sizes instead and dimensions that differ become None.
2. **Per element** the function runs as one ``jax.jit`` program (on the CPU, where tf.data runs
   its functions too): Tensors in, Tensors out.  When every input size is known, the trace made
   at ``map()`` time is that program (``shared_program``: compiled once for every dataset
   function with the same trace, its captured values as arguments, so an ``interleave``'s inner
   datasets share one compile); otherwise it is traced once per input shape.
3. **Eager** instead, op by op on concrete Tensors, when the function cannot be one program:
   Python control flow on a tensor value (what TF's AutoGraph converts; eagerly Python takes
   the branch), value-dependent shapes (``boolean_mask``), a ``tapejax.random`` op (fresh
   values per element, as TF's: the global stream, or an op seed's kernel counter, which
   advances once per call and starts again at each iteration of the dataset), or a Variable
   read (its value at each element, as TF's).  Also, with the traced output spec kept, a function that calls
   back into Python (``numpy_function``, ``py_function``): compiled, each element would take
   JAX's slow dispatch path for programs with host callbacks.  The output spec then comes from one run on zeros of the input
   spec: structure, dtypes and ranks, with every dimension unknown.

Python side effects therefore run once at ``map()`` time (as TF's) and, where sizes are unknown,
once more per traced shape, or per element in eager mode.  Assigning or creating a Variable inside a dataset function is
refused (ValueError at ``map()`` time).
"""
import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np

from ..compile.signature import TensorSpec
from ..core import state as _state
from ..core.caches import LRU
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, OperatorNotAllowedInGraphError
from ..core.tensor import Tensor
from ..ops.indexing_traced import TracedSizeError
from ..ops.ragged_partition import TracedRaggedError
from ..ops.ragged_tensor import RaggedTensor, RaggedTensorSpec
from ..ops.random import DrawInTrace
from ..ops.sparse_tensor import SparseTensor, SparseTensorSpec, TracedSparseError, is_traced
from . import ragged_elements as _ragged, sparse_elements as _sparse, structure as S
from .hostfn import infer_spec, output_spec
from .hostops import TracedStringError
from .hostvalues import host_input, host_values, outputs as host_outputs
from .options import debug_mode

# Errors that mean "this function cannot be one traced program; run it eagerly".
_EAGER_ERRORS: Tuple[type, ...] = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                                   jax.errors.TracerIntegerConversionError, jax.errors.NonConcreteBooleanIndexError,
                                   OperatorNotAllowedInGraphError, TracedStringError, TracedSparseError,
                                   TracedRaggedError, TracedSizeError)


class _UsesVariable(Exception):
    """Raised by the watch collector when a traced function touches a Variable."""

    def __init__(self, var: Any, how: str):
        super().__init__(how)
        self.var = var
        self.how = how


class _Watch:
    """A ``core.state`` collector installed while a dataset function runs: a Variable read
    aborts a trace (the function then runs eagerly); assigning or creating one is refused."""

    #: random ops draw as outside a trace (the global stream, op-seed counters): a traced
    #: function's unseeded draw fails (``_is_random_in_trace``) and it runs eagerly per element
    threads_random = False
    #: a host function (``numpy_function``) is staged only when its inputs are traced: an
    #: element run eagerly calls it directly (``compile.host``)
    stages_host_calls = False

    def __init__(self, reads_ok: bool, op_seed_calls: Optional[int] = None):
        self.reads_ok = reads_ok
        #: the function's call number in this iteration of the dataset, for op-seeded random ops
        #: (``ops.random``: each advances once per call, as TF's kernels); None while tracing
        self.op_seed_calls = op_seed_calls

    def touch(self, var: Any, assign: bool) -> None:
        if assign:
            raise _UsesVariable(var, "assigns")
        if not self.reads_ok:
            raise _UsesVariable(var, "reads")

    def created(self, var: Any) -> None:
        raise _UsesVariable(var, "creates")


class _watching:
    """While a dataset function runs: its ``_Watch`` installed (a class: entered per element)."""

    __slots__ = ("watch", "prev")

    def __init__(self, reads_ok: bool, op_seed_calls: Optional[int] = None):
        self.watch = _Watch(reads_ok, op_seed_calls)

    def __enter__(self) -> None:
        self.prev = _state.set_collector(self.watch)

    def __exit__(self, *exc: Any) -> None:
        _state.set_collector(self.prev)


def _cpu():
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:   # (no CPU backend: leave placement to JAX)
        return None


_CPU = _cpu()


_DEFAULT_CPU = _CPU is None or jax.default_backend() == "cpu"   # (the backend is chosen once per process)


class host_context:
    """Where pipeline code runs: JAX's 64-bit mode as when the dataset was made (worker threads
    have their own), on the CPU device (tf.data's functions run on the host).  A class, entered
    per element: nothing to do in the common case."""

    __slots__ = ("x64", "stack")

    def __init__(self, x64: bool):
        self.x64 = x64
        self.stack: Optional[contextlib.ExitStack] = None

    def __enter__(self) -> None:
        if jax.enable_x64.value == self.x64 and _DEFAULT_CPU:
            return
        stack = self.stack = contextlib.ExitStack()
        if jax.enable_x64.value != self.x64:
            stack.enter_context(jax.enable_x64(self.x64))
        if not _DEFAULT_CPU:
            stack.enter_context(jax.default_device(_CPU))

    def __exit__(self, *exc: Any) -> None:
        if self.stack is not None:
            self.stack.close()
            self.stack = None


def _materialize_random_key() -> None:
    """Make the global random generator's key now, outside any trace: it is made on first use,
    and a first use inside a trace would leave a tracer in it."""
    from ..ops.random import get_global_generator
    get_global_generator().key


def _is_random_in_trace(e: BaseException) -> bool:
    return isinstance(e, DrawInTrace)


def _is_check_in_trace(e: BaseException) -> bool:
    """A runtime check (``tf.debugging.check_numerics`` / ``assert_*``: a ``checkify`` check) in a
    traced program: the function runs eagerly, where the check raises for its element."""
    return isinstance(e, ValueError) and "checkify.check which was not functionalized" in str(e)


def _needs_eager(e: BaseException) -> bool:
    return isinstance(e, _EAGER_ERRORS) or _is_random_in_trace(e) or _is_check_in_trace(e) or (
        isinstance(e, _UsesVariable) and e.how == "reads")


class StructuredFunction:
    """A user function over elements of ``input_spec`` (a nested spec structure).

    ``output_spec`` is the structure the function returns (each component's spec); calling the
    object with a flat tuple of input components returns the flat tuple of output components.
    """

    def __init__(self, fn: Callable[..., Any], input_spec: Any, transformation: str, x64: bool,
                 samples: Optional[Callable[[], List[Tuple[Any, ...]]]] = None):
        self._fn = fn
        self._input_spec = input_spec
        self._in_specs: List[S.Spec] = S.flatten(input_spec)
        #: which input components are strings (host bytes) or SparseTensors (host SparseValues), so
        #: the function runs eagerly (``hostfn``, ``sparse_elements``)
        self._strings = [S.is_string(s) or isinstance(s, (SparseTensorSpec, RaggedTensorSpec)) for s in self._in_specs]
        self._samples = samples
        self._name = transformation
        self._x64 = x64
        self.eager = False
        self.eager_reason = ""
        self.output_spec: Any = None    # the output structure, a spec per component
        self._traced: Any = None        # the last trace's output structure (an ``_Aval`` per component)
        self._jitted = jax.jit(self._pure)
        self._calls = itertools.count()   # this iteration's calls (``new_iteration``)
        #: the per-element program when every input size is known (``shared_program``)
        self._run: Optional[Callable[[Sequence[Any]], Tuple[Any, ...]]] = None
        with host_context(x64):
            spec = self._infer_host() if any(self._strings) else self._infer()
        if debug_mode():   # ``enable_debug_mode``: traced once for the spec, then run eagerly (TF's rule)
            self.eager, self.eager_reason, self._run = True, "tf.data.experimental.enable_debug_mode()", None
        self.output_spec = spec
        self._out_specs: List[S.Spec] = S.flatten(spec)
        #: per output component: (a string?, its NumPy dtype), made at the first check
        self._out_checks: Optional[List[Tuple[bool, Optional[np.dtype]]]] = None

    # -- calling the user's function -----------------------------------------
    def _call_user(self, components: Sequence[Any]) -> Any:
        """The user's function on Tensors (or None) in the input structure; its output with
        every component a Tensor or None (TF's rules for what a dataset function may return)."""
        element = S.pack(self._input_spec, [_sparse.to_sparse(c) if isinstance(c, _sparse.SparseValue) else
                                            _ragged.to_ragged(c) if isinstance(c, _ragged.RaggedValue) else
                                            c if c is None or is_str or isinstance(c, Tensor) else Tensor(c)
                                            for c, is_str in zip(components, self._strings)])
        out = self._fn(*element) if type(element) is tuple else self._fn(element)
        if type(out) is list:      # TF: a top-level list is a tuple of components
            out = tuple(out)
        comps = [self._component(c) for c in S.flatten(out)]
        if all(c is None for c in comps):
            raise InvalidArgumentError(
                f"The function passed to {self._name} returned {out!r}: it must return a tensor or a "
                "(nested) tuple or dict of tensors.")
        return S.pack(out, comps)

    def _component(self, value: Any) -> Any:
        if value is None or isinstance(value, Tensor):
            return value
        if isinstance(value, SparseTensor):
            if is_traced(value.indices) or is_traced(value.values):
                raise TracedSparseError("a SparseTensor output: the function runs eagerly")
            return value
        if isinstance(value, RaggedTensor):
            if is_traced(value.flat_values) or any(is_traced(s) for s in value.nested_row_splits):
                raise TracedRaggedError("a RaggedTensor output: the function runs eagerly")
            return value
        if S.is_bytes(value) or isinstance(value, str) or (isinstance(value, np.ndarray) and value.dtype.kind == "U"):
            return S.string_value(value)   # a string output stays host bytes
        try:
            return convert_to_tensor(value)
        except ValueError:
            raise TypeError(f"Unsupported return value from function passed to {self._name}: {value!r} "
                            f"(of type {type(value).__name__}).") from None

    def _pure(self, *components: Any) -> Tuple[Any, ...]:
        """The traced program: components in, output components out (records the structure)."""
        with _watching(reads_ok=False):
            out = self._call_user(components)
        traced = S.map_structure(lambda t: None if t is None else _Aval(tuple(t.value.shape), t.value.dtype), out)
        if self.output_spec is not None and not S.same_structure(traced, self.output_spec):
            raise InvalidArgumentError(f"The function passed to {self._name} returned {out!r} for another input "
                                       f"shape, whose structure differs from {self.output_spec!r}.")
        self._traced = traced
        return tuple(None if t is None else t.value for t in S.flatten(out))

    # -- the output spec -----------------------------------------------------
    def _infer(self) -> Any:
        unknown = any(isinstance(s, TensorSpec) and (s.shape is None or None in s.shape) for s in self._in_specs)
        if any(isinstance(s, TensorSpec) and s.shape is None for s in self._in_specs):
            return self._infer_eagerly("its input has components of unknown rank")
        try:
            if unknown:
                try:
                    return self._trace_shapes(self._symbolic_args())
                except Exception as e:  # noqa: BLE001 - any failure: the concrete sizes decide
                    if isinstance(e, _UsesVariable) or _needs_eager(e):
                        raise
                return _merge(self._trace_shapes(self._concrete_args(2)), self._trace_shapes(self._concrete_args(3)))
            return self._trace_shapes(self._concrete_args(None), share=True)
        except _UsesVariable as e:
            if e.how != "reads":
                raise self._refuse(e) from None
            return self._infer_eagerly(f"it reads the Variable {getattr(e.var, 'name', '')!r}")
        except Exception as e:
            if _needs_eager(e):
                return self._infer_eagerly(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            raise

    def _trace_shapes(self, args: List[Any], share: bool = False) -> Any:
        """The output spec from a trace at ``args``' shapes; with ``share`` (every input size
        known: this trace is the per-element program) the compiled program is also looked up
        among the ones other dataset functions traced (``shared_program``)."""
        _materialize_random_key()
        closed, out_shape = jax.make_jaxpr(self._pure, return_shape=True)(*args)
        if _calls_host(closed.jaxpr):
            # (``numpy_function`` / ``py_function``: a compiled program with a host callback runs
            # JAX's slow dispatch path per element, ten times the function itself; eagerly the
            # callback is a plain call.  The traced output spec stays.)
            self.eager = True
            self.eager_reason = "it calls back into Python (numpy_function / py_function)"
        elif share:
            self._run = shared_program(closed, jax.tree_util.tree_structure(out_shape), self._x64)
        return S.map_structure(_concrete_spec, self._traced)

    def _symbolic_args(self) -> List[Any]:
        names = []
        for s in self._in_specs:
            if isinstance(s, TensorSpec):
                names += [f"d{len(names)}" for d in (s.shape or ()) if d is None]
        dims = iter(jax.export.symbolic_shape(",".join(names)))
        args = []
        for s in self._in_specs:
            if isinstance(s, TensorSpec):
                shape = tuple(next(dims) if d is None else d for d in (s.shape or ()))
                args.append(jax.ShapeDtypeStruct(shape, s.dtype._np))
            else:
                args.append(None)
        return args

    def _concrete_args(self, size: Optional[int]) -> List[Any]:
        return [jax.ShapeDtypeStruct(tuple(size if d is None else d for d in (s.shape or ())), s.dtype._np)
                if isinstance(s, TensorSpec) else None for s in self._in_specs]

    def _infer_eagerly(self, reason: str) -> Any:
        """Eager mode: the structure, dtypes and ranks from one run on zeros, shapes unknown."""
        self.eager = True
        self.eager_reason = reason
        zeros = [None if not isinstance(s, TensorSpec) else
                 jnp.zeros(tuple(1 if d is None else d for d in (s.shape or ())), s.dtype._np)
                 for s in self._in_specs]
        try:
            out = self._run_eager(zeros)
        except _UsesVariable as e:
            raise self._refuse(e) from None
        return S.map_structure(lambda c: _unknown_dims(output_spec(c)), out)

    def _refuse(self, e: _UsesVariable) -> ValueError:
        return ValueError(f"The function passed to {self._name} {e.how} a Variable "
                          f"({getattr(e.var, 'name', e.var)!r}): tapejax.data functions may read Variables "
                          "but not assign or create them.")

    def new_iteration(self) -> None:
        """A new iteration of the dataset starts: op-seeded random ops count calls from 0 again."""
        self._calls = itertools.count()

    def _run_eager(self, components: Sequence[Any]) -> Any:
        out, comps = self._run_eager_flat(components)
        return S.pack(out, comps)

    def _run_eager_flat(self, components: Sequence[Any], defer: bool = False) -> Tuple[Any, List[Any]]:
        """The function run eagerly: its output structure (of Tensors) and its components as
        values.  Host op results stay NumPy and the ops staged on them run at the end
        (``hostvalues``), or with ``defer`` stay staged (``HostValue`` components) for the batch."""
        with _watching(reads_ok=True, op_seed_calls=next(self._calls)), host_values():
            # (a NumPy input component is a host value too: nothing moved unless an op needs it)
            out = self._call_user([c if c is None or is_str or isinstance(c, (_sparse.SparseValue, _ragged.RaggedValue))
                                   else host_input(c)
                                   for c, is_str in zip(components, self._strings)])
            comps = host_outputs(S.flatten(out), defer)
        return out, [_sparse.from_sparse(c) if isinstance(c, SparseTensor) else _ragged.as_component(c) for c in comps]

    def _infer_host(self) -> Any:
        """Eager mode for string inputs: the output spec from runs on sample elements (``hostfn``)."""
        self.eager, self.eager_reason = True, "its input has string components (host bytes)"
        try:
            return infer_spec(self._run_eager, self._in_specs, self._samples, self._name, (_UsesVariable,))
        except _UsesVariable as e:
            raise self._refuse(e) from None

    # -- per element -----------------------------------------------------------
    def __call__(self, components: Tuple[Any, ...]) -> Tuple[Any, ...]:
        with host_context(self._x64):
            if not self.eager:
                run = self._run
                try:
                    if run is not None:
                        return run(components)
                    _materialize_random_key()
                    return self._jitted(*components)
                except _UsesVariable as e:
                    if e.how != "reads":
                        raise self._refuse(e) from None
                    self.eager = True
                except Exception as e:
                    if not _needs_eager(e):
                        raise
                    # a new input shape took a path that cannot be traced, or a run-time check
                    # cannot be compiled
                    self.eager = True
                    self._run = None
            try:
                out, comps = self._run_eager_flat(components)
            except _UsesVariable as e:
                raise self._refuse(e) from None
        return self._checked(out, comps)

    def call_deferred(self, components: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """``__call__`` for a ``batch`` right after the ``map`` (``transforms.Batch``): an eager
        function's outputs that are ops staged on host values stay staged (``HostValue``
        components: ``hostvalues.batch_stack`` computes them for the whole batch at once)."""
        if not self.eager:
            return self(components)
        with host_context(self._x64):
            try:
                out, comps = self._run_eager_flat(components, defer=True)
            except _UsesVariable as e:
                raise self._refuse(e) from None
        return self._checked(out, comps)

    def _checked(self, out: Any, comps: Optional[List[Any]] = None) -> Tuple[Any, ...]:
        """The output's components (``comps``: its flattened values, else ``out``'s), after TF's
        checks against the element spec."""
        if not S.same_structure(out, self.output_spec):
            raise InvalidArgumentError(f"The function passed to {self._name} returned {out!r}, whose structure "
                                       f"differs from its element_spec {self.output_spec!r}.")
        if comps is None:
            comps = S.flatten(out)
        checks = self._out_checks
        if checks is None:
            checks = self._out_checks = [(S.is_string(spec), np.dtype(spec.dtype._np) if isinstance(spec, TensorSpec)
                                          else None) for spec in self._out_specs]
        for c, spec, (is_str, np_dtype) in zip(comps, self._out_specs, checks):
            is_bytes = type(c) is bytes or S.is_bytes(c)
            if is_str or is_bytes:
                if is_str != is_bytes:
                    raise InvalidArgumentError(
                        f"The function passed to {self._name} returned {c!r} where its element_spec says {spec!r}.")
            elif np_dtype is not None and getattr(c, "dtype") != np_dtype:
                raise InvalidArgumentError(
                    f"The function passed to {self._name} returned a component of dtype "
                    f"{np.dtype(getattr(c, 'dtype')).name} where its element_spec says {np_dtype.name}.")
        return tuple(comps)


#: compiled element programs by traced program (its jaxpr's text, its constants' types, the
#: 64-bit mode): every dataset function that traces to the same program runs one compiled
#: program, its captured values (a Tensor an ``interleave`` function closes over) as arguments.
#: An ``interleave``'s inner datasets each ``map`` a function: one compile, not one per dataset.
_PROGRAMS = LRU("data_element_programs", 256)


def shared_program(closed: Any, out_tree: Any, x64: bool) -> Callable[[Sequence[Any]], Tuple[Any, ...]]:
    """The per-element call of the traced program ``closed`` (whose output structure is
    ``out_tree``): the compiled program shared with every equal trace, on ``closed``'s constants."""
    jaxpr = closed.jaxpr
    key = (str(jaxpr), tuple((tuple(np.shape(c)), np.dtype(getattr(c, "dtype", None) or np.result_type(c)),
                              bool(getattr(getattr(c, "aval", None), "weak_type", False)))
                             for c in closed.consts), x64)
    prog = _PROGRAMS.get(key)
    if prog is None:
        def element_program(consts, leaves):
            return jex.jaxpr_as_fun(jex.ClosedJaxpr(jaxpr, consts))(*leaves)
        prog = _PROGRAMS.setdefault(key, jax.jit(element_program))
    consts = list(closed.consts)
    unflatten = jax.tree_util.tree_unflatten

    def run(components: Sequence[Any]) -> Tuple[Any, ...]:
        return unflatten(out_tree, prog(consts, [c for c in components if c is not None]))
    return run


def _calls_host(jaxpr: Any) -> bool:
    """Whether ``jaxpr`` (or one nested in it: a jit, a cond's branch, a loop's body) calls back
    into Python."""
    for eqn in jaxpr.eqns:
        if "callback" in eqn.primitive.name:
            return True
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(sub, "jaxpr", sub)   # (a ClosedJaxpr holds its Jaxpr)
                if hasattr(inner, "eqns") and _calls_host(inner):
                    return True
    return False


@dataclass(frozen=True)
class _Aval:
    """A traced output component's shape (dimensions may be symbolic) and dtype (a record, not a
    tuple: element structures treat tuples as structure)."""

    shape: Tuple[Any, ...]
    dtype: Any


def _concrete_spec(aval: Optional[_Aval]) -> S.Spec:
    """A traced output component's spec: symbolic dimensions become None."""
    if aval is None:
        return S.NoneTensorSpec()
    return TensorSpec(tuple(d if isinstance(d, int) else None for d in aval.shape), aval.dtype)


def _unknown_dims(spec: S.Spec) -> S.Spec:
    if isinstance(spec, SparseTensorSpec):
        return spec if spec.dims is None else SparseTensorSpec([None] * len(spec.dims), spec.dtype)
    if isinstance(spec, RaggedTensorSpec):
        return spec if spec.shape is None else RaggedTensorSpec([None] * len(spec.shape), spec.dtype, spec.ragged_rank)
    if not isinstance(spec, TensorSpec) or spec.shape is None:
        return spec
    return TensorSpec((None,) * len(spec.shape), spec.dtype)


def _merge(a: Any, b: Any) -> Any:
    """Output specs traced at two input sizes: dimensions that differ are unknown."""
    return S.pack(a, [S.combine(x, y) or x for x, y in zip(S.flatten(a), S.flatten(b))])
