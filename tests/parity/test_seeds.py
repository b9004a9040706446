"""Every code example of the five seed posts (/work/shared/seeds/), ported to TF2 eager.

TF1 graph code (Session, tf.get_variable, tf.train.*Optimizer) is ported to
TF2: variables get fixed initial values, `tf.gradients` runs inside
`tf.function` (it raises RuntimeError eagerly), optimizers are tf_keras's
`tf.keras.optimizers.legacy.*` (TF_USE_LEGACY_KERAS=1 in conftest; Keras 3's
optimizers have no `minimize(grad_loss=, tape=)`).  Cases needing features
beyond the core are listed in LATER (tapejax attribute path -> case names):
the tapejax side skips them with "needs <feature>" until the attributes exist.
"""

import itertools

import numpy as np

from .harness import A, parity, raises, warned

OPT = "keras.optimizers.legacy.SGD"

# feature (tapejax attribute path) -> the cases that need it beyond the core
LATER = {
    # Optimizer.minimize(grad_loss=, tape=) / apply_gradients (seeds 0, 2, 3)
    OPT: {"test_seed0_minimize_grad_loss_list", "test_seed0_minimize_grad_loss_tensor",
          "test_seed2_apply_gradients_skips_none", "test_seed3_two_models_optimizer"},
    # tf.gradients inside tf.function (seeds 2, 4)
    "function": {"test_seed2_gradients_grad_ys", "test_seed2_stop_gradient_gradients",
                 "test_seed2_stop_gradient_one_path", "test_seed2_stop_gradients_argument",
                 "test_seed2_stop_gradient_equivalent", "test_seed2_gradients_unconnected",
                 "test_seed2_higher_order_gradients", "test_seed4_override_floor_identity",
                 "test_seed4_register_gradient_custom_grad", "test_seed4_tape_honours_override"},
    "gradients": {"test_seed2_gradients_grad_ys", "test_seed2_stop_gradient_gradients",
                  "test_seed2_stop_gradient_one_path", "test_seed2_stop_gradients_argument",
                  "test_seed2_stop_gradient_equivalent", "test_seed2_gradients_unconnected",
                  "test_seed2_higher_order_gradients", "test_seed4_override_floor_identity",
                  "test_seed4_register_gradient_custom_grad", "test_seed4_tape_honours_override"},
    "stop_gradient": {"test_seed2_stop_gradient_tape", "test_seed2_stop_gradient_gradients",
                      "test_seed2_stop_gradient_one_path", "test_seed2_stop_gradient_equivalent",
                      "test_seed2_apply_gradients_skips_none"},
    # gradient_override_map / RegisterGradient (seed 4)
    "compat.v1.get_default_graph": {"test_seed4_override_floor_identity", "test_seed4_register_gradient_custom_grad",
                                    "test_seed4_tape_honours_override"},
    "RegisterGradient": {"test_seed4_register_gradient_custom_grad", "test_seed4_tape_honours_override"},
    "floor": {"test_seed4_override_floor_identity"},
}

_names = itertools.count()


# --------------------------------------------------------------------------
# seed 0: output_gradients in GradientTape.gradient / grad_loss in minimize
# --------------------------------------------------------------------------

@parity(expected=(A([0.0, 0.6]), [A([2.0, 2.0]), A([2.0, 2.0])]))
def test_seed0_gradient_of_vector_target(tf):
    """Seed 0: y = x*(w0+w1), tape.gradient(y, w) == [[2, 2], [2, 2]]."""
    w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
    x = 2.0
    with tf.GradientTape(persistent=True) as tape:
        y = x * (w[0] + w[1])
    return y, tape.gradient(y, w)


@parity(expected=(A([-2.0, -3.9]), A([-2.0, -3.8])))
def test_seed0_minimize_grad_loss_list(tf):
    """Seed 0: SGD(1.0).minimize(y, w, grad_loss=[g1, g2], tape=tape): only g1 is used (g2 silently dropped)."""
    optimizer = tf.keras.optimizers.legacy.SGD(1.0)
    w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
    x = 2.0
    with tf.GradientTape(persistent=True) as tape:
        y = x * (w[0] + w[1])
    optimizer.minimize(y, w, grad_loss=[tf.constant([1.0, 2.0]), tf.constant([2.0, 2.0])], tape=tape)
    return w[0].read_value(), w[1].read_value()


