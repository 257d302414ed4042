# Kept as one module (~560 lines): the formatting, row and study-page helpers are private to the one
# report builder, whose sections they write.
"""The Markdown report: ``<root>/report/REPORT.md`` from every run under ``<root>/runs/``.

Order: what the runs' size means (the quick size is a smoke check at small size; full sizes and
their results are on the study pages ``experiments/<study>/README.md``), a summary line, every
claim that does not hold with its status, reason and a link to the study page that explains it,
the skipped claims (missing optional data or grid cells: counted apart, not as failures), the table
of all claims, the formula checks, modules that failed to import and runs that did not complete,
the run times, then one section per experiment with its description, config, status and timing,
privacy spent (each row with its privacy unit and neighbouring relation) and figures (linked
relative to the report).

Claims and formula checks are kept apart: a claim is measured (by simulation or on data) and a
wrong paper or a wrong implementation could fail it; a formula check is a deterministic comparison
of the kit's closed forms with an independent evaluation, true unless a formula is mis-coded, so
it is no evidence for a paper. ``measured`` is printed as readable numbers (a
:func:`~dpfair_jax.runner.context.comparison` as ``0.124 vs 0.130 (diff -0.006, 95% CI [-0.010,
-0.002])``). Rows written before ``status`` had its present values read as "holds"/"fails" (from
``passed`` or the former "passed"/"failed").
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner import degenerate, store

__all__ = ["STATUSES", "build_report", "collect_runs", "format_measured", "format_number", "row_kind",
           "row_status"]

_PAPER_ORDER = ("000", "001", "002", "003", "004", "kit")

#: Row statuses in report order (as ``context.CLAIM_STATUSES``).
STATUSES = ("holds", "fails", "underpowered", "untestable", "reconstruction", "skipped")

_LEGACY = {"passed": "holds", "failed": "fails"}

_UNITS = {"example": "example (one record)", "sensitive_attribute": "sensitive attribute only",
          "group_member": "group member", "user": "user (all of one user's records)"}
_RELATIONS = {"add_remove": "add/remove", "replace_one": "replace-one",
              "replace_one_within_group": "replace-one within a group (sizes fixed; not across groups)"}


# ---------------------------------------------------------------------------------------------
# Formatting


def format_number(x: Any, decimals: int | None = None) -> str:
    """A number as text: 3 significant digits (``0.124``, ``5e-08``), numbers from 1000 up to 10^7
    rounded to whole numbers without an exponent or separators (``12346``: a comma would read as a
    list separator), or ``decimals`` fixed decimals when given."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x) if abs(x) < 10_000_000 else f"{x:.3g}"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if decimals is not None:
        text = f"{x:.{decimals}f}"
        return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text
    if x == 0:
        return "0"
    if 1000 <= abs(x) < 1e7:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number_or_inf(v: Any) -> bool:
    return _is_number(v) or v in ("inf", "-inf")


def _comparison_text(m: Mapping[str, Any]) -> str:
    """``{"value", "vs", "diff", "ci", "level", "names"}`` as ``0.124 vs 0.130 (diff -0.006, 95% CI [...])``."""
    nums = [m.get("value"), m.get("vs")]
    finite = [abs(float(v)) for v in nums if _is_number(v) and math.isfinite(float(v))]
    decimals = None
    if finite and max(finite) > 0 and 1e-4 <= max(finite) < 1e4:
        decimals = max(0, min(8, 2 - math.floor(math.log10(max(finite)))))

    def num(v: Any) -> str:
        return format_number(v, decimals) if _is_number(v) else format_measured(v)

    names = m.get("names") or []
    left = f"{names[0]} {num(m.get('value'))}" if len(names) > 0 else num(m.get("value"))
    right = f"{names[1]} {num(m.get('vs'))}" if len(names) > 1 else num(m.get("vs"))
    extra = []
    if m.get("diff") is not None:
        extra.append(f"diff {num(m['diff'])}")
    ci = m.get("ci")
    if isinstance(ci, list) and len(ci) == 2:
        level = m.get("level", 0.95)
        pct = f"{100 * float(level):g}%" if _is_number(level) else "95%"
        extra.append(f"{pct} CI [{num(ci[0])}, {num(ci[1])}]")
    others = {k: v for k, v in m.items() if k not in ("value", "vs", "diff", "ci", "level", "names")}
    if others:
        extra.append(format_measured(others))
    return f"{left} vs {right}" + (f" ({', '.join(extra)})" if extra else "")


