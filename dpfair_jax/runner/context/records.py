"""What a run records: ``claims.json`` rows (claims, formula checks, skipped claims) and
``privacy.json`` records, written through :class:`~dpfair_jax.runner.context.RunContext`.

:class:`RunRecords` holds the context's recording methods (``add_claim``, ``add_verdict``,
``add_check``, ``skip_claim``, ``record_privacy``); the context inherits them and supplies
``claims``, ``privacy``, ``paper``, ``writes`` and ``workdir``. :mod:`dpfair_jax.runner.context`
re-exports the public names.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from dpfair_jax.runner import store
from dpfair_jax.runner.registry import normalize_paper

__all__ = ["RunRecords", "comparison", "CLAIM_KINDS", "CLAIM_STATUSES", "FORMULA_FAILURE", "RELATIONS"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")

#: Relations a privacy record may name (see docs/INTERFACES.md, ``PrivacySpend.relation``).
RELATIONS = ("add_remove", "replace_one", "replace_one_within_group")

#: Kinds of rows in ``claims.json``: measured claims and deterministic formula-consistency checks.
CLAIM_KINDS = ("claim", "formula")

#: Statuses of rows in ``claims.json``: the claim holds; it fails (for the paper's reason, with an
#: interval); the run is too small to see the paper's effect (``underpowered``: its interval contains
#: 0 and its minimum detectable effect exceeds the paper's, see :mod:`dpfair_jax.runner.verdict`); it
#: cannot be tested here (e.g. it rests on a method the kit has no port of); the kit's
#: implementation is a reconstruction the paper does not fully specify (its verdict is no evidence
#: for or against the paper); or this run could not check it (a grid cell or optional data set absent).
CLAIM_STATUSES = ("holds", "fails", "underpowered", "untestable", "reconstruction", "skipped")

#: The reason recorded for a failing formula check that gives none: what such a failure means.
FORMULA_FAILURE = ("a closed form or ledger of the kit disagrees with its independent evaluation: a coding "
                   "error in the kit, not a finding about the paper")


def comparison(value: Any, reference: Any, *, ci: Sequence[float] | None = None, level: float = 0.95,
               diff: Any = None, names: Sequence[str] | None = None) -> dict[str, Any]:
    """A ``measured`` value comparing ``value`` with ``reference``: ``{"value", "vs", "diff", "ci",
    "level", "names"}``. ``diff`` defaults to ``value - reference``; ``ci`` is the ``level``
    interval of the difference. The report prints it as ``0.124 vs 0.130 (diff -0.006, 95% CI
    [-0.010, -0.002])``."""
    out: dict[str, Any] = {"value": value, "vs": reference}
    if diff is None:
        try:
            diff = float(value) - float(reference)
        except (TypeError, ValueError):
            diff = None
    if diff is not None:
        out["diff"] = diff
    if ci is not None:
        lo, hi = (float(v) for v in ci)
        if not lo <= hi:
            raise ValueError(f"comparison: ci must be (low, high) with low <= high, got {tuple(ci)!r}.")
        out["ci"] = [lo, hi]
        out["level"] = float(level)
    if names is not None:
        out["names"] = [str(n) for n in names]
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name.startswith("."):
        raise ValueError(
            f"{kind} name {name!r} must be a non-empty string of letters, digits, '_', '-', '.' "
            "(it names a file)."
        )
    return name


class RunRecords:
    """The ``claims.json`` and ``privacy.json`` writers of :class:`~dpfair_jax.runner.context.RunContext`
    (a base class: the context supplies ``claims``, ``privacy``, ``paper``, ``writes``, ``workdir``)."""

    claims: list[dict[str, Any]]
    privacy: dict[str, Any]
    paper: str
    writes: bool
    workdir: Any

    def add_claim(
        self,
        id: str,  # noqa: A002 - the claims.json key
        statement: str,
        measured: Any,
        target: Any,
        passed: Any,
        paper: str | None = None,
        *,
        kind: str = "claim",
        status: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Record a check in ``claims.json`` (rewritten at once).

        ``measured`` and ``target`` are numbers, strings or small JSON-able structures (NaN is
        written as null; :meth:`comparison` builds a value-vs-reference record with an interval);
        ``passed`` (whether ``measured`` meets ``target``) is coerced to a bool (NaN: False).
        ``paper`` defaults to the experiment's. Ids must be unique within a run (over both kinds).

        ``kind``: ``"claim"`` (a statement measured by simulation or on data, one a wrong paper or
        a wrong implementation could fail) or ``"formula"`` (a deterministic consistency check of a
        closed form against an independent evaluation; :meth:`add_check`).

        ``status`` (:data:`CLAIM_STATUSES`): by default "holds" when ``passed``, else "fails".
        Give "untestable" (the claim cannot be tested here, e.g. it rests on a method the kit has no
        port of) or "reconstruction" (the kit's method is a reconstruction the paper does not fully
        specify) to label the row for what it is, whatever ``passed`` says. ``reason``: why the
        claim does not hold (the paper's reason, with its interval), or why it is untestable or a
        reconstruction; it may be given whatever the outcome and is kept on every row that does not
        hold. A claim that fails, or is labelled, without a reason raises ``ValueError`` naming
        it. The row's ``passed`` is true only for "holds"; ``target_met`` keeps the outcome of the
        measurement (``None`` for a skipped row).
        """
        return self._add_row(id, statement, measured, target, passed, paper, kind=kind, reason=reason,
                             status=status)

    @staticmethod
    def comparison(value: Any, reference: Any, *, ci: Sequence[float] | None = None, level: float = 0.95,
                   diff: Any = None, names: Sequence[str] | None = None) -> dict[str, Any]:
        """:func:`comparison`: a ``measured`` value ``{"value", "vs", "diff", "ci", "level"}``."""
        return comparison(value, reference, ci=ci, level=level, diff=diff, names=names)

    def add_verdict(
        self,
        id: str,  # noqa: A002 - the claims.json key
        statement: str,
        verdict: Any,
        paper: str | None = None,
        *,
        reason: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record a claim decided by :mod:`dpfair_jax.runner.verdict` (the one rule for every claim):
        ``measured`` is the verdict's record (effect, interval, detectable effect, the paper's effect
        and where it comes from), ``target`` the paper's effect, and the status the verdict's
        ("holds", "fails" or "underpowered"). ``reason`` is prepended to the verdict's own reason
        (e.g. which readings or settings it concerns). ``extra``: further JSON-able entries of
        ``measured`` (e.g. the replicates the claim would need); they cannot replace the verdict's."""
        from dpfair_jax.runner.verdict import Verdict

        if not isinstance(verdict, Verdict):
            raise ValueError(f"claim {id!r}: verdict must be a runner.verdict.Verdict, got {type(verdict).__name__}.")
        parts = [t.strip() for t in (reason, verdict.reason, verdict.note) if isinstance(t, str) and t.strip()]
        measured = verdict.as_measured()
        if extra:
            clash = sorted(set(extra) & set(measured))
            if clash:
                raise ValueError(f"claim {id!r}: extra cannot replace the verdict's entries {clash}.")
            measured.update(extra)
        return self._add_row(id, statement, measured, verdict.paper.as_dict(), verdict.passed, paper,
                             kind="claim", reason="; ".join(parts) or None, status=verdict.status,
                             keep_reason=True)

    def add_check(
        self,
        id: str,  # noqa: A002 - the claims.json key
        statement: str,
        measured: Any,
        target: Any,
        passed: Any,
        paper: str | None = None,
        *,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Record a formula-consistency check (``kind="formula"``): a closed form or ledger of the
        kit against an independent evaluation (a hand-written formula, SciPy, another library).
        These are true unless a formula is mis-coded; the report lists them apart from claims. A
        failing check without a ``reason`` gets :data:`FORMULA_FAILURE`."""
        return self._add_row(id, statement, measured, target, passed, paper, kind="formula", reason=reason)

    def skip_claim(
        self,
        id: str,  # noqa: A002 - the claims.json key
        statement: str,
        reason: str,
        *,
        target: Any = None,
        paper: str | None = None,
        kind: str = "claim",
    ) -> dict[str, Any]:
        """Record a claim that this run could not check (its grid cell, data set or part is
        absent): ``passed`` False, ``status`` "skipped", ``measured`` null and ``reason`` saying
        why. A claim that depends on a cell is reported this way, never left out."""
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"claim {id!r}: a skipped claim needs a non-empty reason.")
        return self._add_row(id, statement, None, target, False, paper, kind=kind, reason=reason,
                             status="skipped")

    def _add_row(self, id: Any, statement: Any, measured: Any, target: Any, passed: Any,  # noqa: A002
                 paper: str | None, *, kind: str, reason: str | None,
                 status: str | None = None, keep_reason: bool = False) -> dict[str, Any]:
        if not isinstance(id, str) or not id.strip():
            raise ValueError("claim id must be a non-empty string, e.g. 'p000_dpse_beats_dpnose'.")
        if any(c["id"] == id for c in self.claims):
            raise ValueError(f"claim id {id!r} was already added in this run; use a distinct id.")
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError(f"claim {id!r}: statement must be a non-empty string.")
        if kind not in CLAIM_KINDS:
            raise ValueError(f"claim {id!r}: kind must be one of {', '.join(CLAIM_KINDS)}, got {kind!r}.")
        if reason is not None and not isinstance(reason, str):
            raise ValueError(f"claim {id!r}: reason must be a string or None, got {type(reason).__name__}.")
        if status is not None and status not in CLAIM_STATUSES:
            raise ValueError(f"claim {id!r}: status must be one of {', '.join(CLAIM_STATUSES)}, got {status!r}.")
        paper = self.paper if paper is None else normalize_paper(paper, f"claim {id!r} paper")
        try:
            ok = bool(passed)
        except Exception:  # noqa: BLE001 - e.g. a multi-element array
            raise ValueError(f"claim {id!r}: passed must be a single boolean, got {passed!r}.") from None
        if isinstance(passed, float) and math.isnan(passed):
            ok = False
        if status is None:
            status = "holds" if ok else "fails"
        elif status == "holds" and not ok:
            raise ValueError(f"claim {id!r}: status 'holds' with passed=False; a claim holds only when its "
                             "measurement meets the target.")
        elif status == "fails" and ok:
            raise ValueError(f"claim {id!r}: status 'fails' with passed=True; give status='untestable' or "
                             "'reconstruction' (with a reason) to label a row whose measurement meets its target.")
        reason = reason.strip() if isinstance(reason, str) and reason.strip() else None
        if status != "holds" and reason is None:
            if kind == "formula" and status == "fails":
                reason = FORMULA_FAILURE
            else:
                what = ("fails (measured " + _short(store.to_jsonable(measured)) + ", target "
                        + _short(store.to_jsonable(target)) + ")") if status == "fails" else f"is {status!r}"
                raise ValueError(
                    f"claim {id!r} {what} but gives no reason: pass reason='...' saying why (the paper's reason, "
                    "with its interval), or status='untestable'/'reconstruction' with a reason.")
        claim = {
            "id": id,
            "paper": paper,
            "statement": statement,
            "measured": store.to_jsonable(measured),
            "target": store.to_jsonable(target),
            "passed": status == "holds",
            "kind": kind,
            "status": status,
            "reason": None if status == "holds" and not keep_reason else reason,
            "target_met": None if status == "skipped" else ok,
        }
        self.claims.append(claim)
        if self.writes:
            store.atomic_write_json(self.workdir / "claims.json", self.claims)
        return claim

    def record_privacy(self, name: str, spend: Any, *, not_covered: str | None = None) -> dict[str, Any]:
        """Record what the run spent under ``name`` in ``privacy.json``.

        ``spend`` is a ``PrivacySpend`` (anything with ``to_dict()``) or a dict with at least
        ``relation`` ("add_remove", "replace_one" or "replace_one_within_group": one record replaced
        by another of the same group, group sizes fixed), ``unit`` (the privacy unit, one of
        ``privacy.accounting.UNITS``: "example", "sensitive_attribute", ...) and one of
        ``epsilon``/``rho``.
        ``not_covered`` names what the study computed from private data outside the spend (e.g.
        standardization statistics); it is appended to the record's ``notes`` and kept under
        ``not_covered``.
        """
        _check_name("privacy record", name)
        record = store.to_jsonable(spend)
        if isinstance(record, dict) and not_covered:
            record = dict(record, not_covered=str(not_covered))
            record["notes"] = "; ".join(x for x in (record.get("notes") or "", f"NOT covered: {not_covered}") if x)
        if not isinstance(record, dict):
            raise ValueError(
                f"record_privacy({name!r}, ...) needs a PrivacySpend or a dict, got {type(spend).__name__}."
            )
        relation = record.get("relation")
        if relation not in RELATIONS:
            raise ValueError(
                f"record_privacy({name!r}): 'relation' must be one of {', '.join(RELATIONS)} "
                f"(the neighbouring relation), got {relation!r}."
            )
        if record.get("epsilon") is None and record.get("rho") is None:
            raise ValueError(f"record_privacy({name!r}): give 'epsilon' (with 'delta') or 'rho'.")
        from dpfair_jax.privacy.accounting import UNITS

        if record.get("unit") not in UNITS:
            raise ValueError(f"record_privacy({name!r}): 'unit' must be one of {', '.join(UNITS)} (what one "
                             f"neighbouring change adds, removes or replaces), got {record.get('unit')!r}.")
        self.privacy[name] = record
        if self.writes:
            store.atomic_write_json(self.workdir / "privacy.json", self.privacy)
        return record