@parity(expected=A([-3.0, -10.0]))
def test_seed0_minimize_grad_loss_tensor(tf):
    """Seed 0: minimize(y, w, grad_loss=[2, 5], tape=tape) on y = 2*w moves w by -[4, 10]."""
    optimizer = tf.keras.optimizers.legacy.SGD(1.0)
    w = tf.Variable([1.0, 0.0])
    x = 2.0
    with tf.GradientTape() as tape:
        y = x * w
    optimizer.minimize(y, w, grad_loss=tf.constant([2.0, 5.0]), tape=tape)
    return w.read_value()


@parity(expected=([A([7.0, 7.0]), A([7.0, 7.0])], [A([7.0, 7.0]), A([7.0, 7.0])],
                  [A([-7.0, -7.0]), A([-7.0, -7.0])], [A([-7.0, -7.0]), A([-7.0, -7.0])]))
def test_seed0_manual_chain_rule_and_sign_flip(tf):
    """Seed 0: gradient(y, w, output_gradients=gradient(y2, y)) == gradient(y2, w); output_gradients=-1.0 (or [-1.]) flips it."""
    w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
    x = 2.0
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_mean(x * (w[0] + w[1]))
        y2 = 7.0 * y
    grads = tape.gradient(y2, w)
    chained = tape.gradient(y, w, output_gradients=tape.gradient(y2, y))
    flipped = tape.gradient(y2, w, output_gradients=-1.0)
    flipped_tensor = tape.gradient(y2, w, output_gradients=tf.constant([-1.0]))
    return grads, chained, flipped, flipped_tensor


# --------------------------------------------------------------------------
# seed 1: list targets give summed gradients
# --------------------------------------------------------------------------

@parity(expected=A(6.0))
def test_seed1_docstring_example(tf):
    """Seed 1: x = 3, watch, y = x*x, dy/dx == 6."""
    x = tf.constant(3.0)
    with tf.GradientTape() as g:
        g.watch(x)
        y = x * x
    return g.gradient(y, x)


@parity(expected=[A(5.0), A(9.0)])
def test_seed1_list_target_list_source(tf):
    """Seed 1 example 1: target [y1, y2], sources [x1, x2] -> [dy1/dx1 + dy2/dx1, dy1/dx2 + dy2/dx2]."""
    x1 = tf.constant(1.0)
    x2 = tf.constant(2.0)
    with tf.GradientTape() as g:
        g.watch([x1, x2])
        y1 = x1 * x2 + x2 * x2
        y2 = 3.0 * x1 + 4.0 * x2
    return g.gradient([y1, y2], [x1, x2])


def _seed1_forward(tf, inputs, labels, var_list):
    w, b = var_list
    logits = tf.matmul(inputs, w) + b
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


@parity(expected=(A([0.6881597, 0.71584916]), A([[0.20586157, -0.20586154], [0.2607238, -0.26072377]]),
                  A(0.70200443), A([[0.10293078, -0.10293077], [0.1303619, -0.13036188]])))
def test_seed1_xentropy_batch_vs_reduced(tf):
    """Seed 1 example 2: gradient of the per-sample loss vector is the sum, of its mean half of it (printed values)."""
    inputs = tf.convert_to_tensor([[0.1, 0], [0.5, 0.51]])
    w = tf.Variable(initial_value=inputs)
    b = tf.Variable(tf.constant([0.0, 0.0]))
    labels = tf.convert_to_tensor([0, 1])
    with tf.GradientTape() as g:
        xentropy = _seed1_forward(tf, inputs, labels, [w, b])
        reduced_xentropy = tf.reduce_mean(xentropy)
    grads = g.gradient(xentropy, [w, b])
    with tf.GradientTape() as g:
        xentropy2 = _seed1_forward(tf, inputs, labels, [w, b])
        reduced_xentropy = tf.reduce_mean(xentropy2)
    grads_reduced = g.gradient(reduced_xentropy, [w, b])
    return xentropy, grads[0], reduced_xentropy, grads_reduced[0]


@parity
def test_seed1_bias_gradients(tf):
    """Seed 1 example 2: the bias gradients of the summed and the mean loss (0.5 factor)."""
    inputs = tf.convert_to_tensor([[0.1, 0], [0.5, 0.51]])
    w = tf.Variable(initial_value=inputs)
    b = tf.Variable(tf.constant([0.0, 0.0]))
    labels = tf.convert_to_tensor([0, 1])
    with tf.GradientTape(persistent=True) as g:
        xentropy = _seed1_forward(tf, inputs, labels, [w, b])
        reduced = tf.reduce_mean(xentropy)
    gb = g.gradient(xentropy, b)
    return gb, g.gradient(reduced, b), g.gradient(reduced, b) * 2.0 - gb


# --------------------------------------------------------------------------
# seed 2: tf.gradients / stop_gradient / higher order (graph code ported)
# --------------------------------------------------------------------------

