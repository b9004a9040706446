"""Write docs/ops.md: every public op of tapejax's op library with its TF namespaces, TF op
type(s), whether the tape differentiates it, and which tests cover it.

    python tools/gen_ops_table.py           # rewrite docs/ops.md
    python tools/gen_ops_table.py --check   # exit 1 if docs/ops.md is stale

"parity" means the op is called by a case of tests/parity/test_ops_library.py (same program
under TensorFlow and tapejax, value and gradient); "gradcheck" means a float64 numeric check of
its first and second derivatives in tests/test_ops_gradcheck.py.  tests/test_ops_coverage.py
fails when an op has neither, or when this file is stale.
"""
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "ops.md")
PARITY = os.path.join(ROOT, "tests", "parity", "test_ops_library.py")
#: The parity files whose cases count as an op's parity test (test_ops_more.py, test_ops_nn_more.py: the sweep's
#: ops; the image, signal, sparse-embedding and quantization families' own files).
PARITY_FILES = (PARITY, os.path.join(ROOT, "tests", "parity", "test_ops_more.py"),
                os.path.join(ROOT, "tests", "parity", "test_ops_nn_more.py"),
                os.path.join(ROOT, "tests", "parity", "test_image.py"),
                os.path.join(ROOT, "tests", "parity", "test_image_boxes.py"),
                os.path.join(ROOT, "tests", "parity", "test_signal.py"),
                os.path.join(ROOT, "tests", "parity", "test_signal_spectral.py"),
                os.path.join(ROOT, "tests", "parity", "test_embedding_sparse.py"),
                os.path.join(ROOT, "tests", "parity", "test_quantization.py"))
GRADCHECK = os.path.join(ROOT, "tests", "test_ops_gradcheck.py")
sys.path.insert(0, ROOT)

#: Public helpers that are not ops (tested in tests/test_ops_random.py).
NOT_OPS = {"get_global_generator", "get_state", "set_state", "state_scope", "Generator", "set_global_generator",
           "create_rng_state", "Algorithm", "ResizeMethod",
           # utilities, not ops (test_utilities in tests/parity/test_ops_more.py)
           "control_dependencies", "group", "no_op", "executing_eagerly", "inside_function", "is_symbolic_tensor",
           "get_static_value", "timestamp", "get_logger", "get_current_name_scope", "AggregationMethod",
           "VariableAggregation", "VariableSynchronization", "constant_initializer", "zeros_initializer",
           "ones_initializer", "random_normal_initializer", "random_uniform_initializer", "assert_same_structure",
           "shape_n", "broadcast_static_shape", "broadcast_dynamic_shape", "required_space_to_batch_paddings"}

_REF = re.compile(r"\btf\.((?:math\.special|math|nn|linalg|random|bitwise|image|signal|quantization)\.)?([A-Za-z_]\w*)\b")


def parity_referenced(tj, source=None):
    """The function objects the parity cases reference as ``tf.<name>`` / ``tf.<ns>.<name>``."""
    if source is None:
        source = ""
        for path in PARITY_FILES:
            with open(path) as f:
                source += f.read() + "\n"
    found = {}
    for ns, name in _REF.findall(source):
        mod = tj
        for part in ns[:-1].split(".") if ns else ():
            mod = getattr(mod, part)
        obj = getattr(mod, name, None)
        if callable(obj):
            found[id(obj)] = obj
    # TOP_LEVEL: names checked to be the tf.math objects by test_top_level_aliases
    m = re.search(r"TOP_LEVEL = \((.*?)\)\.split\(\)", source, re.S)
    if m:
        for name in "".join(ast.literal_eval(f"[{m.group(1)}]")).split():
            obj = getattr(tj, name, None)
            if callable(obj) and id(getattr(tj.math, name, None)) in found:
                found[id(obj)] = obj
    return found


