"""Jacobians and forward mode (issue #6; TF_SEMANTICS.md items 4, 9, 16): the same programs under TF and tapejax.

Covers ``GradientTape.jacobian``, ``GradientTape.batch_jacobian`` and
``tf.autodiff.ForwardAccumulator``: values, shapes, dtypes, None / zeros for
unconnected tensors, nesting (Hessians, Hessian-vector products both ways) and
the error classes, each checked by running TF 2.21.
"""

import numpy as np

from .harness import A, Raised, parity, raises

JAC = "GradientTape.jacobian"
BJAC = "GradientTape.batch_jacobian"
FWD = "autodiff.ForwardAccumulator"

M = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def _vec_tape(tf, persistent=False):
    x = tf.constant([1.0, 2.0, 3.0])
    t = tf.GradientTape(persistent=persistent)
    with t:
        t.watch(x)
        y = x * x
    return t, x, y


def _batch_tape(tf, persistent=False):
    X = tf.constant(M)
    t = tf.GradientTape(persistent=persistent)
    with t:
        t.watch(X)
        y = X * X
    return t, X, y


# --------------------------------------------------------------------------
# jacobian: values, shapes, structure
# --------------------------------------------------------------------------

@parity(needs=JAC, expected=A(np.diag([2.0, 4.0, 6.0])))
def test_jacobian_diag(tf):
    """jacobian(x*x, x) is diag(2x)."""
    t, x, y = _vec_tape(tf)
    return t.jacobian(y, x)


@parity(needs=JAC, expected=(A(24.0), A([2.0, 4.0, 6.0])))
def test_jacobian_scalar_target(tf):
    """Scalar target, scalar and vector sources: shapes () and (3,)."""
    x = tf.constant([1.0, 2.0, 3.0])
    s = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, s])
        y = tf.reduce_sum(x) * s * s
        z = tf.reduce_sum(x * x)
    return t.jacobian(y, s), t.jacobian(z, x)


@parity(needs=JAC)
def test_jacobian_matrix_by_matrix(tf):
    """matmul(m, m) by m: shape (2, 2, 2, 2)."""
    m = tf.constant(M)
    with tf.GradientTape() as t:
        t.watch(m)
        y = tf.matmul(m, m)
    return t.jacobian(y, m)


@parity(needs=JAC)
def test_jacobian_forward_friendly_shapes(tf):
    """One scalar source, a (3, 4) target (tapejax pushes forward here): same values as TF."""
    a = tf.constant(0.5)
    c = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 10.0)
    with tf.GradientTape() as t:
        t.watch(a)
        y = tf.tanh(c * a) * a
    return t.jacobian(y, a)


@parity(needs=JAC, atol=2e-6)
def test_jacobian_tanh_layer_all_sources(tf):
    """tanh(x @ w + b) by x, w and b, as a tuple of sources.  (One unit's tanh saturates: TF's
    float32 tanh is exactly 1 there, so its derivative exactly 0; XLA's is 1 or 1 - 2**-24
    depending on the code generation, a derivative of 0 or about 1e-6: ``atol`` allows that
    ulp; a wrong rule moves entries by far more.)"""
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(2, 3)).astype(np.float32))
    w = tf.constant(rng.normal(size=(3, 4)).astype(np.float32))
    b = tf.constant(rng.normal(size=(4,)).astype(np.float32))
    with tf.GradientTape() as t:
        t.watch([x, w, b])
        y = tf.tanh(tf.matmul(x, w) + b)
    return t.jacobian(y, (x, w, b))


@parity(needs=JAC)
def test_jacobian_nested_sources_and_none(tf):
    """Nested sources keep their structure (dict insertion order); unconnected is None."""
    t, x, y = _vec_tape(tf)
    return t.jacobian(y, [x, {"b": x, "a": tf.constant(1.0)}])


@parity(needs=JAC)
def test_jacobian_dict_sources_order(tf):
    """A dict of sources comes back with its own key order."""
    t, x, y = _vec_tape(tf)
    return t.jacobian(y, {"z": x, "a": x})


