"""Python on the host inside a compiled step: ``py_function``, ``numpy_function``, ``init_scope``.

``tf.py_function(func, inp, Tout)`` / ``tf.numpy_function(func, inp, Tout)``
    Eagerly they call ``func`` now: ``py_function`` with the input Tensors (its tapejax ops are
    recorded by the tapes, so its gradient is the tape's gradient of ``func``, as TF's), and
    ``numpy_function`` with NumPy arrays (no gradient: the tape sees only constants).

    While ``tapejax.function`` traces, the call becomes the op ``EagerPyFunc`` /
    ``PyFunc``: a JAX host callback that runs ``func`` every time the compiled step runs,
    on the values of that run (``jax.experimental.io_callback`` for a stateful function, ordered
    with the step's other callbacks, never dropped; ``jax.pure_callback`` for
    ``numpy_function(..., stateful=False)``, which XLA may drop when unused, as TF may).
    ``py_function``'s gradient is a second host callback: it runs ``func`` again under a
    ``GradientTape`` on the forward's inputs and returns the tape's gradient
    (``output_gradients`` the incoming ones), what TF's ``EagerPyFunc`` gradient does with the
    tape it kept.  ``numpy_function`` has no gradient (``None``, as TF's ``PyFunc``).

    Result shapes: TF leaves them unknown; XLA needs them when the step compiles.  A ``Tout``
    entry that is a ``TensorSpec`` with a full shape gives it; otherwise ``func`` is called once
    more at trace time, on zeros of the inputs' shapes and dtypes, and the shapes it returns
    are the results' (so ``func`` runs once per trace besides its runs in the step; a ``func``
    whose result shape depends on the input *values* needs ``TensorSpec`` entries, and a
    different shape at run time is an ``InvalidArgumentError``).

    Errors in ``func`` are TF's classes (``ValueError`` / ``TypeError`` ->
    ``InvalidArgumentError``, ``StopIteration`` -> ``OutOfRangeError``,
    ``NotImplementedError`` -> ``UnimplementedError``, others ``UnknownError``), with
    ``"{type}: {message}"`` as TF writes it; a result of another dtype than ``Tout`` is
    ``InvalidArgumentError``.

``tf.init_scope()``
    Lifts its block out of a function being traced and out of the tapes (TF's rules: the
    block runs eagerly, "the gradient tape is paused"): inside ``tapejax.function`` the
    ops in it run at trace time on concrete values (``jax.ensure_compile_time_eval``) and a
    Variable created there is an ordinary eager Variable (TF's way to create state lazily
    inside a function); tapes record nothing in it.  Outside any function it only pauses
    the tapes.
"""
from __future__ import annotations

import contextlib
import traceback
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import jax
import jax.core
import numpy as np
from jax.experimental import io_callback

from ..autodiff.nodes import UnconnectedGradients
from ..autodiff.tape import GradientTape
from ..core import dtypes as _dtypes, errors as _errors, state as _state
from ..core.bind import REGISTRY, bind, define
from ..core.convert import convert_to_tensor
from ..core.executor import EFFECTFUL
from ..core.tensor import Tensor

__all__ = ["init_scope", "numpy_function", "py_function", "take_error"]


@contextlib.contextmanager
def init_scope() -> Iterator[None]:
    """``tf.init_scope``: the block runs eagerly, outside any function being traced, with the
    tapes paused (see the module docstring)."""
    collector = _state._local.collector
    # the Variables the trace has touched read there as they are outside it (before the call),
    # as TF's eager context reads them; their traced values come back after the block
    inside = [(rec.var, rec.var._state(), rec.saved) for rec in getattr(collector, "order", ())]
    for var, _, saved in inside:
        var._restore(saved)
    try:
        with _state.swap(tapes=(), collector=None):
            if collector is not None:
                with jax.ensure_compile_time_eval():
                    yield
            else:
                yield
    finally:
        for var, traced, _ in inside:
            var._restore(traced)


# -- TF's error classes for an exception raised by ``func`` ---------------------------------------

def _tf_error(e: BaseException) -> _errors.OpError:
    """The error TF's py_func kernel raises for ``e`` (``tensorflow/python/lib/core/py_func.cc``)."""
    if isinstance(e, _errors.OpError):
        return e
    if isinstance(e, (ValueError, TypeError)):
        cls: type = _errors.InvalidArgumentError
    elif isinstance(e, StopIteration):
        cls = _errors.OutOfRangeError
    elif isinstance(e, NotImplementedError):
        cls = _errors.UnimplementedError
    else:
        cls = _errors.UnknownError
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    tb = "".join(traceback.format_tb(e.__traceback__))
    return cls(None, None, f"{text}\nTraceback (most recent call last):\n{tb}")


