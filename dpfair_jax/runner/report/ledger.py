"""Privacy spent as the report states it (one line, or a table naming each row's unit and
neighbouring relation) and each run's ``details.md`` (every row in full, the privacy rows with their
notes, the config)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpfair_jax.runner import store
from dpfair_jax.runner.report.format import _compact_json, _is_number, _md, format_number
from dpfair_jax.runner.report.rows import _run_status, row_kind, row_status

_UNITS = {"example": "example (one record)", "sensitive_attribute": "sensitive attribute only",
          "group_member": "group member", "user": "user (all of one user's records)"}


_RELATIONS = {"add_remove": "add/remove", "replace_one": "replace-one",
              "replace_one_within_group": "replace-one within a group (sizes fixed; not across groups)"}


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


def _privacy_cell(sp: Mapping[str, Any], key: str) -> str:
    value = sp.get(key)
    if key == "unit":
        return _UNITS.get(value, str(value)) if value else "**not recorded**"
    if key == "relation":
        return _RELATIONS.get(value, str(value)) if value else "**not recorded**"
    return _md(value)


def _delta_is_inverse_n2(r: Mapping[str, Any]) -> bool:
    """Config ``delta: 0`` while every recorded spend has a positive delta: the study's default 1/n^2."""
    cfg = r.get("config") or {}
    if not (isinstance(cfg, Mapping) and _is_number(cfg.get("delta")) and float(cfg["delta"]) == 0.0):
        return False
    deltas = [sp.get("delta") for sp in (r.get("privacy") or {}).values() if isinstance(sp, Mapping)]
    return bool(deltas) and all(_is_number(d) and float(d) > 0 for d in deltas)


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
