"""The runs under a results root (:func:`collect_runs`) and their study pages with the heading
that explains a claim."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner import store
from dpfair_jax.runner.report.format import _anchor

_PAPER_ORDER = ("000", "001", "002", "003", "004", "kit")


def collect_runs(root: str | os.PathLike) -> list[dict[str, Any]]:
    """Read every ``runs/<name>/`` under ``root``: config, meta, claims, privacy, figures."""
    runs_dir = Path(root) / "runs"
    runs = []
    for d in sorted(p for p in runs_dir.glob("*") if p.is_dir()) if runs_dir.exists() else ():
        cfg = store.read_json(d / "config.json", {}) or {}
        meta = store.read_json(d / "meta.json", {}) or {}
        try:
            claims = store.read_json(d / "claims.json", []) or []
        except json.JSONDecodeError:
            claims = []
        runs.append({
            "name": d.name,
            "dir": d,
            "paper": cfg.get("paper") or meta.get("paper") or "?",
            "description": cfg.get("description", ""),
            "size": cfg.get("size", meta.get("size")),
            "config": cfg.get("config", {}),
            "overrides": cfg.get("overrides", {}),
            "study": cfg.get("study"),
            "meta": meta,
            "claims": claims if isinstance(claims, list) else [],
            "privacy": store.read_json(d / "privacy.json", {}) or {},
            "figures": _figures(d),
            "predates": _predates(d),
            "tables": sorted(p.name for p in d.glob("*.csv")),
        })
    runs.sort(key=lambda r: (_PAPER_ORDER.index(r["paper"]) if r["paper"] in _PAPER_ORDER else 99, r["name"]))
    return runs


def _figures(d: Path) -> list[Path]:
    """The run's figures: ``figures/*.png``, and PNGs stored in the run folder itself (older runs)."""
    found = sorted((d / "figures").glob("*.png")) if (d / "figures").exists() else []
    return found + sorted(d.glob("*.png"))


def _predates(d: Path) -> str:
    """Why stored results predate the current code: the ``reason`` of a ``PREDATES.json`` in the run
    folder or in the folder that holds it (the stored results' root); ``""`` when there is none."""
    for f in (d / "PREDATES.json", d.resolve().parent / "PREDATES.json"):
        if f.is_file():
            note = store.read_json(f, {}) or {}
            return str(note.get("reason") or "they predate the current code") if isinstance(note, dict) else ""
    return ""


def _study_page(run: Mapping[str, Any]) -> Path | None:
    """The run's study page ``experiments/<study>/README.md`` (from ``config.json``'s ``study``,
    else the experiments folder found from here and the paper number)."""
    folder = run.get("study")
    if folder and (Path(folder) / "README.md").is_file():
        return Path(folder) / "README.md"
    from dpfair_jax.runner.registry import find_experiments_dir

    try:
        root = find_experiments_dir()
    except Exception:  # noqa: BLE001 - a report must not fail on discovery
        root = None
    if root is None:
        return None
    paper = run.get("paper")
    name = "kit" if paper == "kit" else f"paper_{paper}"
    page = Path(root) / name / "README.md"
    return page if page.is_file() else None


_SECTION_RE = re.compile(r"reproduction|experiments|results|measured", re.IGNORECASE)


def _page_anchor(page: Path, claim_id: str, cache: dict[Path, list[str]]) -> str:
    """The heading of ``page`` that explains ``claim_id``: the last heading before the first line
    naming the id, else the first "Reproduction"/"Experiments"/"Results" heading, else none."""
    if page not in cache:
        try:
            cache[page] = page.read_text(encoding="utf-8").splitlines()
        except OSError:
            cache[page] = []
    heading = None
    first_section = None
    for line in cache[page]:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            if first_section is None and line.startswith("##") and _SECTION_RE.search(heading):
                first_section = heading
        elif claim_id and claim_id in line and heading is not None:
            return _anchor(heading)
    return _anchor(first_section) if first_section else ""


def _page_link(page: Path | None, anchor: str, report_dir: Path) -> str:
    if page is None:
        return "n/a"
    rel = Path(os.path.relpath(page.resolve(), report_dir.resolve())).as_posix()
    label = f"{page.parent.name}/README.md"
    return f"[{label}]({rel}{'#' + anchor if anchor else ''})"
