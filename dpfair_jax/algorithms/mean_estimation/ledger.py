"""The spend of the mean estimators: their zCDP ledgers (``accounting.ZcdpLedger``) and
:class:`PrivacySpend` records, the building blocks of :func:`~.estimator.spend` (lower level: use
``spend``)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy.relations import ADD_REMOVE, as_relation

from .groups import _check_relation, resolve_count_rho

__all__: list[str] = []


def _count_charge(relation: str, budget_rho: float, count_rho: float | None) -> float | None:
    c = resolve_count_rho(relation, float(budget_rho), count_rho)
    if c is not None:
        v.check_rho(c, "count_rho")
        c = float(c)
    return c


def _sizes_note(relation: str, count_rho: float | None) -> str:
    if count_rho is None:
        return ("group sizes exact and public (replace-one within a stratum; a record moving to "
                "another stratum is not covered)")
    how = ("add/remove: sizes always noised" if as_relation(relation) is ADD_REMOVE
           else "replace-one, a record may move across strata (count sensitivity sqrt 2)")
    return f"group sizes released as Gaussian noisy counts, count_rho = {count_rho:g} ({how})"


def _stratified_ledger(rhos: Sequence[float], num_groups: int, *, count_rho: float | None = None,
                      relation: str = "replace_one_within_group") -> acc.ZcdpLedger:
    """The zCDP ledger of one stratified COINPRESS run: one charge per step (each covers all
    ``num_groups`` disjoint groups at once: parallel composition, not ``num_groups`` charges),
    plus ``group_counts`` when sizes are released as noisy counts: whenever ``count_rho`` is given
    and, by default, under add/remove (:func:`resolve_count_rho`). Its total is global COINPRESS's
    ``sum(rhos)`` plus the count budget."""
    v.check_int("num_groups", num_groups, minimum=1)
    relation = _check_relation(relation)
    r = np.asarray(rhos, np.float64).ravel()
    v.check_rho(r, "rhos")
    ledger = acc.ZcdpLedger()
    for t, rt in enumerate(r):
        ledger.charge(f"coinpress_step_{t + 1} (parallel over {num_groups} groups)", float(rt))
    c = _count_charge(relation, math.fsum(r), count_rho)
    if c is not None:
        ledger.charge("group_counts", c)
    return ledger


def _stratified_spend(rhos: Sequence[float], num_groups: int, delta: float, *,
                       count_rho: float | None = None, relation: str = "replace_one_within_group"
                       ) -> acc.PrivacySpend:
    """:class:`~dpfair_jax.privacy.accounting.PrivacySpend` of a (stratified) COINPRESS run under
    ``relation`` (zCDP -> (eps, delta), CKS): ``sum(rhos)`` plus the count budget that the run
    spends (the add/remove default included)."""
    relation = _check_relation(relation)
    ledger = _stratified_ledger(rhos, num_groups, count_rho=count_rho, relation=relation)
    c = ledger.charges.get("group_counts")
    notes = f"parallel composition over {num_groups} disjoint strata; " + _sizes_note(relation, c)
    return ledger.to_spend(delta, relation=relation, notes=notes)


def _gaussian_spend(rho: float, delta: float, *, num_groups: int = 1,
                     count_rho: float | None = None, relation: str = "replace_one_within_group"
                     ) -> acc.PrivacySpend:
    """Spend of the clipped Gaussian means: ``rho`` (parallel over
    ``num_groups`` strata) plus the count budget the run spends (:func:`resolve_count_rho`)."""
    relation = _check_relation(relation)
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_rho(rho)
    ledger = acc.ZcdpLedger()
    ledger.charge(f"gaussian_means (parallel over {num_groups} groups)", float(rho))
    c = _count_charge(relation, float(rho), count_rho)
    if c is not None:
        ledger.charge("group_counts", c)
    notes = f"parallel composition over {num_groups} disjoint strata; " + _sizes_note(relation, c)
    return ledger.to_spend(delta, relation=relation, notes=notes)


def _laplace_spend(epsilon: float, delta: float, *, num_groups: int = 1,
                    count_rho: float | None = None, relation: str = "replace_one_within_group"
                    ) -> acc.PrivacySpend:
    """Spend of the clipped Laplace means.

    Replace-one within a group with public sizes: pure ``epsilon``-DP (``delta = 0``; ``rho = epsilon^2/2``
    recorded). With noisy counts (add/remove, or ``count_rho`` given): ``epsilon^2/2 + count_rho``
    zCDP, converted at ``delta`` (CKS).
    """
    relation = _check_relation(relation)
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_epsilon(epsilon)
    budget = 0.5 * float(epsilon) ** 2
    c = _count_charge(relation, budget, count_rho)
    if c is None:
        return acc.PrivacySpend(epsilon=float(epsilon), delta=0.0, rho=budget, relation=relation,
                                notes=f"pure epsilon-DP Laplace, parallel composition over "
                                      f"{num_groups} disjoint strata; " + _sizes_note(relation, None))
    ledger = acc.ZcdpLedger()
    ledger.charge(f"laplace_means (epsilon^2/2, parallel over {num_groups} groups)", budget)
    ledger.charge("group_counts", c)
    notes = f"parallel composition over {num_groups} disjoint strata; " + _sizes_note(relation, c)
    return ledger.to_spend(delta, relation=relation, notes=notes)


