"""``tf.signal`` under TensorFlow and tapejax: the FFTs (values, dtypes, shapes, ``fft_length``'s
cropping and padding, gradients by a tape with TF's conventions, errors), ``fftshift``.

Where TF fails rather than computes (an ``fft_length`` shorter than the input under a tape, the
3-D real FFTs' missing gradients), the plain tests at the end compare tapejax with TF's gradient
of the same program written without the failing op (tapejax.ops.signal_fft's docstring).  TF's
kernels abort the whole process on a zero ``fft_length`` for a non-empty input: no case runs that
under TF.
"""
import numpy as np
import pytest

from .harness import parity, raises

RNG = np.random.default_rng(7)
X6 = (RNG.normal(size=6)).astype(np.float32)
XB = RNG.normal(size=(2, 3, 6)).astype(np.float32)
X3 = RNG.normal(size=(2, 4, 5, 6)).astype(np.float32)
ZR, ZI = RNG.normal(size=(2, 4, 5)).astype(np.float32), RNG.normal(size=(2, 4, 5)).astype(np.float32)
RT = AT = 2e-4


def _z(tf, re=ZR, im=ZI):
    return tf.complex(tf.constant(re), tf.constant(im))


def _loss(tf, y):
    """A real loss that weighs every entry (and both parts) differently."""
    real = tf.float64 if y.dtype in (tf.complex128, tf.float64) else tf.float32
    w = tf.reshape(tf.cast(tf.range(tf.size(y)), real), tf.shape(y)) * 0.1 + 1.0
    if y.dtype.is_complex:
        return tf.reduce_sum(tf.math.real(y) * w) + tf.reduce_sum(tf.math.imag(y) * w * w) + tf.reduce_sum(
            tf.abs(y) ** 2)
    return tf.reduce_sum(y * w) + tf.reduce_sum(y * y)


def _vg(tf, fn, x):
    """fn(x), its dtype name, and d loss(fn(x)) / dx by a tape."""
    with tf.GradientTape() as t:
        t.watch(x)
        y = fn(x)
        loss = _loss(tf, y)
    return y, y.dtype.name, t.gradient(loss, x)


# -- complex FFTs ---------------------------------------------------------------------------

@parity(rtol=RT, atol=AT, modes=True)
def test_complex_ffts_values_and_gradients(tf):
    """fft/ifft of rank 1, 2, 3 on complex64: values and gradients (TF: ifft(g) * n, fft(g) / n)."""
    z = _z(tf)
    return [_vg(tf, f, z) for f in (tf.signal.fft, tf.signal.ifft, tf.signal.fft2d, tf.signal.ifft2d, tf.signal.fft3d, tf.signal.ifft3d)]


@parity(rtol=RT, atol=AT)
def test_complex_fft_output_gradients_and_roundtrip(tf):
    """fft with complex output_gradients; ifft(fft(z)) is z; gradient of a real part only."""
    z = _z(tf)
    with tf.GradientTape(persistent=True) as t:
        t.watch(z)
        y = tf.signal.fft2d(z)
        back = tf.signal.ifft(tf.signal.fft(z))
        r = tf.reduce_sum(tf.math.real(tf.signal.ifft3d(z * z)))
    u = tf.complex(tf.ones_like(ZR) * 0.5, tf.constant(ZR))
    return [t.gradient(y, z, output_gradients=u), back, t.gradient(r, z)]


@parity(rtol=RT, atol=AT)
def test_complex_fft_python_data_and_shapes(tf):
    """Python float lists convert to complex64; batch dimensions stay; empty inputs give empty outputs."""
    return [tf.signal.fft([1.0, 2.0, 0.5]), tf.signal.ifft2d([[1.0, 2.0], [3.0, -1.0]]),
            tf.signal.fft(tf.zeros([3, 0], tf.complex64)), tf.signal.fft2d(tf.zeros([2, 1, 4], tf.complex64))]


@parity(x64=True, rtol=RT, atol=AT)
def test_complex128_ffts(tf):
    """complex128 in, complex128 out (rank 1 and 3), with gradients."""
    z = tf.complex(tf.constant(ZR.astype(np.float64)), tf.constant(ZI.astype(np.float64)))
    return [_vg(tf, tf.signal.fft, z), _vg(tf, tf.signal.ifft3d, z)]


@parity
def test_complex_fft_errors(tf):
    """A real input (float32, int32), too low a rank: InvalidArgumentError, as TF's attr and kernel checks."""
    return [raises(tf.signal.fft, tf.constant([1.0, 2.0])), raises(tf.signal.ifft, tf.constant([1, 2])),
            raises(tf.signal.fft, tf.constant(3 + 0j, tf.complex64)), raises(tf.signal.fft2d, tf.constant([1j, 2j], tf.complex64)),
            raises(tf.signal.ifft3d, tf.zeros([2, 2], tf.complex64)), raises(tf.signal.fft2d, tf.zeros([2, 2], tf.float16))]


