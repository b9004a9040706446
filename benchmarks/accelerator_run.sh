#!/usr/bin/env bash
# One run on a machine with an accelerator (a GPU): the training-step and first-step benchmarks,
# then the test suite on that backend, each under a time limit, logs in $OUT (default
# /tmp/tapejax-accelerator).  Run from the repository root:  bash benchmarks/accelerator_run.sh
# Where packages are missing there, wheels in .whl/ (git-ignored) are installed into /tmp/site
# first.  CI never runs this (it has no accelerator); its figures go in the notes.
set -u
OUT=${OUT:-/tmp/tapejax-accelerator}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# several processes share the GPU: no preallocation of 75% of its memory per process
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1
python3 - <<'EOF' 2>&1 | tee "$OUT/smoke.txt"
import jax, numpy as np, tapejax as tf
print("jax", jax.__version__, jax.devices(), "python", __import__("sys").version.split()[0])
w = tf.Variable(np.ones((3, 2), "float32"))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.matmul(tf.ones((4, 3)), w) ** 2)
g = tape.gradient(loss, w)
print("loss", float(loss), "grad", np.asarray(g).tolist(), "on", g.value.devices())
EOF
timeout 170 python3 benchmarks/bench_training.py --rounds 7 2>&1 | tee "$OUT/bench_training.txt"
timeout 120 python3 benchmarks/bench_first_steps.py --quick --parts first,cache 2>&1 | tee "$OUT/bench_first_steps.txt"
# the suite: matrix products in full float32 (the GPU's default is TF32, off the tests' tolerances)
JAX_DEFAULT_MATMUL_PRECISION=highest timeout -s INT -k 20 "${TEST_LIMIT_S:-220}" \
    python3 -m pytest -p no:cacheprovider -n "${TEST_WORKERS:-12}" -q -rfE --tb=line tests >"$OUT/tests.txt" 2>&1
echo "pytest rc $?"
tail -60 "$OUT/tests.txt"
