"""TF 2.16+'s idiom, ``import tensorflow as tf`` beside ``import keras`` (Keras 3), against real TF
with Keras 3 on its TF backend: the programs of ``keras3_programs.py``, ``keras3_programs2.py``,
``keras3_programs16b.py`` and ``keras3_pitfalls.py``.

The in-process parity cases cannot run these: there TF's ``tf.keras`` is tf_keras (Keras 2) and the
process's one ``keras`` package is on JAX for tapejax (README.md).  So every program runs in two
fresh processes, one per side (``KERAS_BACKEND=tensorflow`` and ``import tensorflow as tf``;
``import tapejax as tf``, which puts Keras on JAX and on the tape when the program imports it), each
running every module's programs once per test run, side by side; the results are compared per program (None-ness exactly, numbers
within ``_TOL`` or the module's ``TOLERANCES`` entry for the program: float16 compute)."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from . import keras3_pitfalls, keras3_programs, keras3_programs2, keras3_programs16b, recorded

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = {m.__name__.rsplit(".", 1)[-1]: m for m in (keras3_pitfalls, keras3_programs, keras3_programs2,
                                                               keras3_programs16b)}
_TOL = (2e-5, 2e-6)


def _programs(module):
    return sorted(n for n in vars(module) if n.startswith("program_"))

RUNNER = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np
    if sys.argv[1] == "tf":
        import tensorflow as tf
    else:
        import tapejax as tf
    import keras

    def plain(x):
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, float)):
            return float(x)
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return {"array": np.asarray(x.numpy() if hasattr(x, "numpy") else x).tolist()}

    out = {}
    for module_name, path, names in json.loads(sys.argv[2]):
        spec = importlib.util.spec_from_file_location(module_name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out[module_name] = results = {}
        for name in names:
            keras.utils.clear_session()
            try:
                results[name] = plain(getattr(mod, name)(tf, keras))
            except Exception as e:
                results[name] = {"raised": type(e).__name__, "message": str(e)[:500]}
    print("RESULTS " + json.dumps(out))
""")


def _start(side: str) -> subprocess.Popen:
    """One fresh process running every module's programs on ``side`` ("tf" or "tapejax")."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu",
               CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.pop("KERAS_BACKEND", None)
    if side == "tf":
        env["KERAS_BACKEND"] = "tensorflow"
    plan = [(name, module.__file__, _programs(module)) for name, module in sorted(MODULES.items())]
    return subprocess.Popen([sys.executable, "-c", RUNNER, side, json.dumps(plan)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _results(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, out[-3000:] + err[-3000:]
    return json.loads(lines[-1][len("RESULTS "):])


def _same(got, want, where="result", tol=_TOL):
    if isinstance(want, dict) and "array" in want and len(want) == 1:
        assert isinstance(got, dict) and "array" in got, f"{where}: {got!r} where TF has an array"
        g, w = np.asarray(got["array"]), np.asarray(want["array"])
        assert g.shape == w.shape, f"{where}: shape {g.shape} where TF has {w.shape}"
        np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1], err_msg=where)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: {got!r} where TF has {want!r}"
        for k in want:
            _same(got[k], want[k], f"{where}[{k!r}]", tol)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} where TF has {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]", tol)
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, float), f"{where}: {got!r} where TF has {want!r}"
        np.testing.assert_allclose(got, want, rtol=tol[0], atol=tol[1], err_msg=where)
    else:
        assert got == want, f"{where}: {got!r} where TF has {want!r}"


def _differences(got: dict, want: dict) -> tuple:
    failures, count = [], 0
    for module_name, module in sorted(MODULES.items()):
        tolerances = getattr(module, "TOLERANCES", {})
        for name in _programs(module):
            count += 1
            theirs, ours = want[module_name][name], got[module_name][name]
            if "raised" in theirs:
                failures.append(f"{module_name}.{name}: TF raised {theirs}")
                continue
            try:
                _same(ours, theirs, tol=tolerances.get(name, _TOL))
            except AssertionError as e:
                failures.append(f"{module_name}.{name}: {str(e)[:1500]}")
    return failures, count


def test_keras3_programs_give_tf_keras3s_results():
    """Every program of every module, each side in one process (the two run side by side: starting
    TF and Keras costs each process seconds); the message names each program that differs, and how.
    TF's side is its recording while current (``recorded.SideRun``: the program modules, this
    file, the releases of TF, tf_keras, NumPy and Keras)."""
    has_tf = importlib.util.find_spec("tensorflow") is not None
    sources = [m.__file__ for m in MODULES.values()] + [__file__]
    tf_side = recorded.SideRun(__name__, sources, lambda: _results(_start("tf")), extra=("keras",))
    if has_tf and tf_side.current() is None:
        proc = _start("tf")   # (side by side with tapejax's)
        tf_side.run = lambda: _results(proc)
    got = _results(_start("tapejax"))

    def compare(want):
        failures, count = _differences(got, want)
        assert not failures, f"{len(failures)} of {count} programs differ from TF:\n" + "\n".join(failures)
    if not has_tf and tf_side.current() is None:
        pytest.skip("TensorFlow is not installed and the TF side's recording is not current: no reference")
    tf_side.check(compare)