# -- real FFTs --------------------------------------------------------------------------------

@parity(rtol=RT, atol=AT, modes=True)
def test_rfft_irfft_lengths_and_gradients(tf):
    """rfft with fft_length unset, equal and longer than the input (zero padding); irfft with
    fft_length unset, odd, and longer than 2 * (n - 1) (the half spectrum padded): values, dtypes,
    shapes and TF's gradients (the dropped Hermitian half folded back; [1, 2, .., 2, 1] / n)."""
    x = tf.constant(X6)
    out = [_vg(tf, lambda v, n=n: tf.signal.rfft(v, fft_length=n), x) for n in (None, [6], [8], [9])]
    z = tf.complex(tf.constant([1.0, 2, 3, 4, 5]), tf.constant([0.5, -1, 2, 0, 1.0]))
    out += [_vg(tf, lambda v, n=n: tf.signal.irfft(v, fft_length=n), z) for n in (None, [8], [9], [12])]
    xb = tf.constant(XB)
    out += [_vg(tf, tf.signal.rfft, xb), _vg(tf, lambda v: tf.signal.irfft(tf.signal.rfft(v)), xb)]
    return out


@parity(rtol=RT, atol=AT, modes=True)
def test_rfft2d_irfft2d_lengths_and_gradients(tf):
    """rfft2d / irfft2d: default lengths, padding on both axes, odd last length; TF's rank-2 gradients."""
    x = tf.constant(XB)
    out = [_vg(tf, lambda v, n=n: tf.signal.rfft2d(v, fft_length=n), x) for n in (None, [3, 6], [4, 7], [5, 8])]
    z = _z(tf)
    out += [_vg(tf, lambda v, n=n: tf.signal.irfft2d(v, fft_length=n), z) for n in (None, [4, 8], [4, 9], [6, 10])]
    return out


@parity(rtol=RT, atol=AT)
def test_rfft3d_irfft3d_values(tf):
    """rfft3d / irfft3d values and dtypes: default lengths, cropping and padding."""
    x = tf.constant(X3)
    z = _z(tf, ZR[None], ZI[None])
    return [tf.signal.rfft3d(x), tf.signal.rfft3d(x, [3, 5, 4]), tf.signal.rfft3d(x, [5, 6, 9]), tf.signal.irfft3d(z), tf.signal.irfft3d(z, [2, 4, 5]),
            tf.signal.irfft3d(z, [5, 5, 12]), tf.signal.irfft3d(tf.signal.rfft3d(x))]


@parity(rtol=RT, atol=AT)
def test_real_fft_cropping_values(tf):
    """An fft_length shorter than the input crops it (values; TF's gradient fails there, see below)."""
    x = tf.constant(XB)
    z = _z(tf)
    return [tf.signal.rfft(x, [4]), tf.signal.rfft(x, [3]), tf.signal.irfft(z, [4]), tf.signal.irfft(z, [5]), tf.signal.rfft2d(x, [2, 5]),
            tf.signal.irfft2d(z, [3, 4])]


@parity(rtol=RT, atol=AT)
def test_real_fft_python_data_and_empty(tf):
    """Python lists convert (float32 / complex64); empty inputs give empty outputs of TF's shape (an
    empty input padded by fft_length: TF's kernel leaves that output uninitialised, tapejax gives
    zeros, test_empty_input_padded_is_zeros)."""
    return [tf.signal.rfft([1, 2, 3]), tf.signal.irfft([1.0, 2.0, 3.0]), tf.signal.rfft(tf.zeros([3, 0])), tuple(tf.signal.rfft(tf.zeros([3, 0]), [4]).shape),
            tf.signal.irfft(tf.zeros([3, 0], tf.complex64)), tf.signal.rfft2d(tf.zeros([3, 5]), [2, 8])]


@parity(x64=True, rtol=RT, atol=AT)
def test_real_ffts_float64(tf):
    """float64 -> complex128 and back, with gradients."""
    x = tf.constant(XB.astype(np.float64))
    return [_vg(tf, tf.signal.rfft, x), _vg(tf, lambda v: tf.signal.irfft2d(tf.signal.rfft2d(v)), x)]


@parity
def test_real_fft_errors(tf):
    """TF's errors: complex or int input to rfft (ValueError), real input to irfft (ValueError), a scalar
    (ValueError), fft_length of the wrong size or negative (InvalidArgumentError; ValueError for irfft),
    a bare int or floats (TypeError)."""
    x = tf.constant([1.0, 2, 3, 4])
    c = tf.complex(x, x)
    return [raises(tf.signal.rfft, c), raises(tf.signal.rfft, tf.constant([1, 2, 3])), raises(tf.signal.irfft, x),
            raises(tf.signal.rfft, tf.constant(1.0)), raises(tf.signal.rfft2d, x), raises(tf.signal.irfft3d, tf.zeros([2, 2], tf.complex64)),
            raises(tf.signal.rfft, x, [2, 3]), raises(tf.signal.rfft, x, [-1]), raises(tf.signal.irfft, c, [-2]), raises(tf.signal.rfft, x, 3),
            raises(tf.signal.irfft, c, [1.5]), raises(tf.signal.rfft, tf.zeros([2], tf.float16))]