def _verdict_text(m: Mapping[str, Any]) -> str:
    """A verdict record (``runner.verdict.Verdict.as_measured``) as ``effect +0.012 (99% CI [+0.004,
    +0.020], 8 replicates; detectable 0.009)``, with ``; needs N replicates`` when the record has
    ``replicates_needed`` (the count that brings the detectable effect below the paper's margin);
    the paper's effect is the row's target."""
    ci = m.get("ci") or [None, None]
    level = m.get("level", 0.95)
    pct = f"{100 * float(level):.4g}%" if _is_number(level) else "95%"

    def signed(v: Any) -> str:
        return ("+" if _is_number(v) and float(v) > 0 else "") + format_number(v)

    reps = f", {m['replicates']} replicates" if m.get("replicates") else ""
    need = ""
    if "replicates_needed" in m:  # a study that plans its power records what the claim needs
        n = m["replicates_needed"]
        need = (f"; needs {n} replicates" if n is not None else
                f"; needs more than {m['max_replicates']} replicates" if m.get("max_replicates") else "")
    return (f"effect {signed(m.get('effect'))} ({pct} CI [{signed(ci[0])}, {signed(ci[1])}]{reps}; "
            f"detectable {format_number(m.get('mde'))}{need})")


def format_measured(value: Any, *, max_items: int = 8) -> str:
    """``measured`` (or ``target``) as readable text: numbers to 3 significant digits, a
    comparison record as ``a vs b (diff d, 95% CI [lo, hi])``, dicts as ``key value, ...``, lists
    as ``[a, b, ...]`` (at most ``max_items`` items, then how many more)."""
    if value is None:
        return "n/a"
    if isinstance(value, (bool, int, float)):
        return format_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if "value" in value and "vs" in value:
            return _comparison_text(value)
        if "effect" in value and "mde" in value and "ci" in value:
            return _verdict_text(value)
        if set(value) == {"value", "low", "high", "source"}:  # a verdict's paper effect (its target)
            size = (format_number(value["value"]) if value["value"] is not None else
                    f"[{format_number(value['low'])}, {format_number(value['high'])}]" if value["low"] is not None
                    else "direction only")
            return f"{size} ({value['source']})"
        parts = []
        for k, v in value.items():
            text = format_measured(v, max_items=max_items)
            parts.append(f"{k} ({text})" if isinstance(v, Mapping) else f"{k} {text}")
        return ", ".join(parts) if parts else "{}"
    if isinstance(value, (list, tuple)):
        items = [format_measured(v, max_items=max_items) for v in value[:max_items]]
        more = len(value) - max_items
        return "[" + ", ".join(items) + (f", ... {more} more" if more > 0 else "") + "]"
    return str(value)


def _md(value: Any) -> str:
    """A value as one Markdown table cell."""
    text = value if isinstance(value, str) else format_measured(value)
    return text.replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------------------------------
# Rows


def row_kind(row: Mapping[str, Any]) -> str:
    """``"formula"`` for a formula-consistency check, else ``"claim"``."""
    return "formula" if row.get("kind") == "formula" else "claim"


def row_status(row: Mapping[str, Any]) -> str:
    """One of :data:`STATUSES` (older rows: "passed"/"failed" or ``passed``)."""
    status = row.get("status")
    if status in STATUSES:
        return status
    if status in _LEGACY:
        return _LEGACY[status]
    return "holds" if row.get("passed") else "fails"


