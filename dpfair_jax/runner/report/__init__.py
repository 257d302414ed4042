"""The Markdown report: ``<root>/report/REPORT.md`` from every run under ``<root>/runs/``.

It reads like a paper's appendix: what the runs' size means (the quick size is a smoke check at
small size), a summary line (skipped claims counted apart and told apart: grid cells the size
leaves out vs missing data), then one section per paper headed by its title and citation
(:data:`dpfair_jax.runner.papers.PAPERS`), the kit's own checks last. Each run gets a short
block: its status ("skipped" with the reason when it skipped everything for missing data, not
"complete"), counts, privacy spent on one line (unit and neighbouring relation named; a table when
they differ), ``delta: 0`` explained as 1/n^2, a table (claim, paper's number, measured as ``value
[low, high]``, status, one-line reason) and its figures inline. No line is longer than 200
characters; the raw values (full statements and measured records, every privacy row with its
notes, degenerate rows, the config) go to ``runs/<name>/details.md``, which the report links. Then
the degenerate runs, modules that failed to import, runs that did not complete and the run times.

Claims and formula checks are kept apart: a claim is measured (by simulation or on data) and a
wrong paper or a wrong implementation could fail it; a formula check is a deterministic comparison
of the kit's closed forms with an independent evaluation, counted per run and listed only when it
fails. Rows written before ``status`` had its present values read as "holds"/"fails" (from
``passed`` or the former "passed"/"failed").

Layout: :mod:`.format` (numbers, measured records, Markdown cells, line width), :mod:`.rows`
(statuses, counts, skip kinds), :mod:`.runs` (reading the runs, study pages), :mod:`.ledger`
(privacy spent, ``details.md``), :mod:`.sections` (size paragraph, paper and run sections, run times).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner import degenerate, store
from dpfair_jax.runner.report.format import (
    _MAX_LINE,
    _anchor,
    _clip,
    _md,
    _wrap,
    format_measured,
    format_number,
    format_short,
    format_target,
)
from dpfair_jax.runner.report.ledger import _RELATIONS, _UNITS
from dpfair_jax.runner.report.ledger import _write_details
from dpfair_jax.runner.report.rows import (
    STATUSES,
    _count_text,
    _counts,
    _run_status,
    _skip_counts,
    _skip_text,
    row_kind,
    row_status,
    skip_kind,
)
from dpfair_jax.runner.report.runs import _study_page, collect_runs
from dpfair_jax.runner.report.sections import _paper_heading, _paper_section, _size_intro, _terms_lines, _timings

__all__ = ["STATUSES", "build_report", "collect_runs", "format_measured", "format_number", "format_short",
           "format_target", "row_kind", "row_status", "skip_kind"]


def build_report(
    root: str | os.PathLike | None = None,
    *,
    import_errors: Mapping[str, str] | None = None,
    title: str = "dpfair_jax reproduction report",
) -> Path:
    """Write ``<root>/report/REPORT.md`` (root defaults as in :func:`store.results_root`); return its path.

    The report reads like a paper's appendix: the size and a summary, then one section per paper
    (its title and citation from :data:`~dpfair_jax.runner.papers.PAPERS`) with one short block per
    run: status, a table (claim, paper's number, measured with its interval, status, one-line
    reason), privacy spent and the figures inline. Raw values (full statements, measured records,
    configs, every privacy row, degenerate rows) go to ``runs/<name>/details.md``, which the report
    links. ``import_errors`` (module -> one-line error, from ``registry.discover``) are listed too.
    """
    root = store.results_root(root)
    report_dir = root / "report"
    runs = collect_runs(root)
    pages = {r["name"]: _study_page(r) for r in runs}
    scans = {r["name"]: degenerate.scan_run(r["dir"]) for r in runs}
    for r in runs:
        _write_details(r, scans.get(r["name"]))

    lines: list[str] = [f"# {title}", ""]
    lines += _size_intro(runs, pages, report_dir)
    lines += _summary_lines(runs, scans)
    terms_at = len(lines)
    by_paper: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_paper.setdefault(str(r["paper"]), []).append(r)
    if by_paper:
        items = [f"[{pid}](#{_anchor(_paper_heading(pid))})" for pid in by_paper]
        items += ["[degenerate runs](#degenerate-runs)", "[run times](#run-times)"]
        lines += _wrap("Contents: " + ", ".join(items), 198) + [""]
    for pid, prs in by_paper.items():
        _paper_section(lines, pid, prs, pages, scans, report_dir)
    lines[terms_at:terms_at] = _terms_lines("\n".join(lines))
    lines = _closing_lines(lines, runs, scans, import_errors)
    text = "\n".join(lines).rstrip() + "\n"
    store.atomic_write_text(report_dir / "REPORT.md", text)
    return report_dir / "REPORT.md"


def _summary_lines(runs: list[dict[str, Any]], scans: Mapping[str, Any]) -> list[str]:
    """The summary paragraph (claims and formula checks by status, skipped and failed runs), the
    degenerate-runs line and the statuses' legend."""
    rows = [(r, c) for r in runs for c in r["claims"] if isinstance(c, dict)]
    claims = [(r, c) for r, c in rows if row_kind(c) == "claim"]
    checks = [(r, c) for r, c in rows if row_kind(c) == "formula"]
    cc, fc = _counts([c for _, c in claims]), _counts([c for _, c in checks])
    failed_runs = [r for r in runs if r["meta"].get("status") not in ("complete", "skipped", None)]
    skipped_runs = [r for r in runs if _run_status(r)[0] == "skipped"]
    degen_runs = [name for name, scan in scans.items() if scan and scan["degenerate"]]
    skip_kinds = _skip_counts([c for _, c in claims])
    lines: list[str] = []
    summary = (
        f"{len(claims)} claim{_s(claims)} in {len(runs)} experiment run{_s(runs)}: **{_count_text(cc)}**"
        + (f" ({_skip_text(skip_kinds)}; not failures)" if cc["skipped"] else "")
        + f"; {len(checks)} formula check{_s(checks)}: **{fc['holds']} hold, {fc['fails']} fail"
        + (f", {fc['skipped']} skipped" if fc["skipped"] else "") + "**."
        + (f" {len(skipped_runs)} run(s) skipped (see their sections)." if skipped_runs else "")
        + (f" {len(failed_runs)} run(s) did not complete." if failed_runs else "")
    )
    lines += _wrap(summary)
    if degen_runs:  # its own line, so the sentence reads whole in the source too
        lines.append(f"{len(degen_runs)} run(s) have degenerate training runs (constant predictions or base-rate "
                     "error; see [Degenerate runs](#degenerate-runs)).")
    lines.append("")
    lines += ["Statuses: **holds** (measured and within the paper's number or direction), **fails** (measured and "
              "not), **underpowered** (too few replicates", "to tell), **untestable** (the paper's setting cannot be "
              "run here), **reconstruction** (the paper leaves a detail open; the kit's choice is", "stated), "
              "**skipped** (not run: a grid cell this size leaves out, or missing data). Intervals are 95% unless "
              "stated. Each run's", "`details.md` holds its full statements, measured records, config and "
              "privacy rows.", ""]
    if not rows:
        lines += ["No claims recorded yet: run `dpfair reproduce --quick`.", "", "No formula checks recorded.", ""]
    return lines


