"""``tf.quantization``'s float ops under TensorFlow and tapejax (tapejax.ops.quantization): the fake
quantisers' values and gradients (the range Variables' too) over random inputs, bit widths and
``narrow_range``, the explicit gradient functions, ``quantize_and_dequantize_v2`` (given and own
ranges, per axis, both rounding modes, signed and unsigned) and the deprecated
``quantize_and_dequantize``, in and out of ``tf.function``, and TF's argument errors.
"""
import numpy as np

from .harness import parity, raises

RS = np.random.RandomState(2401)
X = (RS.randn(5, 3) * 2).astype(np.float32)
G = RS.randn(5, 3).astype(np.float32)
CASES = ((8, False, -1.3, 0.9), (4, True, -0.2, 2.1), (2, False, 0.4, 1.7), (16, True, -3.0, -0.5),
         (3, False, 0.0, 0.0))


def _fake_quants(tf, x, lo, hi, plo, phi, bits, narrow):
    return [tf.quantization.fake_quant_with_min_max_vars(x, lo, hi, num_bits=bits, narrow_range=narrow),
            tf.quantization.fake_quant_with_min_max_vars_per_channel(x, plo, phi, num_bits=bits, narrow_range=narrow),
            tf.quantization.fake_quant_with_min_max_args(x, -1.5, 1.25, num_bits=bits, narrow_range=narrow)]


@parity
def test_fake_quant_ops_values_and_gradients_over_bits_ranges_and_narrow_range(tf):
    out = []
    for bits, narrow, lo, hi in CASES:
        x, a, b = tf.Variable(X), tf.Variable(lo), tf.Variable(hi)
        pa, pb = tf.Variable([lo, -0.7, 0.3]), tf.Variable([hi, 0.8, 1.2])
        with tf.GradientTape() as t:
            ys = _fake_quants(tf, x, a, b, pa, pb, bits, narrow)
            loss = tf.add_n([tf.reduce_sum(y * G) for y in ys])
        out.append((ys, t.gradient(loss, [x, a, b, pa, pb])))
    return out


@parity
def test_fake_quant_in_a_compiled_function_and_the_explicit_gradient_ops(tf):
    """The gradient functions as a custom quantiser's backward calls them (the per-variable ones give a
    namedtuple: its fields compared by name)."""
    @tf.function
    def run(x, lo, hi, plo, phi, g):
        ys = _fake_quants(tf, x, lo, hi, plo, phi, 4, True)
        return ys, (tf.quantization.fake_quant_with_min_max_vars_gradient(g, x, lo, hi, num_bits=4, narrow_range=True),
                    tf.quantization.fake_quant_with_min_max_vars_per_channel_gradient(g, x, plo, phi, num_bits=4,
                                                                                      narrow_range=True),
                    tf.quantization.fake_quant_with_min_max_args_gradient(g, x, -1.5, 1.25, num_bits=4,
                                                                          narrow_range=True))

    ys, (g1, g2, g3) = run(tf.constant(X), tf.constant(-1.0), tf.constant(0.7), tf.constant([-1.0, -0.5, 0.0]),
                           tf.constant([0.5, 1.0, 2.0]), tf.constant(G))
    return ys, tuple(g1), tuple(g2), g3, (type(g1).__name__, g1._fields, type(g2).__name__, g2._fields)


@parity
def test_quantize_and_dequantize_values_and_gradients(tf):
    out = []
    for mode in ("HALF_TO_EVEN", "HALF_UP"):
        for signed, narrow, bits in ((True, False, 8), (True, True, 3), (False, False, 4)):
            x, lo, hi = tf.Variable(X), tf.Variable(-1.2), tf.Variable(1.7)
            with tf.GradientTape(persistent=True) as t:
                ys = [tf.quantization.quantize_and_dequantize_v2(x, lo, hi, signed_input=signed, num_bits=bits,
                                                                 range_given=True, round_mode=mode,
                                                                 narrow_range=narrow),
                      tf.quantization.quantize_and_dequantize_v2(x, lo, hi, signed_input=signed, num_bits=bits,
                                                                 round_mode=mode, narrow_range=narrow),
                      tf.quantization.quantize_and_dequantize_v2(x, tf.zeros([3]), tf.ones([3]), signed_input=signed,
                                                                 num_bits=bits, round_mode=mode,
                                                                 narrow_range=narrow, axis=-1),
                      tf.quantization.quantize_and_dequantize(x, lo, hi, signed_input=signed, num_bits=bits,
                                                              range_given=True, round_mode=mode)]
            out.append((ys, [t.gradient(tf.reduce_sum(y * G), [x, lo, hi]) for y in ys]))
            del t
    return out


@parity
def test_quantization_argument_errors(tf):
    q = tf.quantization
    return (raises(q.fake_quant_with_min_max_args, X, 1.0, -1.0),
            raises(q.fake_quant_with_min_max_vars, X, -1.0, 1.0, num_bits=1),
            raises(q.fake_quant_with_min_max_vars, X, -1.0, 1.0, num_bits=17),
            raises(q.quantize_and_dequantize_v2, X, 1.0, -1.0, range_given=True),
            raises(q.quantize_and_dequantize_v2, X, -1.0, 1.0, num_bits=0),
            raises(q.quantize_and_dequantize_v2, X, -1.0, 1.0, round_mode="HALF_DOWN"),
            raises(q.quantize_and_dequantize_v2, X, tf.zeros([3]), tf.ones([3]), range_given=True, axis=1))
