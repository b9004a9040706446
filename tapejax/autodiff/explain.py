"""``GradientTape.explain``: why is ``d target / d source`` None?

The tape already knows: tracked tensors have codes, and cut points (outputs
of ops TF does not differentiate, integer/bool outputs, and what is computed
from them alone) are kept in ``tape._cuts`` with their reason.  Walking back
from the target over recorded nodes and cut points finds the source, and the
first cut met on that path names the op that stopped the gradient.

Each answer names the cause in the user's terms and, where there is one, the fix: the classic
GradientTape mistakes (a value sent through NumPy or ``float()``, a Variable rebound to a Tensor
by ``w = w - lr * g``, a loss computed after the block, an accuracy used as a loss, ``round`` in
the forward, a Keras model's variables listed before it is built) each get their own sentence
(``tests/test_explain_pitfalls.py``; their TF parity in ``tests/parity/test_gradient_pitfalls.py``).
"""
from ..core import dtypes as _dtypes, nest as _nest
from ..core.tensor import Tensor
from .nodes import OUT
from .program import slice_tape

_COMPARE = ("a comparison's bool result carries no gradient: select with tf.where(cond, a, b), which "
            "differentiates through a and b, or use tf.sigmoid(k * (x - t)) as a smooth step")
_ROUND = ("to pass the gradient through the rounding (a straight-through estimator), write "
          "x + tf.stop_gradient(tf.round(x) - x), with the op you used in place of tf.round")
_ARG = ("a loss must be a smooth function of the source: softmax cross-entropy instead of an "
        "accuracy, tf.nn.softmax for a soft choice")
# What to do instead, for the ops users most often meet as the cut on the path.
_FIXES = {
    **dict.fromkeys(("ArgMax", "ArgMin", "TopKV2"), _ARG),
    **dict.fromkeys(("Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd",
                     "LogicalOr", "LogicalNot", "IsNan", "IsFinite", "IsInf"), _COMPARE),
    **dict.fromkeys(("Round", "Floor", "Ceil", "Rint", "FloorDiv"), _ROUND),
    "Cast": "keep the computation in a float dtype (a cast to an integer or bool drops the gradient)",
    "StopGradient": "remove tf.stop_gradient (or apply it to less) where the gradient should flow",
}
# Connected ops whose gradient is zero everywhere, or where their input is negative.
_ZERO_GRADIENT = {
    "Sign": "op Sign's gradient is zero everywhere, so the gradient is zeros",
    "Relu": ("it is zero where every path goes through a Relu whose input is negative (a dead ReLU); "
             "tf.nn.leaky_relu keeps a small slope there"),
}
_BEFORE = "a value computed from it before the `with` block (move that code inside)"
_REBOUND = ("its Python name rebound to a Tensor (`w = w - lr * g` makes `w` a Tensor: update the "
            "Variable with w.assign_sub(lr * g))")
_NEW_VAR = ("a new Variable created inside the block, so this one is an older one (create Variables once, "
            "outside the training step)")
_PAUSED = "its reads only inside tape.stop_recording()"
_PREDICT = "a Keras model.predict() call (it returns NumPy: call model(x))"
_BRANCH = "a Python `if` that took the branch not using it"
_FROM_NOTHING = (
    "A value that went through NumPy or Python (x.numpy(), np.* functions, float(), tf.constant() of "
    "such a value, tf.numpy_function, a Keras model.predict()) comes back as a new constant the tape "
    "cannot connect to anything: keep the computation in tf ops on the tensors themselves. Otherwise"
    " it is computed only from unwatched tensors, or rebuilt from raw arrays by JAX: "
    "jax.tree_util.tree_map and jax.jit over Tensors hand the function their arrays and wrap its "
    "results in new Tensors the tape never saw, so map with is_leaf=lambda x: isinstance(x, tf.Tensor) "
    "and tape ops, or use tapejax.op.")


def _not_read_causes(tape):
    """The usual reasons a Variable was not read while the tape recorded, those this tape shows first."""
    made_inside = tape._start_id is not None and any(vid > tape._start_id for vid in tape._watched_vars)
    causes = ([_NEW_VAR] if made_inside else []) + ([_PAUSED] if tape._pauses else [])
    causes += [_BEFORE, _REBOUND] + ([] if made_inside else [_NEW_VAR]) + [_PREDICT, "or " + _BRANCH]
    return "The usual causes: " + "; ".join(causes) + "."