class OutSpec(NamedTuple):
    """One declared result of ``func``: its dtype and, from a ``TensorSpec``, its shape."""

    dtype: Any                       # a tapejax DType
    shape: Optional[tuple]           # a full shape, or None (learned at trace time)


class _Tout(NamedTuple):
    """``Tout`` read: the specs and whether ``func``'s result is one value (not a list)."""

    specs: tuple
    single: bool


def _read_tout(tout: Any, where: str) -> _Tout:
    if tout is None:
        raise TypeError(f"{where}: missing required argument `Tout`: the dtype(s) of the value(s) func "
                        "returns ([] when it returns None)")
    single = not isinstance(tout, (list, tuple))
    specs = []
    for t in ([tout] if single else list(tout)):
        shape = getattr(t, "shape", None) if not isinstance(t, _dtypes.DType) else None
        dt = getattr(t, "dtype", t) if shape is not None or hasattr(t, "is_compatible_with") else t
        dtype = _dtypes.as_dtype(dt)
        full = None
        if shape is not None:
            dims = tuple(shape) if getattr(shape, "rank", 0) is not None else None
            if dims is not None and all(d is not None for d in dims):
                full = tuple(int(d) for d in dims)
        specs.append(OutSpec(dtype, full))
    return _Tout(tuple(specs), single)


def _check_args(func: Any, inp: Any, where: str) -> list:
    if not callable(func):
        raise ValueError(f"Expected func to be callable. Received func={func} of type {type(func)}.")
    if inp is None:
        return []
    if isinstance(inp, (list, tuple)):
        return list(inp)
    return list(inp) if not (isinstance(inp, Tensor) or hasattr(inp, "_read")) else list(_unstack(inp))


def _unstack(t: Any) -> list:
    """A single Tensor as ``inp`` is iterated (TF iterates it: one argument per row)."""
    t = convert_to_tensor(t)
    return [t[i] for i in range(int(t.shape[0]))] if t.shape.rank else [t]


def _as_result(value: Any, spec: OutSpec, numpy_style: bool) -> Tensor:
    """One value ``func`` returned, as a Tensor of ``spec``'s dtype (TF's errors)."""
    if hasattr(value, "_read") and not isinstance(value, Tensor):
        raise RuntimeError("Attempting to return a variable from an eagerly executed py_func. Only numeric "
                           "data structures like Tensors or NumPy arrays should be returned; to return the "
                           f"value of a variable, make sure to obtain the Tensor backing it by calling "
                           f"`.read_value()` on the variable in question: {value}")
    if numpy_style:
        a = np.asarray(value)
        # (a value at the dtype's storage precision is the dtype: without x64 an int64 input
        # arrives as int32, and what ``func`` computes from it too)
        if a.dtype != np.dtype(spec.dtype._np) and a.dtype != _dtypes.storage_dtype(spec.dtype._np, "Tout"):
            raise _errors.InvalidArgumentError(
                None, None, f"0-th value returned by pyfunc is {_dtypes.as_dtype(a.dtype).name}, but expects "
                f"{spec.dtype.name}")
        return convert_to_tensor(a)
    if (isinstance(value, Tensor) and value.dtype != spec.dtype
            and value._value.dtype != _dtypes.storage_dtype(spec.dtype._np, "Tout")):
        raise _errors.InvalidArgumentError(
            None, None, f"ValueError: Tensor conversion requested dtype {spec.dtype.name} for Tensor with "
            f"dtype {value.dtype.name}: {value!r}")
    return convert_to_tensor(value, dtype=spec.dtype)


def _results(out: Any, tout: _Tout, numpy_style: bool) -> list:
    if out is None:
        values: list = []
    elif isinstance(out, (list, tuple)):
        values = list(out)
    else:
        values = [out]
    if len(values) != len(tout.specs):
        raise _errors.InvalidArgumentError(
            None, None, f"func returned {len(values)} value(s); Tout declares {len(tout.specs)}")
    return [_as_result(v, s, numpy_style) for v, s in zip(values, tout.specs)]


#: TF errors raised by ``func`` in a host callback, for the compiled step's caller (``take_error``).
_ERRORS: "list[_errors.OpError]" = []


