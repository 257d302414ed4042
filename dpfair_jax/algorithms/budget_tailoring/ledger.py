"""Budget tailoring (paper 000): what a run spends (zCDP ledger, privacy records, conversions) and
the module's accounting interface: :func:`spend` (the spend of ``fit(key, data, hparams, config)``)
and :func:`calibrate` (``hparams`` whose spend meets an ``(epsilon, delta)`` target).

Privacy: :func:`privacy` states the spend of a run (``rho``-zCDP under ``Config.relation``) and
:func:`budget_ledger` itemises it into the charges of its releases. Epsilon is the paper's
conversion ``epsilon = rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke 2016, Prop. 1.3).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy.accounting import PrivacySpend
from dpfair_jax.privacy.relations import relation_name

from .core import Config, Hyperparams

__all__ = ["zcdp_to_epsilon", "epsilon_to_rho", "rho_for_epsilon", "BudgetLedger", "budget_ledger", "privacy",
           "spend", "calibrate"]


def zcdp_to_epsilon(rho: Any, delta: float) -> np.ndarray:
    """epsilon = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016, Prop. 1.3; paper section 2)."""
    v.check_rho(rho, allow_inf=True)
    v.check_delta(delta)
    rho = np.asarray(rho, dtype=np.float64)
    return rho + 2.0 * np.sqrt(rho * math.log(1.0 / delta))


def epsilon_to_rho(epsilon: Any) -> np.ndarray:
    """The paper's budget convention ``rho = epsilon^2 / 2`` (pure epsilon-DP => zCDP)."""
    v.check_epsilon(epsilon)
    return np.asarray(epsilon, dtype=np.float64) ** 2 / 2.0


def rho_for_epsilon(epsilon: float, delta: float) -> float:
    """The largest ``rho`` with ``zcdp_to_epsilon(rho, delta) <= epsilon``: the inverse of the
    paper's conversion, ``rho = (sqrt(L + epsilon) - sqrt(L))^2 = epsilon^2 / (sqrt(L + epsilon) +
    sqrt(L))^2`` with ``L = log(1/delta)`` (written the second way, without cancellation). The
    result is a float32 value (the precision the run uses), rounded down until the conversion is
    within ``epsilon``.

    Privacy: a ``rho``-zCDP run is then ``(epsilon, delta)``-DP (Bun & Steinke 2016, Prop. 1.3).
    Not to be confused with :func:`epsilon_to_rho` (the paper's budget grid ``epsilon^2 / 2``,
    the zCDP implied by pure ``epsilon``-DP, which is not ``(epsilon, delta)``-DP).
    """
    v.check_epsilon(epsilon)
    v.check_delta(delta)
    eps, log_inv = float(epsilon), math.log(1.0 / float(delta))
    rho = np.float32(eps * eps / (math.sqrt(log_inv + eps) + math.sqrt(log_inv)) ** 2)
    while rho > 0 and float(zcdp_to_epsilon(float(rho), delta)) > eps:
        rho = np.nextafter(rho, np.float32(0.0))
    if not rho > 0:
        raise ValueError(f"epsilon={epsilon!r} is too small for a float32 rho at delta={delta!r}.")
    return float(rho)


class BudgetLedger:
    """Named zCDP charges that must add up to a total (host side, float64, vectorised over runs).

    A private stand-in with the interface of ``dpfair_jax.privacy.accounting.ZcdpLedger``
    (``charge``, ``total``, ``assert_total``); charges may be arrays (one entry per run).
    ``relation`` names the neighbouring relation the charges hold under.
    """

    def __init__(self, relation: Any = "replace_one_within_group") -> None:
        self.relation = relation_name(relation)
        self.charges: dict[str, np.ndarray] = {}

    def charge(self, name: str, rho: Any) -> None:
        arr = np.asarray(rho, dtype=np.float64)
        if np.any(arr < 0) or np.any(np.isnan(arr)):
            raise ValueError(f"charge {name!r} must be >= 0, got {rho!r}.")
        self.charges[name] = self.charges.get(name, 0.0) + arr

    @property
    def total(self) -> np.ndarray:
        return sum(self.charges.values(), np.zeros(()))

    def assert_total(self, rho: Any, *, rtol: float = 1e-5) -> None:
        if not np.allclose(self.total, np.asarray(rho, np.float64), rtol=rtol, atol=0.0):
            raise AssertionError(f"ledger charges add up to {self.total}, not rho = {rho}.")


