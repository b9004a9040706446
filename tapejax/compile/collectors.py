"""The Variable collectors a ``tapejax.function`` installs while it traces (``core.state._local.collector``).

``Variable`` reads, assigns and creations report to the collector (one thread-local test when
no function traces).  ``_Discover`` (the first pass, or a rediscovery) remembers every Variable
touched and its value before the call and refuses a Variable created against TF's rules;
``_Trace`` (the jitted trace) checks that nothing the discovery did not see is touched
(``_Rediscover`` otherwise).
"""
import jax.core

_Tracer = jax.core.Tracer


class _Rediscover(Exception):
    """The trace touched a Variable the last discovery did not see."""


class _NeedEval(Exception):
    """Discovery met a Variable whose initial value is traced: rerun it evaluating constants."""


_SINGLETON_MSG = ("tf.function only supports singleton tf.Variables created on the first call. Make "
                  "sure the tf.Variable is only created once or created outside tf.function. "
                  "(tapejax.function `{}`)")
_NON_FIRST_MSG = ("Creating variables on a non-first call to a function decorated with tf.function. "
                  "(tapejax.function `{}`: create the Variables outside, or on the first call)")


class _Discover:
    """Discovery: remember every Variable touched (and its value before the call)."""

    def __init__(self, fname, allow_create, eval_mode):
        self.fname = fname
        self.allow_create = allow_create
        self.eval_mode = eval_mode
        self.orig = {}        # var id -> (var, value before)  (insertion = first-touch order)
        self.assigned = set()
        self.created_ids = set()

    def touch(self, var, assign):
        if var._id not in self.orig:
            _ = var._value   # (a pending update is computed now, outside the trace: ``runtime.thunks.force_many``)
            self.orig[var._id] = (var, var._state())
        if assign:
            self.assigned.add(var._id)

    def created(self, var):
        if not self.allow_create:
            raise ValueError(_NON_FIRST_MSG.format(self.fname))
        if isinstance(var._value, _Tracer):
            if not self.eval_mode:
                raise _NeedEval()
            raise ValueError(f"tapejax.function `{self.fname}` created a Variable whose initial value "
                             "depends on the function's arguments; Variables created inside a "
                             "tapejax.function are initialised once, outside the compiled program: "
                             "give an initial value that does not depend on the arguments.")
        self.orig[var._id] = (var, var._state())
        self.created_ids.add(var._id)

    def restore(self):
        for var, state in self.orig.values():
            var._restore(state)


class _Trace:
    """The compiling trace: only known Variables may be touched; none created."""

    __slots__ = ("fname", "known", "rw", "fresh")

    def __init__(self, fname, known, rw, fresh):
        self.fname = fname
        self.known = known
        self.rw = rw
        self.fresh = fresh   # this call just ran discovery (so creating now is a second creation)

    def touch(self, var, assign):
        if var._id not in self.known or (assign and var._id not in self.rw):
            raise _Rediscover()

    def created(self, var):
        if not self.fresh:
            raise _Rediscover()  # discovery decides: first call or not
        raise ValueError(_SINGLETON_MSG.format(self.fname))