def _paths(structure, prefix=""):
    """Each leaf's path in ``structure`` (``[0]``, ``['w']``), in ``nest.flatten``'s order."""
    if isinstance(structure, dict):
        return [p for k in sorted(structure) for p in _paths(structure[k], f"{prefix}[{k!r}]")]
    if isinstance(structure, (list, tuple)):
        return [p for i, v in enumerate(structure) for p in _paths(v, f"{prefix}[{i}]")]
    return [prefix]


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
    flat_t, flat_s = _nest.flatten(target), _nest.flatten(source)
    if not flat_s:
        return ("No sources were given (an empty structure), so there is nothing to differentiate. A "
                "Keras model's trainable_variables is empty until the model is built by its first call "
                "(or build() / an Input): take the list after that call.")
    if len(flat_t) != 1 or len(flat_s) != 1:
        tp, sp = _paths(target), _paths(source)
        return "\n".join(f"{'target' + tp[i] + ', ' if len(flat_t) > 1 else ''}source{sp[j]}: "
                         f"{explain(tape, t, s)}" for i, t in enumerate(flat_t) for j, s in enumerate(flat_s))
    t, s = flat_t[0], flat_s[0]
    for role, x in (("target", t), ("source", s)):
        if not isinstance(x, Tensor) and not hasattr(x, "_read"):
            kind = ("NumPy " if type(x).__module__ == "numpy" else "Python ") + type(x).__name__
            return (f"The {role} is a {kind}, not a Tensor or Variable, so the tape cannot "
                    "follow it (gradient() raises): a NumPy array or Python number made from a tensor "
                    "(x.numpy(), float(x), np.* functions) is a copy of its value that the tape knows "
                    f"nothing about; pass the tensor itself{' and watch it' if role == 'source' else ''}.")
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
                    f"recording was paused), so nothing recorded depends on it. {_not_read_causes(tape)}")
        if tape._start_id is not None and s._id < tape._start_id:
            return (f"The source {sname} was created before the tape started recording and was never "
                    "watched: call tape.watch(x) inside the block before using it. (If it was a Variable "
                    "until `x = x - lr * g` rebound the name to a Tensor, update the Variable in place "
                    "instead: x.assign_sub(lr * g).)")
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
            zero = [_ZERO_GRADIENT[n] for n in sorted({tape._nodes[i].prim.name for i in slice_idx})
                    if n in _ZERO_GRADIENT]
            return (f"Connected: the target depends on the source {sname} through recorded ops; "
                    "its gradient is not None" + (f" (but {'; and '.join(zero)})." if zero else "."))
    watched_at = tape._watched_at.get(s._id)
    if watched_at is not None and tape._start_id is not None and tape._start_id < t_id < watched_at:
        return (f"The target was computed before tape.watch() was called on the source {sname}, and "
                "the tape records only the ops run after the watch: call tape.watch() first.")
    path = _find_path(tape, t_id, s._id)
    if path is None:
        if t_id not in tape._codes and t_id not in tape._cuts:
            if not isinstance(t, Tensor):
                return ("The target is a Variable: its value is not recorded as computed by anything (an "
                        "assign is not a recorded op). Differentiate the tensor that was assigned instead "
                        "(y = f(v); u.assign(y); tape.gradient(y, v)).")
            span = tape._reset_span
            if span is not None and span[0] is not None and span[0] < t_id < span[1]:
                return ("The target was computed before tape.reset(), which forgot everything recorded "
                        "before it: compute it again after the reset.")
            if tape._start_id is not None and t_id < tape._start_id:
                return "The target was computed before the tape started recording, so nothing on the tape leads to it."
            for start, end in tape._pauses:
                if start < t_id < end:
                    return "The target was computed inside tape.stop_recording(); nothing recorded leads to it."
            if tape._end_id is not None and t_id > tape._end_id:
                return ("The target was computed after the tape's `with` block ended, and the tape records "
                        "only inside it: compute the loss inside the block (for a second derivative, call "
                        "the inner tape's gradient() inside the outer tape's block).")
            return f"The target is not computed from anything this tape tracks. {_FROM_NOTHING}"
        return (f"The target does not depend on the source {sname}: no recorded op leads from one to the "
                "other. (Values written by Variable.assign or used as a tf.Variable's initial value are "
                "not recorded ops, and a Python `if` on a tensor records only the branch it took.)")
    if not path:  # an op took the source as an input before the tape tracked it
        return (f"The target uses the source {sname} only through ops that ran before the tape tracked "
                "it (before tape.watch() or the tape's first read of it), so they were not recorded.")
    op, reason = path[-1]
    fix = _FIXES.get(op)
    return f"The path from the source {sname} to the target is cut at op {op}: {reason}" + (
        f"; {fix}." if fix else ".")