@parity(needs=JAC, expected=(None, A(np.zeros((3, 2)))))
def test_jacobian_unconnected_none_and_zero(tf):
    """Unconnected: None, or zeros of target.shape + source.shape with 'zero'."""
    t, x, y = _vec_tape(tf, persistent=True)
    return t.jacobian(y, tf.constant(1.0)), t.jacobian(y, tf.constant([1.0, 2.0]), unconnected_gradients="zero")


@parity(needs=JAC)
def test_jacobian_unconnected_zero_enum_and_int_source(tf):
    """Integer sources: None, and *integer* zeros with ZERO."""
    xi = tf.constant([1, 2])
    with tf.GradientTape(persistent=True) as t:
        t.watch(xi)
        y = xi * xi
    return t.jacobian(y, xi), t.jacobian(y, xi, unconnected_gradients=tf.UnconnectedGradients.ZERO)


@parity(needs=JAC)
def test_jacobian_integer_target(tf):
    """A target computed through an integer cast: None, float zeros with 'zero'."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.cast(x, tf.int32) * 2
    return t.jacobian(y, x), t.jacobian(y, x, unconnected_gradients="zero")


@parity(needs=[JAC, "floor"])
def test_jacobian_floor_path(tf):
    """floor has no gradient in TF: None, zeros with 'zero'."""
    x = tf.constant([1.5, 2.5])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.floor(x)
    return t.jacobian(y, x), t.jacobian(y, x, unconnected_gradients="zero")


@parity(needs=JAC)
def test_jacobian_target_is_source(tf):
    """A watched target that is the source: identity; never watched: None (unlike gradient)."""
    x = tf.constant([1.0, 2.0])
    u = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
    return t.jacobian(x, x), t.jacobian(u, u)


@parity(needs=JAC)
def test_jacobian_variable_source_and_target(tf):
    """Variables: jacobian(v*v*c, v); jacobian(v, v) is the identity, read or not (TF reads it
    then, so it is watched), unless the tape does not watch accessed variables."""
    v = tf.Variable([1.0, 2.0])
    c = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        y = v * v * c
    u = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape() as t2:
        pass
    with tf.GradientTape(watch_accessed_variables=False) as t3:
        pass
    return t.jacobian(y, v), t.jacobian(v, v), t2.jacobian(u, u), t2.watched_variables(), t3.jacobian(u, u)


@parity(needs=JAC, x64=True)
def test_jacobian_dtype_is_source_dtype(tf):
    """float64 source through a float32 path -> float64; float32 source via float64 -> float32."""
    a = tf.constant([1.0, 2.0], tf.float64)
    b = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([a, b])
        ca = tf.cast(a, tf.float32)
        cb = tf.cast(b, tf.float64)
        y = ca * ca
        z = cb * cb
    return t.jacobian(y, a), t.jacobian(z, b)


@parity(needs=JAC, rtol=1e-3, atol=1e-3)
def test_jacobian_float16(tf):
    """float16 source and target."""
    h = tf.constant(1.5, tf.float16)
    with tf.GradientTape() as t:
        t.watch(h)
        y = tf.stack([h * h, h])
    return t.jacobian(y, h)


@parity(needs=JAC)
def test_jacobian_empty_sources_and_empty_target(tf):
    """[] sources -> []; a size-0 target -> shape (0, ...) or None when unconnected."""
    e = tf.zeros([0])
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([e, x])
        y = e * 2.0
        z = x * x
    return (t.jacobian(z, []), t.jacobian(y, e), t.jacobian(y, x),
            t.jacobian(y, x, unconnected_gradients="zero"))


@parity(needs=JAC)
def test_jacobian_persistent_many_and_loop_options(tf):
    """Persistent: several jacobians; experimental_use_pfor=False and parallel_iterations give the same."""
    t, x, y = _vec_tape(tf, persistent=True)
    return (t.jacobian(y, x), t.jacobian(y, x, experimental_use_pfor=False),
            t.jacobian(y, x, parallel_iterations=100))


@parity(needs=JAC)
def test_jacobian_inside_nonpersistent_block(tf):
    """jacobian() inside a non-persistent block works and stops recording; a 2nd call raises."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        j = t.jacobian(y, x)
        z = x * 3.0
    return j, raises(t.gradient, z, x)


# --------------------------------------------------------------------------
# jacobian: errors (class equality with TF; the tape stays usable)
# --------------------------------------------------------------------------