def _counts(rows: list[Mapping[str, Any]]) -> dict[str, int]:
    out = dict.fromkeys(STATUSES, 0)
    for row in rows:
        out[row_status(row)] += 1
    return out


def _count_text(counts: Mapping[str, int]) -> str:
    words = {"holds": "hold", "fails": "fail", "underpowered": "underpowered", "untestable": "untestable",
             "reconstruction": "reconstructions", "skipped": "skipped"}
    parts = [f"{counts['holds']} hold", f"{counts['fails']} fail"]
    parts += [f"{counts[s]} {words[s]}" for s in ("underpowered", "untestable", "reconstruction") if counts[s]]
    parts.append(f"{counts['skipped']} skipped")
    return ", ".join(parts)


def _mark(status: str) -> str:
    return "**fails**" if status == "fails" else status


# ---------------------------------------------------------------------------------------------
# Study pages


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


# ---------------------------------------------------------------------------------------------


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
            "figures": sorted((d / "figures").glob("*.png")) if (d / "figures").exists() else [],
            "tables": sorted(p.name for p in d.glob("*.csv")),
        })
    runs.sort(key=lambda r: (_PAPER_ORDER.index(r["paper"]) if r["paper"] in _PAPER_ORDER else 99, r["name"]))
    return runs


def _size_intro(runs: list[dict[str, Any]], pages: dict[str, Path | None], report_dir: Path) -> list[str]:
    sizes = [r["size"] for r in runs]
    quick, full = sizes.count("quick"), sizes.count("full")
    links = []
    for r in runs:
        page = pages.get(r["name"])
        link = _page_link(page, "", report_dir) if page is not None else None
        if link and link not in links:
            links.append(link)
    where = ("the study pages " + ", ".join(links)) if links else "the study pages `experiments/<study>/README.md`"
    if not runs:
        return []
    if quick and not full:
        head = (f"**Quick size.** All {quick} runs use the quick configs: smoke checks at small size (fewer "
                "seeds, trials, epochs and grid points than the papers; never a different method). They show that "
                "every code path runs and how each claim comes out at that size; a verdict at quick size is not "
                "the paper's test.")
    elif full and not quick:
        head = (f"**Full size.** All {full} runs use the studies' full configs (the papers' grids, seeds and "
                "epochs, or the largest the study runs).")
    else:
        head = (f"**Mixed sizes.** {quick} runs at quick size (smoke checks at small size: a verdict there is not "
                f"the paper's test) and {full} at full size; each experiment's section names its size.")
    tail = (" Full sizes run with `dpfair run NAME` (or `dpfair reproduce` without `--quick`); their results, "
            f"and the reasons behind each verdict, are on {where}.")
    return [head + tail, ""]


