"""Three of tf2jax's op conversions, replaced so that TF's loops and conditionals load and train.

tf_keras' ``LSTM`` / ``GRU`` (and any ``tf.while_loop`` over a ``TensorArray``) run a ``While``
op whose body writes each step's output with ``TensorListSetItem``; Keras' ``Dropout`` under a
tensor ``training`` flag is an ``If`` with a random op in one branch.  tf2jax 0.3.8 converts
them with gaps this module closes by replacing their entries in its op registry (``install``,
once, when a TF SavedModel is first loaded):

* ``TensorListSetItem`` on a list still held as a NumPy array (the reserved list, before the
  loop makes it a JAX value) with a NumPy index fails ("'numpy.ndarray' object has no attribute
  'at'"): the list is made a JAX array first, always.
* ``While`` / ``StatelessWhile`` become ``lax.while_loop``, which reverse mode does not
  differentiate, so a loaded LSTM could run but not fine-tune.  Here, where the trip count does
  not depend on traced values (``_trip_count``: the loop variables the condition reads, closed
  under what the body computes them from, all start as constants of the graph, as a Keras RNN's
  ``time < time_steps`` or ``for i in tf.range(4)``), the loop runs on those variables alone at
  conversion time and becomes a ``lax.scan`` of that many steps.  Else, where TF's
  ``while_v2`` was given a constant ``maximum_iterations`` (its second loop variable; the
  first is the counter, and the condition checks ``counter < maximum_iterations``), it becomes
  a scan of that many steps, each running the body under ``lax.cond`` while the condition
  holds.  Both give the loop's values and are differentiable.  Otherwise (a data-dependent
  loop with no bound) it stays tf2jax's ``while_loop``.
* ``If`` / ``StatelessIf`` with a random op in a branch (``tf.cond(training, lambda:
  tf.nn.dropout(h, 0.5), lambda: h)``) fail: tf2jax passes the op a random key its ``If`` does
  not take.  Here the key is split between the two branches.

The replacement uses tf2jax's private registry (``tf2jax._src.ops._jax_ops``): where that is
missing (another tf2jax), nothing is replaced and tf2jax's own conversions apply.  The registry
is process-wide: ``tf2jax.convert`` called directly after a load converts with these too (the
same values; loops that become scans are differentiable).
"""
from typing import Any, Callable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

_INSTALLED: list = []


def install() -> None:
    """Replace tf2jax's ``TensorListSetItem`` and ``While`` conversions (once per process)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    try:
        from tf2jax._src import ops
    except ImportError:   # pragma: no cover - another tf2jax layout: its own conversions stay
        return
    registry = getattr(ops, "_jax_ops", None)
    needed = ("_StatelessWhile", "_split_args", "_merge_args", "_check_attrs", "_create_tensor_list", "anp")
    if not isinstance(registry, dict) or not all(hasattr(ops, n) for n in needed):   # pragma: no cover
        return
    registry["TensorListSetItem"] = _set_item_parser(ops)
    bounded = _bounded_while_class(ops)

    def parse_while(proto: Any) -> Any:
        ops._check_attrs(proto, {"T", "body", "cond", "parallel_iterations", "output_shapes"})
        return bounded(dict(cond_fun=proto.attr["cond"].func.name, body_fun=proto.attr["body"].func.name))

    registry["While"] = parse_while
    registry["StatelessWhile"] = parse_while
    random_if = _random_if_class(ops)

    def parse_if(proto: Any) -> Any:
        ops._check_attrs(proto, {"Tcond", "Tin", "Tout", "output_shapes", "then_branch", "else_branch"})
        return random_if(dict(then_fun=proto.attr["then_branch"].func.name,
                              else_fun=proto.attr["else_branch"].func.name))

    registry["If"] = parse_if
    registry["StatelessIf"] = parse_if


def _random_if_class(ops: Any) -> type:
    class RandomIf(ops._IfOp):
        """tf2jax's ``If``, also when a branch draws random numbers (``rng``: split between them)."""

        def __call__(self, pred: Any, *operand: Any, then_fun: Any, else_fun: Any, rng: Any = None) -> Any:
            args = [jnp.asarray(x) for x in operand]
            if rng is None:
                return jax.lax.cond(pred, lambda a: then_fun(*a), lambda a: else_fun(*a), args)
            then_key, else_key = jax.random.split(rng)
            return jax.lax.cond(pred, lambda a: then_fun(*a, rng=then_key), lambda a: else_fun(*a, rng=else_key),
                                args)

    RandomIf.__name__ = RandomIf.__qualname__ = "RandomIf"
    return RandomIf


def _set_item_parser(ops: Any) -> Callable[[Any], Callable[..., Any]]:
    import tensorflow as tf

    def parse(proto: Any) -> Callable[..., Any]:
        ops._check_attrs(proto, {"element_dtype", "resize_if_index_out_of_bounds"})
        if proto.attr["resize_if_index_out_of_bounds"].b:
            raise ValueError("resize_if_index_out_of_bounds=True in TensorListSetItem is not supported")
        dtype = ops.anp.get_jax_dtype(tf.as_dtype(proto.attr["element_dtype"].type))

        def set_item(xs: Any, index: Any, item: Any) -> Any:
            if xs.size == 0:   # (an empty reserved list: its elements' shape comes from the item)
                xs = ops._create_tensor_list(xs.shape[0], list(item.shape), dtype=dtype)
            return jnp.asarray(xs).at[index].set(item)

        return set_item

    return parse