@parity(needs=JAC, expected=(Raised("RuntimeError"), Raised("RuntimeError"), Raised("RuntimeError")))
def test_jacobian_lifecycle_errors(tf):
    """2nd jacobian on a non-persistent tape, a never-entered tape, pfor=False on a non-persistent tape."""
    t, x, y = _vec_tape(tf)
    t.jacobian(y, x)
    t2, x2, y2 = _vec_tape(tf)
    return (raises(t.jacobian, y, x), raises(tf.GradientTape().jacobian, x, x),
            raises(t2.jacobian, y2, x2, experimental_use_pfor=False))


@parity(needs=JAC, expected=(Raised("AttributeError"), Raised("AttributeError"), Raised("AttributeError"),
                             Raised("TypeError"), Raised("AttributeError"), Raised("AttributeError")))
def test_jacobian_argument_type_errors(tf):
    """target a list / None / float; sources None / a float / an ndarray."""
    t, x, y = _vec_tape(tf, persistent=True)
    return (raises(t.jacobian, [y, y], x), raises(t.jacobian, None, x), raises(t.jacobian, 3.0, x),
            raises(t.jacobian, y, None), raises(t.jacobian, y, 3.0),
            raises(t.jacobian, y, np.array([1.0, 2.0])))


@parity(needs=JAC, expected=(Raised("ValueError"), Raised("ValueError"), Raised("ValueError"),
                             Raised("ValueError"), Raised("TypeError"), Raised("TypeError")))
def test_jacobian_bad_options(tf):
    """unconnected_gradients 'ZERO' / 1; parallel_iterations 1 / 0 / 2.5 / 'a'."""
    t, x, y = _vec_tape(tf, persistent=True)
    return (raises(t.jacobian, y, x, unconnected_gradients="ZERO"),
            raises(t.jacobian, y, x, unconnected_gradients=1),
            raises(t.jacobian, y, x, parallel_iterations=1),
            raises(t.jacobian, y, x, parallel_iterations=0),
            raises(t.jacobian, y, x, parallel_iterations=2.5),
            raises(t.jacobian, y, x, parallel_iterations="a"))


@parity(needs=JAC)
def test_jacobian_usable_after_errors(tf):
    """A non-persistent tape is still usable after argument errors (raised before state changes)."""
    t, x, y = _vec_tape(tf)
    errs = (raises(t.jacobian, y, x, unconnected_gradients="ZERO"),
            raises(t.jacobian, y, x, experimental_use_pfor=False),
            raises(t.jacobian, y, 3.0))
    return errs, t.jacobian(y, x)


# --------------------------------------------------------------------------
# batch_jacobian
# --------------------------------------------------------------------------

@parity(needs=BJAC, expected=A([[[2.0, 0.0], [0.0, 4.0]], [[6.0, 0.0], [0.0, 8.0]]]))
def test_batch_jacobian_basic(tf):
    """TF's docstring example."""
    t, X, y = _batch_tape(tf)
    return t.batch_jacobian(y, X)


@parity(needs=BJAC)
def test_batch_jacobian_shapes(tf):
    """[b, y...] by [b, x...]: a reduction and a rank-3 source."""
    X = tf.constant(M)
    X3 = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([X, X3])
        y = tf.reduce_sum(X, axis=1, keepdims=True) * X[:, :1]
        z = tf.tanh(X3[:, :, :2]) * 2.0
    return t.batch_jacobian(y, X), t.batch_jacobian(z, X3)


@parity(needs=BJAC)
def test_batch_jacobian_tanh_layer(tf):
    """Per-example jacobians of a tanh layer, and with the loop options."""
    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(size=(4, 3)).astype(np.float32))
    w = tf.constant(rng.normal(size=(3, 5)).astype(np.float32))
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.tanh(tf.matmul(x, w))
    return (t.batch_jacobian(y, x), t.batch_jacobian(y, x, experimental_use_pfor=False),
            t.batch_jacobian(y, x, parallel_iterations=100))