def _seed2_vars(tf):
    return (tf.Variable([0.1, 0.2, 0.3]), tf.Variable([0.4, 0.5, 0.6]),
            tf.Variable([0.7, 0.8, 0.9]), tf.Variable([1.0, 1.1, 1.2]))


_SEED2_GRAD_YS = [A([2.0, 2.0, 3.0]), A([2.0, 2.0, 3.0]), A([5.0, 4.0, 7.0]), A([3.0, 2.0, 4.0])]


@parity(expected=_SEED2_GRAD_YS)
def test_seed2_gradients_grad_ys(tf):
    """Seed 2: tf.gradients([z1, z2], [w1..w4], grad_ys=[...]) in a tf.function (get_variable -> Variable)."""
    w1, w2, w3, w4 = _seed2_vars(tf)

    @tf.function
    def grads():
        z1 = w1 + w2 + w3
        z2 = w3 + w4
        return tf.gradients([z1, z2], [w1, w2, w3, w4],
                            grad_ys=[tf.convert_to_tensor([2.0, 2.0, 3.0]), tf.convert_to_tensor([3.0, 2.0, 4.0])])
    return grads()


@parity(expected=_SEED2_GRAD_YS)
def test_seed2_grad_ys_as_tape_output_gradients(tf):
    """Seed 2's grad_ys example with GradientTape(output_gradients=[...]): same numbers, core only."""
    w1, w2, w3, w4 = _seed2_vars(tf)
    with tf.GradientTape() as t:
        z1 = w1 + w2 + w3
        z2 = w3 + w4
    return t.gradient([z1, z2], [w1, w2, w3, w4],
                      output_gradients=[tf.convert_to_tensor([2.0, 2.0, 3.0]), tf.convert_to_tensor([3.0, 2.0, 4.0])])


@parity(expected=[None, A(6.0)])
def test_seed2_stop_gradient_tape(tf):
    """Seed 2: b = stop_gradient(w1*3) * w2; the tape gives [None, 6.0] for [w1, w2]."""
    w1 = tf.Variable(2.0)
    w2 = tf.Variable(2.0)
    with tf.GradientTape() as t:
        a = tf.multiply(w1, 3.0)
        a_stoped = tf.stop_gradient(a)
        b = tf.multiply(a_stoped, w2)
    return t.gradient(b, [w1, w2])


@parity(expected=[None, A(6.0)])
def test_seed2_stop_gradient_gradients(tf):
    """Seed 2: the same through tf.gradients in a tf.function: [None, 6.0]."""
    w1 = tf.Variable(2.0)
    w2 = tf.Variable(2.0)

    @tf.function
    def grads():
        a = tf.multiply(w1, 3.0)
        a_stoped = tf.stop_gradient(a)
        b = tf.multiply(a_stoped, w2)
        return tf.gradients(b, xs=[w1, w2])
    return grads()


@parity(expected=([A(1.0), A(1.0)], [A(1.0), A(1.0)]))
def test_seed2_stop_gradient_one_path(tf):
    """Seed 2: e = stop_gradient(a+b) + (a+b): gradients [1, 1] (the unstopped path survives), graph and tape."""
    a = tf.Variable(1.0)
    b = tf.Variable(1.0)

    @tf.function
    def grads():
        c = tf.add(a, b)
        c_stoped = tf.stop_gradient(c)
        d = tf.add(a, b)
        e = tf.add(c_stoped, d)
        return tf.gradients(e, xs=[a, b])
    with tf.GradientTape() as t:
        c = tf.add(a, b)
        e = tf.add(tf.stop_gradient(c), tf.add(a, b))
    return grads(), t.gradient(e, [a, b])


@parity(expected=([A(1.0), A(1.0)], [A(3.0), A(1.0)]))
def test_seed2_stop_gradients_argument(tf):
    """Seed 2: tf.gradients(a + b, [a, b], stop_gradients=[a, b]) gives partials [1, 1]; without it [3, 1]."""
    @tf.function
    def grads():
        a = tf.constant(0.0)
        b = 2 * a
        return (tf.gradients(a + b, [a, b], stop_gradients=[a, b]), tf.gradients(a + b, [a, b]))
    g1, g2 = grads()
    return list(g1), list(g2)


@parity(expected=[A(1.0), A(1.0)])
def test_seed2_stop_gradient_equivalent(tf):
    """Seed 2: a = stop_gradient(0.), b = stop_gradient(2a); tf.gradients(a + b, [a, b]) == [1, 1]."""
    @tf.function
    def grads():
        a = tf.stop_gradient(tf.constant(0.0))
        b = tf.stop_gradient(2 * a)
        return tf.gradients(a + b, [a, b])
    return grads()


