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


def test_keras_classifier_eager_and_compiled():
    """examples/keras_classifier.py: a Keras Sequential trained in a GradientTape loop (loss,
    Adam, accuracy metric, validation between epochs) learns the spirals, eagerly and compiled,
    with the same printed numbers."""
    import re
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "keras_classifier.py"), "--epochs", "10"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    epochs = re.findall(r"^(eager|tapejax.function)\s+epoch\s+(\d+)\s+loss ([\d.]+)\s+accuracy ([\d.]+)\s+"
                        r"val_accuracy ([\d.]+)$", out.stdout, re.M)
    by_mode = {m: [e[1:] for e in epochs if e[0] == m] for m in ("eager", "tapejax.function")}
    assert by_mode["eager"] and by_mode["eager"] == by_mode["tapejax.function"]
    last = by_mode["eager"][-1]
    assert last[0] == "10" and float(last[2]) >= 0.9 and float(last[3]) >= 0.9
