"""privacy.replace_rdp: the Poisson-subsampled Gaussian's Renyi curve under replace-one by certified
quadrature, against dp-accounting's exact add/remove formula (the same quadrature on that pair),
scipy's adaptive quadrature on the replace pair, the closed forms at q = 1 and q = 0, dp-accounting's
replace-one PLD epsilon (a lower reference), the weak-triangle route, and the domination of every
2-D pair of rows of norm <= C by the antipodal 1-D pair."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as PLD
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from scipy import integrate, special, stats

from dpfair_jax.privacy import attribute as At
from dpfair_jax.privacy import replace_rdp as R

HIGH = [2.0, 3.0, 8.0, 32.0, 63.0, 128.0, 256.0, 1024.0]


def _add_remove_quadrature(q, z, orders):
    a = np.asarray(orders)
    m = 1.0 / z
    c = np.sqrt(2.0 * ((a - 1.0) * math.log(2.0) + 80.0))
    return R.mixture_rdp(a, ((1.0 - q, q), (0.0, m)), ((1.0,), (0.0,)), -m - c, a * m + c, min(0.1, 0.1 / m))


@pytest.mark.parametrize("q,z", [(0.01, 1.0), (0.1, 0.8), (0.3, 0.6), (0.001, 0.5), (0.5, 3.0)])
def test_quadrature_on_the_add_remove_pair_equals_dp_accountings_exact_integer_orders(q, z):
    """(1-q) N(0, 1) + q N(1/z, 1) vs N(0, 1): dp-accounting's exact binomial formula at integer
    orders up to 1024; the certified value is above it by at most the stated margins."""
    acc = dp_accounting.rdp.RdpAccountant(HIGH)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)))
    ref = np.asarray(acc._rdp)  # noqa: SLF001
    got = _add_remove_quadrature(q, z, HIGH)
    assert np.all(got >= ref * (1 - 1e-12))
    assert np.all(got <= ref * (1 + 2 * R.SAFETY_REL) + 2 * R.SAFETY_ABS + 1e-9 * ref)


def test_replace_pair_matches_adaptive_quadrature():
    """D_alpha(q N(-m) + (1-q) N(0) || q N(m) + (1-q) N(0)) by scipy.integrate.quad, both directions."""
    q, z = 0.2, 1.25
    m, orders = 1.0 / z, np.asarray([1.5, 2.0, 3.0, 8.0, 20.0])
    got = R.subsampled_gaussian_replace_rdp(q, z, orders)

    def log_mix(x, s):
        return np.logaddexp(math.log(q) + stats.norm.logpdf(x, s * m), math.log(1 - q) + stats.norm.logpdf(x))

    for a, g in zip(orders, got):
        for s in (1, -1):  # P(x) = Q(-x): both directions are the same number
            f = lambda x: math.exp(a * log_mix(x, -s) + (1 - a) * log_mix(x, s))  # noqa: E731,B023
            val = integrate.quad(f, -a * m - 40, 40, limit=500, epsabs=0, epsrel=1e-13,
                                 points=[-a * m, 0.0])[0]
            assert g == pytest.approx(math.log(val) / (a - 1), rel=1e-8)


def test_closed_forms_at_q_one_and_q_zero_and_the_convexity_cap():
    o = np.asarray(HIGH)
    np.testing.assert_allclose(R.subsampled_gaussian_replace_rdp(1.0, 1.7, o), o * 2.0 / 1.7**2, rtol=1e-15)
    np.testing.assert_allclose(R.replace_rdp_of_event(dp_accounting.GaussianDpEvent(1.7), o), o * 2.0 / 1.7**2)
    assert np.all(R.subsampled_gaussian_replace_rdp(0.0, 1.0, o) == 0.0)
    assert np.all(R.subsampled_gaussian_replace_rdp(1e-9, 1.0, o[:4]) < 1e-11)
    # the joint-convexity cap is an upper bound the quadrature stays under
    cap = np.logaddexp(math.log(0.95), math.log(0.05) + (o - 1) * o * 2.0) / (o - 1)
    assert np.all(R.subsampled_gaussian_replace_rdp(0.05, 1.0, o) <= cap * (1 + 1e-12))
    with pytest.raises(ValueError, match="sample_rate"):
        R.subsampled_gaussian_replace_rdp(1.5, 1.0, o)
    with pytest.raises(ValueError, match="orders"):
        R.subsampled_gaussian_replace_rdp(0.1, 1.0, [1.0])


def test_high_orders_are_stable_under_a_finer_grid(monkeypatch):
    o = np.asarray([64.0, 256.0, 1024.0])
    base = R.subsampled_gaussian_replace_rdp(0.05, 0.7, o)
    monkeypatch.setattr(R, "STEP", R.STEP / 4)
    monkeypatch.setattr(R, "MAX_POINTS", R.MAX_POINTS * 4)
    R._curve.cache_clear()  # noqa: SLF001
    try:
        fine = R.subsampled_gaussian_replace_rdp(0.05, 0.7, o)
    finally:
        R._curve.cache_clear()  # noqa: SLF001
    np.testing.assert_allclose(base, fine, rtol=1e-10)
    assert np.all(base < R._convexity_cap(o, 0.05, 0.7))  # noqa: SLF001 (computed, not capped)


def test_event_walk_sums_the_composition_and_refuses_the_unknown():
    o = np.asarray([2.0, 8.0, 40.0])
    q, z1, z2, T = 0.05, 1.2, 4.8, 30
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(z1), dp_accounting.GaussianDpEvent(z2)]))
    ev = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(50.0), dp_accounting.SelfComposedDpEvent(step, T),
                                        dp_accounting.NoOpDpEvent()])
    z_eff = (z1**-2 + z2**-2) ** -0.5
    want = T * R.subsampled_gaussian_replace_rdp(q, z_eff, o) + o * 2.0 / 50.0**2
    np.testing.assert_allclose(R.replace_rdp_of_event(ev, o), want, rtol=1e-12)
    assert np.all(np.isinf(R.replace_rdp_of_event(dp_accounting.NonPrivateDpEvent(), o)))
    assert np.all(np.isinf(R.replace_rdp_of_event(None, o)))
    lap = dp_accounting.ComposedDpEvent([step, dp_accounting.LaplaceDpEvent(1.0)])
    assert np.all(np.isinf(R.replace_rdp_of_event(lap, o)))
    assert np.all(R.replace_rdp_of_event(dp_accounting.NoOpDpEvent(), o) == 0.0)


@pytest.mark.parametrize("q,z,T", [(0.01, 1.0, 300), (0.1, 1.5, 100), (0.2, 3.0, 50)])
def test_composed_epsilon_is_above_the_replace_one_pld_and_below_the_weak_triangle(q, z, T):
    """dp-accounting's PLD (REPLACE_ONE, pessimistic) is a tight reference: the RDP conversion stays
    above it, within 25% (8-20% seen: the RDP-to-DP conversion's loss), and below the weak-triangle route (b)."""
    o = np.asarray(At.ORDERS)
    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), T)
    c = R.replace_rdp_of_event(ev, o)
    b = At.replace_rdp_from_add_remove(ev, o)
    fin = np.isfinite(b)
    assert fin.sum() > 50 and np.all(c[fin] <= b[fin])
    pld = PLD.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=1e-3,
                                      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    ref = pld.self_compose(T).get_epsilon_for_delta(1e-5)
    eps = _rdp.compute_epsilon(o, c, 1e-5)[0]
    assert ref <= eps <= 1.25 * ref
    assert eps < _rdp.compute_epsilon(o, b, 1e-5)[0]