@parity(needs=BJAC)
def test_batch_jacobian_dependent_examples(tf):
    """Examples that depend on each other: TF's value is sum_j dy[j, k] / dx[i, ...]."""
    X = tf.constant(M)
    with tf.GradientTape() as t:
        t.watch(X)
        y = tf.matmul(X, X)
    return t.batch_jacobian(y, X)


@parity(needs=BJAC)
def test_batch_jacobian_unconnected_zeros_even_with_none(tf):
    """Item 4: zeros (not None) for an unconnected source, with 'none' and with 'zero'."""
    t, X, y = _batch_tape(tf, persistent=True)
    z = tf.ones([2, 5])
    return t.batch_jacobian(y, z), t.batch_jacobian(y, z, unconnected_gradients="zero")


@parity(needs=BJAC, x64=True)
def test_batch_jacobian_unconnected_dtypes(tf):
    """Unconnected zeros: the target's dtype with 'none', the source's with 'zero'."""
    X = tf.constant(M)
    Xd = tf.constant(M.astype(np.float64))
    with tf.GradientTape(persistent=True) as t:
        t.watch([X, Xd])
        y = X * X
        yd = Xd * 2.0
    zd = tf.ones([2, 5], tf.float64)
    return (t.batch_jacobian(y, zd), t.batch_jacobian(y, zd, unconnected_gradients="zero"),
            t.batch_jacobian(yd, tf.ones([2, 2])))


@parity(needs=[BJAC, "floor"])
def test_batch_jacobian_int_and_floor(tf):
    """Integer source (integer zeros both ways) and a floor path (float zeros)."""
    Xi = tf.constant([[1, 2], [3, 4]])
    X = tf.constant(M)
    with tf.GradientTape(persistent=True) as t:
        t.watch([Xi, X])
        yi = Xi * Xi
        yf = tf.floor(X)
    return (t.batch_jacobian(yi, Xi), t.batch_jacobian(yi, Xi, unconnected_gradients="zero"),
            t.batch_jacobian(yf, X))


@parity(needs=BJAC, x64=True)
def test_batch_jacobian_dtype_is_source_dtype(tf):
    """float32 source through a float64 path: float32 result."""
    X = tf.constant(M)
    with tf.GradientTape() as t:
        t.watch(X)
        y = tf.cast(X, tf.float64) * 2.0
    return t.batch_jacobian(y, X)


