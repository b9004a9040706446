"""The README's code blocks run, and print or compute what the README says they do.

Oracles: the README's own comments (the cache counts of the first loop, ``None`` and the
explanation of the second block) and, for the Keras block's "or eagerly: the same numbers", the
same step run without ``tf.function``.  Each block runs in a fresh process, so the cache counts
are the first loop's of a process, as a reader who pastes it sees them.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def _run(source: str) -> str:
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_readme_has_the_blocks_these_tests_run():
    blocks = _blocks()
    assert len(blocks) == 4
    assert "tape.gradient(loss, [w, b])" in blocks[0] and "tape.explain(y, x)" in blocks[1]
    assert "class" not in blocks[2] and "MyModule()" in blocks[2]   # (a fragment: the test defines it)
    assert "tf.keras.Sequential" in blocks[3]


def test_first_loop_and_why_a_gradient_is_none():
    blocks = _blocks()
    out = _run(blocks[0] + blocks[1]).splitlines()
    loss, info = out[0].split(" ", 1)
    # the comment: "1 miss, 99 hits, 2 compiles (step 1; the steady step)"
    assert "hits=99" in info and "misses=1" in info and "compiles=2" in info, info
    assert 0.0 <= float(loss) < 1e-2   # (100 steps of lr 0.05 on a solvable system)
    assert out[1] == "None"
    assert "created before the tape started recording and was never watched" in out[2]
    assert "tape.watch(x)" in out[2]


def test_compiled_step_fragment_with_a_module():
    """The fragment, with the ``MyModule`` and ``loss_fn`` it leaves to the reader: its steps
    train, and trace once."""
    prelude = textwrap.dedent("""
        import json
        import numpy as np
        import tapejax as tf

        class MyModule(tf.Module):
            def __init__(self):
                super().__init__()
                rng = np.random.default_rng(0)
                self.w = tf.Variable(rng.normal(size=(3, 1)).astype(np.float32))
                self.b = tf.Variable(np.zeros(1, np.float32))

            def __call__(self, x):
                return tf.matmul(x, self.w) + self.b

        def loss_fn(pred, y):
            return tf.reduce_mean(tf.square(pred - y))
    """)
    epilogue = textwrap.dedent("""
        rng = np.random.default_rng(1)
        x = tf.constant(rng.normal(size=(16, 3)).astype(np.float32))
        y = tf.constant(rng.normal(size=(16, 1)).astype(np.float32))
        losses = [float(train_step(x, y)) for _ in range(20)]
        print(json.dumps({"losses": losses, "traces": train_step.experimental_get_tracing_count()}))
    """)
    res = json.loads(_run(prelude + _blocks()[2] + epilogue).splitlines()[-1])
    assert res["losses"][-1] < res["losses"][0]
    assert res["traces"] == 2   # (the first call makes Adam's slots: TF traces such a step twice too)


def test_keras_block_compiled_and_eager_give_the_same_numbers():
    """The Keras block's step under ``tf.function`` and its Python function run eagerly, from the
    same weights on the same batches: the same losses and accuracy ("or eagerly: the same
    numbers")."""
    epilogue = textwrap.dedent("""
        import json
        import numpy as np
        weights = [w.numpy() for w in model.weights]
        rng = np.random.default_rng(0)
        batches = [(tf.constant(rng.normal(size=(8, 784)).astype(np.float32)),
                    tf.constant(rng.integers(0, 10, size=(8,)).astype(np.int32))) for _ in range(3)]
        out = {}
        for mode, step in (("compiled", train_step), ("eager", train_step.python_function)):
            for w, v in zip(model.weights, weights):
                w.assign(v)
            for v in optimizer.variables:
                v.assign(np.zeros(v.shape, v.dtype.as_numpy_dtype if hasattr(v.dtype, "as_numpy_dtype") else v.dtype))
            accuracy.reset_state()
            out[mode] = [float(step(x, y)) for x, y in batches] + [float(accuracy.result())]
        print(json.dumps(out))
    """)
    res = json.loads(_run(_blocks()[3] + epilogue).splitlines()[-1])
    assert res["compiled"] == pytest.approx(res["eager"], rel=1e-4, abs=1e-5)
