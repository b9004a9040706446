"""AutoGraph conversions kept on disk (``tapejax/compile/autograph_cache.py``).

Oracles: the conversion itself (a fresh transformer stands for a new process; malt's
``transform_ast`` runs only when a function is really converted), the values the converted
function computes, and TF's error message naming the user's line.
"""
import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest
from malt.impl import api as ag_api

import tapejax as tf
from tapejax.compile import autograph_cache, autograph_convert

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """The compilation cache on in ``tmp_path`` (off afterwards), a fresh transformer (a new
    process's), and the number of real conversions made; then the suite's own cache
    (tests/conftest.py) on again."""
    suite = tf.config.get_compilation_cache()
    tf.config.set_compilation_cache(None)
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
              jax.config.jax_persistent_cache_min_entry_size_bytes)
    tf.config.set_compilation_cache(tmp_path)
    converted = []
    real = ag_api.PyToPy.transform_ast

    def counting(self, node, ctx):
        converted.append(ctx.info.name)
        return real(self, node, ctx)

    monkeypatch.setattr(ag_api.PyToPy, "transform_ast", counting)
    monkeypatch.setattr(autograph_convert, "_TRANSFORMER", autograph_convert._Transformer())
    yield converted
    tf.config.set_compilation_cache(None)
    assert (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_persistent_cache_min_entry_size_bytes) == before
    if suite is not None:
        tf.config.set_compilation_cache(suite)


def _new_process(monkeypatch):
    monkeypatch.setattr(autograph_convert, "_TRANSFORMER", autograph_convert._Transformer())


def _entries():
    where = autograph_cache.directory()
    return sorted(os.listdir(where)) if where and os.path.isdir(where) else []


def collatz_steps(n):
    steps = tf.constant(0)
    while n > 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


def test_a_conversion_is_kept_and_a_new_process_loads_it(disk, monkeypatch):
    f = tf.function(collatz_steps)
    assert int(f(tf.constant(27))) == 111
    assert disk == ["tf__collatz_steps"] and len(_entries()) == 1
    _new_process(monkeypatch)
    g = tf.function(collatz_steps)
    assert int(g(tf.constant(27))) == 111 and int(g(tf.constant(6))) == 8
    assert disk == ["tf__collatz_steps"]   # loaded, not converted again
    assert "while_stmt" in tf.autograph.to_code(collatz_steps)


def raises_on_negative(x):
    if tf.reduce_sum(x) < 0:
        x = x * 2.0
    y = tf.reshape(x, [7, 5])   # fails: 3 elements
    return y


def test_an_error_in_loaded_code_names_the_user_line(disk, monkeypatch):
    line = raises_on_negative.__code__.co_firstlineno + 3
    messages = []
    for _ in range(2):   # converted, then loaded
        _new_process(monkeypatch)
        with pytest.raises(Exception) as e:
            tf.function(raises_on_negative)(tf.constant([1.0, 2.0, 3.0]))
        messages.append(str(e.value))
    assert len(disk) == 1
    for msg in messages:
        assert f'line {line}, in raises_on_negative' in msg and "tf.reshape(x, [7, 5])" in msg, msg


def test_a_namespace_that_answers_differently_converts_again(disk, monkeypatch):
    f = tf.function(collatz_steps)
    assert int(f(tf.constant(7))) == 16
    stored = json.loads(open(os.path.join(autograph_cache.directory(), _entries()[0])).read())
    assert stored["asked"]["tf__collatz_steps"] == "absent"
    absent = sorted(k for k, v in stored["asked"].items() if v == "absent" and k != "tf__collatz_steps")
    assert absent   # (the names the generated code gave its own helpers)
    # a global now has one of those names: the namer would choose another, so no stored code is used
    monkeypatch.setitem(globals(), absent[0], 3)
    _new_process(monkeypatch)
    assert int(tf.function(collatz_steps)(tf.constant(7))) == 16
    assert len(disk) == 2
    monkeypatch.delitem(globals(), absent[0])
    _new_process(monkeypatch)
    assert int(tf.function(collatz_steps)(tf.constant(7))) == 16
    assert len(disk) == 3   # (the entry held the second conversion, made with the name present)


loop_options = tf.autograph.experimental.set_loop_options


def capped_sum(n):
    i = tf.constant(0)
    total = tf.constant(0.0)
    while i < n:
        loop_options(maximum_iterations=4)
        total += 1.5
        i += 1
    return total


