"""``tf.test``: ``TestCase`` for users' test suites, the gradient checker, device queries.

``TestCase`` is a ``unittest.TestCase`` (so pytest collects it) with TF's
assertions: ``assertAllClose`` (TF's defaults, ``rtol = atol = 1e-6``, over
nested dicts / lists / namedtuples of Tensors, Variables and arrays),
``assertAllCloseAccordingToType`` (the tolerance widened per dtype: 1e-6 for
float32/complex64, 1e-3 for float16, 1e-2 for bfloat16), ``assertAllEqual``
(NaNs equal), ``assertAllInRange``, ``assertShapeEqual``, ``assertDTypeEqual``
and the rest of TF's array assertions, with TF's failure messages; ``evaluate``
turns Tensors into NumPy values (a 0-d one into a NumPy scalar).
``cached_session()`` / ``session()`` are accepted as empty contexts (TF2's
eager tests use them as such); absltest's ``assertLen``, ``assertEmpty``,
``assertItemsEqual`` ... (TF's TestCase is an ``absltest.TestCase``) are there
too.

``compute_gradient(f, x, delta=None)`` is TF2's gradient checker
(``gradient_checker_v2``): for each argument, the theoretical Jacobian (one
``GradientTape`` vector-Jacobian product per output element, one-hot
cotangents, as TF's) and the numerical one (central differences of size
``delta``, default ``1/1024``, in the argument's dtype); each a 2-D NumPy
array of ``y_size`` rows and ``x_size`` columns, returned as
``(theoretical_tuple, numerical_tuple)``.

``is_gpu_available`` / ``gpu_device_name`` ask JAX for its devices;
``is_built_with_cuda`` / ``is_built_with_rocm`` whether jaxlib's CUDA or ROCm
plugin is installed; ``is_built_with_xla`` is True (JAX always compiles with
XLA).
"""
import contextlib
import importlib.util
import tempfile
import unittest
from typing import Any, Optional

import jax
import numpy as np

from ..autodiff.tape import GradientTape
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import Variable
from ._assertions import ArrayAssertions

__all__ = ["TestCase", "compute_gradient", "gpu_device_name", "is_built_with_cuda", "is_built_with_gpu_support",
           "is_built_with_rocm", "is_built_with_xla", "is_gpu_available", "main"]


def _to_numpy(x: Any) -> Any:
    """A Tensor or Variable as NumPy (a 0-d one as a NumPy scalar, as TF's ``.numpy()``)."""
    a = np.asarray(convert_to_tensor(x)._value)
    return a[()] if a.ndim == 0 else a


class TestCase(ArrayAssertions, unittest.TestCase):
    """``tf.test.TestCase``: ``unittest.TestCase`` with TF's array assertions (see
    ``tapejax.compat._assertions``) and ``evaluate``."""

    def evaluate(self, tensors: Any) -> Any:
        """NumPy values of a Tensor / Variable or a nested structure of them (``None`` stays
        ``None``, a callable is called first; other Python values are TF's ValueError)."""
        def one(t: Any) -> Any:
            if t is None:
                return None
            if isinstance(t, (Tensor, Variable)):
                return _to_numpy(t)
            if callable(t):
                return self.evaluate(t())
            raise ValueError(f"Unsupported type {type(t).__name__!r}.")

        return jax.tree_util.tree_map(one, tensors, is_leaf=lambda t: t is None or isinstance(t, (Tensor, Variable)))

    def get_temp_dir(self) -> str:
        """A temporary directory for this test (removed when the test ends)."""
        d = getattr(self, "_tapejax_tmp", None)
        if d is None:
            holder = tempfile.TemporaryDirectory(prefix="tapejax_test")
            self.addCleanup(holder.cleanup)
            d = self._tapejax_tmp = holder.name
        return d

    @contextlib.contextmanager
    def cached_session(self, graph=None, config=None, use_gpu=True, force_gpu=False):
        """Accepted for TF1-style tests: an empty context (everything runs eagerly)."""
        yield None

    session = cached_session

    # -- absltest's assertions that TF's TestCase inherits, the ones user suites use most --------
    def assertLen(self, container, expected_len, msg=None):
        if len(container) != expected_len:
            self.fail(msg or f"{container!r} has length of {len(container)}, expected {expected_len}.")

    def assertEmpty(self, container, msg=None):
        if len(container):
            self.fail(msg or f"{container!r} has length of {len(container)}.")

    def assertNotEmpty(self, container, msg=None):
        if not len(container):
            self.fail(msg or f"{container!r} has length of 0.")

    def assertItemsEqual(self, first, second, msg=None):
        self.assertCountEqual(first, second, msg)

    def assertSameElements(self, expected_seq, actual_seq, msg=None):
        self.assertEqual(set(expected_seq), set(actual_seq), msg)

    def assertContainsSubset(self, expected_subset, actual_set, msg=None):
        missing = set(expected_subset) - set(actual_set)
        if missing:
            self.fail(msg or f"Missing elements {missing!r}")

    def assertStartsWith(self, actual, expected_start, msg=None):
        if not actual.startswith(expected_start):
            self.fail(msg or f"{actual!r} does not start with {expected_start!r}")

    def assertEndsWith(self, actual, expected_end, msg=None):
        if not actual.endswith(expected_end):
            self.fail(msg or f"{actual!r} does not end with {expected_end!r}")

    def assertBetween(self, value, minv, maxv, msg=None):
        if not minv <= value <= maxv:
            self.fail(msg or f"{value!r} is not between {minv!r} and {maxv!r}")


# -- the gradient checker ---------------------------------------------------------------------

