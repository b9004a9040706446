"""``GradientTape``: records a functional trace of the ops whose inputs it tracks.

Recording
---------
A tape keeps a code for every tensor it tracks and a ``Node`` per recorded op (``nodes``).  An
op is recorded iff one of its input ids has a code; the executor that runs the op offers it to
every recording tape (``core.executor.record``), and a Variable read is offered by the
Variable (``_record_read``).  ``_defers`` says whether the deferred executor may leave the ops
this tape records pending (plain tapes only: a subclass that sees ops differently, such as a
forward accumulator's recorder, does not, unless it says so).

Floating outputs of differentiable ops get codes.  Integer/bool outputs and
the outputs of ops TF does not differentiate (floor, argmax, stop_gradient
...) get none, so everything computed from them alone is a constant to the
tape and its sources are unconnected (``None``), exactly as in TF.  Those cut
points are kept in ``_cuts`` (id -> why), together with what is computed from
them, so ``explain`` can say why a gradient is ``None``.

Gradients are computed by ``replay`` (slice, key, compiled ``jax.vjp``), jacobians by
``jacobian``, the reason for a None by ``explain``.
"""
import jax
import numpy as np

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import READ, _hashable
from ..core.tensor import Pending, Tensor
from ..ops.indexing import RESOURCE_GATHER
from . import explain as _explain, gradient as _gradient, jacobian as _jacobian
from .nodes import (
    _ONE,
    _SIG_PEEK,
    _TRAINABLE,
    NO_GRADIENT,
    OUT,
    Node,
    UnconnectedGradients,
    _check_leaves,
    _intern,
    _log,
    _output_gradients,
    _trainable,
    _tuple_new,
    _unconnected,
    flatten_sources,
)

#: The warnings TF logs once a process (``log_first_n(..., 1)``) that this process has logged.
LOGGED_ONCE: set = set()


def _simple_via_record_op(self, prim, skey, ids, vals, result) -> bool:
    self._record_op(prim, dict(skey), None, ids, vals, result)
    return result._id in self._codes


