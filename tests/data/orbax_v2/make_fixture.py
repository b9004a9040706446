"""How tests/data/orbax_v2 was made: run once with tapejax's checkpoint format version 2 (one
orbax array per key), at commit 782903f, with the model and training loop of
``tests/data/legacy_npz/make_fixture.py``
(``python tests/data/orbax_v2/make_fixture.py tests/data/orbax_v2``).

``tests/test_checkpoint_storage.py`` restores it with today's Checkpoint and compares with
``expected.json``.
"""
import json
import os
import sys

import numpy as np

import tapejax as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "legacy_npz"))
import make_fixture as fx  # noqa: E402


def main(out):
    model, opt = fx.Net(), tf.optimizers.Adam(0.01)
    fx.train(model, opt, 3)
    ck = tf.train.Checkpoint(model=model, optimizer=opt, extra=tf.Variable(np.array([1.5, -2.0], tf.bfloat16._np)))
    path = ck.save(os.path.join(out, "ckpt"))
    expect = {"path": os.path.relpath(path, out), "variables": [v.numpy().tolist() for v in model.variables],
              "iterations": int(opt.iterations.numpy()), "next_losses": fx.train(model, opt, 3)}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expect, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
