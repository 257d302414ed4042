"""Budget tailoring (paper 000): what a run spends and the module's accounting interface:
:func:`spend` (the spend of ``fit(key, data, hparams, config)``), :func:`calibrate` (``hparams``
whose spend meets an ``(epsilon, delta)`` target) and :func:`budget_ledger` (the charges of a
run's releases, a :class:`~dpfair_jax.privacy.accounting.ZcdpLedger`).

Privacy: a run is ``rho``-zCDP under ``Config.relation``; epsilon is the paper's conversion
``epsilon = rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke 2016, Prop. 1.3:
``accounting.zcdp_to_dp(..., method="bun_steinke")``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax._validation import is_traced
from dpfair_jax.privacy.accounting import PrivacySpend, ZcdpLedger, calibration_target, zcdp_to_dp
from dpfair_jax.privacy.zcdp_noise import float32_rho_for_epsilon

from .core import Config, Hyperparams

__all__ = ["budget_ledger", "spend", "calibrate"]

#: The paper's zCDP -> (epsilon, delta) conversion (Bun & Steinke 2016, Prop. 1.3; paper Sec. 2).
CONVERSION = "bun_steinke"


def budget_ledger(rho: Any, se: Any, *, config: Config = Config(), tau_fraction: float = 0.2,
                  count_fraction: float = 0.05) -> ZcdpLedger:
    """Itemise a run's zCDP spend from the released allocation ``se`` ([..., K]).

    Under ``relation="add_remove"``: ``counts`` gets ``count_fraction * rho`` (the noisy group
    counts) and the stages share the rest; under ``"replace_one_within_group"`` the sizes are
    public and nothing is charged for them. Stage 1: ``X^T X`` and ``X^T y`` get ``tau_k/2`` each and each
    group's SE ``tau_k``, ``tau_k = tau/(K+1)``. Stage 2: per group ``mu s_k^2`` over the T
    iterations (split in halves between gradient and loss for Algorithm 2). The result should sum
    to ``rho`` (checked with ``assert_total``); with a wrong allocation (``sum s^2 != 1``) it does
    not (``assert_total(rho, rtol=...)`` with a tolerance for a float32 allocation). The charges
    hold under ``config.relation``; ``ledger.charges`` itemises them (arrays for an array ``rho``).
    """
    config.validate()
    v.check_rho(rho)
    se = np.asarray(se, np.float64)
    k = se.shape[-1]
    rho = np.asarray(rho, np.float64)
    led = ZcdpLedger()
    if config.method == "nonprivate":
        raise ValueError("method='nonprivate' spends no privacy budget; nothing to itemise.")
    rest = rho
    if config.noisy_counts:
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
    if not config.noisy_counts:
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


def _spend_of(config: Config, rho: Any, delta: float) -> PrivacySpend:
    """``rho`` (zCDP, everything included) and the implied ``(epsilon, delta)`` under
    ``config.relation``, with notes that say what is public or paid for."""
    if config.method == "nonprivate":
        return PrivacySpend(epsilon=float("inf"), delta=delta, rho=float("inf"),
                            relation=config.relation, unit="example", accountant="zcdp",
                            notes="paper 000 non-private baseline: no guarantee")
    v.check_rho(rho, allow_inf=True)
    if float(rho) == float("inf"):
        return PrivacySpend(epsilon=float("inf"), delta=delta, rho=float("inf"),
                            relation=config.relation, unit="example", accountant="zcdp",
                            notes=f"paper 000 {config.method} at rho = inf: no noise, no guarantee")
    return PrivacySpend(epsilon=float(zcdp_to_dp(float(rho), delta, method=CONVERSION)), delta=delta,
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


def spend(config: Config, sizes: Any, hparams: Hyperparams) -> PrivacySpend:
    """The spend of ``fit(key, data, hparams, config)`` on data with group sizes ``sizes``.

    ``sizes``: the per-group sizes ``n_k`` (tuple or array of K ints). The spend does not depend on
    them (the run is ``rho``-zCDP whatever the sizes; under add/remove they are released as noisy
    counts inside ``rho``); they are checked for the common signature of the kit's algorithms.
    ``hparams.rho`` must be concrete (host accounting; not under ``jit``).

    Privacy: ``hparams.rho``-zCDP under ``config.relation`` (group membership and sizes public
    under ``"replace_one_within_group"``; noisy counts paid for under ``"add_remove"``), stated as
    ``(epsilon, config.delta)`` by the paper's conversion; ``method="nonprivate"`` has
    ``epsilon = inf``.
    """
    config.validate()
    _check_sizes(sizes)
    if is_traced(hparams.rho):
        raise ValueError("spend needs a concrete hparams.rho (host-side accounting); call it outside jit.")
    return _spend_of(config, hparams.rho, config.delta)


def calibrate(config: Config, sizes: Any, target: Any, *, hparams: Hyperparams | None = None
              ) -> Hyperparams:
    """``hparams`` (default ``Hyperparams()``) with ``rho`` set so that ``spend(config, sizes,
    result).epsilon <= target epsilon``, tight to float32 (the largest float32 ``rho`` that meets it).

    ``target = (epsilon, delta)`` with ``delta = config.delta`` (``accounting.calibration_target``).
    The other fields of ``hparams`` are kept (the split of ``rho`` between the counts and the
    stages does not change the total). ``sizes`` as in :func:`spend`.

    Privacy: the returned run is ``(epsilon, delta)``-DP under ``config.relation``.
    """
    config.validate()
    _check_sizes(sizes)
    epsilon, delta = calibration_target(target, config.delta)
    if config.method == "nonprivate":
        raise ValueError("method='nonprivate' adds no noise and has no guarantee; nothing to calibrate.")
    base = Hyperparams() if hparams is None else hparams
    return dataclasses.replace(base, rho=float32_rho_for_epsilon(epsilon, delta, method=CONVERSION))
