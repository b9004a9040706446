"""``tf.edit_distance`` under TF 2.21 and tapejax: TF's documented example on strings, normalized and
raw distances, cells only one side has (``inf`` and ``1.0`` normalized), empty inputs, entries out
of the canonical order (TF's merge of the two group lists, which tapejax reproduces), every value
dtype, rank 4, inside ``tf.function``, no gradient, TF's errors; and the character error rate of a
CTC model's greedy decodes as keras.io's OCR example computes it, between eager training steps."""
import numpy as np

from .harness import parity, raises


def _st(tf, indices, values, shape):
    return tf.SparseTensor(tf.constant(indices, tf.int64), values, tf.constant(shape, tf.int64))


@parity
def test_documented_example_on_strings(tf):
    """TF's docstring example: hypothesis ``[2, 1]`` cells, truth ``[2, 2]``; normalized
    ``[[inf, 1], [0.5, 1]]`` and raw distances."""
    h = _st(tf, [[0, 0, 0], [1, 0, 0]], ["a", "b"], [2, 1, 1])
    t = _st(tf, [[0, 1, 0], [1, 0, 0], [1, 0, 1], [1, 1, 0]], ["a", "b", "c", "a"], [2, 2, 2])
    return tf.edit_distance(h, t), tf.edit_distance(h, t, normalize=False)


@parity
def test_cells_with_one_side_empty_or_both(tf):
    """An empty hypothesis against a one-token truth, cells neither has (0), a rank-4 pair of
    different dense shapes (the output takes the larger of each leading size)."""
    h = _st(tf, np.zeros((0, 2), np.int64), tf.constant([], tf.int32), [3, 2])
    t = _st(tf, [[1, 0]], tf.constant([4]), [3, 1])
    h4 = _st(tf, [[0, 1, 0, 0], [0, 1, 0, 1]], tf.constant([1, 2]), [1, 2, 1, 3])
    t4 = _st(tf, [[0, 0, 0, 0]], tf.constant([1]), [1, 1, 2, 1])
    return (tf.edit_distance(h, t), tf.edit_distance(h, t, normalize=False), tf.edit_distance(h4, t4),
            tf.edit_distance(h4, t4, normalize=False))


@parity
def test_order_gaps_and_repeats_are_taken_as_given(tf):
    """Sequences are the values in the order given: gaps in the last index are ignored, repeated
    indices are two tokens, and groups out of row-major order give TF's merge result."""
    one = _st(tf, [[0, 0]], tf.constant([1]), [1, 1])
    return (tf.edit_distance(_st(tf, [[0, 0], [0, 3]], tf.constant([1, 2]), [1, 4]),
                             _st(tf, [[0, 1], [0, 2]], tf.constant([1, 2]), [1, 3])),
            tf.edit_distance(_st(tf, [[0, 0], [0, 0]], tf.constant([1, 2]), [1, 2]), one),
            tf.edit_distance(_st(tf, [[0, 1], [0, 0]], tf.constant([1, 2]), [1, 2]),
                             _st(tf, [[0, 0], [0, 1]], tf.constant([2, 1]), [1, 2])),
            tf.edit_distance(_st(tf, [[1, 0], [0, 0]], tf.constant([1, 2]), [2, 1]), one))


@parity
def test_value_dtypes_ragged_inputs_and_no_gradient(tf):
    """float, bool and int64 tokens; SparseTensors from ragged rows; a float32 result with no
    gradient to the values (None)."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        d = tf.edit_distance(_st(tf, [[0, 0], [0, 1]], x, [1, 2]), _st(tf, [[0, 0]], tf.constant([1.0]), [1, 1]))
    b = tf.edit_distance(_st(tf, [[0, 0]], tf.constant([True]), [1, 1]),
                         _st(tf, [[0, 0]], tf.constant([False]), [1, 1]))
    i64 = tf.edit_distance(_st(tf, [[0, 0], [0, 1]], tf.constant([7, 8], tf.int64), [1, 2]),
                           _st(tf, [[0, 0]], tf.constant([8], tf.int64), [1, 1]), normalize=False)
    r = tf.edit_distance(tf.ragged.constant([[1, 2], [3]]).to_sparse(), tf.ragged.constant([[1], [3, 4, 5]]).to_sparse())
    return d, d.dtype.name, tape.gradient(d, x), b, i64, r


@parity
def test_inside_a_function(tf):
    """A compiled function's edit distance reads the values of each call."""
    @tf.function
    def f(hv):
        return tf.edit_distance(_st(tf, [[0, 0], [0, 1], [1, 0]], hv, [2, 2]),
                                _st(tf, [[0, 0], [1, 0], [1, 1]], tf.constant([1, 5, 6]), [2, 2]))
    return f(tf.constant([1, 3, 5])), f(tf.constant([1, 1, 6]))


@parity
def test_errors(tf):
    """A dense input is TypeError; rank 1, unequal ranks and unequal dtypes InvalidArgumentError; a
    cell outside the output InternalError."""
    one = _st(tf, [[0, 0]], tf.constant([1]), [1, 1])
    return (raises(tf.edit_distance, tf.constant([1]), one),
            raises(tf.edit_distance, one, tf.constant([1])),
            raises(tf.edit_distance, _st(tf, [[0], [1]], tf.constant([1, 2]), [2]), _st(tf, [[0]], tf.constant([1]), [1])),
            raises(tf.edit_distance, one, _st(tf, [[0, 0, 0]], tf.constant([1]), [1, 1, 1])),
            raises(tf.edit_distance, one, _st(tf, [[0, 0]], tf.constant([1.0]), [1, 1])),
            raises(tf.edit_distance, _st(tf, [[3, 0]], tf.constant([1]), [1, 2]), one))


@parity(modes=True, rtol=1e-5, atol=1e-6)
def test_ctc_model_character_error_rate_between_training_steps(tf):
    """keras.io's OCR metric: a per-frame linear CTC model trained 3 eager Adam steps; after each,
    ``ctc_greedy_decoder`` on time-major logits, labels as a SparseTensor from the padded dense
    labels (``from_dense`` drops the 0 padding), and the mean ``edit_distance`` (the CER)."""
    rs = np.random.RandomState(7)
    x = rs.randn(3, 6, 4).astype(np.float32)
    labels = np.array([[1, 2, 0], [2, 2, 1], [3, 0, 0]], np.int32)
    lens = np.array([2, 3, 1], np.int32)
    w = tf.Variable(rs.randn(4, 5).astype(np.float32) * 0.5)
    b = tf.Variable(np.zeros(5, np.float32))
    opt = tf.keras.optimizers.Adam(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = tf.einsum("btf,fk->btk", x, w) + b
            loss = tf.reduce_mean(tf.nn.ctc_loss(labels, logits, lens, tf.fill([3], 6), logits_time_major=False,
                                                 blank_index=-1))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        decoded, _ = tf.nn.ctc_greedy_decoder(tf.transpose(logits, [1, 0, 2]), tf.fill([3], 6))
        truth = tf.sparse.from_dense(tf.constant(labels, tf.int64))
        cer = tf.edit_distance(tf.cast(decoded[0], tf.int64), truth)
        out.append((loss, cer, tf.reduce_mean(cer)))
    return out
