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

