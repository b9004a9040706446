"""tapejax/keras/_setup.py and __init__.py: Keras 3 is loaded on the JAX backend, or a clear
ImportError is raised before anything changes; the namespace is Keras's own.

The import cases run in fresh processes (which backend Keras takes is decided once per process)."""
import os
import subprocess
import sys
import textwrap

import pytest

import tapejax as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code, **env):
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    full.pop("KERAS_BACKEND", None)
    full.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=300, env=full, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return p.stdout


def test_import_tapejax_selects_the_jax_backend_for_a_later_import_keras():
    out = run("""
        import tapejax, keras
        print(keras.backend.backend())
        print(type(tapejax.keras.Variable([1.0])).__name__)
    """)
    assert out.split() == ["jax", "KerasVariable"]


def test_keras_missing_raises_importerror_naming_the_extra():
    out = run("""
        import importlib.util, os, sys
        real = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a: None if name == "keras" else real(name, *a)
        import tapejax
        try:
            tapejax.keras.layers
        except ImportError as e:
            print("ImportError", "tapejax[keras]" in str(e), "keras" in sys.modules)
        print(tapejax.keras.optimizers.Adam.__module__)   # tapejax's own optimizers need no Keras
    """)
    assert out.split()[:3] == ["ImportError", "True", "False"]
    assert out.split()[3].startswith("tapejax.optimizers")


def test_keras_imported_with_another_backend_raises_before_changing_anything():
    out = run("""
        import os
        os.environ["KERAS_BACKEND"] = "numpy"
        import keras
        from keras.src.layers.layer import Layer
        call = Layer.__call__
        import tapejax
        try:
            tapejax.keras.layers
        except ImportError as e:
            print("ImportError", "'numpy' backend" in str(e))
        print(Layer.__call__ is call, os.environ["KERAS_BACKEND"])
        try:
            tapejax.keras.Sequential
        except ImportError:
            print("again")
    """)
    assert out.split() == ["ImportError", "True", "True", "numpy", "again"]


def test_keras_backend_env_for_another_backend_raises_and_keras_is_not_imported():
    out = run("""
        import sys, tapejax
        try:
            tapejax.keras.layers
        except ImportError as e:
            print("ImportError", "KERAS_BACKEND='torch'" in str(e))
        import os
        print("keras" in sys.modules, os.environ["KERAS_BACKEND"])
    """, KERAS_BACKEND="torch")
    assert out.split() == ["ImportError", "True", "False", "torch"]


def test_a_model_built_before_tapejax_keras_was_loaded_is_refused_clearly():
    out = run("""
        import os
        os.environ["KERAS_BACKEND"] = "jax"
        import numpy as np, keras
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        import tapejax as tf
        tf.keras.layers   # loads the integration
        before = model.layers[0].kernel.numpy().copy()
        try:
            with tf.GradientTape():
                model(np.ones((1, 3), np.float32))
        except TypeError as e:
            print("TypeError", "before tapejax.keras was loaded" in str(e))
        print(np.array_equal(before, model.layers[0].kernel.numpy()))
        fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        print(type(fresh.layers[0].kernel).__name__)
    """)
    assert out.split() == ["TypeError", "True", "True", "KerasVariable"]


def test_namespace_is_keras_own_and_optimizers_stay_tapejax():
    import keras
    assert tf.keras.layers is keras.layers
    assert tf.keras.Sequential is keras.Sequential
    assert tf.keras.losses.SparseCategoricalCrossentropy is keras.losses.SparseCategoricalCrossentropy
    assert tf.keras.metrics.Mean is keras.metrics.Mean
    assert tf.keras.optimizers is tf.optimizers
    assert tf.keras.optimizers.legacy.Adam is tf.optimizers.legacy.Adam   # (tf.keras.optimizers.Adam: the new rules)
    assert issubclass(tf.keras.optimizers.Adam, tf.keras.optimizers.legacy.Adam)
    assert tf.keras.utils.Progbar is keras.utils.Progbar
    with pytest.raises(AttributeError, match="no_such_thing"):
        tf.keras.no_such_thing   # noqa: B018


def test_compile_takes_a_tapejax_optimizer_and_then_a_keras_one():
    """tapejax's (tf_keras') optimizer is the model's own (TF's default step trains with it:
    tests/test_keras_trainer.py); compiling again with a Keras 3 one replaces it."""
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    opt = tf.keras.optimizers.Adam()
    model.compile(optimizer=opt, loss="mse")
    assert model.compiled and model.optimizer is opt
    model.compile(optimizer="adam", loss="mse")
    assert model.compiled and type(model.optimizer).__module__.startswith("keras.")


def test_a_users_own_import_keras_after_tapejax_puts_keras_on_the_tape_at_once():
    """TF 2.16+'s idiom ``import tensorflow as tf; import keras``: with tapejax, Keras's own
    variables are tapejax Variables from the first model on, before any access to tf.keras."""
    out = run("""
        import numpy as np
        import tapejax as tf
        import keras
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        print(type(model.layers[0].kernel).__name__, isinstance(model.layers[0].kernel, tf.Variable))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(np.ones((2, 3), np.float32)))
        g = tape.gradient(loss, model.trainable_variables)
        print([list(a.shape) for a in g] == [[3, 2], [2]], float(g[1][0]))
        import sys
        from tapejax.keras import _setup
        print(_setup._FINDER in sys.meta_path)
    """)
    assert out.split() == ["KerasVariable", "True", "True", "2.0", "False"]


def test_import_keras_on_another_backend_after_tapejax_imports_and_loads_nothing():
    out = run("""
        import tapejax, keras
        print(keras.backend.backend(), type(keras.Variable([1.0])).__name__)
        try:
            tapejax.keras.layers
        except ImportError as e:
            print("ImportError", "'numpy' backend" in str(e))
    """, KERAS_BACKEND="numpy")
    assert out.split() == ["numpy", "Variable", "ImportError", "True"]


def test_a_gradient_for_a_keras_variable_made_before_the_integration_names_the_cause():
    out = run("""
        import os
        os.environ["KERAS_BACKEND"] = "jax"
        import keras
        v = keras.Variable([1.0, 2.0])
        import tapejax as tf
        x = tf.constant(1.0)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x * 2
        try:
            tape.gradient(y, v)
        except TypeError as e:
            print("TypeError", "before tapejax's Keras integration was loaded" in str(e))
    """)
    assert out.split() == ["TypeError", "True"]


def test_an_integration_that_cannot_load_at_import_keras_says_so():
    """``import keras`` after ``import tapejax`` where the integration cannot load (here made to
    fail): Keras imports, and a RuntimeWarning names the cause, rather than Keras running off the
    tape without a word."""
    out = run("""
        import warnings
        import tapejax
        from tapejax.keras import _setup
        def refuse():
            raise ImportError("a reason of the test's own")
        _setup.load = refuse
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import keras
        print(keras.backend.backend(), [str(w.message).count("a reason of the test's own") for w in caught
                                        if issubclass(w.category, RuntimeWarning)])
    """)
    assert out.split() == ["jax", "[1]"]


def test_every_module_of_the_package_is_imported_by_name_not_looked_up_in_keras():
    """``tapejax.keras.__getattr__`` hands every other name to Keras: a module of the package missing
    from ``_SUBMODULES`` would be looked up in Keras while ``_setup.load`` imports it (a recursion)."""
    import tapejax.keras as tk
    here = os.path.join(ROOT, "tapejax", "keras")
    modules = {f[:-3] for f in os.listdir(here) if f.endswith(".py") and not f.startswith("_")}
    assert modules == set(tk._SUBMODULES)
