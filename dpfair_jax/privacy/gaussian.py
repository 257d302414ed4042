"""Exact Gaussian calibration (Balle & Wang, ICML 2018) and the classical Gaussian sigma.
Host-side, float64 (re-exported by :mod:`dpfair_jax.privacy.accounting`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, special

from dpfair_jax import _validation as V



# ---------------------------------------------------------------------------------------------
# Exact Gaussian calibration (Balle & Wang 2018)
# ---------------------------------------------------------------------------------------------


def _log_delta_gaussian(sigma: float, epsilon: float, sensitivity: float) -> float:
    """log of Balle & Wang (2018) Thm. 8: Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    la = float(special.log_ndtr(a - b))
    lb = float(epsilon + special.log_ndtr(-a - b))
    if lb >= la:  # only at sigma -> inf (both terms underflow alike)
        return -math.inf
    return la + math.log(-math.expm1(lb - la))


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact delta of the Gaussian mechanism N(0, sigma^2) at epsilon (Balle & Wang 2018, Thm. 8)."""
    V.check_positive("sigma", sigma)
    V.check_epsilon(epsilon)
    V.check_positive("sensitivity", sensitivity)
    return math.exp(_log_delta_gaussian(float(sigma), float(epsilon), float(sensitivity)))


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest epsilon at which the Gaussian mechanism ``N(0, sigma^2)`` is (epsilon, delta)-DP
    (Balle & Wang 2018, Thm. 8; inverse of :func:`analytic_gaussian_delta` in epsilon).

    Solves ``analytic_gaussian_delta(sigma, epsilon, sensitivity) = delta`` (decreasing in
    epsilon) by Brent's method on ``log epsilon``; where even ``epsilon = 1e-12`` meets ``delta``
    (a very large ``sigma``), returns 1e-12. The root is stepped up until an upper bound of the
    float64 formula covering its rounding is at most ``delta`` (safe side by construction).

    Privacy: ``q(D) + N(0, sigma^2)`` with l2-sensitivity ``sensitivity`` is (epsilon, delta)-DP
    for the returned epsilon.
    """
    V.check_positive("sigma", sigma)
    V.check_delta(delta)
    V.check_positive("sensitivity", sensitivity)
    sig, sens = float(sigma), float(sensitivity)
    log_target = math.log(float(delta))
    g = lambda u: _log_delta_gaussian(sig, math.exp(u), sens) - log_target  # noqa: E731
    lo, hi = math.log(1e-12), 0.0
    if g(lo) <= 0.0:
        return 1e-12
    while g(hi) > 0.0:
        hi += 1.0
    u = optimize.brentq(g, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    # the root may land a few ulps on the side where delta exceeds the target: step up
    return _step_out(math.exp(u), lambda e: _delta_meets(sig, e, sens, float(delta)))


def _delta_meets(sigma: float, epsilon: float, sensitivity: float, delta: float) -> bool:
    """Whether the Balle-Wang delta at ``(sigma, epsilon)`` is at most ``delta``, judged on an
    upper bound of the float64 formula (:func:`_log_delta_gaussian`) that covers its rounding:
    the arguments ``a - b``, ``-a - b`` (error ``<= 4 eps64 (a + b)``, times the slope of
    ``log_ndtr``, ``<= |x| + 1``), the two ``log_ndtr`` values and the sum with ``epsilon`` (a
    few ulps each); ``expm1`` of their difference is where cancellation amplifies them, so the
    bound takes the larger ``la`` and the smaller ``lb``, then a final ``(1 + 16 eps64)``."""
    tiny = np.finfo(float).eps
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    arg = 4.0 * tiny * (a + b) * (a + b + 2.0)
    la = float(special.log_ndtr(a - b))
    lb = float(special.log_ndtr(-a - b) + epsilon)  # the same sum as _log_delta_gaussian's
    la_hi = la + 16.0 * tiny * (1.0 + abs(la)) + arg
    lb_lo = lb - 16.0 * tiny * (1.0 + abs(lb) + epsilon) - arg
    if not (math.isfinite(la_hi) and math.isfinite(lb_lo)):
        return False
    d_hi = math.exp(la_hi) * -math.expm1(min(lb_lo - la_hi, 0.0)) * (1.0 + 16.0 * tiny)
    return d_hi <= delta


def _step_out(x: float, ok: Callable[[float], bool], *, max_steps: int = 200) -> float:
    """The first of ``x``, ``x + 1 ulp``, ``x + 3 ulps``, ``x + 7 ulps``, ... (doubling steps
    upwards) with ``ok``; used after a root find so the returned value lies on the safe side of
    the root by construction. Raises ``ValueError`` when no step reaches it."""
    step = math.ulp(x)
    for _ in range(max_steps):
        if ok(x):
            return float(x)
        x, step = x + step, step * 2.0
    raise ValueError(f"could not step to the safe side of the root near {x!r}.")


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std making the Gaussian mechanism (epsilon, delta)-DP (Balle & Wang 2018).

    Solves the exact condition of Balle & Wang (ICML 2018), Theorem 8,
    ``Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) = delta`` for ``s`` (the left side
    decreases in ``s``) by Brent's method on ``log s`` and ``log delta``, evaluating the
    difference with ``log_ndtr`` and ``expm1`` so it stays accurate for large epsilon. This is
    the same calibration as their Algorithm 1 (which solves for ``s`` through
    ``alpha = sqrt(1 + v/2) -/+ sqrt(v/2)``); the tests compare the two. The root is then stepped
    up until an upper bound of the float64 formula that covers its rounding (:func:`_delta_meets`)
    is at most ``delta``, so the returned ``s`` errs on the safe side by construction.

    Privacy: ``q(D) + N(0, s^2)`` with l2-sensitivity ``sensitivity`` is (epsilon, delta)-DP,
    for any epsilon > 0 (no epsilon < 1 restriction, unlike :func:`classical_gaussian_sigma`).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_positive("sensitivity", sensitivity)
    eps, dlt, sens = float(epsilon), float(delta), float(sensitivity)
    log_target = math.log(dlt)
    g = lambda u: _log_delta_gaussian(math.exp(u), eps, sens) - log_target  # noqa: E731
    lo, hi = math.log(sens) - 1.0, math.log(sens) + 1.0
    while g(lo) < 0.0:
        lo -= 2.0
    while g(hi) > 0.0:
        hi += 2.0
    u = optimize.brentq(g, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    # the root may land a few ulps below the true sigma (delta above the target): step up
    return _step_out(math.exp(u), lambda s: _delta_meets(s, eps, sens, dlt))


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classical calibration ``sqrt(2 log(1.25/delta)) sensitivity / epsilon`` (Dwork & Roth Thm. A.1).

    Privacy: (epsilon, delta)-DP only for epsilon < 1; raises otherwise (use
    :func:`analytic_gaussian_sigma`).
    """
    V.check_epsilon(epsilon)
    V.check_delta(delta)
    V.check_positive("sensitivity", sensitivity)
    if epsilon >= 1.0:
        raise ValueError(
            f"the classical Gaussian calibration needs epsilon < 1, got {epsilon!r}; "
            "use analytic_gaussian_sigma."
        )
    return math.sqrt(2.0 * math.log(1.25 / delta)) * float(sensitivity) / float(epsilon)
