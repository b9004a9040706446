"""Shared fixtures for the unit tests, and the suite's compilation cache.

Many tests compile the same XLA programs (the same op on the same shapes, a training step of
the same structure) under other jit objects, which JAX's in-memory caches do not share.  The
suite therefore turns tapejax's own setting for JAX's persistent compilation cache on
(``tapejax.config.set_compilation_cache``, see ``tapejax/compile/config.py``), in a directory of
its own per worker process, removed at the end: a program compiled once is loaded the next time
instead of compiled (the same executable; the compile log still names it).  One directory per
worker because JAX's cache locks its files only when eviction is on, which needs ``filelock``.
``TAPEJAX_TEST_COMPILATION_CACHE=0`` turns it off.

Most of the suite's time is XLA compiling small CPU programs (about 0.1 s each, thousands of
them), not running them.  The suite therefore asks XLA's CPU backend for its quick code
generation (``TEST_XLA_FLAGS``: LLVM optimisation level 0 and the classic loop emitters instead
of the MLIR fusion emitters), which compiles a small program about twice as fast; the programs
compute the same values (IEEE arithmetic in the same order: no fast-math either way), so what
the tests check, tapejax's own logic against TF's numbers, is the same.  The flags are set
before JAX starts, in ``XLA_FLAGS`` (so subprocesses started with ``tests/_env.py`` get them
too), only for the jaxlib releases they were checked on (XLA aborts on a flag it does not
know); a flag the caller already put in ``XLA_FLAGS`` wins.  ``TAPEJAX_TEST_XLA_FLAGS=default``
runs the suite with XLA's default code generation (the benchmarks always use it).
"""
import atexit
import gc
import logging
import os
import shutil
import tempfile

from _env import set_test_xla_flags

#: Every temporary file the tests make (the parity programs' ``tempfile.mkdtemp()`` directories,
#: checkpoints, SavedModels, TF's and AutoGraph's generated modules, subprocesses' files through
#: ``TMPDIR``) goes into one directory per process, removed when the process exits.
_TMP_ROOT = tempfile.mkdtemp(prefix="tapejax-tests-")
tempfile.tempdir = _TMP_ROOT
os.environ["TMPDIR"] = _TMP_ROOT
atexit.register(shutil.rmtree, _TMP_ROOT, True)

set_test_xla_flags()   # (before JAX starts: importing tapejax below does not start a backend)

import pytest  # noqa: E402

import tapejax  # noqa: E402

if os.environ.get("TAPEJAX_TEST_COMPILATION_CACHE", "1") != "0" and tapejax.config.get_compilation_cache() is None:
    _CACHE_DIR = tempfile.mkdtemp(prefix="tapejax-test-xla-")
    tapejax.config.set_compilation_cache(_CACHE_DIR)
    atexit.register(shutil.rmtree, _CACHE_DIR, True)


@pytest.fixture(autouse=True)
def _predicted_programs_compile_on_the_caller(request):
    """Tests count the steps that predict their updates: a loop's predicted program compiles on
    the step that first predicts (its third), not on a worker thread while steps run plain
    (``tapejax.runtime.speculate.set_background_compile``, on by default), unless a test turns
    that on itself, or its module says ``BACKGROUND_COMPILE = True`` (the default's values are
    checked there: the training-loop fuzzer)."""
    from tapejax.runtime import speculate
    if getattr(request.module, "BACKGROUND_COMPILE", False):
        yield
        return
    prev = speculate.set_background_compile(False)
    yield
    speculate.set_background_compile(prev)


@pytest.fixture(autouse=True)
def _unseeded_global_generator():
    """Each test starts as a fresh process does: no global seed (``tf.random.set_seed(None)``),
    whatever a test before it on the same worker set (a seed left set changes every op-seeded
    draw after it: ``Dataset.random(seed=5)`` is TF's pair (global, op) seed)."""
    tapejax.random.set_seed(None)
    yield


def _global_modes():
    import jax

    from tapejax.compile import config as compile_config
    return {"deferred execution": tapejax.deferred_execution(), "speculative updates": tapejax.speculative_updates(),
            "functions run eagerly": compile_config.functions_run_eagerly(),
            "jax_enable_x64": bool(jax.config.jax_enable_x64)}


def thread_leaks(modes) -> list:
    """What a test left changed on this thread against ``modes`` (``_global_modes()`` before it):
    a tape recording, a function's collector, a gradient override, a name scope, a global mode;
    each is put back."""
    from tapejax.core import state
    loc, leaks = state._local, []
    if loc.tapes:
        leaks.append(f"{len(loc.tapes)} tape(s) still recording")
        for rec in reversed(list(loc.tapes)):
            state.pop_tape(rec)
    if loc.collector is not None:
        leaks.append("a tapejax.function collector still set")
        state.set_collector(None)
    if loc.overrides:
        leaks.append("a gradient_override_map still active")
        for mapping in reversed(loc.overrides):
            state.pop_override(mapping)
    if loc.name_scope:
        leaks.append(f"name scope {loc.name_scope!r} still open")
        loc.name_scope = ""
    now = _global_modes()
    changed = {k: (modes[k], now[k]) for k in modes if modes[k] != now[k]}
    if changed:
        import jax

        from tapejax.compile import config as compile_config
        leaks.append(f"global modes changed (before, after): {changed}")
        tapejax.set_deferred_execution(modes["deferred execution"])
        tapejax.set_speculative_updates(modes["speculative updates"])
        compile_config.run_functions_eagerly(modes["functions run eagerly"])
        jax.config.update("jax_enable_x64", modes["jax_enable_x64"])
    return leaks