def _renyi_2d(a, q, g, g2, lim=12.0, h=0.1):
    """D_alpha((1-q) N(0, I) + q N(g, I) || (1-q) N(0, I) + q N(g2, I)) on a 2-D grid (trapezoid)."""
    x = np.arange(-lim - a * 1.0, lim + h, h)
    y = np.arange(-lim, lim + h, h)
    X, Y = np.meshgrid(x, y, indexing="ij")

    def log_mix(c):
        far = -0.5 * ((X - c[0]) ** 2 + (Y - c[1]) ** 2)
        return np.logaddexp(math.log(1 - q) - 0.5 * (X**2 + Y**2), math.log(q) + far) - math.log(2 * math.pi)

    lv = a * log_mix(g) + (1 - a) * log_mix(g2)
    return (special.logsumexp(lv) + 2 * math.log(h)) / (a - 1)


def test_antipodal_pair_dominates_every_2d_pair_of_rows_of_norm_at_most_one():
    """Rows g, g' with |g|, |g'| <= 1/z (whitened), over a sweep of angles and norms: D_alpha of the
    2-D pair <= the 1-D antipodal value (which the 2-D quadrature reproduces at the antipode)."""
    q, z = 0.2, 1.0
    orders = np.asarray([2.0, 4.0, 8.0])
    one_d = R.subsampled_gaussian_replace_rdp(q, z, orders)
    for i, a in enumerate(orders):
        anti = _renyi_2d(a, q, (-1.0, 0.0), (1.0, 0.0))
        assert anti == pytest.approx(one_d[i], rel=1e-6)
        worst = 0.0
        for th in np.linspace(0.0, math.pi, 7):
            for r1 in (0.5, 1.0):
                for r2 in (0.0, 0.5, 1.0):
                    g = (-r1, 0.0)
                    g2 = (r2 * math.cos(th), r2 * math.sin(th))
                    worst = max(worst, _renyi_2d(a, q, g, g2), _renyi_2d(a, q, g2, g))
        assert worst <= one_d[i] * (1 + 1e-9)
        assert worst >= one_d[i] * (1 - 1e-6)  # the sweep contains the antipode
