"""Write tests/data/tf_api_names.json: the public names of TensorFlow's namespaces that
tests/test_api_coverage.py compares with tapejax's.

    python tools/tf_api_names.py          # needs tensorflow-cpu (and tf_keras) installed

``tf.keras`` is tf_keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``): tapejax's optimizers are Keras 2's.
The snapshot records the TF version it was taken from; the coverage test checks it against the
installed TF when there is one.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tf_api_names.json")

#: The namespaces compared (``""`` is the top level).
NAMESPACES = ("", "math", "nn", "linalg", "random", "keras.optimizers", "train", "autodiff", "nest", "compat.v1",
              "bitwise", "dtypes", "signal", "distribute")


def collect():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    out = {"version": tf.__version__, "namespaces": {}}
    for ns in NAMESPACES:
        mod = tf
        for part in ns.split(".") if ns else []:
            mod = getattr(mod, part)
        out["namespaces"][ns] = sorted(n for n in dir(mod) if not n.startswith("_"))
    return out


if __name__ == "__main__":
    data = collect()
    if len(sys.argv) > 1 and sys.argv[1] == "--print":
        print(json.dumps(data))
    else:
        with open(OUT, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {OUT} (TensorFlow {data['version']})")
