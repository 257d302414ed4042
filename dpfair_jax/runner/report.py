# Kept as one module (~560 lines): the formatting, row and study-page helpers are private to the one
# report builder, whose sections they write.
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
from dpfair_jax.runner.papers import PAPERS, citation

__all__ = ["STATUSES", "build_report", "collect_runs", "format_measured", "format_number", "format_short",
           "format_target", "row_kind", "row_status", "skip_kind"]

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
    where = ("the study pages linked from each paper's section" if any(pages.values())
             else "the study pages `experiments/<study>/README.md`")
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
    return _wrap(head + tail, 198) + [""]


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
    rows = [(r, c) for r in runs for c in r["claims"] if isinstance(c, dict)]
    claims = [(r, c) for r, c in rows if row_kind(c) == "claim"]
    checks = [(r, c) for r, c in rows if row_kind(c) == "formula"]
    cc, fc = _counts([c for _, c in claims]), _counts([c for _, c in checks])
    failed_runs = [r for r in runs if r["meta"].get("status") not in ("complete", "skipped", None)]
    missing_meta = [r for r in runs if not r["meta"]]
    skipped_runs = [r for r in runs if _run_status(r)[0] == "skipped"]
    scans = {r["name"]: degenerate.scan_run(r["dir"]) for r in runs}
    degen_runs = [name for name, scan in scans.items() if scan and scan["degenerate"]]
    for r in runs:
        _write_details(r, scans.get(r["name"]))

    skip_kinds = _skip_counts([c for _, c in claims])
    lines: list[str] = [f"# {title}", ""]
    lines += _size_intro(runs, pages, report_dir)
    summary = (
        f"{len(claims)} claims in {len(runs)} experiment runs: **{_count_text(cc)}**"
        + (f" ({_skip_text(skip_kinds)}; not failures)" if cc["skipped"] else "")
        + f"; {len(checks)} formula checks: **{fc['holds']} hold, {fc['fails']} fail"
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

    by_paper: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_paper.setdefault(str(r["paper"]), []).append(r)
    if by_paper:
        items = [f"[{pid}](#{_anchor(_paper_heading(pid))})" for pid in by_paper]
        items += ["[degenerate runs](#degenerate-runs)", "[run times](#run-times)"]
        lines += _wrap("Contents: " + ", ".join(items), 198) + [""]
    for pid, prs in by_paper.items():
        _paper_section(lines, pid, prs, pages, scans, report_dir)

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
    text = "\n".join(lines).rstrip() + "\n"
    store.atomic_write_text(report_dir / "REPORT.md", text)
    return report_dir / "REPORT.md"


#: The longest line the report writes (tables included); longer text is cut with "...".
_MAX_LINE = 200

_GRID_RE = re.compile(r"grid|in this config|this config|config's|= \[\]|cell|quick|needs two|only one|has only|"
                      r"not in the|leaves out", re.IGNORECASE)
_DATA_RE = re.compile(r"not installed|pip install|modulenotfound|no module|csv|not given|not found|missing|"
                      r"download|no such file|path", re.IGNORECASE)


def skip_kind(reason: str | None) -> str:
    """Why a claim was skipped, from its reason: ``"data"`` (a data set, file or optional package
    is missing), ``"grid"`` (a grid cell or setting the run's config leaves out, as the quick size
    does) or ``"other"``."""
    text = reason or ""
    if _DATA_RE.search(text):
        return "data"
    if _GRID_RE.search(text):
        return "grid"
    return "other"


_SKIP_WORDS = {"grid": "grid cells this size leaves out", "data": "missing data or packages", "other": "other"}


def _skip_counts(rows: list[Mapping[str, Any]]) -> dict[str, int]:
    out = {"grid": 0, "data": 0, "other": 0}
    for c in rows:
        if row_status(c) == "skipped":
            out[skip_kind(c.get("reason"))] += 1
    return out


def _skip_text(kinds: Mapping[str, int]) -> str:
    """``"6 grid cells this size leaves out, 1 missing data or packages"``."""
    return ", ".join(f"{n} {_SKIP_WORDS[k]}" for k, n in kinds.items() if n) or "none"


def _run_status(r: Mapping[str, Any]) -> tuple[str, str]:
    """(status, reason): ``meta.json``'s status, but "skipped" (with the reason) when the run
    says so or when it recorded claims and skipped every one of them for missing data."""
    meta = r["meta"]
    status = meta.get("status") or "unknown"
    if status == "skipped":
        return "skipped", str(meta.get("reason") or meta.get("error") or "no reason recorded")
    own = [c for c in r["claims"] if isinstance(c, dict) and row_kind(c) == "claim"]
    if own and all(row_status(c) == "skipped" for c in own):
        reasons = [str(c.get("reason") or "") for c in own]
        if any(skip_kind(x) == "data" for x in reasons):
            return "skipped", next(x for x in reasons if skip_kind(x) == "data")
    return status, ""


def _paper_heading(pid: str) -> str:
    if pid in PAPERS:
        return f"Paper {pid}: {PAPERS[pid]['title']}"
    return "Kit checks" if pid == "kit" else f"Paper {pid}"


def _paper_section(lines: list[str], pid: str, runs: list[dict[str, Any]], pages: Mapping[str, Path | None],
                   scans: Mapping[str, Any], report_dir: Path) -> None:
    if lines and lines[-1]:
        lines.append("")
    lines += [f"## {_paper_heading(pid)}", ""]
    page = next((pages.get(r["name"]) for r in runs if pages.get(r["name"]) is not None), None)
    study = f" Study page: {_page_link(page, '', report_dir)}." if page is not None else ""
    if pid in PAPERS:
        lines += _wrap(f"{citation(pid)} What the kit takes from it: {PAPERS[pid]['topic']}.{study}") + [""]
    elif pid == "kit":
        lines += _wrap("The kit's own checks of its privacy accounting and mechanisms (no paper)." + study) + [""]
    for r in runs:
        _run_block(lines, r, scans.get(r["name"]), report_dir)


def _run_block(lines: list[str], r: dict[str, Any], scan: Mapping[str, Any] | None, report_dir: Path) -> None:
    """A run: its heading, one paragraph (description, status, counts, privacy), its claims table and figures."""
    name, meta = r["name"], r["meta"]
    folder = f"../runs/{name}"
    status, why = _run_status(r)
    wall = meta.get("wall_seconds")
    desc = _clip(str(r["description"] or ""), 300).rstrip(".")
    parts = [f"{desc}." if desc else "", f"Status: **{status}**" + (f" ({why})" if why else "")
             + (f"; size {r['size'] or 'n/a'}" if r["size"] != "quick" else "")
             + (f", wall {_seconds(wall)}" if _is_number(wall) else "")]
    if scan and scan.get("degenerate"):
        parts[-1] += f"; {scan['degenerate']} of {scan['rows']} rows degenerate ([degenerate runs](#degenerate-runs))"
    parts[-1] += "."
    own = [c for c in r["claims"] if isinstance(c, dict)]
    own_claims = [c for c in own if row_kind(c) == "claim"]
    own_checks = [c for c in own if row_kind(c) == "formula"]
    counts = []
    if own_claims:
        a = _counts(own_claims)
        counts.append(f"{len(own_claims)} claim{'s' if len(own_claims) != 1 else ''}: {_count_text(a)}"
                      + (f" ({_skip_text(_skip_counts(own_claims))})" if a["skipped"] else ""))
    if own_checks:
        b = _counts(own_checks)
        counts.append(f"formula checks: {b['holds']}/{len(own_checks)} hold")
    if counts:
        text = "; ".join(counts)
        parts.append(text[0].upper() + text[1:] + ".")
    privacy = _privacy_lines(r)
    if len(privacy) == 1:
        parts.append(privacy[0])
    if _delta_is_inverse_n2(r):
        parts.append("Config `delta: 0` means delta = 1/n^2 (n: training rows).")
    parts.append(f"Full rows: [details.md]({folder}/details.md).")
    lines.append(f"### {name}")
    lines += _wrap(" ".join(p for p in parts if p), 198)
    if len(privacy) > 1:
        lines += [""] + privacy
    table = own_claims + [c for c in own_checks if row_status(c) != "holds"]
    if table:
        lines += ["", "| claim | paper | measured [95% CI] | status | reason |", "|---|---|---|---|---|"]
        lines += [_claim_row(c) for c in table]
    line = ""
    figure_lines = []
    for f in r["figures"]:
        img = f"![{f.stem}]({Path(os.path.relpath(f, report_dir)).as_posix()})"
        if line and len(line) + 1 + len(img) > _MAX_LINE:
            figure_lines.append(line)
            line = ""
        line = f"{line} {img}".strip()
    if line:
        figure_lines.append(line)
    lines += [""] + figure_lines  # a heading may follow the image line directly


def _delta_is_inverse_n2(r: Mapping[str, Any]) -> bool:
    """Config ``delta: 0`` while every recorded spend has a positive delta: the study's default 1/n^2."""
    cfg = r.get("config") or {}
    if not (isinstance(cfg, Mapping) and _is_number(cfg.get("delta")) and float(cfg["delta"]) == 0.0):
        return False
    deltas = [sp.get("delta") for sp in (r.get("privacy") or {}).values() if isinstance(sp, Mapping)]
    return bool(deltas) and all(_is_number(d) and float(d) > 0 for d in deltas)


def _claim_row(c: Mapping[str, Any]) -> str:
    """One table row: claim (statement, cut), paper's number, measured [interval], status, reason; at most
    :data:`_MAX_LINE` characters (the reason is cut first)."""
    status = row_status(c)
    mark = _mark(status) + (" (formula)" if row_kind(c) == "formula" else "")
    reason = str(c.get("reason") or ("" if status == "holds" else "no reason recorded"))
    if status == "skipped":
        reason = {"grid": "left out at this size: ", "data": "missing data: "}.get(skip_kind(reason), "") + reason
    measured = "n/a" if status == "skipped" else format_short(c.get("measured"))
    cells = [_md(_clip(_statement(c.get("statement")), 60)), _md(_clip(format_target(c.get("target")), 30)),
             _md(_clip(measured, 48)), mark]
    head = "| " + " | ".join(cells) + " | "
    room = max(20, _MAX_LINE - len(head) - 2)
    return head + _md(_clip(_first_sentence(reason), room)) + " |"


def _statement(text: Any) -> str:
    """A statement's head: up to its first " (" or ": " when that leaves 25 characters or more."""
    text = str(text or "")
    for sep in (": ", " ("):
        k = text.find(sep)
        if k >= 25:
            text = text[:k]
    return text


def _first_sentence(text: str) -> str:
    m = re.search(r"(?<=[a-z0-9)\]])[.;] (?=[A-Z(])", text)
    return text[:m.start()] if m and m.start() >= 12 else text


def _clip(text: str, width: int) -> str:
    """``text`` on one line, cut at a word boundary to ``width`` characters with "..."."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[:width - 3]
    if " " in cut[width // 2:]:
        cut = cut[:cut.rfind(" ")]
    return cut.rstrip(",;: ") + "..."


def _wrap(text: str, width: int = 160) -> list[str]:
    """A paragraph as lines of at most ``width`` characters (links and words are never split)."""
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def format_short(value: Any, _depth: int = 0) -> str:
    """``measured`` for the report's table: ``value [low, high]`` when there is an interval (a
    comparison as its difference, a verdict as its effect), a number, or at most three scalar
    fields of a record (``key value``); never a nested record (those are in ``details.md``)."""
    if value is None:
        return "n/a"
    if isinstance(value, (bool, int, float, str)):
        return format_measured(value)
    if isinstance(value, Mapping):
        ci = value.get("ci")
        ci = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else None
        if ci is None and _is_number(value.get("low")) and _is_number(value.get("high")):
            ci = [value["low"], value["high"]]
        if "value" in value and "vs" in value:
            diff = value.get("diff")
            head = f"{format_number(value['value'])} vs {format_number(value['vs'])}"
            if ci is not None and diff is not None:
                return f"{head}, diff {format_number(diff)} [{format_number(ci[0])}, {format_number(ci[1])}]"
            return head
        for key in ("effect", "value", "mean", "estimate"):
            if key in value and _is_number(value[key]):
                interval = f" [{format_number(ci[0])}, {format_number(ci[1])}]" if ci is not None else ""
                level = value.get("level")
                if interval and _is_number(level) and abs(float(level) - 0.95) > 1e-9:
                    interval += f" ({100 * float(level):.3g}%)"
                word = "" if key == "value" else f"{key} "
                return f"{word}{format_number(value[key])}{interval}"
        subs = [(k, v) for k, v in value.items() if isinstance(v, Mapping)]
        if subs and len(subs) == len(value) and _depth == 0:  # named readings: the first one, how many more
            more = f"; +{len(subs) - 1} more" if len(subs) > 1 else ""
            return f"{subs[0][0]}: {format_short(subs[0][1], 1)}{more}"
        scalars = [(k, v) for k, v in value.items() if _is_number(v) or isinstance(v, (str, bool))]
        scalars = [(k, v) for k, v in scalars if not (isinstance(v, str) and len(v) > 20)]
        more = len(value) - min(3, len(scalars))
        text = ", ".join(f"{k} = {format_number(v)}" for k, v in scalars[:3])
        return (text + (f", +{more} more" if more > 0 else "")) if text else f"{len(value)} fields"
    if isinstance(value, (list, tuple)):
        if all(_is_number(v) for v in value):
            return format_measured(list(value), max_items=4)
        return f"{len(value)} values"
    return str(value)


def format_target(value: Any) -> str:
    """The paper's number: a verdict target's size (``0.0106``, ``[low, high]`` or "direction"),
    else :func:`format_measured`."""
    if isinstance(value, Mapping) and {"value", "low", "high"} <= set(value):
        if value["value"] is not None:
            return format_number(value["value"])
        if value["low"] is not None:
            return f"[{format_number(value['low'])}, {format_number(value['high'])}]"
        return "direction only"
    if isinstance(value, Mapping):
        return format_short(value)
    return format_measured(value)


def _privacy_lines(r: Mapping[str, Any]) -> list[str]:
    """Privacy spent: one line when every row shares its unit and relation, else a table (every
    row names its unit and neighbouring relation); rows in ``details.md`` and ``privacy.json``."""
    priv = {k: (v if isinstance(v, dict) else {"notes": v}) for k, v in (r["privacy"] or {}).items()}
    if not priv:
        return ["Privacy spent: none recorded (no private data was touched, or the run did not record it)."]
    keys = {(sp.get("unit"), sp.get("relation")) for sp in priv.values()}
    if len(keys) == 1 and len(priv) >= 1:
        sp0 = next(iter(priv.values()))
        eps = [sp.get("epsilon") for sp in priv.values() if _is_number(sp.get("epsilon"))]
        dels = [sp.get("delta") for sp in priv.values() if _is_number(sp.get("delta"))]
        rhos = [sp.get("rho") for sp in priv.values() if _is_number(sp.get("rho"))]

        def span(vals: list[Any], name: str) -> str:
            if not vals:
                return ""
            lo, hi = min(vals), max(vals)
            a, b = format_number(lo), format_number(hi)
            return f", {name} {a}" + (f" to {b}" if a != b else "")

        what = next(iter(priv)) if len(priv) == 1 else f"{len(priv)} rows"
        text = (f"Privacy spent ({what}, [privacy.json](../runs/{r['name']}/privacy.json)): unit "
                f"{_privacy_cell(sp0, 'unit')}, {_privacy_cell(sp0, 'relation')}"
                f"{span(eps, 'epsilon')}{span(dels, 'delta')}{span(rhos, 'rho')}.")
        return [text]
    out = ["Privacy spent (each row with its privacy unit and neighbouring relation):", "",
           "| name | unit | relation | epsilon | delta | rho |", "|---|---|---|---|---|---|"]
    for name, sp in priv.items():
        out.append(f"| {_md(name)} | {_privacy_cell(sp, 'unit')} | {_privacy_cell(sp, 'relation')} "
                   f"| {_md(sp.get('epsilon'))} | {_md(sp.get('delta'))} | {_md(sp.get('rho'))} |")
    return out


def _write_details(r: Mapping[str, Any], scan: Mapping[str, Any] | None) -> None:
    """``runs/<name>/details.md``: every row in full (statement, measured, target, reason), the
    privacy rows with their notes, the degenerate rows and the config (``delta: 0`` explained)."""
    lines = [f"# {r['name']}: details", "", f"Paper {r['paper']}. {r['description']}".rstrip(), ""]
    status, why = _run_status(r)
    lines += [f"Status: **{status}**" + (f" ({why})" if why else "") + ".", ""]
    own = [c for c in r["claims"] if isinstance(c, dict)]
    if own:
        lines += ["## Claims and formula checks", "", "| status | kind | id | statement | measured | target | reason |",
                  "|---|---|---|---|---|---|---|"]
        for c in own:
            lines.append(f"| {row_status(c)} | {row_kind(c)} | {_md(c.get('id'))} | {_md(c.get('statement'))} "
                         f"| {_md(c.get('measured'))} | {_md(c.get('target'))} | {_md(c.get('reason') or '')} |")
        lines.append("")
    if r["privacy"]:
        lines += ["## Privacy spent", "", "| name | unit | relation | epsilon | delta | rho | notes |",
                  "|---|---|---|---|---|---|---|"]
        for name, sp in r["privacy"].items():
            sp = sp if isinstance(sp, dict) else {"notes": sp}
            lines.append(f"| {_md(name)} | {_privacy_cell(sp, 'unit')} | {_privacy_cell(sp, 'relation')} "
                         f"| {_md(sp.get('epsilon'))} | {_md(sp.get('delta'))} | {_md(sp.get('rho'))} "
                         f"| {_md(sp.get('notes', '') or '')} |")
        lines.append("")
    if scan and scan.get("listed"):
        lines += ["## Degenerate rows", ""] + [f"- {x}" for x in scan["listed"]]
        lines += ([f"- ... {scan['more']} more"] if scan.get("more") else []) + [""]
    if r["tables"]:
        lines += ["Tables: " + ", ".join(f"[{t}]({t})" for t in r["tables"]), ""]
    lines += ["## Config", ""]
    if _delta_is_inverse_n2(r):
        lines += ["`delta: 0` means delta = 1/n^2 (n: training rows); the privacy rows give its value.", ""]
    lines += [f"```json\n{_compact_json(r['config'])}\n```"]
    if r["overrides"]:
        lines += ["", f"Overrides: `{json.dumps(r['overrides'], sort_keys=True)}`."]
    try:
        store.atomic_write_text(Path(r["dir"]) / "details.md", "\n".join(lines) + "\n")
    except OSError:  # a read-only run folder: the report still builds
        pass


def _timings(lines: list[str], runs: list[dict[str, Any]]) -> None:
    timed = [r for r in runs if isinstance(r["meta"].get("wall_seconds"), (int, float))]
    if not timed:
        return
    total = sum(r["meta"]["wall_seconds"] for r in timed)
    cpus = [r["meta"].get("cpu_seconds") for r in timed]
    cpu_total = f", CPU {_seconds(sum(cpus))}" if all(_is_number(c) for c in cpus) else ""
    lines += ["## Run times", ""]
    lines += _wrap(f"Wall and CPU (user + system) time per run as recorded in `meta.json` (total {_seconds(total)}"
                   f"{cpu_total}; XLA compiles, their seconds and the programs loaded from the persistent compilation "
                   "cache; chunks computed in this run and reused from an earlier one). Runs in one process share "
                   "compiled programs, so a run after another that compiled the same program compiles less.")
    lines += ["",
              "| experiment | size | status | wall | CPU | compiles | compile | cache loads | chunks computed "
              "| reused |",
              "|---|---|---|---|---|---|---|---|---|---|"]

    def opt(v: Any, fmt: Any = str) -> str:
        return fmt(v) if _is_number(v) else "n/a"

    for r in timed:
        m = r["meta"]
        chunks = m.get("chunks") or {}
        lines.append(f"| {r['name']} | {r['size']} | {_run_status(r)[0]} | {_seconds(m['wall_seconds'])} "
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


def _compact_json(config: Any) -> str:
    """A config dict as JSON with one top-level key per line (lists kept on one line)."""
    if not isinstance(config, dict) or not config:
        return json.dumps(config)
    items = [f"  {json.dumps(str(k))}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(config.items())]
    return "{\n" + ",\n".join(items) + "\n}"


def _anchor(name: str) -> str:
    """GitHub-style heading anchor of ``name``."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
