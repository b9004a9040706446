"""Buffer ownership and atomic commits: when a compiled update may donate a Variable's buffer.

JAX deletes a donated input buffer; anything else still holding it (a Tensor the user kept, a
recorded read, a pending op's input, another Variable) would then read a deleted array.  So a
buffer is donated only when the library knows its Variable alone holds it, by explicit
ownership, never by reference counts: a Variable's ``_own`` is its current buffer while it owns
it (``Variable.owns_buffer``); every hand-out (a read, ``_share``, ``__jax_array__``) and every
assignment from outside clears it, and only a fresh output of a library update
(``write_back``: a new array that is none of the call's inputs and not returned twice) or a
private copy of host data sets it.

A read by a step's deferred ops (``runtime.deferred``: the forward of a training step) is not a
hand-out but a ``Loan``: the buffer goes to the ops left pending and to the recording tapes, which
the loan lists (weakly).  It comes back to its Variable (``Variable.owns_buffer``) once each of
them is gone or done with it (a tape released after its gradient, a pending op computed, which
drops its inputs: ``_holds_inputs()``), so the step's optimizer update donates it as a
hand-written ``jax.jit`` step donates its parameters.  A gradient call's inputs captured by a
value that outlives the call (a predicted call's recompute, a nested gradient left pending:
``note_capture``) may hold a lent buffer where no loan lists it: a buffer lent before any such
capture never comes back.

``Donating`` is a jitted update that donates exactly the buffers their Variables own;
``commit`` runs one and writes the new values as one unit (``deferred_interrupts``: a Ctrl-C
arriving meanwhile is delivered after it, so the Variables are all updated or all untouched),
then runs the Variables' constraints.  ``tapejax.function`` and the optimizers use them.
``note_slot`` / ``slot_owner`` record which Variable a piece of optimizer state belongs to, so
``tapejax.function``'s ``variable_specs`` places (shards) the state like its Variable.
``SLOT_GUARDS`` lists the Variable subclasses whose buffers a compiled step's fast path may read
and write through the slots, as a ``Variable``'s.
"""
import signal
import threading
import weakref
from typing import Any, Callable, Iterable, Optional, Sequence

import jax

try:   # the C functions behind ``signal.signal`` / ``getsignal``, without their enum wrapping (~8x faster)
    # (a private C module that typeshed has no stub for)
    from _signal import getsignal as _getsignal, signal as _setsignal  # pyright: ignore[reportMissingImports]
except ImportError:  # pragma: no cover - not CPython
    from signal import getsignal as _getsignal, signal as _setsignal

_Array = type(jax.numpy.zeros(()))   # the concrete array type


#: How many times a gradient call's inputs were captured by a value that outlives the call
#: (``note_capture``): a ``Loan`` made before the last capture never settles.
CAPTURES = [0]


def note_capture() -> None:
    """A gradient call's inputs (a step's lent buffers among them) are held by a value that
    outlives the call, where no ``Loan`` lists it: no buffer lent before now comes back."""
    CAPTURES[0] += 1


class Loan:
    """A Variable's own buffer lent to one step's pending ops and recording tapes: the buffer
    (weakly), ``CAPTURES`` when it was lent, and its holders (weakly; each has
    ``_holds_inputs()``: a pending op until it is computed, a tape until it is released)."""

    __slots__ = ("buffer", "epoch", "holders")

    def __init__(self, buffer: Any):
        self.buffer = weakref.ref(buffer)
        self.epoch = CAPTURES[0]
        self.holders: list = []

    def lend(self, holder: Any) -> None:
        self.holders.append(weakref.ref(holder))

    def settled(self) -> bool:
        """Whether every holder is gone or done with the buffer, with no capture since the loan."""
        if self.epoch != CAPTURES[0]:
            return False
        for r in self.holders:
            h = r()
            if h is not None and h._holds_inputs():
                return False
        return True


def fresh_outputs(inputs: Iterable[Any], outputs: Sequence[Any], others: Iterable[Any] = ()) -> list:
    """For each of ``outputs`` (a compiled update's new values): a new array that is none of
    ``inputs``, none of ``others`` (other results of the call) and no other of ``outputs``?
    (A compiled call may return an input, or one array twice, as it is.)  Only such an array
    may become a Variable's own (``Variable._set_owned``)."""
    ids = set(map(id, outputs))
    if len(ids) == len(outputs) and ids.isdisjoint(map(id, inputs)) and ids.isdisjoint(map(id, others)):
        return [type(x) is _Array for x in outputs]   # (the usual case, checked in C loops)
    seen = set(map(id, inputs))
    seen.update(map(id, others))
    count: dict = {}
    for x in outputs:
        count[id(x)] = count.get(id(x), 0) + 1
    return [type(x) is _Array and id(x) not in seen and count[id(x)] == 1 for x in outputs]


def write_back(variables: Sequence[Any], new: Sequence[Any], inputs: Iterable[Any],
               others: Iterable[Any] = ()) -> None:
    """Store a compiled update's outputs ``new`` in ``variables``: each owns its value where
    ``fresh_outputs`` says nothing else holds it (so a later update may donate it)."""
    for v, x, f in zip(variables, new, fresh_outputs(inputs, new, others)):
        if f:
            v._set_owned(x)
        else:
            v._value = x


