"""Stored results come from the current study code, or say on their page that they do not.

A *results folder* is any folder under ``experiments/`` or ``docs/results/`` holding a run's
``meta.json`` (what ``dpfair run`` writes). Each must record

* the commit it came from (``meta["source"]["commit"]``, :func:`runner.context.source_commit`), and
* the hash of its study's code (``meta["code_version"]["study"]``), equal to the hash of the
  current study folder's own ``*.py`` files (:func:`runner.context.study_digest`, i.e.
  ``experiments/paper_00N/*.py`` and any subfolders' ``*.py``).

The hash is of the experiment's own sources only, not of the ``dpfair_jax`` library, so a library
edit that leaves the study code alone does not make its stored results stale; a change of the study
code does, and then the README numbers quoting that folder are no longer the current code's.

A folder whose results predate the current code is exempt only when it (or a folder above it,
inside the study folder) holds ``PREDATES.json`` = ``{"reason": ..., "page_says": ...}`` and the
study's page (its ``README.md``) shows ``page_says``: the reader of the page is told, not only the
test. A README that quotes a results folder (a path ``results.../``) must name one that exists.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpfair_jax.runner.context import study_digest

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "experiments"
DOCS_RESULTS = REPO / "docs" / "results"
MARKER = "PREDATES.json"
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def _run_folders() -> list[Path]:
    roots = [r for r in (EXPERIMENTS, DOCS_RESULTS) if r.is_dir()]
    return sorted({p.parent for r in roots for p in r.rglob("meta.json") if "chunks" not in p.parts})


def _study_folder(run: Path) -> Path:
    """The study folder of a run: ``experiments/<study>/`` above it, or for ``docs/results/`` the
    study of the run's paper."""
    if EXPERIMENTS in run.parents:
        return EXPERIMENTS / run.relative_to(EXPERIMENTS).parts[0]
    from dpfair_jax.runner.papers import PAPERS

    paper = json.loads((run / "meta.json").read_text(encoding="utf-8")).get("paper")
    return EXPERIMENTS / PAPERS[paper]["study"]


def _page(run: Path) -> Path:
    """The page that shows a run: its study's README, or the nearest README above it in docs/results."""
    if EXPERIMENTS in run.parents:
        return _study_folder(run) / "README.md"
    for folder in [run, *run.parents]:
        if (folder / "README.md").is_file() or folder == DOCS_RESULTS:
            return folder / "README.md"
    return DOCS_RESULTS / "README.md"


def _normalize(text: str) -> str:
    return " ".join(text.replace("*", "").replace("`", "").split()).lower()


def _marker(run: Path) -> Path | None:
    top = _study_folder(run) if EXPERIMENTS in run.parents else DOCS_RESULTS
    for folder in [run, *run.parents]:
        if (folder / MARKER).is_file():
            return folder / MARKER
        if folder == top:
            return None
    return None


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


RUNS = _run_folders()


@pytest.mark.parametrize("run", RUNS, ids=[_rel(r) for r in RUNS])
def test_results_folder_is_from_the_current_study_code_or_marked(run):
    marker = _marker(run)
    page = _page(run)
    if marker is not None:
        note = json.loads(marker.read_text(encoding="utf-8"))
        assert isinstance(note.get("reason"), str) and note["reason"].strip(), (
            f"{_rel(marker)}: give the reason the results predate the current code")
        says = note.get("page_says")
        assert isinstance(says, str) and says.strip(), f"{_rel(marker)}: give page_says, the words its page shows"
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        assert _normalize(says) in _normalize(text), (
            f"{_rel(run)} is marked as predating the current code ({_rel(marker)}), but its page {_rel(page)} "
            f"does not say so: put {says!r} (with the reason) on the page, or rerun and store the run")
        return
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    todo = (f"rerun it with the current code (dpfair run {meta.get('experiment')} ...) and store the new run, "
            f"or mark the folder as predating the current code: {MARKER} with a reason and the words its page "
            f"{_rel(page)} shows (see this test's docstring)")
    commit = (meta.get("source") or {}).get("commit")
    assert isinstance(commit, str) and _HEX40.match(commit), f"{_rel(run)} records no commit: {todo}"
    study = _study_folder(run)
    recorded = (meta.get("code_version") or {}).get("study")
    current = study_digest(study)
    assert recorded == current, (
        f"{_rel(run)} is stale: its study-code hash {str(recorded)[:12]} (commit {commit[:10]}) differs from the "
        f"current {_rel(study)}/*.py hash {current[:12]}: {todo}")


