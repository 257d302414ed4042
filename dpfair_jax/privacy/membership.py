"""Membership-visible subsampled Gaussians, accounted exactly as a binomial mixture of composed
Gaussians over the number of steps a record takes part in (:func:`participation_distribution`).
Host-side, float64 (re-exported by :mod:`dpfair_jax.privacy.accounting`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from dpfair_jax import _validation as V



# ---------------------------------------------------------------------------------------------
# Membership-visible subsampled Gaussians (exact, binomial mixture)
# ---------------------------------------------------------------------------------------------


def participation_distribution(
    steps: int, sampling: str, *, sample_rate: float | None = None, steps_per_epoch: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Law of ``K``, the number of steps in which one given record is in the batch: ``(ks, pmf)``.

    ``sampling="poisson"`` or ``"fixed_size"`` (each step an independent batch, the record in it
    with probability ``sample_rate``): ``K ~ Binomial(steps, sample_rate)``. ``"shuffle"``
    (disjoint batches of a fresh permutation per epoch of ``steps_per_epoch`` steps): a point mass
    at the largest possible count, ``ceil(steps / steps_per_epoch)`` (an upper bound: the privacy
    curve below increases with ``K``).
    """
    steps = V.check_int("steps", steps, minimum=1)
    V.check_choice("sampling", sampling, ("poisson", "fixed_size", "shuffle"))
    if sampling == "shuffle":
        spe = V.check_int("steps_per_epoch", steps_per_epoch, minimum=1)
        return np.asarray([math.ceil(steps / spe)], np.float64), np.ones(1, np.float64)
    V.check_sample_rate(sample_rate)
    from scipy import stats

    ks = np.arange(steps + 1, dtype=np.float64)
    logp = stats.binom.logpmf(ks, steps, float(sample_rate))
    keep = logp > -745.0  # exp underflows below this: those k carry no mass in float64
    return ks[keep], np.exp(logp[keep])


def _log_delta_gaussian_mu(epsilon: float, mu: np.ndarray) -> np.ndarray:
    """Vectorized ``log delta_G(eps; mu)`` of Balle & Wang (2018) Thm. 8 for a Gaussian of
    shift/std ``mu``: ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)`` (``-inf`` at ``mu = 0``)."""
    mu = np.asarray(mu, np.float64)
    out = np.full(mu.shape, -np.inf)
    pos = mu > 0
    m = mu[pos]
    la = special.log_ndtr(m / 2.0 - epsilon / m)
    lb = epsilon + special.log_ndtr(-m / 2.0 - epsilon / m)
    ok = lb < la
    res = np.full(m.shape, -np.inf)
    res[ok] = la[ok] + np.log(-np.expm1(lb[ok] - la[ok]))
    out[pos] = res
    return out


def membership_visible_delta(
    epsilon: float, mu_step: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0
) -> float:
    """Exact delta(epsilon) of Gaussian releases whose batch membership the adversary sees.

    In each step where the record is in the batch, its protected contribution is released by a
    Gaussian mechanism with shift/std ``mu_step`` (all Gaussians of one step combined:
    ``mu_step = sqrt(sum_j mu_j^2)``); in the other steps nothing about it is released, and which
    steps those are is visible (e.g. through an unnoised, public term of the update).
    ``extra_mu`` adds one unsubsampled Gaussian release (e.g. noisy counts). Given ``K = k`` the
    whole run is one Gaussian mechanism with ``mu_k = sqrt(k mu_step^2 + extra_mu^2)``, and ``K``
    has the same law under both neighbours, so

        delta(eps) = sum_k P(K = k) delta_G(eps; mu_k)

    exactly (no amplification by subsampling). ``participation``: :func:`participation_distribution`.
    """
    if not (math.isfinite(float(epsilon)) and float(epsilon) >= 0.0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}.")
    ks, pmf = participation
    mu = np.sqrt(ks * float(mu_step) ** 2 + float(extra_mu) ** 2)
    logd = _log_delta_gaussian_mu(float(epsilon), mu) + np.log(pmf)
    top = np.max(logd)
    if not np.isfinite(top):
        return 0.0
    return float(np.exp(top) * np.sum(np.exp(logd - top)))


def membership_visible_epsilon(
    mu_step: float, delta: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0
) -> float:
    """Smallest epsilon with :func:`membership_visible_delta` ``<= delta`` (``inf`` if ``mu_step``
    is infinite, i.e. zero noise)."""
    V.check_delta(delta)
    if not math.isfinite(mu_step) or not math.isfinite(extra_mu):
        return math.inf
    d = lambda e: membership_visible_delta(e, mu_step, participation, extra_mu=extra_mu)  # noqa: E731
    if d(0.0) <= delta:
        return 0.0
    hi = 1.0
    while d(hi) > delta:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    g = lambda e: math.log(max(d(e), 1e-320)) - math.log(delta)  # noqa: E731
    eps = optimize.brentq(g, 0.0 if hi == 1.0 else hi / 2.0, hi, xtol=1e-12, rtol=1e-10)
    # step up until the target holds (brentq may land on the wrong side by one ulp-scale step)
    while d(eps) > delta:
        eps *= 1.0 + 1e-9
    return float(eps)


def calibrate_membership_visible(
    target_epsilon: float, delta: float, participation: tuple[np.ndarray, np.ndarray], *, extra_mu: float = 0.0
) -> float:
    """Largest ``mu_step`` whose membership-visible run is (``target_epsilon``, ``delta``)-DP.

    ``delta(eps; mu_step)`` increases with ``mu_step``; solved by Brent's method on
    ``log mu_step``. Raises ``ValueError`` when ``extra_mu`` alone spends more than the target.
    """
    V.check_epsilon(target_epsilon)
    V.check_delta(delta)
    eps = float(target_epsilon)
    d = lambda m: membership_visible_delta(eps, m, participation, extra_mu=extra_mu)  # noqa: E731
    if d(0.0) > delta:
        raise ValueError(
            f"the fixed release (extra_mu={extra_mu!r}) alone exceeds (epsilon={eps!r}, delta={delta!r}); "
            "raise its noise (e.g. count_noise_multiplier) or the target."
        )
    lo, hi = 1e-3, 1.0
    while d(hi) <= delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            return float(lo)
    while d(lo) > delta:
        lo /= 2.0
        if lo < 1e-12:
            raise ValueError("no positive mu_step reaches the target; raise the target epsilon.")
    g = lambda u: math.log(max(d(math.exp(u)), 1e-320)) - math.log(delta)  # noqa: E731
    u = optimize.brentq(g, math.log(lo), math.log(hi), xtol=1e-12, rtol=1e-12)
    mu = math.exp(u)
    while d(mu) > delta:
        mu *= 1.0 - 1e-9
    return float(mu)