def _s(items: list) -> str:
    """The plural ending for ``len(items)`` things."""
    return "" if len(items) == 1 else "s"


def _closing_lines(lines: list[str], runs: list[dict[str, Any]], scans: Mapping[str, Any],
                   import_errors: Mapping[str, str] | None) -> list[str]:
    """``lines`` with the degenerate runs, the modules that failed to import, the runs that did not
    complete and the run times after it, lines over :data:`_MAX_LINE` cut or wrapped, no double blank lines."""
    failed_runs = [r for r in runs if r["meta"].get("status") not in ("complete", "skipped", None)]
    missing_meta = [r for r in runs if not r["meta"]]
    if lines and lines[-1]:
        lines.append("")
    lines += degenerate.report_lines([(r["name"], _anchor(r["name"]), scans[r["name"]]) for r in runs
                                      if scans.get(r["name"])])
    lines = [ln for ln in lines if not ln.startswith("- `") or len(ln) <= _MAX_LINE]  # long rows: details.md
    lines = [w for ln in lines for w in ([ln] if len(ln) <= _MAX_LINE or ln.startswith("|") else _wrap(ln))]

    if import_errors:
        lines += ["## Modules that failed to import", ""]
        for mod, err in sorted(import_errors.items()):
            lines.append(_clip(f"- `{mod}`: {_md(err)}", _MAX_LINE))
        lines.append("")
    if failed_runs or missing_meta:
        lines += ["## Runs that did not complete", ""]
        for r in failed_runs:
            lines.append(_clip(f"- `{r['name']}`: {r['meta'].get('status')} ({_md(r['meta'].get('error'))}); "
                               f"see `runs/{r['name']}/error.txt`.", _MAX_LINE))
        for r in missing_meta:
            lines.append(f"- `{r['name']}`: no meta.json (still running or killed).")
        lines.append("")

    _timings(lines, runs)
    lines = [ln for k, ln in enumerate(lines) if ln or k == 0 or lines[k - 1]]  # no double blank lines
    return lines
