"""``LinearOperatorCirculant`` / ``Circulant2D`` / ``Circulant3D``: (nested block) circulant
matrices given by their ``spectrum`` (the DFT of the convolution kernel), so a product is an
FFT, a multiplication by the spectrum and an inverse FFT, a solve the same with a division, the
determinant the spectrum's product.  Values are computed in complex and cast to
``input_output_dtype`` (the real part for a real dtype), as TF."""
import numpy as np

from ..core import dtypes as _dtypes
from . import array as _a, layout as _lo, linalg_more as _lm, math as _m, reduce as _r, special as _sp
from .linear_operator import (
    LinearOperator,
    assert_that,
    broadcast_shapes,
    commuting_positive_definite_hint,
    commuting_self_adjoint_hint,
    non_singular_hint,
    to_param,
    value_of,
)


def to_complex(x):
    """``x`` as complex64, or complex128 for float64 / complex128 input (TF's ``_to_complex``)."""
    dtype = _dtypes.complex128 if x.dtype in (_dtypes.float64, _dtypes.complex128) else _dtypes.complex64
    return x if x.dtype == dtype else _m.cast(x, dtype)


class BaseLinearOperatorCirculant(LinearOperator):
    """What the three circulant operators share (``block_depth`` 1, 2 or 3)."""

    def __init__(self, spectrum, block_depth, input_output_dtype=_dtypes.complex64, is_non_singular=None,
                 is_self_adjoint=None, is_positive_definite=None, is_square=True, name="LinearOperatorCirculant",
                 parameters=None):
        if block_depth not in (1, 2, 3):
            raise ValueError(f"Argument `block_depth` must be one of [1, 2, 3]. Received: {block_depth}.")
        self._block_depth = block_depth
        self._spectrum = to_param(spectrum, "spectrum")
        if len(self._spectrum.shape) < block_depth:
            raise ValueError(f"Argument `spectrum` must have at least {block_depth} dimensions. Received: "
                             f"{self._spectrum}.")
        if not self._spectrum.dtype.is_complex:
            if is_self_adjoint is False:
                raise ValueError(f"A real spectrum always corresponds to a self-adjoint operator. Expected argument "
                                 f"`is_self_adjoint` to be True when `spectrum.dtype.is_complex` = True. "
                                 f"Received: {is_self_adjoint}.")
            is_self_adjoint = True
        if is_square is False:
            raise ValueError(f"A [[nested] block] circulant operator is always square. Expected argument "
                             f"`is_square` to be True. Received: {is_square}.")
        if parameters is None:
            parameters = dict(spectrum=spectrum, block_depth=block_depth, input_output_dtype=input_output_dtype,
                              is_non_singular=is_non_singular, is_self_adjoint=is_self_adjoint,
                              is_positive_definite=is_positive_definite, is_square=is_square, name=name)
        super().__init__(dtype=_dtypes.as_dtype(input_output_dtype), is_non_singular=is_non_singular,
                         is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite, is_square=True,
                         parameters=parameters, name=name)

    @property
    def _experimental_parameter_ndims_to_matrix_ndims(self) -> dict:
        return {"spectrum": self.block_depth}

    @property
    def block_depth(self) -> int:
        return self._block_depth

    @property
    def spectrum(self):
        return self._spectrum

    @property
    def block_shape(self):
        return self._spectrum.shape[-self.block_depth:]

    def block_shape_tensor(self):
        return value_of(np.asarray(list(self.block_shape), np.int32))

    def _same_kind(self, spectrum, **hints):
        """An operator of this kind (TF builds the depth's own class) over another spectrum."""
        return _KINDS[self.block_depth](spectrum, **hints)

    def _linop_adjoint(self):
        spectrum = self.spectrum
        if spectrum.dtype.is_complex:
            spectrum = _sp.conj(spectrum)
        # (TF builds the adjoint with the default input/output dtype, complex64)
        return self._same_kind(spectrum, is_non_singular=self.is_non_singular, is_self_adjoint=self.is_self_adjoint,
                               is_positive_definite=self.is_positive_definite, is_square=True)

    def _linop_inverse(self):
        return self._same_kind(_m.divide(_m.cast(1.0, self.spectrum.dtype), self.spectrum),
                               is_non_singular=self.is_non_singular, is_self_adjoint=self.is_self_adjoint,
                               is_positive_definite=self.is_positive_definite, is_square=True,
                               input_output_dtype=self.dtype)

    def _pair(self, left, right):
        return isinstance(right, BaseLinearOperatorCirculant) and isinstance(left, type(right))

    def _pair_hints(self, left, right):
        return dict(is_non_singular=non_singular_hint(left, right),
                    is_self_adjoint=commuting_self_adjoint_hint(left, right),
                    is_positive_definite=commuting_positive_definite_hint(left, right), is_square=True)

    def _linop_matmul(self, left, right):
        if not self._pair(left, right):
            return super()._linop_matmul(left, right)
        return self._same_kind(_m.multiply(left.spectrum, right.spectrum), **self._pair_hints(left, right))

    def _linop_solve(self, left, right):
        if not self._pair(left, right):
            return super()._linop_solve(left, right)
        return self._same_kind(_m.divide(right.spectrum, left.spectrum), **self._pair_hints(left, right))

    def _shape(self):
        s = tuple(self._spectrum.shape)
        n = int(np.prod(s[-self.block_depth:]))
        return s[:-self.block_depth] + (n, n)

    def _axes(self):
        return [-(i + 1) for i in reversed(range(self.block_depth))]

    def convolution_kernel(self, name="convolution_kernel"):
        h = _lo.ifftnd(to_complex(value_of(self.spectrum)), axes=self._axes())
        return _m.cast(h, self.dtype)

    def assert_hermitian_spectrum(self, name="assert_hermitian_spectrum"):
        eps = np.finfo(np.dtype(self.dtype.as_numpy_dtype).type(0).real.dtype).eps
        imag = _sp.imag(self.convolution_kernel()) if self.dtype.is_complex else None
        if imag is not None:
            assert_that(_m.less(_m.abs(imag), eps * self.domain_dimension), "Spectrum was not Hermitian")

    def _assert_non_singular(self):
        assert_that(_m.greater(_m.abs(self.spectrum), 0), "Singular operator:  Spectrum contained zero values.")

    def _assert_positive_definite(self):
        s = _sp.real(self.spectrum) if self.spectrum.dtype.is_complex else self.spectrum
        assert_that(_m.greater(s, 0), "Not positive definite:  Real part of spectrum was not all positive.")

    def _assert_self_adjoint(self):
        if self.spectrum.dtype.is_complex:
            assert_that(_m.equal(_sp.imag(self.spectrum), 0),
                        "Not self-adjoint:  The spectrum contained non-zero imaginary part.")

    def _unblockify(self, x):
        s = list(x.shape)
        return _a.reshape(x, s[:-self.block_depth] + [int(np.prod(s[-self.block_depth:]))])

    def _apply(self, x, adjoint, adjoint_arg, solve):
        x = _lm.adjoint(x) if adjoint_arg else x
        spectrum = to_complex(value_of(self.spectrum))
        if adjoint:
            spectrum = _sp.conj(spectrum)
        x = _m.cast(x, spectrum.dtype)
        bd = self.block_depth
        sb = list(spectrum.shape[:-bd])
        batch = list(broadcast_shapes(sb, x.shape[:-2]))
        block = list(spectrum.shape[-bd:])
        x = _a.broadcast_to(x, batch + list(x.shape[-2:]))
        spectrum = _a.broadcast_to(spectrum, batch + block)
        # [..., N, R] -> [R, ..., N] -> [R, ..., *block]: the columns as blocked vectors
        nd = len(x.shape)
        xv = _a.transpose(x, [nd - 1] + list(range(nd - 1)))
        xv = _a.reshape(xv, list(xv.shape[:-1]) + block)
        fx = _lo.fftnd(xv, axes=self._axes())
        y = _lo.ifftnd(_m.divide(fx, spectrum) if solve else _m.multiply(spectrum, fx), axes=self._axes())
        y = self._unblockify(y)
        y = _a.transpose(y, list(range(1, nd)) + [0])
        return _m.cast(y, self.dtype)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self._apply(x, adjoint, adjoint_arg, solve=False)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._apply(rhs, adjoint, adjoint_arg, solve=True)

    def _determinant(self):
        return _m.cast(_r.reduce_prod(self.spectrum, axis=self._axes()), self.dtype)

    def _log_abs_determinant(self):
        return _m.cast(_r.reduce_sum(_m.log(_m.abs(self.spectrum)), axis=self._axes()), self.dtype)

    def _trace(self):
        s = self.spectrum
        re = _r.reduce_sum(_sp.real(s) if s.dtype.is_complex else s, axis=self._axes())
        if not self.dtype.is_complex:
            return _m.cast(re, self.dtype)
        if self.is_self_adjoint or not s.dtype.is_complex:
            im = _a.zeros_like(re)
        else:
            im = _r.reduce_sum(_sp.imag(s), axis=self._axes())
        return _m.cast(_sp.complex(re, im), self.dtype)

    def _diag_part(self):
        ones = _a.ones(list(self.shape[:-1]), dtype=self.dtype)
        value = _m.divide(self.trace(), _m.cast(self.domain_dimension, self.dtype))
        return _m.multiply(_a.expand_dims(value, -1), ones)

    def _cond(self):
        a = _m.abs(self._unblockify(self.spectrum))
        return _m.divide(_r.reduce_max(a, axis=-1), _r.reduce_min(a, axis=-1))

    def _eigvals(self):
        return self._unblockify(value_of(self.spectrum))


