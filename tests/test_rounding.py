"""Rounding errs on the safe side: float32 clipping, the analytic-Gaussian calibration, the
budget-tailoring sum table and the paper-001 Fig. 9 record (issue 25, item 5)."""

from __future__ import annotations

import itertools

import pytest

from dpfair_jax.privacy import accounting as A

mp = pytest.importorskip("mpmath")


def _balle_wang_delta(sigma: float, epsilon: float, sensitivity: float) -> "mp.mpf":
    """Balle & Wang (2018) Thm. 8 in 50-digit arithmetic (an independent reference)."""
    with mp.workdps(50):
        s, e, d = mp.mpf(sigma), mp.mpf(epsilon), mp.mpf(sensitivity)
        a, b = d / (2 * s), e * s / d
        return mp.ncdf(a - b) - mp.exp(e) * mp.ncdf(-a - b)


GRID = list(itertools.product([0.01, 0.1, 0.5, 1.0, 3.0, 10.0, 50.0], [1e-3, 1e-6, 1e-10, 1e-12], [1.0, 3.0]))


def test_analytic_gaussian_sigma_meets_delta_exactly():
    """The returned sigma's exact delta is at most the target (no tolerance), and the sigma is
    still within 1e-8 of the root."""
    for eps, delta, sens in GRID:
        s = A.analytic_gaussian_sigma(eps, delta, sens)
        assert _balle_wang_delta(s, eps, sens) <= delta, (eps, delta, sens, s)
        assert _balle_wang_delta(s * (1 - 1e-8), eps, sens) > delta, (eps, delta, sens, s)


def test_analytic_gaussian_epsilon_meets_delta_exactly():
    """The returned epsilon's exact delta at that sigma is at most the target (no tolerance)."""
    for eps, delta, sens in GRID:
        s = 1.01 * A.analytic_gaussian_sigma(eps, delta, sens)
        e = A.analytic_gaussian_epsilon(s, delta, sens)
        assert _balle_wang_delta(s, e, sens) <= delta, (eps, delta, sens, s, e)
        assert e < eps