def test_a_directive_found_through_the_namespace_is_part_of_the_answers(disk, monkeypatch):
    assert float(tf.function(capped_sum)(tf.constant(10))) == 6.0   # the directive caps the loop
    stored = json.loads(open(os.path.join(autograph_cache.directory(), _entries()[0])).read())
    assert stored["asked"]["loop_options"] == "directive:set_loop_options"
    # the same source where ``loop_options`` is an ordinary function: converted again, not capped
    monkeypatch.setitem(globals(), "loop_options", lambda **kw: None)
    _new_process(monkeypatch)
    assert float(tf.function(capped_sum)(tf.constant(10))) == 15.0
    assert disk[:2] == ["tf__capped_sum", "tf__capped_sum"]   # (then the lambda, converted when called)


def test_nothing_is_kept_with_the_cache_off(disk, monkeypatch, tmp_path):
    tf.config.set_compilation_cache(None)
    assert int(tf.function(collatz_steps)(tf.constant(3))) == 7
    assert autograph_cache.directory() is None
    assert not os.path.exists(tmp_path / autograph_cache.SUBDIR)


def test_lambdas_are_not_kept(disk):
    f = tf.function(lambda x: x + 1 if x > 0 else x - 1)
    assert int(f(tf.constant(2))) == 3 and int(f(tf.constant(-2))) == -3
    assert _entries() == []


@pytest.mark.parametrize("damage", ["not json", '{"source": 1}', ""])
def test_a_damaged_entry_is_a_miss(disk, monkeypatch, damage):
    assert int(tf.function(collatz_steps)(tf.constant(3))) == 7
    path = os.path.join(autograph_cache.directory(), _entries()[0])
    with open(path, "w") as f:
        f.write(damage)
    _new_process(monkeypatch)
    assert int(tf.function(collatz_steps)(tf.constant(3))) == 7
    assert len(disk) == 2
    json.loads(open(path).read())   # written again, whole


def test_a_second_process_converts_nothing(tmp_path):
    script = textwrap.dedent("""
        import json, sys
        from malt.impl import api
        import tapejax as tf
        real = api.PyToPy.transform_ast
        count = []
        def counting(self, node, ctx):
            count.append(ctx.info.name)
            return real(self, node, ctx)
        api.PyToPy.transform_ast = counting
        v = tf.Variable(2.0)

        @tf.function
        def step(x):
            for i in tf.range(3):
                if x > 1.0:
                    x = x / 2.0
                else:
                    v.assign_add(x)
            return x

        print(json.dumps([float(step(tf.constant(12.0))), float(v.numpy()), count]))
    """)
    path = tmp_path / "prog.py"
    path.write_text(script)
    env = dict(os.environ, TAPEJAX_COMPILATION_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = [json.loads(subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0][:2] == runs[1][:2] == [1.5, 2.0]
    assert runs[0][2] == ["tf__step"] and runs[1][2] == []


def test_the_version_key_is_the_installed_distributions_and_costs_no_metadata_scan(monkeypatch):
    """The key's malt version is what pip installed (as ``importlib.metadata`` reads it), found
    without scanning every distribution: the scan took 10-30 ms of every process's first
    ``tapejax.function`` call, with the cache off as well."""
    import importlib.metadata

    import malt
    expected = importlib.metadata.version("diastatic-malt")
    autograph_cache._malt_version.cache_clear()

    def no_scan(name):
        raise AssertionError(f"importlib.metadata.version({name!r}) scanned the distributions")

    monkeypatch.setattr(importlib.metadata, "version", no_scan)
    assert autograph_cache._malt_version() == expected
    assert autograph_cache.package_version(os.path.dirname(malt.__file__)) == expected


def test_a_source_checkout_is_keyed_by_its_modules_times(tmp_path):
    """With no ``*.dist-info`` beside the package (a source checkout), the version is the newest
    module time and the module count: editing a converter makes a new key."""
    pkg = tmp_path / "malt"
    (pkg / "converters").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    conv = pkg / "converters" / "a.py"
    conv.write_text("x = 1\n")
    os.utime(pkg / "__init__.py", ns=(10**18, 10**18))
    os.utime(conv, ns=(2 * 10**18, 2 * 10**18))
    first = autograph_cache.package_version(str(pkg))
    assert first == f"mtime-{2 * 10**18}-2"
    os.utime(conv, ns=(3 * 10**18, 3 * 10**18))
    assert autograph_cache.package_version(str(pkg)) != first
    (tmp_path / "diastatic_malt-9.9.dist-info").mkdir()
    (tmp_path / "Diastatic-Malt-1.0.dist-info").mkdir()
    assert autograph_cache.package_version(str(pkg)) == "1.0|9.9"
