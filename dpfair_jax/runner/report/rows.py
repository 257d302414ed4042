"""Claim rows: kind and status (:func:`row_kind`, :func:`row_status`), counts, why a claim was
skipped (:func:`skip_kind`) and a run's status (``_run_status``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Row statuses in report order (as ``context.CLAIM_STATUSES``).
STATUSES = ("holds", "fails", "underpowered", "untestable", "reconstruction", "skipped")

_LEGACY = {"passed": "holds", "failed": "fails"}


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
    parts += [f"{counts[s]} {'reconstruction' if s == 'reconstruction' and counts[s] == 1 else words[s]}"
              for s in ("underpowered", "untestable", "reconstruction") if counts[s]]
    parts.append(f"{counts['skipped']} skipped")
    return ", ".join(parts)


def _mark(status: str) -> str:
    return "**fails**" if status == "fails" else status


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
_SKIP_WORD_ONE = {"grid": "grid cell this size leaves out", "data": "missing data or package", "other": "other"}


def _skip_counts(rows: list[Mapping[str, Any]]) -> dict[str, int]:
    out = {"grid": 0, "data": 0, "other": 0}
    for c in rows:
        if row_status(c) == "skipped":
            out[skip_kind(c.get("reason"))] += 1
    return out


def _skip_text(kinds: Mapping[str, int]) -> str:
    """``"6 grid cells this size leaves out, 1 missing data or packages"``."""
    return ", ".join(f"{n} {(_SKIP_WORD_ONE if n == 1 else _SKIP_WORDS)[k]}" for k, n in kinds.items() if n) or "none"


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
