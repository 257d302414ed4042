"""The report's sections: the size paragraph, a paper's heading and citation, a run's block (status,
counts, privacy, claims table, figures) and the run times."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner.papers import PAPERS, citation
from dpfair_jax.runner.report.format import (
    _MAX_LINE,
    _anchor,
    _clip,
    _is_number,
    _md,
    _seconds,
    _statement,
    _first_sentence,
    _wrap,
    format_short,
    format_target,
)
from dpfair_jax.runner.report.ledger import _delta_is_inverse_n2, _privacy_lines
from dpfair_jax.runner.report.rows import (
    _count_text,
    _counts,
    _mark,
    _run_status,
    _skip_counts,
    _skip_text,
    row_kind,
    row_status,
    skip_kind,
)
from dpfair_jax.runner.report.runs import _page_link

#: the longest note below a claims table (a longer one is cut; details.md has it whole)
_MAX_NOTE = 700

#: abbreviations and terms a reader meets in the report: (pattern, text); only those present are listed
_GLOSSARY = (
    (r"\bDP-SGD\b", "DP-SGD: differentially private SGD (per-example gradients clipped, summed, noised)"),
    (r"\bDP-FERMI\b", "DP-FERMI: paper 004's method (the ERMI regularizer by noisy stochastic gradient "
                      "descent-ascent)"),
    (r"\bERMI\b", "ERMI: exponential Renyi mutual information between predictions and the sensitive attribute"),
    (r"\bPF-LDs?\b", "PF-LD: private and fair learning by Lagrangian duality (Tran, Fioretto, Van Hentenryck 2021)"),
    (r"\bdp_violation\b|\bDP violation|demographic parity", "DP violation (dp_violation): demographic-parity gap "
     "(DP alone, as in 'Adult DP', is demographic parity; DP- in a method's name is differential privacy)"),
    (r"\beo_violation\b|\bEO\b|equalized odds", "EO (eo_violation): equalized-odds gap"),
    (r"\bR_clip\b|R_a\^clip|\bR_a\b", "R_a, R_clip: group a's excessive risk, its clipping part (paper 001)"),
    (r"\bpsi\b|\bpsi_a\b", "psi_a: the Hessian part of R_a^clip (paper 001, Fig 10)"),
    (r"\bTr\(H|Hessian trace", "Tr(H_a): the trace of group a's loss Hessian (Hutchinson: its randomized estimate)"),
    (r"\bvs C\b|\bC=|clip norm", "C: the per-example gradient clip norm"),
    (r"\beps\b|\bepsilon\b", "epsilon (eps), delta: the privacy budget; delta 1/n^2 when a config says 0"),
    (r"add/remove|replace-one", "add/remove, replace-one: neighbouring data sets differ by one record added or "
     "removed, or one record replaced"),
    (r"\bunit example\b", "unit: what one privacy unit protects (example: a whole record)"),
    (r"\blambda\b", "lambda: the fairness weight (0: no fairness term)"),
    (r"\bApp\. ", "App.: the paper's appendix"),
    (r"\bCI\b", "CI: confidence interval"),
)


def _terms_lines(text: str) -> list[str]:
    """A "Terms" paragraph naming the abbreviations of :data:`_GLOSSARY` that ``text`` uses."""
    import re

    used = [t for pattern, t in _GLOSSARY if re.search(pattern, text)]
    return (_wrap("Terms: " + "; ".join(used) + ".", 198) + [""]) if used else []


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
    said: set[str] = set()  # a reason why stored results predate the code, given once per paper
    for r in runs:
        _run_block(lines, r, scans.get(r["name"]), report_dir, said)


def _run_block(lines: list[str], r: dict[str, Any], scan: Mapping[str, Any] | None, report_dir: Path,
               said: set[str] | None = None) -> None:
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
    if r.get("predates"):
        seen = said is not None and r["predates"] in said
        parts.append("**Stored results that predate the current code**" + (" (as above)." if seen else
                     f": {r['predates'].rstrip('.')}."))
        if said is not None:
            said.add(r["predates"])
    parts.append(f"Full rows: [details.md]({folder}/details.md).")
    lines.append(f"### {name}")
    lines += _wrap(" ".join(p for p in parts if p), 198)
    if len(privacy) > 1:
        lines += [""] + privacy
    table = own_claims + [c for c in own_checks if row_status(c) != "holds"]
    if table:
        lines += ["", "| claim | paper | measured [95% CI] | status | reason |", "|---|---|---|---|---|"]
        notes: list[str] = []
        lines += [_claim_row(c, notes) for c in table]
        if notes:  # the statements and reasons the table cut, in full
            lines.append("")
            for note in notes:
                lines += _wrap(f"- {note}", 198)
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
    lines += [""] + figure_lines + ([""] if figure_lines else [])


def _claim_row(c: Mapping[str, Any], notes: list[str] | None = None) -> str:
    """One table row: claim (statement, cut), paper's number, measured [interval], status, reason; at most
    :data:`_MAX_LINE` characters (the reason is cut first). When the statement or the reason's first
    sentence is cut, the row's reason ends with a note number ``[n]`` and ``notes`` gets the full
    statement and reason (the run block lists them below the table)."""
    status = row_status(c)
    mark = _mark(status) + (" (formula)" if row_kind(c) == "formula" else "")
    reason = str(c.get("reason") or ("" if status == "holds" else "no reason recorded"))
    if status == "skipped":
        reason = {"grid": "left out at this size: ", "data": "missing data: "}.get(skip_kind(reason), "") + reason
    measured = "n/a" if status == "skipped" else format_short(c.get("measured"))
    statement, first = " ".join(str(c.get("statement") or "").split()), " ".join(_first_sentence(reason).split())
    claim_cell = _clip(_statement(statement), 60)
    cells = [_md(claim_cell), _md(_clip(format_target(c.get("target")), 30)), _md(_clip(measured, 64)), mark]
    head = "| " + " | ".join(cells) + " | "
    n = len(notes) + 1 if notes is not None else 0
    room = max(20, _MAX_LINE - len(head) - 2 - len(f" [{n}]"))
    cell = _clip(first, room)
    if notes is None or (cell == first and claim_cell == statement):
        return head + _md(cell) + " |"
    note = f"[{n}] Claim: {statement.rstrip('.')}." + (f" Reason: {first.rstrip('.')}." if first else "")
    notes.append(note if len(note) <= _MAX_NOTE else _clip(note, _MAX_NOTE) + " (in full in details.md)")
    return head + (f"{_md(cell)} [{n}]" if cell else f"[{n}]") + " |"


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
