"""examples/quickstart.py runs and prints the values the seed posts printed with TensorFlow."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The examples import the tapejax of this checkout, whatever is installed.
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture(scope="module")
def quickstart_output():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, out.stderr


def test_seed_000_values(quickstart_output):
    _, err = quickstart_output  # tf.print writes to stderr, as TF's does
    lines = err.splitlines()
    assert lines[:6] == ["[0 0.6]", "[[2 2], [2 2]]", "[[7 7], [7 7]]", "[[7 7], [7 7]]",
                         "[[-7 -7], [-7 -7]]", "6"]


def test_seed_001_values(quickstart_output):
    out, _ = quickstart_output
    assert "[0.6881597  0.71584916]" in out
    assert "[[ 0.20586157 -0.20586154]" in out and "0.70200443" in out


def test_seed_002_third_derivative(quickstart_output):
    _, err = quickstart_output
    assert "2 2 0" in err.splitlines()


def test_seed_003_linear_regression_converges(quickstart_output):
    out, _ = quickstart_output
    line = next(l for l in out.splitlines() if l.startswith("m: "))
    m, b = (float(part.split(": ")[1]) for part in line.split(", "))
    assert abs(m - 3.0) < 0.05 and abs(b - 2.0) < 0.05
    assert "misses=1" in out  # 500 steps, one compiled replay


def test_explain_is_printed(quickstart_output):
    out, _ = quickstart_output
    assert "None" in out and "tape.watch(x)" in out


def test_hessian_recipes_agree():
    """examples/hessians.py: five TF2 Hessian recipes give jax.hessian's matrix (it asserts so)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "hessians.py")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("max |diff| vs jax.hessian") == 5
