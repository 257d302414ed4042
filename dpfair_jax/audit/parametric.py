"""Parametric epsilon lower bounds for Gaussian attack statistics (host side, NumPy/SciPy).

When a game is built so that its attack statistic has a known law, a Gaussian of unknown shift and
scale released with (or without) a visible sampling indicator, the privacy curve of that statistic
is known exactly given the shift/scale ratio ``mu`` and the sampling rate ``q``. These bounds
estimate ``mu`` (and ``q``) from the trials with one-sided confidence limits and return the exact
epsilon of the statistic at the lower limits. Because the statistic is a post-processing of the
mechanism's output, that epsilon is a lower bound on the mechanism's epsilon (at the stated
confidence, and given the Gaussian form of the statistic, which the game's construction
guarantees). Compared with threshold counting (:mod:`~dpfair_jax.audit.lower_bounds`), the power
no longer saturates at ``log(trials)``: a noise scale off by a factor of two is visible with a few
thousand trials.

* :func:`subsampled_gaussian_bound`: hidden membership. World 1's statistic is
  ``(1 - q) N(0, s^2) + q N(a, s^2)``, world 0's ``N(0, s^2)`` (add/remove of a canary sampled with
  public probability ``q``); the curve is the Poisson-subsampled Gaussian's (dp-accounting PLD,
  optimistic rounding).
* :func:`visible_membership_bound`: membership visible. In the trials where the canary was sampled
  (a known indicator), world ``b``'s statistic is ``N(a_b, s^2)``; the curve is
  :func:`dpfair_jax.privacy.accounting.membership_visible_delta` with one step.

Confidence: the limits on ``mu`` and ``q`` are each taken at ``1 - (1 - confidence) / 2`` (union
bound), so the returned bound holds with probability at least ``confidence``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

from dpfair_jax import _validation as V

_MU_CAP = 6.0

__all__ = ["ParametricBound", "subsampled_gaussian_bound", "visible_membership_bound"]


class ParametricBound(NamedTuple):
    """``epsilon_lower_bound`` with the estimates behind it: ``mu_hat`` and its lower limit
    ``mu_low``, the sampling rate used (``q_low``: public, or a lower limit), and ``selection``."""

    epsilon_lower_bound: float
    mu_hat: float
    mu_low: float
    q_low: float
    selection: str


def _checked(a: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(a, np.float64).ravel()
    if a.size < 4 or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must hold at least 4 finite statistics.")
    return a


def _subsampled_gaussian_epsilon(mu: float, q: float, delta: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld

    if mu <= 0.0 or q <= 0.0:
        return 0.0
    # The curve increases with mu, so evaluating it at min(mu, _MU_CAP) keeps a lower bound; the
    # PLD of a sharper Gaussian needs a grid too fine to build, and the cap already gives an
    # epsilon (about 20 at q = 1/2, delta = 1e-5) beyond any claim an audit checks.
    mu = min(mu, _MU_CAP)
    dist = pld.from_gaussian_mechanism(1.0 / mu, pessimistic_estimate=False, sampling_prob=min(q, 1.0), use_connect_dots=False,
                                       value_discretization_interval=1e-4)
    return max(0.0, float(dist.get_epsilon_for_delta(delta)))


def subsampled_gaussian_bound(with_canary: np.ndarray, without: np.ndarray, sample_rate: float,
                              delta: float, confidence: float = 0.95) -> ParametricBound:
    """Lower bound for a statistic that is ``N(0, s^2)`` without the canary and the mixture
    ``(1 - q) N(0, s^2) + q N(a, s^2)`` with it (``q = sample_rate``, public).

    ``a`` is estimated by ``(mean_1 - mean_0) / q`` with a one-sided normal limit (standard error
    from the two sample variances), ``s`` by world 0's standard deviation with a chi-square upper
    limit; ``mu_low = a_low / s_high``.
    """
    x1, x0 = _checked(with_canary, "with_canary"), _checked(without, "without")
    V.check_sample_rate(sample_rate)
    V.check_delta(delta)
    c = 1.0 - (1.0 - float(confidence)) / 2.0
    q = float(sample_rate)
    diff = x1.mean() - x0.mean()
    se = math.sqrt(x1.var(ddof=1) / x1.size + x0.var(ddof=1) / x0.size)
    z = stats.norm.ppf(c)
    s_hat = x0.std(ddof=1)
    s_high = s_hat * math.sqrt((x0.size - 1) / stats.chi2.ppf(1.0 - c, x0.size - 1))
    mu_hat = diff / q / s_hat
    mu_low = max(0.0, (diff - z * se) / q / s_high)
    eps = _subsampled_gaussian_epsilon(mu_low, q, delta)
    return ParametricBound(eps, float(mu_hat), float(mu_low), q, "parametric_subsampled_gaussian")


def visible_membership_bound(with_canary: np.ndarray, without: np.ndarray, sampled_with: np.ndarray,
                             sampled_without: np.ndarray, delta: float,
                             confidence: float = 0.95) -> ParametricBound:
    """Lower bound when the sampling of the canary is visible: among sampled trials world ``b``'s
    statistic is ``N(a_b, s^2)``; unsampled trials carry nothing. ``mu = |a_1 - a_0| / s`` gets a
    one-sided limit from the pooled two-sample t statistic's normal approximation
    (``SE^2 = 1/n_1 + 1/n_0 + mu^2 / (2 (n_1 + n_0))``), ``q`` a Clopper-Pearson lower limit from
    the sampled fraction; the curve is one membership-visible step
    (:func:`dpfair_jax.privacy.accounting.membership_visible_epsilon`).
    """
    from dpfair_jax.audit.lower_bounds import clopper_pearson
    from dpfair_jax.privacy import accounting as A

    V.check_delta(delta)
    x1, x0 = np.asarray(with_canary, np.float64).ravel(), np.asarray(without, np.float64).ravel()
    m1, m0 = np.asarray(sampled_with, bool).ravel(), np.asarray(sampled_without, bool).ravel()
    if x1.shape != m1.shape or x0.shape != m0.shape:
        raise ValueError("sampled_with/sampled_without must match the statistics' shapes.")
    a1, a0 = x1[m1], x0[m0]
    if a1.size < 4 or a0.size < 4:
        return ParametricBound(0.0, float("nan"), 0.0, 0.0, "parametric_visible_membership")
    c = 1.0 - (1.0 - float(confidence)) / 2.0
    pooled = math.sqrt(((a1.size - 1) * a1.var(ddof=1) + (a0.size - 1) * a0.var(ddof=1))
                       / (a1.size + a0.size - 2))
    mu_hat = abs(a1.mean() - a0.mean()) / pooled
    se = math.sqrt(1.0 / a1.size + 1.0 / a0.size + mu_hat**2 / (2.0 * (a1.size + a0.size)))
    mu_low = max(0.0, mu_hat - stats.norm.ppf(c) * se)
    hits, total = int(m1.sum() + m0.sum()), m1.size + m0.size
    q_low = float(clopper_pearson(hits, total, c, side="lower")[0])
    if mu_low <= 0.0 or q_low <= 0.0:
        eps = 0.0
    else:
        part = A.participation_distribution(1, "poisson", sample_rate=q_low)
        eps = A.membership_visible_epsilon(mu_low, delta, part)
    return ParametricBound(float(eps), float(mu_hat), float(mu_low), q_low, "parametric_visible_membership")
