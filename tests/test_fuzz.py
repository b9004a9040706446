"""Fuzzed differential suite: random small tapejax programs against two oracles.

``tests/fuzzgen.py`` draws programs as data (random op sequences over random
shapes from a curated table of tapejax ops, watched constants, trainable and
non-trainable Variables read once or several times, an int tensor,
intermediate tensors as sources, persistent tapes with several gradient
calls, nested tapes for 2nd order, several targets, output_gradients,
``stop_gradient``, ``tape.stop_recording()`` segments, UnconnectedGradients
NONE / ZERO, ``custom_gradient``) and interprets each program three ways:

* tapejax's ``GradientTape`` (the system under test);
* ``jax.vjp`` of the same program as a pure jnp function (independent jnp
  formulas per op; ``None`` decided structurally from the program);
* real TensorFlow's ``GradientTape`` (skipped, with the reason, when
  ``tensorflow`` does not import).

Every returned gradient is compared, ``None`` included (``None`` must match
``None``), with rtol 1e-4 and an atol of 1e-4 scaled by the magnitude.

Running modes::

    python3 -m pytest tests/test_fuzz.py                       # CI: a fixed, derandomized set
    python3 -m pytest tests/test_fuzz.py --fuzz-examples=5000  # many more, fresh random draws
    TAPEJAX_FUZZ_EXAMPLES=5000 python3 -m pytest tests/test_fuzz.py   # the same via env var

In CI mode hypothesis is derandomized with no example database, so a run is
reproducible; with ``--fuzz-examples`` / ``TAPEJAX_FUZZ_EXAMPLES`` the draws
are random and hypothesis prints the shrunk failing ``Program`` (its repr is
valid Python data for a regression test in ``tests/test_fuzz_regressions.py``).
"""
import logging
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import fuzzgen
import tapejax
from fuzzgen import compare, oracle_jax, oracle_jax_nested, programs, run_tape

_N = int(os.environ.get("TAPEJAX_FUZZ_EXAMPLES", "0") or 0)


def _settings(ci_examples):
    return settings(
        max_examples=_N or ci_examples,
        deadline=None,
        derandomize=not _N,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=bool(_N),
    )


def _tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    try:
        import tensorflow as tf
    except ImportError as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"TensorFlow oracle unavailable: tensorflow does not import ({e})")
    return tf


