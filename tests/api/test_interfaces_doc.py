"""docs/INTERFACES.md agrees with the code: its generated index equals what the modules export, and
every ``dpfair_jax.x.y`` name the hand-written part mentions exists."""

import importlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import interfaces_index  # noqa: E402


def test_index_matches_the_modules():
    assert interfaces_index.current() == interfaces_index.index(), (
        "docs/INTERFACES.md's public-names index is stale: run `python tools/interfaces_index.py --write`.")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_reference_resolves():
    text = interfaces_index.DOC.read_text()
    head = text[: text.find(interfaces_index.MARKER)] if interfaces_index.MARKER in text else text
    refs = sorted(set(re.findall(r"dpfair_jax(?:\.[A-Za-z_][A-Za-z0-9_]*)+", head)))
    assert refs, "the scan found no references (a scan that sees nothing cannot fail)"
    missing = [r for r in refs if not _resolves(r)]
    assert not missing, f"INTERFACES.md mentions names that do not exist: {missing}"


def test_no_underscore_names_reached_across_modules():
    """Inside the package, no module reaches another module's underscore names (a split module's
    package, e.g. budget_tailoring/, counts as one module; ``_validation`` is the package's shared
    private helper)."""
    import ast

    pkg = ROOT / "dpfair_jax"
    bad = []
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(ROOT).with_suffix("")
        mod = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        owner = ".".join(mod.split(".")[:3]) if mod.count(".") >= 2 else mod  # a split module's package
        tree = ast.parse(f.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("dpfair_jax"):
                for a in node.names:
                    target = f"{node.module}.{a.name}"
                    aliases[a.asname or a.name] = target
                    if a.name.startswith("_") and not a.name.startswith("__") and not node.module.startswith(owner):
                        if "_validation" not in target:
                            bad.append(f"{rel}:{node.lineno} imports {target}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("dpfair_jax") and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                target = aliases[node.value.id]
                if not target.startswith(owner) and "_validation" not in target:
                    bad.append(f"{rel}:{node.lineno} uses {target}.{node.attr}")
    assert not bad, "\n".join(bad)
