"""TF's array assertions for ``tapejax.test.TestCase`` (``tf.test.TestCase``'s, same semantics).

Values may be Tensors, Variables, NumPy arrays or Python data, and (for
``assertAllClose``) nested dicts, lists, tuples and namedtuples of them.
``assertAllClose`` compares as ``np.allclose`` (``|a - b| <= atol + rtol *
|b|``, NaNs equal) with TF's defaults ``rtol = atol = 1e-6``;
``assertAllCloseAccordingToType`` widens them for the dtypes involved.
Failures raise ``AssertionError`` with TF's messages (``not close where =``,
``not close lhs =`` ...), shape mismatches first.
"""
import collections.abc
import itertools
from typing import Any

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import Variable

__all__ = ["ArrayAssertions", "as_ndarray"]

_BF16 = np.dtype(_dtypes.bfloat16._np)


def as_ndarray(a: Any) -> np.ndarray:
    """TF's ``_GetNdArray``: Tensors and Variables by value; other data through ``np.array``."""
    if isinstance(a, (Tensor, Variable)):
        return np.asarray(convert_to_tensor(a)._value)
    if isinstance(a, np.ndarray):
        return a
    try:
        return np.array(a)
    except ValueError as e:
        if "inhomogeneous shape" in str(e):
            return np.array(a, dtype=object)
        raise


def _where(cond: np.ndarray) -> tuple:
    return np.where(cond)


