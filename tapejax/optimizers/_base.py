"""The Keras-2 ``OptimizerV2`` API on one compiled, pure update.

An optimizer is a *rule*: ``_apply(coef, grad, var, slots) -> (new_var, new_slots)``
per variable, plus ``_prepare(c, step, extra) -> (coef, new_extra)`` once per
update (``step`` = iterations + 1; ``c`` holds ``lr`` and the hyperparameters
the update reads).  Its state lives in Variables (``iterations``, the slots
such as ``m``/``v``, a float learning-rate Variable, and one float32 Variable
per hyperparameter that tf_keras keeps in a Variable: ``_HYPERS``, which
``opt.beta_1 = x`` assigns, so changing one never recompiles), so the same
object works eagerly and inside ``tapejax.function``:

* eagerly, ``apply_gradients`` gathers the arrays of every variable, slot and
  the gradients and calls ONE ``jax.jit`` update (cached per list of
  variables), with the variables and slots donated where each owns its
  buffer (``Variable.owns_buffer``: no read, Tensor or pending value shares
  it; the others are passed undonated: ``Donating``), then writes the new
  arrays back, each Variable owning its fresh one: one dispatch per step,
  not one per variable and slot; setting any other public attribute
  (``epsilon``, ``nesterov`` ...) to a new value drops these compiled
  updates, so the next step compiles one that reads it;
* inside ``tapejax.function`` the same pure update runs on the tracers (the
  Variables report themselves to the function's collector, so the slots are
  threaded through the compiled step as state).

Gradient processing follows ``optimizer_v2.apply_gradients``: ``None``
gradients are skipped with a warning (ValueError when all are None), then
``clipvalue``, ``clipnorm`` (each gradient) and ``global_clipnorm``, then the
rule; ``iterations`` is incremented; a Variable's ``constraint`` is applied
after its update.
"""
import logging
import threading
from typing import Any, Callable, Optional, cast

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..autodiff.tape import GradientTape
from ..core import nest as _nest, state as _state, transfer
from ..core.caches import Family
from ..core.convert import convert_to_tensor
from ..core.executor import ACTIVE, GroupUpdate
from ..core.indexed_slices import IndexedSlices
from ..core.ownership import Donating, note_slot
from ..core.tensor import Pending, Tensor
from ..core.variable import Variable, counter
from . import schedules as _schedules
from ._args import (
    _clip_by_global_norm,
    _clip_by_norm,
    _filter_empty_gradients,
    _float_hyper,
    _scalar_float,
    _takes_step,
    _touch,
)
from ._hypers import HyperParameters
from ._sparse import dedup_rows, put_rows, sparse_pair, take_rows

_log = logging.getLogger("tapejax")
_Array = type(jnp.zeros(()))   # the concrete array type

#: Per optimizer: the jitted eager update per list of variables (bounded LRU).
_UPDATES = Family("optimizer_updates", 64)

_NUMBERS = (int, float, bool)
_MISSING = object()

_ALLOWED_KWARGS = {"clipnorm", "clipvalue", "lr", "decay", "global_clipnorm"}


def place_like(init, owner: Variable):
    """``init`` (a new state array shaped like ``owner``) on ``owner``'s devices: a sharded
    Variable gets sharded optimizer state (an uncommitted or single-device value is left as is)."""
    val = owner._val
    sh = getattr(val, "sharding", None)
    if (not isinstance(val, jax.Array) or sh is None or not getattr(val, "committed", False)
            or len(sh.device_set) < 2 or getattr(init, "shape", None) != val.shape):
        return init
    return jax.device_put(init, sh)


def _run_update(state, var_list, fn, gs, extra, grads=None):
    """Commit ``fn``'s update of ``state`` (a ``Donating``: ``fn(values, shared, grads, *extra)``)
    for the gradient Tensors ``gs`` (their arrays ``grads`` where converted already): the active
    executor's ``apply`` (the deferred one may find the values already computed by the gradient's
    own program, ``runtime.speculate.on_apply``)."""
    constrained = [v for v in var_list if v.constraint is not None]
    ACTIVE.executor.apply(GroupUpdate(state, constrained, fn, gs, extra, grads))