def take_error(e: BaseException) -> Optional[_errors.OpError]:
    """The TF error a ``func`` raised in a host callback of the step that failed with ``e`` (JAX's
    runtime error), or None; ``compile.entries.run`` raises it in JAX's place."""
    if not _ERRORS or not isinstance(e, jax.errors.JaxRuntimeError):
        return None
    err = _ERRORS.pop()
    _ERRORS.clear()
    _forget_failed_tokens()
    return err


def _forget_failed_tokens() -> None:
    """On a GPU, JAX (0.10, 0.11) keeps the effect token of a program whose ordered host callback
    failed, and hands it to the next program with that effect, which then fails with the same
    error (every later py_function step, dataset read or ``tf.print``, and JAX's barrier at exit).
    The failed step has raised its error: its tokens are dropped, so the next program starts a
    fresh order.  (``jax._src.dispatch.runtime_tokens``: no public API; absent, nothing to do.)"""
    try:
        from jax._src import dispatch
    except ImportError:   # pragma: no cover - a JAX without the module
        return
    tokens = getattr(dispatch, "runtime_tokens", None)
    clear = getattr(tokens, "clear", None)
    if callable(clear):
        clear()


def _host_call(func: Callable[..., Any], arrays: Sequence[np.ndarray], tout: _Tout, numpy_style: bool) -> list:
    """``func`` run on the host on ``arrays``, with no tape and no trace: its results as arrays
    (exceptions as TF's classes)."""
    with _state.swap(tapes=(), collector=None):
        args = [np.asarray(a) for a in arrays] if numpy_style else [convert_to_tensor(np.asarray(a)) for a in arrays]
        try:
            try:
                out = func(*args)
            except Exception as e:   # noqa: BLE001 - raised as TF's class
                raise _tf_error(e) from e
            return [np.asarray(r._value) for r in _results(out, tout, numpy_style)]
        except _errors.OpError as e:
            _ERRORS.append(e)
            raise


# -- the op ---------------------------------------------------------------------------------------

class _Call(NamedTuple):
    """The static part of one traced call (hashable: ``func`` by identity)."""

    func: Callable[..., Any]
    tout: _Tout
    shapes: tuple          # the results' shapes
    numpy_style: bool
    stateful: bool


def _callback(call: _Call) -> Callable[..., Any]:
    def host(*arrays):
        outs = _host_call(call.func, arrays, call.tout, call.numpy_style)
        for i, (o, shape) in enumerate(zip(outs, call.shapes)):
            if tuple(o.shape) != shape:
                err = _errors.InvalidArgumentError(
                    None, None, f"{i}-th value returned by the py_func has shape {tuple(o.shape)}, but the "
                    f"compiled step expects {shape} (learned at trace time): give Tout as "
                    "tf.TensorSpec(shape, dtype)")
                _ERRORS.append(err)
                raise err
        return tuple(outs)
    return host


def _result_types(call: _Call) -> tuple:
    return tuple(jax.ShapeDtypeStruct(s, _dtypes.storage_dtype(spec.dtype._np, "Tout"))
                 for s, spec in zip(call.shapes, call.tout.specs))


def _run(call: _Call, *xs):
    types = _result_types(call)
    if call.stateful:
        return io_callback(_callback(call), types, *xs, ordered=True)
    return jax.pure_callback(_callback(call), types, *xs)


def _grad_host(call: _Call) -> Callable[..., Any]:
    """TF's EagerPyFunc gradient: ``func`` again under a tape, the tape's gradient of its results
    (weighted by the incoming gradients) with respect to its inputs."""
    def host(xs, gs):
        with _state.swap(tapes=(), collector=None):
            args = [convert_to_tensor(np.asarray(a)) for a in xs]
            with GradientTape() as tape:
                for a in args:
                    if a.dtype.is_floating or a.dtype.is_complex:
                        tape.watch(a)
                try:
                    out = call.func(*args)
                except Exception as e:   # noqa: BLE001 - raised as TF's class
                    raise _tf_error(e) from e
                results = _results(out, call.tout, False)
            grads = tape.gradient(results, args, output_gradients=[convert_to_tensor(np.asarray(g)) for g in gs],
                                  unconnected_gradients=UnconnectedGradients.ZERO)
            return tuple(np.asarray(g._value).astype(np.asarray(a).dtype) for g, a in zip(grads, xs))
    return host


def _eager_py_func(*xs, call: _Call):
    @jax.custom_vjp
    def f(*xs):
        return _run(call, *xs)

    def fwd(*xs):
        return _run(call, *xs), xs

    def bwd(xs, gs):
        types = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs)
        grads = jax.pure_callback(_grad_host(call), types, xs, tuple(gs))
        return tuple(grads)

    f.defvjp(fwd, bwd)
    return f(*xs)


