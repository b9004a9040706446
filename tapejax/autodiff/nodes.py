"""The tape's records: nodes, codes, interned signatures, and the checks of gradient arguments.

A tape keeps ``_codes``: tensor id -> *code*, for every tensor it tracks.  A code says where
the value comes from on this tape:

* ``node_index * OUT + k`` (>= 0): output ``k`` of recorded node ``node_index``;
* ``-(leaf + 1)`` (< 0): a tracked leaf: a watched tensor, or a Variable (Variables are
  leaves; their reads are ``ReadVariableOp`` nodes).

A ``Node`` keeps an op's input *values* (constants for the replay; a thunk where the input's
op was deferred), the input codes (the wiring, in tape positions, so it is the same for every
tape of the same program), and ``sig``: an int interned from (op, static params, gradient
override, wiring).  The compiled replay's cache key is made of these ints, so building it at
gradient time is a tuple of ints, not a walk over nested data.
"""
import enum
import logging
from operator import itemgetter as _itemgetter

import jax
import numpy as np

from ..core import dtypes as _dtypes, nest as _nest
from ..core.caches import LRU
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Pending, Tensor, _python_dtype as _tensor_python_dtype
from ..core.variable import Variable

#: Gradient names registered by ``tf.no_gradient`` (``autodiff.custom``): an op whose gradient is
#: mapped to one of them (``gradient_override_map``) is a cut for the tape, as TF's graph gradient
#: skips it (None for a source reached only through it).
NO_GRADIENT: "set[str]" = set()

OUT = 1 << 20  # outputs per node in a code (node_index * OUT + k)

