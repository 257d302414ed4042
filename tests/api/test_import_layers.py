"""The package's import graph keeps its layers: every import between dpfair_jax's subpackages goes
down the layer order below (function-level imports included), and no cycle exists among its modules'
top-level imports. A planted upward import and a planted cycle are caught."""

from __future__ import annotations

import ast
import pathlib

import dpfair_jax

PACKAGE = pathlib.Path(dpfair_jax.__file__).resolve().parent

#: layer of each top-level part of the package (docs/INTERFACES.md, "Layers"); an import may go
#: only to a strictly lower layer (or inside its own part)
LAYERS: dict[str, int] = {
    "_validation": 0,
    "data": 1, "models": 1, "montecarlo": 1, "compile_cache": 1, "launch": 1,
    "privacy": 2,
    "runner": 3, "serialization": 3,
    "fairness": 4, "analysis": 4,
    "algorithms": 5,
    "studies": 6,
    "audit": 7,
    "cli": 8,
    "__main__": 9,
}


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    out = {}
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = f
    return out


def _imports(mod: str, path: pathlib.Path, *, top_level_only: bool) -> set[str]:
    """Absolute names of the dpfair_jax modules (or attributes) ``mod`` imports."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    pkg = mod if is_pkg else mod.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                m = ".".join(base + ([node.module] if node.module else []))
            else:
                m = node.module or ""
            found.add(m)
            found.update(f"{m}.{a.name}" for a in node.names)
    return {n for n in found if n.split(".")[0] == "dpfair_jax"}


def _part(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(root: pathlib.Path = PACKAGE) -> list[str]:
    bad = []
    for mod, path in _modules(root).items():
        src = _part(mod)
        if src is None:
            continue
        if src not in LAYERS:
            bad.append(f"{mod}: {src} has no layer in LAYERS")
            continue
        for target in _imports(mod, path, top_level_only=False):
            dst = _part(target)
            if dst is None or dst == src or dst not in LAYERS:
                continue
            if LAYERS[dst] >= LAYERS[src]:
                bad.append(f"{mod} imports {target} ({src} layer {LAYERS[src]} -> {dst} layer {LAYERS[dst]})")
    return sorted(set(bad))


def module_cycles(root: pathlib.Path = PACKAGE) -> list[list[str]]:
    mods = _modules(root)
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for target in _imports(m, path, top_level_only=True):
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != m and not m.startswith(target + "."):  # a package's own parent
                graph[m].add(target)
    cycles, state, stack = [], {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def test_imports_go_down_the_layers():
    assert upward_imports() == []


def test_no_module_cycles():
    assert module_cycles() == []


def test_planted_upward_import_and_cycle_are_caught(tmp_path):
    pkg = tmp_path / "dpfair_jax"
    for part in ("privacy", "algorithms"):
        (pkg / part).mkdir(parents=True)
        (pkg / part / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "privacy" / "a.py").write_text("def f():\n    from dpfair_jax.algorithms import b\n")
    (pkg / "algorithms" / "b.py").write_text("from dpfair_jax.algorithms import c\n")
    (pkg / "algorithms" / "c.py").write_text("from dpfair_jax.algorithms import b\n")
    assert upward_imports(pkg) == [
        "dpfair_jax.privacy.a imports dpfair_jax.algorithms (privacy layer 2 -> algorithms layer 5)",
        "dpfair_jax.privacy.a imports dpfair_jax.algorithms.b (privacy layer 2 -> algorithms layer 5)"]
    assert module_cycles(pkg) == [["dpfair_jax.algorithms.b", "dpfair_jax.algorithms.c", "dpfair_jax.algorithms.b"]]
