"""Round thirteen (a) of realistic user programs, each run under real TensorFlow 2.21 and under tapejax:
the code cells of TensorFlow's own core guides as a user copies them, several cells to a program.
"Introduction to gradients and automatic differentiation" (dict and Keras-layer sources, what the tape
watches, non-scalar and dict targets, a Variable as the target of a branch, the ways of getting None
and zeros instead); "Advanced automatic differentiation" (stop_recording / reset / stop_gradient,
custom gradients saved with and without ``experimental_custom_gradients``, two tapes, input-gradient
regularisation, Jacobians of a layer's kernel and through batch normalisation, a Newton step from the
Hessian of a small MLP); "Introduction to graphs and tf.function" and "Better performance with
tf.function" (polymorphism, concrete functions with bound Python arguments, signatures refusing
inputs, Python side effects and ``tf.py_function``, globals and Python objects frozen at trace time,
Variables made on the first call, optimizers shared between functions, a ``dynamic_rnn`` with a
TensorArray (also under a tape), fizzbuzz, non-strict execution, a Python list in a staged loop,
nested functions); "Introduction to Variables" (attributes, assign results, dtype rules); "Basic
training loops" (the ``tf.Module`` and Keras linear models, fitted, saved and evaluated);
"Introduction to modules, layers, and models" (submodules, name scopes, checkpoints, saved Modules,
Keras layers making tf.Variables in ``build`` in subclassed and functional models). Random draws of
the guides are replaced by seeded NumPy data.
"""
import os
import tempfile

import numpy as np

from .harness import A, Raised, Returned, init_array, parity, raises, warned, xfail_on_tapejax

TOL = dict(rtol=2e-5, atol=2e-6)


def _normal(shape, seed):
    """The guides' ``tf.random.normal(shape)``, drawn by NumPy."""
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def _printed(tf, program):
    """Run ``program(path)`` and return what tf.print wrote to ``file://path`` (and its result)."""
    fd, path = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    try:
        result = program("file://" + path)
        with open(path) as fh:
            return fh.read(), result
    finally:
        os.remove(path)


def _dense(tf, layer, n_in, seed):
    """Build a Keras Dense ``layer`` on ``n_in`` features and set its weights from NumPy."""
    layer.build((None, n_in))
    k, b = layer.get_weights()
    layer.set_weights([init_array(k.shape, seed), init_array(b.shape, seed + 50, 0.1)])
    return layer


# ---------------------------------------------------------------------------
# Introduction to gradients and automatic differentiation
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_autodiff_guide_gradients_of_a_dense_layer_and_a_dict_of_variables(tf):
    """The guide's first cells: d(y**2)/dx at 3; the gradient of a loss of ``x @ w + b`` as a list and as
    a dict of the Variables; then a Dense(2, relu) layer's loss differentiated for its
    ``trainable_variables`` (the kernel and bias in that order)."""
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x ** 2
    dy_dx = tape.gradient(y, x)
    w = tf.Variable(init_array((3, 2), 1), name="w")
    b = tf.Variable(tf.zeros(2, dtype=tf.float32), name="b")
    xs = [[1.0, 2.0, 3.0]]
    with tf.GradientTape(persistent=True) as tape:
        y = xs @ w + b
        loss = tf.reduce_mean(y ** 2)
    dl_dw, dl_db = tape.gradient(loss, [w, b])
    grads = tape.gradient(loss, {"w": w, "b": b})
    layer = _dense(tf, tf.keras.layers.Dense(2, activation="relu"), 3, 4)
    with tf.GradientTape() as tape:
        y = layer(tf.constant(xs))
        loss = tf.reduce_mean(y ** 2)
    lgrads = tape.gradient(loss, layer.trainable_variables)
    return dy_dx, dl_dw, dl_db, grads, [g.shape.as_list() for g in lgrads], lgrads


@parity(modes=True, **TOL)
def test_autodiff_guide_what_the_tape_watches(tf):
    """``sin(x0) + x1 + x2 + x3`` over a trainable Variable, a non-trainable one, a Variable plus one (a
    tensor) and a constant: only x0 gets a gradient and is the one watched; with
    ``watch_accessed_variables=False`` and ``watch(x1)`` only x1 does (a dict of sources); an
    intermediate of a persistent tape is a source too."""
    x0 = tf.Variable(3.0, name="x0")
    x1 = tf.Variable(3.0, name="x1", trainable=False)
    x2 = tf.Variable(2.0, name="x2") + 1.0
    x3 = tf.constant(3.0, name="x3")
    with tf.GradientTape() as tape:
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2)
    grad = tape.gradient(y, [x0, x1, x2, x3])
    watched = [var.name for var in tape.watched_variables()]
    a0, a1 = tf.Variable(0.0), tf.Variable(10.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a1)
        y0 = tf.math.sin(a0)
        y1 = tf.nn.softplus(a1)
        ys = y0 + y1
        ys = tf.reduce_sum(ys)
    only = tape.gradient(ys, {"x0": a0, "x1": a1})
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * y
    out = (tape.gradient(z, x), tape.gradient(y, x), tape.gradient(z, y))
    del tape
    return grad, watched, only, out


@parity(modes=True, **TOL)
def test_autodiff_guide_non_scalar_dict_targets_and_a_branch_returning_a_variable(tf):
    """A dict of targets sums their gradients (3.75), ``x * [3., 4.]`` gives 7, the elementwise
    sigmoid derivative over ``tf.linspace``; a Python ``if`` on a watched tensor makes the result the
    Variable v0 itself: d(v0)/d(v0) is 1, v1 and the watched x get None."""
    x = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        y0 = x ** 2
        y1 = 1 / x
        y2 = x * [3.0, 4.0]
    d = (tape.gradient({"y0": y0, "y1": y1}, x), tape.gradient(y2, x), tape.gradient([y0, y1], x))
    xs = tf.linspace(-10.0, 10.0, 200 + 1)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = tf.nn.sigmoid(xs)
    dy_dx = tape.gradient(y, xs)
    c = tf.constant(1.0)
    v0, v1 = tf.Variable(2.0), tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(c)
        if c > 0.0:
            result = v0
        else:
            result = v1 ** 2
    dv0, dv1 = tape.gradient(result, [v0, v1])
    return d, dy_dx[::25], xs.dtype.name, dv0, dv1, tape.gradient(result, c)


@parity(modes=True, **TOL)
def test_autodiff_guide_getting_none_four_ways_then_zeros(tf):
    """The guide's None cases: a Variable replaced by ``x = x + 1`` (1.0 then None), an int watched tensor
    (None and a WARNING), a NumPy step inside the tape, a stateful ``assign_add``; then
    ``unconnected_gradients=ZERO`` gives zeros of the source's shape."""
    x = tf.Variable(2.0)
    firsts = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            y = x + 1
        firsts.append((isinstance(x, tf.Variable), tape.gradient(y, x)))
        x = x + 1
    xi = tf.constant(10)

    def int_grad():
        with tf.GradientTape() as g:
            g.watch(xi)
            y = xi * xi
        return g.gradient(y, xi)

    xn = tf.Variable([[1.0, 2.0], [3.0, 4.0]], dtype=tf.float32)
    with tf.GradientTape() as tape:
        x2 = xn ** 2
        y = np.mean(x2, axis=0)
        y = tf.reduce_mean(y, axis=0)
    numpy_grad = tape.gradient(y, xn)
    s0, s1 = tf.Variable(3.0), tf.Variable(0.0)
    with tf.GradientTape(persistent=True) as tape:
        s1.assign_add(s0)
        y = s1 ** 2
    state = (tape.gradient(y, s0), tape.gradient(y, s1))
    zx, zy = tf.Variable([2.0, 2.0]), tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        z = zy ** 2
    zeros = (tape.gradient(z, zx), tape.gradient(z, zx, unconnected_gradients=tf.UnconnectedGradients.ZERO),
             tape.gradient(z, [zx, zy], unconnected_gradients="zero"))
    return firsts, warned(int_grad), numpy_grad, state, zeros


