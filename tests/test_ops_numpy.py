"""tapejax.numpy: every wrapped jax.numpy / jax.nn / jax.scipy.special function records on the tape,
gives jnp's value, and JAX's gradient (one tape program checks them all at once)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
import tapejax.numpy as tnp

X = np.array([0.15, 0.4, 0.7], np.float32)
Y = np.array([0.6, 0.25, 0.9], np.float32)


#: A sample across the wrapped namespaces (elementwise, reductions, shape ops, linear algebra,
#: special functions, activations); every wrapped name is checked structurally below.
SAMPLE = {
    "": ["sin", "cos", "exp", "log", "log1p", "sqrt", "tanh", "arctan2", "hypot", "power", "maximum",
         "where", "sum", "mean", "var", "std", "prod", "cumsum", "cumprod", "max", "logaddexp", "sinc",
         "outer", "dot", "kron", "convolve", "diff", "sort", "flip", "roll", "tile", "repeat", "concatenate",
         "stack", "clip", "square", "reciprocal", "expm1", "cbrt", "deg2rad", "interp", "polyval", "trapezoid",
         "median", "quantile", "nanmean", "average", "einsum", "matmul", "cross"],
    "nn.": ["relu", "gelu", "silu", "softplus", "sigmoid", "softmax", "log_softmax", "logsumexp", "elu",
            "celu", "glu", "standardize", "one_hot"],
    "special.": ["erf", "erfc", "gammaln", "digamma", "expit", "logit", "xlogy", "entr", "i0e", "ndtr",
                 "ndtri", "logsumexp", "zeta"],
}

_ARGS = {"where": lambda: (X > 0.3, X, Y), "interp": lambda: (X, np.sort(Y), Y), "polyval": lambda: (Y, X),
         "einsum": lambda: ("i,i->i", X, Y), "one_hot": lambda: (np.array([0, 2]), 3),
         "quantile": lambda: (X, 0.3), "cross": lambda: (X, Y), "matmul": lambda: (X, Y), "glu": lambda: (np.r_[X, Y],),
         "concatenate": lambda: ([X, Y],), "stack": lambda: ([X, Y],), "tile": lambda: (X, 2),
         "repeat": lambda: (X, 2), "roll": lambda: (X, 1), "clip": lambda: (X, 0.2, 0.6), "zeta": lambda: (X + 2, Y)}


def _candidates():
    """(label, tnp function, jnp function, args) for the sample (X, or (X, Y) when unary fails)."""
    out = []
    spaces = {"": (tnp, jnp), "nn.": (tnp.nn, jax.nn), "special.": (tnp.special, jax.scipy.special)}
    for prefix, names in SAMPLE.items():
        mod, src = spaces[prefix]
        for name in names:
            ref = getattr(src, name)
            options = [_ARGS[name]()] if name in _ARGS else [(X,), (X, Y)]
            for args in options:
                try:
                    want = ref(*args)
                except Exception:  # noqa: BLE001 - not callable this way: try the next signature
                    continue
                out.append((prefix + name, getattr(mod, name), ref, args, want))
                break
            else:
                raise AssertionError(f"sample function {prefix}{name} could not be called")
    return out


CANDIDATES = _candidates()


def _tensors(args):
    return [tf.constant(a) if isinstance(a, np.ndarray) else a for a in args]


def test_every_name_is_wrapped_with_its_type_and_differentiability():
    """All of jnp's array functions are tape ops typed 'jnp.<name>'; the non-differentiable list is honoured."""
    for prefix, mod in (("jnp.", tnp), ("jnp.linalg.", tnp.linalg), ("jnp.fft.", tnp.fft), ("jax.nn.", tnp.nn),
                        ("jax.scipy.special.", tnp.special)):
        for name in mod.WRAPPED:
            prim = getattr(mod, name).primitive
            assert prim.name == prefix + name
            assert prim.differentiable == (name not in tnp.NON_DIFFERENTIABLE)


