"""Host-side privacy accounting: dp-accounting wrappers, zCDP algebra, exact Gaussian calibration.

The one import point of the kit's accounting; the code lives in one module per concern:
:mod:`~dpfair_jax.privacy.events` (DP-SGD events, accountants, calibration),
:mod:`~dpfair_jax.privacy.membership` (membership-visible Gaussians),
:mod:`~dpfair_jax.privacy.zcdp` (zCDP algebra, :class:`ZcdpLedger`), :mod:`~dpfair_jax.privacy.gaussian` (exact Gaussian
calibration) and :mod:`~dpfair_jax.privacy.records` (:class:`PrivacySpend`).

Everything here runs on the host in float64 before any device code is traced (DESIGN.md,
"host accounting, device noise"). The outputs are plain Python floats (noise multipliers,
epsilons, rhos) that device code takes as array arguments.

Contents
--------
* DP-SGD style accounting on ``dp_accounting`` (RDP and PLD accountants):
  :func:`dpsgd_event`, :func:`epsilon_of_event` (:func:`epsilon_curve`: the accountant composed
  once, evaluated at many deltas), :func:`delta_of_event`, :func:`dpsgd_epsilon`,
  :func:`calibrate_noise_multiplier`, and for the algorithms' ``calibrate``: :func:`calibration_target`
  (the checked ``(epsilon, delta)`` target) and :func:`step_up_until` (a solved multiplier nudged up
  until the algorithm's own spend meets the target). Poisson sampling is accounted under add/remove-one
  neighbours; fixed-size batches drawn without replacement under replace-one neighbours; shuffled
  epochs without amplification (:func:`shuffled_event`: at most ``ceil(steps / steps_per_epoch)``
  composed Gaussians per record).
* zCDP (Bun & Steinke 2016): :func:`gaussian_rho`, :func:`gaussian_sigma_for_rho`,
  :func:`compose_rho`, :func:`pure_dp_to_rho`, :func:`zcdp_to_dp`, :func:`dp_to_rho`, and the
  :class:`ZcdpLedger` that checks named charges add up to a total. These accept arrays (one value
  per grid point of a study) and return float64 arrays elementwise, each element equal to the
  scalar path at that point; scalars stay Python floats.
* :func:`analytic_gaussian_sigma`: the exact Gaussian calibration of Balle & Wang (ICML 2018).
* :class:`PrivacySpend`: what one run spends, JSON-serialisable.
"""

from __future__ import annotations

from dpfair_jax.privacy.events import (
    BelowAccountantResolution,
    calibrate_noise_multiplier,
    calibration_target,
    delta_of_event,
    dpsgd_epsilon,
    dpsgd_event,
    effective_noise_multiplier,
    epsilon_of_event,
    epsilon_curve,
    shuffled_event,
    shuffled_participations,
    step_up_until,
)
from dpfair_jax.privacy.sampling import calibration_delta, truncated_spend
from dpfair_jax.privacy.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)
from dpfair_jax.privacy.membership import (
    calibrate_membership_visible,
    membership_visible_delta,
    membership_visible_epsilon,
    participation_distribution,
)
from dpfair_jax.privacy.records import ACCOUNTANTS, RELATIONS, SAMPLINGS, UNITS, PrivacySpend
from dpfair_jax.privacy.zcdp import (
    ZCDP_METHODS,  # noqa: F401
    compose_rho,
    dp_to_rho,
    gaussian_rho,
    gaussian_sigma_for_rho,
    pure_dp_to_rho,
    ZcdpLedger,
    zcdp_to_dp,
)

__all__ = [
    "ACCOUNTANTS",
    "SAMPLINGS",
    "RELATIONS",
    "UNITS",
    "dpsgd_event",
    "epsilon_of_event",
    "epsilon_curve",
    "delta_of_event",
    "dpsgd_epsilon",
    "BelowAccountantResolution",
    "calibrate_noise_multiplier",
    "calibration_delta",
    "calibration_target",
    "step_up_until",
    "truncated_spend",
    "effective_noise_multiplier",
    "gaussian_rho",
    "gaussian_sigma_for_rho",
    "compose_rho",
    "pure_dp_to_rho",
    "zcdp_to_dp",
    "dp_to_rho",
    "analytic_gaussian_sigma",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "classical_gaussian_sigma",
    "participation_distribution",
    "membership_visible_delta",
    "membership_visible_epsilon",
    "calibrate_membership_visible",
    "shuffled_participations",
    "shuffled_event",
    "PrivacySpend",
    "ZcdpLedger",
]