@parity(expected=([None], [A([[0.0, 0.0]])], "TypeError"))
def test_seed2_gradients_unconnected(tf):
    """Seed 2: tf.gradients([b], [a]) for unrelated a, b: [None]; 'zero' gives [[0, 0]]; the post's typo kwarg is a TypeError."""
    @tf.function
    def grads():
        a = tf.constant([[1.0, 1.0]])
        b = tf.constant([[1.0], [1.0], [1.0]])
        g1 = tf.gradients([b], [a], unconnected_gradients="none")
        g2 = tf.gradients([b], [a], unconnected_gradients="zero")
        return g1, g2
    g1, g2 = grads()

    def typo():
        a = tf.constant([[1.0, 1.0]])
        return tf.function(lambda: tf.gradients([a * 1.0], [a], unnconnected_gradients="none"))()
    return list(g1), list(g2), raises(typo).name


@parity(expected=(A(2.0), A(1.4), True))
def test_seed2_apply_gradients_skips_none(tf):
    """Seed 2 (train_op): apply_gradients with a None gradient skips that variable (with a warning), updates the other."""
    w1 = tf.Variable(2.0)
    w2 = tf.Variable(2.0)
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    with tf.GradientTape() as t:
        a = tf.multiply(w1, 3.0)
        b = tf.multiply(tf.stop_gradient(a), w2)
    gradients = t.gradient(b, [w1, w2])
    _, w = warned(opt.apply_gradients, zip(gradients, [w1, w2]))
    return w1.read_value(), w2.read_value(), w


@parity(expected=[A(0.0)])
def test_seed2_higher_order_gradients(tf):
    """Seed 2: third derivative of pow(a, 2) by chained tf.gradients in a tf.function is [0.0] (not None)."""
    @tf.function
    def grads():
        a = tf.constant(1.0)
        b = tf.pow(a, 2)
        grad = tf.gradients(ys=b, xs=a)
        grad_2 = tf.gradients(ys=grad[0], xs=a)
        return tf.gradients(ys=grad_2[0], xs=a)
    return grads()


@parity(expected=(A(2.0), A(2.0), A(0.0)))
def test_seed2_higher_order_tape(tf):
    """Seed 2's higher-order example with nested tapes: d/da, d2/da2, d3/da3 of pow(a, 2) at 1 are 2, 2, 0."""
    a = tf.constant(1.0)
    with tf.GradientTape() as t3:
        t3.watch(a)
        with tf.GradientTape() as t2:
            t2.watch(a)
            with tf.GradientTape() as t1:
                t1.watch(a)
                b = tf.pow(a, 2)
            g1 = t1.gradient(b, a)
        g2 = t2.gradient(g1, a)
    g3 = t3.gradient(g2, a, unconnected_gradients="zero")
    return g1, g2, g3


# --------------------------------------------------------------------------
# seed 3: why the loss is inside the tape and gradient() outside
# --------------------------------------------------------------------------

@parity(rtol=1e-4, atol=1e-5)
def test_seed3_linear_regression_training(tf):
    """Seed 3: 300 steps of manual SGD (assign_sub) on m*x + b with squared error; final m, b and loss."""
    x_train = tf.constant(np.linspace(-1.0, 1.0, 20, dtype=np.float32))
    y_train = tf.constant((3.0 * np.linspace(-1.0, 1.0, 20) + 0.5 + 0.1 * np.sin(np.arange(20))).astype(np.float32))
    m = tf.Variable(0.0)
    b = tf.Variable(0.0)

    def predict_y_value(x):
        return m * x + b

    def squared_error(y_pred, y_true):
        return tf.reduce_mean(tf.square(y_pred - y_true))

    learning_rate = 0.05
    for _ in range(300):
        with tf.GradientTape() as tape:
            predictions = predict_y_value(x_train)
            loss = squared_error(predictions, y_train)
        gradients = tape.gradient(loss, [m, b])
        m.assign_sub(gradients[0] * learning_rate)
        b.assign_sub(gradients[1] * learning_rate)
    return m.read_value(), b.read_value(), loss