def test_marks_belong_to_stored_results():
    """A ``PREDATES.json`` without results under it is left over from a deleted folder."""
    roots = [r for r in (EXPERIMENTS, DOCS_RESULTS) if r.is_dir()]
    for marker in sorted(p for r in roots for p in r.rglob(MARKER)):
        assert any(run == marker.parent or marker.parent in run.parents for run in RUNS), (
            f"{_rel(marker)} marks no stored results (the folder was removed or rerun): delete the marker")


def _quoted_results_folders(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w/.-])(results[\w-]*)/", text))


@pytest.mark.parametrize("page", sorted(EXPERIMENTS.glob("*/README.md")), ids=lambda p: _rel(p))
def test_pages_quote_only_stored_results_folders(page):
    """Every results folder a study page quotes (``results.../``) is stored in the study folder."""
    missing = [f for f in sorted(_quoted_results_folders(page.read_text(encoding="utf-8")))
               if not (page.parent / f).is_dir()]
    assert not missing, (f"{_rel(page)} quotes results folders that are not stored under {_rel(page.parent)}: "
                         f"{missing}; store the run there or drop the numbers")


def test_the_hash_is_of_the_study_sources_only(tmp_path):
    """The study hash changes with a study file and not with anything else (e.g. a stored table)."""
    (tmp_path / "study.py").write_text("x = 1\n")
    first = study_digest(tmp_path)
    (tmp_path / "results_quick").mkdir()
    (tmp_path / "results_quick" / "claims.json").write_text("[]")
    (tmp_path / "README.md").write_text("numbers")
    assert study_digest(tmp_path) == first
    (tmp_path / "study.py").write_text("x = 2\n")
    assert study_digest(tmp_path) != first


def test_source_commit_names_the_checkout(tmp_path):
    """``meta.json``'s ``source``: the HEAD commit of the study's checkout, None outside git."""
    from dpfair_jax.runner.context import source_commit

    assert source_commit(tmp_path) == {"commit": None, "dirty": None}
    assert source_commit(None) == {"commit": None, "dirty": None}
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    got = source_commit(EXPERIMENTS / "paper_001")
    assert _HEX40.match(got["commit"]) and isinstance(got["dirty"], bool)


def test_meta_records_the_commit_the_run_started_from(tmp_path, monkeypatch):
    """A commit landing while a long run computes must not be recorded as the run's source: the
    commit is read before the study runs (here the study 'commits' half-way, a stand-in checkout)."""
    import dpfair_jax.runner.context as C
    from dpfair_jax.runner.registry import Experiment

    head = {"commit": "a" * 40, "dirty": False}
    monkeypatch.setattr(C, "source_commit", lambda folder: dict(head))

    def _study(config, ctx):
        head["commit"] = "b" * 40  # the tree moves while the run computes
        ctx.add_claim("ran", "the study ran", measured=1, target=1, passed=True)

    C.run_experiment(Experiment("source_probe", "kit", "source commit", {"quick": {"seed": 0}}, _study),
                     root=tmp_path, progress=False)
    meta = json.loads(next(tmp_path.rglob("meta.json")).read_text(encoding="utf-8"))
    assert meta["source"] == {"commit": "a" * 40, "dirty": False}
