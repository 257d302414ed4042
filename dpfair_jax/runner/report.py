"""The Markdown report: ``<root>/report/REPORT.md`` from every run under ``<root>/runs/``.

Order: a summary line, the table of all claims (pass/fail/skip) first, then the table of formula
checks, modules that failed to import and runs that failed, then one section per experiment with
its description, config, status and timing, privacy spent (with the neighbouring relation) and
figures (linked relative to the report).

Claims and formula checks are kept apart: a claim is measured (by simulation or on data) and a
wrong paper or a wrong implementation could fail it; a formula check is a deterministic comparison
of the kit's closed forms with an independent evaluation, true unless a formula is mis-coded, so
it is no evidence for a paper. A claim whose grid cell, data set or part was absent from a run is
listed as skipped (with the reason) and counted apart from the failures. Rows written before
``kind``/``status`` existed count as claims, passed or failed by ``passed``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner import store

__all__ = ["build_report", "collect_runs", "row_kind", "row_status"]

_PAPER_ORDER = ("000", "001", "002", "003", "004", "kit")


def _md(value: Any) -> str:
    """A value as one Markdown table cell."""
    if value is None:
        text = "n/a"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, default=str)
        if len(text) > 80:
            text = text[:77] + "..."
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def row_kind(row: Mapping[str, Any]) -> str:
    """``"formula"`` for a formula-consistency check, else ``"claim"``."""
    return "formula" if row.get("kind") == "formula" else "claim"


def row_status(row: Mapping[str, Any]) -> str:
    """``"passed"``, ``"failed"`` or ``"skipped"`` (older rows: from ``passed``)."""
    status = row.get("status")
    if status in ("passed", "failed", "skipped"):
        return status
    return "passed" if row.get("passed") else "failed"


_MARK = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def _counts(rows: list[Mapping[str, Any]]) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for row in rows:
        out[row_status(row)] += 1
    return out


def _table(lines: list[str], rows: list[tuple[dict, dict]]) -> None:
    lines.append("| | id | paper | experiment | statement | measured | target |")
    lines.append("|---|---|---|---|---|---|---|")
    for r, c in rows:
        status = row_status(c)
        measured = _md(c.get("measured"))
        if c.get("reason"):
            measured = (f"{status}: {_md(c.get('reason'))}" if c.get("measured") is None
                        else f"{measured} ({_md(c.get('reason'))})")
        lines.append(
            f"| {_MARK[status]} | {_md(c.get('id'))} | {_md(c.get('paper'))} | [{r['name']}](#{_anchor(r['name'])}) "
            f"| {_md(c.get('statement'))} | {measured} | {_md(c.get('target'))} |"
        )


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
            "meta": meta,
            "claims": claims if isinstance(claims, list) else [],
            "privacy": store.read_json(d / "privacy.json", {}) or {},
            "figures": sorted((d / "figures").glob("*.png")) if (d / "figures").exists() else [],
            "tables": sorted(p.name for p in d.glob("*.csv")),
        })
    runs.sort(key=lambda r: (_PAPER_ORDER.index(r["paper"]) if r["paper"] in _PAPER_ORDER else 99, r["name"]))
    return runs


def build_report(
    root: str | os.PathLike | None = None,
    *,
    import_errors: Mapping[str, str] | None = None,
    title: str = "dpfair_jax reproduction report",
) -> Path:
    """Write ``<root>/report/REPORT.md`` (root defaults as in :func:`store.results_root`); return its path.

    ``import_errors`` (module -> one-line error, from ``registry.discover``) are listed too.
    """
    root = store.results_root(root)
    report_dir = root / "report"
    runs = collect_runs(root)
    rows = [(r, c) for r in runs for c in r["claims"] if isinstance(c, dict)]
    claims = [(r, c) for r, c in rows if row_kind(c) == "claim"]
    checks = [(r, c) for r, c in rows if row_kind(c) == "formula"]
    cc, fc = _counts([c for _, c in claims]), _counts([c for _, c in checks])
    failed_runs = [r for r in runs if r["meta"].get("status") not in ("complete", None)]
    missing_meta = [r for r in runs if not r["meta"]]

    lines: list[str] = [f"# {title}", ""]
    lines.append(
        f"{len(claims)} claims in {len(runs)} experiment runs: **{cc['passed']} passed, "
        f"{cc['failed']} failed, {cc['skipped']} skipped**; {len(checks)} formula checks: "
        f"**{fc['passed']} passed, {fc['failed']} failed"
        + (f", {fc['skipped']} skipped" if fc["skipped"] else "") + "**."
        + (f" {len(failed_runs)} run(s) did not complete." if failed_runs else "")
    )
    lines += ["", "## Claims", ""]
    if claims:
        _table(lines, claims)
    else:
        lines.append("No claims recorded yet: run `dpfair reproduce --quick`.")
    lines += ["", "## Formula checks", ""]
    if checks:
        lines += ["Deterministic consistency checks of the kit's closed forms and ledgers against independent "
                  "evaluations (hand-written formulas, SciPy). They hold unless a formula is mis-coded and are "
                  "not evidence for a paper's claims.", ""]
        _table(lines, checks)
    else:
        lines.append("No formula checks recorded.")
    lines.append("")

    if import_errors:
        lines += ["## Modules that failed to import", ""]
        for mod, err in sorted(import_errors.items()):
            lines.append(f"- `{mod}`: {_md(err)}")
        lines.append("")
    if failed_runs or missing_meta:
        lines += ["## Runs that did not complete", ""]
        for r in failed_runs:
            lines.append(f"- `{r['name']}`: {r['meta'].get('status')} ({_md(r['meta'].get('error'))}); "
                         f"see `runs/{r['name']}/error.txt`.")
        for r in missing_meta:
            lines.append(f"- `{r['name']}`: no meta.json (still running or killed).")
        lines.append("")

    lines += ["## Experiments", ""]
    for r in runs:
        meta = r["meta"]
        lines += [f"### {r['name']}", ""]
        lines.append(f"Paper {r['paper']}. {r['description']}".rstrip())
        lines.append("")
        wall = meta.get("wall_seconds")
        status = meta.get("status", "unknown")
        timing = f", wall time {wall:.1f} s" if isinstance(wall, (int, float)) else ""
        comp = meta.get("compile_seconds")
        timing += f" (compile {comp:.1f} s)" if isinstance(comp, (int, float)) else ""
        dev = meta.get("devices") or {}
        lines.append(
            f"Status: **{status}**; size `{r['size']}`, seed {meta.get('seed', 'n/a')}{timing}; "
            f"device {dev.get('device_kind', 'n/a')} x{dev.get('device_count', 'n/a')}; "
            f"finished {meta.get('end_time', 'n/a')}."
        )
        if r["overrides"]:
            lines.append(f"Overrides: `{json.dumps(r['overrides'], sort_keys=True)}`.")
        lines.append("")
        lines.append(f"<details><summary>config</summary>\n\n```json\n"
                     f"{_compact_json(r['config'])}\n```\n\n</details>")
        lines.append("")
        own = [c for c in r["claims"] if isinstance(c, dict)]
        own_claims = [c for c in own if row_kind(c) == "claim"]
        own_checks = [c for c in own if row_kind(c) == "formula"]
        if own:
            a, b = _counts(own_claims), _counts(own_checks)
            text = f"Claims: {a['passed']}/{len(own_claims)} passed"
            text += f", {a['skipped']} skipped" if a["skipped"] else ""
            text += f"; formula checks: {b['passed']}/{len(own_checks)} passed" if own_checks else ""
            lines.append(text + ".")
            lines.append("")
        lines.append("Privacy spent:")
        lines.append("")
        if r["privacy"]:
            lines.append("| name | epsilon | delta | rho | relation | unit | notes |")
            lines.append("|---|---|---|---|---|---|---|")
            for name, sp in r["privacy"].items():
                sp = sp if isinstance(sp, dict) else {"notes": sp}
                lines.append(
                    f"| {_md(name)} | {_md(sp.get('epsilon'))} | {_md(sp.get('delta'))} | {_md(sp.get('rho'))} "
                    f"| {_md(sp.get('relation'))} | {_md(sp.get('unit'))} | {_md(sp.get('notes', ''))} |"
                )
        else:
            lines.append("none recorded (no private data was touched, or the run did not record it).")
        lines.append("")
        if r["tables"]:
            links = ", ".join(f"[{t}](../runs/{r['name']}/{t})" for t in r["tables"])
            lines += [f"Tables: {links}", ""]
        for fig in r["figures"]:
            rel = Path(os.path.relpath(fig, report_dir)).as_posix()
            lines += [f"![{r['name']}: {fig.stem}]({rel})", ""]
    text = "\n".join(lines).rstrip() + "\n"
    store.atomic_write_text(report_dir / "REPORT.md", text)
    return report_dir / "REPORT.md"


def _compact_json(config: Any) -> str:
    """A config dict as JSON with one top-level key per line (lists kept on one line)."""
    if not isinstance(config, dict) or not config:
        return json.dumps(config)
    items = [f"  {json.dumps(str(k))}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(config.items())]
    return "{\n" + ",\n".join(items) + "\n}"


def _anchor(name: str) -> str:
    """GitHub-style heading anchor of ``name``."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