def test_namespace_is_wrapped_by_a_loop():
    """Hundreds of functions are wrapped, each recorded under type 'jnp.<name>'."""
    assert len(tnp.WRAPPED) > 250 and len(CANDIDATES) == sum(map(len, SAMPLE.values()))
    assert tnp.sin.primitive.name == "jnp.sin" and tnp.nn.relu.primitive.name == "jax.nn.relu"
    assert tnp.float32 is jnp.float32 and tnp.pi == jnp.pi and tnp.shape is jnp.shape


def test_values_match_jnp():
    """Each candidate gives jnp's value as a Tensor."""
    bad = []
    for label, f, ref, args, want in CANDIDATES:
        got = f(*_tensors(args))
        if not np.allclose(np.asarray(got), np.asarray(want), rtol=1e-6, equal_nan=True):
            bad.append(label)
    assert not bad, f"values differ from jax.numpy: {bad}"


def test_gradients_match_jax_grad():
    """One tape program for every sampled function vs one jax.grad of the same sum."""
    keep = [(label, f, ref, args) for label, f, ref, args, want in CANDIDATES
            if np.asarray(want).dtype.kind == "f"]
    pos = [[i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
           for _, _, _, args in keep]

    def total(ref_args):
        return sum(jnp.sum(ref(*a)) for (_, _, ref, _), a in zip(keep, ref_args))

    def substitute(args, p, vals):
        args = list(args)
        for i, v in zip(p, vals):
            args[i] = v
        return args

    flat = [[jnp.asarray(args[i]) for i in p] for (_, _, _, args), p in zip(keep, pos)]
    want = jax.jit(jax.grad(lambda fl: total([substitute(a, p, v) for (_, _, _, a), p, v in zip(keep, pos, fl)])))(flat)
    xs = [[tf.constant(args[i]) for i in p] for (_, _, _, args), p in zip(keep, pos)]
    with tf.GradientTape() as t:
        t.watch(xs)
        ys = [tf.reduce_sum(f(*_tensors(substitute(args, p, x)))) for (_, f, _, args), p, x in zip(keep, pos, xs)]
    grads = t.gradient(ys, xs)
    bad = []
    for (label, *_), got, w in zip(keep, grads, want):
        for g, wi in zip(got, w):
            if g is None:
                if np.any(np.asarray(wi) != 0):
                    bad.append(label + " (None)")
            elif not np.allclose(g.numpy(), np.asarray(wi), rtol=1e-4, atol=1e-6, equal_nan=True):
                bad.append(label)
    assert len(keep) > 60
    assert not bad, f"gradients differ from jax.grad: {bad}"


def test_non_differentiable_list_gives_none():
    """Functions in NON_DIFFERENTIABLE give None (TF's convention), e.g. floor, round."""
    x = tf.constant(X * 3)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        ys = [tnp.floor(x), tnp.round(x), tnp.sign(x), tnp.floor_divide(x, 2.0)]
        z = tnp.sin(x)
    assert all(t.gradient(y, x) is None for y in ys)
    np.testing.assert_allclose(t.gradient(z, x).numpy(), np.cos(X * 3), rtol=1e-6)


def test_static_arguments_and_pytrees():
    """axis/keepdims/dtype are static; Variables are read (watched); outputs keep their structure."""
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape() as t:
        m = tnp.mean(v, axis=0, keepdims=True)
        q, r = tnp.linalg.qr(v)
        s = tnp.sum(m) + tnp.sum(r)
    assert m.shape == (1, 2) and isinstance(q, tf.Tensor)
    want = jax.grad(lambda a: jnp.sum(jnp.mean(a, axis=0, keepdims=True)) + jnp.sum(jnp.linalg.qr(a)[1]))(
        jnp.asarray(v.numpy()))
    np.testing.assert_allclose(t.gradient(s, v).numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("name", ["sin", "exp", "tanh"])
def test_second_order(name):
    """Nested tapes through tnp functions give JAX's second derivative."""
    x = tf.constant(0.7)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = getattr(tnp, name)(x)
        g = t1.gradient(y, x)
    want = jax.grad(jax.grad(getattr(jnp, name)))(0.7)
    np.testing.assert_allclose(t2.gradient(g, x).numpy(), want, rtol=1e-5)
