"""TF's differentiation conventions for a function written in plain JAX (Keras 3's JAX backend).

JAX and TF agree on every derivative away from kinks and ties; at them they differ: JAX gives
``|x|'(0) = 1`` where TF gives 0, splits ``maximum(x, y)`` / ``minimum(x, y)`` half and half at
a tie where TF gives it all to ``x`` (so ``clip``'s bounds pass the gradient in TF, half of it
in JAX), takes ``sqrt``'s derivative at 0 as ``inf`` where TF's rule gives 0 for a zero
cotangent (``where(x > 0, sqrt(x), 0)`` is NaN-free in TF); ``pow(x, y)``'s d/dy at ``x = 0``
is TF's 0 (JAX 0.10 agrees; older JAX gave NaN) (TF_SEMANTICS 11 and 12).

tapejax's own ops follow TF (``ops._grads``).  A function tapejax records as one op but did not
write, a Keras layer or loss, is JAX code, so ``with_tf_rules`` runs it with TF's rules instead:
it traces the function to a jaxpr (``jax.make_jaxpr``: its Python runs once, as it would
anyway) and evaluates the equations, the primitives of ``_RULES`` as ``ops._grads``' functions
(the same forward values, TF's derivatives), the bodies of ``jit`` calls inlined so their
equations get the same treatment (``jnp.clip``'s as TF's ``clip_by_value``), every other
equation bound as it is (a ``custom_jvp`` function, ``jax.nn.relu``, keeps the rule its author
gave it; a loop or a branch keeps JAX's rules inside it).  A Keras MAE on targets that are
exactly 0, or an L1 penalty on zero-initialised biases, then trains as it does in TF.
"""
import contextlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Literal, primitives as P

from . import _grads as G


def _clamp(lo: Any, x: Any, hi: Any) -> Any:
    """``lax.clamp``'s order of arguments; TF's ``clip_by_value`` where ``lo <= hi`` (the same
    values; ``lax.clamp`` is not otherwise defined)."""
    return G.clip_by_value(x, lo, hi)


def _pow(x: Any, y: Any) -> Any:
    """``lax.pow``; TF's ``pow`` (d/dy 0 at x = 0, not NaN) where both are of one float dtype."""
    if x.dtype == y.dtype and jnp.issubdtype(x.dtype, jnp.floating):
        return G.pow(x, y)
    return lax.pow(x, y)


#: JAX primitive -> the function computing the same values with TF's derivative (each takes the
#: primitive's operands, and is used only where the equation has no parameters that change it).
_RULES: "dict[Any, Callable[..., Any]]" = {
    P.abs_p: G.tf_abs,
    P.max_p: G.maximum,
    P.min_p: G.minimum,
    P.sqrt_p: G.sqrt,
    P.rsqrt_p: G.rsqrt,
    P.clamp_p: _clamp,
    P.pow_p: _pow,
}

#: ``_RULES`` inside ``jnp.clip``, which computes ``maximum(lo, x)`` then ``minimum(hi, x)``:
#: the tie goes to ``x`` there (TF's ``clip_by_value``: inclusive bounds), not to the bound.
_CLIP_RULES = {**_RULES, P.max_p: lambda lo, x: G.maximum(x, lo), P.min_p: lambda hi, x: G.minimum(x, hi)}


#: ``jax.nn.dot_product_attention``'s float16 logits (Keras 3's ``MultiHeadAttention`` under
#: ``mixed_float16``) ask for this algorithm and fall back to the default where the einsum raises;
#: XLA's CPU refuses it only when the program compiles, after the trace, so a traced call failed
#: there ("The precision 'F16_F16_F32' is not supported by dot_general on CPU").  On CPU it is
#: bound with the default precision: float16 operands, the float32 result asked for.
_F16_F32 = lax.DotAlgorithmPreset.F16_F16_F32


def _plain(params: dict) -> bool:
    """Whether an equation's parameters leave the primitive's meaning as ``_RULES`` assumes (an
    ``accuracy`` request of ``sqrt`` is left to JAX)."""
    return all(v is None for v in params.values())


def _eval(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], rules: dict, given: "dict | None" = None) -> list:
    """Evaluate ``jaxpr`` with ``rules``; ``given`` maps some of its variables to values that replace
    what their equations compute (every later use reads the given value)."""
    env: dict = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        prim = eqn.primitive
        rule = rules.get(prim)
        if rule is not None and _plain(eqn.params):
            outs = [rule(*invals)]
        elif prim is P.jit_p:
            inner = eqn.params["jaxpr"]
            outs = _eval(inner.jaxpr, inner.consts, invals, _CLIP_RULES if eqn.params.get("name") == "clip" else rules)
        else:
            params = prim.get_bind_params(eqn.params)   # (JAX 0.10: the parameters to bind with)
            subfuns: Sequence[Any] = ()
            if isinstance(params, tuple):   # (older JAX: (functions, parameters))
                subfuns, params = params
            if prim is P.dot_general_p and params.get("precision") == _F16_F32 and jax.default_backend() == "cpu":
                params = {**params, "precision": None}   # (XLA's CPU has no such algorithm: see ``_F16_F32``)
            ctx = getattr(eqn, "ctx", None)   # (the equation's context: a compute_on, a name scope)
            with ctx.manager if ctx is not None else contextlib.nullcontext():
                out = prim.bind(*subfuns, *invals, **params)
            outs = out if prim.multiple_results else [out]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x if given is None else given.get(v, x)
    return [read(v) for v in jaxpr.outvars]


def with_tf_rules(fn: Callable[..., Any], cut: Sequence[int] = ()) -> Callable[..., Any]:
    """``fn`` (arrays in, a pytree of arrays out) computing the same values, differentiated with
    TF's conventions at kinks and ties (see the module docstring).

    ``cut``: positions of ``fn``'s flat outputs given as the last ``len(cut)`` arguments instead:
    the other outputs are computed from those values, so they are differentiable w.r.t. them (an
    intermediate a Keras model also returns, as TF's graph holds one tensor for it: Grad-CAM's
    conv output).  An output that is one of ``fn``'s inputs (no equation computes it) is not cut."""
    def run(*args: Any) -> Any:
        given = args[len(args) - len(cut):] if cut else ()
        args = args[:len(args) - len(cut)] if cut else args
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        outvars = closed.jaxpr.outvars
        over = {outvars[i]: x for i, x in zip(cut, given) if not isinstance(outvars[i], Literal)} if cut else None
        flat = _eval(closed.jaxpr, closed.consts, args, _RULES, over)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), flat)
    return run