@parity
def test_seed3_two_models_manual_sgd(tf):
    """Seed 3: preprocessing outside the tape, two models trained on their own tapes (manual SGD)."""
    inputs = tf.constant([[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]])
    labels = tf.constant([[1.0], [0.0], [1.0]])
    w_a = tf.Variable([[0.1], [-0.2]])
    w_b = tf.Variable([[0.3]])
    inputs_preprocessed = inputs * 0.5 + 1.0
    with tf.GradientTape() as tape:
        pred = tf.sigmoid(inputs_preprocessed @ w_a)
        loss = tf.reduce_mean(tf.square(pred - labels))
    grads = tape.gradient(loss, [w_a])
    for g, v in zip(grads, [w_a]):
        v.assign_sub(0.1 * g)
    next_step_inputs = pred * 2.0
    with tf.GradientTape() as tape:
        pred2 = tf.tanh(next_step_inputs @ w_b)
        another_loss = tf.reduce_mean(tf.square(pred2 - labels))
    grads2 = tape.gradient(another_loss, [w_b, w_a])
    return loss, grads, another_loss, grads2, w_a.read_value()


@parity
def test_seed3_two_models_optimizer(tf):
    """Seed 3: the same two-model example with optimizer.apply_gradients(zip(grads, vars))."""
    inputs = tf.constant([[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]])
    labels = tf.constant([[1.0], [0.0], [1.0]])
    w_a = tf.Variable([[0.1], [-0.2]])
    w_b = tf.Variable([[0.3]])
    optimizer = tf.keras.optimizers.legacy.SGD(0.1)
    with tf.GradientTape() as tape:
        pred = tf.sigmoid((inputs * 0.5 + 1.0) @ w_a)
        loss = tf.reduce_mean(tf.square(pred - labels))
    optimizer.apply_gradients(zip(tape.gradient(loss, [w_a]), [w_a]))
    with tf.GradientTape() as tape:
        pred2 = tf.tanh((pred * 2.0) @ w_b)
        another_loss = tf.reduce_mean(tf.square(pred2 - labels))
    optimizer.apply_gradients(zip(tape.gradient(another_loss, [w_b]), [w_b]))
    return w_a.read_value(), w_b.read_value()


@parity(expected=(A(6.0), A(6.0)))
def test_seed3_note2_new_tape_vs_reset(tf):
    """Seed 3 note 2: a second `with GradientTape() as t` and t.reset() both differentiate only other_loss_fn."""
    w = tf.Variable(1.0)

    def loss_fn():
        return w * w * 100.0

    def other_loss_fn():
        return w * 6.0

    with tf.GradientTape() as t:
        loss = loss_fn()
    with tf.GradientTape() as t:
        loss += other_loss_fn()
    g1 = t.gradient(loss, w)
    with tf.GradientTape() as t:
        loss = loss_fn()
        t.reset()
        loss += other_loss_fn()
    return g1, t.gradient(loss, w)


# --------------------------------------------------------------------------
# seed 4: gradient_override_map / RegisterGradient (graph only in TF)
# --------------------------------------------------------------------------

@parity(expected=[A([1.0, 1.0, 1.0])])
def test_seed4_override_floor_identity(tf):
    """Seed 4: with G.gradient_override_map({'Floor': 'Identity'}), tf.gradients of reduce_mean(floor(x))*3 is 1 each."""
    x = tf.Variable([0.5, 1.7, -2.2])

    @tf.function
    def grads():
        G = tf.compat.v1.get_default_graph()
        with G.gradient_override_map({"Floor": "Identity"}):
            y = tf.floor(x)
        return tf.gradients(tf.reduce_mean(y) * 3.0, x)
    return grads()


def _register_times5(tf):
    name = f"CustomGradSeed4_{next(_names)}"

    @tf.RegisterGradient(name)
    def _const_mul_grad(unused_op, grad):
        return 5.0 * grad
    return name


@parity(expected=[A([5.0, 5.0])])
def test_seed4_register_gradient_custom_grad(tf):
    """Seed 4: RegisterGradient('CustomGrad') returning 5*grad, mapped onto Identity: tf.gradients gives 5."""
    name = _register_times5(tf)
    inp = tf.Variable([1.0, 2.0])

    @tf.function
    def grads():
        g = tf.compat.v1.get_default_graph()
        with g.gradient_override_map({"Identity": name}):
            output = tf.identity(inp, name="Identity")
        return tf.gradients(output, inp)
    return grads()


@parity(expected=A([1.0, 1.0]), tapejax_expected=A([5.0, 5.0]),
        deliberate="DESIGN.md: tapejax honours gradient_override_map in every gradient API; TF's GradientTape ignores it")
def test_seed4_tape_honours_override(tf):
    """Seed 4 mapping under a GradientTape inside tf.function: TF ignores the override (1), tapejax honours it (5)."""
    name = _register_times5(tf)
    inp = tf.Variable([1.0, 2.0])

    @tf.function
    def grads():
        with tf.GradientTape() as t:
            g = tf.compat.v1.get_default_graph()
            with g.gradient_override_map({"Identity": name}):
                output = tf.identity(inp)
        return t.gradient(output, inp)
    return grads()
