"""The sensitive-attribute unit's accounting (privacy.attribute): the membership-visible Renyi curve
against closed forms and numerical integration, the example-level curve carried to a change of one
s_i by the weak triangle inequality against the exact replace curve of a Gaussian, the run's curve
as the minimum of the three routes (the direct replace-one route against scipy's quadrature), the
selection against the kit's event-based selection accountant, and the (0, 0) spend."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import integrate, stats

from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import attribute as At
from dpfair_jax.privacy import selection as S

ORD = np.asarray([1.5, 2.0, 3.0, 8.0])


def test_membership_visible_rdp_point_mass_is_the_gaussian_closed_form():
    mu, k, extra = 0.3, 7.0, 0.2
    got = At.membership_visible_rdp(ORD, mu, (np.asarray([k]), np.asarray([1.0])), extra_mu=extra)
    np.testing.assert_allclose(got, ORD * (k * mu**2 + extra**2) / 2.0, rtol=1e-12)
    assert np.all(At.membership_visible_rdp(ORD, 0.0, (np.asarray([k]), np.asarray([1.0]))) == 0.0)


def test_membership_visible_rdp_matches_numerical_integration_of_the_joint():
    """D_alpha of (K, N(mu_K, 1)) vs (K, N(0, 1)), K ~ Bin(6, 0.3), by quadrature per k."""
    mu, T, q = 0.8, 6, 0.3
    part = A.participation_distribution(T, "poisson", sample_rate=q)
    got = At.membership_visible_rdp(ORD, mu, part)
    for a, g in zip(ORD, got):
        total = 0.0
        for k, p in zip(*part):
            m = math.sqrt(k) * mu
            f = lambda x: math.exp(a * stats.norm.logpdf(x, m) + (1 - a) * stats.norm.logpdf(x))  # noqa: E731
            total += p * integrate.quad(f, -20.0, 20.0 + a * m, limit=200)[0]
        assert g == pytest.approx(math.log(total) / (a - 1), rel=1e-7)


def test_weak_triangle_bounds_the_exact_replace_curve_of_a_gaussian():
    """A Gaussian sum of rows clipped to 1 with multiplier z: add/remove curve a / (2 z^2); replacing
    one row moves it by 2, exact curve 2 a / z^2. The carried curve is an upper bound, within 2x."""
    z = 1.7
    got = At.replace_rdp_from_add_remove(dp_accounting.GaussianDpEvent(z), ORD)
    exact = 2.0 * ORD / z**2
    assert np.all(got >= exact * (1 - 1e-9)) and np.all(got <= 2.0 * exact)
    np.testing.assert_allclose(got, (2 * ORD - 1) / (2 * (ORD - 1)) * (2 * ORD) / (2 * z**2)
                               + (2 * ORD - 1) / (2 * z**2), rtol=1e-9)
    assert np.all(np.isinf(At.replace_rdp_from_add_remove(None, ORD)))


def test_attribute_rdp_is_the_minimum_of_the_three_routes():
    """(c) for T Poisson steps (rate q, multiplier z) is T times the replace-one divergence of the
    antipodal mixtures, here by scipy.integrate.quad; it binds where (a) and (b) are looser."""
    q, z, T = 0.3, 1.5, 4
    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), T)
    part = At.poisson_participation(T, q)
    got = At.attribute_rdp(2.0 / z, part, example_event=ev, orders=ORD)
    m = 1.0 / z

    def log_mix(x, s):
        return np.logaddexp(math.log(q) + stats.norm.logpdf(x, s * m), math.log(1 - q) + stats.norm.logpdf(x))

    c = np.asarray([T * math.log(integrate.quad(
        lambda x: math.exp(a * log_mix(x, -1) + (1 - a) * log_mix(x, 1)),  # noqa: B023
        -a * m - 40, 40, limit=500, epsabs=0, epsrel=1e-13, points=[-a * m, 0.0])[0]) / (a - 1) for a in ORD])
    a_ = At.membership_visible_rdp(ORD, 2.0 / z, part)
    b = At.replace_rdp_from_add_remove(ev, ORD)
    want = np.minimum(a_, np.minimum(b, c))
    np.testing.assert_allclose(got, want, rtol=1e-8)
    assert np.all(got >= want) and np.all(c < np.minimum(a_, b))  # certified upward; (c) binds here


def test_selection_on_a_curve_equals_the_event_based_selection_accountant():
    """One unsubsampled Gaussian (multiplier z): the membership-visible curve at a point mass K = 1 is
    the Gaussian's curve, so the curve-based selection equals privacy.selection's on the event."""
    z, law, delta = 2.3, S.RandomStopping(mean=3.0, shape=1.0), 1e-6
    curve = At.membership_visible_rdp(At.ORDERS, 1.0 / z, (np.asarray([1.0]), np.asarray([1.0])))
    for lw in (law, None):
        assert At.attribute_selection_epsilon(curve, lw, delta) == pytest.approx(
            S.selection_epsilon(dp_accounting.GaussianDpEvent(z), lw, delta), rel=1e-9)
    assert At.attribute_selection_epsilon(np.zeros(len(At.ORDERS)), law, delta) == 0.0


def test_calibration_meets_its_target_tightly():
    part = A.participation_distribution(50, "poisson", sample_rate=0.05)
    law = S.RandomStopping(mean=2.0, shape=1.0)
    make = lambda z: At.attribute_rdp(At.shift(z, At.CLIPPED_SUM_FACTOR), part)  # noqa: E731
    z = At.calibrate_attribute_selection(make, law, 1.0, 1e-5, rtol=1e-3)
    assert At.attribute_selection_epsilon(make(z), law, 1e-5) <= 1.0
    assert At.attribute_selection_epsilon(make(z / 1.01), law, 1e-5) > 1.0


def test_shift_factors_and_zero_spend_record():
    assert At.shift(2.0, At.CLIPPED_SUM_FACTOR) == 1.0 and At.shift(0.0, 2.0) == math.inf
    assert At.amplified_multiplier(3.0, At.MOVED_CELL_FACTOR) == pytest.approx(3.0 / math.sqrt(2.0))
    sp = A.PrivacySpend(0.0, 0.0, relation="replace_one", unit="sensitive_attribute")
    assert sp.to_dict()["epsilon"] == 0.0
    with pytest.raises(ValueError, match="epsilon"):
        A.PrivacySpend(0.0, 1e-5)
    with pytest.raises(ValueError, match="privacy_unit"):
        At.check_unit("all_features")


def test_every_atom_of_the_participation_law_counts_at_high_orders():
    """Atoms of Bin(T, q) whose probability underflows still carry weight exp(a^2 k mu^2 / 2): the
    curve on the full law (log pmf) exceeds the one on a law with those atoms dropped."""
    full = At.poisson_participation(2000, 0.001)
    assert len(full[0]) == 2001 and np.all(np.isfinite(full[2]))
    dropped = A.participation_distribution(2000, "poisson", sample_rate=0.001)
    hi = np.asarray([512.0, 1024.0])
    assert np.all(At.membership_visible_rdp(hi, 0.5, full) > At.membership_visible_rdp(hi, 0.5, dropped) * 1.5)
    small = At.poisson_participation(30, 0.1)  # no atom underflows: (ks, pmf) gives the same curve
    np.testing.assert_allclose(At.membership_visible_rdp(ORD, 0.5, small),
                               At.membership_visible_rdp(ORD, 0.5, small[:2]), rtol=1e-9)
