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


def pytest_sessionfinish(session):
    """In a recording run (``TAPEJAX_PARITY_RECORD=1``), write the TF results this process
    computed into ``recorded/`` (each xdist worker writes its own, merged under a lock); a worker
    hands the modules it ran TF for to the controller (``tests/conftest.py`` names them)."""
    from . import recorded
    written = recorded.flush()
    if written:
        print(f"\nrecorded TF results into {len(written)} files under {recorded.RECORD_DIR}")
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["parity_ran_live"] = sorted(recorded.RAN_LIVE)
