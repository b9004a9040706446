"""Shared fixtures for the unit tests."""
import logging

import pytest

import tapejax


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