def budget_ledger(rho: Any, se: Any, *, config: Config = Config(), tau_fraction: float = 0.2,
                  count_fraction: float = 0.05) -> BudgetLedger:
    """Itemise a run's zCDP spend from the released allocation ``se`` ([..., K]).

    Under ``relation="add_remove"``: ``counts`` gets ``count_fraction * rho`` (the noisy group
    counts) and the stages share the rest; under ``"replace_one_within_group"`` the sizes are
    public and nothing is charged for them. Stage 1: ``X^T X`` and ``X^T y`` get ``tau_k/2`` each and each
    group's SE ``tau_k``, ``tau_k = tau/(K+1)``. Stage 2: per group ``mu s_k^2`` over the T
    iterations (split in halves between gradient and loss for Algorithm 2). The result should sum
    to ``rho`` (checked with ``assert_total``); with a wrong allocation (``sum s^2 != 1``) it does
    not. ``ledger.relation`` is ``config.relation``.
    """
    config.validate()
    v.check_rho(rho)
    se = np.asarray(se, np.float64)
    k = se.shape[-1]
    rho = np.asarray(rho, np.float64)
    led = BudgetLedger(config.relation)
    if config.method == "nonprivate":
        raise ValueError("method='nonprivate' spends no privacy budget; nothing to itemise.")
    rest = rho
    if config.relation == "add_remove":
        if not 0.0 < float(count_fraction) < 1.0:
            raise ValueError(f"count_fraction must lie in (0, 1), got {count_fraction!r}.")
        led.charge("counts", count_fraction * rho)
        rest = rho * (1.0 - count_fraction)
    if config.method == "dpse":
        tau = tau_fraction * rest
        tau_k = tau / (k + 1)
        led.charge("stage1/xtx", tau_k / 2)
        led.charge("stage1/xty", tau_k / 2)
        for j in range(k):  # host-side bookkeeping, one entry per group
            led.charge(f"stage1/se[{j}]", tau_k)
        mu = rest * (1.0 - tau_fraction)
    else:
        mu = rest
    if config.method == "pooled":
        led.charge("stage2/pooled_grad", mu)
        return led
    for j in range(k):
        share = mu * se[..., j] ** 2
        if config.fairness:
            led.charge(f"stage2/grad[{j}]", share / 2)
            led.charge(f"stage2/loss[{j}]", share / 2)
        else:
            led.charge(f"stage2/grad[{j}]", share)
    return led


def _privacy_notes(config: Config) -> str:
    if config.relation != "add_remove":
        rel = ("replace-one within a group: group membership and the sizes n_k are public, a "
               "record is replaced by another record of the same group (sensitivities 2 Delta, "
               "2 U_x U_y, sqrt(2) U_x^2; [0, B] sums B); a record moving to another group is "
               "not covered (the exact sizes differ: epsilon = inf)")
    else:
        rel = ("add/remove-one: the group sizes are released as noisy counts (Gaussian, "
               "sensitivity 1, count_fraction x rho of the budget) and used as denominators "
               "clamped to >= 1 (sensitivities Delta, U_x U_y, U_x^2; [0, B] sums B)")
    clip = ("" if config.method != "dpse" else
            "; stage-1 squared residuals clipped to [0, Delta^2], noise for Delta^2"
            if config.stage1_clip == "delta_sq" else
            "; stage-1 squared residuals clipped to [0, Delta] (Alg. 1 l. 17), noise for "
            "max(Delta, Delta^2)")
    return f"paper 000 {config.method}: rho-zCDP under {rel}{clip}"


