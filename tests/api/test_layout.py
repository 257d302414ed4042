"""The repository layout: studies in experiments/ (outside the package), built on the public API.

- ``experiments/`` and ``notebooks/`` reach no underscore name of ``dpfair_jax`` (an AST scan of the
  .py files and of the notebooks' code cells; the scan is shown to catch planted violations);
- the package has no ``experiments`` subpackage; discovery finds the six study folders, from the
  repository root or any folder below it;
- a study folder given with ``--experiments DIR`` (or ``$DPFAIR_EXPERIMENTS``) registers and runs
  without any change to the package or to ``sys.path``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

import dpfair_jax
from dpfair_jax import cli
from dpfair_jax.runner import registry

from _studies import EXPERIMENTS, REPO

PACKAGE = Path(dpfair_jax.__file__).resolve().parent
STUDY_FOLDERS = {"kit", "paper_000", "paper_001", "paper_002", "paper_003", "paper_004"}


# ---------------------------------------------------------------------------------------------
# the scan for underscore names of dpfair_jax


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str, where: str = "<source>") -> list[str]:
    """Places in ``source`` that reach an underscore name of ``dpfair_jax``: an underscore module in
    an import path, an imported underscore name, or ``alias._name`` (also ``alias.sub._name``) where
    ``alias`` is bound to something imported from ``dpfair_jax``."""
    tree = ast.parse(source)
    found: list[str] = []
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "dpfair_jax":
                    continue
                if any(_private(part) for part in a.name.split(".")):
                    found.append(f"{where}:{node.lineno}: import {a.name}")
                aliases.add(a.asname or "dpfair_jax")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "dpfair_jax":
                continue
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{where}:{node.lineno}: from {node.module} import ...")
            for a in node.names:
                if _private(a.name):
                    found.append(f"{where}:{node.lineno}: from {node.module} import {a.name}")
                aliases.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def _sources() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(REPO)), p.read_text(encoding="utf-8")) for p in sorted(EXPERIMENTS.rglob("*.py"))]
    for nb_path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code":
                src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]  # magics
                out.append((f"{nb_path.relative_to(REPO)} cell {i}", "\n".join(lines)))
    return out


def test_scan_catches_planted_violations():
    planted = {
        "from dpfair_jax.algorithms.fermi import _check_data": 1,
        "from dpfair_jax import _validation": 1,
        "import dpfair_jax._validation as v": 1,
        "from dpfair_jax.algorithms import fermi as F\nF._check_data(1, 2)": 1,
        "import dpfair_jax.algorithms.output_perturbation as OP\nOP._mc_core": 1,
        "import dpfair_jax\ndpfair_jax.algorithms.fermi._probs_one": 1,
        "from dpfair_jax.algorithms import fermi\nx = fermi.FermiHparams()._replace(lam=1.0)": 0,  # a NamedTuple method
        "from dpfair_jax.algorithms import fermi\nfermi.__name__": 0,
        "import numpy as np\nnp._core": 0,  # not dpfair_jax
        "h = object()\nh._replace": 0,
    }
    for src, want in planted.items():
        assert len(private_uses(src)) == want, (src, private_uses(src))


def test_experiments_and_notebooks_use_only_public_names():
    sources = _sources()
    assert sum(w.startswith("experiments") for w, _ in sources) >= 12  # study, config (and figures) of six folders
    assert sum("ipynb" in w for w, _ in sources) >= 5
    bad = [hit for where, src in sources for hit in private_uses(src, where)]
    assert bad == [], bad


# ---------------------------------------------------------------------------------------------
# where the studies are


def test_package_has_no_experiments_subpackage():
    assert not (PACKAGE / "experiments").exists()
    assert importlib.util.find_spec("dpfair_jax.experiments") is None
    assert not (REPO / "pyproject.toml").read_text().count('"experiments')  # the tree is not installed


def test_discovery_finds_the_six_study_folders(monkeypatch):
    folders = registry.study_folders(EXPERIMENTS)
    assert {f.name for f in folders} == STUDY_FOLDERS and folders[0].name == "kit"
    for f in folders:
        assert (f / "README.md").is_file() and (f / "config.py").is_file(), f
    found = registry.discover(folders)
    assert found.errors == {}
    loaded = {e.module.split(".")[1] for e in found.experiments if e.module.startswith(registry.STUDY_PACKAGE)}
    assert loaded == STUDY_FOLDERS
    # from the repository root, from a folder below it, and nowhere else
    monkeypatch.delenv(registry.ENV_EXPERIMENTS, raising=False)
    monkeypatch.chdir(REPO)
    assert registry.find_experiments_dir() == EXPERIMENTS
    monkeypatch.chdir(REPO / "tests")
    assert registry.find_experiments_dir() == EXPERIMENTS
    assert registry.find_experiments_dir(start=REPO.parent / "no-such-place-here") is None


STUDY = '''
from dpfair_jax.runner import Experiment, register

from .config import CONFIGS
from .helpers import measured


def run(config, ctx):
    ctx.add_claim("t_layout_claim", "a study added as a folder runs", measured=measured(config["x"]),
                  target=2, passed=measured(config["x"]) == 2)


register(Experiment("t_layout_new", "007", "a study folder outside the package", CONFIGS, run))
'''


def _package_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(PACKAGE.rglob("*.py")):
        h.update(str(p.relative_to(PACKAGE)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def test_new_study_folder_registers_without_touching_the_package(tmp_path, monkeypatch, capsys):
    root = tmp_path / "my_experiments"
    study = root / "t_layout_study"
    study.mkdir(parents=True)
    (study / "study.py").write_text(STUDY)
    (study / "config.py").write_text('CONFIGS = {"quick": {"x": 1}, "full": {"x": 5}}\n')
    (study / "helpers.py").write_text("def measured(x):\n    return 2 * x\n")
    broken = root / "t_layout_broken"
    broken.mkdir()
    (broken / "study.py").write_text("raise RuntimeError('broken on purpose')\n")
    (root / "notes").mkdir()  # a folder without study.py is not a study
    digest, path = _package_digest(), list(sys.path)
    try:
        assert cli.main(["list", "--experiments", str(root)]) == 0
        captured = capsys.readouterr()
        line = next(ln for ln in captured.out.splitlines() if ln.startswith("t_layout_new"))
        assert line.split()[1] == "007" and "kit_accounting" not in captured.out
        assert "t_layout_broken" in captured.err and "broken on purpose" in captured.err
        out = tmp_path / "out"
        assert cli.main(["run", "t_layout_new", "--quick", "--experiments", str(root), "--out", str(out)]) == 0
        claims = json.loads((out / "runs" / "t_layout_new" / "claims.json").read_text())
        assert [(c["id"], c["paper"], c["passed"]) for c in claims] == [("t_layout_claim", "007", True)]
        # the same folder through the environment, and its new paper id with --only
        monkeypatch.setenv(registry.ENV_EXPERIMENTS, str(root))
        code = cli.main(["reproduce", "--quick", "--only", "7", "--out", str(tmp_path / "repro"), "--no-progress"])
        assert code == 1  # the broken folder is reported; the good study still ran
        assert (tmp_path / "repro" / "runs" / "t_layout_new" / "claims.json").is_file()
        report = (tmp_path / "repro" / "report" / "REPORT.md").read_text()
        assert "t_layout_broken" in report and "a study added as a folder runs" in report and "007" in report
        assert "dpfair_experiments.t_layout_study.study" in sys.modules
        assert "t_layout_broken" not in " ".join(sys.modules)
    finally:
        registry.unregister("t_layout_new")
        for mod in [m for m in sys.modules if m.startswith(f"{registry.STUDY_PACKAGE}.t_layout")]:
            del sys.modules[mod]
    assert sys.path == path and _package_digest() == digest
    # a missing directory is bad input: one line, exit 2
    capsys.readouterr()
    assert cli.main(["list", "--experiments", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_study_folder_replaces_a_same_named_one_from_elsewhere(tmp_path):
    """Two experiments directories with a folder of the same name: loading the second replaces the first
    (its module and its registrations), so a stale study never runs under the new name."""
    for i in (1, 2):
        d = tmp_path / f"root{i}" / "t_layout_twin"
        d.mkdir(parents=True)
        d.joinpath("study.py").write_text(textwrap.dedent(f"""
            from dpfair_jax.runner import Experiment, register
            register(Experiment("t_layout_twin_{i}", "kit", "twin {i}", {{"quick": {{}}}}, lambda c, x: None))
        """))
    try:
        registry.load_study(tmp_path / "root1" / "t_layout_twin")
        assert "t_layout_twin_1" in [e.name for e in registry.all_experiments()]
        registry.load_study(tmp_path / "root2" / "t_layout_twin")
        names = [e.name for e in registry.all_experiments()]
        assert "t_layout_twin_2" in names and "t_layout_twin_1" not in names
        with pytest.raises(ValueError, match="no study.py"):
            registry.load_study(tmp_path)
    finally:
        for n in ("t_layout_twin_1", "t_layout_twin_2"):
            registry.unregister(n)
        for mod in [m for m in sys.modules if m.startswith(f"{registry.STUDY_PACKAGE}.t_layout_twin")]:
            del sys.modules[mod]