class GradientTape:
    """Record operations for automatic differentiation (``tf.GradientTape``).

    Inside ``with GradientTape() as tape:`` every op whose input is watched
    (or computed from a watched tensor) is recorded.  ``tape.gradient(target,
    sources)`` replays the recorded slice as one compiled ``jax.vjp``.
    Trainable float Variables are watched when read, unless
    ``watch_accessed_variables=False``.  A non-persistent tape allows one
    ``gradient`` (or ``jacobian``) call and then frees what it recorded.
    """

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = bool(persistent)
        self._watch_accessed = bool(watch_accessed_variables)
        self._recording = False
        self._entered = False
        self._used = False
        self._watched_vars = {}
        self._start_id = None
        self._end_id = None      # the id at the block's exit (explain: a target made after it)
        self._reset_span = None  # (start id, reset id) of the last reset()
        self._pauses = []
        self._fresh()

    def _fresh(self):
        self._nodes = []
        self._codes = {}
        self._n_leaves = 0
        self._cuts = {}          # id -> (reason, op name, input ids): why it is not tracked
        self._unwatched = {}     # var id -> why a read Variable was not watched
        self._watched_at = {}    # id -> the id at its tape.watch() (explain: a target made before it)

    # -- context ----------------------------------------------------------
    def __enter__(self):
        if self._recording:
            raise ValueError("Tape is still recording, This can happen if you try to re-enter an "
                             "already-active tape.")
        if self._used:  # a spent non-persistent tape starts afresh, as TF's does
            self._used = False
            self._watched_vars = {}
            self._start_id = None
            self._pauses = []
            self._fresh()
        self._push()
        if self._start_id is None:
            self._start_id = _state.next_id()
        self._end_id = None
        self._entered = True
        return self

    def __exit__(self, exc_type, exc, tb):
        self._end_id = _state.next_id()
        if self._recording:
            self._pop()

    def _push(self):
        _state.push_tape(self)
        self._recording = True

    def _pop(self):
        _state.pop_tape(self)
        self._recording = False

    # -- watching ---------------------------------------------------------
    def _new_leaf(self, id_):
        code = -(self._n_leaves + 1)
        self._n_leaves += 1
        self._codes[id_] = code
        return code

    def watch(self, tensor):
        """Track ``tensor`` (a Tensor, Variable or nested structure of them)."""
        flat = flatten_sources(tensor)[0]
        for t in flat:  # validate everything before changing any state
            if not isinstance(t, Tensor) and not hasattr(t, "_read"):
                hint = ""
                if isinstance(t, (jax.Array, np.ndarray)):
                    hint = (": an array has no identity the tape can follow (each op converts it "
                            "anew); write x = tf.convert_to_tensor(x), watch x, and use x in the ops")
                raise ValueError(f"Passed in object {t!r} of type {type(t).__name__!r}, not "
                                 f"tapejax.Tensor or tapejax.Variable{hint}")
        for t in flat:
            self._watched_at.setdefault(t._id, _state.next_id())
            if not _trainable(t._value):
                _log.warning("The dtype of the watched tensor must be floating (e.g. tf.float32), "
                             "got %r", t.dtype)
            if isinstance(t, Tensor):
                if _trainable(t._value) and t._id not in self._codes:
                    self._new_leaf(t._id)
            else:
                self._watched_vars.setdefault(t._id, t)
                if _trainable(t._value) and t._id not in self._codes:
                    self._new_leaf(t._id)

    def watched_variables(self):
        """The Variables this tape watches, in creation order."""
        return tuple(v for _, v in sorted(self._watched_vars.items()))

    # -- recording (called by _primitives.bind and Variable._read) --------
    def _var_code(self, var):
        """The code of a Variable being read (watched on its first read when this tape watches
        accessed Variables and it is trainable), or None where the tape does not track it."""
        vid = var._id
        code = self._codes.get(vid)
        if code is None:
            if vid in self._watched_vars:
                return None  # watched but not trainable dtype
            if not (self._watch_accessed and var._trainable):
                self._unwatched[vid] = ("trainable=False" if not var._trainable
                                        else "watch_accessed_variables=False")
                return None
            self._watched_vars[vid] = var
            if not _trainable(var._meta):
                return None
            code = self._new_leaf(vid)
        return code

    def _record_read(self, var, t):
        codes = self._codes
        code = codes.get(var._id)
        if code is None:
            code = self._var_code(var)
            if code is None:
                return
        idx = len(self._nodes)
        refs = (code,)
        sig = (READ, refs)
        n = _SIG_PEEK(sig)
        if n is None:
            n = _intern(sig)
        self._nodes.append(_tuple_new(Node, (READ, (), None, (t._thunk if type(t) is Pending else t._value,),
                                                (t._id,), refs, 1, n)))
        codes[t._id] = idx * OUT

    def _record_sparse_read(self, var, indices, rows):
        """A gather of ``var``'s rows at ``indices`` that read only those rows
        (``ops.indexing.sparse_read``): a ``ResourceGather`` node holding the rows and the indices,
        whose gradient with respect to ``var`` is ``IndexedSlices`` (``autodiff.sparse``)."""
        code = self._codes.get(var._id)
        if code is None:
            code = self._var_code(var)
            if code is None:
                return
        refs = (code, self._codes.get(indices._id))
        sig = _intern((RESOURCE_GATHER, (), None, refs, _ONE))
        nodes = self._nodes
        self._codes[rows._id] = len(nodes) * OUT
        nodes.append(_tuple_new(Node, (RESOURCE_GATHER, (), None, (rows._value, indices._value),
                                       (rows._id, indices._id), refs, 1, sig)))

    #: Whether the deferred executor may leave the ops this tape records pending (see above).
    _defers = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_record_op" in cls.__dict__ and "_record_simple" not in cls.__dict__:
            cls._record_simple = _simple_via_record_op  # a subclass's own rule sees every op
        if "_defers" not in cls.__dict__:
            cls._defers = False   # a subclass records as it likes: its ops run when called

    def _record_simple(self, prim, skey, ids, vals, result):
        """``_record_op`` for the common case, written out: one output, no gradient override;
        ``skey`` is the static parameters as a tuple of items, ``ids`` and ``vals`` tuples.
        Same node, same signature.  Returns whether this tape keeps the op as a node (the
        deferred executor computes at once a value no tape keeps)."""
        get = self._codes.get
        n_in = len(ids)
        if n_in == 1:
            refs = (get(ids[0]),)
        elif n_in == 2:
            refs = (get(ids[0]), get(ids[1]))
        else:
            refs = tuple([get(i) for i in ids])
        if refs.count(None) == n_in:
            if self._cuts:
                self._propagate_cut(prim, ids, result)
            return False
        if not prim.differentiable:
            self._cuts[result._id] = (prim.nondiff_reason, prim.name, tuple(ids))
            return False
        dt = (result._thunk.aval if type(result) is Pending else result._value).dtype
        t = _TRAINABLE.get(dt)
        if t is None:
            t = _TRAINABLE[dt] = _dtypes.is_trainable_dtype(dt)
        if not t:
            self._int_cut(prim, ids, result)
            return False
        nodes = self._nodes
        sig = (prim, skey, None, refs, _ONE)
        try:
            n = _SIG_PEEK(sig)  # a hit here does not refresh recency (see _SIGS)
        except TypeError:  # an unhashable static value (a list): the generic path converts it
            self._record_op(prim, dict(skey), None, ids, vals, result)
            return result._id in self._codes
        if n is None:
            n = _intern(sig)
        self._codes[result._id] = len(nodes) * OUT
        nodes.append(_tuple_new(Node, (prim, skey, None, vals, ids, refs, 1, n)))
        return True

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        codes = self._codes
        for i in ids:
            if i in codes:
                break
        else:
            if self._cuts:
                self._propagate_cut(prim, ids, result)
            return
        if (not prim.differentiable and grad_type is None) or grad_type in NO_GRADIENT:
            # (an override makes it differentiable, unless it maps to a tf.no_gradient name)
            reason = prim.nondiff_reason if grad_type is None else \
                f"its gradient was mapped to '{grad_type}', registered with tf.no_gradient"
            for o in (result if prim.multiple_results else (result,)):
                self._cuts[o._id] = (reason, prim.name, tuple(ids))
            return
        idx = len(self._nodes)
        if prim.multiple_results:
            outs = result
            mask = tuple([_trainable(o._meta) for o in outs])   # (a pending output is not computed)
            for k, o in enumerate(outs):
                if mask[k]:
                    codes[o._id] = idx * OUT + k
                else:
                    self._int_cut(prim, ids, o)
            if True not in mask:
                return
            n_out = len(outs)
        else:  # the hot path: one output
            if not _trainable(result._meta):
                self._int_cut(prim, ids, result)
                return
            codes[result._id] = idx * OUT
            mask = _ONE
            n_out = 1
        refs = tuple([codes.get(i) for i in ids])
        skey = tuple(static.items()) if static else ()
        try:
            sig = _intern((prim, skey, grad_type, refs, mask))
        except TypeError:
            skey = _hashable(static)
            sig = _intern((prim, skey, grad_type, refs, mask))
        self._nodes.append(Node(prim, skey, grad_type, tuple(vals), tuple(ids), refs, n_out, sig))

    def _int_cut(self, prim, ids, out):
        # (the dtype by its NumPy name, without computing a pending output; a JAX typed PRNG key
        # output of ``tapejax.op`` has no tapejax DType)
        self._cuts[out._id] = (f"op {prim.name} returns {out._meta.dtype}, and integer, bool and "
                               "PRNG key tensors carry no gradient", prim.name, tuple(ids))

    def _propagate_cut(self, prim, ids, result):
        cuts = self._cuts
        for i in ids:
            if i in cuts:
                outs = result if prim.multiple_results else (result,)
                for o in outs:
                    cuts[o._id] = (None, prim.name, tuple(ids))
                return

    # -- lifecycle --------------------------------------------------------
    def reset(self):
        """Forget everything recorded and watched (as exiting and re-entering a fresh tape)."""
        if not self._recording:
            raise ValueError("Tape is not recording.")
        self._fresh()
        self._watched_vars = {}
        self._used = False
        self._reset_span = (self._start_id, _state.next_id())  # explain: a target made before reset()
        self._start_id = self._reset_span[1]
        self._pauses = []

    class _Pause:
        __slots__ = ("tape", "start")

        def __init__(self, tape):
            self.tape = tape

        def __enter__(self):
            self.start = _state.next_id()
            self.tape._pop()

        def __exit__(self, *exc):
            self.tape._pauses.append((self.start, _state.next_id()))
            self.tape._push()

    def stop_recording(self):
        """A context in which this tape records nothing (ops there are constants to it)."""
        if not self._recording:
            if self._entered:
                raise ValueError("Tape is not recording.")
            raise RuntimeError("Trying to stop recording a tape which is not recording.")
        return GradientTape._Pause(self)

    def _holds_inputs(self):
        """Whether this tape still holds recorded values (a buffer lent to its step among them:
        ``core.ownership.Loan``): until it is released."""
        return bool(self._nodes)

    def _release(self):
        """Drop everything recorded (watched variables stay listed, as in TF)."""
        self._fresh()

    def _check_usable(self):
        if self._used or not self._entered:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of "
                               "gradients (or jacobians)")

    def _begin_use(self):
        """Before a gradient/jacobian: a non-persistent tape stops recording for good."""
        self._check_usable()
        if self._recording:
            if self._persistent:
                if "persistent_inside" not in LOGGED_ONCE:   # (TF: log_first_n(..., 1), once a process)
                    LOGGED_ONCE.add("persistent_inside")
                    _log.warning(
                        "Calling GradientTape.gradient on a persistent tape inside its context records "
                        "the gradient computation on the tape (for higher-order derivatives); call it "
                        "outside the context when you do not need that.")
            else:
                self._pop()  # as TF: a non-persistent tape stops recording for good

    def _end_use(self):
        if not self._persistent:
            self._used = True
            self._release()

    # -- gradients ----------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        """d(sum of targets)/d(source) for each source, in the structure of ``sources``.

        ``output_gradients`` are the targets' cotangents, one per flattened
        target (missing ones are ones, extra ones are ignored; a scalar
        broadcasts).  Unconnected sources give ``None``, or zeros with
        ``unconnected_gradients='zero'``.
        """
        self._check_usable()
        if target is None:
            raise TypeError("Argument `target` should be a list or nested structure of Tensors, "
                            "Variables or CompositeTensors to be differentiated, but received None.")
        mode = _unconnected(unconnected_gradients)
        # (a Mapping that is a JAX pytree, flax's FrozenDict, an nnx State: flattened as TF's nest
        # flattens a Mapping, by JAX, as sources are)
        flat_targets = ([target] if type(target) is Pending or type(target) is Tensor else
                        _check_leaves(flatten_sources(target)[0], "target"))
        flat_sources, pack = flatten_sources(sources, "sources")
        cts = _output_gradients(output_gradients, flat_targets)
        self._begin_use()
        try:
            grads = _gradient.gradient(self, flat_targets, flat_sources, cts, mode)
        except ValueError as e:   # (JAX refusing a while loop: the bound it needs)
            err = _gradient.unbounded_while_error(e)
            if err is None:
                raise
            raise err from e
        finally:
            self._end_use()
        return pack(grads)

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE,
                 parallel_iterations=None, experimental_use_pfor=True):
        """d target / d source for each source: shape ``target.shape + source.shape``.

        One compiled call (vmap of the replay's vjp, or of its jvp when the
        sources are smaller than the target).  Unconnected sources give
        ``None`` (zeros with ``'zero'``).  ``parallel_iterations`` bounds the
        rows computed at once; ``experimental_use_pfor=False`` computes them
        one at a time (persistent tapes only, as in TF).
        """
        with _gradient.bounded_whiles_only():
            return _jacobian.jacobian(self, target, sources, unconnected_gradients, parallel_iterations,
                                      experimental_use_pfor)

    def batch_jacobian(self, target, source, unconnected_gradients=UnconnectedGradients.NONE,
                       parallel_iterations=None, experimental_use_pfor=True):
        """Per-example jacobians: ``target [b, y...]``, ``source [b, x...]`` -> ``[b, y..., x...]``.

        As TF: an unconnected source gives zeros (the target's dtype) even
        with the default ``'none'``; the first dimensions must match.
        """
        with _gradient.bounded_whiles_only():
            return _jacobian.batch_jacobian(self, target, source, unconnected_gradients, parallel_iterations,
                                            experimental_use_pfor)

    # -- why is my gradient None? -------------------------------------------
    def explain(self, target, source):
        """Say, in words, whether and why ``d target / d source`` is unconnected."""
        return _explain.explain(self, target, source)