def build_report(
    root: str | os.PathLike | None = None,
    *,
    import_errors: Mapping[str, str] | None = None,
    title: str = "dpfair_jax reproduction report",
) -> Path:
    """Write ``<root>/report/REPORT.md`` (root defaults as in :func:`store.results_root`); return its path.

    ``import_errors`` (module -> one-line error, from ``registry.discover``) are listed too.

    Long (~100 lines): one pass that writes the report's sections in order, a few lines each, over
    the same collected runs, rows and page links.
    """
    root = store.results_root(root)
    report_dir = root / "report"
    runs = collect_runs(root)
    pages = {r["name"]: _study_page(r) for r in runs}
    lines_cache: dict[Path, list[str]] = {}
    rows = [(r, c) for r in runs for c in r["claims"] if isinstance(c, dict)]
    claims = [(r, c) for r, c in rows if row_kind(c) == "claim"]
    checks = [(r, c) for r, c in rows if row_kind(c) == "formula"]
    cc, fc = _counts([c for _, c in claims]), _counts([c for _, c in checks])
    failed_runs = [r for r in runs if r["meta"].get("status") not in ("complete", None)]
    missing_meta = [r for r in runs if not r["meta"]]
    scans = {r["name"]: degenerate.scan_run(r["dir"]) for r in runs}
    notes = {name: degenerate.claim_note(scan) for name, scan in scans.items()}
    degen_runs = [name for name, scan in scans.items() if scan and scan["degenerate"]]

    def link(r: dict, c: Mapping[str, Any]) -> str:
        page = pages.get(r["name"])
        return _page_link(page, _page_anchor(page, str(c.get("id", "")), lines_cache) if page else "", report_dir)

    lines: list[str] = [f"# {title}", ""]
    lines += _size_intro(runs, pages, report_dir)
    lines.append(
        f"{len(claims)} claims in {len(runs)} experiment runs: **{_count_text(cc)}**"
        + (" (skipped: a grid cell or optional data set absent from the run; not failures)" if cc["skipped"] else "")
        + f"; {len(checks)} formula checks: **{fc['holds']} hold, {fc['fails']} fail"
        + (f", {fc['skipped']} skipped" if fc["skipped"] else "") + "**."
        + (f" {len(failed_runs)} run(s) did not complete." if failed_runs else "")
        + (f" {len(degen_runs)} run(s) have degenerate training runs (constant predictions or base-rate error; "
           "see [Degenerate runs](#degenerate-runs))." if degen_runs else "")
    )

    open_rows = [(r, c) for r, c in rows
                 if row_status(c) in ("fails", "underpowered", "untestable", "reconstruction")]
    lines += ["", "## Claims that do not hold", ""]
    if open_rows:
        lines += ["Each with its status, the reason the study gives and the study page that explains it.", ""]
        lines.append("| status | id | statement | measured | target | reason | explained in |")
        lines.append("|---|---|---|---|---|---|---|")
        for r, c in open_rows:
            kind = " (formula check)" if row_kind(c) == "formula" else ""
            note = f" ({notes[r['name']]})" if notes.get(r["name"]) and row_kind(c) == "claim" else ""
            lines.append(f"| {_mark(row_status(c))}{kind} | {_md(c.get('id'))} | {_md(c.get('statement'))} "
                         f"| {_md(c.get('measured'))}{note} | {_md(c.get('target'))} "
                         f"| {_md(c.get('reason') or 'no reason recorded')} | {link(r, c)} |")
    else:
        lines.append("None: every claim that was measured holds." if rows else "No claims recorded yet.")
    skipped = [(r, c) for r, c in rows if row_status(c) == "skipped"]
    if skipped:
        lines += ["", "## Skipped claims", "",
                  "Claims a run could not check (a grid cell the config leaves out, or optional data that is "
                  "not installed); counted apart from failures.", "",
                  "| id | experiment | statement | reason |", "|---|---|---|---|"]
        for r, c in skipped:
            lines.append(f"| {_md(c.get('id'))} | [{r['name']}](#{_anchor(r['name'])}) | {_md(c.get('statement'))} "
                         f"| {_md(c.get('reason') or 'no reason recorded')} |")

    lines += ["", "## Claims", ""]
    if claims:
        _table(lines, claims, notes)
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
    lines += degenerate.report_lines([(r["name"], _anchor(r["name"]), scans[r["name"]]) for r in runs
                                      if scans.get(r["name"])])

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

    _timings(lines, runs)

    lines += ["## Experiments", ""]
    for r in runs:
        _section(lines, r, report_dir)
    text = "\n".join(lines).rstrip() + "\n"
    store.atomic_write_text(report_dir / "REPORT.md", text)
    return report_dir / "REPORT.md"


def _table(lines: list[str], rows: list[tuple[dict, dict]], notes: Mapping[str, str] | None = None) -> None:
    lines.append("| status | id | paper | experiment | statement | measured | target |")
    lines.append("|---|---|---|---|---|---|---|")
    for r, c in rows:
        status = row_status(c)
        measured = _md(c.get("measured"))
        if c.get("measured") is None and c.get("reason"):
            measured = f"n/a ({_md(c.get('reason'))})"
        if notes and notes.get(r["name"]) and row_kind(c) == "claim" and status != "skipped":
            measured += f" ({notes[r['name']]})"
        lines.append(
            f"| {_mark(status)} | {_md(c.get('id'))} | {_md(c.get('paper'))} | [{r['name']}](#{_anchor(r['name'])}) "
            f"| {_md(c.get('statement'))} | {measured} | {_md(c.get('target'))} |"
        )