@pytest.fixture(autouse=True)
def _test_leaves_its_thread_as_it_found_it():
    """A test that leaves a tape recording, a function's collector or a gradient override on the
    thread, a name scope open, or a global mode changed (deferred execution, predicted updates,
    ``run_functions_eagerly``, x64) fails here (``thread_leaks``), and the state is put back:
    otherwise a later test on the same worker runs under it and fails in its place, depending on
    the order xdist gives."""
    modes = _global_modes()
    yield
    leaks = thread_leaks(modes)
    assert not leaks, "the test left its thread changed: " + "; ".join(leaks)


@pytest.fixture
def fresh_cache():
    """An empty compiled-replay cache with zeroed counters."""
    tapejax.clear_cache()
    yield
    tapejax.clear_cache()


@pytest.fixture
def eager_ops():
    """Deferred execution off for the test (every op dispatched when called), then restored."""
    prev = tapejax.set_deferred_execution(False)
    yield
    tapejax.set_deferred_execution(prev)


@pytest.fixture
def tapejax_log(caplog):
    caplog.set_level(logging.WARNING, logger="tapejax")
    return caplog


def pytest_addoption(parser):
    parser.addoption("--fuzz-examples", type=int, default=None, metavar="N",
                     help="tests/test_fuzz.py: run N random examples per fuzz test instead of "
                          "the fixed CI set (same as TAPEJAX_FUZZ_EXAMPLES=N)")
    parser.addoption("--train-fuzz-examples", type=int, default=None, metavar="N",
                     help="tests/test_train_fuzz.py: run N random training loops in every mode instead "
                          "of the fixed CI set (same as TAPEJAX_TRAIN_FUZZ_EXAMPLES=N)")


def pytest_configure(config):
    n = config.getoption("--fuzz-examples", default=None)
    if n:
        import os
        os.environ["TAPEJAX_FUZZ_EXAMPLES"] = str(n)
    n = config.getoption("--train-fuzz-examples", default=None)
    if n:
        import os
        os.environ["TAPEJAX_TRAIN_FUZZ_EXAMPLES"] = str(n)


_MAPS_LIMIT = 40_000   # Linux's default vm.max_map_count is 65,530


def _memory_maps() -> int:
    try:
        with open(f"/proc/{os.getpid()}/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:   # (not Linux)
        return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs_when_maps_pile_up():
    """Compiled XLA CPU programs keep anonymous memory mappings; stop 45's CI-like runs crashed a
    worker with a segmentation fault inside XLA (compiling or serializing the next program, in
    test_user_programs4's recurrent Keras programs) at the same point of every run, and the
    surviving worker held 31,000 mappings at 73%: most likely Linux's limit per process
    (vm.max_map_count, 65,530) reached, an mmap failing inside XLA (not proven).  After a module
    whose process holds more than ``_MAPS_LIMIT`` mappings, JAX's and tapejax's caches of compiled
    programs are dropped, which unmaps them (they are compiled again when needed)."""
    yield
    if _memory_maps() > _MAPS_LIMIT:
        import jax
        gc.unfreeze()   # (the programs below may sit in frozen reference cycles)
        jax.clear_caches()
        tapejax.clear_cache()
        gc.collect()
    if _FREEZE:
        gc.freeze()


#: After each module, what is still alive moves to the collector's permanent generation
#: (``gc.freeze``): TensorFlow's, JAX's and Keras's modules and the caches a worker builds up are
#: millions of objects, which every automatic full collection (and every ``gc.collect()`` a test
#: makes to check a release) would traverse again; a worker spent 5-10% of its time there.
#: Objects a test makes are young and collected as before; a frozen object is never collected
#: (a module's leftovers that later die in a reference cycle stay, a bounded leak per module), and
#: the release of compiled programs above unfreezes first.  ``TAPEJAX_TEST_GC_FREEZE=0`` turns it off.
_FREEZE = os.environ.get("TAPEJAX_TEST_GC_FREEZE", "1") != "0"


# -- the parity suite's TF recordings (tests/parity/recorded.py) --------------------------------

_PARITY_RAN_LIVE: set = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(pytest-xdist, in the controller) the parity modules a worker ran TF for."""
    _PARITY_RAN_LIVE.update(getattr(node, "workeroutput", {}).get("parity_ran_live", ()))


def pytest_terminal_summary(terminalreporter):
    """Name the parity modules whose cases had no current TF recording, so ran TF (which costs as
    much as the tapejax side), with the command that records them."""
    import sys
    rec = sys.modules.get("parity.recorded")
    live = _PARITY_RAN_LIVE | (rec.RAN_LIVE if rec is not None else set())
    if live and os.environ.get("TAPEJAX_PARITY_RECORD") != "1" and os.environ.get("TAPEJAX_PARITY_LIVE") != "1":
        names = " ".join(sorted(f"tests/parity/{m.rsplit('.', 1)[-1]}.py" for m in live))
        terminalreporter.write_line(f"parity modules without a current TF recording (TF ran for them; record them "
                                    f"with TAPEJAX_PARITY_RECORD=1 python3 -m pytest <files>): {names}")