@parity(needs=BJAC)
def test_batch_jacobian_variable_target_is_source_empty_row(tf):
    """A Variable source; target == source (identity per example); a [2, 0] source."""
    v = tf.Variable(M)
    X = tf.constant(M)
    Z = tf.ones([2, 0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([X, Z])
        y = v * v
        z = Z * 2.0
    u = tf.Variable(M)
    with tf.GradientTape() as t2:
        pass
    return t.batch_jacobian(y, v), t.batch_jacobian(X, X), t.batch_jacobian(z, Z), t2.batch_jacobian(u, u)


@parity(needs=BJAC, expected=(Raised("ValueError"), Raised("ValueError"), Raised("ValueError")))
def test_batch_jacobian_shape_errors(tf):
    """First dimensions differ; source or target of rank 1."""
    t, X, y = _batch_tape(tf, persistent=True)
    return (raises(t.batch_jacobian, y, tf.ones([3, 2])),
            raises(t.batch_jacobian, y, tf.constant([1.0, 2.0])),
            raises(t.batch_jacobian, tf.reduce_sum(y, axis=1), X))


@parity(needs=BJAC, expected=(Raised("RuntimeError"), Raised("RuntimeError"), Raised("RuntimeError")))
def test_batch_jacobian_lifecycle_errors(tf):
    """A 2nd call on a non-persistent tape, a never-entered tape, pfor=False on a non-persistent tape."""
    t, X, y = _batch_tape(tf)
    t.batch_jacobian(y, X)
    t2, X2, y2 = _batch_tape(tf)
    return (raises(t.batch_jacobian, y, X), raises(tf.GradientTape().batch_jacobian, X, X),
            raises(t2.batch_jacobian, y2, X2, experimental_use_pfor=False))


@parity(needs=BJAC, expected=(Raised("AttributeError"), Raised("AttributeError"), Raised("AttributeError"),
                              Raised("AttributeError"), Raised("AttributeError"), Raised("ValueError")))
def test_batch_jacobian_argument_errors(tf):
    """list source / list target / None target / None source / float source; 'ZERO'."""
    t, X, y = _batch_tape(tf, persistent=True)
    return (raises(t.batch_jacobian, y, [X]), raises(t.batch_jacobian, [y], X),
            raises(t.batch_jacobian, None, X), raises(t.batch_jacobian, y, None),
            raises(t.batch_jacobian, y, 3.0),
            raises(t.batch_jacobian, y, X, unconnected_gradients="ZERO"))


@parity(needs=BJAC)
def test_batch_jacobian_usable_after_errors(tf):
    """Shape and option errors leave a non-persistent tape usable."""
    t, X, y = _batch_tape(tf)
    errs = (raises(t.batch_jacobian, y, tf.ones([3, 2])),
            raises(t.batch_jacobian, y, X, experimental_use_pfor=False))
    return errs, t.batch_jacobian(y, X)


@parity(needs=BJAC, expected=Raised("ZeroDivisionError"),
        tapejax_expected=A(np.zeros((0, 2, 2), np.float32)),
        deliberate="an empty batch has a well-defined empty batch_jacobian; TF 2.21 divides by zero")
def test_batch_jacobian_empty_batch(tf):
    """batch of 0: TF raises ZeroDivisionError (an accident); tapejax returns shape (0, 2, 2)."""
    Z = tf.ones([0, 2])
    with tf.GradientTape() as t:
        t.watch(Z)
        y = Z * 2.0
    try:
        return t.batch_jacobian(y, Z)
    except ZeroDivisionError as e:
        return Raised(type(e).__name__, str(e))


# --------------------------------------------------------------------------
# nesting: Hessians
# --------------------------------------------------------------------------

@parity(needs=JAC, rtol=1e-4, atol=1e-5)
def test_hessian_jacobian_of_gradient(tf):
    """TF2's recipe: jacobian of a gradient in nested tapes."""
    x = tf.constant([0.5, -1.0, 2.0])
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = tf.reduce_sum(tf.tanh(x) * x * x)
        g = t1.gradient(y, x)
    return g, t2.jacobian(g, x)


@parity(needs=JAC, rtol=1e-4, atol=1e-5)
def test_hessian_of_layer_weights(tf):
    """Hessian of a loss w.r.t. a weight matrix: shape w.shape + w.shape (Variable source)."""
    rng = np.random.default_rng(5)
    w = tf.Variable(rng.normal(size=(3, 2)).astype(np.float32))
    x = tf.constant(rng.normal(size=(4, 3)).astype(np.float32))
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w))))
        g = t1.gradient(loss, w)
    return t2.jacobian(g, w)


@parity(needs=JAC, rtol=1e-4, atol=1e-4)
def test_gradient_of_jacobian_and_jacobian_of_jacobian(tf):
    """Jacobians recorded by outer tapes: d(sum J)/dx and the 3rd-order tensor."""
    x = tf.constant([0.5, 1.0, 1.5])
    with tf.GradientTape(persistent=True) as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = x * x * x
        j = t1.jacobian(y, x)
        s = tf.reduce_sum(j)
    return t2.gradient(s, x), t2.jacobian(j, x)


@parity(needs=BJAC, rtol=1e-4, atol=1e-5)
def test_batch_jacobian_of_gradient(tf):
    """Per-example Hessian diagonals blocks: batch_jacobian of a gradient."""
    X = tf.constant(M / 4.0)
    with tf.GradientTape() as t2:
        t2.watch(X)
        with tf.GradientTape() as t1:
            t1.watch(X)
            y = tf.reduce_sum(tf.tanh(X) * X)
        g = t1.gradient(y, X)
    return t2.batch_jacobian(g, X)


# --------------------------------------------------------------------------
# ForwardAccumulator (item 16)
# --------------------------------------------------------------------------

def _xv(tf):
    return tf.constant([1.0, 2.0, 3.0]), tf.constant([1.0, 0.0, 0.5])


@parity(needs=FWD, expected=(A([2.0, 0.0, 3.0]), A([1.0, 0.0, 0.5]), None, A(0.0)))
def test_fwd_basic(tf):
    """jvp of x*x, jvp(primal) is the tangent, unconnected None / zeros."""
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = x * x
    c = tf.constant(1.0)
    return acc.jvp(y), acc.jvp(x), acc.jvp(c), acc.jvp(c, unconnected_gradients="zero")