#: Variable subclasses whose value is the ``_val`` slot, owned as ``_own`` says, exactly as a
#: ``Variable``'s whenever their guard returns True (``keras.variables.KerasVariable``: outside a
#: Keras scope), registered where the subclass is defined.  A compiled step's fast path
#: (``compile.entries.steady_call``) reads and writes those slots itself, after one call of each
#: guard; another subclass, which may read or write its value its own way, never takes it.
SLOT_GUARDS: "dict[type, Callable[[], bool]]" = {}


_MAIN_THREAD = threading.main_thread()
_SIGINT = int(signal.SIGINT)


class deferred_interrupts:
    """A block that Ctrl-C cannot split: a SIGINT arriving inside is delivered at its end.

    Multi-Variable writes (an optimizer step, ``tapejax.function``'s write-back)
    compute every new value first and then commit inside this block, so a
    KeyboardInterrupt leaves the Variables all updated or all untouched.  Only
    the main thread receives signals (and may set handlers); elsewhere it is a
    no-op.
    """

    __slots__ = ("_old", "_got")

    def __enter__(self):
        self._old = self._got = None
        if threading.current_thread() is _MAIN_THREAD:
            old = _getsignal(_SIGINT)
            if callable(old):   # a Python handler (default: raise KeyboardInterrupt)
                _setsignal(_SIGINT, self._hold)
                self._old = old
        return self

    def _hold(self, signum, frame):
        self._got = (signum, frame)

    def __exit__(self, *exc):
        old = self._old
        if old is not None:
            _setsignal(_SIGINT, old)
            if self._got is not None:
                old(*self._got)   # the held interrupt, now that the block is complete
        return False


class Donating:
    """A jitted flat update ``f(vals, *rest) -> new values`` that donates the ``vals`` its
    Variables own.

    ``shared[i]`` says that ``vals[i]`` is not its Variable's alone (``Variable.owns_buffer``
    is False: a read, a Tensor the user kept, a pending value's input, another Variable may
    hold it): it must survive the call, so it is passed undonated; the others are donated.
    One compiled variant per such mask (a training loop uses one or two); past
    ``_MAX_MASKS`` nothing is donated.  Copying a shared value in order to donate it costs a
    dispatch per array and saves nothing.
    """

    __slots__ = ("_f", "_variants", "__weakref__")
    _MAX_MASKS = 8

    def __init__(self, f: Callable[..., Any]):
        self._f = f
        self._variants: dict = {}

    def __call__(self, vals, shared, *rest):
        mask = tuple(shared)
        fn = self._variants.get(mask)
        if fn is None:
            if len(self._variants) >= self._MAX_MASKS:
                mask = (True,) * len(vals)
                fn = self._variants.get(mask)
            if fn is None:
                fn = self._variants.setdefault(mask, self._variant(mask))
        if not any(mask):
            return fn(vals, *rest)
        return fn([v for v, m in zip(vals, mask) if not m], [v for v, m in zip(vals, mask) if m], *rest)

    def _variant(self, mask):
        f = self._f
        if not any(mask):
            return jax.jit(f, donate_argnums=0)

        def split(donated, kept, *rest):
            d, k = iter(donated), iter(kept)
            return f([next(k) if m else next(d) for m in mask], *rest)

        return jax.jit(split, donate_argnums=0)

    def _cache_size(self):
        """Compiled programs over all variants (what ``jax.jit``'s ``_cache_size`` counts)."""
        return sum(fn._cache_size() for fn in self._variants.values())


def commit(state: Sequence[Any], constrained: Sequence[Any], update: Callable[[list, list], Sequence[Any]],
           owned: bool = True) -> None:
    """Run ``update(values, shared) -> new values`` (donating where not ``shared``, see
    ``Donating``) and write ``state`` as one unit.

    Ctrl-C cannot split the call and the write (``deferred_interrupts``: the donated old
    values are gone once the call ran).  With ``owned`` each Variable then owns its new value,
    unless that array is one of the inputs (an unchanged value the program passed through) or
    also another Variable's.  The ``constrained`` Variables' constraints run after; if one
    raises, every Variable of ``state`` is put back (none of them was donated: a constrained
    update shares them all).
    """
    with deferred_interrupts():
        vals = [v._value for v in state]
        shared = [True] * len(state) if constrained else [not v.owns_buffer() for v in state]
        new = update(vals, shared)
        if owned:
            write_back(state, new, vals)
        else:
            for v, x in zip(state, new):
                v._value = x
    if constrained:
        try:
            fixed = [(v, v._new_value(v.constraint(v), "assign")) for v in constrained]
        except BaseException:
            with deferred_interrupts():
                for v, x in zip(state, vals):   # (the old values: none was donated)
                    v._value = x
            raise
        with deferred_interrupts():
            for v, x in fixed:
                v._value = x


# -- optimizer state and the Variable it belongs to ----------------------------------------
#: slot Variable id -> weak reference to the Variable it belongs to (``slot_owner``).
_SLOT_OWNERS: dict[int, "weakref.ref[Any]"] = {}


def note_slot(slot: Any, owner: Any) -> None:
    """Record that ``slot`` is optimizer state shaped like ``owner`` (``slot_owner``)."""
    _SLOT_OWNERS[slot._id] = weakref.ref(owner)
    weakref.finalize(slot, _SLOT_OWNERS.pop, slot._id, None)


def slot_owner(var: Any) -> Optional[Any]:
    """The Variable whose optimizer state ``var`` is (a slot, an optax state leaf), or None:
    ``tapejax.function``'s ``variable_specs`` places a slot like its Variable."""
    ref = _SLOT_OWNERS.get(var._id)
    return None if ref is None else ref()
