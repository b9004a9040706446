"""``GradientTape.explain``: why is ``d target / d source`` None?

The tape already knows: tracked tensors have codes, and cut points (outputs
of ops TF does not differentiate, integer/bool outputs, and what is computed
from them alone) are kept in ``tape._cuts`` with their reason.  Walking back
from the target over recorded nodes and cut points finds the source, and the
first cut met on that path names the op that stopped the gradient.
"""
from ..core import dtypes as _dtypes, nest as _nest
from ..core.tensor import Tensor
from .nodes import OUT
from .program import slice_tape


def _name(x):
    if isinstance(x, Tensor):
        return f"tensor (shape={tuple(x.shape)}, dtype={x.dtype.name})"
    return f"variable {x.name!r}"


def _inputs_of(tape, id_):
    """Input ids of whatever produced ``id_`` on the tape, and the cut reason if any."""
    code = tape._codes.get(id_)
    if code is not None and code >= 0:
        node = tape._nodes[code // OUT]
        if node.prim.name == "ReadVariableOp":
            var_code = node.refs[0]
            for vid, c in tape._codes.items():
                if c == var_code:
                    return (vid,), None, node.prim.name
        return node.ids, None, node.prim.name
    cut = tape._cuts.get(id_)
    if cut is not None:
        reason, op, ids = cut
        return ids, reason, op
    return (), None, None


def _find_path(tape, target_id, source_id):
    """Depth-first from target back to source; returns the list of cut reasons on the path, or None."""
    stack = [(target_id, [])]
    seen = set()
    while stack:
        i, cuts = stack.pop()
        if i == source_id:
            return cuts
        if i in seen:
            continue
        seen.add(i)
        ids, reason, op = _inputs_of(tape, i)
        here = cuts + ([(op, reason)] if reason else [])
        for j in ids:
            if j:
                stack.append((j, here))
    return None


def explain(tape, target, source):
    """A sentence on whether ``tape.gradient(target, source)`` is connected, and if not why."""
    flat_t = _nest.flatten(target)
    if len(flat_t) != 1 or len(_nest.flatten(source)) != 1:
        return "\n".join(explain(tape, t, s) for t in flat_t for s in _nest.flatten(source))
    t, s = flat_t[0], _nest.flatten(source)[0]
    sname = _name(s)
    is_var = not isinstance(s, Tensor)
    if tape._used:
        return ("This non-persistent tape was already used by a gradient() call and has released "
                "what it recorded; use GradientTape(persistent=True) to ask several questions.")
    if not _dtypes.is_trainable_dtype(s._meta.dtype):
        return (f"The source is an integer/bool {sname}: TensorFlow gives integer and bool sources no "
                "gradient (None). Cast it to a float dtype before the ops that use it, and watch that.")
    if s._id not in tape._codes:
        if is_var:
            why = tape._unwatched.get(s._id)
            if why == "trainable=False":
                return (f"The source {sname} was created with trainable=False, so the tape did not "
                        "watch it when it was read: call tape.watch(variable) inside the block.")
            if why == "watch_accessed_variables=False":
                return (f"The tape was created with watch_accessed_variables=False and {sname} was "
                        "never passed to tape.watch().")
            return (f"The source {sname} was never read inside the tape's `with` block (or only while "
                    "recording was paused), so nothing recorded depends on it.")
        if tape._start_id is not None and s._id < tape._start_id:
            return (f"The source {sname} was created before the tape started recording and was never "
                    "watched: call tape.watch(x) inside the block before using it.")
        for start, end in tape._pauses:
            if start < s._id < end:
                return f"The source {sname} was computed inside tape.stop_recording(), so it is a constant to this tape."
        if s._id in tape._cuts:
            ids, reason, op = _inputs_of(tape, s._id)
            return (f"The source {sname} is itself the output of a cut: {reason or 'it is computed from cut tensors'} "
                    f"(op {op}). Gradients stop there.")
        return (f"The source {sname} was never watched and is not computed from a watched tensor or "
                "a watched Variable on this tape: call tape.watch() on it.")
    t_id = t._id
    t_code = tape._codes.get(t_id)
    s_code = tape._codes[s._id]
    if t_code is not None:
        slice_idx, needed = slice_tape(tape._nodes, [s_code], [t_code])
        if s_code in needed:
            custom = sorted({tape._nodes[i].prim.name for i in slice_idx
                             if getattr(tape._nodes[i].prim, "late", None) is not None})
            if custom:
                return (f"Connected: the target depends on the source {sname} through recorded ops, "
                        f"among them custom gradients ({', '.join(custom)}): its gradient is not None "
                        "unless, on every path, a custom gradient's grad_fn returns None for the input "
                        "the path goes through (known only when gradient() calls grad_fn).")
            return (f"Connected: the target depends on the source {sname} through recorded ops; "
                    "its gradient is not None.")
    path = _find_path(tape, t_id, s._id)
    if path is None:
        if t_id not in tape._codes and t_id not in tape._cuts:
            if tape._start_id is not None and t_id < tape._start_id:
                return "The target was computed before the tape started recording, so nothing on the tape leads to it."
            for start, end in tape._pauses:
                if start < t_id < end:
                    return "The target was computed inside tape.stop_recording(); nothing recorded leads to it."
            return ("The target is not computed from anything this tape tracks (computed outside the "
                    "tape's `with` block, inside stop_recording(), or only from unwatched tensors; or "
                    "rebuilt from raw arrays by JAX: jax.tree_util.tree_map and jax.jit over Tensors "
                    "hand the function their arrays and wrap its results in new Tensors the tape never "
                    "saw, so map with is_leaf=lambda x: isinstance(x, tf.Tensor) and tape ops, or use "
                    "tapejax.op).")
        return f"The target does not depend on the source {sname}: no recorded op leads from one to the other."
    op, reason = path[-1] if path else ("?", "unknown")
    return f"The path from the source {sname} to the target is cut at op {op}: {reason}."