@pytest.fixture(autouse=True)
def _quiet():
    # integer sources log TF's "dtype int32 is not trainable" warning on purpose
    for name in ("tapejax", "tensorflow"):
        logging.getLogger(name).setLevel(logging.ERROR)
    yield
    for name in ("tapejax", "tensorflow"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def _check(got, want, prog, oracle):
    errs = compare(got, want, "calls")
    assert not errs, f"tapejax differs from {oracle}:\n" + "\n".join(errs) + f"\n{prog!r}"


def test_every_table_op_is_drawable_and_matches_jax_vjp():
    """Every op of the table can be drawn on typical inputs (its domain is not empty),
    records only registered primitives, and its one-step program's gradients match the
    jax.vjp oracle; together the table exercises 40+ distinct op types of the registry."""
    from tapejax.core.bind import REGISTRY
    rng = np.random.default_rng(0)
    sources = [
        fuzzgen.Source("watched", rng.uniform(-2, 2, (2, 3)).astype(np.float32)),
        fuzzgen.Source("var", rng.uniform(0.3, 2, (3,)).astype(np.float32)),
        fuzzgen.Source("watched", rng.uniform(-0.7, 0.7, (2, 2, 3)).astype(np.float32)),
        fuzzgen.Source("var", rng.uniform(1.3, 2, (3, 2)).astype(np.float32)),
        fuzzgen.Source("int", rng.integers(-3, 3, (2,)).astype(np.int32)),
        fuzzgen.Source("watched", rng.uniform(-2, 2, (1, 3)).astype(np.float32)),
    ]
    drawn, covered = set(), set()

    @settings(max_examples=4, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one_pass(data):
        for name, op in fuzzgen.OPS.items():
            prog = fuzzgen.Program(sources=sources, consts=[], steps=[], inter=(), calls=[])
            ctx = fuzzgen.Ctx(data.draw, prog)
            ctx.vals.update({("s", i): s.value for i, s in enumerate(sources)})
            g = op.gen(data.draw, ctx)
            if g is None:
                continue
            out = fuzzgen._eval_step(op, [ctx.value(a) for a in g[0]], g[1])
            if not (np.all(np.isfinite(out)) and np.max(np.abs(out), initial=0) <= fuzzgen.BOUND):
                continue
            if name in drawn:  # checked in an earlier pass (it still draws: same draws each run)
                continue
            drawn.add(name)
            prog.steps.append(fuzzgen.Step(name, tuple(g[0]), g[1]))
            srcs = tuple(("s", i) for i in range(len(sources)))
            prog.calls.append(fuzzgen.Call((("v", 0),), srcs, None, "none"))
            _check(run_tape(tapejax, prog), oracle_jax(prog), prog, f"jax.vjp (op {name})")
            leaves = fuzzgen._leaves(tapejax, prog)
            env = {("s", i): x for i, x in enumerate(leaves)}
            env.update({("k", c): tapejax.constant(a) for c, a in enumerate(prog.consts)})
            with tapejax.GradientTape() as tape:
                fuzzgen._watch(tape, prog, leaves)
                fuzzgen._run_steps(tapejax, prog, tape, env)
            names = {n.prim.name for n in tape._nodes if not n.prim.name.startswith("CustomGradient:")}
            names -= {"ReadVariableOp"}
            assert names <= set(REGISTRY), (name, names - set(REGISTRY))
            covered.update(names)

    one_pass()
    assert len(fuzzgen.OPS) >= 60
    assert drawn == set(fuzzgen.OPS), f"never drawable: {sorted(set(fuzzgen.OPS) - drawn)}"
    assert len(covered) >= 40, sorted(covered)


@_settings(ci_examples=80)
@given(prog=programs())
def test_fuzz_against_jax_vjp(prog):
    _check(run_tape(tapejax, prog), oracle_jax(prog), prog, "jax.vjp")


@_settings(ci_examples=30)
@given(prog=programs(nested=True, max_steps=4, ops=fuzzgen.NESTED_JAX_OP_NAMES))
def test_fuzz_nested_against_jax_grad_of_vjp(prog):
    _check(run_tape(tapejax, prog), oracle_jax_nested(prog), prog, "jax.grad of jax.vjp")


@_settings(ci_examples=60)
@given(prog=programs())
def test_fuzz_against_tensorflow(prog):
    tf = _tensorflow()
    _check(run_tape(tapejax, prog), run_tape(tf, prog), prog, "TensorFlow")


@_settings(ci_examples=25)
@given(prog=programs(nested=True, max_steps=4))
def test_fuzz_nested_against_tensorflow(prog):
    tf = _tensorflow()
    want = fuzzgen.loosen_second_order(prog, run_tape(tf, prog))
    _check(run_tape(tapejax, prog), want, prog, "TensorFlow")


def test_the_suite_catches_a_wrong_gradient(monkeypatch):
    """Mutation check: with Sin's replay rule made wrong (derivative 2*cos), a program through
    sin differs from both oracles, and a None where a value is due is reported."""
    import jax
    import jax.numpy as jnp

    from tapejax.core.bind import REGISTRY

    @jax.custom_jvp
    def bad_sin(x):
        return jnp.sin(x)
    bad_sin.defjvp(lambda p, t: (jnp.sin(p[0]), 2 * jnp.cos(p[0]) * t[0]))
    prog = fuzzgen.Program(
        sources=[fuzzgen.Source("var", np.array([0.3, -1.2], np.float32)),
                 fuzzgen.Source("watched", np.array(0.7, np.float32))],
        consts=[], inter=(), persistent=False,
        steps=[fuzzgen.Step("sin", (("s", 0),), {}), fuzzgen.Step("multiply", (("v", 0), ("s", 1)), {})],
        calls=[fuzzgen.Call((("v", 1),), (("s", 0), ("s", 1)), None, "none")])
    assert not compare(run_tape(tapejax, prog), oracle_jax(prog))
    tapejax.clear_cache()
    monkeypatch.setattr(REGISTRY["Sin"], "impl", bad_sin)
    try:
        errs = compare(run_tape(tapejax, prog), oracle_jax(prog))
    finally:
        monkeypatch.undo()
        tapejax.clear_cache()
    assert len(errs) == 1 and "values differ" in errs[0]
    good = oracle_jax(prog)
    assert compare([[None, good[0][1]]], good) and compare([[good[0][0].astype(np.float64), good[0][1]]], good)