@parity(needs=FWD)
def test_fwd_after_block_and_structures(tf):
    """Ops after the block are not recorded; nested targets keep their structure."""
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = x * x
    z = y * 2.0
    return acc.jvp(z), acc.jvp([y, {"b": y, "a": z}]), acc.jvp((y, y)), acc.jvp([])


@parity(needs=FWD, rtol=1e-4, atol=1e-5)
def test_fwd_tanh_layer_structured_primals(tf):
    """Dict primals/tangents (sorted-key matching) through a tanh layer."""
    rng = np.random.default_rng(6)
    x = tf.constant(rng.normal(size=(2, 3)).astype(np.float32))
    w = tf.constant(rng.normal(size=(3, 4)).astype(np.float32))
    tx = tf.constant(rng.normal(size=(2, 3)).astype(np.float32))
    tw = tf.constant(rng.normal(size=(3, 4)).astype(np.float32))
    with tf.autodiff.ForwardAccumulator({"w": w, "x": x}, {"x": tx, "w": tw}) as acc:
        y = tf.tanh(tf.matmul(x, w))
    return acc.jvp(y)


@parity(needs=FWD)
def test_fwd_variables(tf):
    """Variable primal: each read carries the tangent (also after assign); other Variables None."""
    w = tf.Variable([1.0, 2.0, 3.0])
    u = tf.Variable(2.0)
    with tf.autodiff.ForwardAccumulator(w, tf.constant([1.0, 0.0, 0.5])) as acc:
        y = w * u
        w.assign([5.0, 5.0, 5.0])
        z = w * w
    return acc.jvp(y), acc.jvp(z), acc.jvp(w), acc.jvp(u)


@parity(needs=FWD)
def test_fwd_tangent_kinds(tf):
    """Python float tangent, Variable tangent, scalar tangent broadcast over a vector primal."""
    w = tf.Variable(2.0)
    with tf.autodiff.ForwardAccumulator(w, 1.0) as a1:
        y1 = w * w
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, tf.Variable([1.0, 0.0, 0.5])) as a2:
        y2 = x * x
    with tf.autodiff.ForwardAccumulator(x, tf.constant(2.0)) as a3:
        y3 = x * x
    return a1.jvp(y1), a2.jvp(y2), a3.jvp(y3), a3.jvp(x)


@parity(needs=FWD)
def test_fwd_int_and_floor(tf):
    """Integer targets and primals, floor: None / zeros as TF."""
    x, v = _xv(tf)
    xi = tf.constant([1, 2])
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        yi = tf.cast(x, tf.int32) * 2
        yf = tf.floor(x)
        yp = tf.floor(x) * x
    with tf.autodiff.ForwardAccumulator(xi, tf.constant([1, 1])) as acc2:
        zi = xi * xi
    return (acc.jvp(yi), acc.jvp(yi, unconnected_gradients="zero"), acc.jvp(yf),
            acc.jvp(yf, unconnected_gradients="zero"), acc.jvp(yp), acc2.jvp(zi), acc2.jvp(xi))


@parity(needs=[FWD, "stop_gradient"])
def test_fwd_stop_gradient(tf):
    """stop_gradient(x) * x: only the unstopped path carries the tangent."""
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = tf.stop_gradient(x) * x
    return acc.jvp(y)


@parity(needs=FWD, x64=True)
def test_fwd_dtypes(tf):
    """The JVP has the target's dtype (float64 primal, float32 target); float16."""
    a = tf.constant(2.0, tf.float64)
    h = tf.constant(1.0, tf.float16)
    with tf.autodiff.ForwardAccumulator([a, h], [tf.constant(1.0, tf.float64), tf.constant(2.0, tf.float16)]) as acc:
        y = tf.cast(a, tf.float32) * 3.0
        z = h * h * h
    return acc.jvp(y), acc.jvp(z)