def privacy(config: Config, rho: Any, delta: float = 1e-5):
    """What one run spends: ``rho`` (zCDP, everything included) and the implied ``(epsilon,
    delta)``, under ``config.relation``.

    Returns ``accounting.PrivacySpend`` with ``relation = config.relation`` and notes that say what
    is public (``"replace_one_within_group"``: group membership and sizes; no cross-group
    neighbour is covered) or paid for (add/remove: the noisy counts, inside ``rho``); the conversion is the paper's ``epsilon = rho + 2 sqrt(rho log
    1/delta)`` (Bun & Steinke 2016, Prop. 1.3).
    """
    config.validate()
    v.check_delta(delta)
    if config.method == "nonprivate":
        return PrivacySpend(epsilon=float("inf"), delta=delta, rho=float("inf"),
                            relation=config.relation, unit="example", accountant="zcdp",
                            notes="paper 000 non-private baseline: no guarantee")
    v.check_rho(rho)
    return PrivacySpend(epsilon=float(zcdp_to_epsilon(float(rho), delta)), delta=delta,
                        rho=float(rho), relation=config.relation, unit="example",
                        accountant="zcdp", notes=_privacy_notes(config))


def _check_sizes(sizes: Any) -> np.ndarray:
    """``sizes``: the per-group sizes ``n_k`` (a tuple or 1-D array of K >= 1 positive integers)."""
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.size < 1 or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"sizes must be the per-group sizes (a tuple or 1-D array of K >= 1 integers), "
                         f"got {sizes!r}.")
    if np.any(arr < 1) or np.any(arr != np.round(arr)):
        raise ValueError(f"sizes must be positive integers (the group sizes n_k), got {sizes!r}.")
    return arr.astype(np.int64)


def _check_target(target: Any) -> tuple[float, float]:
    try:
        epsilon, delta = target
    except (TypeError, ValueError):
        raise ValueError(f"target must be an (epsilon, delta) pair, got {target!r}.") from None
    v.check_epsilon(epsilon)
    d = v.as_float("delta", delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"target delta must lie in [0, 1), got {delta!r}.")
    return float(epsilon), d


def spend(config: Config, sizes: Any, hparams: Hyperparams) -> PrivacySpend:
    """The spend of ``fit(key, data, hparams, config)`` on data with group sizes ``sizes``:
    ``privacy(config, hparams.rho, config.delta)``, the numbers :func:`privacy` records.

    ``sizes``: the per-group sizes ``n_k`` (tuple or array of K ints). The spend does not depend on
    them (the run is ``rho``-zCDP whatever the sizes; under add/remove they are released as noisy
    counts inside ``rho``); they are checked for the common signature of the kit's algorithms.
    ``hparams.rho`` must be concrete (host accounting; not under ``jit``).

    Privacy: ``hparams.rho``-zCDP under ``config.relation``, stated as ``(epsilon, config.delta)``;
    ``method="nonprivate"`` has ``epsilon = inf``.
    """
    config.validate()
    _check_sizes(sizes)
    if isinstance(hparams.rho, jax.core.Tracer):
        raise ValueError("spend needs a concrete hparams.rho (host-side accounting); call it outside jit.")
    return privacy(config, hparams.rho, config.delta)


def calibrate(config: Config, sizes: Any, target: Any, *, hparams: Hyperparams | None = None
              ) -> Hyperparams:
    """``hparams`` (default ``Hyperparams()``) with ``rho`` set so that ``spend(config, sizes,
    result).epsilon <= target epsilon``, tight to float32 (:func:`rho_for_epsilon`).

    ``target = (epsilon, delta)`` with ``delta = config.delta`` (the delta :func:`spend` states;
    set ``Config(delta=...)``) and ``delta > 0``: a zCDP run has no pure-DP guarantee. The other
    fields of ``hparams`` are kept (the split of ``rho`` between the counts and the stages does
    not change the total). ``sizes`` as in :func:`spend`.

    Privacy: the returned run is ``(epsilon, delta)``-DP under ``config.relation``.
    """
    config.validate()
    _check_sizes(sizes)
    epsilon, delta = _check_target(target)
    if config.method == "nonprivate":
        raise ValueError("method='nonprivate' adds no noise and has no guarantee; nothing to calibrate.")
    if delta == 0.0:
        raise ValueError("target delta must be > 0: budget tailoring is rho-zCDP (Gaussian noise), "
                         "which gives no pure epsilon-DP guarantee.")
    if delta != config.delta:
        raise ValueError(f"target delta={delta!r} differs from config.delta={config.delta!r}, the delta "
                         "spend states epsilon at; pass Config(delta=...) with the target's delta.")
    base = Hyperparams() if hparams is None else hparams
    return base._replace(rho=rho_for_epsilon(epsilon, delta))