_GRAD_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


def _real(dt: np.dtype) -> np.dtype:
    """A complex dtype's real part dtype (TF's ``real_dtype``); any other dtype itself."""
    return np.dtype(np.float32 if dt == np.complex64 else np.float64) if dt.kind == "c" else dt


def _jacobians(f, xs, param, y, delta):
    """TF's gradient checker (``gradient_checker_v2``): a complex argument or output counts as
    its real and imaginary parts, interleaved (the arrays viewed as their real dtype), so the
    Jacobians are real, of shape ``(y_size * (2 if y is complex), x_size * (2 if x is complex))``."""
    x = xs[param]
    x_dt = np.dtype(x._value.dtype)
    if x.dtype.name not in _GRAD_DTYPES:
        raise AssertionError(f"Cannot compute gradient for unsupported type {x.dtype.name} of argument {param}")
    if y.dtype.name not in _GRAD_DTYPES:
        raise AssertionError(f"Cannot compute gradient for unsupported type {y.dtype.name} of y")
    y_dt = np.dtype(y._value.dtype)
    x_real, y_real = _real(x_dt), _real(y_dt)
    x_size = int(np.prod(x.shape)) * (2 if x_dt.kind == "c" else 1)
    y_shape = tuple(y.shape)
    y_size = int(np.prod(y_shape)) * (2 if y_dt.kind == "c" else 1)
    # theoretical: one vector-Jacobian product per (real part of an) output element: TF's
    # one-hot cotangents (1, or 1j for an imaginary part)
    theo = np.zeros((y_size, x_size), dtype=x_real)
    with GradientTape(persistent=True) as tape:
        tape.watch(x)
        out = convert_to_tensor(f(*xs))
    dy = np.zeros(y_shape, dtype=y_dt)
    dy_flat = dy.reshape(-1).view(y_real)
    for row in range(y_size):
        dy_flat[row] = 1
        g = tape.gradient(out, x, output_gradients=convert_to_tensor(dy))
        if g is not None:
            theo[row, :] = np.asarray(convert_to_tensor(g)._value).astype(x_dt).reshape(-1).view(x_real)
        dy_flat[row] = 0
    del tape
    # numerical: central differences in the argument's (real) dtype
    host = [np.array(np.asarray(t._value)) for t in xs]
    flat = host[param].reshape(-1).view(x_real)
    scale = np.asarray(2 * delta, dtype=y_real)[()]
    num = np.zeros((y_size, x_size), dtype=x_real)

    def call():
        return np.asarray(convert_to_tensor(f(*[convert_to_tensor(h) for h in host]))._value)

    for col in range(x_size):
        orig = flat[col]
        flat[col] = orig + np.asarray(delta, x_real)
        y_pos = call()
        flat[col] = orig - np.asarray(delta, x_real)
        y_neg = call()
        flat[col] = orig
        num[:, col] = ((y_pos - y_neg) / scale).astype(y_dt).reshape(-1).view(y_real)
    return theo, num


def compute_gradient(f, x, delta: Optional[float] = None):
    """``tf.test.compute_gradient``: ``(theoretical, numerical)`` Jacobians of ``f`` at ``x``
    (a list or tuple of arguments), one 2-D array per argument (see the module docstring)."""
    if not isinstance(x, (list, tuple)):
        raise ValueError("`x` must be a list or tuple of values convertible to a Tensor (arguments to `f`), "
                         f"not a {type(x)}")
    delta = 1.0 / 1024 if delta is None else delta
    xs = [convert_to_tensor(v) for v in x]
    out = f(*xs)
    if isinstance(out, (list, tuple, dict)):
        raise TypeError(f"compute_gradient: `f` must return one Tensor; got a {type(out).__name__}")
    y = convert_to_tensor(out)
    pairs = [_jacobians(f, xs, i, y, delta) for i in range(len(xs))]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


# -- devices and builds --------------------------------------------------------------------------

def _gpus() -> list:
    try:
        return [d for d in jax.devices() if d.platform in ("gpu", "cuda", "rocm")]
    except RuntimeError:
        return []


def is_gpu_available(cuda_only: bool = False, min_cuda_compute_capability: Optional[tuple] = None) -> bool:
    """``tf.test.is_gpu_available``: whether JAX has a GPU (of at least that compute capability)."""
    for d in _gpus():
        if cuda_only and d.platform == "rocm":
            continue
        if min_cuda_compute_capability is not None:
            cc = getattr(d, "compute_capability", None)
            if cc is None or tuple(int(v) for v in str(cc).split(".")) < tuple(min_cuda_compute_capability):
                continue
        return True
    return False


def gpu_device_name() -> str:
    """``tf.test.gpu_device_name``: ``'/device:GPU:0'`` when JAX has a GPU, else ``''``."""
    return "/device:GPU:0" if _gpus() else ""


def _plugin(prefix: str) -> bool:
    return any(importlib.util.find_spec(f"{prefix}{v}_plugin") is not None for v in (11, 12, 13))


def is_built_with_cuda() -> bool:
    """Whether jaxlib's CUDA plugin is installed."""
    return _plugin("jax_cuda")


def is_built_with_rocm() -> bool:
    """Whether jaxlib's ROCm plugin is installed."""
    return _plugin("jax_rocm")


def is_built_with_gpu_support() -> bool:
    return is_built_with_cuda() or is_built_with_rocm()


def is_built_with_xla() -> bool:
    return True


def main(argv=None) -> None:
    """``tf.test.main``: run the module's tests (``unittest.main``)."""
    unittest.main(argv=argv)