@parity(needs=FWD)
def test_fwd_lifecycle(tf):
    """Never entered: jvp(primal) is the tangent, others None; re-entering continues recording."""
    x, v = _xv(tf)
    acc = tf.autodiff.ForwardAccumulator(x, v)
    early = (acc.jvp(x * x), acc.jvp(x))
    with acc:
        y = x * x
    with acc:
        z = x * 3.0
    return early, acc.jvp(y), acc.jvp(z)


@parity(needs=FWD)
def test_fwd_own_jvp_not_recorded_and_two_accumulators(tf):
    """An accumulator does not record its own JVPs; a second one sees only its own block."""
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = x * x
        j = acc.jvp(y)
        jj = acc.jvp(j)
        with tf.autodiff.ForwardAccumulator(x, 2.0 * v) as acc2:
            z = x * x
    return j, jj, acc.jvp(z), acc2.jvp(z), acc2.jvp(y)


@parity(needs=FWD, x64=True, expected=tuple(Raised("ValueError") for _ in range(7)))
def test_fwd_value_errors(tf):
    """dtype mismatch (int / float64), a list tangent, a None tangent, structures differ,
    a primal twice, re-entering an active accumulator."""
    x, v = _xv(tf)
    FA = tf.autodiff.ForwardAccumulator

    def reenter():
        acc = FA(x, v)
        with acc:
            with acc:
                pass

    return (raises(FA, x, tf.constant([1, 2, 3])), raises(FA, x, tf.constant([1.0, 2.0, 3.0], tf.float64)),
            raises(FA, x, [1.0, 0.0, 0.0]), raises(FA, x, None), raises(FA, [x, v], [v, x, x]),
            raises(FA, [x, x], [v, v]), raises(reenter))


@parity(needs=FWD, expected=(Raised("ValueError"),))
def test_fwd_shape_mismatch(tf):
    """A tangent of the wrong shape: ValueError (TF at the first op, tapejax at construction)."""
    x, v = _xv(tf)

    def run():
        with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 2.0])) as acc:
            y = x * x
        return acc.jvp(y)

    return (raises(run),)


@parity(needs=FWD, expected=(Raised("AttributeError"), Raised("AttributeError"), Raised("ValueError"),
                             Raised("AttributeError"), Raised("AttributeError"), Raised("AttributeError")))
def test_fwd_argument_errors(tf):
    """float / None primals; jvp: 'ZERO', None, a float, an ndarray."""
    x, v = _xv(tf)
    FA = tf.autodiff.ForwardAccumulator
    with FA(x, v) as acc:
        y = x * x
    return (raises(FA, 3.0, 1.0), raises(FA, None, None),
            raises(acc.jvp, y, unconnected_gradients="ZERO"), raises(acc.jvp, None),
            raises(acc.jvp, 3.0), raises(acc.jvp, np.array([1.0])))


# -- nesting with GradientTape: Hessian-vector products ---------------------

def _cubic(tf, x):
    return tf.reduce_sum(x * x * x)


@parity(needs=FWD, expected=(A([3.0, 12.0, 27.0]), A([6.0, 0.0, 9.0])))
def test_hvp_forward_over_backward(tf):
    """TF's docs: accumulator outside, tape inside, jvp of the gradient."""
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = _cubic(tf, x)
        g = tape.gradient(y, x)
    return g, acc.jvp(g)


@parity(needs=FWD, expected=(A(16.5), A([6.0, 0.0, 9.0]), A(16.5), A([6.0, 0.0, 9.0])))
def test_hvp_backward_over_forward(tf):
    """TF's docs: tape outside, accumulator inside; jvp taken inside or after the tape's block."""
    x, v = _xv(tf)
    with tf.GradientTape() as tape:
        tape.watch(x)
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = _cubic(tf, x)
        j = acc.jvp(y)
    with tf.GradientTape() as tape2:
        tape2.watch(x)
        with tf.autodiff.ForwardAccumulator(x, v) as acc2:
            y2 = _cubic(tf, x)
    j2 = acc2.jvp(y2)
    return j, tape.gradient(j, x), j2, tape2.gradient(j2, x)


