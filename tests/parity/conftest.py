"""Parity-suite setup: quiet, CPU-only, deterministic TensorFlow next to JAX.

The environment must be set before TensorFlow is imported, which is why this
runs at conftest import time (pytest imports it before the test modules).
TensorFlow and JAX share the process; TF is imported lazily by the harness
(``pytest.importorskip``), so a machine without TF still runs the tapejax side
against the cases' ``expected=`` values.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")      # no C++ INFO/WARNING spam
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")     # oneDNN changes float round-off
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")       # no GPU for TF
os.environ.setdefault("JAX_PLATFORMS", "cpu")           # no GPU for JAX either
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")       # tf.keras = tf_keras (Keras 2): optimizers.legacy, minimize(grad_loss=)

import pytest  # noqa: E402,F401


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore::FutureWarning")


@pytest.fixture(autouse=True)
def _without_the_persistent_compilation_cache():
    """Parity tests run with the suite's persistent compilation cache off (``tests/conftest.py``
    turns it on for the worker): two CI-like runs of stop 45 crashed a worker with a segmentation
    fault inside JAX's cache write (``compilation_cache.put_executable_and_time``, serializing a
    CPU executable) in ``test_user_programs4.py``'s LSTM program, after thousands of tests in a
    process that also runs TensorFlow; that program alone, and every file of stop 45 before it,
    pass.  Not understood yet (see the stop's note); without the write there is nothing to crash."""
    import tapejax
    prev = tapejax.config.get_compilation_cache()
    if prev is None:
        yield
        return
    tapejax.config.set_compilation_cache(None)
    try:
        yield
    finally:
        tapejax.config.set_compilation_cache(prev)