def _timings(lines: list[str], runs: list[dict[str, Any]]) -> None:
    timed = [r for r in runs if isinstance(r["meta"].get("wall_seconds"), (int, float))]
    if not timed:
        return
    total = sum(r["meta"]["wall_seconds"] for r in timed)
    cpus = [r["meta"].get("cpu_seconds") for r in timed]
    cpu_total = f", CPU {_seconds(sum(cpus))}" if all(_is_number(c) for c in cpus) else ""
    lines += ["## Run times", "",
              f"Wall and CPU (user + system) time per run as recorded in `meta.json` (total {_seconds(total)}"
              f"{cpu_total}; XLA compiles, their seconds and the programs loaded from the persistent compilation "
              "cache; chunks computed in this run and reused from an earlier one). Runs in one process share "
              "compiled programs, so a run after another that compiled the same program compiles less.", "",
              "| experiment | size | status | wall | CPU | compiles | compile | cache loads | chunks computed "
              "| reused |",
              "|---|---|---|---|---|---|---|---|---|---|"]

    def opt(v: Any, fmt: Any = str) -> str:
        return fmt(v) if _is_number(v) else "n/a"

    for r in timed:
        m = r["meta"]
        chunks = m.get("chunks") or {}
        lines.append(f"| {r['name']} | {r['size']} | {m.get('status')} | {_seconds(m['wall_seconds'])} "
                     f"| {opt(m.get('cpu_seconds'), _seconds)} | {opt(m.get('compiles'))} "
                     f"| {opt(m.get('compile_seconds'), _seconds)} | {opt(m.get('compile_cache_hits'))} "
                     f"| {chunks.get('computed', 'n/a')} | {chunks.get('reused', 'n/a')} |")
    lines.append("")


def _seconds(s: float) -> str:
    s = float(s)
    return f"{s:.1f} s" if s < 60 else f"{int(s // 60)} min {s % 60:04.1f} s"


def _privacy_cell(sp: Mapping[str, Any], key: str) -> str:
    value = sp.get(key)
    if key == "unit":
        return _UNITS.get(value, str(value)) if value else "**not recorded**"
    if key == "relation":
        return _RELATIONS.get(value, str(value)) if value else "**not recorded**"
    return _md(value)


def _section(lines: list[str], r: dict[str, Any], report_dir: Path) -> None:
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
        text = f"Claims: {_count_text(a)}"
        text += f"; formula checks: {b['holds']}/{len(own_checks)} hold" if own_checks else ""
        lines.append(text + ".")
        lines.append("")
    lines.append("Privacy spent (each row with its privacy unit and neighbouring relation):")
    lines.append("")
    if r["privacy"]:
        lines.append("| name | unit | relation | epsilon | delta | rho | notes |")
        lines.append("|---|---|---|---|---|---|---|")
        for name, sp in r["privacy"].items():
            sp = sp if isinstance(sp, dict) else {"notes": sp}
            lines.append(
                f"| {_md(name)} | {_privacy_cell(sp, 'unit')} | {_privacy_cell(sp, 'relation')} "
                f"| {_md(sp.get('epsilon'))} | {_md(sp.get('delta'))} | {_md(sp.get('rho'))} "
                f"| {_md(sp.get('notes', '') or '')} |"
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


def _compact_json(config: Any) -> str:
    """A config dict as JSON with one top-level key per line (lists kept on one line)."""
    if not isinstance(config, dict) or not config:
        return json.dumps(config)
    items = [f"  {json.dumps(str(k))}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(config.items())]
    return "{\n" + ",\n".join(items) + "\n}"


def _anchor(name: str) -> str:
    """GitHub-style heading anchor of ``name``."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