_log = logging.getLogger("tapejax")


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on."""

    NONE = "none"
    ZERO = "zero"


def _unconnected(value):
    if isinstance(value, UnconnectedGradients):
        return value
    try:
        return UnconnectedGradients(value)
    except ValueError:
        raise ValueError(f"Unknown value for unconnected_gradients: {value!r}; expected "
                         "tapejax.UnconnectedGradients.NONE/.ZERO or 'none'/'zero'") from None


# Interned node signatures: (op, static, override, wiring, tracked outputs) -> int.
# Ints are never reused, so evicting an entry (LRU, bounded) only costs cache
# misses, never a wrong hit.
_SIGS = LRU("signatures", 200_000)
#: The recording fast path's lookup: a plain dict read, which does not move a hit to the
#: recent end, so a signature can be evicted after 200,000 newer ones even while in use;
#: that costs one re-intern (a new int, one replay-cache miss), never a wrong hit.
_SIG_PEEK = _SIGS._data.get
_next_sig = iter(range(1, 1 << 62)).__next__


def _intern(sig):
    n = _SIGS.get(sig)
    if n is None:
        n = _SIGS.setdefault(sig, _next_sig())
    return n


_TRAINABLE = {}  # dtype -> trainable? (a dict lookup instead of a dtype inspection per op)
_ONE = (True,)


def _trainable(value):
    dt = value.dtype
    t = _TRAINABLE.get(dt)
    if t is None:
        t = _TRAINABLE[dt] = _dtypes.is_trainable_dtype(dt)
    return t


class Node(tuple):
    """One recorded op on one tape: an immutable record (a tuple, built with one C call on the
    recording hot path; fields by name)."""

    __slots__ = ()

    def __new__(cls, prim, static, grad_type, vals, ids, refs, n_out, sig):
        return _tuple_new(cls, (prim, static, grad_type, vals, ids, refs, n_out, sig))

    prim = property(_itemgetter(0))
    static = property(_itemgetter(1))
    grad_type = property(_itemgetter(2))
    vals = property(_itemgetter(3))
    ids = property(_itemgetter(4))
    refs = property(_itemgetter(5))
    n_out = property(_itemgetter(6))
    sig = property(_itemgetter(7))

    # Identity semantics (a tuple would compare its fields, arrays included).
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __repr__(self):
        return f"Node({self.prim.name}, refs={self.refs})"


_tuple_new = tuple.__new__


class NotATensorError(TypeError, AttributeError):
    """A target or source that is not a Tensor or Variable.

    A TypeError; also an AttributeError, the class TF happens to raise for a
    Python number or NumPy array there, so ``except`` clauses written for TF
    still catch it.
    """


#: Exact types that pass ``_check_leaves`` at once.
_LEAF_TYPES = {Tensor, Pending, Variable}


def _check_leaves(flat, what):
    for i, x in enumerate(flat):
        if type(x) not in _LEAF_TYPES and not _tensor_like(x):
            where = f"`{what}`" if len(flat) == 1 else f"`{what}` (flattened element {i})"
            hint = ""
            if type(x).__module__.startswith("keras.") and hasattr(x, "path"):   # (one tapejax does not track)
                hint = (". It is a Keras variable made before tapejax's Keras integration was loaded: "
                        "import keras after tapejax, or access tapejax.keras first, then build the model")
            elif what == "sources" and isinstance(x, (jax.Array, np.ndarray)):
                hint = (". An array has no identity the tape can follow: make the parameters Variables "
                        "(jax.tree_util.tree_map(tf.Variable, params)) and use those in the ops")
            raise NotATensorError(f"Argument {where} must be a Tensor or Variable (or a nested "
                                  f"structure of them); got {x!r} of type {type(x).__name__}{hint}")
    return flat


def _tensor_like(x):
    # (``_read`` looked up on the type: a wrapper that forwards attributes to the Variable it holds,
    # flax nnx's ``Param``, is a pytree node around the Variable, not a Variable)
    return isinstance(x, Tensor) or hasattr(type(x), "_read")


def _static_leaf(x):
    """Whether a leaf of a JAX pytree source is a static part of it, not a parameter: what
    ``eqx.filter_grad`` leaves out (an equinox module's activation function, a Python number or
    string, an integer or bool array: TF's None for an integer source); its gradient is ``None``.
    A floating array is not: a weight left as an array is an error."""
    if _tensor_like(x):
        return False
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        return not np.issubdtype(x.dtype, np.inexact)
    return True


def flatten_sources(structure, what=None):
    """(flat leaves, pack) for ``sources``: ``tf.nest``'s structure, in which a leaf that is a JAX
    pytree node (a dataclass registered with ``jax.tree_util``, a flax / equinox module, any
    custom node) is flattened by ``jax.tree_util`` with Tensors and Variables as its leaves, so a
    JAX user's parameter pytree of Variables gets its gradients in the same structure (static
    fields kept; a non-array leaf of such a node, an equinox module's activation function, is left
    out of the flat list and its gradient is ``None``, as ``eqx.filter_grad`` gives).  ``pack(flat)``
    rebuilds the structure; ``None`` gradients stay ``None``.
    With ``what`` (the argument's name) the leaves are checked (``_check_leaves``)."""
    flat = _nest.flatten(structure)
    for x in flat:
        if type(x) not in _LEAF_TYPES and not _tensor_like(x):
            break
    else:   # (all Tensors and Variables: the common case, checked by this loop)
        return flat, lambda gs: _nest.pack_sequence_as(structure, gs)
    out, parts = [], []
    for x in flat:
        tree = None
        if not _tensor_like(x) and x is not None and not type(x).__module__.startswith("tapejax."):
            # (tapejax's own pytrees, SparseTensor, RaggedTensor, IndexedSlices ..., keep TF's rules)
            leaves, tree = jax.tree_util.tree_flatten(x, is_leaf=_tensor_like)
            if jax.tree_util.treedef_is_leaf(tree):
                tree = None
        if tree is None:
            parts.append(None)
            out.append(x)
        else:
            static = [_static_leaf(v) for v in leaves]
            parts.append((tree, static))
            out.extend(v for v, s in zip(leaves, static) if not s)

    def pack(gs):
        it, nested = iter(gs), []
        for part in parts:
            if part is None:
                nested.append(next(it))
            else:
                tree, static = part
                nested.append(jax.tree_util.tree_unflatten(tree, [None if s else next(it) for s in static]))
        return _nest.pack_sequence_as(structure, nested)
    if what is not None:
        _check_leaves(out, what)
    return out, pack


def _output_gradients(output_gradients, flat_targets):
    """TF's rule: one cotangent per flattened target, by position."""
    if output_gradients is None:
        return [None] * len(flat_targets)
    flat = _nest.flatten(output_gradients)
    cts = []
    for i, t in enumerate(flat_targets):
        if i >= len(flat):
            cts.append(None)
            continue
        g = flat[i]
        if g is None:
            raise ValueError(f"Attempt to convert a value (None) with an unsupported type "
                             f"(<class 'NoneType'>) to a Tensor: output_gradients[{i}] is None; "
                             "leave output_gradients shorter to seed ones")
        want = np.dtype(t._meta.dtype)
        if isinstance(g, Tensor) or hasattr(g, "_read"):
            have = np.dtype(g._meta.dtype)
        elif isinstance(g, (np.ndarray, np.generic)):
            have = g.dtype
        else:
            try:
                have = _tensor_python_dtype(g)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    None, None, f"output_gradients[{i}] is {g!r} of type {type(g).__name__}, but target "
                    f"{i} has dtype {want.name}: cotangents must be tensors of the target's dtype") from None
        if have != want:
            raise InvalidArgumentError(
                None, None, f"output_gradients[{i}] has dtype {have.name} but target {i} has dtype "
                f"{want.name}: cotangents must have the target's dtype")
        g = convert_to_tensor(g, dtype=want)
        tshape = tuple(t._meta.shape)
        try:
            joint = np.broadcast_shapes(tuple(g.shape), tshape)
        except ValueError:
            joint = None
        if joint is None or int(np.prod(joint)) != int(np.prod(tshape)):
            raise InvalidArgumentError(
                None, None, f"output_gradients[{i}] has shape {tuple(g.shape)} but target {i} has "
                f"shape {tshape}: it must have the target's shape (or broadcast to it)")
        cts.append(g)
    return cts
