"""Run every training example as a user would (a fresh process) and check what it prints."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(name, *args, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *args], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=ROOT)
    assert p.returncode == 0, f"{name} failed:\n{p.stdout}\n{p.stderr[-3000:]}"
    return p.stdout


def test_linear_regression_seed_003():
    out = _run("linear_regression.py")
    fits = re.findall(r"^(eager|tapejax.function)\s+m: ([-\d.]+), b: ([-\d.]+)", out, re.M)
    assert [f[0] for f in fits] == ["eager", "tapejax.function"]
    for _, m, b in fits:
        assert abs(float(m) - 3.0) < 0.05 and abs(float(b) - 2.0) < 0.05   # data: y = 3x + 2 + noise
    assert fits[0][1:] == fits[1][1:]                                     # compiled == eager, printed digits


def test_mlp_classifier_eager_and_compiled():
    out = _run("mlp_classifier.py", "--epochs", "10")
    rows = dict((m, (float(l), float(a), float(s))) for m, l, a, s in
                re.findall(r"^(eager|tapejax.function)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, re.M))
    assert set(rows) == {"eager", "tapejax.function"}
    for loss, acc, speed in rows.values():
        assert acc >= 0.9 and speed > 0
    assert abs(rows["eager"][0] - rows["tapejax.function"][0]) < 1e-3
    assert "speed-up of tapejax.function over eager" in out
    assert len(re.findall(r"epoch\s+10\s+loss [\d.]+\s+accuracy", out)) == 2


def test_gan_step_output_gradients_minus_one():
    out = _run("gan_step.py")
    assert "both forms agree" in out
    mean = float(re.search(r"generated mean ([-\d.]+)", out).group(1))
    assert 2.5 < mean < 5.0        # the generator moved from N(0, 1) towards the real N(4, 0.5)


def test_optax_optimizer_matches_pure_jax():
    out = _run("optax_optimizer.py")
    assert "parameters agree with pure JAX + optax" in out
    assert "optimizer iterations = 200" in out