def _static_bound(args: tuple) -> int:
    """``while_v2``'s iteration bound from its first two loop variables (counter, maximum), or -1
    where it is not a constant of the graph."""
    if len(args) < 2:
        return -1
    counter, maximum = args[0], args[1]
    if not (_is_constant(maximum) and np.ndim(maximum) == 0
            and np.issubdtype(np.asarray(maximum).dtype, np.integer)):
        return -1
    bound = int(maximum)
    if _is_constant(counter) and np.ndim(counter) == 0:
        bound -= int(counter)
    return bound


def _is_constant(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic))


#: A loop whose trip count takes more steps than this to find runs as tf2jax's ``while_loop``.
_MAX_COUNTED = 100_000


def _trip_count(cond: Callable[[tuple], Any], body: Callable[[tuple], tuple], init: tuple) -> int:
    """How many times the loop ``cond`` / ``body`` from ``init`` runs, where that does not depend
    on traced values, else -1.

    The loop variables the condition reads, closed under what the body computes them from
    (a dead-code pass over each jaxpr), must all start as constants of the graph (a Keras RNN's
    ``time < time_steps``); the loop is then run on those alone, at trace time."""
    from jax._src.interpreters import partial_eval as pe

    specs = tuple(None if a is None else jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)) for a in init)
    try:
        cond_j = jax.make_jaxpr(cond)(specs)
        body_j = jax.make_jaxpr(body)(specs)
    except Exception:  # noqa: BLE001 - the analysis only picks the faster loop
        return -1
    leaves, tree = jax.tree_util.tree_flatten(init, is_leaf=lambda a: a is None)
    if len(cond_j.jaxpr.invars) != len([a for a in leaves if a is not None]):
        return -1
    _, used = pe.dce_jaxpr(cond_j.jaxpr, [True] * len(cond_j.jaxpr.outvars))
    needed = [bool(u) for u in used]
    while True:
        _, used = pe.dce_jaxpr(body_j.jaxpr, needed)
        grown = [a or bool(b) for a, b in zip(needed, used)]
        if grown == needed:
            break
        needed = grown
    flat = [a for a in leaves if a is not None]
    if any(k and not _is_constant(a) for k, a in zip(needed, flat)):
        return -1
    cond_s, _ = pe.dce_jaxpr(cond_j.jaxpr, [True] * len(cond_j.jaxpr.outvars), instantiate=needed)
    body_s, _ = pe.dce_jaxpr(body_j.jaxpr, needed, instantiate=needed)
    vals = [a for k, a in zip(needed, flat) if k]
    count = 0
    with jax.ensure_compile_time_eval():
        while bool(np.asarray(jax.core.eval_jaxpr(cond_s, cond_j.consts, *vals)[0])):
            vals = jax.core.eval_jaxpr(body_s, body_j.consts, *vals)
            count += 1
            if count > _MAX_COUNTED:
                return -1
    return count


def _bounded_while_class(ops: Any) -> type:
    base = ops._StatelessWhile

    class BoundedWhile(base):
        """tf2jax's ``While``, as a bounded differentiable loop where ``maximum_iterations`` is a
        constant (see the module docstring)."""

        def __call__(self, *all_args: Any, cond_fun: Any, body_fun: Any, rng: Any = None) -> Any:
            const_idxs_args, trace_idxs_args = ops._split_args(all_args, body_fun.output_is_input)
            if not trace_idxs_args:
                return super().__call__(*all_args, cond_fun=cond_fun, body_fun=body_fun, rng=rng)
            trace_idxs, trace_args = zip(*trace_idxs_args)

            def merged(carried: tuple) -> tuple:
                return ops._merge_args(const_idxs_args, tuple(zip(trace_idxs, carried)))

            def cond(carry: tuple) -> Any:
                *carried, key = carry
                _, cond_key, _ = (None,) * 3 if key is None else jax.random.split(key, 3)
                out = cond_fun(*merged(tuple(carried)), rng=cond_key)
                if len(out) != 1:
                    raise ValueError(f"Expected the while loop's condition to return one value, got {out}")
                return jnp.reshape(out[0], ())

            def body(carry: tuple) -> tuple:
                *carried, key = carry
                next_key, _, body_key = (None,) * 3 if key is None else jax.random.split(key, 3)
                out = body_fun(*merged(tuple(carried)), rng=body_key)
                return tuple(jnp.asarray(out[i]) for i in trace_idxs) + (next_key,)

            # lists reserved empty take their elements' shape from the body's first output
            specs = jax.eval_shape(body, tuple(trace_args) + (rng,))
            start = tuple(np.zeros(s.shape, s.dtype) if np.size(a) == 0 and s.shape != np.shape(a) else a
                          for a, s in zip(trace_args, specs[:-1])) + (rng,)
            count = _trip_count(cond, body, start)
            bound = _static_bound(all_args)
            if count < 0 and bound < 0:   # (a data-dependent loop: tf2jax's while_loop)
                return super().__call__(*all_args, cond_fun=cond_fun, body_fun=body_fun, rng=rng)
            init = tuple(jnp.asarray(a, s.dtype) for a, s in zip(start[:-1], specs[:-1])) + (rng,)
            if count >= 0:   # exactly that many steps
                def step(carry: tuple, _: Any) -> tuple:
                    return body(carry), None
                length = count
            else:   # at most ``maximum_iterations`` steps, the rest masked
                def step(carry: tuple, _: Any) -> tuple:
                    return jax.lax.cond(cond(carry), body, lambda c: c, carry), None
                length = bound
            out, _ = jax.lax.scan(step, init, None, length=length)
            *carried, _ = out
            return ops._merge_args(const_idxs_args, tuple(zip(trace_idxs, carried)))

    BoundedWhile.__name__ = BoundedWhile.__qualname__ = "BoundedWhile"
    return BoundedWhile