_CONTRAST = (A([[[0.5, 0.0, 0.0]]]), Returned([A(np.ones((1, 1, 3))), A(0.0)]),
             [A(np.ones((1, 1, 3))), A(3.0)])


@parity(modes=True, tapejax_expected=_CONTRAST, deliberate="tapejax/ops/image_color.py: AdjustContrastv2 has "
        "JAX's exact gradient where TF registers none (LookupError), a documented improvement", **TOL)
def test_autodiff_guide_no_gradient_registered_is_a_lookup_error(tf):
    """``tf.image.adjust_contrast`` has no registered gradient in TF: the tape's gradient raises
    LookupError (tapejax deliberately gives the exact one: ones for a one-pixel image, 0 for the
    factor); ``tf.image.adjust_brightness`` (an add) differentiates."""
    image = tf.Variable([[[0.5, 0.0, 0.0]]])
    delta = tf.Variable(0.1)
    with tf.GradientTape(persistent=True) as tape:
        new_image = tf.image.adjust_contrast(image, delta)
        bright = tf.image.adjust_brightness(image, delta)
    return new_image, raises(tape.gradient, new_image, [image, delta]), tape.gradient(bright, [image, delta])


# ---------------------------------------------------------------------------
# Advanced automatic differentiation
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_advanced_guide_stop_recording_reset_and_stop_gradient_as_dicts(tf):
    """``x*x + y*y`` with y's square under ``stop_recording``, after ``reset``, under ``stop_gradient``:
    each gives dz/dx 4 and dz/dy None (dict sources); two tapes on x0 and x1 each see their own
    input (cos 0 = 1 and sigmoid' 0 = 0.25)."""
    x, y = tf.Variable(2.0), tf.Variable(3.0)
    out = []
    with tf.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq
    out.append(t.gradient(z, {"x": x, "y": y}))
    for reset in (True, False):
        with tf.GradientTape() as t:
            y_sq = y * y
            if reset:
                t.reset()
            z = x * x + y_sq
        out.append(t.gradient(z, {"x": x, "y": y}))
    with tf.GradientTape() as t:
        y_sq = y ** 2
        z = x ** 2 + tf.stop_gradient(y_sq)
    out.append(t.gradient(z, {"x": x, "y": y}))
    x0, x1 = tf.constant(0.0), tf.constant(0.0)
    with tf.GradientTape() as tape0, tf.GradientTape() as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        y0 = tf.math.sin(x0)
        y1 = tf.nn.sigmoid(x1)
        ys = tf.reduce_sum(y0 + y1)
    return out, tape0.gradient(ys, x0), tape1.gradient(ys, x1)


@parity(**TOL)
def test_advanced_guide_custom_gradient_saved_with_and_without_experimental_custom_gradients(tf):
    """The guide's ``clip_gradients`` (backward ``clip_by_norm(dy, 0.5)``) behind a Module's signature
    function: d(v*v)/dv is 2 eagerly and 2 after a load saved with ``experimental_custom_gradients=True``;
    saved with it False, TF 2.21 warns at load but, in the process that registered the gradient, still
    gives 2 (the guide's 4 is for a fresh process)."""
    @tf.custom_gradient
    def clip_gradients(y):
        def backward(dy):
            return tf.clip_by_norm(dy, 0.5)
        return y, backward

    class MyModule(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([])])
        def call_custom_grad(self, x):
            return clip_gradients(x)

    model = MyModule()
    v = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        output = model.call_custom_grad(v * v)
    out = [output, tape.gradient(output, v)]
    for keep in (True, False):
        d = os.path.join(tempfile.mkdtemp(), "saved_model")
        tf.saved_model.save(model, d, options=tf.saved_model.SaveOptions(experimental_custom_gradients=keep))
        loaded = tf.saved_model.load(d)
        with tf.GradientTape() as tape:
            output = loaded.call_custom_grad(v * v)
        out += [output, tape.gradient(output, v)]
    return out


