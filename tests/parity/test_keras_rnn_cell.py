"""``tf.keras.layers.AbstractRNNCell`` (``tapejax/keras/rnn_cell.py``) under real TensorFlow 2.21
(tf_keras) and tapejax (Keras 3 on JAX): TF's documented ``MinimalRNNCell`` subclass inside
``RNN`` (outputs, ``return_sequences`` / ``return_state``, a model trained by a tape loop), a
two-state cell with ``output_size``, ``get_initial_state`` called directly, and the abstract
members' NotImplementedError.  Every weight is set from NumPy.
"""
import numpy as np

from .harness import init_array, parity, raises

KTOL = dict(rtol=2e-4, atol=2e-5)
SEQ = np.random.RandomState(0).randn(3, 5, 2).astype(np.float32)
TARGET = np.random.RandomState(1).randn(3, 1).astype(np.float32)


def _cells(tf):
    class MinimalRNNCell(tf.keras.layers.AbstractRNNCell):   # (TF's docstring example)
        def __init__(self, units, **kwargs):
            self.units = units
            super().__init__(**kwargs)

        @property
        def state_size(self):
            return self.units

        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="uniform", name="kernel")
            self.recurrent_kernel = self.add_weight(shape=(self.units, self.units), initializer="uniform",
                                                    name="recurrent_kernel")
            self.built = True

        def call(self, inputs, states):
            prev_output = states[0]
            output = tf.matmul(inputs, self.kernel) + tf.matmul(prev_output, self.recurrent_kernel)
            return output, output

    class TwoStateCell(tf.keras.layers.AbstractRNNCell):
        """A leaky cell with a running memory: two states, its own output size."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        @property
        def state_size(self):
            return [self.units, self.units]

        @property
        def output_size(self):
            return self.units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="zeros", name="w")
            self.built = True

        def call(self, inputs, states):
            h, memory = states
            h = tf.tanh(tf.matmul(inputs, self.w) + 0.5 * h)
            memory = 0.9 * memory + h
            return h + 0.1 * memory, [h, memory]

    return MinimalRNNCell, TwoStateCell


def _set(layer, seed):
    layer.set_weights([init_array(tuple(v.shape), seed + i, 0.5) for i, v in enumerate(layer.weights)])


@parity(**KTOL)
def test_minimal_cell_in_rnn(tf):
    """TF's ``MinimalRNNCell`` inside ``RNN``: the last output, the sequences with the final
    state, the layer's weights' names, and a functional model built on it (its output shape
    from the state size: the cell has no ``output_size``)."""
    minimal, _ = _cells(tf)
    last = tf.keras.layers.RNN(minimal(4))
    seqs = tf.keras.layers.RNN(minimal(4), return_sequences=True, return_state=True)
    last(SEQ)
    seqs(SEQ)
    _set(last, 10)
    _set(seqs, 10)
    out, state = seqs(SEQ)
    inp = tf.keras.Input((5, 2))
    functional = tf.keras.Model(inp, tf.keras.layers.Dense(1)(tf.keras.layers.RNN(minimal(4))(inp)))
    for i, layer in enumerate(functional.layers[1:]):
        _set(layer, 30 + 10 * i)
    return (last(SEQ), out, state, [w.name.split("/")[-1].split(":")[0] for w in last.weights],
            functional(SEQ), list(functional.output_shape))


@parity(**KTOL)
def test_two_state_cell_trained_by_a_tape_loop(tf):
    """A two-state cell with ``output_size`` in a Sequential with a Dense head, trained three SGD
    steps by a tape loop (``RNN`` builds the two zero states); losses and weights."""
    _, two = _cells(tf)
    model = tf.keras.Sequential([tf.keras.layers.RNN(two(3)), tf.keras.layers.Dense(1)])
    model(SEQ)
    for i, layer in enumerate(model.layers):
        _set(layer, 20 + 10 * i)
    opt = tf.keras.optimizers.SGD(0.1)
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(SEQ) - TARGET) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(loss)
    return losses, [v.numpy() for v in model.trainable_variables]


@parity
def test_get_initial_state_and_abstract_members(tf):
    """``get_initial_state`` from inputs (their batch and dtype) and from a batch size and dtype:
    one tensor for an integer size, a list for a list of sizes; with neither batch size nor
    inputs, ValueError; the abstract ``call`` / ``state_size`` / ``output_size`` raise
    NotImplementedError."""
    minimal, two = _cells(tf)
    one = minimal(4).get_initial_state(inputs=tf.constant(SEQ[:, 0]))
    pair = two(3).get_initial_state(batch_size=2, dtype=tf.float32)
    base = tf.keras.layers.AbstractRNNCell()
    return (one, pair, raises(lambda: minimal(4).get_initial_state()),
            raises(lambda: base.state_size), raises(lambda: base.output_size),
            raises(lambda: base.call(SEQ[:, 0], [SEQ[:, 0]])))
