"""Degenerate training runs recorded in a run's tables, for the report.

A trained classifier is *degenerate* when it predicts one label for every test example
(``constant_predictions``: its demographic-parity and equalized-odds violations are 0 for a trivial
reason) or when its test error is at or above the base-rate error, the error of always predicting
the majority label (``at_base_rate``, within the tolerance of the study that flags it): it learned
nothing usable, and a fairness comparison that includes it rewards the trivial classifier.
``dpfair_jax.fairness.evaluate`` returns these flags per model; the paper-004
tradeoff tables carry ``degenerate`` and ``constant`` per row.

:func:`scan_run` reads every CSV table of a run directory that has a boolean ``degenerate`` column
and returns the counts and the degenerate rows; :func:`claim_note` is the note the report appends
to each claim of such a run and :func:`report_lines` the report's "Degenerate runs" section.
Reading CSVs only (no pandas, no JAX), so the report stays cheap.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["EXPLANATION", "ID_COLUMNS", "scan_run", "claim_note", "report_lines"]

#: What a degenerate run is, as the report states it.
EXPLANATION = (
    "A run is degenerate when its classifier predicts one label for every test example (constant "
    "predictions: its DP and EO violations are 0 for a trivial reason) or its test error is at or above the "
    "base-rate error, the error of always predicting the majority label, less a tolerance (at base rate; "
    "0.005 in the tradeoff studies, one standard error of the base rate in fairness.evaluate, so an error "
    "slightly below the base rate can be flagged): it learned nothing usable, so a fairness comparison that "
    "includes it rewards a trivial classifier. A run with degenerate rows says so above its claims table "
    "(the run's rows, not necessarily the rows a claim's verdict turned on); the rows are listed in its "
    "details.md.")

#: Columns that name a row (the grid point of a training run), in display order.
ID_COLUMNS = ("method", "fairness", "cell0_group", "epsilon", "lam", "replicate", "seed")

_TRUE = {"true", "1", "1.0"}
_FALSE = {"false", "0", "0.0"}


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    return True if v in _TRUE else False if v in _FALSE else None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _describe(row: Mapping[str, str]) -> str:
    """One degenerate row: its grid point, error and base-rate error, and which flag."""
    parts = [f"{c} {row[c]}" for c in ID_COLUMNS if row.get(c) not in (None, "")]
    err, base = _number(row.get("error")), _number(row.get("base_error"))
    constant = _flag(row.get("constant_predictions", row.get("constant")))
    why = []
    why.append("constant predictions" if constant else "at base rate")
    if err is not None:
        why.append(f"error {err:.3f}" + (f" vs base rate {base:.3f}" if base is not None else ""))
    return ", ".join(parts) + (": " if parts else "") + ", ".join(why)


def scan_run(run_dir: str | os.PathLike, *, max_listed: int = 12) -> dict[str, Any] | None:
    """Degenerate rows in the CSV tables of ``run_dir`` that have a boolean ``degenerate`` column.

    Returns None when no table has such a column, else ``{"rows", "degenerate", "constant",
    "at_base" (degenerate rows without constant predictions: at the base rate), "tables": {name: (degenerate, rows)}, "by_method": {method: (degenerate, rows)},
    "listed": [text of up to max_listed rows], "more": int}``. Tables whose ``degenerate`` column
    is not boolean (e.g. a mean over rows) are left out.
    """
    total = degen = constant = at_base = 0
    tables: dict[str, tuple[int, int]] = {}
    by_method: dict[str, list[int]] = {}
    listed: list[str] = []
    more = 0
    for path in sorted(Path(run_dir).glob("*.csv")):
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        if not rows or "degenerate" not in rows[0]:
            continue
        flags = [_flag(r.get("degenerate")) for r in rows]
        if any(f is None for f in flags):
            continue
        n_deg = sum(flags)
        tables[path.stem] = (n_deg, len(rows))
        total += len(rows)
        degen += n_deg
        for r, f in zip(rows, flags):
            if "method" in r:
                counts = by_method.setdefault(r["method"], [0, 0])
                counts[0] += int(f)
                counts[1] += 1
            if not f:
                continue
            c = bool(_flag(r.get("constant_predictions", r.get("constant"))))
            constant += int(c)
            at_base += int(not c)
            if len(listed) < max_listed:
                listed.append(f"{path.stem}: {_describe(r)}")
            else:
                more += 1
    if not tables:
        return None
    return {"rows": total, "degenerate": degen, "constant": constant, "at_base": at_base, "tables": tables,
            "by_method": {m: tuple(v) for m, v in by_method.items()}, "listed": listed, "more": more}


def claim_note(scan: Mapping[str, Any] | None, anchor: str = "degenerate-runs") -> str:
    """The note for a claim measured on a run with degenerate rows ('' when it has none)."""
    if not scan or not scan.get("degenerate"):
        return ""
    return (f"rests on a run with {scan['degenerate']} of {scan['rows']} rows degenerate "
            f"([degenerate runs](#{anchor}))")


def report_lines(flagged: list[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
    """The report's "Degenerate runs" section from ``(run name, its anchor, scan_run result)`` of
    every run with flagged tables: a count per run (by method where the table has one), then the
    degenerate rows of each run. Empty when no run has flagged tables."""
    if not flagged:
        return []

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["## Degenerate runs", "", EXPLANATION, "",
             "| experiment | degenerate rows | constant predictions | at base rate | by method |",
             "|---|---|---|---|---|"]
    for name, anchor, sc in flagged:
        by = ", ".join(f"{m} {d}/{n}" for m, (d, n) in sc["by_method"].items()) or "n/a"
        lines.append(f"| [{name}](#{anchor}) | {sc['degenerate']} of {sc['rows']} | {sc['constant']} "
                     f"| {sc['at_base']} | {cell(by)} |")
    lines.append("")
    listed = [(name, sc) for name, _, sc in flagged if sc["degenerate"]]
    for name, sc in listed:
        lines.append(f"- `{name}`: " + "; ".join(cell(t) for t in sc["listed"])
                     + (f"; and {sc['more']} more" if sc["more"] else "") + ".")
    return lines + ([""] if listed else [])
