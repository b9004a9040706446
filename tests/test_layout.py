"""The package's architecture, as rules the code must keep (read from the source, no import).

* Subpackages import only the layers below them (``ALLOWED``), as each README.md says.
* No import cycles between modules, at module level or inside functions.
* No module rebinds another tapejax module's globals (``other.name = value``).
* No module over ``MAX_LINES`` lines; every subpackage has a README.md.
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tapejax"
MAX_LINES = 620

#: subpackage -> the subpackages its modules may import (besides their own).
ALLOWED = {
    "core": set(),
    "runtime": {"core"},
    "ops": {"core"},
    "autodiff": {"core", "runtime", "ops"},
    "compile": {"core", "runtime", "ops", "autodiff"},
    "optimizers": {"core", "autodiff"},
    "train": {"core", "autodiff", "optimizers", "compile", "ops", "runtime", "data"},  # data: tf.train.Example
    "compat": {"core", "autodiff", "ops", "compile", "runtime"},
    "keras": {"core", "autodiff", "optimizers", "ops", "compile", "train", "runtime"},
    "data": {"core", "ops", "compile"},
    "distribute": {"core", "ops", "compile", "data", "compat"},
}


def _modules():
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package_of(name):
    return name if (MODULES.get(name) and MODULES[name].name == "__init__.py") else name.rpartition(".")[0]


def _resolve_from(name, node):
    """The absolute module an ``ImportFrom`` in module ``name`` imports from."""
    if not node.level:
        return node.module or ""
    base = _package_of(name).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name, path):
    """(imported module, at module level?) for each tapejax import in ``name``'s source."""
    tree = ast.parse(path.read_text())
    top = set(id(n) for n in tree.body)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name).split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("tapejax"):
                continue
            for alias in node.names:   # ``from pkg import submodule`` imports the submodule
                sub = f"{mod}.{alias.name}"
                out.append((sub if sub in MODULES else mod, id(node) in top))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tapejax"):
                    out.append((alias.name, id(node) in top))
    return out


def _sub(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_subpackages_import_only_the_layers_below():
    bad = []
    for name, path in MODULES.items():
        sub = _sub(name)
        if sub not in ALLOWED:
            continue
        for mod, _ in _imports(name, path):
            other = _sub(mod)
            if other and other != sub and other not in ALLOWED[sub]:
                bad.append(f"{name} imports {mod}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {name: {m for m, _ in _imports(name, path) if m in MODULES and m != name}
             for name, path in MODULES.items()}
    for name in graph:   # a package's __init__ is imported with any of its modules: not an edge back
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    state = {}
    cycles = []

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(" -> ".join(stack[stack.index(m):] + [m]))
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    assert not cycles, "\n".join(cycles)


def test_no_module_rebinds_another_modules_globals():
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        imported = set()   # the names of tapejax modules imported here
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve_from(name, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in MODULES or (base in MODULES and base == "tapejax"):
                        imported.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("tapejax"):
                        imported.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                            and t.value.id in imported and not t.value.id[0].isupper()):
                        bad.append(f"{name}:{node.lineno} sets {t.value.id}.{t.attr}")
    assert not bad, "\n".join(bad)


def _targets(node):
    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
        yield from (t.elts if isinstance(t, ast.Tuple) else [t])


def test_only_core_state_changes_what_records_and_traces_on_a_thread():
    """The tape stack, the collector and the override mappings change through ``core.state``'s
    functions alone, which derive ``_local.defers`` from them (the deferred executor's one
    check per op); a module assigning them would leave that flag stale."""
    bad = []
    for name, path in MODULES.items():
        if name == "tapejax.core.state":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for t in _targets(node):
                    if isinstance(t, ast.Subscript):
                        t = t.value   # (``stack[:] = ...``)
                    if (isinstance(t, ast.Attribute) and t.attr in ("tapes", "collector", "overrides", "defers")
                            and ast.unparse(t.value).split(".")[-1] in ("_local", "local", "loc")):
                        bad.append(f"{name}:{node.lineno} sets {ast.unparse(t)}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("append", "remove", "pop", "insert", "extend", "clear")
                  and ast.unparse(node.func.value) == "_state.tapes()"):
                bad.append(f"{name}:{node.lineno} changes {ast.unparse(node.func.value)} in place")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"{name} has {n} lines: split it by what its parts do"


def test_every_subpackage_has_a_readme():
    missing = [p.parent.name for p in ROOT.glob("*/__init__.py") if not (p.parent / "README.md").exists()]
    assert not missing, missing