# -- fftshift ---------------------------------------------------------------------------------

@parity
def test_fftshift(tf):
    """fftshift / ifftshift over all axes, one int axis, a negative one, a list; odd lengths; gradient."""
    m = tf.reshape(tf.range(15), [3, 5])
    x = tf.constant([0.0, 1, 2, 3, 4, -5, -4, -3, -2, -1])
    out = [tf.signal.fftshift(x), tf.signal.ifftshift(tf.signal.fftshift(x)), tf.signal.fftshift(m), tf.signal.ifftshift(m), tf.signal.fftshift(m, axes=1),
           tf.signal.ifftshift(m, axes=-1), tf.signal.fftshift(m, axes=[0]), tf.signal.ifftshift(m, axes=(0, 1)), tf.signal.fftshift(m, axes=[-2])]
    xf = tf.constant(XB)
    with tf.GradientTape() as t:
        t.watch(xf)
        loss = _loss(tf, tf.signal.fftshift(xf, axes=[1, 2]))
    return out + [t.gradient(loss, xf)]


@parity
def test_fftshift_errors(tf):
    """An axis out of range: InvalidArgumentError (an int or a list)."""
    m = tf.reshape(tf.range(6), [2, 3])
    return [raises(tf.signal.fftshift, m, axes=5), raises(tf.signal.ifftshift, m, axes=[5])]


@parity(rtol=RT, atol=AT)
def test_ffts_in_function(tf):
    """A spectral loss inside tf.function: rfft -> |.| -> mean, and its gradient; fftshift of the spectrum."""
    x = tf.Variable(XB)

    @tf.function
    def step():
        with tf.GradientTape() as t:
            spec = tf.signal.rfft(x)
            loss = tf.reduce_mean(tf.abs(spec)) + tf.reduce_mean(tf.math.real(tf.signal.ifft(spec)))
        return loss, t.gradient(loss, x), tf.signal.fftshift(tf.abs(spec), axes=-1)

    return [step(), step()]