class LinearOperatorCirculant(BaseLinearOperatorCirculant):
    """``tf.linalg.LinearOperatorCirculant``: ``spectrum [..., N]``."""

    def __init__(self, spectrum, input_output_dtype=_dtypes.complex64, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=True, name="LinearOperatorCirculant"):
        parameters = dict(spectrum=spectrum, input_output_dtype=input_output_dtype, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, name=name)
        super().__init__(spectrum, 1, input_output_dtype=input_output_dtype, is_non_singular=is_non_singular,
                         is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                         is_square=is_square, name=name, parameters=parameters)


class LinearOperatorCirculant2D(BaseLinearOperatorCirculant):
    """``tf.linalg.LinearOperatorCirculant2D``: block circulant with circulant blocks, ``spectrum [..., N0, N1]``."""

    def __init__(self, spectrum, input_output_dtype=_dtypes.complex64, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=True, name="LinearOperatorCirculant2D"):
        parameters = dict(spectrum=spectrum, input_output_dtype=input_output_dtype, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, name=name)
        super().__init__(spectrum, 2, input_output_dtype=input_output_dtype, is_non_singular=is_non_singular,
                         is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                         is_square=is_square, name=name, parameters=parameters)


class LinearOperatorCirculant3D(BaseLinearOperatorCirculant):
    """``tf.linalg.LinearOperatorCirculant3D``: doubly nested block circulant, ``spectrum [..., N0, N1, N2]``."""

    def __init__(self, spectrum, input_output_dtype=_dtypes.complex64, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=True, name="LinearOperatorCirculant3D"):
        parameters = dict(spectrum=spectrum, input_output_dtype=input_output_dtype, is_non_singular=is_non_singular,
                          is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                          is_square=is_square, name=name)
        super().__init__(spectrum, 3, input_output_dtype=input_output_dtype, is_non_singular=is_non_singular,
                         is_self_adjoint=is_self_adjoint, is_positive_definite=is_positive_definite,
                         is_square=is_square, name=name, parameters=parameters)


_KINDS = {1: LinearOperatorCirculant, 2: LinearOperatorCirculant2D, 3: LinearOperatorCirculant3D}

__all__ = ["LinearOperatorCirculant", "LinearOperatorCirculant2D", "LinearOperatorCirculant3D"]