@parity(needs=FWD)
def test_hvp_variables_both_ways(tf):
    """Variables as primals and tape sources, both nestings."""
    w = tf.Variable([1.0, 2.0])
    d = tf.constant([1.0, 0.0])
    with tf.autodiff.ForwardAccumulator(w, d) as acc:
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(w * w * w)
        g = tape.gradient(y, w)
    fob = acc.jvp(g)
    with tf.GradientTape() as tape2:
        with tf.autodiff.ForwardAccumulator(w, d) as acc2:
            y2 = tf.reduce_sum(w * w * w)
    return fob, tape2.gradient(acc2.jvp(y2), w)


@parity(needs=FWD)
def test_hvp_gradient_wrt_tangent(tf):
    """The JVP is differentiable w.r.t. the tangent too (it is linear in it)."""
    x, v = _xv(tf)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, v])
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = _cubic(tf, x)
        j = acc.jvp(y)
    return tape.gradient(j, [x, v])


@parity(needs=FWD)
def test_fwd_stack_order(tf):
    """Who sees the JVP computation: tapes entered before the accumulator only (TF's rule)."""
    x, v = _xv(tf)
    FA = tf.autodiff.ForwardAccumulator
    with FA(x, v) as a1:
        y1 = _cubic(tf, x)
    with tf.GradientTape() as t1:  # accumulator used before the tape
        t1.watch(x)
        j1 = a1.jvp(y1)
    with FA(x, v) as a2:  # tape inside the accumulator
        with tf.GradientTape(persistent=True) as t2:
            t2.watch(x)
            y2 = _cubic(tf, x)
    j2 = a2.jvp(y2)
    g2 = t2.gradient(y2, x)  # gradient after the accumulator exited: not seen by it
    with tf.GradientTape() as t3:
        t3.watch(x)
        j3 = FA(x, v).jvp(x)  # the tangent itself
    return t1.gradient(j1, x), t2.gradient(j2, x), a2.jvp(g2), t3.gradient(j3, x)


@parity(needs=FWD)
def test_forward_over_forward(tf):
    """Nested accumulators: second directional derivative, jvp taken inside or after."""
    x, v = _xv(tf)
    FA = tf.autodiff.ForwardAccumulator
    with FA(x, v) as outer:
        with FA(x, v) as inner:
            y = x * x * x
        ij = inner.jvp(y)
    with FA(x, v) as outer2:
        with FA(x, v) as inner2:
            y2 = x * x * x
    return ij, outer.jvp(ij), outer2.jvp(inner2.jvp(y2))


@parity(needs=[FWD, JAC])
def test_forward_over_jacobian(tf):
    """jvp of a jacobian computed inside the accumulator."""
    x, v = _xv(tf)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        with tf.GradientTape() as t:
            t.watch(x)
            y = x * x * x
        jac = t.jacobian(y, x)
    return jac, acc.jvp(jac)


# --------------------------------------------------------------------------
# tf.hessians (graph mode: inside tf.function)
# --------------------------------------------------------------------------

@parity(needs="hessians", expected=[A([[6.0, 1.0], [1.0, 12.0]])])
def test_hessians_in_function(tf):
    """tf.hessians of sum(x**3) + x0*x1: shape x.shape + x.shape, inside tf.function."""
    @tf.function
    def f(x):
        y = tf.reduce_sum(x ** 3.0) + x[0] * x[1]
        return tf.hessians(y, [x])

    return f(tf.constant([1.0, 2.0]))


@parity(needs="hessians", expected=A(np.full((2, 3, 2, 3), 0.0) + np.eye(6).reshape(2, 3, 2, 3) * 2.0))
def test_hessians_matrix_source(tf):
    """The Hessian of sum(x**2) for a 2x3 x has shape (2, 3, 2, 3): 2 on the diagonal."""
    @tf.function
    def f(x):
        return tf.hessians(tf.reduce_sum(x * x), x)[0]

    return f(tf.ones([2, 3]))


@parity(needs="hessians", expected=(Raised("ValueError"), Raised("RuntimeError")))
def test_hessians_errors(tf):
    """An unconnected Hessian is a ValueError in graph mode; eagerly hessians is a RuntimeError."""
    @tf.function
    def linear(x):
        return tf.hessians(tf.reduce_sum(2.0 * x), x)

    x = tf.constant([1.0, 2.0])
    return raises(lambda: linear(x)), raises(lambda: tf.hessians(tf.reduce_sum(x * x), x))