def _py_func(*xs, call: _Call):
    return _run(call, *xs)


_EAGER_PY_FUNC = REGISTRY.get("EagerPyFunc") or define(
    "EagerPyFunc", _eager_py_func, multiple_results=True, jit=False)
_PY_FUNC = REGISTRY.get("PyFunc") or define(
    "PyFunc", _py_func, differentiable=False, multiple_results=True, jit=False,
    nondiff_reason="tf.numpy_function (op PyFunc) has no gradient")
EFFECTFUL.update((_EAGER_PY_FUNC, _PY_FUNC))   # (never computed while tracing: they run at every call)


def _traced(tensors: Sequence[Tensor]) -> bool:
    """Whether the call is staged into a program: a ``tapejax.function`` traces (even on constant
    inputs: the program calls ``func`` at each run), or an input is a tracer.  A collector that
    only watches (a dataset function's, ``stages_host_calls = False``) stages nothing itself."""
    col = _state._local.collector
    if col is not None and getattr(col, "stages_host_calls", True):
        return True
    return any(isinstance(t._value, jax.core.Tracer) for t in tensors)


def _shapes(func: Callable[..., Any], tensors: Sequence[Tensor], tout: _Tout, numpy_style: bool) -> tuple:
    """The results' shapes: from ``Tout``'s TensorSpecs, else from one call of ``func`` on zeros."""
    if all(s.shape is not None for s in tout.specs):
        return tuple(s.shape for s in tout.specs)
    zeros = [np.zeros(tuple(t.shape), t.dtype._np) for t in tensors]
    outs = _host_call(func, zeros, tout, numpy_style)
    return tuple(s.shape if s.shape is not None else tuple(o.shape) for s, o in zip(tout.specs, outs))


def _call(func: Any, inp: Any, Tout: Any, numpy_style: bool, stateful: bool, where: str):
    args = _check_args(func, inp, where)
    tout = _read_tout(Tout, where)
    tensors = [convert_to_tensor(a) for a in args]
    if not _traced(tensors):
        if numpy_style:   # TF: called on NumPy arrays, results converted as they are
            out = func(*[np.asarray(t.numpy()) for t in tensors])
            flat = [] if out is None else (list(out) if isinstance(out, (list, tuple)) else [out])
            results = [convert_to_tensor(np.asarray(v)) for v in flat]
            return results[0] if len(results) == 1 else results
        try:
            out = func(*tensors)
        except _errors.OpError:
            raise
        except Exception as e:   # noqa: BLE001 - TF's EagerPyFunc raises its classes eagerly too
            raise _tf_error(e) from e
        results = _results(out, tout, False)
    else:
        with init_scope():
            shapes = _shapes(func, tensors, tout, numpy_style)
        call = _Call(func, tout, shapes, numpy_style, stateful)
        results = list(bind(_PY_FUNC if numpy_style else _EAGER_PY_FUNC, *tensors, call=call))
    if tout.single:
        return results[0]
    return results


def _decorator(op: Callable[..., Any], inp: Any, Tout: Any, **kw: Any) -> Callable[..., Any]:
    if Tout is None:
        raise TypeError("Missing required argument: 'Tout'")

    def wrap(f):
        def wrapper(*args):
            return op(f, list(args) if inp is None else inp, Tout, **kw)
        wrapper.__name__ = getattr(f, "__name__", "py_function")
        wrapper.__doc__ = getattr(f, "__doc__", None)
        return wrapper
    return wrap


def py_function(func=None, inp=None, Tout=None, name=None):
    """``tf.py_function``: ``func`` on Tensors, eagerly even inside ``tapejax.function`` (a host
    callback there), differentiable by the tape.  With ``func`` left out, a decorator."""
    if func is None:
        return _decorator(lambda f, i, t: py_function(f, i, t), inp, Tout)
    return _call(func, inp, Tout, False, True, "tf.py_function")


def numpy_function(func=None, inp=None, Tout=None, stateful=True, name=None):
    """``tf.numpy_function``: ``func`` on NumPy arrays (a host callback inside ``tapejax.function``),
    with no gradient.  With ``func`` left out, a decorator."""
    if func is None:
        return _decorator(lambda f, i, t: numpy_function(f, i, t, stateful), inp, Tout)
    return _call(func, inp, Tout, True, bool(stateful), "tf.numpy_function")