class Optimizer(HyperParameters):
    """Base class of the Keras-2 optimizers (``tf.keras.optimizers.legacy.Optimizer``)."""

    _SLOTS = ()           # slot names, in Keras' creation order
    _INTERLEAVED = False  # slots created variable by variable (Ftrl) instead of slot by slot
    _EXTRA_IN_VARIABLES = True   # ``_extra_init``'s Variables listed by ``variables()`` (checkpointed either way)
    _DEFAULT_NAME = "Optimizer"
    #: OptimizerV2 refuses a sparse gradient of a constrained Variable (the new ones: ``_rules_v2``)
    _SPARSE_REFUSES_CONSTRAINT = True
    #: Hyperparameters that tf_keras keeps in float32 Variables (its ``_set_hyper``) and the
    #: update reads at every step: ``opt.beta_1`` is that Variable, ``opt.beta_1 = 0.5``
    #: assigns it, and the compiled update takes their values as inputs (no recompile).
    _HYPERS: tuple[str, ...] = ()
    #: Attributes fixed once slots exist (they decide which slots there are).
    _STRUCTURAL = ()

    def __init__(self, name, learning_rate=0.001, **kwargs):
        object.__setattr__(self, "_hyper", {})        # name -> float32 Variable (``_HYPERS``)
        object.__setattr__(self, "_hyper_py", {})     # name -> the Python float last set
        object.__setattr__(self, "_updates", None)
        object.__setattr__(self, "_hv", None)         # the Variables the update reads (cached)
        object.__setattr__(self, "_hyper_user", set())   # names whose Variable is the user's (followed)
        object.__setattr__(self, "_hyper_fn", {})     # name -> callable, called at every update
        for k in kwargs:
            if k not in _ALLOWED_KWARGS:
                raise TypeError(f"Unexpected keyword argument passed to optimizer: {k}. Allowed "
                                f"kwargs are {sorted(_ALLOWED_KWARGS)}.")
            if kwargs[k] is not None and not callable(kwargs[k]) and kwargs[k] < 0:
                raise ValueError(f"Expected {k} >= 0, received: {kwargs[k]}")
        if "lr" in kwargs:
            learning_rate = kwargs.pop("lr")
        clipnorm = kwargs.pop("clipnorm", None)
        global_clipnorm = kwargs.pop("global_clipnorm", None)
        if clipnorm is not None and global_clipnorm is not None:
            raise ValueError("Cannot accept both `clipnorm` and `global_clipnorm`. Received: "
                             f"`clipnorm`={clipnorm}, `global_clipnorm`={global_clipnorm}.")
        self.clipnorm = None if clipnorm is None else _float_hyper("clipnorm", clipnorm)
        self.global_clipnorm = None if global_clipnorm is None else _float_hyper("global_clipnorm", global_clipnorm)
        self.clipvalue = kwargs.pop("clipvalue", None)
        if self.clipvalue is not None:
            self.clipvalue = _float_hyper("clipvalue", self.clipvalue)
        self._initial_decay = _float_hyper("decay", kwargs.pop("decay", 0.0))
        self._name = name
        # tf_keras keeps ``decay`` in a Variable too, but its update reads the constructor's
        # value (``_initial_decay``): assigning ``opt.decay`` changes nothing, as in TF.
        self._set_hyper("decay", self._initial_decay)
        self._iterations = None
        self._lr_var: Optional[Variable] = None   # a float learning rate (made on first set)
        self._lr_sched: Optional[Callable[..., Any]] = None   # or a schedule, which wins
        self._slots = {}      # var id -> {slot name: Variable}
        self._weights = []    # iterations, then slots/extra in creation order (Keras' order)
        self._updates = _UPDATES.new()   # structure key -> jitted update (bounded LRU)
        self._lock = threading.Lock()
        self._set_learning_rate(learning_rate)

    # -- hyperparameters -----------------------------------------------------
    def __getattr__(self, name):   # (only for names ordinary lookup does not find)
        hyper = self.__dict__.get("_hyper")
        if hyper is not None and name in hyper:
            return hyper[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name[0] != "_" and not isinstance(getattr(type(self), name, None), property):
            if name in self._HYPERS or name == "decay":
                self._set_hyper(name, value)
                return
            structural = name in self._STRUCTURAL
            if structural and self.__dict__.get("_slots") and getattr(self, name) != value:
                raise ValueError(f"`{name}` decides which slots {type(self).__name__} keeps; it cannot "
                                 "change after the first apply_gradients (make a new optimizer). "
                                 f"Received: {name}={value!r}")
            # Any other public attribute (epsilon, clipnorm, nesterov, ...) is read when the
            # update is compiled: drop the compiled updates so that the next step reads it
            # (unless the value is the same number: a loop may set it every step).
            old = self.__dict__.get(name, _MISSING)
            if type(old) is float and value is not None:   # (epsilon, clipnorm ...: checked now)
                value = _scalar_float(name, value)
            updates = self.__dict__.get("_updates")
            if updates is not None and not (old is value or (type(old) is type(value) and
                                                            type(value) in _NUMBERS and old == value)):
                updates.clear()
            object.__setattr__(self, name, value)
            if structural:
                self._set_slots()
            return
        object.__setattr__(self, name, value)

    def _set_slots(self):
        """Set ``_SLOTS`` from the ``_STRUCTURAL`` attributes (Adam's ``amsgrad`` ...)."""

    def _set_learning_rate(self, value):
        if (self._lr_var is None and isinstance(value, Variable) and value.shape.rank == 0
                and value.dtype.name == "float32"):
            # tf_keras' OptimizerV2 keeps a Variable learning rate as its hyperparameter: the
            # user's later ``lr.assign(...)`` changes the rate of the next update
            self._lr_sched = None
            self._lr_var = value
            return
        value = getattr(value, "_value", value) if isinstance(value, (Tensor, Variable)) else value
        if isinstance(value, _schedules.LearningRateSchedule) or (callable(value) and not isinstance(value, (int, float))):
            if value is not self._lr_sched and self._updates is not None:
                self._updates.clear()   # (a compiled update may hold the old schedule: compile again)
            self._lr_sched = value
            return
        try:
            if value is None:   # np.asarray(None, float64) is NaN
                raise TypeError
            lr = float(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError) as e:   # TF: a string is a ValueError, None a TypeError
            raise type(e)("Argument `learning_rate` must be a float, a Tensor, a "
                          "tapejax.optimizers.schedules schedule or an optax schedule; received: "
                          f"learning_rate={value!r}") from None
        lr = _float_hyper("learning_rate", lr)
        if self._lr_sched is not None and self._updates is not None:
            self._updates.clear()       # (compiled with the schedule inside: compile with the Variable)
        self._lr_sched = None
        if self._lr_var is None:
            self._lr_var = Variable(np.float32(lr), trainable=False, name=f"{self._name}/learning_rate")
        else:
            self._lr_var.assign(np.float32(lr))

    @property
    def learning_rate(self):
        """The learning rate: a Variable (float), or the schedule."""
        return self._lr_sched if self._lr_sched is not None else self._lr_var

    @learning_rate.setter
    def learning_rate(self, value):
        self._set_learning_rate(value)

    lr = learning_rate
    built = property(lambda self: bool(self._slots), doc="Whether the slots are made (Keras 3 reads it).")

    name = property(lambda self: self._name, doc="The optimizer's name.")

    @property
    def iterations(self):
        """Variable: the number of updates this optimizer has applied (int64 in TF; int32 without x64)."""
        if self._iterations is None:
            with jax.ensure_compile_time_eval():   # concrete even when first used inside tapejax.function
                self._iterations = counter("iter")
            self._weights.insert(0, self._iterations)
        return self._iterations

    def variables(self):
        """The optimizer's Variables: ``iterations`` first (once made: by the first update, or a
        read of ``iterations``), then the slots in creation order; none before, as tf_keras."""
        return list(self._weights)

    weights = property(lambda self: self.variables(), doc="``variables()``, as a property (tf_keras').")

    def get_weights(self):
        return [v.numpy() for v in self.variables()]

    def set_weights(self, weights):
        params = self.variables()
        if len(params) != len(weights):
            raise ValueError(f"You called `set_weights(weights)` on optimizer {self._name} with a weight "
                             f"list of length {len(weights)}, but the optimizer was expecting "
                             f"{len(params)} weights. Provided weights: {weights}...")
        for p, w in zip(params, weights):
            if tuple(np.shape(w)) != tuple(p.shape):
                raise ValueError(f"Optimizer weight shape {tuple(p.shape)} not compatible with provided "
                                 f"weight shape {tuple(np.shape(w))}")
        for p, w in zip(params, weights):
            p.assign(np.asarray(w, dtype=p.dtype._np))

    def get_slot_names(self):
        return list(self._SLOTS)

    def get_slot(self, var, slot_name):
        slots = self._slots.get(var._id)
        if slots is None or slot_name not in slots:
            raise KeyError(f"Slot {slot_name!r} was not created for variable {var.name}; slots are "
                           f"created by the first apply_gradients.")
        return slots[slot_name]

    def get_config(self):
        cfg: dict[str, Any] = {"name": self._name}
        if self._lr_sched is not None:
            cfg["learning_rate"] = self._lr_sched
        else:
            assert self._lr_var is not None  # _set_learning_rate made it (no schedule)
            cfg["learning_rate"] = float(self._lr_var.numpy())
        if self._initial_decay:
            cfg["decay"] = self._initial_decay
        for k in ("clipnorm", "global_clipnorm", "clipvalue"):
            if getattr(self, k) is not None:
                cfg[k] = getattr(self, k)
        cfg.update({k: self._hyper_value(k) if k in self._HYPERS else v
                    for k, v in self._hyper_config().items()})
        return cfg

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def _hyper_config(self):
        return {}

    # -- slots ------------------------------------------------------------------
    def _slot_init(self, slot_name, var):
        meta = var._meta
        return transfer.filled(tuple(meta.shape), meta.dtype, 0)

    def _extra_init(self, dtype):
        """Optimizer-wide state Variables other than iterations (Nadam's momentum cache), made
        when the first Variables are (``dtype``: the first one's, as tf_keras')."""
        return []

    def _create_slots(self, var_list):
        new = [v for v in var_list if v._id not in self._slots]
        if not new:
            return
        with jax.ensure_compile_time_eval():   # concrete slots even inside tapejax.function
            self._create_slots_now(new)

    def _create_slots_now(self, new):
        if not self._slots:
            self._extra = self._extra_init(new[0]._meta.dtype)
            if self._EXTRA_IN_VARIABLES:
                self._weights.extend(self._extra)
        for v in new:
            self._slots[v._id] = {}
        leading = self._leading_slots()
        for v, slot in [(v, n) for n in leading for v in new] + list(self._creation_order(new)):
            base = v.name.split(":")[0]
            init = self._leading_slot_init(slot, v) if slot in leading else self._slot_init(slot, v)
            init = place_like(init, v)
            s = Variable(init, trainable=False, name=f"{base}/{slot}")
            if init is not v._val:   # a new array (``_slot_init``'s zeros): donated by the updates
                s._set_owned(s._value)
            note_slot(s, v)
            self._slots[v._id][slot] = s
            self._weights.append(s)

    def _slots_for_creation(self):
        return self._SLOTS

    def _leading_slots(self):
        """Slots of every trained Variable that come before the rule's (``_SLOTS``): made first, not
        passed to the rule, updated after it by ``_after_rule`` (the new optimizers' ``average``, ``_ema``)."""
        return ()

    def _leading_slot_init(self, slot_name, var):
        raise NotImplementedError   # pragma: no cover - only with _leading_slots

    def _after_rule(self, c, new, leading):
        """The new value of a Variable and of its leading slots, after the rule gave ``new``."""
        return new, leading

    def _slot_names(self):
        """Every slot of a trained Variable, in the order the update takes them."""
        return tuple(self._leading_slots()) + tuple(self._SLOTS)

    def _var_flags(self, var_list):
        """Per-Variable entries added to the rule's coefficients (None: none)."""
        return None

    def _creation_order(self, new):
        """``(variable, slot name)`` pairs in Keras' creation order (``variables()``' order)."""
        if self._INTERLEAVED:   # Ftrl: all slots of a variable, variable by variable
            return [(v, slot) for v in new for slot in self._slots_for_creation()]
        return [(v, slot) for slot in self._slots_for_creation() for v in new]   # one loop per slot name

    # -- the pure update ----------------------------------------------------------
    def _lr_value(self, lr_in, it):
        """The learning rate for this update (float32 scalar): Variable value or schedule(iterations)."""
        if self._lr_sched is not None and lr_in is None:   # (a built-in or optax schedule, or traced)
            sched = self._lr_sched
            # a zero-argument callable (Keras accepts those) or a schedule of the step; an error
            # the callable raises is its own (not retried without the step)
            lr = sched(it) if _takes_step(sched) else sched()
            lr = jnp.asarray(getattr(lr, "_value", lr), jnp.float32)
        else:
            lr = lr_in
        if self._initial_decay > 0.0:
            lr = lr / (1.0 + jnp.float32(self._initial_decay) * it.astype(jnp.float32))
        return lr

    def _clip(self, grads):
        """Keras-2's clipping; a sparse gradient (``(values, indices)``) is clipped by its values,
        as TF clips an ``IndexedSlices`` (its norm is its values' norm, duplicates and all)."""
        vals = [g[0] if type(g) is tuple else g for g in grads]
        if self.clipvalue is not None:
            c = self.clipvalue
            vals = [jnp.clip(g, -c, c) for g in vals]
        if self.clipnorm is not None:
            vals = [_clip_by_norm(g, self.clipnorm) for g in vals]
        if self.global_clipnorm is not None:
            vals = _clip_by_global_norm(vals, self.global_clipnorm)
        return [(x, g[1]) if type(g) is tuple else x for x, g in zip(vals, grads)]

    def _prepare(self, c, step, extra):
        """Optimizer-wide coefficients: ``c`` holds ``lr`` and the ``_update_hypers`` (float32
        scalars); returns (coefficients for ``_apply``, new extra state)."""
        return c, extra

    def _apply(self, c, g, v, slots):
        raise NotImplementedError

    def _apply_sparse(self, c, g, ind, v, slots):
        """The update for a sparse gradient (rows ``g`` at ``ind``): tf_keras' default, the
        duplicate rows summed (``_deduplicate_indexed_slices``) and TF's sparse kernel, which is the
        dense rule on those rows alone (SGD with momentum, Adagrad, Adadelta, Ftrl, RMSprop with
        momentum).  Optimizers whose Keras-2 sparse rule differs override it (``_rules``)."""
        g, u = dedup_rows(g, ind, v.shape[0])
        nv, ns = self._apply(c, g, take_rows(v, u), tuple(take_rows(x, u) for x in slots))
        return put_rows(v, u, nv), tuple(put_rows(x, u, y) for x, y in zip(slots, ns))

    def _pure_update(self, var_vals, slot_vals, extra_vals, grads, it, lr_in, hyp, flags=None):
        lr = self._lr_value(lr_in, it)
        grads = self._clip(list(grads))
        step = (it + 1).astype(jnp.float32)
        # (a hyperparameter that follows an integer Variable is read as float32, as tf_keras' cast)
        c = {n: jnp.asarray(h, jnp.float32) for n, h in zip(self._update_hypers(), hyp)}
        c["lr"] = lr
        coef, new_extra = self._prepare(c, step, list(extra_vals))
        coef["iterations"] = it   # (before this update)
        nl = len(self._leading_slots())
        new_vars, new_slots = [], []
        for k, (v, s, g) in enumerate(zip(var_vals, slot_vals, grads)):
            cv = coef if flags is None else {**coef, **flags[k]}
            lead, s = tuple(s[:nl]), tuple(s[nl:])
            if type(g) is tuple:   # an IndexedSlices' (values, indices): the sparse rule
                nv, ns = self._apply_sparse(cv, g[0].astype(v.dtype), g[1], v, s)
            else:
                nv, ns = self._apply(cv, cast(Any, g).astype(v.dtype), v, s)
            if nl:
                nv, lead = self._after_rule(cv, nv, lead)
                ns, s = lead + tuple(ns), lead + s
            new_vars.append(nv.astype(v.dtype))
            new_slots.append(tuple(x.astype(o.dtype) for x, o in zip(ns, s)))
        return new_vars, new_slots, new_extra, it + 1

    # -- API ----------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        """Apply ``(gradient, variable)`` pairs; ``None`` gradients are skipped with a warning."""
        return self._apply_gradients(grads_and_vars, None)

    def _apply_gradients(self, grads_and_vars, guard):
        """``apply_gradients``; a ``guard`` (``loss_scale.Guard``) wraps the pure update (``guard.wrap``)
        and adds its Variables after ``_extra`` (``guard.state``; ``guard.key`` in the plan's key)."""
        pairs = _filter_empty_gradients(grads_and_vars)
        if not pairs:   # an empty list: tf_keras' no-op (the legacy classes make ``iterations``)
            _ = self.iterations
            return None
        if self._hyper_fn:
            self._call_hypers()
        if _state._local.collector is None:
            done = self._apply_again(pairs, guard)
            if done is not None:
                return done
        grads, var_list = [], []
        sparse = False
        for g, v in pairs:
            if not isinstance(v, Variable):
                raise TypeError(f"apply_gradients expects (gradient, Variable) pairs; got {v!r} of type "
                                f"{type(v).__name__} as a variable")
            if type(g) is IndexedSlices:   # a sparse update of the rows it holds (tf_keras' sparse rules)
                grads.append(sparse_pair(g, v, self._SPARSE_REFUSES_CONSTRAINT))
                var_list.append(v)
                sparse = True
                continue
            if isinstance(g, (Tensor, Variable)):
                gd = np.dtype(g._meta.dtype)
            elif isinstance(g, (jax.Array, jax.core.Tracer)):
                gd = np.dtype(g.dtype)
            else:
                gd = None
            if gd is not None and gd != v._meta.dtype:
                from ..core.errors import InvalidArgumentError
                raise InvalidArgumentError(
                    None, None, f"var and grad do not have the same dtype: variable {v.name} has dtype "
                    f"{np.dtype(v._meta.dtype).name}, its gradient has dtype {gd.name}")
            g = g._value if type(g) is Tensor else convert_to_tensor(g, dtype_hint=v.dtype)._value
            if g.shape != v._meta.shape:
                from ..core.errors import InvalidArgumentError
                raise InvalidArgumentError(
                    None, None, f"var and grad do not have the same shape: variable {v.name} has shape "
                    f"{tuple(v._meta.shape)}, its gradient has shape {tuple(g.shape)}")
            grads.append(g)
            var_list.append(v)
        seen = set()
        for v in var_list:
            if v._id in seen:
                raise ValueError(f"Variable {v.name} appears more than once in grads_and_vars; sum its "
                                 "gradients first.")
            seen.add(v._id)
        col = _state._local.collector
        traced = col is not None or any(isinstance(g[0] if type(g) is tuple else g, jax.core.Tracer) for g in grads)
        lr_now = None if traced else self._lr_now()   # (a learning-rate callable runs before any state changes)
        it_var = self.iterations
        self._create_slots(var_list)
        names = self._slot_names()
        slot_vars = [tuple(self._slots[v._id][s] for s in names if s in self._slots[v._id]) for v in var_list]
        extra = list(getattr(self, "_extra", [])) + list(() if guard is None else guard.state)
        flat_slots = [s for ss in slot_vars for s in ss]
        state = list(var_list) + flat_slots + extra + [it_var]
        lr_var = self._lr_var if self._lr_sched is None else None
        hv = self._hyper_vars()
        if traced:
            _touch(state, True)
            _touch(hv if lr_var is None else (lr_var,) + hv, False)
            lr_in = None if lr_var is None else lr_var._value
            pure = self._pure_update if guard is None else guard.wrap(self._pure_update)
            out = pure([v._value for v in var_list], [tuple(s._value for s in ss) for ss in slot_vars],
                       [e._value for e in extra], grads, it_var._value, lr_in, [h._value for h in hv],
                       self._var_flags(var_list))
        else:
            # Eager: ONE compiled update of every variable, slot and counter (donated).
            state, fn = self._eager_plan(var_list, slot_vars, extra, it_var, guard)
            # (a sparse step is not offered for prediction: its update is in place, donated)
            _run_update(state, var_list, fn, () if sparse else [g for g, _ in pairs],
                        (lr_now, *[h._value for h in hv]), grads)
            return it_var
        new_vars, new_slots, new_extra, new_it = out
        for v, x in zip(var_list, new_vars):
            v._value = x
        for ss, xs in zip(slot_vars, new_slots):
            for s, x in zip(ss, xs):
                s._value = x
        for e, x in zip(extra, new_extra):
            e._value = x
        it_var._value = new_it
        for v in var_list:
            if v.constraint is not None:
                v.assign(v.constraint(v))
        return it_var

    def _apply_again(self, pairs, guard=None):
        """The eager update of a list of Variables this optimizer updated before (its compiled
        plan is cached, so the list was checked then: Variables, no repeats, slots made): only
        the gradients are left to check, Tensors (or pending ones, checked without computing
        them: the update may have been predicted, ``_run_update``) of their Variables' dtypes and
        shapes.  None where the full path must run (anything else, or the first update of this
        list)."""
        key = tuple([v._id if isinstance(v, Variable) else None for _, v in pairs])   # (Keras variables too)
        plan = self._updates.get(key if guard is None else (key, guard.key))
        if plan is None:
            return None
        gs, var_list = [], []
        for g, v in pairs:
            tg = type(g)
            if tg is Pending:   # a gradient (``runtime.deferred``), maybe not computed (``runtime.speculate``)
                th = g._thunk
                a = th.value
                if a is None:
                    meta = th.aval
                elif type(a) is _Array:
                    meta = a.aval
                else:
                    return None
            elif tg is Tensor:
                a = g._value
                if type(a) is not _Array:
                    return None
                meta = a.aval
            else:
                return None
            va = v._val.aval   # (the Variable's value, or its pending update's: not computed)
            if meta.dtype != va.dtype or meta.shape != va.shape:
                return None
            gs.append(g)
            var_list.append(v)
        state, fn = plan
        lr_in = self._lr_now()
        _run_update(state, var_list, fn, gs, (lr_in, *[h._value for h in self._hyper_vars()]))
        return self._iterations   # (no local keeps a gradient's value: see Donating)

    def _eager_plan(self, var_list, slot_vars, extra, it_var, guard=None):
        """(state Variables in a flat list, jitted flat update) for this list of variables (cached)."""
        key = tuple(v._id for v in var_list)
        key = key if guard is None else (key, guard.key)
        plan = self._updates.get(key)
        if plan is None:
            with self._lock:
                plan = self._updates.get(key)
                if plan is None:
                    n = len(var_list)
                    sizes = [len(ss) for ss in slot_vars]
                    n_extra = len(extra)
                    state = tuple(var_list) + tuple(s for ss in slot_vars for s in ss) + tuple(extra) + (it_var,)
                    pure = self._pure_update if guard is None else guard.wrap(self._pure_update)
                    flags = self._var_flags(var_list)

                    def flat_update(vals, grads, lr_in, *hyp):
                        pos = n
                        slots = []
                        for k in sizes:
                            slots.append(tuple(vals[pos:pos + k]))
                            pos += k
                        nv, ns, ne, it = pure(vals[:n], slots, vals[pos:pos + n_extra], grads, vals[-1], lr_in,
                                              hyp, flags)
                        return list(nv) + [x for xs in ns for x in xs] + list(ne) + [it]

                    plan = self._updates[key] = (state, Donating(flat_update))
        return plan

    def minimize(self, loss, var_list, grad_loss=None, name=None, tape=None):
        """Compute gradients of ``loss`` (a callable, or a Tensor with its ``tape``) and apply them."""
        grads_and_vars = self._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(grads_and_vars)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        if not callable(loss) and tape is None:
            raise ValueError("`tape` is required when a `Tensor` loss is passed. "
                             f"Received: loss={loss}, tape={tape}.")
        if tape is None:
            tape = GradientTape()
        if callable(loss):
            with tape:
                if not callable(var_list):
                    tape.watch(var_list)
                loss = loss()
                if callable(var_list):
                    var_list = var_list()
        elif callable(var_list):
            var_list = var_list()
        var_list = _nest.flatten(var_list)
        grads = tape.gradient(loss, var_list, grad_loss)
        return list(zip(grads, var_list))

    def __repr__(self):
        return f"<tapejax.optimizers.{type(self).__name__} name={self._name!r}>"