@parity(rtol=RT, atol=AT)
def test_signal_lengths_from_static_shapes_in_function(tf):
    """Lengths computed from tf.shape inside tf.function (static there) drive frame, windows, rfft, stft."""
    @tf.function
    def f(x):
        n = tf.shape(x)[0]
        return (tf.signal.frame(x, n // 2, 2), tf.signal.hann_window(n // 2), tf.signal.rfft(x, [n * 2]),
                tf.signal.stft(x, n // 2, 2), tf.signal.kaiser_window(n), tf.signal.overlap_and_add(
                    tf.reshape(x, [2, n // 2]), n // 4))

    return f(tf.constant(X6.tolist() + X6.tolist()[:4]))


# -- where TF fails: tapejax's exact gradients, against TF's gradient of the same program ------

def _tf():
    return pytest.importorskip("tensorflow")


def _grad(mod, fn, x):
    with mod.GradientTape() as t:
        t.watch(x)
        loss = _loss(mod, fn(x))
    return t.gradient(loss, x).numpy()


def test_shorter_fft_length_gradient_is_exact_where_tf_raises():
    """TF's RFFT/IRFFT gradients raise InvalidArgumentError when fft_length crops the input; tapejax's
    gradient equals TF's gradient of the explicitly cropped program (zeros for the cropped part)."""
    tf = _tf()
    import tapejax as tj
    x = XB
    z = ZR + 1j * ZI
    cases = [
        (lambda m, v: m.signal.rfft(v, [4]), lambda m, v: m.signal.rfft(v[..., :4]), x),
        (lambda m, v: m.signal.rfft2d(v, [2, 5]), lambda m, v: m.signal.rfft2d(v[..., :2, :5]), x),
        (lambda m, v: m.signal.irfft(v, [4]), lambda m, v: m.signal.irfft(v[..., :3]), z.astype(np.complex64)),
        (lambda m, v: m.signal.irfft2d(v, [3, 4]), lambda m, v: m.signal.irfft2d(v[..., :3, :3]), z.astype(np.complex64)),
    ]
    for short, explicit, value in cases:
        with pytest.raises(tf.errors.InvalidArgumentError):
            _grad(tf, lambda v, f=short: f(tf, v), tf.constant(value))
        want = _grad(tf, lambda v, f=explicit: f(tf, v), tf.constant(value))
        got = _grad(tj, lambda v, f=short: f(tj, v), tj.constant(value))
        assert got.shape == value.shape and got.dtype == value.dtype
        np.testing.assert_allclose(got, want, rtol=RT, atol=AT)


def test_rfft3d_gradient_is_exact_where_tf_has_none():
    """TF registers no gradient for RFFT3D / IRFFT3D (LookupError); tapejax's equals TF's gradient of
    the same transform written as rfft over the last axis and fft2d over the other two."""
    tf = _tf()
    import tapejax as tj

    def composed(m, v):   # rfft3d(v) == fft over axes -3, -2 of rfft over -1
        y = m.transpose(m.signal.rfft(v), [0, 3, 1, 2])
        return m.transpose(m.signal.fft2d(y), [0, 2, 3, 1])

    x = X3
    with pytest.raises(LookupError):
        _grad(tf, tf.signal.rfft3d, tf.constant(x))
    want = _grad(tf, lambda v: composed(tf, v), tf.constant(x))
    np.testing.assert_allclose(_grad(tj, tj.signal.rfft3d, tj.constant(x)), want, rtol=RT, atol=AT)
    np.testing.assert_allclose(tj.signal.rfft3d(tj.constant(x)).numpy(), composed(tf, tf.constant(x)).numpy(), rtol=RT, atol=AT)

    def composed_inverse(m, v):   # irfft3d(v) == irfft over -1 of ifft2d over -3, -2
        y = m.signal.ifft2d(m.transpose(v, [0, 3, 1, 2]))
        return m.signal.irfft(m.transpose(y, [0, 2, 3, 1]), [8])

    z = (RNG.normal(size=(1, 3, 4, 5)) + 1j * RNG.normal(size=(1, 3, 4, 5))).astype(np.complex64)
    with pytest.raises(LookupError):
        _grad(tf, lambda v: tf.signal.irfft3d(v, [3, 4, 8]), tf.constant(z))
    want = _grad(tf, lambda v: composed_inverse(tf, v), tf.constant(z))
    np.testing.assert_allclose(_grad(tj, lambda v: tj.signal.irfft3d(v, [3, 4, 8]), tj.constant(z)), want, rtol=RT, atol=AT)


def test_zero_fft_length_is_an_error_not_an_abort():
    """TF's kernels abort the process on fft_length 0 for a non-empty input (never run here);
    tapejax raises InvalidArgumentError naming fft_length."""
    import tapejax as tj
    x = tj.constant([1.0, 2.0])
    for fn, arg in ((tj.signal.rfft, x), (tj.signal.irfft, tj.complex(x, x))):
        with pytest.raises(tj.errors.InvalidArgumentError, match="fft_length"):
            fn(arg, [0])
    with pytest.raises(tj.errors.InvalidArgumentError, match="fft_length"):
        tj.signal.irfft(tj.constant([1 + 0j], tj.complex64))   # inferred 2 * (1 - 1) = 0


def test_empty_input_padded_is_zeros():
    """TF's kernel returns uninitialised memory for an empty input padded by fft_length; tapejax zeros."""
    import tapejax as tj
    y = tj.signal.rfft(tj.zeros([3, 0]), [4])
    assert y.dtype == tj.complex64 and y.shape == (3, 3) and not np.any(y.numpy())
    y = tj.signal.irfft(tj.zeros([2, 0], tj.complex64), [6])
    assert y.dtype == tj.float32 and y.shape == (2, 6) and not np.any(y.numpy())


@pytest.mark.parametrize("call,argument", [
    (lambda s, tj: s.fft(tj.constant([1.0])), "input"),
    (lambda s, tj: s.fft2d(tj.constant([1j], tj.complex64)), "input"),
    (lambda s, tj: s.rfft(tj.constant([1j], tj.complex64)), "input_tensor"),
    (lambda s, tj: s.rfft(tj.constant(1.0)), "input_tensor"),
    (lambda s, tj: s.rfft(tj.constant([1.0]), [1, 2]), "fft_length"),
    (lambda s, tj: s.rfft(tj.constant([1.0]), [-1]), "fft_length"),
    (lambda s, tj: s.irfft(tj.constant([1j], tj.complex64), [-3]), "fft_length"),
    (lambda s, tj: s.rfft(tj.constant([1.0]), 2), "fft_length"),
    (lambda s, tj: s.rfft(tj.constant([1.0]), [0.5]), "fft_length"),
    (lambda s, tj: s.fftshift(tj.constant([1.0]), axes=3), "axes"),
])
def test_error_messages_name_the_argument(call, argument):
    import tapejax as tj
    with pytest.raises(Exception, match=f"`{argument}`"):
        call(tj.signal, tj)


# -- framing ---------------------------------------------------------------------------------

@parity(modes=True)
def test_frame_shapes_values_and_gradients(tf):
    """frame: overlapping, hop longer than the frame, pad_end with a pad value, axis 0 and a middle axis,
    too short a signal (no frames), zero frame_length, int signals; the gradient sums overlaps and
    pad_value gets None."""
    x = tf.constant(XB)
    pv = tf.constant(-2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, pv])
        frames = [tf.signal.frame(x, 4, 2), tf.signal.frame(x, 2, 3), tf.signal.frame(x, 4, 3, pad_end=True, pad_value=pv),
                  tf.signal.frame(x, 2, 1, axis=0), tf.signal.frame(x, 2, 1, axis=-2, pad_end=True),
                  tf.signal.frame(x, 7, 2), tf.signal.frame(x, 8, 5, pad_end=True)]
        loss = tf.add_n([_loss(tf, f) for f in frames])
    g = t.gradient(loss, [x, pv])
    ints = tf.range(10)
    return frames + g + [tf.signal.frame(ints, 4, 3, pad_end=True, pad_value=7), tf.signal.frame(x, 0, 2),
                         tf.signal.frame(tf.zeros([2, 0]), 3, 2), tf.signal.frame(tf.zeros([2, 0]), 3, 2, pad_end=True),
                         tf.signal.frame(ints, tf.constant(3), tf.constant(2), axis=tf.constant(0))]


@parity
def test_frame_errors(tf):
    """frame: frame_step 0 and a negative frame_length (InvalidArgumentError), a float frame_length
    (InvalidArgumentError), non-scalar arguments and a scalar signal (ValueError), axis out of range
    (IndexError), a pad_value TF cannot convert (TypeError)."""
    x = tf.reshape(tf.range(20.0), [2, 10])
    return [raises(tf.signal.frame, x, 3, 0), raises(tf.signal.frame, x, -2, 2), raises(tf.signal.frame, x, 3.0, 2),
            raises(tf.signal.frame, x, [3], 2), raises(tf.signal.frame, x, 3, [2]), raises(tf.signal.frame, tf.constant(1.0), 3, 2),
            raises(tf.signal.frame, x, 3, 2, axis=5), raises(tf.signal.frame, x, 3, 2, axis=-3),
            raises(tf.signal.frame, x, 4, 3, pad_end=True, pad_value=[1.0, 2.0]),
            raises(tf.signal.frame, tf.range(10), 4, 3, pad_end=True, pad_value=1.5),
            tf.signal.frame(x, 3, -1)]


@parity(rtol=RT, atol=AT, modes=True)
def test_overlap_and_add(tf):
    """overlap_and_add: hop < frame (odd and dividing), hop == frame (a reshape), hop > frame (gaps),
    batch dimensions, int and complex frames, no frames; gradients."""
    x = tf.constant(XB)
    with tf.GradientTape() as t:
        t.watch(x)
        outs = [tf.signal.overlap_and_add(x, s) for s in (1, 2, 4, 6, 9)]
        loss = tf.add_n([_loss(tf, o) for o in outs])
    ints = tf.reshape(tf.range(12), [3, 4])
    return outs + [t.gradient(loss, x), tf.signal.overlap_and_add(ints, 2), tf.signal.overlap_and_add(_z(tf), 3),
                   tf.signal.overlap_and_add(tf.ones([0, 4]), 2),
                   tf.signal.overlap_and_add(tf.signal.frame(tf.constant(X6), 4, 2), tf.constant(2))]


@parity
def test_overlap_and_add_errors(tf):
    """frame_step 0 or negative (InvalidArgumentError), a float or a list (ValueError), rank 1 (ValueError)."""
    f = tf.signal.overlap_and_add
    o = tf.ones([3, 4])
    return [raises(f, o, 0), raises(f, o, -1), raises(f, o, 1.0), raises(f, o, [2]), raises(f, tf.ones([4]), 1)]


# -- windows ---------------------------------------------------------------------------------

@parity(rtol=RT, atol=AT)
def test_windows(tf):
    """hann / hamming (periodic and symmetric, odd and even, 0, 1, 2 samples, float16/bfloat16), vorbis,
    kaiser (beta), kaiser_bessel_derived (even and odd lengths: TF's odd length gives one sample less)."""
    out = []
    for n in (0, 1, 2, 5, 8):
        out += [tf.signal.hann_window(n), tf.signal.hann_window(n, periodic=False), tf.signal.hamming_window(n),
                tf.signal.hamming_window(n, periodic=False), tf.signal.vorbis_window(n), tf.signal.kaiser_bessel_derived_window(n)]
    out += [tf.signal.kaiser_window(n) for n in (1, 2, 5, 8)]
    out += [tf.signal.kaiser_window(7, beta=3.5), tf.signal.kaiser_bessel_derived_window(9, beta=4.0),
            tf.signal.hann_window(6, periodic=tf.constant(False)), tf.signal.hann_window(tf.constant(6))]
    for dt in (tf.float16, tf.bfloat16):
        out += [tf.signal.hann_window(6, dtype=dt), tf.signal.hamming_window(5, False, dtype=dt), tf.signal.vorbis_window(6, dtype=dt)]
    return out


@parity(rtol=2e-3, atol=1e-3)
def test_kaiser_windows_float16(tf):
    """float16 Kaiser windows, within one float16 step (TF's CPU kernels round after each op, XLA's
    fused float16 arithmetic does not)."""
    return [tf.signal.kaiser_window(6, 2.0, dtype=tf.float16),
            tf.signal.kaiser_bessel_derived_window(6, 2.0, dtype=tf.float16)]


@parity(x64=True, rtol=RT, atol=AT)
def test_windows_float64(tf):
    """float64 windows (TF computes the Kaiser positions in float32 whatever the dtype)."""
    return [tf.signal.hann_window(7, dtype=tf.float64), tf.signal.hamming_window(8, periodic=False, dtype=tf.float64),
            tf.signal.vorbis_window(5, dtype=tf.float64), tf.signal.kaiser_window(9, 5.0, dtype=tf.float64),
            tf.signal.kaiser_bessel_derived_window(10, 5.0, dtype=tf.float64)]


@parity(rtol=RT, atol=AT)
def test_kaiser_windows_gradient_in_beta(tf):
    """TF differentiates the Kaiser windows in beta; length 1 is a constant [1] (None)."""
    b = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(b)
        k = tf.signal.kaiser_window(6, beta=b)
        kbd = tf.signal.kaiser_bessel_derived_window(7, beta=b)
        one = tf.signal.kaiser_window(1, beta=b)
    return [t.gradient(_loss(tf, k), b), t.gradient(_loss(tf, kbd), b), t.gradient(one, b), k, kbd]


@parity
def test_window_errors(tf):
    """An int or complex dtype (ValueError), a negative length (InvalidArgumentError; kaiser_window(0) too),
    a float length (TypeError), a list (ValueError), periodic not a bool (TypeError)."""
    out = []
    for f in (tf.signal.hann_window, tf.signal.hamming_window, tf.signal.vorbis_window, tf.signal.kaiser_window, tf.signal.kaiser_bessel_derived_window):
        out += [raises(f, 5, dtype=tf.int32), raises(f, 4, dtype=tf.complex64), raises(f, -3), raises(f, 4.0),
                raises(f, [4])]
    return out + [raises(tf.signal.kaiser_window, 0), raises(tf.signal.hann_window, 5, periodic=1),
                  raises(tf.signal.hamming_window, 5, periodic=[True])]


# -- stft, inverse_stft, mel, mfcc, dct -----------------------------------------------------------

AUDIO = (np.sin(np.arange(2 * 300, dtype=np.float64) * 0.07) + 0.3 * RNG.normal(size=600)).reshape(2, 300).astype(
    np.float32)


@parity(rtol=RT, atol=1e-3, modes=True)
def test_stft_and_inverse(tf):
    """stft with the default fft_length (a power of two), an explicit longer one, pad_end, no window,
    hamming; inverse_stft with inverse_stft_window_fn reconstructs the inside of the signal; gradients."""
    x = tf.constant(AUDIO)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        s1 = tf.signal.stft(x, 40, 16)
        s2 = tf.signal.stft(x, 40, 10, fft_length=100, pad_end=True)
        s3 = tf.signal.stft(x, 32, 32, window_fn=None)
        s4 = tf.signal.stft(x, 25, 8, window_fn=tf.signal.hamming_window)
        back = tf.signal.inverse_stft(s1, 40, 16, window_fn=tf.signal.inverse_stft_window_fn(16))
        back2 = tf.signal.inverse_stft(s2, 40, 10, fft_length=100)
        back3 = tf.signal.inverse_stft(s1, 40, 16, fft_length=32, window_fn=None)
        loss = tf.reduce_sum(tf.abs(s1)) + tf.reduce_sum(tf.abs(s2) ** 2) * 1e-3 + tf.reduce_sum(back * back2[:, :back.shape[1]])
    return [s1, s2, s3, s4, back, back2, back3, t.gradient(loss, x),
            t.gradient(tf.reduce_sum(tf.math.real(s4)), x)]


@parity(rtol=RT, atol=AT)
def test_inverse_stft_window_fn(tf):
    """inverse_stft_window_fn for hops that divide the frame and not, and a window with zeros."""
    out = [tf.signal.inverse_stft_window_fn(s)(40, tf.float32) for s in (10, 16, 40)]
    out.append(tf.signal.inverse_stft_window_fn(4, forward_window_fn=tf.signal.vorbis_window)(8, dtype=tf.float32))
    out.append(tf.signal.inverse_stft_window_fn(3, forward_window_fn=lambda n, dtype: tf.signal.hann_window(
        n, periodic=False, dtype=dtype))(9, tf.float32))
    return out


@parity
def test_stft_errors(tf):
    """A non-scalar frame_length (ValueError), a scalar signal (ValueError), int signals (ValueError from
    the window's dtype), a complex stft to inverse_stft of too low a rank (ValueError)."""
    x = tf.constant(AUDIO)
    return [raises(tf.signal.stft, x, [40], 16), raises(tf.signal.stft, tf.constant(1.0), 4, 2),
            raises(tf.signal.stft, tf.range(100), 16, 8), raises(tf.signal.inverse_stft, tf.zeros([5], tf.complex64), 8, 4),
            raises(tf.signal.inverse_stft, tf.zeros([3, 5], tf.complex64), 8, [4])]


@parity(rtol=RT, atol=AT)
def test_linear_to_mel_weight_matrix(tf):
    """The default matrix, a 16 kHz one with zero lower edge and Nyquist upper edge, few spectrogram bins
    (empty filters), float64 not needed: a sample_rate Tensor; TF's edge rows (DC row zero)."""
    m = tf.signal.linear_to_mel_weight_matrix
    return [m(), m(40, 257, 16000, 0.0, 8000.0), m(8, 9, 8000, 300.0, 3000.0), m(3, 65, tf.constant(16000.0), 20.0, 7600.0),
            m(num_mel_bins=64, num_spectrogram_bins=513, sample_rate=22050, lower_edge_hertz=80.0,
              upper_edge_hertz=7600.0)]


@parity(x64=True, rtol=1e-6, atol=1e-8)
def test_linear_to_mel_weight_matrix_float64(tf):
    """dtype=float64."""
    return tf.signal.linear_to_mel_weight_matrix(10, 33, 16000, 100.0, 7000.0, dtype=tf.float64)


@parity(rtol=RT, atol=AT)
def test_mel_matrix_gradient_in_sample_rate(tf):
    """TF differentiates the matrix in sample_rate and the edge frequencies (Tensors)."""
    sr, lo, hi = tf.constant(16000.0), tf.constant(100.0), tf.constant(7000.0)
    with tf.GradientTape() as t:
        t.watch([sr, lo, hi])
        m = tf.signal.linear_to_mel_weight_matrix(6, 33, sr, lo, hi)
        loss = _loss(tf, m)
    return [m, t.gradient(loss, [sr, lo, hi])]


@parity
def test_mel_matrix_errors(tf):
    """TF's ValueErrors: non-positive mel bins, a negative lower edge, lower >= upper, a non-positive
    sample rate, an upper edge above Nyquist, an int dtype."""
    m = tf.signal.linear_to_mel_weight_matrix
    return [raises(m, 0), raises(m, 20, 129, 8000, -1.0), raises(m, 20, 129, 8000, 500.0, 400.0),
            raises(m, 20, 129, 0, 125.0, 3800.0), raises(m, 20, 129, 8000, 125.0, 4100.0),
            raises(m, 20, 129, 8000, 125.0, 3800.0, tf.int32)]


@parity(rtol=RT, atol=AT, modes=True)
def test_dct_idct(tf):
    """dct / idct of types 1-4, unnormalised and ortho (not type 1), n cropping and padding; round trips;
    gradients."""
    x = tf.constant(XB)
    out = []
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        for k in (1, 2, 3, 4):
            out += [tf.signal.dct(x, type=k), tf.signal.idct(x, type=k), tf.signal.dct(x, type=k, n=4),
                    tf.signal.dct(x, type=k, n=9)]
            if k != 1:
                out += [tf.signal.dct(x, type=k, norm="ortho"), tf.signal.idct(tf.signal.dct(x, type=k, norm="ortho"),
                                                                               type=k, norm="ortho")]
        loss = tf.add_n([_loss(tf, o) for o in out])
    return out + [t.gradient(loss, x), t.gradient(_loss(tf, tf.signal.dct(x, type=1)), x)]


@parity(x64=True, rtol=1e-6, atol=1e-6)
def test_dct_float64(tf):
    """float64 DCTs."""
    x = tf.constant(XB.astype(np.float64))
    return [tf.signal.dct(x, type=k) for k in (1, 2, 3, 4)] + [tf.signal.idct(x, norm="ortho")]


@parity
def test_dct_errors(tf):
    """axis other than -1 (NotImplementedError), n < 1, type 5, ortho type 1, type 1 of one sample, an
    unknown norm, an int input (ValueError)."""
    x = tf.constant(XB)
    d = tf.signal.dct
    return [raises(d, x, axis=0), raises(d, x, n=0), raises(d, x, type=5), raises(d, x, type=1, norm="ortho"),
            raises(d, tf.zeros([3, 1]), type=1), raises(d, x, norm="forward"), raises(d, tf.constant([1, 2, 3])),
            raises(tf.signal.idct, x, type=0)]


@parity(rtol=RT, atol=AT)
def test_mfccs(tf):
    """mfccs_from_log_mel_spectrograms of a log-mel spectrogram, with its gradient; no mel bins (ValueError)."""
    x = tf.constant(AUDIO)
    with tf.GradientTape() as t:
        t.watch(x)
        mag = tf.abs(tf.signal.stft(x, 64, 32))
        mel = tf.tensordot(mag, tf.signal.linear_to_mel_weight_matrix(16, 33, 8000, 60.0, 3800.0), 1)
        mfcc = tf.signal.mfccs_from_log_mel_spectrograms(tf.math.log(mel + 1e-6))[..., :8]
        loss = tf.reduce_sum(mfcc * mfcc)
    return [mfcc, t.gradient(loss, x), raises(tf.signal.mfccs_from_log_mel_spectrograms, tf.zeros([2, 0]))]


@parity(rtol=RT, atol=1e-3)
def test_mdct(tf):
    """mdct / inverse_mdct (vorbis window, none, ortho): the pair reconstructs the inside of the signal."""
    x = tf.constant(AUDIO[:, :256])
    m = tf.signal.mdct(x, 16)
    with tf.GradientTape() as t:
        t.watch(x)
        mo = tf.signal.mdct(x, 32, norm="ortho", window_fn=None, pad_end=True)
        loss = tf.reduce_sum(mo * mo)
    return [m, tf.signal.inverse_mdct(m), mo, tf.signal.inverse_mdct(mo, norm="ortho", window_fn=None),
            t.gradient(loss, x), raises(tf.signal.mdct, x, 10)]


# -- a user's program: a spectrogram classifier -----------------------------------------------------

def _audio_batch(seed, n=8, length=256):
    """Two classes of noisy tones (low vs high pitch), as float32 [n, length], and int32 labels."""
    r = np.random.default_rng(seed)
    labels = r.integers(0, 2, size=n).astype(np.int32)
    f = np.where(labels == 0, r.uniform(0.05, 0.12, n), r.uniform(0.3, 0.45, n))
    t = np.arange(length)
    x = np.sin(2 * np.pi * f[:, None] * t[None, :] + r.uniform(0, 6, n)[:, None]) + 0.3 * r.normal(size=(n, length))
    return x.astype(np.float32), labels


def _classifier(tf):
    """Variables of a tiny log-mel classifier: a learnable pre-emphasis, a dense layer over 12 mel bands."""
    r = np.random.default_rng(3)
    return {"pre": tf.Variable(0.5), "w": tf.Variable(r.normal(scale=0.1, size=(12, 2)).astype(np.float32)),
            "b": tf.Variable(np.zeros(2, np.float32))}


def _logits(tf, v, x):
    emphasized = x[:, 1:] - v["pre"] * x[:, :-1]
    spec = tf.abs(tf.signal.stft(emphasized, frame_length=64, frame_step=32, window_fn=tf.signal.hann_window))
    mel = tf.tensordot(spec, tf.signal.linear_to_mel_weight_matrix(12, 33, 8000, 50.0, 4000.0), 1)
    feats = tf.reduce_mean(tf.math.log(mel + 1e-3), axis=1)
    return tf.matmul(feats, v["w"]) + v["b"]


def _xent(tf, logits, labels):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _train(tf, step_fn, steps=5):
    v = _classifier(tf)
    losses, accuracies = [], []
    xe, ye = _audio_batch(99)
    for i in range(steps):
        x, y = _audio_batch(i)
        losses.append(step_fn(v, tf.constant(x), tf.constant(y)))
        pred = tf.argmax(_logits(tf, v, tf.constant(xe)), axis=1, output_type=tf.int32)   # evaluation between steps
        accuracies.append(tf.reduce_mean(tf.cast(tf.equal(pred, tf.constant(ye)), tf.float32)))
    return losses, accuracies, [v["pre"], v["w"], v["b"]]


def _eager_step(tf):
    def step(v, x, y):
        with tf.GradientTape() as t:
            loss = _xent(tf, _logits(tf, v, x), y)
        grads = t.gradient(loss, [v["pre"], v["w"], v["b"]])
        for var, g in zip([v["pre"], v["w"], v["b"]], grads):
            var.assign_sub(0.5 * g)
        return loss
    return step


@parity(rtol=1e-3, atol=1e-4, modes=True)
def test_spectrogram_classifier_trains(tf):
    """stft -> |.| -> mel matrix -> log -> dense, with a learnable pre-emphasis, trained 5 SGD steps with
    an evaluation after each: the same losses, accuracies and weights (deferred and eager)."""
    return _train(tf, _eager_step(tf))


@parity(rtol=1e-3, atol=1e-4, modes=True)
def test_spectrogram_classifier_trains_in_function(tf):
    """The same training step inside tf.function (compiled once, then reused)."""
    return _train(tf, tf.function(_eager_step(tf)))