@parity(modes=True, **TOL)
def test_advanced_guide_second_derivative_and_input_gradient_regularisation_step(tf):
    """d2(x**3)/dx2 at 1 is 6 by nested tapes; the guide's input-gradient regulariser: the norm of
    d(sum(layer(x)**2))/dx differentiated for the Dense(10, relu) layer's weights, then two SGD steps
    on it shrink the norm."""
    x = tf.Variable(1.0)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = x * x * x
        dy_dx = t1.gradient(y, x)
    d2y_dx2 = t2.gradient(dy_dx, x)
    xs = tf.constant(_normal([7, 5], 3))
    layer = _dense(tf, tf.keras.layers.Dense(10, activation=tf.nn.relu), 5, 6)
    opt = tf.keras.optimizers.SGD(0.05)
    mags = []
    for _ in range(3):
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                t1.watch(xs)
                out = tf.reduce_sum(layer(xs) ** 2)
            g1 = t1.gradient(out, xs)
            g1_mag = tf.norm(g1)
        dg1_mag = t2.gradient(g1_mag, layer.trainable_variables)
        mags.append(g1_mag)
        opt.apply_gradients(zip(dg1_mag, layer.trainable_variables))
    return dy_dx, d2y_dx2, g1.shape.as_list(), [g.shape.as_list() for g in dg1_mag], mags, layer.get_weights()


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_advanced_guide_jacobian_of_a_kernel_agrees_with_the_gradient(tf):
    """The sigmoid's Jacobian over a linspace is diagonal; a Dense(10, relu)'s output Jacobian for its
    kernel has shape (7, 10, 5, 10) and summed over the output axes equals the tape's gradient."""
    x = tf.linspace(-10.0, 10.0, 20 + 1)
    delta = tf.Variable(0.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.nn.sigmoid(x + delta)
    dy_dx = tape.jacobian(y, x)
    diag = tf.linalg.diag_part(dy_dx)
    off = tf.reduce_sum(tf.abs(dy_dx)) - tf.reduce_sum(diag)
    dy_dd = tape.jacobian(y, delta)
    xs = tf.constant(_normal([7, 5], 8))
    layer = _dense(tf, tf.keras.layers.Dense(10, activation=tf.nn.relu), 5, 9)
    with tf.GradientTape(persistent=True) as tape:
        y = layer(xs)
    j = tape.jacobian(y, layer.kernel)
    g = tape.gradient(y, layer.kernel)
    j_sum = tf.reduce_sum(j, axis=[0, 1])
    delta = tf.reduce_max(abs(g - j_sum)).numpy()
    return dy_dx.shape.as_list(), diag[::4], off, dy_dd[::4], j.shape.as_list(), g, bool(delta < 1e-3)


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_advanced_guide_batch_jacobian_through_dense_and_batch_norm(tf):
    """Dense(8, elu), BatchNormalization in training and Dense(6, elu) under a persistent tape watching
    only x: the full Jacobian is (7, 6, 7, 5), its einsum diagonal matches ``batch_jacobian``
    without BN; with BN the examples mix so the off-diagonal blocks are nonzero; BN's moving mean moved."""
    xs = tf.constant(_normal([7, 5], 10))
    layer1 = _dense(tf, tf.keras.layers.Dense(8, activation=tf.nn.elu), 5, 11)
    layer2 = _dense(tf, tf.keras.layers.Dense(6, activation=tf.nn.elu), 8, 12)
    bn = tf.keras.layers.BatchNormalization()
    out = []
    for use_bn in (False, True):
        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
            tape.watch(xs)
            y = layer1(xs)
            if use_bn:
                y = bn(y, training=True)
            y = layer2(y)
        j = tape.jacobian(y, xs)
        j_select = tf.einsum("bxby->bxy", j)
        jb = tape.batch_jacobian(y, xs)
        off = tf.reduce_sum(tf.abs(j)) - tf.reduce_sum(tf.abs(j_select))
        out.append((j.shape.as_list(), tf.reduce_sum(j, axis=2).shape.as_list(), jb, j_select,
                    bool(off.numpy() > 1e-4), tape.watched_variables()))
    return out, bn.moving_mean


@parity(modes=True, rtol=2e-3, atol=2e-4)
def test_advanced_guide_newton_step_from_the_hessian_of_a_small_mlp(tf):
    """The guide's Hessian: the Jacobian of layer1's kernel gradient of ``mean(layer2(layer1(x))**2)``
    reshaped to a matrix (``tf.reduce_prod(kernel.shape)`` parameters), one Newton step by
    ``tf.linalg.solve(h + eps*I, g)`` assigned into the kernel; the loss before and after."""
    xs = tf.constant(_normal([7, 5], 13))
    layer1 = _dense(tf, tf.keras.layers.Dense(4, activation=tf.nn.elu), 5, 14)
    layer2 = _dense(tf, tf.keras.layers.Dense(3, activation=tf.nn.elu), 4, 15)

    def loss_of():
        return tf.reduce_mean(layer2(layer1(xs)) ** 2)

    losses = []
    for _ in range(2):
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                loss = loss_of()
            g = t1.gradient(loss, layer1.kernel)
        h = t2.jacobian(g, layer1.kernel)
        n_params = tf.reduce_prod(layer1.kernel.shape)
        g_vec = tf.reshape(g, [n_params, 1])
        h_mat = tf.reshape(h, [n_params, n_params])
        eps = 1e-3
        eye_eps = tf.eye(h_mat.shape[0]) * eps
        update = tf.linalg.solve(h_mat + eye_eps, g_vec)
        _ = layer1.kernel.assign_sub(tf.reshape(update, layer1.kernel.shape))
        losses.append(loss)
    losses.append(loss_of())
    return int(n_params), h.shape.as_list(), h_mat[:3, :3], losses


# ---------------------------------------------------------------------------
# Introduction to graphs and tf.function; Better performance with tf.function
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_function_guide_polymorphism_of_my_relu_and_the_tracing_count(tf):
    """``my_relu`` on a scalar, a Python int list (converted to float by ``tf.maximum(0., x)``) and a
    vector: three traces, repeated calls reuse them; ``get_concrete_function`` of a known input makes
    no trace; the tracing count after each call."""
    traced = []

    @tf.function
    def my_relu(x):
        traced.append(type(x).__name__ if isinstance(x, list) else x.shape.as_list())
        return tf.maximum(0.0, x)

    out = [my_relu(tf.constant(5.5)), my_relu([1, -1]), my_relu(tf.constant([3.0, -3.0]))]
    counts = [my_relu.experimental_get_tracing_count()]
    out += [my_relu(tf.constant(-2.5)), my_relu([1, -1]), my_relu(tf.constant([-1.0, 1.0]))]
    counts.append(my_relu.experimental_get_tracing_count())
    cf = my_relu.get_concrete_function(tf.constant(3.0))
    out.append(cf(tf.constant(-7.0)))
    counts.append(my_relu.experimental_get_tracing_count())
    out.append(my_relu([2, -2]))
    counts.append(my_relu.experimental_get_tracing_count())
    return out, traced, counts


@parity(**TOL)
def test_function_guide_concrete_functions_of_double_and_pow(tf):
    """``double`` traced for int and float tensors (the guide's string case needs string tensors, which
    tapejax does not have); its float concrete function called positionally and by keyword, one from a
    TensorSpec; an int tensor to it is refused; ``pow`` with b bound to 2 squares and refuses ``b=3``
    with TypeError (its spec has a rank: tapejax compiles no unknown-rank TensorSpec)."""
    traced = []

    @tf.function
    def double(a):
        traced.append(a.dtype.name)
        return a + a

    out = [double(tf.constant(1)), double(tf.constant(1.1)), double(tf.constant(2)), double(tf.constant(2.5))]
    double_floats = double.get_concrete_function(tf.constant(1.0))
    out += [double_floats(tf.constant(3.0)), double_floats(a=tf.constant(4.0))]
    from_spec = double.get_concrete_function(tf.TensorSpec(shape=[], dtype=tf.float32))
    out.append(from_spec(tf.constant(5.0)))
    out.append(raises(double_floats, tf.constant(1), ok=("TypeError", "InvalidArgumentError")))

    @tf.function
    def pow(a, b):
        return a ** b

    square = pow.get_concrete_function(a=tf.TensorSpec([], tf.float32), b=2)
    out += [square(tf.constant(10.0)), raises(square, tf.constant(10.0), b=3)]
    return out, traced, double.experimental_get_tracing_count()


@parity(**TOL)
def test_function_guide_collatz_signature_refuses_rank_and_dtype_then_reduce_retracing(tf):
    """``next_collatz`` under ``input_signature=[TensorSpec([None], int32)]`` runs on two lengths with one
    trace and refuses a matrix and a float vector with TypeError; ``g`` with reduce_retracing traces
    for [3], then once more for an unknown length."""
    traced = []

    @tf.function(input_signature=(tf.TensorSpec(shape=[None], dtype=tf.int32),))
    def next_collatz(x):
        traced.append(x.shape.as_list())
        return tf.where(x % 2 == 0, x // 2, 3 * x + 1)

    out = [next_collatz(tf.constant([1, 2])), next_collatz(tf.constant([5, 6, 7, 8]))]
    out.append(raises(next_collatz, tf.constant([[1, 2], [3, 4]])))
    out.append(raises(next_collatz, tf.constant([1.0, 2.0])))
    g_traced = []

    @tf.function(reduce_retracing=True)
    def g(x):
        g_traced.append(x.shape.as_list())
        return x

    out += [g(tf.constant([1, 2, 3])), g(tf.constant([1, 2, 3, 4, 5])), g(tf.constant([1, 2]))]
    return out, traced, g_traced


@parity(**TOL)
def test_function_guide_side_effects_print_tf_print_and_py_function(tf):
    """``f(1); f(1); f(2)``: Python's print traces twice, tf.print prints three times; a Python list
    append runs once for three equal calls but a ``tf.py_function`` three times, receiving a tensor;
    ``run_functions_eagerly(True)`` runs the Python each call and False restores tracing."""
    traces, external, py_list = [], [], []

    def program(out):
        @tf.function
        def f(x):
            traces.append(x)
            tf.print("Executed with", x, output_stream=out)

        f(1)
        f(1)
        f(2)

        @tf.function
        def side_effect(x):
            external.append(x)

        for _ in range(3):
            side_effect(1)

        def py_side_effect(x):
            py_list.append(x)

        @tf.function
        def g(x):
            tf.py_function(py_side_effect, inp=[x], Tout=[])

        for _ in range(3):
            g(1)

        mse_calls = []

        @tf.function
        def get_mse(y_true, y_pred):
            mse_calls.append(1)
            return tf.reduce_mean(tf.pow(y_true - y_pred, 2))

        yt, yp = tf.constant([1.0, 2.0, 4.0]), tf.constant([2.0, 2.0, 1.0])
        errs = [get_mse(yt, yp) for _ in range(3)]
        tf.config.run_functions_eagerly(True)
        try:
            errs += [get_mse(yt, yp) for _ in range(3)]
        finally:
            tf.config.run_functions_eagerly(False)
        errs += [get_mse(yt, yp)]
        return errs, len(mse_calls)

    printed, (errs, n_mse) = _printed(tf, program)
    return printed, traces, external, [(type(v).__name__ == "int", int(v.numpy())) for v in py_list], errs, n_mse


@parity(modes=True, **TOL)
def test_function_guide_globals_and_python_objects_are_frozen_at_trace_time(tf):
    """``buggy_add`` keeps the global's trace-time value 1 while ``recommended_add(foo)`` retraces to
    101; ``evaluate(model, x)`` keeps a mutated Module's trace-time bias (20) until a new Module is
    passed (25); a Python iterator argument is read once at tracing (Value: 1 three times) while a
    dataset iterator advances."""
    foo = [1]
    g = {"foo": 1}

    @tf.function
    def buggy_add():
        return 1 + g["foo"]

    @tf.function
    def recommended_add(foo):
        return 1 + foo

    out = [buggy_add(), recommended_add(foo[0])]
    g["foo"] = 100
    out += [buggy_add(), recommended_add(g["foo"])]

    class SimpleModel(tf.Module):
        def __init__(self):
            self.bias = 0.0
            self.weight = 2.0

    @tf.function
    def evaluate(model, x):
        return model.weight * x + model.bias

    simple_model = SimpleModel()
    x = tf.constant(10.0)
    out.append(evaluate(simple_model, x))
    simple_model.bias += 5.0
    out.append(evaluate(simple_model, x))
    new_model = SimpleModel()
    new_model.bias += 5.0
    out.append(evaluate(new_model, x))

    def program(path):
        @tf.function
        def consume_next(iterator):
            tf.print("Value:", next(iterator), output_stream=path)

        iterator = iter([1, 2, 3])
        for _ in range(3):
            consume_next(iterator)
        iterator = iter(tf.data.Dataset.from_tensor_slices([1, 2, 3]))
        for _ in range(3):
            consume_next(iterator)

    return out, _printed(tf, program)[0]


@parity(modes=True, **TOL)
def test_function_guide_variables_made_on_the_first_call_and_assigns_traced_once(tf):
    """``Count`` makes its Variable on the first call inside ``__call__`` (1, 2, 3); a Module whose
    ``if self.counter == 0`` branch ran at tracing still adds each call (1, 2, 3); a function making a
    Variable on every call raises ValueError; closures over two Variables assign in program order (10)."""
    class Count(tf.Module):
        def __init__(self):
            self.count = None

        @tf.function
        def __call__(self):
            if self.count is None:
                self.count = tf.Variable(0)
            return self.count.assign_add(1)

    c = Count()
    counts = [c() for _ in range(3)]

    class Model(tf.Module):
        def __init__(self):
            self.v = tf.Variable(0)
            self.counter = 0

        @tf.function
        def __call__(self):
            if self.counter == 0:
                self.counter += 1
                self.v.assign_add(1)
            return self.v

    m = Model()
    ms = [m().numpy() for _ in range(3)]

    @tf.function
    def make(x):
        v = tf.Variable(1.0)
        v.assign_add(x)
        return v

    a, b = tf.Variable(1.0), tf.Variable(2.0)

    @tf.function
    def f(x, y):
        a.assign(y * b)
        b.assign_add(x * a)
        return a + b

    return counts, ms, m.counter, raises(make, 1.0), f(1.0, 2.0), a, b


@parity(**TOL)
def test_function_guide_one_train_step_function_with_two_keras_optimizers(tf):
    """The guide's ``train_step(w, x, y, optimizer)``: a second optimizer passed to the same tf.function
    makes its slot Variables on a non-first trace and raises ValueError; two ``tf.function`` wrappers,
    one per optimizer (a fresh second one), train w."""
    def train_step(w, x, y, optimizer):
        with tf.GradientTape() as tape:
            L = tf.reduce_sum(tf.square(w * x - y))
        gradients = tape.gradient(L, [w])
        optimizer.apply_gradients(zip(gradients, [w]))
        return L

    opt1 = tf.keras.optimizers.Adam(learning_rate=1e-2)
    opt2 = tf.keras.optimizers.Adam(learning_rate=1e-3)
    w = tf.Variable(2.0)
    x, y = tf.constant([-1.0]), tf.constant([2.0])
    shared = tf.function(train_step)
    out = [shared(w, x, y, opt1), raises(shared, w, x, y, opt2)]
    w1 = w.numpy()
    opt3 = tf.keras.optimizers.Adam(learning_rate=1e-3)
    step1, step2 = tf.function(train_step), tf.function(train_step)
    for _ in range(3):
        out += [step1(w, x, y, opt1), step2(w, x, y, opt3)]
    return out, w1, w, int(opt1.iterations.numpy()), int(opt3.iterations.numpy())


@parity(modes=True, **TOL)
def test_performance_guide_dynamic_rnn_with_a_tensor_array_and_a_python_step_argument(tf):
    """``dynamic_rnn(rnn_step, input_data, initial_state)``: a Python function argument, a transpose to
    time-major, ``for i in tf.range(max_seq_len)`` writing a TensorArray, stacked and transposed back;
    a second step function retraces; the gradient of the sum for the input (under the tape: no trace)."""
    traced = []

    def rnn_step(inp, state):
        return inp + state

    def tanh_step(inp, state):
        return tf.tanh(inp + 0.5 * state)

    @tf.function
    def dynamic_rnn(rnn_step, input_data, initial_state):
        traced.append(rnn_step.__name__)
        input_data = tf.transpose(input_data, [1, 0, 2])
        max_seq_len = input_data.shape[0]
        states = tf.TensorArray(tf.float32, size=max_seq_len)
        state = initial_state
        for i in tf.range(max_seq_len):
            state = rnn_step(input_data[i], state)
            states = states.write(i, state)
        return tf.transpose(states.stack(), [1, 0, 2])

    data = tf.constant(np.random.RandomState(16).uniform(size=[2, 3, 4]).astype(np.float32))
    init = tf.zeros([2, 4])
    out = [dynamic_rnn(rnn_step, data, init), dynamic_rnn(tanh_step, data, init), dynamic_rnn(rnn_step, data, init)]
    with tf.GradientTape() as tape:
        tape.watch(data)
        total = tf.reduce_sum(dynamic_rnn(tanh_step, data, init) ** 2)
    return out, traced, tape.gradient(total, data)


@parity(modes=True, **TOL)
def test_performance_guide_dynamic_rnn_under_a_tape_reuses_its_trace(tf):
    """The guide's ``dynamic_rnn`` (a TensorArray written at ``tf.range``'s index) called under a tape
    after a plain call: TF runs no Python of the body again (one trace)."""
    traced = []

    @tf.function
    def dynamic_rnn(input_data, initial_state):
        traced.append(1)
        input_data = tf.transpose(input_data, [1, 0, 2])
        states = tf.TensorArray(tf.float32, size=input_data.shape[0])
        state = initial_state
        for i in tf.range(input_data.shape[0]):
            state = tf.tanh(input_data[i] + 0.5 * state)
            states = states.write(i, state)
        return tf.transpose(states.stack(), [1, 0, 2])

    data = tf.constant(np.random.RandomState(16).uniform(size=[2, 3, 4]).astype(np.float32))
    first = dynamic_rnn(data, tf.zeros([2, 4]))
    with tf.GradientTape() as tape:
        tape.watch(data)
        total = tf.reduce_sum(dynamic_rnn(data, tf.zeros([2, 4])) ** 2)
    return first, tape.gradient(total, data), len(traced)


@parity(**TOL)
def test_performance_guide_fizzbuzz_loss_over_lists_and_a_generator_dataset(tf):
    """fizzbuzz over ``tf.range``: each branch's Python runs once per trace, tf.print every iteration;
    the guide's ``train(dataset)`` over a Python list of pairs unrolls (a trace per list length) and over
    ``from_generator`` loops in the graph."""
    traces = []

    def program(out):
        @tf.function
        def fizzbuzz(n):
            for i in tf.range(1, n + 1):
                traces.append("loop")
                if i % 15 == 0:
                    traces.append("fizzbuzz")
                    tf.print("fizzbuzz", output_stream=out)
                elif i % 3 == 0:
                    traces.append("fizz")
                    tf.print("fizz", output_stream=out)
                elif i % 5 == 0:
                    traces.append("buzz")
                    tf.print("buzz", output_stream=out)
                else:
                    traces.append("default")
                    tf.print(i, output_stream=out)

        fizzbuzz(tf.constant(5))
        fizzbuzz(tf.constant(16))

    printed = _printed(tf, program)[0]
    train_traces = []

    def train(dataset):
        train_traces.append(1)
        loss = tf.constant(0)
        for x, y in dataset:
            loss += tf.abs(y - x)
        return loss

    small_data = [(1, 1)] * 3
    big_data = [(1, 3)] * 10
    ftrain = tf.function(train)
    losses = [ftrain(small_data), ftrain(big_data)]
    n_list = len(train_traces)
    ds = tf.data.Dataset.from_generator(lambda: big_data, output_types=(tf.int32, tf.int32))
    losses += [ftrain(ds), train(ds)]
    return printed, traces, losses, n_list


@parity(tapejax_expected=(Returned(A([0.0])), A([0.0]), A([0.0]), Raised("InvalidArgumentError")),
        deliberate="tapejax/ops/indexing.py: gather's out-of-range indices are not checked unless the "
        "value-check mode is on (TF's CPU kernel raises, its GPU kernel gives zeros)", **TOL)
def test_function_guide_non_strict_execution_skips_an_unused_failing_op(tf):
    """Eagerly an out-of-range ``tf.gather`` whose result is unused raises InvalidArgumentError in TF
    (tapejax checks no gather index by default); inside a tf.function the unused op is pruned and the
    function returns x; ``tf.debugging.check_numerics`` of a used -inf raises."""
    def unused_return_eager(x):
        tf.gather(x, [1])
        return x

    @tf.function
    def unused_return_graph(x):
        tf.gather(x, [1])
        return x

    @tf.function
    def checked(x):
        return tf.debugging.check_numerics(tf.math.log(x), "log")

    x = tf.constant([0.0])
    return (raises(unused_return_eager, x), unused_return_graph(x), checked(tf.constant([1.0])),
            raises(checked, x))


# ---------------------------------------------------------------------------
# Introduction to Variables
# ---------------------------------------------------------------------------

@parity(x64=True, **TOL)
def test_variables_guide_creation_assign_names_devices_and_aggregation(tf):
    """The Variables guide: float, bool and complex Variables, convert_to_tensor / argmax / reshape of
    one, ``assign`` of ints keeping float32 and refusing a new shape, a Variable copied from another,
    assign_add / assign_sub chaining, two Variables named "Mark", a trainable=False step counter,
    matmuls under CPU / GPU device scopes, and the synchronization / aggregation attributes."""
    my_tensor = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    my_variable = tf.Variable(my_tensor)
    bool_variable = tf.Variable([False, False, False, True])
    complex_variable = tf.Variable([5 + 4j, 6 + 1j])
    out = [my_variable.shape.as_list(), my_variable.dtype.name, bool_variable.dtype.name,
           complex_variable.dtype.name, tf.convert_to_tensor(my_variable), tf.math.argmax(my_variable),
           tf.reshape(my_variable, [1, 4])]
    a = tf.Variable([2.0, 3.0])
    a.assign([1, 2])
    out += [a.dtype.name, a, raises(a.assign, [1.0, 2.0, 3.0])]
    a = tf.Variable([2.0, 3.0])
    b = tf.Variable(a)
    a.assign([5, 6])
    out += [a.numpy(), b.numpy(), a.assign_add([2, 3]).numpy(), a.assign_sub([7, 9]).numpy()]
    a = tf.Variable(my_tensor, name="Mark")
    b = tf.Variable(my_tensor + 1, name="Mark")
    step_counter = tf.Variable(1, trainable=False)
    out += [a == b, a.name, b.name, step_counter.trainable, step_counter.dtype.name]
    with tf.device("CPU:0"):
        a = tf.Variable([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        c = tf.matmul(a, b)
    with tf.device("CPU:0"):
        a = tf.Variable([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        b = tf.Variable([[1.0, 2.0, 3.0]])
    with tf.device("GPU:0"):
        k = a * b
    v = tf.Variable(1.0)
    r = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.MEAN)
    s = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)
    out += [c, k, [x.synchronization.name for x in (v, r, s)], [x.aggregation.name for x in (v, r, s)],
            [x.trainable for x in (v, r, s)]]
    return out


# ---------------------------------------------------------------------------
# Basic training loops
# ---------------------------------------------------------------------------

def _linear_data(tf):
    """The guide's 201 points of y = 3x + 2 plus noise on ``tf.linspace(-2, 2, 201)`` (float64, cast)."""
    x = tf.linspace(-2, 2, 201)
    dtype = x.dtype.name
    x = tf.cast(x, tf.float32)
    noise = tf.constant(_normal([201], 17))
    return x, x * 3.0 + 2.0 + noise, dtype


def _my_model_keras(tf):
    """The basic-training guide's ``MyModelKeras``: a Keras model holding two tf.Variables, w=5 and b=0."""
    class MyModelKeras(tf.keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.w = tf.Variable(5.0)
            self.b = tf.Variable(0.0)

        def call(self, x):
            return self.w * x + self.b

    return MyModelKeras


@parity(modes=True, x64=True, **TOL)
def test_basic_training_guide_linear_module_trained_by_hand(tf):
    """``MyModel(tf.Module)`` with w=5, b=0: its variables, ``model(3.0) == 15``, ten epochs of
    ``assign_sub(lr * grad)`` recording w, b and the loss per epoch."""
    x, y, dtype = _linear_data(tf)

    class MyModel(tf.Module):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.w = tf.Variable(5.0)
            self.b = tf.Variable(0.0)

        def __call__(self, x):
            return self.w * x + self.b

    def loss(target_y, predicted_y):
        return tf.reduce_mean(tf.square(target_y - predicted_y))

    def train(model, x, y, learning_rate):
        with tf.GradientTape() as t:
            current_loss = loss(y, model(x))
        dw, db = t.gradient(current_loss, [model.w, model.b])
        model.w.assign_sub(learning_rate * dw)
        model.b.assign_sub(learning_rate * db)

    model = MyModel()
    first = (len(model.variables), [v.numpy() for v in model.variables], model(3.0).numpy() == 15.0)
    weights, biases, losses = [], [], [loss(y, model(x))]
    for _ in range(10):
        train(model, x, y, learning_rate=0.1)
        weights.append(model.w.numpy())
        biases.append(model.b.numpy())
        losses.append(loss(y, model(x)))
    return dtype, first, weights, biases, losses


@parity(x64=True, **TOL)
def test_basic_training_guide_keras_model_by_hand_then_compiled_and_fitted(tf):
    """The guide's ``MyModelKeras(tf.keras.Model)`` holding two tf.Variables: trained ten epochs by the
    hand loop, then a fresh one compiled with SGD(0.1) and mean_squared_error and fitted ten epochs
    of one 1000-row batch; the history's losses and w, b."""
    x, y, _ = _linear_data(tf)

    MyModelKeras = _my_model_keras(tf)
    keras_model = MyModelKeras()
    for _ in range(10):
        with tf.GradientTape() as t:
            current_loss = tf.reduce_mean(tf.square(y - keras_model(x)))
        dw, db = t.gradient(current_loss, [keras_model.w, keras_model.b])
        keras_model.w.assign_sub(0.1 * dw)
        keras_model.b.assign_sub(0.1 * db)
    by_hand = (keras_model.w.numpy(), keras_model.b.numpy(), len(keras_model.trainable_variables))
    keras_model = MyModelKeras()
    keras_model.compile(run_eagerly=False, optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                        loss=tf.keras.losses.mean_squared_error)
    hist = keras_model.fit(x, y, epochs=10, batch_size=1000, verbose=0)
    return by_hand, hist.history["loss"], keras_model.w.numpy(), keras_model.b.numpy()


# ---------------------------------------------------------------------------
# Introduction to modules, layers, and models
# ---------------------------------------------------------------------------

def _modules(tf):
    """The guide's ``Dense`` and ``SequentialModule`` (tf.Module) with NumPy-drawn weights."""
    seeds = iter(range(20, 40))

    class Dense(tf.Module):
        def __init__(self, in_features, out_features, name=None):
            super().__init__(name=name)
            self.w = tf.Variable(_normal([in_features, out_features], next(seeds)), name="w")
            self.b = tf.Variable(tf.zeros([out_features]), name="b")

        def __call__(self, x):
            y = tf.matmul(x, self.w) + self.b
            return tf.nn.relu(y)

    class SequentialModule(tf.Module):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.dense_1 = Dense(in_features=3, out_features=3)
            self.dense_2 = Dense(in_features=3, out_features=2)

        def __call__(self, x):
            x = self.dense_1(x)
            return self.dense_2(x)

    return Dense, SequentialModule


@parity(modes=True, **TOL)
def test_modules_guide_simple_and_sequential_modules_checkpointed_and_restored(tf):
    """``SimpleModule`` (30 at 5; one trainable of two variables, by name), ``SequentialModule``'s
    results, submodule names and variable names; a checkpoint ``write`` listed by
    ``tf.train.list_variables`` and restored into a new SequentialModule, which then agrees."""
    class SimpleModule(tf.Module):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.a_variable = tf.Variable(5.0, name="train_me")
            self.non_trainable_variable = tf.Variable(5.0, trainable=False, name="do_not_train_me")

        def __call__(self, x):
            return self.a_variable * x + self.non_trainable_variable

    simple_module = SimpleModule(name="simple")
    out = [simple_module(tf.constant(5.0)), [v.name for v in simple_module.trainable_variables],
           [v.name for v in simple_module.variables], simple_module.name]
    Dense, SequentialModule = _modules(tf)
    my_model = SequentialModule(name="the_model")
    x = tf.constant([[2.0, 2.0, 2.0]])
    out += [my_model(x), [m.name for m in my_model.submodules], [v.name for v in my_model.variables],
            my_model.name]
    path = os.path.join(tempfile.mkdtemp(), "my_checkpoint")
    checkpoint = tf.train.Checkpoint(model=my_model)
    checkpoint.write(path)
    listed = [(k, s) for k, s in tf.train.list_variables(path) if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    new_model = SequentialModule()
    before = new_model(x)
    tf.train.Checkpoint(model=new_model).restore(path)
    out += [listed, before, new_model(x), new_model.dense_1.w]
    return out


@xfail_on_tapejax("tapejax/train/saved_model/README.md: functions without an input_signature are not exported "
                  "(TF saves the traces a Python-list call made)")
@parity(**TOL)
def test_modules_guide_saved_module_called_with_its_traced_python_lists(tf):
    """``MySequentialModule`` with a tf.function ``__call__`` called on a rank-2 and a rank-3 Python list
    (two traces), saved and loaded: the loaded object is not the class,
    keeps the submodules' variables and answers the same two lists; a list it never saw is refused with ValueError."""
    traced = []
    Dense, _ = _modules(tf)

    class MySequentialModule(tf.Module):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.dense_1 = Dense(in_features=3, out_features=3)
            self.dense_2 = Dense(in_features=3, out_features=2)

        @tf.function
        def __call__(self, x):
            traced.append(np.shape(x))
            x = self.dense_1(x)
            return self.dense_2(x)

    my_model = MySequentialModule(name="the_model")
    out = [my_model([[2.0, 2.0, 2.0]]), my_model([[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]])]
    d = os.path.join(tempfile.mkdtemp(), "the_saved_model")
    tf.saved_model.save(my_model, d)
    new_model = tf.saved_model.load(d)
    out += [isinstance(new_model, MySequentialModule), new_model([[2.0, 2.0, 2.0]]),
            new_model([[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]]), new_model.dense_1.w, new_model.dense_2.b,
            raises(new_model, [[1.0, 2.0, 3.0]])]
    return out, traced


@parity(**TOL)
def test_modules_guide_keras_layer_built_on_first_call_and_models_of_it(tf):
    """``FlexibleDense`` (a Keras Layer making tf.Variables in ``build``): no variables before the call,
    two after; a 4-feature input to the built layer raises InvalidArgumentError; a subclassed model of
    two of them and a functional model of two more give outputs of the guide's shapes and 4 variables."""
    seeds = iter(range(40, 60))

    class FlexibleDense(tf.keras.layers.Layer):
        def __init__(self, out_features, **kwargs):
            super().__init__(**kwargs)
            self.out_features = out_features

        def build(self, input_shape):
            self.w = tf.Variable(_normal([input_shape[-1], self.out_features], next(seeds)), name="w")
            self.b = tf.Variable(tf.zeros([self.out_features]), name="b")

        def call(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    flexible_dense = FlexibleDense(out_features=3)
    before = len(flexible_dense.variables)
    y = flexible_dense(tf.constant([[2.0, 2.0, 2.0], [3.0, 3.0, 3.0]]))
    out = [before, len(flexible_dense.variables), y,
           raises(flexible_dense, tf.constant([[2.0, 2.0, 2.0, 2.0]]))]

    class MySequentialModel(tf.keras.Model):
        def __init__(self, name=None, **kwargs):
            super().__init__(**kwargs)
            self.dense_1 = FlexibleDense(out_features=3)
            self.dense_2 = FlexibleDense(out_features=2)

        def call(self, x):
            x = self.dense_1(x)
            return self.dense_2(x)

    my_sequential_model = MySequentialModel(name="the_model")
    out += [my_sequential_model(tf.constant([[2.0, 2.0, 2.0]])), len(my_sequential_model.variables),
            len(my_sequential_model.trainable_variables)]
    inputs = tf.keras.Input(shape=[3])
    x = FlexibleDense(3)(inputs)
    x = FlexibleDense(2)(x)
    my_functional_model = tf.keras.Model(inputs=inputs, outputs=x)
    out += [my_functional_model(tf.constant([[2.0, 2.0, 2.0]])), len(my_functional_model.variables)]
    return out


@parity(**TOL)
def test_modules_guide_saved_module_with_a_signature_is_fine_tuned_after_loading(tf):
    """The guide's ``MySequentialModule`` with ``__call__`` under ``input_signature=[TensorSpec([None, 3])]``:
    saved after two SGD steps and loaded, it answers batches of 1 and 4 rows as the original, its
    submodules' variables are the trained ones, and a tape on the loaded call trains them further."""
    Dense, _ = _modules(tf)

    class MySequentialModule(tf.Module):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.dense_1 = Dense(in_features=3, out_features=3)
            self.dense_2 = Dense(in_features=3, out_features=2)

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return self.dense_2(self.dense_1(x))

    xs, ys = _normal([4, 3], 60), _normal([4, 2], 61)
    my_model = MySequentialModule(name="the_model")
    opt = tf.keras.optimizers.SGD(0.05)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(my_model(xs) - ys))
        opt.apply_gradients(zip(tape.gradient(loss, my_model.trainable_variables), my_model.trainable_variables))
    d = os.path.join(tempfile.mkdtemp(), "the_saved_model")
    tf.saved_model.save(my_model, d)
    loaded = tf.saved_model.load(d)
    out = [my_model(xs[:1]), loaded(xs[:1]), loaded(xs), loaded.dense_1.w, loaded.dense_2.b]
    params = [loaded.dense_1.w, loaded.dense_1.b, loaded.dense_2.w, loaded.dense_2.b]
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(loaded(xs) - ys))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign_sub(0.05 * g)
        out.append(loss)
    return out, params


@parity(modes=True, **TOL)
def test_modules_guide_name_scopes_and_variables_in_lists_and_dicts(tf):
    """A Module making its Variables under ``self.name_scope`` and calling under
    ``tf.Module.with_name_scope`` (names ``dense/w:0``), a parent holding layers in a list and extra
    Variables in a dict: ``variables`` / ``trainable_variables`` order and names, ``submodules``, and a
    training step over ``trainable_variables``."""
    class Dense(tf.Module):
        def __init__(self, n_in, n_out, seed, name=None):
            super().__init__(name=name)
            with self.name_scope:
                self.w = tf.Variable(_normal([n_in, n_out], seed), name="w")
                self.b = tf.Variable(tf.zeros([n_out]), name="b")

        @tf.Module.with_name_scope
        def __call__(self, x):
            return tf.nn.relu(tf.matmul(x, self.w) + self.b)

    class Stack(tf.Module):
        def __init__(self):
            super().__init__(name="stack")
            self.layers = [Dense(3, 4, 70), Dense(4, 2, 71, name="head")]
            self.extra = {"scale": tf.Variable(1.5, name="scale"), "steps": tf.Variable(0, trainable=False)}

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x * self.extra["scale"]

    m = Stack()
    x, y = tf.constant(_normal([5, 3], 72)), tf.constant(_normal([5, 2], 73))
    names = ([v.name for v in m.variables], [v.name for v in m.trainable_variables],
             [s.name for s in m.submodules], m.layers[0].name_scope.name)
    losses = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m(x) - y))
        grads = tape.gradient(loss, m.trainable_variables)
        for v, g in zip(m.trainable_variables, grads):
            v.assign_sub(0.1 * g)
        m.extra["steps"].assign_add(1)
        losses.append(loss)
    return names, losses, m.variables


@parity(modes=True, **TOL)
def test_advanced_guide_output_gradients_and_a_custom_gradient_on_vectors(tf):
    """``tape.gradient(y, x, output_gradients=w)`` weights a vector target (a vector-Jacobian product)
    and equals the gradient of ``sum(w * y)``; a custom gradient on vectors (a straight-through
    sign) receives the upstream vector and two inputs' gradients come back in order."""
    @tf.custom_gradient
    def ste_sign(x, scale):
        def grad(dy):
            return dy * tf.cast(tf.abs(x) <= 1.0, x.dtype) * scale, tf.reduce_sum(dy * tf.sign(x))
        return tf.sign(x) * scale, grad

    x = tf.Variable([-2.0, -0.5, 0.3, 1.5])
    s = tf.Variable(2.0)
    w = tf.constant([1.0, 2.0, 3.0, 4.0])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.tanh(x) * x
        z = ste_sign(x, s) + x ** 2
        weighted = tf.reduce_sum(w * y)
    vjp = tape.gradient(y, x, output_gradients=w)
    return (vjp, tape.gradient(weighted, x), tape.gradient(z, [x, s]),
            tape.gradient(z, [x, s], output_gradients=w), tape.gradient([y, z], x))


@parity(**TOL)
def test_performance_guide_python_list_in_a_staged_loop_then_a_tensor_array(tf):
    """Appending to a Python list inside ``for i in tf.range(n)`` in a tf.function is refused (TF's
    AutoGraph error class), a Python ``range`` loop unrolls it, and the guide's TensorArray
    (``dynamic_size=True``) accumulates in a staged loop of static length (tapejax compiles static
    shapes: a dynamic TensorArray needs a bounded loop)."""
    @tf.function
    def with_list(n):
        acc = []
        for i in tf.range(n):
            acc.append(i * 2)
        return tf.stack(acc)

    @tf.function
    def unrolled():
        acc = []
        for i in range(3):
            acc.append(tf.constant(i) * 2)
        return tf.stack(acc)

    @tf.function
    def with_array(x):
        ta = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
        for i in tf.range(4):
            ta = ta.write(i, i * x)
        return ta.stack()

    return raises(with_list, tf.constant(3)), unrolled(), with_array(tf.constant(2))


@parity(**TOL)
def test_modules_guide_flexible_dense_model_trained_in_a_function_and_checkpointed(tf):
    """A Keras model of two ``FlexibleDense`` layers (tf.Variables made in ``build``) trained by a
    compiled step with SGD, checkpointed with ``tf.train.Checkpoint(model=...)`` and restored into a
    fresh model after a first call built it; the restored model's outputs and a batch Jacobian of its
    output for the input inside a tf.function."""
    seeds = iter(range(80, 120))

    class FlexibleDense(tf.keras.layers.Layer):
        def __init__(self, out_features, **kwargs):
            super().__init__(**kwargs)
            self.out_features = out_features

        def build(self, input_shape):
            self.w = tf.Variable(_normal([input_shape[-1], self.out_features], next(seeds)) * 0.5, name="w")
            self.b = tf.Variable(tf.zeros([self.out_features]), name="b")

        def call(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.d1, self.d2 = FlexibleDense(4), FlexibleDense(1)

        def call(self, x):
            return self.d2(tf.nn.tanh(self.d1(x)))

    x, y = tf.constant(_normal([6, 3], 90)), tf.constant(_normal([6, 1], 91))
    net, opt = Net(), tf.keras.optimizers.SGD(0.1)
    net(x[:1])

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss

    losses = [step(x, y) for _ in range(4)]
    path = tf.train.Checkpoint(model=net).save(os.path.join(tempfile.mkdtemp(), "ck"))
    fresh = Net()
    fresh(x[:1])
    tf.train.Checkpoint(model=fresh).restore(path)

    @tf.function
    def jac(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = fresh(x)
        return tape.batch_jacobian(out, x)

    return losses, len(net.trainable_variables), fresh(x), net(x), jac(x)


@parity(modes=True, **TOL)
def test_graphs_guide_relu_branches_nested_functions_and_a_method(tf):
    """The graphs guide's ``simple_relu`` (a tensor ``if`` returning the tensor or a Python 0) on both
    signs (a float tensor is TF's TypeError: the Python 0 branch is int32), ``outer_function`` calling a tf.function ``inner_function`` (one trace of the
    outer; the inner's own count is the next program's), and a tf.function method of a plain Python class reading an attribute
    frozen at trace time per instance."""
    def simple_relu(x):
        if tf.greater(x, 0):
            return x
        else:
            return 0

    tf_simple_relu = tf.function(simple_relu)
    relus = [tf_simple_relu(tf.constant(1)), tf_simple_relu(tf.constant(-1)),
             raises(tf_simple_relu, tf.constant(2.5)), simple_relu(tf.constant(-1))]

    @tf.function
    def inner_function(x, y, b):
        x = tf.matmul(x, y)
        x = x + b
        return x

    @tf.function
    def outer_function(x):
        y = tf.constant([[2.0], [3.0]])
        b = tf.constant(4.0)
        return inner_function(x, y, b)

    nested = [outer_function(tf.constant([[1.0, 2.0]])), outer_function(tf.constant([[3.0, -1.0]])),
              outer_function.experimental_get_tracing_count()]

    class Scaler:
        def __init__(self, k):
            self.k = k

        @tf.function
        def apply(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    x = tf.constant([1.0, 2.0])
    scaled = [a.apply(x), b.apply(x)]
    a.k = 10.0
    scaled.append(a.apply(x))
    return relus, nested, scaled


@xfail_on_tapejax("tapejax/compile/README.md: a tapejax.function called while another traces is inlined, its "
                  "Python run at each call (TF traces it once per signature as its own function and counts it)")
@parity(**TOL)
def test_graphs_guide_inner_function_traces_once_per_signature_inside_the_outer(tf):
    """A tf.function called twice with one signature inside another's trace: TF runs its Python once
    and counts one trace; a later eager call of the same signature reuses it, a new shape traces."""
    runs = []

    @tf.function
    def inner(z):
        runs.append(z.shape.as_list())
        return z * 2.0

    @tf.function
    def outer(x):
        return inner(x) + inner(-x)

    out = [outer(tf.constant(2.0)), outer(tf.constant([3.0]))]
    counts = [inner.experimental_get_tracing_count()]
    out.append(inner(tf.constant(1.0)))
    counts.append(inner.experimental_get_tracing_count())
    return out, runs, counts


@parity(modes=True, **TOL)
def test_variables_guide_reads_assign_results_and_copies(tf):
    """What a Variables-guide user reads back: ``assign(..., read_value=False)``, the results of
    assign_add / assign_sub chained, ``read_value`` / ``value`` / ``convert_to_tensor`` taken before
    an assign keeping the old value, a float16 Variable from a float32 one (TF's ValueError; a cast
    first works), a Variable of a
    Variable's current value, and the same inside a tf.function."""
    a = tf.Variable([2.0, 3.0])
    before = (a.read_value(), a.value(), tf.convert_to_tensor(a), tf.identity(a))
    none = a.assign([5.0, 6.0], read_value=False)
    chained = a.assign_add([1.0, 1.0]).assign_sub([0.5, 0.5])
    h = raises(tf.Variable, a, dtype=tf.float16)
    h2 = tf.Variable(tf.cast(a, tf.float16))
    c = tf.Variable(a * 2.0)
    a.assign([0.0, 0.0])
    v = tf.Variable(1.0)

    @tf.function
    def f(x):
        old = v.read_value()
        v.assign_add(x)
        mid = tf.identity(v)
        r = v.assign(v * 3.0)
        return old, mid, r, v.read_value()

    return (before, none is None, chained, h, h2, c, a, f(tf.constant(2.0)), v,
            isinstance(chained, tf.Variable))


@parity(**TOL)
def test_autodiff_guide_watching_only_some_layer_weights_in_a_compiled_step(tf):
    """``watch_accessed_variables=False`` with ``tape.watch(layer.kernel)`` and a watched list of the
    second layer's weights, in a tf.function and eagerly: unwatched weights get None, the watched
    ones their gradients, and ``watched_variables`` lists what was watched."""
    l1 = _dense(tf, tf.keras.layers.Dense(4, activation="tanh"), 3, 100)
    l2 = _dense(tf, tf.keras.layers.Dense(1), 4, 101)
    x, y = tf.constant(_normal([5, 3], 102)), tf.constant(_normal([5, 1], 103))
    everything = [l1.kernel, l1.bias, l2.kernel, l2.bias]

    def grads():
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(l1.kernel)
            tape.watch(l2.trainable_variables)
            loss = tf.reduce_mean(tf.square(l2(l1(x)) - y))
        return tape.gradient(loss, everything), len(tape.watched_variables())

    eager = grads()
    compiled = tf.function(grads)()
    return eager, compiled


@parity(x64=True, **TOL)
def test_basic_training_guide_keras_model_saved_weights_evaluated_and_predicted(tf):
    """The guide's Keras linear model (two tf.Variables) fitted five epochs, its weights saved to a
    ``.weights.h5`` file and loaded into a fresh model (called once first), which evaluates and
    predicts as the trained one."""
    x, y, _ = _linear_data(tf)

    MyModelKeras = _my_model_keras(tf)
    model = MyModelKeras()
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss=tf.keras.losses.mean_squared_error)
    model.fit(x, y, epochs=5, batch_size=1000, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "linear.weights.h5")
    model.save_weights(path)
    fresh = MyModelKeras()
    fresh(x[:2])
    fresh.load_weights(path)
    fresh.compile(loss=tf.keras.losses.mean_squared_error)
    return (fresh.w.numpy(), fresh.b.numpy(), model.w.numpy(), fresh.evaluate(x, y, batch_size=1000, verbose=0),
            fresh.predict(x[:4], verbose=0))
