"""The shared numeric gradient checker: central differences in float64 vs the tape.

``check_many(items, order=2)`` checks several ops at once (one tape program for all of them, so
the compiled replay is shared); ``check_grads(f, args)`` is the one-op form.  Each item is
``(label, f, args)``: ``f`` maps tapejax Tensors to a Tensor (or a list/tuple of Tensors), ``args``
are NumPy arrays (made float64).  Everything runs under ``jax.enable_x64(True)``.

First order: the scalar ``s = sum_k <f(args)_k, c_k>`` with fixed random cotangents ``c_k``; the
tape's ``ds/dargs`` must match central differences of ``s`` (step ``eps`` per element).
Second order: with a fixed random direction ``v``, the nested tape's ``d/dargs <ds/dargs, v>``
(a Hessian-vector product) must match central differences of the tape's first-order gradient
along ``v``.

``kinks=True`` is for points where ``f`` is not differentiable (ties, ``abs(0)``, clip bounds): TF
picks one of the one-sided derivatives there (or their average, e.g. ``abs'(0) = 0``), so each
element of the tape's gradient must equal the left, the right or the central difference
quotient; the second order is skipped.  The parity tests pin down *which* one TF picks.
"""
import jax
import numpy as np

import tapejax as tf

EPS = 1e-6


def _x64():
    return jax.enable_x64(True)


def _flat_outputs(y):
    if isinstance(y, (list, tuple)):
        out = []
        for v in y:
            out.extend(_flat_outputs(v))
        return out
    return [y]


def _scalar(f, xs, cts):
    """sum_k <f(xs)_k, c_k> as a tapejax scalar (float outputs only)."""
    outs = [o for o in _flat_outputs(f(*xs)) if o.dtype.is_floating]
    total = tf.constant(0.0, tf.float64)
    for o, c in zip(outs, cts):
        total = total + tf.reduce_sum(tf.cast(o, tf.float64) * c)
    return total


def _cotangents(f, args, rng):
    xs = [tf.constant(a) for a in args]
    outs = [o for o in _flat_outputs(f(*xs)) if o.dtype.is_floating]
    return [tf.constant(rng.standard_normal(tuple(o.shape))) for o in outs]


def _value(f, args, cts):
    return float(_scalar(f, [tf.constant(a) for a in args], cts).numpy())


def _numeric_grad(f, args, cts, eps, sided=False):
    """Central (and with ``sided`` the left/right) difference quotients of the scalar."""
    center, left, right = [], [], []
    f0 = _value(f, args, cts) if sided else None
    for i, a in enumerate(args):
        gc, gl, gr = (np.zeros_like(a) for _ in range(3))
        for idx in np.ndindex(a.shape):
            ap = [x.copy() for x in args]
            am = [x.copy() for x in args]
            ap[i][idx] += eps
            am[i][idx] -= eps
            fp, fm = _value(f, ap, cts), _value(f, am, cts)
            gc[idx] = (fp - fm) / (2 * eps)
            if sided:
                gr[idx] = (fp - f0) / eps
                gl[idx] = (f0 - fm) / eps
        center.append(gc)
        left.append(gl)
        right.append(gr)
    return center, left, right


def _tape_grad(f, args, cts):
    xs = [tf.constant(a) for a in args]
    with tf.GradientTape() as t:
        t.watch(xs)
        s = _scalar(f, xs, cts)
    # (a gather's params get IndexedSlices, as in TF: densified here)
    return [None if g is None else np.asarray(tf.convert_to_tensor(g).numpy()) for g in t.gradient(s, xs)]


def _tape_hvp(f, args, cts, vs):
    xs = [tf.constant(a) for a in args]
    with tf.GradientTape() as t2:
        t2.watch(xs)
        with tf.GradientTape() as t1:
            t1.watch(xs)
            s = _scalar(f, xs, cts)
        gs = t1.gradient(s, xs)
        h = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(gs, vs) if g is not None])
    return [None if g is None else np.asarray(tf.convert_to_tensor(g).numpy()) for g in t2.gradient(h, xs)]