def gradcheck_labels():
    """The row labels of tests/test_ops_gradcheck.py (its GRADCHECKED set)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_ops_gradcheck
    return set(test_ops_gradcheck.GRADCHECKED)


def rows():
    """(public name, namespaces, op types, differentiable, parity, gradcheck) per public op."""
    import tapejax as tj
    from tapejax.core.bind import REGISTRY
    from tapejax.ops import namespaces as _namespaces
    par = parity_referenced(tj)
    labels = gradcheck_labels()
    by_fn = {}
    for ns, members in _namespaces.NAMESPACES.items():
        for name, fn in members.items():
            if not callable(fn) or isinstance(fn, type) or name in NOT_OPS:
                continue
            entry = by_fn.setdefault(id(fn), {"fn": fn, "names": []})
            entry["names"].append(f"tf.{ns + '.' if ns else ''}{name}")
    out = []
    for entry in by_fn.values():
        fn = entry["fn"]
        names = sorted(entry["names"], key=lambda n: (n.count("."), n))
        types = getattr(fn, "_tf_types", ())
        if types:
            diff = "yes" if any(REGISTRY[t].differentiable for t in types) else "no (None)"
        else:
            diff = "constant" if fn.__module__.endswith("array") or fn.__module__.endswith("random") else "-"
        short = fn.__name__
        grad = "yes" if (short in labels or any(l.startswith(short + "_") for l in labels)) else ""
        out.append((names[0], ", ".join(names[1:]), ", ".join(types) or "(constant)", diff,
                    "yes" if id(fn) in par else "", grad))
    return sorted(out, key=lambda r: r[0])


def render():
    rs = rows()
    lines = [
        "# Op library coverage",
        "",
        "Generated by `python tools/gen_ops_table.py` (do not edit; `tests/test_ops_coverage.py` fails",
        "when this file is stale or an op has no test).  *parity*: called by a case of",
        "`tests/parity/test_ops_library.py` (value and gradient against real TensorFlow);",
        "*gradcheck*: float64 numeric first/second-order check in `tests/test_ops_gradcheck.py`.",
        "*differentiable*: `no (None)` means the tape gives `None` to the inputs, as TF (no",
        "registered gradient); `constant` means the result is a constant built on the host.",
        "",
        f"{len(rs)} public ops.",
        "",
        "| TF name | also | TF op type(s) | differentiable | parity | gradcheck |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rs:
        lines.append("| `" + r[0] + "` | " + " | ".join(r[1:]) + " |")
    lines += ["", "## Conventions and known differences", "",
              "* TF's gradient rules at kinks, ties and NaN are implemented inside each op's pure JAX function",
              "  (`tapejax/ops/_grads.py`, `jax.custom_jvp`), so eager ops, the compiled replay and `jax.jit`",
              "  agree, in reverse and forward mode: `maximum`/`minimum` ties go to `x`, `abs'(0) = 0`,",
              "  `clip_by_value` is inclusive, `relu'(0) = 0`, `leaky_relu'(0) = alpha`, `selu'(0) = scale`,",
              "  `sqrt`/`rsqrt`/`reciprocal` give 0 where the incoming gradient is 0, `pow`, `divide_no_nan`,",
              "  `multiply_no_nan`, `xlogy`, `xdivy` are masked as TF's; `eigh`/`eigvalsh` read the lower",
              "  triangle (lower-triangular gradient), `cholesky`'s gradient is symmetric.",
              "* A gather's gradient with respect to its params (`gather` on axis 0, `embedding_lookup`)",
              "  is `tf.IndexedSlices`, as TF's (`tapejax/autodiff/sparse.py`); it densifies where TF's",
              "  does. On a Variable, eagerly, `gather` reads only the gathered rows (`ResourceGather`).",
              "* `cumprod`'s gradient is exact at zeros (TF's divides by `x` and returns 0 there).",
              "* `where(c)`, `unique`, `boolean_mask`, `bincount`, `segment_sum` read values to size their",
              "  output: eager only (inside `jax.jit` use `unsorted_segment_sum` or fixed-size masks).",
              "* `tapejax.random` follows TF's seed rules with JAX keys (values differ from TF's); inside",
              "  `tapejax.function` the random state is threaded as TF's stateful ops (new values at each",
              "  call); inside a user's own `jax.jit` thread the key with `tapejax.random.state_scope`.",
              "* `nn.ctc_greedy_decoder` / `ctc_beam_search_decoder` return SparseTensors, as TF's; they,",
              "  `compute_accidental_hits`, `isotonic_regression` and",
              "  `learned_unigram_candidate_sampler` read values on the host (eager only). The candidate",
              "  samplers and fractional pools draw from tapejax's seeds (TF's distributions, expected",
              "  counts and pooling-sequence rules, not its bits); `fixed_unigram_candidate_sampler`'s",
              "  `vocab_file` is not supported (pass `unigrams`). `ctc_loss` follows TF's recursions: an",
              "  infeasible dense labelling costs about 709 (TF's log(1e-307)), a sparse one inf (eager only).",
              "* int64 results (`argmax`, `count_nonzero`, `where(c)`, `categorical`) are int32 unless JAX's",
              "  x64 mode is on (then int64, as TF).",
              "* Out-of-range indices in `gather`/`gather_nd` give NaN (JAX's fill) where TF's CPU kernel",
              "  raises; sparse softmax cross entropy with an out-of-range label gives NaN, as TF on GPU.",
              "* float16/bfloat16 sums (`reduce_sum`, `cumsum`, ...) accumulate in float32 (XLA's rule) and",
              "  round once; TF's CPU kernels accumulate in the half dtype (10000 x 0.1 gives 1000, TF 997).",
              "* Ops on tensors committed to different devices raise InvalidArgumentError naming the devices",
              "  (TF copies the operands); place the data first (`jax.device_put`) or use `tapejax.function`.",
              "", "## tapejax.numpy", "",
              "`tapejax.numpy` wraps every function of `jax.numpy` (and `jnp.linalg`, `jnp.fft`, `jax.nn`,",
              "`jax.scipy.special`) by a loop; `tests/test_ops_numpy.py` checks each wrapped function's value",
              "and gradient against JAX on sample inputs.", ""]
    return "\n".join(lines)


def main(argv):
    text = render()
    if "--check" in argv:
        with open(DOC) as f:
            if f.read() != text:
                print("docs/ops.md is stale: run python tools/gen_ops_table.py")
                return 1
        return 0
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, "w") as f:
        f.write(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