class ArrayAssertions:
    """The mixin: needs ``unittest.TestCase``'s ``assertEqual``/``assertTrue``/... beside it."""

    # -- closeness ---------------------------------------------------------------------------
    def _assertArrayLikeAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):
        a, b = as_ndarray(a), as_ndarray(b)
        if a.shape != b.shape and (b.ndim <= 3 or b.size < 500):
            shape_msg = f"Shape mismatch: expected {a.shape}, got {b.shape} with contents {b}."
        else:
            shape_msg = f"Shape mismatch: expected {a.shape}, got {b.shape}."
        self.assertEqual(a.shape, b.shape, shape_msg)  # type: ignore[attr-defined]
        a_dtype = a.dtype
        a = a.astype(np.float32) if a.dtype == _BF16 else a
        b = b.astype(np.float32) if b.dtype == _BF16 else b
        if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            return
        msgs = [msg]
        cond = np.logical_or(np.abs(a - b) > atol + rtol * np.abs(b), np.isnan(a) != np.isnan(b))
        if a.ndim:
            x, y = a[_where(cond)], b[_where(cond)]
            msgs.append(f"not close where = {_where(cond)}")
        else:
            x, y = a, b
        msgs += [f"not close lhs = {x}", f"not close rhs = {y}", f"not close dif = {np.abs(x - y)}",
                 f"not close tol = {atol + rtol * np.abs(y)}", f"dtype = {a_dtype}, shape = {a.shape}"]
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg="\n".join(str(m) for m in msgs),
                                   equal_nan=True)

    def _assertAllCloseRecursive(self, a, b, rtol, atol, path, msg):
        path_str = ("[" + "][".join(str(p) for p in path) + "]") if path else ""
        msg = msg if msg else ""
        if hasattr(a, "_asdict"):
            a = a._asdict()
        if hasattr(b, "_asdict"):
            b = b._asdict()
        a_dict = isinstance(a, collections.abc.Mapping)
        if a_dict != isinstance(b, collections.abc.Mapping):
            raise ValueError(f"Can't compare dict to non-dict, a{path_str} vs b{path_str}. {msg}")
        if a_dict:
            self.assertCountEqual(a.keys(), b.keys(),  # type: ignore[attr-defined]
                                  msg=f"mismatched keys: a{path_str} has keys {a.keys()}, but b{path_str} has "
                                  f"keys {b.keys()}. {msg}")
            for k in a:
                self._assertAllCloseRecursive(a[k], b[k], rtol, atol, path + [k], msg)
            return
        where = f"Mismatched value: a{path_str} is different from b{path_str}. {msg}"
        if isinstance(a, (list, tuple)):
            try:
                self._assertArrayLikeAllClose(as_ndarray(a), as_ndarray(b), rtol, atol, where)
            except (ValueError, TypeError, NotImplementedError):
                if len(a) != len(b):
                    raise ValueError(f"Mismatched length: a{path_str} has {len(a)} items, but b{path_str} has "
                                     f"{len(b)} items. {msg}") from None
                for i, (ae, be) in enumerate(zip(a, b)):
                    self._assertAllCloseRecursive(ae, be, rtol, atol, path + [str(i)], msg)
            return
        try:
            self._assertArrayLikeAllClose(a, b, rtol, atol, where)
        except TypeError as e:
            extra = f"Error: a{path_str} has {type(a)}, but b{path_str} has {type(b)}. {msg}"
            e.args = ((e.args[0] + " : " + extra,) + e.args[1:]) if e.args else (extra,)
            raise

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):
        """``a`` and ``b`` (nested structures of array-likes) equal within ``atol + rtol * |b|``."""
        self._assertAllCloseRecursive(a, b, rtol, atol, [], msg)

    def assertAllCloseAccordingToType(self, a, b, rtol=1e-6, atol=1e-6, float_rtol=1e-6, float_atol=1e-6,
                                      half_rtol=1e-3, half_atol=1e-3, bfloat16_rtol=1e-2, bfloat16_atol=1e-2,
                                      msg=None):
        """``assertAllClose`` with the tolerance widened for the dtypes of ``a`` and ``b``."""
        a, b = as_ndarray(a), as_ndarray(b)
        dts = {a.dtype, b.dtype}
        if dts & {np.dtype(np.float32), np.dtype(np.complex64)}:
            rtol, atol = max(rtol, float_rtol), max(atol, float_atol)
        if np.dtype(np.float16) in dts:
            rtol, atol = max(rtol, half_rtol), max(atol, half_atol)
        if _BF16 in dts:
            rtol, atol = max(rtol, bfloat16_rtol), max(atol, bfloat16_atol)
        self.assertAllClose(a, b, rtol=rtol, atol=atol, msg=msg)

    def assertNotAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):
        try:
            self.assertAllClose(a, b, rtol=rtol, atol=atol, msg=msg)
        except AssertionError:
            return
        raise AssertionError(f"The two values are close at all elements. {msg or ''}")

    def assertNear(self, f1, f2, err, msg=None):
        f1, f2 = np.squeeze(f1), np.squeeze(f2)
        if f1 != f2:
            diff = abs(float(f1) - float(f2))
            self.assertTrue(diff <= err, "%f != %f +/- %f (difference: %g)%s"  # type: ignore[attr-defined]
                            % (f1, f2, err, diff, f" ({msg})" if msg is not None else ""))

    def assertArrayNear(self, farray1, farray2, err, msg=None):
        self.assertEqual(len(farray1), len(farray2), msg=msg)  # type: ignore[attr-defined]
        for f1, f2 in zip(farray1, farray2):
            self.assertNear(float(f1), float(f2), err, msg=msg)

    def assertNDArrayNear(self, ndarray1, ndarray2, err, msg=None):
        self.assertTrue(np.linalg.norm(as_ndarray(ndarray1) - as_ndarray(ndarray2)) < err,  # type: ignore
                        msg=msg)

    # -- equality ------------------------------------------------------------------------------
    def assertAllEqual(self, a, b, msg=None):
        """Same shape and values (NaNs equal where the dtype is floating)."""
        msg = msg if msg else ""
        a, b = as_ndarray(a), as_ndarray(b)
        if b.ndim <= 3 or b.size < 500:
            self.assertEqual(a.shape, b.shape,  # type: ignore[attr-defined]
                             f"Shape mismatch: expected {a.shape}, got {b.shape}. Contents: {b!r}. \n{msg}.")
        else:
            self.assertEqual(a.shape, b.shape,  # type: ignore[attr-defined]
                             f"Shape mismatch: expected {a.shape}, got {b.shape}. {msg}")
        same = a == b
        if a.dtype.kind == "f" or a.dtype == _BF16:
            same = np.logical_or(same, np.logical_and(np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))))
        if np.all(same):
            return
        msgs = [msg]
        diff = np.logical_not(same)
        if a.ndim:
            x, y = a[_where(diff)], b[_where(diff)]
            msgs.append(f"not equal where = {_where(diff)}")
        else:
            x, y = a, b
        msgs += [f"not equal lhs = {x!r}", f"not equal rhs = {y!r}"]
        np.testing.assert_array_equal(a, b, err_msg="\n".join(msgs))

    def assertNotAllEqual(self, a, b, msg=None):
        try:
            self.assertAllEqual(a, b)
        except AssertionError:
            return
        raise AssertionError(f"The two values are equal at all elements. {msg or ''}")

    # -- bounds ------------------------------------------------------------------------------------
    def assertAllGreater(self, a, comparison_target):
        self.assertGreater(np.min(as_ndarray(a)), comparison_target)  # type: ignore[attr-defined]

    def assertAllLess(self, a, comparison_target):
        self.assertLess(np.max(as_ndarray(a)), comparison_target)  # type: ignore[attr-defined]

    def assertAllGreaterEqual(self, a, comparison_target):
        self.assertGreaterEqual(np.min(as_ndarray(a)), comparison_target)  # type: ignore[attr-defined]

    def assertAllLessEqual(self, a, comparison_target):
        self.assertLessEqual(np.max(as_ndarray(a)), comparison_target)  # type: ignore[attr-defined]

    @staticmethod
    def _format_subscripts(subscripts, value, limit=10, indent=2):
        lines = []
        subs = np.transpose(subscripts)
        prefix = " " * indent
        if np.ndim(value) == 0:
            return [prefix + "[0] : " + str(value)]
        for s in itertools.islice(subs, limit):
            lines.append(prefix + str(s) + " : " + str(value[tuple(s)]))
        if len(subs) > limit:
            lines.append(prefix + "...")
        return lines

    def assertAllInRange(self, target, lower_bound, upper_bound, open_lower_bound=False, open_upper_bound=False):
        """Every element within the bounds (closed by default); NaNs and non-numeric dtypes fail."""
        target = as_ndarray(target)
        if not (np.issubdtype(target.dtype, np.floating) or np.issubdtype(target.dtype, np.integer)):
            raise AssertionError(f"The value of {target} does not have an ordered numeric type, instead it "
                                 f"has type: {target.dtype}")
        nan_subs = _where(np.isnan(target))
        if np.size(nan_subs):
            raise AssertionError(f"{len(nan_subs[0])} of the {np.size(target)} element(s) are NaN. "
                                 "Subscripts(s) and value(s) of the NaN element(s):\n"
                                 + "\n".join(self._format_subscripts(nan_subs, target)))
        range_str = ("(" if open_lower_bound else "[") + f"{lower_bound}, {upper_bound}" + \
            (")" if open_upper_bound else "]")
        bad = np.less_equal(target, lower_bound) if open_lower_bound else np.less(target, lower_bound)
        bad = np.logical_or(bad, np.greater_equal(target, upper_bound) if open_upper_bound
                            else np.greater(target, upper_bound))
        subs = _where(bad)
        if np.size(subs):
            raise AssertionError(f"{len(subs[0])} of the {np.size(target)} element(s) are outside the range "
                                 f"{range_str}. Subscript(s) and value(s) of the offending elements:\n"
                                 + "\n".join(self._format_subscripts(subs, target)))

    def assertAllInSet(self, target, expected_set):
        diff = np.setdiff1d(as_ndarray(target).flatten(), list(expected_set))
        if np.size(diff):
            raise AssertionError(f"{np.size(diff)} unique element(s) are not in the set {expected_set}: {diff}")

    # -- shapes and dtypes ---------------------------------------------------------------------------
    def assertShapeEqual(self, input_a, input_b, msg=None):
        """Same shape; each argument a NumPy array or scalar, or a Tensor (TypeError otherwise)."""
        for name, v in (("input_a", input_a), ("input_b", input_b)):
            if not isinstance(v, (np.ndarray, np.generic, Tensor, Variable)):
                raise TypeError(f"{name} must be a Numpy ndarray, Numpy scalar, or a Tensor.Instead received "
                                f"{type(v)}")
        shape_a = list(input_a.shape) if isinstance(input_a, (Tensor, Variable)) else input_a.shape
        shape_b = list(input_b.shape) if isinstance(input_b, (Tensor, Variable)) else input_b.shape
        self.assertAllEqual(shape_a, shape_b, msg=msg)

    def assertDTypeEqual(self, target, expected_dtype):
        """``target``'s NumPy dtype equals ``expected_dtype`` (a NumPy dtype or a tapejax DType)."""
        arr = as_ndarray(target)
        want = expected_dtype._np if isinstance(expected_dtype, _dtypes.DType) else expected_dtype
        self.assertEqual(arr.dtype, want)  # type: ignore[attr-defined]

    # -- errors ----------------------------------------------------------------------------------------
    def assertRaisesWithPredicateMatch(self, exception_type, expected_err_re_or_predicate):
        """A context: the block raises ``exception_type`` whose message matches the regex (or that
        satisfies the predicate)."""
        import contextlib
        import re

        def matches(e: Any) -> Any:
            if callable(expected_err_re_or_predicate):
                return expected_err_re_or_predicate(e)
            return re.search(expected_err_re_or_predicate, str(getattr(e, "message", None) or e))

        @contextlib.contextmanager
        def ctx():
            try:
                yield
            except Exception as e:  # noqa: BLE001 - checked below
                if not isinstance(e, exception_type) or not matches(e):
                    raise AssertionError(f"Exception of type {type(e)}: {e}") from e
            else:
                raise AssertionError(exception_type.__name__ + " not raised")
        return ctx()

    def assertRaisesOpError(self, expected_err_re_or_predicate):
        from ..core.errors import OpError
        return self.assertRaisesWithPredicateMatch(OpError, expected_err_re_or_predicate)