def _fmt_mismatch(label, what, i, got, want):
    bad = ~np.isclose(got, want, rtol=1e-4, atol=1e-6, equal_nan=True)
    idx = tuple(int(v[0]) for v in np.nonzero(bad)) if bad.any() else ()
    return (f"{label}: {what} of argument {i} differs at {idx}: tape {got[idx] if idx else got!r}, "
            f"numeric {want[idx] if idx else want!r}")


def check_many(items, *, order=2, kinks=False, eps=EPS, rtol=1e-5, atol=1e-6, seed=0):
    """Check every ``(label, f, args)`` item; raises AssertionError listing every mismatch."""
    rng = np.random.default_rng(seed)
    errors = []
    with _x64():
        prepared = []
        for label, f, args in items:
            args = [np.array(a, dtype=np.float64) for a in args]
            prepared.append((label, f, args, _cotangents(f, args, rng)))
        # One tape program for all items: distinct inputs per item, summed scalar.
        offsets = np.cumsum([0] + [len(a) for _, _, a, _ in prepared])

        def joint(*xs):
            return [_scalar(f, xs[offsets[k]:offsets[k + 1]], cts) for k, (_, f, _, cts) in enumerate(prepared)]

        all_args = [a for _, _, args, _ in prepared for a in args]
        ones = [tf.constant(np.float64(1.0)) for _ in prepared]
        tape = _tape_grad(joint, all_args, ones)
        for k, (label, f, args, cts) in enumerate(prepared):
            got = tape[offsets[k]:offsets[k + 1]]
            center, left, right = _numeric_grad(f, args, cts, eps, sided=kinks)
            for i, g in enumerate(got):
                if g is None:
                    errors.append(f"{label}: the tape gave None for argument {i}")
                    continue
                ok = np.isclose(g, center[i], rtol=rtol, atol=atol, equal_nan=True)
                if kinks:
                    ok |= np.isclose(g, left[i], rtol=rtol, atol=atol) | np.isclose(g, right[i], rtol=rtol, atol=atol)
                if not ok.all():
                    errors.append(_fmt_mismatch(label, "1st-order gradient", i, g, center[i]))
        if order >= 2 and not kinks:
            vs = [rng.standard_normal(a.shape) for a in all_args]
            hvp = _tape_hvp(joint, all_args, ones, [tf.constant(v) for v in vs])
            step = eps * 1e2
            # The first-order joint program again (a cache hit) at x +- step * v.
            plus = _tape_grad(joint, [a + step * v for a, v in zip(all_args, vs)], ones)
            minus = _tape_grad(joint, [a - step * v for a, v in zip(all_args, vs)], ones)
            for k, (label, f, args, cts) in enumerate(prepared):
                for j in range(offsets[k], offsets[k + 1]):
                    i, h = j - offsets[k], hvp[j]
                    if plus[j] is None:
                        continue
                    want = (plus[j] - minus[j]) / (2 * step)
                    if h is None:
                        if np.allclose(want, 0, atol=atol * 10):
                            continue  # a piecewise-linear op: no second derivative, None is right
                        errors.append(f"{label}: the nested tape gave None for argument {i}")
                        continue
                    if not np.allclose(h, want, rtol=rtol * 100, atol=atol * 100, equal_nan=True):
                        errors.append(_fmt_mismatch(label, "2nd-order (Hessian-vector)", i, h, want))
    if errors:
        raise AssertionError("gradient check failed:\n  " + "\n  ".join(errors))


def check_grads(f, args, **kw):
    """``check_many`` for one function."""
    check_many([(getattr(f, "__name__", "f"), f, args)], **kw)


def check_none(f, args):
    """The tape's gradient of ``f`` with respect to every argument is None (TF: no gradient)."""
    with _x64():
        xs = [tf.constant(np.array(a, np.float64)) for a in args]
        with tf.GradientTape() as t:
            t.watch(xs)
            ys = [tf.cast(o, tf.float64) for o in _flat_outputs(f(*xs))]
        grads = t.gradient(ys, xs)
    bad = [i for i, g in enumerate(grads) if g is not None]
    if bad:
        raise AssertionError(f"expected None gradients, got tensors for arguments {bad}")
