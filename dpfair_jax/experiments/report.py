"""The Markdown report: ``<root>/report/REPORT.md`` from every run under ``<root>/runs/``.

Order: a summary line, the table of all claims (pass/fail) first, modules that failed to import
and runs that failed, then one section per experiment with its description, config, status and
timing, privacy spent (with the neighbouring relation) and figures (linked relative to the report).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.experiments import store

__all__ = ["build_report", "collect_runs"]

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
    claims = [(r, c) for r in runs for c in r["claims"]]
    n_pass = sum(bool(c.get("passed")) for _, c in claims)
    failed_runs = [r for r in runs if r["meta"].get("status") not in ("complete", None)]
    missing_meta = [r for r in runs if not r["meta"]]

    lines: list[str] = [f"# {title}", ""]
    lines.append(
        f"{len(claims)} claims checked in {len(runs)} experiment runs: **{n_pass} passed, "
        f"{len(claims) - n_pass} failed**."
        + (f" {len(failed_runs)} run(s) did not complete." if failed_runs else "")
    )
    lines += ["", "## Claims", ""]
    if claims:
        lines.append("| | id | paper | experiment | statement | measured | target |")
        lines.append("|---|---|---|---|---|---|---|")
        for r, c in claims:
            mark = "PASS" if c.get("passed") else "FAIL"
            lines.append(
                f"| {mark} | {_md(c.get('id'))} | {_md(c.get('paper'))} | [{r['name']}](#{_anchor(r['name'])}) "
                f"| {_md(c.get('statement'))} | {_md(c.get('measured'))} | {_md(c.get('target'))} |"
            )
    else:
        lines.append("No claims recorded yet: run `dpfair reproduce --quick`.")
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
        n = len(r["claims"])
        if n:
            ok = sum(bool(c.get("passed")) for c in r["claims"])
            lines.append(f"Claims: {ok}/{n} passed.")
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
