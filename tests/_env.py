"""The XLA code generation the suite runs under, and the environment of the subprocesses that
tests start (see ``conftest.py``: the quick CPU code generation, for compile time)."""
import functools
import importlib.metadata
import os
import subprocess
import sys
from typing import Any, Callable, Dict

#: XLA's quick CPU code generation (compiles a small program about twice as fast).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")

#: jaxlib releases whose XLA knows ``TEST_XLA_FLAGS`` (an unknown flag aborts the process).
CHECKED_JAXLIB = ("0.10.",)


def suite_xla_flags() -> str:
    """``XLA_FLAGS`` for the suite: ``TEST_XLA_FLAGS`` before the caller's own (a flag given
    there wins), unless ``TAPEJAX_TEST_XLA_FLAGS=default`` or the installed jaxlib is not one
    they were checked on."""
    own = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("TAPEJAX_TEST_XLA_FLAGS", "") == "default":
        return own
    try:
        version = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:   # pragma: no cover - jax without jaxlib's metadata
        return own
    if not version.startswith(CHECKED_JAXLIB):
        return own
    given = {f.split("=")[0] for f in own.split()}
    ours = [f for f in TEST_XLA_FLAGS if f.split("=")[0] not in given]
    return " ".join([*ours, own]).strip()


def set_test_xla_flags() -> None:
    """Put ``suite_xla_flags()`` in this process's environment (before JAX starts)."""
    flags = suite_xla_flags()
    if flags:
        os.environ["XLA_FLAGS"] = flags


def subprocess_env(xla_flags: str = "", **extra: str) -> Dict[str, str]:
    """The environment for a test's subprocess: this one's, ``xla_flags`` added to the suite's
    ``XLA_FLAGS`` (e.g. ``--xla_force_host_platform_device_count=4``), and ``extra``."""
    flags = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), xla_flags) if f)
    env = dict(os.environ, **extra)
    if flags:
        env["XLA_FLAGS"] = flags
    return env


def uses_test_flags() -> bool:
    """Whether this process runs under the suite's quick code generation (``TEST_XLA_FLAGS``)."""
    given = os.environ.get("XLA_FLAGS", "").split()
    return all(f in given for f in TEST_XLA_FLAGS)


def default_codegen(test: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test whose answer depends on XLA's default CPU code generation (an exact boundary
    that a fused multiply-add moves by an ulp, as ``crop_and_resize`` sampling exactly at an
    image's edge): under the suite's quick code generation it runs again, alone, in a pytest
    subprocess with XLA's defaults (``TAPEJAX_TEST_XLA_FLAGS=default``), and passes or fails
    with it; elsewhere it runs as it is."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        if not uses_test_flags():
            return test(*args, **kwargs)
        nodeid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS)
        env = dict(os.environ, TAPEJAX_TEST_XLA_FLAGS="default", XLA_FLAGS=flags)
        env.pop("PYTEST_XDIST_WORKER", None)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                               nodeid], capture_output=True, text=True, env=env, cwd=root, timeout=600)
        assert proc.returncode == 0, f"{nodeid} with XLA's default code generation:\n{proc.stdout[-4000:]}"
    return run
