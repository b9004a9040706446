"""The op library's coverage: every registered op type is reachable from a public TF name, every
public op has a test (a parity case against TensorFlow or a numeric gradient check), and
docs/ops.md is the generated table (``python tools/gen_ops_table.py``)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_ops_table  # noqa: E402

from tapejax.core.bind import REGISTRY  # noqa: E402
from tapejax.ops import (
    _registry,  # noqa: E402
    namespaces as _namespaces,  # noqa: E402
)

#: Op types reached through an operator rather than a public function (with the test that covers them).
OPERATOR_TYPES = {"StridedSlice": "Tensor.__getitem__: test_slice_getitem in tests/parity/test_ops_library.py"}


def _public_types():
    types = set()
    for members in _namespaces.NAMESPACES.values():
        for fn in members.values():
            types.update(getattr(fn, "_tf_types", ()))
    return types


def test_every_registered_op_type_is_public():
    """Each op type the library registered is bound by some public tf.* function (or an operator)."""
    missing = [t for t in _registry.DEFINED if t not in _public_types() and t not in OPERATOR_TYPES]
    assert not missing, f"registered op types no public function binds: {missing}"
    assert all(t in REGISTRY for t in _registry.DEFINED)


def test_every_public_op_has_a_test():
    """Each public op is called by a parity case or checked numerically (gradcheck)."""
    untested = [r[0] for r in gen_ops_table.rows() if not (r[4] or r[5])]
    assert not untested, f"public ops with no parity case and no gradient check: {untested}"


def test_every_differentiable_op_is_gradchecked_or_parity_tested_with_gradient():
    """Differentiable ops: the table marks both columns for nearly all; none may lack both."""
    rows = [r for r in gen_ops_table.rows() if r[3] == "yes"]
    assert rows and all(r[4] or r[5] for r in rows)


def test_coverage_detection_is_not_vacuous():
    """The parity-reference scan finds calls and misses absent names."""
    import tapejax as tj
    found = gen_ops_table.parity_referenced(tj, "x = tf.math.sin(y); z = tf.nn.relu")
    assert id(tj.math.sin) in found and id(tj.nn.relu) in found and id(tj.math.cos) not in found


def test_docs_ops_md_is_fresh():
    """docs/ops.md matches what tools/gen_ops_table.py generates now."""
    with open(gen_ops_table.DOC) as f:
        current = f.read()
    assert current == gen_ops_table.render(), "docs/ops.md is stale: run python tools/gen_ops_table.py"


def test_math_table_ops_are_bound_by_name():
    """``ops/math.py`` binds each row of its op tables to a module name (no ``globals()`` injection):
    the bound function is the table's, and it is exported in ``__all__``."""
    from tapejax.ops import math as M
    rows = [r[0] for r in M._UNARY + M._BINARY if not r[0].startswith("_")]
    assert len(rows) == 61
    unbound = [n for n in rows if getattr(M, n, None) is not M._ns[n]]
    assert not unbound, f"table ops not bound to their module name: {unbound}"
    assert set(rows) <= set(M.__all__)
    assert len(M.__all__) == len(set(M.__all__))
    assert all(callable(getattr(M, n)) for n in M.__all__), "__all__ names something math.py lacks"
