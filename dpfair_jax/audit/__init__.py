"""dpfair_jax.audit: empirical privacy auditing.

* :mod:`~dpfair_jax.audit.lower_bounds`: epsilon lower bounds from attack outcomes
  (Clopper-Pearson, threshold selection by split or Bonferroni, one-run auditing of Steinke,
  Nasr and Jagielski 2023).
* :mod:`~dpfair_jax.audit.games`: distinguishing games as one compiled program and audit rows;
  the game protocol typed (:class:`AuditGame`, :class:`GameModule`, :class:`GameBuilder`).
* :mod:`~dpfair_jax.audit.sum_audits`: Gaussian and Laplace mechanisms on a clipped sum with a
  canary, with planted bugs that the audits must catch.
* :mod:`~dpfair_jax.audit.fit_spend`: :class:`FitSpendGame`, a game on an algorithm's public
  ``fit`` whose claim is its ``spend``, and :func:`plant` (planted bugs as hparams transforms).
* :mod:`~dpfair_jax.audit.mechanism_audits`: one loop over the games of every algorithm of
  :mod:`dpfair_jax.algorithms` (each a :class:`FitSpendGame` on its ``fit`` / ``spend``; the
  scenarios in ``audit/*_games.py``) and of the privacy primitives no algorithm wraps
  (``primitive_games``: group-weighted aggregation), each with planted bugs.
* :mod:`~dpfair_jax.audit.study_games`: the public tradeoff study under the sensitive-attribute
  unit, on neighbours that differ in one ``s_i`` (a 0 claim checked as identical releases, and a
  lower bound over replicates).

:func:`run_audit` is what ``dpfair audit`` calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpfair_jax.audit.fit_spend import FitSpendGame, plant
from dpfair_jax.audit.games import (
    AUDIT_COLUMNS,
    AuditGame,
    GameBuilder,
    GameModule,
    GameResult,
    audit_mechanism,
    run_game,
)
from dpfair_jax.audit.lower_bounds import (
    ScoreBound,
    clopper_pearson,
    epsilon_lower_bound_from_counts,
    epsilon_lower_bound_from_scores,
    one_run_audit_from_scores,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from dpfair_jax.audit.mechanism_audits import (
    FAMILIES,
    FAMILY_BUGS,
    audit_family,
    audit_family_variants,
    mechanism_audit_suite,
)
from dpfair_jax.audit.study_games import (
    attribute_lower_bound,
    attribute_neighbour,
    tradeoff_attribute_game,
    zero_claim_check,
)
from dpfair_jax.audit.sum_audits import BUGS, audit_clipped_sum, audit_suite, clipped_sum_mechanism

__all__ = [
    "AUDIT_COLUMNS",
    "AuditGame",
    "BUGS",
    "FAMILIES",
    "FAMILY_BUGS",
    "FitSpendGame",
    "GameBuilder",
    "GameModule",
    "GameResult",
    "ScoreBound",
    "attribute_lower_bound",
    "attribute_neighbour",
    "audit_clipped_sum",
    "audit_family",
    "audit_family_variants",
    "audit_mechanism",
    "audit_suite",
    "clipped_sum_mechanism",
    "clopper_pearson",
    "mechanism_audit_suite",
    "epsilon_lower_bound_from_counts",
    "epsilon_lower_bound_from_scores",
    "one_run_audit_from_scores",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
    "plant",
    "run_audit",
    "run_game",
    "tradeoff_attribute_game",
    "zero_claim_check",
]


def run_audit(
    quick: bool = False, out: str | Path | None = None, *, seed: int = 0, mechanisms: bool = False,
    families: tuple[str, ...] | None = None,
) -> Any:
    """Run :func:`audit_suite` (2,000 trials per world when ``quick``, else 50,000) and return a
    pandas DataFrame of audit rows; with ``out``, also write ``audit.csv`` and ``audit.json`` there.

    ``mechanisms=True`` appends :func:`mechanism_audit_suite` (every algorithm's games and the
    primitives'; sizes in ``mechanism_audits.SUITE_TRIALS``). ``families`` (names of
    ``mechanism_audits.FAMILIES``) runs only those mechanism families and skips the clipped-sum
    audits; each family's key depends on its name only, so its rows equal those of a whole run.
    Rows share the columns :data:`AUDIT_COLUMNS` (the mechanism rows add ``relation``).
    """
    import jax
    import pandas as pd

    trials = 2_000 if quick else 50_000
    if families is not None:
        families = tuple(families)
        if not families:
            raise ValueError("families must name at least one mechanism family.")
        rows = mechanism_audit_suite(jax.random.fold_in(jax.random.key(seed), 1), quick=quick, families=families)
    else:
        rows = audit_suite(jax.random.key(seed), num_trials=trials)
        if mechanisms:
            rows += mechanism_audit_suite(jax.random.fold_in(jax.random.key(seed), 1), quick=quick)
    df = pd.DataFrame(rows)
    if out is not None:
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        df.to_csv(path / "audit.csv", index=False)
        (path / "audit.json").write_text(json.dumps(rows, indent=2) + "\n")
    return df
