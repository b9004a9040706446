"""Write ``tapejax/data/unicode_scripts_table.py``: the ICU script code (``UScriptCode``) of every
Unicode code point, as TensorFlow's ``tf.strings.unicode_script`` gives it, in runs.

TF's answer is ICU's ``uscript_getScript`` for the Unicode version of the ICU TF links (TF 2.21:
Unicode 13); the table is read from the installed TensorFlow, so it is TF's exactly: run
``python tools/gen_unicode_scripts.py`` after moving to a new TF version.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tapejax", "data", "unicode_scripts_table.py")


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    codes = tf.strings.unicode_script(np.arange(0x110000, dtype=np.int32)).numpy()
    assert codes.min() >= 0 and codes.max() < 256, (codes.min(), codes.max())
    starts = np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1])
    values = codes[starts]
    lines = [f'"""The ICU script code of each Unicode code point, as TF {tf.__version__}\'s',
             "``tf.strings.unicode_script`` gives it (written by tools/gen_unicode_scripts.py; do not edit).", "",
             "``STARTS[i]`` is the first code point of run ``i``, ``CODES[i]`` (a byte) its ICU ``UScriptCode``.",
             '"""', f"TF_VERSION = {tf.__version__!r}", "", "STARTS = ("]
    for i in range(0, len(starts), 12):
        lines.append("    " + " ".join(f"{int(s)}," for s in starts[i:i + 12]))
    lines.append(")")
    hexed = bytes(int(v) for v in values).hex()
    lines.append("CODES = bytes.fromhex(")
    for i in range(0, len(hexed), 100):
        lines.append(f'    "{hexed[i:i + 100]}"')
    lines.append(")")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{OUT}: {len(starts)} runs", file=sys.stderr)


if __name__ == "__main__":
    main()
