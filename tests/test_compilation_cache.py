"""The persistent compilation cache setting (``tapejax/compile/config.py``): ``set_compilation_cache`` /
``TAPEJAX_COMPILATION_CACHE`` put every program tapejax compiles in JAX's cache, and a second
process finds them all there (JAX's own cache events are the oracle: hits and misses)."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.compile import config as compile_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_off():
    """The cache off before and after the test (JAX's settings as they were with it off), then
    the suite's own cache (tests/conftest.py) on again."""
    suite = tf.config.get_compilation_cache()
    tf.config.set_compilation_cache(None)
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
              jax.config.jax_persistent_cache_min_entry_size_bytes)
    yield
    tf.config.set_compilation_cache(None)
    assert (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_persistent_cache_min_entry_size_bytes) == before
    if suite is not None:
        tf.config.set_compilation_cache(suite)


def test_setting_turns_jax_cache_on_for_small_programs_and_off_again(tmp_path, cache_off):
    d = tmp_path / "cache"   # created by the setting
    thresholds = (jax.config.jax_persistent_cache_min_compile_time_secs,
                  jax.config.jax_persistent_cache_min_entry_size_bytes)
    tf.config.set_compilation_cache(d)
    assert tf.config.get_compilation_cache() == str(d)
    assert jax.config.jax_compilation_cache_dir == str(d)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0   # small programs too
    # a program compiled now (JAX had decided on its cache already in this process) is written
    jax.jit(lambda x: jnp.sin(x) * 3.25 + 0.5)(jnp.arange(11.0)).block_until_ready()
    assert any(name.endswith("-cache") for name in os.listdir(d))
    tf.config.set_compilation_cache(None)
    assert tf.config.get_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
    assert (jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_persistent_cache_min_entry_size_bytes) == thresholds
    n = len(os.listdir(d))
    jax.jit(lambda x: jnp.cos(x) * 1.75)(jnp.arange(13.0)).block_until_ready()
    assert len(os.listdir(d)) == n   # off: nothing written


@pytest.mark.parametrize("bad, exc, words", [
    (3, TypeError, ["`directory`", "path", "int"]),
    (__file__, ValueError, ["`directory`", "must be a directory"]),
])
def test_bad_directory_raises_and_changes_nothing(bad, exc, words, tmp_path, cache_off):
    tf.config.set_compilation_cache(tmp_path)
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    with pytest.raises(exc) as e:
        tf.config.set_compilation_cache(bad)
    for w in words:
        assert w in str(e.value)
    assert tf.config.get_compilation_cache() == str(tmp_path)
    assert (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs) == before


_CHILD = r"""
import json, sys
import numpy as np
from jax import monitoring
events = {"hits": 0, "misses": 0}
def listen(name, **kw):
    if name == "/jax/compilation_cache/cache_hits":
        events["hits"] += 1
    elif name == "/jax/compilation_cache/cache_misses":
        events["misses"] += 1
monitoring.register_event_listener(listen)
import tapejax as tf
from tapejax.runtime import speculate
speculate.set_background_compile(False)   # (the same programs in both runs, whatever the machine's load)
assert tf.config.get_compilation_cache() == sys.argv[1]
rng = np.random.RandomState(0)
x = tf.constant(rng.randn(16, 8).astype("float32"))
y = tf.constant(rng.randn(16, 1).astype("float32"))
w1, w2 = tf.Variable(rng.randn(8, 12).astype("float32") / 3), tf.Variable(rng.randn(12, 1).astype("float32") / 3)
opt = tf.keras.optimizers.Adam(0.01)

def body(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y))
    grads = tape.gradient(loss, [w1, w2])
    opt.apply_gradients(zip(grads, [w1, w2]))
    return loss

compiled = tf.function(body)
losses = [float(body(x, y).numpy()) for _ in range(4)]          # eager: deferred, predicted
losses += [float(compiled(x, y).numpy()) for _ in range(3)]     # the compiled step
print(json.dumps(dict(losses=losses, w=w1.numpy().tolist(), **events)))
"""


def _run(cache_dir):
    env = dict(os.environ, TAPEJAX_COMPILATION_CACHE=str(cache_dir), JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run([sys.executable, "-c", _CHILD, str(cache_dir)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_finds_every_program_in_the_cache(tmp_path):
    """The environment variable turns the cache on at import; the second run of the same script
    compiles nothing (every program of the eager and the compiled steps is a cache hit) and
    computes the same numbers."""
    d = tmp_path / "xla-cache"
    first = _run(d)
    assert first["misses"] > 0   # (a hit here: one program compiled twice, by two jit objects)
    second = _run(d)
    assert second["misses"] == 0
    assert second["hits"] == first["hits"] + first["misses"]
    np.testing.assert_array_equal(second["losses"], first["losses"])
    np.testing.assert_array_equal(second["w"], first["w"])


def test_environment_variable_name():
    assert compile_config.CACHE_ENV == "TAPEJAX_COMPILATION_CACHE"
